//! One slab: a `SLAB_BYTES` run of equal-sized objects, its descriptor, and
//! its life cycle. Every state change of a slab is a method of `Slab` (here,
//! or in `slab::remote` for the lock-free ones other threads race with),
//! asserts its precondition, and (in debug builds) checks the slab's counts
//! against its lists afterwards; the rest of the allocator moves slabs only
//! through these methods.
//!
//! The state is one record, the low two bits of the state word (`word`), because
//! that word is what other threads act on (an `owner` id says who owns an
//! OWNED slab, `on_partial` is the owner's private note of which list):
//!
//! - OWNED (`OWNED_TAG`, the bits above it a remote free list, the bits
//!   from `ADDRESS_BITS` up its length): a heap owns it (`owner`), or a
//!   freer that just claimed it from FULL (`owner` 0) until it hands it on.
//!   Only the owner touches `local_free`, `inuse`, the links, and writes
//!   `carved`; any other thread frees by pushing onto the remote list with
//!   one CAS, which adds to its length (`push_remote`; a sheaf's flush
//!   pushes a run of blocks linked already, `push_remote_run`), so that the
//!   owner knows the slab's free objects with one load (`remote_pending`).
//! - FULL (the word is 0): no owner, on no list, no free object. The first
//!   free claims it with one CAS (`try_claim_full`, no lock), then gives it
//!   back to the heap that filled it (`give_back`, onto that heap's
//!   `returned` stack) or, if that heap is closed, adopts it (`adopt`), or
//!   lists it on the node if the freer's class is cold or the free emptied
//!   it (`begin_listing`).
//! - LISTED (`LISTED_WORD`): on its node's partial list; every field is
//!   the node lock's. A freer that sees LISTED takes the lock and looks again.
//! - FREE (`FREE_WORD`): back in its segment; any free into it is invalid.
//! - SPAN (`SPAN_WORD`): one of the slabs of a medium block (`medium`), a
//!   span of its segment's slabs; the first holds the span's length
//!   (`span_slabs`). No object, no owner, no list: the segment lock's
//!   holder writes every field, and every free of its blocks reaches the
//!   free slow path (`heap_offset`), where `medium` takes it.
//!
//! Transitions: FREE -> OWNED (`init`); FREE -> LISTED (`init_listed`, a
//! slab shared by cold classes, node lock); OWNED -> FULL (`try_make_full`,
//! lock-free, Release); FULL -> OWNED (`try_claim_full`, Acquire, then
//! `give_back`, `adopt` or `begin_listing`); OWNED -> LISTED
//! (`begin_listing`, node lock); LISTED -> OWNED (`take_listed`, node
//! lock); LISTED -> FULL (`make_full_from_listed`, node lock, Release);
//! LISTED -> FREE (`make_free`, node lock); FREE -> SPAN (`init_span`,
//! segment lock); SPAN -> FREE (`end_span`, segment lock); FREE -> OWNED
//! and back for a slab of zero-size blocks (`init_zero`, `end_zero`, the
//! orphan heap's lock: `zero`). A LISTED slab
//! also hands out single objects under the node lock
//! (`take_listed_object`) and takes frees (`Node::free_listed`). The counts: `inuse` plus the objects on
//! `local_free` plus the never-carved ones make `objects`, whenever the
//! lists are held by one party (`check`).

use core::ptr;

use crate::freelist::{clear_link, link_is_sane, link_slots, pop, set_next_with, MAX_CARVE};
use crate::list::Linked;
use crate::options;
use crate::os;
use crate::size_class::{segment_of, Divisor, ADDRESS_BITS, DIVISORS, SLAB_BYTES, SLAB_SHIFT};
use crate::sync::{invariant, AtomicU32, AtomicUsize, Cell, Ordering};

