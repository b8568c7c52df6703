//! The seccomp user-notification listener: receive, check, inject, answer.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::emulate::Call;
use super::timing;

/// A listener descriptor returned by installing a `NEW_LISTENER` filter.
pub struct Listener {
    fd: OwnedFd,
    /// The CPUs this supervisor thread may run on, to go back to after
    /// each descriptor injection (see [`Listener::add_fd`]).
    cpus: Option<libc::cpu_set_t>,
}

/// A received notification: its id and the call.
pub struct Notification {
    pub id: u64,
    pub call: Call,
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl Listener {
    /// Made on the thread that serves it (the CPU mask is that thread's).
    pub fn new(fd: OwnedFd) -> Self {
        Self {
            fd,
            cpus: own_cpus(),
        }
    }

    /// Asks the kernel to wake the supervisor and the caller on the same CPU
    /// (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`, Linux 6.6): it roughly halves
    /// the round trip on small machines. Older kernels ignore it: no harm.
    pub fn sync_wake_up(&self) {
        let flags: u64 = 1;
        // SAFETY: ioctl with an integer argument on our listener.
        unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS,
                flags,
            )
        };
    }

    /// Waits until a notification is pending; `false` once no process uses
    /// the filter any more (every command of the exec has exited).
    pub fn wait(&self) -> io::Result<bool> {
        loop {
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            if n < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if p.revents & libc::POLLIN != 0 {
                return Ok(true);
            }
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return Ok(false);
            }
        }
    }

    /// Receives one notification (call only after `wait` said one is pending).
    pub fn recv(&self) -> io::Result<Notification> {
        // SAFETY: the kernel requires a zeroed seccomp_notif.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        check(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut notif,
            )
        })?;
        Ok(Notification {
            id: notif.id,
            call: Call {
                tid: notif.pid,
                nr: i64::from(notif.data.nr),
                args: notif.data.args,
            },
        })
    }

    /// Whether the notification is still pending (its task alive and waiting).
    pub fn id_valid(&self, id: u64) -> bool {
        let mut id = id;
        // SAFETY: ioctl with a pointer to a u64.
        unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
                &mut id,
            ) == 0
        }
    }

    /// Installs `fd` in the tracee `tid`; returns its number there. Without
    /// `ADDFD_FLAG_SEND`: the caller closes its copy before answering, so no
    /// extra writable reference outlives the tracee's (ETXTBSY on exec).
    ///
    /// Done with this thread *and the tracee* held on the CPU we run on. The
    /// kernel's two `ADDFD` completions (the tracee installs the descriptor,
    /// then wakes us) have no same-CPU hint: the scheduler puts the woken
    /// tracee on the idle CPU, and then us there or back, and waking a halted
    /// vCPU costs more than the exchange itself on a virtual machine
    /// (docs/measurements.md). Held, the exchange stays on one CPU. Both masks
    /// are back before the answer, so the next notification may wake us
    /// wherever the caller is. Scheduling only: a mask that cannot be set or
    /// given back changes no outcome.
    pub fn add_fd(&self, id: u64, fd: RawFd, cloexec: bool, tid: u32) -> io::Result<i32> {
        let began = timing::begin();
        let held = self.cpus.as_ref().and_then(|own| Held::here(own, tid));
        timing::end("fd: hold", began);
        let began = timing::begin();
        let added = self.add_fd_here(id, fd, cloexec);
        timing::end("fd: addfd", began);
        let began = timing::begin();
        drop(held);
        timing::end("fd: give back", began);
        added
    }

    fn add_fd_here(&self, id: u64, fd: RawFd, cloexec: bool) -> io::Result<i32> {
        // SAFETY: zeroed then filled.
        let mut add: libc::seccomp_notif_addfd = unsafe { std::mem::zeroed() };
        add.id = id;
        add.srcfd = fd as u32;
        add.newfd_flags = if cloexec { libc::O_CLOEXEC as u32 } else { 0 };
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_ADDFD,
                &mut add,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(rc)
    }

    /// Lets the call run as the caller made it (only for calls that carry no
    /// path, where there is nothing to race: `umask`).
    pub fn continue_call(&self, id: u64) -> io::Result<()> {
        // SAFETY: zeroed then filled.
        let mut resp: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
        resp.id = id;
        resp.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32;
        // SAFETY: ioctl with a pointer to a correctly sized struct.
        check(unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND,
                &mut resp,
            )
        })
    }

    /// Answers: `val` as the syscall's result, or `-errno`.
    pub fn respond(&self, id: u64, val: i64, errno: i32) -> io::Result<()> {
        respond_on(self.fd.as_raw_fd(), id, val, errno)
    }

    /// An answerer for another thread: a call that may block for long (a
    /// blocking `connect`) is made there, so this one serves the others.
    pub fn responder(&self) -> io::Result<Responder> {
        Ok(Responder {
            fd: self.fd.try_clone()?,
        })
    }
}

