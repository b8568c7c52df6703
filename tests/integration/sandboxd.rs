//! `cc_server sandboxd` against a client nobody here wrote: the official
//! agent-sandbox Python client (`k8s-agent-sandbox`), its command and
//! filesystem classes pointed at the daemon on loopback, and for the RPCs
//! it has no API for (Start, WriteStdin, SendSignal, ResizeTTY) the
//! ProcessService stubs its wheel ships (tests/sandboxd/client.py). Every
//! command goes through the one dispatch path (SPEC B10), every file
//! through the jail (H2) with the file tools' guardrails (H4); the
//! metadata and the handle say which boundary holds (B8, E6).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

/// A running `cc_server sandboxd` on free loopback ports; killed on drop.
pub struct Sandboxd {
    child: Child,
    pub rest: u16,
    pub grpc: u16,
    log: Arc<Mutex<String>>,
    _home: Arc<tempfile::TempDir>,
}

impl Sandboxd {
    /// Starts it over `root` with extra arguments after `sandboxd`; with
    /// `no_userns`, inside a user namespace of its own whose
    /// `max_user_namespaces` is 0, as in a pod that forbids them.
    pub fn start(plugins: &Plugins, root: &Path, args: &[&str], no_userns: bool) -> Self {
        let command = CcServer::new(plugins);
        let home = command.home();
        let (program, cc_args, envs) = command.parts();
        let mut c = if no_userns {
            let mut c = Command::new("unshare");
            c.args(["--user", "--map-root-user", "sh", "-c"])
                .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
                .arg("sh")
                .arg(&program);
            c
        } else {
            Command::new(&program)
        };
        c.args(&cc_args)
            .arg("sandboxd")
            .arg("--root-dir")
            .arg(root)
            .args([
                "--grpc-listen",
                "127.0.0.1:0",
                "--rest-listen",
                "127.0.0.1:0",
            ])
            .args(args);
        for (key, value) in envs {
            match value {
                Some(v) => c.env(key, v),
                None => c.env_remove(key),
            };
        }
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("sandboxd: gRPC on ").nth(1) {
                        let port = |s: &str| -> u16 {
                            s.rsplit(':').next().unwrap_or("").parse().unwrap_or(0)
                        };
                        let grpc = rest.split(',').next().unwrap_or("");
                        let rest_addr = rest
                            .split("REST on http://")
                            .nth(1)
                            .and_then(|r| r.split(',').next())
                            .unwrap_or("");
                        let _ = tx.send((port(grpc), port(rest_addr)));
                    }
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let Ok((grpc, rest)) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = child.kill();
            panic!("sandboxd did not start; log:\n{}", log.lock().unwrap());
        };
        Self {
            child,
            rest,
            grpc,
            log,
            _home: home,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Runs `ops` in one client (tests/sandboxd/client.py); one value each.
    pub fn ops(&self, python: &Path, ops: &Value) -> Vec<Value> {
        let script = repo_root().join("tests/sandboxd/client.py");
        let mut child = Command::new(python)
            .arg(&script)
            .arg(self.rest.to_string())
            .arg(self.grpc.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(ops.to_string().as_bytes())
            .unwrap();
        let out = wait_output(child, Duration::from_secs(300));
        let lines: Vec<Value> = text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines.len(),
            ops.as_array().map_or(0, Vec::len),
            "the client stopped early:\n{}\nserver log:\n{}",
            text(&out.stderr),
            self.log()
        );
        lines
    }
}

impl Drop for Sandboxd {
    fn drop(&mut self) {
        // SIGTERM: the daemon destroys its sandbox and exits.
        // SAFETY: a pid of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if !eventually(Duration::from_secs(10), || {
            self.child.try_wait().is_ok_and(|s| s.is_some())
        }) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The venv's Python when it has the official client; else skipped (a
/// failure under CI).
pub fn client_python() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("CC_TEST_MCP_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/opt/cc-test-venv/bin/python"));
    let ok = Command::new(&path)
        .args(["-c", "import k8s_agent_sandbox, grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(path);
    }
    skip_or_fail(format!(
        "{} cannot import k8s_agent_sandbox and grpc: `.ci/install-deps` makes /opt/cc-test-venv \
         with tests/mcp/requirements.txt",
        path.display()
    ));
    None
}

