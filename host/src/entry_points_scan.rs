//! The scan behind `entry_points_tests.rs` (SPEC B10): every way into
//! `cc_server` registered in the workspace's sources, read as text.
//!
//! It lives here, a test-only module of the host, because the host is where
//! the list is ([`super::entry_points`]) and where every front-end ends up
//! mounted (`cc_server mcp`, `cc_server sandboxd`, …): the check runs with
//! `cargo test -p cc-server` in seconds, with clap's view of the CLI at
//! hand, without building a backend or the black-box suite. A front-end
//! crate needs no code of its own to be checked, and no dependency on this:
//! the scan walks every member of the workspace, so a crate is checked by
//! registering its ways in by the conventions below. (The black-box suite
//! drives what the list says dispatches; it does not need the scan.)
//!
//! What is read: every member of the root `Cargo.toml`'s `members` but the
//! backends (`plugins/…`) — the `.rs` files under its `src/`, and the
//! `.proto` files anywhere in its directory (another member's directory,
//! the workspace's `exclude`s, `target/` and hidden directories left out).
//! In Rust, comments do not count and neither does text inside a string
//! literal.
//!
//! The conventions, exactly. A way in written any other way is a *problem*
//! the check fails on, never a way in it misses:
//!
//! - **HTTP route**: `.route("PATH", get(handler).post(other))` is `api GET
//!   PATH` and `api POST PATH` (methods `get`, `post`, `put`, `patch`,
//!   `delete`, `head`, `options`, `trace`, `any` → `ANY`; `.layer(…)`,
//!   `.route_layer(…)` and `.with_state(…)` after them are skipped). PATH is
//!   the full path: an area module's `routes()` carries its full paths and
//!   is mounted with `.merge(area::routes())`. A `.nest("PREFIX",
//!   area::routes())` puts PREFIX before every route of the module file
//!   `area` names (a child module, `self::`, `super::`, `crate::` or a
//!   workspace crate's name), and of the files that file merges the same
//!   way. Problems: a path that is not a string literal; a method router
//!   the scan cannot read (`on(…)`, `fallback(…)`, a variable); a `.nest` of
//!   anything but `path::to::module::function()`; a `.merge` of anything
//!   else inside a nested module; `.route_service(` and `.nest_service(`.
//! - **WebSocket upgrade**: a route whose handler is a `fn` of the same crate
//!   taking a `WebSocketUpgrade` (or a closure naming the type) is `ws GET
//!   PATH`, not `api GET PATH`. A `fn` taking one that no route of its crate
//!   mounts is a problem.
//! - **MCP tool**: rmcp's attribute with the name spelled out,
//!   `#[tool(name = "exec", description = "…")]` (or `#[rmcp::tool(…)]`), is
//!   `mcp tool exec`. A `#[tool]` or `#[tool(…)]` without `name = "…"` is a
//!   problem, and so is a tool built by hand (`Tool::new(`,
//!   `ToolRoute::new`).
//! - **RPC method**: `rpc Name(` inside `service Service {` of a `.proto`
//!   whose `package` is `pkg` is `rpc pkg.Service/Name`.
//!
//! CLI subcommands are not read as text: the test asks clap.
//!
//! The same walk finds where a crate reaches a backend without
//! `Session::exec` ([`backend_reaches`]): every `.rs` file of every member
//! but the backends and [`BACKEND_SIDE`], as code.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Every way in the scan found, and what it could not read.
#[derive(Debug, Default)]
pub struct Scan {
    /// Each way in (`api GET /v1/backends`), with where it is registered
    /// (`host/src/api/backends.rs:17`).
    pub entries: BTreeMap<String, Vec<String>>,
    /// Registrations the conventions cannot read, with where and why.
    pub problems: Vec<String>,
    /// The files read.
    pub files: usize,
}

