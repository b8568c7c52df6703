//! System destruction: `rm -rf` of a system or home directory, writes to
//! devices, disk tools, stopping the machine, killing every process.

use super::Cmd;
use super::options::{critical_path, targets};
use crate::Class::*;
use crate::walk::Walker;
use crate::words::is_harmless_sink;

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "rm" => rm(w, c),
        "dd" => {
            let dev = c.args.iter().skip(1).any(|a| {
                a.text
                    .strip_prefix("of=")
                    .is_some_and(|t| t.starts_with("/dev/") && !is_harmless_sink(t))
            });
            if dev {
                w.found(SystemDestruction, c.args, "writes to a device");
            } else {
                w.found(Other, c.args, "copies data");
            }
        }
        "shred" | "wipe" => {
            if targets(c)
                .iter()
                .any(|t| t.starts_with("/dev/") || critical_path(t))
            {
                w.found(SystemDestruction, c.args, "overwrites a device");
            } else {
                w.found(Other, c.args, "overwrites files");
            }
        }
        "wipefs" | "mke2fs" | "mkswap" | "fdisk" | "sfdisk" | "sgdisk" | "gdisk" | "cfdisk"
        | "parted" | "blkdiscard" | "mkdosfs" | "mkntfs" | "badblocks" | "cryptsetup"
        | "lvremove" | "vgremove" | "pvremove" | "zpool" | "diskutil" => w.found(
            SystemDestruction,
            c.args,
            "formats, partitions or erases disks",
        ),
        n if n.starts_with("mkfs") => w.found(SystemDestruction, c.args, "formats a file system"),
        "shutdown" | "reboot" | "halt" | "poweroff" | "killall5" => w.found(
            SystemDestruction,
            c.args,
            "stops the machine or every process",
        ),
        "init" | "telinit" => {
            if c.args.len() > 1 {
                w.found(SystemDestruction, c.args, "changes the run level");
            } else {
                w.found(Other, c.args, "init");
            }
        }
        "systemctl" => {
            if matches!(
                c.text(1),
                Some(
                    "poweroff"
                        | "reboot"
                        | "halt"
                        | "kexec"
                        | "emergency"
                        | "rescue"
                        | "soft-reboot"
                )
            ) {
                w.found(SystemDestruction, c.args, "stops the machine");
            } else if matches!(
                c.text(1),
                Some(
                    "status"
                        | "list-units"
                        | "list-unit-files"
                        | "is-active"
                        | "is-enabled"
                        | "show"
                        | "cat"
                )
            ) {
                w.found(ReadOnly, c.args, "queries systemd");
            } else {
                w.found(Other, c.args, "controls services");
            }
        }
        "kill" | "pkill" => kill(w, c),
        "mv" => {
            let t = targets(c);
            if t.len() > 1 && t[..t.len() - 1].iter().any(|t| critical_path(t)) {
                w.found(
                    SystemDestruction,
                    c.args,
                    "moves a system or home directory away",
                );
            } else {
                w.found(Other, c.args, "moves files");
            }
        }
        _ => return false,
    }
    true
}

pub(super) fn rm(w: &mut Walker, c: Cmd) {
    let mut forceful = false;
    let mut no_preserve = false;
    let mut targets: Vec<&str> = Vec::new();
    let mut options_done = false;
    for a in c.args.iter().skip(1) {
        let t = a.text.as_str();
        if !options_done && t == "--" {
            options_done = true;
        } else if !options_done && t.starts_with("--") {
            no_preserve |= t == "--no-preserve-root";
            forceful |= matches!(t, "--recursive" | "--force");
        } else if !options_done && t.starts_with('-') && t.len() > 1 {
            forceful |= t.contains(['r', 'R', 'f']);
        } else {
            targets.push(t);
        }
    }
    if no_preserve {
        w.found(SystemDestruction, c.args, "--no-preserve-root");
    } else if forceful && targets.iter().any(|t| critical_path(t)) {
        w.found(
            SystemDestruction,
            c.args,
            "removes a system or home directory",
        );
    } else {
        w.found(Other, c.args, "removes files");
    }
}

pub(super) fn kill(w: &mut Walker, c: Cmd) {
    // kill [-s SIG | -SIG | -n NUM] [--] PID…; a PID of -1 is every process.
    let mut i = 1;
    let mut signal_seen = false;
    let mut pids_only = false;
    let mut every = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if !pids_only && (t == "-s" || t == "-n" || t == "--signal") {
            signal_seen = true;
            i += 2;
            continue;
        }
        if !pids_only && t == "--" {
            pids_only = true;
            i += 1;
            continue;
        }
        if !pids_only && !signal_seen && t.starts_with('-') && t.len() > 1 {
            signal_seen = true;
            i += 1;
            continue;
        }
        if t == "-1" {
            every = true;
        }
        i += 1;
    }
    if every {
        w.found(SystemDestruction, c.args, "kills every process");
    } else {
        w.found(Other, c.args, "signals processes");
    }
}
