//! Conversation workspaces on real filesystems (SPEC H1, H10, H11): xfs
//! (reflink=1) and btrfs made on loop devices, and the ext4 root for the
//! refusal. One test at a time holds the volumes ([`SERIAL`]); every
//! volume is unmounted and detached by its guard, also when a test fails,
//! and a start sweeps what a killed run left (only names with [`PREFIX`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use sandbox_test_support::skip_or_fail;

use crate::util::{CcServer, Plugins, Server, code, text, unique};

/// Every image, mount point and loop device of these tests is named so.
const PREFIX: &str = "cc-server-test-vol-";

/// The volumes are made and removed one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A loop-mounted filesystem, unmounted and detached on drop.
pub(crate) struct Volume {
    pub(crate) mount: PathBuf,
    image: PathBuf,
    device: String,
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.image);
        let _ = std::fs::remove_dir(&self.mount);
    }
}

fn sh(cmd: &str) -> std::process::Output {
    Command::new("sh").arg("-c").arg(cmd).output().unwrap()
}

/// Unmounts and detaches what a killed run of these tests left.
fn sweep_leftovers() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for line in mountinfo.lines() {
        if let Some(mount) = line.split(' ').nth(4)
            && mount.contains(PREFIX)
        {
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
    }
    let loops = text(&sh("losetup -a").stdout);
    for line in loops.lines() {
        if line.contains(PREFIX)
            && let Some(device) = line.split(':').next()
        {
            let _ = Command::new("losetup").arg("-d").arg(device).status();
        }
    }
    for dir in ["/var/tmp", "/tmp"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(PREFIX) {
                    let path = entry.path();
                    let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir(&path));
                }
            }
        }
    }
}

/// A fresh filesystem of `kind` (`xfs`, `btrfs`), or a skip saying why not.
pub(crate) fn volume(kind: &str) -> Option<Volume> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail("loop devices and mounts need root (CI runs as root)");
        return None;
    }
    let mkfs = format!("mkfs.{kind}");
    if !sh(&format!("command -v {mkfs}")).status.success() {
        skip_or_fail(format!(
            "{mkfs} is not installed: `.ci/install-deps` installs xfsprogs and btrfs-progs"
        ));
        return None;
    }
    let tag = format!("{PREFIX}{kind}-{}", unique());
    let image = PathBuf::from(format!("/var/tmp/{tag}.img"));
    let mount = PathBuf::from(format!("/tmp/{tag}"));
    let file = std::fs::File::create(&image).unwrap();
    file.set_len(512 << 20).unwrap();
    drop(file);
    let made = match kind {
        "xfs" => sh(&format!("mkfs.xfs -q -m reflink=1 {}", image.display())),
        _ => sh(&format!("mkfs.btrfs -q {}", image.display())),
    };
    assert!(made.status.success(), "{mkfs}: {}", text(&made.stderr));
    let attached = sh(&format!("losetup -f --show {}", image.display()));
    if !attached.status.success() {
        let _ = std::fs::remove_file(&image);
        skip_or_fail(format!("losetup failed: {}", text(&attached.stderr)));
        return None;
    }
    let device = text(&attached.stdout).trim().to_owned();
    std::fs::create_dir(&mount).unwrap();
    let volume = Volume {
        mount,
        image,
        device,
    };
    let mounted = Command::new("mount")
        .arg(&volume.device)
        .arg(&volume.mount)
        .output()
        .unwrap();
    assert!(mounted.status.success(), "mount: {}", text(&mounted.stderr));
    Some(volume)
}

/// Holds the volumes' turn; sweeps leftovers of a killed run first.
pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    sweep_leftovers();
    guard
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

