//! Discovery against fake hosts: one row per rule (SPEC G4, C1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::plan::tests::FakeHost;

/// A user with rustup, pyenv, pip-installed scripts, an npm cache, an nvm
/// install with a global npmrc, and a few things that must stay hidden.
fn host() -> FakeHost {
    let mut host = FakeHost::standard();
    for dir in [
        "/usr/local/bin",
        "/opt/tools/bin",
        "/home/u/.cargo/bin",
        "/home/u/.cargo/registry",
        "/home/u/.rustup/toolchains",
        "/home/u/.pyenv/shims",
        "/home/u/.pyenv/bin",
        "/home/u/.local/bin",
        "/home/u/.config",
        "/home/u/.ssh/bin",
        "/home/u/.npm",
        "/home/u/.nvm/versions/node/v20/etc",
        "/home/u/go/bin",
        "/home/u/go/pkg/mod",
        "/srv/tool/bin",
        "/srv/cargo/bin",
        "/proc/x",
        "/home/u/odd,dir",
    ] {
        // Every ancestor is a directory too.
        for at in Path::new(dir).ancestors().filter(|a| a.parent().is_some()) {
            host.dir(&at.display().to_string());
        }
    }
    host.file("/home/u/.cargo/credentials.toml")
        .file("/srv/cargo/credentials.toml")
        .file("/home/u/.nvm/versions/node/v20/etc/npmrc")
        .symlink("/home/u/bin", "/srv/tool/bin");
    host
}

fn env(path: &str, vars: &[(&str, &str)]) -> ToolEnv {
    ToolEnv {
        path: Some(path.into()),
        home: Some("/home/u".into()),
        vars: vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), PathBuf::from(v)))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn toolchain_paths(found: &Found) -> Vec<&Path> {
    found.toolchains.iter().map(|t| t.host.as_path()).collect()
}

fn cache_paths(found: &Found) -> Vec<&Path> {
    found.caches.iter().map(|c| c.path.as_path()).collect()
}

fn why(found: &Found, path: &str) -> Option<Skip> {
    found
        .skipped
        .iter()
        .find(|(p, _)| p == Path::new(path))
        .map(|(_, w)| w.clone())
}

/// G4, C1: each PATH entry is shown, covered by a home, or skipped with
/// its rule — one row per rule.
#[test]
fn path_entries_are_shown_or_skipped_with_the_rule() {
    let rows: &[(&str, Option<Skip>)] = &[
        ("/home/u/.local/bin", None),
        ("/home/u/bin", None),
        (".", Some(Skip::Relative)),
        ("relative/bin", Some(Skip::Relative)),
        ("", Some(Skip::Relative)),
        ("/usr/local/bin", Some(Skip::SystemView)),
        ("/opt/tools/bin", Some(Skip::SystemView)),
        ("/bin", Some(Skip::SystemView)),
        ("/extra/bin", Some(Skip::SystemView)),
        ("/home/u", Some(Skip::Home)),
        ("/home", Some(Skip::Home)),
        ("/", Some(Skip::Home)),
        (
            "/home/u/.config",
            Some(Skip::HoldsSecret("/home/u/.config/gh".into())),
        ),
        (
            "/home/u/.ssh/bin",
            Some(Skip::InsideSecret("/home/u/.ssh".into())),
        ),
        ("/proc/x", Some(Skip::Virtual)),
        ("/nonexistent", Some(Skip::Missing)),
    ];
    let mut host = host();
    host.dir("/extra/bin").dir("/");
    for (entry, want) in rows {
        let found = discover(&env(entry, &[]), &[PathBuf::from("/extra")], &host);
        let got = if entry.is_empty() {
            found.skipped.first().map(|(_, w)| w.clone())
        } else {
            why(&found, entry)
        };
        assert_eq!(got, *want, "{entry:?}: {found:#?}");
        if want.is_none() {
            assert_eq!(found.toolchains.len(), 1, "{entry}: {found:#?}");
        } else {
            assert!(found.toolchains.is_empty(), "{entry}: {found:#?}");
        }
    }
    // A symlinked entry is shown at both spellings, bound from its target.
    let found = discover(&env("/home/u/bin", &[]), &[], &host);
    assert_eq!(found.toolchains[0].host, Path::new("/srv/tool/bin"));
    assert_eq!(
        found.toolchains[0].guests,
        [PathBuf::from("/home/u/bin"), PathBuf::from("/srv/tool/bin")]
    );
}

