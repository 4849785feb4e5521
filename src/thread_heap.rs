//! Per-thread heaps: for each size class an active slab whose free list is
//! detached into the heap (SLUB's `kmem_cache_cpu.freelist`) and a short
//! thread partial list. The fast paths live here.
//!
//! A thread starts on `EMPTY_HEAP`, whose lists are all empty, so its first
//! allocation takes the slow path, which creates its heap; no fast path tests
//! for initialisation. A `pthread_key_create` destructor hands a dying
//! thread's slabs to the node lists and folds its counters into the retired
//! totals; afterwards the thread points at `DEAD_HEAP` and any further slow
//! path uses the shared `ORPHAN_HEAP` under a lock.

use core::cell::Cell;
use core::ptr;

use crate::debug;
use crate::node::{self, NODES};
use crate::os;
use crate::segment::{self, slab_of, SLAB_BYTES};
use crate::size_class::{CLASS_BYTES, NUM_CLASSES};
use crate::slab::{
    self, get_next, link_is_sane, remote_list, set_next, Slab, FREE, FULL, LISTED, OWNED, PARTIAL,
    REMOTE_LISTED, REMOTE_OWNED,
};
use crate::stats::{Counters, Ev};
use crate::sync::{store_order_fence, AtomicPtr, Lock, Locked, Ordering};

/// `ClassHeap::returned` of an exited thread: nothing more may be pushed.
const CLOSED: *mut Slab = 1 as *mut Slab;

/// Slabs a thread keeps on its partial list per class, besides the active one;
/// past it the oldest goes to the node list. Most are nearly full and a slab
/// that empties leaves at once, so holding them costs little memory. larson
/// (2 threads, 10,000 blocks of 16..1024 bytes each) needs about 17 slabs of
/// its biggest classes per thread: median CPU time 0.285 s with 16, 0.216 s
/// with 32 (7 interleaved runs, tcmalloc 0.181 s).
const MAX_THREAD_PARTIAL: u32 = 32;

/// Per class: the fast path's state and this thread's counters for the class.
/// Aligned to 256 bytes (it needs 144) so that finding a class's heap from
/// its index is one shift, not a multiply by 192.
#[repr(C, align(256))]
pub struct ClassHeap {
    /// Free objects of `active`, detached from it: the allocation fast path.
    pub free: Cell<*mut u8>,
    pub active: Cell<*mut Slab>,
    /// Thread partial list, linked through `Slab::next` and `prev` (a slab
    /// that empties leaves from the middle): refills take the head; slabs
    /// that just got their first free join at the tail, so they gather more
    /// frees before their turn.
    pub partial: Cell<*mut Slab>,
    partial_tail: Cell<*mut Slab>,
    pub partial_count: Cell<u32>,
    /// In debug mode the detached list waits here, so that `free` stays
    /// empty and every allocation takes the slow path.
    pub stash: Cell<*mut u8>,
    /// Our full slabs handed back by their first free from another thread,
    /// linked through `Slab::next` (a stack other threads push on; we take
    /// it whole). `CLOSED` once the thread has exited.
    pub returned: AtomicPtr<Slab>,
    pub ev: Counters,
}

const _: () = assert!(core::mem::size_of::<ClassHeap>() == crate::size_class::CLASS_SCALE);
// `Slab::heap_offset` holds a class's offset in a heap in 16 bits.
const _: () = assert!(NUM_CLASSES * core::mem::size_of::<ClassHeap>() <= u16::MAX as usize);

#[repr(C, align(64))]
pub struct Heap {
    pub classes: [ClassHeap; NUM_CLASSES],
    /// Registry links.
    next: Cell<*mut Heap>,
    prev: Cell<*mut Heap>,
}

// SAFETY: a heap's Cells are written only by its thread (or, for
// ORPHAN_HEAP, under ORPHAN_LOCK); other threads read only its atomics.
unsafe impl Sync for Heap {}

impl ClassHeap {
    /// Adds an owned slab to the partial list, at the head or the tail.
    fn push_partial(&self, slab: &Slab, at_tail: bool) {
        let s = slab as *const Slab as *mut Slab;
        slab.state.set(PARTIAL);
        let (head, tail) = (self.partial.get(), self.partial_tail.get());
        if head.is_null() {
            slab.next.set(ptr::null_mut());
            slab.prev.set(ptr::null_mut());
            self.partial.set(s);
            self.partial_tail.set(s);
        } else if at_tail {
            slab.next.set(ptr::null_mut());
            slab.prev.set(tail);
            // SAFETY: the tail of a non-empty partial list is a live slab of ours.
            unsafe { (*tail).next.set(s) };
            self.partial_tail.set(s);
        } else {
            slab.next.set(head);
            slab.prev.set(ptr::null_mut());
            // SAFETY: as above, for the head.
            unsafe { (*head).prev.set(s) };
            self.partial.set(s);
        }
        self.partial_count.set(self.partial_count.get() + 1);
        self.ev.add(Ev::ThreadPartial, 1);
    }

    /// Takes the head of the partial list.
    fn pop_partial(&self) -> *mut Slab {
        let p = self.partial.get();
        if !p.is_null() {
            // SAFETY: slabs on our partial list are live and ours.
            self.unlink_partial(unsafe { &*p });
        }
        p
    }

    /// Takes `slab` off the partial list; it stays owned.
    fn unlink_partial(&self, slab: &Slab) {
        let (prev, next) = (slab.prev.get(), slab.next.get());
        match prev {
            // SAFETY: list neighbours are live slabs of ours.
            p if !p.is_null() => unsafe { (*p).next.set(next) },
            _ => self.partial.set(next),
        }
        match next {
            // SAFETY: as above.
            n if !n.is_null() => unsafe { (*n).prev.set(prev) },
            _ => self.partial_tail.set(prev),
        }
        slab.state.set(OWNED);
        self.partial_count.set(self.partial_count.get() - 1);
        self.ev.sub(Ev::ThreadPartial, 1);
    }

