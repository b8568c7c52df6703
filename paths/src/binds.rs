//! Which host paths a spec may bind (SPEC G5: hostile specs refused; F7).
//!
//! A bind gives a sandbox a piece of the host. Some pieces are never safe:
//! the whole filesystem, the kernel's interfaces, the host's service
//! sockets, the secrets every backend masks, the server's own token, a
//! directory inside its runtime state (any mode: reading the token, or
//! connecting to another session's proxy socket, needs no write access) —
//! a bind that *holds* the runtime dir (`/tmp`, where root's lies) is
//! allowed, and the backend hides it (bwrap masks it; one that cannot,
//! refuses); others only read-only:
//! the system directories, the config and guardrails files, the plugins
//! directories the server loads code from. [`check_binds`] decides, as a
//! pure function of the spec, the server's paths and the filesystem facts
//! [`PathFacts::gather`] collected before; each path is compared as written
//! (lexically normalised) and symlink-resolved (SPEC F6), so neither
//! `/home/me/work/../.ssh` nor a link to `/etc` gets through.
//!
//! `[api] bind_roots` narrows it further: every bind must lie at or below one
//! of them. The table test is the runtime's `sessions/plan_tests.rs` (each
//! rule through its launch plan).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use crate::secrets::{HOME_SECRETS, SSH_HOST_KEY_DIR, SYSTEM_SECRETS, is_ssh_host_key};
use crate::state_dirs::EGRESS_DIR_PREFIX;

/// Never bound, in any mode, with the reason.
pub const NEVER_BOUND: &[(&str, &str)] = &[
    ("/proc", "the host's process and kernel interface"),
    ("/sys", "the host's kernel and device settings"),
    ("/dev", "the host's devices"),
    (
        "/run",
        "the host's service sockets (Docker, D-Bus, systemd): connecting to one needs no write access",
    ),
];

/// Bound read-only only: writing here changes the host's programs,
/// libraries, boot files or configuration.
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/var",
    "/opt", "/srv", "/nix", "/snap",
];

/// Temp dirs are writable by design, also where they lie inside a system
/// directory (`/var/tmp`).
pub const TEMP_DIRS: &[&str] = &["/tmp", "/var/tmp"];

