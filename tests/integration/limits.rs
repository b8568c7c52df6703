//! Resource limits per sandbox (SPEC G6, F10), black-box: the real server
//! launches bwrap sandboxes with `limits` in their specs, commands inside
//! try to exceed them, and the HOST is checked afterwards (the cgroups the
//! server made, the sizes of what was written, the sandbox still
//! answering). This machine offers cgroup v1 memory, pids and cpu; the v2
//! path is tested as a plan (`plugins/bwrap/src/cgroup_tests.rs`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::util::*;

/// Refuses to run a script anywhere but in a bwrap sandbox.
const ONLY_IN_A_SANDBOX: &str = "grep -q sandbox-init /proc/1/cmdline 2>/dev/null \
    || { echo 'cc-test: not in a bwrap sandbox; refusing to run the script' >&2; exit 99; }\n";

/// A server whose commands meet only the sandbox (the plugins dir lives
/// as long as it).
fn server() -> (Plugins, Server) {
    let plugins = Plugins::with_bwrap();
    let server = Server::start_with(CcServer::new(&plugins).config(SANDBOX_LAYER_ONLY));
    (plugins, server)
}

/// Creates a bwrap sandbox `id` over `dir` with `limits`; the response.
fn create(server: &Server, id: &str, dir: &Path, limits: Value) -> Response {
    let body = json!({
        "sessionId": id,
        "bindMounts": [{"hostPath": dir}],
        "guestWorkdir": dir,
        "limits": limits,
    });
    server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    )
}

fn create_ok(server: &Server, id: &str, dir: &Path, limits: Value) -> Value {
    let response = create(server, id, dir, limits);
    assert_eq!(
        response.status,
        201,
        "{}\nlog:\n{}",
        text(&response.body),
        server.log()
    );
    response.json()
}

/// Runs `sh -c SCRIPT` (behind [`ONLY_IN_A_SANDBOX`]) to its end.
fn exec_sh(server: &Server, id: &str, script: &str) -> Vec<Value> {
    exec(
        server,
        id,
        &["sh", "-c", &format!("{ONLY_IN_A_SANDBOX}{script}")],
    )
}

fn exec(server: &Server, id: &str, argv: &[&str]) -> Vec<Value> {
    let response = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&json!({ "argv": argv, "timeoutMs": 60_000 }).to_string()),
    );
    assert_eq!(response.status, 200, "{}", text(&response.body));
    response.lines()
}

/// The sandbox's cgroup directories on the host, read from bwrap's
/// `/proc/PID/cgroup` (the server's own groups are not among them).
fn groups_of(pid: i64) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if path.contains("cc_server-") && ["memory", "pids", "cpu"].contains(&controllers) {
            out.push(PathBuf::from(format!("/sys/fs/cgroup/{controllers}{path}")));
        }
    }
    out
}

fn last(events: &[Value]) -> &Value {
    events.last().unwrap()
}

