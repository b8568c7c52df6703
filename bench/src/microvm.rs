//! `sandbox-bench microvm [EXECS]`: the microvm backend against the bwrap
//! backend in the same run (SPEC C5, G2, G3): cold boot to
//! ready, exec round trip of `true`, stdout throughput. Needs a guest image
//! and, on hosts without hardware virtualisation, the TCG opt-in:
//! `CC_SERVER_MICROVM_ACCEL=tcg CC_SERVER_MICROVM_IMAGES=DIR`. Template
//! restore is not built, so it is not measured.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sandbox_plugin_api::host::{BackendObject, EventHandler, SandboxObject};
use sandbox_plugin_api::{Event, EventBody, ExecRequest, ProbeContext};

use crate::{load, spec, stats, time};

/// Terminal events and stdout bytes.
#[derive(Default)]
struct Counter {
    ends: Mutex<u64>,
    changed: Condvar,
    bytes: AtomicU64,
}

impl EventHandler for Counter {
    fn handle(&self, event: Event) -> bool {
        if let EventBody::Stdout(data) = &event.body {
            self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        }
        if event.body.is_terminal() {
            *self.ends.lock().unwrap() += 1;
            self.changed.notify_all();
        }
        true
    }
}

impl Counter {
    fn run(&self, sandbox: &SandboxObject, argv: &[&str]) {
        let before = *self.ends.lock().unwrap();
        let request = ExecRequest {
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            env: [("PATH".to_owned(), "/usr/bin:/bin".to_owned())].into(),
            ..ExecRequest::default()
        };
        sandbox.exec(&request).unwrap();
        let guard = self.ends.lock().unwrap();
        let _unused = self
            .changed
            .wait_timeout_while(guard, Duration::from_secs(120), |n| *n <= before)
            .unwrap();
    }
}

const STDOUT_MIB: u64 = 64;

/// Boot p50, template restore p50 (if any), exec-of-`true` p50, stdout
/// MiB/s, suspend and resume p50.
struct Figures {
    boot: Duration,
    restore: Option<Duration>,
    exec: Duration,
    mib_s: f64,
    suspend: Duration,
    resume: Duration,
}

/// Suspend/resume rounds (each followed by an exec that must work).
const SUSPENDS: usize = 5;

fn measure(backend: &BackendObject, execs: usize, launches: usize) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let mut boots = Vec::new();
    for _ in 0..launches {
        let counter = Arc::new(Counter::default());
        let start = Instant::now();
        let sandbox = backend.launch(&spec(dir.path()), counter).unwrap();
        boots.push(start.elapsed());
        sandbox.destroy().unwrap();
    }
    let counter = Arc::new(Counter::default());
    let sandbox = backend.launch(&spec(dir.path()), counter.clone()).unwrap();
    let exec = time(execs, || counter.run(&sandbox, &["true"]));
    let bytes = (STDOUT_MIB << 20).to_string();
    counter.bytes.store(0, Ordering::Relaxed);
    let start = Instant::now();
    counter.run(&sandbox, &["head", "-c", &bytes, "/dev/zero"]);
    let took = start.elapsed();
    assert_eq!(
        counter.bytes.load(Ordering::Relaxed),
        STDOUT_MIB << 20,
        "stdout bytes"
    );
    let (mut suspends, mut resumes) = (Vec::new(), Vec::new());
    for _ in 0..SUSPENDS {
        let start = Instant::now();
        sandbox.suspend().unwrap();
        suspends.push(start.elapsed());
        let start = Instant::now();
        sandbox.resume().unwrap();
        resumes.push(start.elapsed());
        counter.run(&sandbox, &["true"]);
    }
    sandbox.destroy().unwrap();
    Figures {
        restore: None,
        boot: stats(boots).p50,
        exec: exec.p50,
        mib_s: STDOUT_MIB as f64 / took.as_secs_f64(),
        suspend: stats(suspends).p50,
        resume: stats(resumes).p50,
    }
}

/// Launch → ready p50 of the launches that loaded a template.
fn template_starts(backend: &BackendObject, launches: usize) -> Option<Duration> {
    let dir = tempfile::tempdir().unwrap();
    let mut restores = Vec::new();
    for _ in 0..=launches {
        let counter = Arc::new(Counter::default());
        let start = Instant::now();
        let sandbox = backend.launch(&spec(dir.path()), counter).unwrap();
        let took = start.elapsed();
        if sandbox
            .info()
            .details
            .get("startedFrom")
            .and_then(|v| v.as_str())
            == Some("template")
        {
            restores.push(took);
        }
        sandbox.destroy().unwrap();
    }
    (!restores.is_empty()).then(|| stats(restores).p50)
}

pub fn run(execs: usize) {
    let microvm = load("microvm");
    // Suspend as a checkpoint (the state to a file, QEMU ended); every
    // launch a cold boot here — template starts are measured below.
    let options = |templates: bool| ProbeContext {
        options: serde_json::json!({"suspend": "checkpoint", "templates": templates}),
        ..ProbeContext::default()
    };
    let report = microvm.probe(&options(false)).unwrap();
    if !report.available {
        println!("microvm is unavailable here: {}", report.hint);
        return;
    }
    println!("microvm: {}", report.note);
    let bwrap = load("bwrap");
    let report = bwrap.probe(&ProbeContext::default()).unwrap();
    if !report.available {
        println!("bwrap (the baseline) is unavailable here: {}", report.hint);
        return;
    }
    let base = measure(&bwrap, execs, 10);
    let mut vm = measure(&microvm, execs, 5);
    // Template starts: the first launch may make the template (a boot).
    microvm.probe(&options(true)).unwrap();
    vm.restore = template_starts(&microvm, 5);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<34} {:>12} {:>12} {:>9}",
        "p50", "bwrap", "microvm", "ratio"
    );
    println!(
        "{:<34} {:>9.1} ms {:>9.1} ms {:>8.1}×",
        "cold launch → ready",
        ms(base.boot),
        ms(vm.boot),
        ms(vm.boot) / ms(base.boot)
    );
    match vm.restore {
        Some(restore) => println!(
            "{:<34} {:>9.1} ms {:>9.1} ms {:>8.1}×",
            "template restore → ready",
            ms(base.boot),
            ms(restore),
            ms(restore) / ms(base.boot)
        ),
        None => println!(
            "{:<34} {:>12} {:>12}",
            "template restore → ready", "—", "no template"
        ),
    }
    println!(
        "{:<34} {:>9.1} ms {:>9.1} ms {:>8.1}×",
        "suspend (bwrap: stop; vm: checkpoint)",
        ms(base.suspend),
        ms(vm.suspend),
        ms(vm.suspend) / ms(base.suspend)
    );
    println!(
        "{:<34} {:>9.1} ms {:>9.1} ms {:>8.1}×",
        "resume (vm: restore → ready)",
        ms(base.resume),
        ms(vm.resume),
        ms(vm.resume) / ms(base.resume)
    );
    println!(
        "{:<34} {:>9.2} ms {:>9.2} ms {:>8.1}×",
        format!("exec → exit of true ({execs} runs)"),
        ms(base.exec),
        ms(vm.exec),
        ms(vm.exec) / ms(base.exec)
    );
    println!(
        "{:<34} {:>7.0} MiB/s {:>6.1} MiB/s {:>8.3}×",
        format!("stdout, {STDOUT_MIB} MiB"),
        base.mib_s,
        vm.mib_s,
        vm.mib_s / base.mib_s
    );
}
