//! Terminals over the API and their WebSocket, black-box (SPEC D1–D3): a
//! real shell on a real terminal, two clients on one terminal, a client
//! that does not read, the tickets and credentials the routes take, and a
//! native terminal's D2 profile.

use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

use crate::net::{BulkServer, Canary};
use crate::util::*;

type Socket = WebSocket<TcpStream>;

/// `POST /v1/terminals` with `body`; the response.
fn create_terminal(server: &Server, body: &Value) -> Response {
    server.call("POST", "/v1/terminals", Some(&body.to_string()))
}

fn ticket(server: &Server, id: &str) -> String {
    let made = server.call("POST", &format!("/v1/terminals/{id}/tickets"), None);
    assert_eq!(made.status, 201, "{}", text(&made.body));
    made.json()["ticket"].as_str().unwrap().to_owned()
}

/// Opens the terminal's WebSocket with `ticket`, sending `origin` if given;
/// the socket, or the HTTP status of the refusal and its body.
fn connect(
    server: &Server,
    id: &str,
    ticket: &str,
    origin: Option<&str>,
) -> Result<Socket, (u16, String)> {
    let url = format!("ws://{}/v1/terminals/{id}/ws?ticket={ticket}", server.addr);
    let mut request = url.into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("Origin", origin.parse().unwrap());
    }
    let stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    match tungstenite::client(request, stream) {
        Ok((socket, _)) => Ok(socket),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let body = response
                .body()
                .clone()
                .map(|b| String::from_utf8_lossy(&b).into_owned());
            Err((response.status().as_u16(), body.unwrap_or_default()))
        }
        Err(e) => panic!("the WebSocket handshake failed: {e}"),
    }
}

/// Reads until the terminal's output holds `needle`; the output so far.
fn read_until_output(socket: &mut Socket, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} in {seen:?}");
        match socket.read().unwrap() {
            Message::Binary(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Message::Text(text) => seen.push_str(&format!("\n[control {text}]\n")),
            Message::Close(frame) => panic!("closed ({frame:?}) before {needle:?}: {seen:?}"),
            _ => {}
        }
    }
}

/// Reads to the `exit` control message; returns it.
fn read_exit(socket: &mut Socket) -> Value {
    loop {
        match socket.read().unwrap() {
            Message::Text(text) => {
                let control: Value = serde_json::from_str(text.as_str()).unwrap();
                if control["type"] == "exit" {
                    return control;
                }
            }
            Message::Close(frame) => panic!("closed ({frame:?}) without an exit"),
            _ => {}
        }
    }
}

fn typed(socket: &mut Socket, line: &str) {
    socket
        .send(Message::Binary(format!("{line}\r").into_bytes().into()))
        .unwrap();
}

