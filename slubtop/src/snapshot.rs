//! A consistent snapshot of another process's statistics: the anchor read
//! once, then per try the registry's generation, the registry (live heaps,
//! retired totals, thread counts), every live heap's counter blocks and the
//! orphan and profile heaps', the node counters and the process-wide ones,
//! and the generation again. A try counts only if the generation was even
//! and unchanged (no heap came or went, no exited thread's counters moved to
//! the retired totals half-way) and the sums hold the invariants the
//! in-process report holds; otherwise it is tried again. The sums are
//! `stats::build`'s, field for field.

use std::path::PathBuf;

use crate::target::{Error, Found, Target};

/// The anchor layout this slubtop reads (`ANCHOR_VERSION` in src/anchor.rs).
pub const ANCHOR_VERSION: u32 = 5;
const ANCHOR_MAGIC: &[u8; 8] = b"SLUBANCH";
const ANCHOR_BYTES: usize = 344;
/// Tries before giving up on a snapshot.
pub const TRIES: u32 = 1000;

/// Per-class events in a counter block, in `counters::Ev`'s order.
#[derive(Clone, Copy)]
enum Ev {
    AllocSheaf,
    FreeSheaf,
    AllocFast,
    AllocSlow,
    FreeFast,
    FreeSlow,
    FreeRemote,
    SheafFlushed,
    RefillOwn,
    RefillPartial,
    RefillNode,
    SlabsNew,
    SlabsFreed,
    ThreadPartial,
    SheafToBarn,
    SheafFromBarn,
    SheafCapacity,
    SheafScavenged,
    ActiveSlabs,
    ReturnedSlabs,
    FullSlabs,
    SheafToCpu,
    CpuToSheaf,
    CpuFlushed,
    CpuCapacity,
}
const EVENTS: usize = 25;

