//! The profile, against a fake filesystem: golden files for the exact text,
//! and checks through the S-expression reader that each required rule is
//! there and decides what it must.

use std::path::Path;

use sandbox_paths::write_deny::{DEFAULT_GLOBS, GlobSet};
use sandbox_plugin_api::{SandboxBindMount, SandboxMode, SandboxSpec};

use super::*;
use crate::sexpr::{Decision, Regex, Request, Sexpr};

const HOME: &str = "/Users/dev";
const PROJ: &str = "/Users/dev/proj";
const RUNNER: &str = "/tmp/cc_server/s1";
const RUNNER_RESOLVED: &str = "/private/tmp/cc_server/s1";
const REPOS: &str = "/var/folders/zz/abc/T/cc-s1/repos";
const REPOS_RESOLVED: &str = "/private/var/folders/zz/abc/T/cc-s1/repos";
const CONFIG: &str = "/Users/dev/agent-config";
const PORTS: ProxyPorts = ProxyPorts {
    http: Some(41001),
    socks: Some(41002),
};

fn resolver() -> StaticResolver {
    let mut r = StaticResolver::macos();
    for p in [
        "/Users/dev/proj/.git/hooks",
        "/Users/dev/proj/.git/HEAD",
        "/Users/dev/proj/node_modules/.bin",
        "/Users/dev/agent-config",
        "/Users/dev/.ssh",
        "/Users/dev/.config/gh",
        "/private/tmp/cc_server/s1",
        "/private/var/folders/zz/abc/T/cc-s1/repos",
        "/private/var/run/mDNSResponder",
        "/private/etc/master.passwd",
        "/usr/bin/osascript",
        "/bin/launchctl",
        "/usr/sbin/installer",
        "/dev/null",
    ] {
        r.add(p);
    }
    r
}

fn tag() -> SessionTag {
    SessionTag::new("s1", 0x5eed)
}

fn bind(path: &str, read_only: bool) -> SandboxBindMount {
    SandboxBindMount {
        host_path: path.into(),
        guest_path: None,
        read_only,
    }
}

/// The standard dispatch spec (H10's binds): the workdir and the
/// conversation repos read-write, the agent config read-only.
fn chat_spec() -> SandboxSpec {
    SandboxSpec {
        session_id: "s1".into(),
        workspace_id: "w1".into(),
        bind_mounts: vec![bind(PROJ, false), bind(CONFIG, true), bind(REPOS, false)],
        guest_workdir: Some(PROJ.into()),
        runner_state_dirs: vec![RUNNER.into()],
        write_deny_globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
        ..SandboxSpec::default()
    }
}

fn terminal_spec() -> SandboxSpec {
    SandboxSpec {
        session_id: "t1".into(),
        guest_workdir: Some(PROJ.into()),
        write_deny_globs: DEFAULT_GLOBS.iter().map(|g| (*g).to_owned()).collect(),
        ..SandboxSpec::default()
    }
}

/// Protected checkouts, exec grants, network off, a short glob list.
fn locked_spec() -> SandboxSpec {
    SandboxSpec {
        session_id: "s2".into(),
        bind_mounts: vec![bind(PROJ, false)],
        network_enabled: false,
        protected_paths: vec![
            "/Users/dev/checkouts/main".into(),
            "/Users/dev/proj/golden".into(),
        ],
        exec_grant_roots: vec![
            "/Users/dev/proj/node_modules/.bin".into(),
            "/tmp/cc_server/s1/bin".into(),
        ],
        runner_state_dirs: vec![RUNNER.into()],
        write_deny_globs: vec![
            "**/*.pem".into(),
            "config/?.txt".into(),
            "**/.git/hooks/**".into(),
        ],
        ..SandboxSpec::default()
    }
}

fn generate_with(spec: &SandboxSpec, variant: Variant, proxy: ProxyPorts) -> Profile {
    let tag = tag();
    generate(
        &ProfileInput {
            spec,
            home: Path::new(HOME),
            proxy,
            tag: &tag,
            variant,
        },
        &resolver(),
    )
    .unwrap()
}

fn checked(spec: &SandboxSpec, variant: Variant) -> CheckedProfile {
    generate_with(spec, variant, PORTS).check().unwrap()
}

/// `(param "…")` of the parameter holding `value`.
fn param(c: &CheckedProfile, value: &str) -> Sexpr {
    let name = c
        .param_named(value)
        .unwrap_or_else(|| panic!("no parameter holds {value}"));
    Sexpr::param(name)
}

fn filter(head: &str, c: &CheckedProfile, value: &str) -> Sexpr {
    Sexpr::call(head, param(c, value))
}

fn write(c: &CheckedProfile, path: &str) -> Decision {
    c.decide("file-write-create", Request::file(path))
}

fn golden(name: &str, profile: &Profile) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let params: String = profile
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    for (ext, got) in [("sb", &profile.text), ("params", &params)] {
        let file = dir.join(format!("{name}.{ext}"));
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&file, got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run with UPDATE_GOLDEN=1 to create it",
                file.display()
            )
        });
        if want != *got {
            let line = want
                .lines()
                .zip(got.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| want.lines().count().min(got.lines().count()));
            panic!(
                "{} differs from the generated profile at line {}:\n want: {:?}\n  got: {:?}\n\
                 (if the change is intended, run with UPDATE_GOLDEN=1 and review the diff)",
                file.display(),
                line + 1,
                want.lines().nth(line),
                got.lines().nth(line)
            );
        }
    }
}

#[test]
fn golden_profiles() {
    golden(
        "chat",
        &generate_with(&chat_spec(), Variant::Dispatch, PORTS),
    );
    let review = SandboxSpec {
        mode: SandboxMode::Review,
        ..chat_spec()
    };
    golden("review", &generate_with(&review, Variant::Dispatch, PORTS));
    golden(
        "terminal",
        &generate_with(&terminal_spec(), Variant::Terminal, ProxyPorts::default()),
    );
    golden(
        "protected-grants-network-off",
        &generate_with(&locked_spec(), Variant::Dispatch, PORTS),
    );
}

