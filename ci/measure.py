#!/usr/bin/env python3
"""The one measurement tool: builds variants of the allocator, runs workloads
under each, interleaved, and reports medians and instruction counts.

    ci/measure.py [OPTIONS] VARIANT... [-- COMMAND ARGS...]
    ci/measure.py bench [--size tiny|small|full|big] [--rounds N] ...   (ci/bench.sh)

A VARIANT is  [REV][+SWITCH]...[:NAME=VALUE]...
  REV      a git revision, built from `git archive` of it; empty, `.` or
           `slubmalloc`: the working tree as it is, uncommitted changes included
  +SWITCH  a `--cfg` in RUSTFLAGS when it starts with `slubmalloc_` (the
           measurement switches `slubmalloc_bench_no_checks`,
           `slubmalloc_bench_no_counters`), else one more cargo feature
  :N=V     set in the environment of every run of this variant
or a peer:  glibc | jemalloc | mimalloc | tcmalloc  [:NAME=VALUE]...
  (nothing preloaded, or Debian's library; ci/deps.sh installs them; a missing
  one is skipped with a warning).
Examples: `HEAD~1`, `.`, `.+slubmalloc_bench_no_checks`,
`.:SLUBMALLOC_PURGE_DELAY_MS=10`, `tcmalloc`.

Every variant is built with cargo into one target tree (target/measure: the
dependencies compile once), its artifact copied to
target/measure/variants/LABEL/. What is built (--build):
  preload       libslubmalloc.so (--features override), run by LD_PRELOAD (default)
  program:NAME  the program NAME of tests/programs/ (a Rust program with
                slubmalloc as its global allocator; at a revision from before
                that package, the crate's example NAME); COMMAND names it {exe}
  bench:NAME    the benches package's bench NAME; COMMAND names it {exe}
The C workloads (benches/c/*.c, with the shared benches/c/bench.h) and the
Rust ones (benches/rust/*.rs, rustc alone, on the C heap) are built into
target/measure/bin/, which COMMAND names {bin}.

What runs: COMMAND after `--`, or the named workloads of --workloads (the
table WORKLOADS below, sized by --size). `{n}` in a COMMAND is -n N; a named
workload's n comes from its size.

What is measured:
  -r ROUNDS      rounds of wall time, CPU time and peak RSS (benches/c/runner.c,
                 from wait4's rusage), each round running every variant in turn
                 with the first rotating; medians, and ratios to the first
                 variant (default 7; 0: none)
  --callgrind M  instructions per operation under valgrind's callgrind: the
                 command with n = M and with n = 2M; (Ir(2M) - Ir(M)) / (M * PER)
                 (--per PER, default the workload's own, else 1); with
                 --split NAME=REGEX also the inclusive count of the costliest
                 function whose name matches REGEX, per operation
Other options: -e NAME=VALUE (every run's environment), --size (default full),
--threads (default nproc), --timeout S (per run, default 180), --csv FILE (the
raw runs), --label TEXT (the table's title).

Examples (the measurements behind bench/report/HISTORY.md):
  ci/measure.py -r 7 HEAD~1 HEAD tcmalloc -- {bin}/larson 2 10000 200000 20 16 1024
  ci/measure.py -r 5 --workloads fastpath,python,sqlite . .+slubmalloc_bench_no_checks
  ci/measure.py -r 0 --callgrind 200000 --workloads fastpath . .+slubmalloc_bench_no_checks
  ci/measure.py -r 11 -n 20000000 --callgrind 500000 --build bench:counters \\
      . .+slubmalloc_bench_no_counters -- {exe} --raw pairs {n}
  ci/measure.py -r 3 --workloads msgpass,larson,python,sqlite,bursty \\
      .:SLUBMALLOC_PURGE_DELAY_MS=10 .:SLUBMALLOC_PURGE_DELAY_MS=100
  ci/callgrind.sh -m 200000     (instructions per malloc + free pair, Rust and C)
"""
import argparse
import csv
import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "ci"))
import bench_report  # noqa: E402  (the report and its medians)

