//! slubmalloc: a general-purpose memory allocator built the way the Linux
//! kernel's SLUB allocator is built, with statistics that are exact and free:
//! every counter is kept as the allocator runs, in per-thread blocks written
//! without a locked instruction, and reading them costs O(threads), never a
//! walk of any list.
//!
//! # Use it from Rust
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;
//!
//! fn main() {
//!     let v: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
//!     for c in slubmalloc::stats().caches().filter(|c| c.objects_in_use > 0) {
//!         println!("{:>6} B: {} in use in {} slabs", c.object_size, c.objects_in_use, c.slabs);
//!     }
//!     drop(v);
//! }
//! ```
//!
//! [`stats()`] returns a snapshot: [`Stats::caches`] yields one [`CacheStats`]
//! per size class, [`Stats::totals`] has bytes in use, mapped and resident,
//! medium and large blocks, threads. `Stats` implements `Display` (a table, one row per
//! size class in use) and [`Stats::to_json`]. [`trim()`] gives free memory
//! back to the kernel at once; [`thread_idle()`] gives the calling thread's
//! caches back, as a thread pool's worker between tasks would.
//!
//! # A one-line summary
//!
//! For a log line or a metrics exporter, [`Stats::summary`] gives the totals
//! under the names jemalloc-ctl uses where they mean the same thing
//! (`allocated`, `active`; see [`Summary`] for `mapped` and `rss`), and the
//! alternate form of `Display` writes them on one line:
//!
//! ```
//! let s = slubmalloc::stats();
//! let line = format!("{s:#}"); // allocated=N active=N mapped=N rss=N (bytes)
//! assert!(line.starts_with("allocated=") && !line.contains('\n'));
//! assert_eq!(s.summary().allocated, s.totals.bytes_in_use);
//! ```
//!
//! # Environment variables
//!
//! A program that uses the crate as its global allocator reads the same
//! variables as the preload library, once, from `environ`, without
//! allocating (the table is [`ENVIRONMENT_VARIABLES`]). `SLUBMALLOC_STATS=1`
//! (or `json`) prints the report when the program exits normally (a Rust
//! `main` that returns or `std::process::exit`; not an abort);
//! `SLUBMALLOC_STATS_SIGNAL=USR2` writes one on a signal;
//! `SLUBMALLOC_DEBUG=1` turns on red zones and poisoning for small blocks.
//! A setuid, setgid or file-capabilities program (the kernel's
//! secure-execution mode, `AT_SECURE`) ignores every `SLUBMALLOC_*`
//! variable: its environment comes from a less privileged user, who could
//! otherwise have it write a report into any file as root or a heap profile
//! (its memory map) where they can read it. The program's own calls
//! ([`stats()`], [`trim()`]) work as always. The report and profile files
//! the variables name are written only if they are the process's user's
//! own, never through a symbolic link (`O_NOFOLLOW`); a new profile is 0600
//! less the umask, a new report 0644.
//! Debug mode sees what reaches memory by the time the allocator looks: a
//! red zone (from the end of the request to the end of the slot) overwritten
//! when the block is freed, a freed block written before it is handed out
//! again. It cannot see a store the compiler removed (an out-of-bounds
//! write is undefined behaviour, and the optimiser may drop it), a read out
//! of bounds, an overflow of a block that is never freed, a store that skips
//! the red zone into another live block, or an overflow of a medium block,
//! or of a large block within its last page (more than 64 KiB with the red
//! zone: no red zone; past a large block's last page is its guard page,
//! which faults, debug mode or not).
//!
//! # Any program, by LD_PRELOAD
//!
//! The repository's `preload` package builds `libslubmalloc.so`, which
//! exports the C malloc family: `cargo build --release` in a clone, then
//! `LD_PRELOAD=target/release/libslubmalloc.so SLUBMALLOC_STATS=1 program`.
//! A crate that depends on slubmalloc builds no shared library.
//!
//! # Shape
//!
//! Thread heaps (per class an active slab and a short partial list) -> node
//! partial lists (per class, locked, exact counters) -> segments (4 MiB
//! aligned mappings of 64 KiB slabs). Blocks above 64 KiB up to glibc's
//! dynamic mmap threshold (and 512 KiB) are spans of a segment's slabs;
//! bigger ones get their own mappings.
//!
//! The modules, the layers they keep (checked by a test), a map from
//! concern to file and the routes a block takes: `ARCHITECTURE.md` in the
//! repository.

