//! The sheaves (`src/sheaf.rs`): a thread's freed blocks wait in its sheaf
//! for its next allocations, bounded per class, and go back to their slabs
//! when the sheaf overflows, when the thread exits or trims, and when the
//! class goes idle.

use std::thread;

/// A warm class of 256-byte blocks (256 per slab, a sheaf of 32), out of
/// the harness's way.
const SIZE: usize = 250;

/// A fresh process whose test goes on (`Some`) if it has sheaves. Debug
/// mode has none (every free takes the slow path, where its checks are):
/// there the test checks that instead, that blocks freed and allocated
/// again never pass through a sheaf, and goes no further.
fn with_sheaves() -> Option<()> {
    crate::fresh_process_per_thread_sheaves()?;
    if std::env::var_os("SLUBMALLOC_DEBUG").is_some_and(|v| v == "1") {
        drop(blocks(4 * 256));
        drop(blocks(8));
        let c = class();
        assert!(c.objects_total > 0, "the class was not used");
        assert_eq!(
            (c.alloc_sheaf, c.free_sheaf),
            (0, 0),
            "debug mode passed blocks through a sheaf"
        );
        eprintln!("debug mode: no block passed through a sheaf, the sheaves' checks do not apply");
        return None;
    }
    Some(())
}

fn class() -> slubmalloc::CacheStats {
    *slubmalloc::stats().cache_for_size(SIZE).unwrap()
}

/// `n` blocks of the class, each written.
fn blocks(n: usize) -> Vec<Box<[u8]>> {
    (0..n)
        .map(|i| vec![i as u8; SIZE].into_boxed_slice())
        .collect()
}

/// Grows the calling thread's sheaf of the class to its most (32 blocks),
/// as a thread that reuses what it frees does: rounds that allocate past
/// the emptied sheaf, then overflow it (`sheaf_budget`).
fn grow_sheaf() {
    for _ in 0..4 {
        drop(blocks(300));
    }
}

/// A block freed last is the next one handed out: blocks taken from the
/// sheaf and freed again in order come back in the reverse order.
#[test]
fn the_block_freed_last_is_handed_out_first() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    grow_sheaf();
    drop(blocks(4 * 256));
    // The sheaf holds the last blocks freed; 8 of them are taken from it.
    let before = class();
    let again = blocks(8);
    let addrs: Vec<*const u8> = again.iter().map(|b| b.as_ptr()).collect();
    let after = class();
    assert_eq!(after.alloc_sheaf - before.alloc_sheaf, 8, "{after:?}");
    drop(again);
    // Freed in order 0..8: handed out again 7, 6, ..., 0.
    let third = blocks(8);
    let back: Vec<*const u8> = third.iter().map(|b| b.as_ptr()).collect();
    let reversed: Vec<*const u8> = addrs.iter().rev().copied().collect();
    assert_eq!(back, reversed);
}

/// A sheaf holds at most its capacity: freeing many blocks of a class
/// leaves at most 32 of them waiting, the rest flushed back to their slabs,
/// which go back to their segments as they empty.
#[test]
fn a_sheaf_holds_at_most_its_capacity() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let before = class();
    drop(blocks(20 * 256));
    let c = class();
    assert!(c.sheaf_objects <= 32, "{c:?}");
    assert!(c.sheaf_objects > 0, "{c:?}");
    assert_eq!(
        c.sheaf_flushed - before.sheaf_flushed + c.sheaf_objects - before.sheaf_objects
            + c.barn_objects
            - before.barn_objects,
        c.free_sheaf - before.free_sheaf,
        "every block that went on the sheaf is on it, in the barn or flushed {c:?}"
    );
    assert!(c.slabs <= before.slabs + 3, "{before:?} {c:?}");
}

/// A thread that exits gives back what its sheaves hold: the blocks go
/// back to their slabs, which go back to their segments once empty.
#[test]
fn a_thread_that_exits_gives_its_sheaves_back() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let before = class();
    let held = thread::spawn(|| {
        // Blocks of several slabs, freed by this thread: its sheaf keeps
        // the last 32, which live in slabs it gave up at exit.
        let v = blocks(3 * 256);
        drop(v);
        class().sheaf_objects
    })
    .join()
    .unwrap();
    assert!(
        held > before.sheaf_objects,
        "the thread's sheaf held blocks"
    );
    let c = class();
    assert_eq!(c.sheaf_objects, before.sheaf_objects, "{c:?}");
    assert_eq!(c.objects_in_use, before.objects_in_use, "{c:?}");
    assert!(c.slabs <= before.slabs + 1, "{before:?} {c:?}");
    assert_eq!(slubmalloc::check_stats(), 0);
}

