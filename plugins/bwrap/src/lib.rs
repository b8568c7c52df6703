//! The `bwrap` backend: warm Linux sandboxes with bubblewrap (SPEC C2, G2).
//!
//! `launch` starts one long-lived `bwrap` whose PID 1 is `sandbox-init`
//! (shipped beside this library); each exec is a message to it, not a new
//! sandbox. The mount plan ([`plan`]) shows only the spec's binds and a
//! read-only system view, keeps protected paths and the mandatory denies
//! read-only, and masks secrets. Every namespace is unshared (the network
//! one is empty), capabilities are dropped, and PID 1 installs a seccomp
//! filter every command inherits: no io_uring, no mount API, no new
//! namespaces, no ptrace, no foreign-architecture syscalls.
//!
//! Mounts cannot stop a *new* `.env`, `*.pem` or `*.key` from being created
//! inside a writable bind; the create-time guard in `sandbox-init` can
//! (SPEC G1). The probe runs the guard's self-test and lists
//! `fs.deny-glob-on-create` only when it passes; otherwise the host refuses
//! launches whose policy needs it (SPEC C3).

pub mod cgroup;
mod child_exit;
mod control;
mod counters;
mod datagrams;
mod exec_groups;
pub mod host_facts;
pub mod identity;
pub mod kept;
pub mod limits;
mod pinned;
pub mod plan;
pub mod probe;
mod sandbox;
mod selftest;
mod spawner;
mod terminal;
pub mod toolchains;
mod usage;
pub mod violations;

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sandbox_plugin_api::sdk::{BackendImpl, EventSender, SandboxImpl};
use sandbox_plugin_api::{
    ErrorCode, PluginError, ProbeContext, ProbeReport, SandboxLimits, SandboxSpec, error_chain,
};

use crate::host_facts::RememberingHost;
use crate::plan::{PlanInput, RealHost};
use crate::probe::Tools;
use crate::sandbox::{BwrapSandbox, CONTROL_FD};

/// The `bwrap` backend.
#[derive(Default)]
pub struct BwrapBackend {
    /// What the probe found; launches use exactly these.
    tools: Mutex<Option<Tools>>,
    /// More read-only system directories (`system_paths` option).
    extra_system: Mutex<Vec<PathBuf>>,
    /// Whether the create-time guard passed its self-test.
    guard: Mutex<bool>,
    /// `toolchains` and `cache_size_mib` options.
    toolchains: Mutex<ToolchainOptions>,
    /// The configured limits (`limits` option) over the built-in ones.
    limits: Mutex<SandboxLimits>,
    /// Where the probe's results are kept, and whether this probe took
    /// them from there (then a failed launch checks them again).
    kept: Mutex<Option<KeptState>>,
    /// `counter_slots`: the shares the per-uid counters' budget is cut
    /// into (`counters`); unset is [`counters::DEFAULT_SLOTS`].
    counter_slots: Mutex<Option<usize>>,
    /// `open_files_watermark`: entries of the host's open-file table past
    /// which sandboxes over their share are stopped; unset is half the table.
    open_files_watermark: Mutex<Option<u64>>,
}

/// How the user's toolchains are shown (SPEC G4): found from the server's
/// environment at every launch unless `toolchains = false`; the cache
/// overlays' writes capped at `cache_size_mib` (default 1024).
#[derive(Debug, Clone, Copy)]
struct ToolchainOptions {
    enabled: bool,
    cache_bytes: u64,
}

impl Default for ToolchainOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            cache_bytes: plan::DEFAULT_CACHE_BYTES,
        }
    }
}

/// What a failed launch needs to check a kept probe again.
#[derive(Debug, Clone)]
struct KeptState {
    dir: Option<PathBuf>,
    key: String,
    from_kept: bool,
}

