//! Sheaves: per thread and warm class, a bounded stack of blocks the thread
//! freed, from any slab, whoever owns it, in front of the active slab
//! (Linux's percpu sheaves, SLUB's default since 7.0), and their slow
//! paths' operations: the room a full sheaf makes (to the barn, or its
//! older half back to the slabs), an empty sheaf filled from the barn, the
//! flush of a sheaf or a barn back to the blocks' slabs, and the checks of
//! blocks leaving a sheaf. The sheaf itself, its invariants, its gate and
//! the fast paths' push and pop, is `sheaf_state::Sheaf`
//! (`ClassHeap::sheaf`); how many blocks it may hold is `sheaf_budget`'s.
//!
//! A free into a sheaf reads nothing of the block: it writes the block's
//! tag into its second word (`freelist::sheaf_tag`) and compares the block
//! with the sheaf's top (a block freed twice in a row). Every way out of a
//! sheaf checks the block (`freelist::take_sheaf_block`): a block whose
//! tag is gone was freed twice and the other copy has left a sheaf (or the
//! program wrote it after freeing it); a block with a free-list link in its
//! first word was on a slab's free list when it was freed again. Either
//! stops the process before the block is handed out twice: a pop checks
//! before it hands the block out, a flush before the slab takes it, and
//! what is left in sheaves is checked when the thread exits (the flush) or
//! the process does (`check_at_exit`).
//!
//! Where a block of a slab can be, and who moves it on (the sheaf's
//! operations, in this file and `Sheaf`'s, are the rows that name one):
//!
//! | state | held in | moved on by |
//! |---|---|---|
//! | uncarved | its slab past `Slab::carved` | the owner's refill carves it onto the detached list |
//! | on the detached list | `ClassHeap::detached` (the owner's active slab) | the allocation fast path hands it out; giving the slab up puts the list back on the slab |
//! | on a slab's local list | `Slab::local_free` | the owner's refill (onto the detached list), a listed slab's allocation under the node lock |
//! | on a slab's remote list | the slab's state word | the owner takes the whole list onto the local one |
//! | handed out | the program | a free: onto the thread's sheaf (`fastpath::free`, with `Sheaf::push`), or into its slab (`fastpath::free_to_slab`, `remote_free::free_slow`) |
//! | in a sheaf | `Sheaf::blocks` of its class heap, its tag in its second word | `Sheaf::pop` hands it out; `flush_oldest` makes it part of a flush run; `make_room` puts a full sheaf whole into the barn; a shrunk capacity flushes the oldest (`sheaf_budget`) |
//! | in a barn | `barn::BARNS[class]`, under its lock | an empty sheaf takes it (`fill_from_barn`); `flush_barns` makes it part of a flush run |
//! | in a flush run | `flush_blocks`' runs of one slab, checked | linked onto its slab's local list (the owner) or remote list (anyone else) |
//! | a debug-mode block | a slab the orphan heap keeps off the sheaves, poisoned while free | `debug::alloc` and `debug::free` alone: no sheaf holds it |
//!
//! A class heap takes a sheaf only while its gate is open
//! (`sheaf_state::Sheaf`): a warm class of a thread's heap.

use core::cell::Cell;
use core::ptr;

use crate::barn;
use crate::counters::Ev;
use crate::cpu_sheaf;
use crate::free::{free_owned_run, free_unowned_run};
use crate::freelist::{self, set_sheaf_tag, take_sheaf_block, HARDENING};
use crate::heap::{ClassHeap, Heap};
use crate::purge;
use crate::segment::{self, slab_of};
use crate::sheaf_state::check;
use crate::size_class::{NUM_CLASSES, SHEAF_CAP, SHEAF_MAX};
use crate::sync::{invariant, LockWait, Ordering};
use crate::tls::{current, own_heap};

// ---------------------------------------------------------------------------
// A full sheaf, an empty one

