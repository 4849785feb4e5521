//! The Rust side of the comparison: slubmalloc against
//! `std::alloc::System` (glibc), the `mimalloc` crate and the
//! `tikv-jemallocator` crate, all in one run, each called through its
//! `GlobalAlloc` impl. None of them is this binary's `#[global_allocator]`
//! (criterion's own allocations go to System), so every allocator starts
//! from the same process state.
//!
//! Loads (criterion groups):
//! - `pair/SIZE`: one alloc + write one byte + dealloc, sizes 8 B .. 100 KB.
//! - `random_pairs`: the same over 4096 sizes of 8 B .. 4 KiB drawn by
//!   `rand` from the printed seed (`SLUBMALLOC_BENCH_SEED` repeats a run).
//! - `batch_lifo/SIZE`, `batch_fifo/SIZE`: 1000 allocations, then 1000 frees
//!   in reverse (LIFO) or allocation (FIFO) order.
//! - `realloc_growth`: 8 B doubled by realloc up to 1 MiB, then freed.
//! - `remote_free/SIZE`: one thread allocates and hands batches of 256 blocks
//!   to a second thread that frees them (every free is a cross-thread free).
//!
//! Run: `cargo bench -p slubmalloc-benches --bench alloc -- --warm-up-time 1 --measurement-time 3`
//! (a criterion filter such as `pair/` selects groups).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

