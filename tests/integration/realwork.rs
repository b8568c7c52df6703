//! Real developer work inside the default sandbox (SPEC G4, as root and as an
//! ordinary user): each case is a fresh workspace, the machine's real
//! toolchain and a plain `cc_server run` in chat mode on the bwrap backend,
//! checked on the host afterwards — C with `make -j2`, a project shell script,
//! cargo, a venv with pip and pytest, npm with `npx` and a script that runs a
//! `node_modules/.bin` tool, git, a large output, a large stdin — once as the
//! account running the tests (root in CI) and once as the unprivileged test
//! account `cc-test` that `.ci/install-deps` creates (a home, a git identity,
//! the Rust toolchain readable in `/opt/cc-test-toolchain`).
//!
//! Registries: each package is downloaded once per run, through the
//! session's own proxy, by the invoking account's online case (a `OnceLock`
//! runs it; a failure is retried once, and a registry the host cannot reach
//! either fails as "registry unreachable"); the unprivileged cases and the
//! cargo dependency use what that run left, offline. The registry hosts are
//! the ones this machine is configured with (pip, npm and cargo config),
//! added with `--allow-domain` (a no-op for the baseline's hosts).
//!
//! Chat mode asks before an install; these cases get past it with a
//! guardrails file that allows installs, and one case answers `--ask` at a
//! pseudo-terminal — never with `[policy] enforce = false`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::util::*;

/// The unprivileged test account (`.ci/install-deps` makes it).
const TEST_USER: &str = "cc-test";
/// Its Rust toolchain: root's active toolchain, hard-linked (install-deps).
const TEST_TOOLCHAIN: &str = "/opt/cc-test-toolchain/bin";
/// The one rule the cases need past chat mode's install prompt.
const ALLOW_INSTALLS: &str = "[[rule]]\nclass = \"install_package\"\ndecision = \"allow\"\n";

/// Who runs a case.
#[derive(Clone, Debug)]
struct Account {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
    /// The account running the tests (else `cc-test`, run with `run_as`).
    invoking: bool,
}

/// One `/etc/passwd` entry, by name or uid.
fn passwd(matches: impl Fn(&str, u32) -> bool) -> Option<(String, u32, u32, PathBuf)> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        let (uid, gid) = (f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?);
        let home = PathBuf::from(f.get(5)?);
        matches(f[0], uid).then(|| (f[0].to_owned(), uid, gid, home))
    })
}

/// The account running the tests.
fn invoking() -> Account {
    // SAFETY: plain getters.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let (name, home) = match passwd(|_, u| u == uid) {
        Some((name, _, _, home)) => (name, home),
        None => (
            uid.to_string(),
            PathBuf::from(std::env::var_os("HOME").unwrap()),
        ),
    };
    Account {
        name,
        uid,
        gid,
        home,
        invoking: true,
    }
}

/// `cc-test`, when the tests run as root (as CI does); when they do not,
/// `None` after saying the unprivileged case is skipped (a failure under
/// CI). Root without the account is a failure: install-deps makes it.
fn test_user() -> Option<Account> {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail(format!(
            "the unprivileged real-work cases run as `{TEST_USER}`, which needs the tests \
             to run as root: CI runs them as root, after `.ci/install-deps` made `{TEST_USER}`"
        ));
        return None;
    }
    let (name, uid, gid, home) = passwd(|n, _| n == TEST_USER).unwrap_or_else(|| {
        panic!("no account `{TEST_USER}`: run `bash .ci/install-deps` as root (it creates it)")
    });
    assert!(
        Path::new(TEST_TOOLCHAIN).join("cargo").exists(),
        "{TEST_TOOLCHAIN}/cargo is missing: run `bash .ci/install-deps` as root (it links the Rust toolchain there for `{TEST_USER}`)"
    );
    Some(Account {
        name,
        uid,
        gid,
        home,
        invoking: false,
    })
}

/// The plugins every case shares.
fn plugins() -> &'static Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS.get_or_init(Plugins::with_bwrap)
}

/// Directories the run made that outlive a case (the online cases'
/// workspaces, the copy of the binary), removed when the test binary exits.
fn keep_until_exit(dir: tempfile::TempDir) -> PathBuf {
    static KEPT: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    static REGISTERED: OnceLock<()> = OnceLock::new();
    extern "C" fn remove_kept() {
        if let Ok(dirs) = KEPT.lock() {
            for dir in dirs.iter() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }
    REGISTERED.get_or_init(|| {
        // SAFETY: registers a plain function; it only removes directories.
        unsafe { libc::atexit(remove_kept) };
    });
    let path = dir.keep();
    KEPT.lock().unwrap().push(path.clone());
    path
}

/// A copy of `cc_server` in a directory anyone can read: the checkout may
/// sit below one `cc-test` cannot enter (root's home).
fn program_for_anyone() -> &'static Path {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let program = dir.path().join("cc_server");
        std::fs::copy(cc_server_bin(), &program).unwrap();
        keep_until_exit(dir).join("cc_server")
    })
}

/// A fresh, empty workspace owned by `account`.
fn workspace(account: &Account) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(account.uid), Some(account.gid)).unwrap();
    dir
}

/// Writes a project file (and its directories) as `account`'s.
fn put(account: &Account, work: &Path, rel: &str, contents: &str, mode: u32) {
    let path = work.join(rel);
    let mut dir = path.parent().unwrap();
    let mut made = Vec::new();
    while !dir.exists() {
        made.push(dir.to_path_buf());
        dir = dir.parent().unwrap();
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    for p in made.iter().map(PathBuf::as_path).chain([path.as_path()]) {
        std::os::unix::fs::chown(p, Some(account.uid), Some(account.gid)).unwrap();
    }
}

/// Copies a tree the online case left into `account`'s workspace.
fn copy_in(account: &Account, from: &Path, to: &Path) {
    run_host(Command::new("cp").arg("-a").arg(from).arg(to));
    run_host(
        Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", account.uid, account.gid))
            .arg(to),
    );
}

/// A host command that must succeed; its stdout.
fn run_host(command: &mut Command) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(out.status.success(), "{command:?}:\n{}", both(&out));
    text(&out.stdout)
}

/// The host part of a URL (`sparse+https://h:8080/x` → `h`).
fn url_host(url: &str) -> Option<String> {
    let rest = url.trim().split("://").nth(1)?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host.split(':').next()?,
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// The registry URLs this machine is configured with, as the invoking
/// account sees them: pip's index, npm's registry, cargo's replaced
/// source (see [`cargo_config`]). Defaults when nothing is configured.
struct Registries {
    pip_index: Option<String>,
    npm: String,
    hosts: Vec<String>,
}

/// The invoking account's cargo config file, if it has one.
fn cargo_config() -> Option<PathBuf> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| invoking().home.join(".cargo"));
    ["config.toml", "config"]
        .iter()
        .map(|n| cargo_home.join(n))
        .find(|p| p.is_file())
}

