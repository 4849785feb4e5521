//! Cold classes share slabs: a thread that holds a few blocks of a class
//! takes them from a slab on the node list instead of a slab of its own, so
//! many threads cost about what they hold; a class that stays busy gets an
//! owned slab and the fast paths; the statistics stay exact.

use std::sync::{Arc, Barrier};

use crate::memory_lifecycle::resident_bytes;

/// The sizes of `benches/c/live_threads.c`: 16 B .. 9 KB, 15 KiB a round.
const SIZES: [usize; 8] = [16, 48, 128, 320, 800, 1600, 3500, 9000];

/// Starts `threads` threads that each allocate `rounds` blocks of each size
/// and hold them; calls `held` while they all do.
fn threads_holding(threads: usize, rounds: usize, held: impl FnOnce()) {
    let all_allocated = Arc::new(Barrier::new(threads + 1));
    let measured = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (a, m) = (all_allocated.clone(), measured.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let blocks: Vec<Vec<u8>> = (0..rounds)
                        .flat_map(|_| SIZES.iter().map(|&s| vec![7u8; s]))
                        .collect();
                    a.wait();
                    m.wait();
                    drop(blocks);
                })
                .unwrap()
        })
        .collect();
    all_allocated.wait();
    held();
    measured.wait();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_that_hold_a_few_blocks_each_cost_about_what_they_hold() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    const THREADS: usize = 500;
    let base = resident_bytes();
    let live = (THREADS * 4 * SIZES.iter().sum::<usize>()) as u64;
    let mut grown = 0;
    let mut stats = None;
    threads_holding(THREADS, 4, || {
        grown = resident_bytes() - base;
        stats = Some(slubmalloc::stats());
    });
    // With a slab per thread and class: 500 slabs of each, 190 KiB a thread.
    for c in stats.unwrap().caches().filter(|c| c.objects_in_use > 0) {
        let needed = c.objects_in_use.div_ceil(c.objects_per_slab);
        assert!(
            c.slabs <= needed + 3,
            "class {} B: {} slabs for {} objects ({} a slab)",
            c.object_size,
            c.slabs,
            c.objects_in_use,
            c.objects_per_slab
        );
    }
    assert!(
        grown < live + THREADS as u64 * (40 << 10),
        "{THREADS} threads holding {} KiB made the process grow {} KiB",
        live >> 10,
        grown >> 10
    );
}

#[test]
fn a_class_that_stays_busy_gets_a_slab_of_its_own_and_the_fast_paths() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let size = 3000;
    let class = |s: &slubmalloc::Stats| *s.cache_for_size(size).unwrap();
    let before = class(&slubmalloc::stats());
    let blocks: Vec<Vec<u8>> = (0..200).map(|_| vec![1u8; size]).collect();
    let after = class(&slubmalloc::stats());
    if crate::debug_mode() {
        // Debug mode sends every allocation through the slow path, to its
        // own slabs (`src/debug.rs`), never a shared one.
        assert_eq!(after.alloc_slow - before.alloc_slow, 200, "{after:?}");
        assert_eq!(after.alloc_fast, before.alloc_fast, "{after:?}");
        return;
    }
    assert!(
        // 32 from shared slabs, then one refill per 4 fresh objects.
        after.alloc_slow - before.alloc_slow <= 32 + 200 / 4 + 2,
        "{} of 200 allocations took the slow path",
        after.alloc_slow - before.alloc_slow
    );
    assert!(after.alloc_fast > before.alloc_fast);
    assert!(after.refill_own + after.refill_node > 0, "an owned slab");
    drop(blocks);
}

#[test]
fn statistics_stay_exact_while_threads_share_slabs() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    threads_holding(64, 3, || {
        assert_eq!(slubmalloc::check_stats(), 0);
    });
    assert_eq!(slubmalloc::check_stats(), 0);
    let s = slubmalloc::stats();
    for c in s.caches().filter(|c| c.in_use()) {
        assert_eq!(
            c.allocs(),
            c.frees() + c.objects_in_use,
            "class {} B",
            c.object_size
        );
    }
}
