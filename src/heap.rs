//! Per-thread heaps: for each size class an active slab whose free list is
//! detached into the heap (SLUB's `kmem_cache_cpu.freelist`), a short thread
//! partial list, the stack of slabs handed back by other threads, and the
//! thread's counters; the registry of live heaps with the retired totals;
//! the static heaps (`EMPTY_HEAP`, `DEAD_HEAP`, the orphan heap, the
//! profile heap that owns the slabs of sampled blocks).
//!
//! A thread starts on `EMPTY_HEAP`, whose lists are all empty, so its first
//! allocation takes the slow path, which creates its heap (`heap_start`); no fast
//! path tests for initialisation. After its exit destructor a thread points
//! at `DEAD_HEAP`, and any further slow path uses the orphan heap under
//! `ORPHAN_LOCK`.

use core::cell::Cell;
use core::mem::offset_of;
use core::ptr;

use crate::counters::{Counters, Ev};
use crate::freelist;
use crate::list::{End, Linked, List};
use crate::os;
use crate::purge;
use crate::segment::SLAB_BYTES;
use crate::sheaf_state::{start_capacity, Sheaf, SheafBody, SheafBudget, SheafHead};
use crate::size_class::{CLASS_BYTES, NO_SHEAF_OFFSET, NUM_CLASSES, ZERO_OFFSET};
use crate::slab::Slab;
use crate::sync::{fence, invariant, AtomicPtr, AtomicU64, Lock, LockWait, Locked, Ordering};

/// Slabs a thread keeps on its partial list per class, besides the active one;
/// past it the oldest goes to the node list. Most are nearly full and a slab
/// that empties leaves at once, so holding them costs little memory.
/// (bench/report/HISTORY.md has the measurement behind the number.)
pub const MAX_THREAD_PARTIAL: u32 = 32;

/// Why a thread gives back everything it holds (`heap_exit::give_back_all`):
/// it goes idle and keeps its heap, or it exits and its heap goes to the
/// pool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ThreadGoes {
    /// `thread_idle`: its sheaves keep their start capacities and its class
    /// heaps take slabs back from other threads.
    Idle,
    /// Its exit: its sheaves' gates close and no slab comes back to it.
    Exits,
}

/// Allocations the heap makes, of any class, with none of a class, before
/// that class's empty active slab may go back: a class used a little but
/// regularly keeps its slab. Debug mode keeps its classes' empty slabs by
/// the same count (`debug`).
pub const IDLE_ALLOCS: u32 = 4096;

/// Per class: the fast paths' state and this thread's counters for the
/// class, 512 bytes (`CLASS_SCALE`), eight cache lines. The first holds the
/// sheaf's length and capacity (`sheaf_head`), the active slab, the
/// detached list and the counters of the fast paths, so that an allocation
/// and a free through the sheaf touch it and one line of the sheaf's slots
/// (`sheaf_body`), and through the detached list it alone.
#[repr(C, align(64))]
pub struct ClassHeap {
    /// The sheaf's words the fast paths read: reached through `sheaf`.
    sheaf_head: SheafHead,
    pub active: Cell<*mut Slab>,
    /// Free objects of `active`, detached from it: the allocation fast
    /// path when the sheaf is empty.
    pub detached: Cell<*mut u8>,
    pub ev: Counters,
    /// The sheaf's slots and the rest of it: reached through `sheaf`.
    sheaf_body: SheafBody,
    /// Thread partial list (a slab that empties leaves from the middle):
    /// refills take the head; slabs that just got their first free join at
    /// the tail, so they gather more frees before their turn.
    pub partial: List<Slab>,
    pub partial_count: Cell<u32>,
    /// Our full slabs handed back by their first free from another thread,
    /// linked through `Slab::next` (a stack other threads push on; we take
    /// it whole). `CLOSED` once the thread has exited.
    pub returned: AtomicPtr<Slab>,
    /// The node-listed slab this thread freed into last (compared, never
    /// followed), with the number of frees in a row into it in the low bits
    /// (descriptors are 128 bytes apart): the `ADOPT_AFTER_FREES`th adopts
    /// it (`free::ClassFreer::adopts_listed`, `node::Node::free_unowned`).
    pub last_listed_free: Cell<usize>,
}

