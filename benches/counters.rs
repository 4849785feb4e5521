//! What keeping the statistics costs the fast path (in the 2020 patches
//! that took `count_partial()` out of SLUB, a shared counter cost hackbench
//! 13%, a per-CPU one nothing).
//!
//! The same two loads, built twice: with the per-thread event counters (the
//! default) and with them compiled out (`RUSTFLAGS="--cfg slubmalloc_bench_no_counters"`):
//! - `pairs`: one thread, alloc + free pairs over four small sizes;
//! - `prodcons`: one thread allocates 64 B blocks and hands them in batches
//!   to a second thread that frees them (remote frees, the slow paths).
//!
//! A cfg cannot change inside one binary, so the comparison in one run is
//! `ci/measure.py --build bench:counters` (bench/report/HISTORY.md has the line): it
//! builds this bench for both variants, runs the two binaries interleaved
//! in raw mode (`counters --raw LOAD N`, which prints one timing line
//! instead of running criterion), then counts instructions of both under
//! callgrind. Run as a criterion bench it times
//! whichever build it is, under the id `counters_on` or `counters_off`.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};

static SLUB: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

const BUILD: &str = if cfg!(slubmalloc_bench_no_counters) {
    "counters_off"
} else {
    "counters_on"
};

const SIZES: [usize; 4] = [16, 48, 128, 640];

/// `n` alloc + free pairs, cycling through `SIZES`.
#[inline(never)]
fn pairs(n: u64) {
    let layouts = SIZES.map(|s| Layout::from_size_align(s, 8).unwrap());
    for i in 0..n {
        let l = layouts[(i & 3) as usize];
        // SAFETY: non-zero size; freed with the same layout.
        unsafe {
            let p = SLUB.alloc(l);
            assert!(!p.is_null());
            p.write_volatile(1);
            SLUB.dealloc(black_box(p), l);
        }
    }
}

const HANDOFF: usize = 256;

/// `n` 64 B blocks allocated here and freed by a second thread; returns the
/// time until the last one is freed.
fn prodcons(n: u64) -> Duration {
    let l = Layout::from_size_align(64, 8).unwrap();
    let (to_freer, from_producer) = mpsc::sync_channel::<Vec<usize>>(4);
    let (to_producer, spare) = mpsc::sync_channel::<Vec<usize>>(8);
    for _ in 0..6 {
        to_producer.send(Vec::with_capacity(HANDOFF)).unwrap();
    }
    let freer = thread::spawn(move || {
        while let Ok(mut blocks) = from_producer.recv() {
            for &p in &blocks {
                // SAFETY: allocated by the producer with `l` and given up.
                unsafe { SLUB.dealloc(p as *mut u8, l) };
            }
            blocks.clear();
            let _ = to_producer.send(blocks);
        }
    });
    let start = Instant::now();
    let mut left = n as usize;
    while left > 0 {
        let k = left.min(HANDOFF);
        let mut blocks = spare.recv().unwrap();
        for _ in 0..k {
            // SAFETY: non-zero size; freed by the other thread with `l`.
            let p = unsafe { SLUB.alloc(l) };
            assert!(!p.is_null());
            // SAFETY: `p` holds 64 bytes.
            unsafe { p.write_volatile(1) };
            blocks.push(p as usize);
        }
        to_freer.send(blocks).unwrap();
        left -= k;
    }
    drop(to_freer);
    freer.join().unwrap();
    start.elapsed()
}

/// Raw mode for ci/measure.py: one timed run, one line on stdout:
/// `BUILD LOAD N SECONDS NS_PER_OP FAST_PATH_ALLOCS_COUNTED`.
fn raw(load: &str, n: u64) {
    let elapsed = match load {
        "pairs" => {
            let start = Instant::now();
            pairs(n);
            start.elapsed()
        }
        "prodcons" => prodcons(n),
        _ => {
            eprintln!("counters: unknown load {load:?} (pairs, prodcons)");
            std::process::exit(2);
        }
    };
    // Shows which build this is: with the counters compiled out nothing counts.
    let counted: u64 = slubmalloc::stats().caches().map(|c| c.alloc_fast).sum();
    println!(
        "{BUILD} {load} {n} {:.6} {:.3} {counted}",
        elapsed.as_secs_f64(),
        elapsed.as_nanos() as f64 / n as f64
    );
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("counters");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new(BUILD, "pairs"), |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            pairs(iters);
            start.elapsed()
        })
    });
    g.bench_function(BenchmarkId::new(BUILD, "prodcons"), |b| {
        b.iter_custom(prodcons)
    });
    g.finish();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--raw") {
        let load = args.get(i + 1).map(String::as_str).unwrap_or("pairs");
        let n = args
            .get(i + 2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000_000);
        raw(load, n);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
