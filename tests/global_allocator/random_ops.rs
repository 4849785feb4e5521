//! A seeded randomized workout of slubmalloc as this binary's global
//! allocator: four threads allocate (sizes skewed towards small, up to past
//! the largest class), allocate zeroed, allocate at alignments from 8 to
//! 64 KiB, grow and shrink with realloc, free, and hand blocks to each other
//! through channels. Threads stop at different times, so blocks are freed
//! after, and while, the threads that allocated them exit. Every block
//! carries a pattern derived from (seed, id) that is checked before each
//! realloc and free and after each hand-off.
//! At the end the statistics must count exactly the blocks the test holds,
//! then nothing once it frees them, and the verification walk must agree
//! with the statistics at both points.
//!
//! The seed is printed; set SLUBMALLOC_TEST_SEED to replay one. (Thread
//! interleavings are not replayed, only each thread's choices.)
//!
//! It runs alone in a fresh process (`crate::fresh_process`): the statistics
//! are process-wide, so no other test may allocate while it counts.

use std::alloc::{alloc, alloc_zeroed, dealloc, realloc, Layout};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread;

use slubmalloc::{MAX_SMALL_BYTES, NUM_CLASSES};

const THREADS: usize = 4;
const OPS_PER_THREAD: usize = 80_000;
/// Above this many live blocks a thread frees instead of allocating.
const MAX_LIVE_PER_THREAD: usize = 1_000;
const MAX_SIZE: usize = 70_000;

/// xorshift64*: small, fast, and good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// A size from 1 to MAX_SIZE, mostly small: 60% up to 128 B, 25% up to
    /// 1 KiB, 10% up to the largest class, 5% large blocks.
    fn size(&mut self) -> usize {
        match self.next() % 100 {
            0..=59 => self.range(1, 128),
            60..=84 => self.range(129, 1024),
            85..=94 => self.range(1025, MAX_SMALL_BYTES),
            _ => self.range(MAX_SMALL_BYTES + 1, MAX_SIZE),
        }
    }
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A live block. `addr` rather than a pointer so it can cross threads.
#[derive(Clone, Copy, Debug)]
struct Block {
    addr: usize,
    size: usize,
    align: usize,
    /// Unique per block (thread index in the top bits); named in failures.
    id: u64,
    /// mix(seed ^ id): the pattern's key.
    key: u64,
}

