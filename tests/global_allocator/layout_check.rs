//! `dealloc` and `realloc` check the layout they are given against the
//! block (`src/layout.rs`): a layout the block was not served for stops the
//! process with "dealloc with the wrong layout", its address, the layout
//! and the block's size; every layout the block may legitimately be freed
//! with passes: every class and its boundary sizes, every alignment up to a
//! page and the large ones, zero sizes, zeroed blocks, sizes left by a
//! realloc in place, any size up to the usable size (the `Allocator`
//! trait's contract), large blocks taken whole from the cache; in debug
//! mode and for the heap profile's sampled blocks too.
//!
//! Each misuse runs in a forked child (`ops_model::misuse_of`, which the
//! random operations and the fuzz targets run too), which must die by
//! SIGABRT after one "slubmalloc: " line naming it and the block.

use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, GlobalAlloc, Layout};

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use slubmalloc::{SlubMalloc, MAX_SMALL_BYTES};

use crate::ops_model::{misuse_of, Misuse};

const PAGE: usize = 4096;

/// Commits `m` in children for a few sizes; each must be stopped.
fn stopped(m: Misuse) {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for size in [0, 17, 100, 500, 999, 5000] {
        assert!(misuse_of(m, size), "{m:?} ({size}) never met the allocator");
    }
}

#[test]
fn dealloc_with_a_smaller_size_of_another_class_is_stopped() {
    stopped(Misuse::DeallocSmallerSize);
}

#[test]
fn dealloc_with_a_bigger_size_of_another_class_is_stopped() {
    stopped(Misuse::DeallocBiggerSize);
}

#[test]
fn a_large_block_freed_as_small_is_stopped() {
    stopped(Misuse::LargeDeallocAsSmall);
}

#[test]
fn a_large_block_freed_with_another_large_size_is_stopped() {
    stopped(Misuse::LargeDeallocWithAnotherLargeSize);
}

#[test]
fn a_small_block_freed_as_large_is_stopped() {
    stopped(Misuse::SmallDeallocAsLarge);
}

#[test]
fn dealloc_with_an_alignment_the_block_lacks_is_stopped() {
    stopped(Misuse::DeallocWithAnAlignmentItLacks);
}

#[test]
fn realloc_with_the_wrong_old_layout_is_stopped() {
    stopped(Misuse::ReallocWithTheWrongLayout);
}

/// Every misuse the operation model commits through `dealloc` with the
/// layout the block was allocated with (a double free, an interior or
/// made-up pointer, a corrupted list) is still named as itself, not as a
/// wrong layout: the check leaves a pointer that starts no live block to
/// the free.
#[test]
fn other_misuses_through_dealloc_keep_their_names() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for size in [0, 100, 5000] {
        crate::ops_model::check_every_misuse(size);
    }
}

/// As `other_misuses_through_dealloc_keep_their_names`, in debug mode, whose
/// check reads the size recorded in the block.
#[test]
fn other_misuses_through_dealloc_keep_their_names_in_debug_mode() {
    crate::run_in_fresh_process(
        "layout_check::other_misuses_through_dealloc_keep_their_names",
        &[("SLUBMALLOC_DEBUG", "1")],
    );
}

// ---------------------------------------------------------------------------
// Right layouts

/// Every class's size, its neighbours, and the large sizes around the
/// boundary and a few pages up.
fn boundary_sizes() -> Vec<usize> {
    let mut classes: Vec<usize> = (0..=MAX_SMALL_BYTES)
        .filter_map(slubmalloc::class_size)
        .collect();
    classes.dedup();
    let mut sizes = vec![0, 1];
    for c in classes {
        sizes.extend([c - 1, c, c + 1]);
    }
    let large = MAX_SMALL_BYTES + 1;
    sizes.extend([
        large,
        large + PAGE,
        128 << 10,
        (1 << 20) - 1,
        1 << 20,
        (1 << 20) + 1,
    ]);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Alignments up to a page, and two above.
const ALIGNS: [usize; 15] = [
    1,
    2,
    4,
    8,
    16,
    32,
    64,
    128,
    256,
    512,
    1024,
    2048,
    4096,
    16 << 10,
    128 << 10,
];

fn layout(size: usize, align: usize) -> Layout {
    Layout::from_size_align(size, align).unwrap()
}

/// Allocates `l` (zeroed or not), writes its first and last bytes.
fn take(l: Layout, zeroed: bool) -> *mut u8 {
    // SAFETY: a size of 0 is served as the smallest class (the test calls
    // the allocator directly for it: std never asks for none).
    let p = unsafe {
        match (l.size(), zeroed) {
            (0, _) => SlubMalloc.alloc(l),
            (_, true) => alloc_zeroed(l),
            (_, false) => alloc(l),
        }
    };
    assert!(!p.is_null(), "{l:?}");
    assert_eq!(p as usize % l.align(), 0, "{l:?}");
    if l.size() > 0 {
        // SAFETY: `p` holds `l.size()` bytes.
        unsafe {
            if zeroed {
                assert_eq!(*p.add(l.size() - 1), 0);
            }
            *p = 1;
            *p.add(l.size() - 1) = 2;
        }
    }
    p
}

/// Frees `p` with `l`.
///
/// # Safety
/// `p` is a live block that may be freed with `l`.
unsafe fn give(p: *mut u8, l: Layout) {
    // SAFETY: per the contract.
    unsafe {
        if l.size() == 0 {
            SlubMalloc.dealloc(p, l)
        } else {
            dealloc(p, l)
        }
    }
}

#[test]
fn right_layouts_of_every_class_boundary_size_and_alignment_never_stop() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let sizes = boundary_sizes();
    for &align in &ALIGNS {
        for &size in &sizes {
            let l = layout(size, align);
            for zeroed in [false, true] {
                let p = take(l, zeroed);
                // SAFETY: allocated just now with `l`.
                unsafe { give(p, l) };
            }
            // Resized to a neighbour, in place or not: the new layout.
            for new_size in [size.saturating_sub(1), size + 1, size / 2 + 1, 2 * size + 1] {
                if size == 0 || new_size == 0 {
                    continue;
                }
                let p = take(l, false);
                // SAFETY: a live block of `l`; `new_size` is not zero.
                let q = unsafe { realloc(p, l, new_size) };
                assert!(!q.is_null());
                // SAFETY: the block as resized.
                unsafe { give(q, layout(new_size, align)) };
            }
        }
    }
}

