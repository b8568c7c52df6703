use std::path::{Path, PathBuf};

use super::super::{GuardConfig, Rules, scan_protected_inodes};
use crate::write_deny::DEFAULT_GLOBS;

fn config(roots: &[&str], home: Option<&str>) -> GuardConfig {
    GuardConfig {
        globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
        roots: roots.iter().map(PathBuf::from).collect(),
        home: home
            .filter(|h| roots.iter().any(|r| Path::new(h).starts_with(r)))
            .map(PathBuf::from),
        allowlisted_home: home.map(PathBuf::from),
        throwaway: vec!["/home/u/.cache".into(), "/home/u/.npm".into()],
        path_dirs: vec!["/home/u/bin".into(), "/home/u/.cargo/bin".into()],
        unix_sockets: Vec::new(),
    }
}

fn refused(rules: &Rules, path: &str) -> bool {
    rules.check_create(Path::new(path)).is_some()
}

/// SPEC G5: in a bound home every name under a dot-path is refused, new or
/// not, whatever a list of names would say; the data and the throwaway
/// overlays' insides are not; the rest of the home is the command's.
#[test]
fn a_bound_homes_dot_paths_are_kept_but_its_data() {
    let mut rules = Rules::new(&config(&["/home/u"], Some("/home/u"))).unwrap();
    rules.scan_completed();
    for kept in [
        "/home/u/.local/lib/python3.11/site-packages/usercustomize.py",
        "/home/u/.cargo/env",
        "/home/u/.gitconfig.local",
        "/home/u/.tmux.conf",
        "/home/u/.config/helix/config.toml",
        "/home/u/.codex/config.toml",
        "/home/u/.aws/credentials",
        "/home/u/.cache",
        "/home/u/go/pkg/mod/x.go",
        "/home/u/bin/git",
    ] {
        assert!(refused(&rules, kept), "{kept}");
        assert!(rules.check_name(Path::new(kept)).is_some(), "{kept}");
        assert!(rules.could_refuse(Path::new(kept)), "{kept}");
    }
    for free in [
        "/home/u/.bash_history",
        "/home/u/.bash_history-77.tmp",
        "/home/u/.cache/pip/http/x",
        "/home/u/.npm/_cacache/x",
        "/home/u/proj/src/main.rs",
        "/home/u/notes.txt",
    ] {
        assert!(!refused(&rules, free), "{free}");
    }
    let why = rules
        .check_create(Path::new("/home/u/.tmux.conf"))
        .unwrap()
        .rule;
    assert!(
        why.contains("~/.tmux.conf") && why.contains("run without binding the home"),
        "{why}"
    );
}

/// The allowlist follows the home into a bind below it (`~/.config`) and
/// above it (`/home`), where the home and its parents are not moved either.
#[test]
fn the_home_allowlist_holds_in_a_bind_above_or_below_the_home() {
    let below = Rules::new(&config(&["/home/u/.config"], Some("/home/u"))).unwrap();
    assert!(refused(&below, "/home/u/.config/anything/at/all"));
    let above = Rules::new(&config(&["/home"], Some("/home/u"))).unwrap();
    assert!(refused(&above, "/home/u/.profile.d/x.sh"));
    assert!(!refused(&above, "/home/other/.bashrc.d"), "another home");
    assert!(above.check_structure(Path::new("/home/u")).is_some());
    assert!(above.check_structure(Path::new("/home/other")).is_none());
}

