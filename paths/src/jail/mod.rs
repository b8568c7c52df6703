//! The jail: every file operation the server makes on an agent's files,
//! resolved by the kernel beneath a set of roots (SPEC H2, G1, G5).
//!
//! In-server file tools (read, write, edit, apply_patch, search, find),
//! copy-on-write clones and remote file APIs act in the server process,
//! outside any sandbox. Checking paths as strings there would be a bypass
//! of the boundary the sandbox holds, so they act only through a [`Jail`]:
//!
//! - Each root is opened once; every path beneath it is resolved by
//!   `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` from that
//!   descriptor. A `..` or symlink leading out, a magic link
//!   (`/proc/self/fd/N`), a symlink swapped in mid-operation: the kernel
//!   refuses them, and the jail names the refusal ([`rule::ESCAPES_ROOT`],
//!   [`rule::LINK_OUT`]). There is no fallback to string checks: a kernel
//!   without `openat2` (Linux 5.6+) gets [`JailError::Unsupported`].
//! - A change acts on the final name relative to its parent's descriptor
//!   (`O_NOFOLLOW`, `unlinkat`, `renameat`, `mkdirat`), judged on the
//!   canonical path the kernel reports for that descriptor, by the same
//!   [`crate::write_rules::Rules`] the sandbox's create-time guard applies:
//!   a sandboxed command and an in-server tool are refused the same names.
//! - Existing files are judged by identity before they are changed:
//!   opened without truncation, `fstat`ed, refused when protected at start
//!   or a registered checkout's, then truncated through that descriptor.
//! - Reads refuse secrets (`HOME_SECRETS`, `SYSTEM_SECRETS`, SSH host
//!   keys), FIFOs and devices, and files with several names (a hard link
//!   may lead to a file outside every root).
//!
//! Copy-on-write clones of a registered checkout into a conversation
//! ([`Jail::clone_tree`]) walk both trees by descriptor and share every
//! file's extents (`FICLONE`); a filesystem that cannot is an error, never
//! a byte copy.
//!
//! What a front-end passes: the run's workdir and the conversation's
//! `repos/` as writable roots, the space's attachment directory as a
//! read-only root ([`JailConfig::new`]), `$HOME` as [`JailConfig::home`]
//! (its secrets are never read, whether or not it is a root), and every
//! registered checkout as [`JailConfig::protected`] (SPEC H11).

mod checks;
mod clone;
mod error;
mod form;
mod ops;
mod pin;
mod resolve;
mod sys;
mod walk;

#[cfg(test)]
mod jail_tests;
#[cfg(test)]
mod judge_tests;
#[cfg(test)]
mod race_tests;

pub use clone::{CloneChoice, CloneEntry, CloneReport, CloneSource};
pub use error::{Denial, JailError, Op, rule};
pub use ops::{EntryKind, ListEntry};
pub use pin::{PinError, fd_spelling, pin};
pub use walk::{DEFAULT_MAX_DEPTH, Walk, WalkEntry};

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use crate::write_deny::DEFAULT_GLOBS;
use crate::write_rules::{GuardConfig, Rules, scan_protected_inodes};

/// Whether a root may be changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read, list, stat and walk only.
    ReadOnly,
    /// Every operation, as the rules allow.
    Writable,
}

/// One directory the jail acts beneath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootConfig {
    /// The host path (absolute; a symlink in it is followed once, here).
    pub path: PathBuf,
    /// The name [`JailPath::InRoot`] and messages use; unique.
    pub label: String,
    /// Whether it may be changed.
    pub access: Access,
}

impl RootConfig {
    /// A root that may be changed.
    pub fn writable(label: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            label: label.into(),
            access: Access::Writable,
        }
    }

    /// A root that may only be read.
    pub fn read_only(label: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            label: label.into(),
            access: Access::ReadOnly,
        }
    }
}

