//! Serves the API's connections ourselves (instead of `axum::serve`, which
//! has no timeouts and no cap): accepts, admits each through
//! [`Connections`], runs it with hyper's HTTP/1 server under the deadlines
//! of [`connections::plan_deadline`], and ends them all within a bound at
//! shutdown.
//!
//! Streams (an exec's events, the approvals) have no deadline; a peer that
//! vanished without closing is noticed by TCP keep-alive probes on every
//! accepted socket ([`KEEPALIVE_IDLE`]) while the stream is quiet, and by
//! the kernel's retransmission limit while data is on its way: the socket
//! fails and hyper drops the stream, which ends its command. A client that
//! is alive but does not read is not cut — its kernel answers the
//! zero-window probes — and backpressure stops its command. (No
//! `TCP_USER_TIMEOUT`: Linux applies it to a window that stays closed, so
//! it would cut such a client; docs/measurements.md.)

use std::convert::Infallible;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::StatusCode;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use super::connections::{self, ConnState, Connections, Ticket};
use super::wire_answers;
use crate::config::ConnectionSettings;

/// Idle time before the first keep-alive probe on a quiet connection.
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Between probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the kernel gives up on the peer.
const KEEPALIVE_PROBES: i32 = 3;

/// A connection's request, as the token check finds it: the connection
/// it came on, to mark authenticated.
#[derive(Clone)]
pub struct OnConnection(pub Arc<ConnState>);

/// A connection's place in [`Connections`], for a route that takes the
/// connection over (a WebSocket) to hold beyond this task's end
/// ([`connections::Held`]).
#[derive(Clone)]
pub struct UpgradeSlot(pub Arc<Ticket>);

/// The running accept loop and its connections.
pub struct Listener {
    stop: watch::Sender<bool>,
    tasks: Arc<Mutex<JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Listener {
    /// Starts accepting on `listener`, serving `app`.
    pub fn start(listener: TcpListener, app: axum::Router, limits: ConnectionSettings) -> Self {
        let (stop, stop_rx) = watch::channel(false);
        let tasks = Arc::new(Mutex::new(JoinSet::new()));
        let connections = Connections::new(limits);
        let accept = tokio::spawn(accept_loop(
            listener,
            app,
            connections,
            Arc::clone(&tasks),
            stop_rx,
        ));
        Self {
            stop,
            tasks,
            accept,
        }
    }

    /// Stops accepting, closes idle connections and lets those with a
    /// request in flight finish it; after `grace` closes what is left.
    /// Returns how many had to be closed.
    pub async fn shut_down(self, grace: Duration) -> usize {
        let _ = self.stop.send(true);
        let _ = self.accept.await;
        let deadline = Instant::now() + grace;
        loop {
            if live(&self.tasks) == 0 {
                return 0;
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let left = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            tasks.abort_all();
            tasks.len()
        };
        // Aborted tasks drop their connections (and streams) when next polled.
        while live(&self.tasks) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        left
    }
}

/// Connection tasks still running (finished ones reaped).
fn live(tasks: &Mutex<JoinSet<()>>) -> usize {
    let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
    while tasks.try_join_next().is_some() {}
    tasks.len()
}

async fn accept_loop(
    listener: TcpListener,
    app: axum::Router,
    connections: Arc<Connections>,
    tasks: Arc<Mutex<JoinSet<()>>>,
    mut stop: watch::Receiver<bool>,
) {
    let limits = *connections.limits();
    let mut refusals = Refusals::default();
    let lingering = Arc::new(Semaphore::new(LINGERING_REFUSALS));
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait instead of spinning.
                tracing::warn!("accepting an API connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match connections.admit() {
            Ok(ticket) => {
                set_keepalive(&stream);
                let app = app.clone();
                let stop = stop.clone();
                let mut tasks = tasks.lock().unwrap_or_else(|p| p.into_inner());
                while tasks.try_join_next().is_some() {}
                tasks.spawn(serve_connection(stream, ticket, app, limits, stop));
            }
            Err(refusal) => {
                refusals.note(&refusal);
                refuse(stream, &refusal, &lingering);
            }
        }
    }
}

/// Logs refused connections once per burst, not once each.
#[derive(Default)]
struct Refusals {
    last_logged: Option<Instant>,
    since: usize,
}

impl Refusals {
    fn note(&mut self, refusal: &connections::Refusal) {
        self.since += 1;
        let due = self
            .last_logged
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(10));
        if due {
            tracing::warn!(refused = self.since, "refused API connection(s): {refusal}");
            self.last_logged = Some(Instant::now());
            self.since = 0;
        }
    }
}

