//! What goes back before a purge, so that the purge returns its pages too:
//! the blocks that wait in the barns go back to their slabs, and the node
//! lists' empty slabs to their segments (`give_back_before_purge`, the one
//! list of it). Only a caller that holds no allocator lock runs it: the
//! allocation slow path (`refill`) and the background purger
//! (`background`), through `purge_if_due`; the slow paths that may hold a
//! node lock purge without it (`purge::pass::purge_if_due`).

use crate::heap::{orphan_heap, Heap, ORPHAN_LOCK};
use crate::node;
use crate::purge::pass::{self, PurgeBy};
use crate::sheaf::{drain_cpus, flush_barns, CpuDrain};
use crate::tls;

/// The heap whose counters take the barns' blocks flushed before a purge.
pub enum CountedIn<'a> {
    /// The calling thread's heap (the slow paths' heap, `refill`).
    Heap(&'a Heap),
    /// The orphan heap, under its lock: the purger has no heap of its own.
    OrphanHeap,
}

/// Purges now if the deadline has passed, after `give_back_before_purge`;
/// true if this call purged. The caller holds no node lock, nor the
/// segments' or the large blocks' (it may hold the orphan heap's, whose
/// heap `counted` then names).
#[inline]
pub fn purge_if_due(counted: CountedIn, by: PurgeBy) -> bool {
    match pass::claim_due() {
        Some(now) => {
            give_back_before_purge(counted);
            pass::purge_all(now, by);
            true
        }
        None => false,
    }
}

/// Hands back what waits above the segments for a purge to find it free:
/// every barn's blocks to their slabs (counted in `counted`'s heap), then
/// the node lists' empty slabs to their segments.
#[cold]
pub fn give_back_before_purge(counted: CountedIn) {
    match counted {
        CountedIn::Heap(heap) => {
            flush_barns(heap);
            drain_cpus(heap, CpuDrain::Idle);
        }
        CountedIn::OrphanHeap => {
            ORPHAN_LOCK.lock();
            flush_barns(orphan_heap());
            drain_cpus(orphan_heap(), CpuDrain::Idle);
            ORPHAN_LOCK.unlock();
        }
    }
    node::discard_empty_slabs();
}

/// `trim()`: every CPU's sheaves go back to their slabs (per-CPU mode),
/// counted in the calling thread's heap, or in the orphan heap, under its
/// lock, for a thread that has none.
pub fn drain_every_cpu() {
    match tls::own_heap() {
        Some(heap) => drain_cpus(heap, CpuDrain::All),
        None => {
            ORPHAN_LOCK.lock();
            drain_cpus(orphan_heap(), CpuDrain::All);
            ORPHAN_LOCK.unlock();
        }
    }
}
