//! The Linux create-time guard (SPEC G1, C3), black-box: the real
//! `cc_server run --backend bwrap` under the default dispatch policy (so the
//! guard is on, as the probe self-tests) runs attacks against temp dirs made
//! here, and every attempt is checked on the HOST afterwards: the forbidden
//! name is absent, the protected file unchanged, and the refusal was reported
//! as an exact `violation` where the guard saw the call. Legitimate work
//! (git, tar, venvs, npm, standard streams) must keep working inside it.
//!
//! The attacks that need raw syscalls (io_uring, `int $0x80`, openat2, the
//! two-thread race, a non-dumpable process, chroot, O_TMPFILE) are small C
//! programs written here, compiled with the host's `cc` into a temp dir and
//! copied into the bound work dir. Each one, like each shell script, first
//! checks that PID 1 is `sandbox-init` and stops (exit 99) otherwise, so a
//! run that accidentally escaped the sandbox harms nothing.
//!
//! Without `/usr/bin/bwrap` the tests say so and pass, except on CI.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::util::*;

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `cc_server run --backend bwrap FLAGS… -- ARGV…` from `cwd`, under the
/// default dispatch policy (the guard is on), the sandbox layer alone
/// ([`SANDBOX_LAYER_ONLY`]).
fn guard_run(plugins: &Plugins, cwd: &Path, flags: &[&str], argv: &[&str]) -> Output {
    guard_run_config(plugins, SANDBOX_LAYER_ONLY, cwd, flags, argv)
}

/// [`guard_run`] with a config of its own.
fn guard_run_config(
    plugins: &Plugins,
    config: &str,
    cwd: &Path,
    flags: &[&str],
    argv: &[&str],
) -> Output {
    let out = CcServer::new(plugins)
        .config(config)
        .current_dir(cwd)
        .arg("run")
        .args(["--backend", "bwrap"])
        .args(flags)
        .arg("--")
        .args(argv)
        .output();
    assert_ne!(
        out.status.code(),
        Some(125),
        "cc_server itself failed; stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// The first line of every script: unless PID 1 is `sandbox-init` (so the
/// script really runs in a bwrap sandbox) it stops before doing anything.
const ONLY_IN_A_SANDBOX: &str = "grep -q sandbox-init /proc/1/cmdline 2>/dev/null \
    || { echo 'cc-test: not in a bwrap sandbox; refusing to run the script' >&2; exit 99; }\n";

/// [`guard_run`] of `sh -c SCRIPT`, behind [`ONLY_IN_A_SANDBOX`].
fn guard_sh(plugins: &Plugins, cwd: &Path, flags: &[&str], script: &str) -> Output {
    let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
    guard_run(plugins, cwd, flags, &["sh", "-c", &guarded])
}

/// A file's permission bits (`rwx` for owner, group and others).
fn permission_bits(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Asserts each label printed `=failed`.
fn assert_failed(out: &Output, labels: &[&str]) {
    for label in labels {
        assert!(
            lines(out).contains(&format!("{label}=failed")),
            "{label} was not refused\n{}",
            both(out)
        );
    }
}

/// Asserts cc_server printed `cc_server: violation: ACTION TARGET`.
fn assert_reported(out: &Output, action: &str, target: &Path) {
    let line = format!("cc_server: violation: {action} {}\n", target.display());
    assert!(
        text(&out.stderr).contains(&line),
        "no violation {action} {} was reported\n{}",
        target.display(),
        both(out)
    );
}

/// The NDJSON events of a `--json` run.
fn events(out: &Output) -> Vec<Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON ({e}): {l}")))
        .collect()
}

/// A repository made on the host without template hooks (`.git/hooks` absent).
fn host_repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    git(
        dir,
        &["-c", "init.templateDir=", "init", "-q", "-b", "main", "."],
    );
}

/// The start of every C program here: `only_in_a_sandbox()` exits 99 unless
/// PID 1 is `sandbox-init` (the commands' reaper is a fork of it), so a
/// program run by mistake on the host does nothing; `try_create(label,
/// path)` prints `LABEL=0` or `LABEL=errno` for an `open(O_CREAT |
/// O_WRONLY)`; `machinery()` counts the sandbox's own processes in `/proc`.
const C_PRELUDE: &str = r#"#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void only_in_a_sandbox(void) {
    char buf[4096];
    int fd = open("/proc/1/cmdline", O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
    if (n <= 0 || !memmem(buf, (size_t)n, "sandbox-init", 12)) {
        fprintf(stderr, "cc-test: not in a bwrap sandbox; refusing to run\n");
        exit(99);
    }
    close(fd);
}

/* How many processes the command's /proc shows of the sandbox's machinery:
   PID 1 (the supervisor) and the forwarder are `sandbox-init` by name (the
   commands' reaper, a fork of PID 1, is `pidns-reaper`). */
__attribute__((unused)) static int machinery(void) {
    DIR *d = opendir("/proc");
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0) continue;
        char p[64], comm[64] = {0}, cmdline[4096];
        snprintf(p, sizeof p, "/proc/%d/comm", pid);
        int fd = open(p, O_RDONLY);
        ssize_t n = fd < 0 ? -1 : read(fd, comm, sizeof comm - 1);
        if (fd >= 0) close(fd);
        snprintf(p, sizeof p, "/proc/%d/cmdline", pid);
        fd = open(p, O_RDONLY);
        ssize_t m = fd < 0 ? -1 : read(fd, cmdline, sizeof cmdline);
        if (fd >= 0) close(fd);
        if ((n > 0 && strstr(comm, "sandbox-init"))
            || (m > 0 && memmem(cmdline, (size_t)m, "--forwarder", 11)))
            found++;
    }
    if (d) closedir(d);
    return found;
}

__attribute__((unused)) static void try_create(const char *label, const char *path) {
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    printf("%s=%d\n", label, fd < 0 ? errno : 0);
    if (fd >= 0) close(fd);
}
"#;

/// A compiled test program in a directory of its own. Commands may exec
/// only from the system view (and nothing written inside, as writable
/// mounts are `noexec`), so its directory joins the system view through
/// the config (`system_paths`), as a user would add a trusted tool dir.
struct Program {
    dir: tempfile::TempDir,
    name: &'static str,
}

impl Program {
    /// Its path (the same inside the sandbox).
    fn path(&self) -> String {
        s(&self.dir.path().join(self.name)).to_owned()
    }

    /// [`guard_sh`] with this program's directory in the system view.
    fn sh(&self, plugins: &Plugins, cwd: &Path, flags: &[&str], script: &str) -> Output {
        self.sh_with(plugins, "", cwd, flags, script)
    }

    /// [`Program::sh`] in the same sandbox without the guard (`guard =
    /// false`, the policy lowered): what the kernel alone answers.
    fn sh_unguarded(&self, plugins: &Plugins, cwd: &Path, script: &str) -> Output {
        let unguarded = "guard = false\n[dispatch_policy]\nwrite_deny_globs = []\n";
        self.sh_with(plugins, unguarded, cwd, &[], script)
    }

    /// [`Program::sh`] with more config after `system_paths` (in
    /// `[backends.bwrap]`).
    fn sh_with(
        &self,
        plugins: &Plugins,
        more: &str,
        cwd: &Path,
        flags: &[&str],
        script: &str,
    ) -> Output {
        let config = format!(
            "{SANDBOX_LAYER_ONLY}[backends.bwrap]\nsystem_paths = [{:?}]\n{more}",
            s(self.dir.path())
        );
        let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
        guard_run_config(plugins, &config, cwd, flags, &["sh", "-c", &guarded])
    }
}

/// Compiles `source` (after [`C_PRELUDE`]) with the host's `cc` into a
/// [`Program`].
fn c_program(name: &'static str, source: &str) -> Program {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join(format!("{name}.c"));
    let bin = dir.path().join(name);
    std::fs::write(&c, format!("{C_PRELUDE}{source}")).unwrap();
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-Wall", "-o"])
        .arg(&bin)
        .arg(&c)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc (gcc is needed for these tests): {e}"));
    assert!(
        out.status.success(),
        "cc failed on {name}.c:\n{}",
        text(&out.stderr)
    );
    Program { dir, name }
}

/// `NAME=N` from a program's output, as a number.
fn reading(out: &Output, name: &str) -> i64 {
    let prefix = format!("{name}=");
    lines(out)
        .iter()
        .flat_map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find_map(|w| w.strip_prefix(&prefix).and_then(|v| v.parse().ok()))
        .unwrap_or_else(|| panic!("no {name}= in the output\n{}", both(out)))
}

// ------------------------------------------------------------ bypasses

/// G1, C3: a new `.env`, `.env.*`, `*.pem`, `*.key`, rc file at the top of
/// the root, `.mcp.json` or `.claude/…` cannot be created by the usual
/// routes (shell redirect, append, touch, cp, python, nested dirs); each is
/// reported as `file-write-create` with its absolute path; ordinary names
/// and an rc file below the top stay creatable. Host: every forbidden name
/// absent, the allowed ones present.
#[test]
fn direct_creates_of_protected_names_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let mut script = String::from("mkdir -p deep/er sub\n");
    script += &attempt("redirect", "echo x > x.pem");
    script += &attempt("env", "echo SECRET=1 > .env");
    script += &attempt("env-local", "echo SECRET=1 > .env.local");
    script += &attempt("key", "echo x > sub.key");
    script += &attempt("append", "echo x >> app.key");
    script += &attempt("touch", "touch t.pem");
    script += &attempt("cp", "echo data > data.txt && cp data.txt copy.pem");
    script += &attempt("nested", "echo x > deep/er/y.pem");
    script += &attempt("nested-env", "echo x > deep/.env");
    script += &attempt(
        "python",
        "/usr/bin/python3 -c \"open('py.pem', 'w').write('x')\"",
    );
    script += &attempt("bashrc", "echo 'echo PWNED' > .bashrc");
    script += &attempt("mcp", "echo '{}' > .mcp.json");
    script += &attempt(
        "claude",
        "mkdir -p .claude && echo '{}' > .claude/settings.json",
    );
    script += &attempt("plain", "echo ok > x.txt");
    script += &attempt("nested-plain", "echo ok > deep/er/y.txt");
    script += &attempt("rc-below-top", "echo ok > sub/.bashrc");
    let out = guard_sh(&plugins, w, &[], &script);
    assert_failed(
        &out,
        &[
            "redirect",
            "env",
            "env-local",
            "key",
            "append",
            "touch",
            "cp",
            "nested",
            "nested-env",
            "python",
            "bashrc",
            "mcp",
            "claude",
        ],
    );
    for label in ["plain", "nested-plain", "rc-below-top"] {
        assert_line(&out, &format!("{label}=ok"));
    }
    for name in [
        "x.pem",
        ".env",
        ".env.local",
        "sub.key",
        "app.key",
        "t.pem",
        "copy.pem",
        "deep/er/y.pem",
        "deep/.env",
        "py.pem",
        ".bashrc",
        ".mcp.json",
        ".claude",
    ] {
        assert_absent(&w.join(name), &out);
        assert_reported(&out, "file-write-create", &w.join(name));
    }
    assert_eq!(std::fs::read_to_string(w.join("x.txt")).unwrap(), "ok\n");
    assert_eq!(
        std::fs::read_to_string(w.join("deep/er/y.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("sub/.bashrc")).unwrap(),
        "ok\n"
    );
}

/// G1, C3 (Seatbelt's unlink deny on denied paths): no rename into a
/// protected name (`*.pem`, `.env`, over `.git/config`), out of one (an
/// existing `*.pem`, `.git/config`, `.git/hooks/pre-commit`), nor an
/// exchange of one; `.git` and `.git/hooks` can be neither renamed away nor
/// made by renaming a prepared directory into place (`mv x .git` would turn
/// `x/hooks/*` into hooks). Host: no forbidden name appeared, both repos and
/// the protected file are byte-for-byte unchanged.
#[test]
fn renames_into_and_out_of_protected_names_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(w.join("existing.pem"), "secret\n").unwrap();
    std::fs::create_dir(w.join("plain")).unwrap();
    // a: no hooks directory; b: one with a hook in it.
    host_repo(&w.join("repo-a"));
    host_repo(&w.join("repo-b"));
    std::fs::create_dir(w.join("repo-b/.git/hooks")).unwrap();
    std::fs::write(w.join("repo-b/.git/hooks/pre-commit"), "#!/bin/sh\n").unwrap();
    let (a_before, b_before) = (snapshot(&w.join("repo-a")), snapshot(&w.join("repo-b")));
    let mut script = String::from("echo y > y.txt\n");
    script += &attempt("into-pem", "mv y.txt moved.pem");
    script += &attempt("into-env", "mv y.txt .env");
    script += &attempt("out-of-pem", "mv existing.pem out.txt");
    script += &attempt(
        "exchange",
        "/usr/bin/python3 -c \"import ctypes, sys\n\
l = ctypes.CDLL(None, use_errno=True)\n\
sys.exit(1 if l.renameat2(-100, b'keep.txt', -100, b'existing.pem', 2) else 0)\"",
    );
    script += &attempt(
        "into-git",
        "mkdir -p plain/x/hooks && echo evil > plain/x/hooks/pre-commit && mv plain/x plain/.git",
    );
    script += &attempt(
        "into-hooks",
        "mkdir -p h && echo evil > h/post-commit && mv h repo-a/.git/hooks",
    );
    script += &attempt(
        "onto-config",
        "printf '[core]\\n\\thooksPath = /tmp\\n' > cfg && mv cfg repo-a/.git/config",
    );
    script += &attempt("git-away", "mv repo-a/.git repo-a/git-old");
    script += &attempt("hooks-away", "mv repo-b/.git/hooks repo-b/.git/hooks-old");
    script += &attempt("hook-away", "mv repo-b/.git/hooks/pre-commit repo-b/pc");
    script += &attempt(
        "config-away",
        "mv repo-a/.git/config repo-a/.git/config.old",
    );
    script += &attempt(
        "plain-rename",
        "mv keep.txt kept.txt && mv kept.txt keep.txt",
    );
    let out = guard_sh(&plugins, w, &[], &script);
    assert_failed(
        &out,
        &[
            "into-pem",
            "into-env",
            "out-of-pem",
            "exchange",
            "into-git",
            "into-hooks",
            "onto-config",
            "git-away",
            "hooks-away",
            "hook-away",
            "config-away",
        ],
    );
    assert_line(&out, "plain-rename=ok");
    for name in [
        "moved.pem",
        ".env",
        "out.txt",
        "plain/.git",
        "repo-a/.git/hooks",
        "repo-a/git-old",
        "repo-b/.git/hooks-old",
        "repo-b/pc",
        "repo-a/.git/config.old",
    ] {
        assert_absent(&w.join(name), &out);
    }
    assert_eq!(
        std::fs::read_to_string(w.join("existing.pem")).unwrap(),
        "secret\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("keep.txt")).unwrap(),
        "keep\n"
    );
    assert_eq!(std::fs::read_to_string(w.join("y.txt")).unwrap(), "y\n");
    assert_eq!(snapshot(&w.join("repo-a")), a_before, "{}", both(&out));
    assert_eq!(snapshot(&w.join("repo-b")), b_before, "{}", both(&out));
    assert_reported(&out, "file-write-create", &w.join("moved.pem"));
    assert_reported(&out, "file-write-create", &w.join(".env"));
    assert_reported(&out, "file-write-unlink", &w.join("existing.pem"));
    assert_reported(&out, "file-write-create", &w.join("plain/.git"));
    assert_reported(&out, "file-write-create", &w.join("repo-a/.git/hooks"));
    assert_reported(&out, "file-write-unlink", &w.join("repo-a/.git"));
    assert_reported(&out, "file-write-unlink", &w.join("repo-b/.git/hooks"));
    assert_reported(
        &out,
        "file-write-unlink",
        &w.join("repo-b/.git/hooks/pre-commit"),
    );
    assert_reported(&out, "file-write-unlink", &w.join("repo-a/.git/config"));
}

