//! A thread's exit (the destructor of the key `heap_start` creates): it
//! gives back everything it holds (`give_back_all`, as `thread_idle` does),
//! its counters are retired into the registry's totals, its heap goes to
//! the pool, and the background purger is started if what it gave back is
//! to go back to the kernel.

use crate::heap::{change_registry, Heap, ThreadGoes, DEAD};
use crate::sync::store_order_fence;
use crate::{background, purge, release, sheaf, sheaf_budget, sys, tls};

/// The thread gives back everything it holds: its sheaves' blocks and the
/// barns' go back to their slabs (flushed while the heap is still the
/// thread's: they go back as its frees, not the orphan heap's), its sheaf
/// budget to the pool, and its slabs (the active and partial ones of every
/// class) to the node lists (`release::release_all`), whence other threads
/// take them and the next purge gives the empty ones back. An exiting
/// thread leaves its heap first, so that nothing it calls after takes a
/// slab into it.
pub fn give_back_all(heap: &Heap, goes: ThreadGoes) {
    if goes == ThreadGoes::Exits {
        sheaf::move_to_cpu(heap);
    }
    sheaf::flush_all(heap);
    // What the threads left in the barns goes back to its slabs at each
    // exit too (a program whose threads have exited keeps nothing there;
    // threads that allocate what others free fill them again).
    sheaf::flush_barns(heap);
    sheaf_budget::return_to_pool(heap, goes);
    if goes == ThreadGoes::Exits {
        tls::set(DEAD);
    }
    release::release_all(heap, goes);
}

/// The pthread key destructor: this thread is exiting.
pub extern "C" fn thread_exit(arg: *mut sys::c_void) {
    let heap = arg as *mut Heap;
    // SAFETY: `arg` is the heap this thread registered, still live.
    let h = unsafe { &*heap };
    give_back_all(h, ThreadGoes::Exits);
    let alive = change_registry(|r| {
        r.retire_counters(h);
        // Off the live list (its links cleared after) before its link is
        // reused for the pool, and linked before the pool names it: a
        // forked child walks both.
        r.live.remove(h);
        h.next.set(r.pool);
        store_order_fence();
        r.pool = heap;
        r.threads_alive -= 1;
        r.threads_exited += 1;
        purge::set_program_threads(r.threads_alive);
        r.threads_alive
    });
    if alive <= 1 {
        // The purger stays while the program has other threads: the exit
        // that leaves one (or none) lets it see that it may leave.
        purge::wake_purger();
    }
    // What this thread freed, and the slabs it handed on, go back to the
    // kernel after the delay even if no other thread calls the allocator
    // again. No allocator lock is held here.
    background::start_if_wanted();
}
