//! The repository's docs resolve inside the repository, so a citation in a
//! comment, a test name or a doc can always be followed:
//!
//! - every requirement cited as `SPEC X#` (lists and ranges included) is an
//!   entry of `docs/requirements.md`;
//! - every cited document path (`docs/research/microvm.md §4.3`,
//!   `docs/design.md §8`) exists, and every section label after it is a
//!   heading there; the old forms that pointed outside the repository
//!   (`DESIGN §5`, `research A4`, `SPEC.md`) are gone;
//! - every relative link in `README.md` and `docs/**/*.md` reaches a file,
//!   and its `#anchor` a heading;
//! - the route list at the top of `host/src/api/mod.rs` is the routes of
//!   its area modules;
//! - the README's honesty matrix has a row for every entry point of
//!   `host/src/entry_points.rs`, and names none that is gone (SPEC H13).
//!
//! Like `entry_points_tests.rs`, it reads the sources as text: nothing here
//! needs the server built.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// This file, which spells the stale forms out to look for them.
const SELF: &str = "host/tests/docs.rs";

/// Every text file of the repository, as (path relative to the root, text).
/// Build output, VCS data and dependency folders are skipped.
fn text_files() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if !matches!(name.as_str(), "target" | ".git" | "node_modules") {
                    stack.push(path);
                }
                continue;
            }
            if !kind.is_file() || entry.metadata().unwrap().len() > 4 << 20 {
                continue;
            }
            let relative = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if relative == SELF {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(&path) {
                files.push((relative, text));
            }
        }
    }
    files.sort();
    files
}

/// A requirement ID: one letter A–H and a number.
fn requirement_id(s: &str) -> Option<(char, u32, usize)> {
    let mut chars = s.char_indices();
    let (_, letter) = chars.next()?;
    if !('A'..='H').contains(&letter) {
        return None;
    }
    let digits: String = s[1..].chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() || digits.len() > 2 {
        return None;
    }
    let end = 1 + digits.len();
    // `A4x` or `B2_` is a word, not an ID.
    if s[end..]
        .chars()
        .next()
        .is_some_and(|c| c.is_alphanumeric() || c == '_')
    {
        return None;
    }
    Some((letter, digits.parse().ok()?, end))
}

/// The IDs of one `SPEC …` citation: `SPEC C1`, `SPEC B3, B5–B9`,
/// `SPEC E1-E5`, `SPEC H5 and H8`. Empty when `SPEC` is followed by
/// something else.
fn cited_ids(after: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut rest = after;
    while let Some((letter, number, end)) = requirement_id(rest) {
        rest = &rest[end..];
        let range = ["–", "-"].iter().find_map(|dash| rest.strip_prefix(dash));
        if let Some(tail) = range
            && let Some((last_letter, last, end)) = requirement_id(tail)
            && last_letter == letter
            && last > number
        {
            ids.extend((number..=last).map(|n| format!("{letter}{n}")));
            rest = &tail[end..];
        } else {
            ids.push(format!("{letter}{number}"));
        }
        match [", ", " and "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep))
        {
            Some(next) if requirement_id(next).is_some() => rest = next,
            _ => break,
        }
    }
    ids
}

/// The IDs `docs/requirements.md` defines: its `- **X#**` entries.
fn defined_ids() -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join("docs/requirements.md")).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("- **"))
        .filter_map(|rest| {
            let (id, _) = rest.split_once("**")?;
            requirement_id(id).map(|_| id.to_owned())
        })
        .collect()
}

#[test]
fn the_citation_parser_reads_lists_and_ranges() {
    assert_eq!(cited_ids("C1's carve-outs"), ["C1"]);
    assert_eq!(
        cited_ids("B3, B5–B9)."),
        ["B3", "B5", "B6", "B7", "B8", "B9"]
    );
    assert_eq!(cited_ids("E1-E3, C2"), ["E1", "E2", "E3", "C2"]);
    assert_eq!(cited_ids("H5 and H8 say"), ["H5", "H8"]);
    assert_eq!(cited_ids("G6, F10: a"), ["G6", "F10"]);
    assert!(cited_ids("ids like").is_empty());
    assert!(cited_ids("X1").is_empty());
}

