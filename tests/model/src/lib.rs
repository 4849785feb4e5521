//! The slab protocol of slubmalloc, model-checked: the allocator's own
//! `sync`, `size_class`, `freelist`, `list`, `slab` (with `slab::remote`, `slab::zero_size`,
//! which `src/slab.rs` declares by its path) and `node` modules, compiled
//! against loom's atomics and cells (`--cfg loom`, see `ci/model.sh`) and
//! instantiated on slabs and nodes made for each scenario instead of the
//! process's statics. The scenarios' frees run the shipped protocol
//! (`node::Node::free_unowned`, `node::Node::free_unowned_run`) with the
//! model's heaps as the heap side it leaves to its caller (`node::Freer`,
//! `scenarios::ModelHeap`). Loom runs each scenario under every interleaving of
//! its threads (and every value a load may return under the C11 memory
//! model), and fails on a cell read or written by two threads without a
//! happens-before edge between them; the free-list links are such cells
//! too (`links`). The modules at the protocol's edges (`os`, `options`,
//! `segment`) are stand-ins below. `percpu` models the per-CPU sheaves'
//! sections and drains (their rseq asm loom cannot run) on loom's mutexes.
#![cfg(loom)]
// The included modules have items that only the allocator uses.
#![allow(dead_code)]

#[path = "../../../src/freelist.rs"]
pub mod freelist;
#[path = "../../../src/list.rs"]
pub mod list;
#[path = "../../../src/node.rs"]
pub mod node;
#[path = "../../../src/size_class.rs"]
pub mod size_class;
#[path = "../../../src/slab.rs"]
pub mod slab;
#[path = "../../../src/sync.rs"]
pub mod sync;

/// Failure: a panic, which fails the scenario with the message.
pub mod os {
    pub fn fatal(what: &str, addr: usize) -> ! {
        panic!("slubmalloc: {what} ({addr:#x})")
    }

    pub fn random_u64() -> u64 {
        0x0123_4567_89ab_cdef
    }
}

/// The options the protocol reads: all at their defaults.
pub mod options {
    pub struct Options {
        pub freelist_random: bool,
    }

    pub fn get() -> &'static Options {
        &Options {
            freelist_random: false,
        }
    }
}

/// The free-list links: `freelist` keeps each object's first word here
/// (`load_link_word`), one loom cell per object, so that loom sees the links
/// as it sees the slab's fields and reports a link read or written by two
/// threads without a happens-before edge between them. Each run of a
/// scenario makes the cells of its slab's objects (`track`) before it
/// starts its threads, and forgets them at its end (`forget`); a link
/// outside them is a failure. Per OS thread, as the model's segment is: the
/// harness runs each test on a thread of its own, and loom runs a test's
/// threads on that one.
pub mod links {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    type Word = Rc<loom::cell::UnsafeCell<usize>>;

    std::thread_local! {
        static WORDS: RefCell<BTreeMap<usize, Word>> = const { RefCell::new(BTreeMap::new()) };
    }

    /// Tracks the first words of `objects`, each holding 0 (a zero page).
    pub fn track(objects: impl IntoIterator<Item = usize>) {
        WORDS.with(|w| {
            let mut w = w.borrow_mut();
            w.clear();
            for obj in objects {
                w.insert(obj, Rc::new(loom::cell::UnsafeCell::new(0)));
            }
        });
    }

    /// Forgets the words of the run that ends (their cells are its).
    pub fn forget() {
        WORDS.with(|w| w.borrow_mut().clear());
    }

    fn word(obj: usize) -> Word {
        WORDS
            .with(|w| w.borrow().get(&obj).cloned())
            .unwrap_or_else(|| panic!("the link of {obj:#x} is not a tracked object's"))
    }

    pub fn load(obj: usize) -> usize {
        // SAFETY: loom checks the access (`with` reports a race).
        word(obj).with(|p| unsafe { *p })
    }

    pub fn store(obj: usize, value: usize) {
        // SAFETY: as in `load`.
        word(obj).with_mut(|p| unsafe { *p = value })
    }
}

/// The segment: a slab that leaves its node for its segment is only marked
/// FREE (`Slab::make_free`); the segment's bookkeeping is not modelled.
pub mod segment {
    /// The dirty free slabs after the give-back: none.
    pub fn free_slab(_slab: *mut crate::slab::Slab) -> usize {
        0
    }
}

/// The purge that a slab back in its segment may run: not modelled.
pub mod purge {
    pub mod pass {
        pub fn slabs_freed(_dirty: usize) {}
    }
}

#[cfg(test)]
mod percpu;
#[cfg(test)]
mod scenarios;
