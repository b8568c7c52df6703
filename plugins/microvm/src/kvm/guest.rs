//! The test guest, as pure data: its memory image (a GDT, identity-mapped
//! page tables, the code) and the register values that put a vCPU straight
//! into 64-bit long mode at CPL 0.
//!
//! Ring 0 is the point: a PVM host runs ring-3 guest code natively but
//! emulates ring-0 code instruction by instruction, and a guest kernel is
//! ring-0 code (docs/research/microvm.md §1). Nothing here touches KVM, so all
//! of it is unit-tested.

use super::Plan;
use super::abi::{Dtable, Regs, Segment, Sregs};

/// Guest memory: one 2 MiB page, mapped at guest-physical 0.
pub const MEM_SIZE: usize = 2 << 20;
/// The GDT: null, 64-bit code, data.
pub const GDT_ADDR: u64 = 0x1000;
/// The page-table root (CR3).
pub const PML4_ADDR: u64 = 0x2000;
/// The page-directory-pointer table.
pub const PDPT_ADDR: u64 = 0x3000;
/// The page directory, whose entry 0 maps the 2 MiB page.
pub const PD_ADDR: u64 = 0x4000;
/// Where the code starts (RIP).
pub const CODE_ADDR: u64 = 0x1_0000;
/// The port each chunk reports on. No device of KVM's own claims it, so
/// every `out` to it is a `KVM_EXIT_IO` to us.
pub const REPORT_PORT: u8 = 0xE9;

/// Selectors of the two GDT entries.
pub const CODE_SELECTOR: u16 = 0x08;
pub const DATA_SELECTOR: u16 = 0x10;

/// Page-table entry bits.
const PTE_PRESENT: u64 = 1 << 0;
const PTE_WRITABLE: u64 = 1 << 1;
const PDE_HUGE: u64 = 1 << 7;

/// Control-register and EFER bits.
pub const CR0_PE: u64 = 1 << 0;
pub const CR0_MP: u64 = 1 << 1;
pub const CR0_ET: u64 = 1 << 4;
pub const CR0_NE: u64 = 1 << 5;
pub const CR0_WP: u64 = 1 << 16;
pub const CR0_PG: u64 = 1 << 31;
pub const CR4_PAE: u64 = 1 << 5;
pub const EFER_LME: u64 = 1 << 8;
pub const EFER_LMA: u64 = 1 << 10;

/// The bytes of one chunk: `mov ecx, n; 1: dec rcx; jnz 1b; mov al, k;
/// out REPORT_PORT, al`. The host knows chunk `k` ran when `k` arrives.
pub fn chunk_code(iterations: u32, index: u8) -> [u8; 14] {
    let n = iterations.to_le_bytes();
    [
        0xB9,
        n[0],
        n[1],
        n[2],
        n[3], // mov ecx, imm32 (zero-extends into rcx)
        0x48,
        0xFF,
        0xC9, // dec rcx
        0x75,
        0xFB, // jnz -5: back to `dec`
        0xB0,
        index, // mov al, imm8
        0xE6,
        REPORT_PORT, // out imm8, al
    ]
}

/// `hlt`: the end of the test.
pub const HLT: u8 = 0xF4;

/// The whole program: `plan.chunks` chunks, then `hlt`.
pub fn code(plan: &Plan) -> Vec<u8> {
    let mut code = Vec::with_capacity(plan.chunks as usize * 14 + 1);
    for k in 0..plan.chunks {
        code.extend_from_slice(&chunk_code(plan.chunk_iterations, chunk_tag(k)));
    }
    code.push(HLT);
    code
}

/// What chunk `k` writes to the port (its index, modulo 256).
pub fn chunk_tag(k: u32) -> u8 {
    (k % 256) as u8
}

/// The 64-bit code segment, as `KVM_SET_SREGS` takes it.
pub fn code_segment() -> Segment {
    Segment {
        base: 0,
        limit: 0xFFFF_FFFF,
        selector: CODE_SELECTOR,
        type_: 0xB, // execute/read, accessed
        present: 1,
        dpl: 0,
        db: 0, // must be 0 when L is 1
        s: 1,
        l: 1,
        g: 1,
        ..Segment::default()
    }
}

/// The data segment for DS, ES, FS, GS and SS.
pub fn data_segment() -> Segment {
    Segment {
        base: 0,
        limit: 0xFFFF_FFFF,
        selector: DATA_SELECTOR,
        type_: 0x3, // read/write, accessed
        present: 1,
        dpl: 0,
        db: 1,
        s: 1,
        l: 0,
        g: 1,
        ..Segment::default()
    }
}

