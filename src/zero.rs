//! Zero-size blocks: what `malloc(0)` hands out (and `calloc` of no bytes,
//! `realloc(NULL, 0)`, the aligned allocations of no bytes at an alignment
//! of up to `ALIGN`), as OpenBSD's malloc and hardened_malloc do: an
//! address of its own for each live block, in memory that is never
//! readable nor writable, so that a program that reads or writes a
//! zero-size block faults there (SIGSEGV) instead of using 16 bytes no
//! one gave it. `SLUBMALLOC_PROTECT_ZERO_SIZE=0` turns it off: size 0 is
//! then served by the smallest class, as glibc serves it.
//!
//! The size table sends size 0 to a class heap of its own
//! (`size_class::ZERO_OFFSET`, `heap::Heap::zero`) that never has a
//! sheaf, so `malloc(0)` reaches the allocation slow path (`refill`), and
//! the slabs here name that class heap, so every free of their blocks
//! reaches the free slow path (`remote_free::free_slow`): neither fast
//! path tests for them.
//!
//! A slab of zero-size blocks is taken from its segment like any slab
//! (its descriptor lives in the segment's header, readable) and its 64 KiB
//! made inaccessible (`os::make_inaccessible`), with `BLOCKS` blocks `ALIGN` bytes
//! apart; its live blocks are the bits of `Slab::zero_live`. Everything
//! happens under the orphan heap's lock (`heap::ORPHAN_LOCK`), whose heap
//! lists the slabs with a free block on its zero class heap. A slab whose
//! last block is freed goes back to its segment, accessible again, unless
//! it is the only one listed; that one goes back at a trim
//! (`give_back_empty`).
//!
//! Statistics: zero-size blocks count in no class: the totals' own count
//! (`Global::zero_size_blocks`, written under the orphan heap's lock); they
//! hold no byte in use, and their slabs, which hold no memory, count in no
//! class's slabs. The verification walk counts their live bits (`walk`).

use crate::counters::{add_locked, global};
use crate::heap::{orphan_heap, ORPHAN_LOCK};
use crate::options;
use crate::os;
use crate::purge::pass;
use crate::segment;
use crate::size_class::{SLAB_BYTES, SLAB_SHIFT, ZERO_OFFSET};
use crate::slab::{double_free, invalid_free, Slab, State};
use crate::sync::invariant;

/// Blocks per slab: a bit each in `Slab::zero_live`.
pub const BLOCKS: u32 = u64::BITS;
/// The distance between two blocks, and their alignment: the slab cut in
/// `BLOCKS`. An access up to that far past a block faults too.
pub const ALIGN: usize = SLAB_BYTES / BLOCKS as usize;
const STRIDE_SHIFT: u32 = SLAB_SHIFT as u32 - BLOCKS.trailing_zeros();
const _: () = assert!(1 << STRIDE_SHIFT == ALIGN);

/// The owner id of the slabs of zero-size blocks: this static's address,
/// no heap's.
static OWNER: u8 = 0;

fn owner() -> usize {
    &OWNER as *const u8 as usize
}

/// Whether zero-size requests get a zero-size block
/// (`SLUBMALLOC_PROTECT_ZERO_SIZE`).
#[inline]
pub fn enabled() -> bool {
    options::get().protect_zero_size
}

/// Whether `slab` is, or was last, a slab of zero-size blocks: the class
/// heap it names (kept while it is FREE, until it serves again).
#[inline]
pub fn names_zero(slab: &Slab) -> bool {
    slab.heap_offset.get() as usize == ZERO_OFFSET
}

/// Whether `slab` is a live slab of zero-size blocks.
#[inline]
pub fn owns(slab: &Slab) -> bool {
    names_zero(slab) && slab.state() == State::Owned
}

/// A zero-size block, or null (errno ENOMEM) if no slab can be had.
pub fn alloc() -> *mut u8 {
    let _g = ORPHAN_LOCK.guard();
    let heap = orphan_heap();
    let list = &heap.zero.partial;
    let mut s = list.first();
    if s.is_null() {
        s = new_slab();
        if s.is_null() {
            return core::ptr::null_mut();
        }
        // SAFETY: a slab we just made, on no list.
        let slab = unsafe { &*s };
        list.push_front(slab);
        slab.on_partial.set(true);
    }
    // SAFETY: slabs on the list are live slabs of zero-size blocks; the
    // lock is held.
    let slab = unsafe { &*s };
    let live = slab.zero_live.get();
    invariant!(live != u64::MAX);
    let i = (!live).trailing_zeros();
    let live = live | 1 << i;
    slab.zero_live.set(live);
    if live == u64::MAX {
        list.remove(slab);
        slab.on_partial.set(false);
    }
    add_locked(&global().zero_size_blocks, 1);
    (slab.start() as usize + ((i as usize) << STRIDE_SHIFT)) as *mut u8
}

