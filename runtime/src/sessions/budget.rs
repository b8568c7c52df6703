//! One memory budget for the output every exec stream of the server holds
//! (SPEC G6; threat model T33): bytes a command wrote that its client has not
//! taken yet, from the moment the host's router accepts them until the HTTP
//! layer has written them to the socket.
//!
//! Each stream already has a cap of its own (its channel's length); this is
//! the total on top, so a hundred clients that never read cannot make the
//! server hold a hundred streams' worth. Past the budget, the plugin thread
//! delivering output waits — and with it the pipe, and the command writing
//! into it: backpressure, as for one slow client. Nothing is dropped and
//! nothing is killed.
//!
//! So that a stream whose client reads is never starved by streams whose
//! clients do not, a stream that holds nothing may always take one chunk,
//! budget or not: the budget can be exceeded by at most one chunk (64 KiB)
//! per stream, and every stream keeps moving while its client reads.
//!
//! Lock order: nothing here takes another lock while holding the budget's,
//! and a [`Charge`] may be dropped under any other lock.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The default budget: all streams together.
pub const DEFAULT_BYTES: usize = 64 << 20;

/// How often a waiting delivery looks at its stream again, in case a wake-up
/// was missed (a safety net; every release and cancellation wakes waiters).
const RECHECK: Duration = Duration::from_secs(1);

/// The server-wide budget. Shared by every session's router.
pub struct OutputBudget {
    limit: usize,
    used: Mutex<usize>,
    freed: Condvar,
}

impl fmt::Debug for OutputBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutputBudget")
            .field("limit", &self.limit)
            .field("used", &self.used())
            .finish()
    }
}

impl Default for OutputBudget {
    fn default() -> Self {
        Self::new(DEFAULT_BYTES)
    }
}

/// One stream's share: what it holds now, and whether anyone still wants it.
#[derive(Debug, Default)]
pub struct StreamShare {
    held: AtomicUsize,
    /// Set when the stream's client went away (its output is discarded) or
    /// the sandbox is ending (its output is let through over the budget).
    abandoned: AtomicBool,
    ending: AtomicBool,
}

impl StreamShare {
    /// Its client left: a delivery waiting for the budget gives up.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    /// Its sandbox is being destroyed: waiting deliveries go through at once,
    /// so the destroy never waits on other sandboxes' unread streams.
    pub fn end(&self) {
        self.ending.store(true, Ordering::SeqCst);
    }

