//! The jail against a planted tree: symlinks out (absolute, relative,
//! chained), `..` escapes, magic links, a hard link to a file outside, a
//! hard link to a protected `.env`, a FIFO, secrets, read-only roots. Every
//! operation is refused or confined to the roots, and the sentinel outside
//! every root is unchanged and never read.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

pub(super) const SENTINEL: &[u8] = b"SENTINEL: outside every root, never to be read";

/// A planted tree in a temporary directory.
pub(super) struct Planted {
    _tmp: tempfile::TempDir,
    pub base: PathBuf,
    pub work: PathBuf,
    pub ro: PathBuf,
    pub home: PathBuf,
    pub outside: PathBuf,
}

fn put(path: &Path, data: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, data).unwrap();
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

pub(super) fn plant() -> Planted {
    let tmp = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(tmp.path()).unwrap();
    let (work, ro, home, outside) = (
        base.join("work"),
        base.join("ro"),
        base.join("home"),
        base.join("outside"),
    );
    put(&outside.join("sentinel.txt"), SENTINEL);
    put(&outside.join("dir/inner.txt"), SENTINEL);

    put(&work.join("a.txt"), b"hello");
    put(&work.join("sub/b.txt"), b"bee");
    put(&work.join("sub/deep/c.txt"), b"sea");
    symlink(outside.join("sentinel.txt"), work.join("abs_link")).unwrap();
    symlink("../outside/sentinel.txt", work.join("rel_link")).unwrap();
    symlink("chain2", work.join("chain1")).unwrap();
    symlink("sub/../../outside", work.join("chain2")).unwrap();
    symlink(&outside, work.join("dir_link")).unwrap();
    symlink("/proc/self/root", work.join("proc_root")).unwrap();
    symlink(
        "../../../../../../../../../../proc/self/root",
        work.join("proc_rel"),
    )
    .unwrap();
    symlink("/proc/self/fd", work.join("proc_fd")).unwrap();
    symlink("loop2", work.join("loop1")).unwrap();
    symlink("loop1", work.join("loop2")).unwrap();
    symlink("sub/b.txt", work.join("inside_link")).unwrap();
    fs::hard_link(outside.join("sentinel.txt"), work.join("hard")).unwrap();
    mkfifo(&work.join("fifo"));
    put(&work.join(".env"), b"TOKEN=1");
    fs::hard_link(work.join(".env"), work.join("env_alias")).unwrap();
    put(&work.join(".git/HEAD"), b"ref: refs/heads/main\n");
    put(&work.join(".git/config"), b"[core]\n");
    put(&work.join(".git/hooks/pre-commit.sample"), b"#!/bin/sh\n");
    put(&work.join(".git/hooks/sub/tool"), b"#!/bin/sh\n");
    put(
        &work.join(".ssh/notes.txt"),
        b"a project directory named like a secret",
    );

    put(&home.join(".ssh/id_ed25519"), b"PRIVATE KEY");
    put(&home.join(".aws/credentials"), b"aws_secret_access_key=x");
    put(&home.join(".bashrc"), b"# rc\n");
    put(&home.join("notes.txt"), b"notes");
    symlink(".ssh/id_ed25519", home.join("key_link")).unwrap();

    put(&ro.join("readme.txt"), b"read me");
    Planted {
        _tmp: tmp,
        base,
        work,
        ro,
        home,
        outside,
    }
}

impl Planted {
    pub(super) fn jail(&self) -> Jail {
        Jail::new(
            JailConfig::new(vec![
                RootConfig::writable("work", &self.work),
                RootConfig::read_only("ro", &self.ro),
                RootConfig::writable("home", &self.home),
            ])
            .with_home(Some(self.home.clone())),
        )
        .unwrap()
    }
}

pub(super) fn w(rel: impl Into<PathBuf>) -> JailPath {
    JailPath::in_root("work", rel)
}

fn h(rel: &str) -> JailPath {
    JailPath::in_root("home", rel)
}

/// Every entry below `dir`: its kind, content, mode; symlinks not followed.
pub(super) fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (String, Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let (kind, content) = if meta.is_dir() {
                stack.push(path.clone());
                ("dir", Vec::new())
            } else if meta.file_type().is_symlink() {
                (
                    "symlink",
                    fs::read_link(&path)
                        .unwrap()
                        .as_os_str()
                        .as_bytes()
                        .to_vec(),
                )
            } else {
                ("file", fs::read(&path).unwrap())
            };
            out.insert(path, (kind.to_owned(), content, meta.mode()));
        }
    }
    out
}

#[track_caller]
pub(super) fn refused<T: std::fmt::Debug>(result: Result<T, JailError>, rule: &str) -> JailError {
    match result {
        Err(e) => {
            assert_eq!(e.rule(), Some(rule), "{e}");
            e
        }
        Ok(v) => panic!("expected a refusal by `{rule}`, got Ok({v:?})"),
    }
}

#[track_caller]
fn errno<T: std::fmt::Debug>(result: Result<T, JailError>, errno: i32) {
    match result {
        Err(e) => assert_eq!(e.raw_os_error(), Some(errno), "{e}"),
        Ok(v) => panic!("expected errno {errno}, got Ok({v:?})"),
    }
}

