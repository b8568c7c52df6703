//! The operations: each resolves beneath a root ([`super::resolve`]),
//! judges the canonical path and the identity of what it found, and acts
//! on the descriptor or the final name it judged.

use std::ffi::{CStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::error::{JailError, Op, rule};
use super::form;
use super::resolve::{Target, denied, io_error};
use super::{Jail, JailPath, sys};

/// How many times an operation starts again when the name it judged
/// changed under it (created, removed) before it could act.
const RETRIES: usize = 8;

/// What a directory entry is (symlinks not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    pub(super) fn from_dtype(d_type: sys::DType) -> Option<Self> {
        match d_type {
            libc::DT_REG => Some(Self::File),
            libc::DT_DIR => Some(Self::Dir),
            libc::DT_LNK => Some(Self::Symlink),
            libc::DT_UNKNOWN => None,
            _ => Some(Self::Other),
        }
    }

    pub(super) fn from_stat(st: &libc::stat) -> Self {
        match sys::file_type(st) {
            libc::S_IFREG => Self::File,
            libc::S_IFDIR => Self::Dir,
            libc::S_IFLNK => Self::Symlink,
            _ => Self::Other,
        }
    }
}

/// One entry of [`Jail::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// Its name in the directory.
    pub name: OsString,
    /// What it is.
    pub kind: EntryKind,
}

fn os_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

impl Jail {
    /// Opens a regular file for reading. Symlinks are followed while they
    /// stay beneath the root. Refused: secrets, FIFOs, sockets and devices
    /// (never opened, so never blocked on), and files with more than one
    /// name (another may lie outside every root).
    pub fn open_read(&self, p: &JailPath) -> Result<File, JailError> {
        let w = self.whole(Op::Read, p, 0)?;
        self.readable_file(Op::Read, &w.given, &w.path, &w.fd)
    }

