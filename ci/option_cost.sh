#!/usr/bin/env bash
# Times workloads under the preloaded library for each value of one
# SLUBMALLOC_* variable, interleaved, and prints medians and end RSS: how the
# purge delay and the free-list randomisation defaults were chosen.
#
#   ci/option_cost.sh VARIABLE "VALUE VALUE ..." [ROUNDS]
#   e.g. ci/option_cost.sh SLUBMALLOC_PURGE_DELAY_MS "10 100 1000"
#        ci/option_cost.sh SLUBMALLOC_FREELIST_RANDOM "0 1" 5
# Needs the workloads and inputs ci/bench.sh builds in target/bench (run
# `SIZE=tiny ROUNDS=1 ci/bench.sh` once first).
set -euo pipefail
cd "$(dirname "$0")/.."
VAR=$1
VALUES=$2
ROUNDS=${3:-3}
cargo build --release --quiet --lib --features override --target-dir target/preload
[ -x target/bench/larson ] || { echo "ci/option_cost.sh: run ci/bench.sh once first" >&2; exit 1; }
python3 - "$VAR" "$VALUES" "$ROUNDS" <<'PY'
import os, statistics, subprocess, sys, time
var, values, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
lib = os.path.abspath("target/preload/release/libslubmalloc.so")
work = {
    "msgpass": (["target/bench/msgpass", "2", "2000000", "16", "512"], None),
    "larson": (["target/bench/larson", "2", "10000", "200000", "20", "16", "1024"], None),
    "python3": (["python3", "-S", "target/bench/work.py", "50000"], None),
    "sqlite3": (["sqlite3", ":memory:"], "target/bench/work.sql"),
    "bursty": (["target/bench/bursty", "512", "2000", "100", "256"], None),
}
times, last = {}, {}
for r in range(rounds):
    for name, (cmd, stdin) in work.items():
        for v in (values if r % 2 == 0 else values[::-1]):
            env = dict(os.environ, LD_PRELOAD=lib, PYTHONMALLOC="malloc", **{var: v})
            t = time.perf_counter()
            with open(stdin or os.devnull) as inp:
                out = subprocess.run(cmd, env=env, stdin=inp, capture_output=True, text=True, check=True).stdout
            times.setdefault((name, v), []).append(time.perf_counter() - t)
            if name == "bursty":
                last[v] = [l for l in out.splitlines() if l.startswith("summary")][-1]
print(f"{var}, median wall time (s) of {rounds} interleaved rounds")
for name in work:
    print(f"  {name:8}", "  ".join(f"{v}: {statistics.median(times[(name, v)]):.3f}" for v in values))
for v in values:
    print(f"  bursty {v}: {last[v]}")
PY