/// Refused connections whose request is drained at once before the close
/// (beyond these, the close may reach the client as a reset instead of the
/// 503).
const LINGERING_REFUSALS: usize = 64;

/// How long a refused connection's request is drained.
const LINGER: Duration = Duration::from_secs(1);

/// A 503 with the API's JSON error shape, written without reading the
/// request (a fresh socket's buffer has room); then the write side closes
/// and what the client sent is read away for a moment, so that closing
/// does not reset the connection before the client has read the answer.
fn refuse(stream: TcpStream, refusal: &connections::Refusal, lingering: &Arc<Semaphore>) {
    let body =
        serde_json::json!({"error": refusal.to_string(), "configKey": "[api] max_connections"});
    let response =
        wire_answers::response(StatusCode::SERVICE_UNAVAILABLE, &body, "retry-after: 1\r\n");
    let _ = stream.try_write(&response);
    let Ok(permit) = Arc::clone(lingering).try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        close_after_answer(stream).await;
    });
}

/// Closes the write side, then reads away what the client still sends for
/// a moment ([`LINGER`]), so that the close does not reset the connection
/// before the client has read the answer written on it.
async fn close_after_answer(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut buf = [0u8; 4096];
    let drain = async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// TCP keep-alive probes (see the module doc); best effort: a socket that
/// refuses them still works, only a dead peer is noticed later.
fn set_keepalive(stream: &TcpStream) {
    let fd = stream.as_raw_fd();
    let secs = |d: Duration| i32::try_from(d.as_secs()).unwrap_or(i32::MAX);
    let options: [(i32, i32, i32); 4] = [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(KEEPALIVE_IDLE)),
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            secs(KEEPALIVE_INTERVAL),
        ),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES),
    ];
    for (level, name, value) in options {
        set_option(fd, level, name, value);
    }
}

