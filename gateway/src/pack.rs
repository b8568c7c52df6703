//! The commits inside a pushed pack (gitformat-pack), read once from the
//! spooled push to tell a fast-forward without fetching the upstream: the
//! commits are inflated and hashed here (their ids computed, never taken
//! from the pack), deltas onto commits applied, every other object inflated
//! only to find where the next one starts. Walking parents from the new tip
//! proves a fast-forward when it reaches the old tip, and proves a force
//! push when every ancestor is inside the pack and the old tip is not among
//! them; a walk that leaves the pack's commits decides nothing (the caller
//! asks the mirror then).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;

use miniz_oxide::inflate::stream::{InflateState, MinReset, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};
use ring::digest;

/// The largest commit kept (a larger one is left out: walks through it
/// decide nothing).
const MAX_COMMIT: usize = 1 << 20;

/// The most commit text kept in all (for deltas onto commits).
const MAX_KEPT: usize = 64 << 20;

/// The object ids' hash: SHA-1, or SHA-256 for `object-format=sha256`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Sha1,
    Sha256,
}

impl Format {
    fn len(self) -> usize {
        match self {
            Format::Sha1 => 20,
            Format::Sha256 => 32,
        }
    }

    fn hash(self, kind: &str, content: &[u8]) -> Vec<u8> {
        let algorithm = match self {
            Format::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            Format::Sha256 => &digest::SHA256,
        };
        let mut context = digest::Context::new(algorithm);
        context.update(format!("{kind} {}\0", content.len()).as_bytes());
        context.update(content);
        context.finish().as_ref().to_vec()
    }
}

/// What a walk from the new tip found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ancestry {
    /// The old tip is an ancestor of the new one.
    FastForward,
    /// Every ancestor of the new tip is in the pack, the old tip not.
    Forced,
    /// The walk left the pack (or the new tip is not in it).
    Unknown,
}

/// The pack's commits: id → parents.
#[derive(Debug, Default)]
pub struct Commits {
    parents: HashMap<Vec<u8>, Vec<Vec<u8>>>,
}

