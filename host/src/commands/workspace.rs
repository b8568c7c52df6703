//! `cc_server workspace add|list|remove`: the checkouts a conversation
//! clones (SPEC H1). The CLI opens the database itself, beside a running
//! server: SQLite's locks keep the two in turn.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_workspaces::NewWorkspace;

use crate::cli::WorkspaceCommand;
use crate::config::Settings;

pub fn run(settings: &Settings, command: WorkspaceCommand) -> anyhow::Result<ExitCode> {
    let layer = settings
        .workspaces(true)?
        .context("no state directory for workspaces: set `[workspaces] state_dir` or HOME")?;
    match command {
        WorkspaceCommand::Add(args) => {
            let repositories = args
                .repos
                .iter()
                .map(|text| match text.split_once('=') {
                    Some((name, path)) if !name.contains('/') => {
                        (Some(name.to_owned()), PathBuf::from(path))
                    }
                    _ => (None, PathBuf::from(text)),
                })
                .collect();
            let ws = layer.add_workspace(&NewWorkspace {
                name: args.name,
                repositories,
                attachments: args.attachments,
                include_secrets: args.include_secrets,
            })?;
            if args.json {
                println!("{}", serde_json::to_string(&ws)?);
            } else {
                println!("workspace {}:", ws.name);
                for repo in &ws.repositories {
                    println!("  {} {}", repo.name, repo.path.display());
                }
            }
        }
        WorkspaceCommand::List { json } => {
            let all = layer.store().workspaces()?;
            if json {
                println!("{}", serde_json::to_string(&all)?);
            } else {
                for ws in all {
                    let repos: Vec<String> = ws
                        .repositories
                        .iter()
                        .map(|r| format!("{}={}", r.name, r.path.display()))
                        .collect();
                    println!("{}\t{}", ws.name, repos.join(" "));
                }
            }
        }
        WorkspaceCommand::Remove { name } => {
            layer.remove_workspace(&name)?;
            println!("removed workspace {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
