//! Just enough ELF64 (little-endian) reading for the image: a named section
//! (`.modinfo` of a kernel module), whether a binary is dynamically linked
//! (`PT_INTERP`), and whether a vmlinux has the Xen PVH entry note that
//! QEMU's `-kernel` needs to boot it directly.
//!
//! Every offset is bounds-checked: a truncated or foreign file gives an
//! error, never a panic.
//!
//! Kept rather than the `object` crate: three questions of one format; `object`
//! (0.39, ~57,000 lines, seconds of build even with only `read_core` + `elf`)
//! answers them too, but this is smaller than its feature list.

/// Why a file cannot be read as ELF64 little-endian: foreign, or cut short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64Le,
    #[error("bad ELF section header table")]
    BadSectionTable,
    #[error("ELF section header offset overflows")]
    SectionHeaderOverflow,
    #[error("ELF section header offset too large")]
    SectionHeaderTooLarge,
    #[error(transparent)]
    SectionNameOffset(std::num::TryFromIntError),
    #[error("ELF section name out of range")]
    SectionNameOutOfRange,
    #[error("bad ELF program header size")]
    BadProgramHeaderSize,
    #[error("ELF program header offset overflows")]
    ProgramHeaderOverflow,
    #[error("ELF range overflows")]
    RangeOverflow,
    #[error("ELF file is truncated (a section or segment runs past its end)")]
    Truncated,
    #[error("ELF header is truncated")]
    HeaderTruncated,
}

/// A parsed ELF64 little-endian file (borrowed).
pub struct Elf<'a> {
    data: &'a [u8],
}

const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
/// `XEN_ELFNOTE_PHYS32_ENTRY`: the 32-bit PVH entry point.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

impl<'a> Elf<'a> {
    /// Checks the identification bytes: ELF, 64-bit, little-endian.
    pub fn parse(data: &'a [u8]) -> Result<Self, ElfError> {
        if data.len() < 64 || &data[..4] != b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        if data[4] != 2 || data[5] != 1 {
            return Err(ElfError::NotElf64Le);
        }
        Ok(Self { data })
    }

