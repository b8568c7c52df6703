//! Forking and exec'ing one command: everything the child needs is
//! prepared before the fork (`Prepared`), and the code between fork and
//! exec makes only async-signal-safe calls on it, so the supervisor threads
//! cannot leave it a held lock. A child that cannot get to exec reports the
//! stage and errno it stopped at, and the refusal says why (SPEC G1, G6).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::forker::Forker;
use crate::seccomp;

/// The stage codes a failed child reports.
const STAGE_CHDIR: u32 = 1;
const STAGE_EXEC: u32 = 2;
const STAGE_GUARD: u32 = 3;
const STAGE_OOM: u32 = 4;
const STAGE_CGROUP: u32 = 5;
const STAGE_TERMINAL: u32 = 6;

/// Every command's `oom_score_adj`: the OOM killer takes a command before
/// PID 1, the supervisor or the forwarder (which keep 0; lowering their
/// own would need CAP_SYS_RESOURCE, raising a child's needs nothing
/// where the sandbox's root is mapped), so a
/// command past the sandbox's memory limit ends `killed` reason `oom` and
/// the sandbox lives on (SPEC G6, F10).
const COMMAND_OOM_SCORE_ADJ: &[u8] = b"1000";

// A command that cannot install its filters does not run: `STAGE_GUARD`.

/// What every command gets between fork and exec.
pub struct Filters {
    /// The hardening the child attaches itself: all of it for a process
    /// PID 1 forks, only what the fork thread cannot carry for a command
    /// made there (`seccomp::fork_thread_filter`); `None` when the guard
    /// filter carries that part.
    pub hardening: Option<Vec<seccomp::SockFilter>>,
    pub guard: Option<Vec<seccomp::SockFilter>>,
    /// The umask commands start with.
    pub umask: libc::mode_t,
}

/// Why a command did not start: the errno and what it was refused.
pub struct Failure {
    pub errno: i32,
    pub message: String,
}

fn c_string(s: &str) -> Result<CString, Failure> {
    CString::new(s).map_err(|_| Failure {
        errno: libc::EINVAL,
        message: format!("{s:?} contains a NUL byte"),
    })
}

