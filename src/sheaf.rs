//! Sheaves: per thread and warm class, a bounded stack of blocks the thread
//! freed, from any slab, whoever owns it, in front of the active slab
//! (Linux's percpu sheaves, SLUB's default since 7.0). The fast paths push
//! and pop it (`fastpath`); a full sheaf's flush back to the blocks' slabs
//! is the free slow path's (`free::flush_oldest`, also at thread exit and
//! trim); this is the check of a block leaving a sheaf, and of the blocks
//! left in sheaves when the process exits.
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
//! operations are the rows that name one):
//!
//! | state | held in | moved on by |
//! |---|---|---|
//! | uncarved | its slab past `Slab::carved` | the owner's refill carves it onto the detached list |
//! | on the detached list | `ClassHeap::detached` (the owner's active slab) | the allocation fast path hands it out; giving the slab up puts the list back on the slab |
//! | on a slab's local list | `Slab::local_free` | the owner's refill (onto the detached list), a listed slab's allocation under the node lock |
//! | on a slab's remote list | the slab's state word | the owner takes the whole list onto the local one |
//! | handed out | the program | a free: onto the thread's sheaf (`fastpath::free`), or into its slab (`fastpath::free_to_slab`, `remote_free::free_slow`) |
//! | in a sheaf | `ClassHeap::sheaf[1..=sheaf_len]`, its tag in its second word | `pop` hands it out; `free::flush_oldest` makes it part of a flush run; a full sheaf goes whole to the barn (`fastpath::free_no_room`); a shrunk capacity flushes the oldest (`sheaf_budget`) |
//! | in a barn | `barn::BARNS[class]`, under its lock | an empty sheaf takes it (`refill::take_from_barn`); `free::flush_barns` makes it part of a flush run |
//! | in a flush run | `free::flush_blocks`' runs of one slab, checked | linked onto its slab's local list (the owner) or remote list (anyone else) |
//!
//! A sheaf's capacity (`ClassHeap::sheaf_cap`) is 0 when its class heap
//! has no sheaf: a class cold in the thread (its blocks come from shared
//! slabs), a static heap (before the thread's heap exists, and after its
//! exit), and the class heap of the slabs of the heap profile, of medium
//! blocks and of debug mode (`heap::Heap::no_sheaf`); in debug mode no
//! class of a thread's heap is warm (`debug`). A warm class's capacity is
//! sized by demand (`sheaf_budget`).

use crate::counters::Ev;
use crate::freelist::{take_sheaf_block, SheafBlock, HARDENING};
use crate::heap::{ClassHeap, DEAD, EMPTY};
use crate::os;
use crate::tls::current;

/// Pops the top of `c`'s sheaf, `len` blocks long (not empty), checked
/// (`freelist::take_sheaf_block`: its tag, cleared; no free-list link) and
/// counted: the allocation fast path's pop, and that of a sheaf just taken
/// from a barn. `secret` is the heap's.
#[inline(always)]
pub fn pop(c: &ClassHeap, len: u32, secret: usize) -> *mut u8 {
    let obj = c.sheaf_top(len);
    if HARDENING {
        // SAFETY: `obj` is a block the sheaf held.
        let found = unsafe { take_sheaf_block(secret, obj) };
        if found != SheafBlock::Tagged {
            return stop(found, obj);
        }
    }
    c.sheaf_len.set(len - 1);
    c.ev.inc(Ev::AllocSheaf);
    obj
}

/// Stops the process unless `found` is a block freed once.
#[inline(always)]
pub fn check(found: SheafBlock, p: *mut u8) {
    if found != SheafBlock::Tagged {
        stop(found, p);
    }
}

/// Stops the process: `p` left a sheaf as `found` says (not `Tagged`).
/// Returns (null) only for a null `p`, which no sheaf holds: so that the
/// compiler does not take it for a function that never returns, which the
/// allocation fast path would have to call with the stack aligned (a push
/// and a pop on the path) rather than jump to.
#[cold]
#[inline(never)]
pub fn stop(found: SheafBlock, p: *mut u8) -> *mut u8 {
    if p.is_null() {
        return p;
    }
    let what = match found {
        SheafBlock::Linked => "double free (a block on a free list was freed again)",
        _ => "double free or write after free: a freed block's sheaf tag (its second word) is gone",
    };
    os::fatal(what, p as usize)
}

/// At exit (a `.fini_array` entry): the blocks left in the exiting
/// thread's sheaves are checked as a flush would check them, so that a
/// double free that no pop or flush met still stops the process. The tags
/// are put back after: destructors that run later may still allocate.
extern "C" fn check_at_exit() {
    let heap = current();
    if !HARDENING || heap == EMPTY || heap == DEAD {
        return;
    }
    // SAFETY: a created heap lives until this thread's destructor.
    let heap = unsafe { &*heap };
    let secret = heap.secret.get();
    for (class, c) in heap.classes.iter().enumerate() {
        if !heap.is_warm(class) {
            continue;
        }
        let blocks = &c.sheaf[1..=c.sheaf_len.get() as usize];
        for b in blocks {
            // SAFETY: a block the sheaf holds.
            check(unsafe { take_sheaf_block(secret, b.get()) }, b.get());
        }
        for b in blocks {
            // SAFETY: as above; its tag was there.
            unsafe { crate::freelist::set_sheaf_tag(secret, b.get()) };
        }
    }
}

#[used]
#[link_section = ".fini_array"]
static CHECK_AT_EXIT: extern "C" fn() = check_at_exit;
