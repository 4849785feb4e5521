//! Single-threaded correctness of the Rust global allocator: every class and
//! alignment, realloc across classes, zeroed memory after reuse, large blocks.

use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, GlobalAlloc, Layout};

fn fill(p: *mut u8, n: usize, seed: u8) {
    for i in 0..n {
        // SAFETY: the caller owns n bytes at p.
        unsafe { *p.add(i) = seed.wrapping_add(i as u8) };
    }
}

fn check(p: *const u8, n: usize, seed: u8) {
    for i in 0..n {
        // SAFETY: the caller owns n bytes at p.
        assert_eq!(
            unsafe { *p.add(i) },
            seed.wrapping_add(i as u8),
            "byte {i} of {n}"
        );
    }
}

/// Sizes around every class boundary and through the large range.
fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 7, 8, 9, 15, 16, 17];
    let mut s = 24;
    while s <= 2 << 20 {
        v.extend([s - 1, s, s + 1]);
        s = s * 9 / 8 + 8;
    }
    v
}

#[test]
fn every_class_and_alignment_up_to_4_mib() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for shift in 0..=22 {
        let align = 1usize << shift;
        for &size in sizes().iter().filter(|&&s| s <= 3 << 20) {
            let size = size.max(1);
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size layout.
            let p = unsafe { alloc(layout) };
            assert!(!p.is_null(), "size {size} align {align}");
            assert_eq!(p as usize % align, 0, "size {size} align {align}");
            if size >= 16 {
                assert_eq!(
                    p as usize % 16,
                    0,
                    "size {size}: malloc-style 16-byte alignment"
                );
            }
            // Touch the first and last pages only for big blocks; all of small ones.
            let n = size.min(8192);
            fill(p, n, shift as u8);
            fill(unsafe { p.add(size - 1) }, 1, 0);
            check(p, n.min(size - 1), shift as u8);
            // SAFETY: allocated above with this layout.
            unsafe { dealloc(p, layout) };
        }
    }
}

#[test]
fn usable_size_covers_the_request_and_equals_the_class() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for &size in &sizes() {
        let size = size.max(1);
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: non-zero layout.
        let p = unsafe { alloc(layout) };
        // SAFETY: p is live.
        let usable = unsafe { slubmalloc::usable_size(p) };
        assert!(usable >= size);
        if let Some(class) = slubmalloc::class_size(size) {
            assert_eq!(usable, class);
        }
        // SAFETY: allocated above.
        unsafe { dealloc(p, layout) };
    }
}

#[test]
fn realloc_across_classes_keeps_contents() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut size = 1;
    let layout = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: non-zero layout.
    let mut p = unsafe { alloc(layout) };
    fill(p, size, 3);
    while size < 8 << 20 {
        let new = size * 3 / 2 + 1;
        // SAFETY: p is live with alignment 8 and `size` bytes.
        p = unsafe { realloc(p, Layout::from_size_align(size, 8).unwrap(), new) };
        assert!(!p.is_null());
        check(p, size, 3);
        fill(p, new, 3);
        size = new;
    }
    while size > 1 {
        let new = size / 3;
        let new = new.max(1);
        // SAFETY: as above.
        p = unsafe { realloc(p, Layout::from_size_align(size, 8).unwrap(), new) };
        check(p, new, 3);
        size = new;
    }
    // SAFETY: as above.
    unsafe { dealloc(p, Layout::from_size_align(size, 8).unwrap()) };
}

#[test]
fn realloc_in_the_same_class_stays_in_place() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let layout = Layout::from_size_align(100, 8).unwrap();
    // SAFETY: non-zero layout.
    let p = unsafe { alloc(layout) };
    // SAFETY: 100 and 112 share the 112-byte class.
    let q = unsafe { realloc(p, layout, 112) };
    assert_eq!(p, q);
    // SAFETY: q is live with 112 bytes.
    unsafe { dealloc(q, Layout::from_size_align(112, 8).unwrap()) };
}

#[test]
fn alloc_zeroed_is_zero_after_reuse() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for &size in &[8usize, 24, 100, 1000, 5000, 32768, 40000, 300_000, 3 << 20] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let mut blocks = Vec::new();
        for _ in 0..64 {
            // SAFETY: non-zero layout.
            let p = unsafe { alloc(layout) };
            fill(p, size, 0xa5);
            blocks.push(p);
        }
        for p in blocks.drain(..) {
            // SAFETY: allocated above.
            unsafe { dealloc(p, layout) };
        }
        for _ in 0..64 {
            // SAFETY: non-zero layout.
            let p = unsafe { alloc_zeroed(layout) };
            // SAFETY: p holds size bytes.
            assert!(
                unsafe { std::slice::from_raw_parts(p, size) }
                    .iter()
                    .all(|&b| b == 0),
                "size {size}"
            );
            blocks.push(p);
        }
        for p in blocks {
            // SAFETY: allocated above.
            unsafe { dealloc(p, layout) };
        }
    }
}

#[test]
fn impossible_sizes_fail_with_null() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let a = slubmalloc::SlubMalloc;
    let layout = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    // SAFETY: non-zero layout; we only check for null.
    assert!(unsafe { a.alloc(layout) }.is_null());
    let small = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: non-zero layout.
    let p = unsafe { a.alloc(small) };
    fill(p, 64, 9);
    // SAFETY: p is live; the huge realloc must fail and leave it intact.
    let q = unsafe { a.realloc(p, small, isize::MAX as usize - 100) };
    assert!(q.is_null());
    check(p, 64, 9);
    // SAFETY: still live.
    unsafe { a.dealloc(p, small) };
}

#[test]
fn many_blocks_of_every_class_do_not_overlap() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut blocks: Vec<(*mut u8, usize)> = Vec::new();
    for size in (8..=40_000).step_by(97) {
        let layout = Layout::from_size_align(size, 8).unwrap();
        // SAFETY: non-zero layout.
        let p = unsafe { alloc(layout) };
        fill(p, size, size as u8);
        blocks.push((p, size));
    }
    let mut sorted: Vec<_> = blocks.iter().map(|&(p, n)| (p as usize, n)).collect();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "blocks overlap");
    }
    for (p, size) in blocks {
        check(p, size, size as u8);
        // SAFETY: allocated above.
        unsafe { dealloc(p, Layout::from_size_align(size, 8).unwrap()) };
    }
}
