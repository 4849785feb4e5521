//! The large blocks' cache of freed mappings, sized by recent use, so that
//! a loop of big malloc/free reuses resident pages instead of faulting
//! fresh ones in: a request takes the smallest cached mapping that fits and
//! leaves its tail cached, or grows a smaller one with mremap (its pages
//! move, still resident); neighbouring cached pieces merge again. A cached
//! mapping unused for the purge delay is unmapped (`large::purge_cache`).
//! The cache is a part of the large blocks' table (`large::Table::cache`),
//! under its lock.
//!
//! A freed block bigger than any freed before it (glibc's dynamic mmap
//! threshold, `large::PROTECT_ABOVE_START`) is cached inaccessible
//! (`os::make_inaccessible`, PROT_NONE) until it is handed out again (unless
//! `SLUBMALLOC_PROTECT_FREED_LARGE=0`), so a read or write of it faults, as
//! under glibc, which unmaps such blocks; a piece records whether any part
//! of it is, and whether guards are inside it (`Cached::closed`). Its pages
//! stay resident: handing it out again changes its page table entries (one
//! mprotect), it faults nothing
//! in. Each cached piece is at most two more kernel mappings than without
//! the protection (the boundaries where its protection differs from its
//! neighbours'), so at most `2 * CACHE_SLOTS` in all.
//!
//! A piece is `len` bytes followed by the guard page of the block freed
//! last in it (`large_map::GUARD_BYTES`, not counted in its bytes). Pieces
//! that merge take the guard between them into the merged piece (its bytes
//! grow by a page), which is then handed out made accessible whole
//! (`large_map::open`). A piece split for a request gives the block its
//! head and a guard page after it, for the caller to make a guard; the
//! rest, after that page, keeps the piece's guard.

use core::mem::MaybeUninit;

use crate::counters::raise;
use crate::large_map::{count_guards_opened, unmap_block, Closed, GUARD_BYTES};
use crate::os::{self, PAGE_BYTES};
use crate::sync::{invariant, Ordering};

/// Cached mappings: at most this many, and at most `Cache::limit`
/// bytes in all: half of the most bytes live in large blocks at once since
/// the last purge (the purge delay decides when it shrinks), within these
/// bounds. For 20 live blocks of 5-25 MiB replaced one at a time
/// (`benches/c/large_replace.c`), a quarter of the live bytes held the
/// block just freed and the pieces of its predecessors, but evicted the
/// pieces a later request would have fitted; half keeps them for a little
/// more resident memory (bench/report/HISTORY.md).
pub const CACHE_SLOTS: usize = 32;
// `Cache::best_fit` keeps a slot's index in the low bits of a page count.
const _: () = assert!(CACHE_SLOTS.is_power_of_two() && CACHE_SLOTS <= PAGE_BYTES);
/// A cached mapping is split for a smaller request only when the part left
/// over is at least this big (or the mapping is over four times the
/// request), so that the cache does not fragment into pieces no request
/// fits under a mix of sizes near each other.
const SPLIT_MIN_BYTES: usize = 1 << 20;
/// Smaller cached mappings are not grown for a request (a fresh mapping, the
/// piece kept), so that blocks live in many small pieces are not moved
/// from one to another.
const GROW_MIN_BYTES: usize = 1 << 20;
/// A large block's mapping is at most this many times the pages of the
/// size it was asked for, or last resized to: a cached mapping taken whole
/// for a smaller request (`Cache::take`) or kept by a realloc that shrinks
/// it (`large::realloc`, at most twice) has spare pages, never more
/// (`large::may_hold` relies on it).
pub const MAX_MAPPING_PER_REQUEST: usize = 4;
const CACHE_MIN_BYTES: usize = 64 << 20;
const CACHE_MAX_BYTES: usize = 1 << 30;

/// A freed mapping kept for reuse (`base == 0`: empty slot): `len` bytes,
/// and a guard page after them.
#[derive(Clone, Copy)]
struct Cached {
    base: usize,
    len: usize,
    freed_at_ns: u64,
    /// Which of its `len` bytes are inaccessible: handing it out opens
    /// them.
    closed: Closed,
}

const NO_CACHED: Cached = Cached {
    base: 0,
    len: 0,
    freed_at_ns: 0,
    closed: Closed::NOTHING,
};

/// The cached mappings, their bytes, and the live large blocks' bytes that
/// bound them.
pub struct Cache {
    slots: [Cached; CACHE_SLOTS],
    bytes: usize,
    /// Bytes of live large blocks' mappings, and the most since the last
    /// purge pass: what the cache's bound follows.
    live_bytes: usize,
    recent_peak: usize,
}

impl Cache {
    pub const EMPTY: Cache = Cache {
        slots: [NO_CACHED; CACHE_SLOTS],
        bytes: 0,
        live_bytes: 0,
        recent_peak: 0,
    };

