//! Memory goes back to the kernel: after a program frees what it allocated
//! and keeps running lightly past the purge delay, resident memory is a
//! small fraction of the peak; thread churn does not grow it.

use std::time::{Duration, Instant};

/// The guard page after every large block's mapping (`large_map`), which
/// a split of a cached piece gives the block it hands out.
const GUARD: u64 = 4096;

pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

/// Allocates a little for `ms` milliseconds, as a process that keeps running.
fn light_use(ms: u64) {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut keep = Vec::new();
    while Instant::now() < end {
        keep.push(vec![1u8; 200]);
        if keep.len() > 100 {
            keep.clear();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn resident_memory_falls_below_a_quarter_of_the_peak_after_freeing() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let base = resident_bytes();
    // 256 MiB in small blocks of mixed classes.
    let blocks: Vec<Box<[u8]>> = (0..2_000_000)
        .map(|i| vec![i as u8; 64 + (i % 5) * 16].into_boxed_slice())
        .collect();
    let peak = resident_bytes();
    assert!(
        peak > base + (200 << 20),
        "the workload reached {} MiB",
        (peak - base) >> 20
    );
    drop(blocks);
    light_use(400);
    let after = resident_bytes();
    assert!(
        after - base.min(after) < (peak - base) / 4,
        "resident {} MiB after freeing, peak {} MiB, base {} MiB",
        after >> 20,
        peak >> 20,
        base >> 20
    );
    assert!(slubmalloc::stats().totals.purges > 0);
}

#[test]
fn large_block_cache_is_bounded_and_purged() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let base_mmaps = slubmalloc::stats().totals.mmaps;
    for _ in 0..200 {
        let v = vec![7u8; 1 << 20];
        std::hint::black_box(&v);
    }
    let s = slubmalloc::stats();
    assert!(
        s.totals.mmaps - base_mmaps < 20,
        "a large malloc/free loop mapped {} times",
        s.totals.mmaps - base_mmaps
    );
    assert!(s.totals.large_cached_bytes <= 64 << 20);
    light_use(300);
    assert_eq!(
        slubmalloc::stats().totals.large_cached_bytes,
        0,
        "the cache is emptied after the purge delay"
    );
}

#[test]
fn thread_churn_does_not_grow_resident_memory_or_leak_slabs() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let churn = |n| {
        for i in 0..n {
            std::thread::spawn(move || {
                let v: Vec<Vec<u8>> = (0..200)
                    .map(|j| vec![(i + j) as u8; 16 + j % 700])
                    .collect();
                std::hint::black_box(v);
            })
            .join()
            .unwrap();
        }
    };
    churn(200);
    let slabs = |s: &slubmalloc::Stats| s.caches().map(|c| c.slabs).sum::<u64>();
    let (rss0, s0) = (resident_bytes(), slubmalloc::stats());
    churn(3000);
    let (rss1, s1) = (resident_bytes(), slubmalloc::stats());
    assert!(
        slabs(&s1) <= slabs(&s0) + 4,
        "slabs {} -> {}",
        slabs(&s0),
        slabs(&s1)
    );
    assert!(
        rss1 < rss0 + (8 << 20),
        "resident {} KiB -> {} KiB over 3000 threads",
        rss0 >> 10,
        rss1 >> 10
    );
    assert_eq!(s1.totals.threads_alive, s0.totals.threads_alive);
}

#[test]
fn trim_returns_free_slabs_at_once() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks: Vec<Box<[u8]>> = (0..200_000)
        .map(|_| vec![3u8; 500].into_boxed_slice())
        .collect();
    let peak = resident_bytes();
    drop(blocks);
    slubmalloc::trim();
    let after = resident_bytes();
    assert!(
        after + (60 << 20) < peak,
        "trim released {} MiB of {} MiB",
        (peak - after) >> 20,
        peak >> 20
    );
}

