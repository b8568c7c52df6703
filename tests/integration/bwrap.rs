//! The Linux `bwrap` backend, black-box: the real `cc_server` runs commands
//! in bubblewrap sandboxes over temp dirs made here, and every escape
//! attempt is checked on the HOST afterwards (file unchanged, file not
//! created, marker not leaked, process not left behind).
//!
//! Every run names `--backend bwrap` under the default dispatch policy (the
//! create-time guard is on, as it is by default), so nothing here can
//! silently run in `none`.
//! Without `/usr/bin/bwrap` the tests say so and pass, except on CI, which
//! installs it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

use crate::util::*;

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `cc_server … run --backend bwrap FLAGS… -- ARGV…` from `cwd`, HOME =
/// `home` when given (else util's private one), the sandbox layer alone
/// ([`SANDBOX_LAYER_ONLY`]).
fn bwrap_run(
    plugins: &Plugins,
    cwd: &Path,
    home: Option<&Path>,
    flags: &[&str],
    argv: &[&str],
) -> Output {
    let mut command = CcServer::new(plugins)
        .config(SANDBOX_LAYER_ONLY)
        .current_dir(cwd);
    if let Some(home) = home {
        command = command.env("HOME", home);
    }
    let out = command
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
/// A run that fails open then harms nothing, and its test fails.
const ONLY_IN_A_SANDBOX: &str = "grep -q sandbox-init /proc/1/cmdline 2>/dev/null \
    || { echo 'cc-test: not in a bwrap sandbox; refusing to run the script' >&2; exit 99; }\n";

/// [`bwrap_run`] of `sh -c SCRIPT`, behind [`ONLY_IN_A_SANDBOX`].
fn bwrap_sh(
    plugins: &Plugins,
    cwd: &Path,
    home: Option<&Path>,
    flags: &[&str],
    script: &str,
) -> Output {
    let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
    bwrap_run(plugins, cwd, home, flags, &["sh", "-c", &guarded])
}

/// Live `bwrap` processes whose command line contains `needle`.
fn bwrap_processes_with(needle: &str) -> Vec<String> {
    processes_with(needle)
        .into_iter()
        .filter(|p| {
            p.split_once(": ")
                .and_then(|(_, cmd)| cmd.split(' ').next())
                .is_some_and(|argv0| argv0.ends_with("bwrap"))
        })
        .collect()
}
// ---------------------------------------------------------------- HTTP API

fn bwrap_server(plugins: &Plugins) -> Server {
    Server::start_with(CcServer::new(plugins))
}

/// Creates a bwrap sandbox `id` binding `dir` (writable, the workdir).
fn create_bwrap(server: &Server, id: &str, dir: &Path) -> Value {
    let body = json!({
        "sessionId": id,
        "bindMounts": [{"hostPath": dir}],
        "guestWorkdir": dir,
    });
    let response = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    );
    assert_eq!(
        response.status,
        201,
        "{}\nlog:\n{}",
        text(&response.body),
        server.log()
    );
    let handle = response.json();
    assert_eq!(handle["backendName"], "bwrap", "{handle}");
    handle
}

/// Runs one exec to its end; returns its NDJSON events.
fn api_exec(server: &Server, id: &str, argv: &[&str]) -> Vec<Value> {
    let response = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&json!({ "argv": argv }).to_string()),
    );
    assert_eq!(response.status, 200, "{}", text(&response.body));
    let events = response.lines();
    assert!(!events.is_empty(), "an empty exec stream");
    assert_eq!(events[0]["type"], "started", "{events:?}");
    events
}

fn state_of(server: &Server, id: &str) -> String {
    let shown = server.call("GET", &format!("/v1/sandboxes/{id}"), None);
    assert_eq!(shown.status, 200, "{}", text(&shown.body));
    shown.json()["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

// ------------------------------------------------------------------- tests

/// C2: writes outside the writable bind never reach the host: not into an
/// unbound host dir (named directly, or through a symlink planted in the
/// bind), not beside the bind, not into the host's /tmp or /var/tmp, not
/// into the read-only system view; the bind itself is writable.
#[test]
fn writes_outside_the_writable_bind_do_not_reach_the_host() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let tag = unique();
    std::os::unix::fs::symlink(other.path(), work.path().join("out")).unwrap();
    let other_s = s(other.path());
    let sibling = work.path().parent().unwrap().join(format!("sibling-{tag}"));
    let host_tmp = PathBuf::from(format!("/tmp/escape-{tag}"));
    let host_var_tmp = PathBuf::from(format!("/var/tmp/escape-{tag}"));
    let host_etc = PathBuf::from(format!("/etc/cc-escape-{tag}"));
    let host_usr = PathBuf::from(format!("/usr/cc-escape-{tag}"));
    let mut script = String::new();
    script += &attempt("direct", &format!("echo x > {other_s}/file"));
    script += &attempt("symlink", "echo x > out/via-link");
    script += &attempt("sibling", &format!("echo x > ../sibling-{tag}"));
    script += &attempt("etc", &format!("touch {}", s(&host_etc)));
    script += &attempt("usr", &format!("touch {}", s(&host_usr)));
    // These may well succeed, in the sandbox's private filesystems.
    script += &format!("mkdir -p {other_s} && echo x > {other_s}/made\n");
    script += &format!("mkdir -p {other_s} && echo x > out/made-via-link\n");
    script += &format!("echo x > {}\n", s(&host_tmp));
    script += &format!("echo x > {}\n", s(&host_var_tmp));
    script += &attempt("inside", "echo inside > inside-ok");
    let out = bwrap_sh(&plugins, work.path(), None, &[], &script);
    // Clean up first: a test that fails open must leave nothing behind.
    let leaked_system: Vec<&PathBuf> = [&host_etc, &host_usr]
        .into_iter()
        .filter(|p| p.exists())
        .collect();
    for path in &leaked_system {
        let _ = std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(&sibling);
    assert!(
        leaked_system.is_empty(),
        "created on the host: {leaked_system:?}\n{}",
        both(&out)
    );
    assert_line(&out, "direct=failed");
    assert_line(&out, "symlink=failed");
    assert_line(&out, "etc=failed");
    assert_line(&out, "usr=failed");
    assert_line(&out, "inside=ok");
    for name in ["file", "via-link", "made", "made-via-link"] {
        assert!(
            !other.path().join(name).exists(),
            "{name} reached the unbound host dir\n{}",
            both(&out)
        );
    }
    assert_eq!(
        std::fs::read_dir(other.path()).unwrap().count(),
        0,
        "the unbound host dir changed"
    );
    assert!(!sibling.exists(), "wrote beside the bind\n{}", both(&out));
    assert!(
        !host_tmp.exists(),
        "reached the host's /tmp\n{}",
        both(&out)
    );
    assert!(
        !host_var_tmp.exists(),
        "reached the host's /var/tmp\n{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("inside-ok")).unwrap(),
        "inside\n",
        "the writable bind is not writable: {}",
        both(&out)
    );
}

/// F2, F7: a `:ro` bind cannot be written, truncated, removed or renamed
/// into, yet can be read; chat mode keeps the default bind writable.
#[test]
fn a_read_only_bind_cannot_be_written() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("f"), "original\n").unwrap();
    let before = snapshot(ro.path());
    let ro_s = s(ro.path());
    let mut script = String::new();
    script += &attempt("write", &format!("echo x > {ro_s}/f"));
    script += &attempt("append", &format!("echo x >> {ro_s}/f"));
    script += &attempt("create", &format!("touch {ro_s}/new"));
    script += &attempt("rm", &format!("rm -f {ro_s}/f"));
    script += &attempt("mv-in", &format!("echo x > here && mv here {ro_s}/f"));
    script += &attempt("mkdir", &format!("mkdir {ro_s}/d"));
    script += &format!("cat {ro_s}/f\n");
    script += &attempt("chat-write", "echo x > chat-ok");
    let bind = format!("{ro_s}:ro");
    let out = bwrap_sh(
        &plugins,
        work.path(),
        None,
        &["--mode", "chat", "--bind", &bind],
        &script,
    );
    for label in ["write", "append", "create", "rm", "mv-in", "mkdir"] {
        assert_line(&out, &format!("{label}=failed"));
    }
    assert_line(&out, "original");
    assert_line(&out, "chat-write=ok");
    assert_eq!(snapshot(ro.path()), before, "{}", both(&out));
    assert!(work.path().join("chat-ok").exists(), "{}", both(&out));
}

