//! The masks over secrets and hidden directories (SPEC C1's read denies),
//! mounted by PID 1 in its own mount namespace rather than by bubblewrap:
//! bubblewrap re-reads and parses `/proc/self/mountinfo` for every bind it
//! makes, so eight `/dev/null` binds over `/etc/shadow` and the ssh host
//! keys cost milliseconds of every start, many times what the two
//! `mount(2)` calls each takes below cost (docs/measurements.md).
//!
//! They hold as bubblewrap's did: no command has a capability or may make a
//! user namespace (`crate::layout`), so none can unmount or remount them,
//! and they are mounted before anything else runs in the sandbox.

use std::io;

use crate::mount::{mount_fs, remount};

/// What to mask: files get `/dev/null` (read-only, no devices: opening one
/// is refused, as bubblewrap's `--ro-bind /dev/null` was), directories an
/// empty read-only tmpfs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Masks {
    pub files: Vec<String>,
    pub dirs: Vec<String>,
}

/// The cap of each directory mask's tmpfs (SPEC G6: no tmpfs unbounded),
/// room for directory entries only: it is read-only and stays empty.
pub const DIR_MASK_BYTES: u64 = 64 << 10;

/// A mask that could not be mounted; the launch fails with it.
#[derive(Debug, thiserror::Error)]
#[error("masking {point}")]
pub struct MaskError {
    pub point: String,
    #[source]
    pub source: io::Error,
}

impl Masks {
    /// Mounts every mask; `file_flags` remount each `/dev/null` bind
    /// (`crate::layout::null_device_flags`). A point that no longer exists
    /// is skipped: there is nothing left to hide.
    pub fn mount(&self, file_flags: libc::c_ulong) -> Result<(), MaskError> {
        let fail = |point: &str| {
            let point = point.to_owned();
            move |source| MaskError { point, source }
        };
        for point in &self.files {
            if missing(point) {
                continue;
            }
            mount_fs(Some("/dev/null"), point, None, libc::MS_BIND, None).map_err(fail(point))?;
            remount(point, file_flags).map_err(fail(point))?;
        }
        let options = format!("size={DIR_MASK_BYTES},mode=0755");
        let dir_flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        for point in &self.dirs {
            if missing(point) {
                continue;
            }
            mount_fs(
                Some("tmpfs"),
                point,
                Some("tmpfs"),
                dir_flags,
                Some(&options),
            )
            .map_err(fail(point))?;
        }
        Ok(())
    }
}

fn missing(point: &str) -> bool {
    std::fs::symlink_metadata(point).is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
}
