//! `cc_server agent claude`: Claude Code inside a sandbox as the seeds run
//! it (SPEC B10, H5, H12, H13) — a `run` whose command is Claude Code,
//! planned here ([`plan_claude`], pure) and run by `run`.
//!
//! - `--dangerously-skip-permissions` (and `IS_SANDBOX=1`, without which
//!   it refuses to start as root): the sandbox and the policy are the gate.
//! - Its settings, given on its command line (no file for the agent to
//!   edit), hold one `PreToolUse` hook on Bash: the server channel's client
//!   calling [`hook_channel::NAME`], so the session's own policy, mode,
//!   guardrails and approver judge the call; `onFailure: "block"` and
//!   `|| exit 2` make every failure of the hook a refusal.
//! - `--setting-sources ''`: no settings file is read — not a repository's
//!   `.claude/settings.json` or `settings.local.json`, not the user's
//!   `~/.claude/settings.json` (which a Bash call could write) — since
//!   `disableAllHooks` in any of them switches the hook off.
//! - The API key is brokered ([`key_broker`]): with a key — `[agents.claude]
//!   api_key_file`, else the invoker's `ANTHROPIC_API_KEY` — Claude Code
//!   gets the server channel as `ANTHROPIC_BASE_URL` and a placeholder
//!   key; the server adds the real one. The API is then reached by the
//!   server, not through the egress allowlist.
//! - Without a key, the model's API: `ANTHROPIC_BASE_URL` (default
//!   Anthropic's) joins the egress allowlist, and Claude Code uses its own
//!   login; a loopback address is reached through the proxy by a name of
//!   its own ([`MODEL_API_ALIAS`]), since inside the sandbox 127.0.0.1 is
//!   its own.
//!
//! [`key_broker`]: crate::key_broker
//! [`hook_channel::NAME`]: crate::hook_channel::NAME

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::json;

use crate::cli::{AgentClaudeArgs, RunArgs};
use crate::hook_channel;
use crate::key_broker::{self, Brokered};

/// The name a loopback model API is reached by from inside.
pub const MODEL_API_ALIAS: &str = "model-api.cc-server.test";

/// Anthropic's API, when `ANTHROPIC_BASE_URL` is not set.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// The hook command Claude Code runs (through `sh -c`): the channel's
/// client from the sandbox's environment, bwrap's fixed path when unset;
/// any failure, including a client that cannot start, is exit 2.
pub fn hook_command() -> String {
    format!(
        "\"${{CC_SERVER_CALL:-/.sandbox-init}}\" call {} || exit 2",
        hook_channel::NAME
    )
}

/// The settings Claude Code starts with.
pub fn settings() -> serde_json::Value {
    json!({
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{
            "type": "command",
            "command": hook_command(),
            "onFailure": "block",
        }]}]},
    })
}

/// The first Claude Code whose hooks take `onFailure: "block"`. An older
/// one may reject the key, and a settings entry it rejects can keep the
/// hook from running at all: it is refused instead.
pub const MIN_VERSION: (u64, u64, u64) = (2, 1, 295);

/// The version in `claude --version`'s output (`2.1.332 (Claude Code)`).
pub fn parse_version(output: &str) -> Option<(u64, u64, u64)> {
    let word = output.split_whitespace().next()?;
    let mut parts = word.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Refuses a Claude Code older than [`MIN_VERSION`], or one whose version
/// cannot be read. It asks the executable itself (`--version`, with an
/// empty environment), the one file the user asked to run.
pub fn require_version(claude: &Path) -> anyhow::Result<()> {
    let mut child = std::process::Command::new(claude)
        .arg("--version")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("running {} --version", claude.display()))?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{} --version did not answer within 20 s", claude.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut output = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        std::io::Read::read_to_string(&mut stdout, &mut output)?;
    }
    let Some(version) = parse_version(&output) else {
        bail!(
            "cannot read Claude Code's version from `{} --version` ({:?})",
            claude.display(),
            output.trim()
        );
    };
    if version < MIN_VERSION {
        let (a, b, c) = version;
        let (x, y, z) = MIN_VERSION;
        bail!(
            "Claude Code {a}.{b}.{c} is older than {x}.{y}.{z}, the first whose hooks can              block on failure (`onFailure`); refusing to start it with its permissions off:              update Claude Code"
        );
    }
    Ok(())
}

/// cc_server's agent tools, over the sandbox's channel (the caller is the
/// sandbox: no credential to hand in).
pub fn mcp_config() -> serde_json::Value {
    json!({"mcpServers": {"cc_server": {"type": "http", "url": crate::mcp_channel::URL}}})
}

/// Where the model's API is, as seen from inside, and what the egress
/// flags must add for it.
#[derive(Debug, PartialEq, Eq)]
pub struct ModelApi {
    /// `ANTHROPIC_BASE_URL` inside.
    pub base_url: String,
    pub allow_domain: String,
    /// For a loopback or private address: `--allow-private` and `--resolve`.
    pub private: Option<(String, String)>,
}

