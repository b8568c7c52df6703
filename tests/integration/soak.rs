//! Threat model T34: a soak of create → exec → destroy cycles
//! and a load of concurrent execs, each asserting that the server holds no
//! more afterwards than before — descriptors, threads, descendant
//! processes, mounts, runtime entries, cgroups (SPEC G5: a sandbox leaves
//! nothing behind once destroyed). RSS and latency are printed, never
//! asserted (no timing asserts).
//!
//! Each test starts a server of its own, with a temp dir of its own
//! (`TMPDIR`, no `XDG_RUNTIME_DIR`), and counts only that server's
//! `/proc/<pid>` entries, its descendants, the entries under that temp dir
//! and the cgroups named after its pid (`cc_server-<pid>-<n>`), so tests
//! running beside them in this binary cannot move the figures; the tests
//! here also run one after the other ([`SERIAL`]), as each loads the
//! machine's two cores alone. The module takes minutes in a debug build on
//! a 2-core machine (docs/measurements.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::*;

/// Held by each test here for its whole run: the leak checks run serially.
static SERIAL: Mutex<()> = Mutex::new(());

/// Cycles before the first count: the `none` backend's watcher process
/// and spawner thread, bwrap's kept probe, the allocator's arenas and the
/// API's worker threads are made then, not leaked later.
const WARM_UP: usize = 20;

/// How much a count may differ from the warm count (a connection still
/// closing, a thread parking).
const SLACK: usize = 2;

/// What the server holds at one moment.
#[derive(Debug, Clone, PartialEq)]
struct Holdings {
    fds: usize,
    threads: usize,
    descendants: usize,
    mounts: usize,
    runtime_entries: usize,
    cgroups: usize,
}

impl Holdings {
    /// The fields that grew by more than [`SLACK`] since `before`.
    fn grown_since(&self, before: &Holdings) -> Vec<String> {
        [
            ("fds", before.fds, self.fds),
            ("threads", before.threads, self.threads),
            ("descendants", before.descendants, self.descendants),
            ("mounts", before.mounts, self.mounts),
            (
                "runtime entries",
                before.runtime_entries,
                self.runtime_entries,
            ),
            ("cgroups", before.cgroups, self.cgroups),
        ]
        .into_iter()
        .filter(|(_, b, a)| *a > *b + SLACK)
        .map(|(name, b, a)| format!("{name}: {b} -> {a}"))
        .collect()
    }
}

/// A server made for a leak check: its own temp dir, so every runtime
/// entry it makes is one this test can count.
struct Subject {
    server: Server,
    temp: tempfile::TempDir,
    _plugins: Plugins,
}

impl Subject {
    fn start(plugins: Plugins, config: &str) -> Self {
        let temp = tempfile::tempdir().unwrap();
        let server = Server::start_with(
            CcServer::new(&plugins)
                .config(config)
                .env("TMPDIR", temp.path())
                .env_remove("XDG_RUNTIME_DIR"),
        );
        Self {
            server,
            temp,
            _plugins: plugins,
        }
    }

    fn holdings(&self) -> Holdings {
        let pid = self.server.pid();
        Holdings {
            fds: entries(&format!("/proc/{pid}/fd")),
            threads: entries(&format!("/proc/{pid}/task")),
            descendants: descendants(pid).len(),
            mounts: std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
                .unwrap()
                .lines()
                .count(),
            runtime_entries: tree_entries(self.temp.path()),
            cgroups: cgroups_of(pid).len(),
        }
    }

    /// Asserts that the holdings come back to `warm` (within [`SLACK`])
    /// once the server has finished its own cleanup; what it holds then
    /// is named when they do not.
    fn assert_back_to(&self, warm: &Holdings, what: &str) -> Holdings {
        let mut now = self.holdings();
        eventually(Duration::from_secs(30), || {
            now = self.holdings();
            now.grown_since(warm).is_empty()
        });
        let grown = now.grown_since(warm);
        assert!(
            grown.is_empty(),
            "{what}: the server holds more than after the warm-up: {grown:?}\n\
             warm {warm:?}\nnow  {now:?}\ndescendants {:?}\nfds {:?}\ncgroups {:?}\nlog:\n{}",
            descendants(self.server.pid()),
            fd_targets(self.server.pid()),
            cgroups_of(self.server.pid()),
            self.server.log()
        );
        now
    }
}

