//! A host service's unix socket below a bind is not the sandbox's to use
//! (SPEC G5; docs/threat-model.md T17): black-box, as the account running
//! the tests and as `cc-test`, the real `cc_server run --backend bwrap`.
//! A server on the host listens on a socket in the bound directory and
//! writes a marker (in a directory no sandbox sees) for every connection
//! it accepts. From inside, connecting to it — by its name, by a symlink
//! made inside — is refused with a violation naming it, and the marker
//! stays absent; the sandbox's own sockets (a unix server it runs itself,
//! TCP on its loopback) keep working. With `--allow-socket` it connects.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use crate::allowlists::{Account, accounts, owned_dir, program_for};
use crate::util::*;

/// The first line of every script: unless PID 1 is `sandbox-init`, stop.
const ONLY_IN_A_SANDBOX: &str = "grep -q sandbox-init /proc/1/cmdline 2>/dev/null \
    || { echo 'not in a bwrap sandbox; refusing to run the script' >&2; exit 99; }\n";

/// The host's service: accepts, marks, greets, closes; until killed.
const HOST_SERVER: &str = r#"
import os, socket, sys
path, marks = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
s.bind(path)
os.chmod(path, 0o777)
s.listen(8)
print("ready", flush=True)
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(os.path.join(marks, "connected-%d" % n), "w").close()
    c.sendall(b"host-service\n")
    c.close()
"#;

/// Inside: connect to each argument, print what happened.
const CLIENT: &str = r#"
import socket, sys
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("CONNECTED", path, s.recv(64).decode().strip())
    except OSError as e:
        print("REFUSED", path, e.errno)
"#;

/// Inside: a unix server of its own in the workdir and a TCP one on its
/// loopback, each connected to once; then a connect that waits on a full
/// backlog while its process writes a file (a guarded call) before it
/// accepts — the wait must not hold the other calls.
const OWN_SOCKETS: &str = r#"
import os, socket, threading, time
def serve(s):
    c, _ = s.accept(); c.sendall(b"own\n"); c.close()
u = socket.socket(socket.AF_UNIX); u.bind("own.sock"); u.listen(1)
threading.Thread(target=serve, args=(u,)).start()
c = socket.socket(socket.AF_UNIX); c.connect("own.sock")
print("OWN-UNIX", c.recv(16).decode().strip())
t = socket.socket(); t.bind(("127.0.0.1", 0)); t.listen(1)
threading.Thread(target=serve, args=(t,)).start()
c = socket.socket(); c.connect(t.getsockname())
print("OWN-TCP", c.recv(16).decode().strip())
os.unlink("own.sock")
b = socket.socket(socket.AF_UNIX); b.bind("full.sock"); b.listen(0)
first = socket.socket(socket.AF_UNIX); first.connect("full.sock")
second = socket.socket(socket.AF_UNIX)
waiting = threading.Thread(target=second.connect, args=("full.sock",)); waiting.start()
time.sleep(0.3)
open("written-meanwhile", "w").write("x")
b.accept(); b.accept(); waiting.join()
print("FULL-BACKLOG ok")
os.unlink("full.sock"); os.unlink("written-meanwhile")
"#;

/// The host's server on `path`, ready.
fn host_server(path: &Path, marks: &Path) -> Child {
    host_service(HOST_SERVER, path, marks)
}

/// The host's service `script` (a stream or datagram server) on `path`,
/// marking what it gets in `marks`, ready.
fn host_service(script: &str, path: &Path, marks: &Path) -> Child {
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .arg(marks)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the host's server did not start");
    child
}

/// `cc_server run --backend bwrap [extra] -- sh -c SCRIPT` as `account`
/// from `cwd` (bound read-write), the sandbox layer alone.
fn sandboxed(
    plugins: &Plugins,
    account: &Account,
    cwd: &Path,
    extra: &[&str],
    script: &str,
) -> Output {
    let program = program_for(account);
    let mut server = CcServer::with_program(plugins, &program).config(SANDBOX_LAYER_ONLY);
    if !account.invoking {
        server = server.run_as(account.uid, account.gid);
    }
    let out = server
        .current_dir(cwd)
        .args(["run", "--backend", "bwrap", "--timeout", "60"])
        .args(extra)
        .args(["--", "sh", "-c"])
        .arg(format!("{ONLY_IN_A_SANDBOX}{script}"))
        .output();
    assert_ne!(code(&out), 125, "cc_server itself failed\n{}", both(&out));
    out
}

fn connected(marks: &Path) -> usize {
    std::fs::read_dir(marks).unwrap().count()
}