/// The model API of `base_url` (`http(s)://HOST[:PORT][/PATH]`).
pub fn model_api(base_url: &str) -> anyhow::Result<ModelApi> {
    let uri: http::Uri = base_url
        .parse()
        .with_context(|| format!("ANTHROPIC_BASE_URL={base_url}: not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        bail!("ANTHROPIC_BASE_URL={base_url}: give an http:// or https:// URL");
    }
    let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
        bail!("ANTHROPIC_BASE_URL={base_url}: no host");
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let address = match bare.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) if bare.eq_ignore_ascii_case("localhost") => Some(IpAddr::from([127, 0, 0, 1])),
        Err(_) => None,
    };
    let Some(ip) = address else {
        return Ok(ModelApi {
            base_url: base_url.to_owned(),
            allow_domain: host.to_owned(),
            private: None,
        });
    };
    let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    let rest = uri.path_and_query().map_or("", |p| p.as_str());
    let rest = if rest == "/" { "" } else { rest };
    let scheme = uri.scheme_str().unwrap_or("http");
    Ok(ModelApi {
        base_url: format!("{scheme}://{MODEL_API_ALIAS}{port}{rest}"),
        allow_domain: MODEL_API_ALIAS.to_owned(),
        private: Some((
            MODEL_API_ALIAS.to_owned(),
            format!("{MODEL_API_ALIAS}:{ip}"),
        )),
    })
}

