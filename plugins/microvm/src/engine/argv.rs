//! QEMU's command line for one sandbox, as a pure function of the plan
//! (docs/research/microvm.md §4.4): `-M microvm` with no NIC at all, the agent
//! on a virtio-serial port whose socket we listen on (QEMU connects as a
//! client, so there is no start-up race), one 9p export per bind with
//! read-only enforced by QEMU on the host, and QEMU's own seccomp sandbox
//! with process spawning denied.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::options::Accel;

/// The virtio-serial port's name; the agent looks for it.
pub const AGENT_PORT: &str = "agent0";

/// Guest memory, MiB: what a shell, git and a compiler front end need.
pub const MEMORY_MIB: u32 = 512;

/// One host directory exported to the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// The 9p mount tag (`share0`, `share1`, …).
    pub tag: String,
    /// The host directory.
    pub host: PathBuf,
    /// Where the guest mounts it.
    pub guest: PathBuf,
    /// Enforced by QEMU (`readonly=on`), not by the guest.
    pub read_only: bool,
}

/// Everything QEMU's arguments depend on.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    pub vmlinux: &'a Path,
    pub initrd: &'a Path,
    /// The image's kernel command line.
    pub cmdline: &'a str,
    pub accel: Accel,
    /// The host TSC in kHz; required under TCG, where microvm has no other
    /// clock to calibrate against (docs/research/microvm.md §2).
    pub tsc_khz: Option<u64>,
    pub agent_socket: &'a Path,
    /// QEMU listens here for QMP (pause, resume).
    pub qmp_socket: &'a Path,
    pub shares: &'a [Share],
}

/// The arguments after the program name.
pub fn qemu_args(l: &Launch<'_>) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::new();
    let mut push = |parts: &[&str]| args.extend(parts.iter().map(OsString::from));
    push(&["-M", "microvm", "-nodefaults", "-no-user-config"]);
    push(&["-display", "none", "-serial", "stdio", "-monitor", "none"]);
    match l.accel {
        Accel::Tcg => push(&["-accel", "tcg"]),
        Accel::Kvm => push(&["-accel", "kvm", "-cpu", "host"]),
    }
    let memory = MEMORY_MIB.to_string();
    push(&["-m", &memory, "-smp", "1"]);
    push(&["-global", "virtio-mmio.force-legacy=false"]);
    push(&[
        "-sandbox",
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
    ]);
    let mut cmdline = l.cmdline.to_owned();
    if let (Accel::Tcg, Some(khz)) = (l.accel, l.tsc_khz) {
        cmdline.push_str(&format!(" tsc_early_khz={khz}"));
    }
    args.push("-kernel".into());
    args.push(l.vmlinux.into());
    args.push("-initrd".into());
    args.push(l.initrd.into());
    args.push("-append".into());
    args.push(cmdline.into());
    args.push("-device".into());
    args.push("virtio-serial-device".into());
    args.push("-chardev".into());
    let mut agent = OsString::from("socket,id=agent,path=");
    agent.push(escape(l.agent_socket));
    args.push(agent);
    args.push("-device".into());
    args.push(format!("virtserialport,chardev=agent,name={AGENT_PORT}").into());
    args.push("-device".into());
    args.push("virtio-rng-device".into());
    args.push("-qmp".into());
    let mut qmp = OsString::from("unix:");
    qmp.push(escape(l.qmp_socket));
    qmp.push(",server=on,wait=off");
    args.push(qmp);
    for share in l.shares {
        let mut fsdev = OsString::from(format!("local,id={},path=", share.tag));
        fsdev.push(escape(&share.host));
        fsdev.push(",security_model=none");
        if share.read_only {
            fsdev.push(",readonly=on");
        }
        args.push("-fsdev".into());
        args.push(fsdev);
        args.push("-device".into());
        args.push(format!("virtio-9p-device,fsdev={0},mount_tag={0}", share.tag).into());
    }
    args
}

/// QEMU option values are comma-separated; a comma in a path is doubled.
fn escape(path: &Path) -> OsString {
    let text = path.as_os_str().to_string_lossy();
    OsString::from(text.replace(',', ",,"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn has(args: &[String], run: &[&str]) -> bool {
        args.windows(run.len())
            .any(|w| w.iter().zip(run).all(|(a, b)| a == b))
    }

    fn launch<'a>(accel: Accel, shares: &'a [Share]) -> Launch<'a> {
        Launch {
            vmlinux: Path::new("/img/vmlinux"),
            initrd: Path::new("/img/initrd.cpio"),
            cmdline: "console=ttyS0 rdinit=/init quiet",
            accel,
            tsc_khz: Some(2_600_000),
            agent_socket: Path::new("/run/x/agent.sock"),
            qmp_socket: Path::new("/run/x/qmp.sock"),
            shares,
        }
    }

    #[test]
    fn tcg_gets_the_tsc_and_no_nic_and_qemu_spawns_nothing() {
        let args = strings(&qemu_args(&launch(Accel::Tcg, &[])));
        assert!(has(&args, &["-M", "microvm"]));
        assert!(has(&args, &["-accel", "tcg"]));
        assert!(has(
            &args,
            &[
                "-append",
                "console=ttyS0 rdinit=/init quiet tsc_early_khz=2600000"
            ]
        ));
        assert!(
            !args
                .iter()
                .any(|a| a.contains("netdev") || a.contains("-net"))
        );
        assert!(args.iter().any(|a| a.contains("spawn=deny")));
        assert!(has(
            &args,
            &["-chardev", "socket,id=agent,path=/run/x/agent.sock"]
        ));
        assert!(has(
            &args,
            &["-device", "virtserialport,chardev=agent,name=agent0"]
        ));
        assert!(has(
            &args,
            &["-qmp", "unix:/run/x/qmp.sock,server=on,wait=off"]
        ));
    }

    #[test]
    fn kvm_uses_the_host_cpu_and_no_tsc_parameter() {
        let args = strings(&qemu_args(&launch(Accel::Kvm, &[])));
        assert!(has(&args, &["-accel", "kvm", "-cpu", "host"]));
        assert!(!args.iter().any(|a| a.contains("tsc_early_khz")));
    }

    #[test]
    fn shares_are_9p_exports_with_read_only_enforced_by_qemu() {
        let shares = [
            Share {
                tag: "share0".into(),
                host: "/work/a,b".into(),
                guest: "/work/a,b".into(),
                read_only: false,
            },
            Share {
                tag: "share1".into(),
                host: "/data".into(),
                guest: "/data".into(),
                read_only: true,
            },
        ];
        let args = strings(&qemu_args(&launch(Accel::Tcg, &shares)));
        assert!(has(
            &args,
            &[
                "-fsdev",
                "local,id=share0,path=/work/a,,b,security_model=none"
            ]
        ));
        assert!(has(
            &args,
            &[
                "-fsdev",
                "local,id=share1,path=/data,security_model=none,readonly=on"
            ]
        ));
        assert!(has(
            &args,
            &["-device", "virtio-9p-device,fsdev=share1,mount_tag=share1"]
        ));
    }
}