fn set_option(fd: i32, level: i32, name: i32, value: i32) {
    let len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `value` is a live i32 of `len` bytes for the call; `fd` is
    // the open socket borrowed from the caller's stream.
    let done = unsafe { libc::setsockopt(fd, level, name, std::ptr::from_ref(&value).cast(), len) };
    if done != 0 {
        tracing::debug!(
            "setsockopt({level}, {name}) on an API connection: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Runs one connection to its end: hyper serves it; this task closes it
/// at a deadline, when it is evicted, or (after a graceful attempt) at
/// shutdown.
async fn serve_connection(
    stream: TcpStream,
    ticket: Ticket,
    app: axum::Router,
    limits: ConnectionSettings,
    mut stop: watch::Receiver<bool>,
) {
    let state = Arc::clone(&ticket.state);
    let ticket = Arc::new(ticket);
    // Valid while `connection` owns the stream: the whole loop below.
    let fd = stream.as_raw_fd();
    let io = TokioIo::new(Watched {
        stream,
        state: Arc::clone(&state),
        owed: Vec::new(),
    });
    let tower = TowerToHyperService::new(app);
    let service_state = Arc::clone(&state);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        let in_flight = service_state.request_started();
        request
            .extensions_mut()
            .insert(OnConnection(Arc::clone(&service_state)));
        request
            .extensions_mut()
            .insert(UpgradeSlot(Arc::clone(&ticket)));
        let response = hyper::service::Service::call(&tower, request);
        async move {
            let response = response.await?;
            // The request is in flight until its body is done or dropped:
            // a stream has no deadline.
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(body.map_frame(move |frame| {
                    let _in_flight = &in_flight;
                    frame
                }))
            }))
        }
    });
    // With upgrades: a terminal's WebSocket takes the connection over, and
    // lives on without this task's deadlines (a live terminal is never
    // closed for idling, as a live stream is not), holding the connection's
    // place in the count ([`UpgradeSlot`]) until it closes.
    let mut connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .with_upgrades();
    let mut stopping = *stop.borrow();
    if stopping {
        Pin::new(&mut connection).graceful_shutdown();
    }
    let answer = loop {
        if state.is_evicted() && state.phase().in_flight == 0 {
            tracing::debug!("closed an idle API connection to make room for a new one");
            return;
        }
        let deadline = connections::plan_deadline(&state.phase(), &limits);
        let sleep = async {
            match deadline {
                Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        // Hyper first, always: when this task wakes late (a CPU-starved
        // server) to a deadline passed and a request that arrived in the
        // meantime, hyper reads and starts that request before the deadline
        // is judged — the deadline is for a slow client, not a slow server.
        tokio::select! {
            biased;
            result = &mut connection => {
                if let Err(e) = result {
                    tracing::debug!("API connection: {e}");
                }
                return;
            }
            () = sleep => {
                let phase = state.phase();
                if let Some((at, expiry)) = connections::plan_deadline(&phase, &limits)
                    && at <= Instant::now()
                {
                    if unread_bytes(fd) > 0 {
                        // Woken to the deadline before hyper to the bytes
                        // that arrived meanwhile: the server is behind.
                        tracing::debug!("an API connection's deadline found its request unread: extended");
                        state.server_behind();
                        continue;
                    }
                    tracing::debug!("closed an API connection: {}", expiry.describe());
                    break connections::plan_timeout_answer(&phase, expiry);
                }
            }
            () = state.changed.notified() => {}
            _ = stop.wait_for(|stop| *stop), if !stopping => {
                stopping = true;
                Pin::new(&mut connection).graceful_shutdown();
            }
        }
    };
    // Only a connection that was never upgraded is still hyper's to give back.
    if answer && let Some(parts) = connection.into_parts() {
        let stream = parts.io.into_inner().stream;
        let _ = stream.try_write(&wire_answers::header_timeout());
        close_after_answer(stream).await;
    }
}

/// Bytes the client sent that the server has not read yet (`FIONREAD`);
/// 0 when that cannot be told.
fn unread_bytes(fd: i32) -> usize {
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `unread`; `fd` is the open socket
    // of the caller's live connection.
    let done = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
    if done == 0 {
        usize::try_from(unread).unwrap_or(0)
    } else {
        0
    }
}

/// The accepted socket, telling its connection's state when bytes arrive
/// (a request's head has begun: the header-read deadline applies), and
/// answering in JSON where hyper would answer a request it cannot parse
/// with a status alone ([`wire_answers::plan_parse_error_replacement`]).
struct Watched {
    stream: TcpStream,
    state: Arc<ConnState>,
    /// What is left to write of such a replacement; written before
    /// anything else, and before a flush or shutdown completes.
    owed: Vec<u8>,
}

impl Watched {
    fn poll_owed(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.owed.is_empty() {
            let n = std::task::ready!(Pin::new(&mut self.stream).poll_write(cx, &self.owed))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.owed.drain(..n);
        }
        Poll::Ready(Ok(()))
    }

    /// Whether `written` is hyper's answer to an unparsable request; if so
    /// the JSON one is owed instead.
    fn replaces(&mut self, written: &[u8]) -> bool {
        match wire_answers::plan_parse_error_replacement(written) {
            Some(answer) => {
                self.owed = answer;
                true
            }
            None => false,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_owed(cx))?;
        if self.replaces(buf) {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_owed(cx))?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.poll_owed(cx))?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::task::ready!(self.poll_owed(cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let an_error_head = bufs
            .iter()
            .find(|b| !b.is_empty())
            .is_some_and(|b| b.starts_with(b"HTTP/1.1 4"));
        if an_error_head && total <= wire_answers::LONGEST_REPLACED {
            let written: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            if self.replaces(&written) {
                return Poll::Ready(Ok(total));
            }
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
