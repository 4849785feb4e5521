//! Zero-size blocks' unit tests: the list's rebuild in a forked child.

use super::*;
use crate::alloc;
use crate::segment::slab_of;
use crate::stats::stats;
use crate::sync::{AtomicPtr, Ordering};
use crate::walk::walk;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;

/// The live zero-size blocks, by the statistics, which the walk's
/// recount must equal.
fn live_counted() -> u64 {
    let counted = stats().totals.zero_size_blocks;
    assert_eq!(walk().zero_size_blocks, counted, "the walk disagrees");
    counted
}

/// The slabs of zero-size blocks out of their segments.
fn zero_slabs() -> usize {
    let mut n = 0;
    segment::for_each_slab(|s| n += owns(s) as usize);
    n
}

/// The child's part: `full`, the blocks of a full slab from before
/// the fork; `taken`, the slab the lost thread took and had not listed.
fn child(full: &[*mut u8], taken: *mut Slab) {
    assert!(!ORPHAN_LOCK.is_locked());
    assert_eq!(live_counted(), BLOCKS as u64);
    {
        let _g = ORPHAN_LOCK.guard();
        // SAFETY: the lost thread's slab, live; the lock is held.
        let listed = unsafe { (*taken).on_partial.get() };
        // Unmarked, its first free would list it a second time.
        assert!(listed, "the lost thread's slab listed unmarked");
    }
    let mine: Vec<*mut u8> = (0..=BLOCKS).map(|_| alloc::malloc(0)).collect();
    assert!(mine.iter().all(|p| !p.is_null()));
    // The lost thread's slab, whose blocks are all free, serves first.
    let in_taken = mine.iter().filter(|&&p| slab_of(p) == taken).count();
    assert_eq!(
        in_taken, BLOCKS as usize,
        "blocks of the lost thread's slab"
    );
    assert_eq!(live_counted(), 2 * BLOCKS as u64 + 1);
    for &p in full.iter().chain(&mine) {
        // SAFETY: live blocks of ours, freed once each.
        unsafe {
            assert_eq!(alloc::usable_size(p), 0);
            alloc::free(p);
        }
    }
    assert_eq!(live_counted(), 0);
    give_back_empty();
    assert_eq!(zero_slabs(), 0, "slabs of zero-size blocks stayed out");
}

/// A thread lost at a fork while it held the orphan heap's lock in
/// `alloc`, with a slab taken for zero-size blocks and not yet listed
/// (the list was empty: the other slab is full). The child has a fresh
/// orphan heap (`heap::repair_orphan_in_child`) and must list that slab
/// again (`rebuild_in_child`): it serves the child's first blocks, the
/// counts stay exact, and every slab goes back to its segment once the
/// child has freed every block.
#[test]
fn a_forked_child_lists_the_zero_size_slab_a_lost_thread_took() {
    static TAKEN: AtomicPtr<Slab> = AtomicPtr::new(core::ptr::null_mut());
    static RELEASE: AtomicBool = AtomicBool::new(false);
    // A small block first, as any program makes: the process's start
    // (`heap_start`), which installs the fork handlers.
    // SAFETY: a block of ours, freed once.
    unsafe { alloc::free(alloc::malloc(16)) };
    let full: Vec<*mut u8> = (0..BLOCKS).map(|_| alloc::malloc(0)).collect();
    assert!(full.iter().all(|p| !p.is_null()));
    let lost = std::thread::spawn(|| {
        let _g = ORPHAN_LOCK.guard();
        let list = &orphan_heap().zero.partial;
        assert!(list.is_empty());
        let s = new_slab();
        assert!(!s.is_null());
        TAKEN.store(s, Ordering::Release);
        while !RELEASE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // The rest of `alloc`'s listing, after the fork.
        // SAFETY: the slab just made, on no list; the lock is held.
        let slab = unsafe { &*s };
        list.push_front(slab);
        slab.on_partial.set(true);
    });
    let mut taken = TAKEN.load(Ordering::Acquire);
    while taken.is_null() {
        // A failed assert in the thread ends it before it takes the slab.
        assert!(!lost.is_finished(), "the lost thread ended early");
        std::thread::yield_now();
        taken = TAKEN.load(Ordering::Acquire);
    }
    // SAFETY: the child runs the allocator's code and this test's, and
    // ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: the alarm's default action ends a hung child.
        unsafe { libc::alarm(20) };
        let ok = std::panic::catch_unwind(AssertUnwindSafe(|| child(&full, taken))).is_ok();
        // SAFETY: ends the child without the parent's exit handlers.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    RELEASE.store(true, Ordering::Release);
    lost.join().unwrap();
    let mut status = 0;
    // SAFETY: `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed: wait status {status:#x} (--nocapture shows its panic)"
    );
    for &p in &full {
        // SAFETY: live blocks of ours, freed once each.
        unsafe { alloc::free(p) };
    }
    give_back_empty();
}
