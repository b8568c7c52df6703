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
//! A [`GlobSet`] needs no compiling: each glob keeps the literal text all
//! its matches hold, one Aho-Corasick pass over a path finds the globs
//! whose text it holds (most paths hold none), and only those are matched,
//! segment by segment, in time linear in the glob times the path. So a
//! sandbox's start pays microseconds for its set, not the millisecond or
//! two a regex compilation of ~70 globs took, and the Linux guard's
//! start-up scan still judges each of up to 200,000 files in one pass
//! ([`GlobSet::judge`]).
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

/// Directories inside which "a name anywhere" globs do not apply.
pub const DEPENDENCY_DIRS: &[&str] = &["node_modules", "site-packages", "dist-packages", ".venv"];

/// The default globs (docs/design.md §8): secrets a command must not create,
/// and files that would run code outside the sandbox later (SPEC G5). The
/// families, and which are left writable on purpose, are inventoried in
/// docs/threat-model.md §4; each has a black-box test in
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
    // Agents' configuration: at a workdir's top, what starts programs (MCP
    // server lists, hooks, notify and lint/test commands, tasks).
    ".claude/**",
    ".mcp.json",
    "~/.claude.json",
    ".codex/**",
    ".gemini/**",
    ".cursor/**",
    ".continue/**",
    ".roo/**",
    ".kilocode/**",
    ".amazonq/**",
    ".zed/**",
    ".aider.conf.yml",
    "opencode.json",
    ".opencode/**",
];

/// The default globs that name secrets (a credential written to a file):
/// a conversation's clone leaves files matching those of the dispatch
/// policy out unless its workspace lists them (SPEC H1).
pub const SECRET_GLOBS: &[&str] = &["**/.env", "**/.env.*", "**/*.pem", "**/*.key"];

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
        let path: Vec<&[u8]> = relative.iter().map(|s| s.as_bytes()).collect();
        !path.is_empty()
            && segments_match(&self.segments, &path)
            && !(self.is_name_anywhere() && in_dependency_dir(&path))
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

/// Checks that every glob is one of the language (what [`GlobSet::parse`]
/// checks, without building the set).
pub fn check_globs<S: AsRef<str>>(globs: &[S]) -> Result<(), GlobError> {
    globs
        .iter()
        .try_for_each(|g| Glob::parse(g.as_ref()).map(drop))
}

/// A set of globs, matched against a path all at once: the prefilter
/// finds the globs whose literal text the path holds, and only those are
/// tried (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct GlobSet {
    globs: Vec<Glob>,
    /// Which globs can match a whole path.
    whole: Prefilter,
    /// Which globs can match something *inside* a directory (their proper
    /// prefixes: the structural-prefix rule, [`GlobSet::guards_inside`]).
    inside: Prefilter,
}

impl PartialEq for GlobSet {
    fn eq(&self, other: &Self) -> bool {
        self.globs == other.globs
    }
}

impl Eq for GlobSet {}

/// The globs a path may match, found from the literal text each one's
/// matches all hold (ASCII case aside).
#[derive(Debug, Clone, Default)]
struct Prefilter {
    /// Every such text, one pattern per glob that has one; `None` when no
    /// glob has, or the automaton could not be built (then every glob is
    /// tried: slower, never wrong).
    texts: Option<aho_corasick::AhoCorasick>,
    /// The glob of each pattern of `texts`.
    owner: Vec<usize>,
    /// The globs tried on every path: those without such a text.
    always: Vec<usize>,
}

impl Prefilter {
    /// From each glob's text: `Some(text)` (tried when a path holds it),
    /// `Some(None)` (always tried), `None` (never).
    fn build(texts: impl Iterator<Item = Option<Option<String>>>) -> Self {
        let mut patterns = Vec::new();
        let mut owner = Vec::new();
        let mut always = Vec::new();
        for (i, text) in texts.enumerate() {
            match text {
                Some(Some(text)) => {
                    patterns.push(text);
                    owner.push(i);
                }
                Some(None) => always.push(i),
                None => {}
            }
        }
        // The contiguous NFA: built in microseconds (the DFA that the
        // builder picks for a few dozen patterns took most of a set's
        // build), and as fast on paths this short.
        let texts = (!patterns.is_empty())
            .then(|| {
                aho_corasick::AhoCorasick::builder()
                    .ascii_case_insensitive(true)
                    .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
                    .build(&patterns)
                    .ok()
            })
            .flatten();
        if texts.is_none() {
            always.append(&mut owner);
            always.sort_unstable();
        }
        Self {
            texts,
            owner,
            always,
        }
    }

