//! Claude Code, the real CLI (the pinned npm build `.ci/install-deps`
//! puts at /opt/cc-claude-code), against a fake Messages API on loopback
//! (`claude_api.rs`): scripted Bash calls, and what the model reads back.
//! Never a real endpoint. SPEC H6, H13: the hook judges every Bash call by
//! the command policy and fails closed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::claude_api::{FINAL_TEXT, FakeAnthropic, ToolResult};
use crate::util::*;

/// The pinned Claude Code, or `None` (skipped, or failed under CI).
pub fn claude_bin() -> Option<PathBuf> {
    let path = PathBuf::from("/opt/cc-claude-code/bin/claude");
    if path.exists() {
        return Some(path);
    }
    skip_or_fail("Claude Code is not installed at /opt/cc-claude-code: run .ci/install-deps");
    None
}

/// `claude -p` with only what it needs in its environment: a private home,
/// the fake API, a key that is not one, no traffic but the turn itself.
/// `--dangerously-skip-permissions`: the hook is the only gate (root
/// needs `IS_SANDBOX=1` to be allowed it).
pub fn claude_turn(
    claude: &Path,
    api: &FakeAnthropic,
    settings: &Value,
    work: &Path,
    env: &[(&str, &str)],
) -> Output {
    let home = tempfile::tempdir().unwrap();
    let settings_file = home.path().join("cc-settings.json");
    std::fs::write(&settings_file, settings.to_string()).unwrap();
    let mut command = Command::new(claude);
    command
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home.path())
        .env("IS_SANDBOX", "1")
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-for-tests")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .current_dir(work)
        .args(["-p", "run the scripted commands", "--settings"])
        .arg(&settings_file)
        .arg("--dangerously-skip-permissions")
        .stdin(std::process::Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_output(child, std::time::Duration::from_secs(120))
}

/// Settings whose every Bash call goes through `hook` first.
fn with_pre_tool_use(hook: Value) -> Value {
    json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}})
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

pub fn result_of(results: &[ToolResult], n: usize) -> ToolResult {
    results
        .iter()
        .find(|r| r.tool_use_id == format!("toolu_fake_{n}"))
        .unwrap_or_else(|| panic!("no tool result for call {n}: {results:?}"))
        .clone()
}

