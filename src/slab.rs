//! One slab: a `SLAB_BYTES` run of equal-sized objects and its descriptor.
//!
//! Invariants (the protocol every other module follows). The `remote` word
//! carries the state that other threads act on:
//! - OWNED (`remote` has `REMOTE_OWNED`, the rest is the remote free list):
//!   one thread heap (`owner`) owns the slab. Only the owner touches
//!   `local_free`, `next` and writes `carved`; any other thread frees by
//!   pushing onto `remote` with one CAS (after reading `carved`, see there).
//! - FULL (`remote == 0`): nobody owns it, it is on no list and has no free
//!   object. The first free claims it with one CAS from 0 to `REMOTE_OWNED`:
//!   no lock. Alone with the fields until it hands the slab on, it puts its
//!   object on `local_free`, then gives the slab back to `last_owner` (pushed
//!   on that heap's `returned` stack, Release), or adopts it onto its own
//!   partial list (SLUB's `put_cpu_partial`) if that heap is gone.
//! - LISTED (`remote == REMOTE_LISTED`): on the node partial list, nobody owns
//!   it; every field is protected by the node lock of its class.
//! - FREE: back in its segment (`remote` stays `REMOTE_LISTED`).
//! - OWNED -> FULL: the owner writes the fields, then CASes `remote` to 0
//!   (Release); the adopter's Acquire CAS sees those writes. OWNED -> LISTED
//!   and LISTED -> OWNED happen under the node lock; a freer that saw
//!   LISTED re-reads `remote` after taking the lock.
//!
//! Free lists are singly linked through the first word of each free object,
//! stored encoded as `next ^ SECRET ^ bswap(slot)` (SLAB_FREELIST_HARDENED), so
//! a forged or overwritten link is detected rather than followed.

use core::cell::{Cell, UnsafeCell};
use core::ptr;

use crate::os;
use crate::segment::{SLAB_BYTES, SLAB_SHIFT};
use crate::size_class::{Divisor, DIVISORS};
use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use crate::thread_heap::Heap;

pub const FREE: u8 = 0;
pub const OWNED: u8 = 1;
pub const LISTED: u8 = 2;
pub const FULL: u8 = 3;
/// OWNED and on its owner's thread partial list.
pub const PARTIAL: u8 = 4;

/// Set in `remote` while a thread heap owns the slab.
pub const REMOTE_OWNED: usize = 1;
/// The value of `remote` while the slab is on the node list (or free).
pub const REMOTE_LISTED: usize = 2;

/// The remote free list held in a `remote` word.
#[inline(always)]
pub fn remote_list(word: usize) -> *mut u8 {
    (word & !(REMOTE_OWNED | REMOTE_LISTED)) as *mut u8
}

/// The free-list secret: random per process, written once by `init_secret`
/// before the first list exists and only read afterwards. A plain cell, not
/// an atomic, so that a fast path that decodes and encodes loads it once.
struct Secret(UnsafeCell<usize>);

// SAFETY: the one write happens in `thread_heap::init_process` before any
// heap exists; every read follows, through that function's Release/Acquire on
// its INIT flag or through a lock taken after the list being read was made.
unsafe impl Sync for Secret {}

static SECRET: Secret = Secret(UnsafeCell::new(0));

/// Called once per process, before any free list is written.
pub fn init_secret() {
    // SAFETY: see `Secret`: no other thread reads or writes it yet.
    unsafe { *SECRET.0.get() = os::random_u64() as usize };
}

/// The largest carve batch (a page of 8-byte objects).
const MAX_RANDOM_CARVE: usize = 512;

/// 64 random-looking bits for a carve: a Weyl sequence from the secret,
/// mixed (splitmix64). Unpredictable without the secret; not cryptographic.
fn carve_random() -> u64 {
    static WEYL: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);
    let w = WEYL.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    let mut z = w ^ secret() as u64;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[inline(always)]
pub fn secret() -> usize {
    // SAFETY: see `Secret`: written once before any reader.
    unsafe { *SECRET.0.get() }
}

/// The encoded form of the link `slot -> next`. Cost: bswap and two xors.
#[inline(always)]
pub fn encode(next: *mut u8, slot: *mut u8) -> usize {
    (slot as usize).swap_bytes() ^ secret() ^ next as usize
}

/// Inverse of `encode`.
#[inline(always)]
pub fn decode(stored: usize, slot: *mut u8) -> *mut u8 {
    ((slot as usize).swap_bytes() ^ secret() ^ stored) as *mut u8
}

