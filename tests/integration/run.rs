//! `cc_server run`: one sandbox, one command, then destroy. Exit statuses,
//! pass-through of stdout/stderr/stdin, signals, `--json`, backend choice,
//! environment sanitization and cleanup.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::util::*;

/// `cc_server --plugins-dir … run ARGS…`.
fn run_cmd<S: AsRef<std::ffi::OsStr>>(plugins: &Plugins, args: &[S]) -> CcServer {
    CcServer::new(plugins).arg("run").args(args)
}

fn code(output: &std::process::Output) -> i32 {
    output.status.code().unwrap_or_else(|| {
        panic!(
            "cc_server ended by a signal: {:?}; stderr:\n{}",
            output.status,
            text(&output.stderr)
        )
    })
}

/// G5 (T14): `cc_server run -- echo hi` started in the temp dir — which
/// holds the server's runtime directory (`<temp>/cc_server-<uid>` without
/// `XDG_RUNTIME_DIR`: the kept probe, every session's proxy sockets) —
/// runs: on bwrap with that directory masked, empty inside while it is not
/// on the host; on `none`, where nothing is bound, with nothing to refuse. A
/// bind inside the runtime directory is still refused, on both.
#[test]
fn a_workdir_that_holds_the_runtime_dir_runs_with_it_hidden() {
    let plugins = Plugins::with_bwrap();
    let temp = std::env::temp_dir();
    // SAFETY: plain getter.
    let uid = unsafe { libc::geteuid() };
    let runtime = temp.join(format!("cc_server-{uid}"));
    let script = format!("echo hi; ls -A {} | wc -l", runtime.display());
    let mut backends = vec!["none"];
    if bwrap_installed() {
        backends.push("bwrap");
    }
    for backend in backends {
        let out = run_cmd(&plugins, &["--backend", backend, "--", "sh", "-c", &script])
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(&temp)
            .output();
        assert_eq!(code(&out), 0, "{backend}: {}", text(&out.stderr));
        let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
        assert_eq!(
            lines.first(),
            Some(&"hi"),
            "{backend}: {}",
            text(&out.stderr)
        );
        let inside: usize = lines[1].trim().parse().unwrap();
        let on_host = std::fs::read_dir(&runtime).unwrap().count();
        assert!(on_host > 0, "the runtime dir is empty on the host");
        if backend == "bwrap" {
            assert_eq!(inside, 0, "the runtime dir shows inside the sandbox");
        }
        let bind = format!("{}:ro", runtime.display());
        let out = run_cmd(
            &plugins,
            &["--backend", backend, "--bind", &bind, "--", "true"],
        )
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(&temp)
        .output();
        assert_eq!(code(&out), 125, "{backend}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("runtime directory"),
            "{backend}: {}",
            text(&out.stderr)
        );
    }
}

/// F10: stdout and stderr pass through separately; the exit status is the command's.
#[test]
fn stdout_and_stderr_pass_through_and_the_exit_code_is_the_commands() {
    let plugins = Plugins::with_none();
    let out = run_cmd(
        &plugins,
        &["--", "sh", "-c", "echo out; echo err >&2; exit 3"],
    )
    .output();
    assert_eq!(code(&out), 3, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    let stderr = text(&out.stderr);
    assert!(stderr.lines().any(|l| l == "err"), "stderr:\n{stderr}");
    assert!(
        !stderr.contains("out"),
        "stdout leaked into stderr:\n{stderr}"
    );
}

/// F10: output is binary-safe: 1 MiB of random bytes come out identical.
#[test]
fn binary_output_is_passed_through_byte_for_byte() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("random.bin");
    let mut random = Vec::new();
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .take(1 << 20)
        .read_to_end(&mut random)
        .unwrap();
    assert_eq!(random.len(), 1 << 20);
    std::fs::write(&file, &random).unwrap();
    let out = run_cmd(&plugins, &["--", "cat", file.to_str().unwrap()])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), random.len());
    assert!(out.stdout == random, "the bytes differ");
}

