//! Owner approvals (SPEC H4, H12): a command the guardrails say to ask about
//! waits for a connected owner. An owner is an approver connection on the
//! server API; with none connected the answer is deny, at once. The sandbox
//! has no path here: only API clients holding the bearer token connect.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::{mpsc, oneshot};

/// How long a prompt waits for an answer before it is denied.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The owner's answer, or why there was none (every `None…` is a deny).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Allowed,
    Denied,
    NoOwner,
    TimedOut,
    OwnerLeft,
}

impl Answer {
    /// Why the command did not run, for the error the client sees.
    pub fn refusal(self) -> Option<&'static str> {
        match self {
            Self::Allowed => None,
            Self::Denied => Some("the owner denied it"),
            Self::NoOwner => Some("no owner is connected to answer, so the answer is deny"),
            Self::TimedOut => Some("the owner did not answer in time, so the answer is deny"),
            Self::OwnerLeft => {
                Some("the owner disconnected before answering, so the answer is deny")
            }
        }
    }
}

/// What an owner is asked.
#[derive(Debug, Clone)]
pub struct Question {
    pub session_id: String,
    pub command: String,
    pub mode: String,
    pub rule: String,
    pub reasons: Vec<String>,
    /// What asks, one entry per class (`install a package: npm install`).
    pub asking: Vec<String>,
}

/// The approver connections and the prompts waiting on them.
pub struct Approvals {
    timeout: Duration,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    approvers: HashMap<u64, mpsc::UnboundedSender<serde_json::Value>>,
    pending: HashMap<String, (oneshot::Sender<Answer>, serde_json::Value)>,
}

impl Approvals {
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            timeout,
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many owners are connected.
    pub fn connected(&self) -> usize {
        self.lock().approvers.len()
    }

    /// Connects an owner: prompts arrive on the receiver (one JSON object
    /// each) until the returned [`OwnerConnection`] is dropped.
    pub fn connect(
        self: &Arc<Self>,
    ) -> (OwnerConnection, mpsc::UnboundedReceiver<serde_json::Value>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        // Prompts already waiting reach a newly connected owner too.
        for (_, prompt) in inner.pending.values() {
            let _ = tx.send(prompt.clone());
        }
        inner.approvers.insert(id, tx);
        tracing::info!(
            approvers = inner.approvers.len(),
            "an owner connected for approvals"
        );
        (
            OwnerConnection {
                approvals: Arc::clone(self),
                id,
            },
            rx,
        )
    }

    /// Asks every connected owner; the first answer wins. Never waits when
    /// no owner is connected.
    pub async fn ask(&self, question: &Question) -> Answer {
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut inner = self.lock();
            if inner.approvers.is_empty() {
                return Answer::NoOwner;
            }
            inner.next_id += 1;
            let id = format!("p-{}", inner.next_id);
            let prompt = json!({
                "type": "prompt",
                "id": id,
                "sessionId": question.session_id,
                "command": question.command,
                "mode": question.mode,
                "rule": question.rule,
                "reasons": question.reasons,
                "asking": question.asking,
                "timeoutSecs": self.timeout.as_secs(),
            });
            inner
                .approvers
                .retain(|_, approver| approver.send(prompt.clone()).is_ok());
            if inner.approvers.is_empty() {
                return Answer::NoOwner;
            }
            inner.pending.insert(id.clone(), (tx, prompt));
            id
        };
        let answer = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::OwnerLeft,
            Err(_) => Answer::TimedOut,
        };
        let mut inner = self.lock();
        inner.pending.remove(&id);
        let resolved = json!({"type": "resolved", "id": id, "answer": answer_name(answer)});
        inner
            .approvers
            .retain(|_, approver| approver.send(resolved.clone()).is_ok());
        answer
    }

    /// An owner's answer to prompt `id`; `false` when no such prompt waits.
    pub fn answer(&self, id: &str, allow: bool) -> bool {
        match self.lock().pending.remove(id) {
            Some((waiting, _)) => {
                let answer = if allow {
                    Answer::Allowed
                } else {
                    Answer::Denied
                };
                let _ = waiting.send(answer);
                true
            }
            None => false,
        }
    }

    fn disconnect(&self, id: u64) {
        let mut inner = self.lock();
        inner.approvers.remove(&id);
        tracing::info!(
            approvers = inner.approvers.len(),
            "an owner disconnected from approvals"
        );
        if inner.approvers.is_empty() {
            // Nobody is left to answer: every waiting prompt is a deny now.
            for (_, (waiting, _)) in inner.pending.drain() {
                let _ = waiting.send(Answer::OwnerLeft);
            }
        }
    }
}

fn answer_name(answer: Answer) -> &'static str {
    match answer {
        Answer::Allowed => "allow",
        Answer::Denied => "deny",
        Answer::NoOwner => "no-owner",
        Answer::TimedOut => "timed-out",
        Answer::OwnerLeft => "owner-left",
    }
}

/// One owner's connection; dropping it disconnects the owner.
pub struct OwnerConnection {
    approvals: Arc<Approvals>,
    id: u64,
}

impl Drop for OwnerConnection {
    fn drop(&mut self) {
        self.approvals.disconnect(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> Question {
        Question {
            session_id: "s".into(),
            command: "git push".into(),
            mode: "chat".into(),
            rule: "chat: push to a remote asks first (git push)".into(),
            reasons: vec![],
            asking: vec!["push to a remote: git push".into()],
        }
    }

    #[tokio::test]
    async fn with_no_owner_the_answer_is_deny_at_once() {
        let approvals = Approvals::new(Duration::from_secs(3600));
        assert_eq!(approvals.ask(&question()).await, Answer::NoOwner);
    }

    #[tokio::test]
    async fn a_connected_owner_answers() {
        let approvals = Approvals::new(Duration::from_secs(3600));
        let (_owner, mut prompts) = approvals.connect();
        let asking = {
            let approvals = Arc::clone(&approvals);
            tokio::spawn(async move { approvals.ask(&question()).await })
        };
        let prompt = prompts.recv().await.unwrap();
        assert_eq!(prompt["type"], "prompt");
        assert_eq!(prompt["command"], "git push");
        assert!(approvals.answer(prompt["id"].as_str().unwrap(), true));
        assert_eq!(asking.await.unwrap(), Answer::Allowed);
        assert!(
            !approvals.answer(prompt["id"].as_str().unwrap(), true),
            "answered twice"
        );
    }

    #[tokio::test]
    async fn an_owner_leaving_denies_what_waits() {
        let approvals = Approvals::new(Duration::from_secs(3600));
        let (owner, mut prompts) = approvals.connect();
        let asking = {
            let approvals = Arc::clone(&approvals);
            tokio::spawn(async move { approvals.ask(&question()).await })
        };
        prompts.recv().await.unwrap();
        drop(owner);
        assert_eq!(asking.await.unwrap(), Answer::OwnerLeft);
        assert_eq!(approvals.connected(), 0);
    }

    #[tokio::test]
    async fn an_unanswered_prompt_times_out_as_deny() {
        let approvals = Approvals::new(Duration::from_millis(50));
        let (_owner, _prompts) = approvals.connect();
        assert_eq!(approvals.ask(&question()).await, Answer::TimedOut);
    }
}