/// F2: review, plan and orchestrate make every bind read-only (the default
/// one and `--bind`s not marked `:ro`), while reading still works.
#[test]
fn read_only_modes_make_every_bind_read_only() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for mode in ["review", "plan", "orchestrate"] {
        let work = tempfile::tempdir().unwrap();
        let extra = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("f"), "work file\n").unwrap();
        std::fs::write(extra.path().join("g"), "extra file\n").unwrap();
        let (work_before, extra_before) = (snapshot(work.path()), snapshot(extra.path()));
        let extra_s = s(extra.path());
        let mut script = String::new();
        script += &attempt("write", "echo x > f");
        script += &attempt("create", "touch new");
        script += &attempt("rm", "rm -f f");
        script += &attempt("extra-write", &format!("echo x > {extra_s}/g"));
        script += &attempt("extra-create", &format!("touch {extra_s}/new"));
        script += &format!("cat f {extra_s}/g\n");
        let out = bwrap_sh(
            &plugins,
            work.path(),
            None,
            &["--mode", mode, "--bind", extra_s],
            &script,
        );
        for label in ["write", "create", "rm", "extra-write", "extra-create"] {
            assert!(
                lines(&out).contains(&format!("{label}=failed")),
                "mode {mode}: {label} was not refused\n{}",
                both(&out)
            );
        }
        assert_line(&out, "work file");
        assert_line(&out, "extra file");
        assert_eq!(snapshot(work.path()), work_before, "mode {mode}");
        assert_eq!(snapshot(extra.path()), extra_before, "mode {mode}");
    }
}

/// F3, H11: a protected checkout inside a writable root, in chat mode,
/// cannot be written, created in, renamed (nor its parent), removed,
/// replaced by a symlink, or written through a symlink planted elsewhere in
/// the writable root; a protected file cannot be replaced by a rename.
#[test]
fn a_protected_path_under_a_writable_root_stays_untouched() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let checkout = work.path().join("sub/checkout");
    std::fs::create_dir_all(checkout.join("src")).unwrap();
    std::fs::write(checkout.join("f"), "protected\n").unwrap();
    std::fs::write(checkout.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(work.path().join("notes.txt"), "notes\n").unwrap();
    let before = snapshot(&checkout);
    let abs = s(&checkout);
    let mut script = String::new();
    script += &attempt("write", "echo x > sub/checkout/f");
    script += &attempt("write-abs", &format!("echo x > {abs}/f"));
    script += &attempt("nested", "echo x > sub/checkout/src/lib.rs");
    script += &attempt("create", "touch sub/checkout/new");
    script += &attempt("rename-inside", "mv sub/checkout/f sub/checkout/g");
    script += &attempt("rename", "mv sub/checkout sub/moved");
    script += &attempt("rename-parent", "mv sub sub2");
    script += &attempt("rm", "rm -rf sub/checkout");
    script += &attempt("rm-parent", "rm -rf sub");
    script += &attempt("symlink-over", "ln -sfnT /tmp sub/checkout");
    script += &attempt(
        "write-via-link",
        &format!("ln -s {abs}/f planted && echo x > planted"),
    );
    script += &attempt(
        "write-via-dir-link",
        "ln -s sub/checkout dirlink && echo x > dirlink/f",
    );
    script += &attempt("file-append", "echo x >> notes.txt");
    script += &attempt("file-replace", "echo evil > evil && mv evil notes.txt");
    script += &attempt("file-rm", "rm -f notes.txt");
    script += &attempt("writable", "echo ok > writable");
    let out = bwrap_sh(
        &plugins,
        work.path(),
        None,
        &[
            "--mode",
            "chat",
            "--protect",
            "sub/checkout",
            "--protect",
            "notes.txt",
        ],
        &script,
    );
    for label in [
        "write",
        "write-abs",
        "nested",
        "create",
        "rename-inside",
        "rename",
        "rename-parent",
        "rm",
        "rm-parent",
        "symlink-over",
        "write-via-link",
        "write-via-dir-link",
        "file-append",
        "file-replace",
        "file-rm",
    ] {
        assert!(
            lines(&out).contains(&format!("{label}=failed")),
            "{label} was not refused\n{}",
            both(&out)
        );
    }
    assert_line(&out, "writable=ok");
    assert!(
        std::fs::symlink_metadata(&checkout).unwrap().is_dir(),
        "the checkout was replaced"
    );
    assert_eq!(snapshot(&checkout), before, "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(work.path().join("notes.txt")).unwrap(),
        "notes\n"
    );
    assert!(!work.path().join("sub/moved").exists());
    assert!(!work.path().join("sub2").exists());
}

/// F3: a protected path that does not exist inside a writable bind is
/// refused at launch (125), instead of being left creatable.
#[test]
fn a_missing_protected_path_in_a_writable_bind_is_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let out = CcServer::new(&plugins)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--protect", "missing"])
        .args(["--", "sh", "-c", "mkdir missing && echo ran > missing/x"])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    assert!(
        text(&out.stderr).contains("does not exist"),
        "{}",
        both(&out)
    );
    assert!(!work.path().join("missing").exists(), "{}", both(&out));
}

/// F6, F3: a bind and a protected path named through a symlink are
/// enforced under both spellings, the literal and the resolved one.
#[test]
fn symlinked_spellings_of_binds_and_protected_paths_are_both_enforced() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("real");
    std::fs::create_dir_all(real.join("checkout")).unwrap();
    std::fs::write(real.join("checkout/f"), "protected\n").unwrap();
    let link = base.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let before = snapshot(&real.join("checkout"));
    let (real_s, link_s) = (s(&real), s(&link));
    let mut script = String::new();
    script += &attempt("literal", &format!("echo x > {link_s}/checkout/f"));
    script += &attempt("resolved", &format!("echo x > {real_s}/checkout/f"));
    script += &attempt("literal-rm", &format!("rm -rf {link_s}/checkout"));
    script += &attempt("resolved-mv", &format!("mv {real_s}/checkout {real_s}/c2"));
    script += &attempt("bind-literal", &format!("echo a > {link_s}/a"));
    script += &attempt("bind-resolved", &format!("echo b > {real_s}/b"));
    let protect = format!("{link_s}/checkout");
    let out = bwrap_sh(
        &plugins,
        work.path(),
        None,
        &["--bind", link_s, "--protect", &protect],
        &script,
    );
    for label in ["literal", "resolved", "literal-rm", "resolved-mv"] {
        assert!(
            lines(&out).contains(&format!("{label}=failed")),
            "{label} was not refused\n{}",
            both(&out)
        );
    }
    assert_line(&out, "bind-literal=ok");
    assert_line(&out, "bind-resolved=ok");
    assert_eq!(snapshot(&real.join("checkout")), before, "{}", both(&out));
    assert_eq!(std::fs::read_to_string(real.join("a")).unwrap(), "a\n");
    assert_eq!(std::fs::read_to_string(real.join("b")).unwrap(), "b\n");
}

/// Writes `marker` into the usual secrets under `home`.
fn plant_secrets(home: &Path, marker: &str) {
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(
        home.join(".ssh/id_rsa"),
        format!("-----BEGIN KEY-----\n{marker}-ssh\n"),
    )
    .unwrap();
    std::fs::write(home.join(".ssh/config"), format!("# {marker}-sshcfg\n")).unwrap();
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_secret_access_key = {marker}-aws\n"),
    )
    .unwrap();
    std::fs::write(
        home.join(".netrc"),
        format!("machine example.com password {marker}-netrc\n"),
    )
    .unwrap();
    std::fs::create_dir_all(home.join(".config/gh")).unwrap();
    std::fs::write(
        home.join(".config/gh/hosts.yml"),
        format!("oauth_token: {marker}-gh\n"),
    )
    .unwrap();
    std::fs::write(home.join("harmless.txt"), "readable\n").unwrap();
}

/// The shell script that tries to read the secrets every way it can.
fn secret_reading_script(home: &str) -> String {
    format!(
        "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc ~/.config/gh/hosts.yml\n\
         cat {home}/.ssh/id_rsa {home}/.ssh/config\n\
         grep -r MARK {home}\n\
         grep -r -a . {home}/.ssh {home}/.aws\n\
         ls -la ~/.ssh ~/.aws\n\
         cat ~/harmless.txt\n\
         echo shadow-begin; cat /etc/shadow; echo shadow-end\n"
    )
}

/// Asserts no part of `marker` made it out, and the harmless file did.
fn assert_no_secret(out: &Output, marker: &str) {
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!all.contains(marker), "a secret leaked:\n{}", both(out));
    assert_line(out, "readable");
    let shadow = text(&out.stdout);
    let between = shadow
        .split("shadow-begin")
        .nth(1)
        .and_then(|rest| rest.split("shadow-end").next())
        .unwrap_or_else(|| panic!("the script did not run:\n{}", both(out)));
    assert!(
        !between.contains("root:"),
        "/etc/shadow is readable:\n{}",
        both(out)
    );
}

/// C1, D2: with $HOME bound writable, ~/.ssh, ~/.aws, ~/.netrc and
/// ~/.config/gh are masked (not by cat, grep -r or ls), and /etc/shadow
/// shows nothing; the masks leave the host files intact.
#[test]
fn secrets_in_a_bound_home_never_leak() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    let marker = format!("MARK{}", unique());
    plant_secrets(home.path(), &marker);
    let before = snapshot(home.path());
    let out = bwrap_sh(
        &plugins,
        home.path(),
        Some(home.path()),
        &["--bind", s(home.path())],
        &secret_reading_script(s(home.path())),
    );
    assert_no_secret(&out, &marker);
    assert_eq!(snapshot(home.path()), before, "{}", both(&out));
}

