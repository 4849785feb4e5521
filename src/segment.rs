//! Segments: `SEGMENT_BYTES`-aligned mappings cut into `SLAB_BYTES` slabs.
//! The first slab's space holds the descriptors, so `slab_of(ptr)` is a mask,
//! a shift and an add: no lookup table, no header before any object.
//!
//! A byte map over the whole 47-bit address space (the segment map) answers
//! "is this pointer inside one of our segments?" for the C entry points.
//! Free slabs are purged (MADV_DONTNEED) after a delay, or at once when the
//! freed memory left resident passes the trim bound (`purge`); wholly empty
//! segments beyond a small cache are unmapped. The same deadline and bound
//! empty the large block cache. Lock order: node -> segments -> large.

use core::cell::UnsafeCell;
use core::ptr;

use crate::os;
use crate::purge;
use crate::size_class::ADDRESS_BITS;
use crate::slab::Slab;
use crate::sync::{invariant, store_order_fence, AtomicU64, AtomicU8, Locked, Ordering};

pub use crate::size_class::{
    segment_of, SEGMENT_BYTES, SEGMENT_SHIFT, SLABS_PER_SEGMENT, SLAB_BYTES, SLAB_SHIFT,
};
/// Slab 0 holds the segment header; the rest serve objects.
const ALL_SLABS: u64 = !1;
/// Wholly empty segments kept mapped (purged) for reuse.
const EMPTY_SEGMENTS_KEPT: usize = 1;

const MAP_ENTRIES: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT);
/// One byte per possible segment (nonzero: ours). 32 MiB of zero pages, only
/// the few touched ever become resident; a byte rather than a bit makes the
/// test in `contains` a single compare.
static MAP: SegmentMap = SegmentMap(UnsafeCell::new([0; MAP_ENTRIES]));

/// The segment map's bytes, read and written only as `AtomicU8`s (`entry`).
/// Declared as one cell of plain bytes, not as `[AtomicU8; MAP_ENTRIES]`:
/// the compiler evaluates a static's initialiser, and 32 Mi `AtomicU8`s,
/// each a struct with a cell inside, took 6.6-7.1 s of the 7.7 s it spent on
/// this crate (`-Z time-passes`: type_check_crate), in every clean build of
/// every crate that uses slubmalloc. A byte array takes 0.1 s.
#[repr(transparent)]
struct SegmentMap(UnsafeCell<[u8; MAP_ENTRIES]>);

// SAFETY: the bytes are only ever accessed atomically, through `entry`.
unsafe impl Sync for SegmentMap {}

impl SegmentMap {
    /// The entry of segment `region`; `region < MAP_ENTRIES`.
    #[inline(always)]
    fn entry(&self, region: usize) -> &AtomicU8 {
        invariant!(region < MAP_ENTRIES);
        // SAFETY: `region` is in bounds (both callers check), the byte lives as long as the
        // static, `AtomicU8` has the size and alignment of `u8`, and no
        // access to the map's bytes is anything but atomic.
        unsafe { AtomicU8::from_ptr(self.0.get().cast::<u8>().add(region)) }
    }
}

#[repr(C)]
pub struct Segment {
    slabs: [Slab; SLABS_PER_SEGMENT],
    /// Free slabs (bit i = slab i); bit 0 is never set.
    free_mask: u64,
    /// Free slabs whose pages may still be resident.
    dirty_mask: u64,
    next: *mut Segment,
    prev: *mut Segment,
}

const _: () = assert!(core::mem::size_of::<Segment>() <= SLAB_BYTES);

struct Segments {
    /// Every segment, for purging and the verification walk.
    all: *mut Segment,
    count: usize,
}

// SAFETY: the raw pointers are reached only under the SEGMENTS lock.
unsafe impl Send for Segments {}

static SEGMENTS: Locked<Segments> = Locked::new(Segments {
    all: ptr::null_mut(),
    count: 0,
});

/// Bytes of the free slabs whose pages may still be resident (every
/// segment's dirty bits), for the trim bound. Written under the SEGMENTS
/// lock (`set_dirty`), read without it.
static DIRTY_BYTES: AtomicU64 = AtomicU64::new(0);

