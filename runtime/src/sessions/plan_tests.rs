//! `plan_launch`, one row per refusal and per selection outcome.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sandbox_plugin_api::{ProbeReport, SandboxBackend, SandboxMode, SandboxSpec, capability};
use sandbox_registry::select::{Offer, Platform, SandboxSwitch};

use super::*;
use crate::command_policy::CommandPolicy;
use crate::dispatch_policy::DispatchPolicy;
use crate::egress::EgressSettings;
use sandbox_paths::binds::{PathFacts, ServerPaths, lexical};

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
        paths: server_paths(),
        output_budget: Arc::default(),
        feed: Arc::default(),
        after_destroy: None,
        workspaces: None,
    }
}

/// A server run by `me` from a checkout's `target/release` (plugins found
/// beside the binary), with the default token file and a config file.
fn server_paths() -> ServerPaths {
    ServerPaths {
        home: Some("/home/me".into()),
        token_file: Some("/home/me/.local/state/cc_server/token".into()),
        runtime_dir: Some("/tmp/cc_server-1000".into()),
        secret_files: Vec::new(),
        temp_dir: "/tmp".into(),
        config_files: vec![("/home/me/etc/cc_server.toml".into(), "the config file")],
        plugin_dirs: vec![
            "/home/me/src/cc/target/release".into(),
            "/home/me/src/cc/target/release/plugins".into(),
        ],
        bind_roots: Vec::new(),
        config_file: Some("/home/me/etc/cc_server.toml".into()),
        state_dir: Some("/home/me/.local/state/cc_server".into()),
        data_dir: Some("/home/me/.local/share/cc_server".into()),
    }
}

