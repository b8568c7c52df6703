//! Whether `/dev/kvm` runs guest-kernel code at hardware speed — tested by
//! running some, not by opening the device (docs/research/microvm.md §1, §4.2).
//!
//! On a PVM host `/dev/kvm` opens, `KVM_CREATE_VM` works and ring-3 guest
//! code runs natively, but ring-0 guest code — any ordinary guest kernel —
//! goes through KVM's instruction emulator at about 1 µs per loop
//! iteration. So the test runs a 64-bit CPL-0 guest: [`Plan::chunks`]
//! chunks of a `dec rcx; jnz` loop, each ending in an `out` back to us, and
//! times them against a budget that real hardware meets with room to spare.
//! The host re-enters the guest per chunk and stops as soon as the budget is
//! spent, so an emulating host costs about the budget plus one chunk.
//!
//! This file holds the plan, the verdict and the judging (pure); [`guest`]
//! the guest's memory and registers (pure); `vm` the ioctls.

pub mod abi;
pub mod guest;
#[cfg(target_os = "linux")]
mod vm;

use std::path::Path;
use std::time::Duration;

/// The device.
pub const DEV_KVM: &str = "/dev/kvm";

/// Present when the host's KVM is PVM (the `kvm_pvm` module).
pub const PVM_MODULE: &str = "/sys/module/kvm_pvm";

/// How much guest code to run, and how fast it must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Loop iterations per chunk (one guest exit each).
    pub chunk_iterations: u32,
    /// Chunks before the final `hlt`.
    pub chunks: u32,
    /// The wall time all of them must fit in.
    pub budget: Duration,
}

impl Plan {
    /// 10 M iterations in 100 ms: milliseconds on hardware virtualisation,
    /// seconds when emulated (around a microsecond per iteration on PVM,
    /// docs/research/microvm.md §1). Small chunks let [`after_chunk`] call
    /// an emulating host after a few of them, so the probe costs every
    /// server start a fraction of the budget there, not the whole of it.
    pub const DEFAULT: Plan = Plan {
        chunk_iterations: 10_000,
        chunks: 1_000,
        budget: Duration::from_millis(100),
    };

    /// A chunk's fair share of the budget.
    fn share(&self) -> Duration {
        self.budget / self.chunks.max(1)
    }

    /// Iterations of the whole program.
    pub fn total_iterations(&self) -> u64 {
        u64::from(self.chunk_iterations) * u64::from(self.chunks)
    }
}

/// What the functional test found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Verdict {
    /// Every iteration ran within the budget.
    Hardware {
        /// Iterations run.
        iterations: u64,
        /// Wall time from the first `KVM_RUN` to the `hlt`.
        elapsed: Duration,
    },
    /// The budget ran out first: ring-0 guest code is emulated (or the host
    /// is too loaded to be told apart from that).
    Emulated {
        /// Iterations run when the test stopped.
        iterations: u64,
        /// Wall time until it stopped.
        elapsed: Duration,
    },
    /// No guest could be run; why (the failing step, named).
    Unusable(String),
}

/// Chunks run before the early call in [`after_chunk`] may be made.
pub const EARLY_CHUNKS: u32 = 3;

/// Slack for the early call: a few descheduled milliseconds on a loaded
/// host must not pass for emulation.
pub const EARLY_GRACE: Duration = Duration::from_millis(5);

/// The verdict once chunk number `done` (1-based) has reported at `elapsed`,
/// or `None` to run the next chunk. Emulated once the budget is spent — or
/// early, after [`EARLY_CHUNKS`], when the chunks so far took more than ten
/// times their share of it plus [`EARLY_GRACE`] (hardware runs a chunk in
/// a hundredth of its share; emulation in fifty times it).
pub fn after_chunk(plan: &Plan, done: u32, elapsed: Duration) -> Option<Verdict> {
    let early = done >= EARLY_CHUNKS && elapsed > plan.share() * done * 10 + EARLY_GRACE;
    (elapsed > plan.budget || early).then(|| Verdict::Emulated {
        iterations: u64::from(done) * u64::from(plan.chunk_iterations),
        elapsed,
    })
}

/// The verdict when the guest halted after its last chunk.
pub fn at_halt(plan: &Plan, elapsed: Duration) -> Verdict {
    let iterations = plan.total_iterations();
    if elapsed <= plan.budget {
        Verdict::Hardware {
            iterations,
            elapsed,
        }
    } else {
        Verdict::Emulated {
            iterations,
            elapsed,
        }
    }
}

