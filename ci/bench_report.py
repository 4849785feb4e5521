#!/usr/bin/env python3
"""Turns the raw results of ci/bench.sh into a report.

    ci/bench_report.py OUT_DIR

Reads OUT_DIR/raw/ (runs.csv, meta.txt, bursty.*.out, callgrind.*.txt) and
writes OUT_DIR/REPORT.md, OUT_DIR/results.csv (medians), OUT_DIR/chart.svg
(time and peak RSS per workload, relative to a baseline allocator) and
OUT_DIR/rss-over-time.svg (the bursty workload's resident memory). Standard
library only; the SVG is written by hand.
"""
import csv
import math
import os
import re
import statistics
import sys
from collections import defaultdict

SUBJECT = "slubmalloc"
NOPURGE = "slubmalloc-nopurge"
PEERS_PREFERRED = ["mimalloc", "jemalloc", "tcmalloc", "glibc"]
# The workloads of one thread (ci/measure.py's table): what short programs
# pay in peak resident memory, reported on their own.
SINGLE_THREADED = ["startup", "size_cycle", "hello", "fastpath", "batch", "pairs", "python", "sqlite", "large_replace",
                   "random_table", "own_table"]
COLORS = {
    "slubmalloc": "#d62728",
    "slubmalloc-nopurge": "#ff9896",
    "glibc": "#7f7f7f",
    "jemalloc": "#1f77b4",
    "mimalloc": "#2ca02c",
    "tcmalloc": "#9467bd",
}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#bcbd22", "#17becf"]
DESCRIPTIONS = {
    "msgpass": "producer/consumer pairs: one thread allocates messages (16..512 B), the other frees them",
    "larson": "server churn: threads replace random blocks (16..1024 B) in arrays passed between threads",
    "fastpath": "one thread: malloc/free pairs, then batches of 1000 freed LIFO and FIFO (8..512 B)",
    "batch": "one thread, then a second: batches of 25..1,600 blocks of 16..1,024 B allocated, then freed in "
    "the order allocated",
    "threads": "short-lived threads created and joined one after another, 100 small blocks each",
    "large": "blocks of 128 KiB..4 MiB replaced at random, plus realloc growth 64 KiB -> 4 MiB",
    "bursty": "512 MiB (full size) of small blocks allocated and freed, then 2 s of light use",
    "python": "python3 (PYTHONMALLOC=malloc, PYTHONHASHSEED=0): dicts, JSON round trip, sorting",
    "sqlite": "sqlite3 :memory:: insert, index, update, delete, sort",
    "churn": "server churn over a ring of 4 threads: tables of mixed-size blocks (16 B..32 KiB) replaced "
    "at random; every fourth operation also sends a new block to the next thread, which frees it",
    "stress": "4 threads swap random blocks (8 B..64 KiB) into one shared table and free what was there, "
    "whoever allocated it",
    "live_threads": "threads alive at once, each holding blocks of 8 sizes (16 B..9 KB): memory per thread",
    "idle_purge": "threads build small blocks, free them all and exit; the program then idles without a "
    "call: resident memory kept",
    "large_replace": "20 live blocks of 5..25 MiB, one freed and a new one allocated per step",
    "big_heap": "one thread: 1 GiB (full size) of 48/64-byte blocks built, every other one replaced by a "
    "40-byte block, all freed; phases and ns per operation in its output",
    "huge_heap": "big_heap at 4 GiB (full size; 8 GiB with SIZE=big): the same cost per operation expected",
    "emptied_heap": "big_heap with every 48-byte block freed before the 40-byte ones are allocated: their "
    "slabs empty inside segments still in use, and the 40-byte blocks reuse them",
    "huge_emptied_heap": "emptied_heap at 4 GiB (full size; 8 GiB with SIZE=big)",
    "big_blocks": "1,000 live blocks of 128..180 KiB, 200,000 replaced at random one at a time",
    "many_big_blocks": "big_blocks with 16,000 live blocks (full size): the same cost per replacement expected",
    "prodcons": "one thread only allocates (16..512 B, first line written), another on another CPU only frees, "
    "through a ring of 1,024 that publishes its indices once per 8 blocks: the cross-CPU free, persistently",
    "shared_table": "32 threads (64 with SIZE=big) swap blocks of 8 B..4 KiB through one table of 10,000 and "
    "free what was there: 3.7 MB live, peak RSS is the point",
    "shared_churn4": "4 threads swap 8 M blocks (7 in 8 of 8-255 B, the rest 256 B-4 KiB) through one table of "
    "10,000 and free what was there: nearly every free remote, peak RSS against the threads is the point",
    "shared_churn16": "shared_churn4 with 16 threads",
    "shared_churn32": "shared_churn4 with 32 threads",
    "shared_churn64": "shared_churn4 with 64 threads",
    "shared_churn256": "shared_churn4 with 256 threads (SIZE=big only)",
    "random_table": "one thread replaces random blocks among 100,000 of 16 B..1 KiB (free, malloc, first line "
    "written): both blocks cold, the cache misses per replacement",
    "own_table": "one thread replaces random blocks of its own table of 1,024 (4 B..32 KiB, inverse-square "
    "sizes, every byte written): a thread reusing what it freed, blocks warm",
    "own_table2": "own_table with 2 threads, each on its own table: no block leaves its thread",
    "server": "a tokio server on 2 workers: 64 client tasks send serialized JSON requests (1-16 lines) "
    "through channels to 4 handler tasks, which parse them and send back JSON responses; bodies often "
    "freed on the other worker",
    "server_cache": "the same runtime: 32 tasks insert, copy out and remove values of 16 B..4 KiB in 16 "
    "shards of a shared HashMap of 65,536 keys",
}