/// G1, C3: a hard link cannot give a protected name to a file, nor a new
/// name to a protected file (nor to a hard link of one made before the
/// run); a symlink cannot be a protected name, and writing through a
/// symlink (relative, absolute, a chain, a directory link) to a protected
/// name is refused — creating or changing it. Host: no forbidden name, the
/// protected file unchanged; ordinary links work.
#[test]
fn links_cannot_reach_a_protected_name() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(w.join("plain.txt"), "plain\n").unwrap();
    std::fs::write(w.join("existing.pem"), "secret\n").unwrap();
    std::fs::hard_link(w.join("existing.pem"), w.join("innocent.txt")).unwrap();
    std::fs::create_dir(w.join("sub")).unwrap();
    let mut script = String::new();
    script += &attempt("hard-to", "ln keep.txt hard.key");
    script += &attempt("hard-from", "ln existing.pem alias.txt");
    script += &attempt("old-alias", "echo evil >> innocent.txt");
    script += &attempt("symlink-named", "ln -s /etc/passwd sym.pem");
    script += &attempt("through", "ln -s new.pem trap.txt && echo x > trap.txt");
    script += &attempt(
        "through-existing",
        "ln -s existing.pem trap2.txt && echo evil >> trap2.txt",
    );
    script += &attempt(
        "through-absolute",
        &format!("ln -s {}/abs.key abs.txt && echo x > abs.txt", s(w)),
    );
    script += &attempt(
        "through-chain",
        "ln -s hop2 hop1 && ln -s chain.pem hop2 && echo x > hop1",
    );
    script += &attempt(
        "through-dir",
        "ln -s sub dirlink && echo x > dirlink/via.pem",
    );
    script += &attempt("hard-plain", "ln plain.txt hard.txt");
    script += &attempt(
        "soft-plain",
        "ln -s plain.txt soft.txt && echo more >> soft.txt",
    );
    let out = guard_sh(&plugins, w, &[], &script);
    assert_failed(
        &out,
        &[
            "hard-to",
            "hard-from",
            "old-alias",
            "symlink-named",
            "through",
            "through-existing",
            "through-absolute",
            "through-chain",
            "through-dir",
        ],
    );
    assert_line(&out, "hard-plain=ok");
    assert_line(&out, "soft-plain=ok");
    for name in [
        "hard.key",
        "alias.txt",
        "sym.pem",
        "new.pem",
        "abs.key",
        "chain.pem",
        "sub/via.pem",
    ] {
        assert_absent(&w.join(name), &out);
    }
    assert_eq!(
        std::fs::read_to_string(w.join("existing.pem")).unwrap(),
        "secret\n",
        "{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(w.join("plain.txt")).unwrap(),
        "plain\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("hard.txt")).unwrap(),
        "plain\nmore\n"
    );
    assert_reported(&out, "file-write-create", &w.join("hard.key"));
    assert_reported(&out, "file-write-data", &w.join("existing.pem"));
    assert_reported(&out, "file-write-data", &w.join("innocent.txt"));
    assert_reported(&out, "file-write-create", &w.join("sym.pem"));
    assert_reported(&out, "file-write-create", &w.join("new.pem"));
    assert_reported(&out, "file-write-create", &w.join("abs.key"));
    assert_reported(&out, "file-write-create", &w.join("chain.pem"));
    assert_reported(&out, "file-write-create", &w.join("sub/via.pem"));
}

/// G1: mknod (a fifo, a regular file made by mknod) and mkdir cannot make a
/// protected name: `*.pem`, `*.key`, `.env`, `.env.*`, `.claude`. A missing
/// `.git/hooks` of a repository made inside may be made as an empty
/// directory (G4: libgit2, JGit and `cargo new` do), one of a repository of
/// launch not (G5, the git metadata allowlist); nothing can be made in it —
/// a hook planted there would run on the host — and no symlink can take
/// its place (it would lead the hooks out of the rules' sight). Host: none of the
/// protected names exists, the hooks directory is empty; ordinary fifos and
/// dirs are made.
#[test]
fn mknod_and_mkdir_of_protected_names_are_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    host_repo(&w.join("repo"));
    let mut script = String::new();
    script += &attempt("fifo", "mkfifo fifo.pem");
    script += &attempt(
        "mknod",
        "/usr/bin/python3 -c \"import os, stat; os.mknod('node.key', stat.S_IFREG | 0o600)\"",
    );
    script += &attempt("dir-pem", "mkdir dir.pem");
    script += &attempt("dir-env", "mkdir .env");
    script += &attempt("dir-env-d", "mkdir -p deep/.env.d");
    script += &attempt("dir-claude", "mkdir .claude");
    // In a repository made inside, the empty hooks directory may be made;
    // in one of launch not even that (the git metadata allowlist).
    script += &attempt("dir-hooks", "git init -q fresh && mkdir fresh/.git/hooks");
    script += &attempt(
        "hook-in-it",
        "echo 'touch PWNED' > fresh/.git/hooks/pre-commit",
    );
    script += &attempt("dir-in-it", "mkdir fresh/.git/hooks/sub");
    script += &attempt("dir-hooks-of-launch", "mkdir repo/.git/hooks");
    host_repo(&w.join("repo2"));
    script += &attempt(
        "hooks-symlink",
        "mkdir elsewhere && ln -s ../../elsewhere repo2/.git/hooks",
    );
    script += &attempt(
        "git-symlink",
        "mkdir -p plain2 other/hooks && ln -s ../other plain2/.git",
    );
    script += &attempt("fifo-plain", "mkfifo fifo.txt");
    script += &attempt("dir-plain", "mkdir dir.txt");
    let out = guard_sh(&plugins, w, &[], &script);
    assert_failed(
        &out,
        &[
            "fifo",
            "mknod",
            "dir-pem",
            "dir-env",
            "dir-env-d",
            "dir-claude",
            "hook-in-it",
            "dir-in-it",
            "dir-hooks-of-launch",
            "hooks-symlink",
            "git-symlink",
        ],
    );
    assert_line(&out, "fifo-plain=ok");
    assert_line(&out, "dir-plain=ok");
    assert_line(&out, "dir-hooks=ok");
    for name in [
        "fifo.pem",
        "node.key",
        "dir.pem",
        ".env",
        "deep/.env.d",
        ".claude",
        "fresh/.git/hooks/pre-commit",
        "fresh/.git/hooks/sub",
        "repo/.git/hooks",
        "repo2/.git/hooks",
        "plain2/.git",
    ] {
        assert_absent(&w.join(name), &out);
        assert_reported(&out, "file-write-create", &w.join(name));
    }
    assert!(w.join("fresh/.git/hooks").is_dir());
    assert_eq!(
        std::fs::read_dir(w.join("fresh/.git/hooks"))
            .unwrap()
            .count(),
        0,
        "{}",
        both(&out)
    );
    assert!(w.join("dir.txt").is_dir());
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(w.join("fifo.txt"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

/// The O_TMPFILE program: an unnamed file, then linkat to give it a name,
/// by descriptor (AT_EMPTY_PATH) and by its `/proc/self/fd` name.
const TMPFILE_C: &str = r#"
static void show(const char *what, int rc) {
    printf("%s=%d\n", what, rc < 0 ? errno : 0);
}

int main(void) {
    only_in_a_sandbox();
    int fd = open(".", O_TMPFILE | O_WRONLY, 0600);
    show("tmpfile", fd);
    if (fd < 0) return 1;
    if (write(fd, "secret\n", 7) != 7) return 1;
    char via[64];
    snprintf(via, sizeof via, "/proc/self/fd/%d", fd);
    show("empty-path", linkat(fd, "", AT_FDCWD, "tmp1.pem", AT_EMPTY_PATH));
    show("proc-fd", linkat(AT_FDCWD, via, AT_FDCWD, "tmp2.key", AT_SYMLINK_FOLLOW));
    show("empty-path-plain", linkat(fd, "", AT_FDCWD, "tmp3.txt", AT_EMPTY_PATH));
    show("proc-fd-plain", linkat(AT_FDCWD, via, AT_FDCWD, "tmp4.txt", AT_SYMLINK_FOLLOW));
    return 0;
}
"#;

/// G1: an O_TMPFILE file has no name to judge when it is made, but linking
/// it into the tree is judged: by descriptor (AT_EMPTY_PATH) to `tmp1.pem`
/// is refused with EACCES and reported; by its `/proc/self/fd` name to
/// `tmp2.key` is refused too. Host: neither exists; linking to an ordinary
/// name by descriptor works, with the data written.
#[test]
fn an_unnamed_file_cannot_be_linked_to_a_protected_name() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program("tmpfile", TMPFILE_C);
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "tmpfile"), 0);
    assert_eq!(reading(&out, "empty-path"), i64::from(libc::EACCES));
    assert_ne!(reading(&out, "proc-fd"), 0, "{}", both(&out));
    assert_eq!(reading(&out, "empty-path-plain"), 0);
    assert_absent(&w.join("tmp1.pem"), &out);
    assert_absent(&w.join("tmp2.key"), &out);
    assert_reported(&out, "file-write-create", &w.join("tmp1.pem"));
    assert_eq!(
        std::fs::read_to_string(w.join("tmp3.txt")).unwrap(),
        "secret\n"
    );
}

/// G1 (the usual way to name an O_TMPFILE, man 2 open): `linkat` of its
/// `/proc/self/fd/N` name with AT_SYMLINK_FOLLOW works for an ordinary name
/// and is refused with EACCES (and reported) for a protected one, as the
/// research measured (docs/research/linux-create-deny.md §3.3).
#[test]
fn an_unnamed_file_can_be_linked_by_its_proc_fd_name() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program("tmpfile", TMPFILE_C);
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "proc-fd-plain"), 0, "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(w.join("tmp4.txt")).unwrap(),
        "secret\n"
    );
    assert_eq!(reading(&out, "proc-fd"), i64::from(libc::EACCES));
    assert_absent(&w.join("tmp2.key"), &out);
    assert_reported(&out, "file-write-create", &w.join("tmp2.key"));
}

/// G1, C2: io_uring creates files without a syscall seccomp could see, so
/// `io_uring_setup` must fail (ENOSYS) and no ring exists. The program sets
/// a ring up by hand and, should that work, asks it to create `uring.pem`.
/// Host: `uring.pem` absent.
#[test]
fn io_uring_is_unavailable_so_no_ring_creates_anything() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "uring",
        r#"
#include <linux/io_uring.h>
#include <sys/mman.h>
#include <sys/syscall.h>

int main(void) {
    only_in_a_sandbox();
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    long ring = syscall(SYS_io_uring_setup, 4, &p);
    if (ring < 0) {
        printf("setup=%d\n", errno);
        return 0;
    }
    printf("setup=0\n");
    size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                    IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                    IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes = mmap(0, p.sq_entries * sizeof(struct io_uring_sqe),
                                     PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                                     IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
        printf("mmap=%d\n", errno);
        return 0;
    }
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
    unsigned slot = *tail & *(unsigned *)(sq + p.sq_off.ring_mask);
    struct io_uring_sqe *e = &sqes[slot];
    memset(e, 0, sizeof *e);
    e->opcode = IORING_OP_OPENAT;
    e->fd = AT_FDCWD;
    e->addr = (unsigned long)"uring.pem";
    e->open_flags = O_CREAT | O_WRONLY;
    e->len = 0644;
    ((unsigned *)(sq + p.sq_off.array))[slot] = slot;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    long n = syscall(SYS_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, 0, 0);
    if (n < 0) {
        printf("enter=%d\n", errno);
        return 0;
    }
    struct io_uring_cqe *c = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    unsigned head = *(unsigned *)(cq + p.cq_off.head) & *(unsigned *)(cq + p.cq_off.ring_mask);
    printf("enter=0 res=%d\n", c[head].res);
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "setup"), i64::from(libc::ENOSYS));
    assert_absent(&w.join("uring.pem"), &out);
}

/// G1, C2, F10: the i386 entry point (`int $0x80` from a 64-bit process,
/// `open("ia32.pem", O_CREAT)` by the i386 number) would bypass a filter
/// that judges syscall numbers only: the process is killed with SIGSYS,
/// reported as exit 159 (128 + 31) and, with `--json`, `signal` 31. Host:
/// `ia32.pem` absent.
#[test]
fn the_ia32_entry_point_kills_the_process() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "ia32",
        r#"
#include <sys/mman.h>

int main(void) {
    only_in_a_sandbox();
    /* int $0x80 takes 32-bit pointers: the name must live below 4 GiB. */
    char *low = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
    if (low == MAP_FAILED) {
        printf("mmap=%d\n", errno);
        return 2;
    }
    strcpy(low, "ia32.pem");
    printf("calling\n");
    fflush(stdout);
    long ret;
    /* 5 is open in the i386 table; 0101 is O_CREAT|O_WRONLY. */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(5L), "b"(low), "c"(0101L), "d"(0644L) : "memory");
    printf("returned=%ld\n", ret);
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &format!("exec {}", prog.path()));
    assert_eq!(code(&out), 128 + libc::SIGSYS, "{}", both(&out));
    assert_line(&out, "calling");
    assert!(!text(&out.stdout).contains("returned="), "{}", both(&out));
    assert_absent(&w.join("ia32.pem"), &out);

    let out = prog.sh(&plugins, w, &["--json"], &format!("exec {}", prog.path()));
    let events = events(&out);
    let exit = events.last().unwrap();
    assert_eq!(exit["type"], "exit", "{events:?}");
    assert_eq!(exit["exitCode"], 128 + libc::SIGSYS, "{events:?}");
    assert_eq!(exit["signal"], libc::SIGSYS, "{events:?}");
    assert_absent(&w.join("ia32.pem"), &out);
}

/// G1: `openat2` carries its flags behind a pointer seccomp cannot read, so
/// it gets ENOSYS whatever the name (libraries fall back to openat). Host:
/// neither `o2.pem` nor `o2.txt` was created.
#[test]
fn openat2_gets_enosys() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "o2",
        r#"
#include <linux/openat2.h>
#include <sys/syscall.h>

static void try(const char *label, const char *path) {
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = O_CREAT | O_WRONLY;
    how.mode = 0644;
    long fd = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
    printf("%s=%d\n", label, fd < 0 ? errno : 0);
}

int main(void) {
    only_in_a_sandbox();
    try("pem", "o2.pem");
    try("txt", "o2.txt");
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "pem"), i64::from(libc::ENOSYS));
    assert_eq!(reading(&out, "txt"), i64::from(libc::ENOSYS));
    assert_absent(&w.join("o2.pem"), &out);
    assert_absent(&w.join("o2.txt"), &out);
}

/// G1, C2: a chrooted tracee would make a careless supervisor resolve its
/// absolute paths against the wrong root (confused deputy); chroot is
/// refused outright (EPERM, the hardening filter). Host: nothing created in
/// the would-be jail, the work dir or the host's `/`.
#[test]
fn chroot_is_refused_so_no_confused_deputy() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::create_dir(w.join("jail")).unwrap();
    let name = format!("cd-{}.pem", unique());
    let prog = c_program(
        "jailed",
        r#"
int main(int argc, char **argv) {
    only_in_a_sandbox();
    if (argc < 2) return 2;
    printf("chroot=%d\n", chroot("jail") < 0 ? errno : 0);
    int fd = open(argv[1], O_CREAT | O_WRONLY, 0644);
    printf("open=%d\n", fd < 0 ? errno : 0);
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &format!("{} /{name}", prog.path()));
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "chroot"), i64::from(libc::EPERM));
    assert_absent(&w.join("jail").join(&name), &out);
    assert_absent(&w.join(&name), &out);
    assert_absent(&Path::new("/").join(&name), &out);
}

/// G1 (§2.2, §2.5 item 1): a process that makes itself non-dumpable (ssh
/// does, gpg-agent does) still has its creates judged, not failed: the
/// supervisor keeps CAP_SYS_PTRACE in PID 1's own user namespace (commands
/// keep nothing) and reads its path arguments. Host: `x.pem` absent,
/// `x.txt` created.
#[test]
fn a_non_dumpable_process_is_guarded_like_any_other() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "nodump",
        r#"
#include <sys/prctl.h>

