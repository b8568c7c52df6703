//! The command policy at the dispatch seam (SPEC B10, E5, H3, H4, H6, H12).
//!
//! Every command any entry point runs passes [`CommandPolicy::admit`] inside
//! `Session::exec` before the backend sees it: the argv becomes a shell line,
//! `sandbox-policy` classifies every command in it, the mode's table and the
//! guardrails decide, and a prompt goes to the policy's [`Approver`]: the
//! owners connected to the API (none connected means deny), or for
//! `cc_server run --ask` the person at its terminal. The sandbox has no way
//! to answer a prompt.

pub mod approvals;
pub mod workdir;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use sandbox_policy::{Barrier, Decision, Guardrails, SandboxMode, Verdict, Workdir};

use self::approvals::{Answer, Approvals, Question};
use self::workdir::HostDir;

/// Who answers a prompt (SPEC H4): one seam, so every way of asking —
/// owners on `GET /v1/approvals` ([`Approvals`]), the terminal of `run
/// --ask` ([`terminal::Terminal`]) — gets the same question and its answer
/// is applied in one place, [`CommandPolicy::admit`].
pub trait Approver: Send + Sync {
    /// Asks about one command: `Ok` lets this one command run; `Err` says
    /// why the answer is deny, for the refusal the client sees.
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<(), String>>;
}

impl Approver for Approvals {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            match Approvals::ask(self, question).await {
                Answer::Allowed => Ok(()),
                other => Err(other.refusal().unwrap_or("the owner denied it").to_owned()),
            }
        })
    }
}

/// The command policy's settings, resolved (by the front-end's config, from
/// `[policy]` and the flags).
#[derive(Debug, Clone)]
pub struct PolicySettings {
    pub enforce: bool,
    pub guardrails: sandbox_policy::Guardrails,
    pub guardrails_file: Option<PathBuf>,
    pub approval_timeout: Duration,
}

/// The warning logged at every start while the policy is off.
pub const OFF_NOTICE: &str = "command policy OFF ([policy] enforce = false in the config): \
    commands are not classified; only the sandbox stands between them and the host";

/// The policy in force for a server or a `run`.
pub struct CommandPolicy {
    /// `false` only by an explicit config switch (`[policy] enforce = false`),
    /// logged at every start: commands then meet only the sandbox.
    pub enforce: bool,
    pub guardrails: Guardrails,
    /// The guardrails file, when one was given.
    pub guardrails_file: Option<PathBuf>,
    /// The owners' connections, for the API's `/v1/approvals` routes.
    pub approvals: Arc<Approvals>,
    /// Who a prompt goes to: `approvals` unless a run chose otherwise
    /// ([`CommandPolicy::answered_by`]).
    approver: Arc<dyn Approver>,
}

impl std::fmt::Debug for CommandPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandPolicy")
            .field("enforce", &self.enforce)
            .field("guardrails", &self.guardrails)
            .field("guardrails_file", &self.guardrails_file)
            .finish_non_exhaustive()
    }
}

impl Default for CommandPolicy {
    fn default() -> Self {
        let approvals = Approvals::new(approvals::DEFAULT_TIMEOUT);
        Self {
            enforce: true,
            guardrails: Guardrails::default(),
            guardrails_file: None,
            approver: Arc::clone(&approvals) as Arc<dyn Approver>,
            approvals,
        }
    }
}

/// Why a command did not reach the backend.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub verdict: Verdict,
    /// For a prompt: why it ended as a deny.
    pub answer: Option<String>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.answer {
            Some(answer) => write!(f, "refused by policy: {}; {answer}", self.verdict.rule),
            None => write!(f, "refused by policy: {}", self.verdict.rule),
        }
    }
}

impl CommandPolicy {
    pub fn from_settings(settings: &PolicySettings) -> Self {
        let approvals = Approvals::new(settings.approval_timeout);
        Self {
            enforce: settings.enforce,
            guardrails: settings.guardrails.clone(),
            guardrails_file: settings.guardrails_file.clone(),
            approver: Arc::clone(&approvals) as Arc<dyn Approver>,
            approvals,
        }
    }

    /// The same policy with prompts going to `approver` instead of the
    /// API's owners (`run --ask`: the terminal).
    pub fn answered_by(self, approver: Arc<dyn Approver>) -> Self {
        Self { approver, ..self }
    }

    /// The verdict for one command line in one mode (no owner asked),
    /// knowing nothing of the working directory.
    pub fn check(&self, line: &str, mode: SandboxMode) -> Verdict {
        self.check_in(line, mode, &Workdir::default())
    }