static SLUB: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;
static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Runs `$body` once per allocator with `$a` bound to it (monomorphised, so
/// each allocator's entry points are called directly, as a
/// `#[global_allocator]` would be after LTO).
macro_rules! for_each_allocator {
    (|$name:ident, $a:ident| $body:expr) => {{
        {
            let $name = "slubmalloc";
            let $a = &SLUB;
            $body
        }
        {
            let $name = "system";
            let $a = &System;
            $body
        }
        {
            let $name = "mimalloc";
            let $a = &MIMALLOC;
            $body
        }
        {
            let $name = "jemalloc";
            let $a = &JEMALLOC;
            $body
        }
    }};
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// One allocation and its free; the byte written keeps the block real.
#[inline(always)]
fn pair<A: GlobalAlloc>(a: &A, l: Layout) {
    // SAFETY: `l` has a non-zero size; the block is freed with the same layout.
    unsafe {
        let p = a.alloc(l);
        assert!(!p.is_null());
        p.write_volatile(1);
        a.dealloc(black_box(p), l);
    }
}

fn bench_pairs(c: &mut Criterion) {
    let mut g = c.benchmark_group("pair");
    for size in [8usize, 64, 256, 1024, 4096, 32768, 100_000] {
        let l = layout(size);
        g.throughput(Throughput::Elements(1));
        for_each_allocator!(|name, a| {
            g.bench_with_input(BenchmarkId::new(name, size), &l, |b, &l| {
                b.iter(|| pair(a, black_box(l)))
            });
        });
    }
    g.finish();
}

/// Alloc + free pairs cycling through a table of random sizes, so that the
/// size class changes from one pair to the next.
fn bench_random_pairs(c: &mut Criterion) {
    let layouts: Vec<Layout> = slubmalloc_benches::random_sizes(1, 4096, 4096)
        .into_iter()
        .map(layout)
        .collect();
    let mut g = c.benchmark_group("random_pairs");
    g.throughput(Throughput::Elements(layouts.len() as u64));
    for_each_allocator!(|name, a| {
        g.bench_function(name, |b| {
            b.iter(|| {
                for &l in &layouts {
                    pair(a, black_box(l));
                }
            })
        });
    });
    g.finish();
}

const BATCH: usize = 1000;

/// Allocates `BATCH` blocks into `ptrs`, then frees them LIFO or FIFO.
#[inline(always)]
fn batch<A: GlobalAlloc>(a: &A, l: Layout, ptrs: &mut [*mut u8; BATCH], lifo: bool) {
    // SAFETY: each block is allocated with `l`, written within its size, and
    // freed once with `l`.
    unsafe {
        for slot in ptrs.iter_mut() {
            let p = a.alloc(l);
            assert!(!p.is_null());
            p.write_volatile(1);
            *slot = p;
        }
        if lifo {
            for &p in ptrs.iter().rev() {
                a.dealloc(p, l);
            }
        } else {
            for &p in ptrs.iter() {
                a.dealloc(p, l);
            }
        }
    }
}

fn bench_batches(c: &mut Criterion) {
    for (group, lifo) in [("batch_lifo", true), ("batch_fifo", false)] {
        let mut g = c.benchmark_group(group);
        g.throughput(Throughput::Elements(BATCH as u64));
        for size in [16usize, 256, 4096] {
            let l = layout(size);
            for_each_allocator!(|name, a| {
                g.bench_with_input(BenchmarkId::new(name, size), &l, |b, &l| {
                    let mut ptrs = [std::ptr::null_mut(); BATCH];
                    b.iter(|| batch(a, black_box(l), &mut ptrs, lifo))
                });
            });
        }
        g.finish();
    }
}

/// 8 B grown by doubling to 1 MiB with realloc, then freed (18 reallocs).
#[inline(always)]
fn realloc_growth<A: GlobalAlloc>(a: &A) {
    // SAFETY: each realloc passes the block's current layout; the last
    // layout frees it. Writes stay inside the current size.
    unsafe {
        let mut size = 8usize;
        let mut p = a.alloc(layout(size));
        assert!(!p.is_null());
        p.write_volatile(1);
        while size < 1 << 20 {
            let new = size * 2;
            p = a.realloc(p, layout(size), new);
            assert!(!p.is_null());
            p.add(new - 1).write_volatile(1);
            size = new;
        }
        a.dealloc(black_box(p), layout(size));
    }
}

fn bench_realloc(c: &mut Criterion) {
    let mut g = c.benchmark_group("realloc_growth");
    for_each_allocator!(|name, a| {
        g.bench_function(name, |b| b.iter(|| realloc_growth(a)));
    });
    g.finish();
}

const HANDOFF: usize = 256;

/// Raw block addresses moved between threads.
struct Blocks(Vec<usize>);

/// `iters` blocks allocated on this thread and freed on another, handed over
/// in batches of `HANDOFF` through a channel (buffers travel back for reuse,
/// so the hand-off itself does not allocate in steady state). Returns the
/// time until the last block is freed.
fn remote_free<A: GlobalAlloc + Sync>(a: &'static A, l: Layout, iters: u64) -> Duration {
    let (to_freer, from_producer) = mpsc::sync_channel::<Blocks>(4);
    let (to_producer, spare) = mpsc::sync_channel::<Blocks>(8);
    for _ in 0..6 {
        to_producer
            .send(Blocks(Vec::with_capacity(HANDOFF)))
            .unwrap();
    }
    let freer = thread::spawn(move || {
        while let Ok(mut blocks) = from_producer.recv() {
            for &p in &blocks.0 {
                // SAFETY: the producer allocated `p` with `l` and gave it up.
                unsafe { a.dealloc(p as *mut u8, l) };
            }
            blocks.0.clear();
            // The producer may already be gone after its last batch.
            let _ = to_producer.send(blocks);
        }
    });
    let start = Instant::now();
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(HANDOFF);
        let mut blocks = spare.recv().unwrap();
        for _ in 0..n {
            // SAFETY: non-zero size; freed by the other thread with `l`.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: `p` holds at least one byte.
            unsafe { p.write_volatile(1) };
            blocks.0.push(p as usize);
        }
        to_freer.send(blocks).unwrap();
        left -= n;
    }
    drop(to_freer);
    freer.join().unwrap();
    start.elapsed()
}

fn bench_remote(c: &mut Criterion) {
    let mut g = c.benchmark_group("remote_free");
    g.throughput(Throughput::Elements(1));
    for size in [64usize, 1024] {
        let l = layout(size);
        for_each_allocator!(|name, a| {
            g.bench_with_input(BenchmarkId::new(name, size), &l, |b, &l| {
                b.iter_custom(|iters| remote_free(a, l, iters))
            });
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    bench_pairs,
    bench_random_pairs,
    bench_batches,
    bench_realloc,
    bench_remote
);
criterion_main!(benches);
