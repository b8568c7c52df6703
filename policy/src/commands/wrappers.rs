//! Wrappers that run another command (`env`, `nice`, `timeout`, `xargs`,
//! `find -exec`, …) are unwrapped and the wrapped command classified; shell
//! text handed to `eval`, `source`, `trap`, `alias` is parsed again.

use super::options::{
    Opts, classify_rest, critical_path, dynamic, is_assignment, scan, unwrap_after,
};
use super::shells::{from_stdin, run_string};
use super::{Cmd, classify};
use crate::Class::*;
use crate::walk::{Stdin, Walker};
use crate::words::{Arg, cut, shown};

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "env" => env(w, c),
        "nice" => unwrap_after(
            w,
            c,
            name,
            1,
            &Opts::new("n", &["--adjustment"]),
            false,
            Some(ReadOnly),
        ),
        "nohup" | "setsid" | "builtin" | "unbuffer" | "catchsegv" => {
            unwrap_after(w, c, name, 1, &Opts::new("", &[]), false, Some(ReadOnly))
        }
        "timeout" => {
            let opts = Opts::new("sk", &["--signal", "--kill-after"]);
            match scan(w, c, name, 1, &opts) {
                Some(i) => classify_rest(w, c, i + 1),
                None => w.found(ReadOnly, c.args, "no command"),
            }
        }
        "time" => unwrap_after(
            w,
            c,
            name,
            1,
            &Opts::new("of", &["--output", "--format"]),
            false,
            Some(ReadOnly),
        ),
        "command" => {
            if c.text(1)
                .is_some_and(|t| t.starts_with('-') && (t.contains('v') || t.contains('V')))
            {
                w.found(ReadOnly, c.args, "looks a command up");
            } else {
                unwrap_after(w, c, name, 1, &Opts::new("", &[]), false, Some(ReadOnly));
            }
        }
        "exec" => unwrap_after(w, c, name, 1, &Opts::new("a", &[]), false, Some(ReadOnly)),
        "stdbuf" => {
            let opts = Opts::new("ioe", &["--input", "--output", "--error"]);
            unwrap_after(w, c, name, 1, &opts, false, Some(ReadOnly));
        }
        "ionice" | "chrt" | "taskset" => {
            if c.has(&["-p", "--pid", "--pgid", "-P", "-u", "--uid"]) {
                w.found(Other, c.args, "changes another process's scheduling");
                return true;
            }
            let opts = match name {
                "ionice" => Opts::new("cn", &["--class", "--classdata"]),
                "chrt" => Opts::new(
                    "TPD",
                    &["--sched-runtime", "--sched-period", "--sched-deadline"],
                ),
                _ => Opts::new("", &[]),
            };
            match scan(w, c, name, 1, &opts) {
                // ionice takes the command right away; chrt and taskset a
                // priority or a mask first.
                Some(i) if name == "ionice" => classify_rest(w, c, i),
                Some(i) => classify_rest(w, c, i + 1),
                None => w.found(ReadOnly, c.args, "shows scheduling settings"),
            }
        }
        "flock" => flock(w, c),
        "watch" => watch(w, c),
        "xargs" => xargs(w, c),
        "find" => find(w, c),
        "fd" | "fdfind" => fd(w, c),
        "busybox" | "toybox" => {
            if c.args.len() > 1 {
                classify_rest(w, c, 1);
            } else {
                w.found(ReadOnly, c.args, "lists applets");
            }
        }
        "strace" | "ltrace" => {
            w.found(Other, c.args, "traces a process");
            let opts = Opts::new(
                "eopsuEPIbaXOS",
                &["--output", "--trace", "--signal", "--user"],
            );
            unwrap_after(w, c, name, 1, &opts, false, None);
        }
        "script" => script(w, c),
        "parallel" => {
            // A guess at what runs: the command with the argument lists
            // spliced in (`parallel git ::: push` runs `git push`).
            let words: Vec<&str> = c
                .args
                .iter()
                .skip(1)
                .map(|a| a.text.as_str())
                .filter(|t| !t.starts_with('-') && !t.starts_with(":::"))
                .collect();
            let template = words.join(" ");
            w.opaque(
                format!(
                    "GNU parallel runs its arguments through a shell: {}",
                    shown(c.args)
                ),
                Some(&template),
            );
        }
        "eval" => eval(w, c),
        "source" | "." => source(w, c),
        "trap" => trap(w, c),
        "alias" => alias(w, c),
        _ => return false,
    }
    true
}

