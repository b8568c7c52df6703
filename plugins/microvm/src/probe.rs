//! Whether this host can run microVM sandboxes (SPEC B2, B7, C5). Every
//! check is real, and the hint lists everything a host is missing, most
//! important first:
//!
//! 1. the accelerator: [`crate::kvm`]'s functional test (a PVM `/dev/kvm`
//!    emulates ring-0 guest code), unless TCG was opted in — which runs, but
//!    is reported as emulated and never as a kernel boundary;
//! 2. QEMU: [`crate::qemu`], with the `microvm` machine and the accelerator;
//! 3. the guest image ([`crate::image`]): present, and its files matching
//!    their manifest.

use sandbox_plugin_api::{ProbeContext, ProbeReport, SandboxBackend, capability, error_chain};

use crate::engine::{Engine, Image};
use crate::kvm::{self, KvmFinding, Plan};
use crate::options::{ACCEL_ENV, Accel, AccelError, accel_choice};
use crate::qemu::{self, Finding};
use crate::{cache, image};

/// The badge with a hardware accelerator.
pub const NOTE: &str = "QEMU microVM — a kernel boundary (hardware virtualisation)";

/// The badge with TCG opted in (SPEC C5: the handle says so too).
pub const NOTE_TCG: &str = "QEMU microVM on TCG — emulated, not an isolation boundary";

/// Everything the probe looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Findings {
    /// The accelerator asked for, or why the setting is wrong.
    pub accel: Result<Accel, AccelError>,
    /// The KVM test, when KVM is the accelerator (not run for TCG).
    pub kvm: Option<KvmFinding>,
    /// QEMU.
    pub qemu: Finding,
    /// The guest image, verified, or why there is none to boot.
    pub image: Result<image::Found, image::NoImage>,
}

/// One thing standing between this host and a working backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    /// What, in words.
    pub text: String,
    /// Whether installing a package removes it.
    pub installable: bool,
}

impl Blocker {
    fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            installable: false,
        }
    }

    fn install(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            installable: true,
        }
    }
}

/// Every blocker, most important first; empty when the backend can run.
pub fn blockers(findings: &Findings) -> Vec<Blocker> {
    let mut out = Vec::new();
    let accel = match &findings.accel {
        Ok(accel) => Some(*accel),
        Err(e) => {
            out.push(Blocker::new(error_chain(e)));
            None
        }
    };
    if let Some(k) = &findings.kvm
        && let Some(text) = kvm::blocker(&k.verdict, &k.plan, k.pvm)
    {
        out.push(Blocker::new(text));
    }
    match &findings.qemu {
        Finding::Missing => out.push(Blocker::install(format!(
            "{} is not in PATH ({})",
            qemu::BINARY,
            qemu::INSTALL_HINT
        ))),
        Finding::Unusable { path, reason } => out.push(Blocker::new(format!(
            "{} does not answer as QEMU: {reason}",
            path.display()
        ))),
        Finding::Found(q) => {
            if !q.has_microvm() {
                out.push(Blocker::install(format!(
                    "{} {} has no `{}` machine ({})",
                    qemu::BINARY,
                    q.version,
                    qemu::MACHINE,
                    qemu::INSTALL_HINT
                )));
            }
            if let Some(accel) = accel.filter(|a| !q.offers(a.qemu_name())) {
                out.push(Blocker::new(format!(
                    "{} {} was built without the {} accelerator (it offers: {})",
                    qemu::BINARY,
                    q.version,
                    accel.qemu_name(),
                    q.accels.join(", ")
                )));
            }
        }
    }
    if let Err(why) = &findings.image {
        out.push(Blocker::new(why.0.clone()));
    }
    out
}

/// The report for these findings: available when nothing blocks, with
/// every blocker in the hint otherwise. Only a hardware accelerator is a
/// kernel boundary; TCG runs with its own badge. `requires_install` is set
/// only when installing packages would remove every blocker.
pub fn report(findings: &Findings) -> ProbeReport {
    let blockers = blockers(findings);
    let tcg = findings.accel == Ok(Accel::Tcg);
    let note = if tcg { NOTE_TCG } else { NOTE };
    if blockers.is_empty() {
        return ProbeReport {
            available: true,
            note: note.into(),
            kind: SandboxBackend::Microvm,
            kernel_boundary: !tcg,
            capabilities: vec![
                capability::STDIN.into(),
                capability::PTY.into(),
                capability::EXEC_TIMEOUT.into(),
                capability::FS_ISOLATION.into(),
                capability::SUSPEND.into(),
                // No NIC: the agent's tunnels to the session's proxies are
                // the only way out (SPEC E2).
                capability::NET_PROXY_ONLY.into(),
            ],
            ..ProbeReport::default()
        };
    }
    let hint = blockers
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    ProbeReport {
        kind: SandboxBackend::Microvm,
        requires_install: blockers.iter().all(|b| b.installable),
        ..ProbeReport::unavailable(note, hint)
    }
}

