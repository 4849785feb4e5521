//! The random-operations model shared by `tests/random_ops.rs` and the fuzz
//! targets (`fuzz/fuzz_targets/*.rs` include this file by path): one decoder
//! turns bytes into allocator operations, one executor runs them with
//! content checks, and one runner drives one to four threads, either in
//! lockstep (one operation at a time, in an order fixed by the input, so a
//! fuzz input replays exactly) or all at once (real races: remote frees
//! against refills and exits, contended node locks). The test feeds it bytes
//! from a seeded `rand` generator, the fuzz targets feed it libFuzzer's input.
//!
//! What is checked:
//! - every block: non-null, aligned, usable size at least its size, zeroed
//!   when asked, and its contents (a pattern derived from its key) intact
//!   before each realloc and free, after each realloc and hand-off;
//! - at each quiescent point (a `Check` operation, the start and the end):
//!   the verification walk agrees with the statistics class by class, and
//!   the statistics moved since the start by exactly what the model and the
//!   harness did: blocks in use per class and large, bytes in use, and the
//!   per-class allocation and free events (the harness's own allocations
//!   are counted by [`Counted`], the global allocator of every includer,
//!   while the model calls [`SlubMalloc`] directly). Under `SLUBMALLOC_DEBUG=1`
//!   blocks sit in other classes than their size says, so only the total
//!   number of blocks is predicted there;
//! - `Fork`: a child checks and frees the thread's blocks, allocates and
//!   frees more, and (lockstep) checks the walk; `Misuse`: a child commits a
//!   misuse and must die by SIGABRT after one "slubmalloc: " line naming it
//!   and its address; `Oom`: a child under an address-space limit sees null
//!   returned, not a crash, and allocates again after freeing.
//!
//! Input layout (see [`run`]): the first byte picks the number of threads,
//! the rest is cut into one equal slice per thread; each slice is decoded by
//! [`decode`] into that thread's operations.
//!
//! Why a file included by path rather than a module of the crate behind a
//! feature: the model needs `libc` for fork and rlimits and panics on
//! failure; none of that belongs in an allocator crate that must never
//! allocate or unwind on its paths, and a feature would be one more
//! user-visible switch. A plain file costs the allocator crate nothing.

#![allow(dead_code)] // each includer uses part of the model

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, Scope, ScopedJoinHandle};

use slubmalloc::{SlubMalloc, Stats, MAX_SMALL_BYTES, NUM_CLASSES};

