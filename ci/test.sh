#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/deps.sh
cargo test --release "$@"
# The fallback, where glibc registers no restartable sequences (its tunable;
# as under Valgrind): the tests of the allocator in a process, the
# global-allocator suites and the processes' (whose children inherit the
# tunable). `percpu::the_mode_is_per_cpu_unless_rseq_or_the_option_is_off`
# asserts which mode runs.
GLIBC_TUNABLES=glibc.pthread.rseq=0 cargo test --release --test global_allocator --test processes
# The migration test: a build with a window in the per-CPU sheaves' push
# section (`--cfg slubmalloc_rseq_window`), in its own target directory.
RUSTFLAGS="--cfg slubmalloc_rseq_window" CARGO_TARGET_DIR=target/rseq-window \
  cargo test --release --test global_allocator percpu::
# The C library's declarations that only the `override` feature builds
# (src/sys.rs), checked against libc's.
cargo test --release --lib --features override sys::
