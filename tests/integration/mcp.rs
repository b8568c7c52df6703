//! The agent tools over MCP end to end (SPEC H2, H3, H4, H12, B10; threat
//! model T35, T36), with a real client nobody here wrote — the official
//! Python SDK — over stdio (`cc_server mcp`) and streamable HTTP (`/mcp`).
//! Every escape is aimed at temp dirs made here; after each refusal the
//! host is looked at (the file outside unread and unchanged, no hook
//! planted, `git status` running nothing).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use crate::mcp_util::*;
use crate::util::*;

fn stdio<'a>(plugins: &Plugins, args: &'a [&'a str], cwd: &'a Path) -> Transport<'a> {
    Transport::Stdio {
        command: CcServer::new(plugins),
        args,
        cwd,
    }
}

fn tools(line: &Value) -> Vec<String> {
    ok(line)["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

/// H3: chat lists every tool; a read-only mode lists no mutating tool, and
/// calling one there is an unknown tool (an MCP error), not a refusal —
/// over stdio and over HTTP, with the client negotiating either way.
#[test]
fn the_tool_list_follows_the_mode_over_stdio_and_http() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "kept\n").unwrap();
    let all = [
        "apply_patch",
        "edit",
        "exec",
        "find",
        "read",
        "search",
        "search_files",
        "write",
    ];
    let reading = ["exec", "find", "read", "search", "search_files"];
    let ops = json!([
        {"op": "list_tools"},
        call("write", json!({"path": "a.txt", "content": "changed\n"})),
        call("read", json!({"path": "a.txt"})),
    ]);
    for (args, want) in [
        (&["--backend", "bwrap"][..], &all[..]),
        (&["--backend", "bwrap", "--mode", "plan"][..], &reading[..]),
        (
            &["--backend", "bwrap", "--mode", "review"][..],
            &reading[..],
        ),
    ] {
        for mode in ["auto", "legacy"] {
            let lines = run_ops(&python, stdio(&plugins, args, work.path()), mode, &ops);
            assert_eq!(tools(&lines[0]), want, "{args:?} {mode}");
            if want.len() == reading.len() {
                assert_eq!(lines[1]["ok"], false, "{}", lines[1]);
                assert!(
                    lines[1]["error"]
                        .as_str()
                        .unwrap()
                        .contains("tool not found"),
                    "{}",
                    lines[1]
                );
                assert_eq!(done(&lines[2])["content"], "kept\n");
            } else {
                done(&lines[1]);
                assert_eq!(done(&lines[2])["content"], "changed\n");
                std::fs::write(work.path().join("a.txt"), "kept\n").unwrap();
            }
        }
    }
    // The same over HTTP, per the mode of the sandbox the credential opens.
    let server = Server::start(&plugins);
    for (id, mode, want) in [("c", "chat", &all[..]), ("p", "plan", &reading[..])] {
        let credential = create_with_credential(&server, id, work.path(), json!({"mode": mode}));
        // Version negotiation both ways: `server/discover`, and the legacy
        // `initialize` handshake.
        for negotiation in ["auto", "legacy"] {
            let http = Transport::Http {
                server: &server,
                credential: Some(&credential),
            };
            let lines = run_ops(&python, http, negotiation, &ops);
            assert_eq!(tools(&lines[0]), want, "{mode} {negotiation}");
            if mode == "plan" {
                assert!(
                    lines[1]["error"]
                        .as_str()
                        .unwrap()
                        .contains("tool not found")
                );
            }
        }
    }
    assert_eq!(
        std::fs::read_to_string(work.path().join("a.txt")).unwrap(),
        "changed\n",
        "the chat sandbox's write over HTTP"
    );
}