int main(void) {
    only_in_a_sandbox();
    printf("prctl=%d\n", prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
    printf("dumpable=%d\n", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
    try_create("x.pem", "x.pem");
    try_create("x.txt", "x.txt");
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "prctl"), 0);
    assert_eq!(reading(&out, "dumpable"), 0, "the attack did not happen");
    assert_eq!(
        reading(&out, "x.pem"),
        i64::from(libc::EACCES),
        "{}",
        both(&out)
    );
    assert_absent(&w.join("x.pem"), &out);
    assert_reported(&out, "file-write-create", &w.join("x.pem"));
    assert_eq!(reading(&out, "x.txt"), 0, "{}", both(&out));
    assert!(w.join("x.txt").exists(), "{}", both(&out));
}

/// G1 (process layout, §2.2), T4: commands live in a pid namespace below
/// the supervisor's, so no pid they can name is the supervisor, and their
/// `/proc` is that namespace's (SPEC G4: `ps`, `/proc/self`, `/proc/$$`
/// agree with `getpid`). Its pid 1 is the reaper: SIGKILL and SIGSTOP aimed
/// at it, and a pidfd on it, reach nothing of the guard's; its cwd and
/// memory stay closed; no process of the sandbox's machinery (PID 1, the
/// forwarder) shows in that `/proc` at all. Host: afterwards `after.pem` is
/// still refused (absent) and `after.txt` created — the supervisor kept
/// serving.
#[test]
fn commands_cannot_name_the_supervisor() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "pidns",
        r#"
#include <signal.h>
#include <sys/syscall.h>

int main(void) {
    only_in_a_sandbox();
    char self[32] = {0};
    if (readlink("/proc/self", self, sizeof self - 1) < 0) return 3;
    printf("ownpid=%d\n", getpid());
    printf("procpid=%s\n", self);
    printf("kill1=%d\n", kill(1, SIGKILL) < 0 ? errno : 0);
    printf("stop1=%d\n", kill(1, SIGSTOP) < 0 ? errno : 0);
    int pidfd = syscall(SYS_pidfd_open, 1, 0);
    int stolen = pidfd < 0 ? -1 : syscall(SYS_pidfd_getfd, pidfd, 0, 0);
    printf("getfd=%d\n", stolen < 0 ? errno : 0);
    /* /proc is the commands' namespace's: its pid 1 is the reaper. */
    char link[256], comm[64] = {0};
    int cfd = open("/proc/1/comm", O_RDONLY);
    if (cfd >= 0) { read(cfd, comm, sizeof comm - 1); close(cfd); }
    printf("comm1=%s", comm);
    printf("machinery=%d\n", machinery());
    printf("cwd1=%d\n", readlink("/proc/1/cwd", link, sizeof link) < 0 ? errno : 0);
    int mem = open("/proc/1/mem", O_RDONLY);
    printf("mem1=%d\n", mem < 0 ? errno : 0);
    try_create("after.pem", "after.pem");
    try_create("after.txt", "after.txt");
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    // /proc is the command's own namespace's: it shows our own pid.
    assert_eq!(
        reading(&out, "ownpid"),
        reading(&out, "procpid"),
        "the command's /proc is not its pid namespace's\n{}",
        both(&out)
    );
    assert_line(&out, "comm1=pidns-reaper");
    assert_eq!(
        reading(&out, "machinery"),
        0,
        "the sandbox's machinery shows in the commands' /proc\n{}",
        both(&out)
    );
    assert_ne!(
        reading(&out, "getfd"),
        0,
        "a descriptor of pid 1 was taken\n{}",
        both(&out)
    );
    assert_ne!(
        reading(&out, "cwd1"),
        0,
        "the supervisor's cwd was read\n{}",
        both(&out)
    );
    assert_ne!(
        reading(&out, "mem1"),
        0,
        "the supervisor's memory was opened\n{}",
        both(&out)
    );
    assert_ne!(reading(&out, "after.pem"), 0, "{}", both(&out));
    assert_absent(&w.join("after.pem"), &out);
    assert_eq!(
        reading(&out, "after.txt"),
        0,
        "the guard stopped serving\n{}",
        both(&out)
    );
    assert!(w.join("after.txt").exists(), "{}", both(&out));
}

/// Threat model T4, T8: the forwarder holds its channel
/// to the proxy and every handed-off upstream socket — host sockets, which
/// could be disconnected and connected anywhere. A command holding a live
/// handed-off tunnel cannot even name the forwarder: the commands' `/proc`
/// is their own pid namespace's, where it has no pid (no process there has
/// its command line), so none of its descriptors is reachable — not by
/// reading `/proc/<pid>/fd/N`, opening its entries, a `/proc/<pid>`
/// descriptor given to `pidfd_getfd`, `/proc/<pid>/mem` or `environ`; the
/// proxy's forwarder socket is not in the sandbox; the command's own
/// descriptors show through the same route, and the tunnel keeps working.
/// With the guard and without (the kernel alone answers).
#[test]
fn commands_cannot_reach_the_forwarders_descriptors() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let bulk = crate::net::BulkServer::start(10);
    let prog = c_program(
        "forwarder",
        r#"
#include <dirent.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>

static int forwarder_pid(void) {
    DIR *proc = opendir("/proc");
    struct dirent *e;
    while (proc && (e = readdir(proc))) {
        int pid = atoi(e->d_name);
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        int fd = pid > 0 ? open(path, O_RDONLY) : -1;
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf);
        if (fd >= 0) close(fd);
        if (n > 0 && memmem(buf, (size_t)n, "--forwarder", 11)) return pid;
    }
    return -1;
}

/* Reads up to the end of a response head (or the end). */
static int head(int s, char *buf, size_t size) {
    size_t got = 0;
    while (got < size - 1) {
        ssize_t n = read(s, buf + got, size - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
        buf[got] = 0;
        if (strstr(buf, "\r\n\r\n")) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    only_in_a_sandbox();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in proxy = { .sin_family = AF_INET, .sin_port = htons(3128) };
    proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&proxy, sizeof proxy) != 0) return 3;
    char buf[4096], path[64], link[256];
    int n = snprintf(buf, sizeof buf, "CONNECT bulk.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", argv[1]);
    if (write(s, buf, n) != n || head(s, buf, sizeof buf)) return 4;
    printf("tunnel=%d\n", strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : 1);
    int pid = forwarder_pid();
    printf("found=%d\n", pid > 0 ? 0 : 1);
    int links = 0, opens = 0;
    for (int fd = 0; fd < 64; fd++) {
        snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
        if (readlink(path, link, sizeof link) >= 0) links++;
        int o = open(path, O_RDWR);
        if (o >= 0) { opens++; close(o); }
        o = open(path, O_PATH);
        if (o >= 0) { opens++; close(o); }
    }
    printf("fdlinks=%d\nfdopens=%d\n", links, opens);
    snprintf(path, sizeof path, "/proc/%d", pid);
    int dir = open(path, O_DIRECTORY | O_RDONLY);
    int taken = 0;
    for (int fd = 0; dir >= 0 && fd < 64; fd++)
        if (syscall(SYS_pidfd_getfd, dir, fd, 0) >= 0) taken++;
    printf("getfd=%d\n", taken);
    snprintf(path, sizeof path, "/proc/%d/mem", pid);
    int mem = open(path, O_RDONLY);
    printf("mem=%d\n", mem < 0 ? errno : 0);
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    int env = open(path, O_RDONLY);
    printf("environ=%d\n", env < 0 ? errno : 0);
    printf("channel=%d\n", access("/.sandbox-egress/forwarder.sock", F_OK) == 0 ? 0 : errno);
    snprintf(path, sizeof path, "/proc/self/fd/%d", s);
    printf("own=%d\n", readlink(path, link, sizeof link) >= 0 ? 0 : errno);
    const char *get = "GET / HTTP/1.1\r\nHost: bulk.test\r\n\r\n";
    if (write(s, get, strlen(get)) != (ssize_t)strlen(get) || head(s, buf, sizeof buf)) return 5;
    printf("after=%d\n", strncmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : 1);
    return 0;
}
"#,
    );
    let port = bulk.port().to_string();
    let flags = [
        "--allow-domain",
        "bulk.test",
        "--allow-private",
        "bulk.test",
        "--resolve",
        "bulk.test:127.0.0.1",
    ];
    let script = format!("{} {port}", prog.path());
    let guarded = prog.sh(&plugins, w, &flags, &script);
    let unguarded = prog.sh_with(
        &plugins,
        "guard = false\n[dispatch_policy]\nwrite_deny_globs = []\n",
        w,
        &flags,
        &script,
    );
    for out in [&guarded, &unguarded] {
        assert_eq!(code(out), 0, "{}", both(out));
        for (name, want_zero) in [
            ("tunnel", true),
            ("found", false),
            ("fdlinks", true),
            ("fdopens", true),
            ("getfd", true),
            ("own", true),
            ("after", true),
            ("mem", false),
            ("environ", false),
            ("channel", false),
        ] {
            let value = reading(out, name);
            assert_eq!(value == 0, want_zero, "{name}={value}\n{}", both(out));
        }
    }
}

/// G1 (process layout, docs/research/linux-create-deny.md §2.2 "D1", and
/// §2.5 item 9, confused deputy):
/// the supervisor creates files for the commands inside PID 1's Landlock
/// domain, which allows writing only beneath the writable mounts the
/// sandbox was given. bubblewrap's scratch root is a writable tmpfs, but a
/// create there — made by the supervisor — is refused; a command cannot
/// enter a Landlock domain of its own (the supervisor would not be bound by
/// it), and learns so with ENOSYS. What the sandbox was given keeps
/// working: a create in the work dir, a rename across its directories
/// (Landlock's REFER), /tmp, /dev/null. Host: the work dir holds exactly
/// the moved file.
#[test]
fn the_supervisor_writes_only_where_the_sandbox_may() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::create_dir(w.join("a")).unwrap();
    std::fs::create_dir(w.join("b")).unwrap();
    let scratch = format!("/d1-{}.txt", unique());
    let prog = c_program(
        "domain",
        r#"
#include <sys/syscall.h>

int main(int argc, char **argv) {
    only_in_a_sandbox();
    if (argc < 2) return 2;
    try_create("scratch", argv[1]);
    printf("scratch_after=%d\n", access(argv[1], F_OK) == 0 ? 1 : 0);
    long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1);
    printf("landlock=%ld\n", abi < 0 ? (long)errno : 0L);
    try_create("work", "a/moved.txt");
    printf("refer=%d\n", rename("a/moved.txt", "b/moved.txt") < 0 ? errno : 0);
    try_create("tmp", "/tmp/domain.txt");
    try_create("devnull", "/dev/null");
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &format!("{} {scratch}", prog.path()));
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(
        reading(&out, "scratch"),
        i64::from(libc::EACCES),
        "{}",
        both(&out)
    );
    assert_eq!(reading(&out, "scratch_after"), 0, "{}", both(&out));
    assert_eq!(
        reading(&out, "landlock"),
        i64::from(libc::ENOSYS),
        "{}",
        both(&out)
    );
    for label in ["work", "refer", "tmp", "devnull"] {
        assert_eq!(reading(&out, label), 0, "{label}\n{}", both(&out));
    }
    assert!(w.join("b/moved.txt").exists(), "{}", both(&out));
    assert_absent(&w.join("a/moved.txt"), &out);
    assert_absent(Path::new(&scratch), &out);
}

/// G1, the whole process layout for an unprivileged account (CI runs as
/// root, so as root this runs `cc_server` as `nobody`; otherwise as the
/// caller): PID 1's own user namespace (the id-map helper writes PID 1's
/// maps), the commands' pid namespace, the Landlock domain and the guard.
/// Host: `ok.txt` created by that user, `x.pem` absent, nothing in `/`.
#[test]
fn an_unprivileged_account_gets_the_whole_layout() {
    require_bwrap!();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // SAFETY: plain getters.
    let (euid, uid, gid) = unsafe {
        if libc::geteuid() == 0 {
            (0, 65534, 65534)
        } else {
            (libc::geteuid(), libc::getuid(), libc::getgid())
        }
    };
    std::os::unix::fs::chown(w, Some(uid), Some(gid)).unwrap();
    let plugins = Plugins::with_bwrap();
    // The checkout may sit below a directory `nobody` cannot enter (root's
    // home): run a copy of the binary from a directory anyone can read.
    let bin_dir = tempfile::tempdir().unwrap();
    let program = bin_dir.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut server = CcServer::with_program(&plugins, &program).current_dir(w);
    if euid == 0 {
        server = server.run_as(uid, gid);
    }
    let scratch = format!("/u-{}.txt", unique());
    let script = format!(
        "{ONLY_IN_A_SANDBOX}echo uid=$(id -u)\necho ownpid=$$\necho procpid=$(readlink /proc/self)\n\
         {}{}{}",
        attempt("ok", "touch ok.txt"),
        attempt("pem", "touch x.pem 2>/dev/null"),
        attempt("scratch", &format!("touch {scratch} 2>/dev/null")),
    );
    let out = server
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script])
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "uid"), i64::from(uid), "{}", both(&out));
    assert_ne!(
        reading(&out, "ownpid"),
        reading(&out, "procpid"),
        "{}",
        both(&out)
    );
    assert_line(&out, "ok=ok");
    assert_failed(&out, &["pem", "scratch"]);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(w.join("ok.txt")).unwrap().uid(), uid);
    assert_absent(&w.join("x.pem"), &out);
    assert_absent(Path::new(&scratch), &out);
}

/// G1 (race-free, §3.3): one thread creates whatever name a buffer holds
/// while another flips the buffer between `race.txt` and `race.pem`; with
/// check-then-continue hundreds of `race.pem` got through, with emulation
/// none may. 20,000 attempts; the refusals prove the flips reached the
/// guard. Host: `race.pem` absent, `race.txt` present.
#[test]
fn a_two_thread_path_flipping_race_creates_no_protected_file() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let prog = c_program(
        "race",
        r#"
#include <pthread.h>

static char name[] = "race.txt";
static volatile int done;

static void *flip(void *unused) {
    (void)unused;
    while (!done) {
        memcpy(name + 5, "pem", 3);
        __asm__ volatile("" ::: "memory");
        memcpy(name + 5, "txt", 3);
        __asm__ volatile("" ::: "memory");
    }
    return 0;
}

int main(int argc, char **argv) {
    only_in_a_sandbox();
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    pthread_t t;
    if (pthread_create(&t, 0, flip, 0) != 0) return 2;
    long opened = 0;
    for (long i = 0; i < rounds; i++) {
        int fd = open(name, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0) {
            opened++;
            close(fd);
        }
    }
    done = 1;
    pthread_join(t, 0);
    printf("rounds=%ld opened=%ld pem=%d txt=%d\n", rounds, opened,
           access("race.pem", F_OK) == 0, access("race.txt", F_OK) == 0);
    return 0;
}
"#,
    );
    let out = prog.sh(&plugins, w, &[], &format!("{} 20000", prog.path()));
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "rounds"), 20_000);
    assert_eq!(reading(&out, "pem"), 0, "{}", both(&out));
    assert_eq!(reading(&out, "txt"), 1, "{}", both(&out));
    assert_absent(&w.join("race.pem"), &out);
    assert!(w.join("race.txt").is_file(), "{}", both(&out));
    let refused = format!(
        "cc_server: violation: file-write-create {}\n",
        w.join("race.pem").display()
    );
    let count = text(&out.stderr).matches(&refused).count();
    assert!(
        count >= 1,
        "the guard never saw race.pem: the race did not happen\n{}",
        both(&out)
    );
    eprintln!(
        "race: {} opens succeeded, {count} refused as race.pem, 0 created",
        reading(&out, "opened")
    );
}