macro_rules! require_sandboxd_client {
    () => {
        match client_python() {
            Some(python) => python,
            None => return,
        }
    };
}

fn ok(v: &Value) -> &Value {
    assert_eq!(v["ok"], true, "{v}");
    v
}

/// The .proto here and the official client's generated descriptor agree
/// on every message, field number, type, oneof, enum value and RPC.
#[test]
fn the_proto_is_the_official_clients() {
    let python = require_sandboxd_client!();
    let out = Command::new(&python)
        .arg(repo_root().join("tests/sandboxd/wire_check.py"))
        .arg(repo_root().join("sandboxd/proto"))
        .output()
        .unwrap();
    assert!(
        out.status.success() && text(&out.stdout).trim() == "same",
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// B10, H2, H4: the official client runs a command and moves files; the
/// stubs stream output, write stdin, signal; the contract's codes come
/// back for what is refused, and the host is unchanged.
#[test]
fn the_official_client_runs_commands_and_moves_files() {
    require_bwrap!();
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_bwrap();
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    std::fs::create_dir(root.path().join("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &["--backend", "bwrap"], false);
    let out_rel = format!(
        "../{}",
        outside.path().file_name().unwrap().to_string_lossy()
    );
    let out_abs = outside.path().join("secret.txt").display().to_string();
    let ops = json!([
        {"op": "run", "command": "echo hi; echo err >&2; pwd; exit 3"},
        {"op": "run", "command": "pwd", "cwd": "sub"},
        {"op": "run", "command": "pwd", "cwd": out_rel},
        {"op": "write", "path": "dir/a.txt", "data": "hello"},
        {"op": "read", "path": "dir/a.txt"},
        {"op": "list", "path": "dir"},
        {"op": "exists", "path": "dir/a.txt"},
        {"op": "exists", "path": "dir/none"},
        {"op": "delete", "path": "dir"},
        {"op": "delete", "path": "dir", "recursive": true},
        {"op": "exists", "path": "dir"},
        // Traversal: the client's own path check off, so the server judges.
        {"op": "read", "path": format!("{out_rel}/secret.txt"), "unsafe": true},
        {"op": "http", "method": "GET", "path": format!("/v1/files/..%2F{}%2Fsecret.txt", outside.path().file_name().unwrap().to_string_lossy())},
        {"op": "http", "method": "GET", "path": format!("/v1/files/%2E%2E%2F{}%2Fsecret.txt", outside.path().file_name().unwrap().to_string_lossy())},
        {"op": "http", "method": "PUT", "path": "/v1/files/%2E%2E%2Fplanted", "data": "x"},
        {"op": "http", "method": "GET", "path": format!("/v1/files/{}", out_abs.replace('/', "%2F"))},
        // A symlink beneath the root that leads out of it.
        {"op": "read", "path": "link/secret.txt"},
        // A secret is refused with the rule.
        {"op": "write", "path": ".env", "data": "TOKEN=1"},
        {"op": "http", "method": "DELETE", "path": "/v1/files/%2E", "data": ""},
        // Streamed: stdin, then eof; a signal; unknown pid; no PTY to resize.
        {"op": "start", "argv": ["sh", "-c", "echo ready; read line; echo got:$line; cat; echo end"],
         "steps": [{"wait": "ready"}, {"stdin": "one\n"}, {"wait": "got:one"}, {"stdin": "two\n"},
                   {"eof": true}, {"resize": [100, 40]}]},
        {"op": "start", "argv": ["sh", "-c", "echo up; exec sleep 60"],
         "steps": [{"wait": "up"}, {"resize": [100, 40]}, {"signal": "SIGNAL_SIGTERM"}]},
        {"op": "rpc", "method": "SendSignal", "request": {"processId": 9999, "signal": "SIGNAL_SIGKILL"}},
        {"op": "rpc", "method": "ResizeTTY", "request": {"processId": 9999, "cols": 80, "rows": 24}},
        {"op": "execute", "argv": []},
    ]);
    let r = daemon.ops(&python, &ops);
    let log = daemon.log();
    assert_eq!(
        (&ok(&r[0])["stdout"], &r[0]["stderr"], &r[0]["exit_code"]),
        (
            &json!(format!(
                "hi\n{}\n",
                root.path().canonicalize().unwrap().display()
            )),
            &json!("err\n"),
            &json!(3)
        ),
        "{log}"
    );
    let sub = root.path().canonicalize().unwrap().join("sub");
    assert_eq!(ok(&r[1])["stdout"], format!("{}\n", sub.display()));
    assert!(
        r[2]["ok"] == false
            && r[2]["error"]
                .as_str()
                .unwrap()
                .contains("PERMISSION_DENIED"),
        "a cwd out of the root: {}",
        r[2]
    );
    ok(&r[3]);
    assert_eq!(ok(&r[4])["data"], "hello");
    assert_eq!(ok(&r[5])["entries"][0]["name"], "a.txt");
    assert_eq!(r[5]["entries"][0]["type"], "file");
    assert_eq!(r[5]["entries"][0]["size"], 5);
    assert_eq!(ok(&r[6])["exists"], true);
    assert_eq!(ok(&r[7])["exists"], false);
    assert_eq!(r[8]["status"], 409, "non-empty, not recursive: {}", r[8]);
    ok(&r[9]);
    assert_eq!(ok(&r[10])["exists"], false);
    assert!(!root.path().join("dir").exists());
    for (i, what) in [(11, "client"), (12, "%2F"), (13, "%2E%2E"), (14, "PUT")] {
        let (status, body) = (&r[i]["status"], &r[i]["body"]);
        assert_eq!(status, 403, "traversal ({what}) must be refused: {}", r[i]);
        assert_eq!(body["code"], "PERMISSION_DENIED", "{what}: {}", r[i]);
        assert!(body["rule"].is_string(), "{what}: {}", r[i]);
    }
    // A leading `/` is the URL's: the path is still beneath the root.
    assert_eq!(r[15]["status"], 404, "{}", r[15]);
    assert_eq!(r[16]["status"], 403, "a symlink out: {}", r[16]);
    assert_eq!(r[16]["body"]["code"], "PERMISSION_DENIED", "{}", r[16]);
    assert!(!outside.path().parent().unwrap().join("planted").exists());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "outside"
    );
    assert_eq!(r[17]["status"], 403, "{}", r[17]);
    assert_eq!(r[17]["body"]["rule"], "**/.env", "{}", r[17]);
    assert!(!root.path().join(".env").exists());
    assert_eq!(ok(&r[18])["status"], 403, "the root itself: {}", r[18]);

    let streamed = ok(&r[19]);
    assert_eq!(
        streamed["stdout"], "ready\ngot:one\ntwo\nend\n",
        "{streamed}"
    );
    assert_eq!(streamed["exit_code"], 0, "{streamed}");
    let steps = streamed["steps"].as_array().unwrap();
    assert!(steps[..5].iter().all(|s| s["ok"] == true), "{streamed}");
    // No terminal: FAILED_PRECONDITION (or NOT_FOUND once it ended).
    assert!(
        ["FAILED_PRECONDITION", "NOT_FOUND"].contains(&steps[5]["code"].as_str().unwrap_or("")),
        "{streamed}"
    );
    let signalled = ok(&r[20]);
    // Running, with no terminal: the contract's FAILED_PRECONDITION.
    assert_eq!(
        signalled["steps"][1]["code"], "FAILED_PRECONDITION",
        "{signalled}"
    );
    assert_eq!(signalled["steps"][2]["ok"], true, "{signalled}");
    assert_eq!(signalled["exit_code"], 128 + libc::SIGTERM, "{signalled}");
    assert_eq!(r[21]["code"], "NOT_FOUND", "{}", r[21]);
    assert_eq!(r[22]["code"], "NOT_FOUND", "{}", r[22]);
    assert_eq!(r[23]["code"], "INVALID_ARGUMENT", "{}", r[23]);
}

/// B10, H6: a command the policy refuses never runs; a prompt with no
/// owner connected to a sidecar is a deny.
#[test]
fn the_policy_refuses_before_the_sandbox() {
    require_bwrap!();
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_bwrap();
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &["--backend", "bwrap"], false);
    let r = daemon.ops(
        &python,
        &json!([
            {"op": "run", "command": "touch reached; sudo -n true"},
            {"op": "execute", "argv": ["git", "push", "origin", "main"]},
            {"op": "start", "argv": ["sh", "-c", "touch reached; sudo -n true"]},
        ]),
    );
    let error = r[0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("PERMISSION_DENIED") && error.contains("privilege escalation is denied"),
        "{}",
        r[0]
    );
    assert_eq!(r[1]["code"], "PERMISSION_DENIED", "{}", r[1]);
    assert!(
        r[1]["error"].as_str().unwrap().contains("push to a remote"),
        "{}",
        r[1]
    );
    // A stream's status arrives as its first answer.
    assert_eq!(r[2]["error"]["code"], "PERMISSION_DENIED", "{}", r[2]);
    assert_eq!(r[2]["pid"], Value::Null, "{}", r[2]);
    assert!(!root.path().join("reached").exists());
}

/// E2, H14: on bwrap a connection outside the allowlist is refused, and
/// the command's stderr carries the violation.
#[test]
fn egress_outside_the_allowlist_is_a_violation_on_bwrap() {
    require_bwrap!();
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_bwrap();
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &["--backend", "bwrap"], false);
    let r = daemon.ops(
        &python,
        &json!([{"op": "run",
                 "command": "curl -s -o /dev/null -w '%{http_code}' http://not-allowed.test:9/"}]),
    );
    let run = ok(&r[0]);
    assert_eq!(run["stdout"], "403", "{run}");
    assert!(
        run["stderr"]
            .as_str()
            .unwrap()
            .contains("cc_server: refused network-outbound not-allowed.test:9"),
        "{run}"
    );
}

/// Bad protobuf and oversized bodies get clear errors; the server stays up.
#[test]
fn bad_protobuf_and_oversized_bodies_get_clear_errors() {
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_none();
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(
        &plugins,
        root.path(),
        &["--backend", "none", "--max-file-bytes", "1024"],
        false,
    );
    let r = daemon.ops(
        &python,
        &json!([
            // Field 1 (config) as a length-delimited value running past the end.
            {"op": "raw", "method": "Execute", "hex": "0aff01"},
            // A 5 MiB message: over the server's 4 MiB.
            {"op": "raw", "method": "Execute", "hex": "00", "times": 5 << 20},
            {"op": "http", "method": "PUT", "path": "/v1/files/big", "size": 4096},
            {"op": "http", "method": "PUT", "path": "/v1/files/f?mode=9999", "data": "x"},
            {"op": "http", "method": "GET", "path": "/v1/files/a%00b"},
            {"op": "http", "method": "GET", "path": "/v1/nothing"},
            {"op": "http", "method": "GET", "path": "/v1/health"},
            {"op": "execute", "argv": ["echo", "still up"]},
            // A name rebound to loopback by a web page: refused.
            {"op": "http", "method": "PUT", "path": "/v1/files/rebound", "data": "x",
             "headers": {"Host": "evil.example:8080"}},
            // The contract's other PUT body: multipart, its `file` part.
            {"op": "http", "method": "PUT", "path": "/v1/files/m%2Fpart.txt", "data": "by part",
             "multipart": true},
        ]),
    );
    assert_eq!(r[0]["ok"], false, "{}", r[0]);
    assert!(
        ["INTERNAL", "INVALID_ARGUMENT"].contains(&r[0]["code"].as_str().unwrap_or("")),
        "{}",
        r[0]
    );
    assert!(
        r[0]["error"].as_str().unwrap().contains("decode"),
        "{}",
        r[0]
    );
    assert!(
        ["OUT_OF_RANGE", "RESOURCE_EXHAUSTED"].contains(&r[1]["code"].as_str().unwrap_or(""))
            && r[1]["error"].as_str().unwrap().contains("limit"),
        "{}",
        r[1]
    );
    assert_eq!(r[2]["status"], 413, "{}", r[2]);
    assert!(
        r[2]["body"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-file-bytes"),
        "{}",
        r[2]
    );
    assert!(!root.path().join("big").exists());
    assert_eq!(r[3]["status"], 400, "{}", r[3]);
    assert_eq!(r[4]["status"], 400, "{}", r[4]);
    assert_eq!(r[5]["status"], 404, "{}", r[5]);
    assert_eq!(r[6]["status"], 200, "{}", r[6]);
    assert_eq!(r[6]["body"]["status"], "ok", "{}", r[6]);
    assert_eq!(ok(&r[7])["stdout"], "still up\n");
    assert_eq!(r[8]["status"], 403, "{}", r[8]);
    assert!(!root.path().join("rebound").exists());
    assert_eq!(r[9]["status"], 204, "{}", r[9]);
    assert_eq!(
        std::fs::read_to_string(root.path().join("m/part.txt")).unwrap(),
        "by part"
    );
}

/// B8, E6, B3: where user namespaces are forbidden (as in many pods) the
/// probe falls back to `none`, and the metadata and the handle say what
/// then holds — never the proxies as a boundary; an explicit `bwrap`
/// fails loudly instead.
#[test]
fn without_user_namespaces_it_degrades_and_says_so() {
    require_bwrap!();
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_bwrap();
    plugins.add(&none_plugin());
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &[], true);
    let r = daemon.ops(
        &python,
        &json!([
            {"op": "http", "method": "GET", "path": "/v1/metadata"},
            {"op": "run", "command": "echo ran"},
            {"op": "write", "path": ".env", "data": "x"},
        ]),
    );
    let meta = &ok(&r[0])["body"]["cc_server"];
    assert_eq!(meta["backend"], "none", "{meta}\n{}", daemon.log());
    assert_eq!(meta["kernelBoundary"], false, "{meta}");
    assert_eq!(meta["handle"]["backendName"], "none", "{meta}");
    let boundary = meta["boundary"].as_str().unwrap();
    assert!(
        boundary.contains("pod's own isolation") && boundary.contains("not a boundary here"),
        "{boundary}"
    );
    assert!(
        daemon.log().contains("user namespaces are blocked"),
        "{}",
        daemon.log()
    );
    assert_eq!(ok(&r[1])["stdout"], "ran\n");
    assert_eq!(
        r[2]["status"], 403,
        "the jail holds without bwrap: {}",
        r[2]
    );
    drop(daemon);
    // The test's user namespace had the limit, not the host.
    assert_ne!(
        std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .unwrap()
            .trim(),
        "0"
    );

    // An explicit bwrap fails loudly.
    let command = CcServer::new(&plugins);
    let (program, args, envs) = command.parts();
    let mut c = Command::new("unshare");
    c.args(["--user", "--map-root-user", "sh", "-c"])
        .arg("echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"")
        .arg("sh")
        .arg(&program)
        .args(&args)
        .arg("sandboxd")
        .arg("--root-dir")
        .arg(root.path())
        .args([
            "--grpc-listen",
            "127.0.0.1:0",
            "--rest-listen",
            "127.0.0.1:0",
        ])
        .args(["--backend", "bwrap"]);
    for (key, value) in envs {
        match value {
            Some(v) => c.env(key, v),
            None => c.env_remove(key),
        };
    }
    let out = wait_output(
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("backend `bwrap` was requested but is unavailable"),
        "{}",
        text(&out.stderr)
    );
}

/// Start with a PTY: the command's terminal has the asked size, ResizeTTY
/// changes it (the foreground group sees it), typed input arrives, and
/// the exit code comes back.
#[test]
fn a_started_command_gets_a_terminal_and_resizes() {
    require_bwrap!();
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_bwrap();
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &["--backend", "bwrap"], false);
    let r = daemon.ops(
        &python,
        &json!([{"op": "start", "pty": [80, 24],
                 "argv": ["sh", "-c", "tty; stty size; read line; stty size; echo got:$line; exit 3"],
                 "steps": [{"wait": "24 80"}, {"resize": [100, 40]}, {"stdin": "hello\r"},
                           {"wait": "got:hello"}]}]),
    );
    let started = ok(&r[0]);
    let steps = started["steps"].as_array().unwrap();
    assert!(
        steps.iter().all(|s| s["ok"] == true),
        "{started}\n{}",
        daemon.log()
    );
    let out = started["stdout"].as_str().unwrap();
    assert!(out.contains("/dev/pts/"), "{started}");
    assert!(out.contains("40 100"), "{started}");
    assert_eq!(started["exit_code"], 3, "{started}");
}

/// deploy/sandbox-template.yaml's ConfigMap is a configuration cc_server
/// reads as its comments say: installs allowed, pushes to main denied,
/// other pushes asked (so denied in a sidecar). The manifest itself is
/// not applied here: there is no cluster.
#[test]
fn the_manifests_configuration_is_what_cc_server_reads() {
    let python = require_sandboxd_client!();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(&python)
        .args(["-c", "import sys, yaml\nfor d in yaml.safe_load_all(open(sys.argv[1])):\n    if d['kind'] == 'ConfigMap':\n        for k, v in d['data'].items():\n            open(sys.argv[2] + '/' + k, 'w').write(v)"])
        .arg(repo_root().join("deploy/sandbox-template.yaml"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plugins = Plugins::empty();
    for (line, decision) in [
        ("pip install requests", "allow"),
        ("git push origin main", "deny"),
        ("git push origin feature", "prompt"),
    ] {
        let out = CcServer::new(&plugins)
            .env("CC_SERVER_CONFIG", dir.path().join("config.toml"))
            .args(["policy", "check", "--json", "--", line])
            .output();
        let verdict: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out.stderr)));
        assert_eq!(verdict["decision"], decision, "{line}: {verdict}");
    }
}

