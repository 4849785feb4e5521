//! The per-CPU sheaves (per-CPU mode, `rseq`): per CPU and class, a
//! bounded stack of freed blocks behind the threads' sheaves (tcmalloc's
//! per-CPU caches, Linux's percpu sheaves). A thread's sheaf whose free
//! finds it full pushes its oldest blocks here; one whose allocation finds
//! it empty pops a batch from here, before the barn. Blocks move by pointer
//! only, in batches, each batch one restartable sequence (rseq) on the CPU
//! the thread runs on: the kernel aborts a section that is preempted,
//! migrated or signalled before its commit, and it starts again on
//! whatever CPU the thread is then on. What moves blocks between these
//! sheaves and the others, and back to the slabs, is `sheaf`'s.
//!
//! Layout:
//! - A table of `2 + BOUND` region pointers, mapped at start, indexed by
//!   `cpu_id` (sign-extended) plus 2: BOUND is the kernel's cpumask size
//!   (what `sched_getaffinity` copies), not the CPUs online, so every id the
//!   kernel can report has an entry; entries 0 and 1, ids -2 and -1 (an
//!   unregistered thread), point at `STOPPED`, and so does every entry
//!   until its CPU's region is mapped (lazily, by the first push there) and
//!   while a drain owns it.
//! - `STOPPED`: headers only, every one {current 0, end 0}: a push finds no
//!   room, a pop finds nothing (`current` is below every class's begin).
//! - A region, one mapping per CPU: per class a 32-bit header, `current`
//!   (low half) and `end`, slot indices from the region's start; the class
//!   owns slots `[BEGIN, BEGIN + MAX)`, holds `[BEGIN, current)` and may fill
//!   up to `end`. Untouched slots stay non-resident.
//!
//! Sections (x86-64 `asm!`, one block from the arming store to the commit):
//! the thread stores its descriptor's address in its `rseq_cs`, reads
//! `cpu_id` and that CPU's region inside the section, copies, and commits
//! with one 16-bit store of `current` (or `end`), the section's last
//! instruction. Copies above `current` before the commit are speculative:
//! an aborted push leaves them unread, an aborted pop leaves the region as
//! it was. The descriptors go in `__rseq_cs`; each abort handler, in
//! `__rseq_failure`, follows glibc's signature (`0x53053053`, the last four
//! bytes of a `ud1` that traps if run into), counts the restart and jumps
//! back to the arming.
//!
//! Capacity (`end`) grows by demand, tcmalloc's rule: a push that finds no
//! room grows the class (doubling, from `2 * SHEAF_CAP`, up to `MAX`) if a
//! pop on the CPU found it empty since its last growth, or if it never
//! grew. Growth is reserved first, in bytes, against the CPU's budget
//! (`CPU_BUDGET_BYTES`) and the process's pool (`sheaf_state::POOL_BYTES`,
//! the threads' sheaves' pool, which per-CPU mode leaves unused), then
//! committed by a section that raises `end` only if the thread still runs
//! on that CPU and `end` is as read; else the reservation goes back.
//!
//! A drain (`trim`, the purge, checks at exit) stops a CPU: under `LOCK`,
//! its table entry becomes `STOPPED`, then `membarrier(PRIVATE_EXPEDITED_RSEQ,
//! FLAG_CPU, cpu)` makes every section running there commit or abort
//! (tcmalloc's StopCpu and FenceCpu); no section keeps a region pointer
//! past its end, so the drainer owns the region until it puts it back
//! (`Stopped`'s drop). Meanwhile the CPU's threads find `STOPPED` and go
//! to the barn and the slabs, as in the fallback.
//!
//! Statistics are the threads' counters (`counters::Ev`): `SheafToCpu`,
//! `CpuToSheaf`, `CpuFlushed` (also counted in `SheafFlushed`), the gauge
//! `CpuCapacity`; and here, process-wide, the restarts and the drains.

use core::cell::Cell;
use core::ptr;

use crate::counters::{global, Counters, Ev};
use crate::os;
use crate::purge;
use crate::rseq;
use crate::sheaf_state::POOL_BYTES;
use crate::size_class::{class_sizes, NUM_CLASSES, SHEAF_MAX};
use crate::sync::{
    invariant, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Lock, LockWait, Ordering,
};
use crate::sys;

pub use sections::RESTARTS;
use sections::{pop_batch, push_batch, set_end};