/// Makes room in `c`, the full sheaf of `class` in `heap` (a thread's
/// own): the whole sheaf into the class's barn, for another thread whose
/// sheaf runs empty, if its oldest block is of a slab another heap owns:
/// blocks another thread allocated (those of the thread's own slabs go
/// back with one splice, those of slabs no heap owns, FULL or listed, are
/// a single thread's past: a single-threaded program has nobody to serve);
/// else, or the barn full, the older half back to the slabs.
pub fn make_room(heap: &Heap, c: &ClassHeap, class: usize) {
    let sheaf = c.sheaf();
    let cap = sheaf.cap();
    invariant!(cap != 0 && sheaf.len() == cap);
    // SAFETY: a block the full sheaf holds, in one of our segments.
    // Relaxed: a hint of where the sheaf goes; nothing is read through it.
    let owner = unsafe { &*slab_of(sheaf.top(1)) }
        .owner
        .load(Ordering::Relaxed);
    let me = heap as *const Heap as usize;
    if cpu_sheaf::on() && to_cpu(c, class, cap.div_ceil(2)) != 0 {
        return;
    }
    if purge::program_has_other_threads()
        && owner != 0
        && owner != me
        && barn::BARNS[class].put(sheaf.blocks(), SHEAF_CAP[class] as usize)
    {
        sheaf.drop_oldest(cap);
        c.ev.add(Ev::SheafToBarn, cap as u64);
        // The next purge flushes the barns, so that what waits there goes
        // back to its slabs once the class goes quiet.
        purge::schedule(purge::now_ns());
    } else {
        flush_oldest(heap, c, cap.div_ceil(2));
    }
}

/// Moves up to the `n` oldest blocks of `c`'s sheaf (of `class`) onto
/// this CPU's sheaf of the class (per-CPU mode): how many.
pub fn to_cpu(c: &ClassHeap, class: usize, n: u32) -> u32 {
    let sheaf = c.sheaf();
    let k = cpu_sheaf::push(class, sheaf.oldest(n), &c.ev);
    if k != 0 {
        sheaf.drop_oldest(k);
        c.ev.add(Ev::SheafToCpu, k as u64);
    }
    k
}

/// Fills the empty sheaf of `class` in `heap`, a thread's own, from this
/// CPU's sheaf of the class (per-CPU mode), before the barn: the blocks it
/// took, 0 if the class has no sheaf, the sheaf is not empty, the heap is
/// the orphan one, or the CPU's sheaf is empty or stopped.
pub fn fill_from_cpu(heap: &Heap, class: usize) -> u32 {
    let c = &heap.classes[class];
    let sheaf = c.sheaf();
    if !cpu_sheaf::on() || !sheaf.is_open() || sheaf.len() != 0 || !ptr::eq(heap, current()) {
        return 0;
    }
    let n = cpu_sheaf::pop(class, sheaf.room());
    if n != 0 {
        sheaf.filled(n);
        c.ev.add(Ev::CpuToSheaf, n as u64);
    }
    n
}

/// A thread exits (per-CPU mode): each of its sheaves moves onto this
/// CPU's sheaves, as much as fits, for the next thread that runs there;
/// `flush_all` flushes the rest.
pub fn move_to_cpu(heap: &Heap) {
    if !cpu_sheaf::on() {
        return;
    }
    for (class, c) in heap.classes.iter().enumerate() {
        if !heap.is_warm(class) {
            continue;
        }
        // In batches of at most a sheaf's most, the oldest first.
        while c.sheaf().len() != 0 && to_cpu(c, class, c.sheaf().len()) != 0 {}
    }
}

/// Fills the empty sheaf of `class` in `heap`, a thread's own, from the
/// class's barn (a full sheaf another thread put there), before the
/// allocation slow path carves the active slab further: the blocks it took,
/// 0 if the class has no sheaf, the sheaf is not empty (the sampler came
/// here), the heap is the orphan one, or the barn is empty. It takes no
/// more than the sheaf's capacity; the rest stays on the barn's shelf.
pub fn fill_from_barn(heap: &Heap, class: usize) -> u32 {
    let c = &heap.classes[class];
    let sheaf = c.sheaf();
    if !sheaf.is_open() || sheaf.len() != 0 || !ptr::eq(heap, current()) {
        return 0;
    }
    let n = barn::BARNS[class].take(sheaf.room());
    if n != 0 {
        sheaf.filled(n);
        c.ev.add(Ev::SheafFromBarn, n as u64);
    }
    n
}