#![cfg_attr(feature = "nightly", feature(allocator_api))]
// The preload library (`preload/`, which builds this crate with
// `--cfg slubmalloc_preload`) links no std when it aborts on a panic, as
// release builds do: `preload.rs`.
#![cfg_attr(all(slubmalloc_preload, panic = "abort"), no_std)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod alloc;
mod anchor;
mod background;
mod barn;
mod counters;
mod cpu_sheaf;
// The C++ ABI's names of `operator delete`.
#[cfg(any(feature = "override", slubmalloc_preload))]
#[allow(non_snake_case)]
mod cxx;
mod debug;
mod fastpath;
#[cfg(any(feature = "override", slubmalloc_preload))]
mod ffi;
mod fmt;
mod fork;
mod free;
mod freelist;
mod glibc_info;
mod heap;
mod heap_exit;
mod heap_start;
mod large;
mod large_cache;
mod large_map;
mod layout;
mod list;
mod live_block;
mod medium;
#[cfg(feature = "nightly")]
mod nightly;
mod node;
mod options;
mod os;
#[cfg(all(slubmalloc_preload, panic = "abort"))]
mod preload;
mod prof;
mod purge;
mod refill;
mod release;
mod remote_free;
mod report;
mod rseq;
mod segment;
mod shared;
mod sheaf;
mod sheaf_budget;
mod sheaf_state;
mod side_slabs;
mod size_class;
mod slab;
mod stats;
mod sync;
mod sys;
mod tls;
mod walk;
mod zero;

use core::alloc::{GlobalAlloc, Layout};

pub use options::TABLE as ENVIRONMENT_VARIABLES;
pub use size_class::{MAX_SMALL_BYTES, NUM_CLASSES};
pub use stats::{cpu_stats, stats, CacheStats, CpuStats, Stats, Summary, Totals};
pub use walk::{check_stats, walk, Walk, WalkedCache};

/// The allocator. Use it as `#[global_allocator]`.
pub struct SlubMalloc;

// SAFETY: every method honours the GlobalAlloc contract: blocks are at least
// `layout.size()` bytes at `layout.align()`, null on failure, never unwinding.
//
// The methods are `#[inline]` for Rust programs, except where the crate
// exports the C malloc family (the LD_PRELOAD library, or the `override`
// feature): code inlinable into other crates makes the
// allocator's statics exported symbols, which the C entry points would then
// reach through the GOT (an extra load per access on the fast paths).
unsafe impl GlobalAlloc for SlubMalloc {
    #[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        alloc::alloc(layout.size(), layout.align())
    }

    #[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a live block allocated with `layout`.
        unsafe { alloc::free_with_layout(ptr, layout.size(), layout.align()) }
    }

    #[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        alloc::alloc_zeroed(layout.size(), layout.align())
    }

    #[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a live block allocated with `layout`.
        unsafe { alloc::realloc_with_layout(ptr, layout.size(), layout.align(), new_size) }
    }
}

/// Returns free memory to the kernel now (what `malloc_trim(0)` does).
pub fn trim() {
    alloc::trim();
}

/// Tells the allocator that the calling thread goes idle, as a thread
/// pool's worker does between tasks (jemalloc's `thread.idle`, tcmalloc's
/// `MarkThreadIdle`): the blocks its sheaves hold go back to their slabs,
/// and its slabs to the lists every thread takes from, so that the memory
/// serves other threads and the next purge gives what is free back to the
/// kernel. Nothing else changes: the thread may allocate again at once
/// (its first allocations of each class then take the slow path). A
/// thread's exit does the same. An idle thread that never calls it keeps,
/// per size class it used, its sheaf (its capacity, grown by the thread's
/// demand within its budget: at most 32 blocks and 16 KiB of a class, one
/// block above, and 1 MiB beyond the classes' starts), an active slab and up to 32 partial slabs of 64 KiB, and
/// the slabs it filled that other threads' frees handed back to it since
/// its last refill.
pub fn thread_idle() {
    alloc::thread_idle();
}

/// The size class object size that a request of `size` bytes (alignment 1)
/// is served from, or None for a medium or large block. (A request of 0
/// bytes through the C API gets a zero-size block instead, unless
/// `SLUBMALLOC_PROTECT_ZERO_SIZE=0`: `malloc_usable_size` says 0.)
pub fn class_size(size: usize) -> Option<usize> {
    size_class::class_for(size, 1).map(|c| size_class::CLASS_BYTES[c] as usize)
}

/// Usable bytes of a live block.
///
/// # Safety
/// `ptr` is a live block returned by this allocator.
pub unsafe fn usable_size(ptr: *mut u8) -> usize {
    // SAFETY: per the contract.
    unsafe { alloc::usable_size(ptr) }
}

/// Whether the heap profile is on (`SLUBMALLOC_PROF=1` in the environment;
/// never in a setuid program, which ignores the variables).
pub fn heap_profile_enabled() -> bool {
    prof::sample::enabled()
}

/// Writes the heap profile now to `path` (created or truncated), in the
/// format of gperftools' heap profiler with its `MAPPED_LIBRARIES:`
/// section: `google-pprof --text PROGRAM PATH` reads it. A new file is
/// 0600 less the umask (the profile shows the process's memory layout).
/// Fails if profiling is off (`SLUBMALLOC_PROF=1` turns it on at start-up)
/// or the file cannot be opened.
#[cfg(not(slubmalloc_preload))]
pub fn write_heap_profile<P: AsRef<std::path::Path>>(path: P) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    if !prof::sample::enabled() {
        return Err(std::io::Error::other(
            "heap profiling is off (start the program with SLUBMALLOC_PROF=1)",
        ));
    }
    let path = std::ffi::CString::new(path.as_ref().as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    prof::write::write_to_path(&path).map_err(std::io::Error::from_raw_os_error)
}
