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
//! A path is looked at by its bytes, segment by segment (empty and `.`
//! segments are not segments): a name that is not UTF-8 matches as the
//! kernel names it, `?` being one byte.
//!
//! The language is a subset of `globset`'s, and a [`GlobSet`] is compiled
//! into one `globset` matcher (ripgrep's), so a path is matched against
//! every glob at once: the Linux guard's start-up scan judges each of up
//! to 200,000 files with one match ([`GlobSet::judge`]).
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

use std::borrow::Cow;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

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
#[derive(Debug, Clone)]
pub struct Glob {
    text: String,
    segments: Vec<Segment>,
    existing_only: bool,
    home_only: bool,
    /// Its matcher alone, compiled on the first [`Glob::matches`]: a
    /// [`GlobSet`] compiles its globs together, so a glob in a set never
    /// needs one.
    alone: OnceLock<Option<globset::GlobSet>>,
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.text,
            &self.segments,
            self.existing_only,
            self.home_only,
        ) == (
            &other.text,
            &other.segments,
            other.existing_only,
            other.home_only,
        )
    }
}

impl Eq for Glob {}

/// The longest glob, in bytes (`PATH_MAX`) and in segments.
const MAX_GLOB_LEN: usize = 4096;
const MAX_GLOB_SEGMENTS: usize = 64;

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
        let segments = parse_segments(pattern).map_err(|reason| GlobError {
            glob: text.to_owned(),
            reason,
        })?;
        Ok(Self {
            text: text.to_owned(),
            segments,
            existing_only,
            home_only,
            alone: OnceLock::new(),
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
    /// segments (dependency-folder exemption included). Compiles the glob
    /// alone the first time; [`GlobSet`] matches all its globs at once.
    pub fn matches(&self, relative: &[&str]) -> bool {
        if relative.is_empty() {
            return false;
        }
        if self.is_name_anywhere()
            && relative[..relative.len() - 1]
                .iter()
                .any(|d| DEPENDENCY_DIRS.contains(d))
        {
            return false;
        }
        let alone = self.alone.get_or_init(|| {
            Compiled::build(std::slice::from_ref(self), whole_patterns)
                .ok()
                .map(|c| c.set)
        });
        alone
            .as_ref()
            .is_some_and(|set| set.is_match(relative.join("/")))
    }
}

fn parse_segments(text: &str) -> Result<Vec<Segment>, &'static str> {
    if text.is_empty() {
        return Err("it is empty");
    }
    // A path no filesystem holds; and the structural-prefix rule compiles
    // every prefix of a glob, so its size grows with the square of this.
    if text.len() > MAX_GLOB_LEN || text.split('/').count() > MAX_GLOB_SEGMENTS {
        return Err("it is longer than 4096 bytes or 64 segments");
    }
    if text.starts_with('~') {
        return Err("only `~/` at the very start (after `existing:`) names $HOME");
    }
    if text.starts_with('/') {
        return Err("globs are relative to each root; drop the leading `/`");
    }
    if text.contains(['[', ']', '{', '}', '\\']) {
        return Err("classes, braces and escapes are not part of the glob language");
    }
    let mut segments = Vec::new();
    for part in text.split('/') {
        match part {
            "" => return Err("it has an empty segment (`//` or a trailing `/`)"),
            "." | ".." => return Err("`.` and `..` segments are not allowed"),
            "**" => {
                if segments.last() != Some(&Segment::AnyDepth) {
                    segments.push(Segment::AnyDepth);
                }
            }
            p if p.contains("**") => return Err("`**` must be a whole segment"),
            p => segments.push(Segment::Name(p.to_owned())),
        }
    }
    if segments == [Segment::AnyDepth] {
        return Err("`**` alone would deny every write");
    }
    Ok(segments)
}

/// What the globs say about one path, from one match of the whole set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verdict<'s> {
    /// The first glob matching it, `existing:` ones included (what
    /// [`GlobSet::matching`] answers).
    pub first: Option<&'s Glob>,
    /// The first glob that forbids creating it (what
    /// [`GlobSet::forbidding_creation`] answers).
    pub forbidding_creation: Option<&'s Glob>,
}

