//! Calls made off the supervisor's thread (a blocking `connect`): each on a
//! worker that answers it, so a call that waits holds no other. Workers are
//! kept idle for a while and reused: starting a thread for every blocking
//! connect cost more than the rest of the call (docs/measurements.md). A
//! call goes to a worker only when one is idle and reserved for it, so no
//! call ever waits behind another.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::emulate::Deferred;
use super::notify::Responder;

/// How long an idle worker waits for another call before it ends.
const IDLE: Duration = Duration::from_secs(10);

/// One call and where its answer goes.
struct Job {
    id: u64,
    work: Deferred,
    responder: Responder,
}

/// The workers of one supervisor.
pub struct Workers {
    jobs: Sender<Job>,
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Receiver<Job>>,
    /// Workers waiting for a call and not yet reserved.
    idle: AtomicUsize,
}

impl Default for Workers {
    fn default() -> Self {
        let (jobs, queue) = channel();
        Self {
            jobs,
            shared: Arc::new(Shared {
                queue: Mutex::new(queue),
                idle: AtomicUsize::new(0),
            }),
        }
    }
}

/// Takes one idle worker for a call; `false` when none is idle.
fn reserve(idle: &AtomicUsize) -> bool {
    idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}

impl Workers {
    /// Makes `work` on a worker, which answers notification `id`. `false`:
    /// no worker could be started (the caller answers EAGAIN).
    pub fn run(&self, id: u64, work: Deferred, responder: Responder) -> bool {
        let job = Job {
            id,
            work,
            responder,
        };
        let job = if reserve(&self.shared.idle) {
            match self.jobs.send(job) {
                Ok(()) => return true,
                Err(e) => e.0,
            }
        } else {
            job
        };
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("guard-later".into())
            .spawn(move || {
                answer(job);
                work_on(&shared);
            })
            .is_ok()
    }
}

fn answer(job: Job) {
    let _ = match (job.work.0)() {
        Ok(value) => job.responder.respond(job.id, value, 0),
        Err(errno) => job.responder.respond(job.id, 0, errno),
    };
}

/// A worker's life after its first call: idle, a call, idle again, until
/// none comes for [`IDLE`] (and none was reserved for it meanwhile).
fn work_on(shared: &Shared) {
    shared.idle.fetch_add(1, Ordering::AcqRel);
    loop {
        let next = match shared.queue.lock() {
            Ok(queue) => queue.recv_timeout(IDLE),
            Err(_) => return,
        };
        match next {
            Ok(job) => {
                answer(job);
                shared.idle.fetch_add(1, Ordering::AcqRel);
            }
            // Leave only if no call counts on us: a reservation made
            // meanwhile is ours to serve.
            Err(RecvTimeoutError::Timeout) if reserve(&shared.idle) => return,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_takes_one_idle_worker_and_never_goes_below_none() {
        let idle = AtomicUsize::new(2);
        assert!(reserve(&idle) && reserve(&idle));
        assert!(!reserve(&idle));
        assert_eq!(idle.load(Ordering::Acquire), 0);
    }
}
