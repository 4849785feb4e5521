//! Large blocks' mappings: made fresh, grown with their pages, resized,
//! unmapped, each counted in the mapped bytes. `large` decides which.
//!
//! Every large block's mapping ends with a guard page: `len` bytes for the
//! block, then `GUARD_BYTES` that fault when read or written, so that a
//! read or write just past the block's usable size faults rather than
//! reach another mapping. A cached piece keeps the guard after it
//! (`large_cache`); a block resized keeps one after its new end.
//!
//! A guard is made one of two ways, chosen at the first (`Guards`): a
//! kernel guard marker (Linux 6.13+, `os::install_guard_markers`), a page
//! table entry inside the block's mapping, so neighbouring mappings still
//! merge and a block is one kernel mapping or less; or, where the kernel
//! has none (or `SLUBMALLOC_GUARD_MARKERS=0`), PROT_NONE, a kernel mapping
//! of its own (a large block is two). A marker moves with its page under
//! mremap and stays under mprotect, so a guard that becomes block memory
//! (cached pieces merged, a block grown) is taken off first (`open`). Past
//! `vm.max_map_count` the kernel refuses to split a mapping for a
//! PROT_NONE guard, and the block goes out without one (`set_guard`); a
//! marker it refuses (a mapping locked by `mlockall`) leaves the block
//! without one too.

use core::ptr;

use crate::counters;
use crate::options;
use crate::os::{self, PAGE_BYTES};
use crate::purge::{self, Pages};
use crate::sync::{AtomicU8, Ordering};

/// The guard page after every large block's mapping, a part of it. The
/// mapped bytes count no guard page: it holds no memory (and so glibc's
/// `system` stays its `arena` plus `hblkhd`, `glibc_info`).
pub const GUARD_BYTES: usize = PAGE_BYTES;

/// Counts `pages` guard pages that became bytes of a cached piece (cached
/// neighbours merged across them), or with a negative count bytes of a
/// piece that became a guard (a split): in the mapped bytes.
pub fn count_guards_opened(pages: isize) {
    let bytes = pages * GUARD_BYTES as isize;
    let g = counters::global();
    g.large_mapped.fetch_add(bytes as u64, Ordering::Relaxed);
    g.mapped_changed(bytes as i64);
}

/// A fresh mapping of `len` bytes at `align` and its guard, counted; None
/// (errno ENOMEM) if the kernel refuses.
pub fn map_fresh(len: usize, align: usize) -> Option<usize> {
    let Some(with_guard) = len.checked_add(GUARD_BYTES) else {
        os::set_enomem();
        return None;
    };
    let m = os::map_aligned(with_guard, align.max(PAGE_BYTES));
    if m.is_null() {
        return None;
    }
    let g = counters::global();
    g.large_mapped.fetch_add(len as u64, Ordering::Relaxed);
    g.mapped_changed(len as i64);
    purge::count_taken(len as u64, Pages::Fresh);
    set_guard(m as usize + len);
    Some(m as usize)
}

/// How this process makes guard pages (`GUARDS`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Guards {
    /// None made yet: the first guard decides.
    Undecided,
    /// Kernel guard markers.
    Markers,
    /// PROT_NONE.
    Protection,
}

/// `Guards`, decided once, at the first guard: a fresh mapping's page, so
/// a marker refused there (EINVAL: a kernel before 6.13) means PROT_NONE
/// for the whole process. Until then no guard exists, so nothing reads it
/// to take one off.
static GUARDS: AtomicU8 = AtomicU8::new(Guards::Undecided as u8);

fn guards() -> Guards {
    // Relaxed: each thread that finds it undecided decides the same.
    match GUARDS.load(Ordering::Relaxed) {
        x if x == Guards::Markers as u8 => Guards::Markers,
        x if x == Guards::Protection as u8 => Guards::Protection,
        _ => Guards::Undecided,
    }
}