/// G4: rustup's `~/.cargo/bin` on PATH brings cargo's home as a cache
/// overlay (its `bin` read-only on top, its credentials hidden) and
/// rustup's home read-only; pyenv's shims bring its root, read-only, and
/// the shims themselves as an overlay that keeps exec; PATH entries inside
/// a home are covered by it; what exists of the caches is shown.
#[test]
fn homes_come_with_their_path_entries() {
    let path =
        "/home/u/.cargo/bin:/home/u/.cargo/bin:/home/u/.pyenv/shims:/home/u/.pyenv/bin:/usr/bin";
    let found = discover(&env(path, &[]), &[], &host());
    assert_eq!(
        toolchain_paths(&found),
        [Path::new("/home/u/.rustup"), Path::new("/home/u/.pyenv")],
        "{found:#?}"
    );
    assert_eq!(
        found.caches,
        [
            Cache {
                tool: "cargo".into(),
                path: "/home/u/.cargo".into(),
                read_only: vec!["/home/u/.cargo/bin".into()],
                hidden: vec!["credentials.toml".into(), "credentials".into()],
                shims: false,
            },
            Cache {
                tool: "npm".into(),
                path: "/home/u/.npm".into(),
                read_only: vec![],
                hidden: vec![],
                shims: false,
            },
            Cache {
                tool: "pyenv shims".into(),
                path: "/home/u/.pyenv/shims".into(),
                read_only: vec![],
                hidden: vec![],
                shims: true,
            },
        ]
    );
    // nvm is not on PATH: not shown, but its global npmrc is a secret to mask.
    assert!(
        found
            .secrets
            .contains(&PathBuf::from("/home/u/.nvm/versions/node/v20/etc/npmrc")),
        "{:?}",
        found.secrets
    );
    assert!(
        found
            .secrets
            .contains(&PathBuf::from("/home/u/.cargo/credentials.toml"))
    );
    assert!(
        found
            .skipped
            .iter()
            .all(|(p, _)| p == Path::new("/usr/bin"))
    );
}

/// G4: a home named by its variable is taken wherever it is; its own
/// credential files are masked, not a reason to skip it; a cache inside
/// another is covered by it; GOPATH's `bin` stays read-only on top.
#[test]
fn variables_name_homes_anywhere() {
    let found = discover(
        &env(
            "/srv/cargo/bin:/home/u/go/bin",
            &[
                ("CARGO_HOME", "/srv/cargo"),
                ("RUSTUP_HOME", "/home/u/.rustup"),
                ("NVM_DIR", "/home/u/.nvm"),
                ("GOMODCACHE", "/home/u/go/pkg/mod"),
            ],
        ),
        &[],
        &host(),
    );
    assert_eq!(
        cache_paths(&found),
        [
            Path::new("/srv/cargo"),
            Path::new("/home/u/go"),
            Path::new("/home/u/.npm")
        ],
        "{found:#?}"
    );
    assert_eq!(found.caches[1].read_only, [PathBuf::from("/home/u/go/bin")]);
    assert_eq!(
        toolchain_paths(&found),
        [Path::new("/home/u/.rustup"), Path::new("/home/u/.nvm")]
    );
    assert!(
        found
            .secrets
            .contains(&PathBuf::from("/srv/cargo/credentials.toml"))
    );
    // ~/.cargo is not CARGO_HOME here, so not shown at all.
    assert!(
        !found
            .toolchains
            .iter()
            .any(|t| t.host.starts_with("/home/u/.cargo"))
    );
}

