//! The user's toolchains and their caches, found without configuration
//! (SPEC G4; threat model T27): a pure function of the server's environment
//! ([`ToolEnv`]) and the host ([`HostFacts`]), table-tested on fake hosts.
//!
//! What is found:
//! - **toolchains**, shown read-only and exec-able at their own path (and
//!   their symlink-resolved one): every absolute `PATH` entry outside the
//!   system view, and the homes tools need ([`HOMES`]: `RUSTUP_HOME`,
//!   `PYENV_ROOT`, `NVM_DIR`, `GOROOT`, …), each taken when its variable is
//!   set, when a `PATH` entry lies inside its default location, or when the
//!   home it comes with is taken (`~/.rustup` with `~/.cargo`). A `PATH`
//!   entry inside a home is covered by the home;
//! - **caches**, shown as an overlay: reads hit the host's files, writes go
//!   to a size-capped tmpfs of the sandbox (sandbox-init mounts it, see
//!   `sandbox_init::caches`) and never reach the host: `CARGO_HOME` (its
//!   registry, git checkouts and lock files; its `bin` read-only on top) and
//!   `GOPATH` (likewise), and [`CACHES`] (`~/.npm`, `~/.cache/pip`, …) when
//!   they exist;
//! - **shims**, shown as an overlay too, inside a version manager's
//!   read-only home ([`ToolHome::shims`]: pyenv's, rbenv's, nodenv's,
//!   asdf's `shims`): `pip install` through pyenv's `python3` ends in
//!   `pyenv rehash`, which rewrites them (under `set -e`: a read-only shim
//!   directory fails the install). The rewritten shims stay in the sandbox
//!   and still run (the overlay keeps exec, as the home does); the host's
//!   never change.
//!
//! Never shown, each skip logged with its reason ([`Skip`]): relative
//! entries and `.`; what the system view shows already; `$HOME` itself or
//! an ancestor of it; a directory inside a secret (SPEC C1's read-deny set,
//! `HOME_SECRETS`) or holding one — except the credential files a home is
//! known to hold ([`ToolHome::secrets`], cargo's `credentials.toml`), which
//! are masked instead (hidden in an overlay by a whiteout, so not even a
//! file created later on the host shows).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

use crate::host_facts::{HostFacts, Kind};
use sandbox_paths::secrets::{HOME_SECRETS, SYSTEM_SECRETS};
use sandbox_paths::system::{SYSTEM_LINKS, SYSTEM_VIEW};
pub use sandbox_paths::toolchains::{CACHES, HOMES, ToolHome};

/// Places that are never toolchains: the sandbox has its own.
const VIRTUAL: &[&str] = &["/proc", "/sys", "/dev"];

/// What discovery reads of the server's environment.
#[derive(Debug, Clone, Default)]
pub struct ToolEnv {
    pub path: Option<OsString>,
    pub home: Option<PathBuf>,
    /// The variables of [`HOMES`] and [`CACHES`] that are set and not empty.
    pub vars: BTreeMap<String, PathBuf>,
}

impl ToolEnv {
    /// This process's environment.
    pub fn from_process() -> Self {
        let names = HOMES
            .iter()
            .map(|h| h.var)
            .chain(CACHES.iter().map(|c| c.1));
        Self {
            path: std::env::var_os("PATH"),
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            vars: names
                .filter_map(|name| {
                    let value = std::env::var_os(name).filter(|v| !v.is_empty())?;
                    Some((name.to_owned(), PathBuf::from(value)))
                })
                .collect(),
        }
    }
}

/// A directory shown read-only and exec-able.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    /// Who needs it: a tool's name, or `PATH`.
    pub tool: String,
    /// The host directory, symlinks resolved.
    pub host: PathBuf,
    /// Where it appears: the spelling found and the resolved one.
    pub guests: Vec<PathBuf>,
}

/// A cache shown as an overlay at its (resolved) path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cache {
    pub tool: String,
    pub path: PathBuf,
    /// Directories inside it shown read-only and exec-able on top (the
    /// tool's binaries, toolchains found inside it), those that exist.
    pub read_only: Vec<PathBuf>,
    /// Names inside it (relative) hidden by a whiteout: its credential
    /// files, whether they exist now or not.
    pub hidden: Vec<PathBuf>,
    /// A version manager's shims ([`ToolHome::shims`]): they are run, so
    /// the overlay keeps exec like the read-only home around it.
    pub shims: bool,
}