/// Checks that every glob is one of the language, without compiling them
/// into a set (that costs a millisecond or two, which a server checking a
/// spec need not pay: the sandbox that matches them compiles them, and a
/// set too large to compile fails its launch, saying so).
pub fn check_globs<S: AsRef<str>>(globs: &[S]) -> Result<(), GlobError> {
    globs
        .iter()
        .try_for_each(|g| Glob::parse(g.as_ref()).map(drop))
}

/// A set of globs, compiled into one `globset` matcher: a path is matched
/// against all of them at once.
#[derive(Debug, Clone, Default)]
pub struct GlobSet {
    globs: Vec<Glob>,
    /// Text every match of each glob holds (ASCII case aside): a path that
    /// holds none of them is matched by no glob, which is most paths, found
    /// without running the matcher. `None` when some glob requires none
    /// (`*.?`), and when there are no globs.
    required: Option<aho_corasick::AhoCorasick>,
    /// Every glob, whole.
    whole: Compiled,
    /// Every glob's proper prefixes: what the structural-prefix rule asks,
    /// far less often than the scan asks the whole globs, so compiled on
    /// first use. `None` if that failed: every directory is then guarded
    /// (fail closed).
    inside: OnceLock<Option<Compiled>>,
}

impl PartialEq for GlobSet {
    fn eq(&self, other: &Self) -> bool {
        self.globs == other.globs
    }
}

impl Eq for GlobSet {}