/// G1: the supervisor keeps each thread's working directory between calls
/// (`guard::bases`); a relative name must still land where the caller is
/// *now*. A shell's `cd`s, and a second thread's `chdir` and `fchdir`
/// (threads share one working directory): each create after them is made
/// in the new directory, and a protected name there is refused with that
/// directory's path. Host: every file where the program meant it, none
/// left where it was before.
#[test]
fn relative_names_follow_every_change_of_directory() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    for dir in ["a", "b", "t1", "t2"] {
        std::fs::create_dir(w.join(dir)).unwrap();
    }
    let prog = c_program(
        "moves",
        r#"
#include <pthread.h>

static int target = -1;
static void *move(void *path) {
    if (path) return (void *)(long)chdir((const char *)path);
    return (void *)(long)fchdir(target);
}

static int made(const char *name) {
    int fd = open(name, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

static long moved_by_a_thread(const char *path) {
    pthread_t t;
    void *rc;
    if (pthread_create(&t, 0, move, (void *)path) != 0) return -1;
    pthread_join(t, &rc);
    return (long)rc;
}

int main(void) {
    only_in_a_sandbox();
    int ok = made("p");
    ok &= moved_by_a_thread("t1") == 0;
    ok &= made("q");
    target = open("../t2", O_RDONLY | O_DIRECTORY);
    ok &= moved_by_a_thread(0) == 0;
    ok &= made("r");
    int refused = !made(".env");
    printf("ok=%d refused=%d\n", ok, refused);
    return 0;
}
"#,
    );
    let script = format!(
        "cd a && : > one && cd ../b && : > two && cd .. && : > three && {}",
        prog.path()
    );
    let out = prog.sh(&plugins, w, &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "ok"), 1, "{}", both(&out));
    assert_eq!(reading(&out, "refused"), 1, "{}", both(&out));
    for made in ["a/one", "b/two", "three", "p", "t1/q", "t2/r"] {
        assert!(w.join(made).is_file(), "{made} missing\n{}", both(&out));
    }
    for stale in ["one", "a/two", "b/three", "a/p", "q", "t1/r", "r"] {
        assert_absent(&w.join(stale), &out);
    }
    assert_absent(&w.join("t2/.env"), &out);
    assert_reported(&out, "file-write-create", &w.join("t2/.env"));
}

/// F12, G1: refusals are reported exactly — one `violation` event per
/// refused call, with the action (`file-write-create` for a new name,
/// `file-write-data` for writing an existing one, `file-write-unlink` for
/// removing or renaming one away), the absolute path refused, and a `raw`
/// naming the guard, process and syscall — and the command's own
/// "Permission denied" lines are not guessed again as `file-access`. Ten
/// attacks, one syscall each. Host: none of them changed anything.
#[test]
fn refusals_are_reported_exactly_once() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("keep.txt"), "keep\n").unwrap();
    std::fs::write(w.join("y.txt"), "y\n").unwrap();
    std::fs::write(w.join("existing.pem"), "secret\n").unwrap();
    std::fs::write(w.join(".env.prod"), "SECRET=1\n").unwrap();
    std::fs::write(w.join("old.key"), "key\n").unwrap();
    let before = snapshot(w);
    let python = r#"import ctypes, os, sys
w = os.getcwd()
libc = ctypes.CDLL(None, use_errno=True)

def tmpfile_link(path):
    fd = os.open(w, os.O_TMPFILE | os.O_WRONLY, 0o600)
    if libc.linkat(fd, b"", -100, path.encode(), 0x1000) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), path)

attacks = [
    ("create", lambda: os.open(w + "/x.pem", os.O_CREAT | os.O_WRONLY, 0o644)),
    ("rename-into", lambda: os.rename(w + "/y.txt", w + "/r.key")),
    ("rename-out", lambda: os.rename(w + "/existing.pem", w + "/freed.txt")),
    ("hard-link", lambda: os.link(w + "/keep.txt", w + "/h.key")),
    ("follow", lambda: (os.symlink("s.pem", w + "/trap.txt"), open(w + "/trap.txt", "w"))),
    ("mknod", lambda: os.mkfifo(w + "/f.pem")),
    ("mkdir", lambda: os.mkdir(w + "/.env")),
    ("write", lambda: open(w + "/.env.prod", "a")),
    ("unlink", lambda: os.unlink(w + "/old.key")),
    ("tmpfile", lambda: tmpfile_link(w + "/t.pem")),
]
for label, attack in attacks:
    try:
        attack()
        print(label + "=ok")
    except OSError as e:
        print(label + "=failed")
        sys.stderr.write("cc-test: %s: %s\n" % (label, e))
        sys.stderr.flush()
"#;
    let script = format!("/usr/bin/python3 -c '{python}'\nrm -f trap.txt\n");
    let out = guard_sh(&plugins, w, &["--json"], &script);
    let events = events(&out);
    let expected: [(&str, &str, &str); 10] = [
        ("create", "file-write-create", "x.pem"),
        ("rename-into", "file-write-create", "r.key"),
        ("rename-out", "file-write-unlink", "existing.pem"),
        ("hard-link", "file-write-create", "h.key"),
        ("follow", "file-write-create", "s.pem"),
        ("mknod", "file-write-create", "f.pem"),
        ("mkdir", "file-write-create", ".env"),
        ("write", "file-write-data", ".env.prod"),
        ("unlink", "file-write-unlink", "old.key"),
        ("tmpfile", "file-write-create", "t.pem"),
    ];
    let stdout = joined(&events, "stdout");
    let stderr = joined(&events, "stderr");
    let violations: Vec<&Value> = events.iter().filter(|e| e["type"] == "violation").collect();
    for (label, action, name) in expected {
        assert!(
            stdout.lines().any(|l| l == format!("{label}=failed")),
            "{label} was not refused\n{events:#?}"
        );
        // The command's own complaint is there, so a guessed duplicate could be made.
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("cc-test: {label}: [Errno 13] Permission denied"))),
            "{label}: no Permission denied on stderr\n{stderr}"
        );
        let target = w.join(name);
        let target_s = s(&target);
        let exact: Vec<&&Value> = violations
            .iter()
            .filter(|v| v["target"] == target_s)
            .collect();
        assert_eq!(
            exact.len(),
            1,
            "{label}: expected one violation for {target_s}\n{violations:#?}"
        );
        assert_eq!(exact[0]["action"], action, "{label}: {:#}", exact[0]);
        let raw = exact[0]["raw"].as_str().unwrap_or_default();
        assert!(
            raw.starts_with("seccomp-unotify pid=")
                && raw.contains("comm=python3")
                && raw.contains(" syscall=")
                && raw.contains(" rule=")
                && raw.ends_with("-> EACCES"),
            "{label}: raw {raw:?}"
        );
        assert!(
            !violations.iter().any(|v| v["action"] == "file-access"
                && v["target"]
                    .as_str()
                    .is_some_and(|t| t == target_s || t.ends_with(&format!("/{name}")))),
            "{label}: a guessed duplicate\n{violations:#?}"
        );
        assert_absent_or_unchanged(&target, &before, &out);
    }
    assert_eq!(
        violations.len(),
        expected.len(),
        "violations other than the ten refusals\n{violations:#?}"
    );
    assert!(
        !violations.iter().any(|v| v["action"] == "file-access"),
        "{violations:#?}"
    );
    assert_eq!(exit_code(&events), 0, "{events:?}");
    assert_eq!(snapshot(w), before, "{}", both(&out));
}

/// The host state of one refused target: unchanged if it existed, else absent.
fn assert_absent_or_unchanged(target: &Path, before: &[(PathBuf, Option<Vec<u8>>)], out: &Output) {
    match before.iter().find(|(p, _)| p == target) {
        Some((_, bytes)) => assert_eq!(
            std::fs::read(target).ok(),
            bytes.clone(),
            "{} changed\n{}",
            target.display(),
            both(out)
        ),
        None => assert_absent(target, out),
    }
}

// -------------------------------------------------- legitimate work

/// G1 with git (docs/research/linux-create-deny.md §5; GIT_TEMPLATE_DIR is set to an empty dir by the
/// backend): `git init` + `add` + `commit` inside the guard work, and the
/// commit is on the host; no sample hooks were copied.
#[test]
fn git_init_add_and_commit_work_inside_the_guard() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let script = "set -e\n\
        git init -q -b main repo\n\
        cd repo\n\
        printf 'hello\\n' > hello.txt\n\
        mkdir src && printf 'fn main() {}\\n' > src/main.rs\n\
        git add -A\n\
        git -c user.name=t -c user.email=t@example.com commit -q -m from-the-sandbox\n\
        echo committed\n";
    let out = guard_sh(&plugins, w, &[], script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "committed");
    let repo = w.join("repo");
    let log = git(&repo, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-sandbox\n");
    let files = git(&repo, &["ls-files"]);
    assert_eq!(text(&files.stdout), "hello.txt\nsrc/main.rs\n");
    let hooks = repo.join(".git/hooks");
    assert!(
        !hooks.exists() || std::fs::read_dir(&hooks).unwrap().count() == 0,
        "hooks were planted"
    );
}

/// G1 with git: `git clone` of a local repository (made on the host, bound
/// read-only) into the work dir works inside the guard; the clone is on the
/// host with the source's commit and files, and no sample hooks.
#[test]
fn git_clone_of_a_local_repository_works_inside_the_guard() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    host_repo(source.path());
    std::fs::write(source.path().join("README"), "from the host\n").unwrap();
    git(source.path(), &["add", "README"]);
    git(source.path(), &["commit", "-q", "-m", "on-the-host"]);
    let bind = format!("{}:ro", s(source.path()));
    let script = format!(
        "git clone -q {} clone && git -C clone log --format=%s",
        s(source.path())
    );
    let out = guard_sh(&plugins, work.path(), &["--bind", &bind], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "on-the-host");
    let clone = work.path().join("clone");
    assert_eq!(
        std::fs::read_to_string(clone.join("README")).unwrap(),
        "from the host\n"
    );
    let log = git(&clone, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "on-the-host\n");
    let hooks = clone.join(".git/hooks");
    assert!(
        !hooks.exists() || std::fs::read_dir(&hooks).unwrap().count() == 0,
        "hooks were planted"
    );
}

/// G1 with git: in a repository made on the host (nested in the work dir,
/// so only the guard protects its `.git`), editing, `git add`, `git commit`,
/// a branch and a tag work inside the guard, and the host sees them; the
/// guard refused nothing.
#[test]
fn git_commits_in_an_existing_repository_work_inside_the_guard() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("project");
    host_repo(&repo);
    std::fs::write(repo.join("README"), "v1\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "-m", "on-the-host"]);
    let script = "set -e\n\
        cd project\n\
        printf 'v2\\n' > README\n\
        mkdir -p src/deep && printf 'x\\n' > src/deep/new.rs\n\
        git add -A\n\
        git -c user.name=t -c user.email=t@example.com commit -q -m from-the-sandbox\n\
        git branch feature\n\
        git -c user.name=t -c user.email=t@example.com tag -a v1 -m v1\n\
        git status --porcelain\n\
        echo done\n";
    let out = guard_sh(&plugins, work.path(), &[], script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(text(&out.stdout), "done\n", "{}", both(&out));
    assert!(
        !text(&out.stderr).contains("cc_server: violation:"),
        "{}",
        both(&out)
    );
    let log = git(&repo, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-sandbox\non-the-host\n");
    let branches = git(&repo, &["branch", "--format=%(refname:short)"]);
    assert_eq!(text(&branches.stdout), "feature\nmain\n");
    let tags = git(&repo, &["tag"]);
    assert_eq!(text(&tags.stdout), "v1\n");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/deep/new.rs")).unwrap(),
        "x\n"
    );
}

/// G1: `tar x` of a 10,000-file tree (made on the host, bound read-only)
/// works inside the guard — every create goes through the supervisor — and
/// a certificate inside `node_modules` in the tree is extracted (dependency
/// folders are exempt). Host: all 10,001 files present with their contents.
#[test]
fn tar_x_of_ten_thousand_files_works_inside_the_guard() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let source = tempfile::tempdir().unwrap();
    let tree = source.path().join("tree");
    for d in 0..100 {
        let dir = tree.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f:03}.txt")), format!("{d}-{f}\n")).unwrap();
        }
    }
    std::fs::create_dir_all(tree.join("node_modules/pkg/test")).unwrap();
    std::fs::write(tree.join("node_modules/pkg/test/key.pem"), "fixture\n").unwrap();
    let tarball = source.path().join("tree.tar");
    let made = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(source.path())
        .arg("tree")
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let bind = format!("{}:ro", s(source.path()));
    let script = format!("tar -xf {} && echo extracted", s(&tarball));
    let out = guard_sh(&plugins, work.path(), &["--bind", &bind], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "extracted");
    let got = work.path().join("tree");
    let mut count = 0;
    for d in 0..100 {
        for f in 0..100 {
            let path = got.join(format!("d{d:03}/f{f:03}.txt"));
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{} missing: {e}\n{}", path.display(), both(&out)));
            assert_eq!(
                bytes,
                format!("{d}-{f}\n").into_bytes(),
                "{}",
                path.display()
            );
            count += 1;
        }
    }
    assert_eq!(count, 10_000);
    assert_eq!(
        std::fs::read_to_string(got.join("node_modules/pkg/test/key.pem")).unwrap(),
        "fixture\n"
    );
}

/// A wheel holding `certfix/cacert.pem`, built by the host's Python.
fn certificate_wheel(dir: &Path) -> PathBuf {
    let builder = r#"import base64, hashlib, sys, zipfile
files = {
    "certfix/__init__.py": b"import os\nwhere = os.path.join(os.path.dirname(__file__), 'cacert.pem')\n",
    "certfix/cacert.pem": b"-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n",
    "certfix-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: certfix\nVersion: 1.0\n",
    "certfix-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: cc-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += "%s,sha256=%s,%d\n" % (name, digest, len(data))
record += "certfix-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
    z.writestr("certfix-1.0.dist-info/RECORD", record)
"#;
    let wheel = dir.join("certfix-1.0-py3-none-any.whl");
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(builder)
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    wheel
}

/// G1 (dependency folders exempt, docs/research/linux-create-deny.md §5): `python3 -m venv` works
/// inside the guard; a `cacert.pem` can be created and copied inside the
/// venv's `site-packages/certifi`, and `pip install --no-index` of a local
/// wheel shipping a `cacert.pem` works and imports; a `.pem` in the venv
/// outside site-packages is still refused (the exemption is narrow) while
/// `.venv` is exempt as a whole. Host: the certificates present, the stray
/// one absent.
#[test]
fn a_venv_may_hold_certificates() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let pkgs = tempfile::tempdir().unwrap();
    let wheel = certificate_wheel(pkgs.path());
    let bind = format!("{}:ro", s(pkgs.path()));
    let mut script = String::from("export PIP_CONFIG_FILE=/dev/null\n");
    script += &attempt("venv", "/usr/bin/python3 -m venv venv");
    script += "sp=$(echo venv/lib/python3.*/site-packages)\n";
    script += &attempt(
        "create",
        "mkdir -p \"$sp/certifi\" && printf 'CERT\\n' > \"$sp/certifi/cacert.pem\"",
    );
    script += &attempt(
        "copy",
        "cp \"$sp/certifi/cacert.pem\" \"$sp/certifi/copy.pem\"",
    );
    script += &attempt(
        "pip",
        &format!(
            "venv/bin/python -m pip install -q --no-index --no-deps --disable-pip-version-check --no-cache-dir {}",
            s(&wheel)
        ),
    );
    script +=
        "venv/bin/python -c 'import certfix; print(open(certfix.where).read().splitlines()[1])'\n";
    script += &attempt("stray", "printf x > venv/stray.pem");
    script += &attempt(
        "dot-venv",
        "mkdir -p .venv/lib && printf x > .venv/lib/ok.pem",
    );
    let out = guard_sh(&plugins, w, &["--bind", &bind], &script);
    for label in ["venv", "create", "copy", "pip", "dot-venv"] {
        assert_line(&out, &format!("{label}=ok"));
    }
    assert_line(&out, "fixture");
    assert_failed(&out, &["stray"]);
    let lib = w.join("venv/lib");
    let python_dir = std::fs::read_dir(&lib)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("python3")
        })
        .unwrap_or_else(|| panic!("no python3.* in {}\n{}", lib.display(), both(&out)));
    let site = python_dir.join("site-packages");
    assert_eq!(
        std::fs::read_to_string(site.join("certifi/cacert.pem")).unwrap(),
        "CERT\n"
    );
    assert_eq!(
        std::fs::read_to_string(site.join("certifi/copy.pem")).unwrap(),
        "CERT\n"
    );
    assert!(
        std::fs::read_to_string(site.join("certfix/cacert.pem"))
            .unwrap()
            .contains("fixture"),
        "{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(w.join(".venv/lib/ok.pem")).unwrap(),
        "x"
    );
    assert_absent(&w.join("venv/stray.pem"), &out);
    assert_reported(&out, "file-write-create", &w.join("venv/stray.pem"));
    let reported_in_site = text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("cc_server: violation:") && l.contains("site-packages"))
        .count();
    assert_eq!(reported_in_site, 0, "{}", both(&out));
}

