//! Slabs kept off the sheaves: the slabs of a heap that is no thread's,
//! whose blocks are handed out and given back one at a time under that
//! heap's lock. Two such side heaps (`SideHeap`): debug mode's (`Debug`, the
//! orphan heap, every small block of debug mode) and the heap profile's
//! (`Profile`, the profile heap, every sampled small block). Their slabs
//! send the free fast path to the class heap that has no sheaf
//! (`Slab::keep_off_sheaves`), and their owner is no thread's heap, so every
//! free of their blocks misses the free fast path's owner compare and
//! reaches `remote_free::free_slow`, which tells them by their owner
//! (`SideHeap::owns`) and hands them back to `debug` or `prof::sample`,
//! which check the block and put it back here.
//!
//! One life cycle: a slab is taken from its segment when its class has no
//! slab with a free block (`take`), and listed on the class heap's partial
//! list while it has one; a block given back (`put`) puts its slab at the
//! front, so that the next allocation of the class takes the block freed
//! last (a write after free in debug mode is met at once). A slab left
//! empty goes back to its segment under its node lock, unless it is its
//! class's only listed slab; that one goes back when its class made no
//! allocation while its side heap made `heap::IDLE_ALLOCS` (at the next
//! slab taken), or at a trim (`give_back_empty`). The lists count as a
//! thread heap's partial lists in the statistics (`Ev::ThreadPartial`), and
//! the verification walk counts them (`heap::walk_heaps` the orphan heap's,
//! `count_listed` the profile's); a slab with no free block, on no list,
//! counts as a FULL one (`Ev::FullSlabs`, `walk::is_side_full`).

use crate::counters::Ev;
use crate::freelist::{corrupted_link, get_next, link_is_sane};
use crate::heap::{
    self, orphan_heap, owner_tag, prof_heap, prof_owner, ClassHeap, Heap, IDLE_ALLOCS,
};
use crate::list::End;
use crate::node::{self, NODES};
use crate::prof::table::TABLES;
use crate::purge::pass;
use crate::segment;
use crate::size_class::{NO_SHEAF_OFFSET, NUM_CLASSES};
use crate::slab::Slab;
use crate::sync::{invariant, AtomicU32, Lock, Ordering};

/// The side heaps, each with the slabs it keeps off the sheaves.
#[derive(Clone, Copy)]
pub enum SideHeap {
    /// Debug mode's: the orphan heap, every small block of debug mode
    /// (`debug`), under `heap::ORPHAN_LOCK`.
    Debug,
    /// The heap profile's: the profile heap, every sampled small block
    /// (`prof::sample`), under `prof::table::PROF_LOCK`.
    Profile,
}

/// A side heap's allocations (truncated), and per class their count at the
/// class's last one: the clock by which an idle class's empty slab goes
/// back (`SideHeap::give_back_idle`). Written under the side heap's lock.
struct Clock {
    allocs: AtomicU32,
    last_alloc: [AtomicU32; NUM_CLASSES],
}

static CLOCKS: [Clock; 2] = [const {
    Clock {
        allocs: AtomicU32::new(0),
        last_alloc: [const { AtomicU32::new(0) }; NUM_CLASSES],
    }
}; 2];

