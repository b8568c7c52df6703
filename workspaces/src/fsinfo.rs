//! What filesystem a path is on, and how much room it has: for the
//! refusal that names both filesystems of a clone that cannot reflink, and
//! the free-space check before one.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A filesystem, as a refusal names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    /// `xfs`, `btrfs`, `ext4`, `tmpfs`, … or the magic number.
    pub kind: String,
    /// Where it is mounted (the longest mount point holding the path).
    pub mount: PathBuf,
    /// Bytes free to an unprivileged writer.
    pub free: u64,
}

impl std::fmt::Display for FsInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} mounted at {}", self.kind, self.mount.display())
    }
}

/// The filesystem holding `path`.
// The statfs fields' types differ between architectures.
#[allow(clippy::unnecessary_cast)]
pub fn of(path: &Path) -> std::io::Result<FsInfo> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer statfs fills when it succeeds.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: initialised by the successful statfs above.
    let st = unsafe { st.assume_init() };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    Ok(FsInfo {
        kind: kind_name(st.f_type as i64),
        mount: mount_point(&mountinfo, path),
        free: (st.f_bavail as u64).saturating_mul(st.f_bsize as u64),
    })
}

/// The name of a filesystem magic number.
pub fn kind_name(magic: i64) -> String {
    match magic {
        0x5846_5342 => "xfs".into(),
        0x9123_683e => "btrfs".into(),
        0xef53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x794c_7630 => "overlayfs".into(),
        0x6969 => "nfs".into(),
        0x2fc1_2fc1 => "zfs".into(),
        0xf2f5_2010 => "f2fs".into(),
        other => format!("filesystem {other:#x}"),
    }
}

/// The longest mount point in a `/proc/self/mountinfo` text that holds
/// `path`. Pure.
pub fn mount_point(mountinfo: &str, path: &Path) -> PathBuf {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let oct = &field[i + 1..(i + 4).min(field.len())];
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_mount_point_holding_the_path_wins() {
        let info = "22 1 254:0 / / rw - ext4 /dev/vda rw\n\
                    40 22 7:0 / /mnt/x\\040y rw - xfs /dev/loop0 rw\n\
                    41 22 7:1 / /mnt/b rw - btrfs /dev/loop1 rw\n";
        assert_eq!(
            mount_point(info, Path::new("/mnt/x y/a")),
            PathBuf::from("/mnt/x y")
        );
        assert_eq!(mount_point(info, Path::new("/mnt/bb")), PathBuf::from("/"));
        assert_eq!(
            mount_point(info, Path::new("/mnt/b/c")),
            PathBuf::from("/mnt/b")
        );
        assert_eq!(kind_name(0x5846_5342), "xfs");
    }
}
