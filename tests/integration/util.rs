//! What every black-box test needs: the built artifacts, a private plugins
//! directory, the fixture plugins, a `cc_server` command with a clean
//! environment, a running server and a small HTTP client.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub use sandbox_test_support::skip_or_fail;

/// `target/`, found from this test binary (`target/debug/deps/integration-…`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// `target/debug` (or whichever profile built this test).
pub fn profile_dir() -> PathBuf {
    std::env::current_exe()
        .unwrap()
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// A built artifact; a clear failure when the workspace was not built.
pub fn artifact(name: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace` before `cargo test` (cargo test does not build cdylibs)",
        path.display()
    );
    path
}

pub fn cc_server_bin() -> PathBuf {
    artifact("cc_server")
}

pub fn none_plugin() -> PathBuf {
    artifact("libsandbox_backend_none.so")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A private plugins directory (mode 0755, as the trust checks want).
pub struct Plugins {
    dir: tempfile::TempDir,
}

impl Plugins {
    pub fn empty() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Self { dir }
    }

    /// With the workspace's `none` library in it.
    pub fn with_none() -> Self {
        let plugins = Self::empty();
        plugins.add(&none_plugin());
        plugins
    }

    /// With `none`, and `bwrap` with the `sandbox-init` it ships beside it.
    pub fn with_bwrap() -> Self {
        let plugins = Self::with_none();
        plugins.add(&artifact("libsandbox_backend_bwrap.so"));
        let init = plugins.add(&artifact("sandbox-init"));
        std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755)).unwrap();
        plugins
    }

    /// With `none` and the `microvm` library (probe only in this version).
    pub fn with_microvm() -> Self {
        let plugins = Self::with_none();
        plugins.add(&artifact("libsandbox_backend_microvm.so"));
        plugins
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Copies a library in under its own name.
    pub fn add(&self, lib: &Path) -> PathBuf {
        self.add_as(lib, lib.file_name().unwrap().to_str().unwrap())
    }

    /// Copies a library in under another name (mode 0644).
    pub fn add_as(&self, lib: &Path, name: &str) -> PathBuf {
        let dest = self.dir.path().join(name);
        std::fs::copy(lib, &dest).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        dest
    }

    /// Writes a file (mode 0644).
    pub fn write(&self, name: &str, contents: &[u8]) -> PathBuf {
        let dest = self.dir.path().join(name);
        std::fs::write(&dest, contents).unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        dest
    }
}

/// The libraries built from `tests/fixtures` (built once per test run).
pub struct Fixtures {
    /// Backend `fixture`, a third-party backend built out of tree.
    pub third_party: PathBuf,
    /// Backend `faulty`, whose probe panics (or hangs with FAULTY_PROBE=hang).
    pub faulty: PathBuf,
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn cargo_build(manifest_dir: &Path, target: &Path) {
    let output = Command::new(cargo())
        .arg("build")
        .arg("--quiet")
        .current_dir(manifest_dir)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "building the fixtures in {} failed:\n{}",
        manifest_dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Builds `tests/fixtures` once (the first caller waits; tens of seconds
/// from clean).
pub fn fixtures() -> &'static Fixtures {
    static FIXTURES: OnceLock<Fixtures> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        cargo_build(
            &repo_root().join("tests/fixtures"),
            &target_dir().join("fixtures"),
        );
        let dir = target_dir().join("fixtures/debug");
        Fixtures {
            third_party: dir.join("libsandbox_backend_fixture.so"),
            faulty: dir.join("libsandbox_backend_faulty.so"),
        }
    })
}

/// The third-party fixture built against a copy of plugin-api whose version
/// is `version`, in a workspace generated under `target/`. This is how a
/// plugin built for another plugin-api release is made.
pub fn fixture_against_api(version: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap();
    if let Some(path) = built.get(version) {
        return path.clone();
    }
    let root = repo_root();
    let ws = target_dir().join(format!("fixture-api-{version}"));
    let _ = std::fs::remove_dir_all(&ws);
    copy_tree(&root.join("plugin-api"), &ws.join("plugin-api"));
    // plugin-api re-exports the path lists of `sandbox-paths`.
    copy_tree(&root.join("paths"), &ws.join("paths"));
    copy_tree(
        &root.join("tests/fixtures/third-party"),
        &ws.join("third-party"),
    );
    // The copy is a new release of plugin-api.
    let manifest = ws.join("plugin-api/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let text = text.replacen(
        "version = \"1.0.0\"",
        &format!("version = \"{version}\""),
        1,
    );
    assert!(
        text.contains(&format!("version = \"{version}\"")),
        "could not set the version in {text}"
    );
    std::fs::write(&manifest, text).unwrap();
    let fixture = ws.join("third-party/Cargo.toml");
    let text = std::fs::read_to_string(&fixture)
        .unwrap()
        .replace("../../../plugin-api", "../plugin-api");
    std::fs::write(&fixture, text).unwrap();
    // A workspace root giving plugin-api what it inherits from ours.
    let ours = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members_start = ours.find("members = [").unwrap();
    let members_end = members_start + ours[members_start..].find(']').unwrap() + 1;
    let mut generated = format!(
        "{}members = [\"plugin-api\", \"third-party\"]{}",
        &ours[..members_start],
        &ours[members_end..]
    );
    generated = generated
        .lines()
        .filter(|l| {
            !l.starts_with("exclude")
                && !l.starts_with("sandbox-registry")
                && !l.starts_with("sandbox-backend-none")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(ws.join("Cargo.toml"), generated).unwrap();
    let _ = std::fs::copy(
        root.join("tests/fixtures/Cargo.lock"),
        ws.join("Cargo.lock"),
    );
    // A target directory of its own: the regular fixture has the same file name.
    let target = target_dir().join("fixtures-api");
    cargo_build(&ws, &target);
    let kept = target.join(format!("libsandbox_backend_fixture-api-{version}.so"));
    std::fs::copy(target.join("debug/libsandbox_backend_fixture.so"), &kept).unwrap();
    built.insert(version.to_owned(), kept.clone());
    kept
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let dest = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// The config of the tests that attack the sandbox itself: the command
/// policy would refuse many of their commands (`unshare`, `mount`, installs,
/// anything in a read-only mode) before a backend saw them, so it is
/// switched off — explicitly, as an operator can, and loudly — and every
/// attempt meets the sandbox alone. The policy has its own tests
/// (`policy.rs`).
pub const SANDBOX_LAYER_ONLY: &str = "[policy]\nenforce = false\n";

/// `cc_server` with a clean environment: no `CC_SERVER_*` settings leak in
/// from the developer's shell, and HOME is private.
pub struct CcServer {
    command: Command,
    _home: Arc<tempfile::TempDir>,
    /// Descriptors handed to the child (kept open until it is spawned).
    _kept: Vec<std::fs::File>,
}

impl CcServer {
    pub fn new(plugins: &Plugins) -> Self {
        Self::with_program(plugins, &cc_server_bin())
    }

    /// [`CcServer::new`] running this copy of the binary.
    pub fn with_program(plugins: &Plugins, program: &Path) -> Self {
        let home = Arc::new(tempfile::tempdir().unwrap());
        let mut command = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CC_SERVER_") || key == "RUST_BACKTRACE" {
                command.env_remove(key);
            }
        }
        command
            .env("HOME", home.path())
            .env_remove("XDG_STATE_HOME");
        command.arg("--plugins-dir").arg(plugins.path());
        Self {
            command,
            _home: home,
            _kept: Vec::new(),
        }
    }

    /// Starts the server with this umask, as a shell's `umask` before it.
    pub fn with_umask(mut self, mask: libc::mode_t) -> Self {
        use std::os::unix::process::CommandExt;
        // SAFETY: umask is async-signal-safe and cannot fail.
        unsafe {
            self.command.pre_exec(move || {
                libc::umask(mask);
                Ok(())
            });
        }
        self
    }

    /// Leaves `path` open in the child as descriptor 9, not close-on-exec,
    /// as a shell's `exec 9<PATH` before starting `cc_server` would.
    pub fn with_open_fd_9(mut self, path: &Path) -> Self {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let file = std::fs::File::open(path).unwrap();
        let raw = file.as_raw_fd();
        // SAFETY: dup2 is async-signal-safe; the new descriptor 9 is not
        // close-on-exec, exactly what an inherited descriptor looks like.
        unsafe {
            self.command.pre_exec(move || {
                if libc::dup2(raw, 9) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self._kept.push(file);
        self
    }

    /// Makes the terminal whose pseudo-terminal side is `slave` the child's
    /// controlling terminal (a session of its own, `TIOCSCTTY`), as a shell
    /// in a terminal would; its standard streams stay as they are. So
    /// `/dev/tty` in the child is that terminal.
    pub fn with_controlling_terminal(mut self, slave: std::fs::File) -> Self {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let raw = slave.as_raw_fd();
        // SAFETY: setsid and ioctl are async-signal-safe and touch only the
        // child's own session and the descriptor it inherited.
        unsafe {
            self.command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(raw, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self._kept.push(slave);
        self
    }

    /// Lowers the dispatch policy with the repository's example config (for
    /// hosts where the bwrap backend has no create-time guard).
    pub fn without_create_guard(self) -> Self {
        self.arg("--config")
            .arg(repo_root().join("examples/without-create-guard.toml"))
    }

    /// Starts the child with this soft `RLIMIT_NOFILE` (the hard one kept),
    /// as a shell's `ulimit -Sn` would.
    pub fn with_soft_open_files_limit(mut self, soft: u64) -> Self {
        use std::os::unix::process::CommandExt;
        // SAFETY: getrlimit and setrlimit are async-signal-safe and touch
        // only the child's own limits and this stack's struct.
        unsafe {
            self.command.pre_exec(move || {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                limit.rlim_cur = soft.min(limit.rlim_max);
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self
    }

    /// Uses this config file text (written into the private home).
    pub fn config(self, toml: &str) -> Self {
        let file = self._home.path().join("cc_server.toml");
        std::fs::write(&file, toml).unwrap();
        self.arg("--config").arg(file)
    }

    pub fn arg(mut self, arg: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.arg(arg);
        self
    }

    /// Runs as this user and group (the caller must be root); the private
    /// home becomes theirs.
    pub fn run_as(mut self, uid: u32, gid: u32) -> Self {
        use std::os::unix::process::CommandExt;
        std::os::unix::fs::chown(self._home.path(), Some(uid), Some(gid)).unwrap();
        // std drops the supplementary groups itself when root sets a uid.
        self.command.uid(uid).gid(gid);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env_remove(key);
        self
    }

    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.command.current_dir(dir);
        self
    }

    /// Runs to completion with stdin closed; panics if it takes over 2 minutes.
    pub fn output(self) -> Output {
        self.output_with_stdin(b"")
    }

    /// Runs to completion, feeding `input` on stdin.
    pub fn output_with_stdin(mut self, input: &[u8]) -> Output {
        self.command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = spawn_when_not_busy(&mut self.command);
        let mut stdin = child.stdin.take().unwrap();
        let input = input.to_vec();
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let output = wait_output(child, Duration::from_secs(120));
        writer.join().unwrap();
        output
    }

    /// Runs to completion in a session of its own with a fresh
    /// pseudo-terminal as its controlling terminal (`/dev/tty`), while its
    /// stdin, stdout and stderr stay pipes (`input` on stdin). Once the
    /// terminal shows `prompt`, `typed` is typed on it. Returns the output
    /// and what the terminal showed up to then.
    pub fn output_on_terminal(
        mut self,
        input: &[u8],
        prompt: &str,
        typed: &[u8],
    ) -> (Output, String) {
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::process::CommandExt;
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty fills two descriptors; null name/termios/winsize are allowed.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        for fd in [master, slave] {
            // SAFETY: fcntl on descriptors we just opened: no other child keeps them.
            unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        }
        // SAFETY: both descriptors are open and owned by nothing else.
        let (mut master, slave) = unsafe {
            (
                std::fs::File::from_raw_fd(master),
                std::fs::File::from_raw_fd(slave),
            )
        };
        let slave_fd = slave.as_raw_fd();
        // SAFETY: setsid and ioctl are async-signal-safe; the slave is open in
        // the child until exec (close-on-exec), and stays its controlling terminal.
        unsafe {
            self.command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let person = {
            let done = Arc::clone(&done);
            let (prompt, typed) = (prompt.to_owned(), typed.to_vec());
            std::thread::spawn(move || {
                let mut shown = Vec::new();
                let mut buf = [0u8; 4096];
                let mut answered = false;
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let mut fd = libc::pollfd {
                        fd: master.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd for the duration of the call.
                    if unsafe { libc::poll(&mut fd, 1, 50) } <= 0 {
                        continue;
                    }
                    match master.read(&mut buf) {
                        Ok(n) => shown.extend_from_slice(&buf[..n]),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                    if !answered && String::from_utf8_lossy(&shown).contains(&prompt) {
                        master.write_all(&typed).unwrap();
                        answered = true;
                    }
                }
                String::from_utf8_lossy(&shown).into_owned()
            })
        };
        let output = self.output_with_stdin(input);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        let shown = person.join().unwrap();
        drop(slave);
        (output, shown)
    }

    /// Starts it in a session of its own whose stdin, stdout, stderr and
    /// controlling terminal are a fresh pseudo-terminal of `cols` × `rows`,
    /// as a person's shell starts it; the test holds the master side.
    pub fn spawn_on_terminal(mut self, cols: u16, rows: u16) -> OnTerminal {
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::process::CommandExt;
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: openpty fills two descriptors; null name and termios are allowed.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: fcntl on a descriptor we just opened.
        unsafe { libc::fcntl(master, libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: both descriptors are open and owned by nothing else.
        let (master, slave) = unsafe {
            (
                std::fs::File::from_raw_fd(master),
                std::fs::File::from_raw_fd(slave),
            )
        };
        let slave_fd = slave.as_raw_fd();
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            self.command.pre_exec(move || {
                if libc::setsid() < 0 || libc::ioctl(slave_fd, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.command
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        let child = self.command.spawn().unwrap();
        OnTerminal {
            child,
            master,
            slave,
            _home: self._home,
        }
    }

    /// Runs to completion in a session of its own with no controlling
    /// terminal (as under a daemon or an agent's pipes), `input` on stdin.
    pub fn output_without_terminal(mut self, input: &[u8]) -> Output {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            self.command.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        self.output_with_stdin(input)
    }

    /// The program, its arguments so far and its environment changes, for
    /// a client that starts `cc_server` itself (an MCP client over stdio).
    #[allow(clippy::type_complexity)]
    pub fn parts(
        &self,
    ) -> (
        std::ffi::OsString,
        Vec<std::ffi::OsString>,
        Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>,
    ) {
        (
            self.command.get_program().to_owned(),
            self.command.get_args().map(ToOwned::to_owned).collect(),
            self.command
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
        )
    }

    /// The private home, kept alive by whoever needs it to outlive `self`.
    pub fn home(&self) -> Arc<tempfile::TempDir> {
        Arc::clone(&self._home)
    }

    /// Starts it with these stdin and stdout, stderr piped; the caller owns
    /// the child.
    pub fn spawn_with(mut self, stdin: Stdio, stdout: Stdio) -> Child {
        self.command
            .stdin(stdin)
            .stdout(stdout)
            .stderr(Stdio::piped());
        self.command.spawn().unwrap()
    }

    /// Starts it; the caller owns the child.
    pub fn spawn(mut self) -> Child {
        self.command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.command.spawn().unwrap()
    }
}

/// Collects a child's output, killing it if it outlives `limit`.
pub fn wait_output(mut child: Child, limit: Duration) -> Output {
    let pid = child.id();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: plain syscall on our own child.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            true
        })
    };
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = err.read_to_end(&mut buf);
        buf
    });
    let mut stdout = Vec::new();
    let _ = out.read_to_end(&mut stdout);
    let stderr = err_reader.join().unwrap();
    let status = child.wait().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        !watchdog.join().unwrap(),
        "cc_server did not finish within {limit:?}; stderr:\n{}",
        String::from_utf8_lossy(&stderr)
    );
    Output {
        status,
        stdout,
        stderr,
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether a process is gone (or a zombie nobody reaped yet).
pub fn process_is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits for a child whose stdout the test does not hold; kills it after
/// `limit`. The status (`None`: it had to be killed) and its stderr.
pub fn wait_or_kill(
    mut child: std::process::Child,
    limit: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let mut status = None;
    let ended = eventually(limit, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
        let _ = child.wait();
    }
    (status, text(&err_reader.join().unwrap()))
}

/// Polls `cond` for up to `limit`.
pub fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `cc_server serve` on a free loopback port. SIGTERM on drop.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub token: String,
    pub token_file: PathBuf,
    log: Arc<Mutex<String>>,
    _state: tempfile::TempDir,
    _home: Arc<tempfile::TempDir>,
}

impl Server {
    pub fn start(plugins: &Plugins) -> Self {
        Self::start_with(CcServer::new(plugins))
    }

    /// Starts `serve` from a prepared command (extra global flags, env).
    pub fn start_with(command: CcServer) -> Self {
        let state = tempfile::tempdir().unwrap();
        let home = command.home();
        let token_file = state.path().join("token");
        let mut child = command
            .arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--token-file")
            .arg(&token_file)
            .spawn();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(rest) = line.split("listening on http://").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                        let _ = tx.send(addr);
                    }
                    log.lock().unwrap().push_str(&line);
                    log.lock().unwrap().push('\n');
                }
            });
        }
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(addr) => addr.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!("the server did not start; log:\n{}", log.lock().unwrap());
            }
        };
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_owned();
        Self {
            child: Some(child),
            addr,
            token,
            token_file,
            log,
            _state: state,
            _home: home,
        }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The server's process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().unwrap().id() as i32
    }

    /// The server's resident memory now (`VmRSS`), in bytes.
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"));
        kib << 10
    }

    /// A request with the server's token.
    pub fn call(&self, method: &str, path: &str, body: Option<&str>) -> Response {
        http(self.addr, method, path, body, Some(&self.token))
    }

    /// Creates a bwrap sandbox whose workdir is `work`, bound read-write;
    /// fails the test, with the server's log, unless it is created.
    pub fn create_bwrap_over(&self, session_id: &str, work: &std::path::Path) -> Response {
        let body = serde_json::json!({
            "sessionId": session_id,
            "bindMounts": [{"hostPath": work}],
            "guestWorkdir": work,
        });
        let created = self.call(
            "POST",
            "/v1/sandboxes?backend=bwrap",
            Some(&body.to_string()),
        );
        assert_eq!(
            created.status,
            201,
            "{}\n{}",
            String::from_utf8_lossy(&created.body),
            self.log()
        );
        created
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.stop_with(libc::SIGTERM)
    }

    /// Sends `signal` and waits for the exit status.
    pub fn stop_with(&mut self, signal: i32) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        // SAFETY: plain syscall on our own child.
        unsafe { libc::kill(child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the server did not stop on signal {signal}; log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.stop();
        }
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// NDJSON: one value per line.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON line ({e}): {l}"))
            })
            .collect()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn request_bytes(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    let body = body.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (key, value) in headers {
        req.push_str(&format!("{key}: {value}\r\n"));
    }
    req.push_str(&format!(
        "Connection: close\r\nContent-Length: {}\r\n",
        body.len()
    ));
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    if let Some(token) = token {
        req.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    req.into_bytes()
}

/// A whole request/response over a fresh connection.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> Response {
    http_with(addr, method, path, body, token, &[])
}

/// [`http`] with more headers; a `Host` among them replaces the default one
/// (the connection still goes to `addr`).
pub fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
    headers: &[(&str, &str)],
) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(&request_bytes(addr, method, path, body, token, headers))
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

/// Opens a request and returns the connection with the response still
/// arriving, for streams a test reads partly and then abandons.
pub fn http_open(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    token: Option<&str>,
) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(&request_bytes(addr, method, path, body, token, &[]))
        .unwrap();
    BufReader::new(stream)
}

/// Sends `request` as it is (every header the caller's own) over a fresh
/// connection and reads the whole response.
pub fn http_raw(addr: SocketAddr, request: &[u8]) -> Response {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

/// Reads a pid a command wrote into `file` (waiting until it is there).
pub fn read_pid(file: &Path) -> i32 {
    let mut pid = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            pid = std::fs::read_to_string(file)
                .ok()
                .and_then(|t| t.trim().parse::<i32>().ok());
            pid.is_some()
        }),
        "no pid in {}",
        file.display()
    );
    pid.unwrap()
}

/// Parses a whole HTTP/1.1 response (a chunked body de-chunked).
pub fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Response {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
    out
}

/// The concatenated text `data` of every NDJSON event of one type.
pub fn joined(events: &[serde_json::Value], kind: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == kind)
        .map(|e| {
            e["data"]
                .as_str()
                .unwrap_or_else(|| panic!("no text data in {e}"))
                .to_owned()
        })
        .collect()
}

/// The exit code of an NDJSON exec stream that ended with `exit`.
pub fn exit_code(events: &[serde_json::Value]) -> i64 {
    let last = events.last().unwrap();
    assert_eq!(last["type"], "exit", "{events:?}");
    last["exitCode"].as_i64().unwrap()
}

/// Whether bwrap is installed. When it is not, the test (or its bwrap
/// part) is skipped, saying so, or fails under CI.
pub fn bwrap_installed() -> bool {
    if Path::new("/usr/bin/bwrap").exists() {
        return true;
    }
    skip_or_fail(
        "/usr/bin/bwrap is not installed, so the bwrap backend cannot be tested here: \
         `.ci/install-deps` installs bubblewrap",
    );
    false
}

macro_rules! require_bwrap {
    () => {
        if !$crate::util::bwrap_installed() {
            return;
        }
    };
}

/// Reads an open exec stream up to the line containing `needle`; returns
/// the NDJSON events seen so far.
pub fn read_until(stream: &mut BufReader<TcpStream>, needle: &str) -> Vec<serde_json::Value> {
    let mut seen = String::new();
    let mut events = Vec::new();
    loop {
        let mut line = String::new();
        let n = stream.read_line(&mut line).unwrap();
        assert!(n > 0, "the stream ended before {needle:?}:\n{seen}");
        seen.push_str(&line);
        if line.starts_with('{') {
            events.push(
                serde_json::from_str(line.trim())
                    .unwrap_or_else(|e| panic!("bad NDJSON ({e}): {line}")),
            );
        }
        if line.contains(needle) {
            return events;
        }
    }
}

/// A string no other test (or earlier run) uses: digits only.
pub fn unique() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{}{:09}{}",
        std::process::id(),
        nanos,
        NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

pub fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or_else(|| {
        panic!(
            "cc_server ended by a signal: {:?}; stderr:\n{}",
            out.status,
            text(&out.stderr)
        )
    })
}

/// stdout and stderr, for failure messages (long outputs cut).
pub fn both(out: &Output) -> String {
    fn cut(t: String) -> String {
        if t.len() <= 12_000 {
            return t;
        }
        let mut end = 12_000;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n[… {} more bytes]\n", &t[..end], t.len() - end)
    }
    format!(
        "exit {:?}\n--- stdout:\n{}--- stderr:\n{}",
        out.status.code(),
        cut(text(&out.stdout)),
        cut(text(&out.stderr))
    )
}

/// The stdout lines of a run.
pub fn lines(out: &Output) -> Vec<String> {
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// Spawns `command`, again after a moment while its program is "busy": a
/// copy of `cc_server` a test just wrote stays open for writing in any
/// child another test thread forked meanwhile, until that child's exec.
pub fn spawn_when_not_busy(command: &mut Command) -> Child {
    for _ in 0..50 {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            spawned => return spawned.unwrap(),
        }
    }
    command.spawn().unwrap()
}

/// Asserts the script printed `line` on a line of its own.
pub fn assert_line(out: &Output, line: &str) {
    assert!(
        lines(out).iter().any(|l| l == line),
        "expected the line {line:?}\n{}",
        both(out)
    );
}

/// A shell fragment that runs `cmd` and prints `LABEL=ok` or `LABEL=failed`.
pub fn attempt(label: &str, cmd: &str) -> String {
    format!("if {cmd}; then echo {label}=ok; else echo {label}=failed; fi\n")
}

/// Asserts nothing (not even a dangling symlink) is at `path` on the host.
pub fn assert_absent(path: &Path, out: &Output) {
    assert!(
        std::fs::symlink_metadata(path).is_err(),
        "{} reached the host\n{}",
        path.display(),
        both(out)
    );
}

/// Every file under `dir` (symlinks not followed) with its bytes, sorted;
/// a snapshot to compare the host against after a run.
pub fn snapshot(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.push((path.clone(), None));
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.push((path, Some(target.into_os_string().into_encoded_bytes())));
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.push((path, Some(bytes)));
            }
        }
    }
    out.sort();
    out
}

/// git on the host as the test's own account: no user or system config,
/// a fixed identity, any owner's repository taken; must succeed.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .args(["-c", "safe.directory=*"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.com")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} on the host failed: {}",
        text(&out.stderr)
    );
    out
}

/// Lines of `stderr` that `cc_server` itself printed.
pub fn own_lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with("cc_server:"))
        .map(str::to_owned)
        .collect()
}

/// Live host processes whose command line contains `needle`.
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) && !process_is_gone(pid) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

/// F10, T31, on any backend: an exec of sandbox `id` that puts
/// a process in a session of its own (`setsid`) ends `killed` by its 500 ms
/// timeout, and no process of it remains — the `setsid` one included.
pub fn setsid_cannot_outlive_a_timeout(server: &Server, id: &str) {
    let marker = format!("20.{}", unique());
    let script = format!("setsid sleep {marker} & sleep {marker}");
    let response = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&serde_json::json!({"argv": ["sh", "-c", script], "timeoutMs": 500}).to_string()),
    );
    assert_eq!(response.status, 200, "{}", text(&response.body));
    let events = response.lines();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "killed", "{events:?}");
    assert_eq!(last["reason"], "timeout", "{events:?}");
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()),
        "processes of the exec outlived its timeout: {:?}",
        processes_with(&marker)
    );
}

/// F10, T31, on any backend: the kill route (signal 15) ends
/// every process of an exec of sandbox `id`, the one in a session of its
/// own too; the stream ends with `killed` by that signal.
pub fn setsid_cannot_outlive_a_kill(server: &Server, id: &str) {
    let marker = format!("20.{}", unique());
    let script = format!("setsid sleep {marker} & echo go; exec sleep {marker}");
    let body = serde_json::json!({"argv": ["sh", "-c", script]}).to_string();
    let mut stream = http_open(
        server.addr,
        "POST",
        &format!("/v1/sandboxes/{id}/execs"),
        Some(&body),
        Some(&server.token),
    );
    let events = read_until(&mut stream, r#"go\n""#);
    let exec_id = events[0]["execId"].as_u64().unwrap();
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker).len()
            == 2),
        "{:?}",
        processes_with(&marker)
    );
    let killed = server.call(
        "POST",
        &format!("/v1/sandboxes/{id}/execs/{exec_id}/kill"),
        Some(r#"{"signal":15}"#),
    );
    assert_eq!(killed.status, 204, "{}", text(&killed.body));
    let mut rest = String::new();
    stream.read_to_string(&mut rest).unwrap();
    let last: serde_json::Value = rest
        .lines()
        .rfind(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON ({e}): {l}")))
        .unwrap_or_else(|| panic!("no terminal event: {rest}"));
    assert_eq!(last["type"], "killed", "{rest}");
    assert_eq!(last["signal"], 15, "{rest}");
    assert!(
        eventually(Duration::from_secs(10), || processes_with(&marker)
            .is_empty()),
        "processes of the exec outlived its kill: {:?}",
        processes_with(&marker)
    );
}

/// Every live descendant of `root`, from /proc.
pub fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
            Some((pid, ppid.parse().ok()?))
        })
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(c, _)| c));
        i += 1;
    }
    found.remove(0);
    found
}

/// A `cc_server` running on a terminal the test holds
/// ([`CcServer::spawn_on_terminal`]).
pub struct OnTerminal {
    pub child: Child,
    pub master: std::fs::File,
    /// The test's copy of the slave side: its modes can be read after.
    pub slave: std::fs::File,
    _home: Arc<tempfile::TempDir>,
}