#[test]
fn allowed_work_succeeds() {
    let p = plant();
    let jail = p.jail();
    assert_eq!(jail.read(&w("a.txt")).unwrap(), b"hello");
    assert_eq!(
        jail.read(&w("inside_link")).unwrap(),
        b"bee",
        "a symlink within the root"
    );
    jail.write(&w("new.txt"), b"one").unwrap();
    assert_eq!(fs::read(p.work.join("new.txt")).unwrap(), b"one");
    jail.write(&w("new.txt"), b"two!").unwrap();
    assert_eq!(
        fs::read(p.work.join("new.txt")).unwrap(),
        b"two!",
        "truncated, rewritten"
    );
    jail.mkdir(&w("made")).unwrap();
    errno(jail.mkdir(&w("made")), libc::EEXIST);
    jail.write(&w("made/f.txt"), b"f").unwrap();
    jail.rename(&w("made/f.txt"), &w("sub/g.txt")).unwrap();
    assert_eq!(fs::read(p.work.join("sub/g.txt")).unwrap(), b"f");
    jail.rename(&w("made"), &w("renamed")).unwrap();
    assert!(p.work.join("renamed").is_dir());
    jail.rmdir(&w("renamed")).unwrap();
    jail.unlink(&w("sub/g.txt")).unwrap();
    assert!(!p.work.join("sub/g.txt").exists());
    jail.chmod(&w("a.txt"), 0o755).unwrap();
    assert_eq!(
        fs::metadata(p.work.join("a.txt")).unwrap().mode() & 0o777,
        0o755
    );

    let names: Vec<_> = jail
        .list(&w("sub"))
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.iter().any(|n| n == "b.txt") && names.iter().any(|n| n == "deep"));
    let listed = jail.list(&w("")).unwrap();
    let kind = |name: &str| listed.iter().find(|e| e.name == name).unwrap().kind;
    assert_eq!(kind("abs_link"), EntryKind::Symlink);
    assert_eq!(kind("fifo"), EntryKind::Other);
    assert_eq!(kind("sub"), EntryKind::Dir);
    assert_eq!(kind("a.txt"), EntryKind::File);
    assert!(
        jail.stat(&w("abs_link"), false)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(jail.stat(&w("inside_link"), true).unwrap().len(), 3);
    assert!(jail.stat(&w(""), false).unwrap().is_dir());

    fs::set_permissions(p.work.join("a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    jail.replace_atomically(&w("a.txt"), b"edited").unwrap();
    assert_eq!(fs::read(p.work.join("a.txt")).unwrap(), b"edited");
    assert_eq!(
        fs::metadata(p.work.join("a.txt")).unwrap().mode() & 0o777,
        0o640,
        "bits kept"
    );
    jail.replace_atomically(&w("sub/fresh.txt"), b"fresh")
        .unwrap();
    assert_eq!(fs::read(p.work.join("sub/fresh.txt")).unwrap(), b"fresh");
    assert!(
        !fs::read_dir(&p.work).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("cc-jail")),
        "no temporary file left"
    );

    put(&p.work.join("tree/x/y/z.txt"), b"z");
    put(&p.work.join("tree/top.txt"), b"t");
    symlink("../a.txt", p.work.join("tree/x/link")).unwrap();
    jail.remove_all(&w("tree")).unwrap();
    assert!(!p.work.join("tree").exists());
    assert_eq!(
        fs::read(p.work.join("a.txt")).unwrap(),
        b"edited",
        "a symlink's target stays"
    );

    // Host paths, and a tool's relative path from its working directory.
    let host = JailPath::host(p.work.join("sub/b.txt"));
    assert_eq!(jail.read(&host).unwrap(), b"bee");
    let cwd = JailPath::host(p.work.join("sub/deep"));
    assert_eq!(
        jail.read(&JailPath::from_input(&cwd, "../b.txt")).unwrap(),
        b"bee"
    );
    assert_eq!(
        jail.read(&JailPath::from_input(&cwd, "c.txt")).unwrap(),
        b"sea"
    );
    let abs = JailPath::from_input(&cwd, p.work.join("a.txt"));
    assert_eq!(abs, JailPath::host(p.work.join("a.txt")));
    assert_eq!(
        jail.read(&JailPath::host(p.work.join("sub/../a.txt")))
            .unwrap(),
        b"edited"
    );

    // A file in one root moved and linked into another.
    jail.write(&w("moveme"), b"m").unwrap();
    jail.rename(&w("moveme"), &h("moved")).unwrap();
    assert_eq!(fs::read(p.home.join("moved")).unwrap(), b"m");
    jail.link(&h("moved"), &w("linked")).unwrap();
    assert_eq!(fs::metadata(p.work.join("linked")).unwrap().nlink(), 2);
    refused(jail.read(&w("linked")), rule::HARD_LINKED);
}

/// Every operation through every escape, in both phases: what could read
/// or change the outside is refused; what is left (an unlink or rename of a
/// symlink itself) stays inside the root. The outside is unchanged after.
#[test]
fn every_operation_through_an_escape_is_refused_or_confined() {
    let p = plant();
    let before = snapshot(&p.outside);
    let jail = p.jail();
    let outside_dir = fs::File::open(&p.outside).unwrap();
    let strip = |path: &Path| path.strip_prefix("/").unwrap().to_path_buf();
    let hostile: Vec<JailPath> = vec![
        w("abs_link"),
        w("rel_link"),
        w("chain1/sentinel.txt"),
        w("dir_link/sentinel.txt"),
        w("dir_link/dir/inner.txt"),
        w("../outside/sentinel.txt"),
        w("sub/../../outside/sentinel.txt"),
        w(Path::new("proc_root")
            .join(strip(&p.outside))
            .join("sentinel.txt")),
        w(Path::new("proc_rel")
            .join(strip(&p.outside))
            .join("sentinel.txt")),
        w(format!(
            "proc_fd/{}/sentinel.txt",
            std::os::fd::AsRawFd::as_raw_fd(&outside_dir)
        )),
        w("hard"),
        w("loop1"),
        JailPath::host(p.outside.join("sentinel.txt")),
        JailPath::host(p.work.join("../outside/sentinel.txt")),
        JailPath::host(
            Path::new("/proc/self/root")
                .join(strip(&p.outside))
                .join("sentinel.txt"),
        ),
        JailPath::host(format!(
            "/proc/self/fd/{}/sentinel.txt",
            std::os::fd::AsRawFd::as_raw_fd(&outside_dir)
        )),
    ];
    let dir_forms: Vec<JailPath> = vec![
        w("dir_link"),
        w("chain1"),
        w("../outside"),
        w(Path::new("proc_root").join(strip(&p.outside))),
        JailPath::host(&p.outside),
    ];
    // Phase 1: whatever reads, writes through, or adds a name must fail.
    for path in hostile.iter().chain(&dir_forms) {
        let child = |name: &str| match path {
            JailPath::Host(h) => JailPath::host(h.join(name)),
            JailPath::InRoot { root, path } => JailPath::in_root(root.clone(), path.join(name)),
        };
        assert!(jail.read(path).is_err(), "read {path:?}");
        // A hard link's metadata is shown (its content never is).
        if *path != w("hard") {
            assert!(jail.stat(path, true).is_err(), "stat {path:?}");
        }
        assert!(jail.list(path).is_err(), "list {path:?}");
        assert!(jail.walk(path).is_err(), "walk {path:?}");
        assert!(jail.write(path, b"PWNED").is_err(), "write {path:?}");
        assert!(jail.chmod(path, 0o777).is_err(), "chmod {path:?}");
        assert!(
            jail.write(&child("planted"), b"PWNED").is_err(),
            "write into {path:?}"
        );
        assert!(jail.mkdir(&child("newdir")).is_err(), "mkdir in {path:?}");
        assert!(jail.link(path, &w("linked")).is_err(), "link from {path:?}");
        assert!(
            jail.link(&w("a.txt"), &child("linked")).is_err(),
            "link into {path:?}"
        );
        assert!(
            jail.rename(&w("sub/b.txt"), &child("moved")).is_err(),
            "rename into {path:?}"
        );
        assert!(
            jail.remove_all(&child("dir")).is_err(),
            "remove_all in {path:?}"
        );
        assert!(
            jail.remove_all(&child("sentinel.txt")).is_err(),
            "remove in {path:?}"
        );
        assert!(
            jail.unlink(&child("sentinel.txt")).is_err(),
            "unlink in {path:?}"
        );
    }
    assert_eq!(snapshot(&p.outside), before, "phase 1 changed the outside");
    // Phase 2: what acts on a name itself (the symlink, the hard link's
    // name) may succeed, inside the root only.
    for (i, path) in hostile.iter().chain(&dir_forms).enumerate() {
        let _ = jail.replace_atomically(path, b"REPLACED");
        let _ = jail.stat(path, false);
        let _ = jail.rename(path, &w(format!("moved_{i}")));
        let _ = jail.unlink(path);
        let _ = jail.remove_all(path);
        let _ = jail.rmdir(path);
    }
    assert_eq!(snapshot(&p.outside), before, "phase 2 changed the outside");
    // Nothing read since returned the sentinel either.
    for entry in jail.walk(&w("")).unwrap().flatten() {
        if let Ok(data) = jail.open_entry(&entry).and_then(|mut f| {
            let mut v = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut v)
                .map(|_| v)
                .map_err(|e| JailError::Io {
                    op: Op::Read,
                    path: entry.path(),
                    source: e,
                })
        }) {
            assert_ne!(data, SENTINEL, "{}", entry.path().display());
        }
    }
}

