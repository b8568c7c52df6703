//! The server-wide budget of the kernel's per-uid counters (SPEC G6;
//! threat model T39): inotify instances and watches, fanotify groups and
//! marks, POSIX message queue bytes; and the host's open-file table.
//!
//! Every sandbox runs as the server's uid, and the kernel counts these per
//! uid across user namespaces: the sandboxes together must never use up
//! what the host's own processes of that uid need. Half of each host limit
//! is the sandboxes' budget, cut into [`DEFAULT_SLOTS`] equal shares
//! (`[backends.bwrap] counter_slots`); each live sandbox holds one share,
//! which sandbox-init writes as the limits of the sandbox's own user
//! namespace (`sandbox_init::counters`). A sandbox launched while every
//! share is held gets none of these counters (its `inotify_init` fails
//! with `EMFILE`, as tools that fall back to polling expect) rather than
//! any of the host's half. User namespaces need no share: no command may
//! make one (`max_user_namespaces` is 0 inside), and without one no command
//! may make any other namespace.
//!
//! The open-file table (`fs.file-max`) is the whole host's, not a uid's,
//! and has no per-namespace limit: each sandbox's PID 1 watches it, and
//! once it is past the watermark (`[backends.bwrap] open_files_watermark`,
//! by default half the table) a sandbox holding more than its share of the
//! watermark has its commands killed (`sandbox_init::open_files`).

use std::sync::Mutex;

/// Shares of the budget by default.
pub const DEFAULT_SLOTS: usize = 16;

/// The host's per-uid limits the budget is cut from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    pub inotify_instances: u64,
    pub inotify_watches: u64,
    pub fanotify_groups: u64,
    pub fanotify_marks: u64,
    pub msgqueue_bytes: u64,
    /// `fs.file-max`.
    pub file_max: u64,
}

impl HostLimits {
    /// Read from the host's `/proc/sys/user` (the server's own user
    /// namespace) and the server's `RLIMIT_MSGQUEUE`; an unreadable one
    /// counts as 0, so its share is 0.
    pub fn read() -> Self {
        let read = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/user/{name}"))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a plain syscall filling a struct we own.
        let msgqueue = if unsafe { libc::getrlimit(libc::RLIMIT_MSGQUEUE, &mut limit) } == 0 {
            limit.rlim_cur
        } else {
            0
        };
        Self {
            inotify_instances: read("max_inotify_instances"),
            inotify_watches: read("max_inotify_watches"),
            fanotify_groups: read("max_fanotify_groups"),
            fanotify_marks: read("max_fanotify_marks"),
            msgqueue_bytes: msgqueue,
            file_max: std::fs::read_to_string("/proc/sys/fs/file-max")
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
                .unwrap_or(0),
        }
    }
}

/// sandbox-init's `--counter NAME=VALUE` arguments for one share of
/// `slots` (none held: every value 0); the open-file table's watermark is
/// `watermark`, or half the table. Pure.
pub fn share_args(
    host: &HostLimits,
    slots: usize,
    held: bool,
    watermark: Option<u64>,
) -> Vec<String> {
    let watermark = watermark.unwrap_or(host.file_max / 2);
    let share = |limit: u64| {
        if held && slots > 0 {
            limit / 2 / slots as u64
        } else {
            0
        }
    };
    [
        ("max_inotify_instances", share(host.inotify_instances)),
        ("max_inotify_watches", share(host.inotify_watches)),
        ("max_fanotify_groups", share(host.fanotify_groups)),
        ("max_fanotify_marks", share(host.fanotify_marks)),
        ("msgqueue_bytes", share(host.msgqueue_bytes)),
        // The watermark is the sandboxes' budget, cut like the others.
        ("open_files", share(watermark.saturating_mul(2))),
        ("open_files_watermark", watermark),
    ]
    .into_iter()
    .map(|(name, value)| format!("{name}={value}"))
    .collect()
}

/// Which shares are held, by live sandboxes of this server.
static HELD: Mutex<Vec<bool>> = Mutex::new(Vec::new());

/// One share of the budget, given back when dropped (with its sandbox).
#[derive(Debug)]
pub struct Share(Option<usize>);

impl Share {
    /// A free share of `slots`, or none when all are held.
    pub fn take(slots: usize) -> Self {
        let Ok(mut held) = HELD.lock() else {
            return Self(None);
        };
        if held.len() < slots {
            held.resize(slots, false);
        }
        let free = held.iter().take(slots).position(|h| !h);
        if let Some(i) = free {
            held[i] = true;
        }
        Self(free)
    }

    /// Whether a share is held.
    pub fn held(&self) -> bool {
        self.0.is_some()
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        if let (Some(i), Ok(mut held)) = (self.0, HELD.lock())
            && let Some(h) = held.get_mut(i)
        {
            *h = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: HostLimits = HostLimits {
        inotify_instances: 128,
        inotify_watches: 192_540,
        fanotify_groups: 128,
        fanotify_marks: 205_042,
        msgqueue_bytes: 819_200,
        file_max: 2_466_246,
    };

    /// All shares together are at most half of each host limit; without a
    /// share a sandbox gets nothing.
    #[test]
    fn shares_together_leave_the_host_half() {
        let args = share_args(&HOST, 16, true, None);
        assert_eq!(args[0], "max_inotify_instances=4");
        assert_eq!(args[4], "msgqueue_bytes=25600");
        assert_eq!(args[5], "open_files=77070");
        assert_eq!(args[6], "open_files_watermark=1233123");
        let shares = |args: Vec<String>| args[..6].iter().all(|a| a.ends_with("=0"));
        assert!(shares(share_args(&HOST, 16, false, None)));
        assert!(shares(share_args(&HOST, 0, true, None)));
        assert_eq!(
            share_args(&HOST, 4, true, Some(40_000))[5..],
            ["open_files=10000", "open_files_watermark=40000"]
        );
    }

    #[test]
    fn a_share_is_given_back_when_dropped() {
        // Slots of its own size, so other tests' shares do not interfere.
        let slots = 1000;
        let taken: Vec<Share> = (0..slots).map(|_| Share::take(slots)).collect();
        let extra = Share::take(slots);
        // Other tests may hold some; at least the last asked gets none
        // once every slot is taken.
        assert!(taken.iter().filter(|s| s.held()).count() <= slots);
        assert!(!extra.held());
        drop(taken);
        assert!(Share::take(slots).held());
    }
}
