//! Cold classes served from shared slabs: a thread that has taken only a
//! few objects of a class gets no slab of its own for it. Its allocations
//! take single objects from a slab on the class's node list, under the node
//! lock (the slab stays LISTED, `Node::take_object`), and its frees of them
//! already take that path (`Node::free_listed`). Only a class that stays
//! busy, `SHARED_OBJECTS` objects, gets an owned active slab and the fast
//! paths. So a thread costs what it uses: 4,000 threads that each hold 4
//! blocks of 8 sizes share a few slabs per class instead of pinning the
//! touched pages of 32,000 mostly empty ones, and the page of their heaps
//! that they write for this is the header (`Heap::shared_taken`); the
//! events are counted on the node, under its lock.

use core::ptr;

use crate::heap::Heap;
use crate::node::NODES;
use crate::options;
use crate::purge::pass;
use crate::segment;

/// Objects a thread takes from shared slabs per class before the class gets
/// a slab of its own. The cost of one, against the fast path: a node lock
/// round trip for the allocation and one for the free. Fewer warmed every
/// class up in a program of many threads that each hold a few blocks of
/// many sizes (`benches/c/live_threads.c`), each class then holding a slab
/// per thread. A busy class reaches 32 within microseconds.
pub const SHARED_OBJECTS: u8 = 32;

/// The allocation of an object of `class` for `heap` if the class is cold
/// there: Some(object), or Some(null) out of memory. None if the class is
/// warm (or has just become warm): the caller refills as usual.
///
/// With `SLUBMALLOC_FREELIST_RANDOM=1` every class is warm from the start:
/// a shared slab hands out its slots one at a time, in address order, and
/// randomising needs a batch to shuffle.
#[inline]
pub fn take_if_cold(heap: &Heap, class: usize) -> Option<*mut u8> {
    if heap.is_warm(class) {
        return None;
    }
    let taken = &heap.shared_taken[class];
    if taken.get() >= SHARED_OBJECTS || options::get().freelist_random {
        heap.warm_up(class);
        return None;
    }
    taken.set(taken.get() + 1);
    Some(take_shared(class))
}

/// One object of `class` from a listed slab, listing a fresh slab if the
/// node has none; null (errno ENOMEM) if no slab can be had.
#[cold]
#[inline(never)]
fn take_shared(class: usize) -> *mut u8 {
    let node = &NODES[class];
    let _g = node.lock.guard();
    let (p, _) = node.take_object();
    if !p.is_null() {
        return p;
    }
    // A node lock, then the segments' (the lock order: `sync`); a purge
    // that is due runs first, as before any slab a path takes.
    pass::purge_if_due();
    let s = segment::alloc_slab();
    if s.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a free slab from the segment lock is ours alone.
    node.add_fresh(unsafe { &*s }, class);
    node.take_object().0
}
