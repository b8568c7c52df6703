//! `sandbox-bench warm-ab OTHER_INIT|OTHER_BUILD_DIR [EXECS]`: the warm
//! exec round trip of two builds, this one's and the other, measured exec
//! by exec in alternation (SPEC G2), with and without the
//! create-time guard, against a bare fork/exec in the same rounds. The
//! other is a sandbox-init (this build's bwrap plugin starts it), or a
//! directory holding another build's `libsandbox_backend_bwrap.so` and
//! `sandbox-init` (both are that build's: a change on the host's side of
//! an exec is measured too). Two runs of the whole bench minutes apart
//! can differ by more than the change being measured (docs/measurements.md);
//! alternation puts both builds under the same load.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sandbox_plugin_api::write_deny::DEFAULT_GLOBS;
use sandbox_plugin_api::{ProbeContext, SandboxSpec};

use crate::{Ends, exec_round_trip, load, load_from, row, spec, stats};

pub fn run(other: &str, execs: usize) {
    let dir = tempfile::tempdir().unwrap();
    let bwrap = load("bwrap");
    let other_dir = std::path::Path::new(other);
    let (other_bwrap, other_init) = if other_dir.is_dir() {
        let init = other_dir.join("sandbox-init");
        let lib = other_dir.join("libsandbox_backend_bwrap.so");
        (Some(load_from(&lib)), init.display().to_string())
    } else {
        (None, other.to_owned())
    };
    let other_init = other_init.as_str();
    let guarded = |spec: SandboxSpec| SandboxSpec {
        write_deny_globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
        ..spec
    };
    // The probe's `init` decides which helper a launch starts; a sandbox
    // keeps the one it started with.
    let mut sandboxes = Vec::new();
    // The other build's first: a plugin without this one's retry on a
    // taken cgroup name would meet this one's groups (each copy of the
    // plugin counts its sandboxes from 0).
    for init in [Some(other_init), None] {
        let bwrap = match (init, &other_bwrap) {
            (Some(_), Some(theirs)) => theirs,
            _ => &bwrap,
        };
        let ctx = ProbeContext {
            options: match init {
                Some(path) => serde_json::json!({ "init": path }),
                None => serde_json::json!({}),
            },
            ..ProbeContext::default()
        };
        let report = bwrap.probe(&ctx).unwrap();
        assert!(report.available, "bwrap: {}", report.hint);
        for guard in [false, true] {
            let base = spec(dir.path());
            let spec = if guard { guarded(base) } else { base };
            let ends = Arc::new(Ends::default());
            let sandbox = bwrap.launch(&spec, ends.clone()).unwrap();
            sandboxes.push((init.is_some(), guard, sandbox, ends, Vec::new()));
        }
    }
    let mut bare = Vec::new();
    let bare_once = || {
        let start = Instant::now();
        Command::new("/bin/true")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        start.elapsed()
    };
    for round in 0..execs + 20 {
        let took = bare_once();
        if round >= 20 {
            bare.push(took);
        }
        for (_, _, sandbox, ends, times) in &mut sandboxes {
            let took = exec_round_trip(sandbox, ends);
            if round >= 20 {
                times.push(took);
            }
        }
    }
    println!("warm exec round trip of /bin/true, {execs} alternating rounds");
    let bare = stats(bare);
    row("bare fork/exec of /bin/true (baseline)", &bare, &bare);
    let mut paired: Vec<(bool, Vec<Duration>)> = Vec::new();
    for (other, guard, sandbox, _, times) in &sandboxes {
        let name = format!(
            "{}, guard {}",
            if *other { "OTHER_INIT" } else { "this build" },
            if *guard { "on" } else { "off" }
        );
        row(&name, &stats(times.clone()), &bare);
        if !*other {
            paired.push((*guard, times.clone()));
        }
        let _ = sandbox;
    }
    for (guard, ours) in &paired {
        let theirs = &sandboxes
            .iter()
            .find(|(other, g, ..)| *other && g == guard)
            .unwrap()
            .4;
        let mut diffs: Vec<f64> = ours
            .iter()
            .zip(theirs)
            .map(|(a, b)| b.as_secs_f64() * 1e6 - a.as_secs_f64() * 1e6)
            .collect();
        diffs.sort_by(f64::total_cmp);
        println!(
            "guard {}: OTHER_INIT − this build, median of paired differences {:+.1} µs",
            if *guard { "on" } else { "off" },
            diffs[diffs.len() / 2]
        );
    }
    for (_, _, sandbox, ..) in sandboxes {
        sandbox.destroy().unwrap();
    }
}
