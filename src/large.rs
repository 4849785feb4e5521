//! Large blocks (above the largest size class, and above glibc's dynamic
//! mmap threshold or the medium blocks' bound, `medium`): each in its own
//! mapping, a guard page after it (`large_map`), found on free through an
//! open-addressing table keyed by address, so a pointer we never handed
//! out is recognised, not followed.
//! Freed mappings are kept for reuse in a cache (`large_cache::Cache`, a
//! part of the table, under the same lock); mappings are made, grown and
//! resized by `large_map`. Here: the address table, glibc's threshold
//! (`threshold`), and the entry points (`alloc`, `free`, `realloc`, the
//! purge of the cache, the repair in a forked child).

use core::ptr;

use crate::counters::{add_locked, raise};
use crate::large_cache::{Cache, Evicted, Hit, MAX_MAPPING_PER_REQUEST};
use crate::large_map::{
    grow_cached, map_fresh, open, resize_block, set_guard, unmap_block, Closed, Contents,
    GUARD_BYTES,
};
use crate::options;
use crate::os::{self, PAGE_BYTES};
use crate::purge::{self, Pages};
use crate::size_class;
use crate::sync::{invariant, store_order_fence, AtomicUsize, Locked, Ordering};

/// Recently freed addresses, to name a second free "double free".
const FREED_RING: usize = 64;

/// An address-table slot that never held a block since the table was built.
const VACANT: usize = 0;
const TOMBSTONE: usize = 1;

#[derive(Clone, Copy)]
#[repr(C)]
struct Entry {
    /// The block's address (VACANT / TOMBSTONE for unused slots).
    ptr: usize,
    /// The mapping that holds it.
    base: usize,
    len: usize,
}

pub struct Table {
    slots: *mut Entry,
    /// Capacity, a power of two (0 before the first block).
    cap: usize,
    /// While `rebuild` switches arrays: the new one, complete, and its
    /// capacity, for a forked child that finds the switch half done.
    switching: (*mut Entry, usize),
    /// Live entries plus tombstones.
    used: usize,
    cache: Cache,
    freed: [usize; FREED_RING],
    freed_next: usize,
    /// A freed block's mapping longer than this is cached inaccessible, and
    /// raises it (`protect_on_free`).
    protect_above: usize,
}

// SAFETY: the table is reached only under its lock.
unsafe impl Send for Table {}

const NEW_TABLE: Table = Table {
    slots: ptr::null_mut(),
    cap: 0,
    switching: (ptr::null_mut(), 0),
    used: 0,
    cache: Cache::EMPTY,
    freed: [0; FREED_RING],
    freed_next: 0,
    protect_above: PROTECT_ABOVE_START,
};
static LARGE: Locked<Table> = Locked::new(NEW_TABLE);

/// Which freed blocks fault when touched follows glibc's dynamic mmap
/// threshold: glibc unmaps a freed block it had mapped (over its threshold,
/// 128 KiB at first) and raises the threshold to that block's size (up to
/// 32 MiB), so that the program's later blocks up to that size come from
/// its heap and are reused without a system call. Here a freed block whose
/// mapping is longer than `protect_above` is made inaccessible and raises
/// it; one no longer is cached as it is. A program's first use after free
/// of a big block faults as under glibc, and a loop of big blocks pays two
/// mprotects only until it has freed its biggest size.
const PROTECT_ABOVE_START: usize = 128 << 10;
/// glibc's most for its threshold on 64-bit (`DEFAULT_MMAP_THRESHOLD_MAX`):
/// a freed block above it is always protected.
const PROTECT_ABOVE_MAX: usize = 32 << 20;

/// `Table::protect_above`, for `threshold`, which reads it without the
/// lock; stored by the lock's holders.
static THRESHOLD: AtomicUsize = AtomicUsize::new(PROTECT_ABOVE_START);

/// glibc's dynamic mmap threshold as this table keeps it: a block of at
/// most this many bytes is a medium block (`medium`), served from the
/// segments as glibc serves it from its heap; a bigger one is a mapping of
/// its own, made inaccessible at its free, which raises the threshold.
#[inline]
pub fn threshold() -> usize {
    // Relaxed: a hint that only decides where the next block comes from.
    THRESHOLD.load(Ordering::Relaxed)
}