/// F10: 64 MiB on stdout and 8 MiB on stderr at the same time neither
/// deadlock nor lose a byte.
#[test]
fn large_output_on_both_streams_arrives_complete() {
    let plugins = Plugins::with_none();
    let out = run_cmd(
        &plugins,
        &[
            "--",
            "sh",
            "-c",
            "head -c 67108864 /dev/zero & head -c 8388608 /dev/zero >&2; wait",
        ],
    )
    .output();
    assert_eq!(
        code(&out),
        0,
        "stderr tail:\n{}",
        text(&out.stderr[out.stderr.len().saturating_sub(2000)..])
    );
    assert_eq!(out.stdout.len(), 64 << 20, "stdout byte count");
    assert!(
        out.stdout.iter().all(|b| *b == 0),
        "stdout is not all zeros"
    );
    // cc_server's own notice lines go to stderr too; count only the zeros.
    let zeros = out.stderr.iter().filter(|b| **b == 0).count();
    assert_eq!(zeros, 8 << 20, "stderr byte count");
}

/// F10: stdin is forwarded to the command, small and large.
#[test]
fn stdin_is_forwarded() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--", "cat"]).output_with_stdin(b"hello\n");
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n");

    let big = vec![b'x'; 5 << 20];
    let out = run_cmd(&plugins, &["--", "wc", "-c"]).output_with_stdin(&big);
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), (5 << 20).to_string());
}

/// F10: `--timeout` kills the command: 128 + SIGKILL, and says why.
#[test]
fn a_timeout_kills_the_command_with_137() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--timeout", "0.5", "--", "sleep", "60"]).output();
    assert_eq!(code(&out), 137, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("timeout"),
        "stderr:\n{}",
        text(&out.stderr)
    );
}

/// F10: `--timeout` must be a positive number; anything else is cc_server's own failure.
#[test]
fn a_non_positive_timeout_is_refused_with_125() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = run_cmd(&plugins, &["--timeout", "0", "--", "sh", "-c", &script]).output();
    assert_eq!(code(&out), 125, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--timeout"),
        "stderr:\n{}",
        text(&out.stderr)
    );
    assert!(
        !marker.exists(),
        "the command ran although the timeout was refused"
    );
}

/// F10: a command killed by a signal exits 128 + signal.
#[test]
fn a_command_killed_by_a_signal_exits_128_plus_signal() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--", "sh", "-c", "kill -TERM $$"]).output();
    assert_eq!(code(&out), 143, "stderr:\n{}", text(&out.stderr));
}

/// F10: SIGTERM, SIGINT and SIGHUP sent to `cc_server run` go to the
/// command, whose status is reported (128 + signal); the command is gone
/// afterwards. cc_server listens before the command starts, so once the
/// command has printed its pid a signal can no longer kill cc_server itself.
#[test]
fn signals_to_cc_server_are_forwarded_to_the_command() {
    let plugins = Plugins::with_none();
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let mut child = run_cmd(&plugins, &["--", "sh", "-c", "echo $$; exec sleep 60"]).spawn();
        let cc_pid = child.id() as i32;
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let command_pid: i32 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("not a pid: {line:?}"));
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(cc_pid, signal) };
        child.stdout = Some(stdout.into_inner());
        let out = wait_output(child, Duration::from_secs(60));
        assert_eq!(
            code(&out),
            128 + signal,
            "signal {signal}; stderr:\n{}",
            text(&out.stderr)
        );
        assert!(
            eventually(Duration::from_secs(30), || process_is_gone(command_pid)),
            "signal {signal}: the command {command_pid} survived"
        );
    }
}

/// F10: when the reader of cc_server's stdout goes away, the command gets
/// what a pipe would give it: SIGPIPE (141), and it does not run on.
#[test]
fn a_reader_that_goes_away_ends_the_command_with_sigpipe() {
    let plugins = Plugins::with_none();
    let mut child = run_cmd(&plugins, &["--", "yes"]).spawn();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 4];
    stdout.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"y\ny\n");
    drop(stdout);
    let (status, stderr) = wait_or_kill(child, Duration::from_secs(30));
    assert!(
        status.is_some(),
        "cc_server kept running after its reader left; stderr:\n{stderr}"
    );
    assert_eq!(
        status.unwrap().code(),
        Some(128 + libc::SIGPIPE),
        "stderr:\n{stderr}"
    );
}