#[test]
fn no_path_is_spliced_into_the_text() {
    for (spec, variant) in [
        (chat_spec(), Variant::Dispatch),
        (locked_spec(), Variant::Dispatch),
        (terminal_spec(), Variant::Terminal),
    ] {
        let profile = generate_with(&spec, variant, PORTS);
        let c = profile.check().unwrap();
        assert!(c.rules().len() > 20);
        for (name, value) in &profile.params {
            // As a whole name: `/dev/tty` is part of the constant `^/dev/ttys[0-9]+$`.
            let whole = profile.text.match_indices(value.as_str()).any(|(at, _)| {
                !profile.text[at + value.len()..]
                    .starts_with(|c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
            });
            assert!(!whole, "{name}={value} appears in the text");
        }
        for word in [
            "/Users",
            "/private",
            "/tmp",
            "/var",
            "/dev/null",
            "/usr/bin",
        ] {
            assert!(!profile.text.contains(word), "{word} in the text");
        }
        let args = profile.sandbox_exec_args();
        assert_eq!(args[0], "-p");
        assert_eq!(args[1], profile.text);
        assert_eq!(args.len(), 2 + 2 * profile.params.len());
        assert!(
            args[2..]
                .chunks(2)
                .all(|d| d[0] == "-D" && d[1].contains('='))
        );
    }
}

#[test]
fn every_deny_carries_the_session_tag() {
    let c = checked(&chat_spec(), Variant::Dispatch);
    let denies: Vec<_> = c
        .rules()
        .iter()
        .filter(|r| r.decision == Decision::Deny)
        .collect();
    assert!(denies.len() > 50);
    for r in denies {
        assert_eq!(r.message.as_deref(), Some(tag().as_str()), "{r:?}");
    }
    assert_eq!(c.default_decision(), Decision::Allow, "C1: (allow default)");
}

#[test]
fn secret_reads_are_denied_in_both_spellings() {
    let c = checked(&chat_spec(), Variant::Dispatch);
    for (rel, _) in home_secrets() {
        let path = format!("{HOME}/{rel}");
        assert!(
            c.has_rule(Decision::Deny, "file-read*", &filter("subpath", &c, &path)),
            "{path}"
        );
        assert_eq!(
            c.decide("file-read-data", Request::file(&format!("{path}/x"))),
            Decision::Deny
        );
    }
    for literal in [
        "/etc/master.passwd",
        "/private/etc/master.passwd",
        "/etc/sudoers",
        "/private/etc/sudoers",
    ] {
        assert!(
            c.has_rule(
                Decision::Deny,
                "file-read*",
                &filter("subpath", &c, literal)
            ),
            "{literal}"
        );
    }
    for denied in [
        "/Users/dev/.ssh/id_ed25519",
        "/Users/dev/Library/Keychains/login.keychain-db",
        "/private/etc/master.passwd",
        "/private/etc/ssh/ssh_host_ed25519_key",
        "/etc/ssh/ssh_host_rsa_key",
    ] {
        assert_eq!(
            c.decide("file-read-data", Request::file(denied)),
            Decision::Deny,
            "{denied}"
        );
        assert_eq!(
            write(&c, denied),
            Decision::Deny,
            "secrets are not writable: {denied}"
        );
    }
    for allowed in [
        "/Users/dev/proj/README.md",
        "/private/etc/ssh/ssh_config",
        "/private/etc/ssh/ssh_host_ed25519_key.pub",
        "/Users/dev/.sshrc",
    ] {
        assert_eq!(
            c.decide("file-read-data", Request::file(allowed)),
            Decision::Allow,
            "{allowed}"
        );
    }
}

#[test]
fn binds_are_writable_only_in_chat_and_runner_dirs_always() {
    for mode in SandboxMode::ALL {
        let spec = SandboxSpec {
            mode,
            ..chat_spec()
        };
        let c = checked(&spec, Variant::Dispatch);
        let chat = mode == SandboxMode::Chat;
        for root in [PROJ, REPOS, REPOS_RESOLVED] {
            let allow = c.has_rule(Decision::Allow, "file-write*", &filter("subpath", &c, root));
            assert_eq!(allow, chat, "{mode}: allow rule for {root}");
            let want = if chat {
                Decision::Allow
            } else {
                Decision::Deny
            };
            assert_eq!(
                write(&c, &format!("{root}/src/a.rs")),
                want,
                "{mode}: {root}"
            );
        }
        assert_eq!(
            write(&c, &format!("{CONFIG}/settings.json")),
            Decision::Deny,
            "{mode}: read-only bind"
        );
        for root in [RUNNER, RUNNER_RESOLVED] {
            assert!(
                c.has_rule(Decision::Allow, "file-write*", &filter("subpath", &c, root)),
                "{mode}: F4 {root}"
            );
            assert_eq!(
                write(&c, &format!("{root}/cache/x")),
                Decision::Allow,
                "{mode}: {root}"
            );
        }
        assert_eq!(
            write(&c, "/Users/dev/notes.txt"),
            Decision::Deny,
            "{mode}: $HOME"
        );
        assert_eq!(
            write(&c, "/private/tmp/elsewhere"),
            Decision::Deny,
            "{mode}: /tmp"
        );
        assert_eq!(
            c.decide("file-write-data", Request::file("/dev/null")),
            Decision::Allow,
            "{mode}: /dev/null"
        );
        assert_eq!(
            c.decide("file-write-data", Request::file("/dev/ttys004")),
            Decision::Allow,
            "{mode}: a pty"
        );
    }
}

#[test]
fn a_read_only_bind_inside_a_writable_one_stays_read_only() {
    let spec = SandboxSpec {
        bind_mounts: vec![bind(PROJ, false), bind("/Users/dev/proj/vendor", true)],
        ..chat_spec()
    };
    let c = checked(&spec, Variant::Dispatch);
    assert_eq!(write(&c, "/Users/dev/proj/src/x"), Decision::Allow);
    assert_eq!(write(&c, "/Users/dev/proj/vendor/x"), Decision::Deny);
    assert_eq!(
        write(&c, "/Users/dev/proj/vendor/node_modules/a.pem"),
        Decision::Deny,
        "the dependency re-allow does not open a read-only bind"
    );
    // The same path bound twice: the stricter wins.
    let spec = SandboxSpec {
        bind_mounts: vec![bind(PROJ, false), bind(PROJ, true)],
        ..chat_spec()
    };
    assert_eq!(
        write(&checked(&spec, Variant::Dispatch), "/Users/dev/proj/x"),
        Decision::Deny
    );
}

/// SPEC G5, the allowlists where a profile can follow them: a bound home's
/// dot-paths and code places are read-only but its history; the git
/// directory at the top of a writable root takes what git writes in
/// ordinary work, not its config, its alternates or a name nobody listed.
#[test]
fn the_allowlists_hold_in_a_bound_home_and_a_git_directory_at_the_top() {
    let spec = SandboxSpec {
        bind_mounts: vec![bind(HOME, false), bind(PROJ, false)],
        ..chat_spec()
    };
    let c = checked(&spec, Variant::Dispatch);
    for denied in [
        "/Users/dev/.tmux.conf",
        "/Users/dev/.local/lib/python3.12/site-packages/x.pth",
        "/Users/dev/.new-tool/init.sh",
        "/Users/dev/Library/LaunchAgents/x.plist",
        "/Users/dev/bin/git",
        "/Users/dev/proj/.git/config",
        "/Users/dev/proj/.git/config.lock",
        "/Users/dev/proj/.git/objects/info/alternates",
        "/Users/dev/proj/.git/commondir",
        "/Users/dev/proj/.git/a-name-nobody-listed",
    ] {
        assert_eq!(write(&c, denied), Decision::Deny, "{denied}");
    }
    assert_eq!(
        c.decide(
            "file-write-create",
            Request::dir("/Users/dev/proj/.git/info")
        ),
        Decision::Allow,
        "the directory of info/refs"
    );
    for allowed in [
        "/Users/dev/.bash_history",
        "/Users/dev/notes.txt",
        "/Users/dev/proj/src/main.rs",
        "/Users/dev/proj/.git/index.lock",
        "/Users/dev/proj/.git/objects/ab/cdef",
        "/Users/dev/proj/.git/refs/heads/topic",
        "/Users/dev/proj/.git/ORIG_HEAD",
    ] {
        assert_eq!(write(&c, allowed), Decision::Allow, "{allowed}");
    }
    // A project below the home shows none of what the home keeps.
    let project = generate_with(&chat_spec(), Variant::Dispatch, PORTS);
    assert!(!project.text.contains("The home allowlist"));
    // The terminal's home is writable by design (SPEC D2).
    let terminal = checked(&terminal_spec(), Variant::Terminal);
    assert_eq!(write(&terminal, "/Users/dev/.tmux.conf"), Decision::Allow);
}

#[test]
fn mandatory_denies_hold_inside_every_writable_root_and_home() {
    for mode in [SandboxMode::Chat, SandboxMode::Review] {
        let spec = SandboxSpec {
            mode,
            write_deny_globs: vec![],
            ..chat_spec()
        };
        let c = checked(&spec, Variant::Dispatch);
        let mut anchors = vec![HOME, RUNNER, RUNNER_RESOLVED];
        if mode == SandboxMode::Chat {
            anchors.extend([PROJ, REPOS, REPOS_RESOLVED]);
        }
        for root in anchors {
            for (name, _) in mandatory_write_deny() {
                let path = format!("{root}/{name}");
                assert!(
                    c.has_rule(Decision::Deny, "file-write*", &filter("subpath", &c, &path)),
                    "{mode}: {path}"
                );
                assert_eq!(write(&c, &path), Decision::Deny, "{mode}: {path}");
                assert_eq!(
                    write(&c, &format!("{path}/inside")),
                    Decision::Deny,
                    "{mode}: {path}/inside"
                );
            }
            assert_eq!(
                c.decide(
                    "file-write-data",
                    Request::file(&format!("{root}/.git/hooks/pre-commit"))
                ),
                Decision::Deny
            );
        }
        if mode == SandboxMode::Chat {
            // Without globs, a nested `.bashrc` is an ordinary file.
            assert_eq!(write(&c, "/Users/dev/proj/sub/.bashrc"), Decision::Allow);
        }
    }
}

#[test]
fn protected_paths_are_never_writable() {
    for mode in SandboxMode::ALL {
        let spec = SandboxSpec {
            mode,
            ..locked_spec()
        };
        let c = checked(&spec, Variant::Dispatch);
        for p in ["/Users/dev/checkouts/main", "/Users/dev/proj/golden"] {
            assert!(
                c.has_rule(Decision::Deny, "file-write*", &filter("subpath", &c, p)),
                "{p}"
            );
            assert_eq!(
                write(&c, &format!("{p}/src/lib.rs")),
                Decision::Deny,
                "{mode}: {p}"
            );
            assert_eq!(
                c.decide("file-write-unlink", Request::dir(p)),
                Decision::Deny,
                "{mode}: {p}"
            );
        }
    }
    let spec = SandboxSpec {
        protected_paths: vec!["/Users/dev/proj/golden".into()],
        ..terminal_spec()
    };
    let c = checked(&spec, Variant::Terminal);
    assert_eq!(
        write(&c, "/Users/dev/proj/golden/x"),
        Decision::Deny,
        "terminal too"
    );
    assert_eq!(write(&c, "/Users/dev/proj/other/x"), Decision::Allow);
}

#[test]
fn glob_regexes_are_present_for_every_glob_and_root() {
    for spec in [chat_spec(), locked_spec()] {
        let c = checked(&spec, Variant::Dispatch);
        let mut roots: Vec<String> = c
            .rules()
            .iter()
            .filter(|r| r.decision == Decision::Allow && r.ops == ["file-write*"])
            .filter_map(|r| match r.filters.as_slice() {
                [f] if f.head() == Some("subpath") => c
                    .param_value(match f.args() {
                        [p] => match p.args() {
                            [Sexpr::Str(n)] => n,
                            _ => return None,
                        },
                        _ => return None,
                    })
                    .map(str::to_owned),
                _ => None,
            })
            .collect();
        roots.push(HOME.to_owned());
        assert!(roots.len() >= 3, "{roots:?}");
        for text in &spec.write_deny_globs {
            let glob = Glob::parse(text).unwrap();
            if glob.existing_only() {
                // No write deny of its own (an `existing:**/.git` fragment
                // may still be the structural prefix of another glob's
                // unlink deny on directories).
                for root in &roots {
                    let own = Sexpr::parse_one(&format!(
                        "(regex (string-append \"^\" {} {}))",
                        param(&c, &regex_escape(root)),
                        sb_string(&format!("{}$", glob_fragment(glob.segments())))
                    ))
                    .unwrap();
                    assert!(
                        !c.has_rule(Decision::Deny, "file-write*", &own),
                        "{text}: existing-only globs get no regex"
                    );
                }
                continue;
            }
            for root in roots.iter().filter(|r| !glob.home_only() || *r == HOME) {
                let want = Sexpr::parse_one(&format!(
                    "(regex (string-append \"^\" {} {}))",
                    param(&c, &regex_escape(root)),
                    sb_string(&format!("{}$", glob_fragment(glob.segments())))
                ))
                .unwrap();
                assert!(
                    c.has_rule(Decision::Deny, "file-write*", &want),
                    "{text} at {root}"
                );
            }
        }
    }
}

#[test]
fn glob_regexes_match_exactly_what_the_glob_language_matches() {
    let mut globs: Vec<&str> = DEFAULT_GLOBS.to_vec();
    globs.extend([
        "config/?.txt",
        "a/**/b/*.c",
        "**/x?y*",
        "lit.txt",
        "**/we\"ird name.t+t",
    ]);
    let rels = [
        ".env",
        "a/.env",
        "a/b/c/.env",
        ".env.local",
        "x.env",
        ".envrc",
        "x.pem",
        "d/x.pem",
        ".pem",
        "x.pem.bak",
        "node_modules/x.pem",
        "a/node_modules/b/x.pem",
        "site-packages/k.key",
        ".venv/a/b.key",
        "venv/b.key",
        "node_modules",
        "node_modules/.env",
        ".bashrc",
        "a/.bashrc",
        ".git/hooks",
        ".git/hooks/pre-commit",
        "s/.git/hooks/x/y",
        ".git/config",
        "s/.git/config",
        ".git/configx",
        ".git/HEAD",
        ".claude",
        ".claude/settings.json",
        "x/.claude",
        ".mcp.json",
        "config/a.txt",
        "config/ab.txt",
        "x/config/a.txt",
        "config/.txt",
        "a/b/x.c",
        "a/q/r/b/x.c",
        "a/b/c/x.c",
        "b/x.c",
        "xay",
        "m/xzyzz",
        "xy",
        "lit.txt",
        "d/lit.txt",
        "litXtxt",
        "d/we\"ird name.t+t",
        "we\"ird name.ttt",
        "a.b/c(d)/[e]/.env",
    ];
    for text in globs {
        let glob = Glob::parse(text).unwrap();
        let root = "/Users/dev/a.b+(c)";
        let deny = Regex::new(&format!(
            "^{}{}$",
            regex_escape(root),
            glob_fragment(glob.segments())
        ))
        .unwrap();
        let exempt = match glob.segments() {
            [Segment::AnyDepth, Segment::Name(name)] => Some(
                Regex::new(&format!(
                    "^{}{}$",
                    regex_escape(root),
                    dependency_fragment(&[name])
                ))
                .unwrap(),
            ),
            _ => None,
        };
        for rel in rels {
            let segs: Vec<&str> = rel.split('/').collect();
            let path = format!("{root}/{rel}");
            let profile =
                deny.is_match(&path) && !exempt.as_ref().is_some_and(|e| e.is_match(&path));
            assert_eq!(profile, glob.matches(&segs), "glob {text:?}, path {rel:?}");
            // The root is matched literally: a lookalike root matches nothing.
            assert!(
                !deny.is_match(&format!("/Users/dev/aXb+(c)/{rel}")),
                "{text} {rel}"
            );
            assert!(
                !deny.is_match(&format!("/Users/dev/a.bb(c)/{rel}")),
                "{text} {rel}"
            );
        }
    }
}

/// What the shared glob language (and the Linux guard) decides for a write:
/// the deepest place decides writability; then globs relative to every
/// writable root and $HOME, mandatory names, protected paths and secrets
/// deny.
struct Oracle {
    places: Vec<(String, bool)>,
    roots: Vec<String>,
    globs: GlobSet,
    mandatory: bool,
    protected: Vec<String>,
    secrets: Vec<String>,
}

impl Oracle {
    fn denies(&self, path: &str) -> bool {
        let writable = self
            .places
            .iter()
            .filter(|(p, _)| is_under(path, p))
            .max_by_key(|(p, _)| depth(p))
            .is_some_and(|(_, w)| *w);
        let rel = |root: &str| {
            path.strip_prefix(root)
                .map(|r| r.trim_start_matches('/').to_owned())
        };
        let glob = self.roots.iter().any(|root| {
            is_under(path, root)
                                // Seatbelt carries `existing:` globs by the mandatory denies only.
                && rel(root).is_some_and(|r| {
                    !r.is_empty()
                        && self
                            .globs
                            .forbidding_creation(&r, root == HOME)
                            .is_some()
                })
        });
        let mandatory = self.mandatory
            && self.roots.iter().any(|root| {
                mandatory_write_deny()
                    .iter()
                    .any(|(name, _)| is_under(path, &format!("{root}/{name}")))
            });
        let listed = |list: &[String]| list.iter().any(|p| is_under(path, p));
        !writable || glob || mandatory || listed(&self.protected) || listed(&self.secrets)
    }
}

#[test]
fn glob_denies_agree_with_the_shared_glob_language() {
    let nested = "/Users/dev/proj/vendor/ro";
    let spec = SandboxSpec {
        bind_mounts: vec![
            bind(PROJ, false),
            bind(nested, true),
            bind("/Users/dev/proj/vendor/ro/rw-again", false),
            bind("/Users/dev/code/node_modules/pkg", false),
        ],
        write_deny_globs: DEFAULT_GLOBS
            .iter()
            .map(|g| (*g).to_owned())
            .chain(["config/?.txt".to_owned()])
            .collect(),
        ..chat_spec()
    };
    let c = checked(&spec, Variant::Dispatch);
    let writable = [
        PROJ,
        "/Users/dev/proj/vendor/ro/rw-again",
        "/Users/dev/code/node_modules/pkg",
        RUNNER_RESOLVED,
    ];
    let oracle = Oracle {
        places: writable
            .iter()
            .map(|p| ((*p).to_owned(), true))
            .chain([(nested.to_owned(), false)])
            .collect(),
        roots: writable
            .iter()
            .map(|p| (*p).to_owned())
            .chain([HOME.to_owned()])
            .collect(),
        globs: GlobSet::parse(&spec.write_deny_globs).unwrap(),
        mandatory: true,
        protected: vec![],
        secrets: home_secrets()
            .iter()
            .map(|(s, _)| format!("{HOME}/{s}"))
            .collect(),
    };
    let samples = [
        (".env", true),
        ("a/b/.env", true),
        ("node_modules/x/.env", false),
        ("node_modules/x/cert.pem", false),
        (".venv/lib/k.key", false),
        ("venv/k.key", true),
        ("node_modules/x/.git/hooks/post", true),
        ("x.pem.txt", false),
        ("src/main.rs", false),
        (".bashrc", true),
        ("sub/.bashrc", false),
        (".claude/settings.json", true),
        ("config/a.txt", true),
        ("config/ab.txt", false),
        ("x/config/a.txt", false),
        (".git/config", true),
        // `existing:**/.git/config`: only the mandatory deny at the top of a root.
        ("lib/.git/config", false),
        (".git/HEAD", false),
        ("vendor/ro/file", true),
        ("vendor/ro/node_modules/x.pem", true),
        ("vendor/ro/rw-again/file", false),
        ("vendor/ro/rw-again/node_modules/a.pem", false),
        ("vendor/ro/rw-again/a.pem", true),
        ("vendor/ro/rw-again/.bashrc", true),
    ];
    let mut checked_paths = 0;
    for (rel, want) in samples {
        let path = format!("{PROJ}/{rel}");
        assert_eq!(oracle.denies(&path), want, "oracle, {path}");
        assert_eq!(write(&c, &path) == Decision::Deny, want, "profile, {path}");
        checked_paths += 1;
    }
    for (path, want) in [
        ("/Users/dev/code/node_modules/pkg/a.pem", true),
        (
            "/Users/dev/code/node_modules/pkg/node_modules/b/a.pem",
            false,
        ),
        ("/Users/dev/code/node_modules/pkg/index.js", false),
        ("/Users/dev/code/node_modules/pkg/.env", true),
        ("/private/tmp/cc_server/s1/.env", true),
        ("/private/tmp/cc_server/s1/cache/x", false),
        ("/private/tmp/cc_server/s1/node_modules/a.pem", false),
        ("/private/tmp/cc_server/s1/.git/hooks/x", true),
        ("/Users/dev/notes.txt", true),
        ("/Users/dev/.ssh/config", true),
        ("/private/tmp/other", true),
    ] {
        assert_eq!(oracle.denies(path), want, "oracle, {path}");
        assert_eq!(write(&c, path) == Decision::Deny, want, "profile, {path}");
        checked_paths += 1;
    }
    assert_eq!(checked_paths, 35);
}

#[test]
fn in_the_terminal_home_relative_and_workdir_relative_globs_combine() {
    let spec = SandboxSpec {
        guest_workdir: Some("/Users/dev/code/node_modules/tool".into()),
        ..terminal_spec()
    };
    let c = checked(&spec, Variant::Terminal);
    let oracle = Oracle {
        places: vec![
            (HOME.to_owned(), true),
            ("/Users/dev/code/node_modules/tool".to_owned(), true),
        ],
        roots: vec![
            HOME.to_owned(),
            "/Users/dev/code/node_modules/tool".to_owned(),
        ],
        globs: GlobSet::parse(&spec.write_deny_globs).unwrap(),
        mandatory: false,
        protected: vec![],
        secrets: terminal_secrets()
            .iter()
            .map(|(s, _)| format!("{HOME}/{s}"))
            .collect(),
    };
    for (path, want) in [
        ("/Users/dev/code/node_modules/tool/a.pem", true),
        ("/Users/dev/code/node_modules/other/a.pem", false),
        (
            "/Users/dev/code/node_modules/tool/node_modules/x/a.pem",
            false,
        ),
        ("/Users/dev/.env", true),
        ("/Users/dev/x/.env", true),
        ("/Users/dev/.bashrc", true),
        ("/Users/dev/x/.bashrc", false),
        ("/Users/dev/.claude/x", true),
        ("/Users/dev/src/main.rs", false),
        // A tool config that names programs (SPEC G5).
        ("/Users/dev/.npmrc", true),
        ("/Users/dev/.ssh/authorized_keys", true),
        ("/private/tmp/x", true),
    ] {
        assert_eq!(oracle.denies(path), want, "oracle, {path}");
        assert_eq!(write(&c, path) == Decision::Deny, want, "profile, {path}");
    }
}

#[test]
fn root_paths_are_escaped_where_regexes_use_them() {
    let weird = "/Users/dev/we.ird+(x)[y]{z}$^|*?\\ \"q\"";
    let mut r = resolver();
    r.add(weird);
    let spec = SandboxSpec {
        bind_mounts: vec![bind(weird, false)],
        runner_state_dirs: vec![],
        write_deny_globs: vec!["**/.env".into()],
        ..chat_spec()
    };
    let tag = tag();
    let profile = generate(
        &ProfileInput {
            spec: &spec,
            home: Path::new(HOME),
            proxy: PORTS,
            tag: &tag,
            variant: Variant::Dispatch,
        },
        &r,
    )
    .unwrap();
    let c = profile.check().unwrap();
    assert_eq!(write(&c, &format!("{weird}/src/x")), Decision::Allow);
    assert_eq!(write(&c, &format!("{weird}/src/.env")), Decision::Deny);
    let lookalike = "/Users/dev/weXird+(x)[y]{z}$^|*?\\ \"q\"";
    assert!(
        !Regex::new(&format!("^{}(/[^/]+)*/\\.env$", regex_escape(weird)))
            .unwrap()
            .is_match(&format!("{lookalike}/.env"))
    );
    assert!(c.param_named(&regex_escape(weird)).is_some());
    assert!(
        !profile.text.contains("we.ird"),
        "the root is a parameter, not text"
    );
}

#[test]
fn unlink_is_denied_on_every_denied_path_and_its_ancestors() {
    let c = checked(&locked_spec(), Variant::Dispatch);
    let mut denied: Vec<String> = vec![
        "/Users/dev/checkouts/main".into(),
        "/Users/dev/proj/golden".into(),
        format!("{HOME}/.ssh"),
        format!("{HOME}/Library/Keychains"),
        "/private/etc/master.passwd".into(),
    ];
    for root in [PROJ, RUNNER, RUNNER_RESOLVED, HOME] {
        for name in [".bashrc", ".git/hooks", ".git/config", ".claude"] {
            denied.push(format!("{root}/{name}"));
        }
    }
    for path in &denied {
        assert!(
            c.has_rule(
                Decision::Deny,
                "file-write-unlink",
                &filter("subpath", &c, path)
            ),
            "{path}"
        );
        for ancestor in Path::new(path).ancestors().skip(1) {
            let a = ancestor.to_str().unwrap();
            if a == "/" {
                continue;
            }
            assert!(
                c.has_rule(
                    Decision::Deny,
                    "file-write-unlink",
                    &filter("literal", &c, a)
                ),
                "ancestor {a} of {path}"
            );
            assert_eq!(
                c.decide("file-write-unlink", Request::dir(a)),
                Decision::Deny,
                "{a}"
            );
        }
    }
    // Directories a glob could match inside (the structural-prefix rule).
    let set = GlobSet::parse(&locked_spec().write_deny_globs).unwrap();
    for (rel, dir) in [
        (".git", true),
        ("sub/.git", true),
        ("sub/.git/hooks", true),
        ("config", true),
        ("src", false),
        ("sub/.github", false),
        ("node_modules/pkg", false),
    ] {
        assert_eq!(set.guards_inside(rel, false), dir, "{rel}");
        let want = if dir { Decision::Deny } else { Decision::Allow };
        assert_eq!(
            c.decide("file-write-unlink", Request::dir(&format!("{PROJ}/{rel}"))),
            want,
            "{rel}"
        );
    }
    // Files are not directories: removing a file named like one is fine.
    assert_eq!(
        c.decide(
            "file-write-unlink",
            Request::file(&format!("{PROJ}/sub/.git"))
        ),
        Decision::Allow
    );
    assert_eq!(
        c.decide(
            "file-write-unlink",
            Request::file(&format!("{PROJ}/src/a.rs"))
        ),
        Decision::Allow
    );
}

#[test]
fn exec_is_denied_in_writable_dirs_and_reopened_by_grants() {
    let spec = SandboxSpec {
        exec_grant_roots: [
            locked_spec().exec_grant_roots,
            vec!["/usr/bin".into(), "/bin".into()],
        ]
        .concat(),
        ..locked_spec()
    };
    let c = checked(&spec, Variant::Dispatch);
    let exec = |p: &str| c.decide("process-exec", Request::file(p));
    for root in [PROJ, RUNNER, RUNNER_RESOLVED] {
        assert!(
            c.has_rule(Decision::Deny, "process-exec", &filter("subpath", &c, root)),
            "{root}"
        );
    }
    assert_eq!(exec("/Users/dev/proj/a.out"), Decision::Deny);
    assert_eq!(exec("/private/tmp/cc_server/s1/dropped"), Decision::Deny);
    assert_eq!(
        exec("/Users/dev/proj/node_modules/.bin/tsc"),
        Decision::Allow,
        "F5 grant"
    );
    assert_eq!(
        exec("/private/tmp/cc_server/s1/bin/tool"),
        Decision::Allow,
        "grant, resolved spelling"
    );
    assert_eq!(exec("/usr/bin/git"), Decision::Allow);
    for (bin, _) in DANGEROUS_BINARIES {
        assert_eq!(
            exec(bin),
            Decision::Deny,
            "{bin} stays denied under a grant of its directory"
        );
    }
    // Review: the binds are not writable, so not exec-denied; runner dirs are.
    let review = SandboxSpec {
        mode: SandboxMode::Review,
        exec_grant_roots: vec![],
        ..locked_spec()
    };
    let c = checked(&review, Variant::Dispatch);
    assert_eq!(
        c.decide("process-exec", Request::file("/Users/dev/proj/a.out")),
        Decision::Allow
    );
    assert_eq!(
        c.decide("process-exec", Request::file("/private/tmp/cc_server/s1/x")),
        Decision::Deny
    );
    // The terminal runs the person's own tools from $HOME.
    let c = checked(&terminal_spec(), Variant::Terminal);
    assert_eq!(
        c.decide("process-exec", Request::file("/Users/dev/.cargo/bin/cargo")),
        Decision::Allow
    );
    assert_eq!(
        c.decide("process-exec", Request::file("/usr/bin/osascript")),
        Decision::Deny
    );
}

#[test]
fn network_is_only_the_proxy_ports_and_dns() {
    let c = checked(&chat_spec(), Variant::Dispatch);
    let out = |r| c.decide("network-outbound", r);
    assert!(c.has_unfiltered(Decision::Deny, "network*"));
    assert_eq!(out(Request::RemoteIp("localhost:41001")), Decision::Allow);
    assert_eq!(out(Request::RemoteIp("localhost:41002")), Decision::Allow);
    assert_eq!(
        out(Request::RemoteIp("localhost:8080")),
        Decision::Deny,
        "no general loopback"
    );
    assert_eq!(out(Request::RemoteIp("93.184.216.34:443")), Decision::Deny);
    assert_eq!(
        out(Request::UnixSocket("/private/var/run/mDNSResponder")),
        Decision::Allow,
        "DNS"
    );
    assert_eq!(
        out(Request::UnixSocket("/private/var/run/docker.sock")),
        Decision::Deny,
        "no unix sockets"
    );
    assert_eq!(
        c.decide("network-bind", Request::RemoteIp("localhost:41001")),
        Decision::Deny
    );
    assert_eq!(
        c.decide("network-inbound", Request::RemoteIp("localhost:41001")),
        Decision::Deny
    );
    let allows: Vec<String> = c
        .rules()
        .iter()
        .filter(|r| r.decision == Decision::Allow && r.ops.iter().any(|o| o.starts_with("network")))
        .map(|r| {
            r.filters
                .iter()
                .map(ToString::to_string)
                .collect::<String>()
        })
        .collect();
    assert_eq!(allows.len(), 4, "{allows:?}");
    // Network off: the proxies (which refuse everything, SPEC E5), no DNS.
    let c = checked(&locked_spec(), Variant::Dispatch);
    assert_eq!(
        c.decide("network-outbound", Request::RemoteIp("localhost:41001")),
        Decision::Allow
    );
    assert_eq!(
        c.decide(
            "network-outbound",
            Request::UnixSocket("/private/var/run/mDNSResponder")
        ),
        Decision::Deny
    );
    // No proxies: nothing at all.
    let p = generate_with(&chat_spec(), Variant::Dispatch, ProxyPorts::default());
    let c = p.check().unwrap();
    assert_eq!(
        c.decide("network-outbound", Request::RemoteIp("localhost:41001")),
        Decision::Deny
    );
    // The terminal's network is open (D2).
    let c = checked(&terminal_spec(), Variant::Terminal);
    assert_eq!(
        c.decide("network-outbound", Request::RemoteIp("93.184.216.34:443")),
        Decision::Allow
    );
}

#[test]
fn apple_events_and_launch_services_are_denied_in_every_variant() {
    for (spec, variant) in [
        (chat_spec(), Variant::Dispatch),
        (terminal_spec(), Variant::Terminal),
    ] {
        let c = checked(&spec, variant);
        assert_eq!(c.decide("appleevent-send", Request::Plain), Decision::Deny);
        assert_eq!(c.decide("lsopen", Request::Plain), Decision::Deny);
        for name in [
            "com.apple.coreservices.launchservicesd",
            "com.apple.coreservices.appleevents",
            "com.apple.lsd.mapdb",
            "com.apple.lsd.open",
        ] {
            assert_eq!(
                c.decide("mach-lookup", Request::GlobalName(name)),
                Decision::Deny,
                "{name}"
            );
        }
        assert_eq!(
            c.decide(
                "mach-lookup",
                Request::GlobalName("com.apple.system.logger")
            ),
            Decision::Allow
        );
        assert_eq!(
            c.decide("mach-lookup", Request::GlobalName("com.apple.lsdx")),
            Decision::Allow,
            "the pattern is anchored at the dot"
        );
    }
}

#[test]
fn the_terminal_profile_follows_d2() {
    let c = checked(&terminal_spec(), Variant::Terminal);
    assert_eq!(
        write(&c, "/Users/dev/Documents/x"),
        Decision::Allow,
        "$HOME writable"
    );
    assert_eq!(
        write(&c, "/Users/dev/proj/src/x"),
        Decision::Allow,
        "workdir writable"
    );
    assert_eq!(write(&c, "/private/tmp/x"), Decision::Deny);
    for (rel, _) in terminal_secrets() {
        let p = format!("{HOME}/{rel}/x");
        assert_eq!(
            c.decide("file-read-data", Request::file(&p)),
            Decision::Deny,
            "{p}"
        );
    }
    assert_eq!(
        c.decide("file-read-data", Request::file("/Users/dev/.npmrc")),
        Decision::Allow
    );
    assert!(
        !c.has_unfiltered(Decision::Deny, "network*"),
        "network open"
    );
    let no_workdir = SandboxSpec {
        guest_workdir: None,
        ..terminal_spec()
    };
    let tag = tag();
    let err = generate(
        &ProfileInput {
            spec: &no_workdir,
            home: Path::new(HOME),
            proxy: PORTS,
            tag: &tag,
            variant: Variant::Terminal,
        },
        &resolver(),
    )
    .unwrap_err();
    assert_eq!(err, ProfileError::NoTerminalWorkdir);
}

#[test]
fn spellings_follow_the_resolver() {
    let mut r = StaticResolver::macos();
    r.add("/private/var/folders/zz/abc/T").add("/Users/dev");
    let s = |p: &str| spellings("test", Path::new(p), &r).unwrap();
    assert_eq!(
        s("/tmp/x"),
        ["/tmp/x", "/private/tmp/x"],
        "a new name under /tmp"
    );
    assert_eq!(s("/tmp"), ["/tmp", "/private/tmp"]);
    assert_eq!(
        s("/var/folders/zz/abc/T/cc"),
        [
            "/var/folders/zz/abc/T/cc",
            "/private/var/folders/zz/abc/T/cc"
        ]
    );
    assert_eq!(
        s("/Users/dev/proj"),
        ["/Users/dev/proj"],
        "no symlink: one spelling"
    );
    assert_eq!(
        s("/nonexistent/thing"),
        ["/nonexistent/thing"],
        "unresolvable: kept as written"
    );
    assert_eq!(
        s("/private/tmp/x/"),
        ["/private/tmp/x"],
        "trailing slash normalised"
    );
    let nothing = StaticResolver::default();
    assert_eq!(
        spellings("t", Path::new("/tmp/x"), &nothing).unwrap(),
        ["/tmp/x"]
    );

    // In a profile: both spellings of paths, globs left alone.
    let spec = SandboxSpec {
        write_deny_globs: vec!["tmp/*.pem".into(), "var/**/x".into()],
        protected_paths: vec!["/nonexistent/checkout".into()],
        ..chat_spec()
    };
    let profile = generate_with(&spec, Variant::Dispatch, PORTS);
    let values: Vec<&str> = profile.params.iter().map(|(_, v)| v.as_str()).collect();
    for v in [
        RUNNER,
        RUNNER_RESOLVED,
        REPOS,
        REPOS_RESOLVED,
        "/nonexistent/checkout",
        "/etc/sudoers",
        "/private/etc/sudoers",
    ] {
        assert!(values.contains(&v), "{v}");
    }
    assert!(!values.iter().any(|v| v.starts_with("/private/nonexistent")));
    assert!(
        profile
            .text
            .contains("\"/[tT][mM][pP]/[^/]*\\\\.[pP][eE][mM]$\""),
        "the glob is as written, in either case"
    );
    assert!(profile.text.contains("\"/[vV][aA][rR](/[^/]+)*/[xX]$\""));
    assert!(!profile.text.contains("/private/tmp/[^/]"));
}

#[test]
fn specs_the_profile_cannot_express_fail_closed() {
    let cases: Vec<(SandboxSpec, &str)> = vec![
        (
            SandboxSpec {
                bind_mounts: vec![bind("relative/dir", false)],
                ..chat_spec()
            },
            "not an absolute path",
        ),
        (
            SandboxSpec {
                protected_paths: vec!["/Users/dev/proj/../x".into()],
                ..chat_spec()
            },
            "`..`",
        ),
        (
            SandboxSpec {
                runner_state_dirs: vec!["/tmp/a\nb".into()],
                ..chat_spec()
            },
            "control character",
        ),
        (
            SandboxSpec {
                bind_mounts: vec![SandboxBindMount {
                    host_path: PROJ.into(),
                    guest_path: Some("/workspace".into()),
                    read_only: false,
                }],
                ..chat_spec()
            },
            "guestPath",
        ),
        (
            SandboxSpec {
                write_deny_globs: vec!["/abs/*.pem".into()],
                ..chat_spec()
            },
            "relative",
        ),
        (
            SandboxSpec {
                write_deny_globs: vec!["**/a\u{7}b".into()],
                ..chat_spec()
            },
            "control character",
        ),
    ];
    let tag = tag();
    for (spec, why) in cases {
        let err = generate(
            &ProfileInput {
                spec: &spec,
                home: Path::new(HOME),
                proxy: PORTS,
                tag: &tag,
                variant: Variant::Dispatch,
            },
            &resolver(),
        )
        .unwrap_err();
        assert!(err.to_string().contains(why), "{why}: {err}");
    }
    // A guest path equal to the host path is fine.
    let same = SandboxSpec {
        bind_mounts: vec![SandboxBindMount {
            host_path: PROJ.into(),
            guest_path: Some(PROJ.into()),
            read_only: false,
        }],
        ..chat_spec()
    };
    generate_with(&same, Variant::Dispatch, PORTS);
}

#[test]
fn sb_strings_and_regex_escapes_round_trip() {
    for text in [
        "plain",
        "a\"b",
        "a\\b",
        "\\\"",
        "(deny default)\")(allow default",
    ] {
        let parsed = Sexpr::parse_one(&sb_string(text)).unwrap();
        assert_eq!(parsed, Sexpr::str(text));
    }
    for text in ["/a.b", "/a+b(c)|d", "/[x]{2}", "/^$", "/a\\b", "/*?"] {
        let re = Regex::new(&format!("^{}$", regex_escape(text))).unwrap();
        assert!(re.is_match(text), "{text}");
        assert!(!re.is_match(&format!("{text}x")), "{text}");
        assert!(
            !re.is_match(&text.replace(|c: char| !c.is_alphanumeric() && c != '/', "Z")),
            "{text}"
        );
    }
}

#[cfg(unix)]
#[test]
fn the_real_resolver_gives_both_spellings_of_a_symlinked_dir() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let real = std::fs::canonicalize(&real).unwrap();
    let got = spellings("test", &link.join("new/name"), &RealResolver).unwrap();
    assert_eq!(
        got,
        [
            link.join("new/name").to_str().unwrap(),
            real.join("new/name").to_str().unwrap()
        ],
        "a name that does not exist yet, below a symlink"
    );
}

