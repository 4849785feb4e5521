//! Segments: `SEGMENT_BYTES`-aligned mappings cut into `SLAB_BYTES` slabs.
//! The first slab's space holds the descriptors, so `slab_of(ptr)` is a mask,
//! a shift and an add: no lookup table, no header before any object.
//!
//! A byte map over the whole 47-bit address space (the segment map) answers
//! "is this pointer inside one of our segments?" for the C entry points.
//! Free slabs wait on a dirty queue, each with the time it was freed, for
//! the purge, whose policy is `purge`'s (its docs say when what goes back)
//! and whose pass is `purge::pass`. This module keeps the segments' side:
//! `purge_slabs` purges (MADV_DONTNEED) the free slabs freed before its
//! cutoffs and unmaps wholly empty segments beyond a small cache;
//! `trim_slabs` gives back what is free whole, the segments whose slabs
//! are all free, or every free slab if the heap is mostly free
//! (`mostly_free`: shrinking, not in use); `trimmable_bytes` is what a trim
//! would give back, for the trim bound's test; `slabs_moved` says whether
//! the heap took or gave back slabs since the last pass. The segments'
//! lock comes after a node lock (the lock order: `sync`).
//!
//! A medium block (`medium`) is a span of contiguous free slabs of one
//! segment (`span`); freed, its slabs are free slabs like any other. A
//! segment that holds a live span is never free whole, so never unmapped.
//!
//! No operation walks every segment, so that a heap of 8 GiB (2,048
//! segments) costs per operation what one of 1 GiB does: a new slab comes
//! from the head of the list of segments with free slabs (the one freed into
//! last, whose free slab is likeliest still resident), and a purge visits
//! only the segments with free slabs not purged yet (the dirty queue).

use core::ptr;

use crate::counters;
use crate::list::{Linked, List};
use crate::os;
use crate::purge::{self, Pages};
use crate::slab::{Slab, State};
use crate::sync::{invariant, AtomicU64, Cell, Locked, Ordering};

pub use crate::size_class::{segment_of, SEGMENT_BYTES, SLABS_PER_SEGMENT, SLAB_BYTES, SLAB_SHIFT};
pub use map::contains;
use map::{mark_mapped, mark_unmapped};
/// Slab 0 holds the segment header; the rest serve objects.
const ALL_SLABS: u64 = !1;
/// Wholly empty segments kept mapped (purged) for reuse.
const EMPTY_SEGMENTS_KEPT: usize = 1;
#[repr(C)]
pub struct Segment {
    slabs: [Slab; SLABS_PER_SEGMENT],
    /// Free slabs (bit i = slab i); bit 0 is never set.
    free_mask: u64,
    /// Free slabs whose pages may still be resident.
    dirty_mask: u64,
    /// When each dirty slab was freed (`purge::now_ns`): a purge gives back
    /// only the slabs free for a whole delay.
    freed_at_ns: [u64; SLABS_PER_SEGMENT],
    /// Links of the list of every segment (`Segments::all`).
    all_next: Cell<*mut Segment>,
    all_prev: Cell<*mut Segment>,
    /// Links of the list of segments with a free slab (`Segments::with_free`).
    free_next: Cell<*mut Segment>,
    free_prev: Cell<*mut Segment>,
    /// The next segment of the dirty queue (`Segments::dirty`), and whether
    /// this one is on it (it is whenever `dirty_mask` is not 0; `alloc_slab`
    /// may leave it there with none).
    next_dirty: *mut Segment,
    on_dirty: bool,
    /// Wholly empty and purged, one of the `EMPTY_SEGMENTS_KEPT`.
    kept_empty: bool,
}

const _: () = assert!(core::mem::size_of::<Segment>() <= SLAB_BYTES);

/// The kinds of a segment's links: the list of all segments, and that of
/// segments with a free slab.
enum All {}
enum WithFree {}

impl Linked<All> for Segment {
    fn next(&self) -> &Cell<*mut Segment> {
        &self.all_next
    }