/// The kernel's EXDEV and ELOOP, mapped to the same two rules each time;
/// absolute paths outside every root named as such.
#[test]
fn escapes_are_refused_by_the_kernel_with_their_rule_names() {
    let p = plant();
    let jail = p.jail();
    for rel in [
        "abs_link",
        "rel_link",
        "chain1/sentinel.txt",
        "dir_link/sentinel.txt",
        "../outside/sentinel.txt",
        "sub/../../outside/sentinel.txt",
        "proc_root/etc/hostname",
        "proc_rel/etc/hostname",
        "proc_fd/0",
    ] {
        let e = refused(jail.read(&w(rel)), rule::ESCAPES_ROOT);
        let text = e.to_string();
        assert!(
            text.contains("read") && text.contains(rel) && text.contains("escapes the root"),
            "{text}"
        );
        refused(
            jail.write(&w(Path::new(rel).join("x")), b"x"),
            rule::ESCAPES_ROOT,
        );
    }
    refused(jail.read(&w("loop1")), rule::LINK_OUT);
    refused(jail.mkdir(&w("loop1/x")), rule::LINK_OUT);
    refused(jail.write(&w("abs_link"), b"x"), rule::FINAL_SYMLINK);
    for host in [
        p.outside.join("sentinel.txt"),
        Path::new("/proc/self/root").join(p.work.join("a.txt").strip_prefix("/").unwrap()),
        PathBuf::from("/etc/passwd"),
    ] {
        let e = refused(jail.read(&JailPath::host(&host)), rule::OUTSIDE_ROOTS);
        assert!(e.to_string().contains(&*host.to_string_lossy()), "{e}");
    }
    refused(
        jail.read(&JailPath::host(p.work.join("../outside/sentinel.txt"))),
        rule::ESCAPES_ROOT,
    );
    refused(
        jail.read(&JailPath::host("relative/a.txt")),
        rule::PATH_FORM,
    );
    refused(
        jail.read(&JailPath::in_root("nope", "a.txt")),
        rule::PATH_FORM,
    );
    refused(jail.read(&w("/etc/passwd")), rule::PATH_FORM);
    refused(jail.unlink(&w("sub/..")), rule::PATH_FORM);
    refused(jail.remove_all(&w("")), rule::ROOT_ITSELF);
    refused(jail.rename(&w("."), &w("elsewhere")), rule::ROOT_ITSELF);
    refused(jail.remove_all(&JailPath::host(&p.work)), rule::ROOT_ITSELF);
}

