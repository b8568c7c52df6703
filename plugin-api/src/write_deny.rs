//! The filename-glob write denies of the dispatch policy (SPEC C3, G1): one
//! definition, so the Linux create-time guard and the macOS profile deny
//! exactly the same names.
//!
//! # The glob language
//!
//! A glob is matched against a path *relative to a root*: each writable root
//! of the sandbox, and `$HOME`. It is a `/`-separated list of segments:
//!
//! - `**` (a whole segment) matches zero or more segments;
//! - `*` matches any run of characters within one segment, `?` one character;
//! - everything else matches itself. No classes, no braces, no escapes.
//!
//! So `.bashrc` means only `<root>/.bashrc`; `**/.env` means a `.env` at any
//! depth; `**/.git/hooks/**` means any `.git/hooks` and anything inside it.
//!
//! **Existing files only.** A glob written `existing:<glob>` protects the
//! names it matches once they exist — no write, truncate, rename onto or
//! away, unlink, or hard-link alias — but lets a new one be created. The
//! default policy uses it for `**/.git/config`: changing an existing
//! repository's config (hooks path, fsmonitor, aliases) would run code on
//! the host later, while `git init` and `git clone` must write the config of
//! the repository they create.
//!
//! **Dependency folders.** Globs of the form `**/<name pattern>` (a name
//! anywhere, such as `**/*.pem`) do not apply inside `node_modules`,
//! `site-packages`, `dist-packages` or `.venv`: packages ship certificates
//! and test keys, and denying them would break every install (DESIGN §5).

use std::fmt;

/// Directories inside which "a name anywhere" globs do not apply.
pub const DEPENDENCY_DIRS: &[&str] = &["node_modules", "site-packages", "dist-packages", ".venv"];

/// The default globs (DESIGN §5): secrets a command must not create, and files
/// that would run code outside the sandbox later.
pub const DEFAULT_GLOBS: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    "**/.git/hooks/**",
    "existing:**/.git/config",
    ".claude/**",
    ".mcp.json",
];

/// One segment of a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// `**`: zero or more segments.
    AnyDepth,
    /// A name pattern (may hold `*` and `?`).
    Name(String),
}

/// A parsed glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    text: String,
    segments: Vec<Segment>,
    existing_only: bool,
}

/// The prefix that makes a glob protect existing files only.
pub const EXISTING_PREFIX: &str = "existing:";

/// A glob that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobError {
    /// The glob.
    pub glob: String,
    /// Why.
    pub reason: &'static str,
}

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write-deny glob `{}`: {}", self.glob, self.reason)
    }
}

impl std::error::Error for GlobError {}

impl Glob {
    /// Parses a glob of the language above.
    pub fn parse(text: &str) -> Result<Self, GlobError> {
        let (existing_only, pattern) = match text.strip_prefix(EXISTING_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let mut glob = Self::parse_pattern(pattern).map_err(|reason| GlobError {
            glob: text.to_owned(),
            reason,
        })?;
        glob.text = text.to_owned();
        glob.existing_only = existing_only;
        Ok(glob)
    }

    fn parse_pattern(text: &str) -> Result<Self, &'static str> {
        let error = |reason| reason;
        if text.is_empty() {
            return Err(error("it is empty"));
        }
        if text.starts_with('/') {
            return Err(error(
                "globs are relative to each root; drop the leading `/`",
            ));
        }
        if text.contains(['[', ']', '{', '}', '\\']) {
            return Err(error(
                "classes, braces and escapes are not part of the glob language",
            ));
        }
        let mut segments = Vec::new();
        for part in text.split('/') {
            match part {
                "" => return Err(error("it has an empty segment (`//` or a trailing `/`)")),
                "." | ".." => return Err(error("`.` and `..` segments are not allowed")),
                "**" => {
                    if segments.last() != Some(&Segment::AnyDepth) {
                        segments.push(Segment::AnyDepth);
                    }
                }
                p if p.contains("**") => return Err(error("`**` must be a whole segment")),
                p => segments.push(Segment::Name(p.to_owned())),
            }
        }
        if segments == [Segment::AnyDepth] {
            return Err(error("`**` alone would deny every write"));
        }
        Ok(Self {
            text: text.to_owned(),
            segments,
            existing_only: false,
        })
    }

