//! `SLUBMALLOC_DEBUG=1`, in the spirit of `slub_debug=FZP`: red zones after
//! each small block, checked on free; poisoned free blocks, checked on reuse;
//! every free list followed with its links checked on each refill.
//!
//! Chosen at start-up and free when off: in debug mode the thread heaps keep
//! their fast-path list empty and tag slab owners, so every allocation and
//! free takes the slow path, which is where the checks live. The fast paths
//! do not test for debug mode at all.
//!
//! A debug block of `n` bytes takes a slot of at least `n + 9` bytes:
//! `[n user bytes][red zone, at least 1 byte of RED][n as a u64]`. A free
//! block is `[link][POISON ...]`. Large blocks get no red zone.

use crate::freelist::get_next;
use crate::options;
use crate::os;
use crate::segment::slab_of;
use crate::size_class::class_for;
use crate::slab::Slab;

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

/// Poisons freshly carved objects, so that their first use checks clean.
pub fn poison_list(mut obj: *mut u8, slot: usize) {
    while !obj.is_null() {
        poison(obj, slot);
        // SAFETY: `obj` is a free object that we own.
        obj = unsafe { get_next(obj) };
    }
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
