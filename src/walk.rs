//! The verification walk: recounts, by visiting every heap, node list and
//! slab, what the statistics keep incrementally. It exists to prove the
//! counters exact (`tests/global_allocator/stats_exact.rs`); it is O(slabs) and takes locks.
//! Other threads must not allocate or free while it runs; the background
//! purger may still give the node lists' empty slabs back to their segments
//! when a purge is due, so a comparison with the statistics holds for a
//! walk during which they did not change (`check_stats`); its flush of the
//! barns waits for the walk (the orphan heap's lock).

use crate::barn;
use crate::cpu_sheaf;
use crate::freelist;
use crate::heap;
use crate::large;
use crate::node::NODES;
use crate::os;
use crate::segment;
use crate::side_slabs::SideHeap;
use crate::size_class::{NO_SHEAF_OFFSET, NUM_CLASSES};
use crate::slab::{self, State};
use crate::stats;
use crate::sync::Ordering;
use crate::sys;
use crate::zero;

/// What the walk found for one size class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkedCache {
    /// Objects neither free on a list nor uncarved, nor in a sheaf.
    pub objects_in_use: u64,
    /// Objects in threads' sheaves.
    pub sheaf_objects: u64,
    /// Objects in the class's barn.
    pub barn_objects: u64,
    /// Objects in the CPUs' sheaves.
    pub cpu_objects: u64,
    /// Slabs in use in the segments.
    pub slabs: u64,
    /// Threads' active slabs.
    pub active_slabs: u64,
    /// Slabs on threads' partial lists.
    pub thread_partial_slabs: u64,
    /// Slabs on threads' `returned` stacks.
    pub returned_slabs: u64,
    /// FULL slabs, and side heaps' slabs with no free block.
    pub full_slabs: u64,
    /// Slabs on the node list.
    pub node_partial_slabs: u64,
    /// Free objects (listed and uncarved) on node-listed slabs.
    pub partial_free_objects: u64,
    /// Listed slabs whose `inuse` disagrees with their free list (must be 0).
    pub inuse_mismatches: u64,
}

/// What the walk found, per class and in all.
#[derive(Clone, Debug)]
pub struct Walk {
    /// One entry per size class, smallest first.
    pub caches: [WalkedCache; NUM_CLASSES],
    /// Live large blocks in the large-block table.
    pub large_blocks: u64,
    /// Live medium blocks in the segments.
    pub medium_blocks: u64,
    /// Bytes of their spans.
    pub medium_bytes: u64,
    /// Live zero-size blocks in their slabs.
    pub zero_size_blocks: u64,
}

/// Walks everything. See the module comment for when it may be called.
pub fn walk() -> Walk {
    // The heap profile's slabs are listed as a thread heap's partial slabs
    // (the orphan heap's are counted with the heaps): counted first, under
    // the profile's lock, which is never held with the orphan heap's.
    let mut heaps = heap::WalkedHeaps {
        detached: [0; NUM_CLASSES],
        thread_partial: [0; NUM_CLASSES],
        sheaves: [0; NUM_CLASSES],
        active: [0; NUM_CLASSES],
        returned: [0; NUM_CLASSES],
    };
    SideHeap::Profile.count_listed(&mut heaps.thread_partial);
    // The background purger flushes the barns through the orphan heap under
    // this lock: a walk between its take of a sheaf from a barn and the
    // sheaf's last block on its slab would count that block neither in the
    // barn nor free (the statistics, taken before and after, would not show
    // it). Taken first: it comes before the node locks.
    let _purger = heap::ORPHAN_LOCK.guard();
    let mut caches = [WalkedCache::default(); NUM_CLASSES];
    heap::walk_heaps(&mut heaps);
    for (class, node) in NODES.iter().enumerate() {
        let _g = node.lock.guard();
        let w = &mut caches[class];
        w.active_slabs = heaps.active[class];
        w.thread_partial_slabs = heaps.thread_partial[class];
        w.returned_slabs = heaps.returned[class];
        node.for_each(|s| {
            w.node_partial_slabs += 1;
            let free = freelist::list_len(s.local_free.get(), s.objects.get()) + s.uncarved();
            w.partial_free_objects += free as u64;
            if s.inuse.get() != s.objects.get() - free {
                w.inuse_mismatches += 1;
            }
        });
    }
    let mut free_on_slabs = [0u64; NUM_CLASSES];
    let mut zero_size_blocks = 0;
    segment::for_each_slab(|s| {
        // Zero-size blocks and their slabs count in no class (`zero`).
        if zero::owns(s) {
            zero_size_blocks += zero::live_blocks(s);
            return;
        }
        let class = s.class.get() as usize;
        let bound = s.objects.get();
        let remote = slab::remote_list(s.word.0.load(Ordering::Acquire));
        let free = freelist::list_len(s.local_free.get(), bound)
            + freelist::list_len(remote, bound)
            + s.uncarved();
        caches[class].slabs += 1;
        caches[class].full_slabs += (s.state() == State::Full || is_side_full(s)) as u64;
        caches[class].objects_in_use += bound as u64;
        free_on_slabs[class] += free as u64;
    });
    for class in 0..NUM_CLASSES {
        let barn = barn::BARNS[class].blocks();
        let cpu = cpu_sheaf::held(class);
        // Wrapping: a walk that another thread's free crosses can count a
        // block twice (in its sheaf, then in the barn the full sheaf went
        // to); only a walk the statistics did not move across is compared
        // (`check_stats`), and no walk may panic.
        caches[class].objects_in_use = caches[class].objects_in_use.wrapping_sub(
            free_on_slabs[class] + heaps.detached[class] + heaps.sheaves[class] + barn + cpu,
        );
        caches[class].sheaf_objects = heaps.sheaves[class];
        caches[class].barn_objects = barn;
        caches[class].cpu_objects = cpu;
    }
    let (medium_blocks, medium_bytes) = segment::walk_spans();
    Walk {
        caches,
        large_blocks: large::walk_count(),
        medium_blocks,
        medium_bytes,
        zero_size_blocks,
    }
}