    /// Empties the partial list, returning its head (linked through `next`).
    fn take_partials(&self) -> *mut Slab {
        self.ev
            .sub(Ev::ThreadPartial, self.partial_count.replace(0) as u64);
        self.partial_tail.set(ptr::null_mut());
        self.partial.replace(ptr::null_mut())
    }

    const fn new() -> Self {
        ClassHeap {
            free: Cell::new(ptr::null_mut()),
            active: Cell::new(ptr::null_mut()),
            partial: Cell::new(ptr::null_mut()),
            partial_tail: Cell::new(ptr::null_mut()),
            partial_count: Cell::new(0),
            stash: Cell::new(ptr::null_mut()),
            returned: AtomicPtr::new(ptr::null_mut()),
            ev: Counters::new(),
        }
    }
}

impl Heap {
    /// The class heap at byte offset `offset`: `classes` is the first field,
    /// so no multiply.
    ///
    /// # Safety
    /// `offset` is a class times `CLASS_SCALE` (a `Slab::heap_offset`, or
    /// from `size_class::scaled_class_by_table`).
    #[inline(always)]
    unsafe fn class_at(&self, offset: usize) -> &ClassHeap {
        debug_assert!(offset < core::mem::size_of_val(&self.classes));
        // SAFETY: per the contract, inside `classes`, which starts the
        // repr(C) Heap.
        unsafe {
            &*(self as *const Heap)
                .cast::<u8>()
                .add(offset)
                .cast::<ClassHeap>()
        }
    }

    /// Empties a pooled heap for a new thread: lists, counters, and the
    /// `returned` stacks reopened (atomically: giving back may still look).
    fn reset(&self) {
        for c in self.classes.iter() {
            c.free.set(ptr::null_mut());
            c.active.set(ptr::null_mut());
            c.partial.set(ptr::null_mut());
            c.partial_tail.set(ptr::null_mut());
            c.partial_count.set(0);
            c.stash.set(ptr::null_mut());
            c.ev.clear();
            c.returned.store(ptr::null_mut(), Ordering::Relaxed);
        }
        self.next.set(ptr::null_mut());
        self.prev.set(ptr::null_mut());
    }

    const fn new() -> Self {
        Heap {
            classes: [const { ClassHeap::new() }; NUM_CLASSES],
            next: Cell::new(ptr::null_mut()),
            prev: Cell::new(ptr::null_mut()),
        }
    }
}

pub(crate) static EMPTY_HEAP: Heap = Heap::new();
static DEAD_HEAP: Heap = Heap::new();
/// The heap of threads past their exit destructor, used under `ORPHAN_LOCK`:
/// `FIRST_ORPHAN_HEAP`, or a fresh one in a forked child that found the old
/// one half written (`repair_orphan_in_child`).
static ORPHAN: AtomicPtr<Heap> = AtomicPtr::new(&FIRST_ORPHAN_HEAP as *const Heap as *mut Heap);
static FIRST_ORPHAN_HEAP: Heap = Heap::new();
static ORPHAN_LOCK: Lock = Lock::new();

fn orphan_heap() -> &'static Heap {
    // SAFETY: ORPHAN names a static heap or a mapping that is never unmapped.
    unsafe { &*ORPHAN.load(Ordering::Relaxed) }
}

pub(crate) const EMPTY: *mut Heap = &EMPTY_HEAP as *const Heap as *mut Heap;
const DEAD: *mut Heap = &DEAD_HEAP as *const Heap as *mut Heap;

#[inline(always)]
fn current() -> *mut Heap {
    crate::tls::get()
}

/// The value a heap stores in `Slab::owner`: the heap, with bit 0 set in
/// debug mode so that the free fast path's owner compare always fails.
#[inline]
fn owner_tag(heap: *const Heap) -> *mut Heap {
    (heap as usize | debug::enabled() as usize) as *mut Heap
}

// ---------------------------------------------------------------------------
// Fast paths

/// The hardening checks of the fast paths (link in slab, object start, double
/// free). Only `--cfg slubmalloc_bench_no_checks` turns them off, to measure them.
const CHECKS: bool = !cfg!(slubmalloc_bench_no_checks);

/// Allocates one object of `class` for a request of `size` bytes at `align`
/// (used only by the debug slow path). Fast path: a TLS load, a pop from
/// the detached free list, a link check, two stores and a counter increment.
#[inline(always)]
pub fn alloc(class: usize, size: usize, align: usize) -> *mut u8 {
    alloc_scaled(class * core::mem::size_of::<ClassHeap>(), size, align)
}

/// `alloc` for the class at byte offset `scaled` in the heap (the class times
/// `CLASS_SCALE`, as `size_class::scaled_class_by_table` gives it).
#[inline(always)]
pub fn alloc_scaled(scaled: usize, size: usize, align: usize) -> *mut u8 {
    let heap = current();
    debug_assert!(scaled < NUM_CLASSES * core::mem::size_of::<ClassHeap>());
    // SAFETY: `heap` is this thread's heap or a static one; `scaled` is a
    // class's offset, below `NUM_CLASSES * CLASS_SCALE`.
    let c = unsafe { (*heap).class_at(scaled) };
    let obj = c.free.get();
    if obj.is_null() {
        return alloc_slow(scaled / core::mem::size_of::<ClassHeap>(), size, align);
    }
    // SAFETY: `obj` is a free object of our active slab.
    let next = unsafe { get_next(obj) };
    // `link_is_sane`, as two branches: the usual case (a link within the
    // slab) costs a compare and a jump, the end of the list one more.
    if CHECKS && (obj as usize ^ next as usize) >= SLAB_BYTES {
        unlikely();
        if !next.is_null() {
            corrupted_link(obj);
        }
    }
    c.free.set(next);
    if CHECKS {
        // Clear the link: a stale one would look like a free block to `free`.
        // SAFETY: `obj` is ours and at least 8 bytes.
        unsafe { *(obj as *mut usize) = 0 };
    }
    c.ev.inc(Ev::AllocFast);
    obj
}