/// Everything a [`Jail`] is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailConfig {
    /// The roots.
    pub roots: Vec<RootConfig>,
    /// The dispatch policy's create-time globs
    /// ([`crate::write_deny::DEFAULT_GLOBS`] by default).
    pub globs: Vec<String>,
    /// The user's `$HOME`: its `HOME_SECRETS` are never read or changed;
    /// when it is at or below a writable root, its `~/` globs apply too.
    pub home: Option<PathBuf>,
    /// Registered checkouts (SPEC H11): never changed, at or below them,
    /// compared by identity so another spelling or a hard link is caught.
    pub protected: Vec<PathBuf>,
}

impl JailConfig {
    /// The roots with the default globs, no home and nothing protected.
    pub fn new(roots: Vec<RootConfig>) -> Self {
        Self {
            roots,
            globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
            home: None,
            protected: Vec::new(),
        }
    }

    /// The same, with `$HOME`.
    pub fn with_home(mut self, home: Option<PathBuf>) -> Self {
        self.home = home;
        self
    }

    /// The same, with registered checkouts.
    pub fn with_protected(mut self, protected: Vec<PathBuf>) -> Self {
        self.protected = protected;
        self
    }
}

/// A path as a caller names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JailPath {
    /// An absolute host path; it must lie under a root.
    Host(PathBuf),
    /// A path relative to the root with this label.
    InRoot {
        /// The root's label.
        root: String,
        /// Relative to it.
        path: PathBuf,
    },
}

impl JailPath {
    /// An absolute host path.
    pub fn host(path: impl Into<PathBuf>) -> Self {
        Self::Host(path.into())
    }

    /// A path relative to a root.
    pub fn in_root(root: impl Into<String>, path: impl Into<PathBuf>) -> Self {
        Self::InRoot {
            root: root.into(),
            path: path.into(),
        }
    }

    /// A path a tool was given, seen from `base` (its working directory
    /// beneath a root): an absolute one as it is (it must lie under a
    /// root), a relative one joined to `base`. `..` stays for the kernel.
    pub fn from_input(base: &JailPath, input: impl AsRef<Path>) -> Self {
        let input = input.as_ref();
        if input.is_absolute() {
            return Self::Host(input.to_path_buf());
        }
        match base {
            Self::Host(dir) => Self::Host(dir.join(input)),
            Self::InRoot { root, path } => Self::InRoot {
                root: root.clone(),
                path: path.join(input),
            },
        }
    }
}

/// A root held open.
#[derive(Debug)]
struct Root {
    fd: OwnedFd,
    /// As the front-end spelled it.
    given: PathBuf,
    /// Where the kernel says it is.
    canonical: PathBuf,
    label: String,
    access: Access,
}

/// File operations beneath a set of roots, judged by the create-time rules.
/// See the [module documentation](self).
#[derive(Debug)]
pub struct Jail {
    roots: Vec<Root>,
    rules: Rules,
    /// `$HOME`, canonical when it exists.
    home: Option<PathBuf>,
    /// Registered checkouts by path: as given, and canonical.
    protected_paths: Vec<PathBuf>,
    /// Registered checkouts by identity, to the path named in messages.
    protected_ids: HashMap<(u64, u64), PathBuf>,
    /// The identity of `/`, where a walk up by `..` ends.
    fs_root: (u64, u64),
    /// Whether the start-up scan saw every file under the writable roots.
    scan_complete: bool,
    /// Makes temporary names unique within this process.
    temp_counter: AtomicU64,
}