/// Why a directory was not shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// A relative `PATH` entry (or `.`, or empty): it names a different
    /// place in every working directory.
    Relative,
    /// Nothing there, or not a directory.
    Missing,
    /// The system view (or `system_paths`) shows it already.
    SystemView,
    /// It is `$HOME`, or holds it.
    Home,
    /// It lies inside this secret.
    InsideSecret(PathBuf),
    /// It holds this secret.
    HoldsSecret(PathBuf),
    /// A place the sandbox has its own of (`/proc`, `/sys`, `/dev`).
    Virtual,
    /// A cache path a symlink leads to, or with `,`, `:` or `\` in it: the
    /// overlay is mounted only at a plain resolved path.
    CachePath,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Relative => f.write_str("a relative PATH entry"),
            Self::Missing => f.write_str("not an existing directory"),
            Self::SystemView => f.write_str("the system view shows it already"),
            Self::Home => f.write_str("it is $HOME or holds it"),
            Self::InsideSecret(s) => write!(f, "it lies inside the secret {}", s.display()),
            Self::HoldsSecret(s) => write!(f, "it holds the secret {}", s.display()),
            Self::Virtual => f.write_str("the sandbox has its own /proc, /sys and /dev"),
            Self::CachePath => {
                f.write_str("a cache overlay needs a plain path (no symlink, no `,`, `:` or `\\`)")
            }
        }
    }
}

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    pub toolchains: Vec<Toolchain>,
    pub caches: Vec<Cache>,
    /// What was not shown, and why.
    pub skipped: Vec<(PathBuf, Skip)>,
    /// The credential files of every home that exists, shown or not
    /// (resolved): masked wherever any view shows them.
    pub secrets: Vec<PathBuf>,
}