/// Frees an object inside one of our segments. Fast path (the slab is ours):
/// a TLS load, the slab from the address, an owner compare, the object-start
/// test, the double-free test, a counter, and a push: onto the heap's
/// detached list if the slab is the active one, as SLUB frees to the cpu
/// freelist, so the next allocation reuses the block while it is in cache;
/// else onto the slab's local list, with a decrement of its `inuse` (a slab
/// that empties leaves the thread).
///
/// # Safety
/// `p` lies inside a mapped segment (`segment::contains(p)`).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let heap = current();
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    // Acquire: pairs with `give_back`'s Release (a plain load on x86-64).
    if slab.owner.load(Ordering::Acquire) != heap {
        return free_slow(slab, p);
    }
    // A slot never carved (never handed out) fails here too: no extra load.
    // SAFETY: `heap` owns `slab` (just compared), and `heap` is ours.
    if CHECKS && !unsafe { slab.is_object_start_owned(p) } {
        invalid_free(p);
    }
    // SAFETY: `p` is an object slot of a slab we own.
    if CHECKS && link_is_sane(p, unsafe { get_next(p) }) {
        return free_suspicious(heap, slab, p);
    }
    // SAFETY: `heap` is this thread's live heap; `heap_offset` is a class's.
    let c = unsafe { (*heap).class_at(slab.heap_offset.get() as usize) };
    // (The counter goes last: a store through `c` before the pushes would
    // make the compiler load the free-list secret a second time.)
    if ptr::eq(c.active.get(), slab) {
        // SAFETY: `p` is a live object of our active slab; it becomes free.
        unsafe { set_next(p, c.free.get()) };
        c.free.set(p);
        c.ev.inc(Ev::FreeFast);
        return;
    }
    // SAFETY: as above, for a slab we own.
    unsafe { set_next(p, slab.local_free.get()) };
    slab.local_free.set(p);
    c.ev.inc(Ev::FreeFast);
    let inuse = slab.inuse.get() - 1;
    slab.inuse.set(inuse);
    if inuse == 0 {
        // SAFETY: `heap` owns `slab`, so it is a live heap of this thread.
        slab_emptied(unsafe { &*heap }, slab);
    }
}

/// Marks the branch that calls it as rarely taken (`core::hint::cold_path`
/// is newer than our minimum Rust version).
#[cold]
#[inline(always)]
fn unlikely() {}

/// Usable size of an object inside one of our segments.
///
/// # Safety
/// As for `free`.
#[inline]
pub unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: per the contract.
    let slab = unsafe { &*slab_of(p) };
    if slab.state.get() == FREE || !slab.is_object_start(p) {
        invalid_free(p);
    }
    if debug::enabled() {
        return debug::requested_size(slab, p);
    }
    slab.size.get() as usize
}

/// The class of the slab holding `p` (for realloc in place).
///
/// # Safety
/// As for `free`.
pub unsafe fn class_of_ptr(p: *mut u8) -> usize {
    // SAFETY: per the contract.
    let slab = unsafe { &*slab_of(p) };
    if slab.state.get() == FREE || !slab.is_object_start(p) {
        invalid_free(p);
    }
    slab.class.get() as usize
}

#[cold]
#[inline(never)]
fn corrupted_link(obj: *mut u8) -> ! {
    os::fatal(
        "corrupted free list: a freed block was overwritten (write after free or overflow)",
        obj as usize,
    )
}

#[cold]
#[inline(never)]
fn invalid_free(p: *mut u8) -> ! {
    os::fatal(
        "free of an invalid pointer (not the start of a block)",
        p as usize,
    )
}

#[cold]
#[inline(never)]
fn double_free(p: *mut u8) -> ! {
    os::fatal("double free", p as usize)
}

// ---------------------------------------------------------------------------
// Slow paths

