//! What this backend cannot enforce, it refuses (fail closed; SPEC C1, C3,
//! F3). A 9p export is a whole directory tree, and the guest is root in its
//! own kernel: nothing inside an export can be masked or kept read-only.
//! So a spec is refused when it
//! - asks for resource limits (SPEC G6; not built for this backend yet);
//! - asks for filename-glob write denies (no create-time guard here);
//! - has a protected path inside a writable bind, or a writable bind at or
//!   inside a protected path;
//! - would show a home secret (`~/.ssh`, `~/.aws`, …) through a bind, or
//!   the server's runtime dir ([`holds_server_state`]);
//! - would make a mandatory-deny name writable (a shell rc file, a git hook
//!   or config, a repository's `.git`, a tool's or an agent's config) that
//!   exists in a writable bind or in `$HOME` when a writable bind shows it
//!   (and the home's own names there: `~/bin`, `~/.local/bin`, editor
//!   startup files, …);
//! - binds any part of the home writable where the home allowlist keeps
//!   it read-only (SPEC G5: the home or a directory above it, or a
//!   dot-path below it such as `~/.config`): a 9p export cannot keep the
//!   home's dot-paths read-only while the rest is writable, so this
//!   backend keeps refusing writable home binds; a project below the home
//!   (`~/proj`) is fine.
//!
//! Pure: `exists` is asked about paths, so the rules are table-tested.

use std::path::{Path, PathBuf};

use sandbox_paths::allowlists::home::kept_part;
use sandbox_paths::secrets::{HOME_SECRETS, HOME_WRITE_DENY, MANDATORY_WRITE_DENY};
use sandbox_plugin_api::SandboxSpec;

/// A repository's `.git`, refused in a writable bind after the mandatory
/// names (which name the usual reason first).
const GIT_DIR: (&str, &str) = (
    ".git",
    "git reads its config, its `gitdir:` and its submodules' and worktrees' config and hooks from it",
);

use super::argv::Share;

