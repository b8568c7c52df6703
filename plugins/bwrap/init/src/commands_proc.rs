//! The commands' `/proc`: the procfs of their own pid namespace
//! (`crate::namespaces`), so `ps`, `pgrep`, `kill %1`, `/proc/$$` and
//! `/proc/self` number processes as the commands do, and show nothing of
//! the sandbox's machinery but the namespace's reaper (docs/design.md §8,
//! SPEC G4).
//!
//! A procfs belongs to the pid namespace of the process that creates its
//! context, so the namespace's reaper creates it (`fsopen`, `fsconfig`:
//! `crate::namespaces`). Mounting it is another matter: the kernel lets a
//! user namespace mount a procfs only where one is already fully visible in
//! the mount namespace (no locked mount covering part of it), and
//! bubblewrap, run by root, covers `/proc/irq` and `/proc/bus` — covers
//! that are locked in PID 1's own user namespace, so no procfs can be
//! mounted from there. In bubblewrap's namespaces they are not. So PID 1
//! forks the *maker* first thing, while it is still in bubblewrap's
//! namespaces with `CAP_SYS_ADMIN` and `CAP_SYS_CHROOT` there
//! (`bwrap/src/plan.rs` adds them for this alone; PID 1 leaves them behind
//! when it makes its own user namespace). Once the commands' namespaces
//! exist, PID 1 hands the maker the reaper's procfs and the commands' mount
//! namespace; the maker mounts the procfs (`fsmount`, checked against
//! bubblewrap's mount namespace — or, run by any other account, against the
//! commands' own, where bubblewrap covered nothing and which bubblewrap's
//! mount namespace is not ours to mount in), enters the commands' mount
//! namespace, moves it onto `/proc` there, re-binds [`PROC_READ_ONLY`]
//! read-only in it as PID 1 did in its own, sends back the new `/proc` and
//! exits, before any command can start; it is never in the commands' pid
//! namespace. PID 1, the supervisor and the forwarder keep the procfs of
//! PID 1's namespace, where the guard's pids are.
//!
//! Every step that fails fails the launch, naming the step.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::layout::PROC_READ_ONLY;
use crate::namespaces::Namespaces;

/// The maker's steps, by the number it reports.
const STEPS: &[&str] = &[
    "fsmount of the procfs",
    "entering the commands' mount namespace",
    "moving the procfs onto /proc",
    "re-binding its /proc entries read-only",
    "opening it",
];

/// The maker, forked before PID 1 leaves bubblewrap's namespaces.
pub struct ProcMaker {
    socket: OwnedFd,
}

impl ProcMaker {
    /// Forks the maker. Call first thing in PID 1, while it has one thread
    /// and is still in bubblewrap's user and mount namespaces.
    pub fn start() -> io::Result<ProcMaker> {
        let (ours, theirs) = crate::forker::seqpacket_pair()?;
        // SAFETY: PID 1 has a single thread here (checked by the caller's
        // contract), so the child may run any code.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            drop(ours);
            serve(theirs)
        }
        Ok(ProcMaker { socket: ours })
    }

    /// Has the maker mount the procfs of the commands' pid namespace on
    /// `/proc` in their mount namespace; waits for it. Returns that
    /// `/proc`, `O_PATH`, for PID 1's Landlock domain to grant writing
    /// beneath it as beneath its own.
    pub fn mount(self, namespaces: &Namespaces) -> io::Result<OwnedFd> {
        sandbox_fdpass::send(
            self.socket.as_raw_fd(),
            b"N",
            &[namespaces.procfs.as_raw_fd(), namespaces.mnt.as_raw_fd()],
        )?;
        let mut answer = [0u8; 8];
        let mut fds = Vec::new();
        let n = sandbox_fdpass::recv(self.socket.as_raw_fd(), &mut answer, &mut fds)?;
        if n != answer.len() {
            return Err(io::Error::other(
                "the maker of the commands' /proc ended without an answer",
            ));
        }
        let step = u32::from_le_bytes([answer[0], answer[1], answer[2], answer[3]]);
        let errno = i32::from_le_bytes([answer[4], answer[5], answer[6], answer[7]]);
        if errno == 0 {
            return fds
                .into_iter()
                .next()
                .ok_or_else(|| io::Error::other("the maker sent no /proc"));
        }
        let what = STEPS
            .get(step as usize)
            .copied()
            .unwrap_or("an unknown step");
        let e = io::Error::from_raw_os_error(errno);
        Err(io::Error::new(e.kind(), format!("{what}: {e}")))
    }
}

