//! Privilege: `sudo` and its kin (unwrapped), `su`, account and capability
//! tools, `chmod`/`chown` (a setuid bit, a recursive change of a system or home
//! directory).

use super::Cmd;
use super::options::{Opts, critical_path, recursive, targets, unwrap_after};
use super::shells::run_string;
use crate::Class::*;
use crate::walk::Walker;
use crate::words::Arg;

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "sudo" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "sudo runs commands as another user",
            );
            let opts = Opts::new(
                "ugpCDhrtTUR",
                &[
                    "--user",
                    "--group",
                    "--prompt",
                    "--close-from",
                    "--chdir",
                    "--host",
                    "--role",
                    "--type",
                    "--command-timeout",
                    "--other-user",
                    "--chroot",
                ],
            );
            unwrap_after(w, c, name, 1, &opts, true, None);
        }
        "sudoedit" => w.found(PrivilegeEscalation, c.args, "edits files as another user"),
        "doas" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "doas runs commands as another user",
            );
            unwrap_after(w, c, name, 1, &Opts::new("uC", &[]), false, None);
        }
        "pkexec" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "pkexec runs commands as another user",
            );
            unwrap_after(w, c, name, 1, &Opts::new("", &["--user"]), false, None);
        }
        "run0" => {
            w.found(
                PrivilegeEscalation,
                c.args,
                "run0 runs commands as another user",
            );
            let opts = Opts::new(
                "uDg",
                &[
                    "--user", "--group", "--chdir", "--setenv", "--unit", "--nice",
                ],
            );
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
        "su" | "runuser" => su(w, c, name),
        "setcap" => w.found(PrivilegeEscalation, c.args, "grants file capabilities"),
        "passwd" | "chpasswd" | "usermod" | "useradd" | "userdel" | "groupadd" | "groupmod"
        | "gpasswd" | "visudo" | "newgrp" | "sg" | "adduser" | "deluser" => w.found(
            PrivilegeEscalation,
            c.args,
            "changes accounts or privileges",
        ),
        "chmod" => chmod(w, c),
        "chown" | "chgrp" => {
            if recursive(c) && targets(c).iter().any(|t| critical_path(t)) {
                w.found(
                    SystemDestruction,
                    c.args,
                    "recursive ownership change of a system or home directory",
                );
            } else {
                w.found(Other, c.args, "changes ownership");
            }
        }
        _ => return false,
    }
    true
}

pub(super) fn su(w: &mut Walker, c: Cmd, name: &str) {
    w.found(PrivilegeEscalation, c.args, "runs commands as another user");
    for (i, a) in c.args.iter().enumerate().skip(1) {
        let t = a.text.as_str();
        if matches!(t, "-c" | "--command" | "--session-command") {
            if let Some(command) = c.args.get(i + 1) {
                run_string(w, command, name, c.stdin);
            }
            return;
        }
        for p in ["--command=", "--session-command="] {
            if let Some(v) = t.strip_prefix(p) {
                let command = Arg {
                    text: v.to_string(),
                    literal: a.literal,
                    procsubst: false,
                };
                run_string(w, &command, name, c.stdin);
                return;
            }
        }
    }
    if name == "runuser" {
        let opts = Opts::new(
            "ugGsw",
            &[
                "--user",
                "--group",
                "--supp-group",
                "--shell",
                "--whitelist-environment",
            ],
        );
        if c.has(&["-u", "--user"]) {
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
    }
}

fn chmod(w: &mut Walker, c: Cmd) {
    let t = targets(c);
    let mode = t.first().copied().unwrap_or_default();
    if setuid_mode(mode) {
        w.found(PrivilegeEscalation, c.args, "sets the setuid/setgid bit");
    } else if recursive(c) && t.iter().skip(1).any(|t| critical_path(t)) {
        w.found(
            SystemDestruction,
            c.args,
            "recursive mode change of a system or home directory",
        );
    } else {
        w.found(Other, c.args, "changes file modes");
    }
}

pub(super) fn setuid_mode(mode: &str) -> bool {
    if !mode.is_empty() && mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        let digits = mode.trim_start_matches('0');
        return digits.len() == 4 && matches!(digits.as_bytes()[0], b'2' | b'4' | b'6');
    }
    mode.split(',').any(|clause| {
        clause
            .find(['+', '='])
            .is_some_and(|i| clause[i..].contains('s'))
    })
}
