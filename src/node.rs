//! The node partial list of each size class: slabs nobody owns that have free
//! objects, under one lock, with counters kept exact as slabs enter and leave,
//! so that statistics never walk the list (Linux's `count_partial()` did,
//! and stalled machines with a million partial slabs).
//!
//! Placement (SLUB's `add_partial` policy): nearly empty slabs go to the head, where the next
//! refill takes them while they are cache-hot; fuller slabs, and slabs that
//! became partial through a remote free (cache-cold), go to the tail.
//!
//! And the free of a block into a slab the freer may not own
//! (`Node::free_unowned`, a sheaf's run of blocks `Node::free_unowned_run`):
//! the protocol that moves it between the slab's owner, FULL and this
//! list, with what the freeing heap keeps and counts left to the heap
//! (`Freer`), so that the model check (`tests/model`) runs it as shipped.

use core::ptr;

use crate::freelist::list_contains;
#[cfg(not(loom))]
use crate::freelist::list_len;
use crate::list::{End, List};
use crate::purge;
use crate::segment;
#[cfg(not(loom))]
use crate::size_class::NUM_CLASSES;
use crate::slab::{double_free, invalid_free, Push, RemoteFrees, Slab, State, Suspicion};
use crate::sync::{invariant, AtomicPtr, AtomicU64, AtomicUsize, Lock, Ordering};

/// For classes of few objects per slab, a node keeps as many empty slabs
/// as hold this many objects (SLUB's `min_partial`, which grows with the
/// object size) rather than return them to their segment. Kept where one
/// allocation would otherwise take a slab from its segment and give one
/// back: without it the classes of one 40-64 KiB block per slab did that
/// for most allocations of a program that allocates and frees such blocks
/// at random (`stress`). What a node keeps goes back at the next purge
/// (`discard_empty_slabs`).
const MIN_PARTIAL_OBJECTS: usize = 16;

/// The other partial slabs below which a node keeps a slab that empties,
/// for a class of `objects` objects per slab, rather than give it back to
/// its segment (SLUB keeps 5-10), where the next slab taken, of any class,
/// reuses its pages. A slab its owner empties goes back at once (unless its
/// class has few objects per slab). A slab emptied by a free into it while
/// it is listed stays when it is its node's only partial slab: such a slab
/// serves the classes a thread uses little (`shared`), and a block freed
/// twice or written after its free is caught only while its slab stays
/// listed; back in its segment, the next slab taken would reuse it, and the
/// second free would free another class's block (`misuse` tests).
fn min_partial(objects: u32, emptied: Emptied) -> usize {
    let keep = MIN_PARTIAL_OBJECTS / objects as usize;
    match emptied {
        Emptied::ByItsOwner => keep,
        Emptied::WhileListed => keep.max(1),
    }
}

/// How a slab came to be empty, for whether its node keeps it
/// (`Node::should_discard_empty`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Emptied {
    /// Its owner emptied it and gives it up: it is on no list.
    ByItsOwner,
    /// A free into it while it was on this node's list emptied it: it is
    /// counted in `nr_partial`.
    WhileListed,
}

pub struct Node {
    pub lock: Lock,
    slabs: List<Slab>,
    /// Slabs on the list, and free objects on them. Written under the lock,
    /// read by `stats()` without it.
    pub nr_partial: AtomicUsize,
    pub free_objects: AtomicUsize,
    /// A gauge of FULL slabs of the class, for the statistics: those made
    /// FULL under the lock (`make_full`), less those claimed under it
    /// (`count_claimed`); the lock-free transitions count in the heaps'
    /// `Ev::FullSlabs`, so only the sum is every FULL slab. Written under
    /// the lock, read without it.
    pub full_slabs: AtomicUsize,
    /// Placement decisions, for the statistics.
    pub added_head: AtomicU64,
    pub added_tail: AtomicU64,
    /// Events counted under the lock, for the statistics: objects handed
    /// out from listed slabs to cold classes (`take_object`), frees into
    /// listed slabs (`free_listed`), shared slabs taken from segments
    /// (`add_fresh`), and slabs `free_listed` gave back to them.
    pub allocs_listed: AtomicU64,
    pub frees_listed: AtomicU64,
    pub slabs_new: AtomicU64,
    pub slabs_freed: AtomicU64,
}

// SAFETY: the Cell fields are touched only with `lock` held.
unsafe impl Sync for Node {}