/// `PATH` directories: nothing inside may change, the directory may be
/// made but not replaced (a symlink there leads the host elsewhere), nor
/// a directory above it.
#[test]
fn path_directories_take_nothing() {
    let mut with_tools = config(&["/w"], None);
    with_tools.path_dirs = vec!["/w/proj/tools/bin".into()];
    let rules = Rules::new(&with_tools).unwrap();
    assert!(refused(&rules, "/w/proj/tools/bin/git"));
    assert!(rules.check_mkdir(Path::new("/w/proj/tools/bin")).is_none());
    assert!(
        refused(&rules, "/w/proj/tools/bin"),
        "a file or a symlink there"
    );
    let why = rules
        .check_create(Path::new("/w/proj/tools/bin/git"))
        .unwrap()
        .rule;
    assert!(
        why.contains("PATH directory") && why.contains("--root"),
        "{why}"
    );
    for dir in ["/w/proj/tools/bin", "/w/proj/tools", "/w/proj"] {
        assert!(rules.check_structure(Path::new(dir)).is_some(), "{dir}");
    }
    assert!(!refused(&rules, "/w/proj/tools/lib/x"));
    let home = Rules::new(&config(&["/home/u"], Some("/home/u"))).unwrap();
    assert!(refused(&home, "/home/u/.cargo/bin/evil"));
    assert!(refused(&home, "/home/u/bin/git"));
}

/// SPEC G5: in a git directory of launch only what git writes in ordinary
/// work may change; the config, what tells git where to look and names
/// nobody listed are refused, and the directories that hold them stay.
#[test]
fn a_git_directory_of_launch_takes_only_ordinary_work() {
    let mut rules = Rules::new(&config(&["/w"], None)).unwrap();
    rules.protect_repository("/w/proj".into());
    rules.protect_git_dir("/w/proj/.git".into());
    rules.protect_git_dir("/w/proj/.git/worktrees/wt".into());
    rules.scan_completed();
    for kept in [
        "/w/proj/.git/config",
        "/w/proj/.git/config.lock",
        "/w/proj/.git/commondir",
        "/w/proj/.git/objects/info/alternates",
        "/w/proj/.git/info/grafts",
        "/w/proj/.git/shallow",
        "/w/proj/.git/hooks/pre-commit",
        "/w/proj/.git/modules/evil/config",
        "/w/proj/.git/a-name-nobody-listed",
        "/w/proj/.git/worktrees/wt/commondir",
        "/w/proj/.git/worktrees/wt/gitdir",
    ] {
        assert!(refused(&rules, kept), "{kept}");
        assert!(rules.check_name(Path::new(kept)).is_some(), "{kept}");
    }
    for ordinary in [
        "/w/proj/.git/index.lock",
        "/w/proj/.git/HEAD",
        "/w/proj/.git/ORIG_HEAD",
        "/w/proj/.git/refs/heads/topic",
        "/w/proj/.git/objects/ab/cdef",
        "/w/proj/.git/worktrees/wt/HEAD",
        "/w/proj/.git/worktrees/new/commondir",
        "/w/proj/src/lib.rs",
    ] {
        assert!(!refused(&rules, ordinary), "{ordinary}");
    }
    assert!(rules.check_mkdir(Path::new("/w/proj/.git/info")).is_none());
    assert!(rules.check_mkdir(Path::new("/w/proj/.git/hooks")).is_some());
    for fixed in [
        "/w/proj/.git/objects/info",
        "/w/proj/.git",
        "/w/proj",
        "/w/proj/.git/worktrees/wt",
    ] {
        assert!(rules.check_structure(Path::new(fixed)).is_some(), "{fixed}");
        assert!(
            rules.check_structure_of_new(Path::new(fixed)).is_some(),
            "{fixed}"
        );
    }
    let why = rules
        .check_create(Path::new("/w/proj/.git/config.lock"))
        .unwrap()
        .rule;
    assert!(why.contains("`config`") && why.contains("git -c"), "{why}");
}