#[test]
fn a_root_of_slash_needs_no_parameter() {
    let spec = SandboxSpec {
        bind_mounts: vec![bind("/", false)],
        runner_state_dirs: vec![],
        write_deny_globs: vec!["**/.env".into()],
        ..chat_spec()
    };
    let c = checked(&spec, Variant::Dispatch);
    assert_eq!(write(&c, "/.env"), Decision::Deny);
    assert_eq!(write(&c, "/srv/app/.env"), Decision::Deny);
    assert_eq!(write(&c, "/srv/app/x"), Decision::Allow);
}

/// SPEC G5: names match in any case (`X.PEM`, `id.KEY`: macOS
/// ignores case), and `~/` globs deny in `$HOME` only — the home's `bin/`
/// is a `PATH` directory, a project's is its own.
#[test]
fn globs_ignore_case_and_home_globs_stay_at_home() {
    let c = checked(&terminal_spec(), Variant::Terminal);
    for path in [
        "/Users/dev/proj/X.PEM",
        "/Users/dev/proj/id.KEY",
        "/Users/dev/proj/.GIT/HOOKS/pre-commit",
        "/Users/dev/bin/git",
        "/Users/dev/.local/bin/git",
        "/Users/dev/.gitconfig",
        "/Users/dev/.ssh/authorized_keys",
        "/Users/dev/.config/nvim/init.lua",
        "/Users/dev/proj/.envrc",
    ] {
        assert_eq!(write(&c, path), Decision::Deny, "{path}");
    }
    for path in [
        "/Users/dev/proj/bin/tool",
        "/Users/dev/proj/.local/bin/x",
        "/Users/dev/proj/.git/hooks",
        "/Users/dev/proj/X.PEM.txt",
    ] {
        assert_eq!(write(&c, path), Decision::Allow, "{path}");
    }
}