/// C1, D2, F6: the secrets stay masked when $HOME is a symlink and the
/// secrets themselves are symlinks (~/.aws → ~/dotfiles/aws, ~/.netrc →
/// ~/dotfiles/netrc), read through either spelling.
#[test]
fn secrets_stay_masked_under_symlinked_spellings() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let base = tempfile::tempdir().unwrap();
    let real = base.path().join("real-home");
    let link = base.path().join("home-link");
    std::fs::create_dir_all(real.join("dotfiles")).unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let marker = format!("MARK{}", unique());
    plant_secrets(&real, &marker);
    std::fs::rename(real.join(".aws"), real.join("dotfiles/aws")).unwrap();
    std::os::unix::fs::symlink("dotfiles/aws", real.join(".aws")).unwrap();
    std::fs::rename(real.join(".netrc"), real.join("dotfiles/netrc")).unwrap();
    std::os::unix::fs::symlink(real.join("dotfiles/netrc"), real.join(".netrc")).unwrap();
    let before = snapshot(&real);
    let mut script = secret_reading_script(s(&real));
    script += &format!(
        "cat {l}/.ssh/id_rsa {l}/.aws/credentials {l}/.netrc {r}/dotfiles/netrc {r}/dotfiles/aws/credentials\n\
         grep -r MARK {l}/ {r}/dotfiles\n",
        l = s(&link),
        r = s(&real)
    );
    // The workdir is elsewhere: a symlink inside another bind is a case of
    // its own (see the ignored test below).
    let work = tempfile::tempdir().unwrap();
    let out = bwrap_sh(
        &plugins,
        work.path(),
        Some(&link),
        &["--bind", s(&link)],
        &script,
    );
    assert_no_secret(&out, &marker);
    assert_eq!(snapshot(&real), before, "{}", both(&out));
}

/// F6, F7: a bind named through a symlink that lies inside another bind
/// (`--bind data`, `data` → a dir elsewhere) launches and shows the target
/// under both spellings.
#[test]
fn a_bind_named_through_a_symlink_inside_another_bind_launches() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("d"), "data\n").unwrap();
    std::os::unix::fs::symlink(data.path(), work.path().join("data")).unwrap();
    let script = format!("cat data/d {}/d && echo w > data/w", s(data.path()));
    let out = bwrap_sh(&plugins, work.path(), None, &["--bind", "data"], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_eq!(text(&out.stdout), "data\ndata\n", "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(data.path().join("w")).unwrap(),
        "w\n"
    );
}

/// C1 (mandatory denies): ~/.bashrc and ~/.profile cannot be changed when
/// $HOME is the writable bind and the command runs from a subdirectory of
/// it — whether HOME is the current dir with `--workdir sub`, or bound
/// with `--bind` from inside it; without a bind they are a private copy.
#[test]
fn shell_rc_files_in_home_cannot_be_changed() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    let sub = home.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(home.path().join(".bashrc"), "# original bashrc\n").unwrap();
    std::fs::write(home.path().join(".profile"), "# original profile\n").unwrap();
    let before = snapshot(home.path());
    let mut script = String::new();
    script += "pwd\n";
    script += &attempt("bashrc", "echo 'echo PWNED' >> ~/.bashrc");
    script += &attempt("bashrc-rel", "echo 'echo PWNED' >> ../.bashrc");
    script += &attempt("profile", "echo 'echo PWNED' >> ~/.profile");
    script += &attempt("bashrc-mv", "echo evil > ~/evil && mv ~/evil ~/.bashrc");
    script += &attempt("bashrc-rm", "rm -f ~/.bashrc");
    script += "rm -f ~/evil\n";
    let sub_s = s(&sub);
    let variants: [(&Path, Vec<&str>); 2] = [
        (home.path(), vec!["--workdir", "sub"]),
        (&sub, vec!["--bind", s(home.path()), "--workdir", "."]),
    ];
    for (cwd, flags) in &variants {
        let out = bwrap_sh(&plugins, cwd, Some(home.path()), flags, &script);
        assert_line(&out, sub_s);
        for label in ["bashrc", "bashrc-rel", "profile", "bashrc-mv", "bashrc-rm"] {
            assert!(
                lines(&out).contains(&format!("{label}=failed")),
                "{flags:?}: {label} was not refused\n{}",
                both(&out)
            );
        }
        assert_eq!(snapshot(home.path()), before, "{flags:?}\n{}", both(&out));
    }
    // HOME not bound: the command gets an empty private HOME; nothing it
    // writes there reaches the host.
    let out = bwrap_sh(&plugins, &sub, Some(home.path()), &[], &script);
    assert_line(&out, sub_s);
    assert_eq!(snapshot(home.path()), before, "{}", both(&out));
}

/// C1 (mandatory denies): in a bound git repo `.git/hooks` cannot be
/// written and `.git/config` cannot be changed, renamed or removed, yet
/// `git commit` works inside and the commit is on the host afterwards.
#[test]
fn git_hooks_and_config_are_read_only_but_commits_work() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let repo = tempfile::tempdir().unwrap();
    git(repo.path(), &["-c", "init.templateDir=", "init", "-q", "."]);
    std::fs::create_dir(repo.path().join(".git/hooks")).unwrap();
    let config_before = std::fs::read(repo.path().join(".git/config")).unwrap();
    let mut script = String::new();
    script += &attempt("hook", "printf '#!/bin/sh\\necho HOOK\\n' > .git/hooks/x");
    script += &attempt("hook-post", "touch .git/hooks/post-commit");
    script += &attempt("hooks-rm", "rm -rf .git/hooks");
    script += &attempt("hooks-mv", "mv .git/hooks .git/hooks2");
    script += &attempt("config", "git config user.name x");
    script += &attempt("config-append", "echo '[core]' >> .git/config");
    script += &attempt("config-mv", "mv .git/config .git/config.old");
    script += &attempt("git-mv", "mv .git .git-old");
    script += &attempt(
        "commit",
        "git -c user.name=t -c user.email=t@e commit -q --allow-empty -m from-the-sandbox",
    );
    let out = bwrap_sh(&plugins, repo.path(), None, &[], &script);
    for label in [
        "hook",
        "hook-post",
        "hooks-rm",
        "hooks-mv",
        "config",
        "config-append",
        "config-mv",
        "git-mv",
    ] {
        assert!(
            lines(&out).contains(&format!("{label}=failed")),
            "{label} was not refused\n{}",
            both(&out)
        );
    }
    assert_line(&out, "commit=ok");
    assert_eq!(
        std::fs::read_dir(repo.path().join(".git/hooks"))
            .unwrap()
            .count(),
        0,
        "a hook reached the host\n{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read(repo.path().join(".git/config")).unwrap(),
        config_before,
        "{}",
        both(&out)
    );
    let log = git(repo.path(), &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-sandbox\n", "{}", both(&out));
}

/// C1 (mandatory denies): `.git/hooks` cannot be created in a bound repo
/// that has none (`git init` without templates): a hook planted there
/// would run on the host at the next commit.
#[test]
fn a_missing_git_hooks_dir_cannot_be_created() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let repo = tempfile::tempdir().unwrap();
    git(repo.path(), &["-c", "init.templateDir=", "init", "-q", "."]);
    assert!(!repo.path().join(".git/hooks").exists());
    let script = attempt(
        "hook",
        "mkdir -p .git/hooks && printf '#!/bin/sh\\necho HOOK\\n' > .git/hooks/x && chmod +x .git/hooks/x",
    );
    let out = bwrap_sh(&plugins, repo.path(), None, &[], &script);
    assert!(
        !repo.path().join(".git/hooks/x").exists(),
        "the sandbox planted a git hook on the host\n{}",
        both(&out)
    );
    assert_line(&out, "hook=failed");
}

/// `cc_server run --backend bwrap` with the create-time guard off and the
/// dispatch policy lowered (`examples/without-create-guard.toml`, plus
/// `guard = false`): the plan's read-only mounts are all there is.
fn unguarded_sh(plugins: &Plugins, cwd: &Path, script: &str) -> Output {
    let guarded = format!("{ONLY_IN_A_SANDBOX}{script}");
    let out = CcServer::new(plugins)
        .config(&format!(
            "{SANDBOX_LAYER_ONLY}[backends.bwrap]\nguard = false\n[dispatch_policy]\nwrite_deny_globs = []\n"
        ))
        .current_dir(cwd)
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", &guarded])
        .output();
    assert_ne!(code(&out), 125, "cc_server itself failed\n{}", both(&out));
    out
}