/// The filesystem of [`server_paths`]: what exists resolves to itself, and
/// the links lead where their names say.
fn facts() -> PathFacts {
    let mut facts = PathFacts::default();
    for existing in [
        "/etc",
        "/usr",
        "/tmp",
        "/home/me/.ssh",
        "/home/me/etc/cc_server.toml",
        "/home/me/src/cc/target/release",
        "/home/me/work",
    ] {
        facts.insert(Path::new(existing), existing.into());
    }
    for (link, target) in [
        ("/home/me/link-to-etc", "/etc"),
        ("/tmp/etc-link", "/etc"),
        ("/home/me/ssh-link", "/home/me/.ssh"),
        ("/home/me/work/link-out", "/home/me/other"),
        ("/home/me/work/sock", "/run/docker.sock"),
        ("/var/run/docker.sock", "/run/docker.sock"),
    ] {
        facts.insert(Path::new(link), target.into());
    }
    facts
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
    plan_launch(spec, explicit, settings, &offers, &facts(), || {
        Ok("s-fresh".into())
    })
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
    for glob in sandbox_paths::write_deny::DEFAULT_GLOBS {
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
    let plan = plan_launch(spec("s"), Some("plain"), &on, &offers, &facts(), || {
        Ok("unused".into())
    })
    .unwrap();
    assert!(plan.egress.is_none());
    let open = SandboxSpec {
        network_open: true,
        ..spec("s")
    };
    let refused = plan_launch(open, Some("plain"), &on, &offers, &facts(), || {
        Ok("unused".into())
    });
    assert_eq!(
        refusal(refused),
        "invalid networkOpen",
        "no proxies to open"
    );
}

/// D2: network open is a mode of a session with the network on; the
/// spec is passed on as asked, and says so (`network_mode`).
#[test]
fn network_open_needs_the_network_on() {
    let on = settings(SandboxSwitch::On);
    let open = SandboxSpec {
        network_open: true,
        ..spec("s")
    };
    let planned = plan(open.clone(), None, &on).unwrap();
    assert!(planned.spec.network_open);
    assert_eq!(super::network_mode(&planned.spec), "open");
    assert_eq!(super::network_mode(&spec("s")), "allowlist");
    let contradictory = SandboxSpec {
        network_enabled: false,
        ..open.clone()
    };
    assert_eq!(
        refusal(plan(contradictory, None, &on)),
        "invalid networkOpen"
    );
    // The command policy's network rule turns it off, and off wins.
    let review = SandboxSpec {
        mode: SandboxMode::Review,
        ..open
    };
    let review = plan(review, None, &on).unwrap();
    assert_eq!(super::network_mode(&review.spec), "off");
}

fn binding(path: &str, read_only: bool) -> SandboxSpec {
    SandboxSpec {
        bind_mounts: vec![sandbox_plugin_api::SandboxBindMount {
            host_path: path.into(),
            guest_path: None,
            read_only,
        }],
        ..spec("s")
    }
}

const RW: bool = false;
const RO: bool = true;

/// G5, F6: one row per bind rule; each path as written and resolved.
#[test]
fn hostile_binds_are_refused_naming_the_field() {
    let on = settings(SandboxSwitch::On);
    let rows: &[(&str, &str, bool, &str)] = &[
        ("the host's root", "/", RO, "invalid bindMounts"),
        (
            "the root by `..`",
            "/home/me/work/../../..",
            RO,
            "invalid bindMounts",
        ),
        ("a relative path", "work", RO, "invalid bindMounts"),
        ("a system dir, writable", "/etc", RW, "invalid bindMounts"),
        (
            "below a system dir, writable",
            "/usr/local/lib",
            RW,
            "invalid bindMounts",
        ),
        (
            "a link to a system dir, writable",
            "/home/me/link-to-etc",
            RW,
            "invalid bindMounts",
        ),
        ("a system dir, read-only", "/etc", RO, "ok"),
        (
            "a link to a system dir, read-only",
            "/home/me/link-to-etc",
            RO,
            "ok",
        ),
        ("a temp dir inside /var", "/var/tmp/build", RW, "ok"),
        (
            "a link in a temp dir to a system dir",
            "/tmp/etc-link",
            RW,
            "invalid bindMounts",
        ),
        ("/proc, read-only", "/proc", RO, "invalid bindMounts"),
        ("below /proc", "/proc/1/root", RO, "invalid bindMounts"),
        ("/sys", "/sys", RO, "invalid bindMounts"),
        ("/dev", "/dev", RO, "invalid bindMounts"),
        (
            "a service socket",
            "/run/docker.sock",
            RO,
            "invalid bindMounts",
        ),
        (
            "a service socket by /var/run",
            "/var/run/docker.sock",
            RO,
            "invalid bindMounts",
        ),
        (
            "a link to a service socket",
            "/home/me/work/sock",
            RO,
            "invalid bindMounts",
        ),
        ("a home secret", "/home/me/.ssh", RO, "invalid bindMounts"),
        (
            "below a home secret",
            "/home/me/.aws/credentials",
            RO,
            "invalid bindMounts",
        ),
        (
            "a home secret by `..`",
            "/home/me/work/../.gnupg",
            RO,
            "invalid bindMounts",
        ),
        (
            "a link to a home secret",
            "/home/me/ssh-link",
            RO,
            "invalid bindMounts",
        ),
        ("a system secret", "/etc/shadow", RO, "invalid bindMounts"),
        (
            "an ssh host key",
            "/etc/ssh/ssh_host_ed25519_key",
            RO,
            "invalid bindMounts",
        ),
        (
            "the host keys' dir, read-only (masked)",
            "/etc/ssh",
            RO,
            "ok",
        ),
        (
            "the token's dir (a secret)",
            "/home/me/.local/state/cc_server",
            RO,
            "invalid bindMounts",
        ),
        (
            "the token itself",
            "/home/me/.local/state/cc_server/token",
            RO,
            "invalid bindMounts",
        ),
        (
            "home: the default token is masked there",
            "/home/me",
            RW,
            "ok",
        ),
        (
            "an ancestor of the default token",
            "/home/me/.local",
            RW,
            "ok",
        ),
        (
            "the runtime dir",
            "/tmp/cc_server-1000",
            RO,
            "invalid bindMounts",
        ),
        (
            "an egress dir in the runtime dir",
            "/tmp/cc_server-1000/cc_server-egress-x1/http.sock",
            RO,
            "invalid bindMounts",
        ),
        (
            "an egress dir where older servers made them",
            "/tmp/cc_server-egress-x1/http.sock",
            RO,
            "invalid bindMounts",
        ),
        // Refused until a backend hid the runtime dir inside a bind that
        // holds it; now a workdir of `/tmp` runs (bwrap masks it, microvm
        // refuses, `none` binds nothing).
        (
            "the temp dir, which holds the runtime dir",
            "/tmp",
            RO,
            "ok",
        ),
        ("the temp dir, writable", "/tmp", RW, "ok"),
        (
            "the config file, writable",
            "/home/me/etc/cc_server.toml",
            RW,
            "invalid bindMounts",
        ),
        (
            "the config file, read-only",
            "/home/me/etc/cc_server.toml",
            RO,
            "ok",
        ),
        (
            "a plugins dir, writable",
            "/home/me/src/cc/target/release",
            RW,
            "invalid bindMounts",
        ),
        (
            "below a plugins dir, writable",
            "/home/me/src/cc/target/release/x",
            RW,
            "invalid bindMounts",
        ),
        (
            "a plugins dir, read-only",
            "/home/me/src/cc/target/release",
            RO,
            "ok",
        ),
        (
            "a checkout holding the plugins (protected)",
            "/home/me/src/cc",
            RW,
            "ok",
        ),
        ("the workdir", "/home/me/work", RW, "ok"),
        ("a project, read-only", "/home/me/work", RO, "ok"),
        ("a temp dir's child", "/tmp/.tmpAbC", RW, "ok"),
    ];
    for (what, path, read_only, want) in rows {
        let got = refusal(plan(binding(path, *read_only), None, &on));
        assert_eq!(got, *want, "{what}: {path}");
    }
}

#[test]
fn read_only_modes_keep_system_binds_read_only_but_state_dirs_are_writable_everywhere() {
    let on = settings(SandboxSwitch::On);
    let review = SandboxSpec {
        mode: SandboxMode::Review,
        ..binding("/etc", RW)
    };
    assert_eq!(refusal(plan(review, None, &on)), "ok");
    let state_dir = SandboxSpec {
        mode: SandboxMode::Review,
        runner_state_dirs: vec!["/etc".into()],
        ..spec("s")
    };
    assert_eq!(
        refusal(plan(state_dir, None, &on)),
        "invalid runnerStateDirs"
    );
}

#[test]
fn a_writable_bind_above_the_plugins_keeps_them_read_only_inside() {
    let on = settings(SandboxSwitch::On);
    let planned = plan(binding("/home/me/src/cc", RW), None, &on).unwrap();
    assert_eq!(
        planned.spec.protected_paths,
        vec![PathBuf::from("/home/me/src/cc/target/release")]
    );
    assert_eq!(planned.bind_notices.len(), 1, "{:?}", planned.bind_notices);
    assert!(
        planned.bind_notices[0].contains("bindMounts[0].hostPath `/home/me/src/cc` holds")
            && planned.bind_notices[0].contains("kept read-only inside"),
        "{:?}",
        planned.bind_notices
    );
    let planned = plan(binding("/home/me/etc", RW), None, &on).unwrap();
    assert_eq!(
        planned.spec.protected_paths,
        vec![PathBuf::from("/home/me/etc/cc_server.toml")]
    );
    // A plugins dir that does not exist yet could be made and filled.
    let missing = LaunchSettings {
        paths: ServerPaths {
            plugin_dirs: vec!["/home/me/work/plugins".into()],
            ..server_paths()
        },
        ..settings(SandboxSwitch::On)
    };
    let err = plan(binding("/home/me/work", RW), None, &missing).unwrap_err();
    assert!(err.to_string().contains("does not exist yet"), "{err}");
}

#[test]
fn bind_roots_narrow_every_bind() {
    let rooted = LaunchSettings {
        paths: ServerPaths {
            bind_roots: vec!["/home/me/work".into()],
            ..server_paths()
        },
        ..settings(SandboxSwitch::On)
    };
    let rows: &[(&str, &str)] = &[
        ("/home/me/work", "ok"),
        ("/home/me/work/a", "ok"),
        ("/home/me/other", "invalid bindMounts"),
        ("/home/me/work/../other", "invalid bindMounts"),
        ("/home/me/work/link-out", "invalid bindMounts"),
        ("/home/me/workshop", "invalid bindMounts"),
    ];
    for (path, want) in rows {
        assert_eq!(
            refusal(plan(binding(path, RO), None, &rooted)),
            *want,
            "{path}"
        );
    }
    let err = plan(binding("/home/me/other", RO), None, &rooted)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bind_roots")
            && err.contains("/home/me/work")
            && err.contains("cc_server.toml"),
        "{err}"
    );
}