def color(name, order):
    if name in COLORS:
        return COLORS[name]
    return EXTRA_COLORS[order.index(name) % len(EXTRA_COLORS)]


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return float("nan")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def fmt_ratio(x):
    return "–" if x is None or math.isnan(x) else f"{x:.2f}"


def fmt_time(s):
    if s is None:
        return "–"
    return f"{s:.3f}" if s < 10 else f"{s:.2f}"


def fmt_mib(kib):
    if kib is None:
        return "–"
    mib = kib / 1024
    return f"{mib:.1f}" if mib < 100 else f"{mib:.0f}"


def read_meta(path):
    meta = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    return meta


def read_runs(path):
    runs = []
    with open(path) as f:
        for row in csv.DictReader(f):
            runs.append(row)
    return runs


def summarize(runs, workloads, allocators):
    """(workload, allocator) -> dict of medians, or None when no run succeeded."""
    cells = defaultdict(list)
    failed = defaultdict(list)
    for r in runs:
        key = (r["workload"], r["allocator"])
        if r["status"] == "ok":
            cells[key].append(r)
        else:
            failed[key].append(r["status"])
    table = {}
    for w in workloads:
        for a in allocators:
            rs = cells.get((w, a), [])
            if not rs:
                table[(w, a)] = None
                continue
            wall = [float(r["wall_s"]) for r in rs]
            cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
            rss = [int(r["maxrss_kib"]) for r in rs]
            table[(w, a)] = {
                "n": len(rs),
                "wall": statistics.median(wall),
                "wall_min": min(wall),
                "wall_max": max(wall),
                "cpu": statistics.median(cpu),
                "rss": statistics.median(rss),
            }
    return table, failed


def ratio(table, w, a, b, field):
    x, y = table.get((w, a)), table.get((w, b))
    if not x or not y or not y[field]:
        return None
    return x[field] / y[field]


def geo_ratio(table, workloads, a, b, field):
    rs = [ratio(table, w, a, b, field) for w in workloads]
    rs = [r for r in rs if r]
    return (geomean(rs), len(rs)) if rs else (float("nan"), 0)


# --------------------------------------------------------------------------
# Bursty samples


def read_bursty(raw, allocators):
    """allocator -> list of rounds, each {samples: [(ms, kib)], events: {}, summary: {}}"""
    out = defaultdict(list)
    for name in sorted(os.listdir(raw)):
        m = re.match(r"bursty\.(.+)\.(\d+)\.out$", name)
        if not m or m.group(1) not in allocators:
            continue
        samples, events, summary = [], {}, {}
        with open(os.path.join(raw, name)) as f:
            for line in f:
                parts = line.split()
                if parts[:1] == ["sample"] and len(parts) == 3:
                    samples.append((int(parts[1]), int(parts[2])))
                elif parts[:1] == ["event"] and len(parts) == 3:
                    events[parts[1]] = int(parts[2])
                elif parts[:1] == ["summary"]:
                    for kv in parts[1:]:
                        k, v = kv.split("=")
                        summary[k] = float(v)
        if samples and summary:
            samples.sort()
            out[m.group(1)].append(
                {"round": int(m.group(2)), "samples": samples, "events": events, "summary": summary}
            )
    return out


