//! The sampled heap profile (`SLUBMALLOC_PROF=1`): which code holds the
//! memory, in the spirit of the statistics: cheap enough to leave on.
//!
//! Sampling: each thread heap counts down the bytes it allocates
//! (`Heap::prof_left`); the allocation that takes the count below zero is
//! sampled, and the next count is drawn from an exponential distribution of
//! mean `SLUBMALLOC_PROF_RATE` bytes. Samples are thus the points of a
//! Poisson process over the allocated bytes, and a block of `size` bytes is
//! sampled with probability `1 - exp(-size/rate)`, whatever came before it
//! (tcmalloc's and jemalloc's scheme); `prof::table` weighs each sample by
//! the inverse of that probability. With profiling off the count starts at
//! `i64::MAX` and never runs out.
//!
//! Costs: the allocation fast path subtracts the size and tests the sign
//! (2 instructions); the slow path does the same; the free fast path
//! nothing. A sampled block comes from a slab of the profile heap
//! (`heap::prof_heap`), which is no thread's, so its free misses the free
//! fast path's owner compare as a remote free does, and `remote_free::free_slow`
//! hands it here by its owner: no flag, no lookup on any free fast path.
//! Large blocks are counted down in `alloc_large` and looked up in the table
//! on free while profiling is on.
//!
//! This module calls nothing of `refill`, `release` or `heap_start`, which call
//! it: the sampler returns null when it takes no sample, and its caller
//! allocates as usual.
//!
//! A sample: the stack is captured first, with the thread's reentrancy
//! guard set and no lock held (`prof::unwind`), then under `PROF_LOCK` a block is
//! taken from the profile heap and entered in the table. Threads past their
//! exit destructor are not sampled (they have no countdown).
//!
//! Where a stack starts: as the C heap (the `override` feature) or in any
//! build of the preload library, which has no std and serves no Rust
//! program, the frames in the allocator's own code range are dropped;
//! linked into a Rust program, its out-of-line functions and the
//! `__rust_alloc` shims found by `calibrate` (which allocates through std)
//! are dropped by address.

use core::ptr;

use crate::counters::Ev;
use crate::debug;
use crate::heap::{prof_heap, prof_owner, Heap};
use crate::large;
use crate::node::{self, NODES};
use crate::options;
use crate::os;
use crate::prof::table::TABLES;
use crate::prof::unwind::{self, Skip, MAX_FRAMES};
use crate::segment;
use crate::slab::{double_free, invalid_free, Slab};
use crate::sync::{invariant, AtomicUsize, Ordering};
use crate::tls::own_heap;

/// Whether profiling is on (`SLUBMALLOC_PROF=1`).
#[inline]
pub fn enabled() -> bool {
    options::get().prof
}

/// Arms a new thread heap's countdown (from `heap_start::create_heap`).
pub fn thread_start(heap: &Heap) {
    heap.prof_busy.set(false);
    if !enabled() {
        heap.prof_left.set(i64::MAX);
        return;
    }
    heap.prof_rng.set(os::random_u64());
    heap.prof_left.set(next_interval(heap));
}

/// Bytes to the next sample: exponential, of mean `SLUBMALLOC_PROF_RATE`.
fn next_interval(heap: &Heap) -> i64 {
    // xorshift64*, seeded per thread from the kernel.
    let mut x = heap.prof_rng.get();
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    heap.prof_rng.set(x);
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    // Uniform in (0, 1], from the top 53 bits.
    let u = ((r >> 11) + 1) as f64 / (1u64 << 53) as f64;
    // `as` saturates; at most 37 times the mean, as u >= 2^-53.
    (-crate::prof::table::ln(u) * options::get().prof_rate as f64) as i64
}

/// The countdown of the thread's heap ran out: re-arms it, and says
/// whether to take a sample (profiling on, not inside the profiler).
fn should_sample(h: &Heap) -> bool {
    if !enabled() {
        h.prof_left.set(i64::MAX);
        return false;
    }
    h.prof_left.set(next_interval(h));
    !h.prof_busy.get()
}

