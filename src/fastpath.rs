//! The fast paths: allocation and free by the thread that owns the slab,
//! a few loads, compares and stores each, no atomic read-modify-write, no
//! lock. Everything else goes to `refill` (allocation) and `free` (free).

use core::ptr;

use crate::counters::Ev;
use crate::debug;
use crate::free::{free_slow, free_suspicious};
use crate::freelist::{
    corrupted_link, get_next_with, link_is_sane, may_be_free, prefetch, set_next_with, HARDENING,
};
use crate::heap::ClassHeap;
use crate::refill::alloc_slow;
use crate::release::slab_emptied;
use crate::segment::{slab_of, SLAB_BYTES};
use crate::size_class::NUM_CLASSES;
use crate::slab::{invalid_free, State};
use crate::sync::{invariant, Ordering};
use crate::tls::current;

/// Allocates one object of `class` for a request of `size` bytes at `align`
/// (used only by the debug slow path). Fast path: a TLS load, a pop from
/// the detached free list, a link check, a prefetch of the next block, two
/// stores and a counter increment.
#[inline(always)]
pub fn alloc(class: usize, size: usize, align: usize) -> *mut u8 {
    alloc_scaled(class * core::mem::size_of::<ClassHeap>(), size, align)
}

/// `alloc` for the class at byte offset `scaled` in the heap (the class times
/// `CLASS_SCALE`, as `size_class::scaled_class_by_table` gives it).
#[inline(always)]
pub fn alloc_scaled(scaled: usize, size: usize, align: usize) -> *mut u8 {
    let heap = current();
    invariant!(scaled < NUM_CLASSES * core::mem::size_of::<ClassHeap>());
    // SAFETY: `heap` is this thread's heap or a static one; `scaled` is a
    // class's offset, below `NUM_CLASSES * CLASS_SCALE`.
    let c = unsafe { (*heap).class_at(scaled) };
    let obj = c.detached.get();
    if obj.is_null() {
        return alloc_slow(size, align, scaled / core::mem::size_of::<ClassHeap>());
    }
    // --- heap profile: the byte countdown (a `sub` to memory and a `js`);
    // only a thread's own heap gets here (the static ones have no list).
    // SAFETY: as above.
    if unsafe { (*heap).prof_count(size) } {
        return sampled_or_not(size, align, scaled / core::mem::size_of::<ClassHeap>());
    }
    // ---
    // The pop of `freelist::pop`, tuned here: the heap's copy of the secret,
    // the link made opaque and its check as two branches (see `opaque`),
    // and `HARDENING` to measure without them.
    // SAFETY: `obj` is a free object of our active slab; a heap with a list
    // is a thread's own, whose `secret` is set.
    let next = opaque(unsafe { get_next_with((*heap).secret.get(), obj) } as usize) as *mut u8;
    // `link_is_sane`, as two branches: the usual case (a link within the
    // slab) costs a compare and a jump, the end of the list one more.
    if HARDENING && (obj as usize ^ next as usize) >= SLAB_BYTES {
        unlikely();
        if !next.is_null() {
            corrupted_link(obj);
        }
    }
    c.detached.set(next);
    // The class's next allocation reads `next`'s link: its line starts
    // coming now. Blocks that come back through a remote list, or were
    // freed long ago, are cold: `perf` put most of malloc's samples in
    // stress on that read. One instruction; msgpass 0.92x the time.
    prefetch(next);
    if HARDENING {
        // Clear the link: a stale one would look like a free block to `free`.
        // SAFETY: `obj` is ours and at least 8 bytes.
        unsafe { *(obj as *mut usize) = 0 };
    }
    c.ev.inc(Ev::AllocFast);
    obj
}

/// The fast path's countdown ran out: a sampled block, or else the usual
/// one (the sampler may have allocated meanwhile, so the list is read anew).
/// Arguments in `alloc_slow`'s order.
#[cold]
#[inline(never)]
fn sampled_or_not(size: usize, align: usize, class: usize) -> *mut u8 {
    let me = sampled_or_not as *const () as usize;
    let p = crate::prof::sample::sample_small(class, size, align, me);
    if p.is_null() {
        crate::refill::alloc_unsampled(class, size, align)
    } else {
        p
    }
}

