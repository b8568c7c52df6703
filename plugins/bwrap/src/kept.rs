//! The probe's expensive answers, kept for the rest of the boot (SPEC B1,
//! B2; what it trusts is threat model T30).
//!
//! The canary (a whole bwrap with every namespace unshared) and the guard's
//! self-test (a second whole sandbox that touches `x.pem` and `x.txt`) cost
//! most of a one-shot `cc_server run`, and their answers do not change while
//! the machine is up with the same kernel, the same sysctls and the same
//! binaries. So a passing result is stored once per boot under a key made
//! of everything it depends on ([`key`]): the boot id, the kernel release,
//! the user-namespace and seccomp sysctls, the identity (device, inode,
//! size, mtime, ctime) of `bwrap`, `sandbox-init` and this plugin, the
//! effective uid and the `guard` setting. Computing the key is the
//! staleness check: a handful of `stat`s and `/proc/sys` reads (read only).
//!
//! Where: this user's runtime directory, the one every backend keeps its
//! state in and the host never lets a bind show
//! (`sandbox_paths::state_dirs::runtime_dir`:
//! `$XDG_RUNTIME_DIR/cc_server`, else `<temp dir>/cc_server-<uid>`), created
//! 0700. A directory or file that is a link, not ours, or writable by group
//! or others is refused — the probe then runs afresh and says why nothing
//! was kept. A file that cannot be read or parsed, or whose key differs, is
//! a miss, never trusted. Only passes are kept: a failure is probed again
//! at every start, so fixing the host takes effect at once.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The start of every kept file's name, inside the directory.
pub const FILE_PREFIX: &str = "bwrap-probe-";

/// The file an entry under `key` (made by [`key`]) lives in:
/// `bwrap-probe-<guarded|unguarded>-<install>.json`, `install` a hash of
/// the binaries' paths. One file per setting, so a host that runs both (a
/// guarded and an unguarded config, as `bench/realwork` does run by run)
/// keeps both; one per installation, so two builds on one machine (a
/// release and a checkout's, or several checkouts) keep one each instead
/// of each start replacing the other's — a rebuild in place replaces its
/// own, since the key holds each binary's identity.
pub fn file_for(key: &str) -> String {
    let setting = if key.contains(" guard=off") {
        "unguarded"
    } else {
        "guarded"
    };
    // FNV-1a over the paths (the part of each `file=` before its identity).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for path in key
        .split(' ')
        .filter_map(|t| t.strip_prefix("file="))
        .map(|t| t.split(':').next().unwrap_or(t))
    {
        for byte in path.bytes().chain(std::iter::once(0)) {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{FILE_PREFIX}{setting}-{hash:016x}.json")
}

/// A kept file larger than this is not ours.
const MAX_BYTES: u64 = 64 * 1024;

/// The sysctls whose change can turn a passing canary or self-test into a
/// failing one (namespaces, seccomp), read into the key.
const SYSCTLS: &[&str] = &[
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_ipc_namespaces",
    "/proc/sys/user/max_uts_namespaces",
    "/proc/sys/user/max_cgroup_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    "/proc/sys/kernel/seccomp/actions_avail",
];

/// What is kept: which checks passed, under which key, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// What the results depend on (see [`key`]).
    pub key: String,
    /// The canary passed.
    pub canary: bool,
    /// The guard's self-test passed (false: not run, or failed).
    pub guard: bool,
    /// When the checks ran, in seconds since the epoch.
    pub at: u64,
}

/// The key for this host now: `files` are the binaries the results depend
/// on (bwrap, sandbox-init, this plugin), `guard` whether the self-test is
/// part of the probe.
pub fn key(files: &[&Path], guard: bool) -> String {
    let read = |p: &str| match fs::read_to_string(p) {
        Ok(text) => text.split_whitespace().collect::<Vec<_>>().join(" "),
        Err(_) => "-".to_owned(),
    };
    let mut key = format!(
        "boot={} kernel={} uid={} version={} guard={}",
        read("/proc/sys/kernel/random/boot_id"),
        read("/proc/sys/kernel/osrelease"),
        euid(),
        env!("CARGO_PKG_VERSION"),
        if guard { "on" } else { "off" },
    );
    for sysctl in SYSCTLS {
        let name = sysctl.trim_start_matches("/proc/sys/");
        key.push_str(&format!(" {name}={}", read(sysctl)));
    }
    for file in files {
        key.push_str(&format!(" file={}", identity(file)));
    }
    key
}

/// A file's identity: path, device, inode, size, mtime and ctime (a new
/// build, a reinstall or a `touch` all change it).
fn identity(path: &Path) -> String {
    match fs::metadata(path) {
        Ok(m) => format!(
            "{}:{}:{}:{}:{}.{}:{}.{}",
            path.display(),
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec()
        ),
        Err(_) => format!("{}:?", path.display()),
    }
}

pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Why no directory is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoDir {
    /// It does not exist and cannot be made (say `XDG_RUNTIME_DIR` names
    /// a directory that is gone): nothing suspicious.
    Uncreatable(String),
    /// It exists but may not be trusted (a link, not ours, loose mode).
    Untrusted(String),
}

impl std::fmt::Display for NoDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Uncreatable(why) | Self::Untrusted(why) => f.write_str(why),
        }
    }
}