    /// The smallest cached mapping of at least `len` bytes, in one pass
    /// without branches: a key is a length with the slot's index in its low
    /// bits (lengths are whole pages), so a min chooses the slot, the first
    /// of equals. About six instructions a slot, no jump that mispredicts.
    pub fn best_fit(&self, len: usize) -> Option<usize> {
        let mut best = usize::MAX;
        for (i, c) in self.slots.iter().enumerate() {
            // An empty slot's length is 0, below any request.
            best = best.min(if c.len >= len { c.len | i } else { usize::MAX });
        }
        (best != usize::MAX).then_some(best & (CACHE_SLOTS - 1))
    }

    /// A mapping for `len` bytes from the cache: the smallest that fits,
    /// taken whole when little of it would be spare (an eighth of the
    /// request, or under `SPLIT_MIN_BYTES` with the mapping at most four
    /// times the request), else split (the block's guard page after its
    /// head, the rest left cached); failing that, the largest of at least
    /// half the size and `GROW_MIN_BYTES`, for the caller to grow.
    pub fn take(&mut self, len: usize) -> Option<Hit> {
        let hit = match self.best_fit(len) {
            Some(i) => {
                let c = self.slots[i];
                let spare = c.len - len;
                let whole = spare <= len / 8
                    || (spare < SPLIT_MIN_BYTES && c.len <= MAX_MAPPING_PER_REQUEST * len);
                if !whole {
                    // Spare is more than an eighth of a large block's
                    // pages: more than the guard.
                    let taken = len + GUARD_BYTES;
                    invariant!(spare > GUARD_BYTES);
                    self.slots[i].base += taken;
                    self.slots[i].len -= taken;
                    self.bytes -= taken;
                    count_guards_opened(-1);
                    Hit::Fits(c.base, len, c.closed, true)
                } else {
                    self.slots[i] = NO_CACHED;
                    self.bytes -= c.len;
                    Hit::Fits(c.base, c.len, c.closed, false)
                }
            }
            None => {
                let (i, c) = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.base != 0 && c.len >= (len / 2).max(GROW_MIN_BYTES))
                    .max_by_key(|(_, c)| c.len)?;
                let c = *c;
                self.slots[i] = NO_CACHED;
                self.bytes -= c.len;
                Hit::Grow(c.base, c.len, c.closed)
            }
        };
        self.publish();
        Some(hit)
    }

    /// The cache's bound now (see `CACHE_SLOTS`).
    pub fn limit(&self) -> usize {
        (self.recent_peak / 2).clamp(CACHE_MIN_BYTES, CACHE_MAX_BYTES)
    }

    /// Caches the freed mapping `base..base + len` and its guard (`closed`:
    /// what of it is inaccessible), merged with cached neighbours;
    /// the oldest entries make room. What must be unmapped
    /// (evicted entries, or the mapping itself if it cannot be kept) goes
    /// to `out`, to be unmapped after the lock is released. One pass over
    /// the slots finds the neighbours, a free slot and the oldest entry;
    /// another only for each further entry evicted.
    pub fn keep(
        &mut self,
        mut base: usize,
        mut len: usize,
        mut closed: Closed,
        now: u64,
        out: &mut Evicted,
    ) {
        let (mut free_slot, mut oldest) = (None, None);
        let mut oldest_at = u64::MAX;
        for (i, c) in self.slots.iter_mut().enumerate() {
            if c.base != 0
                && (c.base + c.len + GUARD_BYTES == base || base + len + GUARD_BYTES == c.base)
            {
                // The guard between them is inside the merged piece.
                base = base.min(c.base);
                len += c.len + GUARD_BYTES;
                count_guards_opened(1);
                closed = Closed {
                    protected: closed.protected || c.closed.protected,
                    guards: true,
                };
                self.bytes -= c.len;
                *c = NO_CACHED;
            }
            if c.base == 0 {
                free_slot = free_slot.or(Some(i));
            } else if c.freed_at_ns < oldest_at {
                (oldest, oldest_at) = (Some(i), c.freed_at_ns);
            }
        }
        let limit = self.limit();
        if len > limit {
            out.push(base, len);
            self.publish();
            return;
        }
        loop {
            if let (Some(s), true) = (free_slot, self.bytes + len <= limit) {
                self.slots[s] = Cached {
                    base,
                    len,
                    freed_at_ns: now,
                    closed,
                };
                self.bytes += len;
                break;
            }
            let Some(i) = oldest else {
                out.push(base, len);
                break;
            };
            out.push(self.slots[i].base, self.slots[i].len);
            self.bytes -= self.slots[i].len;
            self.slots[i] = NO_CACHED;
            free_slot = free_slot.or(Some(i));
            oldest = (0..CACHE_SLOTS)
                .filter(|&i| self.slots[i].base != 0)
                .min_by_key(|&i| self.slots[i].freed_at_ns);
        }
        self.publish();
    }

    /// The cache's gauges for the statistics. Lock held.
    pub fn publish(&self) {
        let g = crate::counters::global();
        // Relaxed: gauges written only under the table's lock.
        g.large_cached.store(self.bytes as u64, Ordering::Relaxed);
        g.large_cache_limit
            .store(self.limit() as u64, Ordering::Relaxed);
    }

    /// Accounts a live block's mapping growing by `grown` bytes (negative:
    /// shrinking). Lock held.
    pub fn live_changed(&mut self, grown: isize) {
        self.live_bytes = self.live_bytes.wrapping_add(grown as usize);
        raise(
            &crate::counters::global().large_bytes_max,
            self.live_bytes as u64,
        );
        if self.live_bytes > self.recent_peak {
            self.recent_peak = self.live_bytes;
            self.publish();
        }
    }

    /// Moves the mappings freed before `cutoff_ns` to `out` (all of them for
    /// `u64::MAX`); returns whether any stay cached. A purge pass: the
    /// bound forgets the peak before it.
    pub fn purge(&mut self, cutoff_ns: u64, out: &mut Evicted) -> bool {
        for c in self.slots.iter_mut() {
            if c.base != 0 && c.freed_at_ns < cutoff_ns {
                out.push(c.base, c.len);
                self.bytes -= c.len;
                *c = NO_CACHED;
            }
        }
        self.recent_peak = self.live_bytes;
        self.publish();
        self.bytes > 0
    }

    /// In a forked child whose parent held the lock: forgets every cached
    /// mapping (an entry may be half written; the mappings stay mapped,
    /// unused) and starts again from the live blocks' `live_bytes`.
    pub fn reset_in_child(&mut self, live_bytes: usize) {
        self.slots = [NO_CACHED; CACHE_SLOTS];
        self.bytes = 0;
        self.live_bytes = live_bytes;
        self.publish();
    }

    /// Cached mappings now.
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub fn pieces(&self) -> u64 {
        self.slots.iter().filter(|c| c.base != 0).count() as u64
    }
}

