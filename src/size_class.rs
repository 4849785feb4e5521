//! Size classes: 16..128 B in steps of 16, four classes per doubling up
//! to 1 KiB, then eight per doubling up to 32 KiB (at most 12.5% lost to
//! rounding where blocks are big enough for it to matter), then 40, 48 and
//! 64 KiB, one block to a slab: blocks of 32-64 KiB come from slabs, not
//! from mappings of their own (`LARGE_TAIL`). Every table is
//! computed by `const fn` at compile time and tested exhaustively by the unit
//! tests at the end of this file. Also the geometry the classes are cut from:
//! segments of slabs.

use crate::sync::invariant;

/// Segments are `SEGMENT_BYTES`-aligned mappings cut into `SLAB_BYTES` slabs.
pub const SEGMENT_SHIFT: usize = 22;
pub const SEGMENT_BYTES: usize = 1 << SEGMENT_SHIFT; // 4 MiB
pub const SLAB_SHIFT: usize = 16;
pub const SLAB_BYTES: usize = 1 << SLAB_SHIFT; // 64 KiB
pub const SLABS_PER_SEGMENT: usize = SEGMENT_BYTES / SLAB_BYTES;
/// Every segment lies below `1 << ADDRESS_BITS` (`segment::mark_mapped` stops
/// the process otherwise), which the double-free test counts on
/// (`freelist::may_be_free`).
pub const ADDRESS_BITS: usize = 47;

/// The start of the segment holding address `p`.
#[inline(always)]
pub fn segment_of(p: usize) -> usize {
    p & !(SEGMENT_BYTES - 1)
}

/// Size classes served from slabs. The smallest is 16 bytes, as macOS's
/// and snmalloc's are: every block is 16-byte aligned, as glibc's are, and
/// has a second word for its sheaf tag, so every class has a sheaf (an
/// 8-byte class without one made both fast paths' sheaf tests alternate
/// with the class, a misprediction per call for a program mixing 8-byte
/// blocks with bigger ones: bench/report/HISTORY.md).
pub const NUM_CLASSES: usize = 63;
/// The largest size served from a slab; bigger requests are large blocks.
pub const MAX_SMALL_BYTES: usize = 64 * 1024;
/// The classes above 32 KiB, one block to a slab. The rounding loss (up to
/// 20%, 17% and 25%) is address space: a block's pages past what its
/// program writes are never touched, so never resident. Served as large
/// blocks, they took the large-block table's lock twice per malloc and free
/// (`stress`, blocks of 8 B to 64 KiB on four threads, was slower with
/// their own mappings). No more than three: `heap::Heap::warm` has a bit
/// per class.
const LARGE_TAIL: [u32; 3] = [40 << 10, 48 << 10, 64 << 10];
/// Requests up to this size are classified with one table load.
pub const LOOKUP_MAX: usize = 1024;

/// Object size of each class.
pub static CLASS_BYTES: [u32; NUM_CLASSES] = class_sizes();
/// `LOOKUP[(size + 7) >> 3]` is the class of `size` for `1 <= size <= 1024`.
static LOOKUP: [u8; LOOKUP_MAX / 8 + 1] = lookup_table();
/// The class of each size up to 1024 times `CLASS_SCALE`, indexed by the
/// size itself: the allocation fast path indexes the thread heap with it,
/// one load, no round-up and shift (fewer instructions than indexing by
/// `(size + 7) >> 3`: `ci/callgrind.sh`). 2 KiB, of which a program touches
/// the lines of the sizes it asks for. Size 0 has the zero-size class
/// (`ZERO_OFFSET`), when that is on; `class_of(0)` is the smallest class.
static LOOKUP_SCALED: [u16; LOOKUP_MAX + 1] = scaled_table();

