//! `cc_server run`: one sandbox, one command, then destroy.
//!
//! The command's stdout and stderr pass through; each violation is printed
//! to stderr as `cc_server: violation: <action> <target>`; the exit status is
//! the command's (128 + signal when it was killed). Failures of `cc_server`
//! itself exit with 125, a command that is not found with 127, one that may
//! not be executed — or that the command policy refused — with 126. `run`
//! has no owner connection, so a command the policy would ask about is
//! refused (SPEC H4) — unless `--ask` makes the person at the terminal its
//! approver ([`Terminal`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use sandbox_plugin_api::{
    ErrorCode, EventBody, ExecRequest, HostFds, SandboxBindMount, SandboxSpec, capability,
};
use tokio::io::AsyncReadExt;

use crate::cli::{RunArgs, SandboxFlags};
use crate::commands::ask::Terminal;
use crate::config::Settings;
use crate::{EXIT_FAILURE, wire};
use sandbox_runtime::Approver;
use sandbox_runtime::sessions::{ExecStream, Session, SessionError};
use sandbox_runtime::spec::default_exec_grants;
use sandbox_runtime::start::start;
use sandbox_runtime::{env, input};

pub async fn run(settings: &Settings, args: RunArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let spec = run_spec(&args, &cwd)?;
    // Registered checkouts are protected in every sandbox (SPEC H11): the
    // database is read when one exists (nothing was registered otherwise).
    let layer = settings.workspaces(args.conversation.is_some())?;
    if let Some(layer) = &layer {
        refuse_in_checkout(layer, &args, &cwd)?;
        if let (Some(conversation), Some(agent)) = (&args.conversation, &args.agent) {
            add_agent_if_new(layer, conversation, agent)?;
        }
    }
    let approver = args
        .ask
        .then(|| Arc::new(Terminal::new(settings.policy.approval_timeout)) as Arc<dyn Approver>);
    let sessions = start(&settings.start_options_with(layer.as_ref()), approver).await?;
    settings.install_gateway(&sessions).await?;
    crate::hook_channel::register(&sessions)?;
    crate::mcp_channel::mount(&sessions)?;
    let broker = crate::key_broker::install(&sessions, &settings.claude, args.brokered.clone())?;

    let session = sessions
        .create(spec, args.sandbox.backend.as_deref())
        .await?;
    // Only the session of `agent claude` may use the key it brokers.
    if let (Some(broker), Some(_)) = (&broker, &args.brokered) {
        broker.allow(&session.id);
    }
    if let Some(notice) = session.selection.notice() {
        eprintln!("cc_server: {notice}");
    }
    let outcome = run_command(&session, &args).await;
    session.destroy().await;
    match outcome {
        Ok(code) => Ok(code),
        Err(SessionError::Exec(e)) if e.code == ErrorCode::COMMAND_NOT_FOUND => {
            eprintln!("cc_server: {}", e.message);
            Ok(ExitCode::from(127))
        }
        Err(SessionError::Exec(e)) if e.code == ErrorCode::PERMISSION_DENIED => {
            eprintln!("cc_server: {}", e.message);
            Ok(ExitCode::from(126))
        }
        Err(SessionError::Refused(refusal)) => {
            print_refusal(&refusal, args.json);
            Ok(ExitCode::from(EXIT_REFUSED))
        }
        Err(e) => Err(e.into()),
    }
}

/// A plain `run` (the current directory bound) inside a registered
/// checkout is refused: the checkout is never an agent's workdir (SPEC H1).
fn refuse_in_checkout(
    layer: &sandbox_workspaces::Workspaces,
    args: &RunArgs,
    cwd: &Path,
) -> anyhow::Result<()> {
    if args.sandbox.spec.is_some() || args.conversation.is_some() {
        return Ok(());
    }
    if let Some(checkout) = layer.checkout_holding(cwd)? {
        anyhow::bail!(
            "{} is inside the registered checkout {}, which no sandbox may write (it is protected \
             in every sandbox): run in a conversation's clone instead — `cc_server conversation \
             new --workspace NAME`, then `cc_server run --conversation ID --agent NAME -- …`",
            cwd.display(),
            checkout.display()
        );
    }
    Ok(())
}

