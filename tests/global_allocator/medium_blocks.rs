//! Medium blocks: above the largest size class and up to glibc's dynamic
//! mmap threshold (128 KiB at first, raised to the size of each bigger block
//! freed), a block is a span of a segment's slabs, not a mapping of its own.
//! The statistics count them exactly; usable size, realloc across the tiers
//! and aligned requests serve them.

use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};

const SLAB: usize = 64 << 10;

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// A block of `l`, its first and last bytes written. Through `black_box`:
/// the compiler may otherwise drop an allocation that it sees freed unread.
fn take(l: Layout) -> *mut u8 {
    // SAFETY: a non-zero size.
    let p = std::hint::black_box(unsafe { alloc(l) });
    assert!(!p.is_null());
    // SAFETY: inside the block.
    unsafe {
        p.write(1);
        p.add(l.size() - 1).write(1);
    }
    p
}

fn totals() -> slubmalloc::Totals {
    slubmalloc::stats().totals
}

/// Whether one snapshot's bytes in use are its classes' blocks in use and
/// its medium and large blocks: the medium blocks counted once. Read from
/// one snapshot, not as a difference of two, which the blocks of the
/// classes that the test process's other threads allocate and free between
/// them would move.
fn bytes_in_use_count_medium_blocks() -> bool {
    let s = slubmalloc::stats();
    let classes = s.caches().fold(0u64, |sum, c| {
        sum.wrapping_add(c.objects_in_use.wrapping_mul(c.object_size))
    });
    let t = s.totals;
    t.bytes_in_use
        == classes
            .wrapping_add(t.medium_bytes)
            .wrapping_add(t.large_bytes)
}

/// The bytes of a medium block's span.
fn span_bytes(size: usize) -> u64 {
    size.div_ceil(SLAB) as u64 * SLAB as u64
}

#[test]
fn stats_count_medium_blocks_and_their_bytes_exactly() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // 65 KiB to 128 KiB, at most the threshold of a fresh process: two
    // slabs each.
    let sizes: Vec<usize> = (0..40).map(|k| (65 << 10) + k * 1531).collect();
    let mut blocks: Vec<(*mut u8, Layout)> = Vec::with_capacity(sizes.len());
    let before = totals();
    for &s in &sizes {
        blocks.push((take(layout(s, 8)), layout(s, 8)));
    }
    let after = totals();
    let bytes: u64 = sizes.iter().map(|&s| span_bytes(s)).sum();
    assert_eq!(after.medium_blocks - before.medium_blocks, 40);
    assert_eq!(after.medium_bytes - before.medium_bytes, bytes);
    assert_eq!(
        after.large_blocks, before.large_blocks,
        "no block was mapped"
    );
    assert!(
        bytes_in_use_count_medium_blocks(),
        "bytes in use count the spans"
    );
    let walked = slubmalloc::walk();
    assert_eq!(
        (walked.medium_blocks, walked.medium_bytes),
        (after.medium_blocks, after.medium_bytes)
    );
    assert_eq!(slubmalloc::check_stats(), 0);
    for (p, l) in blocks {
        // SAFETY: allocated with `l`.
        unsafe { dealloc(p, l) };
    }
    let end = totals();
    assert_eq!(
        (end.medium_blocks, end.medium_bytes),
        (before.medium_blocks, before.medium_bytes)
    );
    assert_eq!(slubmalloc::check_stats(), 0);
}

#[test]
fn a_block_no_bigger_than_a_big_block_freed_before_comes_from_a_segment() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // Bigger than any block the test harness freed before, and the biggest
    // a medium block may be.
    let l = layout(512 << 10, 8);
    let before = totals();
    let first = take(l);
    assert_eq!(
        totals().large_blocks - before.large_blocks,
        1,
        "above the threshold: a mapping"
    );
    // SAFETY: allocated with `l`.
    unsafe { dealloc(first, l) };
    // The free raised the threshold to 512 KiB, as glibc's: the next ones
    // are spans.
    let mut blocks: Vec<*mut u8> = Vec::with_capacity(20);
    let before = totals();
    blocks.extend((0..20).map(|_| take(l)));
    let after = totals();
    assert_eq!(after.medium_blocks - before.medium_blocks, 20);
    assert_eq!(after.large_blocks, before.large_blocks);
    for p in blocks {
        // SAFETY: allocated with `l`.
        unsafe { dealloc(p, l) };
    }
}

