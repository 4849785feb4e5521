//! Free lists: singly linked through the first word of each free object,
//! each link stored encoded as `next ^ SECRET ^ bswap(slot)`
//! (SLAB_FREELIST_HARDENED), so that a forged or overwritten link is
//! detected rather than followed; and the walks over such lists, which stop
//! the process on a corrupted one.

use core::cell::UnsafeCell;

use crate::os;
use crate::size_class::SLAB_BYTES;
use crate::sync::{Cell, OwnLines};

/// The hardening checks of the fast paths (link in slab, object start, double
/// free). Only `--cfg slubmalloc_bench_no_checks` turns them off, to measure them.
pub const HARDENING: bool = !cfg!(slubmalloc_bench_no_checks);

/// The free-list secret: random per process, written once by `init_secret`
/// before the first list exists and only read afterwards. A plain cell, not
/// an atomic, so that a path that decodes and encodes loads it once (the
/// fast paths read their heap's copy, `Heap::secret`).
struct Secret(UnsafeCell<usize>);

// SAFETY: the one write happens in the allocator's process init before any
// heap exists; every read follows, through that function's Release/Acquire on
// its INIT flag or through a lock taken after the list being read was made.
unsafe impl Sync for Secret {}

static SECRET: OwnLines<Secret> = OwnLines(Secret(UnsafeCell::new(0)));

/// Called once per process, before any free list is written.
pub fn init_secret() {
    // SAFETY: see `Secret`: no other thread reads or writes it yet.
    unsafe { *SECRET.0 .0.get() = os::random_u64() as usize };
}

#[inline(always)]
pub fn secret() -> usize {
    // SAFETY: see `Secret`: written once before any reader.
    unsafe { *SECRET.0 .0.get() }
}

/// The encoded form of the link `slot -> next` under `secret` (the global
/// one, or a fast path's copy, `Heap::secret`); also its own inverse.
/// Cost: bswap and two xors.
#[inline(always)]
pub fn encode_with(secret: usize, next: *mut u8, slot: *mut u8) -> usize {
    (slot as usize).swap_bytes() ^ secret ^ next as usize
}

/// Writes the link `obj -> next`.
///
/// # Safety
/// `obj` is a free object of at least 8 bytes that the caller may write.
#[inline(always)]
pub unsafe fn set_next(obj: *mut u8, next: *mut u8) {
    // SAFETY: per the contract.
    unsafe { set_next_with(secret(), obj, next) };
}

/// `set_next` with the secret given.
///
/// # Safety
/// As for `set_next`.
#[inline(always)]
pub unsafe fn set_next_with(secret: usize, obj: *mut u8, next: *mut u8) {
    // SAFETY: per the contract.
    unsafe { store_link_word(obj, encode_with(secret, next, obj)) };
}

/// Reads the link stored in `obj`.
///
/// # Safety
/// `obj` is a free object of at least 8 bytes that the caller may read.
#[inline(always)]
pub unsafe fn get_next(obj: *mut u8) -> *mut u8 {
    // SAFETY: per the contract.
    unsafe { get_next_with(secret(), obj) }
}

/// `get_next` with the secret given.
///
/// # Safety
/// As for `get_next`.
#[inline(always)]
pub unsafe fn get_next_with(secret: usize, obj: *mut u8) -> *mut u8 {
    // SAFETY: per the contract.
    encode_with(secret, unsafe { load_link_word(obj) } as *mut u8, obj) as *mut u8
}

/// The tag a block carries in its second word while it waits in a sheaf
/// (`sheaf`): keyed by the secret and the block's address, so that no
/// value a program stores is one (short of reading the allocator's
/// memory). It is the word an end-of-list link would be in the first word
/// (`encode_with(secret, null, obj)`), which the checks of a block leaving
/// a sheaf compute anyway: in the second word it is no link. Cost: bswap
/// and an xor.
#[inline(always)]
pub fn sheaf_tag(secret: usize, obj: *mut u8) -> usize {
    encode_with(secret, core::ptr::null_mut(), obj)
}

/// Writes `obj`'s sheaf tag (a free into a sheaf: a store, no load).
///
/// # Safety
/// `obj` is a block of at least 16 bytes that the caller gives up.
#[inline(always)]
pub unsafe fn set_sheaf_tag(secret: usize, obj: *mut u8) {
    // SAFETY: per the contract, the second word is the block's.
    unsafe { obj.cast::<usize>().add(1).write(sheaf_tag(secret, obj)) };
}