/// The values of `key = [...]` in a manifest (one line or several).
fn toml_list(manifest: &str, key: &str) -> Vec<String> {
    let Some(start) = manifest
        .lines()
        .position(|l| l.trim_start().starts_with(key) && l.contains('['))
    else {
        return Vec::new();
    };
    let mut text = String::new();
    for line in manifest.lines().skip(start) {
        let line = line.split('#').next().unwrap_or("");
        text.push_str(line);
        if line.contains(']') {
            break;
        }
    }
    let body = text.split_once('[').map_or("", |(_, b)| b);
    let body = body.split(']').next().unwrap_or("");
    body.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Every member of the workspace at `root`, as written in `members`.
pub fn members(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    toml_list(&manifest, "members")
}

/// The members that are not backends: `plugins/` holds backends only.
pub fn front_members(root: &Path) -> Vec<String> {
    members(root)
        .into_iter()
        .filter(|m| !m.starts_with("plugins/") && m != "plugins")
        .collect()
}

/// Every file of `member` whose name ends in one of `exts`, without the
/// directories that belong to something else: another member, an
/// `exclude`d path, `target/`, hidden ones.
pub fn member_files(root: &Path, member: &str, exts: &[&str]) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let others: BTreeSet<PathBuf> = members(root)
        .into_iter()
        .chain(toml_list(&manifest, "exclude"))
        .filter(|m| m != member)
        .map(|m| root.join(m))
        .collect();
    let mut out = Vec::new();
    let mut stack = vec![root.join(member)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') && !others.contains(&path) {
                    stack.push(path);
                }
            } else if exts.iter().any(|e| name.ends_with(&format!(".{e}"))) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A Rust source with its comments blanked (newlines kept, so offsets and
/// line numbers are the file's) and its literals found.
pub struct Lexed {
    pub code: String,
    /// The string and character literals of `code`, quotes included, in
    /// order.
    literals: Vec<Range<usize>>,
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl Lexed {
    pub fn new(text: &str) -> Self {
        let b = text.as_bytes();
        let mut code = b.to_vec();
        let mut literals = Vec::new();
        let blank = |code: &mut [u8], range: Range<usize>| {
            for c in &mut code[range] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
        };
        let mut i = 0;
        while i < b.len() {
            let rest = &b[i..];
            if rest.starts_with(b"//") {
                let end = rest
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |k| i + k);
                blank(&mut code, i..end);
                i = end;
            } else if rest.starts_with(b"/*") {
                let (mut depth, mut j) = (0usize, i);
                while j < b.len() {
                    if b[j..].starts_with(b"/*") {
                        depth += 1;
                        j += 2;
                    } else if b[j..].starts_with(b"*/") {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        j += 1;
                    }
                }
                blank(&mut code, i..j);
                i = j;
            } else if let Some(end) = raw_string_end(b, i) {
                literals.push(i..end);
                i = end;
            } else if b[i] == b'"' {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                literals.push(i..end);
                i = end;
            } else if b[i] == b'\'' {
                // A character literal ('x', '\n', '"'), not a lifetime ('a).
                let len = if rest.get(1) == Some(&b'\\') {
                    rest[2..].iter().position(|&c| c == b'\'').map(|k| k + 3)
                } else {
                    text[i + 1..]
                        .chars()
                        .next()
                        .filter(|c| text[i + 1 + c.len_utf8()..].starts_with('\''))
                        .map(|c| c.len_utf8() + 2)
                };
                match len {
                    Some(len) => {
                        literals.push(i..i + len);
                        i += len;
                    }
                    None => i += 1,
                }
            } else {
                i += 1;
            }
        }
        Self {
            // Only ASCII bytes of comments were replaced, by ASCII.
            code: String::from_utf8(code).unwrap_or_default(),
            literals,
        }
    }

    /// The code with its literals blanked too: only what the compiler reads
    /// as code.
    pub fn bare(&self) -> String {
        let mut bytes = self.code.as_bytes().to_vec();
        for range in &self.literals {
            for c in &mut bytes[range.clone()] {
                if *c != b'\n' {
                    *c = b' ';
                }
            }
        }
        String::from_utf8(bytes).unwrap_or_default()
    }

    fn literal_containing(&self, at: usize) -> Option<&Range<usize>> {
        let k = self.literals.partition_point(|r| r.end <= at);
        self.literals.get(k).filter(|r| r.start <= at)
    }

    /// Where `needle` occurs in code (not in a comment, not in a literal).
    pub fn find(&self, needle: &str) -> Vec<usize> {
        self.code
            .match_indices(needle)
            .map(|(at, _)| at)
            .filter(|&at| self.literal_containing(at).is_none())
            .collect()
    }

    /// The string literal at `at` (after whitespace): its text and its end.
    fn string_at(&self, at: usize) -> Option<(String, usize)> {
        let start = at + (self.code[at..].len() - self.code[at..].trim_start().len());
        let range = self.literal_containing(start)?;
        if range.start != start {
            return None;
        }
        let literal = &self.code[range.clone()];
        let inner = if let Some(raw) = literal.strip_prefix('r') {
            raw.trim_matches('#')
        } else {
            literal
        };
        let inner = inner.strip_prefix('"')?.strip_suffix('"')?;
        Some((inner.to_owned(), range.end))
    }

    /// The end of the parenthesis opened just before `from` (literals
    /// skipped), or the end of the code.
    fn close(&self, from: usize) -> usize {
        let b = self.code.as_bytes();
        let mut depth = 1;
        let mut i = from;
        while i < b.len() {
            if let Some(range) = self.literal_containing(i) {
                i = range.end;
                continue;
            }
            match b[i] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        b.len()
    }

    fn line(&self, at: usize) -> usize {
        self.code[..at].matches('\n').count() + 1
    }
}

/// The end of a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i`.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && is_ident(b[i - 1]) {
        return None;
    }
    let after_b = if b[i] == b'b' { i + 1 } else { i };
    if b.get(after_b) != Some(&b'r') {
        return None;
    }
    let hashes = b[after_b + 1..].iter().take_while(|&&c| c == b'#').count();
    let open = after_b + 1 + hashes;
    if b.get(open) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let end = b[open + 1..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map_or(b.len(), |k| open + 1 + k + close.len());
    Some(end)
}

/// The methods of a method router (`get(a).post(b)`), each with its
/// handler's text; `None` when it is not written that way.
fn methods(expr: &str) -> Option<Vec<(String, String)>> {
    const METHODS: &[&str] = &[
        "get", "post", "put", "patch", "delete", "head", "options", "trace", "any",
    ];
    const SKIPPED: &[&str] = &["layer", "route_layer", "with_state"];
    let lexed = Lexed::new(expr);
    let b = expr.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while i < b.len() && (is_ident(b[i]) || b[i] == b':') {
            i += 1;
        }
        let name = expr[start..i].rsplit("::").next().unwrap_or("");
        if b.get(i) != Some(&b'(') || name.is_empty() {
            return None;
        }
        let close = lexed.close(i + 1);
        let handler = expr[i + 1..close].trim().to_owned();
        if METHODS.contains(&name) {
            found.push((name.to_uppercase(), handler));
        } else if !SKIPPED.contains(&name) {
            return None;
        }
        i = close + 1;
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        match b.get(i) {
            None => break,
            Some(b'.') => i += 1,
            Some(_) => return None,
        }
    }
    (!found.is_empty()).then_some(found)
}