fn registries() -> &'static Registries {
    static REGISTRIES: OnceLock<Registries> = OnceLock::new();
    REGISTRIES.get_or_init(|| {
        let mut urls = Vec::new();
        // pip: `index-url` and `extra-index-url` from every config and PIP_*.
        let mut pip_index = None;
        if let Ok(out) = Command::new("python3")
            .args(["-m", "pip", "config", "list"])
            .output()
        {
            for line in text(&out.stdout).lines() {
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('\'').to_owned();
                if key.ends_with(".index-url") {
                    pip_index = Some(value.clone());
                }
                if key.ends_with("index-url") {
                    urls.extend(value.split_whitespace().map(str::to_owned));
                }
            }
        }
        let npm = Command::new("npm")
            .args(["config", "get", "registry"])
            .output()
            .ok()
            .map(|o| text(&o.stdout).trim().to_owned())
            .filter(|r| r.contains("://"))
            .unwrap_or_else(|| "https://registry.npmjs.org/".to_owned());
        urls.push(npm.clone());
        // cargo: the config's registry and index URLs (source replacement).
        let cargo_config = cargo_config();
        if let Some(config) = &cargo_config {
            for line in std::fs::read_to_string(config).unwrap_or_default().lines() {
                let line = line.trim();
                if line.starts_with("registry") || line.starts_with("index") {
                    urls.extend(line.split('"').nth(1).map(str::to_owned));
                }
            }
        }
        let mut hosts: Vec<String> = urls.iter().filter_map(|u| url_host(u)).collect();
        hosts.sort();
        hosts.dedup();
        Registries {
            pip_index,
            npm,
            hosts,
        }
    })
}

/// Everything `cargo test` put into this process's environment that a
/// developer's shell does not have (it would point cargo and rustup at the
/// test's own toolchain and package).
fn is_test_runner_variable(key: &str) -> bool {
    ["CARGO", "RUSTUP", "RUSTC", "RUST_", "RUSTDOC", "__CARGO"]
        .iter()
        .any(|p| key.starts_with(p))
}

/// `cc_server [--config …] run --backend bwrap [--allow-domain …]` as
/// `account`, in `work`, with installs allowed by a guardrails file (or, with
/// `guardrails` false, chat mode's own table: an install asks). The caller
/// adds `--`, the command, and any run flags before it.
fn session(account: &Account, work: &Path, guardrails: bool) -> CcServer {
    session_at(account, work, &account.home, guardrails)
}

/// [`session`] from `cwd` with `HOME` = `home`.
fn session_at(account: &Account, cwd: &Path, home: &Path, guardrails: bool) -> CcServer {
    let plugins = plugins();
    let mut server = if account.invoking {
        CcServer::new(plugins)
    } else {
        CcServer::with_program(plugins, program_for_anyone()).run_as(account.uid, account.gid)
    };
    if guardrails {
        let home = server.home();
        std::fs::write(home.path().join("guardrails.toml"), ALLOW_INSTALLS).unwrap();
        server = server.config("[policy]\nguardrails = \"guardrails.toml\"\n");
    }
    for (key, _) in std::env::vars_os() {
        if is_test_runner_variable(&key.to_string_lossy()) {
            server = server.env_remove(key);
        }
    }
    server = server
        .env("HOME", home)
        .env("USER", &account.name)
        .env("LOGNAME", &account.name)
        .env("npm_config_registry", &registries().npm)
        .env("npm_config_update_notifier", "false")
        .env("npm_config_fund", "false")
        .env("npm_config_audit", "false");
    if let Some(index) = &registries().pip_index {
        server = server.env("PIP_INDEX_URL", index);
    }
    if !account.invoking {
        server = server.env(
            "PATH",
            format!("{TEST_TOOLCHAIN}:/usr/local/bin:/usr/bin:/bin"),
        );
    }
    server = server.current_dir(cwd).args(["run", "--backend", "bwrap"]);
    for host in &registries().hosts {
        server = server.arg("--allow-domain").arg(host);
    }
    server
}

/// `sh -c SCRIPT` in a [`session`] with installs allowed, stdin closed.
/// Five minutes at most: a venv on a loaded 2-core machine takes tens of
/// seconds.
fn sh(account: &Account, work: &Path, script: &str) -> Output {
    let server = session(account, work, true).args(["--", "sh", "-c", script]);
    // The config file lives in the private home: kept until the run ends.
    let _home = server.home();
    wait_output(server.spawn(), std::time::Duration::from_secs(300))
}

/// Fails with the output unless the run exited 0.
fn assert_ok(out: &Output, what: &str) {
    assert_eq!(code(out), 0, "{what} failed in the sandbox:\n{}", both(out));
}

/// Asserts that `path` exists on the host and belongs to `account`.
fn assert_owned(account: &Account, path: &Path, out: &Output) {
    let meta = std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{} on the host: {e}\n{}", path.display(), both(out)));
    assert_eq!(
        meta.uid(),
        account.uid,
        "{} belongs to uid {}, not {}'s",
        path.display(),
        meta.uid(),
        account.name
    );
}

/// An online case's outcome, shared by every case that needs what it
/// downloaded: its workspace (kept until the run ends) and its last output.
struct Online {
    work: PathBuf,
    out: Output,
}

/// Runs an online case as the invoking account, retrying a failure once;
/// when the second attempt fails too and the host cannot reach `url`
/// either, the error says "registry unreachable".
fn online(
    what: &str,
    url: &str,
    prepare: impl Fn(&Account, &Path),
    script: &str,
) -> Result<Online, String> {
    let me = invoking();
    let mut failures = String::new();
    for attempt in 1..=2 {
        let work = workspace(&me);
        prepare(&me, work.path());
        let out = sh(&me, work.path(), script);
        if code(&out) == 0 {
            return Ok(Online {
                work: keep_until_exit(work),
                out,
            });
        }
        eprintln!("{what}: attempt {attempt} failed:\n{}", both(&out));
        failures.push_str(&format!("--- attempt {attempt}:\n{}\n", both(&out)));
    }
    let probe = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-m", "30", url])
        .output();
    match probe {
        Ok(p) if p.status.success() => Err(format!(
            "{what} failed twice in the sandbox although the host reaches {url}:\n{failures}"
        )),
        Ok(p) => Err(format!(
            "registry unreachable: {url} ({}); {what} needs it:\n{failures}",
            text(&p.stderr).trim()
        )),
        Err(e) => Err(format!(
            "registry unreachable? cannot run curl to check {url} ({e}); {what}:\n{failures}"
        )),
    }
}

