//! The host's TSC frequency, for `tsc_early_khz=` on the guest's command
//! line: under TCG the guest's TSC is the host's, and `-M microvm` has no
//! other clock to calibrate it against, so a guest without the value hangs
//! at boot (docs/research/microvm.md §2).

use std::time::{Duration, Instant};

/// How long the measurement runs.
const WINDOW: Duration = Duration::from_millis(20);

/// TSC ticks per millisecond, measured against the monotonic clock over
/// [`WINDOW`]; `None` off x86_64.
pub fn host_khz() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64.
        let read = || unsafe { core::arch::x86_64::_rdtsc() };
        let (t0, c0) = (Instant::now(), read());
        while t0.elapsed() < WINDOW {
            std::hint::spin_loop();
        }
        let (elapsed, c1) = (t0.elapsed(), read());
        let micros = u64::try_from(elapsed.as_micros()).ok()?.max(1);
        Some(c1.wrapping_sub(c0).saturating_mul(1000) / micros)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_tsc_is_plausible() {
        let khz = super::host_khz().expect("x86_64");
        // Between 500 MHz and 10 GHz.
        assert!((500_000..10_000_000).contains(&khz), "{khz} kHz");
    }
}
