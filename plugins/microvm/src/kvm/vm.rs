//! The part of the functional test that talks to `/dev/kvm`: open it, make
//! a VM with one vCPU and the [`guest`] image, run it chunk by chunk and
//! time it. Every descriptor and mapping is owned by a value that releases
//! it on drop, so every early return cleans up.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

use super::abi::{
    self, API_VERSION, EXIT_FAIL_ENTRY, EXIT_HLT, EXIT_INTERNAL_ERROR, EXIT_INTR, EXIT_IO,
    EXIT_IO_OUT, KVM_CREATE_VCPU, KVM_CREATE_VM, KVM_GET_API_VERSION, KVM_GET_SREGS,
    KVM_GET_VCPU_MMAP_SIZE, KVM_RUN, KVM_SET_REGS, KVM_SET_SREGS, KVM_SET_USER_MEMORY_REGION,
    RUN_UNION_OFFSET, RunHead, RunIo, Sregs, UserspaceMemoryRegion,
};
use super::{DEV_KVM, Plan, Verdict, after_chunk, at_halt, guest};

/// A memory mapping, unmapped on drop.
struct Mapping {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapping {
    /// Private anonymous memory, zeroed: the guest's RAM.
    fn anonymous(len: usize) -> Result<Self, String> {
        // SAFETY: a fresh private anonymous mapping aliases nothing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mapping {len} bytes of guest memory failed: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(Self { ptr, len })
    }

