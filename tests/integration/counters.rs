//! No per-uid counter of the host used up by sandboxes (SPEC G6; threat
//! model T39): black-box, a real `cc_server run --backend bwrap` whose
//! command opens inotify instances until the kernel refuses one and holds
//! them; meanwhile this process (the same uid, on the host) and a second
//! sandbox each still get one.

use std::io::{BufRead, BufReader};

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

fn host_max_instances() -> u64 {
    std::fs::read_to_string("/proc/sys/user/max_inotify_instances")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_sandbox_using_up_inotify_instances_leaves_the_host_and_another_sandbox_theirs() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let hog = CcServer::new(&plugins)
        .config(SANDBOX_LAYER_ONLY)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "/usr/bin/python3", "-c"])
        .arg(inotify_script(false));
    // Its home (with its config) lives as long as it runs.
    let _home = hog.home();
    let hog = hog.spawn();
    let mut hog = hog;
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
            panic!("the hog said {line:?}; stderr: {err}")
        });
    // Its share: at most half the host's limit, cut into shares.
    assert!(
        got < host_max_instances() / 2,
        "one sandbox got {got} of the host's {} inotify instances",
        host_max_instances()
    );
    // The host's own process of the same uid still gets one.
    // SAFETY: plain syscalls on a descriptor we own.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    let host_errno = std::io::Error::last_os_error();
    if fd >= 0 {
        // SAFETY: ours.
        unsafe { libc::close(fd) };
    }
    // And so does a second sandbox.
    let second = CcServer::new(&plugins)
        .config(SANDBOX_LAYER_ONLY)
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "/usr/bin/python3", "-c"])
        .arg(inotify_script(true))
        .output();
    // The `cc_server run` we started; bwrap dies with it.
    let _ = hog.kill();
    let _ = hog.wait();
    assert!(
        fd >= 0,
        "the host could not open an inotify instance: {host_errno}"
    );
    assert_eq!(lines(&second), ["ok"], "{}", both(&second));
}