/// The outcome of an online case, or the failure every dependent case
/// repeats.
fn downloaded<'a>(online: &'a Result<Online, String>, what: &str) -> &'a Online {
    online
        .as_ref()
        .unwrap_or_else(|e| panic!("{what} needs the online case, which failed: {e}"))
}

// ---- C with make ----------------------------------------------------------

const MAIN_C: &str = "#include <stdio.h>\nint answer(void);\n\
    int main(void) { printf(\"hello from make: %d\\n\", answer()); return 0; }\n";
const ANSWER_C: &str = "int answer(void) { return 42; }\n";
const MAKEFILE: &str = "hello: main.o answer.o\n\t$(CC) -o $@ $^\n\
    %.o: %.c\n\t$(CC) -O1 -c -o $@ $<\n\
    clean:\n\trm -f hello *.o\n";

fn c_with_make(account: &Account) {
    let work = workspace(account);
    let w = work.path();
    put(account, w, "main.c", MAIN_C, 0o644);
    put(account, w, "answer.c", ANSWER_C, 0o644);
    put(account, w, "Makefile", MAKEFILE, 0o644);
    let out = sh(account, w, "make -j2 && ./hello");
    assert_ok(&out, "make -j2 && ./hello");
    assert!(
        text(&out.stdout).contains("hello from make: 42"),
        "{}",
        both(&out)
    );
    for built in ["hello", "main.o", "answer.o"] {
        assert_owned(account, &w.join(built), &out);
    }
    // The binary the sandbox built runs on the host too.
    let host = run_host(&mut Command::new(w.join("hello")));
    assert_eq!(host, "hello from make: 42\n");
}

/// G4: `make -j2` builds a two-file C program and runs what it built.
#[test]
fn c_with_make_as_the_invoking_account() {
    require_bwrap!();
    c_with_make(&invoking());
}

/// G4: the same as the unprivileged `cc-test`.
#[test]
fn c_with_make_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    c_with_make(&user);
}

// ---- a project shell script -----------------------------------------------

const BUILD_SH: &str = "#!/bin/sh\nset -eu\nmkdir -p out\n\
    ./scripts/stamp.sh \"$1\" > out/report.txt\n\
    for n in 1 2 3; do echo \"step $n\" >> out/report.txt; done\n\
    echo built\n";
const STAMP_SH: &str = "#!/bin/bash\nset -euo pipefail\necho \"report for $1 by $(id -un)\"\n";

fn project_script(account: &Account) {
    let work = workspace(account);
    let w = work.path();
    put(account, w, "scripts/build.sh", BUILD_SH, 0o755);
    put(account, w, "scripts/stamp.sh", STAMP_SH, 0o755);
    let out = session(account, w, true)
        .args(["--", "./scripts/build.sh", "nightly"])
        .output();
    assert_ok(&out, "./scripts/build.sh");
    assert_eq!(text(&out.stdout), "built\n", "{}", both(&out));
    let report = std::fs::read_to_string(w.join("out/report.txt")).unwrap();
    assert_eq!(
        report,
        format!(
            "report for nightly by {}\nstep 1\nstep 2\nstep 3\n",
            account.name
        )
    );
    assert_owned(account, &w.join("out/report.txt"), &out);
}

/// G4: a project's own script (`./scripts/build.sh`, which runs another).
#[test]
fn a_project_script_as_the_invoking_account() {
    require_bwrap!();
    project_script(&invoking());
}

/// G4: the same as the unprivileged `cc-test`.
#[test]
fn a_project_script_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    project_script(&user);
}

// ---- Rust -----------------------------------------------------------------

/// The crate index cargo uses here: the config's replacement, else the
/// default sparse index.
fn cargo_index_url() -> String {
    let text = cargo_config()
        .and_then(|c| std::fs::read_to_string(c).ok())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.trim_start().starts_with("registry"))
        .find_map(|l| l.split('"').nth(1))
        .map(|u| u.trim_start_matches("sparse+").to_owned())
        .unwrap_or_else(|| "https://index.crates.io/config.json".to_owned())
}

/// The one registry dependency, vendored once by an online `cargo vendor`
/// through the session's proxy (`cargo new --vcs none`: the case under test
/// is the cases' own `cargo new`).
fn crates_online() -> &'static Result<Online, String> {
    static ONLINE: OnceLock<Result<Online, String>> = OnceLock::new();
    ONLINE.get_or_init(|| {
        let mut script = String::from("set -e\n");
        // The machine's cargo config (a mirror, say) is in the host's home,
        // which the sandbox does not show: the case brings a copy.
        if cargo_config().is_some() {
            script.push_str("export CARGO_HOME=$PWD/cargo-home\n");
        }
        script.push_str(
            "cargo new -q --vcs none fetch\ncd fetch\n\
             echo 'itoa = \"1\"' >> Cargo.toml\n\
             cargo vendor -q --versioned-dirs ../vendor > /dev/null\n",
        );
        online(
            "cargo vendor of one crate",
            &cargo_index_url(),
            |account, work| {
                if let Some(config) = &cargo_config() {
                    let text = std::fs::read_to_string(config).unwrap();
                    put(account, work, "cargo-home/config.toml", &text, 0o644);
                }
            },
            &script,
        )
    })
}

const HELLO_RS: &str = "fn main() {\n    let mut b = itoa::Buffer::new();\n    \
    println!(\"itoa says {}\", b.format(4242_u64));\n}\n\n\
    #[test]\nfn formats() {\n    assert_eq!(itoa::Buffer::new().format(7_u8), \"7\");\n}\n";

