//! One session's pair of proxies (SPEC E1): the listeners, the credential
//! check, the set of live connection and tunnel tasks, and teardown.
//!
//! Every task a session starts (accept loops, proxy connections, tunnels,
//! upstream HTTP connections) lives in one [`JoinSet`] owned by the session,
//! so [`SessionProxies::shutdown`] or dropping the session ends all of them:
//! the policy is only checked at connect time, and no tunnel may outlive the
//! run that opened it.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::task::JoinSet;

use crate::{Ingress, Policy, Refusal, Violation};

/// Called for every refused connection.
pub type ViolationSink = Arc<dyn Fn(Violation) + Send + Sync>;

/// Where a session's proxies listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// Unix sockets `http.sock` and `socks.sock` in `dir` (mode 0600), for
    /// backends that bind them into the sandbox (bwrap, microvm).
    Unix { dir: PathBuf },
    /// `127.0.0.1:0` ports that require this credential (HTTP
    /// `Proxy-Authorization: Basic`, SOCKS5 RFC 1929), for backends that
    /// share the host's loopback (none, seatbelt).
    Tcp { credential: Credential },
}

/// A per-session proxy credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub user: String,
    pub password: String,
}

impl Credential {
    /// Compares without an early exit, so the time taken does not tell a
    /// local prober how much of a guess was right.
    pub fn matches(&self, user: &[u8], password: &[u8]) -> bool {
        // Both comparisons always run.
        let u = ct_eq(self.user.as_bytes(), user);
        let p = ct_eq(self.password.as_bytes(), password);
        u & p
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        let y = b.get(i).copied().unwrap_or(!*x);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

/// Where a session's proxies ended up listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoints {
    Unix {
        http: PathBuf,
        socks: PathBuf,
    },
    Tcp {
        http: SocketAddr,
        socks: SocketAddr,
        credential: Credential,
    },
}

/// File names of the two unix sockets inside [`Listen::Unix`]'s `dir`.
pub const HTTP_SOCKET: &str = "http.sock";
pub const SOCKS_SOCKET: &str = "socks.sock";

/// Per-attempt timeout when dialling one of the checked addresses.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// At most this many live tasks (client connections, tunnels, upstream HTTP
/// connections; each holds one or two descriptors) per session. Beyond it
/// the session stops accepting until some end, so one sandbox opening
/// connections in a loop cannot exhaust the server's descriptors for all.
/// A backstop behind the connection cap ([`DEFAULT_MAX_CONNECTIONS`]): the
/// connections refused past the cap are tasks too, for as long as their
/// handshake takes.
pub const MAX_SESSION_TASKS: usize = 1024;

/// The default of `[egress] max_connections`: open client connections of
/// one session (a tunnel included, each holding a descriptor to the sandbox
/// and one upstream). A package manager opens tens at a time; past the cap
/// a connection is refused, in its own protocol, with a `network-outbound`
/// violation naming the cap and the key ([`CAP_TAG`]).
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// The refusal tag (`X-Proxy-Error`, the violation's `raw`) of a connection
/// refused past the session's connection cap.
pub const CAP_TAG: &str = "connection-cap";

/// The refusal of a connection past the cap, naming the cap and the key.
pub fn cap_refusal(host: &str, port: u16, cap: usize) -> Refusal {
    Refusal {
        target: format!("{host}:{port}"),
        rule: format!(
            "the session already has {cap} open egress connections, its cap; close some, or \
             raise `[egress] max_connections` in the server's config"
        ),
        tag: CAP_TAG,
    }
}

/// Buffer size of each direction of a tunnel (docs/research/egress-policy.md
/// A8: the default 8 KiB halves throughput).
pub const TUNNEL_BUFFER: usize = 64 * 1024;

/// The live tasks of one session. `None` once the session is shut down:
/// nothing new starts after that.
#[derive(Clone, Default)]
pub(crate) struct Tasks(Arc<Mutex<Option<JoinSet<()>>>>);

impl Tasks {
    fn new() -> Self {
        Self(Arc::new(Mutex::new(Some(JoinSet::new()))))
    }

    /// Starts `fut` as a task of this session; returns `false` (and drops
    /// `fut`) when the session is already shut down.
    pub(crate) fn spawn<F>(&self, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(set) = guard.as_mut() else {
            return false;
        };
        // Reap finished tasks so the set only grows with live ones.
        while let Some(done) = set.try_join_next() {
            if let Err(e) = done
                && e.is_panic()
            {
                tracing::warn!("egress task panicked: {e}");
            }
        }
        set.spawn(fut);
        true
    }

    /// Aborts everything and stops new tasks from starting; the caller may
    /// await the returned set to know they are gone.
    fn close(&self) -> Option<JoinSet<()>> {
        let mut set = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()?;
        set.abort_all();
        Some(set)
    }

    /// How many tasks are still running (0 once shut down).
    pub(crate) fn live(&self) -> usize {
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(set) => {
                while set.try_join_next().is_some() {}
                set.len()
            }
            None => 0,
        }
    }
}

