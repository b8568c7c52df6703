//! The file tools (SPEC H2): `read`, `write`, `edit`, `apply_patch`,
//! `search`, `find` and `search_files`, acting in the server process on
//! the sandbox's files. No sandbox holds them, so every file operation goes
//! through the jail of `sandbox-paths` — opened once per sandbox over its
//! roots, judged by the sandbox's own create-time globs, protected paths
//! and secrets — and none checks a path itself: [`roots`] only finds the
//! root a guest path is named beneath; the kernel resolves the rest.

pub mod edit;
pub mod patch;
pub mod read;
pub mod roots;
pub mod search;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_paths::jail::{Jail, JailError, JailPath};
use sandbox_runtime::Session;

use self::roots::{Located, Roots};
use crate::RootsOf;
use crate::failure::ToolError;

/// One sandbox's jail and roots, made at the first file tool call and
/// kept with the session (its start-up scan is the sandbox's: files
/// protected then are known by identity).
pub struct SessionFiles {
    pub jail: Jail,
    pub roots: Roots,
    /// Each root's host directory as the kernel reports it, by index.
    canonical: Vec<PathBuf>,
}

impl SessionFiles {
    /// The session's, made once (blocking: the jail's start-up scan walks
    /// the writable roots).
    pub fn of(session: &Session, roots_of: &RootsOf) -> Result<Arc<Self>, ToolError> {
        session.front_end_state(|| {
            let roots = roots_of(session);
            if roots.roots().is_empty() {
                return Err(ToolError::failed(
                    "the sandbox binds no directory, so the file tools have nothing to act on",
                ));
            }
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let config = roots.jail_config(session.launched_spec(), home);
            let jail = Jail::new(config).map_err(|e| {
                ToolError::failed(format!(
                    "the file tools cannot open the sandbox's roots: {e}"
                ))
            })?;
            let canonical = (0..roots.roots().len())
                .map(|i| {
                    jail.root_path(&Roots::label(i))
                        .map(Path::to_path_buf)
                        .unwrap_or_default()
                })
                .collect();
            Ok(Self {
                jail,
                roots,
                canonical,
            })
        })
    }

    /// Where a path the agent gave lies, or the refusal naming the rule.
    pub fn locate(&self, input: &str) -> Result<(Located, JailPath), ToolError> {
        let located = self
            .roots
            .locate(input)
            .map_err(|u| ToolError::refused(format!("{input}: {}", u.why), u.rule).at(input))?;
        let path = Roots::jail_path(&located);
        Ok((located, path))
    }

    /// The guest path of a canonical host path the jail reported.
    pub fn guest_of(&self, host: &Path) -> String {
        let best = self
            .canonical
            .iter()
            .enumerate()
            .filter(|(_, root)| !root.as_os_str().is_empty() && host.starts_with(root))
            .map(|(i, root)| (root.components().count(), i, root.as_path()))
            .max_by_key(|(depth, _, _)| *depth);
        match best.and_then(|(_, i, root)| self.roots.guest_of(i, root, host)) {
            Some(guest) => guest.display().to_string(),
            None => host.display().to_string(),
        }
    }
}

/// A jail error as the agent reads it: the guest path it gave, the rule.
pub fn jail_failure(guest: &str, error: &JailError) -> ToolError {
    match error {
        JailError::Refused(denial) => {
            let mut message = format!(
                "{} {guest}: refused by the rule `{}`: {}",
                denial.op, denial.rule, denial.why
            );
            if let Some(remedy) = &denial.remedy {
                message.push_str("; ");
                message.push_str(remedy);
            }
            ToolError::refused(message, denial.rule.clone()).at(guest)
        }
        JailError::Io { op, source, .. } => {
            ToolError::failed(format!("{op} {guest}: {source}")).at(guest)
        }
        other => ToolError::failed(format!("{guest}: {other}")).at(guest),
    }
}

/// Runs blocking file work off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::failed(format!("internal error: the file tool failed: {e}")))?
}
