//! `cc_server probe`: what backends exist here, what they enforce, where
//! they came from, and what the server would choose.

use std::fmt::Write as _;
use std::process::ExitCode;

use sandbox_registry::Registry;
use serde_json::{Value, json};

use sandbox_runtime::Sessions;
use sandbox_runtime::start::{discover, launch_settings, startup};

use crate::config::Settings;
use crate::wire::{Default, backends_json, default_json, problems_json};

pub async fn run(settings: &Settings, as_json: bool, fresh: bool) -> anyhow::Result<ExitCode> {
    let options = settings.start_options();
    let for_discovery = options.clone();
    let registry = tokio::task::spawn_blocking(move || discover(&for_discovery, fresh)).await?;
    let launch = launch_settings(&options, &registry);
    let sessions = Sessions::new(std::sync::Arc::new(registry), launch);
    let registry = sessions.registry();
    let startup = startup(settings.switch, registry);
    let default = sessions.select(None);
    if as_json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report_json(registry, &startup, &default))?
        );
    } else {
        print!("{}", report_table(registry, &startup, &default));
    }
    Ok(ExitCode::SUCCESS)
}

fn report_json(registry: &Registry, startup: &str, default: &Default) -> Value {
    json!({
        "searchPath": registry.search_path,
        "backends": backends_json(registry),
        "problems": problems_json(registry),
        "startupLine": startup,
        "default": default_json(default),
    })
}

fn report_table(registry: &Registry, startup: &str, default: &Default) -> String {
    let mut out = String::new();
    let dirs: Vec<String> = registry
        .search_path
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let _ = writeln!(
        out,
        "plugins searched in: {}",
        if dirs.is_empty() {
            "(nowhere)".into()
        } else {
            dirs.join(", ")
        }
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<12} {:<10} {:<8} {:<8} SOURCE",
        "BACKEND", "AVAILABLE", "KIND", "KERNEL"
    );
    for entry in &registry.entries {
        let r = &entry.report;
        let _ = writeln!(
            out,
            "{:<12} {:<10} {:<8} {:<8} {}",
            entry.name(),
            if r.available { "yes" } else { "no" },
            r.kind.as_str(),
            if r.kernel_boundary { "yes" } else { "no" },
            entry.source
        );
        if !r.note.is_empty() {
            let _ = writeln!(out, "{:<12} note: {}", "", r.note);
        }
        if !r.hint.is_empty() {
            let _ = writeln!(out, "{:<12} hint: {}", "", r.hint);
        }
        if !r.capabilities.is_empty() {
            let _ = writeln!(
                out,
                "{:<12} capabilities: {}",
                "",
                r.capabilities.join(", ")
            );
        }
        if !r.kept.is_empty() {
            let _ = writeln!(out, "{:<12} kept: {}", "", r.kept);
        }
    }
    if !registry.problems.is_empty() {
        let _ = writeln!(out);
        for problem in &registry.problems {
            let _ = writeln!(out, "skipped: {problem}");
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{startup}");
    match default {
        Ok(sel) => {
            let _ = writeln!(out, "sessions that name no backend run in: {sel}");
        }
        Err(e) => {
            let _ = writeln!(out, "sessions that name no backend fail: {e}");
        }
    }
    out
}