    /// The globs `path` may match, ascending, into `out` (cleared first).
    fn candidates(&self, path: &[u8], out: &mut Vec<usize>) {
        out.clear();
        out.extend_from_slice(&self.always);
        if let Some(texts) = &self.texts {
            out.extend(
                texts
                    .find_overlapping_iter(path)
                    .map(|m| self.owner[m.pattern().as_usize()]),
            );
            out.sort_unstable();
            out.dedup();
        }
    }
}

impl GlobSet {
    /// Parses every glob; the first bad one is the error.
    pub fn parse<S: AsRef<str>>(globs: &[S]) -> Result<Self, GlobError> {
        let globs: Vec<Glob> = globs
            .iter()
            .map(|g| Glob::parse(g.as_ref()))
            .collect::<Result<_, _>>()?;
        let whole = Prefilter::build(globs.iter().map(|g| Some(required_of(&g.segments))));
        let inside = Prefilter::build(globs.iter().map(|g| {
            // Every directory a glob guards holds a match of its shortest
            // counted prefix (a longer one, or the whole glob, extends it).
            let shortest = guarded_prefixes(&g.segments).next()?;
            Some(required_of(shortest))
        }));
        Ok(Self {
            globs,
            whole,
            inside,
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
        let bytes = relative.as_os_str().as_encoded_bytes();
        if bytes.is_empty() {
            return verdict;
        }
        self.whole.candidates(bytes, scratch);
        if scratch.is_empty() {
            return verdict;
        }
        let path: Vec<&[u8]> = bytes.split(|b| *b == b'/').collect();
        // Computed once, and only when a "name anywhere" glob matched.
        let mut exempt = None;
        // The candidates ascend, so the globs come in order.
        for glob in scratch.iter().map(|&i| &self.globs[i]) {
            if !glob.applies_at(at_home) || !segments_match(&glob.segments, &path) {
                continue;
            }
            if glob.is_name_anywhere() && *exempt.get_or_insert_with(|| in_dependency_dir(&path)) {
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
        let bytes = relative.as_os_str().as_encoded_bytes();
        let mut candidates = Vec::new();
        self.inside.candidates(bytes, &mut candidates);
        if candidates.is_empty() {
            return false;
        }
        let path: Vec<&[u8]> = bytes.split(|b| *b == b'/').collect();
        candidates.iter().map(|&i| &self.globs[i]).any(|g| {
            counts(g) && guarded_prefixes(&g.segments).any(|prefix| segments_match(prefix, &path))
        })
    }
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

/// Whether a glob's segments match a path's: a name pattern matches one
/// segment, `**` any run of them (none too: `**/.env` is `.env`, and
/// `.claude/**` is `.claude` itself).
fn segments_match(glob: &[Segment], path: &[&[u8]]) -> bool {
    wildcard_match(
        glob,
        path,
        |s| *s == Segment::AnyDepth,
        |s, segment| matches!(s, Segment::Name(p) if name_matches(p.as_bytes(), segment)),
    )
}

/// Whether a name pattern matches a name, by bytes: `*` any run within the
/// name, `?` one byte, anything else itself, ASCII letters in either case.
fn name_matches(pattern: &[u8], name: &[u8]) -> bool {
    wildcard_match(
        pattern,
        name,
        |c| *c == b'*',
        |c, n| *c == b'?' || c.eq_ignore_ascii_case(n),
    )
}

/// The classic wildcard match, for both levels above: a star takes any run
/// of items, every other pattern item exactly one. One way back — to just
/// after the last star, which then takes one item more — is exact for
/// such patterns, and takes time linear in the pattern times the subject,
/// whatever a path (a command's to choose) or a glob holds; trying every
/// split at every star would be exponential.
fn wildcard_match<P, S>(
    pattern: &[P],
    subject: &[S],
    is_star: impl Fn(&P) -> bool,
    matches_one: impl Fn(&P, &S) -> bool,
) -> bool {
    let (mut i, mut j) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while j < subject.len() {
        match pattern.get(i) {
            Some(p) if is_star(p) => {
                back = Some((i + 1, j));
                i += 1;
            }
            Some(p) if matches_one(p, &subject[j]) => {
                i += 1;
                j += 1;
            }
            _ => match back {
                Some((after, from)) => {
                    i = after;
                    j = from + 1;
                    back = Some((after, from + 1));
                }
                None => return false,
            },
        }
    }
    pattern[i..].iter().all(is_star)
}

/// What a directory must match when a glob could match something inside
/// it, shortest first: the glob's proper prefixes, and the glob itself when
/// it ends in `**` (which goes on below any match). A prefix of `**` alone
/// is left out: a leading `**` may stand for the directories above, but
/// the directory itself must be one the rest of the glob names (moving
/// `src` moves `src/.git/hooks` to a place `**/.git/hooks/*` covers just the
/// same, while moving `.git` does not). So "a name anywhere" (`**/*.pem`)
/// guards no directory: moving one moves such names to places the glob
/// matches just the same.
fn guarded_prefixes(segments: &[Segment]) -> impl Iterator<Item = &[Segment]> {
    let first = if segments.first() == Some(&Segment::AnyDepth) {
        2
    } else {
        1
    };
    let whole = (segments.last() == Some(&Segment::AnyDepth)).then_some(segments);
    (first..segments.len())
        .map(move |k| &segments[..k])
        .chain(whole)
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

/// Whether a directory of the path (its segments, the last one left out)
/// is a dependency folder.
fn in_dependency_dir(path: &[&[u8]]) -> bool {
    let dirs = &path[..path.len().saturating_sub(1)];
    dirs.iter()
        .any(|d| DEPENDENCY_DIRS.iter().any(|dep| dep.as_bytes() == *d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The language's reference matcher, written as its definition reads
    /// (every split at every `**` tried: exponential, fine for tests): the
    /// oracle the set's linear matcher is checked against.
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

    /// A name pattern against one name, by the set's matcher, checked
    /// against the reference one.
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

    /// SPEC G5: the secret names match in any case (macOS shares
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

    /// SPEC G4, G5: an empty hooks directory may be made (libgit2,
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

    /// SPEC G5: what git reads as config in a repository that
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

    /// SPEC G5: the home's own families apply at `$HOME` only.
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

    /// The set decides every question exactly as the reference matcher
    /// does, for the defaults and for globs using the rest of the language,
    /// on every generated path, at a writable root and at `$HOME`.
    #[test]
    fn the_set_decides_as_the_reference_matcher_does() {
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
            assert_eq!(set.whole.always.is_empty(), prefiltered, "{globs:?}");
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
        assert!(GlobSet::default().whole.texts.is_none());
        let set = GlobSet::parse(&["?", "**/.env"]).unwrap();
        assert_eq!(
            set.whole.always,
            [0],
            "`?` holds no text: tried on every path"
        );
        assert!(set.whole.texts.is_some());
        assert!(set.matching("x", false).is_some() && set.matching("a/.env", false).is_some());
    }

    /// A command chooses its paths: however many `**` a glob has and however
    /// deep the path, one match is a pass over both, not a search of every
    /// way to split the path (which for these would not end in a lifetime).
    #[test]
    fn many_any_depths_against_a_deep_path_end_at_once() {
        let glob = "**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/a/**/b";
        let set = GlobSet::parse(&[glob, "**/a*a*a*a*a*a*a*a*a*b"]).unwrap();
        let deep = vec!["a"; 60].join("/");
        assert!(set.matching(&deep, false).is_none());
        assert!(set.matching(format!("{deep}/b"), false).is_some());
        let long_name = "a".repeat(4000);
        assert!(set.matching(&long_name, false).is_none());
        assert!(set.matching(format!("{long_name}b"), false).is_some());
        assert!(
            set.guards_inside(&deep, false),
            "its prefix `**/a` names it"
        );
    }
}