/// One probe's dealings with the kept file ([`kept`]): the canary and the
/// guard's self-test are taken from it when its key matches, run
/// otherwise, and what passed is stored for the next start.
struct Keeping {
    /// The directory, or why none is used.
    dir: Result<PathBuf, kept::NoDir>,
    /// Whether the self-test is part of this probe (`guard` not false).
    guard_on: bool,
    fresh: bool,
    key: String,
    /// The matching entry, when the canary came from it.
    entry: Option<kept::Entry>,
    /// Whether `entry` was read from the file (not stored by this probe).
    loaded: bool,
    /// Why the file gave nothing it could have (not for an absent or
    /// stale file: those are ordinary).
    refused: Option<String>,
}

impl Keeping {
    fn new(fresh: bool, guard_on: bool) -> Self {
        let dir = kept::dir();
        match &dir {
            Ok(_) => {}
            Err(kept::NoDir::Uncreatable(why)) => {
                tracing::info!("bwrap: the probe's results are not kept: {why}");
            }
            Err(kept::NoDir::Untrusted(why)) => {
                tracing::warn!("bwrap: the probe's results are not kept: {why}");
            }
        }
        Self {
            dir,
            guard_on,
            fresh,
            key: String::new(),
            entry: None,
            loaded: false,
            refused: None,
        }
    }

    /// The canary's result: kept, or run now.
    fn canary(&mut self, tools: &Tools) -> Result<(), String> {
        let own = probe::own_file();
        let mut files = vec![tools.bwrap.as_path(), tools.init.as_path()];
        files.extend(own.as_deref());
        self.key = kept::key(&files, self.guard_on);
        if let Ok(dir) = &self.dir {
            if self.fresh {
                kept::drop_kept(dir);
            }
            match kept::load(dir, &self.key) {
                Ok(entry) if entry.canary => {
                    self.entry = Some(entry);
                    self.loaded = true;
                    return Ok(());
                }
                Ok(_) | Err(kept::Miss::Absent | kept::Miss::Stale) => {}
                Err(kept::Miss::Refused(why)) => {
                    tracing::warn!("bwrap: the kept probe is not used: {why}; probing afresh");
                    self.refused = Some(why);
                }
            }
        }
        probe::canary(&tools.bwrap)
    }

    /// Whether the self-test's pass is kept (so it is not run now).
    fn guard_kept(&self) -> bool {
        self.entry.as_ref().is_some_and(|e| e.guard)
    }

    /// Stores what passed now and says, for the report, where each result
    /// came from.
    fn finish(&mut self, guard: bool) -> String {
        let from = |kept: bool| if kept { "kept" } else { "run now" };
        let mut said = format!("canary {}", from(self.entry.is_some()));
        if self.guard_on {
            said.push_str(&format!(", guard self-test {}", from(self.guard_kept())));
        }
        let dir = match &self.dir {
            Ok(dir) => dir,
            Err(why) => return format!("{said} — not kept: {why}"),
        };
        let file = dir.join(kept::file_for(&self.key));
        let new_pass = match &self.entry {
            None => true,
            Some(entry) => guard && !entry.guard,
        };
        if let Some(entry) = &self.entry {
            let age = kept::now().saturating_sub(entry.at);
            said.push_str(&format!(
                " — from a probe {age} s ago this boot, in {} (`cc_server probe --fresh` runs them again)",
                file.display()
            ));
        }
        if new_pass {
            let entry = kept::Entry {
                key: self.key.clone(),
                canary: true,
                guard: guard && self.guard_on,
                at: kept::now(),
            };
            match kept::store(dir, &entry) {
                Ok(()) if self.entry.is_none() => {
                    said.push_str(&format!(" — kept in {} for this boot", file.display()));
                    if let Some(why) = &self.refused {
                        said.push_str(&format!(", replacing a file not used: {why}"));
                    }
                }
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(
                        "bwrap: cannot keep the probe's results in {}: {e}",
                        file.display()
                    );
                    said.push_str(&format!(" — not kept: writing {}: {e}", file.display()));
                }
            }
            self.entry = Some(entry);
        }
        said
    }

    fn into_state(self) -> Option<KeptState> {
        Some(KeptState {
            from_kept: self.loaded,
            dir: self.dir.ok(),
            key: self.key,
        })
    }
}