/// `run --agent NAME` adds the agent to the conversation the first time.
fn add_agent_if_new(
    layer: &sandbox_workspaces::Workspaces,
    conversation: &str,
    agent: &str,
) -> anyhow::Result<()> {
    let known = layer.conversation(conversation)?;
    if !known.agents.iter().any(|a| a == agent) {
        layer.add_agent(conversation, agent)?;
        eprintln!("cc_server: added the agent {agent} to {conversation}");
    }
    Ok(())
}

/// `run`'s spec: `--conversation ID --agent NAME` (the server resolves the
/// binds), else [`build_spec`].
fn run_spec(args: &RunArgs, cwd: &Path) -> anyhow::Result<SandboxSpec> {
    let Some(conversation) = &args.conversation else {
        return build_spec(&args.sandbox, cwd);
    };
    let flags = &args.sandbox;
    let mut spec = SandboxSpec {
        conversation_id: Some(conversation.clone()),
        agent_id: args.agent.clone(),
        ..SandboxSpec::default()
    };
    if let Some(mode) = flags.mode {
        spec.mode = mode;
    }
    if let Some(network) = flags.network {
        network.apply(&mut spec);
    }
    for path in &flags.protect {
        spec.protected_paths.push(cwd.join(path));
    }
    for path in &flags.allow_sockets {
        spec.unix_sockets.push(cwd.join(path));
    }
    Ok(spec)
}

/// The spec: `--spec FILE` or the current directory bound read-write and
/// used as workdir; then the flags on top (`run` and `mcp` alike).
pub fn build_spec(args: &SandboxFlags, cwd: &Path) -> anyhow::Result<SandboxSpec> {
    let mut spec = match &args.spec {
        Some(path) => {
            let bytes = std::fs::read(path)
                .with_context(|| format!("reading the spec file {}", path.display()))?;
            input::parse_strict::<SandboxSpec>(
                &bytes,
                &format!("the spec file {}", path.display()),
            )?
        }
        None => SandboxSpec {
            bind_mounts: vec![SandboxBindMount {
                host_path: cwd.to_path_buf(),
                guest_path: None,
                read_only: false,
            }],
            guest_workdir: Some(cwd.to_path_buf()),
            ..SandboxSpec::default()
        },
    };
    if spec.workspace_id.is_empty() {
        spec.workspace_id = "cli".into();
    }
    if let Some(mode) = args.mode {
        spec.mode = mode;
    }
    if let Some(network) = args.network {
        network.apply(&mut spec);
    }
    for bind in &args.binds {
        spec.bind_mounts.push(parse_bind(bind, cwd)?);
    }
    for path in &args.protect {
        spec.protected_paths.push(cwd.join(path));
    }
    for path in &args.allow_sockets {
        spec.unix_sockets.push(cwd.join(path));
    }
    if let Some(dir) = &args.workdir {
        spec.guest_workdir = Some(cwd.join(dir));
    }
    if !args.no_exec_grant {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        spec.exec_grant_roots
            .extend(default_exec_grants(&spec, home.as_deref()));
    }
    for dir in &args.exec_grants {
        spec.exec_grant_roots.push(cwd.join(dir));
    }
    Ok(spec)
}

/// The exit status of a command the policy refused (it never started).
pub const EXIT_REFUSED: u8 = 126;

/// A refusal: the rule and every command with its class, so the user sees
/// what to change (the guardrails file, the mode, or an owner to ask).
fn print_refusal(refusal: &sandbox_runtime::command_policy::Refusal, json: bool) {
    if json {
        print_json(&wire::refusal_json(refusal));
        return;
    }
    eprintln!("cc_server: {refusal}");
    for reason in &refusal.verdict.reasons {
        eprintln!("cc_server:   {reason}");
    }
}