pub(super) fn env(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if is_assignment(t) {
                i += 1;
                continue;
            }
            if t.starts_with('-') {
                dynamic(w, c, "options of `env`");
                i += 1;
                continue;
            }
            break;
        }
        match t {
            "-i" | "-" | "--ignore-environment" | "-0" | "--null" | "-v" | "--debug" => i += 1,
            "-u" | "--unset" | "-C" | "--chdir" | "-P" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            "-S" | "--split-string" => {
                let value = c.args.get(i + 1).cloned().unwrap_or_else(|| Arg::lit(""));
                env_split(w, c, &value, i + 2);
                return;
            }
            _ if t.starts_with("--split-string=") || (t.starts_with("-S") && t.len() > 2) => {
                let value = t.strip_prefix("--split-string=").unwrap_or_else(|| &t[2..]);
                let value = Arg {
                    text: value.to_string(),
                    literal: a.literal,
                    procsubst: false,
                };
                env_split(w, c, &value, i + 1);
                return;
            }
            _ if t.starts_with("--") => i += 1,
            _ if t.starts_with('-') && t.len() > 1 => {
                i += if t.ends_with(['u', 'C', 'P']) { 2 } else { 1 };
            }
            _ if is_assignment(t) => i += 1,
            _ => break,
        }
    }
    if i < c.args.len() {
        classify_rest(w, c, i);
    } else {
        w.found(ReadOnly, c.args, "prints the environment");
    }
}

/// `env -S STRING rest…`: split STRING into words and go on as `env`.
fn env_split(w: &mut Walker, c: Cmd, value: &Arg, rest: usize) {
    if !value.literal {
        dynamic(w, c, "`env -S` string");
        return;
    }
    match w.split_words(&value.text) {
        Some(words) => {
            let mut args = vec![Arg::lit("env")];
            args.extend(words);
            args.extend(c.rest(rest).iter().cloned());
            if w.enter() {
                env(w, c.with(&args));
                w.leave();
            }
        }
        None => w.opaque(
            format!("cannot split `env -S {}`", cut(&value.text)),
            Some(&value.text),
        ),
    }
}

fn flock(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut command: Option<&Arg> = None;
    let mut lockfile_seen = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-c" | "--command" => {
                command = c.args.get(i + 1);
                break;
            }
            "-w" | "--wait" | "--timeout" | "-E" | "--conflict-exit-code" => i += 2,
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ if !lockfile_seen => {
                lockfile_seen = true;
                i += 1;
            }
            _ => {
                classify_rest(w, c, i);
                return;
            }
        }
    }
    match command {
        Some(a) => run_string(w, a, "flock", c.stdin),
        None => w.found(ReadOnly, c.args, "takes a lock"),
    }
}

pub(super) fn watch(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut exec = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-n" | "--interval" | "-q" | "--equexit" => i += 2,
            "-x" | "--exec" => {
                exec = true;
                i += 1;
            }
            "--" => {
                i += 1;
                break;
            }
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ => break,
        }
    }
    if i >= c.args.len() {
        w.found(ReadOnly, c.args, "no command");
    } else if exec {
        classify_rest(w, c, i);
    } else {
        join_and_run(w, c, i, "watch");
    }
}

/// Join `args[i..]` with spaces and run it as shell (`eval`, `watch`).
fn join_and_run(w: &mut Walker, c: Cmd, i: usize, name: &str) {
    let rest = c.rest(i);
    let text = rest
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    if rest.iter().all(|a| a.literal) {
        w.program(&text, c.stdin);
    } else {
        w.opaque(
            format!("`{name}` runs text computed at run time: {}", cut(&text)),
            Some(&text),
        );
    }
}

pub(super) fn xargs(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut replace: Option<String> = None;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            dynamic(w, c, "arguments of `xargs`");
            return;
        }
        match t {
            "-I" => {
                replace = c.args.get(i + 1).map(|a| a.text.clone());
                i += 2;
            }
            "-i" | "--replace" => {
                replace = Some("{}".to_string());
                i += 1;
            }
            "-L" | "-n" | "-P" | "-a" | "-d" | "-E" | "-s" => i += 2,
            "--" => {
                i += 1;
                break;
            }
            _ if t.starts_with("--replace=") => {
                replace = Some(t["--replace=".len()..].to_string());
                i += 1;
            }
            _ if t.starts_with("-I") => {
                replace = Some(t[2..].to_string());
                i += 1;
            }
            _ if t.starts_with("-i") => {
                replace = Some(t[2..].to_string());
                i += 1;
            }
            _ if t.starts_with('-') && t.len() > 1 => i += 1,
            _ => break,
        }
    }
    if i >= c.args.len() {
        w.found(ReadOnly, c.args, "xargs runs echo");
        return;
    }
    let inner: Vec<Arg> = c
        .rest(i)
        .iter()
        .map(|a| match &replace {
            Some(r) if !r.is_empty() && a.text.contains(r.as_str()) => Arg {
                literal: false,
                ..a.clone()
            },
            _ => a.clone(),
        })
        .collect();
    let empty = Stdin::Literal(String::new());
    classify(w, &inner, &empty, true);
}