/// What one CPU's sheaves may hold, in bytes of capacity.
const CPU_BUDGET_BYTES: u64 = 1 << 20;
/// The bytes of blocks a class's slots may hold (`MAX`, between 8 and 2048
/// blocks).
const CLASS_SLOT_BYTES: u32 = 256 << 10;
/// Header words: one per class, a whole number of cache lines.
const HEADER_WORDS: usize = 64;
/// The region's first slot: after the headers and `Meta`.
const FIRST_SLOT: usize = 64;

const SIZES: [u32; NUM_CLASSES] = class_sizes();

/// Per class, the slots it owns in a region.
pub const MAX: [u32; NUM_CLASSES] = {
    let mut max = [0; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let n = CLASS_SLOT_BYTES / SIZES[i];
        max[i] = if n < 8 {
            8
        } else if n > 2048 {
            2048
        } else {
            n
        };
        i += 1;
    }
    max
};

/// Per class, its first slot in a region (`CLASS_BEGIN` for the anchor).
const BEGIN: [u32; NUM_CLASSES] = {
    let mut begin = [0; NUM_CLASSES];
    let mut next = FIRST_SLOT as u32;
    let mut i = 0;
    while i < NUM_CLASSES {
        begin[i] = next;
        next += MAX[i];
        i += 1;
    }
    begin
};

/// `BEGIN`, where the anchor can name it: a reader outside the process
/// takes a class's blocks on a CPU as its header's `current` less this.
pub static CLASS_BEGIN: [u32; NUM_CLASSES] = BEGIN;

/// Slots in a region, headers included.
const REGION_SLOTS: usize = (BEGIN[NUM_CLASSES - 1] + MAX[NUM_CLASSES - 1]) as usize;
const REGION_BYTES: usize = (REGION_SLOTS * 8).next_multiple_of(os::PAGE_BYTES);
// Slot indices are 16-bit.
const _: () = assert!(REGION_SLOTS <= u16::MAX as usize);
const _: () = assert!(NUM_CLASSES <= HEADER_WORDS);

/// A CPU's region: its headers and `Meta`, then its slots (raw memory past
/// the struct).
#[repr(C)]
pub struct Region {
    /// Per class: `current | end << 16`, written only in sections on the
    /// region's CPU, or by a drainer that stopped it.
    headers: [AtomicU32; HEADER_WORDS],
    meta: Meta,
}
const _: () = assert!(core::mem::size_of::<Region>() <= FIRST_SLOT * 8);

/// Where a region keeps its bytes of capacity, from its start (the anchor's).
pub const CAPACITY_OFFSET: usize =
    core::mem::offset_of!(Region, meta) + core::mem::offset_of!(Meta, capacity_bytes);

/// What the slow paths keep of a region.
#[repr(C)]
struct Meta {
    /// Bytes of capacity (`end` past `BEGIN`) of all classes, plus growth
    /// reserved and not yet committed.
    capacity_bytes: AtomicU64,
    /// The headers' sum at the last idle test (`idle`).
    seen: AtomicU64,
    /// Per class, nonzero if a pop found the class empty since its last
    /// growth.
    missed: [AtomicU8; HEADER_WORDS],
}

/// The headers of a stopped or unmapped CPU.
static STOPPED: [AtomicU32; HEADER_WORDS] = [const { AtomicU32::new(0) }; HEADER_WORDS];

/// The table's entry for CPU 0 (entries -2 and -1 before it), null outside
/// per-CPU mode: what the sections index.
static TABLE: AtomicPtr<AtomicPtr<Region>> = AtomicPtr::new(ptr::null_mut());
/// Per CPU, its region once mapped, whether or not stopped; named by the
/// anchor.
pub static REGIONS: AtomicPtr<AtomicPtr<Region>> = AtomicPtr::new(ptr::null_mut());
/// Entries of each (CPU ids below it); named by the anchor.
pub static BOUND: AtomicUsize = AtomicUsize::new(0);
/// The CPUs the process may run on when it chose the mode (its affinity
/// mask's bits): how many threads share each CPU (`crowding`).
static CPUS_ALLOWED: AtomicUsize = AtomicUsize::new(1);

/// Taken to map a region and to stop a CPU; its holder may take a node lock
/// (a drain flushes blocks back to their slabs).
static LOCK: Lock = Lock::new();
/// The CPU whose region the holder of `LOCK` maps or drains (for a forked
/// child's repair).
static BUSY_CPU: AtomicUsize = AtomicUsize::new(usize::MAX);