/// The most threads a run drives.
pub const MAX_THREADS: usize = 4;
/// Slots in each thread's table of live blocks.
pub const SLOTS: usize = 4096;
/// Requested bytes all threads together keep live; past it an allocation
/// asks for a few KiB instead.
pub const MAX_LIVE_BYTES: usize = 384 << 20;
/// Blocks up to this size are filled and checked whole; above it, this many
/// leading bytes, one word per `SAMPLE_BYTES` and the last `TAIL_BYTES`.
const FULL_BYTES: usize = 32 << 10;
const SAMPLE_BYTES: usize = 64 << 10;
const TAIL_BYTES: usize = 64;
/// Blocks in flight from one thread to another.
const RING: usize = 64;

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
enum Kind {
    /// Class index and object size.
    Small(usize, usize),
    /// Mapped bytes (its usable size).
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
unsafe fn kind_of(p: *mut u8, size: usize, align: usize) -> Kind {
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
    in_use: [AtomicI64; NUM_CLASSES],
    allocs: [AtomicI64; NUM_CLASSES],
    frees: [AtomicI64; NUM_CLASSES],
    large: AtomicI64,
    bytes: AtomicI64,
    blocks: AtomicI64,
    /// Bumped by every change: a reader that sees it unchanged across a
    /// snapshot knows the snapshot is consistent.
    version: AtomicU64,
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

    fn add(a: &AtomicI64, n: i64) {
        // Relaxed: readers look only at quiescent points, after a lock or a
        // join that orders these adds before them.
        a.fetch_add(n, Ordering::Relaxed);
    }

    fn added(&self, k: Kind) {
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

    fn removed(&self, k: Kind) {
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
    fn resized(&self, old: Kind, new: Kind, moved: bool) {
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

    fn reset(&self) {
        for a in self.in_use.iter().chain(&self.allocs).chain(&self.frees) {
            a.store(0, Ordering::Relaxed);
        }
        for a in [&self.large, &self.bytes, &self.blocks] {
            a.store(0, Ordering::Relaxed);
        }
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    fn get(a: &AtomicI64) -> i64 {
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
// Blocks and their contents

/// A live block of the model. An address rather than a pointer, so that it
/// crosses threads.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub addr: usize,
    pub size: usize,
    pub align: usize,
    /// The pattern's key; unique per block.
    pub key: u64,
}

/// splitmix64's finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The pattern's period, a prime: byte `b` of a block with key `k` is
/// `pattern()[(k + b) % PERIOD]`, wherever the block has been moved or
/// resized to, so two live blocks share their bytes only if their keys
/// agree modulo the period. Filling is a copy and checking a comparison
/// of slices (`memcpy`, `bcmp`): a fuzzer instruments every comparison in
/// Rust code, and a byte loop made checks most of a run's time.
const PERIOD: usize = 65_521;
/// Contents are written and compared in runs of at most this many bytes.
const RUN_BYTES: usize = 4096;

/// `PERIOD + RUN_BYTES` bytes of noise, repeating after `PERIOD`.
fn pattern() -> &'static [u8] {
    static PATTERN: OnceLock<Box<[u8]>> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let period: Vec<u8> = (0..PERIOD as u64).map(|i| mix(i) as u8).collect();
        period.iter().chain(&period[..RUN_BYTES]).copied().collect()
    })
}

impl Block {
    pub fn layout(&self) -> Layout {
        Layout::from_size_align(self.size, self.align).unwrap()
    }

    pub fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// The pattern of bytes `lo..lo + len` (`len <= RUN_BYTES`).
    fn expected(&self, lo: usize, len: usize) -> &'static [u8] {
        let start = (self.key as usize % PERIOD + lo) % PERIOD;
        &pattern()[start..start + len]
    }

    /// Calls `f(offset, len)` for each kept run (at most `RUN_BYTES`) of
    /// bytes in `from..to`. Kept whatever the block's size: all of the first
    /// `FULL_BYTES`, then 64 bytes every `SAMPLE_BYTES`; and the last
    /// `TAIL_BYTES` of a block of `tail_of` bytes (clipped to `from..to`).
    fn for_each_kept(from: usize, to: usize, tail_of: usize, mut f: impl FnMut(usize, usize)) {
        let mut lo = from;
        while lo < to.min(FULL_BYTES) {
            let hi = (lo + RUN_BYTES).min(to).min(FULL_BYTES);
            f(lo, hi - lo);
            lo = hi;
        }
        let mut k = (from / SAMPLE_BYTES).max(1); // sample 0 lies in the head
        while k * SAMPLE_BYTES < to {
            let lo = (k * SAMPLE_BYTES).max(from);
            let hi = (k * SAMPLE_BYTES + 64).min(to);
            if lo < hi {
                f(lo, hi - lo);
            }
            k += 1;
        }
        let mut lo = tail_of.saturating_sub(TAIL_BYTES).max(from);
        while lo < tail_of.min(to) {
            let hi = (lo + RUN_BYTES).min(tail_of.min(to));
            f(lo, hi - lo);
            lo = hi;
        }
    }

    /// The bytes `lo..lo + len` of the live block.
    #[allow(clippy::mut_from_ref)]
    fn bytes(&self, lo: usize, len: usize) -> &mut [u8] {
        assert!(lo + len <= self.size);
        // SAFETY: inside the live block, which only its holder touches, and
        // the slice does not outlive the call that uses it.
        unsafe { std::slice::from_raw_parts_mut(self.ptr().add(lo), len) }
    }

    /// Writes the pattern into the kept bytes from `from` on, and into the
    /// whole tail (writing the pattern never makes the block inconsistent).
    pub fn fill(&self, from: usize) {
        let write =
            |lo: usize, len: usize| self.bytes(lo, len).copy_from_slice(self.expected(lo, len));
        Self::for_each_kept(from, self.size, 0, write);
        Self::for_each_kept(
            self.size.saturating_sub(TAIL_BYTES),
            self.size,
            self.size,
            write,
        );
    }

    /// Checks the kept bytes below `upto`, with the tail of a block of
    /// `tail_of` bytes (the block's size, or its size before a realloc).
    pub fn check(&self, upto: usize, tail_of: usize, when: &str) {
        Self::for_each_kept(0, upto, tail_of, |lo, len| {
            let got = self.bytes(lo, len);
            let want = self.expected(lo, len);
            if got != want {
                let i = (0..len).find(|&i| got[i] != want[i]).unwrap_or(0);
                self.differs(lo + i, got[i], want[i], when);
            }
        });
    }

    /// Checks the whole block (its kept bytes).
    pub fn check_all(&self, when: &str) {
        self.check(self.size, self.size, when)
    }

    /// Checks that the kept bytes are zero.
    pub fn check_zero(&self, when: &str) {
        static ZEROS: [u8; RUN_BYTES] = [0; RUN_BYTES];
        Self::for_each_kept(0, self.size, self.size, |lo, len| {
            let got = self.bytes(lo, len);
            if got != &ZEROS[..len] {
                let i = got.iter().position(|&b| b != 0).unwrap_or(0);
                self.differs(lo + i, got[i], 0, when);
            }
        });
    }

    #[cold]
    fn differs(&self, offset: usize, got: u8, want: u8, when: &str) -> ! {
        panic!("{when}: byte {offset} of {self:x?} is {got:#x}, not {want:#x}: contents changed")
    }
}

// ---------------------------------------------------------------------------
// Hand-offs: one lock-free single-producer single-consumer ring per ordered
// pair of threads, in fixed storage (a hand-off allocates nothing).

pub struct Ring {
    head: AtomicUsize,
    tail: AtomicUsize,
    slots: [UnsafeCell<MaybeUninit<Block>>; RING],
}

// SAFETY: a slot is written by the one producer before the Release store of
// `tail` that publishes it and read by the one consumer after the Acquire
// load that sees it; the producer reuses it only after the consumer's
// Release store of `head` says it was read.
unsafe impl Sync for Ring {}

impl Ring {
    pub const fn new() -> Ring {
        Ring {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            slots: [const { UnsafeCell::new(MaybeUninit::uninit()) }; RING],
        }
    }

    /// Producer side; false if the ring is full.
    pub fn push(&self, b: Block) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the consumer's Release store of `head`.
        if t - self.head.load(Ordering::Acquire) == RING {
            return false;
        }
        // SAFETY: the slot is not readable by the consumer (t >= head + 0
        // and not yet published) and we are the only producer.
        unsafe { (*self.slots[t % RING].get()).write(b) };
        // Release: publishes the slot; pairs with the Acquire in `pop`.
        self.tail.store(t + 1, Ordering::Release);
        true
    }

    /// Consumer side.
    pub fn pop(&self) -> Option<Block> {
        let h = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release store of `tail`.
        if h == self.tail.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: published by the producer (h < tail) and not yet released.
        let b = unsafe { (*self.slots[h % RING].get()).assume_init_read() };
        // Release: hands the slot back; pairs with the Acquire in `push`.
        self.head.store(h + 1, Ordering::Release);
        Some(b)
    }
}

// ---------------------------------------------------------------------------
// Operations

/// A cursor over the bytes one thread decodes.
#[derive(Clone, Copy)]
pub struct Bytes<'a>(pub &'a [u8]);

