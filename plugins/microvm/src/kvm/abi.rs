//! The slice of the KVM userspace ABI the functional test uses, written out
//! by hand so the build needs no kernel headers and no KVM crate.
//!
//! Layouts follow `<linux/kvm.h>` and `<asm/kvm.h>` (x86_64); the sizes are
//! checked at compile time, and the ioctl numbers are computed from them the
//! way the kernel's `_IO*` macros do, then checked against the known values.

use std::mem::size_of;

/// The API version every KVM since Linux 2.6.22 reports.
pub const API_VERSION: i32 = 12;

/// The ioctl type byte of KVM.
const KVMIO: u64 = 0xAE;
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

/// `_IOC(dir, KVMIO, nr, size)`.
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (KVMIO << 8) | nr
}

/// `_IO(KVMIO, nr)`.
const fn io(nr: u64) -> u64 {
    ioc(0, nr, 0)
}

pub const KVM_GET_API_VERSION: u64 = io(0x00);
pub const KVM_CREATE_VM: u64 = io(0x01);
pub const KVM_GET_VCPU_MMAP_SIZE: u64 = io(0x04);
pub const KVM_CREATE_VCPU: u64 = io(0x41);
pub const KVM_SET_USER_MEMORY_REGION: u64 =
    ioc(IOC_WRITE, 0x46, size_of::<UserspaceMemoryRegion>());
pub const KVM_RUN: u64 = io(0x80);
pub const KVM_SET_REGS: u64 = ioc(IOC_WRITE, 0x82, size_of::<Regs>());
pub const KVM_GET_SREGS: u64 = ioc(IOC_READ, 0x83, size_of::<Sregs>());
pub const KVM_SET_SREGS: u64 = ioc(IOC_WRITE, 0x84, size_of::<Sregs>());

// The numbers every KVM user has hard-coded for twenty years.
const _: () = assert!(KVM_GET_API_VERSION == 0xAE00);
const _: () = assert!(KVM_CREATE_VM == 0xAE01);
const _: () = assert!(KVM_GET_VCPU_MMAP_SIZE == 0xAE04);
const _: () = assert!(KVM_CREATE_VCPU == 0xAE41);
const _: () = assert!(KVM_SET_USER_MEMORY_REGION == 0x4020_AE46);
const _: () = assert!(KVM_RUN == 0xAE80);
const _: () = assert!(KVM_SET_REGS == 0x4090_AE82);
const _: () = assert!(KVM_GET_SREGS == 0x8138_AE83);
const _: () = assert!(KVM_SET_SREGS == 0x4138_AE84);

/// `struct kvm_userspace_memory_region`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UserspaceMemoryRegion {
    pub slot: u32,
    pub flags: u32,
    pub guest_phys_addr: u64,
    pub memory_size: u64,
    pub userspace_addr: u64,
}

/// `struct kvm_regs` (x86_64).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Regs {
    pub rax: u64,
    pub rbx: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub rsp: u64,
    pub rbp: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    pub rip: u64,
    pub rflags: u64,
}

/// `struct kvm_segment`: a segment register's hidden part, set directly.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Segment {
    pub base: u64,
    pub limit: u32,
    pub selector: u16,
    pub type_: u8,
    pub present: u8,
    pub dpl: u8,
    pub db: u8,
    pub s: u8,
    pub l: u8,
    pub g: u8,
    pub avl: u8,
    pub unusable: u8,
    pub padding: u8,
}

/// `struct kvm_dtable`: GDTR or IDTR.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dtable {
    pub base: u64,
    pub limit: u16,
    pub padding: [u16; 3],
}

/// `struct kvm_sregs` (x86_64).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sregs {
    pub cs: Segment,
    pub ds: Segment,
    pub es: Segment,
    pub fs: Segment,
    pub gs: Segment,
    pub ss: Segment,
    pub tr: Segment,
    pub ldt: Segment,
    pub gdt: Dtable,
    pub idt: Dtable,
    pub cr0: u64,
    pub cr2: u64,
    pub cr3: u64,
    pub cr4: u64,
    pub cr8: u64,
    pub efer: u64,
    pub apic_base: u64,
    /// `(KVM_NR_INTERRUPTS + 63) / 64` words.
    pub interrupt_bitmap: [u64; 4],
}

