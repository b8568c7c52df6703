//! A user's home, when a writable bind holds it or any part of it (the home,
//! an ancestor, or a directory below it such as `~/.config` or `~/.local`):
//! everything under a dot-path of the home (`~/.x` and all below it), and
//! under the few other places tools keep code ([`HOME_CODE_DIRS`]), is
//! read-only inside, except
//!
//! - [`HOME_DATA`]: data read back as data, never run (histories), which
//!   reaches the host; and
//! - the caches shown as throwaway overlays: reads see the host's files,
//!   writes stay in the sandbox — [`HOME_THROWAWAY`] and the toolchains'
//!   caches and homes (`crate::toolchains`: `CARGO_HOME`, `GOPATH`,
//!   `~/.npm`, …). A package cache holds what the host builds or runs later
//!   (cargo's unpacked sources, pip's built wheels, npx's packages), so it
//!   is never written through to the host.
//!
//! The secrets (`crate::secrets::HOME_SECRETS`) are all dot-paths: one that
//! exists is masked, one that does not cannot be made. [`HOME_PATH_DIRS`]
//! are never writable, whether or not they exist yet: an install there
//! would shadow a command on the host.

use std::path::{Component, Path, PathBuf};

use crate::write_deny::GlobSet;

/// What stays writable under the home's dot-paths and reaches the host:
/// globs relative to the home, each with why it is safe.
pub const HOME_DATA: &[(&str, &str)] = &[
    (
        ".bash_history",
        "bash's history: lines read back into its history list, never run",
    ),
    (
        ".bash_history-*.tmp",
        "bash writes its history through a temporary file beside it",
    ),
    (
        ".zsh_history",
        "zsh's history: lines read back into its history list, never run",
    ),
    (".python_history", "Python's REPL history: lines, never run"),
    (
        ".node_repl_history",
        "Node's REPL history: lines, never run",
    ),
    (".sqlite_history", "sqlite3's history: lines, never run"),
    (".psql_history", "psql's history: lines, never run"),
    (".lesshst", "less's search history: lines, never run"),
    (".wget-hsts", "wget's HSTS cache: host names and times"),
];

/// Dot-directories of a bound home shown as a throwaway overlay when they
/// exist (beside the toolchains' caches, `crate::toolchains::CACHES`).
pub const HOME_THROWAWAY: &[(&str, &str)] = &[(
    ".cache",
    "the XDG cache: tools expect to write it, and it holds what the host builds and runs \
     later (pre-commit's environments, Playwright's browsers, go's build cache), so \
     writes stay in the sandbox",
)];

/// Places outside the dot-paths where tools keep code the host runs:
/// read-only like a dot-path.
pub const HOME_CODE_DIRS: &[(&str, &str)] = &[
    (
        "bin",
        "on PATH at login (Debian's ~/.profile): shadows any command",
    ),
    (
        "go",
        "GOPATH: the modules the host builds and `go install`'s bin",
    ),
    ("perl5", "local::lib's modules, on PERL5LIB"),
    ("R", "R's user library: packages `library()` loads"),
    ("snap", "snap applications' own configuration"),
    (
        "Library",
        "macOS: launch agents, application support, preferences",
    ),
];

/// A home's `PATH` directories: never writable, whether or not they exist
/// or are on `PATH` now.
pub const HOME_PATH_DIRS: &[(&str, &str)] = &[
    ("bin", "on PATH at login (Debian's ~/.profile)"),
    (".local/bin", "on PATH (systemd, ~/.profile)"),
    (".cargo/bin", "`cargo install`'s target, on PATH (rustup)"),
    ("go/bin", "`go install`'s target"),
];

/// How to install without writing a `PATH` directory: the remedy every
/// refusal of one names.
pub const PATH_DIR_REMEDY: &str = "install into the workspace instead (`cargo install --root \
     DIR`, `GOBIN=DIR go install`, `npm install -g --prefix DIR`, `pip install --target DIR`), \
     or run without binding the home (the sandbox then has a private one)";

/// Whether a writable root at `root` holds any part of `home`: the home,
/// a directory above it, or one below it. Then the home's allowlist
/// applies.
pub fn holds_part_of(root: &Path, home: &Path) -> bool {
    home.starts_with(root) || root.starts_with(home)
}

