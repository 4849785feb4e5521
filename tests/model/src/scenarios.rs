//! The scenarios: two or three threads on one slab, each checking where
//! every object ends up (free exactly once, or still in use) and who owns
//! the slab. Their frees into slabs the freer may not own run the shipped
//! protocol (`Node::free_unowned`, a sheaf's run `Node::free_unowned_run`)
//! with the model's heaps as its heap side (`ModelHeap`).

use std::alloc::{alloc_zeroed, Layout};
use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::sync::OnceLock;

use loom::sync::Arc;
use loom::thread;

use crate::freelist::{clear_link, get_next, init_secret, set_next};
use crate::node::{Freer, Node};
use crate::size_class::{objects_per_slab, CLASS_BYTES, NUM_CLASSES, SEGMENT_BYTES};
use crate::slab::{Push, RemoteFrees, Slab, State, Suspicion, CLOSED};
use crate::sync::{AtomicPtr, Ordering};

mod listed_run;

/// Owner ids of the model's heaps (any distinct even numbers).
const OWNER: usize = 0x1000;
const OTHER: usize = 0x2000;
/// A heap for which the slab's class is cold (`shared`).
const COLD: usize = 0x3000;
/// A second freer's heap.
const THIRD: usize = 0x4000;

/// A zeroed, segment-aligned region standing in for a segment: the
/// descriptors at its start, slab 1's objects at 64 KiB. One per test (the
/// test harness runs tests on threads of their own; loom's threads all run
/// on the test's), made once; each run of a scenario writes a fresh
/// descriptor into it.
fn segment() -> usize {
    static SECRET: OnceLock<()> = OnceLock::new();
    SECRET.get_or_init(init_secret);
    std::thread_local! {
        static SEGMENT: usize = {
            let layout = Layout::from_size_align(SEGMENT_BYTES, SEGMENT_BYTES).unwrap();
            // SAFETY: a non-zero size; the region is never freed.
            let p = unsafe { alloc_zeroed(layout) } as usize;
            assert_ne!(p, 0, "no memory for the model's segment");
            p
        };
    }
    SEGMENT.with(|s| *s)
}

/// A class with four objects per slab: enough for two threads to free two
/// objects each, few enough to keep the models small.
fn class() -> usize {
    class_with(4)
}

/// A class with `n` objects per slab.
fn class_with(n: u32) -> usize {
    (0..NUM_CLASSES)
        .find(|&c| objects_per_slab(c) == n)
        .expect("a class with that many objects per slab")
}

/// Slab 1 of the model's segment, FREE, with a descriptor made in this run
/// (loom's atomics belong to one run), for objects of `class`. Dropped in
/// place by `Scenario`.
struct Scenario {
    slab: *mut Slab,
    class: usize,
}

impl Scenario {
    fn new() -> Scenario {
        Scenario::with_class(class())
    }

    fn with_class(class: usize) -> Scenario {
        let slab = (segment() + core::mem::size_of::<Slab>()) as *mut Slab;
        // SAFETY: inside the region, aligned (the region is 4 MiB-aligned
        // and descriptors are 128-byte aligned multiples); the previous
        // run's descriptor was dropped in place.
        unsafe { slab.write(Slab::new_free()) };
        // SAFETY: just written.
        let start = unsafe { (*slab).start() } as usize;
        let size = CLASS_BYTES[class] as usize;
        crate::links::track((0..objects_per_slab(class) as usize).map(|i| start + i * size));
        Scenario { slab, class }
    }

    fn slab(&self) -> &'static Slab {
        // SAFETY: written in `new`, dropped only when the scenario ends,
        // after its threads have been joined.
        unsafe { &*self.slab }
    }

    /// The slab, initialised for its class and owned by OWNER, with all its
    /// objects carved and handed out; returns them.
    fn owned_and_all_in_use(&self) -> (&'static Slab, Vec<usize>) {
        let slab = self.slab();
        slab.init(self.class, OWNER);
        let objects = objects_per_slab(self.class);
        let (mut list, n) = slab.carve(objects);
        assert_eq!(n, objects);
        slab.set_inuse_active();
        let mut objects = Vec::new();
        while !list.is_null() {
            objects.push(list as usize);
            // SAFETY: a free object just carved.
            list = unsafe { get_next(list) };
        }
        (slab, objects)
    }
}

