//! The allocator's counters: per thread and class, a block of event counters
//! that only its thread writes, with relaxed loads and stores (no locked
//! instruction on any path); and the process-wide counters of rare events.
//! Summing and formatting them is `stats`'s.

use crate::size_class;
use crate::sync::{AtomicU64, Ordering};

/// Per-class events kept in each thread's counter block. The first seven,
/// those of the fast paths and the frees, share the class heap's first
/// cache line with the sheaf's length (`heap::ClassHeap`).
#[derive(Clone, Copy)]
#[repr(usize)]
pub enum Ev {
    /// Allocations served from the thread's sheaf (`sheaf`).
    AllocSheaf,
    /// Frees into the thread's sheaf. The slab-level frees below
    /// (`FreeFast`, `FreeSlow`, `FreeRemote`) count blocks as their slabs
    /// take them back, a sheaf's flushed blocks included.
    FreeSheaf,
    AllocFast,
    AllocSlow,
    FreeFast,
    FreeSlow,
    FreeRemote,
    /// Blocks flushed from the thread's sheaf to their slabs.
    SheafFlushed,
    RefillOwn,
    RefillPartial,
    RefillNode,
    SlabsNew,
    SlabsFreed,
    /// A gauge, not an event: slabs on this thread's partial list.
    ThreadPartial,
    /// Blocks this thread's full sheaves put in the class's barn (`barn`).
    SheafToBarn,
    /// Blocks this thread's empty sheaf took from the barn.
    SheafFromBarn,
    /// A gauge: the blocks this thread's sheaf of the class may hold
    /// (`sheaf_budget`).
    SheafCapacity,
    /// Blocks flushed from the sheaf because its capacity shrank.
    SheafScavenged,
    /// A gauge: 1 while this heap has an active slab of the class.
    ActiveSlabs,
    /// A gauge: slabs this thread pushed on their owners' `returned`
    /// stacks (`Slab::give_back`), less those this heap took off its own.
    ReturnedSlabs,
    /// A gauge: slabs this thread made FULL (`Slab::try_make_full`), less
    /// those it claimed (`Slab::try_claim_full`); for a side heap, its
    /// slabs with no free block (`side_slabs`). Those made FULL and claimed
    /// under a node lock count on the node (`Node::full_slabs`).
    FullSlabs,
    /// Blocks this thread's full sheaves put on its CPU's sheaf of the
    /// class (per-CPU mode, `cpu_sheaf`).
    SheafToCpu,
    /// Blocks this thread's empty sheaf took from its CPU's sheaf.
    CpuToSheaf,
    /// Blocks this thread flushed from CPUs' sheaves to their slabs (also
    /// counted in `SheafFlushed`).
    CpuFlushed,
    /// A gauge: the blocks the CPUs' sheaves of the class may hold, grown
    /// by this thread, less what its drains dropped.
    CpuCapacity,
}