/// Runs the test on this host. Bounded by about `plan.budget` plus one
/// chunk; uses no threads and no signals; releases every descriptor and
/// mapping on every path.
pub fn functional_test(plan: &Plan) -> Verdict {
    #[cfg(target_os = "linux")]
    {
        vm::run(plan).unwrap_or_else(Verdict::Unusable)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = plan;
        Verdict::Unusable(
            "KVM exists only on Linux; this platform's accelerator is not probed yet".to_owned(),
        )
    }
}

/// Whether the host's KVM is PVM.
pub fn pvm_host() -> bool {
    Path::new(PVM_MODULE).exists()
}

/// `100 k`, `10 M`, `1.5 M`, `999`.
pub fn format_count(n: u64) -> String {
    fn scaled(n: u64, unit: u64, suffix: &str) -> String {
        if n.is_multiple_of(unit) {
            format!("{} {suffix}", n / unit)
        } else {
            format!("{:.1} {suffix}", n as f64 / unit as f64)
        }
    }
    match n {
        1_000_000.. => scaled(n, 1_000_000, "M"),
        1_000.. => scaled(n, 1_000, "k"),
        _ => n.to_string(),
    }
}

/// Milliseconds, with one decimal below 10 ms: `190 ms`, `4.2 ms`.
pub fn format_ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The measured figures, in words.
pub fn figures(verdict: &Verdict, plan: &Plan) -> Option<String> {
    match verdict {
        Verdict::Hardware {
            iterations,
            elapsed,
        } => Some(format!(
            "{} iterations took {} (budget {})",
            format_count(*iterations),
            format_ms(*elapsed),
            format_ms(plan.budget)
        )),
        Verdict::Emulated {
            iterations,
            elapsed,
        } => Some(format!(
            "{} iterations took {} against a {} budget for {}",
            format_count(*iterations),
            format_ms(*elapsed),
            format_ms(plan.budget),
            format_count(plan.total_iterations())
        )),
        Verdict::Unusable(_) => None,
    }
}

/// Why KVM cannot back a microVM here, or `None` when it can; names PVM
/// when the host is PVM.
pub fn blocker(verdict: &Verdict, plan: &Plan, pvm: bool) -> Option<String> {
    let figures = figures(verdict, plan).unwrap_or_default();
    match verdict {
        Verdict::Hardware { .. } => None,
        Verdict::Emulated { .. } if pvm => Some(format!(
            "ring-0 guest code is emulated by /dev/kvm (PVM host: needs a PVM guest kernel): {figures}"
        )),
        Verdict::Emulated { .. } => Some(format!(
            "ring-0 guest code does not run at hardware speed under /dev/kvm (emulated, or the host is overloaded): {figures}"
        )),
        Verdict::Unusable(why) if pvm => Some(format!(
            "no usable KVM: {why} (PVM host: ring-0 guest code is emulated by /dev/kvm; it needs a PVM guest kernel)"
        )),
        Verdict::Unusable(why) => Some(format!("no usable KVM: {why}")),
    }
}