/// Where `argv[0]` may be, in order: itself if it names a path, else each
/// `PATH` entry of the command's own environment.
pub fn candidates(program: &str, env: &[(String, String)]) -> Vec<String> {
    if program.contains('/') {
        return vec![program.to_owned()];
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or("/usr/local/bin:/usr/bin:/bin", |(_, v)| v.as_str());
    path.split(':')
        .map(|dir| if dir.is_empty() { "." } else { dir })
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

/// The candidates that may exist, in order: one a `stat` here says is not
/// there (ENOENT, ENOTDIR) is left out, so the child does not try it — a
/// failed `execve` in the child costs ten times the `stat` (`true` through
/// a ten-directory `PATH` was nine of them). What the child tries next is
/// what it would have come to: PID 1 sees the commands' mounts. A relative
/// candidate is looked at from the command's working directory.
fn present(candidates: Vec<String>, cwd: &str) -> Vec<String> {
    candidates
        .into_iter()
        .filter(|c| {
            let path = std::path::Path::new(cwd).join(c);
            !matches!(
                std::fs::metadata(&path).map_err(|e| e.raw_os_error()),
                Err(Some(libc::ENOENT | libc::ENOTDIR))
            )
        })
        .collect()
}

/// Which descriptors follow stdout and stderr in an exec request.
#[derive(Default, Clone, Copy)]
pub struct Streams {
    pub stdin: bool,
    /// The exec's `cgroup.procs`, which the child joins first.
    pub cgroup: bool,
    /// The exec's cgroup directory (after `cgroup.procs`): the child is
    /// made in the group where the kernel allows it, and joins through
    /// `cgroup.procs` where not.
    pub cgroup_dir: bool,
    /// A new terminal of `(cols, rows)` instead of stdout, stderr and
    /// stdin descriptors (none of them is sent then).
    pub terminal: Option<(u16, u16)>,
}

/// A started command.
pub struct Spawned {
    pub pid: i32,
    /// Its guard's listener, when it has a guard filter.
    pub listener: Option<OwnedFd>,
    /// The master side of its terminal, when it runs on one.
    pub terminal: Option<OwnedFd>,
}

/// Forks and execs one command in a session (and process group) of its own,
/// and, when one is sent, in the exec's cgroup.
/// With a guard filter, the child installs it before exec and hands over
/// its listener, which is returned with the pid. The descriptors in
/// `inherit` (close-on-exec in PID 1, above 2) stay open across the exec,
/// at the same numbers. With `forker`, the command is made in the
/// commands' pid namespace (`sandbox_init::forker`); without, here.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    streams: Streams,
    fds: Vec<OwnedFd>,
    inherit: &[RawFd],
    filters: &Filters,
    forker: Option<&Forker>,
) -> Result<Spawned, Failure> {
    let streamed = if streams.terminal.is_some() {
        0
    } else {
        2 + usize::from(streams.stdin)
    };
    let expected =
        streamed + usize::from(streams.cgroup) + usize::from(streams.cgroup && streams.cgroup_dir);
    if argv.is_empty() || fds.len() != expected {
        return Err(Failure {
            errno: libc::EINVAL,
            message: format!(
                "an exec needs argv and {expected} descriptors; got {}",
                fds.len()
            ),
        });
    }
    // Everything the child needs is allocated before fork.
    let c_argv: Vec<CString> = argv.iter().map(|a| c_string(a)).collect::<Result<_, _>>()?;
    let c_env: Vec<CString> = env
        .iter()
        .map(|(k, v)| c_string(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let c_paths: Vec<CString> = present(candidates(&argv[0], env), cwd)
        .iter()
        .map(|p| c_string(p))
        .collect::<Result<_, _>>()?;
    // The terminal comes from this sandbox's own devpts (bubblewrap's
    // `--dev`), never the host's.
    let terminal = match streams.terminal {
        Some((cols, rows)) => Some(sandbox_spawn::pty::open(cols, rows).map_err(|e| Failure {
            errno: e.raw_os_error().unwrap_or(libc::EIO),
            message: format!("opening a terminal: {e}"),
        })?),
        None => None,
    };
    let slave = terminal.as_ref().map(|(_, slave)| slave.as_raw_fd());
    let prepared = Prepared {
        argv: pointers(&c_argv),
        env: pointers(&c_env),
        paths: c_paths,
        cwd: c_string(cwd)?,
        dev_null: c_string("/dev/null")?,
        oom_score_adj: c_string("/proc/self/oom_score_adj")?,
        stdin: match slave {
            Some(slave) => Some(slave),
            None if streams.stdin => Some(fds[2].as_raw_fd()),
            None => None,
        },
        cgroup: if streams.cgroup {
            Some(fds[streamed].as_raw_fd())
        } else {
            None
        },
        cgroup_dir: (streams.cgroup && streams.cgroup_dir).then(|| fds[expected - 1].as_raw_fd()),
        stdout: slave.unwrap_or_else(|| fds[0].as_raw_fd()),
        stderr: slave.unwrap_or_else(|| fds[1].as_raw_fd()),
        controlling_terminal: slave,
        hardening: filters.hardening.as_deref(),
        guard_filter: filters.guard.as_deref(),
        umask: filters.umask,
        inherit,
    };

    // A datagram socket pair: the child sends its guard listener (if any)
    // and, on failure, `(stage, errno)`; a successful exec closes its end.
    let (report_r, report_w) = crate::forker::seqpacket_pair().map_err(|e| Failure {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: "socketpair".into(),
    })?;

    let report = report_w.as_raw_fd();
    let cgroup_dir = prepared.cgroup_dir;
    // SAFETY: only ever run as the child side of fork; never returns.
    let run_child = |joined: bool| unsafe { child(&prepared, report, joined) };
    let forked = match forker {
        // SAFETY: the child runs only `child`, which makes async-signal-safe
        // syscalls on memory prepared above and ends in exec or _exit.
        Some(forker) => unsafe { forker.fork_into(&run_child, cgroup_dir) },
        // SAFETY: as above.
        None => match unsafe { crate::forker::fork_maybe_into(cgroup_dir) } {
            Ok((0, joined)) => {
                run_child(joined);
                // SAFETY: `child` never returns; if it did, end here.
                unsafe { libc::_exit(127) }
            }
            forked => forked.map(|(pid, _)| pid),
        },
    };
    let pid = forked.map_err(|e| Failure {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        message: format!("fork: {e}"),
    })?;
    drop(report_w);
    drop(fds);
    // The command holds the slave side now; ours would keep the terminal
    // from hanging up when the command and its children are gone.
    let terminal = terminal.map(|(master, _slave)| master);
    let (listener, failure) = read_report(report_r.as_fd());
    if let Some((stage, errno)) = failure {
        let what = match stage {
            STAGE_CHDIR => format!("working directory {cwd}"),
            STAGE_GUARD => "installing the command's seccomp filters".to_owned(),
            STAGE_OOM => "raising the command's oom_score_adj".to_owned(),
            STAGE_CGROUP => "joining the exec's cgroup (which ends every process of the exec at its timeout or kill)".to_owned(),
            STAGE_TERMINAL => "making the terminal the command's controlling terminal".to_owned(),
            _ => argv[0].clone(),
        };
        let mut message = format!("{what}: {}", io::Error::from_raw_os_error(errno));
        if stage == STAGE_EXEC && errno == libc::EACCES {
            message.push_str(&exec_refusal(&candidates(&argv[0], env), cwd));
        }
        return Err(Failure { errno, message });
    }
    if filters.guard.is_some() && listener.is_none() {
        // SAFETY: plain syscall on our own child, which must not run unguarded.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        return Err(Failure {
            errno: libc::EIO,
            message: "the command did not hand over its guard listener".into(),
        });
    }
    Ok(Spawned {
        pid,
        listener,
        terminal,
    })
}

/// Why an exec the kernel refused with EACCES was refused, and what would
/// allow it (every refusal explains itself): a file without an execute bit
/// says so; an executable one was stopped by the exec rule (`noexec`
/// writable mounts, PID 1's Landlock EXECUTE rule), which grants change.
/// Read from the file the kernel refused, not predicted from the rules.
fn exec_refusal(candidates: &[String], cwd: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let found = candidates.iter().find_map(|c| {
        let path = std::path::Path::new(cwd).join(c.trim_start_matches("./"));
        let meta = std::fs::metadata(&path).ok()?;
        meta.is_file().then_some((path, meta.permissions().mode()))
    });
    match found {
        Some((path, mode)) if mode & 0o111 == 0 => format!(
            " — {} has no execute bit (chmod +x it, or run it through its interpreter)",
            path.display()
        ),
        Some((path, _)) => format!(
            " — refused by the exec rule: commands execute only from the system view and \
             exec grants, and {} is in neither. Grant its directory: `--exec-grant DIR` \
             (cc_server run), `execGrantRoots` (the spec); a tool directory of the host: \
             `[backends.bwrap] system_paths`",
            path.display()
        ),
        None => String::new(),
    }
}

fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    let mut out: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
    out.push(std::ptr::null());
    out
}

