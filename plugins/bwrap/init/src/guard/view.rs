//! The tracee's `/proc`, numbered as the tracee numbers processes.
//!
//! The commands' `/proc` is the procfs of their own pid namespace
//! (`crate::commands_proc`), below the supervisor's: a seccomp notification
//! names the caller by its thread id in the supervisor's namespace, but a
//! path the caller gives (`/proc/self/fd/3`, `/proc/$$/cwd`) and every
//! `/proc` path the guard resolves from the caller's root or working
//! directory is in the caller's numbering. So the guard asks here, for the
//! caller: its own numbers there (`/proc/self` and `/proc/thread-self`,
//! which name nothing for the supervisor — it is not in that namespace),
//! and whether a `/proc/<n>` of the caller's view is its own process — the
//! one question on which the confused-deputy rule turns
//! (`super::emulate`'s module doc).

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::bases::{self, Base};

/// A thread's numbers: its process and itself, in the supervisor's pid
/// namespace (`outer_*`) and in its own (`tgid`, `tid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    pub outer_tgid: u32,
    pub outer_tid: u32,
    pub tgid: u32,
    pub tid: u32,
}

/// Reads `Tgid:`, `NStgid:` and `NSpid:` of a `status` text: the last
/// number of each `NS` line is the one of the innermost namespace, the
/// thread's own.
pub fn parse_ids(status: &str, outer_tid: u32) -> Option<Ids> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::split_whitespace)
    };
    let outer_tgid = field("Tgid:")?.next()?.parse().ok()?;
    let tgid = field("NStgid:")?.last()?.parse().ok()?;
    let tid = field("NSpid:")?.last()?.parse().ok()?;
    Some(Ids {
        outer_tgid,
        outer_tid,
        tgid,
        tid,
    })
}

/// Thread `tid`'s numbers (`tid` as the supervisor numbers it).
pub fn ids(tid: u32) -> Option<Ids> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    parse_ids(&status, tid)
}

/// The process (thread group) of `/proc/<n>` in thread `tid`'s `/proc`:
/// read there, through its root, so `n` is its number, and the answer too.
pub fn tgid_in_view(tid: u32, n: u32) -> Option<u32> {
    let root = bases::open(tid, Base::Root).ok()?;
    let name = CString::new(format!("proc/{n}/status")).ok()?;
    // SAFETY: openat relative to a descriptor we hold, with a valid C string.
    let fd = unsafe {
        libc::openat(
            root.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut status = String::new();
    file.read_to_string(&mut status).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether `/proc/<n>` of thread `tid`'s `/proc` is a thread of its own
/// process. Anything that cannot be read is another's.
pub fn is_own(tid: u32, n: u32) -> bool {
    match ids(tid) {
        Some(ids) if n == ids.tgid || n == ids.tid => true,
        Some(ids) => tgid_in_view(tid, n) == Some(ids.tgid),
        None => false,
    }
}

/// `/proc/self/…` and `/proc/thread-self/…` as the tracee means them, in
/// its numbering: `/proc/<tgid>/…` and `/proc/<tgid>/task/<tid>/…`.
pub fn rewrite_self(path: &[u8], ids: &Ids) -> Vec<u8> {
    let forms = [
        (&b"/proc/self"[..], format!("/proc/{}", ids.tgid)),
        (
            &b"/proc/thread-self"[..],
            format!("/proc/{}/task/{}", ids.tgid, ids.tid),
        ),
    ];
    for (prefix, theirs) in forms {
        if let Some(rest) = path.strip_prefix(prefix)
            && (rest.is_empty() || rest[0] == b'/')
        {
            let mut out = theirs.into_bytes();
            out.extend_from_slice(rest);
            return out;
        }
    }
    path.to_vec()
}

/// Whether `path` starts with `/proc/self` or `/proc/thread-self` (so
/// [`rewrite_self`] has something to do).
pub fn names_self(path: &[u8]) -> bool {
    [&b"/proc/self"[..], &b"/proc/thread-self"[..]]
        .iter()
        .any(|prefix| {
            path.strip_prefix(*prefix)
                .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nTgid:\t41\nNgid:\t0\nPid:\t42\nPPid:\t7\n\
        NStgid:\t41\t3\nNSpid:\t42\t4\nNSpgid:\t41\t3\n";

    #[test]
    fn a_threads_own_numbers_are_the_last_of_each_ns_line() {
        assert_eq!(
            parse_ids(STATUS, 42),
            Some(Ids {
                outer_tgid: 41,
                outer_tid: 42,
                tgid: 3,
                tid: 4
            })
        );
        // In one namespace only: the same numbers.
        let flat = "Tgid:\t5\nNStgid:\t5\nNSpid:\t6\n";
        let ids = parse_ids(flat, 6).unwrap();
        assert_eq!((ids.tgid, ids.tid), (5, 6));
        assert_eq!(parse_ids("Name:\tx\n", 1), None);
    }

    #[test]
    fn proc_self_means_the_tracee_in_its_own_numbers() {
        let ids = parse_ids(STATUS, 42).unwrap();
        assert_eq!(
            rewrite_self(b"/proc/self/fd/1", &ids),
            b"/proc/3/fd/1".to_vec()
        );
        assert_eq!(
            rewrite_self(b"/proc/thread-self/fd/1", &ids),
            b"/proc/3/task/4/fd/1".to_vec()
        );
        assert_eq!(rewrite_self(b"/proc/self", &ids), b"/proc/3".to_vec());
        assert_eq!(
            rewrite_self(b"/proc/selfish", &ids),
            b"/proc/selfish".to_vec()
        );
        assert_eq!(rewrite_self(b"x", &ids), b"x".to_vec());
        assert!(names_self(b"/proc/self/fd/1") && names_self(b"/proc/thread-self"));
        assert!(!names_self(b"/proc/selfish") && !names_self(b"proc/self"));
    }

    #[test]
    fn our_own_numbers_and_process() {
        let tid = std::process::id();
        let ids = ids(tid).unwrap();
        assert_eq!((ids.outer_tgid, ids.outer_tid), (tid, tid));
        assert!(is_own(tid, ids.tgid));
        assert!(!is_own(tid, u32::MAX - 1));
    }
}
