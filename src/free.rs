//! The free slow path: a free the fast path could not finish, with this
//! heap's side (`ClassFreer`) of the protocol of a free into a slab the
//! freer may not own (`Node::free_unowned`, which the model checks). A block of a
//! slab another heap owns goes onto that slab's remote list; a FULL slab is
//! claimed by the freer and given back to the heap that filled it, or
//! adopted; a LISTED slab takes the free under its node lock (and is adopted
//! at the eighth free in a row); a block that looks free already is looked
//! for on the slab's lists (a double free stops the process). The slabs
//! these frees hand on go through `release`. A sheaf's flush (`sheaf`)
//! ends here, a run of one slab at a time.

use core::ptr;

use crate::counters::Ev;
use crate::freelist;
use crate::heap::{owner_tag, Heap, MAX_THREAD_PARTIAL};
use crate::list::End;
use crate::node::{Freer, NODES};
use crate::release::{keep_partial, release, slab_emptied, trim_partials};
use crate::slab::{self, double_free, invalid_free, Slab, Suspicion};
use crate::sync::{AtomicPtr, Ordering};

/// A free, by `heap` (the slow paths' heap), of `p` in a slab `heap` may not own: a
/// push onto its owner's remote list, the claim of a FULL slab, or a free
/// into a LISTED one under its node lock (`Node::free_unowned`). `suspicion` is
/// what `slab::looks_free(p)` said as `remote_free::free_slow` read it, before any
/// write into `p`.
pub fn free_unowned(heap: &Heap, slab: &Slab, p: *mut u8, suspicion: Suspicion) {
    let class = slab.class.get() as usize;
    NODES[class].free_unowned(slab, p, suspicion, &ClassFreer { heap, class });
}

/// Frees `run`, checked blocks of `slab` out of a sheaf, linked first to
/// last already, into a slab `heap` does not own: one push, one splice
/// under the node lock into a LISTED slab, else each block as
/// `free_unowned` frees it (`Node::free_unowned_run`).
pub fn free_unowned_run(heap: &Heap, slab: &Slab, run: &[core::cell::Cell<*mut u8>]) {
    let class = slab.class.get() as usize;
    NODES[class].free_unowned_run(slab, run, &ClassFreer { heap, class });
}

/// `heap` freeing blocks of `class` into slabs it may not own: the heap
/// side of `Node::free_unowned`.
struct ClassFreer<'a> {
    heap: &'a Heap,
    class: usize,
}

impl Freer for ClassFreer<'_> {
    fn tag(&self) -> usize {
        owner_tag(self.heap)
    }

    fn count_remote(&self, n: u64) {
        self.heap.classes[self.class].ev.add(Ev::FreeRemote, n);
    }

    fn count_given_back(&self) {
        let ev = &self.heap.classes[self.class].ev;
        ev.inc(Ev::FreeRemote);
        ev.sub(Ev::FullSlabs, 1);
        ev.inc(Ev::ReturnedSlabs);
    }

    fn returned(&self, tag: usize) -> &AtomicPtr<Slab> {
        // SAFETY: heaps are never unmapped (an exited one reads CLOSED);
        // `tag` is a heap's owner tag, its address.
        unsafe { &(*(tag as *const Heap)).classes[self.class].returned }
    }

    fn free_owned(&self, slab: &Slab, p: *mut u8, suspicion: Suspicion) {
        free_owned_slow(self.heap, slab, p, suspicion);
    }

    fn keep_claimed(&self, slab: &Slab) {
        // Emptied by this free: onto the node list or back to its segment.
        // A cold class owns no slab (`shared`): the slab goes back to the
        // node list, where the shared slabs are.
        if slab.inuse.get() == 0 || !self.heap.is_warm(self.class) {
            return list_claimed(self.heap, self.class, slab);
        }
        self.heap.classes[self.class].ev.inc(Ev::FreeSlow);
        adopt(self.heap, self.class, slab);
    }

    /// The `ADOPT_AFTER_FREES`th free in a row into the same listed slab,
    /// counted in `ClassHeap::last_listed_free` (a run's blocks each count),
    /// for a warm class.
    fn adopts_listed(&self, slab: &Slab, frees: usize) -> bool {
        if !self.heap.is_warm(self.class) {
            return false;
        }
        let c = &self.heap.classes[self.class];
        let last = c.last_listed_free.get();
        let this = slab as *const Slab as usize;
        let run = if last & !RUN_MASK == this {
            ((last & RUN_MASK) + frees).min(RUN_MASK)
        } else {
            frees.min(RUN_MASK)
        };
        if run >= ADOPT_AFTER_FREES {
            c.last_listed_free.set(0);
            return true;
        }
        c.last_listed_free.set(this | run);
        false
    }

    /// `ADOPT_AFTER_FREES` frees in a row into the same node-listed slab:
    /// the thread took the slab (LISTED -> OWNED), and it joins its partial
    /// list, so that its next frees into it are local ones, not one node
    /// lock each. Frees scattered over many listed slabs keep the lock per
    /// free and leave the slabs listed.
    fn keep_listed(&self, slab: &Slab) {
        NODES[self.class].lock.assert_held();
        // Within the cap only: the thread frees into these slabs itself,
        // and a listed slab takes each of its frees under the node lock.
        let c = &self.heap.classes[self.class];
        while c.partial_count.get() >= MAX_THREAD_PARTIAL {
            // SAFETY: the partial list is not empty; its slabs are ours.
            release(
                self.heap,
                self.class,
                unsafe { &*c.pop_partial() },
                ptr::null_mut(),
            );
        }
        c.push_partial(slab, End::Tail);
    }
}

