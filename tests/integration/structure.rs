//! The shape of the source, checked so it does not drift back:
//! no import circle between the modules of a crate but the ones allowed
//! below with their reason, and no source file over 1,000 lines before its
//! `#[cfg(test)] mod` (a file of tests is not counted).
//!
//! The import graph is read from the text: `use` trees and `crate::…`,
//! `super::…`, `self::…` and `child::…` paths, comments and string literals
//! left out. A module's edges to its own ancestors and descendants are not
//! counted (a folder module and the files in it are one piece seen from
//! outside, and `use super::*` is how a child is written), so what is found
//! is a circle between siblings or cousins: two jobs that each need the other.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// Import edges that may close a circle: crate directory, from, to, why.
const ALLOWED: &[(&str, &str, &str, &str)] = &[(
    "policy",
    "walk",
    "commands",
    "the classifier's natural recursion: walking a line classifies each command, \
         and classifying `bash -c '…'` or `sudo …` walks the text again",
)];

/// The longest a source file may be before its tests.
const MAX_LINES: usize = 1000;

/// Files that may be longer for now: path from the repository root, why.
const LONG_ALLOWED: &[(&str, &str)] = &[];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the repository")
        .to_path_buf()
}

/// The workspace members from the root manifest's `members = [...]`.
fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path below its crate root (`lib.rs`/`main.rs` is `[]`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.last().map(String::as_str) {
        Some("lib" | "main") if parts.len() == 1 => parts.clear(),
        Some("mod") => {
            parts.pop();
        }
        _ => {}
    }
    parts
}

/// What a piece of source text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Code,
    /// `// …` up to the line break (which is code), or `/* … */`.
    Comment,
    /// A string literal, raw or not.
    Str,
    /// A character literal (`'x'`, `'\n'`), not a lifetime.
    Char,
}

/// The text cut into code, comments and literals, in order: joined, the
/// pieces are the text again.
fn parts(text: &str) -> Vec<(Part, &str)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut code_from = 0;
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let rest = &text[i..];
        let (part, len) = if rest.starts_with("//") {
            (Part::Comment, rest.find('\n').unwrap_or(rest.len()))
        } else if let Some(body) = rest.strip_prefix("/*") {
            (Part::Comment, body.find("*/").map_or(rest.len(), |k| k + 4))
        } else if (b[i] == b'r' || rest.starts_with("br")) && (i == 0 || !ident(b[i - 1])) && {
            let after = rest.trim_start_matches('b').strip_prefix('r').unwrap_or("");
            after.trim_start_matches('#').starts_with('"')
        } {
            let after = rest.trim_start_matches('b').strip_prefix('r').unwrap_or("");
            let hashes = after.len() - after.trim_start_matches('#').len();
            let open = rest.len() - after.len() + hashes + 1;
            let close = format!("\"{}", "#".repeat(hashes));
            let len = rest[open..]
                .find(&close)
                .map_or(rest.len(), |k| open + k + close.len());
            (Part::Str, len)
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            (Part::Str, (j + 1).min(b.len()) - i)
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            let len = if rest[1..].starts_with('\\') {
                rest[2..].find('\'').map(|k| k + 3)
            } else {
                rest[1..]
                    .chars()
                    .next()
                    .filter(|c| rest[1 + c.len_utf8()..].starts_with('\''))
                    .map(|c| c.len_utf8() + 2)
            };
            match len {
                Some(len) => (Part::Char, len),
                None => {
                    i += 1;
                    continue;
                }
            }
        } else {
            i += rest.chars().next().unwrap().len_utf8();
            continue;
        };
        if code_from < i {
            out.push((Part::Code, &text[code_from..i]));
        }
        out.push((part, &text[i..i + len]));
        i += len;
        code_from = i;
    }
    if code_from < text.len() {
        out.push((Part::Code, &text[code_from..]));
    }
    out
}

/// The text with comments, string and character literals blanked.
fn code_only(text: &str) -> String {
    parts(text)
        .into_iter()
        .map(|(part, piece)| match part {
            Part::Code => piece,
            Part::Comment => "",
            Part::Str => "\"\"",
            Part::Char => "' '",
        })
        .collect()
}