/// The server's own paths, and the operator's bind roots: what the rules
/// protect besides the fixed lists. Filled once at start from the settings
/// and the registry.
#[derive(Debug, Clone, Default)]
pub struct ServerPaths {
    /// The server's `$HOME` (its secrets are [`HOME_SECRETS`] under it).
    pub home: Option<PathBuf>,
    /// The API token file (the default one for `run`, which has none).
    pub token_file: Option<PathBuf>,
    /// The backends' runtime dir ([`crate::state_dirs::runtime_dir`]).
    pub runtime_dir: Option<PathBuf>,
    /// The server's other credentials (the push gateway's forge tokens,
    /// the GitHub App's private key), each with the config key naming it:
    /// no bind may show one, in any mode.
    pub secret_files: Vec<(PathBuf, &'static str)>,
    /// The temp dir the egress directories are made in.
    pub temp_dir: PathBuf,
    /// Files whose change would loosen the next start's policy, with what they are.
    pub config_files: Vec<(PathBuf, &'static str)>,
    /// Every directory the registry searched for plugin libraries.
    pub plugin_dirs: Vec<PathBuf>,
    /// `[api] bind_roots`: when not empty, every bind lies below one of these.
    pub bind_roots: Vec<PathBuf>,
    /// The config file that set `bind_roots` (for the remedy).
    pub config_file: Option<PathBuf>,
    /// The server's state directory (the workspaces database): never
    /// shown to a sandbox.
    pub state_dir: Option<PathBuf>,
    /// The data directory (every conversation's clones and agents'
    /// directories, SPEC H1, H10): a spec's own binds lie outside it; only
    /// the binds the server resolves for a conversation lie below it.
    pub data_dir: Option<PathBuf>,
}

/// What the filesystem says about the paths the rules compare: each one's
/// symlink-resolved spelling, when it resolves.
#[derive(Debug, Clone, Default)]
pub struct PathFacts {
    resolved: HashMap<PathBuf, PathBuf>,
}

impl PathFacts {
    /// Resolves every path [`check_sources`] will look at, `sources` being
    /// the host paths a spec shows (I/O: `canonicalize`).
    pub fn gather<'a>(sources: impl IntoIterator<Item = &'a Path>, server: &ServerPaths) -> Self {
        let mut facts = Self::default();
        for path in paths_to_resolve(sources, server) {
            if let Ok(resolved) = std::fs::canonicalize(&path) {
                facts.insert(&path, resolved);
            }
        }
        facts
    }

    /// Records that `path` resolves to `resolved` (for tests and [`Self::gather`]).
    pub fn insert(&mut self, path: &Path, resolved: PathBuf) {
        self.resolved.insert(lexical(path), resolved);
    }

    /// The resolved spelling of a path gathered, if it resolved.
    pub fn resolve(&self, path: &Path) -> Option<&PathBuf> {
        self.resolved.get(&lexical(path))
    }

    /// As written (normalised) and, if different, resolved.
    fn spellings(&self, path: &Path) -> Vec<PathBuf> {
        let mut out = vec![lexical(path)];
        if let Some(resolved) = self.resolve(path)
            && !out.contains(resolved)
        {
            out.push(resolved.clone());
        }
        out
    }
}

/// Every path whose resolved spelling the rules compare.
fn paths_to_resolve<'a>(
    sources: impl IntoIterator<Item = &'a Path>,
    server: &ServerPaths,
) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = sources.into_iter().map(Path::to_path_buf).collect();
    let fixed = NEVER_BOUND
        .iter()
        .map(|(p, _)| *p)
        .chain(SYSTEM_DIRS.iter().copied())
        .chain(TEMP_DIRS.iter().copied())
        .chain(SYSTEM_SECRETS.iter().map(|(p, _)| *p))
        .chain([SSH_HOST_KEY_DIR]);
    paths.extend(fixed.map(PathBuf::from));
    if let Some(home) = &server.home {
        paths.extend(HOME_SECRETS.iter().map(|(p, _)| home.join(p)));
    }
    paths.extend(server.token_file.iter().cloned());
    paths.extend(server.secret_files.iter().map(|(p, _)| p.clone()));
    paths.extend(server.runtime_dir.iter().cloned());
    paths.push(server.temp_dir.clone());
    paths.extend(server.config_files.iter().map(|(p, _)| p.clone()));
    paths.extend(server.plugin_dirs.iter().cloned());
    paths.extend(server.bind_roots.iter().cloned());
    paths.extend(server.state_dir.iter().cloned());
    paths.extend(server.data_dir.iter().cloned());
    paths
}

/// `.` and `..` taken away without the filesystem (`..` at `/` stays `/`).
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if out.file_name().is_some() {
                    out.pop();
                } else if !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// One host path a spec would show, and how.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    /// Where the spec names it: `bindMounts[0].hostPath`, `runnerStateDirs[1]`.
    pub name: String,
    /// The spec field to blame in a refusal: `bindMounts`, `runnerStateDirs`.
    pub field: &'static str,
    /// The host path.
    pub path: &'a Path,
    /// Whether the sandbox may write it.
    pub writable: bool,
    /// Resolved by the server for a conversation and an agent (SPEC H10),
    /// not named by the client: the one kind of source that may lie below
    /// the data directory.
    pub server_resolved: bool,
}

/// A source the rules refuse: the field to blame and the message, which
/// names the source, the rule and the remedy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The spec field to blame.
    pub field: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// Refuses sources that show what no sandbox may see, or write what it may