    fn prev(&self) -> &Cell<*mut Segment> {
        &self.all_prev
    }
}

impl Linked<WithFree> for Segment {
    fn next(&self) -> &Cell<*mut Segment> {
        &self.free_next
    }

    fn prev(&self) -> &Cell<*mut Segment> {
        &self.free_prev
    }
}

struct Segments {
    /// Every segment, for the verification walk and a forked child's repair.
    all: List<Segment, All>,
    count: usize,
    /// The segments with a free slab, the one freed into last first.
    with_free: List<Segment, WithFree>,
    /// The segments with dirty slabs, for the purge.
    dirty: *mut Segment,
    /// Segments with `kept_empty` set.
    empty_kept: usize,
    /// Free slabs marked dirty, in all segments: free, their pages maybe
    /// still resident (`purge::pass::slabs_freed` asks for a purge past 16).
    dirty_slabs: usize,
    /// The dirty slabs of the segments whose slabs are all free: what a
    /// trim gives back, unless the heap is `mostly_free`.
    whole_dirty_slabs: usize,
    /// Free slabs, dirty or not, in all segments.
    free_slabs: usize,
    /// A slab was taken or given back since the last purge pass: the heap
    /// is moving slabs, and reuses the free ones.
    slabs_moved: bool,
}

// SAFETY: the raw pointers are reached only under the SEGMENTS lock.
unsafe impl Send for Segments {}

/// No segment yet.
const fn no_segments() -> Segments {
    Segments {
        all: List::new(),
        count: 0,
        with_free: List::new(),
        dirty: ptr::null_mut(),
        empty_kept: 0,
        dirty_slabs: 0,
        whole_dirty_slabs: 0,
        free_slabs: 0,
        slabs_moved: false,
    }
}

static SEGMENTS: Locked<Segments> = Locked::new(no_segments());

/// The bytes a trim would give back (`trimmable_slabs`), for the trim
/// bound's test, which reads it without the lock; stored by the holders of
/// the lock (`with_segments`).
static TRIMMABLE_BYTES: AtomicU64 = AtomicU64::new(0);

/// Runs `f` under the SEGMENTS lock, then publishes `TRIMMABLE_BYTES`.
fn with_segments<R>(f: impl FnOnce(&mut Segments) -> R) -> R {
    SEGMENTS.with(|s| {
        let r = f(s);
        publish(s);
        r
    })
}

fn publish(s: &Segments) {
    // Relaxed: one writer at a time (the lock); the reader takes a hint.
    TRIMMABLE_BYTES.store((trimmable_slabs(s) * SLAB_BYTES) as u64, Ordering::Relaxed);
}

/// Whether nine tenths or more of the segments' slabs are free: the heap
/// has given back most of what it held (the few slabs left in use, the
/// threads' active slabs and the node lists' empty ones among them, keep
/// segments from being free whole). The later a heap counts as mostly
/// free, the less of it its frees leave below the trim bound after the
/// trim that the count starts.
fn mostly_free(s: &Segments) -> bool {
    s.free_slabs * 10 >= s.count * (SLABS_PER_SEGMENT - 1) * 9
}

/// The dirty slabs a trim gives back: those of the segments free whole, or
/// every one if the heap is `mostly_free`.
fn trimmable_slabs(s: &Segments) -> usize {
    if mostly_free(s) {
        s.dirty_slabs
    } else {
        s.whole_dirty_slabs
    }
}

/// The descriptor of the slab holding `p`, which must be inside a segment.
/// Cost: and, shift-and-mask, lea.
#[inline(always)]
pub fn slab_of(p: *mut u8) -> *mut Slab {
    let p = p as usize;
    let index = (p >> SLAB_SHIFT) & (SLABS_PER_SEGMENT - 1);
    (segment_of(p) + index * core::mem::size_of::<Slab>()) as *mut Slab
}

/// A free slab for a new use, or null with errno ENOMEM. O(1): the head of
/// the list of segments with free slabs, a dirty slab first.
pub fn alloc_slab() -> *mut Slab {
    take_slab().0
}

