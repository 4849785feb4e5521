//! The state a thread heap keeps for its sheaves: per class a `Sheaf` (the
//! blocks, the length, the capacity the fast paths compare with, the gate,
//! the budget's clock of the class), per heap a `SheafBudget` (the bytes of
//! capacity its classes hold, and the budget it took from the process's
//! pool for them). The fields are private: these types are the only way to
//! them. What moves blocks in and out of a sheaf is `sheaf`'s; how big a
//! sheaf grows is `sheaf_budget`'s. `heap::ClassHeap` and `heap::Heap`
//! embed these types, so this module sits below `heap` (and `sheaf` and
//! `sheaf_budget`, which use `heap`, cannot hold them).

use core::cell::Cell;
use core::ptr;

use crate::counters::{global, Counters, Ev};
use crate::freelist::{take_sheaf_block, SheafBlock, HARDENING};
use crate::os;
use crate::rseq;
use crate::size_class::{CLASS_BYTES, SHEAF_CAP, SHEAF_MAX, SHEAF_START, SHEAF_THREAD_START_BYTES};
use crate::sync::{invariant, Ordering};

/// A class heap's sheaf: a bounded stack of blocks of the class that the
/// thread freed, handed out again last in, first out. Its storage is in
/// two parts of the class heap: `SheafHead`, the words the fast paths
/// read, on the class heap's first line beside its active slab, detached
/// list and fast-path counters; `SheafBody`, the slots and the slow paths'
/// words, after the counters. A `Sheaf` is the two together, made by
/// `ClassHeap::sheaf` (both at fixed offsets of the class heap, so the
/// fast paths address them from the class heap's register, as one struct).
///
/// Invariants:
/// - The gate (`SheafBody::open`) says whether the class heap takes a
///   sheaf at all. It is closed for a class cold in the thread (its blocks
///   come from shared slabs), in a static heap (before the thread's heap
///   exists, after its exit, the orphan heap's classes warm or not), in the
///   class heap of the slabs of the heap profile, of medium blocks and of
///   debug mode (`heap::Heap::no_sheaf`); in debug mode no class of a
///   thread's heap is warm. It opens when a class warms up in a thread's
///   heap (`heap::Heap::warm_up`), and closes at the thread's exit or when
///   a pooled heap is reset.
/// - The capacity published to the fast paths (`SheafHead::cap`) is the
///   gate's decision: 0 while it is closed, so that every free of the
///   class finds the sheaf full and takes the slow path, and the sized
///   capacity (from `SHEAF_START` up to `SHEAF_CAP` of the class,
///   `sheaf_budget`) while it is open. The fast paths compare the length
///   with it alone and never read the gate: a separate test of the gate
///   would be an instruction more on every free.
/// - `len <= cap`: the blocks are `slots[1..=len]`, the top last;
///   `slots[0]` stays null, so that the free fast path compares a block
///   with the top (`slots[len]`) without testing for an empty sheaf.
/// - The gate closes and the capacity drops to 0 only while the sheaf is
///   empty, so that a length of 0 and a full sheaf tell "no sheaf" and
///   "no room" apart (`fastpath::free_to_class`).
/// - Each block it holds carries its tag in its second word
///   (`freelist::sheaf_tag`): `pop` checks it.
#[derive(Clone, Copy)]
pub struct Sheaf<'a> {
    head: &'a SheafHead,
    body: &'a SheafBody,
}

/// The words of a `Sheaf` that the fast paths read.
#[repr(C)]
pub struct SheafHead {
    /// Blocks in the sheaf.
    len: Cell<u32>,
    /// The capacity published to the fast paths: 0 while the gate is
    /// closed, else the sized capacity.
    cap: Cell<u32>,
}

/// The rest of a `Sheaf`.
#[repr(C)]
pub struct SheafBody {
    slots: [Cell<*mut u8>; SHEAF_MAX + 1],
    /// The class's `ClassHeap::misses` at its sheaf's last overflow (or
    /// when the gate opened): an overflow that finds them changed follows
    /// a miss (`sheaf_budget`).
    demand: Cell<u64>,
    /// The heap's overflow count (`SheafBudget`) at the class's last
    /// overflow.
    used: Cell<u32>,
    /// The gate: whether the class heap takes a sheaf.
    open: Cell<bool>,
}