/// The low bits of the state word that hold the state.
const TAG_MASK: usize = 3;
/// The word of a FULL slab (no tag, no list).
pub const FULL_WORD: usize = 0;
/// Tag of an OWNED slab; the rest of the word is its remote free list.
pub const OWNED_TAG: usize = 1;
/// The word of a LISTED slab.
pub const LISTED_WORD: usize = 2;
/// The word of a FREE slab.
pub const FREE_WORD: usize = 3;
/// The word of a SPAN slab: FULL's tag bits, but never FULL's word, so the
/// CAS that claims a FULL slab (`try_claim_full`) never matches it.
pub const SPAN_WORD: usize = 4;

/// A slab's state, as its state word records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Full,
    Owned,
    Listed,
    Free,
    Span,
}

impl State {
    #[inline(always)]
    pub fn of(word: usize) -> State {
        match word & TAG_MASK {
            OWNED_TAG => State::Owned,
            LISTED_WORD => State::Listed,
            FREE_WORD => State::Free,
            _ if word == FULL_WORD => State::Full,
            _ => State::Span,
        }
    }
}

/// The shift of an OWNED word's remote count: every block lies below
/// `1 << ADDRESS_BITS` (`segment::mark_mapped`), so the list's head leaves
/// the bits from there up free, and a slab's objects (at most
/// `SLAB_BYTES / 16`) fit in them.
const COUNT_SHIFT: usize = ADDRESS_BITS;
const _: () = assert!(SLAB_BYTES / 16 < 1 << (usize::BITS as usize - COUNT_SHIFT));
/// The bits of a state word that hold the remote list's head.
const LIST_MASK: usize = ((1 << COUNT_SHIFT) - 1) & !TAG_MASK;

/// The remote free list held in a state word.
#[inline(always)]
pub fn remote_list(word: usize) -> *mut u8 {
    (word & LIST_MASK) as *mut u8
}

/// The length of the remote free list held in an OWNED state word (0 in
/// any other state's).
#[inline(always)]
pub fn remote_count(word: usize) -> u32 {
    (word >> COUNT_SHIFT) as u32
}

/// The OWNED state word of a remote list of `count` blocks from `head`.
#[inline(always)]
fn owned_word(head: *mut u8, count: u32) -> usize {
    head as usize | OWNED_TAG | (count as usize) << COUNT_SHIFT
}

/// A heap's `returned` stack once its thread has exited: `give_back`
/// pushes nothing more on it.
pub const CLOSED: *mut Slab = 1 as *mut Slab;

/// What `push_remote` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    /// The object is on the slab's remote list.
    Pushed,
    /// The slab is the freer's own: free it as its owner.
    Mine,
    /// The slab is not OWNED (FULL or LISTED): another transition applies.
    NotOwned(State),
}

/// The descriptor of one slab, kept in its segment's header. 128 bytes: the
/// first line is the owner's, the second is written by remote freers.
#[repr(C, align(128))]
pub struct Slab {
    /// The owning heap's id while OWNED (0 while claimed from FULL), else 0.
    pub owner: AtomicUsize,
    /// Free objects held by whoever holds the slab (its owner, or the node
    /// lock while LISTED).
    pub local_free: Cell<*mut u8>,
    /// List links: the owner's partial list or returned stack (`next`), or
    /// the node list (both).
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
    /// Owner-private: whether this OWNED slab is on its owner's partial list.
    pub on_partial: Cell<bool>,
    /// `class` times `CLASS_SCALE`, the size of a heap's per-class part: the
    /// free fast path finds its class heap with one load, no shift
    /// (`NO_SHEAF_OFFSET` for the heap profile's slabs).
    pub heap_offset: Cell<u16>,
    /// The state (low bits) and the remote free list (encoded links).
    pub word: StateWord,
    /// While FULL: the id of the heap that filled it (0 if none), to which
    /// the first free hands the slab back. Written before the Release that
    /// made the slab FULL, read by the freer after its Acquire CAS.
    pub last_owner: Cell<usize>,
    /// While SPAN: the span's length in slabs if this is its first slab
    /// (the medium block's start), else 0. Kept when the span ends, until
    /// the slab serves a class again, so that a second free of the block
    /// is named a double free (`medium`).
    pub span_slabs: Cell<u32>,
    /// While a slab of zero-size blocks (`zero`): its live blocks, a bit
    /// each (their memory is inaccessible, so no free list can be kept in
    /// it); `inuse` stays 0. Written under the orphan heap's lock.
    pub zero_live: Cell<u64>,
}