/// The comments of the text, everything else blanked but its line breaks,
/// so a line of the result is the same line of the text.
fn comments_only(text: &str) -> String {
    parts(text)
        .into_iter()
        .map(|(part, piece)| match part {
            Part::Comment => piece.to_owned(),
            _ => "\n".repeat(piece.matches('\n').count()),
        })
        .collect()
}

/// The paths a `use` tree names: `a::{b, c::d}` is `a::b` and `a::c::d`.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{')
        && tree.ends_with('}')
    {
        let mut head = prefix.to_vec();
        head.extend(
            tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        let body = &tree[open + 1..tree.len() - 1];
        let (mut depth, mut start) = (0, 0);
        for (k, ch) in body.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&body[start..k], &head, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        expand_use(&body[start..], &head, out);
        return;
    }
    let path = tree.split(" as ").next().unwrap_or("");
    let mut full = prefix.to_vec();
    full.extend(
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    if !full.is_empty() {
        out.push(full);
    }
}

/// Every module path `code` names, as written (`crate::a::b`, `super::x`, …).
fn named_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(k) = rest.find("use ") {
        let before = rest[..k].chars().last();
        let after = &rest[k + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(end) = after.find(';') {
            expand_use(&after[..end], &[], &mut out);
        }
    }
    // Inline paths: identifiers joined by `::`.
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        if ident(bytes[i]) && (i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            let start = i;
            while i < bytes.len() && (ident(bytes[i]) || code[i..].starts_with("::")) {
                i += if bytes[i] == b':' { 2 } else { 1 };
            }
            let path: Vec<String> = code[start..i]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if path.len() > 1 {
                out.push(path);
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The modules a file declares as children (`mod x;`).
fn children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub(super) "))
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_owned())
        })
        .collect()
}

type Module = Vec<String>;

fn show(m: &Module) -> String {
    if m.is_empty() {
        "(crate root)".to_owned()
    } else {
        m.join("::")
    }
}

/// One crate's import edges between modules that are not each other's
/// ancestors.
fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let kids = children(&code);
        for path in named_paths(&code) {
            let absolute: Module = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => {
                    let ups = path.iter().take_while(|p| *p == "super").count();
                    let mut base = module.clone();
                    base.truncate(base.len().saturating_sub(ups));
                    base.extend_from_slice(&path[ups..]);
                    base
                }
                "self" => module.iter().chain(&path[1..]).cloned().collect(),
                name if kids.contains(name) => module.iter().chain(&path).cloned().collect(),
                _ => continue,
            };
            let target = (1..=absolute.len())
                .rev()
                .map(|k| absolute[..k].to_vec())
                .find(|prefix| modules.contains_key(prefix))
                .unwrap_or_default();
            let related = target.starts_with(module) || module.starts_with(&target);
            if !related {
                graph.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    graph
}

