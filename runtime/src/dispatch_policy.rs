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

use sandbox_paths::write_deny::DEFAULT_GLOBS as DEFAULT_WRITE_DENY_GLOBS;
use sandbox_plugin_api::{ProbeReport, SandboxBackend, SandboxSpec, capability};

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

    /// Adds the policy's globs to a spec's own (a spec may add, never remove).
    pub fn apply(&self, spec: &mut SandboxSpec) {
        for glob in &self.write_deny_globs {
            if !spec.write_deny_globs.contains(glob) {
                spec.write_deny_globs.push(glob.clone());
            }
        }
    }

    /// Why a backend may not run a spec, if it may not.
    pub fn refusal(backend: &str, report: &ProbeReport, spec: &SandboxSpec) -> Option<String> {
        if spec.write_deny_globs.is_empty()
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
            spec.write_deny_globs.join(", "),
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

    fn spec_under(policy: &DispatchPolicy) -> SandboxSpec {
        let mut spec = SandboxSpec::default();
        policy.apply(&mut spec);
        spec
    }

    #[test]
    fn a_backend_without_the_create_guard_is_refused() {
        let spec = spec_under(&DispatchPolicy::default());
        let native = report(SandboxBackend::Native, &["stdin"]);
        let refusal = DispatchPolicy::refusal("bwrap", &native, &spec).unwrap();
        assert!(
            refusal.contains("**/.env") && refusal.contains("fs.deny-glob-on-create"),
            "{refusal}"
        );
        assert!(
            refusal.contains("--backend none") && refusal.contains("write_deny_globs = []"),
            "{refusal}"
        );
        let vm = report(SandboxBackend::Microvm, &[]);
        assert!(DispatchPolicy::refusal("microvm", &vm, &spec).is_some());
    }

    #[test]
    fn the_guard_the_none_backend_and_an_empty_policy_pass() {
        let spec = spec_under(&DispatchPolicy::default());
        let guarded = report(
            SandboxBackend::Native,
            &[capability::FS_DENY_GLOB_ON_CREATE],
        );
        assert_eq!(DispatchPolicy::refusal("bwrap", &guarded, &spec), None);
        let none = report(SandboxBackend::None, &[]);
        assert_eq!(DispatchPolicy::refusal("none", &none, &spec), None);
        let lowered = DispatchPolicy {
            write_deny_globs: vec![],
            set_by: Some("/etc/cc.toml".into()),
        };
        let native = report(SandboxBackend::Native, &[]);
        assert_eq!(
            DispatchPolicy::refusal("bwrap", &native, &spec_under(&lowered)),
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

#[cfg(test)]
mod apply_tests {
    use super::*;

    #[test]
    fn a_spec_may_add_globs_but_not_remove_the_policys() {
        let mut spec = SandboxSpec {
            write_deny_globs: vec!["**/*.p12".into(), "**/.env".into()],
            ..SandboxSpec::default()
        };
        DispatchPolicy::default().apply(&mut spec);
        assert!(spec.write_deny_globs.contains(&"**/*.p12".to_owned()));
        for glob in DEFAULT_WRITE_DENY_GLOBS {
            assert_eq!(
                spec.write_deny_globs.iter().filter(|g| g == glob).count(),
                1,
                "{glob}"
            );
        }
    }
}
