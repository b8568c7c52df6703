//! Terminals the server hosts (SPEC D1–D3): a shell running on a terminal
//! in a session of its own, which clients attach to and detach from.
//!
//! The transport is the front-end's (the API's WebSocket); this crate keeps
//! what every transport needs the same:
//!
//! - **Fan-out with bounded queues.** One pump reads the shell's output and
//!   offers each chunk to every attached client's queue of
//!   [`Settings::queue_chunks`] chunks. A client whose queue is full is
//!   dropped on the spot and marked slow ([`Attached::slow`]), so a client
//!   that does not read never grows the server's memory nor holds the
//!   others back; its transport closes it with the reason.
//! - **Single-use tickets.** A browser cannot put a credential on a
//!   WebSocket's upgrade, so an authenticated request mints a ticket for one
//!   terminal ([`Terminals::ticket`]), good for one attach within
//!   [`Settings::ticket_ttl`].
//! - **Life.** A terminal ends when its shell ends (every client gets the
//!   exit), when it is closed, or [`Settings::grace`] after its last client
//!   left (or after it was made, if nobody came); its session is destroyed
//!   with it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox_plugin_api::{EventBody, PtySize};
use sandbox_runtime::sessions::{ExecStream, Session, SessionError, Sessions};
use tokio::sync::{Notify, mpsc};

/// What the terminals are allowed.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a terminal lives on without a client.
    pub grace: Duration,
    /// Chunks of output one client may have waiting before it is dropped.
    pub queue_chunks: usize,
    /// How long a ticket may wait for its attach.
    pub ticket_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(30),
            queue_chunks: 256,
            ticket_ttl: Duration::from_secs(30),
        }
    }
}

/// What a client receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The terminal's bytes, shared by every client's queue (a clone is a
    /// reference, never a copy).
    Bytes(bytes::Bytes),
    /// The shell ended: its exit code, or the signal that ended it.
    Exit { code: i32, signal: Option<i32> },
}

/// The terminals of a server.
pub struct Terminals {
    settings: Settings,
    /// Where a terminal's session is destroyed and forgotten at its end.
    sessions: Arc<Sessions>,
    live: Mutex<HashMap<String, Arc<Terminal>>>,
    tickets: Mutex<HashMap<String, (String, Instant)>>,
}

/// One terminal: a shell on a terminal in its session.
pub struct Terminal {
    pub id: String,
    pub session: Arc<Session>,
    pub exec_id: u64,
    clients: Mutex<Clients>,
    /// How the shell ended, once it has.
    exit: Mutex<Option<Output>>,
    closed: AtomicBool,
    /// Rung when a client leaves (the grace timer looks again).
    left: Notify,
}

#[derive(Default)]
struct Clients {
    next: u64,
    queues: HashMap<u64, Queue>,
}

struct Queue {
    sender: mpsc::Sender<Output>,
    slow: Arc<Slow>,
}

/// Set, and rung, when a client was dropped for not reading.
#[derive(Default)]
pub struct Slow {
    flag: AtomicBool,
    notify: Notify,
}

impl Slow {
    /// Whether the client was dropped for not reading.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Waits until the client is dropped for not reading.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }

    fn set(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }
}

/// A client attached to a terminal; detaches when dropped.
pub struct Attached {
    pub terminal: Arc<Terminal>,
    pub output: mpsc::Receiver<Output>,
    pub slow: Arc<Slow>,
    id: u64,
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Ok(mut clients) = self.terminal.clients.lock() {
            clients.queues.remove(&self.id);
        }
        self.terminal.left.notify_waiters();
    }
}

/// Why an attach or a ticket was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No live terminal of that id.
    NoTerminal(String),
    /// The ticket is unknown, used, expired, or for another terminal.
    BadTicket,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoTerminal(id) => write!(f, "no live terminal {id}"),
            Self::BadTicket => f.write_str(
                "the ticket is unknown, already used, expired, or for another terminal: \
                 get a new one with `POST /v1/terminals/{id}/tickets`",
            ),
        }
    }
}

impl Terminals {
    pub fn new(settings: Settings, sessions: Arc<Sessions>) -> Arc<Self> {
        Arc::new(Self {
            settings,
            sessions,
            live: Mutex::default(),
            tickets: Mutex::default(),
        })
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Hosts the shell of `stream` (started on a terminal in `session`)
    /// as terminal `id`: its pump starts, and its grace period with it.
    pub fn host(
        self: &Arc<Self>,
        id: String,
        session: Arc<Session>,
        stream: ExecStream,
    ) -> Arc<Terminal> {
        let terminal = Arc::new(Terminal {
            id: id.clone(),
            session,
            exec_id: stream.exec_id,
            clients: Mutex::default(),
            exit: Mutex::new(None),
            closed: AtomicBool::new(false),
            left: Notify::new(),
        });
        if let Ok(mut live) = self.live.lock() {
            live.insert(id, Arc::clone(&terminal));
        }
        tokio::spawn(pump(Arc::clone(self), Arc::clone(&terminal), stream));
        tokio::spawn(watch_clients(Arc::clone(self), Arc::clone(&terminal)));
        terminal
    }

    /// The live terminal `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Terminal>, Refused> {
        self.live
            .lock()
            .ok()
            .and_then(|live| live.get(id).cloned())
            .ok_or_else(|| Refused::NoTerminal(id.to_owned()))
    }

