//! `SLUBMALLOC_DEBUG=1`, in the spirit of `slub_debug=FZP`: red zones after
//! each small block, checked on free; poisoned free blocks, checked on reuse;
//! the link of every block handed out, and of the one after it, checked.
//!
//! Chosen at start-up and free when off. Debug mode keeps off the paths
//! and has two entries: `alloc` (from `refill::alloc_unsampled`) and `free`
//! (from `remote_free::free_slow`); besides, the entry points that answer
//! for a block's size ask for it (`realloc`, `malloc_usable_size`, the
//! layout check, the statistics' `cache_for_size`), and `trim` gives back
//! its empty slabs. Every small block of debug mode comes
//! from a slab of the orphan heap kept off the sheaves (`NO_SHEAF_OFFSET`,
//! as the heap profile's are), under `ORPHAN_LOCK`; a thread's heap then
//! owns no slab and its lists stay empty, so every allocation takes the
//! slow path to `alloc`, and every free of a debug block misses the free
//! fast path's owner compare and reaches `free`. The fast paths do not test
//! for debug mode at all. The orphan heap's counters are summed with the
//! threads' (the statistics, their walk, slubtop; its listed slabs count
//! as thread partial slabs), and a forked child that
//! finds `ORPHAN_LOCK` taken replaces that heap, leaking its debug slabs
//! (`heap::repair_orphan_in_child`).
//!
//! A debug block of `n` bytes takes a slot of at least `n + 9` bytes:
//! `[n user bytes][red zone, at least 1 byte of RED][n as a u64]`. A free
//! block is `[link][POISON ...]`. Large blocks get no red zone.

use crate::counters::Ev;
use crate::freelist::{self, corrupted_link, get_next, link_is_sane};
use crate::heap::{orphan_heap, ClassHeap, Heap, IDLE_ALLOCS, ORPHAN_LOCK};
use crate::node::{self, NODES};
use crate::options;
use crate::os;
use crate::segment::{self, slab_of};
use crate::size_class::{class_for, NO_SHEAF_OFFSET, NUM_CLASSES};
use crate::slab::{double_free, invalid_free, Slab, State};
use crate::sync::{invariant, AtomicU32, Ordering};

/// Debug blocks handed out (truncated), and per class their count at the
/// class's last one: the clock by which an idle class's empty slab goes
/// back (`give_back_idle`). Written under `ORPHAN_LOCK`.
static ALLOCS: AtomicU32 = AtomicU32::new(0);
static LAST_ALLOC: [AtomicU32; NUM_CLASSES] = [const { AtomicU32::new(0) }; NUM_CLASSES];

const RED: u8 = 0xbb;
const POISON: u8 = 0x6b;
const SIZE_WORD: usize = 8;
/// How much bigger than the request a debug slot is, at least.
pub const EXTRA_BYTES: usize = 1 + SIZE_WORD;
/// The link word at the start of a free block is not poisoned.
const LINK_WORD: usize = 8;

/// Whether debug mode is on (`SLUBMALLOC_DEBUG=1`).
#[inline]
pub fn enabled() -> bool {
    options::get().debug
}

/// The class of the slot a debug block of `size` bytes at `align` takes, or
/// None if it needs a large block.
pub fn slot_class(size: usize, align: usize) -> Option<usize> {
    size.checked_add(EXTRA_BYTES)
        .and_then(|need| class_for(need, align))
}

/// Arms a debug block just allocated in a slot of its `slot_class`: checks
/// the poison of the free slot and writes the red zone and the size word.
pub fn arm(p: *mut u8, size: usize) {
    // SAFETY: `p` is a live slot of a slab; its descriptor is mapped.
    let slot = unsafe { (*slab_of(p)).size.get() } as usize;
    check_poison(p, slot);
    // SAFETY: the slot is ours and `size + 9 <= slot`.
    unsafe {
        core::ptr::write_bytes(p.add(size), RED, slot - SIZE_WORD - size);
        (p.add(slot - SIZE_WORD) as *mut u64).write_unaligned(size as u64);
    }
}