/// Whether `path` matches `pattern` component by component (`*` is any
/// one name).
fn matches(pattern: &Path, path: &Path) -> bool {
    let mut p = pattern.components();
    let mut q = path.components();
    loop {
        match (p.next(), q.next()) {
            (None, None) => return true,
            (Some(Component::Normal(a)), Some(Component::Normal(b))) if a == "*" || a == b => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// The existing files a home's secret patterns name, relative to it.
fn expand(home: &Path, pattern: &str, host: &dyn HostFacts) -> Vec<PathBuf> {
    let mut found = vec![PathBuf::new()];
    for part in Path::new(pattern).components() {
        let Component::Normal(name) = part else {
            return Vec::new();
        };
        let mut next = Vec::new();
        for rel in &found {
            if name == "*" {
                for entry in host.list(&home.join(rel)) {
                    next.push(rel.join(entry));
                }
            } else {
                next.push(rel.join(name));
            }
        }
        found = next;
    }
    found.retain(|rel| host.kind(&home.join(rel)).is_some());
    found
}

/// The checks every candidate passes. `own` are the secret patterns the
/// directory is known to hold (absolute).
struct Rules<'a> {
    home: Option<PathBuf>,
    secrets: Vec<PathBuf>,
    system: Vec<PathBuf>,
    host: &'a dyn HostFacts,
}

impl Rules<'_> {
    /// The resolved directory, or why it is not shown.
    fn check(&self, literal: &Path, own: &[PathBuf]) -> Result<PathBuf, Skip> {
        if !literal.is_absolute() {
            return Err(Skip::Relative);
        }
        let resolved = match (self.host.kind(literal), self.host.resolve(literal)) {
            (Some(Kind::Dir), Some(r)) => r,
            _ => return Err(Skip::Missing),
        };
        if VIRTUAL.iter().any(|v| resolved.starts_with(v)) {
            return Err(Skip::Virtual);
        }
        if self.system.iter().any(|s| resolved.starts_with(s)) {
            return Err(Skip::SystemView);
        }
        if self.home.as_ref().is_some_and(|h| h.starts_with(&resolved)) {
            return Err(Skip::Home);
        }
        for secret in &self.secrets {
            if resolved.starts_with(secret) {
                return Err(Skip::InsideSecret(secret.clone()));
            }
            let own_secret = own.iter().any(|pattern| matches(pattern, secret));
            if secret.starts_with(&resolved) && !own_secret {
                return Err(Skip::HoldsSecret(secret.clone()));
            }
        }
        Ok(resolved)
    }
}

/// Finds the toolchains and caches (see the module doc). `extra_system`
/// are the configured `system_paths`, shown already.
pub fn discover(env: &ToolEnv, extra_system: &[PathBuf], host: &dyn HostFacts) -> Found {
    let home = env
        .home
        .as_ref()
        .filter(|h| h.is_absolute())
        .map(|h| host.resolve(h).unwrap_or_else(|| h.clone()));
    let mut secrets: Vec<PathBuf> = SYSTEM_SECRETS
        .iter()
        .map(|(p, _)| PathBuf::from(p))
        .collect();
    if let Some(home) = &home {
        secrets.extend(HOME_SECRETS.iter().map(|(p, _)| home.join(p)));
    }
    let mut system: Vec<PathBuf> = SYSTEM_VIEW.iter().map(PathBuf::from).collect();
    for link in SYSTEM_LINKS {
        // Merged-usr links resolve into /usr; a directory of its own counts.
        system.push(PathBuf::from(link));
    }
    system.extend(
        extra_system
            .iter()
            .map(|p| host.resolve(p).unwrap_or_else(|| p.clone())),
    );
    let rules = Rules {
        home: home.clone(),
        secrets,
        system,
        host,
    };
    let path_entries: Vec<PathBuf> = env
        .path
        .as_ref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    let mut found = Found::default();

    // The homes: where each is, and whether it is wanted.
    let located: Vec<(&ToolHome, PathBuf, bool)> = HOMES
        .iter()
        .filter_map(|h| {
            let set = env.vars.get(h.var).cloned();
            let wanted = set.is_some();
            let at = set.or_else(|| Some(home.as_ref()?.join(h.default?)))?;
            Some((h, at, wanted))
        })
        .collect();
    let inside = |dir: &Path| {
        let resolved = host.resolve(dir);
        path_entries.iter().any(|e| {
            e.is_absolute()
                && (e.starts_with(dir)
                    || host
                        .resolve(e)
                        .zip(resolved.as_ref())
                        .is_some_and(|(e, d)| e.starts_with(d)))
        })
    };
    let mut taken: Vec<&str> = located
        .iter()
        .filter(|(_, at, wanted)| {
            let exists = host.kind(at) == Some(Kind::Dir);
            *wanted || (exists && inside(at))
        })
        .map(|(h, _, _)| h.tool)
        .collect();
    for (h, at, _) in &located {
        if let Some(with) = h.with
            && taken.contains(&with)
            && host.kind(at) == Some(Kind::Dir)
            && !taken.contains(&h.tool)
        {
            taken.push(h.tool);
        }
    }
    for (h, at, _) in &located {
        let resolved = host.resolve(at).unwrap_or_else(|| at.clone());
        for pattern in h.secrets {
            found.secrets.extend(
                expand(&resolved, pattern, host)
                    .into_iter()
                    .filter_map(|rel| host.resolve(&resolved.join(rel))),
            );
        }
        if !taken.contains(&h.tool) {
            continue;
        }
        let own: Vec<PathBuf> = h.secrets.iter().map(|s| resolved.join(s)).collect();
        let dir = match rules.check(at, &own) {
            Ok(dir) => dir,
            Err(why) => {
                skip(&mut found, at, why);
                continue;
            }
        };
        match h.overlay {
            Some(keep) => {
                if let Err(why) = cache_path(at, &dir) {
                    skip(&mut found, at, why);
                    continue;
                }
                let mut hidden: Vec<PathBuf> = h
                    .secrets
                    .iter()
                    .filter(|s| !s.contains('*'))
                    .map(PathBuf::from)
                    .collect();
                for pattern in h.secrets.iter().filter(|s| s.contains('*')) {
                    hidden.extend(expand(&dir, pattern, host));
                }
                found.caches.push(Cache {
                    tool: h.tool.to_owned(),
                    shims: false,
                    read_only: keep
                        .iter()
                        .map(|k| dir.join(k))
                        .filter(|d| host.kind(d) == Some(Kind::Dir))
                        .collect(),
                    path: dir,
                    hidden,
                });
            }
            None => {
                if let Some(rel) = h.shims {
                    shim_overlay(&mut found, h.tool, &dir.join(rel), host);
                }
                push_toolchain(&mut found, h.tool, at, dir);
            }
        }
    }
    for (tool, var, default) in CACHES {
        let at = match (env.vars.get(*var), default, &home) {
            (Some(set), _, _) => set.clone(),
            (None, Some(rel), Some(home)) => home.join(rel),
            _ => continue,
        };
        if host.kind(&at).is_none() && !env.vars.contains_key(*var) {
            continue; // a default that does not exist: nothing to show
        }
        match rules
            .check(&at, &[])
            .and_then(|dir| cache_path(&at, &dir).map(|()| dir))
        {
            Ok(dir) => found.caches.push(Cache {
                tool: (*tool).to_owned(),
                path: dir,
                read_only: Vec::new(),
                hidden: Vec::new(),
                shims: false,
            }),
            Err(why) => skip(&mut found, &at, why),
        }
    }
    for entry in &path_entries {
        if entry.as_os_str().is_empty() || !entry.is_absolute() {
            skip(&mut found, entry, Skip::Relative);
            continue;
        }
        match rules.check(entry, &[]) {
            Ok(dir) => push_toolchain(&mut found, "PATH", entry, dir),
            Err(why) => skip(&mut found, entry, why),
        }
    }
    settle(&mut found);
    found
}

/// A shown home's shim directory, when it exists, as an overlay (a plain
/// directory at its resolved path: an overlay is mounted there only).
fn shim_overlay(found: &mut Found, tool: &str, shims: &Path, host: &dyn HostFacts) {
    if host.kind(shims) != Some(Kind::Dir) {
        return;
    }
    let resolved = host.resolve(shims).unwrap_or_else(|| shims.to_path_buf());
    if let Err(why) = cache_path(shims, &resolved) {
        skip(found, shims, why);
        return;
    }
    found.caches.push(Cache {
        tool: format!("{tool} shims"),
        path: resolved,
        read_only: Vec::new(),
        hidden: Vec::new(),
        shims: true,
    });
}

fn skip(found: &mut Found, path: &Path, why: Skip) {
    if !found.skipped.iter().any(|(p, _)| p == path) {
        found.skipped.push((path.to_path_buf(), why));
    }
}

fn cache_path(literal: &Path, resolved: &Path) -> Result<(), Skip> {
    let text = resolved.to_string_lossy();
    if literal != resolved || text.contains([',', ':', '\\']) {
        return Err(Skip::CachePath);
    }
    Ok(())
}

fn push_toolchain(found: &mut Found, tool: &str, literal: &Path, resolved: PathBuf) {
    let mut guests = vec![literal.to_path_buf()];
    if resolved != literal {
        guests.push(resolved.clone());
    }
    if let Some(same) = found.toolchains.iter_mut().find(|t| t.host == resolved) {
        for g in guests {
            if !same.guests.contains(&g) {
                same.guests.push(g);
            }
        }
        return;
    }
    found.toolchains.push(Toolchain {
        tool: tool.to_owned(),
        host: resolved,
        guests,
    });
}

/// Removes what another entry covers: a toolchain inside another one, a
/// cache inside another cache; a toolchain inside a cache becomes one of
/// its read-only directories. Parents come first.
fn settle(found: &mut Found) {
    let caches = found.caches.clone();
    found.caches.retain(|c| {
        !caches
            .iter()
            .any(|o| o.path != c.path && c.path.starts_with(&o.path))
    });
    found.caches.dedup_by(|a, b| a.path == b.path);
    found.caches.sort_by_key(|c| c.path.components().count());
    let toolchains = found.toolchains.clone();
    found.toolchains.retain(|t| {
        !toolchains
            .iter()
            .any(|o| o.host != t.host && t.host.starts_with(&o.host))
    });
    let mut kept = Vec::new();
    for t in std::mem::take(&mut found.toolchains) {
        match found
            .caches
            .iter_mut()
            .find(|c| t.host.starts_with(&c.path))
        {
            Some(cache) => {
                if !cache.read_only.contains(&t.host) {
                    cache.read_only.push(t.host);
                }
            }
            None => kept.push(t),
        }
    }
    found.toolchains = kept;
    found.secrets.sort();
    found.secrets.dedup();
}

#[cfg(test)]
#[path = "toolchains_tests.rs"]
mod tests;
