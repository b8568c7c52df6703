//! The user's toolchains and caches in the bwrap sandbox, without
//! configuration (SPEC G4; C1 for the secrets; threat model T27), black-box:
//! the real `cc_server` runs cargo, pip and the shell over temp homes and
//! cargo homes made here, and every host directory is compared before and
//! after — nothing a command writes to a cache reaches the host, and no
//! credential file becomes readable because a toolchain lives near it.
//! Without `/usr/bin/bwrap` the tests say so and pass, except on CI.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::util::*;

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Every entry under `dir` (symlinks not followed) with its length and
/// modification time: a file written, created or removed changes it.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let meta = std::fs::symlink_metadata(&at).unwrap();
        out.push((at.clone(), meta.len(), meta.modified().unwrap()));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&at).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

/// The directory of the toolchain's `cargo` (and `rustc`) these tests run
/// under: `$CARGO`, which cargo sets for its tests.
fn toolchain_bin() -> PathBuf {
    let cargo = std::env::var_os("CARGO").expect("cargo sets CARGO for its tests");
    Path::new(&cargo).parent().unwrap().to_path_buf()
}

/// The host's cargo home, where this workspace's dependencies were
/// downloaded (`cargo build` of the workspace fills it).
fn host_cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(&std::env::var_os("HOME").unwrap()).join(".cargo"))
}

/// A fresh cargo home (outside any `$HOME`) holding crates.io's index
/// entry and archive of `fnv` 1.0.7 — a dependency of this workspace, so in
/// the host's registry already — and a fake publish token.
fn cargo_home_with_fnv(marker: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir_in(target_dir()).unwrap();
    let registry = host_cargo_home().join("registry");
    let index = std::fs::read_dir(registry.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|d| d.join(".cache/3/f/fnv").is_file())
        .expect("fnv in the host's registry index (build the workspace first)");
    let name = index.file_name().unwrap();
    let crate_file = registry.join("cache").join(name).join("fnv-1.0.7.crate");
    assert!(crate_file.is_file(), "{} is missing", crate_file.display());
    let to_index = home.path().join("registry/index").join(name);
    std::fs::create_dir_all(to_index.join(".cache/3/f")).unwrap();
    std::fs::copy(index.join("config.json"), to_index.join("config.json")).unwrap();
    std::fs::copy(
        index.join(".cache/3/f/fnv"),
        to_index.join(".cache/3/f/fnv"),
    )
    .unwrap();
    let to_cache = home.path().join("registry/cache").join(name);
    std::fs::create_dir_all(&to_cache).unwrap();
    std::fs::copy(&crate_file, to_cache.join("fnv-1.0.7.crate")).unwrap();
    std::fs::create_dir(home.path().join("bin")).unwrap();
    std::fs::write(
        home.path().join("credentials.toml"),
        format!("[registry]\ntoken = \"{marker}\"\n"),
    )
    .unwrap();
    home
}

/// `cc_server run --backend bwrap -- sh -c SCRIPT` from `work` with the
/// default config, HOME = `home`, and `env` on top of the test's own.
fn run_sh(
    plugins: &Plugins,
    work: &Path,
    home: &Path,
    env: &[(&str, &str)],
    config: Option<&str>,
    script: &str,
) -> Output {
    let mut command = CcServer::new(plugins)
        .current_dir(work)
        .env("HOME", home)
        // The demo crates build into the work dir, whatever the test's env says.
        .env("CARGO_TARGET_DIR", work.join("target"));
    if let Some(config) = config {
        command = command.config(config);
    }
    for (key, value) in env {
        command = command.env(key, value);
    }
    let out = command
        .args(["run", "--backend", "bwrap", "--", "sh", "-c"])
        .arg(format!(
            "grep -q sandbox-init /proc/1/cmdline || exit 99\n{script}"
        ))
        .output();
    assert_ne!(code(&out), 99, "not in a sandbox: {}", both(&out));
    out
}

