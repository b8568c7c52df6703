//! The real agent binary, hosted (`--serve-stdio`), driven over pipes with
//! the protocol crate: what the host side will see from the guest.

// Test helpers outside `#[test]` functions: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use sandbox_microvm_proto::window::GRANT_STEP;
use sandbox_microvm_proto::{
    CHUNK, Egress, Exec, Exit, Failed, Frame, Hello, Kind, Mounted, PtySize, Signal, Started,
    TunnelOpen, VERSION, WINDOW,
};

/// Long enough for a loaded CI machine, short enough to fail a hang.
const TIMEOUT: Duration = Duration::from_secs(20);
const HOST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

struct Agent {
    process: Child,
    input: Option<ChildStdin>,
    /// Every frame the agent sent, in order; `None` at end of file.
    frames: Receiver<Option<Frame>>,
    /// Frames read but not asked for yet, per stream.
    pending: HashMap<u32, VecDeque<Frame>>,
    /// Streams whose `Started` arrived.
    started: Vec<u32>,
    /// Streams whose last frame (`Exit` or `Failed`) arrived.
    ended: Vec<u32>,
    hello: Hello,
    /// Acknowledge output as it is read, as the host does (`Credit`).
    auto_credit: bool,
}

/// What one command did.
#[derive(Debug, Default)]
struct Outcome {
    started: Option<i32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exit: Option<Exit>,
    failed: Option<Failed>,
    /// Stdout/Stderr frame sizes.
    chunks: Vec<usize>,
}

impl Agent {
    fn start() -> Agent {
        let mut process = Command::new(env!("CARGO_BIN_EXE_cc-microvm-agent"))
            .arg("--serve-stdio")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut output = process.stdout.take().unwrap();
        let (to, frames) = mpsc::channel();
        thread::spawn(move || {
            loop {
                match Frame::read_from(&mut output) {
                    Ok(Some(frame)) => {
                        if to.send(Some(frame)).is_err() {
                            return;
                        }
                    }
                    Ok(None) => return drop(to.send(None)),
                    Err(e) => panic!("bad frame from the agent: {e}"),
                }
            }
        });
        let input = process.stdin.take();
        let mut agent = Agent {
            process,
            input,
            frames,
            pending: HashMap::new(),
            started: Vec::new(),
            ended: Vec::new(),
            auto_credit: true,
            hello: Hello {
                version: 0,
                boot_id: String::new(),
            },
        };
        let hello = agent.next_any().expect("a Hello");
        assert_eq!((hello.stream, hello.kind), (0, Kind::Hello));
        agent.hello = hello.body().unwrap();
        agent
    }

    fn send(&mut self, frame: Frame) {
        let input = self.input.as_mut().unwrap();
        frame.write_to(input).unwrap();
    }