/// Probes this host: the accelerator setting, the KVM test (unless TCG was
/// opted in), QEMU, the image. Returns the report and, when the backend can
/// run, what `launch` needs.
pub fn probe(ctx: &ProbeContext) -> (ProbeReport, Option<Engine>) {
    let env = std::env::var(ACCEL_ENV).ok();
    let accel = accel_choice(&ctx.options, env.as_deref());
    let binary = qemu::locate();
    let images_env = std::env::var(image::IMAGES_ENV).ok();
    let images = image::images_dir(&ctx.options, images_env.as_deref());
    let signature = images
        .as_deref()
        .map_or_else(|| "none".to_owned(), image::signature);
    let key = cache::key(binary.as_deref(), &format!("{accel:?}"), &signature);
    let dir = cache::dir();
    // `probe --fresh`: checked now, and the kept findings replaced.
    let kept = dir.as_deref().filter(|_| !ctx.fresh);
    let entry = match kept.and_then(|d| cache::load(d, &key)) {
        Some(entry) => {
            tracing::debug!("microvm: the probe's findings of this boot, kept");
            entry
        }
        None => {
            let (kvm, qemu) = run_checks(accel.clone(), binary);
            let image = match &images {
                Some(images) => image::find(images),
                None => Err(image::ImageError::NoImagesDir),
            }
            .map_err(image::NoImage::from);
            let tsc_khz = (accel == Ok(Accel::Tcg))
                .then(crate::tsc::host_khz)
                .flatten();
            let entry = cache::Entry {
                key,
                kvm,
                qemu,
                image,
                tsc_khz,
            };
            if let Some(dir) = &dir {
                cache::store(dir, &entry);
            }
            entry
        }
    };
    let findings = Findings {
        accel,
        kvm: entry.kvm,
        qemu: entry.qemu,
        image: entry.image,
    };
    if let Some(k) = &findings.kvm {
        let figures = kvm::figures(&k.verdict, &k.plan);
        tracing::info!(
            verdict = ?k.verdict,
            pvm = k.pvm,
            "microvm: functional KVM test: {}",
            figures.as_deref().unwrap_or("no guest ran")
        );
    }
    tracing::debug!(qemu = ?findings.qemu, "microvm: QEMU");
    let report = report(&findings);
    let engine = match (&findings.accel, &findings.qemu, &findings.image) {
        (Ok(accel), Finding::Found(q), Ok(found)) if report.available => Some(Engine {
            qemu: q.path.clone(),
            image: Image {
                dir: found.dir.clone(),
                vmlinux: found.vmlinux.clone(),
                initrd: found.initrd.clone(),
                cmdline: found.cmdline.clone(),
            },
            accel: *accel,
            tsc_khz: entry.tsc_khz,
            suspend: crate::options::suspend_choice(&ctx.options),
            templates: crate::options::templates_choice(&ctx.options),
        }),
        _ => None,
    };
    (report, engine)
}

