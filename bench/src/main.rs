//! `sandbox-bench`: launch and warm-exec costs of the backends, each printed
//! next to a baseline measured in the same run.
//!
//! - launch-to-ready of a bwrap sandbox vs raw `bwrap` with the same
//!   namespaces running `true`;
//! - warm exec round trip of `/bin/true` (exec call → exit event) in a bwrap
//!   and a none sandbox vs a bare fork/exec of `/bin/true`.
//!
//! The backends are loaded from their libraries beside this binary, exactly
//! as the server loads them.
//!
//! Run: `cargo build --release --workspace && target/release/sandbox-bench [EXECS]`
//!
//! `sandbox-bench policy [ROUNDS]` measures command classification instead
//! (see `policy.rs`); `sandbox-bench egress [MIB]` downloads through the
//! egress proxies (see `egress.rs`); `sandbox-bench api-load [SANDBOXES]
//! [EXECS] [KIB]` runs concurrent execs over the API (see `api_load.rs`);
//! `sandbox-bench warm-ab OTHER_INIT|OTHER_BUILD_DIR [EXECS]` alternates
//! warm execs of this build's sandbox-init (and bwrap plugin) and another's
//! (see `warm_ab.rs`); `sandbox-bench gateway [COMMITS]` pushes through the
//! push gateway against straight to the stand-in forge (see `gateway.rs`).

#![forbid(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sandbox_plugin_api::host::{self, BackendObject, EventHandler, PluginLogger, SandboxObject};
use sandbox_plugin_api::{Event, ExecRequest, ProbeContext, SandboxBindMount, SandboxSpec};

/// Counts terminal events and wakes the waiter.
#[derive(Default)]
struct Ends {
    count: Mutex<u64>,
    changed: Condvar,
}

impl EventHandler for Ends {
    fn handle(&self, event: Event) -> bool {
        if event.body.is_terminal() {
            *self.count.lock().unwrap() += 1;
            self.changed.notify_all();
        }
        true
    }
}

impl Ends {
    fn wait_for(&self, n: u64) {
        let guard = self.count.lock().unwrap();
        let _unused = self
            .changed
            .wait_timeout_while(guard, Duration::from_secs(30), |c| *c < n)
            .unwrap();
    }
}

struct Quiet;

impl PluginLogger for Quiet {
    fn log(&self, _plugin: &str, _level: u8, _target: &str, _message: &str) {}

    fn max_level(&self) -> String {
        "off".into()
    }
}

/// The backend in `libsandbox_backend_<name>.so` beside this binary.
fn load(name: &str) -> BackendObject {
    let exe = std::env::current_exe().unwrap();
    load_from(&exe.with_file_name(format!("libsandbox_backend_{name}.so")))
}

/// The first backend of the plugin at `lib`.
fn load_from(lib: &std::path::Path) -> BackendObject {
    let plugin = host::open(lib)
        .and_then(|p| p.load(Arc::new(Quiet)))
        .unwrap_or_else(|e| panic!("{}: {e} (build the workspace first)", lib.display()));
    plugin.backends.into_iter().next().unwrap()
}

mod api_load;
mod egress;
mod gateway;
mod microvm;
mod policy;
mod warm_ab;

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
    max: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    Stats {
        p50: pick(0.5),
        p99: pick(0.99),
        mean,
        max: samples[samples.len() - 1],
    }
}

fn row(name: &str, s: &Stats, base: &Stats) {
    println!(
        "{name:<44} p50 {:>9.1} µs  p99 {:>9.1} µs  mean {:>9.1} µs  p50 ratio {:>5.2}×",
        s.p50.as_secs_f64() * 1e6,
        s.p99.as_secs_f64() * 1e6,
        s.mean.as_secs_f64() * 1e6,
        s.p50.as_secs_f64() / base.p50.as_secs_f64()
    );
}

fn time(n: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..n.min(20) {
        f(); // warm up
    }
    stats(
        (0..n)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect(),
    )
}

fn spec(dir: &std::path::Path) -> SandboxSpec {
    SandboxSpec {
        session_id: "bench".into(),
        bind_mounts: vec![SandboxBindMount {
            host_path: dir.to_path_buf(),
            guest_path: None,
            read_only: false,
        }],
        guest_workdir: Some(dir.to_path_buf()),
        ..SandboxSpec::default()
    }
}

fn true_request() -> ExecRequest {
    ExecRequest {
        argv: vec!["/bin/true".into()],
        env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
        ..ExecRequest::default()
    }
}

fn exec_round_trips(sandbox: &SandboxObject, ends: &Ends, n: usize) -> Stats {
    let request = true_request();
    let mut done = *ends.count.lock().unwrap();
    time(n, || {
        sandbox.exec(&request).unwrap();
        done += 1;
        ends.wait_for(done);
    })
}