/// Whether `s` is a side heap's slab with no free block, on no list
/// (`side_slabs`): counted with the FULL slabs.
fn is_side_full(s: &slab::Slab) -> bool {
    s.state() == State::Owned
        && s.heap_offset.get() as usize == NO_SHEAF_OFFSET
        && !s.on_partial.get()
        && (SideHeap::Debug.owns(s) || SideHeap::Profile.owns(s))
}

/// Compares `walk()` with `stats()` class by class; writes each mismatch to
/// stderr and returns how many classes disagree (0: the counters are exact).
/// Other threads should be quiescent; so that a thread that allocates now
/// and then (a test harness printing) cannot cause a false mismatch, the
/// comparison is made on a walk during which the counters did not change,
/// retried up to a thousand times.
pub fn check_stats() -> usize {
    for _ in 0..1000 {
        let before = stats::stats();
        let w = walk();
        let after = stats::stats();
        if before.caches().eq(after.caches())
            && before.totals.large_blocks == after.totals.large_blocks
            && before.totals.medium_bytes == after.totals.medium_bytes
            && before.totals.zero_size_blocks == after.totals.zero_size_blocks
        {
            return report_mismatches(&before, &w);
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { sys::sched_yield() };
    }
    report_mismatches(&stats::stats(), &walk())
}

fn report_mismatches(s: &stats::Stats, w: &Walk) -> usize {
    use core::fmt::Write;
    let mut bad = 0;
    for (c, got) in s.caches().zip(w.caches.iter()) {
        let kept = WalkedCache {
            objects_in_use: c.objects_in_use,
            sheaf_objects: c.sheaf_objects,
            barn_objects: c.barn_objects,
            cpu_objects: c.cpu_objects,
            slabs: c.slabs,
            active_slabs: c.active_slabs,
            thread_partial_slabs: c.thread_partial_slabs,
            returned_slabs: c.returned_slabs,
            full_slabs: c.full_slabs,
            node_partial_slabs: c.node_partial_slabs,
            partial_free_objects: c.partial_free_objects,
            inuse_mismatches: 0,
        };
        if kept != *got {
            bad += 1;
            let mut out = os::FdWriter::new(2);
            let _ = writeln!(
                out,
                "slubmalloc: class {} B: counters {:?} but walk {:?}",
                c.object_size, kept, got
            );
        }
    }
    bad += count_mismatch("large blocks", s.totals.large_blocks, w.large_blocks);
    if (s.totals.medium_blocks, s.totals.medium_bytes) != (w.medium_blocks, w.medium_bytes) {
        bad += 1;
        let mut out = os::FdWriter::new(2);
        let _ = writeln!(
            out,
            "slubmalloc: medium blocks: counters {} ({} B) but walk {} ({} B)",
            s.totals.medium_blocks, s.totals.medium_bytes, w.medium_blocks, w.medium_bytes
        );
    }
    bad += count_mismatch(
        "zero-size blocks",
        s.totals.zero_size_blocks,
        w.zero_size_blocks,
    );
    bad
}

/// Writes the mismatch of a count the totals keep and the walk recounts to
/// stderr; 1 if they differ, else 0.
fn count_mismatch(what: &str, kept: u64, walked: u64) -> usize {
    use core::fmt::Write;
    if kept == walked {
        return 0;
    }
    let mut out = os::FdWriter::new(2);
    let _ = writeln!(out, "slubmalloc: {what}: counters {kept} but walk {walked}");
    1
}