impl SideHeap {
    /// The lock that guards the heap's lists and its slabs'.
    fn lock(self) -> &'static Lock {
        match self {
            SideHeap::Debug => &heap::ORPHAN_LOCK,
            SideHeap::Profile => &TABLES.lock,
        }
    }

    fn clock(self) -> &'static Clock {
        &CLOCKS[self as usize]
    }

    /// The heap: a fresh one replaces it in a forked child that found it
    /// half written (`heap::repair_orphan_in_child`,
    /// `heap::replace_prof_in_child`).
    fn heap(self) -> &'static Heap {
        match self {
            SideHeap::Debug => orphan_heap(),
            SideHeap::Profile => prof_heap(),
        }
    }

    /// The owner id of its slabs.
    #[inline(always)]
    fn owner(self) -> usize {
        match self {
            SideHeap::Debug => owner_tag(orphan_heap()),
            SideHeap::Profile => prof_owner(),
        }
    }

    /// Whether `slab` is one of these: its owner is the side heap.
    #[inline(always)]
    pub fn owns(self, slab: &Slab) -> bool {
        // Relaxed: the owner was written under the lock before a block of
        // the slab was handed out, which happened before this free of it.
        slab.owner.load(Ordering::Relaxed) == self.owner()
    }

    /// A block of `class`, and whether it is fresh (carved now, never
    /// handed out); null if no slab can be had. The link of the block after
    /// it on its slab's list is checked too: a list overwritten behind the
    /// block handed out stops the process before the block is used. Lock
    /// held.
    pub fn take(self, class: usize) -> (*mut u8, bool) {
        self.lock().assert_held();
        let heap = self.heap();
        let c = &heap.classes[class];
        let clock = self.clock();
        let now = clock.allocs.load(Ordering::Relaxed).wrapping_add(1);
        clock.allocs.store(now, Ordering::Relaxed);
        clock.last_alloc[class].store(now, Ordering::Relaxed);
        let mut s = c.partial.first();
        if s.is_null() {
            self.give_back_idle(heap, now);
            // A purge that is due runs first, as before any slab a path takes.
            pass::purge_if_due();
            s = segment::alloc_slab();
            if s.is_null() {
                return (core::ptr::null_mut(), false);
            }
            // SAFETY: a free slab from the segment lock is ours alone.
            let slab = unsafe { &*s };
            slab.init(class, self.owner());
            slab.keep_off_sheaves();
            c.ev.inc(Ev::SlabsNew);
            c.push_partial(slab, End::Head);
        }
        // SAFETY: slabs on the list are live, owned by the side heap, whose
        // lock we hold.
        let slab = unsafe { &*s };
        invariant!(slab.heap_offset.get() as usize == NO_SHEAF_OFFSET);
        let (p, fresh) = slab.take_object();
        invariant!(!p.is_null());
        let next = slab.local_free.get();
        // SAFETY: `next` is a free object of the slab, whose lists we hold.
        if !next.is_null() && !link_is_sane(next, unsafe { get_next(next) }) {
            corrupted_link(next);
        }
        if slab.inuse.get() == slab.objects.get() {
            c.unlink_partial(slab);
            c.ev.inc(Ev::FullSlabs);
        }
        c.ev.inc(Ev::AllocSlow);
        (p, fresh)
    }

    /// Gives back `p`, a live block of `slab`, one of these slabs, checked
    /// by the caller: onto the slab's list, the slab to the front of its
    /// class's list, or back to its segment if it is empty and not the
    /// class's only listed slab. Lock held.
    pub fn put(self, slab: &Slab, p: *mut u8) {
        self.lock().assert_held();
        let c = &self.heap().classes[slab.class.get() as usize];
        // SAFETY: `p` is a live block of the slab, whose lists we hold.
        let emptied = unsafe { slab.free_object(p) };
        c.ev.inc(Ev::FreeSlow);
        if slab.on_partial.get() {
            c.unlink_partial(slab);
        } else {
            // It had no free block: on no list, counted as full.
            c.ev.sub(Ev::FullSlabs, 1);
        }
        if emptied && !c.partial.is_empty() {
            return discard(c, slab);
        }
        c.push_partial(slab, End::Head);
    }

    /// Before a slab is taken from a segment: the empty slab of each class
    /// that made no allocation while the side heap made `IDLE_ALLOCS` (`now`
    /// on the clock) goes back to its segment, as a thread's idle classes
    /// give back their empty active slabs (`refill`). Lock held.
    fn give_back_idle(self, heap: &Heap, now: u32) {
        let last_alloc = &self.clock().last_alloc;
        for (class, c) in heap.classes.iter().enumerate() {
            let idle = now.wrapping_sub(last_alloc[class].load(Ordering::Relaxed)) >= IDLE_ALLOCS;
            if let Some(slab) = kept_empty(c).filter(|_| idle) {
                c.unlink_partial(slab);
                discard(c, slab);
            }
        }
    }

    /// Every empty slab kept goes back to its segment (`trim`). Takes the
    /// lock.
    pub fn give_back_empty(self) {
        let _g = self.lock().guard();
        for c in self.heap().classes.iter() {
            if let Some(slab) = kept_empty(c) {
                c.unlink_partial(slab);
                discard(c, slab);
            }
        }
    }

    /// Adds the slabs listed, per class, to `out` (the verification walk).
    /// Takes the lock.
    pub fn count_listed(self, out: &mut [u64; NUM_CLASSES]) {
        let _g = self.lock().guard();
        for (n, c) in out.iter_mut().zip(self.heap().classes.iter()) {
            *n += c.partial.iter().count() as u64;
        }
    }
}

/// The empty slab a class keeps (its only listed one, `SideHeap::put`), if
/// any. The side heap's lock held.
fn kept_empty(c: &ClassHeap) -> Option<&Slab> {
    if c.partial_count.get() != 1 {
        return None;
    }
    // SAFETY: slabs on the side heap's lists are live and its own; its lock
    // is held.
    let slab = unsafe { &*c.partial.first() };
    // Outside debug mode the orphan heap, a thread's past its exit, lists
    // slabs of its own, which are not kept off the sheaves.
    (slab.inuse.get() == 0 && slab.heap_offset.get() as usize == NO_SHEAF_OFFSET).then_some(slab)
}

/// Sends the empty slab `slab`, of class heap `c`, on no list, back to its
/// segment. The side heap's lock held.
fn discard(c: &ClassHeap, slab: &Slab) {
    let _g = NODES[slab.class.get() as usize].lock.guard();
    // Empty, never on a remote list (no heap frees into it remotely).
    let (remote, _) = slab.begin_listing();
    invariant!(remote.is_null());
    node::discard(slab);
    c.ev.inc(Ev::SlabsFreed);
}