/// Sets `DIRTY_BYTES`. SEGMENTS lock held.
fn set_dirty(bytes: u64) {
    // Relaxed: one writer at a time (the lock); the readers take a hint.
    DIRTY_BYTES.store(bytes, Ordering::Relaxed);
}

/// `DIRTY_BYTES` plus or minus one slab. SEGMENTS lock held.
fn dirty_slab(added: bool) {
    // Relaxed: see `set_dirty`.
    let d = DIRTY_BYTES.load(Ordering::Relaxed);
    set_dirty(if added {
        d + SLAB_BYTES as u64
    } else {
        d - SLAB_BYTES as u64
    });
}

/// The descriptor of the slab holding `p`, which must be inside a segment.
/// Cost: and, shift-and-mask, lea.
#[inline(always)]
pub fn slab_of(p: *mut u8) -> *mut Slab {
    let p = p as usize;
    let index = (p >> SLAB_SHIFT) & (SLABS_PER_SEGMENT - 1);
    (segment_of(p) + index * core::mem::size_of::<Slab>()) as *mut Slab
}

/// Whether `p` lies inside one of our segments. Cost: shift, bound check,
/// one byte compare.
#[inline(always)]
pub fn contains(p: *mut u8) -> bool {
    let region = segment_index(p as usize);
    region < MAP_ENTRIES && MAP.entry(region).load(Ordering::Relaxed) != 0
}

/// `p >> SEGMENT_SHIFT`. On x86-64 the shift is written in asm: LLVM would
/// otherwise turn the bound check on it into a second shift of `p` (two
/// more instructions on every `free`).
#[inline(always)]
fn segment_index(p: usize) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let mut r = p;
        // SAFETY: a register shift; touches no memory, flags only.
        unsafe {
            core::arch::asm!("shr {r}, {s}", r = inout(reg) r, s = const SEGMENT_SHIFT,
                options(pure, nomem, nostack))
        };
        r
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        p >> SEGMENT_SHIFT
    }
}

fn set_mapped(seg: usize, on: bool) {
    // Relaxed: a pointer into the segment reaches another thread only through
    // a synchronizing hand-off that follows this store.
    let region = seg >> SEGMENT_SHIFT;
    if region >= MAP_ENTRIES {
        os::fatal(
            "the kernel mapped a segment above the 47-bit address space",
            seg,
        );
    }
    MAP.entry(region).store(on as u8, Ordering::Relaxed);
}

/// A free slab for a new use, or null with errno ENOMEM.
pub fn alloc_slab() -> *mut Slab {
    purge_if_due();
    let mut fresh = false;
    let slab = SEGMENTS.with(|s| {
        let mut seg = s.all;
        // SAFETY: segments on the list are live mappings; the lock is held.
        while !seg.is_null() && unsafe { (*seg).free_mask } == 0 {
            seg = unsafe { (*seg).next };
        }
        if seg.is_null() {
            seg = new_segment(s);
            if seg.is_null() {
                return ptr::null_mut();
            }
        }
        // SAFETY: `seg` is a live segment and the lock is held.
        let seg = unsafe { &mut *seg };
        let dirty = seg.free_mask & seg.dirty_mask;
        let pick = if dirty != 0 { dirty } else { seg.free_mask };
        let index = pick.trailing_zeros() as usize;
        seg.free_mask &= !(1 << index);
        seg.dirty_mask &= !(1 << index);
        if dirty != 0 {
            dirty_slab(false);
        } else {
            fresh = true;
        }
        &mut seg.slabs[index] as *mut Slab
    });
    if !slab.is_null() {
        // A fresh slab's pages fault in as it is carved.
        purge::count_taken(SLAB_BYTES as u64, fresh);
    }
    slab
}