impl Bytes<'_> {
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }

    /// A size from 1 B to 32 MiB, mostly small: the first byte picks the
    /// range, two more the size in it.
    pub fn size(&mut self) -> Option<usize> {
        let range = self.u8()?;
        let n = self.u16()? as usize;
        Some(match range {
            0..=109 => 1 + n % 128,
            110..=179 => 1 + n % 1024,
            180..=224 => 1 + n % MAX_SMALL_BYTES,
            225..=236 => MAX_SMALL_BYTES + 1 + n % (224 << 10),
            237..=241 => 1 + (n << 6) % (4 << 20),
            242..=253 => {
                // A class boundary, one byte below, on or above it.
                let class = class_sizes()[n % NUM_CLASSES];
                (class + (n / NUM_CLASSES) % 3).saturating_sub(1).max(1)
            }
            _ => 1 + (n << 9) % (32 << 20),
        })
    }

    /// An alignment: mostly up to 16, some to 64 KiB, a few to 4 MiB.
    pub fn align(&mut self) -> Option<usize> {
        let a = self.u8()?;
        Some(match a {
            0..=175 => 1 << (a % 5),
            176..=239 => 1 << (a % 17),
            _ => 1 << (17 + a % 6),
        })
    }
}

/// One operation of the model. Slots index the acting thread's table.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    Alloc {
        slot: usize,
        size: usize,
        align: usize,
        zeroed: bool,
    },
    Realloc {
        slot: usize,
        size: usize,
    },
    Free {
        slot: usize,
    },
    Usable {
        slot: usize,
    },
    /// Hands the block to another thread (which adopts it at its next
    /// operation), or frees it if alone or the ring is full.
    Send {
        slot: usize,
        to: u8,
    },
    /// `count` blocks into consecutive slots: fills slabs, overflows the
    /// thread partial list.
    AllocMany {
        slot: usize,
        count: usize,
        size: usize,
        align: usize,
    },
    /// Frees every `stride`-th slot, `count` times: partial slabs.
    FreeMany {
        slot: usize,
        count: usize,
        stride: usize,
    },
    Trim,
    /// The thread exits; a new thread carries on with its table and bytes.
    Exit,
    /// A quiescent point: every thread stops and the statistics are checked.
    Check,
    Yield,
    Fork {
        seed: u8,
    },
    Misuse {
        kind: u8,
        size: usize,
    },
    Oom {
        size: usize,
    },
}

/// Decodes the next operation; None at the end (an operation cut short by
/// the end of the bytes is dropped).
pub fn decode(b: &mut Bytes) -> Option<Op> {
    let op = b.u8()?;
    let slot = |b: &mut Bytes| b.u16().map(|s| s as usize % SLOTS);
    Some(match op {
        0..=89 => {
            let slot = slot(b)?;
            let size = b.size()?;
            let flags = b.u8()?;
            let align = Bytes(&[flags]).align()?;
            Op::Alloc {
                slot,
                size,
                align,
                zeroed: flags & 0x30 == 0x30,
            }
        }
        90..=119 => Op::Realloc {
            slot: slot(b)?,
            size: b.size()?,
        },
        120..=169 => Op::Free { slot: slot(b)? },
        170..=177 => Op::Usable { slot: slot(b)? },
        178..=195 => Op::Send {
            slot: slot(b)?,
            to: b.u8()?,
        },
        196..=203 => {
            let slot = slot(b)?;
            let count = 1 + b.u8()? as usize * 4;
            let size = b.size()?;
            let align = b.align()?;
            Op::AllocMany {
                slot,
                count,
                size,
                align,
            }
        }
        204..=213 => {
            let slot = slot(b)?;
            let count = 1 + b.u8()? as usize * 8;
            let stride = 1 + b.u8()? as usize % 16;
            Op::FreeMany {
                slot,
                count,
                stride,
            }
        }
        214..=219 => Op::Trim,
        220..=225 => Op::Exit,
        226..=229 => Op::Check,
        230..=245 => Op::Yield,
        246..=249 => Op::Fork { seed: b.u8()? },
        250..=252 => Op::Misuse {
            kind: b.u8()?,
            size: b.size()?,
        },
        _ => Op::Oom { size: b.size()? },
    })
}

// ---------------------------------------------------------------------------
// Running

/// How a run goes.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Threads (1..=MAX_THREADS); 0: the input's first byte picks.
    pub threads: usize,
    /// One operation at a time, in turn (replayable), or all at once.
    pub lockstep: bool,
    /// At most this many fork, misuse and out-of-memory children per run.
    pub max_forks: usize,
    pub max_misuses: usize,
    pub max_ooms: usize,
}

impl Config {
    /// The fuzz targets': the input picks the threads; one child of each
    /// kind per input at most.
    pub const fn fuzz(lockstep: bool) -> Config {
        Config {
            threads: 0,
            lockstep,
            max_forks: 1,
            max_misuses: 1,
            max_ooms: 1,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Running,
    AtSync,
    Exiting,
    Done,
    Joined,
}

struct Coord {
    phase: [Phase; MAX_THREADS],
    /// Bumped when a rendezvous ends.
    generation: u64,
    /// Lockstep: whose turn it is.
    turn: usize,
    /// A thread panicked: everyone stops.
    poisoned: bool,
}

/// What the threads of a run share.
struct Shared {
    cfg: Config,
    threads: usize,
    coord: Mutex<Coord>,
    cv: Condvar,
    rings: [[Ring; MAX_THREADS]; MAX_THREADS],
    model: Tally,
    base: Mutex<Option<Stats>>,
    live_bytes: AtomicUsize,
    forks: AtomicUsize,
    misuses: AtomicUsize,
    ooms: AtomicUsize,
    checks: AtomicUsize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Coord> {
        // A panicking thread may poison the lock; its state is still sound.
        self.coord.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'g>(&self, g: MutexGuard<'g, Coord>) -> MutexGuard<'g, Coord> {
        self.cv.wait(g).unwrap_or_else(|e| e.into_inner())
    }
}

/// One logical thread: its table and what is left of its bytes.
pub struct Actor<'a> {
    me: usize,
    table: Vec<Option<Block>>,
    next_key: u64,
    input: Bytes<'a>,
    /// Where adopted blocks are put.
    cursor: usize,
}

/// What a run did, for the caller to print.
#[derive(Clone, Copy, Debug, Default)]
pub struct Summary {
    pub threads: usize,
    pub checks: usize,
    pub forks: usize,
    pub misuses: usize,
    pub ooms: usize,
}