/// The anchor, as version 1 lays it out (src/anchor.rs).
#[derive(Debug, Default)]
struct Anchor {
    num_classes: usize,
    slab_bytes: u64,
    segment_bytes: u64,
    class_bytes: u64,
    registry_generation: u64,
    registry: u64,
    registry_live: u64,
    registry_retired: u64,
    registry_threads_alive: u64,
    registry_threads_exited: u64,
    orphan_heap: u64,
    prof_heap: u64,
    heap_next: u64,
    class_heap_bytes: u64,
    class_heap_counters: u64,
    node_bytes: u64,
    nodes: u64,
    /// nr_partial, free_objects, added_head, added_tail, allocs_listed,
    /// frees_listed, slabs_new, slabs_freed, full_slabs.
    node_fields: [u64; 9],
    /// segments, large_blocks, large_bytes, large_mapped, large_cached,
    /// large_cache_limit, large_cache_hits, background_purges,
    /// purger_starts, mmaps, purges, purged_bytes, medium_blocks,
    /// medium_bytes, sheaf_budget_taken, zero_size_blocks, percpu_mode,
    /// rseq_restarts, cpu_drains.
    globals: [u64; 19],
    /// Per-CPU mode: where the regions' pointers are, how many, each
    /// class's first slot (`[u32; num_classes]`) and a region's capacity.
    cpu_regions: u64,
    cpu_bound: u64,
    cpu_class_begin: u64,
    cpu_region_capacity: u64,
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

impl Anchor {
    fn parse(b: &[u8], pid: i32, file: &std::path::Path) -> Result<Anchor, Error> {
        let bad = |what: String| Error::BadAnchor {
            pid,
            file: file.to_path_buf(),
            what,
        };
        if &b[..8] != ANCHOR_MAGIC {
            return Err(bad(format!(
                "its magic is {:?}",
                String::from_utf8_lossy(&b[..8])
            )));
        }
        let version = u32_at(b, 8) as u32;
        if version != ANCHOR_VERSION {
            return Err(Error::Version {
                pid,
                theirs: version,
                ours: ANCHOR_VERSION,
                file: file.to_path_buf(),
            });
        }
        let (bytes, classes, events) = (u32_at(b, 12), u32_at(b, 16), u32_at(b, 20));
        if bytes as usize != ANCHOR_BYTES
            || events as usize != EVENTS
            || classes == 0
            || classes > 1024
        {
            return Err(bad(format!(
                "{bytes} bytes, {classes} classes, {events} events (version {ANCHOR_VERSION} has \
                 {ANCHOR_BYTES} bytes and {EVENTS} events)"
            )));
        }
        let mut a = Anchor {
            num_classes: classes as usize,
            slab_bytes: u64_at(b, 24),
            segment_bytes: u64_at(b, 32),
            class_bytes: u64_at(b, 40),
            registry_generation: u64_at(b, 48),
            registry: u64_at(b, 56),
            registry_live: u32_at(b, 64),
            registry_retired: u32_at(b, 68),
            registry_threads_alive: u32_at(b, 72),
            registry_threads_exited: u32_at(b, 76),
            orphan_heap: u64_at(b, 80),
            prof_heap: u64_at(b, 88),
            heap_next: u32_at(b, 96),
            class_heap_bytes: u32_at(b, 100),
            class_heap_counters: u32_at(b, 104),
            node_bytes: u32_at(b, 108),
            nodes: u64_at(b, 112),
            ..Anchor::default()
        };
        for (i, f) in a.node_fields.iter_mut().enumerate() {
            *f = u32_at(b, 120 + 4 * i);
        }
        for (i, g) in a.globals.iter_mut().enumerate() {
            *g = u64_at(b, 160 + 8 * i);
        }
        a.cpu_regions = u64_at(b, 312);
        a.cpu_bound = u64_at(b, 320);
        a.cpu_class_begin = u64_at(b, 328);
        a.cpu_region_capacity = u32_at(b, 336);
        Ok(a)
    }
}

/// One size class, the fields of the in-process `CacheStats` in its order.
pub const CACHE_FIELDS: [&str; 33] = [
    "object_size",
    "objects_per_slab",
    "objects_in_use",
    "sheaf_objects",
    "barn_objects",
    "sheaf_capacity",
    "sheaf_scavenged",
    "objects_total",
    "slabs",
    "partial_slabs",
    "active_slabs",
    "thread_partial_slabs",
    "returned_slabs",
    "full_slabs",
    "node_partial_slabs",
    "partial_free_objects",
    "alloc_sheaf",
    "free_sheaf",
    "sheaf_flushed",
    "alloc_fast",
    "alloc_slow",
    "free_fast",
    "free_slow",
    "free_remote",
    "refill_own",
    "refill_partial",
    "refill_node",
    "slabs_allocated",
    "slabs_freed",
    "node_head",
    "node_tail",
    "cpu_objects",
    "cpu_capacity",
];

/// The process-wide totals, the fields of the in-process `Totals` in order.
pub const TOTALS_FIELDS: [&str; 23] = [
    "bytes_in_use",
    "bytes_mapped",
    "resident_bytes",
    "segments",
    "medium_blocks",
    "medium_bytes",
    "large_blocks",
    "large_bytes",
    "large_cached_bytes",
    "large_cache_limit_bytes",
    "large_cache_hits",
    "mmaps",
    "purges",
    "bytes_purged",
    "background_purges",
    "purger_starts",
    "sheaf_budget_taken",
    "threads_alive",
    "threads_exited",
    "zero_size_blocks",
    "percpu_mode",
    "rseq_restarts",
    "cpu_drains",
];

/// One CPU's sheaves, the fields of the in-process `CpuStats` in order.
pub const CPU_FIELDS: [&str; 4] = ["cpu", "objects", "bytes", "capacity_bytes"];

/// Indices into a class's values, for the views.
pub mod field {
    pub const OBJECT_SIZE: usize = 0;
    pub const IN_USE: usize = 2;
    pub const SHEAF: usize = 3;
    pub const BARN: usize = 4;
    pub const TOTAL: usize = 7;
    pub const SLABS: usize = 8;
    pub const PARTIAL_SLABS: usize = 9;
    pub const THREAD_PARTIAL: usize = 11;
    pub const PARTIAL_FREE: usize = 15;
    pub const ALLOC_SHEAF: usize = 16;
    pub const FREE_SHEAF: usize = 17;
    pub const FLUSHED: usize = 18;
    pub const ALLOC_FAST: usize = 19;
    pub const ALLOC_SLOW: usize = 20;
    pub const FREE_FAST: usize = 21;
    pub const FREE_SLOW: usize = 22;
    pub const FREE_REMOTE: usize = 23;
    pub const CPU_OBJECTS: usize = 31;
}

/// Indices into the totals.
pub mod total {
    pub const BYTES_IN_USE: usize = 0;
    pub const BYTES_MAPPED: usize = 1;
    pub const RESIDENT: usize = 2;
    pub const MEDIUM_BLOCKS: usize = 4;
    pub const MEDIUM_BYTES: usize = 5;
    pub const LARGE_BLOCKS: usize = 6;
    pub const LARGE_BYTES: usize = 7;
    pub const MMAPS: usize = 11;
    pub const THREADS_ALIVE: usize = 17;
    pub const THREADS_EXITED: usize = 18;
    pub const RSEQ_RESTARTS: usize = 21;
    pub const CPU_DRAINS: usize = 22;
}

/// A consistent snapshot.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Per class, the values of `CACHE_FIELDS`.
    pub caches: Vec<[u64; 33]>,
    pub totals: [u64; 23],
    /// Per CPU whose sheaves were ever used, the values of `CPU_FIELDS`,
    /// read after the rest (as the in-process report reads them after
    /// its snapshot): each CPU's sheaves' lengths when read.
    pub cpus: Vec<[u64; 4]>,
    /// Tries it took.
    pub tries: u32,
}

