//! `git`: every subcommand to its class (commits, pushes with their targets,
//! history rewrites, network reads), unknown subcommands opaque (an alias).

use super::options::dynamic;
use super::shells::run_string;
use super::{Cmd, classify};
use crate::Class::*;
use crate::guardrails::Targets;
use crate::walk::{Stdin, Walker};
use crate::words::{Arg, cut, shown};

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "git" => git(w, c),
        _ => return false,
    }
    true
}

#[rustfmt::skip]
const GIT_READ_ONLY: &[&str] = &[
    "status", "log", "diff", "show", "rev-parse", "ls-files", "ls-tree", "cat-file", "blame", "annotate",
    "describe", "shortlog", "grep", "show-ref", "show-branch", "merge-base", "name-rev", "for-each-ref",
    "count-objects", "rev-list", "diff-tree", "diff-files", "diff-index", "var", "version", "help",
    "whatchanged", "check-ignore", "check-attr", "check-ref-format", "cherry", "range-diff", "verify-commit",
    "verify-tag", "check-mailmap", "get-tar-commit-id", "--version", "--help", "-h", "-v",
];

#[rustfmt::skip]
const GIT_MUTATING: &[&str] = &[
    "add", "rm", "mv", "restore", "checkout", "switch", "reset", "clean", "init", "gc", "prune", "repack",
    "apply", "update-index", "update-ref", "symbolic-ref", "write-tree", "read-tree", "hash-object", "mktag",
    "mktree", "sparse-checkout", "maintenance", "format-patch", "bundle", "replace", "mergetool", "difftool",
    "citool", "gui", "pack-refs", "pack-objects", "index-pack", "unpack-objects", "prune-packed",
    "credential", "credential-cache", "credential-store", "fsck", "mailinfo", "mailsplit", "rerere",
    "checkout-index", "request-pull", "merge-file", "merge-tree", "merge-index", "upload-pack",
    "receive-pack", "upload-archive", "daemon", "instaweb", "fast-export", "multi-pack-index",
    "commit-graph", "restore", "stage", "unpack-file", "backfill", "scalar",
];

