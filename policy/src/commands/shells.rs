//! Shells and interpreters: `bash -c '…'` is parsed again, a program read
//! from stdin or a pipe is opaque, inline non-shell code (`python3 -c`) and
//! named script files are [`Class::Other`](crate::Class::Other).

use super::Cmd;
use super::options::{Opts, dynamic};
use crate::Class::*;
use crate::walk::{Stdin, Walker};
use crate::words::{Arg, cut, shown};

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "sh" | "bash" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "rbash" | "yash" | "fish"
        | "posh" | "oksh" | "pdksh" | "tcsh" | "csh" => shell(w, c, name),
        "python" | "pypy" | "pypy3" => python(w, c, name),
        "node" | "nodejs" => interpreter(
            w,
            c,
            name,
            &["-e", "--eval", "-p", "--print"],
            &Opts::new("r", &["--require", "--import", "--loader", "--input-type"]),
        ),
        "perl" => interpreter(w, c, name, &["-e", "-E"], &Opts::new("", &[])),
        "ruby" => interpreter(w, c, name, &["-e"], &Opts::new("rIC", &[])),
        "php" => interpreter(w, c, name, &["-r"], &Opts::new("dcz", &[])),
        "lua" | "luajit" => interpreter(w, c, name, &["-e"], &Opts::new("l", &[])),
        "Rscript" => interpreter(w, c, name, &["-e"], &Opts::new("", &[])),
        "osascript" => interpreter(w, c, name, &["-e"], &Opts::new("l", &[])),
        "tclsh" | "wish" | "jshell" | "irb" | "ghci" => {
            interpreter(w, c, name, &[], &Opts::new("", &[]))
        }
        _ => return false,
    }
    true
}

pub(super) fn shell(w: &mut Walker, c: Cmd, name: &str) {
    let mut i = 1;
    let mut has_c = false;
    let mut stdin_flag = false;
    let mut info = false;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if t.starts_with('-') || t.starts_with('+') {
                dynamic(w, c, &format!("options of `{name}`"));
                i += 1;
                continue;
            }
            break;
        }
        match t {
            "--" | "-" => {
                i += 1;
                break;
            }
            "-o" | "+o" | "-O" | "+O" | "--rcfile" | "--init-file" => i += 2,
            "--version" | "--help" => {
                info = true;
                i += 1;
            }
            _ if t.starts_with("--") => i += 1,
            _ if (t.starts_with('-') || t.starts_with('+')) && t.len() > 1 => {
                let flags = &t[1..];
                has_c |= flags.contains('c');
                stdin_flag |= flags.contains('s');
                i += if flags.ends_with(['o', 'O']) { 2 } else { 1 };
            }
            _ => break,
        }
    }
    if has_c {
        match c.args.get(i) {
            Some(a) => run_string(w, a, &format!("{name} -c"), c.stdin),
            None => w.found(Other, c.args, "shell without a command string"),
        }
        return;
    }
    if info && i >= c.args.len() {
        w.found(ReadOnly, c.args, "prints shell information");
        return;
    }
    if !stdin_flag && let Some(script) = c.args.get(i) {
        let t = script.text.as_str();
        if script.procsubst {
            w.opaque(
                format!("`{}` runs a script produced at run time", shown(c.args)),
                None,
            );
        } else if t == "/dev/stdin" || t.starts_with("/dev/fd/") || t.starts_with("/proc/self/fd/")
        {
            from_stdin(w, c, name);
        } else {
            w.found(Other, c.args, "runs a shell script");
        }
        return;
    }
    from_stdin(w, c, name);
}

/// Run a shell command string (`bash -c`, `su -c`, `flock -c`, …).
pub(super) fn run_string(w: &mut Walker, a: &Arg, name: &str, stdin: &Stdin) {
    if a.literal {
        w.program(&a.text, stdin);
    } else {
        w.opaque(
            format!(
                "`{name}` runs a command string computed at run time: {}",
                cut(&a.text)
            ),
            Some(&a.text),
        );
    }
}

/// A shell that reads its commands from standard input.
pub(super) fn from_stdin(w: &mut Walker, c: Cmd, name: &str) {
    match c.stdin {
        Stdin::Literal(text) => w.program(text, &Stdin::Inherited),
        Stdin::Computed(template) => w.opaque(
            format!(
                "`{name}` runs commands produced at run time: {}",
                shown(c.args)
            ),
            template.as_deref(),
        ),
        Stdin::Pipe => w.opaque(format!("`{name}` runs commands read from a pipe"), None),
        Stdin::File => w.found(Other, c.args, "runs a shell script from a file"),
        Stdin::Inherited => w.opaque(
            format!("`{name}` runs commands read from standard input"),
            None,
        ),
    }
}

