//! Statistics that are exact and free (seeds 000 and 002).
//!
//! Each thread heap carries, per class, a block of event counters that only
//! its thread writes, with relaxed loads and stores: no locked instruction on
//! any path. A free is counted by the freeing thread in its own block. A
//! reader sums the live blocks and the retired totals of exited threads:
//! O(threads), never O(slabs). Node counters change under the node lock as
//! slabs enter and leave the list and are read without it.

use core::fmt;

use crate::node::NODES;
use crate::size_class::{objects_per_slab, CLASS_BYTES, NUM_CLASSES};
use crate::sync::{AtomicU64, Ordering};

/// Per-class events kept in each thread's counter block.
#[derive(Clone, Copy)]
#[repr(usize)]
pub enum Ev {
    AllocFast,
    AllocSlow,
    FreeFast,
    FreeSlow,
    FreeRemote,
    RefillOwn,
    RefillPartial,
    RefillNode,
    SlabsNew,
    SlabsFreed,
    /// A gauge, not an event: slabs on this thread's partial list.
    ThreadPartial,
}

impl Ev {
    pub const COUNT: usize = 11;
}

/// One thread's counters for one class. Single writer (the owning thread).
#[repr(C)]
pub struct Counters([AtomicU64; Ev::COUNT]);

impl Counters {
    pub const fn new() -> Self {
        Counters([const { AtomicU64::new(0) }; Ev::COUNT])
    }

    /// Adds `n`: a relaxed load and store, which x86-64 compiles to one
    /// `add` to memory, with no lock prefix.
    #[inline(always)]
    pub fn add(&self, ev: Ev, n: u64) {
        if cfg!(slubmalloc_bench_no_counters) && !matches!(ev, Ev::ThreadPartial) {
            return;
        }
        let c = &self.0[ev as usize];
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    #[inline(always)]
    pub fn inc(&self, ev: Ev) {
        self.add(ev, 1);
    }

    #[inline(always)]
    pub fn sub(&self, ev: Ev, n: u64) {
        self.add(ev, n.wrapping_neg());
    }

    pub fn clear(&self) {
        for c in self.0.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }

    pub fn get_index(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Relaxed)
    }
}

/// Process-wide counters of rare events, updated with atomic adds.
pub struct Global {
    pub mmaps: AtomicU64,
    pub purges: AtomicU64,
    pub segments: AtomicU64,
    pub large_blocks: AtomicU64,
    pub large_bytes: AtomicU64,
    pub large_mapped: AtomicU64,
    pub large_cached: AtomicU64,
}

static GLOBAL: Global = Global {
    mmaps: AtomicU64::new(0),
    purges: AtomicU64::new(0),
    segments: AtomicU64::new(0),
    large_blocks: AtomicU64::new(0),
    large_bytes: AtomicU64::new(0),
    large_mapped: AtomicU64::new(0),
    large_cached: AtomicU64::new(0),
};

pub fn global() -> &'static Global {
    &GLOBAL
}

/// One size class, as `/proc/slabinfo` and SLUB_STATS would show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub object_size: u64,
    pub objects_per_slab: u64,
    /// Blocks handed out and not yet freed.
    pub objects_in_use: u64,
    /// Object slots in all slabs of the class.
    pub objects_total: u64,
    pub slabs: u64,
    /// Thread partial slabs plus node partial slabs.
    pub partial_slabs: u64,
    pub thread_partial_slabs: u64,
    pub node_partial_slabs: u64,
    /// Free objects on the node partial list (seed 000's counter).
    pub partial_free_objects: u64,
    pub alloc_fast: u64,
    pub alloc_slow: u64,
    pub free_fast: u64,
    pub free_slow: u64,
    pub free_remote: u64,
    /// Refills of the fast path from the active slab's own free lists.
    pub refill_own: u64,
    pub refill_partial: u64,
    pub refill_node: u64,
    pub slabs_allocated: u64,
    pub slabs_freed: u64,
    pub node_head: u64,
    pub node_tail: u64,
}