/// Reads the child's report: a listener (with the first message) and, if
/// it failed, `(stage, errno)`.
fn read_report(socket: BorrowedFd<'_>) -> (Option<OwnedFd>, Option<(u32, i32)>) {
    let (mut listener, mut failure) = (None, None);
    loop {
        let mut fds = Vec::new();
        let mut buf = [0u8; 8];
        match crate::proto::recvmsg(socket.as_raw_fd(), &mut buf, &mut fds) {
            Ok(0) | Err(_) => return (listener, failure),
            Ok(n) => {
                if let Some(fd) = fds.pop() {
                    listener = Some(fd);
                }
                if n == 8 {
                    let stage = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                    let errno = i32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
                    failure = Some((stage, errno));
                }
            }
        }
    }
}

/// What the child needs, prepared before fork.
struct Prepared<'a> {
    argv: Vec<*const libc::c_char>,
    env: Vec<*const libc::c_char>,
    paths: Vec<CString>,
    cwd: CString,
    dev_null: CString,
    oom_score_adj: CString,
    stdin: Option<RawFd>,
    /// The exec's `cgroup.procs`, open for writing.
    cgroup: Option<RawFd>,
    /// The exec's cgroup directory (`O_PATH`).
    cgroup_dir: Option<RawFd>,
    stdout: RawFd,
    stderr: RawFd,
    /// A terminal's slave side, to become the controlling terminal.
    controlling_terminal: Option<RawFd>,
    hardening: Option<&'a [seccomp::SockFilter]>,
    guard_filter: Option<&'a [seccomp::SockFilter]>,
    umask: libc::mode_t,
    inherit: &'a [RawFd],
}