/// CPUs stopped and drained; named by the anchor.
pub static DRAINS: AtomicU64 = AtomicU64::new(0);

fn stopped() -> *mut Region {
    STOPPED.as_ptr() as *mut Region
}

/// Chooses the mode (`rseq`), once per process, before the first heap, and
/// maps the table in per-CPU mode; `wanted` is `SLUBMALLOC_PERCPU`.
pub fn init(wanted: bool) {
    if rseq::chosen() {
        return;
    }
    let on = wanted && rseq::probe() && map_table();
    rseq::choose(on);
}

/// Maps the table, every entry `STOPPED`: false if it cannot.
fn map_table() -> bool {
    let mut mask = [0u64; 128];
    // SAFETY: the kernel writes at most `size_of_val(&mask)` bytes.
    let bytes = unsafe {
        sys::syscall(
            sys::SYS_sched_getaffinity,
            0i64,
            core::mem::size_of_val(&mask),
            mask.as_mut_ptr(),
        )
    };
    if bytes <= 0 {
        return false;
    }
    let bound = bytes as usize * 8;
    let entries = 2 + bound + bound;
    let table = os::map(entries * 8) as *mut AtomicPtr<Region>;
    if table.is_null() {
        return false;
    }
    for i in 0..2 + bound {
        // SAFETY: entry `i` of the mapping just made.
        unsafe { (*table.add(i)).store(stopped(), Ordering::Relaxed) };
    }
    BOUND.store(bound, Ordering::Relaxed);
    let allowed: u32 = mask[..(bytes as usize).div_ceil(8)]
        .iter()
        .map(|w| w.count_ones())
        .sum();
    CPUS_ALLOWED.store(allowed.max(1) as usize, Ordering::Relaxed);
    // SAFETY: the table's entries for CPU 0 on, and the regions after them.
    unsafe {
        TABLE.store(table.add(2), Ordering::Relaxed);
        REGIONS.store(table.add(2 + bound), Ordering::Relaxed);
    }
    true
}

/// Whether the process runs the per-CPU sheaves.
#[inline]
pub fn on() -> bool {
    rseq::on()
}

/// The table's entry for CPU 0, as the sections take it.
fn table() -> *mut u8 {
    TABLE.load(Ordering::Relaxed) as *mut u8
}

fn entry(cpu: usize) -> &'static AtomicPtr<Region> {
    invariant!(cpu < BOUND.load(Ordering::Relaxed));
    // SAFETY: `cpu` is below the bound: an entry of the table.
    unsafe { &*TABLE.load(Ordering::Relaxed).add(cpu) }
}

fn region_of(cpu: usize) -> *mut Region {
    invariant!(cpu < BOUND.load(Ordering::Relaxed));
    // SAFETY: as in `entry`.
    unsafe { &*REGIONS.load(Ordering::Relaxed).add(cpu) }.load(Ordering::Acquire)
}

/// The CPUs the process may run on (its affinity when the mode was chosen);
/// 1 outside per-CPU mode.
pub fn cpus_allowed() -> usize {
    // Relaxed: written once, before the first heap.
    CPUS_ALLOWED.load(Ordering::Relaxed)
}

/// Threads per CPU up to which a program is not crowded (`crowding`).
const UNCROWDED_THREADS_PER_CPU: usize = 4;

/// How crowded the program's CPUs are: 0 outside per-CPU mode and while
/// the program has up to `UNCROWDED_THREADS_PER_CPU` threads with a heap
/// alive per CPU it may run on; beyond, 1 + log2 of how many times more
/// (1 up to twice as many, 2 up to four times...). A crowded program's
/// threads keep smaller sheaves (`sheaf_budget::per_cpu_capacity`) and no
/// partial slabs (`release::unless_crowded`): most of them wait for a CPU,
/// and what they hold serves nobody meanwhile. Three loads and a compare
/// uncrowded; a division beyond.
pub fn crowding() -> u32 {
    if !on() {
        return 0;
    }
    let threads = purge::program_threads() as usize;
    let uncrowded = UNCROWDED_THREADS_PER_CPU * cpus_allowed();
    if threads <= uncrowded {
        return 0;
    }
    // ceil(threads / uncrowded) - 1 is (threads - 1) / uncrowded, at
    // least 1 here.
    ((threads - 1) / uncrowded).ilog2() + 1
}

