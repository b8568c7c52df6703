//! Guardrails (SPEC H4): rules that map an effect class to allow, prompt or
//! deny, on top of the mode's table ([`class_decision`]).
//!
//! ```toml
//! # Never push to the main branches; ask before any other push (the default).
//! [[rule]]
//! class = "push_remote"
//! branches = ["main", "master", "release/*"]
//! decision = "deny"
//!
//! # Installs need no owner here.
//! [[rule]]
//! class = "install_package"
//! decision = "allow"
//! ```
//!
//! How a rule combines with the mode:
//! - a mode's **deny** is final: rules can never lower chat's hard-deny list
//!   or the read-only modes' allowlist;
//! - otherwise the matching rules decide, and among rules that match equally
//!   well (all unscoped, or all scoped to the branch) the strictest wins;
//!   a branch-scoped rule beats an unscoped one for that branch;
//! - a branch is known only when the command names it (`git push origin
//!   main`, `gh pr create --base main`); when it is not (`git push` with no
//!   refspec, `--all`, a variable), a scoped rule that is **stricter**
//!   applies anyway and one that is looser does not: not knowing fails
//!   closed.
//!
//! With no rules the mode's table is the whole policy; that is the default.

use std::fmt;

use serde::Deserialize;

use crate::{Class, Decision, SandboxMode, class_decision};

/// The classes a rule may scope to branches: the ones whose commands name
/// the branch they change.
pub const BRANCH_SCOPED: [Class; 2] = [Class::PushRemote, Class::OpenPullRequest];

/// One rule, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub class: Class,
    /// Branch patterns (`*` matches any run of characters); empty: every
    /// command of the class.
    pub branches: Vec<String>,
    pub decision: Decision,
    /// 1-based position in the file, for the rule's name in reasons.
    pub number: usize,
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "guardrail #{}: {}",
            self.number,
            self.class.description()
        )?;
        if !self.branches.is_empty() {
            write!(f, " to {}", self.branches.join(", "))?;
        }
        write!(f, " → {}", self.decision)
    }
}

/// A set of rules; empty by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guardrails {
    rules: Vec<Rule>,
    /// A push gateway judges every push per ref (SPEC H8): the command line
    /// is not asked about `push_remote` a second time.
    push_gateway: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    class: String,
    #[serde(default)]
    branches: Vec<String>,
    decision: String,
}

/// Which branches a command changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// The command is not about a branch (or its class is not scoped).
    NotApplicable,
    /// The command names these branches.
    Known(Vec<String>),
    /// It changes some branch, but which cannot be told statically.
    Unknown,
}

impl Guardrails {
    /// Reads a rules file (TOML, `[[rule]]` tables). Every mistake is an
    /// error naming the rule and the fix: a typo in a guardrail must not
    /// quietly drop it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: RulesFile =
            toml::from_str(text).map_err(|e| e.to_string().trim().replace('\n', " "))?;
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, raw) in file.rule.into_iter().enumerate() {
            let number = i + 1;
            let class = Class::ALL
                .into_iter()
                .find(|c| c.as_str() == raw.class)
                .ok_or_else(|| {
                    let names: Vec<&str> = Class::ALL.iter().map(|c| c.as_str()).collect();
                    format!(
                        "rule #{number}: class `{}` is unknown; use one of {}",
                        raw.class,
                        names.join(", ")
                    )
                })?;
            let decision = match raw.decision.as_str() {
                "allow" => Decision::Allow,
                "prompt" => Decision::Prompt,
                "deny" => Decision::Deny,
                other => {
                    return Err(format!(
                        "rule #{number}: decision `{other}` is unknown; use allow, prompt or deny"
                    ));
                }
            };
            if !raw.branches.is_empty() && !BRANCH_SCOPED.contains(&class) {
                return Err(format!(
                    "rule #{number}: `branches` works for push_remote and open_pull_request, \
                     whose commands name a branch; `{}` commands do not",
                    class.as_str()
                ));
            }
            if let Some(bad) = raw.branches.iter().find(|b| b.trim().is_empty()) {
                return Err(format!("rule #{number}: branch pattern {bad:?} is empty"));
            }
            rules.push(Rule {
                class,
                branches: raw.branches,
                decision,
                number,
            });
        }
        Ok(Self {
            rules,
            push_gateway: false,
        })
    }

    /// The same rules, with pushes judged by the push gateway instead of
    /// on the command line (the gateway asks [`Guardrails::resolve`] per ref).
    pub fn with_push_gateway(mut self) -> Self {
        self.push_gateway = true;
        self
    }

    /// Whether a push gateway judges pushes.
    pub fn push_gateway(&self) -> bool {
        self.push_gateway
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none (the mode's table alone decides).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The decision for one command of `class` in `mode` changing
    /// `targets`, and the guardrail that made it (`None`: the mode's table).
    pub fn resolve(
        &self,
        class: Class,
        mode: SandboxMode,
        targets: &Targets,
    ) -> (Decision, Option<&Rule>) {
        let base = class_decision(class, mode);
        if base == Decision::Deny {
            return (base, None);
        }
        let of_class = || self.rules.iter().filter(move |r| r.class == class);
        let unscoped = strictest(of_class().filter(|r| r.branches.is_empty()));
        let (start, start_rule) = match unscoped {
            Some(rule) => (rule.decision, Some(rule)),
            None => (base, None),
        };
        match targets {
            Targets::NotApplicable => (start, start_rule),
            Targets::Known(branches) if !branches.is_empty() => {
                let mut result: Option<(Decision, Option<&Rule>)> = None;
                for branch in branches {
                    let scoped = strictest(
                        &mut of_class().filter(|r| r.branches.iter().any(|p| glob(p, branch))),
                    );
                    let here = match scoped {
                        Some(rule) => (rule.decision, Some(rule)),
                        None => (start, start_rule),
                    };
                    if result.is_none_or(|(d, _)| here.0 > d) {
                        result = Some(here);
                    }
                }
                result.unwrap_or((start, start_rule))
            }
            Targets::Known(_) | Targets::Unknown => {
                // Any scoped rule might match: only the stricter ones count.
                match strictest(of_class().filter(|r| !r.branches.is_empty())) {
                    Some(rule) if rule.decision > start => (rule.decision, Some(rule)),
                    _ => (start, start_rule),
                }
            }
        }
    }
}

/// The strictest of some rules (the first among equals).
fn strictest<'a>(rules: impl Iterator<Item = &'a Rule>) -> Option<&'a Rule> {
    rules.fold(None, |best: Option<&Rule>, r| match best {
        Some(b) if b.decision >= r.decision => Some(b),
        _ => Some(r),
    })
}