/// Runs `input` under `cfg`: see the module comment. Panics on any failure.
pub fn run(cfg: &Config, input: &[u8]) -> Summary {
    let (threads, rest) = if cfg.threads == 0 {
        match input.split_first() {
            Some((&b, rest)) => (1 + b as usize % MAX_THREADS, rest),
            None => return Summary::default(),
        }
    } else {
        (cfg.threads.min(MAX_THREADS), input)
    };
    mode();
    class_sizes();
    pattern();
    let sh = Box::new(Shared {
        cfg: *cfg,
        threads,
        coord: Mutex::new(Coord {
            phase: [Phase::Joined; MAX_THREADS],
            generation: 0,
            turn: 0,
            poisoned: false,
        }),
        cv: Condvar::new(),
        rings: [const { [const { Ring::new() }; MAX_THREADS] }; MAX_THREADS],
        model: Tally::new(),
        base: Mutex::new(None),
        live_bytes: AtomicUsize::new(0),
        forks: AtomicUsize::new(0),
        misuses: AtomicUsize::new(0),
        ooms: AtomicUsize::new(0),
        checks: AtomicUsize::new(0),
    });
    let share = rest.len() / threads;
    let mut finished: Vec<Actor> = Vec::with_capacity(threads);
    let mut actors: Vec<Actor> = (0..threads)
        .map(|me| Actor {
            me,
            table: vec![None; SLOTS],
            next_key: (me as u64) << 48,
            input: Bytes(&rest[me * share..(me + 1) * share]),
            cursor: 0,
        })
        .collect();
    let sh = &*sh;
    thread::scope(|s| {
        let mut handles: [Option<ScopedJoinHandle<'_, Actor>>; MAX_THREADS] = Default::default();
        {
            let mut c = sh.lock();
            // Running until each reaches its first rendezvous (the baseline).
            for me in 0..threads {
                c.phase[me] = Phase::Running;
            }
        }
        for (me, actor) in actors.drain(..).enumerate() {
            handles[me] = Some(spawn(s, sh, actor, true));
        }
        let mut failure = None;
        loop {
            let mut c = sh.lock();
            let event = loop {
                if let Some(i) =
                    (0..threads).find(|&i| matches!(c.phase[i], Phase::Exiting | Phase::Done))
                {
                    break Some(i);
                }
                let all = |p: &[Phase]| p[..threads].iter().all(|&x| x == Phase::Joined);
                if all(&c.phase) {
                    break None;
                }
                let parked = c.phase[..threads]
                    .iter()
                    .all(|&x| matches!(x, Phase::AtSync | Phase::Joined));
                if parked && !c.poisoned {
                    break None;
                }
                c = sh.wait(c);
            };
            match event {
                Some(i) => {
                    let exiting = c.phase[i] == Phase::Exiting && !c.poisoned;
                    if exiting {
                        c.phase[i] = Phase::Running;
                    }
                    drop(c);
                    match handles[i].take().unwrap().join() {
                        Ok(actor) if exiting => handles[i] = Some(spawn(s, sh, actor, false)),
                        Ok(actor) => {
                            finished.push(actor);
                            let mut c = sh.lock();
                            c.phase[i] = Phase::Joined;
                            if sh.cfg.lockstep && c.turn == i {
                                c.turn = next_turn(&c, threads, i);
                            }
                            sh.cv.notify_all();
                        }
                        Err(e) => {
                            let mut c = sh.lock();
                            c.phase[i] = Phase::Joined;
                            c.poisoned = true;
                            sh.cv.notify_all();
                            failure.get_or_insert(e);
                        }
                    }
                }
                None if c.phase[..threads].iter().all(|&x| x == Phase::Joined) => break,
                None => {
                    // Every thread is parked at a rendezvous: quiescent.
                    let checked = panic::catch_unwind(AssertUnwindSafe(|| {
                        let mut base = sh.base.lock().unwrap();
                        if base.is_none() {
                            sh.model.reset();
                            HARNESS.reset();
                            *base = Some(slubmalloc::stats());
                        } else {
                            drop(base);
                            verify(sh, "at a rendezvous of all threads");
                        }
                    }));
                    if let Err(e) = checked {
                        c.poisoned = true;
                        failure.get_or_insert(e);
                    }
                    c.generation += 1;
                    for p in c.phase[..threads].iter_mut() {
                        if *p == Phase::AtSync {
                            *p = Phase::Running;
                        }
                    }
                    sh.cv.notify_all();
                }
            }
        }
        if let Some(e) = failure {
            panic::resume_unwind(e);
        }
    });
    // Everything joined: free what is in flight and what the threads hold.
    for from in 0..threads {
        for to in 0..threads {
            while let Some(b) = sh.rings[from][to].pop() {
                b.check_all("in flight at the end");
                free_block(sh, b);
            }
        }
    }
    for a in finished.iter_mut() {
        for b in a.table.iter_mut().filter_map(Option::take) {
            b.check_all("at the end");
            free_block(sh, b);
        }
    }
    verify(sh, "after freeing everything");
    assert_eq!(
        Tally::get(&sh.model.blocks),
        0,
        "the model lost track of a block"
    );
    drop(finished);
    Summary {
        threads,
        checks: sh.checks.load(Ordering::Relaxed),
        forks: sh.forks.load(Ordering::Relaxed).min(sh.cfg.max_forks),
        misuses: sh.misuses.load(Ordering::Relaxed).min(sh.cfg.max_misuses),
        ooms: sh.ooms.load(Ordering::Relaxed).min(sh.cfg.max_ooms),
    }
}

fn next_turn(c: &Coord, threads: usize, from: usize) -> usize {
    (1..=threads)
        .map(|k| (from + k) % threads)
        .find(|&j| !matches!(c.phase[j], Phase::Joined | Phase::Done))
        .unwrap_or(from)
}

fn spawn<'scope, 'env: 'scope>(
    s: &'scope Scope<'scope, 'env>,
    sh: &'env Shared,
    actor: Actor<'env>,
    first: bool,
) -> ScopedJoinHandle<'scope, Actor<'env>> {
    s.spawn(move || worker(sh, actor, first))
}

/// Marks the thread done and wakes everyone if it unwinds.
struct PanicGuard<'a>(&'a Shared, usize);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if thread::panicking() {
            let mut c = self.0.lock();
            c.poisoned = true;
            c.phase[self.1] = Phase::Done;
            self.0.cv.notify_all();
        }
    }
}