/// What the KVM test found (kept per boot by [`crate::cache`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KvmFinding {
    /// The test that ran.
    pub plan: Plan,
    /// Its verdict.
    pub verdict: Verdict,
    /// Whether `/sys/module/kvm_pvm` exists.
    pub pvm: bool,
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_chunk_within_the_budget_goes_on_and_one_past_it_stops() {
        let plan = Plan::DEFAULT;
        assert_eq!(after_chunk(&plan, 1, MS(1)), None);
        assert_eq!(
            after_chunk(&plan, 999, MS(100)),
            None,
            "the budget itself is fine"
        );
        assert_eq!(
            after_chunk(&plan, 400, MS(101)),
            Some(Verdict::Emulated {
                iterations: 4_000_000,
                elapsed: MS(101)
            })
        );
    }

    /// Emulation (milliseconds per 10 k chunk on PVM) is called after three
    /// chunks; a slow first chunk alone, or a few descheduled milliseconds,
    /// is not.
    #[test]
    fn an_emulating_host_is_called_after_a_few_chunks_and_a_hiccup_is_not() {
        let plan = Plan::DEFAULT;
        assert_eq!(after_chunk(&plan, 1, MS(40)), None, "too early to call");
        assert_eq!(after_chunk(&plan, 2, MS(40)), None, "too early to call");
        assert_eq!(
            after_chunk(&plan, 3, MS(16)),
            Some(Verdict::Emulated {
                iterations: 30_000,
                elapsed: MS(16)
            })
        );
        // 3 chunks: share 0.3 ms × 10 + 5 ms grace = 8 ms.
        assert_eq!(after_chunk(&plan, 3, MS(8)), None, "a hiccup");
        // 100 chunks: 10 ms × 10 + 5 ms > the budget: only the budget rules.
        assert_eq!(after_chunk(&plan, 100, MS(60)), None);
    }

    #[test]
    fn the_halt_within_the_budget_is_hardware_and_past_it_emulated() {
        let plan = Plan::DEFAULT;
        assert_eq!(
            at_halt(&plan, MS(4)),
            Verdict::Hardware {
                iterations: 10_000_000,
                elapsed: MS(4)
            }
        );
        assert_eq!(
            at_halt(&plan, MS(150)),
            Verdict::Emulated {
                iterations: 10_000_000,
                elapsed: MS(150)
            }
        );
    }

    #[test]
    fn counts_and_times_read_as_people_write_them() {
        assert_eq!(format_count(100_000), "100 k");
        assert_eq!(format_count(10_000_000), "10 M");
        assert_eq!(format_count(1_500_000), "1.5 M");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(0), "0");
        assert_eq!(format_ms(MS(190)), "190 ms");
        assert_eq!(format_ms(Duration::from_micros(4_240)), "4.2 ms");
    }

    #[test]
    fn the_blocker_names_the_emulation_the_figures_and_pvm() {
        let plan = Plan::DEFAULT;
        let emulated = Verdict::Emulated {
            iterations: 30_000,
            elapsed: MS(17),
        };
        assert_eq!(
            blocker(&emulated, &plan, true).unwrap(),
            "ring-0 guest code is emulated by /dev/kvm (PVM host: needs a PVM guest kernel): \
             30 k iterations took 17 ms against a 100 ms budget for 10 M"
        );
        let elsewhere = blocker(&emulated, &plan, false).unwrap();
        assert!(
            elsewhere.contains("hardware speed") && !elsewhere.contains("PVM"),
            "{elsewhere}"
        );
        let hardware = Verdict::Hardware {
            iterations: 10_000_000,
            elapsed: MS(5),
        };
        assert_eq!(blocker(&hardware, &plan, false), None);
        assert_eq!(
            figures(&hardware, &plan).unwrap(),
            "10 M iterations took 5.0 ms (budget 100 ms)"
        );
        let unusable = Verdict::Unusable("KVM_CREATE_VM failed: x".to_owned());
        assert_eq!(
            blocker(&unusable, &plan, false).unwrap(),
            "no usable KVM: KVM_CREATE_VM failed: x"
        );
        assert!(blocker(&unusable, &plan, true).unwrap().ends_with(
            "(PVM host: ring-0 guest code is emulated by /dev/kvm; it needs a PVM guest kernel)"
        ));
    }

    /// The real test on this host: on a PVM host with a usable /dev/kvm it
    /// must say `Emulated`; anywhere, it answers within a few seconds.
    #[test]
    fn the_functional_test_on_this_host() {
        let started = Instant::now();
        let verdict = functional_test(&Plan::DEFAULT);
        let took = started.elapsed();
        eprintln!("functional KVM test: {verdict:?} in {took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        let kvm_openable = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEV_KVM)
            .is_ok();
        if pvm_host() && kvm_openable {
            assert!(
                matches!(verdict, Verdict::Emulated { .. }),
                "a PVM host emulates ring-0 guest code: {verdict:?}"
            );
        }
        if let Verdict::Emulated { iterations, .. } = verdict {
            assert!(iterations >= u64::from(Plan::DEFAULT.chunk_iterations) || iterations == 0);
        }
    }

    /// The whole path — every chunk's exit, then the `hlt` — on a program
    /// small enough for any KVM, emulating or not, to finish in its budget.
    #[test]
    fn a_small_program_runs_to_its_hlt_wherever_kvm_opens() {
        let plan = Plan {
            chunk_iterations: 1_000,
            chunks: 3,
            budget: Duration::from_secs(3),
        };
        let verdict = functional_test(&plan);
        eprintln!("small program: {verdict:?}");
        match verdict {
            Verdict::Hardware { iterations, .. } => assert_eq!(iterations, 3_000),
            Verdict::Unusable(why) => assert!(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(DEV_KVM)
                    .is_err(),
                "/dev/kvm opens, yet: {why}"
            ),
            Verdict::Emulated { .. } => panic!("3 k iterations over 3 s: {verdict:?}"),
        }
    }
}
