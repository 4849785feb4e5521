//! `SLUBMALLOC_DEBUG=1`, in the spirit of `slub_debug=FZP`: red zones after
//! each small block, checked on free; poisoned free blocks, checked on reuse;
//! the link of every block handed out, and of the one after it, checked.
//!
//! Chosen at start-up and free when off. Debug mode keeps off the paths
//! and has two entries: `alloc` (from `refill::alloc_unsampled`) and `free`
//! (from `remote_free::free_slow`); besides, the entry points that answer
//! for a block's size ask for it (`realloc`, `malloc_usable_size`, the
//! layout check, the statistics' `cache_for_size`), and `trim` gives back
//! its empty slabs. Every small block of debug mode comes from a slab of
//! the orphan heap kept off the sheaves (`SideHeap::Debug`, under
//! `ORPHAN_LOCK`); a thread's heap then owns no slab and its lists stay
//! empty, so every allocation takes the slow path to `alloc`, and every
//! free of a debug block misses the free fast path's owner compare and
//! reaches `free`. The fast paths do not test for debug mode at all. The
//! orphan heap's counters are summed with the threads' (the statistics,
//! their walk, slubtop; its listed slabs count as thread partial slabs),
//! and a forked child that finds `ORPHAN_LOCK` taken replaces that heap,
//! leaking its debug slabs (`heap::repair_orphan_in_child`).
//!
//! A debug block of `n` bytes takes a slot of at least `n + 9` bytes:
//! `[n user bytes][red zone, at least 1 byte of RED][n as a u64]`. A free
//! block is `[link][POISON ...]`. Large blocks get no red zone.

use crate::freelist;
use crate::heap::ORPHAN_LOCK;
use crate::options;
use crate::os;
use crate::segment::slab_of;
use crate::side_slabs::SideHeap;
use crate::size_class::class_for;
use crate::slab::{double_free, invalid_free, Slab, State};

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

/// Poisons a freshly carved slot (all but its first word), so that its
/// first use checks clean.
pub fn poison(p: *mut u8) {
    // SAFETY: `p` is a live slot of a slab; its descriptor is mapped.
    let slot = unsafe { (*slab_of(p)).size.get() } as usize;
    // SAFETY: the slot is the caller's, `slot` bytes.
    unsafe { core::ptr::write_bytes(p.add(LINK_WORD), POISON, slot - LINK_WORD) };
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

/// Debug mode's allocation of a small slot of `class` for a block of
/// `size` bytes (`slot_class`), armed; null (errno ENOMEM) if no slab can
/// be had. A fresh slot is poisoned first, so that `arm` finds it clean.
pub fn alloc(class: usize, size: usize) -> *mut u8 {
    let p = {
        let _g = ORPHAN_LOCK.guard();
        let (p, fresh) = SideHeap::Debug.take(class);
        if fresh {
            poison(p);
        }
        p
    };
    if !p.is_null() {
        arm(p, size);
    }
    p
}

/// Debug mode's free of `p`, in `slab`, one of its slabs
/// (`SideHeap::Debug`): the live-block tests, the red zone checked and the
/// block poisoned, then back to its slab under `ORPHAN_LOCK`.
pub fn free(slab: &Slab, p: *mut u8) {
    let _g = ORPHAN_LOCK.guard();
    // Rechecked under the lock: a slab emptied meanwhile by another
    // thread went back to its segment.
    if slab.state() == State::Free && slab.is_slot_start(p) {
        double_free(p);
    }
    if slab.state() != State::Owned || !SideHeap::Debug.owns(slab) || !slab.is_object_start(p) {
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
    SideHeap::Debug.put(slab, p);
}
