//! The bwrap command line for a spec: a pure function of the spec and what
//! exists on the host (asked through [`HostFacts`], faked in tests).
//!
//! What the sandbox sees, in mount order (later mounts cover earlier ones):
//! 1. a read-only system view (`/usr`, `/etc`, …), a private `/proc`, `/dev`
//!    and `/tmp`, and an empty private `$HOME` when no bind covers it;
//! 2. the spec's binds, parents before children: writable in chat mode
//!    unless `readOnly`, read-only otherwise (SPEC F2); `runnerStateDirs`
//!    writable in every mode (F4);
//! 3. write protection for `protectedPaths` (F3, H11) and the mandatory
//!    denies that exist (shell rc files in `$HOME` and at the top of every
//!    writable root, `.git/hooks`, `.git/config`, agent config, tool
//!    configs; a repository's `.git` file, its submodules' and worktrees'
//!    config and hooks; `PATH` directories, units and editor startup files
//!    in `$HOME`): each is
//!    re-bound read-only, and each of its ancestors below the writable root
//!    is made a mount point of its own, so neither it nor an ancestor can be
//!    renamed or removed (EBUSY) to get around the read-only mount;
//! 4. masks over the secrets (`~/.ssh`, …, `/etc/shadow`, …): an empty
//!    read-only tmpfs over a directory, `/dev/null` over a file — mounted
//!    by sandbox-init before anything runs (`--mask-dir`, `--mask-file`;
//!    `sandbox_init::masks`), not by bwrap, whose every bind re-reads
//!    mountinfo.
//!
//! Commands exec only from the system view; `execGrantRoots` (SPEC F5) name
//! writable directories they may exec from too: each must lie in a writable
//! bind (and exist) or be one of the private tmpfs mounts (`/tmp`,
//! `/var/tmp`, the private `$HOME`); sandbox-init leaves them without
//! `noexec` and adds them to its Landlock EXECUTE rule. Read-only modes
//! grant nothing (nothing there is writable).
//!
//! Every path is used in its literal and its symlink-resolved spelling (F6).
//! Mount sources are host paths; the native backend shows each bind at its
//! own path unless the spec names another `guestPath`.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use sandbox_init::caches::{CacheOverlay, CacheOverlays};
use sandbox_paths::write_rules::GuardConfig;
use sandbox_plugin_api::SandboxSpec;

use crate::toolchains::Found;
use allowlists::{
    git_internals, home_kept_entries, home_throwaway, kept_read_only, module_gitdirs,
    resolve_existing_prefix,
};
use sandbox_paths::secrets::{
    HOME_SECRETS, HOME_WRITE_DENY, MANDATORY_WRITE_DENY, SSH_HOST_KEY_DIR, SYSTEM_SECRETS,
};
use sandbox_paths::system::{SYSTEM_GIT_TEMPLATE, SYSTEM_LINKS, SYSTEM_VIEW};

/// Where `sandbox-init` appears inside every sandbox.
pub const INIT_IN_SANDBOX: &str = "/.sandbox-init";

/// An empty, read-only directory execs get as `GIT_TEMPLATE_DIR` when the
/// guard runs: `git init` and `git clone` copy no sample hooks, which the
/// guard would (rightly) refuse to create.
pub const GIT_TEMPLATE_IN_SANDBOX: &str = "/.sandbox-git-template";

/// The empty directory where sandbox-init mounts the tmpfs of the cache
/// overlays' writes while it sets them up (`sandbox_init::caches`).
pub const CACHES_STAGING: &str = "/.sandbox-caches";

/// The default cap of that tmpfs (`[backends.bwrap] cache_size_mib`).
pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

/// Where the session's egress sockets and known_hosts appear in the
/// sandbox (SPEC E2).
pub const EGRESS_IN_SANDBOX: &str = "/.sandbox-egress";

/// The loopback ports inside the sandbox's network namespace where
/// `sandbox-init`'s forwards reach the HTTP and SOCKS proxies.
pub use sandbox_plugin_api::proxy::{HTTP_PORT as HTTP_PROXY_PORT, SOCKS_PORT as SOCKS_PROXY_PORT};

/// What the plan reads of the host's files (in `host_facts`, which the
/// toolchain discovery uses too).
pub use crate::host_facts::{HostFacts, Kind, RealHost};

