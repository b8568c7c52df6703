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
//! depth; `**/.git/hooks/*` means any name directly inside any `.git/hooks`
//! (the empty directory itself may be made: libgit2, JGit and `cargo new`
//! create it, and nothing can be put in it).
//!
//! **Case.** Names match ASCII-case-insensitively: `X.PEM` and `id.KEY` are
//! `*.pem` and `*.key`, and macOS, whose usual filesystems ignore case and
//! share these globs, would open `.GIT/HOOKS/x` as `.git/hooks/x`.
//!
//! **`$HOME` only.** A glob written `~/<glob>` applies relative to `$HOME`
//! alone, not to the writable roots: `~/bin/**` is a `PATH` directory in the
//! home, while a project's own `bin/` is its business.
//!
//! **Existing files only.** A glob written `existing:<glob>` protects the
//! names it matches once they exist — no write, truncate, rename onto or
//! away, unlink, or hard-link alias — but lets a new one be created. The
//! default policy uses it for `**/.git/config` (and a submodule's, a
//! worktree's, a `.git` file's `gitdir:`): changing an existing
//! repository's config (hooks path, fsmonitor, aliases) would run code on
//! the host later, while `git init`, `git clone --recurse-submodules`,
//! `git submodule update` and `git worktree add` must write the config of
//! the repository they create. The prefixes combine: `existing:~/x`.
//!
//! **Dependency folders.** Globs of the form `**/<name pattern>` (a name
//! anywhere, such as `**/*.pem`) do not apply inside `node_modules`,
//! `site-packages`, `dist-packages` or `.venv`: packages ship certificates
//! and test keys, and denying them would break every install (docs/design.md §8).

use std::fmt;

/// Directories inside which "a name anywhere" globs do not apply.
pub const DEPENDENCY_DIRS: &[&str] = &["node_modules", "site-packages", "dist-packages", ".venv"];

