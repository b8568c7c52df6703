//! The command line. This is a contract later work builds on: keep it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use sandbox_plugin_api::SandboxMode;
use sandbox_registry::select::SandboxSwitch;

/// The sandbox runtime for AI-agent commands.
#[derive(Debug, Parser)]
#[command(name = "cc_server", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes. Flags beat environment variables, which beat
/// the config file.
#[derive(Debug, Clone, Args)]
pub struct Common {
    /// The config file (TOML).
    #[arg(long, global = true, env = "CC_SERVER_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where backend libraries are loaded from.
    #[arg(long, global = true, value_name = "DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// `on` wraps commands when the host offers a sandbox; `off` never does.
    #[arg(long, global = true, env = "CC_SERVER_SANDBOX", value_name = "on|off")]
    pub sandbox: Option<SandboxSwitch>,
}

// One value per process, parsed once: the size of `Run` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Lists every backend found, with its probe and the file it came from.
    Probe {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// Drop the results kept from earlier probes of this boot (the bwrap
        /// canary and guard self-test) and run every check now.
        #[arg(long)]
        fresh: bool,
    },
    /// Serves the HTTP API.
    Serve(ServeArgs),
    /// Runs one command in a fresh sandbox, then destroys it.
    Run(RunArgs),
    /// An interactive shell in a fresh sandbox, on this terminal (the same
    /// flags as `run`; a terminal made inside the sandbox), then destroys it.
    Shell(ShellArgs),
    /// Serves the agent tools over MCP on stdin and stdout (one sandbox,
    /// made from the same flags as `run`, destroyed when stdin closes).
    Mcp(McpArgs),
    /// The command policy, without running anything.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Workspaces: the checkouts a conversation clones (SPEC H1).
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Conversations: a copy-on-write clone of a workspace's checkouts
    /// each, and their agents (SPEC H1, H10).
    #[command(subcommand)]
    Conversation(ConversationCommand),
    /// Serves the Kubernetes agent-sandbox runtime contract (sandboxd):
    /// gRPC process.v1.ProcessService and the /v1/files REST routes, over
    /// one sandbox whose only bind and working directory is the root.
    Sandboxd(SandboxdArgs),
    /// Runs a coding agent's own CLI inside a sandbox, its tool gate wired
    /// to the command policy (SPEC B10, H13).
    #[command(subcommand)]
    Agent(AgentCommand),
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Claude Code in a sandbox, with `--dangerously-skip-permissions`:
    /// every Bash call goes through a `PreToolUse` hook to this run's
    /// policy over the sandbox's own channel, and is refused when the hook
    /// cannot get an answer. Takes `run`'s flags; the model's API
    /// (`ANTHROPIC_BASE_URL`) joins the egress allowlist.
    Claude(AgentClaudeArgs),
}

