//! The forges' CLIs, `gh` and `glab`: pull requests with their base branch,
//! releases, `api` calls by method, unknown subcommands opaque (an extension).

use super::Cmd;
use super::options::dynamic;
use crate::Class::*;
use crate::guardrails::Targets;
use crate::walk::Walker;
use crate::words::{Arg, shown};

/// Classifies `c` when `name` is one of this family's; `false` when it is not.
pub(super) fn dispatch(w: &mut Walker, name: &str, c: Cmd) -> bool {
    match name {
        "gh" => forge(w, c, "gh"),
        "glab" => forge(w, c, "glab"),
        _ => return false,
    }
    true
}

pub(super) fn forge(w: &mut Walker, c: Cmd, tool: &str) {
    // The first two positionals are the command group and action; `-R X`
    // and `--repo X` may come anywhere.
    let mut pos: Vec<usize> = Vec::new();
    let mut i = 1;
    while i < c.args.len() && pos.len() < 2 {
        let a = &c.args[i];
        let t = a.text.as_str();
        if matches!(t, "-R" | "--repo" | "--hostname") {
            i += 2;
            continue;
        }
        if t.starts_with('-') && a.literal {
            i += 1;
            continue;
        }
        if !a.literal {
            dynamic(w, c, &format!("{tool} subcommand"));
            return;
        }
        pos.push(i);
        i += 1;
    }
    let group = pos.first().and_then(|&i| c.text(i));
    let action = pos.get(1).and_then(|&i| c.text(i));
    let Some(group) = group else {
        if c.appended {
            w.opaque(
                format!("xargs supplies the {tool} subcommand: {}", shown(c.args)),
                None,
            );
        } else {
            w.found(ReadOnly, c.args, "prints help");
        }
        return;
    };
    const READS: &[&str] = &[
        "view", "list", "ls", "diff", "status", "checks", "watch", "download", "verify",
    ];
    let (class, why) = match (group, action) {
        ("pr" | "mr", None) | ("issue" | "release" | "repo" | "workflow" | "run", None) => {
            (ReadOnly, "prints help")
        }
        ("pr" | "mr", Some("create" | "new")) => (OpenPullRequest, ""),
        ("pr" | "mr", Some("checkout" | "co")) => (AccessNetwork, "fetches a pull request branch"),
        ("pr" | "mr", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("pr" | "mr", Some(_)) => (PublishReviewOrMerge, ""),
        ("issue", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("issue", Some(_)) => (WriteExternalTracker, ""),
        ("release", Some(a)) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
        ("release", Some(_)) => (PublishPackage, "publishes a release"),
        ("repo", Some("clone" | "view" | "list" | "ls")) => (AccessNetwork, "reads from the forge"),
        ("repo", Some("set-default")) => (Other, "local setting"),
        ("repo", Some(_)) => (PushRemote, "changes a remote repository"),
        ("api", _) => {
            forge_api(w, c, pos.first().copied().unwrap_or(1) + 1, tool);
            return;
        }
        ("search" | "browse" | "status", _) => (AccessNetwork, "reads from the forge"),
        ("auth" | "config", _) => (Other, "changes local forge settings"),
        ("help" | "version" | "completion", _) => (ReadOnly, ""),
        ("alias", Some("list" | "ls"))
        | ("extension" | "ext" | "extensions", Some("list" | "ls" | "search")) => (ReadOnly, ""),
        ("alias", _) => (Other, "changes aliases"),
        ("extension" | "ext" | "extensions", Some("install" | "upgrade")) => {
            (InstallPackage, "installs a gh extension")
        }
        ("extension" | "ext" | "extensions", _) => (Other, "manages extensions"),
        (
            "workflow" | "run" | "secret" | "variable" | "label" | "gist" | "project" | "cache"
            | "ruleset" | "codespace" | "org" | "attestation" | "snippet" | "ci" | "pipeline"
            | "schedule" | "variable-set",
            a,
        ) => match a {
            Some(a) if READS.contains(&a) => (AccessNetwork, "reads from the forge"),
            None => (ReadOnly, "prints help"),
            Some(_) => (WriteExternalTracker, "writes to the forge"),
        },
        _ => {
            w.opaque(
                format!("`{tool} {group}` is an alias or an extension; what it runs is unknown"),
                None,
            );
            return;
        }
    };
    if class == OpenPullRequest {
        let after = pos.get(1).map_or(c.args.len(), |&i| i + 1);
        let targets = pull_request_base(&c.args[after.min(c.args.len())..], tool);
        w.found_targets(class, c.args, why, targets);
    } else {
        w.found(class, c.args, why);
    }
}

/// The branch a `gh pr create` / `glab mr create` targets: `--base X`
/// (`-B`, gh) or `--target-branch X` (`-b`, glab); without one, the forge's
/// default branch, which cannot be told here.
fn pull_request_base(args: &[Arg], tool: &str) -> Targets {
    let (short, long) = if tool == "glab" {
        ("-b", "--target-branch")
    } else {
        ("-B", "--base")
    };
    let mut found = None;
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        let value = if t == short || t == long {
            i += 1;
            args.get(i)
        } else if t.strip_prefix(long).is_some_and(|v| v.starts_with('=')) {
            Some(&args[i])
        } else {
            None
        };
        if let Some(v) = value {
            let text = v.text.strip_prefix(&format!("{long}=")).unwrap_or(&v.text);
            found = v.literal.then(|| text.to_string());
            if found.is_none() {
                return Targets::Unknown;
            }
        }
        i += 1;
    }
    match found {
        Some(branch) if !branch.is_empty() => Targets::Known(vec![branch]),
        _ => Targets::Unknown,
    }
}

/// `gh api`: a write when the method says so or when fields are sent
/// without an explicit method (gh then POSTs).
fn forge_api(w: &mut Walker, c: Cmd, start: usize, tool: &str) {
    let mut method: Option<String> = None;
    let mut fields = false;
    let mut endpoint: Option<&str> = None;
    let mut i = start;
    while i < c.args.len() {
        let a = &c.args[i];
        let t = a.text.as_str();
        let value = |k: usize| {
            c.args
                .get(k)
                .map(|a| (a.text.to_ascii_uppercase(), a.literal))
        };
        match t {
            "-X" | "--method" => {
                match value(i + 1) {
                    Some((m, true)) => method = Some(m),
                    Some((_, false)) => {
                        dynamic(w, c, &format!("`{tool} api` method"));
                        return;
                    }
                    None => {}
                }
                i += 2;
            }
            "-f" | "-F" | "--field" | "--raw-field" | "--input" => {
                fields = true;
                i += 2;
            }
            "-H" | "--header" | "-q" | "--jq" | "-t" | "--template" | "--hostname" | "--cache"
            | "-p" | "--preview" => i += 2,
            _ if t.starts_with("--method=") => {
                method = Some(t["--method=".len()..].to_ascii_uppercase());
                i += 1;
            }
            _ if t.starts_with("-X") && t.len() > 2 => {
                method = Some(t[2..].to_ascii_uppercase());
                i += 1;
            }
            _ if t.starts_with("--field=")
                || t.starts_with("--raw-field=")
                || t.starts_with("--input=")
                || (t.starts_with("-f") && t.len() > 2)
                || (t.starts_with("-F") && t.len() > 2) =>
            {
                fields = true;
                i += 1;
            }
            _ if t.starts_with('-') => i += 1,
            _ => {
                if endpoint.is_none() {
                    endpoint = Some(t);
                }
                i += 1;
            }
        }
    }
    let write = match &method {
        Some(m) => !matches!(m.as_str(), "GET" | "HEAD"),
        None => fields,
    };
    if !write {
        w.found(AccessNetwork, c.args, "reads from the forge API");
        return;
    }
    let e = endpoint.unwrap_or_default();
    let (class, why) = if e.contains("/pulls")
        && (e.contains("/merge")
            || e.contains("/reviews")
            || e.contains("/comments")
            || e.contains("/requested_reviewers"))
    {
        (PublishReviewOrMerge, "writes to a pull request")
    } else if e.trim_end_matches('/').ends_with("/pulls") {
        (OpenPullRequest, "creates a pull request")
    } else if e.contains("/pulls/") {
        (PublishReviewOrMerge, "edits a pull request")
    } else if e.contains("/issues") {
        (WriteExternalTracker, "writes to issues")
    } else if e.contains("/releases") {
        (PublishPackage, "publishes a release")
    } else if e.contains("/git/")
        || e.contains("/contents/")
        || e.contains("/merges")
        || e.ends_with("/repos")
        || e.contains("/forks")
        || e.contains("/branches")
    {
        (PushRemote, "changes a remote repository")
    } else {
        (WriteExternalTracker, "writes through the forge API")
    };
    w.found(class, c.args, why);
}
