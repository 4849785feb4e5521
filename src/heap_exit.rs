//! A thread's exit (the destructor of the key `heap_start` creates): its
//! sheaves and the barns go back to their slabs, its slabs are handed on
//! (`release::flush`), its counters are retired into the registry's
//! totals, its heap goes to the pool, and the background purger is started
//! if what it handed on is to go back to the kernel.

use crate::heap::{change_registry, Heap, DEAD};
use crate::release::flush;
use crate::sync::store_order_fence;
use crate::{background, purge, sheaf, sheaf_budget, sys, tls};

/// The pthread key destructor: this thread is exiting.
pub extern "C" fn thread_exit(arg: *mut sys::c_void) {
    let heap = arg as *mut Heap;
    // SAFETY: `arg` is the heap this thread registered, still live.
    let h = unsafe { &*heap };
    // While the heap is still the thread's: the blocks go back to their
    // slabs as its frees, not the orphan heap's.
    sheaf::flush_all(h);
    sheaf_budget::return_to_pool(h, false);
    // And the barns: what the threads left there goes back to its slabs
    // at each exit (a program whose threads have exited keeps nothing
    // there; threads that allocate what others free fill them again).
    sheaf::flush_barns(h);
    tls::set(DEAD);
    flush(h, true);
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
