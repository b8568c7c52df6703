//! The guardrails of the mutating file tools (SPEC H4, H12): every change a
//! call would make is an effect with a class, judged before anything is
//! done —
//!
//! | class | what | chat | read-only modes |
//! |---|---|---|---|
//! | `write_file` | create, change or remove a file beneath a writable root that no rule protects | allow | (the tools do not exist) |
//! | `write_protected_file` | what the sandbox's own rules refuse: a create-time glob (secrets, rc files, git hooks, tool and agent config), a protected path or registered checkout, another name of a protected file, a read-only root | deny | (idem) |
//!
//! — and resolved like a command's classes, by the mode's table and the
//! guardrails file (`class = "write_file"`, `decision = "prompt"` asks an
//! owner before every write; `write_protected_file` is denied whatever a
//! rule says). The strictest effect decides. A prompt goes to the command
//! policy's approver — the owners connected to `GET /v1/approvals` — and
//! waits within the approval timeout; with no owner it is a deny, at once.
//! The decision is in the tool's result (`guardrail`), and the jail judges
//! each change again when it is made.

use sandbox_paths::jail::{JailError, JailPath};
use sandbox_policy::{Class, Decision, SandboxMode, Targets};
use sandbox_runtime::Session;
use sandbox_runtime::command_policy::approvals::Question;
use serde_json::json;

use crate::args::{EffectOut, GuardrailOut};
use crate::failure::ToolError;
use crate::files::roots::{Located, Roots, tidy};
use crate::files::{SessionFiles, jail_failure};

/// One change a call would make.
#[derive(Debug, Clone)]
pub struct Effect {
    pub class: Class,
    /// The guest path.
    pub path: String,
    /// The rule's refusal, for a protected file.
    pub refusal: Option<ToolError>,
}

/// Judges a change of one located path: the jail's own answer when its
/// directory exists, else the create-time rules on the path it would have.
pub fn judge(files: &SessionFiles, located: &Located, path: &JailPath, remove: bool) -> Effect {
    let guest = located.guest.display().to_string();
    let protected = |refusal: ToolError| Effect {
        class: Class::WriteProtectedFile,
        path: guest.clone(),
        refusal: Some(refusal),
    };
    match files.jail.judge_change(path, remove) {
        Ok(()) => {}
        Err(e @ JailError::Refused(_)) => return protected(jail_failure(&guest, &e)),
        // A new file in a directory still to be made: the name it will have.
        Err(e) if !remove && e.raw_os_error() == Some(libc::ENOENT) => {
            if let Some(root) = files.jail.root_path(&Roots::label(located.root)) {
                let host = root.join(tidy(&located.relative));
                if let Some(refusal) = files.jail.rules().check_create(&host) {
                    return protected(
                        ToolError::refused(
                            format!(
                                "write {guest}: refused by the rule `{}`: the dispatch policy's \
                                 create-time rules refuse creating it, as the sandbox's guard does",
                                refusal.rule
                            ),
                            refusal.rule,
                        )
                        .at(&guest),
                    );
                }
            }
        }
        // Anything else fails the change itself, with its own error.
        Err(_) => {}
    }
    Effect {
        class: Class::WriteFile,
        path: guest,
        refusal: None,
    }
}

/// What the guardrails decided for a call's effects, before asking anyone.
#[derive(Debug, Clone)]
pub struct Resolution {
    pub decision: Decision,
    pub rule: String,
    pub effects: Vec<Effect>,
}

/// The strictest decision over the effects (pure): the mode's table and
/// the guardrails, as for a command's classes.
pub fn resolve(
    effects: Vec<Effect>,
    mode: SandboxMode,
    guardrails: &sandbox_policy::Guardrails,
) -> Resolution {
    let m = mode.as_str();
    let mut decision = Decision::Allow;
    let mut rule: Option<String> = None;
    for effect in &effects {
        let (d, by) = guardrails.resolve(effect.class, mode, &Targets::NotApplicable);
        let why = match (&effect.refusal, by) {
            (Some(refusal), _) => format!(
                "{m}: {} is denied ({}: {})",
                effect.class.description(),
                effect.path,
                refusal.rule.as_deref().unwrap_or("a rule")
            ),
            (None, Some(g)) => format!("{m}: {g} ({})", effect.path),
            (None, None) => format!(
                "{m}: {} → {d} (the mode's table) ({})",
                effect.class.description(),
                effect.path
            ),
        };
        if rule.is_none() || d > decision {
            decision = decision.max(d);
            rule = Some(why);
        }
    }
    Resolution {
        decision,
        rule: rule.unwrap_or_else(|| format!("{m}: nothing to change")),
        effects,
    }
}

