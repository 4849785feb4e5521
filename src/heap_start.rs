//! Process and heap start: the one-time process init (the free-list
//! secret, options, the thread-exit key whose destructor is
//! `heap_exit::thread_exit`, the fork handlers, the statistics report), the
//! creation of a thread's heap, and the heap the slow paths use
//! (`with_slow_heap`: the thread's own, or the orphan heap).

use core::ptr;

use crate::heap::{change_registry, orphan_heap, Heap, DEAD, EMPTY, ORPHAN_LOCK, REGISTRY};
use crate::heap_exit::thread_exit;
use crate::prof::sample;
use crate::sync::Once;
use crate::sys;
use crate::tls::current;
use crate::{cpu_sheaf, fork, freelist, options, os, purge, report, tls};

static INIT: Once = Once::new();
static mut KEY: sys::pthread_key_t = 0;

/// Once per process: the free-list secret, options, the thread-exit key;
/// then, by the thread that did that, the fork handlers and the statistics
/// report, which may allocate (and find the process initialised).
fn init_process() {
    if INIT.is_done() {
        return;
    }
    let first = INIT.call(|| {
        freelist::init_secret();
        cpu_sheaf::init(options::get().percpu);
        // SAFETY: KEY is written only here, before INIT is done (a forked
        // child that runs this again makes its own key).
        unsafe { sys::pthread_key_create(&raw mut KEY, Some(thread_exit)) };
    });
    if first {
        fork::install();
        report::install();
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
    unsafe { (*mem).secret.set(freelist::secret()) };
    change_registry(|r| {
        // SAFETY: `mem` is initialised. Its links are written before it is
        // linked: a forked child walks `live` forward
        // (`repair_registry_in_child`).
        r.live.push_front(unsafe { &*mem });
        r.threads_alive += 1;
        purge::set_program_threads(r.threads_alive);
    });
    // SAFETY: `mem` is the heap just made ours.
    sample::thread_start(unsafe { &*mem });
    // SAFETY: KEY was created by init_process.
    unsafe { sys::pthread_setspecific(KEY, mem as *const sys::c_void) };
    tls::set(mem);
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
