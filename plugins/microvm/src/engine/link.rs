//! The host end of the agent's port: one writer shared by every caller
//! (whole frames, never interleaved), one reader thread that turns the
//! agent's frames into events, and the waiters of requests that expect an
//! answer (`Exec` → `Started`/`Failed`, `Mount` → `Mounted`, `Ping` →
//! `Pong`).
//!
//! Tunnels (`TunnelOpen` from the agent: a guest program connected to an
//! egress port) are connected to the session's proxy of that port's role;
//! each gets a thread reading the proxy into frames and one writing the
//! agent's data into the proxy from a queue, so a slow proxy never stalls
//! the reader; both directions within a window (the writer acknowledges
//! what it wrote, the reader waits for the agent's acknowledgements).
//!
//! An exec's terminal event (`exit`, or `killed` when a timeout, a `kill`
//! or `destroy` asked for its end) is decided exactly once: when its
//! `Exit` frame arrives, or by [`Link::end_all`] for the streams still open
//! when the VM goes away.
//!
//! Flow control: each exec stream has a queue and a thread of its own that
//! hands its output to the event sink and then acknowledges it (`Credit`),
//! so the agent sends at most [`sandbox_microvm_proto::WINDOW`] bytes ahead of what was handed
//! on. A consumer that stops taking one exec's events stops only that
//! command (at its next write); the reader never waits for a sink, and the
//! queue never holds more than the window.

use std::collections::HashMap;
use std::io::{self, BufReader};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::io::{Read, Write};
use std::net::Shutdown;
use std::path::PathBuf;

use sandbox_microvm_proto::window::{Owed, Window};
use sandbox_microvm_proto::{CHUNK, Exit, Failed, Frame, Kind, Mounted, Started, TunnelOpen};
use sandbox_plugin_api::KillReason;
use sandbox_plugin_api::proxy;
use sandbox_plugin_api::sdk::EventSender;

/// An open tunnel's queue to its proxy writer (`None`: the agent sends no
/// more) and what the agent still lets us send into it.
type TunnelEnds = (Sender<Option<Vec<u8>>>, Arc<Window>);

/// An answer to a request that waits for one.
#[derive(Debug)]
pub enum Answer {
    Started(Started),
    Failed(Failed),
    Mounted(Mounted),
    Listening(Mounted),
    Pong,
}

/// The session's proxies, as unix sockets on the host.
#[derive(Debug, Clone)]
pub struct Proxies {
    pub http: PathBuf,
    pub socks: PathBuf,
}

/// One exec stream the agent may still send on.
struct Stream {
    /// Why the host asked it to end, if it did; decides `killed` vs `exit`.
    kill_reason: Option<KillReason>,
    /// To the stream's delivery thread, in arrival order.
    deliveries: Sender<Delivery>,
}

/// What a stream's delivery thread hands on.
enum Delivery {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The last one: the terminal event, decided when the stream ended.
    End(End),
}

enum End {
    Exit { code: i32, signal: Option<i32> },
    Killed(KillReason, Option<i32>),
}

/// The shared state of a link.
pub struct Link {
    writer: Mutex<UnixStream>,
    streams: Mutex<HashMap<u32, Stream>>,
    waiters: Mutex<HashMap<u32, Sender<Answer>>>,
    /// Per open tunnel, the queue to its proxy writer (`None`: the agent
    /// sends no more) and what the agent still lets us send into it.
    tunnels: Mutex<HashMap<u32, TunnelEnds>>,
    proxies: Option<Proxies>,
    events: EventSender,
    /// The exec streams' delivery threads, joined by [`Link::end_all`]: no
    /// event may follow the end of the sandbox.
    deliverers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Link {
    pub fn new(stream: UnixStream, events: EventSender, proxies: Option<Proxies>) -> Arc<Self> {
        Arc::new(Self {
            writer: Mutex::new(stream),
            streams: Mutex::default(),
            waiters: Mutex::default(),
            tunnels: Mutex::default(),
            proxies,
            events,
            deliverers: Mutex::default(),
        })
    }

    /// Where the sandbox's events go.
    pub fn events(&self) -> &EventSender {
        &self.events
    }

    /// Writes to the agent over `stream` from now on (a restored VM's
    /// port); the caller starts a reader on it.
    pub fn replace_transport(&self, stream: UnixStream) {
        if let Ok(mut writer) = self.writer.lock() {
            *writer = stream;
        }
    }

    /// An open tunnel's ends.
    fn tunnel(&self, stream: u32) -> Option<TunnelEnds> {
        self.tunnels.lock().ok()?.get(&stream).cloned()
    }

    /// How many egress tunnels are open.
    pub fn open_tunnels(&self) -> usize {
        self.tunnels.lock().map(|t| t.len()).unwrap_or(0)
    }

    /// Sends one frame.
    pub fn send(&self, frame: &Frame) -> io::Result<()> {
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| io::Error::other("the agent link's writer lock is poisoned"))?;
        frame.write_to(&mut *writer)
    }