/// G1 (dependency folders exempt): `npm install` of a local package (made
/// with `npm pack` on the host, bound read-only; network off, so
/// `--offline`) whose tarball holds `test/fixture.pem` works inside the
/// guard. Host: the fixture is in `node_modules`; the guard refused nothing
/// in the work dir.
#[test]
fn npm_install_of_a_package_with_pem_fixtures_works() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let pkgs = tempfile::tempdir().unwrap();
    let package = pkgs.path().join("pemfix");
    std::fs::create_dir_all(package.join("test")).unwrap();
    std::fs::write(
        package.join("package.json"),
        r#"{"name":"pemfix","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(package.join("index.js"), "module.exports = 42;\n").unwrap();
    std::fs::write(
        package.join("test/fixture.pem"),
        "-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let npm_home = tempfile::tempdir().unwrap();
    let packed = Command::new("npm")
        .args(["pack", "--silent", "./pemfix"])
        .current_dir(pkgs.path())
        .env("HOME", npm_home.path())
        .env("npm_config_cache", npm_home.path().join("cache"))
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap_or_else(|e| panic!("cannot run npm on the host: {e}"));
    assert!(packed.status.success(), "{}", text(&packed.stderr));
    let tarball = pkgs.path().join("pemfix-1.0.0.tgz");
    assert!(tarball.exists(), "{}", text(&packed.stdout));
    let bind = format!("{}:ro", s(pkgs.path()));
    let script = format!(
        "npm install --offline --no-audit --no-fund --no-update-notifier {} && \
         node -e 'console.log(\"loaded\", require(\"pemfix\"))'",
        s(&tarball)
    );
    let out = guard_sh(&plugins, w, &["--bind", &bind], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "loaded 42");
    assert_eq!(
        std::fs::read_to_string(w.join("node_modules/pemfix/test/fixture.pem")).unwrap(),
        "-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n"
    );
    let in_work = format!("cc_server: violation: file-write-create {}/", s(w));
    assert!(
        !text(&out.stderr).contains(&in_work),
        "the guard refused something in the work dir\n{}",
        both(&out)
    );
}

/// G1, G4 (T5, T6): a directory named by its descriptor's path — as
/// Claude Code's Bash tool names its temporary directory — takes creates
/// as the kernel would: `mkdir` and `open(O_CREAT)` below
/// `/proc/self/fd/N`, `/dev/fd/N` (a symlink to `/proc/self/fd`, whose
/// `self` names nothing for the supervisor), `/proc/$$/fd/N` (the shell's
/// own number, in the commands' pid namespace, translated by the guard),
/// `/proc/thread-self/fd/N` and `fd/N` from a `/proc/$$` working directory
/// land in the held directory; the guard judges the name there, so a `.env`
/// or `*.pem` through the same paths is refused with its rule and reported
/// under its real path. Host: exactly the allowed names were made.
#[test]
fn a_directory_named_by_its_descriptor_takes_creates_as_the_kernel_does() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::create_dir(w.join("held")).unwrap();
    let mut script = String::from("exec 12<held\n");
    for (label, cmd) in [
        ("mkdir-self", "mkdir /proc/self/fd/12/d1"),
        ("open-self", "echo 1 > /proc/self/fd/12/f1.txt"),
        ("mkdir-devfd", "mkdir /dev/fd/12/d2"),
        ("open-devfd", "echo 2 > /dev/fd/12/f2.txt"),
        ("open-pid", "echo 3 > /proc/$$/fd/12/f3.txt"),
        ("open-thread", "echo 4 > /proc/thread-self/fd/12/f4.txt"),
        ("open-relative", "( cd /proc/$$ && echo 5 > fd/12/f5.txt )"),
        (
            "nested",
            "mkdir /proc/self/fd/12/d1/inner && echo 6 > /dev/fd/12/d1/inner/f6.txt",
        ),
        ("env-self", "echo k > /proc/self/fd/12/.env"),
        ("env-devfd", "echo k > /dev/fd/12/.env"),
        ("pem-pid", "touch /proc/$$/fd/12/id.pem"),
        ("pem-mkdir", "mkdir /proc/self/fd/12/d1/x.pem"),
    ] {
        script += &attempt(label, cmd);
    }
    let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
    let out = guard_run(&plugins, w, &[], &["bash", "-c", &guarded]);
    assert_eq!(code(&out), 0, "{}", both(&out));
    for label in [
        "mkdir-self",
        "open-self",
        "mkdir-devfd",
        "open-devfd",
        "open-pid",
        "open-thread",
        "open-relative",
        "nested",
    ] {
        assert_line(&out, &format!("{label}=ok"));
    }
    assert_failed(&out, &["env-self", "env-devfd", "pem-pid", "pem-mkdir"]);
    let held = w.join("held");
    for dir in ["d1", "d2", "d1/inner"] {
        assert!(held.join(dir).is_dir(), "{dir} missing\n{}", both(&out));
    }
    for (n, file) in [
        "f1.txt",
        "f2.txt",
        "f3.txt",
        "f4.txt",
        "f5.txt",
        "d1/inner/f6.txt",
    ]
    .iter()
    .enumerate()
    {
        assert_eq!(
            std::fs::read_to_string(held.join(file)).unwrap_or_default(),
            format!("{}\n", n + 1),
            "{file}\n{}",
            both(&out)
        );
    }
    for refused in [".env", "id.pem", "d1/x.pem"] {
        assert_absent(&held.join(refused), &out);
    }
    assert_reported(&out, "file-write-create", &held.join(".env"));
    assert_reported(&out, "file-write-create", &held.join("id.pem"));
    assert!(
        text(&out.stderr).contains("rule: **/.env"),
        "the rule is not named\n{}",
        both(&out)
    );
}