/// `*` matches any run of characters (slashes included); the rest is exact.
fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut text) = text.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let Some((last, middle)) = parts.split_last() else {
        return true;
    };
    for part in middle {
        match text.find(part) {
            Some(at) => text = &text[at + part.len()..],
            None => return false,
        }
    }
    text.len() >= last.len() && text.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAIN_DENIED: &str = r#"
[[rule]]
class = "push_remote"
branches = ["main", "release/*"]
decision = "deny"

[[rule]]
class = "push_remote"
branches = ["wip/*"]
decision = "allow"

[[rule]]
class = "install_package"
decision = "allow"

[[rule]]
class = "create_commit"
decision = "prompt"
"#;

    fn known(branches: &[&str]) -> Targets {
        Targets::Known(branches.iter().map(|b| (*b).to_owned()).collect())
    }

    #[test]
    fn branch_scoped_rules_decide_for_their_branches() {
        let g = Guardrails::parse(MAIN_DENIED).unwrap();
        let chat = SandboxMode::Chat;
        let push = |t: &Targets| g.resolve(Class::PushRemote, chat, t).0;
        assert_eq!(push(&known(&["main"])), Decision::Deny);
        assert_eq!(push(&known(&["release/1.2"])), Decision::Deny);
        assert_eq!(
            push(&known(&["feature"])),
            Decision::Prompt,
            "the mode's table"
        );
        assert_eq!(push(&known(&["wip/x"])), Decision::Allow);
        // One of several targets denied: the push is denied.
        assert_eq!(push(&known(&["wip/x", "main"])), Decision::Deny);
        // Not knowing the branch: the stricter scoped rule applies, the
        // looser one does not.
        assert_eq!(push(&Targets::Unknown), Decision::Deny);
    }

    #[test]
    fn rules_loosen_or_tighten_but_never_lower_a_mode_deny() {
        let g = Guardrails::parse(MAIN_DENIED).unwrap();
        let (d, rule) = g.resolve(
            Class::InstallPackage,
            SandboxMode::Chat,
            &Targets::NotApplicable,
        );
        assert_eq!((d, rule.map(|r| r.number)), (Decision::Allow, Some(3)));
        let (d, _) = g.resolve(
            Class::CreateCommit,
            SandboxMode::Chat,
            &Targets::NotApplicable,
        );
        assert_eq!(d, Decision::Prompt);
        // Read-only modes: install stays denied whatever the rules say.
        let (d, rule) = g.resolve(
            Class::InstallPackage,
            SandboxMode::Plan,
            &Targets::NotApplicable,
        );
        assert_eq!((d, rule), (Decision::Deny, None));
        let allow_sudo = "[[rule]]\nclass = \"privilege_escalation\"\ndecision = \"allow\"\n";
        let g = Guardrails::parse(allow_sudo).unwrap();
        let (d, _) = g.resolve(
            Class::PrivilegeEscalation,
            SandboxMode::Chat,
            &Targets::NotApplicable,
        );
        assert_eq!(
            d,
            Decision::Deny,
            "chat's hard-deny list is not configurable"
        );
    }

    #[test]
    fn mistakes_are_errors_naming_the_rule() {
        for (text, needle) in [
            (
                "[[rule]]\nclass = \"push\"\ndecision = \"deny\"\n",
                "rule #1: class `push`",
            ),
            (
                "[[rule]]\nclass = \"push_remote\"\ndecision = \"no\"\n",
                "decision `no`",
            ),
            (
                "[[rule]]\nclass = \"install_package\"\nbranches = [\"main\"]\ndecision = \"deny\"\n",
                "`branches` works for push_remote",
            ),
            (
                "[[rule]]\nclass = \"push_remote\"\ndecison = \"deny\"\n",
                "decison",
            ),
            ("[[rules]]\n", "rules"),
        ] {
            let err = Guardrails::parse(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
        assert!(Guardrails::parse("").unwrap().is_empty());
    }

    /// The targets of the first branch-scoped command of a line.
    fn targets_of(line: &str) -> Targets {
        let a = crate::analyze(line);
        let i = a
            .classes
            .iter()
            .position(|(c, _)| BRANCH_SCOPED.contains(c))
            .unwrap_or_else(|| panic!("{line}: {a:?}"));
        a.targets[i].clone()
    }

    #[test]
    fn the_branches_a_command_changes() {
        for (line, want) in [
            ("git push origin main", known(&["main"])),
            ("git push -u origin HEAD:main", known(&["main"])),
            (
                "git push origin +feat:refs/heads/release/1",
                known(&["release/1"]),
            ),
            ("git push origin a b:c", known(&["a", "c"])),
            ("git push --delete origin old", known(&["old"])),
            ("git push -o ci.skip origin main", known(&["main"])),
            ("git push origin v1:refs/tags/v1", known(&[])),
            ("git -C sub push origin dev", known(&["dev"])),
            ("sudo git push origin main", known(&["main"])),
            ("sh -c 'git push origin main'", known(&["main"])),
            ("git push", Targets::Unknown),
            ("git push origin", Targets::Unknown),
            ("git push origin HEAD", Targets::Unknown),
            ("git push --all origin", Targets::Unknown),
            (
                "git push origin 'refs/heads/*:refs/heads/*'",
                Targets::Unknown,
            ),
            ("git push origin $BRANCH", Targets::Unknown),
            ("git push origin @", Targets::Unknown),
            ("gh pr create --base main --fill", known(&["main"])),
            ("gh pr create -B release/2", known(&["release/2"])),
            ("gh pr create --base=dev", known(&["dev"])),
            ("gh pr create --fill", Targets::Unknown),
            ("glab mr create --target-branch main", known(&["main"])),
        ] {
            assert_eq!(targets_of(line), want, "{line}");
        }
    }

    #[test]
    fn decide_with_names_the_guardrail() {
        let g = Guardrails::parse(MAIN_DENIED).unwrap();
        let v = crate::decide_with(
            &crate::analyze("git push origin main"),
            SandboxMode::Chat,
            &g,
        );
        assert_eq!(v.decision, Decision::Deny);
        assert!(
            v.rule
                .starts_with("chat: guardrail #1: push to a remote to main"),
            "{}",
            v.rule
        );
        let v = crate::decide_with(&crate::analyze("npm install"), SandboxMode::Chat, &g);
        assert_eq!(v.decision, Decision::Allow);
        assert!(v.rule.contains("guardrail #3"), "{}", v.rule);
        // Without rules the verdict is exactly the mode's.
        let line = "cargo test && git push origin wip/x";
        let plain = crate::classify(line, SandboxMode::Chat);
        let none = crate::decide_with(
            &crate::analyze(line),
            SandboxMode::Chat,
            &Guardrails::default(),
        );
        assert_eq!(plain, none);
        let (d, rule) = crate::network_rule(SandboxMode::Chat, &g);
        assert_eq!(
            (d, rule.as_str()),
            (
                Decision::Allow,
                "chat: access the network → allow (the mode's table)"
            )
        );
        assert_eq!(
            crate::network_rule(SandboxMode::Review, &g).0,
            Decision::Deny
        );
    }

    #[test]
    fn the_example_file_is_valid() {
        let g = Guardrails::parse(include_str!("../../examples/guardrails.toml")).unwrap();
        assert_eq!(g.len(), 3);
    }

    #[test]
    fn branch_globs() {
        assert!(glob("main", "main"));
        assert!(!glob("main", "mainline"));
        assert!(glob("release/*", "release/1.2"));
        assert!(!glob("release/*", "prerelease/1"));
        assert!(glob("*", "anything/at/all"));
        assert!(glob("a*b*c", "a-x-b-y-c"));
        assert!(!glob("a*b*c", "a-x-c-y-b"));
        assert!(glob("*-hotfix", "v2-hotfix"));
        assert!(!glob("ab*ba", "aba"));
    }
}