impl Table {
    /// Whether the freed mapping of `len` bytes is to be made inaccessible,
    /// raising the bound as glibc raises its threshold. Lock held.
    /// The threshold rises whether or not freed blocks are protected
    /// (`SLUBMALLOC_PROTECT_FREED_LARGE`), as glibc's does.
    fn protect_on_free(&mut self, len: usize) -> bool {
        if len <= self.protect_above {
            return false;
        }
        if len <= PROTECT_ABOVE_MAX {
            self.protect_above = len;
            // Relaxed: see `threshold`.
            THRESHOLD.store(len, Ordering::Relaxed);
        }
        options::get().protect_freed_large
    }
}

fn hash(p: usize, cap: usize) -> usize {
    ((p >> 12).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) & (cap - 1)
}

/// Writes `e` into the first unused slot of its probe sequence in `slots`
/// (`cap` entries, not full); returns whether that slot was VACANT (rather
/// than a tombstone). The entry's address goes last, so a forked child
/// never finds a named block with another block's mapping.
fn place(slots: *mut Entry, cap: usize, e: Entry) -> bool {
    let mut i = hash(e.ptr, cap);
    // SAFETY: i < cap and `slots` maps `cap` entries (for every i below).
    while unsafe { (*slots.add(i)).ptr } > TOMBSTONE {
        i = (i + 1) & (cap - 1);
    }
    // SAFETY: as above.
    let slot = unsafe { &mut *slots.add(i) };
    let was_vacant = slot.ptr == VACANT;
    slot.base = e.base;
    slot.len = e.len;
    store_order_fence();
    slot.ptr = e.ptr;
    was_vacant
}

impl Table {
    fn slot(&self, i: usize) -> Entry {
        // SAFETY: i < cap and `slots` maps `cap` entries; lock held.
        unsafe { *self.slots.add(i) }
    }

    fn slot_mut(&mut self, i: usize) -> &mut Entry {
        // SAFETY: as in `slot`, and `&mut self` makes this access unique.
        unsafe { &mut *self.slots.add(i) }
    }

    fn find(&self, p: usize) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = hash(p, self.cap);
        loop {
            match self.slot(i).ptr {
                VACANT => return None,
                q if q == p => return Some(i),
                _ => i = (i + 1) & (self.cap - 1),
            }
        }
    }

    /// Makes room for one more entry; false if out of memory.
    fn room(&mut self) -> bool {
        (self.used + 1) * 4 <= self.cap * 3 || self.rebuild()
    }

    /// Inserts an entry; `room` made space for it.
    fn insert(&mut self, e: Entry) {
        invariant!((self.used + 1) * 4 <= self.cap * 3);
        if place(self.slots, self.cap, e) {
            self.used += 1;
        }
    }

    /// Enters a new block, the whole mapping `base..base + len`, and counts
    /// it (`hit`: taken from the cache). `room` made space for it.
    fn enter(&mut self, base: usize, len: usize, hit: bool) {
        self.insert(Entry {
            ptr: base,
            base,
            len,
        });
        self.cache.live_changed(len as isize);
        let g = crate::counters::global();
        add_locked(&g.large_blocks, 1);
        add_locked(&g.large_bytes, len as u64);
        raise(&g.large_blocks_max, g.large_blocks.load(Ordering::Relaxed));
        if hit {
            add_locked(&g.large_cache_hits, 1);
        }
    }

    /// Takes the live block in slot `i` out of the table and its counts;
    /// returns its entry.
    fn remove(&mut self, i: usize) -> Entry {
        let e = self.slot(i);
        invariant!(e.ptr > TOMBSTONE);
        self.slot_mut(i).ptr = TOMBSTONE;
        self.cache.live_changed(-(e.len as isize));
        let g = crate::counters::global();
        add_locked(&g.large_blocks, 1u64.wrapping_neg());
        add_locked(&g.large_bytes, (e.len as u64).wrapping_neg());
        e
    }

    /// Moves the live entries, not the tombstones, into a new array at most
    /// half full (a quarter fills before the next rebuild). Doubling at each
    /// rebuild grew the table with the frees, whatever was live.
    fn rebuild(&mut self) -> bool {
        let (old, old_cap) = (self.slots, self.cap);
        // SAFETY: i < old_cap within the old mapping.
        let live = (0..old_cap).filter(|&i| unsafe { (*old.add(i)).ptr } > TOMBSTONE);
        let new_cap = ((live.count() + 1) * 2).next_power_of_two().max(256);
        let slots = os::map(new_cap * core::mem::size_of::<Entry>()) as *mut Entry;
        if slots.is_null() {
            return false;
        }
        let mut used = 0;
        for i in 0..old_cap {
            // SAFETY: i < old_cap within the old mapping.
            let e = unsafe { *old.add(i) };
            if e.ptr > TOMBSTONE {
                place(slots, new_cap, e);
                used += 1;
            }
        }
        // The new array is complete before the table names it; a child
        // forked during the switch takes `switching` (`repair_in_child`).
        self.switching = (slots, new_cap);
        store_order_fence();
        self.slots = slots;
        self.cap = new_cap;
        self.used = used;
        store_order_fence();
        self.switching = (ptr::null_mut(), 0);
        if !old.is_null() {
            os::unmap(old.cast(), old_cap * core::mem::size_of::<Entry>());
        }
        true
    }
}

