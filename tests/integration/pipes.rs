//! `cc_server run`'s stdout and stdin at pipe speed (SPEC F10, G4): on
//! backends that announce `exec.host-fds` the backend
//! copies between `run`'s own descriptors and the command's pipes. Nothing
//! may be lost, reordered, or left blocked, backpressure and SIGPIPE work
//! as with a direct pipe, and `run`'s descriptors never reach the command.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;

use crate::util::*;

/// The backends to try: `none` always, `bwrap` where it is installed.
fn backends() -> Vec<&'static str> {
    let mut names = vec!["none"];
    if bwrap_installed() {
        names.push("bwrap");
    }
    names
}

fn plugins_for(backend: &str) -> Plugins {
    match backend {
        "bwrap" => Plugins::with_bwrap(),
        _ => Plugins::with_none(),
    }
}

/// `cc_server run --backend B -- ARGS…`, in `dir` (bound, the workdir).
fn run_in(plugins: &Plugins, backend: &str, dir: &std::path::Path, args: &[&str]) -> CcServer {
    CcServer::new(plugins)
        .arg("run")
        .args(["--backend", backend, "--"])
        .args(args)
        .current_dir(dir)
}

/// Reproducible bytes of every value (xorshift), so a lost, doubled or
/// moved chunk shows.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn same(got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && got == want
}

/// F10: 64 MiB through stdout and 64 MiB through stdin (a pipe, then a
/// regular file) arrive byte for byte.
#[test]
fn large_output_and_input_pass_byte_exact() {
    let data = noise(64 << 20);
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("noise.bin");
        std::fs::write(&file, &data).unwrap();
        let out = run_in(&plugins, backend, tmp.path(), &["cat", "noise.bin"]).output();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert!(
            same(&out.stdout, &data),
            "{backend}: stdout differs ({} bytes)",
            out.stdout.len()
        );

        let out = run_in(&plugins, backend, tmp.path(), &["cat"]).output_with_stdin(&data);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert!(
            same(&out.stdout, &data),
            "{backend}: stdin→stdout differs ({} bytes)",
            out.stdout.len()
        );

        let result = tmp.path().join("result.bin");
        let child = run_in(&plugins, backend, tmp.path(), &["cat"]).spawn_with(
            Stdio::from(std::fs::File::open(&file).unwrap()),
            Stdio::from(std::fs::File::create(&result).unwrap()),
        );
        let (status, stderr) = wait_or_kill(child, Duration::from_secs(120));
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{backend}: {stderr}"
        );
        let got = std::fs::read(&result).unwrap();
        let first = got.iter().zip(&data).position(|(a, b)| a != b);
        assert!(
            same(&got, &data),
            "{backend}: file→file differs: {} bytes, first difference at {first:?}; {stderr}",
            got.len()
        );
    }
}

/// F10: a reader that takes its time slows the command down (the pipes
/// fill, the command waits) and loses nothing.
#[test]
fn a_slow_reader_loses_nothing() {
    let want: Vec<u8> = (1..=400_000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        let mut child = run_in(&plugins, backend, tmp.path(), &["seq", "1", "400000"]).spawn();
        let mut stdout = child.stdout.take().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let mut reads = 0u32;
        // Nothing read for a while: every pipe on the way fills up.
        std::thread::sleep(Duration::from_millis(500));
        loop {
            let n = stdout.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            reads += 1;
            if reads.is_multiple_of(64) {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let (status, stderr) = wait_or_kill(child, Duration::from_secs(60));
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{backend}: {stderr}"
        );
        assert!(
            same(&got, &want),
            "{backend}: {} bytes, want {}",
            got.len(),
            want.len()
        );
    }
}

/// F10: when `run`'s reader leaves, the command gets what a pipe would
/// give it and ends by SIGPIPE (141); `cc_server` ends with it — on both
/// backends: a command under `bwrap` starts with every signal disposition
/// at its default, not with sandbox-init's ignored SIGPIPE.
#[test]
fn a_reader_that_leaves_ends_the_command() {
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        let mut child = run_in(&plugins, backend, tmp.path(), &["yes"]).spawn();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 4];
        stdout.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"y\ny\n");
        drop(stdout);
        let (status, stderr) = wait_or_kill(child, Duration::from_secs(30));
        let code = status.and_then(|s| s.code());
        assert!(
            status.is_some(),
            "{backend}: cc_server kept running; stderr:\n{stderr}"
        );
        assert_eq!(code, Some(128 + libc::SIGPIPE), "{backend}: {stderr}");
    }
}

/// A command starts with no signal ignored (an ignored disposition survives
/// exec: PID 1's ignored SIGPIPE once reached every bwrap command, so
/// `yes | head` inside ended `yes` with an error, and a SIGPIPE sent for a
/// closed `run --json` stdout was lost).
#[test]
fn a_command_starts_with_no_signal_ignored() {
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        let out = run_in(
            &plugins,
            backend,
            tmp.path(),
            &["grep", "SigIgn", "/proc/self/status"],
        )
        .output();
        let text = String::from_utf8_lossy(&out.stdout);
        let mask = text
            .trim()
            .strip_prefix("SigIgn:\t")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        // Signals 1–31; the real-time ones are glibc's and the caller's.
        assert_eq!(mask.map(|m| m & 0x7fff_ffff), Some(0), "{backend}: {out:?}");
    }
}