impl Drop for Scenario {
    fn drop(&mut self) {
        // SAFETY: written in `new`; every thread using it has been joined.
        unsafe { self.slab.drop_in_place() };
        crate::links::forget();
    }
}

/// Runs `scenario` under every interleaving loom finds, and checks that
/// there was more than one (a scenario whose threads never overlap checks
/// nothing).
fn explore(scenario: impl Fn() + Sync + Send + 'static) {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    loom::model(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        scenario();
    });
    let n = runs.load(std::sync::atomic::Ordering::Relaxed);
    RUNS.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    eprintln!("{} interleavings", n);
    assert!(n > 1, "only {n} interleaving explored");
}

/// The objects on a free list, checking that none appears twice.
fn collect(mut list: *mut u8, into: &mut BTreeSet<usize>) {
    while !list.is_null() {
        assert!(into.insert(list as usize), "object {list:p} free twice");
        // SAFETY: a free object of the model's slab.
        list = unsafe { get_next(list) };
    }
}

/// The owner's take of its remote list (`Slab::take_remote`), checking the
/// length the state word counted against the list it took.
fn take_remote(slab: &Slab) -> *mut u8 {
    let (list, count) = slab.take_remote();
    let mut on_list = 0;
    let mut p = list;
    while !p.is_null() {
        on_list += 1;
        // SAFETY: a free object of the model's slab, ours since the take.
        p = unsafe { get_next(p) };
    }
    assert_eq!(
        count, on_list,
        "the remote count disagrees with the remote list"
    );
    list
}

/// The owner's refill of an active slab with no free object left: it
/// collects the remote list (`Some`), or, if none came, makes the slab FULL
/// (`None`).
fn refill_or_make_full(slab: &Slab) -> Option<*mut u8> {
    loop {
        let list = take_remote(slab);
        if !list.is_null() {
            return Some(list);
        }
        if slab.try_make_full(OWNER) {
            return None;
        }
    }
}

/// After frees raced `refill_or_make_full`: the objects free, either on the
/// list the owner collected (the push came first: the slab never left
/// OWNER), or on the slab a freer claimed from FULL and gave back to OWNER
/// through `returned`. Checks the slab is OWNER's, OWNED, three in use.
fn freed_as_it_went_full(
    slab: &Slab,
    collected: Option<*mut u8>,
    returned: &AtomicPtr<Slab>,
) -> BTreeSet<usize> {
    let mut free = BTreeSet::new();
    match collected {
        Some(list) => {
            collect(list, &mut free);
            assert!(returned.load(Ordering::Relaxed).is_null());
        }
        None => {
            assert_eq!(
                returned.load(Ordering::Acquire),
                slab as *const Slab as *mut Slab
            );
            assert_eq!(slab.inuse.get(), 3);
            slab.check();
            free = free_in_owned(slab);
        }
    }
    assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
    assert_eq!(slab.state(), State::Owned);
    free
}

/// The end of a scenario where freers pushed onto the remote list of a slab
/// the owner kept: once they have joined, the owner `collected` exactly
/// `pushed` and nothing more came, its local list is just `local`, and the
/// slab is still OWNED with its counts right.
fn collected_all(
    slab: &Slab,
    freers: Vec<thread::JoinHandle<()>>,
    collected: &BTreeSet<usize>,
    pushed: BTreeSet<usize>,
    local: usize,
) {
    for f in freers {
        f.join().unwrap();
    }
    assert_eq!(slab.remote_pending(), 0);
    assert!(take_remote(slab).is_null());
    assert_eq!(*collected, pushed);
    let mut on_local = BTreeSet::new();
    collect(slab.local_free.get(), &mut on_local);
    assert_eq!(on_local, BTreeSet::from([local]));
    assert_eq!(slab.state(), State::Owned);
    slab.check();
}

/// A heap takes the slab, first on the node list, as
/// `refill::take_from_node` does (`Node::take`, the shipped transition).
fn take_from_node(node: &Node, slab: &Slab) {
    node.lock.lock();
    assert_eq!(node.first(), slab as *const Slab as *mut Slab);
    node.take(slab, OWNER);
    node.lock.unlock();
}

