//! Checks that [`super::entry_points`] lists every way in (SPEC B10), as
//! registered anywhere in the workspace: the CLI from clap, the rest read
//! by [`super::entry_points_scan`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;

use crate::entry_points::{DISPATCHING, INTERACTIVE, NOT_DISPATCHING};
use crate::entry_points_scan::{self as scan, Scan};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The kinds of entry, as written at the start of one.
const KINDS: &[&str] = &["cli ", "api ", "ws ", "mcp tool ", "rpc "];

/// Every listed entry; each once, in one list, of a known kind.
fn listed() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    let lists = DISPATCHING
        .iter()
        .map(|entry| (*entry, "dispatching"))
        .chain(NOT_DISPATCHING.iter().copied())
        .chain(INTERACTIVE.iter().copied());
    for (entry, why) in lists {
        assert!(!why.is_empty(), "{entry}: say why");
        assert!(
            KINDS.iter().any(|kind| entry.starts_with(kind)),
            "{entry}: an entry starts with one of {KINDS:?}"
        );
        assert!(all.insert(entry.to_owned()), "{entry} listed twice");
    }
    all
}

/// Every subcommand, nested ones by their path (`cli policy check`); a
/// command with subcommands is a way in itself only if it runs without one.
fn cli_entries() -> BTreeSet<String> {
    fn walk(command: &clap::Command, path: &str, out: &mut BTreeSet<String>) {
        for sub in command.get_subcommands() {
            let path = format!("{path} {}", sub.get_name());
            if !sub.has_subcommands() || !sub.is_subcommand_required_set() {
                out.insert(path.clone());
            }
            walk(sub, &path, out);
        }
    }
    let mut out = BTreeSet::new();
    walk(&crate::cli::Cli::command(), "cli", &mut out);
    out
}

/// The check itself: nothing the scan cannot read, every way in found is
/// listed, every listed one is found.
fn check(scan: &Scan, cli: &BTreeSet<String>, listed: &BTreeSet<String>) -> Result<(), String> {
    let mut found: BTreeSet<String> = scan.entries.keys().cloned().collect();
    found.extend(cli.iter().cloned());
    let unlisted: Vec<String> = found
        .difference(listed)
        .map(|entry| match scan.entries.get(entry) {
            Some(at) => format!("{entry} ({})", at.join(", ")),
            None => entry.clone(),
        })
        .collect();
    let stale: Vec<_> = listed.difference(&found).collect();
    if scan.problems.is_empty() && unlisted.is_empty() && stale.is_empty() {
        return Ok(());
    }
    Err(format!(
        "registrations the entry-point scan cannot read (write them as \
         host/src/entry_points_scan.rs says): {:#?}\n\
         list these in host/src/entry_points.rs (dispatching, interactive or not, with why): \
         {unlisted:#?}\nthese are listed but registered nowhere: {stale:#?}",
        scan.problems
    ))
}

#[test]
fn every_way_in_is_listed() {
    let scan = scan::scan(&root());
    let cli = cli_entries();
    assert!(
        cli.contains("cli run") && cli.contains("cli policy check") && !cli.contains("cli policy"),
        "the CLI walk: {cli:?}"
    );
    // The scan reads the real router, not nothing: the API's routes, from
    // its area modules, and more than a handful of files.
    let routes: Vec<_> = scan
        .entries
        .iter()
        .filter(|(entry, _)| entry.starts_with("api "))
        .collect();
    assert!(
        routes.len() >= 10,
        "the route scan found too little: {routes:?}"
    );
    let areas: BTreeSet<&str> = routes
        .iter()
        .flat_map(|(_, at)| at.iter())
        .filter_map(|at| at.split(':').next())
        .filter(|file| file.starts_with("host/src/api/"))
        .collect();
    assert!(
        areas.len() >= 4,
        "the API's routes come from too few area modules: {areas:?}"
    );
    assert!(scan.files >= 100, "the scan read {} files", scan.files);
    if let Err(e) = check(&scan, &cli, &listed()) {
        panic!("{e}");
    }
}

/// Writes `files` (path, text) under a fresh directory.
fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

const WORKSPACE: &str = "[workspace]\nmembers = [\"host\", \"front\", \"plugins/x\"]\n\
                         exclude = [\"front/fixtures\"]\n";

/// A front-end crate with one way in of each kind the scan reads, plus the
/// look-alikes it must not count.
const FRONT_LIB: &str = r##"//! A front-end. `.route("/v1/doc", get(h))` in a comment is no route.
use axum::extract::ws::WebSocketUpgrade;

pub mod area;

pub fn routes() -> Router<S> {
    Router::new()
        .route("/v1/x", get(h))
        // .route("/v1/commented", get(h))
        .route(
            "/v1/term",
            get(term),
        )
        .nest("/v2", area::routes())
}

const NOT_A_ROUTE: &str = ".route(\"/v1/in-a-string\", get(h)) #[tool(name = \"nope\")]";

async fn term(ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(|socket| async {})
}

