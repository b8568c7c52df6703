//! `apply_patch`: several files added, changed, moved or deleted at once,
//! or none of them. The format (README, "The patch format"):
//!
//! ```text
//! *** Begin Patch
//! *** Add File: src/new.rs
//! +fn new() {}
//! *** Update File: src/lib.rs
//! *** Move to: src/core.rs
//! @@ fn main() {
//!  context line
//! -removed line
//! +added line
//! *** Delete File: src/old.rs
//! *** End Patch
//! ```
//!
//! A hunk (`@@`, with an optional line to find first) is its context and
//! removed lines, found in order in the file (exactly, then ignoring
//! trailing whitespace), replaced by its context and added lines;
//! `*** End of File` pins a hunk to the file's end. Everything is parsed
//! and every hunk applied in memory first ([`parse`], [`apply_hunks`]):
//! one that does not fit refuses the whole patch before any file is
//! touched. Then each file is written through the jail; if a write fails,
//! the files already written get their old content back.

use super::edit::make_parents;
use super::roots::Located;
use super::{SessionFiles, jail_failure};
use crate::failure::ToolError;
use sandbox_paths::jail::JailPath;

/// One file operation of a patch, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    Add {
        path: String,
        lines: Vec<String>,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

/// One hunk of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@` line's text: a line to find before the hunk.
    pub anchor: Option<String>,
    /// Context and removed lines, in order.
    pub old: Vec<String>,
    /// Context and added lines, in order.
    pub new: Vec<String>,
    /// `*** End of File`: the old lines end the file.
    pub at_end: bool,
}

/// A patch that cannot be applied, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, PatchError> {
    Err(PatchError(message.into()))
}

/// Parses a patch (pure).
pub fn parse(patch: &str) -> Result<Vec<FileOp>, PatchError> {
    let lines: Vec<&str> = patch.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.trim() == "*** Begin Patch")
        .ok_or_else(|| PatchError("the patch does not start with `*** Begin Patch`".into()))?;
    let mut ops = Vec::new();
    let mut i = start + 1;
    let mut ended = false;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "*** End Patch" {
            ended = true;
            break;
        }
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut added = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].starts_with("***") {
                match lines[i].strip_prefix('+') {
                    Some(text) => added.push(text.to_owned()),
                    None => {
                        return err(format!(
                            "line {}: a line of an added file starts with `+`",
                            i + 1
                        ));
                    }
                }
                i += 1;
            }
            ops.push(FileOp::Add {
                path: path.trim().to_owned(),
                lines: added,
            });
            continue;
        }
        if let Some(path) = line.strip_prefix("*** Delete File: ") {
            ops.push(FileOp::Delete {
                path: path.trim().to_owned(),
            });
            i += 1;
            continue;
        }
        if let Some(path) = line.strip_prefix("*** Update File: ") {
            i += 1;
            let mut move_to = None;
            if let Some(to) = lines.get(i).and_then(|l| l.strip_prefix("*** Move to: ")) {
                move_to = Some(to.trim().to_owned());
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            while i < lines.len() {
                let l = lines[i];
                if l.trim() == "*** End of File" {
                    match hunks.last_mut() {
                        Some(h) => h.at_end = true,
                        None => {
                            return err(format!("line {}: `*** End of File` before a hunk", i + 1));
                        }
                    }
                    i += 1;
                    continue;
                }
                if l.starts_with("***") {
                    break;
                }
                if let Some(anchor) = l.strip_prefix("@@") {
                    let anchor = anchor.trim();
                    hunks.push(Hunk {
                        anchor: (!anchor.is_empty()).then(|| anchor.to_owned()),
                        ..Hunk::default()
                    });
                    i += 1;
                    continue;
                }
                if hunks.is_empty() {
                    hunks.push(Hunk::default());
                }
                let Some(h) = hunks.last_mut() else {
                    return err("internal: no hunk");
                };
                match l.chars().next() {
                    Some(' ') => {
                        h.old.push(l[1..].to_owned());
                        h.new.push(l[1..].to_owned());
                    }
                    // An empty line is an empty context line.
                    None => {
                        h.old.push(String::new());
                        h.new.push(String::new());
                    }
                    Some('-') => h.old.push(l[1..].to_owned()),
                    Some('+') => h.new.push(l[1..].to_owned()),
                    Some(_) => {
                        return err(format!(
                            "line {}: a hunk line starts with ` `, `-` or `+`: {l:?}",
                            i + 1
                        ));
                    }
                }
                i += 1;
            }
            if hunks.iter().all(|h| h.old.is_empty() && h.new.is_empty()) && move_to.is_none() {
                return err(format!("`*** Update File: {}` has no hunk", path.trim()));
            }
            ops.push(FileOp::Update {
                path: path.trim().to_owned(),
                move_to,
                hunks,
            });
            continue;
        }
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        return err(format!(
            "line {}: expected `*** Add File:`, `*** Update File:`, `*** Delete File:` or \
             `*** End Patch`, found {line:?}",
            i + 1
        ));
    }
    if !ended {
        return err("the patch does not end with `*** End Patch`");
    }
    if ops.is_empty() {
        return err("the patch changes no file");
    }
    Ok(ops)
}

