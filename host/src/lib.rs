//! `cc_server`: runs AI-agent commands in sandboxes loaded as plugins.
//!
//! The crate is a library so its tests and the black-box suite can use what
//! it defines (the list of entry points) instead of including its source by
//! path; `main.rs` is only the entry: parse the arguments, call [`run`]. The
//! public surface is what those two need — everything else stays inside.

mod api;
mod claude_hook;
pub mod cli;
mod commands;
mod config;
pub mod descriptors;
pub mod entry_points;
#[cfg(test)]
mod entry_points_scan;
#[cfg(test)]
mod entry_points_tests;
mod forge_ledger;
mod gateway_links;
pub mod heap;
mod hook_channel;
pub mod key_broker;
mod logging;
mod mcp_channel;
mod open_files;
mod wire;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::config::{CommandFlags, Settings};

/// The exit status when `cc_server` itself fails (as `env` and `docker` use it).
pub const EXIT_FAILURE: u8 = 125;

/// Runs one invocation of the CLI, already parsed, to its exit status.
/// The caller has marked inherited descriptors close-on-exec first
/// ([`descriptors::close_inherited_on_exec`]).
pub fn run(cli: Cli) -> ExitCode {
    logging::init(matches!(cli.command, Command::Serve(_)));
    // A hook fails closed: even a config it cannot load ends in the
    // blocking status, so it settles everything itself.
    if let Command::Policy(cli::PolicyCommand::Hook(args)) = &cli.command {
        return commands::hook::run(&cli.common, args);
    }
    // `agent claude` is a `run` of Claude Code, planned from here on.
    let cli = match cli.command {
        Command::Agent(cli::AgentCommand::Claude(args)) => {
            let base_url = std::env::var("ANTHROPIC_BASE_URL").ok();
            let path = std::env::var("PATH").ok();
            // The key to broker: the config's, else the invoker's (read
            // here, on the host side only).
            let claude = match Settings::resolve(&cli.common, &CommandFlags::default()) {
                Ok(settings) => settings.claude,
                Err(e) => return fail(&anyhow::Error::new(e)),
            };
            let brokered = claude.brokered(
                std::env::var("ANTHROPIC_API_KEY").ok(),
                std::env::var("ANTHROPIC_AUTH_TOKEN").ok(),
                base_url.as_deref(),
            );
            if brokered.is_none() {
                eprintln!(
                    "cc_server: no Anthropic API key to broker ({}, ANTHROPIC_API_KEY or \
                     ANTHROPIC_AUTH_TOKEN): Claude Code reaches its API through the egress \
                     allowlist with its own login",
                    key_broker::KEY_FILE
                );
            }
            let planned =
                commands::agent::plan_claude(args, base_url.as_deref(), path.as_deref(), brokered)
                    .and_then(|run| {
                        commands::agent::require_version(std::path::Path::new(&run.command[0]))?;
                        Ok(run)
                    });
            match planned {
                Ok(run) => Cli {
                    common: cli.common,
                    command: Command::Run(run),
                },
                Err(e) => return fail(&e),
            }
        }
        command => Cli {
            common: cli.common,
            command,
        },
    };
    let settings = match Settings::resolve(&cli.common, &CommandFlags::of(&cli.command)) {
        Ok(settings) => settings,
        Err(e) => return fail(&anyhow::Error::new(e)),
    };
    if !matches!(
        cli.command,
        Command::Policy(_) | Command::Workspace(_) | Command::Conversation(_)
    ) {
        settings.log_notices();
    }
    if matches!(cli.command, Command::Serve(_)) {
        // Before the runtime's threads: see `open_files::prepare`.
        open_files::prepare();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&anyhow::Error::new(e).context("starting the async runtime")),
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Probe { json, fresh } => commands::probe::run(&settings, json, fresh).await,
            Command::Serve(_) => commands::serve::run(&settings).await,
            Command::Run(args) => commands::run::run(&settings, args).await,
            Command::Shell(args) => commands::shell::run(&settings, args).await,
            Command::Mcp(args) => commands::mcp::run(&settings, args).await,
            Command::Policy(cli::PolicyCommand::Check(args)) => {
                Ok(commands::policy::check(&settings, &args))
            }
            // Settled before the config is read (above).
            Command::Agent(_) => Ok(ExitCode::from(EXIT_FAILURE)),
            Command::Policy(cli::PolicyCommand::Hook(_)) => {
                Ok(ExitCode::from(claude_hook::EXIT_BLOCK))
            }
            Command::Workspace(command) => commands::workspace::run(&settings, command),
            Command::Conversation(command) => commands::conversation::run(&settings, command).await,
            Command::Sandboxd(args) => commands::sandboxd::run(&settings, args).await,
        }
    });
    // Plugin threads (a hung probe, say) must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

/// Prints the error chain on one line and exits with [`EXIT_FAILURE`].
fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("cc_server: error: {error:#}");
    ExitCode::from(EXIT_FAILURE)
}
