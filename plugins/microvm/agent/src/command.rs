//! The commands running, one per stream. Each has a thread that reports
//! `Started` (or `Failed`), pumps its output and, once both pipes are at end
//! of file and the process is reaped, reports `Exit`, the stream's last
//! frame. A command reading stdin has a second thread feeding it, so a
//! command that does not read cannot stall the frame reader.
//!
//! Output is flow-controlled per stream: the pump sends at most
//! `WINDOW` bytes the host has not acknowledged (`Credit`), then stops
//! reading the command's pipes — the command blocks on its next write,
//! and no other stream waits for it.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

use sandbox_microvm_proto::window::Window;
use sandbox_microvm_proto::{CHUNK, Exec, Exit, Failed, Frame, Kind, PtySize, Started};

use crate::outbox::Outbox;
use crate::spawn::{self, Child};
use crate::{lock, log};

#[derive(Default)]
pub struct Streams {
    running: Mutex<HashMap<u32, Running>>,
}

struct Running {
    pid: i32,
    /// What the host still lets the pump send.
    credit: Arc<Window>,
    /// To the stdin feeder; `None` once the host closed stdin.
    stdin: Option<Sender<Vec<u8>>>,
    /// The terminal's master side, for a command started on one.
    terminal: Option<File>,
}

impl Streams {
    /// Starts `exec` on `stream`; `Err` is the `Failed` to send.
    pub fn start<W: Write + Send + 'static>(
        self: &Arc<Self>,
        stream: u32,
        exec: &Exec,
        outbox: &Arc<Outbox<W>>,
    ) -> Result<(), Failed> {
        let mut running = lock(&self.running);
        if running.contains_key(&stream) {
            return Err(Failed {
                errno: libc::EBUSY,
                message: format!("stream {stream} already runs a command"),
            });
        }
        let mut child = spawn::spawn(exec)?;
        let pid = child.pid;
        let terminal = child.terminal.take();
        let credit = Arc::new(Window::default());
        let started = child.stdin.take().map(feed).transpose().and_then(|stdin| {
            let (streams, outbox) = (Arc::clone(self), Arc::clone(outbox));
            let credit = Arc::clone(&credit);
            thread::Builder::new()
                .name(format!("stream {stream}"))
                .spawn(move || streams.supervise(stream, child, &outbox, &credit))?;
            Ok(stdin)
        });
        match started {
            Ok(stdin) => {
                running.insert(
                    stream,
                    Running {
                        pid,
                        credit,
                        stdin,
                        terminal,
                    },
                );
                Ok(())
            }
            Err(e) => {
                kill(pid, libc::SIGKILL);
                Err(Failed {
                    errno: e.raw_os_error().unwrap_or(libc::EAGAIN),
                    message: format!("cannot start a thread for the command: {e}"),
                })
            }
        }
    }

    /// Stdin for the command on `stream`; empty closes it. A terminal has
    /// no end of file to give: closing types ^D (EOF for a reader in
    /// canonical mode at the start of a line, as at a keyboard).
    pub fn stdin(&self, stream: u32, data: Vec<u8>) {
        let mut running = lock(&self.running);
        let Some(command) = running.get_mut(&stream) else {
            return log!("stdin for stream {stream}, which runs nothing");
        };
        if data.is_empty() {
            if command.terminal.is_some()
                && let Some(feeder) = &command.stdin
            {
                let _ = feeder.send(vec![0x04]);
            }
            command.stdin = None;
        } else if let Some(feeder) = &command.stdin {
            // The feeder stops when the command closed its stdin: drop.
            let _ = feeder.send(data);
        }
    }

    /// The host handed on `bytes` more output of `stream`.
    pub fn credit(&self, stream: u32, bytes: u32) {
        // A stream that ended meanwhile: nothing waits for it.
        if let Some(command) = lock(&self.running).get(&stream) {
            command.credit.grant(bytes);
        }
    }

    /// Gives the terminal of the command on `stream` a new size.
    pub fn resize(&self, stream: u32, size: PtySize) {
        let running = lock(&self.running);
        match running.get(&stream).map(|c| c.terminal.as_ref()) {
            Some(Some(terminal)) => {
                if let Err(e) = spawn::resize(terminal, size) {
                    log!("stream {stream}: resizing its terminal: {e}");
                }
            }
            Some(None) => log!("resize for stream {stream}, which has no terminal"),
            None => log!("resize for stream {stream}, which runs nothing"),
        }
    }

    /// Signals the process group of the command on `stream`.
    pub fn signal(&self, stream: u32, signal: i32) {
        let pid = lock(&self.running).get(&stream).map(|c| c.pid);
        match pid {
            Some(pid) => kill(pid, signal),
            None => log!("signal for stream {stream}, which runs nothing"),
        }
    }

    /// The life of one command after its fork.
    fn supervise<W: Write>(
        &self,
        stream: u32,
        mut child: Child,
        outbox: &Outbox<W>,
        credit: &Window,
    ) {
        if let Err(failed) = child.wait_exec() {
            lock(&self.running).remove(&stream);
            return outbox.send(&Frame::json(stream, Kind::Failed, &failed));
        }
        outbox.send(&Frame::json(
            stream,
            Kind::Started,
            &Started { pid: child.pid },
        ));
        let mut outputs = vec![(child.stdout, Kind::Stdout)];
        outputs.extend(child.stderr.map(|stderr| (stderr, Kind::Stderr)));
        pump(stream, &outputs, outbox, credit);
        let exit = match child.status.recv() {
            Ok(status) if libc::WIFSIGNALED(status) => Exit {
                code: None,
                signal: Some(libc::WTERMSIG(status)),
            },
            Ok(status) => Exit {
                code: Some(libc::WEXITSTATUS(status)),
                signal: None,
            },
            // The reaper dropped the sender: cannot happen, but say so.
            Err(_) => Exit {
                code: None,
                signal: None,
            },
        };
        // Before `Exit`: the host may reuse the stream once it has it.
        lock(&self.running).remove(&stream);
        outbox.send(&Frame::json(stream, Kind::Exit, &exit));
    }
}

