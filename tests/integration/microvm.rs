//! The `microvm` backend library, black-box: the probe (a real functional
//! KVM test, QEMU, the guest image), the rules of SPEC B7 with the real
//! library, and — with the TCG opt-in and a guest image built from Debian
//! packages by the tests themselves — real VMs: commands in the guest's own
//! kernel, binds as 9p exports, stdin, timeouts, nothing left behind.
//! VM tests run one at a time (2 cores; docs/research/microvm.md §4.9).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;

use crate::util::*;

/// Whether this host's `/dev/kvm` is PVM (docs/research/microvm.md §1).
fn pvm_host() -> bool {
    Path::new("/sys/module/kvm_pvm").exists()
}

fn probe_json(command: CcServer) -> Value {
    let out = command.args(["probe", "--json"]).output();
    assert!(out.status.success(), "probe failed: {}", both(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `probe` object of one backend in `probe --json`.
fn probe_of(report: &Value, name: &str) -> Value {
    report["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no backend `{name}` in {report}"))["probe"]
        .clone()
}

/// B2, B8, C5: without the TCG opt-in, `cc_server probe` lists `microvm` as
/// unavailable, kind `microvm`, no kernel boundary, no capabilities, with
/// a reason that ends with the missing guest image (and how to build one);
/// on a PVM host it starts with the emulated ring 0. The default is never
/// `microvm`.
#[test]
fn probe_lists_microvm_as_unavailable_with_the_reason() {
    let plugins = Plugins::with_microvm();
    let report = probe_json(CcServer::new(&plugins));
    let microvm = probe_of(&report, "microvm");
    assert_eq!(microvm["available"], false, "{microvm}");
    assert_eq!(microvm["kind"], "microvm", "{microvm}");
    assert_eq!(microvm["kernelBoundary"], false, "{microvm}");
    assert_eq!(microvm["capabilities"], serde_json::json!([]), "{microvm}");
    let hint = microvm["hint"].as_str().unwrap();
    assert!(
        hint.contains("no guest image in ") && hint.contains("cc-microvm-agent"),
        "{hint}"
    );
    if pvm_host() {
        assert!(
            hint.starts_with("ring-0 guest code is emulated by /dev/kvm (PVM host")
                || (hint.starts_with("no usable KVM: ") && hint.contains("(PVM host: ring-0")),
            "{hint}"
        );
    }
    assert_ne!(report["default"]["backend"], "microvm", "{report}");

    // The table names it too, with the same reason.
    let out = CcServer::new(&plugins).arg("probe").output();
    assert!(out.status.success(), "{}", both(&out));
    let table = text(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("microvm ") && l.contains(" no ")),
        "{table}"
    );
    assert!(table.contains("no guest image"), "{table}");
}

/// B7: `--backend microvm` on a host where it cannot run fails loudly —
/// exit 125, the error naming microvm and the probe's reason — and the
/// command never runs, not even in `none`.
#[test]
fn an_explicit_microvm_fails_loudly_and_runs_nothing() {
    let plugins = Plugins::with_microvm();
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = CcServer::new(&plugins)
        .args(["run", "--backend", "microvm", "--", "sh", "-c", &script])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("backend `microvm` was requested but cannot run on this host: "),
        "{stderr}"
    );
    assert!(stderr.contains("no guest image"), "{stderr}");
    if pvm_host() {
        assert!(stderr.contains("PVM host"), "{stderr}");
    }
    assert!(!marker.exists(), "the command ran although microvm cannot");
    assert!(out.stdout.is_empty(), "{}", both(&out));

    // `true` too: the exit status is cc_server's 125, not the command's 0.
    let out = CcServer::new(&plugins)
        .args(["run", "--backend", "microvm", "--", "true"])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
}

/// Runs `echo ran` with `backend = "microvm"` as the configured default
/// (plus `extra` config) and returns the backend the run started in and
/// `cc_server`'s own stderr lines.
fn run_with_microvm_default(plugins: &Plugins, extra: &str) -> (String, Vec<String>) {
    let work = tempfile::tempdir().unwrap();
    let out = CcServer::new(plugins)
        .config(&format!("backend = \"microvm\"\n{extra}"))
        .current_dir(work.path())
        .args(["run", "--json", "--", "echo", "ran"])
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "started", "{}", both(&out));
    assert_eq!(joined(&events, "stdout"), "ran\n", "{}", both(&out));
    (
        events[0]["backend"].as_str().unwrap().to_owned(),
        own_lines(&out.stderr),
    )
}

