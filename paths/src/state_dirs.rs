//! Where the server and its backends keep their own state on the host, one
//! definition for all of them: the host refuses a bind at or inside these,
//! and a backend hides them inside a bind that holds them (a VM template or
//! another session's proxy socket is not a sandbox's business), so both
//! must know them as the backends do. Everything lives in one directory, the
//! runtime dir, so one mask hides it all, present and future.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name prefix of each session's private egress directory (its proxy
/// sockets), made directly in the runtime dir ([`own_runtime_dir`]; before,
/// in the temp dir, where a start still sweeps what a gone server left).
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

/// This process's runtime dir ([`runtime_dir`] of its effective uid, its
/// `XDG_RUNTIME_DIR` and temp dir), created 0700 when missing. Refused,
/// naming it and why, unless it is a directory of ours (not a link) nobody
/// else may enter: what is kept there must not be planted or read by
/// another account.
pub fn own_runtime_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid())?;
    let dir = runtime_dir(
        uid,
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
    );
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("the runtime directory {}: {e}", dir.display()),
            ));
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "the runtime directory {} is not a private directory of this account (a link,              another's, or open to others): remove it, or set XDG_RUNTIME_DIR to move it",
            dir.display()
        )));
    }
    Ok(dir)
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

/// How long a directory without an [`OWNER_FILE`] must have been left
/// unchanged before a sweep judges it. Every server of today writes its
/// owner file right after making the directory, so one without is a
/// server's from before owner files — or one made this instant.
pub const OWNERLESS_AGE: Duration = Duration::from_secs(60 * 60);

/// One entry of a directory without an owner file, as
/// [`ownerless_is_gone`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// A unix socket.
    Socket {
        /// Unless a connect was refused (or found nothing): any doubt
        /// counts as a live server.
        listening: bool,
    },
    /// A regular file.
    File {
        /// For how long it has not changed.
        unchanged: Duration,
    },
    /// Anything else (a directory, a link, a device).
    Other,
}

/// Whether a directory without an owner file is a gone server's: the
/// directory unchanged for [`OWNERLESS_AGE`] (its time changes with every
/// entry made or removed, sockets included), nothing in it but sockets
/// nobody listens on and files as old, and something in it (an empty one
/// may be a directory just made). Anything else is kept.
pub fn ownerless_is_gone(dir_unchanged: Duration, entries: &[Leftover]) -> bool {
    !entries.is_empty()
        && dir_unchanged >= OWNERLESS_AGE
        && entries.iter().all(|entry| match entry {
            Leftover::Socket { listening } => !listening,
            Leftover::File { unchanged } => *unchanged >= OWNERLESS_AGE,
            Leftover::Other => false,
        })
}

/// How long ago `meta` last changed (zero if it says the future).
fn unchanged_for(meta: &std::fs::Metadata) -> Option<Duration> {
    let modified = meta.modified().ok()?;
    Some(
        std::time::SystemTime::now()
            .duration_since(modified)
            .unwrap_or(Duration::ZERO),
    )
}

/// What [`ownerless_is_gone`] needs of `dir`, or `None` if it cannot be
/// read or changed too lately to be judged (then it is kept, and no
/// socket in it is tried).
fn leftovers(dir: &Path) -> Option<(Duration, Vec<Leftover>)> {
    use std::os::unix::fs::FileTypeExt;
    let dir_unchanged = unchanged_for(&std::fs::symlink_metadata(dir).ok()?)?;
    if dir_unchanged < OWNERLESS_AGE {
        return None;
    }
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).ok()? {
        let entry = entry.ok()?;
        let meta = std::fs::symlink_metadata(entry.path()).ok()?;
        let kind = meta.file_type();
        entries.push(if kind.is_socket() {
            let refused = std::os::unix::net::UnixStream::connect(entry.path()).is_err_and(|e| {
                matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                )
            });
            Leftover::Socket {
                listening: !refused,
            }
        } else if kind.is_file() {
            Leftover::File {
                unchanged: unchanged_for(&meta)?,
            }
        } else {
            Leftover::Other
        });
    }
    Some((dir_unchanged, entries))
}

/// Removes the directories named `<prefix>…` directly in `parent` that this
/// user owns and whose [`OWNER_FILE`] names a server that is gone, or that
/// have none and are provably a gone server's ([`ownerless_is_gone`]: a
/// server's from before owner files, killed); returns those removed. A
/// live server's, or one whose owner cannot be told, stays.
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
        let gone = match std::fs::read_to_string(path.join(OWNER_FILE)) {
            Ok(owner) => owner_is_gone(Some(&owner), &start_of),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => leftovers(&path)
                .is_some_and(|(unchanged, entries)| ownerless_is_gone(unchanged, &entries)),
            Err(_) => false,
        };
        if gone && std::fs::remove_dir_all(&path).is_ok() {
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

    #[test]
    fn an_ownerless_dir_is_gone_only_when_old_and_nobody_listens() {
        let old = OWNERLESS_AGE + Duration::from_secs(1);
        let young = OWNERLESS_AGE - Duration::from_secs(1);
        let stale = Leftover::Socket { listening: false };
        let live = Leftover::Socket { listening: true };
        let file = Leftover::File { unchanged: old };
        assert!(ownerless_is_gone(old, &[stale, stale, file]));
        assert!(!ownerless_is_gone(young, &[stale, stale]), "changed lately");
        assert!(!ownerless_is_gone(old, &[stale, live]), "a server listens");
        assert!(
            !ownerless_is_gone(old, &[stale, Leftover::File { unchanged: young }]),
            "a file changed lately"
        );
        assert!(
            !ownerless_is_gone(old, &[stale, Leftover::Other]),
            "not ours"
        );
        assert!(!ownerless_is_gone(old, &[]), "empty: maybe just made");
    }

    /// Planted directories of servers from before owner files: one whose
    /// sockets nobody listens on goes once it is an hour old; one whose
    /// server still listens, and a young one, stay.
    #[test]
    fn a_sweep_removes_an_old_ownerless_dir_nobody_listens_in() {
        use std::os::unix::net::UnixListener;
        let parent = tempfile_dir();
        let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 60 * 60);
        let plant = |name: &str, listen: bool, old: bool| {
            let dir = parent.join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("known_hosts"), "").unwrap();
            let http = UnixListener::bind(dir.join("http.sock")).unwrap();
            let socks = UnixListener::bind(dir.join("socks.sock")).unwrap();
            if old {
                for path in [dir.join("known_hosts"), dir.clone()] {
                    std::fs::File::open(&path)
                        .unwrap()
                        .set_modified(two_hours_ago)
                        .unwrap();
                }
            }
            (dir, listen.then_some((http, socks)))
        };
        let (gone, _) = plant("p-gone", false, true);
        let (alive, _listening) = plant("p-alive", true, true);
        let (young, _) = plant("p-young", false, false);
        let removed = sweep_gone_owners(&parent, "p-");
        assert_eq!(removed, vec![gone.clone()]);
        assert!(!gone.exists());
        assert!(alive.exists() && young.exists());
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