impl GlobSet {
    /// Parses every glob; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(globs: &[S]) -> Result<Self, GlobError> {
        let globs: Vec<Glob> = globs
            .iter()
            .map(|g| Glob::parse(g.as_ref()))
            .collect::<Result<_, _>>()?;
        // The language is a subset of globset's, so neither can fail; if
        // one did, a glob would match nothing, so it is refused here.
        let not_compiled = |failure| match failure {
            Uncompiled::Glob(i) => GlobError {
                glob: globs[i].text.clone(),
                reason: "it cannot be compiled",
            },
            Uncompiled::Set => GlobError {
                glob: globs
                    .iter()
                    .map(Glob::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
                reason: "together they are too large to compile",
            },
        };
        Ok(Self {
            required: required_text(&globs),
            whole: Compiled::build(&globs, whole_patterns).map_err(not_compiled)?,
            inside: OnceLock::new(),
            globs,
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
    pub fn matching(&self, relative: impl AsRef<Path>, at_home: bool) -> Option<&Glob> {
        self.judge(relative.as_ref(), at_home, &mut Vec::new())
            .first
    }

    /// The first glob that forbids *creating* this path: `existing:` globs
    /// are left out.
    pub fn forbidding_creation(&self, relative: impl AsRef<Path>, at_home: bool) -> Option<&Glob> {
        self.judge(relative.as_ref(), at_home, &mut Vec::new())
            .forbidding_creation
    }

    /// [`GlobSet::matching`] and [`GlobSet::forbidding_creation`] from one
    /// match. `scratch` holds the matches; a caller judging many paths
    /// passes the same one, and a path no glob matches allocates nothing.
    pub fn judge<'s>(
        &'s self,
        relative: &Path,
        at_home: bool,
        scratch: &mut Vec<usize>,
    ) -> Verdict<'s> {
        let mut verdict = Verdict::default();
        let relative = normalized(relative);
        if relative.as_os_str().is_empty()
            || self
                .required
                .as_ref()
                .is_some_and(|r| !r.is_match(relative.as_os_str().as_encoded_bytes()))
        {
            return verdict;
        }
        self.whole.set.matches_into(&*relative, scratch);
        // Computed once, and only when a "name anywhere" glob matched.
        let mut exempt = None;
        // Pattern numbers ascend, so the globs come in order.
        for glob in scratch.iter().map(|&p| &self.globs[self.whole.owner[p]]) {
            if !glob.applies_at(at_home)
                || (glob.is_name_anywhere()
                    && *exempt.get_or_insert_with(|| in_dependency_dir(&relative)))
            {
                continue;
            }
            verdict.first.get_or_insert(glob);
            if !glob.existing_only {
                verdict.forbidding_creation = Some(glob);
                break;
            }
        }
        verdict
    }

    /// Whether a glob could match something *inside* the directory at this
    /// relative path: renaming or removing such a directory (or an ancestor)
    /// could move a protected name out from under the rule (the "structural
    /// prefix" rule).
    pub fn guards_inside(&self, relative_dir: impl AsRef<Path>, at_home: bool) -> bool {
        self.guards(relative_dir.as_ref(), at_home, true)
    }

    /// [`GlobSet::guards_inside`] for the globs that forbid new names only:
    /// a guard that knows which files `existing:` globs protected (the
    /// Linux guard's start-up scan) protects their directories by those
    /// files, not by the globs' shape.
    pub fn guards_inside_new_names(&self, relative_dir: impl AsRef<Path>, at_home: bool) -> bool {
        self.guards(relative_dir.as_ref(), at_home, false)
    }

    fn guards(&self, relative_dir: &Path, at_home: bool, existing_too: bool) -> bool {
        let counts = |g: &Glob| g.applies_at(at_home) && (existing_too || !g.existing_only);
        let relative = normalized(relative_dir);
        if relative.as_os_str().is_empty() {
            // A root itself holds what every glob anchored at it names;
            // one that starts with `**` names something below a directory
            // of its own.
            return self
                .globs
                .iter()
                .any(|g| counts(g) && g.segments.first() != Some(&Segment::AnyDepth));
        }
        let inside = self
            .inside
            .get_or_init(|| Compiled::build(&self.globs, prefix_patterns).ok());
        let Some(inside) = inside else {
            return true;
        };
        let mut scratch = Vec::new();
        inside.set.matches_into(&*relative, &mut scratch);
        scratch
            .iter()
            .any(|&p| counts(&self.globs[inside.owner[p]]))
    }
}

/// The prefilter of a set: for each glob, the longest text all its matches
/// hold.
fn required_text(globs: &[Glob]) -> Option<aho_corasick::AhoCorasick> {
    let texts: Vec<String> = globs
        .iter()
        .map(|g| required_of(&g.segments))
        .collect::<Option<_>>()?;
    if texts.is_empty() {
        return None;
    }
    aho_corasick::AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(texts)
        .ok()
}

/// The longest run of literal text every path a glob matches holds: the
/// text of its names between wildcards, with the `/` between two names
/// (next to a `**` no `/` is certain, nor anything across it). `None` when
/// there is no such text.
fn required_of(segments: &[Segment]) -> Option<String> {
    let mut longest = String::new();
    let mut run = String::new();
    let mut after_name = false;
    let mut end_run = |run: &mut String| {
        if run.len() > longest.len() {
            longest = std::mem::take(run);
        }
        run.clear();
    };
    for segment in segments {
        match segment {
            Segment::AnyDepth => {
                end_run(&mut run);
                after_name = false;
            }
            Segment::Name(pattern) => {
                if after_name {
                    run.push('/');
                }
                for c in pattern.chars() {
                    if matches!(c, '*' | '?') {
                        end_run(&mut run);
                    } else {
                        run.push(c);
                    }
                }
                after_name = true;
            }
        }
    }
    end_run(&mut run);
    (!longest.is_empty()).then_some(longest)
}

/// Globs compiled into one `globset::GlobSet`, and the glob each of its
/// patterns stands for (ascending: patterns are added glob by glob).
#[derive(Debug, Clone, Default)]
struct Compiled {
    set: globset::GlobSet,
    owner: Vec<usize>,
}

/// What could not be compiled: the glob at an index, or the whole set.
enum Uncompiled {
    Glob(usize),
    Set,
}

impl Compiled {
    fn build(globs: &[Glob], patterns: fn(&[Segment]) -> Vec<String>) -> Result<Self, Uncompiled> {
        let mut builder = globset::GlobSetBuilder::new();
        let mut owner = Vec::new();
        for (i, glob) in globs.iter().enumerate() {
            for pattern in patterns(&glob.segments) {
                builder.add(
                    globset::GlobBuilder::new(&pattern)
                        .case_insensitive(true)
                        .literal_separator(true)
                        .backslash_escape(false)
                        .build()
                        .map_err(|_| Uncompiled::Glob(i))?,
                );
                owner.push(i);
            }
        }
        Ok(Self {
            set: builder.build().map_err(|_| Uncompiled::Set)?,
            owner,
        })
    }
}

/// A glob in globset's syntax, which ours is a subset of (`*` and `?`
/// stay within a segment, `**` is a whole one, letters match in either
/// case) but for one thing: our trailing `**` also matches zero segments
/// (`.claude/**` is `.claude` too), globset's `/**` needs one more. So a
/// glob that ends in `**` is two patterns.
fn whole_patterns(segments: &[Segment]) -> Vec<String> {
    let text = |segments: &[Segment]| {
        segments
            .iter()
            .map(|s| match s {
                Segment::AnyDepth => "**",
                Segment::Name(name) => name.as_str(),
            })
            .collect::<Vec<_>>()
            .join("/")
    };
    match segments.split_last() {
        Some((Segment::AnyDepth, above)) if !above.is_empty() => {
            vec![text(above), text(segments)]
        }
        _ => vec![text(segments)],
    }
}

/// The patterns a directory matches when a glob could match something
/// inside it: the glob's proper prefixes (and the glob itself when it ends
/// in `**`, which goes on below any match). A prefix of `**` alone is left
/// out: a leading `**` may stand for the directories above, but the
/// directory itself must be one the rest of the glob names (moving `src`
/// moves `src/.git/hooks` to a place `**/.git/hooks/*` covers just the
/// same, while moving `.git` does not). So "a name anywhere" (`**/*.pem`)
/// guards no directory: moving one moves such names to places the glob
/// matches just the same.
fn prefix_patterns(segments: &[Segment]) -> Vec<String> {
    let first = if segments.first() == Some(&Segment::AnyDepth) {
        2
    } else {
        1
    };
    let mut patterns: Vec<String> = (first..segments.len())
        .flat_map(|k| whole_patterns(&segments[..k]))
        .collect();
    if segments.last() == Some(&Segment::AnyDepth) {
        patterns.extend(whole_patterns(segments));
    }
    patterns
}

/// The path with empty and `.` segments dropped (`a//b/./c/` is `a/b/c`),
/// as the globs see it; borrowed when it is clean already, as a path made
/// by stripping a root from a canonical one is.
fn normalized(relative: &Path) -> Cow<'_, Path> {
    let clean = relative
        .as_os_str()
        .as_encoded_bytes()
        .split(|b| *b == b'/')
        .all(|s| !s.is_empty() && s != b".");
    if clean {
        return Cow::Borrowed(relative);
    }
    let mut out = PathBuf::new();
    for component in relative.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => out.push(".."),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Cow::Owned(out)
}

