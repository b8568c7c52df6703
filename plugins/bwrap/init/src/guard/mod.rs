//! The create-time guard (SPEC G1): a seccomp user-notification supervisor
//! in PID 1 that does every name-creating and write-opening syscall of the
//! sandboxed commands itself, after checking the name against the dispatch
//! policy's globs — so a new `.env`, `*.pem`, `*.key`, shell rc file or git
//! hook cannot be made, by any route, and there is no window between the
//! check and the act. A refused call gets EACCES and an exact violation.
//!
//! Each exec's command installs the notify filter before it execs and hands
//! the listener to PID 1, which serves it on a thread of its own until the
//! last process of the exec is gone. If PID 1 dies, every notified call
//! fails (the kernel answers ENOSYS): nothing can be created — fail closed.

pub mod bases;
pub mod emulate;
pub mod later;
pub mod notify;
pub mod pending;
pub mod sock_diag;
pub mod timing;
pub mod tracee;
pub mod view;

use self::emulate::{Answer, AsCommand, Denial};
use self::notify::Listener;
use sandbox_paths::write_rules::Rules;

/// Serves one listener until no process uses it. `report` gets every
/// refusal (before the refused call returns); `as_command` opens what the
/// supervisor must not open with its own credentials (see `emulate`).
///
/// `umask` is the umask the exec's command started with.
pub fn serve(
    listener: &Listener,
    rules: &Rules,
    umask: u32,
    as_command: &dyn AsCommand,
    report: &dyn Fn(&Denial, u32),
) {
    listener.sync_wake_up();
    // Parents' paths by `fchdir` + `getcwd` (tracee::dir_path): this
    // thread's working directory must be its own for that.
    tracee::own_working_directory();
    let mut memo = emulate::Memo::new(umask);
    let mut storms = Storms::default();
    let workers = later::Workers::default();
    loop {
        let began = timing::begin();
        let Ok(true) = listener.wait() else {
            break;
        };
        timing::end("wait (idle)", began);
        let began = timing::begin();
        let Ok(notification) = listener.recv() else {
            continue;
        };
        timing::end("recv", began);
        let id = notification.id;
        let began = timing::begin();
        let outcome = emulate::handle(rules, as_command, &mut memo, &notification.call, &|| {
            let began = timing::begin();
            let valid = listener.id_valid(id);
            timing::end("id_valid", began);
            valid
        });
        timing::end(timing::label(notification.call.nr), began);
        let began = timing::begin();
        if let Some(denial) = &outcome.denial
            && storms.first_in_a_while(denial)
        {
            report(denial, notification.call.tid);
        }
        let answered = match &outcome.answer {
            Answer::Fd { .. } => "answer: fd",
            Answer::Continue => "answer: continue",
            Answer::Later(_) => "answer: later",
            Answer::Value(_) | Answer::Error(_) => "answer: value",
        };
        let _ = match outcome.answer {
            // In two steps, never `ADDFD_FLAG_SEND`: the kernel's one-step
            // answer wakes the caller without the same-CPU hand-off the
            // listener asked for, and an open so answered took several times as
            // long as in two steps on a 2-vCPU host (a notify loop outside any
            // sandbox, docs/measurements.md); and the kernel keeps its own
            // reference to the file until we wake from the injection, which a
            // tracee already running could meet as ETXTBSY on a file it made
            // executable and runs at once.
            Answer::Fd { fd, cloexec } => {
                match listener.add_fd(
                    id,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    cloexec,
                    notification.call.tid,
                ) {
                    Ok(remote) => {
                        // Our copy goes before the answer (see `Listener::add_fd`).
                        let closing = timing::begin();
                        drop(fd);
                        timing::end("fd: close", closing);
                        let answering = timing::begin();
                        let sent = listener.respond(id, i64::from(remote), 0);
                        timing::end("fd: answer", answering);
                        sent
                    }
                    Err(e) => listener.respond(id, 0, e.raw_os_error().unwrap_or(libc::EMFILE)),
                }
            }
            Answer::Continue => listener.continue_call(id),
            Answer::Later(work) => answer_later(listener, &workers, id, work),
            Answer::Value(value) => listener.respond(id, value, 0),
            Answer::Error(errno) => listener.respond(id, 0, errno),
        };
        timing::end(answered, began);
    }
    timing::report();
}

/// Makes a deferred call on a worker, which answers it. When no worker can
/// be had, the call fails (EAGAIN) rather than blocking the rest.
fn answer_later(
    listener: &Listener,
    workers: &later::Workers,
    id: u64,
    work: emulate::Deferred,
) -> std::io::Result<()> {
    let responder = match listener.responder() {
        Ok(responder) => responder,
        Err(e) => return listener.respond(id, 0, e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    if workers.run(id, work, responder) {
        Ok(())
    } else {
        listener.respond(id, 0, libc::EAGAIN)
    }
}

/// The `raw` text of a violation: who, and which call.
pub fn describe(denial: &Denial, tid: u32) -> String {
    format!(
        "seccomp-unotify pid={tid} comm={} syscall={} rule={} -> EACCES",
        tracee::comm(tid),
        denial.syscall,
        denial.rule
    )
}

/// Storm control: the same refusal (action and path) is reported once per
/// second per exec; a loop hammering one name does not flood the stream.
#[derive(Default)]
struct Storms {
    last: std::collections::HashMap<(&'static str, std::path::PathBuf), std::time::Instant>,
}

impl Storms {
    const WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

    fn first_in_a_while(&mut self, denial: &Denial) -> bool {
        let now = std::time::Instant::now();
        if self.last.len() > 4096 {
            self.last
                .retain(|_, seen| now.duration_since(*seen) < Self::WINDOW);
        }
        match self.last.get(&(denial.action, denial.target.clone())) {
            Some(seen) if now.duration_since(*seen) < Self::WINDOW => false,
            _ => {
                self.last
                    .insert((denial.action, denial.target.clone()), now);
                true
            }
        }
    }
}