    fn exec(&mut self, stream: u32, argv: &[&str], stdin: bool) {
        self.exec_with(
            stream,
            Exec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                env: vec![("PATH".into(), HOST_PATH.into())],
                cwd: None,
                stdin,
                pty: None,
            },
        );
    }

    fn exec_with(&mut self, stream: u32, exec: Exec) {
        self.send(Frame::json(stream, Kind::Exec, &exec));
    }

    fn stdin(&mut self, stream: u32, data: &[u8]) {
        self.send(Frame::new(stream, Kind::Stdin, data.to_vec()));
    }

    fn credit(&mut self, stream: u32, bytes: u32) {
        self.send(Frame::new(
            stream,
            Kind::Credit,
            bytes.to_le_bytes().to_vec(),
        ));
    }

    fn signal(&mut self, stream: u32, signal: i32) {
        self.send(Frame::json(stream, Kind::Signal, &Signal { signal }));
    }

    /// The next frame of any stream, in wire order; `None` at end of file.
    fn next_any(&mut self) -> Option<Frame> {
        let frame = self
            .frames
            .recv_timeout(TIMEOUT)
            .expect("the agent went silent")?;
        assert!(
            !self.ended.contains(&frame.stream),
            "{:?} frame after the end of stream {}",
            frame.kind,
            frame.stream
        );
        let started = self.started.contains(&frame.stream);
        match frame.kind {
            Kind::Started => {
                assert!(!started, "two Started on stream {}", frame.stream);
                self.started.push(frame.stream);
            }
            Kind::Stdout | Kind::Stderr | Kind::Exit => {
                assert!(
                    started,
                    "{:?} before Started on stream {}",
                    frame.kind, frame.stream
                );
                if frame.kind != Kind::Exit && self.auto_credit {
                    self.credit(frame.stream, frame.payload.len() as u32);
                }
            }
            Kind::Failed => assert!(!started, "Failed after Started on stream {}", frame.stream),
            _ => {}
        }
        if matches!(frame.kind, Kind::Exit | Kind::Failed) {
            self.ended.push(frame.stream);
        }
        Some(frame)
    }

    /// The next frame of `stream`, keeping others for later.
    fn next(&mut self, stream: u32) -> Frame {
        if let Some(frame) = self.pending.entry(stream).or_default().pop_front() {
            return frame;
        }
        loop {
            let frame = self.next_any().expect("the agent closed its output");
            if frame.stream == stream {
                return frame;
            }
            self.pending
                .entry(frame.stream)
                .or_default()
                .push_back(frame);
        }
    }

    /// Everything `stream` sends up to its last frame.
    fn outcome(&mut self, stream: u32) -> Outcome {
        let mut outcome = Outcome::default();
        loop {
            let frame = self.next(stream);
            match frame.kind {
                Kind::Started => outcome.started = Some(frame.body::<Started>().unwrap().pid),
                Kind::Stdout | Kind::Stderr => {
                    outcome.chunks.push(frame.payload.len());
                    if frame.kind == Kind::Stdout {
                        outcome.stdout.extend(frame.payload);
                    } else {
                        outcome.stderr.extend(frame.payload);
                    }
                }
                Kind::Exit => {
                    outcome.exit = Some(frame.body().unwrap());
                    return outcome;
                }
                Kind::Failed => {
                    outcome.failed = Some(frame.body().unwrap());
                    return outcome;
                }
                kind => panic!("unexpected {kind:?} on stream {stream}"),
            }
        }
    }

    fn run(&mut self, stream: u32, argv: &[&str]) -> Outcome {
        self.exec(stream, argv, false);
        self.outcome(stream)
    }

    /// Shuts the agent down; it must exit cleanly and send nothing more
    /// on ended streams (checked by `next_any`).
    fn shutdown(mut self) {
        self.send(Frame::new(0, Kind::Shutdown, Vec::new()));
        while self.next_any().is_some() {}
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.process.try_wait().unwrap() {
                assert!(status.success(), "agent exited with {status}");
                return;
            }
            assert!(Instant::now() < deadline, "the agent did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn exited(code: i32) -> Option<Exit> {
    Some(Exit {
        code: Some(code),
        signal: None,
    })
}

fn killed(signal: i32) -> Option<Exit> {
    Some(Exit {
        code: None,
        signal: Some(signal),
    })
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("agent-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Deterministic bytes covering every value.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn is_alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>; its state is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Pids (and states) of the processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) S ppid ...": parse after the last ')'.
        let mut rest = stat.rsplit(')').next().unwrap_or("").split_whitespace();
        let state = rest.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let ppid = rest.next().and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push((pid, state));
        }
    }
    found
}

#[test]
fn hello_then_ping_pong() {
    let mut agent = Agent::start();
    assert_eq!(agent.hello.version, VERSION);
    assert!(!agent.hello.boot_id.is_empty());
    agent.send(Frame::new(0, Kind::Ping, b"\x00echo\xff".to_vec()));
    let pong = agent.next(0);
    assert_eq!(
        (pong.kind, pong.payload),
        (Kind::Pong, b"\x00echo\xff".to_vec())
    );
    agent.send(Frame::new(9, Kind::Ping, Vec::new()));
    let pong = agent.next(9);
    assert_eq!((pong.kind, pong.payload.len()), (Kind::Pong, 0));
    agent.shutdown();
}

