//! Statistics that are exact and free.
//!
//! Each thread heap carries, per class, a block of event counters that only
//! its thread writes, with relaxed loads and stores: no locked instruction on
//! any path. A free is counted by the freeing thread in its own block. A
//! reader sums the live blocks and the retired totals of exited threads:
//! O(threads), never O(slabs). Node counters change under the node lock as
//! slabs enter and leave the list and are read without it.

use core::fmt;

use crate::counters::{global, Ev};
use crate::cpu_sheaf;
use crate::debug;
use crate::heap;
use crate::node::NODES;
use crate::os;
use crate::segment;
use crate::size_class::{objects_per_slab, CLASS_BYTES, NUM_CLASSES};
use crate::sync::{LockWait, Ordering};

/// Declares a statistics struct from one row per field: its documentation,
/// its name (the JSON key), and how the text report shows it. Makes the
/// struct, `FIELDS` (the names in order), `values()` and the text spec.
macro_rules! stat_fields {
    (
        $(#[doc = $sdoc:literal])*
        $name:ident, $shown:ident: $spec:ty;
        $( $(#[doc = $doc:literal])* $field:ident: $how:expr; )*
    ) => {
        $(#[doc = $sdoc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: u64, )*
        }

        impl $name {
            /// Every field's name, in order: the keys of the JSON report.
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
            /// How the text report shows each field, in order.
            const $shown: &'static [$spec] = &[$($how),*];

            /// Every field's value, in the order of `FIELDS`.
            pub fn values(&self) -> impl Iterator<Item = u64> {
                [$(self.$field),*].into_iter()
            }
        }
    };
}

stat_fields! {
    /// One size class, as `/proc/slabinfo` and SLUB_STATS would show it. In
    /// the text report a field is a column (header, width) or not shown.
    CacheStats, COLUMNS: Option<(&'static str, usize)>;
    /// Bytes per object.
    object_size: Some(("size", 6));
    /// Objects one slab of the class holds.
    objects_per_slab: None;
    /// Blocks handed out and not yet freed: held by the program.
    objects_in_use: Some(("in_use", 10));
    /// Freed blocks waiting in threads' sheaves, to be handed out again or
    /// flushed back to their slabs (in use from their slabs' view).
    sheaf_objects: Some(("sheaf", 6));
    /// Freed blocks in the class's barn: full sheaves no thread holds.
    barn_objects: Some(("barn", 6));
    /// The blocks the live threads' sheaves of the class may hold now:
    /// their capacities, each sized by its thread's demand.
    sheaf_capacity: Some(("cap", 5));
    /// Blocks flushed from sheaves because their capacity shrank: a class
    /// its thread stopped freeing, or one that gave its capacity to another
    /// class of the thread's.
    sheaf_scavenged: None;
    /// Object slots in all slabs of the class.
    objects_total: Some(("total", 10));
    /// Slabs the class holds.
    slabs: Some(("slabs", 6));
    /// Thread partial slabs plus node partial slabs.
    partial_slabs: None;
    /// Threads' active slabs (one per class heap at most). These, the
    /// thread partial, returned, FULL and node partial slabs are `slabs`.
    active_slabs: Some(("act", 5));
    /// Slabs on threads' partial lists (and the side heaps' lists of slabs
    /// with a free block: debug mode's, the heap profile's).
    thread_partial_slabs: Some(("tpart", 5));
    /// Slabs handed back to the threads that filled them by other threads'
    /// frees, waiting on their `returned` stacks for their owners' refills.
    returned_slabs: Some(("ret", 5));
    /// FULL slabs: no free block and no owner, until a free claims one
    /// (and the side heaps' slabs with no free block).
    full_slabs: Some(("full", 5));
    /// Slabs on the node partial list.
    node_partial_slabs: Some(("npart", 5));
    /// Free objects on the node partial list, kept as slabs enter and leave it.
    partial_free_objects: Some(("partfree", 8));
    /// Allocations served from a thread's sheaf (the block it freed last).
    alloc_sheaf: Some(("al_sheaf", 11));
    /// Frees into a thread's sheaf.
    free_sheaf: Some(("fr_sheaf", 11));
    /// Blocks flushed from sheaves back to their slabs (each also counted
    /// as the slab-level free that took it: fast, slow or remote).
    sheaf_flushed: Some(("flushed", 10));
    /// Allocations served by the fast path from the active slab.
    alloc_fast: Some(("alloc_fast", 11));
    /// Allocations that took the slow path.
    alloc_slow: Some(("alloc_slow", 10));
    /// Frees into a slab by its owner (flushes of sheaves included).
    free_fast: Some(("free_fast", 11));
    /// Frees through the slow path (claims of full slabs, frees into listed ones).
    free_slow: Some(("free_slow", 9));
    /// Frees pushed onto another thread's slab.
    free_remote: Some(("free_rmt", 9));
    /// Refills of the fast path from the active slab's own free lists.
    refill_own: Some(("rf_own", 8));
    /// Refills from the thread's partial list.
    refill_partial: Some(("rf_part", 8));
    /// Refills from the node partial list.
    refill_node: Some(("rf_node", 8));
    /// Slabs taken from segments.
    slabs_allocated: Some(("slab+", 7));
    /// Slabs given back to segments.
    slabs_freed: Some(("slab-", 7));
    /// Slabs the node placement policy put at the list's head.
    node_head: Some(("head", 7));
    /// Slabs it put at the tail.
    node_tail: Some(("tail", 7));
    /// Freed blocks in the CPUs' sheaves (per-CPU mode), behind the
    /// threads' sheaves (in use from their slabs' view).
    cpu_objects: Some(("cpu", 6));
    /// The blocks the CPUs' sheaves of the class may hold now, each CPU's
    /// sized by the demand on it.
    cpu_capacity: Some(("ccap", 5));
}

impl CacheStats {
    /// Allocations of the class: from sheaves, fast and slow.
    pub fn allocs(&self) -> u64 {
        self.alloc_sheaf + self.alloc_fast + self.alloc_slow
    }

    /// Frees of the class by the program: into sheaves, and into slabs
    /// less the sheaves' blocks flushed into them.
    pub fn frees(&self) -> u64 {
        (self.free_sheaf + self.free_fast + self.free_slow + self.free_remote)
            .wrapping_sub(self.sheaf_flushed)
    }

    /// Whether the class has ever been used.
    pub fn in_use(&self) -> bool {
        self.slabs > 0 || self.allocs() > 0
    }
}

stat_fields! {
    /// Process-wide totals. In the text report each is "label value unit".
    Totals, LABELS: (&'static str, &'static str);
    /// Bytes in live blocks, counted at their class size, page-rounded
    /// (large) or slab-rounded (medium).
    bytes_in_use: ("in use", " B");
    /// Bytes mapped from the kernel: segments and large blocks.
    bytes_mapped: ("mapped", " B");
    /// Resident set of the whole process, from /proc/self/statm.
    resident_bytes: ("resident", " B");
    /// Segments mapped.
    segments: ("segments", "");
    /// Medium blocks live: above the size classes, up to glibc's dynamic
    /// mmap threshold, each a span of a segment's slabs.
    medium_blocks: ("medium blocks", "");
    /// Bytes of the live medium blocks' spans (whole slabs).
    medium_bytes: ("medium bytes", " B");
    /// Large blocks live.
    large_blocks: ("large blocks", "");
    /// Bytes of the live large blocks' mappings.
    large_bytes: ("large bytes", " B");
    /// Bytes of freed large-block mappings kept for reuse.
    large_cached_bytes: ("large cached", " B");
    /// The large-block cache's current bound: half of the most bytes live
    /// in large blocks since the last purge, 64 MiB to 1 GiB.
    large_cache_limit_bytes: ("large cache limit", " B");
    /// Large allocations served from the cache (whole, split or grown).
    large_cache_hits: ("large cache hits", "");
    /// Mappings made.
    mmaps: ("mmaps", "");
    /// Ranges given back to the kernel (MADV_DONTNEED).
    purges: ("purges", "");
    /// Bytes given back to the kernel by purges: free slabs madvised, and
    /// free segments and cached large blocks unmapped before they were.
    bytes_purged: ("purged", " B");
    /// Purge passes made by the background purger thread.
    background_purges: ("background purges", "");
    /// Background purger threads started (one lives while a purge is pending).
    purger_starts: ("purger starts", "");
    /// Sheaf capacity the threads took from the process's pool (32 MiB),
    /// beyond the 64 KiB each may grow its sheaves by on its own; in
    /// per-CPU mode, the CPUs' sheaves' capacity, all of it from the pool.
    sheaf_budget_taken: ("sheaf budget taken", " B");
    /// Threads with a heap, alive.
    threads_alive: ("threads alive", "");
    /// Threads that had a heap and exited.
    threads_exited: ("threads exited", "");
    /// Zero-size blocks live (`malloc(0)`): they hold no byte and lie in
    /// slabs of no class, whose memory is inaccessible.
    zero_size_blocks: ("zero-size blocks", "");
    /// 1 if the process runs the per-CPU sheaves (restartable sequences),
    /// 0 if not (`SLUBMALLOC_PERCPU=0`, no rseq registration, no membarrier).
    percpu_mode: ("per-CPU mode", "");
    /// The per-CPU sheaves' critical sections restarted (preemption,
    /// migration, a signal, inside one).
    rseq_restarts: ("rseq restarts", "");
    /// CPUs stopped and drained (`trim`, the purge, the checks at exit).
    cpu_drains: ("CPU drains", "");
}

stat_fields! {
    /// One CPU's sheaves (per-CPU mode), all classes: what its region's
    /// headers say when read (`cpu_stats`). In the text report a field is
    /// a column.
    CpuStats, CPU_COLUMNS: (&'static str, usize);
    /// The CPU's id.
    cpu: ("cpu", 5);
    /// Freed blocks in its sheaves (the classes' `cpu_objects` summed over
    /// the CPUs, when no thread moves blocks).
    objects: ("objects", 9);
    /// Their bytes, at their classes' sizes.
    bytes: ("bytes", 11);
    /// The bytes its sheaves may hold now, sized by the demand on it
    /// (within 1 MiB; growth reserved and not yet committed included).
    capacity_bytes: ("capacity", 9);
}

/// Each CPU whose sheaves were ever used (per-CPU mode; none in the
/// fallback), lowest id first, read as the iterator reaches it: a CPU's
/// row is its sheaves' lengths at that moment, taken from their headers
/// without stopping the CPU or walking anything (O(classes) a CPU).
pub fn cpu_stats() -> impl Iterator<Item = CpuStats> {
    cpu_sheaf::cpus().map(|cpu| {
        let h = cpu_sheaf::holds(cpu);
        CpuStats {
            cpu: cpu as u64,
            objects: h.objects,
            bytes: h.bytes,
            capacity_bytes: h.capacity_bytes,
        }
    })
}

/// A snapshot of every counter. Taking one costs O(threads + classes).
#[derive(Clone, Debug)]
pub struct Stats {
    caches: [CacheStats; NUM_CLASSES],
    /// Process-wide totals.
    pub totals: Totals,
}

/// Takes a statistics snapshot without walking any list.
pub fn stats() -> Stats {
    let mut sums = [[0u64; Ev::COUNT]; NUM_CLASSES];
    let (alive, exited) = heap::sum_counters(&mut sums, LockWait::Wait);
    build(&sums, alive, exited)
}

/// As `stats`, but never waits for a lock (the report may run in a signal
/// handler that interrupted the allocator).
pub(crate) fn stats_for_report() -> Stats {
    let mut sums = [[0u64; Ev::COUNT]; NUM_CLASSES];
    let (alive, exited) = heap::sum_counters(&mut sums, LockWait::Try);
    build(&sums, alive, exited)
}

fn build(sums: &[[u64; Ev::COUNT]; NUM_CLASSES], alive: u64, exited: u64) -> Stats {
    let mut caches = [CacheStats::default(); NUM_CLASSES];
    let mut bytes_in_use = 0u64;
    for (class, c) in caches.iter_mut().enumerate() {
        let e = |ev: Ev| sums[class][ev as usize];
        let node = &NODES[class];
        c.object_size = CLASS_BYTES[class] as u64;
        c.objects_per_slab = objects_per_slab(class) as u64;
        c.alloc_fast = e(Ev::AllocFast);
        // Allocations from and frees into listed slabs, and the slabs they
        // took from and gave back to segments, are counted on the node.
        let on_node = |c: &crate::sync::AtomicU64| c.load(Ordering::Relaxed);
        c.alloc_slow = e(Ev::AllocSlow) + on_node(&node.allocs_listed);
        c.free_fast = e(Ev::FreeFast);
        c.free_slow = e(Ev::FreeSlow) + on_node(&node.frees_listed);
        c.free_remote = e(Ev::FreeRemote);
        c.alloc_sheaf = e(Ev::AllocSheaf);
        c.free_sheaf = e(Ev::FreeSheaf);
        c.sheaf_flushed = e(Ev::SheafFlushed);
        // A block in a sheaf or a barn is in use from its slab's view.
        let (to_barn, from_barn) = (e(Ev::SheafToBarn), e(Ev::SheafFromBarn));
        let (to_cpu, from_cpu) = (e(Ev::SheafToCpu), e(Ev::CpuToSheaf));
        let cpu_flushed = e(Ev::CpuFlushed);
        // The CPUs' blocks flushed to their slabs are in `sheaf_flushed`
        // too (so that `frees()` cancels the slab-level frees they count).
        c.sheaf_objects = c
            .free_sheaf
            .wrapping_sub(c.alloc_sheaf)
            .wrapping_sub(c.sheaf_flushed.wrapping_sub(cpu_flushed))
            .wrapping_sub(to_barn)
            .wrapping_add(from_barn)
            .wrapping_sub(to_cpu)
            .wrapping_add(from_cpu);
        c.barn_objects = to_barn.wrapping_sub(from_barn);
        c.cpu_objects = to_cpu.wrapping_sub(from_cpu).wrapping_sub(cpu_flushed);
        c.cpu_capacity = e(Ev::CpuCapacity);
        c.sheaf_capacity = e(Ev::SheafCapacity);
        c.sheaf_scavenged = e(Ev::SheafScavenged);
        c.objects_in_use = c.allocs().wrapping_sub(c.frees());
        c.refill_own = e(Ev::RefillOwn);
        c.refill_partial = e(Ev::RefillPartial);
        c.refill_node = e(Ev::RefillNode);
        c.slabs_allocated = e(Ev::SlabsNew) + on_node(&node.slabs_new);
        c.slabs_freed = e(Ev::SlabsFreed) + on_node(&node.slabs_freed);
        c.slabs = c.slabs_allocated.wrapping_sub(c.slabs_freed);
        c.objects_total = c.slabs.wrapping_mul(c.objects_per_slab);
        c.active_slabs = e(Ev::ActiveSlabs);
        c.thread_partial_slabs = e(Ev::ThreadPartial);
        c.returned_slabs = e(Ev::ReturnedSlabs);
        c.full_slabs =
            e(Ev::FullSlabs).wrapping_add(node.full_slabs.load(Ordering::Relaxed) as u64);
        c.node_partial_slabs = node.nr_partial.load(Ordering::Relaxed) as u64;
        c.partial_slabs = c.thread_partial_slabs + c.node_partial_slabs;
        c.partial_free_objects = node.free_objects.load(Ordering::Relaxed) as u64;
        c.node_head = node.added_head.load(Ordering::Relaxed);
        c.node_tail = node.added_tail.load(Ordering::Relaxed);
        // Wrapping, as the differences above: a snapshot that a drain of
        // the CPUs' sheaves crosses (the purger's) can count a flushed
        // block's free into its slab (on the node, read last) and not the
        // flush that cancels it (in the heap's counters, summed first).
        bytes_in_use = bytes_in_use.wrapping_add(c.objects_in_use.wrapping_mul(c.object_size));
    }
    let g = global();
    let segments = g.segments.load(Ordering::Relaxed);
    let large_bytes = g.large_bytes.load(Ordering::Relaxed);
    let medium_bytes = g.medium_bytes.load(Ordering::Relaxed);
    let totals = Totals {
        bytes_in_use: bytes_in_use
            .wrapping_add(medium_bytes)
            .wrapping_add(large_bytes),
        bytes_mapped: g.mapped_bytes(),
        resident_bytes: os::resident_bytes(),
        segments,
        medium_blocks: g.medium_blocks.load(Ordering::Relaxed),
        medium_bytes,
        large_blocks: g.large_blocks.load(Ordering::Relaxed),
        large_bytes,
        zero_size_blocks: g.zero_size_blocks.load(Ordering::Relaxed),
        percpu_mode: cpu_sheaf::on() as u64,
        rseq_restarts: cpu_sheaf::restarts(),
        cpu_drains: cpu_sheaf::drains(),
        large_cached_bytes: g.large_cached.load(Ordering::Relaxed),
        large_cache_limit_bytes: g.large_cache_limit.load(Ordering::Relaxed),
        large_cache_hits: g.large_cache_hits.load(Ordering::Relaxed),
        mmaps: os::MMAPS.load(Ordering::Relaxed),
        purges: os::PURGES.load(Ordering::Relaxed),
        bytes_purged: os::PURGED_BYTES.load(Ordering::Relaxed),
        background_purges: g.background_purges.load(Ordering::Relaxed),
        purger_starts: g.purger_starts.load(Ordering::Relaxed),
        sheaf_budget_taken: g.sheaf_budget_taken.load(Ordering::Relaxed),
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
    /// live medium and large blocks.
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
            .map(|c| c.slabs * segment::SLAB_BYTES as u64)
            .sum();
        Summary {
            allocated: self.totals.bytes_in_use,
            active: slab_bytes + self.totals.medium_bytes + self.totals.large_bytes,
            mapped: self.totals.bytes_mapped,
            rss: self.totals.resident_bytes,
        }
    }

    /// One entry per size class, smallest first.
    pub fn caches(&self) -> impl Iterator<Item = &CacheStats> {
        self.caches.iter()
    }

    /// The class that serves `size`-byte requests, if any: in debug mode
    /// (`SLUBMALLOC_DEBUG=1`) the class of the slot that holds the block and
    /// its red zone.
    pub fn cache_for_size(&self, size: usize) -> Option<&CacheStats> {
        let class = if debug::enabled() {
            debug::slot_class(size, 1)
        } else {
            crate::size_class::class_for(size, 1)
        };
        class.map(|c| &self.caches[c])
    }

    /// Writes the snapshot as one JSON document: `caches` (the classes in
    /// use, each with every field of `CacheStats`), `cpus` (`cpu_stats`,
    /// read as it is written) and `totals`.
    pub fn write_json(&self, w: &mut impl fmt::Write) -> fmt::Result {
        w.write_str("{\"caches\":[")?;
        for (i, c) in self.caches.iter().filter(|c| c.in_use()).enumerate() {
            w.write_str(if i == 0 { "{" } else { ",{" })?;
            write_json_fields(w, CacheStats::FIELDS, c.values())?;
            w.write_str("}")?;
        }
        w.write_str("],\"cpus\":[")?;
        for (i, c) in cpu_stats().enumerate() {
            w.write_str(if i == 0 { "{" } else { ",{" })?;
            write_json_fields(w, CpuStats::FIELDS, c.values())?;
            w.write_str("}")?;
        }
        w.write_str("],\"totals\":{")?;
        write_json_fields(w, Totals::FIELDS, self.totals.values())?;
        w.write_str("}}")
    }

    /// The snapshot as a JSON string (allocates; for programs, not for the
    /// allocator's own report, which uses `write_json`).
    #[cfg(not(slubmalloc_preload))]
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        let _ = self.write_json(&mut s);
        s
    }
}

impl fmt::Display for Stats {
    /// A table in the spirit of /proc/slabinfo, one row per class in use
    /// (the fields with a column in `CacheStats`), then the totals, then in
    /// per-CPU mode a row per CPU (`cpu_stats`, read as it is written); the
    /// alternate form (`{:#}`) is the one-line [`Summary`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return fmt::Display::fmt(&self.summary(), f);
        }
        write_row(f, CacheStats::COLUMNS.iter().filter_map(|c| *c))?;
        for c in self.caches.iter().filter(|c| c.in_use()) {
            let shown = c
                .values()
                .zip(CacheStats::COLUMNS)
                .filter_map(|(v, col)| col.map(|(_, w)| (v, w)));
            write_row(f, shown)?;
        }
        for (i, (value, (label, unit))) in self.totals.values().zip(Totals::LABELS).enumerate() {
            write!(f, "{}{label} {value}{unit}", if i == 0 { "" } else { ", " })?;
        }
        writeln!(f)?;
        for (row, c) in cpu_stats().enumerate() {
            if row == 0 {
                write_row(f, CpuStats::CPU_COLUMNS.iter().copied())?;
            }
            write_row(
                f,
                c.values()
                    .zip(CpuStats::CPU_COLUMNS.iter().map(|&(_, w)| w)),
            )?;
        }
        Ok(())
    }
}

/// One line of a text table: each cell right-aligned in its width, one
/// space apart.
fn write_row(
    f: &mut fmt::Formatter<'_>,
    cells: impl Iterator<Item = (impl fmt::Display, usize)>,
) -> fmt::Result {
    for (i, (cell, width)) in cells.enumerate() {
        write!(f, "{}{cell:>width$}", if i == 0 { "" } else { " " })?;
    }
    writeln!(f)
}

/// `"name":value` pairs, comma-separated.
fn write_json_fields(
    w: &mut impl fmt::Write,
    names: &[&str],
    values: impl Iterator<Item = u64>,
) -> fmt::Result {
    for (i, (name, value)) in names.iter().zip(values).enumerate() {
        write!(w, "{}\"{name}\":{value}", if i == 0 { "" } else { "," })?;
    }
    Ok(())
}
