//! The shared operation model (`tests/ops_model/`) in lockstep: one to
//! four threads (the input's first byte picks) take turns, a turn lasting
//! until the thread's next `Yield` operation, so an input replays exactly.
//! Blocks cross threads through the model's hand-off rings and outlive the
//! threads that allocated them; every operation kind runs: allocation from
//! 1 B to 32 MiB at alignments to 4 MiB, realloc, bulk allocation and frees
//! (thousands of live blocks), thread exits, trims, quiescent checks of the
//! statistics against the model and the walk, and at most one fork child
//! per input, in one input of 4, and one misuse child and one out-of-memory
//! child, in one input of 16 (the first byte's upper bits pick:
//! `ops_model::FUZZ_FORKS_ONE_IN`, `FUZZ_CHILDREN_ONE_IN`).
//!
//! Run it under `SLUBMALLOC_DEBUG=1` and `SLUBMALLOC_FREELIST_RANDOM=1` too
//! (`ci/fuzz.sh` does): the allocator reads its mode once, at start-up.

#![no_main]

#[path = "../../tests/ops_model/mod.rs"]
mod model;

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static GLOBAL: model::Counted = model::Counted;

const CONFIG: model::Config = model::Config::fuzz(true);

// The mode the allocator chose at start-up, in the run's log (ci/fuzz.sh
// prints it with the run's counts): per-CPU where rseq is, unless the run
// turns it off.
fuzz_target!(
    init: eprintln!("slubmalloc per-CPU mode {}", slubmalloc::stats().totals.percpu_mode),
    |data: &[u8]| {
        model::run(&CONFIG, data);
    }
);
