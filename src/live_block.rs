//! The small block a pointer names, for the calls that read a block without
//! freeing it (`realloc`, `malloc_usable_size`, Rust's `usable_size`): its
//! class and its usable size, once it is known to be a live block. A
//! pointer that starts no block stops the process as its free would; a
//! block freed already stops it with a message that names the call. A
//! block is known to be free when its slab is FREE (it went back to its
//! segment), when it carries its sheaf tag (it waits in a sheaf or a barn),
//! or when its first word is a free-list link (it is on one of its slab's
//! lists): every path that hands a block out clears both words
//! (`freelist::clear_link`, `freelist::take_sheaf_block`), and neither is a
//! value a program stores, short of reading the allocator's secret.

use crate::debug;
use crate::freelist::{self, holds_link_with, HARDENING};
use crate::os;
use crate::segment::slab_of;
use crate::slab::{invalid_free, Slab, State};

/// The call that reads a block, which its stop names.
#[derive(Clone, Copy)]
pub enum Reader {
    /// `realloc` (Rust's too, and the `Allocator` trait's grow and shrink).
    Realloc,
    /// `malloc_usable_size` (Rust's `usable_size` too).
    UsableSize,
}

/// The class of the small block `p`, checked live (`realloc` in place).
///
/// # Safety
/// `p` lies inside a mapped segment and is no medium block.
pub unsafe fn class_of(p: *mut u8, reader: Reader) -> usize {
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    check_live(slab, p, reader);
    slab.class.get() as usize
}

/// The bytes usable at the small block `p`, checked live: its class's
/// size, or in debug mode the size it was asked for.
///
/// # Safety
/// As for `class_of`.
pub unsafe fn usable_size(p: *mut u8, reader: Reader) -> usize {
    // SAFETY: per the contract, `p`'s segment header is mapped.
    let slab = unsafe { &*slab_of(p) };
    check_live(slab, p, reader);
    if debug::enabled() {
        return debug::requested_size(slab, p);
    }
    slab.size.get() as usize
}

/// Stops the process unless `p` starts a live block of `slab`: a free slot
/// (of a FREE slab, with its sheaf tag, or with a free-list link) is a
/// freed block, any other pointer an invalid one.
fn check_live(slab: &Slab, p: *mut u8, reader: Reader) {
    if slab.state() == State::Free {
        if slab.is_slot_start(p) {
            freed(p, reader);
        }
        invalid_free(p);
    }
    if !slab.is_object_start(p) {
        invalid_free(p);
    }
    let secret = freelist::secret();
    // SAFETY: `p` starts an object of the slab (16 bytes or more), mapped.
    if HARDENING && unsafe { slab.in_a_sheaf(secret, p) || holds_link_with(secret, p) } {
        freed(p, reader);
    }
}

/// Stops the process: `reader` was given `p`, a block freed already.
#[cold]
#[inline(never)]
fn freed(p: *mut u8, reader: Reader) -> ! {
    let what = match reader {
        Reader::Realloc => "realloc of a freed block (use after free)",
        Reader::UsableSize => "malloc_usable_size of a freed block (use after free)",
    };
    os::fatal(what, p as usize)
}
