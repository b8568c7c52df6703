//! Who holds a row: a process named by pid and start time
//! (`sandbox_paths::state_dirs`), so a reused pid is no proof of life.

use sandbox_paths::state_dirs::{own_owner_line, owner_is_gone, start_time};

/// This process, as rows name it.
pub fn me() -> String {
    own_owner_line()
        .map(|l| l.trim().to_owned())
        .unwrap_or_else(|| format!("{} 0", std::process::id()))
}

/// Whether the process a row names is provably gone.
pub fn is_gone(owner: &str) -> bool {
    owner_is_gone(Some(owner), &|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        start_time(&stat)
    })
}
