//! `cc_server mcp`: the agent tools over MCP on stdin and stdout, for an
//! agent that starts its tool servers itself. One sandbox, made from the
//! same flags as `run` (the current directory bound read-write and used as
//! the working directory unless `--spec` says otherwise), destroyed when
//! the client closes stdin or the process is told to stop. stdout carries
//! the protocol alone: notices and logs go to stderr.
//!
//! No owner is connected to a process the agent started itself, so a
//! command or a file change the policy would ask about is denied, the
//! result saying why (SPEC H4). The agent holds everything this process
//! holds, so there is no credential it could keep to itself to reach a
//! running server's owners; for prompts an owner answers, serve the tools
//! over HTTP instead (`cc_server serve`, `/mcp` with the sandbox's agent
//! credential), where the owners connected to `GET /v1/approvals` answer.

use std::process::ExitCode;

use anyhow::Context as _;
use rmcp::ServiceExt as _;

use crate::cli::McpArgs;
use crate::commands::run::build_spec;
use crate::config::Settings;
use sandbox_mcp::{AgentTools, plain_roots};
use sandbox_runtime::start::start;

pub async fn run(settings: &Settings, args: McpArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let spec = build_spec(&args.sandbox, &cwd)?;
    let sessions = start(&settings.start_options(), None).await?;
    settings.install_gateway(&sessions).await?;
    crate::hook_channel::register(&sessions)?;
    let session = sessions
        .create(spec, args.sandbox.backend.as_deref())
        .await?;
    if let Some(notice) = session.selection.notice() {
        eprintln!("cc_server: {notice}");
    }
    let tools = AgentTools::for_session(std::sync::Arc::clone(&session), plain_roots());
    let served = async {
        let service = tools
            .serve(rmcp::transport::stdio())
            .await
            .context("starting MCP on stdio")?;
        service.waiting().await.context("serving MCP on stdio")?;
        anyhow::Ok(())
    };
    let outcome = tokio::select! {
        outcome = served => outcome,
        () = stop_signal() => Ok(()),
    };
    session.destroy().await;
    outcome.map(|()| ExitCode::SUCCESS)
}

/// SIGINT, SIGTERM or SIGHUP: the client went away without closing stdin.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
        _ = hup.recv() => {}
    }
}