/// Sends a command's output as it comes, until every pipe is at end of
/// file (the command and everything it left holding them are done). A
/// terminal's master side ends in EIO instead, once the slave side is
/// closed everywhere.
fn pump<W: Write>(stream: u32, pipes: &[(File, Kind)], outbox: &Outbox<W>, credit: &Window) {
    let mut polled: Vec<libc::pollfd> = pipes
        .iter()
        .map(|(file, _)| libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let mut buf = vec![0; CHUNK];
    while polled.iter().any(|p| p.fd >= 0) {
        // SAFETY: `polled` is a valid array of pollfd of that length; poll
        // ignores the negative (finished) ones.
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return log!("stream {stream}: poll: {e}");
        }
        for (p, (file, kind)) in polled.iter_mut().zip(pipes) {
            if p.fd < 0 || p.revents == 0 {
                continue;
            }
            let allowed = credit.wait_for_some(buf.len());
            let mut reader: &File = file;
            match reader.read(&mut buf[..allowed]) {
                Ok(0) => p.fd = -1,
                Ok(n) => {
                    credit.spend(n);
                    outbox.send(&Frame::new(stream, *kind, buf[..n].to_vec()));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.raw_os_error() == Some(libc::EIO) => p.fd = -1,
                Err(e) => {
                    log!("stream {stream}: reading {kind:?}: {e}");
                    p.fd = -1;
                }
            }
        }
    }
}

/// Starts a thread writing what it is sent to `stdin`, closing it when the
/// sender goes (end of file for the command).
fn feed(mut stdin: File) -> io::Result<Sender<Vec<u8>>> {
    let (to, from) = mpsc::channel::<Vec<u8>>();
    thread::Builder::new().name("stdin".into()).spawn(move || {
        for data in from {
            // EPIPE: the command closed its stdin; the rest is dropped.
            if stdin.write_all(&data).is_err() {
                break;
            }
        }
    })?;
    Ok(to)
}

/// Signals the group `pid` leads; if it does not exist yet (the child has
/// not called setsid), the child itself. Pids are allocated cyclically, so
/// a stale one cannot name a stranger in practice.
fn kill(pid: i32, signal: i32) {
    // SAFETY: plain syscalls.
    let rc = unsafe { libc::kill(-pid, signal) };
    if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, signal) };
    }
}