/// `find … -exec CMD {} ;` and friends; find's own class depends on its
/// actions.
pub(super) fn find(w: &mut Walker, c: Cmd) {
    let mut starts: Vec<&str> = Vec::new();
    let mut i = 1;
    // Leading -H/-L/-P/-O3/-D x options, then start paths.
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if matches!(t, "-H" | "-L" | "-P") || t.starts_with("-O") {
            i += 1;
        } else if t == "-D" {
            i += 2;
        } else {
            break;
        }
    }
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t.starts_with('-') || t == "(" || t == "!" {
            break;
        }
        starts.push(t);
        i += 1;
    }
    let mut deletes = false;
    let mut writes = false;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        match t {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = (i + 1..c.args.len())
                    .find(|&k| matches!(c.args[k].text.as_str(), ";" | "+"))
                    .unwrap_or(c.args.len());
                per_file_command(w, &c.args[i + 1..end], "{}");
                i = end + 1;
            }
            "-delete" => {
                deletes = true;
                i += 1;
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                writes = true;
                i += 1;
            }
            _ => i += 1,
        }
    }
    if deletes && starts.iter().any(|s| critical_path(s)) {
        w.found(
            SystemDestruction,
            c.args,
            "deletes a system or home directory tree",
        );
    } else if deletes || writes {
        w.found(Other, c.args, "deletes or writes files");
    } else {
        w.found(ReadOnly, c.args, "");
    }
}

/// The command `find -exec` / `fd -x` runs per file: words holding the
/// file placeholder (`{}` for find; `{`, `{/}`, … for fd) are known only at
/// run time.
fn per_file_command(w: &mut Walker, args: &[Arg], placeholder: &str) {
    let inner: Vec<Arg> = args
        .iter()
        .map(|a| Arg {
            literal: a.literal && !a.text.contains(placeholder),
            ..a.clone()
        })
        .collect();
    classify(w, &inner, &Stdin::Literal(String::new()), false);
}

/// `fd … -x CMD` / `-X CMD`.
pub(super) fn fd(w: &mut Walker, c: Cmd) {
    let exec = c
        .args
        .iter()
        .position(|a| matches!(a.text.as_str(), "-x" | "--exec" | "-X" | "--exec-batch"));
    match exec {
        Some(i) => {
            w.found(ReadOnly, &c.args[..i], "");
            let end = (i + 1..c.args.len())
                .find(|&k| c.args[k].text == ";")
                .unwrap_or(c.args.len());
            per_file_command(w, &c.args[i + 1..end], "{");
        }
        None => w.found(ReadOnly, c.args, ""),
    }
}

pub(super) fn script(w: &mut Walker, c: Cmd) {
    w.found(Other, c.args, "records a terminal session to a file");
    let mut i = 1;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "-c" || t == "--command" {
            if let Some(a) = c.args.get(i + 1) {
                run_string(w, a, "script", c.stdin);
            }
            return;
        }
        if let Some(v) = t.strip_prefix("--command=") {
            let a = Arg {
                text: v.to_string(),
                literal: c.args[i].literal,
                procsubst: false,
            };
            run_string(w, &a, "script", c.stdin);
            return;
        }
        i += 1;
    }
}

pub(super) fn eval(w: &mut Walker, c: Cmd) {
    if c.args.len() < 2 {
        w.found(ReadOnly, c.args, "evaluates nothing");
        return;
    }
    join_and_run(w, c, 1, "eval");
}

pub(super) fn source(w: &mut Walker, c: Cmd) {
    let Some(file) = c.args.get(1) else {
        w.found(ReadOnly, c.args, "no file");
        return;
    };
    let t = file.text.as_str();
    if file.procsubst {
        w.opaque(
            format!("`{}` runs commands produced at run time", shown(c.args)),
            None,
        );
    } else if t == "/dev/stdin"
        || t == "-"
        || t.starts_with("/dev/fd/")
        || t.starts_with("/proc/self/fd/")
    {
        from_stdin(w, c, "source");
    } else {
        w.found(Other, c.args, "runs a shell script in this shell");
    }
}

fn trap(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    if matches!(c.text(1), Some("-p" | "-l" | "-P")) || c.args.len() < 2 {
        w.found(ReadOnly, c.args, "lists traps");
        return;
    }
    if c.text(1) == Some("--") {
        i = 2;
    }
    w.found(
        ReadOnly,
        c.args,
        "sets a signal handler (its commands are classified)",
    );
    if let Some(action) = c.args.get(i)
        && !matches!(action.text.as_str(), "-" | "")
    {
        run_string(w, action, "trap", &Stdin::Inherited);
    }
}

pub(super) fn alias(w: &mut Walker, c: Cmd) {
    w.found(
        ReadOnly,
        c.args,
        "defines aliases (their commands are classified)",
    );
    for a in c.args.iter().skip(1) {
        if let Some((_, value)) = a.text.split_once('=') {
            let value = Arg {
                text: value.to_string(),
                literal: a.literal,
                procsubst: false,
            };
            run_string(w, &value, "alias", &Stdin::Inherited);
        }
    }
}