/// Pattern word `i` of a block with key `key`.
#[inline]
fn word(key: u64, i: usize) -> u64 {
    key ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Block {
    fn layout(&self) -> Layout {
        Layout::from_size_align(self.size, self.align).unwrap()
    }

    fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// Writes the pattern into bytes `from..size`.
    fn fill(&self, from: usize) {
        let p = self.ptr();
        let mut i = from;
        // Bytes up to a word boundary of the pattern, then whole words.
        while i < self.size && i % 8 != 0 {
            // SAFETY: `i < size`, inside the live block.
            unsafe { *p.add(i) = word(self.key, i / 8).to_le_bytes()[i % 8] };
            i += 1;
        }
        while i + 8 <= self.size {
            // SAFETY: `i + 8 <= size`, inside the live block.
            unsafe { (p.add(i) as *mut u64).write_unaligned(word(self.key, i / 8).to_le()) };
            i += 8;
        }
        while i < self.size {
            // SAFETY: as above.
            unsafe { *p.add(i) = word(self.key, i / 8).to_le_bytes()[i % 8] };
            i += 1;
        }
    }

    /// Checks bytes `0..len` against the pattern; panics naming the first
    /// difference.
    fn check(&self, len: usize, seed: u64, when: &str) {
        let p = self.ptr();
        let mut i = 0;
        while i + 8 <= len {
            // SAFETY: `i + 8 <= len <= size`, inside the live block.
            let got = unsafe { (p.add(i) as *const u64).read_unaligned() };
            if got != word(self.key, i / 8).to_le() {
                self.differs(i, seed, when);
            }
            i += 8;
        }
        while i < len {
            // SAFETY: `i < len <= size`.
            if unsafe { *p.add(i) } != word(self.key, i / 8).to_le_bytes()[i % 8] {
                self.differs(i, seed, when);
            }
            i += 1;
        }
    }

    #[cold]
    fn differs(&self, offset: usize, seed: u64, when: &str) -> ! {
        panic!(
            "block {} contents changed (seed {seed}, {when}): {self:x?}, first difference at or after byte {offset}",
            self.id
        )
    }
}

enum Msg {
    Block(Block),
    /// The sender (its index) stops: send it nothing more but an Ack.
    Leaving(usize),
    /// Answers a Leaving: nothing more will come from this peer.
    Ack,
}

/// One thread's run: a random mix of operations (the thread's share of
/// them: threads stop at different times, so blocks outlive the threads
/// that allocated them and are freed while their owners exit), then the
/// leaving protocol: a Leaving to every peer still there, then receive
/// (freeing what arrives) until each of them has acknowledged. Returns the
/// blocks it still holds.
fn worker(
    seed: u64,
    index: usize,
    inbox: Receiver<Msg>,
    peers: Vec<Option<Sender<Msg>>>,
) -> Vec<Block> {
    let mut rng = Rng::new(seed ^ (index as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F));
    let mut live: Vec<Block> = Vec::new();
    let mut next_id = (index as u64) << 48;
    let mut new_block = |size: usize, align: usize| -> Block {
        next_id += 1;
        Block {
            addr: 0,
            size,
            align,
            id: next_id,
            key: mix(seed ^ next_id),
        }
    };
    let free = |b: Block, when: &str| {
        b.check(b.size, seed, when);
        // SAFETY: `b` is live with this layout.
        unsafe { dealloc(b.ptr(), b.layout()) };
    };
    // Peers we may still send to: they have not said Leaving.
    let mut present: Vec<usize> = (0..peers.len()).filter(|&j| j != index).collect();
    let ack = |present: &mut Vec<usize>, j: usize| {
        present.retain(|&k| k != j);
        // The peer waits for this Ack, so it is still there to receive it.
        peers[j]
            .as_ref()
            .unwrap()
            .send(Msg::Ack)
            .expect("a leaving peer waits for our Ack");
    };

    let ops = OPS_PER_THREAD * (index + 1) / THREADS;
    for _ in 0..ops {
        while let Ok(msg) = inbox.try_recv() {
            match msg {
                Msg::Block(b) => {
                    b.check(b.size, seed, "on receipt from another thread");
                    live.push(b);
                }
                Msg::Leaving(j) => ack(&mut present, j),
                Msg::Ack => unreachable!("an Ack before we said Leaving"),
            }
        }
        let roll = if live.len() >= MAX_LIVE_PER_THREAD {
            70 // free
        } else if live.is_empty() {
            0 // allocate
        } else {
            rng.next() % 100
        };
        match roll {
            // Allocate, sometimes zeroed.
            0..=29 => {
                let size = rng.size();
                let align = 1 << rng.range(0, 4); // 1..=16
                let mut b = new_block(size, align);
                let zeroed = rng.next() % 4 == 0;
                // SAFETY: the layout has a non-zero size.
                let p = unsafe {
                    if zeroed {
                        alloc_zeroed(b.layout())
                    } else {
                        alloc(b.layout())
                    }
                };
                assert!(!p.is_null(), "allocation of {size} B failed (seed {seed})");
                assert_eq!(p as usize % align, 0, "misaligned (seed {seed})");
                if zeroed {
                    // SAFETY: `p` holds `size` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                    assert!(
                        bytes.iter().all(|&x| x == 0),
                        "alloc_zeroed of {size} B returned dirty memory (seed {seed})"
                    );
                }
                b.addr = p as usize;
                // SAFETY: `p` is a live block of `size` bytes.
                assert!(unsafe { slubmalloc::usable_size(p) } >= size);
                b.fill(0);
                live.push(b);
            }
            // Aligned allocation, 8 B to 64 KiB.
            30..=39 => {
                let size = rng.size();
                let align = 1 << rng.range(3, 16);
                let mut b = new_block(size, align);
                // SAFETY: the layout has a non-zero size.
                let p = unsafe { alloc(b.layout()) };
                assert!(
                    !p.is_null(),
                    "aligned allocation {size} B @ {align} failed (seed {seed})"
                );
                assert_eq!(
                    p as usize % align,
                    0,
                    "{size} B @ {align} misaligned (seed {seed})"
                );
                b.addr = p as usize;
                b.fill(0);
                live.push(b);
            }
            // Realloc: to a random size, or grow, or shrink.
            40..=59 => {
                let i = rng.range(0, live.len() - 1);
                let b = live[i];
                let new_size = match rng.next() % 4 {
                    0 | 1 => rng.size(),
                    2 => (b.size + rng.range(1, b.size.max(8))).min(MAX_SIZE),
                    _ => (b.size / 2).max(1),
                };
                b.check(b.size, seed, "before realloc");
                // SAFETY: `b` is live with this layout; `new_size` is not zero.
                let q = unsafe { realloc(b.ptr(), b.layout(), new_size) };
                assert!(!q.is_null(), "realloc to {new_size} B failed (seed {seed})");
                assert_eq!(
                    q as usize % b.align,
                    0,
                    "realloc lost the alignment (seed {seed})"
                );
                let nb = Block {
                    addr: q as usize,
                    size: new_size,
                    ..b
                };
                nb.check(b.size.min(new_size), seed, "after realloc");
                nb.fill(b.size.min(new_size));
                live[i] = nb;
            }
            // Free.
            60..=89 => {
                let i = rng.range(0, live.len() - 1);
                free(live.swap_remove(i), "before free");
            }
            // Hand a block to another thread (which will free, resize or
            // pass it on), if any is left.
            _ => {
                let i = rng.range(0, live.len() - 1);
                let b = live.swap_remove(i);
                if present.is_empty() {
                    free(b, "before free");
                } else {
                    let to = present[rng.range(0, present.len() - 1)];
                    let to = peers[to].as_ref().unwrap();
                    to.send(Msg::Block(b))
                        .expect("a peer receives until it has our Ack");
                }
            }
        }
    }

    // Leave: every peer still there acknowledges; blocks that arrive
    // meanwhile are freed here, while other threads are leaving too.
    let mut waiting = present.clone();
    for &j in &waiting {
        peers[j]
            .as_ref()
            .unwrap()
            .send(Msg::Leaving(index))
            .expect("a peer receives until it has our Ack");
    }
    while !waiting.is_empty() {
        match inbox
            .recv()
            .expect("a peer we wait for still holds its sender")
        {
            Msg::Block(b) => free(b, "before a free while leaving"),
            Msg::Leaving(j) => ack(&mut present, j),
            Msg::Ack => {
                waiting.pop();
            }
        }
    }
    live
}

