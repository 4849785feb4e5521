//! Medium blocks: above the largest size class and up to glibc's dynamic
//! mmap threshold (`large::threshold`: 128 KiB at first, raised to the size
//! of each bigger block freed, up to 32 MiB), a block is a span of
//! contiguous slabs of one segment (`segment::span`), as jemalloc's
//! large extents, tcmalloc's spans and mimalloc's large pages are: a
//! program that keeps thousands of them maps no region per block, and one
//! that frees and allocates them again reuses resident slabs. A block above
//! the threshold, one above 512 KiB (`MAX_MEDIUM_BYTES`), or one asked for
//! with an alignment above a slab's, is a mapping of its own (`large`),
//! made inaccessible at its free.
//!
//! The span's first slab is SPAN with the span's length
//! (`Slab::span_slabs`), the others SPAN with 0. All of them name the class
//! heap that never has a sheaf, as the heap profile's slabs do, and no
//! owner: every free of an address in a span fails the free fast path's
//! owner compare, which every free makes anyway, and reaches
//! `remote_free::free_slow`, which hands it here (`check_block`). The first
//! slab's start is the block; any other address in a span is an invalid
//! pointer; the start of a span freed already (its first slab FREE, its
//! length kept until the slab serves a class again) is a double free.
//!
//! A freed medium block's slabs are free slabs: they coalesce with the free
//! slabs beside them, serve the next span or slab of any class, and go back
//! to the kernel by the free slabs' rules (the purge delay; a segment free
//! whole at the trim bound). A write after free does not fault, as it does
//! not under glibc below its threshold; it cannot reach the allocator's
//! own state either, which lives in the segment's first slab, never in a
//! block.
//!
//! A block's usable size is its span's bytes, whole slabs; a `realloc`
//! that keeps the number of slabs keeps the block where it is.

use core::ptr;

use crate::large;
use crate::os;
use crate::segment::span;
use crate::segment::SLAB_BYTES;
use crate::size_class::MAX_SMALL_BYTES;
use crate::slab::{invalid_free, Slab, State};

/// The biggest medium block: 512 KiB, eight slabs. Spans of more slabs fit
/// in fewer of the segments in use, which the bounded search of
/// `segment::span` then passes by for new ones, and their free slabs wait
/// resident for the purge delay, on top of what the mappings' cache keeps:
/// a program that keeps a few blocks of up to 4 MiB and grows buffers to
/// that size by `realloc` (`large`) keeps more memory with them as spans
/// than as mappings, which the cache reuses and `mremap` grows
/// (bench/report/HISTORY.md has the measurements behind the number).
pub const MAX_MEDIUM_BYTES: usize = 8 * SLAB_BYTES;

/// Whether a request of `size` bytes at `align` is served as a medium
/// block: above the size classes, at most the threshold and
/// `MAX_MEDIUM_BYTES`, at an alignment a slab's start has.
#[inline]
pub fn serves(size: usize, align: usize) -> bool {
    size > MAX_SMALL_BYTES
        && size <= MAX_MEDIUM_BYTES
        && align <= SLAB_BYTES
        && size <= large::threshold()
}

/// A medium block of `size` bytes (`serves`), or null with errno ENOMEM.
pub fn alloc(size: usize) -> *mut u8 {
    take(size).0
}

/// `alloc`, zeroed: a span of fresh or purged slabs reads as zeros already.
pub fn alloc_zeroed(size: usize) -> *mut u8 {
    let (p, clean) = take(size);
    if !p.is_null() && !clean {
        // SAFETY: the span is ours and holds at least `size` bytes.
        unsafe { ptr::write_bytes(p, 0, size) };
    }
    p
}

/// A span for `size` bytes: its start and whether its slabs were all fresh
/// or purged (zeros); null if none can be had.
fn take(size: usize) -> (*mut u8, bool) {
    let (head, clean) = span::take_span(size.div_ceil(SLAB_BYTES));
    if head.is_null() {
        return (ptr::null_mut(), false);
    }
    // SAFETY: the span's first slab, a descriptor in a live segment.
    (unsafe { (*head).start() }, clean)
}

/// The bytes of the medium block that `p`, in `slab`, starts: its span's,
/// or None if `p` starts no live medium block.
#[inline]
pub fn block_bytes(slab: &Slab, p: *mut u8) -> Option<usize> {
    let slabs = slab.span_slabs.get() as usize;
    (slab.state() == State::Span && slabs != 0 && p == slab.start()).then_some(slabs * SLAB_BYTES)
}

/// Checks the free of `p` against the medium block of its slab, `slab`,
/// which names the class heap with no sheaf and is not the heap profile's:
/// stops the process at an address in a span that is not its block's
/// start, and at the start of a span freed already; else returns whether
/// `p` is a live medium block (then `free` it), false if `slab` is no
/// medium block's (it was a side heap's, back in its segment): the
/// caller's free goes on.
#[inline]
pub fn check_block(slab: &Slab, p: *mut u8) -> bool {
    let head = slab.span_slabs.get() != 0 && p == slab.start();
    match slab.state() {
        State::Span if head => true,
        State::Span => invalid_free(p),
        State::Free if head => double_free(p),
        _ => false,
    }
}

/// Frees the medium block `p`, which starts `slab` (`check_block`). A second
/// free that lost the race to the first stops the process.
pub fn free(slab: &Slab, p: *mut u8) {
    if !span::free_span(slab) {
        double_free(p);
    }
}

/// Whether a medium block of `bytes` resized to `new_size` at `align` stays
/// where it is: it needs as many slabs, and is still served as a medium
/// block (a size class serves nothing above 64 KiB).
pub fn keeps(bytes: usize, new_size: usize, align: usize) -> bool {
    new_size > MAX_SMALL_BYTES
        && align <= SLAB_BYTES
        && new_size.div_ceil(SLAB_BYTES) == bytes / SLAB_BYTES
}

/// Stops the process: `p` starts a medium block freed already.
#[cold]
#[inline(never)]
fn double_free(p: *mut u8) -> ! {
    os::fatal("double free of a medium block", p as usize)
}