#[test]
fn a_host_socket_below_a_bind_is_refused_unless_allowed() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        let marks = owned_dir(&account);
        let socket = w.join("host.sock");
        let mut server = host_server(&socket, marks.path());
        let script = format!(
            "ln -s host.sock link.sock\n\
             python3 -c '{CLIENT}' host.sock {} link.sock\n\
             python3 -c '{OWN_SOCKETS}'\n",
            socket.display()
        );
        let out = sandboxed(&plugins, &account, w, &[], &script);
        let stdout = text(&out.stdout);
        for name in ["host.sock", &socket.display().to_string(), "link.sock"] {
            assert!(
                stdout.contains(&format!("REFUSED {name} {}\n", libc::EACCES)),
                "{account:?}: a connect to {name} was not refused with EACCES\n{}",
                both(&out)
            );
        }
        let violation = format!(
            "cc_server: violation: network-unix-socket {}\n",
            socket.display()
        );
        assert!(
            text(&out.stderr).contains(&violation),
            "{account:?}: no violation naming the socket\n{}",
            both(&out)
        );
        assert!(
            text(&out.stderr).contains("--allow-socket"),
            "{account:?}: the refusal does not name the flag that allows it\n{}",
            both(&out)
        );
        assert_eq!(
            connected(marks.path()),
            0,
            "{account:?}: the host's service accepted a connection\n{}",
            both(&out)
        );
        assert!(
            stdout.contains("OWN-UNIX own\n")
                && stdout.contains("OWN-TCP own\n")
                && stdout.contains("FULL-BACKLOG ok\n"),
            "{account:?}: the sandbox's own sockets stopped working\n{}",
            both(&out)
        );

        let allowed = sandboxed(
            &plugins,
            &account,
            w,
            &["--allow-socket", "host.sock"],
            &format!("python3 -c '{CLIENT}' host.sock\n"),
        );
        assert!(
            text(&allowed.stdout).contains("CONNECTED host.sock host-service\n"),
            "{account:?}: --allow-socket did not let the connect through\n{}",
            both(&allowed)
        );
        assert_eq!(connected(marks.path()), 1, "{account:?}: one connection");
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// Inside: two races against the check, each while connecting in a loop.
/// A second thread flips the address in the caller's memory between a
/// socket of the sandbox's own (`own.sock`) and the host's (`hst.sock`,
/// same length); then a symlink `lnk.sock` is swapped between the two by
/// `rename`. Prints how many connects got through and how many were
/// refused (connecting until both happened, within a bound); the host's
/// marker directory says whether any reached it.
const RACES: &str = r#"
import ctypes, os, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
u = socket.socket(socket.AF_UNIX); u.bind("own.sock"); u.listen(128)
def accept():
    while True:
        c, _ = u.accept(); c.close()
threading.Thread(target=accept, daemon=True).start()
buf = ctypes.create_string_buffer(socket.AF_UNIX.to_bytes(2, "little") + b"own.sock", 110)
stop = []
def flip():
    at = ctypes.addressof(buf) + 2
    while not stop:
        ctypes.memmove(at, b"hst", 3); ctypes.memmove(at, b"own", 3)
def swap():
    while not stop:
        for target in ("hst.sock", "own.sock"):
            os.symlink(target, "tmp.lnk"); os.replace("tmp.lnk", "lnk.sock")
def race(name, racer, connect):
    t = threading.Thread(target=racer, daemon=True); t.start()
    ok = refused = n = 0
    # At least 300 connects, more until both outcomes were seen (a busy
    # host may not run the racer for a while), at most 20,000.
    while n < 300 or (not (ok and refused) and n < 20000):
        n += 1
        s = socket.socket(socket.AF_UNIX)
        if connect(s) == 0: ok += 1
        else: refused += 1
        s.close()
    stop.append(1); t.join(); stop.clear()
    print("RACE", name, ok, refused, flush=True)
race("address", flip, lambda s: libc.connect(s.fileno(), buf, 2 + 8))
os.symlink("own.sock", "lnk.sock")
race("symlink", swap, lambda s: s.connect_ex("lnk.sock"))
"#;

/// Neither a second thread rewriting the address nor a symlink swapped
/// during the check reaches the host's socket: the supervisor reads the
/// address once and connects the file it judged (threat model T17).
#[test]
fn a_swap_during_the_check_never_reaches_the_host_socket() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        let marks = owned_dir(&account);
        let mut server = host_server(&w.join("hst.sock"), marks.path());
        let out = sandboxed(
            &plugins,
            &account,
            w,
            &[],
            &format!("python3 -c '{RACES}'\n"),
        );
        let _ = server.kill();
        let _ = server.wait();
        let stdout = text(&out.stdout);
        for race in ["address", "symlink"] {
            let counts: Vec<u32> = stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("RACE {race} ")))
                .unwrap_or_else(|| {
                    panic!("{account:?}: the {race} race did not run\n{}", both(&out))
                })
                .split(' ')
                .map(|n| n.parse().unwrap())
                .collect();
            assert!(
                counts[0] > 0 && counts[1] > 0,
                "{account:?}: the {race} race never hit both sockets ({counts:?}): not a race\n{}",
                both(&out)
            );
        }
        assert_eq!(
            connected(marks.path()),
            0,
            "{account:?}: a swap reached the host's service\n{}",
            both(&out)
        );
    }
}