TREE = os.path.join("target", "measure")
BIN = os.path.join(TREE, "bin")
# `big`: the full sizes, and bigger heaps for the workloads that name a
# fourth n (huge_heap: 8 GiB; about 10 GiB resident at once).
SIZES = ("tiny", "small", "full", "big")
# name -> (command, n per size (tiny, small, full[, big]), instructions per op divisor)
# {T}: threads; {gen}/{ms}: larson's generations, bursty's light-use time;
# {st}: shared_table's threads.
WORKLOADS = {
    "msgpass": ("{bin}/msgpass {T} {n} 16 512", (50000, 500000, 2000000), 1),
    "larson": ("{bin}/larson {T} 10000 {n} {gen} 16 1024", (20000, 100000, 200000), 1),
    "fastpath": ("{bin}/fastpath {n} 1000 512", (500000, 5000000, 10000000), 4),
    # One thread, then a second, allocates batches of 25-1,600 blocks of
    # 16-1,024 B and frees each batch in allocation order, n rounds.
    "batch": ("{bin}/batch {n}", (300, 1000, 3000), 1),
    "threads": ("{bin}/threads {n} 100 1", (500, 5000, 20000), 1),
    "large": ("{bin}/large {n} 128 4096 8 {T}", (100, 500, 1000), 1),
    "bursty": ("{bin}/bursty {n} {ms} 100 256", (64, 256, 512), 1),
    # A fixed hash seed: with a random one (Python's default) the dicts'
    # collisions change from run to run, and with them the instructions
    # (452.7 to 477.5 million in three callgrind runs of one library, n = 5000).
    "python": ("PYTHONHASHSEED=0 PYTHONMALLOC=malloc {python} -S benches/work.py {n}", (5000, 20000, 50000), 1),
    "sqlite": ("{sqlite} :memory: < {bin}/work-{n}.sql", (5000, 20000, 50000), 1),
    "pairs": ("{bin}/pairs {n} 64", (1000000, 1000000, 1000000), 1),
    # The memory shapes: n threads alive at once holding 4 blocks of 8 sizes;
    # n MiB freed, then idle without a call (prints the resident kept); n
    # big blocks replaced one at a time among 20 of 5-25 MiB.
    "live_threads": ("{bin}/live_threads {n} 4", (200, 1000, 4000), 1),
    "idle_purge": ("{bin}/idle_purge {n} 1000 2", (64, 256, 512), 1),
    "large_replace": ("{bin}/large_replace {n} 20 5 25", (20, 100, 300), 1),
    # Big heaps (one thread; the cost of an operation should not grow with
    # the heap): n MiB of 48/64-byte blocks built, half replaced by 40-byte
    # ones, all freed (big_heap 1 GiB and huge_heap 4 GiB at full size,
    # huge_heap 8 GiB at big); the same with every 48-byte block freed
    # before the 40-byte ones are allocated, so that their slabs empty in
    # segments still in use (emptied_heap, huge_emptied_heap); n live blocks
    # of 128-180 KiB, 200,000 replaced one at a time (1,000 and 16,000 at
    # full size).
    "big_heap": ("{bin}/big_heap {n}", (64, 256, 1024), 1),
    "huge_heap": ("{bin}/big_heap {n}", (128, 512, 4096, 8192), 1),
    "emptied_heap": ("{bin}/big_heap {n} emptied", (64, 256, 1024), 1),
    "huge_emptied_heap": ("{bin}/big_heap {n} emptied", (128, 512, 4096, 8192), 1),
    "big_blocks": ("{bin}/random_table {n} 200000 131072 184320", (1000, 1000, 1000), 1),
    "many_big_blocks": ("{bin}/random_table {n} 200000 131072 184320", (2000, 4000, 16000), 1),
    # Four threads whatever the machine: server churn of mixed sizes with
    # requests passed round a ring of workers; a random stress on one shared
    # table of blocks (frees of any thread's blocks, small and large).
    "churn": ("{bin}/churn 4 {n} 2000", (100000, 1000000, 4000000), 1),
    "stress": ("{bin}/stress 4 {n} 10000", (100000, 1000000, 3000000), 1),
    # Small programs, one thread, the same at every size (their peak RSS is
    # what a short command-line tool pays): n malloc(64) + free pairs, then
    # exit; n rounds of 1,000 blocks of one size, moving through 64 sizes
    # of 8-560 B; a Rust program of hello-world size (benches/rust/hello.rs).
    "startup": ("{bin}/pairs {n} 64 0", (1000000, 1000000, 1000000), 1),
    "size_cycle": ("{bin}/size_cycle {n} 1000 64 560", (300, 300, 300), 1),
    "hello": ("{bin}/hello {n}", (1000, 1000, 1000), 1),
    # The shapes of per-thread arrays of freed blocks (sheaves): one thread
    # only allocates (16-512 B) and another only frees, n blocks through a
    # ring of 1,024; {st} threads (32, 64 at big) swap n blocks of 8 B-4 KiB
    # in all through one table of 10,000 (3.7 MB live; peak RSS is the
    # point); one thread replaces n blocks at random among 100,000 of
    # 16 B-1 KiB (both the freed block and the new one cold); 1 and 2
    # threads each replace n blocks at random in a table of their own of
    # 1,024 (4 B-32 KiB, inverse-square sizes, every byte written: the
    # blocks stay warm and never leave their thread).
    "prodcons": ("{bin}/prodcons 1 {n} 16 512 1024", (100000, 1000000, 5000000), 1),
    "shared_table": ("{bin}/shared_table {st} {n} 10000", (200000, 2000000, 20000000), 1),
    "random_table": ("{bin}/random_table 100000 {n} 16 1024", (200000, 2000000, 20000000), 1),
    "own_table": ("{bin}/own_table 1 {n}", (300000, 3000000, 20000000), 1),
    "own_table2": ("{bin}/own_table 2 {n}", (150000, 1500000, 10000000), 2),
    # Memory flat in threads: 4 to 64 threads (256 at big, in the bench's
    # list only there) swap n blocks in all through one table of 10,000,
    # 7 in 8 of 8-255 B and the rest 256 B-4 KiB (shared_table's `eighth`
    # mix): nearly every free is of a block another thread allocated, and
    # peak RSS against the threads is the point.
    "shared_churn4": ("{bin}/shared_table 4 {n} 10000 eighth", (400000, 2000000, 8000000), 1),
    "shared_churn16": ("{bin}/shared_table 16 {n} 10000 eighth", (400000, 2000000, 8000000), 1),
    "shared_churn32": ("{bin}/shared_table 32 {n} 10000 eighth", (400000, 2000000, 8000000), 1),
    "shared_churn64": ("{bin}/shared_table 64 {n} 10000 eighth", (400000, 2000000, 8000000), 1),
    "shared_churn256": ("{bin}/shared_table 256 {n} 10000 eighth", (400000, 2000000, 8000000), 1),
    # A tokio server on 2 workers (benches/server, built only when named):
    # n requests of serialized JSON through channels between client and
    # handler tasks, about half freed on the other worker; n operations of
    # 32 tasks on a sharded cache of 16 B-4 KiB values.
    "server": ("{bin}/server pipeline {n}", (10000, 50000, 200000), 1),
    "server_cache": ("{bin}/server cache {n}", (500000, 2000000, 8000000), 1),
}
PER_SIZE = {"tiny": {"gen": 5, "ms": 300, "st": 32}, "small": {"gen": 10, "ms": 1000, "st": 32},
            "full": {"gen": 20, "ms": 2000, "st": 32}, "big": {"gen": 20, "ms": 2000, "st": 64}}