/// The CPUs whose regions are mapped.
pub fn cpus() -> impl Iterator<Item = usize> {
    (0..BOUND.load(Ordering::Relaxed)).filter(|&cpu| !region_of(cpu).is_null())
}

/// The CPU the thread probably runs on, if the table has it.
fn cpu_now() -> Option<usize> {
    let cpu = rseq::cpu_hint();
    (cpu >= 0 && (cpu as usize) < BOUND.load(Ordering::Relaxed)).then_some(cpu as usize)
}

fn header_offset(class: usize) -> usize {
    class * 4
}

fn unpack(h: u32) -> (u32, u32) {
    (h & 0xffff, h >> 16)
}

/// Sections restarted, process-wide.
pub fn restarts() -> u64 {
    RESTARTS.load(Ordering::Relaxed)
}

/// CPUs drained, process-wide.
pub fn drains() -> u64 {
    DRAINS.load(Ordering::Relaxed)
}

// ---------------------------------------------------------------------------
// Pushes and pops, from the threads' sheaves' slow paths

/// Moves up to all of `blocks` (a thread's sheaf's oldest, of `class`)
/// onto this CPU's sheaf of the class, mapping its region or growing the
/// class's capacity if that lets it take them: how many it took, the first
/// ones (0: stopped, no budget, or no growth due). Counts capacity grown in
/// `ev`.
pub fn push(class: usize, blocks: &[Cell<*mut u8>], ev: &Counters) -> u32 {
    invariant!(on() && !blocks.is_empty() && blocks.len() <= SHEAF_MAX);
    let src = blocks.as_ptr() as *const *mut u8;
    // SAFETY: per-CPU mode: the table is mapped; `src` holds `blocks.len()`
    // pointers.
    let mut k = unsafe { push_batch(table(), header_offset(class), src, blocks.len()) };
    // At most twice: the region mapped, then its first capacity.
    for _ in 0..2 {
        if k != 0 || !make_room(class, ev) {
            break;
        }
        // SAFETY: as above.
        k = unsafe { push_batch(table(), header_offset(class), src, blocks.len()) };
    }
    k as u32
}

/// Fills `room` (an empty sheaf's slots) from this CPU's sheaf of `class`,
/// the newest blocks last: how many (0: empty or stopped; a miss noted for
/// the class's growth).
pub fn pop(class: usize, room: &[Cell<*mut u8>]) -> u32 {
    invariant!(on() && !room.is_empty());
    let dst = room.as_ptr() as *mut *mut u8;
    // SAFETY: per-CPU mode: the table is mapped; `dst` has room for
    // `room.len()` pointers, which only this thread writes.
    let k = unsafe {
        pop_batch(
            table(),
            header_offset(class),
            BEGIN[class] as usize,
            dst,
            room.len(),
        )
    };
    if k == 0 {
        if let Some(cpu) = cpu_now() {
            let r = region_of(cpu);
            if !r.is_null() {
                // SAFETY: a mapped region stays mapped. Relaxed: a hint.
                unsafe { (*r).meta.missed[class].store(1, Ordering::Relaxed) };
            }
        }
    }
    k as u32
}

/// A push found no room on the CPU the thread probably runs on: maps its
/// region, or grows the class there if it is due; true if a push may now
/// succeed.
#[cold]
fn make_room(class: usize, ev: &Counters) -> bool {
    let Some(cpu) = cpu_now() else {
        return false;
    };
    let r = region_of(cpu);
    if r.is_null() {
        return populate(cpu);
    }
    if entry(cpu).load(Ordering::Relaxed) != r {
        return false;
    }
    // SAFETY: a mapped region stays mapped.
    let region = unsafe { &*r };
    // Relaxed: a snapshot; the section compares `end` again.
    let (_, end) = unpack(region.headers[class].load(Ordering::Relaxed));
    let cap = end - BEGIN[class];
    let missed = region.meta.missed[class].load(Ordering::Relaxed) != 0;
    if cap == MAX[class] || (cap != 0 && !missed) {
        return false;
    }
    let want = (cap * 2)
        .max(2 * crate::size_class::SHEAF_CAP[class])
        .min(MAX[class]);
    let bytes = (want - cap) as u64 * SIZES[class] as u64;
    if !reserve(region, bytes) {
        return false;
    }
    // SAFETY: per-CPU mode: the table is mapped.
    let grown = unsafe {
        set_end(
            table(),
            header_offset(class),
            r as *mut u8,
            end as usize,
            (BEGIN[class] + want) as usize,
        )
    };
    if !grown {
        unreserve(region, bytes);
        return false;
    }
    region.meta.missed[class].store(0, Ordering::Relaxed);
    ev.add(Ev::CpuCapacity, (want - cap) as u64);
    true
}