/// How many entries a directory has (0 when it is unreadable).
fn entries(dir: &str) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Every entry beneath `dir`, recursively (symlinks not followed).
fn tree_entries(dir: &Path) -> usize {
    let Ok(list) = std::fs::read_dir(dir) else {
        return 0;
    };
    list.filter_map(Result::ok)
        .map(|e| {
            let below = match e.file_type() {
                Ok(t) if t.is_dir() => tree_entries(&e.path()),
                _ => 0,
            };
            1 + below
        })
        .sum()
}

/// Where the server's descriptors point, for a failure message.
fn fd_targets(pid: i32) -> Vec<String> {
    let Ok(list) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    list.filter_map(Result::ok)
        .map(|e| {
            std::fs::read_link(e.path())
                .map(|t| t.display().to_string())
                .unwrap_or_default()
        })
        .collect()
}

/// The processes whose parent chain reaches `root`, with their command
/// names.
fn descendants(root: i32) -> Vec<(i32, String)> {
    let mut parent = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the last `)` (the name may hold one): state, then ppid.
        let Some(ppid) = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let name = stat
            .split_once('(')
            .and_then(|(_, rest)| rest.rsplit_once(')'))
            .map(|(name, _)| name.to_owned())
            .unwrap_or_default();
        parent.insert(pid, (ppid, name));
    }
    let mut out = Vec::new();
    for (&pid, (_, name)) in &parent {
        let mut at = pid;
        // The chain is bounded: a pid seen twice would be a loop.
        for _ in 0..parent.len() {
            match parent.get(&at) {
                Some((ppid, _)) if *ppid == root => {
                    out.push((pid, name.clone()));
                    break;
                }
                Some((ppid, _)) if *ppid > 0 => at = *ppid,
                _ => break,
            }
        }
    }
    out.sort();
    out
}

/// The cgroup directories the bwrap backend made for `pid`'s sandboxes
/// (`cc_server-<pid>-<n>`), below the server's group in each hierarchy.
fn cgroups_of(pid: i32) -> Vec<PathBuf> {
    let prefix = format!("cc_server-{pid}-");
    let Ok(own) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let mount = match controllers {
            "" => "unified".to_owned(),
            c => c.trim_start_matches("name=").to_owned(),
        };
        let mut base = PathBuf::from("/sys/fs/cgroup").join(mount);
        if !base.exists() {
            base = PathBuf::from("/sys/fs/cgroup");
        }
        let group = base.join(path.trim_start_matches('/'));
        // The server may have moved into a leaf of its group (v2).
        for dir in [
            group.clone(),
            group.parent().map(Path::to_path_buf).unwrap_or(group),
        ] {
            let Ok(list) = std::fs::read_dir(&dir) else {
                continue;
            };
            out.extend(
                list.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .map(|e| e.path()),
            );
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The spec every sandbox here gets: `dir` bound and its workdir.
fn spec(id: &str, dir: &Path) -> String {
    json!({"sessionId": id, "bindMounts": [{"hostPath": dir}], "guestWorkdir": dir}).to_string()
}

fn create(server: &Server, backend: &str, id: &str, dir: &Path) {
    let response = server.call(
        "POST",
        &format!("/v1/sandboxes?backend={backend}"),
        Some(&spec(id, dir)),
    );
    assert_eq!(
        response.status,
        201,
        "{backend}: create {id}: {}; log:\n{}",
        text(&response.body),
        server.log()
    );
}

fn destroy(server: &Server, backend: &str, id: &str) {
    let response = server.call("DELETE", &format!("/v1/sandboxes/{id}"), None);
    assert!(
        (200..300).contains(&response.status),
        "{backend}: destroy {id}: {} {}",
        response.status,
        text(&response.body)
    );
}

/// Runs `argv` in sandbox `id` to its end; returns its stdout, asserting
/// exit code 0.
fn exec(server: &Server, backend: &str, id: &str, argv: &[&str]) -> String {
    let response = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&json!({ "argv": argv }).to_string()),
    );
    assert_eq!(
        response.status,
        200,
        "{backend}: exec in {id}: {}",
        text(&response.body)
    );
    let events = response.lines();
    assert_eq!(exit_code(&events), 0, "{backend}: {id}: {events:?}");
    joined(&events, "stdout")
}