/// Why `spec` (with these `shares`) must be refused, or `None`.
pub fn refusal(
    spec: &SandboxSpec,
    shares: &[Share],
    home: Option<&Path>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<String> {
    if !spec.limits.is_empty() {
        return Some(
            "the spec asks for resource limits (`limits`), which the microvm backend does not enforce yet; remove `limits` from the spec, or use bwrap".into(),
        );
    }
    if !spec.write_deny_globs.is_empty() {
        return Some(format!(
            "the spec has filename-glob write denies ({}), which the microvm backend cannot enforce inside a 9p export; lower [dispatch_policy] write_deny_globs explicitly to use it, or use a backend with fs.deny-glob-on-create",
            spec.write_deny_globs.join(", ")
        ));
    }
    for share in shares.iter().filter(|s| !s.read_only) {
        if let Some(p) = spec
            .protected_paths
            .iter()
            .find(|p| p.starts_with(&share.host))
        {
            return Some(format!(
                "protected path {} is inside the writable bind {}, and a 9p export cannot keep part of itself read-only; bind it read-only",
                p.display(),
                share.host.display()
            ));
        }
        if let Some(p) = spec
            .protected_paths
            .iter()
            .find(|p| share.host.starts_with(p))
        {
            return Some(format!(
                "the writable bind {} is inside the protected path {}, which is never writable (SPEC F3); bind it read-only",
                share.host.display(),
                p.display()
            ));
        }
    }
    if let Some(home) = home {
        for share in shares {
            for (rel, why) in HOME_SECRETS {
                let secret = home.join(rel);
                if secret.starts_with(&share.host) && exists(&secret) {
                    return Some(format!(
                        "the bind {} would show {} ({why}) to the guest, and the microvm backend cannot mask it; bind a directory that does not contain it",
                        share.host.display(),
                        secret.display()
                    ));
                }
            }
        }
    }
    for share in shares.iter().filter(|s| !s.read_only) {
        let mut roots: Vec<PathBuf> = vec![share.host.clone()];
        roots.extend(
            home.filter(|h| h.starts_with(&share.host))
                .map(Path::to_path_buf),
        );
        let at_home = home.filter(|h| h.starts_with(&share.host));
        let home_names = HOME_WRITE_DENY.iter().map(move |n| (at_home, n));
        let names = roots
            .iter()
            .flat_map(|root| {
                MANDATORY_WRITE_DENY
                    .iter()
                    .map(move |n| (Some(root.as_path()), n))
            })
            .chain(home_names)
            // A repository's `.git` (a `gitdir:` file, or a directory whose
            // submodules' and worktrees' config sits deeper).
            .chain(std::iter::once((Some(share.host.as_path()), &GIT_DIR)));
        for (root, (name, why)) in names {
            let Some(root) = root else { continue };
            let path = root.join(name);
            if exists(&path) {
                return Some(format!(
                    "{} exists in the writable bind {} ({why}); the microvm backend cannot keep it read-only inside a 9p export, so it refuses: bind the directory read-only, or use bwrap",
                    path.display(),
                    share.host.display()
                ));
            }
        }
    }
    if let Some(home) = home
        && let Some(share) = shares.iter().find(|s| {
            !s.read_only
                && (home.starts_with(&s.host)
                    || s.host
                        .strip_prefix(home)
                        .is_ok_and(|rel| kept_part(rel).is_some()))
        })
    {
        return Some(format!(
            "the writable bind {} holds part of the home {}, whose dot-paths the home allowlist keeps read-only (SPEC G5, docs/threat-model.md §4); a 9p export cannot keep part of itself read-only, so the microvm backend refuses writable home binds: bind a project directory below the home, bind it read-only, or use bwrap",
            share.host.display(),
            home.display()
        ));
    }
    None
}

/// Why a share must be refused for holding the server's runtime dir
/// (`state`: every session's proxy sockets, saved VM templates), which bwrap
/// masks inside such a bind and a 9p export cannot; or `None`.
pub fn holds_server_state(shares: &[Share], state: &Path) -> Option<String> {
    let share = shares.iter().find(|s| state.starts_with(&s.host))?;
    Some(format!(
        "the bind {} holds the server's runtime directory {} (every session's proxy sockets, saved VM templates), which the microvm backend cannot hide inside a 9p export; bind a directory that does not hold it, or use bwrap",
        share.host.display(),
        state.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(host: &str, read_only: bool) -> Share {
        Share {
            tag: "share0".into(),
            host: host.into(),
            guest: host.into(),
            read_only,
        }
    }

    fn spec() -> SandboxSpec {
        SandboxSpec::default()
    }

    fn only(paths: &'static [&'static str]) -> impl Fn(&Path) -> bool {
        move |p: &Path| paths.iter().any(|q| Path::new(q) == p)
    }

    #[test]
    fn a_plain_project_bind_is_accepted() {
        let shares = [share("/work/proj", false), share("/data", true)];
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            refusal(&spec(), &shares, home, &only(&["/home/u/.ssh"])),
            None
        );
    }

    /// G6: limits asked for are refused, never silently dropped.
    #[test]
    fn limits_are_refused() {
        let spec = SandboxSpec {
            limits: sandbox_plugin_api::SandboxLimits {
                memory_bytes: Some(1 << 30),
                ..Default::default()
            },
            ..spec()
        };
        let why = refusal(&spec, &[], None, &only(&[])).unwrap();
        assert!(why.contains("`limits`"), "{why}");
    }

    #[test]
    fn globs_are_refused() {
        let spec = SandboxSpec {
            write_deny_globs: vec!["**/.env".into()],
            ..spec()
        };
        let why = refusal(&spec, &[], None, &only(&[])).unwrap();
        assert!(
            why.contains("**/.env") && why.contains("write_deny_globs"),
            "{why}"
        );
    }

    #[test]
    fn a_protected_path_inside_a_writable_bind_is_refused_but_not_in_a_read_only_one() {
        let spec = SandboxSpec {
            protected_paths: vec!["/work/proj/original".into()],
            ..spec()
        };
        let why = refusal(&spec, &[share("/work", false)], None, &only(&[])).unwrap();
        assert!(why.contains("/work/proj/original"), "{why}");
        assert_eq!(
            refusal(&spec, &[share("/work", true)], None, &only(&[])),
            None
        );
        // A writable bind at or below a protected path: refused too.
        for inside in ["/work/proj/original", "/work/proj/original/src"] {
            let why = refusal(&spec, &[share(inside, false)], None, &only(&[])).unwrap();
            assert!(why.contains("bind it read-only"), "{why}");
            assert_eq!(
                refusal(&spec, &[share(inside, true)], None, &only(&[])),
                None
            );
        }
    }

    #[test]
    fn a_bind_showing_a_home_secret_is_refused_even_read_only() {
        let home = Some(Path::new("/home/u"));
        let exists = only(&["/home/u/.aws"]);
        for read_only in [false, true] {
            let why = refusal(&spec(), &[share("/home/u", read_only)], home, &exists).unwrap();
            assert!(why.contains("/home/u/.aws") && why.contains("AWS"), "{why}");
            let why = refusal(&spec(), &[share("/home", read_only)], home, &exists).unwrap();
            assert!(why.contains("/home/u/.aws"), "{why}");
        }
        // A secret that does not exist is nothing to show.
        assert_eq!(
            refusal(&spec(), &[share("/home/u", true)], home, &only(&[])),
            None
        );
    }

    #[test]
    fn an_existing_mandatory_deny_in_a_writable_bind_is_refused() {
        let why = refusal(
            &spec(),
            &[share("/work/repo", false)],
            None,
            &only(&["/work/repo/.git/hooks"]),
        )
        .unwrap();
        assert!(
            why.contains("/work/repo/.git/hooks") && why.contains("git runs"),
            "{why}"
        );
        // Read-only, it cannot be written: fine.
        let ro = refusal(
            &spec(),
            &[share("/work/repo", true)],
            None,
            &only(&["/work/repo/.git/hooks"]),
        );
        assert_eq!(ro, None);
        // $HOME's rc files count when a writable bind shows $HOME.
        let why = refusal(
            &spec(),
            &[share("/home", false)],
            Some(Path::new("/home/u")),
            &only(&["/home/u/.bashrc"]),
        )
        .unwrap();
        assert!(why.contains("/home/u/.bashrc"), "{why}");
        // SPEC G5: the home's PATH directories, and a `.git` file.
        let why = refusal(
            &spec(),
            &[share("/home", false)],
            Some(Path::new("/home/u")),
            &only(&["/home/u/.local/bin"]),
        )
        .unwrap();
        assert!(why.contains("/home/u/.local/bin"), "{why}");
        let why = refusal(
            &spec(),
            &[share("/work/wt", false)],
            None,
            &only(&["/work/wt/.git"]),
        )
        .unwrap();
        assert!(
            why.contains("/work/wt/.git") && why.contains("gitdir"),
            "{why}"
        );
        assert_eq!(
            refusal(
                &spec(),
                &[share("/work/proj", false)],
                None,
                &only(&["/work/proj/bin"])
            ),
            None,
            "a project's bin/ is its own"
        );
    }

    #[test]
    fn a_bind_holding_the_server_state_is_refused() {
        let state = Path::new("/tmp/cc_server-0");
        let why = holds_server_state(&[share("/tmp", true)], state).unwrap();
        assert!(
            why.contains("/tmp/cc_server-0") && why.contains("use bwrap"),
            "{why}"
        );
        assert_eq!(holds_server_state(&[share("/work", false)], state), None);
    }

    /// SPEC G5: a writable bind of the home, of a directory above it or of
    /// a kept part of it is refused, even with nothing named in it yet (a
    /// dot-path made later would reach the host); read-only, or a project
    /// below the home, is fine.
    #[test]
    fn writable_home_binds_are_refused() {
        let home = Some(Path::new("/home/u"));
        for host in [
            "/home/u",
            "/home",
            "/home/u/.config",
            "/home/u/.local/share",
        ] {
            let why = refusal(&spec(), &[share(host, false)], home, &only(&[])).unwrap();
            assert!(
                why.contains("home allowlist") && why.contains("use bwrap"),
                "{why}"
            );
            assert_eq!(
                refusal(&spec(), &[share(host, true)], home, &only(&[])),
                None
            );
        }
        assert_eq!(
            refusal(&spec(), &[share("/home/u/proj", false)], home, &only(&[])),
            None
        );
    }
}