/// Answers one notification from another thread (see [`Listener::responder`]).
pub struct Responder {
    fd: OwnedFd,
}

impl Responder {
    /// As [`Listener::respond`].
    pub fn respond(&self, id: u64, val: i64, errno: i32) -> io::Result<()> {
        respond_on(self.fd.as_raw_fd(), id, val, errno)
    }
}

fn respond_on(listener: RawFd, id: u64, val: i64, errno: i32) -> io::Result<()> {
    // SAFETY: zeroed then filled.
    let mut resp: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
    resp.id = id;
    resp.val = val;
    resp.error = if errno == 0 { 0 } else { -errno };
    // SAFETY: ioctl with a pointer to a correctly sized struct.
    check(unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp) })
}

/// This thread's CPU mask, or `None` when it cannot be read (then no
/// injection holds the CPU).
fn own_cpus() -> Option<libc::cpu_set_t> {
    task_cpus(0)
}

/// This thread and a tracee held on the CPU this thread is on, until
/// dropped: then each gets its own mask back.
struct Held<'a> {
    own: &'a libc::cpu_set_t,
    /// The tracee and its mask before, when it could be held too.
    tracee: Option<(u32, libc::cpu_set_t)>,
}

impl<'a> Held<'a> {
    /// `None` when this thread could not be held (then nothing was changed).
    fn here(own: &'a libc::cpu_set_t, tid: u32) -> Option<Self> {
        let cpu = current_cpu()?;
        let one = only(cpu);
        if !set_own_cpus(&one) {
            return None;
        }
        // Never onto a CPU its own mask leaves out (`taskset` inside).
        // SAFETY: CPU_ISSET reads the set; `cpu` is the kernel's own number.
        let allowed = |had: &libc::cpu_set_t| unsafe { libc::CPU_ISSET(cpu, had) };
        let tracee = task_cpus(tid).filter(|had| allowed(had) && set_task_cpus(tid, &one));
        Some(Self {
            own,
            tracee: tracee.map(|had| (tid, had)),
        })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if let Some((tid, had)) = &self.tracee {
            set_task_cpus(*tid, had);
        }
        set_own_cpus(self.own);
    }
}