/// A home with what a user has: rc files, a git config, an npm token, the
/// GitHub CLI's token, an npm cache and a pip cache.
fn user_home(marker: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir_in(target_dir()).unwrap();
    let h = home.path();
    std::fs::write(h.join(".bashrc"), "# rc\n").unwrap();
    std::fs::write(h.join(".gitconfig"), "[user]\n\tname = u\n").unwrap();
    std::fs::write(
        h.join(".npmrc"),
        format!("//registry/:_authToken={marker}\n"),
    )
    .unwrap();
    std::fs::create_dir_all(h.join(".config/gh")).unwrap();
    std::fs::write(h.join(".config/gh/hosts.yml"), format!("token: {marker}\n")).unwrap();
    std::fs::create_dir_all(h.join(".npm/_cacache")).unwrap();
    std::fs::write(h.join(".npm/_cacache/entry"), "npm cache entry\n").unwrap();
    std::fs::create_dir_all(h.join(".cache/pip/http")).unwrap();
    std::fs::write(h.join(".cache/pip/http/entry"), "pip cache entry\n").unwrap();
    home
}

/// G4: `cargo --version` works in the default sandbox with the default
/// config, from the environment the tests run in (rustup's proxies or a
/// toolchain on PATH), found without any `system_paths`.
#[test]
fn cargo_runs_with_the_default_config() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir_in(target_dir()).unwrap();
    let out = run_sh(
        &plugins,
        work.path(),
        home.path(),
        &[],
        None,
        "cargo --version && rustc --version",
    );
    assert_eq!(code(&out), 0, "{}", both(&out));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("cargo ") && stdout.contains("\nrustc "),
        "{}",
        both(&out)
    );
}

/// G4: `cargo new` and `cargo build` of a crate with a path dependency work
/// offline in the default sandbox, and the binary it built runs.
/// (`--vcs none`: cargo's libgit2 creates `.git/hooks`, which the
/// create-time guard refuses, as it would any hook.)
#[test]
fn cargo_builds_a_crate_with_a_path_dependency_offline() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let home = tempfile::tempdir_in(target_dir()).unwrap();
    let script = "set -e
cargo new -q --vcs none demo
cargo new -q --vcs none --lib demo/dep
cd demo
printf 'dep = { path = \"dep\" }\\n' >> Cargo.toml
printf 'fn main() { println!(\"sum {}\", dep::add(2, 3)); }\\n' > src/main.rs
cargo build --offline -q
../target/debug/demo";
    let out = run_sh(&plugins, work.path(), home.path(), &[], None, script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert!(text(&out.stdout).contains("sum 5"), "{}", both(&out));
}

/// G4, C1: a crate with one registry dependency builds offline from the
/// host's registry cache (a cargo home made here, like a user's
/// `~/.cargo`): cargo unpacks and locks in the overlay, and afterwards not
/// one entry of the cargo home has changed on the host. Its publish token
/// (`credentials.toml`, here outside any `$HOME`, so only the toolchain
/// rule covers it) cannot be read or listed inside, and the overlay's
/// staging directory is empty.
#[test]
fn a_registry_dependency_builds_offline_and_the_host_cargo_home_is_untouched() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let marker = format!("cc-cargo-token-{}", unique());
    let cargo_home = cargo_home_with_fnv(&marker);
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let home = tempfile::tempdir_in(target_dir()).unwrap();
    let before = listing(cargo_home.path());
    let path = format!("{}:/usr/bin:/bin", s(&toolchain_bin()));
    let script = "set -e