pub(super) fn python(w: &mut Walker, c: Cmd, name: &str) {
    // `-m MODULE` runs a module as a program: dispatch the well-known ones.
    let mut i = 1;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "-m" || (t.starts_with("-m") && t.len() > 2) {
            let (module, rest) = if t == "-m" {
                (c.text(i + 1), i + 2)
            } else {
                (Some(&t[2..]), i + 1)
            };
            let Some(module) = module else { break };
            let module = module.split('.').next().unwrap_or(module);
            match module {
                "pip" | "twine" | "pipx" | "poetry" | "uv" | "flit" | "hatch" => {
                    let mut args = vec![Arg::lit(module)];
                    args.extend(c.rest(rest).iter().cloned());
                    super::dispatch(w, &super::program_name(module), c.with(&args));
                }
                "ensurepip" => w.found(InstallPackage, c.args, "installs pip"),
                "http" => w.found(AccessNetwork, c.args, "serves or fetches over HTTP"),
                "json" | "pydoc" | "site" | "sysconfig" | "platform" => {
                    w.found(ReadOnly, c.args, "")
                }
                _ => w.found(Other, c.args, "runs a Python module"),
            }
            return;
        }
        if t == "-W" || t == "-X" || t == "--check-hash-based-pycs" {
            i += 2;
        } else if t.starts_with('-') && t.len() > 1 && !t.starts_with("-c") {
            i += 1;
        } else {
            break;
        }
    }
    interpreter(
        w,
        c,
        name,
        &["-c"],
        &Opts::new("WX", &["--check-hash-based-pycs"]),
    );
}

/// An interpreter: inline code is visible (not shell) and runs as Other;
/// code computed at run time or read from a pipe is opaque.
fn interpreter(w: &mut Walker, c: Cmd, name: &str, code_flags: &[&str], o: &Opts) {
    let mut i = 1;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        // A code flag: alone (`-e CODE`), attached (`-eCODE`, `--eval=CODE`),
        // or ending a cluster (`perl -pe CODE`). `Some(literal)` of the code.
        let code: Option<Option<bool>> = if code_flags.contains(&t) {
            Some(c.args.get(i + 1).map(|a| a.literal))
        } else if code_flags.iter().any(|f| {
            if f.starts_with("--") {
                t.strip_prefix(f).is_some_and(|r| r.starts_with('='))
            } else {
                t.len() > f.len() && t.starts_with(f)
            }
        }) {
            Some(Some(a.literal))
        } else if t.starts_with('-')
            && !t.starts_with("--")
            && t.len() > 2
            && code_flags
                .iter()
                .any(|f| f.len() == 2 && t.ends_with(&f[1..]))
        {
            Some(c.args.get(i + 1).map(|a| a.literal))
        } else {
            None
        };
        if let Some(code) = code {
            match code {
                Some(true) => w.found(Other, c.args, &format!("runs inline {name} code")),
                Some(false) => w.opaque(
                    format!("`{name}` runs code computed at run time: {}", shown(c.args)),
                    None,
                ),
                None => w.found(Other, c.args, "no code"),
            }
            return;
        }
        if matches!(t, "--version" | "-V" | "--help" | "-h" | "-v") {
            w.found(ReadOnly, c.args, &format!("prints {name} information"));
            return;
        }
        if t == "-" {
            break;
        }
        if t.starts_with('-') && t.len() > 1 {
            let takes_value = (t.starts_with("--") && o.long.contains(&t))
                || (!t.starts_with("--")
                    && t.len() == 2
                    && t[1..].chars().all(|ch| o.short.contains(ch)));
            i += if takes_value { 2 } else { 1 };
            continue;
        }
        // A script file.
        if a.procsubst {
            w.opaque(
                format!("`{}` runs a program produced at run time", shown(c.args)),
                None,
            );
        } else if t == "/dev/stdin" || t.starts_with("/dev/fd/") {
            interp_stdin(w, c, name);
        } else {
            w.found(Other, c.args, &format!("runs a {name} program"));
        }
        return;
    }
    interp_stdin(w, c, name);
}

fn interp_stdin(w: &mut Walker, c: Cmd, name: &str) {
    match c.stdin {
        Stdin::Literal(_) => w.found(Other, c.args, &format!("runs inline {name} code")),
        Stdin::File => w.found(Other, c.args, &format!("runs a {name} program from a file")),
        Stdin::Pipe => w.opaque(format!("`{name}` runs a program read from a pipe"), None),
        Stdin::Computed(_) => w.opaque(
            format!("`{name}` runs a program produced at run time"),
            None,
        ),
        Stdin::Inherited => w.opaque(
            format!("`{name}` runs a program read from standard input"),
            None,
        ),
    }
}