/// The arguments of a call after its first one: `, get(h),` is `get(h)`.
fn args_after(text: &str) -> &str {
    let text = text.trim();
    let text = text.strip_prefix(',').unwrap_or(text).trim();
    text.strip_suffix(',').unwrap_or(text).trim_end()
}

/// A `.nest` or `.merge` of another module's router.
struct Mount {
    from: PathBuf,
    prefix: String,
    to: PathBuf,
}

/// The directory of a file's child modules.
fn module_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => parent,
        _ => parent.join(file.file_stem().unwrap_or_default()),
    }
}

/// The file of the module whose child modules are in `dir`.
fn module_file(dir: &Path) -> Option<PathBuf> {
    [
        dir.join("lib.rs"),
        dir.join("main.rs"),
        dir.join("mod.rs"),
        dir.with_extension("rs"),
    ]
    .into_iter()
    .find(|f| f.is_file())
}

/// The file of the module `segments` names from `file` (`area`,
/// `self::area`, `super::area`, `crate::api::area`, `sandbox_mcp::tools`).
fn resolve(
    file: &Path,
    src: &Path,
    segments: &[&str],
    crates: &BTreeMap<String, PathBuf>,
) -> Option<PathBuf> {
    let (mut dir, rest) = match segments.first()? {
        &"crate" => (src.to_path_buf(), &segments[1..]),
        &"self" => (module_dir(file), &segments[1..]),
        &"super" => {
            let ups = segments.iter().take_while(|s| **s == "super").count();
            let mut dir = module_dir(file);
            for _ in 0..ups {
                dir = dir.parent()?.to_path_buf();
            }
            (dir, &segments[ups..])
        }
        name if crates.contains_key(*name) => (crates[*name].clone(), &segments[1..]),
        _ => (module_dir(file), segments),
    };
    for segment in rest {
        dir = dir.join(segment);
    }
    module_file(&dir)
}