/// G1 (`/proc/<tid>/fd/N` reopened from the tracee's very file): writing
/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/1`, `/dev/fd/2`, `/proc/self/fd/1`,
/// `/dev/null` and `/dev/fd/3` (a file of the work dir) works; reopening
/// for writing a descriptor that was opened read-only on a protected file
/// is refused. Host: the work file rewritten, the protected file unchanged.
#[test]
fn standard_streams_and_fd_paths_stay_writable() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(w.join("out.txt"), "old\n").unwrap();
    std::fs::write(w.join("existing.pem"), "secret\n").unwrap();
    let mut script = String::new();
    script += &attempt("stdout", "echo to-stdout > /dev/stdout");
    script += &attempt("stderr", "echo to-stderr > /dev/stderr");
    script += &attempt("fd1", "echo to-fd1 > /dev/fd/1");
    script += &attempt("fd2", "echo to-fd2 > /dev/fd/2");
    script += &attempt("proc-self", "echo to-proc-self > /proc/self/fd/1");
    script += &attempt("null", "echo gone > /dev/null");
    script += &attempt("fd3", "{ echo via-fd3 > /dev/fd/3; } 3>>out.txt");
    script += &attempt(
        "reopen-protected",
        "{ echo evil > /dev/fd/4; } 4<existing.pem",
    );
    let out = guard_sh(&plugins, w, &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    for label in ["stdout", "stderr", "fd1", "fd2", "proc-self", "null", "fd3"] {
        assert_line(&out, &format!("{label}=ok"));
    }
    assert_failed(&out, &["reopen-protected"]);
    for line in ["to-stdout", "to-fd1", "to-proc-self"] {
        assert_line(&out, line);
    }
    let stderr = text(&out.stderr);
    assert!(
        stderr.lines().any(|l| l == "to-stderr") && stderr.lines().any(|l| l == "to-fd2"),
        "{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(w.join("out.txt")).unwrap(),
        "via-fd3\n"
    );
    assert_eq!(
        std::fs::read_to_string(w.join("existing.pem")).unwrap(),
        "secret\n"
    );
    assert_reported(&out, "file-write-data", &w.join("existing.pem"));
}

/// G1, C1 (exec deny in writable dirs, docs/research/linux-create-deny.md §2.1): a script or binary
/// freshly written into the writable work dir — or into the private /tmp —
/// cannot be executed without an exec grant (`--no-exec-grant` drops
/// `run`'s default ones), not even by handing it to the dynamic loader
/// (every writable mount is `noexec`), while system binaries run; exec is allowed
/// only from the system view (Landlock), so a binary in a read-only bind
/// is refused too; and no command can make a user namespace to remount its
/// way out. Host: the script's
/// marker never printed, the files are there.
#[test]
fn a_fresh_script_in_the_work_dir_cannot_be_executed() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    // A binary that exists before the run, in a read-only bind outside the
    // system view: exec is refused (Landlock); the dynamic loader can still
    // map it, as Landlock does not see mmap — it is not new code.
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy("/usr/bin/true", tools.path().join("ro-true")).unwrap();
    let ro_true = s(&tools.path().join("ro-true")).to_owned();
    let mut script = String::new();
    script += "printf '#!/bin/sh\\necho FRESH-RAN\\n' > fresh.sh && chmod +x fresh.sh\n";
    script += "cp /usr/bin/true ./copied-true && chmod +x copied-true\n";
    script += "cp /usr/bin/true /tmp/tmp-true && chmod +x /tmp/tmp-true\n";
    script += &attempt("script", "./fresh.sh");
    script += &attempt("binary", "./copied-true");
    script += &attempt("tmp-binary", "/tmp/tmp-true");
    script += &attempt("loader", "/lib64/ld-linux-x86-64.so.2 ./copied-true");
    script += &attempt("userns", "unshare -U true");
    script += &attempt("remount", "mount -o remount,exec .");
    script += &attempt("system", "/usr/bin/true");
    script += &attempt("ro-bind", &ro_true);
    script += &attempt(
        "ro-bind-loader",
        &format!("/lib64/ld-linux-x86-64.so.2 {ro_true}"),
    );
    let bind = format!("{}:ro", s(tools.path()));
    let flags = ["--no-exec-grant", "--bind", &bind];
    let out = guard_sh(&plugins, work.path(), &flags, &script);
    assert_failed(
        &out,
        &[
            "script",
            "binary",
            "tmp-binary",
            "loader",
            "userns",
            "remount",
            "ro-bind",
        ],
    );
    assert_line(&out, "ro-bind-loader=ok");
    assert_line(&out, "system=ok");
    assert!(!text(&out.stdout).contains("FRESH-RAN"), "{}", both(&out));
    assert!(work.path().join("fresh.sh").exists(), "{}", both(&out));
    assert!(work.path().join("copied-true").exists(), "{}", both(&out));
}

/// F5 on Linux: `run` grants its work dir and the
/// private /tmp by default, so what a build writes there runs — a script,
/// a copied binary, through the loader too; what the grants open stays
/// closed elsewhere: another writable bind, a bound `$HOME`, and a
/// read-only mode run nothing written or bound there, not even through
/// `ld.so`. Host: the ungranted scripts' markers never printed.
#[test]
fn exec_grants_open_the_work_dir_and_nothing_else() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let o = s(other.path()).to_owned();
    let h = s(home.path()).to_owned();
    let mut script = String::new();
    script += "printf '#!/bin/sh\\necho WORK-RAN\\n' > fresh.sh && chmod +x fresh.sh\n";
    script += "cp /usr/bin/true ./copied-true && chmod +x copied-true\n";
    script += "cp /usr/bin/true /tmp/tmp-true && chmod +x /tmp/tmp-true\n";
    script += &format!("printf '#!/bin/sh\\necho OTHER-RAN\\n' > {o}/o.sh && chmod +x {o}/o.sh\n");
    script += &format!("cp /usr/bin/true {o}/o-true && chmod +x {o}/o-true\n");
    script += &format!("printf '#!/bin/sh\\necho HOME-RAN\\n' > {h}/h.sh && chmod +x {h}/h.sh\n");
    script += &attempt("work-script", "./fresh.sh");
    script += &attempt("work-binary", "./copied-true");
    script += &attempt("work-loader", "/lib64/ld-linux-x86-64.so.2 ./copied-true");
    script += &attempt("tmp-binary", "/tmp/tmp-true");
    script += &attempt("other-script", &format!("{o}/o.sh"));
    script += &attempt(
        "other-loader",
        &format!("/lib64/ld-linux-x86-64.so.2 {o}/o-true"),
    );
    script += &attempt("home-script", &format!("{h}/h.sh"));
    // `$HOME` is the bound `home`: no private home, so no grant for it.
    let out = CcServer::new(&plugins)
        .config(SANDBOX_LAYER_ONLY)
        .env("HOME", home.path())
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "bwrap",
            "--bind",
            &o,
            "--bind",
            &h,
            "--",
        ])
        .args(["sh", "-c", &format!("{ONLY_IN_A_SANDBOX}{script}")])
        .output();
    for ok in ["work-script", "work-binary", "work-loader", "tmp-binary"] {
        assert_line(&out, &format!("{ok}=ok"));
    }
    assert_failed(&out, &["other-script", "other-loader", "home-script"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("WORK-RAN"), "{}", both(&out));
    assert!(
        !stdout.contains("OTHER-RAN") && !stdout.contains("HOME-RAN"),
        "{}",
        both(&out)
    );
    assert!(other.path().join("o.sh").exists(), "{}", both(&out));

    // A read-only mode grants nothing: a script already in the work dir
    // does not run.
    let ready = work.path().join("ready.sh");
    std::fs::write(&ready, "#!/bin/sh\necho READY-RAN\n").unwrap();
    std::fs::set_permissions(&ready, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = attempt("review-script", "./ready.sh");
    let out = guard_sh(&plugins, work.path(), &["--mode", "review"], &script);
    assert_failed(&out, &["review-script"]);
    assert!(!text(&out.stdout).contains("READY-RAN"), "{}", both(&out));
}

/// G4, F12, H14: an exec refusal explains itself. The command itself
/// refused: the error names the exec rule and the grant that would allow
/// it (from the kernel's EACCES and the file's mode, not from the rules); a
/// program a shell could not start, or the loader could not map: a
/// `process-exec` violation with the rule and the remedy, marked inferred.
#[test]
fn an_exec_refusal_names_the_rule_and_the_grant() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let script = work.path().join("t.sh");
    std::fs::write(&script, "#!/bin/sh\necho RAN\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = guard_run(&plugins, work.path(), &["--no-exec-grant"], &["./t.sh"]);
    assert_eq!(code(&out), 126, "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("refused by the exec rule") && stderr.contains("--exec-grant DIR"),
        "{}",
        both(&out)
    );
    let out = guard_sh(
        &plugins,
        work.path(),
        &["--no-exec-grant"],
        "./t.sh; cp /usr/bin/true t2; /lib64/ld-linux-x86-64.so.2 ./t2; true",
    );
    let stderr = text(&out.stderr);
    for line in [
        "cc_server: violation: process-exec ./t.sh",
        "cc_server: violation: process-exec ./t2",
    ] {
        assert!(stderr.lines().any(|l| l == line), "{line}\n{}", both(&out));
    }
    assert!(
        stderr.contains("(inferred from the command's stderr); to allow: grant its directory"),
        "{}",
        both(&out)
    );
    assert!(!text(&out.stdout).contains("RAN"), "{}", both(&out));
}

// ------------------------------------ code the host runs later (G5)

/// The git the host runs later, as a user would: the user's own config in
/// `home` (none when `None`), no system config.
fn host_git_status(dir: &Path, home: Option<&Path>) -> Output {
    let mut command = Command::new("git");
    command
        .args(["status", "--short"])
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1");
    match home {
        Some(home) => command.env("HOME", home).env_remove("GIT_CONFIG_GLOBAL"),
        None => command.env("GIT_CONFIG_GLOBAL", "/dev/null"),
    };
    command.env_remove("XDG_CONFIG_HOME").output().unwrap()
}

/// A repository at `dir` with one committed file.
fn committed_repo(dir: &Path, file: &str) {
    host_repo(dir);
    std::fs::write(dir.join(file), format!("{file}\n")).unwrap();
    git(dir, &["add", file]);
    git(dir, &["commit", "-q", "-m", file]);
}

/// `w/lib` (a repository) and `w/proj`, a repository with `lib` as the
/// submodule `sub` (so `proj/.git/modules/sub/` and `proj/sub/.git`, a
/// `gitdir:` file), a worktree `w/wt` (`wt/.git`, another `gitdir:` file,
/// and `proj/.git/worktrees/wt/`), and per-worktree config in both
/// (`extensions.worktreeConfig`). Made on the host, as a user's checkout.
fn host_superproject(w: &Path) {
    committed_repo(&w.join("lib"), "a.txt");
    let proj = w.join("proj");
    committed_repo(&proj, "p.txt");
    git(
        &proj,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            "../lib",
            "sub",
        ],
    );
    git(
        &proj,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            "../lib",
            "libs/a",
        ],
    );
    git(&proj, &["commit", "-q", "-m", "sub"]);
    git(&proj, &["worktree", "add", "-q", "../wt"]);
    git(&proj, &["config", "extensions.worktreeConfig", "true"]);
    git(&proj, &["config", "--worktree", "user.name", "main"]);
    git(&w.join("wt"), &["config", "--worktree", "user.name", "wt"]);
    for file in [
        "proj/.git/modules/sub/config",
        "proj/.git/modules/libs/a/config",
        "proj/.git/modules/sub/hooks",
        "proj/sub/.git",
        "wt/.git",
        "proj/.git/worktrees/wt/config.worktree",
        "proj/.git/config.worktree",
    ] {
        assert!(w.join(file).exists(), "{file} was not made");
    }
}

/// The files of [`host_superproject`] git reads as config or runs, with
/// their bytes (hooks directories as their listing).
fn git_internals(w: &Path) -> Vec<(String, Vec<u8>)> {
    [
        "proj/.git/config",
        "proj/.git/config.worktree",
        "proj/.git/modules/sub/config",
        "proj/.git/modules/libs/a/config",
        "proj/.git/worktrees/wt/config.worktree",
        "proj/sub/.git",
        "proj/libs/a/.git",
        "wt/.git",
        "proj/.git/modules/sub/hooks",
        "proj/.git/modules/libs/a/hooks",
    ]
    .iter()
    .map(|rel| {
        let path = w.join(rel);
        let bytes = if path.is_dir() {
            let mut names: Vec<String> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names.join("\n").into_bytes()
        } else {
            std::fs::read(&path).unwrap()
        };
        ((*rel).to_owned(), bytes)
    })
    .collect()
}

/// The attempts on a [`host_superproject`] (run from `w`, the parent of
/// `proj` and `wt`) to make the host's next `git status` run
/// `touch MARKER`: a submodule's config (git, append, rename onto; one
/// whose name holds `/`), a hook in its hooks directory, its `.git` file
/// and the worktree's rewritten to `gitdir:` elsewhere, each worktree's
/// `config.worktree`, the submodule's config after the whole repository was
/// renamed, and the repository swapped for a prepared one.
fn later_git_attempts(marker: &Path) -> (String, Vec<&'static str>) {
    let m = s(marker);
    let cfg = format!("printf '[core]\\n\\tfsmonitor = touch {m}\\n'");
    let mut script = String::new();
    script += &attempt(
        "sub-config",
        &format!("git -C proj/sub config core.fsmonitor 'touch {m}'"),
    );
    script += &attempt(
        "sub-config-append",
        &format!("{cfg} >> proj/.git/modules/sub/config"),
    );
    script += &attempt(
        "sub-config-onto",
        &format!("{cfg} > cfg && mv cfg proj/.git/modules/sub/config"),
    );
    script += &attempt(
        "sub-hook",
        &format!("printf '#!/bin/sh\\ntouch {m}\\n' > proj/.git/modules/sub/hooks/post-checkout"),
    );
    script += "mkdir -p evil && git init -q evil\n";
    script += &attempt(
        "sub-gitfile",
        "printf 'gitdir: ../../evil/.git\\n' > proj/sub/.git",
    );
    script += &attempt("wt-gitfile", "printf 'gitdir: ../evil/.git\\n' > wt/.git");
    script += &attempt(
        "wt-config",
        &format!("git -C wt config --worktree core.fsmonitor 'touch {m}'"),
    );
    script += &attempt(
        "main-config",
        &format!("git -C proj config --worktree core.fsmonitor 'touch {m}'"),
    );
    // The repository moved away and back: its files keep their identity.
    script += &attempt(
        "moved-config",
        &format!(
            "(mv proj proj2 && git -C proj2/sub config core.fsmonitor 'touch {m}'; rc=$?; mv proj2 proj; exit $rc)"
        ),
    );
    // A submodule whose name holds `/`: its config and its hooks.
    script += &attempt(
        "libs-config",
        &format!("git -C proj/libs/a config core.fsmonitor 'touch {m}'"),
    );
    script += &attempt(
        "libs-hook",
        &format!(
            "printf '#!/bin/sh\\ntouch {m}\\n' > proj/.git/modules/libs/a/hooks/post-checkout"
        ),
    );
    // The whole repository swapped for a prepared one.
    script += &attempt(
        "swap",
        &format!(
            "git init -q fake && git -C fake config core.fsmonitor 'touch {m}' && mv proj proj.old && mv fake proj"
        ),
    );
    let labels = vec![
        "libs-config",
        "libs-hook",
        "swap",
        "moved-config",
        "sub-config",
        "sub-config-append",
        "sub-config-onto",
        "sub-hook",
        "sub-gitfile",
        "wt-gitfile",
        "wt-config",
        "main-config",
    ];
    (script, labels)
}

/// After [`later_git_attempts`]: the user's `git status` on the HOST, in
/// the superproject (which looks into its submodule), the submodule and the
/// worktree, runs nothing.
fn assert_host_git_runs_nothing(w: &Path, marker: &Path, out: &Output) {
    for dir in ["proj", "proj/sub", "proj/libs/a", "wt"] {
        let status = host_git_status(&w.join(dir), None);
        assert!(
            status.status.success(),
            "git status in {dir} on the host: {}\n{}",
            text(&status.stderr),
            both(out)
        );
        assert!(
            !marker.exists(),
            "git status in {dir} on the host ran the sandbox's payload\n{}",
            both(out)
        );
    }
}

/// G5, threat model §4 (the create-time guard's half): in a repository that
/// existed at launch — nested in the work dir, so the plan's mounts do not
/// reach it and the guard's start-up scan alone protects it — a submodule's
/// `config` (`core.fsmonitor`), a hook in `.git/modules/sub/hooks`, the
/// submodule's and the worktree's `.git` files (`gitdir:` elsewhere) and
/// each `config.worktree` cannot be changed, not even after renaming the
/// repository (a protected file is judged by identity too). Host: every one of them is
/// byte-for-byte unchanged, and `git status` in the superproject, the
/// submodule and the worktree does not create the marker.
#[test]
fn an_existing_repositorys_submodule_and_worktree_config_cannot_be_changed() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    host_superproject(w);
    let before = git_internals(w);
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("MARKER");
    let (script, labels) = later_git_attempts(&marker);
    let out = guard_sh(&plugins, w, &[], &script);
    assert_failed(&out, &labels);
    assert_eq!(git_internals(w), before, "{}", both(&out));
    assert_reported(&out, "file-write-data", &w.join("proj/sub/.git"));
    assert_reported(
        &out,
        "file-write-create",
        &w.join("proj/.git/modules/sub/hooks/post-checkout"),
    );
    assert_host_git_runs_nothing(w, &marker, &out);
}

/// G5, G4 (what keeps working): `git init`,
/// `git clone --recurse-submodules` of a local repository with a
/// submodule, `git submodule update --init` in a fresh clone, `git worktree
/// add` (in a new repository and in one that existed at launch), and a
/// clone whose configured template ships a hook all succeed inside the
/// guard. Host: the clones have their submodule's files, the worktrees
/// exist, no `hooks` directory anywhere in the work dir holds anything, and
/// nothing was refused.
#[test]
fn git_workflows_that_make_repositories_work_and_leave_no_hook() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let sources = tempfile::tempdir().unwrap();
    let src = sources.path();
    committed_repo(&src.join("lib"), "a.txt");
    let sup = src.join("super");
    committed_repo(&sup, "p.txt");
    git(
        &sup,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            "../lib",
            "sub",
        ],
    );
    git(&sup, &["commit", "-q", "-m", "sub"]);
    let template = src.join("template");
    std::fs::create_dir_all(template.join("hooks")).unwrap();
    std::fs::write(
        template.join("hooks/pre-commit"),
        "#!/bin/sh\ntouch PWNED\n",
    )
    .unwrap();
    std::fs::set_permissions(
        template.join("hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    committed_repo(&w.join("existing"), "e.txt");
    let sup_s = s(&sup);
    let file_ok = "-c protocol.file.allow=always";
    let mut script = String::new();
    script += &attempt("init", "git init -q fresh");
    script += &attempt(
        "clone-recursive",
        &format!("git {file_ok} clone -q --recurse-submodules {sup_s} c1"),
    );
    script += &attempt(
        "submodule-update",
        &format!(
            "git {file_ok} clone -q {sup_s} c2 && git -C c2 {file_ok} submodule -q update --init"
        ),
    );
    script += &attempt("worktree-new", "git -C c1 worktree add -q ../wt1");
    script += &attempt(
        "worktree-existing",
        "git -C existing worktree add -q ../wt2",
    );
    script += &attempt(
        "template-hooks",
        &format!(
            "git -c init.templateDir={} clone -q {} c3",
            s(&template),
            s(&src.join("lib"))
        ),
    );
    script += &attempt(
        "status",
        "git -C c1 status --short && git -C wt1 status --short",
    );
    let labels = [
        "init",
        "clone-recursive",
        "submodule-update",
        "worktree-new",
        "worktree-existing",
        "template-hooks",
        "status",
    ];
    let bind = format!("{}:ro", s(src));
    let out = guard_sh(&plugins, w, &["--bind", &bind], &script);
    for label in labels {
        assert_line(&out, &format!("{label}=ok"));
    }
    assert!(
        !text(&out.stderr).contains("cc_server: violation:"),
        "{}",
        both(&out)
    );
    for file in [
        "c1/sub/a.txt",
        "c2/sub/a.txt",
        "wt1/p.txt",
        "wt2/e.txt",
        "c3/a.txt",
    ] {
        assert!(w.join(file).is_file(), "{file} missing\n{}", both(&out));
    }
    let planted: Vec<PathBuf> = snapshot(w)
        .into_iter()
        .map(|(path, _)| path)
        .filter(|p| {
            p.parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "hooks")
        })
        .collect();
    assert!(
        planted.is_empty(),
        "hooks were planted: {planted:?}\n{}",
        both(&out)
    );
    let status = host_git_status(&w.join("c1"), None);
    assert!(status.status.success(), "{}", text(&status.stderr));
}

/// G4: `cargo new demo` (libgit2 makes the empty
/// `.git/hooks`) works inside the guard, with cargo from the host's
/// toolchain in the system view (`system_paths`). Host: the crate and its
/// repository are there, and the hooks directory is empty.
#[test]
fn cargo_new_works_inside_the_guard_and_leaves_no_hook() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let cargo = PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    let cargo = if cargo.is_absolute() {
        cargo
    } else {
        let which = Command::new("sh")
            .args(["-c", "command -v cargo"])
            .output()
            .unwrap();
        PathBuf::from(text(&which.stdout).trim())
    };
    let cargo = std::fs::canonicalize(&cargo).unwrap();
    let toolchain = cargo.parent().unwrap();
    let config = format!(
        "{SANDBOX_LAYER_ONLY}[backends.bwrap]\nsystem_paths = [{:?}]\n",
        s(toolchain)
    );
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let script = format!(
        "{ONLY_IN_A_SANDBOX}{} new -q --vcs git demo && echo made",
        s(&cargo)
    );
    let out = guard_run_config(&plugins, &config, w, &[], &["sh", "-c", &script]);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "made");
    assert!(w.join("demo/Cargo.toml").is_file(), "{}", both(&out));
    assert!(w.join("demo/.git/HEAD").is_file(), "{}", both(&out));
    let hooks = w.join("demo/.git/hooks");
    assert!(
        !hooks.exists() || std::fs::read_dir(&hooks).unwrap().count() == 0,
        "hooks were planted\n{}",
        both(&out)
    );
}

/// G5: the secret-name globs match in any case (`X.PEM`,
/// `id.KEY`, `.ENV`: macOS shares the globs and ignores case). Host: none
/// was made, each refusal reported.
#[test]
fn secret_names_are_refused_in_any_case() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let names = ["X.PEM", "id.KEY", ".ENV", "Server.Pem", ".Env.Local"];
    let mut script = String::new();
    for (i, name) in names.iter().enumerate() {
        script += &attempt(&format!("n{i}"), &format!("echo secret > {name}"));
    }
    script += &attempt("plain", "echo ok > X.PEM.txt");
    let out = guard_sh(&plugins, w, &[], &script);
    let labels: Vec<String> = (0..names.len()).map(|i| format!("n{i}")).collect();
    assert_failed(&out, &labels.iter().map(String::as_str).collect::<Vec<_>>());
    assert_line(&out, "plain=ok");
    for name in names {
        assert_absent(&w.join(name), &out);
        assert_reported(&out, "file-write-create", &w.join(name));
    }
}

/// `cc_server run` from `cwd` with HOME = `home` (a temp dir the test
/// made), under the default policy, of `sh -c SCRIPT`.
fn guard_sh_home(
    plugins: &Plugins,
    cwd: &Path,
    home: &Path,
    flags: &[&str],
    script: &str,
) -> Output {
    let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
    let out = CcServer::new(plugins)
        .config(SANDBOX_LAYER_ONLY)
        .env("HOME", home)
        .current_dir(cwd)
        .arg("run")
        .args(["--backend", "bwrap"])
        .args(flags)
        .args(["--", "sh", "-c", &guarded])
        .output();
    assert_ne!(code(&out), 125, "cc_server itself failed\n{}", both(&out));
    out
}

