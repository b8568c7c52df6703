//! Where each thread's paths start — its working directory and its root — kept
//! between guarded calls, so that a call need not open `/proc/<tid>/cwd` or
//! `/proc/<tid>/root` again: that was the larger part of what resolving a
//! parent cost, and a `git` workflow resolves thousands (docs/measurements.md).
//!
//! An entry is used only while it is still true:
//! - it names its thread by a pidfd: a thread id reused by a new thread is
//!   another thread, and the old entry is dropped;
//! - a working directory changes only by `chdir`/`fchdir`, which the guard
//!   filter sends here as barriers ([`moving`]): every kept working
//!   directory is forgotten, and while such a call may still be under way
//!   none is kept — a thread sharing the mover's working directory
//!   (`CLONE_FS`) could otherwise keep the old one;
//! - a root never changes: `chroot`, `pivot_root`, `setns` and new mount
//!   namespaces are refused to every command (the hardening filter).
//!
//! Per supervisor thread, as the `/proc` directories of [`super::tracee`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::rc::Rc;

use super::tracee;

/// How many threads' bases a supervisor thread keeps (then it starts over):
/// three descriptors each, beside the 128 `/proc` directories of
/// `tracee`, well inside the table PID 1 reserves before its threads start
/// (a table grown later waits for an RCU grace period, docs/measurements.md).
const KEPT: usize = 64;

/// One thread's bases.
struct Thread {
    pidfd: OwnedFd,
    cwd: Option<Rc<OwnedFd>>,
    root: Option<Rc<OwnedFd>>,
}

/// A thread whose `chdir`/`fchdir` was let through and may not have run yet.
struct Mover {
    tid: u32,
    pidfd: Option<OwnedFd>,
}

#[derive(Default)]
struct Bases {
    threads: HashMap<u32, Thread>,
    moving: Vec<Mover>,
}

thread_local! {
    static BASES: RefCell<Bases> = RefCell::new(Bases::default());
}

/// Which base.
#[derive(Clone, Copy)]
pub enum Base {
    Cwd,
    Root,
}

impl Base {
    fn entry(self) -> &'static str {
        match self {
            Base::Cwd => "cwd",
            Base::Root => "root",
        }
    }
}

/// Thread `tid`'s working directory or root, `O_PATH`. Called while `tid`
/// is stopped in a guarded call.
pub fn open(tid: u32, base: Base) -> io::Result<Rc<OwnedFd>> {
    BASES.with(|b| b.borrow_mut().open(tid, base))
}

/// `tid` is about to change its working directory (a `chdir` or `fchdir`
/// about to be let through): forget every kept one, and keep none until
/// that call is over.
pub fn moving(tid: u32) {
    BASES.with(|b| {
        let mut b = b.borrow_mut();
        for thread in b.threads.values_mut() {
            thread.cwd = None;
        }
        let pidfd = tracee::thread_pidfd(tid).ok();
        b.moving.push(Mover { tid, pidfd });
    });
}

impl Bases {
    fn open(&mut self, tid: u32, base: Base) -> io::Result<Rc<OwnedFd>> {
        let fresh = || tracee::open_proc_entry(tid, base.entry(), true).map(Rc::new);
        if matches!(base, Base::Cwd) && !self.settled(tid) {
            // A working directory may be changing under us: ask each time.
            return fresh();
        }
        if self
            .threads
            .get(&tid)
            .is_some_and(|thread| tracee::exited(&thread.pidfd))
        {
            // That number is another thread's now.
            self.threads.remove(&tid);
        }
        if !self.threads.contains_key(&tid) {
            // The pidfd before the entry: if its thread is still there after
            // the entry is opened, the number named that very thread.
            let Ok(pidfd) = tracee::thread_pidfd(tid) else {
                // No thread pidfds (before Linux 6.9): nothing is kept.
                return fresh();
            };
            if self.threads.len() >= KEPT {
                self.threads.clear();
            }
            let thread = Thread {
                pidfd,
                cwd: None,
                root: None,
            };
            self.threads.insert(tid, thread);
        }
        let Some(thread) = self.threads.get_mut(&tid) else {
            return fresh();
        };
        if let Some(fd) = thread.slot(base) {
            return Ok(fd.clone());
        }
        let fd = fresh()?;
        if tracee::exited(&thread.pidfd) {
            self.threads.remove(&tid);
        } else {
            *thread.slot_mut(base) = Some(fd.clone());
        }
        Ok(fd)
    }

