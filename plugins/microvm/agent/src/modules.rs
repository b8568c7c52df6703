//! Loads the kernel modules the image lists in `/modules.order`, in that
//! order (the image builder put dependencies first), with `finit_module`:
//! the guest has no kmod. A module that fails is logged and skipped; the
//! port search that follows says whether anything needed is missing.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::log;

/// `finit_module` flag: the file is compressed, the kernel decompresses it.
const MODULE_INIT_COMPRESSED_FILE: libc::c_uint = 4;

/// Loads every module in `list` (one path a line; `#` comments and blank
/// lines skipped). Relative paths are under `/lib/modules/<release>/`.
pub fn load_listed(list: &Path) {
    let text = match fs::read_to_string(list) {
        Ok(text) => text,
        Err(e) => {
            log!("no module list {}: {e}", list.display());
            return;
        }
    };
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let base = Path::new("/lib/modules").join(release.trim());
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let path = base.join(line); // an absolute `line` replaces `base`
        if let Err(e) = load(&path) {
            log!("cannot load module {}: {e}", path.display());
        }
    }
}

/// Loads one module; one already loaded (or built in) is fine.
fn load(path: &PathBuf) -> io::Result<()> {
    let file = File::open(path)?;
    let name = path.to_string_lossy();
    let flags = if [".ko.xz", ".ko.zst", ".ko.gz"]
        .iter()
        .any(|ext| name.ends_with(ext))
    {
        MODULE_INIT_COMPRESSED_FILE
    } else {
        0
    };
    // SAFETY: plain syscall on an open descriptor and an empty NUL-terminated
    // parameter string.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            c"".as_ptr(),
            flags,
        )
    };
    match io::Error::last_os_error() {
        _ if rc == 0 => Ok(()),
        e if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
        e => Err(e),
    }
}