    /// Whether it protects existing files only (`existing:`).
    pub fn existing_only(&self) -> bool {
        self.existing_only
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether this is "a name anywhere" (`**/<name>`), which dependency
    /// folders are exempt from.
    pub fn is_name_anywhere(&self) -> bool {
        matches!(
            self.segments.as_slice(),
            [Segment::AnyDepth, Segment::Name(_)]
        )
    }

    /// Whether the glob matches a path relative to a root, given as its
    /// segments (dependency-folder exemption included).
    pub fn matches(&self, relative: &[&str]) -> bool {
        if self.is_name_anywhere() {
            let dirs = &relative[..relative.len().saturating_sub(1)];
            if dirs.iter().any(|d| DEPENDENCY_DIRS.contains(d)) {
                return false;
            }
        }
        match_segments(&self.segments, relative)
    }
}

fn match_segments(glob: &[Segment], path: &[&str]) -> bool {
    match glob.split_first() {
        None => path.is_empty(),
        Some((Segment::AnyDepth, rest)) => {
            (0..=path.len()).any(|skip| match_segments(rest, &path[skip..]))
        }
        Some((Segment::Name(pattern), rest)) => match path.split_first() {
            Some((name, tail)) => {
                match_name(pattern.as_bytes(), name.as_bytes()) && match_segments(rest, tail)
            }
            None => false,
        },
    }
}

/// `*` and `?` within one name.
fn match_name(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && match_name(rest, &name[1..]),
    }
}

/// A set of globs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobSet {
    globs: Vec<Glob>,
}

