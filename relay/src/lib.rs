//! Relays a command's output pipes to its sandbox's event stream.
//!
//! One reader thread per pipe emits output as it arrives (binary-safe, in
//! 64 KiB chunks; a slow host slows the reader, and through the pipe the
//! command: memory stays bounded); while a command streams, a reader
//! pauses briefly between reads ([`pace`]), so one read takes what several
//! writes left instead of a wake-up per write, and tops each read up with
//! what is ready at once (a terminal's master yields a few KiB per read).
//! When the backend learns how
//! the command ended it calls [`Relay::finish`], which lets the readers
//! drain, then marks the exec ended and emits the terminal event under the
//! same lock the readers emit under — so `exit`/`killed` is always the
//! exec's last event (the plugin-api contract), even when a background
//! process keeps a pipe open after the command itself is gone.
//!
//! Draining never loses what the command wrote: while a reader is delivering
//! (the host applies backpressure: a slow client, the server's output
//! budget) `finish` waits for it however long that takes, and so it does
//! for a pipe no process can write any more — every write end closed
//! (`POLLHUP` on the read end: the command and everything it started are
//! gone), so its end will come, however late its reader is scheduled on a
//! starved host (SPEC F10: no byte is lost, however late). The
//! grace only counts time the readers wait for a pipe that something still
//! holds open and silent (or that a background process trickles into). What
//! a reader may still read once `finish` began is capped at
//! [`AFTER_EXIT_LIMIT`] — what both pipes of the command can hold — so a
//! background process writing on forever cannot keep the exec from ending.
//!
//! A relay is made with [`Relay::prepare`] and its readers started with
//! [`Readers::start`]: a backend starts them once its command runs, so
//! their start is not on the exec's way in (the pipes hold what the
//! command writes meanwhile; SPEC G2). Dropped unstarted, the pipes
//! close.
//!
//! Where the host hands over a descriptor of its own for stdout (`cc_server
//! run`: its stdout), [`Relay::prepare_with_sink`] copies the pipe there
//! instead of emitting events ([`sink`]), and [`feed_stdin`] fills the
//! command's stdin from one: at pipe speed, with the same ordering of the
//! terminal event and the same backpressure. Only [`pipe`] uses `unsafe`.

#![deny(unsafe_code)]

mod feed;
mod pace;
pub mod pipe;
mod sink;

pub use feed::feed_stdin;

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sandbox_plugin_api::sdk::EventSender;
use sandbox_plugin_api::{Event, EventBody, SandboxViolation};

/// How long `finish` lets the readers drain after the command ended. Only
/// reached when something still holds a pipe's write end open.
pub const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// Output is read and emitted in chunks of this size.
const CHUNK: usize = 64 * 1024;

/// How many grace periods in a row `finish` extends because a reader read
/// something, without seeing one delivering: enough to cover a reader
/// between two deliveries of a backlog, not a background process that
/// prints now and then for ever.
const PROGRESS_GRACES: u32 = 4;

/// Bytes the readers together may still read after the command ended: its
/// stdout and its stderr pipe full, each at Linux's default
/// `fs.pipe-max-size` (the size the backends give them, and the most an
/// unprivileged command can make a pipe hold). What comes after that is a
/// background process's.
pub const AFTER_EXIT_LIMIT: u64 = 2 * pipe::PIPE_SIZE as u64;

/// Looks at stderr as it passes and reports what it recognises as refusals
/// (SPEC F12 on Linux). Called with each chunk, in order.
pub type StderrWatcher = Box<dyn FnMut(&[u8]) -> Vec<SandboxViolation> + Send>;

/// An exec's reader threads, to be started (see [`Relay::prepare`]).
pub struct Readers(Box<dyn FnOnce() + Send>);

impl Readers {
    /// Starts them.
    pub fn start(self) {
        (self.0)()
    }
}

/// The readers' ends, as they come, and how many [`Relay::finish`] or
/// [`Relay::finish_if_drained`] has seen.
struct Drained {
    ends: mpsc::Receiver<()>,
    seen: usize,
}

