#!/usr/bin/env bash
# What the default-mode hardening checks cost (issue 7): the preload library
# built with them (target/checks-on) and without (`--cfg
# slubmalloc_bench_no_checks` in RUSTFLAGS, target/checks-off), running benches/c/fastpath.c (four
# malloc/free loops: fixed size, random sizes, LIFO and FIFO batches)
# interleaved ROUNDS times; prints the median wall time of each and the
# ratio, then instructions per malloc+free pair under callgrind (difference
# of an N and a 2N run, over the four loops). Then, if ci/bench.sh has
# written its real-program inputs (target/bench/work.py, work.sql), python3
# and sqlite3 on them with each library, interleaved.
#
#   ci/checks_cost.sh [ROUNDS [ITERATIONS]]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
N=${2:-2000000}

for v in on off; do
  cfg=
  [ "$v" = off ] && cfg="--cfg slubmalloc_bench_no_checks"
  RUSTFLAGS="${RUSTFLAGS:-} $cfg" cargo build --release --quiet --lib --features override --target-dir "target/checks-$v"
done
exe=target/checks-on/fastpath
cc -O2 -o "$exe" benches/c/fastpath.c

python3 - "$ROUNDS" "$N" "$exe" <<'PY'
import os, statistics, subprocess, sys, time
rounds, n, exe = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libs = {v: os.path.abspath(f"target/checks-{v}/release/libslubmalloc.so") for v in ("on", "off")}
times = {v: [] for v in libs}
for r in range(rounds):
    for v in (("on", "off") if r % 2 == 0 else ("off", "on")):
        env = dict(os.environ, LD_PRELOAD=libs[v])
        t = time.perf_counter()
        subprocess.run([exe, n, "1000", "512"], env=env, check=True, stdout=subprocess.DEVNULL)
        times[v].append(time.perf_counter() - t)
med = {v: statistics.median(t) for v, t in times.items()}
print(f"fastpath {n} x 4 loops, {rounds} interleaved rounds")
print(f"  checks on : median {med['on']:.3f} s")
print(f"  checks off: median {med['off']:.3f} s")
print(f"  on / off  : {med['on'] / med['off']:.3f}")

def instructions(v, iters):
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", exe, str(iters), "1000", "512"],
                         env=dict(os.environ, LD_PRELOAD=libs[v]), capture_output=True, text=True).stderr
    return int([l for l in out.splitlines() if "Collected" in l][0].split()[-1].replace(",", ""))
m = 200000
for v in libs:
    per_pair = (instructions(v, 2 * m) - instructions(v, m)) / (4 * m)
    print(f"  instructions per malloc+free pair, checks {v}: {per_pair:.1f}")

programs = [("python3", ["python3", "-S", "target/bench/work.py", "50000"], None, "target/bench/work.py"),
            ("sqlite3", ["sqlite3", ":memory:"], "target/bench/work.sql", "target/bench/work.sql")]
for name, cmd, stdin, needed in programs:
    if not os.path.exists(needed):
        print(f"  {name}: no input; run ci/bench.sh once first")
        continue
    times = {v: [] for v in libs}
    for r in range(rounds):
        for v in (("on", "off") if r % 2 == 0 else ("off", "on")):
            env = dict(os.environ, LD_PRELOAD=libs[v], PYTHONMALLOC="malloc")
            t = time.perf_counter()
            with open(stdin or os.devnull) as inp:
                subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stdin=inp)
            times[v].append(time.perf_counter() - t)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print(f"  {name}: checks on {on:.3f} s, off {off:.3f} s, on / off {on / off:.3f}")
PY
