//! The statistics are exact: after a concurrent workload, a walk of every
//! list and slab agrees with the incremental counters, class by class.

use std::sync::{Arc, Barrier, Mutex};
use std::thread;

/// Compares a walk with the counters at a quiet moment: the test harness's
/// own thread may allocate while it reports the previous test, so take a
/// walk during which the counters did not move.
fn assert_walk_agrees() {
    let (kept, walked) = (0..1000)
        .find_map(|_| {
            let before = slubmalloc::stats();
            let walked = slubmalloc::walk();
            let after = slubmalloc::stats();
            let quiet = before.caches().eq(after.caches())
                && before.totals.large_blocks == after.totals.large_blocks;
            if !quiet {
                std::thread::yield_now();
            }
            quiet.then_some((before, walked))
        })
        .expect("the counters never stood still for a walk");
    for (i, (c, w)) in kept.caches().zip(walked.caches.iter()).enumerate() {
        assert_eq!(
            c.objects_in_use, w.objects_in_use,
            "class {i} ({} B) objects_in_use",
            c.object_size
        );
        assert_eq!(c.slabs, w.slabs, "class {i} slabs");
        assert_eq!(
            c.node_partial_slabs, w.node_partial_slabs,
            "class {i} node partial slabs"
        );
        assert_eq!(
            c.thread_partial_slabs, w.thread_partial_slabs,
            "class {i} thread partial slabs"
        );
        assert_eq!(c.active_slabs, w.active_slabs, "class {i} active slabs");
        assert_eq!(
            c.returned_slabs, w.returned_slabs,
            "class {i} returned slabs"
        );
        assert_eq!(c.full_slabs, w.full_slabs, "class {i} full slabs");
        assert_eq!(
            c.partial_free_objects, w.partial_free_objects,
            "class {i} partial free objects"
        );
        assert_eq!(
            w.inuse_mismatches, 0,
            "class {i}: a listed slab's inuse disagrees with its free list"
        );
        assert_eq!(c.objects_total, c.slabs * c.objects_per_slab);
    }
    assert_holdings_add_up(&kept);
    assert_eq!(kept.totals.large_blocks, walked.large_blocks);
    assert_eq!(slubmalloc::check_stats(), 0);
}

/// Every slab of a class is held by exactly one of: a thread as its active
/// slab, a thread partial list, a `returned` stack, no one (FULL), the node
/// list.
fn assert_holdings_add_up(s: &slubmalloc::Stats) {
    for c in s.caches() {
        assert_eq!(
            c.active_slabs
                + c.thread_partial_slabs
                + c.returned_slabs
                + c.full_slabs
                + c.node_partial_slabs,
            c.slabs,
            "{} B: the slabs held do not add up: {c:?}",
            c.object_size
        );
    }
}

/// A snapshot during which the counters did not move (the harness's own
/// thread may allocate while it reports the previous test).
pub fn quiet_stats() -> slubmalloc::Stats {
    (0..1000)
        .find_map(|_| {
            let before = slubmalloc::stats();
            let after = slubmalloc::stats();
            let quiet = before.caches().eq(after.caches());
            if !quiet {
                std::thread::yield_now();
            }
            quiet.then_some(before)
        })
        .expect("the counters never stood still")
}