/// Where `needle` occurs in `hay` at or after `from`: exactly, else
/// ignoring trailing whitespace.
fn find(hay: &[String], needle: &[String], from: usize, at_end: bool) -> Option<usize> {
    if needle.is_empty() {
        return Some(if at_end { hay.len() } else { from });
    }
    let fits = |at: usize, eq: &dyn Fn(&str, &str) -> bool| {
        at + needle.len() <= hay.len() && needle.iter().zip(&hay[at..]).all(|(n, h)| eq(n, h))
    };
    let starts: Vec<usize> = if at_end {
        hay.len()
            .checked_sub(needle.len())
            .into_iter()
            .filter(|s| *s >= from)
            .collect()
    } else {
        (from..=hay.len().saturating_sub(needle.len())).collect()
    };
    let exact = |a: &str, b: &str| a == b;
    let loose = |a: &str, b: &str| a.trim_end() == b.trim_end();
    starts
        .iter()
        .copied()
        .find(|&s| fits(s, &exact))
        .or_else(|| starts.iter().copied().find(|&s| fits(s, &loose)))
}

/// A file's text with the hunks applied in order (pure).
pub fn apply_hunks(text: &str, hunks: &[Hunk], path: &str) -> Result<String, PatchError> {
    let ends_with_newline = text.is_empty() || text.ends_with('\n');
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cursor = 0usize;
    for (n, hunk) in hunks.iter().enumerate() {
        if let Some(anchor) = &hunk.anchor {
            let found = lines[cursor.min(lines.len())..]
                .iter()
                .position(|l| l.trim() == anchor.trim())
                .map(|k| cursor + k);
            match found {
                Some(at) => cursor = at,
                None => {
                    return err(format!(
                        "{path}: hunk {}: its `@@ {anchor}` line is not in the file",
                        n + 1
                    ));
                }
            }
        }
        let Some(at) = find(&lines, &hunk.old, cursor, hunk.at_end) else {
            let first = hunk.old.first().map(String::as_str).unwrap_or("");
            return err(format!(
                "{path}: hunk {} does not fit: its {} context and removed line(s) (from {first:?}) \
                 are not in the file in that order",
                n + 1,
                hunk.old.len()
            ));
        };
        lines.splice(at..at + hunk.old.len(), hunk.new.iter().cloned());
        cursor = at + hunk.new.len();
    }
    let mut out = lines.join("\n");
    if ends_with_newline && !lines.is_empty() {
        out.push('\n');
    }
    Ok(out)
}

/// One file's planned change.
#[derive(Debug)]
pub struct Change {
    pub located: Located,
    pub path: JailPath,
    /// The content now (`None`: the file does not exist).
    pub before: Option<Vec<u8>>,
    /// The content after (`None`: removed).
    pub after: Option<Vec<u8>>,
    /// A move's old name: where its content goes (a change of its own).
    pub moved_to: Option<String>,
    /// A move's new name (reported with the old one).
    pub move_target: bool,
}