/// G5, threat model §4 (the plan's half, which holds with the guard off):
/// in a repository at the top of the writable bind, a submodule's `config`
/// and hooks and the per-worktree `config.worktree` are read-only mounts;
/// in a worktree bound on its own, its `.git` file (`gitdir:`) is. Host:
/// all unchanged, and `git status` in the superproject, the submodule and
/// the worktree does not create the marker.
#[test]
fn without_the_guard_existing_git_internals_are_still_read_only() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let id = ["-c", "user.name=h", "-c", "user.email=h@example.com"];
    let lib = tempfile::tempdir().unwrap();
    git(lib.path(), &["init", "-q", "-b", "main", "."]);
    std::fs::write(lib.path().join("a.txt"), "a\n").unwrap();
    git(lib.path(), &["add", "a.txt"]);
    git(
        lib.path(),
        &[&id[..], &["commit", "-q", "-m", "lib"]].concat(),
    );
    let proj = tempfile::tempdir().unwrap();
    let p = proj.path();
    git(p, &["init", "-q", "-b", "main", "."]);
    let lib_s = s(lib.path());
    git(
        p,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            lib_s,
            "sub",
        ],
    );
    git(p, &[&id[..], &["commit", "-q", "-m", "sub"]].concat());
    let trees = tempfile::tempdir().unwrap();
    let wt = trees.path().join("wt");
    git(p, &["worktree", "add", "-q", s(&wt)]);
    git(p, &["config", "extensions.worktreeConfig", "true"]);
    git(p, &["config", "--worktree", "user.name", "main"]);
    let files = [
        p.join(".git/config"),
        p.join(".git/config.worktree"),
        p.join(".git/modules/sub/config"),
        wt.join(".git"),
    ];
    let read = || -> Vec<Vec<u8>> { files.iter().map(|f| std::fs::read(f).unwrap()).collect() };
    let before = read();
    let hooks_before = std::fs::read_dir(p.join(".git/modules/sub/hooks"))
        .unwrap()
        .count();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("MARKER");
    let m = s(&marker);
    let mut script = String::new();
    script += &attempt(
        "sub-config",
        &format!("git -C sub config core.fsmonitor 'touch {m}'"),
    );
    script += &attempt(
        "sub-config-append",
        &format!("printf '[core]\\n\\tfsmonitor = touch {m}\\n' >> .git/modules/sub/config"),
    );
    script += &attempt(
        "sub-hook",
        &format!("printf '#!/bin/sh\\ntouch {m}\\n' > .git/modules/sub/hooks/post-checkout"),
    );
    script += &attempt(
        "worktree-config",
        &format!("git config --worktree core.fsmonitor 'touch {m}'"),
    );
    let out = unguarded_sh(&plugins, p, &script);
    for label in [
        "sub-config",
        "sub-config-append",
        "sub-hook",
        "worktree-config",
    ] {
        assert!(
            lines(&out).contains(&format!("{label}=failed")),
            "{label} was not refused\n{}",
            both(&out)
        );
    }
    let out_wt = unguarded_sh(
        &plugins,
        &wt,
        &attempt("gitfile", "printf 'gitdir: /tmp/evil\\n' > .git"),
    );
    assert_line(&out_wt, "gitfile=failed");
    assert_eq!(read(), before, "{}\n{}", both(&out), both(&out_wt));
    assert_eq!(
        std::fs::read_dir(p.join(".git/modules/sub/hooks"))
            .unwrap()
            .count(),
        hooks_before
    );
    for dir in [p.to_path_buf(), p.join("sub"), wt.clone()] {
        git(&dir, &["status", "--short"]);
        assert!(
            !marker.exists(),
            "git status in {} ran the payload\n{}",
            dir.display(),
            both(&out)
        );
    }
}

/// C1 (mandatory denies): a ~/.bashrc that does not exist yet cannot be
/// created through a writable $HOME bind (it would run at the next login).
#[test]
fn a_missing_bashrc_cannot_be_created_in_a_writable_home() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    let script = attempt("bashrc", "echo 'echo PWNED' > ~/.bashrc");
    let out = bwrap_sh(
        &plugins,
        home.path(),
        Some(home.path()),
        &["--bind", s(home.path())],
        &script,
    );
    assert!(
        !home.path().join(".bashrc").exists(),
        "the sandbox created ~/.bashrc on the host\n{}",
        both(&out)
    );
    assert_line(&out, "bashrc=failed");
}

/// C1, G4 (what README's "enforced where" says): the home's write denies
/// guard the host's `$HOME` — a writable bind of it keeps `~/.bashrc` out
/// (above) — while the default private home, thrown away with the sandbox,
/// takes `~/.bashrc`, `~/.profile` and `~/.local/bin/…` (`pip install
/// --user` puts scripts there); the host's home is untouched, and a
/// `.bashrc` in the workdir is refused all the same.
#[test]
fn the_private_home_takes_rc_files_and_local_bin_and_the_host_home_stays_untouched() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut script = String::new();
    script += &attempt("bashrc", "echo 'echo hi' >> ~/.bashrc");
    script += &attempt("profile", "echo 'PATH=x' > ~/.profile");
    script += &attempt(
        "local-bin",
        "mkdir -p ~/.local/bin && printf '#!/bin/sh\\necho tool\\n' > ~/.local/bin/tool",
    );
    script += &attempt("work-bashrc", "echo x > .bashrc");
    let out = bwrap_sh(&plugins, work.path(), Some(home.path()), &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    for label in ["bashrc", "profile", "local-bin"] {
        assert_line(&out, &format!("{label}=ok"));
    }
    assert_line(&out, "work-bashrc=failed");
    assert_eq!(
        std::fs::read_dir(home.path()).unwrap().count(),
        0,
        "the private home reached the host's\n{}",
        both(&out)
    );
    assert!(!work.path().join(".bashrc").exists());
}

/// C2 (hardening): no new user namespace, no mount, no io_uring or clone3 (ENOSYS),
/// only `lo` in the network namespace, no capabilities, no_new_privs, a
/// seccomp filter, and PID 1 is sandbox-init.
#[test]
fn the_sandbox_is_hardened() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let mut script = String::new();
    script += &attempt("unshare", "unshare -Ur true");
    script += &attempt("unshare-net", "unshare -n true");
    script += &attempt("mount", "mount -t tmpfs none /tmp");
    script += "python3 -c 'import ctypes, os\n\
l = ctypes.CDLL(None, use_errno=True)\n\
r = l.syscall(425, 8, ctypes.create_string_buffer(120))\n\
print(\"io_uring\", r, ctypes.get_errno())\n\
r = l.syscall(435, 0, 0)\n\
print(\"clone3\", r, ctypes.get_errno())'\n";
    script += "echo net-begin; cat /proc/net/dev; echo net-end\n";
    script += "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status\n";
    script += "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline)\n";
    let out = bwrap_sh(&plugins, work.path(), None, &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "unshare=failed");
    assert_line(&out, "unshare-net=failed");
    assert_line(&out, "mount=failed");
    assert_line(&out, &format!("io_uring -1 {}", libc::ENOSYS));
    // The hardening's one rule each command adds itself (its fork thread
    // carries the rest): glibc falls back to clone, whose namespace bits
    // are refused.
    assert_line(&out, &format!("clone3 -1 {}", libc::ENOSYS));
    let stdout = text(&out.stdout);
    let net = stdout
        .split("net-begin")
        .nth(1)
        .and_then(|r| r.split("net-end").next())
        .unwrap();
    let interfaces: Vec<&str> = net
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .filter(|name| !name.contains('|'))
        .collect();
    assert_eq!(interfaces, vec!["lo"], "{}", both(&out));
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert_line(&out, line);
    }
    assert!(
        lines(&out)
            .iter()
            .any(|l| l.starts_with("pid1=") && l.contains("sandbox-init")),
        "{}",
        both(&out)
    );
}

/// C2: only the system view and the binds are visible: no /home (unless
/// HOME lives there), no /root contents, no unbound host temp dir, not the
/// host's HOME or this repository. With `toolchains = false`: the user's
/// toolchains (in /root here) are shown by default, and
/// `toolchains::only_the_caches_of_a_home_are_shown_and_their_writes_stay_inside`
/// checks that they are all that is.
#[test]
fn only_the_system_view_and_the_binds_are_visible() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let hidden = tempfile::tempdir().unwrap();
    std::fs::write(hidden.path().join("secret"), "hidden\n").unwrap();
    let repo = repo_root();
    let repo_visible_by_design = ["/usr", "/etc", "/opt", "/nix"]
        .iter()
        .any(|dir| repo.starts_with(dir));
    let home_under_home = std::env::temp_dir().starts_with("/home");
    let mut script = String::new();
    script += "echo root-begin; ls -A /; echo root-end\n";
    script += &attempt(
        "root-empty",
        "test ! -e /root || test -z \"$(ls -A /root)\"",
    );
    script += &attempt("hidden", &format!("test -e {}", s(hidden.path())));
    script += &attempt("hidden-file", &format!("cat {}/secret", s(hidden.path())));
    script += &attempt("repo", &format!("test -e {}", s(&repo.join("Cargo.toml"))));
    script += &attempt("bound", &format!("test -d {}", s(work.path())));
    let out = CcServer::new(&plugins)
        .config(&format!(
            "{SANDBOX_LAYER_ONLY}[backends.bwrap]\ntoolchains = false\n"
        ))
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c"])
        .arg(format!("{ONLY_IN_A_SANDBOX}{script}"))
        .output();
    let stdout = text(&out.stdout);
    let top: Vec<&str> = stdout
        .split("root-begin")
        .nth(1)
        .and_then(|r| r.split("root-end").next())
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .collect();
    assert!(top.contains(&"usr") && top.contains(&"proc"), "{top:?}");
    if !home_under_home {
        assert!(!top.contains(&"home"), "/home is visible: {top:?}");
    }
    assert_line(&out, "root-empty=ok");
    assert_line(&out, "hidden=failed");
    assert_line(&out, "hidden-file=failed");
    if !repo_visible_by_design {
        assert_line(&out, "repo=failed");
    }
    assert_line(&out, "bound=ok");
    assert!(!stdout.contains("hidden\n"), "{}", both(&out));
}

