//! A machine started from a saved state (a checkpoint or a template) is
//! told so first: its kernel's random pool is the saved one — the same in
//! every machine started from one template — and its clock is as old as
//! the state. The host's fresh seed is credited to the pool and the CRNG
//! reseeded from it; the clock is set to the host's.

use std::os::fd::AsRawFd;

use sandbox_microvm_proto::Restored;

/// `RNDADDENTROPY`: `_IOW('R', 0x03, int[2])`.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203;
/// `RNDRESEEDCRNG`: `_IO('R', 0x07)`.
const RNDRESEEDCRNG: libc::c_ulong = 0x5207;

/// Applies both; the error names what failed.
pub fn apply(restored: &Restored) -> Result<(), String> {
    reseed(&restored.seed).map_err(|e| format!("reseeding the RNG: {e}"))?;
    set_clock(restored.unix_nanos).map_err(|e| format!("setting the clock: {e}"))
}

fn reseed(seed: &[u8]) -> std::io::Result<()> {
    if seed.len() < 32 {
        return Err(std::io::Error::other("a seed of fewer than 32 bytes"));
    }
    let random = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/urandom")?;
    // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
    let mut info = Vec::with_capacity(8 + seed.len());
    info.extend_from_slice(&((seed.len() * 8) as i32).to_ne_bytes());
    info.extend_from_slice(&(seed.len() as i32).to_ne_bytes());
    info.extend_from_slice(seed);
    // SAFETY: ioctls on our open descriptor; `info` is laid out as the
    // kernel's rand_pool_info and outlives the call.
    unsafe {
        if libc::ioctl(random.as_raw_fd(), RNDADDENTROPY, info.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::ioctl(random.as_raw_fd(), RNDRESEEDCRNG) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn set_clock(unix_nanos: u64) -> std::io::Result<()> {
    let now = libc::timespec {
        tv_sec: (unix_nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (unix_nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec for the call.
    if unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &now) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