/// A small allocation whose size took the countdown below zero, from the
/// fast path (`caller` 0) or from `refill::alloc_slow` (`caller` its
/// address, a frame to drop from the stack): a sampled block from the
/// profile heap, or null if no sample is taken (profiling off, inside the
/// profiler, out of memory); the caller then allocates as usual.
#[cold]
#[inline(never)]
pub fn sample_small(class: usize, size: usize, align: usize, caller: usize) -> *mut u8 {
    let Some(h) = own_heap() else {
        return ptr::null_mut();
    };
    #[cfg(not(any(feature = "override", slubmalloc_preload)))]
    if h.prof_calibrating.get() {
        calibration_sample(h, caller);
        return ptr::null_mut();
    }
    if !should_sample(h) {
        return ptr::null_mut();
    }
    #[cfg(not(any(feature = "override", slubmalloc_preload)))]
    calibrate(h);
    h.prof_busy.set(true);
    let mut frames = [0usize; MAX_FRAMES];
    let depth = capture_stack(&mut frames, caller);
    let p = alloc_sampled(class, size, align, &frames[..depth]);
    h.prof_busy.set(false);
    p
}

/// A sampled small block, or null (out of memory for the block or the
/// table). In debug mode it gets a red zone like any other.
fn alloc_sampled(class: usize, size: usize, align: usize, frames: &[usize]) -> *mut u8 {
    let debug = debug::enabled();
    let class = if debug {
        match debug::slot_class(size, align) {
            Some(c) => c,
            None => {
                // Recorded if the table takes it; an ordinary block if not.
                let p = large::alloc(size, align, false);
                if !p.is_null() {
                    record(p, size, frames);
                }
                return p;
            }
        }
    } else {
        class
    };
    let rate = options::get().prof_rate;
    let p = TABLES.with(|t| {
        let p = take_block(prof_heap(), class, debug);
        if p.is_null() || t.insert(p as usize, size, frames, rate) {
            return p;
        }
        // SAFETY: `p` lies in a slab of the profile heap, whose lock we hold.
        put_block(prof_heap(), unsafe { &*segment::slab_of(p) }, p);
        ptr::null_mut()
    });
    if debug && !p.is_null() {
        debug::arm(p, size);
    }
    p
}

/// Takes a free block of `class` from the profile heap's slabs, which it
/// keeps on a list through `Slab::next` headed by `ClassHeap::active`
/// (its other lists stay empty); the slab that gives one moves to the
/// front. `PROF_LOCK` held.
fn take_block(heap: &Heap, class: usize, debug: bool) -> *mut u8 {
    TABLES.lock.assert_held();
    let c = &heap.classes[class];
    let mut prev: *mut Slab = ptr::null_mut();
    let mut s = c.active.get();
    while !s.is_null() {
        // SAFETY: slabs on the list are live and owned by the profile heap.
        let slab = unsafe { &*s };
        let p = take_from(slab, debug);
        if !p.is_null() {
            if !prev.is_null() {
                // SAFETY: as above.
                unsafe { (*prev).next.set(slab.next.get()) };
                slab.next.set(c.active.get());
                c.active.set(s);
            }
            c.ev.inc(Ev::AllocSlow);
            return p;
        }
        prev = s;
        s = slab.next.get();
    }
    let s = segment::alloc_slab();
    if s.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a free slab from the segment lock is ours alone.
    let slab = unsafe { &*s };
    slab.init(class, prof_owner());
    slab.keep_off_sheaves();
    c.ev.inc(Ev::SlabsNew);
    slab.next.set(c.active.get());
    c.active.set(s);
    let p = take_from(slab, debug);
    c.ev.inc(Ev::AllocSlow);
    p
}

/// One block from a profile slab's free list or its uncarved rest.
fn take_from(slab: &Slab, debug: bool) -> *mut u8 {
    let (p, fresh) = slab.take_object();
    if fresh && debug {
        debug::poison(p, slab.size.get() as usize);
    }
    p
}