def rss_at(samples, t_ms):
    """Resident memory of the last sample at or before t_ms."""
    best = None
    for t, kib in samples:
        if t <= t_ms:
            best = kib
    return best


# --------------------------------------------------------------------------
# Callgrind

CG_PHASES = ("fixed", "pairs", "batch_lifo", "batch_fifo")

def read_callgrind(raw, allocators, iterations):
    """allocator -> {phase: instructions per malloc+free pair}"""
    out = {}
    for a in allocators:
        path = os.path.join(raw, f"callgrind.{a}.txt")
        if not os.path.exists(path):
            continue
        incl = {}
        with open(path) as f:
            for line in f:
                m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(?:\*\s+)?\S*?:(fp_\w+)(?:\.\w+\.\d+)*\s", line)
                if m:
                    incl[m.group(2)] = max(incl.get(m.group(2), 0), int(m.group(1).replace(",", "")))
        phases = {}
        for ph in CG_PHASES:
            if f"fp_{ph}" in incl and f"fp_base_{ph}" in incl:
                phases[ph] = (incl[f"fp_{ph}"] - incl[f"fp_base_{ph}"]) / iterations
        if phases:
            out[a] = phases
    return out


# --------------------------------------------------------------------------
# SVG


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bar_panel(svg, x0, y0, width, height, title, groups, allocators, values, baseline):
    """Grouped bars of ratios (log2 axis, bars grow from 1.0)."""
    lo, hi = 1 / 4, 4.0
    finite = [v for g in groups for v in (values.get((g, a)) for a in allocators) if v]
    while finite and min(finite) < lo and lo > 1 / 64:
        lo /= 2
    while finite and max(finite) > hi and hi < 64:
        hi *= 2
    left, bottom, top = 46, 58, 26
    pw, ph = width - left - 10, height - bottom - top

    def y(v):
        v = min(max(v, lo), hi)
        return y0 + top + ph * (math.log2(hi) - math.log2(v)) / (math.log2(hi) - math.log2(lo))

    svg.append(f'<text x="{x0 + width / 2}" y="{y0 + 16}" text-anchor="middle" font-size="14" '
               f'font-weight="bold">{esc(title)}</text>')
    e = math.log2(lo)
    while e <= math.log2(hi) + 1e-9:
        v = 2 ** e
        yy = y(v)
        label = f"{v:g}" if v >= 1 else f"1/{1 / v:g}"
        stroke = "#444" if abs(v - 1) < 1e-9 else "#ddd"
        svg.append(f'<line x1="{x0 + left}" x2="{x0 + left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" '
                   f'stroke="{stroke}" stroke-width="1"/>')
        svg.append(f'<text x="{x0 + left - 4}" y="{yy + 4:.1f}" text-anchor="end" font-size="11">'
                   f'{label}</text>')
        e += 1
    svg.append(f'<text x="{x0 + 12}" y="{y0 + top + ph / 2}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 {x0 + 12} {y0 + top + ph / 2})">× {esc(baseline)} (log scale, '
               f'lower is better)</text>')
    gw = pw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(allocators), 1)
    for gi, g in enumerate(groups):
        gx = x0 + left + gi * gw + gw * 0.1
        for ai, a in enumerate(allocators):
            v = values.get((g, a))
            bx = gx + ai * bw
            if not v:
                svg.append(f'<text x="{bx + bw / 2:.1f}" y="{y(1) - 3:.1f}" font-size="9" '
                           f'text-anchor="middle" fill="{color(a, allocators)}">×</text>')
                continue
            y1, y2 = sorted((y(1), y(v)))
            svg.append(f'<rect x="{bx:.1f}" y="{y1:.1f}" width="{bw * 0.92:.1f}" '
                       f'height="{max(y2 - y1, 1):.1f}" fill="{color(a, allocators)}">'
                       f'<title>{esc(g)} {esc(a)}: {v:.2f}</title></rect>')
        weight = "bold" if g == "geomean" else "normal"
        svg.append(f'<text x="{gx + gw * 0.4:.1f}" y="{y0 + top + ph + 16}" text-anchor="middle" '
                   f'font-size="12" font-weight="{weight}">{esc(g)}</text>')