cargo new -q --vcs none demo
cd demo
printf 'fnv = \"1\"\\n' >> Cargo.toml
printf 'fn main() { let mut m = fnv::FnvHashMap::default(); m.insert(1, 2); println!(\"fnv {}\", m[&1]); }\\n' > src/main.rs
cargo build --offline 2>&1
../target/debug/demo
ls -A \"$CARGO_HOME\" \"$CARGO_HOME/registry/src\"/*
if cat \"$CARGO_HOME/credentials.toml\"; then echo token=read; fi
echo token-written > \"$CARGO_HOME/credentials.toml\" && echo token=replaced-inside
echo staging=$(ls -A /.sandbox-caches)
touch \"$CARGO_HOME/bin/planted\" && echo bin=written
touch \"$(dirname \"$(command -v cargo)\")/planted\" && echo toolchain=written
true";
    let out = run_sh(
        &plugins,
        work.path(),
        home.path(),
        &[("CARGO_HOME", s(cargo_home.path())), ("PATH", &path)],
        None,
        script,
    );
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert!(stdout.contains("Compiling fnv v1.0.7"), "{}", both(&out));
    assert!(stdout.contains("fnv 2"), "{}", both(&out));
    assert!(
        stdout.contains("fnv-1.0.7"),
        "unpacked inside: {}",
        both(&out)
    );
    assert!(!stdout.contains(&marker), "{}", both(&out));
    assert!(!stdout.contains("token=read"), "{}", both(&out));
    assert!(stdout.contains("staging=\n"), "{}", both(&out));
    // Binaries the host runs later cannot be replaced: cargo home's `bin`
    // and the toolchain are read-only.
    assert!(
        !stdout.contains("bin=written") && !stdout.contains("toolchain=written"),
        "{}",
        both(&out)
    );
    assert!(!toolchain_bin().join("planted").exists());
    assert_eq!(
        listing(cargo_home.path()),
        before,
        "the host's cargo home changed"
    );
    assert_eq!(
        std::fs::read_to_string(cargo_home.path().join("credentials.toml")).unwrap(),
        format!("[registry]\ntoken = \"{marker}\"\n")
    );
}

/// G4, C1: in a user's home the sandbox shows the toolchain caches and
/// nothing else of it — no rc file, git config, npm token or GitHub token;
/// writes to `~/.npm` and `~/.cache/pip` (pip's own cache dir) succeed
/// inside and leave the host's home unchanged.
#[test]
fn only_the_caches_of_a_home_are_shown_and_their_writes_stay_inside() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let marker = format!("cc-home-token-{}", unique());
    let home = user_home(&marker);
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let before = listing(home.path());
    let script = "echo home=$(ls -A \"$HOME\" | tr '\\n' ' ')
cat \"$HOME/.npm/_cacache/entry\" \"$HOME/.cache/pip/http/entry\"
cat \"$HOME/.npmrc\" \"$HOME/.config/gh/hosts.yml\" 2>/dev/null && echo secrets=read
echo new > \"$HOME/.npm/_cacache/new\" && echo npm=written
rm \"$HOME/.npm/_cacache/entry\" && echo npm=removed
echo pip-cache=$(python3 -m pip cache dir)
python3 -m pip download --no-index --no-deps -d /tmp/dl nothing-at-all >/dev/null 2>&1
mkdir -p \"$HOME/.cache/pip/wheels\" && echo wheel > \"$HOME/.cache/pip/wheels/w\" && echo pip=written
echo mounts=$(grep -c ' overlay ' /proc/self/mountinfo)";
    // The command policy off: `pip download` is an install, which `run` denies.
    let out = run_sh(
        &plugins,
        work.path(),
        home.path(),
        &[],
        Some(SANDBOX_LAYER_ONLY),
        script,
    );
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{}", both(&out));
    let shown: Vec<&str> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("home="))
        .unwrap()
        .split_whitespace()
        .collect();
    // `.gitconfig`: the private home's own, the host user's identity only
    // (`bwrap::`'s identity test).
    assert_eq!(shown, [".cache", ".gitconfig", ".npm"], "{}", both(&out));
    for line in [
        "npm cache entry",
        "pip cache entry",
        "npm=written",
        "npm=removed",
        "pip=written",
    ] {
        assert!(stdout.contains(line), "{line}: {}", both(&out));
    }
    assert!(
        stdout.contains(&format!("pip-cache={}/.cache/pip", s(home.path()))),
        "{}",
        both(&out)
    );
    assert!(
        !stdout.contains("secrets=read") && !stdout.contains(&marker),
        "{}",
        both(&out)
    );
    assert_eq!(listing(home.path()), before, "the host's home changed");
}

