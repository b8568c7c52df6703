//! Copy-on-write clones (SPEC H1): a tree beneath a root of another jail
//! cloned into a new directory beneath a writable root of this one. Every
//! regular file is cloned with `FICLONE` — its extents shared, never its
//! bytes copied: a filesystem that cannot reflink, or a pair of
//! filesystems that cannot share extents, is an error naming the kernel's
//! answer, never a fallback to copying. Directories, symlinks (as their
//! text), permission bits and times are kept; sockets, FIFOs and devices
//! are skipped and listed; secrets are neither read nor listed.
//!
//! Both sides are walked by descriptor: each source directory opened
//! relative to its parent with `O_NOFOLLOW|O_DIRECTORY`, each new name made
//! relative to the new directory the jail made and holds, so neither a
//! symlink in the source nor one swapped in on either side is followed.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::error::{JailError, Op, rule};
use super::form;
use super::ops::EntryKind;
use super::resolve::{denied, io_error};
use super::{Jail, JailPath, sys};

/// How deep a clone descends: one pair of descriptors per level.
const CLONE_MAX_DEPTH: usize = 256;

/// What a clone does with one entry of the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloneChoice {
    /// Clone it (a directory: with what is below it).
    Clone,
    /// Leave it out, for this reason (listed in the report).
    Skip(String),
}

/// One entry a clone offers its caller to choose on.
#[derive(Debug, Clone, Copy)]
pub struct CloneEntry<'a> {
    /// Relative to the directory being cloned.
    pub rel: &'a Path,
    /// What it is (symlinks not followed).
    pub kind: EntryKind,
    /// Its size in bytes (a regular file's content; else as `lstat` says).
    pub len: u64,
}

/// What a clone made, and what it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloneReport {
    /// Regular files cloned.
    pub files: u64,
    /// Directories made (the top one included).
    pub dirs: u64,
    /// Symlinks made.
    pub symlinks: u64,
    /// The content the cloned files share with their sources.
    pub bytes: u64,
    /// Entries left out, relative to the directory cloned, with why.
    pub skipped: Vec<(PathBuf, String)>,
}

/// The tree a clone reads.
#[derive(Debug, Clone, Copy)]
pub struct CloneSource<'a> {
    /// The jail the source lies beneath (read-only is enough).
    pub jail: &'a Jail,
    /// The directory to clone.
    pub path: &'a JailPath,
    /// Whether a regular file with several names (hard links) is cloned.
    /// Refuse them (`false`) for a tree an agent wrote: another name may
    /// lie outside every root. `true` for a tree no sandbox writes (a
    /// registered checkout, whose `git clone` of a local path hard-links
    /// objects).
    pub several_names: bool,
}

/// A directory of a clone in progress: the source held, the copy held.
struct Level<'a> {
    src: &'a OwnedFd,
    src_path: &'a Path,
    dst: &'a OwnedFd,
    dst_path: &'a Path,
    rel: &'a Path,
    depth: usize,
}

/// The callbacks of one clone.
struct Calls<'c> {
    choose: &'c mut dyn FnMut(&CloneEntry<'_>) -> CloneChoice,
    progress: &'c mut dyn FnMut(&CloneReport),
}