/// B7: a configured default of `microvm` is a preference: unavailable, it
/// steps down — to the native backend when that is available, else to
/// `none` — with one line naming microvm and why, and the command runs.
#[test]
fn a_configured_microvm_default_steps_down_and_still_runs() {
    // No native backend in the directory: down to `none`.
    let plugins = Plugins::with_microvm();
    let (backend, notices) = run_with_microvm_default(&plugins, "");
    assert_eq!(backend, "none");
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with(
            "cc_server: running with backend `none`: the configured default `microvm` is unavailable ("
        ) && notices[0].contains("no guest image"),
        "{notices:?}"
    );

    // With bwrap beside it: down to the native backend, when its probe passes.
    // Without bwrap, `bwrap_installed` says this part is skipped.
    if !bwrap_installed() {
        return;
    }
    let plugins = Plugins::with_bwrap();
    plugins.add(&artifact("libsandbox_backend_microvm.so"));
    let bwrap = probe_of(&probe_json(CcServer::new(&plugins)), "bwrap");
    // Without the create-time guard the default policy refuses bwrap (C3);
    // lower it as the repository's example does, so the step-down shows.
    let extra = if bwrap["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "fs.deny-glob-on-create")
    {
        ""
    } else {
        "[dispatch_policy]\nwrite_deny_globs = []\n"
    };
    let (backend, notices) = run_with_microvm_default(&plugins, extra);
    let expected = if bwrap["available"] == true {
        "bwrap"
    } else {
        "none"
    };
    assert_eq!(backend, expected, "bwrap probe: {bwrap}");
    assert!(
        notices.iter().any(|l| l.contains(&format!(
            "running with backend `{expected}`: the configured default `microvm` is unavailable ("
        ))),
        "{notices:?}"
    );
}

/// B7, C5: the TCG opt-in (`CC_SERVER_MICROVM_ACCEL=tcg`, or `accel =
/// "tcg"` under `[backends.microvm]`) skips the KVM test and badges the
/// backend as emulated, not an isolation boundary; without a guest image it
/// is still unavailable, and an explicit request still fails and runs
/// nothing.
#[test]
fn tcg_opt_in_without_an_image_is_still_unavailable() {
    let plugins = Plugins::with_microvm();
    let empty = tempfile::tempdir().unwrap();
    let by_env = CcServer::new(&plugins).env("CC_SERVER_MICROVM_ACCEL", "tcg");
    let by_config = CcServer::new(&plugins).config("[backends.microvm]\naccel = \"tcg\"\n");
    for command in [by_env, by_config] {
        let command = command.env("CC_SERVER_MICROVM_IMAGES", empty.path());
        let microvm = probe_of(&probe_json(command), "microvm");
        assert_eq!(microvm["available"], false, "{microvm}");
        let hint = microvm["hint"].as_str().unwrap();
        assert!(hint.starts_with("no guest image in "), "{hint}");
        assert!(!hint.contains("ring-0"), "TCG skips the KVM test: {hint}");
        assert!(
            microvm["note"]
                .as_str()
                .unwrap()
                .contains("emulated, not an isolation boundary"),
            "{microvm}"
        );
    }

    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = CcServer::new(&plugins)
        .env("CC_SERVER_MICROVM_ACCEL", "tcg")
        .env("CC_SERVER_MICROVM_IMAGES", empty.path())
        .args(["run", "--backend", "microvm", "--", "sh", "-c", &script])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "backend `microvm` was requested but cannot run on this host: no guest image"
        ),
        "{stderr}"
    );
    assert!(!marker.exists());
}

// ------------------------------------------------------------ real VMs

/// One VM at a time.
static VM: Mutex<()> = Mutex::new(());