/// Runs `f` with a heap this thread may use: its own (created on first use),
/// or ORPHAN_HEAP under its lock for a thread past its exit destructor or
/// when no heap could be mapped.
#[inline(never)]
fn with_slow_heap<R>(f: impl FnOnce(&Heap) -> R) -> R {
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

#[cold]
#[inline(never)]
fn alloc_slow(class: usize, size: usize, align: usize) -> *mut u8 {
    if debug::enabled() {
        return debug::alloc(size, align);
    }
    alloc_in_slow_path(class)
}

/// One object of `class`, through the slow path (the debug allocator's way).
pub fn alloc_in_slow_path(class: usize) -> *mut u8 {
    with_slow_heap(|heap| refill_and_pop(heap, class))
}

fn refill_and_pop(heap: &Heap, class: usize) -> *mut u8 {
    let c = &heap.classes[class];
    let debug = debug::enabled();
    if debug {
        c.free.set(c.stash.replace(ptr::null_mut()));
    }
    if c.free.get().is_null() {
        segment::purge_if_due();
        if !refill(heap, class) {
            return ptr::null_mut();
        }
        if debug {
            // Debug mode follows the whole new list now: a corrupted link
            // stops the process here rather than when it is reached.
            slab::list_len(c.free.get(), crate::size_class::objects_per_slab(class));
        }
    }
    let obj = c.free.get();
    // SAFETY: `refill` left a non-empty list of our active slab.
    let next = unsafe { get_next(obj) };
    if !link_is_sane(obj, next) {
        corrupted_link(obj);
    }
    c.free.set(next);
    // SAFETY: as in `alloc`.
    unsafe { *(obj as *mut usize) = 0 };
    c.ev.inc(Ev::AllocSlow);
    if debug {
        c.stash.set(c.free.replace(ptr::null_mut()));
    }
    obj
}

/// Fills `c.free`, from (in order) the active slab's own lists, the thread
/// partial list, the node partial list, a new slab. False when out of memory.
///
/// An active slab that runs out trades places with the oldest partial slab:
/// it stays ours at the tail of the partial list, where our frees reach it on
/// the fast path and others' on its remote list, until its turn comes again.
/// Only a slab that comes round with nothing to give (no free in a whole
/// turn) is made FULL and leaves the heap.
fn refill(heap: &Heap, class: usize) -> bool {
    let c = &heap.classes[class];
    // Whether the active slab was taken during this call.
    let mut taken = false;
    loop {
        let a = c.active.get();
        if !a.is_null() {
            // SAFETY: our active slab is a live descriptor we own.
            let a = unsafe { &*a };
            let local = a.local_free.replace(ptr::null_mut());
            if !local.is_null() {
                c.free.set(local);
                a.set_inuse_active();
                c.ev.inc(Ev::RefillOwn);
                return true;
            }
            // A plain load first: the swap is a locked instruction on a
            // line the freers write, not worth paying when nothing came.
            // Acquire: pairs with the Release CAS of each remote free, so
            // the links written by the freers are visible.
            let remote = if a.remote.0.load(Ordering::Relaxed) == REMOTE_OWNED {
                ptr::null_mut()
            } else {
                remote_list(a.remote.0.swap(REMOTE_OWNED, Ordering::Acquire))
            };
            if !remote.is_null() {
                c.free.set(remote);
                a.set_inuse_active();
                c.ev.inc(Ev::RefillOwn);
                return true;
            }
            // A page's worth, at least 16 objects: touches little memory
            // in a fresh slab, without a refill every few allocations.
            let batch = (4096 / a.size.get()).max(16);
            let (list, n) = a.carve(batch);
            if n > 0 {
                if debug::enabled() {
                    debug::poison_list(list, a.size.get() as usize);
                }
                c.free.set(list);
                a.set_inuse_active();
                return true;
            }
            if !taken && !c.partial.get().is_null() {
                let p = c.pop_partial();
                c.push_partial(a, true);
                c.active.set(p);
                c.ev.inc(Ev::RefillPartial);
                taken = true;
                continue;
            }
            if !deactivate_full(heap, a) {
                continue; // a remote free arrived meanwhile
            }
            c.active.set(ptr::null_mut());
        }
        taken = true;
        let p = c.pop_partial();
        if !p.is_null() {
            c.active.set(p);
            c.ev.inc(Ev::RefillPartial);
            continue;
        }
        if take_returned(heap, class) {
            continue;
        }
        if take_from_node(heap, class) {
            c.ev.inc(Ev::RefillNode);
            continue;
        }
        let s = segment::alloc_slab();
        if s.is_null() {
            return false;
        }
        // SAFETY: a free slab from the segment lock is ours alone.
        unsafe { (*s).init(class, owner_tag(heap)) };
        c.ev.inc(Ev::SlabsNew);
        c.active.set(s);
    }
}

/// An exhausted active slab becomes FULL: unowned and on no list, as in
/// SLUB's deactivation of a slab with no free object. Lock-free; fails if a
/// remote free raced in.
fn deactivate_full(heap: &Heap, a: &Slab) -> bool {
    a.state.set(FULL);
    a.inuse.set(a.objects.get());
    a.last_owner.set(heap as *const Heap as *mut Heap);
    a.owner.store(ptr::null_mut(), Ordering::Relaxed);
    // Release: publishes state/inuse/owner to the freer that Acquire-loads 0.
    if a.remote
        .0
        .compare_exchange(REMOTE_OWNED, 0, Ordering::Release, Ordering::Relaxed)
        .is_ok()
    {
        return true;
    }
    a.state.set(OWNED);
    a.owner.store(owner_tag(heap), Ordering::Relaxed);
    false
}

/// Takes slabs from the node list: the first becomes active, more go to the
/// thread partial list until half a slab of free objects is gathered.
fn take_from_node(heap: &Heap, class: usize) -> bool {
    let node = &NODES[class];
    let c = &heap.classes[class];
    if node.nr_partial.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let _g = node.lock.guard();
    let mut gathered = 0;
    let mut got = false;
    loop {
        let s = node.first();
        if s.is_null() {
            break;
        }
        // SAFETY: listed slabs are live; the node lock is held.
        let slab = unsafe { &*s };
        node.remove(slab);
        slab.state.set(OWNED); // PARTIAL if it joins the partial list below
        slab.owner.store(owner_tag(heap), Ordering::Relaxed);
        // Relaxed: freers read `remote` again under this lock before pushing.
        slab.remote.0.store(REMOTE_OWNED, Ordering::Relaxed);
        gathered += slab.objects.get() - slab.inuse.get();
        if !got {
            c.active.set(s);
            got = true;
        } else {
            c.push_partial(slab, false);
        }
        if gathered >= slab.objects.get() / 2 || c.partial_count.get() >= MAX_THREAD_PARTIAL {
            break;
        }
    }
    got
}

/// A free by a thread that does not own the slab. The common case, a slab
/// that another heap owns, is a CAS onto its remote list, done here without
/// the slow-heap machinery (about 40 instructions rather than 120);
/// everything else goes through `free_unowned`.
#[inline(never)]
fn free_slow(slab: &Slab, p: *mut u8) {
    let heap = current();
    if heap != EMPTY && heap != DEAD && !debug::enabled() {
        // SAFETY: `p` lies in a mapped slab; its first word is readable.
        let word = unsafe { *(p as *const usize) };
        // Acquire: pairs with the Release that made the slab owned (or the
        // CAS of an earlier freer).
        let mut r = slab.remote.0.load(Ordering::Acquire);
        while r & REMOTE_OWNED != 0 {
            if !slab.is_object_start(p) {
                invalid_free(p);
            }
            // SAFETY: as above, `word` was read from `p`.
            if CHECKS && link_is_sane(p, slab::decode(word, p)) {
                double_free(p); // as in `free_unowned`
            }
            // SAFETY: `p` is a live object the caller gives up.
            unsafe { set_next(p, remote_list(r)) };
            // Release: publishes the link; pairs with the owner's Acquire.
            match slab.remote.0.compare_exchange(
                r,
                p as usize | REMOTE_OWNED,
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // SAFETY: a heap that is neither EMPTY nor DEAD is this
                    // thread's own; the class is in range.
                    unsafe { (*heap).classes.get_unchecked(slab.class.get() as usize) }
                        .ev
                        .inc(Ev::FreeRemote);
                    return;
                }
                Err(now) => r = now,
            }
        }
        // The slab changed state: put the word back, `free_unowned` reads it.
        // SAFETY: `p` is still the caller's.
        unsafe { *(p as *mut usize) = word };
    }
    with_slow_heap(|heap| free_unowned(heap, slab, p))
}