#[test]
fn stdout_and_stderr_bytes_and_exit_code() {
    let dir = scratch("bytes");
    let all: Vec<u8> = (0..=255u8).cycle().take(256 * 3).collect();
    std::fs::write(dir.join("all"), &all).unwrap();
    let script = format!(
        "cat '{}'; printf 'to\\nerr' >&2; exit 3",
        dir.join("all").display()
    );
    let mut agent = Agent::start();
    let outcome = agent.run(1, &["sh", "-c", &script]);
    assert!(outcome.started.unwrap() > 0);
    assert_eq!(outcome.stdout, all);
    assert_eq!(outcome.stderr, b"to\nerr");
    assert_eq!(outcome.exit, exited(3));
    assert_eq!(agent.run(2, &["true"]).exit, exited(0));
    agent.shutdown();
}

#[test]
fn large_output_arrives_whole_in_chunks() {
    let dir = scratch("large");
    let data = noise(3 << 20);
    std::fs::write(dir.join("data"), &data).unwrap();
    let mut agent = Agent::start();
    // The same bytes on both pipes at once.
    let path = dir.join("data").display().to_string();
    let script = format!("cat '{path}' >&2 & cat '{path}'; wait");
    let outcome = agent.run(1, &["sh", "-c", &script]);
    assert_eq!(outcome.exit, exited(0));
    assert!(
        outcome.stdout == data,
        "stdout differs ({} bytes)",
        outcome.stdout.len()
    );
    assert!(
        outcome.stderr == data,
        "stderr differs ({} bytes)",
        outcome.stderr.len()
    );
    assert!(outcome.chunks.iter().all(|&n| n > 0 && n <= CHUNK));
    agent.shutdown();
}

#[test]
fn death_by_signal_is_reported_as_such() {
    let mut agent = Agent::start();
    assert_eq!(agent.run(1, &["sh", "-c", "kill -9 $$"]).exit, killed(9));
    agent.shutdown();
}

#[test]
fn commands_that_cannot_start_fail_with_errno() {
    let dir = scratch("fail");
    let not_executable = dir.join("plain");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    let mut agent = Agent::start();

    let missing = agent.run(1, &["no-such-program-cc-agent"]).failed.unwrap();
    assert_eq!(missing.errno, libc::ENOENT);
    assert!(
        missing.message.contains("no-such-program-cc-agent"),
        "{}",
        missing.message
    );

    let missing_path = agent.run(2, &["/nonexistent/bin/x"]).failed.unwrap();
    assert_eq!(missing_path.errno, libc::ENOENT);

    let denied = agent
        .run(3, &[not_executable.to_str().unwrap()])
        .failed
        .unwrap();
    assert_eq!(denied.errno, libc::EACCES);

    agent.exec_with(
        4,
        Exec {
            argv: vec!["/bin/sh".into(), "-c".into(), "true".into()],
            cwd: Some("/nonexistent-dir".into()),
            ..Exec::default()
        },
    );
    let bad_cwd = agent.outcome(4).failed.unwrap();
    assert_eq!(bad_cwd.errno, libc::ENOENT);
    assert!(
        bad_cwd.message.contains("/nonexistent-dir"),
        "{}",
        bad_cwd.message
    );

    assert_eq!(agent.run(5, &[]).failed.unwrap().errno, libc::EINVAL);
    agent.send(Frame::new(6, Kind::Exec, b"{not json".to_vec()));
    assert_eq!(agent.outcome(6).failed.unwrap().errno, libc::EINVAL);

    // The agent is still fine.
    assert_eq!(agent.run(7, &["true"]).exit, exited(0));
    agent.shutdown();
}

#[test]
fn env_is_exactly_the_given_one_and_cwd_applies() {
    let mut agent = Agent::start();
    // No PATH given: `env` is found on the default search path.
    agent.exec_with(
        1,
        Exec {
            argv: vec!["env".into()],
            env: vec![("B".into(), "2".into()), ("A".into(), "x y=z".into())],
            ..Exec::default()
        },
    );
    let outcome = agent.outcome(1);
    assert_eq!(outcome.exit, exited(0));
    assert_eq!(String::from_utf8(outcome.stdout).unwrap(), "B=2\nA=x y=z\n");

    agent.exec_with(
        2,
        Exec {
            argv: vec!["sh".into(), "-c".into(), "pwd; echo \"$FOO\"".into()],
            env: vec![
                ("PATH".into(), HOST_PATH.into()),
                ("FOO".into(), "bar".into()),
            ],
            cwd: Some("/".into()),
            stdin: false,
            pty: None,
        },
    );
    let outcome = agent.outcome(2);
    assert_eq!(String::from_utf8(outcome.stdout).unwrap(), "/\nbar\n");
    // Without `stdin`, stdin is /dev/null.
    let outcome = agent.run(3, &["sh", "-c", "wc -c; readlink /proc/self/fd/0"]);
    assert_eq!(
        String::from_utf8(outcome.stdout)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", "/dev/null"]
    );
    agent.shutdown();
}

