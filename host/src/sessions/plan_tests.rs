//! `plan_launch`, one row per refusal and per selection outcome.

use std::sync::Arc;

use sandbox_plugin_api::{ProbeReport, SandboxBackend, SandboxMode, SandboxSpec, capability};
use sandbox_registry::select::{Offer, Platform, SandboxSwitch};

use super::*;
use crate::command_policy::CommandPolicy;
use crate::dispatch_policy::DispatchPolicy;
use crate::egress::EgressSettings;

fn report(kind: SandboxBackend, caps: &[&str]) -> ProbeReport {
    ProbeReport {
        available: true,
        kind,
        capabilities: caps.iter().map(|c| (*c).to_owned()).collect(),
        ..ProbeReport::default()
    }
}

/// The backends of this host: a guarded bwrap, `none`, and an unguarded
/// `plain` native-kind backend (no create-time guard, no proxies).
fn reports() -> Vec<(&'static str, ProbeReport)> {
    vec![
        (
            "bwrap",
            report(
                SandboxBackend::Native,
                &[
                    capability::FS_DENY_GLOB_ON_CREATE,
                    capability::NET_PROXY_ONLY,
                ],
            ),
        ),
        ("none", report(SandboxBackend::None, &[])),
        ("plain", report(SandboxBackend::Native, &[])),
        (
            "microvm",
            ProbeReport {
                kind: SandboxBackend::Microvm,
                ..ProbeReport::unavailable("no KVM", "")
            },
        ),
    ]
}

fn settings(switch: SandboxSwitch) -> LaunchSettings {
    LaunchSettings {
        switch,
        default_backend: None,
        platform: Platform::Linux,
        dispatch: DispatchPolicy::default(),
        commands: Arc::new(CommandPolicy::default()),
        egress: EgressSettings::default(),
    }
}

fn plan(
    spec: SandboxSpec,
    explicit: Option<&str>,
    settings: &LaunchSettings,
) -> Result<LaunchPlan, SessionError> {
    let reports = reports();
    let offers: Vec<Offer<'_>> = reports
        .iter()
        .map(|(name, report)| Offer { name, report })
        .collect();
    plan_launch(spec, explicit, settings, &offers, || Ok("s-fresh".into()))
}

fn spec(id: &str) -> SandboxSpec {
    SandboxSpec {
        session_id: id.into(),
        ..SandboxSpec::default()
    }
}

/// What a refusal was, as a short name for the table.
fn refusal(result: Result<LaunchPlan, SessionError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(SessionError::Select(_)) => "select".into(),
        Err(SessionError::InvalidSpec { field, .. }) => format!("invalid {field}"),
        Err(SessionError::PolicyUnenforceable(_)) => "unenforceable".into(),
        Err(SessionError::BadId(_)) => "bad id".into(),
        Err(other) => format!("other: {other}"),
    }
}

#[test]
fn every_refusal_is_decided_before_anything_starts() {
    let on = settings(SandboxSwitch::On);
    let with_egress = SandboxSpec {
        egress: Some(sandbox_plugin_api::EgressEndpoints::default()),
        ..spec("s")
    };
    let bad_glob = SandboxSpec {
        write_deny_globs: vec!["[".into()],
        ..spec("s")
    };
    let bad_allowlist = SandboxSpec {
        egress_allowlist: vec!["*.com".into()],
        ..spec("s")
    };
    let rows: Vec<(&str, SandboxSpec, Option<&str>, &str)> = vec![
        (
            "microvm asked for, cannot boot",
            spec("s"),
            Some("microvm"),
            "select",
        ),
        (
            "an unknown name is `none` (B6)",
            spec("s"),
            Some("nope"),
            "ok",
        ),
        (
            "the server's own field",
            with_egress,
            None,
            "invalid egress",
        ),
        (
            "a glob that does not parse",
            bad_glob,
            None,
            "invalid writeDenyGlobs",
        ),
        (
            "a backend without the guard",
            spec("s"),
            Some("plain"),
            "unenforceable",
        ),
        ("an id that is a path", spec("a/b"), None, "bad id"),
        ("an id of dots", spec(".."), None, "bad id"),
        (
            "a wildcard over a suffix",
            bad_allowlist,
            None,
            "invalid egressAllowlist",
        ),
        ("a good spec", spec("s"), None, "ok"),
    ];
    for (what, spec, explicit, want) in rows {
        assert_eq!(refusal(plan(spec, explicit, &on)), want, "{what}");
    }
}

#[test]
fn selection_outcomes() {
    let on = settings(SandboxSwitch::On);
    let off = settings(SandboxSwitch::Off);
    let rows: Vec<(&LaunchSettings, Option<&str>, &str, bool)> = vec![
        // settings, explicit, backend, egress on unix sockets?
        (&on, None, "bwrap", true),
        (&on, Some("native"), "bwrap", true),
        (&on, Some("none"), "none", false),
        (&off, None, "none", false),
        (&off, Some("bwrap"), "none", false),
    ];
    for (settings, explicit, backend, unix) in rows {
        let planned = plan(spec("s"), explicit, settings).unwrap();
        assert_eq!(planned.selection.backend, backend, "{explicit:?}");
        let got_unix = matches!(planned.egress, Some(EgressPlan::Unix(_)));
        let got_tcp = matches!(planned.egress, Some(EgressPlan::Tcp(_)));
        assert_eq!((got_unix, got_tcp), (unix, !unix), "{explicit:?}");
    }
}

#[test]
fn the_spec_gets_the_policy_globs_an_id_and_the_network_rule() {
    let on = settings(SandboxSwitch::On);
    let chat = plan(spec(""), None, &on).unwrap();
    assert_eq!(chat.spec.session_id, "s-fresh");
    for glob in sandbox_plugin_api::write_deny::DEFAULT_GLOBS {
        assert!(
            chat.spec.write_deny_globs.iter().any(|g| g == glob),
            "{glob}"
        );
    }
    assert!(chat.spec.network_enabled && chat.network_rule.is_none());

    let review = SandboxSpec {
        mode: SandboxMode::Review,
        ..spec("s")
    };
    let review = plan(review, None, &on).unwrap();
    assert!(!review.spec.network_enabled);
    assert!(review.network_rule.is_some() && review.network_turned_off);
}

#[test]
fn a_backend_without_proxies_gets_no_egress() {
    let reports = [(
        "plain",
        report(
            SandboxBackend::Native,
            &[capability::FS_DENY_GLOB_ON_CREATE],
        ),
    )];
    let offers: Vec<Offer<'_>> = reports
        .iter()
        .map(|(name, report)| Offer { name, report })
        .collect();
    let on = LaunchSettings {
        default_backend: Some("plain".into()),
        ..settings(SandboxSwitch::On)
    };
    let plan = plan_launch(spec("s"), Some("plain"), &on, &offers, || {
        Ok("unused".into())
    })
    .unwrap();
    assert!(plan.egress.is_none());
}