/// Magic links met beneath a root: the kernel's ELOOP under
/// RESOLVE_NO_MAGICLINKS. A read-only root at our own `/proc/self` holds
/// them (`root`, `fd/N`, `cwd`); nothing is read through them.
#[test]
fn magic_links_are_refused_as_links_out() {
    let p = plant();
    let jail = Jail::new(JailConfig::new(vec![
        RootConfig::writable("work", &p.work),
        RootConfig::read_only("proc", "/proc/self"),
    ]))
    .unwrap();
    let outside_dir = fs::File::open(&p.outside).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&outside_dir);
    let proc = |rel: String| JailPath::in_root("proc", rel);
    let outside_rel = p.outside.strip_prefix("/").unwrap().display().to_string();
    refused(
        jail.read(&proc(format!("root/{outside_rel}/sentinel.txt"))),
        rule::LINK_OUT,
    );
    refused(
        jail.read(&proc(format!("fd/{fd}/sentinel.txt"))),
        rule::LINK_OUT,
    );
    refused(jail.list(&proc(format!("fd/{fd}"))), rule::LINK_OUT);
    refused(jail.list(&proc("cwd".into())), rule::LINK_OUT);
    refused(
        jail.write(&proc(format!("fd/{fd}/x")), b"x"),
        rule::LINK_OUT,
    );
}

#[test]
fn a_hard_link_to_a_file_outside_is_neither_read_nor_changed() {
    let p = plant();
    let before = snapshot(&p.outside);
    let jail = p.jail();
    refused(jail.read(&w("hard")), rule::HARD_LINKED);
    refused(jail.write(&w("hard"), b"PWNED"), rule::HARD_LINKED);
    refused(jail.chmod(&w("hard"), 0o600), rule::HARD_LINKED);
    refused(jail.link(&w("hard"), &w("hard2")), rule::HARD_LINKED);
    let walked = jail
        .walk(&w(""))
        .unwrap()
        .flatten()
        .find(|e| e.name() == "hard")
        .unwrap();
    refused(jail.open_entry(&walked), rule::HARD_LINKED);
    // Replacing the name gives it a file of its own: the outside keeps its content.
    jail.replace_atomically(&w("hard"), b"own").unwrap();
    assert_eq!(jail.read(&w("hard")).unwrap(), b"own");
    assert_eq!(snapshot(&p.outside), before);
}

/// `.env` is protected at start (the scan keeps its identity): its hard
/// link `env_alias` is as protected as the name.
#[test]
fn a_protected_file_is_refused_under_any_name() {
    let p = plant();
    let jail = p.jail();
    assert!(jail.scan_complete());
    refused(jail.write(&w(".env"), b"x"), "**/.env");
    refused(jail.replace_atomically(&w(".env"), b"x"), "**/.env");
    refused(jail.unlink(&w(".env")), "**/.env");
    refused(jail.link(&w(".env"), &w("y")), "**/.env");
    refused(jail.rename(&w(".env"), &w("y")), "**/.env");
    refused(jail.write(&w("env_alias"), b"x"), rule::PROTECTED_FILE);
    refused(
        jail.replace_atomically(&w("env_alias"), b"x"),
        rule::PROTECTED_FILE,
    );
    refused(jail.unlink(&w("env_alias")), rule::PROTECTED_FILE);
    refused(jail.rename(&w("env_alias"), &w("y")), rule::PROTECTED_FILE);
    refused(jail.link(&w("env_alias"), &w("y")), rule::PROTECTED_FILE);
    refused(jail.chmod(&w("env_alias"), 0o600), rule::PROTECTED_FILE);
    refused(
        jail.rename(&w("a.txt"), &w("env_alias")),
        rule::PROTECTED_FILE,
    );
    assert_eq!(fs::read(p.work.join(".env")).unwrap(), b"TOKEN=1");
    assert_eq!(fs::metadata(p.work.join(".env")).unwrap().nlink(), 2);
}

