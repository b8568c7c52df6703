//! The server's soft `RLIMIT_NOFILE`, raised to its hard limit at start
//! (threat model T28, T29): every API connection, egress tunnel and sandbox
//! pipe is a descriptor, and at the usual soft default of 1,024 about a
//! thousand bare connects would leave none for anyone.

/// The soft limit to set: the hard one, bounded by the kernel's
/// `fs.nr_open` (an unlimited hard limit cannot be the soft one); `None`
/// when the soft one is there already.
pub fn plan_soft_limit(soft: u64, hard: u64, nr_open: Option<u64>) -> Option<u64> {
    let target = match nr_open {
        Some(cap) => hard.min(cap),
        None => hard,
    };
    (target > soft).then_some(target)
}

/// Descriptor slots the server's table is given at start.
const RESERVED_SLOTS: u64 = 4096;

/// For `serve`, while the process has one thread: the soft limit raised,
/// then the descriptor table grown to [`RESERVED_SLOTS`] at once — grown
/// later, with the runtime's threads sharing it, each doubling from 64 on
/// would wait for an RCU grace period (milliseconds; docs/measurements.md)
/// inside whichever request crossed it.
pub fn prepare() {
    raise();
    sandbox_fdpass::reserve_table(RESERVED_SLOTS);
}

/// Raises the soft limit and logs it once; a failure is logged and the
/// server goes on with the limit it has (the connection cap still holds).
pub fn raise() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!("reading RLIMIT_NOFILE: {}", std::io::Error::last_os_error());
        return;
    }
    // Read, never written.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|text| text.trim().parse().ok());
    let Some(target) = plan_soft_limit(limit.rlim_cur, limit.rlim_max, nr_open) else {
        tracing::info!("open files: soft limit {} (the hard limit)", limit.rlim_cur);
        return;
    };
    let raised = libc::rlimit {
        rlim_cur: target,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit from a struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        tracing::warn!(
            "raising RLIMIT_NOFILE from {} to {target}: {}",
            limit.rlim_cur,
            std::io::Error::last_os_error()
        );
        return;
    }
    tracing::info!(
        "open files: soft limit raised from {} to {target} (the hard limit)",
        limit.rlim_cur
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_to_the_hard_one_within_nr_open() {
        assert_eq!(
            plan_soft_limit(1024, 524_288, Some(1_048_576)),
            Some(524_288)
        );
        assert_eq!(
            plan_soft_limit(1024, u64::MAX, Some(1_048_576)),
            Some(1_048_576)
        );
        assert_eq!(plan_soft_limit(1024, 4096, None), Some(4096));
        assert_eq!(plan_soft_limit(4096, 4096, Some(1_048_576)), None);
        assert_eq!(plan_soft_limit(8192, 4096, None), None);
    }
}
