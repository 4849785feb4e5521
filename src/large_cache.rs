//! The large blocks' cache of freed mappings, sized by recent use, so that
//! a loop of big malloc/free reuses resident pages instead of faulting
//! fresh ones in: a request takes the smallest cached mapping that fits and
//! leaves its tail cached, or grows a smaller one with mremap (its pages
//! move, still resident); neighbouring cached pieces merge again. A cached
//! mapping unused for the purge delay is unmapped (`large::purge_cache`).
//! The cache is part of the large blocks' table (`large::Table`), under its
//! lock; these are its methods.
//!
//! A freed block bigger than any freed before it (glibc's dynamic mmap
//! threshold, `large::PROTECT_ABOVE_START`) is cached inaccessible
//! (`os::protect`, PROT_NONE) until it is handed out again (unless
//! `SLUBMALLOC_PROTECT_FREED_LARGE=0`), so a read or write of it faults, as
//! under glibc, which unmaps such blocks; a piece records whether any part
//! of it is (`Cached::protected`). Its pages stay resident: handing it out
//! again changes its page table entries (one mprotect), it faults nothing
//! in. Each cached piece is at most two more kernel mappings than without
//! the protection (the boundaries where its protection differs from its
//! neighbours'), so at most `2 * CACHE_SLOTS` in all.

use core::mem::MaybeUninit;

use crate::large::{raise, Table};
use crate::large_map::unmap_block;
use crate::os::{self, PAGE_BYTES};
use crate::sync::Ordering;

/// Cached mappings: at most this many, and at most `Table::cache_limit`
/// bytes in all: half of the most bytes live in large blocks at once since
/// the last purge (the purge delay decides when it shrinks), within these
/// bounds. For 20 live blocks of 5-25 MiB replaced one at a time
/// (`benches/c/large_replace.c`), a quarter of the live bytes held the
/// block just freed and the pieces of its predecessors, but evicted the
/// pieces a later request would have fitted: half took 0.66x the time and
/// 0.6x the page faults, for 2% more peak resident memory
/// (bench/report/HISTORY.md).
pub const CACHE_SLOTS: usize = 32;
// `best_cached` keeps a slot's index in the low bits of a page count.
const _: () = assert!(CACHE_SLOTS.is_power_of_two() && CACHE_SLOTS <= PAGE_BYTES);
/// A cached mapping is split for a smaller request only when the part left
/// over is at least this big (or the mapping is over four times the
/// request): splitting the small ones fragmented the cache into pieces no
/// request fits. Measured when blocks over 32 KiB were large blocks, on
/// `benches/c/stress.c` (random sizes to 64 KiB on four threads): 0.50 s
/// and 15,000 mmaps with every split, 0.25 s and 2,900 mmaps with this
/// bound. (Those sizes now come from slabs; the bound still keeps the
/// cache from fragmenting under any mix of sizes near each other.)
const SPLIT_MIN_BYTES: usize = 1 << 20;
/// Smaller cached mappings are not grown for a request (a fresh mapping, the
/// piece kept): `big_blocks 16000` moved one for 37% of its replacements.
const GROW_MIN_BYTES: usize = 1 << 20;
const CACHE_MIN_BYTES: usize = 64 << 20;
const CACHE_MAX_BYTES: usize = 1 << 30;

/// A freed mapping kept for reuse (`base == 0`: empty slot).
#[derive(Clone, Copy)]
pub struct Cached {
    pub base: usize,
    pub len: usize,
    pub freed_at_ns: u64,
    /// Some of it is inaccessible: handing it out takes an mprotect.
    pub protected: bool,
}

pub const NO_CACHED: Cached = Cached {
    base: 0,
    len: 0,
    freed_at_ns: 0,
    protected: false,
};

impl Table {
    /// The smallest cached mapping of at least `len` bytes, in one pass
    /// without branches: a key is a length with the slot's index in its low
    /// bits (lengths are whole pages), so a min chooses the slot, the first
    /// of equals. About six instructions a slot, no jump that mispredicts.
    pub fn best_cached(&self, len: usize) -> Option<usize> {
        let mut best = usize::MAX;
        for (i, c) in self.cache.iter().enumerate() {
            // An empty slot's length is 0, below any request.
            best = best.min(if c.len >= len { c.len | i } else { usize::MAX });
        }
        (best != usize::MAX).then_some(best & (CACHE_SLOTS - 1))
    }

