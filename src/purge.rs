//! When free memory goes back to the kernel: the policy, stated here once,
//! and its state: the purge delay, the one deadline that free slabs
//! (`segment`) and cached large blocks (`large`) wait for, the clock it is
//! read against, the trim bound that gives them back at `free` time, and
//! the state of the background purger, the thread that keeps that deadline
//! while the program makes no call into the allocator (its body is
//! `background`'s). The work is in two files, each at the layer it needs:
//! `purge::pass` purges the large blocks' cache and the segments' free
//! slabs, and trims; `purge::give_back` hands back, before a purge, what
//! waits above the segments (`give_back_before_purge`: the barns' blocks
//! to their slabs, the node lists' empty slabs to their segments).
//!
//! Purging happens in nine places, and trimming in two. A purge is asked
//! for with `schedule` (a no-op while one is pending) and run once per
//! deadline by whoever claims it first (`take_due`, `pass::claim_due`):
//! - slabs back in their segment (`node::discard`, and
//!   `segment::span::free_span`, a medium block's slabs): they ask for one
//!   once 16 free slabs are dirty, and run it if it is due
//!   (`pass::slabs_freed`), maybe under a node lock (the node lists' empty
//!   slabs stay);
//! - `large::free`: a block put in the cache asks for one;
//! - `sheaf::make_room`: a sheaf put in a barn asks for one, whose
//!   give-back flushes the barns once the class goes quiet;
//! - `pass::purge_all`: asks again while what it left was freed less than
//!   a delay before;
//! - `segment::span::take_span` (a medium block's slabs taken): runs it if
//!   due, as a slab back in its segment does;
//! - a slab taken for a cold class's shared slabs (`shared`) or a side
//!   heap (`side_slabs`: debug mode's, the heap profile's): runs it if
//!   due (`pass::purge_if_due`), under a node lock or the side heap's;
//! - `refill::refill_and_pop` (the allocation slow path, no allocator lock
//!   held but maybe the orphan heap's): runs it if due, after
//!   `give_back::give_back_before_purge` (`give_back::purge_if_due`);
//! - `background`: the purger sleeps until the deadline and runs it as the
//!   slow path does (the barns' blocks counted in the orphan heap);
//! - `alloc::trim` (`trim()`, `malloc_trim`): everything at once
//!   (`pass::purge_now`).
//!
//! A purge gives back what was freed a delay before the deadline: cached
//! large blocks are unmapped, free slabs madvised, segments free whole
//! unmapped beyond the few kept. A free slab inside a segment still in use
//! waits longer: none goes back while the heap moves slabs (one was taken
//! or given back since the last purge pass: the heap in use is likely to
//! take it again); once its slabs stay put, one delay after its free when
//! the purger purges, ten when a slow path does (`pass::cutoffs`).
//!
//! A trim gives back what is free whole at once, with no deadline, when a
//! free leaves more of it resident than the trim bound (`claim_trim`, which
//! may raise the bound instead): the cached large blocks and the segments
//! whose slabs are all free, or every free slab if nine tenths of the
//! segments' slabs are free (`segment::trim_slabs`). Its two places are
//! the free slow paths that leave freed memory resident, slabs back in
//! their segment (`pass::slabs_freed`) and a large block into the cache
//! (`alloc::free_large`), through `pass::trim_if_over_bound`. `malloc_trim`
//! takes everything.
//!
//! The deadline is one word: 0 while nothing waits, else the monotonic time
//! at which everything freed before it, less the delay, goes back. Whoever
//! frees something schedules it (`schedule`, a no-op while one is pending);
//! whoever purges first claims it (`take_due`, one CAS), so a purge runs
//! once per deadline whether the purger or a slow path gets there first.
//!
//! The trim bound (glibc's dynamic `M_TRIM_THRESHOLD` is the model): a free
//! slow path that leaves more freed memory resident than the bound (free
//! slabs not purged yet, cached large blocks) gives it all back at once,
//! with no thread and no signal, so that a program that frees and goes idle
//! keeps at most the bound. The bound starts at `TRIM_START_BYTES` and
//! doubles, up to `TRIM_MAX_BYTES`, when the program took back memory worth
//! half of it within `TRIM_REUSE_NS` of the last trim or raise (or at all,
//! before the first): freed memory still resident (a free slab not purged,
//! a cached large block), or, once a trim has run, fresh pages. A program
//! that churns more than the bound stops paying trims and the faults after
//! them; one that frees and goes idle keeps the bound it had.
//!
//! The purger runs only while the program itself has other threads (two
//! thread heaps alive, `set_program_threads`), so that a single-threaded
//! program never gets a thread from the allocator: the kernel refuses
//! `unshare(CLONE_NEWUSER)` to a multi-threaded process, a fork from a
//! signal handler may deadlock in one, and glibc's `__libc_single_threaded`
//! never comes back. It is started by the first slow path that finds a
//! purge pending or the program's mappings past `PURGER_EARLY_BYTES`, and
//! stays while the program has other threads, asleep when nothing is
//! pending (a `schedule` wakes it). Its life, one word (`STATE`): NONE ->
//! STARTING (a slow path that holds no allocator lock won the CAS and calls
//! `pthread_create`; that call allocates, and any allocation it makes sees
//! STARTING and starts nothing) -> RUNNING -> NONE (the program is down to
//! one thread, so that it never keeps a process alive nor multi-threaded).
//! A forked child has no purger: `reset_in_child` puts NONE back.

