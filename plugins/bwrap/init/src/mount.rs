//! The `mount(2)` calls PID 1 makes, as small functions: a bind of a point
//! onto itself, a remount with flags, a read-only bind, a mount with a type
//! and data. [`crate::layout`] and [`crate::caches`] both use them.

use std::io;

/// Binds `point` onto itself and remounts that bind with `flags` (which
/// carry `MS_RDONLY`); a point that does not exist is skipped.
pub(crate) fn read_only_bind(point: &str, flags: libc::c_ulong) -> io::Result<()> {
    if std::fs::symlink_metadata(point).is_err() {
        return Ok(());
    }
    bind_onto_itself(point, libc::MS_BIND)?;
    remount(point, flags)
}

/// `mount --bind point point` (`MS_REC` in `flags` takes the mounts below).
pub(crate) fn bind_onto_itself(point: &str, flags: libc::c_ulong) -> io::Result<()> {
    mount_at(Some(point), point, flags)
}

/// A bind remount of `point` with `flags`.
pub(crate) fn remount(point: &str, flags: libc::c_ulong) -> io::Result<()> {
    mount_at(None, point, flags)
}

/// `mount(2)` of `source` (or none) at `point`, with no type or data.
fn mount_at(source: Option<&str>, point: &str, flags: libc::c_ulong) -> io::Result<()> {
    mount_fs(source, point, None, flags, None)
}

/// `mount(2)` with an optional source, file system type and data.
pub(crate) fn mount_fs(
    source: Option<&str>,
    point: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let c = |text: &str| std::ffi::CString::new(text).map_err(io::Error::other);
    let target = c(point)?;
    let source = source.map(c).transpose()?;
    let fstype = fstype.map(c).transpose()?;
    let data = data.map(c).transpose()?;
    let ptr = |s: &Option<std::ffi::CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is a valid C string or null, alive for the call.
    let done = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