/// The state word: the state in its low bits, the remote free list in the
/// rest. It opens the descriptor's second cache line (checked
/// below), away from the fields the owner writes on its fast paths.
#[repr(C)]
pub struct StateWord(pub AtomicUsize);

#[cfg(not(loom))]
const _: () = assert!(core::mem::offset_of!(Slab, word) == 64);
// Descriptors are packed 128 bytes apart: the headers of 4 MiB-aligned
// segments share cache sets, and twice that stride doubled their conflicts.
#[cfg(not(loom))]
const _: () = assert!(core::mem::size_of::<Slab>() == 128);

// SAFETY: the Cell fields are touched only by the slab's owner or under the
// node/segment lock, per the protocol above.
unsafe impl Sync for Slab {}

impl Linked for Slab {
    #[inline]
    fn next(&self) -> &Cell<*mut Slab> {
        &self.next
    }

    #[inline]
    fn prev(&self) -> &Cell<*mut Slab> {
        &self.prev
    }
}

impl Slab {
    /// A descriptor in the FREE state, as a new segment's slabs start.
    pub fn new_free() -> Slab {
        Slab {
            owner: AtomicUsize::new(0),
            local_free: Cell::new(ptr::null_mut()),
            next: Cell::new(ptr::null_mut()),
            prev: Cell::new(ptr::null_mut()),
            div: Cell::new(Divisor {
                inverse: 0,
                shift: 0,
            }),
            inuse: Cell::new(0),
            objects: Cell::new(0),
            carved: AtomicU32::new(0),
            size: Cell::new(0),
            class: Cell::new(0),
            on_partial: Cell::new(false),
            heap_offset: Cell::new(0),
            word: StateWord(AtomicUsize::new(FREE_WORD)),
            last_owner: Cell::new(0),
            span_slabs: Cell::new(0),
            zero_live: Cell::new(0),
        }
    }

    /// The slab's index in its segment: its descriptor's place in the
    /// segment's header, and its space's place in the segment.
    #[inline(always)]
    pub fn index(&self) -> usize {
        let at = self as *const Slab as usize;
        (at - segment_of(at)) / core::mem::size_of::<Slab>()
    }

    /// The first byte of the slab's objects.
    #[inline(always)]
    pub fn start(&self) -> *mut u8 {
        (segment_of(self as *const Slab as usize) + (self.index() << SLAB_SHIFT)) as *mut u8
    }

    /// The current state. Relaxed: for checks, and for callers that hold
    /// what orders the state they test (the owner, or the node lock).
    #[inline]
    pub fn state(&self) -> State {
        State::of(self.word.0.load(Ordering::Relaxed))
    }

    // -----------------------------------------------------------------
    // Transitions

    /// FREE -> OWNED by `owner`: prepares a slab fresh from its segment for
    /// `class`.
    pub fn init(&self, class: usize, owner: usize) {
        invariant!(self.state() == State::Free);
        // Relaxed: the slab came from the segment lock, nobody else knows it
        // yet. First, so that a forked child never lists a half-made slab
        // (`node::rebuild_in_child`).
        self.word.0.store(OWNED_TAG, Ordering::Relaxed);
        crate::sync::store_order_fence();
        self.prepare(class);
        self.owner.store(owner, Ordering::Relaxed);
        self.check();
    }