/// H2: write, read, edit and apply_patch round trips; an edit that is not
/// unique gives the count; an apply_patch of three files with one bad hunk
/// changes nothing, and the good one changes all three; a binary file
/// reads back byte for byte, paged.
#[test]
fn file_tools_round_trip_and_a_patch_is_all_or_nothing() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("one.txt"), "alpha\nbeta\n").unwrap();
    std::fs::write(w.join("two.txt"), "gamma\ndelta\n").unwrap();
    std::fs::write(w.join("gone.txt"), "old\n").unwrap();
    let binary: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    std::fs::write(w.join("blob.bin"), &binary).unwrap();
    let bad = "*** Begin Patch\n*** Update File: one.txt\n@@\n-alpha\n+ALPHA\n\
               *** Update File: two.txt\n@@\n-not in the file\n+x\n\
               *** Add File: new/three.txt\n+three\n*** End Patch\n";
    let good = "*** Begin Patch\n*** Update File: one.txt\n@@\n-alpha\n+ALPHA\n\
                *** Update File: two.txt\n*** Move to: moved.txt\n@@\n gamma\n-delta\n+DELTA\n\
                *** Add File: new/three.txt\n+three\n*** Delete File: gone.txt\n*** End Patch\n";
    let ops = json!([
        call(
            "write",
            json!({"path": "src/main.rs", "content": "fn main() {}\nfn main() {}\n"})
        ),
        call("read", json!({"path": "src/main.rs"})),
        call(
            "edit",
            json!({"path": "src/main.rs", "old_string": "fn main() {}", "new_string": "x"})
        ),
        call(
            "edit",
            json!({"path": "src/main.rs", "old_string": "fn main() {}", "new_string": "fn m() {}", "replace_all": true})
        ),
        call("apply_patch", json!({"patch": bad})),
        {"op": "wait_for_file", "path": w.join("go").to_str().unwrap(), "secs": 60},
        call("apply_patch", json!({"patch": good})),
        call("read", json!({"path": "blob.bin", "limit": 2048})),
        call("read", json!({"path": "blob.bin", "offset": 2048})),
        call(
            "read",
            json!({"path": format!("{}/one.txt", w.display()), "offset": 2, "limit": 1})
        ),
    ]);
    // The bad patch's effect is looked at before the good one runs: the
    // client waits for `go`, which the checker makes.
    let checked = std::thread::scope(|scope| {
        let checker = scope.spawn(|| {
            let bad_seen = eventually(std::time::Duration::from_secs(60), || {
                std::fs::read_to_string(w.join("src/main.rs")).is_ok_and(|t| t.contains("fn m()"))
            });
            // The bad patch is the call after the replace_all edit.
            std::thread::sleep(std::time::Duration::from_secs(2));
            let state = (
                std::fs::read_to_string(w.join("one.txt")).unwrap(),
                w.join("new").exists(),
            );
            std::fs::write(w.join("go"), "").unwrap();
            (bad_seen, state)
        });
        let lines = run_ops(
            &python,
            stdio(&plugins, &["--backend", "bwrap"], w),
            "auto",
            &ops,
        );
        (lines, checker.join().unwrap())
    });
    let (mut lines, (bad_seen, (one_after_bad, new_after_bad))) = checked;
    assert!(bad_seen);
    assert_eq!(ok(&lines.remove(5))["exists"], true);
    let wrote = done(&lines[0]);
    assert_eq!(wrote["created"], true);
    assert_eq!(wrote["guardrail"]["decision"], "allow");
    assert_eq!(wrote["guardrail"]["effects"][0]["class"], "write_file");
    assert_eq!(done(&lines[1])["content"], "fn main() {}\nfn main() {}\n");
    let not_unique = failed(&lines[2]);
    assert_eq!(not_unique["occurrences"], 2, "{not_unique}");
    assert_eq!(done(&lines[3])["replacements"], 2);
    assert_eq!(
        std::fs::read_to_string(w.join("src/main.rs")).unwrap(),
        "fn m() {}\nfn m() {}\n"
    );
    // The bad hunk refused the whole patch: nothing changed.
    let refused = failed(&lines[4]);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("two.txt: hunk 1 does not fit"),
        "{refused}"
    );
    assert_eq!(one_after_bad, "alpha\nbeta\n");
    assert!(!new_after_bad);
    // The good one: all of it.
    let patched = done(&lines[5]);
    assert_eq!(patched["files"].as_array().unwrap().len(), 4, "{patched}");
    assert_eq!(
        std::fs::read_to_string(w.join("one.txt")).unwrap(),
        "ALPHA\nbeta\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("moved.txt")).unwrap(),
        "gamma\nDELTA\n"
    );
    assert!(!w.join("two.txt").exists() && !w.join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(w.join("new/three.txt")).unwrap(),
        "three\n"
    );
    // Binary-safe, paged.
    let first = done(&lines[6]);
    assert_eq!(first["encoding"], "base64");
    assert_eq!(first["next_offset"], 2048);
    let second = done(&lines[7]);
    assert!(second.get("next_offset").is_none(), "{second}");
    let decoded = [first, second]
        .iter()
        .flat_map(|page| base64_decode(page["content"].as_str().unwrap()))
        .collect::<Vec<u8>>();
    assert_eq!(decoded, binary);
    // An absolute path inside a bind, a page of lines.
    let page = done(&lines[8]);
    assert_eq!(
        (page["content"].as_str(), page["offset"].as_u64()),
        (Some("beta\n"), Some(2))
    );
}

