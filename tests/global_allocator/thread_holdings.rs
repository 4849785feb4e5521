//! What a thread keeps of a class's slabs: its partial list within a bound
//! of free objects (`release::partial_bound`), the surplus on the node list
//! where every thread finds it.

use std::sync::mpsc::channel;
use std::thread;

use crate::stats_exact::quiet_stats;

/// Bytes per block: a class of 256 objects per slab, whose threads keep at
/// most 104 free objects on their partial lists.
const SIZE: usize = 256;
const PER_SLAB: usize = 65536 / SIZE;
const BOUND: u64 = 104;
/// The blocks of each slab the other thread frees.
const FREED_PER_SLAB: usize = 8;

fn class(s: &slubmalloc::Stats) -> slubmalloc::CacheStats {
    *s.cache_for_size(SIZE).unwrap()
}

/// One thread fills 40 slabs; another frees 8 blocks of each and exits, so
/// that every slab, FULL, is claimed and handed back to the filler with 8
/// free blocks. The filler's next refill takes them within its bound: at
/// most 104 free objects (13 slabs) stay on its partial list, the rest go
/// to the node list (without the bound it kept 32 and listed 7). A third
/// thread then allocates those free blocks from the node's slabs, taking no
/// new slab.
#[test]
fn a_threads_partial_slabs_stay_within_the_bound_and_the_surplus_serves_another_thread() {
    // Debug mode's slabs are the orphan heap's, no thread's.
    if crate::debug_mode() {
        return;
    }
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let c = filler_refills_with_slabs_handed_back(4 * FREED_PER_SLAB, || ());
    assert!(
        c.thread_partial_slabs * FREED_PER_SLAB as u64 <= BOUND,
        "the filler kept {} partial slabs of {FREED_PER_SLAB} free blocks: {c:?}",
        c.thread_partial_slabs
    );
}

/// As above in a crowded program (per-CPU mode, more than 4 threads with a
/// heap per CPU: `cpu_sheaf::crowding`), whose threads keep no partial
/// slabs: the slabs handed back to the filler go on to the node list as
/// its refill takes them (`keep_partial`'s `release::unless_crowded`). The
/// filler allocates its active slab's 8 remote frees and one more, the
/// refill that takes them, and no further: a later trade of its active slab
/// would send the list on too.
#[test]
fn a_crowded_programs_thread_keeps_no_partial_slab() {
    let Some(()) = crate::percpu::with_percpu() else {
        return;
    };
    let crowd = crate::Crowd::of(2 * 4);
    let c = filler_refills_with_slabs_handed_back(FREED_PER_SLAB + 1, || ());
    assert_eq!(
        c.thread_partial_slabs,
        0,
        "{} threads parked: {c:?}",
        crowd.len()
    );
    drop(crowd);
}

/// A thread's partial slabs from before its program became crowded go to
/// the node list when its active slab next runs out (the refill's trade,
/// `release::unless_crowded`): the filler of the bound's test, once
/// crowded, allocates two slabs' worth and keeps no partial slab.
#[test]
fn a_thread_that_becomes_crowded_hands_its_partial_slabs_on() {
    let Some(()) = crate::percpu::with_percpu() else {
        return;
    };
    filler_refills_with_slabs_handed_back(4 * FREED_PER_SLAB, || {
        let before = class(&quiet_stats());
        assert!(before.thread_partial_slabs >= 4, "{before:?}");
        let crowd = crate::Crowd::of(2 * 4);
        let more: Vec<Box<[u8]>> = (0..2 * PER_SLAB)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect();
        let c = class(&quiet_stats());
        assert_eq!(
            c.thread_partial_slabs,
            0,
            "{} threads parked: {c:?}",
            crowd.len()
        );
        drop((more, crowd));
    });
}

