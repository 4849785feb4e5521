//! The `Allocator` trait of nightly Rust (`allocator_api`), behind the
//! `nightly` feature: `Vec::new_in(SlubMalloc)`, `Box::new_in(x, SlubMalloc)`.
//!
//! A zero-size request takes no memory: it gets a dangling pointer at the
//! layout's alignment (what std's `Global` returns), and freeing it does
//! nothing. Every other block comes back with all its usable bytes (a small
//! request gets its whole size class: 100 bytes come back as 112), so a
//! collection that asks can use the rounding.

use core::alloc::{AllocError, Allocator, Layout};
use core::ptr::{self, NonNull};

use crate::{alloc, SlubMalloc};

/// A block of no bytes: no memory behind it, aligned as `layout` asks.
// The feature needs a nightly compiler; the crate's MSRV is for stable.
#[allow(clippy::incompatible_msrv)]
fn empty(layout: Layout) -> NonNull<[u8]> {
    let dangling = ptr::without_provenance_mut::<u8>(layout.align());
    // SAFETY: an alignment is never zero.
    let dangling = unsafe { NonNull::new_unchecked(dangling) };
    NonNull::slice_from_raw_parts(dangling, 0)
}

/// The block at `p` (null: the allocation failed) with its usable length.
fn block(p: *mut u8) -> Result<NonNull<[u8]>, AllocError> {
    let p = NonNull::new(p).ok_or(AllocError)?;
    // SAFETY: `p` is a live block just returned by the allocator.
    let len = unsafe { alloc::usable_size(p.as_ptr()) };
    Ok(NonNull::slice_from_raw_parts(p, len))
}

/// The first byte of a block (`NonNull::as_mut_ptr` of a slice is unstable
/// behind another feature).
fn start(block: NonNull<[u8]>) -> *mut u8 {
    block.cast::<u8>().as_ptr()
}

/// Zeroes `block` from byte `from` to its end.
///
/// # Safety
/// `block` is live and writable over its whole length, `from <= len`.
unsafe fn zero_from(block: NonNull<[u8]>, from: usize) {
    // SAFETY: per the contract.
    unsafe { ptr::write_bytes(start(block).add(from), 0, block.len() - from) };
}

impl SlubMalloc {
    /// Moves a block to `new`, through `realloc` when the alignment stays
    /// (in place within a size class, `mremap` for large blocks).
    ///
    /// # Safety
    /// As for `Allocator::grow` or `shrink`, either direction.
    unsafe fn resize(
        &self,
        p: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        if old.size() == 0 {
            return self.allocate(new);
        }
        if new.size() == 0 {
            // SAFETY: per the contract, `p` is a live block of `old`.
            unsafe { self.deallocate(p, old) };
            return Ok(empty(new));
        }
        if old.align() == new.align() {
            // SAFETY: a live block of `old`, checked against it; on
            // failure (null) it stays intact, as the trait requires.
            return block(unsafe {
                alloc::realloc_with_layout(p.as_ptr(), old.size(), old.align(), new.size())
            });
        }
        let q = self.allocate(new)?;
        // SAFETY: both blocks are live and hold the bytes copied; the old
        // one is freed once.
        unsafe {
            let n = old.size().min(new.size());
            ptr::copy_nonoverlapping(p.as_ptr(), start(q), n);
            self.deallocate(p, old);
        }
        Ok(q)
    }
}