/// The guest image for the VM tests, built once per run: the static agent
/// (its own target dir, `+crt-static`), then the image from Debian packages
/// (a ~70 MB download the first time; kept in `target/microvm-images`).
fn guest_image() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let agent_target = target_dir().join("microvm-agent");
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "build",
                "--release",
                "--quiet",
                "-p",
                "sandbox-microvm-agent",
            ])
            .args(["--target", "x86_64-unknown-linux-gnu"])
            .current_dir(repo_root())
            .env("CARGO_TARGET_DIR", &agent_target)
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building the static guest agent failed:\n{}",
            text(&out.stderr)
        );
        let images = target_dir().join("microvm-images");
        let options = sandbox_microvm_image::build::Options {
            agent: agent_target.join("x86_64-unknown-linux-gnu/release/cc-microvm-agent"),
            out: images.clone(),
            cache: None,
            roots: sandbox_microvm_image::modules::DEFAULT_ROOTS
                .iter()
                .map(|r| (*r).to_owned())
                .collect(),
            protocol: sandbox_microvm_proto::VERSION,
            rebuild: false,
        };
        let built =
            sandbox_microvm_image::build::build(&options, &|line| eprintln!("image: {line}"))
                .unwrap_or_else(|e| {
                    let e = sandbox_microvm_image::error_chain(&e);
                    panic!("building the guest image failed: {e}")
                });
        // Each agent change makes a new ~70 MB image: keep only this one.
        sandbox_microvm_image::build::prune(&images, &built.dir).unwrap();
        images
    })
}

/// `cc_server` with the TCG opt-in, the test image, and the create-time
/// globs lowered (the microVM cannot enforce them, so the default policy
/// would refuse it: SPEC C3).
fn tcg(plugins: &Plugins) -> CcServer {
    CcServer::new(plugins)
        .env("CC_SERVER_MICROVM_ACCEL", "tcg")
        .env("CC_SERVER_MICROVM_IMAGES", guest_image())
        .config("[dispatch_policy]\nwrite_deny_globs = []\n")
}

/// QEMU processes booting the test image, by pid.
fn qemus() -> Vec<String> {
    let image = guest_image().display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains("qemu-system") && cmdline.contains(&image))
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect()
}

/// C5, B8: with TCG opted in and an image, the probe says available,
/// emulated, no kernel boundary; a command runs in the guest's own kernel
/// (not the host's), in the work dir exported over 9p: its output, its
/// exit status, and the file it wrote arrive on the host; afterwards no
/// QEMU is left.
#[test]
fn a_tcg_microvm_runs_commands_in_its_own_kernel() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let microvm = probe_of(&probe_json(tcg(&plugins)), "microvm");
    assert_eq!(microvm["available"], true, "{microvm}");
    assert_eq!(microvm["kernelBoundary"], false, "{microvm}");
    let work = tempfile::tempdir().unwrap();
    let out = tcg(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "microvm", "--json", "--"])
        .args([
            "sh",
            "-c",
            "uname -r; echo to-stderr >&2; echo made > made.txt; exit 3",
        ])
        .output();
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["backend"], "microvm", "{}", both(&out));
    let guest_kernel = joined(&events, "stdout");
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        guest_kernel.trim().ends_with("-amd64") && guest_kernel.trim() != host_kernel.trim(),
        "guest {guest_kernel:?} vs host {host_kernel:?}\n{}",
        both(&out)
    );
    assert_eq!(joined(&events, "stderr"), "to-stderr\n", "{}", both(&out));
    assert_eq!(code(&out), 3, "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(work.path().join("made.txt")).unwrap(),
        "made\n"
    );
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// C5, F7: a read-only bind is read-only in the guest (QEMU refuses writes
/// on the host side): the write fails and the host file is unchanged; the
/// writable work dir next to it takes writes. stdin reaches the command.
#[test]
fn read_only_binds_stay_unchanged_and_stdin_arrives() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("keep.txt"), "original\n").unwrap();
    let bind = format!("{}:ro", data.path().display());
    let script = format!(
        "cat {d}/keep.txt; if echo changed > {d}/keep.txt; then echo WROTE; else echo refused; fi; cat > piped.txt; echo done",
        d = data.path().display()
    );
    let out = tcg(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "microvm", "--bind", &bind, "--"])
        .args(["sh", "-c", &script])
        .output_with_stdin(b"through stdin\n");
    assert_eq!(code(&out), 0, "{}", both(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("original\nrefused\n") && stdout.ends_with("done\n"),
        "{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(data.path().join("keep.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("piped.txt")).unwrap(),
        "through stdin\n"
    );
}

/// F9, A3: a command that outlives its timeout is killed (reported as such,
/// not as an exit), and the VM and its runtime directory are gone after the
/// run.
#[test]
fn a_timeout_kills_the_command_and_nothing_is_left() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let work = tempfile::tempdir().unwrap();
    let out = tcg(&plugins)
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "microvm",
            "--timeout",
            "1",
            "--json",
            "--",
        ])
        .args(["sh", "-c", "echo started; sleep 30; echo LATE"])
        .output();
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(joined(&events, "stdout"), "started\n", "{}", both(&out));
    let last = events.last().unwrap();
    assert_eq!(last["type"], "killed", "{}", both(&out));
    assert_eq!(last["reason"], "timeout", "{}", both(&out));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// C1, F3 (fail closed): a 9p export cannot keep part of itself read-only,