/// The child between fork and exec; `joined` when it was made in the
/// exec's cgroup already.
///
/// # Safety
/// Call only in the child of `fork` or of the fork thread's spawn, which
/// shares PID 1's memory until the exec (`sandbox_spawn`): it writes
/// nothing but its stack (and `errno`); `p` was prepared before.
unsafe fn child(p: &Prepared<'_>, report: RawFd, joined: bool) -> ! {
    // SAFETY: async-signal-safe syscalls on descriptors and memory prepared before fork.
    unsafe {
        // First: everything this process does and starts is in the exec's
        // group. The kernel checks the rights of the descriptor's opener
        // (the server), not ours.
        // The group's descriptors are close-on-exec (as everything PID 1
        // receives): the exec closes them.
        if let Some(fd) = p.cgroup
            && !joined
            && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
        {
            fail(report, STAGE_CGROUP);
        }
        // An ignored signal stays ignored across exec, and PID 1 ignores
        // SIGPIPE (the Rust runtime does): a command starts with every
        // disposition at its default, as under a shell — otherwise `yes |
        // head` ends `yes` with a "Broken pipe" error instead of quietly,
        // and a SIGPIPE sent for a closed `run` stdout is lost. Before the
        // unblock below.
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::umask(p.umask);
        libc::setsid();
        // In its new session, before the filters.
        if let Some(slave) = p.controlling_terminal
            && sandbox_spawn::pty::make_controlling(slave).is_err()
        {
            fail(report, STAGE_TERMINAL);
        }
        // Before the filters: the guard would judge this open otherwise.
        // EACCES only where the sandbox's root is not mapped (an
        // unprivileged server): PID 1 is not dumpable, so its child's
        // /proc entry belongs to an unmapped root until exec. Then the
        // score stays 0 — a command that grows is still the likelier
        // victim; any other failure stops the command.
        let adj = libc::open(p.oom_score_adj.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        let len = COMMAND_OOM_SCORE_ADJ.len();
        if adj < 0 {
            if *libc::__errno_location() != libc::EACCES {
                fail(report, STAGE_OOM);
            }
        } else {
            if libc::write(adj, COMMAND_OOM_SCORE_ADJ.as_ptr().cast(), len) != len as isize {
                fail(report, STAGE_OOM);
            }
            libc::close(adj);
        }
        // Before the filters: the guard's sends `chdir` to the supervisor (a
        // barrier, guard::bases), whose thread for this exec starts only
        // once the exec below has been reported — a chdir after the filter
        // would wait for it forever.
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            fail(report, STAGE_CHDIR);
        }
        if let Some(filter) = p.hardening
            && seccomp::install(filter).is_err()
        {
            fail(report, STAGE_GUARD);
        }
        if let Some(filter) = p.guard_filter {
            match seccomp::install_listener(filter) {
                Ok(listener) => {
                    // `fdpass::send` allocates nothing and takes no lock.
                    let _ = sandbox_fdpass::send(report, b"L", &[listener.as_raw_fd()]);
                    // The command must never hold its own listener.
                    drop(listener);
                }
                Err(_) => fail(report, STAGE_GUARD),
            }
        }
        let input = match p.stdin {
            Some(fd) => fd,
            None => libc::open(p.dev_null.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC),
        };
        libc::dup2(input, 0);
        libc::dup2(p.stdout, 1);
        libc::dup2(p.stderr, 2);
        for &fd in p.inherit {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
        let mut denied = false;
        let mut last = libc::ENOENT;
        for path in &p.paths {
            libc::execve(path.as_ptr(), p.argv.as_ptr(), p.env.as_ptr());
            last = *libc::__errno_location();
            match last {
                libc::ENOENT | libc::ENOTDIR => {}
                libc::EACCES => denied = true,
                _ => break,
            }
        }
        // Set, not left: with no candidate there at all nothing was tried,
        // and the answer is still "not found".
        *libc::__errno_location() = if denied && matches!(last, libc::ENOENT | libc::ENOTDIR) {
            libc::EACCES
        } else {
            last
        };
        fail(report, STAGE_EXEC)
    }
}

/// Sends `(stage, errno)` to the parent and exits.
///
/// # Safety
/// Call only in the forked child.
unsafe fn fail(report: RawFd, stage: u32) -> ! {
    // SAFETY: reads errno, sends a local buffer over our own socket, exits.
    unsafe {
        let errno = *libc::__errno_location();
        let mut answer = [0u8; 8];
        answer[..4].copy_from_slice(&stage.to_le_bytes());
        answer[4..].copy_from_slice(&errno.to_le_bytes());
        libc::send(
            report,
            answer.as_ptr().cast(),
            answer.len(),
            libc::MSG_NOSIGNAL,
        );
        libc::_exit(if stage == STAGE_CHDIR { 126 } else { 127 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(path: Option<&str>) -> Vec<(String, String)> {
        path.map(|p| vec![("PATH".to_owned(), p.to_owned())])
            .unwrap_or_default()
    }

    #[test]
    fn candidates_that_are_not_there_are_not_tried() {
        let dir = std::env::temp_dir().join(format!("spawn-present-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        std::fs::write(dir.join("bin/tool"), "").unwrap();
        std::fs::write(dir.join("file"), "").unwrap();
        let cwd = dir.to_str().unwrap();
        let all = candidates("tool", &env(Some("/nonexistent:bin:file:/usr/bin")));
        assert_eq!(
            present(all, cwd),
            vec!["bin/tool".to_owned()],
            "missing, found, under a file, missing"
        );
        assert!(present(vec!["/nonexistent/x".into()], cwd).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_program_with_a_slash_is_its_own_only_candidate() {
        assert_eq!(
            candidates("./a.out", &env(Some("/usr/bin"))),
            vec!["./a.out".to_owned()]
        );
        assert_eq!(candidates("/bin/sh", &[]), vec!["/bin/sh".to_owned()]);
    }

    #[test]
    fn a_bare_name_is_looked_up_in_the_commands_own_path() {
        assert_eq!(
            candidates("make", &env(Some("/opt/bin/::/usr/bin"))),
            vec![
                "/opt/bin/make".to_owned(),
                "./make".to_owned(),
                "/usr/bin/make".to_owned()
            ]
        );
        assert_eq!(
            candidates("ls", &[]),
            vec![
                "/usr/local/bin/ls".to_owned(),
                "/usr/bin/ls".to_owned(),
                "/bin/ls".to_owned()
            ]
        );
    }

    #[test]
    fn a_nul_byte_is_refused_before_any_fork() {
        let e = c_string("a\0b").err().map(|f| (f.errno, f.message));
        assert_eq!(
            e,
            Some((libc::EINVAL, "\"a\\0b\" contains a NUL byte".to_owned()))
        );
    }
}