/// F10, B8: `exit 7` → 7; killed by SIGTERM → 143; a timeout → 137 with
/// "timeout" on stderr; a missing command → 127; `--json` says `started`
/// with `"backend":"bwrap"`.
#[test]
fn exit_codes_signals_and_timeouts() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let out = bwrap_sh(&plugins, work.path(), None, &[], "exit 7");
    assert_eq!(code(&out), 7, "{}", both(&out));
    let out = bwrap_sh(&plugins, work.path(), None, &[], "kill -TERM $$");
    assert_eq!(code(&out), 143, "{}", both(&out));
    let out = bwrap_run(
        &plugins,
        work.path(),
        None,
        &["--timeout", "0.5"],
        &["sleep", "60"],
    );
    assert_eq!(code(&out), 137, "{}", both(&out));
    assert!(text(&out.stderr).contains("timeout"), "{}", both(&out));
    let out = bwrap_run(
        &plugins,
        work.path(),
        None,
        &[],
        &["no-such-command-cc-test"],
    );
    assert_eq!(code(&out), 127, "{}", both(&out));
    let out = bwrap_sh(&plugins, work.path(), None, &["--json"], "echo hi; exit 3");
    assert_eq!(code(&out), 3, "{}", both(&out));
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON ({e}): {l}")))
        .collect();
    assert_eq!(events[0]["type"], "started", "{events:?}");
    assert_eq!(events[0]["backend"], "bwrap", "{events:?}");
    assert_eq!(joined(&events, "stdout"), "hi\n", "{events:?}");
    assert_eq!(exit_code(&events), 3);
}

/// C2, C4: nothing survives the run: a background process started inside
/// is gone from the host after cc_server returns, and so is bwrap.
#[test]
fn nothing_survives_the_run() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let marker = format!("300.{}", unique());
    let script = format!("sleep {marker} >/dev/null 2>&1 & kill -0 $! && echo started");
    let out = bwrap_sh(&plugins, work.path(), None, &[], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "started");
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&marker)
            .is_empty()),
        "survived the run: {:?}",
        processes_with(&marker)
    );
    assert!(
        eventually(Duration::from_secs(30), || bwrap_processes_with(s(
            work.path()
        ))
        .is_empty()),
        "bwrap survived the run: {:?}",
        bwrap_processes_with(s(work.path()))
    );
}

/// C2, C4: SIGKILL of the server (no cleanup code runs) still takes every
/// sandbox with it: bwrap dies with its parent, and the sandbox's processes
/// with their PID 1.
#[test]
fn sigkill_of_the_server_leaves_nothing_behind() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let mut server = bwrap_server(&plugins);
    let work = tempfile::tempdir().unwrap();
    create_bwrap(&server, "k9", work.path());
    let marker = format!("300.{}", unique());
    let script = format!("sleep {marker} >/dev/null 2>&1 & echo $!");
    let events = api_exec(&server, "k9", &["sh", "-c", &script]);
    assert_eq!(exit_code(&events), 0, "{events:?}");
    assert!(
        eventually(Duration::from_secs(10), || !processes_with(&marker)
            .is_empty()),
        "the background sleep is not running: {events:?}"
    );
    assert!(!bwrap_processes_with(s(work.path())).is_empty());
    let status = server.stop_with(libc::SIGKILL);
    assert!(!status.success(), "{status:?}");
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&marker)
            .is_empty()),
        "outlived the server: {:?}",
        processes_with(&marker)
    );
    assert!(
        eventually(Duration::from_secs(30), || bwrap_processes_with(s(
            work.path()
        ))
        .is_empty()),
        "bwrap outlived the server: {:?}",
        bwrap_processes_with(s(work.path()))
    );
}

/// G2, F8, F10, B8: a bwrap sandbox over the API reports itself (native,
/// bwrap, no kernel boundary, warm when idle); two concurrent execs in it
/// get exactly their own output and exit codes.
#[test]
fn concurrent_execs_in_one_bwrap_sandbox_get_their_own_output() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let server = bwrap_server(&plugins);
    let work = tempfile::tempdir().unwrap();
    let handle = create_bwrap(&server, "cc", work.path());
    assert_eq!(handle["backend"], "native", "{handle}");
    assert_eq!(handle["backendName"], "bwrap", "{handle}");
    assert_eq!(handle["kernelBoundary"], false, "{handle}");
    assert_eq!(handle["state"], "warm", "{handle}");
    let results: Vec<(String, Vec<Value>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = [("A", 3), ("B", 5)]
            .into_iter()
            .map(|(tag, code)| {
                let server = &server;
                scope.spawn(move || {
                    let script =
                        format!("for i in $(seq 1 2000); do echo {tag}$i; done; exit {code}");
                    (
                        tag.to_owned(),
                        api_exec(server, "cc", &["sh", "-c", &script]),
                    )
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (tag, events) in &results {
        assert_eq!(events[0]["backend"], "bwrap", "{:?}", events[0]);
        let expected: String = (1..=2000).map(|i| format!("{tag}{i}\n")).collect();
        let got = joined(events, "stdout");
        assert!(
            got == expected,
            "exec {tag} got other output ({} bytes, expected {})",
            got.len(),
            expected.len()
        );
        assert_eq!(exit_code(events), if tag == "A" { 3 } else { 5 });
    }
    assert_ne!(results[0].1[0]["execId"], results[1].1[0]["execId"]);
    assert!(
        eventually(Duration::from_secs(10), || state_of(&server, "cc")
            == "warm"),
        "not warm when idle: {}",
        state_of(&server, "cc")
    );
    let destroyed = server.call("DELETE", "/v1/sandboxes/cc", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
}

/// G3, F9: suspend stops every process in the sandbox (a background
/// writer stops writing), refuses execs while suspended, and resume lets
/// it go on; destroy ends it.
#[test]
fn suspend_stops_the_sandbox_and_resume_continues_it() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let server = bwrap_server(&plugins);
    let work = tempfile::tempdir().unwrap();
    create_bwrap(&server, "sr", work.path());
    let ticks = work.path().join("ticks");
    let marker = unique();
    let script = format!(
        "M={marker}; (while :; do echo t >> ticks; sleep 0.05; done) </dev/null >/dev/null 2>&1 & echo $!"
    );
    let events = api_exec(&server, "sr", &["sh", "-c", &script]);
    assert_eq!(exit_code(&events), 0, "{events:?}");
    let start = file_len(&ticks);
    assert!(
        eventually(Duration::from_secs(30), || file_len(&ticks) > start + 4),
        "the background writer does not write"
    );

    let suspended = server.call("POST", "/v1/sandboxes/sr/suspend", None);
    assert_eq!(suspended.status, 200, "{}", text(&suspended.body));
    assert_eq!(
        suspended.json()["state"],
        "suspended",
        "{}",
        text(&suspended.body)
    );
    assert_eq!(state_of(&server, "sr"), "suspended");
    let frozen = file_len(&ticks);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        file_len(&ticks),
        frozen,
        "the sandbox kept writing while suspended"
    );
    let refused = server.call(
        "POST",
        "/v1/sandboxes/sr/execs",
        Some(&json!({"argv": ["true"]}).to_string()),
    );
    assert!(
        !(200..300).contains(&refused.status),
        "an exec ran in a suspended sandbox: {} {}",
        refused.status,
        text(&refused.body)
    );

    let resumed = server.call("POST", "/v1/sandboxes/sr/resume", None);
    assert_eq!(resumed.status, 200, "{}", text(&resumed.body));
    let state = resumed.json()["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(state == "warm" || state == "active", "{state}");
    assert!(
        eventually(Duration::from_secs(30), || file_len(&ticks) > frozen + 4),
        "the writer did not go on after resume"
    );
    let events = api_exec(&server, "sr", &["sh", "-c", "echo back"]);
    assert_eq!(joined(&events, "stdout"), "back\n", "{events:?}");

    let destroyed = server.call("DELETE", "/v1/sandboxes/sr", None);
    assert_eq!(destroyed.status, 200, "{}", text(&destroyed.body));
    assert!(
        eventually(Duration::from_secs(30), || processes_with(&marker)
            .is_empty()),
        "the writer outlived its sandbox: {:?}",
        processes_with(&marker)
    );
}

/// F12, F11: writing to a read-only bind is reported as
/// `cc_server: violation: file-write <path>` (the path the error names),
/// once per path, also as a `violation` event with --json; an ordinary
/// error is not a violation.
#[test]
fn a_write_to_a_read_only_bind_is_reported_as_a_violation() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    let target = ro.path().join("f");
    let target_s = s(&target);
    let bind = format!("{}:ro", s(ro.path()));
    let script =
        format!("echo x > {target_s}; echo x > {target_s}; cat /no-such-file-cc-test; exit 0");
    let out = bwrap_sh(&plugins, work.path(), None, &["--bind", &bind], &script);
    assert_eq!(code(&out), 0, "{}", both(&out));
    let stderr = text(&out.stderr);
    let violations: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("cc_server: violation:"))
        .collect();
    assert_eq!(
        violations,
        vec![format!("cc_server: violation: file-write {target_s}").as_str()],
        "{}",
        both(&out)
    );
    assert!(!target.exists());

    let out = bwrap_sh(
        &plugins,
        work.path(),
        None,
        &["--json", "--bind", &bind],
        &format!("touch {target_s}"),
    );
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON ({e}): {l}")))
        .collect();
    let reported: Vec<&Value> = events.iter().filter(|e| e["type"] == "violation").collect();
    assert_eq!(reported.len(), 1, "{events:?}");
    assert_eq!(reported[0]["action"], "file-write", "{events:?}");
    assert_eq!(reported[0]["target"], target_s, "{events:?}");
    assert!(!target.exists());
}

/// F4, F2: `runnerStateDirs` stay writable in a read-only mode, while the
/// spec's bind is read-only.
#[test]
fn runner_state_dirs_are_writable_in_review_mode() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let specs = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("f"), "original\n").unwrap();
    let spec = specs.path().join("spec.json");
    std::fs::write(
        &spec,
        json!({
            "bindMounts": [{"hostPath": work.path()}],
            "runnerStateDirs": [state.path()],
            "guestWorkdir": work.path(),
            "mode": "review",
        })
        .to_string(),
    )
    .unwrap();
    let mut script = String::new();
    script += &attempt("state", &format!("echo saved > {}/out", s(state.path())));
    script += &attempt("bind", "echo x > f");
    let out = bwrap_sh(&plugins, work.path(), None, &["--spec", s(&spec)], &script);
    assert_line(&out, "state=ok");
    assert_line(&out, "bind=failed");
    assert_eq!(
        std::fs::read_to_string(state.path().join("out")).unwrap(),
        "saved\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("f")).unwrap(),
        "original\n"
    );
}

