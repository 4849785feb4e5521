//! What slubtop prints: the live table (per class, with rates from the
//! previous snapshot, sorted by a key), and for `--once` the in-process
//! report's JSON document and text table, or the Prometheus text format
//! for a metrics collector's text file.

use std::fmt::Write;
use std::path::Path;

use crate::snapshot::{field, total, Snapshot, CACHE_FIELDS, CPU_FIELDS, TOTALS_FIELDS};

/// What the live table is sorted by (descending, but size ascending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    Size,
    InUse,
    Bytes,
    Total,
    Slabs,
    Partial,
    Frag,
    Allocs,
    Frees,
    Remote,
}

impl SortKey {
    /// (key in the view, name on the command line, what it means)
    pub const ALL: [(SortKey, char, &'static str, &'static str); 10] = [
        (SortKey::Size, 's', "size", "object size"),
        (SortKey::InUse, 'o', "inuse", "objects in use"),
        (SortKey::Bytes, 'b', "bytes", "bytes in use"),
        (SortKey::Total, 't', "total", "object slots"),
        (SortKey::Slabs, 'l', "slabs", "slabs"),
        (SortKey::Partial, 'p', "partial", "partial slabs"),
        (SortKey::Frag, 'x', "frag", "free slots, % of slots"),
        (SortKey::Allocs, 'a', "allocs", "allocations per second"),
        (SortKey::Frees, 'f', "frees", "frees per second"),
        (SortKey::Remote, 'r', "remote", "remote frees per second"),
    ];

    pub fn from_name(name: &str) -> Option<SortKey> {
        Self::ALL.iter().find(|k| k.2 == name).map(|k| k.0)
    }

    pub fn from_key(key: u8) -> Option<SortKey> {
        Self::ALL
            .iter()
            .find(|k| k.1 as u32 == key as u32)
            .map(|k| k.0)
    }

    fn describe(self) -> &'static str {
        Self::ALL.iter().find(|k| k.0 == self).map_or("", |k| k.3)
    }
}

/// What a snapshot that has mapped nothing (`Snapshot::nothing_mapped`)
/// means: slubmalloc is loaded, its anchor read, but no allocation reached
/// it.
pub fn nothing_mapped_note(pid: i32, file: &Path) -> String {
    format!(
        "PID {pid} has slubmalloc loaded ({}) but it has served no allocation (it has mapped \
         no memory): the process's malloc is another's, or the process has not allocated \
         yet. Preloaded, a libslubmalloc.so that exports no `malloc` (nm -D) does nothing \
         (`cargo build --release` makes one that does); an allocator ahead of it (earlier \
         in LD_PRELOAD, or linked into the program) takes the calls instead",
        file.display()
    )
}

/// Bytes as B, KiB, MiB or GiB with one decimal.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn allocs(c: &[u64; 33]) -> u64 {
    c[field::ALLOC_SHEAF] + c[field::ALLOC_FAST] + c[field::ALLOC_SLOW]
}

fn frees(c: &[u64; 33]) -> u64 {
    (c[field::FREE_SHEAF] + c[field::FREE_FAST] + c[field::FREE_SLOW] + c[field::FREE_REMOTE])
        .wrapping_sub(c[field::FLUSHED])
}

/// Free slots as a percentage of the slots.
fn frag(c: &[u64; 33]) -> f64 {
    if c[field::TOTAL] == 0 {
        0.0
    } else {
        100.0 * (c[field::TOTAL] - c[field::IN_USE]) as f64 / c[field::TOTAL] as f64
    }
}

/// Per second, from the previous snapshot of the same class.
struct Rates {
    allocs: f64,
    frees: f64,
    remote: f64,
}

