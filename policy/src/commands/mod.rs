//! Classifies one simple command from its argv: unwraps wrappers, re-parses
//! shell strings, and matches programs to classes.

mod destruction;
mod escape;
mod forge;
mod git;
mod network;
mod options;
mod packages;
mod privilege;
mod read_only;
mod shells;
mod wrappers;

use crate::Class::*;
use crate::walk::{Stdin, Walker};
use crate::words::{Arg, shown};

/// One command being classified.
#[derive(Clone, Copy)]
struct Cmd<'a> {
    args: &'a [Arg],
    stdin: &'a Stdin,
    /// More arguments are appended at run time (`xargs`), so a missing
    /// subcommand is unknown rather than absent.
    appended: bool,
}

impl<'a> Cmd<'a> {
    fn with(self, args: &'a [Arg]) -> Self {
        Self { args, ..self }
    }
    fn text(&self, i: usize) -> Option<&'a str> {
        self.args.get(i).map(|a| a.text.as_str())
    }
    fn rest(&self, i: usize) -> &'a [Arg] {
        self.args.get(i..).unwrap_or_default()
    }
    fn has(&self, flags: &[&str]) -> bool {
        self.args
            .iter()
            .skip(1)
            .any(|a| flags.contains(&a.text.as_str()))
    }
    fn has_prefix(&self, prefixes: &[&str]) -> bool {
        self.args
            .iter()
            .skip(1)
            .any(|a| prefixes.iter().any(|p| a.text.starts_with(p)))
    }
}

/// Classify `args` (a simple command after redirects were taken off).
pub(crate) fn classify(w: &mut Walker, args: &[Arg], stdin: &Stdin, appended: bool) {
    let Some(first) = args.first() else { return };
    if !first.literal {
        w.computed_name(format!(
            "the command name is computed at run time: {}",
            shown(args)
        ));
        return;
    }
    if !w.enter() {
        return;
    }
    let c = Cmd {
        args,
        stdin,
        appended,
    };
    let name = program_name(&first.text);
    if matches!(name.as_str(), "cd" | "pushd" | "popd") {
        w.moved = true;
    }
    if w.is_function(&first.text) {
        w.found(
            ReadOnly,
            args,
            "calls a function defined in this line (its body is classified)",
        );
    } else {
        dispatch(w, &name, c);
    }
    w.leave();
}

/// `/usr/bin/python3.12` → `python`, `./mvnw` → `mvnw`, `pip3` → `pip`.
fn program_name(argv0: &str) -> String {
    let base = argv0.rsplit('/').next().unwrap_or(argv0);
    for family in ["python", "pip", "perl", "ruby", "node", "php", "lua"] {
        if let Some(rest) = base.strip_prefix(family)
            && !rest.is_empty()
            && rest.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        {
            return family.to_string();
        }
    }
    base.to_string()
}

/// Each family in turn; the first that knows `name` classifies it (the order
/// is the one the single `match` had, so a name two families know goes to the first).
fn dispatch(w: &mut Walker, name: &str, c: Cmd) {
    let known = privilege::dispatch(w, name, c)
        || wrappers::dispatch(w, name, c)
        || shells::dispatch(w, name, c)
        || git::dispatch(w, name, c)
        || forge::dispatch(w, name, c)
        || packages::dispatch(w, name, c)
        || network::dispatch(w, name, c)
        || destruction::dispatch(w, name, c)
        || escape::dispatch(w, name, c);
    if !known {
        read_only::dispatch(w, name, c);
    }
}

#[cfg(test)]
mod tests {
    use super::options::{critical_path, is_remote_spec};
    use super::privilege::setuid_mode;
    use super::read_only::sed;
    use super::*;

    #[test]
    fn critical_paths() {
        for p in [
            "/",
            "/*",
            "//",
            "/.",
            "~",
            "~/",
            "~/*",
            "$HOME",
            "$HOME/",
            "$HOME/*",
            "/etc",
            "/usr/",
            "/home/alice",
            "~bob",
            "/..",
        ] {
            assert!(critical_path(p), "{p}");
        }
        for p in [
            "",
            ".",
            "./build",
            "/tmp/x",
            "target",
            "/home/alice/project",
            "$BUILD_DIR",
            "*",
            "~/project",
        ] {
            assert!(!critical_path(p), "{p}");
        }
    }

    #[test]
    fn setuid_modes() {
        for m in [
            "u+s", "g+s", "+s", "ug=rwxs", "4755", "2755", "6755", "04755", "a+x,u+s",
        ] {
            assert!(setuid_mode(m), "{m}");
        }
        for m in ["755", "0755", "u+x", "go-w", "1777", "a=r", ""] {
            assert!(!setuid_mode(m), "{m}");
        }
    }

    #[test]
    fn program_names() {
        assert_eq!(program_name("/usr/bin/python3.12"), "python");
        assert_eq!(program_name("pip3"), "pip");
        assert_eq!(program_name("./mvnw"), "mvnw");
        assert_eq!(program_name("python-config"), "python-config");
        assert_eq!(program_name("git"), "git");
    }

    #[test]
    fn remote_specs() {
        assert!(is_remote_spec("host:/srv"));
        assert!(is_remote_spec("user@host:dir"));
        assert!(!is_remote_spec("./a:b"));
        assert!(!is_remote_spec("/local/dir"));
        assert!(!is_remote_spec("dir/file"));
    }

    #[test]
    fn sed_scripts() {
        assert!(sed(&["-n", "5p"]));
        assert!(sed(&["-n", "1,20p", "file"]));
        assert!(sed(&["-n", "$p"]));
        assert!(!sed(&["-n", "1w out"]));
        assert!(!sed(&["-i", "s/a/b/", "f"]));
        assert!(!sed(&["s/a/b/"]));
        assert!(!sed(&["-ni", "5p", "f"]));
    }
}