/// The create-time rules refuse by name, with the glob's name.
#[test]
fn the_create_time_rules_refuse_with_their_names() {
    let p = plant();
    let jail = p.jail();
    let e = refused(jail.write(&w("sub/.env"), b"x"), "**/.env");
    let text = e.to_string();
    assert!(
        text.starts_with("write ") && text.contains("sub/.env") && text.contains("`**/.env`"),
        "{text}"
    );
    refused(jail.write(&w("x.pem"), b"x"), "**/*.pem");
    refused(jail.write(&w("sub/X.PEM"), b"x"), "**/*.pem");
    refused(jail.mkdir(&w("sub/y.key")), "**/*.key");
    refused(
        jail.write(&w(".git/hooks/pre-push"), b"x"),
        "**/.git/hooks/*",
    );
    refused(jail.write(&w(".bashrc"), b"x"), ".bashrc");
    refused(jail.write(&h(".bashrc"), b"x"), ".bashrc");
    refused(jail.replace_atomically(&w(".bashrc"), b"x"), ".bashrc");
    refused(jail.rename(&w("a.txt"), &w("k.key")), "**/*.key");
    refused(jail.link(&w("a.txt"), &w("sub/.env.local")), "**/.env.*");
    let config = p.work.join(".git/config");
    refused(
        jail.write(&w(".git/config"), b"x"),
        &format!("{} was protected at start", config.display()),
    );
    refused(
        jail.rename(&w(".git"), &w("git_away")),
        &format!(
            "{} holds files protected at start",
            p.work.join(".git").display()
        ),
    );
    assert!(
        jail.write(&h("bin/git"), b"x").is_err(),
        "~/bin in the home"
    );
    jail.write(&w("sub/.bashrc"), b"fine below the top")
        .unwrap();
    jail.mkdir(&w("bin")).unwrap();
    jail.write(&w("bin/tool"), b"a project's own bin").unwrap();
    assert!(!p.work.join("x.pem").exists() && !p.work.join(".git/hooks/pre-push").exists());
}

#[test]
fn execute_bits_under_hooks_and_special_bits_are_refused() {
    let p = plant();
    let jail = p.jail();
    refused(
        jail.chmod(&w(".git/hooks/pre-commit.sample"), 0o755),
        rule::HOOKS_EXEC,
    );
    refused(
        jail.chmod(&w(".git/hooks/sub/tool"), 0o744),
        rule::HOOKS_EXEC,
    );
    jail.chmod(&w(".git/hooks/sub/tool"), 0o600).unwrap();
    refused(jail.chmod(&w("a.txt"), 0o4755), rule::SPECIAL_MODE_BITS);
    refused(jail.chmod(&w("a.txt"), 0o1777), rule::SPECIAL_MODE_BITS);
    refused(jail.chmod(&w("abs_link"), 0o644), rule::FINAL_SYMLINK);
    let mode = |rel: &str| fs::metadata(p.work.join(rel)).unwrap().mode() & 0o7777;
    assert_eq!(mode(".git/hooks/pre-commit.sample") & 0o111, 0);
    assert_eq!(mode("a.txt") & 0o7000, 0);
}

#[test]
fn a_read_only_root_takes_no_change() {
    let p = plant();
    let before = snapshot(&p.ro);
    let jail = p.jail();
    let r = |rel: &str| JailPath::in_root("ro", rel);
    assert_eq!(jail.read(&r("readme.txt")).unwrap(), b"read me");
    refused(jail.write(&r("readme.txt"), b"x"), rule::READ_ONLY_ROOT);
    refused(jail.write(&r("new.txt"), b"x"), rule::READ_ONLY_ROOT);
    refused(
        jail.replace_atomically(&r("readme.txt"), b"x"),
        rule::READ_ONLY_ROOT,
    );
    refused(jail.mkdir(&r("d")), rule::READ_ONLY_ROOT);
    refused(jail.unlink(&r("readme.txt")), rule::READ_ONLY_ROOT);
    refused(jail.remove_all(&r("readme.txt")), rule::READ_ONLY_ROOT);
    refused(jail.chmod(&r("readme.txt"), 0o600), rule::READ_ONLY_ROOT);
    refused(
        jail.rename(&r("readme.txt"), &w("stolen")),
        rule::READ_ONLY_ROOT,
    );
    refused(
        jail.rename(&w("a.txt"), &r("planted")),
        rule::READ_ONLY_ROOT,
    );
    refused(jail.link(&w("a.txt"), &r("planted")), rule::READ_ONLY_ROOT);
    refused(
        jail.link(&r("readme.txt"), &w("alias")),
        rule::READ_ONLY_ROOT,
    );
    assert_eq!(snapshot(&p.ro), before);
}

/// The nearest root by canonical path decides: a read-only root inside a
/// writable one stays read-only when named through the outer root, or
/// reached through a symlink in it.
#[test]
fn a_read_only_root_inside_a_writable_one_stays_read_only() {
    let p = plant();
    let (outer, inner) = (p.base.join("nest"), p.base.join("nest/inner"));
    put(&inner.join("keep.txt"), b"keep");
    symlink("inner", outer.join("to_inner")).unwrap();
    let jail = Jail::new(JailConfig::new(vec![
        RootConfig::writable("outer", &outer),
        RootConfig::read_only("inner", &inner),
    ]))
    .unwrap();
    let o = |rel: &str| JailPath::in_root("outer", rel);
    refused(jail.write(&o("inner/keep.txt"), b"x"), rule::READ_ONLY_ROOT);
    refused(jail.write(&o("to_inner/new"), b"x"), rule::READ_ONLY_ROOT);
    refused(
        jail.write(&JailPath::host(inner.join("new")), b"x"),
        rule::READ_ONLY_ROOT,
    );
    refused(jail.remove_all(&o("inner")), rule::READ_ONLY_ROOT);
    refused(jail.rename(&o("inner"), &o("moved")), rule::READ_ONLY_ROOT);
    jail.write(&o("beside.txt"), b"ok").unwrap();
    assert_eq!(fs::read(inner.join("keep.txt")).unwrap(), b"keep");
    assert!(!inner.join("new").exists());
}