BENCH_WORKLOADS = ("msgpass,larson,churn,stress,fastpath,batch,threads,large,bursty,python,sqlite,live_threads,idle_purge,"
                   "large_replace,big_heap,huge_heap,emptied_heap,huge_emptied_heap,big_blocks,many_big_blocks,startup,"
                   "size_cycle,hello,prodcons,shared_table,random_table,own_table,own_table2,"
                   "shared_churn4,shared_churn16,shared_churn32,shared_churn64,server,server_cache")
# What `bench` adds to the default list at one size.
BENCH_WORKLOADS_AT = {"big": ",shared_churn256"}
PEERS = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
}


# The allocators `bench` names that are slubmalloc builds: the variant spec
# of each. slubmalloc-nopurge: purging put off by a day (what purging costs);
# slubmalloc-prof: the heap profile on at the default rate, written to
# /dev/null (what profiling costs; not in the default list).
SLUBMALLOC_VARIANTS = {
    "slubmalloc": ".",
    "slubmalloc-nopurge": ".:SLUBMALLOC_PURGE_DELAY_MS=86400000",
    "slubmalloc-prof": ".:SLUBMALLOC_PROF=1:SLUBMALLOC_PROF_FILE=/dev/null",
}


def say(msg):
    print(f"measure: {msg}", file=sys.stderr, flush=True)


def die(msg, code=2):
    say(msg)
    sys.exit(code)


def sh(args, **kw):
    return subprocess.run(args, cwd=ROOT, check=True, **kw)


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


# --------------------------------------------------------------------------
# Variants


class Variant:
    def __init__(self, spec):
        self.spec = spec
        base, *envs = spec.split(":")
        self.env = {}
        for e in envs:
            if "=" not in e:
                die(f"{spec}: `:{e}` is not NAME=VALUE")
            k, v = e.split("=", 1)
            self.env[k] = v
        rev, *switches = base.split("+")
        self.peer = rev if rev == "glibc" or rev in PEERS else None
        if self.peer and switches:
            die(f"{spec}: a peer takes no +switch")
        self.rev = None if rev in ("", ".", "slubmalloc") else rev
        self.cfgs = [s for s in switches if s.startswith("slubmalloc_")]
        self.features = [s for s in switches if not s.startswith("slubmalloc_")]
        self.label = spec
        self.lib = None  # what LD_PRELOAD gets, if anything
        self.exe = None  # the built program, for {exe}
        self.version = ""

    def slug(self):
        """The label as a file name (`.`, the working tree, as `worktree`)."""
        slug = re.sub(r"[^A-Za-z0-9_.=+-]", "_", self.label)
        return "worktree" + slug[1:] if slug.startswith(".") else slug

    def run_env(self):
        env = dict(self.env)
        if self.lib:
            env["LD_PRELOAD"] = self.lib
        return env