/// G6: the handle shows every limit and whether it is enforced (this host
/// has v1 memory, pids and cpu hierarchies); the groups
/// exist below the server's own while the sandbox lives, hold the limits
/// asked for, and are gone after destroy.
#[test]
fn limits_are_shown_held_and_their_groups_removed_at_destroy() {
    require_bwrap!();
    let (_plugins, server) = server();
    let work = tempfile::tempdir().unwrap();
    let id = format!("lim-{}", unique());
    let handle = create_ok(
        &server,
        &id,
        work.path(),
        json!({"memoryBytes": 256 << 20, "tasks": 100, "cpuMillis": 500}),
    );
    let limits = &handle["details"]["limits"];
    assert_eq!(limits["memoryBytes"]["value"], 256 << 20, "{handle}");
    assert_eq!(limits["memoryBytes"]["enforced"], true, "{handle}");
    assert_eq!(limits["memoryBytes"]["by"], "cgroup v1 memory", "{handle}");
    assert_eq!(limits["tasks"]["enforced"], true, "{handle}");
    assert_eq!(limits["tmpfsBytes"]["enforced"], true, "{handle}");
    assert_eq!(limits["cpuMillis"]["by"], "cgroup v1 cpu", "{handle}");
    let pid = handle["details"]["bwrapPid"].as_i64().unwrap();
    let groups = groups_of(pid);
    assert_eq!(
        groups.len(),
        3,
        "bwrap is in a memory, a pids and a cpu group: {groups:?}"
    );
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let group = |controller: &str| -> PathBuf {
        let found = groups
            .iter()
            .find(|g| g.starts_with(format!("/sys/fs/cgroup/{controller}/")))
            .unwrap_or_else(|| panic!("no {controller} group: {groups:?}"))
            .clone();
        let mine = own
            .lines()
            .find_map(|l| {
                l.split_once(&format!(":{controller}:"))
                    .map(|(_, p)| p.to_owned())
            })
            .unwrap();
        let below = PathBuf::from(format!("/sys/fs/cgroup/{controller}{mine}"));
        assert_eq!(
            found.parent(),
            Some(below.as_path()),
            "{} is a child of the server's own {controller} group",
            found.display()
        );
        found
    };
    let (memory, pids, cpu) = (group("memory"), group("pids"), group("cpu"));
    let read = |p: PathBuf| std::fs::read_to_string(p).unwrap().trim().to_owned();
    assert_eq!(
        read(memory.join("memory.limit_in_bytes")),
        (256u64 << 20).to_string()
    );
    // The sandbox's own tasks (bwrap, sandbox-init's threads) on top.
    assert_eq!(read(pids.join("pids.max")), "164");
    assert_eq!(read(cpu.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(cpu.join("cpu.cfs_period_us")), "100000");
    let done = server.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(done.status, 200, "{}", text(&done.body));
    for group in &groups {
        assert!(!group.exists(), "{} is left after destroy", group.display());
    }
}

/// G6: a fork bomb stops at the tasks limit (it ends on its own when a
/// fork fails, then kills what it made), and the sandbox still answers.
#[test]
fn a_fork_bomb_is_bounded_and_the_sandbox_still_answers() {
    require_bwrap!();
    let (_plugins, server) = server();
    let work = tempfile::tempdir().unwrap();
    let id = format!("bomb-{}", unique());
    create_ok(&server, &id, work.path(), json!({"tasks": 40}));
    // Without the limit this makes 3000 sleeps (and still ends).
    let events = exec_sh(
        &server,
        &id,
        "( i=0; while [ $i -lt 3000 ]; do sleep 1000 & i=$((i+1)); echo $i > /tmp/n; done ) 2>/dev/null\n\
         read n < /tmp/n; echo forked=$n\nkill -9 0",
    );
    let out = joined(&events, "stdout");
    let forked: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("forked="))
        .unwrap_or_else(|| panic!("{events:?}"))
        .parse()
        .unwrap();
    assert!(
        forked < 3000,
        "the bomb was not bounded: {forked} processes"
    );
    assert!(forked <= 40 + 64, "more tasks than the limit: {forked}");
    let alive = exec(&server, &id, &["echo", "alive"]);
    assert_eq!(joined(&alive, "stdout"), "alive\n", "{alive:?}");
    assert_eq!(exit_code(&alive), 0);
}