#[tool_router]
impl Tools {
    #[tool(description = "zaps (name = \"not this\")", name = "zap")]
    async fn zap(&self) {}
}
"##;

fn fixture() -> tempfile::TempDir {
    tree(&[
        ("Cargo.toml", WORKSPACE),
        ("host/Cargo.toml", "[package]\nname = \"host\"\n"),
        (
            "host/src/lib.rs",
            "pub fn app() -> Router { Router::new().route(\"/healthz\", get(h)) }\n",
        ),
        ("front/Cargo.toml", "[package]\nname = \"sandbox-front\"\n"),
        ("front/src/lib.rs", FRONT_LIB),
        (
            "front/src/area.rs",
            "pub fn routes() -> Router<S> {\n    Router::new().route(\"/y\", post(y).delete(z))\n}\n",
        ),
        (
            "front/proto/zap.proto",
            "syntax = \"proto3\";\npackage sandboxd.v1;\n// rpc Commented(A) returns (B);\n\
             message A { string s = 1; }\nservice Zapper {\n  option (x) = { y: \"}\" };\n  \
             rpc Zap(A) returns (A);\n  rpc ZapMore (A) returns (stream A);\n}\n",
        ),
        (
            "front/fixtures/x.proto",
            "package p;\nservice S { rpc Excluded(A) returns (B); }\n",
        ),
        (
            "front/tests/t.rs",
            "fn f() { Router::new().route(\"/a-test\", get(h)); }\n",
        ),
        (
            "plugins/x/Cargo.toml",
            "[package]\nname = \"sandbox-backend-x\"\n",
        ),
        (
            "plugins/x/src/lib.rs",
            "fn f() { Router::new().route(\"/v1/backend\", get(h)); }\n",
        ),
    ])
}

/// An unlisted way in of each kind, in a crate other than the host, fails
/// the check, pointing at where it is registered; once listed, it passes.
/// Comments, string literals, tests, excluded paths and backends are not
/// read.
#[test]
fn an_unlisted_way_in_in_another_crate_fails_the_check() {
    let dir = fixture();
    let scan = scan::scan(dir.path());
    assert!(scan.problems.is_empty(), "{:?}", scan.problems);
    let expected = [
        ("api GET /v1/x", "front/src/lib.rs:8"),
        ("ws GET /v1/term", "front/src/lib.rs:10"),
        ("api POST /v2/y", "front/src/area.rs:2"),
        ("api DELETE /v2/y", "front/src/area.rs:2"),
        ("mcp tool zap", "front/src/lib.rs:25"),
        ("rpc sandboxd.v1.Zapper/Zap", "front/proto/zap.proto:7"),
        ("rpc sandboxd.v1.Zapper/ZapMore", "front/proto/zap.proto:8"),
        ("api GET /healthz", "host/src/lib.rs:1"),
    ];
    let found: Vec<(&str, &str)> = scan
        .entries
        .iter()
        .flat_map(|(entry, at)| at.iter().map(move |at| (entry.as_str(), at.as_str())))
        .collect();
    let mut want: Vec<_> = expected.to_vec();
    want.sort_unstable();
    assert_eq!(found, want);

    let host_only: BTreeSet<String> = ["api GET /healthz".to_owned()].into();
    let Err(message) = check(&scan, &BTreeSet::new(), &host_only) else {
        panic!("the check passed with the front-end's ways in unlisted");
    };
    for (entry, at) in &expected[..7] {
        assert!(
            message.contains(&format!("{entry} ({at})")),
            "{entry} not reported: {message}"
        );
    }
    let all: BTreeSet<String> = expected.iter().map(|(e, _)| (*e).to_owned()).collect();
    assert_eq!(check(&scan, &BTreeSet::new(), &all), Ok(()));
    // Listed and registered nowhere: stale.
    let mut more = all.clone();
    more.insert("mcp tool gone".to_owned());
    let stale = check(&scan, &BTreeSet::new(), &more).unwrap_err();
    assert!(stale.contains("mcp tool gone"), "{stale}");
}

