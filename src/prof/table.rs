//! The heap profile's tables, in memory the allocator maps itself: the
//! stacks seen so far, each with its estimated live and allocated objects
//! and bytes, and the live sampled blocks (address -> stack, size), so a
//! free takes its block's estimate off its stack. Everything is under
//! `PROF_LOCK` (the `TABLES` lock), which also guards the profile heap.
//!
//! Estimates are unbiased per sample: with samples taken at the points of a
//! Poisson process of mean interval `rate` bytes, a block of `size` bytes
//! is sampled with probability `p = 1 - exp(-size/rate)` and stands for
//! `1/p` blocks and `size/p` bytes (tcmalloc and jemalloc weigh samples
//! this way; writing them already scaled keeps blocks of different sizes
//! on one stack exact, where pprof's own adjustment of raw `heap_v2`
//! counts uses their mean size). Counts are kept in 1/65536ths and bytes
//! in whole bytes, as integers, so a free subtracts exactly what its
//! allocation added.
//!
//! Invariants: every stack record is reachable from `index` exactly once;
//! every live block is in `live` exactly once, and its stack record counts
//! it; a probe sequence of `live` has no hole between an entry's home slot
//! and its slot (deletion shifts entries back rather than leaving marks).

use crate::os;
use crate::prof::unwind::MAX_FRAMES;
use crate::sync::{invariant, Lock, Locked};

/// Fixed point of the weighted counts.
pub const COUNT_ONE: u64 = 1 << 16;

/// Stack records stop being added past this many (about 40 MiB of
/// records at full depth); samples of new stacks are then counted on a
/// stack of depth 1 (the innermost frame), and dropped if even that is new.
pub const MAX_STACKS: usize = 1 << 16;

/// Words of a stack record before its frames.
const HEAD_WORDS: usize = 6;

/// The profile's tables, in `os::map`ped memory that grows by doubling.
pub struct Tables {
    /// Stack records, back to back: hash, depth, live count (fixed
    /// point), live bytes, allocated count (fixed point), allocated bytes,
    /// then `depth` frames.
    arena: *mut u64,
    arena_words: usize,
    arena_used: usize,
    /// Open addressing over stack records: word offset + 1, 0 empty.
    index: *mut u32,
    index_cap: usize,
    pub stacks: usize,
    /// Open addressing over live sampled blocks (linear probing).
    live: *mut Live,
    live_cap: usize,
    pub live_count: usize,
    /// Samples dropped: the tables could not grow, or too many stacks.
    pub dropped: u64,
    /// Profiles written so far (`%n` in the file name).
    pub dumps: u64,
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Live {
    /// 0: empty slot.
    addr: usize,
    size: usize,
    /// Word offset of the block's stack record.
    stack: usize,
}

// SAFETY: the raw pointers are reached only under the lock.
unsafe impl Send for Tables {}

pub static TABLES: Locked<Tables> = Locked::new(Tables::EMPTY);
/// The lock of `TABLES` and of the profile heap.
pub static PROF_LOCK: &Lock = &TABLES.lock;

/// One stack with its estimates, as the writer sees it.
pub struct StackView<'a> {
    pub frames: &'a [u64],
    pub live_count: u64,
    pub live_bytes: u64,
    pub alloc_count: u64,
    pub alloc_bytes: u64,
}

/// The estimate one sample of `size` bytes stands for: (count in
/// 1/65536ths, bytes).
pub fn weights(size: usize, rate: u64) -> (u64, u64) {
    let x = size as f64 / rate as f64;
    // 1/p with p = 1 - exp(-x), computed without cancellation for small x.
    let inv_p = 1.0 / -exp_m1(-x);
    (round(inv_p * COUNT_ONE as f64), round(inv_p * size as f64))
}

/// A non-negative `x` rounded to the nearest integer (`f64::round` is
/// std's: the preload library has none, `preload.rs`).
fn round(x: f64) -> u64 {
    (x + 0.5) as u64
}

// The two functions of libm the profile needs, written here: with them from
// libm, `libslubmalloc.so` needed `libm.so.6`, whose load (its IFUNC
// resolvers fault in its text) cost every program 250-330 KiB of resident
// memory (`/proc/self/smaps`), most of what it took beyond mimalloc.

