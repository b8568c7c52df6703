//! The stdout reader of an exec whose stdout goes to a host descriptor
//! ([`sandbox_plugin_api::HostFds::stdout`]): the same loop as the event
//! reader's — the same lock, the same accounting `Relay::finish` reads —
//! but its bytes go straight to the descriptor, by `splice` where it can.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::pace::Pace;
use crate::pipe::{self, Copier, Ready};
use crate::{AFTER_EXIT_LIMIT, Relay};

/// Copies the command's stdout pipe to `sink` until end of file, the exec's
/// end, or the sink refuses (its reader left). Returning drops the pipe's
/// read end: a command still writing gets SIGPIPE, as with a direct pipe.
pub(crate) fn copy_out(relay: &Relay, pipe: OwnedFd, sink: OwnedFd) {
    let mut copier = Copier::new();
    let mut pace = Pace::default();
    loop {
        // Waiting for the command is not delivering: `finish` may give up
        // on a pipe a background process keeps open and silent.
        match pipe::wait(pipe.as_fd(), None) {
            Ok(Ready::Readable) => {}
            Ok(Ready::Gone) | Err(_) => return,
        }
        pace.before_read(pipe.as_fd());
        let Ok(_emitting) = relay.emitting.lock() else {
            return;
        };
        if relay.has_ended() {
            return; // a background process writing after the exec ended
        }
        let allowance = if relay.finishing.load(Ordering::SeqCst) {
            let past = relay
                .read_bytes
                .load(Ordering::SeqCst)
                .saturating_sub(relay.finish_mark.load(Ordering::SeqCst));
            AFTER_EXIT_LIMIT.saturating_sub(past)
        } else {
            u64::MAX
        };
        if allowance == 0 {
            return; // a background process's output
        }
        relay.delivering.fetch_add(1, Ordering::SeqCst);
        // `splice` reads as it writes: the bytes it may move count as read
        // from the start, and what it did not move is given back after.
        // So a `finish` that begins meanwhile counts them as read before
        // the exit (they were in the pipe then), never as a background
        // process's.
        let max = allowance.min(pipe::COPY_MAX as u64);
        relay.read_bytes.fetch_add(max, Ordering::SeqCst);
        let moved = copier.copy(pipe.as_fd(), sink.as_fd(), max as usize);
        let unmoved = max - moved.as_ref().map_or(0, |n| *n as u64).min(max);
        relay.read_bytes.fetch_sub(unmoved, Ordering::SeqCst);
        relay.delivering.fetch_sub(1, Ordering::SeqCst);
        match moved {
            Ok(0) => return,
            Ok(n) => pace.after_read(n as u64 == max),
            Err(e) => {
                tracing::debug!(exec = relay.exec_id, "the stdout sink refused: {e}");
                return;
            }
        }
    }
}
