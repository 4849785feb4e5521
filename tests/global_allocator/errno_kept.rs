//! A successful allocation leaves errno as it was (the contract `src/ffi.rs`
//! states for the C entry points, which share these paths with Rust's), also
//! when mremap fails inside and the allocator falls back: the large-block
//! cache merges freed neighbours into one piece that may span two kernel
//! mappings, which mremap refuses (EFAULT). Found by the `c_api` fuzz target
//! ("realloc success changed errno": 12).

use std::alloc::{GlobalAlloc, Layout};

use slubmalloc::SlubMalloc;

const SENTINEL: i32 = 0x7e57;

fn errno() -> i32 {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: i32) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = v };
}

/// The guard page after every large block's mapping (`large_map`).
const GUARD: usize = 4096;

/// Caches one piece of two 2 MiB blocks (and the guard page between them)
/// whose mappings the kernel keeps apart; returns its address.
fn cache_a_piece_spanning_two_mappings() -> *mut u8 {
    let piece = Layout::from_size_align(2 << 20, 16).unwrap();
    // Two big blocks next to each other: mmap places a new mapping right
    // below the last one, but try a few times.
    let (lo, hi) = (0..16)
        .find_map(|_| {
            // SAFETY: non-zero sizes; both blocks are written within them.
            unsafe {
                let a = SlubMalloc.alloc(piece);
                let b = SlubMalloc.alloc(piece);
                assert!(!a.is_null() && !b.is_null());
                let (lo, hi) = if a < b { (a, b) } else { (b, a) };
                lo.write_bytes(1, piece.size());
                hi.write_bytes(2, piece.size());
                if lo.add(piece.size() + GUARD) == hi {
                    Some((lo, hi))
                } else {
                    None // kept live, so the next pair lands elsewhere
                }
            }
        })
        .expect("no two large blocks were mapped next to each other");
    // Made accessible whole, the guard between them included, the kernel
    // would merge the two mappings into one; advice on one of them keeps
    // them apart (as moving one with mremap, or a program's own advice,
    // does in real runs; the fuzzer met it without any).
    // SAFETY: `hi` is a live block of `piece.size()` bytes, page-aligned.
    let r = unsafe { libc::madvise(hi.cast(), piece.size(), libc::MADV_NOHUGEPAGE) };
    assert_eq!(r, 0, "madvise failed");
    // SAFETY: both are live blocks of this layout; the cache merges them.
    unsafe {
        SlubMalloc.dealloc(hi, piece);
        SlubMalloc.dealloc(lo, piece);
    }
    lo
}

#[test]
fn realloc_of_a_block_spanning_two_mappings_keeps_errno() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    let lo = cache_a_piece_spanning_two_mappings();
    let both = Layout::from_size_align(4 << 20, 16).unwrap();
    // SAFETY: non-zero size.
    let p = unsafe { SlubMalloc.alloc(both) };
    assert_eq!(
        p, lo,
        "the two cached pieces were not handed out as one block"
    );
    set_errno(SENTINEL);
    // SAFETY: `p` is live with layout `both`; the new size is not zero.
    let q = unsafe { SlubMalloc.realloc(p, both, 8 << 20) };
    let e = errno();
    assert!(!q.is_null(), "realloc to 8 MiB failed");
    // SAFETY: `q` holds 8 MiB, its first 4 MiB and a page copied from `p`.
    unsafe {
        assert_eq!(*q, 1);
        assert_eq!(*q.add((2 << 20) + GUARD + 1), 2);
    }
    assert_eq!(e, SENTINEL, "a successful realloc changed errno to {e}");
    // SAFETY: live with this layout.
    unsafe { SlubMalloc.dealloc(q, Layout::from_size_align(8 << 20, 16).unwrap()) };
}

#[test]
fn allocation_that_grows_a_cached_piece_spanning_two_mappings_keeps_errno() {
    let Some(_fresh) = crate::fresh_process() else {
        return;
    };
    cache_a_piece_spanning_two_mappings();
    // Bigger than the piece, at most twice it: the cache grows the piece
    // with mremap, which fails; a fresh mapping serves.
    let l = Layout::from_size_align(6 << 20, 16).unwrap();
    set_errno(SENTINEL);
    // SAFETY: non-zero size.
    let p = unsafe { SlubMalloc.alloc(l) };
    let e = errno();
    assert!(!p.is_null(), "allocation of 6 MiB failed");
    assert_eq!(e, SENTINEL, "a successful allocation changed errno to {e}");
    // SAFETY: live with this layout.
    unsafe { SlubMalloc.dealloc(p, l) };
}
