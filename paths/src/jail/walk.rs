//! Trees: a walk for search tools and a recursive removal. Each child
//! directory is opened relative to its parent's descriptor with
//! `O_NOFOLLOW|O_DIRECTORY`, never by resolving a path string again, so a
//! directory swapped for a symlink mid-walk is refused, not followed.

use std::ffi::{CStr, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{JailError, Op, rule};
use super::ops::{EntryKind, open_name_at};
use super::resolve::{denied, io_error};
use super::{Access, Jail, JailPath, sys};

/// How deep [`Jail::walk`] descends unless told otherwise.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// How deep [`Jail::remove_all`] descends: one descriptor per level.
const REMOVE_MAX_DEPTH: usize = 256;

/// One entry found by a [`Walk`]. It holds its directory open: keep
/// entries only as long as needed (collecting a whole tree's entries holds
/// every directory of it open).
#[derive(Debug, Clone)]
pub struct WalkEntry {
    dir: Arc<OwnedFd>,
    dir_path: Arc<PathBuf>,
    name: OsString,
    kind: EntryKind,
    depth: usize,
}

impl WalkEntry {
    /// Its name in its directory.
    pub fn name(&self) -> &OsStr {
        &self.name
    }

    /// Its canonical path, as its directory's was when the walk entered it.
    pub fn path(&self) -> PathBuf {
        self.dir_path.join(&self.name)
    }

    /// What it is (symlinks not followed).
    pub fn kind(&self) -> EntryKind {
        self.kind
    }

    /// 1 for the entries of the directory the walk started in.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The descriptor of its directory (read-only). Files are opened
    /// through [`Jail::open_entry`]; opening them with this descriptor
    /// directly skips the jail's checks.
    pub fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

/// A directory being walked.
#[derive(Debug)]
struct Frame {
    dir: Arc<OwnedFd>,
    path: Arc<PathBuf>,
    names: std::vec::IntoIter<(OsString, sys::DType)>,
    depth: usize,
}

/// The entries below a directory, depth first, from [`Jail::walk`].
/// Symlinks are yielded, never followed; secrets are neither yielded nor
/// entered. A directory that cannot be entered (swapped for a symlink,
/// moved out of every root) yields an error after its entry, and the walk
/// goes on.
#[derive(Debug)]
pub struct Walk<'j> {
    jail: &'j Jail,
    given: PathBuf,
    stack: Vec<Frame>,
    max_depth: usize,
    pending: Option<JailError>,
    /// Whether the last entry yielded was a directory the walk entered.
    entered_last: bool,
}

impl Walk<'_> {
    /// Does not descend into the directory the walk yielded last (a search
    /// leaving out what `.gitignore` names); nothing when the last entry
    /// was not a directory it entered.
    pub fn skip_dir(&mut self) {
        if std::mem::take(&mut self.entered_last) {
            self.stack.pop();
        }
        self.pending = None;
    }

    /// Descends no deeper than `depth` levels (1: the start's entries only).
    pub fn max_depth(mut self, depth: usize) -> Self {
        self.max_depth = depth;
        self
    }
}