/// Names each sandbox's cgroups apart within this server.
static SANDBOXES: AtomicU64 = AtomicU64::new(0);

impl BackendImpl for BwrapBackend {
    fn name(&self) -> &str {
        "bwrap"
    }

    fn probe(&self, ctx: &ProbeContext) -> ProbeReport {
        let disabled = ctx
            .options
            .get("guard")
            .and_then(serde_json::Value::as_bool)
            == Some(false);
        // Started now, so git's answer is ready by the first launch; same
        // process, same environment and directory, so the same answer.
        let _ = std::thread::Builder::new()
            .name("bwrap-git-identity".into())
            .spawn(identity::GitIdentity::of_host_user);
        let mut keeping = Keeping::new(ctx.fresh, !disabled);
        let (mut report, mut tools) = probe::probe(ctx, |tools| keeping.canary(tools));
        let mem_total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| limits::mem_total(&m));
        // What killed servers left: their execs' v2 groups (killed, then
        // removed), then their empty limit groups.
        if let Ok(hierarchy) = sandbox_exec_group::Hierarchy::find() {
            sandbox_exec_group::sweep(hierarchy.base());
        }
        cgroup::sweep(&cgroup::group_parents(
            &cgroup::Facts::of_self(),
            &cgroup::RealFs,
        ));
        match limits::defaults(ctx.options.get("limits"), mem_total) {
            Ok(defaults) => {
                if let Ok(mut slot) = self.limits.lock() {
                    *slot = defaults;
                }
            }
            Err(why) => {
                // A misspelt limit must not leave sandboxes unlimited.
                tracing::error!("bwrap is not offered: {why}");
                report.available = false;
                report.hint = format!("the bwrap backend's configured limits are invalid: {why}");
                tools = None;
            }
        }
        let guard = match &tools {
            Some(_) if disabled => {
                tracing::warn!(
                    "the create-time guard is disabled by `guard = false` under [backends.bwrap]"
                );
                report.hint = "filename-glob write denies are not enforced: the guard is disabled in the config".into();
                false
            }
            Some(_) if keeping.guard_kept() => true,
            Some(tools) => match selftest::guard(tools) {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!("the create-time guard is not offered: {why}");
                    report.hint =
                        format!("filename-glob write denies cannot be enforced here: {why}");
                    false
                }
            },
            None => false,
        };
        if guard {
            report
                .capabilities
                .push(sandbox_plugin_api::capability::FS_DENY_GLOB_ON_CREATE.into());
        }
        if tools.is_some() {
            report.kept = keeping.finish(guard);
            tracing::info!("bwrap probe: {}", report.kept);
        }
        if let Ok(mut slot) = self.kept.lock() {
            *slot = keeping.into_state();
        }
        if let Ok(mut slot) = self.guard.lock() {
            *slot = guard;
        }
        if let Ok(mut slot) = self.tools.lock() {
            *slot = tools;
        }
        if let Some(paths) = ctx.options.get("system_paths").and_then(|v| v.as_array())
            && let Ok(mut extra) = self.extra_system.lock()
        {
            *extra = paths
                .iter()
                .filter_map(|p| p.as_str())
                .map(PathBuf::from)
                .collect();
        }
        let mut options = ToolchainOptions::default();
        if ctx
            .options
            .get("toolchains")
            .and_then(serde_json::Value::as_bool)
            == Some(false)
        {
            options.enabled = false;
            tracing::info!(
                "the user's toolchains are not shown: `toolchains = false` under [backends.bwrap]"
            );
        }
        if let Some(slots) = ctx.options.get("counter_slots") {
            match slots.as_u64().filter(|n| (1..=4096).contains(n)) {
                Some(n) => {
                    if let Ok(mut held) = self.counter_slots.lock() {
                        *held = Some(n as usize);
                    }
                }
                None => {
                    // Fail closed: a budget we cannot read is no budget.
                    report.available = false;
                    report.hint = format!(
                        "[backends.bwrap] counter_slots = {slots}: give a whole number from 1 to 4096 \
                         (each live sandbox gets one share of half the host's per-uid inotify, \
                         fanotify and message-queue limits)"
                    );
                }
            }
        }
        if let Some(watermark) = ctx.options.get("open_files_watermark") {
            match watermark.as_u64().filter(|n| *n > 0) {
                Some(n) => {
                    if let Ok(mut held) = self.open_files_watermark.lock() {
                        *held = Some(n);
                    }
                }
                None => {
                    // Fail closed: a watermark we cannot read is none.
                    report.available = false;
                    report.hint = format!(
                        "[backends.bwrap] open_files_watermark = {watermark}: give a whole number \
                         above 0 (entries of the host's open-file table past which a sandbox \
                         holding more than its share has its commands killed; unset: half of \
                         fs.file-max)"
                    );
                }
            }
        }
        if let Some(mib) = ctx.options.get("cache_size_mib") {
            match mib.as_u64().filter(|m| *m > 0) {
                Some(mib) => options.cache_bytes = mib << 20,
                None => {
                    // Fail closed: a cap we cannot read is no cap.
                    report.available = false;
                    report.hint = format!(
                        "[backends.bwrap] cache_size_mib = {mib}: give a positive whole number of MiB"
                    );
                }
            }
        }
        // Only what the log says comes of it (each launch discovers again,
        // fresh): a one-shot `run`, which logs warnings only, skips it.
        if options.enabled && report.available && tracing::enabled!(tracing::Level::INFO) {
            let extra = self
                .extra_system
                .lock()
                .map(|e| e.clone())
                .unwrap_or_default();
            let found =
                toolchains::discover(&toolchains::ToolEnv::from_process(), &extra, &RealHost);
            for (path, why) in &found.skipped {
                tracing::info!(path = %path.display(), "toolchain directory not shown: {why}");
            }
            tracing::debug!(toolchains = ?found.toolchains, caches = ?found.caches, "toolchains found");
        }
        if let Ok(mut slot) = self.toolchains.lock() {
            *slot = options;
        }
        report
    }

    fn launch(
        &self,
        spec: SandboxSpec,
        events: EventSender,
    ) -> Result<Box<dyn SandboxImpl>, PluginError> {
        let tools = self
            .tools
            .lock()
            .ok()
            .and_then(|t| t.clone())
            .ok_or_else(|| {
                PluginError::new(
                    ErrorCode::UNAVAILABLE,
                    "bwrap is not available here (see its probe)",
                )
            })?;
        let extra = self
            .extra_system
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        let guard = self.guard.lock().map(|g| *g).unwrap_or(false);
        if !spec.write_deny_globs.is_empty() && !guard {
            // The host refuses this already (no capability); never run weaker.
            return Err(PluginError::new(
                ErrorCode::INVALID_SPEC,
                "the spec has filename-glob write denies and the create-time guard is not available here",
            ));
        }
        let options = self.toolchains.lock().map(|o| *o).unwrap_or_default();
        let defaults = self.limits.lock().map(|l| *l).unwrap_or_default();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        for hooks in plan::hook_dirs_to_create(&spec, &RealHost) {
            pinned::make_dir(&hooks).map_err(|e| {
                PluginError::other(format!(
                    "creating {} to keep it read-only: {e}",
                    hooks.display()
                ))
            })?;
            tracing::info!(path = %hooks.display(), "created an empty git hooks directory to protect it");
        }
        // From here on the launch only looks: answers may be remembered.
        let host = RememberingHost::default();
        let mut found = toolchains::discover(&toolchains::ToolEnv::from_process(), &extra, &host);
        if !options.enabled {
            // Nothing shown; credential files are still masked where binds show them.
            found = toolchains::Found {
                secrets: found.secrets,
                ..Default::default()
            };
        }
        // Last before the plan: git, asked since the probe, has had the
        // time the discovery took to answer.
        let gitconfig = identity::GitIdentity::of_host_user().gitconfig();
        let path_dirs = sandbox_paths::allowlists::home::path_dirs(
            std::env::var_os("PATH").as_deref(),
            home.as_deref(),
        );
        let plan = plan::plan(
            &PlanInput {
                spec: &spec,
                home: home.as_deref(),
                init: &tools.init,
                control_fd: CONTROL_FD,
                extra_system: &extra,
                guard,
                gitconfig: gitconfig.as_deref(),
                toolchains: &found,
                cache_bytes: options.cache_bytes,
                tmpfs_bytes: spec
                    .limits
                    .or(defaults)
                    .tmpfs_bytes
                    .unwrap_or(limits::DEFAULT_TMPFS_BYTES),
                server_state: &[server_state()],
                path_dirs: &path_dirs,
            },
            &host,
        )
        .map_err(|e| PluginError::new(ErrorCode::INVALID_SPEC, e.to_string()))?;
        let limits = self.limits(&spec)?;
        // The sandbox's share of the per-uid counters' budget (threat
        // model T39), held as long as the sandbox lives.
        let slots = self
            .counter_slots
            .lock()
            .ok()
            .and_then(|s| *s)
            .unwrap_or(counters::DEFAULT_SLOTS);
        let share = counters::Share::take(slots);
        let mut plan = plan;
        let watermark = self.open_files_watermark.lock().ok().and_then(|w| *w);
        for arg in counters::share_args(
            &counters::HostLimits::read(),
            slots,
            share.held(),
            watermark,
        ) {
            plan.args.push("--counter".into());
            plan.args.push(arg.into());
        }
        // Datagrams sent by address refused on the sandbox's cgroup, or no
        // unix datagram socket at all (`datagrams`).
        let mut limits = limits;
        limits.datagrams = match datagrams::hold_for(&limits.name) {
            Ok(()) => datagrams::HELD.to_owned(),
            Err(why) => {
                tracing::warn!(
                    "bwrap: no unix datagram socket can be made in this sandbox: datagrams sent by address cannot be refused here: {why}"
                );
                plan.args.push("--unix-datagram-sockets".into());
                plan.args.push("refused".into());
                datagrams::refused_altogether(&why)
            }
        };
        events.starting();
        let sandbox = BwrapSandbox::launch(&tools, plan, limits, share, events.clone())
            .map_err(|e| self.recheck(&tools, guard, e))?;
        events.ready();
        tracing::debug!(session = %spec.session_id, "bwrap sandbox ready");
        Ok(Box::new(sandbox))
    }
}

