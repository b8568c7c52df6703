//! The probe's findings, kept for the rest of the boot.
//!
//! Running the KVM test guest and asking QEMU about itself (three QEMU
//! starts), tens of milliseconds, is on the path of every server start,
//! `cc_server run` included, and the answers do not change while the machine
//! is up with the same kernel and the same QEMU binary. So they are stored
//! once per boot, in a directory only this user can read or write, under a key
//! made of what they depend on: the boot id, the kernel release, the QEMU
//! binary found in `PATH` (path, size, mtime), the accelerator setting and
//! this crate's version. Any change of those re-runs the probe. A cache that
//! cannot be read, written or trusted is skipped, never an error.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::kvm::KvmFinding;
use crate::qemu::Finding;

/// The file, inside [`dir`].
const FILE: &str = "microvm-probe.json";

/// What is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What the findings depend on (see the module doc).
    pub key: String,
    pub kvm: Option<KvmFinding>,
    pub qemu: Finding,
    /// The guest image, verified (hashing ~70 MB is not for every start).
    pub image: Result<crate::image::Found, crate::image::NoImage>,
    /// The host TSC in kHz, when TCG needs it.
    pub tsc_khz: Option<u64>,
}

/// The key for this host now. `qemu`: the binary `PATH` leads to, if any;
/// `accel`: the accelerator setting as given.
pub fn key(qemu: Option<&Path>, accel: &str, image: &str) -> String {
    let read = |p: &str| fs::read_to_string(p).unwrap_or_default().trim().to_owned();
    let binary = qemu.map_or_else(
        || "none".to_owned(),
        |path| match fs::metadata(path) {
            Ok(m) => format!(
                "{}:{}:{}.{}",
                path.display(),
                m.size(),
                m.mtime(),
                m.mtime_nsec()
            ),
            Err(_) => format!("{}:?", path.display()),
        },
    );
    format!(
        "boot={} kernel={} qemu={binary} accel={accel} image={image} version={}",
        read("/proc/sys/kernel/random/boot_id"),
        read("/proc/sys/kernel/osrelease"),
        env!("CARGO_PKG_VERSION")
    )
}

/// This user's private directory for it: `$XDG_RUNTIME_DIR/cc_server`, else
/// `<temp dir>/cc_server-<uid>`. Created 0700; `None` unless it is a real
/// directory (not a link) owned by us that nobody else can read or write.
pub fn dir() -> Option<PathBuf> {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let dir = sandbox_paths::state_dirs::runtime_dir(
        uid,
        std::env::var_os("XDG_RUNTIME_DIR").as_deref(),
        &std::env::temp_dir(),
    );
    let _ = fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = fs::symlink_metadata(&dir).ok()?;
    (meta.is_dir() && meta.uid() == uid && meta.mode() & 0o077 == 0).then_some(dir)
}

/// The entry in `dir` stored under `key`, if there is one.
pub fn load(dir: &Path, key: &str) -> Option<Entry> {
    let text = fs::read_to_string(dir.join(FILE)).ok()?;
    let entry: Entry = serde_json::from_str(&text).ok()?;
    (entry.key == key).then_some(entry)
}

/// Stores `entry` in `dir` (whole or not at all: a temporary file renamed
/// over the old one). Failures are only logged.
pub fn store(dir: &Path, entry: &Entry) {
    let write = || -> std::io::Result<()> {
        let tmp = dir.join(format!("{FILE}.{}", std::process::id()));
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&serde_json::to_vec(entry).map_err(std::io::Error::other)?)?;
        fs::rename(&tmp, dir.join(FILE))
    };
    if let Err(e) = write() {
        tracing::debug!("microvm: cannot keep the probe's findings: {e}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kvm::{Plan, Verdict};

    fn entry(key: &str) -> Entry {
        Entry {
            key: key.to_owned(),
            kvm: Some(KvmFinding {
                plan: Plan::DEFAULT,
                verdict: Verdict::Emulated {
                    iterations: 30_000,
                    elapsed: Duration::from_millis(17),
                },
                pvm: true,
            }),
            qemu: Finding::Missing,
            image: Err(crate::image::NoImage("none".into())),
            tsc_khz: None,
        }
    }

    #[test]
    fn an_entry_comes_back_only_under_its_own_key() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path(), "k1"), None);
        store(dir.path(), &entry("k1"));
        assert_eq!(load(dir.path(), "k1"), Some(entry("k1")));
        assert_eq!(load(dir.path(), "k2"), None, "another key is a miss");
        store(dir.path(), &entry("k2"));
        assert_eq!(load(dir.path(), "k1"), None, "replaced");
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        assert_eq!(load(dir.path(), "k2"), None, "a damaged file is a miss");
    }

    #[test]
    fn the_key_follows_the_qemu_binary_and_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let qemu = dir.path().join("qemu-system-x86_64");
        std::fs::write(&qemu, "one").unwrap();
        let first = key(Some(&qemu), "kvm", "img1");
        assert!(first.starts_with("boot="), "{first}");
        assert_eq!(key(Some(&qemu), "kvm", "img1"), first, "stable");
        assert_ne!(key(Some(&qemu), "tcg", "img1"), first);
        assert_ne!(key(None, "kvm", "img1"), first);
        assert_ne!(key(Some(&qemu), "kvm", "img2"), first, "a new image");
        std::fs::write(&qemu, "a different build").unwrap();
        assert_ne!(
            key(Some(&qemu), "kvm", "img1"),
            first,
            "a new QEMU is probed again"
        );
    }

    #[test]
    fn the_directory_is_private() {
        let dir = dir().expect("a private cache directory");
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.mode() & 0o077, 0);
    }
}
