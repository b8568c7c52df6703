//! What a command may not create, change or remove beneath its writable
//! roots, as a pure function of a canonical path: the rules the Linux
//! create-time guard applies inside a sandbox (SPEC G1) and the jail applies
//! to in-server file operations, so both refuse the same things by the same
//! names. [`scan::scan_protected_inodes`] fills in what exists at start.

mod allowlisted;
mod scan;

pub use scan::scan_protected_inodes;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::write_deny::{GlobError, GlobSet};
use serde::{Deserialize, Serialize};

/// What PID 1 is told at start (the backend passes it as an argument).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuardConfig {
    /// The dispatch policy's globs (see [`crate::write_deny`]).
    pub globs: Vec<String>,
    /// The directories globs are relative to: every writable root and `$HOME`,
    /// as paths inside the sandbox.
    pub roots: Vec<PathBuf>,
    /// `$HOME` when it is one of the roots: `~/` globs apply there alone.
    pub home: Option<PathBuf>,
    /// The home, when a writable root holds any part of it (the home, an
    /// ancestor, or a directory below it): its allowlist applies
    /// ([`crate::allowlists::home`]).
    pub allowlisted_home: Option<PathBuf>,
    /// Directories of that home shown as throwaway overlays: what is
    /// written below them stays in the sandbox.
    pub throwaway: Vec<PathBuf>,
    /// `PATH` directories inside the writable roots: nothing in them may
    /// change, and neither they nor a directory above them may be replaced.
    pub path_dirs: Vec<PathBuf>,
    /// Unix sockets not made inside the sandbox that commands may connect
    /// to, as paths inside the sandbox (the spec's `unixSockets`).
    pub unix_sockets: Vec<PathBuf>,
}

/// Why an operation is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The glob that matched, or the rule that applied.
    pub rule: String,
}

/// What the globs say about a file found by the start-up scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AtStart {
    /// An `existing:` glob protects it.
    pub existing_only: bool,
    /// It is protected at all: its identity is kept, so a hard link to it
    /// is refused too.
    pub protected: bool,
}

/// The compiled rules.
#[derive(Debug, Clone)]
pub struct Rules {
    globs: GlobSet,
    /// Longest first, so the nearest root decides.
    roots: Vec<PathBuf>,
    /// `$HOME`, when it is a root.
    home: Option<PathBuf>,
    /// `(st_dev, st_ino)` of files that matched a glob at start: another
    /// name for one (a hard link) is as protected as the name itself.
    inodes: HashSet<(u64, u64)>,
    /// Files an `existing:` glob matched at start: only these are protected
    /// by such globs (a repository `git init` makes here is the command's).
    existing: HashSet<PathBuf>,
    /// Directories strictly between a root and a file in `existing`:
    /// moving one away would free the file's path for a look-alike, and
    /// moving a prepared tree into its place would fill it (`mv proj old &&
    /// mv evil proj`). So they are as structural as a `.git` directory.
    existing_dirs: HashSet<PathBuf>,
    /// The hooks directories of git directories seen at start, at any depth
    /// below a `.git` (a submodule's whose name holds `/`, or nested
    /// deeper than the globs reach, included): nothing may be made in them.
    hooks_dirs: HashSet<PathBuf>,
    /// Worktrees of the repositories seen at start (a directory holding a
    /// `.git`): no new repository may appear strictly inside one. Its git
    /// directory would be the command's, and the host's next `git status`
    /// in the outer repository runs it once the index names it a submodule
    /// (the index stays writable: `git add` needs it) — its `config` can
    /// hold `core.fsmonitor`.
    repositories: HashSet<PathBuf>,
    /// Whether the start-up scan saw everything; if not, every existing file
    /// an `existing:` glob matches is protected (fail closed).
    scan_complete: bool,
    /// The allowlists ([`crate::allowlists`]) and what the scan found for
    /// them.
    allowlisted: allowlisted::Allowlisted,
    /// Unix sockets not made inside that commands may connect to.
    unix_sockets: Vec<PathBuf>,
}

