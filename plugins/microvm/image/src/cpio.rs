//! A newc (`070701`) cpio writer: the format the kernel unpacks as an
//! initramfs. Written here because the whole job is ~100 lines and the
//! output must be byte-for-byte deterministic for the image id to be stable.
//!
//! Entries are kept sorted by path, so a directory always comes before what
//! it contains (a parent path is a prefix of its children), and every entry
//! has uid/gid 0, mtime 0 and an inode numbered by position.

use std::collections::BTreeMap;

/// One archive member. Paths are relative (`bin/busybox`), as the kernel
/// unpacks them relative to the initramfs root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A directory with its permission bits.
    Dir { mode: u32 },
    /// A regular file with its permission bits and contents.
    File { mode: u32, data: Vec<u8> },
    /// A symbolic link to `target`.
    Symlink { target: String },
}

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

/// Why an entry cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpioError {
    /// Empty, or with a `.`, `..` or empty component.
    #[error("cpio: bad path {path:?}")]
    BadPath { path: String },
    /// A directory over a file or symlink.
    #[error("cpio: {path} is already a file or symlink")]
    NotADir { path: String },
    /// A file or symlink over anything.
    #[error("cpio: {path} added twice")]
    Twice { path: String },
    /// A parent that is a file or symlink.
    #[error("cpio: {parent} is not a directory")]
    ParentNotADir { parent: String },
}

/// An in-memory archive, written out with [`Archive::to_bytes`].
#[derive(Default, Debug)]
pub struct Archive {
    entries: BTreeMap<String, Entry>,
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a directory (and its parents). Adding one twice is fine.
    pub fn dir(&mut self, path: &str, mode: u32) -> Result<(), CpioError> {
        let path = normalize(path)?;
        self.parents(&path)?;
        match self.entries.get(&path) {
            None => {
                self.entries.insert(path, Entry::Dir { mode });
                Ok(())
            }
            Some(Entry::Dir { .. }) => Ok(()),
            Some(_) => Err(CpioError::NotADir { path }),
        }
    }

    /// Adds a regular file; its parent directories are created with 0755.
    pub fn file(&mut self, path: &str, mode: u32, data: Vec<u8>) -> Result<(), CpioError> {
        self.leaf(path, Entry::File { mode, data })
    }

    /// Adds a symlink; its parent directories are created with 0755.
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), CpioError> {
        let target = target.to_string();
        self.leaf(path, Entry::Symlink { target })
    }

    /// The entries, sorted by path.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Entry)> {
        self.entries.iter().map(|(p, e)| (p.as_str(), e))
    }

    fn leaf(&mut self, path: &str, entry: Entry) -> Result<(), CpioError> {
        let path = normalize(path)?;
        self.parents(&path)?;
        if self.entries.contains_key(&path) {
            return Err(CpioError::Twice { path });
        }
        self.entries.insert(path, entry);
        Ok(())
    }

    fn parents(&mut self, path: &str) -> Result<(), CpioError> {
        let mut end = 0;
        while let Some(i) = path[end..].find('/') {
            let parent = &path[..end + i];
            match self.entries.get(parent) {
                None => {
                    self.entries
                        .insert(parent.to_string(), Entry::Dir { mode: 0o755 });
                }
                Some(Entry::Dir { .. }) => {}
                Some(_) => {
                    return Err(CpioError::ParentNotADir {
                        parent: parent.to_string(),
                    });
                }
            }
            end += i + 1;
        }
        Ok(())
    }

    /// The archive in newc format, ending with the `TRAILER!!!` entry.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (ino, (path, entry)) in (1u32..).zip(&self.entries) {
            let (mode, nlink, data): (u32, u32, &[u8]) = match entry {
                Entry::Dir { mode } => (S_IFDIR | (mode & 0o7777), 2, &[]),
                Entry::File { mode, data } => (S_IFREG | (mode & 0o7777), 1, data),
                Entry::Symlink { target } => (S_IFLNK | 0o777, 1, target.as_bytes()),
            };
            member(&mut out, ino, mode, nlink, path, data);
        }
        member(&mut out, 0, 0, 1, "TRAILER!!!", &[]);
        out
    }
}

/// Strips a leading `/` and refuses paths the kernel would mis-unpack.
fn normalize(path: &str) -> Result<String, CpioError> {
    let p = path.trim_start_matches('/');
    if p.is_empty() || p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(CpioError::BadPath {
            path: path.to_string(),
        });
    }
    Ok(p.to_string())
}

