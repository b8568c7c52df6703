//! Where the guest image is, and whether it is whole (docs/research/microvm.md
//! §4.3). Images are built by `cc-microvm-image build` into a directory of
//! content-addressed images with `current` naming the newest; the probe
//! boots nothing that does not match its manifest.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sandbox_microvm_image::manifest::ManifestError;
use serde::{Deserialize, Serialize};

/// Where images are looked for; beats `[backends.microvm] images`.
pub const IMAGES_ENV: &str = "CC_SERVER_MICROVM_IMAGES";

/// How to make one.
pub const BUILD_HINT: &str = "build one with `RUSTFLAGS='-C target-feature=+crt-static' cargo build --release -p sandbox-microvm-agent --target x86_64-unknown-linux-gnu && cargo run --release -p sandbox-microvm-image -- build --agent target/x86_64-unknown-linux-gnu/release/cc-microvm-agent --out DIR` and point `[backends.microvm] images` (or CC_SERVER_MICROVM_IMAGES) at DIR";

/// Why there is no image to boot.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("no images directory (HOME is not set); {}", BUILD_HINT)]
    NoImagesDir,
    #[error("no guest image in {} (nothing names a current one); {}", .images.display(), BUILD_HINT)]
    NoCurrent { images: PathBuf },
    #[error("the guest image is damaged")]
    Damaged(#[source] ManifestError),
    #[error(
        "the guest image's agent speaks protocol {image}, this backend {ours}; {}",
        BUILD_HINT
    )]
    Protocol { image: u32, ours: u32 },
}

/// An [`ImageError`] as the probe reports it: its whole chain as text, as
/// the probe's findings are kept across server starts (`crate::cache`) and
/// an error's sources are not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(transparent)]
#[error("{0}")]
pub struct NoImage(pub String);

impl From<ImageError> for NoImage {
    fn from(e: ImageError) -> Self {
        Self(sandbox_plugin_api::error_chain(&e))
    }
}

/// A verified image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    pub dir: PathBuf,
    pub vmlinux: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
    /// The manifest's id (the directory name).
    pub id: String,
    /// The agent protocol the image's agent speaks.
    pub protocol: u32,
}

/// The images directory: the environment, the config, else
/// `~/.local/share/cc_server/microvm-images`.
pub fn images_dir(options: &serde_json::Value, env: Option<&str>) -> Option<PathBuf> {
    if let Some(dir) = env.filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = options.get("images").and_then(|v| v.as_str()) {
        return Some(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")?;
    Some(Path::new(&home).join(".local/share/cc_server/microvm-images"))
}

/// What the verification depends on, cheaply (no hashing): the image
/// `current` names and the size and mtime of its files. Part of the probe
/// cache's key, so a rebuilt or altered image is verified again.
pub fn signature(images: &Path) -> String {
    let Some(dir) = sandbox_microvm_image::manifest::current(images) else {
        return format!("{}:none", images.display());
    };
    let stat = |name: &str| match std::fs::metadata(dir.join(name)) {
        Ok(m) => format!("{}:{}.{}", m.size(), m.mtime(), m.mtime_nsec()),
        Err(_) => "?".to_owned(),
    };
    use sandbox_microvm_image::manifest::{INITRD, MANIFEST, VMLINUX};
    format!(
        "{} {} {} {}",
        dir.display(),
        stat(MANIFEST),
        stat(VMLINUX),
        stat(INITRD)
    )
}

/// The current image in `images`, verified against its manifest.
pub fn find(images: &Path) -> Result<Found, ImageError> {
    let dir =
        sandbox_microvm_image::manifest::current(images).ok_or_else(|| ImageError::NoCurrent {
            images: images.to_path_buf(),
        })?;
    let manifest = sandbox_microvm_image::manifest::verify(&dir).map_err(ImageError::Damaged)?;
    if manifest.agent.protocol != sandbox_microvm_proto::VERSION {
        return Err(ImageError::Protocol {
            image: manifest.agent.protocol,
            ours: sandbox_microvm_proto::VERSION,
        });
    }
    Ok(Found {
        vmlinux: dir.join(sandbox_microvm_image::manifest::VMLINUX),
        initrd: dir.join(sandbox_microvm_image::manifest::INITRD),
        cmdline: manifest.cmdline.clone(),
        id: manifest.id(),
        protocol: manifest.agent.protocol,
        dir,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_images_dir_comes_from_the_env_then_the_config_then_home() {
        assert_eq!(
            images_dir(&json!({"images": "/cfg"}), Some("/env")),
            Some(PathBuf::from("/env"))
        );
        assert_eq!(
            images_dir(&json!({"images": "/cfg"}), None),
            Some(PathBuf::from("/cfg"))
        );
        let home = images_dir(&json!({}), Some("")).unwrap();
        assert!(home.ends_with(".local/share/cc_server/microvm-images"));
    }

    #[test]
    fn a_missing_image_says_how_to_build_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = find(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("no guest image") && e.contains("sandbox-microvm-image -- build"),
            "{e}"
        );
        assert!(signature(dir.path()).ends_with(":none"));
    }
}