pub(super) fn git(w: &mut Walker, c: Cmd) {
    let mut i = 1;
    let mut config_override = false;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        if !a.literal {
            dynamic(w, c, "git subcommand");
            return;
        }
        match t {
            "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix"
            | "--list-cmds" | "--attr-source" => i += 2,
            "-c" | "--config-env" => {
                config_override = true;
                i += 2;
            }
            _ if t.starts_with("--config-env=") || t.starts_with("--exec-path") => {
                config_override = true;
                i += 1;
            }
            _ if t.starts_with('-') && !matches!(t, "--version" | "--help" | "-h" | "-v") => i += 1,
            _ => break,
        }
    }
    let Some(sub) = c.text(i) else {
        if c.appended {
            w.opaque(
                format!("xargs supplies the git subcommand: {}", shown(c.args)),
                None,
            );
        } else {
            w.found(ReadOnly, c.args, "git without a subcommand prints help");
        }
        return;
    };
    let g = Cmd {
        args: c.args,
        stdin: c.stdin,
        appended: c.appended,
    };
    let rest = c.rest(i + 1);
    let first = |k: usize| {
        rest.iter()
            .filter(|a| !a.text.starts_with('-'))
            .nth(k)
            .map(|a| a.text.as_str())
    };
    let has = |flags: &[&str]| rest.iter().any(|a| flags.contains(&a.text.as_str()));
    let read_only = |w: &mut Walker, ok: bool, why: &str| {
        if ok && config_override {
            w.found(
                Other,
                g.args,
                "`git -c` can configure programs for git to run",
            );
        } else if ok {
            w.found(ReadOnly, g.args, why);
        } else {
            w.found(Other, g.args, why);
        }
    };
    match sub {
        "commit" | "merge" | "cherry-pick" | "revert" | "am" | "commit-tree" | "filter-branch"
        | "fast-import" | "filter-repo" => w.found(CreateCommit, c.args, ""),
        "rebase" => {
            w.found(CreateCommit, c.args, "");
            let mut k = 0;
            while k < rest.len() {
                let t = rest[k].text.as_str();
                if t == "-x" || t == "--exec" {
                    if let Some(a) = rest.get(k + 1) {
                        run_string(w, a, "git rebase --exec", &Stdin::Inherited);
                    }
                    k += 2;
                } else if let Some(v) = t.strip_prefix("--exec=") {
                    let a = Arg {
                        text: v.to_string(),
                        literal: rest[k].literal,
                        procsubst: false,
                    };
                    run_string(w, &a, "git rebase --exec", &Stdin::Inherited);
                    k += 1;
                } else {
                    k += 1;
                }
            }
        }
        "pull" => {
            w.found(AccessNetwork, c.args, "fetches from a remote");
            w.found(CreateCommit, c.args, "may create a merge commit");
        }
        "push" => w.found_targets(PushRemote, c.args, "", git_push_targets(rest)),
        "send-pack" | "http-push" => w.found(PushRemote, c.args, ""),
        "clone" | "fetch" | "ls-remote" | "fetch-pack" | "http-fetch" | "send-email"
        | "imap-send" | "svn" | "p4" => w.found(AccessNetwork, c.args, "talks to a remote"),
        "archive" => {
            if rest.iter().any(|a| a.text.starts_with("--remote")) {
                w.found(AccessNetwork, c.args, "talks to a remote");
            } else {
                w.found(Other, c.args, "writes an archive");
            }
        }
        "remote" => match first(0) {
            None | Some("get-url") => read_only(w, true, "lists remotes"),
            Some("show") if has(&["-n"]) => read_only(w, true, "shows a remote"),
            Some("show" | "update" | "prune") => {
                w.found(AccessNetwork, c.args, "talks to a remote")
            }
            Some(_) => w.found(Other, c.args, "changes remotes"),
        },
        "submodule" => match first(0) {
            None | Some("status" | "summary") => read_only(w, true, ""),
            Some("update" | "add" | "sync" | "init") => {
                w.found(AccessNetwork, c.args, "clones or fetches submodules")
            }
            Some("foreach") => {
                w.found(Other, c.args, "runs a command in every submodule");
                let pos = rest.iter().position(|a| a.text == "foreach").unwrap_or(0);
                let cmd: Vec<Arg> = rest[pos + 1..]
                    .iter()
                    .filter(|a| !a.text.starts_with("--"))
                    .cloned()
                    .collect();
                let text = cmd
                    .iter()
                    .map(|a| a.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ");
                if cmd.iter().all(|a| a.literal) {
                    w.program(&text, &Stdin::Inherited);
                } else {
                    w.opaque(
                        format!(
                            "`git submodule foreach` runs text computed at run time: {}",
                            cut(&text)
                        ),
                        Some(&text),
                    );
                }
            }
            Some(_) => w.found(Other, c.args, "changes submodules"),
        },
        "lfs" => match first(0) {
            Some("push") => w.found(PushRemote, c.args, ""),
            Some("fetch" | "pull" | "clone") => w.found(AccessNetwork, c.args, "talks to a remote"),
            Some("ls-files" | "status" | "env" | "version") | None => read_only(w, true, ""),
            Some(_) => w.found(Other, c.args, "git lfs"),
        },
        "subtree" => match first(0) {
            Some("push") => w.found(PushRemote, c.args, ""),
            Some("pull") => {
                w.found(AccessNetwork, c.args, "fetches from a remote");
                w.found(CreateCommit, c.args, "creates a merge commit");
            }
            Some("add" | "merge") => w.found(CreateCommit, c.args, ""),
            _ => w.found(Other, c.args, "git subtree"),
        },
        "bisect" => {
            w.found(Other, c.args, "moves HEAD");
            if first(0) == Some("run") {
                let pos = rest.iter().position(|a| a.text == "run").unwrap_or(0);
                let inner = &rest[pos + 1..];
                if !inner.is_empty() {
                    classify(w, inner, &Stdin::Inherited, false);
                }
            }
        }
        "stash" => read_only(w, matches!(first(0), Some("list" | "show")), "stash"),
        "branch" => read_only(w, git_branch_lists(rest), "branch"),
        "tag" => {
            let lists = rest.is_empty()
                || (has(&[
                    "-l",
                    "--list",
                    "-v",
                    "--verify",
                    "--contains",
                    "--points-at",
                    "-n",
                ]) && !has(&[
                    "-d",
                    "--delete",
                    "-a",
                    "--annotate",
                    "-s",
                    "--sign",
                    "-u",
                    "-f",
                    "--force",
                    "-m",
                    "-F",
                    "-e",
                ]));
            read_only(w, lists, "tag");
        }
        "config" => {
            let gets = has(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "--list",
                "-l",
                "get",
                "list",
            ]);
            let sets = has(&[
                "--unset",
                "--unset-all",
                "--add",
                "--replace-all",
                "--rename-section",
                "--remove-section",
                "-e",
                "--edit",
                "set",
                "unset",
                "rename-section",
                "remove-section",
                "edit",
            ]);
            read_only(w, gets && !sets, "config");
        }
        "worktree" => read_only(w, first(0) == Some("list"), "worktree"),
        "reflog" => read_only(
            w,
            matches!(first(0), None | Some("show" | "exists")),
            "reflog",
        ),
        "notes" => read_only(w, matches!(first(0), None | Some("list" | "show")), "notes"),
        _ if GIT_READ_ONLY.contains(&sub) => {
            let risky = rest.iter().find(|a| {
                let t = a.text.as_str();
                t == "--output"
                    || t.starts_with("--output=")
                    || t == "--ext-diff"
                    || t == "--textconv"
                    || t.starts_with("--exec")
                    || t.starts_with("--open-files-in-pager")
                    || (sub == "grep" && t.starts_with("-O"))
            });
            match risky {
                Some(r) => w.found(
                    Other,
                    c.args,
                    &format!("`{}` writes files or runs programs", r.text),
                ),
                None => read_only(w, true, ""),
            }
        }
        _ if GIT_MUTATING.contains(&sub) => w.found(Other, c.args, ""),
        _ => w.opaque(
            format!("`git {sub}` is an alias or an extension; what it runs is unknown"),
            None,
        ),
    }
}

