//! Option scanning shared by the families: which argument is the wrapped
//! command, the positional targets, the paths whose loss is a disaster.

use super::{Cmd, classify};
use crate::Class;
use crate::walk::Walker;
use crate::words::{Arg, shown};

/// Which options of a wrapper take a value.
pub(super) struct Opts {
    pub(super) short: &'static str,
    pub(super) long: &'static [&'static str],
}

impl Opts {
    pub(super) fn new(short: &'static str, long: &'static [&'static str]) -> Self {
        Self { short, long }
    }
}

/// The index of the first non-option argument from `start` (the wrapped
/// command), or `None`. Arguments computed at run time make the line opaque
/// and are skipped as if they were flags (best effort).
pub(super) fn scan(w: &mut Walker, c: Cmd, name: &str, start: usize, o: &Opts) -> Option<usize> {
    let mut i = start;
    let mut dynamic = false;
    let mut found = None;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            if t.starts_with('-') {
                dynamic = true;
                i += 1;
                continue;
            }
            // `sudo $CMD` — the command itself is computed; classify() says so.
            found = Some(i);
            break;
        }
        if t == "--" {
            found = (i + 1 < c.args.len()).then_some(i + 1);
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let has_eq = long.contains('=');
            i += if !has_eq && o.long.contains(&t) { 2 } else { 1 };
            continue;
        }
        if t.len() > 1 && t.starts_with('-') {
            let flags = &t[1..];
            let mut skip_next = false;
            for (k, ch) in flags.char_indices() {
                if o.short.contains(ch) {
                    skip_next = k + ch.len_utf8() == flags.len();
                    break;
                }
            }
            i += if skip_next { 2 } else { 1 };
            continue;
        }
        found = Some(i);
        break;
    }
    if dynamic {
        w.opaque(
            format!(
                "options of `{name}` are computed at run time: {}",
                shown(c.args)
            ),
            None,
        );
    }
    found
}

/// Unwrap a wrapper: skip its options (and `NAME=VALUE` pairs when
/// `assignments`), then classify the wrapped command. With no wrapped
/// command, record `alone` (if given).
pub(super) fn unwrap_after(
    w: &mut Walker,
    c: Cmd,
    name: &str,
    start: usize,
    o: &Opts,
    assignments: bool,
    alone: Option<Class>,
) {
    let Some(mut i) = scan(w, c, name, start, o) else {
        if let Some(class) = alone {
            w.found(class, c.args, "no command");
        }
        return;
    };
    if assignments {
        while c.args.get(i).is_some_and(|a| is_assignment(&a.text)) {
            i += 1;
        }
    }
    if i < c.args.len() {
        classify_rest(w, c, i);
    } else if let Some(class) = alone {
        w.found(class, c.args, "no command");
    }
}

pub(super) fn classify_rest(w: &mut Walker, c: Cmd, i: usize) {
    let rest = c.rest(i);
    if !rest.is_empty() {
        classify(w, rest, c.stdin, c.appended);
    }
}

pub(super) fn is_assignment(t: &str) -> bool {
    match t.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|ch: char| ch.is_ascii_digit())
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        }
        None => false,
    }
}

/// Index of the first positional argument from `start`, skipping options
/// and the values of `value_opts`.
pub(super) fn positional_index(c: Cmd, start: usize, value_opts: &[&str]) -> Option<usize> {
    let mut i = start;
    while i < c.args.len() {
        let t = c.args[i].text.as_str();
        if t == "--" {
            return (i + 1 < c.args.len()).then_some(i + 1);
        }
        if t.starts_with('-') && t.len() > 1 && c.args[i].literal {
            i += if value_opts.contains(&t) { 2 } else { 1 };
            continue;
        }
        return Some(i);
    }
    None
}

/// Positional (non-option) arguments.
pub(super) fn targets<'a>(c: Cmd<'a>) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut options_done = false;
    for a in c.args.iter().skip(1) {
        let t = a.text.as_str();
        if !options_done && t == "--" {
            options_done = true;
            continue;
        }
        if !options_done && t.starts_with('-') && t.len() > 1 {
            continue;
        }
        out.push(t);
    }
    out
}

pub(super) fn recursive(c: Cmd) -> bool {
    c.args.iter().skip(1).any(|a| {
        let t = a.text.as_str();
        t == "--recursive" || (t.starts_with('-') && !t.starts_with("--") && t.contains('R'))
    })
}

/// `/`, `/*`, `~`, `$HOME`, a top-level system directory, or one user's home.
pub(crate) fn critical_path(t: &str) -> bool {
    let t = t.trim();
    if t.is_empty() {
        return false;
    }
    let mut s = t.to_string();
    while s.contains("//") {
        s = s.replace("//", "/");
    }
    loop {
        let before = s.len();
        for suffix in ["/.*", "/*", "/.", "/"] {
            if let Some(stripped) = s.strip_suffix(suffix) {
                s = stripped.to_string();
            }
        }
        if s.len() == before {
            break;
        }
    }
    if s.is_empty() || s == "/.." {
        return true;
    }
    if s == "~" || s == "$HOME" || (s.starts_with('~') && !s.contains('/')) {
        return true;
    }
    const SYSTEM: [&str; 33] = [
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/usr",
        "/var",
        "/usr/bin",
        "/usr/lib",
        "/usr/local",
        "/usr/sbin",
        "/var/lib",
        "/Users",
        "/System",
        "/Library",
        "/Applications",
        "/private",
        "/nix",
        "/snap",
        "/mnt",
        "/media",
        "/Volumes",
    ];
    if SYSTEM.contains(&s.as_str()) {
        return true;
    }
    for home in ["/home/", "/Users/"] {
        if let Some(user) = s.strip_prefix(home) {
            return !user.is_empty() && !user.contains('/');
        }
    }
    false
}

/// `host:path` or `user@host:path` (but not `./a:b` or `/a:b`).
pub(super) fn is_remote_spec(t: &str) -> bool {
    if t.starts_with(['/', '.', '~']) {
        return false;
    }
    match t.find(':') {
        Some(i) => !t[..i].contains('/') && i > 0,
        None => false,
    }
}

/// The command without its argument `k` (`poetry self add x` → `poetry add x`).
pub(super) fn drop_arg(c: Cmd, k: usize) -> Vec<Arg> {
    c.args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != k)
        .map(|(_, a)| a.clone())
        .collect()
}

pub(super) fn dynamic(w: &mut Walker, c: Cmd, what: &str) {
    w.opaque(
        format!("the {what} is computed at run time: {}", shown(c.args)),
        None,
    );
}