use crate::counters::global;
use crate::options;
use crate::os;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The purge deadline in monotonic nanoseconds (0: nothing pending).
static DEADLINE_NS: AtomicU64 = AtomicU64::new(0);

const NONE: u32 = 0;
const STARTING: u32 = 1;
const RUNNING: u32 = 2;
/// The purger's life (module docs).
static STATE: AtomicU32 = AtomicU32::new(NONE);
/// Bumped by `schedule` when it wakes the purger: the futex word it sleeps on.
static WAKE: AtomicU32 = AtomicU32::new(0);
/// After a failed `pthread_create` (a thread limit, a sandbox), no new
/// attempt before this time: every slow path would try again otherwise.
static RETRY_AFTER_NS: AtomicU64 = AtomicU64::new(0);
/// How long a failed start keeps the next attempt away.
const RETRY_DELAY_NS: u64 = 1_000_000_000;

/// The monotonic clock deadlines are read against (`os::now_ns`: the coarse
/// clock, a vDSO read with no system call).
#[inline]
pub fn now_ns() -> u64 {
    os::now_ns()
}

/// `SLUBMALLOC_PURGE_DELAY_MS` in nanoseconds.
pub fn delay_ns() -> u64 {
    options::get().purge_delay_ms.saturating_mul(1_000_000)
}

