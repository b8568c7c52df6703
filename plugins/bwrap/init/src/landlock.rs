//! Exec only from the system view (SPEC C1's exec deny, research
//! linux-create-deny §2.1): a Landlock ruleset that handles one right,
//! `EXECUTE`, and grants it beneath the read-only system directories and
//! `sandbox-init` itself. Every command enters it between fork and exec, so
//! `execve` of anything else — a binary in a bind, read-only or not — is
//! refused by the kernel.
//!
//! Landlock does not look at `mmap`, so a binary that already exists in a
//! read-only bind can still be run through the dynamic loader; what is
//! written inside the sandbox cannot, because every writable mount is also
//! `noexec` (`crate::layout`). Other rights are not handled here: the mount
//! namespace decides what is writable.
//!
//! Raw syscalls: three calls do not need a crate.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `LANDLOCK_ACCESS_FS_EXECUTE`.
const ACCESS_FS_EXECUTE: u64 = 1;
/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;
/// `LANDLOCK_CREATE_RULESET_VERSION`.
const CREATE_RULESET_VERSION: u32 = 1;

/// `struct landlock_ruleset_attr` as of ABI 1 (later fields are optional
/// and the kernel takes the size we pass).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
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

/// A ruleset granting `EXECUTE` beneath each of `roots` that exists (a
/// directory, or a single file); missing ones are skipped (bwrap did not
/// mount them either). Fails when Landlock is not available: then exec
/// cannot be limited, and the sandbox must not start.
pub fn exec_ruleset(roots: &[impl AsRef<Path>]) -> io::Result<OwnedFd> {
    abi_version().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("Landlock is not available ({e}); exec cannot be limited to the system view"),
        )
    })?;
    let attr = RulesetAttr {
        handled_access_fs: ACCESS_FS_EXECUTE,
    };
    // SAFETY: creates a ruleset from a valid attribute of the size passed.
    let raw = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &raw const attr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the syscall returned a new descriptor we own.
    let ruleset = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    for root in roots {
        let root = root.as_ref();
        let Ok(path) = CString::new(root.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: open of a valid C string; O_PATH opens nothing's contents.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if fd < 0 {
            continue;
        }
        // SAFETY: `open` returned a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let rule = PathBeneathAttr {
            allowed_access: ACCESS_FS_EXECUTE,
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
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("Landlock rule for {}: {e}", root.display()),
            ));
        }
    }
    Ok(ruleset)
}

/// Enters the ruleset. Async-signal-safe (one syscall), for the child
/// between fork and exec; needs `PR_SET_NO_NEW_PRIVS` first.
pub fn restrict_self(ruleset: libc::c_int) -> bool {
    // SAFETY: plain syscall on a descriptor the caller holds.
    unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) == 0 }
}