/// `base64 -d` of coreutils: a decoder nobody here wrote.
fn base64_decode(text: &str) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = Command::new("base64")
        .arg("-d")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap().stdout
}

/// H2, T35: every escape form is refused with its rule, and the host is
/// unchanged — `..`, an absolute path outside, a symlink out, a hard link
/// to a file outside, `/proc/self/...`; writes of a secret, a git hook and
/// a shell rc file are refused naming the rule, and `git status` on the
/// host afterwards runs no hook; a directory flipped to a symlink out while
/// searches walk it never leads a search outside.
#[test]
fn escapes_are_refused_with_the_rule_and_the_host_is_unchanged() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "OUTSIDE-SECRET-1234\n").unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::os::unix::fs::symlink(outside.path(), w.join("link-out")).unwrap();
    std::fs::hard_link(&secret, w.join("hard.txt")).unwrap();
    git(w, &["init", "-q"]);
    // The sandbox's home: $HOME is the client's private home, not here; an
    // rc file at the top of the writable root is what the globs guard.
    let tries = [
        (
            "read",
            json!({"path": "../x/secret.txt"}),
            "escapes the root",
        ),
        (
            "read",
            json!({"path": format!("{}/../{}/secret.txt", w.display(), outside.path().file_name().unwrap().to_string_lossy())}),
            "escapes the root",
        ),
        (
            "read",
            json!({"path": secret.to_str().unwrap()}),
            "outside every root",
        ),
        (
            "read",
            json!({"path": "link-out/secret.txt"}),
            "escapes the root",
        ),
        ("read", json!({"path": "hard.txt"}), "hard-linked file"),
        (
            "read",
            json!({"path": "/proc/self/root/etc/passwd"}),
            "outside every root",
        ),
        (
            "write",
            json!({"path": "link-out/planted.txt", "content": "x"}),
            "escapes the root",
        ),
        (
            "write",
            json!({"path": ".env", "content": "TOKEN=x"}),
            "**/.env",
        ),
        (
            "write",
            json!({"path": "deploy.pem", "content": "x"}),
            "**/*.pem",
        ),
        (
            "write",
            json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\ntouch HOOK-RAN\n"}),
            "hooks",
        ),
        (
            "write",
            json!({"path": ".bashrc", "content": "touch RC-RAN\n"}),
            "bashrc",
        ),
        (
            "edit",
            json!({"path": ".git/config", "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = touch FSMON-RAN"}),
            "config",
        ),
        (
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Add File: ok.txt\n+fine\n*** Add File: .git/hooks/post-checkout\n+#!/bin/sh\n*** End Patch"}),
            "hooks",
        ),
        (
            "search",
            json!({"pattern": "OUTSIDE", "path": "link-out"}),
            "escapes the root",
        ),
    ];
    let ops: Vec<Value> = tries
        .iter()
        .map(|(tool, args, _)| call(tool, args.clone()))
        .collect();
    let lines = run_ops(
        &python,
        stdio(&plugins, &["--backend", "bwrap"], w),
        "auto",
        &json!(ops),
    );
    for ((tool, args, rule), line) in tries.iter().zip(&lines) {
        let refused = failed(line);
        let said = refused.to_string();
        assert!(
            said.contains(rule),
            "{tool} {args}: expected the rule {rule:?}: {said}"
        );
        assert!(
            !said.contains("OUTSIDE-SECRET"),
            "{tool} {args} read outside: {said}"
        );
        if *tool != "read" && *tool != "search" {
            assert_eq!(refused["decision"], "deny", "{said}");
        }
    }
    // A protected path (a registered checkout, SPEC F3, H11) is never
    // changed, as in the sandbox.
    std::fs::create_dir(w.join("checkout")).unwrap();
    std::fs::write(w.join("checkout/main.rs"), "original\n").unwrap();
    let protected = run_ops(
        &python,
        stdio(
            &plugins,
            &["--backend", "bwrap", "--protect", "checkout"],
            w,
        ),
        "auto",
        &json!([
            call(
                "write",
                json!({"path": "checkout/main.rs", "content": "changed"})
            ),
            call(
                "write",
                json!({"path": "checkout/new.rs", "content": "new"})
            ),
            call("read", json!({"path": "checkout/main.rs"})),
        ]),
    );
    for line in &protected[..2] {
        assert!(failed(line)["rule"] == "protected path", "{line}");
    }
    assert_eq!(done(&protected[2])["content"], "original\n");
    assert!(!w.join("checkout/new.rs").exists());
    // A write to the hard link replaces the name in the workspace (a new
    // file renamed over it): the file outside keeps its content.
    let replaced = run_ops(
        &python,
        stdio(&plugins, &["--backend", "bwrap"], w),
        "auto",
        &json!([call(
            "write",
            json!({"path": "hard.txt", "content": "overwritten"})
        )]),
    );
    done(&replaced[0]);
    assert_eq!(
        std::fs::read_to_string(w.join("hard.txt")).unwrap(),
        "overwritten"
    );
    // Nothing outside changed, nothing planted.
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "OUTSIDE-SECRET-1234\n"
    );
    assert!(!outside.path().join("planted.txt").exists());
    for planted in [
        ".env",
        "deploy.pem",
        ".bashrc",
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        "ok.txt",
    ] {
        assert!(!w.join(planted).exists(), "{planted} was written");
    }
    assert!(
        !std::fs::read_to_string(w.join(".git/config"))
            .unwrap()
            .contains("fsmonitor")
    );
    // The host's next git command runs nothing the agent wrote.
    std::fs::write(w.join("tracked.txt"), "t\n").unwrap();
    git(w, &["add", "tracked.txt"]);
    git(
        w,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "x",
        ],
    );
    git(w, &["status", "--short"]);
    for marker in ["HOOK-RAN", "RC-RAN", "FSMON-RAN"] {
        assert!(
            !w.join(marker).exists(),
            "{marker}: code the agent wrote ran on the host"
        );
    }

    // The flip, concurrently: a directory swapped for a symlink out while
    // searches and reads walk it.
    let flip = w.join("flip");
    std::fs::create_dir(&flip).unwrap();
    for i in 0..50 {
        std::fs::write(flip.join(format!("f{i}.txt")), "INSIDE\n").unwrap();
    }
    std::fs::write(outside.path().join("f0.txt"), "OUTSIDE-SECRET-1234\n").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, flip, out) = (
            Arc::clone(&stop),
            flip.clone(),
            outside.path().to_path_buf(),
        );
        let parked = w.join("parked");
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let _ = std::fs::rename(&flip, &parked);
                let _ = std::os::unix::fs::symlink(&out, &flip);
                let _ = std::fs::remove_file(&flip);
                let _ = std::fs::rename(&parked, &flip);
                flips += 1;
            }
            flips
        })
    };
    let racing: Vec<Value> = (0..40)
        .flat_map(|_| {
            [
                call(
                    "search",
                    json!({"pattern": "SECRET|INSIDE", "path": "flip", "max_results": 10000}),
                ),
                call("read", json!({"path": "flip/f0.txt"})),
            ]
        })
        .collect();
    let lines = run_ops(
        &python,
        stdio(&plugins, &["--backend", "bwrap"], w),
        "auto",
        &json!(racing),
    );
    stop.store(true, Ordering::SeqCst);
    let flips = flipper.join().unwrap();
    assert!(flips > 10, "the directory flipped {flips} times only");
    for line in &lines {
        assert!(
            !line.to_string().contains("OUTSIDE-SECRET"),
            "a call read outside during the flip: {line}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "OUTSIDE-SECRET-1234\n"
    );
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "init.templateDir="])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
}