impl CacheStats {
    /// Whether the class has ever been used.
    pub fn in_use(&self) -> bool {
        self.slabs > 0 || self.alloc_fast + self.alloc_slow > 0
    }
}

/// Process-wide totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Bytes in live blocks, counted at their class or page-rounded size.
    pub bytes_in_use: u64,
    /// Bytes mapped from the kernel: segments and large blocks.
    pub bytes_mapped: u64,
    /// Resident set of the whole process, from /proc/self/statm.
    pub resident_bytes: u64,
    pub segments: u64,
    pub large_blocks: u64,
    pub large_bytes: u64,
    pub large_cached_bytes: u64,
    pub mmaps: u64,
    pub purges: u64,
    pub threads_alive: u64,
    pub threads_exited: u64,
}

/// A snapshot of every counter. Taking one costs O(threads + classes).
#[derive(Clone, Debug)]
pub struct Stats {
    caches: [CacheStats; NUM_CLASSES],
    pub totals: Totals,
}

/// Takes a statistics snapshot without walking any list.
pub fn stats() -> Stats {
    let mut sums = [[0u64; Ev::COUNT]; NUM_CLASSES];
    let (alive, exited) = crate::thread_heap::sum_counters(&mut sums, true);
    build(&sums, alive, exited)
}

/// As `stats`, but never waits for a lock (the report may run in a signal
/// handler that interrupted the allocator).
pub(crate) fn stats_for_report() -> Stats {
    let mut sums = [[0u64; Ev::COUNT]; NUM_CLASSES];
    let (alive, exited) = crate::thread_heap::sum_counters(&mut sums, false);
    build(&sums, alive, exited)
}

fn build(sums: &[[u64; Ev::COUNT]; NUM_CLASSES], alive: u64, exited: u64) -> Stats {
    let mut caches = [CacheStats::default(); NUM_CLASSES];
    let mut bytes_in_use = 0;
    for (class, c) in caches.iter_mut().enumerate() {
        let e = |ev: Ev| sums[class][ev as usize];
        let node = &NODES[class];
        c.object_size = CLASS_BYTES[class] as u64;
        c.objects_per_slab = objects_per_slab(class) as u64;
        c.alloc_fast = e(Ev::AllocFast);
        c.alloc_slow = e(Ev::AllocSlow);
        c.free_fast = e(Ev::FreeFast);
        c.free_slow = e(Ev::FreeSlow);
        c.free_remote = e(Ev::FreeRemote);
        c.objects_in_use =
            (c.alloc_fast + c.alloc_slow).wrapping_sub(c.free_fast + c.free_slow + c.free_remote);
        c.refill_own = e(Ev::RefillOwn);
        c.refill_partial = e(Ev::RefillPartial);
        c.refill_node = e(Ev::RefillNode);
        c.slabs_allocated = e(Ev::SlabsNew);
        c.slabs_freed = e(Ev::SlabsFreed);
        c.slabs = c.slabs_allocated.wrapping_sub(c.slabs_freed);
        c.objects_total = c.slabs * c.objects_per_slab;
        c.thread_partial_slabs = e(Ev::ThreadPartial);
        c.node_partial_slabs = node.nr_partial.load(Ordering::Relaxed) as u64;
        c.partial_slabs = c.thread_partial_slabs + c.node_partial_slabs;
        c.partial_free_objects = node.free_objects.load(Ordering::Relaxed) as u64;
        c.node_head = node.added_head.load(Ordering::Relaxed);
        c.node_tail = node.added_tail.load(Ordering::Relaxed);
        bytes_in_use += c.objects_in_use * c.object_size;
    }
    let g = global();
    let segments = g.segments.load(Ordering::Relaxed);
    let large_bytes = g.large_bytes.load(Ordering::Relaxed);
    let totals = Totals {
        bytes_in_use: bytes_in_use + large_bytes,
        bytes_mapped: segments * crate::segment::SEGMENT_BYTES as u64
            + g.large_mapped.load(Ordering::Relaxed),
        resident_bytes: resident_bytes(),
        segments,
        large_blocks: g.large_blocks.load(Ordering::Relaxed),
        large_bytes,
        large_cached_bytes: g.large_cached.load(Ordering::Relaxed),
        mmaps: g.mmaps.load(Ordering::Relaxed),
        purges: g.purges.load(Ordering::Relaxed),
        threads_alive: alive,
        threads_exited: exited,
    };
    Stats { caches, totals }
}