fn worker<'a>(sh: &Shared, mut actor: Actor<'a>, first: bool) -> Actor<'a> {
    let me = actor.me;
    let _guard = PanicGuard(sh, me);
    if first && !rendezvous(sh, me) {
        return actor;
    }
    loop {
        if sh.cfg.lockstep {
            let mut c = sh.lock();
            while c.turn != me && !c.poisoned {
                c = sh.wait(c);
            }
        }
        if sh.lock().poisoned {
            sh.lock().phase[me] = Phase::Done;
            sh.cv.notify_all();
            return actor;
        }
        actor.receive(sh);
        let Some(op) = decode(&mut actor.input) else {
            sh.lock().phase[me] = Phase::Done;
            sh.cv.notify_all();
            return actor;
        };
        match op {
            Op::Check if sh.cfg.lockstep => {
                // The others wait for their turn: quiescent.
                verify(sh, "at a check in lockstep");
            }
            Op::Check => {
                if !rendezvous(sh, me) {
                    return actor;
                }
            }
            Op::Exit => {
                sh.lock().phase[me] = Phase::Exiting;
                sh.cv.notify_all();
                return actor;
            }
            op => actor.exec(sh, op),
        }
        if sh.cfg.lockstep {
            let mut c = sh.lock();
            c.turn = next_turn(&c, sh.threads, me);
            sh.cv.notify_all();
        }
    }
}

/// Parks at a rendezvous until the main thread has checked; false if the
/// run is being abandoned.
fn rendezvous(sh: &Shared, me: usize) -> bool {
    let mut c = sh.lock();
    c.phase[me] = Phase::AtSync;
    let generation = c.generation;
    sh.cv.notify_all();
    while c.generation == generation && !c.poisoned {
        c = sh.wait(c);
    }
    if c.poisoned {
        c.phase[me] = Phase::Done;
        sh.cv.notify_all();
        return false;
    }
    true
}

fn alloc_block(sh: &Shared, size: usize, align: usize, zeroed: bool, key: u64) -> Block {
    let layout = Layout::from_size_align(size, align).unwrap();
    // SAFETY: `size` is not zero.
    let p = unsafe {
        if zeroed {
            SlubMalloc.alloc_zeroed(layout)
        } else {
            SlubMalloc.alloc(layout)
        }
    };
    assert!(!p.is_null(), "allocation of {size} B at {align} failed");
    assert_eq!(
        p as usize % align,
        0,
        "{size} B at {align}: {p:?} misaligned"
    );
    // SAFETY: `p` is live.
    let usable = unsafe { slubmalloc::usable_size(p) };
    assert!(
        usable >= size,
        "usable size {usable} of {p:?} below {size} B"
    );
    // SAFETY: `p` is live.
    sh.model.added(unsafe { kind_of(p, size, align) });
    sh.live_bytes.fetch_add(size, Ordering::Relaxed);
    let b = Block {
        addr: p as usize,
        size,
        align,
        key,
    };
    if zeroed {
        b.check_zero("alloc_zeroed");
    }
    b.fill(0);
    b
}

fn free_block(sh: &Shared, b: Block) {
    b.check_all("before free");
    // SAFETY: `b` is live.
    sh.model
        .removed(unsafe { kind_of(b.ptr(), b.size, b.align) });
    sh.live_bytes.fetch_sub(b.size, Ordering::Relaxed);
    // SAFETY: `b` is live with this layout.
    unsafe { SlubMalloc.dealloc(b.ptr(), b.layout()) };
}

fn realloc_block(sh: &Shared, b: Block, size: usize) -> Block {
    b.check_all("before realloc");
    // SAFETY: `b` is live.
    let old = unsafe { kind_of(b.ptr(), b.size, b.align) };
    // SAFETY: `b` is live with this layout; `size` is not zero.
    let q = unsafe { SlubMalloc.realloc(b.ptr(), b.layout(), size) };
    assert!(!q.is_null(), "realloc of {b:x?} to {size} B failed");
    assert_eq!(
        q as usize % b.align,
        0,
        "realloc to {size} B lost the alignment of {b:x?}"
    );
    // SAFETY: `q` is live.
    let usable = unsafe { slubmalloc::usable_size(q) };
    assert!(
        usable >= size,
        "usable size {usable} after realloc to {size} B"
    );
    // SAFETY: `q` is live.
    sh.model
        .resized(old, unsafe { kind_of(q, size, b.align) }, q != b.ptr());
    sh.live_bytes.fetch_add(size, Ordering::Relaxed);
    sh.live_bytes.fetch_sub(b.size, Ordering::Relaxed);
    let nb = Block {
        addr: q as usize,
        size,
        ..b
    };
    let kept = b.size.min(size);
    nb.check(kept, b.size, "after realloc");
    nb.fill(kept);
    nb
}

