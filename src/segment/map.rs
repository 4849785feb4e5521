//! The segment map: one byte per possible segment of the address space,
//! nonzero for ours, so that `contains` tells a pointer into one of our
//! segments from anything else with one compare, and a foreign or made-up
//! pointer is reported, never followed.

use core::cell::UnsafeCell;

use crate::os;
use crate::size_class::{ADDRESS_BITS, SEGMENT_SHIFT};
use crate::sync::{invariant, AtomicU8, Ordering};

const MAP_ENTRIES: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT);
// The segment map: one byte per possible segment (nonzero: ours), 32 MiB of
// zero pages of which only those touched become resident; a byte makes the
// test in `contains` one compare. Zeroed `.bss` declared in assembly, not a
// Rust static, whose initialiser the compiler would evaluate and copy into
// the object in every clean build of a crate that uses slubmalloc (a large
// part of its time on this crate). Hidden, as `tls`'s heap slot.
core::arch::global_asm!(
    ".pushsection .bss",
    ".balign 4096",
    ".globl slubmalloc_segment_map",
    ".hidden slubmalloc_segment_map",
    "slubmalloc_segment_map:",
    ".zero {bytes}",
    ".popsection",
    bytes = const MAP_ENTRIES,
);

#[cfg(not(target_arch = "x86_64"))]
extern "C" {
    static slubmalloc_segment_map: SegmentMap;
}

/// The segment map's bytes, read and written only as `AtomicU8`s (`entry`).
#[repr(transparent)]
struct SegmentMap(UnsafeCell<[u8; MAP_ENTRIES]>);

/// The segment map. On x86-64 its address is a `lea` written in assembly: the
/// compiler reaches a symbol it only declares (as it does a static of another
/// codegen unit) through the GOT, a load more before the byte on every `free`.
#[inline(always)]
fn map() -> &'static SegmentMap {
    #[cfg(target_arch = "x86_64")]
    let p: *const SegmentMap = {
        let p;
        // SAFETY: computes the address of the map declared above; no memory.
        unsafe {
            core::arch::asm!(
                "lea {p}, [rip + slubmalloc_segment_map]",
                p = out(reg) p,
                options(pure, nomem, nostack, preserves_flags),
            )
        };
        p
    };
    // The symbol's address, without reading it.
    #[cfg(not(target_arch = "x86_64"))]
    let p: *const SegmentMap = core::ptr::addr_of!(slubmalloc_segment_map);
    // SAFETY: the assembly above defines MAP_ENTRIES zeroed bytes for the
    // process's life, only ever accessed atomically (`entry`).
    unsafe { &*p }
}

impl SegmentMap {
    /// The entry of segment `region`; `region < MAP_ENTRIES`.
    #[inline(always)]
    fn entry(&self, region: usize) -> &AtomicU8 {
        invariant!(region < MAP_ENTRIES);
        // SAFETY: `region` is in bounds (both callers check), the byte lives as long as the
        // process, `AtomicU8` has the size and alignment of `u8`, and no
        // access to the map's bytes is anything but atomic.
        unsafe { AtomicU8::from_ptr(self.0.get().cast::<u8>().add(region)) }
    }
}

/// Whether `p` lies inside one of our segments. Cost: shift, bound check,
/// one byte compare.
#[inline(always)]
pub fn contains(p: *mut u8) -> bool {
    let region = segment_index(p as usize);
    region < MAP_ENTRIES && map().entry(region).load(Ordering::Relaxed) != 0
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

/// Marks the segment at `seg`, just mapped, in the segment map.
pub(super) fn mark_mapped(seg: usize) {
    // Relaxed: a pointer into the segment reaches another thread only through
    // a synchronizing hand-off that follows this store.
    map_entry(seg).store(1, Ordering::Relaxed);
}

/// Clears the mark of the segment at `seg`, about to be unmapped.
pub(super) fn mark_unmapped(seg: usize) {
    // Relaxed: as in `mark_mapped`; no pointer into the segment is in use.
    map_entry(seg).store(0, Ordering::Relaxed);
}

/// The segment map's entry for the segment at `seg`.
fn map_entry(seg: usize) -> &'static AtomicU8 {
    let region = seg >> SEGMENT_SHIFT;
    if region >= MAP_ENTRIES {
        os::fatal(
            "the kernel mapped a segment above the 47-bit address space",
            seg,
        );
    }
    map().entry(region)
}
