//! The command policy for bash (SPEC H3, H4, H6, H7; docs/design.md §5):
//! parse a command line, find **every** command it would run, give each an
//! effect class, and resolve the classes to allow / prompt / deny for a mode.
//!
//! ```
//! use sandbox_plugin_api::SandboxMode;
//! use sandbox_policy::{Class, Decision, classify};
//!
//! let v = classify("cargo test && git push origin main", SandboxMode::Chat);
//! assert_eq!(v.decision, Decision::Prompt);
//! assert!(v.classes.contains(&(Class::PushRemote, "git push origin main".to_string())));
//!
//! // A command hidden in a parameter expansion is still found.
//! let v = classify("echo ${x#$(sudo rm -rf /)}", SandboxMode::Chat);
//! assert_eq!(v.decision, Decision::Deny);
//!
//! // Read-only modes allow an allowlist and nothing else.
//! assert_eq!(classify("git log | head", SandboxMode::Plan).decision, Decision::Allow);
//! assert_eq!(classify("git commit -m x", SandboxMode::Plan).decision, Decision::Deny);
//! ```
//!
//! The crate is pure: no I/O, no environment, no file system (the one fact
//! about the working directory it uses comes in as data, [`Workdir`]). Work is bounded
//! (input length, nesting, re-parses, bytes parsed, commands), and anything
//! past a bound — like anything the parser rejects — is **opaque** and gets
//! the mode's strict value (see [`opaque_decision`]).
//!
//! How the line is walked (docs/research/egress-policy.md B4): `brush-parser`
//! turns the line into an AST; every simple command in lists, pipelines,
//! compound commands, function bodies, coprocesses and process substitutions
//! is visited; every word (arguments, assignment values, redirect targets,
//! here-strings, unquoted heredoc bodies, `for`/`case` words, `[[ … ]]`
//! operands, arithmetic text) goes through `brush_parser::word::parse`, and
//! command substitutions (`$(…)`, backticks, nested escaped backticks) are
//! parsed again and walked; the string operands of parameter expansions
//! (`${x#$(cmd)}`, `${x:-…}`, `${a[…]}`) and arithmetic text are scanned for
//! substitutions too. Wrappers (`sudo`, `env`, `xargs`, `find -exec`, …) are
//! unwrapped and `bash -c '…'`, `eval '…'`, `trap '…'`, `su -c '…'` strings
//! are parsed recursively.
//!
//! # Decisions
//!
//! - **Opaque** means "this line runs shell text that cannot be read here":
//!   `eval` or `sh -c` of text computed at run time, a shell or interpreter
//!   reading its program from a pipe, a process substitution or stdin
//!   (`curl … | bash`, `source <(…)`, `bash <(…)`), an unknown `git`
//!   or `gh` subcommand (an alias or extension), a subcommand `xargs`
//!   supplies, anything brush-parser rejects, and anything past a bound.
//!   Where the hidden text has a visible template (`eval "git push $X"`,
//!   a heredoc with expansions fed to `bash`), the template is classified
//!   too, so the verdict is never *looser* than what can be seen.
//! - **A command name computed at run time** (`$CMD`, `"$GIT" push`,
//!   `$d/prog`, `$(command -v x) …`, `{git,push}`, globs) is opaque in name
//!   only: in chat mode behind a sandbox it runs, logged as opaque; where
//!   the policy is the only barrier (`none`) and in the read-only modes it
//!   keeps the opaque value ([`computed_name_decision`], [`Barrier`]).
//! - **Programs in named files or inline non-shell code are not opaque**:
//!   `./script.sh`, `bash build.sh`, `source .venv/bin/activate`, `make`,
//!   `npm run x`, `python3 -c '…'`, `perl -pe '…'` are [`Class::Other`]
//!   (allowed in chat, denied in the read-only modes).
//!   docs/research/egress-policy.md B4 step 4 suggests opaque for these; the
//!   line drawn here is that their program text is either in the line or in
//!   the worktree the agent can write anyway, so a prompt would add friction
//!   but no protection — the sandbox and the push gateway (SPEC H8) are the
//!   boundary for what they do.
//! - **Network**: `git clone|fetch|pull|ls-remote`, `git remote show|update`,
//!   `gh pr view`/`gh issue list`/`gh api` reads and the like are
//!   [`Class::AccessNetwork`]: allowed in chat (the "Access the network" rule
//!   governs them through the egress proxies, SPEC E5) and denied in the
//!   read-only modes, whose allowlist is local-only — a network read can
//!   still carry data out in its URL. `git pull` is also
//!   [`Class::CreateCommit`]. Cloud CLIs (`aws`, `gcloud`, …) are network
//!   tools here; their hosts are not on the egress baseline.
//! - **Read-only modes** allow the allowlist only, and an output redirect to
//!   a file (not `/dev/null`) adds an [`Class::Other`] entry, so `ls > x`
//!   is denied there.
//! - **Container escape** includes `docker run` with *any* host bind mount
//!   (`-v /path:…`, `-v $(pwd):…`), `--privileged`, host namespaces,
//!   `--cap-add`, `--device`, unconfined security options; `docker exec`;
//!   `kubectl exec|attach|debug`; and talking to a container runtime socket.
//!   A plain `docker run image` is [`Class::Other`].
//!
//! # Known limits
//!
//! Static classification cannot be complete; these are not seen:
//! commands reached through variables' *values* (`x='a[$(cmd)]'; echo
//! $((x))`, `${!name}`), aliases defined in an earlier command line, a
//! script's contents, remote commands (`ssh host 'sudo …'` is only network
//! access), and destructive targets supplied at run time (`echo / | xargs
//! rm -rf`, `rm -rf "$DIR"`). brush-parser 0.4.0 rejects `select` loops,
//! `$(case … esac)` and `for ((…$(cmd)…))`, so those lines are opaque.
//! Lines it would hang or panic on are refused before it sees them
//! (`parse.rs`), including every unterminated here-document.

