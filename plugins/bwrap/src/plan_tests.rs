//! The plan, against a fake host.

use std::collections::BTreeMap;

use sandbox_plugin_api::{SandboxBindMount, SandboxMode};

use super::*;
use sandbox_paths::system::SYSTEM_GIT_TEMPLATE;

/// A host made of a few paths.
#[derive(Default)]
pub(crate) struct FakeHost {
    kinds: BTreeMap<PathBuf, Kind>,
    links: BTreeMap<PathBuf, PathBuf>,
}

impl FakeHost {
    pub(crate) fn standard() -> Self {
        let mut host = Self::default();
        for dir in [
            "/usr",
            "/etc",
            "/etc/ssh",
            "/etc/sudoers.d",
            "/home/u",
            "/work/proj",
            "/data/real",
        ] {
            host.dir(dir);
        }
        for file in [
            "/etc/shadow",
            "/etc/ssh/ssh_host_ed25519_key",
            "/etc/ssh/ssh_config",
            "/etc/ssh/ssh_host_ed25519_key.pub",
        ] {
            host.file(file);
        }
        host.links.insert("/bin".into(), "usr/bin".into());
        host.kinds.insert("/bin".into(), Kind::Dir);
        host
    }

    pub(crate) fn dir(&mut self, p: &str) -> &mut Self {
        self.kinds.insert(p.into(), Kind::Dir);
        self
    }

    pub(crate) fn file(&mut self, p: &str) -> &mut Self {
        self.kinds.insert(p.into(), Kind::File);
        self
    }

    /// `from` is a symlink to the absolute `to`.
    pub(crate) fn symlink(&mut self, from: &str, to: &str) -> &mut Self {
        self.links.insert(from.into(), to.into());
        self
    }
}

impl HostFacts for FakeHost {
    fn kind(&self, path: &Path) -> Option<Kind> {
        self.kinds.get(&self.resolve(path)?).copied()
    }

    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        // Resolve absolute symlinks on any prefix.
        for (from, to) in &self.links {
            if to.is_absolute()
                && let Ok(rest) = path.strip_prefix(from)
            {
                let target = if rest.as_os_str().is_empty() {
                    to.clone()
                } else {
                    to.join(rest)
                };
                return self.resolve(&target);
            }
        }
        self.kinds.contains_key(path).then(|| path.to_path_buf())
    }

    fn link_target(&self, path: &Path) -> Option<PathBuf> {
        self.links.get(path).cloned()
    }

    fn list(&self, dir: &Path) -> Vec<OsString> {
        self.kinds
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(OsStr::to_owned))
            .collect()
    }
}

fn bind(path: &str, read_only: bool) -> SandboxBindMount {
    SandboxBindMount {
        host_path: path.into(),
        guest_path: None,
        read_only,
    }
}

fn spec_with(binds: Vec<SandboxBindMount>) -> SandboxSpec {
    SandboxSpec {
        bind_mounts: binds,
        ..SandboxSpec::default()
    }
}

fn run(spec: &SandboxSpec, host: &FakeHost) -> Result<Plan, PlanError> {
    plan(
        &PlanInput {
            spec,
            home: Some(Path::new("/home/u")),
            init: Path::new("/opt/cc/sandbox-init"),
            control_fd: 3,
            extra_system: &[],
            guard: true,
            gitconfig: None,
            toolchains: &crate::toolchains::Found::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            tmpfs_bytes: 1 << 20,
            server_state: &[PathBuf::from(SERVER_STATE)],
            path_dirs: &[],
        },
        host,
    )
}

/// The runtime dir the plans are given (root's, below `/tmp`).
const SERVER_STATE: &str = "/tmp/cc_server-0";

fn strings(plan: &Plan) -> Vec<String> {
    plan.args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// The position of a run of arguments, if present.
fn find(args: &[String], run: &[&str]) -> Option<usize> {
    args.windows(run.len())
        .position(|w| w.iter().zip(run).all(|(a, b)| a == b))
}

fn has(args: &[String], run: &[&str]) -> bool {
    find(args, run).is_some()
}

#[test]
fn namespaces_hardening_and_the_init_come_first_and_last() {
    let plan = run(
        &spec_with(vec![bind("/work/proj", false)]),
        &FakeHost::standard(),
    )
    .unwrap();
    let args = strings(&plan);
    for flag in [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--as-pid-1",
        "--clearenv",
    ] {
        assert!(args.contains(&flag.to_owned()), "{flag} missing: {args:?}");
    }
    assert!(has(&args, &["--cap-drop", "ALL"]));
    // sandbox-init makes its own user namespace and forbids further ones
    // there; bwrap's --disable-userns would forbid ours.
    assert!(has(&args, &["--cap-add", "CAP_SETFCAP"]));
    // The maker of the commands' /proc mounts a procfs from bubblewrap's
    // namespaces (sandbox-init's commands_proc).
    assert!(has(&args, &["--cap-add", "CAP_SYS_ADMIN"]));
    assert!(has(&args, &["--cap-add", "CAP_SYS_CHROOT"]));
    assert!(!args.contains(&"--disable-userns".to_owned()));
    let at = args.iter().position(|a| a == "--").unwrap();
    assert_eq!(
        args[at..at + 4],
        ["--", INIT_IN_SANDBOX, "--control-fd", "3"],
        "no globs, no guard"
    );
    // Exec only from the system view and sandbox-init itself; then the
    // masks over the system's secrets, and nothing else.
    let init_args = &args[at + 4..];
    assert!(
        init_args
            .chunks(2)
            .all(|pair| ["--exec-from", "--mask-file", "--mask-dir"].contains(&pair[0].as_str())),
        "{args:?}"
    );
    let exec_from: Vec<&str> = init_args
        .chunks(2)
        .filter(|pair| pair[0] == "--exec-from")
        .map(|pair| pair[1].as_str())
        .collect();
    assert!(exec_from.contains(&"/usr") && exec_from.contains(&INIT_IN_SANDBOX));
    assert!(!exec_from.contains(&"/work/proj"), "{exec_from:?}");
    assert_eq!(plan.guard, None);
    assert!(has(
        &args,
        &["--ro-bind", "/opt/cc/sandbox-init", INIT_IN_SANDBOX]
    ));
}

/// G6: no tmpfs is unbounded — every `--tmpfs` has a `--size`: the
/// writable ones (`/tmp`, `/var/tmp`, `/dev/shm`, a private `$HOME`) the
/// configured size, the masks a page's worth; bubblewrap's own `/dev`
/// (which it cannot size) is read-only.
#[test]
fn every_tmpfs_has_a_size() {
    let plan = run(
        &spec_with(vec![bind("/work/proj", false)]),
        &FakeHost::standard(),
    )
    .unwrap();
    let args = strings(&plan);
    let mut seen = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if arg == "--tmpfs" {
            assert!(
                i >= 2 && args[i - 2] == "--size",
                "unsized tmpfs at {}",
                args[i + 1]
            );
            seen.push((args[i + 1].clone(), args[i - 1].clone()));
        }
    }
    let size = (1u64 << 20).to_string();
    for writable in ["/tmp", "/var/tmp", "/dev/shm", "/home/u"] {
        assert!(
            seen.contains(&(writable.to_owned(), size.clone())),
            "{writable}: {seen:?}"
        );
    }
    let dev = find(&args, &["--dev", "/dev"]).unwrap();
    let ro = find(&args, &["--remount-ro", "/dev"]).unwrap();
    let shm = find(&args, &["--tmpfs", "/dev/shm"]).unwrap();
    assert!(dev < shm && shm < ro);
}