/// The objects free in an OWNED slab: on its local and remote lists.
fn free_in_owned(slab: &Slab) -> BTreeSet<usize> {
    let mut free = BTreeSet::new();
    collect(slab.local_free.get(), &mut free);
    collect(take_remote(slab), &mut free);
    free
}

/// The owner's free of one of its objects onto the local list (the fast
/// path's non-active case).
fn free_local(slab: &Slab, p: usize) {
    // SAFETY: `p` is an object of the slab, in use, given up; the caller
    // owns the slab.
    unsafe { slab.free_object(p as *mut u8) };
}

/// A heap of the model, as the shipped unowned free sees it (`Freer`):
/// the heap `tag`, for which the slab's class is warm, but for COLD. OWNER
/// is the only last owner a scenario's slab has, and `returned` its stack,
/// where the scenario has one; COLD lists the slabs it claims on `node`.
/// It notes what the free did: the frees it counted as remote, one entry
/// per push (a run's length, or 1), and whether it claimed the slab from
/// FULL (and adopted or listed it).
struct ModelHeap<'a> {
    tag: usize,
    node: &'a Node,
    returned: Option<&'a AtomicPtr<Slab>>,
    counted: RefCell<Vec<u64>>,
    claimed: Cell<bool>,
}

impl<'a> ModelHeap<'a> {
    fn new(tag: usize, node: &'a Node, returned: Option<&'a AtomicPtr<Slab>>) -> Self {
        ModelHeap {
            tag,
            node,
            returned,
            counted: RefCell::new(Vec::new()),
            claimed: Cell::new(false),
        }
    }
}

impl Freer for ModelHeap<'_> {
    fn tag(&self) -> usize {
        self.tag
    }

    fn count_remote(&self, n: u64) {
        self.counted.borrow_mut().push(n);
    }

    /// Counted as the free it is, as `free::ClassFreer` counts it.
    fn count_given_back(&self) {
        self.counted.borrow_mut().push(1);
    }

    fn returned(&self, tag: usize) -> &AtomicPtr<Slab> {
        assert_eq!(tag, OWNER, "a last owner other than OWNER");
        self.returned
            .expect("a give-back in a scenario whose slab has no last owner")
    }

    /// Onto the local list, as `free::free_owned_slow` frees a block that
    /// does not look free.
    fn free_owned(&self, slab: &Slab, p: *mut u8, suspicion: Suspicion) {
        assert_eq!(suspicion, Suspicion::Clear);
        // SAFETY: `p` is an object of the slab, in use, given up; the heap
        // owns the slab.
        unsafe { slab.free_object(p) };
    }

    /// A cold heap lists the slab on the node, as `free::list_claimed` does
    /// (`release::release`); a warm one adopts it (the model's frees empty
    /// no slab).
    fn keep_claimed(&self, slab: &Slab) {
        self.claimed.set(true);
        if self.tag == COLD {
            self.node.lock.lock();
            list_on_node(self.node, slab);
            self.node.lock.unlock();
        } else {
            slab.adopt(self.tag);
        }
    }

    /// The model's heaps free into a listed slab under the node lock, and
    /// never take it.
    fn adopts_listed(&self, _slab: &Slab, _frees: usize) -> bool {
        false
    }

    fn keep_listed(&self, _slab: &Slab) {
        unreachable!("the model's heaps take no listed slab");
    }
}

/// A free of `p` by the heap `me` into `slab`, which it may not own,
/// through the shipped `Node::free_unowned` (as `free::free_unowned` frees
/// it); `suspicion` is the double-free test as `remote_free::free_slow`
/// read it, once, before the first push (whose losing CAS may already have
/// written a link into `p`). Returns whether `me` claimed the slab.
fn free_by(
    me: usize,
    node: &Node,
    slab: &Slab,
    p: usize,
    suspicion: Suspicion,
    returned: Option<&AtomicPtr<Slab>>,
) -> bool {
    let heap = ModelHeap::new(me, node, returned);
    node.free_unowned(slab, p as *mut u8, suspicion, &heap);
    heap.claimed.get()
}

/// A free by OTHER into a slab that is OWNED or FULL: a push, or the claim
/// of the FULL slab, given back to OWNER through `returned` (adopted if
/// OWNER closed it). Returns whether the freer adopted the slab.
fn free_remote(slab: &Slab, p: usize, returned: &AtomicPtr<Slab>) -> bool {
    free_warm(OTHER, slab, p, returned)
}