/// so a writable bind holding a git hooks directory is refused — named, and
/// nothing runs — rather than let the guest plant a hook the host runs on
/// the next commit. No VM is started.
#[test]
fn a_writable_bind_with_git_hooks_is_refused() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(work.path().join(".git/hooks")).unwrap();
    let marker = work.path().join("ran");
    let script = format!("touch {}", marker.display());
    let out = tcg(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "microvm", "--", "sh", "-c", &script])
        .output();
    assert_ne!(code(&out), 0, "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(".git/hooks") && stderr.contains("cannot keep it read-only"),
        "{stderr}"
    );
    assert!(!marker.exists());
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// Creates microVM sandbox `id` over the API, binding `dir` (writable, the
/// workdir); returns its handle.
fn create_vm(server: &Server, id: &str, dir: &Path) -> Value {
    let body = serde_json::json!({
        "sessionId": id,
        "bindMounts": [{"hostPath": dir}],
        "guestWorkdir": dir,
    });
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=microvm",
        Some(&body.to_string()),
    );
    assert_eq!(
        created.status,
        201,
        "{}\n{}",
        text(&created.body),
        server.log()
    );
    created.json()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// F9, G3, B8 over the API: a microVM sandbox reports itself (microvm, no
/// kernel boundary under TCG, emulated); suspend pauses every vCPU (a
/// background writer in the guest stops writing to the 9p work dir, the
/// handle says `suspended` with `suspendMode: paused` — never a checkpoint
/// that did not happen), execs are refused meanwhile, resume lets the
/// writer go on, and destroy leaves no QEMU.
#[test]
fn suspend_pauses_the_vm_and_resume_continues_it() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let work = tempfile::tempdir().unwrap();
    let handle = create_vm(&server, "pause", work.path());
    assert_eq!(handle["backendName"], "microvm", "{handle}");
    assert_eq!(handle["kernelBoundary"], false, "{handle}");
    let exec = |argv: serde_json::Value| {
        server.call(
            "POST",
            "/v1/sandboxes/pause/execs",
            Some(&serde_json::json!({ "argv": argv }).to_string()),
        )
    };
    let started = exec(serde_json::json!([
        "sh",
        "-c",
        "(while :; do echo t >> ticks; sleep 0.05; done) </dev/null >/dev/null 2>&1 &"
    ]));
    assert_eq!(started.status, 200, "{}", text(&started.body));
    let ticks = work.path().join("ticks");
    let start = file_len(&ticks);
    assert!(
        eventually(Duration::from_secs(30), || file_len(&ticks) > start + 4),
        "the writer in the guest does not write"
    );

    let suspended = server.call("POST", "/v1/sandboxes/pause/suspend", None);
    assert_eq!(suspended.status, 200, "{}", text(&suspended.body));
    let handle = suspended.json();
    assert_eq!(handle["state"], "suspended", "{handle}");
    assert_eq!(handle["details"]["suspendMode"], "paused", "{handle}");
    let frozen = file_len(&ticks);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        file_len(&ticks),
        frozen,
        "the guest kept writing while paused"
    );
    let refused = exec(serde_json::json!(["true"]));
    assert!(
        !(200..300).contains(&refused.status),
        "an exec ran in a paused VM: {} {}",
        refused.status,
        text(&refused.body)
    );

    let resumed = server.call("POST", "/v1/sandboxes/pause/resume", None);
    assert_eq!(resumed.status, 200, "{}", text(&resumed.body));
    assert!(
        eventually(Duration::from_secs(30), || file_len(&ticks) > frozen + 4),
        "the writer did not go on after resume"
    );
    let destroyed = server.call("DELETE", "/v1/sandboxes/pause", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// A loopback HTTP server answering `hello-from-host` to every request;
/// counts the connections that reached it.
fn counting_server() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let body = "hello-from-host\n";
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (port, hits)
}