/// A checkout: a commit, an 8 MiB file, an executable, a symlink, an
/// ignored build cache, a `.env`, a FIFO.
fn checkout(dir: &Path) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    git(dir, &["config", "user.name", "t"]);
    std::fs::write(dir.join("README"), "hello\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "target/\n.env\n").unwrap();
    std::fs::write(dir.join("src/big.bin"), vec![7u8; 8 << 20]).unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/big.bin", dir.join("link")).unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "one"]);
    std::fs::create_dir_all(dir.join("target/debug")).unwrap();
    std::fs::write(dir.join("target/debug/cache"), "built\n").unwrap();
    std::fs::write(dir.join(".env"), "TOKEN=secret\n").unwrap();
    let fifo = std::ffi::CString::new(dir.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
}

/// `cc_server` with its state and data directories set.
fn cli(plugins: &Plugins, state: &Path, data: &Path) -> CcServer {
    CcServer::new(plugins)
        .env_remove("XDG_DATA_HOME")
        .config(&format!(
            "[workspaces]\nstate_dir = \"{}\"\ndata_dir = \"{}\"\n",
            state.display(),
            data.display()
        ))
}

fn free_bytes(path: &Path) -> u64 {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a NUL-terminated path and a buffer statvfs fills.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) }, 0);
    // SAFETY: filled above.
    let st = unsafe { st.assume_init() };
    st.f_bavail * st.f_frsize
}

fn new_conversation(cc: CcServer, workspace: &str, agents: &[&str]) -> (String, String) {
    let mut cc = cc.args(["conversation", "new", "--workspace", workspace]);
    for agent in agents {
        cc = cc.args(["--agent", agent]);
    }
    let out = cc.output();
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    (text(&out.stdout).trim().to_owned(), text(&out.stderr))
}

/// H1: on xfs and btrfs a conversation is a reflink clone of the checkout
/// — working tree, `.git`, ignored build caches, modes, times and symlinks
/// kept, extents shared (`filefrag` says so; free space barely moves); a
/// FIFO is listed and left out; `.env` is left out unless the workspace
/// lists it; a write in the clone leaves the checkout and the other
/// conversation untouched.
#[test]
fn a_conversation_is_a_reflink_clone_on_xfs_and_btrfs() {
    let _turn = serial();
    for kind in ["xfs", "btrfs"] {
        let Some(vol) = volume(kind) else { return };
        let repo = vol.mount.join("repo");
        checkout(&repo);
        let (state, data) = (vol.mount.join("state"), vol.mount.join("data"));
        let plugins = Plugins::with_none();
        let added = cli(&plugins, &state, &data)
            .args(["workspace", "add", "w", "--repo"])
            .arg(&repo)
            .output();
        assert_eq!(code(&added), 0, "{}", text(&added.stderr));
        let before = free_bytes(&vol.mount);
        let (id, said) = new_conversation(cli(&plugins, &state, &data), "w", &["a"]);
        let after = free_bytes(&vol.mount);
        assert!(
            said.contains("pipe") && said.contains("FIFO"),
            "{kind}: {said}"
        );
        assert!(
            said.contains(".env") && said.contains("include_secrets"),
            "{kind}: {said}"
        );
        let clone = data.join("conversations").join(&id).join("repos/repo");
        assert_eq!(std::fs::read(clone.join("README")).unwrap(), b"hello\n");
        assert_eq!(
            std::fs::read(clone.join("target/debug/cache")).unwrap(),
            b"built\n"
        );
        assert!(!clone.join(".env").exists(), "{kind}: a secret cloned");
        assert!(!clone.join("pipe").exists());
        assert_eq!(
            std::fs::read_link(clone.join("link")).unwrap(),
            PathBuf::from("src/big.bin")
        );
        use std::os::unix::fs::MetadataExt;
        let (src, dst) = (
            std::fs::metadata(repo.join("run.sh")).unwrap(),
            std::fs::metadata(clone.join("run.sh")).unwrap(),
        );
        assert_eq!(src.mode(), dst.mode(), "{kind}: mode");
        assert_eq!(
            (src.mtime(), src.mtime_nsec()),
            (dst.mtime(), dst.mtime_nsec()),
            "{kind}: mtime"
        );
        assert_eq!(
            git(&clone, &["log", "--format=%s"]),
            "one",
            "{kind}: its own .git"
        );
        let frag = Command::new("filefrag")
            .arg("-v")
            .arg(clone.join("src/big.bin"))
            .output()
            .unwrap();
        assert!(
            text(&frag.stdout).contains("shared"),
            "{kind}: extents not shared:\n{}",
            text(&frag.stdout)
        );
        assert!(
            before.saturating_sub(after) < 2 << 20,
            "{kind}: cloning 8 MiB took {} bytes",
            before.saturating_sub(after)
        );
        // A second conversation; a write in the first reaches neither it
        // nor the checkout.
        let (other, _) = new_conversation(cli(&plugins, &state, &data), "w", &[]);
        std::fs::write(clone.join("README"), "changed\n").unwrap();
        assert_eq!(std::fs::read(repo.join("README")).unwrap(), b"hello\n");
        let other_clone = data.join("conversations").join(&other).join("repos/repo");
        assert_eq!(
            std::fs::read(other_clone.join("README")).unwrap(),
            b"hello\n"
        );
        // Listed, the secret comes along.
        let listed = cli(&plugins, &state, &data)
            .args([
                "workspace",
                "add",
                "with-env",
                "--include-secret",
                ".env",
                "--repo",
            ])
            .arg(format!("r={}", repo.display()))
            .output();
        assert_eq!(code(&listed), 0, "{}", text(&listed.stderr));
        let (third, _) = new_conversation(cli(&plugins, &state, &data), "with-env", &[]);
        let env = data.join("conversations").join(&third).join("repos/r/.env");
        assert_eq!(std::fs::read(env).unwrap(), b"TOKEN=secret\n");
    }
}