/// `free_remote` by the heap `me`, for which the class is warm: a slab it
/// finds it owns (`Push::Mine`) takes the free on its local list; a FULL
/// slab it claims goes back to its last owner unless that is `me` or
/// closed, else `me` adopts it. The slab is never listed: the node is the
/// free's own.
fn free_warm(me: usize, slab: &Slab, p: usize, returned: &AtomicPtr<Slab>) -> bool {
    free_by(me, &Node::new(), slab, p, Suspicion::Clear, Some(returned))
}

/// A free by OTHER, for which the class is warm, into a slab with no last
/// owner (`free_by`): a push if the slab is OWNED; under the node lock if
/// it is LISTED (looking again once the lock is held); the claim of a FULL
/// slab, which the freer adopts. Returns whether the freer claimed the
/// slab.
fn free_unowned(node: &Node, slab: &Slab, p: usize, suspicion: Suspicion) -> bool {
    free_by(OTHER, node, slab, p, suspicion, None)
}

/// A free by a heap for which the class is cold (`free_by`): a FULL slab it
/// claims goes to the node list, not to its heap. Returns whether it
/// claimed the slab.
fn free_cold(node: &Node, slab: &Slab, p: usize) -> bool {
    free_by(COLD, node, slab, p, Suspicion::Clear, None)
}

#[test]
fn remote_frees_reach_the_owner_while_it_frees_and_collects() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, b, c) = (objects[0], objects[1], objects[2]);
        let freers: Vec<_> = [a, b]
            .into_iter()
            .map(|p| {
                thread::spawn(move || {
                    assert_eq!(
                        slab.push_remote(p as *mut u8, OTHER, Suspicion::Clear),
                        Push::Pushed
                    );
                })
            })
            .collect();
        free_local(slab, c);
        // The owner's refills, until both frees have come (loom runs the
        // freers meanwhile): it reads the links they wrote, before it has
        // joined them.
        let mut collected = BTreeSet::new();
        while collected.len() < 2 {
            collect(take_remote(slab), &mut collected);
            thread::yield_now();
        }
        collected_all(slab, freers, &collected, BTreeSet::from([a, b]), c);
    });
}

#[test]
fn the_first_free_of_a_full_slab_races_its_owners_refill() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let a = objects[0];
        let returned = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
        let r = returned.clone();
        let freer = thread::spawn(move || free_remote(slab, a, &r));
        let collected = refill_or_make_full(slab);
        let adopted = freer.join().unwrap();
        assert!(!adopted, "OWNER never closed its stack");
        let free = freed_as_it_went_full(slab, collected, &returned);
        assert_eq!(free, BTreeSet::from([a]));
    });
}

#[test]
fn a_give_back_races_the_owners_exit_and_one_of_them_keeps_the_slab() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        assert!(slab.try_make_full(OWNER));
        let a = objects[0];
        let returned = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
        let r = returned.clone();
        let freer = thread::spawn(move || free_remote(slab, a, &r));
        // The owner exits: it closes its stack and takes what was on it.
        let got = returned.swap(CLOSED, Ordering::Acquire);
        let owner_got_it = got == slab as *const Slab as *mut Slab;
        if owner_got_it {
            // It may use the slab's fields at once (`flush`).
            let mut free = BTreeSet::new();
            collect(slab.local_free.get(), &mut free);
            assert_eq!(free, BTreeSet::from([a]));
            slab.check();
        } else {
            assert!(got.is_null());
        }
        let adopted = freer.join().unwrap();
        assert_ne!(owner_got_it, adopted, "exactly one side keeps the slab");
        let owner = if adopted { OTHER } else { OWNER };
        assert_eq!(slab.owner.load(Ordering::Relaxed), owner);
        assert_eq!(slab.state(), State::Owned);
    });
}

