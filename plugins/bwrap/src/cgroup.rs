//! Per-sandbox resource limits with cgroups (SPEC G6): the plan.
//!
//! [`plan_cgroup`] is pure: from `/proc/self/cgroup`, `/proc/self/mountinfo`
//! and what a [`CgroupFs`] says about the files there, it decides where
//! each limit is enforced — the unified hierarchy (v2) when the server's
//! group offers the controller, else the v1 hierarchy of that controller —
//! which groups to create (only below the server's own), what to write,
//! and which groups bwrap joins before it runs. [`run`] executes a
//! plan; nothing else here touches the system.
//!
//! On v2 a group with processes cannot hand controllers to children (the
//! "no internal processes" rule), so the plan first moves the server into a
//! leaf of its own group ([`SERVER_LEAF`]) and enables the controllers
//! there; sandboxes are siblings of that leaf.
//!
//! A limit nothing can enforce (no controller, no write access — an
//! unprivileged server without delegation) is reported as not enforced; if
//! the spec asked for it by name, the plan is an error instead (fail
//! closed).

use std::fmt;
use std::path::{Path, PathBuf};

use sandbox_plugin_api::SandboxLimits;

/// The leaf the server moves itself into on v2 before it enables
/// controllers for its children.
pub const SERVER_LEAF: &str = "cc_server";

/// Tasks on top of the spec's `tasks` for the sandbox's own processes and
/// threads (bwrap, sandbox-init's supervisor and fork threads, the egress
/// forwarder and its relays), so commands cannot starve them of the limit.
pub const OWN_TASKS: u64 = 64;

/// The period of the CPU quota, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// The least memory a sandbox can start in (bwrap, sandbox-init, a shell).
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;

/// What the plan reads: the server's own cgroups and the mounts.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// `/proc/self/cgroup`.
    pub self_cgroup: String,
    /// `/proc/self/mountinfo`.
    pub mountinfo: String,
}

impl Facts {
    /// This process's.
    pub fn of_self() -> Facts {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        Facts {
            self_cgroup: read("/proc/self/cgroup"),
            mountinfo: read("/proc/self/mountinfo"),
        }
    }
}

/// What the plan may ask of the cgroup filesystem (a fake tree in tests).
pub trait CgroupFs {
    /// A file's contents, if it exists and can be read.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// Whether this process may create entries in (or write) `path`.
    fn writable(&self, path: &Path) -> bool;
}

/// The real filesystem.
pub struct RealFs;

impl CgroupFs for RealFs {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn writable(&self, path: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: access reads a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
    }
}

/// One of the limits, as the handle and refusals name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Memory,
    Tasks,
    Cpu,
}

impl Limit {
    /// The spec's field name.
    pub fn field(self) -> &'static str {
        match self {
            Limit::Memory => "memoryBytes",
            Limit::Tasks => "tasks",
            Limit::Cpu => "cpuMillis",
        }
    }

    /// The cgroup controller that enforces it.
    pub fn controller(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::Tasks => "pids",
            Limit::Cpu => "cpu",
        }
    }

    const ALL: [Limit; 3] = [Limit::Memory, Limit::Tasks, Limit::Cpu];
}

/// How one limit is held.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Enforcement {
    /// Not asked for (no spec value, no default).
    #[default]
    Unset,
    /// Enforced by this cgroup controller (`"v1 memory"`, `"v2 pids"`).
    By(String),
    /// Asked for by a default, and not enforceable here: why.
    NotEnforced(String),
}

/// One operation on the cgroup filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create a directory (a group); an existing one is fine only for the
    /// server's own v2 leaf.
    Mkdir(PathBuf),
    /// Write a value into a control file.
    Write(PathBuf, String),
}

/// Where the OOM kills of a sandbox's memory group are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    /// `memory.oom_control` (v1) or `memory.events` (v2).
    pub file: PathBuf,
}

impl OomCounter {
    /// The `oom_kill` count in the file's text.
    pub fn parse(text: &str) -> Option<u64> {
        text.lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
    }
}

/// What to do for one sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupPlan {
    /// In order: the server's v2 leaf (once), the groups, their limits.
    pub steps: Vec<Step>,
    /// The files bwrap writes `0` into before it execs: v1 `tasks`, v2
    /// `cgroup.procs`.
    pub join: Vec<PathBuf>,
    /// The groups to remove at destroy, children first.
    pub remove: Vec<PathBuf>,
    /// Where OOM kills are counted, when memory is limited.
    pub oom: Option<OomCounter>,
    /// Memory, tasks, CPU: how each is held.
    pub memory: Enforcement,
    pub tasks: Enforcement,
    pub cpu: Enforcement,
}