fn free_unowned(heap: &Heap, slab: &Slab, p: *mut u8) {
    let me = owner_tag(heap);
    if debug::enabled() {
        if slab.state.get() == FREE || !slab.is_object_start(p) {
            invalid_free(p);
        }
        debug::on_free(slab, p);
    }
    // Read before the loop writes a link into `p` (a failed CAS retries).
    // SAFETY: `p` lies in a mapped slab; its first word is readable.
    let looks_free = CHECKS && link_is_sane(p, unsafe { get_next(p) });
    loop {
        // Acquire: pairs with the Release that made the slab unowned (or the
        // CAS of an earlier freer), so its fields are visible.
        let r = slab.remote.0.load(Ordering::Acquire);
        if r & REMOTE_OWNED != 0 {
            // Acquire: as in `free`.
            if slab.owner.load(Ordering::Acquire) == me {
                // ORPHAN_HEAP owns it, or our own slab reached the slow path.
                return free_owned_slow(heap, slab, p);
            }
            if !slab.is_object_start(p) {
                invalid_free(p);
            }
            if looks_free {
                // Another thread owns the lists, so they cannot be walked;
                // a block that already holds a valid link is a double free.
                double_free(p);
            }
            // SAFETY: `p` is a live object the caller gives up.
            unsafe { set_next(p, remote_list(r)) };
            // Release: publishes the link above; pairs with the owner's
            // Acquire swap in `refill` or `release`.
            if slab
                .remote
                .0
                .compare_exchange(
                    r,
                    p as usize | REMOTE_OWNED,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                heap.classes[slab.class.get() as usize]
                    .ev
                    .inc(Ev::FreeRemote);
                return;
            }
            continue;
        }
        if !slab.is_object_start(p) {
            invalid_free(p);
        }
        let class = slab.class.get() as usize;
        if r == 0 {
            // FULL: one CAS claims it (no lock, SLUB's put_cpu_partial);
            // then, alone with its fields until we hand it on, we put `p`
            // on its local list and give it back to the heap that filled it,
            // or adopt it onto our partial list.
            // Acquire: sees the fields the last owner published with its
            // Release CAS to 0.
            if slab
                .remote
                .0
                .compare_exchange(0, REMOTE_OWNED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: `p` is a live object the caller gives up; a FULL
                // slab's local list is empty.
                unsafe { set_next(p, ptr::null_mut()) };
                slab.local_free.set(p);
                slab.inuse.set(slab.objects.get() - 1);
                let last = slab.last_owner.get();
                if !last.is_null() && !core::ptr::eq(last, heap) && give_back(last, class, slab) {
                    heap.classes[class].ev.inc(Ev::FreeRemote);
                    return;
                }
                heap.classes[class].ev.inc(Ev::FreeSlow);
                return adopt(heap, class, slab);
            }
            continue;
        }
        let node = &NODES[class];
        let _g = node.lock.guard();
        if slab.remote.0.load(Ordering::Relaxed) != REMOTE_LISTED {
            continue; // a heap took the slab, or it filled up, while we waited
        }
        if slab.state.get() != LISTED {
            os::fatal(
                "free of a pointer whose slab is not in use (double free or invalid pointer)",
                p as usize,
            );
        }
        if looks_free && slab::list_contains(slab.local_free.get(), p, slab.objects.get()) {
            double_free(p);
        }
        // SAFETY: as above; the slab's lists are ours under the node lock.
        unsafe { set_next(p, slab.local_free.get()) };
        slab.local_free.set(p);
        slab.inuse.set(slab.inuse.get() - 1);
        heap.classes[class].ev.inc(Ev::FreeSlow);
        node.note_free();
        if slab.inuse.get() == 0 && node.should_discard_empty() {
            node.remove(slab);
            node::discard(slab);
            heap.classes[class].ev.inc(Ev::SlabsFreed);
        }
        return;
    }
}

/// Hands a slab just claimed from FULL back to the heap that filled it:
/// that heap owns it again and finds it on its `returned` stack at its next
/// refill. False if that heap's thread has exited.
fn give_back(last: *mut Heap, class: usize, slab: &Slab) -> bool {
    slab.state.set(OWNED);
    // Release: the owner's fast path may free into the slab as soon as it
    // sees itself here (Acquire); it must see `local_free` and `inuse` as we
    // left them.
    slab.owner.store(owner_tag(last), Ordering::Release);
    // SAFETY: heaps are never unmapped; an exited one reads CLOSED.
    let stack = unsafe { &(*last).classes[class].returned };
    let mut head = stack.load(Ordering::Relaxed);
    loop {
        if head == CLOSED {
            return false;
        }
        slab.next.set(head);
        // Release: publishes the slab's fields and link; pairs with the
        // Acquire swap in `take_returned` and `flush`.
        match stack.compare_exchange_weak(
            head,
            slab as *const Slab as *mut Slab,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(h) => head = h,
        }
    }
}