/// A free slab for a new use, or null with errno ENOMEM, and whether its
/// pages may still be resident: it was freed and not purged since, so a
/// heap that carves it whole touches no new memory (`refill`).
pub fn take_slab() -> (*mut Slab, bool) {
    let (slab, resident) = with_segments(take_slab_locked);
    if !slab.is_null() {
        // A fresh slab's pages fault in as it is carved.
        purge::count_taken(
            SLAB_BYTES as u64,
            if resident {
                Pages::Resident
            } else {
                Pages::Fresh
            },
        );
    }
    (slab, resident)
}

/// `take_slab`'s work, lock held.
fn take_slab_locked(s: &mut Segments) -> (*mut Slab, bool) {
    let mut seg = s.with_free.first();
    if seg.is_null() {
        seg = new_segment(s);
        if seg.is_null() {
            return (ptr::null_mut(), false);
        }
    }
    // SAFETY: `seg` is a live segment and the lock is held.
    let sg = unsafe { &mut *seg };
    invariant!(sg.free_mask != 0);
    let dirty = sg.free_mask & sg.dirty_mask;
    let pick = if dirty != 0 { dirty } else { sg.free_mask };
    let index = pick.trailing_zeros() as usize;
    take_run(s, sg, 1 << index);
    (&mut sg.slabs[index] as *mut Slab, dirty != 0)
}

/// Takes the free slabs `run` of `sg` out of the free ones, lock held;
/// returns those of them whose pages may still be resident (dirty).
fn take_run(s: &mut Segments, sg: &mut Segment, run: u64) -> u64 {
    invariant!(run != 0 && sg.free_mask & run == run);
    if sg.free_mask == ALL_SLABS {
        // The segment is no longer free whole: its dirty slabs wait for
        // the delay from now on.
        s.whole_dirty_slabs -= sg.dirty_mask.count_ones() as usize;
    }
    sg.free_mask &= !run;
    s.free_slabs -= run.count_ones() as usize;
    s.slabs_moved = true;
    // A dirty bit left for a slab in use would have a purge drop its
    // pages; the segment stays on the dirty queue until the next purge
    // finds nothing dirty.
    let dirty = sg.dirty_mask & run;
    sg.dirty_mask &= !run;
    s.dirty_slabs -= dirty.count_ones() as usize;
    if sg.kept_empty {
        sg.kept_empty = false;
        s.empty_kept -= 1;
    }
    if sg.free_mask == 0 {
        s.with_free.remove(sg);
    }
    dirty
}

/// Gives a slab with no live object back to its segment, dirty from now;
/// its segment goes to the head of the segments with free slabs (the next
/// `alloc_slab` takes this slab, still resident) and onto the dirty queue.
/// Returns the dirty free slabs of all segments, for the purge's rules
/// (`purge::pass::slabs_freed`, which the caller calls).
pub fn free_slab(slab: *mut Slab) -> usize {
    let now = purge::now_ns();
    with_segments(|s| give_slab(s, slab, now))
}

/// The bytes a trim would give back from the segments: the resident pages
/// of the segments whose slabs are all free (of every free slab, if the
/// heap is mostly free). One load, without the lock.
#[inline]
pub fn trimmable_bytes() -> u64 {
    // Relaxed: a hint for the trim bound's test (`purge::claim_trim` decides).
    TRIMMABLE_BYTES.load(Ordering::Relaxed)
}

/// The segments' part of a trim (`purge::pass`): the segments whose slabs
/// are all free are unmapped (but the few kept, purged); every free slab
/// is purged if the heap is mostly free.
pub fn trim_slabs() {
    with_segments(|s| {
        if mostly_free(s) {
            purge_segments_locked(s, u64::MAX, u64::MAX);
        } else if s.whole_dirty_slabs != 0 {
            // Else no segment is free whole: the dirty queue, which may
            // hold every segment, is not walked for nothing.
            give_back_free_segments_locked(s);
        }
    });
}