/// The natural logarithm of a positive, normal, finite `x`, to within a few
/// units in the last place: `x = m * 2^e` with `m` in [sqrt(1/2), sqrt(2)],
/// then `ln(m) = 2 atanh(s)`, `s = (m - 1) / (m + 1)`, `|s| <= 0.172`, as a
/// series of 12 terms (the next is below 2^-60 of the sum).
pub fn ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1 << 52) - 1)) | (1023 << 52));
    if m > core::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let (mut term, mut sum) = (s, 0.0);
    for k in 0..12 {
        sum += term / (2 * k + 1) as f64;
        term *= s2;
    }
    2.0 * sum + e as f64 * core::f64::consts::LN_2
}

/// `exp(x) - 1` for `x <= 0`, without the cancellation near 0: below 0.5 in
/// magnitude its Taylor series (24 terms: the next is below 2^-80), else
/// `exp(x) - 1` with `exp(x) = 2^k exp(r)`, `|r| < ln 2`.
pub fn exp_m1(x: f64) -> f64 {
    if x > -0.5 {
        let (mut term, mut sum) = (x, 0.0);
        for k in 2..26 {
            sum += term;
            term *= x / k as f64;
        }
        return sum;
    }
    if x < -745.0 {
        return -1.0; // exp(x) is below the smallest subnormal
    }
    let k = (x * core::f64::consts::LOG2_E) as i64; // in (-1075, 0]
    let r = x - k as f64 * core::f64::consts::LN_2;
    let (mut term, mut exp_r) = (1.0, 0.0);
    for n in 1..28 {
        exp_r += term;
        term *= r / n as f64;
    }
    // 2^k in two steps: 2^k alone is subnormal below -1022.
    let half = k / 2;
    let pow = |j: i64| f64::from_bits(((1023 + j) as u64) << 52);
    exp_r * pow(half) * pow(k - half) - 1.0
}

fn hash_frames(frames: &[usize]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ frames.len() as u64;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h | 1
}

fn hash_addr(addr: usize) -> usize {
    // Fibonacci hashing: block addresses share their low bits.
    (addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) as usize
}

/// Maps `old_bytes` grown to `new_bytes` (or fresh if `old` is null).
fn grow_mapping(old: *mut u8, old_bytes: usize, new_bytes: usize) -> *mut u8 {
    if old.is_null() {
        os::map(new_bytes)
    } else {
        os::remap(old, old_bytes, new_bytes)
    }
}

impl Tables {
    const EMPTY: Tables = Tables {
        arena: core::ptr::null_mut(),
        arena_words: 0,
        arena_used: 0,
        index: core::ptr::null_mut(),
        index_cap: 0,
        stacks: 0,
        live: core::ptr::null_mut(),
        live_cap: 0,
        live_count: 0,
        dropped: 0,
        dumps: 0,
    };

    fn record(&self, off: usize) -> *mut u64 {
        // SAFETY: `off` is a record's offset inside the arena.
        unsafe { self.arena.add(off) }
    }

    fn frames_at(&self, off: usize) -> &[u64] {
        let r = self.record(off);
        // SAFETY: a record holds `depth` frames after its head.
        unsafe { core::slice::from_raw_parts(r.add(HEAD_WORDS), *r.add(1) as usize) }
    }

    /// The record of `frames`, added if new; None if it cannot be.
    fn find_or_add_stack(&mut self, frames: &[usize]) -> Option<usize> {
        let h = hash_frames(frames);
        if self.index_cap > 0 {
            let mask = self.index_cap - 1;
            let mut i = h as usize & mask;
            loop {
                // SAFETY: `i` is below `index_cap`.
                let slot = unsafe { *self.index.add(i) };
                if slot == 0 {
                    break;
                }
                let off = slot as usize - 1;
                // SAFETY: the arena holds the record at `off`.
                let same = unsafe { *self.record(off) } == h
                    && self
                        .frames_at(off)
                        .iter()
                        .map(|&f| f as usize)
                        .eq(frames.iter().copied());
                if same {
                    return Some(off);
                }
                i = (i + 1) & mask;
            }
        }
        if self.stacks >= MAX_STACKS || !self.reserve_stack(frames.len()) {
            return None;
        }
        let off = self.arena_used;
        let r = self.record(off);
        // SAFETY: `reserve_stack` made room for the record at `off`.
        unsafe {
            core::ptr::write_bytes(r, 0, HEAD_WORDS);
            *r = h;
            *r.add(1) = frames.len() as u64;
            for (k, &f) in frames.iter().enumerate() {
                *r.add(HEAD_WORDS + k) = f as u64;
            }
        }
        self.arena_used += HEAD_WORDS + frames.len();
        self.stacks += 1;
        self.index_insert(h, off);
        Some(off)
    }

