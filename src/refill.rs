//! The allocation slow path: the refill of a class's free list, in the heap
//! `heap_start::with_slow_heap` gives, from, in order, the active slab's own
//! lists, the thread partial list, the slabs handed back by other threads,
//! the node partial list, a new slab.

use core::ptr;

use crate::background;
use crate::counters::Ev;
use crate::debug;
use crate::freelist;
use crate::heap::{owner_tag, Heap, EMPTY, IDLE_ALLOCS, MAX_THREAD_PARTIAL};
use crate::heap_start::{create_heap, with_slow_heap};
use crate::large;
use crate::large_map::Contents;
use crate::list::End;
use crate::node::NODES;
use crate::options;
use crate::prof::sample;
use crate::purge::give_back::{self, CountedIn};
use crate::purge::pass::PurgeBy;
use crate::release::{
    bound_partials, keep_partial, partial_bound, retire_active_if_empty, sweep_if_due,
    unless_crowded,
};
use crate::segment;
use crate::shared;
use crate::sheaf;
use crate::sheaf_budget;
use crate::size_class::{class_of, ZERO_CLASS};
use crate::sync::{invariant, Ordering};
use crate::tls::{current, own_heap};
use crate::zero;

/// The allocation slow path: the class's free list is empty (or the thread
/// has no heap yet, or debug mode, whose thread heaps own no slab). The
/// arguments come in the order of `malloc`'s and `__rust_alloc`'s own, so
/// that the fast path jumps here with `size` and `align` still in their
/// registers.
#[cold]
#[inline(never)]
pub fn alloc_slow(size: usize, align: usize, class: usize) -> *mut u8 {
    // No allocator lock is held here (see `background`).
    background::start_if_wanted();
    // A zero-size request: the size table's class of its own, which no
    // sheaf serves (`zero`); else the class of its alignment (at most
    // `zero::ALIGN`, a power of two: a class of that size).
    let class = if class != ZERO_CLASS {
        class
    } else if zero::enabled() {
        return zero::alloc();
    } else {
        invariant!(align <= zero::ALIGN);
        class_of(align)
    };
    // --- heap profile: allocations that miss the fast path count down too.
    if own_heap().is_some_and(|heap| heap.prof_count(size)) {
        let me = alloc_slow as *const () as usize;
        let p = sample::sample_small(class, size, align, me);
        if !p.is_null() {
            return p;
        }
    }
    // ---
    alloc_unsampled(class, size, align)
}

/// `alloc_slow` without the profile's countdown. Debug mode's entry: a
/// bigger slot with a red zone (`debug::alloc`), or a large block; the
/// thread's heap is created all the same, for its countdown and its exit.
pub fn alloc_unsampled(class: usize, size: usize, align: usize) -> *mut u8 {
    if debug::enabled() {
        if current() == EMPTY {
            create_heap();
        }
        return match debug::slot_class(size, align) {
            Some(class) => debug::alloc(class, size),
            None => large::alloc(size, align, Contents::Any),
        };
    }
    with_slow_heap(|heap| refill_and_pop(heap, class))
}

fn refill_and_pop(heap: &Heap, class: usize) -> *mut u8 {
    let c = &heap.classes[class];
    if c.detached.get().is_null() {
        // No node lock is held here (the orphan heap's lock comes before
        // them).
        give_back::purge_if_due(CountedIn::Heap(heap), PurgeBy::SlowPath);
        sweep_if_due(heap);
    }
    // Looked at again: the barns' flush frees blocks of our active slabs
    // onto their detached lists, this class's among them.
    if c.detached.get().is_null() {
        // A cold class takes single objects from shared slabs (`shared`).
        if let Some(p) = shared::take_if_cold(heap, class) {
            return p;
        }
        let mut n = sheaf::fill_from_cpu(heap, class);
        if n == 0 {
            n = sheaf::fill_from_barn(heap, class);
        }
        if n != 0 {
            if n == c.sheaf().cap() {
                // The barn had a whole sheaf for it: the thread allocates
                // what others free, and its next take may bring more.
                sheaf_budget::refilled_whole(heap, class);
            }
            // Popped as the fast path pops (a heap of this thread's: its
            // secret is set).
            return c.sheaf().pop(n, heap.secret.get(), &c.ev);
        }
        if !refill(heap, class) {
            return ptr::null_mut();
        }
    }
    // SAFETY: `refill` left a non-empty list of our active slab.
    let obj = unsafe { freelist::pop(&c.detached) };
    freelist::prefetch(c.detached.get());
    // SAFETY: `obj` is ours now.
    unsafe { freelist::clear_link(obj) };
    c.ev.inc(Ev::AllocSlow);
    obj
}

