//! Memory returned to the system after load (threat model T33).
//!
//! Output passes through the server in 64 KiB chunks allocated and freed on
//! many threads (one reader per pipe, tokio's workers and blocking pool).
//! glibc's malloc gives threads that allocate concurrently arenas of their
//! own — up to eight per core — and an arena gives memory back only from
//! the top of its heap, so after a burst most of what was freed stays in
//! the process, scattered over arenas (`bench/memory` shows it; its
//! figures before and after each measure are in docs/measurements.md).
//!
//! Three measures, each measured with `bench/memory` (the third also by
//! the page faults of one API stream):
//! - `malloc_trim(0)` ([`give_back`]) after a sandbox is destroyed: glibc
//!   returns the free pages of every arena, not only each heap's top. This
//!   is what brings RSS back near where it started;
//! - fewer arenas ([`tune_malloc`], at start): less memory spread where the
//!   next burst cannot reuse it (a lower peak under unread streams than
//!   with glibc's default). Alone, without the trim and the output budget,
//!   it does not help: nearly all of the peak stays;
//! - a trim threshold of [`TRIM_THRESHOLD`] ([`tune_malloc`]): glibc's
//!   default (128 KiB, raised only as `mmap`ed blocks are freed) gave the top
//!   of a heap back after nearly every 64 KiB chunk, to be faulted in again
//!   for the next: tens of thousands of page faults and their TLB
//!   shoot-downs per GiB of one API stream, a large share of the server's
//!   CPU time (SPEC F10).
//!   What load leaves is still given back, by the trim above.
//!
//! All are glibc's; elsewhere they do nothing.

/// The most malloc arenas the server uses. Two keep concurrent threads off
/// one lock (2-core hosts are the common case here) without the spread of
/// glibc's default of eight per core.
const ARENAS: i32 = 2;

/// Free memory a heap keeps at its top before giving it back by itself: a
/// MiB (16 chunks), so output moving through it is not faulted in chunk by
/// chunk; what it keeps when load is gone stays that small.
/// Fixing it also fixes glibc's `mmap` threshold at 128 KiB: output chunks
/// (64 KiB, their JSON lines a little more) stay in the heaps.
const TRIM_THRESHOLD: i32 = 1 << 20;

/// Caps glibc's malloc arenas and sets the trim threshold, unless the
/// environment sets either (`MALLOC_ARENA_MAX`, `MALLOC_TRIM_THRESHOLD_`, or
/// `GLIBC_TUNABLES`): then that wins. Call first thing in `main`, before any
/// other thread exists (arenas are assigned as threads first allocate).
pub fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        let set = |name: &str, parameter: libc::c_int, value: i32| {
            if std::env::var_os(name).is_none() {
                // SAFETY: mallopt only sets a malloc parameter; called
                // before any other thread exists, so no allocation races it.
                unsafe {
                    libc::mallopt(parameter, value);
                }
            }
        };
        set("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, ARENAS);
        set(
            "MALLOC_TRIM_THRESHOLD_",
            libc::M_TRIM_THRESHOLD,
            TRIM_THRESHOLD,
        );
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