    /// Room in the arena for a record of `depth` frames and in the index
    /// for one more stack (kept at most half full).
    fn reserve_stack(&mut self, depth: usize) -> bool {
        let need = self.arena_used + HEAD_WORDS + depth;
        if need > self.arena_words {
            let words = (self.arena_words * 2).max(need).max(1 << 15);
            let p = grow_mapping(self.arena.cast(), self.arena_words * 8, words * 8);
            if p.is_null() {
                return false;
            }
            self.arena = p.cast();
            self.arena_words = words;
        }
        if (self.stacks + 1) * 2 > self.index_cap {
            let cap = (self.index_cap * 2).max(1 << 12);
            let p = os::map(cap * 4) as *mut u32;
            if p.is_null() {
                return false;
            }
            let (old, old_cap) = (self.index, self.index_cap);
            self.index = p;
            self.index_cap = cap;
            for i in 0..old_cap {
                // SAFETY: `i` is below the old capacity.
                let slot = unsafe { *old.add(i) };
                if slot != 0 {
                    let off = slot as usize - 1;
                    // SAFETY: the record at `off` is in the arena.
                    self.index_insert(unsafe { *self.record(off) }, off);
                }
            }
            if !old.is_null() {
                os::unmap(old.cast(), old_cap * 4);
            }
        }
        true
    }

    fn index_insert(&mut self, h: u64, off: usize) {
        let mask = self.index_cap - 1;
        let mut i = h as usize & mask;
        // SAFETY: `i` stays below `index_cap`, which has a free slot.
        unsafe {
            while *self.index.add(i) != 0 {
                i = (i + 1) & mask;
            }
            *self.index.add(i) = (off + 1) as u32;
        }
    }

    /// Records a sampled block of `size` bytes at `addr` allocated from
    /// `frames`. False (nothing recorded) if the tables cannot grow.
    pub fn insert(&mut self, addr: usize, size: usize, frames: &[usize], rate: u64) -> bool {
        let depth = frames.len().min(MAX_FRAMES);
        let Some(stack) = self
            .find_or_add_stack(&frames[..depth])
            .or_else(|| self.find_or_add_stack(&frames[..depth.min(1)]))
        else {
            self.dropped += 1;
            return false;
        };
        if (self.live_count + 1) * 2 > self.live_cap && !self.grow_live() {
            self.dropped += 1;
            return false;
        }
        let mask = self.live_cap - 1;
        let mut i = hash_addr(addr) & mask;
        // SAFETY: `i` stays below `live_cap`, which has a free slot.
        unsafe {
            while (*self.live.add(i)).addr != 0 {
                invariant!((*self.live.add(i)).addr != addr);
                i = (i + 1) & mask;
            }
            *self.live.add(i) = Live { addr, size, stack };
        }
        self.live_count += 1;
        let (count, bytes) = weights(size, rate);
        let r = self.record(stack);
        // SAFETY: the record at `stack` is in the arena.
        unsafe {
            *r.add(2) = (*r.add(2)).wrapping_add(count);
            *r.add(3) = (*r.add(3)).wrapping_add(bytes);
            *r.add(4) = (*r.add(4)).wrapping_add(count);
            *r.add(5) = (*r.add(5)).wrapping_add(bytes);
        }
        true
    }

    fn grow_live(&mut self) -> bool {
        let cap = (self.live_cap * 2).max(1 << 12);
        let bytes = cap * core::mem::size_of::<Live>();
        let p = os::map(bytes) as *mut Live;
        if p.is_null() {
            return false;
        }
        let (old, old_cap) = (self.live, self.live_cap);
        let mask = cap - 1;
        for k in 0..old_cap {
            // SAFETY: `k` is below the old capacity; the new table is
            // zeroed (all empty) and has room for every old entry.
            unsafe {
                let e = *old.add(k);
                if e.addr != 0 {
                    let mut i = hash_addr(e.addr) & mask;
                    while (*p.add(i)).addr != 0 {
                        i = (i + 1) & mask;
                    }
                    *p.add(i) = e;
                }
            }
        }
        if !old.is_null() {
            os::unmap(old.cast(), old_cap * core::mem::size_of::<Live>());
        }
        self.live = p;
        self.live_cap = cap;
        true
    }