/// C3, G1: under the default dispatch policy bwrap runs with its create-time
/// guard; with the guard disabled in the config it is refused (fail closed,
/// 125, the command never runs, the ways out named) on the CLI and the API;
/// with the policy also lowered it runs, and says the policy was lowered.
#[test]
fn the_dispatch_policy_needs_the_guard_or_an_explicit_lowering() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let out = bwrap_sh(
        &plugins,
        work.path(),
        None,
        &[],
        "echo ran > ran && echo x > x.pem",
    );
    assert_ne!(code(&out), 0, "{}", both(&out));
    assert_eq!(
        std::fs::read_to_string(work.path().join("ran")).unwrap(),
        "ran\n"
    );
    assert!(
        !work.path().join("x.pem").exists(),
        "the guard let x.pem through"
    );
    std::fs::remove_file(work.path().join("ran")).unwrap();

    let no_guard = "[backends.bwrap]\nguard = false\n";
    let out = CcServer::new(&plugins)
        .config(no_guard)
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "bwrap",
            "--",
            "sh",
            "-c",
            "echo ran > ran",
        ])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("fs.deny-glob-on-create") && stderr.contains("write_deny_globs = []"),
        "{stderr}"
    );
    assert!(!work.path().join("ran").exists(), "the command ran");

    let server = Server::start_with(CcServer::new(&plugins).config(no_guard));
    let body = json!({"sessionId": "p", "bindMounts": [{"hostPath": work.path()}], "guestWorkdir": work.path()});
    let refused = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&body.to_string()),
    );
    assert_eq!(refused.status, 422, "{}", text(&refused.body));
    assert!(
        text(&refused.body).contains("fs.deny-glob-on-create"),
        "{}",
        text(&refused.body)
    );
    assert_eq!(server.call("GET", "/v1/sandboxes/p", None).status, 404);

    // The repository's example config lowers the policy for hosts without the guard.
    let out = CcServer::new(&plugins)
        .without_create_guard()
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "bwrap",
            "--",
            "sh",
            "-c",
            "echo ran > ran",
        ])
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert!(
        text(&out.stderr).contains("dispatch policy lowered"),
        "{}",
        both(&out)
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("ran")).unwrap(),
        "ran\n"
    );
}

/// B2, B8: with bwrap installed, its probe is available and badged without
/// a kernel boundary.
#[test]
fn the_bwrap_probe_is_available_without_a_kernel_boundary() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let server = bwrap_server(&plugins);
    let response = server.call("GET", "/v1/backends", None);
    assert_eq!(response.status, 200, "{}", text(&response.body));
    let body = response.json();
    let bwrap: Vec<&Value> = body["backends"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["name"] == "bwrap")
        .collect();
    assert_eq!(bwrap.len(), 1, "{body}");
    assert_eq!(bwrap[0]["probe"]["available"], true, "{body}");
    assert_eq!(bwrap[0]["probe"]["kernelBoundary"], false, "{body}");
}

/// G4: the private `$HOME` gets the host user's `user.name` and
/// `user.email` and nothing else of the host's git config, so `git commit`
/// works; the host's own file is neither visible nor written.
#[test]
fn commits_carry_the_host_users_identity_and_nothing_else_of_their_config() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let server = CcServer::new(&plugins).config(SANDBOX_LAYER_ONLY);
    let home = server.home();
    let host_config = home.path().join(".gitconfig");
    let original = "[user]\n\tname = Ada Host\n\temail = ada@host.test\n\
                    [credential]\n\thelper = store\n[core]\n\thooksPath = /tmp/evil-hooks\n\
                    [alias]\n\tst = !touch /tmp/evil-alias\n";
    std::fs::write(&host_config, original).unwrap();
    let script = "git init -q . && git commit -q --allow-empty -m first && \
                  git log --format='author=%an <%ae>' && \
                  echo config-begin && cat ~/.gitconfig && echo config-end && \
                  git config --global core.editor vim && echo wrote=ok";
    let out = server
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", script])
        .output();
    assert_eq!(code(&out), 0, "{}", both(&out));
    assert_line(&out, "author=Ada Host <ada@host.test>");
    assert_line(&out, "wrote=ok");
    let stdout = text(&out.stdout);
    let inside = stdout
        .split("config-begin")
        .nth(1)
        .and_then(|r| r.split("config-end").next())
        .unwrap();
    for absent in ["credential", "hooksPath", "alias", "evil"] {
        assert!(!inside.contains(absent), "{absent}: {inside}");
    }
    assert_eq!(std::fs::read_to_string(&host_config).unwrap(), original);
}

/// G5 (T15): `run` in a directory that holds a plugins
/// directory the server searches (a checkout with its build inside, as in
/// the README's first command) runs, with that directory read-only inside:
/// a library planted there would be loaded, unsandboxed, at the next start.
#[test]
fn a_plugins_directory_inside_the_workdir_stays_read_only() {
    require_bwrap!();
    let empty = Plugins::empty();
    let checkout = tempfile::tempdir().unwrap();
    let plugins = checkout.path().join("plugins");
    std::fs::create_dir(&plugins).unwrap();
    for lib in ["libsandbox_backend_none.so", "libsandbox_backend_bwrap.so"] {
        let dest = plugins.join(lib);
        std::fs::copy(artifact(lib), &dest).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let init = plugins.join("sandbox-init");
    std::fs::copy(artifact("sandbox-init"), &init).unwrap();
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!(
        "{ONLY_IN_A_SANDBOX}touch made.txt && echo made=ok; \
         if touch plugins/libsandbox_backend_evil.so; then echo planted=yes; else echo planted=no; fi"
    );
    let out = CcServer::new(&empty)
        .config(SANDBOX_LAYER_ONLY)
        .env("CC_SERVER_PLUGIN_PATH", &plugins)
        .current_dir(checkout.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script])
        .output();
    assert_eq!(out.status.code(), Some(0), "{}", both(&out));
    assert_line(&out, "made=ok");
    assert_line(&out, "planted=no");
    assert!(checkout.path().join("made.txt").exists());
    assert!(!plugins.join("libsandbox_backend_evil.so").exists());
}