    /// Sends a request on `stream` and waits up to `patience` for its answer.
    pub fn request(&self, frame: &Frame, patience: Duration) -> io::Result<Answer> {
        let rx = self.expect(frame.stream)?;
        if let Err(e) = self.send(frame) {
            self.forget_waiter(frame.stream);
            return Err(e);
        }
        let answer = rx.recv_timeout(patience);
        self.forget_waiter(frame.stream);
        answer.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the guest agent did not answer a {:?} within {patience:?}",
                    frame.kind
                ),
            )
        })
    }

    fn expect(&self, stream: u32) -> io::Result<Receiver<Answer>> {
        let (tx, rx) = channel();
        self.waiters
            .lock()
            .map_err(|_| io::Error::other("the agent link's waiters lock is poisoned"))?
            .insert(stream, tx);
        Ok(rx)
    }

    fn forget_waiter(&self, stream: u32) {
        if let Ok(mut w) = self.waiters.lock() {
            w.remove(&stream);
        }
    }

    fn answer(&self, stream: u32, answer: Answer) {
        let tx = self.waiters.lock().ok().and_then(|mut w| w.remove(&stream));
        if let Some(tx) = tx {
            let _ = tx.send(answer);
        }
    }

    /// Registers an exec stream before its `Exec` goes out, so no frame of
    /// it can arrive unrecognised, and starts its delivery thread.
    pub fn open_stream(self: &Arc<Self>, stream: u32) -> io::Result<()> {
        let (deliveries, queue) = channel();
        let link = Arc::clone(self);
        let handle = std::thread::Builder::new()
            .name(format!("microvm-exec-{stream}"))
            .spawn(move || link.deliver(stream, &queue))?;
        if let Ok(mut d) = self.deliverers.lock() {
            d.retain(|h| !h.is_finished());
            d.push(handle);
        }
        if let Ok(mut s) = self.streams.lock() {
            s.insert(
                stream,
                Stream {
                    kill_reason: None,
                    deliveries,
                },
            );
        }
        Ok(())
    }

    /// A stream's delivery thread: events in order, each output chunk
    /// acknowledged once the sink took it; ends with the terminal event,
    /// or when the stream is forgotten (it never started).
    fn deliver(&self, stream: u32, queue: &Receiver<Delivery>) {
        let id = u64::from(stream);
        let mut owed = Owed::default();
        for delivery in queue {
            let taken = match delivery {
                Delivery::Stdout(data) => {
                    let n = data.len();
                    self.events.stdout(id, data);
                    n
                }
                Delivery::Stderr(data) => {
                    let n = data.len();
                    self.events.stderr(id, data);
                    n
                }
                Delivery::End(End::Exit { code, signal }) => {
                    self.events.exit(id, code, signal);
                    return;
                }
                Delivery::End(End::Killed(reason, signal)) => {
                    self.events.killed(id, reason, signal);
                    return;
                }
            };
            // Acknowledged a quarter window at a time: one small frame per
            // 256 KiB instead of per chunk (each costs the guest a wake-up).
            if let Some(ack) = owed.handed_on(taken) {
                // A VM that is gone needs no credit.
                let _ = self.send(&Frame::credit(stream, ack));
            }
        }
    }

    /// Queues `delivery` for an open stream; `false` if it is not open.
    fn queue(&self, stream: u32, delivery: Delivery) -> bool {
        let tx = self
            .streams
            .lock()
            .ok()
            .and_then(|s| s.get(&stream).map(|st| st.deliveries.clone()));
        tx.is_some_and(|tx| tx.send(delivery).is_ok())
    }

    /// Forgets a stream that never started.
    pub fn close_stream(&self, stream: u32) {
        if let Ok(mut s) = self.streams.lock() {
            s.remove(&stream);
        }
    }

    /// Whether the exec stream is still open (started, no end yet).
    pub fn is_open(&self, stream: u32) -> bool {
        self.streams
            .lock()
            .map(|s| s.contains_key(&stream))
            .unwrap_or(false)
    }

    /// Records why the host is ending an exec (the first reason wins).
    pub fn mark_killed(&self, stream: u32, reason: KillReason) {
        if let Ok(mut s) = self.streams.lock()
            && let Some(st) = s.get_mut(&stream)
        {
            st.kill_reason.get_or_insert(reason);
        }
    }

    /// The exec streams still open.
    pub fn open_streams(&self) -> Vec<u32> {
        self.streams
            .lock()
            .map(|s| s.keys().copied().collect())
            .unwrap_or_default()
    }

    /// Ends every open exec stream with `killed` (`reason`, SIGKILL): the
    /// VM is gone, and so is everything that ran in it. Returns once every
    /// stream's events are handed on.
    pub fn end_all(&self, reason: KillReason) {
        let open: Vec<(u32, Stream)> = self
            .streams
            .lock()
            .map(|mut s| s.drain().collect())
            .unwrap_or_default();
        for (_, stream) in open {
            let reason = stream.kill_reason.unwrap_or(reason);
            let _ = stream
                .deliveries
                .send(Delivery::End(End::Killed(reason, Some(libc::SIGKILL))));
        }
        let deliverers: Vec<_> = self
            .deliverers
            .lock()
            .map(|mut d| d.drain(..).collect())
            .unwrap_or_default();
        for handle in deliverers {
            let _ = handle.join();
        }
    }

    /// The reader: runs until the agent's end closes or breaks. Returns why
    /// it stopped (`Ok` for a clean end of stream).
    pub fn read_until_closed(self: &Arc<Self>, stream: UnixStream) -> io::Result<()> {
        let mut input = BufReader::with_capacity(256 << 10, stream);
        while let Some(frame) = Frame::read_from(&mut input)? {
            self.dispatch(frame)?;
        }
        Ok(())
    }

    fn dispatch(self: &Arc<Self>, frame: Frame) -> io::Result<()> {
        match frame.kind {
            // Output of a stream that ended already is dropped.
            Kind::Stdout => {
                self.queue(frame.stream, Delivery::Stdout(frame.payload));
            }
            Kind::Stderr => {
                self.queue(frame.stream, Delivery::Stderr(frame.payload));
            }
            Kind::Started => self.answer(frame.stream, Answer::Started(frame.body()?)),
            Kind::Failed => {
                self.close_stream(frame.stream);
                self.answer(frame.stream, Answer::Failed(frame.body()?));
            }
            Kind::Mounted => self.answer(frame.stream, Answer::Mounted(frame.body()?)),
            Kind::Listening => self.answer(frame.stream, Answer::Listening(frame.body()?)),
            Kind::TunnelOpen => self.open_tunnel(frame.stream, frame.body()?),
            Kind::TunnelData => {
                if let Some((tx, _)) = self.tunnel(frame.stream) {
                    let _ = tx.send(Some(frame.payload));
                }
            }
            Kind::TunnelClose => {
                if let Some((tx, _)) = self.tunnel(frame.stream) {
                    let _ = tx.send(None);
                }
            }
            Kind::Credit => {
                if let (Some((_, window)), Some(bytes)) =
                    (self.tunnel(frame.stream), frame.credited())
                {
                    window.grant(bytes);
                }
            }
            Kind::Pong => self.answer(frame.stream, Answer::Pong),
            Kind::Exit => {
                let exit: Exit = frame.body()?;
                let ended = self
                    .streams
                    .lock()
                    .ok()
                    .and_then(|mut s| s.remove(&frame.stream));
                let Some(stream) = ended else {
                    return Ok(()); // already ended by `end_all`
                };
                let end = match (stream.kill_reason, exit.signal) {
                    (Some(reason), signal) => End::Killed(reason, signal),
                    (None, Some(signal)) => End::Exit {
                        code: 128 + signal,
                        signal: Some(signal),
                    },
                    (None, None) => End::Exit {
                        code: exit.code.unwrap_or(0),
                        signal: None,
                    },
                };
                let _ = stream.deliveries.send(Delivery::End(end));
            }
            Kind::Ping => self.send(&Frame::new(frame.stream, Kind::Pong, frame.payload))?,
            // Output of a stream that already ended, or a frame only the
            // host sends: nothing to do.
            _ => {}
        }
        Ok(())
    }
}