#![forbid(unsafe_code)]

mod commands;
mod guardrails;
mod parse;
mod walk;
mod words;

#[cfg(test)]
mod classify_tests;
#[cfg(test)]
mod fuzz_tests;
/// The classifier's test table; public for benchmarks with `corpus`.
#[cfg(any(test, feature = "corpus"))]
#[doc(hidden)]
pub mod table;

use std::fmt;

pub use sandbox_plugin_api::SandboxMode;

pub use crate::guardrails::{BRANCH_SCOPED, Guardrails, Rule, Targets};

/// What a command does, as far as the policy is concerned (SPEC H7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// `git commit|merge|rebase|cherry-pick|revert|am|pull|commit-tree|filter-branch`.
    CreateCommit,
    /// `git push`, `git send-pack`, `gh repo create|delete|edit|…`.
    PushRemote,
    /// `gh pr create`, `glab mr create`.
    OpenPullRequest,
    /// `gh pr merge|review|comment|close|edit|reopen|ready`.
    PublishReviewOrMerge,
    /// `gh issue create|edit|comment|close|…`, and other writes through `gh`
    /// (workflow runs, secrets, labels, `gh api` with a write method).
    WriteExternalTracker,
    /// Package installs and download-and-run tools (`npm install`, `npx`,
    /// `pip install`, `cargo install`, `apt-get install`, …). Not `npm init`
    /// without an initializer, `npx --no …`, or `npx` of a bin the project
    /// already has (see [`Workdir`]): those are [`Class::Other`].
    InstallPackage,
    /// `npm publish`, `cargo publish`, `twine upload`, `gem push`,
    /// `docker push`, `gh release create`, ….
    PublishPackage,
    /// General network tools (`curl`, `wget`, `nc`, `ssh`, `scp`, remote
    /// `rsync`, `/dev/tcp` redirects) and git/gh commands that only talk to a
    /// remote (`git clone|fetch|pull|ls-remote`, `gh pr view`).
    AccessNetwork,
    /// `sudo`, `doas`, `su`, `pkexec`, `runuser`, setuid `chmod`, `setcap`, ….
    PrivilegeEscalation,
    /// `rm -rf /` (or `~`, `$HOME`, system dirs, `--no-preserve-root`),
    /// `mkfs*`, `dd of=/dev/…`, writes to block devices, partitioners,
    /// `shutdown`/`reboot`, fork bombs, recursive `chmod`/`chown` of `/`,
    /// `kill -9 -1`.
    SystemDestruction,
    /// `nsenter`, `unshare`, `chroot`, `mount`, module loading, `sysctl -w`,
    /// writes under `/proc/sys` or `/sys`, container runtimes with
    /// `--privileged`/host namespaces/host mounts, `docker exec`, the
    /// container runtime sockets.
    ContainerEscape,
    /// On the read-only allowlist (`ls`, `cat`, `grep`, `rg`, `find` without
    /// actions, `git status|log|diff|show`, list-form `git branch`, …).
    ReadOnly,
    /// Anything else: assumed to mutate local state.
    Other,
    /// An in-server file tool creating, changing or removing a file beneath
    /// a writable root that no rule of the sandbox protects (SPEC H4).
    /// Never a command's class.
    WriteFile,
    /// An in-server file tool changing what the sandbox's own rules
    /// protect: a create-time glob, a protected path or registered
    /// checkout, a file the host runs later, a secret (SPEC H2, H4). Denied
    /// in every mode, like the hard-deny list. Never a command's class.
    WriteProtectedFile,
}

