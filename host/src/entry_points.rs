//! Every way into `cc_server`, and whether it runs a command (SPEC B10).
//!
//! The seeds record that feeding only one dispatch seam once left the
//! others unwrapped. So the list is checked both ways: a unit test
//! (`entry_points_tests.rs`) fails when a way in is registered anywhere in
//! the workspace and not listed here, or listed and gone — it asks clap for
//! the CLI and reads every other registration from the sources of every
//! crate but the backends, by the conventions `entry_points_scan.rs` sets
//! out; and the black-box test (tests/integration/policy.rs, through the
//! library) drives every [`DISPATCHING`] entry and fails on one it has no
//! driver for. Every dispatching entry ends in `Session::exec`, the only
//! caller of a backend's `exec`.
//!
//! An entry is written as the scan reports it:
//!
//! - `cli run`, `cli policy check` — a subcommand, nested ones by their path;
//! - `api POST /v1/sandboxes/{id}/execs` — an HTTP route, full path;
//! - `ws GET /v1/…` — a route that upgrades to a WebSocket;
//! - `mcp tool exec` — an MCP tool, by the name it is called by;
//! - `rpc sandboxd.v1.Sandboxes/Exec` — an RPC method of a `.proto` service.
//!
//! Each is in exactly one of the three lists.

/// Entry points that run a command in a sandbox.
pub const DISPATCHING: &[&str] = &[
    "cli run",
    // Claude Code itself starts as `run` does; its Bash calls pass the
    // same admission through its hook over the server channel.
    "cli agent claude",
    "api POST /v1/sandboxes/{id}/execs",
    // The route's first name, an alias to the same handler: driven on its
    // own all the same, so an alias can never drift to another path.
    "api POST /v1/sandboxes/{id}/exec",
    // The MCP tool, over stdio (`cli mcp`) and HTTP (`/mcp`) alike.
    "mcp tool exec",
    // The agent-sandbox runtime contract (`cli sandboxd`): both start a
    // command through `Session::exec`.
    "rpc process.v1.ProcessService/Execute",
    "rpc process.v1.ProcessService/Start",
];

/// Entry points that start a shell for a person (a terminal over a
/// WebSocket, `cc_server shell`), with what each starts. Not a command the
/// black-box drivers can send once and look at: what the person types goes
/// through the shell, so each needs a test of its own proving that the
/// shell itself runs in the sandbox under `Session::exec` (the policy on
/// its start, the sanitized environment), named in
/// tests/integration/policy.rs. An entry here is never also in
/// [`DISPATCHING`] or [`NOT_DISPATCHING`].
pub const INTERACTIVE: &[(&str, &str)] = &[
    (
        "api POST /v1/terminals",
        "a shell on a terminal in a session of its own (a host shell on `none`, the default)",
    ),
    (
        "ws GET /v1/terminals/{id}/ws",
        "what a client types into a terminal's shell",
    ),
    (
        "cli shell",
        "a shell in a sandbox on the user's own terminal",
    ),
];