/// The maker: waits for the procfs and the mount namespace, mounts the one
/// in the other, passes on its answer, exits.
fn serve(socket: OwnedFd) -> ! {
    let fd = socket.as_raw_fd();
    // SAFETY: closes every descriptor but our socket; plain syscalls.
    unsafe {
        libc::syscall(libc::SYS_close_range, 3u32, (fd - 1).max(2) as u32, 0u32);
        libc::syscall(libc::SYS_close_range, (fd + 1) as u32, u32::MAX, 0u32);
    }
    let mut buf = [0u8; 1];
    let mut fds = Vec::new();
    let got = sandbox_fdpass::recv(fd, &mut buf, &mut fds);
    let mut fds = fds.into_iter();
    let (Ok(_), Some(procfs), Some(mnt_ns)) = (got, fds.next(), fds.next()) else {
        // PID 1 went on without us (its launch failed): nothing to do.
        // SAFETY: plain syscall.
        unsafe { libc::_exit(0) }
    };
    let mut out = [0u8; 8];
    let sent = match make(&procfs, &mnt_ns) {
        Ok(proc_root) => sandbox_fdpass::send(fd, &out, &[proc_root.as_raw_fd()]),
        Err((step, errno)) => {
            out[..4].copy_from_slice(&(step as u32).to_le_bytes());
            out[4..].copy_from_slice(&errno.to_le_bytes());
            sandbox_fdpass::send(fd, &out, &[])
        }
    };
    drop(sent);
    // SAFETY: plain syscall.
    unsafe { libc::_exit(0) }
}

/// Mounts the created procfs context `procfs` and puts it on `/proc` in
/// the mount namespace `mnt_ns`. The mount is made in bubblewrap's mount
/// namespace where this process may (run by root, bubblewrap's mount
/// namespace is its user namespace's, and there `/proc` is fully visible);
/// else in the commands' (run by any other account, bubblewrap makes its
/// mounts as root of a user namespace of its own and runs us in a second
/// one, and covers nothing of `/proc`). The failing step and its errno.
fn make(procfs: &OwnedFd, mnt_ns: &OwnedFd) -> Result<OwnedFd, (usize, i32)> {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    let check = |step: usize, rc: i64| if rc < 0 { Err((step, errno())) } else { Ok(rc) };
    let mounted_here = fsmount(procfs);
    // SAFETY: plain syscall on a descriptor we hold.
    let entered = unsafe { libc::setns(mnt_ns.as_raw_fd(), libc::CLONE_NEWNS) };
    check(1, i64::from(entered))?;
    let mounted = match mounted_here {
        Ok(mounted) => mounted,
        Err(_) => fsmount(procfs)?,
    };
    // SAFETY: plain syscall with valid C strings and descriptors we hold.
    check(2, unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mounted.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c"/proc".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    })?;
    let flags = libc::MS_REMOUNT
        | libc::MS_BIND
        | libc::MS_RDONLY
        | libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC
        | libc::MS_RELATIME;
    for point in PROC_READ_ONLY {
        crate::mount::read_only_bind(point, flags)
            .map_err(|e| (3, e.raw_os_error().unwrap_or(libc::EIO)))?;
    }
    std::fs::File::open("/proc")
        .map(OwnedFd::from)
        .map_err(|e| (4, e.raw_os_error().unwrap_or(libc::EIO)))
}

/// The mount of the procfs context `procfs`: `nosuid`, `nodev`, `noexec`,
/// not attached anywhere yet (checked against our mount namespace).
fn fsmount(procfs: &OwnedFd) -> Result<OwnedFd, (usize, i32)> {
    let attributes = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV | libc::MOUNT_ATTR_NOEXEC;
    // SAFETY: plain syscall on a descriptor we hold.
    let mounted = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            procfs.as_raw_fd(),
            libc::FSMOUNT_CLOEXEC,
            attributes,
        )
    };
    if mounted < 0 {
        return Err((
            0,
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ));
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(mounted as RawFd) })
}