/// What to plan for.
pub struct PlanInput<'a> {
    pub spec: &'a SandboxSpec,
    /// The home directory whose secrets are masked and rc files protected.
    pub home: Option<&'a Path>,
    /// `sandbox-init` on the host.
    pub init: &'a Path,
    /// The descriptor number the control socket has in bwrap.
    pub control_fd: i32,
    /// More read-only system directories (config `system_paths`).
    pub extra_system: &'a [PathBuf],
    /// Whether PID 1 runs the create-time guard for `spec.write_deny_globs`.
    pub guard: bool,
    /// The `.gitconfig` a private `$HOME` gets (`crate::identity`).
    pub gitconfig: Option<&'a str>,
    /// The user's toolchains and caches (`crate::toolchains`); empty when
    /// `toolchains = false`. Its credential files are masked either way.
    pub toolchains: &'a Found,
    /// The cap of the tmpfs that takes every cache overlay's writes.
    pub cache_bytes: u64,
    /// The size of each writable tmpfs (SPEC G6): every tmpfs gets one.
    pub tmpfs_bytes: u64,
    /// The server's own state on the host (its runtime dir: every session's
    /// proxy sockets, the kept probe): masked, as an empty directory,
    /// wherever a bind holds it (a workdir of `/tmp`, where root's lies).
    pub server_state: &'a [PathBuf],
    /// The `PATH` directories to keep, as given
    /// (`sandbox_paths::allowlists::home::path_dirs`): those inside a
    /// writable bind take nothing.
    pub path_dirs: &'a [PathBuf],
}

/// The descriptor bwrap reads the private home's `.gitconfig` from
/// (`--file`), right above the control socket.
pub const GITCONFIG_FD: i32 = 4;

/// The descriptor the forwarder's channel to the session's proxy has in
/// bwrap and PID 1 (`--egress-channel`), right above the `.gitconfig`.
pub const CHANNEL_FD: i32 = 5;

/// The plan: bwrap's arguments and what they do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Everything after `bwrap`.
    pub args: Vec<OsString>,
    /// The working directory of execs that name none.
    pub workdir: PathBuf,
    /// Guest paths re-bound read-only.
    pub protected: Vec<PathBuf>,
    /// Guest paths masked.
    pub masked: Vec<PathBuf>,
    /// What the create-time guard enforces, when it runs.
    pub guard: Option<GuardConfig>,
    /// Whether commands reach the session's egress proxies (their env
    /// points at [`HTTP_PROXY_PORT`] and [`SOCKS_PROXY_PORT`]).
    pub egress: bool,
    /// Whether ssh gets the session's `known_hosts` file.
    pub ssh_known_hosts: bool,
    /// The proxy's forwarder socket on the host: the launch connects to it
    /// and passes the connection as [`CHANNEL_FD`] (never bound inside).
    pub egress_channel: Option<PathBuf>,
    /// Writable directories commands may exec from (SPEC F5).
    pub exec_grants: Vec<PathBuf>,
    /// What bwrap reads from [`GITCONFIG_FD`] into the private home.
    pub gitconfig: Option<String>,
    /// The toolchain directories shown read-only (SPEC G4), as guest paths.
    pub toolchains: Vec<PathBuf>,
    /// The caches shown as overlays (SPEC G4).
    pub caches: Vec<PathBuf>,
    /// Toolchains and caches found but not shown, with why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// The proxy environment of every command when the plan has egress (SPEC
/// E2): both spellings of the proxy variables, `socks5h` so names resolve
/// in the proxy (there is no resolver inside), and git-over-ssh through
/// the SOCKS proxy via socat's SOCKS4A (Debian's socat has no SOCKS5).
pub fn egress_env(with_known_hosts: bool) -> Vec<(String, String)> {
    let mut ssh = format!(
        "ssh -o ProxyCommand='socat - SOCKS4A:127.0.0.1:%h:%p,socksport={SOCKS_PROXY_PORT}'"
    );
    if with_known_hosts {
        ssh.push_str(&format!(
            " -o UserKnownHostsFile={EGRESS_IN_SANDBOX}/known_hosts -o StrictHostKeyChecking=yes"
        ));
    }
    let mut env = sandbox_plugin_api::proxy::env();
    env.push(("GIT_SSH_COMMAND".to_owned(), ssh));
    env
}

