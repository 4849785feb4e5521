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
//!   budget: `SHEAF_THREAD_START_BYTES`, grown in steps up to a most per
//!   thread from the process's pool (the account, `Heap::sheaf_budget`, is
//!   `sheaf_state::SheafBudget`). A thread at its budget grows no further
//!   until the scavenger frees some.
//! - Every `SCAVENGE_OVERFLOWS` overflows per class in use, the classes
//!   whose sheaves neither overflowed nor ran empty since the last pass
//!   halve their capacity (not below the start) and flush what no longer
//!   fits, so a class the thread stopped using gives its blocks back
//!   without a purge; steps of budget no longer used return to the pool.
//! - A thread's exit, and `thread_idle`, return all of it.
//! - In per-CPU mode none of the above: a sheaf holds the class's most
//!   while the program has up to 4 threads per CPU, less beyond
//!   (`per_cpu_capacity`, by `cpu_sheaf::crowding`), set at its overflows.
//!
//! All of it runs on the slow paths (`fastpath::free_no_room`, the
//! allocation slow path's fill from the barn), at warm-up, idle and exit:
//! the fast paths only compare a sheaf's length with its capacity.

use crate::counters::Ev;
use crate::cpu_sheaf;
use crate::heap::{ClassHeap, Heap, ThreadGoes};
use crate::sheaf::{flush_oldest, to_cpu};
use crate::sheaf_state::start_capacity;
use crate::size_class::{CLASS_BYTES, SHEAF_BYTES, SHEAF_CAP};
use crate::sync::invariant;

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
    if cpu_sheaf::on() {
        follow_threads(heap, c, class);
    }
    let tick = heap.sheaf_budget.overflow();
    if c.sheaf().overflowed(tick, c.misses()) {
        grow(heap, class);
    }
    let window = SCAVENGE_OVERFLOWS * heap.warm_classes().count_ones().max(4);
    if tick.wrapping_sub(heap.sheaf_budget.scavenged_at()) >= window {
        scavenge(heap);
    }
}

/// The most times a sheaf's bytes halve as the threads per CPU double:
/// down to 2 KiB of blocks (two at least).
const MOST_HALVINGS: u32 = 3;

/// The capacity of a thread's sheaf of `class` in per-CPU mode: the
/// class's most (`SHEAF_CAP`, 16 KiB at most) while the program is not
/// crowded (`cpu_sheaf::crowding`: up to 4 threads per CPU), halved for
/// each doubling of the threads per CPU beyond (at most `MOST_HALVINGS`
/// times), two blocks at least. The threads that wait for a CPU hold their
/// sheaves; the CPUs' sheaves are where the capacity of a program with
/// many more threads than CPUs goes. `crowding`'s loads and compare
/// uncrowded; two divisions beyond.
fn per_cpu_capacity(class: usize) -> u32 {
    let halvings = cpu_sheaf::crowding().min(MOST_HALVINGS);
    if halvings == 0 {
        return SHEAF_CAP[class];
    }
    let blocks = (SHEAF_BYTES >> halvings) / CLASS_BYTES[class] as usize;
    (blocks as u32).max(2).min(SHEAF_CAP[class])
}

/// Per-CPU mode, `c`'s sheaf of `class` full: its capacity follows the
/// threads per CPU (`per_cpu_capacity`). Shrunk, the oldest blocks go to
/// the CPU's sheaf (to their slabs if it has no room) and half the new
/// capacity stays; grown, the sheaf has room for the free.
fn follow_threads(heap: &Heap, c: &ClassHeap, class: usize) {
    let want = per_cpu_capacity(class);
    let sheaf = c.sheaf();
    let cap = sheaf.cap();
    invariant!(sheaf.len() == cap);
    if want > cap {
        resize(heap, class, want);
    } else if want < cap {
        to_cpu(c, class, cap - want / 2);
        shrink(heap, class, want);
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
    // Per-CPU mode: the threads' sheaves follow the threads per CPU
    // (`per_cpu_capacity`); capacity grows per CPU (`cpu_sheaf`).
    if cpu_sheaf::on() {
        return;
    }
    let cap = heap.classes[class].sheaf().cap();
    let want = (cap * 2).min(SHEAF_CAP[class]);
    if want != cap && heap.sheaf_budget.fits(bytes(class, want - cap)) {
        resize(heap, class, want);
    }
}

/// Sets the capacity of `class`'s open sheaf to `cap` (its blocks fit),
/// charged to the heap's account.
fn resize(heap: &Heap, class: usize, cap: u32) {
    let c = &heap.classes[class];
    let old = c.sheaf().cap();
    c.sheaf().resize(cap);
    heap.sheaf_budget.charge(class, old, cap, &c.ev);
}

/// Sets `class`'s capacity to `cap` (not above it), flushing the oldest
/// blocks that do not fit, counted as scavenged.
fn shrink(heap: &Heap, class: usize, cap: u32) {
    let c = &heap.classes[class];
    invariant!(cap <= c.sheaf().cap());
    let len = c.sheaf().len();
    if len > cap {
        flush_oldest(heap, c, len - cap);
        c.ev.add(Ev::SheafScavenged, (len - cap) as u64);
    }
    resize(heap, class, cap);
}

/// Halves the capacity of every class whose sheaf neither overflowed nor
/// ran empty since the last scavenge (not below its start): its length
/// stayed above zero, so some of its blocks were not needed (jemalloc's
/// tcache GC flushes by that low-water mark); returns unused budget to the
/// pool.
fn scavenge(heap: &Heap) {
    let last = heap.sheaf_budget.scavenged_at();
    let tick = heap.sheaf_budget.overflows();
    for (class, c) in heap.classes.iter().enumerate() {
        let start = start_capacity(class);
        let sheaf = c.sheaf();
        let cap = sheaf.cap();
        if cap > start && sheaf.idle_since(last, tick, c.misses()) {
            shrink(heap, class, (cap / 2).max(start));
        }
    }
    heap.sheaf_budget.scavenged(tick);
    heap.sheaf_budget.return_unused();
}

/// The thread goes idle (`thread_idle`) or exits, its sheaves flushed:
/// every open sheaf's capacity back to its start, or its gate closed at
/// exit, and its budget beyond the start returned to the pool.
pub fn return_to_pool(heap: &Heap, goes: ThreadGoes) {
    for (class, c) in heap.classes.iter().enumerate() {
        let start = start_capacity(class);
        let sheaf = c.sheaf();
        invariant!(sheaf.len() == 0);
        if !sheaf.is_open() {
            continue;
        }
        if goes == ThreadGoes::Idle {
            resize(heap, class, start);
        } else {
            let old = sheaf.cap();
            sheaf.close();
            heap.sheaf_budget.charge(class, old, 0, &c.ev);
        }
    }
    heap.sheaf_budget.return_unused();
    invariant!(heap.sheaf_budget.taken() == 0);
}
