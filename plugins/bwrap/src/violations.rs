//! Refusals guessed from a command's stderr (SPEC F12 on Linux): lines that
//! say "Read-only file system", "Permission denied" or "Operation not
//! permitted", and a tool's own "DIR isn't writable" (a version manager
//! that checks before it rehashes), become `violation` events, with the path the line names,
//! once per exec. (The create-time guard reports exactly instead.) A
//! "Permission denied" naming a file that is an executable program, the
//! loader's "failed to map segment" and cargo's "could not execute process"
//! are exec refusals: `process-exec`, which exec grants change. What each
//! action means and what changes it is `sandbox_plugin_api::violation`.

use std::collections::HashSet;

use sandbox_plugin_api::SandboxViolation;
use sandbox_plugin_api::violation::{FILE_ACCESS, FILE_WRITE, OPERATION, PROCESS_EXEC};

/// The longest stderr line looked at; longer ones are cut.
const MAX_LINE: usize = 4096;

/// Watches one exec's stderr.
#[derive(Default)]
pub struct StderrWatch {
    partial: Vec<u8>,
    seen: HashSet<(String, String)>,
    /// The writable roots when the create-time guard runs: it reports its
    /// own refusals there exactly, so "Permission denied" in them is not
    /// guessed a second time.
    guarded_roots: Vec<std::path::PathBuf>,
    /// The exec's working directory, for relative paths a line names.
    cwd: std::path::PathBuf,
}

impl StderrWatch {
    /// A watch for a sandbox whose guard reports refusals under `roots`.
    pub fn guarded(roots: Vec<std::path::PathBuf>) -> Self {
        Self {
            guarded_roots: roots,
            ..Self::default()
        }
    }

    /// Relative paths in this exec's lines are taken from `cwd`.
    pub fn in_dir(mut self, cwd: std::path::PathBuf) -> Self {
        self.cwd = cwd;
        self
    }

    /// Whether `target` is an executable regular file (seen from the host,
    /// where the native backend shows binds at their own paths).
    fn is_program(&self, target: &str) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let path = self.cwd.join(target.trim_start_matches("./"));
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    fn reported_by_the_guard(&self, v: &SandboxViolation) -> bool {
        if self.guarded_roots.is_empty() || v.action != "file-access" {
            return false;
        }
        let target = std::path::Path::new(&v.target);
        !target.is_absolute()
            || self
                .guarded_roots
                .iter()
                .any(|root| target.starts_with(root))
    }

    /// Feeds a chunk; returns the new violations it completes.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SandboxViolation> {
        let mut found = Vec::new();
        for &byte in chunk {
            if byte == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                if let Some(v) = classify(&line, &|t| self.is_program(t))
                    && !self.reported_by_the_guard(&v)
                    && self.seen.insert((v.action.clone(), v.target.clone()))
                {
                    found.push(v);
                }
            } else if self.partial.len() < MAX_LINE {
                self.partial.push(byte);
            }
        }
        found
    }
}

/// The refusal a stderr line reports, if it reports one (no file looked at).
pub fn parse_line(line: &str) -> Option<SandboxViolation> {
    classify(line, &|_| false)
}

/// The refusal a stderr line reports; `is_program` says whether a path the
/// line names is an executable file (then a "Permission denied" about it
/// was an exec refused, not a read).
pub fn classify(line: &str, is_program: &dyn Fn(&str) -> bool) -> Option<SandboxViolation> {
    let (action, target) = if let Some(program) = exec_refused(line) {
        (PROCESS_EXEC, Some(program))
    } else if line.contains("Read-only file system") {
        (FILE_WRITE, target_of(line))
    } else if let Some(dir) = not_writable(line) {
        (FILE_WRITE, Some(dir))
    } else if line.contains("Permission denied") {
        let target = target_of(line);
        // A tool saying which file operation failed: about the file, not
        // an exec of it, even when the file is a program (`rm` of a
        // protected hook, `cp` over a built binary).
        let file_operation = [
            "cannot create",
            "cannot touch",
            "cannot open",
            "can't create",
            "cannot remove",
            "cannot move",
            "cannot overwrite",
            "cannot unlink",
            "cannot access",
            "cannot stat",
            "cannot read",
            "cannot write",
            "cannot copy",
            "cannot change",
        ]
        .iter()
        .any(|w| line.contains(w));
        match &target {
            Some(t) if !file_operation && is_program(t) => (PROCESS_EXEC, target),
            _ => (FILE_ACCESS, target),
        }
    } else if line.contains("Operation not permitted") || line.contains("EPERM") {
        (OPERATION, target_of(line))
    } else {
        return None;
    };
    Some(SandboxViolation {
        action: action.to_owned(),
        target: target.unwrap_or_default(),
        raw: Some(line.trim_end().to_owned()),
    })
}