impl Class {
    /// Every class, in declaration order.
    pub const ALL: [Class; 15] = [
        Self::CreateCommit,
        Self::PushRemote,
        Self::OpenPullRequest,
        Self::PublishReviewOrMerge,
        Self::WriteExternalTracker,
        Self::InstallPackage,
        Self::PublishPackage,
        Self::AccessNetwork,
        Self::PrivilegeEscalation,
        Self::SystemDestruction,
        Self::ContainerEscape,
        Self::ReadOnly,
        Self::Other,
        Self::WriteFile,
        Self::WriteProtectedFile,
    ];

    /// A stable machine name (`create_commit`, …) for logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreateCommit => "create_commit",
            Self::PushRemote => "push_remote",
            Self::OpenPullRequest => "open_pull_request",
            Self::PublishReviewOrMerge => "publish_review_or_merge",
            Self::WriteExternalTracker => "write_external_tracker",
            Self::InstallPackage => "install_package",
            Self::PublishPackage => "publish_package",
            Self::AccessNetwork => "access_network",
            Self::PrivilegeEscalation => "privilege_escalation",
            Self::SystemDestruction => "system_destruction",
            Self::ContainerEscape => "container_escape",
            Self::ReadOnly => "read_only",
            Self::Other => "other",
            Self::WriteFile => "write_file",
            Self::WriteProtectedFile => "write_protected_file",
        }
    }

    /// The human wording of the guardrail rule (SPEC H7), used in reasons.
    pub fn description(self) -> &'static str {
        match self {
            Self::CreateCommit => "create a commit",
            Self::PushRemote => "push to a remote",
            Self::OpenPullRequest => "open a pull request",
            Self::PublishReviewOrMerge => "publish a review or merge",
            Self::WriteExternalTracker => "write to an external tracker",
            Self::InstallPackage => "install a package",
            Self::PublishPackage => "publish a package",
            Self::AccessNetwork => "access the network",
            Self::PrivilegeEscalation => "privilege escalation",
            Self::SystemDestruction => "system or disk destruction",
            Self::ContainerEscape => "container or namespace escape",
            Self::ReadOnly => "read-only command",
            Self::Other => "mutating command",
            Self::WriteFile => "write a file in the workspace",
            Self::WriteProtectedFile => "write a protected file",
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome for a command line. Ordered: the strictest wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Ask the owner first; with no connected owner this is a deny (SPEC H4).
    Prompt,
    /// Refuse.
    Deny,
}

impl Decision {
    /// `allow`, `prompt` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Prompt => "prompt",
            Self::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What [`analyze`] found in a command line, before any mode is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Every command found, with its class and its own text (wrappers
    /// unwrapped: `sudo git push` yields `(PrivilegeEscalation, "sudo git
    /// push")` and `(PushRemote, "git push")`). Deduplicated, in the order
    /// found.
    pub classes: Vec<(Class, String)>,
    /// Why each entry of `classes` got its class (same order, same length).
    pub why: Vec<String>,
    /// The branches each entry changes (same order, same length), for
    /// branch-scoped guardrails.
    pub targets: Vec<Targets>,
    /// Why the line is opaque; empty when every command could be seen.
    pub opaque: Vec<String>,
    /// The commands whose *name* is computed at run time (`$d/prog`,
    /// `"$CC" -o t t.c`, `$(command -v x) …`): opaque too, but in name only
    /// — the line runs no text the parser could not read — and decided by
    /// [`computed_name_decision`].
    pub computed_names: Vec<String>,
}

impl Analysis {
    /// Whether some part of the line could not be seen statically.
    pub fn is_opaque(&self) -> bool {
        !self.opaque.is_empty() || !self.computed_names.is_empty()
    }
}

/// What stands between a command and the host besides this policy
/// (docs/threat-model.md T12: the policy is a guardrail against honest
/// mistakes; the sandbox and, for pushes, the gateway are the boundary).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Barrier {
    /// Nothing: the command runs on the host (the `none` backend), or the
    /// caller does not know where it runs (a hook, `cc_server policy`).
    #[default]
    PolicyOnly,
    /// A sandbox (bwrap, microvm): what the command does stays inside it.
    Sandbox,
}

