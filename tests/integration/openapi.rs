//! The API described (SPEC F10): `/v1/openapi.json` is served without a
//! credential, and Schemathesis (from the Python package index, in the
//! test venv) fuzzes the API from it for a bounded number of examples: no
//! 5xx, no crash, every error the API's JSON. The server has no backend
//! library at all, and the routes that would run a command — execs,
//! terminals, MCP — are left out: nothing is ever run on the host.

use std::path::PathBuf;
use std::process::Command;

use crate::util::*;

/// Schemathesis's CLI in the test venv, or `CC_TEST_SCHEMATHESIS`.
fn schemathesis() -> Option<PathBuf> {
    let path = std::env::var_os("CC_TEST_SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/cc-test-venv/bin/st"));
    if Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Some(path);
    }
    sandbox_test_support::skip_or_fail(format!(
        "{} is missing: `.ci/install-deps` installs Schemathesis into /opt/cc-test-venv from \
         tests/mcp/requirements.txt (or set CC_TEST_SCHEMATHESIS)",
        path.display()
    ));
    None
}

/// F10: Schemathesis against the generated document: no server error, the
/// answers as described, the server alive after.
#[test]
fn schemathesis_finds_no_server_error() {
    let Some(st) = schemathesis() else { return };
    let plugins = Plugins::empty();
    let server = Server::start(&plugins);
    let doc = http(server.addr, "GET", "/v1/openapi.json", None, None);
    assert_eq!(doc.status, 200, "{}", text(&doc.body));
    assert_eq!(doc.json()["openapi"], "3.1.0");
    let reports = tempfile::tempdir().unwrap();
    let out = Command::new(&st)
        .arg("run")
        .arg(format!("http://{}/v1/openapi.json", server.addr))
        .args([
            "--header",
            &format!("Authorization: Bearer {}", server.token),
        ])
        .args(["--checks", "not_a_server_error,content_type_conformance"])
        .args(["--max-examples", "15", "--seed", "41", "--workers", "1"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args([
            "--exclude-path-regex",
            "/execs?(/|$)|/terminals|^/mcp|^/v1/(approvals|events)$",
        ])
        .arg("--report-dir")
        .arg(reports.path())
        .env("SCHEMATHESIS_HOOKS", "")
        // Its cache (`.schemathesis/`) goes where the reports go, never
        // into the checkout.
        .current_dir(reports.path())
        .output()
        .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "Schemathesis found problems:\n{report}\nserver log:\n{}",
        server.log()
    );
    let health = http(server.addr, "GET", "/healthz", None, None);
    assert_eq!(health.status, 200, "the server did not survive the run");
}