/// `trim()` flushes the calling thread's sheaves before it gives free
/// slabs back.
#[test]
fn trim_gives_the_threads_sheaves_back() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    drop(blocks(3 * 256));
    assert!(class().sheaf_objects > 0);
    slubmalloc::trim();
    let c = class();
    assert_eq!(c.sheaf_objects, 0, "{c:?}");
    assert_eq!(slubmalloc::check_stats(), 0);
}

/// A thread that frees everything it allocated and then waits, as a thread
/// pool's idle worker does: before `thread_idle` it keeps at most its
/// sheaf (32 blocks and 16 KiB of a class) and 32 partial slabs; after it,
/// nothing more than its exit would have left (its active slab given up
/// too: a trim then gives back as many of the class's slabs as after its
/// exit). Blocks of 1,000 bytes: the worker's own channels live in the
/// 256-byte class.
#[test]
fn an_idle_thread_keeps_its_bounded_caches_until_it_calls_thread_idle() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    const IDLE_SIZE: usize = 1000;
    let class = || *slubmalloc::stats().cache_for_size(IDLE_SIZE).unwrap();
    let before = class();
    let (step, steps) = std::sync::mpsc::channel::<()>();
    let (idle_tx, idle) = std::sync::mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        // 100 slabs' worth, freed in an order that leaves every slab
        // partly free for a while.
        let per_slab = class().objects_per_slab as usize;
        let mut v: Vec<Option<Box<[u8]>>> = (0..100 * per_slab)
            .map(|i| Some(vec![i as u8; IDLE_SIZE].into_boxed_slice()))
            .collect();
        for k in (0..v.len()).step_by(2).chain((1..v.len()).step_by(2)) {
            v[k] = None;
        }
        idle_tx.send(()).unwrap();
        steps.recv().unwrap();
        slubmalloc::thread_idle();
        idle_tx.send(()).unwrap();
        steps.recv().unwrap();
    });
    idle.recv().unwrap();
    let kept = class();
    let sheaf = kept.sheaf_objects - before.sheaf_objects;
    assert!(sheaf > 0, "{kept:?}");
    assert!(
        sheaf <= 32 && sheaf * kept.object_size <= 16 << 10,
        "an idle thread's sheaf holds at most 32 blocks and 16 KiB of a class: {kept:?}"
    );
    assert!(
        kept.thread_partial_slabs - before.thread_partial_slabs <= 32,
        "an idle thread keeps at most 32 partial slabs of a class: {kept:?}"
    );
    step.send(()).unwrap();
    idle.recv().unwrap();
    let c = class();
    assert_eq!(
        (c.sheaf_objects, c.thread_partial_slabs),
        (before.sheaf_objects, before.thread_partial_slabs),
        "thread_idle left the thread's caches: {c:?}"
    );
    assert_eq!(slubmalloc::check_stats(), 0);
    slubmalloc::trim();
    let idle_slabs = class().slabs;
    step.send(()).unwrap();
    worker.join().unwrap();
    slubmalloc::trim();
    let exited = class();
    assert_eq!(
        idle_slabs, exited.slabs,
        "the idle thread kept slabs its exit gave up: {exited:?}"
    );
}

/// Blocks another thread allocated are reused by the thread that frees
/// them, from its sheaf, without a trip through their slab's remote list.
#[test]
fn blocks_freed_by_another_thread_serve_that_threads_allocations() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    // Past the objects a cold class takes from shared slabs: warm here,
    // its sheaf grown.
    grow_sheaf();
    let warm = blocks(64);
    // 20 blocks: the vectors that hold them are of another class.
    let made = thread::spawn(|| blocks(20)).join().unwrap();
    let addrs: Vec<usize> = made.iter().map(|b| b.as_ptr() as usize).collect();
    let before = class();
    drop(made);
    let again = blocks(20);
    let after = class();
    assert_eq!(after.free_remote, before.free_remote, "{after:?}");
    assert_eq!(after.alloc_sheaf - before.alloc_sheaf, 20, "{after:?}");
    assert!(again.iter().all(|b| addrs.contains(&(b.as_ptr() as usize))));
    drop((again, warm));
}