/// Makes the page at `at`, the one after a block of ours, its guard. Past
/// `vm.max_map_count` the kernel refuses a PROT_NONE guard (the page would
/// split a kernel mapping): it stays accessible, a page of the block's
/// mapping that nothing uses, and the block has no guard.
pub fn set_guard(at: usize) {
    let page = at as *mut u8;
    match guards() {
        Guards::Markers => {
            os::install_guard_markers(page, GUARD_BYTES);
        }
        Guards::Protection => {
            os::make_inaccessible(page, GUARD_BYTES);
        }
        Guards::Undecided => {
            let kind =
                if options::get().guard_markers && os::install_guard_markers(page, GUARD_BYTES) {
                    Guards::Markers
                } else {
                    os::make_inaccessible(page, GUARD_BYTES);
                    Guards::Protection
                };
            // Relaxed: see `guards`.
            GUARDS.store(kind as u8, Ordering::Relaxed);
        }
    }
}

/// What of a cached piece is inaccessible until it is handed out (`open`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Closed {
    /// Some of its bytes were made PROT_NONE (at a free).
    pub protected: bool,
    /// Some of its pages are guards (of pieces that merged).
    pub guards: bool,
}

impl Closed {
    pub const NOTHING: Closed = Closed {
        protected: false,
        guards: false,
    };
    pub const ALL: Closed = Closed {
        protected: true,
        guards: true,
    };
}

/// Makes `base..base + len`, ours, readable and writable whole, as
/// `closed` says it is not: the guards in it taken off (PROT_NONE ones
/// with the rest), the protected parts opened. False if the kernel refuses
/// (past `vm.max_map_count`: opening part of a kernel mapping splits it).
pub fn open(base: usize, len: usize, closed: Closed) -> bool {
    let p = base as *mut u8;
    match guards() {
        Guards::Markers => {
            (!closed.guards || os::remove_guard_markers(p, len))
                && (!closed.protected || os::make_accessible(p, len))
        }
        _ => !(closed.protected || closed.guards) || os::make_accessible(p, len),
    }
}

/// What a new block must hold (`large::alloc`, `grow_cached`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Contents {
    /// Anything (`malloc`).
    Any,
    /// Zeros (`calloc`).
    Zeroed,
}

/// Grows the cached mapping `base..base + old` and its guard (taken out of
/// the cache, so ours; `closed` as the cache kept it) to `len` bytes and a
/// guard after them: made accessible whole, its guard included (`open`),
/// then resized (`resize_mapping`): its resident pages move along, only
/// the new part faults in. None if that fails (the old mapping is
/// unmapped). `Contents::Zeroed`: the old part is cleared; the new part is
/// fresh zero pages.
pub fn grow_cached(
    base: usize,
    old: usize,
    closed: Closed,
    len: usize,
    contents: Contents,
) -> Option<usize> {
    let (old_all, len_all) = (old + GUARD_BYTES, len + GUARD_BYTES);
    let with_guard = Closed {
        guards: true,
        ..closed
    };
    let grown = if open(base, old_all, with_guard) {
        resize_mapping(base, old_all, len_all)
    } else {
        None
    };
    let Some(q) = grown else {
        unmap_block(base, old);
        return None;
    };
    let g = counters::global();
    g.large_mapped
        .fetch_add((len - old) as u64, Ordering::Relaxed);
    g.mapped_changed((len - old) as i64);
    purge::count_taken(old as u64, Pages::Resident);
    purge::count_taken((len - old) as u64, Pages::Fresh);
    if contents == Contents::Zeroed {
        // SAFETY: the first `old_all` bytes of the new mapping are ours
        // (`old < len`, both whole pages): the old guard's page may have
        // held a block's bytes before a split made it a guard.
        unsafe { ptr::write_bytes(q as *mut u8, 0, old_all) };
    }
    set_guard(q + len);
    Some(q)
}

/// Resizes the live block `base..base + old` (its guard after it) to `len`
/// bytes and a guard after them, contents kept (`large::realloc`): a
/// shrink unmaps the tail past the new guard; a growth makes the old guard
/// accessible and resizes the whole (`resize_mapping`). None if the kernel
/// refuses; the block is then intact, its guard too.
pub fn resize_block(base: usize, old: usize, len: usize) -> Option<usize> {
    if len < old {
        set_guard(base + len);
        os::unmap((base + len + GUARD_BYTES) as *mut u8, old - len);
        return Some(base);
    }
    let guard = Closed {
        protected: false,
        guards: true,
    };
    if !open(base + old, GUARD_BYTES, guard) {
        return None;
    }
    let Some(q) = resize_mapping(base, old + GUARD_BYTES, len + GUARD_BYTES) else {
        set_guard(base + old);
        return None;
    };
    set_guard(q + len);
    Some(q)
}