impl BwrapBackend {
    /// A launch failed after a probe whose canary or self-test came from
    /// the kept file: the kept result is dropped and both checks run now.
    /// When one fails, the capability it stood for is gone (a sysctl
    /// changed, a module was unloaded): the launch fails closed naming it,
    /// this backend stops offering it, and the next start probes afresh.
    /// When both pass, the failure was the launch's own and is returned
    /// as it was (the checks are kept again). No retry: a command must
    /// not run under a decision taken on a capability just found missing.
    fn recheck(&self, tools: &Tools, guard: bool, error: PluginError) -> PluginError {
        let Some(state) = self
            .kept
            .lock()
            .ok()
            .and_then(|mut k| k.take())
            .filter(|k| k.from_kept)
        else {
            return error;
        };
        if let Some(dir) = &state.dir {
            kept::drop_kept(dir);
        }
        let lost = match probe::canary(&tools.bwrap) {
            Err(why) => {
                if let Ok(mut slot) = self.tools.lock() {
                    *slot = None;
                }
                Some(format!("bwrap can no longer start a sandbox here: {why}"))
            }
            Ok(()) if guard => selftest::guard(tools).err().map(|why| {
                if let Ok(mut slot) = self.guard.lock() {
                    *slot = false;
                }
                format!("the create-time guard no longer works here: {why}")
            }),
            Ok(()) => None,
        };
        let Some(lost) = lost else {
            if let Some(dir) = &state.dir {
                let entry = kept::Entry {
                    key: state.key.clone(),
                    canary: true,
                    guard,
                    at: kept::now(),
                };
                let _ = kept::store(dir, &entry);
            }
            return error;
        };
        tracing::error!("{lost}; the kept probe result is dropped");
        PluginError::new(
            error.code,
            format!(
                "{lost} — the probe result kept from earlier this boot said it could, so that result is \
                 dropped and the next start probes afresh (the launch failed with: {})",
                error.message
            ),
        )
    }