/// What threads hold against the node adds up to the class's slabs at
/// every quiet point of a workload that fills slabs in one thread and
/// frees their blocks in another: the filler's active slab and FULL slabs,
/// the slabs the other thread's frees claimed and handed back onto the
/// filler's `returned` stack, then taken by its refill; and each holding
/// agrees with the walk.
#[test]
fn slabs_held_by_threads_and_the_node_add_up_to_the_slabs() {
    // Debug mode's slabs are the orphan heap's, no thread's: the counts
    // this test expects are of thread heaps (the sum is still checked, by
    // every `assert_walk_agrees` of the debug-mode run).
    if crate::debug_mode() {
        return;
    }
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    const SIZE: usize = 256;
    let blocks = 40 * 65536 / SIZE;
    let class = |s: &slubmalloc::Stats| *s.cache_for_size(SIZE).unwrap();
    let (to_main, from_filler) = std::sync::mpsc::channel::<Vec<Box<[u8]>>>();
    let (to_filler, from_main) = std::sync::mpsc::channel::<()>();
    let filler = thread::spawn(move || {
        let filled: Vec<Box<[u8]>> = (0..blocks)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect();
        to_main.send(filled).unwrap();
        // Parked while the others free into its slabs and the test looks.
        from_main.recv().unwrap();
        // More of the class: the refill takes the slabs handed back.
        let more: Vec<Box<[u8]>> = (0..blocks)
            .map(|i| vec![i as u8; SIZE].into_boxed_slice())
            .collect();
        to_main.send(more).unwrap();
        from_main.recv().unwrap();
    });
    let mut filled = from_filler.recv().unwrap();
    let s = quiet_stats();
    assert_holdings_add_up(&s);
    let c = class(&s);
    assert!(c.active_slabs >= 1 && c.full_slabs >= 20, "{c:?}");
    assert_walk_agrees();
    // Another thread frees every fourth block of the first half: each
    // FULL slab it frees into is claimed and handed back to the filler.
    let half: Vec<Box<[u8]>> = filled.drain(..blocks / 2).collect();
    thread::spawn(move || {
        let mut half = half;
        let mut i = 0;
        half.retain(|_| {
            i += 1;
            i % 4 != 0
        });
        half
    })
    .join()
    .map(|kept| filled.extend(kept))
    .unwrap();
    let s = quiet_stats();
    assert_holdings_add_up(&s);
    let c = class(&s);
    assert!(c.returned_slabs >= 10 && c.full_slabs >= 10, "{c:?}");
    assert_walk_agrees();
    to_filler.send(()).unwrap();
    let more = from_filler.recv().unwrap();
    let s = quiet_stats();
    assert_holdings_add_up(&s);
    assert_eq!(class(&s).returned_slabs, 0, "{:?}", class(&s));
    assert_walk_agrees();
    drop((filled, more));
    let s = quiet_stats();
    assert_holdings_add_up(&s);
    assert_walk_agrees();
    to_filler.send(()).unwrap();
    filler.join().unwrap();
    let s = quiet_stats();
    assert_holdings_add_up(&s);
    assert_eq!(class(&s).active_slabs, 0, "{:?}", class(&s));
    assert_walk_agrees();
}

#[test]
fn stats_agree_with_a_full_walk_after_a_concurrent_workload() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    const THREADS: usize = 4;
    type Mailboxes = Arc<Vec<Mutex<Vec<Box<[u8]>>>>>;
    let shared: Mailboxes = Arc::new((0..THREADS).map(|_| Mutex::new(Vec::new())).collect());
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let shared = shared.clone();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut x = 0x9e3779b97f4a7c15u64 ^ t as u64;
                let mut mine: Vec<Box<[u8]>> = Vec::new();
                barrier.wait();
                for i in 0..60_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let size = match x % 16 {
                        0 => 40_000 + (x >> 8) as usize % 100_000,
                        1..=3 => 1000 + (x >> 8) as usize % 20_000,
                        _ => 1 + (x >> 8) as usize % 600,
                    };
                    mine.push(vec![t as u8; size].into_boxed_slice());
                    if x % 3 == 0 {
                        // Hand a block to another thread, which frees it later.
                        let b = mine.swap_remove((x >> 20) as usize % mine.len());
                        shared[(t + 1 + i as usize) % THREADS]
                            .lock()
                            .unwrap()
                            .push(b);
                    }
                    if mine.len() > 2000 || x % 5 == 0 {
                        let n = (x >> 32) as usize % (mine.len() + 1);
                        mine.truncate(n);
                    }
                    if i % 256 == 0 {
                        let mut q = shared[t].lock().unwrap();
                        for b in q.drain(..) {
                            assert!(b.iter().all(|&v| v == b[0]));
                        }
                    }
                }
                // Keep some blocks alive past the thread's exit.
                mine.truncate(500);
                mine
            })
        })
        .collect();
    let survivors: Vec<Vec<Box<[u8]>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_walk_agrees();
    let kept = slubmalloc::stats();
    assert!(
        kept.caches()
            .map(|c| c.free_remote + c.free_slow)
            .sum::<u64>()
            > 0,
        "workload had cross-thread frees"
    );
    // Debug mode's slabs stay with the orphan heap (`src/debug.rs`).
    let node_partial = kept.caches().map(|c| c.node_partial_slabs).sum::<u64>();
    if crate::debug_mode() {
        assert_eq!(node_partial, 0, "debug mode listed slabs on the nodes");
    } else {
        assert!(node_partial > 0, "workload left node partial slabs");
    }
    drop(survivors);
    shared.iter().for_each(|q| q.lock().unwrap().clear());
    assert_walk_agrees();
}

#[test]
fn objects_in_use_counts_exactly_the_live_blocks() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // 20 KiB is a class nothing else in this test binary uses.
    let size = 20_000;
    let in_use = || {
        slubmalloc::stats()
            .cache_for_size(size)
            .unwrap()
            .objects_in_use
    };
    let base = in_use();
    let blocks: Vec<Vec<u8>> = (0..37).map(|_| Vec::with_capacity(size)).collect();
    assert_eq!(in_use(), base + 37);
    let other: Vec<Vec<u8>> =
        thread::spawn(move || (0..5).map(|_| Vec::with_capacity(size)).collect())
            .join()
            .unwrap();
    assert_eq!(in_use(), base + 42);
    drop(blocks);
    assert_eq!(in_use(), base + 5);
    thread::spawn(move || drop(other)).join().unwrap();
    assert_eq!(in_use(), base);
    assert_walk_agrees();
}

