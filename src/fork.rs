//! fork(): the allocator holds none of its locks across it, so fork never
//! waits for the allocator and the allocator never waits for fork.
//!
//! Why not the textbook answer, every allocator lock taken in a
//! `pthread_atfork` prepare handler and released on both sides: glibc runs
//! the prepare handlers *before* it takes its own locks (the stdio list
//! lock, the NSS database lock), and other threads call malloc while holding
//! those. A thread inside `fgets` holds a FILE lock and waits in malloc for
//! a lock the forking thread took in prepare; a thread in `fflush(NULL)`
//! holds the list lock and waits for that FILE; fork waits for the list
//! lock: a cycle (glibc bug 19431; glibc's own malloc escapes it by taking
//! its locks inside fork, after stdio's). And a process with one thread may
//! fork from a signal handler that interrupted the allocator, or its prepare
//! handler, and would wait for itself.
//!
//! So the prepare handler only notes whether the process has other threads:
//!
//! - One thread: nothing to do, in either process. At the fork the thread
//!   was either outside the allocator (every structure whole, every lock
//!   free) or inside it under a signal handler, and then the child, like the
//!   parent, returns from the handler into the critical section and ends it.
//! - Several threads: each other thread may be anywhere in the allocator at
//!   the instant of the fork, and does not exist in the child. What it left:
//!   - its heap, never used again: its slabs stay owned by it, so what the
//!     child frees into them is leaked in the child, never handed out twice;
//!     it no longer counts among the threads alive (the purger leaves a
//!     child whose own threads have all exited);
//!   - lock-free steps (remote frees, the claim of a FULL slab, give-backs):
//!     each CAS happened or not; a slab claimed and not yet passed on stays
//!     with the lost thread, leaked;
//!   - a critical section under one of the locks, which the child finds held.
//!     `child` repairs each such structure and frees its lock before the
//!     child's program runs on: segments, large blocks, node lists, the heap
//!     registry, the orphan heap. Each repair is written beside its
//!     structure and relies on the order in which that structure's critical
//!     sections write, which `sync::store_order_fence` keeps.
//!
//! Costs: nothing in the parent; in a child, for each lock that was held, a
//! walk of the segment list, of the large-block table, or of every slab
//! descriptor (node lists). What the child does not get back: the memory of
//! the lost threads, and the exactness of statistics for them (their
//! counters stay in the sums; one lost half-way through its exit may count
//! partly twice).
//!
//! Not supported, as with glibc's malloc: a fork from a signal handler that
//! interrupted the allocator in a process with several threads.

use crate::barn;
use crate::cpu_sheaf;
use crate::heap;
use crate::large;
use crate::node;
use crate::prof::table;
use crate::purge;
use crate::segment;
use crate::sync::{AtomicU32, Ordering};
use crate::sys;
use crate::tls;
use crate::zero;

/// Whether the process had other threads when it last entered fork.
static PARENT_THREADED: AtomicU32 = AtomicU32::new(0);

/// Registers the handlers; once per process, from `heap_start`.
pub fn install() {
    // SAFETY: plain functions that never unwind; they wait for no lock that
    // another thread can hold (the child's repairs run alone).
    unsafe { sys::pthread_atfork(Some(prepare), None, Some(child)) };
}

/// Whether the process may have threads besides the caller.
fn threaded() -> bool {
    #[cfg(target_env = "gnu")]
    {
        extern "C" {
            /// glibc (2.32+): nonzero until the process first creates a thread.
            static __libc_single_threaded: core::ffi::c_char;
        }
        // SAFETY: a byte glibc keeps for the life of the process.
        unsafe { core::ptr::addr_of!(__libc_single_threaded).read_volatile() == 0 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        true
    }
}

extern "C" fn prepare() {
    // Relaxed: read back by this thread in the child.
    PARENT_THREADED.store(threaded() as u32, Ordering::Relaxed);
}

extern "C" fn child() {
    // The parent's purger, if it had one, is not in the child.
    purge::reset_in_child();
    if PARENT_THREADED.load(Ordering::Relaxed) == 0 {
        return;
    }
    // Segments first: the node lists are rebuilt from their slabs.
    segment::repair_in_child();
    large::repair_in_child();
    node::rebuild_in_child();
    barn::repair_in_child();
    cpu_sheaf::repair_in_child();
    heap::repair_registry_in_child();
    let heap = tls::current();
    heap::count_threads_in_child(heap != heap::EMPTY && heap != heap::DEAD);
    if heap::repair_orphan_in_child() {
        zero::rebuild_in_child();
    }
    if table::PROF_LOCK.is_locked() {
        heap::replace_prof_in_child();
        table::reset_in_child();
    }
}
