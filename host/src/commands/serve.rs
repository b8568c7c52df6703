//! `cc_server serve`: the HTTP API, until SIGINT or SIGTERM; then every
//! sandbox is destroyed before the process exits.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;

use crate::api::{self, token};
use crate::backends;
use crate::config::Settings;
use crate::sessions::Sessions;

pub async fn run(settings: &Settings) -> anyhow::Result<ExitCode> {
    let listen = settings.listen;
    let token_file = match settings.token_file.clone() {
        Some(path) => path,
        None => token::default_path().context("choosing a token file; pass --token-file")?,
    };
    let token = token::ensure(&token_file)?;

    let settings_for_discovery = settings.clone();
    let registry =
        tokio::task::spawn_blocking(move || backends::discover(&settings_for_discovery)).await?;
    // Exactly one of the three lines of SPEC B3.
    tracing::info!("{}", backends::startup(settings, &registry));
    let launch = backends::launch_settings(settings, &registry);
    let sessions = Arc::new(Sessions::new(Arc::new(registry), launch));

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
    let app = api::router(api::AppState::new(Arc::clone(&sessions), token, rules));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let mut stop_rx = stop_rx;
                let _ = stop_rx.wait_for(|stop| *stop).await;
            })
            .into_future(),
    );
    shutdown_signal().await;
    tracing::info!("shutting down: destroying every sandbox");
    // Destroying first ends the open exec streams, so the server can stop.
    sessions.destroy_all().await;
    let _ = stop_tx.send(true);
    match tokio::time::timeout(std::time::Duration::from_secs(5), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::error!("the HTTP server failed: {e}"),
        Ok(Err(e)) => tracing::error!("the HTTP server task failed: {e}"),
        Err(_) => tracing::warn!("open connections did not close within 5 s"),
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