#[cfg(not(loom))]
pub static NODES: [Node; NUM_CLASSES] = [const { Node::new() }; NUM_CLASSES];

/// The placement policy, a named function so it can be measured and changed:
/// the end of the node list a slab given up with `inuse` of its `objects`
/// in use goes to.
#[inline]
pub fn place(inuse: u32, objects: u32, remote_frees: RemoteFrees) -> End {
    if remote_frees == RemoteFrees::Came || inuse > objects / 4 {
        End::Tail
    } else {
        End::Head
    }
}

/// Adds `n` to a counter that only lock holders write (no locked instruction).
#[inline]
fn bump(c: &AtomicUsize, n: isize) {
    c.store(
        c.load(Ordering::Relaxed).wrapping_add(n as usize),
        Ordering::Relaxed,
    );
}

/// Counts `n` events in a counter that only lock holders write.
#[inline]
fn count(c: &AtomicU64, n: u64) {
    // Relaxed: written under the node lock only, read by `stats()` as a
    // snapshot.
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// A node's initial value (loom's atomics are not made in const context).
macro_rules! new_node {
    () => {
        Node {
            lock: Lock::new(),
            slabs: List::new(),
            nr_partial: AtomicUsize::new(0),
            free_objects: AtomicUsize::new(0),
            full_slabs: AtomicUsize::new(0),
            added_head: AtomicU64::new(0),
            added_tail: AtomicU64::new(0),
            allocs_listed: AtomicU64::new(0),
            frees_listed: AtomicU64::new(0),
            slabs_new: AtomicU64::new(0),
            slabs_freed: AtomicU64::new(0),
        }
    };
}

impl Node {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        new_node!()
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        new_node!()
    }

    /// Puts an unowned slab with free objects on the list. Lock held.
    pub fn add(&self, slab: &Slab, remote_frees: RemoteFrees) {
        self.lock.assert_held();
        let end = place(slab.inuse.get(), slab.objects.get(), remote_frees);
        self.link(slab, end);
        let decisions = match end {
            End::Tail => &self.added_tail,
            End::Head => &self.added_head,
        };
        count(decisions, 1);
    }

    /// Lists a slab fresh from its segment, for cold classes to share
    /// (`Slab::init_listed`). Lock held.
    pub fn add_fresh(&self, slab: &Slab, class: usize) {
        self.lock.assert_held();
        slab.init_listed(class);
        self.add(slab, RemoteFrees::NoneCame);
        count(&self.slabs_new, 1);
    }

    /// One object for a thread whose class is cold, from the listed slab at
    /// the tail (the fullest: filling it lets the emptier ones at the head
    /// drain and go back to their segment). Lock held. Returns null if the
    /// list is empty, else the object and whether it was just carved. A
    /// slab that hands out its last free object leaves the list as FULL: its
    /// first free claims it, as any full slab's.
    pub fn take_object(&self) -> (*mut u8, bool) {
        self.lock.assert_held();
        let s = self.slabs.last();
        if s.is_null() {
            return (ptr::null_mut(), false);
        }
        // SAFETY: list members are live; lock held.
        let slab = unsafe { &*s };
        let (p, fresh) = slab.take_listed_object();
        bump(&self.free_objects, -1);
        count(&self.allocs_listed, 1);
        if slab.inuse.get() == slab.objects.get() {
            self.remove(slab);
            self.make_full(slab);
        }
        (p, fresh)
    }

    /// LISTED -> FULL for a slab handed over with nothing free, unlinked
    /// (`Slab::make_full_from_listed`), counted. Lock held.
    pub fn make_full(&self, slab: &Slab) {
        self.lock.assert_held();
        slab.make_full_from_listed();
        bump(&self.full_slabs, 1);
    }

    /// Counts a FULL slab claimed by a free (`Slab::try_claim_full`) that
    /// is handed on under the lock (`free::list_claimed`). Lock held.
    pub fn count_claimed(&self) {
        self.lock.assert_held();
        bump(&self.full_slabs, -1);
    }

    /// Links `slab` in at `end` and counts it. Lock held.
    fn link(&self, slab: &Slab, end: End) {
        self.lock.assert_held();
        invariant!(slab.state() == State::Listed);
        self.slabs.push(slab, end);
        bump(&self.nr_partial, 1);
        bump(
            &self.free_objects,
            slab.objects.get().saturating_sub(slab.inuse.get()) as isize,
        );
    }

    /// Takes a slab off the list. Lock held.
    pub fn remove(&self, slab: &Slab) {
        self.lock.assert_held();
        self.slabs.remove(slab);
        bump(&self.nr_partial, -1);
        bump(
            &self.free_objects,
            -((slab.objects.get() - slab.inuse.get()) as isize),
        );
    }

    /// LISTED -> OWNED by heap `owner`: takes `slab` off the list for a
    /// heap (a refill, or a thread that frees into it in a row). Lock held.
    pub fn take(&self, slab: &Slab, owner: usize) {
        self.remove(slab);
        slab.take_listed(owner);
    }

    /// Frees `p` into `slab`, LISTED on this node, lock held; `suspicion`
    /// as for `free_unowned`. A slab that
    /// empties goes back to its segment unless the node keeps it
    /// (`should_discard_empty`); returns whether it went. Counts the free
    /// (and the slab) in the node's counters.
    pub fn free_listed(&self, slab: &Slab, p: *mut u8, suspicion: Suspicion) -> bool {
        self.lock.assert_held();
        invariant!(slab.state() == State::Listed);
        if suspicion == Suspicion::DoubleFree
            && list_contains(slab.local_free.get(), p, slab.objects.get())
        {
            double_free(p);
        }
        self.free_listed_run(slab, p, p, 1)
    }

    /// `free_listed` of a run of `n` checked blocks linked already, `head`
    /// to `tail` (a sheaf's flush): one splice, counted as `n` frees.
    fn free_listed_run(&self, slab: &Slab, head: *mut u8, tail: *mut u8, n: u32) -> bool {
        self.lock.assert_held();
        invariant!(slab.state() == State::Listed);
        // SAFETY: the run's blocks are live objects the caller gives up;
        // the slab's lists are ours under the node lock.
        unsafe { slab.free_run_with(crate::freelist::secret(), head, tail, n) };
        bump(&self.free_objects, n as isize);
        count(&self.frees_listed, n as u64);
        slab.check();
        if slab.inuse.get() == 0
            && self.should_discard_empty(slab.objects.get(), Emptied::WhileListed)
        {
            self.discard_listed(slab);
            return true;
        }
        false
    }

    /// Takes an empty listed slab off the list and gives it back to its
    /// segment, counted. Lock held.
    fn discard_listed(&self, slab: &Slab) {
        self.lock.assert_held();
        invariant!(slab.inuse.get() == 0);
        self.remove(slab);
        discard(slab);
        count(&self.slabs_freed, 1);
    }

    /// Counts a free into a slab this list is about to take: a cold class's
    /// free that claimed a FULL slab (`Freer::keep_claimed`). Lock held.
    pub fn count_free_listed(&self) {
        self.lock.assert_held();
        count(&self.frees_listed, 1);
    }

    pub fn first(&self) -> *mut Slab {
        self.slabs.first()
    }

    /// Whether an empty slab of `objects` objects should leave the list for
    /// its segment: it is kept only while the node has fewer than its
    /// `min_partial` other partial slabs.
    pub fn should_discard_empty(&self, objects: u32, emptied: Emptied) -> bool {
        let others = match emptied {
            Emptied::ByItsOwner => self.nr_partial.load(Ordering::Relaxed),
            Emptied::WhileListed => self.nr_partial.load(Ordering::Relaxed) - 1,
        };
        others >= min_partial(objects, emptied)
    }

    /// Calls `f` on every listed slab. Lock held; verification walk only.
    pub fn for_each(&self, f: impl FnMut(&Slab)) {
        self.lock.assert_held();
        self.slabs.iter().for_each(f);
    }
}