def find_peer(name):
    so, pkg = PEERS[name]
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == so and re.search(r"x86-64|x86_64|64bit", line):
            return f[-1], pkg
    out = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True).stdout
    for p in out.splitlines():
        if p.endswith("/" + so):
            return p, pkg
    return None, pkg


def source_tree(rev):
    """The directory to build `rev` in: the working tree, or an export."""
    if rev is None:
        return ROOT
    sha = git("rev-parse", "--short", f"{rev}^{{commit}}")
    tree = os.path.join(ROOT, TREE, "src", sha)
    if not os.path.exists(os.path.join(tree, "Cargo.toml")):
        os.makedirs(tree, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
    return tree


def cargo_json_executable(out, name):
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and m.get("executable"):
            return m["executable"]
    return None


def build(v, what):
    """Builds variant `v`'s artifact (`what`: preload, program:NAME, bench:NAME)."""
    if v.peer:
        if what != "preload":
            die(f"{v.spec}: a peer has no {what}")
        if v.peer != "glibc":
            lib, pkg = find_peer(v.peer)
            if not lib or not os.path.exists(lib):
                say(f"warning: {v.peer} ({PEERS[v.peer][0]} from {pkg}) not found, skipped; ci/deps.sh installs it")
                return False
            v.lib = lib
            v.version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg],
                                       capture_output=True, text=True).stdout or "?"
        else:
            out = subprocess.run(["getconf", "GNU_LIBC_VERSION"], capture_output=True, text=True).stdout
            v.version = out.split()[-1] if out.split() else ""
        return True
    tree = source_tree(v.rev)
    if v.rev is None:
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src", "Cargo.toml"], cwd=ROOT).returncode
        v.version = git("rev-parse", "--short", "HEAD") + ("+dirty" if dirty else "")
    else:
        v.version = git("rev-parse", "--short", f"{v.rev}^{{commit}}")
    env = dict(os.environ)
    env["RUSTFLAGS"] = " ".join([env.get("RUSTFLAGS", "")] + [f"--cfg {c}" for c in v.cfgs]).strip()
    # One target directory per source tree and build configuration: the
    # preload library has the same file name in every build, so a target
    # directory shared between trees hands the last one built to a tree
    # whose build cargo finds fresh (the working tree measured as HEAD).
    config = "+".join(["worktree" if v.rev is None else v.version] + v.cfgs + v.features)
    target = os.path.join(ROOT, TREE, "build", re.sub(r"[^A-Za-z0-9_.+-]", "_", config))
    common = ["--release", "--manifest-path", os.path.join(tree, "Cargo.toml"), "--target-dir", target]
    kind, _, name = what.partition(":")
    say(f"building {v.label} ({v.version}{', ' + env['RUSTFLAGS'] if env['RUSTFLAGS'] else ''}): {what}")
    dest = os.path.join(ROOT, TREE, "variants", v.slug())
    os.makedirs(dest, exist_ok=True)
    feats = ",".join((["override"] if kind == "preload" else []) + v.features)
    fargs = ["--features", feats] if feats else []
    if kind == "preload":
        sh(["cargo", "build", "--quiet", "--lib", *fargs, *common], env=env)
        src = os.path.join(target, "release", "libslubmalloc.so")
        v.lib = os.path.join(dest, "libslubmalloc.so")
        shutil.copy2(src, v.lib)
    elif kind == "program":
        if os.path.exists(os.path.join(tree, "tests", "programs", "Cargo.toml")):
            # The variant's features are the allocator's, not the package's.
            pfargs = ["--features", ",".join(f"slubmalloc/{f}" for f in v.features)] if v.features else []
            sh(["cargo", "build", "--quiet", "-p", "slubmalloc-programs", "--bin", name, *pfargs, *common],
               env=env)
            built = os.path.join(target, "release", name)
        else:
            sh(["cargo", "build", "--quiet", "--example", name, *fargs, *common], env=env)
            built = os.path.join(target, "release", "examples", name)
        v.exe = os.path.join(dest, name)
        shutil.copy2(built, v.exe)
    elif kind == "bench":
        out = sh(["cargo", "bench", "-p", "slubmalloc-benches", "--bench", name, "--no-run",
                  "--message-format=json", *fargs, *common[1:]], env=env, capture_output=True, text=True).stdout
        exe = cargo_json_executable(out, name)
        if not exe:
            die(f"{v.label}: cargo built no bench {name}", 1)
        v.exe = os.path.join(dest, name)
        shutil.copy2(exe, v.exe)
    else:
        die(f"--build {what}: preload, program:NAME or bench:NAME")
    return True