/// A spec the backend cannot honour as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// A bind's host path does not exist.
    BindMissing(PathBuf),
    /// A path is not absolute.
    NotAbsolute(&'static str, PathBuf),
    /// A protected path inside a writable bind does not exist: mounts can
    /// only protect what exists, so it could be created.
    ProtectedMissing(PathBuf),
    /// The workdir is not inside any bind.
    WorkdirHidden(PathBuf),
    /// An exec grant that is not a writable place of the sandbox.
    GrantNotWritable(PathBuf),
    /// An exec grant inside a writable bind that does not exist.
    GrantMissing(PathBuf),
    /// A `unixSockets` entry that no bind shows.
    SocketHidden(PathBuf),
    /// A source resolves elsewhere than where the host checked it.
    Changed {
        path: PathBuf,
        checked: PathBuf,
        now: PathBuf,
    },
}

impl std::error::Error for PlanError {}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BindMissing(p) => write!(f, "bind mount hostPath {} does not exist", p.display()),
            Self::NotAbsolute(field, p) => {
                write!(f, "{field} {} is not an absolute path", p.display())
            }
            Self::ProtectedMissing(p) => write!(
                f,
                "protected path {} does not exist inside a writable bind; bubblewrap can only protect what exists, \
                 so it could be created — create it first or make the bind read-only",
                p.display()
            ),
            Self::WorkdirHidden(p) => write!(
                f,
                "guestWorkdir {} is not inside any bind mount",
                p.display()
            ),
            Self::GrantNotWritable(p) => write!(
                f,
                "execGrantRoots entry {} is not writable in this sandbox: grant a directory inside a writable \
                 bind, or /tmp, /var/tmp, the private $HOME or a cache overlay (details.caches) themselves (a \
                 grant re-opens exec where commands write; read-only binds need none)",
                p.display()
            ),
            Self::Changed { path, checked, now } => write!(
                f,
                "{} resolved to {} when the server checked it and to {} now: a symlink in it changed \
                 between the check and the mount, so nothing is mounted (rule: a mount is checked and \
                 made as one object); launch again once nothing swaps it",
                path.display(),
                checked.display(),
                now.display()
            ),
            Self::GrantMissing(p) => write!(
                f,
                "execGrantRoots entry {} does not exist; create the directory first",
                p.display()
            ),
            Self::SocketHidden(p) => write!(
                f,
                "unixSockets entry (--allow-socket) {} is not below any bind mount: allow a socket \
                 the sandbox shows, or bind its directory",
                p.display()
            ),
        }
    }
}

/// One place a host directory is shown inside the sandbox.
#[derive(Debug, Clone)]
struct View {
    /// The host directory, symlinks resolved.
    host: PathBuf,
    /// Where it appears.
    guest: PathBuf,
    writable: bool,
}

impl View {
    /// Where a host path (symlinks resolved) appears through this view.
    fn guest_of(&self, host_path: &Path) -> Option<PathBuf> {
        let rel = host_path.strip_prefix(&self.host).ok()?;
        Some(if rel.as_os_str().is_empty() {
            self.guest.clone()
        } else {
            self.guest.join(rel)
        })
    }
}

fn depth(path: &Path) -> usize {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }

    fn one(&mut self, flag: &str, a: impl AsRef<OsStr>) {
        self.0.push(flag.into());
        self.0.push(a.as_ref().to_owned());
    }

    fn two(&mut self, flag: &str, a: impl AsRef<OsStr>, b: impl AsRef<OsStr>) {
        self.0.push(flag.into());
        self.0.push(a.as_ref().to_owned());
        self.0.push(b.as_ref().to_owned());
    }

    /// A tmpfs at `path` of at most `bytes` (bubblewrap's `--size`): no
    /// tmpfs is unbounded (SPEC G6).
    fn tmpfs(&mut self, path: impl AsRef<OsStr>, bytes: u64) {
        self.one("--size", bytes.to_string());
        self.one("--tmpfs", path);
    }
}

/// bubblewrap's flags without an argument, every plan's first: its own
/// namespaces, gone with its parent, no controlling terminal, a clean
/// environment.
pub(crate) const SWITCHES: [&str; 10] = [
    "--unshare-user",
    "--unshare-ipc",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--new-session",
    "--as-pid-1",
    "--clearenv",
];

