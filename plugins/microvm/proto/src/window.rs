//! Flow control, both ends (see [`crate::WINDOW`]): the sender of a stream
//! spends from a [`Window`] and waits when it is empty; the receiver hands
//! the data on and then acknowledges it with `Credit` frames, a quarter
//! window at a time ([`Owed`]), so the sender, holding three quarters
//! still, never waits for a slow acknowledgement — only for a consumer
//! that stopped taking.

use std::sync::{Condvar, Mutex, PoisonError};

use crate::WINDOW;

/// Acknowledgements are sent in steps of this many bytes.
pub const GRANT_STEP: u32 = WINDOW / 4;

/// What a sender may still send on a stream.
pub struct Window {
    state: Mutex<State>,
    granted: Condvar,
}

struct State {
    left: u64,
    /// Nobody will acknowledge any more (the receiver gave up): sending
    /// is no longer held back.
    open: bool,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                left: u64::from(WINDOW),
                open: false,
            }),
            granted: Condvar::new(),
        }
    }
}

impl Window {
    /// Blocks until some may be sent; returns how much (at most `max`).
    pub fn wait_for_some(&self, max: usize) -> usize {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.left == 0 && !state.open {
            state = self
                .granted
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.open {
            return max;
        }
        max.min(usize::try_from(state.left).unwrap_or(usize::MAX))
    }

    /// `bytes` were sent.
    pub fn spend(&self, bytes: usize) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.left = state.left.saturating_sub(bytes as u64);
    }

    /// The receiver acknowledged `bytes`.
    pub fn grant(&self, bytes: u32) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.left += u64::from(bytes);
        self.granted.notify_all();
    }

    /// The receiver is gone: never wait again (what is sent is dropped).
    pub fn open_fully(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.open = true;
        self.granted.notify_all();
    }
}

/// What a receiver handed on and has not acknowledged yet.
#[derive(Default)]
pub struct Owed(u32);

impl Owed {
    /// `bytes` were handed on; returns what to acknowledge now, if a step
    /// is full.
    pub fn handed_on(&mut self, bytes: usize) -> Option<u32> {
        self.0 = self.0.saturating_add(bytes as u32);
        (self.0 >= GRANT_STEP).then(|| std::mem::take(&mut self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_empties_refills_and_opens() {
        let w = Window::default();
        assert_eq!(w.wait_for_some(usize::MAX), WINDOW as usize);
        w.spend(WINDOW as usize - 10);
        assert_eq!(w.wait_for_some(64), 10);
        w.spend(10);
        w.grant(5);
        assert_eq!(w.wait_for_some(64), 5);
        w.spend(5);
        w.open_fully();
        assert_eq!(w.wait_for_some(64), 64);
    }

    #[test]
    fn acknowledgements_come_a_step_at_a_time() {
        let mut owed = Owed::default();
        assert_eq!(owed.handed_on(GRANT_STEP as usize - 1), None);
        assert_eq!(owed.handed_on(2), Some(GRANT_STEP + 1));
        assert_eq!(owed.handed_on(1), None);
    }
}