/// A slab of a class of many blocks per slab that empties goes back to its
/// segment at once, for any class: 40 slabs of 500-byte blocks, all freed,
/// leave their class only its active slab and the slab before it, which
/// holds blocks the thread's sheaf keeps (none kept on the node list), and 40 slabs of 384-byte blocks allocated
/// next take their place, in no new segment. Quick, well inside the purge
/// delay: no purge is needed for the slabs to change class.
#[test]
fn an_emptied_slab_serves_another_class_at_once() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let first: Vec<Box<[u8]>> = (0..40 * 128)
        .map(|_| vec![1u8; 500].into_boxed_slice())
        .collect();
    let s = slubmalloc::stats();
    let c = *s.cache_for_size(500).unwrap();
    assert!(c.slabs >= 40, "{c:?}");
    let segments = s.totals.segments;
    drop(first);
    let c = *slubmalloc::stats().cache_for_size(500).unwrap();
    // The test harness keeps one block of the class too; the thread's sheaf
    // keeps the blocks it freed last (of the last two slabs filled).
    assert!(c.objects_in_use <= 1, "{c:?}");
    assert!(c.sheaf_objects <= 32, "{c:?}");
    assert!(c.slabs <= 2 + c.objects_in_use, "{c:?}");
    let second: Vec<Box<[u8]>> = (0..40 * 170)
        .map(|_| vec![2u8; 384].into_boxed_slice())
        .collect();
    let s = slubmalloc::stats();
    assert!(s.cache_for_size(384).unwrap().slabs >= 40);
    assert_eq!(s.totals.segments, segments, "{:?}", s.totals);
    drop(second);
}

/// A thread that moves on from a size keeps no slab of it: blocks of
/// 3,500 bytes filling four slabs, all freed (the last one, the class's
/// active slab, stays with the thread, and the one before it if its sheaf
/// holds blocks of it), then blocks of eight other sizes that take
/// slabs from segments: the idle class's sheaf is flushed and its empty
/// active slab goes back to its segment at the first take after 4,096
/// allocations of other classes, and serves the other sizes. An idle class whose active slab holds live blocks (the
/// last 5 of 45 blocks of 3,000 bytes) keeps it, and its node list is left
/// as it was.
#[test]
fn an_idle_class_gives_its_empty_active_slab_back() {
    let Some(_fresh) = crate::fresh_process_per_thread_sheaves() else {
        return;
    };
    let size_of_class = |size| *slubmalloc::stats().cache_for_size(size).unwrap();
    let mut held: Vec<Box<[u8]>> = (0..45)
        .map(|_| vec![3u8; 3000].into_boxed_slice())
        .collect();
    held.drain(..40);
    let held_before = size_of_class(3000);
    let first: Vec<Box<[u8]>> = (0..4 * size_of_class(3500).objects_per_slab)
        .map(|_| vec![1u8; 3500].into_boxed_slice())
        .collect();
    assert!(size_of_class(3500).slabs >= 4);
    drop(first);
    let c = size_of_class(3500);
    // The active slab, and the slab before it if the blocks the thread's
    // sheaf still holds are of it.
    let sheaf_slabs = (c.sheaf_objects > 0) as u64;
    assert_eq!(c.objects_in_use, 0, "{c:?}");
    assert!((1..=1 + sheaf_slabs).contains(&c.slabs), "{c:?}");
    let mut others = Vec::new();
    for size in [100, 200, 300, 600, 900, 1200, 1600, 2500] {
        let n = 6 * size_of_class(size).objects_per_slab;
        others.extend((0..n).map(|_| vec![2u8; size].into_boxed_slice()));
    }
    let c = size_of_class(3500);
    assert_eq!((c.objects_in_use, c.slabs), (0, 0), "{c:?}");
    let c = size_of_class(3000);
    let kept = (5, held_before.slabs, held_before.node_partial_slabs);
    assert_eq!(
        (c.objects_in_use, c.slabs, c.node_partial_slabs),
        kept,
        "{c:?}"
    );
    drop(others);
    drop(held);
}

