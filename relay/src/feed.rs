//! Feeds a command's stdin pipe from a host descriptor
//! ([`sandbox_plugin_api::HostFds::stdin`]) on a thread of its own, paced
//! like the output readers ([`crate::pace`]).

use std::os::fd::{AsFd, OwnedFd};

use crate::pace::Pace;
use crate::pipe::{self, Copier, Ready};

/// Copies `source` into the command's stdin pipe until end of file (then
/// the pipe closes: the command reads its end), or until the command's
/// side is gone — every reader exited, even while `source` stays silent,
/// a terminal nobody types into.
pub fn feed_stdin(exec_id: u64, source: OwnedFd, pipe: OwnedFd) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("relay-in-{exec_id}"))
        .spawn(move || {
            let mut copier = Copier::new();
            let mut pace = Pace::default();
            loop {
                match pipe::wait(source.as_fd(), Some(pipe.as_fd())) {
                    Ok(Ready::Readable) => {}
                    Ok(Ready::Gone) | Err(_) => return,
                }
                pace.before_read(source.as_fd());
                match copier.copy(source.as_fd(), pipe.as_fd(), pipe::COPY_MAX) {
                    Ok(0) => return,
                    Ok(n) => pace.after_read(n == pipe::COPY_MAX),
                    Err(e) => {
                        tracing::debug!(exec = exec_id, "feeding the command's stdin: {e}");
                        return;
                    }
                }
            }
        })
        .map(drop)
}
