//! The segments' unit tests: slabs taken and given back, purges, trims.

use super::*;

/// The address of the first byte of `slab`'s memory.
fn memory_of(slab: *mut Slab) -> *mut u8 {
    let seg = segment_of(slab as usize);
    (seg + (slab as usize - seg) / core::mem::size_of::<Slab>() * SLAB_BYTES) as *mut u8
}

/// Unmaps the one segment a test made, and counts it out.
fn unmap_only_segment(s: &mut Segments) {
    let first = s.all.first();
    assert!(!first.is_null() && s.count == 1);
    // SAFETY: the test's segment, live.
    s.all.remove(unsafe { &*first });
    mark_unmapped(first as usize);
    os::unmap(first.cast(), SEGMENT_BYTES);
    crate::counters::global()
        .segments
        .fetch_sub(1, Ordering::Relaxed);
}

/// The trim gives back what is free whole: a segment whose slabs are
/// all free (kept, purged, as the only empty one) but not the free slab
/// of a segment another slab keeps in use, which a purge gives back
/// only past the in-use wait.
#[test]
fn a_trim_gives_back_only_segments_free_whole() {
    let mut s = no_segments();
    let (a, b) = (take_slab_locked(&mut s).0, take_slab_locked(&mut s).0);
    assert!(!a.is_null() && segment_of(a as usize) == segment_of(b as usize));
    // SAFETY: the slabs' memory is ours, mapped and unused.
    unsafe { (memory_of(a).write(7), memory_of(b).write(7)) };
    give_slab(&mut s, a, 100);
    assert_eq!((s.dirty_slabs, s.whole_dirty_slabs), (1, 0));
    give_back_free_segments_locked(&mut s);
    // SAFETY: as above; a purged slab reads as zeros.
    assert_eq!(
        unsafe { memory_of(a).read() },
        7,
        "a slab of a segment in use was purged"
    );
    assert_eq!(s.dirty_slabs, 1);
    // A purge: the slab is past the delay, not past the in-use wait.
    assert!(purge_segments_locked(&mut s, 150, 50));
    // SAFETY: as above.
    assert_eq!(
        unsafe { memory_of(a).read() },
        7,
        "a slab of a segment in use went back early"
    );
    // The segment's last slab freed: free whole, counted, given back.
    give_slab(&mut s, b, 200);
    assert_eq!((s.dirty_slabs, s.whole_dirty_slabs), (2, 2));
    give_back_free_segments_locked(&mut s);
    // SAFETY: as above.
    assert_eq!(
        unsafe { (memory_of(a).read(), memory_of(b).read()) },
        (0, 0)
    );
    assert_eq!((s.dirty_slabs, s.whole_dirty_slabs), (0, 0));
    assert_eq!((s.count, s.empty_kept), (1, 1), "the empty segment is kept");
    // A slab taken from it again: the segment is no longer free whole.
    let c = take_slab_locked(&mut s).0;
    give_slab(&mut s, c, 300);
    assert_eq!(s.whole_dirty_slabs, 1);
    let c = take_slab_locked(&mut s).0;
    assert_eq!((s.dirty_slabs, s.whole_dirty_slabs), (0, 0));
    give_slab(&mut s, c, 400);
    assert!(!purge_segments_locked(&mut s, 400, 400));
    unmap_only_segment(&mut s);
}

/// What a trim counts: in a heap a third of whose slabs are in use, the
/// free slabs of segments free whole only; in a heap mostly free (nine
/// tenths), every free slab. Free slabs are counted as they come and go.
#[test]
fn a_trim_counts_every_free_slab_only_in_a_heap_mostly_free() {
    let mut s = no_segments();
    let taken: Vec<_> = (0..20).map(|_| take_slab_locked(&mut s).0).collect();
    assert_eq!((s.count, s.free_slabs), (1, SLABS_PER_SEGMENT - 1 - 20));
    give_slab(&mut s, taken[0], 100);
    assert!(!mostly_free(&s));
    assert_eq!((s.dirty_slabs, trimmable_slabs(&s)), (1, 0));
    for &slab in &taken[1..14] {
        give_slab(&mut s, slab, 100);
    }
    assert!(mostly_free(&s), "{} of 63 slabs free", s.free_slabs);
    assert_eq!(trimmable_slabs(&s), 14);
    for &slab in &taken[14..] {
        give_slab(&mut s, slab, 100);
    }
    assert_eq!(
        (s.free_slabs, s.whole_dirty_slabs),
        (SLABS_PER_SEGMENT - 1, 20)
    );
    assert!(!purge_segments_locked(&mut s, 100, 100));
    assert_eq!(
        (s.count, s.free_slabs, s.empty_kept),
        (1, SLABS_PER_SEGMENT - 1, 1)
    );
    unmap_only_segment(&mut s);
}

/// Two slabs of a segment of its own, freed at times 100 and 200: a
/// purge with the cutoff at 150 gives back the first only (the second,
/// freed later, may be taken again) and leaves the segment queued; one
/// at 250 gives back the second, and the empty segment is kept. A
/// second empty segment is unmapped.
#[test]
fn a_purge_gives_back_only_the_slabs_free_for_a_whole_delay() {
    let mut s = no_segments();
    let (a, b) = (take_slab_locked(&mut s).0, take_slab_locked(&mut s).0);
    assert!(!a.is_null() && !b.is_null());
    // SAFETY: the slabs' memory is ours, mapped and unused.
    unsafe { (memory_of(a).write(7), memory_of(b).write(7)) };
    assert_eq!(give_slab(&mut s, a, 100), 1);
    assert_eq!(give_slab(&mut s, b, 200), 2);
    assert!(
        purge_segments_locked(&mut s, 150, 150),
        "the second slab is left"
    );
    assert_eq!(s.dirty_slabs, 1);
    // SAFETY: as above; purged memory reads as zeros.
    assert_eq!(
        unsafe { (memory_of(a).read(), memory_of(b).read()) },
        (0, 7)
    );
    assert!(!purge_segments_locked(&mut s, 250, 250));
    assert_eq!(s.dirty_slabs, 0);
    // SAFETY: as above.
    assert_eq!(unsafe { memory_of(b).read() }, 0);
    assert_eq!((s.count, s.empty_kept), (1, 1), "the empty segment is kept");
    let first = s.all.first();
    // A second segment, emptied: unmapped, the first still kept.
    let seg = new_segment(&mut s);
    assert!(!seg.is_null() && s.with_free.first() == seg);
    let c = take_slab_locked(&mut s).0;
    assert_eq!(segment_of(c as usize), seg as usize);
    give_slab(&mut s, c, 300);
    // A dirty slab taken again says so, and is counted out.
    let (c, resident) = take_slab_locked(&mut s);
    assert!(resident && s.dirty_slabs == 0);
    give_slab(&mut s, c, 300);
    assert!(!purge_segments_locked(&mut s, 300, 300));
    assert_eq!(s.dirty_slabs, 0);
    assert_eq!((s.count, s.empty_kept, s.all.first()), (1, 1, first));
    assert!(s.dirty.is_null() && s.with_free.first() == first);
    unmap_only_segment(&mut s);
}