impl CgroupPlan {
    /// How `limit` is held.
    pub fn enforcement(&self, limit: Limit) -> &Enforcement {
        match limit {
            Limit::Memory => &self.memory,
            Limit::Tasks => &self.tasks,
            Limit::Cpu => &self.cpu,
        }
    }
}

/// Why a spec's limits are refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error(
        "the spec asks for `limits.{field}`, which cannot be enforced here: {why}; remove it from the spec, or run the server where the `{controller}` cgroup controller is delegated to it"
    )]
    NotEnforceable {
        field: &'static str,
        controller: &'static str,
        why: String,
    },
    #[error("`limits.{field}` is {value}; {rule}")]
    OutOfRange {
        field: &'static str,
        value: u64,
        rule: &'static str,
    },
}

/// A mounted cgroup hierarchy and the server's group in it.
#[derive(Debug, Clone)]
struct Hierarchy {
    /// The server's group, as a directory.
    dir: PathBuf,
    /// `v1` or `v2`.
    version: u8,
}

/// Plans the groups of one sandbox named `name`.
///
/// `asked` is what the spec itself set (a requirement), `limits` the
/// spec merged with the configured defaults.
pub fn plan_cgroup(
    facts: &Facts,
    fs: &dyn CgroupFs,
    name: &str,
    asked: &SandboxLimits,
    limits: &SandboxLimits,
) -> Result<CgroupPlan, LimitError> {
    check_ranges(limits)?;
    let mut plan = CgroupPlan::default();
    let wanted: Vec<Limit> = Limit::ALL
        .into_iter()
        .filter(|l| value(limits, *l).is_some())
        .collect();
    if wanted.is_empty() {
        return Ok(plan);
    }
    let mounts = parse_mounts(&facts.mountinfo);
    let own = parse_self(&facts.self_cgroup);
    let v2 = unified(&mounts, &own, fs);

    // Which hierarchy holds each limit, or why none does.
    let mut placed: Vec<(Limit, Hierarchy)> = Vec::new();
    let mut v2_controllers: Vec<&'static str> = Vec::new();
    for limit in &wanted {
        let controller = limit.controller();
        let found = match &v2 {
            Some(v2) if v2.controllers.iter().any(|c| c == controller) => {
                if v2.delegated {
                    v2_controllers.push(controller);
                    Ok(Hierarchy {
                        dir: v2.base.clone(),
                        version: 2,
                    })
                } else {
                    Err(format!(
                        "the server may not write its cgroup v2 group {}",
                        v2.base.display()
                    ))
                }
            }
            _ => v1(&mounts, &own, fs, controller),
        };
        match found {
            Ok(h) => {
                let by = format!("v{} {controller}", h.version);
                set(&mut plan, *limit, Enforcement::By(by));
                placed.push((*limit, h));
            }
            Err(why) => {
                if value(asked, *limit).is_some() {
                    return Err(LimitError::NotEnforceable {
                        field: limit.field(),
                        controller,
                        why,
                    });
                }
                set(&mut plan, *limit, Enforcement::NotEnforced(why));
            }
        }
    }

    // v2: the server's leaf, then the controllers for its children.
    if let Some(v2) = &v2
        && !v2_controllers.is_empty()
    {
        if !v2.in_leaf {
            plan.steps.push(Step::Mkdir(v2.base.join(SERVER_LEAF)));
            plan.steps.push(Step::Write(
                v2.base.join(SERVER_LEAF).join("cgroup.procs"),
                "0".into(),
            ));
        }
        let missing: Vec<String> = v2_controllers
            .iter()
            .filter(|c| !v2.enabled.iter().any(|e| e == *c))
            .map(|c| format!("+{c}"))
            .collect();
        if !missing.is_empty() {
            plan.steps.push(Step::Write(
                v2.base.join("cgroup.subtree_control"),
                missing.join(" "),
            ));
        }
    }

    // One group per hierarchy, each limit written into its group.
    let mut groups: Vec<PathBuf> = Vec::new();
    for (limit, h) in &placed {
        let group = h.dir.join(name);
        if !groups.contains(&group) {
            plan.steps.push(Step::Mkdir(group.clone()));
            groups.push(group.clone());
        }
        let Some(n) = value(limits, *limit) else {
            continue;
        };
        match (limit, h.version) {
            (Limit::Memory, 1) => {
                plan.steps.push(Step::Write(
                    group.join("memory.limit_in_bytes"),
                    n.to_string(),
                ));
                // Where swap is accounted, no more than the limit with it.
                if fs.exists(&h.dir.join("memory.memsw.limit_in_bytes")) {
                    plan.steps.push(Step::Write(
                        group.join("memory.memsw.limit_in_bytes"),
                        n.to_string(),
                    ));
                }
                plan.oom = Some(OomCounter {
                    file: group.join("memory.oom_control"),
                });
            }
            (Limit::Memory, _) => {
                plan.steps
                    .push(Step::Write(group.join("memory.max"), n.to_string()));
                if fs.exists(&h.dir.join("memory.swap.max")) {
                    plan.steps
                        .push(Step::Write(group.join("memory.swap.max"), "0".into()));
                }
                plan.oom = Some(OomCounter {
                    file: group.join("memory.events"),
                });
            }
            (Limit::Tasks, _) => plan.steps.push(Step::Write(
                group.join("pids.max"),
                (n + OWN_TASKS).to_string(),
            )),
            (Limit::Cpu, 1) => {
                plan.steps.push(Step::Write(
                    group.join("cpu.cfs_period_us"),
                    CPU_PERIOD_US.to_string(),
                ));
                plan.steps.push(Step::Write(
                    group.join("cpu.cfs_quota_us"),
                    cpu_quota(n).to_string(),
                ));
            }
            (Limit::Cpu, _) => plan.steps.push(Step::Write(
                group.join("cpu.max"),
                format!("{} {CPU_PERIOD_US}", cpu_quota(n)),
            )),
        }
    }
    // v1: the child joins through `tasks` — it is single-threaded after
    // fork, so its one thread is the whole process, and writing `0` there
    // skips the global lock a `cgroup.procs` write takes (an RCU grace
    // period, milliseconds of every launch; docs/measurements.md). v2 has
    // only `cgroup.procs`.
    plan.join = placed
        .iter()
        .map(|(_, h)| {
            let file = if h.version == 1 {
                "tasks"
            } else {
                "cgroup.procs"
            };
            h.dir.join(name).join(file)
        })
        .fold(Vec::new(), |mut out, file| {
            if !out.contains(&file) {
                out.push(file);
            }
            out
        });
    plan.remove = groups;
    Ok(plan)
}

