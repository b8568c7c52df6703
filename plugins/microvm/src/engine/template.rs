//! Fast start (docs/research/microvm.md §4.8): a machine booted once and saved
//! right after its agent said `Hello` — the template — is loaded by every
//! later launch instead of booting (a few hundred ms instead of seconds
//! under TCG).
//!
//! A saved machine loads only into QEMU with the same devices, so a
//! template is made per device set: the image, QEMU, the accelerator, the
//! TSC rate, and the number of shares with their read-only flags (the
//! exports' host paths are not part of the state: the template's point at
//! an empty directory, a launch's at its binds; nothing is mounted in the
//! saved guest). Templates live in this user's 0700 runtime cache,
//! written under a temporary name and renamed, so a reader never sees half
//! a file. Every machine loaded from one template starts with the same
//! kernel RNG state and boot id: the launch reseeds the RNG and sets the
//! clock before anything runs (`Vm::tell_restored`); the boot id stays the
//! template's. A template that cannot be made is logged and the launch
//! boots instead — slower, not weaker.

use std::collections::hash_map::DefaultHasher;
use std::fs::OpenOptions;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use super::argv::Share;
use super::{BOOT_PATIENCE_KVM, BOOT_PATIENCE_TCG, Engine, RuntimeDir, Tail, start};
use crate::options::Accel;

/// Templates kept; making one more removes the least recently used.
const KEEP: usize = 4;

/// The template for `shares`' device set: made now if there is none.
/// `None` when none can be made (the reason is logged).
pub(super) fn ensure(engine: &Engine, shares: &[Share]) -> Option<PathBuf> {
    let dir = crate::cache::dir()?.join("microvm-templates");
    if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_err() && !dir.is_dir() {
        return None;
    }
    let file = dir.join(format!("{:016x}.state", key(engine, shares)));
    if file.is_file() {
        // Its modification time says when it was last used (see `prune`).
        let _ = OpenOptions::new()
            .append(true)
            .open(&file)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        return Some(file);
    }
    prune(&dir);
    let started = Instant::now();
    match make(engine, shares, &file) {
        Ok(()) => {
            tracing::info!(
                "microvm: made a template for {} share(s) in {} ms: {}",
                shares.len(),
                started.elapsed().as_millis(),
                file.display()
            );
            Some(file)
        }
        Err(why) => {
            tracing::warn!("microvm: no template ({why}); booting instead");
            None
        }
    }
}

/// Removes the least recently used templates beyond `KEEP - 1` (each is
/// the size of the guest's used memory, tens of MB), and any
/// half-written one a crash left behind.
fn prune(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut templates = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let modified = entry.metadata().and_then(|m| m.modified()).ok();
        match path.extension().and_then(|e| e.to_str()) {
            Some("state") => templates.push((modified, path)),
            Some(e) if e.starts_with("partial-") => {
                let owner = e.trim_start_matches("partial-");
                if !Path::new("/proc").join(owner).exists() {
                    let _ = std::fs::remove_file(&path);
                }
            }
            _ => {}
        }
    }
    templates.sort();
    let over = (templates.len() + 1).saturating_sub(KEEP);
    for (_, path) in templates.into_iter().take(over) {
        let _ = std::fs::remove_file(path);
    }
}

/// What a template depends on (see the module doc), hashed for its name.
fn key(engine: &Engine, shares: &[Share]) -> u64 {
    let mut h = DefaultHasher::new();
    engine.image.dir.hash(&mut h);
    engine.image.cmdline.hash(&mut h);
    if let Ok(meta) = std::fs::metadata(&engine.qemu) {
        (meta.size(), meta.mtime(), meta.mtime_nsec()).hash(&mut h);
    }
    engine.qemu.hash(&mut h);
    matches!(engine.accel, Accel::Kvm).hash(&mut h);
    engine.tsc_khz.hash(&mut h);
    sandbox_microvm_proto::VERSION.hash(&mut h);
    shares
        .iter()
        .map(|s| s.read_only)
        .collect::<Vec<_>>()
        .hash(&mut h);
    h.finish()
}

/// Boots a machine with placeholder shares of the same flags, waits for
/// its agent, saves it to `file` and ends it.
fn make(engine: &Engine, shares: &[Share], file: &Path) -> Result<(), String> {
    let work = RuntimeDir::create("template").map_err(|e| format!("a work directory: {e}"))?;
    let empty = work.0.join("empty");
    std::fs::create_dir(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    let placeholders: Vec<Share> = shares
        .iter()
        .map(|s| Share {
            host: empty.clone(),
            ..s.clone()
        })
        .collect();
    let agent_socket = work.0.join("agent.sock");
    let qmp_socket = work.0.join("qmp.sock");
    let args = engine.args(&agent_socket, &qmp_socket, &placeholders);
    let setup = start::Setup {
        qemu: &engine.qemu,
        args: &args,
        dir: &work.0,
        agent_socket: &agent_socket,
        qmp_socket: &qmp_socket,
        patience: match engine.accel {
            Accel::Tcg => BOOT_PATIENCE_TCG,
            Accel::Kvm => BOOT_PATIENCE_KVM,
        },
    };
    let tail = Arc::new(Tail::default());
    let mut running = start::start(&setup, start::Origin::Boot, &tail)?;
    let partial = file.with_extension(format!("partial-{}", std::process::id()));
    let saved = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| format!("{}: {e}", partial.display()))
        .and_then(|state| {
            start::save(
                &mut running.qmp,
                &state,
                Instant::now() + start::LOAD_PATIENCE,
            )
            .map_err(|e| format!("saving the machine: {e}"))
        });
    let _ = running.qmp.execute("quit");
    let _ = running.child.kill();
    let _ = running.child.wait();
    for handle in running.console {
        let _ = handle.join();
    }
    if let Err(why) = saved {
        let _ = std::fs::remove_file(&partial);
        return Err(format!("{why}; console: {}", tail.text()));
    }
    std::fs::rename(&partial, file).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("{}: {e}", file.display())
    })
}