#[test]
fn the_owner_frees_into_its_full_slab_as_a_freer_gives_it_back() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, b) = (objects[0], objects[1]);
        assert!(slab.try_make_full(OWNER));
        let returned = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
        let r = returned.clone();
        let freer = thread::spawn(move || free_remote(slab, a, &r));
        // The owner frees `b` meanwhile: once it sees itself the owner
        // again, on the local list that the freer's claim wrote.
        let adopted = free_warm(OWNER, slab, b, &returned);
        let freer_adopted = freer.join().unwrap();
        assert!(!freer_adopted, "OWNER never closed its stack");
        let given_back = returned.load(Ordering::Relaxed);
        if adopted {
            // The owner claimed it first; the freer pushed onto it.
            assert!(given_back.is_null());
        } else {
            assert_eq!(given_back, slab as *const Slab as *mut Slab);
        }
        assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
        assert_eq!(slab.state(), State::Owned);
        slab.check();
        assert_eq!(free_in_owned(slab), BTreeSet::from([a, b]));
    });
}

#[test]
fn a_take_from_the_node_races_a_free_into_the_listed_slab() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, c, d) = (objects[0], objects[2], objects[3]);
        free_local(slab, c);
        free_local(slab, d);
        let node = Arc::new(Node::new());
        node.lock.lock();
        assert_eq!(slab.begin_listing(), (core::ptr::null_mut(), 0));
        node.add(slab, RemoteFrees::NoneCame);
        node.lock.unlock();
        let n = node.clone();
        // The freer, as `free_unowned`: push if owned, else under the lock.
        let freer = thread::spawn(move || assert!(!free_unowned(&n, slab, a, Suspicion::Clear)));
        take_from_node(&node, slab);
        freer.join().unwrap();
        assert_eq!(free_in_owned(slab), BTreeSet::from([a, c, d]));
        assert_eq!(node.nr_partial.load(Ordering::Relaxed), 0);
        assert_eq!(node.free_objects.load(Ordering::Relaxed), 0);
        assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
    });
}

#[test]
fn a_cold_allocation_from_a_shared_slab_races_a_free_into_it() {
    explore(|| {
        let s = Scenario::new();
        let slab = s.slab();
        let node = Arc::new(Node::new());
        // A fresh shared slab, three of its four objects handed out to
        // cold allocations (`shared::take_shared`).
        node.lock.lock();
        node.add_fresh(slab, class());
        let taken: Vec<usize> = (0..3).map(|_| node.take_object().0 as usize).collect();
        node.lock.unlock();
        assert_eq!(slab.state(), State::Listed);
        let a = taken[0];
        let n = node.clone();
        // The freer of `a`, as `free_unowned`: under the node lock while
        // LISTED; if the slab went FULL meanwhile, its first free claims it
        // and (no last owner) adopts it.
        let freer = thread::spawn(move || free_unowned(&n, slab, a, Suspicion::Clear));
        // Another thread's cold allocation: the last free object.
        node.lock.lock();
        let (d, fresh) = node.take_object();
        node.lock.unlock();
        let adopted = freer.join().unwrap();
        let d = d as usize;
        assert_ne!(d, 0);
        if d == a {
            // The free came first and the take reused `a`.
            assert!(!fresh && !adopted);
        } else {
            assert!(fresh && !taken.contains(&d), "the uncarved object, once");
        }
        let mut free = BTreeSet::new();
        node.lock.lock();
        collect(slab.local_free.get(), &mut free);
        if adopted {
            // The take emptied the slab first: it went FULL, then the free
            // claimed it.
            assert!(fresh);
            assert_eq!(free, BTreeSet::from([a]));
            assert_eq!(slab.state(), State::Owned);
            assert_eq!(slab.owner.load(Ordering::Relaxed), OTHER);
            assert_eq!(node.nr_partial.load(Ordering::Relaxed), 0);
            assert_eq!(node.free_objects.load(Ordering::Relaxed), 0);
        } else {
            // The free came first, or after the take if it took `a` back.
            assert_eq!(slab.state(), State::Listed);
            assert_eq!(slab.uncarved() as usize + free.len(), 1);
            assert_eq!(node.nr_partial.load(Ordering::Relaxed), 1);
            assert_eq!(node.free_objects.load(Ordering::Relaxed), 1);
            assert_eq!(node.frees_listed.load(Ordering::Relaxed), 1);
        }
        assert_eq!(slab.inuse.get(), 3);
        assert_eq!(node.allocs_listed.load(Ordering::Relaxed), 4);
        slab.check();
        node.lock.unlock();
    });
}