#[derive(Debug, Args)]
pub struct AgentClaudeArgs {
    #[command(flatten)]
    pub sandbox: SandboxFlags,
    /// Kill Claude Code after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Ask the person at this terminal about a Bash call the policy asks
    /// about (as `run --ask`); without it such a call is refused.
    #[arg(long)]
    pub ask: bool,
    /// Run as this conversation's `--agent` (as `run --conversation`).
    #[arg(long, value_name = "ID", requires = "agent", conflicts_with_all = ["spec", "binds", "workdir", "exec_grants"])]
    pub conversation: Option<String>,
    /// The agent of `--conversation` (added when it does not exist).
    #[arg(long, value_name = "NAME", requires = "conversation")]
    pub agent: Option<String>,
    /// The Claude Code executable (default: `claude` on PATH).
    #[arg(long, env = "CC_SERVER_CLAUDE", value_name = "PATH")]
    pub claude: Option<PathBuf>,
    /// Claude Code's own arguments (`-p 'fix the tests'`).
    #[arg(last = true, value_name = "ARGS")]
    pub claude_args: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Registers a workspace: its checkouts, never an agent's workdir.
    Add(WorkspaceAddArgs),
    /// Lists the workspaces.
    List {
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Removes a workspace that has no conversations (its checkouts stay).
    Remove {
        /// The workspace.
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct WorkspaceAddArgs {
    /// The workspace's name.
    pub name: String,
    /// A git checkout to register (`NAME=PATH`, or `PATH`: named after its
    /// directory). Repeatable.
    #[arg(long = "repo", value_name = "[NAME=]PATH")]
    pub repos: Vec<String>,
    /// A directory every agent of its conversations sees read-only.
    #[arg(long, value_name = "DIR")]
    pub attachments: Option<PathBuf>,
    /// Clone files matching this glob although the dispatch policy calls
    /// them secrets (`.env`, `config/*.pem`). Repeatable.
    #[arg(long = "include-secret", value_name = "GLOB")]
    pub include_secrets: Vec<String>,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConversationCommand {
    /// Makes a conversation: a reflink clone of every checkout of the
    /// workspace, and its agents.
    New {
        /// The workspace.
        #[arg(long, value_name = "NAME")]
        workspace: String,
        /// An agent to add. Repeatable (`run --agent` adds one too).
        #[arg(long = "agent", value_name = "NAME")]
        agents: Vec<String>,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Lists the conversations.
    List {
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Removes a conversation: refused while a sandbox uses it, or while
    /// it has commits not exported, unless --force.
    Remove {
        /// The conversation.
        id: String,
        /// Remove it even with commits not exported.
        #[arg(long)]
        force: bool,
    },
    /// Brings the conversation's HEAD back as a branch of the registered
    /// checkout; runs no hook, touches neither its working tree nor HEAD.
    Export {
        /// The conversation.
        id: String,
        /// The branch to write in the registered checkout.
        #[arg(long, value_name = "NAME")]
        branch: String,
        /// Which repository (needed when the workspace has several).
        #[arg(long, value_name = "NAME")]
        repo: Option<String>,
        /// Replace a branch that is not an ancestor (not a fast-forward).
        #[arg(long)]
        force: bool,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Classifies a bash command line and prints every command found, its
    /// class, the decision and the rule. Exit status: 0 allow, 3 prompt
    /// (ask the owner), 4 deny.
    Check(CheckArgs),
    /// A Claude Code `PreToolUse` command hook: reads the hook input on
    /// stdin, decides from this config (or asks `--server`), prints the
    /// hook output. Fails closed: any failure exits 2, Claude Code's
    /// blocking status, with the reason on stderr.
    Hook(HookArgs),
}

/// The hook formats `policy hook` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HookFormat {
    /// Claude Code's `PreToolUse` hook (stdin JSON, stdout JSON).
    ClaudeCode,
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// The hook protocol.
    #[arg(long, value_name = "FORMAT")]
    pub format: HookFormat,
    /// chat, review, plan or orchestrate.
    #[arg(long, value_name = "MODE", default_value = "chat")]
    pub mode: SandboxMode,
    /// Ask this cc_server (`http://127.0.0.1:PORT`) instead of deciding
    /// here; a server that cannot answer is a refusal.
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The server's bearer token file (default: the config's
    /// `token_file`, else the default path `serve` writes).
    #[arg(long, value_name = "FILE", requires = "server")]
    pub token_file: Option<PathBuf>,
    /// Seconds to wait for the server's answer.
    #[arg(long, value_name = "SECS", default_value_t = 20.0, requires = "server")]
    pub timeout: f64,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// chat, review, plan or orchestrate.
    #[arg(long, value_name = "MODE", default_value = "chat")]
    pub mode: SandboxMode,
    /// One JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// The command line, as one argument (`-- 'git push origin main'`);
    /// several are joined with spaces.
    #[arg(last = true, required = true, value_name = "LINE")]
    pub line: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, env = "CC_SERVER_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// The bearer token file; created with mode 0600 if absent.
    #[arg(long, env = "CC_SERVER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// The sandbox a command runs in: what `run` and `mcp` both take.
#[derive(Debug, Args)]
pub struct SandboxFlags {
    /// The backend to run in (`bwrap`, `microvm`, `none`, `native`, …);
    /// unset follows the server's default rules.
    #[arg(long, env = "CC_SERVER_BACKEND", value_name = "NAME")]
    pub backend: Option<String>,
    /// A SandboxSpec JSON file; the flags below apply on top of it.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// chat (writable binds), review, plan or orchestrate (read-only).
    #[arg(long, value_name = "MODE")]
    pub mode: Option<SandboxMode>,
    /// Whether the command may reach the network (through the egress
    /// proxies): `on` (the allowlist), `off`, or `open` (everything but the
    /// fixed deny list and non-public addresses; never the default).
    #[arg(long, value_name = "on|off|open")]
    pub network: Option<Network>,
    /// Allow this domain pattern on top of the baseline (`x.com`,
    /// `*.x.com`, `a.*.x.com`). Repeatable.
    #[arg(long = "allow-domain", value_name = "PATTERN")]
    pub allow_domains: Vec<String>,
    /// Let names matching this pattern (which must also be allowed) resolve
    /// to private or loopback addresses: internal mirrors. Repeatable.
    #[arg(long = "allow-private", value_name = "PATTERN")]
    pub allow_private: Vec<String>,
    /// Resolve HOST to ADDR in the proxy instead of DNS. Repeatable.
    #[arg(long = "resolve", value_name = "HOST:ADDR")]
    pub resolve: Vec<String>,
    /// Make a host path visible; `:ro` for read-only. Repeatable.
    #[arg(long = "bind", value_name = "PATH[:ro]")]
    pub binds: Vec<String>,
    /// Never writable inside the sandbox. Repeatable.
    #[arg(long = "protect", value_name = "PATH")]
    pub protect: Vec<PathBuf>,
    /// Let commands connect to this host unix socket below a bind (the
    /// spec's `unixSockets`); any other host socket in a bind is refused.
    /// Repeatable.
    #[arg(long = "allow-socket", value_name = "PATH")]
    pub allow_sockets: Vec<PathBuf>,
    /// Working directory of the command (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workdir: Option<PathBuf>,
    /// Let commands also execute files from this writable directory
    /// (SPEC F5). By default the working directory and the sandbox's
    /// private /tmp, /var/tmp and home are granted; elsewhere, what a
    /// command writes cannot be executed. Repeatable.
    #[arg(long = "exec-grant", value_name = "DIR")]
    pub exec_grants: Vec<PathBuf>,
    /// Grant nothing by default: nothing written inside can be executed,
    /// except under `--exec-grant` directories.
    #[arg(long)]
    pub no_exec_grant: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub sandbox: SandboxFlags,
    /// Kill the command after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Print every event as one JSON object per line on stdout.
    #[arg(long)]
    pub json: bool,
    /// Ask the person at this terminal about a command the policy asks
    /// about, on /dev/tty (never the command's stdin): `y` allows this one
    /// command; anything else, or no answer within `[policy]
    /// approval_timeout_secs`, denies. Without it, or with no terminal,
    /// such a command is refused. Whoever owns the terminal answers, so do
    /// not use it where an agent drives the terminal.
    #[arg(long)]
    pub ask: bool,
    /// Run in this conversation as `--agent` (SPEC H10): the server binds
    /// the agent's workdir, its config dir, the conversation's `repos/`
    /// and the workspace's attachments, and nothing else.
    #[arg(long, value_name = "ID", requires = "agent", conflicts_with_all = ["spec", "binds", "workdir", "exec_grants"])]
    pub conversation: Option<String>,
    /// The agent of `--conversation` (added when it does not exist).
    #[arg(long, value_name = "NAME", requires = "conversation")]
    pub agent: Option<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// Environment the front-end sets for the command on top of the
    /// inherited one (`agent claude`); never from the command line.
    #[arg(skip)]
    pub extra_env: Vec<(String, String)>,
    /// Variables the front-end removes from the inherited environment
    /// (`agent claude`: a key it brokers instead).
    #[arg(skip)]
    pub removed_env: Vec<String>,
    /// The API key this run's session may use through the server channel
    /// (`agent claude`); never from the command line.
    #[arg(skip)]
    pub brokered: Option<crate::key_broker::Brokered>,
}

#[derive(Debug, Args)]
pub struct ShellArgs {
    #[command(flatten)]
    pub sandbox: SandboxFlags,
    /// The shell and its arguments (default: `bash -i`, else `sh -i`).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub sandbox: SandboxFlags,
}

#[derive(Debug, Args)]
pub struct SandboxdArgs {
    #[command(flatten)]
    pub sandbox: SandboxFlags,
    /// The directory every path and cwd is confined to: the sandbox's
    /// bind (read-write in chat mode) and its working directory.
    #[arg(
        long,
        env = "SANDBOXD_ROOT_DIR",
        value_name = "DIR",
        default_value = "/workspace"
    )]
    pub root_dir: PathBuf,
    /// The gRPC ProcessService's address (loopback by default).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    pub grpc_listen: SocketAddr,
    /// The REST listener's address (loopback by default).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub rest_listen: SocketAddr,
    /// Where the sandbox's agent credential is written (mode 0600); every
    /// request must then carry it as `authorization: Bearer …`
    /// (`/v1/health` excepted). Required when a listener is not loopback.
    #[arg(long, value_name = "FILE")]
    pub credential_file: Option<PathBuf>,
    /// The largest file a PUT takes, in bytes (it is held in memory until
    /// written).
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20)]
    pub max_file_bytes: usize,
}

/// `--network`: `on`, `off` or `open`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Network {
    On,
    Off,
    Open,
}

impl Network {
    /// Sets the spec's network fields to this choice.
    pub fn apply(self, spec: &mut sandbox_plugin_api::SandboxSpec) {
        spec.network_enabled = self != Self::Off;
        spec.network_open = self == Self::Open;
    }
}