/// Per-class blocks in use, as the statistics count them.
fn in_use() -> ([u64; NUM_CLASSES], u64) {
    let s = slubmalloc::stats();
    let mut n = [0u64; NUM_CLASSES];
    for (i, c) in s.caches().enumerate() {
        n[i] = c.objects_in_use;
    }
    (n, s.totals.large_blocks)
}

/// What the statistics should count beyond the baseline.
struct Expected {
    per_class: [u64; NUM_CLASSES],
    large: u64,
    /// All allocations, small and large.
    total: u64,
}

/// Whether the allocator runs in its debug mode (read by it at start-up):
/// blocks then sit in bigger classes than their size suggests, so only the
/// total can be predicted, not the class.
fn debug_mode() -> bool {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var("SLUBMALLOC_DEBUG").as_deref() == Ok("1"))
}

impl Expected {
    fn new() -> Expected {
        Expected {
            per_class: [0; NUM_CLASSES],
            large: 0,
            total: 0,
        }
    }

    /// Counts one live allocation the test knows of: its class is the one
    /// whose object size is its usable size, or it is a large block.
    fn count(&mut self, sizes: &[u64; NUM_CLASSES], p: *mut u8, size: usize, align: usize) {
        self.total += 1;
        if debug_mode() {
            return;
        }
        if size.max(align) > MAX_SMALL_BYTES {
            self.large += 1;
            return;
        }
        // SAFETY: `p` is a live block of this allocator.
        let usable = unsafe { slubmalloc::usable_size(p) } as u64;
        let class = sizes
            .iter()
            .position(|&s| s == usable)
            .unwrap_or_else(|| panic!("usable size {usable} of a {size} B block is no class size"));
        self.per_class[class] += 1;
    }

    /// Compares with the statistics' counts `now` against `base`.
    fn assert_counted(
        &self,
        sizes: &[u64; NUM_CLASSES],
        base: &([u64; NUM_CLASSES], u64),
        now: &([u64; NUM_CLASSES], u64),
        what: &str,
    ) {
        let sum = |c: &([u64; NUM_CLASSES], u64)| c.0.iter().sum::<u64>() + c.1;
        assert_eq!(
            sum(now).wrapping_sub(sum(base)),
            self.total,
            "{what}: blocks in use, all classes and large blocks together"
        );
        if debug_mode() {
            return;
        }
        for (i, size) in sizes.iter().enumerate().take(NUM_CLASSES) {
            assert_eq!(
                now.0[i].wrapping_sub(base.0[i]),
                self.per_class[i],
                "{what}: class {i} ({size} B) counts the wrong number of blocks in use"
            );
        }
        assert_eq!(
            now.1.wrapping_sub(base.1),
            self.large,
            "{what}: large blocks in use"
        );
    }
}