/// The prefix of every sandbox group's name: `cc_server-PID-N`.
pub const GROUP_PREFIX: &str = "cc_server-";

/// The name of the group of this server's `n`th sandbox.
pub fn group_name(pid: u32, n: u64) -> String {
    format!("{GROUP_PREFIX}{pid}-{n}")
}

/// The directories sandbox groups are made in: the server's own group in
/// each hierarchy it could use (the v2 base and every v1 memory, pids and
/// cpu group), whether or not it may write them.
pub fn group_parents(facts: &Facts, fs: &dyn CgroupFs) -> Vec<PathBuf> {
    let mounts = parse_mounts(&facts.mountinfo);
    let own = parse_self(&facts.self_cgroup);
    let mut out: Vec<PathBuf> = unified(&mounts, &own, fs)
        .map(|u| u.base)
        .into_iter()
        .collect();
    for limit in Limit::ALL {
        if let Ok(h) = v1(&mounts, &own, fs, limit.controller())
            && !out.contains(&h.dir)
        {
            out.push(h.dir);
        }
    }
    out
}

/// Whether `name` is the group of a server that is gone (by its pid), so
/// what a killed server left behind can be removed. A live pid's groups
/// are never stale: they may be a launch under way.
pub fn is_stale(name: &str, alive: &dyn Fn(u32) -> bool) -> bool {
    let Some(rest) = name.strip_prefix(GROUP_PREFIX) else {
        return false;
    };
    let Some((pid, n)) = rest.split_once('-') else {
        return false;
    };
    match (pid.parse::<u32>(), n.parse::<u64>()) {
        (Ok(pid), Ok(_)) => !alive(pid),
        _ => false,
    }
}