/// A few slabs given back to their segments ask for no purge: they wait
/// there for the next slabs taken, of any class, and a small program gets
/// no background purger (a thread) for them. Eight slabs of 500-byte
/// blocks, freed (seven go back), then slow paths of other classes.
#[test]
fn a_few_emptied_slabs_start_no_purger() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks: Vec<Box<[u8]>> = (0..8 * 128)
        .map(|_| vec![1u8; 500].into_boxed_slice())
        .collect();
    drop(blocks);
    let s = slubmalloc::stats();
    assert!(s.cache_for_size(500).unwrap().slabs_freed >= 6, "{s:?}");
    let others: Vec<Box<[u8]>> = (1..40)
        .map(|i| vec![2u8; i * 40].into_boxed_slice())
        .collect();
    let t = slubmalloc::stats().totals;
    assert_eq!((t.purger_starts, t.purges), (0, 0), "{t:?}");
    drop(others);
}

/// A class a thread uses a little but regularly keeps its active slab:
/// one block of 3,500 bytes allocated and freed after every 100 blocks of
/// other sizes, which take slabs from segments all along (about one every
/// 90 blocks): the class's empty active slab is not given back between
/// its uses, so it takes no new slab.
#[test]
fn a_class_used_a_little_but_regularly_keeps_its_active_slab() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let size_of_class = |size| *slubmalloc::stats().cache_for_size(size).unwrap();
    // Past the 32 blocks a cold class takes from shared slabs.
    drop(
        (0..40)
            .map(|_| vec![1u8; 3500].into_boxed_slice())
            .collect::<Vec<_>>(),
    );
    let before = size_of_class(3500);
    let mut others = Vec::new();
    for i in 0..20_000 {
        others.push(vec![2u8; 200 + (i % 8) * 150].into_boxed_slice());
        if i % 100 == 0 {
            drop(vec![1u8; 3500].into_boxed_slice());
        }
    }
    let c = size_of_class(3500);
    assert_eq!(c.slabs_allocated, before.slabs_allocated, "{c:?}");
    drop(others);
}

/// `trim` leaves no empty slab listed: the node lists keep a few per class
/// for refills while the program runs (blocks of 40,000 bytes take a slab
/// each), and `trim`, like the purger when a purge is due, gives them back.
#[test]
fn trim_leaves_no_empty_slab_on_the_node_lists() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks = one_per_slab();
    assert!(big_class().slabs >= 64, "{:?}", big_class());
    drop(blocks);
    slubmalloc::trim();
    let c = big_class();
    assert_eq!(c.objects_in_use, 0);
    assert_eq!(c.slabs, 0, "{c:?}");
}

/// Blocks of a class of one block per slab, freed by another thread: each
/// free empties a slab, which goes to the node list (which keeps 16 of
/// them) or back to its segment at once, not back to the thread that filled
/// it, which may never refill that class again.
#[test]
fn slabs_that_another_threads_free_empties_leave_at_once() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let blocks = one_per_slab();
    std::thread::spawn(move || drop(blocks)).join().unwrap();
    let c = big_class();
    assert_eq!(c.objects_in_use, 0);
    assert!(c.slabs <= 17, "{c:?}");
}

/// 64 blocks of 40,000 bytes, a class of one block per slab.
fn one_per_slab() -> Vec<Box<[u8]>> {
    (0..64)
        .map(|_| vec![5u8; 40_000].into_boxed_slice())
        .collect()
}

/// The statistics of the class of `one_per_slab`'s blocks.
fn big_class() -> slubmalloc::CacheStats {
    *slubmalloc::stats().cache_for_size(40_000).unwrap()
}

/// A block of `mib` MiB with a byte written in every page, as a program
/// fills a buffer (no more: a Vec would write every byte).
struct Block(*mut u8, std::alloc::Layout);

