//! Waiting for a child to exit within a patience: on a pidfd (Linux 5.3),
//! readable once it has exited, so its end is waited for, not polled.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::spawner::Child;
use std::time::{Duration, Instant};

/// Waits up to `patience` for `child` to exit; past it, kills and reaps it
/// and returns `false`.
pub fn wait_or_kill(child: &mut Child, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    let exited = pid_fd(child);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return true,
            Ok(None) if Instant::now() < deadline => wait_readable(exited.as_ref(), deadline),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// A pidfd of `child`; `None` where the kernel has none.
fn pid_fd(child: &Child) -> Option<OwnedFd> {
    // SAFETY: pidfd_open of our own unreaped child (its pid cannot be reused).
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id(), 0) };
    // SAFETY: a fresh descriptor that nobody else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Blocks until `fd` is readable or `deadline` passes; without a pidfd,
/// one millisecond (the caller checks again).
fn wait_readable(fd: Option<&OwnedFd>, deadline: Instant) {
    let Some(fd) = fd else {
        std::thread::sleep(Duration::from_millis(1));
        return;
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = left.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: poll on one pollfd we own, for at most `millis`.
    unsafe { libc::poll(&mut poll, 1, millis) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn an_exit_is_seen_at_once_and_a_child_that_stays_is_killed() {
        use crate::spawner::{Launch, spawn};
        let mut quick = spawn(Launch::new::<&str>(Path::new("/bin/true"), &[]).unwrap()).unwrap();
        let began = Instant::now();
        assert!(wait_or_kill(&mut quick, Duration::from_secs(5)));
        assert!(began.elapsed() < Duration::from_secs(5));
        let mut stays = spawn(Launch::new(Path::new("/bin/sleep"), &["30"]).unwrap()).unwrap();
        assert!(!wait_or_kill(&mut stays, Duration::from_millis(100)));
        assert!(stays.try_wait().unwrap().is_some(), "reaped");
    }
}