    /// [`CommandPolicy::check`] for a line run in a directory whose facts
    /// the host read ([`workdir::look`]).
    pub fn check_in(&self, line: &str, mode: SandboxMode, workdir: &Workdir) -> Verdict {
        self.check_behind(line, mode, workdir, Barrier::PolicyOnly)
    }

    /// [`CommandPolicy::check_in`] for a command that runs behind `barrier`
    /// (a sandbox, or nothing: see [`Barrier`]).
    pub fn check_behind(
        &self,
        line: &str,
        mode: SandboxMode,
        workdir: &Workdir,
        barrier: Barrier,
    ) -> Verdict {
        let analysis = sandbox_policy::analyze_in(line, workdir);
        sandbox_policy::decide_behind(&analysis, mode, &self.guardrails, barrier)
    }

    /// The "Access the network" rule for a run in `mode`, read once at
    /// launch (SPEC E5): `Some(rule)` when it denies, so the run gets
    /// `networkEnabled: false`; allow and ask leave the network on.
    pub fn network_denied(&self, mode: SandboxMode) -> Option<String> {
        if !self.enforce {
            return None;
        }
        let (decision, rule) = sandbox_policy::network_rule(mode, &self.guardrails);
        (decision == Decision::Deny).then_some(rule)
    }

    /// Asks the approver about an action that is not a command line — an
    /// in-server file tool's effect (SPEC H4) — through the same seam, so
    /// the same owners (or `--ask`'s terminal) answer, and with none the
    /// answer is deny. `Err` says why the answer is deny.
    pub async fn ask(&self, question: &Question) -> Result<(), String> {
        self.approver.ask(question).await
    }

    /// Lets a command through, asks the approver, or refuses it. `place` is
    /// where it runs on the host, when that is in a bind: its
    /// `node_modules/.bin` is read for the classifier ([`Workdir`]).
    /// `barrier` is what the command runs behind: a sandbox, or nothing
    /// (`none`), where the policy is the only barrier.
    pub async fn admit(
        &self,
        session_id: &str,
        mode: SandboxMode,
        argv: &[String],
        place: Option<HostDir>,
        barrier: Barrier,
    ) -> Result<Option<Verdict>, Refusal> {
        self.admit_as(session_id, mode, argv, place, barrier, false)
            .await
    }

    /// [`CommandPolicy::admit`]; with `owner_asked`, the owner asked for this
    /// very command line in an authenticated request of their own (a
    /// terminal's shell): that request is the answer to a prompt, so a
    /// prompt lets it run. A deny stays a deny.
    pub async fn admit_as(
        &self,
        session_id: &str,
        mode: SandboxMode,
        argv: &[String],
        place: Option<HostDir>,
        barrier: Barrier,
        owner_asked: bool,
    ) -> Result<Option<Verdict>, Refusal> {
        if !self.enforce {
            return Ok(None);
        }
        let line = command_line(argv);
        let workdir = match place {
            Some(place) if workdir::matters_for(&line) => {
                let line = line.clone();
                tokio::task::spawn_blocking(move || workdir::look(&place, &line))
                    .await
                    .unwrap_or_default()
            }
            _ => Workdir::default(),
        };
        let verdict = self.check_behind(&line, mode, &workdir, barrier);
        if verdict.opaque && verdict.decision == Decision::Allow {
            tracing::info!(session = %session_id, "an opaque command line runs: {}", verdict.rule);
        }
        match verdict.decision {
            Decision::Allow => Ok(Some(verdict)),
            Decision::Deny => Err(Refusal {
                verdict,
                answer: None,
            }),
            Decision::Prompt if owner_asked => {
                tracing::info!(session = %session_id, "the owner started `{line}` themselves: their request answers the prompt");
                Ok(Some(verdict))
            }
            Decision::Prompt => {
                let question = Question {
                    session_id: session_id.to_owned(),
                    command: line,
                    mode: mode.as_str().to_owned(),
                    rule: verdict.rule.clone(),
                    reasons: verdict.reasons.clone(),
                    asking: verdict.asking.clone(),
                };
                match self.approver.ask(&question).await {
                    Ok(()) => Ok(Some(verdict)),
                    Err(why) => Err(Refusal {
                        verdict,
                        answer: Some(why),
                    }),
                }
            }
        }
    }
}

/// A verdict as every front-end shows it: the decision, the rule, every
/// command with its class.
pub fn verdict_json(verdict: &Verdict) -> serde_json::Value {
    let commands: Vec<serde_json::Value> = verdict
        .classes
        .iter()
        .map(|(class, command)| serde_json::json!({"class": class.as_str(), "command": command}))
        .collect();
    serde_json::json!({
        "decision": verdict.decision.as_str(),
        "rule": verdict.rule,
        "commands": commands,
        "reasons": verdict.reasons,
        "opaque": verdict.opaque,
    })
}

