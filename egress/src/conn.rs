//! What one connection of a session's proxies works with, whatever its
//! protocol: the session's shared context ([`Ctx`]: the policy, the
//! violation sink, the credential, the task set, the connection cap), the
//! dial of checked addresses and the tunnel. The listeners in
//! [`crate::server`] make it; [`crate::http`] and [`crate::socks`] use it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use crate::{Ingress, Policy, Refusal, Violation};

/// Called for every refused connection.
pub type ViolationSink = Arc<dyn Fn(Violation) + Send + Sync>;

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

/// Per-attempt timeout when dialling one of the checked addresses.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

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
    pub(crate) fn new() -> Self {
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
    pub(crate) fn close(&self) -> Option<JoinSet<()>> {
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
    pub(crate) on_violation: ViolationSink,
    /// `Some` on TCP listeners: every client must present it.
    pub(crate) credential: Option<Credential>,
    pub(crate) tasks: Tasks,
    /// See [`MAX_SESSION_TASKS`](crate::server::MAX_SESSION_TASKS).
    pub(crate) max_tasks: usize,
    /// See [`DEFAULT_MAX_CONNECTIONS`](crate::server::DEFAULT_MAX_CONNECTIONS).
    pub(crate) max_connections: usize,
    /// Admitted client connections open now ([`Slot`]s alive).
    pub(crate) open: Arc<AtomicUsize>,
    /// The session's answerer of the server channel, if it has one.
    pub(crate) local: Option<crate::local::LocalService>,
    /// Targets the server has these proxies refuse.
    pub(crate) refused: Vec<crate::local::Refused>,
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
    pub(crate) fn admit(&self) -> Admission {
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
        let refused = self.refused.iter().find(|r| r.matches(host, port));
        let decided = if crate::local::is_channel_host(host) {
            Err(crate::local::refusal(host, port, ingress))
        } else if let Some(refused) = refused {
            Err(refused.refusal(host, port))
        } else {
            self.policy.decide(host, port, ingress).await
        };
        match decided {
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
