//! Dropping capabilities, for PID 1's layout (`crate::layout`, which keeps
//! `CAP_SYS_PTRACE` for the guard's supervisor) and the fork thread
//! (`crate::forker`, which keeps none): a module of its own so neither of
//! the two needs the other for it.

use std::io;

/// Every capability gone — effective, permitted, inheritable, ambient and
/// bounding — and the securebits locked so uid 0 gains none at exec; then
/// checked. Capabilities belong to a thread:
/// each thread that holds some drops its own.
pub fn drop_capabilities() -> io::Result<()> {
    keep_only(0)
}

/// `CAP_SYS_PTRACE`: what the guard's supervisor keeps (see `crate::layout::enter`).
pub const CAP_SYS_PTRACE: u32 = 19;

/// Like [`drop_capabilities`], but keeps the capabilities in `keep` (a bit
/// per capability) effective and permitted on this thread: nothing is
/// inheritable or ambient and the bounding set is empty, so none survives
/// an exec, and the locked securebits give none back to uid 0.
pub fn keep_only(keep: u64) -> io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS off, each
    // locked; SECBIT_NO_CAP_AMBIENT_RAISE and its lock.
    let securebits: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;
    // SAFETY: plain prctl calls.
    unsafe {
        check(libc::prctl(libc::PR_SET_SECUREBITS, securebits, 0, 0, 0))?;
    }
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?
        .trim()
        .parse::<libc::c_ulong>()
        .map_err(io::Error::other)?;
    for cap in 0..=last {
        // SAFETY: plain prctl call.
        check(unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) })?;
    }
    // SAFETY: plain prctl call.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [
        Data {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        Data {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    // SAFETY: capset reads a v3 header and two data structs.
    check(unsafe {
        libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) as libc::c_int
    })?;
    // Checked by asking the kernel, not `/proc/thread-self/status`: the
    // fork thread drops its capabilities in the commands' mount namespace,
    // whose `/proc` does not show it.
    let mut got = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget writes two data structs for a v3 header.
    check(unsafe {
        libc::syscall(libc::SYS_capget, &raw const header, got.as_mut_ptr()) as libc::c_int
    })?;
    let joined = |f: fn(&Data) -> u32| u64::from(f(&got[0])) | (u64::from(f(&got[1])) << 32);
    let mut bounding = 0u64;
    let mut ambient = 0u64;
    for cap in 0..=last {
        // SAFETY: plain prctl calls with integer arguments.
        let (in_bounding, in_ambient) = unsafe {
            (
                libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0),
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
                    cap,
                    0,
                    0,
                ),
            )
        };
        if in_bounding != 0 {
            bounding |= 1 << cap;
        }
        if in_ambient != 0 {
            ambient |= 1 << cap;
        }
    }
    for (field, value, expected) in [
        ("inheritable", joined(|d| d.inheritable), 0),
        ("permitted", joined(|d| d.permitted), keep),
        ("effective", joined(|d| d.effective), keep),
        ("bounding", bounding, 0),
        ("ambient", ambient, 0),
    ] {
        if value != expected {
            return Err(io::Error::other(format!(
                "the {field} capabilities are {value:016x} after dropping (expected {expected:016x})"
            )));
        }
    }
    Ok(())
}