/// An argv as the shell line that runs exactly it: words that need quoting
/// are single-quoted, so `["sh", "-c", "a; b"]` becomes `sh -c 'a; b'` and
/// the classifier unwraps the inner line as it would from a user.
pub fn command_line(argv: &[String]) -> String {
    let mut line = String::new();
    for (i, word) in argv.iter().enumerate() {
        if i > 0 {
            line.push(' ');
        }
        let plain = !word.is_empty()
            && word
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-+=:,./@".contains(&b));
        if plain && !(i == 0 && word.contains('=')) {
            line.push_str(word);
        } else {
            line.push('\'');
            line.push_str(&word.replace('\'', "'\\''"));
            line.push('\'');
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn argv_becomes_the_line_that_runs_it() {
        assert_eq!(command_line(&argv(&["git", "status"])), "git status");
        assert_eq!(
            command_line(&argv(&["sh", "-c", "echo 'a' && git push"])),
            r#"sh -c 'echo '\''a'\'' && git push'"#
        );
        assert_eq!(command_line(&argv(&["echo", ""])), "echo ''");
        // A first word with `=` is a command name, not an assignment.
        assert_eq!(command_line(&argv(&["A=1", "x"])), "'A=1' x");
        assert_eq!(command_line(&argv(&["echo", "$(id)"])), "echo '$(id)'");
    }

    #[test]
    fn quoting_round_trips_through_the_classifier() {
        let policy = CommandPolicy::default();
        // The inner line of `sh -c` is classified, quoted or not.
        let line = command_line(&argv(&["sh", "-c", "cargo build && sudo 'rm' -rf /"]));
        assert_eq!(
            policy.check(&line, SandboxMode::Chat).decision,
            Decision::Deny
        );
        // A literal `$(…)` argument is data, not a command.
        let line = command_line(&argv(&["echo", "$(sudo reboot)"]));
        assert_eq!(
            policy.check(&line, SandboxMode::Chat).decision,
            Decision::Allow
        );
    }

    #[tokio::test]
    async fn a_prompt_with_no_owner_is_refused_with_the_rule_named() {
        let policy = CommandPolicy::default();
        let refusal = policy
            .admit(
                "s",
                SandboxMode::Chat,
                &argv(&["git", "push", "origin", "main"]),
                None,
                Barrier::Sandbox,
            )
            .await
            .unwrap_err();
        assert_eq!(refusal.verdict.decision, Decision::Prompt);
        let text = refusal.to_string();
        assert!(
            text.contains("push to a remote") && text.contains("no owner"),
            "{text}"
        );
    }

    /// T12: a command whose name is computed runs in chat behind a sandbox
    /// (its verdict says opaque); on `none` it asks, so with no owner it is
    /// refused naming the reason; in plan it is denied either way.
    #[tokio::test]
    async fn a_computed_command_name_runs_only_behind_a_sandbox() {
        let policy = CommandPolicy::default();
        let probe = argv(&["sh", "-c", "cc -o \"$d/t\" t.c && \"$d/t\""]);
        let ran = policy
            .admit("s", SandboxMode::Chat, &probe, None, Barrier::Sandbox)
            .await
            .unwrap()
            .unwrap();
        assert!(ran.opaque && ran.decision == Decision::Allow, "{ran:?}");
        for (mode, barrier, decision) in [
            (SandboxMode::Chat, Barrier::PolicyOnly, Decision::Prompt),
            (SandboxMode::Plan, Barrier::Sandbox, Decision::Deny),
            (SandboxMode::Plan, Barrier::PolicyOnly, Decision::Deny),
        ] {
            let refusal = policy
                .admit("s", mode, &probe, None, barrier)
                .await
                .unwrap_err();
            assert_eq!(refusal.verdict.decision, decision);
            assert!(
                refusal
                    .verdict
                    .reasons
                    .iter()
                    .any(|r| r.contains("the command name is computed at run time")),
                "{refusal}"
            );
        }
    }

    #[tokio::test]
    async fn enforce_off_lets_everything_reach_the_sandbox() {
        let policy = CommandPolicy {
            enforce: false,
            ..CommandPolicy::default()
        };
        assert!(
            policy
                .admit(
                    "s",
                    SandboxMode::Plan,
                    &argv(&["sudo", "x"]),
                    None,
                    Barrier::PolicyOnly
                )
                .await
                .is_ok()
        );
        assert_eq!(policy.network_denied(SandboxMode::Plan), None);
    }
}
