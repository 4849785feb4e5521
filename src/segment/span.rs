//! Spans: runs of contiguous free slabs of one segment, each the slabs of
//! a medium block (`medium`). A span is found among the first few segments
//! with free slabs (`SPAN_SEARCH`), a run of resident slabs first, else in
//! a new segment; freed, its slabs are free slabs like any other, which
//! coalesce with their free neighbours and go back to the kernel by the
//! same rules (`segment`). Every step is the segments' lock's, so the
//! span's descriptors and the statistics' counts change with the segment's
//! masks, in one critical section.

use core::ptr;

use crate::counters::{self, add_locked};
use crate::purge::pass::{purge_if_due, slabs_freed};
use crate::purge::{self, Pages};
use crate::segment::{
    give_run, new_segment, take_run, with_segments, Segment, Segments, ALL_SLABS,
    SLABS_PER_SEGMENT, SLAB_BYTES,
};
use crate::size_class::segment_of;
use crate::slab::{Slab, State};
use crate::sync::invariant;

/// Segments with free slabs that `take_span` looks at for a run of free
/// slabs, from the head of their list, before it maps a new segment: the
/// search stays bounded however many segments there are, and the segments
/// freed into last, at the head, are those likeliest to have room.
const SPAN_SEARCH: usize = 4;

/// The lowest run of `n` consecutive set bits of `mask`, as a mask (0:
/// none). Bit i of `starts` stays set while bits i..i+k of `mask` all are;
/// `k` doubles at each step, so a run of 8 costs three shifts.
fn first_run(mask: u64, n: usize) -> u64 {
    invariant!((1..64).contains(&n));
    let (mut starts, mut k) = (mask, 1);
    while k < n && starts != 0 {
        let step = k.min(n - k);
        starts &= starts >> step;
        k += step;
    }
    if starts == 0 {
        return 0;
    }
    ((1u64 << n) - 1) << starts.trailing_zeros()
}

/// The slabs of a medium block of `slabs` slabs (`medium`): that many
/// contiguous free slabs of one segment, SPAN now (`Slab::init_span`), or
/// null with errno ENOMEM. Looks at the first `SPAN_SEARCH` segments with
/// free slabs for a run of resident ones (no fault to take them), else
/// takes the first run of free ones it saw, else maps a segment. Returns
/// the first slab, and whether the span's pages are all fresh or purged,
/// so read as zeros. Counts the block in the statistics.
pub fn take_span(slabs: usize) -> (*mut Slab, bool) {
    invariant!((1..SLABS_PER_SEGMENT).contains(&slabs));
    purge_if_due();
    let (head, dirty) = with_segments(|s| take_span_locked(s, slabs));
    if !head.is_null() {
        // Each call is a locked add: none for nothing.
        let dirty_bytes = dirty as u64 * SLAB_BYTES as u64;
        let fresh_bytes = (slabs * SLAB_BYTES) as u64 - dirty_bytes;
        if dirty_bytes != 0 {
            purge::count_taken(dirty_bytes, Pages::Resident);
        }
        if fresh_bytes != 0 {
            purge::count_taken(fresh_bytes, Pages::Fresh);
        }
    }
    (head, dirty == 0)
}

/// `take_span`'s work, lock held: the first slab (null if out of memory)
/// and how many of the span's slabs were dirty.
fn take_span_locked(s: &mut Segments, slabs: usize) -> (*mut Slab, u32) {
    let (mut seg, mut found) = (s.with_free.first(), (ptr::null_mut::<Segment>(), 0));
    for _ in 0..SPAN_SEARCH {
        if seg.is_null() {
            break;
        }
        // SAFETY: segments on the list are live; the lock is held.
        let sg = unsafe { &*seg };
        let resident = first_run(sg.free_mask & sg.dirty_mask, slabs);
        if resident != 0 {
            found = (seg, resident);
            break;
        }
        if found.0.is_null() {
            found = (seg, first_run(sg.free_mask, slabs));
            if found.1 == 0 {
                found.0 = ptr::null_mut();
            }
        }
        seg = sg.free_next.get();
    }
    if found.0.is_null() {
        let seg = new_segment(s);
        if seg.is_null() {
            return (ptr::null_mut(), 0);
        }
        found = (seg, first_run(ALL_SLABS, slabs));
    }
    let (seg, run) = found;
    // SAFETY: `seg` is a live segment and the lock is held.
    let sg = unsafe { &mut *seg };
    let dirty = take_run(s, sg, run);
    let first = run.trailing_zeros() as usize;
    for i in first..first + slabs {
        sg.slabs[i].init_span(if i == first { slabs as u32 } else { 0 });
    }
    let g = counters::global();
    add_locked(&g.medium_blocks, 1);
    add_locked(&g.medium_bytes, (slabs * SLAB_BYTES) as u64);
    (&mut sg.slabs[first] as *mut Slab, dirty.count_ones())
}

/// Frees the medium block whose span starts at `head` (`medium`): its
/// slabs go back to their segment as free slabs, dirty from now, by the
/// rules of `free_slab`. False, with nothing changed, if `head` is not a
/// live span's first slab any more (a second free of the block: the lock
/// makes one of two racing frees the first).
pub fn free_span(head: &Slab) -> bool {
    let now = purge::now_ns();
    let Some(dirty) = with_segments(|s| give_span(s, head, now)) else {
        return false;
    };
    slabs_freed(dirty);
    true
}

/// `free_span`'s work, lock held: the dirty free slabs of all segments
/// after it, or None if `head` starts no live span.
fn give_span(s: &mut Segments, head: &Slab, now: u64) -> Option<usize> {
    let slabs = head.span_slabs.get() as usize;
    if head.state() != State::Span || slabs == 0 {
        return None;
    }
    let first = head.index();
    let seg = segment_of(head as *const Slab as usize) as *mut Segment;
    // SAFETY: `head` is inside a live segment; the lock is held.
    let sg = unsafe { &mut *seg };
    for slab in &sg.slabs[first..first + slabs] {
        slab.end_span();
    }
    let g = counters::global();
    add_locked(&g.medium_blocks, 1u64.wrapping_neg());
    add_locked(
        &g.medium_bytes,
        ((slabs * SLAB_BYTES) as u64).wrapping_neg(),
    );
    Some(give_run(s, sg, ((1u64 << slabs) - 1) << first, now))
}
