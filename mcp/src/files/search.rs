//! `search`, `search_files` and `find`: a walk of the jail's descriptors
//! (each directory opened beneath its parent, never by path again, so one
//! swapped for a symlink mid-walk is skipped and reported), with
//! ripgrep's libraries for what is found:
//!
//! - `.gitignore` lines are read through the jail and matched with
//!   `ignore`'s gitignore matcher (never its walker, which opens paths
//!   itself); ignored directories are not entered; hidden names are left
//!   out unless asked for, `.git` always — ripgrep's defaults;
//! - contents are searched by `grep-searcher` with a `grep-regex` matcher
//!   over each file the jail opened (binary files stop at their first NUL).
//!
//! `search` gives matching lines; `search_files` only which files match and
//! how many lines each (ripgrep's `-c`), for "where is X used" without the
//! lines; `find` matches names or relative paths against a glob, contents
//! unread.

// The type of a file the jail opened (no path is opened here).
use std::fs;

use std::io::Read;
use std::path::{Path, PathBuf};

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use sandbox_paths::jail::{EntryKind, JailPath, WalkEntry};

use super::{SessionFiles, jail_failure};
use crate::args::{
    FileMatches, FindArgs, FindOutput, SearchArgs, SearchFilesArgs, SearchFilesOutput, SearchMatch,
    SearchOutput,
};
use crate::failure::ToolError;

/// Results a call gives unless told otherwise.
const DEFAULT_RESULTS: u32 = 200;
const DEFAULT_FIND_RESULTS: u32 = 500;
/// Results a call gives at most.
const MAX_RESULTS: u32 = 10_000;
/// A matching line is cut after this many bytes.
const MAX_LINE: usize = 500;
/// A `.gitignore` larger than this is not read.
const MAX_GITIGNORE: u64 = 1 << 20;

/// What to walk and what to leave out.
struct Scope<'a> {
    files: &'a SessionFiles,
    start: JailPath,
    /// The start as the agent named it.
    guest: String,
    hidden: bool,
    no_ignore: bool,
    /// Over the path relative to the start.
    glob: Option<globset::GlobMatcher>,
}

/// What a visit says about the walk.
enum Flow {
    Go,
    Stop,
}

/// A file or directory the walk found: its canonical host path, its path
/// relative to the start, whether it is a directory, and the walk's entry
/// (none for a start that is a file).
struct Found<'e> {
    host: PathBuf,
    relative: &'e Path,
    dir: bool,
    entry: Option<WalkEntry>,
}

/// Files searched per batch: the walk holds their directories open until
/// the batch is done, and the batch is shared among the workers.
const BATCH: usize = 256;

fn compile_glob(
    glob: Option<&str>,
    by_name: bool,
) -> Result<Option<globset::GlobMatcher>, ToolError> {
    let Some(glob) = glob else { return Ok(None) };
    let pattern = if by_name && !glob.contains('/') {
        format!("**/{glob}")
    } else {
        glob.to_owned()
    };
    globset::GlobBuilder::new(&pattern)
        .literal_separator(true)
        .build()
        .map(|g| Some(g.compile_matcher()))
        .map_err(|e| ToolError::failed(format!("glob {glob:?}: {e}")))
}

fn matcher(pattern: &str, case_insensitive: bool, fixed: bool) -> Result<RegexMatcher, ToolError> {
    RegexMatcherBuilder::new()
        .case_insensitive(case_insensitive)
        .fixed_strings(fixed)
        .build(pattern)
        .map_err(|e| ToolError::failed(format!("pattern: {e}")))
}

fn searcher() -> Searcher {
    SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(0))
        .line_number(true)
        .build()
}

impl<'a> Scope<'a> {
    fn new(
        files: &'a SessionFiles,
        path: Option<&str>,
        hidden: bool,
        no_ignore: bool,
        glob: Option<globset::GlobMatcher>,
    ) -> Result<Self, ToolError> {
        let input = path.unwrap_or(".");
        let (located, start) = files.locate(input)?;
        Ok(Self {
            files,
            start,
            guest: located.guest.display().to_string(),
            hidden,
            no_ignore,
            glob,
        })
    }

    /// The gitignore rules of `dir` (a canonical host path), read through
    /// the jail; none when it has no readable `.gitignore`.
    fn gitignore(&self, dir: &Path) -> Option<Gitignore> {
        let file = dir.join(".gitignore");
        let mut opened = self.files.jail.open_read(&JailPath::host(&file)).ok()?;
        let mut text = String::new();
        (&mut opened)
            .take(MAX_GITIGNORE)
            .read_to_string(&mut text)
            .ok()?;
        let mut builder = GitignoreBuilder::new(dir);
        for line in text.lines() {
            let _ = builder.add_line(Some(file.clone()), line);
        }
        builder.build().ok()
    }