/// Debug mode keeps its slabs with the orphan heap, off the node lists
/// (`src/debug.rs`): there the node lists' tests check that instead, that
/// blocks allocated by a thread that exits and freed by another leave the
/// node lists untouched and the counters exact, and go no further.
fn with_node_lists() -> Option<()> {
    crate::fresh_process_per_thread_sheaves()?;
    if !crate::debug_mode() {
        return Some(());
    }
    let cache = || *slubmalloc::stats().cache_for_size(3000).unwrap();
    let before = cache();
    let blocks: Vec<Vec<u8>> =
        thread::spawn(|| (0..100).map(|_| Vec::with_capacity(3000)).collect())
            .join()
            .unwrap();
    drop(blocks);
    let after = cache();
    assert_eq!(
        after.allocs() - before.allocs(),
        100,
        "{before:?} {after:?}"
    );
    assert_eq!(after.frees() - before.frees(), 100, "{before:?} {after:?}");
    assert_eq!(
        (after.node_partial_slabs, after.node_head, after.node_tail),
        (
            before.node_partial_slabs,
            before.node_head,
            before.node_tail
        ),
        "debug mode listed slabs on the nodes: {before:?} {after:?}"
    );
    assert_walk_agrees();
    eprintln!("debug mode: no slab went to the node lists, their checks do not apply");
    None
}

#[test]
fn node_placement_decisions_are_counted() {
    let Some(_fresh) = with_node_lists() else {
        return;
    };
    let size = 3000; // 3072-byte class: 21 objects per slab
    let cache = || *slubmalloc::stats().cache_for_size(size).unwrap();
    // Fill 40 slabs on a thread that then exits, and free one block of each
    // from this thread, for which the class is cold: each full slab is
    // claimed by its first free (its filler is gone) and goes back to the
    // node list, at the tail (nearly full); a thread exit that releases a
    // nearly empty slab puts it at the head.
    //
    // An exited thread's heap is pooled, and a thread the test harness starts
    // meanwhile may take it: then the frees hand the slabs to that live heap
    // instead (counted as remote frees) and the scenario is run again.
    const SLABS: usize = 40;
    let mut attempt = 0;
    let (mid, blocks) = loop {
        attempt += 1;
        let before = cache();
        let blocks: Vec<Vec<u8>> =
            thread::spawn(move || (0..21 * SLABS).map(|_| Vec::with_capacity(size)).collect())
                .join()
                .unwrap();
        let mut blocks: Vec<Option<Vec<u8>>> = blocks.into_iter().map(Some).collect();
        for slab in 0..SLABS {
            blocks[slab * 21] = None;
        }
        let mid = cache();
        let given_back = mid.free_remote - before.free_remote;
        if mid.node_tail > before.node_tail || given_back == 0 || attempt == 5 {
            assert!(
                mid.node_tail > before.node_tail,
                "claimed slabs go to the tail: {before:?} {mid:?}"
            );
            assert_eq!(
                mid.thread_partial_slabs, before.thread_partial_slabs,
                "a thread for which the class is cold adopts no slab: {before:?} {mid:?}"
            );
            break (mid, blocks);
        }
    };
    drop(blocks);
    thread::spawn(move || {
        // Past the 32 objects a cold class takes from shared slabs, the
        // class warms up and the thread takes a slab of its own, of which
        // it keeps two blocks at its exit.
        let mut blocks: Vec<Vec<u8>> = (0..40)
            .map(|_| std::hint::black_box(Vec::with_capacity(size)))
            .collect();
        let keep = blocks.split_off(38);
        drop(blocks);
        std::mem::forget(keep);
    })
    .join()
    .unwrap();
    let after = cache();
    assert!(
        after.node_head > mid.node_head,
        "a nearly empty slab released at thread exit goes to the head: {mid:?} {after:?}"
    );
    assert_walk_agrees();
}