/// Writes the link `obj -> next`.
///
/// # Safety
/// `obj` is a free object of at least 8 bytes that the caller may write.
#[inline(always)]
pub unsafe fn set_next(obj: *mut u8, next: *mut u8) {
    // SAFETY: per the contract, `obj` is writable and 8-byte aligned.
    unsafe { *(obj as *mut usize) = encode(next, obj) };
}

/// Reads the link stored in `obj`.
///
/// # Safety
/// `obj` is a free object of at least 8 bytes that the caller may read.
#[inline(always)]
pub unsafe fn get_next(obj: *mut u8) -> *mut u8 {
    // SAFETY: per the contract, `obj` is readable and 8-byte aligned.
    decode(unsafe { *(obj as *const usize) }, obj)
}

/// Whether `next`, read from free object `obj`, may be followed: null or in
/// the same slab. Cost: xor, cmp (plus a null test when leaving the slab).
#[inline(always)]
pub fn link_is_sane(obj: *mut u8, next: *mut u8) -> bool {
    (obj as usize ^ next as usize) < SLAB_BYTES || next.is_null()
}

/// The descriptor of one slab, kept in its segment's header. 128 bytes: the
/// first line is the owner's, the second is written by remote freers.
#[repr(C, align(128))]
pub struct Slab {
    /// Owning heap when `state == OWNED`, else null.
    pub owner: AtomicPtr<Heap>,
    /// Free objects owned by whoever owns the slab (heap or node lock).
    pub local_free: Cell<*mut u8>,
    /// List links: thread partial list (`next` only) or node list (both).
    pub next: Cell<*mut Slab>,
    pub prev: Cell<*mut Slab>,
    /// The test for "is this the start of an object slot" (with `carved`).
    pub div: Cell<Divisor>,
    /// Objects not free in the slab. Exact when not owned; when owned it
    /// also counts objects on the remote list and, for the active slab, on
    /// the heap's detached list, so that a local free that brings it to 0
    /// has just emptied a slab on the thread partial list.
    pub inuse: Cell<u32>,
    /// Objects in the slab.
    pub objects: Cell<u32>,
    /// Slots carved into free lists so far, from the start of the slab (the
    /// rest are untouched, still zero pages, and were never handed out). It
    /// only grows while the slab serves its class. Written by the owner only;
    /// read by every free, to refuse a slot never carved. Atomic because a
    /// remote freer reads it while the owner may carve: Relaxed suffices, as
    /// a freer's block was carved before the allocation that returned it,
    /// which happened before the free, so it reads at least that count.
    /// In the first cache line, next to `div`: no extra line on the free
    /// fast path.
    pub carved: AtomicU32,
    pub size: Cell<u32>,
    pub class: Cell<u8>,
    pub state: Cell<u8>,
    /// `class` times `CLASS_SCALE`, the size of a heap's per-class part: the
    /// free fast path finds its class heap with one load, no shift.
    pub heap_offset: Cell<u16>,
    /// Remote free list (encoded links) and the state bits, see above.
    pub remote: Remote,
    /// While FULL: the heap that filled it (null if none), to which the
    /// first free hands the slab back. Written before the Release that made
    /// the slab FULL, read by the freer after its Acquire CAS.
    pub last_owner: Cell<*mut Heap>,
}

/// The `remote` word. It opens the descriptor's second cache line (checked
/// below), away from the fields the owner writes on its fast paths.
#[repr(C)]
pub struct Remote(pub AtomicUsize);

const _: () = assert!(core::mem::offset_of!(Slab, remote) == 64);
// Descriptors are packed 128 bytes apart: the headers of 4 MiB-aligned
// segments share cache sets, and twice that stride doubled their conflicts.
const _: () = assert!(core::mem::size_of::<Slab>() == 128);

// SAFETY: the Cell fields are touched only by the slab's owner or under the
// node/segment lock, per the protocol above.
unsafe impl Sync for Slab {}

impl Slab {
    /// The first byte of the slab's objects.
    #[inline(always)]
    pub fn start(&self) -> *mut u8 {
        let seg = crate::segment::segment_of(self as *const Slab as usize);
        let index = (self as *const Slab as usize - seg) / core::mem::size_of::<Slab>();
        (seg + (index << SLAB_SHIFT)) as *mut u8
    }