impl Snapshot {
    /// Whether the class has ever been used (`CacheStats::in_use`).
    pub fn class_used(c: &[u64; 33]) -> bool {
        c[field::SLABS] > 0
            || c[field::ALLOC_SHEAF] + c[field::ALLOC_FAST] + c[field::ALLOC_SLOW] > 0
    }

    /// Whether the allocator has mapped no memory: it has served no block
    /// (every block is carved from a mapping of its own), so the process's
    /// allocations, if it has made any, went to another allocator.
    pub fn nothing_mapped(&self) -> bool {
        self.totals[total::MMAPS] == 0
    }
}

/// A reader of one process, its anchor found and checked.
pub struct Reader {
    pub target: Target,
    /// The file that exports the anchor.
    pub file: PathBuf,
    anchor: Anchor,
    class_bytes: Vec<u32>,
    /// Each class's first slot in a CPU's region.
    class_begin: Vec<u32>,
}

/// What one try read, before the sums.
struct Raw {
    sums: Vec<[u64; EVENTS]>,
    /// Per class, the node's nine fields.
    nodes: Vec<[u64; 9]>,
    globals: [u64; 19],
    alive: u64,
    exited: u64,
}

impl Reader {
    pub fn open(pid: i32) -> Result<Reader, Error> {
        let target = Target::open(pid)?;
        let Found { address, file } = target.find_anchor()?;
        let mut b = [0u8; ANCHOR_BYTES];
        // The header first: a short anchor of another version may end
        // before ours would.
        if !target.read(&mut b[..24], &[(address, 24)])? {
            return Err(Error::BadAnchor {
                pid,
                file,
                what: format!("nothing mapped at {address:#x}"),
            });
        }
        let ours = &b[..8] == ANCHOR_MAGIC && u32_at(&b, 8) as u32 == ANCHOR_VERSION;
        if ours && !target.read(&mut b, &[(address, ANCHOR_BYTES)])? {
            return Err(Error::BadAnchor {
                pid,
                file,
                what: format!("{ANCHOR_BYTES} bytes at {address:#x} are not all mapped"),
            });
        }
        let anchor = Anchor::parse(&b, pid, &file)?;
        let mut tables = [Vec::new(), Vec::new()];
        for (table, (at, what)) in tables.iter_mut().zip([
            (anchor.class_bytes, "its class size table"),
            (anchor.cpu_class_begin, "its per-CPU slot table"),
        ]) {
            let mut raw = vec![0u8; anchor.num_classes * 4];
            let len = raw.len();
            if !target.read(&mut raw, &[(at, len)])? {
                return Err(Error::BadAnchor {
                    pid,
                    file,
                    what: format!("{what} is not mapped"),
                });
            }
            *table = raw
                .chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
        }
        let [class_bytes, class_begin] = tables;
        Ok(Reader {
            target,
            file,
            anchor,
            class_bytes,
            class_begin,
        })
    }

