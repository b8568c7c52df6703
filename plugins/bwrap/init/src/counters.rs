//! The kernel's per-uid counters, bounded for the whole sandbox (SPEC G6;
//! threat model T39).
//!
//! The kernel counts inotify instances and watches, fanotify groups and
//! marks, and POSIX message queue bytes per uid, in every user namespace
//! up to the host's: a sandbox runs as the server's uid, so without a bound
//! its commands could use up what the host's own processes of that uid
//! need. Each user namespace has its own limits (`/proc/sys/user/max_*`,
//! writable by its root only), checked at every level a count passes
//! through; PID 1 writes them in the user namespace it makes for itself
//! and its commands, where nothing below holds a capability to raise them.
//! The message queue bytes are an rlimit: a user namespace takes its
//! creator's as its ceiling, so PID 1 lowers its own before making it.
//!
//! What each sandbox gets is the backend's share of a server-wide budget
//! (`crate`'s caller decides; here they are only applied).

use std::io;

/// The per-namespace limits that may be set (`/proc/sys/user/<name>`).
pub const NAMES: &[&str] = &[
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
];

/// The argument name of the message-queue bytes ceiling.
pub const MSGQUEUE: &str = "msgqueue_bytes";

/// The argument names of the sandbox's share of the host's open-file table
/// and the table's watermark (`crate::open_files`).
pub const OPEN_FILES: &str = "open_files";
pub const OPEN_FILES_WATERMARK: &str = "open_files_watermark";

/// The limits PID 1 applies (`--counter NAME=VALUE`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// `(name from NAMES, value)`.
    pub limits: Vec<(String, u64)>,
    /// `RLIMIT_MSGQUEUE` for everything in the sandbox.
    pub msgqueue_bytes: Option<u64>,
    /// Open files the sandbox may hold while the host's table is past
    /// [`Counters::open_files_watermark`].
    pub open_files: Option<u64>,
    pub open_files_watermark: Option<u64>,
}

impl Counters {
    /// Reads one `NAME=VALUE`.
    pub fn parse_one(&mut self, text: &str) -> Result<(), String> {
        let (name, value) = text
            .split_once('=')
            .and_then(|(n, v)| Some((n, v.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("--counter {text}: use NAME=NUMBER"))?;
        if name == MSGQUEUE {
            self.msgqueue_bytes = Some(value);
        } else if name == OPEN_FILES {
            self.open_files = Some(value);
        } else if name == OPEN_FILES_WATERMARK {
            self.open_files_watermark = Some(value);
        } else if NAMES.contains(&name) {
            self.limits.push((name.to_owned(), value));
        } else {
            return Err(format!(
                "--counter {text}: unknown counter `{name}` (known: {}, {MSGQUEUE}, {OPEN_FILES}, \
                 {OPEN_FILES_WATERMARK})",
                NAMES.join(", ")
            ));
        }
        Ok(())
    }

    /// Before PID 1 makes its own user namespace: the message queue
    /// ceiling, which that namespace takes as its own.
    pub fn before_user_namespace(&self) -> io::Result<()> {
        let Some(bytes) = self.msgqueue_bytes else {
            return Ok(());
        };
        let limit = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: bytes,
        };
        // SAFETY: a plain syscall on a struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_MSGQUEUE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// In PID 1's own user namespace, while it is root there: each limit
    /// written to that namespace's `/proc/sys/user/<name>`.
    pub fn write(&self) -> io::Result<()> {
        for (name, value) in &self.limits {
            let path = format!("/proc/sys/user/{name}");
            std::fs::write(&path, value.to_string())
                .map_err(|e| io::Error::new(e.kind(), format!("writing {path}: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_counters_parse_and_others_are_refused() {
        let mut c = Counters::default();
        c.parse_one("max_inotify_instances=4").unwrap();
        c.parse_one("msgqueue_bytes=1000").unwrap();
        assert_eq!(c.limits, [("max_inotify_instances".to_owned(), 4)]);
        assert_eq!(c.msgqueue_bytes, Some(1000));
        c.parse_one("open_files=77000").unwrap();
        c.parse_one("open_files_watermark=1233123").unwrap();
        assert_eq!(c.open_files, Some(77000));
        assert_eq!(c.open_files_watermark, Some(1_233_123));
        assert!(c.parse_one("max_user_namespaces=9").is_err());
        assert!(c.parse_one("max_inotify_watches").is_err());
        assert!(c.parse_one("max_inotify_watches=-1").is_err());
    }
}