/// Resizes the mapping `base..base + old` to `len` bytes, its contents kept,
/// with mremap; a growing one that mremap cannot move (EFAULT: cached pieces
/// merged across kernel mappings, one moved by an earlier mremap keeps its
/// own) with `grow_in_parts`. None if the kernel refuses; the mapping is
/// then intact.
fn resize_mapping(base: usize, old: usize, len: usize) -> Option<usize> {
    let q = os::remap(base as *mut u8, old, len) as usize;
    if q != 0 {
        return Some(q);
    }
    if len <= old {
        return None;
    }
    grow_in_parts(base, old, len)
}

/// Grows a mapping made of several kernel mappings, contents kept: its
/// first kernel mapping grows to `len` (and moves, as the next one follows
/// it), then each next one moves to its place after it; a part the kernel
/// will not move is copied (its pages fault in) and unmapped. None if the
/// first does not grow (the mapping intact).
fn grow_in_parts(base: usize, old: usize, len: usize) -> Option<usize> {
    let first = os::first_mapping_len(base as *mut u8, old);
    let q = os::remap(base as *mut u8, first, len) as usize;
    if q == 0 {
        return None;
    }
    let mut done = first;
    while done < old {
        let (from, to, rest) = (base + done, q + done, old - done);
        if os::remap_to(from as *mut u8, rest, to as *mut u8) {
            break;
        }
        let part = os::first_mapping_len(from as *mut u8, rest);
        if !os::remap_to(from as *mut u8, part, to as *mut u8) {
            // SAFETY: `from..from + rest` is the rest of the old mapping,
            // `to..to + rest` the same part of the new one, both ours.
            unsafe { ptr::copy_nonoverlapping(from as *const u8, to as *mut u8, rest) };
            // Counted as moved: the caller counts the growth only.
            os::unmap(from as *mut u8, rest);
            break;
        }
        done += part;
    }
    Some(q)
}

/// Unmaps a large block's mapping of `len` bytes and its guard, counted.
pub fn unmap_block(base: usize, len: usize) {
    os::unmap(base as *mut u8, len + GUARD_BYTES);
    let g = counters::global();
    g.large_mapped.fetch_sub(len as u64, Ordering::Relaxed);
    g.mapped_changed(-(len as i64));
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Two kernel mappings side by side, each moved there by mremap after
    /// its pages were written (so the kernel cannot merge them), as cached
    /// pieces that merged: `first_mapping_len` finds where the first ends,
    /// and `resize_mapping` (one mremap fails) moves both into the grown
    /// mapping with their pages, the rest fresh zeros.
    #[test]
    fn a_piece_across_two_kernel_mappings_grows_with_its_pages() {
        let (a_len, b_len) = (3 * PAGE_BYTES, 5 * PAGE_BYTES);
        let old = a_len + b_len;
        let region = os::map(old) as usize;
        let a = os::map(a_len) as usize;
        let b = os::map(b_len) as usize;
        assert!(region != 0 && a != 0 && b != 0, "mmap failed");
        // SAFETY: fresh mappings of these lengths, ours.
        unsafe {
            ptr::write_bytes(a as *mut u8, 1, a_len);
            ptr::write_bytes(b as *mut u8, 2, b_len);
        }
        assert!(os::remap_to(a as *mut u8, a_len, region as *mut u8));
        assert!(os::remap_to(
            b as *mut u8,
            b_len,
            (region + a_len) as *mut u8
        ));
        assert_eq!(os::first_mapping_len(region as *mut u8, old), a_len);
        let len = 4 * old;
        let q = resize_mapping(region, old, len).expect("the parts moved");
        // SAFETY: `q..q + len` is the grown mapping, ours.
        let bytes = unsafe { core::slice::from_raw_parts(q as *const u8, len) };
        assert!(bytes[..a_len].iter().all(|&x| x == 1), "first part");
        assert!(bytes[a_len..old].iter().all(|&x| x == 2), "second part");
        assert!(bytes[old..].iter().all(|&x| x == 0), "new part");
        os::unmap(q as *mut u8, len);
    }
}
