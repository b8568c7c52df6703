//! A real MCP client for the tests: the official Python SDK (`mcp`, pinned
//! in tests/mcp/requirements.txt, installed by `.ci/install-deps` into
//! /opt/cc-test-venv), driven through tests/mcp/client.py over stdio
//! (`cc_server mcp`) or streamable HTTP (`/mcp` of a running server).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::util::*;

/// The venv's Python, or `CC_TEST_MCP_PYTHON`; `None` (skipped, or a
/// failure under CI) when it is missing.
pub fn python() -> Option<PathBuf> {
    let path = std::env::var_os("CC_TEST_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/cc-test-venv/bin/python"));
    let ok = Command::new(&path)
        .args(["-c", "import mcp"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(path);
    }
    skip_or_fail(format!(
        "{} cannot import the MCP SDK: `.ci/install-deps` makes /opt/cc-test-venv with \
         tests/mcp/requirements.txt (or set CC_TEST_MCP_PYTHON)",
        path.display()
    ));
    None
}

macro_rules! require_mcp_client {
    () => {
        match $crate::mcp_util::python() {
            Some(python) => python,
            None => return,
        }
    };
}

/// How the client reaches the tools.
#[allow(clippy::large_enum_variant)]
pub enum Transport<'a> {
    /// `cc_server mcp` with these arguments after `mcp`, started by the
    /// client in `cwd` (the sandbox's working directory).
    Stdio {
        command: CcServer,
        args: &'a [&'a str],
        cwd: &'a Path,
    },
    /// `/mcp` of a server, with this credential (none: no header).
    Http {
        server: &'a Server,
        credential: Option<&'a str>,
    },
}

/// Runs `ops` (see tests/mcp/client.py) in one client; one JSON value per
/// op. `mode` is the client's negotiation (`auto` or `legacy`).
pub fn run_ops(python: &Path, transport: Transport<'_>, mode: &str, ops: &Value) -> Vec<Value> {
    let script = repo_root().join("tests/mcp/client.py");
    let mut command = Command::new(python);
    command.arg(&script).args(["--mode", mode]);
    // Its private home lives until the client is done.
    let mut _kept = None;
    match transport {
        Transport::Stdio {
            command: cc,
            args,
            cwd,
        } => {
            // The client starts cc_server itself, with this environment.
            let (program, cc_args, envs) = cc.parts();
            command.arg("stdio").arg("--").arg(program).args(cc_args);
            command.arg("mcp").args(args).current_dir(cwd);
            for (key, value) in envs {
                match value {
                    Some(value) => command.env(key, value),
                    None => command.env_remove(key),
                };
            }
            _kept = Some(cc);
        }
        Transport::Http { server, credential } => {
            command
                .arg("http")
                .arg(format!("http://{}/mcp", server.addr));
            if let Some(credential) = credential {
                command.arg(credential);
            }
        }
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(ops.to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = wait_output(child, Duration::from_secs(180));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(
        lines.len(),
        ops.as_array().map_or(0, Vec::len),
        "the MCP client did not finish every op:\n{}",
        both(&out)
    );
    lines
}

/// The structured result of a successful op.
pub fn ok(line: &Value) -> &Value {
    assert_eq!(line["ok"], true, "{line}");
    &line["result"]
}

/// The structured content of a tool call that succeeded.
pub fn done(line: &Value) -> &Value {
    let result = ok(line);
    assert_eq!(result["is_error"], false, "{line}");
    &result["structured"]
}

/// The structured content of a tool call that failed (an error result).
pub fn failed(line: &Value) -> &Value {
    let result = ok(line);
    assert_eq!(result["is_error"], true, "{line}");
    &result["structured"]
}

/// A call op.
pub fn call(name: &str, args: Value) -> Value {
    serde_json::json!({"op": "call", "name": name, "args": args})
}

/// An owner's connection to `GET /v1/approvals`, connected.
pub fn owner(server: &Server) -> std::io::BufReader<std::net::TcpStream> {
    let mut owner = http_open(
        server.addr,
        "GET",
        "/v1/approvals",
        None,
        Some(&server.token),
    );
    read_until(&mut owner, "\"connected\"");
    owner
}

/// Creates a sandbox over `work` through the API (bwrap, or `none`), and
/// returns its agent credential.
pub fn create_with_credential(server: &Server, id: &str, work: &Path, spec: Value) -> String {
    let mut body = serde_json::json!({
        "sessionId": id,
        "bindMounts": [{"hostPath": work}],
        "guestWorkdir": work,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    );
    assert_eq!(
        created.status,
        201,
        "{}\n{}",
        text(&created.body),
        server.log()
    );
    created.json()["agentCredential"]
        .as_str()
        .unwrap()
        .to_owned()
}