/// One screen of the live view. `previous` and `seconds`: the snapshot
/// before, and the time between them (None on the first screen).
pub fn live_screen(
    pid: i32,
    name: &str,
    now: &Snapshot,
    previous: Option<(&Snapshot, f64)>,
    interval: f64,
    sort: SortKey,
    rows: usize,
) -> String {
    let t = &now.totals;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "slubtop - PID {pid} ({name}) - every {interval} s - sorted by {}",
        sort.describe()
    );
    let _ = writeln!(
        s,
        "in use {}  mapped {}  resident {}  medium blocks {} ({})  large blocks {} ({})  threads {} alive, {} exited",
        human(t[total::BYTES_IN_USE]),
        human(t[total::BYTES_MAPPED]),
        human(t[total::RESIDENT]),
        t[total::MEDIUM_BLOCKS],
        human(t[total::MEDIUM_BYTES]),
        t[total::LARGE_BLOCKS],
        human(t[total::LARGE_BYTES]),
        t[total::THREADS_ALIVE],
        t[total::THREADS_EXITED],
    );
    let rate = |class: usize, f: &dyn Fn(&[u64; 33]) -> u64| {
        previous
            .map(|(p, secs)| f(&now.caches[class]).wrapping_sub(f(&p.caches[class])) as f64 / secs)
    };
    let mut classes: Vec<(usize, Option<Rates>)> = (0..now.caches.len())
        .filter(|&c| Snapshot::class_used(&now.caches[c]))
        .map(|c| {
            let rates = rate(c, &allocs).map(|a| Rates {
                allocs: a,
                frees: rate(c, &frees).unwrap_or(0.0),
                remote: rate(c, &|x| x[field::FREE_REMOTE]).unwrap_or(0.0),
            });
            (c, rates)
        })
        .collect();
    let sums = classes.iter().fold((0, 0, 0.0, 0.0), |acc, (c, r)| {
        let c = &now.caches[*c];
        (
            acc.0 + c[field::SLABS],
            acc.1 + c[field::PARTIAL_SLABS],
            acc.2 + r.as_ref().map_or(0.0, |r| r.allocs),
            acc.3 + r.as_ref().map_or(0.0, |r| r.frees),
        )
    });
    let per_second = |v: f64| {
        if previous.is_some() {
            format!("{v:.0}")
        } else {
            "-".into()
        }
    };
    let _ = writeln!(
        s,
        "classes in use {} of {}  slabs {} ({} partial)  allocations/s {}  frees/s {}",
        classes.len(),
        now.caches.len(),
        sums.0,
        sums.1,
        per_second(sums.2),
        per_second(sums.3),
    );
    let key = |c: &(usize, Option<Rates>)| -> f64 {
        let (v, r) = (&now.caches[c.0], c.1.as_ref());
        match sort {
            SortKey::Size => -(v[field::OBJECT_SIZE] as f64),
            SortKey::InUse => v[field::IN_USE] as f64,
            SortKey::Bytes => (v[field::IN_USE] * v[field::OBJECT_SIZE]) as f64,
            SortKey::Total => v[field::TOTAL] as f64,
            SortKey::Slabs => v[field::SLABS] as f64,
            SortKey::Partial => v[field::PARTIAL_SLABS] as f64,
            SortKey::Frag => frag(v),
            SortKey::Allocs => r.map_or(0.0, |r| r.allocs),
            SortKey::Frees => r.map_or(0.0, |r| r.frees),
            SortKey::Remote => r.map_or(0.0, |r| r.remote),
        }
    };
    // Stable: ties stay in size order.
    classes.sort_by(|a, b| key(b).total_cmp(&key(a)));
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>8} {:>5} {:>10} {:>10} {:>9}",
        "SIZE",
        "IN USE",
        "TOTAL",
        "BYTES",
        "SLABS",
        "PARTIAL",
        "PARTFREE",
        "FRAG%",
        "ALLOCS/s",
        "FREES/s",
        "REMOTE/s"
    );
    for (class, rates) in classes.iter().take(rows) {
        let c = &now.caches[*class];
        let r = |f: fn(&Rates) -> f64| {
            rates
                .as_ref()
                .map_or("-".into(), |r| format!("{:.0}", f(r)))
        };
        let _ = writeln!(
            s,
            "{:>6} {:>10} {:>10} {:>10} {:>6} {:>7} {:>8} {:>5.1} {:>10} {:>10} {:>9}",
            c[field::OBJECT_SIZE],
            c[field::IN_USE],
            c[field::TOTAL],
            human(c[field::IN_USE] * c[field::OBJECT_SIZE]),
            c[field::SLABS],
            c[field::PARTIAL_SLABS],
            c[field::PARTIAL_FREE],
            frag(c),
            r(|r| r.allocs),
            r(|r| r.frees),
            r(|r| r.remote),
        );
    }
    cpu_rows(&mut s, now, CPU_ROWS);
    s
}

