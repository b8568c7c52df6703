//! `sandbox-bench egress [MIB]`: downloads through a bwrap sandbox's egress
//! proxy (sandbox-init's forwarder in the sandbox → unix socket → the session's proxy → a
//! loopback server) against the same download straight from the host, in
//! the same run; and the latency a proxy hop adds to a small request.
//!
//! The server is in this process, on 127.0.0.1; the sandbox reaches it by
//! the name `bulk.test` (`--resolve`, `--allow-private`). curl measures
//! every transfer (`%{speed_download}`, `%{time_total}`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// Serves `bytes` bytes to every request, in 1 MiB writes, forever.
fn serve(bytes: u64) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for stream in listener.incoming().flatten() {
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut out = stream;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {bytes}\r\nConnection: close\r\n\r\n"
                );
                if out.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if out.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    port
}

fn cc_server() -> PathBuf {
    std::env::current_exe().unwrap().with_file_name("cc_server")
}

/// Runs `script` in a bwrap sandbox that may reach `bulk.test`.
fn in_sandbox(script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cc_server())
        .current_dir(dir.path())
        .args(["run", "--backend", "bwrap", "--allow-domain", "bulk.test"])
        .args([
            "--allow-private",
            "bulk.test",
            "--resolve",
            "bulk.test:127.0.0.1",
        ])
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the sandboxed run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn on_host(script: &str) -> String {
    let out = Command::new("sh").args(["-c", script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn numbers(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` curl runs of `args` against `url`, printing one figure each.
fn curls(n: usize, args: &str, url: &str, figure: &str) -> String {
    format!(
        "for i in $(seq {n}); do curl -sS {args} -o /dev/null -w '%{{{figure}}}\\n' {url}; done"
    )
}

pub fn run(mib: u64) {
    let big = serve(mib << 20);
    let small = serve(100);
    let rounds = 5;
    println!("download of {mib} MiB from a loopback server, median of {rounds}");
    let direct = median(numbers(&on_host(&curls(
        rounds,
        "--noproxy '*'",
        &format!("http://127.0.0.1:{big}/"),
        "speed_download",
    ))));
    let gbit = |bytes_per_s: f64| bytes_per_s * 8.0 / 1e9;
    println!(
        "  direct on the host (baseline)      {:>6.2} Gbit/s",
        gbit(direct)
    );
    for (name, args) in [
        ("sandbox → HTTP proxy (forward)", ""),
        ("sandbox → HTTP proxy (CONNECT)", "--proxytunnel"),
        ("sandbox → SOCKS5 proxy", "--socks5-hostname 127.0.0.1:1080"),
    ] {
        let speed = median(numbers(&in_sandbox(&curls(
            rounds,
            args,
            &format!("http://bulk.test:{big}/"),
            "speed_download",
        ))));
        println!(
            "  {name:<34} {:>6.2} Gbit/s  {:>5.1} % of direct",
            gbit(speed),
            100.0 * speed / direct
        );
    }
    let n = 50;
    println!("a 100-byte GET, median of {n} (curl's time_total, one curl per request)");
    let base = median(numbers(&on_host(&curls(
        n,
        "--noproxy '*'",
        &format!("http://127.0.0.1:{small}/"),
        "time_total",
    ))));
    println!(
        "  direct on the host (baseline)      {:>7.0} µs",
        base * 1e6
    );
    for (name, args) in [
        ("through the HTTP proxy", ""),
        ("through a new CONNECT tunnel", "--proxytunnel"),
    ] {
        let t = median(numbers(&in_sandbox(&curls(
            n,
            args,
            &format!("http://bulk.test:{small}/"),
            "time_total",
        ))));
        println!(
            "  {name:<34} {:>7.0} µs  (+{:.0} µs)",
            t * 1e6,
            (t - base) * 1e6
        );
    }
}
