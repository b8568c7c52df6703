//! The push gateway end to end (SPEC H8, docs/design.md §18): a real git in
//! a real bwrap sandbox pushes to `http://cc-server.internal/git/…`, which
//! its session's proxy hands to the gateway; each ref is judged by the
//! guardrails' `push_remote` rule, refused in git's own report-status or
//! forwarded to a stand-in forge (`git http-backend` behind a loopback
//! server that requires the write credential) with a token the sandbox
//! never sees.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::net::{GitHttpServer, bare_repo, git};
use crate::util::*;

const TOKEN: &str = "ghs_standin_write_token_0123456789abcdefghijklmnopqrstuv";
/// `Basic base64("x-access-token:" + TOKEN)`.
const AUTHORIZATION: &str = "Basic eC1hY2Nlc3MtdG9rZW46Z2hzX3N0YW5kaW5fd3JpdGVfdG9rZW5fMDEyMzQ1Njc4OWFiY2RlZmdoaWprbG1ub3BxcnN0dXY=";

const RULES: &str = "[[rule]]\nclass = \"push_remote\"\nbranches = [\"main\"]\ndecision = \"deny\"\n\n\
                     [[rule]]\nclass = \"push_remote\"\nbranches = [\"agent/*\"]\ndecision = \"allow\"\n";

fn run_in(plugins: &Plugins, dir: &Path, config: &str, script: &str) -> Output {
    CcServer::new(plugins)
        .current_dir(dir)
        .config(config)
        // An agent socket of the host's: never forwarded.
        .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
        // Should a push escape the rewrite, `github.com` is loopback, which
        // the proxy refuses: no test reaches the real forge.
        .args([
            "run",
            "--backend",
            "bwrap",
            "--resolve",
            "github.com:127.0.0.1",
        ])
        .args(["--", "sh", "-c", script])
        .output()
}

/// A GitHub App's private key (RSA 2048, 0600) at `dir/app.pem`: PKCS#1
/// (`-----BEGIN RSA PRIVATE KEY-----`) when `traditional`, else PKCS#8.
fn app_key(dir: &Path, traditional: bool) -> PathBuf {
    let key = dir.join("app.pem");
    let mut openssl = std::process::Command::new("openssl");
    openssl.arg("genrsa");
    if traditional {
        openssl.arg("-traditional");
    }
    let made = openssl.arg("-out").arg(&key).arg("2048").output().unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    key
}

fn branches(bare: &Path) -> String {
    text(&git(bare, &["for-each-ref", "--format=%(refname)"]).stdout)
}