/// G6, F10: a command allocating past the memory limit ends `killed`
/// reason `oom`; the sandbox lives on and the next exec runs.
#[test]
fn a_command_past_the_memory_limit_is_killed_oom_and_the_sandbox_lives_on() {
    require_bwrap!();
    let (_plugins, server) = server();
    let work = tempfile::tempdir().unwrap();
    let id = format!("oom-{}", unique());
    create_ok(&server, &id, work.path(), json!({"memoryBytes": 64 << 20}));
    // 512 MiB written, so every page is really used.
    let events = exec(
        &server,
        &id,
        &[
            "/usr/bin/python3",
            "-c",
            "b = b'x' * (512 << 20); print('allocated')",
        ],
    );
    let end = last(&events);
    assert_eq!(end["type"], "killed", "{events:?}");
    assert_eq!(end["reason"], "oom", "{events:?}");
    assert!(
        !joined(&events, "stdout").contains("allocated"),
        "{events:?}"
    );
    let next = exec(&server, &id, &["echo", "still here"]);
    assert_eq!(joined(&next, "stdout"), "still here\n", "{next:?}");
    // A kill that is not the OOM killer's stays an ordinary exit.
    let killed = exec_sh(&server, &id, "kill -9 $$");
    assert_eq!(last(&killed)["type"], "exit", "{killed:?}");
    assert_eq!(last(&killed)["exitCode"], 137, "{killed:?}");
}

/// G6: every writable tmpfs is full at its size (ENOSPC inside), so what a
/// command writes there never takes more of the host's memory than that;
/// bubblewrap's unsized `/dev` is read-only.
#[test]
fn a_tmpfs_is_full_at_its_size() {
    require_bwrap!();
    let (_plugins, server) = server();
    let work = tempfile::tempdir().unwrap();
    let id = format!("tmpfs-{}", unique());
    create_ok(&server, &id, work.path(), json!({"tmpfsBytes": 8 << 20}));
    let events = exec_sh(
        &server,
        &id,
        "for d in /tmp /var/tmp /dev/shm \"$HOME\"; do\n\
           dd if=/dev/zero of=$d/big bs=1M count=32 2>err.txt; echo \"rc=$? $(stat -c %s $d/big)\"\n\
           grep -o 'No space left on device' err.txt | head -1\n\
         done\n\
         echo x > /dev/made 2>/dev/null && echo dev=written || echo dev=refused",
    );
    let out = joined(&events, "stdout");
    let mut full = 0;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("rc=") {
            let (rc, size) = rest.split_once(' ').unwrap();
            assert_ne!(rc, "0", "a 32 MiB write fit: {out}");
            let size: u64 = size.parse().unwrap();
            assert!(size <= 8 << 20, "{size} bytes written past the size: {out}");
            full += 1;
        }
    }
    assert_eq!(full, 4, "{out}\n{events:?}");
    assert_eq!(out.matches("No space left on device").count(), 4, "{out}");
    assert!(out.contains("dev=refused"), "{out}");
}

/// G6, fail closed: an unprivileged server (no cgroup delegated to it)
/// refuses a spec that asks for a memory limit, naming the field and the
/// missing controller — and still runs a spec that asks for none (its
/// defaults then not enforced, its tmpfs sized). The `none` backend
/// refuses limits too.
#[test]
fn limits_that_cannot_be_held_are_refused() {
    require_bwrap!();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // SAFETY: plain getters.
    let (euid, uid, gid) = unsafe {
        if libc::geteuid() == 0 {
            (0, 65534, 65534)
        } else {
            (libc::geteuid(), libc::getuid(), libc::getgid())
        }
    };
    std::os::unix::fs::chown(w, Some(uid), Some(gid)).unwrap();
    let spec = w.join("spec.json");
    let write_spec = |limits: Value| {
        let body = json!({"bindMounts": [{"hostPath": w}], "guestWorkdir": w, "limits": limits});
        std::fs::write(&spec, body.to_string()).unwrap();
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o644)).unwrap();
    };
    let plugins = Plugins::with_bwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    let program = bin_dir.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |global: &[&str], flags: &[&str], argv: &[&str]| {
        let mut command = CcServer::with_program(&plugins, &program).current_dir(w);
        if euid == 0 {
            command = command.run_as(uid, gid);
        }
        command
            .args(global)
            .arg("run")
            .arg("--spec")
            .arg(&spec)
            .args(flags)
            .arg("--")
            .args(argv)
            .output()
    };
    if euid == 0 {
        write_spec(json!({"memoryBytes": 256 << 20}));
        let out = run(&[], &["--backend", "bwrap"], &["true"]);
        assert_eq!(code(&out), 125, "{}", both(&out));
        let said = text(&out.stderr);
        assert!(
            said.contains("limits.memoryBytes") && said.contains("`memory` cgroup controller"),
            "{said}"
        );
        write_spec(json!({}));
        let out = run(
            &[],
            &["--backend", "bwrap"],
            &["sh", "-c", "df -k /tmp | tail -1"],
        );
        assert_eq!(code(&out), 0, "{}", both(&out));
        assert!(
            text(&out.stdout).contains("1048576"),
            "/tmp is sized: {}",
            both(&out)
        );
    }
    write_spec(json!({"tasks": 10}));
    let out = run(&["--sandbox", "off"], &[], &["true"]);
    assert_eq!(code(&out), 125, "{}", both(&out));
    assert!(
        text(&out.stderr).contains("none backend enforces none"),
        "{}",
        both(&out)
    );
}