    /// The spec's limits over the defaults, planned (refused when the spec
    /// asks for what cannot be held) and their groups created (SPEC G6).
    fn limits(&self, spec: &SandboxSpec) -> Result<sandbox::Limits, PluginError> {
        let defaults = self.limits.lock().map(|l| *l).unwrap_or_default();
        let merged = spec.limits.or(defaults);
        let facts = cgroup::Facts::of_self();
        // A name whose group exists already is not ours to use: one a
        // server killed with this same pid left (the start's sweep spares a
        // live pid's groups), or a second copy of this plugin in the
        // process (`sandbox-bench warm-ab`) — the next number is taken.
        let mut tries = 0;
        let (name, plan, groups) = loop {
            let name = cgroup::group_name(
                std::process::id(),
                SANDBOXES.fetch_add(1, Ordering::Relaxed),
            );
            let plan = cgroup::plan_cgroup(&facts, &cgroup::RealFs, &name, &spec.limits, &merged)
                .map_err(|e| PluginError::new(ErrorCode::INVALID_SPEC, e.to_string()))?;
            match cgroup::run(&plan) {
                Ok(groups) => break (name, plan, groups),
                Err(cgroup::RunError::Mkdir(_, e))
                    if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 64 =>
                {
                    tries += 1;
                }
                Err(e) => {
                    return Err(PluginError::other(format!(
                        "setting the sandbox's resource limits: {}",
                        error_chain(&e)
                    )));
                }
            }
        };
        for (limit, how) in [
            ("memory", &plan.memory),
            ("tasks", &plan.tasks),
            ("cpu", &plan.cpu),
        ] {
            if let cgroup::Enforcement::NotEnforced(why) = how {
                tracing::info!(session = %spec.session_id, "the default {limit} limit is not enforced: {why}");
            }
        }
        Ok(sandbox::Limits {
            details: limits::details(&merged, &plan),
            plan,
            groups,
            name,
            datagrams: String::new(),
        })
    }
}