    /// Prepares a slab fresh from its segment for `class`, owned by `heap`.
    pub fn init(&self, class: usize, heap: *mut Heap) {
        // Relaxed: the slab came from the segment lock, nobody else knows it
        // yet. First, so that a forked child never lists a half-made slab
        // (`node::rebuild_in_child`).
        self.remote.0.store(REMOTE_OWNED, Ordering::Relaxed);
        crate::sync::store_order_fence();
        let size = crate::size_class::CLASS_BYTES[class];
        self.size.set(size);
        self.class.set(class as u8);
        self.heap_offset
            .set((class * crate::size_class::CLASS_SCALE) as u16);
        self.div.set(DIVISORS[class]);
        self.objects.set(crate::size_class::objects_per_slab(class));
        // Relaxed: nobody frees into the slab before the publication below.
        self.carved.store(0, Ordering::Relaxed);
        self.inuse.set(0);
        self.local_free.set(ptr::null_mut());
        self.next.set(ptr::null_mut());
        self.prev.set(ptr::null_mut());
        self.state.set(OWNED);
        self.owner.store(heap, Ordering::Relaxed);
    }

    /// Whether `p` is the start of an object slot of this slab that has been
    /// carved, so could have been handed out. Cost: two loads from the
    /// descriptor's first line, mul, ror, cmp.
    #[inline(always)]
    pub fn is_object_start(&self, p: *mut u8) -> bool {
        let offset = (p as usize & (SLAB_BYTES - 1)) as u32;
        // Relaxed: see `carved`.
        let carved = self.carved.load(Ordering::Relaxed);
        self.div.get().is_slot_below(offset, carved)
    }

    /// `is_object_start` for the thread that owns the slab (the free fast
    /// path): `carved` is read with a plain load, which the compiler folds
    /// into the compare (a Relaxed atomic load it keeps as a separate `mov`,
    /// one instruction more per free, measured with ci/callgrind.sh).
    ///
    /// # Safety
    /// The calling thread owns the slab, so it is the only writer of
    /// `carved`; other threads only read it (atomically), which is no race.
    #[inline(always)]
    pub unsafe fn is_object_start_owned(&self, p: *mut u8) -> bool {
        let offset = (p as usize & (SLAB_BYTES - 1)) as u32;
        // SAFETY: per the contract, no other thread writes `carved` now.
        let carved = unsafe { *self.carved.as_ptr() };
        self.div.get().is_slot_below(offset, carved)
    }

    /// Slots carved so far (the owner's or the lock holder's view).
    #[inline(always)]
    pub fn carved(&self) -> u32 {
        // Relaxed: read by the thread that writes it, or under the lock
        // that orders the writes.
        self.carved.load(Ordering::Relaxed)
    }

    /// Carves up to `max` untouched objects into a fresh list, in address
    /// order, or in a random order with `SLUBMALLOC_FREELIST_RANDOM=1`
    /// (SLAB_FREELIST_RANDOM: the next block's address cannot be guessed from
    /// the last one's; off by default because the lost locality cost 30% of
    /// python3's time, see the README). Returns the list's head and how many
    /// it carved. Touches only the carved objects' pages.
    pub fn carve(&self, max: u32) -> (*mut u8, u32) {
        let first = self.carved();
        let n = max
            .min(self.objects.get() - first)
            .min(MAX_RANDOM_CARVE as u32);
        if n == 0 {
            return (ptr::null_mut(), 0);
        }
        let size = self.size.get() as usize;
        let base = self.start() as usize + first as usize * size;
        let mut next = ptr::null_mut();
        let mut link = |index: usize| {
            let obj = (base + index * size) as *mut u8;
            // SAFETY: `obj` is an uncarved object inside this slab's mapping.
            unsafe { set_next(obj, next) };
            next = obj;
        };
        if crate::options::get().freelist_random {
            // Fisher-Yates over the batch; carve batches are at most a page
            // of 8-byte objects, so the indices fit on the stack.
            let mut order = [0u16; MAX_RANDOM_CARVE];
            let n = n as usize;
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
            (0..n as usize).rev().for_each(link);
        }
        // Relaxed: see `carved`; the objects it covers reach other threads
        // only through allocations, which order it before their frees.
        self.carved.store(first + n, Ordering::Relaxed);
        (next, n)
    }

    /// Objects not carved yet; they count as free.
    pub fn uncarved(&self) -> u32 {
        self.objects.get() - self.carved()
    }

    /// `inuse` of the active slab after a refill: everything carved is in
    /// use or on the heap's detached list.
    pub fn set_inuse_active(&self) {
        self.inuse.set(self.carved());
    }
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