#[test]
fn stdin_round_trip_and_end_of_file() {
    let mut agent = Agent::start();
    agent.exec(1, &["cat"], true);
    let data = noise(300_000);
    for chunk in data.chunks(50_000) {
        agent.stdin(1, chunk);
    }
    agent.stdin(1, b"");
    let outcome = agent.outcome(1);
    assert_eq!(outcome.exit, exited(0));
    assert!(
        outcome.stdout == data,
        "stdout differs ({} bytes)",
        outcome.stdout.len()
    );

    // A command that never reads its stdin stalls nothing.
    agent.exec(2, &["sleep", "100"], true);
    assert_eq!(agent.next(2).kind, Kind::Started);
    for _ in 0..8 {
        agent.stdin(2, &noise(64 << 10));
    }
    agent.send(Frame::new(0, Kind::Ping, b"still there".to_vec()));
    assert_eq!(agent.next(0).payload, b"still there");
    agent.signal(2, libc::SIGKILL);
    assert_eq!(agent.outcome(2).exit, killed(libc::SIGKILL));
    agent.shutdown();
}

/// `Exec.pty`: the command runs on a terminal of the given size — stdin,
/// stdout and stderr are it, it is the controlling terminal, everything
/// comes as `Stdout` — and `Resize` changes the size (the shell sees the
/// new one); closing stdin types ^D, which ends `cat`.
#[test]
fn a_terminal_has_its_size_and_follows_resizes() {
    let mut agent = Agent::start();
    let script = "tty; stty size; echo to-stderr >&2; read x; stty size; echo got=$x";
    agent.exec_with(
        1,
        Exec {
            argv: ["sh", "-c", script].map(String::from).to_vec(),
            env: vec![("PATH".into(), HOST_PATH.into())],
            cwd: None,
            stdin: true,
            pty: Some(PtySize { cols: 80, rows: 24 }),
        },
    );
    assert_eq!(agent.next(1).kind, Kind::Started);
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("to-stderr") {
        let frame = agent.next(1);
        assert_eq!(frame.kind, Kind::Stdout, "{:?}", frame);
        seen.extend(frame.payload);
    }
    agent.send(Frame::json(
        1,
        Kind::Resize,
        &PtySize {
            cols: 100,
            rows: 40,
        },
    ));
    agent.stdin(1, b"go\n");
    let rest = agent.outcome(1);
    seen.extend(rest.stdout);
    let text = String::from_utf8_lossy(&seen).replace('\r', "");
    assert_eq!(rest.exit, exited(0), "{text}");
    assert!(rest.stderr.is_empty());
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{text}");
    assert_eq!(lines[1], "24 80", "{text}");
    assert!(lines.contains(&"40 100"), "{text}");
    assert!(lines.contains(&"got=go"), "{text}");

    agent.exec_with(
        2,
        Exec {
            argv: vec!["cat".into()],
            env: vec![("PATH".into(), HOST_PATH.into())],
            cwd: None,
            stdin: true,
            pty: Some(PtySize { cols: 80, rows: 24 }),
        },
    );
    agent.stdin(2, b"line\n");
    agent.stdin(2, b"");
    let outcome = agent.outcome(2);
    assert_eq!(outcome.exit, exited(0));
    assert!(String::from_utf8_lossy(&outcome.stdout).contains("line"));
    agent.shutdown();
}

