//! What the jail answers when it will not act: the operation, the path,
//! the rule and why, in the wording of [`crate::write_rules::Refusal`].

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The names of the jail's own rules, the same every time they refuse, so
/// front-ends and tests can match on them. Refusals by the create-time
/// rules carry the glob or rule text of [`crate::write_rules::Refusal`].
pub mod rule {
    /// A `..` or an absolute symlink would leave the root (the kernel's
    /// `EXDEV` under `RESOLVE_BENEATH`), or the path resolved outside every
    /// root (moved away while the jail held it).
    pub const ESCAPES_ROOT: &str = "escapes the root";
    /// A symlink on the way out of the root, a symlink loop, or a magic
    /// link such as `/proc/self/fd/N` (the kernel's `ELOOP`).
    pub const LINK_OUT: &str = "a symlink or magic link out of the root";
    /// An absolute path under no root.
    pub const OUTSIDE_ROOTS: &str = "outside every root";
    /// A path the jail cannot take as given (relative where absolute is
    /// needed, a NUL byte, a final `..`, an unknown root).
    pub const PATH_FORM: &str = "path form";
    /// The root itself cannot be changed, removed or renamed.
    pub const ROOT_ITSELF: &str = "the root itself";
    /// Every mutation in a read-only root.
    pub const READ_ONLY_ROOT: &str = "read-only root";
    /// Something no command may read (`HOME_SECRETS`, `SYSTEM_SECRETS`, an
    /// SSH host key); the jail neither reads nor changes it.
    pub const SECRET: &str = "secret";
    /// At or below a registered checkout, by path or by identity.
    pub const PROTECTED_PATH: &str = "protected path";
    /// Another name (hard link) of a file protected at start.
    pub const PROTECTED_FILE: &str = "another name of a protected file";
    /// A file with more than one name: its other names may lie outside
    /// every root, so it is neither read nor changed in place.
    pub const HARD_LINKED: &str = "hard-linked file";
    /// The final name is a symlink, and a change never follows one.
    pub const FINAL_SYMLINK: &str = "symlink at the final name";
    /// A FIFO, socket or device: opening one can block or act.
    pub const NOT_REGULAR: &str = "not a regular file";
    /// An execute bit added to a file below a git hooks directory.
    pub const HOOKS_EXEC: &str = "+x under hooks";
    /// A setuid, setgid or sticky bit asked of `chmod`.
    pub const SPECIAL_MODE_BITS: &str = "setuid, setgid or sticky bit";
    /// A recursive removal that would cross into another filesystem.
    pub const ONE_FILESYSTEM: &str = "one filesystem";
    /// A tree deeper than the jail descends.
    pub const TOO_DEEP: &str = "too deep";
}

/// The operation a refusal or error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Building the jail.
    Open,
    /// [`super::Jail::open_read`], [`super::Jail::read`], [`super::Jail::open_entry`].
    Read,
    /// [`super::Jail::create`], [`super::Jail::write`].
    Write,
    /// [`super::Jail::mkdir`].
    Mkdir,
    /// [`super::Jail::rename`].
    Rename,
    /// [`super::Jail::link`].
    Link,
    /// [`super::Jail::unlink`].
    Unlink,
    /// [`super::Jail::rmdir`].
    Rmdir,
    /// [`super::Jail::remove_all`].
    RemoveAll,
    /// [`super::Jail::list`].
    List,
    /// [`super::Jail::stat`].
    Stat,
    /// [`super::Jail::chmod`].
    Chmod,
    /// [`super::Jail::replace_atomically`].
    Replace,
    /// [`super::Jail::walk`].
    Walk,
    /// [`super::Jail::clone_tree`], [`super::Jail::try_reflink`].
    Clone,
}

impl Op {
    /// The operation's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Open => "open the jail at",
            Op::Read => "read",
            Op::Write => "write",
            Op::Mkdir => "mkdir",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::RemoveAll => "remove",
            Op::List => "list",
            Op::Stat => "stat",
            Op::Chmod => "chmod",
            Op::Replace => "replace",
            Op::Walk => "walk",
            Op::Clone => "clone",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One refusal: what was asked, of which path, and the rule that refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The operation refused.
    pub op: Op,
    /// The path as the caller named it (a root-relative path shown under
    /// its root).
    pub path: PathBuf,
    /// The path the kernel resolved it to, when known and different.
    pub resolved: Option<PathBuf>,
    /// The rule: one of [`rule`], or a create-time glob or rule text.
    pub rule: String,
    /// Why the rule refuses.
    pub why: String,
    /// What to do instead, where there is something.
    pub remedy: Option<String>,
}

impl fmt::Display for Denial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: refused by the rule `{}`: {}",
            self.op,
            self.path.display(),
            self.rule,
            self.why
        )?;
        if let Some(resolved) = self.resolved.as_ref().filter(|r| **r != self.path) {
            write!(f, " (resolved to {})", resolved.display())?;
        }
        if let Some(remedy) = &self.remedy {
            write!(f, "; {remedy}")?;
        }
        Ok(())
    }
}

/// Why a jail operation did not happen.
#[derive(Debug)]
#[non_exhaustive]
pub enum JailError {
    /// A rule refused it.
    Refused(Box<Denial>),
    /// The kernel cannot resolve beneath a root (`openat2` is Linux 5.6+);
    /// the jail never falls back to comparing strings.
    Unsupported {
        /// The operation.
        op: Op,
        /// The path.
        path: PathBuf,
        /// What is missing.
        detail: String,
    },
    /// The kernel refused or failed it for an ordinary reason (no such
    /// file, exists already, permission).
    Io {
        /// The operation.
        op: Op,
        /// The path.
        path: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// The configuration cannot make a jail.
    Config(String),
}

impl JailError {
    /// The rule, when a rule refused.
    pub fn rule(&self) -> Option<&str> {
        match self {
            JailError::Refused(d) => Some(&d.rule),
            _ => None,
        }
    }

    /// The refusal, when a rule refused.
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            JailError::Refused(d) => Some(d),
            _ => None,
        }
    }

    /// The kernel's error number, for [`JailError::Io`].
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            JailError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl fmt::Display for JailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JailError::Refused(d) => d.fmt(f),
            JailError::Unsupported { op, path, detail } => {
                write!(f, "{op} {}: {detail}", path.display())
            }
            JailError::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            JailError::Config(why) => write!(f, "jail configuration: {why}"),
        }
    }
}

impl std::error::Error for JailError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JailError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// What the kernel lacks when `openat2` answers `ENOSYS`.
pub(super) const NEEDS_OPENAT2: &str = "the jail needs openat2 with RESOLVE_BENEATH (Linux 5.6+) to \
     resolve paths beneath a root; this kernel (or a seccomp filter) has none, and the jail does \
     not fall back to comparing strings";