    /// Takes the live block at `addr` out of the tables (its estimate off
    /// its stack); false if no sampled block lives there.
    pub fn remove(&mut self, addr: usize, rate: u64) -> bool {
        if self.live_cap == 0 {
            return false;
        }
        let mask = self.live_cap - 1;
        let mut i = hash_addr(addr) & mask;
        // SAFETY: every index is masked below `live_cap`.
        unsafe {
            loop {
                let e = *self.live.add(i);
                if e.addr == 0 {
                    return false;
                }
                if e.addr == addr {
                    break;
                }
                i = (i + 1) & mask;
            }
            let e = *self.live.add(i);
            let (count, bytes) = weights(e.size, rate);
            let r = self.record(e.stack);
            *r.add(2) = (*r.add(2)).wrapping_sub(count);
            *r.add(3) = (*r.add(3)).wrapping_sub(bytes);
            // Backward-shift deletion: move later entries of the probe run
            // into the hole when their home slot allows it.
            let mut hole = i;
            let mut j = i;
            loop {
                j = (j + 1) & mask;
                let f = *self.live.add(j);
                if f.addr == 0 {
                    break;
                }
                let home = hash_addr(f.addr) & mask;
                // `f` may move to `hole` if `home` is not in (hole, j].
                let moves = if hole <= j {
                    home <= hole || home > j
                } else {
                    home <= hole && home > j
                };
                if moves {
                    *self.live.add(hole) = f;
                    hole = j;
                }
            }
            (*self.live.add(hole)).addr = 0;
        }
        self.live_count -= 1;
        true
    }

    /// Calls `f` on every stack, in the order they were first seen.
    pub fn for_each_stack(&self, mut f: impl FnMut(&StackView)) {
        let mut off = 0;
        while off < self.arena_used {
            let r = self.record(off);
            // SAFETY: records lie back to back up to `arena_used`.
            let (depth, v) = unsafe {
                (
                    *r.add(1) as usize,
                    [*r.add(2), *r.add(3), *r.add(4), *r.add(5)],
                )
            };
            f(&StackView {
                frames: self.frames_at(off),
                live_count: v[0],
                live_bytes: v[1],
                alloc_count: v[2],
                alloc_bytes: v[3],
            });
            off += HEAD_WORDS + depth;
        }
    }
}

/// In a forked child whose parent had other threads, one of which held
/// `PROF_LOCK` (see `fork`): the tables may be half written. They start
/// over empty (their mappings are leaked) and the lock is freed; the child
/// profiles its own allocations from here on.
pub fn reset_in_child() {
    // SAFETY: the child runs one thread, and the lock's holder is gone.
    unsafe { *TABLES.data_ptr() = Tables::EMPTY };
    PROF_LOCK.reset_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ln` and `exp_m1` agree with libm's to 1e-14 relative over the
    /// ranges the profile uses: `u` in (0, 1] of 53 random bits for `ln`;
    /// `-size / rate` for `exp_m1`, from a byte at a rate of 512 KiB to
    /// sizes thousands of times the rate.
    #[test]
    fn the_profiles_math_agrees_with_libm() {
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-14 * b.abs().max(f64::MIN_POSITIVE);
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000u64 {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            let u = ((r >> 11) + 1) as f64 / (1u64 << 53) as f64;
            assert!(close(ln(u), u.ln()), "ln({u:e}) = {} != {}", ln(u), u.ln());
            let x = -((r >> 11) as f64 / (1u64 << 53) as f64) * (10f64).powi((i % 24) as i32 - 10);
            assert!(
                close(exp_m1(x), x.exp_m1()),
                "exp_m1({x:e}) = {:e} != {:e}",
                exp_m1(x),
                x.exp_m1()
            );
        }
        for u in [1.0, 0.5, f64::MIN_POSITIVE, 1.0 - f64::EPSILON / 2.0] {
            assert!(close(ln(u), u.ln()), "ln({u:e})");
        }
        for x in [0.0, -0.5, -1e-300, -700.0, -745.5, -1e6] {
            assert!(close(exp_m1(x), x.exp_m1()), "exp_m1({x:e})");
        }
    }
}