impl Link {
    /// Connects a new tunnel to the proxy of its port's role; a tunnel that
    /// cannot be connected is closed at once (the guest program sees the
    /// connection end, as with a refused one).
    fn open_tunnel(self: &Arc<Self>, stream: u32, open: TunnelOpen) {
        let target = self.proxies.as_ref().and_then(|p| match open.port {
            proxy::HTTP_PORT => Some(p.http.clone()),
            proxy::SOCKS_PORT => Some(p.socks.clone()),
            _ => None,
        });
        let upstream = target.map(|t| UnixStream::connect(&t).map_err(|e| (t, e)));
        let upstream = match upstream {
            Some(Ok(upstream)) => upstream,
            Some(Err((target, e))) => {
                tracing::warn!(
                    "microvm: cannot reach the proxy at {}: {e}",
                    target.display()
                );
                let _ = self.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
                return;
            }
            None => {
                let _ = self.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
                return;
            }
        };
        let Ok(reader) = upstream.try_clone() else {
            let _ = self.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
            return;
        };
        let (tx, rx) = channel::<Option<Vec<u8>>>();
        let window = Arc::new(Window::default());
        if let Ok(mut t) = self.tunnels.lock() {
            t.insert(stream, (tx, Arc::clone(&window)));
        }
        // Proxy → guest, within what the agent lets us send.
        let link = Arc::clone(self);
        let _ = std::thread::Builder::new()
            .name("microvm-tunnel-read".into())
            .spawn(move || {
                let mut reader = reader;
                let mut buf = vec![0u8; CHUNK];
                loop {
                    let allowed = window.wait_for_some(buf.len());
                    match reader.read(&mut buf[..allowed]) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            window.spend(n);
                            let frame = Frame::new(stream, Kind::TunnelData, buf[..n].to_vec());
                            if link.send(&frame).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = link.send(&Frame::new(stream, Kind::TunnelClose, Vec::new()));
            });
        // Guest → proxy, acknowledged as written.
        let link = Arc::clone(self);
        let _ = std::thread::Builder::new()
            .name("microvm-tunnel-write".into())
            .spawn(move || {
                let mut upstream = upstream;
                let mut owed = Owed::default();
                for message in rx {
                    match message {
                        Some(bytes) => {
                            if upstream.write_all(&bytes).is_err() {
                                // The proxy is gone: let the agent send what
                                // it has (it is dropped here).
                                let _ = link.send(&Frame::credit(stream, u32::MAX));
                                break;
                            }
                            if let Some(ack) = owed.handed_on(bytes.len()) {
                                let _ = link.send(&Frame::credit(stream, ack));
                            }
                        }
                        None => break,
                    }
                }
                let _ = upstream.shutdown(Shutdown::Write);
                if let Ok(mut t) = link.tunnels.lock() {
                    t.remove(&stream);
                }
            });
    }
}