/// H4, H12: a guardrail that asks before every write sends the prompt to
/// the server's owner, whose answer decides; with no owner connected it is
/// a deny, at once, and the result says why. Over stdio there is no owner:
/// the same prompt is a deny.
#[test]
fn a_file_tool_prompt_goes_to_the_owner_and_none_means_deny() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let rules = "[[rule]]\nclass = \"write_file\"\ndecision = \"prompt\"\n";
    let command = CcServer::new(&plugins).config("[policy]\nguardrails = \"rules.toml\"\n");
    std::fs::write(command.home().path().join("rules.toml"), rules).unwrap();
    let server = Server::start_with(command);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let credential = create_with_credential(&server, "g", w, json!({}));
    let http = |ops: Value| {
        let transport = Transport::Http {
            server: &server,
            credential: Some(&credential),
        };
        run_ops(&python, transport, "auto", &ops)
    };
    // No owner: denied at once, saying why.
    let lines = http(json!([call(
        "write",
        json!({"path": "a.txt", "content": "a"})
    )]));
    let refused = failed(&lines[0]);
    assert!(
        refused["error"].as_str().unwrap().contains("no owner"),
        "{refused}"
    );
    assert_eq!(refused["guardrail"]["decision"], "prompt", "{refused}");
    assert!(!w.join("a.txt").exists());
    // An owner allows one and denies the next.
    let mut owner = owner(&server);
    let (addr, token) = (server.addr, credential.clone());
    let python2 = python.clone();
    let server_ref = &server;
    std::thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let transport = Transport::Http {
                server: server_ref,
                credential: Some(&token),
            };
            run_ops(
                &python2,
                transport,
                "auto",
                &json!([
                    call("write", json!({"path": "b.txt", "content": "b"})),
                    call("write", json!({"path": "c.txt", "content": "c"})),
                ]),
            )
        });
        for decision in ["allow", "deny"] {
            let prompt = read_until(&mut owner, "\"prompt\"").pop().unwrap();
            assert!(
                prompt["command"].as_str().unwrap().starts_with("write "),
                "{prompt}"
            );
            assert!(
                prompt["asking"][0]
                    .as_str()
                    .unwrap()
                    .starts_with("write a file in the workspace"),
                "{prompt}"
            );
            let id = prompt["id"].as_str().unwrap();
            let answered = http_with(
                addr,
                "POST",
                &format!("/v1/approvals/{id}"),
                Some(&json!({"decision": decision}).to_string()),
                Some(&server_ref.token),
                &[],
            );
            assert_eq!(answered.status, 204, "{}", text(&answered.body));
        }
        let lines = waiting.join().unwrap();
        let allowed = done(&lines[0]);
        assert_eq!(allowed["guardrail"]["decision"], "prompt");
        assert_eq!(allowed["guardrail"]["answer"], "allowed by the owner");
        let denied = failed(&lines[1]);
        assert!(
            denied["error"]
                .as_str()
                .unwrap()
                .contains("the owner denied it"),
            "{denied}"
        );
    });
    assert!(w.join("b.txt").exists() && !w.join("c.txt").exists());
    drop(owner);

    // Over stdio no owner is connected: deny, and why.
    let stdio_command = CcServer::new(&plugins).config("[policy]\nguardrails = \"rules.toml\"\n");
    std::fs::write(stdio_command.home().path().join("rules.toml"), rules).unwrap();
    let transport = Transport::Stdio {
        command: stdio_command,
        args: &["--backend", "bwrap"],
        cwd: w,
    };
    let lines = run_ops(
        &python,
        transport,
        "auto",
        &json!([call("write", json!({"path": "d.txt", "content": "d"}))]),
    );
    assert!(
        failed(&lines[0])["error"]
            .as_str()
            .unwrap()
            .contains("no owner")
    );
    assert!(!w.join("d.txt").exists());
}

