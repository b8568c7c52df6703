//! The backend's end of the socket to `sandbox-init`: requests wait for
//! their answer; `exited` events go to a handler; one reader thread.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox_init::proto::{self, Reply, Request};

/// How long a request may wait for PID 1's answer.
const ANSWER_PATIENCE: Duration = Duration::from_secs(30);

/// How a command ended, as PID 1 saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// What the reader thread reports.
pub trait ControlEvents: Send + Sync + 'static {
    /// An exec's command ended.
    fn exited(&self, exec_id: u64, exit: Exit);
    /// The create-time guard refused a call of an exec's command.
    fn violation(&self, exec_id: u64, violation: sandbox_plugin_api::SandboxViolation);
    /// PID 1 is gone (the socket closed or broke).
    fn lost(&self);
}

/// An answer, the descriptors that came with it, and — with descriptors —
/// the hold on the reader: it reads nothing further until the hold is
/// dropped, so the caller can register what the answer started before that
/// exec's `exited` is read.
type Answer = (Reply, Vec<OwnedFd>, Option<Hold>);

/// Keeps the control reader waiting while it lives.
pub struct Hold(#[allow(dead_code)] mpsc::Sender<()>);

type Waiters = Mutex<HashMap<u64, mpsc::Sender<Answer>>>;

/// The connection to one sandbox's PID 1.
pub struct Control {
    socket: UnixStream,
    /// Serialises frames: several execs may send at once.
    send_lock: Mutex<()>,
    next_seq: AtomicU64,
    waiters: Arc<Waiters>,
}

impl Control {
    /// Reads the `ready` that PID 1 sends first, then starts the reader.
    pub fn start(
        socket: UnixStream,
        patience: Duration,
        events: Arc<dyn ControlEvents>,
    ) -> io::Result<Self> {
        socket.set_read_timeout(Some(patience))?;
        let ready = proto::recv::<Reply>(socket.as_fd()).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => io::Error::new(
                io::ErrorKind::TimedOut,
                format!("sandbox-init did not start within {patience:?}"),
            ),
            _ => e,
        })?;
        match ready {
            Some((envelope, _))
                if envelope.body
                    == (Reply::Ready {
                        version: proto::VERSION,
                    }) => {}
            Some((envelope, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "sandbox-init answered {:?} instead of ready (protocol {})",
                        envelope.body,
                        proto::VERSION
                    ),
                ));
            }
            None => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "sandbox-init exited before it was ready",
                ));
            }
        }
        socket.set_read_timeout(None)?;
        let waiters: Arc<Waiters> = Arc::default();
        let reader = socket.try_clone()?;
        let reader_waiters = Arc::clone(&waiters);
        std::thread::Builder::new()
            .name("bwrap-control".into())
            .spawn(move || read_loop(&reader, &reader_waiters, events.as_ref()))?;
        Ok(Self {
            socket,
            send_lock: Mutex::new(()),
            next_seq: AtomicU64::new(1),
            waiters,
        })
    }

    /// Sends a request (with descriptors) and waits for its answer.
    pub fn call(&self, request: &Request, fds: &[BorrowedFd<'_>]) -> io::Result<Reply> {
        self.call_with_fds(request, fds).map(|(reply, _, _)| reply)
    }

    /// [`Control::call`], with the descriptors the answer brought; the
    /// reader waits until the [`Hold`] (if any) is dropped.
    pub fn call_with_fds(
        &self,
        request: &Request,
        fds: &[BorrowedFd<'_>],
    ) -> io::Result<(Reply, Vec<OwnedFd>, Option<Hold>)> {
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.waiters.lock().map_err(|_| poisoned())?.insert(seq, tx);
        let sent = {
            let _frame = self.send_lock.lock().map_err(|_| poisoned())?;
            proto::send(self.socket.as_fd(), seq, request, fds)
        };
        if let Err(e) = sent {
            self.forget(seq);
            return Err(e);
        }
        match rx.recv_timeout(ANSWER_PATIENCE) {
            Ok(reply) => Ok(reply),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.forget(seq);
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "sandbox-init did not answer",
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the sandbox is gone (sandbox-init exited)",
            )),
        }
    }

    /// Tells PID 1 to end the sandbox: it sees end-of-file, kills every
    /// process and exits.
    pub fn close(&self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }

    fn forget(&self, seq: u64) {
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters.remove(&seq);
        }
    }
}

fn poisoned() -> io::Error {
    io::Error::other("control lock poisoned")
}

fn read_loop(socket: &UnixStream, waiters: &Waiters, events: &dyn ControlEvents) {
    while let Ok(Some((envelope, fds))) = proto::recv::<Reply>(socket.as_fd()) {
        match envelope.body {
            Reply::Exited { id, code, signal } => events.exited(id, Exit { code, signal }),
            Reply::Violation {
                id,
                action,
                target,
                raw,
            } => events.violation(
                id,
                sandbox_plugin_api::SandboxViolation {
                    action,
                    target,
                    raw: Some(raw),
                },
            ),
            body => {
                let waiter = waiters
                    .lock()
                    .ok()
                    .and_then(|mut w| w.remove(&envelope.seq));
                if let Some(waiter) = waiter {
                    if fds.is_empty() {
                        let _ = waiter.send((body, fds, None));
                    } else {
                        let (hold, released) = mpsc::channel();
                        if waiter.send((body, fds, Some(Hold(hold)))).is_ok() {
                            // Ends when the caller drops its hold.
                            let _ = released.recv_timeout(ANSWER_PATIENCE);
                        }
                    }
                }
            }
        }
    }
    // Wake every caller still waiting: their senders are dropped.
    if let Ok(mut w) = waiters.lock() {
        w.clear();
    }
    events.lost();
}