/// `PATH`, `PATH:ro` or `PATH:rw`; relative paths are taken from `cwd`.
fn parse_bind(text: &str, cwd: &Path) -> anyhow::Result<SandboxBindMount> {
    let (path, read_only) = match text.rsplit_once(':') {
        Some((path, "ro")) => (path, true),
        Some((path, "rw")) => (path, false),
        _ => (text, false),
    };
    if path.is_empty() {
        anyhow::bail!("--bind {text}: the path is empty");
    }
    let host_path = cwd.join(PathBuf::from(path));
    if !host_path.exists() {
        anyhow::bail!("--bind {text}: {} does not exist", host_path.display());
    }
    Ok(SandboxBindMount {
        host_path,
        guest_path: None,
        read_only,
    })
}

fn exec_request(session: &Session, args: &RunArgs) -> anyhow::Result<ExecRequest> {
    // Sanitized in Session::exec, like every entry point's.
    let mut environment = env::inherited();
    environment.extend(args.extra_env.iter().cloned());
    for name in &args.removed_env {
        environment.remove(name);
    }
    let timeout_ms = match args.timeout {
        Some(secs) if secs.is_finite() && secs > 0.0 => Some((secs * 1000.0).ceil() as u64),
        Some(secs) => anyhow::bail!("--timeout {secs}: give a positive number of seconds"),
        None => None,
    };
    // Forward our stdin when the backend can take it.
    let stdin = session.supports(capability::STDIN);
    // Where the backend can, it copies between our stdin and stdout and the
    // command's pipes itself, at pipe speed; `--json` needs the events.
    let host_fds = (!args.json && session.supports(capability::HOST_FDS)).then(|| HostFds {
        stdin: stdin.then_some(libc::STDIN_FILENO),
        stdout: Some(libc::STDOUT_FILENO),
    });
    Ok(ExecRequest {
        argv: args.command.clone(),
        env: environment,
        cwd: None,
        stdin: stdin && host_fds.is_none(),
        timeout_ms,
        pty: None,
        host_fds,
    })
}

async fn run_command(session: &Arc<Session>, args: &RunArgs) -> Result<ExitCode, SessionError> {
    let request =
        exec_request(session, args).map_err(|e| SessionError::Internal(format!("{e:#}")))?;
    let forward_stdin = request.stdin;
    // Listen before the command starts: a signal that arrives while it is
    // starting is held and passed on, instead of killing cc_server and
    // orphaning the command.
    let signals = Signals::listen();
    let mut stream = session.exec(request).await?;
    let exec_id = stream.exec_id;
    if args.json {
        print_json(&wire::started_json(
            exec_id,
            session.backend_name(),
            stream.verdict.as_ref(),
        ));
    }
    if forward_stdin {
        tokio::spawn(forward_stdin_to(Arc::clone(session), exec_id));
    }
    let signals = tokio::spawn(signals.forward(Arc::clone(session), exec_id));
    let code = relay(&mut stream, session, args.json).await;
    signals.abort();
    Ok(code)
}

