//! The check of a free that names its block's size: Rust's `dealloc` and
//! `realloc` (the `Layout`), C23's `free_sized` and `free_aligned_sized`,
//! C++'s sized `operator delete`. The block must be one that allocation
//! serves for that size and alignment; else the process stops with a
//! message that names the address, the size and alignment given and the
//! block's own size ("dealloc with the wrong layout"). A free that took
//! the size on trust would put a 1 MiB block on a 64-byte class's free
//! list, or a 64-byte block in the large-block cache as 1 MiB.
//!
//! What passes, for a block of class C (`size_class::CLASS_BYTES[C]`
//! bytes) or a large block whose mapping is L bytes:
//! - small: the size is at most C's bytes, and some request of at most the
//!   size, at the alignment, is served from C (`size_class::class_for`; in
//!   debug mode the slot classes, the size plus the red zone,
//!   `debug::slot_class`). A realloc in place keeps a block in C only for a
//!   size served from C, so the layout it leaves passes; and the nightly
//!   `Allocator` trait hands out the whole class and takes back any size
//!   between the request and that: those pass too.
//! - large: the size and alignment are served as a large block, the
//!   address has the alignment, and the mapping holds the size and is at
//!   most `large::MAX_MAPPING_PER_REQUEST` times its pages.
//! - zero-size (`zero`): the size is 0 and the address has the alignment.
//! - medium: the size and alignment are served above the classes, the
//!   address has the alignment, and the size needs the span's slabs, as
//!   many as it has (`medium::keeps`: what a realloc in place keeps).
//!
//! What cannot be told: a size within the block's class (64 bytes and 49
//! are both served from the 64-byte class), a large block's size within
//! its mapping's slack, an alignment the block has by chance. Pointers
//! that are not the start of a live block are left to the free, which
//! names them (an invalid pointer, a double free).
//!
//! The common case costs the free fast path one compare: the class the
//! table gives for the size against the slab's (`fastpath::free_of_class`).
//! Everything else comes here, out of line: another class, an alignment
//! above 16 that moved the block to another class, a slab of the heap
//! profile, debug mode's slot classes, sizes above the table, large blocks.

use crate::debug;
use crate::large;
use crate::medium;
use crate::os;
use crate::segment::{self, slab_of};
use crate::size_class::{class_for, CLASS_BYTES};
use crate::slab::{looks_free, State};
use crate::zero;

/// A size and an alignment a block may have been asked for with.
#[derive(Clone, Copy)]
pub struct Asked {
    pub size: usize,
    pub align: usize,
}

/// Stops the process unless the block at `p` is one that a request of
/// `size` bytes at `align` is served with (see the module's header).
/// Returns quietly for a pointer that is not the start of a live block:
/// the free reports those.
#[cold]
#[inline(never)]
pub fn check(p: *mut u8, size: usize, align: usize) {
    check_any(p, &[Asked { size, align }]);
}

/// `check` for a block that any of `asked` may have made (C's frees: a
/// size given to `malloc`, or to `calloc`, which aligns to 16). The
/// message names the first.
#[cold]
#[inline(never)]
pub fn check_any(p: *mut u8, asked: &[Asked]) {
    let Some(block) = block_at(p) else {
        return;
    };
    if !asked.iter().any(|&a| block.serves(p, a)) {
        wrong_layout(p, asked[0], block.bytes());
    }
}

/// What `p` starts, as far as the check needs it.
enum Block {
    /// A block of a slab of `class`; `asked` is the size debug mode
    /// recorded in it (0 outside debug mode).
    Small { class: usize, asked: usize },
    /// A large block in a mapping of `len` bytes.
    Large { len: usize },
    /// A medium block in a span of `len` bytes.
    Medium { len: usize },
    /// A zero-size block.
    Zero,
}

/// The live block `p` starts, or None: not a block's start (an interior
/// or made-up pointer, one of a free slab, a large block no longer in the
/// table), or one that debug mode finds free (its first word a free-list
/// link): the free names those misuses itself.
fn block_at(p: *mut u8) -> Option<Block> {
    if !segment::contains(p) {
        return large::usable_size(p).map(|len| Block::Large { len });
    }
    // SAFETY: `p` is inside a mapped segment.
    let slab = unsafe { &*slab_of(p) };
    if let Some(len) = medium::block_bytes(slab, p) {
        return Some(Block::Medium { len });
    }
    if zero::names_zero(slab) {
        return zero::is_live(slab, p).then_some(Block::Zero);
    }
    if slab.state() == State::Free || !slab.is_object_start(p) {
        return None;
    }
    let class = slab.class.get() as usize;
    if !debug::enabled() {
        return Some(Block::Small { class, asked: 0 });
    }
    // SAFETY: `p` starts an object of the slab, which it may read.
    if unsafe { looks_free(p) } {
        return None;
    }
    let asked = debug::requested_size(slab, p);
    Some(Block::Small { class, asked })
}

impl Block {
    /// Whether allocation serves `asked` with this block, at `p`.
    fn serves(&self, p: *mut u8, asked: Asked) -> bool {
        if !asked.align.is_power_of_two() {
            return false;
        }
        let debug = debug::enabled();
        // The bytes a debug slot holds past the request.
        let extra = if debug { debug::EXTRA_BYTES } else { 0 };
        let class_of = |size: usize| {
            size.checked_add(extra)
                .and_then(|n| class_for(n, asked.align))
        };
        match *self {
            Block::Small { class, .. } => {
                let bytes = CLASS_BYTES[class] as usize;
                // The sizes at most `asked.size` fall in ranges of one
                // class each: trying each range's last size, and the size
                // itself, tries every class a smaller request gets.
                asked.size.saturating_add(extra) <= bytes
                    && CLASS_BYTES
                        .iter()
                        .filter_map(|&b| (b as usize).checked_sub(extra))
                        .filter(|&s| s < asked.size)
                        .chain([asked.size])
                        .any(|s| class_of(s) == Some(class))
            }
            Block::Large { len } => {
                class_of(asked.size).is_none()
                    && p as usize & (asked.align - 1) == 0
                    && large::may_hold(len, asked.size)
            }
            Block::Medium { len } => {
                class_of(asked.size).is_none()
                    && p as usize & (asked.align - 1) == 0
                    && medium::keeps(len, asked.size, asked.align)
            }
            Block::Zero => asked.size == 0 && p as usize & (asked.align - 1) == 0,
        }
    }

    /// The block's own size, for the message: its class's bytes, the size
    /// debug mode recorded, or the large block's mapping.
    fn bytes(&self) -> usize {
        match *self {
            Block::Small { asked, .. } if debug::enabled() => asked,
            Block::Small { class, .. } => CLASS_BYTES[class] as usize,
            Block::Large { len } | Block::Medium { len } => len,
            Block::Zero => 0,
        }
    }
}

/// Stops the process: the block at `p` is not one `asked` is served with.
#[cold]
#[inline(never)]
fn wrong_layout(p: *mut u8, asked: Asked, block_bytes: usize) -> ! {
    os::fatal_with(
        "dealloc with the wrong layout",
        p as usize,
        &[
            ("size", asked.size as u64),
            ("align", asked.align as u64),
            ("block size", block_bytes as u64),
        ],
    )
}