/// What `Cache::take` found.
pub enum Hit {
    /// A mapping that holds the request (at `base`, `len` bytes, a guard
    /// page after them; what of it is inaccessible; whether it was split
    /// off a piece, so that its guard page is still to be made).
    Fits(usize, usize, Closed, bool),
    /// A smaller mapping (at `base`, `len` bytes, a guard page after
    /// them; what of it is inaccessible) to grow with mremap.
    Grow(usize, usize, Closed),
}

/// Mappings to unmap once the lock is released: (base, len) pairs (each
/// with its guard page after it), the first `n` written. Left
/// uninitialised (528 bytes): the caller makes one per free, and zeroing
/// it cost more than the rest of the free's work.
pub struct Evicted {
    list: [MaybeUninit<(usize, usize)>; CACHE_SLOTS + 1],
    n: usize,
}

impl Evicted {
    pub fn new() -> Self {
        Evicted {
            list: [const { MaybeUninit::uninit() }; CACHE_SLOTS + 1],
            n: 0,
        }
    }

    /// At most `CACHE_SLOTS + 1` pushes: the cached entries and one more.
    pub fn push(&mut self, base: usize, len: usize) {
        self.list[self.n].write((base, len));
        self.n += 1;
    }

    /// Unmaps them.
    pub fn unmap_all(&self) {
        self.unmap(false);
    }

    /// Unmaps them, counted as given back by a purge.
    pub fn unmap_all_purged(&self) {
        self.unmap(true);
    }

    fn unmap(&self, purged: bool) {
        for m in &self.list[..self.n] {
            // SAFETY: the first `n` entries were written by `push`.
            let (base, len) = unsafe { m.assume_init() };
            unmap_block(base, len);
            if purged {
                // Relaxed: a statistics counter.
                os::PURGED_BYTES.fetch_add(len as u64, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// The cache's arithmetic on addresses it never maps: two freed
    /// neighbours (one's guard page right before the other) merge into one
    /// piece, the guard between them inside it; a request split off it
    /// gets the head, its guard page after it, and the rest starts past
    /// that page, ending at the last block's guard.
    #[test]
    fn neighbours_merge_across_their_guard_and_a_split_leaves_one_after_the_block() {
        const GUARDS_ONLY: Closed = Closed {
            protected: false,
            guards: true,
        };
        let mut cache = Cache::EMPTY;
        let mut out = Evicted::new();
        let (a, len) = (1usize << 40, 4 * PAGE_BYTES);
        cache.keep(a + len + GUARD_BYTES, len, Closed::NOTHING, 1, &mut out);
        cache.keep(a, len, Closed::NOTHING, 2, &mut out);
        assert_eq!(out.n, 0, "nothing evicted");
        let merged = 2 * len + GUARD_BYTES;
        assert_eq!(cache.bytes, merged);
        assert!(matches!(
            cache.take(PAGE_BYTES),
            Some(Hit::Fits(base, PAGE_BYTES, c, true)) if base == a && c == GUARDS_ONLY
        ));
        let rest: Vec<(usize, usize)> = cache
            .slots
            .iter()
            .filter(|c| c.base != 0)
            .map(|c| (c.base, c.len))
            .collect();
        let left = merged - PAGE_BYTES - GUARD_BYTES;
        assert_eq!(rest, [(a + PAGE_BYTES + GUARD_BYTES, left)]);
        assert_eq!(cache.bytes, left);
        assert!(matches!(
            cache.take(left),
            Some(Hit::Fits(base, l, c, false)) if (base, l) == rest[0] && c == GUARDS_ONLY
        ));
        assert_eq!(cache.bytes, 0);
    }
}
