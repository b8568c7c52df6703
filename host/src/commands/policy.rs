//! `cc_server policy check`: what the command policy would decide for a
//! command line run from the current directory, and why (SPEC H6, H7).
//! Nothing runs; the one thing read is the directory's `node_modules/.bin`
//! for `npx` (as `run` reads it).

use std::process::ExitCode;

use sandbox_policy::Decision;

use crate::cli::CheckArgs;
use crate::config::Settings;
use crate::wire;
use sandbox_runtime::command_policy::{CommandPolicy, OFF_NOTICE, workdir};

/// Exit statuses: a script can branch on the decision.
pub const EXIT_PROMPT: u8 = 3;
pub const EXIT_DENY: u8 = 4;

pub fn check(settings: &Settings, args: &CheckArgs) -> ExitCode {
    let policy = CommandPolicy::from_settings(&settings.policy);
    if !policy.enforce {
        eprintln!("cc_server: warning: {OFF_NOTICE} (the decision below is not enforced)");
    }
    let line = args.line.join(" ");
    // As `run` would see it here: the current directory is its bind.
    let workdir = match std::env::current_dir() {
        Ok(cwd) if workdir::matters_for(&line) => workdir::look(
            &workdir::HostDir {
                dir: cwd.clone(),
                root: cwd,
            },
            &line,
        ),
        _ => Default::default(),
    };
    let verdict = policy.check_in(&line, args.mode, &workdir);
    if args.json {
        let mut answer = wire::verdict_json(&verdict);
        answer["mode"] = args.mode.as_str().into();
        print!("{}", wire::line(&answer));
    } else {
        println!("decision: {}", verdict.decision);
        println!("rule: {}", verdict.rule);
        for reason in &verdict.reasons {
            println!("  {reason}");
        }
    }
    match verdict.decision {
        Decision::Allow => ExitCode::SUCCESS,
        Decision::Prompt => ExitCode::from(EXIT_PROMPT),
        Decision::Deny => ExitCode::from(EXIT_DENY),
    }
}