/// Whether a directory of the (normalized) path, its last segment left
/// out, is a dependency folder.
fn in_dependency_dir(relative: &Path) -> bool {
    let bytes = relative.as_os_str().as_encoded_bytes();
    let mut segments = bytes.split(|b| *b == b'/');
    segments.next_back();
    segments.any(|d| DEPENDENCY_DIRS.iter().any(|dep| dep.as_bytes() == d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written matcher globset replaced, kept as the oracle the
    /// compiled one is checked against.
    mod old {
        use super::super::{DEPENDENCY_DIRS, Segment};

        pub fn segments_of(relative: &str) -> Vec<&str> {
            relative
                .split('/')
                .filter(|s| !s.is_empty() && *s != ".")
                .collect()
        }

        pub fn matches(glob: &[Segment], relative: &[&str]) -> bool {
            if matches!(glob, [Segment::AnyDepth, Segment::Name(_)]) {
                let dirs = &relative[..relative.len().saturating_sub(1)];
                if dirs.iter().any(|d| DEPENDENCY_DIRS.contains(d)) {
                    return false;
                }
            }
            match_segments(glob, relative)
        }

        fn match_segments(glob: &[Segment], path: &[&str]) -> bool {
            match glob.split_first() {
                None => path.is_empty(),
                Some((Segment::AnyDepth, rest)) => {
                    (0..=path.len()).any(|skip| match_segments(rest, &path[skip..]))
                }
                Some((Segment::Name(pattern), rest)) => match path.split_first() {
                    Some((name, tail)) => {
                        match_name(pattern.as_bytes(), name.as_bytes())
                            && match_segments(rest, tail)
                    }
                    None => false,
                },
            }
        }

        pub fn match_name(pattern: &[u8], name: &[u8]) -> bool {
            match pattern.split_first() {
                None => name.is_empty(),
                Some((b'*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
                Some((b'?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
                Some((c, rest)) => {
                    name.first().is_some_and(|n| n.eq_ignore_ascii_case(c))
                        && match_name(rest, &name[1..])
                }
            }
        }

        pub fn prefix_can_match(glob: &[Segment], path: &[&str]) -> bool {
            match glob {
                [Segment::AnyDepth, Segment::Name(_)] => false,
                [Segment::AnyDepth, rest @ ..] => {
                    (0..path.len()).any(|k| can_extend(rest, &path[k..]))
                }
                _ => can_extend(glob, path),
            }
        }

        fn can_extend(glob: &[Segment], path: &[&str]) -> bool {
            match glob.split_first() {
                None => false,
                Some(_) if path.is_empty() => true,
                Some((Segment::AnyDepth, rest)) => {
                    rest.is_empty() || (0..=path.len()).any(|k| can_extend(rest, &path[k..]))
                }
                Some((Segment::Name(pattern), rest)) => {
                    match_name(pattern.as_bytes(), path[0].as_bytes())
                        && can_extend(rest, &path[1..])
                }
            }
        }
    }

    /// A name pattern against one name, by the compiled matcher, checked
    /// against the hand-written one it replaced.
    fn match_name(pattern: &[u8], name: &[u8]) -> bool {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
        let new = Glob::parse(&text(pattern)).unwrap().matches(&[&text(name)]);
        assert_eq!(
            new,
            old::match_name(pattern, name),
            "{} against {}",
            text(pattern),
            text(name)
        );
        new
    }

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

    /// Globs beyond the defaults, for the parts of the language they do
    /// not use: `?`, `**` in the middle and at the end, `existing:~/`.
    const MORE_GLOBS: &[&str] = &[
        "a?c/**/x",
        "**/b/*/c",
        "x/**",
        "a/**/b/**",
        "~/**/.env",
        "existing:~/k/**",
        "src/*.rs",
        "**/a*b*c",
        "existing:**/x/**/y",
        "a/*/**",
        "**/k?y.*/*m",
    ];

    /// Globs that hold no literal text, so a set with one has no
    /// prefilter.
    const WILDCARDS_ONLY: &[&str] = &["?", "*.?", "*", "*/**"];

    /// Every path of one or two segments over `alphabet`, and longer ones
    /// (a fixed pseudo-random sequence: the same every run).
    fn generated_paths(alphabet: &[&str]) -> Vec<String> {
        let mut paths: Vec<String> = alphabet.iter().map(|s| (*s).to_owned()).collect();
        for a in alphabet {
            paths.extend(alphabet.iter().map(|b| format!("{a}/{b}")));
        }
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(state >> 33).unwrap() % n
        };
        for _ in 0..6000 {
            let depth = 3 + next(5);
            let segments: Vec<&str> = (0..depth).map(|_| alphabet[next(alphabet.len())]).collect();
            paths.push(segments.join("/"));
        }
        paths
    }

    /// The compiled set decides every question exactly as the hand-written
    /// matcher did, for the defaults and for globs using the rest of the
    /// language, on every generated path, at a writable root and at `$HOME`.
    #[test]
    fn the_compiled_set_decides_as_the_hand_written_matcher_did() {
        let alphabet = [
            "a",
            "b",
            "c",
            "x",
            "y",
            "k",
            "abc",
            "aXbYc",
            "src",
            "m.rs",
            ".git",
            ".GIT",
            "hooks",
            "modules",
            "worktrees",
            "config",
            "config.worktree",
            ".env",
            ".Env.prod",
            "k.PEM",
            "id.key",
            "node_modules",
            ".venv",
            ".config",
            "fish",
            ".claude",
            "bin",
            ".ssh",
            ".cargo",
            "config.toml",
            "\u{e9}.key",
        ];
        let paths = generated_paths(&alphabet);
        assert!(paths.len() > 6_000, "{}", paths.len());
        let combined: Vec<&str> = DEFAULT_GLOBS.iter().chain(MORE_GLOBS).copied().collect();
        let wild: Vec<&str> = MORE_GLOBS.iter().chain(WILDCARDS_ONLY).copied().collect();
        for (globs, prefiltered) in [
            (DEFAULT_GLOBS, true),
            (MORE_GLOBS, true),
            (&combined[..], true),
            (&wild[..], false),
        ] {
            let set = GlobSet::parse(globs).unwrap();
            assert_eq!(set.required.is_some(), prefiltered, "{globs:?}");
            let mut scratch = Vec::new();
            for path in &paths {
                let segments = old::segments_of(path);
                for at_home in [false, true] {
                    let old_first = |creating: bool| {
                        set.globs()
                            .iter()
                            .find(|g| {
                                (!creating || !g.existing_only())
                                    && g.applies_at(at_home)
                                    && old::matches(g.segments(), &segments)
                            })
                            .map(Glob::as_str)
                    };
                    let old_inside = |existing_too: bool| {
                        set.globs().iter().any(|g| {
                            (existing_too || !g.existing_only())
                                && g.applies_at(at_home)
                                && old::prefix_can_match(g.segments(), &segments)
                        })
                    };
                    let verdict = set.judge(Path::new(path), at_home, &mut scratch);
                    let why = format!("{path} (at home: {at_home}) in {globs:?}");
                    assert_eq!(verdict.first.map(Glob::as_str), old_first(false), "{why}");
                    assert_eq!(
                        verdict.forbidding_creation.map(Glob::as_str),
                        old_first(true),
                        "{why}"
                    );
                    assert_eq!(set.guards_inside(path, at_home), old_inside(true), "{why}");
                    assert_eq!(
                        set.guards_inside_new_names(path, at_home),
                        old_inside(false),
                        "{why}"
                    );
                }
            }
            for root in ["", "."] {
                for at_home in [false, true] {
                    let old_inside = set
                        .globs()
                        .iter()
                        .any(|g| g.applies_at(at_home) && old::prefix_can_match(g.segments(), &[]));
                    assert_eq!(set.guards_inside(root, at_home), old_inside, "{root:?}");
                    assert!(set.matching(root, at_home).is_none(), "{root:?}");
                }
            }
        }
    }

    /// The corners of the language, one row each: path, whether the glob
    /// matches it.
    #[test]
    fn the_corners_of_the_language() {
        for (glob, path, matched) in [
            // Case: ASCII letters in either case, on both sides.
            ("*.pem", "A.PeM", true),
            ("*.PEM", "a.pem", true),
            (".Git/Hooks/*", ".gIT/hOOKS/x", true),
            ("\u{e9}.key", "\u{c9}.key", false),
            // `*` and `?` stay within one segment; `?` is one byte.
            ("*.pem", "a/b.pem", false),
            ("a*", "a/b", false),
            ("?.key", "a.key", true),
            ("?.key", "ab.key", false),
            ("?.key", ".key", false),
            ("?.key", "\u{e9}.key", false),
            ("??.key", "\u{e9}.key", true),
            ("*", ".hidden", true),
            // `**` at the start: zero or more directories above.
            ("**/.env", ".env", true),
            ("**/.env", "a/b/.env", true),
            ("**/.env", "a.env", false),
            // in the middle: zero or more between.
            ("a/**/b", "a/b", true),
            ("a/**/b", "a/x/y/b", true),
            ("a/**/b", "ab", false),
            ("a/**/b", "a/xb", false),
            // at the end: the directory itself and everything below.
            (".claude/**", ".claude", true),
            (".claude/**", ".claude/a/b", true),
            (".claude/**", ".claudex", false),
            (".claude/**", "x/.claude", false),
            ("**/x/**", "x", true),
            ("**/x/**", "a/x/b", true),
            // A path is looked at segment by segment: empty and `.` ones
            // are not segments.
            ("**/.env", "a//.env", true),
            ("**/.env", "./.env", true),
            ("**/.env", "a/./.env", true),
            (".bashrc", ".bashrc/", true),
            (".bashrc", "/.bashrc", true),
            // Characters that are special to regexes or other globs are
            // themselves here.
            ("a+b(c)|d^$.txt", "a+b(c)|d^$.txt", true),
            ("a+b(c)|d^$.txt", "aab(c)|d^$xtxt", false),
            ("!x,y", "!x,y", true),
        ] {
            let set = GlobSet::parse(&[glob]).unwrap();
            assert_eq!(
                set.matching(path, false).is_some(),
                matched,
                "{glob} {path}"
            );
        }
        // `~/`: at `$HOME` alone; `existing:`: matched, but creation allowed.
        let set =
            GlobSet::parse(&["~/.ssh/**", "existing:~/.gitconfig", "existing:**/.git"]).unwrap();
        assert!(set.forbidding_creation(".ssh/x", true).is_some());
        assert!(set.matching(".ssh/x", false).is_none());
        assert!(set.matching(".gitconfig", true).unwrap().existing_only());
        assert!(set.forbidding_creation(".gitconfig", true).is_none());
        assert!(set.matching(".gitconfig", false).is_none());
        assert!(set.matching("a/.git", false).unwrap().existing_only());
        assert!(set.forbidding_creation("a/.git", false).is_none());
        // The first glob that matches is the answer, in the order given.
        let set = GlobSet::parse(&["existing:**/.env", "**/.env"]).unwrap();
        let verdict = set.judge(Path::new("a/.env"), false, &mut Vec::new());
        assert_eq!(verdict.first.map(Glob::as_str), Some("existing:**/.env"));
        assert_eq!(
            verdict.forbidding_creation.map(Glob::as_str),
            Some("**/.env")
        );
    }

    /// A name that is not UTF-8 is matched by its bytes, as the kernel
    /// names it: `*` and literals are unaffected, `?` is one byte.
    #[cfg(unix)]
    #[test]
    fn names_that_are_not_utf8_are_matched_by_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        let set = GlobSet::parse(&["**/*.pem", "?.key"]).unwrap();
        let path = |b: &[u8]| Path::new(std::ffi::OsStr::from_bytes(b)).to_path_buf();
        assert!(set.matching(path(b"a/\xff\xfe.pem"), false).is_some());
        assert!(set.matching(path(b"\xff.key"), false).is_some());
        assert!(set.matching(path(b"\xff\xfe.key"), false).is_none());
        assert!(
            set.matching(path(b"node_modules/\xff.pem"), false)
                .is_none()
        );
    }

    /// The prefilter's text for a glob: what every match holds.
    #[test]
    fn the_text_every_match_holds() {
        for (glob, text) in [
            ("**/.env", Some(".env")),
            ("**/*.pem", Some(".pem")),
            ("**/.git/hooks/*", Some(".git/hooks/")),
            ("**/.git/modules/*/hooks/*", Some(".git/modules/")),
            ("existing:**/.git/modules/**/config", Some(".git/modules")),
            (".config/fish/**", Some(".config/fish")),
            ("~/.ssh/**", Some(".ssh")),
            ("a/**/bcd", Some("bcd")),
            ("a*/b", Some("/b")),
            ("?", None),
            ("*/**", None),
        ] {
            let g = Glob::parse(glob).unwrap();
            assert_eq!(required_of(g.segments()).as_deref(), text, "{glob}");
        }
        assert!(GlobSet::default().required.is_none());
        assert!(
            GlobSet::parse(&["?", "**/.env"])
                .unwrap()
                .required
                .is_none()
        );
    }
}