const _: () = assert!(size_of::<UserspaceMemoryRegion>() == 32);
const _: () = assert!(size_of::<Regs>() == 144);
const _: () = assert!(size_of::<Segment>() == 24);
const _: () = assert!(size_of::<Dtable>() == 16);
const _: () = assert!(size_of::<Sregs>() == 312);

/// The head of `struct kvm_run` (the vCPU's shared page) up to its union.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RunHead {
    pub request_interrupt_window: u8,
    pub immediate_exit: u8,
    pub padding1: [u8; 6],
    pub exit_reason: u32,
    pub ready_for_interrupt_injection: u8,
    pub if_flag: u8,
    pub flags: u16,
    pub cr8: u64,
    pub apic_base: u64,
}

/// Where the exit union starts in `struct kvm_run` (x86: no s390 PSW).
pub const RUN_UNION_OFFSET: usize = size_of::<RunHead>();
const _: () = assert!(RUN_UNION_OFFSET == 32);

/// The `io` member of the exit union (`KVM_EXIT_IO`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RunIo {
    pub direction: u8,
    pub size: u8,
    pub port: u16,
    pub count: u32,
    /// Offset of the data from the start of `struct kvm_run`.
    pub data_offset: u64,
}

/// `KVM_EXIT_IO_OUT`.
pub const EXIT_IO_OUT: u8 = 1;

/// `KVM_EXIT_*` values the test expects or names when they come instead.
pub const EXIT_IO: u32 = 2;
pub const EXIT_HLT: u32 = 5;
pub const EXIT_INTR: u32 = 10;
pub const EXIT_FAIL_ENTRY: u32 = 9;
pub const EXIT_INTERNAL_ERROR: u32 = 17;

/// The kernel's name for an exit reason, for messages.
pub fn exit_name(reason: u32) -> &'static str {
    match reason {
        0 => "KVM_EXIT_UNKNOWN",
        1 => "KVM_EXIT_EXCEPTION",
        2 => "KVM_EXIT_IO",
        3 => "KVM_EXIT_HYPERCALL",
        4 => "KVM_EXIT_DEBUG",
        5 => "KVM_EXIT_HLT",
        6 => "KVM_EXIT_MMIO",
        7 => "KVM_EXIT_IRQ_WINDOW_OPEN",
        8 => "KVM_EXIT_SHUTDOWN",
        9 => "KVM_EXIT_FAIL_ENTRY",
        10 => "KVM_EXIT_INTR",
        11 => "KVM_EXIT_SET_TPR",
        12 => "KVM_EXIT_TPR_ACCESS",
        16 => "KVM_EXIT_NMI",
        17 => "KVM_EXIT_INTERNAL_ERROR",
        24 => "KVM_EXIT_SYSTEM_EVENT",
        29 => "KVM_EXIT_X86_RDMSR",
        30 => "KVM_EXIT_X86_WRMSR",
        33 => "KVM_EXIT_X86_BUS_LOCK",
        37 => "KVM_EXIT_NOTIFY",
        _ => "an exit reason this probe does not know",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_names_match_the_constants() {
        assert_eq!(exit_name(EXIT_IO), "KVM_EXIT_IO");
        assert_eq!(exit_name(EXIT_HLT), "KVM_EXIT_HLT");
        assert_eq!(exit_name(EXIT_INTR), "KVM_EXIT_INTR");
        assert_eq!(exit_name(EXIT_FAIL_ENTRY), "KVM_EXIT_FAIL_ENTRY");
        assert_eq!(exit_name(EXIT_INTERNAL_ERROR), "KVM_EXIT_INTERNAL_ERROR");
        assert!(exit_name(999).contains("does not know"));
    }
}
