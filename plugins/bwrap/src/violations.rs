//! Refusals guessed from a command's stderr (SPEC F12 on Linux): lines that
//! say "Read-only file system", "Permission denied" or "Operation not
//! permitted" become `violation` events, with the path the line names,
//! once per exec. (The create-time guard reports exactly instead.)

use std::collections::HashSet;

use sandbox_plugin_api::SandboxViolation;

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
}

impl StderrWatch {
    /// A watch for a sandbox whose guard reports refusals under `roots`.
    pub fn guarded(roots: Vec<std::path::PathBuf>) -> Self {
        Self {
            guarded_roots: roots,
            ..Self::default()
        }
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
                if let Some(v) = parse_line(&line)
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

/// The refusal a stderr line reports, if it reports one.
pub fn parse_line(line: &str) -> Option<SandboxViolation> {
    let action = if line.contains("Read-only file system") {
        "file-write"
    } else if line.contains("Permission denied") {
        "file-access"
    } else if line.contains("Operation not permitted") || line.contains("EPERM") {
        "operation"
    } else {
        return None;
    };
    Some(SandboxViolation {
        action: action.to_owned(),
        target: target_of(line).unwrap_or_default(),
        raw: Some(line.trim_end().to_owned()),
    })
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
            ("all good", None),
        ];
        for (line, want) in cases {
            let got = parse_line(line).map(|v| (v.action, v.target));
            let want = want.map(|(a, t)| (a.to_owned(), t.to_owned()));
            assert_eq!(got, want, "{line}");
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