/// A slab from a segment, made a slab of zero-size blocks, its memory
/// inaccessible and its pages dropped; null (errno ENOMEM) if none. Lock
/// held.
fn new_slab() -> *mut Slab {
    // A purge that is due runs first, as before any slab a path takes.
    pass::purge_if_due();
    let (s, resident) = segment::take_slab();
    if s.is_null() {
        return s;
    }
    // SAFETY: a free slab from the segment lock is ours alone.
    let slab = unsafe { &*s };
    if !os::make_inaccessible(slab.start(), SLAB_BYTES) {
        // Past the kernel's count of mappings: no zero-size block.
        pass::slabs_freed(segment::free_slab(s));
        os::set_enomem();
        return core::ptr::null_mut();
    }
    if resident {
        os::purge(slab.start(), SLAB_BYTES);
    }
    slab.init_zero(owner(), BLOCKS, STRIDE_SHIFT);
    s
}

/// The index of the live block `p` starts in `slab`, a slab that names
/// the zero class heap; stops the process if it is none. Lock held.
fn live_index(slab: &Slab, p: *mut u8) -> u32 {
    ORPHAN_LOCK.assert_held();
    let offset = p as usize & (SLAB_BYTES - 1);
    let start = offset % ALIGN == 0;
    if slab.state() == State::Free && start {
        // Its slab went back to its segment: every block of it was freed.
        double_free(p);
    }
    if !owns(slab) || !start {
        invalid_free(p);
    }
    let i = (offset >> STRIDE_SHIFT) as u32;
    if slab.zero_live.get() & 1 << i == 0 {
        double_free(p);
    }
    i
}

/// Frees `p`, in `slab`, a slab that names the zero class heap (the free
/// slow path's test); stops the process if `p` is no live zero-size block.
pub fn free(slab: &Slab, p: *mut u8) {
    let _g = ORPHAN_LOCK.guard();
    let i = live_index(slab, p);
    let heap = orphan_heap();
    let live = slab.zero_live.get() & !(1 << i);
    slab.zero_live.set(live);
    add_locked(&global().zero_size_blocks, 1u64.wrapping_neg());
    let list = &heap.zero.partial;
    if live == 0 && slab.on_partial.get() && list.first() != list.last() {
        list.remove(slab);
        slab.on_partial.set(false);
        return discard(slab);
    }
    if !slab.on_partial.get() {
        list.push_front(slab);
        slab.on_partial.set(true);
    }
}

/// The usable size of `p`, in `slab`, a slab that names the zero class
/// heap: 0; stops the process if `p` is no live zero-size block.
pub fn usable_size(slab: &Slab, p: *mut u8) -> usize {
    let _g = ORPHAN_LOCK.guard();
    live_index(slab, p);
    0
}

/// Whether `p` is a live zero-size block of `slab` (no stop: the layout
/// check leaves the others to the free).
pub fn is_live(slab: &Slab, p: *mut u8) -> bool {
    let _g = ORPHAN_LOCK.guard();
    let offset = p as usize & (SLAB_BYTES - 1);
    owns(slab) && offset % ALIGN == 0 && slab.zero_live.get() & 1 << (offset >> STRIDE_SHIFT) != 0
}

/// Sends `slab`, with no live block and on no list, back to its segment,
/// accessible again. Lock held.
fn discard(slab: &Slab) {
    // Accessible before it is free: a slab taken from the segment is
    // written at once. The call only merges a split mapping back, which
    // the kernel does not refuse.
    let _ = os::make_accessible(slab.start(), SLAB_BYTES);
    slab.end_zero();
    pass::slabs_freed(segment::free_slab(slab as *const Slab as *mut Slab));
}

/// The empty slab kept (the only one listed, with no live block) goes
/// back to its segment (`alloc::trim`). Takes the lock.
pub fn give_back_empty() {
    let _g = ORPHAN_LOCK.guard();
    let list = &orphan_heap().zero.partial;
    let s = list.first();
    // SAFETY: slabs on the list are live slabs of zero-size blocks.
    if !s.is_null() && s == list.last() && unsafe { (*s).zero_live.get() } == 0 {
        // SAFETY: as above.
        let slab = unsafe { &*s };
        list.remove(slab);
        slab.on_partial.set(false);
        discard(slab);
    }
}

/// The live zero-size blocks of `slab`, a live slab of them (the
/// verification walk, the orphan heap's lock held).
pub fn live_blocks(slab: &Slab) -> u64 {
    ORPHAN_LOCK.assert_held();
    slab.zero_live.get().count_ones() as u64
}

/// In a forked child whose parent's thread held the orphan heap's lock
/// (`heap::repair_orphan_in_child`, which ran first): the list may be half
/// written, so it is made again from the segments, every slab of zero-size
/// blocks with a free block on it. A bit is one store: the live blocks are
/// as the lost thread left them.
pub fn rebuild_in_child() {
    let list = &orphan_heap().zero.partial;
    list.clear();
    segment::for_each_slab(|slab| {
        if owns(slab) {
            let free = slab.zero_live.get() != u64::MAX;
            slab.on_partial.set(free);
            if free {
                list.push_front(slab);
            }
        }
    });
}

#[cfg(all(test, not(loom)))]
mod tests;