/// Reserves `bytes` of capacity against the region's budget and the pool.
fn reserve(region: &Region, bytes: u64) -> bool {
    // Relaxed: counts; nothing is published through them.
    let fits = |limit: u64| move |v: u64| (v + bytes <= limit).then_some(v + bytes);
    if region
        .meta
        .capacity_bytes
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits(CPU_BUDGET_BYTES))
        .is_err()
    {
        return false;
    }
    if global()
        .sheaf_budget_taken
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits(POOL_BYTES))
        .is_err()
    {
        region
            .meta
            .capacity_bytes
            .fetch_sub(bytes, Ordering::Relaxed);
        return false;
    }
    true
}

/// Gives back what `reserve` took.
fn unreserve(region: &Region, bytes: u64) {
    // Relaxed: as in `reserve`.
    region
        .meta
        .capacity_bytes
        .fetch_sub(bytes, Ordering::Relaxed);
    global()
        .sheaf_budget_taken
        .fetch_sub(bytes, Ordering::Relaxed);
}

/// Maps `cpu`'s region, every class empty with no capacity, and publishes
/// it; false if it cannot (no memory, or a drain holds the lock).
#[cold]
fn populate(cpu: usize) -> bool {
    if !LOCK.try_lock() {
        return false;
    }
    let mut ok = true;
    if region_of(cpu).is_null() {
        BUSY_CPU.store(cpu, Ordering::Relaxed);
        let r = os::map(REGION_BYTES) as *mut Region;
        ok = !r.is_null();
        if ok {
            // SAFETY: a fresh mapping no one else knows.
            empty_headers(unsafe { &*r });
            // SAFETY: as in `region_of`. Release: the headers before the
            // region's pointer, for the next drainer.
            unsafe { &*REGIONS.load(Ordering::Relaxed).add(cpu) }.store(r, Ordering::Release);
            // Release: the headers before the sections that read them.
            entry(cpu).store(r, Ordering::Release);
        }
        BUSY_CPU.store(usize::MAX, Ordering::Relaxed);
    }
    LOCK.unlock();
    ok
}