sandbox_plugin_api::export_backend!(BwrapBackend::default());

/// The server's runtime dir (`sandbox_paths::state_dirs::runtime_dir`, as
/// the host computes it for the bind rules): hidden inside any bind that
/// holds it.
fn server_state() -> PathBuf {
    sandbox_paths::state_dirs::runtime_dir(
        kept::euid(),
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::testkit;

    /// A spec whose bind is a fresh temp dir (bwrap needs something to show).
    fn options(dir: &std::path::Path) -> testkit::Options {
        let mut options = testkit::Options::default();
        options.spec.bind_mounts = vec![sandbox_plugin_api::SandboxBindMount {
            host_path: dir.to_path_buf(),
            guest_path: None,
            read_only: false,
        }];
        options.spec.guest_workdir = Some(dir.to_path_buf());
        options
    }

    #[test]
    fn conforms_to_the_plugin_contract() {
        let backend = BwrapBackend::default();
        let report = backend.probe(&ProbeContext::default());
        if report.requires_install {
            sandbox_test_support::skip_or_fail(format!(
                "bwrap is not installed here ({}): `.ci/install-deps` installs bubblewrap",
                report.hint
            ));
            return;
        }
        assert!(
            report.available,
            "bwrap is installed but unusable: {}",
            report.hint
        );
        let dir = tempfile::tempdir().unwrap();
        let make = || {
            let backend = BwrapBackend::default();
            backend.probe(&ProbeContext::default());
            backend
        };
        testkit::assert_conformance(make, &options(dir.path()));
    }
}
