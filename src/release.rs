//! Handing slabs on: an owned slab's lists merged and the slab put on its
//! node list, made FULL, or sent back to its segment (`release`); the
//! thread partial list trimmed; slabs emptied by a local free; an idle
//! class's empty active slab; every slab of a heap when its thread goes
//! idle or exits (`release_all`). The free slow path itself is `free`'s.

use core::ptr;

use crate::counters::Ev;
use crate::cpu_sheaf;
use crate::freelist;
use crate::heap::{ClassHeap, Heap, ThreadGoes};
use crate::list::End;
use crate::node::{self, Emptied, NODES};
use crate::size_class::CLASS_BYTES;
use crate::slab::{RemoteFrees, Slab, CLOSED};
use crate::sync::{invariant, Ordering};

/// A slab that was FULL and is ours again joins the partial list, unless its
/// objects were all freed meanwhile (by us, its owner): then it leaves now;
/// in a crowded program the list goes on to the node (`unless_crowded`).
pub fn keep_partial(heap: &Heap, class: usize, slab: &Slab) {
    if slab.inuse.get() == 0 {
        return release_empty(heap, class, slab);
    }
    heap.classes[class].push_partial(slab, End::Tail);
    unless_crowded(heap, class);
}

/// A crowded program's threads keep no partial slabs (SLUB with no
/// `cpu_partial`): most of them wait for a CPU, and the blocks their slabs
/// get back would wait with them, while the running threads take new
/// slabs; on the node list every thread finds them. So when a slab comes
/// back to its owner (`keep_partial`: handed back by another thread's free,
/// or claimed from FULL by the owner's) and when the active slab runs out
/// (`refill`'s trade with a partial slab), the class's partial list goes to
/// the node list. (The slabs a refill gathers from the node, and one a run
/// of frees adopts, stay until then.)
///
/// Inlined, the test alone (three loads and a compare uncrowded): the
/// refill's loop keeps its shape (`msgpass`, which trades a slab at most
/// refills, took 1.46x the CPU time with the whole of it inlined there).
#[inline(always)]
pub fn unless_crowded(heap: &Heap, class: usize) {
    if cpu_sheaf::crowding() != 0 {
        hand_on_partials(heap, class);
    }
}

/// `unless_crowded`'s work: every partial slab of the class to the node.
#[cold]
#[inline(never)]
fn hand_on_partials(heap: &Heap, class: usize) {
    bound_partials(heap, class, 0);
}