/// Every class of `region` empty, with no capacity.
fn empty_headers(region: &Region) {
    for (h, &begin) in region.headers.iter().zip(&BEGIN) {
        // Relaxed: the region is not published, or its CPU is stopped.
        h.store(begin | begin << 16, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------
// A stopped CPU

/// A CPU stopped (`stop`): its region is the holder's until it is dropped,
/// which puts it back and releases `LOCK`.
pub struct Stopped {
    cpu: usize,
    region: &'static Region,
}

/// Stops `cpu` (mapped) and fences it: None if the kernel refused the
/// fence, or `LOCK` is taken and `wait` says not to wait (the checks at
/// exit, which may run in a signal handler that interrupted a drain).
pub fn stop(cpu: usize, wait: LockWait) -> Option<Stopped> {
    match wait {
        LockWait::Wait => LOCK.lock(),
        LockWait::Try => {
            if !LOCK.try_lock() {
                return None;
            }
        }
    }
    let r = region_of(cpu);
    invariant!(!r.is_null());
    BUSY_CPU.store(cpu, Ordering::Relaxed);
    // SeqCst: before the fence, which the kernel orders after it (the
    // membarrier is a full barrier on every CPU it interrupts).
    entry(cpu).store(stopped(), Ordering::SeqCst);
    if !rseq::fence_cpu(cpu) {
        entry(cpu).store(r, Ordering::Release);
        BUSY_CPU.store(usize::MAX, Ordering::Relaxed);
        LOCK.unlock();
        return None;
    }
    DRAINS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: a mapped region stays mapped; it is ours until the drop.
    Some(Stopped {
        cpu,
        region: unsafe { &*r },
    })
}

impl Stopped {
    /// The blocks its sheaf of `class` holds, oldest first.
    pub fn blocks(&self, class: usize) -> &[Cell<*mut u8>] {
        // Relaxed: the fence ordered the sections' commits before us.
        let (current, _) = unpack(self.region.headers[class].load(Ordering::Relaxed));
        let base = self.region as *const Region as *const Cell<*mut u8>;
        let begin = BEGIN[class] as usize;
        // SAFETY: slots `[begin, current)` of the region, which is ours
        // while stopped; a `Cell<*mut u8>` is laid out as a pointer.
        unsafe { core::slice::from_raw_parts(base.add(begin), current as usize - begin) }
    }

    /// Empties its sheaf of `class` (the caller took its blocks) and drops
    /// its capacity to 0, returned to the budgets and counted in `ev`.
    pub fn empty(&self, class: usize, ev: &Counters) {
        let h = &self.region.headers[class];
        // Relaxed: as in `blocks`.
        let (_, end) = unpack(h.load(Ordering::Relaxed));
        let begin = BEGIN[class];
        h.store(begin | begin << 16, Ordering::Relaxed);
        let cap = end - begin;
        if cap != 0 {
            unreserve(self.region, cap as u64 * SIZES[class] as u64);
            ev.sub(Ev::CpuCapacity, cap as u64);
        }
        self.region.meta.missed[class].store(0, Ordering::Relaxed);
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // Release: the drainer's writes before the sections that follow.
        entry(self.cpu).store(
            self.region as *const Region as *mut Region,
            Ordering::Release,
        );
        BUSY_CPU.store(usize::MAX, Ordering::Relaxed);
        LOCK.unlock();
    }
}

/// Whether `cpu`'s sheaves hold blocks and did not change since the last
/// time this was asked (the purge drains those).
pub fn idle(cpu: usize) -> bool {
    let r = region_of(cpu);
    // SAFETY: a mapped region stays mapped.
    let region = unsafe { &*r };
    let mut sum = 0u64;
    let mut held = 0;
    for (class, h) in region.headers.iter().take(NUM_CLASSES).enumerate() {
        // Relaxed: a hint.
        let h = h.load(Ordering::Relaxed);
        sum = sum.wrapping_mul(31).wrapping_add(h as u64);
        held += unpack(h).0 - BEGIN[class];
    }
    let seen = region.meta.seen.swap(sum, Ordering::Relaxed);
    held != 0 && seen == sum
}

/// Blocks the CPUs' sheaves of `class` hold, read without stopping them
/// (`walk`, on a quiescent process).
pub fn held(class: usize) -> u64 {
    let mut n = 0;
    for cpu in cpus() {
        // SAFETY: a mapped region stays mapped. Relaxed: a snapshot.
        let h = unsafe { &*region_of(cpu) }.headers[class].load(Ordering::Relaxed);
        n += (unpack(h).0 - BEGIN[class]) as u64;
    }
    n
}

/// What `cpu`'s sheaves hold (`stats::cpu_stats`), read without stopping
/// it: per class the header's `current` less the class's first slot, as a
/// section leaves it; no walk.
pub fn holds(cpu: usize) -> CpuHolds {
    let r = region_of(cpu);
    invariant!(!r.is_null());
    // SAFETY: a mapped region stays mapped.
    let region = unsafe { &*r };
    let mut held = CpuHolds::default();
    for (class, h) in region.headers.iter().take(NUM_CLASSES).enumerate() {
        // Relaxed: a snapshot of a gauge.
        let n = (unpack(h.load(Ordering::Relaxed)).0 - BEGIN[class]) as u64;
        held.objects += n;
        held.bytes += n * SIZES[class] as u64;
    }
    held.capacity_bytes = region.meta.capacity_bytes.load(Ordering::Relaxed);
    held
}

/// A CPU's sheaves, all classes (`holds`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuHolds {
    /// Blocks.
    pub objects: u64,
    /// Their bytes, at their classes' sizes.
    pub bytes: u64,
    /// Bytes of capacity, with growth reserved and not yet committed.
    pub capacity_bytes: u64,
}

/// In a forked child: a region its parent's thread was mapping or draining
/// when the process forked is reset empty (its blocks leak, never handed
/// out twice) and put back; the lock is freed.
pub fn repair_in_child() {
    if !on() || !LOCK.is_locked() {
        return;
    }
    let cpu = BUSY_CPU.load(Ordering::Relaxed);
    if cpu != usize::MAX {
        let r = region_of(cpu);
        if !r.is_null() {
            // SAFETY: a mapped region; the child runs one thread.
            empty_headers(unsafe { &*r });
            entry(cpu).store(r, Ordering::Release);
        }
        BUSY_CPU.store(usize::MAX, Ordering::Relaxed);
    }
    LOCK.reset_in_child();
}

mod sections;