#[test]
fn only_the_system_view_and_the_binds_are_visible() {
    let plan = run(
        &spec_with(vec![bind("/work/proj", false)]),
        &FakeHost::standard(),
    )
    .unwrap();
    let args = strings(&plan);
    assert!(has(&args, &["--ro-bind", "/usr", "/usr"]));
    assert!(has(&args, &["--ro-bind", "/etc", "/etc"]));
    assert!(has(&args, &["--symlink", "usr/bin", "/bin"]));
    assert!(has(&args, &["--bind", "/work/proj", "/work/proj"]));
    assert!(
        !args.iter().any(|a| a == "/data/real"),
        "unbound host paths stay out"
    );
    assert!(
        !has(&args, &["--ro-bind", "/", "/"]),
        "never the whole host"
    );
    assert_eq!(plan.workdir, PathBuf::from("/work/proj"));
}

#[test]
fn read_only_modes_bind_read_only_but_runner_state_stays_writable() {
    for mode in [
        SandboxMode::Review,
        SandboxMode::Plan,
        SandboxMode::Orchestrate,
    ] {
        let mut spec = spec_with(vec![bind("/work/proj", false)]);
        spec.mode = mode;
        spec.runner_state_dirs = vec!["/data/real".into()];
        let args = strings(&run(&spec, &FakeHost::standard()).unwrap());
        assert!(
            has(&args, &["--ro-bind", "/work/proj", "/work/proj"]),
            "{mode}: {args:?}"
        );
        assert!(
            !has(&args, &["--bind", "/work/proj", "/work/proj"]),
            "{mode}"
        );
        assert!(
            has(&args, &["--bind", "/data/real", "/data/real"]),
            "F4 in {mode}"
        );
    }
    let spec = spec_with(vec![bind("/work/proj", true)]);
    let args = strings(&run(&spec, &FakeHost::standard()).unwrap());
    assert!(
        has(&args, &["--ro-bind", "/work/proj", "/work/proj"]),
        "readOnly in chat"
    );
}

#[test]
fn a_protected_path_is_read_only_and_its_ancestors_pinned() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/a")
        .dir("/work/proj/a/b")
        .dir("/work/proj/a/b/checkout");
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.protected_paths = vec!["/work/proj/a/b/checkout".into()];
    let plan = run(&spec, &host).unwrap();
    let args = strings(&plan);
    let pin_a = find(&args, &["--bind", "/work/proj/a", "/work/proj/a"]).expect("pin a");
    let pin_b = find(&args, &["--bind", "/work/proj/a/b", "/work/proj/a/b"]).expect("pin b");
    let ro = find(
        &args,
        &[
            "--ro-bind",
            "/work/proj/a/b/checkout",
            "/work/proj/a/b/checkout",
        ],
    )
    .expect("ro");
    let root = find(&args, &["--bind", "/work/proj", "/work/proj"]).unwrap();
    assert!(root < pin_a && pin_a < pin_b && pin_b < ro, "{args:?}");
    assert_eq!(
        plan.protected,
        vec![PathBuf::from("/work/proj/a/b/checkout")]
    );
}

#[test]
fn a_protected_path_is_protected_in_every_mode_and_both_spellings() {
    let mut host = FakeHost::standard();
    host.dir("/data/real/repo")
        .symlink("/work/link", "/data/real");
    let mut spec = spec_with(vec![bind("/work/link", false)]);
    spec.protected_paths = vec!["/work/link/repo".into()];
    let args = strings(&run(&spec, &host).unwrap());
    assert!(
        has(&args, &["--bind", "/data/real", "/work/link"]),
        "{args:?}"
    );
    assert!(
        has(&args, &["--bind", "/data/real", "/data/real"]),
        "resolved spelling: {args:?}"
    );
    assert!(
        has(&args, &["--ro-bind", "/data/real/repo", "/work/link/repo"]),
        "{args:?}"
    );
    assert!(
        has(&args, &["--ro-bind", "/data/real/repo", "/data/real/repo"]),
        "{args:?}"
    );
}

#[test]
fn a_protected_path_that_is_missing_inside_a_writable_bind_is_refused() {
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.protected_paths = vec!["/work/proj/not-yet".into()];
    let err = run(&spec, &FakeHost::standard()).unwrap_err();
    assert_eq!(
        err,
        PlanError::ProtectedMissing("/work/proj/not-yet".into())
    );
    // Outside every bind it is invisible, so there is nothing to protect.
    spec.protected_paths = vec!["/elsewhere/repo".into()];
    assert!(run(&spec, &FakeHost::standard()).is_ok());
}

#[test]
fn a_whole_writable_root_can_be_protected() {
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.protected_paths = vec!["/work/proj".into()];
    let args = strings(&run(&spec, &FakeHost::standard()).unwrap());
    let rw = find(&args, &["--bind", "/work/proj", "/work/proj"]).unwrap();
    let ro = find(&args, &["--ro-bind", "/work/proj", "/work/proj"]).expect("re-bound read-only");
    assert!(rw < ro);
}

#[test]
fn mandatory_denies_that_exist_are_protected_in_home_and_every_writable_root() {
    let mut host = FakeHost::standard();
    host.file("/home/u/.bashrc")
        .dir("/work/proj/.git")
        .dir("/work/proj/.git/hooks")
        .file("/work/proj/.git/config")
        .file("/work/proj/.bashrc");
    let spec = spec_with(vec![bind("/home/u", false), bind("/work/proj", false)]);
    let plan = run(&spec, &host).unwrap();
    let args = strings(&plan);
    for path in [
        "/home/u/.bashrc",
        "/work/proj/.bashrc",
        "/work/proj/.git/hooks",
        "/work/proj/.git/config",
    ] {
        assert!(has(&args, &["--ro-bind", path, path]), "{path}: {args:?}");
    }
    assert!(
        has(&args, &["--bind", "/work/proj/.git", "/work/proj/.git"]),
        ".git pinned"
    );
    assert!(
        !args.iter().any(|a| a.ends_with(".zshrc")),
        "only what exists"
    );
}

#[test]
fn secrets_are_masked_where_visible() {
    let mut host = FakeHost::standard();
    host.dir("/home/u/.ssh")
        .file("/home/u/.netrc")
        .dir("/home/u/.config")
        .dir("/home/u/.config/gh");
    let spec = spec_with(vec![bind("/home/u", false)]);
    let plan = run(&spec, &host).unwrap();
    let args = strings(&plan);
    assert!(has(&args, &["--mask-dir", "/home/u/.ssh"]), "{args:?}");
    assert!(has(&args, &["--mask-dir", "/home/u/.config/gh"]));
    assert!(has(&args, &["--mask-file", "/home/u/.netrc"]));
    assert!(has(&args, &["--mask-file", "/etc/shadow"]));
    assert!(has(&args, &["--mask-dir", "/etc/sudoers.d"]));
    assert!(has(
        &args,
        &["--mask-file", "/etc/ssh/ssh_host_ed25519_key"]
    ));
    assert!(
        !args.iter().any(|a| a.ends_with("ssh_host_ed25519_key.pub")),
        "public keys stay"
    );
    assert!(!args.iter().any(|a| a == "/etc/ssh/ssh_config"));
    // Masks come after the bind that exposes them.
    let home = find(&args, &["--bind", "/home/u", "/home/u"]).unwrap();
    let ssh = find(&args, &["--mask-dir", "/home/u/.ssh"]).unwrap();
    assert!(home < ssh);
    // sandbox-init mounts them (its arguments follow bwrap's `--`).
    let init = find(&args, &["--"]).unwrap();
    assert!(init < ssh, "{args:?}");
}

