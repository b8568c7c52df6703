//! What the host reads from a command's working directory before the
//! classifier sees the line ([`sandbox_policy::Workdir`], SPEC H7):
//! the bins in `node_modules/.bin`, so `npx vite` in a project that has
//! vite installed is local code, not a download.
//!
//! Only the shared tree is read: the directory must lie in a bind mount,
//! and a `.bin` entry counts only when it resolves to a regular file inside
//! that bind — what the command will find at the same place in the
//! sandbox. Anything else (no bind, a link leading out, an unreadable
//! directory) gives no names, so `npx` stays an install: the stricter
//! reading.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use sandbox_paths::jail::{Jail, JailConfig, JailPath, RootConfig};
use sandbox_plugin_api::SandboxBindMount;
use sandbox_policy::Workdir;

/// At most this many names are taken from one `node_modules/.bin`.
const MAX_BINS: usize = 4096;

/// Where a command runs, on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDir {
    /// The working directory.
    pub dir: PathBuf,
    /// The bind's host path that holds it: nothing above it is read.
    pub root: PathBuf,
}

/// The host directory behind the sandbox path `cwd`: through the bind whose
/// guest path is the longest prefix of it. `None` for a relative path, one
/// with `..` or `.` parts, or one in no bind.
pub fn plan_host_dir(binds: &[SandboxBindMount], cwd: &Path) -> Option<HostDir> {
    if !cwd.is_absolute()
        || cwd
            .components()
            .any(|c| !matches!(c, Component::RootDir | Component::Normal(_)))
    {
        return None;
    }
    binds
        .iter()
        .filter_map(|bind| {
            let rest = cwd.strip_prefix(bind.guest_path()).ok()?;
            Some((bind.guest_path().components().count(), bind, rest))
        })
        .max_by_key(|(depth, _, _)| *depth)
        .map(|(_, bind, rest)| HostDir {
            dir: bind.host_path.join(rest),
            root: bind.host_path.clone(),
        })
}

/// Whether the line can name `npx` or `npm exec` at all: only then is the
/// directory read (the fact changes nothing else).
pub fn matters_for(line: &str) -> bool {
    line.contains("npx") || line.contains("npm")
}

/// The names in `node_modules/.bin` of `place.dir` and of each ancestor up
/// to `place.root`, as npm looks them up (regular files, links followed).
/// Only names that occur in `line` are checked (an operand the classifier
/// looks up is in the line), so a project with thousands of bins costs a
/// directory listing, not a `stat` per bin. The directory is an agent's:
/// it is read through the path crate's jail, rooted at the bind, so a link
/// leading out of the bind is refused by the kernel, not by a string check.
pub fn look(place: &HostDir, line: &str) -> Workdir {
    let mut npm_bins = BTreeSet::new();
    let Ok(rest) = place.dir.strip_prefix(&place.root) else {
        return Workdir::default();
    };
    let config = JailConfig::new(vec![RootConfig::read_only(ROOT, &place.root)]);
    let Ok(jail) = Jail::new(config) else {
        return Workdir::default();
    };
    for level in rest.ancestors() {
        let bin_dir = level.join("node_modules").join(".bin");
        let Ok(entries) = jail.list(&JailPath::in_root(ROOT, &bin_dir)) else {
            continue;
        };
        for entry in entries.into_iter().take(MAX_BINS) {
            let Ok(name) = entry.name.into_string() else {
                continue;
            };
            if !line.contains(name.as_str()) {
                continue;
            }
            let target = JailPath::in_root(ROOT, bin_dir.join(&name));
            if jail.stat(&target, true).is_ok_and(|meta| meta.is_file()) {
                npm_bins.insert(name);
            }
        }
    }
    Workdir { npm_bins }
}

/// The jail's label for the bind it reads beneath.
const ROOT: &str = "workdir";

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(host: &str, guest: Option<&str>) -> SandboxBindMount {
        SandboxBindMount {
            host_path: host.into(),
            guest_path: guest.map(PathBuf::from),
            read_only: false,
        }
    }

    #[test]
    fn the_host_dir_comes_through_the_deepest_bind() {
        let binds = [bind("/h/work", None), bind("/h/data", Some("/work/data"))];
        assert_eq!(
            plan_host_dir(&binds, Path::new("/h/work/web")),
            Some(HostDir {
                dir: "/h/work/web".into(),
                root: "/h/work".into()
            })
        );
        assert_eq!(
            plan_host_dir(&binds, Path::new("/work/data/x")),
            Some(HostDir {
                dir: "/h/data/x".into(),
                root: "/h/data".into()
            })
        );
        assert_eq!(plan_host_dir(&binds, Path::new("/elsewhere")), None);
        assert_eq!(plan_host_dir(&binds, Path::new("/h/work/../etc")), None);
        assert_eq!(plan_host_dir(&binds, Path::new("web")), None);
    }

    #[test]
    fn bins_are_files_inside_the_shared_tree() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("evil.js"), "").unwrap();
        let root = tempfile::tempdir().unwrap();
        let web = root.path().join("web");
        let bins = web.join("node_modules/.bin");
        std::fs::create_dir_all(&bins).unwrap();
        std::fs::create_dir_all(root.path().join("node_modules/.bin/hoisted-dir")).unwrap();
        std::fs::create_dir_all(root.path().join("node_modules/jest")).unwrap();
        std::fs::write(root.path().join("node_modules/jest/cli.js"), "").unwrap();
        std::os::unix::fs::symlink("../jest/cli.js", root.path().join("node_modules/.bin/jest"))
            .unwrap();
        std::fs::write(bins.join("vite"), "").unwrap();
        std::os::unix::fs::symlink(outside.path().join("evil.js"), bins.join("evil")).unwrap();
        std::os::unix::fs::symlink("missing.js", bins.join("dangling")).unwrap();
        let line = "npx vite; npx jest; npx evil; npx dangling; npx hoisted-dir";
        let found = look(
            &HostDir {
                dir: web.clone(),
                root: root.path().to_path_buf(),
            },
            line,
        );
        let names: Vec<&str> = found.npm_bins.iter().map(String::as_str).collect();
        assert_eq!(names, ["jest", "vite"]);
        // Nothing above the root is read.
        let found = look(
            &HostDir {
                dir: web.clone(),
                root: web.clone(),
            },
            line,
        );
        let names: Vec<&str> = found.npm_bins.iter().map(String::as_str).collect();
        assert_eq!(names, ["vite"]);
        // Names the line does not mention are not looked at.
        let found = look(
            &HostDir {
                dir: web.clone(),
                root: web,
            },
            "npx jest",
        );
        assert!(found.npm_bins.is_empty(), "{found:?}");
    }

    #[test]
    fn only_lines_naming_npm_or_npx_are_looked_at() {
        assert!(matters_for("npx vite"));
        assert!(matters_for("cd web && npm exec jest"));
        assert!(!matters_for("cargo test"));
    }
}
