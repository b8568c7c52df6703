//! No per-uid counter of the host used up by sandboxes (SPEC G6; threat
//! model T39): black-box, a real `cc_server run --backend bwrap` whose
//! command opens inotify instances until the kernel refuses one and holds
//! them; meanwhile a host process of the same uid and a second sandbox each
//! still get one. As the account running the tests and as the
//! unprivileged `cc-test` (the counters are that account's then).

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::allowlists::{Account, accounts, owned_dir, program_for};
use crate::util::*;

/// Opens inotify instances until one is refused, prints how many it got,
/// then holds them; with `once`, opens one and prints `ok` or `refused`.
fn inotify_script(once: bool) -> String {
    let body = if once {
        "print('ok' if l.inotify_init() >= 0 else 'refused', flush=True)"
    } else {
        "fds = []\nwhile len(fds) < 100000:\n    fd = l.inotify_init()\n    if fd < 0:\n        break\n    fds.append(fd)\nprint('got', len(fds), flush=True)\ntime.sleep(60)"
    };
    format!("import ctypes, time\nl = ctypes.CDLL(None, use_errno=True)\n{body}\n")
}

/// The first number of a `/proc/sys` file.
fn sysctl(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn host_max_instances() -> u64 {
    sysctl("/proc/sys/user/max_inotify_instances")
}

/// `cc_server run --backend bwrap -- python3 -c SCRIPT` as `account`.
fn sandboxed(
    plugins: &Plugins,
    account: &Account,
    cwd: &std::path::Path,
    script: &str,
) -> CcServer {
    sandboxed_with(plugins, account, cwd, SANDBOX_LAYER_ONLY, script)
}

/// [`sandboxed`] with this config.
fn sandboxed_with(
    plugins: &Plugins,
    account: &Account,
    cwd: &std::path::Path,
    config: &str,
    script: &str,
) -> CcServer {
    let mut server = CcServer::with_program(plugins, &program_for(account)).config(config);
    if !account.invoking {
        server = server.run_as(account.uid, account.gid);
    }
    server
        .current_dir(cwd)
        .args(["run", "--backend", "bwrap", "--", "/usr/bin/python3", "-c"])
        .arg(script)
}

#[test]
fn a_sandbox_using_up_inotify_instances_leaves_the_host_and_another_sandbox_theirs() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let hog = sandboxed(&plugins, &account, work.path(), &inotify_script(false));
        // Its home (with its config) lives as long as it runs.
        let _home = hog.home();
        let mut hog = hog.spawn();
        let stdout = hog.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let got: u64 = line
            .trim()
            .strip_prefix("got ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| {
                let _ = hog.kill();
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(&mut hog.stderr.take().unwrap(), &mut err);
                let _ = hog.wait();
                panic!("{account:?}: the hog said {line:?}; stderr: {err}")
            });
        // The host's own process of the same uid still gets one.
        let mut host = Command::new("/usr/bin/python3");
        host.arg("-c")
            .arg(inotify_script(true))
            .current_dir("/")
            .stdin(Stdio::null());
        if !account.invoking {
            host.uid(account.uid).gid(account.gid);
        }
        let on_host = host.output().unwrap();
        // And so does a second sandbox.
        let second = sandboxed(&plugins, &account, work.path(), &inotify_script(true)).output();
        // The `cc_server run` we started; bwrap dies with it.
        let _ = hog.kill();
        let _ = hog.wait();
        // Its share: at most half the host's limit, cut into shares.
        assert!(
            got < host_max_instances() / 2,
            "{account:?}: one sandbox got {got} of the host's {} inotify instances",
            host_max_instances()
        );
        assert_eq!(lines(&on_host), ["ok"], "{account:?}: {}", both(&on_host));
        assert_eq!(lines(&second), ["ok"], "{account:?}: {}", both(&second));
    }
}