/// The live view's per-CPU rows at most: the CPUs whose sheaves hold the
/// most bytes.
const CPU_ROWS: usize = 8;

/// The per-CPU sheaves (per-CPU mode), the CPUs holding the most bytes
/// first, `rows` of them and a line for the rest.
fn cpu_rows(s: &mut String, now: &Snapshot, rows: usize) {
    if now.cpus.is_empty() {
        return;
    }
    let mut cpus: Vec<&[u64; 4]> = now.cpus.iter().collect();
    cpus.sort_by(|a, b| b[2].cmp(&a[2]).then(a[0].cmp(&b[0])));
    let (objects, bytes, capacity) = cpus.iter().fold((0, 0, 0), |acc, c| {
        (acc.0 + c[1], acc.1 + c[2], acc.2 + c[3])
    });
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "per-CPU sheaves: {} CPUs, {objects} blocks, {} of {} capacity; rseq restarts {}, CPU drains {}",
        cpus.len(),
        human(bytes),
        human(capacity),
        now.totals[total::RSEQ_RESTARTS],
        now.totals[total::CPU_DRAINS],
    );
    let _ = writeln!(
        s,
        "{:>6} {:>10} {:>10} {:>10}",
        "CPU", "BLOCKS", "BYTES", "CAPACITY"
    );
    for c in cpus.iter().take(rows) {
        let _ = writeln!(
            s,
            "{:>6} {:>10} {:>10} {:>10}",
            c[0],
            c[1],
            human(c[2]),
            human(c[3])
        );
    }
    if cpus.len() > rows {
        let _ = writeln!(s, "{:>6} more", cpus.len() - rows);
    }
}

/// The JSON document of the in-process report (`Stats::write_json`):
/// `caches` (the classes in use, every field), `cpus` and `totals`.
pub fn json(snap: &Snapshot) -> String {
    let mut s = String::from("{\"caches\":[");
    let used = snap.caches.iter().filter(|c| Snapshot::class_used(c));
    for (i, c) in used.enumerate() {
        s.push_str(if i == 0 { "{" } else { ",{" });
        fields(&mut s, &CACHE_FIELDS, c);
        s.push('}');
    }
    s.push_str("],\"cpus\":[");
    for (i, c) in snap.cpus.iter().enumerate() {
        s.push_str(if i == 0 { "{" } else { ",{" });
        fields(&mut s, &CPU_FIELDS, c);
        s.push('}');
    }
    s.push_str("],\"totals\":{");
    fields(&mut s, &TOTALS_FIELDS, &snap.totals);
    s.push_str("}}");
    s
}

fn fields(s: &mut String, names: &[&str], values: &[u64]) {
    for (i, (name, value)) in names.iter().zip(values).enumerate() {
        let _ = write!(s, "{}\"{name}\":{value}", if i == 0 { "" } else { "," });
    }
}