/// Each front member's crate names (package and lib, `-` as `_`) → its
/// `src/`.
fn crate_dirs(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut crates = BTreeMap::new();
    for member in front_members(root) {
        let manifest =
            std::fs::read_to_string(root.join(&member).join("Cargo.toml")).unwrap_or_default();
        let mut section = String::new();
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                section = line.to_owned();
            } else if (section == "[package]" || section == "[lib]")
                && let Some(value) = line.strip_prefix("name")
                && let Some(name) = value.trim_start().strip_prefix('=')
            {
                let name = name.trim().trim_matches('"').replace('-', "_");
                crates.insert(name, root.join(&member).join("src"));
            }
        }
    }
    crates
}

/// One route as written: its crate, file, line, path, method and handler.
struct Route {
    member: String,
    file: PathBuf,
    line: usize,
    path: String,
    method: String,
    handler: String,
}

/// Scans the workspace at `root`.
pub fn scan(root: &Path) -> Scan {
    let mut scan = Scan::default();
    let crates = crate_dirs(root);
    let rel = |file: &Path| {
        file.strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string()
    };
    let mut routes = Vec::new();
    let mut mounts = Vec::new();
    // Files whose `.merge` of something unresolved may hide a prefix.
    let mut loose_merges: Vec<(PathBuf, String)> = Vec::new();
    // (member, fn name) → where, for every fn taking a WebSocketUpgrade.
    let mut ws_handlers: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut ws_used: BTreeSet<(String, String)> = BTreeSet::new();
    for member in front_members(root) {
        let src = root.join(&member).join("src");
        for file in member_files(root, &member, &["rs", "proto"]) {
            let proto = file.extension().is_some_and(|e| e == "proto");
            if !proto && !file.starts_with(&src) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            scan.files += 1;
            if proto {
                scan_proto(&text, &rel(&file), &mut scan);
                continue;
            }
            let lexed = Lexed::new(&text);
            let at = |pos: usize| format!("{}:{}", rel(&file), lexed.line(pos));
            for pos in lexed.find(".route(") {
                let open = pos + ".route(".len();
                let close = lexed.close(open);
                let Some((path, after)) = lexed.string_at(open) else {
                    scan.problems.push(format!(
                        "{}: a route whose path is not a string literal",
                        at(pos)
                    ));
                    continue;
                };
                let expr = args_after(&lexed.code[after.min(close)..close]);
                let Some(methods) = methods(expr) else {
                    scan.problems.push(format!(
                        "{}: route {path}: write its methods as `get(handler).post(…)`",
                        at(pos)
                    ));
                    continue;
                };
                for (method, handler) in methods {
                    routes.push(Route {
                        member: member.clone(),
                        file: file.clone(),
                        line: lexed.line(pos),
                        path: path.clone(),
                        method,
                        handler,
                    });
                }
            }
            for needle in [".route_service(", ".nest_service("] {
                for pos in lexed.find(needle) {
                    scan.problems.push(format!(
                        "{}: `{needle}` hides its methods from the scan: use `.route(PATH, \
                         method(handler))`",
                        at(pos)
                    ));
                }
            }
            for (needle, nested) in [(".nest(", true), (".merge(", false)] {
                for pos in lexed.find(needle) {
                    let open = pos + needle.len();
                    let close = lexed.close(open);
                    let (prefix, after) = if nested {
                        match lexed.string_at(open) {
                            Some(found) => found,
                            None => {
                                scan.problems.push(format!(
                                    "{}: a `.nest` whose prefix is not a string literal",
                                    at(pos)
                                ));
                                continue;
                            }
                        }
                    } else {
                        (String::new(), open)
                    };
                    let expr = args_after(&lexed.code[after.min(close)..close]);
                    let target = expr
                        .strip_suffix(')')
                        .and_then(|e| e.trim_end().strip_suffix('('))
                        .map(str::trim)
                        .filter(|p| p.bytes().all(|c| is_ident(c) || c == b':'))
                        .map(|p| p.split("::").collect::<Vec<_>>())
                        .filter(|segments| segments.len() >= 2)
                        .and_then(|segments| {
                            resolve(&file, &src, &segments[..segments.len() - 1], &crates)
                        });
                    match target {
                        Some(to) => mounts.push(Mount {
                            from: file.clone(),
                            prefix,
                            to,
                        }),
                        None if nested => scan.problems.push(format!(
                            "{}: `.nest(\"{prefix}\", {expr})`: the scan follows only \
                             `.nest(\"PREFIX\", module::routes())` to a module of the workspace",
                            at(pos)
                        )),
                        None => loose_merges.push((file.clone(), at(pos))),
                    }
                }
            }
            for pos in lexed.find("fn ") {
                if pos > 0 && is_ident(lexed.code.as_bytes()[pos - 1]) {
                    continue;
                }
                let rest = &lexed.code[pos + 3..];
                let name: String = rest
                    .trim_start()
                    .bytes()
                    .take_while(|&c| is_ident(c))
                    .map(char::from)
                    .collect();
                let Some(open) = rest.find('(') else {
                    continue;
                };
                let open = pos + 3 + open + 1;
                let params = &lexed.code[open..lexed.close(open)];
                if params.contains("WebSocketUpgrade") {
                    ws_handlers.insert((member.clone(), name), at(pos));
                }
            }
            scan_tools(&lexed, &at, &mut scan);
        }
    }
    // Every mount is known now, whichever crate mounts which.
    for route in &routes {
        let name = route.handler.rsplit("::").next().unwrap_or("").to_owned();
        let key = (route.member.clone(), name);
        let ws = route.handler.contains("WebSocketUpgrade") || ws_handlers.contains_key(&key);
        if ws {
            ws_used.insert(key);
        }
        let kind = if ws { "ws" } else { "api" };
        for prefix in prefixes(&route.file, &mounts, 0, &mut scan.problems) {
            scan.entries
                .entry(format!("{kind} {} {prefix}{}", route.method, route.path))
                .or_default()
                .push(format!("{}:{}", rel(&route.file), route.line));
        }
    }
    for ((member, name), at) in &ws_handlers {
        if !ws_used.contains(&(member.clone(), name.clone())) {
            scan.problems.push(format!(
                "{at}: `{name}` takes a WebSocketUpgrade but no `.route(PATH, get({name}))` \
                 the scan reads mounts it"
            ));
        }
    }
    for (file, at) in loose_merges {
        let nested = prefixes(&file, &mounts, 0, &mut Vec::new())
            .iter()
            .any(|p| !p.is_empty());
        if nested {
            scan.problems.push(format!(
                "{at}: a `.merge` the scan cannot follow inside a nested module: merge \
                 `module::routes()`"
            ));
        }
    }
    scan
}