/// C1: a configured `system_paths` directory is masked like a bind: a
/// cargo home listed there shows its binaries but not its publish token.
#[test]
fn secrets_under_configured_system_paths_are_masked() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let marker = format!("cc-sys-token-{}", unique());
    let home = user_home(&marker);
    let cargo = home.path().join(".cargo");
    std::fs::create_dir_all(cargo.join("bin")).unwrap();
    std::fs::write(
        cargo.join("credentials.toml"),
        format!("token = \"{marker}\"\n"),
    )
    .unwrap();
    std::fs::write(cargo.join("bin/tool"), "#!/bin/sh\necho tool ran\n").unwrap();
    std::fs::set_permissions(
        cargo.join("bin/tool"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let config = format!(
        "[backends.bwrap]\nsystem_paths = [{:?}]\ntoolchains = false\n",
        s(&cargo)
    );
    let script = format!(
        "{0}/bin/tool; cat {0}/credentials.toml; echo home=$(ls -A \"$HOME\" | tr '\\n' ' ')",
        s(&cargo)
    );
    let out = run_sh(
        &plugins,
        work.path(),
        home.path(),
        &[],
        Some(&config),
        &script,
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("tool ran"), "{}", both(&out));
    assert!(!stdout.contains(&marker), "{}", both(&out));
    // toolchains = false: the caches are not shown.
    assert!(
        stdout.lines().any(|l| l == "home=.cargo .gitconfig"),
        "{}",
        both(&out)
    );
}

/// G4: an API sandbox lists what it shows in its handle (`toolchains`,
/// `caches`, and what was skipped, with why), and an API exec finds cargo
/// on the server's PATH.
#[test]
fn the_handle_lists_toolchains_and_an_api_exec_finds_cargo() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let marker = format!("cc-api-token-{}", unique());
    let cargo_home = cargo_home_with_fnv(&marker);
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let path = format!("{}:.:/usr/bin:/bin", s(&toolchain_bin()));
    // The version managers of the host's own environment (pyenv here)
    // would add their homes and shims: only cargo's home is wanted.
    let server = Server::start_with(
        CcServer::new(&plugins)
            .env("CARGO_HOME", cargo_home.path())
            .env("PATH", &path)
            .env_remove("PYENV_ROOT")
            .env_remove("RBENV_ROOT")
            .env_remove("NODENV_ROOT")
            .env_remove("ASDF_DATA_DIR"),
    );
    let created = server.create_bwrap_over("tc", work.path());
    let details = &created.json()["details"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        strings(&details["caches"]),
        [s(cargo_home.path())],
        "{details}"
    );
    let toolchains = strings(&details["toolchains"]);
    assert!(
        toolchains.iter().any(|t| toolchain_bin().starts_with(t)),
        "{details}"
    );
    let skipped = details["toolchainsSkipped"].as_array().unwrap();
    assert!(
        skipped
            .iter()
            .any(|s| s["path"] == "." && s["why"].as_str().unwrap().contains("relative")),
        "{details}"
    );
    let exec = |argv: &[&str]| {
        let response = server.call(
            "POST",
            "/v1/sandboxes/tc/execs",
            Some(&json!({ "argv": argv }).to_string()),
        );
        assert_eq!(response.status, 200, "{}", text(&response.body));
        response.lines()
    };
    let events = exec(&["cargo", "--version"]);
    assert_eq!(exit_code(&events), 0, "{events:?}");
    assert!(
        joined(&events, "stdout").starts_with("cargo "),
        "{events:?}"
    );
    // An API sandbox grants no exec: what a command writes into a cache
    // overlay does not run (the overlay is noexec, Landlock agrees).
    let planted = format!(
        "printf '#!/bin/sh\\necho planted ran\\n' > {0}/registry/planted.sh && chmod +x {0}/registry/planted.sh && {0}/registry/planted.sh",
        s(cargo_home.path())
    );
    let events = exec(&["sh", "-c", &planted]);
    assert_ne!(exit_code(&events), 0, "{events:?}");
    assert!(
        !joined(&events, "stdout").contains("planted ran"),
        "{events:?}"
    );
    assert!(!cargo_home.path().join("registry/planted.sh").exists());
    // A publish token the host writes while the sandbox runs stays hidden:
    // the overlay's whiteout is there from the start, file or no file.
    let late = cargo_home.path().join("credentials");
    std::fs::write(&late, format!("{marker}-late\n")).unwrap();
    let script = format!("cat {0}; ls -A {1}", s(&late), s(cargo_home.path()));
    let events = exec(&["sh", "-c", &script]);
    let seen = format!("{}{}", joined(&events, "stdout"), joined(&events, "stderr"));
    assert!(!seen.contains(&marker), "{events:?}");
    assert!(
        !joined(&events, "stdout").contains("credentials"),
        "{events:?}"
    );
    server.call("DELETE", "/v1/sandboxes/tc", None);
    // Granted (`execGrantRoots`), the cache overlay runs what is written
    // there, and it still stays off the host.
    let body = json!({
        "sessionId": "tc2",
        "bindMounts": [{"hostPath": work.path()}],
        "guestWorkdir": work.path(),
        "execGrantRoots": [cargo_home.path()],
    });
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    );
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let response = server.call(
        "POST",
        "/v1/sandboxes/tc2/execs",
        Some(&json!({ "argv": ["sh", "-c", &planted] }).to_string()),
    );
    let events = response.lines();
    assert_eq!(exit_code(&events), 0, "{events:?}");
    assert!(
        joined(&events, "stdout").contains("planted ran"),
        "{events:?}"
    );
    assert!(!cargo_home.path().join("registry/planted.sh").exists());
    server.call("DELETE", "/v1/sandboxes/tc2", None);
}

