//! The initramfs layout: the agent as `/init`, busybox and its applet
//! links, the kernel modules at their usual paths plus `/modules.order`
//! (what the agent loads, in order), and the empty mount points.

use crate::cpio::{Archive, CpioError};
use crate::elf::{Elf, ElfError};

/// Why the initramfs cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InitramfsError {
    #[error("the agent is not a static x86_64 binary")]
    AgentNotElf(#[source] ElfError),
    #[error(transparent)]
    AgentElf(#[from] ElfError),
    #[error(
        "the agent is dynamically linked (it has a program interpreter) and cannot run as /init; \
         build it with `--target x86_64-unknown-linux-musl` or `-C target-feature=+crt-static`"
    )]
    AgentDynamic,
    #[error(transparent)]
    Cpio(#[from] CpioError),
}

/// Mount points and scratch dirs the agent expects, with their modes.
pub const EMPTY_DIRS: &[(&str, u32)] = &[
    ("/proc", 0o555),
    ("/sys", 0o555),
    ("/dev", 0o755),
    ("/tmp", 0o1777),
    ("/run", 0o755),
    ("/etc", 0o755),
    ("/root", 0o700),
    ("/mnt", 0o755),
];

/// The in-guest file listing module paths in load order.
pub const MODULES_ORDER: &str = "/modules.order";

/// What goes into the initramfs.
pub struct Contents {
    /// `/init`.
    pub agent: Vec<u8>,
    /// `/bin/busybox`.
    pub busybox: Vec<u8>,
    /// Applet names, each linked as `/bin/<name>` → `busybox`.
    pub applets: Vec<String>,
    /// `(absolute in-guest path, bytes)` in load order.
    pub modules: Vec<(String, Vec<u8>)>,
}

/// Refuses an `/init` that cannot start in an initramfs without libc: a
/// dynamically linked ELF, or something that is neither ELF nor a script.
pub fn check_agent(agent: &[u8]) -> Result<(), InitramfsError> {
    if agent.starts_with(b"#!") {
        return Ok(());
    }
    let elf = Elf::parse(agent).map_err(InitramfsError::AgentNotElf)?;
    if elf.has_interp()? {
        return Err(InitramfsError::AgentDynamic);
    }
    Ok(())
}

/// The applet names from `busybox --list`, keeping only plain names.
pub fn parse_applets(list: &str) -> Vec<String> {
    let mut out: Vec<String> = list
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/') && *a != "." && *a != "..")
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `/modules.order`: one absolute path per line.
pub fn modules_order(modules: &[(String, Vec<u8>)]) -> String {
    modules.iter().map(|(p, _)| format!("{p}\n")).collect()
}

/// Lays out [`Contents`] as a cpio archive.
pub fn assemble(c: &Contents) -> Result<Archive, InitramfsError> {
    let mut a = Archive::new();
    for (dir, mode) in EMPTY_DIRS {
        a.dir(dir, *mode)?;
    }
    a.file("/init", 0o755, c.agent.clone())?;
    a.file("/bin/busybox", 0o755, c.busybox.clone())?;
    for applet in &c.applets {
        a.symlink(&format!("/bin/{applet}"), "busybox")?;
    }
    for (path, bytes) in &c.modules {
        a.file(path, 0o644, bytes.clone())?;
    }
    a.file(MODULES_ORDER, 0o644, modules_order(&c.modules).into_bytes())?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::Entry;

    #[test]
    fn layout_has_everything_in_place() {
        let c = Contents {
            agent: b"#!/bin/busybox sh\n".to_vec(),
            busybox: vec![0x7f, b'E'],
            applets: parse_applets("sh\nls\n\ncat\nbusybox\nls\n../x\n"),
            modules: vec![
                (
                    "/lib/modules/v/kernel/drivers/virtio/virtio.ko".into(),
                    vec![1],
                ),
                (
                    "/lib/modules/v/kernel/drivers/char/virtio_console.ko".into(),
                    vec![2],
                ),
            ],
        };
        assert_eq!(c.applets, ["cat", "ls", "sh"]);
        let a = assemble(&c).unwrap();
        let get = |p: &str| a.entries().find(|(n, _)| *n == p).map(|(_, e)| e.clone());
        assert_eq!(
            get("init"),
            Some(Entry::File {
                mode: 0o755,
                data: c.agent.clone()
            })
        );
        assert_eq!(
            get("bin/sh"),
            Some(Entry::Symlink {
                target: "busybox".into()
            })
        );
        assert_eq!(get("tmp"), Some(Entry::Dir { mode: 0o1777 }));
        assert!(matches!(
            get("lib/modules/v/kernel/drivers/char/virtio_console.ko"),
            Some(Entry::File { .. })
        ));
        let Some(Entry::File { data, .. }) = get("modules.order") else {
            panic!("no modules.order")
        };
        assert_eq!(
            String::from_utf8(data).unwrap(),
            "/lib/modules/v/kernel/drivers/virtio/virtio.ko\n/lib/modules/v/kernel/drivers/char/virtio_console.ko\n"
        );
        for (d, _) in EMPTY_DIRS {
            assert!(get(&d[1..]).is_some(), "{d}");
        }
    }

    #[test]
    fn agent_must_be_static_elf_or_script() {
        assert!(check_agent(b"#!/bin/busybox sh\necho hi\n").is_ok());
        assert!(check_agent(&crate::elf::tests::build(&[], &[(1, b"code")])).is_ok());
        let dynamic = crate::elf::tests::build(&[], &[(3, b"/lib64/ld-linux-x86-64.so.2\0")]);
        assert!(
            check_agent(&dynamic)
                .unwrap_err()
                .to_string()
                .contains("dynamically linked")
        );
        assert!(
            check_agent(b"hello")
                .unwrap_err()
                .to_string()
                .contains("not a static")
        );
    }
}
