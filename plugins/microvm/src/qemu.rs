//! Finding the VMM: `qemu-system-x86_64` in `PATH`, its version, whether
//! it has the `microvm` machine, which accelerators it was built with
//! (docs/research/microvm.md §4.1, §4.2 step 1).
//!
//! The parsers are pure; [`run_bounded`] runs QEMU with a deadline and kills
//! it past that, so a wedged binary cannot hold up the server's start.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The binary the engine will drive.
pub const BINARY: &str = "qemu-system-x86_64";

/// What to install when it is missing.
pub const INSTALL_HINT: &str = "install the Debian package qemu-system-x86";

/// The machine type the engine boots.
pub const MACHINE: &str = "microvm";

/// How long all three queries together may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The most output read from one query.
const OUTPUT_LIMIT: usize = 1 << 20;

/// A QEMU that answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Qemu {
    /// Where it was found.
    pub path: PathBuf,
    /// The version line without its prefix, e.g. `7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)`.
    pub version: String,
    /// Machine types from `-machine help`.
    pub machines: Vec<String>,
    /// Accelerators from `-accel help`.
    pub accels: Vec<String>,
}

impl Qemu {
    /// Whether it can boot `-M microvm`.
    pub fn has_microvm(&self) -> bool {
        self.machines.iter().any(|m| m == MACHINE)
    }

    /// Whether it was built with an accelerator (`kvm`, `tcg`).
    pub fn offers(&self, accel: &str) -> bool {
        self.accels.iter().any(|a| a == accel)
    }
}

/// What looking for QEMU found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Finding {
    /// Not in `PATH`.
    Missing,
    /// Found, but it did not answer as QEMU does.
    Unusable {
        /// Where.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Found and answered.
    Found(Qemu),
}

/// Why a QEMU run gave no answer. `command` is the command line, quoted.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{command} could not be started")]
    Start {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: no pipes")]
    NoPipes { command: String },
    #[error("{command}: poll failed")]
    Poll {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command}: waiting failed")]
    Wait {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{command} did not finish in time ({} s for all queries) and was killed",
        QUERY_TIMEOUT.as_secs()
    )]
    TimedOut { command: String },
    /// It exited non-zero; `stderr` is the first line it wrote there.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    /// Off unix there is no QEMU probing yet.
    #[error("{} cannot be queried on this platform yet", .program.display())]
    Unsupported { program: PathBuf },
}

/// Why QEMU did not answer as QEMU does.
#[derive(Debug, thiserror::Error)]
enum QueryError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("a QEMU query panicked")]
    Panicked,
    #[error("`--version` did not print a QEMU version line: {line:?}")]
    NoVersion { line: String },
}