/// Frees in a row by one thread into one node-listed slab after which the
/// thread takes the slab. A program that frees its blocks in the order it
/// allocated them frees a slab's blocks one after another, so that without
/// adoption each of its frees would take the node lock, and two in a row
/// would suffice for it. But threads that free blocks at random meet a few
/// in a row into one slab by chance, and would take slabs they do not
/// need (bench/report/HISTORY.md has the measurements behind the number).
const ADOPT_AFTER_FREES: usize = 8;
/// The low bits of `ClassHeap::last_listed_free` that count the run.
const RUN_MASK: usize = 127;
const _: () = assert!(core::mem::size_of::<Slab>() > RUN_MASK && ADOPT_AFTER_FREES <= RUN_MASK);

/// A slab this thread claimed from FULL (its free just made) goes to the
/// node list, or back to its segment if empty and not kept, under the node
/// lock. The free is counted in the class heap if the class is warm, else
/// on the node, so that a cold class's heap is not written (only a slab
/// that went back to its segment is counted there): a page the fast path
/// only read maps the zero page, and a first write to it then costs a copy
/// and a TLB shootdown on every CPU the process runs on.
fn list_claimed(heap: &Heap, class: usize, slab: &Slab) {
    let node = &NODES[class];
    let _g = node.lock.guard();
    node.count_claimed();
    if heap.is_warm(class) {
        heap.classes[class].ev.inc(Ev::FreeRemote);
    } else {
        node.count_free_listed();
    }
    release(heap, class, slab, ptr::null_mut());
}

/// A slab we just claimed from FULL with a free joins our partial list; if
/// that list is full, its slabs go to the node list first, in one lock hold.
/// Within the cap only: the free is often the thread's own, into a slab it
/// filled, and the partial slabs it would send on past `partial_bound` are
/// the ones its own frees go to.
fn adopt(heap: &Heap, class: usize, slab: &Slab) {
    heap.warm_up(class);
    slab.adopt(owner_tag(heap));
    heap.classes[class].ev.sub(Ev::FullSlabs, 1);
    trim_partials(heap, class, MAX_THREAD_PARTIAL - 1);
    keep_partial(heap, class, slab);
}

/// A free into a slab the heap owns, reached through the slow path;
/// `suspicion` as for `free_unowned`.
fn free_owned_slow(heap: &Heap, slab: &Slab, p: *mut u8, suspicion: Suspicion) {
    if !slab.is_object_start(p) {
        invalid_free(p);
    }
    if suspicion == Suspicion::DoubleFree {
        return free_suspicious(p, heap as *const Heap as *mut Heap, slab);
    }
    push_local(heap, slab, p);
}

/// `p`'s first word decodes to a valid link, or its second is its sheaf
/// tag: either `p` is already free, or the program stored something that
/// looks like a link. A tag means a sheaf holds the block; for a link, walk
/// our lists to know. The block first, as for `free_slow`.
#[cold]
#[inline(never)]
pub fn free_suspicious(p: *mut u8, heap: *mut Heap, slab: &Slab) {
    // SAFETY: `p` is a slot of `slab`.
    if unsafe { slab.in_a_sheaf(freelist::secret(), p) } {
        double_free(p);
    }
    // SAFETY: `heap` is the owner of `slab`, hence a live heap.
    let c = unsafe { &(*heap).classes[slab.class.get() as usize] };
    let bound = slab.objects.get();
    // Acquire: the freers' links (a snapshot; pushes only prepend).
    let remote = slab::remote_list(slab.word.0.load(Ordering::Acquire));
    let active = core::ptr::eq(c.active.get(), slab);
    if freelist::list_contains(slab.local_free.get(), p, bound)
        || freelist::list_contains(remote, p, bound)
        || (active && freelist::list_contains(c.detached.get(), p, bound))
    {
        double_free(p);
    }
    // SAFETY: `heap` owns `slab`.
    push_local(unsafe { &*heap }, slab, p);
}

/// The fast path's push and count, for the slow paths that end like it.
fn push_local(heap: &Heap, slab: &Slab, p: *mut u8) {
    heap.classes[slab.class.get() as usize].ev.inc(Ev::FreeFast);
    // SAFETY: `p` is a live object of `slab`, which `heap` owns.
    if unsafe { slab.free_object(p) } {
        slab_emptied(heap, slab);
    }
}

/// A free of `p`, checked already, into `slab`, which `heap` owns: onto the
/// heap's detached list if the slab is the active one, as SLUB frees to
/// the cpu freelist, else onto the slab's local list, with a decrement of
/// its `inuse` (a slab that empties leaves the thread).
#[inline(always)]
pub fn free_owned_unchecked(heap: &Heap, slab: &Slab, p: *mut u8) {
    free_owned_run(heap, slab, p, p, 1);
}

/// `free_owned_unchecked` for a run of `n` blocks linked already, `head`
/// to `tail`: one splice.
#[inline(always)]
pub fn free_owned_run(heap: &Heap, slab: &Slab, head: *mut u8, tail: *mut u8, n: u32) {
    // SAFETY: `heap_offset` is a class's (a slab the heap owns is no
    // profile slab).
    let c = unsafe { heap.class_at(slab.heap_offset.get() as usize) };
    c.ev.add(Ev::FreeFast, n as u64);
    let secret = freelist::secret();
    if core::ptr::eq(c.active.get(), slab) {
        // SAFETY: the run's blocks are live objects of our active slab;
        // they become free.
        unsafe { crate::freelist::set_next_with(secret, tail, c.detached.get()) };
        c.detached.set(head);
        return;
    }
    // SAFETY: as above, for a slab we own.
    if unsafe { slab.free_run_with(secret, head, tail, n) } {
        slab_emptied(heap, slab);
    }
}
