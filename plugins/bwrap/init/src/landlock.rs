//! PID 1's Landlock domain (docs/research/linux-create-deny.md §2.2, "D1"), which
//! PID 1 enters before it forks anything, so the supervisor, the forwarder
//! and every command are in it (commands in a domain nested below):
//! - `EXECUTE` only beneath the read-only system directories and
//!   `sandbox-init` itself (SPEC C1's exec deny): `execve` of anything else
//!   — a binary in a bind, read-only or not — is refused by the kernel;
//! - writing, creating, removing, renaming and truncating only beneath the
//!   writable mounts the sandbox was given (binds, `/tmp`, home, `/dev`,
//!   `/proc` — PID 1's and the commands' own), not in bubblewrap's scratch
//!   root: the supervisor, which
//!   creates files for the commands, cannot be made to write anywhere a
//!   command could not (no confused deputy), even through a resolution bug;
//! - scopes (ABI 6): no signal and no abstract unix socket across the
//!   domain's edge.
//!
//! Landlock does not look at `mmap`, so a binary that already exists in a
//! read-only bind can still be run through the dynamic loader; what is
//! written inside the sandbox cannot, because every writable mount is also
//! `noexec` (`crate::layout`). Mount flags stay the first word on what is
//! writable; this is the second.
//!
//! Raw syscalls: three calls do not need a crate. Kept rather than the
//! `landlock` crate (0.4.8 covers ABI 7 too): it would add ~6,800 lines and
//! enumflags2 to sandbox-init, which stays small and quick to build, for
//! what is here a pure, table-tested [`plan`] and three syscalls.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `LANDLOCK_ACCESS_FS_*` bits.
const ACCESS_FS_EXECUTE: u64 = 1 << 0;
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
/// ABI 2: moving and linking across directories (without it, Landlock
/// refuses every such rename once writes are handled).
const ACCESS_FS_REFER: u64 = 1 << 13;
/// ABI 3.
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
/// The write rights of ABI 1.
const WRITE_V1: u64 = ACCESS_FS_WRITE_FILE
    | ACCESS_FS_REMOVE_DIR
    | ACCESS_FS_REMOVE_FILE
    | ACCESS_FS_MAKE_CHAR
    | ACCESS_FS_MAKE_DIR
    | ACCESS_FS_MAKE_REG
    | ACCESS_FS_MAKE_SOCK
    | ACCESS_FS_MAKE_FIFO
    | ACCESS_FS_MAKE_BLOCK
    | ACCESS_FS_MAKE_SYM;
/// The rights a rule on a file (not a directory) may carry.
const FILE_RIGHTS: u64 = ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE;
/// `LANDLOCK_SCOPE_*` (ABI 6).
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;
/// `LANDLOCK_CREATE_RULESET_VERSION`.
const CREATE_RULESET_VERSION: u32 = 1;

/// `struct landlock_ruleset_attr` as of ABI 6; the kernel takes the size
/// we pass, so older kernels get only the first field.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's Landlock ABI version, or why there is none.
pub fn abi_version() -> io::Result<i64> {
    // SAFETY: the version query takes no attribute.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if version < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(version)
    }
}

/// What a domain covers on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub abi: i64,
    /// Writes are limited to the writable mounts (ABI 2 and later).
    pub writes: bool,
    /// Signals and abstract unix sockets stay inside (ABI 6 and later).
    pub scopes: bool,
}

/// The rights and scopes to handle on Landlock `abi`.
pub fn plan(abi: i64) -> (Coverage, u64, u64) {
    let writes = abi >= 2;
    let mut handled = ACCESS_FS_EXECUTE;
    if writes {
        handled |= WRITE_V1 | ACCESS_FS_REFER;
    }
    if abi >= 3 {
        handled |= ACCESS_FS_TRUNCATE;
    }
    let scopes = abi >= 6;
    let scoped = if scopes {
        SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
    } else {
        0
    };
    (
        Coverage {
            abi,
            writes,
            scopes,
        },
        handled,
        scoped,
    )
}

/// PID 1's domain: `EXECUTE` beneath each of `exec_from`, the write rights
/// beneath each of `writable` and of the directories `writable_dirs` holds
/// (the commands' `/proc`, which no path of ours names); see the module
/// doc. Missing paths are skipped (bwrap did not mount them either). Fails
/// when Landlock is not available: then exec cannot be limited, and the
/// sandbox must not start.
pub fn domain(
    exec_from: &[impl AsRef<Path>],
    writable: &[impl AsRef<Path>],
    writable_dirs: &[&OwnedFd],
) -> io::Result<(OwnedFd, Coverage)> {
    let abi = abi_version().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("Landlock is not available ({e}); exec cannot be limited to the system view"),
        )
    })?;
    let (coverage, handled, scoped) = plan(abi);
    let ruleset = create(handled, scoped)?;
    let write_rights = handled & !ACCESS_FS_EXECUTE;
    let grants = exec_from
        .iter()
        .map(|p| (p.as_ref(), ACCESS_FS_EXECUTE))
        .chain(writable.iter().map(|p| (p.as_ref(), write_rights)))
        .filter(|(_, rights)| *rights != 0);
    for (root, rights) in grants {
        add_rule(&ruleset, root, rights)?;
    }
    if write_rights != 0 {
        for dir in writable_dirs {
            add_rule_fd(&ruleset, dir, write_rights).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("Landlock rule for the commands' /proc: {e}"),
                )
            })?;
        }
    }
    Ok((ruleset, coverage))
}