    /// FREE -> LISTED, node lock held: a slab fresh from its segment for
    /// `class`, to be shared by the threads whose class is cold (they take
    /// single objects from it, `take_listed_object`). The caller links it
    /// on the node list.
    pub fn init_listed(&self, class: usize) {
        invariant!(self.state() == State::Free);
        self.prepare(class);
        // The fields first: a forked child lists every LISTED slab
        // (`node::rebuild_in_child`), so it must never see a half-made one.
        crate::sync::store_order_fence();
        // Relaxed: the node lock we hold orders this for every thread that
        // will take or free objects of the slab (it is not linked yet).
        self.word.0.store(LISTED_WORD, Ordering::Relaxed);
        self.check();
    }

    /// The fields of a slab fresh for `class`: empty, nothing carved.
    fn prepare(&self, class: usize) {
        let size = crate::size_class::CLASS_BYTES[class];
        self.size.set(size);
        self.class.set(class as u8);
        self.heap_offset
            .set((class * crate::size_class::CLASS_SCALE) as u16);
        self.div.set(DIVISORS[class]);
        self.objects.set(crate::size_class::objects_per_slab(class));
        // Relaxed: nobody frees into the slab before a block is handed out
        // from it, which orders this store before the freer's load.
        self.carved.store(0, Ordering::Relaxed);
        self.inuse.set(0);
        self.local_free.set(ptr::null_mut());
        self.next.set(ptr::null_mut());
        self.prev.set(ptr::null_mut());
        self.on_partial.set(false);
        self.last_owner.set(0);
        self.span_slabs.set(0);
    }

    /// LISTED, node lock held: hands out one free object for a thread whose
    /// class is cold, from `local_free` or else carved (one object: only its
    /// page is touched). The slab stays LISTED; the caller counts the object
    /// on the node and, if it was the last free one, unlinks the slab and
    /// makes it FULL. Returns the object and whether it was just carved
    /// (never used). Its first word is cleared.
    pub fn take_listed_object(&self) -> (*mut u8, bool) {
        invariant!(self.state() == State::Listed);
        invariant!(self.inuse.get() < self.objects.get());
        let (p, fresh) = self.take_object();
        invariant!(!p.is_null());
        self.check();
        (p, fresh)
    }

    /// One free object for whoever holds the slab's lists (its owner, or
    /// the node lock while LISTED): the head of `local_free`, its link
    /// checked, or else one carved (only its page is touched). Counted in
    /// `inuse`, its link cleared. Returns the object, or null if the slab
    /// has none left, and whether it was just carved (never used: debug
    /// mode poisons it).
    pub fn take_object(&self) -> (*mut u8, bool) {
        let fresh = self.local_free.get().is_null();
        let p = if fresh {
            let (list, n) = self.carve(1);
            if n == 0 {
                return (ptr::null_mut(), false);
            }
            list
        } else {
            // SAFETY: `local_free` is the slab's free list, which the
            // caller holds; it is not empty.
            unsafe { pop(&self.local_free) }
        };
        // SAFETY: `p` is a free object of this slab, now the caller's.
        unsafe { clear_link(p) };
        self.inuse.set(self.inuse.get() + 1);
        (p, fresh)
    }

    /// Frees `p` onto `local_free` and counts it out of `inuse`, for
    /// whoever holds the slab's lists (its owner, or the node lock while
    /// LISTED). Returns whether the slab is empty now. Cost: the link's
    /// encoding, two loads, three stores, a decrement.
    ///
    /// # Safety
    /// `p` is a live object of this slab that the caller gives up, and the
    /// caller holds the slab's lists.
    #[inline(always)]
    pub unsafe fn free_object(&self, p: *mut u8) -> bool {
        // SAFETY: per the contract.
        unsafe { self.free_object_with(crate::freelist::secret(), p) }
    }

    /// `free_object` with the free-list secret given (the free fast path
    /// has its heap's copy in a register already).
    ///
    /// # Safety
    /// As for `free_object`; `secret` is `freelist::secret()`.
    #[inline(always)]
    pub unsafe fn free_object_with(&self, secret: usize, p: *mut u8) -> bool {
        // SAFETY: per the contract, a run of one.
        unsafe { self.free_run_with(secret, p, p, 1) }
    }