/// F10, C4: a SIGTERM that reaches `cc_server run` just after the command
/// started must still be forwarded: cc_server exits 143 and nothing
/// survives. Here the command signals cc_server (its parent, with the `none`
/// backend) at once, the earliest moment a signal can come; cc_server must
/// not die of it and orphan the command in its own process group.
#[test]
fn sigterm_right_after_the_command_starts_is_forwarded() {
    let plugins = Plugins::with_none();
    for round in 0..20 {
        let tmp = tempfile::tempdir().unwrap();
        let out = run_cmd(
            &plugins,
            &[
                "--",
                "sh",
                "-c",
                "echo $$ > PIDFILE; kill -TERM $PPID; exec sleep 300",
            ],
        )
        .current_dir(tmp.path())
        .output();
        let pid = read_pid(&tmp.path().join("PIDFILE"));
        let gone = out.status.code().is_some()
            && eventually(Duration::from_secs(30), || process_is_gone(pid));
        if !gone {
            // SAFETY: plain syscall; cleaning up the orphan this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        assert!(
            out.status.code() == Some(143) && gone,
            "round {round}: cc_server ended with {:?}; the command {pid} {}",
            out.status,
            if gone {
                "is gone"
            } else {
                "was left running (killed by the test)"
            }
        );
    }
}

/// F10: a command that does not exist exits 127 naming it; one that may not be executed 126.
#[test]
fn not_found_is_127_and_not_executable_is_126() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--", "no-such-command-cc-test"]).output();
    assert_eq!(code(&out), 127, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no-such-command-cc-test"),
        "stderr:\n{}",
        text(&out.stderr)
    );

    let tmp = tempfile::tempdir().unwrap();
    let script = tmp.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho should-not-run\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = run_cmd(&plugins, &["--", script.to_str().unwrap()])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 126, "stderr:\n{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("should-not-run"));
}