/// Computes bwrap's arguments for a spec.
pub fn plan(input: &PlanInput<'_>, host: &dyn HostFacts) -> Result<Plan, PlanError> {
    let spec = input.spec;
    let mut args = Args(Vec::new());
    for flag in SWITCHES {
        args.flag(flag);
    }
    args.one("--cap-drop", "ALL");
    // For PID 1 alone, which maps its own uid in the user namespace it
    // makes (mapping uid 0 needs it held at `unshare`); PID 1 drops
    // every capability before anything runs (`sandbox_init::layout`).
    // New user namespaces are forbidden there, and by the seccomp filter.
    args.one("--cap-add", "CAP_SETFCAP");
    // For the maker of the commands' /proc alone, forked by PID 1 before it
    // leaves bubblewrap's namespaces (a procfs can be made only where one is
    // fully visible; `sandbox_init::commands_proc`): it ends before any
    // command starts, and PID 1 leaves both behind with its own user
    // namespace.
    args.one("--cap-add", "CAP_SYS_ADMIN");
    args.one("--cap-add", "CAP_SYS_CHROOT");

    // 1. The system view: read-only, and the only place commands may
    //    exec from (sandbox-init's Landlock ruleset, below).
    let mut exec_from = Vec::new();
    for dir in SYSTEM_VIEW.iter().map(PathBuf::from) {
        if host.kind(&dir) == Some(Kind::Dir) {
            args.two("--ro-bind", &dir, &dir);
            exec_from.push(dir);
        }
    }
    for link in SYSTEM_LINKS.iter().map(Path::new) {
        match (host.link_target(link), host.kind(link)) {
            (Some(target), Some(_)) => args.two("--symlink", target, link),
            (None, Some(Kind::Dir)) => {
                // Not merged into /usr here: a system dir of its own.
                args.two("--ro-bind", link, link);
                exec_from.push(link.to_path_buf());
            }
            _ => {}
        }
    }
    args.one("--proc", "/proc");
    // bubblewrap's /dev is a tmpfs it cannot size: read-only, with a sized
    // /dev/shm in it (device nodes stay writable on a read-only mount).
    args.one("--dev", "/dev");
    args.tmpfs("/dev/shm", input.tmpfs_bytes);
    args.one("--remount-ro", "/dev");
    args.tmpfs("/tmp", input.tmpfs_bytes);
    args.tmpfs("/var/tmp", input.tmpfs_bytes);

    // 2. The binds. A writable bind of a kept part of the home
    //    (`~/.config`) or inside a git directory is read-only: the
    //    allowlists.
    let home = input
        .home
        .map(|h| host.resolve(h).unwrap_or_else(|| h.to_path_buf()));
    let mut views = Vec::new();
    for bind in &spec.bind_mounts {
        let literal = &bind.host_path;
        if !literal.is_absolute() {
            return Err(PlanError::NotAbsolute(
                "bind mount hostPath",
                literal.clone(),
            ));
        }
        let resolved = host
            .resolve(literal)
            .ok_or_else(|| PlanError::BindMissing(literal.clone()))?;
        sources::unchanged(spec, literal, &resolved)?;
        let writable = spec.binds_writable()
            && !bind.read_only
            && !kept_read_only(&resolved, home.as_deref(), host);
        let guest = bind.guest_path();
        if !guest.is_absolute() {
            return Err(PlanError::NotAbsolute(
                "bind mount guestPath",
                guest.to_path_buf(),
            ));
        }
        push_view(&mut views, &resolved, guest, writable);
        if bind.guest_path.is_none() && resolved != *literal {
            push_view(&mut views, &resolved, &resolved, writable);
        }
    }
    for dir in &spec.runner_state_dirs {
        if !dir.is_absolute() {
            return Err(PlanError::NotAbsolute("runnerStateDirs entry", dir.clone()));
        }
        let resolved = host
            .resolve(dir)
            .ok_or_else(|| PlanError::BindMissing(dir.clone()))?;
        sources::unchanged(spec, dir, &resolved)?;
        let writable = !kept_read_only(&resolved, home.as_deref(), host);
        push_view(&mut views, &resolved, dir, writable);
        if resolved != *dir {
            push_view(&mut views, &resolved, &resolved, writable);
        }
    }
    // A literal spelling that is a symlink inside another view needs no mount
    // of its own: inside, the symlink already leads to the resolved view (and
    // bwrap would follow it when mounting, out of the new root).
    let shown: Vec<PathBuf> = views.iter().map(|v| v.guest.clone()).collect();
    views.retain(|v| {
        let is_link = host.link_target(&v.guest).is_some();
        !(is_link
            && shown
                .iter()
                .any(|other| *other != v.guest && v.guest.starts_with(other)))
    });
    let mut gitconfig = None;
    if let Some(home) = &home
        && !views.iter().any(|v| v.guest_of(home).is_some())
    {
        // No bind shows $HOME: the sandbox gets an empty private one, with
        // the host user's git identity and nothing else of their config.
        args.tmpfs(home, input.tmpfs_bytes);
        if let Some(text) = input.gitconfig {
            args.two("--file", GITCONFIG_FD.to_string(), home.join(".gitconfig"));
            gitconfig = Some(text.to_owned());
        }
    }
    // A writable bind shows the home: its allowlist applies, and its
    // caches are overlays on the bind.
    let bound_home = home
        .clone()
        .filter(|h| views.iter().any(|v| v.writable && v.guest_of(h).is_some()));
    let mut found = input.toolchains.clone();
    if let Some(h) = &bound_home {
        let throwaway = home_throwaway(h, host);
        found
            .caches
            .retain(|c| !throwaway.iter().any(|t| c.path.starts_with(&t.path)));
        found.caches.extend(throwaway);
        found.caches.sort_by_key(|c| c.path.components().count());
    }
    // The user's toolchains and caches, on the private /tmp and $HOME and
    // below the binds (a bind inside one stays as it is).
    let mut shown = Shown::plan(
        &found,
        &views,
        bound_home.as_deref(),
        &mut args,
        &mut exec_from,
    );
    // Parents before children (a later parent mount would hide a child).
    let mut ordered: Vec<&View> = views.iter().collect();
    ordered.sort_by_key(|v| depth(&v.guest));
    for view in &ordered {
        let flag = if view.writable { "--bind" } else { "--ro-bind" };
        args.two(flag, &view.host, &view.guest);
    }
    let grants = exec_grants(spec, &views, home.as_deref(), &shown.overlays, host)?;
    // Configured system paths (`system_paths`) go on top of the private
    // /tmp and $HOME and of the binds: read-only and exec-able wherever
    // they are.
    let mut read_only_views = shown.views.clone();
    for dir in input.extra_system {
        if host.kind(dir) == Some(Kind::Dir) {
            args.two("--ro-bind", sources::canonical(dir, host), dir);
            exec_from.push(dir.clone());
            read_only_views.push(View {
                host: host.resolve(dir).unwrap_or_else(|| dir.clone()),
                guest: dir.clone(),
                writable: false,
            });
        }
    }

    // 3. Write protection inside writable views.
    let mut protected = Vec::new();
    let mut pinned = BTreeSet::new();
    let kept = protections::Kept {
        home: bound_home
            .as_deref()
            .map(|h| {
                let points: Vec<PathBuf> = shown.overlays.iter().map(|c| c.path.clone()).collect();
                home_kept_entries(h, &points, host)
            })
            .unwrap_or_default(),
        path_dirs: input
            .path_dirs
            .iter()
            .map(|d| resolve_existing_prefix(d, host))
            .filter(|d| views.iter().any(|v| v.writable && d.starts_with(&v.host)))
            .collect(),
    };
    for target in protections::write_protected(spec, home.as_deref(), &views, &kept, host)? {
        // Inside a cache overlaid on a writable bind, nothing written
        // reaches the host; a mount of bubblewrap's there would be a
        // locked child of the overlay's lower layer, which the kernel
        // refuses to stack on. sandbox-init keeps the directory read-only
        // on the overlay instead (its `readOnly`).
        if let Some(cache) = shown.overlays.iter_mut().find(|c| {
            target.starts_with(&c.path)
                && views
                    .iter()
                    .any(|v| v.writable && v.guest == v.host && c.path.starts_with(&v.guest))
        }) {
            if host.kind(&target) == Some(Kind::Dir) && !cache.read_only.contains(&target) {
                cache.read_only.push(target.clone());
                exec_from.push(target.clone());
            }
            continue;
        }
        for view in views.iter().filter(|v| v.writable) {
            let Some(guest) = view.guest_of(&target) else {
                continue;
            };
            if guest == view.guest {
                continue; // a whole writable root listed as protected: see below
            }
            for ancestor in ancestors_below(&guest, &view.guest) {
                // Inside a protected path, all is read-only and cannot be
                // renamed already: a writable bind would undo that.
                let inside_protected = protected.iter().any(|p: &PathBuf| ancestor.starts_with(p));
                if !inside_protected && pinned.insert(ancestor.clone()) {
                    let source = view
                        .host
                        .join(ancestor.strip_prefix(&view.guest).unwrap_or(&ancestor));
                    args.two("--bind", source, &ancestor);
                }
            }
            args.two("--ro-bind", &target, &guest);
            protected.push(guest);
        }
        // A protected path that is itself a writable root is made read-only.
        for view in views.iter().filter(|v| v.writable && v.host == target) {
            args.two("--ro-bind", &target, &view.guest);
            protected.push(view.guest.clone());
        }
    }

    // A toolchain a bind shows (rustup's in a bound home) runs from there
    // once nothing inside can change it: beneath a read-only bind or a
    // path made read-only above.
    for t in &found.toolchains {
        let Some(guest) = views
            .iter()
            .filter_map(|v| v.guest_of(&t.host).map(|g| (v, g)))
            .max_by_key(|(v, _)| depth(&v.guest))
            .filter(|(v, g)| !v.writable || protected.iter().any(|p| g.starts_with(p)))
            .map(|(_, g)| g)
        else {
            continue;
        };
        if !exec_from.contains(&guest) {
            exec_from.push(guest);
        }
    }

    // 4. Secrets and the server's own state, wherever a bind, a toolchain
    //    or a system path shows them (the caches hide theirs by
    //    construction: `Shown::plan`):
    //    sandbox-init mounts the masks, before anything runs
    //    (`sandbox_init::masks`: bubblewrap's binds cost far more).
    let mut masked = Vec::new();
    let mut masks = MaskPoints::default();
    for (secret, kind) in protections::secrets(
        home.as_deref(),
        &input.toolchains.secrets,
        input.server_state,
        host,
    ) {
        let mut guests: Vec<PathBuf> = views
            .iter()
            .chain(&read_only_views)
            .filter_map(|v| v.guest_of(&secret))
            .collect();
        if SYSTEM_VIEW.iter().any(|dir| secret.starts_with(dir)) {
            guests.push(secret.clone());
        }
        guests.sort();
        guests.dedup();
        for guest in guests {
            match kind {
                Kind::Dir => masks.dirs.push(guest.clone()),
                Kind::File => masks.files.push(guest.clone()),
            }
            masked.push(guest);
        }
    }

    let workdir = match &spec.guest_workdir {
        Some(dir) => {
            let visible = views.iter().any(|v| dir.starts_with(&v.guest));
            if !visible {
                return Err(PlanError::WorkdirHidden(dir.clone()));
            }
            dir.clone()
        }
        None => ordered
            .first()
            .map_or_else(|| PathBuf::from("/"), |v| v.guest.clone()),
    };

    let guard = (input.guard && !spec.write_deny_globs.is_empty()).then(|| {
        let mut roots: Vec<PathBuf> = views
            .iter()
            .filter(|v| v.writable)
            .map(|v| v.guest.clone())
            .collect();
        // $HOME counts when a writable bind shows it; a private, empty one
        // is thrown away with the sandbox.
        let home_root = home
            .clone()
            .filter(|h| views.iter().any(|v| v.writable && h.starts_with(&v.guest)));
        roots.extend(home_root.clone());
        let guest_of = |host_path: &Path| {
            views
                .iter()
                .filter(|v| v.writable)
                .filter_map(|v| v.guest_of(host_path))
                .max_by_key(|g| depth(g))
        };
        GuardConfig {
            globs: spec.write_deny_globs.clone(),
            roots,
            home: home_root,
            allowlisted_home: bound_home.as_deref().and_then(guest_of),
            throwaway: shown.overlays.iter().map(|c| c.path.clone()).collect(),
            path_dirs: kept.path_dirs.iter().filter_map(|d| guest_of(d)).collect(),
            unix_sockets: Vec::new(),
        }
    });
    let guard = match guard {
        Some(mut config) => {
            config.unix_sockets = sources::allowed_sockets(spec, &views, host)?;
            Some(config)
        }
        None => None,
    };
    if guard.is_some() {
        // Made here, mounted read-only and empty by sandbox-init.
        args.one("--dir", GIT_TEMPLATE_IN_SANDBOX);
        masks.dirs.push(GIT_TEMPLATE_IN_SANDBOX.into());
        hide_system_git_template(&mut masks, host);
    }
    // 5. Egress: the proxies' sockets, the only way out of an empty
    //    network namespace (SPEC E2).
    // With `networkEnabled: false` the proxies still run and refuse
    // everything, visibly (SPEC E5).
    let egress = spec.egress.as_ref();
    if let Some(e) = egress {
        let inside = Path::new(EGRESS_IN_SANDBOX);
        args.two(
            "--ro-bind",
            sources::canonical(&e.http_socket, host),
            inside.join("http.sock"),
        );
        args.two(
            "--ro-bind",
            sources::canonical(&e.socks_socket, host),
            inside.join("socks.sock"),
        );
        if let Some(known) = &e.ssh_known_hosts {
            args.two(
                "--ro-bind",
                sources::canonical(known, host),
                inside.join("known_hosts"),
            );
        }
    }
    args.two(
        "--ro-bind",
        sources::canonical(input.init, host),
        INIT_IN_SANDBOX,
    );
    args.flag("--");
    args.flag(INIT_IN_SANDBOX);
    args.one("--control-fd", input.control_fd.to_string());
    for dir in exec_from
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new(INIT_IN_SANDBOX)])
    {
        args.one("--exec-from", dir);
    }
    for dir in &grants {
        args.one("--exec-grant", dir);
    }
    for point in &masks.files {
        args.one("--mask-file", point);
    }
    for point in &masks.dirs {
        args.one("--mask-dir", point);
    }
    let checked = sources::checked_points(&protected, &views, &read_only_views);
    for point in &checked {
        args.one("--protected", point);
    }
    if !shown.overlays.is_empty() {
        let caches = CacheOverlays {
            size_bytes: input.cache_bytes,
            staging: CACHES_STAGING.to_owned(),
            overlays: shown
                .overlays
                .iter()
                .map(|c| CacheOverlay {
                    point: c.path.display().to_string(),
                    read_only: c
                        .read_only
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect(),
                    hidden: c.hidden.iter().map(|d| d.display().to_string()).collect(),
                    // Beneath an exec grant, as exec-able as the grant; a
                    // version manager's shims, as its read-only home.
                    exec: c.shims || grants.iter().any(|g| c.path.starts_with(g)),
                })
                .collect(),
        };
        // Serialising plain strings cannot fail.
        args.one(
            "--caches",
            serde_json::to_string(&caches).unwrap_or_default(),
        );
    }
    if let Some(config) = &guard {
        // Serialising plain strings cannot fail.
        args.one("--guard", serde_json::to_string(config).unwrap_or_default());
    }
    if egress.is_some() {
        for (port, socket) in [
            (HTTP_PROXY_PORT, "http.sock"),
            (SOCKS_PROXY_PORT, "socks.sock"),
        ] {
            args.one("--forward", format!("{port}={EGRESS_IN_SANDBOX}/{socket}"));
        }
    }
    // The forwarder's channel: a descriptor, not a path, so that no command
    // can reach it (the proxy hands its connections host sockets).
    let egress_channel = egress.and_then(|e| e.forwarder_socket.clone());
    if egress_channel.is_some() {
        args.one("--egress-channel", CHANNEL_FD.to_string());
    }
    Ok(Plan {
        args: args.0,
        workdir,
        protected,
        masked,
        guard,
        egress: egress.is_some(),
        ssh_known_hosts: egress.is_some_and(|e| e.ssh_known_hosts.is_some()),
        egress_channel,
        exec_grants: grants,
        gitconfig,
        toolchains: shown.views.iter().map(|v| v.guest.clone()).collect(),
        caches: shown.overlays.iter().map(|c| c.path.clone()).collect(),
        skipped: shown.skipped,
    })
}