#[test]
fn every_cited_requirement_is_defined_in_docs_requirements() {
    let defined = defined_ids();
    assert!(
        defined.len() >= 60,
        "docs/requirements.md defines too few IDs: {defined:?}"
    );
    let mut cited = 0;
    let mut missing = Vec::new();
    for (path, text) in text_files() {
        for (n, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices("SPEC ") {
                for id in cited_ids(&line[at + 5..]) {
                    cited += 1;
                    if !defined.contains(&id) {
                        missing.push(format!("{path}:{}: SPEC {id}", n + 1));
                    }
                }
            }
        }
    }
    assert!(cited >= 100, "the citation scan found too little: {cited}");
    assert!(
        missing.is_empty(),
        "cited but not defined in docs/requirements.md (add an entry, or fix the ID):\n{}",
        missing.join("\n")
    );
}

/// Lines of a markdown file outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((n + 1, line));
        }
    }
    lines
}

/// The headings of a markdown file, as written (without the `#`s).
fn headings(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            (1..=6).contains(&hashes).then_some(())?;
            line[hashes..]
                .strip_prefix(' ')
                .map(|h| h.trim().to_owned())
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens; repeats get `-1`, `-2`, ….
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut all = BTreeSet::new();
    for heading in headings(text) {
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        all.insert(match *count {
            0 => slug.clone(),
            k => format!("{slug}-{k}"),
        });
        *count += 1;
    }
    all
}

/// The section labels a document's headings carry: `## 4.3 The guest
/// image` is `4.3`, `### A4. Canonicalise …` is `A4`.
fn section_labels(text: &str) -> BTreeSet<String> {
    headings(text)
        .iter()
        .filter_map(|h| h.split_whitespace().next())
        .map(|word| {
            word.trim_start_matches('§')
                .trim_end_matches('.')
                .to_owned()
        })
        .filter(|label| {
            label
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
        })
        .collect()
}

/// The labels cited right after a document path: `§4.1, §4.2 step 1`,
/// `A4, A5`, `§2.2 and §2.5`. A label is `§` and a dotted number, or a
/// letter A–C and a dotted number.
fn cited_labels(after: &str) -> Vec<String> {
    let mut labels = Vec::new();
    let mut rest = after.trim_start_matches('`').trim_start_matches(',');
    loop {
        rest = rest.trim_start_matches(' ');
        let (body, lettered) = match rest.strip_prefix('§') {
            Some(body) => (body, false),
            None => (rest, true),
        };
        let mut end = 0;
        if lettered {
            match body.chars().next() {
                Some('A'..='C') => end = 1,
                _ => break,
            }
        }
        let number: String = body[end..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let number = number.trim_end_matches('.');
        if number.is_empty() || !number.starts_with(|c: char| c.is_ascii_digit()) {
            break;
        }
        let label = format!("{}{number}", &body[..end]);
        let tail = &body[end + number.len()..];
        if tail.starts_with(|c: char| c.is_alphanumeric()) {
            break;
        }
        labels.push(label);
        match [",", " and"].iter().find_map(|sep| tail.strip_prefix(sep)) {
            Some(next) => rest = next,
            None => break,
        }
    }
    labels
}

/// Whether a section label resolves among a document's labels. An item of a
/// lettered section (`A5.9`: item 9 of A5) resolves to its section.
fn resolves(label: &str, labels: &BTreeSet<String>) -> bool {
    labels.contains(label)
        || (label.starts_with(|c: char| c.is_ascii_uppercase())
            && label
                .split_once('.')
                .is_some_and(|(section, _)| labels.contains(section)))
}

#[test]
fn the_label_parser_reads_sections() {
    assert_eq!(cited_labels(" §4.1, §4.2 step 1)"), ["4.1", "4.2"]);
    assert_eq!(cited_labels("` A5.9):"), ["A5.9"]);
    assert_eq!(cited_labels(" A4, A5)."), ["A4", "A5"]);
    assert_eq!(cited_labels(" §2.2 and §2.5 item 9"), ["2.2", "2.5"]);
    assert_eq!(cited_labels(" B4 (steps 1"), ["B4"]);
    assert_eq!(cited_labels("): a"), Vec::<String>::new());
    assert_eq!(cited_labels(" Also"), Vec::<String>::new());
    let labels: BTreeSet<String> = ["A5".to_owned()].into();
    assert!(resolves("A5.9", &labels) && !resolves("A6", &labels));
}

/// Every path token ending in `.md` that names a directory (`docs/x.md`,
/// `research/x.md`), with what follows it on the line. URLs are not
/// repository paths and are skipped.
fn md_paths(line: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices(".md") {
        let end = at + 3;
        if line[end..]
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let start = line[..at]
            .rfind(|c: char| !(c.is_alphanumeric() || "_./-".contains(c)))
            .map_or(0, |i| {
                i + line[i..].chars().next().map_or(1, char::len_utf8)
            });
        let token = &line[start..end];
        let word_start = line[..start]
            .rfind(char::is_whitespace)
            .map_or(0, |i| i + 1);
        if !token.contains('/') || line[word_start..end].contains("://") {
            continue;
        }
        found.push((token, &line[end..]));
    }
    found
}

/// What a line of this file may cite: markdown files every line but code
/// blocks, other files their comment lines.
fn citing_lines<'a>(path: &str, text: &'a str) -> Vec<(usize, &'a str)> {
    if path.ends_with(".md") {
        return prose_lines(text);
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            line.starts_with("//") || line.starts_with('#')
        })
        .map(|(n, line)| (n + 1, line))
        .collect()
}

