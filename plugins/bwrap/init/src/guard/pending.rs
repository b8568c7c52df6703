//! The guard's rules, made on a thread of their own while PID 1 announces
//! `ready` and the first command starts (SPEC G1): compiling the
//! globs and scanning the workspace for protected files no longer hold up
//! the start.
//!
//! Nothing is let through meanwhile. A command installs the guard filter
//! before it execs, so each of its guarded calls waits in the kernel for
//! the supervisor, and a supervisor answers nothing before the rules are
//! whole ([`PendingRules::wait`]). If they cannot be made, PID 1 kills
//! every process and exits (fail closed), as it refused to start before.

use std::sync::{Arc, Condvar, Mutex};

use sandbox_plugin_api::error_chain;

use sandbox_paths::write_rules::{GuardConfig, Rules};

/// Rules that are being made, or made.
#[derive(Default)]
pub struct PendingRules {
    made: Mutex<Option<Arc<Rules>>>,
    done: Condvar,
}

impl PendingRules {
    /// Starts making the rules of `config` on a thread named `guard-rules`;
    /// `make` compiles and scans (see [`make`]). Where no thread can be
    /// started, they are made here and now.
    pub fn start(
        config: GuardConfig,
        make: fn(&GuardConfig) -> Result<Rules, String>,
    ) -> Arc<Self> {
        let pending = Arc::new(Self::default());
        let filler = Arc::clone(&pending);
        let work = move || filler.fill(make(&config));
        // The thread takes no signal: PID 1 learns of its children's ends
        // by a signalfd, and a SIGCHLD taken by a thread that does not block
        // it would be lost (a command never reaped, its end never told).
        // It is spawned with every signal blocked, so it starts that way.
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        let mut before = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigfillset initialises `all`; pthread_sigmask stores the
        // old mask in `before` and is restored right after the spawn.
        let blocked = unsafe {
            libc::sigfillset(all.as_mut_ptr());
            libc::pthread_sigmask(libc::SIG_BLOCK, all.as_ptr(), before.as_mut_ptr()) == 0
        };
        let spawned = if blocked {
            std::thread::Builder::new()
                .name("guard-rules".into())
                .spawn(work.clone())
                .map(drop)
        } else {
            Err(std::io::Error::last_os_error())
        };
        if blocked {
            // SAFETY: restores the mask saved above.
            unsafe {
                libc::pthread_sigmask(libc::SIG_SETMASK, before.as_ptr(), std::ptr::null_mut())
            };
        }
        if spawned.is_err() {
            work();
        }
        pending
    }

    /// The rules, once they are made (blocks until then).
    pub fn wait(&self) -> Arc<Rules> {
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(rules) = made.as_ref() {
                return Arc::clone(rules);
            }
            made = self.done.wait(made).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn fill(&self, made: Result<Rules, String>) {
        match made {
            Ok(rules) => {
                *self.made.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(rules));
                self.done.notify_all();
            }
            Err(message) => {
                // Fail closed: no command may run on without its guard.
                eprintln!("sandbox-init: the create-time guard cannot start: {message}");
                // SAFETY: plain syscalls; from PID 1, kill(-1) reaches every
                // other process of the sandbox.
                unsafe { libc::kill(-1, libc::SIGKILL) };
                std::process::exit(125);
            }
        }
    }
}

/// Compiles the config and records the identities of existing protected
/// files (see [`sandbox_paths::write_rules::scan_protected_inodes`]).
pub fn make(config: &GuardConfig) -> Result<Rules, String> {
    let mut rules = Rules::new(config).map_err(|e| error_chain(&e))?;
    if !sandbox_paths::write_rules::scan_protected_inodes(&mut rules) {
        eprintln!(
            "sandbox-init: more files than the scan limit; hard links to some protected files may not be caught"
        );
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SIGCHLD the rules' thread could take would be lost to PID 1's
    /// signalfd (a command never reaped, `run` waiting for ever): it runs
    /// with every signal blocked.
    #[test]
    fn the_rules_are_made_with_every_signal_blocked() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // Never an error from `make` here: `fill` would kill(-1).
        static BLOCKED: AtomicBool = AtomicBool::new(false);
        fn check_mask(config: &GuardConfig) -> Result<Rules, String> {
            let mut now = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
            // SAFETY: reads this thread's mask into `now`, then tests it.
            let blocked = unsafe {
                libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), now.as_mut_ptr());
                [libc::SIGCHLD, libc::SIGTERM, libc::SIGUSR1]
                    .iter()
                    .all(|&sig| libc::sigismember(now.as_ptr(), sig) == 1)
            };
            BLOCKED.store(blocked, Ordering::SeqCst);
            Ok(Rules::new(config).expect("an empty config compiles"))
        }
        let pending = PendingRules::start(GuardConfig::default(), check_mask);
        assert!(!pending.wait().is_active());
        assert!(BLOCKED.load(Ordering::SeqCst), "a signal is not blocked");
    }

    #[test]
    fn a_waiter_gets_the_rules_once_they_are_made() {
        fn slow(config: &GuardConfig) -> Result<Rules, String> {
            std::thread::sleep(std::time::Duration::from_millis(50));
            Ok(Rules::new(config).expect("one glob compiles"))
        }
        let config = GuardConfig {
            globs: vec!["**/*.pem".into()],
            roots: vec!["/nonexistent-root".into()],
            ..GuardConfig::default()
        };
        let pending = PendingRules::start(config, slow);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let pending = Arc::clone(&pending);
                std::thread::spawn(move || pending.wait().is_active())
            })
            .collect();
        for waiter in waiters {
            assert!(waiter.join().unwrap());
        }
    }
}
