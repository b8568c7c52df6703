//! For tests only: the one rule for a test whose prerequisite is missing —
//! skip it saying why, or, under `CI=true`, fail it: no test passes in CI
//! by skipping.
//!
//! Why a crate of its own: the tests that need something of the host (a
//! writable cgroup v2 group, bubblewrap, sshd, curl, root, two CPUs) are
//! unit tests in `exec-group`, `spawn`, `plugins/bwrap`, `plugins/bwrap/init`,
//! `egress` and `plugins/microvm/image`, and the black-box tests in
//! `tests/`. No crate all of them already depend on could hold it without
//! becoming a dependency of the others (`exec-group` and `spawn` depend on
//! `libc` alone), and a test-only module of one crate cannot be reached from
//! another. This crate has no dependencies and no test targets: one small
//! rlib, built only for tests (a dev-dependency everywhere), no test binary.

#![forbid(unsafe_code)]

use std::fmt::Display;

/// Whether the tests run in CI: `CI` set to anything but empty, `0`,
/// `false` or `no` (any case). `.ci/run` is run with `CI=true`, as most CI
/// services set it.
pub fn in_ci() -> bool {
    let v = ci().trim().to_ascii_lowercase();
    !matches!(v.as_str(), "" | "0" | "false" | "no")
}

fn ci() -> String {
    std::env::var("CI").unwrap_or_default()
}

/// A test cannot run (or cannot run part of itself) for want of `reason`.
/// Outside CI: prints `skipping <test>: <reason>` to stderr and returns, and
/// the caller returns (or leaves out the part). Under CI: panics with the
/// reason, so the test fails instead of passing unchecked.
///
/// `reason` says what is missing and what provides it: the package that
/// `.ci/install-deps` installs, or what the host must give (root, a cgroup2
/// mount, two CPUs).
#[track_caller]
pub fn skip_or_fail(reason: impl Display) {
    let test = test_name();
    if in_ci() {
        panic!(
            "{test}: {reason} — with CI={} a test may not skip: CI must provide this",
            ci()
        );
    }
    let at = std::panic::Location::caller();
    eprintln!("skipping {test}: {reason} ({at}; under CI=true this fails)");
}

/// The running test's name: libtest names each test's thread after it.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => "this test".to_owned(),
    }
}