    /// A snapshot that holds the invariants, trying up to `TRIES` times.
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        let mut why = String::new();
        for tries in 1..=TRIES {
            match self.try_once()? {
                Ok(raw) => {
                    let mut s = self.build(&raw)?;
                    let cpus = match check(&s) {
                        Ok(()) => self.read_cpus()?,
                        Err(broken) => Err(broken),
                    };
                    match cpus {
                        Ok(cpus) => {
                            s.cpus = cpus;
                            s.tries = tries;
                            return Ok(s);
                        }
                        Err(broken) => why = broken,
                    }
                }
                Err(changed) => why = changed,
            }
            // Let the threads that are changing things finish.
            std::thread::sleep(std::time::Duration::from_micros(50 * tries.min(20) as u64));
        }
        Err(Error::NoConsistentSnapshot {
            pid: self.target.pid,
            tries: TRIES,
            why,
        })
    }

    fn read_u64s(&self, addrs: &[u64]) -> Result<Option<Vec<u64>>, Error> {
        let mut buf = vec![0u8; addrs.len() * 8];
        let ranges: Vec<(u64, usize)> = addrs.iter().map(|&a| (a, 8)).collect();
        if !self.target.read(&mut buf, &ranges)? {
            return Ok(None);
        }
        Ok(Some(
            buf.chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        ))
    }

    /// Each CPU's sheaves (`CPU_FIELDS`), as `stats::cpu_stats` reads them:
    /// Ok(Err(why)) if a pointer led nowhere.
    fn read_cpus(&self) -> Result<Result<Vec<[u64; 4]>, String>, Error> {
        let a = &self.anchor;
        let Some(head) = self.read_u64s(&[a.cpu_regions, a.cpu_bound])? else {
            return Ok(Err("the per-CPU table is not mapped".into()));
        };
        let [regions, bound] = [head[0], head[1]];
        if regions == 0 || bound == 0 {
            return Ok(Ok(Vec::new()));
        }
        if bound > 1 << 16 {
            return Ok(Err(format!("{bound} CPUs")));
        }
        let addrs: Vec<u64> = (0..bound).map(|cpu| regions + 8 * cpu).collect();
        let Some(pointers) = self.read_u64s(&addrs)? else {
            return Ok(Err("the per-CPU regions' pointers are not mapped".into()));
        };
        let classes = a.num_classes;
        let mut cpus = Vec::new();
        let mut buf = vec![0u8; classes * 4 + 8];
        for (cpu, &region) in pointers.iter().enumerate().filter(|(_, &r)| r != 0) {
            let ranges = [(region, classes * 4), (region + a.cpu_region_capacity, 8)];
            if !self.target.read(&mut buf, &ranges)? {
                return Ok(Err(format!("CPU {cpu}'s region is not mapped")));
            }
            let (mut objects, mut bytes) = (0u64, 0u64);
            for class in 0..classes {
                let current = u32_at(&buf, class * 4) & 0xffff;
                let n = current.wrapping_sub(self.class_begin[class] as u64);
                objects = objects.wrapping_add(n);
                bytes = bytes.wrapping_add(n.wrapping_mul(self.class_bytes[class] as u64));
            }
            cpus.push([cpu as u64, objects, bytes, u64_at(&buf, classes * 4)]);
        }
        Ok(Ok(cpus))
    }

    /// One try: Ok(Err(why)) if the registry changed or a pointer led
    /// nowhere; Err for a process we cannot read at all.
    fn try_once(&self) -> Result<Result<Raw, String>, Error> {
        let a = &self.anchor;
        let classes = a.num_classes;
        let Some(g) = self.read_u64s(&[a.registry_generation])? else {
            return Ok(Err("the generation is not mapped".into()));
        };
        let generation = g[0];
        if generation % 2 == 1 {
            return Ok(Err("a thread was starting or exiting".into()));
        }
        // The registry: live, thread counts, the two static heaps' pointers.
        let Some(head) = self.read_u64s(&[
            a.registry + a.registry_live,
            a.registry + a.registry_threads_alive,
            a.registry + a.registry_threads_exited,
            a.orphan_heap,
            a.prof_heap,
        ])?
        else {
            return Ok(Err("the registry is not mapped".into()));
        };
        let retired_len = classes * EVENTS * 8;
        let mut retired = vec![0u8; retired_len];
        if !self.target.read(
            &mut retired,
            &[(a.registry + a.registry_retired, retired_len)],
        )? {
            return Ok(Err("the retired totals are not mapped".into()));
        }
        let mut sums: Vec<[u64; EVENTS]> = retired
            .chunks(EVENTS * 8)
            .map(|c| std::array::from_fn(|i| u64_at(c, i * 8)))
            .collect();
        // The static heaps, then the live list.
        let block = EVENTS * 8;
        let mut buf = vec![0u8; classes * block + 8];
        let mut seen = std::collections::HashSet::new();
        let mut next = head[0];
        let mut pending = vec![head[3], head[4]];
        loop {
            let (heap, listed) = match pending.pop() {
                Some(h) => (h, false),
                None if next != 0 => (next, true),
                None => break,
            };
            // A heap reused and relinked while we walked may lead back.
            if listed && !seen.insert(heap) {
                return Ok(Err("the heap list looped".into()));
            }
            let mut ranges: Vec<(u64, usize)> = (0..classes as u64)
                .map(|c| (heap + c * a.class_heap_bytes + a.class_heap_counters, block))
                .collect();
            ranges.push((heap + a.heap_next, 8));
            if !self.target.read(&mut buf, &ranges)? {
                return Ok(Err("a heap was not mapped".into()));
            }
            for (class, sum) in sums.iter_mut().enumerate() {
                for (i, s) in sum.iter_mut().enumerate() {
                    *s = s.wrapping_add(u64_at(&buf, class * block + i * 8));
                }
            }
            if listed {
                next = u64_at(&buf, classes * block);
            }
        }
        let node_bytes = a.node_bytes as usize;
        let mut nodes_raw = vec![0u8; classes * node_bytes];
        if !self
            .target
            .read(&mut nodes_raw, &[(a.nodes, classes * node_bytes)])?
        {
            return Ok(Err("the nodes are not mapped".into()));
        }
        let nodes = nodes_raw
            .chunks(node_bytes)
            .map(|n| std::array::from_fn(|i| u64_at(n, a.node_fields[i] as usize)))
            .collect();
        let Some(globals) = self.read_u64s(&a.globals)? else {
            return Ok(Err("the process-wide counters are not mapped".into()));
        };
        let Some(g) = self.read_u64s(&[a.registry_generation])? else {
            return Ok(Err("the generation is not mapped".into()));
        };
        if g[0] != generation {
            return Ok(Err("a thread started or exited while we read".into()));
        }
        Ok(Ok(Raw {
            sums,
            nodes,
            globals: globals.try_into().unwrap(),
            alive: head[1],
            exited: head[2],
        }))
    }

    /// `stats::build`, on what one try read.
    fn build(&self, raw: &Raw) -> Result<Snapshot, Error> {
        let mut caches = Vec::with_capacity(self.anchor.num_classes);
        let mut bytes_in_use = 0u64;
        for (class, (e, n)) in raw.sums.iter().zip(&raw.nodes).enumerate() {
            let e = |ev: Ev| e[ev as usize];
            let [nr_partial, free_objects, added_head, added_tail, allocs_listed, frees_listed, slabs_new, slabs_freed, node_full] =
                *n;
            let object_size = self.class_bytes[class] as u64;
            let per_slab = self.anchor.slab_bytes / object_size.max(1);
            let alloc_fast = e(Ev::AllocFast);
            let alloc_slow = e(Ev::AllocSlow).wrapping_add(allocs_listed);
            let free_fast = e(Ev::FreeFast);
            let free_slow = e(Ev::FreeSlow).wrapping_add(frees_listed);
            let free_remote = e(Ev::FreeRemote);
            let alloc_sheaf = e(Ev::AllocSheaf);
            let free_sheaf = e(Ev::FreeSheaf);
            let flushed = e(Ev::SheafFlushed);
            let (to_barn, from_barn) = (e(Ev::SheafToBarn), e(Ev::SheafFromBarn));
            let in_barn = to_barn.wrapping_sub(from_barn);
            let (to_cpu, from_cpu) = (e(Ev::SheafToCpu), e(Ev::CpuToSheaf));
            let cpu_flushed = e(Ev::CpuFlushed);
            let in_cpus = to_cpu.wrapping_sub(from_cpu).wrapping_sub(cpu_flushed);
            let in_sheaves = free_sheaf
                .wrapping_sub(alloc_sheaf)
                .wrapping_sub(flushed.wrapping_sub(cpu_flushed))
                .wrapping_sub(in_barn)
                .wrapping_sub(to_cpu)
                .wrapping_add(from_cpu);
            let in_use = alloc_fast
                .wrapping_add(alloc_slow)
                .wrapping_sub(free_fast.wrapping_add(free_slow).wrapping_add(free_remote))
                .wrapping_sub(in_sheaves)
                .wrapping_sub(in_barn)
                .wrapping_sub(in_cpus);
            let allocated = e(Ev::SlabsNew).wrapping_add(slabs_new);
            let freed = e(Ev::SlabsFreed).wrapping_add(slabs_freed);
            let slabs = allocated.wrapping_sub(freed);
            let thread_partial = e(Ev::ThreadPartial);
            caches.push([
                object_size,
                per_slab,
                in_use,
                in_sheaves,
                in_barn,
                e(Ev::SheafCapacity),
                e(Ev::SheafScavenged),
                slabs.wrapping_mul(per_slab),
                slabs,
                thread_partial.wrapping_add(nr_partial),
                e(Ev::ActiveSlabs),
                thread_partial,
                e(Ev::ReturnedSlabs),
                e(Ev::FullSlabs).wrapping_add(node_full),
                nr_partial,
                free_objects,
                alloc_sheaf,
                free_sheaf,
                flushed,
                alloc_fast,
                alloc_slow,
                free_fast,
                free_slow,
                free_remote,
                e(Ev::RefillOwn),
                e(Ev::RefillPartial),
                e(Ev::RefillNode),
                allocated,
                freed,
                added_head,
                added_tail,
                in_cpus,
                e(Ev::CpuCapacity),
            ]);
            bytes_in_use = bytes_in_use.wrapping_add(in_use.wrapping_mul(object_size));
        }
        let g = raw.globals;
        let [segments, large_blocks, large_bytes, large_mapped, large_cached, limit, hits, background, starts, mmaps, purges, purged, medium_blocks, medium_bytes, sheaf_budget, zero_size_blocks, percpu_mode, restarts, drains] =
            g;
        let totals = [
            bytes_in_use
                .wrapping_add(medium_bytes)
                .wrapping_add(large_bytes),
            segments
                .wrapping_mul(self.anchor.segment_bytes)
                .wrapping_add(large_mapped),
            self.target.resident_bytes()?,
            segments,
            medium_blocks,
            medium_bytes,
            large_blocks,
            large_bytes,
            large_cached,
            limit,
            hits,
            mmaps,
            purges,
            purged,
            background,
            starts,
            sheaf_budget,
            raw.alive,
            raw.exited,
            zero_size_blocks,
            percpu_mode,
            restarts,
            drains,
        ];
        Ok(Snapshot {
            caches,
            totals,
            cpus: Vec::new(),
            tries: 0,
        })
    }
}