/// Checks the red zone of a block being freed and poisons it. A block whose
/// first word is already a valid link is left to the double-free check.
pub fn on_free(slab: &Slab, p: *mut u8) {
    // SAFETY: `p` is a slot of a slab in use (checked by the caller).
    if unsafe { crate::slab::looks_free(p) } {
        return;
    }
    let slot = slab.size.get() as usize;
    let size = requested_size_in(p, slot);
    for i in size..slot - SIZE_WORD {
        // SAFETY: `i < slot`, inside the block.
        if unsafe { *p.add(i) } != RED {
            os::fatal(
                "heap overflow: red zone after the block overwritten",
                p as usize + i,
            );
        }
    }
    // SAFETY: the block is being freed; all of it past the link is ours.
    unsafe { core::ptr::write_bytes(p.add(LINK_WORD), POISON, slot - LINK_WORD) };
}

/// Poisons one freshly carved object of `slot` bytes (all but its first
/// word), so that its first use checks clean.
pub fn poison(obj: *mut u8, slot: usize) {
    // SAFETY: `obj` is an object of `slot` bytes that the caller holds.
    unsafe { core::ptr::write_bytes(obj.add(LINK_WORD), POISON, slot - LINK_WORD) };
}

fn check_poison(p: *mut u8, slot: usize) {
    for i in LINK_WORD..slot {
        // SAFETY: `i < slot`, inside the block.
        if unsafe { *p.add(i) } != POISON {
            os::fatal(
                "write after free: a freed block was modified",
                p as usize + i,
            );
        }
    }
}

fn requested_size_in(p: *mut u8, slot: usize) -> usize {
    // SAFETY: the size word lies inside the slot.
    let size = unsafe { (p.add(slot - SIZE_WORD) as *const u64).read_unaligned() } as usize;
    if size > slot - SIZE_WORD - 1 {
        os::fatal(
            "heap overflow: red zone size word overwritten",
            p as usize + slot - SIZE_WORD,
        );
    }
    size
}

/// The size the program asked for (what `malloc_usable_size` reports).
pub fn requested_size(slab: &Slab, p: *mut u8) -> usize {
    requested_size_in(p, slab.size.get() as usize)
}

/// Whether `slab`, a slab whose frees take the free slow path
/// (`NO_SHEAF_OFFSET`), is one of debug mode's: the orphan heap owns it.
#[inline]
pub fn owns(slab: &Slab) -> bool {
    // Relaxed: the owner was written under `ORPHAN_LOCK` before the block
    // was handed out, which happened before this free of it.
    slab.owner.load(Ordering::Relaxed) == orphan_heap() as *const Heap as usize
}

/// Debug mode's allocation of a small slot of `class` for a block of
/// `size` bytes (`slot_class`), armed; null (errno ENOMEM) if no slab can
/// be had.
pub fn alloc(class: usize, size: usize) -> *mut u8 {
    let p = {
        let _g = ORPHAN_LOCK.guard();
        take_block(orphan_heap(), class)
    };
    if !p.is_null() {
        arm(p, size);
    }
    p
}

/// One free block of `class` from the debug slabs, which the orphan heap
/// keeps on its partial list while they have a free block; the slab of the
/// block freed last comes first, so that a write after free is caught by
/// the very next allocation of the class. A fresh slot is poisoned, so that
/// `arm` finds it clean. `ORPHAN_LOCK` held.
fn take_block(heap: &Heap, class: usize) -> *mut u8 {
    ORPHAN_LOCK.assert_held();
    let c = &heap.classes[class];
    let now = ALLOCS.load(Ordering::Relaxed).wrapping_add(1);
    ALLOCS.store(now, Ordering::Relaxed);
    LAST_ALLOC[class].store(now, Ordering::Relaxed);
    let mut s = c.partial.first();
    if s.is_null() {
        give_back_idle(heap, now);
        s = segment::alloc_slab();
        if s.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: a free slab from the segment lock is ours alone.
        let slab = unsafe { &*s };
        slab.init(class, heap as *const Heap as usize);
        slab.keep_off_sheaves();
        c.ev.inc(Ev::SlabsNew);
        c.push_partial(slab, false);
    }
    // SAFETY: slabs on the list are live, owned by the orphan heap, whose
    // lock we hold.
    let slab = unsafe { &*s };
    let (p, fresh) = slab.take_object();
    invariant!(!p.is_null());
    if fresh {
        poison(p, slab.size.get() as usize);
    }
    // The next block's link too: a list overwritten behind the block
    // handed out stops the process before the block is used.
    let next = slab.local_free.get();
    // SAFETY: `next` is a free object of the slab, whose lists we hold.
    if !next.is_null() && !link_is_sane(next, unsafe { get_next(next) }) {
        corrupted_link(next);
    }
    if slab.inuse.get() == slab.objects.get() {
        c.unlink_partial(slab);
    }
    c.ev.inc(Ev::AllocSlow);
    p
}

