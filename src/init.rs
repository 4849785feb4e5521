//! Process and thread start and end: the one-time process init (the
//! free-list secret, options, the thread-exit key, the fork handlers, the
//! statistics report), the creation of a thread's heap, the heap the slow
//! paths use (`with_slow_heap`: the thread's own, or the orphan heap), and
//! a thread's exit.

use core::ptr;

use crate::heap::{change_registry, orphan_heap, Heap, DEAD, EMPTY, ORPHAN_LOCK, REGISTRY};
use crate::os;
use crate::release::flush;
use crate::sync::{store_order_fence, Once};
use crate::tls::current;

static INIT: Once = Once::new();
static mut KEY: libc::pthread_key_t = 0;

/// Once per process: the free-list secret, options, the thread-exit key;
/// then, by the thread that did that, the fork handlers and the statistics
/// report, which may allocate (and find the process initialised).
fn init_process() {
    if INIT.is_done() {
        return;
    }
    let first = INIT.call(|| {
        crate::freelist::init_secret();
        crate::options::get();
        // SAFETY: KEY is written only here, before INIT is done (a forked
        // child that runs this again makes its own key).
        unsafe { libc::pthread_key_create(&raw mut KEY, Some(thread_exit)) };
    });
    if first {
        crate::fork::install();
        crate::report::install();
    }
}

pub fn create_heap() -> *mut Heap {
    init_process();
    let bytes = core::mem::size_of::<Heap>();
    let mut mem = REGISTRY.with(|r| {
        let h = r.pool;
        if !h.is_null() {
            // SAFETY: pooled heaps are live mappings linked through `next`.
            r.pool = unsafe { (*h).next.get() };
        }
        h
    });
    if mem.is_null() {
        // A fresh zeroed mapping is a valid empty heap (all nulls and zeros).
        mem = os::map(bytes) as *mut Heap;
        if mem.is_null() {
            return ptr::null_mut();
        }
    } else {
        // SAFETY: a pooled heap belongs to no thread; other threads may still
        // read its `returned` stacks, so it is reset field by field.
        unsafe { (*mem).reset() };
    }
    // SAFETY: `mem` is an empty heap no other thread writes.
    unsafe { (*mem).secret.set(crate::freelist::secret()) };
    change_registry(|r| {
        // SAFETY: `mem` is initialised. Its links are written before it is
        // linked: a forked child walks `live` forward
        // (`repair_registry_in_child`).
        r.live.push_front(unsafe { &*mem });
        r.threads_alive += 1;
        crate::purge::set_program_threads(r.threads_alive);
    });
    // SAFETY: `mem` is the heap just made ours.
    crate::prof::sample::thread_start(unsafe { &*mem });
    // SAFETY: KEY was created by init_process.
    unsafe { libc::pthread_setspecific(KEY, mem as *const libc::c_void) };
    crate::tls::set(mem);
    mem
}

/// Runs `f` with a heap this thread may use: its own (created on first use),
/// or ORPHAN_HEAP under its lock for a thread past its exit destructor or
/// when no heap could be mapped.
#[inline(never)]
pub fn with_slow_heap<R>(f: impl FnOnce(&Heap) -> R) -> R {
    let mut heap = current();
    if heap == EMPTY {
        heap = create_heap();
    }
    if heap.is_null() || heap == DEAD {
        ORPHAN_LOCK.lock();
        let r = f(orphan_heap());
        ORPHAN_LOCK.unlock();
        return r;
    }
    // SAFETY: a heap from `create_heap` lives until this thread's destructor.
    f(unsafe { &*heap })
}

/// The barns' blocks back to their slabs, for the background purger, which
/// has no heap: through the orphan heap, under its lock.
pub fn flush_barns_for_purger() {
    with_slow_heap(crate::free::flush_barns);
}

/// The pthread key destructor: this thread is exiting.
extern "C" fn thread_exit(arg: *mut libc::c_void) {
    let heap = arg as *mut Heap;
    // SAFETY: `arg` is the heap this thread registered, still live.
    let h = unsafe { &*heap };
    // While the heap is still the thread's: the blocks go back to their
    // slabs as its frees, not the orphan heap's.
    crate::free::flush_all(h);
    // And the barns: what the threads left there goes back to its slabs
    // at each exit (a program whose threads have exited keeps nothing
    // there; threads that allocate what others free fill them again).
    crate::free::flush_barns(h);
    crate::tls::set(DEAD);
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
        crate::purge::set_program_threads(r.threads_alive);
        r.threads_alive
    });
    if alive <= 1 {
        // The purger stays while the program has other threads: the exit
        // that leaves one (or none) lets it see that it may leave.
        crate::purge::wake_purger();
    }
    // What this thread freed, and the slabs it handed on, go back to the
    // kernel after the delay even if no other thread calls the allocator
    // again. No allocator lock is held here.
    crate::background::start_if_wanted(flush_barns_for_purger);
}