/// The in-process text report's table (`Display for Stats`): its columns,
/// widths, totals line and per-CPU rows, under a title naming the process.
pub fn text(pid: i32, snap: &Snapshot) -> String {
    const COLUMNS: [Option<(&str, usize)>; 33] = [
        Some(("size", 6)),
        None,
        Some(("in_use", 10)),
        Some(("sheaf", 6)),
        Some(("barn", 6)),
        Some(("cap", 5)),
        None,
        Some(("total", 10)),
        Some(("slabs", 6)),
        None,
        Some(("act", 5)),
        Some(("tpart", 5)),
        Some(("ret", 5)),
        Some(("full", 5)),
        Some(("npart", 5)),
        Some(("partfree", 8)),
        Some(("al_sheaf", 11)),
        Some(("fr_sheaf", 11)),
        Some(("flushed", 10)),
        Some(("alloc_fast", 11)),
        Some(("alloc_slow", 10)),
        Some(("free_fast", 11)),
        Some(("free_slow", 9)),
        Some(("free_rmt", 9)),
        Some(("rf_own", 8)),
        Some(("rf_part", 8)),
        Some(("rf_node", 8)),
        Some(("slab+", 7)),
        Some(("slab-", 7)),
        Some(("head", 7)),
        Some(("tail", 7)),
        Some(("cpu", 6)),
        Some(("ccap", 5)),
    ];
    const LABELS: [(&str, &str); 23] = [
        ("in use", " B"),
        ("mapped", " B"),
        ("resident", " B"),
        ("segments", ""),
        ("medium blocks", ""),
        ("medium bytes", " B"),
        ("large blocks", ""),
        ("large bytes", " B"),
        ("large cached", " B"),
        ("large cache limit", " B"),
        ("large cache hits", ""),
        ("mmaps", ""),
        ("purges", ""),
        ("purged", " B"),
        ("background purges", ""),
        ("purger starts", ""),
        ("sheaf budget taken", " B"),
        ("threads alive", ""),
        ("threads exited", ""),
        ("zero-size blocks", ""),
        ("per-CPU mode", ""),
        ("rseq restarts", ""),
        ("CPU drains", ""),
    ];
    const CPU_COLUMNS: [usize; 4] = [5, 9, 11, 9];
    let mut s = format!("slubmalloc statistics (pid {pid}, read by slubtop)\n");
    push_row(&mut s, COLUMNS.iter().flatten().copied());
    for c in snap.caches.iter().filter(|c| Snapshot::class_used(c)) {
        let cells = c
            .iter()
            .zip(COLUMNS)
            .filter_map(|(v, col)| col.map(|(_, w)| (v, w)));
        push_row(&mut s, cells);
    }
    for (i, (value, (label, unit))) in snap.totals.iter().zip(LABELS).enumerate() {
        let _ = write!(s, "{}{label} {value}{unit}", if i == 0 { "" } else { ", " });
    }
    s.push('\n');
    for (row, c) in snap.cpus.iter().enumerate() {
        if row == 0 {
            let headers = ["cpu", "objects", "bytes", "capacity"];
            push_row(&mut s, headers.into_iter().zip(CPU_COLUMNS));
        }
        push_row(&mut s, c.iter().zip(CPU_COLUMNS));
    }
    s
}

/// One line of the text report's tables (`stats::write_row`): each cell
/// right-aligned in its width, one space apart.
fn push_row(s: &mut String, cells: impl Iterator<Item = (impl std::fmt::Display, usize)>) {
    for (i, (cell, width)) in cells.enumerate() {
        let _ = write!(s, "{}{cell:>width$}", if i == 0 { "" } else { " " });
    }
    s.push('\n');
}

/// The Prometheus text format (node_exporter's textfile collector reads
/// it): per class every field, labelled with the object size, per CPU its
/// row's fields, labelled with the CPU, and the totals, all labelled with
/// the pid.
pub fn prometheus(pid: i32, snap: &Snapshot) -> String {
    let mut s = String::new();
    for (i, name) in CACHE_FIELDS.iter().enumerate().skip(1) {
        let _ = writeln!(s, "# TYPE slubmalloc_cache_{name} gauge");
        for c in snap.caches.iter().filter(|c| Snapshot::class_used(c)) {
            let _ = writeln!(
                s,
                "slubmalloc_cache_{name}{{pid=\"{pid}\",object_size=\"{}\"}} {}",
                c[field::OBJECT_SIZE],
                c[i]
            );
        }
    }
    // Per CPU (per-CPU mode; no row in the fallback) every field but the
    // id, which labels it.
    let cpu_fields = CPU_FIELDS.iter().enumerate().skip(1);
    for (i, name) in cpu_fields.filter(|_| !snap.cpus.is_empty()) {
        let _ = writeln!(s, "# TYPE slubmalloc_cpu_{name} gauge");
        for c in &snap.cpus {
            let _ = writeln!(
                s,
                "slubmalloc_cpu_{name}{{pid=\"{pid}\",cpu=\"{}\"}} {}",
                c[0], c[i]
            );
        }
    }
    for (name, value) in TOTALS_FIELDS.iter().zip(&snap.totals) {
        let _ = writeln!(s, "# TYPE slubmalloc_{name} gauge");
        let _ = writeln!(s, "slubmalloc_{name}{{pid=\"{pid}\"}} {value}");
    }
    s
}
