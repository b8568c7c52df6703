//! The dispatch policy: the filename-glob write denies every sandboxed
//! command runs under (SPEC C3, G1).
//!
//! A backend that cannot forbid *creating* a matching name — bubblewrap can
//! keep existing files read-only but cannot stop a new `.env` appearing in a
//! writable bind — does not list `fs.deny-glob-on-create`, and a launch in
//! it is refused: never a silently weaker policy. The only way to lower the
//! policy is the config file, and a lowered policy is logged at every start.
//! The `none` backend promises nothing and is badged so; it is not refused.

use std::path::PathBuf;

use sandbox_plugin_api::{ProbeReport, SandboxBackend, capability};

/// The default write-deny globs (DESIGN §5), matched against paths relative
/// to each writable root and to `$HOME`: secrets a command must not create,
/// and files that would run code outside the sandbox later (shell rc files,
/// git hooks and config, agent config).
pub const DEFAULT_WRITE_DENY_GLOBS: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    "**/.git/hooks/**",
    "**/.git/config",
    ".claude/**",
    ".mcp.json",
];

/// The policy in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchPolicy {
    pub write_deny_globs: Vec<String>,
    /// The config file that set the globs, when one did.
    pub set_by: Option<PathBuf>,
}

impl Default for DispatchPolicy {
    fn default() -> Self {
        Self {
            write_deny_globs: DEFAULT_WRITE_DENY_GLOBS
                .iter()
                .map(|g| (*g).to_owned())
                .collect(),
            set_by: None,
        }
    }
}

impl DispatchPolicy {
    /// The line logged at start when the config lowered the policy.
    pub fn lowered_notice(&self) -> Option<String> {
        let file = self.set_by.as_ref()?;
        let missing: Vec<&str> = DEFAULT_WRITE_DENY_GLOBS
            .iter()
            .copied()
            .filter(|g| !self.write_deny_globs.iter().any(|w| w == g))
            .collect();
        if missing.is_empty() {
            return None;
        }
        Some(format!(
            "dispatch policy lowered by {}: creating files matching {} is NOT blocked in sandboxes",
            file.display(),
            missing.join(", ")
        ))
    }

    /// Why a backend may not run under this policy, if it may not.
    pub fn refusal(&self, backend: &str, report: &ProbeReport) -> Option<String> {
        if self.write_deny_globs.is_empty()
            || report.kind == SandboxBackend::None
            || report.has(capability::FS_DENY_GLOB_ON_CREATE)
        {
            return None;
        }
        Some(format!(
            "backend `{backend}` cannot enforce the dispatch policy's filename-glob write denies ({}): it can keep \
             existing files read-only but cannot stop new ones being created (it does not list `{}`). Refusing to \
             run with a weaker policy (SPEC C3). To run anyway, either choose `--backend none` (no sandbox at all), \
             or set `write_deny_globs = []` under [dispatch_policy] in the config file (logged at every start)",
            self.write_deny_globs.join(", "),
            capability::FS_DENY_GLOB_ON_CREATE
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(kind: SandboxBackend, caps: &[&str]) -> ProbeReport {
        ProbeReport {
            available: true,
            kind,
            capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
            ..ProbeReport::default()
        }
    }

    #[test]
    fn a_backend_without_the_create_guard_is_refused() {
        let policy = DispatchPolicy::default();
        let refusal = policy
            .refusal("bwrap", &report(SandboxBackend::Native, &["stdin"]))
            .unwrap();
        assert!(
            refusal.contains("**/.env") && refusal.contains("fs.deny-glob-on-create"),
            "{refusal}"
        );
        assert!(
            refusal.contains("--backend none") && refusal.contains("write_deny_globs = []"),
            "{refusal}"
        );
        assert!(
            policy
                .refusal("microvm", &report(SandboxBackend::Microvm, &[]))
                .is_some()
        );
    }

    #[test]
    fn the_guard_the_none_backend_and_an_empty_policy_pass() {
        let policy = DispatchPolicy::default();
        let guarded = report(
            SandboxBackend::Native,
            &[capability::FS_DENY_GLOB_ON_CREATE],
        );
        assert_eq!(policy.refusal("bwrap", &guarded), None);
        assert_eq!(
            policy.refusal("none", &report(SandboxBackend::None, &[])),
            None
        );
        let lowered = DispatchPolicy {
            write_deny_globs: vec![],
            set_by: Some("/etc/cc.toml".into()),
        };
        assert_eq!(
            lowered.refusal("bwrap", &report(SandboxBackend::Native, &[])),
            None
        );
        let notice = lowered.lowered_notice().unwrap();
        assert!(
            notice.contains("/etc/cc.toml") && notice.contains("**/*.pem"),
            "{notice}"
        );
        assert_eq!(DispatchPolicy::default().lowered_notice(), None);
    }
}