impl SheafHead {
    pub const fn new() -> Self {
        SheafHead {
            len: Cell::new(0),
            cap: Cell::new(0),
        }
    }
}

impl SheafBody {
    pub const fn new() -> Self {
        SheafBody {
            slots: [const { Cell::new(ptr::null_mut()) }; SHEAF_MAX + 1],
            demand: Cell::new(0),
            used: Cell::new(0),
            open: Cell::new(false),
        }
    }
}

impl<'a> Sheaf<'a> {
    /// The sheaf whose parts are `head` and `body`, those of one class heap.
    #[inline(always)]
    pub fn of(head: &'a SheafHead, body: &'a SheafBody) -> Self {
        Sheaf { head, body }
    }

    /// The blocks it holds.
    #[inline(always)]
    pub fn len(self) -> u32 {
        self.head.len.get()
    }

    /// The capacity the fast paths compare the length with (0 while the
    /// gate is closed).
    #[inline(always)]
    pub fn cap(self) -> u32 {
        self.head.cap.get()
    }

    /// Whether the gate is open: the class heap takes a sheaf.
    #[inline]
    pub fn is_open(self) -> bool {
        self.body.open.get()
    }

    /// The block on top, `len` blocks long (its length), or null if it is
    /// empty (`slots[0]` stays null).
    #[inline(always)]
    pub fn top(self, len: u32) -> *mut u8 {
        invariant!(len as usize <= SHEAF_MAX);
        // SAFETY: `len` is at most `SHEAF_MAX`.
        unsafe { self.body.slots.get_unchecked(len as usize) }.get()
    }

    /// Puts `p` above its `len` blocks (its length, below its capacity).
    #[inline(always)]
    pub fn push(self, len: u32, p: *mut u8) {
        invariant!(len == self.len() && len < self.cap());
        // SAFETY: `len` is below the capacity, at most `SHEAF_MAX`.
        unsafe { self.body.slots.get_unchecked(len as usize + 1) }.set(p);
        self.head.len.set(len + 1);
    }

    /// Pops the top, `len` blocks long (its length, not 0), checked
    /// (`freelist::take_sheaf_block`: its tag, cleared; no free-list link):
    /// the allocation fast path's pop, and that of a sheaf just filled from
    /// a barn. `secret` is the heap's; counted in `ev`, the class heap's.
    #[inline(always)]
    pub fn pop(self, len: u32, secret: usize, ev: &Counters) -> *mut u8 {
        invariant!(len == self.len() && len != 0);
        let obj = self.top(len);
        if HARDENING {
            // SAFETY: `obj` is a block the sheaf held.
            let found = unsafe { take_sheaf_block(secret, obj) };
            if found != SheafBlock::Tagged {
                return stop(found, obj);
            }
        }
        self.head.len.set(len - 1);
        ev.inc(Ev::AllocSheaf);
        obj
    }