    /// `free_object_with` for a run of `n` blocks linked already, `head`
    /// to `tail` (a sheaf's flush): one splice onto `local_free`.
    ///
    /// # Safety
    /// As for `free_object`, for every block of the run.
    #[inline(always)]
    pub unsafe fn free_run_with(
        &self,
        secret: usize,
        head: *mut u8,
        tail: *mut u8,
        n: u32,
    ) -> bool {
        invariant!(self.inuse.get() >= n);
        // SAFETY: per the contract, `tail` is ours to write, and the list too.
        unsafe { set_next_with(secret, tail, self.local_free.get()) };
        self.local_free.set(head);
        let inuse = self.inuse.get() - n;
        self.inuse.set(inuse);
        inuse == 0
    }

    /// OWNED -> LISTED, node lock held: the owner gives the slab up (to be
    /// linked on the node list, made FULL or FREE by the caller) and gets
    /// its remote list and that list's length, which the caller merges.
    /// After this, freers see LISTED and queue on the node lock.
    pub fn begin_listing(&self) -> (*mut u8, u32) {
        invariant!(self.state() == State::Owned);
        self.owner.store(0, Ordering::Relaxed);
        self.on_partial.set(false);
        self.next.set(ptr::null_mut());
        // Acquire: sees the remote freers' links (their Release CAS).
        let word = self.word.0.swap(LISTED_WORD, Ordering::Acquire);
        (remote_list(word), remote_count(word))
    }

    /// OWNED -> LISTED with its lists merged, node lock held: the owner
    /// gives the slab up with `detached` (its heap's detached list if the
    /// slab was the active one, else null); the remote list, `detached` and
    /// `local_free` become one list, and `inuse` what is not on it. Returns
    /// the slab's free objects (carved or not) and whether remote frees had
    /// come in.
    pub fn list_with(&self, detached: *mut u8) -> (u32, RemoteFrees) {
        let bound = self.objects.get();
        let (remote, count) = self.begin_listing();
        // `inuse` counts what is not on `local_free` (see `inuse`), so of
        // the lists only the detached and the remote one are walked.
        let local = self.carved() - self.inuse.get();
        let (list, detached_n) = crate::freelist::list_join(detached, self.local_free.get(), bound);
        let (list, remote_n) = crate::freelist::list_join(remote, list, bound);
        invariant!(remote_n == count, self as *const Slab);
        let free = detached_n + local + remote_n + self.uncarved();
        self.local_free.set(list);
        self.inuse.set(bound - free);
        self.check();
        let frees = if remote.is_null() {
            RemoteFrees::NoneCame
        } else {
            RemoteFrees::Came
        };
        (free, frees)
    }

    /// LISTED -> OWNED by heap `owner`, node lock held (a refill from the
    /// node list; the caller has unlinked the slab).
    pub fn take_listed(&self, owner: usize) {
        invariant!(self.state() == State::Listed);
        self.check();
        self.owner.store(owner, Ordering::Relaxed);
        // Relaxed: freers that saw LISTED read the state word again under the node
        // lock, which we hold; new freers push onto the remote list.
        self.word.0.store(OWNED_TAG, Ordering::Relaxed);
    }

    /// LISTED -> FULL, node lock held, for a slab handed over with nothing
    /// free (unlinked).
    pub fn make_full_from_listed(&self) {
        invariant!(self.state() == State::Listed);
        invariant!(self.local_free.get().is_null() && self.uncarved() == 0);
        invariant!(self.inuse.get() == self.objects.get());
        self.last_owner.set(0);
        // Release: publishes the fields to the freer that claims the slab.
        self.word.0.store(FULL_WORD, Ordering::Release);
    }