#[test]
fn secrets_are_never_read_or_changed() {
    let p = plant();
    let jail = p.jail();
    let e = refused(jail.read(&h(".ssh/id_ed25519")), rule::SECRET);
    assert!(e.to_string().contains("~/.ssh"), "{e}");
    refused(jail.read(&h("key_link")), rule::SECRET);
    refused(
        jail.read(&JailPath::host(p.home.join(".aws/credentials"))),
        rule::SECRET,
    );
    refused(jail.list(&h(".ssh")), rule::SECRET);
    refused(jail.stat(&h(".ssh/id_ed25519"), false), rule::SECRET);
    refused(jail.walk(&h(".aws")), rule::SECRET);
    refused(jail.write(&h(".ssh/authorized_keys"), b"x"), rule::SECRET);
    refused(jail.remove_all(&h(".aws")), rule::SECRET);
    refused(jail.rename(&h(".ssh"), &h("ssh_away")), rule::SECRET);
    refused(jail.chmod(&h(".ssh/id_ed25519"), 0o644), rule::SECRET);
    for entry in jail.walk(&h("")).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        assert!(
            !path.starts_with(p.home.join(".ssh")) && !path.starts_with(p.home.join(".aws")),
            "walk showed {}",
            path.display()
        );
    }
    assert_eq!(jail.read(&h("notes.txt")).unwrap(), b"notes");
    assert_eq!(
        jail.read(&w(".ssh/notes.txt")).unwrap(),
        b"a project directory named like a secret",
        "a project's `.ssh` is not the home's"
    );
    assert_eq!(
        fs::read(p.home.join(".ssh/id_ed25519")).unwrap(),
        b"PRIVATE KEY"
    );
    assert!(p.home.join(".aws/credentials").exists());
    // Without $HOME the home's secrets are unknown: a front-end must pass it.
    let bare = Jail::new(JailConfig::new(vec![RootConfig::writable("home", &p.home)])).unwrap();
    assert_eq!(bare.read(&h(".ssh/id_ed25519")).unwrap(), b"PRIVATE KEY");
}

/// Opening a FIFO must not hang: it is refused from its `fstat`, never
/// opened for reading or writing.
#[test]
fn a_fifo_is_refused_without_hanging() {
    let p = plant();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let jail = p.jail();
        refused(jail.read(&w("fifo")), rule::NOT_REGULAR);
        refused(jail.write(&w("fifo"), b"x"), rule::NOT_REGULAR);
        refused(jail.replace_atomically(&w("fifo"), b"x"), rule::NOT_REGULAR);
        refused(jail.link(&w("fifo"), &w("fifo2")), rule::NOT_REGULAR);
        let entry = jail
            .walk(&w(""))
            .unwrap()
            .flatten()
            .find(|e| e.name() == "fifo")
            .unwrap();
        assert_eq!(entry.kind(), EntryKind::Other);
        refused(jail.open_entry(&entry), rule::NOT_REGULAR);
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("a jail operation on a FIFO hung");
}

#[test]
fn a_walk_stays_inside_and_never_follows_a_symlink() {
    let p = plant();
    let jail = p.jail();
    let entries: Vec<WalkEntry> = jail.walk(&w("")).unwrap().map(Result::unwrap).collect();
    let paths: Vec<PathBuf> = entries.iter().map(WalkEntry::path).collect();
    assert!(
        paths.iter().all(|path| path.starts_with(&p.work)),
        "{paths:?}"
    );
    assert!(paths.contains(&p.work.join("sub/deep/c.txt")));
    for name in ["abs_link", "dir_link", "chain1", "proc_root", "loop1"] {
        let e = entries.iter().find(|e| e.name() == name).unwrap();
        assert_eq!(e.kind(), EntryKind::Symlink, "{name}");
        refused(jail.open_entry(e), rule::FINAL_SYMLINK);
    }
    let dir_link = p.work.join("dir_link");
    assert!(
        !paths
            .iter()
            .any(|path| path.starts_with(&dir_link) && *path != dir_link)
    );
    let c = entries.iter().find(|e| e.name() == "c.txt").unwrap();
    assert_eq!(c.depth(), 3);
    let mut data = String::new();
    std::io::Read::read_to_string(&mut jail.open_entry(c).unwrap(), &mut data).unwrap();
    assert_eq!(data, "sea");
    let shallow: Vec<_> = jail.walk(&w("")).unwrap().max_depth(1).flatten().collect();
    assert!(shallow.iter().all(|e| e.depth() == 1));
    refused(jail.walk(&w("dir_link")), rule::ESCAPES_ROOT);
}