/// Flow control per stream: output nobody acknowledges stops at the
/// window — exactly `WINDOW` bytes arrive and the command waits — while
/// another stream runs to its end and the control stream answers; credit
/// lets the rest through.
#[test]
fn unacknowledged_output_stops_at_the_window_and_stalls_nothing_else() {
    let mut agent = Agent::start();
    agent.auto_credit = false;
    let total = 3 * WINDOW as usize;
    agent.exec(1, &["head", "-c", &total.to_string(), "/dev/zero"], false);
    assert_eq!(agent.next(1).kind, Kind::Started);
    let mut received = 0usize;
    while received < WINDOW as usize {
        let frame = agent.next(1);
        assert_eq!(frame.kind, Kind::Stdout, "{frame:?}");
        received += frame.payload.len();
    }
    assert_eq!(received, WINDOW as usize, "more than the window was sent");
    agent.auto_credit = true;
    let other = agent.run(2, &["echo", "meanwhile"]);
    assert_eq!(other.stdout, b"meanwhile\n");
    agent.send(Frame::new(0, Kind::Ping, b"still there".to_vec()));
    assert_eq!(agent.next(0).payload, b"still there");
    assert!(
        agent.pending.get(&1).is_none_or(|q| q.is_empty()),
        "stream 1 sent past its window"
    );
    agent.credit(1, WINDOW);
    let rest = agent.outcome(1);
    assert_eq!(rest.exit, exited(0));
    assert_eq!(received + rest.stdout.len(), total);
    agent.shutdown();
}

/// Flow control on a tunnel, both ways: what a guest program sends reaches
/// the host at most a window ahead of the host's credit; what the host
/// sends is acknowledged a step at a time as the agent writes it into the
/// guest socket. (Hosted, the agent listens on the host's loopback.)
#[test]
fn tunnels_send_within_the_window_and_acknowledge_what_they_wrote() {
    let mut agent = Agent::start();
    let port = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().port()
    };
    agent.send(Frame::json(5, Kind::Egress, &Egress { ports: vec![port] }));
    let listening: Mounted = agent.next(5).body().unwrap();
    assert_eq!(listening.error, None);
    let mut program = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let total = 3 * WINDOW as usize;
    let writer = {
        let mut program = program.try_clone().unwrap();
        thread::spawn(move || program.write_all(&vec![7u8; total]))
    };
    let open = agent.next_any().unwrap();
    assert_eq!(open.kind, Kind::TunnelOpen, "{open:?}");
    let _: TunnelOpen = open.body().unwrap();
    let tunnel = open.stream;
    let mut received = 0usize;
    while received < WINDOW as usize {
        let frame = agent.next(tunnel);
        assert_eq!(frame.kind, Kind::TunnelData, "{frame:?}");
        received += frame.payload.len();
    }
    assert_eq!(received, WINDOW as usize, "more than the window was sent");
    agent.send(Frame::new(0, Kind::Ping, b"still there".to_vec()));
    assert_eq!(agent.next(0).payload, b"still there");
    assert!(
        agent.pending.get(&tunnel).is_none_or(|q| q.is_empty()),
        "the tunnel sent past its window"
    );
    while received < total {
        agent.send(Frame::new(
            tunnel,
            Kind::Credit,
            (GRANT_STEP).to_le_bytes().to_vec(),
        ));
        let frame = agent.next(tunnel);
        assert_eq!(frame.kind, Kind::TunnelData, "{frame:?}");
        received += frame.payload.len();
    }
    writer.join().unwrap().unwrap();

    // Host → guest: acknowledged as written into the socket.
    let chunk = vec![9u8; CHUNK];
    let chunks = (GRANT_STEP as usize).div_ceil(CHUNK);
    for _ in 0..chunks {
        agent.send(Frame::new(tunnel, Kind::TunnelData, chunk.clone()));
    }
    let mut got = vec![0u8; chunks * CHUNK];
    std::io::Read::read_exact(&mut program, &mut got).unwrap();
    let ack = agent.next(tunnel);
    assert_eq!(ack.kind, Kind::Credit, "{ack:?}");
    let acked = u32::from_le_bytes(ack.payload.try_into().unwrap());
    assert!(acked >= GRANT_STEP, "{acked}");
    agent.shutdown();
}