/// `free_slab`'s work, lock held: the slab is dirty from `now`. Returns
/// the dirty free slabs of all segments, this one counted.
fn give_slab(s: &mut Segments, slab: *mut Slab, now: u64) -> usize {
    // SAFETY: `slab` is a descriptor inside a live segment.
    let index = unsafe { (*slab).index() };
    // SAFETY: as above; the lock is held.
    let sg = unsafe { &mut *(segment_of(slab as usize) as *mut Segment) };
    give_run(s, sg, 1 << index, now)
}

/// Gives the slabs `run` of `sg`, none of them free, back as free slabs
/// dirty from `now`, lock held; the segment goes to the head of the
/// segments with free slabs and onto the dirty queue. Returns the dirty
/// free slabs of all segments, these counted.
fn give_run(s: &mut Segments, sg: &mut Segment, run: u64, now: u64) -> usize {
    invariant!(sg.free_mask & run == 0 && sg.dirty_mask & run == 0);
    if sg.free_mask != 0 {
        s.with_free.remove(sg);
    }
    s.with_free.push_front(sg);
    sg.free_mask |= run;
    let n = run.count_ones() as usize;
    s.free_slabs += n;
    s.slabs_moved = true;
    sg.dirty_mask |= run;
    let mut rest = run;
    while rest != 0 {
        sg.freed_at_ns[rest.trailing_zeros() as usize] = now;
        rest &= rest - 1;
    }
    if sg.free_mask == ALL_SLABS {
        s.whole_dirty_slabs += sg.dirty_mask.count_ones() as usize;
    }
    if !sg.on_dirty {
        sg.on_dirty = true;
        sg.next_dirty = s.dirty;
        s.dirty = sg as *mut Segment;
    }
    s.dirty_slabs += n;
    s.dirty_slabs
}

fn new_segment(s: &mut Segments) -> *mut Segment {
    let seg = os::map_aligned(SEGMENT_BYTES, SEGMENT_BYTES) as *mut Segment;
    if seg.is_null() {
        return seg;
    }
    // SAFETY: fresh mapping big enough for the header, ours alone.
    unsafe {
        for i in 1..SLABS_PER_SEGMENT {
            ptr::addr_of_mut!((*seg).slabs[i]).write(Slab::new_free());
        }
        (*seg).free_mask = ALL_SLABS;
        (*seg).dirty_mask = 0;
        // The mapping is fresh zeros: no links, flags or times to clear.
    }
    // SAFETY: as above. A forked child walks the list from `all`
    // (`repair_in_child`): `push_front` writes the segment before linking
    // it.
    let sg = unsafe { &*seg };
    s.all.push_front(sg);
    s.count += 1;
    s.free_slabs += SLABS_PER_SEGMENT - 1;
    s.with_free.push_front(sg);
    mark_mapped(seg as usize);
    let g = counters::global();
    g.segments.fetch_add(1, Ordering::Relaxed);
    g.mapped_changed(SEGMENT_BYTES as i64);
    seg
}

/// Whether the heap took or gave back a slab since the last call: a purge
/// pass asks (`purge::pass::purge_all`), and clears it.
pub fn slabs_moved() -> bool {
    with_segments(|s| core::mem::replace(&mut s.slabs_moved, false))
}

/// The segments' part of a purge pass: the dirty slabs freed at or before
/// `cutoff` in segments free whole, at or before `in_use_cutoff` in the
/// others, are purged, and the segments that are then free whole and
/// purged unmapped beyond the few kept. Returns whether dirty slabs are
/// left (freed later).
pub fn purge_slabs(cutoff: u64, in_use_cutoff: u64) -> bool {
    with_segments(|s| purge_segments_locked(s, cutoff, in_use_cutoff))
}

