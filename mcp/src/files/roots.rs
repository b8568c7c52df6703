//! Where the file tools may act, as the agent names it (SPEC H2): each
//! root is a directory the agent sees inside its sandbox (its guest path)
//! and the host directory behind it. A path the agent gives is a guest
//! path; [`Roots::locate`] turns it into a root and a path relative to
//! it, which the jail resolves beneath the host directory — the kernel,
//! not this module, decides what `..` and symlinks lead to.
//!
//! The roots of a plain sandbox are its binds and runner state dirs
//! ([`Roots::of_spec`]). A layer with roots of its own (a conversation's
//! `repos/` and its space's attachments directory) builds them with
//! [`Roots::new`] and hands them to the tools instead
//! ([`crate::RootsOf`]).

use std::path::{Component, Path, PathBuf};

use sandbox_paths::jail::{JailConfig, JailPath, RootConfig};
use sandbox_plugin_api::SandboxSpec;

/// One directory the file tools act beneath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestRoot {
    /// Where the agent sees it (absolute).
    pub guest: PathBuf,
    /// The host directory behind it (absolute).
    pub host: PathBuf,
    /// Whether the tools may change what is beneath it.
    pub writable: bool,
}

/// The roots of one sandbox, and the directory relative paths start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    roots: Vec<GuestRoot>,
    /// The guest working directory, where a relative path starts.
    workdir: Option<PathBuf>,
}

/// A path the agent gave, located beneath one root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The root's index in [`Roots::roots`].
    pub root: usize,
    /// The path relative to it, as given (`..` left for the kernel).
    pub relative: PathBuf,
    /// The guest path, for messages and results.
    pub guest: PathBuf,
}

/// Why a path names no place beneath a root, with the jail's rule names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlocated {
    /// One of [`sandbox_paths::jail::rule`].
    pub rule: &'static str,
    pub why: String,
}

impl Roots {
    /// Roots given by a layer (a conversation's `repos/`, its attachments).
    pub fn new(roots: Vec<GuestRoot>, workdir: Option<PathBuf>) -> Self {
        Self { roots, workdir }
    }

    /// The roots of a plain sandbox: every bind, at its guest path, writable
    /// when the bind is and the mode is not read-only (SPEC F2); every
    /// runner state dir, writable in every mode (F4). Relative paths start
    /// at the guest working directory.
    pub fn of_spec(spec: &SandboxSpec) -> Self {
        let read_only_mode = spec.mode.is_read_only();
        let mut roots: Vec<GuestRoot> = spec
            .bind_mounts
            .iter()
            .map(|bind| GuestRoot {
                guest: bind
                    .guest_path
                    .clone()
                    .unwrap_or_else(|| bind.host_path.clone()),
                host: bind.host_path.clone(),
                writable: !bind.read_only && !read_only_mode,
            })
            .collect();
        roots.extend(spec.runner_state_dirs.iter().map(|dir| GuestRoot {
            guest: dir.clone(),
            host: dir.clone(),
            writable: true,
        }));
        Self::new(roots, spec.guest_workdir.clone())
    }

    pub fn roots(&self) -> &[GuestRoot] {
        &self.roots
    }

    /// The label of root `i` in the jail.
    pub fn label(i: usize) -> String {
        format!("root{i}")
    }

    /// The jail over these roots, judged as the sandbox is: its create-time
    /// globs, its protected paths (registered checkouts), the host's
    /// `$HOME` for the `~/` globs and the secrets.
    pub fn jail_config(&self, spec: &SandboxSpec, home: Option<PathBuf>) -> JailConfig {
        let roots = self
            .roots
            .iter()
            .enumerate()
            .map(|(i, r)| match r.writable {
                true => RootConfig::writable(Self::label(i), &r.host),
                false => RootConfig::read_only(Self::label(i), &r.host),
            })
            .collect();
        let mut config = JailConfig::new(roots)
            .with_home(home)
            .with_protected(spec.protected_paths.clone());
        config.globs = spec.write_deny_globs.clone();
        config
    }

    /// The working directory, as the agent sees it.
    pub fn workdir(&self) -> Option<&Path> {
        self.workdir.as_deref()
    }

