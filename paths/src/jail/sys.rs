//! The system calls the jail makes: every one relative to a descriptor it
//! holds, or to its own `/proc/self/fd/N` (the descriptor's object, not a
//! path anybody else can change).

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// What `openat2` may do beneath a root: never leave it (`..`, absolute
/// symlinks), never through a magic link.
pub(super) const BENEATH: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;

fn cvt(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor the kernel just gave us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A C string of a name or relative path; a NUL byte inside is `EINVAL`.
pub(super) fn c_path(path: &OsStr) -> io::Result<CString> {
    CString::new(path.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `openat2(dir, path, flags, resolve)`, retried while the kernel answers
/// `EAGAIN` (a rename elsewhere raced a `..` it was resolving beneath).
pub(super) fn openat2(
    dir: BorrowedFd<'_>,
    path: &CStr,
    flags: i32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: an all-zero open_how is valid (three integers); we set them.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = 0;
    how.resolve = resolve;
    let mut tries = 0;
    loop {
        // SAFETY: a descriptor we hold, a NUL-terminated path and an
        // open_how of the size we pass; the kernel reads them only.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match owned(fd) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < 128 => tries += 1,
            other => return other,
        }
    }
}

/// `openat(dir, name, flags, mode)` on one name: no path walk beyond it.
pub(super) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: i32,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    // SAFETY: a descriptor we hold and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    owned(libc::c_long::from(fd))
}

/// `fstat` of a descriptor (an `O_PATH` one too).
pub(super) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole stat into the buffer when it succeeds.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful fstat above.
    Ok(unsafe { st.assume_init() })
}

/// `lstat` of one name in a directory we hold; `None` when it is absent.
pub(super) fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<libc::stat>> {
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a descriptor we hold, a NUL-terminated name; fstatat writes
    // a whole stat into the buffer when it succeeds.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    match cvt(rc) {
        // SAFETY: initialised by the successful fstatat above.
        Ok(()) => Ok(Some(unsafe { st.assume_init() })),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `/proc/self/fd/N` of a descriptor we hold.
fn proc_fd(fd: BorrowedFd<'_>) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Where the kernel says a descriptor's object is now: a read of what it
/// resolved, not a resolution of ours. Not absolute (an object beyond our
/// root, an anonymous inode) is an error.
pub(super) fn fd_path(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    let path = std::fs::read_link(proc_fd(fd))?;
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(io::Error::from_raw_os_error(libc::EXDEV))
    }
}

/// Opens the object of an `O_PATH` descriptor for reading or writing,
/// through its magic link: the very inode already judged, whatever has
/// happened to its name since.
pub(super) fn reopen(fd: BorrowedFd<'_>, write: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NOCTTY)
        .open(proc_fd(fd))
}

/// `mkdirat(dir, name, mode)`.
pub(super) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a descriptor we hold and a NUL-terminated name.
    cvt(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

/// `unlinkat(dir, name, flags)`: never follows `name`.
pub(super) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: i32) -> io::Result<()> {
    // SAFETY: a descriptor we hold and a NUL-terminated name.
    cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// `renameat(from_dir, from, to_dir, to)`: neither name followed.
pub(super) fn renameat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: descriptors we hold and NUL-terminated names.
    cvt(unsafe {
        libc::renameat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
        )
    })
}