/// Gives a slab with no live object back to its segment; its pages are purged
/// after the purge delay, or at once when the freed memory left resident
/// passes the trim bound (`trim_if_over_bound`).
pub fn free_slab(slab: *mut Slab) {
    SEGMENTS.with(|_| {
        let seg = segment_of(slab as usize) as *mut Segment;
        // SAFETY: `slab` is inside a live segment; the lock is held.
        let seg = unsafe { &mut *seg };
        let index = (slab as usize - seg as *mut Segment as usize) / core::mem::size_of::<Slab>();
        invariant!(seg.dirty_mask & (1 << index) == 0);
        seg.free_mask |= 1 << index;
        seg.dirty_mask |= 1 << index;
        dirty_slab(true);
    });
    // After the dirty bit: a purge that claims the deadline takes the lock
    // and sees it (`purge::schedule`).
    let now = purge::now_ns();
    purge::schedule(now);
    if purge::take_due(now) {
        purge_all(now);
    }
    trim_if_over_bound();
}

/// The trim bound's test (`purge`), for the free slow paths that leave
/// freed memory resident: a slab back to its segment (`free_slab`), a large
/// block into the cache (`alloc::free_large`). Past the bound, every free
/// slab is purged and every cached large block unmapped now. Cost under the
/// bound: three loads and a compare, no system call.
#[inline]
pub fn trim_if_over_bound() {
    // Relaxed: hints; `claim_trim` decides, the purge's locks order it.
    let freed_resident = DIRTY_BYTES.load(Ordering::Relaxed)
        + crate::counters::global()
            .large_cached
            .load(Ordering::Relaxed);
    if purge::over_trim_bound(freed_resident) {
        trim(freed_resident);
    }
}

#[cold]
#[inline(never)]
fn trim(freed_resident: u64) {
    if purge::claim_trim(freed_resident) {
        purge_all(u64::MAX);
    }
}

fn new_segment(s: &mut Segments) -> *mut Segment {
    let seg = os::map_aligned(SEGMENT_BYTES, SEGMENT_BYTES) as *mut Segment;
    if seg.is_null() {
        return seg;
    }
    // SAFETY: fresh mapping big enough for the header, ours alone.
    unsafe {
        for i in 1..SLABS_PER_SEGMENT {
            ptr::addr_of_mut!((*seg).slabs[i]).write(Slab::new_free());
        }
        (*seg).free_mask = ALL_SLABS;
        (*seg).dirty_mask = 0;
        (*seg).next = s.all;
        (*seg).prev = ptr::null_mut();
        if !s.all.is_null() {
            (*s.all).prev = seg;
        }
    }
    // A forked child walks the list from `all` (`repair_in_child`): the new
    // segment's fields come first.
    store_order_fence();
    s.all = seg;
    s.count += 1;
    set_mapped(seg as usize, true);
    let g = crate::counters::global();
    g.segments.fetch_add(1, Ordering::Relaxed);
    g.mapped_changed(SEGMENT_BYTES as i64);
    seg
}

/// Purges now if the deadline has passed; true if this call purged. Called
/// by `alloc_slab`, on allocation slow paths, so a process that keeps
/// allocating a little does give memory back; it may run under a node lock,
/// so the node lists' empty slabs stay listed (the purger and the refill
/// path, which hold none, use `purge_if_due_after`).
#[inline]
pub fn purge_if_due() -> bool {
    purge_if_due_after(|| ())
}

/// `purge_if_due`, with `first` run once this call has claimed the purge
/// and before it purges: callers that hold no node lock give the node
/// lists' empty slabs back there (`node::release_empty_slabs`), so that this
/// purge returns their pages too.
#[inline]
pub fn purge_if_due_after(first: impl FnOnce()) -> bool {
    if purge::deadline() == 0 {
        return false;
    }
    let now = purge::now_ns();
    if !purge::take_due(now) {
        return false;
    }
    first();
    purge_all(now);
    true
}

/// Purges every free slab and unmaps empty segments now (`malloc_trim`).
pub fn purge_now() {
    purge::take_now();
    purge_all(u64::MAX);
}

/// The purge the deadline asked for: large blocks cached for a whole delay
/// before `now` are unmapped (the rest wait for another deadline), free
/// slabs madvised, empty segments beyond `EMPTY_SEGMENTS_KEPT` unmapped.
fn purge_all(now: u64) {
    if crate::large::purge_cache(now.saturating_sub(purge::delay_ns())) {
        // Cached large blocks younger than the delay: look again later.
        purge::schedule(purge::now_ns());
    }
    SEGMENTS.with(purge_segments_locked);
}