fn touched_block(mib: usize) -> Block {
    let layout = std::alloc::Layout::from_size_align(mib << 20, 16).unwrap();
    // SAFETY: a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    assert!(!p.is_null());
    for page in (0..layout.size()).step_by(4096) {
        // SAFETY: inside the block.
        unsafe { p.add(page).write(1) };
    }
    Block(p, layout)
}

impl Block {
    fn pages_hold_their_byte(&self) -> bool {
        // SAFETY: the bytes read were written by `touched_block`.
        (0..self.1.size())
            .step_by(4096)
            .all(|o| unsafe { self.0.add(o).read() } == 1)
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated in `touched_block` with this layout.
        unsafe { std::alloc::dealloc(self.0, self.1) };
    }
}

#[test]
fn big_blocks_replaced_one_at_a_time_reuse_cached_mappings() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut next = crate::xorshift();
    // 5 to 13 MiB: too big for a segment's slabs, never medium blocks.
    let mut live: Vec<Option<Block>> = (0..10)
        .map(|_| Some(touched_block(5 + (next() % 9) as usize)))
        .collect();
    let before = slubmalloc::stats().totals;
    for _ in 0..200 {
        let i = (next() % 10) as usize;
        live[i] = None;
        live[i] = Some(touched_block(5 + (next() % 9) as usize));
    }
    let after = slubmalloc::stats().totals;
    assert!(
        after.mmaps - before.mmaps < 20,
        "200 replacements mapped {} times",
        after.mmaps - before.mmaps
    );
    assert!(
        after.large_cache_hits - before.large_cache_hits >= 180,
        "only {} of 200 replacements reused a cached mapping",
        after.large_cache_hits - before.large_cache_hits
    );
    assert!(after.large_cached_bytes <= after.large_cache_limit_bytes);
    drop(live);
}

#[test]
fn a_bigger_cached_block_is_split_for_a_smaller_request() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    drop(touched_block(16));
    let s0 = slubmalloc::stats().totals;
    assert_eq!(s0.large_cached_bytes, 16 << 20);
    let small = touched_block(4);
    let s1 = slubmalloc::stats().totals;
    assert_eq!(s1.large_cache_hits, s0.large_cache_hits + 1);
    assert_eq!(s1.mmaps, s0.mmaps, "served from the cache, no new mapping");
    assert_eq!(
        s1.large_cached_bytes,
        (12 << 20) - GUARD,
        "the rest of the cached mapping stays cached, less the block's guard page"
    );
    drop(small);
    assert_eq!(
        slubmalloc::stats().totals.large_cached_bytes,
        16 << 20,
        "the pieces merge again"
    );
}

#[test]
fn a_smaller_cached_block_is_grown_with_mremap_not_mapped_afresh() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    drop(touched_block(8));
    let s0 = slubmalloc::stats().totals;
    let big = touched_block(12);
    let s1 = slubmalloc::stats().totals;
    assert_eq!(s1.large_cache_hits, s0.large_cache_hits + 1);
    assert_eq!(s1.mmaps, s0.mmaps, "grown in place of a fresh mapping");
    assert_eq!(s1.large_cached_bytes, 0);
    assert!(big.pages_hold_their_byte());
}

/// A cached mapping under 1 MiB that a request does not fit stays cached
/// and the request gets a fresh mapping: grown for it, the only piece left
/// the cache, and a program that replaces many blocks of this size one at
/// a time kept a cache of one piece and moved a mapping for a third of its
/// replacements.
#[test]
fn a_small_cached_block_too_small_for_a_request_stays_cached() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let layout = |kib: usize| std::alloc::Layout::from_size_align(kib << 10, 16).unwrap();
    // SAFETY: non-zero sizes; each block is freed with its own layout.
    unsafe {
        std::alloc::dealloc(
            std::hint::black_box(std::alloc::alloc(layout(200))),
            layout(200),
        );
        let s0 = slubmalloc::stats().totals;
        assert_eq!(s0.large_cached_bytes, 200 << 10);
        let p = std::hint::black_box(std::alloc::alloc(layout(300)));
        assert!(!p.is_null());
        let s1 = slubmalloc::stats().totals;
        assert_eq!(s1.mmaps, s0.mmaps + 1, "a fresh mapping");
        assert_eq!(
            s1.large_cached_bytes,
            200 << 10,
            "the smaller piece stays cached"
        );
        std::alloc::dealloc(p, layout(300));
    }
}

