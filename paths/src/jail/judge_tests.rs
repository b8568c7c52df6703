//! The two aids a front-end's tools use: judging a change without making
//! it (to classify it before asking anyone, SPEC H4), and a walk that
//! leaves out a directory it yielded (a search skipping what `.gitignore`
//! names, SPEC H2). Both on the planted tree of `tests.rs`.

use std::fs;

use super::jail_tests::{SENTINEL, plant, w};
use super::*;

#[test]
fn judging_a_change_says_what_the_change_would_say_and_changes_nothing() {
    let p = plant();
    let jail = p.jail();
    // Allowed: a new name, an existing plain file; nothing is written.
    jail.judge_change(&w("new.txt"), false).unwrap();
    jail.judge_change(&w("a.txt"), false).unwrap();
    jail.judge_change(&w("a.txt"), true).unwrap();
    assert!(!p.work.join("new.txt").exists());
    assert_eq!(fs::read(p.work.join("a.txt")).unwrap(), b"hello");
    // Refused as the change would be: by the rules, by the kernel, by the root.
    for (path, remove, rule) in [
        (w(".env"), false, "**/.env"),
        (w("deploy.pem"), false, "**/*.pem"),
        (w(".git/hooks/pre-commit"), false, ""),
        (w("dir_link/x.txt"), false, rule::ESCAPES_ROOT),
        (w("../outside/sentinel.txt"), true, rule::ESCAPES_ROOT),
        (
            JailPath::in_root("ro", "readme.txt"),
            false,
            rule::READ_ONLY_ROOT,
        ),
        (w("abs_link"), false, rule::FINAL_SYMLINK),
    ] {
        let refused = jail.judge_change(&path, remove).unwrap_err();
        let denial = refused
            .denial()
            .unwrap_or_else(|| panic!("{path:?}: {refused}"));
        assert!(denial.rule.contains(rule), "{path:?}: {}", denial.rule);
    }
    // A directory still to be made is the caller's to judge by name.
    let missing = jail
        .judge_change(&w("no/such/dir/x.txt"), false)
        .unwrap_err();
    assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(fs::read(p.outside.join("sentinel.txt")).unwrap(), SENTINEL);
}

#[test]
fn a_walk_can_leave_out_a_directory_it_yielded() {
    let p = plant();
    let jail = p.jail();
    let mut walk = jail.walk(&w("")).unwrap();
    let mut seen = Vec::new();
    while let Some(entry) = walk.next() {
        let entry = entry.unwrap();
        let name = entry.name().to_string_lossy().into_owned();
        if name == "sub" {
            walk.skip_dir();
        }
        seen.push(entry.path());
    }
    assert!(seen.contains(&p.work.join("sub")));
    assert!(
        !seen
            .iter()
            .any(|s| s.starts_with(p.work.join("sub")) && *s != p.work.join("sub")),
        "the walk entered the skipped directory: {seen:?}"
    );
    assert!(seen.contains(&p.work.join("a.txt")));
    // Skipping after a file leaves the walk as it was.
    let mut walk = jail.walk(&w("sub")).unwrap();
    let mut names = Vec::new();
    while let Some(entry) = walk.next() {
        let entry = entry.unwrap();
        if entry.kind() == EntryKind::File {
            walk.skip_dir();
        }
        names.push(entry.name().to_string_lossy().into_owned());
    }
    names.sort();
    assert_eq!(names, ["b.txt", "c.txt", "deep"]);
}