/// Passes the command's events through until its last one.
async fn relay(stream: &mut ExecStream, session: &Arc<Session>, json: bool) -> ExitCode {
    let mut stdout_open = true;
    let mut explained: Vec<String> = Vec::new();
    while let Some(event) = stream.next().await {
        if json {
            print_bytes(&wire::event_line(&event));
        }
        match event.body {
            EventBody::Stdout(data) if !json && stdout_open => {
                stdout_open = pass_through(&mut std::io::stdout(), &data);
                if !stdout_open {
                    // Our reader went away: the command gets what a pipe would give it.
                    let _ = session.kill(stream.exec_id, libc::SIGPIPE).await;
                }
            }
            EventBody::Stderr(data) if !json => {
                pass_through(&mut std::io::stderr(), &data);
            }
            EventBody::Violation(v) => {
                eprintln!("cc_server: violation: {} {}", v.action, v.target);
                // The guard names the very rule in its record.
                if !json && let Some(rule) = v.raw.as_deref().and_then(guard_rule) {
                    eprintln!("cc_server:   rule: {rule}");
                }
                // A refusal past the proxies' connection cap names its own.
                if !json && let Some((rule, remedy)) = sandbox_runtime::egress::cap_explanation(&v)
                {
                    eprintln!("cc_server:   {rule}; to allow: {remedy}");
                }
                // The rule and the remedy, once per kind of refusal.
                if !json
                    && !explained.contains(&v.action)
                    && let Some(e) = sandbox_plugin_api::violation::explain(&v.action)
                {
                    let how = if e.inferred {
                        " (inferred from the command's stderr)"
                    } else {
                        ""
                    };
                    eprintln!("cc_server:   {}{how}; to allow: {}", e.rule, e.remedy);
                    explained.push(v.action.clone());
                }
            }
            EventBody::Exit { code, .. } => return ExitCode::from(code.clamp(0, 255) as u8),
            EventBody::Killed { reason, signal } => {
                let signal = signal.unwrap_or(libc::SIGKILL);
                if !json {
                    eprintln!(
                        "cc_server: the command was killed ({}, signal {signal})",
                        reason.as_str()
                    );
                }
                return ExitCode::from((128 + signal).clamp(0, 255) as u8);
            }
            _ => {}
        }
    }
    let message = "the sandbox ended without reporting the command's exit";
    if json {
        print_json(&wire::error_json(stream.exec_id, message));
    } else {
        eprintln!("cc_server: error: {message}");
    }
    ExitCode::from(EXIT_FAILURE)
}

/// The rule of a create-time guard record (`… rule=RULE -> ERRNO`).
fn guard_rule(raw: &str) -> Option<&str> {
    let rest = raw.split_once(" rule=")?.1;
    Some(rest.rsplit_once(" -> ").map_or(rest, |(rule, _)| rule))
}

/// Writes straight from the event's buffer, on this worker thread (a slow
/// reader holds it, and through the stream the command: backpressure);
/// `false` once the other end is gone. Output stays in event order.
fn pass_through(out: &mut impl std::io::Write, data: &[u8]) -> bool {
    tokio::task::block_in_place(|| out.write_all(data).and_then(|()| out.flush()).is_ok())
}

fn print_json(value: &serde_json::Value) {
    print_bytes(wire::line(value).as_bytes());
}

fn print_bytes(line: &[u8]) {
    pass_through(&mut std::io::stdout(), line);
}

async fn forward_stdin_to(session: Arc<Session>, exec_id: u64) {
    let mut stdin = tokio::io::stdin();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdin.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if session
                    .write_stdin(exec_id, buf[..n].to_vec())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        }
    }
    let _ = session.close_stdin(exec_id).await;
}

/// SIGINT, SIGTERM and SIGHUP, caught so they go to the command, as a shell
/// would pass them.
struct Signals(Option<[tokio::signal::unix::Signal; 3]>);