/// Whether a mapping of `len` bytes may hold a large block asked for with
/// `size` bytes: the size fits, and the mapping is no more than
/// `MAX_MAPPING_PER_REQUEST` times its pages.
pub fn may_hold(len: usize, size: usize) -> bool {
    page_round(size)
        .is_some_and(|need| need <= len && len <= need.saturating_mul(MAX_MAPPING_PER_REQUEST))
}

fn page_round(size: usize) -> Option<usize> {
    if size > isize::MAX as usize - PAGE_BYTES {
        return None;
    }
    Some((size.max(1) + PAGE_BYTES - 1) & !(PAGE_BYTES - 1))
}

/// Allocates a large block, or null with errno ENOMEM. `Contents::Zeroed`:
/// the caller wants zeroed memory (fresh mappings already are; cached ones
/// are cleared).
/// A cache hit that fits takes the lock once; otherwise a second time, to
/// enter the block after the system call.
pub fn alloc(size: usize, align: usize, contents: Contents) -> *mut u8 {
    let Some(len) = page_round(size) else {
        os::set_enomem();
        return ptr::null_mut();
    };
    let cached = if align <= PAGE_BYTES {
        LARGE.with(|t| {
            if !t.room() {
                return Err(());
            }
            let hit = t.cache.take(len);
            if let Some(Hit::Fits(base, l, ..)) = hit {
                t.enter(base, l, true);
            }
            Ok(hit)
        })
    } else {
        Ok(None)
    };
    let (base, map_len, hit) = match cached {
        Err(()) => {
            os::set_enomem();
            return ptr::null_mut();
        }
        Ok(Some(Hit::Fits(base, l, closed, split))) => {
            // Cost for a protected piece: one mprotect, which rewrites its
            // page table entries (bench/report/HISTORY.md has the numbers);
            // one more call for guards inside it; for a split one, one more
            // for its guard. A split one is opened with the page that
            // becomes its guard: with guard markers, no guard is PROT_NONE.
            let opened = if split { l + GUARD_BYTES } else { l };
            if open(base, opened, closed) {
                if split {
                    set_guard(base + l);
                }
                purge::count_taken(l as u64, Pages::Resident);
                if contents == Contents::Zeroed {
                    // SAFETY: the cached mapping is ours, accessible now, and
                    // at least `size` long.
                    unsafe { ptr::write_bytes(base as *mut u8, 0, size) };
                }
                return base as *mut u8;
            }
            // Past vm.max_map_count (the piece is part of a kernel mapping):
            // a fresh mapping, if the kernel allows even that.
            uncache_failed(base);
            match map_fresh(len, align) {
                Some(m) => (m, len, false),
                None => return ptr::null_mut(),
            }
        }
        Ok(Some(Hit::Grow(base, l, closed))) => {
            // A failed grow falls back to a fresh mapping: errno stays as
            // the caller had it unless that fails too (`map_fresh` sets it).
            let grown = {
                let _keep = os::ErrnoGuard::save();
                grow_cached(base, l, closed, len, contents)
            };
            match grown {
                Some(q) => (q, len, true),
                None => match map_fresh(len, align) {
                    Some(m) => (m, len, false),
                    None => return ptr::null_mut(),
                },
            }
        }
        Ok(None) => match map_fresh(len, align) {
            Some(m) => (m, len, false),
            None => return ptr::null_mut(),
        },
    };
    if !LARGE.with(|t| {
        let ok = t.room();
        if ok {
            t.enter(base, map_len, hit);
        }
        ok
    }) {
        unmap_block(base, map_len);
        os::set_enomem();
        return ptr::null_mut();
    }
    base as *mut u8
}