/// The guest paths sandbox-init masks (`--mask-file`, `--mask-dir`), kept
/// as paths: their exact bytes go on its command line, never a lossy
/// spelling that would name some other, missing point.
#[derive(Default)]
struct MaskPoints {
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
}

/// The spec's exec grants, checked: each inside a writable view (and
/// existing there) or exactly a private tmpfs mount. None in read-only modes.
fn exec_grants(
    spec: &SandboxSpec,
    views: &[View],
    home: Option<&Path>,
    caches: &[crate::toolchains::Cache],
    host: &dyn HostFacts,
) -> Result<Vec<PathBuf>, PlanError> {
    if !spec.binds_writable() {
        return Ok(Vec::new());
    }
    let private_home = home.filter(|h| !views.iter().any(|v| v.guest_of(h).is_some()));
    let mut grants: Vec<PathBuf> = Vec::new();
    for root in &spec.exec_grant_roots {
        if !root.is_absolute() {
            return Err(PlanError::NotAbsolute("execGrantRoots entry", root.clone()));
        }
        // A private mount itself: a tmpfs, or a cache overlay (its writes
        // stay in the sandbox too; `npx` runs what it put in `~/.npm`).
        let tmpfs = [Path::new("/tmp"), Path::new("/var/tmp")]
            .into_iter()
            .chain(private_home)
            .chain(caches.iter().map(|c| c.path.as_path()))
            .any(|t| t == root.as_path());
        // The deepest view showing it decides (a read-only bind inside a
        // writable one is read-only).
        let view = views
            .iter()
            .filter(|v| root.starts_with(&v.guest))
            .max_by_key(|v| depth(&v.guest));
        if !tmpfs {
            let Some(view) = view.filter(|v| v.writable) else {
                return Err(PlanError::GrantNotWritable(root.clone()));
            };
            let source = view
                .host
                .join(root.strip_prefix(&view.guest).unwrap_or(Path::new("")));
            if host.kind(&source) != Some(Kind::Dir) {
                return Err(PlanError::GrantMissing(root.clone()));
            }
        }
        if !grants.contains(root) {
            grants.push(root.clone());
        }
    }
    Ok(grants)
}

