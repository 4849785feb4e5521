//! The free slow path's entry: a free by a thread that does not own the
//! block's slab (the free fast path's owner compare failed), a sampled
//! block's, a medium block's and every small block's of debug mode among
//! them. The common case, a slab another heap owns, is one push onto its
//! remote list; everything else goes to `free::free_unowned` with the slow
//! paths' heap, created here if the thread has none yet (a thread whose
//! first call is a free gets its heap, and its sheaves, this way).

use crate::counters::Ev;
use crate::debug;
use crate::free::free_unowned;
use crate::freelist::{self, HARDENING};
use crate::heap::{owner_tag, DEAD, EMPTY};
use crate::heap_start::with_slow_heap;
use crate::medium;
use crate::prof::sample;
use crate::side_slabs::SideHeap;
use crate::size_class::NO_SHEAF_OFFSET;
use crate::slab::{self, double_free, Push, Slab, Suspicion};
use crate::tls::current;
use crate::zero;

/// A free by a thread that does not own the slab. The common case, a slab
/// that another heap owns, is one `push_remote`, done here without the
/// slow-heap machinery and with no call that returns, so no registers to
/// save; everything else goes through `free_unowned`. The block comes
/// first, where `free` received it, so that the fast path jumps here
/// without moving it.
#[inline(never)]
pub fn free_slow(p: *mut u8, slab: &Slab) {
    // --- heap profile: a sampled block, in a slab of the profile heap.
    if SideHeap::Profile.owns(slab) {
        return sample::free_sampled(slab, p);
    }
    // ---
    // A medium block, or debug mode's: their slabs send every free here,
    // as the profile's do (`medium`, `debug`); and a zero-size block's,
    // whose class heap is after theirs (`zero`).
    if slab.heap_offset.get() as usize >= NO_SHEAF_OFFSET {
        if zero::names_zero(slab) {
            return zero::free(slab, p);
        }
        if SideHeap::Debug.owns(slab) {
            return debug::free(slab, p);
        }
        if medium::check_block(slab, p) {
            sample::free_big(p);
            return medium::free(slab, p);
        }
    }
    // Read once, before any write into `p`: a push that loses its CAS to a
    // change of state has already written a link into `p`, which a second
    // reading would take for a free block (a double free reported for a
    // correct program, as a slab went LISTED and was taken again meanwhile).
    // SAFETY: `p` lies in a mapped slab; its first word is readable.
    let suspicion = if HARDENING && unsafe { slab::looks_free(p) } {
        Suspicion::DoubleFree
    } else {
        Suspicion::Clear
    };
    // A block that waits in a sheaf is free already.
    // SAFETY: as above.
    if HARDENING && unsafe { slab.in_a_sheaf(freelist::secret(), p) } {
        double_free(p);
    }
    let heap = current();
    if heap != EMPTY
        && heap != DEAD
        && slab.push_remote(p, owner_tag(heap), suspicion) == Push::Pushed
    {
        // SAFETY: a heap that is neither EMPTY nor DEAD is this thread's
        // own; the class is in range.
        unsafe { (*heap).classes.get_unchecked(slab.class.get() as usize) }
            .ev
            .inc(Ev::FreeRemote);
        return;
    }
    free_unowned_slow(slab, p, suspicion)
}

/// `free_unowned` with the slow heap, out of line: `free_slow` reaches it
/// with a jump, so its own path needs no frame.
#[inline(never)]
fn free_unowned_slow(slab: &Slab, p: *mut u8, suspicion: Suspicion) {
    with_slow_heap(|heap| free_unowned(heap, slab, p, suspicion))
}
