//! The allocation API every front end shares (`GlobalAlloc` and the C
//! functions): routes a request to a size class, a medium block or a large
//! block, and a pointer to its slab, its span or its large-block entry.

use core::ptr;

use crate::background;
use crate::debug;
use crate::fastpath;
use crate::heap::{self, ThreadGoes};
use crate::heap_exit;
use crate::heap_start;
use crate::large::{self, Freed};
use crate::large_map::Contents;
use crate::layout;
#[cfg(any(feature = "override", slubmalloc_preload))]
use crate::layout::Asked;
use crate::live_block::{self, Reader};
use crate::medium;
use crate::node;
use crate::os;
use crate::prof::sample;
use crate::purge;
use crate::segment::{self, slab_of};
use crate::side_slabs::SideHeap;
use crate::size_class::{self, class_for, CLASS_BYTES, MAX_SMALL_BYTES};
#[cfg(any(feature = "override", slubmalloc_preload))]
use crate::sync::invariant;
use crate::tls;
use crate::zero;

/// `malloc(size)`: 16-byte aligned, as every class is.
#[inline(always)]
pub fn malloc(size: usize) -> *mut u8 {
    // Up to 1 KiB, the common case, straight through: a compare and the table.
    if size <= size_class::LOOKUP_MAX {
        fastpath::alloc_scaled(size_class::scaled_class_by_table(size), size, 16)
    } else {
        malloc_above_table(size)
    }
}

/// `malloc` above 1 KiB, out of line so that the common case falls through.
#[inline(never)]
fn malloc_above_table(size: usize) -> *mut u8 {
    if size <= MAX_SMALL_BYTES {
        fastpath::alloc(size_class::class_by_log(size), size, 16)
    } else {
        alloc_big(size, 16, Contents::Any)
    }
}

/// Allocation with any power-of-two alignment.
#[inline(always)]
pub fn alloc(size: usize, align: usize) -> *mut u8 {
    // The common case: every class is 16-byte aligned, so up to that
    // alignment `malloc`'s choice serves, for one compare more (testing
    // `size.max(align)` and the alignment cost `__rust_alloc` more
    // instructions, a push among them: `ci/callgrind.sh`).
    if align <= 16 {
        malloc(size)
    } else {
        alloc_aligned(size, align)
    }
}

/// `alloc` above 16-byte alignment, out of line so that the common case
/// falls through.
#[inline(never)]
fn alloc_aligned(size: usize, align: usize) -> *mut u8 {
    match class_for(size, align) {
        Some(class) => fastpath::alloc(class, size, align),
        None => alloc_big(size, align, Contents::Any),
    }
}

/// A block of no bytes at `align`, at most `zero::ALIGN`: the zero-size
/// class's (`zero`), by the fast path's route (`size_class::ZERO_OFFSET`
/// is the size table's class of size 0); `malloc(0)` itself takes the
/// table. C's `calloc` of no bytes and its aligned allocations of none.
#[cfg(any(feature = "override", slubmalloc_preload))]
pub fn alloc_zero_size(align: usize) -> *mut u8 {
    invariant!(align <= zero::ALIGN);
    fastpath::alloc_scaled(size_class::ZERO_OFFSET, 0, align)
}

/// Zeroed allocation. Large blocks fresh from mmap are not cleared again.
/// Inlined into Rust's `__rust_alloc_zeroed`, so that a heap profile's
/// stacks start at its caller (see `prof::sample::capture_stack`).
#[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
    match class_for(size, align) {
        Some(class) => {
            let p = fastpath::alloc(class, size, align);
            if !p.is_null() {
                // SAFETY: `p` holds at least `size` bytes.
                unsafe { ptr::write_bytes(p, 0, size) };
            }
            p
        }
        None => alloc_big(size, align, Contents::Zeroed),
    }
}

/// A big block, above the size classes: a medium block (a span of a
/// segment's slabs) up to glibc's dynamic mmap threshold, else a large one
/// (a mapping of its own); counted down by the heap profile. A thread whose
/// first blocks are big gets its heap (and countdown) now when profiling.
/// No allocator lock is held here, so the background purger may start
/// (`background`). Out of line: inlined, it made `__rust_alloc` save
/// registers on the fast path (`ci/callgrind.sh`'s Rust pair).
#[inline(never)]
fn alloc_big(size: usize, align: usize, contents: Contents) -> *mut u8 {
    background::start_if_wanted();
    let p = if !medium::serves(size, align) {
        large::alloc(size, align, contents)
    } else if contents == Contents::Zeroed {
        medium::alloc_zeroed(size)
    } else {
        medium::alloc(size)
    };
    if !p.is_null() {
        if tls::current() == heap::EMPTY && sample::enabled() {
            heap_start::create_heap();
        }
        sample::count_big(p, size, alloc_big as *const () as usize);
    }
    p
}

