//! Memory goes back to the kernel: after a program frees what it allocated
//! and keeps running lightly past the purge delay, resident memory is a
//! small fraction of the peak; thread churn does not grow it.

use std::time::{Duration, Instant};

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

/// Allocates a little for `ms` milliseconds, as a process that keeps running.
fn light_use(ms: u64) {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut keep = Vec::new();
    while Instant::now() < end {
        keep.push(vec![1u8; 200]);
        if keep.len() > 100 {
            keep.clear();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn resident_memory_falls_below_a_quarter_of_the_peak_after_freeing() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let base = resident_bytes();
    // 256 MiB in small blocks of mixed classes.
    let blocks: Vec<Box<[u8]>> = (0..2_000_000)
        .map(|i| vec![i as u8; 64 + (i % 5) * 16].into_boxed_slice())
        .collect();
    let peak = resident_bytes();
    assert!(
        peak > base + (200 << 20),
        "the workload reached {} MiB",
        (peak - base) >> 20
    );
    drop(blocks);
    light_use(400);
    let after = resident_bytes();
    assert!(
        after - base.min(after) < (peak - base) / 4,
        "resident {} MiB after freeing, peak {} MiB, base {} MiB",
        after >> 20,
        peak >> 20,
        base >> 20
    );
    assert!(slubmalloc::stats().totals.purges > 0);
}

#[test]
fn large_block_cache_is_bounded_and_purged() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let base_mmaps = slubmalloc::stats().totals.mmaps;
    for _ in 0..200 {
        let v = vec![7u8; 1 << 20];
        std::hint::black_box(&v);
    }
    let s = slubmalloc::stats();
    assert!(
        s.totals.mmaps - base_mmaps < 20,
        "a large malloc/free loop mapped {} times",
        s.totals.mmaps - base_mmaps
    );
    assert!(s.totals.large_cached_bytes <= 64 << 20);
    light_use(300);
    assert_eq!(
        slubmalloc::stats().totals.large_cached_bytes,
        0,
        "the cache is emptied after the purge delay"
    );
}

#[test]
fn thread_churn_does_not_grow_resident_memory_or_leak_slabs() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let churn = |n| {
        for i in 0..n {
            std::thread::spawn(move || {
                let v: Vec<Vec<u8>> = (0..200)
                    .map(|j| vec![(i + j) as u8; 16 + j % 700])
                    .collect();
                std::hint::black_box(v);
            })
            .join()
            .unwrap();
        }
    };
    churn(200);
    let slabs = |s: &slubmalloc::Stats| s.caches().map(|c| c.slabs).sum::<u64>();
    let (rss0, s0) = (resident_bytes(), slubmalloc::stats());
    churn(3000);
    let (rss1, s1) = (resident_bytes(), slubmalloc::stats());
    assert!(
        slabs(&s1) <= slabs(&s0) + 4,
        "slabs {} -> {}",
        slabs(&s0),
        slabs(&s1)
    );
    assert!(
        rss1 < rss0 + (8 << 20),
        "resident {} KiB -> {} KiB over 3000 threads",
        rss0 >> 10,
        rss1 >> 10
    );
    assert_eq!(s1.totals.threads_alive, s0.totals.threads_alive);
}

#[test]
fn trim_returns_free_slabs_at_once() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks: Vec<Box<[u8]>> = (0..200_000)
        .map(|_| vec![3u8; 500].into_boxed_slice())
        .collect();
    let peak = resident_bytes();
    drop(blocks);
    slubmalloc::trim();
    let after = resident_bytes();
    assert!(
        after + (60 << 20) < peak,
        "trim released {} MiB of {} MiB",
        (peak - after) >> 20,
        peak >> 20
    );
}