/// Hands partial slabs to the node list, oldest first (they have gathered the
/// most frees), until at most `keep` remain.
pub fn trim_partials(heap: &Heap, class: usize, keep: u32) {
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

/// Free objects a thread keeps per class on its partial list, by object
/// size: SLUB's `cpu_partial` (`slub_set_cpu_partial`: 6, 24, 52 or 120
/// objects) doubled, as SLUB keeps a CPU's partial slabs to hold twice
/// that (`cpu_partial_slabs`). The slabs handed back to the thread count
/// once its refill takes them; its active slab does not count. What does
/// not fit goes to the node list, where every thread finds it.
pub fn partial_bound(class: usize) -> u32 {
    match CLASS_BYTES[class] {
        4096.. => 12,
        1024.. => 48,
        256.. => 104,
        _ => 240,
    }
}

/// The free objects of `slab`, a slab on its owner's partial list: on its
/// local list, never carved, and on its remote list (which `inuse` counts).
pub fn partial_free(slab: &Slab) -> u32 {
    slab.objects.get() - slab.inuse.get() + slab.remote_pending()
}

/// Hands partial slabs to the node list, the emptiest first (the ones
/// another thread, or its segment, makes most of), until at most
/// `max_slabs` remain and they hold at most `partial_bound` free objects.
/// A walk of the partial list, the one lock hold only when slabs go.
pub fn bound_partials(heap: &Heap, class: usize, max_slabs: u32) {
    if !over_bound(heap, class, max_slabs) {
        return;
    }
    let _g = NODES[class].lock.guard();
    bound_partials_locked(heap, class, max_slabs);
}

/// `bound_partials` with the node lock held.
fn bound_partials_locked(heap: &Heap, class: usize, max_slabs: u32) {
    NODES[class].lock.assert_held();
    let c = &heap.classes[class];
    while over_bound(heap, class, max_slabs) {
        let Some(slab) = c.partial.iter().max_by_key(|s| partial_free(s)) else {
            return;
        };
        c.unlink_partial(slab);
        release(heap, class, slab, ptr::null_mut());
    }
}

/// Whether the class's partial list holds more than `max_slabs` slabs or
/// more than `partial_bound` free objects.
fn over_bound(heap: &Heap, class: usize, max_slabs: u32) -> bool {
    let c = &heap.classes[class];
    c.partial_count.get() > max_slabs
        || c.partial.iter().map(partial_free).sum::<u32>() > partial_bound(class)
}

/// `release`s every slab of the thread partial list. Node lock held.
fn release_partials(heap: &Heap, class: usize) {
    NODES[class].lock.assert_held();
    let mut p = heap.classes[class].take_partials();
    while !p.is_null() {
        // SAFETY: slabs on our partial list are live and ours.
        let slab = unsafe { &*p };
        p = slab.next.get();
        release(heap, class, slab, ptr::null_mut());
    }
}

/// A local free emptied `slab`. A slab on the partial list goes back to its
/// segment (or, for a class of few objects per slab, to the node list,
/// which keeps a few, `node::min_partial`), so a thread does not sit on
/// memory it freed; the active slab stays. No list walk: an empty slab's objects are
/// all on `local_free` or uncarved, and none can be on its remote list
/// (those count in `inuse`).
#[cold]
#[inline(never)]
pub fn slab_emptied(heap: &Heap, slab: &Slab) {
    if !slab.on_partial.get() {
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
    // Empty, so nothing on its remote list (`inuse` counts those).
    let (remote, _) = slab.begin_listing();
    invariant!(remote.is_null());
    if node.should_discard_empty(slab.objects.get(), Emptied::ByItsOwner) {
        node::discard(slab);
        heap.classes[class].ev.inc(Ev::SlabsFreed);
    } else {
        node.add(slab, RemoteFrees::NoneCame);
    }
}

/// Hands an owned slab to the node: its lists (and `detached`, the heap's
/// list if it was active) are merged, counted, and the slab goes on the node
/// list, becomes FULL, or returns to its segment if empty. Node lock held.
pub fn release(heap: &Heap, class: usize, slab: &Slab, detached: *mut u8) {
    NODES[class].lock.assert_held();
    let node = &NODES[class];
    let (free, remote) = slab.list_with(detached);
    if free == 0 {
        node.make_full(slab);
    } else if free == slab.objects.get()
        && node.should_discard_empty(slab.objects.get(), Emptied::ByItsOwner)
    {
        node::discard(slab);
        heap.classes[class].ev.inc(Ev::SlabsFreed);
    } else {
        node.add(slab, remote);
    }
}

/// Gives the empty active slab of an idle class `k` back (to its segment:
/// `release` of an empty slab), with the class's empty slab that its node
/// list kept; a class whose active slab holds a live block keeps it.
pub fn retire_active_if_empty(heap: &Heap, k: usize) {
    let c = &heap.classes[k];
    let a = c.active.get();
    // SAFETY: our active slab is live and ours.
    if a.is_null() || !active_is_empty(c, unsafe { &*a }) {
        return;
    }
    let _g = NODES[k].lock.guard();
    c.set_active(ptr::null_mut());
    // SAFETY: as above.
    release(heap, k, unsafe { &*a }, c.detached.replace(ptr::null_mut()));
    // With it, the class's empty slab that its node list kept.
    NODES[k].discard_empty();
}

/// Whether every object of the active slab `a` of class heap `c` is free:
/// `inuse` counts the objects neither on its local list nor uncarved, so
/// those on the heap's detached list must make it up (an object on its
/// remote list counts in `inuse` too, so a slab with remote frees not
/// taken yet reads as in use).
fn active_is_empty(c: &ClassHeap, a: &Slab) -> bool {
    let bound = a.objects.get();
    freelist::list_len(c.detached.get(), bound) == a.inuse.get()
}

/// Slow paths of a heap from one sweep of its classes to the next
/// (`sweep_if_due`).
const SWEEP_EVERY: u32 = 64;

/// Remote frees waiting on a class's active slab below which the sweep
/// leaves the class's slabs with their owner whatever it allocates.
const SWEEP_LEAST_REMOTE: u32 = 4;

/// At every `SWEEP_EVERY`th slow path of `heap`: each warm class that
/// allocated from its sheaf at least as much as from its slabs since the
/// last sweep, whose active slab holds `SWEEP_LEAST_REMOTE` blocks freed by
/// other threads and not taken yet, and whose slabs (active and partial)
/// hold more such blocks (their remote counts, a load per slab) than the
/// class allocated from them, hands its slabs on (`hand_on_class`). Such a
/// class is fed by its sheaf (from the barn) or not used, so its slabs'
/// free blocks would wait there for a refill that does not come, while
/// other threads take new slabs. A thread that gets
/// no remote frees, as a single-threaded program, only counts its slow
/// paths and reads its active slabs' counts.
pub fn sweep_if_due(heap: &Heap) {
    let n = heap.slow_paths.get() + 1;
    if n < SWEEP_EVERY {
        heap.slow_paths.set(n);
        return;
    }
    heap.slow_paths.set(0);
    let mut warm = heap.warm_classes();
    while warm != 0 {
        let class = warm.trailing_zeros() as usize;
        warm &= warm - 1;
        let c = &heap.classes[class];
        let allocs = (c.ev.get(Ev::AllocFast) + c.ev.get(Ev::AllocSlow)) as u32;
        let since = allocs.wrapping_sub(heap.swept_allocs[class].replace(allocs));
        let sheaf_allocs = c.ev.get(Ev::AllocSheaf) as u32;
        let sheaf_since =
            sheaf_allocs.wrapping_sub(heap.swept_sheaf_allocs[class].replace(sheaf_allocs));
        // A class that allocates from its slabs more than from its sheaf
        // takes its remote frees at its refills: a producer whose blocks a
        // consumer frees recycles its slabs.
        if sheaf_since < since {
            continue;
        }
        let a = c.active.get();
        // SAFETY: our active slab is live and ours.
        let on_active = (!a.is_null()).then(|| unsafe { &*a }.remote_pending());
        // The partial slabs' descriptors are read only for a class whose
        // active slab gets remote frees: the sweep of a thread that gets
        // none reads a line per warm class, not one per slab.
        let on_active = on_active.unwrap_or(0);
        if on_active < SWEEP_LEAST_REMOTE {
            continue;
        }
        let waiting = on_active + c.partial.iter().map(|s| s.remote_pending()).sum::<u32>();
        if waiting > since {
            hand_on_class(heap, class, ptr::null_mut());
        }
    }
}

/// Hands every slab `class` holds in `heap` (its active slab with the
/// detached list, its partial slabs, the slabs handed back to it) to the
/// node list, or to their segments if empty, in one hold of the node lock
/// (none if it holds no slab). `after` is what its `returned` stack holds
/// then: empty, or `CLOSED` at the thread's exit.
fn hand_on_class(heap: &Heap, class: usize, after: *mut Slab) {
    let c = &heap.classes[class];
    // Acquire: pairs with the Release CAS in `give_back`.
    let mut r = c.returned.swap(after, Ordering::Acquire);
    while !r.is_null() && r != CLOSED {
        // SAFETY: slabs on our returned stack are live and ours.
        let slab = unsafe { &*r };
        r = slab.next.get();
        c.ev.sub(Ev::ReturnedSlabs, 1);
        c.push_partial(slab, End::Tail);
    }
    if c.active.get().is_null() && c.partial.is_empty() {
        return;
    }
    let _g = NODES[class].lock.guard();
    let a = c.set_active(ptr::null_mut());
    if !a.is_null() {
        // SAFETY: our active slab is live and ours.
        release(
            heap,
            class,
            unsafe { &*a },
            c.detached.replace(ptr::null_mut()),
        );
    }
    release_partials(heap, class);
}

/// `release`s every slab of `heap` (its thread goes idle or exits). At its
/// exit, slabs can no longer be handed back to it.
pub fn release_all(heap: &Heap, goes: ThreadGoes) {
    let after = match goes {
        ThreadGoes::Idle => ptr::null_mut(),
        ThreadGoes::Exits => CLOSED,
    };
    for class in 0..heap.classes.len() {
        // A cold class owns no slab, and none comes back to it (`shared`):
        // its class heap is not even read.
        if heap.is_warm(class) {
            hand_on_class(heap, class, after);
        }
    }
}