    /// The contents of the first section called `name`, if any.
    pub fn section(&self, name: &str) -> Result<Option<&'a [u8]>, ElfError> {
        let shoff = self.u64(0x28)?;
        let shentsize = u64::from(self.u16(0x3A)?);
        let shnum = u64::from(self.u16(0x3C)?);
        let shstrndx = u64::from(self.u16(0x3E)?);
        if shnum == 0 {
            return Ok(None);
        }
        if shentsize < 64 || shstrndx >= shnum {
            return Err(ElfError::BadSectionTable);
        }
        let header = |i: u64| -> Result<usize, ElfError> {
            let at = i
                .checked_mul(shentsize)
                .and_then(|o| o.checked_add(shoff))
                .ok_or(ElfError::SectionHeaderOverflow)?;
            usize::try_from(at).map_err(|_| ElfError::SectionHeaderTooLarge)
        };
        let strtab_hdr = header(shstrndx)?;
        let strtab = self.range(self.u64(strtab_hdr + 24)?, self.u64(strtab_hdr + 32)?)?;
        for i in 0..shnum {
            let h = header(i)?;
            let name_off = usize::try_from(self.u32(h)?).map_err(ElfError::SectionNameOffset)?;
            let sh_name = strtab
                .get(name_off..)
                .ok_or(ElfError::SectionNameOutOfRange)?;
            let end = sh_name
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(sh_name.len());
            if &sh_name[..end] == name.as_bytes() {
                return self.range(self.u64(h + 24)?, self.u64(h + 32)?).map(Some);
            }
        }
        Ok(None)
    }

    /// Whether the file asks for a program interpreter (dynamic linking),
    /// which cannot run as `/init` in an initramfs that has no libc.
    pub fn has_interp(&self) -> Result<bool, ElfError> {
        Ok(self.segments()?.iter().any(|&(t, _)| t == PT_INTERP))
    }

    /// Whether a `PT_NOTE` segment holds the Xen PVH entry note, so QEMU can
    /// boot this vmlinux with `-kernel` without decompressing anything.
    pub fn has_pvh_note(&self) -> Result<bool, ElfError> {
        for (t, body) in self.segments()? {
            if t == PT_NOTE
                && notes(body).any(|(name, ty)| name == b"Xen" && ty == XEN_ELFNOTE_PHYS32_ENTRY)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// `(p_type, file contents)` of every program header.
    fn segments(&self) -> Result<Vec<(u32, &'a [u8])>, ElfError> {
        let phoff = self.u64(0x20)?;
        let phentsize = u64::from(self.u16(0x36)?);
        let phnum = u64::from(self.u16(0x38)?);
        if phnum > 0 && phentsize < 56 {
            return Err(ElfError::BadProgramHeaderSize);
        }
        let mut out = Vec::new();
        for i in 0..phnum {
            let at = phoff
                .checked_add(i * phentsize)
                .and_then(|a| usize::try_from(a).ok())
                .ok_or(ElfError::ProgramHeaderOverflow)?;
            let p_type = self.u32(at)?;
            out.push((p_type, self.range(self.u64(at + 8)?, self.u64(at + 32)?)?));
        }
        Ok(out)
    }

    fn range(&self, off: u64, size: u64) -> Result<&'a [u8], ElfError> {
        let end = off.checked_add(size).ok_or(ElfError::RangeOverflow)?;
        let (off, end) = (usize::try_from(off), usize::try_from(end));
        match (off, end) {
            (Ok(o), Ok(e)) if e <= self.data.len() => Ok(&self.data[o..e]),
            _ => Err(ElfError::Truncated),
        }
    }

    fn bytes<const N: usize>(&self, at: usize) -> Result<[u8; N], ElfError> {
        self.data
            .get(at..at.saturating_add(N))
            .and_then(|s| s.try_into().ok())
            .ok_or(ElfError::HeaderTruncated)
    }

    fn u16(&self, at: usize) -> Result<u16, ElfError> {
        self.bytes(at).map(u16::from_le_bytes)
    }

    fn u32(&self, at: usize) -> Result<u32, ElfError> {
        self.bytes(at).map(u32::from_le_bytes)
    }

    fn u64(&self, at: usize) -> Result<u64, ElfError> {
        self.bytes(at).map(u64::from_le_bytes)
    }
}