def build_c():
    """The C workloads and the runner, and the Rust ones (benches/rust/*.rs,
    one file each, built with rustc alone, on the C heap), into
    target/measure/bin."""
    os.makedirs(os.path.join(ROOT, BIN), exist_ok=True)
    cc = os.environ.get("CC", "cc")
    header = os.path.join(ROOT, "benches", "c", "bench.h")
    for f in sorted(os.listdir(os.path.join(ROOT, "benches", "c"))):
        if not f.endswith(".c"):
            continue
        src = os.path.join(ROOT, "benches", "c", f)
        exe = os.path.join(ROOT, BIN, f[:-2])
        newest = max(os.path.getmtime(src), os.path.getmtime(header))
        if not os.path.exists(exe) or os.path.getmtime(exe) < newest:
            sh([cc, "-O2", "-g", "-pthread", "-Wall", "-I", os.path.dirname(header), "-o", exe, src])
    for f in sorted(os.listdir(os.path.join(ROOT, "benches", "rust"))):
        if not f.endswith(".rs"):
            continue
        src = os.path.join(ROOT, "benches", "rust", f)
        exe = os.path.join(ROOT, BIN, f[:-3])
        if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
            sh(["rustc", "--edition", "2021", "-O", "-o", exe, src])


def build_server():
    """benches/server (tokio and serde_json, a workspace of its own) into
    target/measure/bin/server, when a server workload is named."""
    target = os.path.join(ROOT, TREE, "server")
    sh(["cargo", "build", "--release", "--quiet", "--manifest-path",
        os.path.join(ROOT, "benches", "server", "Cargo.toml"), "--target-dir", target])
    shutil.copy2(os.path.join(target, "release", "server"), os.path.join(ROOT, BIN, "server"))


# --------------------------------------------------------------------------
# Commands


class Command:
    """One thing to run: argv with {n}/{exe} left to fill, stdin, env."""

    def __init__(self, name, text, n, per, display=None):
        self.name, self.text, self.n, self.per = name, text, n, per
        self.display = display or text

    def argv(self, n, v):
        text = self.text.replace("{n}", str(n)).replace("{exe}", v.exe or "{exe}")
        words = shlex.split(text)
        env, stdin = {}, None
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            k, val = words.pop(0).split("=", 1)
            env[k] = val
        if "<" in words:
            i = words.index("<")
            stdin = words[i + 1]
            words = words[:i]
        if self.name == "sqlite" and stdin:
            write_sql(n, stdin)
        return words, stdin, env

    def shown(self, n):
        return self.display.replace("{n}", str(n))


def write_sql(n, path):
    full = os.path.join(ROOT, path)
    if not os.path.exists(full):
        with open(os.path.join(ROOT, "benches", "work.sql")) as f:
            text = f.read().replace(":N", str(n))
        with open(full, "w") as f:
            f.write(text)


def named_workloads(names, size, threads):
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")
    sqlite = shutil.which("sqlite3")
    out = []
    built_server = False
    for w in names:
        if w not in WORKLOADS:
            die(f"unknown workload {w} (known: {', '.join(WORKLOADS)})")
        if w == "sqlite" and not sqlite:
            say("warning: sqlite3 not found, workload sqlite skipped")
            continue
        text, ns, per = WORKLOADS[w]
        if "{bin}/server " in text and not built_server:
            build_server()
            built_server = True
        fill = dict(PER_SIZE[size], T=threads, bin=BIN, python=python, sqlite=sqlite or "sqlite3")
        for k, val in fill.items():
            text = text.replace("{" + k + "}", str(val))
        out.append(Command(w, text, ns[min(SIZES.index(size), len(ns) - 1)], per))
    return out


def run_once(cmd, n, v, extra_env, timeout, log):
    """One timed run under `runner`; returns (wall, user, sys, rss_kib, status)."""
    argv, stdin, env = cmd.argv(n, v)
    env = {**env, **extra_env, **v.run_env()}
    res = log + ".time"
    if os.path.exists(res):
        os.remove(res)
    args = [os.path.join(ROOT, BIN, "runner"), "-t", str(timeout), "-o", res]
    for k, val in env.items():
        args += ["-e", f"{k}={val}"]
    with open(os.path.join(ROOT, stdin) if stdin else os.devnull) as inp, \
            open(log + ".out", "w") as out, open(log + ".err", "w") as err:
        subprocess.run(args + ["--"] + argv, cwd=ROOT, stdin=inp, stdout=out, stderr=err)
    fields = ["", "", "", "", "runner-failed"]
    if os.path.exists(res) and os.path.getsize(res):
        with open(res) as f:
            fields = (f.read().split() + fields)[:5]
        os.remove(res)
    return fields