/// What every connection of one session shares.
pub(crate) struct Ctx {
    pub(crate) policy: Arc<Policy>,
    on_violation: ViolationSink,
    /// `Some` on TCP listeners: every client must present it.
    pub(crate) credential: Option<Credential>,
    pub(crate) tasks: Tasks,
    /// See [`MAX_SESSION_TASKS`].
    max_tasks: usize,
    /// See [`DEFAULT_MAX_CONNECTIONS`].
    max_connections: usize,
    /// Admitted client connections open now ([`Slot`]s alive).
    open: Arc<AtomicUsize>,
}

/// One admitted client connection, counted while any clone lives: the
/// connection's task holds one, and after a CONNECT the tunnel's does.
pub(crate) struct Slot {
    open: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a client connection came in under the session's cap. One past it
/// is still served, so that its client hears why in its own protocol, but
/// every target it asks for is refused.
pub(crate) type Admission = Option<Arc<Slot>>;

impl Ctx {
    /// Counts a new client connection, or `None` at the cap.
    fn admit(&self) -> Admission {
        let mut open = self.open.load(Ordering::SeqCst);
        loop {
            if open >= self.max_connections {
                return None;
            }
            match self
                .open
                .compare_exchange(open, open + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    return Some(Arc::new(Slot {
                        open: Arc::clone(&self.open),
                    }));
                }
                Err(now) => open = now,
            }
        }
    }

    /// [`Ctx::decide`] for a connection: one admitted past the cap gets the
    /// cap's refusal instead (reported like any other).
    pub(crate) async fn decide_for(
        &self,
        admission: &Admission,
        host: &str,
        port: u16,
        ingress: Ingress,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        if admission.is_some() {
            return self.decide(host, port, ingress).await;
        }
        let refusal = cap_refusal(host, port, self.max_connections);
        tracing::info!(%ingress, "egress refused: {refusal}");
        (self.on_violation)(Violation {
            refusal: refusal.clone(),
            ingress,
        });
        Err(refusal)
    }

    /// Asks the policy; a refusal is reported to the sink before it is
    /// returned, so every path reports exactly once.
    pub(crate) async fn decide(
        &self,
        host: &str,
        port: u16,
        ingress: Ingress,
    ) -> Result<Vec<SocketAddr>, Refusal> {
        match self.policy.decide(host, port, ingress).await {
            Ok(addrs) => Ok(addrs),
            Err(refusal) => {
                tracing::debug!(%ingress, "egress refused: {refusal}");
                (self.on_violation)(Violation {
                    refusal: refusal.clone(),
                    ingress,
                });
                Err(refusal)
            }
        }
    }
}

/// Dials the checked addresses in order; the first that connects wins.
/// Only ever called with addresses returned by [`Policy::decide`].
pub(crate) async fn dial(addrs: &[SocketAddr]) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::AddrNotAvailable, "no address to dial");
    for addr in addrs {
        match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                // Best effort: interactive protocols (ssh) want small writes out now.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => {
                tracing::debug!("egress dial {addr}: {e}");
                last = e;
            }
            Err(_) => {
                tracing::debug!("egress dial {addr}: timed out");
                last = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect to {addr} timed out"),
                );
            }
        }
    }
    Err(last)
}

/// Copies both ways until both sides have closed (half-closes are passed
/// on), with 64 KiB buffers. Errors are routine (resets) and only logged.
pub(crate) async fn tunnel<A, B>(a: &mut A, b: &mut B)
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    match tokio::io::copy_bidirectional_with_sizes(a, b, TUNNEL_BUFFER, TUNNEL_BUFFER).await {
        Ok((up, down)) => tracing::debug!(up, down, "egress tunnel closed"),
        Err(e) => tracing::debug!("egress tunnel ended: {e}"),
    }
}

/// Which protocol a listener speaks.
#[derive(Clone, Copy)]
enum Proto {
    Http,
    Socks,
}

/// One session's running proxies. Dropping it (or [`SessionProxies::shutdown`])
/// closes the listeners and aborts every live tunnel.
pub struct SessionProxies {
    endpoints: Endpoints,
    ctx: Arc<Ctx>,
    /// Socket files to remove at teardown (unix listeners only).
    socket_files: Vec<PathBuf>,
}

impl SessionProxies {
    /// Binds both listeners and starts serving; at most `max_connections`
    /// client connections are open at once (see [`DEFAULT_MAX_CONNECTIONS`]).
    pub async fn start(
        policy: Arc<Policy>,
        listen: Listen,
        on_violation: ViolationSink,
        max_connections: usize,
    ) -> io::Result<Self> {
        // Room for every admitted connection's two tasks, and for refusals.
        let max_tasks = MAX_SESSION_TASKS.max(max_connections.saturating_mul(2) + 64);
        Self::start_limited(policy, listen, on_violation, max_tasks, max_connections).await
    }

