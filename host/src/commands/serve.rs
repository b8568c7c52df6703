//! `cc_server serve`: the HTTP API, until SIGINT or SIGTERM; then every
//! sandbox is destroyed before the process exits, within a bound whatever
//! clients do (`[api] shutdown_timeout_secs`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::api::{self, listener, token};
use crate::config::Settings;
use sandbox_runtime::start::{start, startup};

/// How long sandboxes still being destroyed get once the connections are
/// closed (closing an unread exec stream is what lets its destroy end).
const DESTROY_GRACE: Duration = Duration::from_secs(2);

pub async fn run(settings: &Settings) -> anyhow::Result<ExitCode> {
    let listen = settings.listen;
    let token_file = settings.token_file.clone().context(
        "choosing a token file: neither XDG_STATE_HOME nor HOME is set; pass --token-file",
    )?;
    let token = token::ensure(&token_file)?;

    // The workspaces layer: its database made if absent, what a killed
    // process left half made removed (SPEC H1).
    let layer = settings.workspaces(true)?;
    let sessions = Arc::new(start(&settings.start_options_with(layer.as_ref()), None).await?);
    settings.install_gateway(&sessions).await?;
    crate::hook_channel::register(&sessions)?;
    crate::mcp_channel::mount(&sessions)?;
    // No session of a server is `agent claude`'s: a configured key is
    // refused to every caller, by name.
    crate::key_broker::install(&sessions, &settings.claude, None)?;
    // Exactly one of the three lines of SPEC B3.
    tracing::info!("{}", startup(settings.switch, sessions.registry()));

    if !listen.ip().is_loopback() {
        tracing::warn!(
            "listening on {listen}, which is not loopback: the bearer token is the only protection"
        );
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listening on {listen}"))?;
    let bound = listener.local_addr()?;
    tracing::info!(
        "listening on http://{bound} (bearer token in {})",
        token_file.display()
    );

    let rules = api::request_rules::RequestRules {
        listen,
        allowed_hosts: settings.api.allowed_hosts.clone(),
        allowed_origins: settings.api.allowed_origins.clone(),
    };
    let app = api::router(
        api::AppState::new(Arc::clone(&sessions), token, rules)
            .with_workspaces(layer)
            .with_terminal_grace(settings.api.terminal_grace)
            .with_console_session(settings.api.console_session),
    );
    let limits = settings.api.connections;
    let server = listener::Listener::start(listener, app, limits);
    shutdown_signal().await;
    tracing::info!(
        "shutting down: destroying every sandbox, closing connections within {:?}",
        limits.shutdown_timeout
    );
    // Destroying ends the open exec streams, so their connections can end;
    // a client that does not read its stream would hold both, so after
    // the bound its connection is closed, which frees the destroy too.
    let destroying = tokio::spawn({
        let sessions = Arc::clone(&sessions);
        async move { sessions.destroy_all().await }
    });
    let closed = server.shut_down(limits.shutdown_timeout).await;
    if closed > 0 {
        tracing::warn!(
            "closed {closed} connection(s) still open after `[api] shutdown_timeout_secs` ({:?})",
            limits.shutdown_timeout
        );
    }
    match tokio::time::timeout(DESTROY_GRACE, destroying).await {
        Ok(Ok(())) => tracing::info!("every sandbox is destroyed"),
        Ok(Err(e)) => tracing::error!("destroying the sandboxes failed: {e}"),
        Err(_) => tracing::error!(
            "sandboxes still being destroyed {DESTROY_GRACE:?} after the connections closed; \
             exiting without waiting for them: {}",
            sessions
                .list()
                .iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
