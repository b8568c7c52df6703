//! The git the server runs itself (SPEC H1, G5). It never trusts what an
//! agent could have written: it is never pointed at a clone at all — an
//! export reads a snapshot of the clone's objects and refs the server made
//! through the jail, with a config the server wrote — and every run ignores
//! the system and global config, hooks (`core.hooksPath=/dev/null`),
//! fsmonitor, automatic gc and maintenance, and submodule recursion, with a
//! fresh empty `HOME` and no terminal prompt.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::error::WorkspaceError;

/// A git command with the server's hardening; `dirs` are marked safe (a
/// registered checkout another user owns, the server's own snapshot).
pub fn command(home: &Path, dirs: &[&Path]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    cmd.env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    for (key, value) in HARDENING {
        cmd.arg("-c").arg(format!("{key}={value}"));
    }
    for dir in dirs {
        cmd.arg("-c")
            .arg(format!("safe.directory={}", dir.display()));
    }
    cmd
}

/// What every server-run git is told on its command line.
pub const HARDENING: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("submodule.recurse", "false"),
    ("protocol.file.allow", "always"),
    ("transfer.fsckObjects", "true"),
    ("credential.helper", ""),
];

/// Runs it to its end; a failure is an error with git's stderr.
pub fn run(mut cmd: Command, what: &str) -> Result<Output, WorkspaceError> {
    let output = cmd.output().map_err(|source| WorkspaceError::Io {
        what: format!("{what}: running git"),
        source,
    })?;
    if !output.status.success() {
        let said = [&output.stderr, &output.stdout]
            .iter()
            .map(|b| String::from_utf8_lossy(b).trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(WorkspaceError::Refused(format!(
            "{what}: git ended with {} and said: {said}",
            output.status
        )));
    }
    Ok(output)
}
