//! The control socket's sending side, shared by the main loop and the
//! guard's supervisor threads: one frame at a time.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};

use crate::proto::{self, Reply};

/// The control socket, shared by the main loop and the supervisor threads.
#[derive(Clone)]
pub struct Outbox {
    /// Outlives every sender: PID 1 exits with it.
    pub(crate) fd: RawFd,
    pub(crate) lock: Arc<Mutex<()>>,
}

impl Outbox {
    /// Sends one frame, whole, before any other thread may send its own.
    pub fn send(&self, seq: u64, reply: &Reply) -> io::Result<()> {
        self.send_with(seq, reply, &[])
    }

    /// [`Outbox::send`] with descriptors attached.
    pub fn send_with(&self, seq: u64, reply: &Reply, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let _frame = self
            .lock
            .lock()
            .map_err(|_| io::Error::other("send lock poisoned"))?;
        // SAFETY: the control descriptor outlives every sender (PID 1 exits
        // with it; supervisor threads die with the process).
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        proto::send(fd, seq, reply, fds)
    }
}
