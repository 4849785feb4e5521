#!/usr/bin/env bash
# The peer comparison: the C workloads in benches/c/ and two real programs
# (python3, sqlite3) under glibc, slubmalloc (and slubmalloc-nopurge:
# SLUBMALLOC_PURGE_DELAY_MS set to a day, the cost of purging; and, when
# named in ALLOCATORS, slubmalloc-prof: the heap profile on) and
# Debian's jemalloc, mimalloc and tcmalloc by LD_PRELOAD, interleaved; then
# ci/bench_report.py's REPORT.md, charts (SVG) and results.csv.
#
#   ci/bench.sh [--size tiny|small|full|big] [--rounds N] [--threads N] [--out DIR]
#               [--workloads a,b,...] [--allocators a,b,...] [--callgrind 0|1]
#               [--timeout S]
#
# The same settings can come from the environment: SIZE, ROUNDS, THREADS, OUT,
# WORKLOADS, ALLOCATORS, CALLGRIND, TIMEOUT. SIZE=big is full with the
# huge_heap workload at 8 GiB (about 10 GiB resident). Defaults: SIZE=full,
# ROUNDS=5, THREADS=$(nproc), CALLGRIND=1 (0 at SIZE=tiny), OUT=bench/report for
# SIZE=full and target/measure/report-$SIZE otherwise (so that a CI smoke run
# never overwrites the committed report). A run that crashes, hangs or exits
# non-zero is reported with the command that reproduces it and makes the
# command exit 1 after the report. It is `ci/measure.py bench`: the
# workloads, builds and runs are ci/measure.py's.
exec python3 "$(dirname "$0")/measure.py" bench "$@"