/// Reads what the patch changes and applies it in memory: nothing on disk
/// changes. A change per file touched (a move is the old name removed and
/// the new one written).
pub fn plan(files: &SessionFiles, ops: &[FileOp]) -> Result<Vec<Change>, ToolError> {
    let mut changes: Vec<Change> = Vec::new();
    let read = |path: &str| -> Result<(Located, JailPath, Option<Vec<u8>>), ToolError> {
        let (located, jp) = files.locate(path)?;
        let guest = located.guest.display().to_string();
        let content = match files.jail.read(&jp) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(jail_failure(&guest, &e)),
        };
        Ok((located, jp, content))
    };
    let add = |changes: &mut Vec<Change>, change: Change| -> Result<(), ToolError> {
        if changes
            .iter()
            .any(|c| c.located.guest == change.located.guest)
        {
            return Err(ToolError::failed(format!(
                "apply_patch: {} is named twice; give each file one operation",
                change.located.guest.display()
            )));
        }
        changes.push(change);
        Ok(())
    };
    let patch_error = |e: PatchError| ToolError::failed(format!("apply_patch: {}", e.0));
    for op in ops {
        match op {
            FileOp::Add { path, lines } => {
                let (located, jp, before) = read(path)?;
                if before.is_some() {
                    return Err(ToolError::failed(format!(
                        "apply_patch: {path} exists already; use `*** Update File:`"
                    )));
                }
                let mut text = lines.join("\n");
                text.push('\n');
                add(
                    &mut changes,
                    Change {
                        located,
                        path: jp,
                        before: None,
                        after: Some(text.into_bytes()),
                        moved_to: None,
                        move_target: false,
                    },
                )?;
            }
            FileOp::Delete { path } => {
                let (located, jp, before) = read(path)?;
                if before.is_none() {
                    return Err(ToolError::failed(format!(
                        "apply_patch: {path} does not exist"
                    )));
                }
                add(
                    &mut changes,
                    Change {
                        located,
                        path: jp,
                        before,
                        after: None,
                        moved_to: None,
                        move_target: false,
                    },
                )?;
            }
            FileOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let (located, jp, before) = read(path)?;
                let Some(bytes) = &before else {
                    return Err(ToolError::failed(format!(
                        "apply_patch: {path} does not exist"
                    )));
                };
                let text = std::str::from_utf8(bytes).map_err(|_| {
                    ToolError::failed(format!("apply_patch: {path} is not UTF-8 text"))
                })?;
                let after = apply_hunks(text, hunks, path)
                    .map_err(patch_error)?
                    .into_bytes();
                match move_to {
                    None => add(
                        &mut changes,
                        Change {
                            located,
                            path: jp,
                            before,
                            after: Some(after),
                            moved_to: None,
                            move_target: false,
                        },
                    )?,
                    Some(to) => {
                        let (to_located, to_jp, existing) = read(to)?;
                        if existing.is_some() {
                            return Err(ToolError::failed(format!(
                                "apply_patch: cannot move {path} to {to}: it exists already"
                            )));
                        }
                        let moved_to = Some(to_located.guest.display().to_string());
                        add(
                            &mut changes,
                            Change {
                                located,
                                path: jp,
                                before,
                                after: None,
                                moved_to,
                                move_target: false,
                            },
                        )?;
                        add(
                            &mut changes,
                            Change {
                                located: to_located,
                                path: to_jp,
                                before: None,
                                after: Some(after),
                                moved_to: None,
                                move_target: true,
                            },
                        )?;
                    }
                }
            }
        }
    }
    Ok(changes)
}

/// Makes the planned changes; on a failure, puts back what was done.
pub fn commit(files: &SessionFiles, changes: &[Change]) -> Result<(), ToolError> {
    for (done, change) in changes.iter().enumerate() {
        if let Err(e) = make(files, change) {
            let mut undone = Vec::new();
            for earlier in changes[..done].iter().rev() {
                if let Err(u) = unmake(files, earlier) {
                    undone.push(format!("{}: {u}", earlier.located.guest.display()));
                }
            }
            let mut message = format!("apply_patch: nothing was changed, because {}", e.message);
            if !undone.is_empty() {
                message = format!(
                    "apply_patch: {}; and these could not be put back: {}",
                    e.message,
                    undone.join("; ")
                );
            }
            return Err(ToolError { message, ..e });
        }
    }
    Ok(())
}