/// Rust's `Allocator` trait hands a block out with its usable size and
/// takes it back with any size between the request and that: those pass.
/// With alignments above 16 the class of such a size may differ from the
/// block's (130 bytes at 64 come from the 256-byte class, 170 bytes at 64
/// from the 192-byte one).
#[test]
fn a_block_freed_with_any_size_up_to_its_usable_size_passes() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    for &align in &ALIGNS {
        for size in boundary_sizes().into_iter().filter(|&s| s > 0) {
            let l = layout(size, align);
            for pick in 0..3 {
                let p = take(l, false);
                // SAFETY: a live block.
                let usable = unsafe { slubmalloc::usable_size(p) };
                assert!(usable >= size);
                let free_size = match pick {
                    0 => size,
                    1 => (size + usable) / 2,
                    _ => usable,
                };
                // SAFETY: a live block, and a size between its request and
                // its usable size.
                unsafe { give(p, layout(free_size, align)) };
            }
        }
    }
}

#[test]
fn large_blocks_kept_by_a_realloc_or_taken_whole_from_the_cache_pass() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // Shrunk in place (to more than half its mapping), then freed.
    let big = layout(1 << 20, 8);
    let p = take(big, false);
    // SAFETY: a live block of `big`.
    let q = unsafe { realloc(p, big, 600 << 10) };
    assert_eq!(q, p, "a realloc to more than half a large block keeps it");
    // SAFETY: the block as resized.
    unsafe { give(q, layout(600 << 10, 8)) };
    // A cached 8 MiB mapping taken whole for 7.5 MiB, then freed (blocks
    // this big are never medium ones).
    let eight = layout(8 << 20, 8);
    let p = take(eight, false);
    // SAFETY: allocated with `eight`.
    unsafe { give(p, eight) };
    let most = layout((15 << 20) / 2, 8);
    let q = take(most, false);
    // SAFETY: allocated with `most`.
    let usable = unsafe { slubmalloc::usable_size(q) };
    // SAFETY: allocated with `most`.
    unsafe { give(q, most) };
    assert!(
        q == p && usable == 8 << 20,
        "the cached mapping was not taken whole: {usable}"
    );
}

#[test]
fn seeded_random_layouts_allocated_resized_and_freed_never_stop() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut rng = SmallRng::seed_from_u64(0x5eed_1a70);
    let mut live: Vec<(*mut u8, Layout)> = Vec::with_capacity(512);
    for _ in 0..40_000 {
        let r = rng.next_u64();
        let align = 1 << (r % 13);
        // Sizes spread over every class and into large blocks: a random
        // number of bits, then random bits.
        let bits = (r >> 8) % 22;
        let size = 1 + ((r >> 16) as usize & ((1 << bits) - 1));
        let slot = (r >> 40) as usize % 512;
        if slot < live.len() {
            let (p, l) = live.swap_remove(slot);
            if r & (1 << 63) != 0 {
                // SAFETY: a live block of `l`; `size` is not zero.
                let q = unsafe { realloc(p, l, size) };
                assert!(!q.is_null());
                live.push((q, layout(size, l.align())));
            } else {
                // SAFETY: a live block of `l`.
                unsafe { give(p, l) };
            }
        } else {
            let l = layout(size, align);
            live.push((take(l, r & (1 << 62) != 0), l));
        }
    }
    for (p, l) in live {
        // SAFETY: live blocks of their layouts.
        unsafe { give(p, l) };
    }
}

/// Debug mode serves every small block from a bigger slot (a red zone
/// after it): the same layouts pass.
#[test]
fn right_layouts_pass_in_debug_mode() {
    for test in RIGHT_LAYOUT_TESTS {
        crate::run_in_fresh_process(test, &[("SLUBMALLOC_DEBUG", "1")]);
    }
}

/// The heap profile serves its sampled blocks from slabs of its own, whose
/// frees all take the slow path: with every block sampled, the same
/// layouts pass.
#[test]
fn right_layouts_pass_for_blocks_the_heap_profile_sampled() {
    for test in RIGHT_LAYOUT_TESTS {
        crate::run_in_fresh_process(
            test,
            &[
                ("SLUBMALLOC_PROF", "1"),
                ("SLUBMALLOC_PROF_RATE", "1"),
                ("SLUBMALLOC_PROF_FILE", "/dev/null"),
            ],
        );
    }
}

const RIGHT_LAYOUT_TESTS: [&str; 4] = [
    "layout_check::right_layouts_of_every_class_boundary_size_and_alignment_never_stop",
    "layout_check::a_block_freed_with_any_size_up_to_its_usable_size_passes",
    "layout_check::large_blocks_kept_by_a_realloc_or_taken_whole_from_the_cache_pass",
    "layout_check::seeded_random_layouts_allocated_resized_and_freed_never_stop",
];