impl Commits {
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }

    /// Whether `old` is an ancestor of `new` (hex ids), as far as the pack
    /// tells.
    pub fn ancestry(&self, old: &str, new: &str) -> Ancestry {
        let (Some(old), Some(new)) = (unhex(old), unhex(new)) else {
            return Ancestry::Unknown;
        };
        if !self.parents.contains_key(&new) {
            return Ancestry::Unknown;
        }
        let mut seen = HashSet::new();
        let mut queue = VecDeque::from([new]);
        let mut left = false;
        while let Some(id) = queue.pop_front() {
            let Some(parents) = self.parents.get(&id) else {
                left = true;
                continue;
            };
            for parent in parents {
                if *parent == old {
                    return Ancestry::FastForward;
                }
                if seen.insert(parent.clone()) {
                    queue.push_back(parent.clone());
                }
            }
        }
        if left {
            Ancestry::Unknown
        } else {
            Ancestry::Forced
        }
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A malformed pack, with the byte offset.
#[derive(Debug, thiserror::Error)]
#[error("the pushed pack at byte {offset}: {problem}")]
pub struct PackError {
    pub offset: u64,
    pub problem: String,
}

/// Buffered input that counts the bytes taken.
struct Input<R> {
    reader: R,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    offset: u64,
}

impl<R: Read> Input<R> {
    fn bad(&self, problem: impl Into<String>) -> PackError {
        PackError {
            offset: self.offset,
            problem: problem.into(),
        }
    }

    /// Reads more; false at the end of input.
    fn fill(&mut self) -> Result<bool, PackError> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let n = self
            .reader
            .read(&mut self.buf[self.end..])
            .map_err(|e| self.bad(e.to_string()))?;
        self.end += n;
        Ok(n > 0)
    }

    fn byte(&mut self) -> Result<u8, PackError> {
        if self.start == self.end && !self.fill()? {
            return Err(self.bad("the pack ends early"));
        }
        let b = self.buf[self.start];
        self.start += 1;
        self.offset += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Result<Vec<u8>, PackError> {
        (0..n).map(|_| self.byte()).collect()
    }

    /// Inflates one zlib stream; its output kept (up to `keep` bytes:
    /// `None` when it was longer) or dropped.
    fn inflate(
        &mut self,
        state: &mut InflateState,
        out: &mut [u8],
        keep: usize,
    ) -> Result<Option<Vec<u8>>, PackError> {
        state.reset_as(MinReset);
        let mut kept = Some(Vec::new());
        loop {
            if self.start == self.end && !self.fill()? {
                return Err(self.bad("the pack ends inside an object"));
            }
            let result = inflate(state, &self.buf[self.start..self.end], out, MZFlush::None);
            self.start += result.bytes_consumed;
            self.offset += result.bytes_consumed as u64;
            if let Some(k) = &mut kept {
                if k.len() + result.bytes_written > keep {
                    kept = None;
                } else {
                    k.extend_from_slice(&out[..result.bytes_written]);
                }
            }
            match result.status {
                Ok(MZStatus::StreamEnd) => return Ok(kept),
                Ok(_) => {}
                Err(MZError::Buf) if result.bytes_consumed == 0 && result.bytes_written == 0 => {
                    if !self.fill()? {
                        return Err(self.bad("the pack ends inside an object"));
                    }
                }
                Err(e) => return Err(self.bad(format!("inflating: {e:?}"))),
            }
        }
    }
}

/// What an earlier entry of the pack was, for deltas onto it.
enum Entry {
    /// A commit: its id.
    Commit(Vec<u8>),
    /// Anything else, or a delta not resolved.
    Other,
}

/// Reads the pack from `reader` (`PACK`, version, count, the entries; the
/// trailing checksum is the upstream's to verify) and returns its commits.
/// `enough` is asked each time the commits are followed by another object
/// (git writes a push's commits first): when it says the commits read so far
/// tell all it needs, the rest is not read.
pub fn commits(
    reader: impl Read,
    format: Format,
    enough: impl Fn(&Commits) -> bool,
) -> Result<Commits, PackError> {
    let mut input = Input {
        reader,
        buf: vec![0; 64 << 10],
        start: 0,
        end: 0,
        offset: 0,
    };
    let head = input.bytes(12)?;
    if &head[..4] != b"PACK" {
        return Err(input.bad("no PACK signature"));
    }
    let version = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if version != 2 && version != 3 {
        return Err(input.bad(format!("version {version}")));
    }
    let count = u32::from_be_bytes([head[8], head[9], head[10], head[11]]);
    let mut state = InflateState::new_boxed(DataFormat::Zlib);
    let mut out = vec![0u8; 32 << 10];
    let mut entries: HashMap<u64, Entry> = HashMap::new();
    let mut texts: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    let mut kept = 0usize;
    let mut found = Commits::default();
    let mut last = 0;
    let mut next_check = 1;
    for _ in 0..count {
        let at = input.offset;
        let mut c = input.byte()?;
        let kind = (c >> 4) & 7;
        let mut size = u64::from(c & 15);
        let mut shift = 4;
        while c & 0x80 != 0 {
            c = input.byte()?;
            if shift > 60 {
                return Err(input.bad("an object size over 64 bits"));
            }
            size |= u64::from(c & 0x7f) << shift;
            shift += 7;
        }
        // The text of the base a delta applies to, when it is a commit.
        let base = match kind {
            6 => {
                let mut c = input.byte()?;
                let mut back = u64::from(c & 0x7f);
                while c & 0x80 != 0 {
                    c = input.byte()?;
                    back = ((back + 1) << 7) | u64::from(c & 0x7f);
                }
                match at.checked_sub(back).and_then(|o| entries.get(&o)) {
                    Some(Entry::Commit(id)) => texts.get(id).cloned(),
                    _ => None,
                }
            }
            7 => {
                let id = input.bytes(format.len())?;
                texts.get(&id).cloned()
            }
            1..=4 => None,
            _ => return Err(input.bad(format!("object type {kind}"))),
        };
        let wanted = kind == 1 || base.is_some();
        let keep = if wanted && size <= MAX_COMMIT as u64 {
            MAX_COMMIT
        } else {
            0
        };
        let data = input.inflate(&mut state, &mut out, keep)?;
        let text = match (kind, data, base) {
            (1, Some(text), _) => Some(text),
            (6 | 7, Some(delta), Some(base)) => {
                Some(apply(&base, &delta).map_err(|p| PackError {
                    offset: at,
                    problem: p,
                })?)
            }
            _ => None,
        };
        let entry = match text {
            Some(text) if text.len() <= MAX_COMMIT => {
                let id = format.hash("commit", &text);
                found
                    .parents
                    .insert(id.clone(), parents(&text, format.len()));
                if kept + text.len() <= MAX_KEPT {
                    kept += text.len();
                    texts.insert(id.clone(), text);
                }
                Entry::Commit(id)
            }
            _ => Entry::Other,
        };
        // Asked again only once the commits have doubled: a pack that mixes
        // commits with other objects costs linear time, not quadratic.
        let after_commits = matches!(entries.get(&last), Some(Entry::Commit(_)));
        if matches!(entry, Entry::Other) && after_commits && found.len() >= next_check {
            next_check = found.len() * 2;
            if enough(&found) {
                return Ok(found);
            }
        }
        last = at;
        entries.insert(at, entry);
    }
    // The checksum follows: a pack that ends before it was misread.
    input.bytes(format.len())?;
    Ok(found)
}

/// The `parent` lines of a commit's header.
fn parents(text: &[u8], len: usize) -> Vec<Vec<u8>> {
    text.split(|&b| b == b'\n')
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.strip_prefix(b"parent "))
        .filter_map(|hex| unhex(std::str::from_utf8(hex).ok()?))
        .filter(|id| id.len() == len)
        .collect()
}

