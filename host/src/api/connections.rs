//! What the API allows a connection (threat model T28): how long it may take
//! to send a request's headers, how long it may sit idle between requests,
//! and whether it may open at all.
//!
//! Every descriptor the server holds for a client is one it cannot use for
//! a sandbox, and a client needs no token to open a TCP connection. So:
//!
//! - **Timeouts** ([`plan_deadline`]): a request's headers must arrive
//!   within `[api] header_read_timeout_secs` (of the connection's opening,
//!   for its first request; of their first byte, after that), and a
//!   keep-alive connection with nothing in flight is closed after
//!   `[api] idle_timeout_secs`. A connection with a request in flight —
//!   an exec stream, the approvals stream, a launch that takes a while —
//!   has no deadline: a live stream is never cut. A dead peer there is
//!   noticed by TCP keep-alive probes (see `listener`), not by a timer.
//!   A deadline is judged only after hyper has read what the client sent
//!   (the listener polls it first), so a server too busy to read a request
//!   in time never closes its client for it; a client that began its first
//!   request and did not finish the head gets a 408 naming the key
//!   ([`plan_timeout_answer`]).
//! - **A cap** ([`plan_admission`]): at most `[api] max_connections` open,
//!   of which `[api] authenticated_reserve` only for connections that have
//!   sent the token. A connection counts as unauthenticated until one of
//!   its requests carries the right token. When a new connection does not
//!   fit, the oldest idle unauthenticated ones are closed first (idle:
//!   nothing in flight, which includes a half-sent header), then idle
//!   authenticated ones beyond the reserve; if none is idle, the new one
//!   is refused with a 503 naming the key. So thousands of bare connects
//!   cannot lock out `/healthz` or an exec on a live sandbox.
//!
//! The decisions are pure functions of a snapshot; [`Connections`] and
//! [`ConnState`] are the shared state the listener's tasks update.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use crate::config::ConnectionSettings;

/// One open connection as [`plan_admission`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnView {
    pub id: u64,
    pub authenticated: bool,
    /// Nothing in flight (a half-sent header included).
    pub idle: bool,
}

/// What to do with a new connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Take it, after closing these (idle) connections.
    Admit { evict: Vec<u64> },
    /// Refuse it: every connection that could make room is busy.
    Refuse(Refusal),
}

/// Why a new connection was refused; the text names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Every connection is busy.
    Full { max: usize },
    /// The unauthenticated share is full of connections with a request in
    /// flight.
    Unauthenticated { share: usize, max: usize },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Full { max } => write!(
                f,
                "the server has {max} open connections, every one busy, and takes no more: \
                 close some, or raise `[api] max_connections` in the config"
            ),
            Self::Unauthenticated { share, max } => write!(
                f,
                "the {share} of the server's {max} connections open to clients that have not \
                 sent the token are all busy: retry, or raise `[api] max_connections` (the rest \
                 is `[api] authenticated_reserve`) in the config"
            ),
        }
    }
}

/// Whether a new (unauthenticated) connection fits, given the open ones in
/// the order they opened (oldest first).
pub fn plan_admission(open: &[ConnView], limits: &ConnectionSettings) -> Admission {
    let max = limits.max_connections;
    let share = max.saturating_sub(limits.authenticated_reserve);
    let mut total = open.len();
    let mut unauthenticated = open.iter().filter(|c| !c.authenticated).count();
    let mut idle_unauthenticated = open.iter().filter(|c| !c.authenticated && c.idle);
    let mut idle_authenticated = open.iter().filter(|c| c.authenticated && c.idle);
    let mut evict = Vec::new();
    while total >= max || unauthenticated >= share {
        if let Some(c) = idle_unauthenticated.next() {
            evict.push(c.id);
            total -= 1;
            unauthenticated -= 1;
            continue;
        }
        if unauthenticated >= share {
            return Admission::Refuse(Refusal::Unauthenticated { share, max });
        }
        // Only authenticated connections are left to make room; there are
        // more of them than the reserve, or the total would fit.
        match idle_authenticated.next() {
            Some(c) => {
                evict.push(c.id);
                total -= 1;
            }
            None => return Admission::Refuse(Refusal::Full { max }),
        }
    }
    Admission::Admit { evict }
}

/// The moments [`plan_deadline`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// Requests in flight (a streaming response included).
    pub in_flight: usize,
    /// Requests answered so far.
    pub served: u64,
    pub opened: Instant,
    /// When the last request in flight ended (`opened` before the first).
    pub idle_since: Instant,
    /// When the first byte of the next request's head arrived, if one did.
    pub head_started: Option<Instant>,
    /// When a deadline found bytes in the socket the server had not read
    /// yet (it was too busy): the head's deadline counts from then.
    pub server_behind: Option<Instant>,
}