impl Rules {
    /// Compiles the config; a bad glob is an error.
    pub fn new(config: &GuardConfig) -> Result<Self, GlobError> {
        let globs = GlobSet::parse(&config.globs)?;
        let mut roots: Vec<PathBuf> = config
            .roots
            .iter()
            .filter(|r| r.is_absolute())
            .cloned()
            .collect();
        let home = config.home.clone().filter(|h| h.is_absolute());
        roots.extend(home.clone());
        roots.sort_by(|a, b| {
            (std::cmp::Reverse(a.as_os_str().len()), a)
                .cmp(&(std::cmp::Reverse(b.as_os_str().len()), b))
        });
        roots.dedup();
        let allowlisted = allowlisted::Allowlisted::new(config);
        Ok(Self {
            globs,
            roots,
            home,
            inodes: HashSet::new(),
            existing: HashSet::new(),
            existing_dirs: HashSet::new(),
            hooks_dirs: HashSet::new(),
            repositories: HashSet::new(),
            scan_complete: false,
            allowlisted,
            unix_sockets: config.unix_sockets.clone(),
        })
    }

    /// Whether there is anything to guard.
    pub fn is_active(&self) -> bool {
        !self.globs.is_empty() && !self.roots.is_empty()
    }

    /// Whether a unix socket not made inside the sandbox, at the canonical
    /// path `socket` inside it, may be connected to (`unixSockets`).
    pub fn allows_socket(&self, socket: &Path) -> bool {
        self.unix_sockets.iter().any(|allowed| allowed == socket)
    }

    /// The roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Remembers the identity of a protected file found at start.
    pub fn protect_inode(&mut self, dev: u64, ino: u64) {
        self.inodes.insert((dev, ino));
    }

    /// Records a file an `existing:` glob matched at start, and the
    /// directories between it and its nearest root.
    pub fn protect_existing(&mut self, path: PathBuf) {
        self.pin_directories_of(&path);
        self.existing.insert(path);
    }

    /// Records a git directory's hooks directory found at start: nothing
    /// may be made in it, and neither it nor a directory above it (below
    /// its root) may be moved.
    pub fn protect_hooks_dir(&mut self, dir: PathBuf) {
        self.pin_directories_of(&dir.join("x"));
        self.hooks_dirs.insert(dir);
    }

    /// Records the worktree of a repository found at start.
    pub fn protect_repository(&mut self, worktree: PathBuf) {
        self.repositories.insert(worktree);
    }

