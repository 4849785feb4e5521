//! The purge pass and the trim, the work the policy (`purge`'s docs) asks
//! for: what goes back, in which order, and what is left for the next
//! deadline. It drives the two places freed memory waits in: the large
//! blocks' cache (`large::purge_cache`) and the segments' free slabs
//! (`segment::purge_slabs`, `segment::trim_slabs`), each purged under its
//! own lock, one after the other. What goes back before a purge that holds
//! no allocator lock (the barns, the node lists' empty slabs) is above it:
//! `purge::give_back`.

use crate::counters;
use crate::large;
use crate::purge::{
    claim_trim, deadline, delay_ns, now_ns, over_trim_bound, schedule, take_due, take_now,
};
use crate::segment;
use crate::sync::Ordering;

/// Free slabs whose pages may be resident, in all segments, below which a
/// slab given back asks for no purge (glibc too trims at free only past a
/// threshold): they serve the next slabs taken, of any class, and go back
/// with the next purge asked for by anything else. Without it a small
/// program that empties a slab would start the background purger, a
/// thread (a fork from a signal handler then hung, `preload_fork_signal`),
/// and would peak higher.
const DIRTY_SLABS_UNPURGED: usize = 16;

/// Who runs a purge: a slow path, in a program that is allocating or
/// freeing, whose heap in use is likely to take its free slabs again; the
/// background purger, which keeps the deadline while the program may make
/// no call at all; or `malloc_trim`, which wants everything back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PurgeBy {
    SlowPath,
    Purger,
    Trim,
}

/// A free slab inside a segment still in use does not go back while the
/// heap moves slabs (one was taken or given back since the last purge
/// pass): a heap in use that frees a part of itself mostly allocates it
/// again, and the time between the free and the reuse grows with the part
/// freed; a purge between them would have the program fault every page in
/// again. Once the heap's slabs stay put, the background purger gives such
/// a slab back one delay after its free (a program that went idle gets its
/// memory back within two delays), a slow path this many delays after it
/// (a program that calls the allocator is still in use); a slab of a
/// segment free whole goes back after one delay either way.
const IN_USE_DELAYS: u64 = 10;

/// What follows a give-back of free slabs to their segments
/// (`segment::free_slab`, `segment::span::free_span`) that left `dirty`
/// dirty free slabs in all segments: a purge asked for past
/// `DIRTY_SLABS_UNPURGED`, run if due, and the trim bound's test. It may
/// run under a node lock.
pub fn slabs_freed(dirty: usize) {
    // After the dirty bit: a purge that claims the deadline takes the
    // segments' lock and sees it.
    if dirty >= DIRTY_SLABS_UNPURGED {
        schedule(now_ns());
    }
    purge_if_due();
    trim_if_over_bound();
}

/// Purges now if the deadline has passed; true if this call purged. For
/// the slow paths that may hold a node lock (a slab or a span back in its
/// segment, a span taken), so the node lists' empty slabs stay listed; the
/// purger and the refill path, which hold none, give them back first
/// (`purge::give_back::purge_if_due`).
#[inline]
pub fn purge_if_due() -> bool {
    match claim_due() {
        Some(now) => {
            purge_all(now, PurgeBy::SlowPath);
            true
        }
        None => false,
    }
}

/// Claims the deadline if it has passed: the time to purge at, and nobody
/// else will. One load while nothing is pending.
#[inline]
pub fn claim_due() -> Option<u64> {
    if deadline() == 0 {
        return None;
    }
    let now = now_ns();
    take_due(now).then_some(now)
}

/// Purges every free slab and unmaps empty segments now (`malloc_trim`).
pub fn purge_now() {
    take_now();
    purge_all(u64::MAX, PurgeBy::Trim);
}