const _: () = assert!(core::mem::size_of::<ClassHeap>() == crate::size_class::CLASS_SCALE);
// The sheaf's length first, its capacity beside it: the fast paths read
// them with no displacement and one of 8 bits.
const _: () = assert!(offset_of!(ClassHeap, sheaf_head) == 0);
// `Slab::heap_offset` holds a class's offset in a heap (or the no-sheaf
// and zero-size ones after them) in 16 bits.
const _: () = assert!(ZERO_OFFSET <= u16::MAX as usize);
const _: () = assert!(offset_of!(Heap, no_sheaf) == NO_SHEAF_OFFSET);
const _: () = assert!(offset_of!(Heap, zero) == ZERO_OFFSET);

/// A thread's heap. The class heaps come first (the fast paths find one at
/// a fixed offset); the header after them holds what a thread writes for
/// its cold classes (`shared`), so that a thread that uses few objects of
/// each class dirties that one page of its heap and no class heap.
#[repr(C, align(64))]
pub struct Heap {
    pub classes: [ClassHeap; NUM_CLASSES],
    /// A class heap that never has a sheaf, at `NO_SHEAF_OFFSET`: the
    /// class heap the free fast path finds for the slabs of the heap
    /// profile, of medium blocks and of debug mode, whose frees must all
    /// take the slow path. Never written.
    pub no_sheaf: ClassHeap,
    /// The class heap of zero-size blocks, at `ZERO_OFFSET`: the size
    /// table's class of size 0 and the one their slabs name, with no sheaf,
    /// so that `malloc(0)` and their frees take the slow paths (`zero`).
    /// A thread's is never written; the orphan heap's lists the slabs of
    /// zero-size blocks that have a free one.
    pub zero: ClassHeap,
    /// Registry links (`Registry::live`), or the pool's (`next` alone).
    pub next: Cell<*mut Heap>,
    pub prev: Cell<*mut Heap>,
    /// The heap profile's per-thread state (`prof/sample.rs`): bytes left
    /// before the next sample (the allocation fast path subtracts the size
    /// and takes the sampling path when it goes below zero; `i64::MAX` with
    /// profiling off), the sampling random state, the reentrancy guard.
    pub prof_left: Cell<i64>,
    /// A copy of the free-list secret (`freelist::secret`), set when a
    /// thread takes the heap: the fast paths read it beside the heap they
    /// already hold, where a Rust program reaches the static through the
    /// GOT (one load more per call, ci/callgrind.sh).
    pub secret: Cell<usize>,
    pub prof_rng: Cell<u64>,
    pub prof_busy: Cell<bool>,
    /// Set while `prof::sample::stack_start::calibrate` allocates through Rust's entry points.
    pub prof_calibrating: Cell<bool>,
    /// Classes that are warm in this heap (bit `class`): the thread has
    /// owned a slab of them, or took `shared::SHARED_OBJECTS` objects. Only
    /// their class heaps hold lists; only their `returned` stacks are open.
    warm: Cell<u64>,
    /// Per class, objects taken from shared slabs while the class was cold.
    pub shared_taken: [Cell<u8>; NUM_CLASSES],
    /// Per class, for `refill`'s `retire_idle_active` (all truncated): the
    /// class heap's allocations, fast and slow, when the heap last took a
    /// slab from a segment; the heap's allocations, all classes, when the
    /// class's last changed; the class's frees when its active slab was
    /// last counted.
    pub idle_allocs: [Cell<u32>; NUM_CLASSES],
    pub idle_since: [Cell<u32>; NUM_CLASSES],
    pub idle_frees: [Cell<u32>; NUM_CLASSES],
    /// The heap's slow paths since its last sweep of its classes
    /// (`release::sweep_if_due`), and per class its allocations from its
    /// slabs and from its sheaf (truncated) at that sweep.
    pub slow_paths: Cell<u32>,
    pub swept_allocs: [Cell<u32>; NUM_CLASSES],
    pub swept_sheaf_allocs: [Cell<u32>; NUM_CLASSES],
    /// The account of the sheaves' capacities (`sheaf_budget`); all 0 in a
    /// heap just mapped.
    pub sheaf_budget: SheafBudget,
}

const _: () = assert!(NUM_CLASSES <= 64, "`Heap::warm` has a bit per class");

// SAFETY: a heap's Cells are written only by its thread (or, for
// ORPHAN_HEAP, under ORPHAN_LOCK); other threads read only its atomics.
unsafe impl Sync for Heap {}

impl Linked for Heap {
    fn next(&self) -> &Cell<*mut Heap> {
        &self.next
    }

    fn prev(&self) -> &Cell<*mut Heap> {
        &self.prev
    }
}