/// Whether `obj` carries its sheaf tag: it waits in a sheaf, freed
/// already (a double-free test beside `holds_link_with`; `Slab::in_a_sheaf`).
///
/// # Safety
/// `obj` is an object slot of at least 16 bytes that the caller may read.
#[inline(always)]
pub unsafe fn has_sheaf_tag(secret: usize, obj: *mut u8) -> bool {
    // SAFETY: per the contract, the second word is the slot's.
    unsafe { obj.cast::<usize>().add(1).read() == sheaf_tag(secret, obj) }
}

/// Whether `obj`'s first word decodes to a valid link (it is free on a
/// list, or the program stored something that looks like one), in
/// `may_be_free`'s two stages: its upper half first (the program's last
/// store into the block may be a narrower one), then `link_is_sane`.
///
/// # Safety
/// `obj` is an object slot of at least 8 bytes that the caller may read.
#[inline(always)]
pub unsafe fn holds_link_with(secret: usize, obj: *mut u8) -> bool {
    // SAFETY: per the contract.
    unsafe { may_be_free(secret, obj) && link_is_sane(obj, get_next_with(secret, obj)) }
}

/// What a block leaving a sheaf holds, as `take_sheaf_block` finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SheafBlock {
    /// Its tag, and no free-list link: it was freed once, and since.
    Tagged,
    /// No tag: it left a sheaf already (a double free, the copy that was
    /// taken cleared it) or the program wrote it after freeing it.
    Untagged,
    /// A free-list link in its first word: it was on a slab's free list
    /// when it was freed again (a double free).
    Linked,
}

/// Checks a block leaving a sheaf (handed out, flushed to its slab, or
/// looked at before the process exits) and clears its tag. Cost: two loads
/// from one line, bswap, four xors, two compares, a store (and the full
/// link test for one word of random data in 2^17).
///
/// # Safety
/// `obj` is a block of at least 16 bytes that a sheaf held.
#[inline(always)]
pub unsafe fn take_sheaf_block(secret: usize, obj: *mut u8) -> SheafBlock {
    let tag = obj.cast::<usize>().wrapping_add(1);
    // SAFETY: per the contract, the second word is the block's.
    if unsafe { tag.read() } != sheaf_tag(secret, obj) {
        return SheafBlock::Untagged;
    }
    // SAFETY: as above.
    unsafe { tag.write(0) };
    // SAFETY: as above.
    if unsafe { holds_link_with(secret, obj) } {
        return SheafBlock::Linked;
    }
    SheafBlock::Tagged
}

/// Clears `obj`'s link, as every path that hands an object out does: a
/// stale link would look like a free block to `free`'s double-free test.
///
/// # Safety
/// `obj` is an object of at least 8 bytes that the caller may write.
#[inline(always)]
pub unsafe fn clear_link(obj: *mut u8) {
    // SAFETY: per the contract.
    unsafe { store_link_word(obj, 0) };
}

/// The largest carve batch (two pages of 16-byte objects).
pub const MAX_CARVE: usize = 512;

