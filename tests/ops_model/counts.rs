//! What the statistics should count: the allocator's mode, size classes,
//! the tallies of the model and the harness (`Counted`), and the checks at
//! quiescent points.

use super::*;

// ---------------------------------------------------------------------------
// Mode and size classes

/// The allocator's mode, as its environment variables set it.
#[derive(Clone, Copy, Debug)]
pub struct Mode {
    pub debug: bool,
    pub freelist_random: bool,
}

/// Read once, with `getenv` (no allocation: `Counted` asks for it while
/// allocating).
pub fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let on = |name: &std::ffi::CStr| {
            // SAFETY: `name` is a C string; the result is null or a C string
            // of the environment, which nothing changes meanwhile.
            let v = unsafe { libc::getenv(name.as_ptr()) };
            // SAFETY: as above.
            !v.is_null() && unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() == b"1"
        };
        Mode {
            debug: on(c"SLUBMALLOC_DEBUG"),
            freelist_random: on(c"SLUBMALLOC_FREELIST_RANDOM"),
        }
    })
}

/// Object sizes of the classes, smallest first, from the public
/// `class_size` (no statistics, no lock: usable from inside `Counted`).
pub fn class_sizes() -> &'static [usize; NUM_CLASSES] {
    static SIZES: OnceLock<[usize; NUM_CLASSES]> = OnceLock::new();
    SIZES.get_or_init(|| {
        let mut sizes = [0; NUM_CLASSES];
        let mut n = 1;
        for s in sizes.iter_mut() {
            *s = slubmalloc::class_size(n).expect("NUM_CLASSES classes");
            n = *s + 1;
        }
        assert_eq!(
            slubmalloc::class_size(n),
            None,
            "more than NUM_CLASSES classes"
        );
        sizes
    })
}

/// What the statistics count a live block as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Class index and object size.
    Small(usize, usize),
    /// A block above the classes, medium or large: its usable size (its
    /// span's or its mapping's bytes).
    Large(usize),
    /// Debug mode: only "a block".
    Block,
}

/// What a live block allocated (or resized) with `size` and `align` is:
/// the layout tells a slab block from a large one (an over-aligned large
/// block may be smaller than the largest class), the usable size its class.
///
/// # Safety
/// `p` is a live block of this allocator, of that layout.
pub(super) unsafe fn kind_of(p: *mut u8, size: usize, align: usize) -> Kind {
    if mode().debug {
        return Kind::Block;
    }
    // SAFETY: per the contract.
    let usable = unsafe { slubmalloc::usable_size(p) };
    if size.max(align) > MAX_SMALL_BYTES {
        return Kind::Large(usable);
    }
    match class_sizes().binary_search(&usable) {
        Ok(class) => Kind::Small(class, usable),
        Err(_) => panic!("usable size {usable} of a small block {p:?} is no class size"),
    }
}

// ---------------------------------------------------------------------------
// What the statistics should have counted

/// Changes to the statistics that a party (the model, or the harness through
/// `Counted`) caused since the last reset.
pub struct Tally {
    pub(super) in_use: [AtomicI64; NUM_CLASSES],
    pub(super) allocs: [AtomicI64; NUM_CLASSES],
    pub(super) frees: [AtomicI64; NUM_CLASSES],
    pub(super) large: AtomicI64,
    pub(super) bytes: AtomicI64,
    pub(super) blocks: AtomicI64,
    /// Bumped by every change: a reader that sees it unchanged across a
    /// snapshot knows the snapshot is consistent.
    pub(super) version: AtomicU64,
}

impl Tally {
    pub const fn new() -> Tally {
        Tally {
            in_use: [const { AtomicI64::new(0) }; NUM_CLASSES],
            allocs: [const { AtomicI64::new(0) }; NUM_CLASSES],
            frees: [const { AtomicI64::new(0) }; NUM_CLASSES],
            large: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            blocks: AtomicI64::new(0),
            version: AtomicU64::new(0),
        }
    }