/// The policy's answer for one command line in one mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The strictest decision over every command found (and the line's
    /// opaqueness).
    pub decision: Decision,
    /// Every command found with its class; see [`Analysis::classes`].
    pub classes: Vec<(Class, String)>,
    /// One line per command (`git push: push to a remote → prompt`) and per
    /// opaque part, for the UI and the audit log.
    pub reasons: Vec<String>,
    /// Whether some part of the line could not be seen statically.
    pub opaque: bool,
    /// What decided, e.g. `chat: privilege escalation is denied (sudo)`.
    pub rule: String,
    /// Each part that asks first, as an approver is shown it
    /// (`install a package: npm install`); empty unless the decision is
    /// [`Decision::Prompt`] somewhere in the line.
    pub asking: Vec<String>,
}

/// The decision for one class in one mode (SPEC H3, H6).
///
/// | class | chat | review / plan / orchestrate |
/// |---|---|---|
/// | privilege escalation, system destruction, container escape, a file tool writing a protected file | deny | deny |
/// | push, open PR, publish review/merge, external tracker, install, publish | prompt | deny |
/// | create a commit, access the network, other, a file tool writing in the workspace | allow | deny |
/// | read-only | allow | allow |
///
/// In chat, creating a commit is local and allowed (pushing it is what asks);
/// network access is allowed here because the sandbox's own "Access the
/// network" rule governs it (SPEC E5: deny turns the egress proxies' allowlist
/// empty), so asking again per command would double the prompt.
pub fn class_decision(class: Class, mode: SandboxMode) -> Decision {
    if mode.is_read_only() {
        return match class {
            Class::ReadOnly => Decision::Allow,
            _ => Decision::Deny,
        };
    }
    match class {
        Class::PrivilegeEscalation
        | Class::SystemDestruction
        | Class::ContainerEscape
        | Class::WriteProtectedFile => Decision::Deny,
        Class::PushRemote
        | Class::OpenPullRequest
        | Class::PublishReviewOrMerge
        | Class::WriteExternalTracker
        | Class::InstallPackage
        | Class::PublishPackage => Decision::Prompt,
        Class::CreateCommit
        | Class::AccessNetwork
        | Class::ReadOnly
        | Class::Other
        | Class::WriteFile => Decision::Allow,
    }
}

/// The mode's strict value, given to an opaque line: deny in the read-only
/// modes; prompt in chat.
///
/// Chat prompts rather than denies, as docs/research/egress-policy.md B4
/// (steps 1 and 6) recommends: an opaque line there is usually an ordinary script
/// (`eval "$(ssh-agent -s)"`, `curl … | sh` installers, a parser gap such as
/// `select`), and a prompt lets the owner decide while still failing closed —
/// a prompt with no connected owner is a deny (SPEC H4). The hard-deny list
/// is not weakened by this: every part of an opaque line that *can* be seen
/// is still classified, so `sudo eval "$X"` is denied.
pub fn opaque_decision(mode: SandboxMode) -> Decision {
    if mode.is_read_only() {
        Decision::Deny
    } else {
        Decision::Prompt
    }
}