    /// Whether no `chdir` let through may still be running. A mover is done
    /// once it makes another guarded call (`tid` is it), once it has exited,
    /// or once `/proc` shows it in another call.
    fn settled(&mut self, tid: u32) -> bool {
        if self.moving.is_empty() {
            return true;
        }
        self.moving.retain(|m| {
            let done = m.tid == tid
                || m.pidfd.as_ref().is_some_and(tracee::exited)
                || match std::fs::read_to_string(format!("/proc/{}/syscall", m.tid)) {
                    Ok(text) => !still_moving(&text),
                    // Unreadable: past it only if it is gone (no pidfd was
                    // had for it); else keep waiting — slower, never wrong.
                    Err(_) => m.pidfd.is_none(),
                };
            !done
        });
        self.moving.is_empty()
    }
}

impl Thread {
    fn slot(&self, base: Base) -> Option<&Rc<OwnedFd>> {
        match base {
            Base::Cwd => self.cwd.as_ref(),
            Base::Root => self.root.as_ref(),
        }
    }

    fn slot_mut(&mut self, base: Base) -> &mut Option<Rc<OwnedFd>> {
        match base {
            Base::Cwd => &mut self.cwd,
            Base::Root => &mut self.root,
        }
    }
}

/// Whether a thread whose `/proc/<tid>/syscall` reads `text` may still be
/// in its `chdir`/`fchdir`: it is running (perhaps in that call), or stopped
/// in one of them. Stopped in any other call, or outside any (`-1`), it is
/// past it.
fn still_moving(text: &str) -> bool {
    match text.split_whitespace().next() {
        Some("running") | None => true,
        Some(nr) => nr
            .parse::<i64>()
            .map_or(true, |nr| nr == libc::SYS_chdir || nr == libc::SYS_fchdir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mover_is_past_its_chdir_only_when_proc_says_so() {
        assert!(still_moving("running\n"));
        assert!(still_moving(""));
        assert!(still_moving(
            "80 0x7ffd 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n"
        ));
        assert!(still_moving("81 0x3 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n"));
        assert!(!still_moving(
            "61 0xffffffff 0x7ffd 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n"
        ));
        assert!(!still_moving("-1 0x7ffd 0x7f00\n"));
        assert!(still_moving("garbage"));
    }

    /// A kept base is the same descriptor until a `chdir` starts; then
    /// working directories are opened afresh and kept again only once the
    /// mover is past it (here: it makes the next call itself).
    #[test]
    fn kept_until_a_chdir() {
        std::thread::spawn(|| {
            // SAFETY: plain call.
            let tid = unsafe { libc::gettid() } as u32;
            let first = open(tid, Base::Cwd).expect("cwd");
            let again = open(tid, Base::Cwd).expect("cwd again");
            assert!(Rc::ptr_eq(&first, &again), "kept");
            let root = open(tid, Base::Root).expect("root");
            moving(u32::MAX >> 2); // no such thread: past at once
            let other = open(tid, Base::Root).expect("root again");
            assert!(Rc::ptr_eq(&root, &other), "roots stay across a chdir");
            moving(tid);
            let fresh = open(tid, Base::Cwd).expect("cwd after");
            assert!(!Rc::ptr_eq(&first, &fresh), "forgotten at the chdir");
            let kept = open(tid, Base::Cwd).expect("cwd kept again");
            assert!(Rc::ptr_eq(&fresh, &kept), "kept again once settled");
        })
        .join()
        .expect("the test thread");
    }
}
