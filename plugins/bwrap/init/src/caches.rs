//! The cache overlays (SPEC G4; threat model T27): the host's tool caches
//! (cargo's registry and its lock files, `~/.npm`, `~/.cache/pip`, …)
//! readable and writable inside, while nothing written reaches the host.
//!
//! bubblewrap 0.8 has no `--overlay`, and copying a registry per sandbox is
//! too slow, so PID 1 mounts them itself in its own user and mount
//! namespace (`crate::layout`), where it holds `CAP_SYS_ADMIN`:
//! 1. a tmpfs at the staging path, capped at `sizeBytes` (mode 0700): every
//!    overlay's upper and work directories, so all writes of all caches
//!    together take at most that much memory, and none lands on the host;
//! 2. in each upper directory, a whiteout (a 0/0 character device) for each
//!    `hidden` name — the cache's credential files: the lower file does not
//!    exist inside, now or if the host creates it later (an overlay reads
//!    its lower directory directly, so bubblewrap's masks on it would not
//!    carry over);
//! 3. the overlay at `point`, its lower directory the host's, which
//!    bubblewrap bound read-only at that very path (the overlay covers it);
//! 4. each `readOnly` directory inside it (the tool's binaries) re-bound
//!    read-only onto itself: it stays exec-able, while the overlay itself
//!    is remounted `noexec` with every writable mount (unless it lies
//!    beneath an exec grant: `exec`);
//! 5. the staging tmpfs detached: the overlays keep their own reference to
//!    it, and no path leads to the upper directories any more.

use std::ffi::CString;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::mount::{mount_fs as mount, read_only_bind};

/// What PID 1 is told (`--caches JSON`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheOverlays {
    /// The cap of the tmpfs holding every overlay's writes.
    pub size_bytes: u64,
    /// An empty directory bubblewrap made, where that tmpfs is mounted
    /// while the overlays are set up.
    pub staging: String,
    /// Parents before children.
    pub overlays: Vec<CacheOverlay>,
}

/// One cache.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheOverlay {
    /// Where it is, inside and on the host (bound read-only there).
    pub point: String,
    /// Absolute directories inside it kept read-only (and exec-able).
    pub read_only: Vec<String>,
    /// Names relative to `point` hidden by a whiteout.
    pub hidden: Vec<String>,
    /// Left exec-able (it lies beneath an exec grant).
    pub exec: bool,
}

/// The step that failed; the launch fails with it.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("mounting the {size_bytes}-byte tmpfs for the cache overlays at {staging}")]
    Tmpfs {
        staging: String,
        size_bytes: u64,
        #[source]
        source: io::Error,
    },
    #[error("preparing the overlay of {point} ({what})")]
    Prepare {
        point: String,
        what: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "mounting the cache overlay at {point} (set `toolchains = false` under [backends.bwrap] to run without)"
    )]
    Overlay {
        point: String,
        #[source]
        source: io::Error,
    },
    #[error("keeping {dir} read-only inside the cache overlay")]
    ReadOnly {
        dir: String,
        #[source]
        source: io::Error,
    },
    #[error("detaching the staging tmpfs {staging}")]
    Detach {
        staging: String,
        #[source]
        source: io::Error,
    },
    #[error("the cache path {0} cannot be passed to overlayfs (`,`, `:`, `\\` or a NUL)")]
    BadPath(String),
}

impl CacheOverlays {
    /// The mount points left exec-able.
    pub fn exec_points(&self) -> Vec<String> {
        self.overlays
            .iter()
            .filter(|o| o.exec)
            .map(|o| o.point.clone())
            .collect()
    }

    /// Mounts every overlay (see the module doc).
    pub fn mount(&self) -> Result<(), CacheError> {
        if self.overlays.is_empty() {
            return Ok(());
        }
        let staging = Path::new(&self.staging);
        let options = format!("size={},mode=0700", self.size_bytes);
        mount(
            Some("tmpfs"),
            &self.staging,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&options),
        )
        .map_err(|source| CacheError::Tmpfs {
            staging: self.staging.clone(),
            size_bytes: self.size_bytes,
            source,
        })?;
        for (i, overlay) in self.overlays.iter().enumerate() {
            let upper = staging.join(format!("{i}/upper"));
            let work = staging.join(format!("{i}/work"));
            let prepare = |what: String| {
                let point = overlay.point.clone();
                move |source| CacheError::Prepare {
                    point,
                    what,
                    source,
                }
            };
            for dir in [&upper, &work] {
                std::fs::create_dir_all(dir).map_err(prepare(dir.display().to_string()))?;
            }
            for name in &overlay.hidden {
                let at = upper.join(name);
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(prepare(parent.display().to_string()))?;
                }
                whiteout(&at).map_err(prepare(format!("a whiteout for {name}")))?;
            }
            for path in [&overlay.point, &upper.display().to_string()] {
                if path.contains([',', ':', '\\']) {
                    return Err(CacheError::BadPath(path.clone()));
                }
            }
            let data = format!(
                "lowerdir={},upperdir={},workdir={},userxattr",
                overlay.point,
                upper.display(),
                work.display()
            );
            mount(
                Some("overlay"),
                &overlay.point,
                Some("overlay"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(&data),
            )
            .map_err(|source| CacheError::Overlay {
                point: overlay.point.clone(),
                source,
            })?;
            for dir in &overlay.read_only {
                let flags = libc::MS_REMOUNT
                    | libc::MS_BIND
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV;
                read_only_bind(dir, flags).map_err(|source| CacheError::ReadOnly {
                    dir: dir.clone(),
                    source,
                })?;
            }
        }
        let target = c_string(&self.staging).map_err(|source| CacheError::Detach {
            staging: self.staging.clone(),
            source,
        })?;
        // SAFETY: a lazy unmount of a path passed as a valid C string.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            return Err(CacheError::Detach {
                staging: self.staging.clone(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }
}

fn c_string(text: &str) -> io::Result<CString> {
    CString::new(text).map_err(io::Error::other)
}

/// An overlayfs whiteout: a character device 0/0 (no capability needed).
fn whiteout(at: &Path) -> io::Result<()> {
    let path = c_string(&at.display().to_string())?;
    // SAFETY: mknod of a valid C string path; a 0/0 device is a whiteout.
    if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR, libc::makedev(0, 0)) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_round_trips_and_refuses_unknown_fields() {
        let config = CacheOverlays {
            size_bytes: 1 << 30,
            staging: "/.sandbox-caches".into(),
            overlays: vec![CacheOverlay {
                point: "/home/u/.cargo".into(),
                read_only: vec!["/home/u/.cargo/bin".into()],
                hidden: vec!["credentials.toml".into()],
                exec: false,
            }],
        };
        let text = serde_json::to_string(&config).unwrap();
        assert_eq!(
            serde_json::from_str::<CacheOverlays>(&text).unwrap(),
            config
        );
        assert!(
            serde_json::from_str::<CacheOverlays>(
                r#"{"sizeBytes":1,"staging":"/s","overlays":[],"x":1}"#
            )
            .is_err()
        );
        assert!(config.exec_points().is_empty());
    }
}