// ---------------------------------------------------------------------------
// Frees into slabs the freer may not own

/// The heap that frees blocks of one class into slabs it may not own, as
/// the unowned free (`Node::free_unowned`) needs it: the protocol is the
/// slab's and the node's, what the heap keeps and counts is its own. The
/// allocator's heaps are `free::ClassFreer`; the model check's are
/// stand-ins (`tests/model`), so that it runs this protocol as shipped.
pub trait Freer {
    /// The heap's owner tag (`Slab::owner`).
    fn tag(&self) -> usize;
    /// Counts `n` frees that went onto their slab's remote list.
    fn count_remote(&self, n: u64);
    /// Counts a free that claimed a FULL slab and handed it back to the
    /// heap that filled it (`Slab::give_back`): the free, and the slab
    /// gone from FULL onto that heap's `returned` stack.
    fn count_given_back(&self);
    /// The `returned` stack of the heap whose owner tag is `tag`, a slab's
    /// last owner (a heap is never unmapped; an exited one's stack is
    /// `CLOSED`).
    fn returned(&self, tag: usize) -> &AtomicPtr<Slab>;
    /// A free of `p` into `slab`, which the heap owns: its own slab reached
    /// the slow path, or it has just taken the slab off the node list.
    /// `suspicion` as for `Node::free_unowned`.
    fn free_owned(&self, slab: &Slab, p: *mut u8, suspicion: Suspicion);
    /// A slab the heap claimed from FULL with its free, and did not give
    /// back (the free emptied it, or no other heap takes it back: none
    /// filled it, the one that did has exited, or it is this one): the heap
    /// adopts it, or lists it on the node (or gives it back to its
    /// segment).
    fn keep_claimed(&self, slab: &Slab);
    /// Whether the heap takes `slab`, LISTED on the node, at this free of
    /// `frees` blocks into it (it has freed into it so often in a row).
    /// Node lock held.
    fn adopts_listed(&self, slab: &Slab, frees: usize) -> bool;
    /// `slab`, just taken off the node list for the heap (`adopts_listed`),
    /// joins the heap's lists. Node lock held.
    fn keep_listed(&self, slab: &Slab);
}