/// The default globs (docs/design.md §8): secrets a command must not create,
/// and files that would run code outside the sandbox later (SPEC G5, issue 14
/// item 5). The families, and which are left writable on purpose, are
/// inventoried in the threat model; each has a black-box test in
/// `tests/integration/guard.rs`.
pub const DEFAULT_GLOBS: &[&str] = &[
    // Secrets, anywhere.
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    // Shell startup and logout files, and what they read.
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".logout",
    ".kshrc",
    ".mkshrc",
    ".config/fish/**",
    ".inputrc",
    ".xprofile",
    ".xsessionrc",
    ".xinitrc",
    ".pam_environment",
    "~/.config/environment.d/**",
    // git: hooks of every repository (never made), the config of every
    // repository that existed at launch (a new one's is its maker's), its
    // `.git` file (`gitdir:`), and git's own config in the home.
    // Hooks of submodules: `modules/<name>` and one level of nesting. Not
    // `**` between `modules` and `hooks`: the structural-prefix rule would
    // make every name below `modules` (a `config.lock` git renames into
    // place) a directory protected names live in. Hooks directories of
    // submodules whose name holds `/`, or nested deeper, are protected where
    // they exist at launch: by the Linux guard's start-up scan and bwrap's
    // plan. `existing:` globs may use `**`: the Linux guard protects their
    // directories by the files they matched.
    "**/.git/hooks/*",
    "**/.git/modules/*/hooks/*",
    "**/.git/modules/*/modules/*/hooks/*",
    "existing:**/.git/config",
    "existing:**/.git/config.worktree",
    "existing:**/.git/modules/**/config",
    "existing:**/.git/modules/**/config.worktree",
    "existing:**/.git/worktrees/*/config.worktree",
    "existing:**/.git",
    "~/.gitconfig",
    "~/.config/git/config",
    "~/.config/git/attributes",
    // Login access and programs found through PATH or started by the session.
    "~/.ssh/**",
    "~/bin/**",
    "~/.local/bin/**",
    "~/.config/systemd/user/**",
    "~/.config/autostart/**",
    // direnv: an `.envrc` anywhere, and its library.
    "**/.envrc",
    "~/.config/direnv/**",
    // Tool configs that name programs to run (cargo and npm read them in
    // every directory they are run from, so at any depth).
    "**/.cargo/config.toml",
    "**/.cargo/config",
    "**/.npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    "~/.docker/**",
    "~/.kube/**",
    "~/.aws/**",
    // Editors and IDEs that run what their startup files say.
    ".vscode/**",
    ".idea/**",
    ".exrc",
    ".nvimrc",
    ".nvim.lua",
    "~/.vimrc",
    "~/.gvimrc",
    "~/.vim/**",
    "~/.config/nvim/**",
    "~/.emacs",
    "~/.emacs.el",
    "~/.emacs.d/**",
    "~/.config/emacs/**",
    // Agents' configuration.
    ".claude/**",
    ".mcp.json",
    "~/.claude.json",
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
    home_only: bool,
}

/// The prefix that makes a glob protect existing files only.
pub const EXISTING_PREFIX: &str = "existing:";

/// The prefix that makes a glob apply relative to `$HOME` only.
pub const HOME_PREFIX: &str = "~/";

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
        let (home_only, pattern) = match pattern.strip_prefix(HOME_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        let mut glob = Self::parse_pattern(pattern).map_err(|reason| GlobError {
            glob: text.to_owned(),
            reason,
        })?;
        glob.text = text.to_owned();
        glob.existing_only = existing_only;
        glob.home_only = home_only;
        Ok(glob)
    }

    fn parse_pattern(text: &str) -> Result<Self, &'static str> {
        let error = |reason| reason;
        if text.is_empty() {
            return Err(error("it is empty"));
        }
        if text.starts_with('~') {
            return Err(error(
                "only `~/` at the very start (after `existing:`) names $HOME",
            ));
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
            home_only: false,
        })
    }

    /// Whether it protects existing files only (`existing:`).
    pub fn existing_only(&self) -> bool {
        self.existing_only
    }

    /// Whether it applies relative to `$HOME` only (`~/`).
    pub fn home_only(&self) -> bool {
        self.home_only
    }

    /// Whether it applies relative to a root: `$HOME` (`at_home`) or a
    /// writable root.
    pub fn applies_at(&self, at_home: bool) -> bool {
        at_home || !self.home_only
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

/// `*` and `?` within one name; letters match in either case (ASCII).
fn match_name(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
        Some((c, rest)) => {
            name.first().is_some_and(|n| n.eq_ignore_ascii_case(c)) && match_name(rest, &name[1..])
        }
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

    /// The first glob matching a path relative to a root (`a/b/.env`);
    /// `at_home` says whether the root is `$HOME` (where `~/` globs apply).
    pub fn matching(&self, relative: &str, at_home: bool) -> Option<&Glob> {
        let segments = segments_of(relative);
        self.globs
            .iter()
            .find(|g| g.applies_at(at_home) && g.matches(&segments))
    }

    /// The first glob that forbids *creating* this path: `existing:` globs
    /// are left out.
    pub fn forbidding_creation(&self, relative: &str, at_home: bool) -> Option<&Glob> {
        let segments = segments_of(relative);
        self.globs
            .iter()
            .find(|g| !g.existing_only && g.applies_at(at_home) && g.matches(&segments))
    }

    /// Whether a glob could match something *inside* the directory at this
    /// relative path: renaming or removing such a directory (or an ancestor)
    /// could move a protected name out from under the rule (the "structural
    /// prefix" rule).
    pub fn guards_inside(&self, relative_dir: &str, at_home: bool) -> bool {
        let segments = segments_of(relative_dir);
        self.globs
            .iter()
            .any(|g| g.applies_at(at_home) && prefix_can_match(g.segments(), &segments))
    }

    /// [`GlobSet::guards_inside`] for the globs that forbid new names only:
    /// a guard that knows which files `existing:` globs protected (the
    /// Linux guard's start-up scan) protects their directories by those
    /// files, not by the globs' shape.
    pub fn guards_inside_new_names(&self, relative_dir: &str, at_home: bool) -> bool {
        let segments = segments_of(relative_dir);
        self.globs.iter().any(|g| {
            !g.existing_only && g.applies_at(at_home) && prefix_can_match(g.segments(), &segments)
        })
    }
}

fn segments_of(relative: &str) -> Vec<&str> {
    relative
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect()
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
            ".envrc",
            "sub/.envrc",
        ] {
            assert!(
                s.matching(denied, false).is_some(),
                "{denied} should be denied"
            );
        }
        for allowed in [
            "x.txt",
            "env",
            ".git/hooks",
            "sub/.bashrc",
            ".git/HEAD",
            ".git/objects/ab/cdef",
            "src/key.rs",
            "pem",
            "notes.pem.txt",
        ] {
            assert!(
                s.matching(allowed, false).is_none(),
                "{allowed} should be allowed"
            );
        }
    }

    #[test]
    fn dependency_folders_are_exempt_from_names_anywhere_only() {
        let s = set();
        assert!(
            s.matching("node_modules/pkg/test/fixture.pem", false)
                .is_none()
        );
        assert!(
            s.matching(
                "venv/lib/python3.11/site-packages/certifi/cacert.pem",
                false
            )
            .is_none()
        );
        assert!(s.matching(".venv/x.key", false).is_none());
        assert!(
            s.matching("node_modules/x/.git/hooks/post-checkout", false)
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
        assert!(s.matching(".git/config", false).unwrap().existing_only());
        assert!(
            s.forbidding_creation(".git/config", false).is_none(),
            "git init may write a new repo's config"
        );
        assert!(s.forbidding_creation("a/.env", false).is_some());
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
            assert!(s.guards_inside(dir, false), "{dir} holds protected names");
        }
        for dir in ["src", ".git/objects", "node_modules", ".github", "bin"] {
            assert!(!s.guards_inside(dir, false), "{dir} does not");
        }
        assert!(s.guards_inside("bin", true), "~/bin is a PATH directory");
    }

    /// Issue 14 item 5: the secret names match in any case (macOS shares
    /// these globs and ignores case); so does every other name.
    #[test]
    fn names_match_in_any_case() {
        let s = set();
        for denied in [
            "X.PEM",
            "id.KEY",
            "a/Server.Pem",
            ".ENV",
            ".Env.Local",
            ".GIT/HOOKS/x",
        ] {
            assert!(s.matching(denied, false).is_some(), "{denied}");
        }
        assert!(s.matching("node_modules/X.PEM", false).is_none());
        assert!(match_name(b"*.pem", b"A.PeM"));
        assert!(!match_name(b"*.pem", b"a.pex"));
    }

    /// Issue 15 item 5: an empty hooks directory may be made (libgit2,
    /// JGit, `cargo new`), nothing inside it, in a submodule's either; and
    /// no directory can be renamed or symlinked into its place.
    #[test]
    fn a_hooks_directory_may_be_made_but_nothing_in_it() {
        let s = set();
        for dir in [".git/hooks", "a/.git/hooks", ".git/modules/sub/hooks"] {
            assert!(s.forbidding_creation(dir, false).is_none(), "{dir}");
            assert!(s.guards_inside(dir, false), "{dir} cannot be replaced");
        }
        for file in [
            ".git/hooks/pre-commit",
            ".git/modules/sub/hooks/post-checkout",
            ".git/modules/a/modules/b/hooks/pre-commit",
        ] {
            assert!(s.forbidding_creation(file, false).is_some(), "{file}");
        }
        // What git renames into place in a submodule's git directory is
        // no directory protected names live in.
        for lock in [
            ".git/modules/sub/config.lock",
            ".git/modules/sub/index.lock",
            ".git/modules/sub/config",
            ".git/modules/a/modules/b/config.lock",
            ".git/modules/sub/objects/ab",
        ] {
            assert!(!s.guards_inside_new_names(lock, false), "{lock}");
        }
        assert!(s.guards_inside_new_names(".git/modules/sub", false));
        assert!(
            s.guards_inside(".git/modules/sub/config.lock", false),
            "by the shape of `existing:` globs: what a guard without a scan must assume"
        );
    }

    /// Issue 14 item 5: what git reads as config in a repository that
    /// existed is protected, while a new repository's may be written.
    #[test]
    fn every_git_config_of_an_existing_repository_is_protected() {
        let s = set();
        for config in [
            ".git/config",
            ".git/config.worktree",
            ".git/modules/sub/config",
            ".git/modules/sub/config.worktree",
            ".git/modules/libs/a/config",
            ".git/modules/a/modules/b/config",
            ".git/worktrees/wt/config.worktree",
            "sub/.git",
        ] {
            let glob = s
                .matching(config, false)
                .unwrap_or_else(|| panic!("{config}"));
            assert!(glob.existing_only(), "{config}: {}", glob.as_str());
        }
        assert!(s.matching(".git/modules/sub/HEAD", false).is_none());
        assert!(s.matching(".git/worktrees/wt/HEAD", false).is_none());
    }

    /// Issue 14 item 5: the home's own families apply at `$HOME` only.
    #[test]
    fn home_only_globs_apply_at_home_only() {
        let s = set();
        for rel in [
            ".gitconfig",
            ".config/git/config",
            ".ssh/authorized_keys",
            ".ssh/config",
            ".ssh",
            ".local/bin/git",
            "bin/git",
            ".config/systemd/user/x.service",
            ".config/autostart/x.desktop",
            ".aws/config",
            ".kube/config",
            ".docker/config.json",
            ".vimrc",
            ".config/nvim/init.lua",
            ".emacs.d/init.el",
            ".claude.json",
            ".config/direnv/direnvrc",
        ] {
            assert!(s.forbidding_creation(rel, true).is_some(), "~/{rel}");
        }
        for rel in ["bin/tool", ".local/bin/x", ".ssh/x", ".gitconfig"] {
            assert!(s.matching(rel, false).is_none(), "{rel} in a project");
        }
        for rel in [
            ".npmrc",
            ".cargo/config.toml",
            ".vscode/tasks.json",
            ".bash_logout",
        ] {
            assert!(s.forbidding_creation(rel, false).is_some(), "{rel}");
            assert!(s.forbidding_creation(rel, true).is_some(), "~/{rel}");
        }
        let g = Glob::parse("existing:~/x").unwrap();
        assert!(g.existing_only() && g.home_only());
        assert!(Glob::parse("~x").is_err());
        assert!(
            Glob::parse("a/~/b").is_ok(),
            "only a leading `~/` is special"
        );
    }
}