/// A git delta (two sizes, then copy and insert instructions) applied to
/// `base`.
fn apply(base: &[u8], delta: &[u8]) -> Result<Vec<u8>, String> {
    let mut at = 0;
    let varint = |at: &mut usize| -> Result<usize, String> {
        let mut value = 0usize;
        let mut shift = 0;
        loop {
            let b = *delta.get(*at).ok_or("a delta ends in its sizes")?;
            *at += 1;
            if shift > 56 {
                return Err("a delta size over 64 bits".into());
            }
            value |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
    };
    let (from, to) = (varint(&mut at)?, varint(&mut at)?);
    if from != base.len() {
        return Err(format!("a delta for {from} bytes onto {}", base.len()));
    }
    if to > MAX_COMMIT {
        return Err("a delta onto a commit makes a commit too long".into());
    }
    let mut out = Vec::with_capacity(to);
    while let Some(&cmd) = delta.get(at) {
        at += 1;
        if cmd & 0x80 != 0 {
            let mut field = |bits: u8, bytes: usize| -> Result<usize, String> {
                let mut value = 0usize;
                for i in 0..bytes {
                    if bits & (1 << i) != 0 {
                        let b = *delta.get(at).ok_or("a delta ends in a copy")?;
                        at += 1;
                        value |= usize::from(b) << (8 * i);
                    }
                }
                Ok(value)
            };
            let offset = field(cmd & 15, 4)?;
            let size = match field((cmd >> 4) & 7, 3)? {
                0 => 0x10000,
                n => n,
            };
            let piece = offset
                .checked_add(size)
                .and_then(|end| base.get(offset..end))
                .ok_or("a delta copies outside its base")?;
            out.extend_from_slice(piece);
        } else if cmd != 0 {
            let piece = delta
                .get(at..at + usize::from(cmd))
                .ok_or("a delta ends in an insert")?;
            at += usize::from(cmd);
            out.extend_from_slice(piece);
        } else {
            return Err("a delta's reserved instruction 0".into());
        }
        if out.len() > to {
            return Err("a delta makes more than it says".into());
        }
    }
    if out.len() != to {
        return Err(format!("a delta made {} bytes, not {to}", out.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_copy_and_insert() {
        let base = b"tree x\nparent y\n\nhello";
        // sizes 22 → 9; copy 5 bytes at 17 ("hello"), insert " you".
        let mut delta = vec![22, 9, 0x80 | 0x01 | 0x10, 17, 5, 4];
        delta.extend_from_slice(b" you");
        assert_eq!(apply(base, &delta).unwrap(), b"hello you");
        assert!(apply(base, &[21, 1, 1, b'x']).is_err(), "wrong base size");
        assert!(apply(base, &[22, 1, 0x91, 30, 5]).is_err(), "outside");
        assert!(apply(base, &[22, 1, 0]).is_err(), "reserved");
    }

    #[test]
    fn parents_come_from_the_header_only() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let text = format!("tree {a}\nparent {a}\nparent {b}\nauthor x\n\nparent {b}\n");
        let found = parents(text.as_bytes(), 20);
        assert_eq!(found, [unhex(&a).unwrap(), unhex(&b).unwrap()]);
    }

    fn git(dir: &std::path::Path, args: &[&str], input: Option<&str>) -> Vec<u8> {
        use std::io::Write as _;
        let mut child = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@example.com")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@example.com")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.unwrap_or_default().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        out.stdout
    }

    /// Real packs from git: commits with long, nearly equal messages (so
    /// that pack-objects stores some as deltas onto others), thin against
    /// the old tip as a push sends them.
    #[test]
    fn a_real_thin_pack_tells_fast_forwards_and_force_pushes() {
        let tmp = std::env::temp_dir().join(format!("gw-pack-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        git(&tmp, &["init", "-q", "-b", "main"], None);
        let message = "a long message repeated so that commits delta well\n".repeat(40);
        let mut tips = Vec::new();
        for i in 0..30 {
            std::fs::write(tmp.join("f"), format!("{i}\n").repeat(1000)).unwrap();
            git(&tmp, &["add", "f"], None);
            git(
                &tmp,
                &["commit", "-q", "-m", &format!("{message}{i}")],
                None,
            );
            let id = git(&tmp, &["rev-parse", "HEAD"], None);
            tips.push(String::from_utf8(id).unwrap().trim().to_owned());
        }
        let (old, new) = (&tips[9], &tips[29]);
        let pack = git(
            &tmp,
            &[
                "pack-objects",
                "--revs",
                "--thin",
                "--stdout",
                "--window=50",
                "-q",
            ],
            Some(&format!("{new}\n^{old}\n")),
        );
        let found = commits(&pack[..], Format::Sha1, |_| false).unwrap();
        assert_eq!(found.len(), 20);
        let enough = |c: &Commits| c.ancestry(old, new) == Ancestry::FastForward;
        let early = commits(&pack[..pack.len() - 30], Format::Sha1, enough).unwrap();
        assert_eq!(early.ancestry(old, new), Ancestry::FastForward);
        assert_eq!(found.ancestry(old, new), Ancestry::FastForward);
        assert_eq!(found.ancestry(&tips[29], &tips[28]), Ancestry::Unknown);
        // A commit of its own (no parent): a force push, told from the pack.
        git(&tmp, &["checkout", "-q", "--orphan", "other"], None);
        git(&tmp, &["commit", "-q", "-m", "root"], None);
        let root = String::from_utf8(git(&tmp, &["rev-parse", "HEAD"], None)).unwrap();
        let root = root.trim();
        let pack = git(
            &tmp,
            &["pack-objects", "--revs", "--thin", "--stdout", "-q"],
            Some(&format!("{root}\n^{old}\n")),
        );
        let found = commits(&pack[..], Format::Sha1, |_| false).unwrap();
        assert_eq!(found.ancestry(old, root), Ancestry::Forced);
        assert!(commits(&pack[..pack.len() - 30], Format::Sha1, |_| false).is_err());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn a_walk_that_leaves_the_pack_decides_nothing() {
        let id = |c: char| unhex(&c.to_string().repeat(40)).unwrap();
        let mut commits = Commits::default();
        commits.parents.insert(id('c'), vec![id('b')]);
        commits.parents.insert(id('b'), vec![id('a')]);
        commits.parents.insert(id('7'), vec![]);
        let hex = |c: char| c.to_string().repeat(40);
        assert_eq!(
            commits.ancestry(&hex('a'), &hex('c')),
            Ancestry::FastForward
        );
        assert_eq!(commits.ancestry(&hex('9'), &hex('c')), Ancestry::Unknown);
        assert_eq!(commits.ancestry(&hex('9'), &hex('7')), Ancestry::Forced);
        assert_eq!(commits.ancestry(&hex('a'), &hex('8')), Ancestry::Unknown);
    }
}
