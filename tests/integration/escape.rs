//! Threat-model rows (docs/threat-model.md), black-box: each test attempts
//! the vector against the real `cc_server` and checks the outcome — from
//! inside only where the harm would be done *through* the sandbox (a sysctl
//! the host's kernel obeys, a descriptor of the host's), and on the host
//! wherever a file could be left behind.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use crate::util::*;

/// Walks the whole tree a command sees and prints every place it can write:
/// a directory gets a file created and removed at once, a file is opened for
/// writing and closed — nothing is ever written. Below a writable directory
/// only mount points are printed (a bind or an overlay inside a private
/// tmpfs is a place of its own), the rest is that directory's. A process's
/// own `/proc/<pid>` entries are left out (what reaches other sandbox
/// processes is the guard tests'). Then opens the sysctls a host-root shell
/// would want, for writing, writing nothing, and prints the errno.
const WRITABLE_WALK: &str = r#"
import os, stat
def own(p):
    parts = p.split('/')
    return len(parts) > 2 and parts[1] == 'proc' and (parts[2].isdigit() or parts[2] in ('self', 'thread-self'))
probe = '.cc-writable-probe-%d' % os.getpid()
writable = set()
for root, dirs, files in os.walk('/', topdown=True, followlinks=False):
    if own(root):
        dirs[:] = []
        continue
    dirs[:] = [d for d in dirs if not own(os.path.join(root, d))]
    try:
        os.close(os.open(os.path.join(root, probe), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(os.path.join(root, probe))
        writable.add(root)
        if os.path.dirname(root) not in writable or os.path.ismount(root):
            print('writable', root.rstrip('/') + '/')
        continue
    except OSError:
        pass
    for name in files:
        p = os.path.join(root, name)
        try:
            mode = os.lstat(p).st_mode
            if stat.S_ISLNK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                continue
            os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY))
            print('writable', p)
        except OSError:
            pass
for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger']:
    try:
        os.close(os.open(p, os.O_WRONLY))
        print('opened', p)
    except OSError as e:
        print('refused', p, e.errno)
print('walk done')
"#;

/// The places a command may write: its binds, the sandbox's private tmpfs
/// mounts (`/tmp`, `/var/tmp`, bubblewrap's `/dev`), the private `$HOME`
/// (under `/tmp` here, since the tests' homes are temp dirs), and the cache
/// overlays `caches` (writes go to the sandbox's tmpfs: the caller checks
/// the host's directory is unchanged, and each must show up as writable).
/// `core_errno`: EROFS for root (the read-only mount is what refuses), EACCES
/// for another account (the file is root's).
fn assert_only_private_or_bound(
    out: &std::process::Output,
    work: &Path,
    caches: &[&Path],
    core_errno: i32,
) {
    assert_eq!(code(out), 0, "{}", both(out));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("walk done"), "{}", both(out));
    let work = format!("{}/", work.display());
    let caches: Vec<String> = caches.iter().map(|c| format!("{}/", c.display())).collect();
    for cache in &caches {
        assert!(
            stdout.lines().any(|l| l == format!("writable {cache}")),
            "the cache overlay {cache} was not walked: {}",
            both(out)
        );
    }
    let mut allowed = vec![work.as_str(), "/tmp/", "/var/tmp/", "/dev/"];
    allowed.extend(caches.iter().map(String::as_str));
    let strays: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("writable "))
        .filter(|p| !allowed.iter().any(|a| p.starts_with(a)))
        .collect();
    assert!(
        strays.is_empty(),
        "writable outside binds and private mounts: {strays:?}"
    );
    // Refused, whatever the errno (a kernel may lack one: ENOENT); the one
    // every kernel has is read-only.
    assert!(!stdout.contains("opened "), "{}", both(out));
    assert!(
        stdout.contains(&format!(
            "refused /proc/sys/kernel/core_pattern {core_errno}"
        )),
        "{}",
        both(out)
    );
    // The workdir itself is writable, or the walk proved nothing.
    assert!(
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix("writable "))
            .any(|p| work.starts_with(p)),
        "{}",
        both(out)
    );
}