    /// The blocks it holds, oldest first.
    pub fn blocks(self) -> &'a [Cell<*mut u8>] {
        &self.body.slots[1..=self.len() as usize]
    }

    /// Its `n` oldest blocks (the bottom ones; `n` at most its length).
    pub fn oldest(self, n: u32) -> &'a [Cell<*mut u8>] {
        invariant!(n <= self.len());
        &self.body.slots[1..=n as usize]
    }

    /// Its slots up to its capacity, for an empty sheaf to be filled
    /// (`filled`).
    pub fn room(self) -> &'a [Cell<*mut u8>] {
        invariant!(self.len() == 0);
        &self.body.slots[1..=self.cap() as usize]
    }

    /// `n` blocks were written into `room` (at most its capacity).
    pub fn filled(self, n: u32) {
        invariant!(self.len() == 0 && n <= self.cap());
        self.head.len.set(n);
    }

    /// Forgets its `n` oldest blocks (the bottom ones), which left it (to
    /// their slabs, or all of them to a barn), and moves the rest down.
    pub fn drop_oldest(self, n: u32) {
        let len = self.len();
        invariant!(n <= len);
        let base = self.body.slots.as_ptr() as *mut *mut u8;
        // SAFETY: `slots[1 + n..=len]` moves to `slots[1..=len - n]`, inside
        // the array (`len` is at most `SHEAF_MAX`); a `Cell<T>` is laid out
        // as a `T`, and the heap is this thread's, so nothing else reads it
        // now.
        unsafe { ptr::copy(base.add(1 + n as usize), base.add(1), (len - n) as usize) };
        self.head.len.set(len - n);
    }

    /// Opens the gate with a capacity of `cap` blocks; `misses` are the
    /// class's misses now (the budget's demand from here on).
    pub fn open(self, cap: u32, misses: u64) {
        invariant!(!self.is_open() && self.len() == 0 && self.cap() == 0);
        invariant!(cap != 0 && cap as usize <= SHEAF_MAX);
        self.body.open.set(true);
        self.body.demand.set(misses);
        self.head.cap.set(cap);
    }

    /// Sets the capacity of an open sheaf to `cap` (its blocks fit in it).
    pub fn resize(self, cap: u32) {
        invariant!(self.is_open() && cap != 0 && cap as usize <= SHEAF_MAX);
        invariant!(self.len() <= cap);
        self.head.cap.set(cap);
    }

    /// Closes the gate of an empty sheaf: its capacity drops to 0.
    pub fn close(self) {
        invariant!(self.len() == 0);
        self.body.open.set(false);
        self.head.cap.set(0);
    }

    /// The class overflowed its sheaf at `tick` (the heap's overflow count,
    /// `SheafBudget::overflow`), its misses at `misses`: true if it missed
    /// since its last overflow.
    pub fn overflowed(self, tick: u32, misses: u64) -> bool {
        self.body.used.set(tick);
        let missed = misses != self.body.demand.get();
        if missed {
            self.body.demand.set(misses);
        }
        missed
    }

    /// Whether the class neither overflowed nor missed since the heap's
    /// overflow count was `last`, now `tick` (its misses at `misses`).
    pub fn idle_since(self, last: u32, tick: u32, misses: u64) -> bool {
        tick.wrapping_sub(self.body.used.get()) >= tick.wrapping_sub(last)
            && misses == self.body.demand.get()
    }
}

/// The capacity a class's sheaf opens with: `SHEAF_START`, or in per-CPU
/// mode the class's most, `SHEAF_CAP` (32 blocks, 16 KiB at most), so that
/// its overflow moves batches to its CPU's sheaf, not single blocks; there
/// it never grows by demand, and follows the threads per CPU from its
/// first overflow (`sheaf_budget::per_cpu_capacity`).
pub fn start_capacity(class: usize) -> u32 {
    if rseq::on() {
        SHEAF_CAP[class]
    } else {
        SHEAF_START[class]
    }
}

/// Stops the process unless `found` is a block freed once.
#[inline(always)]
pub fn check(found: SheafBlock, p: *mut u8) {
    if found != SheafBlock::Tagged {
        stop(found, p);
    }
}

/// Stops the process: `p` left a sheaf as `found` says (not `Tagged`).
/// Returns (null) only for a null `p`, which no sheaf holds: so that the
/// compiler does not take it for a function that never returns, which the
/// allocation fast path would have to call with the stack aligned (a push
/// and a pop on the path) rather than jump to.
#[cold]
#[inline(never)]
pub fn stop(found: SheafBlock, p: *mut u8) -> *mut u8 {
    if p.is_null() {
        return p;
    }
    let what = match found {
        SheafBlock::Linked => "double free (a block on a free list was freed again)",
        _ => "double free or write after free: a freed block's sheaf tag (its second word) is gone",
    };
    os::fatal(what, p as usize)
}

/// The most budget one thread holds.
const THREAD_MAX_BYTES: usize = 1 << 20;
/// Budget is taken from the pool and returned in steps of this.
const BUDGET_STEP: usize = 64 << 10;
/// The budget the threads together may take beyond their starts
/// (`counters::Global::sheaf_budget_taken` counts what they took).
pub const POOL_BYTES: u64 = 32 << 20;

