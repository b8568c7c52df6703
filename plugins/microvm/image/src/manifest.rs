//! The image manifest, the content-addressed image id, and the checks the
//! probe and the engine run before booting an image.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The manifest schema version this crate writes and reads.
pub const FORMAT: u32 = 1;

/// File names inside an image directory.
pub const VMLINUX: &str = "vmlinux";
/// The uncompressed newc initramfs.
pub const INITRD: &str = "initrd.cpio";
/// The JSON manifest.
pub const MANIFEST: &str = "manifest.json";
/// The link (or one-line file) in the output directory naming the newest image.
pub const CURRENT: &str = "current";

/// Why an image's files cannot be read, or do not match their manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Reading a file to hash it.
    #[error("{}", .path.display())]
    Hash {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", .path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{}: manifest format {format} is not the supported {}; rebuild the image",
        .path.display(),
        FORMAT
    )]
    Format { path: PathBuf, format: u32 },
    #[error(
        "{}: sha256 {sha256} ({bytes} bytes) does not match the manifest's {want_sha256} ({want_bytes} bytes); \
         rebuild the image with `cc-microvm-image build`",
        .path.display()
    )]
    Mismatch {
        path: PathBuf,
        sha256: String,
        bytes: u64,
        want_sha256: String,
        want_bytes: u64,
    },
    #[error("{}: the directory name does not match the manifest's id {id}", .dir.display())]
    DirName { dir: PathBuf, id: String },
}

/// `DIR/<id>/manifest.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The kernel package; `sha256` is of the `.deb`.
    pub kernel: Package,
    /// The busybox package; `sha256` is of the `.deb`.
    pub busybox: Package,
    /// The agent that is `/init`.
    pub agent: Agent,
    /// Canonical module names in load order (also `/modules.order`).
    pub modules: Vec<String>,
    /// `initrd.cpio`.
    pub initrd: Artifact,
    /// `vmlinux`.
    pub vmlinux: Artifact,
    /// The kernel command line, without the per-host `tsc_early_khz=`.
    pub cmdline: String,
    /// When it was built, in unix seconds. Not part of the id.
    pub built: u64,
}

/// A Debian package the image was built from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// Package name, e.g. `linux-image-6.1.0-57-amd64`.
    pub package: String,
    /// Debian version, e.g. `6.1.192-3`.
    pub version: String,
    /// sha256 (hex) of the `.deb`.
    pub sha256: String,
}

/// The guest agent binary.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// sha256 (hex) of the binary.
    pub sha256: String,
    /// The host<->agent protocol version it speaks.
    pub protocol: u32,
}

/// A file of the image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// sha256 (hex) of the file.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// Lower-case hex sha256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Streams a file through sha256: `(hex, bytes)`.
pub fn sha256_file(path: &Path) -> Result<(String, u64), ManifestError> {
    let failed = |source| ManifestError::Hash {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(failed)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(failed)?;
        if n == 0 {
            return Ok((hex(&h.finalize()), total));
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
}

impl Manifest {
    /// The image id: sha256 over the artifact hashes, package versions,
    /// agent and command line, one labelled line each. `built` is left out
    /// so the same inputs give the same directory.
    pub fn id(&self) -> String {
        let m = self;
        let text = format!(
            "cc-microvm-image format {}\nkernel {} {} {}\nbusybox {} {} {}\nagent {} {}\nmodules {}\nvmlinux {} {}\ninitrd {} {}\ncmdline {}\n",
            m.format,
            m.kernel.package,
            m.kernel.version,
            m.kernel.sha256,
            m.busybox.package,
            m.busybox.version,
            m.busybox.sha256,
            m.agent.sha256,
            m.agent.protocol,
            m.modules.join(","),
            m.vmlinux.sha256,
            m.vmlinux.bytes,
            m.initrd.sha256,
            m.initrd.bytes,
            m.cmdline,
        );
        sha256_hex(text.as_bytes())
    }
}

/// Reads `dir/manifest.json` and re-hashes `vmlinux` and `initrd.cpio`
/// against it. When `dir`'s name looks like an image id it must also match
/// the manifest's, so a renamed or edited image is caught.
pub fn verify(dir: &Path) -> Result<Manifest, ManifestError> {
    let manifest = read(dir)?;
    for (name, want) in [(VMLINUX, &manifest.vmlinux), (INITRD, &manifest.initrd)] {
        let (sha, bytes) = sha256_file(&dir.join(name))?;
        if bytes != want.bytes || sha != want.sha256 {
            return Err(ManifestError::Mismatch {
                path: dir.join(name),
                sha256: sha,
                bytes,
                want_sha256: want.sha256.clone(),
                want_bytes: want.bytes,
            });
        }
    }
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if is_id(name) && name != manifest.id() {
        return Err(ManifestError::DirName {
            dir: dir.to_path_buf(),
            id: manifest.id(),
        });
    }
    Ok(manifest)
}

/// Reads and parses `dir/manifest.json` without hashing anything.
pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
    let path = dir.join(MANIFEST);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) => return Err(ManifestError::Read { path, source }),
    };
    let manifest: Manifest = match serde_json::from_str(&text) {
        Ok(manifest) => manifest,
        Err(source) => return Err(ManifestError::Parse { path, source }),
    };
    if manifest.format != FORMAT {
        return Err(ManifestError::Format {
            path,
            format: manifest.format,
        });
    }
    Ok(manifest)
}

