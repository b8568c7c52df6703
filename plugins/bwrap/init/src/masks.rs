//! The masks over secrets and hidden directories (SPEC C1's read denies),
//! mounted by PID 1 in its own mount namespace rather than by bubblewrap:
//! bubblewrap re-reads and parses `/proc/self/mountinfo` for every bind it
//! makes, so eight `/dev/null` binds over `/etc/shadow` and the ssh host
//! keys cost milliseconds of every start, many times what the two
//! `mount(2)` calls each takes below cost (docs/measurements.md).
//!
//! They hold as bubblewrap's did: no command has a capability or may make a
//! user namespace (`crate::layout`), so none can unmount or remount them,
//! and they are mounted before anything else runs in the sandbox.

use std::io;

use crate::mount::{mount_fs, remount};

/// What to mask: files get `/dev/null` (read-only, no devices: opening one
/// is refused, as bubblewrap's `--ro-bind /dev/null` was), directories an
/// empty read-only tmpfs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Masks {
    pub files: Vec<String>,
    pub dirs: Vec<String>,
    /// The points bubblewrap re-bound read-only (`--protected`): checked
    /// before anything runs, each the root of a read-only mount reached
    /// with no symlink, so a destination swapped under bubblewrap cannot
    /// leave one writable.
    pub protected: Vec<String>,
}

/// The cap of each directory mask's tmpfs (SPEC G6: no tmpfs unbounded),
/// room for directory entries only: it is read-only and stays empty.
pub const DIR_MASK_BYTES: u64 = 64 << 10;

/// A mask that could not be mounted; the launch fails with it.
#[derive(Debug, thiserror::Error)]
#[error("masking {point}")]
pub struct MaskError {
    pub point: String,
    #[source]
    pub source: io::Error,
}

impl Masks {
    /// Mounts every mask; `file_flags` remount each `/dev/null` bind
    /// (`crate::layout::null_device_flags`). A point that no longer exists
    /// is skipped: there is nothing left to hide.
    ///
    /// Each point is resolved once, no symlink followed
    /// (`sandbox_paths::jail::pin`), and the mask is mounted on that object
    /// through its descriptor: a symlink another session swapped into a
    /// point's path fails the launch instead of moving the mask (threat
    /// model T40).
    pub fn mount(&self, file_flags: libc::c_ulong) -> Result<(), MaskError> {
        let fail = |point: &str| {
            let point = point.to_owned();
            move |source| MaskError { point, source }
        };
        for point in &self.protected {
            read_only_root(point).map_err(fail(point))?;
        }
        for point in &self.files {
            let Some(object) = pinned(point).map_err(fail(point))? else {
                continue;
            };
            mount_fs(
                Some("/dev/null"),
                &spelling(&object),
                None,
                libc::MS_BIND,
                None,
            )
            .map_err(fail(point))?;
            // The point's own name now leads to the new mount's root.
            let top = pinned(point)
                .map_err(fail(point))?
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
                .map_err(fail(point))?;
            remount(&spelling(&top), file_flags).map_err(fail(point))?;
        }
        let options = format!("size={DIR_MASK_BYTES},mode=0755");
        let dir_flags = libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        for point in &self.dirs {
            let Some(object) = pinned(point).map_err(fail(point))? else {
                continue;
            };
            mount_fs(
                Some("tmpfs"),
                &spelling(&object),
                Some("tmpfs"),
                dir_flags,
                Some(&options),
            )
            .map_err(fail(point))?;
        }
        Ok(())
    }
}

/// The point's object, no symlink followed; `None` when it does not exist.
fn pinned(point: &str) -> io::Result<Option<std::os::fd::OwnedFd>> {
    match sandbox_paths::jail::pin(std::path::Path::new(point)) {
        Ok(fd) => Ok(Some(fd)),
        Err(sandbox_paths::jail::PinError::Io(_, e)) if e.kind() == io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(sandbox_paths::jail::PinError::Io(_, e)) => Err(e),
        Err(changed) => Err(io::Error::other(changed.to_string())),
    }
}

/// `/proc/self/fd/N` of a pinned point, as `mount(2)` takes it.
fn spelling(fd: &std::os::fd::OwnedFd) -> String {
    sandbox_paths::jail::fd_spelling(fd).display().to_string()
}

/// Whether `point`, reached with no symlink, is the root of a read-only
/// mount (an error saying which it is not).
fn read_only_root(point: &str) -> io::Result<()> {
    let object = pinned(point)?.ok_or_else(|| io::Error::other("the protected point is gone"))?;
    use std::os::fd::AsRawFd;
    // SAFETY: an all-zero statx is valid; the kernel fills it.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold, an empty NUL-terminated path with
    // AT_EMPTY_PATH, and a statx buffer of the right type.
    let rc = unsafe {
        libc::statx(
            object.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            0,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let root = u64::from(libc::STATX_ATTR_MOUNT_ROOT as u32);
    if stx.stx_attributes_mask & root != 0 && stx.stx_attributes & root == 0 {
        return Err(io::Error::other(
            "not a mount of its own: the protection was mounted elsewhere (its path changed)",
        ));
    }
    // SAFETY: an all-zero statvfs is valid; it is filled in.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a descriptor we hold (O_PATH: fstatfs is allowed) and a buffer.
    if unsafe { libc::fstatvfs(object.as_raw_fd(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if fs.f_flag & libc::ST_RDONLY == 0 {
        return Err(io::Error::other(
            "writable: the protection was mounted elsewhere (its path changed)",
        ));
    }
    Ok(())
}
