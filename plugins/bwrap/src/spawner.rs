//! Starts bwrap from one thread that lives as long as the process.
//!
//! `--die-with-parent` (PR_SET_PDEATHSIG) fires when the *thread* that forked
//! bwrap ends, not the process. Forking from a host worker thread that later
//! exits would kill a healthy sandbox; forking from this thread ties the
//! sandbox to the server process alone.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

type Job = (Command, mpsc::Sender<io::Result<Child>>);

static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();

fn spawner() -> io::Result<&'static Mutex<mpsc::Sender<Job>>> {
    if let Some(tx) = SPAWNER.get() {
        return Ok(tx);
    }
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("bwrap-spawner".into())
        .spawn(move || {
            for (mut command, answer) in rx {
                let _ = answer.send(command.spawn());
            }
        })?;
    Ok(SPAWNER.get_or_init(|| Mutex::new(tx)))
}

/// Spawns `command` from the long-lived spawner thread.
pub fn spawn(command: Command) -> io::Result<Child> {
    let (answer_tx, answer_rx) = mpsc::channel();
    spawner()?
        .lock()
        .map_err(|_| io::Error::other("spawner lock poisoned"))?
        .send((command, answer_tx))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer_rx
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