    /// LISTED -> FREE, node lock held, for an empty unlinked slab that goes
    /// back to its segment.
    pub fn make_free(&self) {
        invariant!(self.state() == State::Listed);
        invariant!(self.inuse.get() == 0);
        self.check();
        // Nothing carved: the free fast path's slot test now refuses every
        // block of the slab, so no sheaf takes one (`stop_invalid_free`
        // tells a double free from an invalid pointer). Relaxed, as
        // `carved`'s other stores.
        self.carved.store(0, Ordering::Relaxed);
        // Relaxed: freers of its objects (all invalid now) read it after
        // taking the node lock we hold, or see FREE and stop.
        self.word.0.store(FREE_WORD, Ordering::Relaxed);
    }

    /// FREE -> SPAN, segment lock held: the slab joins a medium block's
    /// span, as its first slab (`slabs`, the span's length) or one after it
    /// (0). Its frees all take the free slow path (the class heap with no
    /// sheaf); no slot test passes (no object, nothing carved).
    pub fn init_span(&self, slabs: u32) {
        invariant!(self.state() == State::Free);
        invariant!(self.owner.load(Ordering::Relaxed) == 0 && self.carved() == 0);
        self.heap_offset
            .set(crate::size_class::NO_SHEAF_OFFSET as u16);
        self.objects.set(0);
        self.inuse.set(0);
        self.span_slabs.set(slabs);
        // Relaxed: the segment lock we hold orders this for the block's
        // free, which takes it too (`segment::free_span`); a pointer into
        // the span reaches another thread only through a hand-off that
        // follows.
        self.word.0.store(SPAN_WORD, Ordering::Relaxed);
    }

    /// SPAN -> FREE, segment lock held: the medium block is freed and the
    /// slab goes back to its segment. `span_slabs` stays (see there).
    pub fn end_span(&self) {
        invariant!(self.state() == State::Span);
        // Relaxed: as in `init_span`.
        self.word.0.store(FREE_WORD, Ordering::Relaxed);
    }

    /// Whether `p` is the start of an object slot of this slab, carved or
    /// not (for a FREE slab: a block it once held, so a double free).
    pub fn is_slot_start(&self, p: *mut u8) -> bool {
        let offset = (p as usize & (SLAB_BYTES - 1)) as u32;
        self.div.get().is_slot_below(offset, self.objects.get())
    }

    /// Whether `p`, a slot of this slab, waits in a sheaf: its second word
    /// is its tag (`freelist::has_sheaf_tag`). A free of it is a double
    /// free.
    ///
    /// # Safety
    /// `p` is an object slot of this slab that the caller may read.
    #[inline(always)]
    pub unsafe fn in_a_sheaf(&self, secret: usize, p: *mut u8) -> bool {
        // SAFETY: per the contract; every slot is 16 bytes or more.
        unsafe { crate::freelist::has_sheaf_tag(secret, p) }
    }

    /// OWNED by a side heap (debug mode's or the heap profile's,
    /// `side_slabs`), just made: every free of its blocks must reach the
    /// free slow path, which hands them back to that heap's owner (`debug`,
    /// `prof::sample`), so the free fast path is sent to the class heap that
    /// never has a sheaf.
    pub fn keep_off_sheaves(&self) {
        invariant!(self.state() == State::Owned);
        self.heap_offset
            .set(crate::size_class::NO_SHEAF_OFFSET as u16);
    }

    /// Checks, in debug builds, that the slab's counts agree with its local
    /// list: `inuse` plus the free objects on `local_free` plus the
    /// uncarved ones make `objects`. The caller holds the slab's lists (it
    /// owns the slab, has claimed it, or holds the node lock).
    #[inline]
    pub fn check(&self) {
        if cfg!(debug_assertions) {
            let bound = self.objects.get();
            let free = crate::freelist::list_len(self.local_free.get(), bound);
            let slab = self as *const Slab;
            invariant!(self.inuse.get() + free + self.uncarved() == bound, slab);
            let owned = self.owner.load(Ordering::Relaxed) != 0;
            invariant!(!owned || self.state() == State::Owned, slab);
        }
    }

