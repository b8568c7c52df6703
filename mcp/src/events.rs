//! The `sandbox://events` resource: what the tools' commands did in this
//! sandbox — each exec's start, its violations and its end, and each
//! command the policy refused — the last [`KEPT`], kept with the session.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sandbox_runtime::Session;
use serde_json::Value;

/// Events kept per sandbox; older ones are dropped.
pub const KEPT: usize = 256;

/// One sandbox's recent events.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<VecDeque<Value>>,
}

impl Recorder {
    /// The session's (made at first use, dropped with the session).
    pub fn of(session: &Session) -> Arc<Self> {
        match session.front_end_state(|| Ok::<_, std::convert::Infallible>(Self::default())) {
            Ok(recorder) => recorder,
            Err(never) => match never {},
        }
    }

    pub fn record(&self, event: Value) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() == KEPT {
            events.pop_front();
        }
        events.push_back(event);
    }

    /// Every kept event, oldest first.
    pub fn snapshot(&self) -> Vec<Value> {
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        events.iter().cloned().collect()
    }
}