fn rust_with_cargo(account: &Account) {
    let vendored = downloaded(crates_online(), "the cargo dependency case");
    let work = workspace(account);
    let w = work.path();
    copy_in(account, &vendored.work.join("vendor"), &w.join("vendor"));
    let out = sh(
        account,
        w,
        "set -e\ncargo new -q hello\ncd hello\ncargo test -q 2>&1\ncargo run -q\n",
    );
    assert_ok(&out, "cargo new, cargo test, cargo run");
    assert!(
        text(&out.stdout).contains("Hello, world!"),
        "{}",
        both(&out)
    );
    assert!(
        w.join("hello/.git").is_dir(),
        "cargo new made no repository"
    );
    assert_owned(account, &w.join("hello/target"), &out);
    // The dependency, offline from the vendored cache.
    let project = w.join("hello");
    let manifest = std::fs::read_to_string(project.join("Cargo.toml")).unwrap();
    put(
        account,
        &project,
        "Cargo.toml",
        &format!("{manifest}itoa = \"1\"\n"),
        0o644,
    );
    put(account, &project, "src/main.rs", HELLO_RS, 0o644);
    put(
        account,
        &project,
        ".cargo/config.toml",
        "[source.crates-io]\nreplace-with = \"vendored\"\n\n\
         [source.vendored]\ndirectory = \"../vendor\"\n",
        0o644,
    );
    // From the workspace: the vendored crates are beside the project.
    let out = sh(
        account,
        w,
        "set -e\ncd hello\ncargo test -q --offline 2>&1\ncargo run -q --offline\n",
    );
    assert_ok(&out, "cargo test/run with a vendored dependency");
    assert!(
        text(&out.stdout).contains("itoa says 4242"),
        "{}",
        both(&out)
    );
    assert_owned(account, &project.join("Cargo.lock"), &out);
}

/// G4: `cargo new`, `cargo test`, `cargo run`, then one registry
/// dependency (offline, from the vendored cache this run filled).
#[test]
fn rust_with_cargo_as_the_invoking_account() {
    require_bwrap!();
    rust_with_cargo(&invoking());
}

/// G4: the same as `cc-test`, with the toolchain in /opt/cc-test-toolchain.
#[test]
fn rust_with_cargo_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    rust_with_cargo(&user);
}

// ---- Python ---------------------------------------------------------------

const TEST_PY: &str = "def test_adds():\n    assert 1 + 1 == 2\n";

/// The invoking account's venv: `pip install pytest` from the package
/// index through the session's proxy, pytest from the venv; `pip download`
/// (from pip's cache, so nothing twice) leaves the wheels for the offline
/// cases.
fn python_online() -> &'static Result<Online, String> {
    static ONLINE: OnceLock<Result<Online, String>> = OnceLock::new();
    ONLINE.get_or_init(|| {
        let index = registries()
            .pip_index
            .clone()
            .unwrap_or_else(|| "https://pypi.org/simple/".to_owned());
        online(
            "pip install pytest",
            &format!("{}/pytest/", index.trim_end_matches('/')),
            |account, work| put(account, work, "project/test_adds.py", TEST_PY, 0o644),
            "set -e\nexport PIP_CACHE_DIR=$PWD/pip-cache\ncd project\n\
             python3 -m venv .venv\n\
             .venv/bin/pip install -q pytest\n\
             .venv/bin/pip download -q -d ../wheels pytest\n\
             .venv/bin/pytest -q\n",
        )
    })
}

fn assert_pytest_ran(account: &Account, project: &Path, out: &Output) {
    assert!(text(&out.stdout).contains("1 passed"), "{}", both(out));
    assert!(project.join(".venv/bin/pytest").is_file(), "{}", both(out));
    assert_owned(account, &project.join(".venv/bin/pytest"), out);
}

/// G4: a venv, `pip install pytest` from the package index
/// through the session's proxy, pytest from the venv.
#[test]
fn python_venv_pip_and_pytest_as_the_invoking_account() {
    require_bwrap!();
    let online = downloaded(python_online(), "the Python case");
    assert_pytest_ran(&invoking(), &online.work.join("project"), &online.out);
}

/// G4: the same as `cc-test`, installing offline from the wheels the
/// online case left.
#[test]
fn python_venv_pip_and_pytest_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    let online = downloaded(python_online(), "the unprivileged Python case");
    let work = workspace(&user);
    let w = work.path();
    copy_in(&user, &online.work.join("wheels"), &w.join("wheels"));
    put(&user, w, "project/test_adds.py", TEST_PY, 0o644);
    let out = sh(
        &user,
        w,
        "set -e\ncd project\npython3 -m venv .venv\n\
         .venv/bin/pip install -q --no-index --find-links ../wheels pytest\n\
         .venv/bin/pytest -q\n",
    );
    assert_ok(&out, "venv, pip install --no-index, pytest");
    assert_pytest_ran(&user, &w.join("project"), &out);
}

// ---- Node -----------------------------------------------------------------

/// What every Node case runs after its install: the tool through `npx`
/// and through an npm script (`node_modules/.bin` on the script's PATH).
const NODE_USE: &str = "npx semver 1.2.3\n\
    npm pkg set 'scripts.check=semver -r \">=1.0.0\" 1.5.0 2.0.0-beta'\n\
    npm run -s check\n";

/// The invoking account's `npm install semver` from the registry through
/// the session's proxy, into a cache the offline cases copy.
fn node_online() -> &'static Result<Online, String> {
    static ONLINE: OnceLock<Result<Online, String>> = OnceLock::new();
    ONLINE.get_or_init(|| {
        online(
            "npm install semver",
            &format!("{}/semver", registries().npm.trim_end_matches('/')),
            |account, work| put(account, work, "project/README", "x\n", 0o644),
            &format!(
                "set -e\ncd project\nnpm init -y > /dev/null\n\
                 npm install -s --cache ../npm-cache semver\n{NODE_USE}"
            ),
        )
    })
}

fn assert_node_ran(account: &Account, project: &Path, out: &Output) {
    assert_eq!(text(&out.stdout), "1.2.3\n1.5.0\n", "{}", both(out));
    let manifest = project.join("node_modules/semver/package.json");
    assert!(manifest.is_file(), "{}", both(out));
    assert_owned(account, &manifest, out);
    let package = std::fs::read_to_string(project.join("package.json")).unwrap();
    assert!(package.contains("\"semver\""), "{package}");
}

/// G4: `npm install` from the registry through the session's
/// proxy, `npx` and an npm script running a `node_modules/.bin` tool.
#[test]
fn node_npm_install_npx_and_a_script_as_the_invoking_account() {
    require_bwrap!();
    let online = downloaded(node_online(), "the Node case");
    assert_node_ran(&invoking(), &online.work.join("project"), &online.out);
}

/// G4: the same as `cc-test`, offline from a copy of the online case's cache.
#[test]
fn node_npm_install_npx_and_a_script_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    let online = downloaded(node_online(), "the unprivileged Node case");
    let work = workspace(&user);
    let w = work.path();
    copy_in(&user, &online.work.join("npm-cache"), &w.join("npm-cache"));
    put(&user, w, "project/README", "x\n", 0o644);
    let out = sh(
        &user,
        w,
        &format!(
            "set -e\ncd project\nnpm init -y > /dev/null\n\
             npm install -s --offline --cache ../npm-cache semver\n{NODE_USE}"
        ),
    );
    assert_ok(&out, "npm install --offline, npx, npm run");
    assert_node_ran(&user, &w.join("project"), &out);
}