/// The `PATH` directories to keep, as given: every absolute entry of
/// `path_var`, and the home's [`HOME_PATH_DIRS`]. A backend keeps those
/// that lie in its writable roots.
pub fn path_dirs(path_var: Option<&std::ffi::OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = path_var
        .map(|p| {
            std::env::split_paths(p)
                .filter(|d| d.is_absolute() && d.as_os_str().len() > 1)
                .collect()
        })
        .unwrap_or_default();
    if let Some(home) = home {
        dirs.extend(HOME_PATH_DIRS.iter().map(|(rel, _)| home.join(rel)));
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Whether the home-relative path `rel` lies under the kept part of the
/// home ([`kept_part`] without its words: the guard asks this of every
/// write in a bound home).
pub fn is_kept(rel: &Path) -> bool {
    let Some(Component::Normal(first)) = rel.components().next() else {
        return false;
    };
    let bytes = first.as_encoded_bytes();
    bytes.first() == Some(&b'.')
        || HOME_CODE_DIRS
            .iter()
            .any(|(name, _)| name.as_bytes() == bytes)
}

/// Why the home-relative path `rel` is kept read-only: it lies under a
/// dot-path or a [`HOME_CODE_DIRS`] place (the name of that top entry and
/// the reason), or `None`.
pub fn kept_part(rel: &Path) -> Option<(String, &'static str)> {
    let Some(Component::Normal(first)) = rel.components().next() else {
        return None;
    };
    let bytes = first.as_encoded_bytes();
    let top = first.to_string_lossy().into_owned();
    if bytes.first() == Some(&b'.') {
        return Some((
            top,
            "a dot-path of the home: the host keeps code there (rc files, tool and agent \
             configs, language runtimes' user site directories)",
        ));
    }
    HOME_CODE_DIRS
        .iter()
        .find(|(name, _)| name.as_bytes() == bytes)
        .map(|(_, why)| (top, *why))
}

/// [`HOME_DATA`], compiled.
#[derive(Debug, Clone)]
pub struct HomeData {
    globs: GlobSet,
}

impl Default for HomeData {
    fn default() -> Self {
        Self::new()
    }
}

impl HomeData {
    /// Compiles [`HOME_DATA`].
    pub fn new() -> Self {
        let texts: Vec<&str> = HOME_DATA.iter().map(|(g, _)| *g).collect();
        Self {
            // The list is checked by a test: a bad glob would be empty.
            globs: GlobSet::parse(&texts).unwrap_or_default(),
        }
    }

    /// Whether the home-relative path `rel` is data that may change.
    pub fn is_data(&self, rel: &Path) -> bool {
        self.globs.matching(rel, true).is_some()
    }
}

/// The refusal text for a kept path of the home.
pub fn refusal(path: &Path, top: &str, why: &str) -> String {
    format!(
        "{} is under ~/{top}, {why}; in a bound home only the data of the home allowlist \
         (histories) and the caches shown as throwaway overlays may change \
         (docs/threat-model.md §4): make the change on the host, or run without binding the \
         home (the sandbox then has a private one)",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_list_parses_and_says_why() {
        for (glob, why) in HOME_DATA {
            assert!(crate::write_deny::Glob::parse(glob).is_ok(), "{glob}");
            assert!(why.len() > 10, "{glob}");
        }
        for (rel, why) in HOME_THROWAWAY
            .iter()
            .chain(HOME_CODE_DIRS)
            .chain(HOME_PATH_DIRS)
        {
            assert!(!rel.starts_with('/') && why.len() > 10, "{rel}");
        }
    }

    /// Each entry has its reason in the threat model (§4), so the page
    /// names every one.
    #[test]
    fn the_threat_model_names_every_entry() {
        let page = include_str!("../../../docs/threat-model.md");
        for (entry, _) in HOME_DATA
            .iter()
            .chain(HOME_THROWAWAY)
            .chain(HOME_CODE_DIRS)
            .chain(HOME_PATH_DIRS)
        {
            assert!(page.contains(&format!("`{entry}`")), "{entry}");
        }
    }

    #[test]
    fn dot_paths_and_code_dirs_are_kept_the_rest_is_free() {
        assert!(is_kept(Path::new(".x/y")) && is_kept(Path::new("R/lib")));
        assert!(!is_kept(Path::new("proj/.git")) && !is_kept(Path::new("")));
        for kept in [
            ".bashrc",
            ".config/fish/config.fish",
            ".local/lib/python3.11/site-packages/usercustomize.py",
            ".new-tool/init.sh",
            "go/pkg/mod/x",
            "bin/git",
            "Library/LaunchAgents/x.plist",
        ] {
            assert!(kept_part(Path::new(kept)).is_some(), "{kept}");
        }
        for free in ["proj/.git/config", "notes.txt", "src/.env", "gopher", ""] {
            assert!(kept_part(Path::new(free)).is_none(), "{free}");
        }
    }

    #[test]
    fn path_dirs_are_the_absolute_entries_and_the_homes() {
        let dirs = path_dirs(
            Some(std::ffi::OsStr::new(
                "/usr/bin:relative:/:/h/u/.cargo/bin::/opt/x/bin",
            )),
            Some(Path::new("/h/u")),
        );
        for want in [
            "/usr/bin",
            "/h/u/.cargo/bin",
            "/opt/x/bin",
            "/h/u/bin",
            "/h/u/go/bin",
        ] {
            assert!(dirs.contains(&PathBuf::from(want)), "{want}: {dirs:?}");
        }
        assert!(!dirs.iter().any(|d| d == Path::new("/") || d.is_relative()));
        assert!(holds_part_of(Path::new("/h"), Path::new("/h/u")));
        assert!(holds_part_of(Path::new("/h/u/.config"), Path::new("/h/u")));
        assert!(!holds_part_of(Path::new("/w"), Path::new("/h/u")));
    }

    #[test]
    fn histories_are_data_and_nothing_else_is() {
        let data = HomeData::new();
        for yes in [".bash_history", ".bash_history-4242.tmp", ".python_history"] {
            assert!(data.is_data(Path::new(yes)), "{yes}");
        }
        for no in [".bashrc", ".bash_history/x", "x/.bash_history", ".cache/x"] {
            assert!(!data.is_data(Path::new(no)), "{no}");
        }
    }
}