/// The CPU this thread is on.
fn current_cpu() -> Option<usize> {
    // SAFETY: no arguments; returns the CPU or -1.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// The set holding only `cpu`.
fn only(cpu: usize) -> libc::cpu_set_t {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (the kernel's own CPU number).
    unsafe { libc::CPU_SET(cpu, &mut one) };
    one
}

/// Restricts this thread to the CPU it is on; `false` when it could not.
#[cfg(test)]
fn hold_current_cpu() -> bool {
    current_cpu().is_some_and(|cpu| set_own_cpus(&only(cpu)))
}

/// Task `tid`'s CPU mask (`0`: this thread).
fn task_cpus(tid: u32) -> Option<libc::cpu_set_t> {
    // SAFETY: a zeroed cpu_set_t is an empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity into a set of its size.
    let rc = unsafe {
        libc::sched_getaffinity(tid as libc::pid_t, std::mem::size_of_val(&set), &mut set)
    };
    (rc == 0).then_some(set)
}

/// Sets task `tid`'s CPU mask (`0`: this thread); `false` when refused.
fn set_task_cpus(tid: u32, cpus: &libc::cpu_set_t) -> bool {
    // SAFETY: sched_setaffinity from a set of its size.
    unsafe { libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of_val(cpus), cpus) == 0 }
}

/// Sets this thread's CPU mask; `false` when refused (a cpuset, a race
/// with a CPU going offline): scheduling only, nothing to undo.
fn set_own_cpus(cpus: &libc::cpu_set_t) -> bool {
    set_task_cpus(0, cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus_in(set: &libc::cpu_set_t) -> u32 {
        // SAFETY: CPU_COUNT reads the set.
        unsafe { libc::CPU_COUNT(set) as u32 }
    }

    /// An injection holds the supervisor on one CPU, then gives it back
    /// every CPU it had (a thread left on one CPU would pull every later
    /// wake-up there).
    #[test]
    fn a_held_cpu_is_given_back() {
        std::thread::spawn(|| {
            let before = own_cpus().expect("the thread's CPU mask");
            assert!(hold_current_cpu(), "holding the current CPU");
            let held = own_cpus().expect("the held mask");
            assert_eq!(cpus_in(&held), 1, "held on exactly one CPU");
            // SAFETY: plain call.
            let cpu = unsafe { libc::sched_getcpu() };
            // SAFETY: `cpu` is the kernel's own CPU number.
            let on_it = unsafe { libc::CPU_ISSET(cpu as usize, &held) };
            assert!(on_it, "held on the CPU it is on");
            assert!(set_own_cpus(&before), "giving the mask back");
            let after = own_cpus().expect("the mask after");
            assert_eq!(cpus_in(&after), cpus_in(&before));
            // SAFETY: CPU_EQUAL reads both sets.
            assert!(unsafe { libc::CPU_EQUAL(&after, &before) });
        })
        .join()
        .expect("the test thread");
    }
    /// The injection's hold covers the tracee too, and gives both their
    /// masks back when it ends.
    #[test]
    fn a_held_tracee_gets_its_mask_back() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            // SAFETY: plain call.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        std::thread::spawn(move || {
            let own = own_cpus().expect("our mask");
            let theirs = task_cpus(tid).expect("the other thread's mask");
            let held = Held::here(&own, tid).expect("held");
            assert!(held.tracee.is_some(), "the tracee is held too");
            assert_eq!(cpus_in(&task_cpus(tid).unwrap()), 1);
            assert_eq!(cpus_in(&own_cpus().unwrap()), 1);
            drop(held);
            // SAFETY: CPU_EQUAL reads both sets.
            assert!(unsafe { libc::CPU_EQUAL(&task_cpus(tid).unwrap(), &theirs) });
            // SAFETY: CPU_EQUAL reads both sets.
            assert!(unsafe { libc::CPU_EQUAL(&own_cpus().unwrap(), &own) });
        })
        .join()
        .expect("the holding thread");
        done_tx.send(()).unwrap();
        other.join().unwrap();
    }

    /// A tracee restricted to other CPUs is left where it may run.
    #[test]
    fn a_tracee_is_never_held_where_its_mask_forbids() {
        let cpus = own_cpus().map_or(0, |set| cpus_in(&set));
        if cpus < 2 {
            sandbox_test_support::skip_or_fail(format!(
                "this test may run on {cpus} CPU(s); it needs two: CI must give the tests two CPUs"
            ));
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || {
            assert!(set_own_cpus(&only(1)), "the other thread on CPU 1");
            // SAFETY: plain call.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        std::thread::spawn(move || {
            let own = own_cpus().expect("our mask");
            assert!(set_own_cpus(&only(0)), "this thread on CPU 0");
            let held = Held::here(&own, tid).expect("held");
            assert!(held.tracee.is_none(), "not moved onto CPU 0");
            // SAFETY: CPU_ISSET reads the set.
            assert!(unsafe { libc::CPU_ISSET(1, &task_cpus(tid).unwrap()) });
        })
        .join()
        .expect("the holding thread");
        done_tx.send(()).unwrap();
        other.join().unwrap();
    }
}