impl Node {
    /// A free of `p`, by `heap`, into `slab`, a slab of this node's class
    /// that `heap` may not own: a push onto its owner's remote list, the
    /// claim of a FULL slab (given back to the heap that filled it, or kept
    /// by `heap`), or a free into a LISTED slab under this node's lock.
    /// `suspicion` is what `slab::looks_free(p)` said as the caller read it,
    /// before any write into `p`: a push that loses its CAS may have written
    /// its link into `p` already (`Slab::push_remote`).
    pub fn free_unowned(&self, slab: &Slab, p: *mut u8, suspicion: Suspicion, heap: &impl Freer) {
        loop {
            let state = match slab.push_remote(p, heap.tag(), suspicion) {
                Push::Pushed => return heap.count_remote(1),
                // The orphan heap owns it, or the heap's own slab reached the
                // slow path.
                Push::Mine => return heap.free_owned(slab, p, suspicion),
                Push::NotOwned(state) => state,
            };
            not_a_live_block(state, slab, p);
            if state == State::Full {
                if !slab.try_claim_full(p) {
                    continue;
                }
                // Alone with the slab until it is handed on: back to the heap
                // that filled it, unless there is none (a slab filled on the
                // node), it has exited or is this one, or the free emptied
                // the slab (a class of one block per slab): then
                // `keep_claimed` lists that one or gives it back to its
                // segment now, where the refill of the heap that filled it
                // would have passed it after a trip through its `returned`
                // stack.
                let last = slab.last_owner.get();
                if slab.inuse.get() != 0
                    && last != 0
                    && last != heap.tag()
                    && slab.give_back(last, heap.returned(last))
                {
                    return heap.count_given_back();
                }
                return heap.keep_claimed(slab);
            }
            let g = self.lock.guard();
            if slab.state() != State::Listed {
                continue; // a heap took the slab, or it filled up, while we waited
            }
            if heap.adopts_listed(slab, 1) {
                self.take(slab, heap.tag());
                heap.keep_listed(slab);
                drop(g);
                return heap.free_owned(slab, p, suspicion);
            }
            // Counted in the node's counters (no write to the class heap of a
            // thread whose class is cold).
            self.free_listed(slab, p, suspicion);
            return;
        }
    }