// ---------------------------------------------------------------------------
// Sheaves and barns flushed back to their slabs

/// Hands the `n` oldest blocks of `c`'s sheaf (the bottom ones: the top
/// ones are the likeliest in cache) back to their slabs, each checked, and
/// moves the rest down. Blocks of one slab one after another go back as a
/// run: into the thread's own slab with one splice, into a slab another
/// heap owns with one CAS (`push_remote_run`), which a thread that frees
/// what another allocated in order (a consumer) makes long, into a listed
/// slab with one splice under its node lock; else (a FULL slab) each by
/// the free into its slab.
pub fn flush_oldest(heap: &Heap, c: &ClassHeap, n: u32) {
    let sheaf = c.sheaf();
    flush_blocks(heap, sheaf.oldest(n));
    sheaf.drop_oldest(n);
    c.ev.add(Ev::SheafFlushed, n as u64);
}

/// Hands `blocks`, out of a sheaf or a barn, back to their slabs, each
/// checked, in runs of one slab (`flush_run`), counted in `heap`. One pass:
/// each block is checked and linked to the one before it in its run, so
/// that its line is read and written once (`big_heap`'s free phase, where
/// every block goes this way, took more instructions in two passes).
fn flush_blocks(heap: &Heap, blocks: &[Cell<*mut u8>]) {
    // The process's secret, not the heap's copy: the orphan heap, which
    // flushes the barns for the purger, has none.
    let secret = freelist::secret();
    let mut i = 0;
    while i < blocks.len() {
        let head = blocks[i].get();
        let mut tail = head;
        let mut end = i;
        loop {
            let q = blocks[end].get();
            if HARDENING {
                // SAFETY: `q` is a block a sheaf held.
                check(unsafe { take_sheaf_block(secret, q) }, q);
            }
            if end != i {
                // SAFETY: `tail` and `q`, checked, are blocks of one slab
                // that the caller gives up.
                unsafe { freelist::set_next_with(secret, tail, q) };
                tail = q;
            }
            end += 1;
            if end == blocks.len()
                || (blocks[end].get() as usize ^ head as usize) >= segment::SLAB_BYTES
            {
                break;
            }
        }
        flush_run(heap, &blocks[i..end]);
        i = end;
    }
}

/// Frees `run`, checked blocks of one slab out of a sheaf, linked first to
/// last already, into their slab: by its owner (`free::free_owned_run`),
/// else through the unowned free of a run (`free::free_unowned_run`):
/// pushed onto its remote list in one CAS, spliced onto a LISTED slab's
/// local list under its node lock, or (a FULL slab) each block alone.
/// Counted as the slab-level frees they are.
fn flush_run(heap: &Heap, run: &[Cell<*mut u8>]) {
    let (head, tail) = (run[0].get(), run[run.len() - 1].get());
    // SAFETY: `head` is a block of one of our segments (a sheaf took it).
    let slab = unsafe { &*segment::slab_of(head) };
    let me = heap as *const Heap as usize;
    // Acquire: pairs with `give_back`'s Release, as the fast path's does.
    if slab.owner.load(Ordering::Acquire) == me {
        return free_owned_run(heap, slab, head, tail, run.len() as u32);
    }
    free_unowned_run(heap, slab, run);
}

/// Flushes the whole sheaf of `c`, a class heap of `heap`.
pub fn flush_class(heap: &Heap, c: &ClassHeap) {
    flush_oldest(heap, c, c.sheaf().len());
}

/// Flushes every sheaf of `heap` (the thread exits, or trims).
pub fn flush_all(heap: &Heap) {
    for (class, c) in heap.classes.iter().enumerate() {
        if heap.is_warm(class) {
            flush_class(heap, c);
        }
    }
}