    /// Reads a whole regular file, as [`Jail::open_read`] allows.
    pub fn read(&self, p: &JailPath) -> Result<Vec<u8>, JailError> {
        let mut file = self.open_read(p)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)
            .map_err(|e| io_error(Op::Read, &self.shown(p), e))?;
        Ok(data)
    }

    /// The entries of a directory (symlinks followed to it while beneath
    /// the root; the entries' own symlinks not followed).
    pub fn list(&self, p: &JailPath) -> Result<Vec<ListEntry>, JailError> {
        let op = Op::List;
        let w = self.whole(op, p, libc::O_DIRECTORY)?;
        self.check_secret(op, &w.given, &w.path)?;
        let names = sys::read_names(w.fd.as_fd()).map_err(|e| io_error(op, &w.given, e))?;
        let mut entries = Vec::with_capacity(names.len());
        for (name, d_type) in names {
            let kind = match EntryKind::from_dtype(d_type) {
                Some(kind) => kind,
                None => {
                    let c = sys::c_path(&name).map_err(|e| io_error(op, &w.given, e))?;
                    match sys::lstat_at(w.fd.as_fd(), &c).map_err(|e| io_error(op, &w.given, e))? {
                        Some(st) => EntryKind::from_stat(&st),
                        None => continue,
                    }
                }
            };
            entries.push(ListEntry { name, kind });
        }
        Ok(entries)
    }

    /// The metadata of a path: of a final symlink itself unless `follow`
    /// (then of what it leads to, while beneath the root).
    pub fn stat(&self, p: &JailPath, follow: bool) -> Result<Metadata, JailError> {
        let op = Op::Stat;
        let flags = if follow { 0 } else { libc::O_NOFOLLOW };
        let w = self.whole(op, p, flags)?;
        self.check_secret(op, &w.given, &w.path)?;
        File::from(w.fd)
            .metadata()
            .map_err(|e| io_error(op, &w.given, e))
    }

    /// Opens a file for writing: a new one (as the create-time rules
    /// allow), or an existing regular file truncated — only after its
    /// identity was judged through the descriptor that truncates it. The
    /// final name is never followed.
    pub fn create(&self, p: &JailPath) -> Result<File, JailError> {
        let op = Op::Write;
        for _ in 0..RETRIES {
            let t = self.target(op, p)?;
            self.check_writable(op, &t)?;
            match self.lstat(op, &t)? {
                None => {
                    self.by_rules(op, &t, self.rules.check_create(&t.path), "creating")?;
                    match sys::openat(
                        t.parent.as_fd(),
                        &t.name,
                        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                        0o666,
                    ) {
                        Ok(fd) => return Ok(File::from(fd)),
                        // Made meanwhile: judge what is there now.
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                        Err(e) => return Err(io_error(op, &t.given, e)),
                    }
                }
                Some(st) => {
                    self.regular_for_change(op, &t, &st)?;
                    self.by_rules(op, &t, self.rules.check_name(&t.path), "changing")?;
                    let Some(fd) = self.open_name(op, &t)? else {
                        continue;
                    };
                    let file = self.writable_file(op, &t, &fd)?;
                    file.set_len(0).map_err(|e| io_error(op, &t.given, e))?;
                    return Ok(file);
                }
            }
        }
        Err(self.kept_changing(op, p))
    }

    /// Writes `data` as the whole content of a file, as [`Jail::create`]
    /// allows.
    pub fn write(&self, p: &JailPath, data: &[u8]) -> Result<(), JailError> {
        let mut file = self.create(p)?;
        file.write_all(data)
            .map_err(|e| io_error(Op::Write, &self.shown(p), e))
    }

    /// Makes a directory (mode 0777 less the umask).
    pub fn mkdir(&self, p: &JailPath) -> Result<(), JailError> {
        let op = Op::Mkdir;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        if self.lstat(op, &t)?.is_some() {
            return Err(io_error(op, &t.given, os_error(libc::EEXIST)));
        }
        self.by_rules(op, &t, self.rules.check_mkdir(&t.path), "creating")?;
        sys::mkdirat(t.parent.as_fd(), &t.name, 0o777).map_err(|e| io_error(op, &t.given, e))
    }

    /// Removes a name that is not a directory (a symlink itself, never
    /// what it leads to).
    pub fn unlink(&self, p: &JailPath) -> Result<(), JailError> {
        let op = Op::Unlink;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        let st = self
            .lstat(op, &t)?
            .ok_or_else(|| io_error(op, &t.given, os_error(libc::ENOENT)))?;
        if sys::file_type(&st) == libc::S_IFDIR {
            return Err(io_error(op, &t.given, os_error(libc::EISDIR)));
        }
        self.check_removal(op, &t.given, &t.path, &st)?;
        sys::unlinkat(t.parent.as_fd(), &t.name, 0).map_err(|e| io_error(op, &t.given, e))
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, p: &JailPath) -> Result<(), JailError> {
        let op = Op::Rmdir;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        let st = self
            .lstat(op, &t)?
            .ok_or_else(|| io_error(op, &t.given, os_error(libc::ENOENT)))?;
        if sys::file_type(&st) != libc::S_IFDIR {
            return Err(io_error(op, &t.given, os_error(libc::ENOTDIR)));
        }
        self.check_removal(op, &t.given, &t.path, &st)?;
        sys::unlinkat(t.parent.as_fd(), &t.name, libc::AT_REMOVEDIR)
            .map_err(|e| io_error(op, &t.given, e))
    }

    /// Moves `from` to `to` (in the same root or another; the kernel
    /// refuses across filesystems), replacing what `to` names. Judged as
    /// the create-time guard judges `rename`: moving a protected name or a
    /// directory protected names live in away, onto such a name, or a
    /// directory into an existing repository from outside it, is refused.
    pub fn rename(&self, from: &JailPath, to: &JailPath) -> Result<(), JailError> {
        let op = Op::Rename;
        let f = self.target(op, from)?;
        self.check_writable(op, &f)?;
        let t = self.target(op, to)?;
        self.check_writable(op, &t)?;
        let source = self
            .lstat(op, &f)?
            .ok_or_else(|| io_error(op, &f.given, os_error(libc::ENOENT)))?;
        self.check_removal(op, &f.given, &f.path, &source)?;
        match self.lstat(op, &t)? {
            Some(existing) => self.check_removal(op, &t.given, &t.path, &existing)?,
            None => self.by_rules(
                op,
                &t,
                self.rules
                    .check_create(&t.path)
                    .or_else(|| self.rules.check_structure_of_new(&t.path)),
                "creating",
            )?,
        }
        if sys::file_type(&source) == libc::S_IFDIR {
            self.by_rules(
                op,
                &t,
                self.rules.check_move_into_repository(&f.path, &t.path),
                "moving a directory to",
            )?;
        }
        sys::renameat(f.parent.as_fd(), &f.name, t.parent.as_fd(), &t.name)
            .map_err(|e| io_error(op, &f.given, e))
    }

    /// Gives the regular file `from` a second name `to`. Refused for a
    /// protected file (a writable alias of it); the file linked is the one
    /// judged, held by its descriptor. A source that already has several
    /// names is refused too, and note that the file linked then has two,
    /// which [`Jail::open_read`] refuses.
    pub fn link(&self, from: &JailPath, to: &JailPath) -> Result<(), JailError> {
        let op = Op::Link;
        let f = self.target(op, from)?;
        self.check_writable(op, &f)?;
        let t = self.target(op, to)?;
        self.check_writable(op, &t)?;
        let fd = self
            .open_name(op, &f)?
            .ok_or_else(|| io_error(op, &f.given, os_error(libc::ENOENT)))?;
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_error(op, &f.given, e))?;
        match sys::file_type(&st) {
            libc::S_IFREG => {}
            libc::S_IFLNK => return Err(self.final_symlink(op, &f.given, &f.path)),
            libc::S_IFDIR => return Err(io_error(op, &f.given, os_error(libc::EPERM))),
            _ => return Err(self.not_regular(op, &f.given, &f.path)),
        }
        self.by_rules(op, &f, self.rules.check_name(&f.path), "linking")?;
        self.check_identity(op, &f.given, &f.path, &st)?;
        if st.st_nlink > 1 {
            // Another name would change a file whose names may lie outside.
            return Err(self.hard_linked(op, &f.given, &f.path));
        }
        if self.lstat(op, &t)?.is_some() {
            return Err(io_error(op, &t.given, os_error(libc::EEXIST)));
        }
        self.by_rules(op, &t, self.rules.check_create(&t.path), "creating")?;
        sys::link_fd(fd.as_fd(), t.parent.as_fd(), &t.name).map_err(|e| io_error(op, &t.given, e))
    }

    /// Sets the permission bits (0o777 at most) of a file or directory,
    /// never through a final symlink. Refused: setuid, setgid and sticky
    /// bits; an execute bit added below a git hooks directory.
    pub fn chmod(&self, p: &JailPath, mode: u32) -> Result<(), JailError> {
        let op = Op::Chmod;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        if mode & !0o777 != 0 {
            return Err(denied(
                op,
                &t.given,
                Some(&t.path),
                rule::SPECIAL_MODE_BITS,
                format!(
                    "mode {mode:o} asks for setuid, setgid or sticky: a setuid file the \
                     server made would run with its rights"
                ),
                Some("set the permission bits (0o777) only"),
            ));
        }
        let fd = self
            .open_name(op, &t)?
            .ok_or_else(|| io_error(op, &t.given, os_error(libc::ENOENT)))?;
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_error(op, &t.given, e))?;
        let kind = sys::file_type(&st);
        if kind == libc::S_IFLNK {
            return Err(self.final_symlink(op, &t.given, &t.path));
        }
        if kind != libc::S_IFDIR
            && form::adds_exec(st.st_mode, mode)
            && form::under_git_hooks(&t.path)
        {
            return Err(denied(
                op,
                &t.given,
                Some(&t.path),
                rule::HOOKS_EXEC,
                "an executable file below a git hooks directory runs at the host's next git \
                 command",
                None,
            ));
        }
        self.by_rules(op, &t, self.rules.check_name(&t.path), "changing")?;
        self.check_identity(op, &t.given, &t.path, &st)?;
        if kind == libc::S_IFREG && st.st_nlink > 1 {
            return Err(self.hard_linked(op, &t.given, &t.path));
        }
        sys::chmod_fd(fd.as_fd(), mode).map_err(|e| io_error(op, &t.given, e))
    }

    /// Judges a change of `p` — replacing or creating it as
    /// [`Jail::replace_atomically`] would, or removing it when `remove` —
    /// without making it: for a front-end that classifies an action before
    /// it asks anyone about it (SPEC H4). The change judges again when it
    /// is made; this answer is advice, the change's is the rule.
    pub fn judge_change(&self, p: &JailPath, remove: bool) -> Result<(), JailError> {
        let op = if remove { Op::Unlink } else { Op::Replace };
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        match self.lstat(op, &t)? {
            Some(st) if remove => self.check_removal(op, &t.given, &t.path, &st),
            Some(st) => {
                self.regular_for_change(op, &t, &st)?;
                self.by_rules(op, &t, self.rules.check_name(&t.path), "replacing")?;
                self.check_identity(op, &t.given, &t.path, &st)
            }
            None if remove => Err(io_error(op, &t.given, os_error(libc::ENOENT))),
            None => self.by_rules(op, &t, self.rules.check_create(&t.path), "creating"),
        }
    }

    /// Replaces a file's content all at once: `data` goes to a new file in
    /// the same directory (its name checked by the rules too), is synced,
    /// and renamed over the target, so a reader sees the old content or
    /// the new, never part. An existing target keeps its permission bits
    /// (and owner, where the server may set it); the target's other hard
    /// links, if any, keep the old content.
    pub fn replace_atomically(&self, p: &JailPath, data: &[u8]) -> Result<(), JailError> {
        let op = Op::Replace;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        let existing = self.lstat(op, &t)?;
        match &existing {
            Some(st) => {
                self.regular_for_change(op, &t, st)?;
                self.by_rules(op, &t, self.rules.check_name(&t.path), "replacing")?;
                self.check_identity(op, &t.given, &t.path, st)?;
            }
            None => self.by_rules(op, &t, self.rules.check_create(&t.path), "creating")?,
        }
        let dir = t.path.parent().unwrap_or(Path::new("/"));
        for _ in 0..RETRIES {
            let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
            let temp = form::temp_name(std::process::id(), n);
            let temp_path = dir.join(&temp);
            if let Some(refusal) = self.rules.check_create(&temp_path) {
                return Err(self.rule_denial(op, &t.given, &temp_path, refusal, "creating"));
            }
            let c_temp = sys::c_path(&temp).map_err(|e| io_error(op, &t.given, e))?;
            // New: the umask decides, as for `create`; replacing: the old bits, set below.
            let mode = if existing.is_some() { 0o600 } else { 0o666 };
            let fd = match sys::openat(
                t.parent.as_fd(),
                &c_temp,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                mode,
            ) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(io_error(op, &t.given, e)),
            };
            let done = fill_and_rename(File::from(fd), existing.as_ref(), data, &t, &c_temp);
            if let Err(e) = done {
                // Ours, by the name we made it under in the directory we hold.
                let _ = sys::unlinkat(t.parent.as_fd(), &c_temp, 0);
                return Err(io_error(op, &t.given, e));
            }
            return sys::sync_dir(t.parent.as_fd()).map_err(|e| io_error(op, &t.given, e));
        }
        Err(self.kept_changing(op, p))
    }
}

/// Gives the temporary file the old file's owner and bits, fills and
/// syncs it, and renames it over the target.
fn fill_and_rename(
    mut file: File,
    existing: Option<&libc::stat>,
    data: &[u8],
    t: &Target,
    temp: &CStr,
) -> io::Result<()> {
    if let Some(st) = existing {
        let (uid, gid) = sys::effective_ids();
        if (st.st_uid, st.st_gid) != (uid, gid) {
            // Best effort: where the server may not, the file is the
            // server's, as any file it creates.
            let _ = sys::fchown(&file, st.st_uid, st.st_gid);
        }
        sys::fchmod(&file, st.st_mode & 0o777)?;
    }
    file.write_all(data)?;
    file.sync_all()?;
    sys::renameat(t.parent.as_fd(), temp, t.parent.as_fd(), &t.name)
}

/// `name` in `dir` opened `O_PATH|O_NOFOLLOW`; `None` when absent.
pub(super) fn open_name_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<OwnedFd>> {
    match sys::openat(dir, name, libc::O_PATH | libc::O_NOFOLLOW, 0) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}