/// Puts a block back on its profile slab; a slab left empty goes back to
/// its segment unless it is the class's only one. `PROF_LOCK` held.
fn put_block(heap: &Heap, slab: &Slab, p: *mut u8) {
    TABLES.lock.assert_held();
    let class = slab.class.get() as usize;
    let c = &heap.classes[class];
    // SAFETY: `p` is a live block of the slab, which the profile heap owns.
    let emptied = unsafe { slab.free_object(p) };
    c.ev.inc(Ev::FreeSlow);
    let me = slab as *const Slab as *mut Slab;
    if !emptied || (c.active.get() == me && slab.next.get().is_null()) {
        return;
    }
    let mut link = &c.active;
    while link.get() != me {
        // SAFETY: the list holds `slab`, so every slab before it is live.
        link = unsafe { &(*link.get()).next };
    }
    link.set(slab.next.get());
    let _g = NODES[class].lock.guard();
    // Empty, never on a remote list (no thread frees into it remotely).
    let remote = slab.begin_listing();
    invariant!(remote.is_null());
    node::discard(slab);
    c.ev.inc(Ev::SlabsFreed);
}

/// A free of `p`, in a slab the profile heap owns (from
/// `remote_free::free_slow`): its estimate leaves the table, the block its slab.
#[cold]
#[inline(never)]
pub fn free_sampled(slab: &Slab, p: *mut u8) {
    if !slab.is_object_start(p) {
        invalid_free(p);
    }
    let rate = options::get().prof_rate;
    TABLES.with(|t| {
        // Every block handed out from a profile slab is in the table.
        if !t.remove(p as usize, rate) {
            double_free(p);
        }
        if debug::enabled() {
            debug::on_free(slab, p);
        }
        put_block(prof_heap(), slab, p);
    });
}

/// Whether `slab` belongs to the profile heap (its blocks were sampled).
#[inline(always)]
pub fn owns(slab: &Slab) -> bool {
    // Relaxed: the owner was written under `PROF_LOCK` before the block
    // was handed out, which happened before this free of it.
    slab.owner.load(Ordering::Relaxed) == prof_owner()
}

/// A large block was allocated (by `caller`, whose frame is dropped from
/// the stack, or 0): counts it down.
#[inline(always)]
pub fn count_large(p: *mut u8, size: usize, caller: usize) {
    if let Some(h) = own_heap() {
        if h.prof_count(size) {
            sample_large(h, p, size, caller);
        }
    }
}

/// Records the large block `p` as sampled, if the sample can be taken.
#[cold]
#[inline(never)]
fn sample_large(h: &Heap, p: *mut u8, size: usize, caller: usize) {
    if !should_sample(h) {
        return;
    }
    h.prof_busy.set(true);
    let mut frames = [0usize; MAX_FRAMES];
    let depth = capture_stack(&mut frames, caller);
    record(p, size, &frames[..depth]);
    h.prof_busy.set(false);
}

fn record(p: *mut u8, size: usize, frames: &[usize]) -> bool {
    let rate = options::get().prof_rate;
    TABLES.with(|t| t.insert(p as usize, size, frames, rate))
}

/// A large block is being freed: its sample, if it was one, leaves the
/// table (before the block's address can be mapped again).
#[inline]
pub fn free_large(p: *mut u8) {
    if enabled() {
        let rate = options::get().prof_rate;
        TABLES.with(|t| t.remove(p as usize, rate));
    }
}

/// A large block `p` was resized in its mapping to `q`: the old sample
/// leaves, and the new size counts down as an allocation would.
#[inline]
pub fn realloc_large(p: *mut u8, q: *mut u8, new_size: usize) {
    if enabled() {
        free_large(p);
        count_large(q, new_size, 0);
    }
}

/// The code range of the preload library, found at the first sample
/// (start, end; `end == 0` until then).
#[cfg(any(feature = "override", slubmalloc_preload))]
static OWN_TEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// Linked into a Rust program: the start addresses of the functions of the
/// `__rust_alloc` family into which `GlobalAlloc` is inlined (0: none, as
/// when they are inlined into their callers or jump to the sampler), found
/// by `calibrate`; and whether it has run (0 no, 1 running, 2 done).
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
static ENTRY_SHIMS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
static CALIBRATION: crate::sync::AtomicU32 = crate::sync::AtomicU32::new(0);
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
static CALIBRATION_STEP: AtomicUsize = AtomicUsize::new(0);