/// The invariants the in-process report holds (tests/processes/stats_dump.rs
/// checks them there): per class no negative gauge, the blocks in use and
/// in the sheaves, barns and CPUs' sheaves within the total, partial slabs
/// within the slabs, free objects on partial slabs within the rest; no
/// negative process-wide gauge. A snapshot read while blocks move between
/// those (a drain flushing a CPU's sheaves into the partial slabs between
/// the read of the drainer's counters and the node's) can break the last
/// two: it is read again.
fn check(s: &Snapshot) -> Result<(), String> {
    use field::*;
    let negative = |v: u64| (v as i64) < 0;
    for c in &s.caches {
        let size = c[OBJECT_SIZE];
        let gauges = [
            (SLABS, "slabs"),
            (IN_USE, "objects in use"),
            (SHEAF, "objects in sheaves"),
            (BARN, "objects in barns"),
            (CPU_OBJECTS, "objects in the CPUs' sheaves"),
            (THREAD_PARTIAL, "thread partial slabs"),
        ];
        if let Some((_, name)) = gauges.iter().find(|(i, _)| negative(c[*i])) {
            return Err(format!("{size} B: {name} below zero"));
        }
        let held = c[IN_USE] + c[SHEAF] + c[BARN] + c[CPU_OBJECTS];
        if held > c[TOTAL] {
            return Err(format!("{size} B: {held} in use or cached of {}", c[TOTAL]));
        }
        if c[PARTIAL_SLABS] > c[SLABS] {
            return Err(format!(
                "{size} B: {} partial slabs of {}",
                c[PARTIAL_SLABS], c[SLABS]
            ));
        }
        if c[PARTIAL_FREE] > c[TOTAL] - held {
            return Err(format!(
                "{size} B: {} free objects on partial slabs, {} free in all",
                c[PARTIAL_FREE],
                c[TOTAL] - held
            ));
        }
    }
    let t = &s.totals;
    for (i, name) in [
        (total::LARGE_BLOCKS, "large blocks"),
        (total::LARGE_BYTES, "large bytes"),
        (total::THREADS_ALIVE, "threads alive"),
    ] {
        if negative(t[i]) {
            return Err(format!("{name} below zero"));
        }
    }
    Ok(())
}