/// E1, E2, E5 in a microVM (no NIC): the agent's loopback ports are
/// tunnelled to the session's own proxies, so a name on the allowlist (here
/// opted in to resolve to loopback) is reached through the proxy; a name
/// not on it is refused by the proxy with a violation and never reaches
/// the server; going around the proxy finds nothing — the guest's loopback
/// is its own, and there is no other network.
#[test]
fn egress_from_a_microvm_goes_through_the_sessions_proxy_only() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let (port, hits) = counting_server();
    let work = tempfile::tempdir().unwrap();
    let script = format!(
        "if wget -q -O - http://allowed.test:{port}/; then echo allowed=ok; else echo allowed=failed; fi; \
         if wget -q -O - http://refused.test:{port}/; then echo refused=ok; else echo refused=failed; fi; \
         if wget -q -Y off -O - http://127.0.0.1:{port}/; then echo direct=ok; else echo direct=failed; fi"
    );
    let out = tcg(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "microvm"])
        .args([
            "--allow-domain",
            "allowed.test",
            "--allow-private",
            "allowed.test",
        ])
        .args(["--resolve", "allowed.test:127.0.0.1"])
        .args(["--resolve", "refused.test:127.0.0.1"])
        .args(["--", "sh", "-c", &script])
        .output();
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("hello-from-host\nallowed=ok"),
        "{}",
        both(&out)
    );
    assert!(stdout.contains("refused=failed"), "{}", both(&out));
    assert!(stdout.contains("direct=failed"), "{}", both(&out));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "only the allowed request may arrive\n{}",
        both(&out)
    );
    assert!(
        text(&out.stderr).contains(&format!("violation: network-outbound refused.test:{port}")),
        "{}",
        both(&out)
    );
}

