#!/usr/bin/env bash
# Instructions per malloc + free pair on the fast path, counted by valgrind's
# callgrind (deterministic, unlike time): a loop of N pairs of one size, run
# with N = M and N = 2M; the difference over M is one pair, start-up and
# setup cancelled. Columns malloc and free: the inclusive cost of those
# functions per pair ("-" where they are not visible, e.g. inlined
# into the loop under fat LTO: CARGO_PROFILE_RELEASE_LTO=true).
#
#   ci/callgrind.sh [-m M] [-s SIZE] [-o REPORT.md]
#
# Rows: Rust, tests/programs/fastpath_count.rs with slubmalloc as
# #[global_allocator]; C, benches/c/pairs.c under LD_PRELOAD of slubmalloc,
# glibc (nothing preloaded) and Debian's mimalloc, jemalloc and tcmalloc
# (skipped when not installed: ci/deps.sh). It is two runs of ci/measure.py.
set -euo pipefail
cd "$(dirname "$0")/.."
M=1000000
SIZE=64
REPORT=/dev/null
while getopts "m:s:o:" opt; do
  case $opt in
    m) M=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    o) REPORT=$OPTARG ;;
    *) echo "usage: $0 [-m M] [-s SIZE] [-o REPORT.md]" >&2; exit 2 ;;
  esac
done
{
  echo "Instructions per malloc + free pair of $SIZE B, $(git log -1 --format=%h), $(valgrind --version)"
  ci/measure.py -r 0 --callgrind "$M" --label Rust --build program:fastpath_count \
    --split 'malloc=^(__rust_alloc|__rg_alloc|.*SlubMalloc.*alloc.*)$' \
    --split 'free=^(__rust_dealloc|__rg_dealloc|.*SlubMalloc.*dealloc.*)$' \
    slubmalloc -- '{exe}' '{n}' "$SIZE"
  ci/measure.py -r 0 --callgrind "$M" --label C \
    --split 'malloc=^(malloc|mi_malloc|je_malloc|tc_malloc)$' --split 'free=^(free|mi_free|je_free|tc_free|cfree)$' \
    slubmalloc glibc mimalloc jemalloc tcmalloc -- '{bin}/pairs' '{n}' "$SIZE"
} | tee "$REPORT"