    /// Frees `run`, blocks of `slab` out of a sheaf of `heap`, checked and
    /// linked first to last already, into a slab `heap` does not own:
    /// pushed onto its remote list with one CAS (`Slab::push_remote_run`);
    /// the slab LISTED, spliced onto its local list whole under one hold of
    /// this node's lock (or taken by `heap`, `Freer::adopts_listed`, with
    /// the run's length as its frees in a row); else (FULL, `heap`'s after
    /// all, or no longer LISTED once the lock is held) each block through
    /// `free_unowned`.
    pub fn free_unowned_run(
        &self,
        slab: &Slab,
        run: &[core::cell::Cell<*mut u8>],
        heap: &impl Freer,
    ) {
        let (head, tail) = (run[0].get(), run[run.len() - 1].get());
        let n = run.len() as u32;
        match slab.push_remote_run(head, tail, n, heap.tag(), || {}) {
            Push::Pushed => return heap.count_remote(n as u64),
            Push::NotOwned(State::Listed) => {
                let g = self.lock.guard();
                if slab.state() == State::Listed {
                    if !heap.adopts_listed(slab, n as usize) {
                        // A lost push's link in `tail` is overwritten here.
                        self.free_listed_run(slab, head, tail, n);
                        return;
                    }
                    self.take(slab, heap.tag());
                    heap.keep_listed(slab);
                    drop(g);
                    for b in run {
                        heap.free_owned(slab, b.get(), Suspicion::Clear);
                    }
                    return;
                }
            }
            _ => {}
        }
        // The run's links are no double frees: the blocks were checked.
        for b in run {
            self.free_unowned(slab, b.get(), Suspicion::Clear, heap);
        }
    }
}

/// Stops the process if `p` cannot be a live block of `slab` in `state`:
/// not the start of a block, or a block of a slab that is FREE (all its
/// blocks were freed and it went back to its segment, which keeps its
/// geometry until the slab is used again, though none of it counts as
/// carved), so a double free.
fn not_a_live_block(state: State, slab: &Slab, p: *mut u8) {
    if state == State::Free && slab.is_slot_start(p) {
        double_free(p);
    }
    if !slab.is_object_start(p) {
        invalid_free(p);
    }
}

/// In a forked child whose parent had other threads (see `fork`): every node
/// list whose lock such a thread held is built again from the slab
/// descriptors, and its lock freed.
///
/// A slab belongs on its node list exactly when it is in use in its segment
/// and its state is LISTED. A slab leaves the list for a heap when
/// `Slab::take_listed` makes it OWNED (before that, listing it again is
/// right: the lost thread never used it) and for its segment when
/// `Slab::make_free` makes it FREE; a slab is made LISTED
/// (`Slab::begin_listing`) before its lists are merged and it is linked. A
/// slab caught in between is listed with `inuse` counted again from its
/// local list, which never calls an object in use free: at worst the child
/// leaks the objects that the lost thread was moving between lists. A slab
/// found with no free object (the lost thread took its last one in
/// `take_object`, or was merging its lists) is made FULL instead, as
/// `take_object` would have: a listed slab must have one to give, and the
/// first free into it claims it. The new list is in address order;
/// counters are recomputed, placement counts kept.
#[cfg(not(loom))]
pub fn rebuild_in_child() {
    let mut held = [false; NUM_CLASSES];
    for (class, node) in NODES.iter().enumerate() {
        held[class] = node.lock.is_locked();
    }
    if !held.contains(&true) {
        return;
    }
    for (node, _) in NODES.iter().zip(held).filter(|(_, h)| *h) {
        node.slabs.clear();
        node.nr_partial.store(0, Ordering::Relaxed);
        node.free_objects.store(0, Ordering::Relaxed);
    }
    segment::for_each_slab(|slab| {
        let class = slab.class.get() as usize;
        if slab.state() == State::Listed && class < NUM_CLASSES && held[class] {
            // The lost thread may have left `inuse` behind the lists: count
            // again from the local list, so that the node's counters and the
            // slab's invariant hold (objects it was moving stay in use).
            let free = list_len(slab.local_free.get(), slab.objects.get()) + slab.uncarved();
            slab.inuse.set(slab.objects.get() - free);
            if free == 0 {
                NODES[class].make_full(slab);
            } else {
                NODES[class].link(slab, End::Tail);
            }
        }
    });
    for (node, _) in NODES.iter().zip(held).filter(|(_, h)| *h) {
        node.lock.reset_in_child();
    }
}

/// Listed slabs `discard_empty_slabs` looks at per node: empty slabs join
/// at the head (`place`), and the bound keeps a node with many
/// partial slabs from being held long.
#[cfg(not(loom))]
const DISCARD_WALK: usize = 64;