/// The first executable `name` in a `PATH` value.
pub fn find_in_path(
    path_var: &OsStr,
    name: &str,
    is_executable: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    std::env::split_paths(path_var)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// The version from `--version`: the first line's text after
/// `QEMU emulator version `.
pub fn parse_version(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("QEMU emulator version "))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// The names from `-machine help`: the first word of every line under
/// `Supported machines are:` (aliases are lines of their own).
pub fn parse_machines(stdout: &str) -> Vec<String> {
    names_after_header(stdout, "Supported machines are:")
}

/// The names from `-accel help`: one per line under
/// `Accelerators supported in QEMU binary:`.
pub fn parse_accels(stdout: &str) -> Vec<String> {
    names_after_header(stdout, "Accelerators supported in QEMU binary:")
}

fn names_after_header(stdout: &str, header: &str) -> Vec<String> {
    stdout
        .lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The QEMU this process's `PATH` leads to.
pub fn locate() -> Option<PathBuf> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    find_in_path(&path_var, BINARY, &is_executable_file)
}

/// Asks the QEMU at `path` (from [`locate`]) about itself.
pub fn probe(path: Option<PathBuf>) -> Finding {
    let Some(path) = path else {
        return Finding::Missing;
    };
    let deadline = Instant::now() + QUERY_TIMEOUT;
    match query(&path, deadline) {
        Ok(qemu) => Finding::Found(qemu),
        Err(e) => Finding::Unusable {
            path,
            reason: sandbox_plugin_api::error_chain(&e),
        },
    }
}

/// The three questions run at once: each is a QEMU start (tens of
/// milliseconds), and the probe is on every server start's path.
fn query(path: &Path, deadline: Instant) -> Result<Qemu, QueryError> {
    let (version_out, machines_out, accels_out) = std::thread::scope(|scope| {
        let machines = scope.spawn(|| run_bounded(path, &["-machine", "help"], deadline));
        let accels = scope.spawn(|| run_bounded(path, &["-accel", "help"], deadline));
        let version = run_bounded(path, &["--version"], deadline);
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<String, RunError>>| {
            h.join()
                .map_err(|_| QueryError::Panicked)
                .and_then(|out| Ok(out?))
        };
        (version, joined(machines), joined(accels))
    });
    let version_out = version_out?;
    let version = parse_version(&version_out).ok_or_else(|| QueryError::NoVersion {
        line: first_line(&version_out).to_owned(),
    })?;
    let machines = parse_machines(&machines_out?);
    let accels = parse_accels(&accels_out?);
    Ok(Qemu {
        path: path.to_owned(),
        version,
        machines,
        accels,
    })
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

#[cfg(unix)]
fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable_file(path: &Path) -> bool {
    path.is_file()
}

/// Runs `program args…` with stdin empty and returns its stdout if it exits
/// 0 before `deadline`; kills it (SIGKILL) and says so if it does not.
#[cfg(unix)]
pub fn run_bounded(program: &Path, args: &[&str], deadline: Instant) -> Result<String, RunError> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::process::{Command, Stdio};

    let command = format!("`{} {}`", program.display(), args.join(" "));
    let mut child = match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(source) => return Err(RunError::Start { command, source }),
    };
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(RunError::NoPipes { command });
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (mut out_open, mut err_open) = (true, true);
    let mut timed_out = false;
    while out_open || err_open {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        let mut fds = [
            libc::pollfd {
                fd: if out_open { stdout.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if err_open { stderr.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a live array of two pollfds; negative fds are ignored.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if ready < 0 {
            let source = std::io::Error::last_os_error();
            if source.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::Poll { command, source });
        }
        let mut buf = [0u8; 8192];
        if out_open && fds[0].revents != 0 {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) if out.len() < OUTPUT_LIMIT => out.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            }
        }
        if err_open && fds[1].revents != 0 {
            match stderr.read(&mut buf) {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) if err.len() < OUTPUT_LIMIT => err.extend_from_slice(&buf[..n]),
                Ok(_) => {}
            }
        }
    }
    let status = loop {
        if timed_out {
            break None;
        }
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => timed_out = true,
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Wait { command, source });
            }
        }
    };
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(RunError::TimedOut { command });
    };
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        return Err(RunError::Failed {
            command,
            status,
            stderr: first_line(err.trim()).to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Off unix there is no QEMU probing yet.
#[cfg(not(unix))]
pub fn run_bounded(program: &Path, _args: &[&str], _deadline: Instant) -> Result<String, RunError> {
    Err(RunError::Unsupported {
        program: program.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from QEMU 7.2 (Debian 12), shortened.
    const MACHINE_HELP: &str = "Supported machines are:
microvm              microvm (i386)
pc                   Standard PC (i440FX + PIIX, 1996) (alias of pc-i440fx-7.2)
pc-i440fx-7.2        Standard PC (i440FX + PIIX, 1996) (default)
q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-7.2)
pc-q35-7.2           Standard PC (Q35 + ICH9, 2009)
isapc                ISA-only PC
none                 empty machine
x-remote             Experimental remote machine
";
    const ACCEL_HELP: &str = "Accelerators supported in QEMU binary:
tcg
kvm
";
    const VERSION: &str = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)
Copyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers
";

    #[test]
    fn the_version_line_is_parsed() {
        assert_eq!(
            parse_version(VERSION).as_deref(),
            Some("7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)")
        );
        assert_eq!(parse_version("qemu-img version 7.2\n"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn machines_and_accelerators_are_listed() {
        let machines = parse_machines(MACHINE_HELP);
        assert_eq!(machines.len(), 8);
        assert_eq!(machines[0], "microvm");
        assert!(machines.contains(&"q35".to_owned()));
        assert_eq!(parse_accels(ACCEL_HELP), ["tcg", "kvm"]);
        // Text before the header is not a name.
        assert_eq!(
            parse_accels("warning: x\nAccelerators supported in QEMU binary:\ntcg\n"),
            ["tcg"]
        );
        assert!(parse_machines("qemu: unknown option\n").is_empty());
        let qemu = Qemu {
            path: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            version: "7.2.22".to_owned(),
            machines,
            accels: parse_accels(ACCEL_HELP),
        };
        assert!(qemu.has_microvm() && qemu.offers("kvm") && qemu.offers("tcg"));
        assert!(!qemu.offers("hvf"));
        let old = Qemu {
            machines: parse_machines("Supported machines are:\npc  Standard PC\n"),
            ..qemu
        };
        assert!(!old.has_microvm());
    }

    #[test]
    fn path_lookup_takes_the_first_executable_and_skips_relative_dirs() {
        let path = OsStr::new("relative:/a:/b:/c");
        let found = find_in_path(path, BINARY, &|p| {
            p == Path::new("/b/qemu-system-x86_64") || p == Path::new("/c/qemu-system-x86_64")
        });
        assert_eq!(found, Some(PathBuf::from("/b/qemu-system-x86_64")));
        assert_eq!(
            find_in_path(path, BINARY, &|p| p.starts_with("relative")),
            None
        );
        assert_eq!(find_in_path(OsStr::new(""), BINARY, &|_| true), None);
    }

    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("fake-qemu");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_fake_qemu_is_queried_through_the_real_process_path() {
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "case \"$1\" in --version) printf '%s' '{VERSION}';; -machine) printf '%s' '{MACHINE_HELP}';; -accel) printf '%s' '{ACCEL_HELP}';; esac"
        );
        let path = script(dir.path(), &body);
        let qemu = query(&path, Instant::now() + QUERY_TIMEOUT).unwrap();
        assert_eq!(qemu.version, "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)");
        assert!(qemu.has_microvm() && qemu.offers("kvm"));
    }

    #[test]
    fn a_failing_or_hanging_child_is_reported_and_a_hanging_one_killed() {
        let dir = tempfile::tempdir().unwrap();
        let failing = script(dir.path(), "echo 'cannot load libfoo.so' >&2; exit 1");
        let e = run_bounded(&failing, &["--version"], Instant::now() + QUERY_TIMEOUT)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failed") && e.contains("cannot load libfoo.so"),
            "{e}"
        );

        let hanging = script(dir.path(), "exec sleep 30");
        let started = Instant::now();
        let e = run_bounded(&hanging, &[], Instant::now() + Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not finish") && e.contains("killed"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));

        let e = run_bounded(
            &dir.path().join("absent"),
            &[],
            Instant::now() + QUERY_TIMEOUT,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("could not be started"), "{e}");
    }
}
