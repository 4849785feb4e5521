#!/usr/bin/env bash
# The peer comparison: runs the C workloads in benches/c/ and two real
# programs under each allocator (LD_PRELOAD), interleaved, and writes a report.
#
#   ci/bench.sh [--size tiny|small|full] [--rounds N] [--threads N] [--out DIR]
#               [--workloads a,b,...] [--allocators a,b,...] [--callgrind 0|1]
#
# The same settings can come from the environment: SIZE, ROUNDS, THREADS, OUT,
# WORKLOADS, ALLOCATORS, CALLGRIND, TIMEOUT (seconds per run). Defaults:
# SIZE=full, ROUNDS=5, THREADS=$(nproc), CALLGRIND=1 (0 at SIZE=tiny),
# OUT=bench/report for SIZE=full and target/bench/report-$SIZE otherwise (so a
# CI smoke run never overwrites the committed report).
#
# Each round runs every workload under every allocator, one after another
# (A B C D E A B C D E ...), rotating which allocator goes first. Per run it
# records wall time, CPU time and peak resident memory (benches/c/runner.c,
# from wait4's rusage). ci/bench_report.py then writes OUT/REPORT.md, the
# charts (SVG) and OUT/results.csv; the raw per-run outputs are in OUT/raw/.
# A run that crashes, hangs (TIMEOUT) or exits non-zero is reported with the
# command that reproduces it, and makes the command exit 1 after the report.
#
# Allocators: glibc (nothing preloaded), slubmalloc, slubmalloc-nopurge
# (SLUBMALLOC_PURGE_DELAY_MS set to a day: the cost of purging), and
# Debian's jemalloc, mimalloc and tcmalloc (ci/deps.sh installs them); a
# missing one is skipped with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
trap 'echo "ci/bench.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
CMDLINE="ci/bench.sh${*:+ $*}"

SIZE=${SIZE:-full}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-$(nproc)}
WORKLOADS=${WORKLOADS:-msgpass,larson,fastpath,threads,large,bursty,python,sqlite,live_threads,idle_purge,large_replace}
ALLOCATORS=${ALLOCATORS:-glibc,slubmalloc,slubmalloc-nopurge,jemalloc,mimalloc,tcmalloc}
OUT=${OUT:-}
CALLGRIND=${CALLGRIND:-}
TIMEOUT=${TIMEOUT:-}

while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --allocators) ALLOCATORS=$2; shift 2 ;;
    --callgrind) CALLGRIND=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "ci/bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case "$SIZE" in tiny|small|full) ;; *) echo "ci/bench.sh: SIZE must be tiny, small or full" >&2; exit 2 ;; esac
[ "$ROUNDS" -ge 1 ] && [ "$THREADS" -ge 1 ] || { echo "ci/bench.sh: ROUNDS and THREADS must be >= 1" >&2; exit 2; }
[ -n "$OUT" ] || { [ "$SIZE" = full ] && OUT=bench/report || OUT=target/bench/report-$SIZE; }
[ -n "$CALLGRIND" ] || { [ "$SIZE" = tiny ] && CALLGRIND=0 || CALLGRIND=1; }
[ -n "$TIMEOUT" ] || { [ "$SIZE" = tiny ] && TIMEOUT=30 || TIMEOUT=180; }

T=$THREADS
# Workload parameters per size: "tiny small full". Thread counts scale with T.
case "$SIZE" in
  tiny)  MSG=50000;   LAR_OPS=20000;  LAR_GEN=5;  FP=500000;   THR=500;   LARGE=100;  BURST_MIB=64;  BURST_MS=300;  PY=5000;  SQL=5000 ;;
  small) MSG=500000;  LAR_OPS=100000; LAR_GEN=10; FP=5000000;  THR=5000;  LARGE=500;  BURST_MIB=256; BURST_MS=1000; PY=20000; SQL=20000 ;;
  full)  MSG=2000000; LAR_OPS=200000; LAR_GEN=20; FP=10000000; THR=20000; LARGE=1000; BURST_MIB=512; BURST_MS=2000; PY=50000; SQL=50000 ;;
esac
# The memory shapes (live_threads, idle_purge, large_replace): threads alive at once, replacement steps.
case "$SIZE" in tiny) LIVE_THR=200; LARGE_STEPS=20 ;; small) LIVE_THR=1000; LARGE_STEPS=100 ;; full) LIVE_THR=4000; LARGE_STEPS=300 ;; esac