impl Actor<'_> {
    fn key(&mut self) -> u64 {
        self.next_key += 1;
        mix(self.next_key)
    }

    /// A size within the live-bytes budget: past it, a few KiB at most.
    fn budget(&self, sh: &Shared, size: usize) -> usize {
        if sh.live_bytes.load(Ordering::Relaxed) + size > MAX_LIVE_BYTES {
            1 + size % 4096
        } else {
            size
        }
    }

    /// Adopts the blocks other threads sent.
    fn receive(&mut self, sh: &Shared) {
        for from in 0..sh.threads {
            while let Some(b) = sh.rings[from][self.me].pop() {
                b.check_all("on receipt from another thread");
                match (0..SLOTS)
                    .map(|k| (self.cursor + k) % SLOTS)
                    .find(|&k| self.table[k].is_none())
                {
                    Some(k) => {
                        self.table[k] = Some(b);
                        self.cursor = k + 1;
                    }
                    None => free_block(sh, b),
                }
            }
        }
    }

    fn exec(&mut self, sh: &Shared, op: Op) {
        match op {
            Op::Alloc {
                slot,
                size,
                align,
                zeroed,
            } => {
                if let Some(old) = self.table[slot].take() {
                    free_block(sh, old);
                }
                let size = self.budget(sh, size);
                let key = self.key();
                self.table[slot] = Some(alloc_block(sh, size, align, zeroed, key));
            }
            Op::Realloc { slot, size } => {
                if let Some(b) = self.table[slot].take() {
                    let size = self.budget(sh, size);
                    self.table[slot] = Some(realloc_block(sh, b, size));
                }
            }
            Op::Free { slot } => {
                if let Some(b) = self.table[slot].take() {
                    free_block(sh, b);
                }
            }
            Op::Usable { slot } => {
                if let Some(b) = self.table[slot] {
                    // SAFETY: `b` is live.
                    let n = unsafe { slubmalloc::usable_size(b.ptr()) };
                    assert!(n >= b.size, "usable size {n} below {b:x?}");
                    b.check_all("at usable_size");
                }
            }
            Op::Send { slot, to } => {
                if let Some(b) = self.table[slot].take() {
                    let others = sh.threads - 1;
                    let sent = others > 0 && {
                        let to = (self.me + 1 + to as usize % others) % sh.threads;
                        sh.rings[self.me][to].push(b)
                    };
                    if !sent {
                        free_block(sh, b);
                    }
                }
            }
            Op::AllocMany {
                slot,
                count,
                size,
                align,
            } => {
                for k in 0..count {
                    let s = (slot + k) % SLOTS;
                    if let Some(old) = self.table[s].take() {
                        free_block(sh, old);
                    }
                    // Many blocks are for filling slabs: at most a little
                    // past the largest class.
                    let size = self.budget(sh, size.min(2 * MAX_SMALL_BYTES));
                    let key = self.key();
                    self.table[s] = Some(alloc_block(sh, size, align, false, key));
                }
            }
            Op::FreeMany {
                slot,
                count,
                stride,
            } => {
                for k in 0..count {
                    if let Some(b) = self.table[(slot + k * stride) % SLOTS].take() {
                        free_block(sh, b);
                    }
                }
            }
            Op::Trim => slubmalloc::trim(),
            Op::Yield => thread::yield_now(),
            Op::Fork { seed } => {
                if sh.forks.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_forks {
                    self.fork_child(sh, seed);
                }
            }
            Op::Misuse { kind, size } => {
                if sh.misuses.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_misuses {
                    misuse(kind, size);
                }
            }
            Op::Oom { size } => {
                if sh.ooms.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_ooms {
                    oom_child(sh, size);
                }
            }
            Op::Exit | Op::Check => unreachable!("handled by the worker loop"),
        }
    }

    /// A forked child checks this thread's blocks, frees half of them
    /// (into slabs that may belong to threads that do not exist in the
    /// child), allocates and frees more, and in lockstep (no other thread
    /// was inside the allocator at the fork) checks the walk.
    fn fork_child(&self, sh: &Shared, seed: u8) {
        let lockstep = sh.cfg.lockstep;
        let table = &self.table;
        in_child("a fork child", || {
            for (i, b) in table
                .iter()
                .enumerate()
                .filter_map(|(i, b)| Some((i, (*b)?)))
            {
                b.check_all("in a fork child");
                if (i + seed as usize) & 1 == 0 {
                    // SAFETY: `b` is live with this layout (in the child too).
                    unsafe { SlubMalloc.dealloc(b.ptr(), b.layout()) };
                }
            }
            let mut held = [None; 256];
            let mut bytes = Bytes(&[]);
            let noise: Vec<u8> = (0..4096u64).map(|i| mix(i ^ seed as u64) as u8).collect();
            for (k, h) in held.iter_mut().enumerate() {
                bytes = if bytes.0.len() < 8 {
                    Bytes(&noise)
                } else {
                    bytes
                };
                let size = bytes.size().unwrap().min(1 << 20);
                let align = bytes.align().unwrap().min(1 << 16);
                *h = Some(alloc_block(sh, size, align, k % 3 == 0, mix(k as u64)));
            }
            for b in held.iter().flatten() {
                b.check_all("in a fork child, allocated there");
                // SAFETY: `b` is live with this layout.
                unsafe { SlubMalloc.dealloc(b.ptr(), b.layout()) };
            }
            slubmalloc::trim();
            if lockstep {
                assert_walk_agrees("in a fork child");
            }
        });
    }
}

/// Forks; the child runs `f` and exits 0, or 1 if it panics (it dies by
/// SIGABRT where panics abort); the parent panics unless the child exited 0.
fn in_child(what: &str, f: impl FnOnce()) {
    let status = fork_and_wait(|| {
        let ok = panic::catch_unwind(AssertUnwindSafe(f)).is_ok();
        // SAFETY: `_exit` ends the child without running the parent's
        // exit handlers or flushing its buffers twice.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) }
    });
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what} failed: wait status {status:#x}"
    );
}

/// Forks, runs `child` in the child (it must not return), waits for it.
fn fork_and_wait(child: impl FnOnce()) -> i32 {
    // SAFETY: the child only runs `child`, which ends it with `_exit` or a
    // signal; it uses no lock another thread may have held at the fork except
    // the allocator's, whose repair in the child is what is being tested.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Default dispositions, so that a crash or abort in the child is
        // what the parent sees (a fuzzer's handlers would turn it into a
        // report and an exit code).
        for sig in [
            libc::SIGABRT,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
        ] {
            // SAFETY: resetting a disposition has no preconditions.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        child();
        // SAFETY: as in `in_child`.
        unsafe { libc::_exit(0) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is writable.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR),
            "waitpid failed"
        );
    }
    status
}

// ---------------------------------------------------------------------------
// Misuse: the process must stop with the project's message.

#[derive(Clone, Copy, Debug)]
enum Misuse {
    DoubleFreeSmall,
    DoubleFreeLarge,
    InteriorPointer,
    MadeUpPointer,
    StackPointer,
    CorruptedLink,
    /// Debug mode only.
    Overflow,
    /// Debug mode only.
    WriteAfterFree,
}