pub const fn class_sizes() -> [u32; NUM_CLASSES] {
    let mut sizes = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < 8 {
        sizes[i] = 16 * (i as u32 + 1);
        i += 1;
    }
    let mut base = 128u32;
    while i < NUM_CLASSES - LARGE_TAIL.len() {
        let steps = if base < 1024 { 4 } else { 8 };
        let mut k = 1;
        while k <= steps {
            sizes[i] = base + base / steps * k;
            i += 1;
            k += 1;
        }
        base *= 2;
    }
    let mut k = 0;
    while k < LARGE_TAIL.len() {
        sizes[i + k] = LARGE_TAIL[k];
        k += 1;
    }
    sizes
}

/// The class of a size above 128 B by arithmetic: the doubling it falls in,
/// then which quarter (up to 1 KiB) or eighth of it (above 32 KiB: the
/// first, second, or later quarters, `LARGE_TAIL`).
#[inline]
pub const fn class_by_log(size: usize) -> usize {
    let n = size - 1;
    let log = (usize::BITS - 1 - n.leading_zeros()) as usize; // 7 for 129..=256
    if log < 10 {
        8 + 4 * (log - 7) + ((n >> (log - 2)) & 3)
    } else if log < 15 {
        20 + 8 * (log - 10) + ((n >> (log - 3)) & 7)
    } else {
        let quarter = (n >> 13) & 3;
        NUM_CLASSES - LARGE_TAIL.len() + if quarter < 2 { quarter } else { 2 }
    }
}

const fn lookup_table() -> [u8; LOOKUP_MAX / 8 + 1] {
    let mut t = [0u8; LOOKUP_MAX / 8 + 1];
    let mut i = 1;
    while i < t.len() {
        let size = i * 8;
        t[i] = if size <= 128 {
            (size.div_ceil(16) - 1) as u8
        } else {
            class_by_log(size) as u8
        };
        i += 1;
    }
    t
}

/// The smallest class that holds `size` bytes; `size <= MAX_SMALL_BYTES`.
/// Cost: one compare and a table load up to 1 KiB, `lzcnt` and shifts above.
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    invariant!(size <= MAX_SMALL_BYTES);
    if size <= LOOKUP_MAX {
        class_by_table(size)
    } else {
        class_by_log(size)
    }
}

/// `class_of` for `size <= LOOKUP_MAX`: one table load.
#[inline(always)]
pub fn class_by_table(size: usize) -> usize {
    LOOKUP[(size + 7) >> 3] as usize
}

/// The size of a thread heap's per-class part (`heap::ClassHeap`).
pub const CLASS_SCALE: usize = 576;

/// The offset, in a thread heap, of the class heap that never has a
/// sheaf (`heap::Heap::no_sheaf`): the `Slab::heap_offset` of slabs whose
/// frees must all reach the free slow path (the heap profile's).
pub const NO_SHEAF_OFFSET: usize = NUM_CLASSES * CLASS_SCALE;

/// The offset, in a thread heap, of the class heap of zero-size blocks
/// (`heap::Heap::zero`): the `Slab::heap_offset` of their slabs
/// (`zero`), and `scaled_class_by_table(0)`. No sheaf serves it, so
/// `malloc(0)` and the free of such a block take the slow paths, with no
/// test on the fast paths: the size table sends size 0 there.
pub const ZERO_OFFSET: usize = (NUM_CLASSES + 1) * CLASS_SCALE;
/// The class number `alloc_slow` receives for a zero-size request:
/// `ZERO_OFFSET / CLASS_SCALE`, beyond every size class.
pub const ZERO_CLASS: usize = NUM_CLASSES + 1;

/// The most blocks a sheaf holds (`sheaf_state::Sheaf`).
pub const SHEAF_MAX: usize = 32;
/// The bytes a class's sheaf may hold: `SHEAF_MAX` blocks up to 341
/// bytes, fewer above, one from 16 KiB up (see `SHEAF_CAP`).
pub const SHEAF_BYTES: usize = 16 << 10;

/// Per class, the most blocks its sheaf holds (`sheaf_budget`).
pub static SHEAF_CAP: [u32; NUM_CLASSES] = sheaf_caps();