/// One create → exec (`echo`) → destroy cycle.
fn cycle(server: &Server, backend: &str, id: &str, dir: &Path) {
    create(server, backend, id, dir);
    assert_eq!(exec(server, backend, id, &["echo", id]), format!("{id}\n"));
    destroy(server, backend, id);
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The soak on one backend: `cycles` cycles after the warm-up, then the
/// no-growth check.
fn soak(plugins: Plugins, backend: &str, cycles: usize) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let subject = Subject::start(plugins, "");
    let server = &subject.server;
    let dir = tempfile::tempdir().unwrap();
    let tag = unique();
    for n in 0..WARM_UP {
        cycle(server, backend, &format!("warm{tag}x{n}"), dir.path());
    }
    let warm = subject.assert_back_to(&subject.holdings(), "warm-up");
    let rss_before = server.rss();
    let mut rss_peak = rss_before;
    let started = Instant::now();
    for n in 0..cycles {
        cycle(server, backend, &format!("soak{tag}x{n}"), dir.path());
        if n % 50 == 0 {
            rss_peak = rss_peak.max(server.rss());
        }
    }
    let elapsed = started.elapsed();
    let after = subject.assert_back_to(&warm, &format!("{backend}: after {cycles} cycles"));
    eprintln!(
        "soak {backend}: {cycles} create->exec->destroy cycles in {:.1} s ({:.1}/s); \
         RSS before {:.1} MiB, peak {:.1} MiB, after {:.1} MiB; warm {warm:?}, after {after:?}",
        elapsed.as_secs_f64(),
        cycles as f64 / elapsed.as_secs_f64(),
        mib(rss_before),
        mib(rss_peak.max(server.rss())),
        mib(server.rss()),
    );
    assert_eq!(
        server.call("GET", "/v1/sandboxes", None).json(),
        json!([]),
        "{backend}: sandboxes left after the soak"
    );
}

/// T34, SPEC G5: 1,000 create → exec → destroy cycles on `none`
/// leave the server with no more descriptors, threads, descendants,
/// mounts or runtime entries than after the warm-up.
#[test]
fn a_thousand_cycles_on_none_leak_nothing() {
    soak(Plugins::with_none(), "none", 1000);
}

/// T34, SPEC G5: the soak on `bwrap` (a warm bubblewrap, its
/// sandbox-init, cgroups and a kept runtime dir per sandbox). All 1,000
/// fit in a debug build on a 2-core machine (docs/measurements.md).
#[test]
fn a_thousand_cycles_on_bwrap_leak_nothing() {
    require_bwrap!();
    soak(Plugins::with_bwrap(), "bwrap", 1000);
}

/// The value at `q` (0..=1) of sorted `values`.
fn quantile(values: &[Duration], q: f64) -> Duration {
    let i = ((values.len() - 1) as f64 * q).round() as usize;
    values[i]
}

const SANDBOXES: usize = 32;
const EXECS_EACH: usize = 10;
/// Each exec's output: 1 MiB of 8-byte lines naming the sandbox and exec.
const OUTPUT: usize = 1 << 20;

