//! Pure helpers: the forms a path may take, and what a canonical path is by
//! its spelling (a secret, below a hooks directory). No system calls: the
//! kernel decides where a path leads, these only say what a path the kernel
//! resolved is.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use crate::secrets::{HOME_SECRETS, SSH_HOST_KEY_DIR, SYSTEM_SECRETS, is_ssh_host_key};

/// A path relative to a root, split for the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Split {
    /// The root itself (`""`, `"."`).
    Root,
    /// A final name in a directory: `dir` relative to the root (it may hold
    /// `..` and symlinks; the kernel resolves it beneath the root), `name`
    /// one plain name.
    Entry {
        /// The directory part, `""` for the root.
        dir: PathBuf,
        /// The final name: never empty, `.`, `..` or holding `/`.
        name: OsString,
    },
}

/// Splits a root-relative path into its directory and final name. An
/// absolute path, or one ending in `..`, is not a name in a directory.
pub(super) fn split_final(rel: &Path) -> Result<Split, &'static str> {
    let mut parts = relative_components(rel)?;
    match parts.pop() {
        None => Ok(Split::Root),
        Some(Component::Normal(name)) => Ok(Split::Entry {
            dir: parts.iter().collect(),
            name: name.to_os_string(),
        }),
        Some(_) => Err("the path ends in `..`: name the entry itself"),
    }
}

/// A root-relative path as the kernel is given it (`.` for the root).
pub(super) fn whole(rel: &Path) -> Result<PathBuf, &'static str> {
    let parts = relative_components(rel)?;
    if parts.is_empty() {
        return Ok(PathBuf::from("."));
    }
    Ok(parts.iter().collect())
}

fn relative_components(rel: &Path) -> Result<Vec<Component<'_>>, &'static str> {
    if rel.as_os_str().as_encoded_bytes().contains(&0) {
        return Err("a NUL byte in the path");
    }
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => {
                return Err("an absolute path where one relative to a root is needed");
            }
            Component::CurDir => {}
            other => parts.push(other),
        }
    }
    Ok(parts)
}