/// Moves the slabs handed back to us onto the thread partial list; past
/// twice the usual limit, the partial list goes to the node. False if none.
fn take_returned(heap: &Heap, class: usize) -> bool {
    let c = &heap.classes[class];
    if c.returned.load(Ordering::Relaxed).is_null() {
        return false;
    }
    // Acquire: pairs with the Release CAS in `give_back`.
    let mut p = c.returned.swap(ptr::null_mut(), Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: slabs on our returned stack are live and ours.
        let slab = unsafe { &*p };
        p = slab.next.get();
        keep_partial(heap, class, slab);
    }
    trim_partials(heap, class, MAX_THREAD_PARTIAL);
    true
}

/// A slab we just adopted with a free joins our partial list; if that list
/// is full, its slabs go to the node list first, in one lock hold.
fn adopt(heap: &Heap, class: usize, slab: &Slab) {
    slab.state.set(OWNED);
    slab.owner.store(owner_tag(heap), Ordering::Relaxed);
    trim_partials(heap, class, MAX_THREAD_PARTIAL - 1);
    keep_partial(heap, class, slab);
}

/// A slab that was FULL and is ours again joins the partial list, unless its
/// objects were all freed meanwhile (by us, its owner): then it leaves now.
fn keep_partial(heap: &Heap, class: usize, slab: &Slab) {
    if slab.inuse.get() == 0 {
        return release_empty(heap, class, slab);
    }
    heap.classes[class].push_partial(slab, true);
}

/// Hands partial slabs to the node list, oldest first (they have gathered the
/// most frees), until at most `keep` remain.
fn trim_partials(heap: &Heap, class: usize, keep: u32) {
    let c = &heap.classes[class];
    if c.partial_count.get() <= keep {
        return;
    }
    let _g = NODES[class].lock.guard();
    while c.partial_count.get() > keep {
        // SAFETY: the partial list is not empty; its slabs are ours.
        release(heap, class, unsafe { &*c.pop_partial() }, ptr::null_mut());
    }
}

/// `release`s every slab of the thread partial list. Node lock held.
fn release_partials(heap: &Heap, class: usize) {
    let mut p = heap.classes[class].take_partials();
    while !p.is_null() {
        // SAFETY: slabs on our partial list are live and ours.
        let slab = unsafe { &*p };
        p = slab.next.get();
        release(heap, class, slab, ptr::null_mut());
    }
}

/// A free into a slab the heap owns, reached through the slow path.
fn free_owned_slow(heap: &Heap, slab: &Slab, p: *mut u8) {
    if !slab.is_object_start(p) {
        invalid_free(p);
    }
    // SAFETY: `p` is an object slot of a slab we own.
    if link_is_sane(p, unsafe { get_next(p) }) {
        return free_suspicious(heap as *const Heap as *mut Heap, slab, p);
    }
    let c = &heap.classes[slab.class.get() as usize];
    if debug::enabled() && core::ptr::eq(c.active.get(), slab) {
        // Debug mode reuses the block freed last first, so that a write
        // after free is caught by the very next allocation of the class.
        // SAFETY: as above; the stash is the active slab's detached list.
        unsafe { set_next(p, c.stash.get()) };
        c.stash.set(p);
        c.ev.inc(Ev::FreeFast);
    } else {
        push_local(heap, slab, p);
    }
}

/// `p`'s first word decodes to a valid link: either `p` is already free, or
/// the program stored something that looks like one. Walk our lists to know.
#[cold]
#[inline(never)]
fn free_suspicious(heap: *mut Heap, slab: &Slab, p: *mut u8) {
    // SAFETY: `heap` is the owner of `slab`, hence a live heap.
    let c = unsafe { &(*heap).classes[slab.class.get() as usize] };
    let bound = slab.objects.get();
    let remote = remote_list(slab.remote.0.load(Ordering::Acquire));
    let active = core::ptr::eq(c.active.get(), slab);
    if slab::list_contains(slab.local_free.get(), p, bound)
        || slab::list_contains(remote, p, bound)
        || (active && slab::list_contains(c.free.get(), p, bound))
        || (active && slab::list_contains(c.stash.get(), p, bound))
    {
        double_free(p);
    }
    // SAFETY: `heap` owns `slab`.
    push_local(unsafe { &*heap }, slab, p);
}

/// The fast path's push and count, for the slow paths that end like it.
fn push_local(heap: &Heap, slab: &Slab, p: *mut u8) {
    // SAFETY: `p` is a live object of `slab`, which `heap` owns.
    unsafe { set_next(p, slab.local_free.get()) };
    slab.local_free.set(p);
    heap.classes[slab.class.get() as usize].ev.inc(Ev::FreeFast);
    slab.inuse.set(slab.inuse.get() - 1);
    if slab.inuse.get() == 0 {
        slab_emptied(heap, slab);
    }
}

/// A local free emptied `slab`. A slab on the partial list goes to the node
/// list (which keeps `MIN_PARTIAL` empty slabs and returns the rest to their
/// segment), so a thread does not sit on memory it freed; the active slab
/// stays. No list walk: an empty slab's objects are all on `local_free` or
/// uncarved, and none can be on its remote list (those count in `inuse`).
#[cold]
#[inline(never)]
fn slab_emptied(heap: &Heap, slab: &Slab) {
    if slab.state.get() != PARTIAL {
        return;
    }
    let class = slab.class.get() as usize;
    heap.classes[class].unlink_partial(slab);
    release_empty(heap, class, slab);
}

