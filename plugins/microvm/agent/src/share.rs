//! The host's binds: each a 9p export over virtio, mounted where the host
//! says (docs/research/microvm.md §4.6). Read-only is enforced by QEMU on the
//! host; the guest mounts it read-only too, so writes fail early and
//! plainly.

use std::ffi::CString;

use sandbox_microvm_proto::Mount;

/// 9p over virtio, Linux dialect; large messages for throughput; no guest
/// cache, so the host's view and the guest's never disagree.
const OPTIONS: &str = "trans=virtio,version=9p2000.L,msize=262144,cache=none";

/// Mounts one export; the error names what failed.
pub fn mount(share: &Mount) -> Result<(), String> {
    let c = |s: &str| CString::new(s).map_err(|_| format!("a NUL byte in {s:?}"));
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if share.read_only {
        flags |= libc::MS_RDONLY;
    }
    crate::boot::mount(
        &c(&share.tag)?,
        &c(&share.path)?,
        c"9p",
        flags,
        &c(OPTIONS)?,
    )
    .map_err(|e| format!("mount -t 9p {} {}: {e}", share.tag, share.path))
}

/// Unmounts an export (before a checkpoint); fails while anything in the
/// guest uses it — a working directory, an open file — which the error
/// says.
pub fn unmount(share: &Mount) -> Result<(), String> {
    let path =
        CString::new(share.path.as_str()).map_err(|_| format!("a NUL byte in {:?}", share.path))?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "umount {}: {}",
            share.path,
            std::io::Error::last_os_error()
        ))
    }
}