/// F10, B8: `--json` prints one event per line: `started` (with the backend
/// really used) first, the output, `exit` with the code last.
#[test]
fn json_prints_ndjson_events_from_started_to_exit() {
    let plugins = Plugins::with_none();
    let out = run_cmd(
        &plugins,
        &[
            "--json",
            "--",
            "sh",
            "-c",
            "echo hello; echo oops >&2; exit 5",
        ],
    )
    .output();
    assert_eq!(code(&out), 5, "stderr:\n{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(events.len() >= 3, "{stdout}");
    assert_eq!(events[0]["type"], "started", "{stdout}");
    assert_eq!(events[0]["backend"], "none", "{stdout}");
    let exec_id = events[0]["execId"].clone();
    assert!(exec_id.is_u64(), "{stdout}");
    assert!(events.iter().all(|e| e["execId"] == exec_id), "{stdout}");
    let joined = |kind: &str| -> String {
        events
            .iter()
            .filter(|e| e["type"] == kind)
            .map(|e| e["data"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(joined("stdout"), "hello\n", "{stdout}");
    assert_eq!(joined("stderr"), "oops\n", "{stdout}");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "exit", "{stdout}");
    assert_eq!(last["exitCode"], 5, "{stdout}");
    // With --json the command's stderr is an event, not raw bytes on our stderr.
    assert!(
        !text(&out.stderr).contains("oops"),
        "stderr:\n{}",
        text(&out.stderr)
    );
}

/// F10: in `--json`, output that is not UTF-8 is sent as `dataBase64`.
#[test]
fn json_sends_binary_output_as_base64() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--json", "--", "printf", "\\377\\000"]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let events: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let stdout_events: Vec<_> = events.iter().filter(|e| e["type"] == "stdout").collect();
    assert_eq!(stdout_events.len(), 1, "{}", text(&out.stdout));
    assert_eq!(
        stdout_events[0]["dataBase64"],
        "/wA=",
        "{}",
        text(&out.stdout)
    );
    assert!(stdout_events[0].get("data").is_none());
}

/// C4, F10: when `run` returns, nothing the command started survives.
#[test]
fn background_processes_do_not_survive_the_run() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let out = run_cmd(
        &plugins,
        &["--", "sh", "-c", "sleep 300 & echo $! > PIDFILE"],
    )
    .current_dir(tmp.path())
    .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let pid = read_pid(&tmp.path().join("PIDFILE"));
    assert!(
        eventually(Duration::from_secs(30), || process_is_gone(pid)),
        "the background sleep {pid} outlived `cc_server run`"
    );
}

/// T32, SPEC G6: the `none` backend's cgroup for the server's
/// commands does not outlive the server — its watcher kills the group and
/// removes the tree once the server is gone (otherwise each `run` would
/// leave an empty `cc_server-<pid>-none` behind until the next server
/// swept it).
#[test]
fn a_none_run_leaves_no_cgroup_behind() {
    let plugins = Plugins::with_none();
    let script = "g=$(sed -n 's/^0:://p' /proc/self/cgroup); \
                  for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do \
                  [ -d \"$m$g\" ] && echo \"$m$g\" && break; done";
    let out = run_cmd(&plugins, &["--", "sh", "-c", script]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let exec_group = text(&out.stdout).trim().to_owned();
    let Some(server_group) = Path::new(&exec_group).ancestors().find(|dir| {
        dir.file_name().is_some_and(|n| {
            n.to_string_lossy().starts_with("cc_server-") && n.to_string_lossy().ends_with("-none")
        })
    }) else {
        skip_or_fail(format!(
            "commands are not tracked by a cgroup v2 group here ({exec_group:?}): CI must run the tests as root on a host with a cgroup2 mount (pure v2, or the hybrid `/sys/fs/cgroup/unified`)"
        ));
        return;
    };
    assert!(
        eventually(Duration::from_secs(20), || !server_group.exists()),
        "{} outlived its server",
        server_group.display()
    );
}

/// F1: a spec file is read strictly: an unknown field is named, malformed JSON refused (125).
#[test]
fn a_bad_spec_file_is_refused_with_125() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());

    let typo = tmp.path().join("typo.json");
    std::fs::write(&typo, r#"{"sessionId":"x","networkEnable":false}"#).unwrap();
    let out = run_cmd(
        &plugins,
        &["--spec", typo.to_str().unwrap(), "--", "sh", "-c", &script],
    )
    .output();
    assert_eq!(code(&out), 125, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("networkEnable"),
        "stderr:\n{}",
        text(&out.stderr)
    );

    let malformed = tmp.path().join("malformed.json");
    std::fs::write(&malformed, r#"{"sessionId":"#).unwrap();
    let out = run_cmd(
        &plugins,
        &[
            "--spec",
            malformed.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .output();
    assert_eq!(code(&out), 125, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("malformed.json"),
        "stderr:\n{}",
        text(&out.stderr)
    );

    assert!(!marker.exists(), "the command ran despite a bad spec");
}

/// F1: a valid spec file is used: its guestWorkdir is the command's directory.
#[test]
fn a_spec_file_sets_the_workdir() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let spec = tmp.path().join("spec.json");
    let body = serde_json::json!({"guestWorkdir": work, "networkEnabled": false});
    std::fs::write(&spec, body.to_string()).unwrap();
    let out = run_cmd(&plugins, &["--spec", spec.to_str().unwrap(), "--", "pwd"])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let printed = Path::new(text(&out.stdout).trim()).canonicalize().unwrap();
    assert_eq!(printed, work.canonicalize().unwrap());
}

/// B6: a name no backend answers to runs in `none`, with a notice naming it.
#[test]
fn an_unknown_backend_name_runs_in_none_with_a_notice() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--backend", "bwarp", "--", "echo", "ran"]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ran\n");
    let notices = own_lines(&out.stderr);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("`bwarp`") && notices[0].contains("`none`"),
        "{notices:?}"
    );
}

/// B7: an explicit `microvm` that cannot run fails loudly (125), never a silent downgrade.
#[test]
fn an_explicit_microvm_that_cannot_run_fails_with_125() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = run_cmd(
        &plugins,
        &["--backend", "microvm", "--", "sh", "-c", &script],
    )
    .output();
    assert_eq!(code(&out), 125, "stderr:\n{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("microvm") && stderr.contains("requested") && stderr.contains("cannot run"),
        "{stderr}"
    );
    assert!(
        !marker.exists(),
        "the command ran although microvm was unavailable"
    );
}

/// B6: `docker` and `native` both mean the platform's native backend
/// (bwrap on Linux); asked for by name and absent, that is an error (125)
/// naming it, not a silent `none`.
#[test]
fn docker_and_native_mean_the_native_backend() {
    let plugins = Plugins::with_none();
    for name in ["docker", "native"] {
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("ran");
        let script = format!("touch {}", marker.display());
        let out = run_cmd(&plugins, &["--backend", name, "--", "sh", "-c", &script]).output();
        assert_eq!(code(&out), 125, "{name}: stderr:\n{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("`bwrap`"),
            "{name}: stderr:\n{}",
            text(&out.stderr)
        );
        assert!(!marker.exists(), "{name}: the command ran");
    }
    // `none` by name is honoured silently.
    let out = run_cmd(&plugins, &["--backend", "none", "--", "echo", "x"]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert!(
        own_lines(&out.stderr).is_empty(),
        "stderr:\n{}",
        text(&out.stderr)
    );
}

/// F1: a `--bind` path that does not exist is refused (125), naming it.
#[test]
fn a_missing_bind_path_is_refused_with_125() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let out = run_cmd(&plugins, &["--bind", "no-such-dir:ro", "--", "true"])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 125, "stderr:\n{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no-such-dir"),
        "stderr:\n{}",
        text(&out.stderr)
    );
}