/// Debug mode's free of `p`, in `slab`, one of its slabs (`owns`): the
/// live-block tests, the red zone checked and the block poisoned, then onto
/// its slab's list under `ORPHAN_LOCK`, the slab to the front of the
/// class's list. A slab left empty goes back to its segment unless it is
/// the only one listed.
pub fn free(slab: &Slab, p: *mut u8) {
    let _g = ORPHAN_LOCK.guard();
    let heap = orphan_heap();
    // Rechecked under the lock: a slab emptied meanwhile by another
    // thread went back to its segment.
    if slab.state() == State::Free && slab.is_slot_start(p) {
        double_free(p);
    }
    if slab.state() != State::Owned || !owns(slab) || !slab.is_object_start(p) {
        invalid_free(p);
    }
    let bound = slab.objects.get();
    // SAFETY: `p` is a carved slot of the slab, whose lists we hold.
    if unsafe { crate::slab::looks_free(p) }
        && freelist::list_contains(slab.local_free.get(), p, bound)
    {
        double_free(p);
    }
    on_free(slab, p);
    let class = slab.class.get() as usize;
    let c = &heap.classes[class];
    // SAFETY: `p` is a live block of the slab, whose lists we hold.
    let emptied = unsafe { slab.free_object(p) };
    c.ev.inc(Ev::FreeSlow);
    if slab.on_partial.get() {
        c.unlink_partial(slab);
    }
    if emptied && !c.partial.is_empty() {
        return discard(c, slab);
    }
    c.push_partial(slab, false);
}

/// The empty slab a class keeps (its only listed one, `free`), if any.
fn kept_empty(c: &ClassHeap) -> Option<&Slab> {
    if c.partial_count.get() != 1 {
        return None;
    }
    // SAFETY: slabs on the orphan heap's lists are live and its own; its
    // lock is held.
    let slab = unsafe { &*c.partial.first() };
    // The orphan heap of a thread past its exit lists slabs of its own.
    (slab.inuse.get() == 0 && slab.heap_offset.get() as usize == NO_SHEAF_OFFSET).then_some(slab)
}

/// Before a slab is taken from a segment: the empty slab of each class
/// that made no allocation while debug mode made `IDLE_ALLOCS` (`now` on
/// the clock) goes back to its segment, as a thread's idle classes give
/// back their empty active slabs (`refill`). `ORPHAN_LOCK` held.
fn give_back_idle(heap: &Heap, now: u32) {
    for (class, c) in heap.classes.iter().enumerate() {
        let idle = now.wrapping_sub(LAST_ALLOC[class].load(Ordering::Relaxed)) >= IDLE_ALLOCS;
        if let Some(slab) = kept_empty(c).filter(|_| idle) {
            c.unlink_partial(slab);
            discard(c, slab);
        }
    }
}

/// Every empty slab debug mode keeps goes back to its segment (`trim`).
pub fn give_back_empty() {
    let _g = ORPHAN_LOCK.guard();
    for c in orphan_heap().classes.iter() {
        if let Some(slab) = kept_empty(c) {
            c.unlink_partial(slab);
            discard(c, slab);
        }
    }
}

/// Sends the empty debug slab `slab`, of class heap `c`, on no list, back
/// to its segment. `ORPHAN_LOCK` held.
fn discard(c: &ClassHeap, slab: &Slab) {
    let _g = NODES[slab.class.get() as usize].lock.guard();
    // Empty, never on a remote list (no heap frees into it remotely).
    let remote = slab.begin_listing();
    invariant!(remote.is_null());
    node::discard(slab);
    c.ev.inc(Ev::SlabsFreed);
}
