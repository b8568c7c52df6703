//! Commands on a terminal over the API, on `none` and `bwrap` (SPEC B8):
//! a real shell on a real pseudo-terminal — `tty` names one, `stty size`
//! reads the size asked for and follows a resize, what is typed is read,
//! `exit 3` ends with exit 3, and the terminal carries stderr too. On
//! bwrap the terminal is the sandbox's own: its device is on another
//! devpts instance than the host's `/dev/pts`, so no host terminal is
//! reachable from inside.

use std::os::unix::fs::MetadataExt;

use serde_json::json;

use crate::util::*;

/// Runs the terminal script on sandbox `id` of `server`; returns the
/// output (carriage returns removed) and the exit code.
fn shell_on_a_terminal(server: &Server, id: &str) -> (String, i64, Vec<serde_json::Value>) {
    // `ready` from an octal escape: only the output holds it, not the
    // `started` event, whose verdict quotes the script.
    let script = "tty; stty size; stat -c 'dev %d' \"$(tty)\"; echo oops >&2; \
                  printf 'r\\145ady\\n'; read line; stty size; echo \"got $line\"; exit 3";
    let exec = json!({
        "argv": ["sh", "-c", script],
        "pty": {"cols": 80, "rows": 24},
        "stdin": "stream",
    })
    .to_string();
    let mut stream = http_open(
        server.addr,
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&exec),
        Some(&server.token),
    );
    let mut events = read_until(&mut stream, "ready");
    assert_eq!(events[0]["type"], "started", "{events:?}");
    let exec_id = events[0]["execId"].as_u64().unwrap();
    let resized = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs/{exec_id}/resize"),
        Some(r#"{"cols":100,"rows":40}"#),
    );
    assert_eq!(resized.status, 204, "{}", text(&resized.body));
    let zero = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs/{exec_id}/resize"),
        Some(r#"{"cols":0,"rows":40}"#),
    );
    assert!(
        (400..500).contains(&zero.status) && text(&zero.body).contains("at least 1"),
        "{} {}",
        zero.status,
        text(&zero.body)
    );
    let typed = http_raw(
        server.addr,
        format!(
            "POST /v1/sandboxes/{id}/execs/{exec_id}/stdin HTTP/1.1\r\nHost: {}\r\n\
             Authorization: Bearer {}\r\nContent-Type: application/octet-stream\r\n\
             Content-Length: 6\r\nConnection: close\r\n\r\ntyped\n",
            server.addr, server.token
        )
        .as_bytes(),
    );
    assert!(typed.status < 300, "{} {}", typed.status, text(&typed.body));
    events.extend(read_until(&mut stream, r#""type":"exit""#));
    let output = joined(&events, "stdout").replace('\r', "");
    assert_eq!(joined(&events, "stderr"), "", "a terminal has one stream");
    (output, exit_code(&events), events)
}

fn check(output: &str, code: i64) -> u64 {
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{output}");
    assert_eq!(lines[1], "24 80", "{output}");
    assert!(
        lines.contains(&"oops"),
        "stderr is the terminal too: {output}"
    );
    assert!(lines.contains(&"40 100"), "the resize reached it: {output}");
    assert!(lines.contains(&"got typed"), "{output}");
    assert_eq!(code, 3, "{output}");
    lines
        .iter()
        .find_map(|l| l.strip_prefix("dev "))
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no device line: {output}"))
}

/// B8 on `none`: a host shell on a host terminal, as the badge says.
#[test]
fn a_shell_on_none_runs_on_a_real_terminal() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let created = server.call("POST", "/v1/sandboxes", Some(r#"{"sessionId":"t"}"#));
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let (output, code, _) = shell_on_a_terminal(&server, "t");
    check(&output, code);
}

/// B8 on `bwrap`: the terminal is made inside, from the sandbox's own
/// devpts — its device number is not the host's `/dev/pts` — and is the
/// shell's controlling terminal (`tty`, `stty` and `read` work).
#[test]
fn a_shell_on_bwrap_runs_on_the_sandboxs_own_terminal() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let server = Server::start(&plugins);
    let work = tempfile::tempdir().unwrap();
    let body = json!({
        "sessionId": "tb",
        "bindMounts": [{"hostPath": work.path()}],
        "guestWorkdir": work.path(),
    });
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    );
    assert_eq!(created.status, 201, "{}", text(&created.body));
    assert_eq!(created.json()["backendName"], "bwrap");
    let (output, code, _) = shell_on_a_terminal(&server, "tb");
    let inside = check(&output, code);
    let host = std::fs::metadata("/dev/pts").unwrap().dev();
    assert_ne!(
        inside, host,
        "the sandbox's terminal is on the host's devpts: {output}"
    );
    // The end of `input` types `^D`: `cat` ends at it, as at a keyboard.
    let exec = json!({
        "argv": ["cat"],
        "pty": {"cols": 80, "rows": 24},
        "input": "from-the-keyboard\n",
    });
    let response = server.call("POST", "/v1/sandboxes/tb/execs", Some(&exec.to_string()));
    let events = response.lines();
    assert!(
        joined(&events, "stdout").contains("from-the-keyboard"),
        "{events:?}"
    );
    assert_eq!(exit_code(&events), 0, "{events:?}");
}
