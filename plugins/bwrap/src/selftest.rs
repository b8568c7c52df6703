//! The create-time guard's self-test, run by the probe (SPEC G1): a real
//! sandbox with the guard, where `touch x.pem` must be refused — with an
//! exact violation and no file — and `touch x.txt` must work. Only then
//! does the backend list `fs.deny-glob-on-create`.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use sandbox_init::proto::{Reply, Request};
use sandbox_plugin_api::{SandboxBindMount, SandboxSpec, SandboxViolation};

use crate::control::{ControlEvents, Exit};
use crate::plan::{PlanInput, RealHost, plan};
use crate::probe::Tools;
use crate::sandbox::{CONTROL_FD, start};

/// The oldest kernel the guard is offered on: `WAIT_KILLABLE_RECV` (5.19).
const KERNEL_FLOOR: (u32, u32) = (5, 19);

#[derive(Default)]
struct Seen {
    exits: Mutex<HashMap<u64, Exit>>,
    violations: Mutex<Vec<(u64, SandboxViolation)>>,
    changed: Condvar,
}

impl ControlEvents for Seen {
    fn exited(&self, exec_id: u64, exit: Exit) {
        if let Ok(mut exits) = self.exits.lock() {
            exits.insert(exec_id, exit);
        }
        self.changed.notify_all();
    }

    fn violation(&self, exec_id: u64, violation: SandboxViolation) {
        if let Ok(mut v) = self.violations.lock() {
            v.push((exec_id, violation));
        }
    }

    fn lost(&self) {
        self.changed.notify_all();
    }
}

impl Seen {
    fn wait_exit(&self, id: u64) -> Option<Exit> {
        let exits = self.exits.lock().ok()?;
        let (exits, _) = self
            .changed
            .wait_timeout_while(exits, Duration::from_secs(10), |e| !e.contains_key(&id))
            .ok()?;
        exits.get(&id).copied()
    }
}

/// `(major, minor)` of the running kernel.
fn kernel_version() -> Option<(u32, u32)> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut parts = release.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// A private directory for the test, removed afterwards.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "cc-bwrap-guard-selftest-{}-{nanos}",
            std::process::id()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the guard's self-test; `Err` says why the guard is not offered.
pub fn guard(tools: &Tools) -> Result<(), String> {
    match kernel_version() {
        Some(v) if v >= KERNEL_FLOOR => {}
        Some((major, minor)) => {
            return Err(format!(
                "the create-time guard needs Linux 5.19 or newer; this kernel is {major}.{minor}"
            ));
        }
        None => return Err("cannot read the kernel version".into()),
    }
    if !sandbox_init::seccomp::notify_available() {
        return Err("this kernel offers no seccomp user notification".into());
    }
    let scratch = Scratch::new().map_err(|e| format!("creating a scratch directory: {e}"))?;
    let spec = SandboxSpec {
        session_id: "guard-self-test".into(),
        bind_mounts: vec![SandboxBindMount {
            host_path: scratch.0.clone(),
            guest_path: None,
            read_only: false,
        }],
        guest_workdir: Some(scratch.0.clone()),
        write_deny_globs: vec!["**/*.pem".into()],
        ..SandboxSpec::default()
    };
    let planned = plan(
        &PlanInput {
            spec: &spec,
            home: None,
            init: &tools.init,
            control_fd: CONTROL_FD,
            extra_system: &[],
            guard: true,
            gitconfig: None,
            toolchains: &crate::toolchains::Found::default(),
            cache_bytes: crate::plan::DEFAULT_CACHE_BYTES,
            tmpfs_bytes: crate::limits::DEFAULT_TMPFS_BYTES,
            server_state: &[],
            path_dirs: &[],
        },
        &RealHost,
    )
    .map_err(|e| e.to_string())?;
    let seen = Arc::new(Seen::default());
    let (mut child, control) = start(tools, &planned, &[], seen.clone()).map_err(|e| e.message)?;
    let result = run_checks(&control, &seen, &scratch.0);
    control.close();
    let _ = child.wait();
    result
}

fn run_checks(control: &crate::control::Control, seen: &Seen, dir: &Path) -> Result<(), String> {
    for (id, name, allowed) in [(1u64, "x.pem", false), (2, "x.txt", true)] {
        let (_out_r, out_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let (mut err_r, err_w) = std::io::pipe().map_err(|e| e.to_string())?;
        let request = Request::Exec {
            id,
            argv: vec!["touch".into(), name.into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            cwd: dir.display().to_string(),
            stdin: false,
            cgroup: false,
            cgroup_dir: false,
            pty: None,
        };
        match control.call(&request, &[out_w.as_fd(), err_w.as_fd()]) {
            Ok(Reply::Started { .. }) => {}
            other => {
                return Err(format!(
                    "the self-test could not run `touch {name}`: {other:?}"
                ));
            }
        }
        drop((out_w, err_w));
        let exit = seen
            .wait_exit(id)
            .ok_or_else(|| format!("`touch {name}` did not finish in the self-test"))?;
        let created = dir.join(name).exists();
        let ok = exit.code == Some(0);
        if allowed && !(ok && created) {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut err_r, &mut said);
            return Err(format!(
                "the guard refused `touch {name}`, which it must allow ({exit:?}): {}",
                said.trim()
            ));
        }
        if !allowed && (ok || created) {
            return Err(format!(
                "the guard let `touch {name}` through ({exit:?}, created: {created})"
            ));
        }
    }
    let reported = seen
        .violations
        .lock()
        .map(|v| {
            v.iter()
                .any(|(id, v)| *id == 1 && v.target.ends_with("x.pem"))
        })
        .unwrap_or(false);
    if !reported {
        return Err("the guard refused x.pem but reported no violation".into());
    }
    Ok(())
}