def interleave(cmds, variants, rounds, extra_env, timeout, raw, csv_path, keep_out=()):
    """Runs every command under every variant, `rounds` times, rotating which
    variant goes first; writes the runs to `csv_path`; returns the failures."""
    failures = 0
    start = time.time()
    with open(csv_path, "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["round", "workload", "allocator", "wall_s", "user_s", "sys_s", "maxrss_kib", "status"])
        for r in range(1, rounds + 1):
            for c in cmds:
                for k in range(len(variants)):
                    v = variants[(k + r - 1) % len(variants)]
                    log = os.path.join(raw, f"{c.name}.{v.slug()}.{r}")
                    wall, user, sys_, rss, status = run_once(c, c.n, v, extra_env, timeout, log)
                    wr.writerow([r, c.name, v.label, wall, user, sys_, rss, status])
                    f.flush()
                    if status != "ok":
                        failures += 1
                        argv, stdin, env = c.argv(c.n, v)
                        env = {**env, **extra_env, **v.run_env()}
                        shown = " ".join([f"{k}={x}" for k, x in env.items()] + argv) + (f" < {stdin}" if stdin else "")
                        say(f"{c.name} under {v.label} failed ({status}): {shown}")
                        with open(log + ".err") as e:
                            sys.stderr.write(e.read(400))
                    # Only the outputs asked for, and failures', are kept.
                    if status == "ok" and c.name not in keep_out:
                        os.remove(log + ".out")
                    if status == "ok" or os.path.getsize(log + ".err") == 0:
                        os.remove(log + ".err")
            say(f"round {r}/{rounds} done ({time.time() - start:.0f} s)")
    return failures


# --------------------------------------------------------------------------
# Callgrind


def callgrind_file(cmd, n, v, extra_env, out_file, valgrind_env=None):
    argv, stdin, env = cmd.argv(n, v)
    env = {**os.environ, **env, **extra_env, **v.run_env(), **(valgrind_env or {})}
    with open(os.path.join(ROOT, stdin) if stdin else os.devnull) as inp:
        p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}"] + argv,
                           cwd=ROOT, env=env, stdin=inp, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        say(f"callgrind run of {cmd.name} under {v.label} failed: {p.stderr[-400:]}")
        return None
    return out_file


def total_ir(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def annotate(path):
    return subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", "--auto=no", path],
                          capture_output=True, text=True).stdout


def inclusive(text, regex):
    """Inclusive Ir of the costliest function whose name matches `regex`."""
    for line in text.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(?:\*\s+)?(\S.*)$", line)
        if not m or ":" not in m.group(2):
            continue
        fn = m.group(2).rsplit(":", 1)[1].split(" ")[0]
        if re.search(regex, fn):
            return int(m.group(1).replace(",", ""))
    return None


def callgrind(cmds, variants, m, per, splits, extra_env):
    """Instructions per operation: rows of (command, variant, per op, splits)."""
    tmp = tempfile.mkdtemp(prefix="callgrind.", dir=os.path.join(ROOT, TREE))
    rows = []
    for c in cmds:
        div = m * (per or c.per)
        for v in variants:
            say(f"callgrind: {c.name} under {v.label}, n = {m} and {2 * m}")
            a = callgrind_file(c, m, v, extra_env, os.path.join(tmp, "a.cg"))
            b = callgrind_file(c, 2 * m, v, extra_env, os.path.join(tmp, "b.cg"))
            if not a or not b:
                rows.append((c, v, None, []))
                continue
            cols = []
            ta, tb = (annotate(a), annotate(b)) if splits else ("", "")
            for _, regex in splits:
                x, y = inclusive(ta, regex), inclusive(tb, regex)
                cols.append((y - x) / div if x is not None and y is not None else None)
            rows.append((c, v, (total_ir(b) - total_ir(a)) / div, cols))
    shutil.rmtree(tmp)
    return rows