/// No bare repository's shape inside an existing repository: a new
/// `HEAD`, or `objects`/`refs` beside a `HEAD` that was there.
#[test]
fn no_bare_repository_shape_inside_an_existing_one() {
    let mut rules = Rules::new(&config(&["/w"], None)).unwrap();
    rules.protect_repository("/w/proj".into());
    rules.protect_git_dir("/w/proj/.git".into());
    rules.protect_head_dir("/w/proj/docs".into());
    rules.scan_completed();
    assert!(refused(&rules, "/w/proj/sub/HEAD"));
    assert!(
        refused(&rules, "/w/proj/sub/head"),
        "a case-folding filesystem"
    );
    assert!(refused(&rules, "/w/proj/docs/objects"));
    assert!(rules.check_mkdir(Path::new("/w/proj/docs/refs")).is_some());
    assert!(!refused(&rules, "/w/proj/src/objects"));
    assert!(!refused(&rules, "/w/elsewhere/HEAD"), "outside it");
    assert!(
        !refused(&rules, "/w/proj/.git/HEAD"),
        "its own git directory"
    );
    assert!(rules.check_structure(Path::new("/w/proj/docs")).is_some());
}

/// Unfinished scan: an existing name any `.git` holds that the allowlist
/// leaves out may not change (fail closed); new names are the globs' to
/// judge, so `git init` still works.
#[test]
fn without_a_complete_scan_any_git_directory_is_kept() {
    let rules = Rules::new(&config(&["/w"], None)).unwrap();
    let name = |p: &str| rules.check_name(Path::new(p)).is_some();
    assert!(name("/w/deep/repo/.git/commondir"));
    assert!(name("/w/deep/repo/.git/objects/info/alternates"));
    assert!(!name("/w/deep/repo/.git/index"));
    assert!(!refused(&rules, "/w/new/.git/config"));
}

/// The scan finds git directories by their shape (a bare fixture
/// repository too), `HEAD`s that are not one, and where the home's
/// symlinks lead.
#[test]
fn the_scan_finds_git_directories_and_where_home_links_lead() {
    let dir = tempfile::tempdir().unwrap();
    let w = std::fs::canonicalize(dir.path()).unwrap();
    let mk = |rel: &str| std::fs::create_dir_all(w.join(rel)).unwrap();
    let put = |rel: &str| std::fs::write(w.join(rel), "x\n").unwrap();
    for d in [
        "proj/.git/objects",
        "proj/.git/refs/heads",
        "proj/fixtures/bare.git/objects",
        "proj/fixtures/bare.git/refs",
        "proj/notes",
        "home/.config",
        "home/dotfiles",
    ] {
        mk(d);
    }
    for f in [
        "proj/.git/HEAD",
        "proj/.git/config",
        "proj/fixtures/bare.git/HEAD",
        "proj/fixtures/bare.git/config",
        "proj/notes/HEAD",
        "home/dotfiles/tmux.conf",
    ] {
        put(f);
    }
    std::os::unix::fs::symlink(w.join("home/dotfiles/tmux.conf"), w.join("home/.tmux.conf"))
        .unwrap();
    let home = w.join("home");
    let mut rules = Rules::new(&GuardConfig {
        globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
        roots: vec![w.clone()],
        home: None,
        allowlisted_home: Some(home.clone()),
        throwaway: Vec::new(),
        path_dirs: Vec::new(),
        unix_sockets: Vec::new(),
    })
    .unwrap();
    assert!(scan_protected_inodes(&mut rules));
    let at = |rel: &str| w.join(rel);
    assert!(
        rules
            .check_name(&at("proj/fixtures/bare.git/config"))
            .is_some()
    );
    assert!(rules.check_name(&at("proj/.git/config")).is_some());
    assert!(
        rules
            .check_create(&at("proj/fixtures/bare.git/index"))
            .is_none()
    );
    assert!(rules.check_create(&at("proj/notes/refs")).is_some());
    assert!(rules.check_name(&at("home/dotfiles/tmux.conf")).is_some());
    assert!(rules.check_create(&at("home/dotfiles/other")).is_none());
    // The kept files of a git directory are kept by identity too.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(at("proj/.git/config")).unwrap();
    assert!(rules.is_protected_inode(meta.dev(), meta.ino()));
}