    /// The repository seen at start whose worktree holds `path` strictly
    /// inside it.
    fn repository_around<'p>(&self, path: &'p Path) -> Option<&'p Path> {
        path.ancestors()
            .skip(1)
            .find(|a| self.repositories.contains(*a))
    }

    /// Whether moving the directory at `from` to `to` (canonical) brings a
    /// tree into an existing repository from outside it: the tree may hold
    /// a `.git` (a repository made next door, then moved in), and judging
    /// its contents would race with the command, so the move is refused
    /// whole. Moves within a repository, and of files, are not.
    pub fn check_move_into_repository(&self, from: &Path, to: &Path) -> Option<Refusal> {
        let repository = self.repository_around(to)?;
        (!from.starts_with(repository)).then(|| Refusal {
            rule: format!(
                "no directory may be moved into the existing repository {} from outside it \
                 (it could carry a repository of the command's); copy it instead",
                repository.display()
            ),
        })
    }

    fn pin_directories_of(&mut self, path: &Path) {
        if let Some(root) = self.roots.iter().find(|r| path.starts_with(r)) {
            for dir in path
                .ancestors()
                .skip(1)
                .take_while(|a| *a != root.as_path())
            {
                self.existing_dirs.insert(dir.to_path_buf());
            }
        }
    }

    /// Marks the start-up scan as complete.
    pub fn scan_completed(&mut self) {
        self.scan_complete = true;
    }

    /// Whether `path` matches an `existing:` glob (at any root).
    pub fn matches_existing_only(&self, path: &Path) -> bool {
        self.relatives(path).any(|(rel, home)| {
            !rel.as_os_str().is_empty()
                && self
                    .globs
                    .matching(rel, home)
                    .is_some_and(|g| g.existing_only())
        })
    }

    /// What the start-up scan needs to know of an existing file, from one
    /// match of the globs per root that holds it: whether an `existing:`
    /// glob protects it ([`Rules::matches_existing_only`]), and whether it
    /// is protected at all — an `existing:` glob, or creating it would be
    /// refused ([`Rules::check_create`]) — so its identity is kept.
    /// `scratch` is reused from file to file.
    pub fn judge_at_start(&self, path: &Path, scratch: &mut Vec<usize>) -> AtStart {
        let mut at_start = AtStart::default();
        let mut creation_refused = false;
        for (rel, home) in self.relatives(path) {
            if rel.as_os_str().is_empty() {
                continue;
            }
            let verdict = self.globs.judge(rel, home, scratch);
            at_start.existing_only |= verdict.first.is_some_and(|g| g.existing_only());
            creation_refused |= verdict.forbidding_creation.is_some();
        }
        // A file of a git directory the allowlist keeps is kept by identity
        // too; the home's kept files are many, and judged by path alone.
        at_start.protected = at_start.existing_only
            || creation_refused
            || self.check_create_beyond_globs(path).is_some()
            || self.git_refusal(path, false).is_some();
        at_start
    }

    /// Whether `(dev, ino)` is a protected file's.
    pub fn is_protected_inode(&self, dev: u64, ino: u64) -> bool {
        self.inodes.contains(&(dev, ino))
    }

    /// How many inodes are protected.
    pub fn protected_inodes(&self) -> usize {
        self.inodes.len()
    }

    /// The path relative to every root that holds it, nearest first, and
    /// whether that root is `$HOME`. Borrowed: the globs match its bytes.
    fn relatives<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = (&'a Path, bool)> + 'a {
        self.roots.iter().filter_map(move |root| {
            let rel = relative_to(path, root)?;
            let home = self.home.as_deref() == Some(root.as_path());
            Some((rel, home))
        })
    }

    /// Whether any glob matches `path` at all: when none does, nothing
    /// about it needs looking up.
    pub fn could_refuse(&self, path: &Path) -> bool {
        self.relatives(path).any(|(rel, home)| {
            !rel.as_os_str().is_empty() && self.globs.matching(rel, home).is_some()
        }) || path.parent().is_some_and(|d| self.hooks_dirs.contains(d))
            || (path.file_name().is_some_and(|n| n == ".git")
                && path
                    .parent()
                    .is_some_and(|d| self.repository_around(d).is_some()))
            || self.allowlisted_could_refuse(path)
    }

    /// Whether changing or removing the existing file at `path` (canonical,
    /// absolute) is refused. `existing:` globs refuse only files that were
    /// there at start.
    pub fn check_name(&self, path: &Path) -> Option<Refusal> {
        if let Some(refusal) = self
            .check_create(path)
            .or_else(|| self.unscanned_git_refusal(path))
        {
            return Some(refusal);
        }
        let protected = !self.scan_complete || self.existing.contains(path);
        self.relatives(path).find_map(|(rel, home)| {
            let glob = self
                .globs
                .matching(rel, home)
                .filter(|g| g.existing_only())?;
            (protected && !rel.as_os_str().is_empty()).then(|| Refusal {
                rule: glob.as_str().to_owned(),
            })
        })
    }

    /// Whether creating a new name at `path` is refused. Globs that protect
    /// existing files only are left out, except at the very path of a file
    /// they protected at start: making it again (after moving it away) is
    /// changing it.
    pub fn check_create(&self, path: &Path) -> Option<Refusal> {
        self.glob_forbidding_creation(path)
            .or_else(|| self.check_create_beyond_globs(path))
            .or_else(|| self.check_allowlists(path, false))
    }

    /// [`Rules::check_create`] for a directory being made (`mkdir`): in a
    /// git directory of launch, a directory an allowed name lies in may be
    /// made too (`info` for `info/refs`), and a `PATH` directory itself.
    pub fn check_mkdir(&self, path: &Path) -> Option<Refusal> {
        self.glob_forbidding_creation(path)
            .or_else(|| self.check_create_beyond_globs(path))
            .or_else(|| self.check_allowlists(path, true))
    }

    /// The first glob that forbids creating `path`, at the nearest root that
    /// has one.
    fn glob_forbidding_creation(&self, path: &Path) -> Option<Refusal> {
        self.relatives(path).find_map(|(rel, home)| {
            (!rel.as_os_str().is_empty())
                .then(|| self.globs.forbidding_creation(rel, home))
                .flatten()
                .map(|glob| Refusal {
                    rule: glob.as_str().to_owned(),
                })
        })
    }

    /// The part of [`Rules::check_create`] the globs do not decide: what
    /// the start-up scan found (a file protected at start, a hooks
    /// directory, a repository).
    /// (Each part asks first whether there is anything to look up: during
    /// the start-up scan there is not, and it asks for every file.)
    fn check_create_beyond_globs(&self, path: &Path) -> Option<Refusal> {
        (self.scan_complete && self.existing.contains(path))
            .then(|| Refusal {
                rule: format!("{} was protected at start", path.display()),
            })
            .or_else(|| {
                if self.hooks_dirs.is_empty() {
                    return None;
                }
                let dir = path.parent().filter(|d| self.hooks_dirs.contains(*d))?;
                Some(Refusal {
                    rule: format!("{} is a git hooks directory", dir.display()),
                })
            })
            .or_else(|| {
                if self.repositories.is_empty() || path.file_name().is_none_or(|n| n != ".git") {
                    return None;
                }
                let repository = self.repository_around(path.parent()?)?;
                Some(Refusal {
                    rule: format!(
                        "no new repository inside the existing repository {}: the host's git \
                         would run its git directory (a submodule's config runs code on the next \
                         `git status`); clone or initialize it on the host, or outside {0}",
                        repository.display()
                    ),
                })
            })
    }

    /// Whether the directory at `path` may hold protected names, leaving
    /// out whether `path` itself matches. `existing:` globs count by the
    /// files they protected (`existing_dirs`) once the scan is complete, by
    /// their shape before (fail closed): their shape alone would make every
    /// name below `.git/modules` one, `config.lock` included.
    fn structural(&self, path: &Path) -> Option<Refusal> {
        if let Some(refusal) = self.allowlisted_structural(path) {
            return Some(refusal);
        }
        if self.scan_complete && self.existing_dirs.contains(path) {
            return Some(Refusal {
                rule: format!("{} holds files protected at start", path.display()),
            });
        }
        self.relatives(path).find_map(|(rel, home)| {
            let guarded = if self.scan_complete {
                self.globs.guards_inside_new_names(rel, home)
            } else {
                self.globs.guards_inside(rel, home)
            };
            (!rel.as_os_str().is_empty() && guarded).then(|| Refusal {
                rule: format!("{} may hold protected names", rel.display()),
            })
        })
    }

    /// Whether a new name at `path` would be a directory protected names
    /// live in (`mv x .git`, or a symlink `.git/hooks -> elsewhere`),
    /// leaving out whether `path` itself matches. A plain `mkdir` there is
    /// fine: an empty directory holds nothing, and what is created in it
    /// later is judged by name.
    pub fn check_structure_of_new(&self, path: &Path) -> Option<Refusal> {
        self.structural(path)
    }

    /// Whether the directory at `path` may hold protected names, so that
    /// renaming it, removing it, or renaming something onto it is refused
    /// (`mv x .git` would turn `x/hooks/*` into `.git/hooks/*`).
    pub fn check_structure(&self, path: &Path) -> Option<Refusal> {
        self.check_name(path).or_else(|| self.structural(path))
    }
}

