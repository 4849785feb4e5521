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
//! nothing. A sampled block comes from a slab of the profile heap, which is
//! no thread's (`SideHeap::Profile`), so its free misses the free fast
//! path's owner compare as a remote free does, and `remote_free::free_slow`
//! hands it here by its owner: no flag, no lookup on any free fast path.
//! Big blocks (medium or large: above the size classes) are counted down in
//! `alloc::alloc_big` and looked up in the table on free while profiling is
//! on.
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
//! Where a stack starts (`stack_start`, one module per build): as the C
//! heap (the `override` feature) or in any build of the preload library,
//! which has no std and serves no Rust program, the frames in the
//! allocator's own code range are dropped; linked into a Rust program, its
//! out-of-line functions and the `__rust_alloc` shims found by
//! `stack_start::calibrate` (which allocates through std) are dropped by
//! address.

use core::ptr;

use crate::debug;
use crate::heap::Heap;
use crate::large;
use crate::large_map::Contents;
use crate::options;
use crate::os;
use crate::prof::table::TABLES;
use crate::prof::unwind::{self, Skip, MAX_FRAMES};
use crate::segment;
use crate::side_slabs::SideHeap;
use crate::slab::{double_free, invalid_free, Slab};
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
    if stack_start::calibration_sample(h, caller) {
        return ptr::null_mut();
    }
    if !should_sample(h) {
        return ptr::null_mut();
    }
    stack_start::calibrate(h);
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
                let p = large::alloc(size, align, Contents::Any);
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
        let (p, fresh) = SideHeap::Profile.take(class);
        if p.is_null() {
            return p;
        }
        if debug && fresh {
            debug::poison(p);
        }
        if t.insert(p as usize, size, frames, rate) {
            return p;
        }
        // SAFETY: `p` lies in a slab of the profile heap, whose lock we hold.
        SideHeap::Profile.put(unsafe { &*segment::slab_of(p) }, p);
        ptr::null_mut()
    });
    if debug && !p.is_null() {
        debug::arm(p, size);
    }
    p
}

/// A free of `p`, in a slab of the profile heap (`SideHeap::Profile`, from
/// `remote_free::free_slow`): its estimate leaves the table, the block its
/// slab.
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
        SideHeap::Profile.put(slab, p);
    });
}

/// A big block (medium or large) was allocated (by `caller`, whose frame is
/// dropped from the stack, or 0): counts it down.
#[inline(always)]
pub fn count_big(p: *mut u8, size: usize, caller: usize) {
    if let Some(h) = own_heap() {
        if h.prof_count(size) {
            sample_big(h, p, size, caller);
        }
    }
}