#[test]
fn an_unbound_home_is_empty_and_private() {
    let mut host = FakeHost::standard();
    host.dir("/home/u/.ssh");
    let args = strings(&run(&spec_with(vec![bind("/work/proj", false)]), &host).unwrap());
    assert!(has(&args, &["--tmpfs", "/home/u"]), "{args:?}");
    assert!(
        !args.iter().any(|a| a == "/home/u/.ssh"),
        "nothing of the real home is shown"
    );
}

#[test]
fn parents_are_mounted_before_children() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/sub");
    let spec = spec_with(vec![
        bind("/work/proj/sub", true),
        bind("/work/proj", false),
    ]);
    let args = strings(&run(&spec, &host).unwrap());
    let parent = find(&args, &["--bind", "/work/proj", "/work/proj"]).unwrap();
    let child = find(&args, &["--ro-bind", "/work/proj/sub", "/work/proj/sub"]).unwrap();
    assert!(parent < child);
}

#[test]
fn bad_specs_are_refused_with_the_reason() {
    let host = FakeHost::standard();
    assert_eq!(
        run(&spec_with(vec![bind("/nope", false)]), &host).unwrap_err(),
        PlanError::BindMissing("/nope".into())
    );
    assert!(matches!(
        run(&spec_with(vec![bind("relative", false)]), &host).unwrap_err(),
        PlanError::NotAbsolute(..)
    ));
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.guest_workdir = Some("/data/real".into());
    assert_eq!(
        run(&spec, &host).unwrap_err(),
        PlanError::WorkdirHidden("/data/real".into())
    );
    assert!(
        PlanError::ProtectedMissing("/x".into())
            .to_string()
            .contains("only protect what exists")
    );
}

#[test]
fn a_literal_spelling_that_is_a_symlink_inside_another_bind_is_not_mounted() {
    let mut host = FakeHost::standard();
    host.symlink("/work/proj/data", "/data/real");
    let spec = spec_with(vec![
        bind("/work/proj", false),
        bind("/work/proj/data", false),
    ]);
    let args = strings(&run(&spec, &host).unwrap());
    assert!(
        has(&args, &["--bind", "/data/real", "/data/real"]),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|a| a == "/work/proj/data"),
        "the symlink leads there: {args:?}"
    );
}

#[test]
fn a_repository_without_hooks_gets_an_empty_hooks_dir_first() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/.git");
    let spec = spec_with(vec![bind("/work/proj", false)]);
    assert_eq!(
        hook_dirs_to_create(&spec, &host),
        vec![PathBuf::from("/work/proj/.git/hooks")]
    );
    host.dir("/work/proj/.git/hooks");
    assert!(hook_dirs_to_create(&spec, &host).is_empty());
    let mut review = spec_with(vec![bind("/work/proj", false)]);
    review.mode = SandboxMode::Review;
    assert!(hook_dirs_to_create(&review, &FakeHost::standard()).is_empty());
}

/// SPEC G5: a submodule of a repository at the top of a root gets a
/// hooks directory too (its name may hold `/`).
#[test]
fn a_submodule_without_hooks_gets_an_empty_hooks_dir_first() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/.git")
        .dir("/work/proj/.git/hooks")
        .dir("/work/proj/.git/modules")
        .dir("/work/proj/.git/modules/libs")
        .dir("/work/proj/.git/modules/libs/a")
        .file("/work/proj/.git/modules/libs/a/HEAD");
    let spec = spec_with(vec![bind("/work/proj", false)]);
    assert_eq!(
        hook_dirs_to_create(&spec, &host),
        vec![PathBuf::from("/work/proj/.git/modules/libs/a/hooks")]
    );
}

/// SPEC G5: what git reads as config or runs in a
/// repository at the top of a writable root — its `.git` file, a
/// submodule's config and hooks, a worktree's config — is re-bound
/// read-only when it exists, and so are the home's own families.
#[test]
fn git_internals_and_home_families_that_exist_are_read_only() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/.git")
        .file("/work/proj/.git/config")
        .file("/work/proj/.git/config.worktree")
        .dir("/work/proj/.git/hooks")
        .dir("/work/proj/.git/modules")
        .dir("/work/proj/.git/modules/sub")
        .file("/work/proj/.git/modules/sub/HEAD")
        .file("/work/proj/.git/modules/sub/config")
        .dir("/work/proj/.git/modules/sub/hooks")
        .dir("/work/proj/.git/modules/sub/modules")
        .dir("/work/proj/.git/modules/sub/modules/inner")
        .file("/work/proj/.git/modules/sub/modules/inner/HEAD")
        .file("/work/proj/.git/modules/sub/modules/inner/config")
        .file("/work/proj/.git/modules/sub/refs")
        .dir("/work/proj/.git/worktrees")
        .dir("/work/proj/.git/worktrees/wt")
        .file("/work/proj/.git/worktrees/wt/config.worktree")
        .dir("/data/real")
        .file("/data/real/.git")
        .dir("/home/u/.local")
        .dir("/home/u/.local/bin")
        .dir("/home/u/bin")
        .file("/home/u/.vimrc")
        .file("/home/u/.gitconfig")
        .dir("/work/proj/bin")
        .file("/work/proj/.npmrc")
        .file("/work/proj/.envrc");
    let spec = spec_with(vec![
        bind("/work/proj", false),
        bind("/data/real", false),
        bind("/home/u", false),
    ]);
    let plan = run(&spec, &host).unwrap();
    let args = strings(&plan);
    for path in [
        "/work/proj/.git/config",
        "/work/proj/.git/config.worktree",
        "/work/proj/.git/hooks",
        "/work/proj/.git/modules/sub/config",
        "/work/proj/.git/modules/sub/hooks",
        "/work/proj/.git/modules/sub/modules/inner/config",
        "/work/proj/.git/worktrees/wt/config.worktree",
        "/data/real/.git",
        "/home/u/.local/bin",
        "/home/u/bin",
        "/home/u/.vimrc",
        "/home/u/.gitconfig",
        "/work/proj/.npmrc",
        "/work/proj/.envrc",
    ] {
        assert!(has(&args, &["--ro-bind", path, path]), "{path}: {args:?}");
    }
    assert!(
        !plan.protected.contains(&PathBuf::from("/work/proj/bin")),
        "a project's bin/ is its own"
    );
    assert!(
        !plan
            .protected
            .contains(&PathBuf::from("/work/proj/.git/modules/sub/refs")),
        "only config and hooks"
    );
}

