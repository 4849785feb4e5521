//! The shared operation model (`tests/ops_model/`) with its threads
//! running at once: two to four threads (the input's first byte picks) run
//! their own slices of the input concurrently, hand blocks to each other
//! through lock-free rings (remote frees racing the owner's refills, slab
//! releases and exits; contended node locks), exit and carry on in new
//! threads, and fork while the others are inside the allocator (the child's
//! repairs; children run in some inputs only, as in `ops`). At each `Check`
//! operation every thread parks and the statistics are checked against the
//! model and the walk. Interleavings are not replayed: a crash names the
//! input, and rerunning it a few times (`-runs=100`) brings the race back
//! if it is likely.

#![no_main]

#[path = "../../tests/ops_model/mod.rs"]
mod model;

use libfuzzer_sys::fuzz_target;

#[global_allocator]
static GLOBAL: model::Counted = model::Counted;

const CONFIG: model::Config = model::Config::fuzz(false);

// The mode the allocator chose at start-up, in the run's log (ci/fuzz.sh
// prints it with the run's counts): per-CPU where rseq is, unless the run
// turns it off.
fuzz_target!(
    init: eprintln!("slubmalloc per-CPU mode {}", slubmalloc::stats().totals.percpu_mode),
    |data: &[u8]| {
        // At least two threads: the first byte picks 1 + b % 4, so 1 becomes 2
        // (its upper bits, which pick the inputs with children, kept).
        let Some((&first, rest)) = data.split_first() else {
            return;
        };
        let mut input = Vec::with_capacity(data.len());
        input.push(if first % 4 == 0 { first + 1 } else { first });
        input.extend_from_slice(rest);
        model::run(&CONFIG, &input);
    }
);