/// The output side of one exec.
pub struct Relay {
    exec_id: u64,
    events: EventSender,
    /// Held while emitting output and the terminal event.
    emitting: Mutex<()>,
    /// Set (under `emitting`) once the terminal event is out.
    ended: AtomicBool,
    ended_signal: (Mutex<()>, Condvar),
    drained: Mutex<Drained>,
    /// Targets of violations reported exactly (by the create-time guard):
    /// the same refusal guessed again from stderr is not reported twice.
    exact: Mutex<Vec<String>>,
    /// Readers delivering a chunk right now.
    delivering: AtomicUsize,
    /// Bytes read so far, both pipes (progress, seen by `finish`).
    read_bytes: AtomicU64,
    /// Set when `finish` begins; then `read_bytes` counts from `finish_mark`.
    finishing: AtomicBool,
    finish_mark: AtomicU64,
    /// A duplicate of each pipe's read end while its reader runs, for
    /// `finish` to ask whether any write end is left ([`pipe::hung_up`]).
    watched: [Mutex<Option<OwnedFd>>; 2],
}

impl Relay {
    /// A relay of the two pipes, one reader thread per pipe once
    /// [`Readers::start`] is called.
    pub fn prepare(
        exec_id: u64,
        stdout: impl Read + AsFd + Send + 'static,
        stderr: impl Read + AsFd + Send + 'static,
        events: EventSender,
        watcher: Option<StderrWatcher>,
    ) -> (Arc<Self>, Readers) {
        let watched = [watch(exec_id, &stdout), watch(exec_id, &stderr)];
        let (relay, drained_tx) = Self::new(exec_id, events, watched);
        let readers = Arc::clone(&relay);
        let start = move || {
            Self::read(&readers, stdout, Stream::Stdout, drained_tx.clone());
            Self::read(&readers, stderr, Stream::Stderr(watcher), drained_tx);
        };
        (relay, Readers(Box::new(start)))
    }

