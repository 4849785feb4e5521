//! The fast paths: allocation from the thread's sheaf (the block it freed
//! last) or else from its active slab's detached list, and free into the
//! thread's sheaf, whatever slab the block is in and whoever owns it; a few
//! loads, compares and stores each, no atomic read-modify-write, no lock.
//! Everything else goes to `refill` (allocation), `sheaf` (a full sheaf's
//! room) and `free` (a free with no sheaf).

use crate::counters::Ev;
use crate::free::free_suspicious;
use crate::freelist::{
    corrupted_link, get_next_with, holds_link_with, prefetch, set_sheaf_tag, HARDENING,
};
use crate::heap::{ClassHeap, Heap};
use crate::prof::sample;
use crate::refill::alloc_slow;
use crate::remote_free::free_slow;
use crate::segment::{slab_of, SLAB_BYTES};
use crate::sheaf;
use crate::sheaf_budget;
use crate::size_class::{NUM_CLASSES, ZERO_OFFSET};
use crate::slab::{double_free, invalid_free, Slab, State};
use crate::sync::{invariant, Ordering};
use crate::tls::current;

/// Allocates one object of `class` for a request of `size` bytes at `align`
/// (the requests above the lookup table's sizes, and the aligned ones;
/// `alloc_scaled` serves `malloc`'s common case). Fast path: a TLS load, a pop from the
/// sheaf with the block's check (`freelist::take_sheaf_block`), or else a
/// pop from the detached free list with a link check and a prefetch of the
/// next block; a counter increment.
#[inline(always)]
pub fn alloc(class: usize, size: usize, align: usize) -> *mut u8 {
    alloc_scaled(class * core::mem::size_of::<ClassHeap>(), size, align)
}

/// `alloc` for the class at byte offset `scaled` in the heap (the class times
/// `CLASS_SCALE`, as `size_class::scaled_class_by_table` gives it).
#[inline(always)]
pub fn alloc_scaled(scaled: usize, size: usize, align: usize) -> *mut u8 {
    let heap = current();
    invariant!(scaled < NUM_CLASSES * core::mem::size_of::<ClassHeap>() || scaled == ZERO_OFFSET);
    // SAFETY: `heap` is this thread's heap or a static one; `scaled` is a
    // class's offset, below `NUM_CLASSES * CLASS_SCALE`, or the zero-size
    // class's (`ZERO_OFFSET`, a class heap with no sheaf and no list).
    let c = unsafe { (*heap).class_at(scaled) };
    let sheaf = c.sheaf();
    let len = sheaf.len();
    if len != 0 {
        // --- heap profile: the byte countdown (a `sub` to memory and a
        // `js`); only a thread's own heap gets here (the static ones have
        // no sheaf and no list).
        // SAFETY: as above.
        if unsafe { (*heap).prof_count(size) } {
            return sampled_or_not(size, align, scaled / core::mem::size_of::<ClassHeap>());
        }
        // ---
        // SAFETY: a heap with a sheaf is a thread's own, whose `secret` is
        // set.
        return sheaf.pop(len, unsafe { (*heap).secret.get() }, &c.ev);
    }
    let obj = c.detached.get();
    if obj.is_null() {
        return alloc_slow(size, align, scaled / core::mem::size_of::<ClassHeap>());
    }
    // --- heap profile, as above.
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
    // stress on that read. One instruction.
    prefetch(next);
    if HARDENING {
        // Clear the link: a stale one would look, to a sheaf's check, like
        // a block freed again while on a free list.
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
    let p = sample::sample_small(class, size, align, me);
    if p.is_null() {
        crate::refill::alloc_unsampled(class, size, align)
    } else {
        p
    }
}

/// Frees an object inside one of our segments. Fast path (the class is
/// warm and its sheaf has room): a TLS load, the slab from the address, its
/// class heap (one load), the sheaf's length and capacity, the object-start
/// test, the block compared with the sheaf's top (a block freed twice in a
/// row), its tag stored into its second word, the push. Whatever slab the
/// block is in, whoever owns it, the block is not read: a free that read it
/// (as this one did for blocks of the active slab, to test for a free-list
/// link) waited on its line whenever the program had not touched it lately
/// (`larson`, whose freed blocks are cold). Every way out of a sheaf checks
/// the block (`sheaf`).
///
/// A full sheaf: `free_no_room`.
///
/// # Safety
/// `p` lies inside a mapped segment (`segment::contains(p)`).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    let heap = current();
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    // SAFETY: `heap` is this thread's heap or a static one; `heap_offset`
    // is a class's, or `NO_SHEAF_OFFSET`.
    let c = unsafe { (*heap).class_at(slab.heap_offset.get() as usize) };
    free_to_class(p, heap, slab, c)
}

