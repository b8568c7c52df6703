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

/// The file in a per-server runtime directory that names the server
/// owning it: `<pid> <start time>` (the start time in clock ticks since
/// boot, field 22 of `/proc/<pid>/stat`), so a later start can tell a
/// killed server's directory from a live one's even after the pid is
/// reused.
pub const OWNER_FILE: &str = ".owner";

/// This process's [`OWNER_FILE`] line, if `/proc` can say.
pub fn own_owner_line() -> Option<String> {
    let pid = std::process::id();
    let start = start_time(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
    Some(format!("{pid} {start}\n"))
}

/// Writes [`OWNER_FILE`] into `dir` (which this process just made).
pub fn write_owner(dir: &Path) -> std::io::Result<()> {
    let line =
        own_owner_line().ok_or_else(|| std::io::Error::other("/proc/self/stat is unreadable"))?;
    std::fs::write(dir.join(OWNER_FILE), line)
}

/// Field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name
/// may hold spaces and parentheses, so fields are counted after the last
/// `)`.
pub fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so starttime is the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner an [`OWNER_FILE`] names is provably gone: its pid runs
/// nothing, or something started at another time. `start_of(pid)` is that
/// pid's start time now (`None`: no such process). A missing or unreadable
/// owner is not proof: such a directory is kept.
pub fn owner_is_gone(owner: Option<&str>, start_of: &dyn Fn(u32) -> Option<u64>) -> bool {
    let Some((pid, start)) = owner.and_then(|text| {
        let mut words = text.split_whitespace();
        let pid = words.next()?.parse::<u32>().ok()?;
        let start = words.next()?.parse::<u64>().ok()?;
        Some((pid, start))
    }) else {
        return false;
    };
    start_of(pid) != Some(start)
}

/// Removes the directories named `<prefix>…` directly in `parent` that this
/// user owns and whose [`OWNER_FILE`] names a server that is gone; returns
/// those removed. A live server's, or one without a readable owner, stays.
pub fn sweep_gone_owners(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let start_of = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(start_time)
    };
    let mut removed = Vec::new();
    // `/proc/self` belongs to this process's effective uid.
    let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return removed;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return removed;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_dir() || meta.uid() != uid {
            continue;
        }
        let owner = std::fs::read_to_string(path.join(OWNER_FILE)).ok();
        if owner_is_gone(owner.as_deref(), &start_of) && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(start_time(stat), Some(987654));
        assert_eq!(start_time("42 (x) S 1"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(start_time(&own).is_some());
    }

    #[test]
    fn only_a_provably_gone_owner_is_gone() {
        let live = |pid: u32| (pid == 10).then_some(500);
        assert!(!owner_is_gone(Some("10 500\n"), &live), "live, same start");
        assert!(owner_is_gone(Some("10 499\n"), &live), "pid reused");
        assert!(owner_is_gone(Some("11 500\n"), &live), "no such process");
        assert!(!owner_is_gone(None, &live), "no owner file: kept");
        assert!(!owner_is_gone(Some("garbage"), &live));
        assert!(!owner_is_gone(Some("11"), &live));
    }

    #[test]
    fn a_sweep_removes_a_gone_servers_dir_and_keeps_a_live_ones() {
        let parent = tempfile_dir();
        let make = |name: &str, owner: Option<&str>| {
            let dir = parent.join(name);
            std::fs::create_dir(&dir).unwrap();
            if let Some(owner) = owner {
                std::fs::write(dir.join(OWNER_FILE), owner).unwrap();
            }
            dir
        };
        let live = make("p-live", own_owner_line().as_deref());
        let gone = make("p-gone", Some(&format!("{} 1\n", std::process::id())));
        let unknown = make("p-unknown", None);
        let other = make("q-gone", Some("1 1\n"));
        let removed = sweep_gone_owners(&parent, "p-");
        assert_eq!(removed, vec![gone.clone()]);
        assert!(live.exists() && unknown.exists() && other.exists());
        assert!(!gone.exists());
        std::fs::remove_dir_all(&parent).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "state-dirs-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

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
