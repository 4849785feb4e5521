//! slubmalloc's benchmarks, a package of their own so that the peers they
//! compare against (the `mimalloc` and `tikv-jemallocator` crates, which
//! compile C sources) and criterion are built only for them:
//! `cargo bench -p slubmalloc-benches [--bench alloc|stats_cost|counters]`.
//! The C workloads in `c/` are built and run by `ci/bench.sh`.