impl ClassHeap {
    /// Adds an owned slab to the partial list, at `end`.
    pub fn push_partial(&self, slab: &Slab, end: End) {
        invariant!(!slab.on_partial.get());
        slab.on_partial.set(true);
        self.partial.push(slab, end);
        self.partial_count.set(self.partial_count.get() + 1);
        self.ev.add(Ev::ThreadPartial, 1);
    }

    /// Makes `slab` the active slab (null: none), counted in
    /// `Ev::ActiveSlabs`; returns the one it replaces. The slow paths'
    /// (the fast paths never change the active slab).
    pub fn set_active(&self, slab: *mut Slab) -> *mut Slab {
        let old = self.active.replace(slab);
        let now = !slab.is_null() as u64;
        self.ev
            .add(Ev::ActiveSlabs, now.wrapping_sub(!old.is_null() as u64));
        old
    }

    /// Takes the head of the partial list.
    pub fn pop_partial(&self) -> *mut Slab {
        let p = self.partial.first();
        if !p.is_null() {
            // SAFETY: slabs on our partial list are live and ours.
            self.unlink_partial(unsafe { &*p });
        }
        p
    }

    /// Takes `slab` off the partial list; it stays owned.
    pub fn unlink_partial(&self, slab: &Slab) {
        invariant!(slab.on_partial.get());
        self.partial.remove(slab);
        slab.on_partial.set(false);
        self.partial_count.set(self.partial_count.get() - 1);
        self.ev.sub(Ev::ThreadPartial, 1);
    }

    /// Empties the partial list, returning its head (linked through
    /// `Slab::next`).
    pub fn take_partials(&self) -> *mut Slab {
        self.ev
            .sub(Ev::ThreadPartial, self.partial_count.replace(0) as u64);
        self.partial.take_all()
    }

    /// The class's sheaf (`sheaf_state`).
    #[inline(always)]
    pub fn sheaf(&self) -> Sheaf<'_> {
        Sheaf::of(&self.sheaf_head, &self.sheaf_body)
    }

    /// The class's allocations that found its sheaf empty: those of the
    /// detached list, and the sheaves taken from the barn (each one empty
    /// sheaf refilled).
    pub fn misses(&self) -> u64 {
        self.ev.get(Ev::AllocFast) + self.ev.get(Ev::SheafFromBarn)
    }

    const fn new() -> Self {
        ClassHeap {
            sheaf_head: SheafHead::new(),
            active: Cell::new(ptr::null_mut()),
            detached: Cell::new(ptr::null_mut()),
            ev: Counters::new(),
            sheaf_body: SheafBody::new(),
            partial: List::new(),
            partial_count: Cell::new(0),
            returned: AtomicPtr::new(ptr::null_mut()),
            last_listed_free: Cell::new(0),
        }
    }
}

impl Heap {
    /// The class heap at byte offset `offset`: `classes` is the first field,
    /// so no multiply.
    ///
    /// # Safety
    /// `offset` is a class times `CLASS_SCALE` (a `Slab::heap_offset`, or
    /// from `size_class::scaled_class_by_table`), `NO_SHEAF_OFFSET` or
    /// `ZERO_OFFSET`.
    #[inline(always)]
    pub unsafe fn class_at(&self, offset: usize) -> &ClassHeap {
        invariant!(offset <= ZERO_OFFSET);
        // SAFETY: per the contract, inside `classes`, which starts the
        // repr(C) Heap.
        unsafe {
            &*(self as *const Heap)
                .cast::<u8>()
                .add(offset)
                .cast::<ClassHeap>()
        }
    }

    /// Empties a pooled heap for a new thread: the lists of its warm
    /// classes, and any counter that is not zero (a page of class heaps
    /// that no thread wrote stays untouched, so not resident). The
    /// `returned` stacks stay CLOSED until the new thread warms their class
    /// up (`warm_up`): no slab filled by an earlier thread is handed to it.
    pub fn reset(&self) {
        for (class, c) in self.classes.iter().enumerate() {
            if self.is_warm(class) {
                // Given back when its last thread exited (`heap_exit::give_back_all`).
                c.sheaf().close();
                c.detached.set(ptr::null_mut());
                c.active.set(ptr::null_mut());
                c.partial.clear();
                c.partial_count.set(0);
            }
            c.ev.clear_if_set();
        }
        for taken in self.shared_taken.iter().filter(|t| t.get() != 0) {
            taken.set(0);
        }
        for class in 0..NUM_CLASSES {
            self.idle_allocs[class].set(0);
            self.idle_since[class].set(0);
            self.idle_frees[class].set(0);
            self.swept_allocs[class].set(0);
            self.swept_sheaf_allocs[class].set(0);
        }
        self.slow_paths.set(0);
        self.warm.set(0);
        self.sheaf_budget.reset();
        self.next.set(ptr::null_mut());
        self.prev.set(ptr::null_mut());
    }

