#!/usr/bin/env bash
# Compares builds of slubmalloc (and peers) on one command, interleaved: the
# A/B measurement behind a change. Each SPEC is
#   REV            the LD_PRELOAD library built at git revision REV
#   REV+FEATURE    the same with one more cargo feature, or, for a name that
#                  starts with slubmalloc_, a --cfg in RUSTFLAGS (the measurement
#                  switches, e.g. HEAD+slubmalloc_bench_no_checks)
#   glibc | jemalloc | mimalloc | tcmalloc   nothing preloaded, or Debian's peer
# Libraries are built once per spec in target/compare/ (a git worktree each).
# Every round runs the command under each spec in turn, rotating which goes
# first; the medians of CPU time (user + sys), wall time and peak RSS are
# printed per spec, with the first spec's CPU median as the base of the ratio.
#
#   ci/compare_builds.sh [-r ROUNDS] [-e NAME=VALUE]... SPEC... -- COMMAND ARGS...
#
# -e sets a variable in the command's environment (e.g. PYTHONMALLOC=malloc).
# The C workloads are built into target/bench/ as ci/bench.sh builds them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ROUNDS=7
ENVS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -r) ROUNDS=$2; shift 2 ;;
    -e) ENVS+=(-e "$2"); shift 2 ;;
    --) break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
SPECS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do SPECS+=("$1"); shift; done
[ $# -gt 1 ] && [ ${#SPECS[@]} -gt 0 ] || { echo "usage: $0 [-r ROUNDS] [-e N=V]... SPEC... -- COMMAND ARGS..." >&2; exit 2; }
shift
CMD=("$@")

mkdir -p target/bench target/compare
for src in benches/c/*.c; do
  exe=target/bench/$(basename "$src" .c)
  if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ]; then
    "${CC:-cc}" -O2 -g -pthread -Wall -o "$exe" "$src"
  fi
done

PEERS=/usr/lib/x86_64-linux-gnu
declare -A LIB
for spec in "${SPECS[@]}"; do
  case "$spec" in
    glibc) LIB[$spec]="" ;;
    jemalloc) LIB[$spec]=$PEERS/libjemalloc.so.2 ;;
    mimalloc) LIB[$spec]=$PEERS/libmimalloc.so.2 ;;
    tcmalloc) LIB[$spec]=$PEERS/libtcmalloc_minimal.so.4 ;;
    *)
      rev=${spec%%+*}
      feat=override
      cfg=
      if [ "$rev" != "$spec" ]; then
        case "${spec#*+}" in
          slubmalloc_*) cfg="--cfg ${spec#*+}" ;;
          *) feat=override,${spec#*+} ;;
        esac
      fi
      sha=$(git rev-parse --short "$rev^{commit}")
      name=$sha-${feat//,/-}${cfg:+-${spec#*+}}
      tree=target/compare/src-$sha
      if [ ! -d "$tree" ]; then
        git worktree add --detach --force "$tree" "$sha" >/dev/null 2>&1
      fi
      echo "compare_builds.sh: building $spec ($sha, features $feat${cfg:+, $cfg})" >&2
      RUSTFLAGS="${RUSTFLAGS:-} $cfg" cargo build --quiet --release --lib --features "$feat" \
        --manifest-path "$tree/Cargo.toml" --target-dir "target/compare/build-$name"
      LIB[$spec]=$ROOT/target/compare/build-$name/release/libslubmalloc.so
      ;;
  esac
  if [ -n "${LIB[$spec]}" ] && [ ! -f "${LIB[$spec]}" ]; then
    echo "compare_builds.sh: $spec: ${LIB[$spec]} not found (ci/deps.sh installs the peers)" >&2
    exit 1
  fi
done

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
n=${#SPECS[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < n; k++)); do
    spec=${SPECS[$(((k + r) % n))]}
    pre=()
    [ -n "${LIB[$spec]}" ] && pre=(-e "LD_PRELOAD=${LIB[$spec]}")
    line=$(target/bench/runner "${pre[@]}" "${ENVS[@]}" -- "${CMD[@]}" 2>/dev/null </dev/null | tail -1)
    echo "$spec $line" >> "$OUT"
  done
done

echo "${CMD[*]}: $ROUNDS interleaved rounds, medians"
python3 - "$OUT" "${SPECS[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
specs = sys.argv[2:]
base = None
print(f"{'spec':<24} {'cpu s':>8} {'wall s':>8} {'rss MiB':>8} {'cpu ratio':>9}  failed")
for s in specs:
    ok = [r for r in rows if r[0] == s and r[-1] == "ok"]
    bad = sum(1 for r in rows if r[0] == s and r[-1] != "ok")
    if not ok:
        print(f"{s:<24} {'-':>8} {'-':>8} {'-':>8} {'-':>9}  {bad}")
        continue
    cpu = statistics.median(float(r[2]) + float(r[3]) for r in ok)
    wall = statistics.median(float(r[1]) for r in ok)
    rss = statistics.median(float(r[4]) for r in ok) / 1024
    base = base or cpu
    print(f"{s:<24} {cpu:8.3f} {wall:8.3f} {rss:8.1f} {cpu / base:9.2f}  {bad}")
PY