    /// A mapping for `len` bytes from the cache: the smallest that fits,
    /// taken whole when little of it would be spare (an eighth of the
    /// request, or under `SPLIT_MIN_BYTES` with the mapping at most four
    /// times the request), else split with its tail left cached; failing
    /// that, the largest of at least half the size and `GROW_MIN_BYTES`,
    /// for the caller to grow.
    pub fn take_cached(&mut self, len: usize) -> Option<Hit> {
        let hit = match self.best_cached(len) {
            Some(i) => {
                let c = self.cache[i];
                let spare = c.len - len;
                let whole = spare <= len / 8
                    || (spare < SPLIT_MIN_BYTES
                        && c.len <= crate::large::MAX_MAPPING_PER_REQUEST * len);
                if !whole {
                    self.cache[i].base += len;
                    self.cache[i].len -= len;
                    self.cached_bytes -= len;
                    Hit::Fits(c.base, len, c.protected)
                } else {
                    self.cache[i] = NO_CACHED;
                    self.cached_bytes -= c.len;
                    Hit::Fits(c.base, c.len, c.protected)
                }
            }
            None => {
                let (i, c) = self
                    .cache
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.base != 0 && c.len >= (len / 2).max(GROW_MIN_BYTES))
                    .max_by_key(|(_, c)| c.len)?;
                let c = *c;
                self.cache[i] = NO_CACHED;
                self.cached_bytes -= c.len;
                Hit::Grow(c.base, c.len, c.protected)
            }
        };
        self.publish_cache();
        Some(hit)
    }

    /// The cache's bound now (see `CACHE_SLOTS`).
    pub fn cache_limit(&self) -> usize {
        (self.recent_peak / 2).clamp(CACHE_MIN_BYTES, CACHE_MAX_BYTES)
    }

    /// Caches the freed mapping `base..base + len` (`protected`: made
    /// inaccessible), merged with cached neighbours; the oldest entries make
    /// room. What must be unmapped
    /// (evicted entries, or the mapping itself if it cannot be kept) goes
    /// to `out`, to be unmapped after the lock is released. One pass over
    /// the slots finds the neighbours, a free slot and the oldest entry;
    /// another only for each further entry evicted.
    pub fn cache_freed(
        &mut self,
        mut base: usize,
        mut len: usize,
        mut protected: bool,
        now: u64,
        out: &mut Evicted,
    ) {
        let (mut free_slot, mut oldest) = (None, None);
        let mut oldest_at = u64::MAX;
        for (i, c) in self.cache.iter_mut().enumerate() {
            if c.base != 0 && (c.base + c.len == base || base + len == c.base) {
                base = base.min(c.base);
                len += c.len;
                protected |= c.protected;
                self.cached_bytes -= c.len;
                *c = NO_CACHED;
            }
            if c.base == 0 {
                free_slot = free_slot.or(Some(i));
            } else if c.freed_at_ns < oldest_at {
                (oldest, oldest_at) = (Some(i), c.freed_at_ns);
            }
        }
        let limit = self.cache_limit();
        if len > limit {
            out.push(base, len);
            self.publish_cache();
            return;
        }
        loop {
            if let (Some(s), true) = (free_slot, self.cached_bytes + len <= limit) {
                self.cache[s] = Cached {
                    base,
                    len,
                    freed_at_ns: now,
                    protected,
                };
                self.cached_bytes += len;
                break;
            }
            let Some(i) = oldest else {
                out.push(base, len);
                break;
            };
            out.push(self.cache[i].base, self.cache[i].len);
            self.cached_bytes -= self.cache[i].len;
            self.cache[i] = NO_CACHED;
            free_slot = free_slot.or(Some(i));
            oldest = (0..CACHE_SLOTS)
                .filter(|&i| self.cache[i].base != 0)
                .min_by_key(|&i| self.cache[i].freed_at_ns);
        }
        self.publish_cache();
    }

    /// The cache's gauges for the statistics. Lock held.
    pub fn publish_cache(&self) {
        let g = crate::counters::global();
        // Relaxed: gauges written only under the table's lock.
        g.large_cached
            .store(self.cached_bytes as u64, Ordering::Relaxed);
        g.large_cache_limit
            .store(self.cache_limit() as u64, Ordering::Relaxed);
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
            self.publish_cache();
        }
    }
}

/// What `take_cached` found.
pub enum Hit {
    /// A mapping that holds the request (at `base`, `len` bytes; whether
    /// some of it is inaccessible).
    Fits(usize, usize, bool),
    /// A smaller mapping (at `base`, `len` bytes; as above) to grow with
    /// mremap.
    Grow(usize, usize, bool),
}

/// Mappings to unmap once the lock is released: (base, len) pairs, the
/// first `n` written. Left uninitialised (528 bytes): the caller makes one
/// per free, and zeroing it cost more than the rest of the free's work.
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

    /// Unmaps them; `purged`: they count as given back by a purge.
    pub fn unmap_all(&self, purged: bool) {
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