/// The budget is server-wide and each share goes back with its sandbox:
/// with two shares, a third live sandbox gets none of these counters, and
/// once one is destroyed the next gets its share again.
#[test]
fn shares_are_server_wide_and_go_back_with_their_sandbox() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let server = Server::start_with(CcServer::new(&plugins).config(&format!(
        "{SANDBOX_LAYER_ONLY}[backends.bwrap]\ncounter_slots = 2\n"
    )));
    let work = tempfile::tempdir().unwrap();
    let instances = |id: &str| -> u64 {
        let response = server.call(
            "POST",
            &format!("/v1/sandboxes/{id}/execs"),
            Some(
                &serde_json::json!({
                    "argv": ["/bin/cat", "/proc/sys/user/max_inotify_instances"]
                })
                .to_string(),
            ),
        );
        assert_eq!(response.status, 200, "{}", text(&response.body));
        let events = response.lines();
        assert_eq!(exit_code(&events), 0, "{events:?}");
        joined(&events, "stdout").trim().parse().unwrap()
    };
    let share = host_max_instances() / 2 / 2;
    for id in ["c1", "c2", "c3"] {
        let created = server.create_bwrap_over(id, work.path());
        assert_eq!(created.status, 201, "{}", text(&created.body));
    }
    assert_eq!(instances("c1"), share);
    assert_eq!(instances("c2"), share);
    assert_eq!(instances("c3"), 0, "a third sandbox got a share of two");
    assert_eq!(server.call("DELETE", "/v1/sandboxes/c1", None).status, 200);
    let created = server.create_bwrap_over("c4", work.path());
    assert_eq!(created.status, 201, "{}", text(&created.body));
    assert_eq!(instances("c4"), share, "c1's share did not come back");
}

/// The host's open-file table, allocated entries (`fs.file-nr`).
fn file_table() -> u64 {
    sysctl("/proc/sys/fs/file-nr")
}

/// Forks children that together hold `total` descriptors of `/dev/null`
/// (each within its own `RLIMIT_NOFILE`), prints `holding`, then sleeps.
fn open_files_script(total: u64) -> String {
    format!(
        "import os, resource, time\n\
         soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n\
         resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n\
         each = min(hard - 64, 10000)\n\
         left = {total}\n\
         while left > 0:\n\
         \x20   n = min(each, left)\n\
         \x20   left -= n\n\
         \x20   if os.fork() == 0:\n\
         \x20       fds = [os.open('/dev/null', os.O_RDONLY) for _ in range(n)]\n\
         \x20       time.sleep(120)\n\
         \x20       os._exit(0)\n\
         time.sleep(0.5)\n\
         print('holding', flush=True)\n\
         time.sleep(120)\n"
    )
}

/// T39, the open-file table: with the watermark set just above what the
/// host holds now (so the test opens tens of thousands of files, not half
/// the table), a sandbox whose commands hold more than their share has them
/// killed, with a violation naming the rule and the keys; a sandbox within
/// its share, live meanwhile, is left alone; the table is back below the
/// watermark after. As the account running the tests and as `cc-test`.
#[test]
fn a_sandbox_filling_the_open_file_table_is_stopped_and_another_is_left_alone() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let watermark = file_table() + 30_000;
        let config =
            format!("{SANDBOX_LAYER_ONLY}[backends.bwrap]\nopen_files_watermark = {watermark}\n");
        let run = |script: &str| sandboxed_with(&plugins, &account, work.path(), &config, script);
        let quiet = run("import time\ntime.sleep(8)\nprint('alive', flush=True)\n");
        let _quiet_home = quiet.home();
        let quiet = quiet.spawn();
        let hog = run(&open_files_script(60_000)).output();
        let quiet = quiet.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&hog.stderr);
        assert!(
            !hog.status.success() && stderr.contains("violation: resource-open-files"),
            "{account:?}: the hog was not stopped: {}",
            both(&hog)
        );
        assert!(
            stderr.contains("counter_slots") || stderr.contains("open_files_watermark"),
            "{account:?}: the refusal names no key: {stderr}"
        );
        assert_eq!(lines(&quiet), ["alive"], "{account:?}: {}", both(&quiet));
        assert!(quiet.status.success(), "{account:?}: {}", both(&quiet));
        assert!(
            file_table() < watermark,
            "{account:?}: the table stayed past the watermark"
        );
    }
}
