//! Descriptors our caller left open. A shell that ran `exec 9<DIR` before
//! starting us hands that descriptor to every process we spawn unless it is
//! close-on-exec — and a sandboxed command could `fchdir(9)` out of every
//! mount and mask (threat model T-fd). Rust opens its own descriptors
//! close-on-exec; these are the only ones that are not.

/// Marks every descriptor above stderr close-on-exec: we may still use one
/// (nothing here does), but nothing we start inherits it.
pub fn close_inherited_on_exec() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on our
    // own descriptors; it closes nothing and touches no memory.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if done == 0 {
        return;
    }
    // Kernels before 5.11: one by one.
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a descriptor number; one that is gone gives EBADF.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}