/// This user's runtime directory (see the module doc), created 0700 when
/// missing; `Err` says why it is not used.
pub fn dir() -> Result<PathBuf, NoDir> {
    let dir = sandbox_paths::state_dirs::runtime_dir(
        euid(),
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
    );
    match fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(NoDir::Uncreatable(format!(
                "{} cannot be created: {e}",
                dir.display()
            )));
        }
    }
    let meta = fs::symlink_metadata(&dir)
        .map_err(|e| NoDir::Uncreatable(format!("{}: {e}", dir.display())))?;
    trusted(&dir, &meta, true).map_err(NoDir::Untrusted)?;
    Ok(dir)
}

/// Whether a directory or file may be trusted with kept results: a real
/// directory or regular file (not a link), ours, not writable by group or
/// others. `Err` names the problem and the fix.
fn trusted(path: &Path, meta: &fs::Metadata, is_dir: bool) -> Result<(), String> {
    let what = if is_dir { "directory" } else { "file" };
    let kind_ok = if is_dir {
        meta.file_type().is_dir()
    } else {
        meta.file_type().is_file()
    };
    if !kind_ok {
        return Err(format!(
            "{} is not a {what} (a link or something else); remove it",
            path.display()
        ));
    }
    if meta.uid() != euid() {
        return Err(format!(
            "{} belongs to uid {}, not to us (uid {}); remove it",
            path.display(),
            meta.uid(),
            euid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        let fix = if is_dir { "chmod 700" } else { "chmod 600" };
        return Err(format!(
            "{} is writable by group or others (mode {:03o}); `{fix} {}` or remove it",
            path.display(),
            meta.mode() & 0o777,
            path.display()
        ));
    }
    Ok(())
}

/// Why a kept file gave nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// No file (the first probe of this boot, or dropped).
    Absent,
    /// A file for another boot, kernel, binary or setting.
    Stale,
    /// A file that may not be trusted or cannot be read (the reason).
    Refused(String),
}

/// The entry in `dir` stored under `key`.
pub fn load(dir: &Path, key: &str) -> Result<Entry, Miss> {
    let path = dir.join(file_for(key));
    let mut file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(e) => return Err(Miss::Refused(format!("{}: {e}", path.display()))),
    };
    let meta = file
        .metadata()
        .map_err(|e| Miss::Refused(format!("{}: {e}", path.display())))?;
    trusted(&path, &meta, false).map_err(Miss::Refused)?;
    if meta.len() > MAX_BYTES {
        return Err(Miss::Refused(format!(
            "{} is {} bytes, too large to be a kept probe; remove it",
            path.display(),
            meta.len()
        )));
    }
    let mut text = String::new();
    Read::by_ref(&mut file)
        .take(MAX_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| Miss::Refused(format!("{}: {e}", path.display())))?;
    let entry: Entry = serde_json::from_str(&text).map_err(|e| {
        Miss::Refused(format!(
            "{} is damaged ({e}); it is ignored and replaced",
            path.display()
        ))
    })?;
    if entry.key != key {
        return Err(Miss::Stale);
    }
    Ok(entry)
}