#[test]
fn bytes_purged_count_what_went_back_to_the_kernel() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let s0 = slubmalloc::stats().totals;
    let blocks: Vec<Box<[u8]>> = (0..100_000)
        .map(|_| vec![3u8; 500].into_boxed_slice())
        .collect();
    drop(blocks);
    drop(touched_block(8));
    slubmalloc::trim();
    let s1 = slubmalloc::stats().totals;
    // 100,000 blocks of 512 bytes fill 782 slabs of 64 KiB, all freed; the
    // 8 MiB cached block is unmapped.
    assert!(
        s1.bytes_purged - s0.bytes_purged >= (48 << 20) + (8 << 20),
        "purged {} bytes",
        s1.bytes_purged - s0.bytes_purged
    );
    assert_eq!(s1.large_cached_bytes, 0);
}

/// Six live blocks of 12 MiB, three of them freed at once: 36 MiB cached
/// is past the trim bound a process starts with (32 MiB), so the third
/// free gives it all back at once, with no purge delay and no later call.
#[test]
fn large_blocks_freed_past_the_trim_bound_go_back_at_free_time() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut live: Vec<Block> = (0..6).map(|_| touched_block(12)).collect();
    let s0 = slubmalloc::stats().totals;
    live.truncate(3);
    let s1 = slubmalloc::stats().totals;
    assert_eq!(s1.large_cached_bytes, 0, "the trim left cached blocks");
    assert!(
        s1.bytes_purged - s0.bytes_purged >= 36 << 20,
        "purged {} bytes",
        s1.bytes_purged - s0.bytes_purged
    );
    drop(live);
}

/// The same 36 MiB freed and allocated again, four times: the first free
/// past the bound gives it back and the allocations after fault it in
/// again, so the next free (within 1 s) raises the bound instead of
/// trimming, and from then on the allocations reuse the cached mappings.
#[test]
fn memory_needed_again_soon_after_a_trim_raises_the_trim_bound() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut live: Vec<Block> = (0..6).map(|_| touched_block(12)).collect();
    let mut hits = Vec::new();
    for _ in 0..4 {
        let s0 = slubmalloc::stats().totals;
        live.truncate(3);
        live.extend((0..3).map(|_| touched_block(12)));
        hits.push(slubmalloc::stats().totals.large_cache_hits - s0.large_cache_hits);
    }
    assert_eq!(hits[0], 0, "the first frees were given back: {hits:?}");
    assert!(
        hits[1..].iter().all(|&h| h == 3),
        "after one trim, the bound let the cache keep them: {hits:?}"
    );
    drop(live);
}

/// Blocks taken back from the cache count as memory needed again: after
/// two of six 12 MiB blocks were freed and allocated again from the cache,
/// three freed at once (36 MiB cached, past the 32 MiB the bound starts
/// at) raise the bound instead of trimming.
#[test]
fn blocks_reused_from_the_cache_raise_the_trim_bound_before_any_trim() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let mut live: Vec<Block> = (0..6).map(|_| touched_block(12)).collect();
    let s0 = slubmalloc::stats().totals;
    live.truncate(4);
    live.extend((0..2).map(|_| touched_block(12)));
    let s1 = slubmalloc::stats().totals;
    assert_eq!(s1.large_cache_hits - s0.large_cache_hits, 2);
    live.truncate(3);
    let s2 = slubmalloc::stats().totals;
    // The pieces that are neighbours merge, the guard pages between them
    // with them.
    assert!(
        (36 << 20..=(36 << 20) + 2 * GUARD).contains(&s2.large_cached_bytes),
        "the cache keeps them: {} bytes",
        s2.large_cached_bytes
    );
    assert_eq!(s2.bytes_purged, s1.bytes_purged, "no trim");
    drop(live);
}