impl Jail {
    /// Clones the directory `source.path` into `to`, a new directory
    /// beneath a writable root of this jail (it must not exist). `choose`
    /// is asked about every entry (secrets and special files never reach
    /// it); `progress` is told after every file. Each new name is judged by
    /// this jail's create-time rules as [`Jail::create`] judges it. On an
    /// error, what was made so far stays: the caller removes `to`
    /// ([`Jail::remove_all`]).
    pub fn clone_tree(
        &self,
        source: &CloneSource<'_>,
        to: &JailPath,
        choose: &mut dyn FnMut(&CloneEntry<'_>) -> CloneChoice,
        progress: &mut dyn FnMut(&CloneReport),
    ) -> Result<CloneReport, JailError> {
        let op = Op::Clone;
        let from = source
            .jail
            .whole(op, source.path, libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
        source.jail.check_secret(op, &from.given, &from.path)?;
        let src = sys::openat(from.fd.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| io_error(op, &from.given, e))?;
        let src_st = sys::fstat(src.as_fd()).map_err(|e| io_error(op, &from.given, e))?;
        let t = self.target(op, to)?;
        self.check_writable(op, &t)?;
        if self.lstat(op, &t)?.is_some() {
            return Err(io_error(
                op,
                &t.given,
                std::io::Error::from_raw_os_error(libc::EEXIST),
            ));
        }
        self.by_rules(op, &t, self.rules.check_create(&t.path), "creating")?;
        sys::mkdirat(t.parent.as_fd(), &t.name, 0o700).map_err(|e| io_error(op, &t.given, e))?;
        let dst = sys::openat(
            t.parent.as_fd(),
            &t.name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|e| io_error(op, &t.given, e))?;
        let mut report = CloneReport {
            dirs: 1,
            ..CloneReport::default()
        };
        let mut calls = Calls { choose, progress };
        let level = Level {
            src: &src,
            src_path: &from.path,
            dst: &dst,
            dst_path: &t.path,
            rel: Path::new(""),
            depth: 1,
        };
        self.clone_level(source, &level, &mut calls, &mut report)?;
        finish_dir(dst.as_fd(), &src_st).map_err(|e| io_error(op, &t.given, e))?;
        Ok(report)
    }

    fn clone_level(
        &self,
        source: &CloneSource<'_>,
        level: &Level<'_>,
        calls: &mut Calls<'_>,
        report: &mut CloneReport,
    ) -> Result<(), JailError> {
        let op = Op::Clone;
        if level.depth > CLONE_MAX_DEPTH {
            return Err(denied(
                op,
                level.src_path,
                None,
                rule::TOO_DEEP,
                format!("the tree is deeper than {CLONE_MAX_DEPTH} levels"),
                None,
            ));
        }
        let names =
            sys::read_names(level.src.as_fd()).map_err(|e| io_error(op, level.src_path, e))?;
        for (name, _) in names {
            let src_path = level.src_path.join(&name);
            let fail = |e| io_error(op, &src_path, e);
            let c = sys::c_path(&name).map_err(fail)?;
            let Some(st) = sys::lstat_at(level.src.as_fd(), &c).map_err(fail)? else {
                continue;
            };
            if source.jail.secret_of(&src_path).is_some() {
                continue;
            }
            let rel = level.rel.join(&name);
            let kind = EntryKind::from_stat(&st);
            if kind == EntryKind::Other {
                report.skipped.push((rel, special_kind(&st).into()));
                continue;
            }
            let entry = CloneEntry {
                rel: &rel,
                kind,
                len: u64::try_from(st.st_size).unwrap_or(0),
            };
            if let CloneChoice::Skip(why) = (calls.choose)(&entry) {
                report.skipped.push((rel, why));
                continue;
            }
            let dst_path = level.dst_path.join(&name);
            if let Some(refusal) = self.rules.check_create(&dst_path) {
                return Err(self.rule_denial(op, &dst_path, &dst_path, refusal, "creating"));
            }
            let dst_fail = |e| io_error(op, &dst_path, e);
            match kind {
                EntryKind::Dir => {
                    let Some(child_src) = self.open_source_dir(op, &src_path, level.src, &c)?
                    else {
                        continue;
                    };
                    sys::mkdirat(level.dst.as_fd(), &c, 0o700).map_err(dst_fail)?;
                    let child_dst = sys::openat(
                        level.dst.as_fd(),
                        &c,
                        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                        0,
                    )
                    .map_err(dst_fail)?;
                    report.dirs += 1;
                    let child = Level {
                        src: &child_src,
                        src_path: &src_path,
                        dst: &child_dst,
                        dst_path: &dst_path,
                        rel: &rel,
                        depth: level.depth + 1,
                    };
                    self.clone_level(source, &child, calls, report)?;
                    finish_dir(child_dst.as_fd(), &st).map_err(dst_fail)?;
                }
                EntryKind::File => {
                    if st.st_nlink > 1 && !source.several_names {
                        return Err(source.jail.hard_linked(op, &src_path, &src_path));
                    }
                    let from = open_source_file(level.src.as_fd(), &c, &st).map_err(fail)?;
                    let to = File::from(
                        sys::openat(
                            level.dst.as_fd(),
                            &c,
                            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                            0o600,
                        )
                        .map_err(dst_fail)?,
                    );
                    if st.st_size > 0 {
                        sys::ficlone(&to, &from).map_err(dst_fail)?;
                    }
                    sys::fchmod(&to, st.st_mode & 0o777).map_err(dst_fail)?;
                    sys::set_times_fd(to.as_fd(), &st).map_err(dst_fail)?;
                    report.files += 1;
                    report.bytes += entry.len;
                    (calls.progress)(report);
                }
                EntryKind::Symlink => {
                    let text = sys::readlink_at(level.src.as_fd(), &c).map_err(fail)?;
                    let target = sys::c_path(&text).map_err(fail)?;
                    sys::symlink_at(&target, level.dst.as_fd(), &c).map_err(dst_fail)?;
                    sys::set_times_at(level.dst.as_fd(), &c, &st).map_err(dst_fail)?;
                    report.symlinks += 1;
                }
                EntryKind::Other => {}
            }
        }
        Ok(())
    }

    /// A source directory, never through a symlink; `None` when gone.
    fn open_source_dir(
        &self,
        op: Op,
        given: &Path,
        parent: &OwnedFd,
        name: &std::ffi::CStr,
    ) -> Result<Option<OwnedFd>, JailError> {
        match sys::openat(
            parent.as_fd(),
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(denied(
                op,
                given,
                None,
                rule::FINAL_SYMLINK,
                "a directory was swapped for a symlink, and a clone never follows one",
                None,
            )),
            Err(e) => Err(io_error(op, given, e)),
        }
    }

    /// Clones one regular file of `source` into a new file in the
    /// directory `dir` of this jail and removes it again: whether this
    /// pair of filesystems shares extents, decided by the kernel (btrfs
    /// subvolumes differ in `st_dev` and still reflink). The error is the
    /// kernel's answer (`EOPNOTSUPP`, `EINVAL`, `EXDEV`).
    pub fn try_reflink(
        &self,
        source: &Jail,
        file: &JailPath,
        dir: &JailPath,
    ) -> Result<(), JailError> {
        let op = Op::Clone;
        let w = source.whole(op, file, libc::O_NOFOLLOW)?;
        source.check_secret(op, &w.given, &w.path)?;
        let st = sys::fstat(w.fd.as_fd()).map_err(|e| io_error(op, &w.given, e))?;
        if sys::file_type(&st) != libc::S_IFREG {
            return Err(source.not_regular(op, &w.given, &w.path));
        }
        let from = sys::reopen(w.fd.as_fd(), false).map_err(|e| io_error(op, &w.given, e))?;
        Jail::same_file(op, &w.given, &from, &st)?;
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = form::temp_name(std::process::id(), n);
        let probe = JailPath::from_input(dir, Path::new(&temp));
        let t = self.target(op, &probe)?;
        self.check_writable(op, &t)?;
        let to = File::from(
            sys::openat(
                t.parent.as_fd(),
                &t.name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                0o600,
            )
            .map_err(|e| io_error(op, &t.given, e))?,
        );
        let cloned = sys::ficlone(&to, &from);
        drop(to);
        // Ours, by the name we made it under in the directory we hold.
        let _ = sys::unlinkat(t.parent.as_fd(), &t.name, 0);
        cloned.map_err(|e| io_error(op, &t.given, e))
    }
}

/// A regular source file opened to read, never through a symlink, never
/// blocking on a FIFO swapped in, and the very file `st` judged.
fn open_source_file(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    st: &libc::stat,
) -> std::io::Result<File> {
    let fd = sys::openat(
        dir,
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
        0,
    )?;
    let now = sys::fstat(fd.as_fd())?;
    if sys::identity(&now) != sys::identity(st) || sys::file_type(&now) != libc::S_IFREG {
        return Err(std::io::Error::from_raw_os_error(libc::ESTALE));
    }
    Ok(File::from(fd))
}

/// A new directory gets its source's permission bits and times once
/// everything below it is made (its time changed with every entry).
fn finish_dir(dir: BorrowedFd<'_>, st: &libc::stat) -> std::io::Result<()> {
    sys::fchmod_fd(dir, st.st_mode & 0o777)?;
    sys::set_times_fd(dir, st)
}

/// Why a special file is not cloned.
fn special_kind(st: &libc::stat) -> &'static str {
    match sys::file_type(st) {
        libc::S_IFSOCK => "a socket: not cloned (it is an endpoint, not content)",
        libc::S_IFIFO => "a FIFO: not cloned (it is an endpoint, not content)",
        _ => "a device: not cloned",
    }
}