/// `path` relative to `root`, as [`Path::strip_prefix`] has it — by bytes
/// when `path` is `root`, a `/`, and segments that are neither empty nor
/// `.` (every path the start-up scan makes), which is that answer without
/// parsing components.
fn relative_to<'p>(path: &'p Path, root: &Path) -> Option<&'p Path> {
    use std::os::unix::ffi::OsStrExt;
    let root_bytes = root.as_os_str().as_bytes();
    let fast = path
        .as_os_str()
        .as_bytes()
        .strip_prefix(root_bytes)
        .and_then(|rest| {
            if root_bytes.ends_with(b"/") {
                Some(rest)
            } else {
                rest.strip_prefix(b"/")
            }
        })
        .filter(|rest| {
            rest.split(|b| *b == b'/')
                .all(|s| !s.is_empty() && s != b".")
        });
    match fast {
        Some(rest) => Some(Path::new(std::ffi::OsStr::from_bytes(rest))),
        None => path.strip_prefix(root).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_deny::DEFAULT_GLOBS;

    fn rules() -> Rules {
        Rules::new(&GuardConfig {
            globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
            roots: vec!["/work/proj".into(), "/work".into()],
            home: Some("/home/u".into()),
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn names_are_judged_against_the_nearest_root() {
        let r = rules();
        assert!(r.check_name(Path::new("/work/proj/a/.env")).is_some());
        assert!(
            r.check_name(Path::new("/work/proj/.bashrc")).is_some(),
            "top of a root"
        );
        assert!(
            r.check_name(Path::new("/home/u/.bashrc")).is_some(),
            "top of $HOME"
        );
        assert!(
            r.check_name(Path::new("/work/proj/sub/.bashrc")).is_none(),
            "not at the top"
        );
        assert!(
            r.check_name(Path::new("/elsewhere/x.pem")).is_none(),
            "outside every root"
        );
        assert!(
            r.check_name(Path::new("/work/proj/node_modules/p/cert.pem"))
                .is_none()
        );
        assert_eq!(
            r.check_name(Path::new("/work/proj/k.key")).unwrap().rule,
            "**/*.key"
        );
    }

    #[test]
    fn a_nested_root_does_not_hide_an_outer_one() {
        // /work/proj/.bashrc is the top of /work/proj, and also /work's proj/.bashrc:
        // the first root that refuses decides.
        let r = rules();
        assert!(r.check_name(Path::new("/work/.bashrc")).is_some());
    }

    #[test]
    fn structure_protects_the_directories_protected_names_live_in() {
        let r = rules();
        assert!(r.check_structure(Path::new("/work/proj/.git")).is_some());
        assert!(
            r.check_structure(Path::new("/work/proj/.git/hooks"))
                .is_some()
        );
        assert!(r.check_structure(Path::new("/work/proj/src")).is_none());
        assert!(
            r.check_structure(Path::new("/work/proj")).is_none(),
            "a root itself"
        );
    }

    #[test]
    fn a_new_repositorys_config_may_be_created_but_not_an_existing_one_changed() {
        let mut r = rules();
        let old = Path::new("/work/proj/.git/config");
        let new = Path::new("/work/proj/sub/.git/config");
        assert!(r.check_create(new).is_none());
        assert!(
            r.check_name(new).is_some(),
            "before the scan completes, fail closed"
        );
        r.protect_existing(old.to_path_buf());
        r.scan_completed();
        assert!(r.check_name(old).is_some(), "there at start: protected");
        assert!(
            r.check_name(new).is_none(),
            "made in the sandbox: the command's"
        );
        assert!(r.check_create(Path::new("/work/proj/.env")).is_some());
        assert!(r.check_name(Path::new("/work/proj/.env")).is_some());
    }

    /// SPEC G5: `~/` globs refuse at `$HOME` only, even when a
    /// writable root holds it.
    #[test]
    fn home_globs_apply_at_home_only() {
        let r = rules();
        for path in [
            "/home/u/bin/git",
            "/home/u/.ssh/authorized_keys",
            "/home/u/.gitconfig",
        ] {
            assert!(r.check_create(Path::new(path)).is_some(), "{path}");
        }
        for path in [
            "/work/proj/bin/tool",
            "/work/proj/.ssh/x",
            "/work/.gitconfig",
        ] {
            assert!(r.check_create(Path::new(path)).is_none(), "{path}");
        }
        let nested = Rules::new(&GuardConfig {
            globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
            roots: vec!["/".into()],
            home: Some("/home/u".into()),
            ..Default::default()
        })
        .unwrap();
        assert!(
            nested
                .check_create(Path::new("/home/u/.local/bin/git"))
                .is_some()
        );
        assert!(nested.check_create(Path::new("/srv/bin/git")).is_none());
    }

    /// SPEC G4, G5: the empty hooks directory may be made, nothing in
    /// it, and nothing may take its place but a directory.
    #[test]
    fn an_empty_hooks_directory_may_be_made() {
        let r = rules();
        let hooks = Path::new("/work/proj/demo/.git/hooks");
        assert!(r.check_create(hooks).is_none(), "mkdir");
        assert!(
            r.check_structure_of_new(hooks).is_some(),
            "rename or symlink"
        );
        assert!(
            r.check_create(Path::new("/work/proj/demo/.git/hooks/pre-commit"))
                .is_some()
        );
        assert!(
            r.check_structure_of_new(Path::new("/work/proj/demo/.git"))
                .is_some(),
            "a `.git` symlink"
        );
    }

    /// A file protected at start cannot be replaced by moving things: its
    /// directories cannot be moved, nor its path made again; while git's
    /// lock files beside it stay ordinary names.
    #[test]
    fn what_was_protected_at_start_cannot_be_swapped_out() {
        let mut r = rules();
        let config = Path::new("/work/proj/repo/.git/modules/libs/a/config");
        r.protect_existing(config.to_path_buf());
        r.scan_completed();
        for dir in [
            "/work/proj/repo",
            "/work/proj/repo/.git",
            "/work/proj/repo/.git/modules/libs",
            "/work/proj/repo/.git/modules/libs/a",
        ] {
            assert!(r.check_structure(Path::new(dir)).is_some(), "{dir}");
            assert!(r.check_structure_of_new(Path::new(dir)).is_some(), "{dir}");
        }
        assert!(r.check_create(config).is_some(), "made again");
        assert!(r.check_name(config).is_some());
        for lock in [
            "/work/proj/repo/.git/modules/libs/a/config.lock",
            "/work/proj/repo/.git/modules/sub/config.lock",
            "/work/proj/repo/.git/modules/sub/config",
            "/work/proj/other",
        ] {
            assert!(r.check_structure(Path::new(lock)).is_none(), "{lock}");
            assert!(
                r.check_structure_of_new(Path::new(lock)).is_none(),
                "{lock}"
            );
        }
    }

    /// A hooks directory the scan found (a submodule named `libs/a`,
    /// beyond the globs' reach) takes no new names and cannot be moved.
    #[test]
    fn a_hooks_directory_seen_at_start_takes_nothing() {
        let mut r = rules();
        let hooks = Path::new("/work/proj/repo/.git/modules/libs/a/hooks");
        let hook = hooks.join("post-checkout");
        assert!(r.check_create(&hook).is_none(), "beyond the globs");
        r.protect_hooks_dir(hooks.to_path_buf());
        r.scan_completed();
        assert!(r.could_refuse(&hook), "the open path asks");
        assert!(r.check_create(&hook).is_some());
        assert!(r.check_name(&hooks.join("pre-commit.sample")).is_some());
        assert!(r.check_structure(hooks).is_some());
        assert!(
            r.check_structure(Path::new("/work/proj/repo/.git/modules/libs/a"))
                .is_some()
        );
        assert!(
            r.check_create(Path::new("/work/proj/repo/.git/modules/libs/a/config.lock"))
                .is_none()
        );
    }

    /// SPEC G5: no repository (a `.git` directory or gitdir file)
    /// appears inside one that existed at start, and no directory moves in
    /// from outside it; outside it, and inside its own `.git`, nothing
    /// changes.
    #[test]
    fn no_new_repository_inside_an_existing_one() {
        let mut rules = rules();
        rules.protect_repository("/w/proj".into());
        let refused = |p: &str| rules.check_create(Path::new(p)).is_some();
        assert!(refused("/w/proj/sub/.git"));
        assert!(refused("/w/proj/a/b/.git"));
        assert!(!refused("/w/other/.git"));
        assert!(!refused("/w/proj/sub/.gitignore"));
        let moved = |from: &str, to: &str| {
            rules
                .check_move_into_repository(Path::new(from), Path::new(to))
                .is_some()
        };
        assert!(moved("/w/evil", "/w/proj/sub"));
        assert!(!moved("/w/proj/a", "/w/proj/b"));
        assert!(!moved("/w/proj/a", "/w/elsewhere"));
    }

    #[test]
    fn bad_globs_and_inactive_configs() {
        assert!(
            Rules::new(&GuardConfig {
                globs: vec!["/abs".into()],
                roots: vec![],
                home: None,
                ..Default::default()
            })
            .is_err()
        );
        let empty = Rules::new(&GuardConfig::default()).unwrap();
        assert!(!empty.is_active());
    }

    /// The byte-wise shortcut gives what `Path::strip_prefix` gives, on
    /// the paths the scan makes and on the ones it leaves to it.
    #[test]
    fn relative_paths_by_bytes_are_strip_prefix() {
        for (path, root) in [
            ("/work/proj/a/.env", "/work/proj"),
            ("/work/proj", "/work/proj"),
            ("/work/proj/", "/work/proj"),
            ("/work/projx/a", "/work/proj"),
            ("/work/pro/j", "/work/proj"),
            ("/work/proj//a", "/work/proj"),
            ("/work/proj/./a", "/work/proj"),
            ("/work/proj/a/", "/work/proj"),
            ("/work/proj/a", "/work/proj/"),
            ("/work/proj/a", "/work/./proj"),
            ("/a/b", "/"),
            ("/", "/"),
            ("/elsewhere", "/work"),
        ] {
            assert_eq!(
                relative_to(Path::new(path), Path::new(root)),
                Path::new(path).strip_prefix(root).ok(),
                "{path} from {root}"
            );
        }
    }
}