/// The process-wide totals in one line, under the names jemalloc-ctl
/// (`tikv-jemalloc-ctl`'s `stats` module) gives them where they mean the
/// same thing, so a service can export them as it exports jemalloc's.
///
/// `Display` writes `allocated=N active=N mapped=N rss=N` (bytes, one line,
/// logfmt); `format!("{stats:#}")` on a [`Stats`] writes the same line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// jemalloc's `stats.allocated`: bytes in live blocks, counted at their
    /// size class (large blocks page-rounded). [`Totals::bytes_in_use`].
    pub allocated: u64,
    /// jemalloc's `stats.active`: bytes of the pages that hold live blocks,
    /// a multiple of the page size and at least `allocated`: every slab that
    /// belongs to a size class (64 KiB each, free slots included) plus the
    /// live large blocks.
    pub active: u64,
    /// Bytes the allocator has mapped from the kernel now: its segments
    /// (free and purged slabs included) and its large-block mappings (the
    /// reuse cache included). jemalloc's `stats.mapped` leaves out extents
    /// with no live block, so this is the larger of the two for the same heap;
    /// slubmalloc keeps no `retained` (mapped but unused) address space
    /// apart from it: what it purges and keeps mapped is counted here.
    /// [`Totals::bytes_mapped`].
    pub mapped: u64,
    /// The resident set of the whole process (`/proc/self/statm`), not
    /// jemalloc's `stats.resident` (the allocator's own resident pages),
    /// hence the other name. [`Totals::resident_bytes`].
    pub rss: u64,
}

impl fmt::Display for Summary {
    /// `allocated=N active=N mapped=N rss=N`, in bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocated={} active={} mapped={} rss={}",
            self.allocated, self.active, self.mapped, self.rss
        )
    }
}

impl Stats {
    /// The totals in one line under jemalloc-ctl's names ([`Summary`]).
    pub fn summary(&self) -> Summary {
        let slab_bytes: u64 = self
            .caches()
            .map(|c| c.slabs * crate::segment::SLAB_BYTES as u64)
            .sum();
        Summary {
            allocated: self.totals.bytes_in_use,
            active: slab_bytes + self.totals.large_bytes,
            mapped: self.totals.bytes_mapped,
            rss: self.totals.resident_bytes,
        }
    }

    /// One entry per size class, smallest first.
    pub fn caches(&self) -> impl Iterator<Item = &CacheStats> {
        self.caches.iter()
    }

    /// The class that serves `size`-byte requests, if any.
    pub fn cache_for_size(&self, size: usize) -> Option<&CacheStats> {
        crate::size_class::class_for(size, 1).map(|c| &self.caches[c])
    }

    /// Writes the snapshot as one JSON document.
    pub fn write_json(&self, w: &mut impl fmt::Write) -> fmt::Result {
        w.write_str("{\"caches\":[")?;
        let mut first = true;
        for c in self.caches.iter().filter(|c| c.in_use()) {
            if !first {
                w.write_str(",")?;
            }
            first = false;
            write!(
                w,
                "{{\"object_size\":{},\"objects_per_slab\":{},\"objects_in_use\":{},\"objects_total\":{},\
                 \"slabs\":{},\"partial_slabs\":{},\"thread_partial_slabs\":{},\"node_partial_slabs\":{},\
                 \"partial_free_objects\":{},\"alloc_fast\":{},\"alloc_slow\":{},\"free_fast\":{},\
                 \"free_slow\":{},\"free_remote\":{},\"refill_own\":{},\"refill_partial\":{},\"refill_node\":{},\
                 \"slabs_allocated\":{},\"slabs_freed\":{},\"node_head\":{},\"node_tail\":{}}}",
                c.object_size,
                c.objects_per_slab,
                c.objects_in_use,
                c.objects_total,
                c.slabs,
                c.partial_slabs,
                c.thread_partial_slabs,
                c.node_partial_slabs,
                c.partial_free_objects,
                c.alloc_fast,
                c.alloc_slow,
                c.free_fast,
                c.free_slow,
                c.free_remote,
                c.refill_own,
                c.refill_partial,
                c.refill_node,
                c.slabs_allocated,
                c.slabs_freed,
                c.node_head,
                c.node_tail
            )?;
        }
        let t = &self.totals;
        write!(
            w,
            "],\"totals\":{{\"bytes_in_use\":{},\"bytes_mapped\":{},\"resident_bytes\":{},\"segments\":{},\
             \"large_blocks\":{},\"large_bytes\":{},\"large_cached_bytes\":{},\"mmaps\":{},\"purges\":{},\
             \"threads_alive\":{},\"threads_exited\":{}}}}}",
            t.bytes_in_use,
            t.bytes_mapped,
            t.resident_bytes,
            t.segments,
            t.large_blocks,
            t.large_bytes,
            t.large_cached_bytes,
            t.mmaps,
            t.purges,
            t.threads_alive,
            t.threads_exited
        )
    }

