#!/usr/bin/env python3
"""What slubtop costs the process it watches: a workload under the preload
library, run alone and with `slubtop --interval I PID` reading it the whole
time, interleaved (ABBA) in one run; medians of wall and CPU time, their
ratios, and how many screens slubtop drew per run (so a run that was not
read cannot pass for one that was).

    ci/slubtop_cost.py [-r ROUNDS] [--interval SECS] [WORKLOAD ARGS...]

WORKLOAD is a program of benches/c (default: churn 2 1000000 2000, a
server's mixed-size churn with cross-thread frees; `threads 5000 100 1`
makes threads come and go, which is where slubtop retries its reads).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, **kw):
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def build(workload):
    sh(["cargo", "build", "--release", "-q"])
    out = os.path.join(ROOT, "target", "slubtop_cost")
    os.makedirs(out, exist_ok=True)
    exe = os.path.join(out, workload)
    src = os.path.join(ROOT, "benches", "c", workload + ".c")
    sh(["cc", "-O2", "-g", "-pthread", "-Wall", "-I", os.path.join(ROOT, "benches", "c"), "-o", exe, src])
    return (exe, os.path.join(ROOT, "target", "release", "libslubmalloc.so"),
            os.path.join(ROOT, "target", "release", "slubtop"))


def run_once(exe, args, lib, slubtop, interval):
    """(wall s, CPU s, screens drawn or None) of one run."""
    env = dict(os.environ, LD_PRELOAD=lib)
    start = time.perf_counter()
    target = subprocess.Popen([exe] + args, env=env, stdout=subprocess.DEVNULL)
    watcher, screens_file = None, None
    if slubtop:
        screens_file = tempfile.TemporaryFile()
        watcher = subprocess.Popen([slubtop, "--interval", str(interval), str(target.pid)],
                                   stdout=screens_file, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(target.pid, 0)
    wall = time.perf_counter() - start
    target.returncode = status
    if status != 0:
        sys.exit(f"{exe} failed: status {status}")
    screens = None
    if watcher:
        try:
            watcher.wait(timeout=10)  # it stops when the target is gone
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
        screens_file.seek(0)
        screens = screens_file.read().count(b"slubtop - PID ")
    return wall, usage.ru_utime + usage.ru_stime, screens


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-r", "--rounds", type=int, default=7)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("workload", nargs="*", default=["churn", "2", "1000000", "2000"])
    a = p.parse_args()
    exe, lib, slubtop = build(a.workload[0])
    runs = {"alone": [], "watched": []}
    screens = []
    for r in range(a.rounds):
        order = ["alone", "watched"] if r % 2 == 0 else ["watched", "alone"]
        for v in order:
            wall, cpu, s = run_once(exe, a.workload[1:], lib, slubtop if v == "watched" else None, a.interval)
            runs[v].append((wall, cpu))
            if s is not None:
                screens.append(s)
            print(f"round {r} {v:8} wall {wall:.3f} s  cpu {cpu:.3f} s" + (f"  screens {s}" if s is not None else ""))
    print(f"\n{' '.join(a.workload)}, {a.rounds} rounds interleaved, slubtop every {a.interval} s")
    med = {v: (statistics.median(w for w, _ in x), statistics.median(c for _, c in x)) for v, x in runs.items()}
    for v in runs:
        print(f"{v:8} median wall {med[v][0]:.3f} s  cpu {med[v][1]:.3f} s")
    print(f"watched/alone: wall {med['watched'][0] / med['alone'][0]:.3f}x  cpu {med['watched'][1] / med['alone'][1]:.3f}x;"
          f" slubtop drew {min(screens)}..{max(screens)} screens per watched run")


if __name__ == "__main__":
    main()