/// G6: the defaults come from `[backends.bwrap.limits]` when a spec sets
/// nothing; a misspelt key there makes bwrap unavailable with a hint
/// naming it, rather than leaving sandboxes unlimited.
#[test]
fn configured_defaults_apply_and_a_misspelt_key_is_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let config =
        format!("{SANDBOX_LAYER_ONLY}[backends.bwrap.limits]\ntasks = 50\ntmpfs_bytes = 4194304\n");
    let server = Server::start_with(CcServer::new(&plugins).config(&config));
    let work = tempfile::tempdir().unwrap();
    let id = format!("cfg-{}", unique());
    let handle = create_ok(&server, &id, work.path(), json!({}));
    let limits = &handle["details"]["limits"];
    assert_eq!(limits["tasks"]["value"], 50, "{handle}");
    assert_eq!(limits["tasks"]["enforced"], true, "{handle}");
    assert_eq!(limits["tmpfsBytes"]["value"], 4 << 20, "{handle}");
    let pid = handle["details"]["bwrapPid"].as_i64().unwrap();
    let pids = groups_of(pid)
        .into_iter()
        .find(|g| g.starts_with("/sys/fs/cgroup/pids/"))
        .unwrap();
    let max = std::fs::read_to_string(pids.join("pids.max")).unwrap();
    assert_eq!(max.trim(), "114");
    let df = exec(&server, &id, &["df", "-k", "/tmp"]);
    assert!(joined(&df, "stdout").contains(" 4096 "), "{df:?}");

    let bad = format!("{SANDBOX_LAYER_ONLY}[backends.bwrap.limits]\nmemory = 1\n");
    let work = tempfile::tempdir().unwrap();
    let out = CcServer::new(&plugins)
        .config(&bad)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "true"])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    assert!(
        text(&out.stderr).contains("unknown field `memory`"),
        "{}",
        both(&out)
    );
}

/// G6: a server killed with SIGKILL cannot remove its sandboxes' groups;
/// the next server's probe does (they are empty once bwrap is gone).
#[test]
fn groups_a_killed_server_left_are_removed_by_the_next() {
    require_bwrap!();
    let (plugins, mut server) = server();
    let work = tempfile::tempdir().unwrap();
    let id = format!("kill-{}", unique());
    let handle = create_ok(&server, &id, work.path(), json!({"tasks": 100}));
    let pid = handle["details"]["bwrapPid"].as_i64().unwrap();
    let groups = groups_of(pid);
    assert!(!groups.is_empty(), "{handle}");
    server.stop_with(libc::SIGKILL);
    assert!(
        eventually(std::time::Duration::from_secs(20), || process_is_gone(
            pid as i32
        )),
        "bwrap {pid} outlived its server"
    );
    let out = CcServer::new(&plugins).arg("probe").output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    for group in &groups {
        assert!(!group.exists(), "{} is left", group.display());
    }
}