// ---- git ------------------------------------------------------------------

/// The git identity `account` has on the host (`~/.gitconfig`), if any.
fn host_identity(account: &Account) -> Option<String> {
    let get = |key: &str| {
        let out = Command::new("git")
            .arg("config")
            .arg("--file")
            .arg(account.home.join(".gitconfig"))
            .arg(key)
            .output()
            .ok()?;
        let value = text(&out.stdout).trim().to_owned();
        (!value.is_empty()).then_some(value)
    };
    Some(format!("{} <{}>", get("user.name")?, get("user.email")?))
}

fn git_workflow(account: &Account) {
    let work = workspace(account);
    let w = work.path();
    let out = sh(
        account,
        w,
        "set -e\ngit init -q -b main origin\ncd origin\necho one > README\n\
         git add README\ngit commit -q -m first\ncd ..\n\
         git clone -q origin clone\ncd clone\ngit switch -q -c feature\n\
         echo two >> README\ngit commit -q -am second\n\
         git log --format='%an <%ae> %s'\n",
    );
    assert_ok(&out, "git init, commit, clone, branch");
    let log = |repo: &str, args: &[&str]| {
        run_host(
            Command::new("git")
                .arg("-c")
                .arg(format!("safe.directory={}", w.join(repo).display()))
                .arg("-C")
                .arg(w.join(repo))
                .args(args),
        )
    };
    let authors = log("clone", &["log", "--format=%an <%ae>|%s", "feature"]);
    let lines: Vec<&str> = authors.lines().collect();
    assert_eq!(lines.len(), 2, "{authors}\n{}", both(&out));
    assert!(
        lines[0].ends_with("|second") && lines[1].ends_with("|first"),
        "{authors}"
    );
    if let Some(identity) = host_identity(account) {
        for line in &lines {
            assert_eq!(
                line.split('|').next().unwrap(),
                identity,
                "the commit is not {}'s identity on the host:\n{authors}",
                account.name
            );
        }
    }
    let branches = log("clone", &["branch", "--format=%(refname:short)"]);
    assert_eq!(branches, "feature\nmain\n");
    assert_eq!(log("origin", &["rev-list", "--count", "main"]), "1\n");
    assert_owned(account, &w.join("clone/.git/HEAD"), &out);
}

/// G4: git init, a commit with the account's identity, clone, a branch
/// and a commit on it.
#[test]
fn git_init_commit_clone_branch_as_the_invoking_account() {
    require_bwrap!();
    git_workflow(&invoking());
}

/// G4: the same as `cc-test`, whose identity install-deps configures.
#[test]
fn git_init_commit_clone_branch_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    git_workflow(&user);
}

// ---- large output, stdin --------------------------------------------------

fn large_output(account: &Account) {
    let work = workspace(account);
    let out = sh(account, work.path(), "seq 1 3000000; seq 1 200000 >&2");
    assert_ok(&out, "seq");
    let expected = |n: u32| (1..=n).map(|i| format!("{i}\n")).collect::<String>();
    assert!(
        out.stdout == expected(3_000_000).as_bytes(),
        "stdout: {} bytes, not seq's {}",
        out.stdout.len(),
        expected(3_000_000).len()
    );
    let stderr: String = text(&out.stderr)
        .lines()
        .filter(|l| !l.starts_with("cc_server:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        stderr == expected(200_000),
        "stderr: {} bytes",
        stderr.len()
    );
}

/// G4: 20 MB on stdout and 1.3 MB on stderr pass through byte for byte.
#[test]
fn a_large_output_as_the_invoking_account() {
    require_bwrap!();
    large_output(&invoking());
}

/// G4: the same as `cc-test`.
#[test]
fn a_large_output_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    large_output(&user);
}

// ---- version-manager shims --------------------------------------------------

/// A version manager of the test's own, shaped like rbenv (found by
/// `RBENV_ROOT`, its shims first on PATH): `greet install NAME` runs its
/// `rehash`, which — under `set -e`, as pyenv's pip hook — refuses a shim
/// directory it cannot write, then replaces every shim with one per program
/// of its versions (`wave` has none before). Files: (path, contents, mode).
const FIXTURE_MANAGER: &[(&str, &str, u32)] = &[
    (
        "libexec/shim",
        "#!/bin/sh\nexec \"$RBENV_ROOT/versions/1/bin/$(basename \"$0\")\" \"$@\"\n",
        0o755,
    ),
    (
        "libexec/rehash",
        "#!/bin/sh\nset -e\nshims=\"$RBENV_ROOT/shims\"\n\
         [ -w \"$shims\" ] || { echo \"rbenv: cannot rehash: $shims isn't writable\" >&2; exit 1; }\n\
         rm -f \"$shims\"/*\n\
         for program in \"$RBENV_ROOT\"/versions/*/bin/*; do\n\
         cp \"$RBENV_ROOT/libexec/shim\" \"$shims/$(basename \"$program\")\"\n\
         done\n",
        0o755,
    ),
    (
        "versions/1/bin/greet",
        "#!/bin/sh\nset -e\nif [ \"$1\" = install ]; then \"$RBENV_ROOT/libexec/rehash\"; \
         echo \"installed $2\"; else echo \"hello from $(basename \"$0\")\"; fi\n",
        0o755,
    ),
    (
        "versions/1/bin/wave",
        "#!/bin/sh\necho \"hello from $(basename \"$0\")\"\n",
        0o755,
    ),
    (
        "shims/greet",
        "#!/bin/sh\nexec \"$RBENV_ROOT/versions/1/bin/$(basename \"$0\")\" \"$@\"\n",
        0o755,
    ),
];

/// The `python3` first on PATH when it is a pyenv shim: (its shim
/// directory, the pyenv root).
fn pyenv_python() -> Option<(PathBuf, PathBuf)> {
    let path = std::env::var_os("PATH")?;
    let shims = std::env::split_paths(&path).find(|d| d.join("python3").is_file())?;
    let root = shims.parent()?.to_path_buf();
    (shims.file_name()? == "shims" && root.join("bin/pyenv").is_file()).then_some((shims, root))
}