/// `free` of a block whose class the caller has from the size it was
/// given (Rust's `dealloc`): `scaled`, the class times `CLASS_SCALE`, as
/// `size_class::scaled_class_by_table` gives it. Frees the block and
/// returns true if its slab's `heap_offset` is `scaled`; else does nothing
/// and returns false, for the caller's full check (`layout`): a block of
/// another class, or of a slab whose frees take the slow path (the heap
/// profile's, `NO_SHEAF_OFFSET`). The test is a compare on the line the
/// free reads anyway; the class heap then comes from `scaled`.
///
/// # Safety
/// As for `free`.
#[inline(always)]
pub unsafe fn free_of_class(p: *mut u8, scaled: usize) -> bool {
    let heap = current();
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    if slab.heap_offset.get() as usize != scaled {
        return false;
    }
    // SAFETY: `heap` is this thread's heap or a static one; `scaled` is
    // the slab's `heap_offset`, a class's.
    let c = unsafe { (*heap).class_at(scaled) };
    free_to_class(p, heap, slab, c);
    true
}

/// The free fast path from the class heap on: `c` is the class heap of
/// `heap` that `slab`, the slab of `p`, names.
#[inline(always)]
fn free_to_class(p: *mut u8, heap: *mut Heap, slab: &Slab, c: &ClassHeap) {
    // The class heap's address in a register of its own, as `opaque` makes
    // it: else LLVM forms it only for the push, with a `mov` and an `add`
    // (an instruction on every free: `ci/callgrind.sh`).
    // SAFETY: the same reference.
    let c = unsafe { &*(opaque(c as *const ClassHeap as usize) as *const ClassHeap) };
    let sheaf = c.sheaf();
    let len = sheaf.len();
    if len >= sheaf.cap() {
        // No sheaf (a cold class, a static heap, the slabs of the heap
        // profile, of medium blocks and of debug mode): the free into the
        // slab. A class heap without a sheaf has an empty one (its
        // capacity drops to 0 only while it is empty), a full sheaf holds
        // a block at least: the length tells them apart, so the capacity
        // is only compared, not kept in a register.
        invariant!((len == 0) == (sheaf.cap() == 0));
        if len == 0 {
            return free_to_slab(p, heap);
        }
        return free_no_room(p);
    }
    // A slot never carved (never handed out), or one of a FREE slab,
    // fails here: a block the sheaf could hand out is one its slab did.
    if HARDENING && !slab.is_object_start(p) {
        return stop_invalid_free(p);
    }
    // SAFETY: a heap with a sheaf is a thread's own, whose `secret` is set.
    let secret = unsafe { (*heap).secret.get() };
    if HARDENING && sheaf.top(len) == p {
        return stop_double_free(p);
    }
    if HARDENING {
        // SAFETY: `p` is a block the program gives up; every class with a
        // sheaf has blocks of 16 bytes or more.
        unsafe { set_sheaf_tag(secret, p) };
    }
    sheaf.push(len, p);
    c.ev.inc(Ev::FreeSheaf);
}