/// Hands every barn's blocks back to their slabs, counted in `heap` (a
/// thread's, or the orphan heap for the purger): trim, and every purge (so
/// that a barn holds blocks for one purge delay at most once its class goes
/// quiet).
pub fn flush_barns(heap: &Heap) {
    let sheaf = [const { Cell::new(ptr::null_mut()) }; SHEAF_MAX];
    for (class, c) in heap.classes.iter().enumerate() {
        loop {
            let n = barn::BARNS[class].take(&sheaf) as usize;
            if n == 0 {
                break;
            }
            c.ev.add(Ev::SheafFromBarn, n as u64);
            flush_blocks(heap, &sheaf[..n]);
            c.ev.add(Ev::SheafFlushed, n as u64);
        }
    }
}

/// Which CPUs' sheaves `drain_cpus` drains.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CpuDrain {
    /// Every CPU's (`trim`).
    All,
    /// Those that hold blocks and did not change since the last purge
    /// asked (`cpu_sheaf::idle`).
    Idle,
}

/// Hands the blocks of CPUs' sheaves back to their slabs, each CPU stopped
/// while it is drained, counted in `heap` (a thread's, or the orphan heap
/// under its lock), and drops their capacities: `trim`, and every purge
/// for the CPUs that went idle.
pub fn drain_cpus(heap: &Heap, which: CpuDrain) {
    if !cpu_sheaf::on() {
        return;
    }
    for cpu in cpu_sheaf::cpus() {
        if which == CpuDrain::Idle && !cpu_sheaf::idle(cpu) {
            continue;
        }
        let Some(stopped) = cpu_sheaf::stop(cpu, LockWait::Wait) else {
            continue;
        };
        for (class, c) in heap.classes.iter().enumerate() {
            let blocks = stopped.blocks(class);
            let n = blocks.len() as u64;
            if n != 0 {
                flush_blocks(heap, blocks);
                c.ev.add(Ev::CpuFlushed, n);
                c.ev.add(Ev::SheafFlushed, n);
            }
            stopped.empty(class, &c.ev);
        }
    }
}

// ---------------------------------------------------------------------------
// At exit

/// At exit (a `.fini_array` entry): the blocks left in the exiting
/// thread's sheaves are checked as a flush would check them, so that a
/// double free that no pop or flush met still stops the process. The tags
/// are put back after: destructors that run later may still allocate.
extern "C" fn check_at_exit() {
    if !HARDENING {
        return;
    }
    check_cpus_at_exit();
    let Some(heap) = own_heap() else {
        return;
    };
    let secret = heap.secret.get();
    for (class, c) in heap.classes.iter().enumerate() {
        if !heap.is_warm(class) {
            continue;
        }
        let blocks = c.sheaf().blocks();
        for b in blocks {
            // SAFETY: a block the sheaf holds.
            check(unsafe { take_sheaf_block(secret, b.get()) }, b.get());
        }
        for b in blocks {
            // SAFETY: as above; its tag was there.
            unsafe { set_sheaf_tag(secret, b.get()) };
        }
    }
}

/// At exit, per-CPU mode: the blocks in the CPUs' sheaves checked as
/// `check_at_exit` checks a thread's, each CPU stopped meanwhile.
fn check_cpus_at_exit() {
    if !cpu_sheaf::on() {
        return;
    }
    let secret = freelist::secret();
    for cpu in cpu_sheaf::cpus() {
        let Some(stopped) = cpu_sheaf::stop(cpu, LockWait::Try) else {
            continue;
        };
        for class in 0..NUM_CLASSES {
            let blocks = stopped.blocks(class);
            for b in blocks {
                // SAFETY: a block the stopped CPU's sheaf holds.
                check(unsafe { take_sheaf_block(secret, b.get()) }, b.get());
            }
            for b in blocks {
                // SAFETY: as above; its tag was there.
                unsafe { set_sheaf_tag(secret, b.get()) };
            }
        }
    }
}

#[used]
#[link_section = ".fini_array"]
static CHECK_AT_EXIT: extern "C" fn() = check_at_exit;
