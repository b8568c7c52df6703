//! How often a reader goes back to a pipe a command is streaming into.
//!
//! A reader that returns to `poll`/`read` as soon as it has moved what was
//! there is woken again by the command's very next write — every 4–8 KiB
//! for `seq`, `yes | head` or stdio's buffers. On a small host those
//! wake-ups, not the copying, were most of a stream's cost (SPEC F10; the
//! counts are in docs/measurements.md). While a command streams,
//! the reader pauses briefly before it reads again, so one read moves what
//! several writes put in the pipe. The first read after a quiet spell is
//! never delayed, so interactive output keeps its latency; a read that
//! filled its buffer, or was topped up with more that was ready at once
//! (a terminal's master, a few KiB a read), is followed at once (more is
//! waiting); and the pause
//! is short enough that a 1 MiB pipe does not fill behind it below 10 GB/s,
//! so the command never waits for it. A pipe whose writers have all
//! closed is read at once: its end is never delayed.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

/// How long a streaming reader waits before reading again.
pub const PAUSE: Duration = Duration::from_micros(100);

/// A read this soon after a short one means the command is streaming.
pub const STREAMING: Duration = Duration::from_millis(1);

/// The pacing of one reader: when its last read left the pipe empty.
#[derive(Debug, Default)]
pub struct Pace {
    last_short: Option<Instant>,
}

impl Pace {
    /// Whether the next read should wait [`PAUSE`] first (the last read was
    /// short, and recent). Pure, for the tests.
    pub fn should_pause(&self, now: Instant) -> bool {
        self.last_short
            .is_some_and(|at| now.saturating_duration_since(at) < STREAMING)
    }

    /// Called before reading `pipe`: pauses while the command streams,
    /// unless every writer has closed it (then only its end is left).
    pub fn before_read(&self, pipe: BorrowedFd<'_>) {
        if self.should_pause(Instant::now()) && !crate::pipe::hung_up(pipe) {
            std::thread::sleep(PAUSE);
        }
    }

    /// Called after a read: `full` when it filled what it could take
    /// (then more is waiting and the next read need not pause).
    pub fn after_read(&mut self, full: bool) {
        self.last_short = (!full).then(Instant::now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_read_and_a_read_after_a_quiet_spell_are_not_delayed() {
        let now = Instant::now();
        let pace = Pace::default();
        assert!(!pace.should_pause(now), "nothing read yet");
        let mut pace = Pace::default();
        pace.after_read(false);
        let later = Instant::now() + STREAMING + Duration::from_millis(1);
        assert!(!pace.should_pause(later), "quiet for longer than STREAMING");
    }

    #[test]
    fn a_short_read_while_streaming_pauses_a_full_one_does_not() {
        let mut pace = Pace::default();
        pace.after_read(false);
        assert!(pace.should_pause(Instant::now()), "short and recent");
        pace.after_read(true);
        assert!(!pace.should_pause(Instant::now()), "the buffer was full");
    }

    #[test]
    fn the_pause_leaves_a_full_size_pipe_room_at_ten_gigabytes_a_second() {
        let bytes_behind = 10e9 * PAUSE.as_secs_f64();
        assert!(bytes_behind < crate::pipe::PIPE_SIZE as f64);
    }
}
