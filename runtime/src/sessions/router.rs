//! Routes a sandbox's events to the exec streams that wait for them.
//!
//! A plugin may emit an exec's first events before the host learns the exec
//! id (the id is `exec`'s return value), so events for an id nobody has
//! subscribed to yet are held until the subscription arrives. Delivery
//! blocks when a subscriber is slow — that backpressure reaches the plugin's
//! reader and, through the pipe, the command itself, so memory stays bounded
//! however much a command prints. Output also waits for the server-wide
//! [`OutputBudget`] (threat model T33): each stream's cap bounds one client
//! that does not read, the budget bounds all of them together.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sandbox_plugin_api::host::EventHandler;
use sandbox_plugin_api::{Event, EventBody, SandboxViolation};
use tokio::sync::mpsc;

use super::budget::{Charge, OutputBudget, Reserved, StreamShare};
use crate::feed::Feed;

/// Events buffered per exec stream.
const STREAM_CAPACITY: usize = 64;

/// Events held for an exec id before anyone subscribed. Subscribing follows
/// `exec` at once, but on a loaded host a chatty command can get this far
/// first: then delivery waits for the subscriber (backpressure, as for a
/// slow one) instead of losing output.
const PENDING_LIMIT: usize = 256;

/// How long a sandbox-wide violation is kept for execs still subscribing.
const RECENT_PATIENCE: Duration = Duration::from_secs(30);

/// How many such violations are kept at most (the oldest go first).
const RECENT_LIMIT: usize = 64;

/// How long a full pending queue waits for its subscriber; past it the
/// plugin is misbehaving (an id nobody will ask for) and events are
/// dropped, with a warning.
const PENDING_PATIENCE: Duration = Duration::from_secs(60);

/// One event on its way to a client, with the share of the output budget
/// its bytes hold until the client has them.
#[derive(Debug)]
pub struct Delivery {
    pub event: Event,
    pub charge: Option<Charge>,
}

impl Delivery {
    fn uncharged(event: Event) -> Self {
        Self {
            event,
            charge: None,
        }
    }
}

enum Route {
    /// Events that arrived before the subscription.
    Pending(Vec<Delivery>),
    /// Someone is listening.
    Live(mpsc::Sender<Delivery>),
    /// The listener went away: drop the rest until the exec ends.
    Dropped,
}

/// One exec's route and its share of the output budget.
struct Entry {
    route: Route,
    share: Arc<StreamShare>,
}

/// The host's event handler for one sandbox.
pub struct Router {
    routes: Mutex<HashMap<u64, Entry>>,
    /// Sandbox-wide violations of the last [`RECENT_PATIENCE`], for execs
    /// that subscribe after one happened: a command can dial and be refused
    /// before the host has its exec id. Locked after `routes`.
    recent: Mutex<Vec<(Instant, SandboxViolation)>>,
    /// Signalled when a route changes from pending (or the router closes).
    changed: Condvar,
    closed: AtomicBool,
    /// Set when the sandbox is being destroyed: output no longer waits for
    /// the budget (see [`Router::ending`]).
    ending: AtomicBool,
    /// Shared by every router of the server.
    budget: Arc<OutputBudget>,
    /// The server's feed and this sandbox's id in it (see [`crate::feed`]).
    feed: Option<(Arc<Feed>, Arc<str>)>,
}

impl Default for Router {
    fn default() -> Self {
        Self::new(Arc::new(OutputBudget::default()))
    }
}

impl super::Sessions {
    /// A new sandbox's router: the server's output budget and feed.
    pub(super) fn router_for(&self, id: &str) -> Router {
        Router::new(Arc::clone(&self.settings.output_budget)).with_feed(&self.settings.feed, id)
    }

    /// Every sandbox's events in one stream (see [`crate::feed`]).
    pub fn feed(&self) -> &Arc<Feed> {
        &self.settings.feed
    }
}

/// A subscription to one exec: what arrived early, then the live stream.
pub struct Subscription {
    pub early: Vec<Delivery>,
    pub live: mpsc::Receiver<Delivery>,
}

impl Router {
    /// A router whose output counts against `budget`.
    pub fn new(budget: Arc<OutputBudget>) -> Self {
        Self {
            routes: Mutex::new(HashMap::new()),
            recent: Mutex::new(Vec::new()),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
            ending: AtomicBool::new(false),
            budget,
            feed: None,
        }
    }

    /// The same, publishing what it sees to `feed` as sandbox `id`'s.
    pub fn with_feed(mut self, feed: &Arc<Feed>, id: &str) -> Self {
        self.feed = Some((Arc::clone(feed), id.into()));
        self
    }

