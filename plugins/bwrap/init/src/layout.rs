//! PID 1's own namespace layout, set up before anything else runs
//! (docs/research/linux-create-deny.md §2.2; SPEC C1's exec deny in writable
//! dirs, G1).
//!
//! bubblewrap cannot mount anything `noexec`, and once it has dropped our
//! capabilities neither can we in its namespaces. So PID 1 makes a user and
//! mount namespace of its own (it writes the identity uid/gid maps itself:
//! the same ids inside as outside), and in it:
//! 1. remounts every visible writable mount `noexec` (keeping its other
//!    flags): nothing written inside the sandbox can be executed, not even
//!    through `ld.so ./binary`, which maps it executable instead of
//!    exec'ing it — except beneath the exec grants (SPEC F5), each made a
//!    mount of its own first (a recursive bind onto itself, so what is
//!    mounted below it, protections included, stays) and left as it is;
//!
//!    The cache overlays (`crate::caches`) are mounted before that pass,
//!    so they are `noexec` too (their binaries' directories are read-only
//!    binds on top, which the pass leaves alone).
//! 2. sets `user.max_user_namespaces` to 0 there: no process below can make
//!    a user namespace again (what bubblewrap's `--disable-userns` did),
//!    and the sandbox's share of the per-uid counters (`crate::counters`);
//!    then re-binds `/proc/sys` and the other procfs files uid 0 may write
//!    without a capability read-only ([`PROC_READ_ONLY`]): the sandbox runs
//!    as the server's uid, and for a server run as root the sysctl check
//!    trusts that uid alone — host root is never root here;
//! 3. makes a pid and a mount namespace for the commands
//!    (`crate::namespaces`), a `/proc` of their own in it
//!    (`crate::commands_proc`), then PID 1's Landlock domain, then the fork
//!    thread that forks every command there (`crate::forker`): a command
//!    cannot name the supervisor in `kill`, `ptrace`, `pidfd_open` or
//!    `process_vm_*`; the reaper sets `vm.memfd_noexec` there, through a
//!    descriptor opened before `/proc/sys` became read-only;
//! 4. drops every capability, bounding set included, with the securebits
//!    locked, so no command (not even uid 0) gets one back at exec.
//!
//! Every step that fails fails the launch: the sandbox starts with this
//! layout or not at all.

use std::io;

use crate::caches::CacheOverlays;
use crate::caps::{CAP_SYS_PTRACE, keep_only};
use crate::counters::Counters;
use crate::forker::Forker;
use crate::masks::Masks;
use crate::mount::{bind_onto_itself, read_only_bind, remount};
use crate::namespaces::Namespaces;
use std::os::fd::{AsRawFd, OwnedFd};

