//! Where the server and its backends keep their own state on the host, one
//! definition for all of them: the host refuses a bind that would show these
//! to a sandbox (a VM template or another session's proxy socket is not a
//! sandbox's business), so it must know them as the backends do.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The name prefix of each session's private egress directory (its proxy
/// sockets), made directly in the temp dir.
pub const EGRESS_DIR_PREFIX: &str = "cc_server-egress-";

/// This user's private runtime directory (probe cache, VM templates, VM
/// runtime dirs): `$XDG_RUNTIME_DIR/cc_server` when that is absolute, else
/// `<temp dir>/cc_server-<uid>`. Pure: the caller passes the environment.
pub fn runtime_dir(uid: u32, xdg_runtime_dir: Option<&OsStr>, temp_dir: &Path) -> PathBuf {
    match xdg_runtime_dir {
        Some(runtime) if Path::new(runtime).is_absolute() => Path::new(runtime).join("cc_server"),
        _ => temp_dir.join(format!("cc_server-{uid}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_dir_prefers_an_absolute_xdg_runtime_dir() {
        let tmp = Path::new("/tmp");
        assert_eq!(
            runtime_dir(7, Some(OsStr::new("/run/user/7")), tmp),
            Path::new("/run/user/7/cc_server")
        );
        assert_eq!(
            runtime_dir(7, Some(OsStr::new("rel")), tmp),
            Path::new("/tmp/cc_server-7")
        );
        assert_eq!(runtime_dir(7, None, tmp), Path::new("/tmp/cc_server-7"));
    }
}