/// A warm class's first sheaf capacity, in bytes (`SHEAF_START`).
const SHEAF_START_BYTES: usize = 1 << 10;
/// The sheaf capacity a thread's classes may grow by, beyond their starts,
/// before it takes budget from the process's (`sheaf_budget`).
pub const SHEAF_THREAD_START_BYTES: usize = 64 << 10;

/// Per class, the capacity its sheaf starts with when the class warms up:
/// `SHEAF_START_BYTES` of blocks, at least one, at most `SHEAF_CAP`.
pub static SHEAF_START: [u32; NUM_CLASSES] = sheaf_starts();

const fn sheaf_starts() -> [u32; NUM_CLASSES] {
    let sizes = class_sizes();
    let caps = sheaf_caps();
    let mut starts = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let n = SHEAF_START_BYTES / sizes[i] as usize;
        starts[i] = if n == 0 {
            1
        } else if n as u32 > caps[i] {
            caps[i]
        } else {
            n as u32
        };
        i += 1;
    }
    starts
}

const fn sheaf_caps() -> [u32; NUM_CLASSES] {
    let sizes = class_sizes();
    let mut caps = [0u32; NUM_CLASSES];
    let mut i = 0;
    while i < NUM_CLASSES {
        let n = SHEAF_BYTES / sizes[i] as usize;
        caps[i] = if n > SHEAF_MAX {
            SHEAF_MAX as u32
        } else if n == 0 {
            1
        } else {
            n as u32
        };
        i += 1;
    }
    caps
}

/// `class_by_table(size) * CLASS_SCALE`, with one load.
#[inline(always)]
pub fn scaled_class_by_table(size: usize) -> usize {
    LOOKUP_SCALED[size] as usize
}

/// For a layout of `size` bytes at `align` (a power of two) whose sum is at
/// most `LOOKUP_MAX + 1`: `scaled_class_by_table(size)`; else None. The
/// class of the size alone: the caller compares it with a block's, which
/// an alignment above 16 may have moved to another class (`class_for`).
#[inline(always)]
pub fn scaled_class_of_small_layout(size: usize, align: usize) -> Option<usize> {
    if size + align <= LOOKUP_MAX + 1 {
        invariant!(align != 0);
        // SAFETY: an alignment is at least 1, so `size <= LOOKUP_MAX`.
        Some(unsafe { *LOOKUP_SCALED.get_unchecked(size) } as usize)
    } else {
        None
    }
}

const fn scaled_table() -> [u16; LOOKUP_MAX + 1] {
    let classes = lookup_table();
    let mut t = [0u16; LOOKUP_MAX + 1];
    t[0] = ZERO_OFFSET as u16;
    let mut size = 1;
    while size < t.len() {
        t[size] = (classes[(size + 7) >> 3] as usize * CLASS_SCALE) as u16;
        size += 1;
    }
    t
}

/// The class for `size` bytes at alignment `align` (a power of two), or None
/// when the request must be a large block. Power-of-two classes are aligned
/// to their size because slabs are `SLAB_BYTES`-aligned.
#[inline]
pub fn class_for(size: usize, align: usize) -> Option<usize> {
    let want = size.max(align);
    if want > MAX_SMALL_BYTES {
        return None;
    }
    let class = class_of(want);
    if align <= 16 || CLASS_BYTES[class] as usize % align == 0 {
        Some(class)
    } else {
        Some(class_of(want.next_power_of_two()))
    }
}

/// Objects in one slab of this class.
pub const fn objects_per_slab(class: usize) -> u32 {
    (SLAB_BYTES / CLASS_BYTES[class] as usize) as u32
}

/// Constants to test "is this offset the start of one of the first `slots`
/// object slots" without dividing. For `size = odd << shift` and `inverse` the
/// inverse of `odd` modulo 2^32, `q = (offset * inverse).rotate_right(shift)`
/// equals `offset / size` when `size` divides `offset` and exceeds
/// `u32::MAX / size` otherwise (Hacker's Delight 10-17); so `q < slots` tests
/// divisibility and the bound with one compare. A slab passes the count of
/// slots it has carved (`Slab::carved`): a slot never carved was never handed
/// out, and a free of it is as invalid as one of an interior pointer.
#[derive(Clone, Copy)]
pub struct Divisor {
    pub inverse: u32,
    pub shift: u32,
}

