//! A seeded randomized workout of slubmalloc: the shared operation model
//! (`tests/ops_model/`, which the fuzz targets run too) fed with bytes from
//! `rand`'s seeded `SmallRng`. Four threads at once allocate (1 B to
//! 32 MiB, alignments to 4 MiB, zeroed or not, thousands of blocks live),
//! resize, free, hand blocks to each other through lock-free rings, exit
//! and carry on in new threads, fork, commit misuses in children that must
//! be stopped, and run out of memory in a child; at every rendezvous and at
//! the end the statistics must have moved by exactly what the model and the
//! harness did, and the walk must agree with them. Then the same bytes run
//! again in lockstep, one operation at a time.
//!
//! The seed is printed; set RANDOM_OPS_SEED to replay one (thread
//! interleavings are replayed only in the lockstep half), RANDOM_OPS_BYTES
//! for more or fewer operations per thread.
//!
//! It runs alone in a fresh process (`crate::fresh_process`): the statistics
//! are process-wide, and the harness's allocations are counted by this
//! binary's global allocator (`ops_model::Counted`) from the model's baseline.

use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

use crate::ops_model as model;

const THREADS: usize = 4;
const BYTES_PER_THREAD: usize = 20_000;

fn seed() -> u64 {
    match std::env::var("RANDOM_OPS_SEED") {
        Ok(s) => s.trim().parse().expect("RANDOM_OPS_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

#[test]
fn random_ops_across_threads_keep_contents_and_exact_stats() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let seed = seed();
    println!("seed {seed} (replay with RANDOM_OPS_SEED={seed})");
    let per_thread = match std::env::var("RANDOM_OPS_BYTES") {
        Ok(s) => s.trim().parse().expect("RANDOM_OPS_BYTES must be a number"),
        Err(_) => BYTES_PER_THREAD,
    };
    // Every misuse this mode stops, once each, before the random ones.
    let n = model::check_every_misuse(seed as usize % 997);
    println!("{n} misuses stopped, each in a child");
    let mut input = vec![0u8; THREADS * per_thread];
    SmallRng::seed_from_u64(seed).fill_bytes(&mut input);
    for lockstep in [false, true] {
        let cfg = model::Config {
            threads: THREADS,
            lockstep,
            max_forks: 4,
            max_misuses: 4,
            max_ooms: 1,
            forks_one_in: 1,
            children_one_in: 1,
            max_live_bytes: model::MAX_LIVE_BYTES,
            max_many_bytes: usize::MAX,
        };
        let start = std::time::Instant::now();
        let s = model::run(&cfg, &input);
        println!(
            "seed {seed}, lockstep {lockstep}: {s:?} in {:?}",
            start.elapsed()
        );
        assert!(s.checks > 10, "too few quiescent checks ran: {s:?}");
        assert!(
            s.forks > 0 && s.misuses > 0,
            "no fork or misuse child ran: {s:?}"
        );
    }
}
