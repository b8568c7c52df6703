//! What the guard refuses, as a pure function of a canonical path.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sandbox_plugin_api::write_deny::{GlobError, GlobSet};
use serde::{Deserialize, Serialize};

/// What PID 1 is told at start (the backend passes it as an argument).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuardConfig {
    /// The dispatch policy's globs (see `sandbox_plugin_api::write_deny`).
    pub globs: Vec<String>,
    /// The directories globs are relative to: every writable root and `$HOME`,
    /// as paths inside the sandbox.
    pub roots: Vec<PathBuf>,
}

/// Why an operation is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The glob that matched, or the rule that applied.
    pub rule: String,
}

/// The compiled rules.
#[derive(Debug, Clone)]
pub struct Rules {
    globs: GlobSet,
    /// Longest first, so the nearest root decides.
    roots: Vec<PathBuf>,
    /// `(st_dev, st_ino)` of files that matched a glob at start: another
    /// name for one (a hard link) is as protected as the name itself.
    inodes: HashSet<(u64, u64)>,
    /// Files an `existing:` glob matched at start: only these are protected
    /// by such globs (a repository `git init` makes here is the command's).
    existing: HashSet<PathBuf>,
    /// Whether the start-up scan saw everything; if not, every existing file
    /// an `existing:` glob matches is protected (fail closed).
    scan_complete: bool,
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
        roots.sort_by_key(|r| std::cmp::Reverse(r.as_os_str().len()));
        roots.dedup();
        Ok(Self {
            globs,
            roots,
            inodes: HashSet::new(),
            existing: HashSet::new(),
            scan_complete: false,
        })
    }

    /// Whether there is anything to guard.
    pub fn is_active(&self) -> bool {
        !self.globs.is_empty() && !self.roots.is_empty()
    }

    /// The roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Remembers the identity of a protected file found at start.
    pub fn protect_inode(&mut self, dev: u64, ino: u64) {
        self.inodes.insert((dev, ino));
    }

    /// Records a file an `existing:` glob matched at start.
    pub fn protect_existing(&mut self, path: PathBuf) {
        self.existing.insert(path);
    }

    /// Marks the start-up scan as complete.
    pub fn scan_completed(&mut self) {
        self.scan_complete = true;
    }

    /// Whether `path` matches an `existing:` glob (at any root).
    pub fn matches_existing_only(&self, path: &Path) -> bool {
        self.relatives(path).any(|rel| {
            !rel.is_empty() && self.globs.matching(&rel).is_some_and(|g| g.existing_only())
        })
    }

    /// Whether `(dev, ino)` is a protected file's.
    pub fn is_protected_inode(&self, dev: u64, ino: u64) -> bool {
        self.inodes.contains(&(dev, ino))
    }

    /// How many inodes are protected.
    pub fn protected_inodes(&self) -> usize {
        self.inodes.len()
    }

    /// The path relative to every root that holds it, nearest first.
    fn relatives<'a>(&'a self, path: &'a Path) -> impl Iterator<Item = String> + 'a {
        self.roots.iter().filter_map(move |root| {
            let rel = path.strip_prefix(root).ok()?;
            Some(rel.to_string_lossy().into_owned())
        })
    }

    /// Whether any glob matches `path` at all: when none does, nothing
    /// about it needs looking up.
    pub fn could_refuse(&self, path: &Path) -> bool {
        self.relatives(path)
            .any(|rel| !rel.is_empty() && self.globs.matching(&rel).is_some())
    }

    /// Whether changing or removing the existing file at `path` (canonical,
    /// absolute) is refused. `existing:` globs refuse only files that were
    /// there at start.
    pub fn check_name(&self, path: &Path) -> Option<Refusal> {
        if let Some(refusal) = self.check_create(path) {
            return Some(refusal);
        }
        let protected = !self.scan_complete || self.existing.contains(path);
        self.relatives(path).find_map(|rel| {
            let glob = self.globs.matching(&rel).filter(|g| g.existing_only())?;
            (protected && !rel.is_empty()).then(|| Refusal {
                rule: glob.as_str().to_owned(),
            })
        })
    }

    /// Whether creating a new name at `path` is refused (globs that protect
    /// existing files only are left out).
    pub fn check_create(&self, path: &Path) -> Option<Refusal> {
        self.relatives(path).find_map(|rel| {
            (!rel.is_empty())
                .then(|| self.globs.forbidding_creation(&rel))
                .flatten()
                .map(|glob| Refusal {
                    rule: glob.as_str().to_owned(),
                })
        })
    }

    /// Whether a new name at `path` would be a directory protected names
    /// live in (`mv x .git`), leaving out whether `path` itself matches.
    pub fn check_structure_of_new(&self, path: &Path) -> Option<Refusal> {
        self.relatives(path).find_map(|rel| {
            (!rel.is_empty() && self.globs.guards_inside(&rel)).then(|| Refusal {
                rule: format!("{rel} may hold protected names"),
            })
        })
    }

    /// Whether the directory at `path` may hold protected names, so that
    /// renaming it, removing it, or renaming something onto it is refused
    /// (`mv x .git` would turn `x/hooks/*` into `.git/hooks/*`).
    pub fn check_structure(&self, path: &Path) -> Option<Refusal> {
        if let Some(refusal) = self.check_name(path) {
            return Some(refusal);
        }
        self.relatives(path).find_map(|rel| {
            (!rel.is_empty() && self.globs.guards_inside(&rel)).then(|| Refusal {
                rule: format!("{rel} may hold protected names"),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_plugin_api::write_deny::DEFAULT_GLOBS;

    fn rules() -> Rules {
        Rules::new(&GuardConfig {
            globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
            roots: vec!["/work/proj".into(), "/home/u".into(), "/work".into()],
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

    #[test]
    fn bad_globs_and_inactive_configs() {
        assert!(
            Rules::new(&GuardConfig {
                globs: vec!["/abs".into()],
                roots: vec![]
            })
            .is_err()
        );
        let empty = Rules::new(&GuardConfig::default()).unwrap();
        assert!(!empty.is_active());
    }
}