// SAFETY: blocks stay valid until deallocated, through moves and clones of
// the (stateless) allocator; every size and alignment is honoured or fails
// with AllocError; nothing unwinds.
unsafe impl Allocator for SlubMalloc {
    #[inline]
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(empty(layout));
        }
        block(alloc::alloc(layout.size(), layout.align()))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if layout.size() == 0 {
            return Ok(empty(layout));
        }
        let b = block(alloc::alloc_zeroed(layout.size(), layout.align()))?;
        // The trait promises the whole block zeroed; `alloc_zeroed` clears
        // the request only.
        // SAFETY: the block is live; the request fits in it.
        unsafe { zero_from(b, layout.size()) };
        Ok(b)
    }

    #[inline]
    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: a live block of ours; any size between the request
            // and the usable length passes the layout's check (`layout`).
            unsafe { alloc::free_with_layout(ptr.as_ptr(), layout.size(), layout.align()) }
        }
    }

    unsafe fn grow(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: per the trait's contract.
        unsafe { self.resize(ptr, old, new) }
    }

    unsafe fn grow_zeroed(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: per the trait's contract.
        let b = unsafe { self.resize(ptr, old, new) }?;
        // SAFETY: the block is live; the old contents end within it.
        unsafe { zero_from(b, old.size()) };
        Ok(b)
    }

    unsafe fn shrink(
        &self,
        ptr: NonNull<u8>,
        old: Layout,
        new: Layout,
    ) -> Result<NonNull<[u8]>, AllocError> {
        // SAFETY: per the trait's contract.
        unsafe { self.resize(ptr, old, new) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;
    use std::vec::Vec;

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn zero_size_requests_take_no_memory() {
        for align in [1, 8, 64, 4096] {
            let b = SlubMalloc.allocate(layout(0, align)).unwrap();
            assert_eq!(b.len(), 0);
            assert_eq!(start(b) as usize, align);
            // SAFETY: the block just allocated with this layout.
            unsafe { SlubMalloc.deallocate(b.cast(), layout(0, align)) };
            assert_eq!(
                SlubMalloc.allocate_zeroed(layout(0, align)).unwrap().len(),
                0
            );
        }
    }

    #[test]
    fn allocate_returns_the_usable_size() {
        for (size, align) in [(1, 1), (100, 8), (1000, 64), (5000, 16), (100_000, 8)] {
            let l = layout(size, align);
            let b = SlubMalloc.allocate(l).unwrap();
            let p = start(b);
            assert_eq!(p as usize % align, 0);
            assert!(b.len() >= size);
            // SAFETY: a live block.
            assert_eq!(b.len(), unsafe { crate::usable_size(p) });
            if let Some(class) = crate::class_size(size) {
                if align <= 16 {
                    assert_eq!(b.len(), class, "{size} B comes back as its class");
                }
            }
            // SAFETY: the whole returned length is ours to write.
            unsafe {
                ptr::write_bytes(p, 0xa5, b.len());
                SlubMalloc.deallocate(b.cast(), l);
            }
        }
    }

    #[test]
    fn a_block_can_be_freed_with_its_returned_length() {
        let l = layout(100, 8);
        let b = SlubMalloc.allocate(l).unwrap();
        // SAFETY: the trait allows any size between the request and the length.
        unsafe { SlubMalloc.deallocate(b.cast(), layout(b.len(), 8)) };
    }

    #[test]
    fn zeroed_blocks_are_zero_over_their_whole_length() {
        for size in [24, 100, 3000] {
            let l = layout(size, 8);
            for _ in 0..4 {
                // Dirty a block of the class and free it: the next request reuses it.
                let b = SlubMalloc.allocate(l).unwrap();
                // SAFETY: a live block of that length.
                unsafe {
                    ptr::write_bytes(start(b), 0xff, b.len());
                    SlubMalloc.deallocate(b.cast(), l);
                }
                let z = SlubMalloc.allocate_zeroed(l).unwrap();
                // SAFETY: as above.
                let bytes = unsafe { z.as_ref() };
                assert!(bytes.iter().all(|&x| x == 0));
                // SAFETY: as above.
                unsafe { SlubMalloc.deallocate(z.cast(), l) };
            }
        }
    }

    #[test]
    fn grow_and_shrink_keep_the_contents() {
        // SAFETY: each block is used within its length and freed once.
        unsafe {
            let mut l = layout(8, 8);
            let mut b = SlubMalloc.allocate(l).unwrap();
            ptr::write_bytes(start(b), 7, 8);
            for (size, align) in [(100, 8), (5000, 8), (200_000, 8), (300_000, 4096), (50, 16)] {
                let n = layout(size, align);
                b = if size >= l.size() {
                    SlubMalloc.grow_zeroed(b.cast(), l, n).unwrap()
                } else {
                    SlubMalloc.shrink(b.cast(), l, n).unwrap()
                };
                assert!(b.len() >= size && start(b) as usize % align == 0);
                let bytes = b.as_ref();
                assert!(bytes[..8].iter().all(|&x| x == 7));
                assert!(bytes[8..size.min(l.size())].iter().all(|&x| x == 0));
                l = n;
            }
            let z = SlubMalloc.shrink(b.cast(), l, layout(0, 8)).unwrap();
            assert_eq!(z.len(), 0);
            let g = SlubMalloc
                .grow(z.cast(), layout(0, 8), layout(10, 8))
                .unwrap();
            SlubMalloc.deallocate(g.cast(), layout(10, 8));
        }
    }

    #[test]
    fn collections_allocate_in_slubmalloc() {
        let mut v: Vec<u64, SlubMalloc> = Vec::with_capacity_in(1000, SlubMalloc);
        v.extend(0..1000);
        let b = Box::new_in([1u8; 300], SlubMalloc);
        // SAFETY: live blocks; a pointer that is not ours would stop the
        // process with a message.
        unsafe {
            assert!(crate::usable_size(v.as_ptr() as *mut u8) >= 8000);
            assert!(crate::usable_size(&*b as *const [u8; 300] as *mut u8) >= 300);
        }
        assert_eq!(v.iter().sum::<u64>(), 999 * 1000 / 2);
        drop((v, b));
    }
}