/// H4, H12: an agent credential opens its own sandbox's exec and tools and
/// nothing else — not the approvals route, not another sandbox, not after
/// its sandbox is destroyed; `/mcp` without a credential, with the owner's
/// token, or with a browser's Origin is refused.
#[test]
fn an_agent_credential_opens_its_own_sandbox_only() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let server = Server::start(&plugins);
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_with_credential(&server, "a", one.path(), json!({}));
    let b = create_with_credential(&server, "b", two.path(), json!({}));
    assert_ne!(a, b);
    assert_ne!(a, server.token);
    let as_agent = |method: &str, path: &str, body: Option<&str>| {
        http(server.addr, method, path, body, Some(&a))
    };
    // Its own exec: yes.
    let own = as_agent(
        "POST",
        "/v1/sandboxes/a/execs",
        Some(r#"{"argv":["true"]}"#),
    );
    assert_eq!(own.status, 200, "{}", text(&own.body));
    // Owner routes and other sandboxes: 403 naming the rule.
    for (method, path, body, rule) in [
        (
            "GET",
            "/v1/approvals",
            None,
            "agent credential on an owner route",
        ),
        (
            "POST",
            "/v1/approvals/p-1",
            Some(r#"{"decision":"allow"}"#),
            "agent credential on an owner route",
        ),
        (
            "POST",
            "/v1/sandboxes",
            Some(r#"{"bindMounts":[]}"#),
            "agent credential on an owner route",
        ),
        (
            "DELETE",
            "/v1/sandboxes/a",
            None,
            "agent credential on an owner route",
        ),
        (
            "GET",
            "/v1/sandboxes",
            None,
            "agent credential on an owner route",
        ),
        (
            "POST",
            "/v1/sandboxes/b/execs",
            Some(r#"{"argv":["true"]}"#),
            "agent credential of another sandbox",
        ),
        (
            "GET",
            "/v1/sandboxes/b",
            None,
            "agent credential of another sandbox",
        ),
    ] {
        let refused = as_agent(method, path, body);
        assert_eq!(
            refused.status,
            403,
            "{method} {path}: {}",
            text(&refused.body)
        );
        assert_eq!(refused.json()["rule"], rule, "{method} {path}");
    }
    // Over MCP, the credential names the sandbox: a's tools see a's files.
    std::fs::write(one.path().join("mine.txt"), "a\n").unwrap();
    let lines = run_ops(
        &python,
        Transport::Http {
            server: &server,
            credential: Some(&a),
        },
        "auto",
        &json!([
            call("read", json!({"path": "mine.txt"})),
            call(
                "read",
                json!({"path": two.path().join("x").to_str().unwrap()})
            )
        ]),
    );
    assert_eq!(done(&lines[0])["content"], "a\n");
    assert!(failed(&lines[1]).to_string().contains("outside every root"));
    // No credential, the owner's token, a browser's Origin: refused.
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let headers = [("Accept", "application/json, text/event-stream")];
    let bare = http_with(server.addr, "POST", "/mcp", Some(body), None, &headers);
    assert_eq!(bare.status, 401, "{}", text(&bare.body));
    let owner = http_with(
        server.addr,
        "POST",
        "/mcp",
        Some(body),
        Some(&server.token),
        &headers,
    );
    assert_eq!(owner.status, 403, "{}", text(&owner.body));
    assert_eq!(owner.json()["rule"], "owner token names no sandbox");
    let origin = [("Origin", "https://evil.example"), headers[0]];
    let browser = http_with(server.addr, "POST", "/mcp", Some(body), Some(&a), &origin);
    assert_eq!(browser.status, 403, "{}", text(&browser.body));
    assert_eq!(browser.json()["rule"], "origin");
    let rebound = [("Host", "evil.example"), headers[0]];
    let foreign = http_with(server.addr, "POST", "/mcp", Some(body), Some(&a), &rebound);
    assert_eq!(foreign.status, 421, "{}", text(&foreign.body));
    // Destroyed: its credential is revoked.
    let destroyed = server.call("DELETE", "/v1/sandboxes/a", None);
    assert_eq!(destroyed.status, 200);
    let after = as_agent(
        "POST",
        "/v1/sandboxes/a/execs",
        Some(r#"{"argv":["true"]}"#),
    );
    assert_eq!(after.status, 401, "{}", text(&after.body));
    let mcp = http_with(server.addr, "POST", "/mcp", Some(body), Some(&a), &headers);
    assert_eq!(mcp.status, 401, "{}", text(&mcp.body));
}

/// B10, F10, F11: `exec` over MCP runs in the sandbox under the command
/// policy — output as progress and in the result, the exit code, a
/// violation in the result, a refusal naming the rule — and a cancelled
/// call ends its command.
#[test]
fn exec_over_mcp_reports_output_exit_violations_and_a_cancel_kills() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let marker = format!("30.{}", unique());
    let started = work.path().join("started");
    let ops = json!([
        call("exec", json!({"argv": ["sh", "-c", "echo out; echo err >&2; exit 7"]})),
        call("exec", json!({"argv": ["sh", "-c", "touch key.pem; echo done"]})),
        call("exec", json!({"argv": ["sudo", "-n", "true"]})),
        {"op": "call", "name": "exec", "args": {"argv": ["sh", "-c", format!("touch started; exec sleep {marker}")]}, "cancel_after": 3.0},
        call("exec", json!({"argv": ["cat"], "input": "from stdin"})),
        {"op": "read_resource", "uri": "sandbox://events"},
        {"op": "list_resources"},
        {"op": "read_resource", "uri": "sandbox://handle"},
    ]);
    let lines = run_ops(
        &python,
        stdio(&plugins, &["--backend", "bwrap"], work.path()),
        "auto",
        &ops,
    );
    let ran = done(&lines[0]);
    assert_eq!(ran["exit_code"], 7, "{ran}");
    assert_eq!(
        (ran["stdout"].as_str(), ran["stderr"].as_str()),
        (Some("out\n"), Some("err\n"))
    );
    assert_eq!(ran["backend"], "bwrap");
    let progress = ok(&lines[0])["progress"].to_string();
    assert!(
        progress.contains("stdout: out") && progress.contains("stderr: err"),
        "{progress}"
    );
    let guarded = done(&lines[1]);
    let violations = guarded["violations"].as_array().unwrap();
    assert!(
        violations
            .iter()
            .any(|v| v["target"].as_str().unwrap().ends_with("key.pem")),
        "{guarded}"
    );
    assert!(!work.path().join("key.pem").exists());
    let refused = failed(&lines[2]);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("privilege escalation is denied"),
        "{refused}"
    );
    assert_eq!(refused["policy"]["decision"], "deny");
    assert_eq!(ok(&lines[3])["cancelled"], true, "{}", lines[3]);
    assert!(started.exists(), "the cancelled command never started");
    assert!(
        eventually(std::time::Duration::from_secs(15), || processes_with(
            &marker
        )
        .is_empty()),
        "the cancelled call's command lives on: {:?}",
        processes_with(&marker)
    );
    assert_eq!(done(&lines[4])["stdout"], "from stdin");
    // Over HTTP, the client cancelling its call (closing its stream) kills
    // the command too, and the output arrived as progress before.
    let server = Server::start(&plugins);
    let credential = create_with_credential(&server, "x", work.path(), json!({}));
    let marker = format!("31.{}", unique());
    let cancelled = run_ops(
        &python,
        Transport::Http {
            server: &server,
            credential: Some(&credential),
        },
        "auto",
        &json!([{"op": "call", "name": "exec", "args": {"argv": ["sh", "-c", format!("echo go; exec sleep {marker}")]}, "cancel_after": 3.0}]),
    );
    assert_eq!(ok(&cancelled[0])["cancelled"], true, "{}", cancelled[0]);
    assert!(
        ok(&cancelled[0])["progress"]
            .to_string()
            .contains("stdout: go"),
        "{}",
        lines[0]
    );
    assert!(
        eventually(std::time::Duration::from_secs(15), || processes_with(
            &marker
        )
        .is_empty()),
        "the cancelled HTTP call's command lives on: {:?}",
        processes_with(&marker)
    );
    let events = ok(&lines[5])["contents"][0].as_str().unwrap().to_owned();
    assert!(
        events.contains("\"violation\"") && events.contains("\"refused\""),
        "{events}"
    );
    assert_eq!(
        ok(&lines[6])["resources"],
        json!(["sandbox://events", "sandbox://handle"])
    );
    let handle: Value =
        serde_json::from_str(ok(&lines[7])["contents"][0].as_str().unwrap()).unwrap();
    assert_eq!(handle["backendName"], "bwrap", "{handle}");
    assert_eq!(handle["details"]["mode"], "chat", "{handle}");
}

/// Malformed calls get MCP errors (a bad JSON-RPC body, an unknown tool)
/// or an error result naming the argument (a wrong type, an unknown field:
/// rmcp reports argument errors as tool errors the model can read), and
/// the server answers the next call.
#[test]
fn malformed_calls_get_errors_and_the_server_stays_up() {
    require_bwrap!();
    let python = require_mcp_client!();
    let plugins = Plugins::with_bwrap();
    let server = Server::start(&plugins);
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "a\n").unwrap();
    let credential = create_with_credential(&server, "m", work.path(), json!({}));
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-06-18"),
    ];
    for body in ["{not json", r#"{"jsonrpc":"2.0","id":1}"#, r#"[1,2]"#] {
        let response = http_with(
            server.addr,
            "POST",
            "/mcp",
            Some(body),
            Some(&credential),
            &headers,
        );
        assert!(
            (400..500).contains(&response.status) || text(&response.body).contains("\"error\""),
            "{body}: {} {}",
            response.status,
            text(&response.body)
        );
    }
    let lines = run_ops(
        &python,
        Transport::Http {
            server: &server,
            credential: Some(&credential),
        },
        "auto",
        &json!([
            call("no_such_tool", json!({})),
            call("read", json!({"path": 12})),
            call("read", json!({"path": "a.txt", "bogus": true})),
            call("read", json!({})),
            call("apply_patch", json!({"patch": "not a patch"})),
            call("read", json!({"path": "a.txt"})),
        ]),
    );
    assert_eq!(lines[0]["ok"], false);
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap()
            .contains("tool not found")
    );
    for (line, needle) in [
        (&lines[1], "invalid type"),
        (&lines[2], "bogus"),
        (&lines[3], "path"),
    ] {
        let said = line.to_string();
        assert!(said.contains(needle), "{said}");
        assert!(
            line["ok"] == false || line["result"]["is_error"] == true,
            "{said}"
        );
    }
    assert!(failed(&lines[4]).to_string().contains("Begin Patch"));
    assert_eq!(done(&lines[5])["content"], "a\n");
    let health = http(server.addr, "GET", "/healthz", None, None);
    assert_eq!(health.status, 200);
}