/// only read; returns the paths to add to the spec's protected paths — the
/// plugins directories and config files inside a writable source, so they
/// stay read-only inside (and the ordinary workdir bind of a checkout that
/// holds the server's build still works) — each with its notice. Pure:
/// every fact comes from `facts`.
pub fn check_sources(
    sources: &[Source<'_>],
    server: &ServerPaths,
    facts: &PathFacts,
) -> Result<Vec<(PathBuf, String)>, Refusal> {
    let mut protect = Vec::new();
    for source in sources {
        let refuse = |message: String| Refusal {
            field: source.field,
            message: format!("{} {message}", shown(source, facts)),
        };
        let before = protect.len();
        check_source(source, server, facts, &mut protect).map_err(refuse)?;
        for (_, notice) in &mut protect[before..] {
            *notice = format!("{} {notice}", shown(source, facts));
        }
    }
    Ok(protect)
}

/// `bindMounts[0].hostPath `/x`` (and where it leads, if elsewhere).
fn shown(source: &Source<'_>, facts: &PathFacts) -> String {
    let written = source.path.display();
    match facts.resolve(source.path) {
        Some(resolved) if *resolved != lexical(source.path) => format!(
            "{} `{written}` (which resolves to `{}`)",
            source.name,
            resolved.display()
        ),
        _ => format!("{} `{written}`", source.name),
    }
}

/// At or below: `path` is `base` or inside it, in any spelling of each.
fn within(facts: &PathFacts, path: &Path, base: &Path) -> bool {
    let bases = facts.spellings(base);
    facts
        .spellings(path)
        .iter()
        .any(|p| bases.iter().any(|b| p.starts_with(b)))
}

/// `path` shows `target`: it is `target`, inside it, or an ancestor of it.
fn shows(facts: &PathFacts, path: &Path, target: &Path) -> bool {
    within(facts, path, target) || within(facts, target, path)
}

/// The rules for one source, most specific first; `Err` is the text after
/// the source's name: the rule and the remedy.
fn check_source(
    source: &Source<'_>,
    server: &ServerPaths,
    facts: &PathFacts,
    protect: &mut Vec<(PathBuf, String)>,
) -> Result<(), String> {
    let path = source.path;
    if !path.is_absolute() {
        return Err("is relative; give an absolute host path".into());
    }
    let spellings = facts.spellings(path);
    if spellings.iter().any(|s| s.parent().is_none()) {
        return Err(
            "is the host's root directory: a sandbox may not see the whole host. \
             Bind the project directory you mean instead"
                .into(),
        );
    }
    for (dir, why) in NEVER_BOUND {
        if within(facts, path, Path::new(dir)) {
            return Err(format!(
                "is at or below `{dir}`, {why}: never bound, in any mode. Remove the bind \
                 (every sandbox gets its own /proc and /dev)"
            ));
        }
    }
    secrets(source, server, facts)?;
    server_state(source, server, facts)?;
    data_dir(source, server, facts, protect)?;
    if source.writable {
        writable_only(source, server, facts, protect)?;
    }
    bind_roots(source, server, facts)
}

/// A bind at or below a secret every backend masks.
fn secrets(source: &Source<'_>, server: &ServerPaths, facts: &PathFacts) -> Result<(), String> {
    let path = source.path;
    let home_secrets = server.home.iter().flat_map(|home| {
        HOME_SECRETS
            .iter()
            .map(move |(p, why)| (home.join(p), *why))
    });
    let system = SYSTEM_SECRETS
        .iter()
        .map(|(p, why)| (PathBuf::from(p), *why));
    for (secret, why) in system.chain(home_secrets) {
        if within(facts, path, &secret) {
            return Err(format!(
                "is at or below `{}` ({why}), a secret no sandbox may read: remove the bind, \
                 or bind a directory that does not hold it",
                secret.display()
            ));
        }
    }
    let key_dirs = facts.spellings(Path::new(SSH_HOST_KEY_DIR));
    for spelling in facts.spellings(path) {
        // The key itself, or anything below it (a key is a file, but the
        // rule should not depend on that).
        let hit = spelling.ancestors().any(|a| {
            a.parent()
                .is_some_and(|dir| key_dirs.iter().any(|k| k == dir))
                && a.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(is_ssh_host_key)
        });
        if hit {
            return Err(format!(
                "is an SSH host private key in `{SSH_HOST_KEY_DIR}`, a secret no sandbox may \
                 read: remove the bind"
            ));
        }
    }
    Ok(())
}

/// A bind that shows the server's token, or lies in its runtime state or
/// another session's proxy sockets, in any mode.
fn server_state(
    source: &Source<'_>,
    server: &ServerPaths,
    facts: &PathFacts,
) -> Result<(), String> {
    let path = source.path;
    // The default token file lies in a secret every backend masks or
    // refuses (`~/.local/state/cc_server`), so a bind of `$HOME` may hold
    // it; anywhere else, no bind may hold it.
    let masked = |target: &Path| {
        server.home.iter().any(|home| {
            HOME_SECRETS
                .iter()
                .any(|(p, _)| within(facts, target, &home.join(p)))
        })
    };
    let token_shown = server
        .token_file
        .as_ref()
        .filter(|token| match masked(token) {
            true => within(facts, path, token),
            false => shows(facts, path, token),
        });
    if let Some(token) = token_shown {
        return Err(format!(
            "shows the server's API token file `{}` (with the token a command could drive \
             the server), in any mode: bind a directory that does not contain it, or keep the \
             token elsewhere (`token_file` in the config, `serve --token-file`)",
            token.display()
        ));
    }
    let secret_shown = server
        .secret_files
        .iter()
        .find(|(file, _)| match masked(file) {
            true => within(facts, path, file),
            false => shows(facts, path, file),
        });
    if let Some((file, key)) = secret_shown {
        return Err(format!(
            "shows `{}`, a credential of the server's (`{key}`: with it a command could mint \
             or use the forge's tokens itself), in any mode: bind a directory that does not \
             contain it, or keep the file elsewhere (`{key}` in the config)",
            file.display()
        ));
    }
    let state_shown = server.state_dir.as_ref().filter(|dir| match masked(dir) {
        true => within(facts, path, dir),
        false => shows(facts, path, dir),
    });
    if let Some(dir) = state_shown {
        return Err(format!(
            "shows the server's state directory `{}` (the workspaces database: which \
             checkouts are registered, every conversation), in any mode: bind a directory \
             that does not contain it, or keep the state elsewhere (`[workspaces] state_dir`)",
            dir.display()
        ));
    }
    // The runtime dir (every session's proxy sockets, saved VM templates,
    // the kept probe): a bind inside it is refused; a bind that holds it
    // (`/tmp`, where root's lies) is the backend's to hide it in — bwrap
    // masks it, a backend that cannot refuses (SPEC G5; threat model T14).
    if let Some(runtime) = &server.runtime_dir
        && within(facts, path, runtime)
    {
        return Err(format!(
            "is at or inside the server's runtime directory `{}` (every session's proxy \
             sockets, saved VM templates), in any mode: bind a directory that does not lie \
             in it",
            runtime.display()
        ));
    }
    // Where older servers made the egress directories.
    let temps = facts.spellings(&server.temp_dir);
    let in_egress_dir = facts.spellings(path).iter().any(|p| {
        temps.iter().any(|t| {
            p.strip_prefix(t)
                .ok()
                .and_then(|rest| rest.iter().next())
                .is_some_and(|first| first.to_string_lossy().starts_with(EGRESS_DIR_PREFIX))
        })
    });
    if in_egress_dir {
        return Err(format!(
            "is inside a session's egress directory `{}/{EGRESS_DIR_PREFIX}*` (its proxy \
             sockets; connecting needs no write access), in any mode: bind a directory made \
             for this sandbox instead",
            server.temp_dir.display()
        ));
    }
    Ok(())
}

/// The data directory: a client's source at or below it is refused (a
/// conversation's sandbox gets its binds from the server, and another
/// conversation's clones are not this sandbox's); a writable source above
/// it keeps it read-only inside (added to `protectedPaths`).
fn data_dir(
    source: &Source<'_>,
    server: &ServerPaths,
    facts: &PathFacts,
    protect: &mut Vec<(PathBuf, String)>,
) -> Result<(), String> {
    let Some(data) = &server.data_dir else {
        return Ok(());
    };
    if source.server_resolved {
        return Ok(());
    }
    if within(facts, source.path, data) {
        return Err(format!(
            "is at or below the data directory `{}` (every conversation's clones and agents' \
             directories), in any mode: a conversation's sandbox gets its binds from the server \
             (give `conversationId` and `agentId`, or `cc_server run --conversation ID --agent \
             NAME`), and no other sandbox sees them. Bind a directory outside it",
            data.display()
        ));
    }
    if source.writable && within(facts, data, source.path) {
        let resolved = facts.resolve(data).cloned().unwrap_or_else(|| data.clone());
        protect.push((
            resolved,
            format!(
                "holds the data directory `{}` (every conversation's clones); it is kept \
                 read-only inside (added to protectedPaths)",
                data.display()
            ),
        ));
    }
    Ok(())
}

/// A writable bind of a system directory, or at or below a file or
/// directory the server reads its policy or its code from. A writable bind
/// *above* one of the latter is allowed with that path protected.
fn writable_only(
    source: &Source<'_>,
    server: &ServerPaths,
    facts: &PathFacts,
    protect: &mut Vec<(PathBuf, String)>,
) -> Result<(), String> {
    let path = source.path;
    // Judged per spelling: a link in a temp dir to `/etc` is `/etc`.
    let temps: Vec<PathBuf> = TEMP_DIRS
        .iter()
        .map(PathBuf::from)
        .chain([server.temp_dir.clone()])
        .flat_map(|t| facts.spellings(&t))
        .collect();
    for spelling in facts.spellings(path) {
        if temps.iter().any(|t| spelling.starts_with(t)) {
            continue;
        }
        let system = SYSTEM_DIRS.iter().find(|dir| {
            facts
                .spellings(Path::new(dir))
                .iter()
                .any(|d| spelling.starts_with(d))
        });
        if let Some(dir) = system {
            return Err(format!(
                "is in the system directory `{dir}`: a writable bind would let commands \
                 change the host's programs or configuration. Bind it read-only \
                 (`readOnly: true`, `--bind PATH:ro`), or bind a directory of your own"
            ));
        }
    }
    let config = server
        .config_files
        .iter()
        .map(|(p, what)| (p.clone(), *what));
    let plugins = server.plugin_dirs.iter().map(|p| {
        (
            p.clone(),
            "a plugins directory: a library there is loaded, unsandboxed, at the next start",
        )
    });
    let guarded: Vec<(PathBuf, &str)> = config.chain(plugins).collect();
    for (target, what) in &guarded {
        if within(facts, path, target) {
            return Err(format!(
                "is at or below `{}`, {what}: bind it read-only (`readOnly: true`, \
                 `--bind PATH:ro`), or bind a directory that does not hold it",
                target.display()
            ));
        }
    }
    // Above one: keep it read-only inside. One that does not exist yet could
    // be created and filled, unless a protected path already holds it.
    let mut missing = Vec::new();
    for (target, what) in &guarded {
        if !within(facts, target, path) {
            continue;
        }
        match facts.resolve(target) {
            Some(resolved) => protect.push((
                resolved.clone(),
                format!(
                    "holds `{}` ({what}); it is kept read-only inside (added to protectedPaths)",
                    target.display()
                ),
            )),
            None => missing.push((target, what)),
        }
    }
    for (target, what) in missing {
        let covered = protect.iter().any(|(p, _)| within(facts, target, p));
        if !covered {
            return Err(format!(
                "holds `{}`, {what}, which does not exist yet: a command could create it. \
                 Create it (it is then kept read-only inside), bind read-only, or bind a \
                 directory that does not hold it",
                target.display()
            ));
        }
    }
    Ok(())
}

/// `[api] bind_roots`: every spelling lies below some root's spelling.
fn bind_roots(source: &Source<'_>, server: &ServerPaths, facts: &PathFacts) -> Result<(), String> {
    if server.bind_roots.is_empty() {
        return Ok(());
    }
    let roots: Vec<PathBuf> = server
        .bind_roots
        .iter()
        .flat_map(|r| facts.spellings(r))
        .collect();
    let inside = facts
        .spellings(source.path)
        .iter()
        .all(|s| roots.iter().any(|r| s.starts_with(r)));
    if inside {
        return Ok(());
    }
    let list: Vec<String> = server
        .bind_roots
        .iter()
        .map(|r| format!("`{}`", r.display()))
        .collect();
    let file = server
        .config_file
        .as_ref()
        .map_or_else(String::new, |f| format!(" of {}", f.display()));
    Err(format!(
        "is outside every `[api] bind_roots` entry ({}): bind a directory below one of them, \
         or add a root to `bind_roots` in the config{file}",
        list.join(", ")
    ))
}