/// The KVM test (unless TCG was opted in) and the QEMU questions, at once:
/// QEMU is asked while the guest runs.
fn run_checks(
    accel: Result<Accel, AccelError>,
    binary: Option<std::path::PathBuf>,
) -> (Option<KvmFinding>, Finding) {
    std::thread::scope(|scope| {
        let qemu = scope.spawn(|| qemu::probe(binary));
        let kvm = (accel != Ok(Accel::Tcg)).then(|| {
            let plan = Plan::DEFAULT;
            KvmFinding {
                plan,
                verdict: kvm::functional_test(&plan),
                pvm: kvm::pvm_host(),
            }
        });
        let qemu = qemu.join().unwrap_or_else(|_| Finding::Unusable {
            path: qemu::BINARY.into(),
            reason: "the QEMU query panicked".to_owned(),
        });
        (kvm, qemu)
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::kvm::Verdict;
    use crate::qemu::Qemu;

    fn emulated_on_pvm() -> KvmFinding {
        KvmFinding {
            plan: Plan::DEFAULT,
            verdict: Verdict::Emulated {
                iterations: 100_000,
                elapsed: Duration::from_millis(190),
            },
            pvm: true,
        }
    }

    fn hardware() -> KvmFinding {
        KvmFinding {
            plan: Plan::DEFAULT,
            verdict: Verdict::Hardware {
                iterations: 10_000_000,
                elapsed: Duration::from_millis(4),
            },
            pvm: false,
        }
    }

    fn good_qemu() -> Finding {
        Finding::Found(Qemu {
            path: PathBuf::from("/usr/bin/qemu-system-x86_64"),
            version: "7.2.22".to_owned(),
            machines: vec!["microvm".to_owned(), "q35".to_owned()],
            accels: vec!["tcg".to_owned(), "kvm".to_owned()],
        })
    }

    fn found() -> Result<image::Found, image::NoImage> {
        Ok(image::Found {
            dir: PathBuf::from("/img/abc"),
            vmlinux: PathBuf::from("/img/abc/vmlinux"),
            initrd: PathBuf::from("/img/abc/initrd.cpio"),
            cmdline: "console=ttyS0".to_owned(),
            id: "abc".to_owned(),
            protocol: 1,
        })
    }

    #[test]
    fn this_hosts_case_lists_pvm_then_qemu_then_the_image() {
        let r = report(&Findings {
            accel: Ok(Accel::Kvm),
            kvm: Some(emulated_on_pvm()),
            qemu: Finding::Missing,
            image: Err(image::NoImage("no guest image in /x".to_owned())),
        });
        assert!(!r.available);
        assert_eq!(
            r.hint,
            "ring-0 guest code is emulated by /dev/kvm (PVM host: needs a PVM guest kernel): \
             100 k iterations took 190 ms against a 100 ms budget for 10 M; \
             qemu-system-x86_64 is not in PATH (install the Debian package qemu-system-x86); \
             no guest image in /x"
        );
        assert_eq!(r.kind, SandboxBackend::Microvm);
        assert!(!r.requires_install, "installing QEMU would not be enough");
        assert!(!r.kernel_boundary && r.capabilities.is_empty());
        assert_eq!(r.note, NOTE);
    }

    #[test]
    fn hardware_qemu_and_an_image_make_a_kernel_boundary() {
        let r = report(&Findings {
            accel: Ok(Accel::Kvm),
            kvm: Some(hardware()),
            qemu: good_qemu(),
            image: found(),
        });
        assert!(r.available && r.kernel_boundary, "{r:?}");
        assert_eq!(r.note, NOTE);
        assert!(r.capabilities.iter().any(|c| c == capability::FS_ISOLATION));
    }

    #[test]
    fn tcg_runs_but_says_emulated_and_is_no_boundary() {
        let r = report(&Findings {
            accel: Ok(Accel::Tcg),
            kvm: None,
            qemu: good_qemu(),
            image: found(),
        });
        assert!(r.available && !r.kernel_boundary, "{r:?}");
        assert_eq!(r.note, NOTE_TCG);
        assert!(r.note.contains("emulated, not an isolation boundary"));
        let r = report(&Findings {
            accel: Ok(Accel::Tcg),
            kvm: None,
            qemu: Finding::Missing,
            image: found(),
        });
        assert!(!r.available && r.requires_install, "only QEMU is missing");
    }

    #[test]
    fn a_qemu_without_microvm_or_the_accelerator_is_named() {
        let Finding::Found(q) = good_qemu() else {
            unreachable!()
        };
        let r = report(&Findings {
            accel: Ok(Accel::Kvm),
            kvm: Some(hardware()),
            qemu: Finding::Found(Qemu {
                machines: vec!["pc".to_owned()],
                accels: vec!["tcg".to_owned()],
                ..q
            }),
            image: found(),
        });
        assert!(r.hint.contains("has no `microvm` machine"), "{}", r.hint);
        assert!(
            r.hint
                .contains("built without the kvm accelerator (it offers: tcg)"),
            "{}",
            r.hint
        );
        let r = report(&Findings {
            accel: Ok(Accel::Kvm),
            kvm: Some(hardware()),
            qemu: Finding::Unusable {
                path: PathBuf::from("/opt/q"),
                reason: "`/opt/q --version` failed (exit status: 1): x".to_owned(),
            },
            image: found(),
        });
        assert!(
            r.hint.starts_with("/opt/q does not answer as QEMU: "),
            "{}",
            r.hint
        );
    }

    #[test]
    fn the_accelerator_comes_from_the_env_then_the_config() {
        assert_eq!(accel_choice(&serde_json::Value::Null, None), Ok(Accel::Kvm));
        assert_eq!(accel_choice(&json!({}), None), Ok(Accel::Kvm));
        assert_eq!(accel_choice(&json!({"accel": "tcg"}), None), Ok(Accel::Tcg));
        assert_eq!(
            accel_choice(&json!({"accel": "kvm"}), Some("tcg")),
            Ok(Accel::Tcg)
        );
        assert_eq!(
            accel_choice(&json!({"accel": "tcg"}), Some("kvm")),
            Ok(Accel::Kvm)
        );
        assert_eq!(
            accel_choice(&json!({"accel": "tcg"}), Some("")),
            Ok(Accel::Tcg)
        );
        let e = accel_choice(&json!({"accel": "tgc"}), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[backends.microvm] accel") && e.contains("`tgc`"),
            "{e}"
        );
        let e = accel_choice(&json!({}), Some("hvf"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(ACCEL_ENV), "{e}");
        let wrong = accel_choice(&json!({"accel": 1}), None).unwrap_err();
        let e = wrong.to_string();
        assert!(e.contains("not a string"), "{e}");
        // A bad setting is the first thing the hint says.
        let r = report(&Findings {
            accel: Err(wrong),
            kvm: Some(hardware()),
            qemu: good_qemu(),
            image: found(),
        });
        assert!(r.hint.starts_with(&e), "{}", r.hint);
    }
}
