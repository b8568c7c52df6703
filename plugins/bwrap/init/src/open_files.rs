//! The host's open-file table kept from the sandbox (threat model T39).
//!
//! `fs.file-max` bounds the open files of the whole host, not of a uid, and
//! the kernel keeps no count of them per sandbox: each costs a few hundred
//! bytes of the sandbox's memory limit, so one sandbox could fill the table
//! long before its memory runs out, and then every program of the host
//! without `CAP_SYS_ADMIN` fails to open anything (`ENFILE`). So PID 1
//! watches the table: a read of `/proc/sys/fs/file-nr` every
//! [`INTERVAL`]; only once it is past the watermark (by default half the
//! table, the sandboxes' budget, set by the backend) does it count what
//! the sandbox holds, and a sandbox over its share of that budget has every
//! command killed, with a violation saying why. A sandbox within its share
//! is left alone however full the table is. The table can pass the
//! watermark by what the sandboxes open in one interval at most.
//!
//! What is counted is an upper bound of the sandbox's open files: every
//! descriptor of every command (a descriptor shared
//! by `dup` counts each time) and every file-backed mapping (a mapping
//! holds its file after the descriptor is closed).

use std::io;
use std::time::Duration;

/// Between two reads of the table.
pub const INTERVAL: Duration = Duration::from_millis(50);

/// The sandbox's share and the table's watermark (`--counter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub share: u64,
    pub watermark: u64,
}

/// What is over: the sandbox's count and the table's, for the violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Over {
    pub held: u64,
    pub table: u64,
}

/// Whether the sandbox must be stopped: the table past the watermark and
/// the sandbox over its share. `held` is asked only when the table is past
/// it (counting walks `/proc`). Pure.
pub fn judge(table: u64, budget: Budget, held: impl FnOnce() -> u64) -> Option<Over> {
    if table <= budget.watermark {
        return None;
    }
    let held = held();
    (held > budget.share).then_some(Over { held, table })
}

/// The table's allocated entries: the first field of `file-nr`.
pub fn table() -> io::Result<u64> {
    parse_file_nr(&std::fs::read_to_string("/proc/sys/fs/file-nr")?)
        .ok_or_else(|| io::Error::other("/proc/sys/fs/file-nr: not three numbers"))
}

fn parse_file_nr(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

/// The open files of every process this PID 1 sees but itself.
pub fn held() -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return u64::MAX;
    };
    let mut total: u64 = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == 1 || !a_command(&entry.path()) {
            continue;
        }
        total = total.saturating_add(of_process(&entry.path()));
    }
    total
}

/// Whether the process is one of the commands: they live in a pid
/// namespace of their own below PID 1's, where the sandbox's machinery (the
/// forwarder, the `/proc` maker) is, but for that namespace's reaper.
/// `status` is readable whatever the
/// process made of itself; a process gone meanwhile is none.
fn a_command(dir: &std::path::Path) -> bool {
    std::fs::read_to_string(dir.join("status")).is_ok_and(|status| nested_pid(&status))
}

/// `NSpid` with two numbers or more (a pid namespace below the reader's),
/// the last not 1 (that namespace's reaper, `crate::namespaces`, which
/// holds no descriptor and is not dumpable).
fn nested_pid(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .is_some_and(|pids| {
            let pids: Vec<&str> = pids.split_whitespace().collect();
            pids.len() >= 2 && pids.last() != Some(&"1")
        })
}

/// One process's descriptors and file-backed mappings. A process gone
/// meanwhile counts nothing; one that cannot be read (a command that made
/// itself not dumpable: PID 1 holds no capability) counts as over, so
/// hiding is no way past the share.
fn of_process(dir: &std::path::Path) -> u64 {
    let gone = |e: &io::Error| {
        e.raw_os_error() == Some(libc::ENOENT) || e.raw_os_error() == Some(libc::ESRCH)
    };
    let descriptors = match std::fs::read_dir(dir.join("fd")) {
        Ok(fds) => fds.count() as u64,
        Err(e) if gone(&e) => return 0,
        Err(_) => return u64::MAX,
    };
    let mappings = match std::fs::read_to_string(dir.join("maps")) {
        Ok(maps) => file_mappings(&maps),
        Err(e) if gone(&e) => 0,
        Err(_) => return u64::MAX,
    };
    descriptors.saturating_add(mappings)
}

/// Lines of a `maps` file whose inode is not 0.
fn file_mappings(maps: &str) -> u64 {
    maps.lines()
        .filter(|line| {
            line.split_whitespace()
                .nth(4)
                .is_some_and(|inode| inode != "0")
        })
        .count() as u64
}

/// Watches the table on a thread of its own; `stop` is called with what
/// was over, once per time the sandbox is found over.
pub fn watch(budget: Budget, stop: impl Fn(Over) + Send + 'static) -> io::Result<()> {
    table()?;
    std::thread::Builder::new()
        .name("open-files".into())
        .spawn(move || {
            loop {
                std::thread::sleep(INTERVAL);
                // The table read before: a failing read now is a kernel's, not
                // the sandbox's doing; the next read tries again.
                let Ok(now) = table() else { continue };
                if let Some(over) = judge(now, budget, held) {
                    stop(over);
                }
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Budget = Budget {
        share: 1000,
        watermark: 50_000,
    };

    #[test]
    fn only_a_sandbox_over_its_share_of_a_full_table_is_stopped() {
        assert_eq!(
            judge(40_000, BUDGET, || panic!("counted below the watermark")),
            None
        );
        assert_eq!(judge(60_000, BUDGET, || 1000), None);
        assert_eq!(
            judge(60_000, BUDGET, || 1001),
            Some(Over {
                held: 1001,
                table: 60_000
            })
        );
    }

    #[test]
    fn the_table_and_the_mappings_are_read() {
        assert_eq!(parse_file_nr("2816\t0\t2466246\n"), Some(2816));
        assert_eq!(parse_file_nr(""), None);
        let maps = "55d0-55d1 r--p 00000000 fe:01 1234 /usr/bin/python3\n\
                    7ff0-7ff1 rw-p 00000000 00:00 0 \n\
                    7ff2-7ff3 r--s 00000000 00:05 99 /dev/zero (deleted)\n";
        assert_eq!(file_mappings(maps), 2);
    }

    #[test]
    fn commands_are_told_by_their_nested_pid() {
        assert!(nested_pid("Name:\tpython3\nNSpid:\t412\t7\n"));
        assert!(!nested_pid("Name:\tsandbox-init\nNSpid:\t3\n"));
        assert!(!nested_pid("Name:\tpidns-reaper\nNSpid:\t2\t1\n"));
        assert!(!nested_pid("Name:\tx\n"));
    }

    #[test]
    fn this_process_is_counted() {
        let dir = std::path::PathBuf::from(format!("/proc/{}", std::process::id()));
        assert!(of_process(&dir) > 3);
        assert_eq!(of_process(std::path::Path::new("/proc/999999999")), 0);
    }
}