#[test]
fn one_line_summary_uses_jemalloc_names_and_agrees_with_the_totals() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    // 3000 blocks of 1000 B (the 1024 B class) and one 1 MiB large block.
    let small: Vec<Box<[u8]>> = (0..3000).map(|_| vec![1u8; 1000].into()).collect();
    let large = vec![2u8; 1 << 20];
    let s = slubmalloc::stats();
    let sum = s.summary();
    let slab_bytes: u64 = s.caches().map(|c| c.slabs * 65536).sum();
    assert_eq!(sum.allocated, s.totals.bytes_in_use);
    assert_eq!(sum.active, slab_bytes + s.totals.large_bytes);
    assert_eq!(sum.mapped, s.totals.bytes_mapped);
    assert_eq!(sum.rss, s.totals.resident_bytes);
    let class_1024 = s.cache_for_size(1000).unwrap();
    assert!(sum.allocated >= class_1024.objects_in_use * 1024 + (1 << 20));
    assert!(class_1024.objects_in_use >= 3000);
    assert!(sum.active >= sum.allocated && sum.active % 4096 == 0);
    assert!(sum.mapped >= sum.active && sum.rss > 0);
    let line = format!("{s:#}");
    assert_eq!(
        line,
        format!(
            "allocated={} active={} mapped={} rss={}",
            sum.allocated, sum.active, sum.mapped, sum.rss
        )
    );
    assert_eq!(line, sum.to_string());
    // The plain form is still the table, which ends with the totals line.
    assert!(format!("{s}").lines().count() > 2);
    drop((small, large));
    let after = slubmalloc::stats().summary();
    assert!(after.allocated + 3000 * 1024 + (1 << 20) <= sum.allocated + 64 * 1024);
}

/// A thread that frees a node-listed slab's blocks one after another takes
/// the slab at its eighth free in a row: the first seven are made under the
/// node lock (counted slow), the others into a slab of its own (counted
/// fast), not one node lock each. Counted exactly either way.
#[test]
fn frees_in_a_row_into_a_listed_slab_take_it_from_the_node() {
    let Some(_fresh) = with_node_lists() else {
        return;
    };
    let size = 3000; // 3072-byte class: 21 objects per slab
    let cache = || *slubmalloc::stats().cache_for_size(size).unwrap();
    // Past the 32 objects a cold class takes from shared slabs, the class
    // is warm and a thread takes slabs of its own.
    let forty = move || -> Vec<Vec<u8>> {
        (0..40)
            .map(|_| std::hint::black_box(Vec::with_capacity(size)))
            .collect()
    };
    let warm = forty();
    // Another thread's own slab holds its last 8 blocks; at its exit the
    // slab goes to the node list.
    let mut blocks = thread::spawn(forty).join().unwrap();
    let slab_of = |v: &Vec<u8>| v.as_ptr() as usize >> 16;
    let listed = slab_of(&blocks[39]);
    let in_listed: Vec<_> = blocks.extract_if(.., |v| slab_of(v) == listed).collect();
    assert!(
        in_listed.len() >= 8,
        "{} blocks in the slab",
        in_listed.len()
    );
    let n = in_listed.len() as u64;
    let before = cache();
    assert!(before.node_partial_slabs >= 1, "{before:?}");
    drop(in_listed);
    let after = cache();
    assert_eq!(
        after.free_slow - before.free_slow,
        7,
        "{before:?} {after:?}"
    );
    // The rest by the thread's sheaf: those it flushed into the slab, now
    // the thread's own, and those it still holds.
    assert_eq!(
        after.free_fast - before.free_fast + after.sheaf_objects - before.sheaf_objects,
        n - 7,
        "{before:?} {after:?}"
    );
    drop((blocks, warm));
    assert_walk_agrees();
}

/// The heap profile's slabs are listed as a thread heap's partial slabs
/// (`src/side_slabs.rs`), and the walk counts them: with every block
/// sampled, the walk agrees with the counters, partial slabs and all.
#[test]
fn stats_agree_with_a_full_walk_when_the_heap_profile_samples_every_block() {
    let Some(_fresh) = crate::fresh_process_with(&[
        ("SLUBMALLOC_PROF", "1"),
        ("SLUBMALLOC_PROF_RATE", "1"),
        ("SLUBMALLOC_PROF_FILE", "/dev/null"),
    ]) else {
        return;
    };
    let handles: Vec<_> = (0..2)
        .map(|t| {
            thread::spawn(move || {
                let mut kept: Vec<Box<[u8]>> = (0..4000)
                    .map(|i| vec![t as u8; 16 + (i % 7) * 40].into_boxed_slice())
                    .collect();
                // Every other block freed: the slabs keep free blocks.
                let mut i = 0;
                kept.retain(|_| {
                    i += 1;
                    i % 2 == 0
                });
                kept
            })
        })
        .collect();
    let survivors: Vec<Vec<Box<[u8]>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let listed = slubmalloc::stats()
        .caches()
        .map(|c| c.thread_partial_slabs)
        .sum::<u64>();
    assert!(listed > 0, "the profile's slabs were not listed");
    assert_walk_agrees();
    drop(survivors);
    assert_walk_agrees();
}
