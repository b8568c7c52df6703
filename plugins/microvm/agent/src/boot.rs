//! What the kernel leaves to PID 1 before anything can run: the kernel's
//! own filesystems (devtmpfs also creates the port's device node) and a
//! sane `PATH`. Failures are logged, not fatal: the port search that
//! follows says what is really missing.

use std::ffi::{CStr, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{log, spawn};

/// What to mount: source, target, type, flags, options.
const MOUNTS: [(&CStr, &CStr, &CStr, libc::c_ulong, &CStr); 6] = [
    (c"proc", c"/proc", c"proc", NOSUID | NODEV | NOEXEC, c""),
    (c"sysfs", c"/sys", c"sysfs", NOSUID | NODEV | NOEXEC, c""),
    (c"devtmpfs", c"/dev", c"devtmpfs", NOSUID, c"mode=0755"),
    // Pseudo-terminals (`Exec.pty`): /dev/ptmx opens this instance.
    (
        c"devpts",
        c"/dev/pts",
        c"devpts",
        NOSUID | NOEXEC,
        c"mode=0620,ptmxmode=0666",
    ),
    (c"tmpfs", c"/tmp", c"tmpfs", NOSUID | NODEV, c"mode=1777"),
    (c"tmpfs", c"/run", c"tmpfs", NOSUID | NODEV, c"mode=0755"),
];
const NOSUID: libc::c_ulong = libc::MS_NOSUID;
const NODEV: libc::c_ulong = libc::MS_NODEV;
const NOEXEC: libc::c_ulong = libc::MS_NOEXEC;

/// Sets `PATH` and mounts the filesystems. Call before any thread exists.
pub fn prepare() {
    // SAFETY: PID 1 is still single-threaded here, so nothing reads the
    // environment concurrently.
    unsafe { std::env::set_var("PATH", spawn::DEFAULT_PATH) };
    for (source, target, fstype, flags, options) in MOUNTS {
        if let Err(e) = mount(source, target, fstype, flags, options) {
            log!(
                "cannot mount {} on {}: {e}",
                fstype.to_string_lossy(),
                target.to_string_lossy()
            );
        }
    }
}

/// Mounts `source` on `target` (created if missing).
pub(crate) fn mount(
    source: &CStr,
    target: &CStr,
    fstype: &CStr,
    flags: libc::c_ulong,
    options: &CStr,
) -> io::Result<()> {
    std::fs::create_dir_all(Path::new(OsStr::from_bytes(target.to_bytes())))?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            flags,
            options.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
