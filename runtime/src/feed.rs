//! The runtime-wide event feed: every sandbox's events in one stream, for a
//! watcher of the whole server (the web console; `GET /v1/events`). Each
//! sandbox's router publishes what it sees — the sandbox's own `starting`,
//! `ready` and state changes, its violations, its execs' events — and
//! destroy ends a sandbox's part with a `destroyed` state.
//!
//! Watching never slows a sandbox: publishing does not wait (a broadcast
//! channel of [`CAPACITY`]; a watcher that falls behind is told how many
//! events it missed), costs nothing while nobody watches, and output is cut
//! to [`OUTPUT_LIMIT`] bytes per event — the exec's own stream has it all.

use std::sync::Arc;

use sandbox_plugin_api::{Event, EventBody};
use tokio::sync::broadcast;

/// Events held for the slowest watcher.
pub const CAPACITY: usize = 1024;

/// The bytes of one output event the feed carries.
pub const OUTPUT_LIMIT: usize = 1024;

/// One event of one sandbox.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    pub sandbox_id: Arc<str>,
    pub event: Event,
}

/// The feed every router of a server publishes to.
#[derive(Debug)]
pub struct Feed {
    tx: broadcast::Sender<FeedEvent>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Feed {
    /// Starts watching: every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<FeedEvent> {
        self.tx.subscribe()
    }

    /// Publishes `event` of `sandbox_id` to whoever watches now.
    pub fn publish(&self, sandbox_id: &Arc<str>, event: &Event) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let body = match &event.body {
            EventBody::Stdout(data) if data.len() > OUTPUT_LIMIT => {
                EventBody::Stdout(data[..OUTPUT_LIMIT].to_vec())
            }
            EventBody::Stderr(data) if data.len() > OUTPUT_LIMIT => {
                EventBody::Stderr(data[..OUTPUT_LIMIT].to_vec())
            }
            other => other.clone(),
        };
        let _ = self.tx.send(FeedEvent {
            sandbox_id: Arc::clone(sandbox_id),
            event: Event {
                exec_id: event.exec_id,
                body,
            },
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watchers_get_events_with_output_cut_and_nobody_watching_costs_nothing() {
        let feed = Feed::default();
        let id: Arc<str> = "s1".into();
        feed.publish(
            &id,
            &Event {
                exec_id: 0,
                body: EventBody::Ready,
            },
        );
        let mut rx = feed.subscribe();
        assert!(rx.try_recv().is_err(), "nothing from before subscribing");
        let long = vec![b'x'; OUTPUT_LIMIT * 3];
        feed.publish(
            &id,
            &Event {
                exec_id: 4,
                body: EventBody::Stdout(long),
            },
        );
        let got = rx.try_recv().unwrap();
        assert_eq!(&*got.sandbox_id, "s1");
        assert_eq!(got.event.exec_id, 4);
        assert_eq!(got.event.body, EventBody::Stdout(vec![b'x'; OUTPUT_LIMIT]));
    }
}