/// A loopback port nobody listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The command hook on the host: an allowed command runs and its output
/// reaches the model; a denied one never runs and the model reads the
/// rule; with its config unreadable, or its server down, every call is
/// refused (exit 2), not run.
#[test]
fn the_command_hook_judges_bash_calls_and_fails_closed() {
    let Some(claude) = claude_bin() else { return };
    let work = tempfile::tempdir().unwrap();
    let allowed = work.path().join("allowed");
    let denied = work.path().join("denied");
    let api = FakeAnthropic::start(&[
        &format!("echo ran > {}", shell_quote(&allowed)),
        "echo printed-by-bash",
        &format!("sudo touch {}", shell_quote(&denied)),
    ]);
    // `extra`: the flags after the subcommand's own.
    let hook = |global: &str, extra: &str| {
        with_pre_tool_use(json!({
            "type": "command",
            "command": format!(
                "{} {global}policy hook --format claude-code {extra}",
                shell_quote(&cc_server_bin())
            ),
        }))
    };
    let out = claude_turn(&claude, &api, &hook("", ""), work.path(), &[]);
    assert!(
        text(&out.stdout).contains(FINAL_TEXT),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let results = api.results();
    assert!(allowed.exists(), "{results:?}");
    let printed = result_of(&results, 2);
    assert!(
        !printed.is_error && printed.content.contains("printed-by-bash"),
        "{printed:?}"
    );
    let refused = result_of(&results, 3);
    assert!(!denied.exists(), "a denied command ran: {results:?}");
    assert!(
        refused.is_error && refused.content.contains("privilege escalation"),
        "{refused:?}"
    );

    // The hook cannot decide: each time, the call is refused.
    for (case, global, extra) in [
        (
            "no-config",
            "--config /nonexistent/cc_server.toml ",
            String::new(),
        ),
        (
            "server-down",
            "",
            format!("--server http://127.0.0.1:{}", closed_port()),
        ),
    ] {
        let planted = work.path().join(case);
        let api = FakeAnthropic::start(&[&format!("touch {}", shell_quote(&planted))]);
        let out = claude_turn(&claude, &api, &hook(global, &extra), work.path(), &[]);
        let results = api.results();
        assert!(!planted.exists(), "{case}: the call ran: {results:?}");
        let refused = result_of(&results, 1);
        assert!(
            refused.is_error && refused.content.contains("fails closed"),
            "{case}: {refused:?}\n{}",
            text(&out.stderr)
        );
    }
}

/// The README's HTTP hook (the token from the environment through
/// `allowedEnvVars`, `onFailure: "block"`): the server decides; a wrong
/// token or a server that is down refuses the call.
#[test]
fn the_http_hook_snippet_judges_and_blocks_when_the_server_cannot_answer() {
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_none();
    let mut server = Server::start(&plugins);
    let work = tempfile::tempdir().unwrap();
    let allowed = work.path().join("allowed");
    let denied = work.path().join("denied");
    let settings = with_pre_tool_use(json!({
        "type": "http",
        "url": format!("http://{}/v1/policy/check?format=claude-code&mode=chat", server.addr),
        "headers": {"Authorization": "Bearer $CC_SERVER_TOKEN"},
        "allowedEnvVars": ["CC_SERVER_TOKEN"],
        "onFailure": "block",
    }));
    let token = server.token.clone();
    let api = FakeAnthropic::start(&[
        &format!("echo ran > {}", shell_quote(&allowed)),
        &format!("sudo touch {}", shell_quote(&denied)),
    ]);
    let out = claude_turn(
        &claude,
        &api,
        &settings,
        work.path(),
        &[("CC_SERVER_TOKEN", &token)],
    );
    let results = api.results();
    assert!(allowed.exists(), "{results:?}\n{}", text(&out.stderr));
    assert!(!denied.exists(), "a denied command ran: {results:?}");
    let refused = result_of(&results, 2);
    assert!(
        refused.is_error && refused.content.contains("privilege escalation"),
        "{refused:?}"
    );

    let wrong_token = work.path().join("wrong-token");
    let api = FakeAnthropic::start(&[&format!("touch {}", shell_quote(&wrong_token))]);
    claude_turn(
        &claude,
        &api,
        &settings,
        work.path(),
        &[("CC_SERVER_TOKEN", "not-the-token")],
    );
    assert!(
        !wrong_token.exists(),
        "ran with a wrong token: {:?}",
        api.results()
    );
    assert!(result_of(&api.results(), 1).is_error);

    server.stop();
    let down = work.path().join("server-down");
    let api = FakeAnthropic::start(&[&format!("touch {}", shell_quote(&down))]);
    claude_turn(
        &claude,
        &api,
        &settings,
        work.path(),
        &[("CC_SERVER_TOKEN", &token)],
    );
    assert!(
        !down.exists(),
        "ran with the server down: {:?}",
        api.results()
    );
    assert!(result_of(&api.results(), 1).is_error);
}

/// `cc_server agent claude` with the fake API, in `work`, through `command`.
/// `flags`: `agent claude`'s own, before Claude Code's.
fn agent_claude(
    command: CcServer,
    claude: &Path,
    api: &FakeAnthropic,
    work: &Path,
    flags: &[&str],
) -> CcServer {
    command
        .current_dir(work)
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-for-tests")
        .args(["agent", "claude", "--backend", "bwrap", "--claude"])
        .arg(claude)
        .args(flags)
        .args(["--", "-p", "run the scripted commands"])
}

/// B10, H6, H12, H13: Claude Code inside a bwrap sandbox, started with
/// `--dangerously-skip-permissions`: an allowed Bash call runs and its
/// output reaches the model; a denied one never runs and the model reads
/// the rule; a secret written in the workdir is refused by the sandbox
/// with a violation on the event stream; a host file outside the binds is
/// untouched. The model's API on loopback is reached through the egress
/// proxy by its alias.
#[test]
fn agent_claude_runs_in_the_sandbox_and_its_bash_calls_pass_the_policy() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let planted = outside.path().join("planted");
    let api = FakeAnthropic::start(&[
        "echo allowed-ran > allowed.txt && cat allowed.txt",
        "sudo touch denied",
        "echo TOKEN=1 > .env",
        &format!("echo x > {}", shell_quote(&planted)),
    ]);
    let out = agent_claude(CcServer::new(&plugins), &claude, &api, work.path(), &[]).output();
    let stderr = text(&out.stderr);
    let results = api.results();
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{results:?}");
    assert!(text(&out.stdout).contains(FINAL_TEXT), "{stderr}");
    let allowed = result_of(&results, 1);
    assert!(
        !allowed.is_error && allowed.content.contains("allowed-ran"),
        "{allowed:?}"
    );
    assert!(work.path().join("allowed.txt").exists());
    let denied = result_of(&results, 2);
    assert!(
        denied.is_error && denied.content.contains("privilege escalation"),
        "{denied:?}"
    );
    assert!(!work.path().join("denied").exists());
    assert!(!work.path().join(".env").exists(), "a secret was written");
    assert!(
        stderr.contains("cc_server: violation:") && stderr.contains(".env"),
        "{stderr}"
    );
    assert!(!planted.exists(), "a host file outside the binds changed");
    // cc_server's own tools, over the sandbox's channel: Claude Code
    // connected and names them (it defers MCP tools behind its ToolSearch).
    assert!(
        api.saw("mcp__cc_server__read") && api.saw("mcp__cc_server__exec"),
        "{:?}",
        api.tools_offered()
    );
}