/// D1: a terminal is a host shell on `none` by default, badged as such; its
/// WebSocket carries a real terminal both ways (`tty`, `stty size`, a
/// resize), two clients see the same output, and `exit 3` reaches both as
/// `exit` with code 3.
#[test]
fn a_terminal_is_a_real_shell_shared_by_its_clients() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let made = create_terminal(&server, &json!({"cols": 80, "rows": 24}));
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let terminal = made.json();
    assert_eq!(terminal["backendName"], "none", "{terminal}");
    assert!(
        terminal["note"].as_str().unwrap().contains("no sandbox"),
        "a host shell is badged as one: {terminal}"
    );
    let id = terminal["id"].as_str().unwrap();
    let mut first = connect(&server, id, &ticket(&server, id), None).unwrap();
    let mut seen = String::new();
    typed(&mut first, "tty; stty size; echo do''ne-1");
    read_until_output(&mut first, &mut seen, "done-1");
    assert!(seen.contains("/dev/pts/"), "{seen}");
    assert!(seen.contains("24 80"), "{seen}");
    first
        .send(Message::Text(
            r#"{"type":"resize","cols":100,"rows":40}"#.into(),
        ))
        .unwrap();
    typed(&mut first, "stty size; echo do''ne-2");
    read_until_output(&mut first, &mut seen, "done-2");
    assert!(seen.contains("40 100"), "{seen}");
    let mut second = connect(&server, id, &ticket(&server, id), None).unwrap();
    typed(&mut second, "echo sha''red-line");
    let mut seen_second = String::new();
    read_until_output(&mut second, &mut seen_second, "shared-line");
    read_until_output(&mut first, &mut seen, "shared-line");
    typed(&mut first, "exit 3");
    for socket in [&mut first, &mut second] {
        let exit = read_exit(socket);
        assert_eq!(exit["code"], 3, "{exit}");
    }
    // The terminal and its session are gone with the shell.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server
        .call("GET", "/v1/terminals", None)
        .json()
        .as_array()
        .unwrap()
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the terminal outlived its shell");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// D1, H4: the WebSocket takes a fresh ticket only — a reused one, a made-up
/// one, one for another terminal are refused, and so is a foreign `Origin`;
/// an agent credential opens no terminal route.
#[test]
fn tickets_origins_and_agent_credentials_are_checked() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let made = create_terminal(&server, &json!({"cols": 80, "rows": 24}));
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let once = ticket(&server, &id);
    let socket = connect(&server, &id, &once, None).unwrap();
    drop(socket);
    let (status, body) = connect(&server, &id, &once, None).expect_err("a reused ticket opened it");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("already used"), "{body}");
    let (status, _) = connect(&server, &id, "0123", None).expect_err("a made-up ticket");
    assert_eq!(status, 403);
    let (status, body) = connect(
        &server,
        &id,
        &ticket(&server, &id),
        Some("https://evil.example"),
    )
    .expect_err("a foreign origin opened it");
    assert_eq!(status, 403, "{body}");
    let sandbox = server.call("POST", "/v1/sandboxes", Some(r#"{"sessionId":"agent"}"#));
    assert_eq!(sandbox.status, 201, "{}", text(&sandbox.body));
    let credential = sandbox.json()["agentCredential"]
        .as_str()
        .unwrap()
        .to_owned();
    for (method, path) in [
        ("POST", "/v1/terminals".to_owned()),
        ("GET", "/v1/terminals".to_owned()),
        ("POST", format!("/v1/terminals/{id}/tickets")),
    ] {
        let refused = http(
            server.addr,
            method,
            &path,
            Some(r#"{"cols":80,"rows":24}"#),
            Some(&credential),
        );
        assert_eq!(
            refused.status,
            403,
            "{method} {path}: {}",
            text(&refused.body)
        );
    }
    let no_size = create_terminal(&server, &json!({"cols": 0, "rows": 24}));
    assert_eq!(no_size.status, 400, "{}", text(&no_size.body));
}

/// D1 (bounded per-client queues): a client that stops reading while the
/// shell prints a lot is closed with 1008, the server's memory stays flat,
/// and the terminal goes on for the others.
#[test]
fn a_slow_client_is_closed_and_the_servers_memory_stays_flat() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let made = create_terminal(&server, &json!({"cols": 80, "rows": 24}));
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let mut reader = connect(&server, &id, &ticket(&server, &id), None).unwrap();
    let mut slow = connect(&server, &id, &ticket(&server, &id), None).unwrap();
    let before = server.rss();
    // 48 MiB through base64 (64 MiB of text) on the terminal, which the
    // slow client never reads.
    typed(
        &mut reader,
        "head -c 50331648 /dev/zero | base64; echo fini''shed",
    );
    let mut tail = String::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while !tail.contains("finished") {
        assert!(Instant::now() < deadline, "the output never finished");
        if let Message::Binary(bytes) = reader.read().unwrap() {
            tail.push_str(&String::from_utf8_lossy(&bytes));
            let cut = tail.len().saturating_sub(64);
            tail = tail.split_off(tail.floor_char_boundary(cut));
        }
    }
    let after = server.rss();
    assert!(
        after < before + (64 << 20),
        "the server grew from {before} to {after} bytes behind a client that does not read"
    );
    let mut closed = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while closed.is_none() && Instant::now() < deadline {
        match slow.read() {
            Ok(Message::Close(frame)) => closed = Some(frame),
            Ok(_) => {}
            Err(e) => panic!("the slow client was not closed with a reason: {e}"),
        }
    }
    let frame = closed.flatten().expect("no close frame");
    assert_eq!(frame.code, CloseCode::Policy, "{frame:?}");
}

fn home_with_secrets(home: &Path) {
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-KEY-MARKER\n").unwrap();
    std::fs::write(home.join(".bashrc"), "# the host's rc\n").unwrap();
}

/// D2: a native terminal binds `$HOME` and its workdir with every bind's
/// protection: it cannot read `~/.ssh` nor plant a line in a shell rc file
/// (checked on the host by reading the file and running `bash -i`), yet
/// the workdir is writable.
#[test]
fn a_native_terminal_cannot_read_ssh_keys_nor_plant_a_shell_rc() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    home_with_secrets(home.path());
    let work = home.path().join("project");
    std::fs::create_dir_all(&work).unwrap();
    let server = Server::start_with(CcServer::new(&plugins).env("HOME", home.path()));
    let made = create_terminal(
        &server,
        &json!({"backend": "native", "workdir": work, "cols": 80, "rows": 24}),
    );
    assert_eq!(made.status, 201, "{}\n{}", text(&made.body), server.log());
    let terminal = made.json();
    assert_eq!(terminal["backendName"], "bwrap", "{terminal}");
    let id = terminal["id"].as_str().unwrap();
    let mut socket = connect(&server, id, &ticket(&server, id), None).unwrap();
    typed(
        &mut socket,
        "cat ~/.ssh/id_ed25519; echo 'touch /tmp/planted-by-rc' >> ~/.bashrc; echo ok > made-here; echo do''ne",
    );
    let mut seen = String::new();
    read_until_output(&mut socket, &mut seen, "done");
    assert!(
        !seen.contains("SECRET-KEY-MARKER"),
        "the key leaked: {seen}"
    );
    assert_eq!(
        std::fs::read_to_string(home.path().join(".bashrc")).unwrap(),
        "# the host's rc\n",
        "the rc file changed: {seen}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("made-here")).unwrap(),
        "ok\n"
    );
    let host_shell = std::process::Command::new("bash")
        .args(["-i", "-c", "true"])
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(host_shell.status.success());
    assert!(!Path::new("/tmp/planted-by-rc").exists(), "the plant ran");
    typed(&mut socket, "exit");
    read_exit(&mut socket);
}