    fn publish(&self, event: &Event) {
        if let Some((feed, id)) = &self.feed {
            feed.publish(id, event);
        }
    }

    fn entry(&self, route: Route) -> Entry {
        let share = StreamShare::default();
        if self.ending.load(Ordering::SeqCst) {
            share.end();
        }
        Entry {
            route,
            share: Arc::new(share),
        }
    }

    /// Starts listening to an exec. Call once per exec id, right after `exec`;
    /// `since` is when the exec was asked for: the sandbox-wide violations
    /// from then on come first (before the exec's own end, if it is early).
    pub fn subscribe(&self, exec_id: u64, since: Instant) -> Subscription {
        let (tx, rx) = mpsc::channel(STREAM_CAPACITY);
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        let mut early: Vec<Delivery> = self
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(at, _)| *at >= since)
            .map(|(_, v)| {
                Delivery::uncharged(Event {
                    exec_id,
                    body: EventBody::Violation(v.clone()),
                })
            })
            .collect();
        let entry = routes
            .entry(exec_id)
            .or_insert_with(|| self.entry(Route::Dropped));
        if let Route::Pending(events) = std::mem::replace(&mut entry.route, Route::Live(tx)) {
            early.extend(events);
        }
        // An exec that already ended needs no live route.
        if early.iter().any(|d| d.event.body.is_terminal()) {
            routes.remove(&exec_id);
        }
        self.changed.notify_all();
        Subscription { early, live: rx }
    }

    /// Stops listening to an exec (its stream was dropped). Its remaining
    /// events are discarded, and their share of the budget given back.
    pub fn unsubscribe(&self, exec_id: u64) {
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = routes.get_mut(&exec_id) {
            entry.route = Route::Dropped;
            entry.share.abandon();
        }
        self.changed.notify_all();
        drop(routes);
        self.budget.wake();
    }

    /// The sandbox is being destroyed: from now on its output goes through
    /// without waiting for the budget (each stream's own cap still holds),
    /// so its destroy — which waits for deliveries under way — never waits
    /// for other sandboxes' clients to read.
    pub fn ending(&self) {
        self.ending.store(true, Ordering::SeqCst);
        for entry in self
            .routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            entry.share.end();
        }
        self.budget.wake();
    }

    /// After this, every event is refused and the plugin is told to stop.
    pub fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            self.publish(&Event {
                exec_id: 0,
                body: EventBody::State(sandbox_plugin_api::SandboxState::Destroyed),
            });
        }
        let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        for entry in routes.values() {
            entry.share.abandon();
        }
        routes.clear();
        self.changed.notify_all();
        drop(routes);
        self.budget.wake();
    }

    /// A violation the host saw for the sandbox as a whole (a refused
    /// egress connection): it goes to every exec listening now — the proxy
    /// cannot tell which command dialled — and is logged when none is.
    /// Never blocks: a full stream misses it (and the log has it).
    pub fn broadcast(&self, violation: SandboxViolation) {
        tracing::info!(action = %violation.action, target = %violation.target, "violation");
        self.publish(&Event {
            exec_id: 0,
            body: EventBody::Violation(violation.clone()),
        });
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            recent.retain(|(at, _)| now.duration_since(*at) < RECENT_PATIENCE);
            if recent.len() >= RECENT_LIMIT {
                recent.remove(0);
            }
            recent.push((now, violation.clone()));
        }
        for (&exec_id, entry) in routes.iter() {
            if let Route::Live(tx) = &entry.route {
                let event = Event {
                    exec_id,
                    body: EventBody::Violation(violation.clone()),
                };
                if tx.try_send(Delivery::uncharged(event)).is_err() {
                    tracing::warn!(exec = exec_id, "a violation did not fit the exec's stream");
                }
            }
        }
    }

    /// Events of the sandbox as a whole are logged; its state is read from
    /// the backend when asked.
    fn sandbox_event(&self, event: Event) {
        match &event.body {
            EventBody::Violation(v) => {
                tracing::warn!(action = %v.action, target = %v.target, "sandbox-wide violation");
            }
            other => tracing::debug!(event = other.type_name(), "sandbox event"),
        }
    }

    /// Takes the budget for an output event's bytes, waiting while the
    /// server holds too much (backpressure). `Err(accepted)` when there is
    /// nothing to deliver: the stream was dropped (`true`: discard the
    /// event) or the router closed (`false`).
    fn charge(&self, id: u64, bytes: usize) -> Result<Option<Charge>, bool> {
        let share = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            if self.closed.load(Ordering::SeqCst) {
                return Err(false);
            }
            let entry = routes
                .entry(id)
                .or_insert_with(|| self.entry(Route::Pending(Vec::new())));
            if matches!(entry.route, Route::Dropped) {
                return Err(true);
            }
            Arc::clone(&entry.share)
        };
        match self.budget.reserve(&share, bytes) {
            Reserved::Granted(charge) => Ok(Some(charge)),
            Reserved::Abandoned => Err(!self.closed.load(Ordering::SeqCst)),
        }
    }
}