fn purge_segments_locked(s: &mut Segments) {
    let mut empty_kept = 0;
    let mut seg = s.all;
    while !seg.is_null() {
        // SAFETY: live segment on the list, lock held.
        let next = unsafe { (*seg).next };
        let sg = unsafe { &mut *seg };
        if sg.free_mask == ALL_SLABS && empty_kept >= EMPTY_SEGMENTS_KEPT {
            // Its free slabs not purged yet leave with it.
            let dirty = sg.dirty_mask.count_ones() as u64 * SLAB_BYTES as u64;
            unlink(s, seg);
            set_mapped(seg as usize, false);
            os::unmap(seg.cast(), SEGMENT_BYTES);
            let g = crate::counters::global();
            g.segments.fetch_sub(1, Ordering::Relaxed);
            g.mapped_changed(-(SEGMENT_BYTES as i64));
            // Relaxed: a statistics counter.
            os::PURGED_BYTES.fetch_add(dirty, Ordering::Relaxed);
        } else {
            if sg.free_mask == ALL_SLABS {
                empty_kept += 1;
            }
            purge_runs(seg as usize, sg.dirty_mask);
            sg.dirty_mask = 0;
        }
        seg = next;
    }
    set_dirty(0);
}

/// madvise each run of consecutive set bits of `mask` as one call.
fn purge_runs(base: usize, mut mask: u64) {
    while mask != 0 {
        let start = mask.trailing_zeros() as usize;
        let len = (mask >> start).trailing_ones() as usize;
        os::purge((base + start * SLAB_BYTES) as *mut u8, len * SLAB_BYTES);
        mask &= !(((1u128 << (start + len)) - 1) as u64);
    }
}

fn unlink(s: &mut Segments, seg: *mut Segment) {
    // SAFETY: `seg` is on the list and the lock is held.
    unsafe {
        let (next, prev) = ((*seg).next, (*seg).prev);
        if prev.is_null() {
            s.all = next;
        } else {
            (*prev).next = next;
        }
        if !next.is_null() {
            (*next).prev = prev;
        }
    }
    s.count -= 1;
}

/// Calls `f` on every slab in use, with the segment lock held. For the
/// verification walk only.
pub fn for_each_slab(mut f: impl FnMut(&Slab)) {
    SEGMENTS.with(|s| {
        let mut seg = s.all;
        while !seg.is_null() {
            // SAFETY: live segment, lock held.
            let sg = unsafe { &*seg };
            for i in 1..SLABS_PER_SEGMENT {
                if sg.free_mask & (1 << i) == 0 {
                    f(&sg.slabs[i]);
                }
            }
            seg = sg.next;
        }
    })
}

/// In a forked child whose parent had other threads (see `fork`), if one of
/// them held the segment lock: makes the list whole again and frees the
/// lock. Each step of the critical sections leaves the list whole when
/// walked forward from `all` (a new segment is written before it is linked;
/// an unlinked one is skipped and only unmapped after), so the walk fixes
/// the back links, the count and the map, and drops dirty bits of slabs
/// that `alloc_slab` had taken but not yet marked clean.
pub fn repair_in_child() {
    if !SEGMENTS.lock.is_locked() {
        return;
    }
    // SAFETY: the child runs one thread, and the thread that held the lock
    // is gone: nothing else touches the list.
    let s = unsafe { &mut *SEGMENTS.data_ptr() };
    let (mut prev, mut seg, mut count, mut dirty) = (ptr::null_mut(), s.all, 0, 0);
    while !seg.is_null() {
        // SAFETY: segments reachable from `all` are live mappings.
        let sg = unsafe { &mut *seg };
        sg.prev = prev;
        sg.dirty_mask &= sg.free_mask;
        dirty += sg.dirty_mask.count_ones() as u64 * SLAB_BYTES as u64;
        set_mapped(seg as usize, true);
        count += 1;
        prev = seg;
        seg = sg.next;
    }
    s.count = count;
    set_dirty(dirty);
    SEGMENTS.lock.reset_in_child();
}