/// A wheel of one module, `cc_shim_probe` (`VALUE = 42`), made with the
/// host's Python: nothing to download.
fn probe_wheel(account: &Account, dir: &Path) -> PathBuf {
    let wheel = dir.join("cc_shim_probe-1.0-py3-none-any.whl");
    let script = "import sys, zipfile\n\
        info = 'cc_shim_probe-1.0.dist-info/'\n\
        files = {'cc_shim_probe/__init__.py': 'VALUE = 42\\n',\n\
          info + 'METADATA': 'Metadata-Version: 2.1\\nName: cc-shim-probe\\nVersion: 1.0\\n',\n\
          info + 'WHEEL': 'Wheel-Version: 1.0\\nGenerator: cc-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n'}\n\
        files[info + 'RECORD'] = ''.join(n + ',,\\n' for n in list(files) + [info + 'RECORD'])\n\
        with zipfile.ZipFile(sys.argv[1], 'w') as z: [z.writestr(n, c) for n, c in files.items()]\n";
    run_host(
        Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .arg(&wheel),
    );
    std::os::unix::fs::chown(&wheel, Some(account.uid), Some(account.gid)).unwrap();
    wheel
}

fn version_manager_shims(account: &Account) {
    // The fixture manager, outside the workspace (a bind would win over it).
    let manager = workspace(account);
    let root = manager.path().join("rbenv");
    for (rel, contents, mode) in FIXTURE_MANAGER {
        put(account, &root, rel, contents, *mode);
    }
    let shims = root.join("shims");
    let before = std::fs::read_dir(&shims).unwrap().count();
    let work = workspace(account);
    let path = match account.invoking {
        true => std::env::var("PATH").unwrap_or_default(),
        false => format!("{TEST_TOOLCHAIN}:/usr/local/bin:/usr/bin:/bin"),
    };
    let server = session(account, work.path(), true)
        .env("RBENV_ROOT", &root)
        .env("PATH", format!("{}:{path}", shims.display()))
        .args([
            "--",
            "sh",
            "-c",
            "set -e\ngreet install wave\nwave\ngreet\n\
             touch \"$RBENV_ROOT/versions/1/bin/extra\" || echo refused\n",
        ]);
    let _home = server.home();
    let out = wait_output(server.spawn(), std::time::Duration::from_secs(120));
    assert_ok(&out, "greet install wave (a rehash into the shims)");
    assert_eq!(
        text(&out.stdout),
        "installed wave\nhello from wave\nhello from greet\nrefused\n",
        "{}",
        both(&out)
    );
    // The home itself stays read-only, and the refusal says so and why.
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cc_server: violation: file-write {}",
            root.join("versions/1/bin/extra").display()
        )) && stderr.contains("one of your toolchains"),
        "a write into the read-only home was not explained\n{}",
        both(&out)
    );
    assert!(!root.join("versions/1/bin/extra").exists());
    let names: Vec<String> = std::fs::read_dir(&shims)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        (before, names),
        (1, vec!["greet".to_owned()]),
        "the host's shim directory changed"
    );

    // pyenv's own, where the account has it first on PATH.
    let Some((pyenv_shims, pyenv_root)) = pyenv_python().filter(|_| account.invoking) else {
        eprintln!(
            "{}: no pyenv `python3` first on PATH; the fixture manager above covers the rule",
            account.name
        );
        return;
    };
    let listing = |dir: &Path| -> Vec<(String, u64, std::time::SystemTime)> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let meta = e.metadata().unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    meta.len(),
                    meta.modified().unwrap(),
                )
            })
            .collect();
        entries.sort();
        entries
    };
    let before = (
        listing(&pyenv_shims),
        std::fs::metadata(&pyenv_shims).unwrap().modified().unwrap(),
    );
    let work = workspace(account);
    let wheel = probe_wheel(account, work.path());
    let script = format!(
        "set -e\npython3 -m pip install -q --user --no-index --no-warn-script-location {}\n\
         python3 -c 'import cc_shim_probe; print(\"value\", cc_shim_probe.VALUE)'\n",
        wheel.file_name().unwrap().to_string_lossy()
    );
    let out = sh(account, work.path(), &script);
    assert_ok(&out, "python3 -m pip install --user through the pyenv shim");
    assert!(text(&out.stdout).contains("value 42"), "{}", both(&out));
    assert!(
        !text(&out.stderr).contains("cannot rehash"),
        "{}",
        both(&out)
    );
    let after = (
        listing(&pyenv_shims),
        std::fs::metadata(&pyenv_shims).unwrap().modified().unwrap(),
    );
    assert_eq!(
        before,
        after,
        "the host's pyenv shims ({}) changed",
        pyenv_root.display()
    );
}

/// G4 (T27): a version manager's shim directory is a throwaway overlay in
/// its read-only home: an install that rehashes (a fixture manager of the
/// test's own, shaped like rbenv; and, where the account's `python3` is a
/// pyenv shim, `python3 -m pip install --user` through it, whose pip hook
/// runs `pyenv rehash` under `set -e`) exits 0, the rewritten shims run —
/// `wave` had none before — and the host's shim directory is unchanged;
/// a write into the home itself is refused and explained (`file-write`,
/// naming the toolchains).
#[test]
fn version_manager_shims_rehash_inside_as_the_invoking_account() {
    require_bwrap!();
    version_manager_shims(&invoking());
}

/// G4: the same as `cc-test` (the fixture manager; no pyenv of its own).
#[test]
fn version_manager_shims_rehash_inside_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    version_manager_shims(&user);
}

// ---- process tools ----------------------------------------------------------

/// `ps`, `pgrep`/`pkill`, `kill %1` (bash's: dash's `kill %N` needs job
/// control, on the host too), `/proc/$$` and `/proc/$!` from a shell,
/// printed as `key=value` lines and `ps` tables.
const PROCESS_TOOLS: &str = r#"sleep 30 &
bang=$!
until [ "$(cat /proc/$bang/comm)" = sleep ]; do sleep 0.01; done
echo "shell=$$"
echo "bang=$bang"
echo "comm=$(cat /proc/$$/comm)"
echo "bangcomm=$(cat /proc/$bang/comm)"
echo "pgrep=$(pgrep -x sleep)"
echo ps-mine:
ps -o pid=,comm=
pkill -x sleep
wait "$bang"
echo "sleep-status=$?"
echo "job-status=$(bash -c 'sleep 30 & kill %1; wait %1; echo $?')"
echo ps-all:
ps -e -o pid=,comm=
echo end
"#;

/// The `pid comm` rows `ps` printed after `start` up to the next line
/// that is not one.
fn ps_rows(stdout: &str, start: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .skip_while(|l| *l != start)
        .skip(1)
        .map_while(|l| {
            let (pid, comm) = l.trim().split_once(' ')?;
            pid.parse::<u32>().ok()?;
            Some((pid.to_owned(), comm.trim().to_owned()))
        })
        .collect()
}

