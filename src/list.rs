//! The intrusive doubly linked list, as Linux's `list_head`: a node keeps
//! its links in itself (`Linked` names them), a list is its head and tail,
//! and a node leaves from anywhere in constant time. The thread partial
//! lists (`heap`), the node partial lists (`node`), the registry of live
//! heaps (`heap`, `heap_start`, `heap_exit`) and the segment lists (`segment`) are lists of
//! this one type. Nothing here allocates or locks: each list's owner says
//! what protects it.
//!
//! A node's links are two cells of its own, `next` and `prev`; `remove`
//! leaves both null, and off a list `next` may serve a singly linked use of
//! the node's (a slab's returned stack, the pool of heaps). A node with two
//! sets of links (a segment is on the list of all segments and maybe on
//! that of segments with free slabs) names the set by a kind, `Linked<K>`;
//! a node with one uses the default kind `()`.
//!
//! Every step leaves the list whole walked forward from its head, which is
//! how a forked child (and a signal handler reading the registry without
//! its lock) finds it: a node's links are written before it is linked in,
//! and cleared only after it is out (`store_order_fence` between the two,
//! no instruction on x86-64). `repair_in_child` then makes the back links
//! and the tail agree.

use core::marker::PhantomData;
use core::ptr;

use crate::sync::{invariant, store_order_fence, Cell};

/// A type whose nodes carry links of kind `K`.
pub trait Linked<K = ()>: Sized {
    fn next(&self) -> &Cell<*mut Self>;
    fn prev(&self) -> &Cell<*mut Self>;
}

/// A list of `T`s linked through their links of kind `K`.
/// The end of a list a node is linked in at (`List::push`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    Head,
    Tail,
}

pub struct List<T, K = ()> {
    head: Cell<*mut T>,
    tail: Cell<*mut T>,
    kind: PhantomData<K>,
}

/// Walks a list forward; reads a node's `next` before yielding it, so the
/// node yielded may leave the list.
pub struct Iter<'a, T, K> {
    next: *mut T,
    list: PhantomData<(&'a T, K)>,
}

impl<T, K> List<T, K> {
    /// Where the head is in the list, for a reader in another process
    /// (slubtop, through `anchor`).
    pub const HEAD_OFFSET: usize = core::mem::offset_of!(List<T, K>, head);
}

impl<T: Linked<K>, K> List<T, K> {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        List {
            head: Cell::new(ptr::null_mut()),
            tail: Cell::new(ptr::null_mut()),
            kind: PhantomData,
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        List {
            head: Cell::new(ptr::null_mut()),
            tail: Cell::new(ptr::null_mut()),
            kind: PhantomData,
        }
    }

    #[inline]
    pub fn first(&self) -> *mut T {
        self.head.get()
    }

    #[inline]
    pub fn last(&self) -> *mut T {
        self.tail.get()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.get().is_null()
    }

    /// Links `node`, on no list, in at `end`.
    pub fn push(&self, node: &T, end: End) {
        match end {
            End::Head => self.push_front(node),
            End::Tail => self.push_back(node),
        }
    }

    /// Links `node`, on no list, in at the head.
    pub fn push_front(&self, node: &T) {
        let n = node as *const T as *mut T;
        let head = self.head.get();
        invariant!(head.is_null() == self.tail.get().is_null());
        invariant!(!ptr::eq(head, n));
        Linked::<K>::next(node).set(head);
        Linked::<K>::prev(node).set(ptr::null_mut());
        // The node's links before the node: a walk forward from the head
        // finds it whole.
        store_order_fence();
        match head {
            // SAFETY: a list's nodes are live while they are on it.
            h if !h.is_null() => unsafe { Linked::<K>::prev(&*h).set(n) },
            _ => self.tail.set(n),
        }
        self.head.set(n);
    }

    /// Links `node`, on no list, in at the tail.
    pub fn push_back(&self, node: &T) {
        let n = node as *const T as *mut T;
        let tail = self.tail.get();
        invariant!(tail.is_null() == self.head.get().is_null());
        invariant!(!ptr::eq(tail, n));
        Linked::<K>::next(node).set(ptr::null_mut());
        Linked::<K>::prev(node).set(tail);
        store_order_fence();
        match tail {
            // SAFETY: as in `push_front`.
            t if !t.is_null() => unsafe { Linked::<K>::next(&*t).set(n) },
            _ => self.head.set(n),
        }
        self.tail.set(n);
    }

    /// Takes `node`, which is on this list, off it; its links end null.
    pub fn remove(&self, node: &T) {
        let n = node as *const T as *mut T;
        let (next, prev) = (Linked::<K>::next(node).get(), Linked::<K>::prev(node).get());
        invariant!(!prev.is_null() || ptr::eq(self.head.get(), n));
        invariant!(!next.is_null() || ptr::eq(self.tail.get(), n));
        match prev {
            // SAFETY: a node's neighbours are on the list, hence live.
            p if !p.is_null() => unsafe { Linked::<K>::next(&*p).set(next) },
            _ => self.head.set(next),
        }
        match next {
            // SAFETY: as above.
            x if !x.is_null() => unsafe { Linked::<K>::prev(&*x).set(prev) },
            _ => self.tail.set(prev),
        }
        // Out of the list before its links change: a walk that stands on
        // it still goes on.
        store_order_fence();
        Linked::<K>::next(node).set(ptr::null_mut());
        Linked::<K>::prev(node).set(ptr::null_mut());
    }