/// A directory swapped for a symlink after the walk listed it: the walk
/// reports it and goes on, never entering the symlink.
#[test]
fn a_walk_refuses_a_directory_swapped_for_a_symlink() {
    let p = plant();
    let jail = p.jail();
    put(&p.work.join("w/a/inside.txt"), b"i");
    put(&p.work.join("w/b/inside.txt"), b"i");
    let mut walk = jail.walk(&w("w")).unwrap();
    let first = walk.next().unwrap().unwrap();
    // `first` was entered already; swap its sibling (not yet entered).
    let other = if first.name() == "a" { "b" } else { "a" };
    fs::remove_dir_all(p.work.join("w").join(other)).unwrap();
    symlink(&p.outside, p.work.join("w").join(other)).unwrap();
    let rest: Vec<_> = walk.collect();
    for item in &rest {
        match item {
            Ok(entry) => assert!(
                entry.path().starts_with(&p.work),
                "{}",
                entry.path().display()
            ),
            Err(e) => assert_eq!(e.rule(), Some(rule::FINAL_SYMLINK), "{e}"),
        }
    }
}

#[test]
fn remove_all_never_follows_and_refuses_a_protected_tree_whole() {
    let p = plant();
    let before = snapshot(&p.outside);
    let jail = p.jail();
    put(&p.work.join("tree/keep/x.txt"), b"x");
    put(&p.work.join("tree/more/deeper/y.txt"), b"y");
    symlink(&p.outside, p.work.join("tree/out_dir")).unwrap();
    symlink(
        p.outside.join("sentinel.txt"),
        p.work.join("tree/more/out_file"),
    )
    .unwrap();
    symlink("../../../outside", p.work.join("tree/more/deeper/rel_out")).unwrap();
    fs::hard_link(
        p.outside.join("sentinel.txt"),
        p.work.join("tree/more/hard"),
    )
    .unwrap();
    mkfifo(&p.work.join("tree/fifo"));
    jail.remove_all(&w("tree")).unwrap();
    assert!(!p.work.join("tree").exists());
    assert_eq!(snapshot(&p.outside), before);

    // A protected name inside: refused whole, before anything goes.
    put(&p.work.join("tree2/a/b.txt"), b"b");
    put(&p.work.join("tree2/z/.env"), b"TOKEN=2");
    let e = refused(jail.remove_all(&w("tree2")), "**/.env");
    assert!(e.to_string().contains("tree2"), "{e}");
    assert!(p.work.join("tree2/a/b.txt").exists() && p.work.join("tree2/z/.env").exists());
    // A symlink named: only the symlink goes.
    jail.remove_all(&w("dir_link")).unwrap();
    assert!(!p.work.join("dir_link").exists());
    assert_eq!(snapshot(&p.outside), before);
    // The git directory holds protected names.
    assert!(jail.remove_all(&w(".git")).is_err());
    assert!(p.work.join(".git/config").exists());
}

/// Registered checkouts: nothing at or below them changes, named through
/// a symlink, a host path, or a hard link of a file in them.
#[test]
fn registered_checkouts_are_never_changed() {
    let p = plant();
    put(&p.work.join("checkout/src/main.rs"), b"fn main() {}");
    put(&p.work.join("keep.txt"), b"keep");
    fs::hard_link(p.work.join("keep.txt"), p.work.join("keep_alias")).unwrap();
    symlink("checkout", p.work.join("co_link")).unwrap();
    // Registered through a spelling outside every root.
    symlink(p.work.join("checkout"), p.base.join("checkout_elsewhere")).unwrap();
    let jail = Jail::new(
        JailConfig::new(vec![RootConfig::writable("work", &p.work)]).with_protected(vec![
            p.base.join("checkout_elsewhere"),
            p.work.join("keep.txt"),
        ]),
    )
    .unwrap();
    refused(
        jail.write(&w("checkout/src/main.rs"), b"x"),
        rule::PROTECTED_PATH,
    );
    refused(
        jail.write(&w("checkout/new.rs"), b"x"),
        rule::PROTECTED_PATH,
    );
    refused(
        jail.write(&w("co_link/src/new.rs"), b"x"),
        rule::PROTECTED_PATH,
    );
    refused(jail.remove_all(&w("checkout")), rule::PROTECTED_PATH);
    refused(
        jail.rename(&w("checkout"), &w("gone")),
        rule::PROTECTED_PATH,
    );
    refused(jail.remove_all(&w("co_link/src")), rule::PROTECTED_PATH);
    put(&p.work.join("outer/inner_checkout/f.txt"), b"f");
    let nested = Jail::new(
        JailConfig::new(vec![RootConfig::writable("work", &p.work)])
            .with_protected(vec![p.work.join("outer/inner_checkout")]),
    )
    .unwrap();
    refused(
        nested.rename(&w("outer"), &w("moved_outer")),
        rule::PROTECTED_PATH,
    );
    refused(nested.remove_all(&w("outer")), rule::PROTECTED_PATH);
    assert!(p.work.join("outer/inner_checkout/f.txt").exists());
    refused(jail.write(&w("keep.txt"), b"x"), rule::PROTECTED_PATH);
    refused(jail.write(&w("keep_alias"), b"x"), rule::PROTECTED_PATH);
    refused(jail.unlink(&w("keep_alias")), rule::PROTECTED_PATH);
    assert_eq!(
        jail.read(&w("checkout/src/main.rs")).unwrap(),
        b"fn main() {}"
    );
    assert_eq!(fs::read(p.work.join("keep.txt")).unwrap(), b"keep");
    // By identity: walking up from a directory below the checkout finds it.
    let below = sys::open_root(&p.work.join("checkout/src")).unwrap();
    let found = jail
        .protected_above(Op::Write, Path::new("x"), std::os::fd::AsFd::as_fd(&below))
        .unwrap();
    assert_eq!(found, Some(p.base.join("checkout_elsewhere")));
    let beside = sys::open_root(&p.work.join("sub")).unwrap();
    assert_eq!(
        jail.protected_above(Op::Write, Path::new("x"), std::os::fd::AsFd::as_fd(&beside))
            .unwrap(),
        None
    );
}