fn process_tools(account: &Account) {
    let work = workspace(account);
    let out = sh(account, work.path(), PROCESS_TOOLS);
    assert_ok(&out, "ps, pgrep, pkill, kill %1");
    let stdout = text(&out.stdout);
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key}= line\n{}", both(&out)))
            .to_owned()
    };
    let (shell, bang) = (value("shell"), value("bang"));
    assert_eq!(
        value("comm"),
        "sh",
        "/proc/$$ is not the shell\n{}",
        both(&out)
    );
    assert_eq!(
        value("bangcomm"),
        "sleep",
        "/proc/$! is not the sleep\n{}",
        both(&out)
    );
    assert_eq!(
        value("pgrep"),
        bang,
        "pgrep did not find $!\n{}",
        both(&out)
    );
    // 128 + SIGTERM: pkill and kill %1 ended them.
    assert_eq!(value("sleep-status"), "143", "{}", both(&out));
    assert_eq!(value("job-status"), "143", "{}", both(&out));
    let mine = ps_rows(&stdout, "ps-mine:");
    assert!(
        mine.contains(&(shell.clone(), "sh".to_owned())),
        "ps does not list the shell as $$ names it\n{}",
        both(&out)
    );
    // Only the command's own processes and the namespace's reaper.
    let all = ps_rows(&stdout, "ps-all:");
    let comms: std::collections::BTreeSet<&str> = all.iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(
        comms,
        ["pidns-reaper", "ps", "sh"]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        "ps -e shows more than the command's processes and the reaper\n{}",
        both(&out)
    );
    assert!(
        all.contains(&("1".to_owned(), "pidns-reaper".to_owned())),
        "{}",
        both(&out)
    );
    assert!(all.contains(&(shell, "sh".to_owned())), "{}", both(&out));
}

/// G4 (docs/design.md §8, the commands' `/proc`): process tools see the
/// command's own processes, numbered as the shell numbers them — `ps` lists
/// the shell under `$$`, `/proc/$$` and `/proc/$!` are the shell and its
/// job, `pgrep` finds `$!`, `pkill` and `kill %1` end it, and `ps -e` shows
/// the command's processes and the reaper, nothing of the sandbox's own.
#[test]
fn process_tools_see_the_commands_processes_as_the_invoking_account() {
    require_bwrap!();
    process_tools(&invoking());
}

/// G4: the same as `cc-test`.
#[test]
fn process_tools_see_the_commands_processes_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    process_tools(&user);
}

fn large_stdin(account: &Account) {
    let work = workspace(account);
    let w = work.path();
    // 8 MiB that are not all one byte (an LCG), so a reordering shows.
    let mut state: u32 = 12345;
    let input: Vec<u8> = (0..8 << 20)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (state >> 16) as u8
        })
        .collect();
    let out = session(account, w, true)
        .args(["--", "sh", "-c", "tee in.bin | wc -c"])
        .output_with_stdin(&input);
    assert_ok(&out, "tee in.bin | wc -c");
    assert_eq!(
        text(&out.stdout).trim(),
        (8 << 20).to_string(),
        "{}",
        both(&out)
    );
    let written = std::fs::read(w.join("in.bin")).unwrap();
    assert!(
        written == input,
        "in.bin differs from the input ({} bytes)",
        written.len()
    );
    assert_owned(account, &w.join("in.bin"), &out);
}

/// G4: 8 MiB on stdin reach the command whole and in order.
#[test]
fn a_large_stdin_as_the_invoking_account() {
    require_bwrap!();
    large_stdin(&invoking());
}

/// G4: the same as `cc-test`.
#[test]
fn a_large_stdin_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    large_stdin(&user);
}

// ---- every workflow with the home bound read-write -------------------------

/// The workflows above, offline from what the online cases left, in a home
/// of the account's own (a temp dir, never the real one) that the sandbox
/// is started in, so the home is bound read-write and its allowlist
/// applies (SPEC G5, docs/threat-model.md §4): `~/.cache` and `~/.npm` are
/// throwaway overlays, the history is written through, every other
/// dot-path is read-only. Each workflow works in `~/work`; afterwards the
/// home holds nothing new under its dot-paths but the history.
fn home_bound(account: &Account) {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::set_permissions(h, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        h.join(".gitconfig"),
        "[user]\n\tname = home bound\n\temail = home-bound@localhost\n",
    )
    .unwrap();
    for dir in [".cache/pip", ".npm", "work"] {
        std::fs::create_dir_all(h.join(dir)).unwrap();
    }
    let w = h.join("work");
    let vendored = downloaded(crates_online(), "the home-bound cargo case");
    let python = downloaded(python_online(), "the home-bound Python case");
    let node = downloaded(node_online(), "the home-bound Node case");
    copy_in(account, &vendored.work.join("vendor"), &w.join("vendor"));
    copy_in(account, &python.work.join("wheels"), &w.join("wheels"));
    copy_in(account, &node.work.join("npm-cache"), &w.join("npm-cache"));
    put(account, &w, "make/main.c", MAIN_C, 0o644);
    put(account, &w, "make/answer.c", ANSWER_C, 0o644);
    put(account, &w, "make/Makefile", MAKEFILE, 0o644);
    put(account, &w, "script/scripts/build.sh", BUILD_SH, 0o755);
    put(account, &w, "script/scripts/stamp.sh", STAMP_SH, 0o755);
    put(account, &w, "python/test_adds.py", TEST_PY, 0o644);
    put(
        account,
        &w,
        "itoa/Cargo.toml",
        "[package]\nname = \"itoa-user\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [dependencies]\nitoa = \"1\"\n",
        0o644,
    );
    put(account, &w, "itoa/src/main.rs", HELLO_RS, 0o644);
    put(
        account,
        &w,
        "itoa/.cargo/config.toml",
        "[source.crates-io]\nreplace-with = \"vendored\"\n\n\
         [source.vendored]\ndirectory = \"../vendor\"\n",
        0o644,
    );
    put(account, &w, "node/README", "x\n", 0o644);
    run_host(
        Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", account.uid, account.gid))
            .arg(h),
    );
    let before = dot_entries(h);
    let in_home = |script: &str| {
        let mut server = session_at(account, h, h, true);
        if Path::new(TEST_TOOLCHAIN).join("cargo").exists() {
            // The toolchain outside the home (rustup's proxies would look
            // for it in this one).
            server = server.env(
                "PATH",
                format!("{TEST_TOOLCHAIN}:/usr/local/bin:/usr/bin:/bin"),
            );
        } else {
            server = server.env("RUSTUP_HOME", account.home.join(".rustup"));
        }
        let server = server.args(["--", "sh", "-c", &format!("set -e\ncd work\n{script}")]);
        let _config = server.home();
        wait_output(server.spawn(), std::time::Duration::from_secs(300))
    };
    let cases: [(&str, String, &str); 8] = [
        ("make", "cd make && make -j2 && ./hello".into(), "hello from make: 42"),
        ("script", "cd script && ./scripts/build.sh nightly && cat out/report.txt".into(), "step 3"),
        (
            "cargo",
            "cargo new -q hello && cd hello && cargo run -q && \
             cd ../itoa && cargo test -q --offline 2>&1 && cargo run -q --offline"
                .into(),
            "itoa says 4242",
        ),
        (
            "python",
            "cd python && python3 -m venv .venv && \
             .venv/bin/pip install -q --no-index --find-links ../wheels pytest && .venv/bin/pytest -q"
                .into(),
            "1 passed",
        ),
        (
            "node",
            format!(
                "cd node && npm init -y > /dev/null && \
                 npm install -s --offline --cache ../npm-cache semver\n{NODE_USE}"
            ),
            "1.5.0",
        ),
        (
            "git",
            "git init -q -b main origin && cd origin && echo one > README && git add README && \
             git commit -q -m first && cd .. && git clone -q origin clone && cd clone && \
             git switch -q -c feature && echo two >> README && git commit -q -am second && \
             git branch -q -u origin/main && git log --format='%an %s' | head -1"
                .into(),
            "home bound second",
        ),
        ("output", "seq 1 300000 | tail -1".into(), "300000"),
        (
            "history",
            "echo 'make -j2' >> ../.bash_history && echo cached > ../.cache/pip/x && \
             echo kept > ../.npm/x && echo ok"
                .into(),
            "ok",
        ),
    ];
    for (what, script, want) in cases {
        let out = in_home(&script);
        assert_ok(&out, &format!("{what} with the home bound"));
        assert!(
            text(&out.stdout).contains(want),
            "{what} with the home bound: no {want:?}\n{}",
            both(&out)
        );
    }
    assert_eq!(
        std::fs::metadata(w.join("hello/target")).unwrap().uid(),
        account.uid,
        "what the sandbox built is the account's"
    );
    assert_eq!(
        dot_entries(h),
        before,
        "the home gained or lost a dot-path entry"
    );
    assert_eq!(
        std::fs::read_to_string(h.join(".bash_history")).unwrap(),
        "make -j2\n"
    );
    for throwaway in [".cache/pip/x", ".npm/x"] {
        assert!(
            !h.join(throwaway).exists(),
            "{throwaway} reached the host through the overlay"
        );
    }
}