/// 64 random-looking bits for a carve: a Weyl sequence from the secret,
/// mixed (splitmix64). Unpredictable without the secret; not cryptographic.
fn carve_random() -> u64 {
    // A plain atomic, not `sync`'s: a counter no protocol depends on.
    static WEYL: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    let w = WEYL.fetch_add(0x9e37_79b9_7f4a_7c15, core::sync::atomic::Ordering::Relaxed);
    let mut z = w ^ secret() as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Links the `n` slots of `size` bytes from `base` into a fresh list, in
/// address order, or in a random order if `random` (a slab's carve,
/// `Slab::carve`); returns its head. Touches only those slots' pages.
///
/// # Safety
/// The slots are free memory of one slab, the caller's to link; `n` is at
/// least 1 and at most `MAX_CARVE`.
pub unsafe fn link_slots(base: usize, size: usize, n: usize, random: bool) -> *mut u8 {
    let mut next = core::ptr::null_mut();
    let mut link = |index: usize| {
        let obj = (base + index * size) as *mut u8;
        // SAFETY: per the contract, `obj` is a slot the caller links.
        unsafe { set_next(obj, next) };
        next = obj;
    };
    if random {
        // Fisher-Yates over the batch; carve batches are at most
        // `MAX_CARVE` objects, so the indices fit on the stack.
        let mut order = [0u16; MAX_CARVE];
        for (i, slot) in order[..n].iter_mut().enumerate() {
            *slot = i as u16;
        }
        let mut r = carve_random();
        for i in (1..n).rev() {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let j = (((r >> 32) * (i as u64 + 1)) >> 32) as usize;
            order.swap(i, j);
        }
        order[..n].iter().for_each(|&i| link(i as usize));
    } else {
        (0..n).rev().for_each(link);
    }
    next
}

/// Takes the first object off the non-empty free list headed by `head`,
/// following its link only if it is sane (a corrupted one stops the
/// process). The caller clears the object's link before handing it out
/// (`clear_link`). The allocation fast path has its own pop, tuned to the
/// instruction (`fastpath::alloc_scaled`).
///
/// # Safety
/// `head` heads a non-empty free list that the caller holds (it owns the
/// slab, or holds the lock its lists are under).
#[inline]
pub unsafe fn pop(head: &Cell<*mut u8>) -> *mut u8 {
    let obj = head.get();
    // SAFETY: per the contract, `obj` is a free object the caller holds.
    let next = unsafe { get_next(obj) };
    if !link_is_sane(obj, next) {
        corrupted_link(obj);
    }
    head.set(next);
    obj
}

/// The first word of `obj`, where a free object keeps its link. Under the
/// model check (`--cfg loom`, tests/model) the word lives in a cell of the
/// model's (`links`) instead, which loom tracks as it does the slab's
/// fields: a link read without a happens-before edge from its write (a
/// freer's push that the owner takes without synchronising) is reported as
/// a data race. Out of the model, a plain load.
///
/// # Safety
/// `obj` is an object of at least 8 bytes, 8-byte aligned, that the caller
/// may read.
#[inline(always)]
unsafe fn load_link_word(obj: *mut u8) -> usize {
    #[cfg(not(loom))]
    {
        // SAFETY: per the contract.
        unsafe { *(obj as *const usize) }
    }
    #[cfg(loom)]
    {
        crate::links::load(obj as usize)
    }
}

/// Stores `word` as `obj`'s first word (`load_link_word`).
///
/// # Safety
/// `obj` is an object of at least 8 bytes, 8-byte aligned, that the caller
/// may write.
#[inline(always)]
unsafe fn store_link_word(obj: *mut u8, word: usize) {
    #[cfg(not(loom))]
    {
        // SAFETY: per the contract.
        unsafe { *(obj as *mut usize) = word };
    }
    #[cfg(loom)]
    {
        crate::links::store(obj as usize, word);
    }
}

/// The double-free test's first stage, on the free fast path into the
/// active slab and on a block leaving a sheaf: whether the
/// upper half of `obj`'s first word may be that of a valid link. It reads
/// only that half, bytes 4..8 on a little-endian machine, which a program's
/// last store into the block (a byte, a 32-bit field at its start) usually
/// leaves alone: a load of the whole word right after such a narrower store
/// waits until the store reaches the cache (a loop of malloc(32), a byte
/// stored, free, ran a fifth slower with a whole-word load). A valid link decodes to null or to an address in the slab, so its
/// upper half decodes to 0 or to `obj`'s, both below `LINK_UPPER_LIMIT`
/// (segments lie below 2^47): one compare tests for both. A block that
/// passes takes the full test, `link_is_sane`; of random data, one word in
/// 2^17 passes this stage. Cost: a copy, a shift, an xor with the loaded
/// half, a compare.
///
/// # Safety
/// `obj` is an object slot of at least 8 bytes that the caller may read.
#[inline(always)]
pub unsafe fn may_be_free(secret: usize, obj: *mut u8) -> bool {
    #[cfg(not(loom))]
    let stored = {
        let upper = if cfg!(target_endian = "little") { 4 } else { 0 };
        // SAFETY: per the contract, bytes 0..8 of `obj` are readable.
        unsafe { (obj.add(upper) as *const u32).read() }
    };
    // The model keeps links in its cells (`load_link_word`).
    #[cfg(loom)]
    // SAFETY: per the contract.
    let stored = (unsafe { load_link_word(obj) } >> 32) as u32;
    let link = stored ^ (encode_with(secret, core::ptr::null_mut(), obj) >> 32) as u32;
    link < LINK_UPPER_LIMIT
}

/// Above the upper half of any address in a segment (`may_be_free`).
const LINK_UPPER_LIMIT: u32 = 1 << (crate::size_class::ADDRESS_BITS - 32);

/// Whether `next`, read from free object `obj`, may be followed: null or in
/// the same slab. Cost: xor, cmp (plus a null test when leaving the slab).
#[inline(always)]
pub fn link_is_sane(obj: *mut u8, next: *mut u8) -> bool {
    (obj as usize ^ next as usize) < SLAB_BYTES || next.is_null()
}

/// Length of a free list, stopping the process if it is longer than the slab
/// could hold or leaves the slab (a corrupted list).
pub fn list_len(mut obj: *mut u8, bound: u32) -> u32 {
    let mut n = 0;
    while !obj.is_null() {
        n += 1;
        // SAFETY: `obj` is on a free list of a slab we own or hold the lock of.
        let next = unsafe { get_next(obj) };
        if n > bound || !link_is_sane(obj, next) {
            os::fatal(
                "free list corrupted (write after free or overflow?)",
                obj as usize,
            );
        }
        obj = next;
    }
    n
}

/// Whether `target` is on the free list starting at `obj`.
pub fn list_contains(mut obj: *mut u8, target: *mut u8, bound: u32) -> bool {
    let mut n = 0;
    while !obj.is_null() && n <= bound {
        if obj == target {
            return true;
        }
        n += 1;
        // SAFETY: as in `list_len`.
        let next = unsafe { get_next(obj) };
        if !link_is_sane(obj, next) {
            return false;
        }
        obj = next;
    }
    false
}

/// Appends list `a` in front of list `b`; returns the joined head and the
/// length of `a`, which it walks (stopping the process if it is corrupted).
pub fn list_join(a: *mut u8, b: *mut u8, bound: u32) -> (*mut u8, u32) {
    if a.is_null() {
        return (b, 0);
    }
    let mut tail = a;
    let mut n = 0;
    loop {
        // SAFETY: as in `list_len`.
        let next = unsafe { get_next(tail) };
        n += 1;
        if n > bound || !link_is_sane(tail, next) {
            os::fatal(
                "free list corrupted (write after free or overflow?)",
                tail as usize,
            );
        }
        if next.is_null() {
            break;
        }
        tail = next;
    }
    // SAFETY: `tail` is the last object of list `a`, free and ours.
    unsafe { set_next(tail, b) };
    (a, n)
}

/// Stops the process: the free list link stored in `obj` was overwritten.
#[cold]
#[inline(never)]
pub fn corrupted_link(obj: *mut u8) -> ! {
    os::fatal(
        "corrupted free list: a freed block was overwritten (write after free or overflow)",
        obj as usize,
    )
}

/// Starts loading the line at `p`, the next block of a list that a pop
/// will read (any address: a prefetch never faults).
#[inline(always)]
pub fn prefetch(p: *mut u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and never faults.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The first stage of the double-free test lets every valid link
    /// through (a null one, one within the slab), and stops what a program
    /// leaves in a live block's first word: the zero a malloc stores, a
    /// byte, a small integer.
    #[test]
    fn the_first_stage_passes_every_link_and_stops_live_data() {
        let secret = 0x5d1c_37a9_e4b2_0f61;
        let mut words = [0u64; 8];
        let obj = words.as_mut_ptr().cast::<u8>();
        let slab = obj as usize & !(SLAB_BYTES - 1);
        for next in [0, slab, slab + 64, slab + SLAB_BYTES - 8] {
            let next = next as *mut u8;
            // SAFETY: `obj` points to 64 writable, 8-aligned bytes.
            unsafe {
                set_next_with(secret, obj, next);
                assert!(may_be_free(secret, obj), "link to {next:p}");
                assert!(link_is_sane(obj, get_next_with(secret, obj)));
            }
        }
        for live in [0u64, 0x41, 0x2a_0000_0001, u64::MAX] {
            words[0] = live;
            // SAFETY: as above.
            assert!(!unsafe { may_be_free(secret, obj) }, "live word {live:#x}");
        }
        // Whatever the slab's address, its links pass: the upper halves of
        // every address a segment may have.
        for upper in [0, 1, LINK_UPPER_LIMIT - 1] {
            let next = ((upper as usize) << 32 | 0x40) as *mut u8;
            words[0] = encode_with(secret, next, obj) as u64;
            // SAFETY: as above.
            assert!(unsafe { may_be_free(secret, obj) }, "link to {next:p}");
        }
    }
}