/// Hands an empty owned slab, on no list, to the node list or its segment.
fn release_empty(heap: &Heap, class: usize, slab: &Slab) {
    let node = &NODES[class];
    let _g = node.lock.guard();
    slab.owner.store(ptr::null_mut(), Ordering::Relaxed);
    // Relaxed: nobody can free into an empty slab; later freers of its
    // objects find LISTED and take the lock we hold.
    slab.remote.0.store(REMOTE_LISTED, Ordering::Relaxed);
    slab.next.set(ptr::null_mut());
    if node.should_discard_empty() {
        node::discard(slab);
        heap.classes[class].ev.inc(Ev::SlabsFreed);
    } else {
        node.add(slab, false);
    }
}

/// Hands an owned slab to the node: its lists (and `detached`, the heap's
/// list if it was active) are merged, counted, and the slab goes on the node
/// list, becomes FULL, or returns to its segment if empty. Node lock held.
fn release(heap: &Heap, class: usize, slab: &Slab, detached: *mut u8) {
    let node = &NODES[class];
    let bound = slab.objects.get();
    slab.owner.store(ptr::null_mut(), Ordering::Relaxed);
    // Acquire: see the remote freers' links. After this swap freers see
    // LISTED and queue on the node lock we hold.
    let remote = remote_list(slab.remote.0.swap(REMOTE_LISTED, Ordering::Acquire));
    // `inuse` counts what is not on `local_free` (see `Slab::inuse`), so of
    // the lists only the detached and the remote one are walked.
    let local = slab.carved() - slab.inuse.get();
    let (list, detached_n) = slab::list_join(detached, slab.local_free.get(), bound);
    let (list, remote_n) = slab::list_join(remote, list, bound);
    let free = detached_n + local + remote_n + slab.uncarved();
    slab.local_free.set(list);
    slab.inuse.set(bound - free);
    slab.next.set(ptr::null_mut());
    if free == 0 {
        slab.state.set(FULL);
        slab.last_owner.set(ptr::null_mut());
        // Release: publishes the fields to the freer that adopts the slab.
        slab.remote.0.store(0, Ordering::Release);
    } else if free == bound && node.should_discard_empty() {
        node::discard(slab);
        heap.classes[class].ev.inc(Ev::SlabsFreed);
    } else {
        node.add(slab, !remote.is_null());
    }
}

/// Hands every slab of `heap` to the node lists (thread exit, trim). With
/// `closing` (thread exit), slabs can no longer be handed back to it.
pub fn flush(heap: &Heap, closing: bool) {
    for (class, c) in heap.classes.iter().enumerate() {
        let after = if closing { CLOSED } else { ptr::null_mut() };
        // Acquire: pairs with the Release CAS in `give_back`.
        let mut r = c.returned.swap(after, Ordering::Acquire);
        while !r.is_null() && r != CLOSED {
            // SAFETY: slabs on our returned stack are live and ours.
            let slab = unsafe { &*r };
            r = slab.next.get();
            c.push_partial(slab, true);
        }
        if c.active.get().is_null() && c.partial.get().is_null() {
            continue;
        }
        let _g = NODES[class].lock.guard();
        let a = c.active.replace(ptr::null_mut());
        if !a.is_null() {
            // SAFETY: our active slab is live and ours.
            let (detached, _) = slab::list_join(
                c.stash.replace(ptr::null_mut()),
                c.free.replace(ptr::null_mut()),
                u32::MAX,
            );
            release(heap, class, unsafe { &*a }, detached);
        }
        release_partials(heap, class);
    }
}

/// Flushes the calling thread's heap (for `malloc_trim`).
pub fn flush_current() {
    let heap = current();
    if heap != EMPTY && heap != DEAD {
        // SAFETY: a created heap lives until this thread's destructor.
        flush(unsafe { &*heap }, false);
    }
}

// ---------------------------------------------------------------------------
// Heap creation, the registry, thread exit, fork

pub struct Registry {
    pub live: *mut Heap,
    pub pool: *mut Heap,
    pub retired: [[u64; Ev::COUNT]; NUM_CLASSES],
    pub threads_alive: u64,
    pub threads_exited: u64,
}

// SAFETY: the raw pointers are reached only under the registry lock.
unsafe impl Send for Registry {}

impl Registry {
    /// Adds a heap's counters to the retired totals.
    fn retire_counters(&mut self, h: &Heap) {
        for (class, c) in h.classes.iter().enumerate() {
            for (i, total) in self.retired[class].iter_mut().enumerate() {
                *total = total.wrapping_add(c.ev.get_index(i));
            }
        }
    }
}

pub static REGISTRY: Locked<Registry> = Locked::new(Registry {
    live: ptr::null_mut(),
    pool: ptr::null_mut(),
    retired: [[0; Ev::COUNT]; NUM_CLASSES],
    threads_alive: 0,
    threads_exited: 0,
});

static INIT: crate::sync::AtomicU32 = crate::sync::AtomicU32::new(0);
static mut KEY: libc::pthread_key_t = 0;

/// Once per process: the free-list secret, options, the thread-exit key and
/// the fork handlers. Nothing here allocates before `INIT` reads 2.
fn init_process() {
    if INIT.load(Ordering::Acquire) == 2 {
        return;
    }
    if INIT
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        while INIT.load(Ordering::Acquire) != 2 {
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
        }
        return;
    }
    slab::init_secret();
    crate::options::get();
    // SAFETY: KEY is written once, here, before INIT is published as 2.
    unsafe { libc::pthread_key_create(&raw mut KEY, Some(thread_exit)) };
    // Release: publishes KEY and the secret to threads that read INIT == 2.
    INIT.store(2, Ordering::Release);
    crate::fork::install();
    crate::report::install();
}

