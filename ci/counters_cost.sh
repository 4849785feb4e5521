#!/usr/bin/env bash
# What the per-thread statistics counters cost, in one run (issue 4): builds
# benches/counters.rs twice, with the counters (target/counters-on) and with
# them compiled out by `--cfg slubmalloc_bench_no_counters` in RUSTFLAGS
# (target/counters-off),
# runs both binaries interleaved in raw mode (on off off on ...), prints the
# median time per operation of each and the ratio, then the instructions per
# alloc + free pair of each under callgrind (difference of N and 2N runs).
#
#   ci/counters_cost.sh [-r ROUNDS] [-n PAIRS] [-p HANDOFFS] [-m CALLGRIND_M]
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=11
PAIRS=20000000
PRODCONS=4000000
CG_M=500000
while getopts "r:n:p:m:" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    n) PAIRS=$OPTARG ;;
    p) PRODCONS=$OPTARG ;;
    m) CG_M=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-n PAIRS] [-p HANDOFFS] [-m CALLGRIND_M]" >&2; exit 2 ;;
  esac
done

# The bench executable of one build, found from cargo's own report.
build() {
  local dir=$1 cfg=${2:-}
  RUSTFLAGS="${RUSTFLAGS:-} $cfg" cargo bench -p slubmalloc-benches --bench counters --no-run \
    --target-dir "$dir" --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "counters" and m.get("executable"):
        print(m["executable"])
'
}

echo "counters_cost.sh: building both variants" >&2
ON=$(build target/counters-on)
OFF=$(build target/counters-off "--cfg slubmalloc_bench_no_counters")
[ -x "$ON" ] && [ -x "$OFF" ] || { echo "counters_cost.sh: build failed" >&2; exit 1; }

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then order=("$ON" "$OFF"); else order=("$OFF" "$ON"); fi
  for bin in "${order[@]}"; do
    "$bin" --raw pairs "$PAIRS" | tee -a "$results" >&2
    "$bin" --raw prodcons "$PRODCONS" | tee -a "$results" >&2
  done
done

echo
echo "Counters on vs compiled out, $ROUNDS interleaved rounds ($(git log -1 --format=%h 2>/dev/null || echo '?'), $(nproc) cores)"
echo
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
t = {}
counted = {}
for build, load, n, secs, ns, c in rows:
    t.setdefault((build, load), []).append(float(ns))
    counted[build] = max(counted.get(build, 0), int(c))
print("| load | counters on ns/op | counters off ns/op | on/off | min on | min off |")
print("|---|---:|---:|---:|---:|---:|")
for load in ("pairs", "prodcons"):
    on, off = t[("counters_on", load)], t[("counters_off", load)]
    mon, moff = statistics.median(on), statistics.median(off)
    print(f"| {load} | {mon:.3f} | {moff:.3f} | {mon / moff:.3f} | {min(on):.3f} | {min(off):.3f} |")
print()
print(f"fast-path allocations counted: on {counted.get('counters_on')}, off {counted.get('counters_off')} (must be 0)")
if counted.get("counters_off", 1) != 0 or counted.get("counters_on", 0) == 0:
    sys.exit("counters_cost.sh: the two builds do not differ as they should")
EOF

if command -v valgrind >/dev/null; then
  echo
  echo "Instructions per operation (callgrind, Ir(2M) - Ir(M) over M = $CG_M)"
  echo
  echo "| load | counters on | counters off | difference |"
  echo "|---|---:|---:|---:|"
  ir() {
    local f
    f=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$f" "$1" --raw "$2" "$3" >/dev/null 2>&1
    grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}'
    rm -f "$f"
  }
  # pairs only: prodcons under valgrind (threads serialised, channel waits)
  # varies from run to run by more than the counters cost.
  for load in pairs; do
    on=$(awk -v a="$(ir "$ON" $load "$CG_M")" -v b="$(ir "$ON" $load $((2 * CG_M)))" -v m="$CG_M" 'BEGIN { printf "%.2f", (b - a) / m }')
    off=$(awk -v a="$(ir "$OFF" $load "$CG_M")" -v b="$(ir "$OFF" $load $((2 * CG_M)))" -v m="$CG_M" 'BEGIN { printf "%.2f", (b - a) / m }')
    echo "| $load | $on | $off | $(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a - b }') |"
  done
fi
