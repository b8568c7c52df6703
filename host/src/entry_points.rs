//! Every way into `cc_server`, and whether it runs a command (SPEC B10).
//!
//! The seeds record that feeding only one dispatch seam once left the
//! others unwrapped. So the list is checked both ways: a unit test
//! (`entry_points_tests.rs`) fails when a CLI subcommand or an API route
//! exists that is not listed here, and the black-box test
//! (tests/integration/policy.rs, through the library) drives every
//! [`DISPATCHING`] entry and fails on one it has no driver for. Every
//! dispatching entry ends in `Session::exec`, the only caller of a
//! backend's `exec`.

/// Entry points that run a command in a sandbox.
pub const DISPATCHING: &[&str] = &[
    "cli run",
    "api POST /v1/sandboxes/{id}/execs",
    // The route's first name, an alias to the same handler: driven on its
    // own all the same, so an alias can never drift to another path.
    "api POST /v1/sandboxes/{id}/exec",
];

/// Entry points that run no command, with why.
pub const NOT_DISPATCHING: &[(&str, &str)] = &[
    ("cli probe", "lists backends"),
    (
        "cli serve",
        "serves the API: its routes are listed one by one",
    ),
    ("cli policy", "classifies a line; runs nothing"),
    ("api GET /healthz", "liveness"),
    ("api GET /v1/backends", "lists backends"),
    ("api GET /v1/sandboxes", "lists sandboxes"),
    (
        "api POST /v1/sandboxes",
        "launches a sandbox; no command runs in it",
    ),
    ("api GET /v1/sandboxes/{id}", "shows a sandbox"),
    ("api DELETE /v1/sandboxes/{id}", "destroys a sandbox"),
    (
        "api POST /v1/sandboxes/{id}/execs/{exec_id}/kill",
        "signals a running command",
    ),
    (
        "api POST /v1/sandboxes/{id}/execs/{exec_id}/resize",
        "resizes a running command's terminal",
    ),
    (
        "api POST /v1/sandboxes/{id}/execs/{exec_id}/stdin",
        "feeds the stdin of a command already admitted by its exec",
    ),
    ("api POST /v1/sandboxes/{id}/suspend", "freezes a sandbox"),
    ("api POST /v1/sandboxes/{id}/resume", "thaws a sandbox"),
    (
        "api POST /v1/policy/check",
        "classifies a line; runs nothing",
    ),
    ("api GET /v1/approvals", "an owner's connection"),
    ("api POST /v1/approvals/{id}", "an owner's answer"),
];