/// Another thread, warm for the class too, that frees `5 * 32` blocks
/// this thread allocated: three of its full sheaves at least go to the
/// barn. It then stays alive (its exit would flush the barns) until
/// `finish`.
struct Freer {
    /// The addresses of the blocks it freed.
    addrs: Vec<usize>,
    done: std::sync::mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

impl Freer {
    fn start() -> Freer {
        let given = blocks(5 * 32);
        let addrs = given.iter().map(|b| b.as_ptr() as usize).collect();
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (done, done_rx) = std::sync::mpsc::channel::<()>();
        // A channel allocates at its first message: here, so that the
        // thread's message after its frees calls no allocation slow path,
        // which flushes the barns when a purge is due.
        freed_tx.send(()).unwrap();
        freed_rx.recv().unwrap();
        let thread = thread::spawn(move || {
            grow_sheaf();
            drop(given);
            freed_tx.send(()).unwrap();
            done_rx.recv().unwrap();
        });
        freed_rx.recv().unwrap();
        Freer {
            addrs,
            done,
            thread,
        }
    }

    /// Lets the thread exit, and waits for it.
    fn finish(self) {
        self.done.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// A thread that frees more than its sheaf holds of blocks other threads
/// allocated puts its full sheaves in the class's barn; a thread whose sheaf
/// and detached list run empty takes them before it carves its slab
/// further; `trim()` flushes the barn, as a thread's exit does.
#[test]
fn blocks_one_thread_frees_serve_another_through_the_barn() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let warm = blocks(64);
    let before = class();
    let freer = Freer::start();
    let after_free = class();
    assert!(
        after_free.barn_objects >= before.barn_objects + 3 * 32,
        "{before:?} {after_free:?}"
    );
    // This thread's detached list runs dry, then its sheaf comes from the
    // barn: blocks it allocated before and the other thread freed.
    let again = blocks(2 * 256);
    let after_alloc = class();
    assert!(
        after_alloc.barn_objects < after_free.barn_objects,
        "{after_free:?} {after_alloc:?}"
    );
    assert!(again
        .iter()
        .any(|b| freer.addrs.contains(&(b.as_ptr() as usize))));
    assert_eq!(slubmalloc::check_stats(), 0);
    slubmalloc::trim();
    assert_eq!(class().barn_objects, 0);
    freer.finish();
    assert_eq!(slubmalloc::check_stats(), 0);
    drop((again, warm));
}

/// A thread's exit flushes the barns: what threads left there does not
/// wait for a trim.
#[test]
fn a_thread_that_exits_flushes_the_barns() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let warm = blocks(64);
    let freer = Freer::start();
    assert!(class().barn_objects >= 3 * 32, "{:?}", class());
    freer.finish();
    assert_eq!(class().barn_objects, 0, "{:?}", class());
    assert_eq!(slubmalloc::check_stats(), 0);
    drop(warm);
}

/// The background purger flushes the barns before it purges, one purge
/// delay after a sheaf went there: threads that stop calling the allocator
/// do not keep what the barns hold.
#[test]
fn the_background_purger_flushes_the_barns() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    if std::env::var_os("SLUBMALLOC_BACKGROUND_PURGE").is_some_and(|v| v == "0") {
        eprintln!("skipped: the background purger is off");
        return;
    }
    let warm = blocks(64);
    let freer = Freer::start();
    assert!(class().barn_objects >= 3 * 32, "{:?}", class());
    // Neither thread calls the allocator now: the purge delay (100 ms by
    // default) passes, and the purger's purge flushes the barn.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while class().barn_objects != 0 && std::time::Instant::now() < deadline {
        thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(class().barn_objects, 0, "{:?}", class());
    assert!(slubmalloc::stats().totals.background_purges > 0);
    freer.finish();
    assert_eq!(slubmalloc::check_stats(), 0);
    drop(warm);
}