/// C1: a home or cache named at a bad place is skipped with its rule.
#[test]
fn homes_at_bad_places_are_skipped() {
    let rows: &[(&str, &str, Skip)] = &[
        ("CARGO_HOME", "/home/u", Skip::Home),
        (
            "NVM_DIR",
            "/home/u/.config",
            Skip::HoldsSecret("/home/u/.config/gh".into()),
        ),
        (
            "npm_config_cache",
            "/home/u/.ssh",
            Skip::InsideSecret("/home/u/.ssh".into()),
        ),
        ("PIP_CACHE_DIR", "/home/u/bin", Skip::CachePath),
        ("PIP_CACHE_DIR", "/home/u/odd,dir", Skip::CachePath),
        ("PYENV_ROOT", "/nonexistent", Skip::Missing),
        ("GOROOT", "/usr/lib/go", Skip::Missing),
        ("GOROOT", "/usr", Skip::SystemView),
    ];
    for (var, value, want) in rows {
        let found = discover(&env("", &[(var, value)]), &[], &host());
        assert_eq!(
            why(&found, value).as_ref(),
            Some(want),
            "{var}={value}: {found:#?}"
        );
        assert!(
            !toolchain_paths(&found).contains(&Path::new(value))
                && !cache_paths(&found).contains(&Path::new(value)),
            "{var}={value}"
        );
    }
}

/// Every reason reads as a sentence naming what it refers to.
#[test]
fn reasons_say_why() {
    let text = Skip::HoldsSecret("/home/u/.config/gh".into()).to_string();
    assert!(text.contains("/home/u/.config/gh"), "{text}");
    assert!(Skip::Relative.to_string().contains("relative"));
}

/// G4: a version manager's shim directory (pyenv, rbenv, nodenv, asdf) is
/// an overlay inside its read-only home, found with the home — by its
/// variable or a PATH entry in its default place; none when the home is
/// not shown or has no shims, and none at a symlinked path (skipped with
/// the cache-path rule: the home stays read-only around it).
#[test]
fn version_manager_shims_are_overlays_inside_their_homes() {
    let mut host = host();
    for dir in [
        "/home/u/.rbenv/shims",
        "/home/u/.nodenv/bin",
        "/srv/asdf/shims",
        "/srv/real-shims",
    ] {
        for at in Path::new(dir).ancestors().filter(|a| a.parent().is_some()) {
            host.dir(&at.display().to_string());
        }
    }
    host.symlink("/home/u/.nodenv/shims", "/srv/real-shims");
    let shims = |found: &Found| -> Vec<(String, PathBuf)> {
        found
            .caches
            .iter()
            .filter(|c| c.shims)
            .map(|c| (c.tool.clone(), c.path.clone()))
            .collect()
    };
    let found = discover(
        &env(
            "/home/u/.rbenv/shims:/home/u/.nodenv/bin",
            &[("ASDF_DATA_DIR", "/srv/asdf")],
        ),
        &[],
        &host,
    );
    assert_eq!(
        shims(&found),
        // Parents first (by depth), as every overlay.
        [
            ("asdf shims".to_owned(), PathBuf::from("/srv/asdf/shims")),
            (
                "rbenv shims".to_owned(),
                PathBuf::from("/home/u/.rbenv/shims")
            ),
        ],
        "{found:#?}"
    );
    for home in ["/home/u/.rbenv", "/home/u/.nodenv", "/srv/asdf"] {
        assert!(
            toolchain_paths(&found).contains(&Path::new(home)),
            "{home}: {found:#?}"
        );
    }
    assert_eq!(why(&found, "/home/u/.nodenv/shims"), Some(Skip::CachePath));
    // pyenv is not on PATH here: its shims are not shown either.
    assert!(!cache_paths(&found).contains(&Path::new("/home/u/.pyenv/shims")));
    assert!(
        found
            .caches
            .iter()
            .filter(|c| c.shims)
            .all(|c| c.read_only.is_empty())
    );
}