/// Purges the dirty slabs freed at or before `cutoff` in segments free
/// whole, at or before `in_use_cutoff` in the others, visiting only the
/// segments on the dirty queue; returns whether dirty slabs are left (freed
/// later), their segments queued again.
fn purge_segments_locked(s: &mut Segments, cutoff: u64, in_use_cutoff: u64) -> bool {
    purge_dirty_queue(s, |sg| {
        let whole = sg.free_mask == ALL_SLABS;
        due_mask(sg, if whole { cutoff } else { in_use_cutoff })
    })
}

/// The trim's part in the segments: the dirty slabs of the segments whose
/// slabs are all free, and with them the segments beyond the few kept.
fn give_back_free_segments_locked(s: &mut Segments) {
    purge_dirty_queue(s, |sg| {
        if sg.free_mask == ALL_SLABS {
            sg.dirty_mask
        } else {
            0
        }
    });
}

/// Purges, in each segment of the dirty queue, the dirty slabs `due` names
/// (a segment whose slabs are all free and all due is unmapped, unless it
/// is one of the few kept); returns whether dirty slabs are left, their
/// segments queued again.
fn purge_dirty_queue(s: &mut Segments, due: impl Fn(&Segment) -> u64) -> bool {
    let mut seg = core::mem::replace(&mut s.dirty, ptr::null_mut());
    while !seg.is_null() {
        // SAFETY: segments on the dirty queue are live; the lock is held.
        let sg = unsafe { &mut *seg };
        let next = sg.next_dirty;
        invariant!(sg.on_dirty);
        let due = due(sg);
        let whole = sg.free_mask == ALL_SLABS;
        if whole && due == sg.dirty_mask && s.empty_kept >= EMPTY_SEGMENTS_KEPT {
            // Its free slabs not purged yet leave with it.
            let dirty = sg.dirty_mask.count_ones() as u64 * SLAB_BYTES as u64;
            s.all.remove(sg);
            s.count -= 1;
            s.free_slabs -= SLABS_PER_SEGMENT - 1;
            s.with_free.remove(sg);
            s.dirty_slabs -= sg.dirty_mask.count_ones() as usize;
            s.whole_dirty_slabs -= sg.dirty_mask.count_ones() as usize;
            mark_unmapped(seg as usize);
            os::unmap(seg.cast(), SEGMENT_BYTES);
            let g = counters::global();
            g.segments.fetch_sub(1, Ordering::Relaxed);
            g.mapped_changed(-(SEGMENT_BYTES as i64));
            // Relaxed: a statistics counter.
            os::PURGED_BYTES.fetch_add(dirty, Ordering::Relaxed);
        } else {
            purge_runs(seg as usize, due);
            s.dirty_slabs -= due.count_ones() as usize;
            if whole {
                s.whole_dirty_slabs -= due.count_ones() as usize;
            }
            sg.dirty_mask &= !due;
            if sg.dirty_mask != 0 {
                sg.next_dirty = s.dirty;
                s.dirty = seg;
            } else {
                sg.on_dirty = false;
                sg.next_dirty = ptr::null_mut();
                if sg.free_mask == ALL_SLABS {
                    invariant!(!sg.kept_empty);
                    sg.kept_empty = true;
                    s.empty_kept += 1;
                }
            }
        }
        seg = next;
    }
    !s.dirty.is_null()
}

/// The dirty slabs of `sg` freed at or before `cutoff`.
fn due_mask(sg: &Segment, cutoff: u64) -> u64 {
    let (mut due, mut rest) = (0, sg.dirty_mask);
    while rest != 0 {
        let i = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        if sg.freed_at_ns[i] <= cutoff {
            due |= 1 << i;
        }
    }
    due
}

/// madvise each run of consecutive set bits of `mask` as one call.
fn purge_runs(base: usize, mut mask: u64) {
    while mask != 0 {
        let start = mask.trailing_zeros() as usize;
        let len = (mask >> start).trailing_ones() as usize;
        os::purge((base + start * SLAB_BYTES) as *mut u8, len * SLAB_BYTES);
        mask &= !(((1u128 << (start + len)) - 1) as u64);
    }
}