#[test]
fn a_remote_free_that_loses_its_push_to_a_listing_is_no_double_free() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, c, d) = (objects[0], objects[2], objects[3]);
        // As an allocation leaves it: no stale link in the first word.
        // SAFETY: `a` is an object of the slab, in use.
        unsafe { clear_link(a as *mut u8) };
        free_local(slab, c);
        free_local(slab, d);
        let node = Arc::new(Node::new());
        let n = node.clone();
        // The freer of `a`. Its push may write its link into `a`, then lose
        // the CAS to the listing below, and find the slab OWNED again when
        // it retries: read then, `a`'s first word would look free, and the
        // push would stop the process with "double free".
        let freer = thread::spawn(move || {
            // SAFETY: `a` is an object of the slab.
            let suspicion = if unsafe { crate::slab::looks_free(a as *mut u8) } {
                Suspicion::DoubleFree
            } else {
                Suspicion::Clear
            };
            assert!(!free_unowned(&n, slab, a, suspicion));
        });
        // The owner gives the slab up, as `release::release` does, and a
        // heap takes it again, as `refill::take_from_node` does.
        node.lock.lock();
        list_on_node(&node, slab);
        node.lock.unlock();
        take_from_node(&node, slab);
        freer.join().unwrap();
        assert_eq!(free_in_owned(slab), BTreeSet::from([a, c, d]));
        assert_eq!(slab.state(), State::Owned);
        assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
    });
}

/// The owner gives the slab up to the node list, as `release::release`
/// does: its lists merged by the shipped `Slab::list_with`, then listed.
/// Node lock held.
fn list_on_node(node: &Node, slab: &Slab) {
    let (_, remote) = slab.list_with(core::ptr::null_mut());
    node.add(slab, remote);
}

#[test]
fn a_cold_free_lists_the_full_slab_it_claims_while_another_frees_into_it() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, b) = (objects[0], objects[1]);
        // FULL with no heap to give it back to, as a shared slab filled on
        // the node is (`make_full_from_listed`).
        assert!(slab.try_make_full(OWNER));
        slab.last_owner.set(0);
        let node = Arc::new(Node::new());
        let n = node.clone();
        let cold = thread::spawn(move || free_cold(&n, slab, a));
        let adopted = free_unowned(&node, slab, b, Suspicion::Clear);
        let listed = cold.join().unwrap();
        assert!(listed != adopted, "exactly one freer claims the slab");
        let mut free = BTreeSet::new();
        if listed {
            // `b` went onto the remote list before the listing merged it,
            // or onto the local list under the node lock after.
            assert_eq!(slab.state(), State::Listed);
            assert_eq!(slab.owner.load(Ordering::Relaxed), 0);
            assert_eq!(node.nr_partial.load(Ordering::Relaxed), 1);
            collect(slab.local_free.get(), &mut free);
            assert_eq!(slab.inuse.get(), 2);
        } else {
            // The other freer adopted it; the cold free was a remote push
            // (counted in `inuse` until the owner takes the remote list).
            assert_eq!(slab.state(), State::Owned);
            assert_eq!(slab.owner.load(Ordering::Relaxed), OTHER);
            assert_eq!(slab.inuse.get(), 3);
            free = free_in_owned(slab);
        }
        assert_eq!(free, BTreeSet::from([a, b]));
        slab.check();
    });
}

/// A sheaf's flush of `run`, objects of a slab that its heap `me` gives up
/// and does not own, as `sheaf::flush_blocks` and `sheaf::flush_run` free
/// them: linked one to the next first (as each block is checked), then
/// through the shipped `Node::free_unowned_run`, one push with nothing left
/// to check, or each block as `free_by` frees it. Returns whether the run
/// went in one push, and whether `me` claimed the slab.
fn flush_run(
    me: usize,
    node: &Node,
    slab: &Slab,
    run: &[usize],
    returned: Option<&AtomicPtr<Slab>>,
) -> (bool, bool) {
    for w in run.windows(2) {
        // SAFETY: objects of the slab, in use, given up by the caller.
        unsafe { set_next(w[0] as *mut u8, w[1] as *mut u8) };
    }
    let blocks: Vec<_> = run
        .iter()
        .map(|&p| core::cell::Cell::new(p as *mut u8))
        .collect();
    let heap = ModelHeap::new(me, node, returned);
    node.free_unowned_run(slab, &blocks, &heap);
    let pushed = *heap.counted.borrow() == [run.len() as u64];
    (pushed, heap.claimed.get())
}