/// Empties the system's git template directory (SPEC G4): libgit2
/// (`cargo new`) ignores `GIT_TEMPLATE_DIR` and copies the sample hooks
/// from there, or else writes its built-in `hooks/README.sample`; both are
/// names in `.git/hooks`, which the guard refuses, and the init fails. An
/// empty template directory is copied as nothing, and libgit2 then makes
/// only the directories (an empty `hooks` one, which may be made).
fn hide_system_git_template(masks: &mut MaskPoints, host: &dyn HostFacts) {
    if host.kind(Path::new(SYSTEM_GIT_TEMPLATE)) == Some(Kind::Dir) {
        masks.dirs.push(SYSTEM_GIT_TEMPLATE.into());
    }
}

/// The hooks directories to create before launching: a repository at the
/// top of a writable bind that has no `.git/hooks` (`git init
/// --template=`), or a submodule of it with none below `.git/modules`,
/// would otherwise rely on the guard alone to keep hooks out (and with
/// `guard = false` on nothing). An empty hooks directory is git's normal
/// state, and once it exists the plan keeps it read-only.
pub fn hook_dirs_to_create(spec: &SandboxSpec, host: &dyn HostFacts) -> Vec<PathBuf> {
    if !spec.binds_writable() {
        return Vec::new();
    }
    spec.bind_mounts
        .iter()
        .filter(|b| !b.read_only)
        .filter_map(|b| host.resolve(&b.host_path))
        .map(|root| root.join(".git"))
        .filter(|dot_git| host.kind(dot_git) == Some(Kind::Dir))
        .flat_map(|dot_git| {
            let mut gitdirs = vec![dot_git.clone()];
            gitdirs.extend(module_gitdirs(&dot_git, host));
            gitdirs
        })
        .map(|gitdir| gitdir.join("hooks"))
        .filter(|hooks| host.kind(hooks).is_none())
        .collect()
}