/// A sheaf starts small and grows on demand: a class that warms up gets a
/// sheaf of a kilobyte of blocks (4 of 256 bytes); a thread that frees
/// what it allocated, and allocates again past its empty sheaf, doubles
/// it at each overflow that follows such a miss, up to its most (32).
#[test]
fn a_sheaf_starts_small_and_grows_while_its_thread_reuses_what_it_frees() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let before = class();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (seen_tx, seen) = std::sync::mpsc::channel();
    let worker = thread::spawn(move || {
        // Warm, nothing freed yet: the start.
        let v = blocks(300);
        seen_tx.send(class().sheaf_capacity).unwrap();
        rx.recv().unwrap();
        drop(v);
        // Rounds of reuse: each allocates past the emptied sheaf, then
        // overflows it again.
        grow_sheaf();
        seen_tx.send(class().sheaf_capacity).unwrap();
        rx.recv().unwrap();
    });
    let start = seen.recv().unwrap() - before.sheaf_capacity;
    assert_eq!(start, 4, "a warm class's sheaf starts at 1 KiB of blocks");
    tx.send(()).unwrap();
    let grown = seen.recv().unwrap() - before.sheaf_capacity;
    assert_eq!(grown, 32, "reuse grows the sheaf to its most");
    tx.send(()).unwrap();
    worker.join().unwrap();
    assert_eq!(
        class().sheaf_capacity,
        before.sheaf_capacity,
        "an exited thread's sheaf holds nothing"
    );
}

/// A thread that only frees blocks another thread allocated never misses:
/// its sheaf grows once at most (its own first allocations warmed the
/// class), however many it frees; its full sheaves go to the barn or back
/// to their slabs.
#[test]
fn a_thread_that_only_frees_what_others_allocate_keeps_a_small_sheaf() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    let given = blocks(2_000);
    let before = class();
    let cap = thread::spawn(move || {
        // Warm for the class: 64 blocks of its own, kept.
        let own = blocks(64);
        drop(given);
        let cap = class().sheaf_capacity;
        drop(own);
        cap
    })
    .join()
    .unwrap();
    assert!(
        cap - before.sheaf_capacity <= 8,
        "a freeing thread's sheaf grew past twice its start: {}",
        cap - before.sheaf_capacity
    );
}

/// A class its thread stops freeing shrinks back as the thread's other
/// sheaves overflow (the scavenger halves the capacity of every class whose
/// sheaf neither overflowed nor ran empty since its last pass), flushing
/// what no longer fits; and
/// `thread_idle` brings every capacity back to its start.
#[test]
fn a_class_its_thread_stops_using_gives_its_sheaf_back() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    const OTHER: usize = 100;
    let other = || *slubmalloc::stats().cache_for_size(OTHER).unwrap();
    let before = class();
    let (grown, shrunk, scavenged, idle) = thread::spawn(|| {
        grow_sheaf();
        let grown = class().sheaf_capacity;
        // Another class, freed and allocated again: many overflows of its
        // sheaf, none of this one's.
        for _ in 0..200 {
            let v: Vec<Box<[u8]>> = (0..200)
                .map(|_| vec![1u8; OTHER].into_boxed_slice())
                .collect();
            drop(v);
        }
        let c = class();
        slubmalloc::thread_idle();
        (
            grown,
            c.sheaf_capacity,
            c.sheaf_scavenged,
            class().sheaf_capacity,
        )
    })
    .join()
    .unwrap();
    let start = 4;
    assert_eq!(grown - before.sheaf_capacity, 32, "the sheaf did not grow");
    assert_eq!(
        shrunk - before.sheaf_capacity,
        start,
        "the class the thread stopped using kept its capacity"
    );
    assert!(
        scavenged > before.sheaf_scavenged,
        "the shrink flushed nothing"
    );
    assert_eq!(
        idle - before.sheaf_capacity,
        start,
        "thread_idle left a capacity above the start"
    );
    assert!(other().sheaf_capacity >= before.sheaf_capacity);
}