def legend(svg, x, y, allocators):
    for i, a in enumerate(allocators):
        lx = x + i * 150
        svg.append(f'<rect x="{lx}" y="{y - 10}" width="12" height="12" fill="{color(a, allocators)}"/>')
        svg.append(f'<text x="{lx + 16}" y="{y}" font-size="12">{esc(a)}</text>')


def write_chart(path, workloads, allocators, table, baseline, subtitle):
    groups = list(workloads) + ["geomean"]
    width, panel_h = max(980, 90 * len(groups) + 80), 320
    time_v, rss_v = {}, {}
    for a in allocators:
        for w in workloads:
            time_v[(w, a)] = ratio(table, w, a, baseline, "wall")
            rss_v[(w, a)] = ratio(table, w, a, baseline, "rss")
        time_v[("geomean", a)] = geo_ratio(table, workloads, a, baseline, "wall")[0]
        rss_v[("geomean", a)] = geo_ratio(table, workloads, a, baseline, "rss")[0]
        for d in (time_v, rss_v):
            if d[("geomean", a)] is not None and math.isnan(d[("geomean", a)]):
                d[("geomean", a)] = None
    height = 2 * panel_h + 70
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>']
    svg.append(f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="12" fill="#444">'
               f'{esc(subtitle)}</text>')
    bar_panel(svg, 0, 24, width, panel_h, f"Wall time relative to {baseline} (median of rounds)",
              groups, allocators, time_v, baseline)
    bar_panel(svg, 0, 24 + panel_h, width, panel_h, f"Peak resident memory relative to {baseline}",
              groups, allocators, rss_v, baseline)
    legend(svg, 50, height - 14, allocators)
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")