/// Whether a view other than the one showing `dir` lies strictly inside it
/// (an overlay would hide it).
fn holds_bind_below(views: &[View], dir: &Path) -> bool {
    views.iter().any(|v| {
        v.host != dir && v.host.starts_with(dir) || v.guest != dir && v.guest.starts_with(dir)
    })
}

fn push_view(views: &mut Vec<View>, host: &Path, guest: &Path, writable: bool) {
    if let Some(existing) = views.iter_mut().find(|v| v.guest == guest) {
        // The same place named twice: the stricter wins.
        existing.writable &= writable;
        return;
    }
    views.push(View {
        host: host.to_path_buf(),
        guest: guest.to_path_buf(),
        writable,
    });
}

/// The guest directories strictly between `root` and `path`, top down.
fn ancestors_below(path: &Path, root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = path
        .ancestors()
        .skip(1)
        .take_while(|a| a.starts_with(root) && *a != root)
        .map(Path::to_path_buf)
        .collect();
    out.reverse();
    out
}

#[path = "plan_protections.rs"]
mod protections;

#[path = "plan_sources.rs"]
mod sources;

#[path = "plan_allowlists.rs"]
mod allowlists;

#[path = "plan_shown.rs"]
mod shown;
use shown::Shown;

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(crate) mod tests;