impl Jail {
    /// Opens the roots and compiles the rules; runs the start-up scan over
    /// the writable roots (and `$HOME` when one holds it), so files
    /// protected now are known by identity. Fails when a root cannot be
    /// opened, a glob is bad, or the kernel cannot resolve beneath a root.
    pub fn new(config: JailConfig) -> Result<Self, JailError> {
        if config.roots.is_empty() {
            return Err(JailError::Config("no roots".into()));
        }
        let mut roots: Vec<Root> = Vec::with_capacity(config.roots.len());
        for root in &config.roots {
            if !root.path.is_absolute() {
                return Err(JailError::Config(format!(
                    "the root {} ({}) is not an absolute path",
                    root.label,
                    root.path.display()
                )));
            }
            if roots.iter().any(|r| r.label == root.label) {
                return Err(JailError::Config(format!(
                    "two roots are labelled {}",
                    root.label
                )));
            }
            let io_error = |source| JailError::Io {
                op: Op::Open,
                path: root.path.clone(),
                source,
            };
            let fd = sys::open_root(&root.path).map_err(io_error)?;
            resolve::probe(&fd, &root.path)?;
            let canonical = sys::fd_path(std::os::fd::AsFd::as_fd(&fd)).map_err(io_error)?;
            roots.push(Root {
                fd,
                given: root.path.clone(),
                canonical,
                label: root.label.clone(),
                access: root.access,
            });
        }
        let home = match &config.home {
            Some(home) if !home.is_absolute() => {
                return Err(JailError::Config(format!(
                    "$HOME {} is not an absolute path",
                    home.display()
                )));
            }
            Some(home) => Some(std::fs::canonicalize(home).unwrap_or_else(|_| home.clone())),
            None => None,
        };
        let writable: Vec<PathBuf> = roots
            .iter()
            .filter(|r| r.access == Access::Writable)
            .map(|r| r.canonical.clone())
            .collect();
        // `~/` globs guard the home wherever a writable root holds it: its
        // rc files run at the next login whichever root reaches them.
        let rules_home = home
            .clone()
            .filter(|h| writable.iter().any(|w| h.starts_with(w)));
        // The home's allowlist wherever a writable root holds any part of
        // it; the server's own PATH and the home's PATH directories kept.
        let allowlisted_home = home.clone().filter(|h| {
            writable
                .iter()
                .any(|w| crate::allowlists::home::holds_part_of(w, h))
        });
        let path_dirs = crate::allowlists::home::path_dirs(
            std::env::var_os("PATH").as_deref(),
            home.as_deref(),
        )
        .into_iter()
        .map(|d| std::fs::canonicalize(&d).unwrap_or(d))
        .filter(|d| writable.iter().any(|w| d.starts_with(w)))
        .collect();
        let mut rules = Rules::new(&GuardConfig {
            globs: config.globs.clone(),
            roots: writable,
            home: rules_home,
            allowlisted_home,
            throwaway: Vec::new(),
            path_dirs,
            unix_sockets: Vec::new(),
        })
        .map_err(|e| JailError::Config(format!("the glob {} is invalid: {}", e.glob, e.reason)))?;
        // With no globs nothing is protected by name at start (a server's
        // own tree, such as a conversation being cloned): no scan.
        let scan_complete = if config.globs.is_empty() {
            rules.scan_completed();
            true
        } else {
            scan_protected_inodes(&mut rules)
        };
        let mut protected_paths = Vec::new();
        let mut protected_ids = HashMap::new();
        for path in &config.protected {
            if !path.is_absolute() {
                return Err(JailError::Config(format!(
                    "the protected path {} is not absolute",
                    path.display()
                )));
            }
            protected_paths.push(path.clone());
            if let Ok(canonical) = std::fs::canonicalize(path) {
                protected_paths.push(canonical);
            }
            if let Ok(meta) = std::fs::metadata(path) {
                use std::os::unix::fs::MetadataExt;
                protected_ids.insert((meta.dev(), meta.ino()), path.clone());
            }
        }
        let fs_root = std::fs::metadata("/")
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
            .map_err(|source| JailError::Io {
                op: Op::Open,
                path: "/".into(),
                source,
            })?;
        Ok(Self {
            roots,
            rules,
            home,
            protected_paths,
            protected_ids,
            fs_root,
            scan_complete,
            temp_counter: AtomicU64::new(0),
        })
    }

    /// Whether the start-up scan saw every file under the writable roots;
    /// when not, `existing:` globs protect every match (fail closed).
    pub fn scan_complete(&self) -> bool {
        self.scan_complete
    }

    /// The canonical host path of the root labelled `label`.
    pub fn root_path(&self, label: &str) -> Option<&Path> {
        self.roots
            .iter()
            .find(|r| r.label == label)
            .map(|r| r.canonical.as_path())
    }

    /// The compiled rules the jail judges changes by.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }
}