/// Entry points that run no command, with why.
pub const NOT_DISPATCHING: &[(&str, &str)] = &[
    ("api GET /", "the web console's page, an embedded file"),
    (
        "api GET /console/{file}",
        "the web console's script, style and xterm.js, embedded files",
    ),
    (
        "api POST /v1/console/session",
        "signs the web console in: a cookie session for the owner",
    ),
    (
        "api DELETE /v1/console/session",
        "signs the web console out",
    ),
    ("api GET /v1/events", "follows every sandbox's events"),
    (
        "cli sandboxd",
        "serves the agent-sandbox contract: its RPCs and routes are listed one by one",
    ),
    (
        "rpc process.v1.ProcessService/WriteStdin",
        "feeds the stdin of a command already admitted by its Start",
    ),
    (
        "rpc process.v1.ProcessService/SendSignal",
        "signals a command already admitted by its Start",
    ),
    (
        "rpc process.v1.ProcessService/ResizeTTY",
        "resizes the terminal of a command already admitted by its Start",
    ),
    ("api GET /v1/health", "sandboxd's readiness"),
    (
        "api GET /v1/metadata",
        "sandboxd's metadata: SANDBOX_* variables and the boundary that holds",
    ),
    (
        "api GET /v1/files/{*path}",
        "sandboxd: a path-jailed read or listing",
    ),
    ("api HEAD /v1/files/{*path}", "sandboxd: a path-jailed stat"),
    (
        "api PUT /v1/files/{*path}",
        "sandboxd: a path-jailed write under the file tools' guardrails",
    ),
    (
        "api DELETE /v1/files/{*path}",
        "sandboxd: a path-jailed removal under the file tools' guardrails",
    ),
    ("cli probe", "lists backends"),
    (
        "cli serve",
        "serves the API: its routes are listed one by one",
    ),
    ("cli policy check", "classifies a line; runs nothing"),
    (
        "cli policy hook",
        "judges a Claude Code hook input; runs nothing",
    ),
    (
        "cli mcp",
        "the MCP transport over stdio: its tools are listed one by one (`mcp tool …`)",
    ),
    (
        "api POST /mcp",
        "the MCP transport over HTTP: its tools are listed one by one (`mcp tool …`)",
    ),
    (
        "api GET /mcp",
        "MCP's stream for server messages; runs no tool",
    ),
    (
        "api DELETE /mcp",
        "ends an MCP session of an older protocol; runs nothing",
    ),
    ("mcp tool read", "a path-jailed file tool: reads a file"),
    ("mcp tool write", "a path-jailed file tool: writes a file"),
    ("mcp tool edit", "a path-jailed file tool: edits a file"),
    (
        "mcp tool apply_patch",
        "a path-jailed file tool: changes several files at once",
    ),
    (
        "mcp tool search",
        "a path-jailed file tool: searches contents",
    ),
    (
        "mcp tool search_files",
        "a path-jailed file tool: lists files whose contents match",
    ),
    ("mcp tool find", "a path-jailed file tool: finds names"),
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
    ("api GET /v1/terminals", "lists terminals"),
    ("api GET /v1/openapi.json", "the API's description"),
    (
        "api DELETE /v1/terminals/{id}",
        "ends a terminal and its session",
    ),
    (
        "api POST /v1/terminals/{id}/tickets",
        "a single-use ticket to attach to a terminal",
    ),
    ("cli workspace add", "registers checkouts; runs nothing"),
    ("cli workspace list", "lists workspaces"),
    ("cli workspace remove", "forgets a workspace"),
    (
        "cli conversation new",
        "clones checkouts by reflink; runs nothing",
    ),
    ("cli conversation list", "lists conversations"),
    ("cli conversation remove", "removes a conversation's clones"),
    (
        "cli conversation export",
        "the server's own git (hooks, config and alternates of the clone never read) fetches a snapshot; nothing of the agent runs",
    ),
    ("api GET /v1/workspaces", "lists workspaces"),
    ("api POST /v1/workspaces", "registers checkouts"),
    ("api GET /v1/workspaces/{name}", "shows a workspace"),
    ("api DELETE /v1/workspaces/{name}", "forgets a workspace"),
    ("api GET /v1/conversations", "lists conversations"),
    (
        "api POST /v1/conversations",
        "clones checkouts by reflink; runs nothing",
    ),
    ("api GET /v1/conversations/{id}", "shows a conversation"),
    (
        "api DELETE /v1/conversations/{id}",
        "removes a conversation's clones",
    ),
    ("api GET /v1/conversations/{id}/agents", "lists agents"),
    (
        "api POST /v1/conversations/{id}/agents",
        "makes an agent's directories",
    ),
    (
        "api GET /v1/conversations/{id}/agents/{agent}",
        "shows an agent",
    ),
    (
        "api DELETE /v1/conversations/{id}/agents/{agent}",
        "removes an agent's directories",
    ),
];