#[test]
fn signal_reaches_the_whole_process_group() {
    let mut agent = Agent::start();
    // `sh` waits on `sleep`: both must die for stdout to close.
    agent.exec(1, &["sh", "-c", "sleep 100; echo never"], false);
    let started = agent.next(1);
    assert_eq!(started.kind, Kind::Started);
    let begun = Instant::now();
    agent.signal(1, libc::SIGTERM);
    let outcome = agent.outcome(1);
    assert_eq!(outcome.exit, killed(libc::SIGTERM));
    assert!(outcome.stdout.is_empty());
    assert!(begun.elapsed() < Duration::from_secs(5));

    // A signal sent right behind the Exec is not lost.
    agent.exec(2, &["sleep", "100"], false);
    agent.signal(2, libc::SIGKILL);
    assert_eq!(agent.outcome(2).exit, killed(libc::SIGKILL));
    agent.shutdown();
}

#[test]
fn concurrent_commands_keep_their_streams_apart() {
    let mut agent = Agent::start();
    agent.exec(1, &["cat"], true);
    agent.exec(2, &["sh", "-c", "cat >&2"], true);
    assert_eq!(agent.next(1).kind, Kind::Started);
    assert_eq!(agent.next(2).kind, Kind::Started);
    // Strictly alternating: each answer arrives while the other command
    // is still running.
    for round in 0..3 {
        let one = format!("one {round}\n");
        agent.stdin(1, one.as_bytes());
        let frame = agent.next(1);
        assert_eq!(
            (frame.kind, frame.payload),
            (Kind::Stdout, one.into_bytes())
        );
        let two = format!("two {round}\n");
        agent.stdin(2, two.as_bytes());
        let frame = agent.next(2);
        assert_eq!(
            (frame.kind, frame.payload),
            (Kind::Stderr, two.into_bytes())
        );
    }
    agent.stdin(2, b"");
    assert_eq!(agent.next(2).kind, Kind::Exit);
    agent.stdin(1, b"");
    assert_eq!(agent.next(1).kind, Kind::Exit);
    agent.shutdown();
}

#[test]
fn exit_waits_for_output_of_what_the_command_left_behind() {
    let mut agent = Agent::start();
    let outcome = agent.run(1, &["sh", "-c", "(sleep 0.3; echo late) & exit 5"]);
    assert_eq!(outcome.stdout, b"late\n");
    assert_eq!(outcome.exit, exited(5));
    agent.shutdown();
}

#[test]
fn orphans_are_reaped() {
    let mut agent = Agent::start();
    let me = agent.process.id();
    let outcome = agent.run(1, &["sh", "-c", "sleep 0.5 >/dev/null 2>&1 & echo $!"]);
    assert_eq!(outcome.exit, exited(0));
    let orphan: i32 = String::from_utf8(outcome.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Adopted by the agent (a subreaper when hosted, PID 1 in the guest)...
    assert!(children_of(me).iter().any(|&(pid, _)| pid == orphan));
    // ...and reaped when it ends.
    let deadline = Instant::now() + TIMEOUT;
    while !children_of(me).is_empty() {
        assert!(Instant::now() < deadline, "left: {:?}", children_of(me));
        thread::sleep(Duration::from_millis(20));
    }
    agent.shutdown();
}

#[test]
fn shutdown_kills_running_commands() {
    let mut agent = Agent::start();
    agent.exec(1, &["sleep", "100"], false);
    let pid = agent.next(1).body::<Started>().unwrap().pid;
    assert!(is_alive(pid));
    agent.shutdown();
    let deadline = Instant::now() + TIMEOUT;
    while is_alive(pid) {
        assert!(Instant::now() < deadline, "{pid} survived the shutdown");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn closing_the_transport_ends_the_agent() {
    let mut agent = Agent::start();
    agent.exec(1, &["sleep", "100"], false);
    let pid = agent.next(1).body::<Started>().unwrap().pid;
    drop(agent.input.take());
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(status) = agent.process.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "the agent did not exit");
        thread::sleep(Duration::from_millis(10));
    }
    while is_alive(pid) {
        assert!(Instant::now() < deadline, "{pid} survived the agent");
        thread::sleep(Duration::from_millis(10));
    }
    // And garbage on the wire ends it too, with an error.
    let mut agent = Agent::start();
    agent
        .input
        .as_mut()
        .unwrap()
        .write_all(&[0, 0, 0, 0, 1, 0, 0, 0, 99])
        .unwrap();
    agent.input.as_mut().unwrap().flush().unwrap();
    while agent.process.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline + TIMEOUT,
            "the agent did not exit"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert!(!agent.process.try_wait().unwrap().unwrap().success());
}