/// The image directory that `out/current` names, if it names an existing
/// directory. `current` is a symlink, or on hosts without symlinks a file
/// holding the id.
pub fn current(out: &Path) -> Option<PathBuf> {
    let link = out.join(CURRENT);
    let name = match std::fs::read_link(&link) {
        Ok(target) => target.to_str()?.to_string(),
        Err(_) => std::fs::read_to_string(&link).ok()?.trim().to_string(),
    };
    if !is_id(&name) {
        return None;
    }
    let dir = out.join(name);
    dir.is_dir().then_some(dir)
}

/// Whether `s` has the shape of an image id (64 lower-case hex digits).
pub fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Manifest {
        Manifest {
            format: FORMAT,
            kernel: Package {
                package: "linux-image-6.1.0-57-amd64".into(),
                version: "6.1.192-3".into(),
                sha256: "14d219d01e1283261817d961dbb3895cb5b4288d0de10e0ba0632a0d993e15bf".into(),
            },
            busybox: Package {
                package: "busybox-static".into(),
                version: "1:1.35.0-4+deb12u1+b1".into(),
                sha256: "00".repeat(32),
            },
            agent: Agent {
                sha256: "11".repeat(32),
                protocol: 1,
            },
            modules: vec![
                "virtio".into(),
                "virtio_ring".into(),
                "virtio_console".into(),
            ],
            initrd: Artifact {
                sha256: sha256_hex(b"initrd"),
                bytes: 6,
            },
            vmlinux: Artifact {
                sha256: sha256_hex(b"vmlinux"),
                bytes: 7,
            },
            cmdline: "console=ttyS0 rdinit=/init quiet panic=-1 cryptomgr.notests".into(),
            built: 1,
        }
    }

    #[test]
    fn sha256_known_answer() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn id_is_stable_and_ignores_built() {
        let a = sample();
        let mut b = sample();
        b.built = 1_800_000_000;
        assert_eq!(a.id(), b.id());
        assert!(is_id(&a.id()));
        // Pinned: a change here changes every image directory name.
        assert_eq!(
            a.id(),
            "17bf2443e26c5ba0c75d1a988a59cecca712ce184ff8aef2dc574fe2d7a9d431"
        );
        for change in [
            |m: &mut Manifest| m.cmdline.push_str(" x"),
            |m: &mut Manifest| m.kernel.version.push('1'),
            |m: &mut Manifest| m.agent.protocol = 2,
            |m: &mut Manifest| m.modules.reverse(),
            |m: &mut Manifest| m.initrd.bytes += 1,
        ] {
            let mut c = sample();
            change(&mut c);
            assert_ne!(c.id(), a.id());
        }
    }

    #[test]
    fn json_round_trip_has_the_documented_shape() {
        let m = sample();
        let v: serde_json::Value = serde_json::to_value(&m).unwrap();
        for key in [
            "format", "kernel", "busybox", "agent", "modules", "initrd", "vmlinux", "cmdline",
            "built",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["agent"]["protocol"], 1);
        assert_eq!(v["initrd"]["bytes"], 6);
        let back: Manifest = serde_json::from_value(v).unwrap();
        assert_eq!(back, m);
    }

    fn write_image(out: &Path, m: &Manifest) -> PathBuf {
        let dir = out.join(m.id());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(VMLINUX), b"vmlinux").unwrap();
        std::fs::write(dir.join(INITRD), b"initrd").unwrap();
        std::fs::write(dir.join(MANIFEST), serde_json::to_vec(m).unwrap()).unwrap();
        dir
    }

    #[test]
    fn verify_accepts_intact_and_rejects_tampered_images() {
        let tmp = tempfile::tempdir().unwrap();
        let m = sample();
        let dir = write_image(tmp.path(), &m);
        assert_eq!(verify(&dir).unwrap(), m);

        std::fs::write(dir.join(INITRD), b"INITRD").unwrap();
        let err = verify(&dir).unwrap_err().to_string();
        assert!(
            err.contains("initrd.cpio") && err.contains("does not match"),
            "{err}"
        );

        // A valid image under a different id-shaped name is refused.
        let moved = tmp.path().join("ab".repeat(32));
        std::fs::create_dir(&moved).unwrap();
        std::fs::write(moved.join(VMLINUX), b"vmlinux").unwrap();
        std::fs::write(moved.join(INITRD), b"initrd").unwrap();
        std::fs::write(moved.join(MANIFEST), serde_json::to_vec(&m).unwrap()).unwrap();
        assert!(
            verify(&moved)
                .unwrap_err()
                .to_string()
                .contains("directory name")
        );

        // Any other name (an installed copy) is accepted.
        let installed = tmp.path().join("guest");
        std::fs::rename(&moved, &installed).unwrap();
        assert!(verify(&installed).is_ok());

        let mut future = m.clone();
        future.format = 2;
        std::fs::write(
            installed.join(MANIFEST),
            serde_json::to_vec(&future).unwrap(),
        )
        .unwrap();
        assert!(
            verify(&installed)
                .unwrap_err()
                .to_string()
                .contains("format 2")
        );
        assert!(verify(&tmp.path().join("missing")).is_err());
    }

    #[test]
    fn current_follows_a_link_or_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(current(tmp.path()), None);
        let m = sample();
        let dir = write_image(tmp.path(), &m);
        std::fs::write(tmp.path().join(CURRENT), format!("{}\n", m.id())).unwrap();
        assert_eq!(current(tmp.path()), Some(dir.clone()));
        std::fs::remove_file(tmp.path().join(CURRENT)).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(m.id(), tmp.path().join(CURRENT)).unwrap();
            assert_eq!(current(tmp.path()), Some(dir));
            std::fs::remove_file(tmp.path().join(CURRENT)).unwrap();
        }
        std::fs::write(tmp.path().join(CURRENT), "../etc").unwrap();
        assert_eq!(current(tmp.path()), None);
    }
}