/// Links the file we hold (an `O_PATH` descriptor) as `name` in `dir`:
/// exactly the inode judged, through our own magic link.
pub(super) fn link_fd(file: BorrowedFd<'_>, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    let via = c_path(proc_fd(file).as_os_str())?;
    // SAFETY: NUL-terminated paths, a descriptor we hold.
    cvt(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            via.as_ptr(),
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

/// `chmod` of the object we hold (an `O_PATH` descriptor), through our own
/// magic link: `fchmod` does not take `O_PATH` descriptors.
pub(super) fn chmod_fd(file: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    let via = c_path(proc_fd(file).as_os_str())?;
    // SAFETY: a NUL-terminated path.
    cvt(unsafe { libc::fchmodat(libc::AT_FDCWD, via.as_ptr(), mode, 0) })
}

/// `fchmod` of an open file.
pub(super) fn fchmod(file: &File, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a descriptor we hold.
    cvt(unsafe { libc::fchmod(file.as_raw_fd(), mode) })
}

/// `fchown` of an open file.
pub(super) fn fchown(file: &File, uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    // SAFETY: a descriptor we hold.
    cvt(unsafe { libc::fchown(file.as_raw_fd(), uid, gid) })
}

/// The effective uid and gid of the server.
pub(super) fn effective_ids() -> (libc::uid_t, libc::gid_t) {
    // SAFETY: neither call can fail or touch memory.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// `fsync` of the directory we hold, so a rename into it is durable.
pub(super) fn sync_dir(dir: BorrowedFd<'_>) -> io::Result<()> {
    let fd = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    File::from(fd).sync_all()
}

/// What a directory entry says it is.
pub(super) type DType = u8;

/// The entries of the directory we hold (not `.` and `..`), with their
/// types as the directory reports them (`DT_UNKNOWN` on some filesystems).
/// Read through a fresh open of the directory, so its offset is our own.
pub(super) fn read_names(dir: BorrowedFd<'_>) -> io::Result<Vec<(OsString, DType)>> {
    let fd = openat(dir, c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let raw = fd.into_raw_fd();
    // SAFETY: a directory descriptor we own; on success the stream owns it.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        let err = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so the descriptor is still ours alone.
        drop(unsafe { OwnedFd::from_raw_fd(raw) });
        return Err(err);
    }
    struct Stream(*mut libc::DIR);
    impl Drop for Stream {
        fn drop(&mut self) {
            // SAFETY: a stream fdopendir gave us, closed once here.
            unsafe { libc::closedir(self.0) };
        }
    }
    let stream = Stream(stream);
    let mut names = Vec::new();
    loop {
        // SAFETY: this thread's errno, cleared so an end is told from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: an open stream.
        let entry = unsafe { libc::readdir(stream.0) };
        if entry.is_null() {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(0) => Ok(names),
                _ => Err(err),
            };
        }
        // SAFETY: readdir returned an entry valid until the next call on
        // this stream; its name is NUL-terminated.
        let (name, kind) = unsafe { (CStr::from_ptr((*entry).d_name.as_ptr()), (*entry).d_type) };
        let bytes = name.to_bytes();
        if bytes != b"." && bytes != b".." {
            names.push((OsStr::from_bytes(bytes).to_os_string(), kind));
        }
    }
}

/// The identity of a stat.
pub(super) fn identity(st: &libc::stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// The file type bits of a stat.
pub(super) fn file_type(st: &libc::stat) -> libc::mode_t {
    st.st_mode & libc::S_IFMT
}

/// Opens a host path the front-end named as a root (`O_PATH|O_DIRECTORY`):
/// the one resolution the jail does not do beneath anything.
pub(super) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(path)
        .map(OwnedFd::from)
}

/// `FICLONE` (`_IOW(0x94, 9, int)`): share every extent of `from` with `to`.
const FICLONE: libc::c_ulong = 0x4004_9409;

/// Makes `to` (a new, empty file) share all of `from`'s extents: a
/// copy-on-write clone, or the kernel's refusal (`EOPNOTSUPP`, `EINVAL` on a
/// filesystem without reflink, `EXDEV` across filesystems). Never a copy.
pub(super) fn ficlone(to: &File, from: &File) -> io::Result<()> {
    // SAFETY: two descriptors we hold; FICLONE takes the source descriptor
    // by value and writes nothing into our memory.
    cvt(unsafe { libc::ioctl(to.as_raw_fd(), FICLONE, from.as_raw_fd()) })
}

/// `readlinkat(dir, name)`: a symlink's text, never followed.
pub(super) fn readlink_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OsString> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: a descriptor we hold, a NUL-terminated name, and a buffer of
    // the length we pass.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(OsString::from_vec(buf))
}

/// `symlinkat(target, dir, name)`.
pub(super) fn symlink_at(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: two NUL-terminated strings and a descriptor we hold.
    cvt(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// The access and modification times of a stat, as `utimensat` takes them.
fn times_of(st: &libc::stat) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec,
        },
        libc::timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        },
    ]
}

/// Gives the object of `fd` the access and modification times of `st`.
pub(super) fn set_times_fd(fd: BorrowedFd<'_>, st: &libc::stat) -> io::Result<()> {
    let times = times_of(st);
    // SAFETY: a descriptor we hold and two timespecs.
    cvt(unsafe { libc::futimens(fd.as_raw_fd(), times.as_ptr()) })
}

/// Gives the name `name` in `dir` (a symlink itself, not followed) the
/// times of `st`.
pub(super) fn set_times_at(dir: BorrowedFd<'_>, name: &CStr, st: &libc::stat) -> io::Result<()> {
    let times = times_of(st);
    // SAFETY: a descriptor we hold, a NUL-terminated name and two timespecs.
    cvt(unsafe {
        libc::utimensat(
            dir.as_raw_fd(),
            name.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// `fchmod` on a descriptor we hold (a directory opened to read, too).
pub(super) fn fchmod_fd(fd: BorrowedFd<'_>, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: a descriptor we hold.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), mode) })
}