impl Ev {
    pub const COUNT: usize = 25;
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
        // Kept under the switch: the gauges, and the sheaves' demand signal
        // (`sheaf_budget`).
        if cfg!(slubmalloc_bench_no_counters)
            && !matches!(
                ev,
                Ev::ThreadPartial
                    | Ev::ActiveSlabs
                    | Ev::ReturnedSlabs
                    | Ev::FullSlabs
                    | Ev::AllocFast
                    | Ev::SheafFromBarn
                    | Ev::SheafCapacity
                    | Ev::CpuCapacity
            )
        {
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

    /// Zeroes the counters that are not zero: a block never written stays
    /// unwritten (its page need not become resident).
    pub fn clear_if_set(&self) {
        for c in self.0.iter().filter(|c| c.load(Ordering::Relaxed) != 0) {
            c.store(0, Ordering::Relaxed);
        }
    }

    pub fn get(&self, ev: Ev) -> u64 {
        self.get_index(ev as usize)
    }

    pub fn get_index(&self, i: usize) -> u64 {
        self.0[i].load(Ordering::Relaxed)
    }
}

/// Process-wide counters of rare events, updated with atomic adds.
pub struct Global {
    pub segments: AtomicU64,
    pub large_blocks: AtomicU64,
    pub large_bytes: AtomicU64,
    pub large_mapped: AtomicU64,
    pub large_cached: AtomicU64,
    /// The large-block cache's current bound (`large`).
    pub large_cache_limit: AtomicU64,
    /// Large allocations served from the cache.
    pub large_cache_hits: AtomicU64,
    /// Purge passes made by the background purger.
    pub background_purges: AtomicU64,
    /// Background purger threads started.
    pub purger_starts: AtomicU64,
    /// Bytes mapped now for segments and large blocks, kept in one counter
    /// (besides `segments` and `large_mapped`) so that its most is exact.
    pub mapped_now: AtomicU64,
    /// The most bytes mapped at once (`mapped_changed`).
    pub mapped_max: AtomicU64,
    /// The most large blocks live at once, and the most bytes of their
    /// mappings: written under the large-block table's lock.
    pub large_blocks_max: AtomicU64,
    pub large_bytes_max: AtomicU64,
    /// Medium blocks live (`medium`), and the bytes of their spans: written
    /// under the segments' lock.
    pub medium_blocks: AtomicU64,
    pub medium_bytes: AtomicU64,
    /// Sheaf budget the threads took from the process's pool
    /// (`sheaf_budget`), in bytes.
    pub sheaf_budget_taken: AtomicU64,
    /// Zero-size blocks live (`zero`): written under the orphan heap's lock.
    pub zero_size_blocks: AtomicU64,
}

/// Read through `global()`; named by the anchor (`anchor`).
pub static GLOBAL: Global = Global {
    segments: AtomicU64::new(0),
    large_blocks: AtomicU64::new(0),
    large_bytes: AtomicU64::new(0),
    large_mapped: AtomicU64::new(0),
    large_cached: AtomicU64::new(0),
    large_cache_limit: AtomicU64::new(0),
    large_cache_hits: AtomicU64::new(0),
    background_purges: AtomicU64::new(0),
    purger_starts: AtomicU64::new(0),
    mapped_now: AtomicU64::new(0),
    mapped_max: AtomicU64::new(0),
    large_blocks_max: AtomicU64::new(0),
    large_bytes_max: AtomicU64::new(0),
    medium_blocks: AtomicU64::new(0),
    medium_bytes: AtomicU64::new(0),
    sheaf_budget_taken: AtomicU64::new(0),
    zero_size_blocks: AtomicU64::new(0),
};

pub fn global() -> &'static Global {
    &GLOBAL
}

impl Global {
    /// Bytes mapped for segments and large blocks.
    pub fn mapped_bytes(&self) -> u64 {
        // Relaxed: statistics counters, read as a snapshot.
        self.segments.load(Ordering::Relaxed) * size_class::SEGMENT_BYTES as u64
            + self.large_mapped.load(Ordering::Relaxed)
    }

    /// Accounts `delta` bytes mapped (negative: unmapped). Slow paths only,
    /// beside a system call: two locked instructions for a growth.
    pub fn mapped_changed(&self, delta: i64) {
        // Relaxed: statistics. The fetch_add puts every change in one order,
        // so the values it yields are the counter's whole history, and the
        // max of them is exact in whatever order the fetch_max calls land.
        let now = self
            .mapped_now
            .fetch_add(delta as u64, Ordering::Relaxed)
            .wrapping_add(delta as u64);
        if delta > 0 {
            self.mapped_max.fetch_max(now, Ordering::Relaxed);
        }
    }
}

/// Adds `n` (wrapping) to a counter written only under one lock (its
/// writers' own): a relaxed load and store, no locked instruction.
pub fn add_locked(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// Raises a maximum written only under one lock (its writers' own) to `v`:
/// a relaxed load and store, no locked instruction.
pub fn raise(max: &AtomicU64, v: u64) {
    if v > max.load(Ordering::Relaxed) {
        max.store(v, Ordering::Relaxed);
    }
}