impl Iterator for Walk<'_> {
    type Item = Result<WalkEntry, JailError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.entered_last = false;
        if let Some(e) = self.pending.take() {
            return Some(Err(e));
        }
        loop {
            let frame = self.stack.last_mut()?;
            let Some((name, d_type)) = frame.names.next() else {
                self.stack.pop();
                continue;
            };
            if self.jail.secret_of(&frame.path.join(&name)).is_some() {
                continue;
            }
            let kind = match EntryKind::from_dtype(d_type) {
                Some(kind) => kind,
                None => match kind_at(frame.dir.as_fd(), &name) {
                    Ok(Some(kind)) => kind,
                    Ok(None) => continue,
                    Err(e) => return Some(Err(io_error(Op::Walk, &self.given, e))),
                },
            };
            let entry = WalkEntry {
                dir: Arc::clone(&frame.dir),
                dir_path: Arc::clone(&frame.path),
                name,
                kind,
                depth: frame.depth,
            };
            if kind == EntryKind::Dir && entry.depth < self.max_depth {
                match self
                    .jail
                    .enter(Op::Walk, &entry.path(), &entry.dir, &entry.name)
                {
                    Ok(Some((dir, path))) => {
                        if self.jail.secret_of(&path).is_none() {
                            match sys::read_names(dir.as_fd()) {
                                Ok(names) => {
                                    self.stack.push(Frame {
                                        dir: Arc::new(dir),
                                        path: Arc::new(path),
                                        names: names.into_iter(),
                                        depth: entry.depth + 1,
                                    });
                                    self.entered_last = true;
                                }
                                Err(e) => self.pending = Some(io_error(Op::Walk, &entry.path(), e)),
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(e) => self.pending = Some(e),
                }
            }
            return Some(Ok(entry));
        }
    }
}

fn kind_at(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<Option<EntryKind>> {
    let c = sys::c_path(name)?;
    Ok(sys::lstat_at(dir, &c)?.map(|st| EntryKind::from_stat(&st)))
}

impl Jail {
    /// Walks the tree below a directory (symlinks to it followed while
    /// beneath the root). See [`Walk`].
    pub fn walk(&self, p: &JailPath) -> Result<Walk<'_>, JailError> {
        let op = Op::Walk;
        let w = self.whole(op, p, libc::O_DIRECTORY)?;
        self.check_secret(op, &w.given, &w.path)?;
        let dir = sys::openat(w.fd.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| io_error(op, &w.given, e))?;
        let names = sys::read_names(dir.as_fd()).map_err(|e| io_error(op, &w.given, e))?;
        Ok(Walk {
            jail: self,
            stack: vec![Frame {
                dir: Arc::new(dir),
                path: Arc::new(w.path),
                names: names.into_iter(),
                depth: 1,
            }],
            given: w.given,
            max_depth: DEFAULT_MAX_DEPTH,
            pending: None,
            entered_last: false,
        })
    }

    /// Opens a regular file a walk found, for reading, relative to the
    /// directory the walk held: as [`Jail::open_read`] judges, and a
    /// symlink is not followed.
    pub fn open_entry(&self, entry: &WalkEntry) -> Result<File, JailError> {
        let op = Op::Read;
        let given = entry.path();
        let c = sys::c_path(&entry.name).map_err(|e| io_error(op, &given, e))?;
        let fd = open_name_at(entry.dir.as_fd(), &c)
            .map_err(|e| io_error(op, &given, e))?
            .ok_or_else(|| io_error(op, &given, std::io::Error::from_raw_os_error(libc::ENOENT)))?;
        // Where the directory is now, not where it was when entered.
        let (dir_path, _) = self.canonical(op, &given, &entry.dir)?;
        self.readable_file(op, &given, &dir_path.join(&entry.name), &fd)
    }

    /// The directory `name` in `parent`, opened to read, never through a
    /// symlink, with its canonical path; `None` when it is gone or no
    /// longer a directory.
    fn enter(
        &self,
        op: Op,
        given: &Path,
        parent: &OwnedFd,
        name: &OsStr,
    ) -> Result<Option<(OwnedFd, PathBuf)>, JailError> {
        let c = sys::c_path(name).map_err(|e| io_error(op, given, e))?;
        let Some(dir) = self.open_child_dir(op, given, parent.as_fd(), &c)? else {
            return Ok(None);
        };
        let (path, _) = self.canonical(op, given, &dir)?;
        Ok(Some((dir, path)))
    }

    fn open_child_dir(
        &self,
        op: Op,
        given: &Path,
        parent: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<Option<OwnedFd>, JailError> {
        match sys::openat(
            parent,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) => match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => Ok(None),
                Some(libc::ELOOP) => Err(denied(
                    op,
                    given,
                    None,
                    rule::FINAL_SYMLINK,
                    "a directory was swapped for a symlink, and the jail never follows one \
                     into a tree",
                    None,
                )),
                _ => Err(io_error(op, given, e)),
            },
        }
    }

    /// Removes a name and, for a directory, everything below it, never
    /// following a symlink and never leaving the filesystem it starts on.
    /// Everything is judged first (as [`Jail::unlink`] and [`Jail::rmdir`]
    /// judge), so a tree holding a protected name is refused whole; the
    /// removal judges each entry again as it goes.
    pub fn remove_all(&self, p: &JailPath) -> Result<(), JailError> {
        let op = Op::RemoveAll;
        let t = self.target(op, p)?;
        self.check_writable(op, &t)?;
        let st = sys::lstat_at(t.parent.as_fd(), &t.name)
            .map_err(|e| io_error(op, &t.given, e))?
            .ok_or_else(|| {
                io_error(
                    op,
                    &t.given,
                    std::io::Error::from_raw_os_error(libc::ENOENT),
                )
            })?;
        self.check_removal(op, &t.given, &t.path, &st)?;
        if sys::file_type(&st) != libc::S_IFDIR {
            return sys::unlinkat(t.parent.as_fd(), &t.name, 0)
                .map_err(|e| io_error(op, &t.given, e));
        }
        let tree = Tree {
            op,
            given: &t.given,
            dev: st.st_dev,
        };
        let Some((dir, path)) = self.enter_for_removal(&tree, t.parent.as_fd(), &t.name)? else {
            return Err(io_error(
                op,
                &t.given,
                std::io::Error::from_raw_os_error(libc::ENOENT),
            ));
        };
        self.remove_below(&tree, &dir, &path, 1, false)?;
        self.remove_below(&tree, &dir, &path, 1, true)?;
        drop(dir);
        sys::unlinkat(t.parent.as_fd(), &t.name, libc::AT_REMOVEDIR)
            .map_err(|e| io_error(op, &t.given, e))
    }

    /// Judges (and when `delete`, removes) everything below `dir`.
    fn remove_below(
        &self,
        tree: &Tree<'_>,
        dir: &OwnedFd,
        dir_path: &Path,
        depth: usize,
        delete: bool,
    ) -> Result<(), JailError> {
        let (op, given) = (tree.op, tree.given);
        if depth > REMOVE_MAX_DEPTH {
            return Err(denied(
                op,
                given,
                Some(dir_path),
                rule::TOO_DEEP,
                format!("the tree is deeper than {REMOVE_MAX_DEPTH} levels"),
                None,
            ));
        }
        let names = sys::read_names(dir.as_fd()).map_err(|e| io_error(op, given, e))?;
        for (name, _) in names {
            let c = sys::c_path(&name).map_err(|e| io_error(op, given, e))?;
            let Some(st) = sys::lstat_at(dir.as_fd(), &c).map_err(|e| io_error(op, given, e))?
            else {
                continue;
            };
            let path = dir_path.join(&name);
            self.check_removal(op, given, &path, &st)?;
            let flags = if sys::file_type(&st) == libc::S_IFDIR {
                let Some((child, child_path)) = self.enter_for_removal(tree, dir.as_fd(), &c)?
                else {
                    continue;
                };
                self.remove_below(tree, &child, &child_path, depth + 1, delete)?;
                libc::AT_REMOVEDIR
            } else {
                0
            };
            if delete {
                match sys::unlinkat(dir.as_fd(), &c, flags) {
                    Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                        return Err(io_error(op, given, e));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// A directory of a tree being removed, opened never through a
    /// symlink, on the tree's filesystem, in a writable root, not a
    /// registered checkout.
    fn enter_for_removal(
        &self,
        tree: &Tree<'_>,
        parent: BorrowedFd<'_>,
        name: &CStr,
    ) -> Result<Option<(OwnedFd, PathBuf)>, JailError> {
        let (op, given) = (tree.op, tree.given);
        let Some(dir) = self.open_child_dir(op, given, parent, name)? else {
            return Ok(None);
        };
        let st = sys::fstat(dir.as_fd()).map_err(|e| io_error(op, given, e))?;
        let (path, root) = self.canonical(op, given, &dir)?;
        if st.st_dev != tree.dev {
            return Err(denied(
                op,
                given,
                Some(&path),
                rule::ONE_FILESYSTEM,
                "another filesystem is mounted there; the removal stays on the one it started on",
                None,
            ));
        }
        let root = &self.roots[root];
        if root.access != Access::Writable {
            return Err(denied(
                op,
                given,
                Some(&path),
                rule::READ_ONLY_ROOT,
                format!(
                    "the root {} ({}) is read-only",
                    root.label,
                    root.canonical.display()
                ),
                None,
            ));
        }
        self.check_removal(op, given, &path, &st)?;
        Ok(Some((dir, path)))
    }
}

/// What a removal keeps while it descends.
struct Tree<'a> {
    op: Op,
    given: &'a Path,
    dev: u64,
}
