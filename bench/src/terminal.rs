//! `sandbox-bench terminal [KEYS] [MIB]`: a terminal over the API's
//! WebSocket (SPEC D1) against a plain pty on the host, in the same run.
//!
//! - Keystroke echo: one byte typed, until its echo comes back, KEYS times
//!   (default 300) — through the WebSocket to a shell on a bwrap terminal
//!   (`BACKEND`, default bwrap), and written to a plain pty's master on the
//!   host and read back from it (the line discipline echoes in both).
//! - Output: MIB MiB (default 100) of text printed by the shell, read by
//!   one WebSocket client, and the same command on a plain pty's slave,
//!   read from its master.
//!
//! Prints the median and p99 echo round trips and the added time, both
//! rates and their ratio, and the server's CPU time for the output (its
//! work per MiB, which a loaded host disturbs less than a rate). The goals
//! (docs/measurements.md): ≤ 2 ms added per keystroke, ≥ 50 % of the plain
//! pty's rate.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tungstenite::Message;
use tungstenite::client::IntoClientRequest;

use crate::api_load::Server;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn command(mib: usize, end: &str) -> String {
    format!(
        "head -c {} /dev/zero | tr '\\0' x; echo; echo {end}",
        mib << 20
    )
}

pub fn run(keys: usize, mib: usize) {
    let backend = std::env::var("BACKEND").unwrap_or_else(|_| "native".into());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path());
    // Not the server's directory: that holds its token, which no bind may show.
    let work = tempfile::tempdir().unwrap();
    let (status, body) = server.call(
        "POST",
        "/v1/terminals",
        &json!({"backend": backend, "workdir": work.path(), "cols": 200, "rows": 50}),
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let terminal: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let id = terminal["id"].as_str().unwrap();
    let (_, body) = server.call("POST", &format!("/v1/terminals/{id}/tickets"), &json!({}));
    let ticket: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let url = format!(
        "ws://{}/v1/terminals/{id}/ws?ticket={}",
        server.addr,
        ticket["ticket"].as_str().unwrap()
    );
    let stream = TcpStream::connect(&server.addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut socket, _) = tungstenite::client(url.into_client_request().unwrap(), stream).unwrap();
    let read_text = |socket: &mut tungstenite::WebSocket<TcpStream>| -> Vec<u8> {
        loop {
            match socket.read().unwrap() {
                Message::Binary(bytes) => return bytes.to_vec(),
                Message::Close(frame) => panic!("closed: {frame:?}"),
                _ => {}
            }
        }
    };
    // Let the shell settle at its prompt; from here `cat` echoes nothing
    // itself: what comes back is the terminal's echo.
    socket
        .send(Message::Binary(
            b"stty -icanon; cat >/dev/null\r".to_vec().into(),
        ))
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    socket.flush().unwrap();
    while let Ok(Some(_)) = peek_drain(&mut socket) {}
    eprintln!("echo through the websocket…");
    let mut ws = Vec::with_capacity(keys);
    for _ in 0..keys {
        let started = Instant::now();
        socket.send(Message::Binary(b"k".to_vec().into())).unwrap();
        let mut got = Vec::new();
        while !got.contains(&b'k') {
            got.extend(read_text(&mut socket));
        }
        ws.push(started.elapsed());
    }
    // Back to the prompt: ^C ends `cat`.
    socket
        .send(Message::Binary(b"\x03stty icanon\r".to_vec().into()))
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    while let Ok(Some(_)) = peek_drain(&mut socket) {}
    eprintln!("output through the websocket…");
    let end = "END-OF-OUTPUT";
    let typed = command(mib, &end.replace('-', "''-"));
    let cpu_before = server.cpu_time();
    let started = Instant::now();
    socket
        .send(Message::Binary(format!("{typed}\r").into_bytes().into()))
        .unwrap();
    let mut bytes = 0usize;
    let mut frames = 0usize;
    let mut tail = Vec::new();
    loop {
        let chunk = read_text(&mut socket);
        bytes += chunk.len();
        frames += 1;
        tail.extend_from_slice(&chunk);
        let keep = tail.len().saturating_sub(64);
        tail.drain(..keep);
        if String::from_utf8_lossy(&tail).contains(end) {
            break;
        }
    }
    let ws_rate = bytes as f64 / started.elapsed().as_secs_f64() / f64::from(1 << 20);
    // The server's own work per MiB: less at the mercy of a loaded host
    // than a rate.
    let server_cpu = server.cpu_time().saturating_sub(cpu_before);

    eprintln!("the plain pty…");
    // The baseline: a plain pty on the host.
    let (master, slave) = sandbox_spawn::pty::open(200, 50).unwrap();
    let mut master = std::fs::File::from(master);
    let slave = std::fs::File::from(slave);
    let mut holder = Command::new("sh")
        .args(["-c", "stty -icanon; exec cat >/dev/null"])
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut plain = Vec::with_capacity(keys);
    let mut buf = vec![0u8; 1 << 16];
    for _ in 0..keys {
        let started = Instant::now();
        master.write_all(b"k").unwrap();
        let mut got = Vec::new();
        while !got.contains(&b'k') {
            let n = master.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        plain.push(started.elapsed());
    }
    let _ = holder.kill();
    let _ = holder.wait();
    let mut printer = Command::new("sh")
        .args(["-c", &command(mib, end)])
        .stdin(Stdio::null())
        .stdout(slave.try_clone().unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(slave);
    let started = Instant::now();
    let mut plain_bytes = 0usize;
    loop {
        match master.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => plain_bytes += n,
            Err(_) => break, // EIO: the printer is gone
        }
    }
    let plain_rate = plain_bytes as f64 / started.elapsed().as_secs_f64() / f64::from(1 << 20);
    let _ = printer.wait();

    ws.sort();
    plain.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("keystroke echo, {keys} keys (median / p99):");
    println!(
        "  websocket terminal ({}): {:.3} / {:.3} ms",
        terminal["backendName"].as_str().unwrap_or("?"),
        ms(percentile(&ws, 0.5)),
        ms(percentile(&ws, 0.99))
    );
    println!(
        "  plain pty on the host:  {:.3} / {:.3} ms",
        ms(percentile(&plain, 0.5)),
        ms(percentile(&plain, 0.99))
    );
    println!(
        "  added: {:.3} ms median (goal ≤ 2 ms)",
        ms(percentile(&ws, 0.5)) - ms(percentile(&plain, 0.5))
    );
    println!("output, {mib} MiB to one client:");
    println!(
        "  websocket terminal: {ws_rate:.1} MiB/s ({frames} frames, {:.1} KiB each on average)",
        bytes as f64 / frames.max(1) as f64 / 1024.0
    );
    println!("  plain pty:          {plain_rate:.1} MiB/s");
    println!(
        "  the server's CPU time: {:.2} s, {:.1} ms per MiB",
        server_cpu.as_secs_f64(),
        server_cpu.as_secs_f64() * 1e3 / mib.max(1) as f64
    );
    println!(
        "  ratio: {:.0} % (goal ≥ 50 %)",
        100.0 * ws_rate / plain_rate
    );
    let _ = server.call("DELETE", &format!("/v1/terminals/{id}"), &json!({}));
}

/// Reads whatever is already waiting; `None` once nothing is.
fn peek_drain(socket: &mut tungstenite::WebSocket<TcpStream>) -> std::io::Result<Option<()>> {
    socket.get_mut().set_nonblocking(true)?;
    let read = socket.read();
    socket.get_mut().set_nonblocking(false)?;
    match read {
        Ok(_) => Ok(Some(())),
        Err(_) => Ok(None),
    }
}