    /// Empties the list and returns its head: the nodes stay linked through
    /// `next`, to be walked and handed on one by one.
    pub fn take_all(&self) -> *mut T {
        self.tail.set(ptr::null_mut());
        self.head.replace(ptr::null_mut())
    }

    /// Forgets every node (a list rebuilt from elsewhere, a pooled heap's).
    pub fn clear(&self) {
        self.head.set(ptr::null_mut());
        self.tail.set(ptr::null_mut());
    }

    /// The nodes from head to tail. Whoever walks keeps the list still
    /// meanwhile, or reads it as a forked child or signal handler may (see
    /// the module's header).
    pub fn iter(&self) -> Iter<'_, T, K> {
        Iter {
            next: self.head.get(),
            list: PhantomData,
        }
    }

    /// In a forked child, where a thread lost in the middle of a step may
    /// have left the back links or the tail behind: walks the list forward
    /// from its head, which every step leaves whole, and sets them again.
    pub fn repair_in_child(&self) {
        let (mut prev, mut n) = (ptr::null_mut(), self.head.get());
        while !n.is_null() {
            // SAFETY: the nodes reachable from the head are live.
            let node = unsafe { &*n };
            Linked::<K>::prev(node).set(prev);
            prev = n;
            n = Linked::<K>::next(node).get();
        }
        self.tail.set(prev);
    }
}

impl<'a, T: Linked<K> + 'a, K> Iterator for Iter<'a, T, K> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        if self.next.is_null() {
            return None;
        }
        // SAFETY: a list's nodes are live while it is walked (`List::iter`).
        let node = unsafe { &*self.next };
        self.next = Linked::<K>::next(node).get();
        Some(node)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Item {
        next: Cell<*mut Item>,
        prev: Cell<*mut Item>,
        value: u32,
    }

    impl Linked for Item {
        fn next(&self) -> &Cell<*mut Item> {
            &self.next
        }

        fn prev(&self) -> &Cell<*mut Item> {
            &self.prev
        }
    }

    fn items<const N: usize>() -> [Item; N] {
        core::array::from_fn(|i| Item {
            next: Cell::new(ptr::null_mut()),
            prev: Cell::new(ptr::null_mut()),
            value: i as u32,
        })
    }

    fn values(list: &List<Item>) -> Vec<u32> {
        let forward: Vec<u32> = list.iter().map(|i| i.value).collect();
        // Backward from the tail through `prev`: the same nodes reversed.
        let mut backward = Vec::new();
        let mut n = list.last();
        while !n.is_null() {
            // SAFETY: the test's items outlive the list.
            let item = unsafe { &*n };
            backward.push(item.value);
            n = item.prev.get();
        }
        backward.reverse();
        assert_eq!(forward, backward, "the back links disagree");
        forward
    }

    #[test]
    fn pushes_and_removes_keep_both_directions() {
        let it = items::<4>();
        let list = List::<Item>::new();
        assert!(list.is_empty() && list.first().is_null());
        list.push_back(&it[1]);
        list.push_front(&it[0]);
        list.push_back(&it[2]);
        list.push_back(&it[3]);
        assert_eq!(values(&list), [0, 1, 2, 3]);
        list.remove(&it[2]);
        assert_eq!(values(&list), [0, 1, 3]);
        assert!(it[2].next.get().is_null() && it[2].prev.get().is_null());
        list.remove(&it[3]);
        assert_eq!(values(&list), [0, 1]);
        list.remove(&it[0]);
        assert_eq!(values(&list), [1]);
        list.remove(&it[1]);
        assert!(list.is_empty() && list.last().is_null());
    }

    #[test]
    fn take_all_leaves_the_nodes_linked_forward() {
        let it = items::<3>();
        let list = List::<Item>::new();
        for i in &it {
            list.push_back(i);
        }
        let mut n = list.take_all();
        assert!(list.is_empty() && list.last().is_null());
        let mut seen = Vec::new();
        while !n.is_null() {
            // SAFETY: the test's items outlive the walk.
            let item = unsafe { &*n };
            seen.push(item.value);
            n = item.next.get();
        }
        assert_eq!(seen, [0, 1, 2]);
    }

    /// A step cut short after its forward links (the node linked in at the
    /// head, the old head's back link and the tail not yet set): the repair
    /// finishes it from the head.
    #[test]
    fn the_repair_in_a_child_sets_the_back_links_and_the_tail_again() {
        let it = items::<3>();
        let list = List::<Item>::new();
        list.push_front(&it[1]);
        list.push_back(&it[2]);
        // `push_front(&it[0])` as far as its store of the head.
        it[0].next.set(list.first());
        list.head.set(&it[0] as *const Item as *mut Item);
        list.tail.set(ptr::null_mut());
        list.repair_in_child();
        assert_eq!(values(&list), [0, 1, 2]);
    }

    /// Debug builds check a removal against the list's ends: a node taken
    /// off a list it is not on (its `prev` null, yet not the head) stops
    /// the process (`invariant!`), in a forked child here.
    #[cfg(debug_assertions)]
    #[test]
    fn removing_a_node_that_is_not_on_the_list_stops_the_process() {
        let it = items::<2>();
        let list = List::<Item>::new();
        list.push_back(&it[0]);
        // SAFETY: the child only calls `remove`, which stops it, and `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: quiet the child's message on its inherited stderr.
            unsafe { libc::close(2) };
            list.remove(&it[1]);
            // SAFETY: ends the child without the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT,
            "the child was not stopped: wait status {status:#x}"
        );
    }
}