/// Which timeout a deadline is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    HeaderRead,
    Idle,
}

impl Expiry {
    pub fn describe(self) -> &'static str {
        match self {
            Self::HeaderRead => {
                "its request headers did not arrive within `[api] header_read_timeout_secs`"
            }
            Self::Idle => "it was idle for `[api] idle_timeout_secs`",
        }
    }
}

/// When the connection is to be closed unless something happens first;
/// `None` while a request is in flight. Time the server spent too busy to
/// read what had arrived ([`Phase::server_behind`]) is not the client's.
pub fn plan_deadline(phase: &Phase, limits: &ConnectionSettings) -> Option<(Instant, Expiry)> {
    if phase.in_flight > 0 {
        return None;
    }
    let head_from = |at: Instant| phase.server_behind.map_or(at, |behind| behind.max(at));
    let started = match (phase.served, phase.head_started, phase.server_behind) {
        (0, _, _) => Some(phase.opened),
        (_, Some(at), _) => Some(at),
        (_, None, behind) => behind,
    };
    Some(match started {
        Some(at) => (
            head_from(at) + limits.header_read_timeout,
            Expiry::HeaderRead,
        ),
        None => (phase.idle_since + limits.idle_timeout, Expiry::Idle),
    })
}

/// Whether a connection closed at `expiry` is first answered with a 408
/// (`wire_answers::header_timeout`): when the client began its first
/// request and did not finish the head in time. A connection that sent
/// nothing, or was idle after an answer, is closed without one — a client
/// that sends its request onto it just then retries on a new connection,
/// as HTTP clients do when an idle connection closes; a 408 would read as
/// the answer to that request. (After an answer, hyper may still hold part
/// of it unwritten, so nothing is written beside it.)
pub fn plan_timeout_answer(phase: &Phase, expiry: Expiry) -> bool {
    expiry == Expiry::HeaderRead && phase.served == 0 && phase.head_started.is_some()
}

/// The state of one connection, shared by its socket wrapper (bytes
/// arriving), the service (requests starting and ending), the registry
/// (authentication, eviction) and its own task (deadlines).
#[derive(Debug)]
pub struct ConnState {
    pub id: u64,
    in_flight: AtomicUsize,
    authenticated: AtomicBool,
    evicted: AtomicBool,
    /// `served`, `idle_since`, `head_started` and `opened`.
    times: Mutex<Phase>,
    /// Wakes the connection's task: a request started or ended, eviction.
    pub changed: Notify,
}

impl ConnState {
    fn new(id: u64, now: Instant) -> Self {
        Self {
            id,
            in_flight: AtomicUsize::new(0),
            authenticated: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            times: Mutex::new(Phase {
                in_flight: 0,
                served: 0,
                opened: now,
                idle_since: now,
                head_started: None,
                server_behind: None,
            }),
            changed: Notify::new(),
        }
    }

    pub fn phase(&self) -> Phase {
        let mut phase = *self.times.lock().unwrap_or_else(|p| p.into_inner());
        phase.in_flight = self.in_flight.load(Ordering::SeqCst);
        phase
    }

    /// Bytes arrived from the client: while idle, a request's head has begun.
    pub fn bytes_arrived(&self) {
        if self.in_flight.load(Ordering::SeqCst) > 0 {
            return;
        }
        let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        if times.head_started.is_none() {
            times.head_started = Some(Instant::now());
        }
    }

    /// A deadline came while bytes the client sent were still unread: the
    /// server was behind, and the head's deadline starts again from now.
    pub fn server_behind(&self) {
        self.times
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .server_behind = Some(Instant::now());
    }

    /// A request's head arrived and is being served; the returned guard
    /// ends it when dropped (with its response body, for a stream).
    pub fn request_started(self: &Arc<Self>) -> InFlight {
        if self.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
            times.head_started = None;
            times.server_behind = None;
            drop(times);
            self.changed.notify_one();
        }
        InFlight(Arc::clone(self))
    }

    /// A request carried the right token: this connection may use the
    /// reserve from now on.
    pub fn authenticated(&self) {
        self.authenticated.store(true, Ordering::SeqCst);
    }

    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Ordering::SeqCst)
    }

    fn view(&self) -> ConnView {
        ConnView {
            id: self.id,
            authenticated: self.authenticated.load(Ordering::SeqCst),
            idle: self.in_flight.load(Ordering::SeqCst) == 0,
        }
    }
}

/// A request in flight on its connection (see [`ConnState::request_started`]).
#[derive(Debug)]
pub struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let state = &self.0;
        let mut times = state.times.lock().unwrap_or_else(|p| p.into_inner());
        if state.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            times.served += 1;
            times.idle_since = Instant::now();
            times.head_started = None;
            times.server_behind = None;
            drop(times);
            state.changed.notify_one();
        }
    }
}