    /// The classes warm in this heap, a bit each (see `warm`).
    #[inline]
    pub fn warm_classes(&self) -> u64 {
        self.warm.get()
    }

    /// Whether `class` is warm in this heap (see `warm`).
    #[inline]
    pub fn is_warm(&self, class: usize) -> bool {
        self.warm.get() & (1 << class) != 0
    }

    /// Whether this is a thread's heap (its `secret` is set when it is
    /// made, `heap_start::create_heap`), not a static one: the orphan
    /// heap, the profile's.
    #[inline]
    pub fn is_thread_heap(&self) -> bool {
        self.secret.get() != 0
    }

    /// Makes `class` warm: from now on the heap may own slabs of it, and
    /// its `returned` stack is open (reopened if an earlier thread of this
    /// pooled heap closed it at exit). A thread's heap gets a sheaf for it;
    /// the orphan heap does not, since no fast path reaches it.
    pub fn warm_up(&self, class: usize) {
        if self.is_warm(class) {
            return;
        }
        self.warm.set(self.warm.get() | 1 << class);
        if self.is_thread_heap() {
            let c = &self.classes[class];
            let start = start_capacity(class);
            c.sheaf().open(start, c.misses());
            self.sheaf_budget.charge(class, 0, start, &c.ev);
        }
        // Relaxed: nothing is published; a give-back that still reads
        // CLOSED adopts its slab instead, as it would have before.
        let _ = self.classes[class].returned.compare_exchange(
            crate::slab::CLOSED,
            ptr::null_mut(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    const fn new() -> Self {
        Heap {
            classes: [const { ClassHeap::new() }; NUM_CLASSES],
            no_sheaf: ClassHeap::new(),
            zero: ClassHeap::new(),
            next: Cell::new(ptr::null_mut()),
            prev: Cell::new(ptr::null_mut()),
            prof_left: Cell::new(0),
            secret: Cell::new(0),
            prof_rng: Cell::new(0),
            prof_busy: Cell::new(false),
            prof_calibrating: Cell::new(false),
            warm: Cell::new(0),
            shared_taken: [const { Cell::new(0) }; NUM_CLASSES],
            idle_allocs: [const { Cell::new(0) }; NUM_CLASSES],
            idle_since: [const { Cell::new(0) }; NUM_CLASSES],
            idle_frees: [const { Cell::new(0) }; NUM_CLASSES],
            slow_paths: Cell::new(0),
            swept_allocs: [const { Cell::new(0) }; NUM_CLASSES],
            swept_sheaf_allocs: [const { Cell::new(0) }; NUM_CLASSES],
            sheaf_budget: SheafBudget::new(),
        }
    }

    /// The allocation fast path's profile countdown: subtracts `size` from
    /// the bytes left before the next sample; true when it goes below zero
    /// (sample this allocation). Two instructions on x86-64 (`sub` to
    /// memory, `js`). Only on a thread's own heap (not the static ones).
    #[inline(always)]
    pub fn prof_count(&self, size: usize) -> bool {
        let left = self.prof_left.get().wrapping_sub(size as i64);
        self.prof_left.set(left);
        left < 0
    }
}

pub static EMPTY_HEAP: Heap = Heap::new();
pub static DEAD_HEAP: Heap = Heap::new();
/// The heap of threads past their exit destructor, and in debug mode the
/// owner of every small block's slab (`debug`), used under `ORPHAN_LOCK`:
/// `FIRST_ORPHAN_HEAP`, or a fresh one in a forked child that found the old
/// one half written (`repair_orphan_in_child`).
pub static ORPHAN: AtomicPtr<Heap> = AtomicPtr::new(&FIRST_ORPHAN_HEAP as *const Heap as *mut Heap);
static FIRST_ORPHAN_HEAP: Heap = Heap::new();
pub static ORPHAN_LOCK: Lock = Lock::new();

pub fn orphan_heap() -> &'static Heap {
    // SAFETY: ORPHAN names a static heap or a mapping that is never unmapped.
    unsafe { &*ORPHAN.load(Ordering::Relaxed) }
}

/// The heap that owns the slabs holding sampled blocks (`prof/sample.rs`),
/// used under `prof::table::PROF_LOCK`: `FIRST_PROF_HEAP`, or a fresh one in
/// a forked child that found it half written (`replace_prof_in_child`). No thread's
/// heap; its slabs send the free fast path to the class heap that has no
/// sheaf (`Slab::keep_off_sheaves`), so every free of a sampled block
/// misses the owner compare of `fastpath::free_to_slab` and reaches
/// `remote_free::free_slow`, which hands it to the profile.
pub static PROF: AtomicPtr<Heap> = AtomicPtr::new(&FIRST_PROF_HEAP as *const Heap as *mut Heap);
static FIRST_PROF_HEAP: Heap = Heap::new();

pub fn prof_heap() -> &'static Heap {
    // SAFETY: PROF names a static heap or a mapping that is never unmapped.
    unsafe { &*PROF.load(Ordering::Relaxed) }
}

/// The owner id of the profile heap's slabs (its address, never a thread
/// heap's id nor 0).
#[inline]
pub fn prof_owner() -> usize {
    PROF.load(Ordering::Relaxed) as usize
}

pub const EMPTY: *mut Heap = &EMPTY_HEAP as *const Heap as *mut Heap;
pub const DEAD: *mut Heap = &DEAD_HEAP as *const Heap as *mut Heap;

/// The id a heap stores in `Slab::owner`: the heap's address.
#[inline(always)]
pub fn owner_tag(heap: *const Heap) -> usize {
    heap as usize
}

// ---------------------------------------------------------------------------
// The registry

pub struct Registry {
    pub live: List<Heap>,
    pub pool: *mut Heap,
    pub retired: [[u64; Ev::COUNT]; NUM_CLASSES],
    pub threads_alive: u64,
    pub threads_exited: u64,
}

// SAFETY: the raw pointers are reached only under the registry lock.
unsafe impl Send for Registry {}

impl Registry {
    /// Adds a heap's counters to the retired totals.
    pub fn retire_counters(&mut self, h: &Heap) {
        for (class, c) in h.classes.iter().enumerate() {
            for (i, total) in self.retired[class].iter_mut().enumerate() {
                *total = total.wrapping_add(c.ev.get_index(i));
            }
        }
    }
}

pub static REGISTRY: Locked<Registry> = Locked::new(Registry {
    live: List::new(),
    pool: ptr::null_mut(),
    retired: [[0; Ev::COUNT]; NUM_CLASSES],
    threads_alive: 0,
    threads_exited: 0,
});

/// The registry's generation, for a reader in another process (slubtop,
/// through `anchor`), which cannot take the lock: odd while `live`,
/// `retired`, the thread counts, `ORPHAN` or `PROF` change, even when they
/// are still. A reader that finds it even and the same before and after its
/// reads saw no change half made, and no heap counted twice or missed
/// (a seqlock). Written under the registry lock only.
pub static REGISTRY_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Runs `f` on the registry with its lock held, as one step of
/// `REGISTRY_GENERATION`. Only on the slow paths that create a heap or end a
/// thread, and in a forked child's repairs: two stores more per thread.
pub fn change_registry<R>(f: impl FnOnce(&mut Registry) -> R) -> R {
    REGISTRY.with(|r| {
        // `| 1`: a forked child may find the value its parent's lost thread
        // left odd; this change ends even all the same.
        let odd = REGISTRY_GENERATION.load(Ordering::Relaxed) | 1;
        REGISTRY_GENERATION.store(odd, Ordering::Relaxed);
        // Release fence: the odd value is ordered before the registry writes
        // in `f`. Pairs with the reader's second read of the generation,
        // after its reads of the registry: a reader that saw any of those
        // writes sees the generation changed.
        fence(Ordering::Release);
        let out = f(r);
        // Release: the writes in `f` come before the even value; pairs with
        // the reader's first read (a reader that saw this value sees them).
        REGISTRY_GENERATION.store(odd + 1, Ordering::Release);
        out
    })
}

/// Sums every live heap's counters plus the retired totals into `out`;
/// returns (threads alive, threads exited). With `LockWait::Try` (a signal
/// handler) it never blocks: if the registry lock is taken, it reads the
/// lists without it, which is safe because heaps are never unmapped, only
/// recycled, though a heap exiting at that moment may be missed.
pub fn sum_counters(out: &mut [[u64; Ev::COUNT]; NUM_CLASSES], wait: LockWait) -> (u64, u64) {
    let locked = match wait {
        LockWait::Wait => {
            REGISTRY.lock.lock();
            true
        }
        LockWait::Try => REGISTRY.lock.try_lock(),
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
    add(prof_heap());
    // Heaps are never unmapped: the walk without the lock stays on heaps.
    r.live.iter().for_each(add);
    let threads = (r.threads_alive, r.threads_exited);
    if locked {
        REGISTRY.lock.unlock();
    }
    threads
}

/// What the verification walk counts in the heaps, per class.
pub struct WalkedHeaps {
    /// Free objects on heaps' detached lists.
    pub detached: [u64; NUM_CLASSES],
    /// Slabs on thread partial lists.
    pub thread_partial: [u64; NUM_CLASSES],
    /// Blocks in sheaves.
    pub sheaves: [u64; NUM_CLASSES],
    /// Active slabs.
    pub active: [u64; NUM_CLASSES],
    /// Slabs on `returned` stacks.
    pub returned: [u64; NUM_CLASSES],
}

/// Counts into `w` what the live heaps and the orphan heap hold.
/// Verification walk only; other threads must be quiescent.
pub fn walk_heaps(w: &mut WalkedHeaps) {
    REGISTRY.with(|r| {
        let mut visit = |h: &Heap| {
            for (class, c) in h.classes.iter().enumerate() {
                let bound = (SLAB_BYTES / CLASS_BYTES[class] as usize) as u32;
                w.detached[class] += freelist::list_len(c.detached.get(), bound) as u64;
                w.thread_partial[class] += c.partial.iter().count() as u64;
                w.sheaves[class] += c.sheaf().len() as u64;
                w.active[class] += !c.active.get().is_null() as u64;
                // Acquire: the pushers' links (Release CAS in `give_back`).
                let mut p = c.returned.load(Ordering::Acquire);
                while !p.is_null() && p != crate::slab::CLOSED {
                    w.returned[class] += 1;
                    // SAFETY: slabs on a returned stack are live; the
                    // threads are quiescent.
                    p = unsafe { (*p).next.get() };
                }
            }
        };
        visit(orphan_heap());
        r.live.iter().for_each(visit);
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
    r.live.repair_in_child();
    REGISTRY.lock.reset_in_child();
}

/// In a forked child whose parent had other threads: only the forking thread
/// lives on, so the threads alive are it (if it has a heap) and none of the
/// lost threads, whose heaps stay registered (they own slabs) but will never
/// exit. The background purger, which stays while the program has other
/// threads, counts on this to leave a child whose other threads have exited.
pub fn count_threads_in_child(forking_thread_has_heap: bool) {
    // The lock is free: `repair_registry_in_child` ran first.
    change_registry(|r| {
        r.threads_alive = forking_thread_has_heap as u64;
        purge::set_program_threads(r.threads_alive);
    });
}

/// In a forked child whose parent had other threads, if one of them held
/// `ORPHAN_LOCK`: the orphan heap's lists may be half written, so a fresh
/// heap takes its place. The old one's slabs stay owned by it and are never
/// reached again (what the child frees into them is leaked, never handed out
/// twice); its counters join the retired totals. Runs after
/// `repair_registry_in_child`. Returns whether the lock was held (the
/// orphan heap's lists of zero-size blocks' slabs must be made again:
/// `zero::rebuild_in_child`).
pub fn repair_orphan_in_child() -> bool {
    if !ORPHAN_LOCK.is_locked() {
        return false;
    }
    let fresh = os::map(core::mem::size_of::<Heap>()) as *mut Heap;
    if !fresh.is_null() {
        change_registry(|r| {
            r.retire_counters(orphan_heap());
            // A zeroed mapping is a valid empty heap, as in `create_heap`.
            ORPHAN.store(fresh, Ordering::Relaxed);
        });
    }
    ORPHAN_LOCK.reset_in_child();
    true
}

/// In a forked child whose parent had other threads, one of which held
/// `prof::table::PROF_LOCK` (see `fork`): the profile heap's slab lists may
/// be half written, so a fresh heap takes its place, as for the orphan
/// heap. The old one's slabs keep their owner, which is no heap's any more:
/// frees into them take the remote path and are leaked, never handed out
/// twice. Runs after `repair_registry_in_child`.
pub fn replace_prof_in_child() {
    let fresh = os::map(core::mem::size_of::<Heap>()) as *mut Heap;
    if !fresh.is_null() {
        change_registry(|r| {
            r.retire_counters(prof_heap());
            // A zeroed mapping is a valid empty heap, as in `create_heap`.
            PROF.store(fresh, Ordering::Relaxed);
        });
    }
}