/// G4: a rename and a hard link across directories of the
/// workspace — what rustc does with every `.rmeta`, what `git`, `pip` and
/// `npm` do with their temporary files — work with the guard on and off.
/// With the guard off the commands' own `rename(2)` reaches the kernel, and
/// their nested Landlock domain refused it (EXDEV, "Invalid cross-device
/// link") until it granted `REFER`. Host: the file moved, the link made.
#[test]
fn renames_and_links_across_directories_work_with_and_without_the_guard() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let lowered = "[policy]\nenforce = false\n[backends.bwrap]\nguard = false\n\
                   [dispatch_policy]\nwrite_deny_globs = []\n";
    for (label, config) in [("guarded", SANDBOX_LAYER_ONLY), ("unguarded", lowered)] {
        let work = tempfile::tempdir().unwrap();
        let w = work.path();
        std::fs::create_dir_all(w.join("tmp.x")).unwrap();
        std::fs::create_dir_all(w.join("deps")).unwrap();
        std::fs::write(w.join("tmp.x/full.rmeta"), "meta").unwrap();
        std::fs::write(w.join("tmp.x/linked"), "linked").unwrap();
        let script = format!(
            "{ONLY_IN_A_SANDBOX}/usr/bin/python3 -c \"import os; \
             os.rename('tmp.x/full.rmeta', 'deps/lib.rmeta'); \
             os.link('tmp.x/linked', 'deps/linked'); print('moved')\""
        );
        let out = CcServer::new(&plugins)
            .config(config)
            .current_dir(w)
            .args(["run", "--backend", "bwrap", "--", "sh", "-c", &script])
            .output();
        assert_eq!(code(&out), 0, "{label}: {}", both(&out));
        assert_eq!(text(&out.stdout), "moved\n", "{label}: {}", both(&out));
        assert_eq!(
            std::fs::read_to_string(w.join("deps/lib.rmeta")).unwrap(),
            "meta",
            "{label}"
        );
        assert!(!w.join("tmp.x/full.rmeta").exists(), "{label}");
        assert_eq!(
            std::fs::read_to_string(w.join("deps/linked")).unwrap(),
            "linked",
            "{label}"
        );
    }
}

/// A runtime directory of this test's own (`XDG_RUNTIME_DIR`), so the kept
/// probe is neither shared with other tests nor with the machine's.
struct KeptProbe {
    root: tempfile::TempDir,
}

impl KeptProbe {
    fn new() -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// The directory the bwrap backend keeps its probe in.
    fn dir(&self) -> PathBuf {
        self.root.path().join("cc_server")
    }

    /// The guarded probe's kept file (one per installation and setting).
    fn file(&self) -> PathBuf {
        let kept: Vec<PathBuf> = std::fs::read_dir(self.dir())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        kept.into_iter()
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("bwrap-probe-guarded-") && name.ends_with(".json")
            })
            .unwrap_or_else(|| self.dir().join("bwrap-probe-guarded-(none kept).json"))
    }

    /// `cc_server` with this runtime directory.
    fn cc_server(&self, plugins: &Plugins) -> CcServer {
        CcServer::new(plugins).env("XDG_RUNTIME_DIR", self.root.path())
    }

    /// The bwrap entry of `probe --json` (plus `flags`).
    fn probe(&self, plugins: &Plugins, flags: &[&str], path: Option<&str>) -> Value {
        let mut command = self.cc_server(plugins);
        if let Some(path) = path {
            command = command.env("PATH", path);
        }
        let out = command.arg("probe").arg("--json").args(flags).output();
        assert_eq!(code(&out), 0, "{}", both(&out));
        let body: Value = serde_json::from_slice(&out.stdout).unwrap();
        body["backends"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["name"] == "bwrap")
            .unwrap_or_else(|| panic!("no bwrap in {body}"))["probe"]
            .clone()
    }
}

fn kept_of(probe: &Value) -> String {
    probe["kept"].as_str().unwrap_or_default().to_owned()
}

fn has_guard(probe: &Value) -> bool {
    probe["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c == "fs.deny-glob-on-create")
}

/// B1, T30: the canary and the guard's self-test run once per boot
/// and are kept in a 0700 directory; a second `run` uses them (the self-test
/// is not run again: the run's log says so), `probe` shows it, and
/// `probe --fresh` runs them again.
#[test]
fn the_probe_is_kept_for_the_boot_and_a_second_run_uses_it() {
    use std::os::unix::fs::MetadataExt;
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let kept = KeptProbe::new();
    let work = tempfile::tempdir().unwrap();

    let run = |log: &str| {
        kept.cc_server(&plugins)
            .env("CC_SERVER_LOG", log)
            .current_dir(work.path())
            .args(["run", "--backend", "bwrap", "--", "true"])
            .output()
    };
    let first = run("info");
    assert_eq!(code(&first), 0, "{}", both(&first));
    let said = text(&first.stderr);
    assert!(
        said.contains("canary run now, guard self-test run now") && said.contains("kept in"),
        "{said}"
    );
    let dir = std::fs::symlink_metadata(kept.dir()).unwrap();
    assert!(dir.is_dir());
    assert_eq!(dir.mode() & 0o777, 0o700, "the kept directory is private");
    let file = std::fs::symlink_metadata(kept.file()).unwrap();
    assert_eq!(file.mode() & 0o777, 0o600);

    let second = run("info");
    assert_eq!(code(&second), 0, "{}", both(&second));
    let said = text(&second.stderr);
    assert!(
        said.contains("canary kept, guard self-test kept"),
        "the second run probed again: {said}"
    );

    let probe = kept.probe(&plugins, &[], None);
    assert_eq!(probe["available"], true, "{probe}");
    assert!(has_guard(&probe), "{probe}");
    assert!(
        kept_of(&probe).starts_with("canary kept, guard self-test kept"),
        "{probe}"
    );
    assert!(kept_of(&probe).contains("probe --fresh"), "{probe}");

    let fresh = kept.probe(&plugins, &["--fresh"], None);
    assert!(has_guard(&fresh), "{fresh}");
    assert!(
        kept_of(&fresh).starts_with("canary run now, guard self-test run now"),
        "{fresh}"
    );
    let off = kept
        .cc_server(&plugins)
        .config("[backends.bwrap]\nguard = false\n")
        .args(["probe", "--json"])
        .output();
    let body: Value = serde_json::from_slice(&off.stdout).unwrap();
    let bwrap = body["backends"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "bwrap")
        .unwrap()["probe"]
        .clone();
    assert!(
        kept_of(&bwrap).starts_with("canary run now —"),
        "another setting is another key: {bwrap}"
    );
}

/// A kept file that is damaged, or whose key is not this host's now (here:
/// another boot's), is never trusted: the probe runs afresh, says why, and
/// replaces it.
#[test]
fn a_damaged_or_tampered_kept_probe_is_not_trusted() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let kept = KeptProbe::new();
    assert!(kept_of(&kept.probe(&plugins, &[], None)).contains("kept in"));
    let genuine = std::fs::read_to_string(kept.file()).unwrap();

    std::fs::write(kept.file(), "{\"key\": \"x\", \"canary\": tr").unwrap();
    let probe = kept.probe(&plugins, &[], None);
    assert!(
        kept_of(&probe).starts_with("canary run now") && kept_of(&probe).contains("damaged"),
        "{probe}"
    );
    assert!(
        std::fs::read_to_string(kept.file())
            .unwrap()
            .contains("\"canary\":true")
    );

    let entry: Value = serde_json::from_str(&genuine).unwrap();
    let key = entry["key"].as_str().unwrap();
    let other_boot = another_boot(key);
    let mut tampered = entry.clone();
    tampered["key"] = Value::from(other_boot);
    std::fs::write(kept.file(), tampered.to_string()).unwrap();
    let probe = kept.probe(&plugins, &[], None);
    assert!(
        kept_of(&probe).starts_with("canary run now, guard self-test run now"),
        "a file of another boot was used: {probe}"
    );
}

/// `boot=<id>` in a key replaced by another id.
fn another_boot(key: &str) -> String {
    let rest = key.strip_prefix("boot=").unwrap();
    let (_, after) = rest.split_once(' ').unwrap();
    format!("boot=00000000-0000-0000-0000-000000000000 {after}")
}