/// Every prefix the routes of `file` are mounted under (`""` when nothing
/// mounts it: its paths are full).
fn prefixes(
    file: &Path,
    mounts: &[Mount],
    depth: usize,
    problems: &mut Vec<String>,
) -> Vec<String> {
    if depth > 16 {
        problems.push(format!(
            "{}: its mounts go round in a circle",
            file.display()
        ));
        return Vec::new();
    }
    let mut found: Vec<String> = Vec::new();
    for mount in mounts.iter().filter(|m| m.to == file && m.from != file) {
        for outer in prefixes(&mount.from, mounts, depth + 1, problems) {
            found.push(format!("{outer}{}", mount.prefix));
        }
    }
    if found.is_empty() {
        found.push(String::new());
    }
    found.sort();
    found.dedup();
    found
}

/// The MCP tools of one file: `#[tool(name = "…", …)]`.
fn scan_tools(lexed: &Lexed, at: &dyn Fn(usize) -> String, scan: &mut Scan) {
    for needle in ["#[tool]", "#[rmcp::tool]"] {
        for pos in lexed.find(needle) {
            scan.problems.push(format!(
                "{}: a tool without `name = \"…\"`: write `#[tool(name = \"…\", …)]`",
                at(pos)
            ));
        }
    }
    for needle in ["#[tool(", "#[rmcp::tool("] {
        for pos in lexed.find(needle) {
            let open = pos + needle.len();
            let close = lexed.close(open);
            let name = lexed.find("name").into_iter().find_map(|k| {
                let code = lexed.code.as_bytes();
                let bare = k >= open
                    && k < close
                    && !code.get(k - 1).is_some_and(|&c| is_ident(c))
                    && !code.get(k + 4).is_some_and(|&c| is_ident(c));
                let value = lexed.code[k + 4..].trim_start().strip_prefix('=')?;
                let eq = lexed.code.len() - value.len();
                bare.then(|| lexed.string_at(eq)).flatten()
            });
            match name {
                Some((name, _)) => scan
                    .entries
                    .entry(format!("mcp tool {name}"))
                    .or_default()
                    .push(at(pos)),
                None => scan.problems.push(format!(
                    "{}: a tool without `name = \"…\"`: spell its name out",
                    at(pos)
                )),
            }
        }
    }
    for needle in ["Tool::new(", "ToolRoute::new"] {
        for pos in lexed.find(needle) {
            scan.problems.push(format!(
                "{}: a tool built by hand: register it with `#[tool(name = \"…\")]`",
                at(pos)
            ));
        }
    }
}