/// Outcome of freeing a pointer that is not in a segment.
pub enum Freed {
    Ok,
    DoubleFree,
    NotOurs,
}

/// Frees a large block: the entry leaves the table in one lock hold; the
/// mapping is made inaccessible outside the lock, then cached in a second
/// hold. In between it is in neither: a second free finds it in `freed`,
/// and a child forked then only loses it for reuse.
pub fn free(p: *mut u8) -> Freed {
    let p = p as usize;
    let e = LARGE.with(|t| {
        let Some(i) = t.find(p) else {
            return Err(if t.freed.contains(&p) {
                Freed::DoubleFree
            } else {
                Freed::NotOurs
            });
        };
        t.freed[t.freed_next] = p;
        t.freed_next = (t.freed_next + 1) % FREED_RING;
        let e = t.remove(i);
        Ok((e, t.protect_on_free(e.len)))
    });
    let (e, protect) = match e {
        Ok(e) => e,
        Err(r) => return r,
    };
    let now = purge::now_ns();
    let mut evicted = Evicted::new();
    if !protect || os::make_inaccessible(e.base as *mut u8, e.len) {
        let closed = Closed {
            protected: protect,
            guards: false,
        };
        LARGE.with(|t| t.cache.keep(e.base, e.len, closed, now, &mut evicted));
    } else {
        // The kernel would need a mapping more than it allows: unmapped, it
        // faults too.
        evicted.push(e.base, e.len);
    }
    evicted.unmap_all();
    purge::schedule(now);
    Freed::Ok
}

/// A cached piece just entered as a block that could not be made
/// accessible (`alloc`): it leaves the table and goes back to the cache,
/// any part of it maybe still inaccessible, and is not counted as a hit.
#[cold]
fn uncache_failed(base: usize) {
    let now = purge::now_ns();
    let mut evicted = Evicted::new();
    LARGE.with(|t| {
        let i = t.find(base);
        invariant!(i.is_some());
        let Some(i) = i else { return };
        let e = t.remove(i);
        add_locked(
            &crate::counters::global().large_cache_hits,
            1u64.wrapping_neg(),
        );
        t.cache.keep(e.base, e.len, Closed::ALL, now, &mut evicted);
    });
    evicted.unmap_all();
}

/// The usable size of a large block, or None if `p` is not one.
pub fn usable_size(p: *mut u8) -> Option<usize> {
    let p = p as usize;
    LARGE.with(|t| {
        t.find(p).map(|i| {
            let e = t.slot(i);
            e.base + e.len - p
        })
    })
}

/// Resizes a large block in place or with mremap. None: the caller must
/// allocate, copy and free (new size small, or an over-aligned block).
/// Some(null): out of memory, the old block is intact.
pub fn realloc(p: *mut u8, new_size: usize) -> Option<*mut u8> {
    if new_size <= size_class::MAX_SMALL_BYTES {
        return None;
    }
    let Some(new_len) = page_round(new_size) else {
        os::set_enomem();
        return Some(ptr::null_mut());
    };
    let p = p as usize;
    LARGE.with(|t| {
        let i = t.find(p)?;
        let e = t.slot(i);
        if e.base != p {
            return None;
        }
        if new_len <= e.len && new_len > e.len / 2 {
            const _: () = assert!(MAX_MAPPING_PER_REQUEST >= 2);
            return Some(p as *mut u8); // fits, and shrinking would not save much
        }
        if new_len > e.len && t.cache.best_fit(new_len).is_some() {
            // Copying into a cached mapping beats growing: its pages are
            // already resident, new ones from mremap would fault one by one.
            return None;
        }
        // Make room first, so the insert below cannot fail after the remap.
        if !t.room() {
            os::set_enomem();
            return Some(ptr::null_mut());
        }
        // The entry leaves before the mapping moves, so that the table never
        // names a mapping that may be gone (a forked child sees the table as
        // it was at any point of this).
        let i = t.find(p).unwrap_or(i); // `rebuild` may have moved it
        t.slot_mut(i).ptr = TOMBSTONE;
        store_order_fence();
        let q = {
            // On failure the caller allocates, copies and frees, and sets
            // errno only if that fails too.
            let _keep = os::ErrnoGuard::save();
            resize_block(p, e.len, new_len).unwrap_or(0)
        };
        if q == 0 {
            // Out of memory: allocate, copy and free instead.
            t.slot_mut(i).ptr = p;
            return None;
        }
        t.cache.live_changed(new_len as isize - e.len as isize);
        let g = crate::counters::global();
        add_locked(&g.large_bytes, (new_len as u64).wrapping_sub(e.len as u64));
        g.large_mapped.fetch_add(
            (new_len as u64).wrapping_sub(e.len as u64),
            Ordering::Relaxed,
        );
        g.mapped_changed(new_len as i64 - e.len as i64);
        t.insert(Entry {
            ptr: q,
            base: q,
            len: new_len,
        });
        Some(q as *mut u8)
    })
}