/// Removes the empty groups servers that are gone left below `parents`
/// (a killed server cannot remove its own). A group still holding a
/// process stays (the kernel refuses).
pub fn sweep(parents: &[PathBuf]) {
    let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if is_stale(&name.to_string_lossy(), &alive) {
                match std::fs::remove_dir(entry.path()) {
                    Ok(()) => {
                        tracing::info!(group = %entry.path().display(), "removed a cgroup a gone server left")
                    }
                    Err(e) => {
                        tracing::debug!(group = %entry.path().display(), "a gone server's cgroup stays: {e}")
                    }
                }
            }
        }
    }
}

fn cpu_quota(millis: u64) -> u64 {
    (millis * CPU_PERIOD_US / 1000).max(1000)
}

fn check_ranges(limits: &SandboxLimits) -> Result<(), LimitError> {
    if let Some(n) = limits.memory_bytes
        && n < MIN_MEMORY_BYTES
    {
        return Err(LimitError::OutOfRange {
            field: "memoryBytes",
            value: n,
            rule: "a sandbox needs at least 16 MiB (16777216) to start",
        });
    }
    if limits.tasks == Some(0) {
        return Err(LimitError::OutOfRange {
            field: "tasks",
            value: 0,
            rule: "commands need at least one task",
        });
    }
    if let Some(n) = limits.cpu_millis
        && n < 10
    {
        return Err(LimitError::OutOfRange {
            field: "cpuMillis",
            value: n,
            rule: "the least CPU share is 10 (a hundredth of a CPU)",
        });
    }
    if let Some(n) = limits.tmpfs_bytes
        && n < 4096
    {
        return Err(LimitError::OutOfRange {
            field: "tmpfsBytes",
            value: n,
            rule: "a tmpfs needs at least one page (4096)",
        });
    }
    Ok(())
}

fn value(limits: &SandboxLimits, limit: Limit) -> Option<u64> {
    match limit {
        Limit::Memory => limits.memory_bytes,
        Limit::Tasks => limits.tasks,
        Limit::Cpu => limits.cpu_millis,
    }
}

fn set(plan: &mut CgroupPlan, limit: Limit, how: Enforcement) {
    match limit {
        Limit::Memory => plan.memory = how,
        Limit::Tasks => plan.tasks = how,
        Limit::Cpu => plan.cpu = how,
    }
}

/// One cgroup mount from mountinfo.
#[derive(Debug, Clone)]
struct Mount {
    /// The path inside the hierarchy that is mounted (field 4).
    root: PathBuf,
    point: PathBuf,
    v2: bool,
    /// v1: the controllers in the super options.
    controllers: Vec<String>,
}

fn parse_mounts(mountinfo: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((head, tail)) = line.split_once(" - ") else {
            continue;
        };
        let head: Vec<&str> = head.split(' ').collect();
        let tail: Vec<&str> = tail.split(' ').collect();
        if head.len() < 5 || tail.len() < 3 {
            continue;
        }
        let v2 = match tail[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        out.push(Mount {
            root: PathBuf::from(sandbox_exec_group::unescape_mountinfo(head[3])),
            point: PathBuf::from(sandbox_exec_group::unescape_mountinfo(head[4])),
            v2,
            controllers: tail[2].split(',').map(str::to_owned).collect(),
        });
    }
    out
}

/// The server's groups: `(controllers, path)`; v2 has no controllers.
fn parse_self(text: &str) -> Vec<(Vec<String>, PathBuf)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect();
            Some((controllers, PathBuf::from(path)))
        })
        .collect()
}

/// Where `group` (a path in the hierarchy) is, under `mount`.
fn under(mount: &Mount, group: &Path) -> Option<PathBuf> {
    let inside = group.strip_prefix(&mount.root).ok()?;
    Some(mount.point.join(inside))
}

/// The unified hierarchy as the server sees it.
struct Unified {
    /// Where sandbox groups go: the server's group (the parent of its leaf).
    base: PathBuf,
    /// Whether the server is already in its leaf.
    in_leaf: bool,
    /// `cgroup.controllers` of the base.
    controllers: Vec<String>,
    /// `cgroup.subtree_control` of the base.
    enabled: Vec<String>,
    /// Whether the server may create groups and enable controllers there.
    delegated: bool,
}