/// Calls `f` on every slab in use by a size class (not a medium block's),
/// with the segment lock held. For the verification walk and a forked
/// child's repair only.
pub fn for_each_slab(mut f: impl FnMut(&Slab)) {
    SEGMENTS.with(|s| {
        for sg in s.all.iter() {
            for i in 1..SLABS_PER_SEGMENT {
                if sg.free_mask & (1 << i) == 0 && sg.slabs[i].state() != State::Span {
                    f(&sg.slabs[i]);
                }
            }
        }
    })
}

/// The live medium blocks and the bytes of their spans, counted by
/// visiting every slab's descriptor, lock held: the verification walk's
/// (and a forked child's) recount of `counters::Global`'s.
pub fn walk_spans() -> (u64, u64) {
    SEGMENTS.with(|s| count_spans(s))
}

fn count_spans(s: &Segments) -> (u64, u64) {
    let (mut blocks, mut bytes) = (0, 0);
    for sg in s.all.iter() {
        for i in 1..SLABS_PER_SEGMENT {
            let slab = &sg.slabs[i];
            if sg.free_mask & (1 << i) == 0
                && slab.state() == State::Span
                && slab.span_slabs.get() != 0
            {
                blocks += 1;
                bytes += slab.span_slabs.get() as u64 * SLAB_BYTES as u64;
            }
        }
    }
    (blocks, bytes)
}

/// In a forked child whose parent had other threads (see `fork`), if one of
/// them held the segment lock: makes the list whole again and frees the
/// lock. Each step of the critical sections leaves the list whole when
/// walked forward from `all` (a new segment is written before it is linked;
/// an unlinked one is skipped and only unmapped after), so the walk fixes
/// the back links, the count and the map, and drops dirty bits of slabs
/// that `take_slab` had taken but not yet marked clean. The list of
/// segments with free slabs, the dirty queue, the kept empty segments, the
/// count of dirty free slabs and the medium blocks' counters are built
/// again from it (a span half made or half freed is left as it was, out
/// of use).
pub fn repair_in_child() {
    if !SEGMENTS.lock.is_locked() {
        return;
    }
    // SAFETY: the child runs one thread, and the thread that held the lock
    // is gone: nothing else touches the list.
    let s = unsafe { &mut *SEGMENTS.data_ptr() };
    s.all.repair_in_child();
    let (mut seg, mut count) = (s.all.first(), 0);
    s.with_free.clear();
    (s.dirty, s.empty_kept) = (ptr::null_mut(), 0);
    (s.dirty_slabs, s.whole_dirty_slabs, s.free_slabs) = (0, 0, 0);
    while !seg.is_null() {
        // SAFETY: segments reachable from `all` are live mappings.
        let sg = unsafe { &mut *seg };
        sg.dirty_mask &= sg.free_mask;
        s.dirty_slabs += sg.dirty_mask.count_ones() as usize;
        s.free_slabs += sg.free_mask.count_ones() as usize;
        if sg.free_mask == ALL_SLABS {
            s.whole_dirty_slabs += sg.dirty_mask.count_ones() as usize;
        }
        if sg.free_mask != 0 {
            s.with_free.push_front(sg);
        }
        sg.on_dirty = sg.dirty_mask != 0;
        if sg.on_dirty {
            sg.next_dirty = s.dirty;
            s.dirty = seg;
        }
        sg.kept_empty &= sg.free_mask == ALL_SLABS && !sg.on_dirty;
        s.empty_kept += sg.kept_empty as usize;
        mark_mapped(seg as usize);
        count += 1;
        seg = sg.all_next.get();
    }
    s.count = count;
    let (blocks, bytes) = count_spans(s);
    let g = counters::global();
    g.medium_blocks.store(blocks, Ordering::Relaxed);
    g.medium_bytes.store(bytes, Ordering::Relaxed);
    publish(s);
    SEGMENTS.lock.reset_in_child();
}

mod map;
pub mod span;

#[cfg(all(test, not(loom)))]
mod tests;