/// The tests' shape: the statistics of the class once the filler took the
/// slabs handed back to it (and allocated `more_blocks` blocks); then
/// checks that another thread allocates the node's free blocks without a
/// new slab, and the filler runs `then` before it exits.
fn filler_refills_with_slabs_handed_back(
    more_blocks: usize,
    then: impl FnOnce() + Send + 'static,
) -> slubmalloc::CacheStats {
    let slabs = 40;
    let blocks = slabs * PER_SLAB;
    let (to_main, from_filler) = channel::<Vec<Box<[u8]>>>();
    let (to_filler, from_main) = channel::<()>();
    let filler = thread::spawn(move || {
        let filled: Vec<Box<[u8]>> = (0..blocks)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect();
        to_main.send(filled).unwrap();
        from_main.recv().unwrap();
        // Past the active slab's remote frees: the refill takes the slabs
        // handed back.
        let more: Vec<Box<[u8]>> = (0..more_blocks)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect();
        to_main.send(more).unwrap();
        from_main.recv().unwrap();
        then();
    });
    let mut filled = from_filler.recv().unwrap();
    let freed: Vec<Box<[u8]>> = (0..filled.len())
        .rev()
        .filter(|i| i % (PER_SLAB / FREED_PER_SLAB) == 0)
        .map(|i| filled.swap_remove(i))
        .collect();
    // Its exit flushes its sheaves and the barns onto the slabs.
    thread::spawn(move || drop(freed)).join().unwrap();
    let s = quiet_stats();
    assert!(class(&s).returned_slabs >= 30, "{:?}", class(&s));
    to_filler.send(()).unwrap();
    let more = from_filler.recv().unwrap();
    let s = quiet_stats();
    let c = class(&s);
    assert_eq!(c.returned_slabs, 0, "{c:?}");
    assert!(c.node_partial_slabs >= 20, "{c:?}");
    // Another thread allocates the listed slabs' free blocks: no new slab.
    let listed_free = c.partial_free_objects as usize;
    let taken = thread::spawn(move || {
        (0..listed_free)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    let after = class(&quiet_stats());
    assert_eq!(after.slabs, c.slabs, "a new slab was taken: {after:?}");
    drop((filled, more, taken));
    to_filler.send(()).unwrap();
    filler.join().unwrap();
    c
}

/// A class whose slabs another thread frees into while their owner does
/// not allocate from them hands them on at a sweep of the owner's slow
/// paths (every 64th): one thread fills 3 slabs of 2304 B, another frees
/// every block and exits, and the first then takes slow paths of another
/// class only. Its slabs of 2304 B (its active slab, whose blocks wait on
/// its remote list, and the one handed back) go to the node list and,
/// empty, back to their segments; without the sweep the thread keeps them.
#[test]
fn a_class_that_gets_remote_frees_and_no_allocation_hands_its_slabs_on() {
    if crate::debug_mode() {
        return;
    }
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    const SWEPT: usize = 2304;
    let swept = |s: &slubmalloc::Stats| *s.cache_for_size(SWEPT).unwrap();
    let (to_main, from_owner) = channel::<Vec<Box<[u8]>>>();
    let (to_owner, from_main) = channel::<()>();
    let owner = thread::spawn(move || {
        let filled: Vec<Box<[u8]>> = (0..3 * (65536 / SWEPT))
            .map(|i| vec![i as u8; SWEPT].into_boxed_slice())
            .collect();
        to_main.send(filled).unwrap();
        from_main.recv().unwrap();
        // Slow paths of another class only (a fresh slab of 1 KiB blocks
        // is carved 4 blocks at a time): at least two sweeps.
        let other: Vec<Box<[u8]>> = (0..1024)
            .map(|i| vec![i as u8; 1024].into_boxed_slice())
            .collect();
        to_main.send(other).unwrap();
        from_main.recv().unwrap();
    });
    let filled = from_owner.recv().unwrap();
    thread::spawn(move || drop(filled)).join().unwrap();
    let before = swept(&quiet_stats());
    assert!(before.active_slabs >= 1 && before.slabs >= 3, "{before:?}");
    to_owner.send(()).unwrap();
    let other = from_owner.recv().unwrap();
    let after = swept(&quiet_stats());
    assert_eq!(after.active_slabs, before.active_slabs - 1, "{after:?}");
    assert_eq!(after.returned_slabs, 0, "{after:?}");
    assert!(
        after.slabs_freed >= before.slabs_freed + 2,
        "{before:?} then {after:?}"
    );
    drop(other);
    to_owner.send(()).unwrap();
    owner.join().unwrap();
}