/// F10, T-fd: with stdout on a regular file the command still writes into a
/// pipe of its own: it cannot name, `chmod` or truncate `run`'s file
/// through `/proc/self/fd/1`, and the file gets exactly its output. The
/// same with stdout on `/dev/null`, and stdin on a file.
#[test]
fn run_descriptors_never_reach_the_command() {
    let script = "readlink /proc/self/fd/0 /proc/self/fd/1; \
        chmod 0 /proc/self/fd/1 2>/dev/null; truncate -s 0 /proc/self/fd/1 2>/dev/null; \
        chmod 0 /proc/self/fd/0 2>/dev/null; \
        seq 1 100000";
    for backend in backends() {
        let plugins = plugins_for(backend);
        let work = tempfile::tempdir().unwrap();
        // Outside every bind of the sandbox.
        let elsewhere = tempfile::tempdir().unwrap();
        let out_path = elsewhere.path().join("out.txt");
        let in_path = elsewhere.path().join("in.txt");
        std::fs::write(&in_path, "input\n").unwrap();
        std::fs::set_permissions(&in_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let out_file = std::fs::File::create(&out_path).unwrap();
        std::fs::set_permissions(&out_path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let child = run_in(&plugins, backend, work.path(), &["sh", "-c", script]).spawn_with(
            Stdio::from(std::fs::File::open(&in_path).unwrap()),
            Stdio::from(out_file),
        );
        let (status, stderr) = wait_or_kill(child, Duration::from_secs(60));
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{backend}: {stderr}"
        );
        let out = std::fs::read_to_string(&out_path).unwrap();
        let mut lines = out.lines();
        for fd in ["0", "1"] {
            let link = lines.next().unwrap_or_default();
            assert!(
                link.starts_with("pipe:["),
                "{backend}: fd {fd} is {link:?}, not a pipe"
            );
        }
        let numbers: Vec<&str> = lines.collect();
        assert_eq!(numbers.len(), 100_000, "{backend}: {stderr}");
        assert_eq!(numbers.last(), Some(&"100000"), "{backend}");
        for path in [&out_path, &in_path] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{backend}: {} was chmodded", path.display());
        }

        let child = run_in(
            &plugins,
            backend,
            work.path(),
            &["head", "-c", "67108864", "/dev/zero"],
        )
        .spawn_with(
            Stdio::null(),
            Stdio::from(std::fs::File::create("/dev/null").unwrap()),
        );
        let (status, stderr) = wait_or_kill(child, Duration::from_secs(60));
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{backend} into /dev/null: {stderr}"
        );
    }
}

/// F10: an endless stdin that the command never reads does not keep `run`
/// alive, and a command that stops reading early ends normally.
#[test]
fn stdin_nobody_reads_does_not_hold_the_run() {
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        for args in [&["true"][..], &["head", "-c", "10"][..]] {
            let mut child = run_in(&plugins, backend, tmp.path(), args)
                .spawn_with(Stdio::piped(), Stdio::piped());
            let mut stdin = child.stdin.take().unwrap();
            let writer = std::thread::spawn(move || {
                let chunk = vec![b'z'; 64 << 10];
                while stdin.write_all(&chunk).is_ok() {}
            });
            let mut stdout = child.stdout.take().unwrap();
            let mut got = Vec::new();
            stdout.read_to_end(&mut got).unwrap();
            let (status, stderr) = wait_or_kill(child, Duration::from_secs(60));
            assert_eq!(
                status.and_then(|s| s.code()),
                Some(0),
                "{backend} {args:?}: {stderr}"
            );
            let want: &[u8] = if args[0] == "true" {
                b""
            } else {
                b"zzzzzzzzzz"
            };
            assert_eq!(got, want, "{backend} {args:?}");
            writer.join().unwrap();
        }
    }
}

/// F10: stderr still passes separately (it carries the inferred
/// violations), and `--json` still gets every stdout byte as events.
#[test]
fn stderr_and_json_keep_the_event_path() {
    for backend in backends() {
        let plugins = plugins_for(backend);
        let tmp = tempfile::tempdir().unwrap();
        let out = run_in(
            &plugins,
            backend,
            tmp.path(),
            &["sh", "-c", "echo out; echo err >&2"],
        )
        .output();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "out\n", "{backend}");
        assert!(
            text(&out.stderr).lines().any(|l| l == "err"),
            "{backend}: {}",
            text(&out.stderr)
        );

        let out = CcServer::new(&plugins)
            .arg("run")
            .args([
                "--json",
                "--backend",
                backend,
                "--",
                "head",
                "-c",
                "3000000",
                "/dev/zero",
            ])
            .current_dir(tmp.path())
            .output();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend}: {}",
            text(&out.stderr)
        );
        let mut bytes = 0;
        for line in text(&out.stdout).lines() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            if event["type"] == "stdout" {
                bytes += stdout_bytes(&event);
            }
        }
        assert_eq!(bytes, 3_000_000, "{backend}");
    }
}

/// The byte count of one `--json` stdout event (`data`, or base64 `dataBase64`).
fn stdout_bytes(event: &serde_json::Value) -> usize {
    if let Some(data) = event["data"].as_str() {
        return data.len();
    }
    let b64 = event["dataBase64"]
        .as_str()
        .unwrap_or_else(|| panic!("{event}"));
    let pad = b64.bytes().rev().take_while(|b| *b == b'=').count();
    b64.len() / 4 * 3 - pad
}