    /// [`Relay::prepare`], with stdout copied to `sink` — a descriptor of the
    /// host process, which never enters the sandbox — instead of emitted.
    pub fn prepare_with_sink(
        exec_id: u64,
        stdout: OwnedFd,
        stderr: impl Read + AsFd + Send + 'static,
        events: EventSender,
        watcher: Option<StderrWatcher>,
        sink: OwnedFd,
    ) -> (Arc<Self>, Readers) {
        let watched = [watch(exec_id, &stdout), watch(exec_id, &stderr)];
        let (relay, drained_tx) = Self::new(exec_id, events, watched);
        let readers = Arc::clone(&relay);
        let start = move || {
            let relay_for_thread = Arc::clone(&readers);
            let drained = drained_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("relay-sink-{exec_id}"))
                .spawn(move || {
                    sink::copy_out(&relay_for_thread, stdout, sink);
                    // The watch copy goes with the pipe, so a command whose
                    // sink refused meets a closed pipe.
                    relay_for_thread.stop_watching(0);
                    let _ = drained.send(());
                });
            if let Err(e) = spawned {
                readers.stop_watching(0);
                tracing::error!(exec = exec_id, "could not start an output copy thread: {e}");
            }
            Self::read(&readers, stderr, Stream::Stderr(watcher), drained_tx);
        };
        (relay, Readers(Box::new(start)))
    }

    fn new(
        exec_id: u64,
        events: EventSender,
        watched: [Mutex<Option<OwnedFd>>; 2],
    ) -> (Arc<Self>, mpsc::Sender<()>) {
        let (drained_tx, drained_rx) = mpsc::channel();
        let relay = Arc::new(Self {
            exec_id,
            events,
            emitting: Mutex::new(()),
            ended: AtomicBool::new(false),
            ended_signal: (Mutex::new(()), Condvar::new()),
            drained: Mutex::new(Drained {
                ends: drained_rx,
                seen: 0,
            }),
            exact: Mutex::new(Vec::new()),
            delivering: AtomicUsize::new(0),
            read_bytes: AtomicU64::new(0),
            finishing: AtomicBool::new(false),
            finish_mark: AtomicU64::new(0),
            watched,
        });
        (relay, drained_tx)
    }

    /// Whether a pipe whose reader is still running has no write end left
    /// anywhere: its reader will reach its end, and must be waited for.
    fn an_end_is_coming(&self) -> bool {
        self.watched.iter().any(|watched| {
            watched
                .lock()
                .is_ok_and(|fd| fd.as_ref().is_some_and(|fd| pipe::hung_up(fd.as_fd())))
        })
    }

    /// The exec this relay belongs to.
    pub fn exec_id(&self) -> u64 {
        self.exec_id
    }

    /// Whether the terminal event is out.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Waits until the terminal event is out; `false` on timeout.
    pub fn wait_ended(&self, patience: Duration) -> bool {
        let (lock, signal) = &self.ended_signal;
        let Ok(guard) = lock.lock() else { return true };
        signal
            .wait_timeout_while(guard, patience, |()| !self.has_ended())
            .map(|_| self.has_ended())
            .unwrap_or(true)
    }

    /// Emits an exactly reported violation, unless the exec has ended.
    pub fn violation(&self, violation: SandboxViolation) {
        let Ok(_emitting) = self.emitting.lock() else {
            return;
        };
        if self.has_ended() {
            return;
        }
        if let Ok(mut exact) = self.exact.lock() {
            exact.push(violation.target.clone());
        }
        self.events.violation(self.exec_id, violation);
    }

    /// Whether a guessed violation repeats an exact one (its target names
    /// the same file, perhaps relatively).
    fn already_reported(&self, guessed: &SandboxViolation) -> bool {
        !guessed.target.is_empty()
            && self.exact.lock().is_ok_and(|exact| {
                exact.iter().any(|t| {
                    t == &guessed.target
                        || t.ends_with(&format!("/{}", guessed.target.trim_start_matches("./")))
                })
            })
    }

    /// Emits the exec's terminal event (`exit` or `killed`) after the output
    /// that preceded it. Only the first call emits.
    pub fn finish(&self, terminal: EventBody) {
        debug_assert!(terminal.is_terminal());
        self.begin_finishing();
        if let Ok(mut drained) = self.drained.lock() {
            let mut seen = self.read_bytes.load(Ordering::SeqCst);
            let mut reading_only = 0;
            while drained.seen < 2 {
                match drained.ends.recv_timeout(DRAIN_GRACE) {
                    Ok(()) => drained.seen += 1,
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        // A reader still delivering is held by backpressure,
                        // and one whose pipe no process can write has its
                        // end coming: their bytes are the command's and are
                        // waited for, however long. One that only read
                        // since the last look (between two deliveries) gets
                        // a few graces.
                        let now = self.read_bytes.load(Ordering::SeqCst);
                        let progressed = now != seen;
                        seen = now;
                        if self.delivering.load(Ordering::SeqCst) > 0 || self.an_end_is_coming() {
                            reading_only = 0;
                        } else if progressed && reading_only < PROGRESS_GRACES {
                            reading_only += 1;
                        } else {
                            break;
                        }
                    }
                }
            }
        }
        self.emit_terminal(terminal);
    }

    /// [`Relay::finish`] without waiting: emits the terminal event now when
    /// both pipes have ended already — the usual case, a command's pipes
    /// close as it exits, before its end is reported — so the caller needs
    /// no thread of its own for it (one thread start less on every exec's
    /// way to its `exit`, SPEC G2). Gives `terminal` back while a
    /// pipe is still open: then [`Relay::finish`], where waiting is fine.
    pub fn finish_if_drained(&self, terminal: EventBody) -> Result<(), EventBody> {
        debug_assert!(terminal.is_terminal());
        let Ok(mut drained) = self.drained.lock() else {
            return Err(terminal);
        };
        while drained.seen < 2 {
            match drained.ends.try_recv() {
                Ok(()) => drained.seen += 1,
                // Every reader gone (or one never started): as `finish`.
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) => return Err(terminal),
            }
        }
        drop(drained);
        self.begin_finishing();
        self.emit_terminal(terminal);
        Ok(())
    }

    /// From here on the readers count what they read after the end.
    fn begin_finishing(&self) {
        self.finish_mark
            .store(self.read_bytes.load(Ordering::SeqCst), Ordering::SeqCst);
        self.finishing.store(true, Ordering::SeqCst);
    }

    /// Emits the terminal event, once.
    fn emit_terminal(&self, terminal: EventBody) {
        let Ok(emitting) = self.emitting.lock() else {
            return;
        };
        if self.ended.swap(true, Ordering::SeqCst) {
            return;
        }
        self.events.send(Event {
            exec_id: self.exec_id,
            body: terminal,
        });
        drop(emitting);
        let (lock, signal) = &self.ended_signal;
        let _guard = lock.lock();
        signal.notify_all();
    }

    fn read(
        relay: &Arc<Self>,
        mut pipe: impl Read + AsFd + Send + 'static,
        mut stream: Stream,
        drained: mpsc::Sender<()>,
    ) {
        let index = stream.index();
        let relay_for_thread = Arc::clone(relay);
        let name = format!("relay-{}-{}", stream.name(), relay.exec_id);
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let relay = relay_for_thread;
            let mut buf = vec![0u8; CHUNK];
            let mut pace = pace::Pace::default();
            loop {
                pace.before_read(pipe.as_fd());
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        // More was ready at once: the command outpaces
                        // the reader, and a pause would only hold it up.
                        let first = n;
                        let n = gather(&mut pipe, &mut buf, n);
                        pace.after_read(n == CHUNK || n > first);
                        relay.delivering.fetch_add(1, Ordering::SeqCst);
                        let total = relay.read_bytes.fetch_add(n as u64, Ordering::SeqCst);
                        // `finishing` first: once it is set, the mark is too.
                        let more = !relay.finishing.load(Ordering::SeqCst)
                            || (total + n as u64)
                                .saturating_sub(relay.finish_mark.load(Ordering::SeqCst))
                                <= AFTER_EXIT_LIMIT;
                        if more {
                            relay.emit(&mut stream, &buf[..n]);
                        }
                        relay.delivering.fetch_sub(1, Ordering::SeqCst);
                        if !more {
                            break; // a background process's output
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            // Closed with the pipe, so a background writer past the limit
            // meets a closed pipe.
            relay.stop_watching(index);
            drop(pipe);
            let _ = drained.send(());
        });
        if let Err(e) = spawned {
            relay.stop_watching(index);
            tracing::error!(
                exec = relay.exec_id,
                "could not start an output reader thread: {e}"
            );
        }
    }

    fn stop_watching(&self, index: usize) {
        if let Ok(mut watched) = self.watched[index].lock() {
            watched.take();
        }
    }

    fn emit(&self, stream: &mut Stream, chunk: &[u8]) {
        let Ok(_emitting) = self.emitting.lock() else {
            return;
        };
        if self.has_ended() {
            return; // a background process writing after the exec ended
        }
        match stream {
            Stream::Stdout => {
                self.events.stdout(self.exec_id, chunk.to_vec());
            }
            Stream::Stderr(watcher) => {
                self.events.stderr(self.exec_id, chunk.to_vec());
                if let Some(watch) = watcher {
                    for violation in watch(chunk) {
                        if !self.already_reported(&violation) {
                            self.events.violation(self.exec_id, violation);
                        }
                    }
                }
            }
        }
    }
}

