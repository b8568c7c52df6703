//! `cc_server sandboxd`: the Kubernetes agent-sandbox runtime contract
//! (`sandbox-sandboxd`) over one sandbox, made from the same flags as
//! `run` with the root directory as its only bind and its working
//! directory; destroyed on SIGINT, SIGTERM or SIGHUP.
//!
//! Both listeners are loopback unless told otherwise. Beyond loopback a
//! `--credential-file` is required; given one, the sandbox's agent
//! credential is written there and asked of every request, on loopback
//! too. The official client cannot send it (README, "Running on
//! Kubernetes").

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};

use crate::cli::SandboxdArgs;
use crate::commands::run::build_spec;
use crate::config::Settings;
use sandbox_runtime::start::start;
use sandbox_sandboxd::{Daemon, loopback_only, serve};

pub async fn run(settings: &Settings, args: SandboxdArgs) -> anyhow::Result<ExitCode> {
    let root = std::fs::canonicalize(&args.root_dir).with_context(|| {
        format!(
            "the root directory {} (--root-dir): it must exist",
            args.root_dir.display()
        )
    })?;
    if !root.is_dir() {
        bail!("the root directory {} is not a directory", root.display());
    }
    let loopback = loopback_only(&[args.grpc_listen, args.rest_listen]);
    if !loopback && args.credential_file.is_none() {
        bail!(
            "a listener beyond loopback ({} / {}) needs --credential-file: the sandbox's agent \
             credential is written there and asked of every request",
            args.grpc_listen,
            args.rest_listen
        );
    }
    let spec = build_spec(&args.sandbox, &root)?;
    let grpc = tokio::net::TcpListener::bind(args.grpc_listen)
        .await
        .with_context(|| format!("listening on {} (--grpc-listen)", args.grpc_listen))?;
    let rest = tokio::net::TcpListener::bind(args.rest_listen)
        .await
        .with_context(|| format!("listening on {} (--rest-listen)", args.rest_listen))?;
    let sessions = start(&settings.start_options(), None).await?;
    let session = sessions
        .create(spec, args.sandbox.backend.as_deref())
        .await?;
    if let Some(notice) = session.selection.notice() {
        eprintln!("cc_server: {notice}");
    }
    let mut daemon = Daemon::new(Arc::clone(&session), root.clone(), args.max_file_bytes);
    if let Some(file) = &args.credential_file {
        write_credential(file, session.agent_credential())?;
        daemon.credential = Some(session.agent_credential().to_owned());
    }
    let report = sandbox_sandboxd::boundary::report(&session);
    eprintln!(
        "cc_server: sandboxd: gRPC on {}, REST on http://{}, root {}, backend {}: {}",
        grpc.local_addr()?,
        rest.local_addr()?,
        root.display(),
        session.backend_name(),
        report["boundary"].as_str().unwrap_or_default()
    );
    let outcome = serve(
        Arc::new(daemon),
        grpc,
        rest,
        crate::commands::mcp::stop_signal(),
    )
    .await;
    session.destroy().await;
    outcome.map(|()| ExitCode::SUCCESS)
}

/// The credential, readable by the owner alone; never through a symlink.
fn write_credential(path: &std::path::Path, credential: &str) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("writing the credential file {}", path.display()))?;
    file.write_all(credential.as_bytes())
        .with_context(|| format!("writing the credential file {}", path.display()))?;
    Ok(())
}