BUILD=target/bench
mkdir -p "$BUILD" "$OUT/raw"
rm -f "$OUT"/raw/*

echo "ci/bench.sh: building slubmalloc (--release --features override)" >&2
# target/preload is where the tests build the same library (tests/processes/common.rs).
if ! cargo build --release --features override --lib --target-dir target/preload; then
  echo "ci/bench.sh: building slubmalloc failed" >&2
  exit 1
fi
SLUB=$ROOT/target/preload/release/libslubmalloc.so

CC=${CC:-cc}
for src in benches/c/*.c; do
  exe=$BUILD/$(basename "$src" .c)
  if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ]; then
    "$CC" -O2 -g -pthread -Wall -o "$exe" "$src"
  fi
done

PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3)
SQLITE=$(command -v sqlite3 || true)

# The real programs' fixed inputs.
cat > "$BUILD/work.py" <<'EOF'
# Allocation-heavy Python: dicts, tuples, strings, JSON round trip, sorting.
import json, sys
n = int(sys.argv[1])
table = {}
for i in range(n):
    key = "k%07d" % (i * 7919 % 1000003)
    table[key] = {"id": i, "name": "item-%d" % i, "tags": [str(i % 13), str(i % 7)], "pair": (i, i * 2.5)}
text = json.dumps(table)
back = json.loads(text)
assert len(back) == len(table)
words = sorted(text.split('"'))
groups = {}
for w in words:
    groups.setdefault(len(w), []).append(w)
for k in list(table)[::2]:
    del table[k]
chunks = ["".join(words[i:i + 50]) for i in range(0, len(words), 50)]
print(n, len(text), len(groups), sum(map(len, chunks)))
EOF
sed "s/:N/$SQL/" > "$BUILD/work.sql" <<'EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, payload BLOB, grp INT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :N)
  INSERT INTO t SELECT x, printf('%08x-%d', (x * 2654435761) % 4294967291, x), zeroblob(16 + (x * 7919) % 1000), x % 97 FROM c;
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), sum(length(payload)) FROM t GROUP BY grp ORDER BY 2 DESC, 1 LIMIT 3;
UPDATE t SET payload = zeroblob(32 + (id * 31) % 2000), name = name || '-u' WHERE id % 3 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), max(name) FROM t WHERE name LIKE '1%';
SELECT length(group_concat(name, ',')) FROM (SELECT name FROM t ORDER BY payload, name);
EOF

# workload name -> CMD (argument array) and IN (its standard input)
workload_cmd() {
  IN=/dev/null
  case "$1" in
    msgpass)  CMD=("$BUILD/msgpass" "$T" "$MSG" 16 512) ;;
    larson)   CMD=("$BUILD/larson" "$T" 10000 "$LAR_OPS" "$LAR_GEN" 16 1024) ;;
    fastpath) CMD=("$BUILD/fastpath" "$FP" 1000 512) ;;
    threads)  CMD=("$BUILD/threads" "$THR" 100 1) ;;
    large)    CMD=("$BUILD/large" "$LARGE" 128 4096 8 "$T") ;;
    bursty)   CMD=("$BUILD/bursty" "$BURST_MIB" "$BURST_MS" 100 256) ;;
    live_threads)  CMD=("$BUILD/live_threads" "$LIVE_THR" 4) ;;
    idle_purge)    CMD=("$BUILD/idle_purge" "$BURST_MIB" 1000 2) ;;
    large_replace) CMD=("$BUILD/large_replace" "$LARGE_STEPS" 20 5 25) ;;
    python)   CMD=("$PYTHON" -S "$BUILD/work.py" "$PY") ;;
    sqlite)   CMD=("$SQLITE" :memory:); IN=$BUILD/work.sql ;;
    *) return 1 ;;
  esac
}

find_lib() { # soname package
  local p
  # No early exit in the pipeline: with pipefail, a SIGPIPE would fail it.
  p=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64|x86_64|64bit/ && !p {p = $NF} END {print p}' || true)
  [ -n "$p" ] || p=$(dpkg -L "$2" 2>/dev/null | grep "/$1\$" | head -n1 || true)
  echo "$p"
}

# allocator name -> runner -e arguments (one per line)
declare -A ENVS VERSIONS
allocs=()
IFS=, read -r -a want_allocs <<< "$ALLOCATORS"
for a in "${want_allocs[@]}"; do
  case "$a" in
    glibc) ENVS[$a]=""; VERSIONS[$a]=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $NF}' || true) ;;
    slubmalloc) ENVS[$a]="LD_PRELOAD=$SLUB" ;;
    slubmalloc-nopurge) ENVS[$a]="LD_PRELOAD=$SLUB SLUBMALLOC_PURGE_DELAY_MS=86400000" ;;
    jemalloc|mimalloc|tcmalloc)
      case "$a" in
        jemalloc) so=libjemalloc.so.2; pkg=libjemalloc2 ;;
        mimalloc) so=libmimalloc.so.2; pkg=libmimalloc2.0 ;;
        tcmalloc) so=libtcmalloc_minimal.so.4; pkg=libtcmalloc-minimal4 ;;
      esac
      lib=$(find_lib "$so" "$pkg")
      if [ -z "$lib" ] || [ ! -e "$lib" ]; then
        echo "ci/bench.sh: warning: $a ($so from $pkg) not found, skipped; ci/deps.sh installs it" >&2
        continue
      fi
      ENVS[$a]="LD_PRELOAD=$lib"
      VERSIONS[$a]=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo "?")
      ;;
    *) echo "ci/bench.sh: unknown allocator $a" >&2; exit 2 ;;
  esac
  case "$a" in slubmalloc*) VERSIONS[$a]="$(git rev-parse --short HEAD 2>/dev/null || echo "?")$(git diff --quiet HEAD -- src Cargo.toml 2>/dev/null || echo +dirty)" ;; esac
  allocs+=("$a")
done
IFS=, read -r -a want_works <<< "$WORKLOADS"
works=()
for w in "${want_works[@]}"; do
  workload_cmd "$w" || { echo "ci/bench.sh: unknown workload $w" >&2; exit 2; }
  if [ "$w" = sqlite ] && [ -z "$SQLITE" ]; then
    echo "ci/bench.sh: warning: sqlite3 not found, workload sqlite skipped" >&2
    continue
  fi
  works+=("$w")
done

CSV=$OUT/raw/runs.csv
echo "round,workload,allocator,wall_s,user_s,sys_s,maxrss_kib,status" > "$CSV"
n=${#allocs[@]}
failures=0
start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  for w in "${works[@]}"; do
    workload_cmd "$w"
    for ((k = 0; k < n; k++)); do
      a=${allocs[$(((k + r - 1) % n))]}
      env_args=()
      for e in ${ENVS[$a]}; do env_args+=(-e "$e"); done
      [ "$w" = python ] && env_args+=(-e PYTHONMALLOC=malloc)
      log=$OUT/raw/$w.$a.$r
      rm -f "$log.time"
      "$BUILD/runner" -t "$TIMEOUT" -o "$log.time" "${env_args[@]}" -- "${CMD[@]}" \
        < "$IN" > "$log.out" 2> "$log.err" || true
      wall='' user='' sys='' rss='' status=runner-failed
      if [ -s "$log.time" ]; then read -r wall user sys rss status < "$log.time" || true; fi
      echo "$r,$w,$a,$wall,$user,$sys,$rss,$status" >> "$CSV"
      if [ "$status" != ok ]; then
        failures=$((failures + 1))
        echo "ci/bench.sh: $w under $a failed ($status): ${ENVS[$a]} ${CMD[*]} < $IN" >&2
        head -c 400 "$log.err" >&2 || true
      fi
      # Only the bursty samples and failures' output are worth keeping.
      if [ "$status" = ok ] && [ "$w" != bursty ]; then rm -f "$log.out" "$log.err"; fi
      [ -s "$log.err" ] || rm -f "$log.err"
      rm -f "$log.time"
    done
  done
  echo "ci/bench.sh: round $r/$ROUNDS done ($(($(date +%s) - start)) s)" >&2
done

# Instruction counts of the fast paths (callgrind is deterministic here).
if [ "$CALLGRIND" = 1 ]; then
  if command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null; then
    for a in "${allocs[@]}"; do
      [ "$a" = slubmalloc-nopurge ] && continue
      cg=$OUT/raw/callgrind.$a
      # shellcheck disable=SC2086
      if env ${ENVS[$a]} FASTPATH_BASELINE=1 valgrind --tool=callgrind --callgrind-out-file="$cg.out" \
          "$BUILD/fastpath" 200000 1000 512 > /dev/null 2> "$cg.err"; then
        # The 40 costliest functions (inclusive) and every phase of fastpath.
        callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$cg.out" 2>/dev/null \
          | awk 'NR <= 60 || /:fp_/' > "$cg.txt" || true
        rm -f "$cg.err"
      else
        echo "ci/bench.sh: warning: callgrind run under $a failed" >&2
      fi
      rm -f "$cg.out"
    done
  else
    echo "ci/bench.sh: warning: valgrind not found, no instruction counts" >&2
  fi
fi

# Machine and settings for the report.
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "command=SIZE=$SIZE ROUNDS=$ROUNDS THREADS=$THREADS $CMDLINE"
  echo "nproc=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
  echo "memory=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel=$(uname -r)"
  echo "size=$SIZE"
  echo "rounds=$ROUNDS"
  echo "threads=$THREADS"
  echo "allocators=$(IFS=,; echo "${allocs[*]}")"
  for a in "${allocs[@]}"; do echo "version.$a=${VERSIONS[$a]:-}"; done
  for w in "${works[@]}"; do
    workload_cmd "$w"
    line="${CMD[*]}"
    [ "$IN" = /dev/null ] || line="$line < $IN"
    [ "$w" = python ] && line="PYTHONMALLOC=malloc $line"
    echo "workload.$w=$line"
  done
  echo "fastpath_callgrind=fastpath 200000 1000 512"
  echo "elapsed_s=$(($(date +%s) - start))"
  echo "loadavg=$load_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
} > "$OUT/raw/meta.txt"

"$PYTHON" ci/bench_report.py "$OUT"
echo "ci/bench.sh: report in $OUT/REPORT.md ($failures failed runs)" >&2
# A crash, hang or wrong exit status under any allocator fails the command.
if [ "$failures" -gt 0 ]; then exit 1; fi
