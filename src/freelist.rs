//! Free lists: singly linked through the first word of each free object,
//! each link stored encoded as `next ^ SECRET ^ bswap(slot)`
//! (SLAB_FREELIST_HARDENED), so that a forged or overwritten link is
//! detected rather than followed; and the walks over such lists, which stop
//! the process on a corrupted one.

use core::cell::UnsafeCell;

use crate::os;
use crate::size_class::SLAB_BYTES;
use crate::sync::OwnLines;

/// The hardening checks of the fast paths (link in slab, object start, double
/// free). Only `--cfg slubmalloc_bench_no_checks` turns them off, to measure them.
pub const CHECKS: bool = !cfg!(slubmalloc_bench_no_checks);

/// The free-list secret: random per process, written once by `init_secret`
/// before the first list exists and only read afterwards. A plain cell, not
/// an atomic, so that a fast path that decodes and encodes loads it once.
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
    // SAFETY: per the contract, `obj` is writable and 8-byte aligned.
    unsafe { *(obj as *mut usize) = encode_with(secret, next, obj) };
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
    // SAFETY: per the contract, `obj` is readable and 8-byte aligned.
    encode_with(secret, unsafe { *(obj as *const usize) } as *mut u8, obj) as *mut u8
}

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