# --------------------------------------------------------------------------
# Reports


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def print_medians(csv_path, cmds, variants, rounds, n_of):
    runs = bench_report.read_runs(csv_path)
    labels = [v.label for v in variants]
    table, failed = bench_report.summarize(runs, [c.name for c in cmds], labels)
    for c in cmds:
        print(f"\n`{c.shown(n_of(c))}`: {rounds} interleaved rounds, medians\n")
        print("| variant | wall s | CPU s | peak RSS MiB | wall / first | CPU / first | failed |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        base = table.get((c.name, labels[0]))
        for lab in labels:
            t = table.get((c.name, lab))
            bad = len(failed.get((c.name, lab), []))
            if not t:
                print(f"| {lab} | - | - | - | - | - | {bad} |")
                continue
            wr = t["wall"] / base["wall"] if base and base["wall"] else None
            cr = t["cpu"] / base["cpu"] if base and base["cpu"] else None
            print(f"| {lab} | {t['wall']:.3f} | {t['cpu']:.3f} | {t['rss'] / 1024:.1f} | "
                  f"{fmt(wr, '.3f')} | {fmt(cr, '.3f')} | {bad} |")


def print_callgrind(rows, m, per, splits, title):
    print(f"\n{title}Instructions per operation (callgrind, (Ir(2M) - Ir(M)) / (M x per), M = {m})\n")
    heads = "".join(f" {name} |" for name, _ in splits)
    print(f"| command | variant | per | per op |{heads}")
    print("|---|---|---:|---:|" + "---:|" * len(splits))
    for c, v, x, cols in rows:
        cells = "".join(f" {fmt(y, '.1f')} |" for y in cols)
        print(f"| `{c.shown('{n}')}` | {v.label} | {per or c.per} | {fmt(x, '.1f')} |{cells}")


# --------------------------------------------------------------------------
# Modes


def compare(argv):
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    else:
        command = []
    p = argparse.ArgumentParser(prog="ci/measure.py", add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-r", "--rounds", type=int, default=7)
    p.add_argument("-n", type=int)
    p.add_argument("-e", dest="env", action="append", default=[])
    p.add_argument("--callgrind", type=int, metavar="M")
    p.add_argument("--per", type=float)
    p.add_argument("--split", action="append", default=[])
    p.add_argument("--build", default="preload")
    p.add_argument("--workloads")
    p.add_argument("--size", default="full", choices=SIZES)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--timeout", type=float, default=180)
    p.add_argument("--csv")
    p.add_argument("--label", default="")
    p.add_argument("variants", nargs="*")
    a = p.parse_args(argv)
    if a.help or not a.variants or not (command or a.workloads):
        print(__doc__)
        sys.exit(0 if a.help else 2)
    if command and a.workloads:
        die("give --workloads or a COMMAND, not both")
    extra_env = dict(e.split("=", 1) for e in a.env)
    splits = [tuple(s.split("=", 1)) for s in a.split]
    if a.callgrind and command and "{n}" not in " ".join(command):
        die("--callgrind runs the command with n = M and 2M: it needs {n}")
    if a.callgrind and not shutil.which("valgrind"):
        die("valgrind is not installed (ci/deps.sh)", 1)
    build_c()
    variants = [v for v in map(Variant, a.variants) if build(v, a.build)]
    if not variants:
        die("no variant could be built or found", 1)
    if command:
        text = shlex.join(command).replace("{bin}", BIN)
        if "{n}" in text and a.n is None and a.rounds > 0:
            die("the command has {n}: give -n N")
        display = " ".join(command).replace("{bin}", BIN)
        name = os.path.basename(command[0].replace("{exe}", a.build.partition(":")[2] or "exe"))
        cmds = [Command(name, text, a.n, 1, display)]
    else:
        cmds = named_workloads(a.workloads.split(","), a.size, a.threads)
        if a.n is not None:
            for c in cmds:
                c.n = a.n
    failures = 0
    if a.rounds > 0:
        raw = os.path.join(ROOT, TREE, "raw")
        os.makedirs(raw, exist_ok=True)
        csv_path = a.csv or os.path.join(ROOT, TREE, "runs.csv")
        failures = interleave(cmds, variants, a.rounds, extra_env, a.timeout, raw, csv_path)
        print_medians(csv_path, cmds, variants, a.rounds, lambda c: c.n)
    if a.callgrind:
        rows = callgrind(cmds, variants, a.callgrind, a.per, splits, extra_env)
        print_callgrind(rows, a.callgrind, a.per, splits, f"{a.label}: " if a.label else "")
    return 1 if failures else 0


def bench(argv):
    """The peer comparison report (ci/bench.sh): every workload under every
    allocator, interleaved, then ci/bench_report.py's REPORT.md and charts."""
    env = os.environ
    p = argparse.ArgumentParser(prog="ci/bench.sh", description=bench.__doc__)
    p.add_argument("--size", default=env.get("SIZE", "full"), choices=SIZES)
    p.add_argument("--rounds", type=int, default=int(env.get("ROUNDS", 5)))
    p.add_argument("--threads", type=int, default=int(env.get("THREADS", os.cpu_count())))
    p.add_argument("--out", default=env.get("OUT"))
    p.add_argument("--workloads", default=env.get("WORKLOADS"))
    p.add_argument("--allocators", default=env.get("ALLOCATORS",
                                                    "glibc,slubmalloc,slubmalloc-nopurge,jemalloc,mimalloc,tcmalloc"))
    p.add_argument("--callgrind", type=int, choices=(0, 1), default=env.get("CALLGRIND"))
    p.add_argument("--timeout", type=float, default=env.get("TIMEOUT"))
    a = p.parse_args(argv)
    if a.rounds < 1 or a.threads < 1:
        die("ROUNDS and THREADS must be >= 1")
    if a.workloads is None:
        a.workloads = BENCH_WORKLOADS + BENCH_WORKLOADS_AT.get(a.size, "")
    out = a.out or ("bench/report" if a.size == "full" else f"{TREE}/report-{a.size}")
    cg = a.callgrind if a.callgrind is not None else (0 if a.size == "tiny" else 1)
    timeout = a.timeout or (30 if a.size == "tiny" else 180)
    raw = os.path.join(ROOT, out, "raw")
    os.makedirs(raw, exist_ok=True)
    for f in os.listdir(raw):
        os.remove(os.path.join(raw, f))
    build_c()
    variants = []
    for name in a.allocators.split(","):
        spec = SLUBMALLOC_VARIANTS.get(name, name)
        if not (name in SLUBMALLOC_VARIANTS or name == "glibc" or name in PEERS):
            die(f"unknown allocator {name}")
        v = Variant(spec)
        v.label = name
        if build(v, "preload"):
            variants.append(v)
    cmds = named_workloads(a.workloads.split(","), a.size, a.threads)
    load_start = open("/proc/loadavg").read().split()[:3]
    start = time.time()
    failures = interleave(cmds, variants, a.rounds, {}, timeout, raw, os.path.join(raw, "runs.csv"),
                          keep_out=("bursty", "idle_purge", "big_heap", "huge_heap", "emptied_heap",
                                    "huge_emptied_heap", "big_blocks",
                                    "many_big_blocks"))
    # Instructions of the fast paths: fastpath's phases against its stand-in
    # allocator (FASTPATH_BASELINE=1), from callgrind_annotate.
    fp = Command("fastpath", WORKLOADS["fastpath"][0].replace("{bin}", BIN), 200000, 4)
    if cg:
        if shutil.which("valgrind") and shutil.which("callgrind_annotate"):
            for v in variants:
                if v.label in ("slubmalloc-nopurge", "slubmalloc-prof"):
                    continue
                f = callgrind_file(fp, 200000, v, {}, os.path.join(raw, f"callgrind.{v.label}.out"),
                                   {"FASTPATH_BASELINE": "1"})
                if f:
                    lines = annotate(f).splitlines()
                    keep = [ln for i, ln in enumerate(lines) if i < 60 or ":fp_" in ln]
                    with open(os.path.join(raw, f"callgrind.{v.label}.txt"), "w") as t:
                        t.write("\n".join(keep) + "\n")
                    os.remove(f)
        else:
            say("warning: valgrind not found, no instruction counts")
    cmdline = " ".join(["ci/bench.sh"] + argv)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"SIZE={a.size} ROUNDS={a.rounds} THREADS={a.threads} {cmdline}",
        "nproc": os.cpu_count(),
        "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?"),
        "memory": "%.1f GiB" % (int(open("/proc/meminfo").readline().split()[1]) / 1048576),
        "kernel": os.uname().release,
        "size": a.size,
        "rounds": a.rounds,
        "threads": a.threads,
        "allocators": ",".join(v.label for v in variants),
    }
    for v in variants:
        meta[f"version.{v.label}"] = v.version
    for c in cmds:
        meta[f"workload.{c.name}"] = c.shown(c.n)
    meta["fastpath_callgrind"] = "fastpath 200000 1000 512"
    meta["elapsed_s"] = int(time.time() - start)
    meta["loadavg"] = f"{' '.join(load_start)} at the start, {' '.join(open('/proc/loadavg').read().split()[:3])} at the end"
    with open(os.path.join(raw, "meta.txt"), "w") as f:
        f.writelines(f"{k}={v}\n" for k, v in meta.items())
    rc = subprocess.run([sys.executable, os.path.join(ROOT, "ci", "bench_report.py"), os.path.join(ROOT, out)]).returncode
    say(f"report in {out}/REPORT.md ({failures} failed runs)")
    # A crash, hang or wrong exit status under any allocator fails the command.
    return 1 if failures or rc else 0


def main():
    os.chdir(ROOT)
    if sys.argv[1:2] == ["bench"]:
        return bench(sys.argv[2:])
    return compare(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