/// Frees an object inside one of our segments. Fast path (the slab is ours):
/// a TLS load, the slab from the address, an owner compare, the object-start
/// test, the double-free test, a counter, and a push: onto the heap's
/// detached list if the slab is the active one, as SLUB frees to the cpu
/// freelist, so the next allocation reuses the block while it is in cache;
/// else onto the slab's local list, with a decrement of its `inuse` (a slab
/// that empties leaves the thread).
///
/// # Safety
/// `p` lies inside a mapped segment (`segment::contains(p)`).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let heap = current();
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    // Acquire: pairs with `give_back`'s Release (a plain load on x86-64).
    if slab.owner.load(Ordering::Acquire) != heap as usize {
        return free_slow(p, slab);
    }
    // A slot never carved (never handed out) fails here too: no extra load.
    // SAFETY: `heap` owns `slab` (just compared), and `heap` is ours.
    if HARDENING && !unsafe { slab.is_object_start_owned(p) } {
        return stop_invalid_free(p);
    }
    // SAFETY: `heap` owns a slab, so it is a thread's own heap, whose
    // `secret` is set.
    let secret = unsafe { (*heap).secret.get() };
    invariant!(secret == crate::freelist::secret());
    // SAFETY: `p` is an object slot of a slab we own.
    if HARDENING
        && unsafe { may_be_free(secret, p) }
        && link_is_sane(p, unsafe { get_next_with(secret, p) })
    {
        return free_suspicious(p, heap, slab);
    }
    // SAFETY: `heap` is this thread's live heap; `heap_offset` is a class's.
    let c = unsafe { (*heap).class_at(slab.heap_offset.get() as usize) };
    c.ev.inc(Ev::FreeFast);
    if ptr::eq(c.active.get(), slab) {
        // SAFETY: `p` is a live object of our active slab; it becomes free.
        unsafe { set_next_with(secret, p, c.detached.get()) };
        c.detached.set(p);
        return;
    }
    // SAFETY: as above, for a slab we own.
    if unsafe { slab.free_object_with(secret, p) } {
        // SAFETY: `heap` owns `slab`, so it is a live heap of this thread.
        slab_emptied(unsafe { &*heap }, slab);
    }
}

/// `slab::invalid_free` for the free fast path, which reaches it with a
/// jump: a call to a function that never returns needs the stack aligned,
/// and so a push on the fast path itself (2 instructions per Rust free,
/// ci/callgrind.sh).
#[cold]
#[inline(never)]
fn stop_invalid_free(p: *mut u8) {
    invalid_free(p)
}

/// `x`, as a value the compiler cannot see through. The end-of-list test on
/// the allocation fast path is then on the decoded link itself: seeing the
/// decoding, LLVM compares the stored word with the key instead, and keeps
/// both in registers for it (2 instructions more per allocation,
/// ci/callgrind.sh). An empty asm statement: no instruction.
#[inline(always)]
fn opaque(x: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let mut r = x;
        // SAFETY: an empty asm statement: it touches nothing.
        unsafe { core::arch::asm!("/* {r} */", r = inout(reg) r, options(pure, nomem, nostack)) };
        r
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        x
    }
}

/// Marks the branch that calls it as rarely taken (`core::hint::cold_path`
/// is newer than our minimum Rust version).
#[cold]
#[inline(always)]
fn unlikely() {}

/// Usable size of an object inside one of our segments.
///
/// # Safety
/// As for `free`.
#[inline]
pub unsafe fn usable_size(p: *mut u8) -> usize {
    // SAFETY: per the contract.
    let slab = unsafe { &*slab_of(p) };
    if slab.state() == State::Free || !slab.is_object_start(p) {
        invalid_free(p);
    }
    if debug::enabled() {
        return debug::requested_size(slab, p);
    }
    slab.size.get() as usize
}

/// The class of the slab holding `p` (for realloc in place).
///
/// # Safety
/// As for `free`.
pub unsafe fn class_of_ptr(p: *mut u8) -> usize {
    // SAFETY: per the contract.
    let slab = unsafe { &*slab_of(p) };
    if slab.state() == State::Free || !slab.is_object_start(p) {
        invalid_free(p);
    }
    slab.class.get() as usize
}