/// A path `from` → … → `to`, if there is one.
fn path_between(
    graph: &BTreeMap<Module, BTreeSet<Module>>,
    from: &Module,
    to: &Module,
) -> Option<Vec<Module>> {
    let mut came: BTreeMap<Module, Module> = BTreeMap::new();
    let mut queue = VecDeque::from([from.clone()]);
    while let Some(at) = queue.pop_front() {
        if &at == to {
            let mut path = vec![at.clone()];
            let mut cur = at;
            while let Some(prev) = came.get(&cur) {
                path.push(prev.clone());
                cur = prev.clone();
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.get(&at).into_iter().flatten() {
            if next != from && !came.contains_key(next) {
                came.insert(next.clone(), at.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// Every import circle in every crate of the workspace but the allowed ones.
fn circles(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for member in members(root) {
        let src = root.join(&member).join("src");
        if !src.is_dir() {
            continue;
        }
        let mut graph = edges(&src);
        for (krate, from, to, _) in ALLOWED {
            if *krate == member {
                let split = |m: &str| m.split("::").map(str::to_owned).collect::<Module>();
                if let Some(targets) = graph.get_mut(&split(from)) {
                    targets.remove(&split(to));
                }
            }
        }
        let mut seen = BTreeSet::new();
        for (from, targets) in &graph {
            for to in targets {
                if let Some(back) = path_between(&graph, to, from) {
                    let mut cycle: Vec<String> =
                        std::iter::once(from).chain(back.iter()).map(show).collect();
                    let mut key = cycle[..cycle.len() - 1].to_vec();
                    key.sort();
                    if seen.insert(key) {
                        cycle.dedup();
                        found.push(format!("{member}: {}", cycle.join(" -> ")));
                    }
                }
            }
        }
    }
    found
}

/// No module-import circle comes back. A circle found here
/// is two modules that each need the other: move what both need to a
/// module of its own — or, if it is a recursion the design needs, add the
/// edge to `ALLOWED` with its reason.
#[test]
fn no_import_circle_but_the_allowed_ones() {
    let found = circles(&repo());
    assert!(
        found.is_empty(),
        "import circles between modules (break each, or allow it in \
         tests/integration/structure.rs with a reason):\n  {}",
        found.join("\n  ")
    );
}

/// The check finds a circle when there is one: two sibling modules that
/// import each other, and a child that imports a cousin importing its
/// parent's sibling back.
#[test]
fn the_circle_check_sees_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(
        src.join("a.rs"),
        "// use crate::c; (a comment)\nuse crate::b::x::Thing;\nfn f() { let s = \"crate::c::y\"; }\n",
    )
    .unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod x;\nuse super::c;\n").unwrap();
    std::fs::write(
        src.join("b/x.rs"),
        "use super::super::c::{self, Y};\npub struct Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("c.rs"), "pub fn g() { crate::a::f() }\n").unwrap();
    let graph = edges(&src);
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Module>();
    assert_eq!(graph[&m("a")], BTreeSet::from([m("b::x")]), "{graph:?}");
    assert_eq!(graph[&m("b::x")], BTreeSet::from([m("c")]));
    assert_eq!(graph[&m("c")], BTreeSet::from([m("a")]));
    assert_eq!(
        path_between(&graph, &m("b::x"), &m("a")),
        Some(vec![m("b::x"), m("c"), m("a")])
    );
}

/// No source file over [`MAX_LINES`] lines before its tests but those in
/// [`LONG_ALLOWED`]; files of tests (`*_tests.rs`,
/// the tests crate) are not counted.
#[test]
fn no_source_file_over_a_thousand_lines_before_its_tests() {
    let root = repo();
    let mut long = Vec::new();
    for member in members(&root) {
        let src = root.join(&member).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            if file.to_string_lossy().ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let before_tests = lines
                .windows(2)
                .position(|w| {
                    w[0].trim() == "#[cfg(test)]"
                        && w[1].starts_with("mod ")
                        && w[1].trim_end().ends_with('{')
                })
                .unwrap_or(lines.len());
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            if before_tests > MAX_LINES && !LONG_ALLOWED.iter().any(|(path, _)| *path == rel) {
                long.push(format!("{rel}: {before_tests} lines before its tests"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these along their seams (at most {MAX_LINES} lines before the tests):\n  {}",
        long.join("\n  ")
    );
}

/// Whether `line` cites an issue by its number: `issue` or `issues` in any
/// case, not the end of a longer word (`tissue`), then spaces, `#` or `-`,
/// then a digit: `Issue N`, `issues N, M`, `issue-N`, `issue #N` with a
/// number for `N`.
fn cites_an_issue(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.match_indices("issue").any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return false;
        }
        let rest = &lower[at + "issue".len()..];
        let rest = rest.strip_prefix('s').unwrap_or(rest);
        rest.trim_start_matches([' ', '#', '-'])
            .starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Every comment line, in every Rust file of every workspace member, that
/// cites an issue by its number, as `path:line: text`.
fn issue_citations(root: &Path) -> (usize, Vec<String>) {
    let mut files = BTreeSet::new();
    for member in members(root) {
        let mut found = Vec::new();
        rust_files(&root.join(&member), &mut found);
        files.extend(found.into_iter().filter(|f| {
            !f.strip_prefix(root)
                .unwrap_or(f)
                .components()
                .any(|c| c.as_os_str() == "target")
        }));
    }
    let mut hits = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        for (n, line) in comments_only(&text).lines().enumerate() {
            if cites_an_issue(line) {
                hits.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    (files.len(), hits)
}

/// No comment cites an issue by its number: a comment says why, and cites
/// the requirement it serves (`SPEC G1`, docs/requirements.md), a threat
/// model row (`T31`) or a section of the docs — all of which resolve inside
/// the repository, where an issue tracker's numbers do not. String literals
/// and test names are not comments and are not looked at.
#[test]
fn no_issue_number_in_comments() {
    let (files, hits) = issue_citations(&repo());
    assert!(files > 100, "the scan found only {files} Rust files");
    assert!(
        hits.is_empty(),
        "comments citing an issue number (cite the requirement ID, the threat \
         model row or the docs section instead, or say why):\n  {}",
        hits.join("\n  ")
    );
}

/// The check reads comments only, in any case and spelling, and not a
/// longer word: a comment citing one is found, a string literal naming one
/// and `tissue` are not.
#[test]
fn the_issue_check_sees_comments_only() {
    let text = "fn f() {\n    // Issue 12 item 3: found.\n    let s = \"issue 12\"; // a string is not a comment\n    /* a tissue 3 is a word; an issue, 3 apples */\n}\n/// See issues #15, 18.\n//! (issue-4)\nconst C: char = '\"'; // issue\nlet r = r#\"// issue 9\"#;\n";
    let comments = comments_only(text);
    assert_eq!(comments.lines().count(), text.lines().count());
    let hits: Vec<usize> = comments
        .lines()
        .enumerate()
        .filter(|(_, line)| cites_an_issue(line))
        .map(|(n, _)| n + 1)
        .collect();
    assert_eq!(hits, [2, 6, 7], "{comments}");
    assert!(cites_an_issue("// ISSUE#7") && cites_an_issue("# issues 15, 18"));
    assert!(!cites_an_issue("// tissue 3") && !cites_an_issue("// misissue 3"));
    assert!(!code_only(text).contains("ssue"), "{}", code_only(text));
}

/// The `[package] name` of a member's manifest.
fn package_name(root: &Path, member: &str) -> String {
    let manifest = std::fs::read_to_string(root.join(member).join("Cargo.toml")).unwrap();
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("name = \""))
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_default()
        .to_owned()
}

/// `plugins/` holds backends only: each crate directly in it is a backend
/// (`sandbox-backend-<dir>`, a cdylib), and anything deeper is a part of
/// the backend whose directory holds it (bwrap's PID 1, the microVM's
/// guest agent). Helper crates shared by several backends or by the host
/// sit at the top level.
#[test]
fn plugins_holds_backends_only() {
    let root = repo();
    let mut wrong = Vec::new();
    let mut backends = 0;
    for member in members(&root) {
        let Some(rest) = member.strip_prefix("plugins/") else {
            continue;
        };
        let top = rest.split('/').next().unwrap_or_default();
        let manifest = std::fs::read_to_string(root.join("plugins").join(top).join("Cargo.toml"))
            .unwrap_or_default();
        let is_backend = package_name(&root, &format!("plugins/{top}"))
            == format!("sandbox-backend-{top}")
            && manifest.contains("\"cdylib\"");
        if !is_backend {
            wrong.push(format!(
                "{member}: `plugins/{top}` is not a backend (a `sandbox-backend-{top}` cdylib)"
            ));
        } else if !rest.contains('/') {
            backends += 1;
        }
    }
    assert!(backends >= 4, "found {backends} backends under plugins/");
    assert!(
        wrong.is_empty(),
        "move these to the top level (plugins/ holds backends and their own parts):\n  {}",
        wrong.join("\n  ")
    );
}

/// The runtime is a library every front-end drives: it depends on no
/// front-end — not the binary, not any crate that does — so a front-end can
/// never become the way a decision is made.
#[test]
fn the_runtime_imports_nothing_from_the_binary() {
    let root = repo();
    let manifest = std::fs::read_to_string(root.join("runtime/Cargo.toml")).unwrap();
    assert!(
        !manifest.contains("cc-server"),
        "runtime/Cargo.toml depends on the binary crate"
    );
    let mut files = Vec::new();
    rust_files(&root.join("runtime/src"), &mut files);
    assert!(files.len() > 5, "the runtime's sources were not found");
    for file in files {
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        assert!(
            !code.contains("cc_server::"),
            "{}: the runtime names the binary crate",
            file.display()
        );
    }
    // Nothing the runtime depends on depends on the binary either.
    for member in members(&root) {
        if member == "host" || member == "tests" || member == "bench" {
            continue;
        }
        let text = std::fs::read_to_string(root.join(&member).join("Cargo.toml")).unwrap();
        assert!(
            !text
                .lines()
                .any(|l| l.trim_start().starts_with("cc-server")),
            "{member} depends on the binary crate"
        );
    }
}

/// Crates that never act on a path an agent names, so their file access is
/// the server's own: the file-access check below skips them.
const SERVER_SIDE_CRATES: &[(&str, &str)] = &[
    (
        "paths",
        "the path crate itself: the jail every agent's file goes through",
    ),
    (
        "plugin-api",
        "the ABI, the SDK and the conformance kit: plugin files and its own markers",
    ),
    (
        "registry",
        "loads the plugin libraries the operator installed",
    ),
    ("policy", "pure: no I/O"),
    (
        "egress",
        "the proxies: sockets in the server's own egress dirs",
    ),
    ("fdpass", "descriptors over a socket"),
    ("spawn", "starts processes"),
    ("relay", "reads a command's pipes"),
    ("exec-group", "the server's own cgroup files"),
    ("tests", "the black-box tests"),
    ("bench", "the benchmarks"),
    ("test-support", "tests only"),
];

/// Files of the remaining crates that open files, each on the server's own
/// (never below a sandbox's roots), with what it opens.
const SERVER_FILES: &[(&str, &str)] = &[
    ("host/src/api/token.rs", "the API token file"),
    (
        "host/src/commands/agent.rs",
        "the Claude Code executable the user named or has on PATH",
    ),
    (
        "gateway/src/spool.rs",
        "a push spooled before its verdict: an unlinked file in the server's own state \
         directory (gateway-mirrors/spool)",
    ),
    (
        "host/src/commands/hook.rs",
        "the API token file the hook presents to the server",
    ),
    (
        "host/src/commands/ask.rs",
        "/dev/tty: the terminal of the person who ran `run --ask`",
    ),
    (
        "host/src/commands/run.rs",
        "the spec file `run --spec` names: the user's own input",
    ),
    (
        "host/src/commands/sandboxd.rs",
        "`sandboxd --root-dir` canonicalized once (the jail's root), and the credential \
         file `--credential-file` names (0600, never through a symlink)",
    ),
    (
        "host/src/config.rs",
        "the config and guardrails files the operator named",
    ),
    (
        "host/src/descriptors.rs",
        "/proc/self/fd: the server's own descriptors",
    ),
    (
        "host/src/entry_points_scan.rs",
        "compiled for tests only: the workspace's own sources",
    ),
    ("host/src/open_files.rs", "/proc/sys/fs/nr_open"),
    (
        "runtime/src/egress.rs",
        "a session's known_hosts, in the server's own egress dir",
    ),
    ("runtime/src/random.rs", "/dev/urandom"),
    (
        "workspaces/src/fsinfo.rs",
        "/proc/self/mountinfo: where a filesystem is mounted, for a refusal",
    ),
    (
        "workspaces/src/lib.rs",
        "the data directory and its conversations/ (made 0700; the names in it swept), \
         and the canonical paths of the checkouts and attachments the owner registers",
    ),
    (
        "workspaces/src/owner.rs",
        "/proc/<pid>/stat: whether the process a row names lives",
    ),
    (
        "workspaces/src/store.rs",
        "the state directory (0700) and the workspaces database (0600)",
    ),
];

/// The calls that open, read, change or look up a file by path.
const FILE_ACCESS: &[&str] = &[
    "std::fs::",
    "fs::read",
    "fs::write",
    "fs::create_dir",
    "fs::remove",
    "fs::rename",
    "fs::copy",
    "fs::hard_link",
    "fs::metadata",
    "fs::symlink",
    "fs::canonicalize",
    "fs::set_permissions",
    "File::open",
    "File::create",
    "OpenOptions::new",
    "DirBuilder::new",
    "libc::open",
    "libc::openat",
    "libc::unlink",
    "libc::rename",
    "libc::mkdir",
    ".canonicalize()",
    ".read_dir()",
    ".read_link()",
    ".symlink_metadata()",
];

/// Each file's code before its `#[cfg(test)] mod … {` (a `*_tests.rs`
/// file is all tests), comments and strings blanked.
fn code_before_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim_start().starts_with("mod "))
        .unwrap_or(lines.len());
    code_only(&lines[..end].join("\n"))
}

/// Where `code` accesses a file by path: the call's text, each once.
fn file_access(code: &str) -> BTreeSet<&'static str> {
    FILE_ACCESS
        .iter()
        .filter(|call| code.contains(**call))
        .copied()
        .collect()
}

/// No crate but the path crate opens files below a sandbox's roots on an
/// agent's behalf (SPEC H2, G5): a front-end, a layer or the runtime that
/// touches an agent's file does it through `sandbox_paths::jail`, whose
/// calls are not file access by path. Every other file access in those
/// crates is listed in [`SERVER_FILES`] with what it opens, so a new one is
/// a decision someone wrote down. Backends are the boundary itself and are
/// not scanned; neither are the crates of [`SERVER_SIDE_CRATES`].
#[test]
fn no_crate_but_the_path_crate_opens_an_agents_files() {
    let root = repo();
    let mut unlisted = Vec::new();
    let mut scanned = 0;
    let mut used = BTreeSet::new();
    for member in members(&root) {
        if member.starts_with("plugins/") || SERVER_SIDE_CRATES.iter().any(|(c, _)| *c == member) {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&root.join(&member).join("src"), &mut files);
        for file in files {
            let rel = file.strip_prefix(&root).unwrap().display().to_string();
            if rel.ends_with("_tests.rs") {
                continue;
            }
            scanned += 1;
            let code = code_before_tests(&std::fs::read_to_string(&file).unwrap());
            let calls = file_access(&code);
            if calls.is_empty() {
                continue;
            }
            if SERVER_FILES.iter().any(|(f, _)| *f == rel) {
                used.insert(rel);
            } else {
                unlisted.push(format!(
                    "{rel}: {}",
                    calls.into_iter().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    assert!(scanned > 40, "scanned only {scanned} files");
    assert!(
        unlisted.is_empty(),
        "these files access files by path: an agent's files go through \
         sandbox_paths::jail; a file of the server's own is listed in SERVER_FILES \
         (tests/integration/structure.rs) with what it is:\n  {}",
        unlisted.join("\n  ")
    );
    let stale: Vec<_> = SERVER_FILES
        .iter()
        .filter(|(f, _)| !used.contains(*f))
        .map(|(f, _)| *f)
        .collect();
    assert!(
        stale.is_empty(),
        "listed but no longer accessing files: {stale:?}"
    );
    for (krate, _) in SERVER_SIDE_CRATES {
        assert!(
            members(&root).iter().any(|m| m == krate),
            "{krate} is no member"
        );
    }
}

/// The check sees a file access: a call by path in code, not one in a
/// comment or string, and none in the tests below `#[cfg(test)]`.
#[test]
fn the_file_access_check_sees_an_access() {
    let text = "// std::fs::read(x)\nfn f() { let s = \"File::open\"; let t = std::fs::read_to_string(p); }\n\
                #[cfg(test)]\nmod tests {\n fn g() { File::create(p); }\n}\n";
    let found = file_access(&code_before_tests(text));
    assert_eq!(
        found,
        BTreeSet::from(["fs::read", "std::fs::"]),
        "{found:?}"
    );
    assert!(file_access(&code_before_tests("fn f() { jail.read(&p); }")).is_empty());
}