/// Every refusal explains itself: the field, the path, the rule, the remedy.
#[test]
fn bind_refusals_name_the_rule_and_the_remedy() {
    let on = settings(SandboxSwitch::On);
    let rows: &[(&str, bool, &[&str])] = &[
        (
            "/usr/local",
            RW,
            &[
                "bindMounts[0].hostPath `/usr/local`",
                "system directory `/usr`",
                "readOnly: true",
            ],
        ),
        (
            "/home/me/link-to-etc",
            RW,
            &["resolves to `/etc`", "system directory"],
        ),
        ("/proc", RO, &["never bound, in any mode"]),
        (
            "/home/me/ssh-link",
            RO,
            &["SSH private keys", "remove the bind"],
        ),
        (
            "/tmp/cc_server-1000/x",
            RO,
            &[
                "runtime directory `/tmp/cc_server-1000`",
                "in any mode",
                "does not lie in it",
            ],
        ),
        (
            "/tmp/cc_server-egress-x1",
            RO,
            &["egress directory", "made for this sandbox"],
        ),
        (
            "/home/me/src/cc/target/release",
            RW,
            &["plugins directory", "read-only"],
        ),
        ("/", RO, &["root directory"]),
    ];
    for (path, read_only, needles) in rows {
        let err = plan(binding(path, *read_only), None, &on)
            .unwrap_err()
            .to_string();
        for needle in *needles {
            assert!(err.contains(needle), "{path}: `{needle}` not in: {err}");
        }
    }
}

