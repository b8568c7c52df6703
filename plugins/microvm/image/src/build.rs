//! `cc-microvm-image build`: fetch the packages, cut out the vmlinux,
//! modules and busybox, assemble the initramfs, and write the image
//! content-addressed and atomically (temp dir + rename).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::debian::{self, Candidate, DebianError};
use crate::initramfs::{self, Contents, InitramfsError};
use crate::kernel::{self, KernelError};
use crate::manifest::{
    self, Agent, Artifact, CURRENT, FORMAT, INITRD, MANIFEST, Manifest, ManifestError, Package,
    VMLINUX, sha256_hex,
};
use crate::modules::{self, ModulesError};

/// Why the image could not be built, pruned or made current.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("--agent {}", .path.display())]
    ReadAgent {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--agent {}", .path.display())]
    Agent {
        path: PathBuf,
        #[source]
        source: InitramfsError,
    },
    #[error("{}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Debian(#[from] DebianError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Initramfs(#[from] InitramfsError),
    #[error(transparent)]
    Modules(#[from] ModulesError),
    /// The hint reads after the OS error, so that error is part of this
    /// message rather than a source.
    #[error("{}: {error} (is this a linux-image package?)", .path.display())]
    NoKernelModules {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: expected one kernel version, found {versions:?}", .path.display())]
    KernelVersions {
        path: PathBuf,
        versions: Vec<String>,
    },
    #[error("{}", .path.display())]
    Vmlinux {
        path: PathBuf,
        #[source]
        source: KernelError,
    },
    #[error("{}", .path.display())]
    ModuleDeps {
        path: PathBuf,
        #[source]
        source: ModulesError,
    },
    #[error("module {name} was not read")]
    ModuleNotRead { name: String },
    #[error("{}: the busybox-static package has no bin/busybox", .root.display())]
    NoBusybox { root: PathBuf },
    #[error("running {} --list", .bin.display())]
    RunBusybox {
        bin: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} --list failed: {stderr}", .bin.display())]
    BusyboxFailed { bin: PathBuf, stderr: String },
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("removing broken {}", .dir.display())]
    RemoveBroken {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} -> {}", .from.display(), .to.display())]
    Rename {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An I/O error on `path`.
fn io_at(path: &Path) -> impl Fn(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A failed rename of `from` to `to`.
fn rename_error<'a>(from: &'a Path, to: &'a Path) -> impl Fn(std::io::Error) -> BuildError + 'a {
    move |source| BuildError::Rename {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        source,
    }
}

/// The kernel metapackage whose dependency is the kernel we ship: the
/// generic kernel, which has 9p and VMGENID (docs/research/microvm.md §4.3).
pub const KERNEL_META: &str = "linux-image-amd64";
/// The static busybox package.
pub const BUSYBOX_PACKAGE: &str = "busybox-static";
/// The kernel command line stored in the manifest. The host adds
/// `tsc_early_khz=` under TCG at launch, since it is per host.
pub const CMDLINE: &str = "console=ttyS0 rdinit=/init quiet panic=-1 cryptomgr.notests";

/// What to build.
pub struct Options {
    /// The static agent binary (or a `#!` script, for boot tests).
    pub agent: PathBuf,
    /// The output directory holding `<id>/` and `current`.
    pub out: PathBuf,
    /// Where `.deb`s are kept between builds (default `<out>/.cache`).
    pub cache: Option<PathBuf>,
    /// Module closure roots (default [`modules::DEFAULT_ROOTS`]).
    pub roots: Vec<String>,
    /// The agent's protocol version, recorded in the manifest.
    pub protocol: u32,
    /// Build even when an image with the same inputs exists.
    pub rebuild: bool,
}

/// Removes every image in `out` but `keep` (leftover builds of other
/// inputs: ~70 MB each); returns how many went. The cache stays.
pub fn prune(out: &Path, keep: &Path) -> Result<usize, BuildError> {
    let mut removed = 0;
    let entries = std::fs::read_dir(out).map_err(io_at(out))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let is_image = entry
            .file_name()
            .to_str()
            .is_some_and(crate::manifest::is_id);
        if is_image && path != keep && path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io_at(&path))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The outcome of [`build`].
#[derive(Debug)]
pub struct Built {
    /// `out/<id>`.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
    /// True when an existing image was reused and nothing was written.
    pub reused: bool,
}

/// Builds (or reuses) the image and points `out/current` at it.
pub fn build(opts: &Options, log: &dyn Fn(&str)) -> Result<Built, BuildError> {
    let agent = std::fs::read(&opts.agent).map_err(|source| BuildError::ReadAgent {
        path: opts.agent.clone(),
        source,
    })?;
    initramfs::check_agent(&agent).map_err(|source| BuildError::Agent {
        path: opts.agent.clone(),
        source,
    })?;
    let agent_info = Agent {
        sha256: sha256_hex(&agent),
        protocol: opts.protocol,
    };
    let out = &opts.out;
    let cache = opts.cache.clone().unwrap_or_else(|| out.join(".cache"));
    for d in [out, &cache] {
        std::fs::create_dir_all(d).map_err(io_at(d))?;
    }
    remove_stale(out, ".tmp-");
    remove_stale(&cache, ".work-");

    let kernel_pkg = debian::resolve_meta(KERNEL_META)?;
    let kc = debian::candidate(&kernel_pkg)?;
    let bc = debian::candidate(BUSYBOX_PACKAGE)?;
    log(&format!(
        "kernel {} {}, busybox {} {}",
        kc.package, kc.version, bc.package, bc.version
    ));

    if !opts.rebuild
        && let Some((dir, m)) = existing(out, &kc, &bc, &agent_info, &opts.roots)
    {
        log(&format!(
            "reusing {} (same packages, agent and command line)",
            dir.display()
        ));
        set_current(out, &m.id())?;
        return Ok(Built {
            dir,
            manifest: m,
            reused: true,
        });
    }

    let kdeb = debian::fetch(&kc, &cache, log)?;
    let bdeb = debian::fetch(&bc, &cache, log)?;
    let work = WorkDir(cache.join(format!(".work-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&work.0);
    log(&format!("extracting {}", kdeb.display()));
    debian::extract(&kdeb, &work.0.join("kernel"))?;
    debian::extract(&bdeb, &work.0.join("busybox"))?;

    let (kver, vmlinux) = extract_vmlinux(&work.0.join("kernel"), log)?;
    let kmods = collect_modules(&work.0.join("kernel"), &kver, &opts.roots, log)?;
    let (busybox, applets) = extract_busybox(&work.0.join("busybox"))?;
    log(&format!("busybox: {} applets", applets.len()));

    let module_names = kmods.iter().map(|(n, _, _)| n.clone()).collect();
    let contents = Contents {
        agent,
        busybox,
        applets,
        modules: kmods.into_iter().map(|(_, p, b)| (p, b)).collect(),
    };
    let initrd = initramfs::assemble(&contents)?.to_bytes();
    let manifest = Manifest {
        format: FORMAT,
        kernel: package(&kc),
        busybox: package(&bc),
        agent: agent_info,
        modules: module_names,
        initrd: artifact(&initrd),
        vmlinux: artifact(&vmlinux),
        cmdline: CMDLINE.to_string(),
        built: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let (dir, reused) = write_image(out, &manifest, &vmlinux, &initrd)?;
    set_current(out, &manifest.id())?;
    let manifest = if reused {
        manifest::read(&dir)?
    } else {
        manifest
    };
    Ok(Built {
        dir,
        manifest,
        reused,
    })
}

fn package(c: &Candidate) -> Package {
    Package {
        package: c.package.clone(),
        version: c.version.clone(),
        sha256: c.sha256.clone(),
    }
}

fn artifact(data: &[u8]) -> Artifact {
    Artifact {
        sha256: sha256_hex(data),
        bytes: data.len() as u64,
    }
}

/// An image in `out` built from the same inputs, if one verifies. The
/// module list is the closure, so it must contain every root; a root this
/// kernel lacks just means no shortcut (the full build then reuses by id).
fn existing(
    out: &Path,
    kc: &Candidate,
    bc: &Candidate,
    agent: &Agent,
    roots: &[String],
) -> Option<(PathBuf, Manifest)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(manifest::is_id)
        })
        .collect();
    dirs.sort();
    dirs.into_iter().find_map(|dir| {
        let m = manifest::read(&dir).ok()?;
        let same = m.kernel == package(kc)
            && m.busybox == package(bc)
            && m.agent == *agent
            && m.cmdline == CMDLINE
            && roots
                .iter()
                .all(|r| m.modules.contains(&modules::canonical(r)));
        if !same {
            return None;
        }
        manifest::verify(&dir).ok().map(|m| (dir, m))
    })
}

/// `lib/modules/<ver>` must hold exactly one version; returns it with the
/// vmlinux decompressed from `boot/vmlinuz-<ver>`.
fn extract_vmlinux(root: &Path, log: &dyn Fn(&str)) -> Result<(String, Vec<u8>), BuildError> {
    let mods = root.join("lib/modules");
    let entries = match std::fs::read_dir(&mods) {
        Ok(entries) => entries,
        Err(error) => return Err(BuildError::NoKernelModules { path: mods, error }),
    };
    let versions: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let [kver] = versions.as_slice() else {
        return Err(BuildError::KernelVersions {
            path: mods,
            versions,
        });
    };
    let vmlinuz = root.join(format!("boot/vmlinuz-{kver}"));
    let bz = std::fs::read(&vmlinuz).map_err(io_at(&vmlinuz))?;
    log(&format!(
        "decompressing {} ({} bytes)",
        vmlinuz.display(),
        bz.len()
    ));
    match kernel::vmlinux_from_bzimage(&bz, |xz| Ok(debian::xz_decompress(xz)?)) {
        Ok(vmlinux) => Ok((kver.clone(), vmlinux)),
        Err(source) => Err(BuildError::Vmlinux {
            path: vmlinuz,
            source,
        }),
    }
}

/// The closure of `roots` as `(name, in-guest path, bytes)` in load order.
fn collect_modules(
    root: &Path,
    kver: &str,
    roots: &[String],
    log: &dyn Fn(&str),
) -> Result<Vec<(String, String, Vec<u8>)>, BuildError> {
    let rel = format!("lib/modules/{kver}/kernel");
    let kernel_dir = root.join(&rel);
    let index = modules::index(&kernel_dir)?;
    let mut read: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let roots: Vec<&str> = roots.iter().map(String::as_str).collect();
    let order = modules::load_order(&roots, |name| {
        let Some(path) = index.get(name) else {
            return Ok(None);
        };
        let full = kernel_dir.join(path);
        let bytes = std::fs::read(&full).map_err(io_at(&full))?;
        let deps = modules::depends_of_ko(&bytes).map_err(|source| BuildError::ModuleDeps {
            path: full.clone(),
            source,
        })?;
        read.insert(name.to_string(), bytes);
        Ok(Some(deps))
    })?;
    for m in &order.missing_roots {
        log(&format!(
            "module {m}: not a module in {kver} (built in or absent), skipped"
        ));
    }
    log(&format!(
        "modules in load order: {}",
        order.modules.join(" ")
    ));
    order
        .modules
        .into_iter()
        .map(|name| {
            let path = format!("/{rel}/{}", index[&name].display());
            let bytes = read
                .remove(&name)
                .ok_or_else(|| BuildError::ModuleNotRead { name: name.clone() })?;
            Ok((name, path, bytes))
        })
        .collect()
}

/// `bin/busybox` (or `usr/bin/busybox` on newer Debian) and its applet list,
/// from running it: it is static, so it runs on any x86_64 host.
fn extract_busybox(root: &Path) -> Result<(Vec<u8>, Vec<String>), BuildError> {
    let bin = ["bin/busybox", "usr/bin/busybox"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.is_file())
        .ok_or_else(|| BuildError::NoBusybox {
            root: root.to_path_buf(),
        })?;
    let out = match Command::new(&bin).arg("--list").output() {
        Ok(out) => out,
        Err(source) => return Err(BuildError::RunBusybox { bin, source }),
    };
    if !out.status.success() {
        return Err(BuildError::BusyboxFailed {
            bin,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let applets = initramfs::parse_applets(&String::from_utf8_lossy(&out.stdout));
    let bytes = std::fs::read(&bin).map_err(io_at(&bin))?;
    Ok((bytes, applets))
}

/// Writes `out/<id>/` through `out/.tmp-<pid>/` and a rename, so a crash
/// leaves no half image. An existing verified `out/<id>` is kept as is.
/// Returns the directory and whether it was reused.
fn write_image(
    out: &Path,
    m: &Manifest,
    vmlinux: &[u8],
    initrd: &[u8],
) -> Result<(PathBuf, bool), BuildError> {
    let id = m.id();
    let dir = out.join(&id);
    if manifest::verify(&dir).is_ok() {
        return Ok((dir, true));
    }
    let tmp = WorkDir(out.join(format!(".tmp-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&tmp.0);
    std::fs::create_dir(&tmp.0).map_err(io_at(&tmp.0))?;
    let json = serde_json::to_vec_pretty(m)?;
    for (name, data) in [(VMLINUX, vmlinux), (INITRD, initrd), (MANIFEST, &json[..])] {
        write_synced(&tmp.0.join(name), data)?;
    }
    if dir.exists() {
        // Incomplete or corrupt (it failed verification): replace it.
        std::fs::remove_dir_all(&dir).map_err(|source| BuildError::RemoveBroken {
            dir: dir.clone(),
            source,
        })?;
    }
    std::fs::rename(&tmp.0, &dir).map_err(rename_error(&tmp.0, &dir))?;
    sync_dir(out);
    Ok((dir, false))
}

fn write_synced(path: &Path, data: &[u8]) -> Result<(), BuildError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(io_at(path))?;
    f.write_all(data).map_err(io_at(path))?;
    f.sync_all().map_err(io_at(path))
}

/// Best effort: makes the rename durable. Not all platforms can open a dir.
fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Atomically points `out/current` at `id` (a symlink on unix, a file
/// holding the id elsewhere).
pub fn set_current(out: &Path, id: &str) -> Result<(), BuildError> {
    let tmp = out.join(format!(".{CURRENT}-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    #[cfg(unix)]
    std::os::unix::fs::symlink(id, &tmp).map_err(io_at(&tmp))?;
    #[cfg(not(unix))]
    std::fs::write(&tmp, format!("{id}\n")).map_err(io_at(&tmp))?;
    let link = out.join(CURRENT);
    std::fs::rename(&tmp, &link).map_err(rename_error(&tmp, &link))?;
    sync_dir(out);
    Ok(())
}

/// A scratch directory removed when dropped, even on an error path.
struct WorkDir(PathBuf);

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes `prefix*` dirs older than an hour: leftovers of crashed builds
/// (a live build's own dir is younger, so concurrent builds are safe).
fn remove_stale(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(3600));
        if old && e.file_name().to_string_lossy().starts_with(prefix) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real kernel's modules: the Debian kernel package the guest image
    /// is built from, fetched through apt into the cache the black-box
    /// tests' image build uses (`target/microvm-images/.cache`: one
    /// download for both), and only its virtio_console and 9p modules
    /// unpacked (~5 s of xz).
    #[test]
    fn depends_from_a_real_ko() {
        let cache = std::env::current_exe()
            .unwrap()
            .ancestors()
            .nth(3)
            .unwrap()
            .join("microvm-images/.cache");
        std::fs::create_dir_all(&cache).unwrap();
        let fetched = debian::resolve_meta(KERNEL_META)
            .and_then(|package| debian::candidate(&package))
            .and_then(|candidate| debian::fetch(&candidate, &cache, &|_| {}));
        let deb = match fetched {
            Ok(deb) => deb,
            Err(e) => {
                sandbox_test_support::skip_or_fail(format!(
                    "the Debian kernel package could not be fetched through apt ({}): \
                     CI needs a Debian host with apt's package lists (`.ci/install-deps` \
                     updates them) and the network",
                    crate::error_chain(&e)
                ));
                return;
            }
        };
        let root = tempfile::tempdir().unwrap();
        let mut unpack = std::process::Command::new("dpkg-deb")
            .arg("--fsys-tarfile")
            .arg(&deb)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let tar = std::process::Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(root.path())
            .args([
                "--wildcards",
                "./lib/modules/*/kernel/drivers/char/virtio_console.ko",
                "./lib/modules/*/kernel/net/9p/*",
            ])
            .stdin(unpack.stdout.take().unwrap())
            .status()
            .unwrap();
        assert!(unpack.wait().unwrap().success() && tar.success());
        let versions: Vec<_> = std::fs::read_dir(root.path().join("lib/modules"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(versions.len(), 1, "{versions:?}");
        let dir = versions[0].join("kernel");

        let bytes = std::fs::read(dir.join("drivers/char/virtio_console.ko")).unwrap();
        let mut deps = modules::depends_of_ko(&bytes).unwrap();
        deps.sort();
        assert_eq!(deps, ["virtio", "virtio_ring"]);
        let idx = modules::index(&dir).unwrap();
        assert_eq!(idx["9pnet_virtio"], Path::new("net/9p/9pnet_virtio.ko"));
    }

    #[test]
    fn prune_keeps_the_named_image_the_cache_and_strangers() {
        let out = tempfile::tempdir().unwrap();
        let id = |c: char| std::iter::repeat_n(c, 64).collect::<String>();
        for name in [id('a'), id('b'), id('c'), ".cache".into(), "notes".into()] {
            std::fs::create_dir(out.path().join(name)).unwrap();
        }
        let keep = out.path().join(id('b'));
        assert_eq!(prune(out.path(), &keep).unwrap(), 2);
        let mut left: Vec<String> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".cache".to_owned(), id('b'), "notes".to_owned()]);
    }

    fn sample(initrd: &[u8]) -> Manifest {
        Manifest {
            format: FORMAT,
            kernel: Package {
                package: "k".into(),
                version: "1".into(),
                sha256: "aa".into(),
            },
            busybox: Package {
                package: "b".into(),
                version: "1".into(),
                sha256: "bb".into(),
            },
            agent: Agent {
                sha256: "cc".into(),
                protocol: 1,
            },
            modules: vec!["virtio".into()],
            initrd: artifact(initrd),
            vmlinux: artifact(b"vmlinux"),
            cmdline: CMDLINE.into(),
            built: 5,
        }
    }

    #[test]
    fn writes_atomically_and_reuses_by_id() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        let m = sample(b"initrd");
        let (dir, reused) = write_image(out, &m, b"vmlinux", b"initrd").unwrap();
        assert!(!reused);
        assert_eq!(dir, out.join(m.id()));
        set_current(out, &m.id()).unwrap();
        assert_eq!(manifest::current(out), Some(dir.clone()));
        assert_eq!(manifest::verify(&dir).unwrap(), m);

        // Same inputs at a later time: the directory is kept, not rewritten.
        let mut later = m.clone();
        later.built = 6;
        let (again, reused) = write_image(out, &later, b"vmlinux", b"initrd").unwrap();
        assert_eq!((again.clone(), reused), (dir.clone(), true));
        assert_eq!(manifest::read(&again).unwrap().built, 5);

        // A broken directory under the id is replaced.
        std::fs::remove_file(dir.join(INITRD)).unwrap();
        let (_, reused) = write_image(out, &m, b"vmlinux", b"initrd").unwrap();
        assert!(!reused);
        assert!(manifest::verify(&dir).is_ok());

        // A different image moves `current`; no temp dirs are left behind.
        let other = sample(b"other");
        write_image(out, &other, b"vmlinux", b"other").unwrap();
        set_current(out, &other.id()).unwrap();
        assert_eq!(manifest::current(out), Some(out.join(other.id())));
        let left: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn finds_an_existing_image_with_the_same_inputs() {
        let tmp = tempfile::tempdir().unwrap();
        let m = sample(b"initrd");
        write_image(tmp.path(), &m, b"vmlinux", b"initrd").unwrap();
        let cand = |p: &Package| Candidate {
            package: p.package.clone(),
            version: p.version.clone(),
            sha256: p.sha256.clone(),
            file: String::new(),
        };
        let (kc, bc) = (cand(&m.kernel), cand(&m.busybox));
        let roots = vec!["virtio".to_string()];
        assert!(existing(tmp.path(), &kc, &bc, &m.agent, &roots).is_some());
        let other_agent = Agent {
            sha256: "dd".into(),
            protocol: 1,
        };
        assert!(existing(tmp.path(), &kc, &bc, &other_agent, &roots).is_none());
        let more_roots = vec!["virtio".to_string(), "9p".to_string()];
        assert!(existing(tmp.path(), &kc, &bc, &m.agent, &more_roots).is_none());
    }

    /// The real build: downloads ~70 MB through apt. Run with
    /// `CC_MICROVM_AGENT=/path/to/static/agent cargo test -p sandbox-microvm-image -- --ignored`.
    #[test]
    #[ignore = "downloads the kernel and busybox packages through apt (~70 MB)"]
    fn full_build_from_debian_packages() {
        let Some(agent) = std::env::var_os("CC_MICROVM_AGENT") else {
            sandbox_test_support::skip_or_fail(
                "CC_MICROVM_AGENT is not set: point it at a static agent binary or a #! script",
            );
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let opts = Options {
            agent: agent.into(),
            out: tmp.path().join("out"),
            cache: std::env::var_os("CC_MICROVM_CACHE").map(PathBuf::from),
            roots: modules::DEFAULT_ROOTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            protocol: 1,
            rebuild: false,
        };
        let built = build(&opts, &|l| eprintln!("{l}")).unwrap();
        assert!(!built.reused);
        assert!(
            built
                .manifest
                .modules
                .contains(&"virtio_console".to_string())
        );
        assert_eq!(
            manifest::verify(&built.dir).unwrap().id(),
            built.manifest.id()
        );
        let again = build(&opts, &|l| eprintln!("{l}")).unwrap();
        assert!(again.reused);
        assert_eq!(again.dir, built.dir);
    }
}