    /// Walks the start (a file: just it), calling `visit` with each file
    /// and directory kept. Returns what could not be walked.
    fn walk(&self, mut visit: impl FnMut(Found<'_>) -> Flow) -> Result<Vec<String>, ToolError> {
        let jail = &self.files.jail;
        let meta = jail
            .stat(&self.start, true)
            .map_err(|e| jail_failure(&self.guest, &e))?;
        let mut skipped = Vec::new();
        if !meta.is_dir() {
            visit(Found {
                host: PathBuf::new(),
                relative: Path::new(""),
                dir: false,
                entry: None,
            });
            return Ok(skipped);
        }
        let mut walk = jail
            .walk(&self.start)
            .map_err(|e| jail_failure(&self.guest, &e))?;
        let mut base: Option<PathBuf> = None;
        // The gitignore rules in force: each directory's, nearest last.
        let mut ignores: Vec<(PathBuf, Gitignore)> = Vec::new();
        while let Some(next) = walk.next() {
            let entry = match next {
                Ok(entry) => entry,
                Err(e) => {
                    skipped.push(jail_failure(&self.guest, &e).message);
                    continue;
                }
            };
            let host = entry.path();
            let base = base.get_or_insert_with(|| {
                let parent = host.parent().unwrap_or(Path::new("/")).to_path_buf();
                if !self.no_ignore
                    && let Some(rules) = self.gitignore(&parent)
                {
                    ignores.push((parent.clone(), rules));
                }
                parent
            });
            while ignores
                .last()
                .is_some_and(|(dir, _)| !host.starts_with(dir) || host == *dir)
            {
                ignores.pop();
            }
            let dir = entry.kind() == EntryKind::Dir;
            let name = entry.name().to_string_lossy();
            let hidden = name.starts_with('.');
            let left_out = (dir && name == ".git")
                || (hidden && !self.hidden)
                || (!self.no_ignore && ignored(&ignores, &host, dir));
            if left_out || entry.kind() == EntryKind::Symlink || entry.kind() == EntryKind::Other {
                if dir {
                    walk.skip_dir();
                }
                continue;
            }
            if dir
                && !self.no_ignore
                && let Some(rules) = self.gitignore(&host)
            {
                ignores.push((host.clone(), rules));
            }
            let relative = host.strip_prefix(&*base).unwrap_or(&host).to_path_buf();
            if !dir
                && let Some(glob) = &self.glob
                && !glob.is_match(&relative)
            {
                continue;
            }
            let found = Found {
                host,
                relative: &relative,
                dir,
                entry: Some(entry),
            };
            if let Flow::Stop = visit(found) {
                break;
            }
        }
        Ok(skipped)
    }

    fn guest(&self, found: &Found<'_>) -> String {
        if found.host.as_os_str().is_empty() {
            self.guest.clone()
        } else {
            self.files.guest_of(&found.host)
        }
    }
}

/// Whether the nearest gitignore that has a say ignores `path`.
fn ignored(ignores: &[(PathBuf, Gitignore)], path: &Path, dir: bool) -> bool {
    for (_, rules) in ignores.iter().rev() {
        match rules.matched(path, dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

fn cap(max: Option<u32>, default: u32) -> usize {
    max.unwrap_or(default).clamp(1, MAX_RESULTS) as usize
}

/// Searches the contents of every file the walk keeps: in batches, each
/// shared among the workers (the walk itself is one thread), each file
/// opened through the jail by the worker that searches it. `per_file`
/// turns one file into its result; `take` is handed the results in walk
/// order and says when to stop.
fn search_contents<R: Send>(
    scope: &Scope<'_>,
    per_file: &(dyn Fn(&mut Searcher, &fs::File, &str) -> Result<R, String> + Sync),
    mut take: impl FnMut(String, R) -> Flow,
) -> Result<(u64, Vec<String>), ToolError> {
    let jail = &scope.files.jail;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let mut searched = 0u64;
    let mut failures = Vec::new();
    let mut batch: Vec<(String, Option<WalkEntry>)> = Vec::with_capacity(BATCH);
    let mut stopped = false;
    let mut run = |batch: &mut Vec<(String, Option<WalkEntry>)>, failures: &mut Vec<String>| {
        let chunk = batch.len().div_ceil(workers).max(1);
        let results: Vec<Vec<(String, Result<R, String>)>> = std::thread::scope(|threads| {
            let handles: Vec<_> = batch
                .chunks(chunk)
                .map(|part| {
                    threads.spawn(move || {
                        let mut searcher = searcher();
                        part.iter()
                            .map(|(path, entry)| {
                                let opened = match entry {
                                    Some(entry) => jail.open_entry(entry),
                                    None => jail.open_read(&scope.start),
                                };
                                let result = match opened {
                                    Ok(file) => per_file(&mut searcher, &file, path),
                                    Err(e) => Err(jail_failure(path, &e).message),
                                };
                                (path.clone(), result)
                            })
                            .collect()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        batch.clear();
        for (path, result) in results.into_iter().flatten() {
            match result {
                Ok(found) => {
                    searched += 1;
                    if let Flow::Stop = take(path, found) {
                        return Flow::Stop;
                    }
                }
                Err(why) => failures.push(why),
            }
        }
        Flow::Go
    };
    let mut skipped = scope.walk(|found| {
        if found.dir {
            return Flow::Go;
        }
        batch.push((scope.guest(&found), found.entry));
        if batch.len() == BATCH
            && let Flow::Stop = run(&mut batch, &mut failures)
        {
            stopped = true;
            return Flow::Stop;
        }
        Flow::Go
    })?;
    if !stopped && !batch.is_empty() {
        run(&mut batch, &mut failures);
    }
    skipped.append(&mut failures);
    Ok((searched, skipped))
}

pub fn search(files: &SessionFiles, args: &SearchArgs) -> Result<SearchOutput, ToolError> {
    let matcher = matcher(&args.pattern, args.case_insensitive, args.fixed_strings)?;
    let glob = compile_glob(args.glob.as_deref(), true)?;
    let scope = Scope::new(
        files,
        args.path.as_deref(),
        args.hidden,
        args.no_ignore,
        glob,
    )?;
    let max = cap(args.max_results, DEFAULT_RESULTS);
    let per_file = |searcher: &mut Searcher, file: &fs::File, path: &str| {
        let mut lines = Vec::new();
        searcher
            .search_file(
                &matcher,
                file,
                Lossy(|line, text| {
                    let text = text.trim_end_matches(['\n', '\r']);
                    let mut end = text.len().min(MAX_LINE);
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    lines.push(SearchMatch {
                        path: path.to_owned(),
                        line,
                        text: text[..end].to_owned(),
                    });
                    // No file gives more than the whole call may.
                    Ok(lines.len() <= max)
                }),
            )
            .map_err(|e| format!("{path}: {e}"))?;
        Ok(lines)
    };
    let mut matches = Vec::new();
    let mut truncated = false;
    let (searched, skipped) = search_contents(&scope, &per_file, |_, found: Vec<SearchMatch>| {
        for m in found {
            if matches.len() == max {
                truncated = true;
                return Flow::Stop;
            }
            matches.push(m);
        }
        Flow::Go
    })?;
    Ok(SearchOutput {
        matches,
        truncated,
        files_searched: searched,
        skipped,
    })
}

pub fn search_files(
    files: &SessionFiles,
    args: &SearchFilesArgs,
) -> Result<SearchFilesOutput, ToolError> {
    let matcher = matcher(&args.pattern, args.case_insensitive, args.fixed_strings)?;
    let glob = compile_glob(args.glob.as_deref(), true)?;
    let scope = Scope::new(
        files,
        args.path.as_deref(),
        args.hidden,
        args.no_ignore,
        glob,
    )?;
    let max = cap(args.max_results, DEFAULT_RESULTS);
    let per_file = |searcher: &mut Searcher, file: &fs::File, path: &str| {
        let mut count = 0u64;
        searcher
            .search_file(
                &matcher,
                file,
                Lossy(|_, _| {
                    count += 1;
                    Ok(true)
                }),
            )
            .map_err(|e| format!("{path}: {e}"))?;
        Ok(count)
    };
    let mut found_files = Vec::new();
    let mut truncated = false;
    let (searched, skipped) = search_contents(&scope, &per_file, |path, count| {
        if count > 0 {
            if found_files.len() == max {
                truncated = true;
                return Flow::Stop;
            }
            found_files.push(FileMatches {
                path,
                matching_lines: count,
            });
        }
        Flow::Go
    })?;
    Ok(SearchFilesOutput {
        files: found_files,
        truncated,
        files_searched: searched,
        skipped,
    })
}

pub fn find(files: &SessionFiles, args: &FindArgs) -> Result<FindOutput, ToolError> {
    let glob = compile_glob(Some(&args.pattern), true)?;
    let scope = Scope::new(
        files,
        args.path.as_deref(),
        args.hidden,
        args.no_ignore,
        None,
    )?;
    let max = cap(args.max_results, DEFAULT_FIND_RESULTS);
    let mut paths = Vec::new();
    let mut truncated = false;
    let skipped = scope.walk(|found| {
        let hit = glob.as_ref().is_some_and(|g| g.is_match(found.relative));
        if hit {
            if paths.len() == max {
                truncated = true;
                return Flow::Stop;
            }
            let mut path = scope.guest(&found);
            if found.dir {
                path.push('/');
            }
            paths.push(path);
        }
        Flow::Go
    })?;
    Ok(FindOutput {
        paths,
        truncated,
        skipped,
    })
}

/// Whether `relative` would be named by `pattern` as `find` reads it (for
/// tests and callers that plan).
pub fn find_matches(pattern: &str, relative: &Path) -> bool {
    compile_glob(Some(pattern), true)
        .ok()
        .flatten()
        .is_some_and(|g| g.is_match(relative))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_patterns_without_a_slash_match_names_at_any_depth() {
        assert!(find_matches("*.rs", Path::new("src/main.rs")));
        assert!(find_matches("Cargo.toml", Path::new("a/b/Cargo.toml")));
        assert!(find_matches("src/*.rs", Path::new("src/main.rs")));
        assert!(!find_matches("src/*.rs", Path::new("src/a/main.rs")));
        assert!(find_matches("src/**/*.rs", Path::new("src/a/main.rs")));
        assert!(!find_matches("*.rs", Path::new("src/main.rst")));
    }
}