impl Resolution {
    /// The result's `guardrail` field.
    pub fn report(&self, answer: Option<String>) -> GuardrailOut {
        GuardrailOut {
            decision: self.decision.as_str().into(),
            rule: self.rule.clone(),
            effects: self
                .effects
                .iter()
                .map(|e| EffectOut {
                    class: e.class.as_str().into(),
                    path: e.path.clone(),
                })
                .collect(),
            answer,
        }
    }

    fn refusal(&self, message: String, answer: Option<String>) -> ToolError {
        let first = self.effects.iter().find_map(|e| e.refusal.clone());
        let rule = first
            .as_ref()
            .and_then(|r| r.rule.clone())
            .unwrap_or_else(|| self.rule.clone());
        let mut error =
            ToolError::refused(message, rule).with("guardrail", json!(self.report(answer)));
        if let Some(path) = first.and_then(|r| r.path) {
            error = error.at(path);
        }
        error
    }
}

/// Applies the resolution: allow goes on, deny is refused naming the rule,
/// a prompt asks the session's approver (with none, deny) — the answer in
/// the result either way. `Ok` carries the `guardrail` report.
pub async fn settle(
    session: &Session,
    tool: &str,
    resolution: Resolution,
) -> Result<GuardrailOut, ToolError> {
    let policy = session.commands();
    if !policy.enforce {
        return Ok(GuardrailOut {
            rule: "the command policy is off ([policy] enforce = false): only the jail decides"
                .into(),
            ..resolution.report(None)
        });
    }
    match resolution.decision {
        Decision::Allow => Ok(resolution.report(None)),
        Decision::Deny => {
            // A protected file's own refusal says it best.
            let message = resolution
                .effects
                .iter()
                .find_map(|e| e.refusal.as_ref().map(|r| r.message.clone()))
                .unwrap_or_else(|| {
                    format!("{tool}: refused by the guardrails: {}", resolution.rule)
                });
            Err(resolution.refusal(message, None))
        }
        Decision::Prompt => {
            let paths: Vec<&str> = resolution.effects.iter().map(|e| e.path.as_str()).collect();
            let question = Question {
                session_id: session.id.clone(),
                command: format!("{tool} {}", paths.join(" ")),
                mode: session.mode().as_str().to_owned(),
                rule: resolution.rule.clone(),
                reasons: Vec::new(),
                asking: resolution
                    .effects
                    .iter()
                    .map(|e| format!("{}: {tool} {}", e.class.description(), e.path))
                    .collect(),
            };
            match policy.ask(&question).await {
                Ok(()) => Ok(GuardrailOut {
                    decision: "prompt".into(),
                    ..resolution.report(Some("allowed by the owner".into()))
                }),
                Err(why) => Err(resolution.refusal(
                    format!("{tool}: {} asks first; {why}", resolution.rule),
                    Some(why),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_policy::Guardrails;

    fn effect(class: Class, path: &str) -> Effect {
        Effect {
            class,
            path: path.into(),
            refusal: (class == Class::WriteProtectedFile)
                .then(|| ToolError::refused("refused", "**/.env").at(path)),
        }
    }

    #[test]
    fn the_strictest_effect_decides_and_protected_files_are_always_denied() {
        let none = Guardrails::default();
        let r = resolve(
            vec![effect(Class::WriteFile, "/w/a.rs")],
            SandboxMode::Chat,
            &none,
        );
        assert_eq!(r.decision, Decision::Allow);
        let r = resolve(
            vec![
                effect(Class::WriteFile, "/w/a.rs"),
                effect(Class::WriteProtectedFile, "/w/.env"),
            ],
            SandboxMode::Chat,
            &none,
        );
        assert_eq!(r.decision, Decision::Deny);
        assert!(
            r.rule.contains("/w/.env") && r.rule.contains("**/.env"),
            "{}",
            r.rule
        );
        // A guardrail can make writes ask, never let a protected file through.
        let rules = Guardrails::parse(
            "[[rule]]\nclass = \"write_file\"\ndecision = \"prompt\"\n\n\
             [[rule]]\nclass = \"write_protected_file\"\ndecision = \"allow\"\n",
        )
        .unwrap();
        let r = resolve(
            vec![effect(Class::WriteFile, "/w/a.rs")],
            SandboxMode::Chat,
            &rules,
        );
        assert_eq!(r.decision, Decision::Prompt);
        assert!(r.rule.contains("guardrail #1"), "{}", r.rule);
        let r = resolve(
            vec![effect(Class::WriteProtectedFile, "/w/.env")],
            SandboxMode::Chat,
            &rules,
        );
        assert_eq!(r.decision, Decision::Deny);
    }
}
