//! The race: an attacker swaps a real directory of the root with a symlink
//! out of it (`renameat2(RENAME_EXCHANGE)`, atomically, as fast as it can)
//! while the jail reads, creates, makes directories, walks and removes
//! through both names. The sentinel directory outside is never written,
//! its files never read, nothing of it removed.

use std::fs;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::jail_tests::{SENTINEL, plant, snapshot, w};
use super::*;

/// `renameat2(from_dir, from, to_dir, to, flags)`.
fn renameat2(
    from_dir: std::os::fd::BorrowedFd<'_>,
    from: &std::ffi::CStr,
    to_dir: std::os::fd::BorrowedFd<'_>,
    to: &std::ffi::CStr,
    flags: libc::c_uint,
) -> std::io::Result<()> {
    // SAFETY: descriptors we hold and NUL-terminated names.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            flags,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

const REAL: &[u8] = b"the real file, inside the root";

/// Whatever the jail read, it was never the sentinel.
#[track_caller]
fn never_the_sentinel(data: &[u8]) {
    assert_ne!(data, SENTINEL, "the jail returned the sentinel's content");
    assert_eq!(data, REAL, "only the real file has this name");
}

#[test]
fn swapping_a_directory_for_a_symlink_out_never_escapes() {
    let p = plant();
    let outside = &p.outside;
    fs::write(outside.join("f.txt"), SENTINEL).unwrap();
    fs::create_dir_all(outside.join("sub")).unwrap();
    fs::write(outside.join("sub/s.txt"), SENTINEL).unwrap();
    fs::create_dir_all(p.work.join("real/sub")).unwrap();
    fs::write(p.work.join("real/f.txt"), REAL).unwrap();
    symlink(outside, p.work.join("swap")).unwrap();
    let before = snapshot(outside);
    let jail = p.jail();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let attacker = {
        let (stop, swaps) = (Arc::clone(&stop), Arc::clone(&swaps));
        let root = sys::open_root(&p.work).unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                renameat2(
                    root.as_fd(),
                    c"real",
                    root.as_fd(),
                    c"swap",
                    libc::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    while swaps.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }

    let (start, mut ops, mut refusals, mut reads) = (Instant::now(), 0u64, 0u64, 0u64);
    let mut count = |r: Result<(), JailError>| {
        ops += 1;
        if r.is_err() {
            refusals += 1;
        }
    };
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(2) && i < 20_000 {
        for name in ["real", "swap"] {
            let at = |rel: &str| w(Path::new(name).join(rel));
            // Reads through the racing name: the real file or a refusal.
            for rel in ["f.txt", "../real/f.txt", "sub/../f.txt"] {
                if let Ok(data) = jail.read(&at(rel)) {
                    never_the_sentinel(&data);
                    reads += 1;
                }
            }
            assert!(
                jail.read(&at("sub/s.txt")).is_err(),
                "only the outside has sub/s.txt"
            );
            // Changes through it land inside the root or nowhere.
            count(jail.write(&at(&format!("new_{i}")), b"x"));
            count(jail.mkdir(&at(&format!("d_{i}"))));
            count(jail.write(&at(&format!("d_{i}/inner")), b"x"));
            count(jail.mkdir(&at(&format!("t_{i}"))));
            count(jail.mkdir(&at(&format!("t_{i}/deeper"))));
            count(jail.write(&at(&format!("t_{i}/deeper/z")), b"z"));
            if i.is_multiple_of(8) {
                // Its fsyncs cost milliseconds: fewer of them, more rounds.
                count(jail.replace_atomically(&at(&format!("r_{i}")), b"r"));
            }
            count(jail.remove_all(&at(&format!("t_{i}"))));
            count(jail.remove_all(&at("sub")));
            count(jail.mkdir(&at("sub")));
            count(
                jail.unlink(&at("f.txt"))
                    .and_then(|()| jail.write(&at("f.txt"), REAL)),
            );
            count(jail.chmod(&at("f.txt"), 0o600));
            count(jail.rename(&at(&format!("new_{i}")), &at(&format!("renamed_{i}"))));
            // A walk through it: entries inside the root, content never the sentinel.
            match jail.walk(&at("")) {
                Ok(walk) => {
                    for entry in walk.flatten() {
                        assert!(
                            entry.path().starts_with(&p.work),
                            "{}",
                            entry.path().display()
                        );
                        if entry.name() == "f.txt"
                            && let Ok(mut file) = jail.open_entry(&entry)
                        {
                            let mut data = Vec::new();
                            if std::io::Read::read_to_end(&mut file, &mut data).is_ok() {
                                never_the_sentinel(&data);
                            }
                        }
                    }
                    count(Ok(()));
                }
                Err(e) => count(Err(e)),
            }
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    eprintln!(
        "race: {i} rounds, {ops} changes and walks ({refusals} refused), {reads} reads, {} swaps",
        swaps.load(Ordering::Relaxed)
    );
    assert_eq!(snapshot(outside), before, "the outside changed");
    let (real, swap) = (p.work.join("real"), p.work.join("swap"));
    let dir = if real.is_dir() && !real.is_symlink() {
        real
    } else {
        swap
    };
    assert!(
        fs::read_dir(&dir).unwrap().count() > 2,
        "the changes landed in the real directory"
    );
}