/// The threads together take at most the process's pool of sheaf budget
/// (32 MiB) beyond what each may grow on its own (64 KiB): 160 threads
/// that each grow the sheaves of 32 classes of 1-15 KiB to their most
/// (about 340 KiB beyond their starts each, 53 MiB in all) hold no more
/// than the pool, their own budgets and their starts; all of it comes back
/// as they exit.
#[test]
fn the_threads_sheaves_grow_within_the_process_pool() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    const THREADS: usize = 160;
    // 32 classes from 1 KiB to 15 KiB, 8 per doubling: their sheaves grow
    // from one block to 16 KiB of blocks.
    let sizes: Vec<usize> = (0..32)
        .map(|i| (1024 << (i / 8)) + (128 << (i / 8)) * (i % 8))
        .collect();
    let capacity = || -> u64 {
        let s = slubmalloc::stats();
        sizes
            .iter()
            .map(|&n| {
                let c = s.cache_for_size(n).unwrap();
                c.sheaf_capacity * c.object_size
            })
            .sum()
    };
    let before = capacity();
    let grown = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
    let measured = std::sync::Arc::new(std::sync::Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (sizes, grown, measured) = (sizes.clone(), grown.clone(), measured.clone());
            thread::spawn(move || {
                // Rounds of reuse: each doubles every sheaf not at its most.
                for _ in 0..6 {
                    for &n in &sizes {
                        let v: Vec<Box<[u8]>> =
                            (0..20).map(|_| vec![1u8; n].into_boxed_slice()).collect();
                        drop(v);
                    }
                }
                grown.wait();
                measured.wait();
            })
        })
        .collect();
    grown.wait();
    let held = capacity() - before;
    let taken = slubmalloc::stats().totals.sheaf_budget_taken;
    measured.wait();
    for t in threads {
        t.join().unwrap();
    }
    let starts: u64 = sizes
        .iter()
        .map(|&n| slubmalloc::class_size(n).unwrap() as u64)
        .sum();
    let bound = THREADS as u64 * ((64 << 10) + starts) + (32 << 20);
    eprintln!("the sheaves may hold {held} bytes, at most {bound}");
    assert!(
        held <= bound,
        "the sheaves may hold {held} bytes, beyond the budgets' {bound}"
    );
    assert!(
        held > bound - (8 << 20),
        "the sheaves did not grow to the budgets: {held} of {bound}"
    );
    assert_eq!(capacity(), before, "exited threads' sheaves hold capacity");
    // The pool, taken in 64 KiB steps, is all taken; and all given back.
    assert_eq!(taken, 32 << 20, "the budget taken from the pool");
    assert_eq!(slubmalloc::stats().totals.sheaf_budget_taken, 0);
}

/// Only a thread's own heap has sheaves. A thread past its exit (in a
/// pthread key destructor that runs after the allocator's: glibc runs them
/// in the keys' order, and the allocator's key is the process's first)
/// allocates from the orphan heap, where a class warms up as anywhere, but
/// no fast path reaches that heap: it gets no sheaf capacity, and none is
/// counted.
#[test]
fn a_thread_past_its_exit_warms_a_class_without_a_sheaf() {
    let Some(_fresh) = with_sheaves() else {
        return;
    };
    // A class nothing else of the process uses.
    const LATE: usize = 3000;
    unsafe extern "C" fn allocate_late(_: *mut libc::c_void) {
        let v: Vec<Box<[u8]>> = (0..64)
            .map(|_| vec![1u8; LATE].into_boxed_slice())
            .collect();
        drop(v);
    }
    thread::spawn(|| {
        let mut key = 0;
        // SAFETY: a key with a destructor that takes no data from its value.
        unsafe {
            assert_eq!(libc::pthread_key_create(&mut key, Some(allocate_late)), 0);
            assert_eq!(libc::pthread_setspecific(key, 1 as *const libc::c_void), 0);
        }
    })
    .join()
    .unwrap();
    let c = *slubmalloc::stats().cache_for_size(LATE).unwrap();
    // Every allocation of the orphan heap takes the slow path: a thread's
    // own heap would have served most of them on the fast path.
    assert!(c.alloc_slow >= 64, "the destructor did not allocate: {c:?}");
    assert_eq!(
        c.alloc_fast + c.alloc_sheaf,
        0,
        "the destructor ran on the thread's own heap: {c:?}"
    );
    assert_eq!(c.sheaf_capacity, 0, "the orphan heap got a sheaf: {c:?}");
}