def write_rss_chart(path, bursty, allocators, subtitle):
    width, height = 900, 420
    left, right, top, bottom = 70, 20, 40, 70
    pw, ph = width - left - right, height - top - bottom
    series = {}
    for a in allocators:
        rounds = bursty.get(a)
        if not rounds:
            continue
        # The round whose final RSS is the median one.
        rounds = sorted(rounds, key=lambda r: r["summary"].get("end_kib", 0))
        series[a] = rounds[(len(rounds) - 1) // 2]
    if not series:
        return False
    tmax = max(s["samples"][-1][0] for s in series.values()) or 1
    kmax = max(k for s in series.values() for _, k in s["samples"]) or 1
    step = 10 ** math.floor(math.log10(max(kmax / 1024, 1)))
    ymax = math.ceil(kmax / 1024 / step) * step

    def X(t):
        return left + pw * t / tmax

    def Y(kib):
        return top + ph * (1 - kib / 1024 / ymax)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif">', f'<rect width="{width}" height="{height}" fill="white"/>']
    svg.append(f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">'
               f'bursty: resident memory over time</text>')
    svg.append(f'<text x="{width / 2}" y="33" text-anchor="middle" font-size="11" fill="#444">'
               f'{esc(subtitle)}</text>')
    for i in range(6):
        v = ymax * i / 5
        yy = Y(v * 1024)
        svg.append(f'<line x1="{left}" x2="{left + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        svg.append(f'<text x="{left - 5}" y="{yy + 4:.1f}" text-anchor="end" font-size="11">{v:g}</text>')
    tstep = 500 if tmax > 2000 else 100 if tmax > 400 else 50
    t = 0
    while t <= tmax:
        svg.append(f'<line x1="{X(t):.1f}" x2="{X(t):.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>')
        svg.append(f'<text x="{X(t):.1f}" y="{top + ph + 15}" text-anchor="middle" font-size="11">'
                   f'{t / 1000:g}</text>')
        t += tstep
    svg.append(f'<text x="{left + pw / 2}" y="{top + ph + 32}" text-anchor="middle" font-size="12">'
               f'seconds since start</text>')
    svg.append(f'<text x="16" y="{top + ph / 2}" text-anchor="middle" font-size="12" '
               f'transform="rotate(-90 16 {top + ph / 2})">resident MiB</text>')
    for a, s in series.items():
        pts = " ".join(f"{X(t):.1f},{Y(k):.1f}" for t, k in s["samples"])
        svg.append(f'<polyline points="{pts}" fill="none" stroke="{color(a, allocators)}" '
                   f'stroke-width="2"><title>{esc(a)}</title></polyline>')
        freed = s["events"].get("freed")
        if freed is not None:
            svg.append(f'<line x1="{X(freed):.1f}" x2="{X(freed):.1f}" y1="{top + ph}" y2="{top + ph - 6}" '
                       f'stroke="{color(a, allocators)}" stroke-width="2"/>')
    svg.append(f'<text x="{left + 4}" y="{top + ph - 10}" font-size="10" fill="#444">ticks on the axis: '
               f'moment each allocator finished freeing</text>')
    legend(svg, left, height - 12, [a for a in allocators if a in series])
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
    return True


# --------------------------------------------------------------------------
# Markdown


def md_table(header, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    raw = os.path.join(out_dir, "raw")
    meta = read_meta(os.path.join(raw, "meta.txt"))
    runs = read_runs(os.path.join(raw, "runs.csv"))
    allocators = [a for a in meta.get("allocators", "").split(",") if a]
    workloads = []
    for r in runs:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    for r in runs:
        if r["allocator"] not in allocators:
            allocators.append(r["allocator"])
    table, failed = summarize(runs, workloads, allocators)
    peers = [p for p in PEERS_PREFERRED if p in allocators]
    baseline = "mimalloc" if "mimalloc" in allocators else (peers[0] if peers else allocators[0])
    subject = SUBJECT if SUBJECT in allocators else None

    # results.csv: the medians.
    with open(os.path.join(out_dir, "results.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "allocator", "ok_runs", "median_wall_s", "min_wall_s", "max_wall_s",
                     "median_cpu_s", "median_peak_rss_kib"])
        for w in workloads:
            for a in allocators:
                c = table[(w, a)]
                if c:
                    wr.writerow([w, a, c["n"], f"{c['wall']:.6f}", f"{c['wall_min']:.6f}",
                                 f"{c['wall_max']:.6f}", f"{c['cpu']:.6f}", c["rss"]])
                else:
                    wr.writerow([w, a, 0, "", "", "", "", ""])

    subtitle = (f"{meta.get('date', '?')} · {meta.get('nproc', '?')} × {meta.get('cpu', '?')} · "
                f"SIZE={meta.get('size')} ROUNDS={meta.get('rounds')} THREADS={meta.get('threads')}")
    write_chart(os.path.join(out_dir, "chart.svg"), workloads, allocators, table, baseline, subtitle)

    L = []
    L.append("# Allocator comparison")
    L.append("")
    L.append("Generated by `ci/bench.sh` (raw data in `raw/`, medians in `results.csv`).")
    L.append("")
    L.append(f"- Date: {meta.get('date', '?')}")
    L.append(f"- Machine: {meta.get('nproc', '?')} CPUs ({meta.get('cpu', '?')}), "
             f"{meta.get('memory', '?')}, Linux {meta.get('kernel', '?')}")
    L.append(f"- Command: `{meta.get('command', '?')}`")
    L.append(f"- Rounds: {meta.get('rounds')}, interleaved (every workload under every allocator in turn, "
             f"first allocator rotating each round); size `{meta.get('size')}`, "
             f"threads {meta.get('threads')}; whole run {meta.get('elapsed_s', '?')} s; "
             f"load average (1, 5, 15 min) {meta.get('loadavg', '?')}")
    vers = ", ".join(f"{a} {meta.get('version.' + a) or '?'}" for a in allocators)
    L.append(f"- Versions: {vers}")
    L.append("- `slubmalloc-nopurge` is slubmalloc with `SLUBMALLOC_PURGE_DELAY_MS=86400000` "
             "(memory is never given back within a run): the time cost of purging.")
    L.append("")
    L.append("![time and peak RSS relative to " + baseline + "](chart.svg)")
    L.append("")

    if subject:
        L.append(f"## {subject} against each peer (geometric mean over workloads)")
        L.append("")
        L.append("Ratio = slubmalloc ÷ peer, per workload on medians, then the geometric mean over the "
                 "workloads where both ran; below 1.0 means slubmalloc is faster or smaller.")
        L.append("")
        rows = []
        for p in [a for a in allocators if a not in (subject, NOPURGE)]:
            gt, n = geo_ratio(table, workloads, subject, p, "wall")
            gc, _ = geo_ratio(table, workloads, subject, p, "cpu")
            gr, _ = geo_ratio(table, workloads, subject, p, "rss")
            rows.append([p, fmt_ratio(gt), fmt_ratio(gc), fmt_ratio(gr), n])
        L.append(md_table(["peer", "wall time ratio", "CPU time ratio", "peak RSS ratio", "workloads"], rows))
        L.append("")

    single = [w for w in SINGLE_THREADED if w in workloads]
    if subject and single:
        L.append("## Single-threaded programs: peak RSS")
        L.append("")
        L.append("Median peak RSS (KiB) of the workloads of one thread, and slubmalloc's peak RSS ÷ each "
                 "peer's, geometric mean over these workloads (below 1.0: slubmalloc is smaller).")
        L.append("")
        rows = [[w] + [f"{table[(w, a)]['rss']:,.0f}" if table[(w, a)] else "–" for a in allocators]
                for w in single]
        geo = ["**geomean ratio**"]
        for a in allocators:
            g, n = geo_ratio(table, single, subject, a, "rss")
            geo.append("" if a == subject else f"{fmt_ratio(g)} ({n})")
        rows.append(geo)
        L.append(md_table(["workload"] + allocators, rows))
        L.append("")

    L.append(f"## Geometric mean relative to {baseline}")
    L.append("")
    rows = []
    for a in allocators:
        gt, n = geo_ratio(table, workloads, a, baseline, "wall")
        gc, _ = geo_ratio(table, workloads, a, baseline, "cpu")
        gr, _ = geo_ratio(table, workloads, a, baseline, "rss")
        rows.append([a, fmt_ratio(gt), fmt_ratio(gc), fmt_ratio(gr), n])
    L.append(md_table(["allocator", "wall time", "CPU time", "peak RSS", "workloads"], rows))
    L.append("")

    L.append("## Median wall time (s)")
    L.append("")
    best_note = "Fastest per workload in bold; `FAILED` marks a workload with no successful run."
    L.append(best_note)
    L.append("")

    def cell_rows(field, fmt):
        rows = []
        for w in workloads:
            vals = {a: table[(w, a)][field] if table[(w, a)] else None for a in allocators}
            present = [v for v in vals.values() if v is not None]
            best = min(present) if present else None
            row = [w]
            for a in allocators:
                v = vals[a]
                if v is None:
                    row.append("FAILED" if failed.get((w, a)) else "–")
                elif v == best:
                    row.append(f"**{fmt(v)}**")
                else:
                    row.append(fmt(v))
            if subject:
                rs = [ratio(table, w, subject, p, field) for p in peers]
                row.append(", ".join(f"{p} {fmt_ratio(r)}" for p, r in zip(peers, rs) if r) or "–")
            rows.append(row)
        return rows

    hdr = ["workload"] + allocators + ([f"{subject} ÷ peer"] if subject else [])
    al = ["---"] + ["---:"] * len(allocators) + (["---"] if subject else [])
    L.append(md_table(hdr, cell_rows("wall", fmt_time), al))
    L.append("")
    L.append("## Median peak resident memory (MiB)")
    L.append("")
    L.append(md_table(hdr, cell_rows("rss", fmt_mib), al))
    L.append("")
    L.append("## Median CPU time, user + system (s)")
    L.append("")
    L.append("The machine may be shared; CPU time is less disturbed by other load than wall time.")
    L.append("")
    L.append(md_table(hdr, cell_rows("cpu", fmt_time), al))
    L.append("")

    spread = []
    for w in workloads:
        row = [w]
        for a in allocators:
            c = table[(w, a)]
            row.append(f"{fmt_time(c['wall_min'])}–{fmt_time(c['wall_max'])}" if c else "–")
        spread.append(row)
    L.append("## Wall time range over rounds (min–max, s)")
    L.append("")
    L.append(md_table(["workload"] + allocators, spread))
    L.append("")

    if NOPURGE in allocators and subject:
        L.append("## The cost of purging")
        L.append("")
        L.append("slubmalloc with its default purge delay ÷ slubmalloc that never purges "
                 "(`SLUBMALLOC_PURGE_DELAY_MS=86400000`).")
        L.append("")
        rows = []
        for w in workloads:
            rows.append([w, fmt_ratio(ratio(table, w, subject, NOPURGE, "wall")),
                         fmt_ratio(ratio(table, w, subject, NOPURGE, "cpu")),
                         fmt_ratio(ratio(table, w, subject, NOPURGE, "rss"))])
        rows.append(["**geomean**"] + [fmt_ratio(geo_ratio(table, workloads, subject, NOPURGE, f)[0])
                                       for f in ("wall", "cpu", "rss")])
        L.append(md_table(["workload", "wall time", "CPU time", "peak RSS"], rows))
        L.append("")

    bursty = read_bursty(raw, allocators)
    if bursty:
        has_chart = write_rss_chart(os.path.join(out_dir, "rss-over-time.svg"), bursty, allocators, subtitle)
        L.append("## Resident memory over time (bursty)")
        L.append("")
        L.append(f"`{meta.get('workload.bursty', 'bursty')}`: allocate, free everything, then light use; "
                 "resident memory sampled from `/proc/self/statm`. Medians over rounds.")
        L.append("")
        if has_chart:
            L.append("![resident memory over time](rss-over-time.svg)")
            L.append("")
        rows = []
        for a in allocators:
            rs = bursty.get(a)
            if not rs:
                continue

            def med(f):
                vals = [f(r) for r in rs]
                vals = [v for v in vals if v is not None]
                return statistics.median(vals) if vals else None

            def after(r, dt):
                fr = r["events"].get("freed")
                return rss_at(r["samples"], fr + dt) if fr is not None else None

            rows.append([a, fmt_mib(med(lambda r: r["summary"].get("peak_kib"))),
                         fmt_mib(med(lambda r: after(r, 0))),
                         fmt_mib(med(lambda r: after(r, 500))),
                         fmt_mib(med(lambda r: after(r, 1000))),
                         fmt_mib(med(lambda r: r["summary"].get("end_kib"))),
                         f"{med(lambda r: r['summary'].get('end_over_peak')) * 100:.1f}%"])
        L.append(md_table(["allocator", "peak MiB", "just freed", "+0.5 s", "+1 s", "end", "end ÷ peak"],
                          rows))
        L.append("")
        # One round's samples, in full, for whoever wants to plot them differently.
        L.append("<details><summary>Samples of the median round (ms: MiB)</summary>")
        L.append("")
        for a in allocators:
            rs = bursty.get(a)
            if not rs:
                continue
            r = sorted(rs, key=lambda r: r["summary"].get("end_kib", 0))[(len(rs) - 1) // 2]
            pts = ", ".join(f"{t}: {fmt_mib(k)}" for t, k in r["samples"])
            L.append(f"- {a} (round {r['round']}, freed at {r['events'].get('freed', '?')} ms): {pts}")
        L.append("")
        L.append("</details>")
        L.append("")

    iters = 200000
    m = re.search(r"fastpath (\d+)", meta.get("fastpath_callgrind", ""))
    if m:
        iters = int(m.group(1))
    cg = read_callgrind(raw, allocators, iters)
    if cg:
        L.append("## Instructions per malloc + free (callgrind)")
        L.append("")
        L.append(f"`{meta.get('fastpath_callgrind')}` under `valgrind --tool=callgrind`: inclusive "
                 "instructions of each phase minus the same loop calling a stand-in allocator, divided by "
                 "the number of malloc/free pairs (first slabs made in a warm-up). The loop itself is "
                 "not counted; what remains is malloc + free, slow paths and refills included.")
        L.append("")
        rows = [[a] + [f"{cg[a][ph]:.1f}" if ph in cg[a] else "–" for ph in CG_PHASES]
                for a in allocators if a in cg]
        L.append(md_table(["allocator", "32 B pairs", "pairs, 8..512 B", "batch, LIFO free",
                           "batch, FIFO free"], rows))
        L.append("")

    L.append("## Workloads")
    L.append("")
    for w in workloads:
        L.append(f"- **{w}**: {DESCRIPTIONS.get(w, '')}. `{meta.get('workload.' + w, '?')}`")
    L.append("")
    fails = [(w, a, s) for (w, a), ss in failed.items() for s in ss]
    if fails:
        L.append("## Failed runs")
        L.append("")
        for w, a, s in sorted(fails):
            L.append(f"- {w} under {a}: {s}")
        L.append("")
    with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
        f.write("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