/// The root an absolute host path lies under, and the rest of it: the
/// longest root spelling (as given or canonical) that is a prefix of it by
/// whole components. The rest may hold `..`: the kernel judges it.
pub(super) fn locate_host<'a>(
    path: &Path,
    spellings: impl IntoIterator<Item = (usize, &'a Path)>,
) -> Option<(usize, PathBuf)> {
    spellings
        .into_iter()
        .filter_map(|(i, root)| {
            let rest = path.strip_prefix(root).ok()?;
            Some((root.components().count(), i, rest.to_path_buf()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, i, rest)| (i, rest))
}

/// The secret `path` (canonical) is at or below, with its description:
/// a `HOME_SECRETS` entry of `home`, a `SYSTEM_SECRETS` entry, or an SSH
/// host key.
pub(super) fn secret(path: &Path, home: Option<&Path>) -> Option<(String, &'static str)> {
    // Asked of every entry a walk meets: nothing is allocated unless it is
    // a secret (the same order as [`secrets`]: the home's first).
    if let Some(rel) = home.and_then(|home| path.strip_prefix(home).ok())
        && let Some((secret, why)) = HOME_SECRETS.iter().find(|(s, _)| rel.starts_with(s))
    {
        return Some((format!("~/{secret}"), *why));
    }
    SYSTEM_SECRETS
        .iter()
        .find(|(at, _)| path.starts_with(at))
        .map(|(at, why)| ((*at).to_owned(), *why))
}

/// The secret below `path` (canonical), when `path` is a directory above
/// one: moving or removing it moves or removes the secret.
pub(super) fn secret_below(path: &Path, home: Option<&Path>) -> Option<(String, &'static str)> {
    secrets(home)
        .find(|(at, _, _)| at.starts_with(path) && at != path)
        .map(|(_, name, why)| (name, why))
}

/// Every secret's path, name in messages and description. SSH host keys
/// are found by name below [`SSH_HOST_KEY_DIR`].
fn secrets(home: Option<&Path>) -> impl Iterator<Item = (PathBuf, String, &'static str)> + '_ {
    let home_secrets = home.into_iter().flat_map(|home| {
        HOME_SECRETS
            .iter()
            .map(move |(rel, why)| (home.join(rel), format!("~/{rel}"), *why))
    });
    let system = SYSTEM_SECRETS
        .iter()
        .map(|(path, why)| (PathBuf::from(path), (*path).to_owned(), *why));
    home_secrets.chain(system)
}

/// Whether `path` (canonical) is an SSH host private key.
pub(super) fn is_host_key(path: &Path) -> bool {
    path.parent() == Some(Path::new(SSH_HOST_KEY_DIR))
        && path
            .file_name()
            .and_then(OsStr::to_str)
            .is_some_and(is_ssh_host_key)
}

/// Whether `path` lies below a git hooks directory: anything below a
/// `.git/hooks` or a `.git/modules/<name>/hooks` (a name holding `/` too),
/// in any ASCII case as the create-time globs match.
pub(super) fn under_git_hooks(path: &Path) -> bool {
    let parts: Vec<&OsStr> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let is = |part: &OsStr, name: &str| {
        part.as_encoded_bytes()
            .eq_ignore_ascii_case(name.as_bytes())
    };
    parts.iter().enumerate().any(|(i, part)| {
        if !is(part, ".git") {
            return false;
        }
        let rest = &parts[i + 1..];
        let direct = rest.len() >= 2 && is(rest[0], "hooks");
        let module = rest.first().is_some_and(|m| is(m, "modules"))
            && (2..rest.len().saturating_sub(1)).any(|j| is(rest[j], "hooks"));
        direct || module
    })
}

/// Whether `new` adds an execute bit `old` lacks.
pub(super) fn adds_exec(old: u32, new: u32) -> bool {
    new & 0o111 & !old != 0
}

/// The name of a temporary file beside a target: never a name the default
/// globs refuse (it is checked anyway), and unique with `O_EXCL`.
pub(super) fn temp_name(pid: u32, n: u64) -> OsString {
    OsString::from(format!(".cc-jail-{pid}-{n}.tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_path_splits_into_directory_and_final_name() {
        let entry = |dir: &str, name: &str| Split::Entry {
            dir: dir.into(),
            name: name.into(),
        };
        assert_eq!(split_final(Path::new("")), Ok(Split::Root));
        assert_eq!(split_final(Path::new(".")), Ok(Split::Root));
        assert_eq!(split_final(Path::new("./")), Ok(Split::Root));
        assert_eq!(split_final(Path::new("a")), Ok(entry("", "a")));
        assert_eq!(split_final(Path::new("a/b/c")), Ok(entry("a/b", "c")));
        assert_eq!(split_final(Path::new("./a//b/./")), Ok(entry("a", "b")));
        assert_eq!(
            split_final(Path::new("../x")),
            Ok(entry("..", "x")),
            "`..` is the kernel's to judge"
        );
        assert!(split_final(Path::new("a/..")).is_err());
        assert!(split_final(Path::new("..")).is_err());
        assert!(split_final(Path::new("/etc/passwd")).is_err());
        use std::os::unix::ffi::OsStrExt;
        assert!(split_final(Path::new(OsStr::from_bytes(b"a\0b"))).is_err());
        assert_eq!(whole(Path::new("")), Ok(PathBuf::from(".")));
        assert_eq!(whole(Path::new("a/../b")), Ok(PathBuf::from("a/../b")));
    }

    #[test]
    fn a_host_path_belongs_to_the_longest_root_spelling_by_components() {
        let roots = [
            (0, Path::new("/w")),
            (1, Path::new("/w/proj")),
            (2, Path::new("/real/w")),
        ];
        assert_eq!(
            locate_host(Path::new("/w/proj/a"), roots),
            Some((1, PathBuf::from("a")))
        );
        assert_eq!(
            locate_host(Path::new("/w/projx/a"), roots),
            Some((0, PathBuf::from("projx/a")))
        );
        assert_eq!(
            locate_host(Path::new("/real/w/a"), roots),
            Some((2, PathBuf::from("a")))
        );
        assert_eq!(
            locate_host(Path::new("/w/proj"), roots),
            Some((1, PathBuf::new()))
        );
        assert_eq!(
            locate_host(Path::new("/w/proj/../../etc"), roots),
            Some((1, PathBuf::from("../../etc"))),
            "left to the kernel, which refuses it"
        );
        assert_eq!(locate_host(Path::new("/etc/passwd"), roots), None);
        assert_eq!(
            locate_host(Path::new("/proc/self/root/w/proj/a"), roots),
            None
        );
    }

    #[test]
    fn secrets_are_known_by_their_canonical_path() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            secret(Path::new("/home/u/.ssh/id_ed25519"), home).map(|s| s.0),
            Some("~/.ssh".into())
        );
        assert!(secret(Path::new("/home/u/.ssh"), home).is_some());
        assert!(secret(Path::new("/home/u/.config/gh/hosts.yml"), home).is_some());
        assert!(secret(Path::new("/home/u/.sshx"), home).is_none());
        assert!(secret(Path::new("/work/proj/.ssh/id_ed25519"), home).is_none());
        assert!(
            secret(Path::new("/home/u/.ssh/id_ed25519"), None).is_none(),
            "without a home, no home secrets"
        );
        assert!(secret(Path::new("/etc/shadow"), None).is_some());
        assert!(secret(Path::new("/etc/sudoers.d/90-x"), None).is_some());
        assert!(secret(Path::new("/etc/passwd"), None).is_none());
        assert!(is_host_key(Path::new("/etc/ssh/ssh_host_ed25519_key")));
        assert!(!is_host_key(Path::new("/etc/ssh/ssh_host_ed25519_key.pub")));
        assert!(!is_host_key(Path::new("/w/etc/ssh/ssh_host_ed25519_key")));
        assert_eq!(
            secret_below(Path::new("/home"), home).map(|s| s.0),
            Some("~/.ssh".into())
        );
        assert!(secret_below(Path::new("/home/u/.ssh"), home).is_none());
        assert!(secret_below(Path::new("/home/u/src"), home).is_none());
        assert!(secret_below(Path::new("/etc"), None).is_some());
    }

    #[test]
    fn below_a_hooks_directory() {
        for yes in [
            "/w/.git/hooks/pre-commit",
            "/w/.git/hooks/sub/x",
            "/w/a/.git/modules/lib/hooks/post-checkout",
            "/w/a/.git/modules/libs/a/hooks/x",
            "/w/.GIT/Hooks/x",
        ] {
            assert!(under_git_hooks(Path::new(yes)), "{yes}");
        }
        for no in [
            "/w/.git/hooks",
            "/w/.git/modules/lib/hooks",
            "/w/.git/modules/hooks",
            "/w/hooks/x",
            "/w/.git/config",
            "/w/src/hooks/x",
        ] {
            assert!(!under_git_hooks(Path::new(no)), "{no}");
        }
    }

    #[test]
    fn execute_bits_added() {
        assert!(adds_exec(0o644, 0o755));
        assert!(adds_exec(0o744, 0o754));
        assert!(!adds_exec(0o755, 0o644));
        assert!(!adds_exec(0o755, 0o755));
    }
}
