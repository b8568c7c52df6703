//! `sandbox-bench api-load [SANDBOXES] [EXECS] [KIB]`: many exec streams over
//! the API at once (SPEC F10) — SANDBOXES sandboxes × EXECS execs (default 32
//! × 10), each writing KIB KiB (default 1024) of its own 8-byte lines, read
//! over the API by one client thread per exec, every byte checked — against
//! the same commands run on the host at once, their pipes read by the same
//! number of threads (the baseline). Prints aggregate MiB/s and exec latency
//! of both, and their ratio.
//!
//! The server is `cc_server serve` beside this binary, on a loopback port
//! of its own; `BACKEND` picks the backend (default: bwrap where
//! `/usr/bin/bwrap` exists, else none).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The server under load, stopped when dropped.
pub(crate) struct Server {
    child: Child,
    pub(crate) addr: String,
    pub(crate) token: String,
}

impl Server {
    /// CPU time the server process has used so far (user + system, every
    /// thread, the plugins' included: they run in it), from `/proc`.
    pub(crate) fn cpu_time(&self) -> Duration {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // The fields after the command name, which ends at the last `)`.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // utime and stime: fields 14 and 15 of proc_pid_stat(5), counted
        // from the state (field 3) here; in USER_HZ, 100 on Linux.
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(crate) fn start(dir: &Path) -> Self {
        let bin = std::env::current_exe().unwrap().with_file_name("cc_server");
        let config = dir.join("config.toml");
        std::fs::write(&config, "[policy]\n").unwrap();
        let token_file = dir.join("token");
        let mut child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                l.split_once("listening on http://")
                    .map(|(_, rest)| rest.split_whitespace().next().unwrap_or("").to_owned())
            })
            .expect("the server did not say where it listens");
        // Its log goes on being read, so the server never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_owned();
        Self { child, addr, token }
    }

    /// One request; the status and the body, de-chunked.
    pub(crate) fn call(&self, method: &str, path: &str, body: &Value) -> (u16, Vec<u8>) {
        let body = body.to_string();
        let mut socket = TcpStream::connect(&self.addr).unwrap();
        write!(
            socket,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::with_capacity(256 << 10, socket);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut chunked = false;
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            chunked |= line
                .to_ascii_lowercase()
                .starts_with("transfer-encoding: chunked");
        }
        let mut out = Vec::new();
        if !chunked {
            reader.read_to_end(&mut out).unwrap();
            return (status, out);
        }
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let size =
                usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16).unwrap_or(0);
            if size == 0 {
                return (status, out);
            }
            let start = out.len();
            out.resize(start + size + 2, 0); // the chunk and its CRLF
            reader.read_exact(&mut out[start..]).unwrap();
            out.truncate(start + size);
        }
    }
}

/// Sandbox `s`'s exec `e` writes `bytes` of this line (8 bytes with its
/// newline), so every exec's output is its own.
fn line_of(s: usize, e: usize) -> String {
    format!("s{s:02}e{e}xx")
}

fn script(line: &str, bytes: usize) -> String {
    format!("yes {line} | head -c {bytes}")
}

/// Whether `out` is `bytes` of `line`s.
fn intact(out: &[u8], line: &str, bytes: usize) -> bool {
    out.len() == bytes
        && out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .all(|l| l == line.as_bytes())
}

/// The stdout of an exec's NDJSON stream, and whether it ended with exit 0.
fn stdout_of(stream: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut ok = false;
    for line in stream.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let event: Value = serde_json::from_slice(line).unwrap();
        match event["type"].as_str() {
            Some("stdout") => {
                out.extend_from_slice(event["data"].as_str().unwrap_or("").as_bytes())
            }
            Some("exit") => ok = event["exitCode"] == 0,
            _ => {}
        }
    }
    (out, ok)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Runs `each(s, e)` for every exec at once; the wall time and each one's.
fn at_once(
    sandboxes: usize,
    execs: usize,
    each: impl Fn(usize, usize) + Sync,
) -> (Duration, Vec<Duration>) {
    let began = Instant::now();
    let mut took: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..sandboxes)
            .flat_map(|s| (0..execs).map(move |e| (s, e)))
            .map(|(s, e)| {
                let each = &each;
                scope.spawn(move || {
                    let start = Instant::now();
                    each(s, e);
                    start.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    took.sort();
    (began.elapsed(), took)
}

fn report(
    name: &str,
    total_mib: f64,
    (wall, took): &(Duration, Vec<Duration>),
    base: Option<f64>,
) -> f64 {
    let rate = total_mib / wall.as_secs_f64();
    let ratio = base.map_or(String::new(), |b| {
        format!("  {:5.1} % of the baseline", rate / b * 100.0)
    });
    println!(
        "{name:<44} {:7.2} s {:8.1} MiB/s  exec p50 {:6.0} ms  p99 {:6.0} ms{ratio}",
        wall.as_secs_f64(),
        rate,
        quantile(took, 0.5).as_secs_f64() * 1e3,
        quantile(took, 0.99).as_secs_f64() * 1e3,
    );
    rate
}

pub fn run(sandboxes: usize, execs: usize, kib: usize) {
    let backend = std::env::var("BACKEND").unwrap_or_else(|_| {
        if Path::new("/usr/bin/bwrap").exists() {
            "bwrap"
        } else {
            "none"
        }
        .to_owned()
    });
    let bytes = kib << 10;
    let total_mib = (sandboxes * execs * bytes) as f64 / (1 << 20) as f64;
    println!(
        "{sandboxes} sandboxes x {execs} concurrent execs of {kib} KiB ({total_mib:.0} MiB), \
         every byte checked; backend {backend}"
    );

    let direct = at_once(sandboxes, execs, |s, e| {
        let line = line_of(s, e);
        let mut child = Command::new("sh")
            .args(["-c", &script(&line, bytes)])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = Vec::new();
        child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
        assert!(child.wait().unwrap().success());
        assert!(intact(&out, &line, bytes), "the host's {line}: other bytes");
    });
    let base = report(
        "on the host, read from pipes (baseline)",
        total_mib,
        &direct,
        None,
    );

    let dir = tempfile::tempdir().unwrap();
    let workdir = dir.path().join("w");
    std::fs::create_dir(&workdir).unwrap();
    let server = Server::start(dir.path());
    let ids: Vec<String> = (0..sandboxes).map(|s| format!("load{s}")).collect();
    for id in &ids {
        let spec = json!({"sessionId": id, "bindMounts": [{"hostPath": workdir}], "guestWorkdir": workdir});
        let (status, body) =
            server.call("POST", &format!("/v1/sandboxes?backend={backend}"), &spec);
        assert_eq!(
            status,
            201,
            "creating {id}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    let api = at_once(sandboxes, execs, |s, e| {
        let line = line_of(s, e);
        let argv = json!({"argv": ["sh", "-c", script(&line, bytes)]});
        let (status, stream) =
            server.call("POST", &format!("/v1/sandboxes/{}/execs", ids[s]), &argv);
        assert_eq!(
            status,
            200,
            "exec {line}: {}",
            String::from_utf8_lossy(&stream)
        );
        let (out, exited) = stdout_of(&stream);
        assert!(exited, "exec {line} did not exit 0");
        assert!(
            intact(&out, &line, bytes),
            "exec {line}: other bytes than its own"
        );
    });
    report(
        &format!("over the API ({backend}), NDJSON"),
        total_mib,
        &api,
        Some(base),
    );
    for id in &ids {
        server.call("DELETE", &format!("/v1/sandboxes/{id}"), &json!({}));
    }
}
