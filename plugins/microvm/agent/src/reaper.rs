//! The one reaper. As PID 1 the agent inherits every orphan in the guest
//! and must wait for them all, so one thread waits for any child: the
//! status of a command goes to whoever registered its pid, anything else is
//! reaped silently. Commands are forked under the table's lock, so a child
//! cannot be reaped before its pid is registered.

use std::collections::BTreeMap;
use std::io;
use std::sync::mpsc::Sender;
use std::sync::{Condvar, Mutex, PoisonError, TryLockError};
use std::thread;

use crate::{lock, log};

struct Table {
    /// Pids of unreaped commands, and where their wait status goes.
    waiting: BTreeMap<i32, Sender<i32>>,
    /// Forks so far: the reaper sleeps on `FORKED` while it has no children.
    forks: u64,
    started: bool,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    waiting: BTreeMap::new(),
    forks: 0,
    started: false,
});
static FORKED: Condvar = Condvar::new();

/// Starts the reaper thread (once).
pub fn start() -> io::Result<()> {
    let mut table = lock(&TABLE);
    if !table.started {
        thread::Builder::new()
            .name("reaper".into())
            .spawn(reap_forever)?;
        table.started = true;
    }
    Ok(())
}

/// Forks; the child runs `in_child` (then exits), the parent registers the child's pid
/// so that its wait status is sent to `status`. Returns the pid.
///
/// `in_child` runs in a copy of a multi-threaded process: it may only make
/// async-signal-safe calls on memory prepared before the fork.
pub fn fork(status: Sender<i32>, in_child: impl FnOnce()) -> io::Result<i32> {
    let mut table = lock(&TABLE);
    // SAFETY: the child only runs `in_child`, which keeps to
    // async-signal-safe calls and should not return (the lock held here is
    // never touched in the child).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        in_child();
        // SAFETY: ends the child without running anything of the parent's.
        unsafe { libc::_exit(127) };
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    table.waiting.insert(pid, status);
    table.forks += 1;
    FORKED.notify_all();
    Ok(pid)
}

/// The pids of commands not reaped yet. Empty if the table is busy, which
/// only happens when called while panicking with it held.
pub fn children() -> Vec<i32> {
    let table = match TABLE.try_lock() {
        Ok(table) => table,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return Vec::new(),
    };
    table.waiting.keys().copied().collect()
}

fn reap_forever() {
    loop {
        let forks = lock(&TABLE).forks;
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer. __WALL: whatever kind of
        // child it is, it must not stay a zombie.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
        if pid > 0 {
            if let Some(to) = lock(&TABLE).waiting.remove(&pid) {
                // The command's thread may have given up on it (it failed
                // to start): nobody to tell then.
                let _ = to.send(status);
            }
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::ECHILD) => {
                // No children: sleep until the next fork. Orphans only come
                // from descendants, so none can appear meanwhile.
                let mut table = lock(&TABLE);
                while table.forks == forks {
                    table = FORKED.wait(table).unwrap_or_else(PoisonError::into_inner);
                }
            }
            _ => {
                log!("waitpid: {e}");
                thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
