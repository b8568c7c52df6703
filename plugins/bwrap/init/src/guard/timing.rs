//! Where a supervisor's time goes, per step and per syscall (SPEC G1, the
//! guard's cost): built only with the `guard-timing` feature, which prints one
//! line per step to stderr (the backend logs it) when an exec's listener
//! closes. Without the feature every call here is empty and compiles to
//! nothing.

/// When a step began (nothing without the feature).
#[derive(Clone, Copy)]
pub struct Began(#[cfg(feature = "guard-timing")] std::time::Instant);

/// Marks the start of a step.
#[inline(always)]
pub fn begin() -> Began {
    Began(
        #[cfg(feature = "guard-timing")]
        std::time::Instant::now(),
    )
}

/// Adds the time since `began` to `step`.
#[inline(always)]
pub fn end(step: &'static str, began: Began) {
    #[cfg(feature = "guard-timing")]
    imp::add(step, began.0.elapsed());
    #[cfg(not(feature = "guard-timing"))]
    let _ = (step, began);
}

/// Prints this thread's totals and forgets them.
pub fn report() {
    #[cfg(feature = "guard-timing")]
    imp::report();
}

#[cfg(feature = "guard-timing")]
mod imp {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::time::Duration;

    thread_local! {
        static TOTALS: RefCell<BTreeMap<&'static str, (u64, Duration)>> =
            const { RefCell::new(BTreeMap::new()) };
    }

    pub fn add(step: &'static str, took: Duration) {
        TOTALS.with(|t| {
            let mut t = t.borrow_mut();
            let entry = t.entry(step).or_default();
            entry.0 += 1;
            entry.1 += took;
        });
    }

    pub fn report() {
        let totals = TOTALS.with(|t| std::mem::take(&mut *t.borrow_mut()));
        for (step, (n, took)) in totals {
            eprintln!(
                "guard-timing {step:<22} {n:>7} calls {:>10.1} us total {:>7.2} us each",
                took.as_secs_f64() * 1e6,
                took.as_secs_f64() * 1e6 / n as f64
            );
        }
        // The thread's own CPU time and switches: the steps above are wall
        // time, which a caller woken on our CPU and run first inflates.
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage of this thread into `usage`.
        if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } == 0 {
            let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
            eprintln!(
                "guard-timing cpu: user {:.0} us, system {:.0} us; switches: {} voluntary, {} involuntary",
                us(usage.ru_utime),
                us(usage.ru_stime),
                usage.ru_nvcsw,
                usage.ru_nivcsw
            );
        }
    }
}

/// The step name of handling syscall `nr`.
pub fn label(nr: i64) -> &'static str {
    match nr {
        libc::SYS_open | libc::SYS_openat | libc::SYS_creat => "handle: open",
        libc::SYS_mkdir | libc::SYS_mkdirat | libc::SYS_mknod | libc::SYS_mknodat => {
            "handle: mkdir"
        }
        libc::SYS_symlink | libc::SYS_symlinkat => "handle: symlink",
        libc::SYS_link | libc::SYS_linkat => "handle: link",
        libc::SYS_rename | libc::SYS_renameat | libc::SYS_renameat2 => "handle: rename",
        libc::SYS_unlink | libc::SYS_unlinkat | libc::SYS_rmdir => "handle: unlink",
        libc::SYS_truncate => "handle: truncate",
        libc::SYS_connect => "handle: connect",
        _ => "handle: other",
    }
}