/// A kept directory that group or others may write, or that is not ours,
/// is refused — even holding a file with the right key — and the probe
/// runs afresh, saying why and how to fix it; nothing is written there.
#[test]
fn a_kept_probe_in_a_loose_or_foreign_directory_is_refused() {
    use std::os::unix::fs::MetadataExt;
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let good = KeptProbe::new();
    good.probe(&plugins, &[], None);
    let genuine = std::fs::read(good.file()).unwrap();
    // The same installation's file name, in the other directory.
    let name = good.file().file_name().unwrap().to_owned();

    let loose = KeptProbe::new();
    std::fs::create_dir(loose.dir()).unwrap();
    std::fs::set_permissions(loose.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(loose.dir().join(&name), &genuine).unwrap();
    std::fs::set_permissions(
        loose.dir().join(&name),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let probe = loose.probe(&plugins, &[], None);
    let said = kept_of(&probe);
    assert!(
        said.starts_with("canary run now, guard self-test run now"),
        "{probe}"
    );
    assert!(
        said.contains("not kept")
            && said.contains("writable by group or others")
            && said.contains("chmod 700"),
        "{said}"
    );
    assert!(
        has_guard(&probe),
        "the fresh probe still finds the guard: {probe}"
    );
    assert_eq!(
        std::fs::read(loose.dir().join(&name)).unwrap(),
        genuine,
        "written into a loose dir"
    );

    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail(
            "its foreign-directory case needs root to make a directory owned by another user: \
             CI runs the tests as root",
        );
        return;
    }
    let foreign = KeptProbe::new();
    std::fs::create_dir(foreign.dir()).unwrap();
    std::fs::set_permissions(foreign.dir(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(foreign.dir().join(&name), &genuine).unwrap();
    std::os::unix::fs::chown(foreign.dir(), Some(65534), Some(65534)).unwrap();
    let said = kept_of(&foreign.probe(&plugins, &[], None));
    assert!(said.starts_with("canary run now"), "{said}");
    assert!(said.contains("belongs to uid 65534"), "{said}");
    assert_eq!(std::fs::metadata(foreign.dir()).unwrap().uid(), 65534);
}

/// A kept capability that no longer holds (here bwrap, through a wrapper,
/// starts failing to create namespaces, as after a sysctl change): a run
/// that trusted the kept probe fails closed naming the cause, drops the
/// kept result, and the next probe is fresh and says bwrap is unavailable.
/// A kept file with a key that is not this host's now is not believed even
/// then.
#[test]
fn a_kept_capability_that_no_longer_holds_fails_closed_and_is_dropped() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let kept = KeptProbe::new();
    let tools = tempfile::tempdir().unwrap();
    let broken = tools.path().join("namespaces-blocked");
    let wrapper = tools.path().join("bwrap");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n[ -e {} ] && {{ echo 'bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces' >&2; exit 1; }}\nexec /usr/bin/bwrap \"$@\"\n",
            broken.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        tools.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let probe = kept.probe(&plugins, &[], Some(&path));
    assert_eq!(probe["available"], true, "{probe}");
    assert!(kept_of(&probe).contains("kept in"), "{probe}");
    let genuine = std::fs::read_to_string(kept.file()).unwrap();

    std::fs::write(&broken, "").unwrap();
    // Not this boot's key: not believed, so the failure shows at once.
    let mut stale: Value = serde_json::from_str(&genuine).unwrap();
    stale["key"] = Value::from(another_boot(stale["key"].as_str().unwrap()));
    std::fs::write(kept.file(), stale.to_string()).unwrap();
    let probe = kept.probe(&plugins, &[], Some(&path));
    assert_eq!(
        probe["available"], false,
        "a stale kept probe was believed: {probe}"
    );
    assert!(
        probe["hint"]
            .as_str()
            .unwrap()
            .contains("user namespaces are blocked"),
        "{probe}"
    );

    // This boot's key: believed until a launch finds it wrong.
    std::fs::write(kept.file(), &genuine).unwrap();
    let work = tempfile::tempdir().unwrap();
    let out = kept
        .cc_server(&plugins)
        .env("PATH", &path)
        .current_dir(work.path())
        .args([
            "run",
            "--backend",
            "bwrap",
            "--",
            "sh",
            "-c",
            "echo ran > ran",
        ])
        .output();
    assert_eq!(code(&out), 125, "{}", both(&out));
    let said = text(&out.stderr);
    assert!(
        said.contains("bwrap can no longer start a sandbox here")
            && said.contains("user namespaces are blocked")
            && said.contains("next start probes afresh"),
        "{said}"
    );
    assert!(!work.path().join("ran").exists(), "the command ran");
    assert!(!kept.file().exists(), "the kept result was not dropped");
    let probe = kept.probe(&plugins, &[], Some(&path));
    assert_eq!(probe["available"], false, "{probe}");
}

/// The directory of a bwrap sandbox's exec groups, from its handle; `None`
/// (the test skips, or fails under CI) where the host gives the server no
/// cgroup v2 group, in which case the handle says what escapes.
fn exec_groups_of(handle: &Value) -> Option<PathBuf> {
    let tracking = handle["details"]["processTracking"]
        .as_str()
        .unwrap_or_else(|| panic!("no processTracking detail: {handle}"));
    if let Some(dir) = tracking.strip_prefix("cgroup v2 ") {
        return Some(PathBuf::from(dir));
    }
    assert!(tracking.starts_with("process groups only"), "{tracking}");
    skip_or_fail(format!(
        "this host gives the server no cgroup v2 group ({tracking}): CI must run the tests as root on a host with a cgroup2 mount (pure v2, or the hybrid `/sys/fs/cgroup/unified`)"
    ));
    None
}

/// F10, T31: a bwrap exec's timeout ends every process it
/// started — here one that left its session with `setsid`, which PID 1's
/// process-group signal alone does not reach — and the sandbox lives on.
#[test]
fn a_bwrap_exec_timeout_ends_what_it_started_with_setsid() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let server = bwrap_server(&plugins);
    let handle = create_bwrap(&server, "ts", work.path());
    if exec_groups_of(&handle).is_none() {
        return;
    }
    setsid_cannot_outlive_a_timeout(&server, "ts");
    let events = api_exec(&server, "ts", &["echo", "still here"]);
    assert_eq!(joined(&events, "stdout"), "still here\n", "{events:?}");
}

/// F10, T31: the kill route ends every process of a bwrap
/// exec with the signal asked for, the one in a session of its own too.
#[test]
fn killing_a_bwrap_exec_ends_what_it_started_with_setsid() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let server = bwrap_server(&plugins);
    let handle = create_bwrap(&server, "ks", work.path());
    if exec_groups_of(&handle).is_none() {
        return;
    }
    setsid_cannot_outlive_a_kill(&server, "ks");
}

/// T32: a start after a server was killed removes the runtime
/// state it left — its sessions' egress directories and its execs' cgroups
/// — and keeps a live server's, by the owner each names.
#[test]
fn a_start_removes_what_a_killed_server_left_and_keeps_a_live_ones() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let tmp = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // The egress directories are in the runtime dir: here, in `tmp`.
    // SAFETY: plain getter.
    let uid = unsafe { libc::geteuid() };
    let runtime = tmp.path().join(format!("cc_server-{uid}"));
    let egress_dirs = || -> Vec<PathBuf> {
        std::fs::read_dir(&runtime)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("cc_server-egress-")
            })
            .map(|e| e.path())
            .collect()
    };
    let start = || {
        Server::start_with(
            CcServer::new(&plugins)
                .env("TMPDIR", tmp.path())
                .env_remove("XDG_RUNTIME_DIR"),
        )
    };
    let create = |server: &Server, id: &str| -> Value {
        let body = json!({
            "sessionId": id,
            "bindMounts": [{"hostPath": work.path()}],
            "guestWorkdir": work.path(),
            "networkEnabled": true,
        });
        let response = server.call(
            "POST",
            "/v1/sandboxes?backend=bwrap",
            Some(&body.to_string()),
        );
        assert_eq!(
            response.status,
            201,
            "{}\n{}",
            text(&response.body),
            server.log()
        );
        response.json()
    };
    let mut killed = start();
    let killed_handle = create(&killed, "a");
    let killed_dirs = egress_dirs();
    assert_eq!(killed_dirs.len(), 1, "{killed_dirs:?}");
    let live = start();
    let live_handle = create(&live, "b");
    let live_dirs: Vec<PathBuf> = egress_dirs()
        .into_iter()
        .filter(|d| !killed_dirs.contains(d))
        .collect();
    assert_eq!(live_dirs.len(), 1, "{live_dirs:?}");

    killed.stop_with(libc::SIGKILL);
    assert!(killed_dirs[0].exists(), "a killed server cannot clean up");
    let _next = start();
    assert!(
        !killed_dirs[0].exists(),
        "the killed server's egress directory is left"
    );
    assert!(
        live_dirs[0].exists(),
        "a live server's egress directory was removed"
    );
    if let (Some(killed_groups), Some(live_groups)) =
        (exec_groups_of(&killed_handle), exec_groups_of(&live_handle))
    {
        assert!(
            !killed_groups.exists(),
            "the killed server's cgroup {} is left",
            killed_groups.display()
        );
        assert!(live_groups.exists(), "a live server's cgroup was removed");
    }
    let events = api_exec(&live, "b", &["echo", "still here"]);
    assert_eq!(joined(&events, "stdout"), "still here\n", "{events:?}");
}
