//! The random-operations model shared by `tests/global_allocator/random_ops.rs`
//! and the fuzz targets (both include this file by path; the fuzz crate is
//! a workspace of its own, and `tests/model` is the loom model): one decoder
//! turns bytes into allocator operations, one executor runs them with
//! content checks, and one runner drives one to four threads, either in
//! lockstep (one thread at a time, a turn lasting until its next `Yield`
//! operation, in an order fixed by the input, so a fuzz input replays
//! exactly) or all at once (real races: remote frees against refills and
//! exits, contended node locks). The test feeds it bytes
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
//! Files: this one decodes and runs operations; `blocks.rs` holds blocks,
//! their contents and the hand-off rings; `counts.rs` what the statistics
//! should count and the quiescent checks; `children.rs` the fork, misuse and
//! out-of-memory children.
//!
//! Why files included by path rather than a module of the crate behind a
//! feature: the model needs `libc` for fork and rlimits and panics on
//! failure; none of that belongs in an allocator crate that must never
//! allocate or unwind on its paths, and a feature would be one more
//! user-visible switch. Plain files cost the allocator crate nothing.

#![allow(dead_code)] // each includer uses part of the model

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, Scope, ScopedJoinHandle};

use slubmalloc::{SlubMalloc, Stats, MAX_SMALL_BYTES, NUM_CLASSES};

mod blocks;
mod children;
mod counts;

pub use blocks::*;
pub use children::*;
pub use counts::*;

/// The most threads a run drives.
pub const MAX_THREADS: usize = 4;
/// Slots in each thread's table of live blocks.
pub const SLOTS: usize = 4096;
/// `Config::max_live_bytes` of a long seeded run (`random_ops`), and of
/// the fuzz targets, whose inputs are short and many: the pages an input
/// faults in and the bytes it fills and checks are most of its time.
pub const MAX_LIVE_BYTES: usize = 384 << 20;
pub const FUZZ_LIVE_BYTES: usize = 64 << 20;
/// `Config::max_many_bytes` of the fuzz targets: two blocks of 64 KiB, or
/// all 1021 of up to 128 B (in debug mode every slot is poisoned and
/// checked byte by byte, at its allocation and at its free).
pub const FUZZ_MANY_BYTES: usize = 128 << 10;
/// `Config::forks_one_in` and `children_one_in` of the fuzz targets: a
/// child costs more than the rest of an input, the out-of-memory one most.
/// A child's coverage never reaches the fuzzer, so corpora keep inputs with
/// children only by chance: forks, whose repairs in the child run only when
/// another thread held a lock, come more often.
pub const FUZZ_FORKS_ONE_IN: usize = 4;
pub const FUZZ_CHILDREN_ONE_IN: usize = 16;
/// Blocks up to this size are filled and checked whole; above it, this many
/// leading bytes, one word per `SAMPLE_BYTES` and the last `TAIL_BYTES`.
const FULL_BYTES: usize = 32 << 10;
const SAMPLE_BYTES: usize = 64 << 10;
const TAIL_BYTES: usize = 64;
/// Blocks in flight from one thread to another.
const RING: usize = 64;

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
    /// Lockstep: the turn passes to the next thread; else the thread yields.
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
    /// One thread at a time, each turn lasting until the thread's next
    /// `Yield` (replayable), or all at once.
    pub lockstep: bool,
    /// At most this many fork, misuse and out-of-memory children per run.
    pub max_forks: usize,
    pub max_misuses: usize,
    pub max_ooms: usize,
    /// Where the input picks the threads: fork children run in one input
    /// of `forks_one_in`, misuse and out-of-memory children in one of
    /// `children_one_in` (a multiple of it), as the first byte's upper bits
    /// pick (a replay runs the same); 1: in every input.
    pub forks_one_in: usize,
    pub children_one_in: usize,
    /// Requested bytes all threads together keep live; past it an
    /// allocation asks for a few KiB instead.
    pub max_live_bytes: usize,
    /// Bytes one `AllocMany` asks for at most: fewer blocks of a big size.
    pub max_many_bytes: usize,
}

impl Config {
    /// The fuzz targets': the input picks the threads; one child of each
    /// kind per input at most, in one input of `FUZZ_FORKS_ONE_IN` and
    /// `FUZZ_CHILDREN_ONE_IN`.
    pub const fn fuzz(lockstep: bool) -> Config {
        Config {
            threads: 0,
            lockstep,
            max_forks: 1,
            max_misuses: 1,
            max_ooms: 1,
            forks_one_in: FUZZ_FORKS_ONE_IN,
            children_one_in: FUZZ_CHILDREN_ONE_IN,
            max_live_bytes: FUZZ_LIVE_BYTES,
            max_many_bytes: FUZZ_MANY_BYTES,
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
    /// This input runs fork children; misuse and out-of-memory children.
    forks_on: bool,
    children: bool,
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
    let (threads, forks_on, children, rest) = if cfg.threads == 0 {
        match input.split_first() {
            Some((&b, rest)) => (
                1 + b as usize % MAX_THREADS,
                (b as usize / MAX_THREADS).is_multiple_of(cfg.forks_one_in),
                (b as usize / MAX_THREADS).is_multiple_of(cfg.children_one_in),
                rest,
            ),
            None => return Summary::default(),
        }
    } else {
        (cfg.threads.min(MAX_THREADS), true, true, input)
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
        forks_on,
        children,
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
        // A turn lasts until the thread yields, many operations: each pass
        // wakes another thread and puts this one to sleep.
        if sh.cfg.lockstep && matches!(op, Op::Yield) {
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
        if sh.live_bytes.load(Ordering::Relaxed) + size > sh.cfg.max_live_bytes {
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
                // Many blocks are for filling slabs: at most a little past
                // the largest class, and at most `max_many_bytes` of slots
                // in all (a block aligned past its size takes a slot of its
                // alignment).
                let size = size.min(2 * MAX_SMALL_BYTES);
                let slot_bytes = size.max(align);
                let count = count.min((sh.cfg.max_many_bytes / slot_bytes).max(1));
                for k in 0..count {
                    let s = (slot + k) % SLOTS;
                    if let Some(old) = self.table[s].take() {
                        free_block(sh, old);
                    }
                    let size = self.budget(sh, size);
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
                if sh.forks_on && sh.forks.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_forks {
                    self.fork_child(sh, seed);
                }
            }
            Op::Misuse { kind, size } => {
                if sh.children && sh.misuses.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_misuses {
                    misuse(kind, size);
                }
            }
            Op::Oom { size } => {
                if sh.children && sh.ooms.fetch_add(1, Ordering::Relaxed) < sh.cfg.max_ooms {
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