/// The names at the top of a home that start with `.`, and the entries of
/// the caches.
fn dot_entries(home: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".bash_history")
        .collect();
    for cache in [".cache", ".cache/pip", ".npm"] {
        out.extend(
            std::fs::read_dir(home.join(cache))
                .unwrap()
                .map(|e| format!("{cache}/{}", e.unwrap().file_name().to_string_lossy())),
        );
    }
    out.sort();
    out
}

/// G4, G5: every workflow, with the home bound read-write.
#[test]
fn every_workflow_with_the_home_bound_read_write_as_the_invoking_account() {
    require_bwrap!();
    home_bound(&invoking());
}

/// G4, G5: the same as `cc-test`.
#[test]
fn every_workflow_with_the_home_bound_read_write_as_an_unprivileged_user() {
    require_bwrap!();
    let Some(user) = test_user() else { return };
    home_bound(&user);
}

// ---- an install answered at the terminal (`--ask`) ----------------------

/// H4, G4: chat mode asks before `npm install`; `--ask` puts the
/// question on cc_server's terminal (a pseudo-terminal here), `y` answers
/// it, and the install runs (offline, from the online case's cache). No
/// guardrails file: chat mode's own table asks.
#[test]
fn an_install_answered_at_the_terminal_with_ask() {
    require_bwrap!();
    let me = invoking();
    let online = downloaded(node_online(), "the --ask case");
    let work = workspace(&me);
    let w = work.path();
    copy_in(&me, &online.work.join("npm-cache"), &w.join("npm-cache"));
    put(
        &me,
        w,
        "project/package.json",
        "{\"name\":\"asked\",\"version\":\"1.0.0\"}\n",
        0o644,
    );
    let (master, slave) = pseudo_terminal();
    let child = session(&me, w, false)
        .with_controlling_terminal(slave.try_clone().unwrap())
        .args([
            "--ask",
            "--",
            "npm",
            "install",
            "-s",
            "--offline",
            "--cache",
            "npm-cache",
            "--prefix",
            "project",
            "semver",
        ])
        .spawn();
    let (screen, asked) = answer_at(&master, "[y/N]", b"y\n", std::time::Duration::from_secs(60));
    let out = wait_output(child, std::time::Duration::from_secs(120));
    // Held open until now: with no descriptor of the terminal's side open,
    // reading the other side fails at once (EIO) — cc_server itself holds
    // one only while it asks.
    drop(slave);
    assert!(
        asked,
        "no question on the terminal; it showed:\n{screen}\n{}",
        both(&out)
    );
    assert_ok(&out, "npm install answered at the terminal");
    assert!(screen.contains("npm install"), "the question:\n{screen}");
    assert!(
        w.join("project/node_modules/semver/package.json").is_file(),
        "{}\nterminal:\n{screen}",
        both(&out)
    );
}

/// A new pseudo-terminal: (master, slave).
fn pseudo_terminal() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: posix_openpt returns a new descriptor or -1; grantpt/unlockpt/
    // ptsname_r act on it; the slave is opened by name from ptsname_r.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(
            master >= 0,
            "posix_openpt: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let name = std::ffi::CStr::from_ptr(name.as_ptr());
        // Close-on-exec, so no other test's child keeps the terminal open;
        // the controlling terminal outlives the descriptor.
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(name.to_str().unwrap())
            .unwrap();
        (std::fs::File::from_raw_fd(master), slave)
    }
}

/// Reads the terminal until `prompt` shows and types `answer`; returns what
/// the terminal showed, reading on until it goes quiet, and whether the
/// prompt came (it did not when the other side closed, or after `limit`).
fn answer_at(
    master: &std::fs::File,
    prompt: &str,
    answer: &[u8],
    limit: std::time::Duration,
) -> (String, bool) {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let mut reader = master.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once every descriptor of the other side is closed.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut screen = Vec::new();
    let deadline = Instant::now() + limit;
    while !text(&screen).contains(prompt) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => screen.extend(bytes),
            Err(_) => return (text(&screen), false),
        }
    }
    let mut writer = master.try_clone().unwrap();
    writer.write_all(answer).unwrap();
    while let Ok(bytes) = rx.recv_timeout(Duration::from_secs(2)) {
        screen.extend(bytes);
    }
    (text(&screen), true)
}
