//! The launch as a plan: every decision a new session needs — which backend,
//! the spec it gets, the network rule, the refusals, the egress policy — made
//! before anything is started, by one pure function. [`super::Sessions::create`]
//! only carries the plan out.

use std::sync::Arc;

use sandbox_egress::Policy as EgressPolicy;
use sandbox_paths::write_deny::check_globs;
use sandbox_plugin_api::{SandboxBackend, SandboxSpec, capability};
use sandbox_registry::select::{Offer, Platform, Request, SandboxSwitch, Selection, select};

use super::SessionError;
use super::binds::check_binds;
use super::budget::OutputBudget;
use crate::command_policy::CommandPolicy;
use crate::dispatch_policy::DispatchPolicy;
use crate::egress::EgressSettings;
use sandbox_paths::binds::{PathFacts, ServerPaths};

/// What the server decides launches with: the selection rules' inputs, the
/// dispatch and command policies, and the egress settings.
#[derive(Debug, Clone)]
pub struct LaunchSettings {
    pub switch: SandboxSwitch,
    pub default_backend: Option<String>,
    pub platform: Platform,
    pub dispatch: DispatchPolicy,
    /// Command classification, guardrails and owner approvals.
    pub commands: Arc<CommandPolicy>,
    /// What sessions' egress proxies allow beyond their specs.
    pub egress: EgressSettings,
    /// The server's own paths and the bind roots, for the bind rules.
    pub paths: ServerPaths,
    /// What every session's exec streams may hold together
    /// (`[output] budget_mib`).
    pub output_budget: Arc<OutputBudget>,
    /// Every sandbox's events in one stream, for watchers of the server.
    pub feed: Arc<crate::feed::Feed>,
    /// Called on a blocking thread after each sandbox is destroyed.
    pub after_destroy: Option<fn()>,
    /// The workspaces layer: conversations' binds and the registered
    /// checkouts (SPEC H1, H10, H11); `None` where the server keeps none.
    pub workspaces: Option<crate::layout::Layer>,
}

impl LaunchSettings {
    /// The backend a session would get (SPEC B5–B9).
    pub fn select(
        &self,
        explicit: Option<&str>,
        offers: &[Offer<'_>],
    ) -> Result<Selection, sandbox_registry::select::SelectError> {
        let request = Request {
            switch: self.switch,
            explicit,
            configured_default: self.default_backend.as_deref(),
        };
        select(request, self.platform, offers)
    }
}

/// How a session reaches its egress proxies (SPEC E1).
#[derive(Debug)]
pub enum EgressPlan {
    /// Unix sockets bound into the sandbox (`net.proxy-only`).
    Unix(EgressPolicy),
    /// Credentialed loopback ports in the commands' proxy variables (`none`).
    Tcp(EgressPolicy),
}

/// Everything decided for one launch.
#[derive(Debug)]
pub struct LaunchPlan {
    pub selection: Selection,
    /// The spec the backend gets: the dispatch globs added, the network rule
    /// applied, the session id set.
    pub spec: SandboxSpec,
    /// The rule that turned the network off, if one did (SPEC E5).
    pub network_rule: Option<String>,
    /// Whether that rule changed the spec's own setting (worth a log line).
    pub network_turned_off: bool,
    /// The session's proxies, if the backend has any way to use them.
    pub egress: Option<EgressPlan>,
    /// What the bind rules added to the spec, one line each (worth a log line).
    pub bind_notices: Vec<String>,
}

/// Decides a launch. `fresh_id` names the session when the spec leaves
/// `sessionId` empty; `facts` are the filesystem's answers about the paths
/// the bind rules compare ([`PathFacts::gather`]). Pure: it reads the
/// settings, the facts and the probe reports and starts nothing, so every
/// refusal and selection outcome is a table row.
pub fn plan_launch(
    mut spec: SandboxSpec,
    explicit: Option<&str>,
    settings: &LaunchSettings,
    offers: &[Offer<'_>],
    facts: &PathFacts,
    fresh_id: impl FnOnce() -> Result<String, SessionError>,
) -> Result<LaunchPlan, SessionError> {
    // G5: a hostile spec is refused whatever backend it would get.
    let bind_notices = check_binds(&mut spec, &settings.paths, facts)?;
    let selection = settings.select(explicit, offers)?;
    let offer = offers
        .iter()
        .find(|o| o.name == selection.backend)
        .ok_or_else(|| SessionError::NotLoaded(selection.backend.clone()))?;
    if spec.egress.is_some() {
        return Err(SessionError::InvalidSpec {
            field: "egress",
            message: "`egress` is set by the server from its own proxies; leave it out".into(),
        });
    }
    settings.dispatch.apply(&mut spec);
    // SPEC E5: the "Access the network" rule, read once, at launch.
    let network_rule = settings.commands.network_denied(spec.mode);
    if spec.network_open && !spec.network_enabled {
        return Err(SessionError::InvalidSpec {
            field: "networkOpen",
            message: "network open needs the network on; leave out `networkEnabled: false`, \
                      or `networkOpen`"
                .into(),
        });
    }
    let network_turned_off = network_rule.is_some() && spec.network_enabled;
    if network_rule.is_some() {
        spec.network_enabled = false;
    }
    if let Err(e) = check_globs(&spec.write_deny_globs) {
        return Err(SessionError::InvalidSpec {
            field: "writeDenyGlobs",
            message: e.to_string(),
        });
    }
    if let Some(refusal) = DispatchPolicy::refusal(offer.name, offer.report, &spec) {
        return Err(SessionError::PolicyUnenforceable(refusal));
    }
    if spec.session_id.is_empty() {
        spec.session_id = fresh_id()?;
    }
    if !valid_id(&spec.session_id) {
        return Err(SessionError::BadId(spec.session_id));
    }
    let proxy_only = offer.report.has(capability::NET_PROXY_ONLY);
    // Whether the sandbox's egress goes through the session's proxies.
    let proxied = proxy_only || offer.report.kind == SandboxBackend::None;
    if spec.network_open && spec.network_enabled && !proxied {
        return Err(SessionError::InvalidSpec {
            field: "networkOpen",
            message: format!(
                "network open is a mode of the server's egress proxies, and `{}` does not route \
                 its sandboxes through them; choose a backend that does (bwrap, none), or \
                 leave `networkOpen` out",
                offer.name
            ),
        });
    }
    let egress = if proxied {
        let policy = settings
            .egress
            .policy(&spec)
            .map_err(|e| SessionError::InvalidSpec {
                field: "egressAllowlist",
                message: e.to_string(),
            })?;
        Some(match proxy_only {
            true => EgressPlan::Unix(policy),
            false => EgressPlan::Tcp(policy),
        })
    } else {
        None
    };
    Ok(LaunchPlan {
        selection,
        spec,
        network_rule,
        network_turned_off,
        egress,
        bind_notices,
    })
}

/// A fresh session id, for a spec that names none.
pub(super) fn new_session_id() -> Result<String, SessionError> {
    crate::random::hex(8)
        .map(|hex| format!("s-{hex}"))
        .map_err(SessionError::Random)
}

/// Which egress a launched spec has: `open` (everything but the fixed deny
/// list, SPEC D2), `allowlist` (the default), or `off`.
pub fn network_mode(spec: &SandboxSpec) -> &'static str {
    match (spec.network_enabled, spec.network_open) {
        (false, _) => "off",
        (true, true) => "open",
        (true, false) => "allowlist",
    }
}

/// Session ids name directories and URL segments.
pub fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && id != "."
        && id != ".."
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
