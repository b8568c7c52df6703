//! The backend's handle on the host's event stream.

use std::sync::{Arc, RwLock};

use crate::abi::{RawEvent, SinkBox, SinkStatus};
use crate::types::{Event, EventBody, KillReason, SandboxState, SandboxViolation};

/// Sends a sandbox's events to the host. Cheap to clone; usable from any thread.
///
/// Sending may block while the host catches up (backpressure). Once the
/// sandbox is destroyed every send is dropped and returns `false`, so a
/// backend thread that outlives `destroy` cannot reach the host.
#[derive(Clone)]
pub struct EventSender {
    sink: Arc<RwLock<Option<SinkBox>>>,
}

impl EventSender {
    pub(crate) fn new(sink: SinkBox) -> Self {
        Self {
            sink: Arc::new(RwLock::new(Some(sink))),
        }
    }

    /// Sends one event; `false` when the host no longer listens.
    pub fn send(&self, event: Event) -> bool {
        // A reader holds the lock while emitting, so `close` waits for
        // in-flight events and nothing is emitted after it returns.
        let Ok(guard) = self.sink.read() else {
            return false;
        };
        match guard.as_ref() {
            Some(sink) => sink.emit(RawEvent::from_event(event)) == SinkStatus::ACCEPTED,
            None => false,
        }
    }

    /// Stops all further sends; waits for sends already under way.
    pub(crate) fn close(&self) {
        if let Ok(mut guard) = self.sink.write() {
            guard.take();
        }
    }

    /// Whether the host still listens.
    pub fn is_open(&self) -> bool {
        self.sink.read().map(|g| g.is_some()).unwrap_or(false)
    }

    fn body(&self, exec_id: u64, body: EventBody) -> bool {
        self.send(Event { exec_id, body })
    }

    /// The sandbox is starting.
    pub fn starting(&self) -> bool {
        self.body(0, EventBody::Starting)
    }

    /// The sandbox is ready to exec.
    pub fn ready(&self) -> bool {
        self.body(0, EventBody::Ready)
    }

    /// The sandbox changed state.
    pub fn state(&self, state: SandboxState) -> bool {
        self.body(0, EventBody::State(state))
    }

    /// Output on an exec's stdout.
    pub fn stdout(&self, exec_id: u64, data: Vec<u8>) -> bool {
        self.body(exec_id, EventBody::Stdout(data))
    }

    /// Output on an exec's stderr.
    pub fn stderr(&self, exec_id: u64, data: Vec<u8>) -> bool {
        self.body(exec_id, EventBody::Stderr(data))
    }

    /// The exec ended on its own; its last event.
    pub fn exit(&self, exec_id: u64, code: i32, signal: Option<i32>) -> bool {
        self.body(exec_id, EventBody::Exit { code, signal })
    }

    /// The sandbox killed the exec; its last event.
    pub fn killed(&self, exec_id: u64, reason: KillReason, signal: Option<i32>) -> bool {
        self.body(exec_id, EventBody::Killed { reason, signal })
    }

    /// Something was refused (exec id 0 when it belongs to no exec).
    pub fn violation(&self, exec_id: u64, violation: SandboxViolation) -> bool {
        self.body(exec_id, EventBody::Violation(violation))
    }
}
