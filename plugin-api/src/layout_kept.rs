//! Layout checks that passed, kept (SPEC A2), so a start does not repeat them:
//! abi_stable compares every type a plugin exports with ours when it is loaded,
//! a noticeable share of every start of a one-shot `cc_server run`
//! (docs/measurements.md). The answer depends only on the two binaries, so a
//! pass is kept as an empty marker file named by a hash of both files'
//! identities (device, inode, size, modification and change times) and the
//! boot: a plugin or a server that changes in any way, or is replaced, is
//! checked again. Anything else — the marker directory not ours, not private,
//! unreadable — means the check runs, as it always did.
//!
//! A marker only lets a file skip the check when it is the very file that
//! passed; whoever could write one could replace the plugin itself.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::state_dirs::runtime_dir;

/// The marker a check of the plugin file `plugin` (its [`identity`] from
/// before it was opened) by this server would leave, if the file is still
/// that one and the markers can be trusted here.
pub(crate) fn marker(plugin: &Identity) -> Option<PathBuf> {
    if identity(&plugin.path).as_ref() != Some(plugin) {
        return None; // replaced while it was being opened: check it
    }
    let here = this_server()?;
    Some(here.dir.join(key(plugin, &here.binary, &here.boot)))
}

/// What every marker of this process shares, found once (a server loads
/// each of its plugins with it).
struct ThisServer {
    dir: PathBuf,
    binary: Identity,
    boot: String,
}

fn this_server() -> Option<&'static ThisServer> {
    static HERE: std::sync::OnceLock<Option<ThisServer>> = std::sync::OnceLock::new();
    HERE.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        Some(ThisServer {
            dir: private_dir()?,
            binary: identity(&std::env::current_exe().ok()?)?,
            boot: boot.trim().to_owned(),
        })
    })
    .as_ref()
}

/// Whether `marker` says the check passed.
pub(crate) fn passed(marker: &Path) -> bool {
    std::fs::symlink_metadata(marker).is_ok_and(|m| m.is_file())
}

/// Records a pass; failing to is harmless (the next load checks again).
pub(crate) fn record(marker: &Path) {
    let _ = std::fs::write(marker, b"");
}

/// `<runtime dir>/abi-checked`, made 0700, and only if it and the runtime
/// dir are ours and closed to others.
fn private_dir() -> Option<PathBuf> {
    let uid = effective_uid()?;
    let base = runtime_dir(
        uid,
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
    );
    let dir = base.join("abi-checked");
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    [&base, &dir]
        .iter()
        .all(|d| std::fs::symlink_metadata(d).is_ok_and(|m| private_to(&m, uid)))
        .then_some(dir)
}

/// Ours, from `/proc/self/status` (`Uid: real effective …`): this crate
/// makes no syscall by hand.
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn private_to(meta: &std::fs::Metadata, uid: u32) -> bool {
    meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 == 0
}

/// What changes when a file does: where it is, which inode, its size and
/// both of its times (the change time cannot be set back by its writer).
#[derive(Debug, Hash, PartialEq, Eq)]
pub(crate) struct Identity {
    path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

pub(crate) fn identity(path: &Path) -> Option<Identity> {
    let path = std::fs::canonicalize(path).ok()?;
    let m = std::fs::metadata(&path).ok()?;
    Some(Identity {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
        path,
    })
}

/// The marker's name. `DefaultHasher::new` has fixed keys, and the server
/// binary is part of the key, so the same inputs name the same marker.
fn key(plugin: &Identity, server: &Identity, boot: &str) -> String {
    let mut h = std::hash::DefaultHasher::new();
    (plugin, server, boot, env!("CARGO_PKG_VERSION")).hash(&mut h);
    format!("{:016x}", h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_gets_another_marker() {
        let dir = std::env::temp_dir().join(format!("layout-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plugin = dir.join("libx.so");
        std::fs::write(&plugin, b"one").unwrap();
        let server = std::env::current_exe().unwrap();
        let first = key(
            &identity(&plugin).unwrap(),
            &identity(&server).unwrap(),
            "b",
        );
        assert_eq!(
            first,
            key(
                &identity(&plugin).unwrap(),
                &identity(&server).unwrap(),
                "b"
            ),
            "the same files, the same marker"
        );
        std::fs::write(&plugin, b"two").unwrap();
        let changed = key(
            &identity(&plugin).unwrap(),
            &identity(&server).unwrap(),
            "b",
        );
        assert_ne!(first, changed, "rewritten in place");
        assert_ne!(
            changed,
            key(
                &identity(&plugin).unwrap(),
                &identity(&server).unwrap(),
                "c"
            ),
            "another boot"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn markers_are_trusted_only_in_a_private_directory_of_ours() {
        let dir = std::env::temp_dir().join(format!("layout-kept-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let uid = effective_uid().unwrap();
        assert_eq!(uid, std::fs::metadata(&dir).unwrap().uid(), "we made it");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(private_to(&std::fs::metadata(&dir).unwrap(), uid));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!private_to(&std::fs::metadata(&dir).unwrap(), uid));
        assert!(!private_to(&std::fs::metadata(&dir).unwrap(), uid + 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