/// B5: `--sandbox off` overrides `--backend`: the command runs in `none`, with a notice.
#[test]
fn sandbox_off_flag_overrides_an_explicit_backend() {
    let plugins = Plugins::with_none();
    plugins.add(&fixtures().third_party);
    let out = CcServer::new(&plugins)
        .args([
            "--sandbox",
            "off",
            "run",
            "--json",
            "--backend",
            "fixture",
            "--",
            "echo",
            "x",
        ])
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["backend"], "none", "{}", text(&out.stdout));
    let notices = own_lines(&out.stderr);
    assert!(
        notices
            .iter()
            .any(|l| l.contains("switched off") && l.contains("`fixture`") && l.contains("`none`")),
        "{notices:?}"
    );
}

/// B5: `CC_SERVER_SANDBOX=off` behaves like `--sandbox off`.
#[test]
fn sandbox_off_env_behaves_like_the_flag() {
    let plugins = Plugins::with_none();
    plugins.add(&fixtures().third_party);
    let out = CcServer::new(&plugins)
        .env("CC_SERVER_SANDBOX", "off")
        .args(["run", "--json", "--backend", "fixture", "--", "echo", "x"])
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["backend"], "none", "{}", text(&out.stdout));
    let notices = own_lines(&out.stderr);
    assert!(
        notices
            .iter()
            .any(|l| l.contains("switched off") && l.contains("`fixture`")),
        "{notices:?}"
    );
}

/// B5: `--sandbox off` with no backend asked for runs in `none` silently.
#[test]
fn sandbox_off_without_a_backend_is_silent() {
    let plugins = Plugins::with_none();
    let out = CcServer::new(&plugins)
        .args(["--sandbox", "off", "run", "--", "echo", "x"])
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "x\n");
    assert!(
        own_lines(&out.stderr).is_empty(),
        "stderr:\n{}",
        text(&out.stderr)
    );
}

/// B3, C4: with no native backend in the plugins directory the default is
/// `none`, and a notice says there is no OS-native sandbox.
#[test]
fn without_a_native_backend_a_notice_says_so() {
    let plugins = Plugins::with_none();
    let out = run_cmd(&plugins, &["--json", "--", "echo", "x"]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["backend"], "none");
    let notices = own_lines(&out.stderr);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].contains("no OS-native agent sandbox"),
        "{notices:?}"
    );
}

/// H5: injection vectors are removed from the command's environment; the rest is kept.
#[test]
fn the_environment_is_sanitized() {
    let plugins = Plugins::with_none();
    let out = run_cmd(
        &plugins,
        &[
            "--",
            "sh",
            "-c",
            r#"echo "[$NODE_OPTIONS][$BASH_ENV][$LD_PRELOAD][$KEEP_ME]""#,
        ],
    )
    .env("NODE_OPTIONS", "--require=/x.js")
    .env("BASH_ENV", "/tmp/x")
    .env("LD_PRELOAD", "/nonexistent-cc-test.so")
    .env("KEEP_ME", "1")
    .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[][][][1]\n");
}

/// H5, T11: an inherited variable whose name a command would
/// read as another (`=LD_PRELOAD=…` reads as a name with `=`) is refused,
/// naming it, with exit 125 and nothing run; a lower-case spelling of a
/// stripped name is stripped like the upper-case one.
#[test]
fn environment_names_are_checked_and_stripped_in_any_case() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let out = run_cmd(&plugins, &["--", "touch"])
        .arg(&marker)
        .env("=LD_PRELOAD", "/nonexistent-cc-test.so")
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    assert!(
        text(&out.stderr).contains("\"=LD_PRELOAD\"") && text(&out.stderr).contains("`=`"),
        "{}",
        both(&out)
    );
    assert!(!marker.exists(), "the command ran");

    let out = run_cmd(&plugins, &["--", "cat", "/proc/self/environ"])
        .env("ld_preload", "/nonexistent-cc-test.so")
        .env("Gh_Token", "ghp_x")
        .env("KEEP_ME", "1")
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    let environ = text(&out.stdout);
    let names: Vec<String> = environ
        .split('\0')
        .filter_map(|e| e.split_once('=').map(|(k, _)| k.to_ascii_uppercase()))
        .collect();
    assert!(
        !names.iter().any(|n| n == "LD_PRELOAD" || n == "GH_TOKEN"),
        "{names:?}"
    );
    assert!(environ.split('\0').any(|e| e == "KEEP_ME=1"), "{environ:?}");
}