/// The decision for a command whose name is computed at run time
/// ([`Analysis::computed_names`]): it runs in chat mode behind a sandbox,
/// logged as opaque (`Verdict::opaque`, its reason on the event stream) —
/// the seeds' chat mode denies the fixed deny list, asks before remote-state
/// changes and runs the rest, and a configure-style probe (`cc -o "$d/t"
/// t.c && "$d/t"`) is the rest: the same lines in a script file run, since
/// the policy never reads a script, so asking here stopped ordinary work and
/// protected nothing. Every part of the line that can be seen is still
/// classified (`"$CC" x && sudo y` is denied). Where the policy is the only
/// barrier ([`Barrier::PolicyOnly`]) it keeps the strict value of an opaque
/// line, and the read-only modes deny it, as before.
pub fn computed_name_decision(mode: SandboxMode, barrier: Barrier) -> Decision {
    match barrier {
        Barrier::Sandbox if !mode.is_read_only() => Decision::Allow,
        _ => opaque_decision(mode),
    }
}

/// Parse `line` and classify every command it would run; no mode applied.
/// Nothing is known about the working directory ([`Workdir::default`]).
pub fn analyze(line: &str) -> Analysis {
    walk::analyze(line, &Workdir::default())
}

/// [`analyze`] for a line run in a directory the host looked at first.
pub fn analyze_in(line: &str, workdir: &Workdir) -> Analysis {
    walk::analyze(line, workdir)
}

/// What the host found in the directory a command line will run in — the
/// only fact about the file system the classifier takes, given as data so
/// the crate stays pure and table-testable.
///
/// It exists for one misclassification (SPEC H7): `npx vite` in a
/// project whose `node_modules/.bin/vite` exists runs that local file and
/// downloads nothing (npm's `libnpmexec` looks for the name in
/// `node_modules/.bin` of the project and its ancestors before it asks the
/// registry), so it is [`Class::Other`] — local code, like `npm run` —
/// not [`Class::InstallPackage`]. Whether the file exists cannot be read
/// from the line, so the host lists those directories before it classifies
/// and passes the names here. The alternatives were weaker: a callback
/// would put I/O inside the classifier; asking for `npx --no vite` (which
/// can never download, and is classified [`Class::Other`] with no fact at
/// all) does not match what agents and `package.json` scripts type.
///
/// The fact is used only where it certainly applies: a plain bin name as
/// the first operand of `npx` / `npm exec`, with no `--package`, `--call`,
/// `--prefix` or `--workspace`, and no `cd`/`pushd`/`popd` earlier in the
/// line. It is read when the command is admitted; a command that removes
/// the file before `npx` runs makes it download after all — the policy is a
/// guardrail, and the sandbox's egress rules still govern that download.
/// In a member of an npm workspace npm starts its lookup at the workspace
/// root, so a bin found only in the member's own `node_modules/.bin` counts
/// here although npm would fetch instead: the same guardrail caveat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workdir {
    /// The file names in `node_modules/.bin` of the working directory and
    /// of its ancestors inside the shared tree (only regular files, links
    /// followed, as npm checks them).
    pub npm_bins: std::collections::BTreeSet<String>,
}

/// Apply a mode's decision table ([`class_decision`], [`opaque_decision`])
/// to an [`Analysis`]: the strictest decision wins.
pub fn decide(analysis: &Analysis, mode: SandboxMode) -> Verdict {
    decide_with(analysis, mode, &Guardrails::default())
}

/// [`decide`] with guardrails on top of the mode's table (see
/// [`Guardrails`]: they never lower a mode's deny), for a command whose
/// barrier is not known ([`Barrier::PolicyOnly`]).
pub fn decide_with(analysis: &Analysis, mode: SandboxMode, guardrails: &Guardrails) -> Verdict {
    decide_behind(analysis, mode, guardrails, Barrier::PolicyOnly)
}