/// G5, threat model §4: with `$HOME` bound writable (a temp home the test
/// made), none of the home's families that run code later can be written:
/// git's global config (an existing `~/.gitconfig` and a new
/// `~/.config/git/config`), `~/.ssh/authorized_keys` and `~/.ssh/config`,
/// the `PATH` directories `~/.local/bin` (existing) and `~/bin` (new),
/// systemd user units, autostart entries, logout and fish startup files,
/// cargo's, npm's, docker's, kube's and AWS's configs, vim, neovim, emacs,
/// VS Code and IDE startup files, direnv's `.envrc`, and the agents'
/// config. A project's own `bin/` stays writable. Host: every one absent
/// (the existing ones unchanged), and `git status` with that home runs
/// nothing.
#[test]
fn a_bound_home_keeps_every_family_that_runs_code_later() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::write(h.join(".gitconfig"), "[user]\n\tname = me\n").unwrap();
    std::fs::create_dir_all(h.join(".local/bin")).unwrap();
    committed_repo(&h.join("proj"), "p.txt");
    let existing_before = (
        std::fs::read(h.join(".gitconfig")).unwrap(),
        snapshot(&h.join(".local")),
    );
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("MARKER");
    let m = s(&marker);
    let payload = format!("touch {m}");
    let attempts: Vec<(&str, String, &str)> = vec![
        (
            "gitconfig",
            format!("git config --global core.fsmonitor '{payload}'"),
            ".gitconfig",
        ),
        (
            "xdg-git",
            format!(
                "mkdir -p .config/git && printf '[core]\\n\\tfsmonitor = {payload}\\n' > .config/git/config"
            ),
            ".config/git/config",
        ),
        (
            "ssh-keys",
            "mkdir -p .ssh && echo ssh-ed25519 AAAA > .ssh/authorized_keys".into(),
            ".ssh",
        ),
        (
            "ssh-config",
            format!("mkdir -p .ssh; printf 'Host *\\n  ProxyCommand {payload}\\n' > .ssh/config"),
            ".ssh",
        ),
        (
            "local-bin",
            format!("printf '#!/bin/sh\\n{payload}\\n' > .local/bin/git"),
            ".local/bin/git",
        ),
        (
            "home-bin",
            format!("mkdir -p bin && printf '#!/bin/sh\\n{payload}\\n' > bin/git"),
            "bin",
        ),
        (
            "systemd",
            format!(
                "mkdir -p .config/systemd/user && printf '[Service]\\nExecStart={payload}\\n' > .config/systemd/user/x.service"
            ),
            ".config/systemd/user",
        ),
        (
            "autostart",
            format!(
                "mkdir -p .config/autostart && printf '[Desktop Entry]\\nExec={payload}\\n' > .config/autostart/x.desktop"
            ),
            ".config/autostart",
        ),
        (
            "bash-logout",
            format!("echo '{payload}' > .bash_logout"),
            ".bash_logout",
        ),
        (
            "zlogout",
            format!("echo '{payload}' > .zlogout"),
            ".zlogout",
        ),
        (
            "fish",
            format!("mkdir -p .config/fish && echo '{payload}' > .config/fish/config.fish"),
            ".config/fish",
        ),
        (
            "envrc",
            format!("echo '{payload}' > proj/.envrc"),
            "proj/.envrc",
        ),
        (
            "cargo",
            format!(
                "mkdir -p .cargo && printf '[build]\\nrustc-wrapper = \"{m}\"\\n' > .cargo/config.toml"
            ),
            ".cargo/config.toml",
        ),
        (
            "npmrc",
            format!("echo 'script-shell={m}' > .npmrc"),
            ".npmrc",
        ),
        (
            "cargo-nested",
            format!(
                "mkdir -p proj/.cargo && printf '[build]\\nrustc-wrapper = \"{m}\"\\n' > proj/.cargo/config.toml"
            ),
            "proj/.cargo/config.toml",
        ),
        (
            "docker",
            "mkdir -p .docker && echo '{\"credsStore\":\"evil\"}' > .docker/config.json".into(),
            ".docker",
        ),
        (
            "kube",
            "mkdir -p .kube && echo 'users: []' > .kube/config".into(),
            ".kube",
        ),
        (
            "aws",
            format!(
                "mkdir -p .aws && printf '[default]\\ncredential_process = {payload}\\n' > .aws/config"
            ),
            ".aws",
        ),
        ("vimrc", format!("echo '!{payload}' > .vimrc"), ".vimrc"),
        (
            "nvim",
            "mkdir -p .config/nvim && echo 'vim.fn.system(\"x\")' > .config/nvim/init.lua".into(),
            ".config/nvim",
        ),
        (
            "emacs",
            "mkdir -p .emacs.d && echo '(shell-command \"x\")' > .emacs.d/init.el".into(),
            ".emacs.d",
        ),
        (
            "vscode",
            "mkdir -p .vscode && echo '{}' > .vscode/tasks.json".into(),
            ".vscode",
        ),
        (
            "idea",
            "mkdir -p .idea && echo x > .idea/workspace.xml".into(),
            ".idea",
        ),
        (
            "claude",
            "mkdir -p .claude && echo '{}' > .claude/settings.json".into(),
            ".claude",
        ),
        (
            "claude-json",
            "echo '{\"mcpServers\":{}}' > .claude.json".into(),
            ".claude.json",
        ),
        ("mcp", "echo '{}' > .mcp.json".into(), ".mcp.json"),
    ];
    let mut script = String::new();
    for (label, cmd, _) in &attempts {
        script += &attempt(label, cmd);
    }
    script += &attempt(
        "project-bin",
        "mkdir -p proj/bin && echo tool > proj/bin/tool",
    );
    script += &attempt("notes", "echo ok > notes.txt");
    let out = guard_sh_home(&plugins, h, h, &[], &script);
    let labels: Vec<&str> = attempts.iter().map(|(l, _, _)| *l).collect();
    assert_failed(&out, &labels);
    assert_line(&out, "project-bin=ok");
    assert_line(&out, "notes=ok");
    for (label, _, path) in &attempts {
        if !matches!(*label, "gitconfig") {
            assert_absent(&h.join(path), &out);
        }
    }
    assert_eq!(
        (
            std::fs::read(h.join(".gitconfig")).unwrap(),
            snapshot(&h.join(".local"))
        ),
        existing_before,
        "{}",
        both(&out)
    );
    let status = host_git_status(&h.join("proj"), Some(h));
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(
        !marker.exists(),
        "git status on the host ran the payload\n{}",
        both(&out)
    );
}

/// The start of the programs that aim at the other processes a command
/// can name: `find_sandbox_processes()` first has the forwarder relay a
/// request (so it runs), then fills `targets` with the commands' namespace
/// reaper (their pid 1, a fork of PID 1 that never execs) and `sib`, a
/// process of the command's own making that is not dumpable (another
/// process a command may see but not trace), and prints how many processes
/// of the sandbox's machinery (PID 1, the supervisor; the forwarder) the
/// command's `/proc` shows — none: they are in PID 1's pid namespace, not
/// the commands'.
const SANDBOX_PROCESSES: &str = r#"
#include <dirent.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

static const char *names[2] = {"reaper", "sib"};
static int targets[2] = {1, -1};

/* A CONNECT through the forwarder to the session's proxy, which refuses a
   loopback port: only a live forwarder relays the answer. */
static int wake_forwarder(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in proxy = { .sin_family = AF_INET, .sin_port = htons(3128) };
    proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&proxy, sizeof proxy) != 0) return 0;
    const char *req = "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n";
    char buf[16] = {0};
    if (write(s, req, strlen(req)) != (ssize_t)strlen(req)) return 0;
    ssize_t n = read(s, buf, 12);
    close(s);
    return n > 0 && strncmp(buf, "HTTP/1.", 7) == 0;
}

static int sibling(void) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return -1;
    int pid = fork();
    if (pid == 0) {
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        write(pipefd[1], "x", 1);
        for (;;) pause();
    }
    char x;
    read(pipefd[0], &x, 1);
    return pid;
}

static void find_sandbox_processes(void) {
    printf("woken=%d\n", wake_forwarder());
    char comm[64] = {0};
    int fd = open("/proc/1/comm", O_RDONLY);
    if (fd >= 0) { read(fd, comm, sizeof comm - 1); close(fd); }
    printf("reaper_is_pid_1=%d\n", strcmp(comm, "pidns-reaper\n") == 0);
    targets[1] = sibling();
    printf("machinery=%d\n", machinery());
    for (int i = 0; i < 2; i++) printf("%s=%d\n", names[i], targets[i]);
}
"#;

/// G1 (T5, no confused deputy): the supervisor keeps
/// CAP_SYS_PTRACE and sits above the commands' Landlock domain, so if it
/// opened `/proc` files for them it would hand over what they may not open
/// — another process's memory, writable. Every route to another process's
/// `/proc` entry — `mem` with O_RDWR, `maps` with O_CREAT, a relative path
/// from a `/proc/<pid>` working directory, a dirfd, an O_PATH descriptor
/// reopened through `/proc/self/fd/N`, its descriptor through
/// `/proc/<pid>/fd/1`, a link of it, a symlink planted in the work dir —
/// gets exactly the errno the same sandbox gives without the guard (the
/// kernel's own answer for a command), for the reaper (the commands' pid 1)
/// and for a non-dumpable process of the command's own making; the pids are
/// the command's own `/proc` numbers, which the guard translates to its own
/// to tell the caller's process from another's. PID 1 and the forwarder are
/// not in that `/proc` at all. The caller's own `/proc/self/mem` stays
/// writable. Host: the work dir holds only what the program made (its
/// symlinks and `after.txt`), `after.pem` refused — the guard kept serving.
#[test]
fn another_processs_proc_entries_get_the_kernels_answer() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let source = format!(
        "{SANDBOX_PROCESSES}{}",
        r#"
static void report(const char *who, const char *how, int rc) {
    printf("%s_%s=%d\n", who, how, rc < 0 ? errno : 0);
    if (rc >= 0) close(rc);
}

int main(void) {
    only_in_a_sandbox();
    find_sandbox_processes();
    char p[128], q[128];
    int here = open(".", O_PATH | O_DIRECTORY);
    for (int i = 0; i < 2; i++) {
        const char *who = names[i];
        int pid = targets[i];
        if (pid <= 0) continue;
        snprintf(p, sizeof p, "/proc/%d/mem", pid);
        report(who, "mem", open(p, O_RDWR));
        report(who, "mem_creat", open(p, O_RDWR | O_CREAT, 0644));
        snprintf(p, sizeof p, "/proc/%d/maps", pid);
        report(who, "maps_creat", open(p, O_RDONLY | O_CREAT, 0644));
        snprintf(p, sizeof p, "/proc/%d", pid);
        int dir = open(p, O_PATH | O_DIRECTORY);
        report(who, "dirfd", openat(dir, "mem", O_RDWR));
        report(who, "dirfd_maps", openat(dir, "maps", O_RDONLY | O_CREAT, 0644));
        if (fchdir(dir) == 0) {
            report(who, "relative", open("mem", O_RDWR));
            fchdir(here);
        }
        close(dir);
        snprintf(p, sizeof p, "/proc/%d/mem", pid);
        int path = open(p, O_PATH);
        snprintf(q, sizeof q, "/proc/self/fd/%d", path);
        report(who, "reopen", open(q, O_RDWR));
        snprintf(q, sizeof q, "/dev/fd/%d", path);
        report(who, "devfd", open(q, O_WRONLY));
        close(path);
        snprintf(p, sizeof p, "/proc/%d/fd/1", pid);
        report(who, "their_fd", open(p, O_WRONLY));
        snprintf(q, sizeof q, "stolen-%s.txt", who);
        printf("%s_link=%d\n", who, linkat(AT_FDCWD, p, AT_FDCWD, q, AT_SYMLINK_FOLLOW) < 0 ? errno : 0);
        snprintf(p, sizeof p, "/proc/%d/mem", pid);
        snprintf(q, sizeof q, "link-%s", who);
        printf("%s_symlink_made=%d\n", who, symlink(p, q) < 0 ? errno : 0);
        report(who, "symlink", open(q, O_RDWR));
        snprintf(p, sizeof p, "/proc/%d/x.pem", pid);
        report(who, "create", open(p, O_CREAT | O_WRONLY, 0644));
    }
    report("own", "mem", open("/proc/self/mem", O_RDWR));
    report("own", "stdout", open("/proc/self/fd/1", O_WRONLY));
    try_create("after.pem", "after.pem");
    try_create("after.txt", "after.txt");
    kill(targets[1], SIGKILL);
    return 0;
}
"#
    );
    let prog = c_program("deputy", &source);
    let run = |guarded: bool| {
        let work = tempfile::tempdir().unwrap();
        let w = work.path();
        let out = if guarded {
            prog.sh(&plugins, w, &[], &prog.path())
        } else {
            prog.sh_unguarded(&plugins, w, &prog.path())
        };
        assert_eq!(code(&out), 0, "{}", both(&out));
        let made: Vec<String> = snapshot(w)
            .iter()
            .map(|(path, _)| path.strip_prefix(w).unwrap().display().to_string())
            .collect();
        (out, made)
    };
    let (guarded, made) = run(true);
    let (kernel, _) = run(false);
    for out in [&guarded, &kernel] {
        assert_eq!(reading(out, "woken"), 1, "{}", both(out));
        assert_eq!(reading(out, "reaper_is_pid_1"), 1, "{}", both(out));
        assert_eq!(reading(out, "machinery"), 0, "{}", both(out));
    }
    for who in ["reaper", "sib"] {
        assert!(
            reading(&guarded, who) > 0,
            "no {who} found\n{}",
            both(&guarded)
        );
        for how in [
            "mem",
            "mem_creat",
            "maps_creat",
            "dirfd",
            "dirfd_maps",
            "relative",
            "reopen",
            "devfd",
            "their_fd",
            "link",
            "symlink",
            "create",
        ] {
            let label = format!("{who}_{how}");
            let (got, want) = (reading(&guarded, &label), reading(&kernel, &label));
            assert_ne!(
                want,
                0,
                "{label}: the kernel itself allowed it\n{}",
                both(&kernel)
            );
            assert_eq!(
                got,
                want,
                "{label}: the guard answered {got}, the kernel {want}\nguarded:\n{}\nkernel:\n{}",
                both(&guarded),
                both(&kernel)
            );
        }
    }
    assert_eq!(reading(&guarded, "own_mem"), 0, "{}", both(&guarded));
    assert_eq!(reading(&guarded, "own_stdout"), 0, "{}", both(&guarded));
    assert_eq!(
        reading(&guarded, "after.pem"),
        i64::from(libc::EACCES),
        "{}",
        both(&guarded)
    );
    assert_eq!(reading(&guarded, "after.txt"), 0, "{}", both(&guarded));
    let mut expected = vec![
        "after.txt".to_owned(),
        "link-reaper".to_owned(),
        "link-sib".to_owned(),
    ];
    expected.sort();
    assert_eq!(made, expected, "{}", both(&guarded));
}

/// G1 (T4, T5): the sandbox's long-lived processes — PID 1 (the
/// supervisor), the egress forwarder and the commands' namespace reaper —
/// are out of the commands' reach: PID 1 and the forwarder have no pid in
/// the commands' pid namespace (their `/proc` shows neither), and the
/// reaper, their namespace's init and the one other process they can name,
/// refuses `ptrace` and `process_vm_writev` (EPERM, the hardening filter)
/// and outlives SIGSTOP and SIGKILL sent through its `/proc` descriptor
/// (refused by Landlock's signal scope where the kernel has it, else
/// dropped: an init ignores what it has no handler for).
/// Host: afterwards the command is alive and the guard still serves
/// (`alive.txt` created, `alive.pem` refused), and a connection to the
/// forwarder's port still reaches it (the forwarder answered).
#[test]
fn the_sandboxs_own_processes_are_out_of_reach() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let source = format!(
        "{SANDBOX_PROCESSES}{}",
        r#"
#include <sys/ptrace.h>
#include <sys/uio.h>

int main(void) {
    only_in_a_sandbox();
    find_sandbox_processes();
    char p[64], byte = 0;
    for (int i = 0; i < 1; i++) {
        const char *who = names[i];
        int pid = targets[i];
        if (pid <= 0) continue;
        printf("%s_ptrace=%d\n", who, ptrace(PTRACE_ATTACH, pid, 0, 0) < 0 ? errno : 0);
        struct iovec local = { &byte, 1 }, remote = { (void *)0x400000, 1 };
        printf("%s_vm_writev=%d\n", who,
               process_vm_writev(pid, &local, 1, &remote, 1, 0) < 0 ? errno : 0);
        snprintf(p, sizeof p, "/proc/%d", pid);
        int dir = open(p, O_RDONLY | O_DIRECTORY);
        int sigs[3] = {SIGSTOP, SIGKILL, SIGTERM};
        const char *sig_names[3] = {"stop", "kill", "term"};
        for (int s = 0; s < 3; s++)
            printf("%s_%s=%d\n", who, sig_names[s],
                   syscall(SYS_pidfd_send_signal, dir, sigs[s], NULL, 0) < 0 ? errno : 0);
        close(dir);
    }
    kill(targets[1], SIGKILL);
    usleep(300000);
    struct stat st;
    printf("reaper_alive=%d\n", stat("/proc/1/comm", &st) == 0);
    printf("alive=1\n");
    fflush(stdout);
    try_create("alive.pem", "alive.pem");
    try_create("alive.txt", "alive.txt");
    return 0;
}
"#
    );
    let prog = c_program("reach", &source);
    // Through the forwarder to the session's HTTP proxy, which answers a
    // CONNECT to a loopback port with a refusal: only a live forwarder
    // relays it.
    let script = format!(
        "{}\n{}",
        prog.path(),
        r#"reply=$(bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128 && printf "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n" >&3 && timeout 20 head -c 12 <&3' 2>/dev/null)
echo "proxy-reply=$reply"
"#
    );
    let out = prog.sh(&plugins, w, &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(reading(&out, "woken"), 1, "no forwarder\n{}", both(&out));
    assert_eq!(reading(&out, "reaper_is_pid_1"), 1, "{}", both(&out));
    assert_eq!(
        reading(&out, "machinery"),
        0,
        "PID 1 or the forwarder shows in the commands' /proc\n{}",
        both(&out)
    );
    for how in ["ptrace", "vm_writev"] {
        assert_eq!(
            reading(&out, &format!("reaper_{how}")),
            i64::from(libc::EPERM),
            "reaper {how}\n{}",
            both(&out)
        );
    }
    assert_eq!(reading(&out, "reaper_alive"), 1, "{}", both(&out));
    assert_eq!(reading(&out, "alive"), 1, "{}", both(&out));
    assert_eq!(reading(&out, "alive.pem"), i64::from(libc::EACCES));
    assert_absent(&w.join("alive.pem"), &out);
    assert_eq!(reading(&out, "alive.txt"), 0, "{}", both(&out));
    assert!(w.join("alive.txt").exists(), "{}", both(&out));
    assert!(
        lines(&out)
            .iter()
            .any(|l| l.starts_with("proxy-reply=HTTP/1.")),
        "the forwarder did not relay\n{}",
        both(&out)
    );
}