    // -----------------------------------------------------------------
    // Objects

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
    /// the last one's; off by default because of the locality it loses,
    /// bench/report/HISTORY.md). Returns the list's head and how many
    /// it carved. Touches only the carved objects' pages.
    pub fn carve(&self, max: u32) -> (*mut u8, u32) {
        let first = self.carved();
        let n = max.min(self.objects.get() - first).min(MAX_CARVE as u32);
        if n == 0 {
            return (ptr::null_mut(), 0);
        }
        let size = self.size.get() as usize;
        let base = self.start() as usize + first as usize * size;
        // SAFETY: the `n` slots from `base` are uncarved objects of this
        // slab, whose lists its caller holds.
        let list = unsafe { link_slots(base, size, n as usize, options::get().freelist_random) };
        // Relaxed: see `carved`; the objects it covers reach other threads
        // only through allocations, which order it before their frees.
        self.carved.store(first + n, Ordering::Relaxed);
        (list, n)
    }

    /// Objects not carved yet; they count as free.
    pub fn uncarved(&self) -> u32 {
        self.objects.get() - self.carved()
    }

    /// OWNED, by its owner, for the heap's detached list (the active slab's
    /// refill): the free objects it holds, its local list or else its remote
    /// list, which `inuse` then counts as handed out (`set_inuse_active`).
    /// Null if it holds none (uncarved objects aside).
    pub fn detach_free(&self) -> *mut u8 {
        let mut list = self.local_free.replace(ptr::null_mut());
        if list.is_null() {
            list = self.take_remote().0;
        }
        if !list.is_null() {
            self.set_inuse_active();
        }
        list
    }

    /// `inuse` of the active slab after a refill: everything carved is in
    /// use or on the heap's detached list.
    pub fn set_inuse_active(&self) {
        self.inuse.set(self.carved());
    }
}

/// Stops the process: `p` is not the start of a block this slab handed out.
#[cold]
#[inline(never)]
pub fn invalid_free(p: *mut u8) -> ! {
    os::fatal(
        "free of an invalid pointer (not the start of a block)",
        p as usize,
    )
}

/// Stops the process: `p` is already free.
#[cold]
#[inline(never)]
pub fn double_free(p: *mut u8) -> ! {
    os::fatal("double free", p as usize)
}

/// Whether a block being freed may be free already: its first word, read
/// before the free wrote into it, decodes to a valid link (`looks_free`).
/// A suspect block is searched for on its slab's lists, or stops the
/// process at once in a slab another heap owns, whose lists cannot be
/// walked (`Slab::push_remote`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Suspicion {
    /// Its first word decodes to a valid link: a double free, or data that
    /// looks like a link.
    DoubleFree,
    /// Its first word does not, or its caller checked the block already (a
    /// sheaf's flush).
    Clear,
}

/// Whether frees by other heaps had come into a slab its owner gives up
/// (`Slab::list_with`): their objects are cold, and the node lists the
/// slab at the tail (`node::place`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RemoteFrees {
    Came,
    NoneCame,
}

/// Whether `p`, a slot of a slab, holds in its first word a valid free-list
/// link: either it is free already or the program stored something that
/// looks like one. Reads `p`'s first word.
///
/// # Safety
/// `p` lies inside a mapped slab.
#[inline(always)]
pub unsafe fn looks_free(p: *mut u8) -> bool {
    // SAFETY: per the contract, the word is mapped and readable.
    link_is_sane(p, unsafe { crate::freelist::get_next(p) })
}

// By path: the model check (`tests/model`) builds this file by its path,
// where a plain `mod` would look beside it, not in `slab/`.
#[path = "slab/remote.rs"]
mod remote;
#[path = "slab/zero_size.rs"]
mod zero_size;
