//! `cc_server shell` driven through a real pseudo-terminal, as a person at
//! a terminal would (SPEC D3): the shell inside runs on a terminal of its
//! own (`tty`, `stty size`), follows a resize of ours, passes its exit
//! status back, and leaves our terminal's modes as it found them.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::util::*;

/// Reads the master until the screen holds `needle`.
fn read_until_shown(master: &mut std::fs::File, shown: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = [0u8; 4096];
    while !shown.contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} on the screen: {shown:?}"
        );
        let mut fd = libc::pollfd {
            fd: master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut fd, 1, 100) } <= 0 {
            continue;
        }
        match master.read(&mut buf) {
            Ok(n) => shown.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(e) => panic!("reading the terminal: {e}; shown: {shown:?}"),
        }
    }
}

fn modes(slave: &std::fs::File) -> libc::termios {
    // SAFETY: an all-zero termios is a valid value to fill.
    let mut modes: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: tcgetattr fills `modes` from an open terminal.
    let rc = unsafe { libc::tcgetattr(slave.as_raw_fd(), &mut modes) };
    assert_eq!(rc, 0);
    modes
}

/// D3: `cc_server shell --backend bwrap` gives a shell in the sandbox on a
/// terminal made inside it; a resize of our terminal reaches it; `exit 3`
/// is `cc_server`'s exit status 3; our terminal is back in its modes.
#[test]
fn shell_runs_a_sandboxed_shell_on_the_users_terminal() {
    require_bwrap!();
    let plugins = Plugins::with_bwrap();
    let work = tempfile::tempdir().unwrap();
    let mut on = CcServer::new(&plugins)
        .current_dir(work.path())
        .args(["shell", "--backend", "bwrap", "--", "sh", "-i"])
        .spawn_on_terminal(80, 24);
    let before = modes(&on.slave);
    let mut shown = String::new();
    read_until_shown(&mut on.master, &mut shown, "a shell in bwrap");
    on.master
        .write_all(b"tty; stty size; cat /proc/1/comm; echo do''ne-1\r")
        .unwrap();
    read_until_shown(&mut on.master, &mut shown, "done-1");
    assert!(shown.contains("/dev/pts/"), "{shown}");
    assert!(shown.contains("24 80"), "{shown}");
    assert!(
        shown.contains("pidns-reaper"),
        "not in the sandbox: {shown}"
    );
    let size = libc::winsize {
        ws_row: 40,
        ws_col: 100,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ with a live winsize on our own master.
    let rc = unsafe { libc::ioctl(on.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
    assert_eq!(rc, 0);
    // The size reaches the shell through cc_server's SIGWINCH; ask until it has.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut round = 0;
    loop {
        round += 1;
        let marker = format!("size-{round}");
        on.master
            .write_all(format!("echo \"$(stty size)\" {}\r", marker.replace('-', "''-")).as_bytes())
            .unwrap();
        read_until_shown(&mut on.master, &mut shown, &format!("{marker}\r"));
        if shown.contains(&format!("40 100 {marker}")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resize never arrived: {shown}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    on.master.write_all(b"exit 3\r").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = on.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "cc_server shell did not end: {shown}"
        );
        // Keep the screen drained so nothing blocks on a full terminal.
        let mut fd = libc::pollfd {
            fd: on.master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        if unsafe { libc::poll(&mut fd, 1, 100) } > 0 {
            let mut buf = [0u8; 4096];
            let _ = on.master.read(&mut buf);
        }
    };
    assert_eq!(status.code(), Some(3), "{shown}");
    let after = modes(&on.slave);
    assert_eq!(
        (after.c_lflag, after.c_iflag, after.c_oflag),
        (before.c_lflag, before.c_iflag, before.c_oflag),
        "the terminal was left in other modes"
    );
}