impl GlobSet {
    /// Parses every glob; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(globs: &[S]) -> Result<Self, GlobError> {
        Ok(Self {
            globs: globs
                .iter()
                .map(|g| Glob::parse(g.as_ref()))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The globs.
    pub fn globs(&self) -> &[Glob] {
        &self.globs
    }

    /// Whether no glob is set.
    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    /// The first glob matching a path relative to a root (`a/b/.env`).
    pub fn matching(&self, relative: &str) -> Option<&Glob> {
        let segments: Vec<&str> = relative
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect();
        self.globs.iter().find(|g| g.matches(&segments))
    }

    /// The first glob that forbids *creating* this path: `existing:` globs
    /// are left out.
    pub fn forbidding_creation(&self, relative: &str) -> Option<&Glob> {
        let segments: Vec<&str> = relative
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect();
        self.globs
            .iter()
            .find(|g| !g.existing_only && g.matches(&segments))
    }

    /// Whether a glob could match something *inside* the directory at this
    /// relative path: renaming or removing such a directory (or an ancestor)
    /// could move a protected name out from under the rule (the "structural
    /// prefix" rule).
    pub fn guards_inside(&self, relative_dir: &str) -> bool {
        let segments: Vec<&str> = relative_dir
            .split('/')
            .filter(|s| !s.is_empty() && *s != ".")
            .collect();
        self.globs
            .iter()
            .any(|g| prefix_can_match(g.segments(), &segments))
    }
}

/// Whether `glob` could match `path` followed by at least one more segment
/// (the directory at `path` would contain the match). Globs that match a
/// name anywhere are left out: every directory would qualify, and moving a
/// directory moves such names to places the glob matches just the same.
fn prefix_can_match(glob: &[Segment], path: &[&str]) -> bool {
    match glob {
        [Segment::AnyDepth, Segment::Name(_)] => false,
        // A leading `**` may stand for the directories above, but the
        // directory itself must be one the rest of the glob names: moving
        // `src` moves `src/.git/hooks` to a place `**/.git/hooks/**` covers
        // just the same, while moving `.git` does not.
        [Segment::AnyDepth, rest @ ..] => (0..path.len()).any(|k| can_extend(rest, &path[k..])),
        _ => can_extend(glob, path),
    }
}

fn can_extend(glob: &[Segment], path: &[&str]) -> bool {
    match glob.split_first() {
        None => false,
        Some(_) if path.is_empty() => true,
        // `**` may take some of the path, or all of it and part of what follows.
        Some((Segment::AnyDepth, rest)) => {
            rest.is_empty() || (0..=path.len()).any(|k| can_extend(rest, &path[k..]))
        }
        Some((Segment::Name(pattern), rest)) => {
            match_name(pattern.as_bytes(), path[0].as_bytes()) && can_extend(rest, &path[1..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> GlobSet {
        GlobSet::parse(DEFAULT_GLOBS).unwrap()
    }

    #[test]
    fn the_defaults_deny_secrets_anywhere_and_rc_files_at_the_top() {
        let s = set();
        for denied in [
            ".env",
            "a/b/.env",
            ".env.local",
            "x.pem",
            "deep/er/server.key",
            ".bashrc",
            ".git/hooks/pre-commit",
            "sub/repo/.git/hooks/x",
            ".git/config",
            "vendored/.git/config",
            ".claude/settings.json",
            ".mcp.json",
            ".claude",
            ".git/hooks",
        ] {
            assert!(s.matching(denied).is_some(), "{denied} should be denied");
        }
        for allowed in [
            "x.txt",
            "env",
            ".envrc",
            "sub/.bashrc",
            ".git/HEAD",
            ".git/objects/ab/cdef",
            "src/key.rs",
            "pem",
            "notes.pem.txt",
        ] {
            assert!(s.matching(allowed).is_none(), "{allowed} should be allowed");
        }
    }

    #[test]
    fn dependency_folders_are_exempt_from_names_anywhere_only() {
        let s = set();
        assert!(s.matching("node_modules/pkg/test/fixture.pem").is_none());
        assert!(
            s.matching("venv/lib/python3.11/site-packages/certifi/cacert.pem")
                .is_none()
        );
        assert!(s.matching(".venv/x.key").is_none());
        assert!(
            s.matching("node_modules/x/.git/hooks/post-checkout")
                .is_some(),
            "hooks are not secrets"
        );
    }

    #[test]
    fn bad_globs_are_refused_with_the_reason() {
        for (glob, reason) in [
            ("", "empty"),
            ("/etc/x", "relative"),
            ("a//b", "empty segment"),
            ("a/../b", "`..`"),
            ("a**b", "whole segment"),
            ("**", "every write"),
            ("*.[ch]", "classes"),
        ] {
            let err = Glob::parse(glob).unwrap_err();
            assert!(err.to_string().contains(reason), "{glob}: {err}");
        }
        assert_eq!(
            Glob::parse("**/**/x").unwrap().segments().len(),
            2,
            "`**/**` folds"
        );
    }

    #[test]
    fn existing_only_globs_allow_creation() {
        let s = set();
        assert!(s.matching(".git/config").unwrap().existing_only());
        assert!(
            s.forbidding_creation(".git/config").is_none(),
            "git init may write a new repo's config"
        );
        assert!(s.forbidding_creation("a/.env").is_some());
        let g = Glob::parse("existing:**/x").unwrap();
        assert_eq!(g.as_str(), "existing:**/x");
        assert!(Glob::parse("existing:").is_err());
        assert!(
            Glob::parse("existing:/abs")
                .unwrap_err()
                .to_string()
                .contains("existing:/abs")
        );
    }

    #[test]
    fn name_patterns() {
        assert!(match_name(b"*.pem", b"a.pem"));
        assert!(match_name(b"*.pem", b".pem"));
        assert!(!match_name(b"*.pem", b"a.pem.bak"));
        assert!(match_name(b"?.key", b"a.key"));
        assert!(!match_name(b"?.key", b"ab.key"));
        assert!(match_name(b".env.*", b".env.production"));
    }

    #[test]
    fn the_structural_prefix_rule() {
        let s = set();
        for dir in [".git", "sub/.git", ".git/hooks", ".claude", "a/b/.git"] {
            assert!(s.guards_inside(dir), "{dir} holds protected names");
        }
        for dir in ["src", ".git/objects", "node_modules", ".github"] {
            assert!(!s.guards_inside(dir), "{dir} does not");
        }
    }
}
