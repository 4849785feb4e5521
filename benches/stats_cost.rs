//! `slubmalloc::stats()` costs the same with 10 and with 50,000 partial slabs
//! (Linux's `count_partial()` walked the list and stalled machines with a
//! million partial slabs).
//!
//! The partial slabs are made the way a program makes them: one thread fills
//! slabs of the 32 KiB class (2 objects per 64 KiB slab, so few pages are
//! touched) and exits, and another thread frees one object of each slab. A remote free
//! into a full slab nobody owns puts it on the node partial list (SLUB's
//! `__slab_free`). Before timing, `stats()` must show the expected
//! `node_partial_slabs` (the harness's own blocks may have listed one
//! already), or the bench stops.
//!
//! For contrast the same group times `walk()`, the test-only recount that
//! visits every slab: it grows with the slab count, `stats()` must not.
//!
//! Run: `cargo bench -p slubmalloc-benches --bench stats_cost -- --warm-up-time 1 --measurement-time 3`

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::thread;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

const OBJECT: usize = 32 * 1024;

/// Blocks of the test class kept live while the stats are timed.
struct Held {
    ptrs: Vec<usize>,
}

fn layout() -> Layout {
    Layout::from_size_align(OBJECT, 8).unwrap()
}

fn node_partial() -> u64 {
    slubmalloc::stats()
        .cache_for_size(OBJECT)
        .expect("32 KiB is a slab class")
        .node_partial_slabs
}

/// Allocates, on a thread that then exits, until `target` slabs of the
/// class are full (the node's partial slabs are refilled first, so they
/// count among them); the exit leaves them FULL, owned by nobody. Then frees,
/// on a second thread, one object of each of those slabs; the rest stay in
/// `held`. Afterwards the node list holds `target` slabs, and those of its
/// slabs before that the refill did not take.
fn make_partial(held: &mut Held, target: usize) {
    let slab_of = |p: usize| p & !(64 * 1024 - 1);
    // Both vectors are sized up front: growing one inside the loop could put
    // its buffer in this very class and break the slab sequence.
    let mut kept = Vec::with_capacity(2 * target + 2);
    let (victims, kept) = thread::spawn(move || {
        // One victim per distinct 64 KiB slab, in allocation order. Stop at
        // the first object of slab `target + 1`: it is active (owned) until
        // this thread exits, while the `target` slabs before it are full.
        let mut victims = Vec::with_capacity(target);
        let mut last_slab = 0;
        loop {
            // SAFETY: non-zero size; freed below or kept in `held`.
            let p = unsafe { GLOBAL.alloc(layout()) } as usize;
            assert!(p != 0);
            if slab_of(p) != last_slab {
                last_slab = slab_of(p);
                if victims.len() == target {
                    kept.push(p);
                    break;
                }
                victims.push(p);
            } else {
                kept.push(p);
            }
        }
        (victims, kept)
    })
    .join()
    .unwrap();
    held.ptrs.extend(kept);
    thread::spawn(move || {
        for p in victims {
            // SAFETY: allocated above with `layout()`, given up by the owner.
            unsafe { GLOBAL.dealloc(p as *mut u8, layout()) };
        }
    })
    .join()
    .unwrap();
}

fn bench_stats(c: &mut Criterion) {
    let mut held = Held { ptrs: Vec::new() };
    let mut g = c.benchmark_group("stats_cost");
    for target in [10u64, 50_000] {
        // The node's partial slabs are refilled first and count among the
        // target; the harness's own blocks may have left one the refill
        // does not take (a cold class's first objects come from shared
        // slabs).
        let before = node_partial();
        make_partial(&mut held, target as usize);
        let got = node_partial();
        let all: u64 = slubmalloc::stats().caches().map(|c| c.partial_slabs).sum();
        eprintln!(
            "stats_cost: {} node partial slabs in the {} B class ({} partial slabs in all classes)",
            got, OBJECT, all
        );
        assert!(
            (target..=target + before).contains(&got),
            "wanted {target} node partial slabs (up to {before} more), stats() shows {got}"
        );
        g.bench_with_input(BenchmarkId::new("stats", got), &got, |b, _| {
            b.iter(|| black_box(slubmalloc::stats()))
        });
        g.bench_with_input(BenchmarkId::new("walk", got), &got, |b, _| {
            b.iter(|| black_box(slubmalloc::walk()))
        });
    }
    g.finish();
    for p in held.ptrs.drain(..) {
        // SAFETY: every held block was allocated with `layout()`.
        unsafe { GLOBAL.dealloc(p as *mut u8, layout()) };
    }
}

criterion_group!(benches, bench_stats);
criterion_main!(benches);