/// H1: a data directory on ext4, or on another volume than the checkout,
/// is refused with both filesystems and the config key named, and nothing
/// is left behind.
#[test]
fn ext4_and_cross_volume_data_dirs_are_refused_with_the_message() {
    let _turn = serial();
    let Some(vol) = volume("xfs") else { return };
    let Some(other) = volume("xfs") else { return };
    let repo = vol.mount.join("repo");
    checkout(&repo);
    let plugins = Plugins::with_none();
    let ext4 = tempfile::tempdir_in("/var/tmp").unwrap();
    for (data, names) in [
        (ext4.path().join("data"), ["xfs", "ext4"]),
        (other.mount.join("data"), ["xfs", "xfs"]),
    ] {
        let state = ext4.path().join(format!("state-{}", unique()));
        let added = cli(&plugins, &state, &data)
            .args(["workspace", "add", "w", "--repo"])
            .arg(&repo)
            .output();
        assert_eq!(code(&added), 0, "{}", text(&added.stderr));
        let out = cli(&plugins, &state, &data)
            .args(["conversation", "new", "--workspace", "w"])
            .output();
        let err = text(&out.stderr);
        assert_ne!(code(&out), 0, "{err}");
        assert!(
            err.contains("reflink") && err.contains("[workspaces] data_dir"),
            "{err}"
        );
        for name in names {
            assert!(err.contains(name), "{name} not named: {err}");
        }
        let left: Vec<_> = std::fs::read_dir(data.join("conversations"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        let list = cli(&plugins, &state, &data)
            .args(["conversation", "list"])
            .output();
        assert_eq!(text(&list.stdout), "");
    }
}

/// H1, H10, H11 through the API on bwrap: the dispatch form gets exactly
/// its agent's binds (shown in `details`); two agents share `repos/` and
/// not their workdirs, a neighbour's workdir is invisible; the form takes
/// no client binds; a raw spec binds nothing below the data directory, and
/// a registered checkout it binds is read-only inside; `run` in a
/// registered checkout is refused with the hint.
#[test]
fn agents_share_repos_not_workdirs_and_checkouts_stay_read_only() {
    require_bwrap!();
    let _turn = serial();
    let Some(vol) = volume("xfs") else { return };
    let repo = vol.mount.join("repo");
    checkout(&repo);
    let (state, data) = (vol.mount.join("state"), vol.mount.join("data"));
    let plugins = Plugins::with_bwrap();
    let added = cli(&plugins, &state, &data)
        .args(["workspace", "add", "w", "--repo"])
        .arg(&repo)
        .output();
    assert_eq!(code(&added), 0, "{}", text(&added.stderr));
    let (id, _) = new_conversation(cli(&plugins, &state, &data), "w", &["a", "b"]);
    let conv = data.join("conversations").join(&id);
    let server = Server::start_with(cli(&plugins, &state, &data));
    let launch = |agent: &str| {
        let body = serde_json::json!({"conversationId": id, "agentId": agent});
        let made = server.call(
            "POST",
            "/v1/sandboxes?backend=bwrap",
            Some(&body.to_string()),
        );
        assert_eq!(made.status, 201, "{}\n{}", text(&made.body), server.log());
        made.json()
    };
    let exec = |session: &str, script: &str| {
        let body = serde_json::json!({"argv": ["sh", "-c", script]});
        let out = server.call(
            "POST",
            &format!("/v1/sandboxes/{session}/execs"),
            Some(&body.to_string()),
        );
        assert_eq!(out.status, 200, "{}", text(&out.body));
        let events = out.lines();
        (
            crate::util::exit_code(&events),
            crate::util::joined(&events, "stdout"),
        )
    };
    let a = launch("a");
    let details = &a["details"];
    assert_eq!(details["conversation"], id.as_str());
    assert_eq!(details["agent"], "a");
    let binds = details["binds"].as_array().unwrap();
    assert_eq!(binds.len(), 3, "workdir, config, repos: {binds:?}");
    let a_id = a["sessionId"].as_str().unwrap().to_owned();
    let a_work = conv.join("agents/a/work");
    let b_work = conv.join("agents/b/work");
    let repos = conv.join("repos/repo");
    let (status, out) = exec(
        &a_id,
        &format!(
            "pwd; echo from-a > mine; echo shared >> {r}/README; echo x > {c}/agent.json 2>/dev/null && echo config-written; test -e {b} && echo sees-b; test -e {repo} && echo sees-checkout; true",
            r = repos.display(),
            c = conv.join("agents/a/config").display(),
            b = b_work.display(),
            repo = repo.display(),
        ),
    );
    assert_eq!(status, 0);
    assert!(out.starts_with(&a_work.display().to_string()), "{out}");
    assert!(
        !out.contains("config-written")
            && !out.contains("sees-b")
            && !out.contains("sees-checkout"),
        "{out}"
    );
    assert_eq!(std::fs::read(a_work.join("mine")).unwrap(), b"from-a\n");
    assert_eq!(
        std::fs::read(repo.join("README")).unwrap(),
        b"hello\n",
        "the checkout changed"
    );
    let b = launch("b");
    let b_id = b["sessionId"].as_str().unwrap().to_owned();
    let (_, out) = exec(
        &b_id,
        &format!(
            "cat {}/README; test -e {} && echo sees-a; true",
            repos.display(),
            a_work.join("mine").display()
        ),
    );
    assert!(out.contains("shared") && !out.contains("sees-a"), "{out}");
    // The form takes no client binds; a raw spec none below the data dir.
    for (body, field) in [
        (
            serde_json::json!({"conversationId": id, "agentId": "a", "bindMounts": [{"hostPath": "/tmp"}]}),
            "bindMounts",
        ),
        (
            serde_json::json!({"bindMounts": [{"hostPath": conv}]}),
            "bindMounts",
        ),
    ] {
        let refused = server.call(
            "POST",
            "/v1/sandboxes?backend=bwrap",
            Some(&body.to_string()),
        );
        assert_eq!(refused.status, 400, "{}", text(&refused.body));
        assert_eq!(refused.json()["field"], field);
    }
    // A raw spec binding the checkout writable: read-only inside.
    let raw = server.create_bwrap_over(&format!("raw-{}", unique()), &repo);
    let raw_id = raw.json()["sessionId"].as_str().unwrap().to_owned();
    let (_, out) = exec(
        &raw_id,
        "echo x > planted 2>/dev/null && echo wrote; echo y >> README 2>/dev/null && echo appended; true",
    );
    assert!(!out.contains("wrote") && !out.contains("appended"), "{out}");
    assert!(!repo.join("planted").exists());
    // Deleting the conversation is refused while a sandbox uses it.
    let busy = server.call(
        "DELETE",
        &format!("/v1/conversations/{id}?force=true"),
        None,
    );
    assert_eq!(busy.status, 409, "{}", text(&busy.body));
    for s in [&a_id, &b_id, &raw_id] {
        server.call("DELETE", &format!("/v1/sandboxes/{s}"), None);
    }
    // `run` inside the checkout is refused with the hint.
    let run = cli(&plugins, &state, &data)
        .current_dir(&repo.join("src"))
        .args(["run", "--", "true"])
        .output();
    assert_eq!(code(&run), 125, "{}", text(&run.stderr));
    assert!(
        text(&run.stderr).contains("--conversation"),
        "{}",
        text(&run.stderr)
    );
    // `run --conversation --agent` works, adding the agent.
    let run = cli(&plugins, &state, &data)
        .args(["run", "--conversation", &id, "--agent", "c", "--", "pwd"])
        .output();
    assert_eq!(code(&run), 0, "{}", text(&run.stderr));
    assert_eq!(
        text(&run.stdout).trim(),
        conv.join("agents/c/work").display().to_string()
    );
}

/// H1: a restart keeps workspaces, conversations and agents; API calls and
/// a CLI beside the server at once leave the database whole; a damaged
/// database is refused by name, never reset.
#[test]
fn state_survives_a_restart_and_concurrent_writers_and_a_damaged_file_is_named() {
    let _turn = serial();
    let Some(vol) = volume("xfs") else { return };
    let repo = vol.mount.join("repo");
    checkout(&repo);
    let (state, data) = (vol.mount.join("state"), vol.mount.join("data"));
    let plugins = Plugins::with_none();
    let mut server = Server::start_with(cli(&plugins, &state, &data));
    let (server_ref, repo_ref) = (&server, &repo);
    let (plugins_ref, state_ref, data_ref) = (&plugins, &state, &data);
    std::thread::scope(|scope| {
        for i in 0..4 {
            let (server, repo) = (server_ref, repo_ref);
            scope.spawn(move || {
                let body = serde_json::json!({"name": format!("api{i}"), "repositories": [{"path": repo}]});
                let made = server.call("POST", "/v1/workspaces", Some(&body.to_string()));
                assert_eq!(made.status, 201, "{}", text(&made.body));
            });
            let (plugins, state, data) = (plugins_ref, state_ref, data_ref);
            scope.spawn(move || {
                let out = cli(plugins, state, data)
                    .args(["workspace", "add", &format!("cli{i}"), "--repo"])
                    .arg(repo)
                    .output();
                assert_eq!(code(&out), 0, "{}", text(&out.stderr));
            });
        }
    });
    let made = server.call(
        "POST",
        "/v1/conversations",
        Some(r#"{"workspace":"api0","agents":["x"]}"#),
    );
    assert_eq!(made.status, 201, "{}", text(&made.body));
    let id = made.json()["id"].as_str().unwrap().to_owned();
    server.stop();
    let again = Server::start_with(cli(&plugins, &state, &data));
    let listed = again.call("GET", "/v1/workspaces", None).json();
    assert_eq!(listed.as_array().unwrap().len(), 8, "{listed}");
    let conv = again
        .call("GET", &format!("/v1/conversations/{id}"), None)
        .json();
    assert_eq!(conv["agents"], serde_json::json!(["x"]));
    assert_eq!(conv["state"], "ready");
    drop(again);
    let db = state.join("workspaces.db");
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(state.join(format!("workspaces.db{suffix}")));
    }
    std::fs::write(&db, vec![0x42u8; 16384]).unwrap();
    let out = cli(&plugins, &state, &data)
        .args(["workspace", "list"])
        .output();
    assert_eq!(code(&out), 125);
    assert!(
        text(&out.stderr).contains(&db.display().to_string()),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        std::fs::read(&db).unwrap(),
        vec![0x42u8; 16384],
        "the file was reset"
    );
}

/// H1: export lands the conversation's HEAD as a branch of the registered
/// checkout, leaves its working tree and HEAD as they were, and runs
/// nothing planted in the clone (hooks, `core.fsmonitor`,
/// `core.hooksPath`, alternates); a checked-out branch and a
/// non-fast-forward without --force are refused; removing a conversation
/// with commits not exported needs --force, and not after an export.
#[test]
fn export_lands_the_branch_and_runs_nothing_planted_in_the_clone() {
    let _turn = serial();
    let Some(vol) = volume("btrfs") else { return };
    let repo = vol.mount.join("repo");
    checkout(&repo);
    let (state, data) = (vol.mount.join("state"), vol.mount.join("data"));
    let plugins = Plugins::with_none();
    let added = cli(&plugins, &state, &data)
        .args(["workspace", "add", "w", "--repo"])
        .arg(&repo)
        .output();
    assert_eq!(code(&added), 0, "{}", text(&added.stderr));
    let (id, _) = new_conversation(cli(&plugins, &state, &data), "w", &[]);
    let clone = data.join("conversations").join(&id).join("repos/repo");
    std::fs::write(clone.join("feature.txt"), "new\n").unwrap();
    git(&clone, &["add", "feature.txt"]);
    git(&clone, &["commit", "-q", "-m", "two"]);
    let commit = git(&clone, &["rev-parse", "HEAD"]);
    // What an agent could plant in its clone.
    let sentinel = vol.mount.join(format!("ran-{}", unique()));
    let script = vol.mount.join("evil.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch {}\n", sentinel.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for hook in [
        "reference-transaction",
        "post-checkout",
        "pre-auto-gc",
        "post-merge",
    ] {
        std::fs::copy(&script, clone.join(".git/hooks").join(hook)).unwrap();
    }
    git(
        &clone,
        &["config", "core.fsmonitor", script.to_str().unwrap()],
    );
    git(
        &clone,
        &[
            "config",
            "core.hooksPath",
            clone.join(".git/hooks").to_str().unwrap(),
        ],
    );
    std::fs::write(
        clone.join(".git/objects/info/alternates"),
        "/nonexistent/objects\n",
    )
    .unwrap();
    let head_before = git(&repo, &["rev-parse", "HEAD"]);
    let status_before = git(&repo, &["status", "--porcelain"]);
    // Not exported yet: removing needs --force.
    let refused = cli(&plugins, &state, &data)
        .args(["conversation", "remove", &id])
        .output();
    assert_ne!(code(&refused), 0);
    assert!(
        text(&refused.stderr).contains("not exported"),
        "{}",
        text(&refused.stderr)
    );
    let export = |branch: &str, force: bool| {
        let mut cc =
            cli(&plugins, &state, &data).args(["conversation", "export", &id, "--branch", branch]);
        if force {
            cc = cc.arg("--force");
        }
        cc.output()
    };
    let checked_out = export("main", false);
    assert_ne!(code(&checked_out), 0);
    assert!(
        text(&checked_out.stderr).contains("checked out"),
        "{}",
        text(&checked_out.stderr)
    );
    let done = export("agent-work", false);
    assert_eq!(code(&done), 0, "{}", text(&done.stderr));
    assert_eq!(git(&repo, &["rev-parse", "refs/heads/agent-work"]), commit);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), status_before);
    assert!(
        !repo.join("feature.txt").exists(),
        "the working tree changed"
    );
    assert!(!sentinel.exists(), "something planted in the clone ran");
    // A non-fast-forward needs --force.
    git(&clone, &["reset", "-q", "--hard", "HEAD~1"]);
    std::fs::write(clone.join("other.txt"), "x\n").unwrap();
    git(&clone, &["add", "other.txt"]);
    git(
        &clone,
        &[
            "-c",
            "core.hooksPath=/dev/null",
            "commit",
            "-q",
            "-m",
            "three",
        ],
    );
    let _ = std::fs::remove_file(&sentinel);
    let nonff = export("agent-work", false);
    assert_ne!(code(&nonff), 0);
    assert!(
        text(&nonff.stderr).contains("--force"),
        "{}",
        text(&nonff.stderr)
    );
    let forced = export("agent-work", true);
    assert_eq!(code(&forced), 0, "{}", text(&forced.stderr));
    assert_eq!(
        git(&repo, &["rev-parse", "refs/heads/agent-work"]),
        git(&clone, &["rev-parse", "HEAD"])
    );
    assert!(!sentinel.exists(), "something planted in the clone ran");
    // Exported: removing needs no --force.
    let removed = cli(&plugins, &state, &data)
        .args(["conversation", "remove", &id])
        .output();
    assert_eq!(code(&removed), 0, "{}", text(&removed.stderr));
    assert!(!data.join("conversations").join(&id).exists());
}

/// H10, B10: `agent claude --conversation ID --agent NAME` runs Claude Code
/// in that agent's workdir with the server's binds; its Bash call passes
/// the hook and writes there, not in the registered checkout.
#[test]
fn agent_claude_runs_in_a_conversations_agent_workdir() {
    require_bwrap!();
    let Some(claude) = crate::claude::claude_bin() else {
        return;
    };
    let _turn = serial();
    let Some(vol) = volume("xfs") else { return };
    let repo = vol.mount.join("repo");
    checkout(&repo);
    let (state, data) = (vol.mount.join("state"), vol.mount.join("data"));
    let plugins = Plugins::with_bwrap();
    let added = cli(&plugins, &state, &data)
        .args(["workspace", "add", "w", "--repo"])
        .arg(&repo)
        .output();
    assert_eq!(code(&added), 0, "{}", text(&added.stderr));
    let (id, _) = new_conversation(cli(&plugins, &state, &data), "w", &["a"]);
    let api = crate::claude_api::FakeAnthropic::start(&["pwd; echo from-claude > mine"]);
    let out = cli(&plugins, &state, &data)
        .env("ANTHROPIC_BASE_URL", api.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-for-tests")
        .args([
            "agent",
            "claude",
            "--backend",
            "bwrap",
            "--conversation",
            &id,
        ])
        .args(["--agent", "a", "--claude"])
        .arg(&claude)
        .args(["--", "-p", "run the scripted commands"])
        .output();
    let results = api.results();
    assert_eq!(code(&out), 0, "{}\n{results:?}", text(&out.stderr));
    let a_work = data.join("conversations").join(&id).join("agents/a/work");
    let ran = results
        .iter()
        .find(|r| r.tool_use_id == "toolu_fake_1")
        .unwrap_or_else(|| panic!("{results:?}"));
    assert!(
        !ran.is_error && ran.content.contains(&a_work.display().to_string()),
        "{ran:?}"
    );
    assert_eq!(
        std::fs::read(a_work.join("mine")).unwrap(),
        b"from-claude\n"
    );
    assert!(!repo.join("mine").exists(), "the checkout changed");
}
