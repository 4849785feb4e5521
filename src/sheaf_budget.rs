//! The sheaves' capacities, sized by demand within byte budgets (as
//! gperftools' thread caches and jemalloc's tcache GC size theirs).
//!
//! - A class that warms up starts with a sheaf of `size_class::SHEAF_START`
//!   blocks (`Heap::warm_up`).
//! - It doubles, up to `SHEAF_CAP`, when the thread overflows it after a
//!   miss (allocations of the class went past its empty sheaf, to the slab
//!   or the barn, since its last overflow), and when the barn fills the
//!   whole of its empty sheaf: the thread reuses what it frees, or
//!   allocates what others free. A thread that only frees what others
//!   allocate never grows its sheaves; its full ones go to the barn.
//! - Capacity beyond the starts is charged in bytes to the thread's
//!   budget: `SHEAF_THREAD_START_BYTES`, grown in `BUDGET_STEP` steps up to
//!   `THREAD_MAX_BYTES` from the process's pool of `POOL_BYTES`. A thread
//!   at its budget grows no further until the scavenger frees some.
//! - Every `SCAVENGE_OVERFLOWS` overflows per class in use, the classes
//!   whose sheaves neither overflowed nor ran empty since the last pass
//!   halve their capacity (not below the start) and flush what no longer
//!   fits, so a class the thread stopped using gives its blocks back
//!   without a purge; steps of budget no longer used go back to the pool.
//! - A thread's exit, and `thread_idle`, give back all of it.
//!
//! All of it runs on the slow paths (`fastpath::free_no_room`, the
//! allocation slow path's fill from the barn), at warm-up, idle and exit:
//! the fast paths only compare a sheaf's length with its capacity.

use crate::counters::{global, Ev};
use crate::heap::{ClassHeap, Heap};
use crate::sheaf::flush_oldest;
use crate::size_class::{CLASS_BYTES, SHEAF_CAP, SHEAF_START, SHEAF_THREAD_START_BYTES};
use crate::sync::{invariant, Ordering};
use crate::tls::own_heap;

/// The most budget one thread holds.
const THREAD_MAX_BYTES: usize = 1 << 20;
/// Budget is taken from the pool and given back in steps of this.
const BUDGET_STEP: usize = 64 << 10;
/// The budget the threads together may take beyond their starts
/// (`counters::Global::sheaf_budget_taken` counts what they took).
const POOL_BYTES: u64 = 32 << 20;
/// Overflows of a thread's sheaves between two scavenges, per class the
/// thread uses (jemalloc's tcache GC visits one bin per pass, so each bin
/// once per so many passes): a thread that cycles through many classes
/// overflows each of them within the window.
const SCAVENGE_OVERFLOWS: u32 = 16;

/// The bytes of `blocks` blocks of `class`.
fn bytes(class: usize, blocks: u32) -> usize {
    blocks as usize * CLASS_BYTES[class] as usize
}

/// The free slow path found `c`, the sheaf of `class` in `heap`, full:
/// before it makes room, the sheaf grows if the thread missed since the
/// last overflow, and every `SCAVENGE_OVERFLOWS` overflows per class in use
/// the sheaves the thread stopped using shrink.
pub fn overflowed(heap: &Heap, c: &ClassHeap, class: usize) {
    let tick = heap.sheaf_overflows.get().wrapping_add(1);
    heap.sheaf_overflows.set(tick);
    c.sheaf_used.set(tick);
    let misses = c.misses();
    if misses != c.sheaf_demand.get() {
        c.sheaf_demand.set(misses);
        grow(heap, class);
    }
    let window = SCAVENGE_OVERFLOWS * heap.warm_classes().count_ones().max(4);
    if tick.wrapping_sub(heap.sheaf_scavenged_at.get()) >= window {
        scavenge(heap);
    }
}

/// An empty sheaf of `class` in `heap` took a whole sheaf's worth from the
/// barn (a miss the barn could fill): it doubles, within the budget, so
/// that a thread that allocates what others free takes more per trip to
/// the barn.
pub fn refilled_whole(heap: &Heap, class: usize) {
    grow(heap, class);
}