/// E2, kept off a start: the egress forwarder starts at the first connection to
/// a proxy port, not with every sandbox — before one no `--forwarder`
/// process runs; that first connection is relayed all the same (the
/// session's proxy answers a CONNECT to a loopback port with its refusal,
/// which only a live forwarder passes on), and the forwarder runs after it
/// (a process whose first argument is `--forwarder`). Counted from the host
/// among the processes `cc_server` started, as the script waits: the
/// commands' own `/proc` does not show the forwarder.
#[test]
fn the_forwarder_starts_at_the_first_connection() {
    use std::io::{BufRead, Write};
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let script = format!(
        "{ONLY_IN_A_SANDBOX}{}",
        r#"echo before
read _
reply=$(bash -c 'exec 3<>/dev/tcp/127.0.0.1/3128 && printf "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n" >&3 && timeout 20 head -c 12 <&3' 2>/dev/null)
echo "reply=$reply"
echo after
read _
"#
    );
    let command = CcServer::new(&plugins)
        .config(SANDBOX_LAYER_ONLY)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script]);
    // Its config lives there: kept until the run is over.
    let _home = command.home();
    let mut child = command.spawn_with(std::process::Stdio::piped(), std::process::Stdio::piped());
    let server = child.id() as i32;
    let forwarders = || {
        descendants(server)
            .into_iter()
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(&b"--forwarder"[..]))
            })
            .count()
    };
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    let mut counts = Vec::new();
    let mut line = String::new();
    while stdout.read_line(&mut line).unwrap_or(0) > 0 {
        let said = line.trim_end().to_owned();
        line.clear();
        if said == "before" || said == "after" {
            counts.push(forwarders());
            let _ = writeln!(stdin);
        }
        seen.push(said);
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let shown = format!("{seen:?}\n{}", both(&out));
    assert_eq!(code(&out), 0, "{shown}");
    assert_eq!(counts, [0, 1], "forwarders before and after\n{shown}");
    assert!(
        seen.iter().any(|l| l.starts_with("reply=HTTP/1.")),
        "the first connection was not relayed\n{shown}"
    );
}

/// C1, G1 (T7): a program written into a memfd does not run,
/// any more than one written to a file. As root, the reaper of the
/// commands' pid namespace sets `vm.memfd_noexec = 2` there:
/// `memfd_create(MFD_EXEC)` is refused (EACCES) and every other memfd is
/// sealed non-executable. Any other account may not write that setting, so
/// the commands' filter lets `memfd_create` through only with
/// `MFD_NOEXEC_SEAL` (ENOSYS otherwise, as on a kernel without memfds).
/// Either way `fexecve` (execveat AT_EMPTY_PATH), `execve("/proc/self/fd/N")`
/// and `chmod +x` of the memfd fail, and sealed memfds keep working; the
/// same with and without the guard. (As root this runs both as root and as
/// `nobody`.) Host: the copied `echo` never printed its marker.
#[test]
fn a_program_in_a_memfd_cannot_be_executed() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let prog = c_program(
        "memexec",
        r#"
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#ifndef MFD_EXEC
#define MFD_EXEC 0x10U
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x8U
#endif

static void run_from(const char *label, int fd, int how) {
    pid_t child = fork();
    if (child == 0) {
        char *argv[] = {"echo", "MEMFD-RAN", NULL};
        char *envp[] = {NULL};
        char p[64];
        snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
        if (how == 0) syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
        else execve(p, argv, envp);
        printf("%s=%d\n", label, errno);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
}

int main(void) {
    only_in_a_sandbox();
    int fd = memfd_create("prog", 0);
    printf("memfd=%d\n", fd < 0 ? errno : 0);
    if (fd < 0) fd = memfd_create("prog", MFD_NOEXEC_SEAL);
    printf("sealed=%d\n", fd < 0 ? errno : 0);
    if (fd < 0) return 1;
    int bin = open("/usr/bin/echo", O_RDONLY);
    char buf[65536];
    ssize_t n;
    while ((n = read(bin, buf, sizeof buf)) > 0)
        if (write(fd, buf, (size_t)n) != n) return 1;
    close(bin);
    printf("chmod=%d\n", fchmod(fd, 0755) < 0 ? errno : 0);
    run_from("execveat", fd, 0);
    run_from("execve", fd, 1);
    int exec_flag = memfd_create("exec", MFD_EXEC);
    printf("mfd_exec=%d\n", exec_flag < 0 ? errno : 0);
    printf("readback=%d\n", pread(fd, buf, 4, 0) == 4 && memcmp(buf, "\177ELF", 4) == 0 ? 0 : 1);
    return 0;
}
"#,
    );
    // SAFETY: plain getter.
    let root = unsafe { libc::geteuid() } == 0;
    // As root: root itself (the sysctl), then `nobody` (the filter).
    let mut accounts = vec![None];
    if root {
        accounts.push(Some((65534, 65534)));
        std::fs::set_permissions(prog.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    } else {
        skip_or_fail(
            "its case as `nobody` (the filter, not the sysctl) needs root: CI runs the tests as root",
        );
    }
    // `nobody` may not be able to enter the checkout (root's home): a copy
    // of the binary anyone can run.
    let bin_dir = tempfile::tempdir().unwrap();
    let program = bin_dir.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for account in accounts {
        for guarded in [true, false] {
            let work = tempfile::tempdir().unwrap();
            let more = if guarded {
                ""
            } else {
                "guard = false\n[dispatch_policy]\nwrite_deny_globs = []\n"
            };
            let config = format!(
                "{SANDBOX_LAYER_ONLY}[backends.bwrap]\nsystem_paths = [{:?}]\n{more}",
                s(prog.dir.path())
            );
            let mut server = CcServer::with_program(&plugins, &program)
                .config(&config)
                .current_dir(work.path());
            if let Some((uid, gid)) = account {
                std::os::unix::fs::chown(work.path(), Some(uid), Some(gid)).unwrap();
                server = server.run_as(uid, gid);
            }
            let script = format!("{ONLY_IN_A_SANDBOX}{}", prog.path());
            let out = server
                .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script])
                .output();
            let case = format!("account {account:?}, guarded={guarded}");
            assert_eq!(code(&out), 0, "{case}\n{}", both(&out));
            assert!(
                !text(&out.stdout).contains("MEMFD-RAN"),
                "{case}\n{}",
                both(&out)
            );
            // As root the kernel seals what it makes; otherwise only a
            // sealed memfd may be made (an unsealed one: ENOSYS).
            let (memfd, mfd_exec) = match (root, account) {
                (true, None) => (0, libc::EACCES),
                (false, _) => (reading(&out, "memfd"), reading(&out, "mfd_exec") as i32),
                (true, Some(_)) => (i64::from(libc::ENOSYS), libc::ENOSYS),
            };
            assert_eq!(reading(&out, "memfd"), memfd, "{case}\n{}", both(&out));
            assert!(
                [libc::EACCES, libc::ENOSYS].contains(&mfd_exec),
                "{case}\n{}",
                both(&out)
            );
            assert_eq!(
                reading(&out, "mfd_exec"),
                i64::from(mfd_exec),
                "{case}\n{}",
                both(&out)
            );
            assert_eq!(reading(&out, "sealed"), 0, "{case}\n{}", both(&out));
            assert_eq!(reading(&out, "readback"), 0, "{case}\n{}", both(&out));
            assert_eq!(
                reading(&out, "chmod"),
                i64::from(libc::EPERM),
                "{case}\n{}",
                both(&out)
            );
            for label in ["execveat", "execve"] {
                assert_eq!(
                    reading(&out, label),
                    i64::from(libc::EACCES),
                    "{label}, {case}\n{}",
                    both(&out)
                );
            }
        }
    }
}

/// G5, the nested-repository chain: in a repository that
/// existed at launch, the index stays writable (`git add` needs it), so a
/// command could register a submodule and give it a git directory of its
/// own — a new `sub/.git` directory, a `sub/.git` file pointing anywhere
/// (gitdir redirect), or a repository made next door and moved in — whose
/// `core.fsmonitor` the host's next `git status` in the repository runs.
/// Each is refused, naming the rule; outside the repository, and inside it
/// for ordinary work, git works. Host: `git status` runs nothing.
#[test]
fn no_repository_of_the_commands_appears_inside_an_existing_one() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let proj = w.join("proj");
    committed_repo(&proj, "p.txt");
    // Not bound: only the host could touch it.
    let host_only = tempfile::tempdir().unwrap();
    let marker = host_only.path().join("MARKER");
    let m = s(&marker);
    let evil = format!(
        "git init -q evil && git -C evil config core.fsmonitor 'touch {m}; false' && \
         git -C evil commit -q --allow-empty -m e"
    );
    let link =
        "git -C proj update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),sub";
    let mut script = String::from(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com \
         GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com\n",
    );
    script += &attempt("outside", &evil);
    script += &attempt("register", link);
    // The redirect first: without the rule it alone completes the chain
    // (checked by hand on the host: `git status` then runs the payload).
    script += &attempt(
        "gitfile",
        &format!(
            "mkdir -p proj/sub && echo 'gitdir: {}/evil/.git' > proj/sub/.git",
            s(w)
        ),
    );
    script += &attempt("moved-in", "rmdir proj/sub && mv evil proj/sub 2>/dev/null");
    script += &attempt("nested-init", "git init -q proj/sub 2>/dev/null");
    script += &attempt("clone-in", "git clone -q evil proj/vendor 2>/dev/null");
    script += &attempt("mv-inside", "mkdir proj/a && mv proj/a proj/b");
    script += &attempt("commit", "git -C proj commit -q --allow-empty -m inside");
    script += &attempt("clone-outside", "git clone -q evil copy");
    let out = guard_sh(&plugins, w, &[], &script);
    for ok in [
        "outside",
        "register",
        "mv-inside",
        "commit",
        "clone-outside",
    ] {
        assert_line(&out, &format!("{ok}=ok"));
    }
    assert_failed(&out, &["nested-init", "moved-in", "gitfile", "clone-in"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no new repository inside the existing repository"),
        "{}",
        both(&out)
    );
    assert!(!proj.join("sub/.git").exists(), "{}", both(&out));
    // The host's own git, in the repository, as its user would run it.
    let status = Command::new("git")
        .args(["status", "--short"])
        .current_dir(&proj)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", text(&status.stderr));
    assert!(
        !marker.exists(),
        "the host's git ran the command's fsmonitor"
    );
}

/// Writes a script, makes it executable by each route, closes it and execs
/// it at once, in a fresh child each time; prints `NAME=<failures>`.
const WRITE_THEN_EXEC_C: &str = r##"
#include <sys/stat.h>
#include <sys/wait.h>
static int once(const char *name, int route) {
    static const char script[] = "#!/bin/sh\nexit 0\n";
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(name, O_CREAT | O_EXCL | O_WRONLY, route == 0 ? 0755 : 0644);
        if (fd < 0 || write(fd, script, sizeof script - 1) < 0) _exit(2);
        if (route == 1 && fchmod(fd, 0755) != 0) _exit(3);
        if (route == 2 && chmod(name, 0700) != 0) _exit(4);
        close(fd);
        execl(name, name, (char *)0);
        _exit(errno == ETXTBSY ? 1 : 5);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 6;
}
int main(void) {
    only_in_a_sandbox();
    const char *routes[] = {"created-0755", "fchmod-0755", "chmod-0700"};
    for (int route = 0; route < 3; route++) {
        int failed = 0;
        for (int i = 0; i < 100; i++) {
            char name[64];
            snprintf(name, sizeof name, "run-%d-%d.sh", route, i);
            int rc = once(name, route);
            if (rc != 0) { failed++; fprintf(stderr, "%s: exit %d\n", name, rc); }
        }
        printf("%s=%d\n", routes[route], failed);
    }
    return 0;
}
"##;

/// G1: the supervisor answers some injected descriptors
/// in one step and drops its copy a moment later; a file written and exec'd
/// at once must still never be "busy" (ETXTBSY) — whether it was created
/// executable, or made so with `fchmod` or `chmod` before the exec.
#[test]
fn a_file_written_and_run_at_once_is_never_busy() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let prog = c_program("write_then_exec", WRITE_THEN_EXEC_C);
    let out = prog.sh(&plugins, work.path(), &[], &prog.path());
    assert_eq!(code(&out), 0, "{}", both(&out));
    for route in ["created-0755", "fchmod-0755", "chmod-0700"] {
        assert_eq!(reading(&out, route), 0, "{route}\n{}", both(&out));
    }
}

/// G1: a process that never called `umask` creates with the umask its exec
/// started with — the server's own, here 027 (the supervisor knows it
/// without reading each new process's `/proc` status) — and once a process
/// has called `umask`, each creates with its own: a subshell's 077, and a
/// later child's inherited 027.
#[test]
fn new_processes_create_with_the_umask_their_exec_started_with() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let script = format!(
        "{ONLY_IN_A_SANDBOX}touch a.txt; mkdir d1; (umask 077; touch b.txt; mkdir d2); sh -c 'touch c.txt'"
    );
    let out = CcServer::new(&plugins)
        .with_umask(0o027)
        .config(SANDBOX_LAYER_ONLY)
        .current_dir(w)
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script])
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    let mode = |name: &str| permission_bits(&w.join(name));
    for (name, want) in [
        ("a.txt", 0o640),
        ("d1", 0o750),
        ("b.txt", 0o600),
        ("d2", 0o700),
        ("c.txt", 0o640),
    ] {
        assert_eq!(mode(name), want, "{name}\n{}", both(&out));
    }
}

/// G1: the supervisor creates with the caller's umask, also after the
/// caller changed it (the guard learns of every `umask` call).
#[test]
fn a_changed_umask_applies_to_the_next_create() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let out = guard_sh(
        &plugins,
        w,
        &[],
        "umask 022; /usr/bin/python3 -c \"import os
open('first.txt', 'w').close()
os.umask(0o077)
open('second.txt', 'w').close()
os.mkdir('third')\"",
    );
    assert_eq!(code(&out), 0, "{}", both(&out));
    let mode = |name: &str| permission_bits(&w.join(name));
    assert_eq!(mode("first.txt"), 0o644, "{}", both(&out));
    assert_eq!(mode("second.txt"), 0o600, "{}", both(&out));
    assert_eq!(mode("third"), 0o700, "{}", both(&out));
}
