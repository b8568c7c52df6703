//! T57, SPEC H5: the Anthropic API key is brokered by the server, never
//! inside the sandbox. The real Claude Code (`claude.rs`) against the fake
//! Messages API (`claude_api.rs`) served over TLS by a test CA: the fake
//! checks the `x-api-key` of every request it got equals the server's key,
//! while nothing inside — the environment, `/proc/*/environ`, files under
//! the workdir and home — holds it.

use std::path::{Path, PathBuf};

use crate::claude::claude_bin;
use crate::claude_api::{FINAL_TEXT, FakeAnthropic};
use crate::util::*;

/// The server's key: its two halves never appear together in a command.
const KEY: &str = "sk-ant-server-held-7f3c9e";

/// The key file (0600) and the `[agents.claude]` config for `api`.
fn key_config(dir: &Path, api: &FakeAnthropic, ca: &Path) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let file = dir.join("anthropic.key");
    std::fs::write(&file, format!("{KEY}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    format!(
        "[agents.claude]\napi_key_file = \"{}\"\napi_base_url = \"https://127.0.0.1:{}\"\nca_file = \"{}\"\n",
        file.display(),
        api.addr.port(),
        ca.display()
    )
}

/// Every file under `dir` whose bytes hold `needle`.
fn files_holding(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if kind.is_file()
            && std::fs::read(&path).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
        {
            found.push(path);
        }
    }
    found
}

/// A scripted turn of the real Claude Code through the broker: it works,
/// every request reached the API with the server's key, and a Bash call
/// reading `env`, `/proc/*/environ` and the files under the workdir, home
/// and `/tmp` sees only the placeholder.
#[test]
fn agent_claude_reaches_the_api_with_a_key_it_never_holds() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (ca, tls) = crate::net::test_ca(tmp.path());
    let work = tempfile::tempdir().unwrap();
    let (head, tail) = KEY.split_at(10);
    let api = FakeAnthropic::start_tls(
        &[
            "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null",
            &format!(
                "K={head}; grep -rl \"${{K}}{tail}\" . \"$HOME\" /tmp 2>/dev/null; echo searched"
            ),
        ],
        tls,
    );
    let out = CcServer::new(&plugins)
        .config(&key_config(tmp.path(), &api, &ca))
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .current_dir(work.path())
        .args(["agent", "claude", "--backend", "bwrap", "--claude"])
        .arg(&claude)
        .args(["--", "-p", "run the scripted commands"])
        .output();
    let stderr = text(&out.stderr);
    let results = api.results();
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{results:?}");
    assert!(text(&out.stdout).contains(FINAL_TEXT), "{stderr}");
    let keys = api.api_keys();
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k.as_deref() == Some(KEY)),
        "the API got other keys: {keys:?}"
    );
    let environment = crate::claude::result_of(&results, 1);
    assert!(
        !environment.is_error
            && environment
                .content
                .contains("ANTHROPIC_BASE_URL=http://cc-server.internal/anthropic")
            && environment
                .content
                .contains("ANTHROPIC_API_KEY=cc-server-brokered"),
        "{environment:?}"
    );
    let searched = crate::claude::result_of(&results, 2);
    assert!(
        searched.content.trim() == "searched",
        "files inside hold the key: {searched:?}"
    );
    for result in &results {
        assert!(!result.content.contains(KEY), "{result:?}");
    }
    assert!(!stderr.contains(KEY) && !text(&out.stdout).contains(KEY));
    assert_eq!(files_holding(work.path(), KEY), Vec::<PathBuf>::new());
}

/// A gateway's bearer token (the invoker's `ANTHROPIC_AUTH_TOKEN`, no
/// API key) is brokered the same way, as `Authorization: Bearer`: inside,
/// only the placeholder.
#[test]
fn an_auth_token_is_brokered_as_a_bearer() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let api = FakeAnthropic::start(&["env"]);
    let out = CcServer::new(&plugins)
        .env_remove("ANTHROPIC_API_KEY")
        .env("ANTHROPIC_AUTH_TOKEN", KEY)
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .current_dir(work.path())
        .args(["agent", "claude", "--backend", "bwrap", "--claude"])
        .arg(&claude)
        .args(["--", "-p", "run the scripted commands"])
        .output();
    let results = api.results();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{results:?}",
        text(&out.stderr)
    );
    let bearer = format!("Bearer {KEY}");
    let got = api.authorizations();
    assert!(
        !got.is_empty() && got.iter().all(|a| a.as_deref() == Some(bearer.as_str())),
        "{got:?}"
    );
    assert!(api.api_keys().iter().all(Option::is_none));
    let environment = crate::claude::result_of(&results, 1);
    assert!(
        environment
            .content
            .contains("ANTHROPIC_AUTH_TOKEN=cc-server-brokered")
            && !environment.content.contains(KEY)
            && !environment.content.contains("ANTHROPIC_API_KEY="),
        "{environment:?}"
    );
}

