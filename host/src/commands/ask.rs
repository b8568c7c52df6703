//! The person at `cc_server`'s terminal as an [`Approver`]
//! (`cc_server run --ask`; SPEC H4, threat model T26).
//!
//! The question is written to, and the answer read from, `/dev/tty` opened
//! by `cc_server` itself (`O_RDWR | O_NOCTTY | O_CLOEXEC`) — never the
//! command's stdin, which is the command's, and may be a file or an agent's
//! pipe. The descriptor exists only while the question is open: it is
//! opened after the sandbox started and closed before the command does, and
//! close-on-exec besides, so no sandboxed process ever holds it. Input typed
//! before the question was shown is thrown away (`tcflush`), so type-ahead
//! cannot answer it; control characters and bidirectional overrides in the
//! command line are shown escaped, so the line cannot repaint the question.
//! `y` (or `yes`) and Enter allow this one command; anything else, ^C (or
//! SIGTERM, SIGHUP), the terminal going away, or no answer within
//! `[policy] approval_timeout_secs` deny. With no terminal the answer is
//! deny at once, saying so.
//!
//! In bwrap the command runs in a session of its own (`--new-session`), so
//! it cannot open `/dev/tty` either; under `none`, which is no boundary, it
//! shares `cc_server`'s terminal like any program started from it.
//!
//! Opt-in, because whoever owns the terminal answers: agent harnesses often
//! run commands in a terminal they drive, where the agent itself could type
//! `y`.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use sandbox_runtime::command_policy::Approver;
use sandbox_runtime::command_policy::approvals::Question;

/// The controlling terminal of this process, whatever its stdio are.
pub const DEVICE: &str = "/dev/tty";

/// Asks on a terminal.
pub struct Terminal {
    device: PathBuf,
    timeout: Duration,
}

impl Terminal {
    /// Asks on `/dev/tty`; unanswered after `timeout`, the answer is deny.
    pub fn new(timeout: Duration) -> Self {
        Self {
            device: PathBuf::from(DEVICE),
            timeout,
        }
    }
}

/// Why the terminal's answer is deny; the text the refusal shows (sources
/// included, [`sandbox_plugin_api::error_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum Denial {
    #[error(
        "no terminal to ask on ({}): `--ask` needs cc_server to run at a terminal, so the answer is deny",
        device.display()
    )]
    NoTerminal {
        device: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("denied at the terminal")]
    Denied,
    #[error(
        "no answer at the terminal within {secs} s ([policy] approval_timeout_secs), so the answer is deny"
    )]
    TimedOut { secs: f64 },
    #[error("the terminal closed before an answer, so the answer is deny")]
    Closed,
    #[error("interrupted at the terminal prompt ({0}), so the answer is deny")]
    Interrupted(&'static str),
    #[error("the terminal prompt was abandoned, so the answer is deny")]
    Abandoned,
    #[error("cannot wait for the terminal's answer, so the answer is deny")]
    Waiting(#[source] std::io::Error),
    #[error("the terminal prompt failed, so the answer is deny")]
    Join(#[source] tokio::task::JoinError),
}

impl Approver for Terminal {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.ask_person(question)
                .await
                .map_err(|denial| sandbox_plugin_api::error_chain(&denial))
        })
    }
}

impl Terminal {
    async fn ask_person(&self, question: &Question) -> Result<(), Denial> {
        let text = plan_question(question, self.timeout);
        // Dropping `wake` (this future dropped, or a signal below) ends the
        // read at once instead of leaving a thread on the terminal.
        let (wake, woken) = UnixStream::pair().map_err(Denial::Waiting)?;
        let device = self.device.clone();
        let timeout = self.timeout;
        // Listening before the question is shown: a ^C typed the moment it
        // appears must not arrive before anyone listens (it would be lost,
        // and the question would wait out its timeout).
        let signals = Interruptions::listen();
        let reading = tokio::task::spawn_blocking(move || ask_on(&device, &text, timeout, &woken));
        let answer = tokio::select! {
            answer = reading => answer.map_err(Denial::Join)?,
            signal = signals.first() => Err(Denial::Interrupted(signal)),
        };
        drop(wake);
        answer
    }
}

/// SIGINT (^C), SIGTERM and SIGHUP, listened for: the first of them ends
/// the question as a deny rather than waiting out the timeout (the run's
/// own handlers, which pass them on to a running command, see them too,
/// and there is no command to pass them to).
struct Interruptions(
    Option<(
        tokio::signal::unix::Signal,
        tokio::signal::unix::Signal,
        tokio::signal::unix::Signal,
    )>,
);