/// The host's datagram service: marks every datagram it receives; until
/// killed.
const HOST_DGRAM_SERVER: &str = r#"
import os, socket, sys
path, marks = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
os.chmod(path, 0o777)
print("ready", flush=True)
n = 0
while True:
    s.recv(64)
    n += 1
    open(os.path.join(marks, "datagram-%d" % n), "w").close()
"#;

/// Inside: a datagram to each argument by address (`sendto`, `sendmsg`);
/// then a datagram socket of its own, connected to and sent to.
const DGRAM_CLIENT: &str = r#"
import errno, socket, sys
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close()
except OSError as e:
    print("NO-DGRAM-SOCKET", errno.errorcode[e.errno])
    try:
        socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError as e:
        print("NO-DGRAM-PAIR", errno.errorcode[e.errno])
    sys.exit(0)
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(b"addressed", path); print("SENT-TO", path)
    except OSError as e:
        print("REFUSED-TO", path, errno.errorcode[e.errno])
    try:
        s.sendmsg([b"addressed"], [], 0, path); print("SENT-MSG", path)
    except OSError as e:
        print("REFUSED-MSG", path, errno.errorcode[e.errno])
own = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); own.bind("own-dgram.sock")
c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); c.connect("own-dgram.sock"); c.send(b"own")
print("OWN-DGRAM", own.recv(16).decode())
"#;

/// T17 for datagrams: a datagram sent by address (`sendto`, `sendmsg`) to
/// a host service's socket below a bind is refused with `EPERM` and never
/// arrives; the sandbox's own datagram socket, connected first, works;
/// with `--allow-socket` the host's is reached by connecting first. Under
/// an unprivileged server (no cgroup program can be loaded) no unix
/// datagram socket can be made at all, and the launch says why.
#[test]
fn a_datagram_to_a_host_socket_below_a_bind_is_refused() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    for account in accounts() {
        let work = owned_dir(&account);
        let w = work.path();
        let marks = owned_dir(&account);
        let socket = w.join("host-dgram.sock");
        let mut server = host_service(HOST_DGRAM_SERVER, &socket, marks.path());
        let script = format!(
            "ln -s host-dgram.sock link-dgram.sock\n\
             python3 -c '{DGRAM_CLIENT}' host-dgram.sock {} link-dgram.sock\n",
            socket.display()
        );
        let out = sandboxed(&plugins, &account, w, &[], &script);
        let allowed = sandboxed(
            &plugins,
            &account,
            w,
            &["--allow-socket", &socket.display().to_string()],
            "python3 -c 'import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); \
             s.connect(\"host-dgram.sock\"); s.send(b\"allowed\"); print(\"SENT-CONNECTED\")'\n",
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        let _ = server.kill();
        let _ = server.wait();
        let got = lines(&out);
        if !account.invoking {
            // An unprivileged server can load no cgroup program: no unix
            // datagram socket can be made at all, and the launch says why.
            assert_eq!(
                got,
                ["NO-DGRAM-SOCKET EPERM", "NO-DGRAM-PAIR EPERM"],
                "{account:?}: {}",
                both(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stderr)
                    .contains("no unix datagram socket can be made in this sandbox"),
                "{account:?}: the refusal went unsaid:\n{}",
                both(&out)
            );
            assert_eq!(
                connected(marks.path()),
                0,
                "{account:?}: a datagram arrived"
            );
            continue;
        }
        for path in [
            "host-dgram.sock",
            &socket.display().to_string(),
            "link-dgram.sock",
        ] {
            for how in ["TO", "MSG"] {
                assert!(
                    got.contains(&format!("REFUSED-{how} {path} EPERM")),
                    "{account:?}: a datagram by address reached {path} ({how}):\n{}",
                    both(&out)
                );
            }
        }
        assert!(
            got.contains(&"OWN-DGRAM own".to_owned()),
            "{account:?}: {}",
            both(&out)
        );
        assert_eq!(
            lines(&allowed),
            ["SENT-CONNECTED"],
            "{account:?}: {}",
            both(&allowed)
        );
        assert_eq!(
            connected(marks.path()),
            1,
            "{account:?}: the host's service got other than the one allowed datagram"
        );
    }
}