/// A way in written so the scan cannot read it is a problem the check
/// fails on, not a way in it misses.
#[test]
fn what_the_scan_cannot_read_fails_the_check() {
    let cases: &[(&str, &str)] = &[
        ("fn f() { r.route(PATH, get(h)); }", "not a string literal"),
        (
            "fn f() { r.route(\"/p\", on(MethodFilter::GET, h)); }",
            "its methods",
        ),
        ("fn f() { r.route(\"/p\", method_router); }", "its methods"),
        ("fn f() { r.route_service(\"/p\", svc); }", "route_service"),
        (
            "fn f() { r.nest_service(\"/files\", ServeDir::new(\".\")); }",
            "nest_service",
        ),
        (
            "fn f() { r.nest(\"/v3\", inner); }",
            "`.nest(\"/v3\", inner)`",
        ),
        (
            "fn f() { r.nest(\"/v3\", nowhere::routes()); }",
            "nowhere::routes()",
        ),
        (
            "fn f() { r.nest(PREFIX, area::routes()); }",
            "prefix is not a string",
        ),
        (
            "async fn t(ws: WebSocketUpgrade) {}",
            "no `.route(PATH, get(t))`",
        ),
        ("#[tool]\nfn t() {}", "without `name"),
        (
            "#[tool(description = \"d\")]\nfn t() {}",
            "spell its name out",
        ),
        (
            "fn f() { let t = Tool::new(\"x\", \"d\", s); }",
            "built by hand",
        ),
    ];
    for (code, problem) in cases {
        let dir = tree(&[
            ("Cargo.toml", WORKSPACE),
            ("front/Cargo.toml", "[package]\nname = \"front\"\n"),
            ("front/src/lib.rs", code),
        ]);
        let scan = scan::scan(dir.path());
        assert!(
            scan.problems.len() == 1 && scan.problems[0].contains(problem),
            "{code}: {:?}",
            scan.problems
        );
        assert!(check(&scan, &BTreeSet::new(), &BTreeSet::new()).is_err());
    }
    // A `.merge` the scan cannot follow is a problem only where it could
    // hide a prefix: inside a nested module.
    let dir = tree(&[
        ("Cargo.toml", WORKSPACE),
        ("front/Cargo.toml", "[package]\nname = \"front\"\n"),
        (
            "front/src/lib.rs",
            "mod area;\nfn f() { r.nest(\"/n\", area::routes()).merge(v1); }\n",
        ),
        (
            "front/src/area.rs",
            "fn routes() { Router::new().merge(other) }\n",
        ),
        ("front/proto/p.proto", "rpc Lost(A) returns (B);\n"),
    ]);
    let problems = scan::scan(dir.path()).problems;
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("front/src/area.rs:1: a `.merge`")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("front/proto/p.proto:1: an rpc outside")),
        "{problems:?}"
    );
}

/// Only the sessions module touches a backend's `launch` or a sandbox's
/// `exec`: everything else, in every crate but the backends and the
/// boundary's own (`BACKEND_SIDE`), goes through `Session::exec`.
#[test]
fn only_sessions_reach_the_backend() {
    let reach = scan::backend_reaches(&root());
    // Not vacuous: the scan reads the runtime, where the one reach is.
    assert!(
        reach.sessions_reach,
        "{} was not read, or reaches no backend: the scan looks in the wrong place",
        scan::SESSIONS
    );
    assert!(reach.files >= 100, "the scan read {} files", reach.files);
    assert!(
        reach.offenders.is_empty(),
        "a backend reached outside {}: {:?}",
        scan::SESSIONS,
        reach.offenders
    );
}

/// A front-end crate that reaches a backend — in its sources or its tests —
/// fails; the sessions, a backend, the boundary's own crate, comments and
/// literals do not.
#[test]
fn a_front_end_reaching_the_backend_fails() {
    let dir = tree(&[
        (
            "Cargo.toml",
            "[workspace]\nmembers = [\"runtime\", \"front\", \"plugin-api\", \"plugins/x\"]\n",
        ),
        (
            "runtime/src/sessions/mod.rs",
            "fn f(b: &B) { let sandbox = b.launch(&spec); sandbox.exec(&r); }\n",
        ),
        (
            "front/src/lib.rs",
            "// sandbox.exec( in a comment\nconst S: &str = \"sandbox.exec(\";\n\
             fn f(b: &B) -> SandboxObject { b.launch(&spec) }\n",
        ),
        (
            "front/tests/t.rs",
            "fn t(sandbox: &S) { sandbox.exec(&r); }\n",
        ),
        ("plugin-api/src/host.rs", "pub struct SandboxObject;\n"),
        (
            "plugins/x/src/lib.rs",
            "fn f(sandbox: &S) { sandbox.exec(&r); }\n",
        ),
    ]);
    let reach = scan::backend_reaches(dir.path());
    assert!(reach.sessions_reach);
    assert_eq!(reach.files, 3);
    assert_eq!(
        reach.offenders,
        [
            "front/src/lib.rs: SandboxObject",
            "front/src/lib.rs: .launch(",
            "front/tests/t.rs: sandbox.exec("
        ]
    );
}

/// SPEC H4, H12: every route says which credential it takes — the owner's
/// token or a sandbox's agent credential — in `api/credentials.rs`, and
/// that list names no route that is gone.
#[test]
fn every_route_says_which_credential_it_takes() {
    let scan = scan::scan(&root());
    let routes: BTreeSet<String> = scan
        .entries
        .keys()
        .filter_map(|e| e.strip_prefix("api ").or_else(|| e.strip_prefix("ws ")))
        .map(str::to_owned)
        .collect();
    let listed: BTreeSet<String> = crate::api::credentials::ROUTES
        .iter()
        .chain(crate::api::credentials::SANDBOXD_ROUTES)
        .map(|(route, _)| (*route).to_owned())
        .collect();
    let unsaid: Vec<_> = routes.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&routes).collect();
    assert!(
        unsaid.is_empty() && gone.is_empty(),
        "say which credential these routes take in host/src/api/credentials.rs: {unsaid:?}; \
         these are listed there but registered nowhere: {gone:?}"
    );
}