/// T-root (SPEC G5): with the server as root, uid 0 inside is the host's
/// uid 0, which the kernel's sysctl check trusts alone. Every path writable
/// from inside is enumerated: each lies under a bind or a private mount (a
/// cargo home made here is a cache overlay: writable inside, unchanged on
/// the host; so is a version manager's shim directory), and `core_pattern`
/// & co. refuse opening for writing (EROFS).
#[test]
fn nothing_is_writable_inside_but_the_binds_and_private_mounts() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    // Outside /tmp, so the bind is not hidden under the private /tmp.
    let work = tempfile::tempdir_in(target_dir()).unwrap();
    let cargo_home = tempfile::tempdir_in(target_dir()).unwrap();
    std::fs::create_dir(cargo_home.path().join("bin")).unwrap();
    std::fs::write(cargo_home.path().join("bin/cargo"), "#!/bin/sh\n").unwrap();
    let before: Vec<_> = walkdir_names(cargo_home.path());
    // A version manager's home made here: its shims are an overlay too.
    let rbenv = tempfile::tempdir_in(target_dir()).unwrap();
    std::fs::create_dir(rbenv.path().join("shims")).unwrap();
    std::fs::write(rbenv.path().join("shims/ruby"), "#!/bin/sh\n").unwrap();
    let rbenv_before: Vec<_> = walkdir_names(rbenv.path());
    let out = CcServer::new(&plugins)
        .config(SANDBOX_LAYER_ONLY)
        .env("CARGO_HOME", cargo_home.path())
        .env("RBENV_ROOT", rbenv.path())
        // Only the version managers made here (the host's would add theirs).
        .env_remove("PYENV_ROOT")
        .env_remove("NODENV_ROOT")
        .env_remove("ASDF_DATA_DIR")
        .current_dir(work.path())
        .args(["run", "--backend", "bwrap", "--", "/usr/bin/python3", "-c"])
        .arg(WRITABLE_WALK)
        .output();
    // SAFETY: plain getter.
    let errno = if unsafe { libc::geteuid() } == 0 {
        libc::EROFS
    } else {
        libc::EACCES
    };
    let shims = rbenv.path().join("shims");
    assert_only_private_or_bound(&out, work.path(), &[cargo_home.path(), &shims], errno);
    assert_eq!(
        walkdir_names(cargo_home.path()),
        before,
        "the host's cargo home changed"
    );
    assert_eq!(
        walkdir_names(rbenv.path()),
        rbenv_before,
        "the host's rbenv home changed"
    );
}

/// Every name under `dir` with its length and modification time.
fn walkdir_names(dir: &Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let meta = std::fs::symlink_metadata(&at).unwrap();
        out.push((at.clone(), meta.len(), meta.modified().unwrap()));
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&at).unwrap().map(|e| e.unwrap().path()));
        }
    }
    out.sort();
    out
}

/// The accounts a vector is tried as: the caller's, and — when the tests
/// run as root — `nobody` too; without root the `nobody` part is skipped,
/// saying so (a failure under CI).
fn accounts() -> Vec<Option<(u32, u32)>> {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } == 0 {
        vec![None, Some((65534, 65534))]
    } else {
        skip_or_fail(
            "its case as `nobody` needs root to run the server as another account: \
             CI runs the tests as root",
        );
        vec![None]
    }
}

/// `cc_server` (the sandbox layer alone) in `work`, as `account`: for
/// another account, a copy of the binary in a directory anyone can read
/// (the checkout may sit below one they cannot enter), and `work` theirs.
/// The returned directory must outlive the run.
fn server_as(
    plugins: &Plugins,
    account: Option<(u32, u32)>,
    work: &Path,
) -> (CcServer, tempfile::TempDir) {
    let bin_dir = tempfile::tempdir().unwrap();
    let Some((uid, gid)) = account else {
        let server = CcServer::new(plugins).config(SANDBOX_LAYER_ONLY);
        return (server.current_dir(work), bin_dir);
    };
    std::os::unix::fs::chown(work, Some(uid), Some(gid)).unwrap();
    let program = bin_dir.path().join("cc_server");
    std::fs::copy(cc_server_bin(), &program).unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = CcServer::with_program(plugins, &program)
        .config(SANDBOX_LAYER_ONLY)
        .run_as(uid, gid)
        .current_dir(work);
    (server, bin_dir)
}

/// T-root for an unprivileged account (as root, the server runs as
/// `nobody`): the same enumeration, the same result.
#[test]
fn nothing_is_writable_inside_for_an_unprivileged_account_either() {
    require_bwrap!();
    // Without root, `accounts` has said why (the test above already ran
    // as an unprivileged account).
    let Some(nobody) = accounts().into_iter().flatten().next() else {
        return;
    };
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let (server, _bin) = server_as(&plugins, Some(nobody), work.path());
    let out = server
        .args(["run", "--backend", "bwrap", "--", "/usr/bin/python3", "-c"])
        .arg(WRITABLE_WALK)
        .output();
    assert_only_private_or_bound(&out, work.path(), &[], libc::EACCES);
}

/// Prints the descriptors above stderr the command holds (the listing's
/// own is closed by the time each is checked again).
const OPEN_FDS: &str = "import os\n\
fds = [int(x) for x in os.listdir('/proc/self/fd')]\n\
print('fds', [fd for fd in fds if fd > 2 and os.path.exists('/proc/self/fd/%d' % fd)])\n";