/// H4, H12: a Bash call the policy asks about waits for the owner — here
/// the person at `--ask`'s terminal — and runs after "allow"; never
/// Claude Code's own dialog.
#[test]
fn agent_claude_puts_a_prompt_to_the_owner_and_runs_after_allow() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("pip"),
        "#!/bin/sh\necho stand-in pip \"$@\"; touch installed\n",
    )
    .unwrap();
    std::fs::set_permissions(
        work.path().join("pip"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let api = FakeAnthropic::start(&["./pip install demo"]);
    let (out, shown) = agent_claude(
        CcServer::new(&plugins),
        &claude,
        &api,
        work.path(),
        &["--ask"],
    )
    .output_on_terminal(b"", "[y/N]", b"y\n");
    let results = api.results();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\nterminal:\n{shown}",
        text(&out.stderr)
    );
    assert!(shown.contains("install a package"), "{shown}");
    let ran = result_of(&results, 1);
    assert!(
        !ran.is_error && ran.content.contains("stand-in pip install demo"),
        "{ran:?}"
    );
    assert!(work.path().join("installed").exists());
}

/// The hook cannot reach the server (no channel client where it looks):
/// the Bash call is refused, not run.
#[test]
fn agent_claude_refuses_a_bash_call_when_the_channel_is_broken() {
    let Some(claude) = claude_bin() else { return };
    // `none` finds its client beside the cc_server executable: a copy with
    // none beside it has no channel client.
    let plugins = Plugins::with_none();
    let alone = tempfile::tempdir().unwrap();
    let program = alone.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    let work = tempfile::tempdir().unwrap();
    let api = FakeAnthropic::start(&["touch reached"]);
    let out = CcServer::with_program(&plugins, &program)
        .current_dir(work.path())
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-for-tests")
        .args(["agent", "claude", "--backend", "none", "--claude"])
        .arg(&claude)
        .args(["--", "-p", "run the scripted commands"])
        .output();
    let results = api.results();
    assert!(
        !work.path().join("reached").exists(),
        "the call ran without the hook: {results:?}\n{}",
        text(&out.stderr)
    );
    let refused = result_of(&results, 1);
    assert!(
        refused.is_error && refused.content.contains("hook error"),
        "{refused:?}"
    );
}

/// T56: Claude Code's settings files are not read, so a repository's
/// `.claude/settings.json` or a Bash call writing `~/.claude/settings.json`
/// with `disableAllHooks` leaves the hook on: the next denied call is
/// still denied.
#[test]
fn agent_claude_cannot_switch_its_hook_off() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join(".claude")).unwrap();
    std::fs::write(
        work.path().join(".claude/settings.json"),
        r#"{"disableAllHooks":true}"#,
    )
    .unwrap();
    let api = FakeAnthropic::start(&[
        r#"mkdir -p ~/.claude && echo '{"disableAllHooks":true}' > ~/.claude/settings.json; cat ~/.claude/settings.json"#,
        "touch reached; sudo -n true",
    ]);
    let out = agent_claude(CcServer::new(&plugins), &claude, &api, work.path(), &[]).output();
    let results = api.results();
    assert!(
        !work.path().join("reached").exists(),
        "{results:?}\n{}",
        text(&out.stderr)
    );
    let denied = result_of(&results, 2);
    assert!(
        denied.is_error && denied.content.contains("privilege escalation"),
        "{denied:?}"
    );
}