    /// Where `input` lies: an absolute guest path under the root whose
    /// guest path holds it (the nearest, as mounts nest), a relative one
    /// from the working directory. Nothing is resolved here: `..` and
    /// symlinks are the kernel's to follow beneath the root.
    pub fn locate(&self, input: &str) -> Result<Located, Unlocated> {
        use sandbox_paths::jail::rule;
        if input.is_empty() {
            return Err(Unlocated {
                rule: rule::PATH_FORM,
                why: "the path is empty".into(),
            });
        }
        if input.contains('\0') {
            return Err(Unlocated {
                rule: rule::PATH_FORM,
                why: "the path holds a NUL byte".into(),
            });
        }
        let given = Path::new(input);
        let guest = if given.is_absolute() {
            given.to_path_buf()
        } else {
            match &self.workdir {
                Some(dir) => dir.join(given),
                None => {
                    return Err(Unlocated {
                        rule: rule::PATH_FORM,
                        why: "a relative path, and the sandbox has no working directory: give \
                              an absolute path"
                            .into(),
                    });
                }
            }
        };
        let nearest = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, r)| guest.starts_with(&r.guest))
            .max_by_key(|(_, r)| r.guest.components().count());
        match nearest {
            Some((root, r)) => Ok(Located {
                root,
                relative: guest
                    .strip_prefix(&r.guest)
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                guest,
            }),
            None => Err(Unlocated {
                rule: rule::OUTSIDE_ROOTS,
                why: format!(
                    "it lies under no directory the tools may reach ({})",
                    self.guest_list()
                ),
            }),
        }
    }

    /// The jail's name for a located path.
    pub fn jail_path(located: &Located) -> JailPath {
        JailPath::in_root(Self::label(located.root), &located.relative)
    }

    /// The guest path of a host path beneath root `i` (whose host directory
    /// the kernel reports as `host_root`), for results.
    pub fn guest_of(&self, i: usize, host_root: &Path, host: &Path) -> Option<PathBuf> {
        let rest = host.strip_prefix(host_root).ok()?;
        Some(self.roots.get(i)?.guest.join(rest))
    }

    /// The guest paths of the roots, for messages.
    pub fn guest_list(&self) -> String {
        if self.roots.is_empty() {
            return "none: the sandbox binds nothing".into();
        }
        self.roots
            .iter()
            .map(|r| {
                let access = if r.writable { "" } else { " (read-only)" };
                format!("{}{access}", r.guest.display())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A relative path with `.` removed and `a/..` folded where no symlink can
/// be in the way (only for the names results show; the jail resolves).
pub fn tidy(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox_paths::jail::rule;
    use sandbox_plugin_api::{SandboxBindMount, SandboxMode};

    fn spec(mode: SandboxMode) -> SandboxSpec {
        SandboxSpec {
            bind_mounts: vec![
                SandboxBindMount {
                    host_path: "/host/proj".into(),
                    guest_path: Some("/work".into()),
                    read_only: false,
                },
                SandboxBindMount {
                    host_path: "/host/docs".into(),
                    guest_path: Some("/work/docs".into()),
                    read_only: true,
                },
            ],
            guest_workdir: Some("/work".into()),
            mode,
            ..SandboxSpec::default()
        }
    }

    #[test]
    fn guest_paths_land_beneath_the_nearest_root() {
        let roots = Roots::of_spec(&spec(SandboxMode::Chat));
        let at = roots.locate("/work/src/main.rs").unwrap();
        assert_eq!(
            (at.root, at.relative.as_path()),
            (0, Path::new("src/main.rs"))
        );
        let at = roots.locate("docs/a.md").unwrap();
        assert_eq!((at.root, at.relative.as_path()), (1, Path::new("a.md")));
        assert!(!roots.roots()[1].writable, "a read-only bind");
        assert!(roots.roots()[0].writable);
        // `..` stays for the kernel, which refuses it beneath the root.
        let at = roots.locate("/work/../etc/passwd").unwrap();
        assert_eq!(at.relative, Path::new("../etc/passwd"));
    }

    #[test]
    fn paths_under_no_root_are_refused_by_rule() {
        let roots = Roots::of_spec(&spec(SandboxMode::Chat));
        for outside in ["/etc/passwd", "/proc/self/root/etc/passwd", "/workx/a", "/"] {
            let refused = roots.locate(outside).unwrap_err();
            assert_eq!(refused.rule, rule::OUTSIDE_ROOTS, "{outside}");
            assert!(refused.why.contains("/work"), "{}", refused.why);
        }
        assert_eq!(roots.locate("").unwrap_err().rule, rule::PATH_FORM);
        assert_eq!(roots.locate("a\0b").unwrap_err().rule, rule::PATH_FORM);
        let no_workdir = Roots::new(roots.roots().to_vec(), None);
        assert_eq!(no_workdir.locate("a").unwrap_err().rule, rule::PATH_FORM);
    }

    #[test]
    fn read_only_modes_make_every_bind_read_only_but_state_dirs() {
        let mut s = spec(SandboxMode::Plan);
        s.runner_state_dirs.push("/host/state".into());
        let roots = Roots::of_spec(&s);
        let writable: Vec<bool> = roots.roots().iter().map(|r| r.writable).collect();
        assert_eq!(writable, [false, false, true]);
    }

    #[test]
    fn results_are_shown_as_guest_paths() {
        let roots = Roots::of_spec(&spec(SandboxMode::Chat));
        assert_eq!(
            roots.guest_of(0, Path::new("/real/proj"), Path::new("/real/proj/src/a.rs")),
            Some(PathBuf::from("/work/src/a.rs"))
        );
        assert_eq!(
            roots.guest_of(0, Path::new("/real/proj"), Path::new("/x")),
            None
        );
    }
}