/// Stores `entry` in `dir`, whole or not at all (a private temporary file
/// renamed over the old one).
pub fn store(dir: &Path, entry: &Entry) -> std::io::Result<()> {
    let name = file_for(&entry.key);
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec(entry).map_err(std::io::Error::other)?)?;
        fs::rename(&tmp, dir.join(name))
    };
    let _ = fs::remove_file(&tmp);
    let result = write();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Removes the kept file (`probe --fresh`, or a launch that found a kept
/// capability gone).
pub fn drop_kept(dir: &Path) {
    let names = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(FILE_PREFIX) && n.ends_with(".json"));
    for name in names {
        match fs::remove_file(dir.join(&name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                "bwrap: cannot remove the kept probe {}: {e}",
                dir.join(&name).display()
            ),
        }
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn entry(key: &str) -> Entry {
        Entry {
            key: key.to_owned(),
            canary: true,
            guard: true,
            at: 1,
        }
    }

    #[test]
    fn an_entry_comes_back_only_under_its_own_key() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path(), "k1"), Err(Miss::Absent));
        store(dir.path(), &entry("k1")).unwrap();
        assert_eq!(load(dir.path(), "k1"), Ok(entry("k1")));
        assert_eq!(load(dir.path(), "k2"), Err(Miss::Stale));
        let mode = fs::metadata(dir.path().join(file_for("k1")))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        drop_kept(dir.path());
        assert_eq!(load(dir.path(), "k1"), Err(Miss::Absent));
    }

    #[test]
    fn a_guarded_and_an_unguarded_probe_are_kept_side_by_side() {
        let dir = tempfile::tempdir().unwrap();
        let on = entry("boot=b guard=on x");
        let off = entry("boot=b guard=off x");
        store(dir.path(), &on).unwrap();
        store(dir.path(), &off).unwrap();
        assert_eq!(load(dir.path(), &on.key), Ok(on.clone()));
        assert_eq!(load(dir.path(), &off.key), Ok(off.clone()));
        drop_kept(dir.path());
        assert_eq!(load(dir.path(), &on.key), Err(Miss::Absent));
        assert_eq!(load(dir.path(), &off.key), Err(Miss::Absent));
    }

    #[test]
    fn a_damaged_or_loose_file_is_never_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(file_for("k1"));
        fs::write(&file, "{\"key\":\"k1\",\"canary\":true").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(
            matches!(load(dir.path(), "k1"), Err(Miss::Refused(why)) if why.contains("damaged"))
        );
        store(dir.path(), &entry("k1")).unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            matches!(load(dir.path(), "k1"), Err(Miss::Refused(why)) if why.contains("writable by group or others"))
        );
        fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &file).unwrap();
        assert!(matches!(load(dir.path(), "k1"), Err(Miss::Refused(_))));
    }

    #[test]
    fn two_installations_keep_a_file_each_and_a_rebuild_replaces_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let bin = |name: &str, content: &str| {
            let path = dir.path().join(name);
            fs::write(&path, content).unwrap();
            path
        };
        let (one, two) = (bin("one-init", "a"), bin("two-init", "b"));
        let key_one = key(&[&one], true);
        let key_two = key(&[&two], true);
        assert_ne!(file_for(&key_one), file_for(&key_two));
        assert!(file_for(&key_one).starts_with(FILE_PREFIX));
        bin("one-init", "a rebuild");
        assert_eq!(file_for(&key(&[&one], true)), file_for(&key_one));
        assert_ne!(file_for(&key(&[&one], false)), file_for(&key_one));
    }

    #[test]
    fn the_key_follows_the_binaries_and_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let bwrap = dir.path().join("bwrap");
        fs::write(&bwrap, "one").unwrap();
        let first = key(&[&bwrap], true);
        assert!(first.starts_with("boot="), "{first}");
        assert!(first.contains("user/max_user_namespaces="), "{first}");
        assert_eq!(key(&[&bwrap], true), first, "stable");
        assert_ne!(key(&[&bwrap], false), first, "the guard setting");
        fs::write(&bwrap, "a different build").unwrap();
        assert_ne!(key(&[&bwrap], true), first, "a new bwrap is probed again");
    }
}