impl EventHandler for Router {
    fn handle(&self, event: Event) -> bool {
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        self.publish(&event);
        if event.exec_id == 0 {
            self.sandbox_event(event);
            return true;
        }
        let id = event.exec_id;
        let terminal = event.body.is_terminal();
        let charge = match &event.body {
            EventBody::Stdout(data) | EventBody::Stderr(data) => {
                match self.charge(id, data.len()) {
                    Ok(charge) => charge,
                    Err(accepted) => return accepted,
                }
            }
            _ => None,
        };
        let delivery = Delivery { event, charge };
        let sender = {
            let mut routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
            let deadline = Instant::now() + PENDING_PATIENCE;
            loop {
                let full = matches!(routes.get(&id),
                    Some(Entry { route: Route::Pending(e), .. }) if e.len() >= PENDING_LIMIT);
                if !full {
                    break;
                }
                if self.closed.load(Ordering::SeqCst) {
                    return false;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::warn!(exec = id, "dropping an event for an exec nobody listens to");
                    return true;
                }
                routes = self
                    .changed
                    .wait_timeout(routes, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if self.closed.load(Ordering::SeqCst) {
                return false;
            }
            let entry = routes
                .entry(id)
                .or_insert_with(|| self.entry(Route::Pending(Vec::new())));
            match &mut entry.route {
                Route::Pending(events) => {
                    events.push(delivery);
                    return true;
                }
                Route::Live(tx) => {
                    let tx = tx.clone();
                    if terminal {
                        routes.remove(&id);
                    }
                    tx
                }
                Route::Dropped => {
                    if terminal {
                        routes.remove(&id);
                    }
                    return true;
                }
            }
        };
        // Called from plugin threads, never from an async task.
        if sender.blocking_send(delivery).is_err() {
            // The stream went away; its drop guard kills the exec.
            self.unsubscribe(id);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(exec_id: u64, body: EventBody) -> Event {
        Event { exec_id, body }
    }

    /// The feed sees the sandbox's own events, its violations and its
    /// execs' events, and a `destroyed` state when the router closes.
    #[test]
    fn the_feed_sees_the_sandbox_and_its_end() {
        let feed = Arc::new(Feed::default());
        let router = Router::default().with_feed(&feed, "s9");
        let mut watcher = feed.subscribe();
        router.handle(ev(0, EventBody::Starting));
        router.handle(ev(0, EventBody::Ready));
        router.broadcast(SandboxViolation {
            action: "network-outbound".into(),
            target: "x.test:80".into(),
            raw: None,
        });
        router.handle(ev(2, EventBody::Stdout(b"hi".to_vec())));
        router.close();
        router.close();
        let mut seen = Vec::new();
        while let Ok(got) = watcher.try_recv() {
            assert_eq!(&*got.sandbox_id, "s9");
            seen.push(format!(
                "{}:{}",
                got.event.exec_id,
                got.event.body.type_name()
            ));
        }
        assert_eq!(
            seen,
            [
                "0:starting",
                "0:ready",
                "0:violation",
                "2:stdout",
                "0:state"
            ],
            "one `destroyed` however often it closes"
        );
    }

    /// A command refused by the proxy before the host subscribed (a loaded
    /// host) still sees its violation, ahead of its own early exit; one from
    /// before the exec was asked for is not its.
    #[test]
    fn a_violation_before_the_subscription_is_not_lost() {
        let router = Router::default();
        let violation = |target: &str| SandboxViolation {
            action: "network-outbound".into(),
            target: target.into(),
            raw: None,
        };
        router.broadcast(violation("old.test:80"));
        std::thread::sleep(Duration::from_millis(2));
        let asked = Instant::now();
        router.broadcast(violation("b.test:80"));
        router.handle(ev(
            3,
            EventBody::Exit {
                code: 0,
                signal: None,
            },
        ));
        let sub = router.subscribe(3, asked);
        let kinds: Vec<String> = sub
            .early
            .iter()
            .map(|d| match &d.event.body {
                EventBody::Violation(v) => v.target.clone(),
                other => other.type_name().to_owned(),
            })
            .collect();
        assert_eq!(kinds, ["b.test:80", "exit"]);
    }

    #[test]
    fn early_events_are_kept_in_order() {
        let router = Router::default();
        router.handle(ev(1, EventBody::Stdout(b"a".to_vec())));
        router.handle(ev(1, EventBody::Stdout(b"b".to_vec())));
        let mut sub = router.subscribe(1, Instant::now());
        assert_eq!(sub.early.len(), 2);
        std::thread::scope(|s| {
            s.spawn(|| {
                router.handle(ev(
                    1,
                    EventBody::Exit {
                        code: 0,
                        signal: None,
                    },
                ))
            });
        });
        let last = sub.live.blocking_recv().unwrap();
        assert!(last.event.body.is_terminal());
        assert!(
            router.routes.lock().unwrap().is_empty(),
            "a finished exec leaves no route"
        );
    }

    #[test]
    fn an_exec_that_ended_before_subscribing_needs_no_route() {
        let router = Router::default();
        router.handle(ev(
            4,
            EventBody::Exit {
                code: 1,
                signal: None,
            },
        ));
        let sub = router.subscribe(4, Instant::now());
        assert_eq!(sub.early.len(), 1);
        assert!(router.routes.lock().unwrap().is_empty());
    }

    #[test]
    fn closing_refuses_everything() {
        let router = Router::default();
        router.close();
        assert!(!router.handle(ev(1, EventBody::Stdout(vec![1]))));
        assert!(!router.handle(ev(0, EventBody::Ready)));
    }

    #[test]
    fn a_dropped_stream_discards_the_rest() {
        let router = Router::default();
        let sub = router.subscribe(9, Instant::now());
        drop(sub);
        for _ in 0..1000 {
            assert!(router.handle(ev(9, EventBody::Stdout(vec![1]))));
        }
        assert!(matches!(
            router.routes.lock().unwrap().get(&9),
            Some(Entry {
                route: Route::Dropped,
                ..
            })
        ));
        router.handle(ev(
            9,
            EventBody::Exit {
                code: 0,
                signal: None,
            },
        ));
        assert!(router.routes.lock().unwrap().is_empty());
    }

    /// A late subscriber loses nothing: past the pending limit, delivery
    /// waits for it, then goes on into its live stream.
    #[test]
    fn pending_events_are_bounded_and_none_is_lost() {
        let router = Router::default();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..PENDING_LIMIT + 10 {
                    router.handle(ev(5, EventBody::Stdout(vec![i as u8])));
                }
            });
            let full = || {
                matches!(router.routes.lock().unwrap().get(&5),
                    Some(Entry { route: Route::Pending(e), .. }) if e.len() == PENDING_LIMIT)
            };
            while !full() {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Held at the limit, not dropped.
            std::thread::sleep(Duration::from_millis(20));
            assert!(full());
            let mut sub = router.subscribe(5, Instant::now());
            assert_eq!(sub.early.len(), PENDING_LIMIT);
            for i in PENDING_LIMIT..PENDING_LIMIT + 10 {
                let event = sub.live.blocking_recv().unwrap().event;
                assert!(matches!(event.body, EventBody::Stdout(ref d) if d == &[i as u8]));
            }
        });
    }

    /// T33: routers share one budget. An unread stream past it
    /// waits (its bytes kept) while another sandbox's stream still moves,
    /// and taking the held event lets the waiting one through.
    #[test]
    fn routers_share_one_output_budget() {
        let budget = Arc::new(OutputBudget::new(128));
        let (unread, other) = (
            Router::new(Arc::clone(&budget)),
            Router::new(Arc::clone(&budget)),
        );
        let mut slow = unread.subscribe(1, Instant::now());
        let mut fast = other.subscribe(2, Instant::now());
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                unread.handle(ev(1, EventBody::Stdout(vec![b'a'; 100])));
                unread.handle(ev(1, EventBody::Stdout(vec![b'b'; 100])));
            });
            while budget.used() != 100 {
                std::thread::yield_now();
            }
            // The other sandbox's stream holds nothing: it gets its chunk.
            assert!(other.handle(ev(2, EventBody::Stdout(vec![b'c'; 100]))));
            assert_eq!(budget.used(), 200);
            drop(fast.live.blocking_recv().unwrap());
            std::thread::sleep(Duration::from_millis(20));
            assert!(!writer.is_finished(), "past the budget, delivery waits");
            let first = slow.live.blocking_recv().unwrap();
            assert!(matches!(first.event.body, EventBody::Stdout(ref d) if d[0] == b'a'));
            drop(first);
            writer.join().unwrap();
            let second = slow.live.blocking_recv().unwrap();
            assert!(matches!(second.event.body, EventBody::Stdout(ref d) if d[0] == b'b'));
        });
    }
}