/// SPEC G5 (the allowlists' mounts): in a bound home every existing
/// top-level dot entry and code place is re-bound read-only but the
/// history data and the caches (`~/.cache` and `~/go` overlays on the
/// bind); a
/// symlinked dot-file is kept where it leads; a git directory's
/// `commondir`, `gitdir`, alternates, grafts and `shallow` are re-bound
/// where they exist; a PATH directory inside a bind is read-only and the
/// guard is told of it, of the home and of the overlays.
#[test]
fn a_bound_homes_kept_part_git_pointers_and_path_dirs_are_read_only() {
    let mut host = FakeHost::standard();
    host.dir("/home/u/.config")
        .dir("/home/u/.cache")
        .dir("/home/u/.newtool")
        .dir("/home/u/go")
        .dir("/home/u/proj")
        .file("/home/u/.bash_history")
        .file("/home/u/notes.txt")
        .dir("/home/u/dotfiles")
        .file("/home/u/dotfiles/tmux.conf")
        .symlink("/home/u/.tmux.conf", "/home/u/dotfiles/tmux.conf")
        .file("/home/u/.tmux.conf")
        .dir("/work/proj/.git")
        .file("/work/proj/.git/HEAD")
        .file("/work/proj/.git/shallow")
        .dir("/work/proj/.git/objects/info")
        .file("/work/proj/.git/objects/info/alternates")
        .dir("/work/proj/.git/worktrees/wt")
        .file("/work/proj/.git/worktrees/wt/commondir")
        .file("/work/proj/.git/worktrees/wt/gitdir")
        .dir("/work/proj/tools/bin");
    let spec = SandboxSpec {
        write_deny_globs: vec!["**/*.pem".into()],
        ..spec_with(vec![bind("/home/u", false), bind("/work/proj", false)])
    };
    let path_dirs = [
        PathBuf::from("/work/proj/tools/bin"),
        "/home/u/go/bin".into(),
    ];
    let nothing = crate::toolchains::Found::default();
    let plan = plan(
        &PlanInput {
            spec: &spec,
            home: Some(Path::new("/home/u")),
            init: Path::new("/opt/cc/sandbox-init"),
            control_fd: 3,
            extra_system: &[],
            guard: true,
            gitconfig: None,
            toolchains: &nothing,
            cache_bytes: DEFAULT_CACHE_BYTES,
            tmpfs_bytes: 1 << 20,
            path_dirs: &path_dirs,
            server_state: &[],
        },
        &host,
    )
    .unwrap();
    let args = strings(&plan);
    for path in [
        "/home/u/.config",
        "/home/u/.newtool",
        "/home/u/dotfiles/tmux.conf",
        "/work/proj/.git/shallow",
        "/work/proj/.git/objects/info/alternates",
        "/work/proj/.git/worktrees/wt/commondir",
        "/work/proj/.git/worktrees/wt/gitdir",
        "/work/proj/tools/bin",
    ] {
        assert!(has(&args, &["--ro-bind", path, path]), "{path}: {args:?}");
    }
    for free in [
        "/home/u/.bash_history",
        "/home/u/.cache",
        "/home/u/proj",
        "/home/u/notes.txt",
    ] {
        assert!(!plan.protected.contains(&PathBuf::from(free)), "{free}");
    }
    // `~/.cache` and GOPATH's default: overlays on the bind.
    let overlays = caches_arg(&args).expect("overlays on the bind");
    let points: Vec<&str> = overlays.overlays.iter().map(|o| o.point.as_str()).collect();
    assert_eq!(points, ["/home/u/.cache", "/home/u/go"]);
    let guard = plan.guard.unwrap();
    assert_eq!(
        guard.allowlisted_home.as_deref(),
        Some(Path::new("/home/u"))
    );
    assert_eq!(
        guard.throwaway,
        [PathBuf::from("/home/u/.cache"), "/home/u/go".into()]
    );
    let mut path_dirs = guard.path_dirs.clone();
    path_dirs.sort();
    assert_eq!(
        path_dirs,
        [
            PathBuf::from("/home/u/go/bin"),
            "/work/proj/tools/bin".into()
        ]
    );
}

/// SPEC G5: a writable bind of a part of the home the allowlist keeps
/// (`~/.config`, `~/.local`) is read-only, and so is one inside a git
/// directory; one of the home's own work (`~/proj`) stays writable.
#[test]
fn a_writable_bind_of_a_kept_part_of_the_home_is_read_only() {
    let mut host = FakeHost::standard();
    host.dir("/home/u/.config").dir("/home/u/proj");
    let spec = spec_with(vec![
        bind("/home/u/.config", false),
        bind("/home/u/proj", false),
    ]);
    let args = strings(&run(&spec, &host).unwrap());
    assert!(
        has(&args, &["--ro-bind", "/home/u/.config", "/home/u/.config"]),
        "{args:?}"
    );
    assert!(
        has(&args, &["--bind", "/home/u/proj", "/home/u/proj"]),
        "{args:?}"
    );
    // Inside a git directory (the guard would not see it from inside).
    host.dir("/work/proj/.git")
        .dir("/work/proj/.git/objects")
        .dir("/work/proj/.git/refs")
        .file("/work/proj/.git/HEAD");
    let spec = spec_with(vec![bind("/work/proj/.git/refs", false)]);
    let args = strings(&run(&spec, &host).unwrap());
    assert!(
        has(
            &args,
            &["--ro-bind", "/work/proj/.git/refs", "/work/proj/.git/refs"]
        ),
        "{args:?}"
    );
}

#[test]
fn the_guard_gets_the_globs_and_every_writable_root() {
    let mut spec = spec_with(vec![bind("/work/proj", false), bind("/data/real", true)]);
    spec.write_deny_globs = vec!["**/.env".into()];
    let plan = run(&spec, &FakeHost::standard()).unwrap();
    let guard = plan
        .guard
        .clone()
        .expect("globs and a guard-capable backend: the guard runs");
    assert_eq!(guard.globs, vec!["**/.env".to_owned()]);
    assert_eq!(
        guard.roots,
        vec![PathBuf::from("/work/proj")],
        "read-only binds and a private $HOME need no guard"
    );
    let mut with_home = spec_with(vec![bind("/work/proj", false), bind("/home/u", false)]);
    with_home.write_deny_globs = vec!["**/.env".into()];
    let roots = run(&with_home, &FakeHost::standard())
        .unwrap()
        .guard
        .unwrap()
        .roots;
    assert!(
        roots.contains(&PathBuf::from("/home/u")),
        "a bound $HOME is guarded: {roots:?}"
    );
    assert_eq!(
        run(&with_home, &FakeHost::standard())
            .unwrap()
            .guard
            .unwrap()
            .home,
        Some(PathBuf::from("/home/u")),
        "`~/` globs apply there"
    );
    assert_eq!(guard.home, None, "a private $HOME is no root");
    let args = strings(&plan);
    let json = &args[args.len() - 1];
    assert_eq!(args[args.len() - 2], "--guard");
    assert_eq!(serde_json::from_str::<GuardConfig>(json).unwrap(), guard);
    assert!(has(&args, &["--mask-dir", GIT_TEMPLATE_IN_SANDBOX]));
}

/// SPEC G4: with the guard, the system's git template directory
/// is an empty read-only one, so libgit2 (`cargo new`) copies no sample
/// hooks into a new repository; without a template directory nothing is
/// mounted.
#[test]
fn the_system_git_template_is_empty_under_the_guard() {
    let mut host = FakeHost::standard();
    host.dir(SYSTEM_GIT_TEMPLATE);
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.write_deny_globs = vec!["**/.git/hooks/*".into()];
    let args = strings(&run(&spec, &host).unwrap());
    assert!(has(&args, &["--mask-dir", SYSTEM_GIT_TEMPLATE]));
    let args = strings(&run(&spec, &FakeHost::standard()).unwrap());
    assert!(!args.iter().any(|a| a == SYSTEM_GIT_TEMPLATE), "{args:?}");
}