/// Asks for a purge one delay from `now`, unless one is pending already;
/// wakes the purger if it is alive. Called with or without allocator locks.
pub fn schedule(now: u64) {
    // Relaxed: a pending deadline is all this needs to know; the CAS below
    // decides.
    if DEADLINE_NS.load(Ordering::Relaxed) != 0 {
        return;
    }
    let at = now.saturating_add(delay_ns()).max(1);
    // SeqCst, with the load of STATE in `wake_purger`: the purger either is
    // seen RUNNING and woken, or is seen gone (`purger_stops`), and the
    // next slow path starts one.
    if DEADLINE_NS
        .compare_exchange(0, at, Ordering::SeqCst, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    wake_purger();
}

/// Wakes the purger if it is alive, to look at the deadline and at whether
/// the program still has threads.
pub fn wake_purger() {
    // SeqCst: see `schedule`.
    if STATE.load(Ordering::SeqCst) == RUNNING {
        // Release: a purger whose `wake_seq` reads this count sees what
        // came before it (the deadline); the futex compares the word.
        WAKE.fetch_add(1, Ordering::Release);
        crate::sync::wake(&WAKE);
    }
}

/// The pending deadline (0: none).
#[inline]
pub fn deadline() -> u64 {
    // Relaxed: a hint; `take_due`'s CAS decides who purges.
    DEADLINE_NS.load(Ordering::Relaxed)
}

/// Claims the deadline if it has passed at `now`: true means the caller
/// purges now (everything freed one delay before `now`), and nobody else will.
#[inline]
pub fn take_due(now: u64) -> bool {
    let at = deadline();
    // Relaxed: the purge that follows takes the segment and large-block
    // locks, which order it after the frees it gives back.
    at != 0
        && now >= at
        && DEADLINE_NS
            .compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// Claims any pending deadline at once (`malloc_trim` purges everything).
pub fn take_now() {
    // Relaxed: as in `take_due`.
    DEADLINE_NS.store(0, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------
// The trim bound

/// The trim bound a process starts with: what a program that frees and
/// goes idle keeps, unless it had raised it. Lower starts cost the
/// workloads that replace big blocks (`large`) a trim of the whole cache and
/// the faults after it at each doubling (bench/report/HISTORY.md, the trim
/// bound).
const TRIM_START_BYTES: u64 = 32 << 20;
/// The most the bound grows to: what a program that went idle may keep.
/// `large_replace` (20 live blocks of 5-25 MiB, one replaced at a time)
/// caches up to half of its 300 MiB: a lower most had it trim again and
/// again.
const TRIM_MAX_BYTES: u64 = 256 << 20;
/// Memory worth half the bound, taken back within this time of the last
/// trim or raise, doubles the bound (see the module docs).
const TRIM_REUSE_NS: u64 = 1_000_000_000;
/// The bound now (module docs).
static TRIM_BOUND_BYTES: AtomicU64 = AtomicU64::new(TRIM_START_BYTES);
/// When the last trim ran (0: none yet).
static LAST_TRIM_NS: AtomicU64 = AtomicU64::new(0);
/// When the last trim ran or the bound was last raised (0: neither yet).
static LAST_CHANGE_NS: AtomicU64 = AtomicU64::new(0);
/// Bytes taken back since `LAST_CHANGE_NS` (`count_taken`).
static TAKEN_BYTES: AtomicU64 = AtomicU64::new(0);

/// Whether `freed_resident` bytes (free slabs not purged, cached large
/// blocks) are past the trim bound. One load.
#[inline]
pub fn over_trim_bound(freed_resident: u64) -> bool {
    // Relaxed: a hint; `claim_trim` decides.
    freed_resident > TRIM_BOUND_BYTES.load(Ordering::Relaxed)
}

/// What an allocation took (`count_taken`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Pages {
    /// Freed memory still resident: a free slab not purged, a cached large
    /// block.
    Resident,
    /// Pages that fault in: a slab purged or never used, a large block
    /// mapped or grown.
    Fresh,
}

/// Counts `bytes` taken by an allocation: freed memory still resident (a
/// free slab not purged, a cached large block), or fresh pages (a slab
/// purged or never used, a large block mapped or grown), which count only
/// once a trim has run: before, they are the heap growing, not memory
/// given back and needed again. What is taken back soon raises the bound
/// (`claim_trim`).
pub fn count_taken(bytes: u64, pages: Pages) {
    // Relaxed, both: a heuristic's words.
    if pages == Pages::Fresh && LAST_TRIM_NS.load(Ordering::Relaxed) == 0 {
        return;
    }
    TAKEN_BYTES.fetch_add(bytes, Ordering::Relaxed);
}

/// Called by a free slow path that found `freed_resident` bytes past the
/// bound: true if the caller trims now (gives back every free slab and
/// cached large block). The bound doubles instead, or first, when the
/// program took back memory worth half of it since the last trim or raise,
/// less than `TRIM_REUSE_NS` ago (or since it started, before the first).
pub fn claim_trim(freed_resident: u64) -> bool {
    let now = now_ns().max(1);
    // Relaxed, all: a heuristic's words; the CAS below lets one caller of
    // several trim, and the purge's locks order it after the frees.
    let changed = LAST_CHANGE_NS.load(Ordering::Relaxed);
    let bound = TRIM_BOUND_BYTES.load(Ordering::Relaxed);
    if (changed == 0 || now - changed.min(now) < TRIM_REUSE_NS)
        && TAKEN_BYTES.load(Ordering::Relaxed) >= bound / 2
        && bound < TRIM_MAX_BYTES
    {
        let raised = (bound * 2).min(TRIM_MAX_BYTES);
        TRIM_BOUND_BYTES.store(raised, Ordering::Relaxed);
        LAST_CHANGE_NS.store(now, Ordering::Relaxed);
        TAKEN_BYTES.store(0, Ordering::Relaxed);
        if freed_resident <= raised {
            return false;
        }
    }
    let last = LAST_TRIM_NS.load(Ordering::Relaxed);
    if LAST_TRIM_NS
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    // What is taken from now on counts against this trim.
    LAST_CHANGE_NS.store(now, Ordering::Relaxed);
    TAKEN_BYTES.store(0, Ordering::Relaxed);
    true
}

// ---------------------------------------------------------------------------
// The purger's life

/// Mapped bytes (segments and large blocks) from which the purger starts
/// before anything is freed: a program that builds this much and then frees
/// it all, with no allocation after, gets it back too. Below it a program
/// gets a purger at its first slow path after a purge is pending.
const PURGER_EARLY_BYTES: u64 = 8 << 20;
/// The mapped bytes the process inherited from its parent by `fork`: a
/// child starts a purger early only for what it maps itself, so that a
/// child of a big process that allocates a little and calls `exec` creates
/// no thread.
static INHERITED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Threads of the program with a heap, alive: the registry's count
/// (`heap::Registry::threads_alive`), copied here by each change so that
/// the slow paths and the purger read it without the registry's lock.
static PROGRAM_THREADS: AtomicU64 = AtomicU64::new(0);

/// Records the registry's count of threads alive; called under its lock
/// after each change (thread start and exit, a forked child's recount).
pub fn set_program_threads(alive: u64) {
    // Relaxed: a hint for `purger_wanted` and the purger; a stale one
    // costs one slow path's delay, or the purger one more look.
    PROGRAM_THREADS.store(alive, Ordering::Relaxed);
}

/// Threads of the program with a heap, alive (as `set_program_threads`
/// last recorded it).
#[inline]
pub fn program_threads() -> u64 {
    // Relaxed: see `set_program_threads`.
    PROGRAM_THREADS.load(Ordering::Relaxed)
}

/// Whether the program has threads besides the caller's: two thread heaps
/// alive. A thread that never allocated is not counted (its program is
/// multi-threaded already, and its frees are trimmed at `free` time); the
/// purger has no heap, so it never counts itself.
#[inline]
pub fn program_has_other_threads() -> bool {
    program_threads() >= 2
}

/// Whether a slow path that holds no allocator lock should start the purger:
/// none runs, the program has other threads, it is on
/// (`SLUBMALLOC_BACKGROUND_PURGE`), a purge is pending or the process has
/// mapped `PURGER_EARLY_BYTES` of its own, and no start failed in the last
/// second. One load in a single-threaded program, two once the purger
/// runs, up to five before.
#[inline]
pub fn purger_wanted() -> bool {
    // Relaxed: a stale answer costs one slow path's delay; `claim_start`'s
    // CAS decides.
    program_has_other_threads()
        && STATE.load(Ordering::Relaxed) == NONE
        && (deadline() != 0
            || global().mapped_bytes()
                >= INHERITED_BYTES.load(Ordering::Relaxed) + PURGER_EARLY_BYTES)
        && options::get().background_purge
        && now_ns() >= RETRY_AFTER_NS.load(Ordering::Relaxed)
}

/// NONE -> STARTING: true if the caller must now create the purger and
/// report with `start_done`.
pub fn claim_start() -> bool {
    // Relaxed: the state word guards nothing but itself; the purger reads
    // the deadline, the only shared datum, on its own.
    STATE
        .compare_exchange(NONE, STARTING, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// STARTING -> RUNNING (`created`), or back to NONE with new attempts held
/// off for a second.
pub fn start_done(created: bool) {
    if created {
        // Relaxed: as in `claim_start`. Nothing else leaves STARTING: a
        // purger that looks before this store stays (`purger_stops`).
        STATE.store(RUNNING, Ordering::Relaxed);
        // Relaxed: a statistics counter.
        global().purger_starts.fetch_add(1, Ordering::Relaxed);
    } else {
        // Relaxed: a hint for `purger_wanted`.
        RETRY_AFTER_NS.store(now_ns().saturating_add(RETRY_DELAY_NS), Ordering::Relaxed);
        STATE.store(NONE, Ordering::Relaxed);
    }
}

/// The wake-up count the purger reads before it looks at what it would
/// wait for: a wake after this read makes `purger_wait` return at once.
pub fn wake_seq() -> u32 {
    // Acquire: pairs with the Release in `wake_purger`.
    WAKE.load(Ordering::Acquire)
}

/// The purger's sleep: until `ns` have passed or a wake-up came after its
/// `wake_seq` read `seq` (`u64::MAX`: no time limit).
pub fn purger_wait(seq: u32, ns: u64) {
    crate::sync::wait_on(&WAKE, seq, ns);
}

/// Called by the purger when the program is down to one thread: RUNNING ->
/// NONE, so that a thread that comes later starts a purger of its own.
/// False while its creator has not reported yet (STARTING): it stays until
/// it has, or the creator's report would announce a purger that is gone.
pub fn purger_stops() -> bool {
    // SeqCst: see `schedule`.
    STATE
        .compare_exchange(RUNNING, NONE, Ordering::SeqCst, Ordering::Relaxed)
        .is_ok()
}

/// Counts one purge pass made by the purger.
pub fn count_background_purge() {
    // Relaxed: a statistics counter.
    global().background_purges.fetch_add(1, Ordering::Relaxed);
}

/// In a forked child: there is no purger (threads are not copied by fork),
/// whatever the parent's state said; neither the parent's pending deadline
/// nor what it mapped makes the child start one (what the parent freed is
/// purged with the child's own first purge).
pub fn reset_in_child() {
    // Relaxed: the child runs one thread.
    STATE.store(NONE, Ordering::Relaxed);
    DEADLINE_NS.store(0, Ordering::Relaxed);
    RETRY_AFTER_NS.store(0, Ordering::Relaxed);
    INHERITED_BYTES.store(global().mapped_bytes(), Ordering::Relaxed);
}

pub mod give_back;
pub mod pass;