/// Frees any pointer, null included (a no-op); stops the process with a
/// message naming the misuse if `p` is not the start of a live block of ours.
/// Null needs no test of its own on the fast path: no segment starts at 0.
///
/// # Safety
/// No other thread uses the block afterwards.
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    if segment::contains(p) {
        // SAFETY: `p` is inside a mapped segment.
        unsafe { fastpath::free(p) }
    } else if !p.is_null() {
        free_large(p)
    }
}

/// Frees a block whose size and alignment the caller gives (Rust's
/// `dealloc`), checked against them (`layout`). The common case, a size
/// the table classifies at an alignment it serves, at an address that is
/// not a page's start, takes the free fast path with one compare more: the
/// size's class against the block's slab's (`fastpath::free_of_class`).
/// Everything else takes `free_checked`: the other sizes and alignments,
/// a block of another class or a sampled one, and a block at a page's
/// start outside every segment, as every large block is: the fast path
/// reads the slab header of the block's segment, which a large block does
/// not have, and an address outside every segment may not be mapped. The
/// page test keeps the segment map's look-up (a few instructions more) to
/// the blocks at a page's start, which a small class has few of.
///
/// # Safety
/// `p` is a live block allocated by `alloc(size, align)` or resized to `size`.
#[inline(always)]
pub unsafe fn free_with_layout(p: *mut u8, size: usize, align: usize) {
    if let Some(scaled) = size_class::scaled_class_of_small_layout(size, align) {
        if p as usize & (os::PAGE_BYTES - 1) != 0 || segment::contains(p) {
            // SAFETY: a block of such a layout is in a slab, so in a mapped
            // segment; `free_of_class` reads its segment header and checks
            // the class. A pointer that is not ours is the caller's breach.
            if unsafe { fastpath::free_of_class(p, scaled) } {
                return;
            }
        }
    }
    // SAFETY: per the contract.
    unsafe { free_checked(p, size, align) }
}

/// `free_with_layout` out of line, for everything its fast path leaves:
/// the full check, then `free`, which routes the block by the segment map.
///
/// # Safety
/// As for `free_with_layout`.
#[cold]
#[inline(never)]
unsafe fn free_checked(p: *mut u8, size: usize, align: usize) {
    layout::check(p, size, align);
    // SAFETY: per the contract; a pointer the check left is named by `free`.
    unsafe { free(p) }
}

/// A C free that names the size the block was asked for (C23's
/// `free_sized`, C++'s sized delete): checked against the block
/// (`layout`), which must be one that any of `asked` is served with. The
/// fast path is `free`'s, with the class of `size` compared as in
/// `free_with_layout` (`asked` lists it).
///
/// # Safety
/// `p` is null or a live block of ours.
#[cfg(any(feature = "override", slubmalloc_preload))]
#[inline(always)]
pub unsafe fn free_sized(p: *mut u8, size: usize, asked: &[Asked]) {
    if segment::contains(p) {
        if let Some(scaled) = size_class::scaled_class_of_small_layout(size, 1) {
            // SAFETY: `p` is inside a mapped segment.
            if unsafe { fastpath::free_of_class(p, scaled) } {
                return;
            }
        }
    }
    // SAFETY: per the contract.
    unsafe { free_asked(p, asked) }
}

/// Frees `p`, null included, after checking that any of `asked` is served
/// with it (`layout::check_any`): C's aligned sized frees, and the sized
/// frees' slow path.
///
/// # Safety
/// `p` is null or a live block of ours.
#[cfg(any(feature = "override", slubmalloc_preload))]
#[cold]
#[inline(never)]
pub unsafe fn free_asked(p: *mut u8, asked: &[Asked]) {
    if !p.is_null() {
        layout::check_any(p, asked);
    }
    // SAFETY: per the contract; a pointer the check left is named by `free`.
    unsafe { free(p) }
}

#[cold]
#[inline(never)]
fn free_large(p: *mut u8) {
    sample::free_big(p);
    match large::free(p) {
        // The block is cached: past the trim bound, everything goes back.
        Freed::Ok => purge::pass::trim_if_over_bound(),
        Freed::DoubleFree => os::fatal("double free of a large block", p as usize),
        Freed::NotOurs => os::fatal(
            "free of an invalid pointer (not allocated by slubmalloc)",
            p as usize,
        ),
    }
}