#[test]
fn the_kernels_answers_map_to_rules_and_enosys_names_the_kernel() {
    let path = Path::new("/w/x");
    let err =
        |errno| resolve::resolution_error(Op::Read, path, std::io::Error::from_raw_os_error(errno));
    assert_eq!(err(libc::EXDEV).rule(), Some(rule::ESCAPES_ROOT));
    assert_eq!(err(libc::ELOOP).rule(), Some(rule::LINK_OUT));
    match err(libc::ENOSYS) {
        JailError::Unsupported { detail, .. } => assert!(detail.contains("5.6"), "{detail}"),
        other => panic!("{other}"),
    }
    assert_eq!(err(libc::ENOENT).raw_os_error(), Some(libc::ENOENT));
}

/// A server shares one jail between its tool calls and threads.
#[test]
fn a_jail_and_its_walks_cross_threads() {
    fn shared<T: Send + Sync>() {}
    fn sent<T: Send>() {}
    shared::<Jail>();
    shared::<WalkEntry>();
    sent::<Walk<'static>>();
    shared::<JailError>();
}

#[test]
fn bad_configurations_are_refused() {
    let p = plant();
    let config = |roots| Jail::new(JailConfig::new(roots));
    assert!(matches!(config(vec![]), Err(JailError::Config(_))));
    assert!(matches!(
        config(vec![RootConfig::writable("a", "relative")]),
        Err(JailError::Config(_))
    ));
    assert!(matches!(
        config(vec![
            RootConfig::writable("a", &p.work),
            RootConfig::read_only("a", &p.ro)
        ]),
        Err(JailError::Config(_))
    ));
    assert!(matches!(
        config(vec![RootConfig::writable("a", p.base.join("missing"))]),
        Err(JailError::Io { .. })
    ));
    let mut bad_glob = JailConfig::new(vec![RootConfig::writable("a", &p.work)]);
    bad_glob.globs = vec!["/absolute".into()];
    assert!(matches!(Jail::new(bad_glob), Err(JailError::Config(_))));
    let jail = p.jail();
    assert_eq!(jail.root_path("work"), Some(p.work.as_path()));
    assert!(jail.rules().is_active());
}

/// SPEC H1: a clone never copies bytes. On a filesystem without reflink
/// (this machine's ext4 or tmpfs temp dir) a file with content is the
/// kernel's refusal; directories, empty files and symlinks are made with
/// their modes, and a FIFO is listed and left out.
#[test]
fn a_clone_shares_extents_or_fails_and_never_copies() {
    let src = tempfile::tempdir().unwrap();
    let dst = tempfile::tempdir().unwrap();
    std::fs::create_dir(src.path().join("d")).unwrap();
    std::fs::write(src.path().join("d/empty"), b"").unwrap();
    std::fs::set_permissions(
        src.path().join("d/empty"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    std::os::unix::fs::symlink("d/empty", src.path().join("l")).unwrap();
    let fifo = std::ffi::CString::new(src.path().join("p").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let source = Jail::new(JailConfig::new(vec![RootConfig::read_only(
        "s",
        src.path(),
    )]))
    .unwrap();
    let mut config = JailConfig::new(vec![RootConfig::writable("d", dst.path())]);
    config.globs.clear();
    let target = Jail::new(config).unwrap();
    let from = JailPath::in_root("s", ".");
    let clone_source = CloneSource {
        jail: &source,
        path: &from,
        several_names: false,
    };
    let report = target
        .clone_tree(
            &clone_source,
            &JailPath::in_root("d", "c"),
            &mut |_| CloneChoice::Clone,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!((report.files, report.symlinks, report.dirs), (1, 1, 2));
    assert_eq!(report.skipped.len(), 1, "{:?}", report.skipped);
    let made = std::fs::metadata(dst.path().join("c/d/empty")).unwrap();
    assert_eq!(made.permissions().mode() & 0o777, 0o751);
    assert_eq!(
        std::fs::read_link(dst.path().join("c/l")).unwrap(),
        Path::new("d/empty")
    );
    std::fs::write(src.path().join("d/full"), b"content").unwrap();
    let again = target.clone_tree(
        &clone_source,
        &JailPath::in_root("d", "again"),
        &mut |_| CloneChoice::Clone,
        &mut |_| {},
    );
    match again {
        // A temp dir on xfs or btrfs shares the extents.
        Ok(report) => assert_eq!(report.bytes, 7),
        Err(err) => {
            let errno = err.raw_os_error().unwrap_or_else(|| panic!("{err}"));
            assert!(
                [libc::EOPNOTSUPP, libc::EINVAL, libc::EXDEV].contains(&errno),
                "{err}"
            );
            let copied = std::fs::read(dst.path().join("again/d/full")).unwrap_or_default();
            assert!(copied.is_empty(), "bytes were copied");
        }
    }
}