#[test]
fn runs_pushed_by_two_freers_reach_the_owner_while_it_frees_and_collects() {
    explore(|| {
        // Five objects: two runs of two, and one for the owner.
        let s = Scenario::with_class(class_with(5));
        let (slab, objects) = s.owned_and_all_in_use();
        let runs = [[objects[0], objects[1]], [objects[2], objects[3]]];
        let e = objects[4];
        let freers: Vec<_> = runs
            .into_iter()
            .zip([OTHER, THIRD])
            .map(|(run, me)| {
                thread::spawn(move || {
                    assert_eq!(flush_run(me, &Node::new(), slab, &run, None), (true, false))
                })
            })
            .collect();
        free_local(slab, e);
        // The owner's refills, until both runs have come (loom runs the
        // freers meanwhile): it reads the links they wrote, before it has
        // joined them. Both come within 8 refills in every interleaving; the
        // bound fails a lost block here, not at loom's branch limit.
        let mut collected = BTreeSet::new();
        let mut refills = 0;
        while collected.len() < 4 {
            collect(take_remote(slab), &mut collected);
            refills += 1;
            assert!(refills < 64, "only {collected:?} came");
            thread::yield_now();
        }
        let pushed = BTreeSet::from_iter(runs.into_iter().flatten());
        collected_all(slab, freers, &collected, pushed, e);
    });
}

#[test]
fn a_run_pushed_as_the_owner_lists_the_slab_is_merged_or_freed_block_by_block() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, b, c) = (objects[0], objects[1], objects[2]);
        free_local(slab, c);
        let node = Arc::new(Node::new());
        let n = node.clone();
        // The flush of the run `a`, `b`: one push, or, if the slab is not
        // OWNED, each block as `free_unowned` frees it, with no double-free
        // test (the links the lost push wrote would look free, and the
        // slab may be OWNED again when the block's push comes), claiming
        // nothing. Returns whether the run was pushed.
        let freer = thread::spawn(move || {
            let (pushed, claimed) = flush_run(OTHER, &n, slab, &[a, b], None);
            assert!(!claimed);
            pushed
        });
        // The owner gives the slab up; a heap takes it again.
        node.lock.lock();
        let (free, merged) = slab.list_with(core::ptr::null_mut());
        node.add(slab, merged);
        node.lock.unlock();
        take_from_node(&node, slab);
        let pushed = freer.join().unwrap();
        // A run that landed before the listing is merged whole.
        assert_eq!(free, if merged == RemoteFrees::Came { 3 } else { 1 });
        assert!(merged == RemoteFrees::NoneCame || pushed);
        assert_eq!(slab.state(), State::Owned);
        assert_eq!(slab.owner.load(Ordering::Relaxed), OWNER);
        assert_eq!(node.nr_partial.load(Ordering::Relaxed), 0);
        assert_eq!(node.free_objects.load(Ordering::Relaxed), 0);
        slab.check();
        assert_eq!(free_in_owned(slab), BTreeSet::from([a, b, c]));
    });
}

#[test]
fn a_run_pushed_as_the_slab_goes_full_lands_or_is_freed_block_by_block() {
    explore(|| {
        let s = Scenario::new();
        let (slab, objects) = s.owned_and_all_in_use();
        let (a, b) = (objects[0], objects[1]);
        let returned = Arc::new(AtomicPtr::new(core::ptr::null_mut()));
        let r = returned.clone();
        // The flush of the run `a`, `b`: one push, or, the slab FULL, each
        // block as `free_remote` frees it (no double-free test): `a`
        // claims the slab and gives it back to OWNER (no adoption), `b` is
        // pushed.
        let freer = thread::spawn(move || {
            let (pushed, adopted) = flush_run(OTHER, &Node::new(), slab, &[a, b], Some(&r));
            assert!(!adopted);
            pushed
        });
        let collected = refill_or_make_full(slab);
        let pushed = freer.join().unwrap();
        assert_eq!(collected.is_some(), pushed);
        let free = freed_as_it_went_full(slab, collected, &returned);
        assert_eq!(free, BTreeSet::from([a, b]));
    });
}