/// `git branch` that only lists.
fn git_branch_lists(rest: &[Arg]) -> bool {
    const MUTATING: &[&str] = &[
        "-d",
        "-D",
        "--delete",
        "-m",
        "-M",
        "--move",
        "-c",
        "-C",
        "--copy",
        "-f",
        "--force",
        "--set-upstream-to",
        "-u",
        "--unset-upstream",
        "--edit-description",
        "-t",
        "--track",
        "--no-track",
        "--create-reflog",
    ];
    const VALUED: &[&str] = &[
        "--contains",
        "--no-contains",
        "--merged",
        "--no-merged",
        "--points-at",
        "--sort",
        "--format",
        "--color",
        "--column",
    ];
    let listing = rest
        .iter()
        .any(|a| matches!(a.text.as_str(), "-l" | "--list"));
    let mut prev_valued = false;
    for a in rest {
        let t = a.text.as_str();
        if MUTATING.contains(&t) || t.starts_with("--set-upstream-to=") {
            return false;
        }
        if t.starts_with('-') {
            prev_valued = VALUED.contains(&t);
            continue;
        }
        if !listing && !prev_valued {
            return false;
        }
        prev_valued = false;
    }
    true
}

/// The branches a `git push` updates, from its refspecs (`main`,
/// `HEAD:main`, `+src:refs/heads/dst`, `:gone`). Unknown when it cannot be
/// told from the line: no refspec (push.default decides), `HEAD` or other
/// revision syntax as the destination, a pattern, `--all`/`--mirror`/
/// `--branches`/`--tags`, or any word computed at run time.
fn git_push_targets(rest: &[Arg]) -> Targets {
    const WITH_VALUE: &[&str] = &["--repo", "-o", "--push-option", "--receive-pack", "--exec"];
    let mut positional: Vec<&Arg> = Vec::new();
    let mut options_done = false;
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let t = a.text.as_str();
        i += 1;
        if !a.literal {
            return Targets::Unknown;
        }
        if !options_done && t == "--" {
            options_done = true;
        } else if !options_done && t.starts_with('-') {
            if matches!(t, "--all" | "--mirror" | "--branches" | "--tags") {
                return Targets::Unknown;
            }
            if WITH_VALUE.contains(&t) {
                i += 1;
            }
        } else {
            positional.push(a);
        }
    }
    if positional.len() < 2 {
        return Targets::Unknown;
    }
    let mut branches = Vec::new();
    for refspec in &positional[1..] {
        let spec = refspec.text.trim_start_matches('+');
        let dst = match spec.rsplit_once(':') {
            Some((_, dst)) => dst,
            None => spec,
        };
        let plain = !dst.is_empty()
            && !dst.starts_with("HEAD")
            && !dst.contains(['*', '@', '~', '^', '{'])
            && dst != "-";
        if !plain {
            return Targets::Unknown;
        }
        match dst.strip_prefix("refs/") {
            // A tag or another ref is no branch.
            Some(r) => branches.extend(r.strip_prefix("heads/").map(str::to_string)),
            None => branches.push(dst.to_string()),
        }
    }
    Targets::Known(branches)
}