/// The step of the layout that failed; the launch fails with it.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("a user namespace of our own")]
    UserNamespace(#[source] io::Error),
    #[error("/proc/self/mountinfo")]
    Mountinfo(#[source] io::Error),
    #[error("making the exec grant {point} a mount of its own")]
    Grant {
        point: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Masks(crate::masks::MaskError),
    #[error(transparent)]
    Caches(crate::caches::CacheError),
    #[error("remounting {point} noexec")]
    Remount {
        point: String,
        #[source]
        source: io::Error,
    },
    #[error("bounding the per-uid kernel counters")]
    Counters(#[source] io::Error),
    #[error("forbidding new user namespaces")]
    UserNamespaces(#[source] io::Error),
    #[error("making {point} read-only")]
    ProcReadOnly {
        point: String,
        #[source]
        source: io::Error,
    },
    /// What the caller's `confine` said.
    #[error(transparent)]
    Confine(Box<dyn std::error::Error + Send + Sync>),
    #[error("the commands' pid and mount namespaces")]
    PidNamespace(#[source] io::Error),
    #[error("the commands' /proc")]
    CommandsProc(#[source] io::Error),
    #[error("dropping capabilities")]
    Capabilities(#[source] io::Error),
}

/// One mount as `/proc/self/mountinfo` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted (octal escapes decoded).
    pub point: String,
    /// Its per-mount options (`rw`, `nosuid`, `relatime`, …).
    pub options: Vec<String>,
}

impl Mount {
    pub fn read_only(&self) -> bool {
        self.options.iter().any(|o| o == "ro")
    }
}

/// Parses mountinfo text, in mount order.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let options = fields.next()?;
            Some(Mount {
                point: unescape(point),
                options: options.split(',').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The writable mounts a path can reach: at each mount point only the last
/// mount (the one on top) is visible; read-only ones are left alone.
pub fn visible_writable(mounts: &[Mount]) -> Vec<&Mount> {
    let mut visible: Vec<&Mount> = Vec::new();
    for mount in mounts {
        visible.retain(|m| m.point != mount.point);
        visible.push(mount);
    }
    visible.into_iter().filter(|m| !m.read_only()).collect()
}

/// The global procfs entries a uid-0 process may write without any
/// capability — the sysctl tree checks the uid alone; sysrq, irq affinity,
/// the bus and fs files are mode-checked — made read-only bind mounts of
/// themselves once PID 1 has set its own sysctl. One a kernel lacks is
/// skipped; any other failure fails the launch.
pub const PROC_READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
    "/proc/pressure",
];

/// The `mount(2)` flags that add `noexec` to a bind remount and keep what
/// the mount has (a locked flag may not be cleared, and dropping `nosuid`
/// or `nodev` would loosen it).
pub fn noexec_flags(mount: &Mount) -> libc::c_ulong {
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOEXEC;
    for option in &mount.options {
        flags |= match option.as_str() {
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noatime" => libc::MS_NOATIME,
            "nodiratime" => libc::MS_NODIRATIME,
            "relatime" => libc::MS_RELATIME,
            "strictatime" => libc::MS_STRICTATIME,
            _ => 0,
        };
    }
    flags
}

/// The remount flags of a `/dev/null` mask: read-only, no devices, no exec,
/// and what the mount it is bound from has (its atime mode is locked).
pub fn null_device_flags(mounts: &[Mount]) -> libc::c_ulong {
    let source = mounts
        .iter()
        .rev()
        .find(|m| m.point == "/dev/null")
        .or_else(|| mounts.iter().rev().find(|m| m.point == "/dev"));
    let kept = source.map_or(
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOEXEC,
        noexec_flags,
    );
    kept | libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOSUID
}

/// Sets the layout up (see the module doc). Must run while this process
/// has a single thread (`unshare(CLONE_NEWUSER)` requires it). `confine`
/// gets the writable mounts' points (bubblewrap's scratch root `/` left
/// out) and the commands' `/proc` (writable like ours, and a file system of
/// its own), and enters PID 1's Landlock domain (`crate::landlock`) before the
/// fork thread starts, so that thread and everything forked later are in
/// the very same domain (one a thread enters on its own would be a sibling,
/// and Landlock would then hide the commands from the supervisor). Returns
/// the [`Forker`] that makes every command, in the commands' pid namespace.
///
/// With `supervise`, this thread (and the guard threads it starts) keeps
/// `CAP_SYS_PTRACE` here — in our own user namespace, which holds only the
/// sandbox's processes — so the supervisor can read the path arguments of
/// non-dumpable commands (ssh, gpg-agent) instead of failing their calls;
/// the fork thread, and so every command, keeps nothing.
///
/// `commands_proc` mounts the commands' `/proc` once their namespaces exist
/// and returns it (`crate::commands_proc`, whose maker was forked before
/// anything else).
///
/// `exec_grants` are directories commands may execute from although they
/// are writable (`--exec-grant`; the plan checked each is a writable place).
/// `masks` hide secrets first, where bubblewrap's last mounts were
/// (`crate::masks`). `caches` are mounted after the grants and before the
/// `noexec` pass (`crate::caches`); those beneath a grant keep exec like it.
pub fn enter<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    commands_proc: impl FnOnce(&Namespaces) -> io::Result<OwnedFd>,
    supervise: bool,
    exec_grants: &[String],
    masks: &Masks,
    caches: &CacheOverlays,
    counters: &Counters,
    confine: impl FnOnce(&[String], &OwnedFd) -> Result<(), E>,
) -> Result<Forker, LayoutError> {
    counters
        .before_user_namespace()
        .map_err(LayoutError::Counters)?;
    enter_own_user_namespace().map_err(LayoutError::UserNamespace)?;
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(LayoutError::Mountinfo)?;
    let before = parse_mountinfo(&text);
    masks
        .mount(null_device_flags(&before))
        .map_err(LayoutError::Masks)?;
    for point in exec_grants {
        if !before.iter().any(|m| m.point == *point) {
            bind_onto_itself(point, libc::MS_BIND | libc::MS_REC).map_err(|source| {
                LayoutError::Grant {
                    point: point.clone(),
                    source,
                }
            })?;
        }
    }
    caches.mount().map_err(LayoutError::Caches)?;
    let exec_caches = caches.exec_points();
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(LayoutError::Mountinfo)?;
    let mounts = parse_mountinfo(&text);
    let writable = visible_writable(&mounts);
    let keeps_exec = |point: &String| exec_grants.contains(point) || exec_caches.contains(point);
    for mount in writable.iter().filter(|m| !keeps_exec(&m.point)) {
        remount(&mount.point, noexec_flags(mount)).map_err(|source| LayoutError::Remount {
            point: mount.point.clone(),
            source,
        })?;
    }
    let writable: Vec<String> = writable
        .iter()
        .map(|m| m.point.clone())
        .filter(|point| point != "/")
        .collect();
    std::fs::write("/proc/sys/user/max_user_namespaces", "0")
        .map_err(LayoutError::UserNamespaces)?;
    counters.write().map_err(LayoutError::Counters)?;
    // For the commands' namespace reaper, before `/proc/sys` is read-only;
    // only global root may open it (`crate::forker`), and before Linux 6.3
    // it does not exist: then the commands' filter keeps memfds sealed.
    let memfd_sysctl: Option<std::os::fd::OwnedFd> = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/vm/memfd_noexec")
        .ok()
        .map(Into::into);
    let proc_flags = mounts.iter().rev().find(|m| m.point == "/proc").map_or(
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_NOEXEC,
        noexec_flags,
    ) | libc::MS_RDONLY;
    for point in PROC_READ_ONLY {
        read_only_bind(point, proc_flags).map_err(|source| LayoutError::ProcReadOnly {
            point: (*point).to_owned(),
            source,
        })?;
    }
    // The commands' namespaces and their /proc, before our Landlock domain,
    // which grants writing beneath that /proc as beneath ours.
    let namespaces = Namespaces::make(memfd_sysctl.as_ref().map(AsRawFd::as_raw_fd))
        .map_err(LayoutError::PidNamespace)?;
    drop(memfd_sysctl);
    let commands_proc = commands_proc(&namespaces).map_err(LayoutError::CommandsProc)?;
    confine(&writable, &commands_proc).map_err(|e| LayoutError::Confine(e.into()))?;
    drop(commands_proc);
    // While we still hold CAP_SYS_ADMIN here: the thread inherits it to
    // enter the namespaces, then drops it like we do below.
    let forker = Forker::start(namespaces).map_err(LayoutError::PidNamespace)?;
    let keep = if supervise { 1 << CAP_SYS_PTRACE } else { 0 };
    keep_only(keep).map_err(LayoutError::Capabilities)?;
    Ok(forker)
}

/// Unshares a user and a mount namespace and writes our own identity maps
/// there: one line mapping our uid (and gid) to itself, which the kernel
/// lets a process write for itself in the namespace it just made — uid 0
/// too, because we held CAP_SETFCAP in bubblewrap's namespace when we
/// unshared (Linux 5.12 records that; bubblewrap leaves us that capability
/// for this alone). No helper process: a fork and a wait less at every
/// start (docs/measurements.md).
fn enter_own_user_namespace() -> io::Result<()> {
    // SAFETY: plain syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: plain syscall.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let maps = [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (path, text) in &maps {
        std::fs::write(path, text).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "writing {path} in our own user namespace: {e} (uid 0 needs CAP_SETFCAP in \
                     bubblewrap's namespace)"
                ),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
60 59 0:52 / / rw,nosuid,nodev,relatime - tmpfs tmpfs rw
61 60 254:0 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/vda rw
62 60 0:53 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
63 60 0:54 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw
64 60 254:0 /work /work rw,nosuid,nodev,relatime - ext4 /dev/vda rw
65 64 254:0 /work/.git/hooks /work/.git/hooks ro,nosuid,nodev,relatime - ext4 /dev/vda rw
66 60 254:0 /w\\040x /w\\040x rw,nosuid,nodev,noatime - ext4 /dev/vda rw
67 63 0:55 / /tmp rw,nosuid,nodev,relatime - tmpfs tmpfs rw
";

    #[test]
    fn mountinfo_is_parsed_with_escapes() {
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(mounts.len(), 8);
        assert_eq!(mounts[6].point, "/w x");
        assert!(mounts[1].read_only() && !mounts[3].read_only());
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape("trailing\\"), "trailing\\");
    }

    #[test]
    fn only_the_top_writable_mount_at_each_point_is_remounted() {
        let mounts = parse_mountinfo(SAMPLE);
        let points: Vec<&str> = visible_writable(&mounts)
            .iter()
            .map(|m| m.point.as_str())
            .collect();
        assert_eq!(points, ["/", "/proc", "/work", "/w x", "/tmp"]);
    }

    #[test]
    fn the_flags_add_noexec_and_keep_the_rest() {
        let mounts = parse_mountinfo(SAMPLE);
        let work = noexec_flags(&mounts[4]);
        assert_eq!(
            work,
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_NOEXEC
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_RELATIME
        );
        assert_ne!(noexec_flags(&mounts[6]) & libc::MS_NOATIME, 0);
        assert_eq!(noexec_flags(&mounts[6]) & libc::MS_RELATIME, 0);
    }

    #[test]
    fn a_file_mask_is_read_only_without_devices_and_keeps_the_atime_mode() {
        let mounts = parse_mountinfo(
            "1 0 0:1 / / rw,nosuid,nodev,relatime - tmpfs tmpfs rw\n\
             2 1 0:2 / /dev ro,nosuid,relatime - tmpfs tmpfs rw\n\
             3 2 0:3 /null /dev/null rw,nosuid,noatime - devtmpfs udev rw\n",
        );
        let flags = null_device_flags(&mounts);
        for flag in [
            libc::MS_REMOUNT,
            libc::MS_BIND,
            libc::MS_RDONLY,
            libc::MS_NODEV,
            libc::MS_NOSUID,
            libc::MS_NOEXEC,
            libc::MS_NOATIME,
        ] {
            assert_ne!(flags & flag, 0, "{flag:#x} missing from {flags:#x}");
        }
        assert_eq!(flags & libc::MS_RELATIME, 0, "the bound mount's atime mode");
        let without = null_device_flags(&parse_mountinfo(
            "2 1 0:2 / /dev ro,nosuid,relatime - tmpfs tmpfs rw\n",
        ));
        assert_ne!(
            without & libc::MS_RELATIME,
            0,
            "/dev's, when /dev/null is no mount"
        );
    }
}
