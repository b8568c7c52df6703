//! One session's pair of proxies (SPEC E1): the listeners, the connection
//! cap, and teardown; what every connection shares — the credential check,
//! the set of live connection and tunnel tasks — is in `conn`.
//!
//! The bwrap forwarder's connections come over a channel of their own
//! ([`SessionProxies::accept_forwarders`]) and are handed their upstream
//! once decided (see `handoff`).
//!
//! Every task a session starts (accept loops, proxy connections, tunnels,
//! handed-off upstreams, upstream HTTP connections) lives in one [`JoinSet`](tokio::task::JoinSet) owned by the session,
//! so [`SessionProxies::shutdown`] or dropping the session ends all of them:
//! the policy is only checked at connect time, and no tunnel may outlive the
//! run that opened it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::{TcpListener, UnixListener, UnixStream};

use crate::Policy;
pub use crate::conn::{
    CAP_TAG, Credential, DIAL_TIMEOUT, TUNNEL_BUFFER, ViolationSink, cap_refusal,
};
use crate::conn::{Ctx, Tasks};
use crate::handoff::Handoff;

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

/// File name of the forwarders' socket inside [`Listen::Unix`]'s `dir`
/// ([`SessionProxies::accept_forwarders`]): never bound into a sandbox.
pub const FORWARDER_SOCKET: &str = "forwarder.sock";

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

/// Which protocol a listener speaks.
#[derive(Clone, Copy)]
enum Proto {
    Http,
    Socks,
}

impl Proto {
    /// The protocol of a forwarder's channel message: the file name of the
    /// socket it would have connected to.
    fn named(name: &[u8]) -> Option<Self> {
        match name {
            n if n == HTTP_SOCKET.as_bytes() => Some(Self::Http),
            n if n == SOCKS_SOCKET.as_bytes() => Some(Self::Socks),
            _ => None,
        }
    }
}

/// One session's running proxies. Dropping it (or [`SessionProxies::shutdown`])
/// closes the listeners and aborts every live tunnel.
pub struct SessionProxies {
    endpoints: Endpoints,
    ctx: Arc<Ctx>,
    /// Socket files to remove at teardown (unix listeners only).
    socket_files: Vec<PathBuf>,
    /// [`Listen::Unix`]'s directory.
    dir: Option<PathBuf>,
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
        let local = crate::local::Local::default();
        Self::start_with_local(policy, listen, on_violation, max_connections, local).await
    }

    /// [`SessionProxies::start`], the HTTP proxy answering the server
    /// channel's requests with `local` (see [`crate::local`]).
    pub async fn start_with_local(
        policy: Arc<Policy>,
        listen: Listen,
        on_violation: ViolationSink,
        max_connections: usize,
        local: crate::local::Local,
    ) -> io::Result<Self> {
        // Room for every admitted connection's two tasks, and for refusals.
        let max_tasks = MAX_SESSION_TASKS.max(max_connections.saturating_mul(2) + 64);
        let limits = (max_tasks, max_connections);
        Self::start_limited(policy, listen, on_violation, limits, local).await
    }

    /// [`SessionProxies::start`] with another task limit (tests).
    pub(crate) async fn start_limited(
        policy: Arc<Policy>,
        listen: Listen,
        on_violation: ViolationSink,
        (max_tasks, max_connections): (usize, usize),
        local: crate::local::Local,
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
            local: local.service,
            refused: local.refused,
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
                    dir: Some(dir),
                };
                // On error, dropping `this` removes what was bound so far.
                for (path, proto) in [(http, Proto::Http), (socks, Proto::Socks)] {
                    let listener = this.bind_private(&path)?;
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
                    dir: None,
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

    /// Listens on [`FORWARDER_SOCKET`] beside the unix listeners, for the
    /// bwrap backend, which connects to it on the host and passes the
    /// connection down to the sandbox's forwarder as its channel: each
    /// message on it carries one connection for the socket it names, and
    /// those connections' tunnels are handed off. The socket is never bound
    /// into a sandbox, so no command can reach a channel. Unix listeners
    /// only.
    pub fn accept_forwarders(&mut self) -> io::Result<PathBuf> {
        let Some(dir) = &self.dir else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "forwarder channels need unix listeners",
            ));
        };
        let path = dir.join(FORWARDER_SOCKET);
        let listener = self.bind_private(&path)?;
        let ctx = self.ctx.clone();
        self.ctx.tasks.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((channel, _)) => {
                        let serving = ctx.clone();
                        ctx.tasks.spawn(serve_channel(serving, channel));
                    }
                    Err(e) => accept_failed(e).await,
                }
            }
        });
        Ok(path)
    }

    /// A unix listener at `path`, mode 0600, removed at teardown.
    fn bind_private(&mut self, path: &Path) -> io::Result<UnixListener> {
        let listener = UnixListener::bind(path)?;
        self.socket_files.push(path.to_owned());
        // The directory is 0700 already; this keeps the socket private even
        // if it is bind-mounted elsewhere.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        Ok(listener)
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
                    Ok((stream, _)) => serve(&ctx, stream, proto, Handoff::Relay),
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
                        serve(&ctx, stream, proto, Handoff::Relay);
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

fn serve<S>(ctx: &Arc<Ctx>, stream: S, proto: Proto, handoff: Handoff)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn_ctx = ctx.clone();
    let admission = ctx.admit();
    match proto {
        Proto::Http => ctx
            .tasks
            .spawn(crate::http::serve(conn_ctx, stream, admission, handoff)),
        Proto::Socks => ctx
            .tasks
            .spawn(crate::socks::serve(conn_ctx, stream, admission, handoff)),
    };
}

/// Serves one forwarder's channel until it closes: every message is the
/// name of a listener's socket with one connection attached, served as if
/// accepted there, and offered the hand-off. Anything else is dropped.
async fn serve_channel(ctx: Arc<Ctx>, channel: UnixStream) {
    let socket = channel.as_raw_fd();
    loop {
        let (mut name, mut fds) = ([0u8; 32], Vec::new());
        let got = channel
            .async_io(Interest::READABLE, || {
                sandbox_fdpass::recv(socket, &mut name, &mut fds)
            })
            .await;
        let n = match got {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("egress forwarder channel: {e}");
                return;
            }
        };
        let (Some(proto), 1) = (Proto::named(&name[..n]), fds.len()) else {
            tracing::debug!("egress forwarder channel: a message that names no listener");
            continue;
        };
        let connection = std::os::unix::net::UnixStream::from(fds.remove(0));
        let connection = connection
            .set_nonblocking(true)
            .and_then(|()| UnixStream::from_std(connection));
        match connection {
            Ok(stream) => {
                wait_for_room(&ctx).await;
                serve(&ctx, stream, proto, Handoff::Offer);
            }
            Err(e) => tracing::debug!("egress forwarder channel: {e}"),
        }
    }
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
#[path = "handoff_tests.rs"]
mod handoff_tests;

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