/// E2, E5: the session's proxy sockets (and known_hosts) are bound in and
/// forwarded to loopback ports, whether or not the network is on (with it
/// off the proxies refuse everything, visibly); without egress nothing is.
#[test]
fn egress_sockets_are_bound_and_forwarded() {
    let host = FakeHost::standard();
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    let plain = strings(&run(&spec, &host).unwrap());
    assert!(
        !plain
            .iter()
            .any(|a| a.contains("sandbox-egress") || a == "--forward")
    );
    spec.egress = Some(sandbox_plugin_api::EgressEndpoints {
        http_socket: "/tmp/e/http.sock".into(),
        socks_socket: "/tmp/e/socks.sock".into(),
        ssh_known_hosts: Some("/tmp/e/known_hosts".into()),
        forwarder_socket: None,
    });
    for network in [true, false] {
        spec.network_enabled = network;
        let plan = run(&spec, &host).unwrap();
        let args = strings(&plan);
        assert!(has(
            &args,
            &[
                "--ro-bind",
                "/tmp/e/http.sock",
                "/.sandbox-egress/http.sock"
            ]
        ));
        assert!(has(
            &args,
            &[
                "--ro-bind",
                "/tmp/e/socks.sock",
                "/.sandbox-egress/socks.sock"
            ]
        ));
        assert!(has(
            &args,
            &[
                "--ro-bind",
                "/tmp/e/known_hosts",
                "/.sandbox-egress/known_hosts"
            ]
        ));
        assert!(has(
            &args,
            &["--forward", "3128=/.sandbox-egress/http.sock"]
        ));
        assert!(has(
            &args,
            &["--forward", "1080=/.sandbox-egress/socks.sock"]
        ));
        assert!(has(&args, &["--unshare-net"]), "the namespace stays empty");
        assert!(plan.egress && plan.ssh_known_hosts);
    }
    let env = egress_env(true);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
    assert_eq!(get("all_proxy"), Some("socks5h://127.0.0.1:1080"));
    let ssh = get("GIT_SSH_COMMAND").unwrap();
    assert!(
        ssh.contains("SOCKS4A:127.0.0.1:%h:%p,socksport=1080"),
        "{ssh}"
    );
    assert!(
        ssh.contains("UserKnownHostsFile=/.sandbox-egress/known_hosts"),
        "{ssh}"
    );
}

/// T8: the proxy's forwarder socket reaches PID 1 only as a
/// descriptor (`--egress-channel`), never as a path in the sandbox: whoever
/// holds a channel is handed host sockets.
#[test]
fn the_forwarder_channel_is_a_descriptor_never_a_bind() {
    let host = FakeHost::standard();
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.egress = Some(sandbox_plugin_api::EgressEndpoints {
        http_socket: "/tmp/e/http.sock".into(),
        socks_socket: "/tmp/e/socks.sock".into(),
        ssh_known_hosts: None,
        forwarder_socket: Some("/tmp/e/forwarder.sock".into()),
    });
    let plan = run(&spec, &host).unwrap();
    let args = strings(&plan);
    assert!(has(&args, &["--egress-channel", "5"]), "{args:?}");
    assert!(
        !args.iter().any(|a| a.contains("forwarder.sock")),
        "{args:?}"
    );
    assert_eq!(
        plan.egress_channel.as_deref(),
        Some(Path::new("/tmp/e/forwarder.sock"))
    );
    spec.egress.as_mut().unwrap().forwarder_socket = None;
    let plan = run(&spec, &host).unwrap();
    assert!(!strings(&plan).iter().any(|a| a == "--egress-channel"));
    assert_eq!(plan.egress_channel, None);
}

/// C1 (exec only from the system view): configured system paths are bound
/// read-only after the private /tmp and $HOME and after the binds (so
/// nothing hides them, and inside a writable bind they stay read-only),
/// and they, the system dirs and sandbox-init are the only exec roots.
#[test]
fn configured_system_paths_go_on_top_and_are_the_extra_exec_roots() {
    let mut host = FakeHost::standard();
    host.dir("/home/u/.cargo/bin")
        .dir("/tmp/tools")
        .dir("/work/proj");
    let spec = spec_with(vec![bind("/home/u", false)]);
    let extra = [
        PathBuf::from("/home/u/.cargo/bin"),
        PathBuf::from("/tmp/tools"),
        PathBuf::from("/nonexistent"),
    ];
    let plan = plan(
        &PlanInput {
            spec: &spec,
            home: Some(Path::new("/home/u")),
            init: Path::new("/opt/cc/sandbox-init"),
            control_fd: 3,
            extra_system: &extra,
            guard: true,
            gitconfig: None,
            toolchains: &crate::toolchains::Found::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            tmpfs_bytes: 1 << 20,
            server_state: &[],
            path_dirs: &[],
        },
        &host,
    )
    .unwrap();
    let args = strings(&plan);
    let tmpfs = find(&args, &["--tmpfs", "/tmp"]).unwrap();
    let home = find(&args, &["--bind", "/home/u", "/home/u"]).unwrap();
    let cargo = find(
        &args,
        &["--ro-bind", "/home/u/.cargo/bin", "/home/u/.cargo/bin"],
    )
    .unwrap();
    let tools = find(&args, &["--ro-bind", "/tmp/tools", "/tmp/tools"]).unwrap();
    assert!(cargo > home && tools > tmpfs, "{args:?}");
    assert!(!args.contains(&"/nonexistent".to_owned()), "{args:?}");
    let at = args.iter().position(|a| a == "--").unwrap();
    let exec_from: Vec<&str> = args[at..]
        .windows(2)
        .filter(|w| w[0] == "--exec-from")
        .map(|w| w[1].as_str())
        .collect();
    for root in ["/usr", "/home/u/.cargo/bin", "/tmp/tools", INIT_IN_SANDBOX] {
        assert!(exec_from.contains(&root), "{root}: {exec_from:?}");
    }
    assert!(!exec_from.contains(&"/home/u"), "{exec_from:?}");
}

/// F5 on Linux: exec grants reach sandbox-init as `--exec-grant`, each a
/// writable place (inside a writable bind and existing there, or a private
/// tmpfs mount itself); anything else is refused with the reason; read-only
/// modes grant nothing.
#[test]
fn exec_grants_are_writable_places_only() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/build").dir("/data/real");
    let grant = |roots: &[&str], mode: SandboxMode| {
        let spec = SandboxSpec {
            mode,
            exec_grant_roots: roots.iter().map(PathBuf::from).collect(),
            ..spec_with(vec![bind("/work/proj", false), bind("/data/real", true)])
        };
        run(&spec, &host)
    };
    let ok = grant(
        &[
            "/work/proj",
            "/work/proj/build",
            "/tmp",
            "/var/tmp",
            "/home/u",
        ],
        SandboxMode::Chat,
    )
    .unwrap();
    let args = strings(&ok);
    let at = args.iter().position(|a| a == "--").unwrap();
    let granted: Vec<&str> = args[at..]
        .windows(2)
        .filter(|w| w[0] == "--exec-grant")
        .map(|w| w[1].as_str())
        .collect();
    assert_eq!(
        granted,
        [
            "/work/proj",
            "/work/proj/build",
            "/tmp",
            "/var/tmp",
            "/home/u"
        ]
    );
    assert_eq!(ok.exec_grants.len(), 5);
    let rows: [(&[&str], PlanError); 5] = [
        (
            &["/data/real"],
            PlanError::GrantNotWritable("/data/real".into()),
        ),
        (
            &["/usr/bin"],
            PlanError::GrantNotWritable("/usr/bin".into()),
        ),
        (
            &["/tmp/sub"],
            PlanError::GrantNotWritable("/tmp/sub".into()),
        ),
        (
            &["/work/proj/gone"],
            PlanError::GrantMissing("/work/proj/gone".into()),
        ),
        (
            &["rel"],
            PlanError::NotAbsolute("execGrantRoots entry", "rel".into()),
        ),
    ];
    for (roots, want) in rows {
        assert_eq!(
            grant(roots, SandboxMode::Chat).unwrap_err(),
            want,
            "{roots:?}"
        );
    }
    let review = grant(&["/work/proj", "/tmp"], SandboxMode::Review).unwrap();
    assert!(review.exec_grants.is_empty());
    assert!(!strings(&review).contains(&"--exec-grant".to_owned()));
}