/// T-fd (SPEC G5): a descriptor the caller of `cc_server run` left open
/// (`exec 9<DIR`) would let a command `fchdir` past every mount and mask.
/// In bwrap and in `none`, the command holds nothing above stderr.
#[test]
fn a_descriptor_the_caller_left_open_reaches_no_command_of_run() {
    let host_dir = tempfile::tempdir().unwrap();
    std::fs::write(host_dir.path().join("marker"), "host\n").unwrap();
    let mut backends = vec![("none", Plugins::with_none())];
    if bwrap_installed() {
        backends.push(("bwrap", Plugins::with_bwrap()));
    }
    for (backend, plugins) in backends {
        for account in accounts() {
            let work = tempfile::tempdir().unwrap();
            let (server, _bin) = server_as(&plugins, account, work.path());
            let out = server
                .with_open_fd_9(host_dir.path())
                .args([
                    "run",
                    "--backend",
                    backend,
                    "--",
                    "/usr/bin/python3",
                    "-c",
                    OPEN_FDS,
                ])
                .output();
            assert_eq!(code(&out), 0, "{backend} {account:?}: {}", both(&out));
            assert!(
                lines(&out).iter().any(|l| l == "fds []"),
                "{backend} {account:?}: {}",
                both(&out)
            );
        }
    }
}

/// T-fd for the server: one started with descriptor 9 open runs API execs
/// that hold nothing above stderr.
#[test]
fn a_descriptor_the_server_inherited_reaches_no_exec() {
    require_bwrap!();
    let host_dir = tempfile::tempdir().unwrap();
    let plugins = Plugins::with_bwrap();
    let server = Server::start_with(
        CcServer::new(&plugins)
            .config(SANDBOX_LAYER_ONLY)
            .with_open_fd_9(host_dir.path()),
    );
    let work = tempfile::tempdir().unwrap();
    let spec = json!({
        "sessionId": "fd-test",
        "workspaceId": "w",
        "bindMounts": [{"hostPath": work.path()}],
        "guestWorkdir": work.path(),
    });
    let created = server.call(
        "POST",
        "/v1/sandboxes?backend=bwrap",
        Some(&spec.to_string()),
    );
    assert_eq!(created.status, 201, "{}", text(&created.body));
    let exec = json!({"argv": ["/usr/bin/python3", "-c", OPEN_FDS]});
    let response = server.call(
        "POST",
        "/v1/sandboxes/fd-test/execs",
        Some(&exec.to_string()),
    );
    assert_eq!(response.status, 200, "{}", text(&response.body));
    let events = response.lines();
    assert_eq!(joined(&events, "stdout"), "fds []\n", "{events:?}");
    assert_eq!(exit_code(&events), 0, "{events:?}");
}

/// T1 (b): a file a command makes setuid or setgid in a bind would run as
/// its owner on the host — root, for a server run as root. `chmod u+s`,
/// `chmod g+s`, `install -m 4755` and a create with mode 04755 are refused
/// (EPERM); on the host no file in the bind carries either bit.
#[test]
fn no_command_can_leave_a_setuid_file_on_the_host() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        setuid_attempts(&plugins, account);
    }
}

fn setuid_attempts(plugins: &Plugins, account: Option<(u32, u32)>) {
    let work = tempfile::tempdir().unwrap();
    let script = "cp /usr/bin/true t && \
        (chmod u+s t && echo chmod-u=ok || echo chmod-u=failed); \
        (chmod g+s t && echo chmod-g=ok || echo chmod-g=failed); \
        (install -m 4755 /usr/bin/true i && echo install=ok || echo install=failed); \
        /usr/bin/python3 -c \"import os\ntry:\n  os.close(os.open('c', os.O_CREAT | os.O_WRONLY, 0o4755)); print('create=ok')\nexcept OSError as e:\n  print('create=failed', e.errno)\"; \
        (chmod 755 t && echo plain=ok)";
    let (server, _bin) = server_as(plugins, account, work.path());
    let out = server
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", script])
        .output();
    let stdout = text(&out.stdout);
    for refused in ["chmod-u=failed", "chmod-g=failed", "install=failed"] {
        assert!(
            stdout.lines().any(|l| l == refused),
            "{refused}\n{}",
            both(&out)
        );
    }
    assert!(
        stdout.contains(&format!("create=failed {}", libc::EPERM)),
        "{}",
        both(&out)
    );
    assert!(stdout.lines().any(|l| l == "plain=ok"), "{}", both(&out));
    for entry in std::fs::read_dir(work.path()).unwrap() {
        let entry = entry.unwrap();
        let mode = entry.metadata().unwrap().permissions().mode();
        assert_eq!(mode & 0o6000, 0, "{:?} is {mode:o}", entry.path());
    }
}