/// D2, C3: a backend asked for that cannot run here is an error naming why,
/// never a downgrade to a host shell.
#[test]
fn an_unsupported_native_terminal_fails_with_the_reason() {
    let plugins = Plugins::with_none();
    let server = Server::start(&plugins);
    let refused = create_terminal(
        &server,
        &json!({"backend": "seatbelt", "cols": 80, "rows": 24}),
    );
    assert!(
        (400..500).contains(&refused.status),
        "{} {}",
        refused.status,
        text(&refused.body)
    );
    assert!(
        text(&refused.body).contains("seatbelt"),
        "{}",
        text(&refused.body)
    );
    assert!(
        server
            .call("GET", "/v1/terminals", None)
            .json()
            .as_array()
            .unwrap()
            .is_empty(),
        "a terminal was made anyway"
    );
    assert!(
        server
            .call("GET", "/v1/sandboxes", None)
            .json()
            .as_array()
            .unwrap()
            .is_empty(),
        "a sandbox was left"
    );
}

/// D1: a terminal dies with its last client after `[api]
/// terminal_grace_secs`, and its session with it.
#[test]
fn a_terminal_ends_after_the_grace_period_without_a_client() {
    let plugins = Plugins::with_none();
    let server =
        Server::start_with(CcServer::new(&plugins).config("[api]\nterminal_grace_secs = 1\n"));
    let made = create_terminal(&server, &json!({"cols": 80, "rows": 24}));
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let socket = connect(&server, &id, &ticket(&server, &id), None).unwrap();
    drop(socket);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let terminals = server.call("GET", "/v1/terminals", None).json();
        let sandboxes = server.call("GET", "/v1/sandboxes", None).json();
        if terminals.as_array().unwrap().is_empty() && sandboxes.as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still there: {terminals} {sandboxes}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// T28, D1: a terminal's WebSocket holds its connection's place under
/// `[api] max_connections` until it closes — with every place held by a
/// live terminal, one more connection (a request, another WebSocket) is
/// refused with the 503 naming the key — and a live terminal is not closed
/// for idling, however long it is quiet.
#[test]
fn terminal_websockets_count_against_max_connections_and_never_idle_out() {
    let plugins = Plugins::with_none();
    let config = "[api]\nmax_connections = 4\nauthenticated_reserve = 1\nidle_timeout_secs = 1\n";
    let server = Server::start_with(CcServer::new(&plugins).config(config));
    let made = create_terminal(&server, &json!({"cols": 80, "rows": 24}));
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let tickets: Vec<String> = (0..5).map(|_| ticket(&server, &id)).collect();
    let mut sockets: Vec<Socket> = tickets[..4]
        .iter()
        .map(|t| connect(&server, &id, t, None).unwrap())
        .collect();
    let refused = http(server.addr, "GET", "/healthz", None, None);
    assert_eq!(refused.status, 503, "{}", text(&refused.body));
    assert_eq!(
        refused.json()["configKey"],
        "[api] max_connections",
        "{}",
        text(&refused.body)
    );
    let (status, body) =
        connect(&server, &id, &tickets[4], None).expect_err("a fifth WebSocket opened");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("max_connections"), "{body}");
    // Quiet for longer than the idle timeout: still live.
    std::thread::sleep(Duration::from_secs(3));
    let mut seen = String::new();
    typed(&mut sockets[0], "echo sti''ll-here");
    read_until_output(&mut sockets[0], &mut seen, "still-here");
    // A WebSocket that closes gives its place back.
    let mut last = sockets.pop().unwrap();
    last.close(None).unwrap();
    while last.read().is_ok() {}
    drop(last);
    let deadline = Instant::now() + Duration::from_secs(10);
    while http(server.addr, "GET", "/healthz", None, None).status != 200 {
        assert!(
            Instant::now() < deadline,
            "the closed WebSocket's place was not given back\n{}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// D2: a native terminal asked for `"network": "open"` reaches a name on
/// no allowlist (pointed at a loopback server by the resolver override,
/// and opted in to loopback as every egress test's target is), which a
/// terminal of the default mode is refused; in open mode the fixed deny
/// list and the non-public rule still hold (a metadata name, an address on
/// loopback, the link-local metadata address), and nothing refused arrives.
#[test]
fn a_network_open_terminal_reaches_any_name_but_not_the_deny_list() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let bulk = BulkServer::start(10);
    let canary = Canary::start();
    let (p, c) = (bulk.port(), canary.port());
    let config = "[egress]\nallow_private = [\"open.test\"]\n\
                  resolve = [\"open.test:127.0.0.1\", \"metadata.google.internal:127.0.0.1\"]\n";
    let home = tempfile::tempdir().unwrap();
    let work = home.path().join("project");
    std::fs::create_dir_all(&work).unwrap();
    let server = Server::start_with(
        CcServer::new(&plugins)
            .env("HOME", home.path())
            .config(config),
    );
    let fetch = |name: &str, url: String| {
        format!("curl -s --noproxy '' -o /dev/null -w '{name}=%{{http_code}}\\n' {url}; ")
    };
    let script = [
        fetch("open", format!("http://open.test:{p}/")),
        fetch("metadata", format!("http://metadata.google.internal:{c}/")),
        fetch("loopback", format!("http://127.0.0.1:{c}/")),
        fetch("linklocal", "http://169.254.169.254/".to_owned()),
        "echo do''ne".to_owned(),
    ]
    .concat();
    let mut outputs = Vec::new();
    for network in [Some("open"), None] {
        let mut body = json!({"backend": "native", "workdir": work, "cols": 200, "rows": 24});
        if let Some(network) = network {
            body["network"] = network.into();
        }
        let made = create_terminal(&server, &body);
        assert_eq!(made.status, 201, "{}\n{}", text(&made.body), server.log());
        let terminal = made.json();
        assert_eq!(
            terminal["network"],
            network.unwrap_or("allowlist"),
            "{terminal}"
        );
        let id = terminal["id"].as_str().unwrap();
        let mut socket = connect(&server, id, &ticket(&server, id), None).unwrap();
        typed(&mut socket, &script);
        let mut seen = String::new();
        read_until_output(&mut socket, &mut seen, "done");
        typed(&mut socket, "exit");
        read_exit(&mut socket);
        outputs.push(seen);
    }
    // A line's end: bash's bracketed-paste switch may come before the first.
    let has = |seen: &str, line: &str| seen.lines().any(|l| l.trim_end().ends_with(line));
    for line in ["open=200", "metadata=403", "loopback=403", "linklocal=403"] {
        assert!(
            has(&outputs[0], line),
            "open mode: no {line} in {}",
            outputs[0]
        );
    }
    assert!(
        has(&outputs[1], "open=403"),
        "the default mode let a name on no allowlist through: {}",
        outputs[1]
    );
    assert_eq!(bulk.requests(), 1, "only open mode's request arrived");
    assert_eq!(canary.connections(), 0, "a refused connection arrived");
    let bad = create_terminal(
        &server,
        &json!({"backend": "native", "workdir": work, "network": "wide", "cols": 80, "rows": 24}),
    );
    assert_eq!(bad.status, 400, "{}", text(&bad.body));
    assert!(text(&bad.body).contains("`open`"), "{}", text(&bad.body));
}