/// A token file outside the masked secrets: no bind may hold it, in any mode.
#[test]
fn a_token_file_elsewhere_is_shown_by_no_bind() {
    let custom = LaunchSettings {
        paths: ServerPaths {
            token_file: Some("/home/me/state/token".into()),
            ..server_paths()
        },
        ..settings(SandboxSwitch::On)
    };
    for path in ["/home/me", "/home/me/state", "/home/me/state/token"] {
        let err = plan(binding(path, RO), None, &custom).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                SessionError::InvalidSpec {
                    field: "bindMounts",
                    ..
                }
            ) && text.contains("API token file")
                && text.contains("token_file"),
            "{path}: {text}"
        );
    }
    assert_eq!(
        refusal(plan(binding("/home/me/work", RW), None, &custom)),
        "ok"
    );
}

/// The push gateway's credential files: no bind may hold one, in any mode,
/// and the refusal names the config key.
#[test]
fn the_gateways_credential_files_are_shown_by_no_bind() {
    let custom = LaunchSettings {
        paths: ServerPaths {
            secret_files: vec![(
                "/home/me/forge/app.pem".into(),
                "[gateway.app] private_key_file",
            )],
            ..server_paths()
        },
        ..settings(SandboxSwitch::On)
    };
    for path in ["/home/me", "/home/me/forge", "/home/me/forge/app.pem"] {
        let text = plan(binding(path, RO), None, &custom)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("a credential of the server's")
                && text.contains("[gateway.app] private_key_file"),
            "{path}: {text}"
        );
    }
    assert_eq!(
        refusal(plan(binding("/home/me/work", RW), None, &custom)),
        "ok"
    );
}

#[test]
fn lexical_normalisation() {
    for (given, want) in [
        ("/a/./b/../c", "/a/c"),
        ("/..", "/"),
        ("/a/../..", "/"),
        ("a/../../b", "../b"),
    ] {
        assert_eq!(lexical(Path::new(given)), Path::new(want), "{given}");
    }
}

/// SPEC H1, H10: a client's bind lies outside the data directory, in any
/// mode; a writable bind above it keeps it read-only; the binds the server
/// resolves for a conversation lie below it. The state directory is shown
/// to no bind (here it is below the masked `~/.local/state/cc_server`, so
/// only at or below it is refused).
#[test]
fn the_data_and_state_directories_are_the_servers() {
    let on = settings(SandboxSwitch::On);
    let data = "/home/me/.local/share/cc_server";
    for path in [
        data,
        "/home/me/.local/share/cc_server/conversations/c-1/repos",
    ] {
        for mode in [RW, RO] {
            let err = plan(binding(path, mode), None, &on).unwrap_err();
            assert!(
                err.to_string().contains("data directory")
                    && err.to_string().contains("conversationId"),
                "{path}: {err}"
            );
        }
    }
    let above = plan(binding("/home/me/.local", RW), None, &on).unwrap();
    assert!(
        above.spec.protected_paths.contains(&PathBuf::from(data)),
        "{:?}",
        above.spec.protected_paths
    );
    let mut resolved = binding(
        "/home/me/.local/share/cc_server/conversations/c-1/agents/a/work",
        RW,
    );
    resolved.conversation_id = Some("c-1".into());
    assert!(plan(resolved, None, &on).is_ok());
    let err = plan(binding("/home/me/.local/state/cc_server", RO), None, &on).unwrap_err();
    assert!(
        err.to_string().contains("secret") || err.to_string().contains("state"),
        "{err}"
    );
    let elsewhere = LaunchSettings {
        paths: ServerPaths {
            state_dir: Some("/home/me/state".into()),
            ..server_paths()
        },
        ..settings(SandboxSwitch::On)
    };
    for path in ["/home/me", "/home/me/state", "/home/me/state/db"] {
        let err = plan(binding(path, RO), None, &elsewhere).unwrap_err();
        assert!(err.to_string().contains("state directory"), "{path}: {err}");
    }
}

/// G5, T40: the backend gets the resolved spelling each bind was checked
/// at, and a client's own `checkedHostPaths` is replaced, never trusted.
#[test]
fn the_backend_gets_the_spelling_each_bind_was_checked_at() {
    let on = settings(SandboxSwitch::On);
    let mut asked = binding("/home/me/work/link-out", RW);
    asked
        .checked_host_paths
        .insert("/home/me/work/link-out".into(), "/home/me/work".into());
    asked
        .checked_host_paths
        .insert("/elsewhere".into(), "/etc".into());
    let planned = plan(asked, None, &on).unwrap();
    assert_eq!(
        planned.spec.checked_host_paths,
        [(
            PathBuf::from("/home/me/work/link-out"),
            PathBuf::from("/home/me/other")
        )]
        .into_iter()
        .collect()
    );
}