/// The commands' domain, nested below PID 1's and entered by the fork
/// thread: it limits nothing more on the file system (what it handles it
/// grants beneath `/` again), but being nested it keeps the commands from
/// PID 1 — Landlock lets a process trace (and read the `/proc` entries of)
/// only its own domain and those below — and, on ABI 6, its scopes keep
/// their signals and abstract sockets among themselves.
pub fn commands_domain() -> io::Result<OwnedFd> {
    let (handled, scoped) = plan_commands(abi_version()?);
    let ruleset = create(handled, scoped)?;
    add_rule(&ruleset, Path::new("/"), handled)?;
    Ok(ruleset)
}

/// What the commands' domain handles (and grants beneath `/`) on Landlock
/// `abi`, and its scopes. `REFER` is in it from ABI 2: Landlock refuses a
/// rename or link across directories (EXDEV) in any domain that does not
/// grant `REFER` explicitly, handled or not — without it, with the guard
/// off (the commands' own renames reach the kernel), rustc could not move
/// its `.rmeta` out of its temporary directory. PID 1's domain still limits
/// `REFER` to the writable mounts.
pub fn plan_commands(abi: i64) -> (u64, u64) {
    let (coverage, _, scoped) = plan(abi);
    let mut handled = ACCESS_FS_EXECUTE;
    if coverage.writes {
        handled |= ACCESS_FS_REFER;
    }
    (handled, scoped)
}

/// A new ruleset handling `handled` file-system rights and the `scoped`
/// scopes (passed only when there are some: older kernels take the short
/// attribute alone).
fn create(handled: u64, scoped: u64) -> io::Result<OwnedFd> {
    let attr = RulesetAttr {
        handled_access_fs: handled,
        handled_access_net: 0,
        scoped,
    };
    let size = if scoped != 0 {
        std::mem::size_of::<RulesetAttr>()
    } else {
        std::mem::size_of::<u64>()
    };
    // SAFETY: creates a ruleset from a valid attribute of the size passed.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            size,
            0u32,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) })
}

/// Grants `rights` beneath `root` (only the file rights when it is a file);
/// a path that does not exist is skipped.
fn add_rule(ruleset: &OwnedFd, root: &Path, rights: u64) -> io::Result<()> {
    let Ok(path) = CString::new(root.as_os_str().as_encoded_bytes()) else {
        return Ok(());
    };
    // SAFETY: open of a valid C string; O_PATH opens nothing's contents.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: `open` returned a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let rights = if root.is_dir() {
        rights
    } else {
        rights & FILE_RIGHTS
    };
    if rights == 0 {
        return Ok(());
    }
    add_rule_fd(ruleset, &fd, rights).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("Landlock rule for {}: {e}", root.display()),
        )
    })
}

/// Grants `rights` beneath the directory (or file) `fd` holds.
fn add_rule_fd(ruleset: &OwnedFd, fd: &OwnedFd, rights: u64) -> io::Result<()> {
    let rule = PathBeneathAttr {
        allowed_access: rights,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: adds a rule from a valid attribute to our ruleset.
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &raw const rule,
            0u32,
        )
    };
    if added != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Enters the ruleset: this thread, and whatever it starts from now on
/// (a domain belongs to a thread). Sets `PR_SET_NO_NEW_PRIVS` first, as
/// Landlock requires without CAP_SYS_ADMIN.
pub fn restrict_self(ruleset: libc::c_int) -> bool {
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
        return false;
    }
    // SAFETY: plain syscall on a descriptor the caller holds.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_each_abi_covers() {
        let (c, handled, scoped) = plan(1);
        assert_eq!(
            (c.writes, c.scopes, handled, scoped),
            (false, false, ACCESS_FS_EXECUTE, 0)
        );
        let (c, handled, _) = plan(2);
        assert!(c.writes && !c.scopes);
        assert_ne!(handled & ACCESS_FS_REFER, 0);
        assert_eq!(handled & ACCESS_FS_TRUNCATE, 0);
        let (c, handled, scoped) = plan(7);
        assert!(c.writes && c.scopes);
        assert_ne!(handled & ACCESS_FS_TRUNCATE, 0);
        assert_eq!(scoped, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
        // Reading is never handled: the mount namespace decides it.
        assert_eq!(handled & ((1 << 2) | (1 << 3)), 0);
    }

    #[test]
    fn the_commands_domain_allows_moves_across_directories() {
        assert_eq!(plan_commands(1), (ACCESS_FS_EXECUTE, 0));
        assert_eq!(plan_commands(2), (ACCESS_FS_EXECUTE | ACCESS_FS_REFER, 0));
        let (handled, scoped) = plan_commands(7);
        assert_eq!(handled, ACCESS_FS_EXECUTE | ACCESS_FS_REFER);
        assert_eq!(scoped, SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL);
        // Nothing else: every write right stays PID 1's domain's to limit.
        assert_eq!(handled & (WRITE_V1 | ACCESS_FS_TRUNCATE), 0);
    }
}