/// SPEC G4: a private home gets the generated `.gitconfig` through
/// bwrap's `--file` (after its tmpfs); a bound home gets nothing of ours.
#[test]
fn a_private_home_gets_the_generated_gitconfig_only() {
    let host = FakeHost::standard();
    let config = "[user]\n\tname = \"A\"\n";
    let nothing = crate::toolchains::Found::default();
    let input = |spec| PlanInput {
        spec,
        home: Some(Path::new("/home/u")),
        init: Path::new("/opt/cc/sandbox-init"),
        control_fd: 3,
        extra_system: &[],
        guard: true,
        gitconfig: Some(config),
        toolchains: &nothing,
        cache_bytes: DEFAULT_CACHE_BYTES,
        tmpfs_bytes: 1 << 20,
        server_state: &[],
        path_dirs: &[],
    };
    let private = spec_with(vec![bind("/work/proj", false)]);
    let planned = plan(&input(&private), &host).unwrap();
    let args = strings(&planned);
    let tmpfs = find(&args, &["--tmpfs", "/home/u"]).unwrap();
    let file = find(&args, &["--file", "4", "/home/u/.gitconfig"]).unwrap();
    assert!(file > tmpfs, "{args:?}");
    assert_eq!(planned.gitconfig.as_deref(), Some(config));
    let bound = spec_with(vec![bind("/home/u", false)]);
    let planned = plan(&input(&bound), &host).unwrap();
    assert!(!strings(&planned).contains(&"--file".to_owned()));
    assert_eq!(planned.gitconfig, None);
}

fn run_with_toolchains(
    spec: &SandboxSpec,
    host: &FakeHost,
    extra: &[PathBuf],
    found: &crate::toolchains::Found,
) -> Plan {
    plan(
        &PlanInput {
            spec,
            home: Some(Path::new("/home/u")),
            init: Path::new("/opt/cc/sandbox-init"),
            control_fd: 3,
            extra_system: extra,
            guard: true,
            toolchains: found,
            cache_bytes: 5 << 20,
            gitconfig: None,
            tmpfs_bytes: 1 << 20,
            server_state: &[],
            path_dirs: &[],
        },
        host,
    )
    .unwrap()
}

fn toolchain_host() -> FakeHost {
    let mut host = FakeHost::standard();
    for dir in [
        "/home/u/.cargo/bin",
        "/home/u/.rustup",
        "/home/u/.nvm/versions/node/v20/etc",
        "/home/u/.npm",
        "/work/proj",
        "/work/proj/cargo-home",
    ] {
        for at in Path::new(dir).ancestors().filter(|a| a.parent().is_some()) {
            host.dir(&at.display().to_string());
        }
    }
    host.file("/home/u/.cargo/credentials.toml")
        .file("/home/u/.nvm/versions/node/v20/etc/npmrc")
        .file("/work/proj/cargo-home/credentials.toml");
    host
}

fn found_on(host: &FakeHost, path: &str, vars: &[(&str, &str)]) -> crate::toolchains::Found {
    let env = crate::toolchains::ToolEnv {
        path: Some(path.into()),
        home: Some("/home/u".into()),
        vars: vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), PathBuf::from(v)))
            .collect(),
    };
    crate::toolchains::discover(&env, &[], host)
}

/// The `--caches` argument sandbox-init gets.
fn caches_arg(args: &[String]) -> Option<CacheOverlays> {
    let at = args.iter().position(|a| a == "--caches")?;
    Some(serde_json::from_str(&args[at + 1]).unwrap())
}

/// G4: toolchains are bound read-only after the private $HOME and before
/// the binds, and are exec roots; caches are bound read-only at their path
/// for sandbox-init's overlay (its `bin` read-only on top, its credentials
/// hidden by whiteouts, the tmpfs capped), exec-able only beneath a grant.
#[test]
fn toolchains_are_read_only_exec_roots_and_caches_overlays() {
    let host = toolchain_host();
    let found = found_on(
        &host,
        "/home/u/.cargo/bin:/home/u/.nvm/versions/node/v20/bin",
        &[("NVM_DIR", "/home/u/.nvm")],
    );
    let spec = spec_with(vec![bind("/work/proj", false)]);
    let plan = run_with_toolchains(&spec, &host, &[], &found);
    let args = strings(&plan);
    let home = find(&args, &["--tmpfs", "/home/u"]).unwrap();
    let rustup = find(&args, &["--ro-bind", "/home/u/.rustup", "/home/u/.rustup"]).unwrap();
    let cargo = find(&args, &["--ro-bind", "/home/u/.cargo", "/home/u/.cargo"]).unwrap();
    let proj = find(&args, &["--bind", "/work/proj", "/work/proj"]).unwrap();
    assert!(home < rustup && rustup < proj && cargo < proj, "{args:?}");
    assert!(has(&args, &["--dir", CACHES_STAGING]), "{args:?}");
    let at = args.iter().position(|a| a == "--").unwrap();
    let exec_from: Vec<&str> = args[at..]
        .windows(2)
        .filter(|w| w[0] == "--exec-from")
        .map(|w| w[1].as_str())
        .collect();
    for root in ["/home/u/.rustup", "/home/u/.nvm", "/home/u/.cargo/bin"] {
        assert!(exec_from.contains(&root), "{root}: {exec_from:?}");
    }
    assert!(!exec_from.contains(&"/home/u/.cargo"), "{exec_from:?}");
    let caches = caches_arg(&args).unwrap();
    assert_eq!(caches.size_bytes, 5 << 20);
    assert_eq!(caches.staging, CACHES_STAGING);
    let points: Vec<&str> = caches.overlays.iter().map(|o| o.point.as_str()).collect();
    assert_eq!(points, ["/home/u/.cargo", "/home/u/.npm"]);
    let cargo = &caches.overlays[0];
    assert_eq!(cargo.read_only, ["/home/u/.cargo/bin"]);
    assert_eq!(cargo.hidden, ["credentials.toml", "credentials"]);
    assert!(!cargo.exec);
    // The nvm global npmrc under a read-only toolchain is masked by sandbox-init.
    assert!(
        has(
            &args,
            &["--mask-file", "/home/u/.nvm/versions/node/v20/etc/npmrc"]
        ),
        "{args:?}"
    );
    assert_eq!(
        plan.toolchains,
        [
            PathBuf::from("/home/u/.rustup"),
            PathBuf::from("/home/u/.nvm")
        ]
    );
    assert_eq!(
        plan.caches,
        [
            PathBuf::from("/home/u/.cargo"),
            PathBuf::from("/home/u/.npm")
        ]
    );
    // Beneath the granted private home, the overlays keep exec like it.
    let granted = SandboxSpec {
        exec_grant_roots: vec!["/home/u".into()],
        ..spec.clone()
    };
    let caches = caches_arg(&strings(&run_with_toolchains(&granted, &host, &[], &found))).unwrap();
    assert!(caches.overlays.iter().all(|o| o.exec), "{caches:?}");
    // A cache overlay itself may be granted (npx runs what it put in ~/.npm).
    let npm = SandboxSpec {
        exec_grant_roots: vec!["/home/u/.npm".into()],
        ..spec.clone()
    };
    let planned = run_with_toolchains(&npm, &host, &[], &found);
    assert_eq!(planned.exec_grants, [PathBuf::from("/home/u/.npm")]);
    let caches = caches_arg(&strings(&planned)).unwrap();
    let exec: Vec<bool> = caches.overlays.iter().map(|o| o.exec).collect();
    assert_eq!(exec, [false, true], "{caches:?}");
    // Nothing found: no overlay argument, no staging dir.
    let none = strings(&run_with_toolchains(&spec, &host, &[], &Default::default()));
    assert!(caches_arg(&none).is_none() && !has(&none, &["--dir", CACHES_STAGING]));
}

