//! What every operation judges before it acts: secrets, read-only roots,
//! registered checkouts (by path and by identity), the create-time rules,
//! files protected at start, and what kind of file an operation may touch.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::error::{JailError, Op, rule};
use super::form;
use super::ops::open_name_at;
use super::resolve::{Target, denied, io_error};
use super::{Access, Jail, JailPath, sys};
use crate::write_rules::Refusal;

fn os_error(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

impl Jail {
    /// Refuses anything at or below a secret.
    pub(super) fn check_secret(&self, op: Op, given: &Path, path: &Path) -> Result<(), JailError> {
        if let Some((name, why)) = self.secret_of(path) {
            return Err(denied(
                op,
                given,
                Some(path),
                rule::SECRET,
                format!("{name} is a secret ({why}): no command and no tool reads or changes it"),
                None,
            ));
        }
        Ok(())
    }

    /// The secret `path` (canonical) is at or below.
    pub(super) fn secret_of(&self, path: &Path) -> Option<(String, &'static str)> {
        if form::is_host_key(path) {
            return Some((path.display().to_string(), "an SSH host private key"));
        }
        form::secret(path, self.home.as_deref())
    }

    /// What every change checks of the name it changes: a writable root,
    /// not a root itself or above one, no secret at, below or above it,
    /// no registered checkout at or above it (by path, and by identity
    /// walking up from the directory held).
    pub(super) fn check_writable(&self, op: Op, t: &Target) -> Result<(), JailError> {
        let root = &self.roots[t.root];
        if root.access != Access::Writable {
            return Err(denied(
                op,
                &t.given,
                Some(&t.path),
                rule::READ_ONLY_ROOT,
                format!(
                    "the root {} ({}) is read-only",
                    root.label,
                    root.canonical.display()
                ),
                None,
            ));
        }
        self.check_not_a_root(op, &t.given, &t.path)?;
        self.check_secret(op, &t.given, &t.path)?;
        if let Some((name, why)) = form::secret_below(&t.path, self.home.as_deref()) {
            return Err(denied(
                op,
                &t.given,
                Some(&t.path),
                rule::SECRET,
                format!("it holds the secret {name} ({why})"),
                None,
            ));
        }
        if let Some(checkout) = self.protected_paths.iter().find(|p| t.path.starts_with(p)) {
            return Err(self.protected(op, &t.given, &t.path, checkout));
        }
        if let Some(checkout) = self.protected_above(op, &t.given, t.parent.as_fd())? {
            return Err(self.protected(op, &t.given, &t.path, &checkout));
        }
        Ok(())
    }

    /// Refuses changing a root or a directory that holds one.
    pub(super) fn check_not_a_root(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
    ) -> Result<(), JailError> {
        match self.roots.iter().find(|r| r.canonical.starts_with(path)) {
            Some(r) => Err(denied(
                op,
                given,
                Some(path),
                rule::ROOT_ITSELF,
                format!(
                    "it is, or holds, the root {} ({})",
                    r.label,
                    r.canonical.display()
                ),
                None,
            )),
            None => Ok(()),
        }
    }

    pub(super) fn protected(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
        checkout: &Path,
    ) -> JailError {
        denied(
            op,
            given,
            Some(path),
            rule::PROTECTED_PATH,
            format!(
                "{} is a registered checkout: nothing at or below it is changed",
                checkout.display()
            ),
            None,
        )
    }

    /// The registered checkout the directory held is, or lies below,
    /// compared by identity: `..` by `..` to `/`.
    pub(super) fn protected_above(
        &self,
        op: Op,
        given: &Path,
        dir: BorrowedFd<'_>,
    ) -> Result<Option<PathBuf>, JailError> {
        if self.protected_ids.is_empty() {
            return Ok(None);
        }
        let fail = |e| io_error(op, given, e);
        let mut held: Option<OwnedFd> = None;
        for _ in 0..4096 {
            let fd = held.as_ref().map_or(dir, |h| h.as_fd());
            let id = sys::identity(&sys::fstat(fd).map_err(fail)?);
            if let Some(checkout) = self.protected_ids.get(&id) {
                return Ok(Some(checkout.clone()));
            }
            if id == self.fs_root {
                return Ok(None);
            }
            let up = sys::openat(fd, c"..", libc::O_PATH | libc::O_DIRECTORY, 0).map_err(fail)?;
            if sys::identity(&sys::fstat(up.as_fd()).map_err(fail)?) == id {
                return Ok(None);
            }
            held = Some(up);
        }
        // Deeper than any real tree: fail closed.
        Err(denied(
            op,
            given,
            None,
            rule::TOO_DEEP,
            "its directories could not be walked up to /",
            None,
        ))
    }

    /// Refuses changing a file by identity: a registered checkout, or
    /// another name of a file protected at start.
    pub(super) fn check_identity(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
        st: &libc::stat,
    ) -> Result<(), JailError> {
        let id = sys::identity(st);
        if let Some(checkout) = self.protected_ids.get(&id) {
            return Err(self.protected(op, given, path, checkout));
        }
        if self.rules.is_protected_inode(id.0, id.1) {
            return Err(denied(
                op,
                given,
                Some(path),
                rule::PROTECTED_FILE,
                "it is a file the create-time rules protected at start, under this name or \
                 another (a hard link)",
                None,
            ));
        }
        Ok(())
    }

    /// What removing or moving away an existing name checks (as the
    /// create-time guard does for `unlink` and `rename`): no secret, root
    /// or registered checkout at, below or above it; the rules' structure
    /// check; its identity.
    pub(super) fn check_removal(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
        st: &libc::stat,
    ) -> Result<(), JailError> {
        self.check_not_a_root(op, given, path)?;
        self.check_secret(op, given, path)?;
        if let Some((name, why)) = form::secret_below(path, self.home.as_deref()) {
            return Err(denied(
                op,
                given,
                Some(path),
                rule::SECRET,
                format!("it holds the secret {name} ({why})"),
                None,
            ));
        }
        // Moving a directory away moves every checkout below it too.
        if let Some(checkout) = self
            .protected_paths
            .iter()
            .find(|p| path.starts_with(p) || p.starts_with(path))
        {
            return Err(self.protected(op, given, path, checkout));
        }
        if let Some(refusal) = self.rules.check_structure(path) {
            return Err(self.rule_denial(op, given, path, refusal, "removing or moving"));
        }
        self.check_identity(op, given, path, st)
    }

    /// A refusal of the create-time rules, in the jail's words.
    pub(super) fn by_rules(
        &self,
        op: Op,
        t: &Target,
        refusal: Option<Refusal>,
        doing: &str,
    ) -> Result<(), JailError> {
        match refusal {
            Some(refusal) => Err(self.rule_denial(op, &t.given, &t.path, refusal, doing)),
            None => Ok(()),
        }
    }

    pub(super) fn rule_denial(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
        refusal: Refusal,
        doing: &str,
    ) -> JailError {
        denied(
            op,
            given,
            Some(path),
            &refusal.rule,
            format!(
                "the dispatch policy's create-time rules refuse {doing} {}, as the sandbox's \
                 guard does",
                path.display()
            ),
            None,
        )
    }

    /// An existing name a change writes to must be a regular file.
    pub(super) fn regular_for_change(
        &self,
        op: Op,
        t: &Target,
        st: &libc::stat,
    ) -> Result<(), JailError> {
        match sys::file_type(st) {
            libc::S_IFREG => Ok(()),
            libc::S_IFLNK => Err(self.final_symlink(op, &t.given, &t.path)),
            libc::S_IFDIR => Err(io_error(op, &t.given, os_error(libc::EISDIR))),
            _ => Err(self.not_regular(op, &t.given, &t.path)),
        }
    }

    /// Judges the regular file held (`O_PATH`, not followed) by identity
    /// and names, then opens that very file for writing, untruncated.
    pub(super) fn writable_file(
        &self,
        op: Op,
        t: &Target,
        fd: &OwnedFd,
    ) -> Result<File, JailError> {
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_error(op, &t.given, e))?;
        self.regular_for_change(op, t, &st)?;
        self.check_identity(op, &t.given, &t.path, &st)?;
        if st.st_nlink > 1 {
            return Err(self.hard_linked(op, &t.given, &t.path));
        }
        let file = sys::reopen(fd.as_fd(), true).map_err(|e| io_error(op, &t.given, e))?;
        Self::same_file(op, &t.given, &file, &st)?;
        Ok(file)
    }

    /// Judges the object held (`O_PATH`) as a file to read, then opens it
    /// for reading.
    pub(super) fn readable_file(
        &self,
        op: Op,
        given: &Path,
        path: &Path,
        fd: &OwnedFd,
    ) -> Result<File, JailError> {
        let st = sys::fstat(fd.as_fd()).map_err(|e| io_error(op, given, e))?;
        match sys::file_type(&st) {
            libc::S_IFREG => {}
            libc::S_IFDIR => return Err(io_error(op, given, os_error(libc::EISDIR))),
            libc::S_IFLNK => return Err(self.final_symlink(op, given, path)),
            _ => return Err(self.not_regular(op, given, path)),
        }
        self.check_secret(op, given, path)?;
        if st.st_nlink > 1 {
            return Err(self.hard_linked(op, given, path));
        }
        let file = sys::reopen(fd.as_fd(), false).map_err(|e| io_error(op, given, e))?;
        Self::same_file(op, given, &file, &st)?;
        Ok(file)
    }

    /// The file reopened through its magic link is the one judged.
    pub(super) fn same_file(
        op: Op,
        given: &Path,
        file: &File,
        judged: &libc::stat,
    ) -> Result<(), JailError> {
        let st = sys::fstat(file.as_fd()).map_err(|e| io_error(op, given, e))?;
        if sys::identity(&st) == sys::identity(judged) {
            Ok(())
        } else {
            Err(io_error(op, given, os_error(libc::ESTALE)))
        }
    }

    /// `lstat` of the target's final name.
    pub(super) fn lstat(&self, op: Op, t: &Target) -> Result<Option<libc::stat>, JailError> {
        sys::lstat_at(t.parent.as_fd(), &t.name).map_err(|e| io_error(op, &t.given, e))
    }

    /// The target's final name opened `O_PATH|O_NOFOLLOW`; `None` when gone.
    pub(super) fn open_name(&self, op: Op, t: &Target) -> Result<Option<OwnedFd>, JailError> {
        open_name_at(t.parent.as_fd(), &t.name).map_err(|e| io_error(op, &t.given, e))
    }

    pub(super) fn final_symlink(&self, op: Op, given: &Path, path: &Path) -> JailError {
        denied(
            op,
            given,
            Some(path),
            rule::FINAL_SYMLINK,
            "it is a symlink, and the jail never acts through a final symlink",
            Some("name the file it points to"),
        )
    }

    pub(super) fn not_regular(&self, op: Op, given: &Path, path: &Path) -> JailError {
        denied(
            op,
            given,
            Some(path),
            rule::NOT_REGULAR,
            "it is a FIFO, socket or device: opening one can block or act",
            None,
        )
    }

    pub(super) fn hard_linked(&self, op: Op, given: &Path, path: &Path) -> JailError {
        denied(
            op,
            given,
            Some(path),
            rule::HARD_LINKED,
            "the file has other names (hard links), which may lie outside every root",
            Some(if op == Op::Read {
                "copy it to a new file on the host to read it here"
            } else {
                "replace it (replace_atomically) to give this name a file of its own"
            }),
        )
    }

    pub(super) fn kept_changing(&self, op: Op, p: &JailPath) -> JailError {
        io_error(op, &self.shown(p), os_error(libc::EAGAIN))
    }
}