/// Once per process, at the first sample of a Rust program: allocates
/// through `std::alloc::{alloc, alloc_zeroed, realloc}` with the countdown
/// run out, so that each reaches `sample_small`, which notes the function
/// between it and this one (`calibration_sample`). Those functions are
/// then dropped from every stack, which thus starts at the program's call.
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
#[inline(never)]
fn calibrate(h: &Heap) {
    use std::alloc::Layout;
    // Relaxed: a thread that loses the race runs its samples with fewer
    // frames dropped; nothing else depends on the order.
    if CALIBRATION.load(Ordering::Relaxed) != 0
        || CALIBRATION
            .compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    let left = h.prof_left.get();
    let small = Layout::from_size_align(8, 8).unwrap();
    for step in 0..3 {
        CALIBRATION_STEP.store(step, Ordering::Relaxed);
        h.prof_calibrating.set(true);
        // SAFETY: non-zero sizes; each block is freed with its layout.
        unsafe {
            match step {
                0 => {
                    h.prof_left.set(0);
                    std::alloc::dealloc(std::alloc::alloc(small), small);
                }
                1 => {
                    h.prof_left.set(0);
                    std::alloc::dealloc(std::alloc::alloc_zeroed(small), small);
                }
                _ => {
                    let p = std::alloc::alloc(small);
                    h.prof_left.set(0);
                    let q = std::alloc::realloc(p, small, 256);
                    std::alloc::dealloc(q, Layout::from_size_align(256, 8).unwrap());
                }
            }
        }
        h.prof_calibrating.set(false);
    }
    h.prof_left.set(left);
    CALIBRATION.store(2, Ordering::Relaxed);
}

/// `calibrate`'s allocation reached the sampler: the first frame outside
/// the allocator's functions is either `calibrate` (the entry point was
/// inlined or jumped here) or the entry point, whose start is noted.
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
fn calibration_sample(h: &Heap, caller: usize) {
    h.prof_calibrating.set(false);
    let mut frames = [0usize; MAX_FRAMES];
    let functions = internal_functions(caller);
    let skip = Skip {
        functions: &functions,
        text: (0, 0),
    };
    if unwind::capture(&mut frames, &skip) == 0 {
        return;
    }
    let f = unwind::function_of(frames[0]);
    if f != calibrate as *const () as usize {
        ENTRY_SHIMS[CALIBRATION_STEP.load(Ordering::Relaxed)].store(f, Ordering::Relaxed);
    }
}

/// The allocator's out-of-line functions that may lie between a program's
/// call and the capture of its stack (`caller`: the sampler's, or 0).
#[inline(always)]
fn internal_functions(caller: usize) -> [usize; 8] {
    #[cfg(not(any(feature = "override", slubmalloc_preload)))]
    let shim = |i: usize| ENTRY_SHIMS[i].load(Ordering::Relaxed);
    #[cfg(any(feature = "override", slubmalloc_preload))]
    let shim = |_| 0;
    [
        0,
        unwind::capture as *const () as usize,
        sample_small as *const () as usize,
        sample_large as *const () as usize,
        caller,
        shim(0),
        shim(1),
        shim(2),
    ]
}

/// The calling stack past the allocator's frames. In the preload library
/// every frame in its own code is dropped, so stacks start in the program
/// (or in `operator new`, which pprof drops). Linked into a Rust program,
/// the allocator's out-of-line functions are dropped by address, and so are
/// those of the `__rust_alloc` family (see `calibrate`).
#[inline(always)]
fn capture_stack(out: &mut [usize; MAX_FRAMES], caller: usize) -> usize {
    let functions = internal_functions(caller);
    #[cfg(any(feature = "override", slubmalloc_preload))]
    let text = {
        // Relaxed: a cache of a value every thread computes the same.
        if OWN_TEXT[1].load(Ordering::Relaxed) == 0 {
            let (lo, hi) = unwind::text_range_of(sample_small as *const () as usize);
            OWN_TEXT[0].store(lo, Ordering::Relaxed);
            OWN_TEXT[1].store(hi, Ordering::Relaxed);
        }
        (
            OWN_TEXT[0].load(Ordering::Relaxed),
            OWN_TEXT[1].load(Ordering::Relaxed),
        )
    };
    #[cfg(not(any(feature = "override", slubmalloc_preload)))]
    let text = (0, 0);
    unwind::capture(
        out,
        &Skip {
            functions: &functions,
            text,
        },
    )
}