#[test]
fn pushes_are_judged_per_ref_and_forwarded_with_a_token_the_sandbox_never_sees() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    // The stand-in forge is served over TLS by a test CA the config trusts.
    let (ca, tls) = crate::net::test_ca(tmp.path());
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        tls: Some(tls),
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let url = format!("https://127.0.0.1:{port}/o/r.git");
    let ca_text = ca.to_str().unwrap();
    crate::net::git_env(
        tmp.path(),
        &["clone", "-q", &url, "clone"],
        &[("GIT_SSL_CAINFO", ca_text)],
    );
    let clone = tmp.path().join("clone");

    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let token = tmp.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[policy]\nguardrails = \"{}\"\n\n[gateway]\nupstream = \"https://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\"]\ntoken_file = \"{}\"\nca_file = \"{}\"\n",
        rules.display(),
        token.display(),
        ca.display()
    );
    let gw = "http://cc-server.internal/git/o/r.git";
    let script = format!(
        "export GIT_TERMINAL_PROMPT=0\n\
         git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m agent-work\n\
         git push {gw} HEAD:refs/heads/agent/x; echo agent=$?\n\
         git push {gw} HEAD:refs/heads/main; echo main=$?\n\
         printf 'git push {gw} HEAD:refs/heads/main\\n' > ../push.sh; sh ../push.sh; echo script=$?\n\
         git push --atomic {gw} HEAD:refs/heads/agent/y HEAD:refs/heads/main; echo atomic=$?\n\
         git push http://cc-server.internal/git/o/other.git HEAD:refs/heads/agent/z; echo unlinked=$?\n\
         curl -s -X POST --data-binary zzzz -H 'Content-Type: application/x-git-receive-pack-request' \
              {gw}/git-receive-pack; echo\n\
         git push {gw} HEAD:refs/heads/agent/after; echo after=$?\n\
         git push https://github.com/o/r.git HEAD:refs/heads/agent/https; echo https=$?\n\
         git push git@github.com:o/r.git HEAD:refs/heads/agent/scp; echo scp=$?\n\
         git push ssh://git@github.com/o/r.git HEAD:refs/heads/main; echo ssh-main=$?\n\
         git -c remote.origin.pushurl=http://127.0.0.1:{port}/o/r.git push origin HEAD:refs/heads/agent/bypass; echo bypass=$?\n\
         python3 -c \"import socket;s=socket.create_connection(('127.0.0.1',3128));s.sendall(b'CONNECT github.com:22 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n');print(s.recv(4096).decode())\"\n\
         echo auth=${{SSH_AUTH_SOCK:-none}}\n\
         (env; cat .git/config) | grep -c {TOKEN}; echo\n"
    );
    let out = run_in(&plugins, &clone, &config, &script);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    for want in [
        "agent=0",
        "main=1",
        "script=1",
        "atomic=1",
        "unlinked=1",
        "after=0",
        "https=0",
        "scp=0",
        "ssh-main=1",
        "bypass=128",
        "auth=none",
        "0",
    ] {
        assert!(lines.contains(&want), "expected {want}\n{}", both(&out));
    }
    // git's own per-ref refusal, naming the rule.
    assert!(
        stderr.contains(" ! [remote rejected] HEAD -> main (cc_server policy: push to the branch main refused by guardrail #1"),
        "{}",
        both(&out)
    );
    assert!(
        stderr.contains("HEAD -> agent/y (atomic push failed)"),
        "{}",
        both(&out)
    );
    assert!(
        stderr.contains("o/other.git is not this session's repository"),
        "{}",
        both(&out)
    );
    assert!(
        stdout.contains("malformed pkt-line at byte 0"),
        "{}",
        both(&out)
    );
    // ssh to the forge is refused by name while the gateway brokers it.
    assert!(
        stdout.contains("git over ssh to github.com:22 is refused"),
        "{}",
        both(&out)
    );
    // Each refused ref is a violation on the run's stream.
    assert!(
        stderr.contains("cc_server: violation: git-push o/r.git refs/heads/main"),
        "{}",
        both(&out)
    );
    assert!(
        stderr.contains("cc_server: violation: git-push o/other.git refs/heads/agent/z"),
        "{}",
        both(&out)
    );
    let refs = branches(&bare);
    assert!(
        refs.contains("refs/heads/agent/x"),
        "{refs}\n{}",
        both(&out)
    );
    assert!(refs.contains("refs/heads/agent/after"), "{refs}");
    assert!(
        !refs.contains("agent/y") && !refs.contains("agent/z") && !refs.contains("agent/bypass"),
        "{refs}"
    );
    assert!(
        refs.contains("refs/heads/agent/https") && refs.contains("refs/heads/agent/scp"),
        "{refs}"
    );
    let main = text(&git(&bare, &["log", "-1", "--format=%s", "main"]).stdout);
    assert_eq!(main.trim(), "second", "main moved");
    // Every receive-pack request reaching the forge carried the write
    // credential; the sandbox never held it (`grep -c` counted 0 above).
    let seen = forge.push_authorizations();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|a| a.as_deref() == Some(AUTHORIZATION)),
        "{seen:?}"
    );
}

const READ_TOKEN: &str = "ghs_standin_read_token_abcdefghijklmnopqrstuvwxyz0123456789";
/// `Basic base64("x-access-token:" + READ_TOKEN)`.
const READ_AUTHORIZATION: &str = "Basic eC1hY2Nlc3MtdG9rZW46Z2hzX3N0YW5kaW5fcmVhZF90b2tlbl9hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk=";