/// `claude` on `path` (a `PATH` value), or `None`.
fn find_on_path(path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join("claude"))
        .find(|file| {
            file.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The `run` that starts Claude Code, from `agent claude`'s arguments, the
/// caller's `ANTHROPIC_BASE_URL` and `PATH`, and the key to broker.
pub fn plan_claude(
    args: AgentClaudeArgs,
    base_url: Option<&str>,
    path: Option<&str>,
    brokered: Option<Brokered>,
) -> anyhow::Result<RunArgs> {
    let claude = match args.claude.clone() {
        Some(claude) => claude,
        None => find_on_path(path.unwrap_or("")).context(
            "no `claude` on PATH: install Claude Code, or give --claude PATH (CC_SERVER_CLAUDE)",
        )?,
    };
    // Where the file really is, so its directory can be shown inside.
    let claude = std::fs::canonicalize(&claude)
        .with_context(|| format!("the Claude Code executable {}", claude.display()))?;
    let mut sandbox = args.sandbox;
    let (api_env, removed_env) = match &brokered {
        // The placeholder where Claude Code looks for what is brokered;
        // the other credential variable removed.
        Some(brokered) => {
            let (placed, removed) = match brokered.bearer {
                true => ("ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY"),
                false => ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
            };
            (
                vec![
                    (
                        "ANTHROPIC_BASE_URL".to_owned(),
                        key_broker::BASE_URL.to_owned(),
                    ),
                    (placed.to_owned(), key_broker::PLACEHOLDER.to_owned()),
                ],
                vec![removed.to_owned()],
            )
        }
        None => {
            let api = model_api(base_url.unwrap_or(DEFAULT_BASE_URL))?;
            sandbox.allow_domains.push(api.allow_domain.clone());
            if let Some((pattern, resolve)) = &api.private {
                sandbox.allow_private.push(pattern.clone());
                sandbox.resolve.push(resolve.clone());
            }
            (
                vec![("ANTHROPIC_BASE_URL".to_owned(), api.base_url)],
                Vec::new(),
            )
        }
    };
    // Outside the system view (a home's `~/.local/share/claude`), its own
    // directory read-only. A conversation's binds are the server's alone.
    let dir = claude.parent().map(Path::to_path_buf);
    if args.conversation.is_none()
        && let Some(dir) = dir.filter(|d| !d.starts_with("/usr") && !d.starts_with("/opt"))
    {
        sandbox.binds.push(format!("{}:ro", dir.display()));
    }
    let mut command = vec![
        claude.display().to_string(),
        "--dangerously-skip-permissions".to_owned(),
        "--setting-sources".to_owned(),
        String::new(),
        "--settings".to_owned(),
        settings().to_string(),
        "--mcp-config".to_owned(),
        mcp_config().to_string(),
    ];
    command.extend(args.claude_args);
    let mut extra_env = api_env;
    extra_env.extend([
        ("IS_SANDBOX".to_owned(), "1".to_owned()),
        // Telemetry and update checks would be egress violations.
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
            "1".to_owned(),
        ),
    ]);
    Ok(RunArgs {
        sandbox,
        timeout: args.timeout,
        json: false,
        ask: args.ask,
        conversation: args.conversation,
        agent: args.agent,
        command,
        extra_env,
        removed_env,
        brokered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[test]
    fn versions_are_read_and_compared() {
        assert_eq!(parse_version("2.1.332 (Claude Code)\n"), Some((2, 1, 332)));
        assert_eq!(parse_version("garbage"), None);
        assert_eq!(parse_version(""), None);
        assert!(parse_version("2.1.294 (Claude Code)").unwrap() < MIN_VERSION);
        assert!(parse_version("2.10.0 (Claude Code)").unwrap() > MIN_VERSION);
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("claude");
        std::fs::write(&old, "#!/bin/sh\necho '2.1.200 (Claude Code)'\n").unwrap();
        std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let err = require_version(&old).unwrap_err().to_string();
        assert!(err.contains("older than 2.1.295"), "{err}");
    }

    #[test]
    fn a_named_api_joins_the_allowlist_as_it_is() {
        let api = model_api("https://api.anthropic.com").unwrap();
        assert_eq!(api.base_url, "https://api.anthropic.com");
        assert_eq!(api.allow_domain, "api.anthropic.com");
        assert_eq!(api.private, None);
    }

    #[test]
    fn a_loopback_api_is_reached_by_its_alias_through_the_proxy() {
        let api = model_api("http://127.0.0.1:18642/prefix").unwrap();
        assert_eq!(
            api.base_url,
            format!("http://{MODEL_API_ALIAS}:18642/prefix")
        );
        assert_eq!(
            api.private,
            Some((
                MODEL_API_ALIAS.to_owned(),
                format!("{MODEL_API_ALIAS}:127.0.0.1")
            ))
        );
        let local = model_api("http://localhost:9").unwrap();
        assert_eq!(local.base_url, format!("http://{MODEL_API_ALIAS}:9"));
        assert!(model_api("ftp://x").is_err());
        assert!(model_api("not a url").is_err());
    }

    #[test]
    fn the_hook_is_on_every_bash_call_and_blocks_on_failure() {
        let settings = settings();
        let hook = &settings["hooks"]["PreToolUse"][0];
        assert_eq!(hook["matcher"], "Bash");
        assert_eq!(hook["hooks"][0]["onFailure"], "block");
        let command = hook["hooks"][0]["command"].as_str().unwrap();
        assert!(
            command.contains("call claude-code-hook") && command.ends_with("|| exit 2"),
            "{command}"
        );
    }

    /// `agent claude --claude DIR/claude ARGS`, parsed (the program an
    /// empty file in `dir`).
    fn claude_args(dir: &std::path::Path, args: &[&str]) -> crate::cli::AgentClaudeArgs {
        let claude = dir.join("claude");
        std::fs::write(&claude, "").unwrap();
        let mut argv = vec![
            "cc_server",
            "agent",
            "claude",
            "--claude",
            claude.to_str().unwrap(),
        ];
        argv.extend_from_slice(args);
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        let crate::cli::Command::Agent(crate::cli::AgentCommand::Claude(args)) = cli.command else {
            panic!("not agent claude");
        };
        args
    }

    #[test]
    fn the_plan_starts_claude_without_its_own_prompts_and_with_the_hook() {
        let dir = tempfile::tempdir().unwrap();
        let args = claude_args(dir.path(), &["--", "-p", "hello"]);
        let run = plan_claude(args, Some("http://127.0.0.1:1"), None, None).unwrap();
        assert!(run.brokered.is_none() && run.removed_env.is_empty());
        assert_eq!(run.command[1], "--dangerously-skip-permissions");
        assert_eq!(&run.command[2..4], ["--setting-sources", ""]);
        assert_eq!(run.command[6], "--mcp-config");
        assert_eq!(&run.command[8..], ["-p", "hello"]);
        assert!(run.extra_env.contains(&("IS_SANDBOX".into(), "1".into())));
        assert!(
            run.sandbox
                .allow_domains
                .contains(&MODEL_API_ALIAS.to_owned())
        );
        let shown = format!(
            "{}:ro",
            std::fs::canonicalize(dir.path()).unwrap().display()
        );
        assert!(
            run.sandbox.binds.contains(&shown),
            "{:?}",
            run.sandbox.binds
        );
    }

    #[test]
    fn a_brokered_key_leaves_only_a_placeholder_and_no_egress_for_the_api() {
        let dir = tempfile::tempdir().unwrap();
        let args = claude_args(dir.path(), &[]);
        let brokered = key_broker::ClaudeSettings::default().brokered(
            Some("sk-ant-real".into()),
            None,
            Some("http://127.0.0.1:1"),
        );
        let run = plan_claude(args, None, None, brokered).unwrap();
        let env: std::collections::BTreeMap<_, _> = run.extra_env.iter().cloned().collect();
        assert_eq!(env["ANTHROPIC_BASE_URL"], key_broker::BASE_URL);
        assert_eq!(env["ANTHROPIC_API_KEY"], key_broker::PLACEHOLDER);
        assert_eq!(run.removed_env, ["ANTHROPIC_AUTH_TOKEN"]);
        assert!(run.sandbox.allow_domains.is_empty() && run.sandbox.resolve.is_empty());
        assert!(!format!("{run:?}").contains("sk-ant-real"));
    }
}