/// The RPC methods of one `.proto` file: `rpc pkg.Service/Name`.
fn scan_proto(text: &str, file: &str, scan: &mut Scan) {
    // Words, and punctuation one character at a time; comments and string
    // literals dropped. Each with its line.
    let mut tokens: Vec<(String, usize)> = Vec::new();
    let (b, mut i, mut line) = (text.as_bytes(), 0, 1);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if b[i..].starts_with(b"//") {
            i += b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .unwrap_or(b.len() - i);
        } else if b[i..].starts_with(b"/*") {
            let end = text[i..].find("*/").map_or(b.len(), |k| i + k + 2);
            line += text[i..end].matches('\n').count();
            i = end;
        } else if c == b'"' || c == b'\'' {
            let mut j = i + 1;
            while j < b.len() && b[j] != c {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if is_ident(c) || c == b'.' {
            let start = i;
            while i < b.len() && (is_ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
            tokens.push((text[start..i].to_owned(), line));
        } else {
            if !c.is_ascii_whitespace() {
                tokens.push((char::from(c).to_string(), line));
            }
            i += 1;
        }
    }
    let mut package = String::new();
    let mut depth = 0usize;
    let mut service: Option<(String, usize)> = None;
    for (k, (token, line)) in tokens.iter().enumerate() {
        let next = |n: usize| tokens.get(k + n).map_or("", |(t, _)| t.as_str());
        match token.as_str() {
            "package" if depth == 0 => package = next(1).to_owned(),
            "service" if next(2) == "{" => service = Some((next(1).to_owned(), depth + 1)),
            "rpc" if next(2) == "(" => match &service {
                Some((name, _)) => {
                    let qualified = if package.is_empty() {
                        name.clone()
                    } else {
                        format!("{package}.{name}")
                    };
                    scan.entries
                        .entry(format!("rpc {qualified}/{}", next(1)))
                        .or_default()
                        .push(format!("{file}:{line}"));
                }
                None => scan
                    .problems
                    .push(format!("{file}:{line}: an rpc outside a service")),
            },
            "{" => depth += 1,
            "}" => {
                if service.as_ref().is_some_and(|(_, d)| *d == depth) {
                    service = None;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
}

/// Crates on the backends' side of the boundary, which may hold a
/// `SandboxObject` without going through `Session::exec`: directory, why.
pub const BACKEND_SIDE: &[(&str, &str)] = &[
    (
        "plugin-api",
        "defines the boundary: `SandboxObject` and `launch` are its host side, and its \
         conformance kit drives a backend bare",
    ),
    (
        "bench",
        "measures a backend bare, the baseline the runtime's cost is reported against; a \
         binary of its own, not a way into cc_server",
    ),
];

/// The one file that reaches a backend: it owns `Session::exec`.
pub const SESSIONS: &str = "runtime/src/sessions/mod.rs";

/// What reaches a backend directly: a `SandboxObject`, a backend's
/// `launch`, a sandbox's `exec`.
const REACHES: &[&str] = &["SandboxObject", ".launch(", "sandbox.exec("];

/// Where the workspace reaches a backend, but through the sessions.
#[derive(Debug, Default)]
pub struct Reach {
    /// `file: needle`, outside [`SESSIONS`].
    pub offenders: Vec<String>,
    /// The Rust files read.
    pub files: usize,
    /// Whether [`SESSIONS`] was read and reaches the backend, as it must.
    pub sessions_reach: bool,
}

/// Reads every `.rs` file of every member but the backends and
/// [`BACKEND_SIDE`] (its `src/`, tests and benches alike) as code: comments
/// and literals do not count.
pub fn backend_reaches(root: &Path) -> Reach {
    let mut reach = Reach::default();
    let members = front_members(root)
        .into_iter()
        .filter(|m| !BACKEND_SIDE.iter().any(|(side, _)| side == m));
    for member in members {
        for file in member_files(root, &member, &["rs"]) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            reach.files += 1;
            let rel = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            let code = Lexed::new(&text).bare();
            for needle in REACHES {
                if !code.contains(needle) {
                    continue;
                }
                if rel == SESSIONS {
                    reach.sessions_reach = true;
                } else {
                    reach.offenders.push(format!("{rel}: {needle}"));
                }
            }
        }
    }
    reach
}