fn unified(mounts: &[Mount], own: &[(Vec<String>, PathBuf)], fs: &dyn CgroupFs) -> Option<Unified> {
    let (_, path) = own.iter().find(|(c, _)| c.is_empty())?;
    let mount = mounts.iter().find(|m| m.v2)?;
    let dir = under(mount, path)?;
    let in_leaf = dir.file_name().is_some_and(|n| n == SERVER_LEAF);
    let base = if in_leaf {
        dir.parent()?.to_path_buf()
    } else {
        dir
    };
    let words = |file: &str| -> Vec<String> {
        fs.read(&base.join(file))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let delegated = fs.writable(&base)
        && fs.writable(&base.join("cgroup.subtree_control"))
        && fs.writable(&base.join("cgroup.procs"));
    Some(Unified {
        controllers: words("cgroup.controllers"),
        enabled: words("cgroup.subtree_control"),
        base,
        in_leaf,
        delegated,
    })
}

fn v1(
    mounts: &[Mount],
    own: &[(Vec<String>, PathBuf)],
    fs: &dyn CgroupFs,
    controller: &str,
) -> Result<Hierarchy, String> {
    let Some(mount) = mounts
        .iter()
        .find(|m| !m.v2 && m.controllers.iter().any(|c| c == controller))
    else {
        return Err(format!(
            "no `{controller}` cgroup controller is mounted (neither v2 nor v1)"
        ));
    };
    let Some((_, path)) = own.iter().find(|(c, _)| c.iter().any(|c| c == controller)) else {
        return Err(format!(
            "the server is in no group of the v1 `{controller}` hierarchy"
        ));
    };
    let Some(dir) = under(mount, path) else {
        return Err(format!(
            "the server's v1 `{controller}` group {} is outside the mount at {}",
            path.display(),
            mount.point.display()
        ));
    };
    if !fs.exists(&dir) || !fs.writable(&dir) {
        return Err(format!(
            "the server may not create groups below its v1 `{controller}` group {}",
            dir.display()
        ));
    }
    Ok(Hierarchy { dir, version: 1 })
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Enforcement::Unset => f.write_str("unset"),
            Enforcement::By(by) => write!(f, "cgroup {by}"),
            Enforcement::NotEnforced(why) => write!(f, "not enforced: {why}"),
        }
    }
}

/// Failures of running a plan.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("creating the cgroup {0}")]
    Mkdir(PathBuf, #[source] std::io::Error),
    #[error("writing `{value}` to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("opening {0} for bwrap to join")]
    Join(PathBuf, #[source] std::io::Error),
}

/// The groups of one sandbox, removed when dropped.
#[derive(Debug, Default)]
pub struct Groups {
    remove: Vec<PathBuf>,
}

impl Groups {
    /// Removes every group (after the sandbox's processes are gone).
    pub fn remove(&mut self) {
        for dir in self.remove.drain(..).rev() {
            // A group empties a moment after its last process is reaped.
            let mut tries = 0;
            while let Err(e) = std::fs::remove_dir(&dir) {
                if e.kind() == std::io::ErrorKind::NotFound {
                    break;
                }
                tries += 1;
                if tries > 200 {
                    tracing::warn!(group = %dir.display(), "cannot remove the sandbox's cgroup: {e}");
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Creates the plan's groups and writes its limits. On failure every group
/// made so far is removed again (the returned error says which step).
pub fn run(plan: &CgroupPlan) -> Result<Groups, RunError> {
    let mut groups = Groups::default();
    for step in &plan.steps {
        match step {
            Step::Mkdir(dir) => match std::fs::create_dir(dir) {
                Ok(()) => {
                    if plan.remove.contains(dir) {
                        groups.remove.push(dir.clone());
                    }
                }
                // The server's own leaf stays; it is made once.
                Err(e)
                    if e.kind() == std::io::ErrorKind::AlreadyExists
                        && !plan.remove.contains(dir) => {}
                Err(e) => return Err(RunError::Mkdir(dir.clone(), e)),
            },
            Step::Write(path, value) => {
                std::fs::write(path, value).map_err(|source| RunError::Write {
                    path: path.clone(),
                    value: value.clone(),
                    source,
                })?;
            }
        }
    }
    Ok(groups)
}

/// Opens the plan's join files (`tasks`, `cgroup.procs`) for the child.
pub fn open_joins(plan: &CgroupPlan) -> Result<Vec<std::fs::File>, RunError> {
    plan.join
        .iter()
        .map(|path| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(|e| RunError::Join(path.clone(), e))
        })
        .collect()
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