/// Minor page faults of the process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) }, 0);
    ru.ru_minflt
}

/// A heap in use frees a part of itself and allocates it again (every
/// 48-byte block of 128 MiB of 48- and 64-byte blocks, about 55 MiB of
/// slabs scattered among the 64-byte ones, past the trim bound): the
/// frees give nothing back, as nothing is free whole, and the 40-byte
/// blocks that follow reuse the emptied slabs without faulting them in
/// (unless the machine is so slow that the slabs waited out the purge
/// delays meanwhile: then the faults are at most what went back). The
/// process has no purger: the test harness's threads make it a program
/// with threads, whose purger gives a slab back one purge delay after its
/// free, however slow the frees. A segment free whole still goes back at
/// free time (`single_threaded`,
/// `large_blocks_freed_past_the_trim_bound_go_back_at_free_time`).
#[test]
fn a_heap_in_use_reuses_its_emptied_slabs_without_faulting_them_in() {
    let Some(_fresh) = crate::fresh_process_with(&[("SLUBMALLOC_BACKGROUND_PURGE", "0")]) else {
        return;
    };
    // Nothing the harness freed before waits for a deadline, which could
    // purge it in the middle of the frees below.
    slubmalloc::trim();
    let n = (128 << 20) / 56;
    let mut blocks: Vec<Option<Box<[u8]>>> = (0..n)
        .map(|i| Some(vec![i as u8; if i % 2 == 0 { 48 } else { 64 }].into_boxed_slice()))
        .collect();
    let purged = || slubmalloc::stats().totals.bytes_purged;
    let before_frees = purged();
    for b in blocks.iter_mut().step_by(2) {
        *b = None;
    }
    let before_allocations = purged();
    assert_eq!(
        before_allocations - before_frees,
        0,
        "the frees gave back slabs of segments still in use: {:?}",
        slubmalloc::stats().totals
    );
    let faults = minor_faults();
    for (i, b) in blocks.iter_mut().enumerate().step_by(2) {
        *b = Some(vec![i as u8; 40].into_boxed_slice());
    }
    let faults = minor_faults() - faults;
    let pages_purged = (purged() - before_allocations) / 4096;
    // 55 MiB faulted in again would be 14,000 faults; a few hundred come
    // from slabs the heap never had.
    assert!(
        faults < 1000 + pages_purged as i64,
        "{faults} minor faults to allocate what was freed, {pages_purged} pages purged meanwhile"
    );
    drop(blocks);
}

/// In a heap in use, segments whose slabs are all free go back at free time
/// once they pass the trim bound: 64 MiB of blocks freed whole (their
/// segments free whole) while the 64 MiB allocated after them live on,
/// with no purger and no later call.
#[test]
fn segments_freed_whole_in_a_heap_in_use_go_back_at_free_time() {
    let Some(_fresh) = crate::fresh_process_with(&[("SLUBMALLOC_BACKGROUND_PURGE", "0")]) else {
        return;
    };
    slubmalloc::trim();
    let n = (64 << 20) / 1024;
    let first: Vec<Box<[u8]>> = (0..n)
        .map(|i| vec![i as u8; 1000].into_boxed_slice())
        .collect();
    let second: Vec<Box<[u8]>> = (0..n)
        .map(|i| vec![i as u8; 1000].into_boxed_slice())
        .collect();
    let before = slubmalloc::stats().totals;
    drop(first);
    let after = slubmalloc::stats().totals;
    assert!(
        after.bytes_purged - before.bytes_purged >= 32 << 20,
        "{} bytes given back of 64 MiB freed whole; segments {} -> {}",
        after.bytes_purged - before.bytes_purged,
        before.segments,
        after.segments
    );
    assert!(after.segments < before.segments, "{before:?} {after:?}");
    drop(second);
}