/// H4, H12, B10: Claude Code started in a server's sandbox (over the exec
/// route) with the hook `agent claude` gives it: a Bash call the policy
/// asks about waits for an owner on `GET /v1/approvals` and runs after
/// "allow".
#[test]
fn in_a_servers_sandbox_a_prompt_waits_for_the_owner_and_runs_after_allow() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let alias = "model-api.cc-server.test";
    let plugins = Plugins::with_bwrap();
    let server = Server::start_with(CcServer::new(&plugins).config(&format!(
        "[egress]\nallow = [\"{alias}\"]\nallow_private = [\"{alias}\"]\nresolve = [\"{alias}:127.0.0.1\"]\n"
    )));
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("pip"),
        "#!/bin/sh\necho stand-in pip \"$@\"; touch installed\n",
    )
    .unwrap();
    std::fs::set_permissions(
        work.path().join("pip"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(
            &json!({"sessionId": "cc", "bindMounts": [{"hostPath": work.path()}],
                "guestWorkdir": work.path(), "execGrantRoots": [work.path()]})
            .to_string(),
        ),
    );
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let api = FakeAnthropic::start(&["./pip install demo"]);
    let settings = with_pre_tool_use(json!({
        "type": "command",
        "command": "\"${CC_SERVER_CALL:-/.sandbox-init}\" call claude-code-hook || exit 2",
        "onFailure": "block",
    }));
    let body = json!({
        "argv": [claude, "--dangerously-skip-permissions", "--setting-sources", "",
            "--settings", settings.to_string(), "-p", "run the scripted commands"],
        "env": {"IS_SANDBOX": "1", "ANTHROPIC_API_KEY": "sk-ant-fake-for-tests",
            "ANTHROPIC_BASE_URL": format!("http://{alias}:{}", api.addr.port()),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
    })
    .to_string();
    let mut owner = http_open(
        server.addr,
        "GET",
        "/v1/approvals",
        None,
        Some(&server.token),
    );
    read_until(&mut owner, "\"connected\"");
    let (addr, token) = (server.addr, server.token.clone());
    let exec = std::thread::spawn(move || {
        http(
            addr,
            "POST",
            "/v1/sandboxes/cc/execs",
            Some(&body),
            Some(&token),
        )
    });
    let prompt = read_until(&mut owner, "\"prompt\"").pop().unwrap();
    assert!(
        prompt["rule"]
            .as_str()
            .unwrap()
            .contains("install a package"),
        "{prompt}"
    );
    assert!(
        !work.path().join("installed").exists(),
        "ran before the answer"
    );
    let id = prompt["id"].as_str().unwrap();
    let answered = server.call(
        "POST",
        &format!("/v1/approvals/{id}"),
        Some(r#"{"decision": "allow"}"#),
    );
    assert_eq!(answered.status, 204, "{}", text(&answered.body));
    let done = exec.join().unwrap();
    assert_eq!(done.status, 200, "{}", text(&done.body));
    let ran = result_of(&api.results(), 1);
    assert!(
        !ran.is_error && ran.content.contains("stand-in pip install demo"),
        "{ran:?}"
    );
    assert!(work.path().join("installed").exists());
}

/// H2, B10: Claude Code calls cc_server's own tools over the sandbox's
/// channel (no credential handed in: the caller is the sandbox), and they
/// act on that sandbox's binds.
#[test]
fn agent_claude_calls_cc_servers_tools_over_the_channel() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("notes.txt"), "read through the channel\n").unwrap();
    let api = FakeAnthropic::start_calls(vec![
        (
            "ToolSearch".into(),
            json!({"query": "select:mcp__cc_server__read", "max_results": 1}),
        ),
        ("mcp__cc_server__read".into(), json!({"path": "notes.txt"})),
    ]);
    let out = agent_claude(CcServer::new(&plugins), &claude, &api, work.path(), &[]).output();
    let results = api.results();
    let read = result_of(&results, 2);
    assert!(
        !read.is_error && read.content.contains("read through the channel"),
        "{read:?}\n{results:?}\n{}",
        text(&out.stderr)
    );
}

/// The command hook asking a running server (`--server`, `--token-file`):
/// the server's policy decides; a wrong token file is a refusal.
#[test]
fn the_command_hook_asks_a_server_when_given_one() {
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let work = tempfile::tempdir().unwrap();
    let wrong = work.path().join("wrong-token");
    std::fs::write(&wrong, "not-the-token\n").unwrap();
    let hook = |token_file: &Path| {
        with_pre_tool_use(json!({
            "type": "command",
            "command": format!(
                "{} policy hook --format claude-code --server http://{} --token-file {}",
                shell_quote(&cc_server_bin()),
                server.addr,
                shell_quote(token_file)
            ),
        }))
    };
    let allowed = work.path().join("allowed");
    let api = FakeAnthropic::start(&[
        &format!("echo ran > {}", shell_quote(&allowed)),
        "touch denied; sudo -n true",
    ]);
    claude_turn(&claude, &api, &hook(&server.token_file), work.path(), &[]);
    let results = api.results();
    assert!(allowed.exists(), "{results:?}");
    let denied = result_of(&results, 2);
    assert!(
        denied.is_error && denied.content.contains("privilege escalation"),
        "{denied:?}"
    );
    assert!(!work.path().join("denied").exists());

    let planted = work.path().join("with-wrong-token");
    let api = FakeAnthropic::start(&[&format!("touch {}", shell_quote(&planted))]);
    claude_turn(&claude, &api, &hook(&wrong), work.path(), &[]);
    let refused = result_of(&api.results(), 1);
    assert!(!planted.exists(), "{refused:?}");
    assert!(
        refused.is_error && refused.content.contains("401"),
        "{refused:?}"
    );
}