/// F1: the command runs in the current directory by default, in `--workdir` when given.
#[test]
fn the_workdir_defaults_to_the_current_directory() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let sub = tmp.path().join("sub");
    std::fs::create_dir(&sub).unwrap();

    let out = run_cmd(&plugins, &["--", "pwd"])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let printed = Path::new(text(&out.stdout).trim()).canonicalize().unwrap();
    assert_eq!(printed, tmp.path().canonicalize().unwrap());

    let out = run_cmd(&plugins, &["--workdir", "sub", "--", "pwd"])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let printed = Path::new(text(&out.stdout).trim()).canonicalize().unwrap();
    assert_eq!(printed, sub.canonicalize().unwrap());
}

/// F10: a violation the backend reports is printed on stderr.
#[test]
fn a_reported_violation_is_printed() {
    let plugins = Plugins::with_none();
    plugins.add(&fixtures().third_party);
    let out = run_cmd(
        &plugins,
        &["--backend", "fixture", "--", "fixture-violation", "/x/.env"],
    )
    .output();
    assert_eq!(code(&out), 1, "stderr:\n{}", text(&out.stderr));
    let lines = own_lines(&out.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l == "cc_server: violation: file-write-create /x/.env"),
        "{lines:?}"
    );
}

/// B8: a third-party backend asked for by name runs the command, without a notice.
#[test]
fn a_third_party_backend_runs_a_real_command() {
    let plugins = Plugins::with_none();
    plugins.add(&fixtures().third_party);
    let out = run_cmd(
        &plugins,
        &["--backend", "fixture", "--", "sh", "-c", "echo hi"],
    )
    .output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hi\n");
    assert!(
        own_lines(&out.stderr).is_empty(),
        "stderr:\n{}",
        text(&out.stderr)
    );

    let out = run_cmd(&plugins, &["--json", "--backend", "fixture", "--", "true"]).output();
    assert_eq!(code(&out), 0, "stderr:\n{}", text(&out.stderr));
    let first: serde_json::Value =
        serde_json::from_str(text(&out.stdout).lines().next().unwrap()).unwrap();
    assert_eq!(first["backend"], "fixture");
}

/// G5, F6 (T13): `run --bind` of a system directory writable —
/// as written or through a link — is refused (125) naming `bindMounts`, the
/// rule and the `:ro` remedy, and nothing runs; the same bind read-only and
/// a read-only project dir beside the workdir bind run.
#[test]
fn a_hostile_bind_is_refused_with_125() {
    let plugins = Plugins::with_none();
    let tmp = tempfile::tempdir().unwrap();
    let etc_link = tmp.path().join("etc-link");
    std::os::unix::fs::symlink("/etc", &etc_link).unwrap();
    let marker = tmp.path().join("ran");
    let touch = format!("touch {}", marker.display());
    for (bind, rule) in [
        ("/etc", "system directory `/etc`"),
        ("etc-link", "resolves to `/etc`"),
        ("/proc:ro", "never bound"),
    ] {
        let out = run_cmd(&plugins, &["--bind", bind, "--", "sh", "-c", &touch])
            .current_dir(tmp.path())
            .output();
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 125, "{bind}: {stderr}");
        assert!(
            stderr.contains("bindMounts[1].hostPath") && stderr.contains(rule),
            "{bind}: {stderr}"
        );
        assert!(!marker.exists(), "{bind}: the command ran");
    }
    let out = run_cmd(&plugins, &["--bind", "/etc:ro", "--", "true"])
        .current_dir(tmp.path())
        .output();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    std::fs::create_dir(tmp.path().join("project")).unwrap();
    let out = run_cmd(
        &plugins,
        &["--bind", "project:ro", "--", "sh", "-c", &touch],
    )
    .current_dir(tmp.path())
    .output();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    assert!(marker.exists());
}
