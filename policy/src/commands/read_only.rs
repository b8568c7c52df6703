//! The read-only allowlist (what the read-only modes allow), `tee`, and the
//! fallback for every other program.

use super::Cmd;
use super::packages::{run_tool, tool};
use crate::Class::*;
use crate::walk::Walker;
use crate::words::Arg;

/// Classifies `c`: `tee`, a tool of the packages table, or the allowlist.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) {
    match name {
        "tee" => {
            // Writing into `>(…)` is a pipe; its commands were walked.
            let files: Vec<&Arg> = c
                .args
                .iter()
                .skip(1)
                .filter(|a| !a.text.starts_with('-') && !a.procsubst)
                .collect();
            if files.is_empty() {
                w.found(ReadOnly, c.args, "copies stdin to stdout");
            }
            for f in files {
                w.write_target(f, "tee");
            }
        }
        _ if tool(name).is_some() => run_tool(w, c, name),
        _ => match read_only(name, c) {
            Some(Ok(())) => w.found(ReadOnly, c.args, ""),
            Some(Err(why)) => w.found(Other, c.args, why),
            None => w.found(Other, c.args, ""),
        },
    }
}

/// `Some(Ok)`: read-only. `Some(Err(why))`: an allowlisted program used with
/// an option that writes or runs programs. `None`: not on the list.
pub(super) fn read_only(name: &str, c: Cmd) -> Option<Result<(), &'static str>> {
    #[rustfmt::skip]
    const ALWAYS: &[&str] = &[
        "ls", "dir", "vdir", "cat", "tac", "head", "tail", "wc", "nl", "grep", "egrep", "fgrep", "zgrep",
        "zcat", "bzcat", "xzcat", "echo", "printf", "pwd", "true", "false", "whoami", "id", "groups",
        "uname", "arch", "nproc", "uptime", "free", "ps", "pgrep", "which", "whereis", "type", "stat",
        "file", "du", "df", "basename", "dirname", "realpath", "readlink", "cut", "tr", "paste", "join",
        "comm", "cmp", "diff", "diff3", "fold", "fmt", "column", "expand", "unexpand", "rev", "seq", "od",
        "hexdump", "strings", "md5sum", "sha1sum", "sha224sum", "sha256sum", "sha384sum", "sha512sum",
        "b2sum", "cksum", "sum", "test", "[", "printenv", "locale", "getconf", "tty", "lsb_release", "lscpu",
        "lsblk", "jq", "look", "tsort", "numfmt", "expr", "sleep", ":", "wait", "jobs", "cd", "pushd",
        "popd", "dirs", "export", "unset", "set", "shopt", "local", "declare", "typeset", "readonly", "read",
        "shift", "exit", "return", "break", "continue", "times", "umask", "hash", "getopts", "let", "help",
        "ag", "yes", "zipinfo", "bat", "batcat", "cal", "env", "logname", "users", "who", "w", "last",
        "lsof", "ss", "netstat", "ifconfig", "tput", "stty", "clear", "mapfile", "readarray", "caller",
        "ulimit", "disown", "history", "unalias", "shasum", "sha1", "md5", "difft", "delta", "tokei", "cloc",
        "scc", "compgen",
    ];
    if ALWAYS.contains(&name) {
        return Some(Ok(()));
    }
    let args: Vec<&str> = c.args.iter().skip(1).map(|a| a.text.as_str()).collect();
    let has = |f: &str| args.contains(&f);
    let starts = |p: &str| args.iter().any(|a| a.starts_with(p));
    let r = match name {
        "rg" => {
            if starts("--pre") || starts("--hostname-bin") || has("-z") || has("--search-zip") {
                Err("`rg --pre`/`-z` run programs")
            } else {
                Ok(())
            }
        }
        "sort" => {
            let output = args.iter().any(|a| {
                a.starts_with("--output")
                    || a.starts_with("--compress-program")
                    || (a.starts_with("-o") && !a.starts_with("--"))
            });
            if output {
                Err("`sort -o` writes a file")
            } else {
                Ok(())
            }
        }
        "date" => {
            if args.iter().any(|a| *a == "-s" || a.starts_with("--set")) {
                Err("sets the clock")
            } else {
                Ok(())
            }
        }
        "hostname" => {
            if args.iter().any(|a| !a.starts_with('-')) {
                Err("sets the host name")
            } else {
                Ok(())
            }
        }
        "uniq" => {
            let mut positional = 0;
            let mut skip = false;
            for a in &args {
                if skip {
                    skip = false;
                } else if matches!(*a, "-f" | "-s" | "-w") {
                    skip = true;
                } else if !a.starts_with('-') || *a == "-" {
                    positional += 1;
                }
            }
            if positional > 1 {
                Err("`uniq IN OUT` writes a file")
            } else {
                Ok(())
            }
        }
        "tree" => {
            if has("-o") {
                Err("`tree -o` writes a file")
            } else {
                Ok(())
            }
        }
        "base64" | "base32" | "basenc" => {
            if has("-o") || starts("--output") {
                Err("writes a file")
            } else {
                Ok(())
            }
        }
        "xxd" => {
            let positional = args.iter().filter(|a| !a.starts_with('-')).count();
            if has("-r")
                || has("-revert")
                || positional > 2
                || (positional == 2
                    && !args
                        .iter()
                        .any(|a| matches!(*a, "-c" | "-g" | "-l" | "-s" | "-o" | "-n")))
            {
                Err("writes a file")
            } else {
                Ok(())
            }
        }
        "sed" => {
            if sed(&args) {
                Ok(())
            } else {
                Err("sed scripts can write files; only `sed -n Np` is read-only")
            }
        }
        "tar" => {
            let first = args.first().copied().unwrap_or_default();
            let cluster = first.trim_start_matches('-');
            let lists = (has("--list") || (!first.starts_with("--") && cluster.contains('t')))
                && !cluster.contains(['x', 'c', 'r', 'u', 'A'])
                && !has("--extract")
                && !has("--create");
            if lists {
                Ok(())
            } else {
                Err("creates or extracts an archive")
            }
        }
        "unzip" => {
            if has("-l") || has("-Z") || has("-t") || has("-v") {
                Ok(())
            } else {
                Err("extracts an archive")
            }
        }
        "yq" => {
            if has("-i") || starts("--inplace") {
                Err("edits files in place")
            } else {
                Ok(())
            }
        }
        "ack" => {
            if starts("--pager") || starts("--output") {
                Err("runs a pager")
            } else {
                Ok(())
            }
        }
        "gzip" | "gunzip" | "bzip2" | "xz" | "zstd" => {
            // Only the listing, testing and to-stdout forms.
            if has("-l")
                || has("--list")
                || has("-t")
                || has("--test")
                || has("-c")
                || has("--stdout")
            {
                Ok(())
            } else {
                Err("compresses or decompresses files in place")
            }
        }
        _ => return None,
    };
    Some(r)
}

/// `sed -n 5p`, `sed -n 1,20p file`, `sed -n '$p'`: print-only scripts.
pub(super) fn sed(args: &[&str]) -> bool {
    let mut quiet = false;
    let mut script: Option<&str> = None;
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a == "-n" || a == "--quiet" || a == "--silent" {
            quiet = true;
        } else if a == "-e" || a == "--expression" {
            if script.is_some() {
                return false;
            }
            script = args.get(i + 1).copied();
            i += 1;
        } else if a.starts_with('-') && a.len() > 1 {
            if a.starts_with("--") || a.contains(['i', 'f', 'e']) {
                return false;
            }
            quiet |= a.contains('n');
        } else if script.is_none() {
            script = Some(a);
        }
        i += 1;
    }
    let Some(script) = script else { return false };
    quiet
        && script.ends_with('p')
        && script.len() > 1
        && script[..script.len() - 1]
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b',' || b == b'$')
}