/// The bytes usable at `p`.
///
/// # Safety
/// `p` is not null.
pub unsafe fn usable_size(p: *mut u8) -> usize {
    if segment::contains(p) {
        // SAFETY: `p` is inside a mapped segment, whose header is mapped.
        let slab = unsafe { &*slab_of(p) };
        if let Some(bytes) = medium::block_bytes(slab, p) {
            return bytes;
        }
        if zero::names_zero(slab) {
            return zero::usable_size(slab, p);
        }
        // SAFETY: `p` is inside a mapped segment, no medium block.
        unsafe { live_block::usable_size(p, Reader::UsableSize) }
    } else {
        match large::usable_size(p) {
            Some(n) => n,
            None => os::fatal("malloc_usable_size of an invalid pointer", p as usize),
        }
    }
}

/// `realloc` for a caller that gives the block's layout (Rust's
/// `realloc`, the `Allocator` trait's grow and shrink): checked against
/// it first (`layout`).
///
/// # Safety
/// `p` is a live block allocated by `alloc(size, align)` or resized to `size`.
#[inline]
pub unsafe fn realloc_with_layout(
    p: *mut u8,
    size: usize,
    align: usize,
    new_size: usize,
) -> *mut u8 {
    layout::check(p, size, align);
    // SAFETY: per the contract.
    unsafe { realloc(p, align, new_size) }
}

/// Resizes `p` to `new_size` bytes at `align`: in place when the size class
/// or a medium block's slabs stay the same, with mremap for large blocks,
/// else allocate-copy-free.
/// Null (errno ENOMEM) leaves `p` intact. Inlined into `__rust_realloc`,
/// as `alloc_zeroed` is.
///
/// # Safety
/// `p` is a live block of ours allocated with alignment `align`.
#[cfg_attr(not(any(feature = "override", slubmalloc_preload)), inline)]
pub unsafe fn realloc(p: *mut u8, align: usize, new_size: usize) -> *mut u8 {
    let old_size = if segment::contains(p) {
        // SAFETY: `p` is inside a mapped segment, whose header is mapped.
        let slab = unsafe { &*slab_of(p) };
        if let Some(bytes) = medium::block_bytes(slab, p) {
            if medium::keeps(bytes, new_size, align) {
                sample::realloc_big(p, p, new_size);
                return p;
            }
            bytes
        } else if zero::names_zero(slab) {
            // Nothing to copy; a zero-size block is never kept, even for
            // a size of 0 (C's `realloc(p, 0)` frees before it gets here).
            zero::usable_size(slab, p)
        } else if debug::enabled() {
            // SAFETY: `p` is inside a mapped segment, no medium block; the
            // red zone moves with the size, so no in-place.
            unsafe { live_block::usable_size(p, Reader::Realloc) }
        } else {
            // SAFETY: as above.
            let class = unsafe { live_block::class_of(p, Reader::Realloc) };
            if class_for(new_size, align) == Some(class) {
                return p;
            }
            CLASS_BYTES[class] as usize
        }
    } else {
        if align <= os::PAGE_BYTES {
            if let Some(q) = large::realloc(p, new_size) {
                sample::realloc_big(p, q, new_size);
                return q;
            }
        }
        match large::usable_size(p) {
            Some(n) => n,
            None => os::fatal("realloc of an invalid pointer", p as usize),
        }
    };
    let q = alloc(new_size, align);
    if !q.is_null() {
        // SAFETY: both blocks are live and at least the copied length.
        unsafe {
            ptr::copy_nonoverlapping(p, q, old_size.min(new_size));
            free(p);
        }
    }
    q
}

/// Gives back all the memory we can: the calling thread's sheaves go back
/// to their slabs, its slabs to the node lists, their empty slabs (and
/// those debug mode, the heap profile and zero-size blocks keep) to their
/// segments, free slabs and cached large blocks to the kernel.
pub fn trim() {
    thread_idle();
    purge::give_back::drain_every_cpu();
    SideHeap::Debug.give_back_empty();
    SideHeap::Profile.give_back_empty();
    zero::give_back_empty();
    node::discard_empty_slabs();
    purge::pass::purge_now();
    large::purge_cache(u64::MAX);
}

/// The calling thread gives back everything it holds
/// (`heap_exit::give_back_all`) and keeps its heap: its next allocation of
/// a class refills as after a thread's start.
pub fn thread_idle() {
    if let Some(heap) = tls::own_heap() {
        heap_exit::give_back_all(heap, ThreadGoes::Idle);
    }
}