impl Misuse {
    fn names(self) -> &'static [&'static str] {
        match self {
            Misuse::DoubleFreeSmall | Misuse::DoubleFreeLarge => &["double free"],
            Misuse::InteriorPointer | Misuse::MadeUpPointer | Misuse::StackPointer => {
                &["invalid pointer"]
            }
            Misuse::CorruptedLink | Misuse::WriteAfterFree => &["corrupted", "write after free"],
            Misuse::Overflow => &["overflow", "red zone"],
        }
    }
}

/// Writes `expect LO HI\n` (the range the message's address must fall in)
/// to fd 2 of the child, which the parent reads from a pipe.
fn announce(lo: usize, hi: usize) {
    let mut buf = [0u8; 64];
    let mut w = std::io::Cursor::new(&mut buf[..]);
    use std::io::Write;
    let _ = writeln!(w, "expect {lo:x} {hi:x}");
    let n = w.position() as usize;
    // SAFETY: `buf[..n]` is initialised.
    unsafe { libc::write(2, buf.as_ptr().cast(), n) };
}

fn raw_alloc(size: usize, align: usize) -> *mut u8 {
    let layout = Layout::from_size_align(size, align).unwrap();
    // SAFETY: `size` is not zero.
    let p = unsafe { SlubMalloc.alloc(layout) };
    assert!(!p.is_null());
    p
}

/// # Safety
/// As for `GlobalAlloc::dealloc`, except where a misuse is the point.
unsafe fn raw_free(p: *mut u8, size: usize, align: usize) {
    // SAFETY: per the contract.
    unsafe { SlubMalloc.dealloc(p, Layout::from_size_align(size, align).unwrap()) }
}

/// Commits misuse `kind` (modulo the kinds this mode stops) in a child and
/// checks that the child died by SIGABRT after exactly one "slubmalloc: "
/// line that names the misuse and carries its address.
fn misuse(kind: u8, size: usize) {
    let kinds = misuses();
    let m = kinds[kind as usize % kinds.len()];
    misuse_of(m, size);
}

/// Commits every misuse this mode stops, each in a child; returns how many.
pub fn check_every_misuse(size: usize) -> usize {
    for &m in misuses() {
        misuse_of(m, size);
    }
    misuses().len()
}

/// The misuses this mode stops: the debug mode's two come last.
fn misuses() -> &'static [Misuse] {
    const ALL: [Misuse; 8] = [
        Misuse::DoubleFreeSmall,
        Misuse::DoubleFreeLarge,
        Misuse::InteriorPointer,
        Misuse::MadeUpPointer,
        Misuse::StackPointer,
        Misuse::CorruptedLink,
        Misuse::Overflow,
        Misuse::WriteAfterFree,
    ];
    &ALL[..if mode().debug { 8 } else { 6 }]
}

fn misuse_of(m: Misuse, size: usize) {
    let small = 16 + size % 1000;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe failed");
    let status = fork_and_wait(|| {
        // SAFETY: plain descriptor calls on descriptors we own.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        commit(m, small, size);
    });
    // SAFETY: the write end is ours, the child has its copy.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: ours.
    unsafe { libc::close(fds[0]) };
    let text = String::from_utf8_lossy(&out);
    let what =
        format!("misuse {m:?} ({small} B / {size} B): wait status {status:#x}, stderr:\n{text}");
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT,
        "{what}\nexpected death by SIGABRT"
    );
    let range = text
        .lines()
        .find_map(|l| l.strip_prefix("expect "))
        .and_then(|r| {
            let (lo, hi) = r.split_once(' ')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("{what}\nthe child announced no address"));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slubmalloc: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}\nexpected exactly one \"slubmalloc: \" line"
    );
    let line = lines[0].to_lowercase();
    assert!(
        m.names().iter().any(|n| line.contains(n)),
        "{what}\nthe message does not name the misuse (one of {:?})",
        m.names()
    );
    let addr = line
        .split("0x")
        .skip(1)
        .filter_map(|h| {
            let digits: String = h.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            usize::from_str_radix(&digits, 16).ok()
        })
        .find(|a| (range.0..=range.1).contains(a));
    assert!(
        addr.is_some(),
        "{what}\nthe message carries no address in {:x?}",
        range
    );
}