fn create_heap() -> *mut Heap {
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
    REGISTRY.with(|r| {
        // SAFETY: `mem` is initialised; registry members are live heaps.
        unsafe {
            (*mem).next.set(r.live);
            if !r.live.is_null() {
                (*r.live).prev.set(mem);
            }
        }
        // A forked child walks `live` forward (`repair_registry_in_child`).
        store_order_fence();
        r.live = mem;
        r.threads_alive += 1;
    });
    // SAFETY: KEY was created by init_process.
    unsafe { libc::pthread_setspecific(KEY, mem as *const libc::c_void) };
    crate::tls::set(mem);
    mem
}

/// The pthread key destructor: this thread is exiting.
extern "C" fn thread_exit(arg: *mut libc::c_void) {
    let heap = arg as *mut Heap;
    crate::tls::set(DEAD);
    // SAFETY: `arg` is the heap this thread registered, still live.
    let h = unsafe { &*heap };
    flush(h, true);
    REGISTRY.with(|r| {
        r.retire_counters(h);
        let (next, prev) = (h.next.get(), h.prev.get());
        // SAFETY: neighbours are live registry members; lock held.
        unsafe {
            if prev.is_null() {
                r.live = next;
            } else {
                (*prev).next.set(next);
            }
            if !next.is_null() {
                (*next).prev.set(prev);
            }
        }
        // Off the live list before its link is reused for the pool, and
        // linked before the pool names it: a forked child walks both.
        store_order_fence();
        h.next.set(r.pool);
        store_order_fence();
        r.pool = heap;
        r.threads_alive -= 1;
        r.threads_exited += 1;
    });
}

/// Sums every live heap's counters plus the retired totals into `out`;
/// returns (threads alive, threads exited). With `wait == false` (a signal
/// handler) it never blocks: if the registry lock is taken, it reads the
/// lists without it, which is safe because heaps are never unmapped, only
/// recycled, though a heap exiting at that moment may be missed.
pub fn sum_counters(out: &mut [[u64; Ev::COUNT]; NUM_CLASSES], wait: bool) -> (u64, u64) {
    let locked = if wait {
        REGISTRY.lock.lock();
        true
    } else {
        REGISTRY.lock.try_lock()
    };
    // SAFETY: with the lock held this is the only access; without it (signal
    // handler) we only read, and every pointer reached is a live or pooled heap.
    let r = unsafe { &*REGISTRY.data_ptr() };
    *out = r.retired;
    let mut add = |h: &Heap| {
        for (class, c) in h.classes.iter().enumerate() {
            for (i, total) in out[class].iter_mut().enumerate() {
                *total = total.wrapping_add(c.ev.get_index(i));
            }
        }
    };
    add(orphan_heap());
    let mut h = r.live;
    while !h.is_null() {
        // SAFETY: registry members are live heaps.
        let heap = unsafe { &*h };
        add(heap);
        h = heap.next.get();
    }
    let threads = (r.threads_alive, r.threads_exited);
    if locked {
        REGISTRY.lock.unlock();
    }
    threads
}

/// Per class: free objects on heaps' detached lists, and thread partial
/// slabs. Verification walk only; other threads must be quiescent.
pub fn walk_heaps(detached: &mut [u64; NUM_CLASSES], thread_partial: &mut [u64; NUM_CLASSES]) {
    REGISTRY.with(|r| {
        let mut visit = |h: &Heap| {
            for (class, c) in h.classes.iter().enumerate() {
                let bound = (SLAB_BYTES / CLASS_BYTES[class] as usize) as u32;
                detached[class] += slab::list_len(c.free.get(), bound) as u64;
                detached[class] += slab::list_len(c.stash.get(), bound) as u64;
                let mut p = c.partial.get();
                while !p.is_null() {
                    thread_partial[class] += 1;
                    // SAFETY: partial slabs are live descriptors.
                    p = unsafe { (*p).next.get() };
                }
            }
        };
        visit(orphan_heap());
        let mut h = r.live;
        while !h.is_null() {
            // SAFETY: registry members are live heaps; lock held.
            let heap = unsafe { &*h };
            visit(heap);
            h = heap.next.get();
        }
    })
}

/// In a forked child whose parent had other threads (see `fork`), if one of
/// them held the registry lock: the live list is made whole again (a heap is
/// linked in after its links are written and its link is reused for the
/// pool only after it left the list, so the list is whole walked forward)
/// and the lock freed. A thread lost half-way through its exit may have
/// part of its counters in the retired totals as well as in its heap.
pub fn repair_registry_in_child() {
    if !REGISTRY.lock.is_locked() {
        return;
    }
    // SAFETY: the child runs one thread, and the thread that held the lock
    // is gone: nothing else touches the registry.
    let r = unsafe { &mut *REGISTRY.data_ptr() };
    let (mut prev, mut h, mut alive) = (ptr::null_mut(), r.live, 0);
    while !h.is_null() {
        // SAFETY: heaps reachable from `live` are live mappings.
        let heap = unsafe { &*h };
        heap.prev.set(prev);
        alive += 1;
        prev = h;
        h = heap.next.get();
    }
    r.threads_alive = alive;
    REGISTRY.lock.reset_in_child();
}

/// In a forked child whose parent had other threads, if one of them held
/// `ORPHAN_LOCK`: the orphan heap's lists may be half written, so a fresh
/// heap takes its place. The old one's slabs stay owned by it and are never
/// reached again (what the child frees into them is leaked, never handed out
/// twice); its counters join the retired totals. Runs after
/// `repair_registry_in_child`.
pub fn repair_orphan_in_child() {
    if !ORPHAN_LOCK.is_locked() {
        return;
    }
    let fresh = os::map(core::mem::size_of::<Heap>()) as *mut Heap;
    if !fresh.is_null() {
        REGISTRY.with(|r| r.retire_counters(orphan_heap()));
        // A zeroed mapping is a valid empty heap, as in `create_heap`.
        ORPHAN.store(fresh, Ordering::Relaxed);
    }
    ORPHAN_LOCK.reset_in_child();
}