    /// The vCPU's shared `struct kvm_run` page(s).
    fn vcpu(vcpu: &OwnedFd, len: usize) -> Result<Self, String> {
        // SAFETY: maps `len` bytes of the vCPU descriptor, as KVM documents;
        // the mapping is only read through `read`, bounds-checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                vcpu.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "mapping the vCPU's kvm_run ({len} bytes) failed: {}",
                io::Error::last_os_error()
            ));
        }
        Ok(Self { ptr, len })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` is a live read-write mapping of `len` bytes owned by
        // `self`, borrowed mutably here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<u8>(), self.len) }
    }

    /// Reads a `T` at `offset`; `None` if it would leave the mapping.
    fn read<T: Copy>(&self, offset: usize) -> Option<T> {
        let end = offset.checked_add(std::mem::size_of::<T>())?;
        if end > self.len {
            return None;
        }
        // SAFETY: in bounds (checked above) of a live readable mapping; the
        // types read here are plain integers, valid for any bit pattern.
        Some(unsafe {
            self.ptr
                .cast::<u8>()
                .add(offset)
                .cast::<T>()
                .read_unaligned()
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns, once.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

/// An ioctl that takes no pointer (its argument is 0).
fn ioctl_plain(fd: &OwnedFd, request: u64) -> io::Result<libc::c_int> {
    // SAFETY: these requests read no memory of ours; 0 is their argument.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::Ioctl, 0) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The size an ioctl number says its argument has (`_IOC_SIZE`).
fn ioc_size(request: u64) -> usize {
    ((request >> 16) & 0x3FFF) as usize
}

/// An ioctl whose argument is a pointer to a `T` the kernel reads or
/// writes; refuses a request whose encoded size is not `T`'s.
fn ioctl_with<T>(fd: &OwnedFd, request: u64, arg: *mut T) -> io::Result<libc::c_int> {
    if ioc_size(request) != std::mem::size_of::<T>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "ioctl argument size mismatch",
        ));
    }
    // SAFETY: `arg` points to a live `T` whose size the request encodes, so
    // the kernel touches only that object.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::Ioctl, arg) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Takes ownership of a descriptor an ioctl returned.
fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: the kernel just created this descriptor for us (close-on-exec,
    // as KVM makes them); nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn failed(what: &str, e: io::Error) -> String {
    format!("{what} failed: {e}")
}

fn open_kvm() -> Result<OwnedFd, String> {
    // std opens with O_CLOEXEC.
    match OpenOptions::new().read(true).write(true).open(DEV_KVM) {
        Ok(file) => Ok(OwnedFd::from(file)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "{DEV_KVM} does not exist (the kvm module is not loaded, or the CPU or hypervisor offers no virtualisation)"
        )),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(format!(
            "{DEV_KVM}: permission denied (add the user cc_server runs as to the `kvm` group)"
        )),
        Err(e) => Err(format!("opening {DEV_KVM} failed: {e}")),
    }
}

/// Runs the test guest; `Err` is the reason KVM is unusable.
pub(super) fn run(plan: &Plan) -> Result<Verdict, String> {
    let kvm = open_kvm()?;
    let version =
        ioctl_plain(&kvm, KVM_GET_API_VERSION).map_err(|e| failed("KVM_GET_API_VERSION", e))?;
    if version != API_VERSION {
        return Err(format!(
            "{DEV_KVM} speaks KVM API version {version}, not {API_VERSION}"
        ));
    }
    // Declared before the VM so it is unmapped only after the VM is closed.
    let mut memory = Mapping::anonymous(guest::MEM_SIZE)?;
    guest::write_image(memory.as_mut_slice(), plan);
    let vm = owned(ioctl_plain(&kvm, KVM_CREATE_VM).map_err(|e| failed("KVM_CREATE_VM", e))?);
    let mut region = UserspaceMemoryRegion {
        slot: 0,
        flags: 0,
        guest_phys_addr: 0,
        memory_size: guest::MEM_SIZE as u64,
        userspace_addr: memory.ptr as u64,
    };
    ioctl_with(&vm, KVM_SET_USER_MEMORY_REGION, &mut region)
        .map_err(|e| failed("KVM_SET_USER_MEMORY_REGION", e))?;
    let vcpu = owned(ioctl_plain(&vm, KVM_CREATE_VCPU).map_err(|e| failed("KVM_CREATE_VCPU", e))?);
    let run_size = ioctl_plain(&kvm, KVM_GET_VCPU_MMAP_SIZE)
        .map_err(|e| failed("KVM_GET_VCPU_MMAP_SIZE", e))?;
    let run_size = usize::try_from(run_size).unwrap_or(0);
    if run_size < RUN_UNION_OFFSET + std::mem::size_of::<RunIo>() {
        return Err(format!(
            "KVM_GET_VCPU_MMAP_SIZE says {run_size} bytes, too small for kvm_run"
        ));
    }
    let shared = Mapping::vcpu(&vcpu, run_size)?;
    let mut sregs = Sregs::default();
    ioctl_with(&vcpu, KVM_GET_SREGS, &mut sregs).map_err(|e| failed("KVM_GET_SREGS", e))?;
    guest::long_mode(&mut sregs);
    ioctl_with(&vcpu, KVM_SET_SREGS, &mut sregs).map_err(|e| failed("KVM_SET_SREGS", e))?;
    let mut regs = guest::start_regs();
    ioctl_with(&vcpu, KVM_SET_REGS, &mut regs).map_err(|e| failed("KVM_SET_REGS", e))?;

    let started = Instant::now();
    let mut done: u32 = 0;
    // Spurious exits (EINTR) are retried, but never forever.
    let mut entries_left = u64::from(plan.chunks) * 2 + 16;
    loop {
        if entries_left == 0 {
            return Err(format!(
                "the guest made no progress after {done} of {} chunks",
                plan.chunks
            ));
        }
        entries_left -= 1;
        let entered = ioctl_plain(&vcpu, KVM_RUN);
        let elapsed = started.elapsed();
        match entered {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                if let Some(verdict) = after_chunk(plan, done, elapsed) {
                    return Ok(verdict);
                }
                continue;
            }
            Err(e) => return Err(failed("KVM_RUN", e)),
        }
        let head: RunHead = shared
            .read(0)
            .ok_or_else(|| "kvm_run is unreadable".to_owned())?;
        match head.exit_reason {
            EXIT_IO => {
                let io: RunIo = shared
                    .read(RUN_UNION_OFFSET)
                    .ok_or_else(|| "kvm_run is unreadable".to_owned())?;
                let data: Option<u8> = usize::try_from(io.data_offset)
                    .ok()
                    .and_then(|at| shared.read(at));
                let expected = guest::chunk_tag(done);
                let as_planned = io.direction == EXIT_IO_OUT
                    && io.port == u16::from(guest::REPORT_PORT)
                    && io.size == 1
                    && io.count == 1
                    && data == Some(expected)
                    && done < plan.chunks;
                if !as_planned {
                    return Err(format!(
                        "unexpected KVM_EXIT_IO after {done} chunks: direction {}, port {:#x}, size {}, count {}, data {data:?} (expected an out of {expected} to port {:#x})",
                        io.direction,
                        io.port,
                        io.size,
                        io.count,
                        guest::REPORT_PORT
                    ));
                }
                done += 1;
                if let Some(verdict) = after_chunk(plan, done, elapsed) {
                    return Ok(verdict);
                }
            }
            EXIT_HLT if done == plan.chunks => return Ok(at_halt(plan, elapsed)),
            EXIT_HLT => {
                return Err(format!(
                    "the guest halted after {done} of {} chunks",
                    plan.chunks
                ));
            }
            EXIT_INTR => {
                if let Some(verdict) = after_chunk(plan, done, elapsed) {
                    return Ok(verdict);
                }
            }
            EXIT_INTERNAL_ERROR => {
                let suberror: u32 = shared.read(RUN_UNION_OFFSET).unwrap_or(0);
                return Err(format!(
                    "unexpected exit KVM_EXIT_INTERNAL_ERROR (suberror {suberror}) after {done} chunks"
                ));
            }
            EXIT_FAIL_ENTRY => {
                let reason: u64 = shared.read(RUN_UNION_OFFSET).unwrap_or(0);
                return Err(format!(
                    "unexpected exit KVM_EXIT_FAIL_ENTRY (hardware entry failure reason {reason:#x}): the vCPU refused the 64-bit state"
                ));
            }
            other => {
                return Err(format!(
                    "unexpected exit {} ({other}) after {done} chunks",
                    abi::exit_name(other)
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_size_must_match_the_request() {
        assert_eq!(ioc_size(KVM_SET_SREGS), std::mem::size_of::<Sregs>());
        assert_eq!(ioc_size(KVM_RUN), 0);
        // A mismatched pointer never reaches the kernel (any descriptor will do).
        let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let mut wrong = 0u64;
        let e = ioctl_with(&fd, KVM_SET_SREGS, &mut wrong).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn reads_past_the_end_of_a_mapping_are_refused() {
        let mut m = Mapping::anonymous(4096).unwrap();
        m.as_mut_slice()[4095] = 7;
        assert_eq!(m.read::<u8>(4095), Some(7));
        assert_eq!(m.read::<u16>(4095), None);
        assert_eq!(m.read::<u8>(usize::MAX), None);
    }
}