/// Records the big block `p` as sampled, if the sample can be taken.
#[cold]
#[inline(never)]
fn sample_big(h: &Heap, p: *mut u8, size: usize, caller: usize) {
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

/// A big block (medium or large) is being freed: its sample, if it was
/// one, leaves the table (before the block's address can be handed out
/// again).
#[inline]
pub fn free_big(p: *mut u8) {
    if enabled() {
        let rate = options::get().prof_rate;
        TABLES.with(|t| t.remove(p as usize, rate));
    }
}

/// A big block `p` was resized in place (a medium block's span, `p == q`)
/// or in its mapping (a large block) to `q`: the old sample leaves, and the
/// new size counts down as an allocation would.
#[inline]
pub fn realloc_big(p: *mut u8, q: *mut u8, new_size: usize) {
    if enabled() {
        free_big(p);
        count_big(q, new_size, 0);
    }
}

/// The allocator's out-of-line functions that may lie between a program's
/// call and the capture of its stack (`caller`: the sampler's, or 0).
#[inline(always)]
fn internal_functions(caller: usize) -> [usize; 8] {
    let shims = stack_start::entry_shims();
    [
        0,
        unwind::capture as *const () as usize,
        sample_small as *const () as usize,
        sample_big as *const () as usize,
        caller,
        shims[0],
        shims[1],
        shims[2],
    ]
}

/// The calling stack past the allocator's frames (`stack_start`).
#[inline(always)]
fn capture_stack(out: &mut [usize; MAX_FRAMES], caller: usize) -> usize {
    let functions = internal_functions(caller);
    unwind::capture(
        out,
        &Skip {
            functions: &functions,
            text: stack_start::own_text(),
        },
    )
}

/// Where a stack starts, linked into a Rust program: the allocator's
/// out-of-line functions are dropped by address, and so are those of the
/// `__rust_alloc` family, found by `calibrate`, so that a stack starts at
/// the program's call.
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
mod stack_start {
    use super::{internal_functions, Heap, MAX_FRAMES};
    use crate::prof::unwind::{self, Skip};
    use crate::sync::{AtomicU32, AtomicUsize, Ordering};

    /// The start addresses of the functions of the `__rust_alloc` family
    /// into which `GlobalAlloc` is inlined (0: none, as when they are
    /// inlined into their callers or jump to the sampler), found by
    /// `calibrate`; and whether it has run (0 no, 1 running, 2 done).
    static ENTRY_SHIMS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];
    static CALIBRATION: AtomicU32 = AtomicU32::new(0);
    static CALIBRATION_STEP: AtomicUsize = AtomicUsize::new(0);

    pub(super) fn entry_shims() -> [usize; 3] {
        // Relaxed: a thread that reads them before `calibrate` wrote them
        // drops fewer frames.
        core::array::from_fn(|i| ENTRY_SHIMS[i].load(Ordering::Relaxed))
    }

    /// No code range is dropped: the program's code is the allocator's.
    pub(super) fn own_text() -> (usize, usize) {
        (0, 0)
    }

    /// Once per process, at the first sample: allocates through
    /// `std::alloc::{alloc, alloc_zeroed, realloc}` with the countdown run
    /// out, so that each reaches `sample_small`, which notes the function
    /// between it and this one (`calibration_sample`). Those functions are
    /// then dropped from every stack, which thus starts at the program's
    /// call.
    #[inline(never)]
    pub(super) fn calibrate(h: &Heap) {
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

    /// Whether the allocation that reached the sampler is `calibrate`'s
    /// (then no sample is taken): the first frame outside the allocator's
    /// functions is either `calibrate` (the entry point was inlined or
    /// jumped here) or the entry point, whose start is noted.
    pub(super) fn calibration_sample(h: &Heap, caller: usize) -> bool {
        if !h.prof_calibrating.get() {
            return false;
        }
        h.prof_calibrating.set(false);
        let mut frames = [0usize; MAX_FRAMES];
        let functions = internal_functions(caller);
        let skip = Skip {
            functions: &functions,
            text: (0, 0),
        };
        if unwind::capture(&mut frames, &skip) != 0 {
            let f = unwind::function_of(frames[0]);
            if f != calibrate as *const () as usize {
                ENTRY_SHIMS[CALIBRATION_STEP.load(Ordering::Relaxed)].store(f, Ordering::Relaxed);
            }
        }
        true
    }
}

/// Where a stack starts as the C heap (the `override` feature) or in any
/// build of the preload library, which has no std and serves no Rust
/// program: every frame in the allocator's own code range is dropped, so
/// that a stack starts in the program (or in `operator new`, which pprof
/// drops).
#[cfg(any(feature = "override", slubmalloc_preload))]
mod stack_start {
    use super::{sample_small, Heap};
    use crate::prof::unwind;
    use crate::sync::{AtomicUsize, Ordering};

    /// The allocator's code range, found at the first sample (start, end;
    /// `end == 0` until then).
    static OWN_TEXT: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

    pub(super) fn entry_shims() -> [usize; 3] {
        [0; 3]
    }

    pub(super) fn own_text() -> (usize, usize) {
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
    }

    /// Nothing to calibrate: no std entry point lies between.
    pub(super) fn calibrate(_: &Heap) {}

    pub(super) fn calibration_sample(_: &Heap, _: usize) -> bool {
        false
    }
}