/// The free fast path found the sheaf full. The sheaf grows if the thread
/// missed since its last overflow (`sheaf_budget::overflowed`), and the
/// block goes on it; else the sheaf makes room (`sheaf::make_room`), then
/// the block is freed: into its slab if it is of one of the thread's own
/// slabs (a block of the active slab freed while another thread's sheaf
/// holds it is caught here, by the read), else onto the sheaf. Room is
/// made either way: a sheaf left full (own blocks sent to their slabs past
/// it) makes the fast path's full test mispredict whenever full and
/// not-full classes alternate (fastpath's batch phase, under cachegrind's
/// branch simulation: bench/report/HISTORY.md).
#[inline(never)]
fn free_no_room(p: *mut u8) {
    let heap = current();
    // SAFETY: as for `free`.
    let slab = unsafe { &*slab_of(p) };
    // SAFETY: as for `free`.
    let c = unsafe { (*heap).class_at(slab.heap_offset.get() as usize) };
    let class = slab.class.get() as usize;
    // SAFETY: a heap with a sheaf is a thread's own, live heap.
    let heap_ref = unsafe { &*heap };
    sheaf_budget::overflowed(heap_ref, c, class);
    if c.sheaf().len() < c.sheaf().cap() {
        // The sheaf grew: the thread reuses what it frees.
        // SAFETY: as for `free`; the sheaf has room.
        return unsafe { free(p) };
    }
    sheaf::make_room(heap_ref, c, class);
    // Relaxed: a hint; `free_to_slab` loads the owner again.
    if slab.owner.load(Ordering::Relaxed) == heap as usize {
        return free_to_slab(p, heap);
    }
    // SAFETY: as for `free`; the sheaf has room now.
    unsafe { free(p) }
}

/// A free into the block's slab: by its owner, after the
/// object-start and double-free tests (the block's first word read, and
/// its second if the class has a sheaf), onto the heap's detached list (the
/// active slab) or the slab's local list; else through the free slow path
/// (a jump: the common case of a class with no sheaf is
/// a block of another heap's slab, one CAS in `free_slow`).
#[inline(always)]
fn free_to_slab(p: *mut u8, heap: *mut Heap) {
    // SAFETY: as for `free`.
    let slab = unsafe { &*slab_of(p) };
    // Acquire: pairs with `give_back`'s Release (a plain load on x86-64).
    if slab.owner.load(Ordering::Acquire) != heap as usize {
        return free_slow(p, slab);
    }
    if HARDENING && !slab.is_object_start(p) {
        return stop_invalid_free(p);
    }
    // SAFETY: `heap` owns a slab, so it is a thread's own heap, whose
    // `secret` is set; `p` is an object slot of a slab we own.
    let secret = unsafe { (*heap).secret.get() };
    if HARDENING && unsafe { holds_link_with(secret, p) || slab.in_a_sheaf(secret, p) } {
        return free_suspicious(p, heap, slab);
    }
    // SAFETY: `heap` is this thread's live heap.
    let heap = unsafe { &*heap };
    crate::free::free_owned_unchecked(heap, slab, p);
}

/// `slab::invalid_free` for the free fast path, which reaches it with a
/// jump: a call to a function that never returns needs the stack aligned,
/// and so a push on the fast path itself (instructions on every free:
/// `ci/callgrind.sh`). So it returns, for a null `p`, which never reaches it,
/// and the compiler cannot take it for a function that never returns. A
/// block of a FREE slab (none counts as carved) is a double free if it is
/// a slot's start.
#[cold]
#[inline(never)]
fn stop_invalid_free(p: *mut u8) {
    if p.is_null() {
        return;
    }
    // SAFETY: as for `free`.
    let slab = unsafe { &*slab_of(p) };
    if slab.state() == State::Free && slab.is_slot_start(p) {
        double_free(p);
    }
    invalid_free(p)
}

/// `slab::double_free` for the free fast path, as `stop_invalid_free`.
#[cold]
#[inline(never)]
fn stop_double_free(p: *mut u8) {
    if !p.is_null() {
        double_free(p)
    }
}

/// `x`, as a value the compiler cannot see through. The end-of-list test on
/// the allocation fast path is then on the decoded link itself: seeing the
/// decoding, LLVM compares the stored word with the key instead, and keeps
/// both in registers for it (instructions on every allocation:
/// `ci/callgrind.sh`). An empty asm statement: no instruction.
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