/// In the child: commits the misuse; returns only if it was not stopped.
fn commit(m: Misuse, small: usize, size: usize) {
    match m {
        Misuse::DoubleFreeSmall => {
            let a = raw_alloc(small, 8);
            let b = raw_alloc(small, 8);
            announce(a as usize, a as usize);
            // SAFETY: the second free of `a` is the misuse.
            unsafe {
                raw_free(a, small, 8);
                raw_free(b, small, 8);
                raw_free(a, small, 8);
            }
        }
        Misuse::DoubleFreeLarge => {
            let n = MAX_SMALL_BYTES + 1 + size % (1 << 20);
            let a = raw_alloc(n, 8);
            announce(a as usize, a as usize);
            // SAFETY: the second free is the misuse.
            unsafe {
                raw_free(a, n, 8);
                raw_free(a, n, 8);
            }
        }
        Misuse::InteriorPointer => {
            let a = raw_alloc(small.max(32), 16);
            let inner = a.wrapping_add(8);
            announce(inner as usize, inner as usize);
            // SAFETY: none: an interior pointer is the misuse.
            unsafe { raw_free(inner, small.max(32), 16) };
        }
        Misuse::MadeUpPointer => {
            let p = (0x5e5e_0000_0000usize + (size << 4)) as *mut u8;
            announce(p as usize, p as usize);
            // A large layout: Rust's dealloc trusts a small one to be a slab
            // block (the C free path checks every pointer).
            // SAFETY: none: the made-up pointer is the misuse.
            unsafe { raw_free(p, 1 << 20, 8) };
        }
        Misuse::StackPointer => {
            let mut local = [0u8; 64];
            let p = std::hint::black_box(local.as_mut_ptr());
            announce(p as usize, p as usize);
            // SAFETY: none: a stack address is the misuse.
            unsafe { raw_free(p, 1 << 20, 8) };
        }
        Misuse::CorruptedLink => {
            let a = raw_alloc(small, 8);
            let b = raw_alloc(small, 8);
            // SAFETY: `a` and `b` are live; after their frees, `b`'s first
            // word is its free-list link, which the overwrite corrupts.
            unsafe {
                raw_free(a, small, 8);
                raw_free(b, small, 8);
                (b as *mut u64).write_unaligned(0x4141_4141_4141_4141 ^ size as u64);
            }
            let slab = 64 << 10;
            announce((b as usize).saturating_sub(slab), b as usize + slab);
            for _ in 0..100_000 {
                raw_alloc(small, 8);
            }
        }
        Misuse::Overflow => {
            let a = raw_alloc(small, 8);
            // SAFETY: `a` is live; the byte after it is the misuse (in
            // debug mode it is the red zone, inside the slot).
            unsafe { *a.add(small) ^= 0x5a };
            announce(a as usize, a as usize + 2 * small + 64);
            // SAFETY: `a` is live with this layout.
            unsafe { raw_free(a, small, 8) };
        }
        Misuse::WriteAfterFree => {
            let a = raw_alloc(small, 8);
            // SAFETY: `a` is live, then the write after its free is the misuse.
            unsafe {
                raw_free(a, small, 8);
                *a.add(8 + size % (small - 8)) ^= 0x5a;
            }
            announce(a as usize, a as usize + 2 * small + 64);
            for _ in 0..100_000 {
                raw_alloc(small, 8);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Out of memory

/// Virtual memory of this process, from /proc/self/statm.
fn vm_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

/// A child under an address-space limit: allocations return null (never
/// crash) until some are freed, then succeed again.
fn oom_child(sh: &Shared, size: usize) {
    let lockstep = sh.cfg.lockstep;
    let small = 1 + size % 4096;
    in_child("an out-of-memory child", || {
        let mut big: Vec<*mut u8> = Vec::with_capacity(4096);
        let mut many: Vec<*mut u8> = Vec::with_capacity(1 << 18);
        let limit = vm_bytes() + (128 << 20);
        let rl = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        // SAFETY: `rl` is a valid rlimit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let layout = |n| Layout::from_size_align(n, 16).unwrap();
        let mut failed = false;
        while big.len() < big.capacity() {
            // SAFETY: non-zero size.
            let p = unsafe { SlubMalloc.alloc(layout(1 << 20)) };
            if p.is_null() {
                failed = true;
                break;
            }
            // SAFETY: `p` is live: touch it.
            unsafe { *p = 1 };
            big.push(p);
        }
        assert!(
            failed,
            "no 1 MiB allocation failed under a limit of {limit} B"
        );
        while many.len() < many.capacity() {
            // SAFETY: non-zero size.
            let p = unsafe { SlubMalloc.alloc(layout(small)) };
            if p.is_null() {
                break;
            }
            many.push(p);
        }
        if let Some(&p) = many.first() {
            // SAFETY: `p` is live; a realloc past the limit fails and keeps it.
            let q = unsafe { SlubMalloc.realloc(p, layout(small), 256 << 20) };
            assert!(q.is_null(), "a 256 MiB realloc succeeded under the limit");
        }
        for p in big.drain(..) {
            // SAFETY: live with this layout.
            unsafe { SlubMalloc.dealloc(p, layout(1 << 20)) };
        }
        // SAFETY: non-zero size.
        let again = unsafe { SlubMalloc.alloc(layout(1 << 20)) };
        assert!(
            !again.is_null(),
            "no 1 MiB allocation after freeing 1 MiB blocks"
        );
        // SAFETY: live with this layout.
        unsafe { SlubMalloc.dealloc(again, layout(1 << 20)) };
        for p in many.drain(..) {
            // SAFETY: live with this layout.
            unsafe { SlubMalloc.dealloc(p, layout(small)) };
        }
        if lockstep {
            assert_walk_agrees("in an out-of-memory child");
        }
    });
}

// ---------------------------------------------------------------------------
// Quiescent checks

/// The walk agrees with the statistics class by class. Only when no other
/// thread allocates.
pub fn assert_walk_agrees(when: &str) {
    let s = slubmalloc::stats();
    let w = slubmalloc::walk();
    compare_walk(&s, &w, when);
}

fn compare_walk(s: &Stats, w: &slubmalloc::Walk, when: &str) {
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
}

/// At a quiescent point: the walk agrees with the statistics, and the
/// statistics moved since the baseline by what the model and the harness
/// did. Retried while the harness allocates meanwhile (a test framework's
/// thread may), up to a limit.
fn verify(sh: &Shared, when: &str) {
    sh.checks.fetch_add(1, Ordering::Relaxed);
    let base = sh.base.lock().unwrap();
    let base = base.as_ref().expect("a baseline before any check");
    for attempt in 0.. {
        let v = HARNESS.version.load(Ordering::Relaxed);
        let s = slubmalloc::stats();
        let w = slubmalloc::walk();
        if HARNESS.version.load(Ordering::Relaxed) != v && attempt < 100 {
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
        let v = HARNESS.version.load(Ordering::Relaxed);
        let s = slubmalloc::stats();
        let w = slubmalloc::walk();
        if HARNESS.version.load(Ordering::Relaxed) != v && attempt < 100 {
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

fn compare_counts(
    base: &Stats,
    now: &Stats,
    model: &Tally,
    harness: &Tally,
    events: bool,
    when: &str,
) {
    let get = Tally::get;
    let delta = |a: u64, b: u64| a.wrapping_sub(b) as i64;
    let blocks =
        |s: &Stats| s.caches().map(|c| c.objects_in_use).sum::<u64>() + s.totals.large_blocks;
    assert_eq!(
        delta(blocks(now), blocks(base)),
        get(&model.blocks) + get(&harness.blocks),
        "{when}: blocks in use, all classes and large together (model {}, harness {})",
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
        let allocs: Count = |c| c.alloc_fast + c.alloc_slow;
        let frees: Count = |c| c.free_fast + c.free_slow + c.free_remote;
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
        delta(now.totals.large_blocks, base.totals.large_blocks),
        get(&model.large) + get(&harness.large),
        "{when}: large blocks (model {}, harness {})",
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
    // Segments hold every slab; large mappings hold every large block and
    // the cached ones.
    let segment_bytes = now.totals.segments * (4 << 20);
    let slab_bytes: u64 = now.caches().map(|c| c.objects_total * c.object_size).sum();
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