    /// [`SessionProxies::start`] with another task limit (tests).
    pub(crate) async fn start_limited(
        policy: Arc<Policy>,
        listen: Listen,
        on_violation: ViolationSink,
        max_tasks: usize,
        max_connections: usize,
    ) -> io::Result<Self> {
        let credential = match &listen {
            Listen::Unix { .. } => None,
            Listen::Tcp { credential } => Some(credential.clone()),
        };
        let ctx = Arc::new(Ctx {
            policy,
            on_violation,
            credential,
            tasks: Tasks::new(),
            max_tasks,
            max_connections,
            open: Arc::new(AtomicUsize::new(0)),
        });
        match listen {
            Listen::Unix { dir } => {
                let http = dir.join(HTTP_SOCKET);
                let socks = dir.join(SOCKS_SOCKET);
                let mut this = Self {
                    endpoints: Endpoints::Unix {
                        http: http.clone(),
                        socks: socks.clone(),
                    },
                    ctx,
                    socket_files: Vec::new(),
                };
                // On error, dropping `this` removes what was bound so far.
                for (path, proto) in [(http, Proto::Http), (socks, Proto::Socks)] {
                    let listener = UnixListener::bind(&path)?;
                    this.socket_files.push(path.clone());
                    // The directory is 0700 already; this keeps the socket
                    // private even if it is bind-mounted elsewhere.
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
                    this.spawn_accept_unix(listener, proto);
                }
                Ok(this)
            }
            Listen::Tcp { credential } => {
                let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
                let http = TcpListener::bind(loopback).await?;
                let socks = TcpListener::bind(loopback).await?;
                let this = Self {
                    endpoints: Endpoints::Tcp {
                        http: http.local_addr()?,
                        socks: socks.local_addr()?,
                        credential,
                    },
                    ctx,
                    socket_files: Vec::new(),
                };
                this.spawn_accept_tcp(http, Proto::Http);
                this.spawn_accept_tcp(socks, Proto::Socks);
                Ok(this)
            }
        }
    }

    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// Stops accepting and ends every live tunnel; returns once all of the
    /// session's tasks are gone and its socket files removed.
    pub async fn shutdown(mut self) {
        if let Some(mut set) = self.ctx.tasks.close() {
            while set.join_next().await.is_some() {}
        }
        self.remove_socket_files();
    }

    fn remove_socket_files(&mut self) {
        for path in self.socket_files.drain(..) {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::debug!("removing {}: {e}", path.display());
            }
        }
    }

    /// How many of the session's tasks are running (accept loops included).
    pub fn live_tasks(&self) -> usize {
        self.ctx.tasks.live()
    }

    fn spawn_accept_unix(&self, listener: UnixListener, proto: Proto) {
        let ctx = self.ctx.clone();
        self.ctx.tasks.spawn(async move {
            loop {
                wait_for_room(&ctx).await;
                match listener.accept().await {
                    Ok((stream, _)) => serve(&ctx, stream, proto),
                    Err(e) => accept_failed(e).await,
                }
            }
        });
    }

    fn spawn_accept_tcp(&self, listener: TcpListener, proto: Proto) {
        let ctx = self.ctx.clone();
        self.ctx.tasks.spawn(async move {
            loop {
                wait_for_room(&ctx).await;
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        serve(&ctx, stream, proto);
                    }
                    Err(e) => accept_failed(e).await,
                }
            }
        });
    }
}

impl Drop for SessionProxies {
    fn drop(&mut self) {
        // Dropping the aborted set cancels every task on the runtime's next turn.
        drop(self.ctx.tasks.close());
        self.remove_socket_files();
    }
}

fn serve<S>(ctx: &Arc<Ctx>, stream: S, proto: Proto)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn_ctx = ctx.clone();
    let admission = ctx.admit();
    match proto {
        Proto::Http => ctx
            .tasks
            .spawn(crate::http::serve(conn_ctx, stream, admission)),
        Proto::Socks => ctx
            .tasks
            .spawn(crate::socks::serve(conn_ctx, stream, admission)),
    };
}

/// Holds the accept loop while the session is at its task limit; pending
/// clients wait in the listen backlog meanwhile.
async fn wait_for_room(ctx: &Ctx) {
    let mut logged = false;
    while ctx.tasks.live() >= ctx.max_tasks {
        if !logged {
            tracing::warn!(
                "egress session at its limit of {} live tasks; not accepting",
                ctx.max_tasks
            );
            logged = true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Out of descriptors and the like: wait a little instead of spinning.
async fn accept_failed(e: io::Error) {
    tracing::warn!("egress proxy accept: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod proxy_tests;

#[cfg(test)]
#[path = "proxy_fuzz.rs"]
mod proxy_fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_compare() {
        let c = Credential {
            user: "u".into(),
            password: "secret".into(),
        };
        assert!(c.matches(b"u", b"secret"));
        assert!(!c.matches(b"u", b"secreT"));
        assert!(!c.matches(b"u", b"secret2"));
        assert!(!c.matches(b"u", b"secre"));
        assert!(!c.matches(b"", b"secret"));
        assert!(!c.matches(b"u", b""));
    }
}