/// Gives the empty slabs the node lists keep back to their segments, for
/// the purge that follows to give their pages back: the lists keep some
/// while the program runs (`min_partial`), and kept them resident after
/// the program went idle. Called when a purge is due
/// (`purge::give_back::give_back_before_purge`, from the purger and the
/// allocation slow path) and by `trim`, with no node lock held.
#[cfg(not(loom))]
pub fn discard_empty_slabs() {
    for node in NODES.iter() {
        if node.nr_partial.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let _g = node.lock.guard();
        node.discard_empty();
    }
}

impl Node {
    /// Gives the empty slabs among the first `DISCARD_WALK` of the list back
    /// to their segments. Lock held.
    #[cfg(not(loom))]
    pub fn discard_empty(&self) {
        self.lock.assert_held();
        // The walk reads a slab's successor before the slab may leave.
        for slab in self.slabs.iter().take(DISCARD_WALK) {
            if slab.inuse.get() == 0 {
                self.discard_listed(slab);
            }
        }
    }
}

/// Gives an empty, unlisted slab back to its segment, then applies the
/// purge's rules to it (`purge::pass::slabs_freed`: a purge asked for, run
/// if due, the trim bound's test). Node lock held.
pub fn discard(slab: &Slab) {
    #[cfg(not(loom))] // The model has no `NODES`.
    NODES[slab.class.get() as usize].lock.assert_held();
    slab.make_free();
    purge::pass::slabs_freed(segment::free_slab(slab as *const Slab as *mut Slab));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::size_class::objects_per_slab;

    #[derive(PartialEq)]
    enum ChildLock {
        Taken,
        NotTaken,
    }

    /// Runs `count_free_listed` (a function whose caller must hold the
    /// node's lock) on a fresh node in a forked child, with the lock taken
    /// or not; returns the child's wait status.
    fn count_free_listed_in_child(lock: ChildLock) -> i32 {
        // SAFETY: the child touches only its own node and ends with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let node = Node::new();
            if lock == ChildLock::Taken {
                node.lock.lock();
            }
            node.count_free_listed();
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    /// A debug build stops a caller that should hold a node's lock and
    /// does not (`Lock::assert_held`, "src/node.rs:<line>: lock not held"
    /// on the child's stderr); with the lock held, or in a release build,
    /// the call goes through.
    #[test]
    fn a_debug_build_stops_a_node_list_call_without_the_node_lock() {
        let held = count_free_listed_in_child(ChildLock::Taken);
        assert!(
            libc::WIFEXITED(held) && libc::WEXITSTATUS(held) == 0,
            "with the lock held: wait status {held:#x}"
        );
        let free = count_free_listed_in_child(ChildLock::NotTaken);
        if cfg!(debug_assertions) {
            assert!(
                libc::WIFSIGNALED(free) && libc::WTERMSIG(free) == libc::SIGABRT,
                "without the lock, a debug build goes on: wait status {free:#x}"
            );
        } else {
            assert!(libc::WIFEXITED(free) && libc::WEXITSTATUS(free) == 0);
        }
    }

    /// A thread lost at a fork while it held a node's lock, after it took a
    /// listed slab's last free object and before `take_object` made the
    /// slab FULL: the child's rebuilt list must not hold the slab (a take
    /// from it would find nothing: a broken invariant, or a null block), and
    /// the slab must be FULL, for its first free to claim. Run in a forked
    /// child, which is where `rebuild_in_child` runs.
    #[test]
    fn a_forked_child_lists_no_slab_whose_last_object_a_lost_thread_took() {
        // SAFETY: the child runs the allocator's code and this test's, and
        // ends with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let ok = std::panic::catch_unwind(|| {
                let class = NUM_CLASSES - 1;
                assert_eq!(objects_per_slab(class), 1);
                let node = &NODES[class];
                // SAFETY: a fresh slab, ours alone.
                let slab = unsafe { &*segment::alloc_slab() };
                node.lock.lock();
                node.add_fresh(slab, class);
                let (p, _) = slab.take_listed_object();
                assert!(!p.is_null());
                // The lock stays held, as by the thread lost at the fork.
                rebuild_in_child();
                assert!(slab.state() == State::Full, "{:?}", slab.state());
                assert!(!node.lock.is_locked());
                assert!(
                    !node.slabs.iter().any(|s| ptr::eq(s, slab)),
                    "the slab is still listed"
                );
                assert_eq!(node.free_objects.load(Ordering::Relaxed), 0);
                assert_eq!(node.full_slabs.load(Ordering::Relaxed), 1);
            })
            .is_ok();
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child failed: wait status {status:#x}"
        );
    }
}