pub static DIVISORS: [Divisor; NUM_CLASSES] = divisors();

const fn divisors() -> [Divisor; NUM_CLASSES] {
    let mut out = [Divisor {
        inverse: 0,
        shift: 0,
    }; NUM_CLASSES];
    let mut c = 0;
    while c < NUM_CLASSES {
        let size = CLASS_BYTES[c];
        let shift = size.trailing_zeros();
        let odd = size >> shift;
        // Newton's iteration for the inverse of an odd number modulo 2^32.
        let mut inv = odd;
        let mut i = 0;
        while i < 5 {
            inv = inv.wrapping_mul(2u32.wrapping_sub(odd.wrapping_mul(inv)));
            i += 1;
        }
        out[c] = Divisor {
            inverse: inv,
            shift,
        };
        c += 1;
    }
    out
}

impl Divisor {
    /// Whether `offset` (within a slab) starts one of the first `slots`
    /// object slots. Cost: mul, ror, cmp.
    #[inline(always)]
    pub fn is_slot_below(&self, offset: u32, slots: u32) -> bool {
        offset.wrapping_mul(self.inverse).rotate_right(self.shift) < slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_gets_the_smallest_class_that_holds_it() {
        for size in 0..=MAX_SMALL_BYTES {
            let c = class_of(size);
            assert!(
                CLASS_BYTES[c] as usize >= size,
                "size {size} class {}",
                CLASS_BYTES[c]
            );
            if c > 0 {
                assert!(
                    (CLASS_BYTES[c - 1] as usize) < size.max(1),
                    "size {size} fits class {}",
                    c - 1
                );
            }
        }
    }

    #[test]
    fn the_scaled_table_is_the_class_times_the_scale() {
        assert_eq!(scaled_class_by_table(0), ZERO_OFFSET);
        assert_eq!(ZERO_OFFSET, ZERO_CLASS * CLASS_SCALE);
        for size in 1..=LOOKUP_MAX {
            assert_eq!(
                scaled_class_by_table(size),
                class_of(size) * CLASS_SCALE,
                "size {size}"
            );
        }
    }

    #[test]
    fn classes_grow_and_are_16_byte_multiples_from_16() {
        assert_eq!(CLASS_BYTES[0], 16);
        assert_eq!(CLASS_BYTES[NUM_CLASSES - 1] as usize, MAX_SMALL_BYTES);
        for w in CLASS_BYTES.windows(2) {
            assert!(w[0] < w[1]);
            assert_eq!(w[1] % 16, 0);
        }
    }

    #[test]
    fn aligned_classes_are_multiples_of_the_alignment() {
        for shift in 0..=15 {
            let align = 1usize << shift;
            for size in (0..=MAX_SMALL_BYTES).step_by(7) {
                match class_for(size, align) {
                    Some(c) => {
                        let bytes = CLASS_BYTES[c] as usize;
                        assert!(bytes >= size);
                        assert_eq!(bytes % align, 0, "size {size} align {align} class {bytes}");
                    }
                    None => assert!(size.max(align) > MAX_SMALL_BYTES),
                }
            }
        }
    }

    #[test]
    fn slot_test_is_exact_for_every_offset_and_slot_bound() {
        for (c, d) in DIVISORS.iter().enumerate() {
            let size = CLASS_BYTES[c];
            let objects = objects_per_slab(c);
            for slots in [0, 1, objects / 2, objects - 1, objects] {
                for offset in 0..SLAB_BYTES as u32 {
                    let slot = offset % size == 0 && offset / size < slots;
                    assert_eq!(
                        d.is_slot_below(offset, slots),
                        slot,
                        "class {size} offset {offset} slots {slots}"
                    );
                }
            }
        }
    }
}
