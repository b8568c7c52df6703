//! Pseudo-terminals for commands run on one (SPEC B8): a new terminal from
//! the `/dev/ptmx` of the caller's mount namespace — inside a sandbox, the
//! sandbox's own devpts instance — whose slave side is opened from the
//! master (`TIOCGPTPEER`), never by a path another process could swap.
//! The child makes the slave its stdin, stdout, stderr and, after
//! `setsid`, its controlling terminal ([`make_controlling`]); the caller
//! keeps the master. Once every holder of the slave has let go, reading the
//! master ends in `EIO` (the terminal's hang-up), which readers take as its
//! end of file.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The smallest and largest size a terminal is given.
pub const MIN_SIZE: u16 = 1;
pub const MAX_SIZE: u16 = 4096;

/// Whether `cols` × `rows` is a size a terminal may have; the reason if not.
pub fn check_size(cols: u16, rows: u16) -> Result<(), String> {
    if (MIN_SIZE..=MAX_SIZE).contains(&cols) && (MIN_SIZE..=MAX_SIZE).contains(&rows) {
        Ok(())
    } else {
        Err(format!(
            "a terminal of {cols} columns and {rows} rows: each must be at least {MIN_SIZE} and at most {MAX_SIZE}"
        ))
    }
}

/// A new terminal of `cols` × `rows`: `(master, slave)`, both close-on-exec
/// and neither the caller's controlling terminal.
pub fn open(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: open of a constant path; the result is checked.
    let master = unsafe {
        libc::open(
            c"/dev/ptmx".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if master < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let master = unsafe { OwnedFd::from_raw_fd(master) };
    let unlock: libc::c_int = 0;
    // SAFETY: ioctl on our master with a pointer to a live int.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(io::Error::last_os_error());
    }
    resize(master.as_fd(), cols, rows)?;
    // SAFETY: ioctl on our master; returns a new descriptor for the slave.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    Ok((above_stdio(master)?, above_stdio(slave)?))
}

/// Gives the terminal of `master` a new size; the kernel tells its
/// foreground process group (SIGWINCH).
pub fn resize(master: BorrowedFd<'_>, cols: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: ioctl with a pointer to a live winsize.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// In a child that has called `setsid`: makes the terminal `slave` its
/// controlling terminal. Returns the error number on failure.
///
/// # Safety
/// Async-signal-safe: callable between fork and exec.
pub unsafe fn make_controlling(slave: std::os::fd::RawFd) -> Result<(), i32> {
    // SAFETY: plain ioctl on a descriptor of the caller's.
    unsafe {
        if libc::ioctl(slave, libc::TIOCSCTTY, 0) != 0 {
            return Err(*libc::__errno_location());
        }
    }
    Ok(())
}

/// `fd`, moved above 2 if it is one of them (so a child's `dup2` onto
/// 0–2 cannot close it first).
pub fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: duplicates a descriptor we own.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn sizes_outside_the_range_are_refused_with_the_reason() {
        assert!(check_size(80, 24).is_ok());
        let e = check_size(0, 24).unwrap_err();
        assert!(e.contains("0 columns") && e.contains("at least 1"), "{e}");
        assert!(check_size(80, 5000).is_err());
    }

    #[test]
    fn a_new_terminal_has_its_size_and_carries_bytes_both_ways() {
        let (master, slave) = open(100, 30).unwrap();
        // SAFETY: an all-zero winsize is a valid value.
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: ioctl with a pointer to a live winsize.
        let rc = unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!(rc, 0);
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
        resize(master.as_fd(), 120, 40).unwrap();
        // SAFETY: as above.
        unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!((size.ws_col, size.ws_row), (120, 40));
        let mut slave = std::fs::File::from(slave);
        slave.write_all(b"out\n").unwrap();
        drop(slave);
        let mut master = std::fs::File::from(master);
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            match master.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                // The hang-up: every slave holder is gone.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"out\r\n", "the line discipline maps NL to CR NL");
    }
}
