//! The transitions of a slab of zero-size blocks (`zero`): FREE -> OWNED
//! by the static owner of those slabs, and back, under the orphan heap's
//! lock. Methods of `Slab`, as every transition is (`slab`'s docs); a file
//! of their own for the length.

use crate::size_class::{SLAB_BYTES, ZERO_OFFSET};
use crate::slab::{Divisor, Slab, State, FREE_WORD, OWNED_TAG};
use crate::sync::{invariant, store_order_fence, Ordering};

impl Slab {
    /// FREE -> OWNED by `owner`, a slab fresh from its segment for
    /// zero-size blocks (`zero`), `objects` of them `1 << stride_shift`
    /// bytes apart, all carved, none live: the slot test passes for each
    /// block's start alone, and every free of one reaches the free slow
    /// path (the class heap of `ZERO_OFFSET`, which has no sheaf). Its
    /// blocks' memory is the caller's to make inaccessible.
    pub fn init_zero(&self, owner: usize, objects: u32, stride_shift: u32) {
        invariant!(self.state() == State::Free);
        invariant!(objects as usize == SLAB_BYTES >> stride_shift && objects <= u64::BITS);
        // Relaxed and first, as in `init`.
        self.word.0.store(OWNED_TAG, Ordering::Relaxed);
        store_order_fence();
        // The fields of an empty slab of the smallest class, then those of
        // zero-size blocks.
        self.prepare(0);
        self.size.set(0);
        self.heap_offset.set(ZERO_OFFSET as u16);
        // A stride of a power of two: the inverse of 1, the shift.
        self.div.set(Divisor {
            inverse: 1,
            shift: stride_shift,
        });
        self.objects.set(objects);
        // Relaxed: as in `prepare`.
        self.carved.store(objects, Ordering::Relaxed);
        self.zero_live.set(0);
        self.owner.store(owner, Ordering::Relaxed);
    }

    /// OWNED -> FREE, a slab of zero-size blocks with none live, on no
    /// list, that goes back to its segment (`zero`). `heap_offset`,
    /// `objects` and `div` stay, until the slab serves again: a later free
    /// of one of its blocks reaches `zero` still, which names it a double
    /// free.
    pub fn end_zero(&self) {
        invariant!(self.state() == State::Owned && self.zero_live.get() == 0);
        invariant!(!self.on_partial.get());
        self.owner.store(0, Ordering::Relaxed);
        // Relaxed: as in `make_free`.
        self.carved.store(0, Ordering::Relaxed);
        self.word.0.store(FREE_WORD, Ordering::Relaxed);
    }
}
