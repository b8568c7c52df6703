//! `cc_server conversation new|list|remove|export` (SPEC H1, H10).
//! Provisioning shows a bar on stderr when it is a terminal.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use anyhow::Context as _;
use sandbox_workspaces::provision::Progress;

use crate::cli::ConversationCommand;
use crate::config::Settings;

pub async fn run(settings: &Settings, command: ConversationCommand) -> anyhow::Result<ExitCode> {
    let layer = settings
        .workspaces(true)?
        .context("no state directory for workspaces: set `[workspaces] state_dir` or HOME")?;
    // Provisioning and git are blocking work.
    tokio::task::spawn_blocking(move || blocking(&layer, command)).await?
}

fn blocking(
    layer: &sandbox_workspaces::Workspaces,
    command: ConversationCommand,
) -> anyhow::Result<ExitCode> {
    match command {
        ConversationCommand::New {
            workspace,
            agents,
            json,
        } => {
            let bar = std::io::stderr().is_terminal() && !json;
            let conversation = layer.new_conversation(&workspace, &agents, &mut |p| {
                if bar {
                    draw(p);
                }
            })?;
            if bar {
                eprintln!();
            }
            if json {
                println!("{}", serde_json::to_string(&conversation)?);
            } else {
                println!("{}", conversation.id);
                for repo in &conversation.repositories {
                    for skipped in &repo.skipped {
                        eprintln!("cc_server: {}: left out {skipped}", repo.name);
                    }
                }
            }
        }
        ConversationCommand::List { json } => {
            let all = layer.store().conversations()?;
            if json {
                println!("{}", serde_json::to_string(&all)?);
            } else {
                for c in all {
                    println!(
                        "{}\t{}\t{}\tagents: {}",
                        c.id,
                        c.workspace,
                        c.state,
                        c.agents.join(",")
                    );
                }
            }
        }
        ConversationCommand::Remove { id, force } => {
            layer.remove_conversation(&id, force)?;
            println!("removed conversation {id}");
        }
        ConversationCommand::Export {
            id,
            branch,
            repo,
            force,
            json,
        } => {
            let done =
                sandbox_workspaces::export::export(layer, &id, repo.as_deref(), &branch, force)?;
            if json {
                println!("{}", serde_json::to_string(&done)?);
            } else {
                println!(
                    "exported {} of {id} as {} ({}) in {}",
                    done.repository,
                    done.branch,
                    done.commit,
                    done.checkout.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the bar, redrawn in place.
fn draw(p: &Progress) {
    let width = 30u64;
    let filled = (p.files_done * width)
        .checked_div(p.files_total)
        .unwrap_or(width)
        .min(width);
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\rcloning {} [{}{}] {}/{} files, {} MiB shared",
        p.repository,
        "#".repeat(filled as usize),
        " ".repeat((width - filled) as usize),
        p.files_done,
        p.files_total,
        p.bytes_done >> 20
    );
    let _ = err.flush();
}
