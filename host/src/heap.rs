//! Memory returned to the system after load (issue 16 item 4).
//!
//! Output passes through the server in 64 KiB chunks allocated and freed on
//! many threads (one reader per pipe, tokio's workers and blocking pool).
//! glibc's malloc gives threads that allocate concurrently arenas of their
//! own — up to eight per core — and an arena gives memory back only from
//! the top of its heap, so after a burst most of what was freed stays in
//! the process, scattered over arenas (`bench/memory` before this: 126 MB
//! after unread streams on bwrap, 248 MB on none, 180 MB after ordinary
//! load, from 12 MB at start).
//!
//! Two measures, each measured with `bench/memory`:
//! - `malloc_trim(0)` ([`give_back`]) after a sandbox is destroyed: glibc
//!   returns the free pages of every arena, not only each heap's top. This
//!   is what brings RSS back (14–19 MB after either load, start 10 MB);
//! - fewer arenas ([`limit_arenas`], at start): less memory spread where the
//!   next burst cannot reuse it (peak under 100 unread streams 111 MB
//!   instead of 133 MB with glibc's default). Alone, without the trim and
//!   the output budget, it does not help (964 MB kept).
//!
//! Both are glibc's; elsewhere they do nothing.

/// The most malloc arenas the server uses. Two keep concurrent threads off
/// one lock (2-core hosts are the common case here) without the spread of
/// glibc's default of eight per core.
const ARENAS: i32 = 2;

/// Caps glibc's malloc arenas, unless the environment sets the cap
/// (`MALLOC_ARENA_MAX`, or `GLIBC_TUNABLES`): then that wins. Call first
/// thing in `main`, before any other thread exists (arenas are assigned as
/// threads first allocate).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none()
        && std::env::var_os("GLIBC_TUNABLES").is_none()
    {
        // SAFETY: mallopt only sets a malloc parameter; called before any
        // other thread exists, so no allocation races it.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}

/// Returns the free memory of every malloc arena to the system. Walks every
/// arena under its lock (a few milliseconds after a large burst): call it
/// after load, on a blocking thread, never per event.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}