/// G4, G5: what a bind shows already is left to the bind, and a cache with a
/// bind inside is not overlaid (the overlay would hide the bind); both
/// are listed as skipped with the reason. A bound home is the exception
/// for its caches (the home allowlist): they are overlaid on the bind, so
/// nothing written there reaches the host, and its toolchains are kept
/// read-only as every other dot-path of it.
#[test]
fn binds_win_over_toolchains_and_caches() {
    let host = toolchain_host();
    let found = found_on(&host, "/home/u/.cargo/bin", &[]);
    let spec = SandboxSpec {
        write_deny_globs: vec!["**/*.pem".into()],
        ..spec_with(vec![bind("/home/u", false)])
    };
    let plan = run_with_toolchains(&spec, &host, &[], &found);
    let args = strings(&plan);
    assert!(
        has(&args, &["--ro-bind", "/home/u/.rustup", "/home/u/.rustup"]),
        "{args:?}"
    );
    assert!(
        !has(&args, &["--ro-bind", "/home/u/.cargo", "/home/u/.cargo"]),
        "an overlay on the bind: {args:?}"
    );
    let overlays = caches_arg(&args).expect("overlays on the home's bind");
    let points: Vec<&str> = overlays.overlays.iter().map(|o| o.point.as_str()).collect();
    assert_eq!(points, ["/home/u/.cargo", "/home/u/.npm"], "{args:?}");
    assert!(plan.toolchains.is_empty());
    let guard = plan.guard.as_ref().unwrap();
    assert_eq!(
        guard.allowlisted_home.as_deref(),
        Some(Path::new("/home/u"))
    );
    assert_eq!(
        guard.throwaway,
        [PathBuf::from("/home/u/.cargo"), "/home/u/.npm".into()]
    );
    // The home bind shows the cargo credentials: masked as a home secret.
    assert!(has(
        &args,
        &["--mask-file", "/home/u/.cargo/credentials.toml"]
    ));
    let inner = spec_with(vec![bind("/home/u/.npm", false)]);
    let found = found_on(&host, "", &[]);
    let plan = run_with_toolchains(&inner, &host, &[], &found);
    assert!(plan.caches.is_empty(), "{:?}", plan.caches);
    let mut host = toolchain_host();
    host.dir("/home/u/.npm/proj");
    let inside = spec_with(vec![bind("/home/u/.npm/proj", false)]);
    let plan = run_with_toolchains(&inside, &host, &[], &found);
    assert!(
        plan.skipped
            .contains(&("/home/u/.npm".into(), "a bind lies inside it".into())),
        "{:?}",
        plan.skipped
    );
    // A PATH entry holding the work dir would show its neighbours.
    let found = found_on(&host, "/work", &[]);
    let plan = run_with_toolchains(
        &spec_with(vec![bind("/work/proj", false)]),
        &host,
        &[],
        &found,
    );
    assert!(plan.toolchains.is_empty(), "{:?}", plan.toolchains);
    assert!(
        plan.skipped
            .contains(&("/work".into(), "a bind lies inside it".into())),
        "{:?}",
        plan.skipped
    );
}

/// C1: secrets are masked under configured `system_paths` too (they were
/// not views before), and a toolchain's credential files are masked
/// wherever a bind shows them, even when its home is not `~/.cargo`.
#[test]
fn secrets_under_system_paths_and_toolchain_homes_are_masked() {
    let host = toolchain_host();
    let spec = spec_with(vec![bind("/work/proj", false)]);
    let plan = run_with_toolchains(
        &spec,
        &host,
        &[PathBuf::from("/home/u/.cargo")],
        &Default::default(),
    );
    let args = strings(&plan);
    let bound = find(&args, &["--ro-bind", "/home/u/.cargo", "/home/u/.cargo"]).unwrap();
    let masked = find(&args, &["--mask-file", "/home/u/.cargo/credentials.toml"]).unwrap();
    assert!(bound < masked, "{args:?}");
    let found = found_on(&host, "", &[("CARGO_HOME", "/work/proj/cargo-home")]);
    let plan = run_with_toolchains(&spec, &host, &[], &found);
    assert!(
        has(
            &strings(&plan),
            &["--mask-file", "/work/proj/cargo-home/credentials.toml"]
        ),
        "{:?}",
        plan.args
    );
}

/// G5 (T14): a bind that holds the server's runtime dir — a workdir of
/// `/tmp`, where root's lies — is planned with that directory masked (an
/// empty directory, like every directory mask), and nothing else changes;
/// a bind that does not hold it masks nothing of it.
#[test]
fn the_server_state_inside_a_bind_is_masked() {
    let mut host = FakeHost::standard();
    host.dir("/tmp").dir(SERVER_STATE).dir("/work/proj");
    let plan = run(&spec_with(vec![bind("/tmp", false)]), &host).unwrap();
    assert!(
        plan.masked.contains(&PathBuf::from(SERVER_STATE)),
        "{:?}",
        plan.masked
    );
    let args = strings(&plan);
    assert!(has(&args, &["--mask-dir", SERVER_STATE]), "{args:?}");
    assert!(has(&args, &["--bind", "/tmp", "/tmp"]), "{args:?}");
    let plan = run(&spec_with(vec![bind("/work/proj", false)]), &host).unwrap();
    assert!(
        !plan.masked.contains(&PathBuf::from(SERVER_STATE)),
        "{:?}",
        plan.masked
    );
}

/// G4 (T27): a version manager's shims are an overlay inside its read-only
/// home — no bind of their own (the home's shows the lower layer), exec-able
/// (an exec root, and `exec` for sandbox-init's noexec pass) with no exec
/// grant at all.
#[test]
fn a_version_managers_shims_are_an_exec_able_overlay_in_its_home() {
    let mut host = toolchain_host();
    for dir in [
        "/home/u",
        "/home/u/.pyenv",
        "/home/u/.pyenv/shims",
        "/home/u/.pyenv/bin",
    ] {
        host.dir(dir);
    }
    let found = found_on(&host, "/home/u/.pyenv/shims:/home/u/.pyenv/bin", &[]);
    let spec = spec_with(vec![bind("/work/proj", false)]);
    let plan = run_with_toolchains(&spec, &host, &[], &found);
    let args = strings(&plan);
    assert!(
        has(&args, &["--ro-bind", "/home/u/.pyenv", "/home/u/.pyenv"]),
        "{args:?}"
    );
    assert!(
        !has(
            &args,
            &["--ro-bind", "/home/u/.pyenv/shims", "/home/u/.pyenv/shims"]
        ),
        "{args:?}"
    );
    assert!(
        has(&args, &["--exec-from", "/home/u/.pyenv/shims"]),
        "{args:?}"
    );
    let caches = caches_arg(&args).unwrap();
    let shims = caches
        .overlays
        .iter()
        .find(|o| o.point == "/home/u/.pyenv/shims")
        .unwrap_or_else(|| panic!("{caches:?}"));
    assert!(shims.exec && shims.read_only.is_empty(), "{shims:?}");
    assert!(plan.exec_grants.is_empty(), "{:?}", plan.exec_grants);
}