/// Fills `c.detached`, from (in order) the active slab's own lists, the thread
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
    // Bytes at the start of the active slab that its last use carved and
    // that are still resident (it came from its segment unpurged,
    // `segment::take_slab`); 0 for a slab from anywhere else.
    let mut resident_bytes = 0;
    loop {
        let a = c.active.get();
        if !a.is_null() {
            // SAFETY: our active slab is a live descriptor we own.
            let a = unsafe { &*a };
            let list = a.detach_free();
            if !list.is_null() {
                c.detached.set(list);
                c.ev.inc(Ev::RefillOwn);
                return true;
            }
            // A page's worth, at least 4 objects (mimalloc's least
            // extension): touches little of a fresh slab that is not used
            // yet (more would touch pages of a big class for a thread that
            // uses a few of its blocks).
            // With SLUBMALLOC_FREELIST_RANDOM, at least 16 to shuffle.
            let least = if options::get().freelist_random {
                16
            } else {
                4
            };
            // A slab's start that its last use (of any class) carved and
            // that was not purged since is resident already: carved in one
            // go, not a page at a time (one slow path per page saved).
            let batch = (4096 / a.size.get())
                .max(least)
                .max(resident_bytes / a.size.get());
            resident_bytes = 0;
            let (list, n) = a.carve(batch);
            if n > 0 {
                c.detached.set(list);
                a.set_inuse_active();
                return true;
            }
            if !taken && !c.partial.is_empty() {
                let p = c.pop_partial();
                c.push_partial(a, End::Tail);
                c.active.set(p);
                c.ev.inc(Ev::RefillPartial);
                taken = true;
                unless_crowded(heap, class);
                continue;
            }
            if !a.try_make_full(owner_tag(heap)) {
                continue; // a remote free arrived meanwhile
            }
            c.ev.inc(Ev::FullSlabs);
            c.set_active(ptr::null_mut());
        }
        taken = true;
        let p = c.pop_partial();
        if !p.is_null() {
            c.set_active(p);
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
        retire_idle_active(heap, class);
        let (s, resident) = segment::take_slab();
        if s.is_null() {
            return false;
        }
        if resident {
            // SAFETY: as below; a FREE slab keeps the geometry of its last
            // use until `init`.
            resident_bytes = unsafe { (*s).carved() * (*s).size.get() };
        }
        // SAFETY: a free slab from the segment lock is ours alone.
        unsafe { (*s).init(class, owner_tag(heap)) };
        c.ev.inc(Ev::SlabsNew);
        c.set_active(s);
    }
}

/// Before `heap` takes a slab from a segment for `class`: every other warm
/// class whose active slab is empty and that made no allocation while the
/// heap made `IDLE_ALLOCS` gives it back (to its segment: `release` of an
/// empty slab), so that a thread that moves from size to size does not
/// keep a slab per size it has used (mimalloc gives an empty page back
/// after 16 slow paths; `size_cycle` moves through 18 classes); an
/// empty slab its node list kept goes back with it, and first the blocks
/// its sheaf holds go back to their slabs (`sheaf::flush_class`). Whether the slab is
/// empty is counted, a walk of the class's free list, only once per change
/// of the class heap's free count, so that a class that holds live blocks
/// is not walked again at every take; frees by other threads (on the
/// slab's remote list) keep the slab until the class refills. With
/// `slubmalloc_bench_no_counters` nothing is counted, and no active slab
/// is given back.
fn retire_idle_active(heap: &Heap, class: usize) {
    let count = |k: usize, ev: Ev| heap.classes[k].ev.get_index(ev as usize) as u32;
    let allocs = |k: usize| {
        count(k, Ev::AllocFast)
            .wrapping_add(count(k, Ev::AllocSlow))
            .wrapping_add(count(k, Ev::AllocSheaf))
    };
    let warm = heap.warm_classes();
    let (mut total, mut w) = (0u32, warm);
    while w != 0 {
        let k = w.trailing_zeros() as usize;
        w &= w - 1;
        total = total.wrapping_add(allocs(k));
    }
    let mut idle = warm & !(1 << class);
    while idle != 0 {
        let k = idle.trailing_zeros() as usize;
        idle &= idle - 1;
        let c = &heap.classes[k];
        let now = allocs(k);
        if heap.idle_allocs[k].replace(now) != now {
            heap.idle_since[k].set(total);
            continue;
        }
        let frees = count(k, Ev::FreeFast).wrapping_add(count(k, Ev::FreeSheaf));
        if total.wrapping_sub(heap.idle_since[k].get()) < IDLE_ALLOCS
            || heap.idle_frees[k].replace(frees) == frees
        {
            continue;
        }
        // The blocks the class's sheaf holds go back to their slabs first:
        // they keep the active slab, or others, from emptying.
        sheaf::flush_class(heap, c);
        retire_active_if_empty(heap, k);
    }
}

/// Takes slabs from the node list: the first becomes active, more go to the
/// thread partial list until half a slab of free objects is gathered, as
/// long as they fit its bound (`partial_bound`; the list is empty here).
fn take_from_node(heap: &Heap, class: usize) -> bool {
    let node = &NODES[class];
    let c = &heap.classes[class];
    if node.nr_partial.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let _g = node.lock.guard();
    let (mut gathered, mut on_partial) = (0, 0);
    let mut got = false;
    loop {
        let s = node.first();
        if s.is_null() {
            break;
        }
        // SAFETY: listed slabs are live; the node lock is held.
        let slab = unsafe { &*s };
        let free = slab.objects.get() - slab.inuse.get();
        if got && on_partial + free > partial_bound(class) {
            break;
        }
        node.take(slab, owner_tag(heap));
        gathered += free;
        if !got {
            c.set_active(s);
            got = true;
        } else {
            c.push_partial(slab, End::Head);
            on_partial += free;
        }
        if gathered >= slab.objects.get() / 2 || c.partial_count.get() >= MAX_THREAD_PARTIAL {
            break;
        }
    }
    got
}

/// Moves the slabs handed back to us onto the thread partial list, within
/// its bound (`bound_partials`: the surplus to the node). False if none.
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
        c.ev.sub(Ev::ReturnedSlabs, 1);
        keep_partial(heap, class, slab);
    }
    bound_partials(heap, class, MAX_THREAD_PARTIAL);
    true
}