/// Doubles `class`'s capacity, up to its most, if the budget allows it
/// (taking budget from the pool as needed). A thread at its budget grows
/// no further until the scavenger frees capacity of its idle classes.
fn grow(heap: &Heap, class: usize) {
    let cap = heap.classes[class].sheaf_cap.get();
    let want = (cap * 2).min(SHEAF_CAP[class]);
    if want == cap {
        return;
    }
    let need = bytes(class, want - cap);
    while heap.sheaf_bytes.get() + need > budget(heap) {
        if !take_budget(heap) {
            return;
        }
    }
    heap.set_sheaf_cap(class, want);
}

/// Takes a step of budget from the pool for `heap`; false if the thread
/// holds its most or the pool is empty.
fn take_budget(heap: &Heap) -> bool {
    if budget(heap) + BUDGET_STEP > THREAD_MAX_BYTES {
        return false;
    }
    // Relaxed: a count; nothing is published through it.
    let step = BUDGET_STEP as u64;
    let taken =
        global()
            .sheaf_budget_taken
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |taken| {
                (taken + step <= POOL_BYTES).then_some(taken + step)
            });
    if taken.is_err() {
        return false;
    }
    heap.sheaf_taken.set(heap.sheaf_taken.get() + BUDGET_STEP);
    true
}

/// Returns the steps of `heap`'s budget that its capacities do not use
/// to the pool.
fn return_unused_budget(heap: &Heap) {
    let mut taken = heap.sheaf_taken.get();
    while taken != 0 && SHEAF_THREAD_START_BYTES + taken - BUDGET_STEP >= heap.sheaf_bytes.get() {
        taken -= BUDGET_STEP;
        // Relaxed: as in `take_budget`.
        global()
            .sheaf_budget_taken
            .fetch_sub(BUDGET_STEP as u64, Ordering::Relaxed);
    }
    heap.sheaf_taken.set(taken);
}

/// What `heap`'s capacities may hold beyond their starts.
fn budget(heap: &Heap) -> usize {
    SHEAF_THREAD_START_BYTES + heap.sheaf_taken.get()
}

/// Sets `class`'s capacity to `cap` (not above it), flushing the oldest
/// blocks that do not fit, counted as scavenged.
fn shrink(heap: &Heap, class: usize, cap: u32) {
    let c = &heap.classes[class];
    invariant!(cap <= c.sheaf_cap.get());
    let len = c.sheaf_len.get();
    if len > cap {
        flush_oldest(heap, c, len - cap);
        c.ev.add(Ev::SheafScavenged, (len - cap) as u64);
    }
    heap.set_sheaf_cap(class, cap);
}

/// Halves the capacity of every class whose sheaf neither overflowed nor
/// ran empty since the last scavenge (not below its start): its length
/// stayed above zero, so some of its blocks were not needed (jemalloc's
/// tcache GC flushes by that low-water mark); gives unused budget back.
fn scavenge(heap: &Heap) {
    let last = heap.sheaf_scavenged_at.get();
    let tick = heap.sheaf_overflows.get();
    for (class, (c, &start)) in heap.classes.iter().zip(&SHEAF_START).enumerate() {
        let cap = c.sheaf_cap.get();
        let idle = tick.wrapping_sub(c.sheaf_used.get()) >= tick.wrapping_sub(last)
            && c.misses() == c.sheaf_demand.get();
        if idle && cap > start {
            shrink(heap, class, (cap / 2).max(start));
        }
    }
    heap.sheaf_scavenged_at.set(tick);
    return_unused_budget(heap);
}

/// The thread goes idle (`thread_idle`) or exits, its sheaves flushed:
/// every warm class's capacity back to its start, or to 0 at exit (`keep`
/// false), and its budget beyond the start back to the pool.
pub fn return_to_pool(heap: &Heap, keep: bool) {
    for (class, (c, &start)) in heap.classes.iter().zip(&SHEAF_START).enumerate() {
        invariant!(c.sheaf_len.get() == 0);
        if c.sheaf_cap.get() != 0 {
            heap.set_sheaf_cap(class, if keep { start } else { 0 });
        }
    }
    return_unused_budget(heap);
    invariant!(heap.sheaf_taken.get() == 0);
}

/// `return_to_pool` for the calling thread, its sheaves flushed, keeping the
/// start capacities (`thread_idle`).
pub fn return_to_pool_current() {
    if let Some(heap) = own_heap() {
        return_to_pool(heap, true);
    }
}