/// H4, H12: with a credential file, every call but the health probe needs
/// the sandbox's agent credential; the official client, which cannot send
/// one, is refused with UNAUTHENTICATED and 401.
#[test]
fn a_credential_file_makes_every_call_carry_it() {
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_none();
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let file = state.path().join("credential");
    let daemon = Sandboxd::start(
        &plugins,
        root.path(),
        &[
            "--backend",
            "none",
            "--credential-file",
            file.to_str().unwrap(),
        ],
        false,
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let credential = std::fs::read_to_string(&file).unwrap();
    let bearer = format!("Bearer {credential}");
    let execute = json!({"config": {"command": ["echo", "in"]}});
    let r = daemon.ops(
        &python,
        &json!([
            {"op": "run", "command": "echo hi"},
            {"op": "read", "path": "x"},
            {"op": "rpc", "method": "Execute", "request": execute,
             "metadata": [["authorization", "Bearer wrong"]]},
            {"op": "rpc", "method": "Execute", "request": execute,
             "metadata": [["authorization", bearer]]},
            {"op": "http", "method": "PUT", "path": "/v1/files/x", "data": "y",
             "headers": {"Authorization": bearer}},
            {"op": "http", "method": "GET", "path": "/v1/health"},
        ]),
    );
    assert!(
        r[0]["error"].as_str().unwrap().contains("UNAUTHENTICATED"),
        "{}",
        r[0]
    );
    assert_eq!(r[1]["status"], 401, "{}", r[1]);
    assert_eq!(r[2]["code"], "UNAUTHENTICATED", "{}", r[2]);
    assert_eq!(ok(&r[3])["response"]["stdout"], "aW4K", "{}", r[3]);
    assert_eq!(r[4]["status"], 204, "{}", r[4]);
    assert_eq!(std::fs::read_to_string(root.path().join("x")).unwrap(), "y");
    assert_eq!(r[5]["status"], 200, "{}", r[5]);
    drop(daemon);

    // Beyond loopback a credential file is required: refused before any
    // listener is bound.
    let out = CcServer::new(&plugins)
        .args(["sandboxd", "--backend", "none", "--root-dir"])
        .arg(root.path())
        .args(["--grpc-listen", "0.0.0.0:0", "--rest-listen", "127.0.0.1:0"])
        .output();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("needs --credential-file"),
        "{}",
        text(&out.stderr)
    );
}

/// H6: a shell that would read its commands from a terminal is an opaque
/// command line: asked about in chat, so refused in a sidecar with no
/// owner — what is typed into it would never meet the policy.
#[test]
fn a_shell_on_a_terminal_is_refused_as_opaque() {
    let python = require_sandboxd_client!();
    let plugins = Plugins::with_none();
    let root = tempfile::tempdir().unwrap();
    let daemon = Sandboxd::start(&plugins, root.path(), &["--backend", "none"], false);
    let r = daemon.ops(
        &python,
        &json!([{"op": "start", "argv": ["bash"], "pty": [80, 24]}]),
    );
    assert_eq!(r[0]["error"]["code"], "PERMISSION_DENIED", "{}", r[0]);
    assert!(
        r[0]["error"]["details"]
            .as_str()
            .unwrap()
            .contains("opaque command line"),
        "{}",
        r[0]
    );
}
