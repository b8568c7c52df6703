//! Checks that [`super::entry_points`] lists every way in (SPEC B10).

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory as _;

use crate::entry_points::{DISPATCHING, NOT_DISPATCHING};

fn listed() -> BTreeSet<String> {
    let mut all: BTreeSet<String> = DISPATCHING.iter().map(|e| (*e).to_owned()).collect();
    for (entry, why) in NOT_DISPATCHING {
        assert!(!why.is_empty());
        assert!(all.insert((*entry).to_owned()), "{entry} listed twice");
    }
    all
}

/// `(METHOD, PATH)` of every `.route(PATH, method(…).method(…))` in the
/// API's source, with `/v1` prefixed to the routes nested under it.
fn api_routes(source: &str) -> BTreeSet<String> {
    let mut routes = BTreeSet::new();
    for chunk in source.split(".route(\"").skip(1) {
        let Some((path, rest)) = chunk.split_once('"') else {
            continue;
        };
        let call = &rest[..rest.find("))").unwrap_or(rest.len())];
        let path = if path == "/healthz" {
            path.to_owned()
        } else {
            format!("/v1{path}")
        };
        for method in ["get", "post", "put", "patch", "delete"] {
            let used =
                call.contains(&format!(" {method}(")) || call.contains(&format!(".{method}("));
            if used {
                routes.insert(format!("api {} {path}", method.to_uppercase()));
            }
        }
    }
    routes
}

#[test]
fn every_cli_subcommand_and_api_route_is_listed() {
    let listed = listed();
    let mut found: BTreeSet<String> = crate::cli::Cli::command()
        .get_subcommands()
        .map(|c| format!("cli {}", c.get_name()))
        .collect();
    let api = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api/mod.rs"))
        .unwrap();
    let routes = api_routes(&api);
    assert!(
        routes.len() >= 10,
        "the route scan found too little: {routes:?}"
    );
    found.extend(routes);
    let unlisted: Vec<_> = found.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&found).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "list these in entry_points.rs (dispatching or not, with why): {unlisted:?}; \
         these no longer exist: {stale:?}"
    );
}

/// Only the sessions module touches a backend's `launch` or a sandbox's
/// `exec`: everything else goes through `Session::exec`.
#[test]
fn only_sessions_reach_the_backend() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut stack = vec![src.clone()];
    let mut offenders = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if relative == "sessions/mod.rs" || relative == "entry_points_tests.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for needle in ["SandboxObject", ".launch(", "sandbox.exec("] {
                if text.contains(needle) {
                    offenders.push(format!("{relative}: {needle}"));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "backend reached outside sessions: {offenders:?}"
    );
}