impl Signals {
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let kinds = [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ];
        match (signal(kinds[0]), signal(kinds[1]), signal(kinds[2])) {
            (Ok(int), Ok(term), Ok(hup)) => Self(Some([int, term, hup])),
            _ => {
                tracing::warn!(
                    "cannot catch SIGINT/SIGTERM/SIGHUP; they will not reach the command"
                );
                Self(None)
            }
        }
    }

    async fn forward(self, session: Arc<Session>, exec_id: u64) {
        let Some([mut int, mut term, mut hup]) = self.0 else {
            return;
        };
        loop {
            let sig = tokio::select! {
                _ = int.recv() => libc::SIGINT,
                _ = term.recv() => libc::SIGTERM,
                _ = hup.recv() => libc::SIGHUP,
            };
            let _ = session.kill(exec_id, sig).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> SandboxFlags {
        let mut argv = vec!["cc_server", "run"];
        argv.extend_from_slice(extra);
        match crate::cli::Cli::parse_from(argv).command {
            crate::cli::Command::Run(args) => args.sandbox,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn without_a_spec_the_current_directory_is_bound_and_used() {
        let dir = tempfile::tempdir().unwrap();
        let spec = build_spec(&args(&["--", "true"]), dir.path()).unwrap();
        assert_eq!(spec.bind_mounts.len(), 1);
        assert_eq!(spec.bind_mounts[0].host_path, dir.path());
        assert!(!spec.bind_mounts[0].read_only);
        assert_eq!(spec.guest_workdir.as_deref(), Some(dir.path()));
        assert!(spec.network_enabled);
    }

    #[test]
    fn flags_apply_on_top() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let spec = build_spec(
            &args(&[
                "--mode",
                "review",
                "--network",
                "off",
                "--bind",
                "data:ro",
                "--protect",
                "secret",
                "--allow-socket",
                "data/agent.sock",
                "--workdir",
                "data",
                "--",
                "true",
            ]),
            dir.path(),
        )
        .unwrap();
        assert_eq!(spec.mode, sandbox_plugin_api::SandboxMode::Review);
        assert!(!spec.network_enabled);
        assert_eq!(spec.bind_mounts[1].host_path, dir.path().join("data"));
        assert!(spec.bind_mounts[1].read_only);
        assert_eq!(spec.protected_paths, vec![dir.path().join("secret")]);
        assert_eq!(spec.unix_sockets, vec![dir.path().join("data/agent.sock")]);
        assert_eq!(spec.guest_workdir, Some(dir.path().join("data")));
        let open = build_spec(&args(&["--network", "open", "--", "true"]), dir.path()).unwrap();
        assert!(
            open.network_enabled && open.network_open,
            "D2: network open"
        );
    }

    /// F5: `run` grants its workdir and the private tmpfs mounts, unless
    /// told not to; never in read-only modes; a bound home is not granted.
    #[test]
    fn the_workdir_and_the_private_mounts_are_exec_grants_by_default() {
        let dir = tempfile::tempdir().unwrap();
        let spec = build_spec(&args(&["--", "true"]), dir.path()).unwrap();
        let grants = &spec.exec_grant_roots;
        for want in [dir.path(), Path::new("/tmp"), Path::new("/var/tmp")] {
            assert!(grants.iter().any(|g| g == want), "{want:?}: {grants:?}");
        }
        let none = build_spec(&args(&["--no-exec-grant", "--", "true"]), dir.path()).unwrap();
        assert!(none.exec_grant_roots.is_empty());
        let one = build_spec(
            &args(&["--no-exec-grant", "--exec-grant", "bin", "--", "true"]),
            dir.path(),
        )
        .unwrap();
        assert_eq!(one.exec_grant_roots, vec![dir.path().join("bin")]);
        let review = build_spec(&args(&["--mode", "review", "--", "true"]), dir.path()).unwrap();
        assert!(review.exec_grant_roots.is_empty());
        let home = tempfile::tempdir().unwrap();
        let mut spec = build_spec(&args(&["--no-exec-grant", "--", "true"]), dir.path()).unwrap();
        let private = default_exec_grants(&spec, Some(home.path()));
        assert!(private.iter().any(|g| g == home.path()), "{private:?}");
        spec.bind_mounts.push(SandboxBindMount {
            host_path: home.path().to_path_buf(),
            guest_path: None,
            read_only: false,
        });
        let bound = default_exec_grants(&spec, Some(home.path()));
        assert!(!bound.iter().any(|g| g == home.path()), "{bound:?}");
    }

    #[test]
    fn a_bind_that_does_not_exist_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = build_spec(&args(&["--bind", "nope:ro", "--", "true"]), dir.path()).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn a_spec_file_with_a_typo_is_refused_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("spec.json");
        std::fs::write(&file, r#"{"sessionId":"x","networkEnable":false}"#).unwrap();
        let err = build_spec(
            &args(&["--spec", file.to_str().unwrap(), "--", "true"]),
            dir.path(),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("networkEnable"), "{err:#}");
    }
}
