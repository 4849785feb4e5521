#!/usr/bin/env bash
# The model check of the slab protocol: builds the allocator's sync,
# size_class, freelist, list, slab (and slab/remote.rs, slab/zero_size.rs) and node modules against loom
# (--cfg loom) in tests/model and runs its scenarios under every interleaving loom finds.
# Extra arguments go to the test harness (a scenario's name to run one).
set -euo pipefail
cd "$(dirname "$0")/../tests/model"
# Debug build: the transitions' debug_assert!s and `Slab::check` run too.
RUSTFLAGS="--cfg loom" cargo test --lib -- "$@"