/// The directory of a tool's own "… isn't writable" (`pyenv: cannot
/// rehash: /x/shims isn't writable`, rbenv's and nodenv's alike): it
/// checked before writing, so no errno line follows.
fn not_writable(line: &str) -> Option<String> {
    let at = line
        .find(" isn't writable")
        .or_else(|| line.find(" is not writable"))?;
    let before = &line[..at];
    let start = before.rfind(": ").map_or(0, |i| i + 2);
    let dir = before[start..].trim().trim_matches(['\'', '"', '`']);
    (dir.starts_with('/') || dir.starts_with("~/")).then(|| dir.to_owned())
}

/// The program of a line that can only mean an exec was refused: the
/// loader could not map a file executable (`noexec`), or cargo could not
/// start what it built.
fn exec_refused(line: &str) -> Option<String> {
    if line.contains("failed to map segment from shared object") {
        let program = line.split(": ").next()?.trim();
        return (!program.is_empty()).then(|| program.to_owned());
    }
    let rest = line.split("could not execute process `").nth(1)?;
    let program = rest.split(['`', ' ']).next()?;
    (!program.is_empty()).then(|| program.to_owned())
}

/// The path a message names: the first quoted one (`'…'`, `‘…’`, `"…"`,
/// `` `…' ``), else what follows "cannot create ", else the first
/// `: `-separated field that looks like a path.
fn target_of(line: &str) -> Option<String> {
    for (open, close) in [('\'', '\''), ('‘', '’'), ('`', '\''), ('"', '"')] {
        if let Some(start) = line.find(open) {
            let rest = &line[start + open.len_utf8()..];
            if let Some(end) = rest.find(close) {
                let quoted = &rest[..end];
                if !quoted.is_empty() {
                    return Some(quoted.to_owned());
                }
            }
        }
    }
    let fields: Vec<&str> = line.split(": ").map(str::trim).collect();
    let created = fields.iter().find_map(|f| f.strip_prefix("cannot create "));
    created
        .or_else(|| {
            fields
                .iter()
                .copied()
                .find(|f| f.starts_with('/') || f.starts_with("./") || f.starts_with("~/"))
        })
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines recorded from coreutils, dash, bash and git inside a sandbox.
    #[test]
    fn recorded_lines() {
        let cases = [
            (
                "touch: cannot touch '/w/ro/x': Read-only file system",
                Some(("file-write", "/w/ro/x")),
            ),
            (
                "sh: 1: cannot create /w/ro/x: Read-only file system",
                Some(("file-write", "/w/ro/x")),
            ),
            (
                "sh: 1: cannot create .bashrc: Read-only file system",
                Some(("file-write", ".bashrc")),
            ),
            (
                "bash: /w/.bashrc: Read-only file system",
                Some(("file-write", "/w/.bashrc")),
            ),
            (
                "mkdir: cannot create directory ‘/usr/x’: Read-only file system",
                Some(("file-write", "/usr/x")),
            ),
            (
                "cat: /etc/shadow: Permission denied",
                Some(("file-access", "/etc/shadow")),
            ),
            ("mv: cannot move 'a' to 'b': Device or resource busy", None),
            (
                "unshare: unshare failed: Operation not permitted",
                Some(("operation", "")),
            ),
            (
                "error: could not lock config file .git/config: Read-only file system",
                Some(("file-write", "")),
            ),
            (
                "pyenv: cannot rehash: /root/.pyenv/shims isn't writable",
                Some(("file-write", "/root/.pyenv/shims")),
            ),
            (
                "rbenv: cannot rehash: /home/u/.rbenv/shims is not writable",
                Some(("file-write", "/home/u/.rbenv/shims")),
            ),
            ("all good", None),
        ];
        for (line, want) in cases {
            let got = parse_line(line).map(|v| (v.action, v.target));
            let want = want.map(|(a, t)| (a.to_owned(), t.to_owned()));
            assert_eq!(got, want, "{line}");
        }
    }

    /// Exec refusals as the shells, the loader, env, Python and cargo print
    /// them (recorded inside a sandbox without a grant).
    #[test]
    fn exec_refusals_are_process_exec() {
        let programs = [
            "./t.sh",
            "/w/t.sh",
            "./a.out",
            "t.sh",
            "w/.git/hooks/update.sample",
        ];
        let is_program = |t: &str| programs.contains(&t);
        let cases = [
            ("sh: 1: ./t.sh: Permission denied", PROCESS_EXEC, "./t.sh"),
            (
                "bash: line 1: /w/t.sh: Permission denied",
                PROCESS_EXEC,
                "/w/t.sh",
            ),
            ("env: './a.out': Permission denied", PROCESS_EXEC, "./a.out"),
            (
                "PermissionError: [Errno 13] Permission denied: 't.sh'",
                PROCESS_EXEC,
                "t.sh",
            ),
            (
                "./t3: error while loading shared libraries: ./t3: failed to map segment from shared object",
                PROCESS_EXEC,
                "./t3",
            ),
            (
                "error: could not execute process `/w/target/debug/demo` (never executed)",
                PROCESS_EXEC,
                "/w/target/debug/demo",
            ),
            // Not programs, or writes: what they were before.
            (
                "cat: /etc/shadow: Permission denied",
                FILE_ACCESS,
                "/etc/shadow",
            ),
            (
                "sh: 1: cannot create ./t.sh: Permission denied",
                FILE_ACCESS,
                "./t.sh",
            ),
            (
                "rm: cannot remove 'w/.git/hooks/update.sample': Permission denied",
                FILE_ACCESS,
                "w/.git/hooks/update.sample",
            ),
            (
                "cp: cannot create regular file './t.sh': Permission denied",
                FILE_ACCESS,
                "./t.sh",
            ),
            (
                "mv: cannot move './t.sh' to 'x/t.sh': Permission denied",
                FILE_ACCESS,
                "./t.sh",
            ),
        ];
        for (line, action, target) in cases {
            let v = classify(line, &is_program).unwrap();
            assert_eq!(
                (v.action.as_str(), v.target.as_str()),
                (action, target),
                "{line}"
            );
        }
    }

    #[test]
    fn the_guards_own_refusals_are_not_guessed_again() {
        let mut watch = StderrWatch::guarded(vec!["/w".into()]);
        assert!(
            watch
                .feed(b"sh: 1: cannot create b.pem: Permission denied\n")
                .is_empty()
        );
        assert!(
            watch
                .feed(b"touch: cannot touch '/w/x.key': Permission denied\n")
                .is_empty()
        );
        assert_eq!(
            watch.feed(b"cat: /etc/shadow: Permission denied\n").len(),
            1,
            "outside the roots"
        );
        assert_eq!(
            watch
                .feed(b"touch: cannot touch '/w/x': Read-only file system\n")
                .len(),
            1
        );
    }

    #[test]
    fn lines_split_across_chunks_and_repeats_are_reported_once() {
        let mut watch = StderrWatch::default();
        assert!(watch.feed(b"touch: cannot touch '/x': Read-on").is_empty());
        let first =
            watch.feed(b"ly file system\ntouch: cannot touch '/x': Read-only file system\n");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].target, "/x");
        assert!(first[0].raw.as_deref().unwrap().starts_with("touch:"));
        let other = watch.feed(b"touch: cannot touch '/y': Read-only file system\n");
        assert_eq!(other.len(), 1);
    }
}