/// With no key anywhere, `agent claude` runs as it did before the broker
/// — the API through the egress allowlist, Claude Code's own login — and
/// says so; Claude Code with no login stops with its own error.
#[test]
fn with_no_key_agent_claude_says_so_and_leaves_the_login_to_claude_code() {
    require_bwrap!();
    let Some(claude) = claude_bin() else { return };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let api = FakeAnthropic::start(&[]);
    let out = CcServer::new(&plugins)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_AUTH_TOKEN")
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .current_dir(work.path())
        .args(["agent", "claude", "--backend", "bwrap", "--claude"])
        .arg(&claude)
        .args(["--", "-p", "hello"])
        .output();
    let stderr = text(&out.stderr);
    let said = format!("{}{stderr}", text(&out.stdout));
    assert!(
        stderr.contains("no Anthropic API key to broker") && said.contains("Not logged in"),
        "{said}"
    );
    assert_ne!(out.status.code(), Some(0));
}

/// The broker streams: a client inside reads the first server-sent event
/// while the API still holds the rest (it sends it once the client,
/// having read the first, asks it to). A stand-in for Claude Code drives
/// it with curl in the very session `agent claude` starts.
#[test]
fn the_broker_streams_the_answer_without_buffering_it() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (ca, tls) = crate::net::test_ca(tmp.path());
    let work = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    let stand_in = bin.path().join("claude");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\n\
         [ \"$1\" = --version ] && { echo '2.1.332 (Claude Code)'; exit 0; }\n\
         curl -sN \"$ANTHROPIC_BASE_URL/v1/stream-probe\" > probe.out &\n\
         i=0; until grep -q first probe.out; do i=$((i+1)); [ $i -gt 150 ] && break; sleep 0.1; done\n\
         grep -q first probe.out && curl -s \"$ANTHROPIC_BASE_URL/v1/stream-probe/ack\"\n\
         wait; cat probe.out\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let api = FakeAnthropic::start_tls(&[], tls);
    let out = CcServer::new(&plugins)
        .config(&key_config(tmp.path(), &api, &ca))
        .env_remove("ANTHROPIC_API_KEY")
        .current_dir(work.path())
        .args(["agent", "claude", "--backend", "bwrap", "--claude"])
        .arg(&stand_in)
        .output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("acked")
            && stdout.contains("event: first")
            && stdout.contains("event: second")
            && !stdout.contains("timed-out"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(
        api.api_keys().iter().all(|k| k.as_deref() == Some(KEY)),
        "{:?}",
        api.api_keys()
    );
}

/// Only `agent claude`'s session may use the key: a plain `run` asking
/// the broker is refused, the refusal naming the key and how to use it;
/// the API never hears of it. The key file is never bound into a sandbox.
#[test]
fn other_runs_are_refused_the_key_by_name() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (ca, tls) = crate::net::test_ca(tmp.path());
    let work = tempfile::tempdir().unwrap();
    let api = FakeAnthropic::start_tls(&[], tls);
    let config = key_config(tmp.path(), &api, &ca);
    let out = CcServer::new(&plugins)
        .config(&config)
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "bwrap",
            "--",
            "curl",
            "-s",
            "-i",
            "-d",
            "{}",
        ])
        .arg("http://cc-server.internal/anthropic/v1/messages")
        .output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("403") && stdout.contains("[agents.claude] api_key_file"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(api.api_keys().is_empty(), "{:?}", api.api_keys());

    let out = CcServer::new(&plugins)
        .config(&config)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--bind"])
        .arg(format!("{}:ro", tmp.path().display()))
        .args(["--", "true"])
        .output();
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("[agents.claude] api_key_file"),
        "{stderr}"
    );
}
