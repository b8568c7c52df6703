//! Getting the ELF `vmlinux` out of Debian's bzImage. Booting the vmlinux
//! through its PVH note skips the in-guest decompressor, which costs seconds
//! for the generic kernel's XZ payload under TCG (docs/research/microvm.md §2).

use crate::elf::{Elf, ElfError};

/// What the XZ decoder returns when it fails: its own error, whatever it is.
pub type DecompressError = Box<dyn std::error::Error + Send + Sync>;

/// Why no bootable vmlinux came out of a bzImage.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("the bzImage has no XZ payload (is this kernel compressed with another method?)")]
    NoXzPayload,
    #[error("XZ stream at offset {at}")]
    Decompress {
        at: usize,
        #[source]
        source: DecompressError,
    },
    #[error("XZ stream at offset {at} is not the kernel")]
    NotKernel {
        at: usize,
        #[source]
        source: ElfError,
    },
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error(
        "the vmlinux (XZ stream at offset {at}) has no Xen PVH note, so QEMU's -kernel cannot boot it; \
         this kernel was built without CONFIG_PVH"
    )]
    NoPvhNote { at: usize },
}

/// The XZ stream header magic.
pub const XZ_MAGIC: &[u8] = b"\xFD7zXZ\x00";

/// Offsets of every XZ magic in `data`, in order.
pub fn xz_offsets(data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    data.windows(XZ_MAGIC.len())
        .enumerate()
        .filter(|(_, w)| *w == XZ_MAGIC)
        .map(|(i, _)| i)
}

/// The vmlinux inside a bzImage: the first XZ stream that decompresses to
/// an ELF with the Xen PVH note. `decompress` is the XZ decoder (the `xz`
/// tool in the build; a fake in tests).
pub fn vmlinux_from_bzimage(
    bzimage: &[u8],
    mut decompress: impl FnMut(&[u8]) -> Result<Vec<u8>, DecompressError>,
) -> Result<Vec<u8>, KernelError> {
    let mut last_err = KernelError::NoXzPayload;
    for at in xz_offsets(bzimage) {
        let out = match decompress(&bzimage[at..]) {
            Ok(out) => out,
            Err(source) => {
                last_err = KernelError::Decompress { at, source };
                continue;
            }
        };
        let elf = match Elf::parse(&out) {
            Ok(elf) => elf,
            Err(source) => {
                last_err = KernelError::NotKernel { at, source };
                continue;
            }
        };
        if !elf.has_pvh_note()? {
            return Err(KernelError::NoPvhNote { at });
        }
        return Ok(out);
    }
    Err(last_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_all_magics() {
        let mut data = b"MZ....".to_vec();
        data.extend_from_slice(XZ_MAGIC);
        data.extend_from_slice(b"junk");
        data.extend_from_slice(XZ_MAGIC);
        assert_eq!(xz_offsets(&data).collect::<Vec<_>>(), [6, 16]);
    }

    fn pvh_elf() -> Vec<u8> {
        let mut note = Vec::new();
        for w in [4u32, 4, 18] {
            note.extend_from_slice(&w.to_le_bytes());
        }
        note.extend_from_slice(b"Xen\0\0\0\0\x01");
        crate::elf::tests::build(&[], &[(4, &note)])
    }

    #[test]
    fn skips_streams_that_are_not_the_kernel() {
        let mut bz = b"setup".to_vec();
        bz.extend_from_slice(XZ_MAGIC);
        bz.push(1);
        bz.extend_from_slice(XZ_MAGIC);
        bz.push(2);
        let elf = pvh_elf();
        let got = vmlinux_from_bzimage(&bz, |s| match s[6] {
            1 => Ok(b"not elf".to_vec()),
            _ => Ok(elf.clone()),
        })
        .unwrap();
        assert_eq!(got, elf);
    }

    #[test]
    fn explains_failures() {
        let text = |e: KernelError| crate::error_chain(&e);
        let err = text(vmlinux_from_bzimage(b"no payload", |_| unreachable!()).unwrap_err());
        assert!(err.contains("no XZ payload"), "{err}");
        let no_pvh = crate::elf::tests::build(&[], &[]);
        let err = text(vmlinux_from_bzimage(XZ_MAGIC, |_| Ok(no_pvh.clone())).unwrap_err());
        assert!(err.contains("PVH"), "{err}");
        let err = text(vmlinux_from_bzimage(XZ_MAGIC, |_| Err("corrupt".into())).unwrap_err());
        assert!(err.contains("corrupt"), "{err}");
    }
}
