//! `write` and `edit`: one file's new content, planned first (decoded, or
//! read and replaced in memory), then written through the jail in one
//! atomic replace — a reader sees the old content or the new, never part.

use std::path::{Component, PathBuf};

use base64::Engine as _;
use sandbox_paths::jail::{JailError, JailPath};

use super::roots::{Located, Roots};
use super::{SessionFiles, jail_failure};
use crate::args::{EditArgs, WriteArgs, WriteEncoding};
use crate::failure::ToolError;

/// A change of one file, planned and not yet made.
#[derive(Debug)]
pub struct Planned {
    pub located: Located,
    pub path: JailPath,
    pub content: Vec<u8>,
    /// Whether the file exists now.
    pub exists: bool,
    /// `edit`: how many replacements the content holds.
    pub replacements: u64,
}

/// Why an exact replacement cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplaceError {
    NotFound,
    /// Found this many times, and not every one was asked for.
    NotUnique(usize),
    EmptyOld,
}

/// `old` replaced by `new` in `text`: exactly once unless `all` (pure).
pub fn replace_exact(
    text: &str,
    old: &str,
    new: &str,
    all: bool,
) -> Result<(String, usize), ReplaceError> {
    if old.is_empty() {
        return Err(ReplaceError::EmptyOld);
    }
    let count = text.matches(old).count();
    match (count, all) {
        (0, _) => Err(ReplaceError::NotFound),
        (1, _) | (_, true) => Ok((text.replace(old, new), count)),
        (n, false) => Err(ReplaceError::NotUnique(n)),
    }
}

pub fn plan_write(files: &SessionFiles, args: &WriteArgs) -> Result<Planned, ToolError> {
    let (located, path) = files.locate(&args.path)?;
    let content = match args.encoding {
        Some(WriteEncoding::Base64) => base64::engine::general_purpose::STANDARD
            .decode(args.content.as_bytes())
            .map_err(|e| ToolError::failed(format!("content: not base64: {e}")))?,
        _ => args.content.clone().into_bytes(),
    };
    let exists = match files.jail.stat(&path, false) {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => false,
        Err(e @ JailError::Refused(_)) => {
            return Err(jail_failure(&located.guest.display().to_string(), &e));
        }
        Err(_) => false,
    };
    Ok(Planned {
        located,
        path,
        content,
        exists,
        replacements: 0,
    })
}

pub fn plan_edit(files: &SessionFiles, args: &EditArgs) -> Result<Planned, ToolError> {
    let (located, path) = files.locate(&args.path)?;
    let guest = located.guest.display().to_string();
    let bytes = files
        .jail
        .read(&path)
        .map_err(|e| jail_failure(&guest, &e))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        ToolError::failed(format!(
            "edit {guest}: the file is not UTF-8 text; `write` it whole instead"
        ))
        .at(&guest)
    })?;
    let (content, count) = replace_exact(
        &text,
        &args.old_string,
        &args.new_string,
        args.replace_all,
    )
    .map_err(|e| {
        let message = match e {
            ReplaceError::NotFound => format!(
                "edit {guest}: old_string does not occur in the file (exactly, whitespace included)"
            ),
            ReplaceError::NotUnique(n) => format!(
                "edit {guest}: old_string occurs {n} times; give more context to make it \
                     unique, or set replace_all"
            ),
            ReplaceError::EmptyOld => format!("edit {guest}: old_string is empty"),
        };
        let mut error = ToolError::failed(message).at(&guest);
        if let ReplaceError::NotUnique(n) = e {
            error = error.with("occurrences", n.into());
        }
        error
    })?;
    Ok(Planned {
        located,
        path,
        content: content.into_bytes(),
        exists: true,
        replacements: count as u64,
    })
}

/// Makes the directories a new file needs (each judged by the jail as a
/// creation), then replaces the file's content atomically.
pub fn commit(files: &SessionFiles, planned: &Planned) -> Result<(), ToolError> {
    let guest = planned.located.guest.display().to_string();
    if !planned.exists {
        make_parents(files, &planned.located)?;
    }
    files
        .jail
        .replace_atomically(&planned.path, &planned.content)
        .map_err(|e| jail_failure(&guest, &e))
}

/// Creates each missing directory above a located path, one name at a
/// time beneath its root.
pub fn make_parents(files: &SessionFiles, located: &Located) -> Result<(), ToolError> {
    let label = Roots::label(located.root);
    let mut prefix = PathBuf::new();
    let parts: Vec<Component<'_>> = located.relative.components().collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        prefix.push(part);
        if !matches!(part, Component::Normal(_)) {
            continue;
        }
        let dir = JailPath::in_root(&label, &prefix);
        match files.jail.mkdir(&dir) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => {
                let shown = files.roots.roots()[located.root].guest.join(&prefix);
                return Err(jail_failure(&shown.display().to_string(), &e));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_unique_replacement_or_the_count() {
        assert_eq!(
            replace_exact("a b a", "b", "c", false),
            Ok(("a c a".into(), 1))
        );
        assert_eq!(
            replace_exact("a b a", "a", "x", false),
            Err(ReplaceError::NotUnique(2))
        );
        assert_eq!(
            replace_exact("a b a", "a", "x", true),
            Ok(("x b x".into(), 2))
        );
        assert_eq!(
            replace_exact("abc", "z", "x", false),
            Err(ReplaceError::NotFound)
        );
        assert_eq!(
            replace_exact("abc", "", "x", true),
            Err(ReplaceError::EmptyOld)
        );
        // Exact: whitespace counts.
        assert_eq!(
            replace_exact("fn  main", "fn main", "x", false),
            Err(ReplaceError::NotFound)
        );
    }
}