    /// Every live terminal.
    pub fn list(&self) -> Vec<Arc<Terminal>> {
        self.live
            .lock()
            .map(|live| live.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A single-use ticket to attach to terminal `id` once.
    pub fn ticket(&self, id: &str) -> Result<String, Refused> {
        self.get(id)?;
        let ticket = sandbox_runtime::random::hex(24).map_err(|_| Refused::BadTicket)?;
        if let Ok(mut tickets) = self.tickets.lock() {
            let now = Instant::now();
            tickets.retain(|_, (_, made)| now.duration_since(*made) < self.settings.ticket_ttl);
            tickets.insert(ticket.clone(), (id.to_owned(), now));
        }
        Ok(ticket)
    }

    /// Takes `ticket` (it is gone after this, used or not) and attaches a
    /// client to terminal `id` if the ticket is for it and still fresh.
    pub fn attach(&self, id: &str, ticket: &str) -> Result<Attached, Refused> {
        let taken = self.tickets.lock().ok().and_then(|mut t| t.remove(ticket));
        match taken {
            Some((for_id, made)) if for_id == id && made.elapsed() < self.settings.ticket_ttl => {}
            _ => return Err(Refused::BadTicket),
        }
        let terminal = self.get(id)?;
        Ok(terminal.attach(self.settings.queue_chunks))
    }

    /// Ends terminal `id` now: its session is destroyed.
    pub async fn close(&self, id: &str) -> Result<(), Refused> {
        let terminal = self.get(id)?;
        self.end(&terminal).await;
        Ok(())
    }

    async fn end(&self, terminal: &Arc<Terminal>) {
        if terminal.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Ok(mut live) = self.live.lock() {
            live.remove(&terminal.id);
        }
        if let Ok(mut clients) = terminal.clients.lock() {
            clients.queues.clear();
        }
        if self.sessions.destroy(&terminal.session.id).await.is_err() {
            // Not listed (any more): destroyed all the same.
            terminal.session.destroy().await;
        }
        tracing::info!(terminal = %terminal.id, "terminal ended");
    }
}

impl Terminal {
    fn attach(self: &Arc<Self>, chunks: usize) -> Attached {
        let (sender, output) = mpsc::channel(chunks.max(1));
        let slow = Arc::new(Slow::default());
        let mut id = 0;
        if let Ok(mut clients) = self.clients.lock() {
            clients.next += 1;
            id = clients.next;
            // A client that comes after the end sees the end.
            if let Ok(exit) = self.exit.lock()
                && let Some(exit) = exit.clone()
            {
                let _ = sender.try_send(exit);
            } else {
                clients.queues.insert(
                    id,
                    Queue {
                        sender,
                        slow: Arc::clone(&slow),
                    },
                );
            }
        }
        Attached {
            terminal: Arc::clone(self),
            output,
            slow,
            id,
        }
    }

    /// How many clients are attached.
    pub fn clients(&self) -> usize {
        self.clients.lock().map(|c| c.queues.len()).unwrap_or(0)
    }

    /// Types `bytes` into the terminal.
    pub async fn input(&self, bytes: Vec<u8>) -> Result<(), SessionError> {
        self.session.write_stdin(self.exec_id, bytes).await
    }

    /// Gives the terminal a new size.
    pub async fn resize(&self, cols: u16, rows: u16) -> Result<(), SessionError> {
        self.session
            .resize(self.exec_id, PtySize { cols, rows })
            .await
    }

    /// Signals the shell's process group.
    pub async fn signal(&self, signal: i32) -> Result<(), SessionError> {
        self.session.kill(self.exec_id, signal).await
    }

    /// Offers `output` to every client; a client whose queue is full is
    /// dropped and marked slow.
    fn broadcast(&self, output: &Output) {
        let Ok(mut clients) = self.clients.lock() else {
            return;
        };
        clients
            .queues
            .retain(|_, queue| match queue.sender.try_send(output.clone()) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    queue.slow.set();
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            });
    }
}

/// Reads the shell's events until its end, and hands them out.
async fn pump(terminals: Arc<Terminals>, terminal: Arc<Terminal>, mut stream: ExecStream) {
    while let Some(event) = stream.next().await {
        let output = match event.body {
            EventBody::Stdout(bytes) | EventBody::Stderr(bytes) => Output::Bytes(bytes.into()),
            EventBody::Exit { code, signal } => Output::Exit { code, signal },
            EventBody::Killed { signal, .. } => Output::Exit {
                code: 128 + signal.unwrap_or(9),
                signal,
            },
            _ => continue,
        };
        let last = matches!(output, Output::Exit { .. });
        if last && let Ok(mut exit) = terminal.exit.lock() {
            *exit = Some(output.clone());
        }
        terminal.broadcast(&output);
        if last {
            break;
        }
    }
    // Closing the queues lets every client read what is left, then its end.
    if let Ok(mut clients) = terminal.clients.lock() {
        clients.queues.clear();
    }
    terminals.end(&terminal).await;
}

/// Ends the terminal once it has had no client for the grace period.
async fn watch_clients(terminals: Arc<Terminals>, terminal: Arc<Terminal>) {
    let grace = terminals.settings.grace;
    loop {
        if terminal.closed.load(Ordering::SeqCst) {
            return;
        }
        let left = terminal.left.notified();
        if terminal.clients() == 0 {
            match tokio::time::timeout(grace, left).await {
                // Someone left or came meanwhile: look again.
                Ok(()) => continue,
                Err(_) if terminal.clients() == 0 => {
                    tracing::info!(terminal = %terminal.id, "no client for {grace:?}: ending it");
                    terminals.end(&terminal).await;
                    return;
                }
                Err(_) => continue,
            }
        }
        left.await;
    }
}

/// A counter for terminal ids in this process (with a random part: ids
/// are not guessable, though every route needs the owner anyway).
pub fn new_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let random = sandbox_runtime::random::hex(6).unwrap_or_default();
    format!("term-{n}-{random}")
}