/// The GDT descriptor that loads as `seg` (so the table in memory agrees
/// with what `KVM_SET_SREGS` put in the hidden segment registers).
pub fn descriptor(seg: &Segment) -> u64 {
    let limit = if seg.g == 1 {
        u64::from(seg.limit >> 12)
    } else {
        u64::from(seg.limit)
    };
    let base = seg.base & 0xFFFF_FFFF;
    (limit & 0xFFFF)
        | ((base & 0xFF_FFFF) << 16)
        | (u64::from(seg.type_ & 0xF) << 40)
        | (u64::from(seg.s & 1) << 44)
        | (u64::from(seg.dpl & 3) << 45)
        | (u64::from(seg.present & 1) << 47)
        | (((limit >> 16) & 0xF) << 48)
        | (u64::from(seg.avl & 1) << 52)
        | (u64::from(seg.l & 1) << 53)
        | (u64::from(seg.db & 1) << 54)
        | (u64::from(seg.g & 1) << 55)
        | (((base >> 24) & 0xFF) << 56)
}

/// The GDT: null, code, data.
pub fn gdt() -> [u64; 3] {
    [0, descriptor(&code_segment()), descriptor(&data_segment())]
}

fn put_u64(mem: &mut [u8], addr: u64, value: u64) {
    let at = addr as usize;
    mem[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Writes the GDT, the page tables and the code into `mem` (guest-physical
/// 0 is `mem[0]`; `mem` is [`MEM_SIZE`] bytes, zeroed).
pub fn write_image(mem: &mut [u8], plan: &Plan) {
    for (i, entry) in gdt().iter().enumerate() {
        put_u64(mem, GDT_ADDR + 8 * i as u64, *entry);
    }
    put_u64(mem, PML4_ADDR, PDPT_ADDR | PTE_PRESENT | PTE_WRITABLE);
    put_u64(mem, PDPT_ADDR, PD_ADDR | PTE_PRESENT | PTE_WRITABLE);
    // One 2 MiB page at 0: virtual == physical for all of guest memory.
    put_u64(mem, PD_ADDR, PTE_PRESENT | PTE_WRITABLE | PDE_HUGE);
    let code = code(plan);
    let at = CODE_ADDR as usize;
    mem[at..at + code.len()].copy_from_slice(&code);
}

/// Turns the vCPU's reset state (from `KVM_GET_SREGS`) into 64-bit long
/// mode at CPL 0: paging on with [`PML4_ADDR`], PAE, LME|LMA, the segments
/// of [`gdt`]. TR and LDT keep KVM's reset values, which every KVM accepts.
pub fn long_mode(sregs: &mut Sregs) {
    sregs.cs = code_segment();
    let data = data_segment();
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.gdt = Dtable {
        base: GDT_ADDR,
        limit: (gdt().len() * 8 - 1) as u16,
        padding: [0; 3],
    };
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.cr3 = PML4_ADDR;
    sregs.cr4 = CR4_PAE;
    sregs.efer = EFER_LME | EFER_LMA;
}

/// The general registers at the start: RIP at the code, interrupts off.
pub fn start_regs() -> Regs {
    Regs {
        rip: CODE_ADDR,
        rflags: 0x2, // bit 1 is reserved and always set
        rsp: MEM_SIZE as u64,
        ..Regs::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn get_u64(mem: &[u8], addr: u64) -> u64 {
        let at = addr as usize;
        u64::from_le_bytes(mem[at..at + 8].try_into().unwrap())
    }

    /// A 4-level walk with 2 MiB pages, as the CPU does it.
    fn translate(mem: &[u8], cr3: u64, va: u64) -> Option<u64> {
        let frame = |e: u64| e & 0x000F_FFFF_FFFF_F000;
        let pml4e = get_u64(mem, frame(cr3) + ((va >> 39) & 0x1FF) * 8);
        if pml4e & PTE_PRESENT == 0 {
            return None;
        }
        let pdpte = get_u64(mem, frame(pml4e) + ((va >> 30) & 0x1FF) * 8);
        if pdpte & PTE_PRESENT == 0 {
            return None;
        }
        let pde = get_u64(mem, frame(pdpte) + ((va >> 21) & 0x1FF) * 8);
        if pde & PTE_PRESENT == 0 || pde & PDE_HUGE == 0 {
            return None;
        }
        Some((pde & 0x000F_FFFF_FFE0_0000) | (va & 0x1F_FFFF))
    }

    fn image(plan: &Plan) -> Vec<u8> {
        let mut mem = vec![0; MEM_SIZE];
        write_image(&mut mem, plan);
        mem
    }

    #[test]
    fn all_of_guest_memory_is_identity_mapped_and_nothing_else() {
        let mem = image(&Plan::DEFAULT);
        for va in [0, GDT_ADDR, PML4_ADDR, CODE_ADDR, MEM_SIZE as u64 - 1] {
            assert_eq!(translate(&mem, PML4_ADDR, va), Some(va), "{va:#x}");
        }
        assert_eq!(translate(&mem, PML4_ADDR, MEM_SIZE as u64), None);
        assert_eq!(translate(&mem, PML4_ADDR, 1 << 39), None);
        // The tables themselves do not overlap the code.
        let code_len = code(&Plan::DEFAULT).len() as u64;
        const { assert!(PD_ADDR + 4096 <= CODE_ADDR) };
        assert!(CODE_ADDR + code_len <= MEM_SIZE as u64);
    }

    #[test]
    fn the_gdt_in_memory_matches_the_segment_registers() {
        let mem = image(&Plan::DEFAULT);
        assert_eq!(get_u64(&mem, GDT_ADDR), 0);
        assert_eq!(
            get_u64(&mem, GDT_ADDR + u64::from(CODE_SELECTOR)),
            0x00AF_9B00_0000_FFFF
        );
        assert_eq!(
            get_u64(&mem, GDT_ADDR + u64::from(DATA_SELECTOR)),
            0x00CF_9300_0000_FFFF
        );
    }

    #[test]
    fn long_mode_is_64_bit_cpl0_with_paging() {
        let mut sregs = Sregs::default();
        long_mode(&mut sregs);
        assert_eq!((sregs.cs.l, sregs.cs.db, sregs.cs.dpl), (1, 0, 0));
        assert_eq!(sregs.cs.selector & 3, 0, "CPL is CS.RPL: ring 0");
        assert_eq!(sregs.ss.dpl, 0);
        assert_eq!(sregs.cr0 & (CR0_PE | CR0_PG), CR0_PE | CR0_PG);
        assert_eq!(sregs.cr4 & CR4_PAE, CR4_PAE);
        assert_eq!(sregs.efer & (EFER_LME | EFER_LMA), EFER_LME | EFER_LMA);
        assert_eq!(sregs.cr3, PML4_ADDR);
        assert_eq!(sregs.gdt.base, GDT_ADDR);
        assert_eq!(sregs.gdt.limit, 23);
        let regs = start_regs();
        assert_eq!(regs.rip, CODE_ADDR);
        assert_eq!(regs.rflags & (1 << 9), 0, "interrupts off");
    }

    /// Runs the code with a model of exactly the five instructions it uses;
    /// returns the loop iterations and the values written to the port.
    fn interpret(code: &[u8]) -> (u64, Vec<u8>) {
        let (mut ip, mut rcx, mut al, mut zf) = (0usize, 0u64, 0u8, false);
        let (mut iterations, mut out) = (0u64, Vec::new());
        loop {
            match code[ip] {
                0xB9 => {
                    rcx = u64::from(u32::from_le_bytes(code[ip + 1..ip + 5].try_into().unwrap()));
                    ip += 5;
                }
                0x48 => {
                    assert_eq!(&code[ip..ip + 3], &[0x48, 0xFF, 0xC9]);
                    rcx = rcx.wrapping_sub(1);
                    zf = rcx == 0;
                    iterations += 1;
                    ip += 3;
                }
                0x75 => {
                    let rel = code[ip + 1] as i8;
                    ip += 2;
                    if !zf {
                        ip = ip.checked_add_signed(rel as isize).unwrap();
                    }
                }
                0xB0 => {
                    al = code[ip + 1];
                    ip += 2;
                }
                0xE6 => {
                    assert_eq!(code[ip + 1], REPORT_PORT);
                    out.push(al);
                    ip += 2;
                }
                HLT => return (iterations, out),
                other => panic!("unexpected byte {other:#x} at {ip}"),
            }
        }
    }

    #[test]
    fn the_code_runs_every_iteration_and_reports_each_chunk_in_order() {
        let plan = Plan {
            chunk_iterations: 1000,
            chunks: 300,
            budget: Duration::from_millis(100),
        };
        let (iterations, out) = interpret(&code(&plan));
        assert_eq!(iterations, plan.total_iterations());
        let expected: Vec<u8> = (0..300).map(chunk_tag).collect();
        assert_eq!(out, expected);
        assert_eq!(out[256], 0, "tags wrap at 256");
    }

    #[test]
    fn the_default_program_is_1000_chunks_of_10k() {
        let code = code(&Plan::DEFAULT);
        assert_eq!(code.len(), 1000 * 14 + 1);
        assert!(CODE_ADDR as usize + code.len() < MEM_SIZE, "the code fits");
        assert_eq!(
            &code[..14],
            &[
                0xB9, 0x10, 0x27, 0x00, 0x00, 0x48, 0xFF, 0xC9, 0x75, 0xFB, 0xB0, 0, 0xE6, 0xE9
            ]
        );
        assert_eq!(code.last(), Some(&HLT));
        let (iterations, out) = interpret(&code);
        assert_eq!(iterations, 10_000_000);
        assert_eq!(out.len(), 1000);
    }
}