    pub(super) fn add(a: &AtomicI64, n: i64) {
        // Relaxed: readers look only at quiescent points, after a lock or a
        // join that orders these adds before them.
        a.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn added(&self, k: Kind) {
        Self::add(&self.blocks, 1);
        match k {
            Kind::Small(c, bytes) => {
                Self::add(&self.in_use[c], 1);
                Self::add(&self.allocs[c], 1);
                Self::add(&self.bytes, bytes as i64);
            }
            Kind::Large(bytes) => {
                Self::add(&self.large, 1);
                Self::add(&self.bytes, bytes as i64);
            }
            Kind::Block => {}
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn removed(&self, k: Kind) {
        Self::add(&self.blocks, -1);
        match k {
            Kind::Small(c, bytes) => {
                Self::add(&self.in_use[c], -1);
                Self::add(&self.frees[c], 1);
                Self::add(&self.bytes, -(bytes as i64));
            }
            Kind::Large(bytes) => {
                Self::add(&self.large, -1);
                Self::add(&self.bytes, -(bytes as i64));
            }
            Kind::Block => {}
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    /// A realloc from `old` to `new`; `moved`: the address changed. A small
    /// block resized in place stays in its class and counts no event.
    pub(super) fn resized(&self, old: Kind, new: Kind, moved: bool) {
        match (old, new) {
            (Kind::Small(a, _), Kind::Small(b, _)) if !moved => {
                assert_eq!(a, b, "a small block resized in place changed class")
            }
            (Kind::Block, Kind::Block) => {}
            _ => {
                self.removed(old);
                self.added(new);
            }
        }
    }

    pub(super) fn reset(&self) {
        for a in self.in_use.iter().chain(&self.allocs).chain(&self.frees) {
            a.store(0, Ordering::Relaxed);
        }
        for a in [&self.large, &self.bytes, &self.blocks] {
            a.store(0, Ordering::Relaxed);
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn get(a: &AtomicI64) -> i64 {
        a.load(Ordering::Relaxed)
    }
}

/// What the harness (everything but the model: the test framework, thread
/// spawns, the fuzzer's Rust side) allocates, through [`Counted`].
pub static HARNESS: Tally = Tally::new();

/// The global allocator of the test and the fuzz targets: slubmalloc, with
/// every call counted in [`HARNESS`] so that a quiescent check can predict
/// the statistics exactly although the harness allocates too.
pub struct Counted;

// SAFETY: every call goes to SlubMalloc, which honours the contract; the
// counting around it reads only the blocks involved.
unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: per the caller's contract.
        let p = unsafe { SlubMalloc.alloc(layout) };
        if !p.is_null() {
            // SAFETY: `p` is live.
            HARNESS.added(unsafe { kind_of(p, layout.size(), layout.align()) });
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: per the caller's contract.
        let p = unsafe { SlubMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            // SAFETY: `p` is live.
            HARNESS.added(unsafe { kind_of(p, layout.size(), layout.align()) });
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: `p` is live until the dealloc below.
        HARNESS.removed(unsafe { kind_of(p, layout.size(), layout.align()) });
        // SAFETY: per the caller's contract.
        unsafe { SlubMalloc.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `p` is live until the realloc below.
        let old = unsafe { kind_of(p, layout.size(), layout.align()) };
        // SAFETY: per the caller's contract.
        let q = unsafe { SlubMalloc.realloc(p, layout, new_size) };
        if !q.is_null() {
            // SAFETY: `q` is live.
            HARNESS.resized(old, unsafe { kind_of(q, new_size, layout.align()) }, q != p);
        }
        q
    }
}

// ---------------------------------------------------------------------------
// Quiescent checks

/// The walk agrees with the statistics class by class. Only when no other
/// thread allocates.
pub fn assert_walk_agrees(when: &str) {
    let (s, w, _) = snapshot();
    compare_walk(&s, &w, when);
}

/// The statistics and a walk, and whether nothing moved them meanwhile:
/// the harness's own allocations (a test framework's thread may allocate)
/// and the background purger, which gives the node lists' empty slabs back
/// to their segments when a purge is due, do. A walk that a purge crossed
/// can see a slab listed and then free.
fn snapshot() -> (Stats, slubmalloc::Walk, bool) {
    let v = HARNESS.version.load(Ordering::Relaxed);
    let s = slubmalloc::stats();
    let w = slubmalloc::walk();
    let after = slubmalloc::stats();
    let quiet = HARNESS.version.load(Ordering::Relaxed) == v
        && s.caches().eq(after.caches())
        && s.totals.large_blocks == after.totals.large_blocks
        && s.totals.medium_blocks == after.totals.medium_blocks;
    (s, w, quiet)
}

pub(super) fn compare_walk(s: &Stats, w: &slubmalloc::Walk, when: &str) {
    for (i, (c, wc)) in s.caches().zip(w.caches.iter()).enumerate() {
        let kept = (
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
            kept, walked,
            "{when}: class {i} ({} B): stats (in_use, slabs, node_partial, partial_free, \
             thread_partial) differ from the walk",
            c.object_size
        );
        assert_eq!(
            wc.inuse_mismatches, 0,
            "{when}: class {i}: slab in-use counts disagree with free lists"
        );
        assert!(
            c.objects_in_use <= c.objects_total,
            "{when}: class {i}: more in use than slots"
        );
    }
    assert_eq!(
        s.totals.large_blocks, w.large_blocks,
        "{when}: large blocks"
    );
    assert_eq!(
        (s.totals.medium_blocks, s.totals.medium_bytes),
        (w.medium_blocks, w.medium_bytes),
        "{when}: medium blocks"
    );
}

/// At a quiescent point: the walk agrees with the statistics, and the
/// statistics moved since the baseline by what the model and the harness
/// did. Retried while something moves them meanwhile (`snapshot`), up to a
/// limit.
pub(super) fn verify(sh: &Shared, when: &str) {
    sh.checks.fetch_add(1, Ordering::Relaxed);
    let base = sh.base.lock().unwrap();
    let base = base.as_ref().expect("a baseline before any check");
    for attempt in 0.. {
        let (s, w, quiet) = snapshot();
        if !quiet && attempt < 100 {
            thread::yield_now();
            continue;
        }
        compare_walk(&s, &w, when);
        compare_counts(base, &s, &sh.model, &HARNESS, true, when);
        return;
    }
}

/// For a caller that holds no model blocks (the C API target): at a
/// quiescent point, the walk agrees with the statistics, and the blocks and
/// bytes in use moved since `base` by what the harness did (`HARNESS` reset
/// when `base` was taken). Events are not compared: the caller's own calls
/// count some that no tally saw.
pub fn verify_since(base: &Stats, when: &str) {
    let nothing = Tally::new();
    for attempt in 0.. {
        let (s, w, quiet) = snapshot();
        if !quiet && attempt < 100 {
            continue;
        }
        compare_walk(&s, &w, when);
        compare_counts(base, &s, &nothing, &HARNESS, false, when);
        return;
    }
}

/// Takes a baseline for `verify_since`.
pub fn baseline() -> Stats {
    mode();
    class_sizes();
    pattern();
    HARNESS.reset();
    slubmalloc::stats()
}

pub(super) fn compare_counts(
    base: &Stats,
    now: &Stats,
    model: &Tally,
    harness: &Tally,
    events: bool,
    when: &str,
) {
    let get = Tally::get;
    let delta = |a: u64, b: u64| a.wrapping_sub(b) as i64;
    let big = |s: &Stats| s.totals.medium_blocks + s.totals.large_blocks;
    let blocks = |s: &Stats| s.caches().map(|c| c.objects_in_use).sum::<u64>() + big(s);
    assert_eq!(
        delta(blocks(now), blocks(base)),
        get(&model.blocks) + get(&harness.blocks),
        "{when}: blocks in use, all classes, medium and large together (model {}, harness {})",
        get(&model.blocks),
        get(&harness.blocks)
    );
    if mode().debug {
        return;
    }
    for (i, (n, b)) in now.caches().zip(base.caches()).enumerate() {
        let m_in = get(&model.in_use[i]);
        let h_in = get(&harness.in_use[i]);
        assert_eq!(
            delta(n.objects_in_use, b.objects_in_use),
            m_in + h_in,
            "{when}: class {i} ({} B): blocks in use (model {m_in}, harness {h_in})",
            n.object_size
        );
        if !events {
            continue;
        }
        type Count = fn(&slubmalloc::CacheStats) -> u64;
        let allocs: Count = |c| c.allocs();
        let frees: Count = |c| c.frees();
        for (what, count, m, h) in [
            ("allocation", allocs, &model.allocs, &harness.allocs),
            ("free", frees, &model.frees, &harness.frees),
        ] {
            let (m, h) = (get(&m[i]), get(&h[i]));
            assert_eq!(
                delta(count(n), count(b)),
                m + h,
                "{when}: class {i} ({} B): {what} events (model {m}, harness {h})",
                n.object_size
            );
        }
    }
    assert_eq!(
        delta(big(now), big(base)),
        get(&model.large) + get(&harness.large),
        "{when}: medium and large blocks (model {}, harness {})",
        get(&model.large),
        get(&harness.large)
    );
    assert_eq!(
        delta(now.totals.bytes_in_use, base.totals.bytes_in_use),
        get(&model.bytes) + get(&harness.bytes),
        "{when}: bytes in use (model {}, harness {})",
        get(&model.bytes),
        get(&harness.bytes)
    );
    // Segments hold every slab and medium block; large mappings hold every
    // large block and the cached ones.
    let segment_bytes = now.totals.segments * (4 << 20);
    let slab_bytes: u64 = now
        .caches()
        .map(|c| c.objects_total * c.object_size)
        .sum::<u64>()
        + now.totals.medium_bytes;
    assert!(
        slab_bytes <= segment_bytes,
        "{when}: {slab_bytes} B of slab slots in {} segments",
        now.totals.segments
    );
    let large_mapped = now.totals.bytes_mapped.wrapping_sub(segment_bytes);
    assert!(
        now.totals.large_bytes + now.totals.large_cached_bytes <= large_mapped,
        "{when}: large blocks ({} B) and cached ({} B) exceed the large mappings ({large_mapped} B)",
        now.totals.large_bytes,
        now.totals.large_cached_bytes
    );
}