/// A heap's account of its sheaves' capacities: what its classes hold
/// beyond their starts, in bytes, and the budget it took from the process's
/// pool for them (it may hold `SHEAF_THREAD_START_BYTES` more than that);
/// and the clock of the capacities, the count of its sheaves' overflows,
/// with its value at the last scavenge (`sheaf_budget`).
pub struct SheafBudget {
    bytes: Cell<usize>,
    taken: Cell<usize>,
    overflows: Cell<u32>,
    scavenged_at: Cell<u32>,
}

impl SheafBudget {
    pub const fn new() -> Self {
        SheafBudget {
            bytes: Cell::new(0),
            taken: Cell::new(0),
            overflows: Cell::new(0),
            scavenged_at: Cell::new(0),
        }
    }

    /// All 0, for a pooled heap's new thread. Its thread's exit left the
    /// capacities and the budget taken at 0; a thread lost in a fork left
    /// them as they were (the pool's steps it held stay taken in the child).
    pub fn reset(&self) {
        self.bytes.set(0);
        self.taken.set(0);
        self.overflows.set(0);
        self.scavenged_at.set(0);
    }

    /// `class`'s capacity went from `old` to `new` blocks: charges what
    /// lies beyond the class's start, and counts it in the class's `ev`.
    pub fn charge(&self, class: usize, old: u32, new: u32, ev: &Counters) {
        invariant!(new <= SHEAF_CAP[class]);
        let bytes = |blocks: u32| {
            blocks.saturating_sub(SHEAF_START[class]) as usize * CLASS_BYTES[class] as usize
        };
        self.bytes.set(self.bytes.get() - bytes(old) + bytes(new));
        ev.add(Ev::SheafCapacity, (new as u64).wrapping_sub(old as u64));
    }

    /// Whether `need` bytes more of capacity fit in the budget, taking
    /// steps from the pool as needed: false if the thread holds its most
    /// or the pool is empty.
    pub fn fits(&self, need: usize) -> bool {
        while self.bytes.get() + need > self.budget() {
            if !self.take_step() {
                return false;
            }
        }
        true
    }

    /// What the capacities may hold beyond their starts.
    fn budget(&self) -> usize {
        SHEAF_THREAD_START_BYTES + self.taken.get()
    }

    /// Takes a step of budget from the pool; false if the thread holds its
    /// most or the pool is empty.
    fn take_step(&self) -> bool {
        if self.budget() + BUDGET_STEP > THREAD_MAX_BYTES {
            return false;
        }
        // Relaxed: a count; nothing is published through it.
        let step = BUDGET_STEP as u64;
        let taken = global().sheaf_budget_taken.fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |taken| (taken + step <= POOL_BYTES).then_some(taken + step),
        );
        if taken.is_err() {
            return false;
        }
        self.taken.set(self.taken.get() + BUDGET_STEP);
        true
    }

    /// Returns the steps of budget that the capacities do not use to the
    /// pool.
    pub fn return_unused(&self) {
        let mut taken = self.taken.get();
        while taken != 0 && SHEAF_THREAD_START_BYTES + taken - BUDGET_STEP >= self.bytes.get() {
            taken -= BUDGET_STEP;
            // Relaxed: as in `take_step`.
            global()
                .sheaf_budget_taken
                .fetch_sub(BUDGET_STEP as u64, Ordering::Relaxed);
        }
        self.taken.set(taken);
    }

    /// The budget taken from the pool, in bytes.
    pub fn taken(&self) -> usize {
        self.taken.get()
    }

    /// Counts an overflow of one of the sheaves: the new count.
    pub fn overflow(&self) -> u32 {
        let tick = self.overflows.get().wrapping_add(1);
        self.overflows.set(tick);
        tick
    }

    /// The overflow count now.
    pub fn overflows(&self) -> u32 {
        self.overflows.get()
    }

    /// The overflow count at the last scavenge.
    pub fn scavenged_at(&self) -> u32 {
        self.scavenged_at.get()
    }

    /// A scavenge ran at overflow count `tick`.
    pub fn scavenged(&self, tick: u32) {
        self.scavenged_at.set(tick);
    }
}