/// One exec of `/bin/true`, from the call to its terminal event.
fn exec_round_trip(sandbox: &SandboxObject, ends: &Ends) -> Duration {
    let done = *ends.count.lock().unwrap() + 1;
    let start = Instant::now();
    sandbox.exec(&true_request()).unwrap();
    ends.wait_for(done);
    start.elapsed()
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("api-load") {
        let arg = |n: usize, default: usize| {
            std::env::args()
                .nth(n)
                .and_then(|a| a.parse().ok())
                .unwrap_or(default)
        };
        api_load::run(arg(2, 32), arg(3, 10), arg(4, 1024));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("warm-ab") {
        let other = std::env::args()
            .nth(2)
            .expect("usage: sandbox-bench warm-ab OTHER_INIT|OTHER_BUILD_DIR [EXECS]");
        let execs = std::env::args().nth(3).and_then(|a| a.parse().ok());
        warm_ab::run(&other, execs.unwrap_or(300));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("gateway") {
        let commits = std::env::args().nth(2).and_then(|n| n.parse().ok());
        gateway::run(commits.unwrap_or(1000));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("egress") {
        let mib = std::env::args().nth(2).and_then(|a| a.parse().ok());
        egress::run(mib.unwrap_or(256));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("microvm") {
        let execs = std::env::args().nth(2).and_then(|a| a.parse().ok());
        microvm::run(execs.unwrap_or(50));
        return;
    }
    if std::env::args().nth(1).as_deref() == Some("policy") {
        let rounds = std::env::args().nth(2).and_then(|a| a.parse().ok());
        policy::run(rounds.unwrap_or(20));
        return;
    }
    let execs: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let dir = tempfile::tempdir().unwrap();

    println!("warm exec round trip of /bin/true, {execs} runs each");
    let bare = time(execs, || {
        Command::new("/bin/true")
            .stdout(Stdio::null())
            .status()
            .unwrap();
    });
    row("bare fork/exec of /bin/true (baseline)", &bare, &bare);

    let none = load("none");
    let ends = Arc::new(Ends::default());
    let sandbox = none.launch(&spec(dir.path()), ends.clone()).unwrap();
    row(
        "none: exec → exit event",
        &exec_round_trips(&sandbox, &ends, execs),
        &bare,
    );
    sandbox.destroy().unwrap();

    let bwrap = load("bwrap");
    let report = bwrap.probe(&ProbeContext::default()).unwrap();
    if !report.available {
        println!("bwrap is unavailable here: {}", report.hint);
        return;
    }
    let ends = Arc::new(Ends::default());
    let sandbox = bwrap.launch(&spec(dir.path()), ends.clone()).unwrap();
    row(
        "bwrap: exec → exit event (warm sandbox)",
        &exec_round_trips(&sandbox, &ends, execs),
        &bare,
    );
    sandbox.destroy().unwrap();

    let launches = 50;
    println!();
    println!("launch to ready, {launches} runs each");
    let raw = time(launches, || {
        let status = Command::new("bwrap")
            .args([
                "--unshare-user",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--disable-userns",
                "--die-with-parent",
                "--new-session",
                "--as-pid-1",
                "--cap-drop",
                "ALL",
                "--ro-bind",
                "/usr",
                "/usr",
                "--symlink",
                "usr/bin",
                "/bin",
                "--symlink",
                "usr/lib",
                "/lib",
                "--symlink",
                "usr/lib64",
                "/lib64",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--",
                "/bin/true",
            ])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    });
    row(
        "raw bwrap, same namespaces, running true (baseline)",
        &raw,
        &raw,
    );
    let mut launch_times = Vec::new();
    let mut destroy_times = Vec::new();
    for _ in 0..launches {
        let ends = Arc::new(Ends::default());
        let start = Instant::now();
        let sandbox = bwrap.launch(&spec(dir.path()), ends).unwrap();
        launch_times.push(start.elapsed());
        let start = Instant::now();
        sandbox.destroy().unwrap();
        destroy_times.push(start.elapsed());
    }
    row("bwrap backend: launch → ready", &stats(launch_times), &raw);
    row("bwrap backend: destroy", &stats(destroy_times), &raw);
    // What showing the user's toolchains and mounting the cache overlays
    // costs (SPEC G4): the same launches with `toolchains = false`.
    let off = ProbeContext {
        options: serde_json::json!({ "toolchains": false }),
        ..ProbeContext::default()
    };
    bwrap.probe(&off).unwrap();
    let mut launch_times = Vec::new();
    for _ in 0..launches {
        let ends = Arc::new(Ends::default());
        let start = Instant::now();
        let sandbox = bwrap.launch(&spec(dir.path()), ends).unwrap();
        launch_times.push(start.elapsed());
        sandbox.destroy().unwrap();
    }
    row(
        "bwrap backend: launch → ready, toolchains = false",
        &stats(launch_times),
        &raw,
    );

    // What the cgroup limits (SPEC G6: groups made, written, joined,
    // removed) add to a launch: the default launch against one with no
    // cgroup limit, alternating (a re-probe switches them, outside the
    // timing) so both see the same load.
    let limited = ProbeContext::default();
    let unlimited = ProbeContext {
        options: serde_json::json!({"limits": {"memory_bytes": 0, "tasks": 0}}),
        ..ProbeContext::default()
    };
    let mut with = (Vec::new(), Vec::new());
    let mut without = (Vec::new(), Vec::new());
    for _ in 0..launches {
        for (ctx, times) in [(&limited, &mut with), (&unlimited, &mut without)] {
            assert!(bwrap.probe(ctx).unwrap().available);
            let ends = Arc::new(Ends::default());
            let start = Instant::now();
            let sandbox = bwrap.launch(&spec(dir.path()), ends).unwrap();
            times.0.push(start.elapsed());
            let start = Instant::now();
            sandbox.destroy().unwrap();
            times.1.push(start.elapsed());
        }
    }
    row(
        "alternating: launch → ready, default limits",
        &stats(with.0),
        &raw,
    );
    row(
        "alternating: launch → ready, no cgroup limits",
        &stats(without.0),
        &raw,
    );
    row("alternating: destroy, default limits", &stats(with.1), &raw);
    row(
        "alternating: destroy, no cgroup limits",
        &stats(without.1),
        &raw,
    );
}