/// G6, G4: the caches' writes are capped (`cache_size_mib`): past the cap a
/// write fails with ENOSPC inside, and nothing of it reaches the host.
#[test]
fn cache_writes_are_capped() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = user_home("unused");
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let before = listing(home.path());
    let script = "dd if=/dev/zero of=\"$HOME/.npm/big\" bs=1M count=8 2>&1
echo size=$(stat -c %s \"$HOME/.npm/big\")";
    let config = format!("{SANDBOX_LAYER_ONLY}[backends.bwrap]\ncache_size_mib = 2\n");
    let out = run_sh(
        &plugins,
        work.path(),
        home.path(),
        &[],
        Some(&config),
        script,
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains("No space left on device"), "{}", both(&out));
    let size: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("size="))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(size <= 2 << 20, "{size}: {}", both(&out));
    assert_eq!(listing(home.path()), before, "the host's home changed");
}

/// G4 as an ordinary user (the server run as `nobody` by root): the user's
/// `~/.local/bin` on PATH is shown, its program runs, and the rest of the
/// home stays private.
#[test]
fn an_ordinary_users_local_bin_runs() {
    require_bwrap!();
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 {
        // The others ran as an ordinary user already; this one is the
        // server run as `nobody` by root.
        skip_or_fail("running the server as `nobody` needs root: CI runs the tests as root");
        return;
    }
    let plugins = Plugins::with_bwrap();
    let home = user_home("unused");
    let bin = home.path().join(".local/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("hello-tool");
    std::fs::write(&tool, "#!/bin/sh\necho hello from the users tool\n").unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&tool, mode).unwrap();
    let work = tempfile::tempdir().unwrap();
    for dir in [home.path(), work.path()] {
        chown_tree(dir, 65534);
    }
    let program_dir = tempfile::tempdir().unwrap();
    let program = program_dir.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(program_dir.path(), mode).unwrap();
    let out = CcServer::with_program(&plugins, &program)
        .config(SANDBOX_LAYER_ONLY)
        .run_as(65534, 65534)
        .env("HOME", home.path())
        .env("PATH", format!("{}:/usr/bin:/bin", s(&bin)))
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c"])
        .arg("hello-tool; echo home=$(ls -A \"$HOME\" | tr '\\n' ' ')")
        .output();
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert!(
        stdout.contains("hello from the users tool"),
        "{}",
        both(&out)
    );
    assert!(
        stdout.contains("home=.cache .gitconfig .local .npm\n"),
        "{}",
        both(&out)
    );
}

fn chown_tree(dir: &Path, uid: u32) {
    for (path, _, _) in listing(dir) {
        std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).unwrap();
    }
}