    /// The snapshot as a JSON string (allocates; for programs, not for the
    /// allocator's own report, which uses `write_json`).
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        let _ = self.write_json(&mut s);
        s
    }
}

impl fmt::Display for Stats {
    /// A table in the spirit of /proc/slabinfo, one row per class in use,
    /// then the totals; the alternate form (`{:#}`) is the one-line
    /// [`Summary`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return fmt::Display::fmt(&self.summary(), f);
        }
        writeln!(
            f,
            "{:>6} {:>10} {:>10} {:>6} {:>5} {:>5} {:>8} {:>11} {:>9} {:>11} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}",
            "size",
            "in_use",
            "total",
            "slabs",
            "tpart",
            "npart",
            "partfree",
            "alloc_fast",
            "alloc_slow",
            "free_fast",
            "free_slow",
            "free_rmt",
            "refill",
            "rf_node",
            "slab+",
            "slab-",
            "head",
            "tail"
        )?;
        for c in self.caches.iter().filter(|c| c.in_use()) {
            writeln!(
                f,
                "{:>6} {:>10} {:>10} {:>6} {:>5} {:>5} {:>8} {:>11} {:>9} {:>11} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7}",
                c.object_size,
                c.objects_in_use,
                c.objects_total,
                c.slabs,
                c.thread_partial_slabs,
                c.node_partial_slabs,
                c.partial_free_objects,
                c.alloc_fast,
                c.alloc_slow,
                c.free_fast,
                c.free_slow,
                c.free_remote,
                c.refill_own + c.refill_partial,
                c.refill_node,
                c.slabs_allocated,
                c.slabs_freed,
                c.node_head,
                c.node_tail
            )?;
        }
        let t = &self.totals;
        writeln!(
            f,
            "in use {} B, mapped {} B, resident {} B, segments {}, large blocks {} ({} B, {} B cached), mmaps {}, purges {}, threads alive {}, exited {}",
            t.bytes_in_use,
            t.bytes_mapped,
            t.resident_bytes,
            t.segments,
            t.large_blocks,
            t.large_bytes,
            t.large_cached_bytes,
            t.mmaps,
            t.purges,
            t.threads_alive,
            t.threads_exited
        )
    }
}

/// Resident bytes of the process from /proc/self/statm, read without allocating.
pub fn resident_bytes() -> u64 {
    let _keep = crate::os::ErrnoGuard::save();
    // SAFETY: a NUL-terminated literal path; the fd is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/statm".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 128];
    // SAFETY: reads at most buf.len() bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` is ours.
    unsafe { libc::close(fd) };
    if n <= 0 {
        return 0;
    }
    // statm: "size resident shared ..." in pages.
    let fields = buf[..n as usize].split(|&b| b == b' ');
    let resident = fields.clone().nth(1).unwrap_or(b"0");
    let pages = resident
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |a, &b| a * 10 + (b - b'0') as u64);
    pages * crate::os::PAGE_BYTES as u64
}
