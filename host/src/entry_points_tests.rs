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

/// `(METHOD, PATH)` of every `.route(PATH, method(…).method(…))` in one
/// area module of the API, which carries its full paths.
fn api_routes(source: &str) -> BTreeSet<String> {
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
            let used = [' ', '.', '\n']
                .iter()
                .any(|before| call.contains(&format!("{before}{method}(")));
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
    let mut routes = BTreeSet::new();
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api")).unwrap() {
        routes.extend(api_routes(
            &std::fs::read_to_string(entry.unwrap().path()).unwrap(),
        ));
    }
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