#[test]
fn every_cited_document_and_section_is_in_the_repository() {
    let root = root();
    let files = text_files();
    let mut labels_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (path, text) in &files {
        let dir = root.join(path).parent().unwrap().to_path_buf();
        for (n, line) in citing_lines(path, text) {
            for (token, after) in md_paths(line) {
                let target = [dir.join(token), root.join(token)]
                    .into_iter()
                    .find(|p| p.is_file());
                let Some(target) = target else {
                    problems.push(format!(
                        "{path}:{n}: cites {token}, which is not in the repository \
                         (research notes are under docs/research/)"
                    ));
                    continue;
                };
                checked += 1;
                let labels = labels_of.entry(target.clone()).or_insert_with(|| {
                    section_labels(&std::fs::read_to_string(&target).unwrap_or_default())
                });
                for label in cited_labels(after) {
                    if !resolves(&label, labels) {
                        problems.push(format!(
                            "{path}:{n}: {token} has no section {label} (a heading starting \
                             with it)"
                        ));
                    }
                }
            }
            // The old forms, which pointed at documents outside the repository.
            let stale = [
                ("DESIGN §", "docs/design.md §N"),
                ("SPEC.md", "docs/requirements.md"),
                ("../shared", "a document in docs/"),
                ("research §", "docs/research/<note>.md §N"),
                ("research row", "docs/research/<note>.md §N, row R"),
                ("research microvm", "docs/research/microvm.md"),
                ("research linux", "docs/research/linux-create-deny.md"),
            ];
            for (old, new) in stale {
                if line.contains(old) {
                    problems.push(format!("{path}:{n}: `{old}`: cite {new} instead"));
                }
            }
            for (at, _) in line.match_indices("research ") {
                let next = &line[at + 9..];
                if next.starts_with(|c: char| ('A'..='C').contains(&c))
                    && next[1..].starts_with(|c: char| c.is_ascii_digit())
                {
                    problems.push(format!(
                        "{path}:{n}: `research {}`: cite docs/research/<note>.md with the label",
                        &next[..2]
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 40,
        "the citation scan found too little: {checked}"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (path, text) in text_files() {
        if !(path == "README.md" || path.starts_with("docs/")) || !path.ends_with(".md") {
            continue;
        }
        let file = root.join(&path);
        for (n, line) in prose_lines(&text) {
            for (at, _) in line.match_indices("](") {
                let rest = &line[at + 2..];
                let Some(close) = rest.find(')') else {
                    continue;
                };
                let target = &rest[..close];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file_part, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target, None),
                };
                let linked = if file_part.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(file_part)
                };
                if !linked.exists() {
                    problems.push(format!("{path}:{n}: ({target}): no such file"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    let text = std::fs::read_to_string(&linked).unwrap_or_default();
                    if !anchors(&text).contains(anchor) {
                        problems.push(format!("{path}:{n}: ({target}): no such heading"));
                    }
                }
            }
        }
    }
    assert!(checked >= 10, "the link scan found too little: {checked}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn anchors_follow_github() {
    let text = "# Design\n## 2. The plugin boundary (plugin-api)\n```\n# not a heading\n```\n\
                ## Notes\n## Notes\n";
    let got = anchors(text);
    for anchor in [
        "design",
        "2-the-plugin-boundary-plugin-api",
        "notes",
        "notes-1",
    ] {
        assert!(got.contains(anchor), "{anchor} not in {got:?}");
    }
    assert!(!got.contains("not-a-heading"));
}

/// `METHOD /path` of every `.route(PATH, method(…))` in one area module of
/// the API. Each area carries its routes with their full paths (the rule
/// the entry-point scan relies on too), so the path is read as written.
fn router_routes(source: &str) -> BTreeSet<String> {
    let mut routes = BTreeSet::new();
    for chunk in source.split(".route(").skip(1) {
        let Some((path, rest)) = chunk
            .trim_start()
            .strip_prefix('"')
            .and_then(|c| c.split_once('"'))
        else {
            continue;
        };
        // Up to the parenthesis closing `.route(`.
        let mut depth = 1;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map_or(rest.len(), |(at, _)| at);
        let call = &rest[..end];
        for method in ["get", "post", "put", "patch", "delete"] {
            let called = [' ', '.', '\n']
                .iter()
                .any(|before| call.contains(&format!("{before}{method}(")));
            if called {
                routes.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    routes
}

/// `METHOD /path` of every route the module's doc comment lists
/// (`` `POST /v1/sandboxes[?backend=NAME]` ``: the query is left out).
fn documented_routes(source: &str) -> BTreeSet<String> {
    let mut routes = BTreeSet::new();
    for line in source.lines().take_while(|l| l.starts_with("//!")) {
        for span in line.split('`').skip(1).step_by(2) {
            let mut words = span.split_whitespace();
            let (Some(method), Some(path)) = (words.next(), words.next()) else {
                continue;
            };
            if ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) && path.starts_with('/')
            {
                let path = path.split(['[', '?']).next().unwrap_or(path);
                routes.insert(format!("{method} {path}"));
            }
        }
    }
    routes
}

#[test]
fn the_api_modules_route_list_is_the_routers() {
    let api = root().join("host/src/api");
    let mut routed = BTreeSet::new();
    let mut areas = 0;
    for entry in std::fs::read_dir(&api).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let found = router_routes(&std::fs::read_to_string(&path).unwrap());
            areas += usize::from(!found.is_empty());
            routed.extend(found);
        }
    }
    assert!(
        routed.len() >= 10 && areas >= 4,
        "the route scan found too little ({areas} area modules): {routed:?}"
    );
    let source = std::fs::read_to_string(api.join("mod.rs")).unwrap();
    let documented = documented_routes(&source);
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "host/src/api/mod.rs: list these routes of its area modules in its doc comment: \
         {undocumented:?}; these are listed but not routed: {stale:?}"
    );
}

/// The entry points a README matrix row names: its first cell's
/// backticked items that start as an entry does.
fn matrix_entries(first_cell: &str) -> Vec<String> {
    const KINDS: &[&str] = &["cli ", "api ", "ws ", "mcp tool ", "rpc "];
    first_cell
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|item| KINDS.iter().any(|kind| item.starts_with(kind)))
        .map(str::to_owned)
        .collect()
}

/// SPEC H13: the honesty matrix in the README says, for every entry point,
/// what is enforced — sandbox, command policy, guardrails, env, path jail,
/// egress; a new entry point without a row fails here.
#[test]
fn the_honesty_matrix_has_a_row_for_every_entry_point() {
    use cc_server::entry_points::{DISPATCHING, INTERACTIVE, NOT_DISPATCHING};
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("## What each entry point enforces")
        .expect("the README has the honesty matrix section");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let header =
        "| entry points | sandbox | command policy | guardrails | env | path jail | egress |";
    assert!(
        section.contains(header),
        "the matrix's columns are: {header}"
    );
    let mut named = BTreeSet::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
        assert_eq!(cells.len(), 7, "a matrix row has 7 cells: {row}");
        for entry in matrix_entries(cells[0]) {
            assert!(named.insert(entry.clone()), "{entry} has two rows");
        }
    }
    let listed: BTreeSet<String> = DISPATCHING
        .iter()
        .copied()
        .chain(NOT_DISPATCHING.iter().map(|(e, _)| *e))
        .chain(INTERACTIVE.iter().map(|(e, _)| *e))
        .map(str::to_owned)
        .collect();
    let missing: Vec<_> = listed.difference(&named).collect();
    let gone: Vec<_> = named.difference(&listed).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "README.md, the honesty matrix: give these entry points a row: {missing:?}; these rows \
         name entry points that are gone: {gone:?}"
    );
}