    /// Bytes of this stream held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// What a delivery got from [`OutputBudget::reserve`].
#[derive(Debug)]
pub enum Reserved {
    /// Held until the charge is dropped.
    Granted(Charge),
    /// The stream was abandoned while waiting: discard the output.
    Abandoned,
}

impl OutputBudget {
    /// A budget of `limit` bytes (0 is taken as 1: every stream still gets
    /// its one chunk).
    pub fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Bytes held now, by every stream together.
    pub fn used(&self) -> usize {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `bytes` fit — in the budget, or because `stream` holds
    /// nothing, or its sandbox is ending — and takes them for `stream`.
    /// Blocks: call from a plugin thread, never from an async task.
    pub fn reserve(self: &Arc<Self>, stream: &Arc<StreamShare>, bytes: usize) -> Reserved {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if stream.abandoned.load(Ordering::SeqCst) {
                return Reserved::Abandoned;
            }
            let fits = used.saturating_add(bytes) <= self.limit
                || stream.held() == 0
                || stream.ending.load(Ordering::SeqCst);
            if fits {
                *used += bytes;
                stream.held.fetch_add(bytes, Ordering::SeqCst);
                return Reserved::Granted(Charge {
                    budget: Arc::clone(self),
                    stream: Arc::clone(stream),
                    bytes,
                });
            }
            used = self
                .freed
                .wait_timeout(used, RECHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wakes every waiting delivery to look at its stream again (one was
    /// abandoned or is ending).
    pub fn wake(&self) {
        let _used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        self.freed.notify_all();
    }

    fn release(&self, stream: &StreamShare, bytes: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(bytes);
        let _ = stream
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
                Some(held.saturating_sub(bytes))
            });
        self.freed.notify_all();
    }

    fn force(&self, stream: &StreamShare, bytes: usize) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        *used += bytes;
        stream.held.fetch_add(bytes, Ordering::SeqCst);
    }
}

/// Bytes of one stream held in the server. Dropping it gives them back.
pub struct Charge {
    budget: Arc<OutputBudget>,
    stream: Arc<StreamShare>,
    bytes: usize,
}

impl fmt::Debug for Charge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Charge")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Charge {
    /// Bytes held by this charge.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The held bytes became `bytes` (an event turned into its wire line,
    /// which is longer: base64, JSON escapes). Never waits: the bytes exist
    /// already, and the next delivery of the stream waits for them instead.
    pub fn resize(&mut self, bytes: usize) {
        if bytes > self.bytes {
            self.budget.force(&self.stream, bytes - self.bytes);
        } else {
            self.budget.release(&self.stream, self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(&self.stream, self.bytes);
    }
}

/// An event's wire line that holds its bytes' charge — resized to the
/// line's length — until whoever writes it out drops it (the HTTP layer,
/// once the socket took it).
pub struct ChargedLine {
    line: Vec<u8>,
    _charge: Option<Charge>,
}

impl ChargedLine {
    pub fn new(line: Vec<u8>, mut charge: Option<Charge>) -> Self {
        if let Some(charge) = &mut charge {
            charge.resize(line.len());
        }
        Self {
            line,
            _charge: charge,
        }
    }
}

impl AsRef<[u8]> for ChargedLine {
    fn as_ref(&self) -> &[u8] {
        &self.line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(reserved: Reserved) -> Charge {
        match reserved {
            Reserved::Granted(charge) => charge,
            Reserved::Abandoned => panic!("abandoned"),
        }
    }

    #[test]
    fn charges_are_counted_and_given_back() {
        let budget = Arc::new(OutputBudget::new(100));
        let stream = Arc::new(StreamShare::default());
        let a = granted(budget.reserve(&stream, 60));
        let mut b = granted(budget.reserve(&Arc::new(StreamShare::default()), 40));
        assert_eq!((budget.used(), stream.held()), (100, 60));
        b.resize(70);
        assert_eq!(budget.used(), 130);
        drop(a);
        drop(b);
        assert_eq!((budget.used(), stream.held()), (0, 0));
    }

    /// Past the budget a stream that holds something waits until another
    /// stream's bytes are taken; nothing is refused or dropped.
    #[test]
    fn past_the_budget_a_delivery_waits_for_a_release() {
        let budget = Arc::new(OutputBudget::new(100));
        let (busy, other) = (
            Arc::new(StreamShare::default()),
            Arc::new(StreamShare::default()),
        );
        let first = granted(budget.reserve(&busy, 100));
        let _own = granted(budget.reserve(&other, 10));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| granted(budget.reserve(&other, 10)));
            while budget.used() != 110 {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(20));
            assert!(!waiter.is_finished(), "it did not wait");
            drop(first);
            assert_eq!(waiter.join().unwrap().bytes(), 10);
        });
        assert_eq!(budget.used(), 10);
    }

    /// A stream holding nothing always gets one chunk: readers are never
    /// starved by streams nobody reads.
    #[test]
    fn an_empty_stream_always_gets_one_chunk() {
        let budget = Arc::new(OutputBudget::new(10));
        let hog = Arc::new(StreamShare::default());
        let _held = granted(budget.reserve(&hog, 10));
        let reader = Arc::new(StreamShare::default());
        let one = granted(budget.reserve(&reader, 64));
        assert_eq!(budget.used(), 74);
        drop(one);
        let _again = granted(budget.reserve(&reader, 64));
    }

    /// A waiting delivery gives up when its client leaves, and goes through
    /// when its sandbox is being destroyed.
    #[test]
    fn abandoning_or_ending_a_stream_ends_its_wait() {
        let budget = Arc::new(OutputBudget::new(10));
        let stream = Arc::new(StreamShare::default());
        let _held = granted(budget.reserve(&stream, 10));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| budget.reserve(&stream, 10));
            std::thread::sleep(Duration::from_millis(20));
            stream.abandon();
            budget.wake();
            assert!(matches!(waiter.join().unwrap(), Reserved::Abandoned));
        });
        let ending = Arc::new(StreamShare::default());
        let _first = granted(budget.reserve(&ending, 10));
        std::thread::scope(|s| {
            let waiter = s.spawn(|| budget.reserve(&ending, 10));
            std::thread::sleep(Duration::from_millis(20));
            ending.end();
            budget.wake();
            assert!(matches!(waiter.join().unwrap(), Reserved::Granted(_)));
        });
    }
}