/// `live` blocks of 128 to 180 KiB, replaced at random (ci/measure.py's
/// `big_blocks` and `many_big_blocks`): once the threshold has risen, every
/// replacement is a span, and the segments that hold them are reused, not
/// one mapping made per block. Only the blocks' first bytes are written.
fn random_big_blocks(live: usize) {
    let mut next = crate::xorshift();
    let size = |r: u64| (128 << 10) + (r % ((52 << 10) + 1)) as usize;
    // The table first: at 16,000 blocks it is a big block itself.
    let mut blocks: Vec<(*mut u8, Layout)> = Vec::with_capacity(live);
    let base = totals();
    for _ in 0..live {
        let l = layout(size(next()), 16);
        blocks.push((take(l), l));
    }
    let mut replace = |steps: usize| {
        for _ in 0..steps {
            let i = (next() % live as u64) as usize;
            let (p, l) = blocks[i];
            // SAFETY: allocated with `l`.
            unsafe { dealloc(p, l) };
            let l = layout(size(next()), 16);
            blocks[i] = (take(l), l);
        }
    };
    replace(live * 20);
    let before = totals();
    replace(live * 10);
    let after = totals();
    assert_eq!(
        after.large_blocks, base.large_blocks,
        "every block is a span"
    );
    assert_eq!((after.medium_blocks - base.medium_blocks) as usize, live);
    assert!(
        after.mmaps - before.mmaps <= 2 + live as u64 / 1000,
        "{} replacements mapped {} regions (segments {} -> {})",
        live * 10,
        after.mmaps - before.mmaps,
        before.segments,
        after.segments
    );
    // A segment holds 21 spans of three slabs: the segments stay about as
    // many as the blocks need.
    assert!(
        after.segments as usize <= live / 21 * 5 / 4 + 4,
        "{} segments for {live} blocks",
        after.segments
    );
    assert_eq!(slubmalloc::check_stats(), 0);
}

#[test]
fn a_thousand_big_blocks_replaced_at_random_map_no_region_per_block() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    random_big_blocks(1000);
}

#[test]
fn sixteen_thousand_big_blocks_replaced_at_random_map_no_region_per_block() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    random_big_blocks(16_000);
}

#[test]
fn a_medium_blocks_usable_size_is_its_spans_bytes() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for size in [(64 << 10) + 1, 100 << 10, 128 << 10] {
        let l = layout(size, 8);
        let p = take(l);
        // SAFETY: a live block.
        let usable = unsafe { slubmalloc::usable_size(p) };
        assert_eq!(usable as u64, span_bytes(size), "{size} B");
        // SAFETY: the whole usable size is the program's.
        unsafe { p.add(usable - 1).write(2) };
        // SAFETY: allocated with `l`.
        unsafe { dealloc(p, l) };
    }
}

/// Fills `n` bytes from `p` with a pattern of `seed`.
fn fill(p: *mut u8, n: usize, seed: u8) {
    for i in (0..n).step_by(4093) {
        // SAFETY: inside the block.
        unsafe { p.add(i).write(seed.wrapping_add(i as u8)) };
    }
}

/// Whether the first `n` bytes from `p` hold `fill`'s pattern of `seed`.
fn holds(p: *mut u8, n: usize, seed: u8) -> bool {
    // SAFETY: inside the block.
    (0..n)
        .step_by(4093)
        .all(|i| unsafe { p.add(i).read() } == seed.wrapping_add(i as u8))
}