/// SPEC H5: the read token reaches git only through the credential helper
/// over the channel — never in the environment or a file inside — works
/// for fetches, is given for the forge's own URL only, and used by hand for
/// a push it is refused by the forge.
#[test]
fn the_read_token_reaches_git_through_the_channel_and_cannot_push() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        read: Some(READ_AUTHORIZATION.to_owned()),
        app: None,
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {READ_AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(tmp.path(), &["-c", &header, "clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let inside = format!("http://forge.test:{port}/o/r.git");
    git(&clone, &["remote", "set-url", "origin", &inside]);

    let mut files = Vec::new();
    for (name, value) in [("token", TOKEN), ("read-token", READ_TOKEN)] {
        let path = tmp.path().join(name);
        std::fs::write(&path, format!("{value}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        files.push(path);
    }
    let config = format!(
        "[gateway]\nupstream = \"http://127.0.0.1:{port}\"\nrepositories = [\"o/r.git\"]\n\
         token_file = \"{}\"\nread_token_file = \"{}\"\nread_url = \"http://forge.test:{port}\"\n",
        files[0].display(),
        files[1].display()
    );
    let script = format!(
        "export GIT_TERMINAL_PROMPT=0\n\
         echo fill=$(printf 'protocol=http\\nhost=forge.test:{port}\\n\\n' | git credential fill | grep -c {READ_TOKEN})\n\
         printf 'protocol=https\\nhost=elsewhere.test\\n\\n' | git credential fill; echo other=$?\n\
         git fetch -q origin; echo fetch=$?\n\
         git push http://x-access-token:{READ_TOKEN}@forge.test:{port}/o/r.git HEAD:refs/heads/agent/byhand; echo byhand=$?\n\
         echo leaked=$( (env; cat .git/config) | grep -c {READ_TOKEN})\n"
    );
    let out = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args(["run", "--backend", "bwrap", "--allow-domain", "forge.test"])
        .args([
            "--allow-private",
            "forge.test",
            "--resolve",
            "forge.test:127.0.0.1",
        ])
        .args(["--", "sh", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    for want in ["fill=1", "other=128", "fetch=0", "byhand=128", "leaked=0"] {
        assert!(lines.contains(&want), "expected {want}\n{}", both(&out));
    }
    assert!(!branches(&bare).contains("agent/byhand"));
    // The forge saw the read token on the push by hand, and refused it.
    assert!(
        forge
            .push_authorizations()
            .contains(&Some(READ_AUTHORIZATION.to_owned())),
        "{:?}",
        forge.push_authorizations()
    );
}

/// SPEC H5, H8: with a GitHub App, the run's read token is minted for the
/// session (contents read, pull requests write: it cannot push), each push
/// gets a write token minted for it without `workflows`, and every token
/// issued is revoked: the push's once its answer is streamed, the
/// session's at teardown. None of them is in the sandbox's environment.
#[test]
fn app_tokens_are_minted_scoped_and_all_revoked() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    crate::net::refuse_workflows_without_permission(&bare);
    let app = std::sync::Arc::new(std::sync::Mutex::new(crate::net::AppForge::default()));
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        read: None,
        app: Some(app.clone()),
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(tmp.path(), &["-c", &header, "clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let inside = format!("http://forge.test:{port}/o/r.git");
    git(&clone, &["remote", "set-url", "origin", &inside]);
    let key = app_key(tmp.path(), false);
    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let config = format!(
        "[policy]\nguardrails = \"{}\"\n\n[gateway]\nupstream = \"http://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\"]\nread_url = \"http://forge.test:{port}\"\n\n\
         [gateway.app]\napp_id = \"12345\"\ninstallation_id = \"678\"\n\
         private_key_file = \"{}\"\napi_url = \"http://127.0.0.1:{port}\"\n",
        rules.display(),
        key.display()
    );
    let gw = "http://cc-server.internal/git/o/r.git";
    let script = format!(
        "export GIT_TERMINAL_PROMPT=0\n\
         git fetch -q origin; echo fetch=$?\n\
         git fetch -q origin; echo again=$?\n\
         git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m agent-work\n\
         git push -q {gw} HEAD:refs/heads/agent/x; echo push=$?\n\
         mkdir -p .github/workflows && echo 'on: push' > .github/workflows/ci.yml && git add .github\n\
         git -c user.name=a -c user.email=a@example.com commit -q -m workflow\n\
         git push -q {gw} HEAD:refs/heads/agent/wf; echo workflow=$?\n\
         echo leaked=$( (env; cat .git/config) | grep -c ghs_)\n"
    );
    let out = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args(["run", "--backend", "bwrap", "--allow-domain", "forge.test"])
        .args([
            "--allow-private",
            "forge.test",
            "--resolve",
            "forge.test:127.0.0.1",
        ])
        .args(["--", "sh", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    for want in ["fetch=0", "again=0", "push=0", "workflow=1", "leaked=0"] {
        assert!(lines.contains(&want), "expected {want}\n{}", both(&out));
    }
    assert!(branches(&bare).contains("refs/heads/agent/x"));
    // The write token has no `workflows`: the forge refuses the workflow
    // file, and git shows its refusal.
    assert!(!branches(&bare).contains("agent/wf"));
    assert!(
        text(&out.stderr).contains("without workflows permission"),
        "{}",
        both(&out)
    );
    // The run is over: every token issued is revoked (the push's from a
    // task after its answer, so allow it a moment).
    let all_revoked = eventually(std::time::Duration::from_secs(5), || {
        app.lock().unwrap().minted.iter().all(|m| m.revoked)
    });
    let forge_state = app.lock().unwrap();
    let minted: Vec<(String, bool)> = forge_state
        .minted
        .iter()
        .map(|m| (m.permissions.to_string(), m.revoked))
        .collect();
    assert!(all_revoked, "{minted:?}\n{}", both(&out));
    // One read token for the session (two fetches), a write token for each
    // push's discovery and one for each push, none with `workflows`.
    let read = r#"{"contents":"read","pull_requests":"write"}"#;
    let write = r#"{"contents":"write"}"#;
    let count = |p: &str| minted.iter().filter(|(m, _)| m == p).count();
    assert_eq!(count(read), 1, "{minted:?}");
    assert_eq!(count(write), 4, "{minted:?}");
    assert!(
        forge_state
            .minted
            .iter()
            .all(|m| m.repositories == serde_json::json!(["r"]))
    );
    assert!(forge_state.issuers.iter().all(|i| i == "12345") && !forge_state.issuers.is_empty());
}

/// SPEC H5: a server killed mid-run leaves its session's read token live;
/// the next start finds it in the workspaces database (its owner gone) and
/// revokes it.
#[test]
fn a_restarted_server_revokes_the_tokens_a_killed_one_left() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    bare_repo(&root, "o/r.git");
    let app = std::sync::Arc::new(std::sync::Mutex::new(crate::net::AppForge::default()));
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        read: None,
        app: Some(app.clone()),
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(tmp.path(), &["-c", &header, "clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let inside = format!("http://forge.test:{port}/o/r.git");
    git(&clone, &["remote", "set-url", "origin", &inside]);
    let key = app_key(tmp.path(), true);
    let state = tmp.path().join("state");
    let config = format!(
        "[workspaces]\nstate_dir = \"{}\"\n\n[gateway]\nupstream = \"http://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\"]\nread_url = \"http://forge.test:{port}\"\n\n\
         [gateway.app]\napp_id = \"12345\"\ninstallation_id = \"678\"\n\
         private_key_file = \"{}\"\napi_url = \"http://127.0.0.1:{port}\"\n",
        state.display(),
        key.display()
    );
    let flags = [
        "run",
        "--backend",
        "bwrap",
        "--allow-domain",
        "forge.test",
        "--allow-private",
        "forge.test",
        "--resolve",
        "forge.test:127.0.0.1",
    ];
    let first = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args(flags)
        .args([
            "--",
            "sh",
            "-c",
            "git fetch -q origin && touch fetched && sleep 60",
        ]);
    let _home = first.home();
    let mut child = first.spawn();
    let fetched = eventually(std::time::Duration::from_secs(30), || {
        clone.join("fetched").exists()
    });
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    assert!(fetched, "the first run did not fetch");
    {
        let forge_state = app.lock().unwrap();
        assert_eq!(forge_state.minted.len(), 1);
        assert!(!forge_state.minted[0].revoked, "revoked before the restart");
    }
    let out = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args(flags)
        .args(["--", "true"])
        .output();
    assert!(out.status.success(), "{}", both(&out));
    let forge_state = app.lock().unwrap();
    assert!(
        forge_state.minted.iter().all(|m| m.revoked),
        "left live after the restart\n{}",
        both(&out)
    );
}

/// SPEC H5: each repository's tokens are minted by its owner's installation
/// (`[gateway.app] installations`); an owner with none gets no token and its
/// push is refused naming the key. The App API is reached over https with
/// the test CA, and a read token near its expiry is minted again (the old
/// one revoked) before git gets it.
#[test]
fn tokens_come_from_each_owners_installation_and_are_minted_again_before_expiry() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    for owner in ["o", "p", "q"] {
        std::fs::create_dir_all(root.join(owner)).unwrap();
    }
    bare_repo(&root, "o/r.git");
    let (s, t) = (bare_repo(&root, "p/s.git"), bare_repo(&root, "q/t.git"));
    let soon = std::process::Command::new("sh")
        .args([
            "-c",
            "date -u -d @$(( $(date +%s) + 120 )) +%Y-%m-%dT%H:%M:%SZ",
        ])
        .output()
        .unwrap();
    let app = std::sync::Arc::new(std::sync::Mutex::new(crate::net::AppForge {
        expires_at: Some(text(&soon.stdout).trim().to_owned()),
        ..crate::net::AppForge::default()
    }));
    let (ca, tls) = crate::net::test_ca(tmp.path());
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        app: Some(app.clone()),
        tls: Some(tls),
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let ca_text = ca.to_str().unwrap();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("https://127.0.0.1:{port}/o/r.git");
    crate::net::git_env(
        tmp.path(),
        &["-c", &header, "clone", "-q", &url, "clone"],
        &[("GIT_SSL_CAINFO", ca_text)],
    );
    let clone = tmp.path().join("clone");
    let inside = format!("https://forge.test:{port}/o/r.git");
    git(&clone, &["remote", "set-url", "origin", &inside]);
    std::fs::copy(&ca, clone.join("ca.pem")).unwrap();
    let key = app_key(tmp.path(), false);
    let rules = tmp.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let config = format!(
        "[policy]\nguardrails = \"{}\"\n\n[gateway]\nupstream = \"https://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\", \"p/s.git\", \"q/t.git\"]\nread_url = \"https://forge.test:{port}\"\n\
         ca_file = \"{}\"\n\n[gateway.app]\napp_id = \"12345\"\n\
         installations = {{ o = \"678\", p = \"910\" }}\n\
         private_key_file = \"{}\"\napi_url = \"https://127.0.0.1:{port}\"\n",
        rules.display(),
        ca.display(),
        key.display()
    );
    let gw = "http://cc-server.internal/git";
    let script = format!(
        "export GIT_TERMINAL_PROMPT=0 GIT_SSL_CAINFO=$PWD/ca.pem\n\
         git fetch -q origin; echo fetch=$?\n\
         git fetch -q origin; echo again=$?\n\
         git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m agent-work\n\
         git push -q {gw}/o/r.git HEAD:refs/heads/agent/o; echo o=$?\n\
         git push -q {gw}/p/s.git HEAD:refs/heads/agent/p; echo p=$?\n\
         git push -q {gw}/q/t.git HEAD:refs/heads/agent/q; echo q=$?\n"
    );
    let out = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args(["run", "--backend", "bwrap", "--allow-domain", "forge.test"])
        .args([
            "--allow-private",
            "forge.test",
            "--resolve",
            "forge.test:127.0.0.1",
        ])
        .args(["--", "sh", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    for want in ["fetch=0", "again=0", "o=0", "p=0", "q=1"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    assert!(branches(&s).contains("refs/heads/agent/p"));
    assert!(!branches(&t).contains("agent/q"));
    assert!(
        text(&out.stderr).contains("to [gateway.app] installations"),
        "{}",
        both(&out)
    );
    let all_revoked = eventually(std::time::Duration::from_secs(5), || {
        app.lock().unwrap().minted.iter().all(|m| m.revoked)
    });
    let forge_state = app.lock().unwrap();
    let minted: Vec<(String, String, serde_json::Value)> = forge_state
        .minted
        .iter()
        .zip(&forge_state.installations)
        .map(|(m, i)| (i.clone(), m.permissions.to_string(), m.repositories.clone()))
        .collect();
    assert!(all_revoked, "{minted:?}");
    let read = r#"{"contents":"read","pull_requests":"write"}"#;
    let write = r#"{"contents":"write"}"#;
    let count = |installation: &str, p: &str| {
        minted
            .iter()
            .filter(|(i, m, _)| i == installation && m == p)
            .count()
    };
    // Each fetch found the read token within ten minutes of its expiry,
    // and minted another.
    assert!(count("678", read) >= 2, "{minted:?}");
    assert_eq!(count("678", write), 2, "{minted:?}");
    assert_eq!(count("910", write), 2, "{minted:?}");
    assert_eq!(minted.len(), count("678", read) + 4, "{minted:?}");
    assert!(
        minted
            .iter()
            .filter(|(i, _, _)| i == "910")
            .all(|(_, _, r)| *r == serde_json::json!(["s"])),
        "{minted:?}"
    );
}

/// SPEC H8: a conversation's pushes go to the repositories its workspace
/// links — the remotes of the registered checkouts, read from the user's
/// checkout, never the agent's clone — with `[gateway] repositories` empty;
/// another repository is refused in git's words, naming what changes it.
#[test]
fn a_conversation_pushes_to_its_workspaces_repositories_only() {
    require_bwrap!();
    let _turn = crate::workspaces::serial();
    let Some(volume) = crate::workspaces::volume("xfs") else {
        return;
    };
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    for owner in ["o", "p"] {
        std::fs::create_dir_all(root.join(owner)).unwrap();
    }
    let bare = bare_repo(&root, "o/r.git");
    let other = bare_repo(&root, "p/s.git");
    let forge = GitHttpServer::start_requiring(&root, Some(AUTHORIZATION.to_owned()));
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    let checkout = volume.mount.join("checkout");
    git(
        &volume.mount,
        &["-c", &header, "clone", "-q", &url, "checkout"],
    );
    git(
        &checkout,
        &["remote", "set-url", "origin", "https://github.com/o/r.git"],
    );
    let (state, data) = (volume.mount.join("state"), volume.mount.join("data"));
    let (rules, token) = (tmp.path().join("rules.toml"), tmp.path().join("token"));
    std::fs::write(&rules, RULES).unwrap();
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[workspaces]\nstate_dir = \"{}\"\ndata_dir = \"{}\"\n\n[policy]\nguardrails = \"{}\"\n\n\
         [gateway]\nupstream = \"http://127.0.0.1:{port}\"\ntoken_file = \"{}\"\n",
        state.display(),
        data.display(),
        rules.display(),
        token.display()
    );
    let cli = || {
        CcServer::new(&plugins)
            .env_remove("XDG_DATA_HOME")
            .config(&config)
    };
    let added = cli()
        .args(["workspace", "add", "w", "--repo"])
        .arg(&checkout)
        .output();
    assert!(added.status.success(), "{}", both(&added));
    let made = cli()
        .args(["conversation", "new", "--workspace", "w"])
        .output();
    assert!(made.status.success(), "{}", both(&made));
    let id = text(&made.stdout).trim().to_owned();
    let clone = data.join("conversations").join(&id).join("repos/checkout");
    let script = format!(
        "export GIT_TERMINAL_PROMPT=0\ncd {}\n\
         git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m agent-work\n\
         git push -q https://github.com/o/r.git HEAD:refs/heads/agent/linked; echo linked=$?\n\
         git push -q https://github.com/p/s.git HEAD:refs/heads/agent/other; echo other=$?\n",
        clone.display()
    );
    let out = cli()
        .args([
            "run",
            "--conversation",
            &id,
            "--agent",
            "a",
            "--backend",
            "bwrap",
        ])
        .args([
            "--resolve",
            "github.com:127.0.0.1",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .output();
    let stdout = text(&out.stdout);
    for want in ["linked=0", "other=1"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    assert!(branches(&bare).contains("refs/heads/agent/linked"));
    assert!(!branches(&other).contains("agent/other"));
    assert!(
        text(&out.stderr).contains(
            "p/s.git is not this session's repository nor linked to its workspace (register its checkout"
        ),
        "{}",
        both(&out)
    );
}

/// SPEC H4, H8: a ref the rules send to the owner (a tag) waits for the
/// answer: `y` at `run --ask`'s terminal lets the tag through, `n` refuses
/// it in git's own words and nothing arrives.
#[test]
fn a_prompted_push_waits_for_the_owner() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    let forge = GitHttpServer::start_requiring(&root, Some(AUTHORIZATION.to_owned()));
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(tmp.path(), &["-c", &header, "clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[gateway]\nupstream = \"http://127.0.0.1:{port}\"\nrepositories = [\"o/r.git\"]\n\
         token_file = \"{}\"\n",
        token.display()
    );
    let gw = "http://cc-server.internal/git/o/r.git";
    for (tag, answer) in [("v1", b"y\n"), ("v2", b"n\n")] {
        let script = format!("git push -q {gw} HEAD:refs/tags/{tag}; echo push=$?");
        let (out, shown) = CcServer::new(&plugins)
            .current_dir(&clone)
            .config(&config)
            .args([
                "run",
                "--backend",
                "bwrap",
                "--ask",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .output_on_terminal(b"", "[y/N]", answer);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            shown.contains(&format!("push the tag {tag}")),
            "the question names the ref:\n{shown}\n{stderr}"
        );
        let tags = branches(&bare);
        if tag == "v1" {
            assert!(stdout.contains("push=0"), "{stdout}\n{stderr}\n{shown}");
            assert!(tags.contains("refs/tags/v1"), "{tags}");
        } else {
            assert!(stdout.contains("push=1"), "{stdout}\n{stderr}\n{shown}");
            assert!(
                stderr.contains("[remote rejected] HEAD -> v2 (cc_server policy: push the tag v2:"),
                "{stderr}"
            );
            assert!(!tags.contains("refs/tags/v2"), "{tags}");
        }
    }
}

/// SPEC H8, E6: on `none` the gateway is reached the same way, through the
/// session's credentialed loopback proxy (advisory there: nothing stops a
/// command on the host going around it).
#[test]
fn on_none_pushes_meet_the_gateway_through_the_credentialed_proxy() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    let forge = GitHttpServer::start_requiring(&root, Some(AUTHORIZATION.to_owned()));
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(tmp.path(), &["-c", &header, "clone", "-q", &url, "clone"]);
    let clone = tmp.path().join("clone");
    let (rules, token) = (tmp.path().join("rules.toml"), tmp.path().join("token"));
    std::fs::write(&rules, RULES).unwrap();
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[policy]\nguardrails = \"{}\"\n\n[gateway]\nupstream = \"http://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\"]\ntoken_file = \"{}\"\n",
        rules.display(),
        token.display()
    );
    let script = "git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m on-none\n\
                  git push -q https://github.com/o/r.git HEAD:refs/heads/agent/none; echo agent=$?\n\
                  git push -q https://github.com/o/r.git HEAD:refs/heads/main; echo main=$?\n";
    let out = CcServer::new(&plugins)
        .current_dir(&clone)
        .config(&config)
        .args([
            "run",
            "--backend",
            "none",
            "--resolve",
            "github.com:127.0.0.1",
        ])
        .args(["--", "sh", "-c", script])
        .output();
    let stdout = text(&out.stdout);
    for want in ["agent=0", "main=1"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    assert!(
        text(&out.stderr).contains("[remote rejected] HEAD -> main"),
        "{}",
        both(&out)
    );
    let refs = branches(&bare);
    assert!(refs.contains("refs/heads/agent/none"), "{refs}");
}

/// A stand-in forge over plain HTTP that logs every request, a clone of
/// its `o/r.git`, and a config whose guardrails are [`RULES`].
struct LoggedForge {
    _forge: GitHttpServer,
    bare: PathBuf,
    clone: PathBuf,
    config: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn logged_forge(dir: &Path) -> LoggedForge {
    let root = dir.join("forge");
    std::fs::create_dir_all(root.join("o")).unwrap();
    let bare = bare_repo(&root, "o/r.git");
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let scopes = crate::net::Scopes {
        write: Some(AUTHORIZATION.to_owned()),
        log: Some(log.clone()),
        ..crate::net::Scopes::default()
    };
    let forge = GitHttpServer::start_with_scopes(&root, scopes);
    let port = forge.port();
    let header = format!("http.extraHeader=Authorization: {AUTHORIZATION}");
    let url = format!("http://127.0.0.1:{port}/o/r.git");
    git(dir, &["-c", &header, "clone", "-q", &url, "clone"]);
    let (rules, token) = (dir.join("rules.toml"), dir.join("token"));
    std::fs::write(&rules, RULES).unwrap();
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "[policy]\nguardrails = \"{}\"\n\n[gateway]\nupstream = \"http://127.0.0.1:{port}\"\n\
         repositories = [\"o/r.git\"]\ntoken_file = \"{}\"\n",
        rules.display(),
        token.display()
    );
    LoggedForge {
        _forge: forge,
        bare,
        clone: dir.join("clone"),
        config,
        log,
    }
}

/// SPEC H8: a force push is told apart from a fast-forward by ancestry in
/// the server's own mirror (never in the agent's clone) and judged as its
/// own class: here the rules allow `agent/*`, the force push asks the
/// owner, and with none it is refused.
#[test]
fn a_force_push_is_found_in_the_mirror_and_judged_as_its_class() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let LoggedForge {
        _forge,
        bare,
        clone,
        config,
        log,
    } = logged_forge(tmp.path());
    let gw = "http://cc-server.internal/git/o/r.git";
    let commit = "git -c user.name=a -c user.email=a@example.com commit -q --allow-empty";
    // `agent/k` is moved twice to commits the forge has (the pack is
    // empty): the first asks the mirror after a fetch, the second finds
    // the answer in the mirror as it is.
    let script = format!(
        "{commit} -m one; git push -q {gw} HEAD:refs/heads/agent/f; echo first=$?\n\
         git push -q {gw} HEAD~2:refs/heads/agent/k HEAD~1:refs/heads/agent/l; echo known=$?\n\
         git push -q {gw} HEAD~1:refs/heads/agent/k; echo k1=$?\n\
         git push -q {gw} HEAD:refs/heads/agent/l; echo k2=$?\n\
         echo fetched\n\
         {commit} -m two; git push -q {gw} HEAD:refs/heads/agent/f; echo ff=$?\n\
         {commit} --amend -m two-amended; git push -q --force {gw} HEAD:refs/heads/agent/f; echo force=$?\n"
    );
    let out = run_in(&plugins, &clone, &config, &script);
    let stdout = text(&out.stdout);
    for want in ["first=0", "known=0", "k1=0", "k2=0", "ff=0", "force=1"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    assert!(
        text(&out.stderr)
            .contains("[remote rejected] HEAD -> agent/f (cc_server policy: force-push to agent/f"),
        "{}",
        both(&out)
    );
    let tip = text(&git(&bare, &["log", "-1", "--format=%s", "agent/f"]).stdout);
    assert_eq!(tip.trim(), "two", "the force push landed");
    // The mirror was fetched for the first move of `agent/k` and for the
    // force push; the second known move and the fast-forward needed none.
    let log = log.lock().unwrap();
    let fetches = log
        .iter()
        .filter(|l| l.starts_with("GET") && l.contains("service=git-upload-pack"))
        .count();
    assert_eq!(fetches, 3, "{log:?}");
}

/// SPEC H8: a push larger than git's `http.postBuffer` (1 MiB) is preceded
/// by a probe (a body of one flush); the gateway answers it as `git
/// http-backend` does and the push arrives — a new branch streamed, and an
/// update of it, whose fast-forward is read from the pushed pack itself:
/// the mirror is never fetched (no upload-pack request reaches the forge).
#[test]
fn a_push_over_the_post_buffer_arrives_and_its_update_needs_no_fetch() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let LoggedForge {
        _forge,
        bare,
        clone,
        config,
        log,
    } = logged_forge(tmp.path());
    log.lock().unwrap().clear();
    let gw = "http://cc-server.internal/git/o/r.git";
    let commit = "git -c user.name=a -c user.email=a@example.com commit -q";
    let script = format!(
        "head -c 3145728 /dev/urandom > big1 && git add big1 && {commit} -m big1\n\
         git push -q {gw} HEAD:refs/heads/agent/big; echo create=$?\n\
         head -c 3145728 /dev/urandom > big2 && git add big2 && {commit} -m big2\n\
         git push -q {gw} HEAD:refs/heads/agent/big; echo update=$?\n"
    );
    let out = run_in(&plugins, &clone, &config, &script);
    let stdout = text(&out.stdout);
    for want in ["create=0", "update=0"] {
        assert!(
            stdout.lines().any(|l| l == want),
            "expected {want}\n{}",
            both(&out)
        );
    }
    let tip = text(&git(&bare, &["log", "-1", "--format=%s", "agent/big"]).stdout);
    assert_eq!(tip.trim(), "big2", "{}", both(&out));
    let size = text(&git(&bare, &["cat-file", "-s", "agent/big:big2"]).stdout);
    assert_eq!(size.trim(), "3145728");
    let log = log.lock().unwrap();
    // Each push went through as two receive-pack requests: the probe is
    // answered by the gateway, only the push itself reaches the forge.
    let pushes = log
        .iter()
        .filter(|l| l.starts_with("POST") && l.contains("git-receive-pack"))
        .count();
    assert_eq!(pushes, 2, "{log:?}");
    assert!(
        !log.iter().any(|l| l.contains("upload-pack")),
        "the mirror was fetched: {log:?}"
    );
}

/// SPEC H5, H8: the handle says what the gateway does for the sandbox —
/// where pushes go, which tokens are issued, that ssh to the forge is
/// refused, and that on `none` it is advisory.
#[test]
fn the_handle_says_what_the_gateway_holds() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let config = "[gateway]\nupstream = \"http://127.0.0.1:9\"\nrepositories = [\"o/r.git\"]\n";
    let server = Server::start_with(CcServer::new(&plugins).config(config));
    let work = tmp.path().to_str().unwrap();
    let body = serde_json::json!({"guestWorkdir": work});
    let created = server.call("POST", "/v1/sandboxes", Some(&body.to_string()));
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let gateway = &created.json()["details"]["pushGateway"];
    assert_eq!(gateway["upstream"], "http://127.0.0.1:9", "{gateway}");
    assert_eq!(gateway["sshToForge"], "refused", "{gateway}");
    assert!(
        gateway["tokens"].as_str().unwrap().starts_with("none"),
        "{gateway}"
    );
    assert!(
        gateway["holds"].as_str().unwrap().contains("advisory"),
        "{gateway}"
    );
}