/// F10 over the API: the kill route signals a command in the guest (its
/// whole process group); its stream ends with `killed` (manual, the signal
/// sent), and the sandbox keeps serving.
#[test]
fn the_kill_route_ends_a_command_in_the_guest() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let work = tempfile::tempdir().unwrap();
    create_vm(&server, "k", work.path());
    let exec = serde_json::json!({"argv": ["sh", "-c", "echo go; exec sleep 300"]}).to_string();
    let mut stream = http_open(
        server.addr,
        "POST",
        "/v1/sandboxes/k/execs",
        Some(&exec),
        Some(&server.token),
    );
    let events = read_until(&mut stream, r#"go\n""#);
    assert_eq!(events[0]["type"], "started", "{events:?}");
    let exec_id = events[0]["execId"].as_u64().unwrap();
    let killed = server.call(
        "POST",
        &format!("/v1/sandboxes/k/execs/{exec_id}/kill"),
        Some(r#"{"signal":15}"#),
    );
    assert_eq!(killed.status, 204, "{}", text(&killed.body));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stream, &mut rest).unwrap();
    let last: Value = rest
        .lines()
        .rfind(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no terminal event: {rest}"));
    assert_eq!(last["type"], "killed", "{rest}");
    assert_eq!(last["reason"], "manual", "{rest}");
    assert_eq!(last["signal"], 15, "{rest}");
    let after = server.call(
        "POST",
        "/v1/sandboxes/k/execs",
        Some(&serde_json::json!({"argv": ["echo", "still"]}).to_string()),
    );
    assert_eq!(after.status, 200, "{}", text(&after.body));
    assert_eq!(joined(&after.lines(), "stdout"), "still\n");
    let destroyed = server.call("DELETE", "/v1/sandboxes/k", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// B8 (exec with a pty, resize) over the API: a command started with
/// `pty` runs on a terminal of that size in the guest (`tty` names a
/// /dev/pts device, `stty size` says 24 80, stderr arrives on it), and the
/// resize route gives it a new size, which the shell sees through SIGWINCH.
/// A size of 0 is refused with the reason; so is a resize of nothing.
#[test]
fn a_terminal_in_the_guest_has_its_size_and_follows_resize() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let work = tempfile::tempdir().unwrap();
    create_vm(&server, "tty", work.path());
    // `ready` is printed from an octal escape so that only the output, not
    // the `started` event (whose policy verdict quotes the script), holds it.
    let script = "trap 'stty size; exit 0' WINCH; tty; stty size; echo oops >&2; \
                  printf 'r\\145ady\\n'; while :; do sleep 0.1; done";
    let exec = serde_json::json!({
        "argv": ["sh", "-c", script],
        "pty": {"cols": 80, "rows": 24},
    })
    .to_string();
    let mut stream = http_open(
        server.addr,
        "POST",
        "/v1/sandboxes/tty/execs",
        Some(&exec),
        Some(&server.token),
    );
    // The trap is set once the shell says so.
    let events = read_until(&mut stream, "ready");
    assert_eq!(events[0]["type"], "started", "{events:?}");
    let exec_id = events[0]["execId"].as_u64().unwrap();
    let resized = server.call(
        "POST",
        &format!("/v1/sandboxes/tty/execs/{exec_id}/resize"),
        Some(r#"{"cols":100,"rows":40}"#),
    );
    assert_eq!(resized.status, 204, "{}", text(&resized.body));
    let zero = server.call(
        "POST",
        &format!("/v1/sandboxes/tty/execs/{exec_id}/resize"),
        Some(r#"{"cols":0,"rows":40}"#),
    );
    assert!(
        (400..500).contains(&zero.status) && text(&zero.body).contains("at least 1"),
        "{} {}",
        zero.status,
        text(&zero.body)
    );
    let mut all = events;
    all.extend(read_until(&mut stream, r#""type":"exit""#));
    let output = joined(&all, "stdout").replace('\r', "");
    let lines: Vec<&str> = output.lines().collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{output}");
    assert_eq!(lines[1], "24 80", "{output}");
    assert_eq!(lines[2], "oops", "stderr is the terminal too: {output}");
    assert!(lines.contains(&"40 100"), "{output}");
    assert_eq!(joined(&all, "stderr"), "");
    assert_eq!(exit_code(&all), 0, "{all:?}");
    let gone = server.call(
        "POST",
        &format!("/v1/sandboxes/tty/execs/{exec_id}/resize"),
        Some(r#"{"cols":90,"rows":30}"#),
    );
    assert!((400..500).contains(&gone.status), "{}", text(&gone.body));
    let destroyed = server.call("DELETE", "/v1/sandboxes/tty", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// B8 (per-stream flow control) over the API: a client that stops reading
/// one exec's stream stops that command only — its output waits in the
/// guest (the agent sends at most a window ahead of what the host handed
/// on), while another exec in the same VM runs to its end and can see the
/// first command still there. Dropping the unread stream ends the command.
#[test]
fn an_unread_exec_stream_stalls_only_its_own_command() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let work = tempfile::tempdir().unwrap();
    create_vm(&server, "flow", work.path());
    // 200 MB of text: far more than every buffer on the way together.
    let exec =
        serde_json::json!({"argv": ["sh", "-c", "yes flowing | head -c 200000000"]}).to_string();
    let mut unread = http_open(
        server.addr,
        "POST",
        "/v1/sandboxes/flow/execs",
        Some(&exec),
        Some(&server.token),
    );
    let events = read_until(&mut unread, "flowing");
    assert_eq!(events[0]["type"], "started", "{events:?}");
    let other = server.call(
        "POST",
        "/v1/sandboxes/flow/execs",
        Some(&serde_json::json!({"argv": ["echo", "meanwhile"]}).to_string()),
    );
    assert_eq!(other.status, 200, "{}", text(&other.body));
    let lines = other.lines();
    assert_eq!(joined(&lines, "stdout"), "meanwhile\n");
    assert_eq!(exit_code(&lines), 0);
    // The first command has not got through its output: it waits.
    let still = server.call(
        "POST",
        "/v1/sandboxes/flow/execs",
        Some(
            &serde_json::json!({"argv": ["sh", "-c", "ps | grep -c '[h]ead -c 200000000'"]})
                .to_string(),
        ),
    );
    // (busybox runs the pipeline's applets in forks of the shell, so more
    // than one process may show the command line.)
    let waiting: u32 = joined(&still.lines(), "stdout").trim().parse().unwrap_or(0);
    assert!(waiting > 0, "{}", text(&still.body));
    drop(unread);
    let gone = serde_json::json!({
        "argv": ["sh", "-c", "for i in $(seq 100); do ps | grep -q '[h]ead -c 200000000' || exit 0; sleep 0.1; done; exit 1"],
    });
    let gone = server.call("POST", "/v1/sandboxes/flow/execs", Some(&gone.to_string()));
    assert_eq!(
        exit_code(&gone.lines()),
        0,
        "the unread command was not ended"
    );
    let destroyed = server.call("DELETE", "/v1/sandboxes/flow", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// F9 (checkpoint: suspend with RAM freed) over the API, with
/// `[backends.microvm] suspend = "checkpoint"`: a checkpoint is refused,
/// naming the share, while a command has its working directory on a share;
/// otherwise the machine is written to a file and QEMU ends (no QEMU left,
/// the handle says `checkpointed` with the file's size), execs are refused
/// meanwhile, and resume starts it again from the file — a shell that was
/// waiting goes on with its variables and the guest's /tmp intact, the
/// shares are mounted again, and a file made on the host meanwhile shows.
#[test]
fn a_checkpoint_frees_the_vm_and_restore_continues_a_waiting_shell() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(
        CcServer::new(&plugins)
            .env("CC_SERVER_MICROVM_ACCEL", "tcg")
            .env("CC_SERVER_MICROVM_IMAGES", guest_image())
            .config(
                "[dispatch_policy]\nwrite_deny_globs = []\n[backends.microvm]\nsuspend = \"checkpoint\"\n",
            ),
    );
    let work = tempfile::tempdir().unwrap();
    create_vm(&server, "ck", work.path());
    let open_exec = |body: Value| {
        http_open(
            server.addr,
            "POST",
            "/v1/sandboxes/ck/execs",
            Some(&body.to_string()),
            Some(&server.token),
        )
    };
    // A command holding the share: the checkpoint must be refused.
    let mut busy =
        open_exec(serde_json::json!({"argv": ["sh", "-c", "echo holding; exec sleep 300"]}));
    let events = read_until(&mut busy, r#"holding\n""#);
    let busy_id = events[0]["execId"].as_u64().unwrap();
    let refused = server.call("POST", "/v1/sandboxes/ck/suspend", None);
    assert!(
        !(200..300).contains(&refused.status)
            && text(&refused.body).contains("is busy in the guest"),
        "{} {}",
        refused.status,
        text(&refused.body)
    );
    assert!(!qemus().is_empty(), "the refused checkpoint ended QEMU");
    let killed = server.call(
        "POST",
        &format!("/v1/sandboxes/ck/execs/{busy_id}/kill"),
        Some(r#"{"signal":9}"#),
    );
    assert_eq!(killed.status, 204, "{}", text(&killed.body));
    read_until(&mut busy, r#""type":"killed""#);

    // A shell waiting in the guest's /tmp, with state of its own.
    let script = "x=kept-$$; echo state > /tmp/mark; printf 'w\\141iting\\n'; \
                  while [ ! -e /tmp/go ]; do sleep 0.1; done; echo \"$x $(cat /tmp/mark) resumed\"";
    let mut shell = open_exec(serde_json::json!({"argv": ["sh", "-c", script], "cwd": "/tmp"}));
    let mut events = read_until(&mut shell, "waiting");
    let suspended = server.call("POST", "/v1/sandboxes/ck/suspend", None);
    assert_eq!(suspended.status, 200, "{}", text(&suspended.body));
    let handle = suspended.json();
    assert_eq!(handle["state"], "suspended", "{handle}");
    assert_eq!(handle["details"]["suspendMode"], "checkpointed", "{handle}");
    assert!(
        handle["details"]["checkpointBytes"].as_u64().unwrap_or(0) > 1 << 20,
        "{handle}"
    );
    assert!(
        qemus().is_empty(),
        "QEMU still runs while checkpointed: {:?}",
        qemus()
    );
    let refused = server.call(
        "POST",
        "/v1/sandboxes/ck/execs",
        Some(&serde_json::json!({"argv": ["true"]}).to_string()),
    );
    assert!(
        !(200..300).contains(&refused.status),
        "an exec ran in a checkpointed VM"
    );
    std::fs::write(work.path().join("from-host"), "meanwhile\n").unwrap();

    let resumed = server.call("POST", "/v1/sandboxes/ck/resume", None);
    assert_eq!(resumed.status, 200, "{}", text(&resumed.body));
    assert_ne!(resumed.json()["state"], "suspended");
    let seen = server.call(
        "POST",
        "/v1/sandboxes/ck/execs",
        Some(
            &serde_json::json!({"argv": ["sh", "-c", "cat from-host && touch /tmp/go"]})
                .to_string(),
        ),
    );
    assert_eq!(
        joined(&seen.lines(), "stdout"),
        "meanwhile\n",
        "{}",
        text(&seen.body)
    );
    events.extend(read_until(&mut shell, r#""type":"exit""#));
    let output = joined(&events, "stdout");
    let last = output.lines().last().unwrap_or_default().to_owned();
    assert!(
        last.starts_with("kept-") && last.ends_with(" state resumed"),
        "{output}"
    );
    assert_eq!(exit_code(&events), 0);
    let destroyed = server.call("DELETE", "/v1/sandboxes/ck", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// F9, C5 (fast start from a template): once a machine with a device set
/// has been booted and saved, launches with the same set load it instead of
/// booting (`startedFrom: template`, with `restoreMs`). Two machines loaded
/// from the one template do not share their randomness (the launch reseeds
/// the guest's RNG) and both have the host's time, not the template's.
#[test]
fn launches_load_a_template_with_fresh_randomness_and_the_hosts_time() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let work = tempfile::tempdir().unwrap();
    // The first may boot (and make the template); the next two load it.
    create_vm(&server, "t0", work.path());
    let mut draws = Vec::new();
    for id in ["t1", "t2"] {
        let handle = create_vm(&server, id, work.path());
        assert_eq!(handle["details"]["startedFrom"], "template", "{handle}");
        assert!(handle["details"]["restoreMs"].is_u64(), "{handle}");
        let out = server.call(
            "POST",
            &format!("/v1/sandboxes/{id}/execs"),
            Some(
                &serde_json::json!({"argv": ["sh", "-c", "date +%s; head -c 16 /dev/urandom | od -An -tx1"]})
                    .to_string(),
            ),
        );
        let stdout = joined(&out.lines(), "stdout");
        let mut lines = stdout.lines();
        let guest_time: u64 = lines.next().unwrap_or_default().trim().parse().unwrap_or(0);
        let host_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(
            guest_time.abs_diff(host_time) < 120,
            "the guest's clock says {guest_time}, the host's {host_time}"
        );
        draws.push(lines.collect::<Vec<_>>().join(" "));
    }
    assert!(!draws[0].trim().is_empty(), "{draws:?}");
    assert_ne!(
        draws[0], draws[1],
        "two machines from one template drew the same bytes"
    );
    for id in ["t0", "t1", "t2"] {
        let destroyed = server.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
        assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    }
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}

/// F3, B8 (protected paths): a protected path that no bind shows is absent
/// in the guest — the VM sees only its exports; one inside a read-only bind
/// is there but cannot be written (QEMU enforces the export's read-only);
/// a writable bind at or below a protected path is refused at launch,
/// naming both. Host: the protected file unchanged.
#[test]
fn protected_paths_are_absent_or_read_only_in_the_guest() {
    let _vm = VM.lock().unwrap_or_else(|e| e.into_inner());
    let plugins = Plugins::with_microvm();
    let server = Server::start_with(tcg(&plugins));
    let root = tempfile::tempdir().unwrap();
    let (work, lib, outside) = (
        root.path().join("work"),
        root.path().join("lib"),
        root.path().join("outside"),
    );
    for dir in [&work, &lib.join("keep"), &outside] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let kept = lib.join("keep/file.txt");
    std::fs::write(&kept, "original\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "not for the guest\n").unwrap();
    let body = serde_json::json!({
        "sessionId": "prot",
        "bindMounts": [{"hostPath": work}, {"hostPath": lib, "readOnly": true}],
        "guestWorkdir": work,
        "protectedPaths": [lib.join("keep"), outside],
    });
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=microvm",
        Some(&body.to_string()),
    );
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let script = format!(
        "if test -e {o}/secret.txt; then echo outside=visible; else echo outside=absent; fi; \
         if echo x > {k}; then echo write=ok; else echo write=failed; fi; cat {k}",
        o = outside.display(),
        k = kept.display()
    );
    let out = server.call(
        "POST",
        "/v1/sandboxes/prot/execs",
        Some(&serde_json::json!({"argv": ["sh", "-c", script]}).to_string()),
    );
    let stdout = joined(&out.lines(), "stdout");
    assert!(stdout.contains("outside=absent"), "{stdout}");
    assert!(stdout.contains("write=failed"), "{stdout}");
    assert!(stdout.ends_with("original\n"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), "original\n");
    let destroyed = server.call("DELETE", "/v1/sandboxes/prot", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));

    // A writable bind of a directory below the protected one.
    std::fs::create_dir(lib.join("keep/sub")).unwrap();
    let inside = serde_json::json!({
        "sessionId": "prot2",
        "bindMounts": [{"hostPath": lib.join("keep/sub")}],
        "protectedPaths": [lib.join("keep")],
    });
    let refused = server.call(
        "POST",
        "/v1/sandboxes?backend=microvm",
        Some(&inside.to_string()),
    );
    assert!(
        !(200..300).contains(&refused.status) && text(&refused.body).contains("never writable"),
        "{} {}",
        refused.status,
        text(&refused.body)
    );
    assert!(qemus().is_empty(), "QEMU left running: {:?}", qemus());
}