impl Interruptions {
    fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) {
            (Ok(int), Ok(term), Ok(hup)) => Self(Some((int, term, hup))),
            // Not catchable: only the answer or the timeout end the question.
            _ => Self(None),
        }
    }

    async fn first(self) -> &'static str {
        let Some((mut int, mut term, mut hup)) = self.0 else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => "SIGINT, ^C",
            _ = term.recv() => "SIGTERM",
            _ = hup.recv() => "SIGHUP",
        }
    }
}

/// The question as the terminal shows it: the classes that ask, the command
/// line, the rule, and how to answer.
pub fn plan_question(question: &Question, timeout: Duration) -> String {
    let mut text = format!(
        "\ncc_server: the command policy asks before this command runs (mode {})\n",
        question.mode
    );
    for asking in &question.asking {
        let _ = writeln!(text, "  class:   {}", escaped(asking));
    }
    let _ = writeln!(text, "  command: {}", escaped(&question.command));
    let _ = writeln!(text, "  rule:    {}", escaped(&question.rule));
    let _ = write!(
        text,
        "cc_server: allow this one command? [y/N] (no answer in {} s denies) ",
        timeout.as_secs_f64().ceil()
    );
    text
}

/// Whether a typed line allows: `y` or `yes`, any case, spaces around.
pub fn allows(line: &[u8]) -> bool {
    let line = String::from_utf8_lossy(line);
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// `text` with every control character and every invisible or
/// direction-changing character written as an escape (`\u{1b}`), so what the
/// terminal shows is what will run.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let invisible = matches!(c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || invisible {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Longest answer line read; more is not an answer anyone typed.
const MAX_ANSWER: usize = 256;

/// Opens the terminal, asks, reads one line until `timeout`; `woken`
/// becoming readable (its peer dropped) gives up.
fn ask_on(device: &Path, text: &str, timeout: Duration, woken: &UnixStream) -> Result<(), Denial> {
    let mut tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(device)
        .map_err(|error| Denial::NoTerminal {
            device: device.to_path_buf(),
            error,
        })?;
    // SAFETY: tcflush on a descriptor we own; it only discards queued input.
    unsafe { libc::tcflush(tty.as_raw_fd(), libc::TCIFLUSH) };
    let _ = tty.write_all(text.as_bytes()).and_then(|()| tty.flush());
    let (closing, answer) = match read_line(&mut tty, timeout, woken) {
        Ok(line) if allows(&line) => ("cc_server: allowed, this once\n", Ok(())),
        Ok(_) => ("cc_server: denied\n", Err(Denial::Denied)),
        Err(Wait::TimedOut) => (
            "\ncc_server: no answer in time: denied\n",
            Err(Denial::TimedOut {
                secs: timeout.as_secs_f64(),
            }),
        ),
        Err(Wait::Closed) => ("", Err(Denial::Closed)),
        Err(Wait::Gone) => ("", Err(Denial::Abandoned)),
    };
    let _ = tty.write_all(closing.as_bytes());
    answer
}

/// Why no line came.
enum Wait {
    TimedOut,
    /// End of file or an error on the terminal (it hung up).
    Closed,
    /// The asker went away.
    Gone,
}

fn read_line(tty: &mut File, timeout: Duration, woken: &UnixStream) -> Result<Vec<u8>, Wait> {
    let deadline = Instant::now() + timeout;
    let mut line = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Wait::TimedOut);
        }
        let mut fds = [
            libc::pollfd {
                fd: tty.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: woken.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Wait::Closed);
        }
        if fds[1].revents != 0 {
            return Err(Wait::Gone);
        }
        if fds[0].revents == 0 {
            continue;
        }
        match tty.read(&mut buf) {
            Ok(0) => return Err(Wait::Closed),
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if let Some(end) = line.iter().position(|b| *b == b'\n' || *b == b'\r') {
                    line.truncate(end);
                    return Ok(line);
                }
                if line.len() > MAX_ANSWER {
                    return Ok(line);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Err(Wait::Closed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> Question {
        Question {
            session_id: "s".into(),
            command: "pip install demo".into(),
            mode: "chat".into(),
            rule: "chat: install a package asks first (pip install demo)".into(),
            reasons: vec![],
            asking: vec!["install a package: pip install demo".into()],
        }
    }

    #[test]
    fn the_question_names_the_class_the_command_and_the_rule() {
        let text = plan_question(&question(), Duration::from_secs(300));
        assert!(
            text.contains("class:   install a package: pip install demo"),
            "{text}"
        );
        assert!(text.contains("command: pip install demo"), "{text}");
        assert!(
            text.contains("rule:    chat: install a package asks first"),
            "{text}"
        );
        assert!(text.contains("[y/N] (no answer in 300 s denies)"), "{text}");
    }

    #[test]
    fn a_command_line_cannot_repaint_the_question() {
        let mut q = question();
        q.command = "rm -rf ~\r\x1b[2Kcargo build \u{202e}dliub".into();
        let text = plan_question(&q, Duration::from_secs(1));
        assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
        assert!(!text.contains('\u{202e}'), "{text:?}");
        assert!(
            text.contains("rm -rf ~\\u{d}\\u{1b}[2Kcargo build \\u{202e}dliub"),
            "{text}"
        );
    }

    #[test]
    fn only_y_allows() {
        for yes in [&b"y"[..], b"Y", b" yes ", b"YES"] {
            assert!(allows(yes), "{yes:?}");
        }
        for no in [&b""[..], b"n", b"no", b"yy", b"y es", b"ok", b"\x03"] {
            assert!(!allows(no), "{no:?}");
        }
    }

    /// A pseudo-terminal: the master (the person's side), the slave (held
    /// open, so the master never reads EIO before `ask_on` opens it) and the
    /// slave's path.
    fn pty() -> (File, File, PathBuf) {
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
        let path = std::fs::read_link(format!("/proc/self/fd/{slave}")).unwrap();
        use std::os::fd::FromRawFd as _;
        // SAFETY: `master` and `slave` are open descriptors nothing else owns.
        let (master, slave) = unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) };
        (master, slave, path)
    }

    /// Answers `typed` on `master` once the question is shown; returns what
    /// the terminal showed, and the master (closing it early would hang up
    /// the terminal before the answer is read).
    fn answer(mut master: File, typed: &'static [u8]) -> std::thread::JoinHandle<(String, File)> {
        std::thread::spawn(move || {
            let mut shown = Vec::new();
            let mut buf = [0u8; 1024];
            while !String::from_utf8_lossy(&shown).contains("[y/N]") {
                let n = master.read(&mut buf).unwrap();
                shown.extend_from_slice(&buf[..n]);
            }
            master.write_all(typed).unwrap();
            (String::from_utf8_lossy(&shown).into_owned(), master)
        })
    }

    fn ask_pty(typed: &'static [u8], timeout: Duration) -> (Result<(), String>, String) {
        let (master, _slave, path) = pty();
        let person = answer(master, typed);
        let (_wake, woken) = UnixStream::pair().unwrap();
        let text = plan_question(&question(), timeout);
        let answer = ask_on(&path, &text, timeout, &woken).map_err(|d| d.to_string());
        (answer, person.join().unwrap().0)
    }

    #[test]
    fn y_on_the_terminal_allows_and_anything_else_denies() {
        let (answer, shown) = ask_pty(b"y\n", Duration::from_secs(3600));
        assert_eq!(answer, Ok(()));
        assert!(shown.contains("command: pip install demo"), "{shown}");
        let (answer, _) = ask_pty(b"sure\n", Duration::from_secs(3600));
        assert_eq!(answer.unwrap_err(), "denied at the terminal");
    }

    /// A `y` already waiting on the terminal (typed ahead, or pushed there
    /// before the question was shown) is thrown away, not taken for the
    /// answer.
    #[test]
    fn type_ahead_is_not_an_answer() {
        let (mut master, slave, path) = pty();
        master.write_all(b"y\n").unwrap();
        // Wait until the line is readable on the terminal, so it is there
        // before the question.
        let mut fd = libc::pollfd {
            fd: slave.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        assert_eq!(unsafe { libc::poll(&mut fd, 1, 10_000) }, 1);
        let person = answer(master, b"n\n");
        let (_wake, woken) = UnixStream::pair().unwrap();
        let text = plan_question(&question(), Duration::from_secs(3600));
        let answer = ask_on(&path, &text, Duration::from_secs(3600), &woken);
        assert!(matches!(answer, Err(Denial::Denied)), "{answer:?}");
        drop(person.join().unwrap());
        drop(slave);
    }

    #[test]
    fn no_answer_in_time_is_a_deny_naming_the_setting() {
        let (answer, _) = ask_pty(b"", Duration::from_millis(200));
        let err = answer.unwrap_err();
        assert!(err.contains("approval_timeout_secs"), "{err}");
    }

    #[test]
    fn the_asker_leaving_ends_the_read() {
        let (_master, _slave, path) = pty();
        let (wake, woken) = UnixStream::pair().unwrap();
        drop(wake);
        let err = ask_on(&path, "?", Duration::from_secs(3600), &woken).unwrap_err();
        assert!(matches!(err, Denial::Abandoned), "{err}");
    }

    #[tokio::test]
    async fn with_no_terminal_the_answer_is_deny_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let terminal = Terminal {
            device: dir.path().join("no-such-tty"),
            timeout: Duration::from_secs(3600),
        };
        let err = terminal.ask(&question()).await.unwrap_err();
        assert!(err.contains("no terminal to ask on"), "{err}");
        assert!(err.contains("--ask"), "{err}");
        assert!(err.contains("No such file"), "the source is shown: {err}");
    }
}