fn make(files: &SessionFiles, change: &Change) -> Result<(), ToolError> {
    let guest = change.located.guest.display().to_string();
    match &change.after {
        Some(content) => {
            if change.before.is_none() {
                make_parents(files, &change.located)?;
            }
            files.jail.replace_atomically(&change.path, content)
        }
        None => files.jail.unlink(&change.path),
    }
    .map_err(|e| jail_failure(&guest, &e))
}

fn unmake(files: &SessionFiles, change: &Change) -> Result<(), String> {
    match &change.before {
        Some(old) => files.jail.replace_atomically(&change.path, old),
        None => files.jail.unlink(&change.path),
    }
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "*** Begin Patch
*** Add File: a.txt
+one
+two
*** Update File: b.txt
@@ fn main
 keep
-old
+new
*** Delete File: c.txt
*** End Patch";

    #[test]
    fn the_format_parses_into_file_operations() {
        let ops = parse(PATCH).unwrap();
        assert_eq!(ops.len(), 3);
        assert_eq!(
            ops[0],
            FileOp::Add {
                path: "a.txt".into(),
                lines: vec!["one".into(), "two".into()]
            }
        );
        let FileOp::Update { hunks, .. } = &ops[1] else {
            panic!("{ops:?}")
        };
        assert_eq!(hunks[0].anchor.as_deref(), Some("fn main"));
        assert_eq!(hunks[0].old, ["keep", "old"]);
        assert_eq!(hunks[0].new, ["keep", "new"]);
        assert_eq!(
            ops[2],
            FileOp::Delete {
                path: "c.txt".into()
            }
        );
    }

    #[test]
    fn malformed_patches_are_refused_saying_where() {
        assert!(parse("no header").unwrap_err().0.contains("Begin Patch"));
        assert!(
            parse("*** Begin Patch\n*** Add File: a\n+x\n")
                .unwrap_err()
                .0
                .contains("End Patch")
        );
        assert!(
            parse("*** Begin Patch\n*** Add File: a\nx\n*** End Patch")
                .unwrap_err()
                .0
                .contains("line 3")
        );
        assert!(
            parse("*** Begin Patch\n*** End Patch")
                .unwrap_err()
                .0
                .contains("no file")
        );
        assert!(
            parse("*** Begin Patch\nrandom\n*** End Patch")
                .unwrap_err()
                .0
                .contains("expected")
        );
    }

    #[test]
    fn hunks_apply_in_order_and_a_bad_one_says_which() {
        let text = "fn main() {\n    keep\n    old\n}\n";
        let hunk = Hunk {
            anchor: Some("fn main() {".into()),
            old: vec!["    keep".into(), "    old".into()],
            new: vec!["    keep".into(), "    new".into()],
            at_end: false,
        };
        assert_eq!(
            apply_hunks(text, std::slice::from_ref(&hunk), "f").unwrap(),
            "fn main() {\n    keep\n    new\n}\n"
        );
        let bad = Hunk {
            anchor: None,
            old: vec!["absent".into()],
            ..hunk.clone()
        };
        let e = apply_hunks(text, &[hunk, bad], "f").unwrap_err();
        assert!(e.0.contains("hunk 2 does not fit"), "{}", e.0);
        // Trailing whitespace is forgiven, not leading.
        let loose = Hunk {
            old: vec!["    old   ".into()],
            new: vec!["x".into()],
            ..Hunk::default()
        };
        assert_eq!(
            apply_hunks(text, &[loose], "f").unwrap(),
            "fn main() {\n    keep\nx\n}\n"
        );
        // Appending at the end of the file.
        let append = Hunk {
            new: vec!["tail".into()],
            at_end: true,
            ..Hunk::default()
        };
        assert_eq!(apply_hunks("a\n", &[append], "f").unwrap(), "a\ntail\n");
    }
}
