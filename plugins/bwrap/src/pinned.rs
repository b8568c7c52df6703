//! Every bind of a plan made from a descriptor (SPEC G5, threat model T40):
//! the plan names each source by the canonical path it checked; the launch
//! opens that path once, no symlink followed (`sandbox_paths::jail::pin`),
//! and hands bubblewrap the descriptor (`--bind-fd`, `--ro-bind-fd`).
//!
//! bubblewrap 0.8 mounts the path the descriptor's magic link names and
//! then compares the mounted object with the descriptor's (device and
//! inode), failing the launch on a difference: what a sandbox shows is the
//! object that was checked, or nothing. A symlink swapped into a source's
//! path after the check fails the launch here, before bubblewrap starts.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// The first descriptor number bubblewrap gets a source at (above the
/// control socket, the `.gitconfig` and the egress channel).
pub const FIRST_SOURCE_FD: i32 = 10;

/// A plan's arguments with each `--bind`/`--ro-bind` source replaced by a
/// descriptor number, and the sources in that order (the `i`th at
/// `FIRST_SOURCE_FD + i`). Pure. Only bubblewrap's own arguments (before
/// `--`) are read; a flag the plan never emits is an error, so nothing is
/// misread as a path.
pub fn by_descriptor(args: &[OsString]) -> Result<(Vec<OsString>, Vec<PathBuf>), String> {
    let mut out = Vec::with_capacity(args.len());
    let mut sources = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let flag = arg.to_str().unwrap_or("");
        let arity = match flag {
            "--" => {
                out.push(arg.clone());
                out.extend(rest.cloned());
                break;
            }
            "--bind" | "--ro-bind" => {
                let source = rest
                    .next()
                    .ok_or_else(|| format!("{flag} lacks its source"))?;
                let number = FIRST_SOURCE_FD
                    + i32::try_from(sources.len()).map_err(|_| "too many binds".to_owned())?;
                out.push(OsString::from(format!("{flag}-fd")));
                out.push(OsString::from(number.to_string()));
                sources.push(PathBuf::from(source));
                1
            }
            "--symlink" | "--file" => {
                out.push(arg.clone());
                2
            }
            "--cap-drop" | "--cap-add" | "--proc" | "--dev" | "--remount-ro" | "--size"
            | "--tmpfs" | "--dir" => {
                out.push(arg.clone());
                1
            }
            _ if is_switch(arg) => {
                out.push(arg.clone());
                0
            }
            _ => return Err(format!("unexpected bwrap argument {arg:?}")),
        };
        for _ in 0..arity {
            out.push(
                rest.next()
                    .ok_or_else(|| format!("{flag} lacks its argument"))?
                    .clone(),
            );
        }
    }
    Ok((out, sources))
}

/// bubblewrap's flags without an argument that plans use.
fn is_switch(arg: &OsStr) -> bool {
    crate::plan::SWITCHES.iter().any(|s| arg == *s)
}

/// Opens every source, in order (I/O): a symlink in one is a change since
/// the plan checked it, and the launch is refused with its path.
pub fn open(sources: &[PathBuf]) -> Result<Vec<OwnedFd>, sandbox_paths::jail::PinError> {
    sources
        .iter()
        .map(|s| sandbox_paths::jail::pin(s))
        .collect()
}

/// Makes the directory `path` (a canonical spelling) inside its parent
/// pinned with no symlink followed: a parent swapped for a symlink gets
/// nothing made through it.
pub fn make_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let dir = sandbox_paths::jail::pin(parent).map_err(|e| std::io::Error::other(e.to_string()))?;
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a descriptor we hold and a NUL-terminated name.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn binds_become_descriptors_and_the_rest_stays() {
        let args = os(&[
            "--unshare-user",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--size",
            "1",
            "--tmpfs",
            "/tmp",
            "--bind",
            "/w",
            "/work",
            "--",
            "/.sandbox-init",
            "--bind",
            "x",
        ]);
        let (out, sources) = by_descriptor(&args).unwrap();
        assert_eq!(
            out,
            os(&[
                "--unshare-user",
                "--ro-bind-fd",
                "10",
                "/usr",
                "--symlink",
                "usr/bin",
                "/bin",
                "--size",
                "1",
                "--tmpfs",
                "/tmp",
                "--bind-fd",
                "11",
                "/work",
                "--",
                "/.sandbox-init",
                "--bind",
                "x",
            ])
        );
        assert_eq!(sources, [PathBuf::from("/usr"), PathBuf::from("/w")]);
    }

    #[test]
    fn a_directory_is_made_only_through_a_parent_with_no_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        make_dir(&root.join("real/hooks")).unwrap();
        assert!(root.join("real/hooks").is_dir());
        assert!(make_dir(&root.join("link/other")).is_err());
        assert!(!root.join("real/other").exists());
    }

    #[test]
    fn an_unknown_flag_or_a_missing_argument_is_an_error() {
        assert!(by_descriptor(&os(&["--bind-try", "/a", "/b"])).is_err());
        assert!(by_descriptor(&os(&["--bind", "/a"])).is_err());
    }
}
