//! Datagrams sent by address to unix sockets, refused for the whole
//! sandbox (SPEC G5; threat model T17).
//!
//! The guard judges every `connect`, so a host service's socket below a
//! bind is reached only when the spec allows it. A datagram needs no
//! connect: `sendto`/`sendmsg` with a path sends straight to whatever socket
//! the path names, and the address sits behind a pointer in `sendmsg`, out
//! of a seccomp filter's sight. The kernel offers a hook at exactly that
//! point (cgroup `sendmsg_unix`, Linux 6.7): it runs for a unix datagram
//! sent *with an address* and for nothing else, before the path is looked
//! up. The program attached to the sandbox's cgroup refuses every such send
//! (`EPERM`): the two instructions `r0 = 0; exit`. A connected datagram
//! socket — `connect` (judged by the guard), then `send` — works as before;
//! so do streams, socket pairs and every other family.
//!
//! Loading and attaching a cgroup program takes `CAP_BPF` and
//! `CAP_NET_ADMIN` (a root server) and a cgroup v2 group the server may
//! write. Where either is missing, no unix datagram socket can be made in
//! the sandbox at all (`socket`/`socketpair` refused by the commands'
//! seccomp filter, `sandbox_init::seccomp`): without one there is no such
//! send. The handle's `unixDatagrams` says which holds, and why.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::OnceLock;

/// `BPF_PROG_TYPE_CGROUP_SOCK_ADDR`.
const PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
/// `BPF_CGROUP_UNIX_SENDMSG` (Linux 6.7).
const ATTACH_UNIX_SENDMSG: u32 = 50;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;

/// What the handle says when the rule holds.
pub const HELD: &str = "refused when sent by address (cgroup sendmsg_unix program); connect first";

/// What the handle says when it does not, and sockets are refused instead.
pub fn refused_altogether(why: &str) -> String {
    format!(
        "no unix datagram socket can be made (seccomp), as datagrams sent by address cannot be refused here: {why}"
    )
}

/// `r0 = 0` (refuse); `exit`.
const PROGRAM: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];

/// `union bpf_attr` for `BPF_PROG_LOAD`, up to `expected_attach_type`.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
}

/// The program, loaded once per server (or why it cannot be).
fn program() -> &'static Result<OwnedFd, String> {
    static PROGRAM_FD: OnceLock<Result<OwnedFd, String>> = OnceLock::new();
    PROGRAM_FD.get_or_init(load)
}

fn load() -> Result<OwnedFd, String> {
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..11].copy_from_slice(b"cc_dgram_no");
    let attr = ProgLoad {
        prog_type: PROG_TYPE_CGROUP_SOCK_ADDR,
        insn_cnt: PROGRAM.len() as u32,
        insns: PROGRAM.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        expected_attach_type: ATTACH_UNIX_SENDMSG,
        ..ProgLoad::default()
    };
    // SAFETY: bpf(2) reads `attr` (of its size) and the buffers it points
    // to, all alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "the kernel refused the cgroup sendmsg_unix program ({e}): it needs Linux 6.7 or \
             later and a server with CAP_BPF and CAP_NET_ADMIN (root)"
        ));
    }
    // SAFETY: a descriptor bpf(2) just returned to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches the refusal to the sandbox `name`'s v2 group, made here if
/// it is not there yet (the execs' groups are made below it,
/// `crate::exec_groups`); `Err` says why the rule is not held.
pub fn hold_for(name: &str) -> Result<(), String> {
    let base = sandbox_exec_group::Hierarchy::find()?;
    let group = base.base().join(name);
    match std::fs::create_dir(&group) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating the cgroup {}: {e}", group.display())),
    }
    hold(Some(&group))
}

/// Attaches the refusal to the sandbox's v2 group (before anything joins
/// it); `Err` says why the rule is not held.
pub fn hold(group: Option<&Path>) -> Result<(), String> {
    let group = group
        .ok_or("no cgroup v2 group the server may write (the rule attaches to one)".to_owned())?;
    let program = program().as_ref().map_err(Clone::clone)?;
    let dir = std::fs::File::open(group)
        .map_err(|e| format!("opening the cgroup {}: {e}", group.display()))?;
    let attr = ProgAttach {
        target_fd: dir.as_raw_fd() as u32,
        attach_bpf_fd: program.as_raw_fd() as u32,
        attach_type: ATTACH_UNIX_SENDMSG,
        attach_flags: 0,
    };
    // SAFETY: bpf(2) reads `attr`, alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_ATTACH,
            &attr as *const ProgAttach,
            std::mem::size_of::<ProgAttach>(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "attaching the cgroup sendmsg_unix program to {}: {}",
            group.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_refuse_then_exit() {
        // BPF_ALU64 | BPF_MOV | BPF_K, dst r0, imm 0; BPF_JMP | BPF_EXIT.
        assert_eq!(PROGRAM[0].to_le_bytes(), [0xb7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(PROGRAM[1].to_le_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(std::mem::size_of::<ProgLoad>(), 72);
    }

    #[test]
    fn without_a_group_the_rule_says_why() {
        assert!(hold(None).unwrap_err().contains("cgroup v2"));
    }
}
