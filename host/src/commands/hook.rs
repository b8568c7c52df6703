//! `cc_server policy hook --format claude-code`: Claude Code's `PreToolUse`
//! command hook for people who run Claude Code on the host (SPEC H6, H13).
//!
//! It decides from this machine's config (no server needed) or asks
//! `--server`. Claude Code carries on when a hook fails any other way than
//! with its blocking status, so every failure here — no readable config, a
//! server down or refusing the token, an input or answer it cannot read, a
//! panic — exits with [`claude_hook::EXIT_BLOCK`] and says why on stderr,
//! which Claude Code hands to the model.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use sandbox_plugin_api::SandboxMode;
use serde_json::Value;

use crate::claude_hook::{self, Call, EXIT_BLOCK};
use crate::cli::{Common, HookArgs};
use crate::config::{CommandFlags, Settings};
use crate::wire;
use sandbox_runtime::command_policy::{CommandPolicy, OFF_NOTICE, workdir};

/// Runs the hook to its exit status: 0 with the hook output on stdout, or
/// the blocking status.
pub fn run(common: &Common, args: &HookArgs) -> ExitCode {
    let outcome = std::panic::catch_unwind(|| decide(common, args))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("the hook panicked")));
    let written = outcome.and_then(|answer| {
        let mut out = std::io::stdout().lock();
        out.write_all(wire::line(&answer).as_bytes())
            .and_then(|()| out.flush())
            .context("writing the hook output")
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "cc_server policy hook refused this tool call (it fails closed): {e:#}. \
                 Fix the cause; nothing runs until the hook can decide."
            );
            ExitCode::from(EXIT_BLOCK)
        }
    }
}

fn decide(common: &Common, args: &HookArgs) -> anyhow::Result<Value> {
    let settings = Settings::resolve(common, &CommandFlags::default())
        .context("loading cc_server's config")?;
    let mut input = Vec::new();
    std::io::stdin()
        .take(claude_hook::MAX_INPUT as u64 + 1)
        .read_to_end(&mut input)
        .context("reading the hook input on stdin")?;
    let call = claude_hook::parse(&input)?;
    match &args.server {
        Some(server) => {
            let token_file = args
                .token_file
                .clone()
                .or(settings.token_file.clone())
                .context("no token file: give --token-file")?;
            ask_server(server, &token_file, args, input)
        }
        None => Ok(decide_here(&settings, args.mode, call)),
    }
}

/// The verdict from this machine's config, as `policy check` gives it.
fn decide_here(settings: &Settings, mode: SandboxMode, call: Call) -> Value {
    let Call::Bash { command, cwd } = call else {
        return serde_json::json!({});
    };
    let policy = CommandPolicy::from_settings(&settings.policy);
    if !policy.enforce {
        eprintln!("cc_server: warning: {OFF_NOTICE} (the hook allows every command)");
    }
    let dir = cwd
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| std::env::current_dir().ok());
    let facts = match dir {
        Some(dir) if workdir::matters_for(&command) => workdir::look(
            &workdir::HostDir {
                dir: dir.clone(),
                root: dir,
            },
            &command,
        ),
        _ => Default::default(),
    };
    claude_hook::answer(&policy.check_in(&command, mode, &facts), mode)
}

/// `POST /v1/policy/check?format=claude-code` on `server`; anything but a
/// 200 with a decision is an error.
fn ask_server(
    server: &str,
    token_file: &Path,
    args: &HookArgs,
    input: Vec<u8>,
) -> anyhow::Result<Value> {
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        bail!(
            "--timeout {}: give a positive number of seconds",
            args.timeout
        );
    }
    let token = std::fs::read_to_string(token_file)
        .with_context(|| format!("reading the token file {}", token_file.display()))?;
    let uri: http::Uri = server
        .parse()
        .with_context(|| format!("--server {server}: not a URL"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--server {server}: only http:// (a loopback server) is spoken");
    }
    let authority = uri
        .authority()
        .with_context(|| format!("--server {server}: no host"))?
        .clone();
    let port = authority.port_u16().unwrap_or(80);
    let path = format!(
        "/v1/policy/check?format=claude-code&mode={}",
        args.mode.as_str()
    );
    let request = http::Request::post(path)
        .header(http::header::HOST, authority.as_str())
        .header(
            http::header::AUTHORIZATION,
            format!("Bearer {}", token.trim()),
        )
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(input)))
        .context("building the request")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect((authority.host(), port))
            .await
            .with_context(|| format!("connecting to the cc_server at {server}"))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("speaking HTTP to the server")?;
        tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .context("sending the hook input to the server")?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .context("reading the server's answer")?
            .to_bytes();
        anyhow::Ok((status, body))
    };
    let (status, body) = runtime
        .block_on(async {
            tokio::time::timeout(Duration::from_secs_f64(args.timeout), exchange).await
        })
        .map_err(|_| {
            anyhow::anyhow!(
                "the server at {server} did not answer within {}s",
                args.timeout
            )
        })??;
    if status != http::StatusCode::OK {
        bail!(
            "the server at {server} answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    let answer: Value = serde_json::from_slice(&body)
        .with_context(|| format!("the server at {server} answered something not JSON"))?;
    if !claude_hook::valid_answer(&answer) {
        bail!("the server at {server} answered no hook decision: {answer}");
    }
    Ok(answer)
}