/// Every open connection of the API.
#[derive(Debug)]
pub struct Connections {
    limits: ConnectionSettings,
    open: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    next_id: u64,
    /// By id, which is the order they opened in.
    by_id: BTreeMap<u64, Arc<ConnState>>,
}

/// An admitted connection's place in [`Connections`], given up when dropped.
#[derive(Debug)]
pub struct Ticket {
    pub state: Arc<ConnState>,
    connections: Arc<Connections>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.connections
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .remove(&self.state.id);
    }
}

/// A connection a WebSocket took over (a terminal's), kept in the count
/// and busy — never evicted as idle, never past `[api] max_connections` —
/// until dropped with the socket.
#[derive(Debug)]
pub struct Held {
    _busy: InFlight,
    _slot: Arc<Ticket>,
}

impl Held {
    /// Holds `slot` for an upgraded connection; its request carried a
    /// credential the route checked (a terminal ticket), so it counts as
    /// authenticated from now on.
    pub fn new(slot: &Arc<Ticket>) -> Self {
        slot.state.authenticated();
        Self {
            _busy: slot.state.request_started(),
            _slot: Arc::clone(slot),
        }
    }
}

impl Connections {
    pub fn new(limits: ConnectionSettings) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(Registry::default()),
        })
    }

    pub fn limits(&self) -> &ConnectionSettings {
        &self.limits
    }

    /// Admits a new connection (closing idle ones to make room), or says
    /// why not.
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, Refusal> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let views: Vec<ConnView> = open.by_id.values().map(|c| c.view()).collect();
        match plan_admission(&views, &self.limits) {
            Admission::Refuse(refusal) => Err(refusal),
            Admission::Admit { evict } => {
                for id in evict {
                    // Its task closes it; until then it leaves the count,
                    // so a burst cannot evict the same one twice.
                    if let Some(victim) = open.by_id.remove(&id) {
                        victim.evicted.store(true, Ordering::SeqCst);
                        victim.changed.notify_one();
                    }
                }
                let id = open.next_id;
                open.next_id += 1;
                let state = Arc::new(ConnState::new(id, Instant::now()));
                open.by_id.insert(id, Arc::clone(&state));
                Ok(Ticket {
                    state,
                    connections: Arc::clone(self),
                })
            }
        }
    }

    /// How many connections are open.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(max: usize, reserve: usize) -> ConnectionSettings {
        ConnectionSettings {
            max_connections: max,
            authenticated_reserve: reserve,
            ..ConnectionSettings::default()
        }
    }

    fn conn(id: u64, authenticated: bool, idle: bool) -> ConnView {
        ConnView {
            id,
            authenticated,
            idle,
        }
    }

    #[test]
    fn room_admits_without_evicting() {
        let open = [conn(0, false, true), conn(1, true, false)];
        assert_eq!(
            plan_admission(&open, &limits(4, 1)),
            Admission::Admit { evict: vec![] }
        );
    }

    #[test]
    fn a_full_unauthenticated_share_evicts_its_oldest_idle_connection() {
        // Share 3 of 4: three unauthenticated, the oldest busy.
        let open = [
            conn(0, false, false),
            conn(1, false, true),
            conn(2, false, true),
        ];
        assert_eq!(
            plan_admission(&open, &limits(4, 1)),
            Admission::Admit { evict: vec![1] }
        );
    }

    #[test]
    fn authenticated_connections_go_only_when_no_unauthenticated_one_can() {
        // Full: 2 authenticated (one idle) beyond a reserve of 1, 2 busy
        // unauthenticated.
        let open = [
            conn(0, true, true),
            conn(1, true, false),
            conn(2, false, false),
            conn(3, false, true),
        ];
        assert_eq!(
            plan_admission(&open, &limits(4, 1)),
            Admission::Admit { evict: vec![3] }
        );
        let open = [
            conn(0, true, true),
            conn(1, true, false),
            conn(2, true, false),
            conn(3, false, false),
        ];
        assert_eq!(
            plan_admission(&open, &limits(4, 1)),
            Admission::Admit { evict: vec![0] }
        );
    }

    #[test]
    fn busy_connections_are_never_evicted() {
        let open = [conn(0, false, false), conn(1, false, false)];
        let refused = plan_admission(&open, &limits(4, 2));
        assert_eq!(
            refused,
            Admission::Refuse(Refusal::Unauthenticated { share: 2, max: 4 })
        );
        let Admission::Refuse(why) = refused else {
            unreachable!()
        };
        assert!(why.to_string().contains("[api] max_connections"), "{why}");
        let open = [conn(0, true, false), conn(1, true, false)];
        let refused = plan_admission(&open, &limits(2, 1));
        assert_eq!(refused, Admission::Refuse(Refusal::Full { max: 2 }));
    }

    /// A 10 s header-read and a 60 s idle timeout, whatever the defaults.
    fn ten_and_sixty() -> ConnectionSettings {
        ConnectionSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            ..ConnectionSettings::default()
        }
    }

    #[test]
    fn deadlines() {
        let t0 = Instant::now();
        let l = ten_and_sixty();
        let s = Duration::from_secs;
        let fresh = Phase {
            in_flight: 0,
            served: 0,
            opened: t0,
            idle_since: t0,
            head_started: Some(t0 + s(5)),
            server_behind: None,
        };
        // The first request's headers: from the opening, whatever trickles in.
        assert_eq!(
            plan_deadline(&fresh, &l),
            Some((t0 + s(10), Expiry::HeaderRead))
        );
        let busy = Phase {
            in_flight: 1,
            ..fresh
        };
        assert_eq!(plan_deadline(&busy, &l), None);
        let idle = Phase {
            served: 3,
            idle_since: t0 + s(100),
            head_started: None,
            ..fresh
        };
        assert_eq!(plan_deadline(&idle, &l), Some((t0 + s(160), Expiry::Idle)));
        let reading = Phase {
            head_started: Some(t0 + s(130)),
            ..idle
        };
        assert_eq!(
            plan_deadline(&reading, &l),
            Some((t0 + s(140), Expiry::HeaderRead))
        );
    }

    /// The soak's defect: a server too busy to read a request that had
    /// arrived does not count that time against the client.
    #[test]
    fn time_the_server_was_behind_is_not_the_clients() {
        let t0 = Instant::now();
        let l = ten_and_sixty();
        let s = Duration::from_secs;
        let fresh = Phase {
            in_flight: 0,
            served: 0,
            opened: t0,
            idle_since: t0,
            head_started: None,
            server_behind: Some(t0 + s(25)),
        };
        assert_eq!(
            plan_deadline(&fresh, &l),
            Some((t0 + s(35), Expiry::HeaderRead))
        );
        // Idle, with a request found unread at the idle deadline: that
        // request's head now has the header-read time.
        let idle = Phase {
            served: 2,
            server_behind: Some(t0 + s(70)),
            ..fresh
        };
        assert_eq!(
            plan_deadline(&idle, &l),
            Some((t0 + s(80), Expiry::HeaderRead))
        );
        let begun = Phase {
            head_started: Some(t0 + s(75)),
            ..idle
        };
        assert_eq!(
            plan_deadline(&begun, &l),
            Some((t0 + s(85), Expiry::HeaderRead))
        );
    }

    #[test]
    fn only_a_begun_first_request_is_answered_408() {
        let t0 = Instant::now();
        let fresh = Phase {
            in_flight: 0,
            served: 0,
            opened: t0,
            idle_since: t0,
            head_started: None,
            server_behind: None,
        };
        assert!(
            !plan_timeout_answer(&fresh, Expiry::HeaderRead),
            "sent nothing"
        );
        let begun = Phase {
            head_started: Some(t0),
            ..fresh
        };
        assert!(plan_timeout_answer(&begun, Expiry::HeaderRead));
        let later = Phase { served: 1, ..begun };
        assert!(
            !plan_timeout_answer(&later, Expiry::HeaderRead),
            "after an answer"
        );
        assert!(!plan_timeout_answer(&fresh, Expiry::Idle));
    }

    #[test]
    fn the_registry_tracks_requests_authentication_and_eviction() {
        let connections = Connections::new(limits(2, 1));
        let first = connections.admit().unwrap();
        // The one unauthenticated place is taken, and idle: it goes.
        let second = connections.admit().unwrap();
        assert!(first.state.is_evicted());
        assert_eq!(connections.open(), 1);
        // Busy, it stays; authenticated, it may use the reserve.
        let request = second.state.request_started();
        assert!(matches!(
            connections.admit(),
            Err(Refusal::Unauthenticated { .. })
        ));
        second.state.authenticated();
        let third = connections.admit().unwrap();
        assert_eq!(connections.open(), 2);
        assert!(!second.state.is_evicted());
        drop(request);
        assert_eq!(second.state.phase().served, 1);
        drop(third);
        assert_eq!(connections.open(), 1);
    }

    /// An upgraded connection stays counted and busy while it is held,
    /// after its own task has let its ticket go.
    #[test]
    fn a_held_upgrade_keeps_its_place_until_dropped() {
        let connections = Connections::new(limits(1, 0));
        let slot = Arc::new(connections.admit().unwrap());
        let held = Held::new(&slot);
        drop(slot);
        assert_eq!(connections.open(), 1);
        assert!(matches!(connections.admit(), Err(Refusal::Full { max: 1 })));
        drop(held);
        assert_eq!(connections.open(), 0);
        assert!(connections.admit().is_ok());
    }
}