/// The purge the deadline asked for: what was freed a whole delay before
/// `now` goes back (all of it for `u64::MAX`: `malloc_trim`), and, in a
/// purge `by` a slow path, free slabs of segments still in use only
/// `IN_USE_DELAYS` delays before: cached large blocks are unmapped, free
/// slabs madvised, empty segments beyond the few kept unmapped. What was
/// freed later waits for another deadline: a slab freed just before the
/// deadline is likelier to be taken again than not, and a purge would have
/// it faulted in again.
pub fn purge_all(now: u64, by: PurgeBy) {
    let delay = delay_ns();
    let cache_left = large::purge_cache(now.saturating_sub(delay));
    let (cutoff, in_use_cutoff) = cutoffs(now, delay, by, segment::slabs_moved());
    let slabs_left = segment::purge_slabs(cutoff, in_use_cutoff);
    if cache_left || slabs_left {
        // Younger than the delay: look again later.
        schedule(now_ns());
    }
}

/// The free times at or before which a purge at `now` gives back a free
/// slab: of a segment free whole, and of a segment still in use (`moved`:
/// the heap took or gave back a slab since the last purge pass).
fn cutoffs(now: u64, delay: u64, by: PurgeBy, moved: bool) -> (u64, u64) {
    let cutoff = now.saturating_sub(delay);
    match by {
        PurgeBy::SlowPath | PurgeBy::Purger if moved => (cutoff, 0),
        PurgeBy::SlowPath => (
            cutoff,
            now.saturating_sub(delay.saturating_mul(IN_USE_DELAYS)),
        ),
        PurgeBy::Purger | PurgeBy::Trim => (cutoff, cutoff),
    }
}

/// The trim bound's test (`purge`), for the free slow paths that leave
/// freed memory resident: slabs back in their segments (`slabs_freed`), a
/// large block into the cache (`alloc::free_large`). It counts what is free
/// whole: the resident pages of segments whose slabs are all free (of every
/// free slab, if the heap is mostly free), and the cached large blocks.
/// Past the bound those go back now (`trim`); free slabs in segments still
/// in use wait for the purge delay. Cost under the bound: three loads and
/// a compare, no system call.
#[inline]
pub fn trim_if_over_bound() {
    // Relaxed: a hint; `claim_trim` decides, the purge's locks order it.
    let freed_whole =
        segment::trimmable_bytes() + counters::global().large_cached.load(Ordering::Relaxed);
    if over_trim_bound(freed_whole) {
        trim(freed_whole);
    }
}

/// Gives back what is free whole: the cached large blocks are unmapped,
/// and so are the segments whose slabs are all free (but the few kept,
/// purged); every free slab is purged if the heap is mostly free.
#[cold]
#[inline(never)]
fn trim(freed_whole: u64) {
    if claim_trim(freed_whole) {
        large::purge_cache(u64::MAX);
        segment::trim_slabs();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// No purge but a trim gives back a free slab of a segment in use while
    /// the heap takes slabs; once it takes none, a slow path's purge leaves
    /// such a slab for `IN_USE_DELAYS` delays, the purger's for one.
    #[test]
    fn a_purge_leaves_the_free_slabs_of_a_heap_that_takes_slabs() {
        let delay = 100;
        for taken in [false, true] {
            assert_eq!(cutoffs(10_000, delay, PurgeBy::Trim, taken), (9_900, 9_900));
        }
        assert_eq!(
            cutoffs(10_000, delay, PurgeBy::Purger, false),
            (9_900, 9_900)
        );
        assert_eq!(cutoffs(10_000, delay, PurgeBy::Purger, true), (9_900, 0));
        assert_eq!(
            cutoffs(10_000, delay, PurgeBy::SlowPath, false),
            (9_900, 9_000)
        );
        assert_eq!(cutoffs(10_000, delay, PurgeBy::SlowPath, true), (9_900, 0));
        let far = cutoffs(u64::MAX, delay, PurgeBy::SlowPath, false);
        assert_eq!(far.1, u64::MAX - 1000);
        assert_eq!(cutoffs(50, delay, PurgeBy::SlowPath, false), (0, 0));
    }
}