/// Iterates `(name without NUL, type)` over an ELF note area; stops at the
/// first malformed note.
fn notes(mut area: &[u8]) -> impl Iterator<Item = (&[u8], u32)> {
    std::iter::from_fn(move || {
        let word = |a: &[u8], i: usize| -> Option<usize> {
            let b: [u8; 4] = a.get(i..i + 4)?.try_into().ok()?;
            usize::try_from(u32::from_le_bytes(b)).ok()
        };
        let (namesz, descsz, ty) = (word(area, 0)?, word(area, 4)?, word(area, 8)?);
        let name_end = 12usize.checked_add(namesz)?;
        let name = area.get(12..name_end)?;
        let next = name_end
            .next_multiple_of(4)
            .checked_add(descsz)?
            .next_multiple_of(4);
        area = area.get(next..).unwrap_or(&[]);
        let name = name.strip_suffix(&[0]).unwrap_or(name);
        Some((name, u32::try_from(ty).ok()?))
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a minimal ELF64 with the given sections (plus the null section
    /// and `.shstrtab`) and program headers `(p_type, contents)`.
    pub(crate) fn build(sections: &[(&str, &[u8])], segments: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = vec![0u8; 64];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = 2; // ELFCLASS64
        out[5] = 1; // little-endian
        out[6] = 1; // EV_CURRENT

        // Section contents, then .shstrtab.
        let mut shstrtab = vec![0u8];
        let mut placed = Vec::new();
        for (name, body) in sections {
            let name_off = shstrtab.len();
            shstrtab.extend_from_slice(name.as_bytes());
            shstrtab.push(0);
            placed.push((name_off, out.len(), body.len()));
            out.extend_from_slice(body);
        }
        let strtab_name = shstrtab.len();
        shstrtab.extend_from_slice(b".shstrtab\0");
        let strtab_at = out.len();
        out.extend_from_slice(&shstrtab);
        placed.push((strtab_name, strtab_at, shstrtab.len()));

        // Segment contents.
        let mut segs = Vec::new();
        for (t, body) in segments {
            segs.push((*t, out.len(), body.len()));
            out.extend_from_slice(body);
        }

        // Program headers.
        while !out.len().is_multiple_of(8) {
            out.push(0);
        }
        let phoff = out.len();
        for (t, at, len) in &segs {
            let mut ph = [0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            ph[8..16].copy_from_slice(&(*at as u64).to_le_bytes());
            ph[32..40].copy_from_slice(&(*len as u64).to_le_bytes());
            out.extend_from_slice(&ph);
        }

        // Section headers: null, the given ones, .shstrtab.
        let shoff = out.len();
        out.extend_from_slice(&[0u8; 64]);
        for (name, at, len) in &placed {
            let mut sh = [0u8; 64];
            sh[..4].copy_from_slice(&(*name as u32).to_le_bytes());
            sh[24..32].copy_from_slice(&(*at as u64).to_le_bytes());
            sh[32..40].copy_from_slice(&(*len as u64).to_le_bytes());
            out.extend_from_slice(&sh);
        }
        out[0x20..0x28].copy_from_slice(&(phoff as u64).to_le_bytes());
        out[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        out[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        out[0x38..0x3A].copy_from_slice(&(segs.len() as u16).to_le_bytes());
        out[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
        out[0x3C..0x3E].copy_from_slice(&(placed.len() as u16 + 1).to_le_bytes());
        out[0x3E..0x40].copy_from_slice(&(placed.len() as u16).to_le_bytes());
        out
    }

    fn note(name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
        let mut n = Vec::new();
        n.extend_from_slice(&(name.len() as u32 + 1).to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&ty.to_le_bytes());
        n.extend_from_slice(name);
        n.push(0);
        while !n.len().is_multiple_of(4) {
            n.push(0);
        }
        n.extend_from_slice(desc);
        while !n.len().is_multiple_of(4) {
            n.push(0);
        }
        n
    }

    #[test]
    fn finds_a_section_by_name() {
        let elf = build(&[(".text", b"\x90\x90"), (".modinfo", b"a=b\0")], &[]);
        let e = Elf::parse(&elf).unwrap();
        assert_eq!(e.section(".modinfo").unwrap(), Some(&b"a=b\0"[..]));
        assert_eq!(e.section(".text").unwrap(), Some(&b"\x90\x90"[..]));
        assert_eq!(e.section(".nope").unwrap(), None);
    }

    #[test]
    fn detects_interp_and_pvh_note() {
        let mut notes_area = note(b"GNU", 3, &[1, 2, 3, 4, 5]);
        notes_area.extend(note(b"Xen", XEN_ELFNOTE_PHYS32_ENTRY, &[0, 0, 0, 1]));
        let pvh = build(&[], &[(PT_NOTE, &notes_area)]);
        let e = Elf::parse(&pvh).unwrap();
        assert!(e.has_pvh_note().unwrap());
        assert!(!e.has_interp().unwrap());

        let dynamic = build(&[], &[(PT_INTERP, b"/lib64/ld-linux-x86-64.so.2\0")]);
        let e = Elf::parse(&dynamic).unwrap();
        assert!(e.has_interp().unwrap());
        assert!(!e.has_pvh_note().unwrap());
    }

    #[test]
    fn rejects_foreign_and_truncated_files() {
        assert!(Elf::parse(b"#!/bin/sh\n").is_err());
        let mut elf32 = build(&[], &[]);
        elf32[4] = 1;
        assert!(Elf::parse(&elf32).is_err());
        let mut bad = build(&[(".modinfo", b"x=y\0")], &[]);
        // Make .modinfo (section 1) claim to run past the end of the file.
        let shoff = u64::from_le_bytes(bad[0x28..0x30].try_into().unwrap()) as usize;
        bad[shoff + 64 + 32..shoff + 64 + 40].copy_from_slice(&1_000_000u64.to_le_bytes());
        let e = Elf::parse(&bad).unwrap();
        assert!(
            e.section(".modinfo")
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
        // Section headers cut off entirely.
        let cut = &bad[..shoff + 10];
        assert!(Elf::parse(cut).unwrap().section(".modinfo").is_err());
    }
}