/// A source that resolves elsewhere than where the server checked it is
/// refused, naming both (SPEC G5, threat model T40); one that resolves
/// where it was checked plans, and every bind of it goes to bubblewrap as a
/// descriptor, the protected points listed for sandbox-init to check.
#[test]
fn a_source_resolving_elsewhere_than_checked_is_refused_and_binds_go_by_descriptor() {
    let mut host = FakeHost::standard();
    host.symlink("/work/proj/sub", "/data/real");
    let mut spec = spec_with(vec![bind("/work/proj/sub", false)]);
    spec.checked_host_paths
        .insert("/work/proj/sub".into(), "/work/proj/sub".into());
    let err = run(&spec, &host).unwrap_err();
    assert_eq!(
        err,
        PlanError::Changed {
            path: "/work/proj/sub".into(),
            checked: "/work/proj/sub".into(),
            now: "/data/real".into(),
        }
    );
    assert!(err.to_string().contains("checked and made as one object"));
    spec.checked_host_paths
        .insert("/work/proj/sub".into(), "/data/real".into());
    let mut spec_protected = spec.clone();
    spec_protected.bind_mounts = vec![bind("/work/proj", false)];
    spec_protected.protected_paths = vec!["/data/real".into()];
    host.dir("/work/proj/keep");
    spec_protected.protected_paths = vec!["/work/proj/keep".into()];
    for spec in [spec, spec_protected] {
        let plan = run(&spec, &host).unwrap();
        let (args, sources) = crate::pinned::by_descriptor(&plan.args).unwrap();
        let before_init = args.iter().take_while(|a| *a != "--");
        assert!(
            !before_init
                .clone()
                .any(|a| a == "--bind" || a == "--ro-bind"),
            "{args:?}"
        );
        let fds = before_init
            .filter(|a| a.to_string_lossy().ends_with("bind-fd"))
            .count();
        assert_eq!(fds, sources.len());
        for point in &plan.protected {
            let listed = args
                .windows(2)
                .any(|w| w[0] == "--protected" && w[1] == point.as_os_str());
            assert!(listed, "{point:?} not checked by sandbox-init: {args:?}");
        }
    }
}

/// A protected path inside another keeps the outer one read-only: nothing
/// inside the outer one, already a read-only mount, is re-bound writable
/// as the inner one's ancestor (sandbox-init would refuse the launch).
#[test]
fn a_protected_path_inside_another_keeps_the_outer_one_read_only() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/a")
        .dir("/work/proj/a/b")
        .dir("/work/proj/a/b/c");
    let mut spec = spec_with(vec![bind("/work/proj", false)]);
    spec.protected_paths = vec!["/work/proj/a/b/c".into(), "/work/proj/a".into()];
    let plan = run(&spec, &host).unwrap();
    let binds: Vec<(String, String)> = plan
        .args
        .windows(3)
        .filter(|w| w[0] == "--bind" || w[0] == "--ro-bind")
        .map(|w| {
            (
                w[0].to_string_lossy().into_owned(),
                w[2].to_string_lossy().into_owned(),
            )
        })
        .filter(|(_, dest)| dest.starts_with("/work/proj/"))
        .collect();
    assert_eq!(
        binds,
        [
            ("--ro-bind".to_owned(), "/work/proj/a".to_owned()),
            ("--ro-bind".to_owned(), "/work/proj/a/b/c".to_owned()),
        ]
    );
}

/// A read-only bind inside a writable one is checked by sandbox-init as a
/// read-only mount too: its destination lies where other sessions write.
#[test]
fn a_read_only_bind_inside_a_writable_one_is_checked_by_sandbox_init() {
    let mut host = FakeHost::standard();
    host.dir("/work/proj/x").dir("/work/proj/x/checkout");
    let spec = spec_with(vec![
        bind("/work/proj", false),
        bind("/work/proj/x/checkout", true),
    ]);
    let plan = run(&spec, &host).unwrap();
    let checked: Vec<&OsString> = plan
        .args
        .windows(2)
        .filter(|w| w[0] == "--protected")
        .map(|w| &w[1])
        .collect();
    assert!(
        checked.iter().any(|p| *p == "/work/proj/x/checkout"),
        "{checked:?}"
    );
    assert!(!checked.iter().any(|p| *p == "/work/proj"), "{checked:?}");
}

/// SPEC G5 (T17): each `unixSockets` entry reaches the guard as the path
/// the sandbox sees it at (through the deepest bind that shows it); one no
/// bind shows fails the launch, naming the flag.
#[test]
fn allowed_sockets_reach_the_guard_at_their_path_inside() {
    let mut spec = spec_with(vec![
        bind("/work/proj", false),
        SandboxBindMount {
            host_path: "/data/real".into(),
            guest_path: Some("/mnt/data".into()),
            read_only: true,
        },
    ]);
    spec.write_deny_globs = vec!["**/.env".into()];
    spec.unix_sockets = vec!["/work/proj/a.sock".into(), "/data/real/s/b.sock".into()];
    let guard = run(&spec, &FakeHost::standard()).unwrap().guard.unwrap();
    assert_eq!(
        guard.unix_sockets,
        [
            PathBuf::from("/work/proj/a.sock"),
            "/mnt/data/s/b.sock".into()
        ]
    );
    spec.unix_sockets = vec!["/elsewhere/c.sock".into()];
    let err = run(&spec, &FakeHost::standard()).unwrap_err();
    assert_eq!(err, PlanError::SocketHidden("/elsewhere/c.sock".into()));
    assert!(err.to_string().contains("--allow-socket"), "{err}");
    spec.unix_sockets = vec!["rel.sock".into()];
    assert!(matches!(
        run(&spec, &FakeHost::standard()),
        Err(PlanError::NotAbsolute(..))
    ));
}

/// G4, G5: in a bound home, a PATH directory inside a cache overlaid on
/// the bind is kept read-only by sandbox-init on the overlay (a mount of
/// bubblewrap's there would be a locked child of the overlay's lower
/// layer, which the kernel refuses to stack on), and a toolchain the bind
/// shows, read-only by the home's allowlist, runs from there.
#[test]
fn a_bound_homes_caches_take_no_mount_inside_and_its_toolchains_run() {
    let host = toolchain_host();
    let found = found_on(&host, "/home/u/.cargo/bin", &[]);
    let spec = spec_with(vec![bind("/home/u", false)]);
    let path_dirs = [PathBuf::from("/home/u/.cargo/bin")];
    let planned = plan(
        &PlanInput {
            spec: &spec,
            home: Some(Path::new("/home/u")),
            init: Path::new("/opt/cc/sandbox-init"),
            control_fd: 3,
            extra_system: &[],
            guard: true,
            toolchains: &found,
            cache_bytes: 5 << 20,
            gitconfig: None,
            tmpfs_bytes: 1 << 20,
            server_state: &[],
            path_dirs: &path_dirs,
        },
        &host,
    )
    .unwrap();
    let args = strings(&planned);
    let inside: Vec<&[String]> = args
        .windows(3)
        .filter(|w| w[0] == "--bind" || w[0] == "--ro-bind")
        .filter(|w| w[2].starts_with("/home/u/.cargo/"))
        .collect();
    assert!(inside.is_empty(), "{inside:?}");
    let caches = caches_arg(&args).unwrap();
    let cargo = caches
        .overlays
        .iter()
        .find(|o| o.point == "/home/u/.cargo")
        .unwrap();
    assert!(
        cargo.read_only.contains(&"/home/u/.cargo/bin".to_owned()),
        "{:?}",
        cargo.read_only
    );
    assert_eq!(cargo.hidden, ["credentials.toml", "credentials"]);
    let exec_from: Vec<&str> = args
        .windows(2)
        .filter(|w| w[0] == "--exec-from")
        .map(|w| w[1].as_str())
        .collect();
    assert!(exec_from.contains(&"/home/u/.rustup"), "{exec_from:?}");
    assert!(exec_from.contains(&"/home/u/.cargo/bin"), "{exec_from:?}");
}