/// Appends one header + name + data, each padded to 4 bytes.
fn member(out: &mut Vec<u8>, ino: u32, mode: u32, nlink: u32, name: &str, data: &[u8]) {
    let namesize = name.len() + 1;
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime
        u32::try_from(data.len()).unwrap_or(u32::MAX),
        0, // devmajor
        0, // devminor
        0, // rdevmajor
        0, // rdevminor
        u32::try_from(namesize).unwrap_or(u32::MAX),
        0, // check
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08X}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One parsed member: (name, mode, nlink, data).
    type Parsed = (String, u32, u32, Vec<u8>);

    /// A strict reader for what we write: checks magic, field syntax,
    /// alignment and the trailer, independently of the writer's code.
    fn parse(bytes: &[u8]) -> Vec<Parsed> {
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(at % 4, 0, "header not 4-aligned at {at}");
            let h = &bytes[at..at + 110];
            assert_eq!(&h[..6], b"070701");
            let field = |i: usize| {
                let s = std::str::from_utf8(&h[6 + i * 8..14 + i * 8]).unwrap();
                assert!(s.bytes().all(|b| b.is_ascii_hexdigit()), "{s}");
                u32::from_str_radix(s, 16).unwrap()
            };
            let (mode, uid, gid, nlink, mtime) = (field(1), field(2), field(3), field(4), field(5));
            let (size, namesize) = (field(6) as usize, field(11) as usize);
            assert_eq!((uid, gid, mtime, field(12)), (0, 0, 0, 0));
            let name_at = at + 110;
            let name = &bytes[name_at..name_at + namesize];
            assert_eq!(name.last(), Some(&0), "name not NUL-terminated");
            let name = String::from_utf8(name[..namesize - 1].to_vec()).unwrap();
            let data_at = (name_at + namesize).next_multiple_of(4);
            assert!(bytes[name_at + namesize..data_at].iter().all(|&b| b == 0));
            let data = bytes[data_at..data_at + size].to_vec();
            at = (data_at + size).next_multiple_of(4);
            if name == "TRAILER!!!" {
                assert_eq!(at, bytes.len(), "bytes after the trailer");
                return out;
            }
            out.push((name, mode, nlink, data));
        }
    }

    #[test]
    fn writes_parseable_newc_with_parents_first() {
        let mut a = Archive::new();
        a.file("/init", 0o755, b"#!/bin/sh\n".to_vec()).unwrap();
        a.file("/lib/modules/x/kernel/a.ko", 0o644, vec![1, 2, 3])
            .unwrap();
        a.symlink("/bin/sh", "busybox").unwrap();
        a.file("/bin/busybox", 0o755, vec![0xAA; 5]).unwrap();
        a.dir("/proc", 0o555).unwrap();
        a.dir("/tmp", 0o1777).unwrap();
        let got = parse(&a.to_bytes());
        let names: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/busybox",
                "bin/sh",
                "init",
                "lib",
                "lib/modules",
                "lib/modules/x",
                "lib/modules/x/kernel",
                "lib/modules/x/kernel/a.ko",
                "proc",
                "tmp",
            ]
        );
        let by = |n: &str| got.iter().find(|e| e.0 == n).unwrap().clone();
        assert_eq!(by("init").1, 0o100_755);
        assert_eq!(by("init").3, b"#!/bin/sh\n");
        assert_eq!(by("bin/sh").1, 0o120_777);
        assert_eq!(by("bin/sh").3, b"busybox");
        assert_eq!(by("bin").1, 0o040_755);
        assert_eq!(by("bin").2, 2);
        assert_eq!(by("tmp").1, 0o041_777);
        assert_eq!(by("lib/modules/x/kernel/a.ko").3, [1, 2, 3]);
    }

    #[test]
    fn empty_archive_is_just_the_trailer() {
        let bytes = Archive::new().to_bytes();
        assert!(parse(&bytes).is_empty());
        // 110-byte header + 11-byte name, padded to 124.
        assert_eq!(bytes.len(), 124);
    }

    #[test]
    fn deterministic_regardless_of_insertion_order() {
        let mut a = Archive::new();
        a.file("b", 0o644, vec![1]).unwrap();
        a.file("a/c", 0o644, vec![2]).unwrap();
        let mut b = Archive::new();
        b.file("a/c", 0o644, vec![2]).unwrap();
        b.file("b", 0o644, vec![1]).unwrap();
        assert_eq!(a.to_bytes(), b.to_bytes());
    }

    #[test]
    fn refuses_conflicts_and_bad_paths() {
        let mut a = Archive::new();
        a.file("x", 0o644, vec![]).unwrap();
        assert!(a.file("x", 0o644, vec![]).is_err());
        assert!(a.file("x/y", 0o644, vec![]).is_err());
        assert!(a.dir("x", 0o755).is_err());
        assert!(a.file("../etc", 0o644, vec![]).is_err());
        assert!(a.file("/", 0o644, vec![]).is_err());
        assert!(a.dir("d", 0o755).is_ok());
        assert!(a.dir("d", 0o700).is_ok());
    }
}