/// 32 sandboxes, 10 concurrent execs in each (320 at once), every one's
/// 1 MiB intact and its own, then all destroyed; the no-growth check.
fn load(plugins: Plugins, backend: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The default config: `[api] header_read_timeout_secs` (10 s) once reset
    // some of these 320 execs on a loaded 2-core machine (docs/measurements.md)
    // — the starved server had not read requests sent whole within it (T28).
    // Deadlines are now judged after what arrived is read
    // (`api::requests_sent_whole_to_a_stalled_server_are_answered_not_reset`
    // reproduces it without load), so the test needs no longer timeout.
    let subject = Subject::start(plugins, "");
    let server = &subject.server;
    let dir = tempfile::tempdir().unwrap();
    let tag = unique();
    for n in 0..WARM_UP {
        cycle(server, backend, &format!("warm{tag}x{n}"), dir.path());
    }
    let warm = subject.assert_back_to(&subject.holdings(), "warm-up");
    let rss_before = server.rss();
    let ids: Vec<String> = (0..SANDBOXES).map(|s| format!("load{tag}x{s}")).collect();
    for id in &ids {
        create(server, backend, id, dir.path());
    }
    let peak = Mutex::new(0u64);
    let started = Instant::now();
    let mut latencies: Vec<Duration> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..SANDBOXES)
            .flat_map(|s| (0..EXECS_EACH).map(move |e| (s, e)))
            .map(|(s, e)| {
                let (id, peak) = (&ids[s], &peak);
                scope.spawn(move || {
                    // "s05e3xx\n": 8 bytes, so 1 MiB is whole lines.
                    let line = format!("s{s:02}e{e}xx");
                    let script = format!("yes {line} | head -c {OUTPUT}");
                    let begun = Instant::now();
                    let out = exec(server, backend, id, &["sh", "-c", &script]);
                    let took = begun.elapsed();
                    let mut peak = peak.lock().unwrap_or_else(|e| e.into_inner());
                    *peak = (*peak).max(server.rss());
                    assert_eq!(out.len(), OUTPUT, "{backend}: {id} exec {e}: length");
                    assert!(
                        out.lines().all(|l| l == line),
                        "{backend}: {id} exec {e}: other bytes than its own {line:?}"
                    );
                    took
                })
            })
            .collect();
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        let failed = joined.iter().filter(|r| r.is_err()).count();
        assert!(
            failed == 0,
            "{backend}: {failed} of {} execs failed (see above); log:\n{}",
            joined.len(),
            server.log()
        );
        joined.into_iter().map(Result::unwrap).collect()
    });
    let elapsed = started.elapsed();
    for id in &ids {
        destroy(server, backend, id);
    }
    let after = subject.assert_back_to(&warm, &format!("{backend}: after the load"));
    latencies.sort();
    eprintln!(
        "load {backend}: {SANDBOXES} sandboxes x {EXECS_EACH} concurrent execs of 1 MiB in \
         {:.1} s ({:.0} MiB/s); exec latency p50 {:.0} ms, p99 {:.0} ms; RSS before {:.1} MiB, \
         peak {:.1} MiB, after {:.1} MiB; warm {warm:?}, after {after:?}",
        elapsed.as_secs_f64(),
        mib((SANDBOXES * EXECS_EACH * OUTPUT) as u64) / elapsed.as_secs_f64(),
        quantile(&latencies, 0.5).as_secs_f64() * 1e3,
        quantile(&latencies, 0.99).as_secs_f64() * 1e3,
        mib(rss_before),
        mib(*peak.lock().unwrap()),
        mib(server.rss()),
    );
}

/// T34, SPEC G5, F10: 32 × 10 concurrent 1 MiB execs on `none`.
#[test]
fn concurrent_execs_on_none_leak_nothing_and_stay_intact() {
    load(Plugins::with_none(), "none");
}

/// T34, SPEC G5, F10: 32 × 10 concurrent 1 MiB execs on `bwrap`.
#[test]
fn concurrent_execs_on_bwrap_leak_nothing_and_stay_intact() {
    require_bwrap!();
    load(Plugins::with_bwrap(), "bwrap");
}