/// Unmaps the cached mappings freed before `cutoff_ns` (all of them for
/// `u64::MAX`: `malloc_trim`); returns whether any stay cached. A purge
/// pass: the cache's bound forgets the peak before it.
pub fn purge_cache(cutoff_ns: u64) -> bool {
    let mut out = Evicted::new();
    let left = LARGE.with(|t| t.cache.purge(cutoff_ns, &mut out));
    out.unmap_all_purged();
    left
}

/// In a forked child whose parent had other threads (see `fork`), if one of
/// them held the table's lock: finishes a half-done `rebuild`, recounts the
/// used slots, drops the cache (an entry may be half written; its mappings
/// stay mapped in the child, unused), and frees the lock. Live entries are
/// whole: `place` writes the address last, `free` and `realloc` remove one
/// with a single store before the mapping changes.
pub fn repair_in_child() {
    if !LARGE.lock.is_locked() {
        return;
    }
    // SAFETY: the child runs one thread, and the thread that held the lock
    // is gone: nothing else touches the table.
    let t = unsafe { &mut *LARGE.data_ptr() };
    if !t.switching.0.is_null() {
        (t.slots, t.cap) = t.switching;
        t.switching = (ptr::null_mut(), 0);
    }
    t.used = (0..t.cap).filter(|&i| t.slot(i).ptr != VACANT).count();
    let live_bytes = (0..t.cap)
        .map(|i| t.slot(i))
        .filter(|e| e.ptr > TOMBSTONE)
        .map(|e| e.len)
        .sum();
    t.cache.reset_in_child(live_bytes);
    LARGE.lock.reset_in_child();
}

/// Cached mappings (pieces kept for reuse) now: one lock hold For `mallinfo2`.
#[cfg(any(feature = "override", slubmalloc_preload))]
pub fn cached_pieces() -> u64 {
    LARGE.with(|t| t.cache.pieces())
}

/// Number of live large blocks by walking the table (verification only).
pub fn walk_count() -> u64 {
    LARGE.with(|t| (0..t.cap).filter(|&i| t.slot(i).ptr > TOMBSTONE).count() as u64)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// 1,000 live entries each freed and replaced 100 times: the table stays
    /// sized by them (doubling at each rebuild left 16,384 slots).
    #[test]
    fn the_address_table_stays_sized_by_its_live_entries() {
        let mut t = NEW_TABLE;
        let e = |k: usize| Entry {
            ptr: (k + 1) << 12,
            base: (k + 1) << 12,
            len: PAGE_BYTES,
        };
        for k in 0..101_000 {
            if k >= 1000 {
                let i = t.find(e(k - 1000).ptr).expect("a live entry is found");
                t.slot_mut(i).ptr = TOMBSTONE;
            }
            assert!(t.room());
            t.insert(e(k));
        }
        assert!(t.cap <= 4096, "{} slots for 1,000 live entries", t.cap);
        assert!((100_000..101_000).all(|k| t.find(e(k).ptr).is_some()));
        os::unmap(t.slots.cast(), t.cap * core::mem::size_of::<Entry>());
    }
}