/// Tops `buf[..n]` up with what is ready now, up to its size, without
/// waiting: one event then carries what several reads return. A terminal's
/// master yields at most a few KiB per read (its line discipline's buffer),
/// refilled while it is being read, so at speed this turns a wake-up and an
/// event per few KiB into one per [`CHUNK`]; when nothing more is ready it
/// costs one `poll` and adds no latency. An end of file or an error is
/// left to the next read, which sees it again.
fn gather(pipe: &mut (impl Read + AsFd), buf: &mut [u8], mut n: usize) -> usize {
    while n < buf.len() && pipe::readable_now(pipe.as_fd()) {
        match pipe.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(more) => n += more,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    n
}

enum Stream {
    Stdout,
    Stderr(Option<StderrWatcher>),
}

impl Stream {
    fn name(&self) -> &'static str {
        match self {
            Self::Stdout => "out",
            Self::Stderr(_) => "err",
        }
    }

    /// Its place in [`Relay::watched`].
    fn index(&self) -> usize {
        match self {
            Self::Stdout => 0,
            Self::Stderr(_) => 1,
        }
    }
}

/// A copy of an output pipe's read end, kept while its reader runs, to
/// tell when no process can write the pipe any more ([`pipe::hung_up`]).
fn watch(exec_id: u64, pipe: &dyn AsFd) -> Mutex<Option<OwnedFd>> {
    let dup = pipe.as_fd().try_clone_to_owned();
    if let Err(e) = &dup {
        tracing::warn!(
            exec = exec_id,
            "duplicating an output pipe (to tell when no process can write it): {e}"
        );
    }
    Mutex::new(dup.ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::testkit::{recording_sender, stream};
    use std::io::{PipeReader, Write};
    use std::os::fd::BorrowedFd;

    /// A pipe's read end whose reader is not scheduled for a while, made
    /// deterministic: once it has read `at` bytes it blocks for `stall`
    /// before reading on.
    struct Starved {
        pipe: PipeReader,
        read: usize,
        at: usize,
        stall: Duration,
    }

    impl Read for Starved {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.read >= self.at {
                std::thread::sleep(std::mem::take(&mut self.stall));
            }
            let n = self.pipe.read(buf)?;
            self.read += n;
            Ok(n)
        }
    }

    impl AsFd for Starved {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.pipe.as_fd()
        }
    }

    /// A terminal's master as a reader sees it: a few bytes per read,
    /// whatever is waiting.
    struct Dribble(PipeReader);

    impl Read for Dribble {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let most = buf.len().min(10);
            self.0.read(&mut buf[..most])
        }
    }

    impl AsFd for Dribble {
        fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }

    /// What is ready is taken in one go, up to the buffer's size; with
    /// nothing more ready, gathering returns at once (the writer is still
    /// open: a wait would hang).
    #[test]
    fn a_read_is_topped_up_with_what_is_ready_and_never_waits() {
        let (out_r, mut out_w) = std::io::pipe().unwrap();
        let mut dribble = Dribble(out_r);
        out_w.write_all(&[b'x'; 95]).unwrap();
        let mut buf = vec![0u8; 64];
        let first = dribble.read(&mut buf).unwrap();
        assert_eq!(first, 10);
        assert_eq!(
            gather(&mut dribble, &mut buf, first),
            64,
            "up to the buffer"
        );
        let first = dribble.read(&mut buf).unwrap();
        assert_eq!(gather(&mut dribble, &mut buf, first), 31, "what was left");
        out_w.write_all(b"y").unwrap();
        let first = dribble.read(&mut buf).unwrap();
        assert_eq!(
            gather(&mut dribble, &mut buf, first),
            1,
            "nothing more ready"
        );
    }

    const EXIT: EventBody = EventBody::Exit {
        code: 0,
        signal: None,
    };

    /// F10: the command wrote 256 KiB and exited; the last 60 KiB are
    /// in the pipe when `finish` begins, and the reader is not scheduled
    /// for longer than every grace. No process can write the pipe any
    /// more, so its end is waited for: nothing is lost, exit comes last.
    #[test]
    fn a_starved_reader_loses_nothing_once_no_process_can_write() {
        const TOTAL: usize = 256 * 1024;
        const LAST: usize = 60 * 1024;
        let (events, recorder) = recording_sender();
        let (out_r, mut out_w) = std::io::pipe().unwrap();
        let (err_r, err_w) = std::io::pipe().unwrap();
        drop(err_w);
        let starved = Starved {
            pipe: out_r,
            read: 0,
            at: TOTAL - LAST,
            stall: DRAIN_GRACE * (PROGRESS_GRACES + 1) * 2,
        };
        let relay = started(7, starved, err_r, events);
        let data: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
        // The command: all but the last part, read as it comes; then the
        // last part, which the pipe holds while its reader is stalled, and
        // its write end closes as it exits.
        out_w.write_all(&data[..TOTAL - LAST]).unwrap();
        let patience = std::time::Instant::now() + Duration::from_secs(60);
        while relay.read_bytes.load(Ordering::SeqCst) < (TOTAL - LAST) as u64 {
            assert!(
                std::time::Instant::now() < patience,
                "the reader never read"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        out_w.write_all(&data[TOTAL - LAST..]).unwrap();
        drop(out_w);
        relay.finish(EXIT);
        let events = recorder.wait_exec(7, Duration::from_secs(60)).unwrap();
        let got = stream(&events, false);
        assert_eq!(got.len(), TOTAL, "bytes lost");
        assert!(got == data, "other bytes than written");
        assert_eq!(events.last().map(|e| &e.body), Some(&EXIT), "exit is last");
    }

    /// A relay with its readers started, without a stderr watcher.
    fn started(
        exec_id: u64,
        stdout: impl Read + AsFd + Send + 'static,
        stderr: impl Read + AsFd + Send + 'static,
        events: EventSender,
    ) -> Arc<Relay> {
        let (relay, readers) = Relay::prepare(exec_id, stdout, stderr, events, None);
        readers.start();
        relay
    }

    /// A relay started on a fresh stdout pipe (its writer returned) and a
    /// stderr that has ended already.
    fn stdout_only(
        exec_id: u64,
    ) -> (
        Arc<Relay>,
        std::io::PipeWriter,
        Arc<sandbox_plugin_api::testkit::Recorder>,
    ) {
        let (events, recorder) = recording_sender();
        let (out_r, out_w) = std::io::pipe().unwrap();
        let (err_r, err_w) = std::io::pipe().unwrap();
        drop(err_w);
        (started(exec_id, out_r, err_r, events), out_w, recorder)
    }

    /// The contract that stays: a background process that holds the pipe
    /// open and writes on forever cannot keep the exec from ending, and
    /// meets a closed pipe once the reader has read its limit.
    #[test]
    fn a_writer_that_never_stops_does_not_hold_up_the_end() {
        let (relay, mut out_w, recorder) = stdout_only(8);
        let (stopped_tx, stopped) = mpsc::channel();
        std::thread::spawn(move || {
            let chunk = [b'x'; 4096];
            let error = loop {
                if let Err(e) = out_w.write_all(&chunk) {
                    break e;
                }
            };
            let _ = stopped_tx.send(error.kind());
        });
        relay.finish(EXIT);
        let events = recorder.wait_exec(8, Duration::from_secs(60)).unwrap();
        assert_eq!(events.last().map(|e| &e.body), Some(&EXIT));
        assert_eq!(
            stopped.recv_timeout(Duration::from_secs(60)),
            Ok(std::io::ErrorKind::BrokenPipe),
            "the writer was not stopped by a closed pipe"
        );
    }

    /// G2: with a pipe still open the end waits for
    /// `finish`; once both pipes have ended it is emitted at once, after
    /// the output, and only once.
    #[test]
    fn the_end_is_emitted_at_once_only_when_both_pipes_have_ended() {
        let (relay, mut out_w, recorder) = stdout_only(9);
        let terminal = relay
            .finish_if_drained(EXIT)
            .expect_err("stdout is still open");
        out_w.write_all(b"last words").unwrap();
        drop(out_w);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut terminal = Some(terminal);
        while let Some(t) = terminal.take() {
            match relay.finish_if_drained(t) {
                Ok(()) => {}
                Err(t) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                    terminal = Some(t);
                }
                Err(_) => panic!("both pipes ended, yet no end"),
            }
        }
        relay.finish(EXIT);
        let events = recorder.wait_exec(9, Duration::from_secs(60)).unwrap();
        assert_eq!(stream(&events, false), b"last words");
        let ends = events.iter().filter(|e| e.body.is_terminal()).count();
        assert_eq!(ends, 1, "{events:?}");
        assert_eq!(events.last().map(|e| &e.body), Some(&EXIT));
    }
}