/// The walk must agree with the statistics, class by class.
fn assert_walk_agrees(when: &str) {
    let s = slubmalloc::stats();
    let w = slubmalloc::walk();
    for (i, (c, wc)) in s.caches().zip(w.caches.iter()).enumerate() {
        let stats = (
            c.objects_in_use,
            c.slabs,
            c.node_partial_slabs,
            c.partial_free_objects,
            c.thread_partial_slabs,
        );
        let walked = (
            wc.objects_in_use,
            wc.slabs,
            wc.node_partial_slabs,
            wc.partial_free_objects,
            wc.thread_partial_slabs,
        );
        assert_eq!(
            stats, walked,
            "{when}: class {i} ({} B): stats (in_use, slabs, node_partial, partial_free, thread_partial) \
             differ from the walk",
            c.object_size
        );
        assert_eq!(
            wc.inuse_mismatches, 0,
            "{when}: class {i}: slab in-use counts disagree with free lists"
        );
    }
    assert_eq!(
        s.totals.large_blocks, w.large_blocks,
        "{when}: large blocks"
    );
}

/// The test harness's main thread allocates once more after it starts this
/// test (its bookkeeping, and the context it blocks in while waiting for the
/// test's result); that must not fall inside the counted section. Waits until
/// the main thread sleeps, which it does only once it waits for the result.
fn wait_for_the_harness_to_block() {
    let path = format!("/proc/self/task/{}/stat", std::process::id());
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(10) {
        let Ok(stat) = std::fs::read_to_string(&path) else {
            return; // no procfs: nothing to wait for
        };
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.trim_start().chars().next());
        if state == Some('S') {
            return;
        }
        thread::yield_now();
    }
    panic!("the harness's main thread never went to sleep");
}

#[test]
fn random_ops_across_threads_keep_contents_and_exact_stats() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let seed = match std::env::var("SLUBMALLOC_TEST_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .expect("SLUBMALLOC_TEST_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    println!("seed {seed} (replay with SLUBMALLOC_TEST_SEED={seed})");

    let mut sizes = [0u64; NUM_CLASSES];
    for (i, c) in slubmalloc::stats().caches().enumerate() {
        sizes[i] = c.object_size;
    }
    // Everything the test keeps across the counted section is allocated
    // before the baseline, so it is part of it.
    let mut handles = Vec::with_capacity(THREADS);
    let mut results: Vec<Vec<Block>> = Vec::with_capacity(THREADS);
    // Warm up what the first spawn and channel use initialise once.
    {
        let (tx, rx) = channel::<u64>();
        thread::spawn(move || tx.send(1).unwrap()).join().unwrap();
        assert_eq!(rx.recv().unwrap(), 1);
    }
    debug_mode(); // reads the environment once, before the baseline
    wait_for_the_harness_to_block();
    let base = in_use();

    let mut inboxes = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..THREADS {
        let (tx, rx) = channel();
        senders.push(tx);
        inboxes.push(rx);
    }
    for (index, inbox) in inboxes.into_iter().enumerate() {
        let peers: Vec<Option<Sender<Msg>>> = senders
            .iter()
            .enumerate()
            .map(|(j, tx)| (j != index).then(|| tx.clone()))
            .collect();
        handles.push(thread::spawn(move || worker(seed, index, inbox, peers)));
    }
    drop(senders);
    for h in handles.drain(..) {
        results.push(h.join().expect("a worker panicked"));
    }

    // Quiescent: only this thread runs. What is in use beyond the baseline
    // must be exactly the blocks the workers returned and the vectors that
    // hold them.
    let mut expect = Expected::new();
    for v in &results {
        for b in v {
            expect.count(&sizes, b.ptr(), b.size, b.align);
        }
        if v.capacity() > 0 {
            let bytes = v.capacity() * std::mem::size_of::<Block>();
            let align = std::mem::align_of::<Block>();
            expect.count(&sizes, v.as_ptr() as *mut u8, bytes, align);
        }
    }
    let now = in_use(); // before anything below allocates
    let held: usize = results.iter().map(Vec::len).sum();
    let what = format!("seed {seed}, {held} blocks held");
    expect.assert_counted(&sizes, &base, &now, &what);
    drop(what);
    assert_walk_agrees("with the survivors live");

    for v in results.iter_mut() {
        for b in v.drain(..) {
            b.check(b.size, seed, "before the final free");
            // SAFETY: `b` is live with this layout.
            unsafe { dealloc(b.ptr(), b.layout()) };
        }
    }
    results.clear(); // frees the inner vectors, keeps the outer one
    let end = in_use();
    let what = format!("seed {seed}, after freeing everything");
    Expected::new().assert_counted(&sizes, &base, &end, &what);
    assert_walk_agrees("after freeing everything");
    println!("seed {seed}: {held} blocks survived the run and were counted exactly");
}