/// [`decide_with`] for a command that runs behind `barrier` (what that
/// changes: [`computed_name_decision`]).
pub fn decide_behind(
    analysis: &Analysis,
    mode: SandboxMode,
    guardrails: &Guardrails,
    barrier: Barrier,
) -> Verdict {
    let m = mode.as_str();
    let mut decision = Decision::Allow;
    let mut reasons = Vec::with_capacity(
        analysis.classes.len() + analysis.opaque.len() + analysis.computed_names.len(),
    );
    let mut asking = Vec::new();
    // The first entry reaching the final decision names the rule.
    let mut decider: Option<String> = None;
    // A guardrail that let a command through that the mode would not have.
    let mut loosened_by: Option<String> = None;
    let mut consider = |d: Decision, rule: String, decision: &mut Decision| {
        if d > *decision || (d == *decision && decider.is_none() && d != Decision::Allow) {
            *decision = d;
            decider = Some(rule);
        }
    };
    for (i, (class, command)) in analysis.classes.iter().enumerate() {
        let targets = analysis.targets.get(i).unwrap_or(&Targets::NotApplicable);
        let at_gateway =
            *class == Class::PushRemote && guardrails.push_gateway() && !mode.is_read_only();
        let (d, guardrail) = match at_gateway {
            true => (Decision::Allow, None),
            false => guardrails.resolve(*class, mode, targets),
        };
        let why = match at_gateway {
            true => "judged per ref by the push gateway",
            false => analysis.why.get(i).map(String::as_str).unwrap_or_default(),
        };
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(" ({why})")
        };
        let by = guardrail.map(|g| format!(" by {g}")).unwrap_or_default();
        reasons.push(format!("{command}: {}{why} → {d}{by}", class.description()));
        if d == Decision::Prompt {
            asking.push(format!("{}: {command}", class.description()));
        }
        let rule = match (guardrail, mode.is_read_only(), d) {
            (Some(g), _, _) => format!("{m}: {g} ({command})"),
            (None, true, _) => format!(
                "{m}: only read-only commands are allowed; {} is denied ({command})",
                class.description()
            ),
            (None, false, Decision::Deny) => {
                format!("{m}: {} is denied ({command})", class.description())
            }
            (None, false, _) => format!("{m}: {} asks first ({command})", class.description()),
        };
        if d == Decision::Allow && guardrail.is_some() && loosened_by.is_none() {
            loosened_by = Some(rule.clone());
        }
        consider(d, rule, &mut decision);
    }
    let od = opaque_decision(mode);
    for why in &analysis.opaque {
        reasons.push(format!("opaque: {why} → {od}"));
        if od == Decision::Prompt {
            asking.push(format!("an opaque command line: {why}"));
        }
        let verb = if od == Decision::Deny {
            "is denied"
        } else {
            "asks first"
        };
        consider(
            od,
            format!("{m}: an opaque command line {verb} ({why})"),
            &mut decision,
        );
    }
    let cd = computed_name_decision(mode, barrier);
    // When nothing else decides, what let the line run says so.
    let mut ran_opaque: Option<String> = None;
    for why in &analysis.computed_names {
        reasons.push(format!("opaque: {why} → {cd}"));
        if cd == Decision::Prompt {
            asking.push(format!("an opaque command line: {why}"));
        }
        let verb = match cd {
            Decision::Deny => "is denied",
            Decision::Prompt => "asks first",
            Decision::Allow => "runs behind the sandbox",
        };
        let rule = format!("{m}: an opaque command line {verb} ({why})");
        if cd == Decision::Allow && ran_opaque.is_none() {
            ran_opaque = Some(rule.clone());
        }
        consider(cd, rule, &mut decision);
    }
    let rule = decider.or(loosened_by).or(ran_opaque).unwrap_or_else(|| {
        if analysis.classes.is_empty() {
            format!("{m}: nothing to run")
        } else if mode.is_read_only() {
            format!("{m}: every command is read-only")
        } else {
            format!("{m}: allowed (nothing on the deny or ask lists)")
        }
    });
    Verdict {
        decision,
        classes: analysis.classes.clone(),
        reasons,
        opaque: analysis.is_opaque(),
        rule,
        asking,
    }
}

/// The "Access the network" rule for a run in `mode` (SPEC E5): the
/// decision and what made it. Read once at launch; deny turns the network
/// off, allow and prompt leave it on.
pub fn network_rule(mode: SandboxMode, guardrails: &Guardrails) -> (Decision, String) {
    let m = mode.as_str();
    let (d, rule) = guardrails.resolve(Class::AccessNetwork, mode, &Targets::NotApplicable);
    let text = match rule {
        Some(rule) => format!("{m}: {rule}"),
        None => format!("{m}: access the network → {d} (the mode's table)"),
    };
    (d, text)
}

/// Classify a bash command line for a mode: [`analyze`] then [`decide`].
/// Never panics; bounded work on any input.
pub fn classify(line: &str, mode: SandboxMode) -> Verdict {
    decide(&analyze(line), mode)
}