#[test]
fn realloc_across_small_medium_and_large_keeps_the_contents() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut size = 1000;
    let p = take(layout(size, 8));
    fill(p, size, 7);
    let mut p = p;
    // Small -> medium -> medium in place -> large -> medium -> small.
    for (new, in_place) in [
        (100 << 10, false),
        (120 << 10, true),
        (70 << 10, true),
        (300 << 10, false),
        (90 << 10, false),
        (2000, false),
    ] {
        let medium = totals().medium_blocks;
        // SAFETY: `p` is live with this layout; `new` is not zero.
        let q = unsafe { realloc(p, layout(size, 8), new) };
        assert!(!q.is_null());
        assert!(holds(q, size.min(new), 7), "{size} -> {new}: contents kept");
        if in_place {
            assert_eq!(q, p, "{size} -> {new}: the span's slabs serve it in place");
            assert_eq!(totals().medium_blocks, medium);
        }
        fill(q, new, 7);
        (p, size) = (q, new);
    }
    // SAFETY: the block as resized.
    unsafe { dealloc(p, layout(size, 8)) };
    let t = totals();
    assert_eq!((t.medium_blocks, t.large_blocks), (0, 0));
    assert_eq!(slubmalloc::check_stats(), 0);
}

#[test]
fn aligned_medium_blocks_have_their_alignment() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for align in [16, 4096, 32 << 10, 64 << 10, 128 << 10] {
        let l = layout(100 << 10, align);
        let before = totals();
        let p = take(l);
        assert_eq!(p as usize % align, 0, "aligned to {align}");
        let after = totals();
        // Up to a slab's alignment a span serves it; above, a mapping.
        let medium = align <= SLAB;
        assert_eq!(
            after.medium_blocks - before.medium_blocks,
            medium as u64,
            "align {align}"
        );
        assert_eq!(
            after.large_blocks - before.large_blocks,
            !medium as u64,
            "align {align}"
        );
        // SAFETY: allocated with `l`.
        unsafe { dealloc(p, l) };
    }
}

#[test]
fn a_zeroed_medium_block_is_zero_though_its_slabs_were_written() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let l = layout(100 << 10, 8);
    for _ in 0..4 {
        let p = take(l);
        // SAFETY: inside the block.
        unsafe { p.write_bytes(0xa5, l.size()) };
        // SAFETY: allocated with `l`; written as far as the compiler knows.
        unsafe { dealloc(std::hint::black_box(p), l) };
        // SAFETY: a non-zero size.
        let z = unsafe { alloc_zeroed(l) };
        // SAFETY: inside the block.
        assert!((0..l.size()).all(|i| unsafe { z.add(i).read() } == 0));
        // SAFETY: allocated with `l`.
        unsafe { dealloc(z, l) };
    }
}

/// A write after free of a medium block does not fault, as glibc's heap
/// blocks below its threshold do not; it cannot reach the allocator's own
/// state either, which lives in the segment's first slab, never in a block:
/// the blocks allocated after it are whole and the counters agree with a
/// walk.
#[test]
fn a_write_after_free_of_a_medium_block_leaves_the_allocator_whole() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let l = layout(100 << 10, 8);
    let p = take(l);
    // SAFETY: allocated with `l`.
    unsafe { dealloc(p, l) };
    // SAFETY: the misuse under test: the span's slabs are free slabs of a
    // mapped segment.
    unsafe { p.write_bytes(0xff, l.size()) };
    let blocks: Vec<(*mut u8, Layout)> = (0..64)
        .map(|k| {
            let l = layout(if k % 2 == 0 { 100 << 10 } else { 40 << 10 }, 8);
            let q = take(l);
            fill(q, l.size(), k as u8);
            (q, l)
        })
        .collect();
    for (k, &(q, l)) in blocks.iter().enumerate() {
        assert!(holds(q, l.size(), k as u8));
    }
    assert_eq!(slubmalloc::check_stats(), 0);
    for (q, l) in blocks {
        // SAFETY: allocated with `l`.
        unsafe { dealloc(q, l) };
    }
}
