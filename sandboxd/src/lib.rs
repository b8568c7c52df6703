//! The Kubernetes agent-sandbox runtime contract, "sandboxd" (KEP-539.2,
//! Core level): what lets `cc_server` run as the runtime sidecar of every
//! pod of an agent-sandbox fleet, with its command policy, its guard and
//! its jail inside each.
//!
//! - **gRPC `process.v1.ProcessService`** ([`process`]): `Start` (output
//!   streamed, optionally on a terminal), `Execute`, `WriteStdin`,
//!   `SendSignal`, `ResizeTTY`. Every command starts through
//!   `Session::exec`, the one dispatch path (SPEC B10): the mode's command
//!   policy and guardrails, the sanitized environment, the sandbox.
//! - **REST** ([`rest`]): `GET/HEAD/PUT/DELETE /v1/files/{path}` through
//!   `sandbox-paths`' jail with the MCP file tools' rules and guardrails
//!   (SPEC H2, H4), `/v1/health`, `/v1/metadata` (which says which
//!   boundary holds: SPEC B8, E6).
//!
//! One sandbox serves both: its only bind is the root directory, which is
//! also its working directory.

pub mod auth;
pub mod boundary;
pub mod files;
pub mod multipart;
pub mod process;
pub mod rest;
pub mod status;

/// The generated messages and server of `proto/process/v1/process.proto`.
#[allow(clippy::all, clippy::unwrap_used, clippy::expect_used)]
pub mod proto {
    tonic::include_proto!("process.v1");
}

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use sandbox_mcp::RootsOf;
use sandbox_runtime::Session;

/// What the daemon serves from, shared by both listeners.
pub struct Daemon {
    pub session: Arc<Session>,
    /// The root directory: the sandbox's one bind and its working directory.
    pub root: PathBuf,
    /// Where the file routes act (the session's plain roots).
    pub roots_of: RootsOf,
    /// The largest body a `PUT` takes.
    pub max_file_bytes: usize,
    /// The credential a request must carry (`None`: none asked, which
    /// `cc_server sandboxd` allows on loopback only).
    pub credential: Option<String>,
    pub processes: process::Processes,
    pub started: std::time::Instant,
}

impl Daemon {
    pub fn new(session: Arc<Session>, root: PathBuf, max_file_bytes: usize) -> Self {
        Self {
            session,
            root,
            roots_of: sandbox_mcp::plain_roots(),
            max_file_bytes,
            credential: None,
            processes: process::Processes::default(),
            started: std::time::Instant::now(),
        }
    }
}

/// Serves gRPC and REST on the two listeners until `stop` resolves.
pub async fn serve(
    daemon: Arc<Daemon>,
    grpc: tokio::net::TcpListener,
    rest: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut grpc_stop = stop_tx.subscribe();
    let mut rest_stop = stop_tx.subscribe();
    let service = proto::process_service_server::ProcessServiceServer::new(
        process::ProcessApi::new(Arc::clone(&daemon)),
    );
    let credential = daemon.credential.clone();
    let grpc_task = tokio::spawn(async move {
        let incoming = futures_util::stream::unfold(grpc, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| {
                let _ = stream.set_nodelay(true);
                stream
            });
            Some((accepted, listener))
        });
        tonic::transport::Server::builder()
            .add_service(tonic::service::interceptor::InterceptedService::new(
                service,
                auth::GrpcCredential(credential),
            ))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = grpc_stop.recv().await;
            })
            .await
    });
    let router = rest::router(Arc::clone(&daemon));
    let rest_task = tokio::spawn(async move {
        axum::serve(rest, router)
            .with_graceful_shutdown(async move {
                let _ = rest_stop.recv().await;
            })
            .await
    });
    stop.await;
    let _ = stop_tx.send(());
    // The sandbox goes first: a streaming Start still open ends with its
    // command, so the listeners' graceful shutdown has nothing to wait for.
    daemon.session.destroy().await;
    let joined =
        tokio::time::timeout(SHUTDOWN_GRACE, async { tokio::join!(grpc_task, rest_task) }).await;
    match joined {
        Ok((g, r)) => {
            g??;
            r??;
        }
        Err(_) => tracing::warn!(
            "connections still open {SHUTDOWN_GRACE:?} after the sandbox was destroyed: closed"
        ),
    }
    Ok(())
}

/// How long open connections get once the sandbox is destroyed.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether every address is loopback: then no credential is asked.
pub fn loopback_only(addrs: &[SocketAddr]) -> bool {
    addrs.iter().all(|a| a.ip().is_loopback())
}
