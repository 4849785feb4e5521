//! slubmalloc's benchmarks, a package of their own so that the peers they
//! compare against (the `mimalloc` and `tikv-jemallocator` crates, which
//! compile C sources) and criterion are built only for them:
//! `cargo bench -p slubmalloc-benches [--bench alloc|stats_cost|counters]`.
//! The C workloads in `c/` (helpers shared in `c/bench.h`) and the real programs'
//! inputs (`work.py`, `work.sql`) are built and run by `ci/measure.py`
//! (`ci/bench.sh`).

use once_cell::sync::Lazy;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The seed of every random choice the benchmarks make:
/// `SLUBMALLOC_BENCH_SEED`, or 1 when unset. Printed on first use, so that
/// a run can be repeated exactly.
pub static SEED: Lazy<u64> = Lazy::new(|| {
    let seed = match std::env::var("SLUBMALLOC_BENCH_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("SLUBMALLOC_BENCH_SEED={s} is not a number")),
        Err(_) => 1,
    };
    eprintln!("benchmark seed: {seed} (SLUBMALLOC_BENCH_SEED={seed} repeats this run's choices)");
    seed
});

/// A generator seeded from [`SEED`] and `stream` (one stream per use, so
/// that adding a benchmark does not change another's choices).
pub fn rng(stream: u64) -> SmallRng {
    SmallRng::seed_from_u64(SEED.wrapping_add(stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

/// `n` block sizes from 8 bytes to `max`, as many of each power of two as of
/// the next (small blocks dominate, as in real programs).
pub fn random_sizes(stream: u64, n: usize, max: usize) -> Vec<usize> {
    let mut r = rng(stream);
    let max_log = max.ilog2();
    (0..n)
        .map(|_| {
            let log = r.random_range(3..=max_log);
            r.random_range(1usize << log..=(2usize << log).min(max + 1) - 1)
        })
        .collect()
}
