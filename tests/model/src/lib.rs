//! The slab protocol of slubmalloc, model-checked: the allocator's own
//! `sync`, `size_class`, `freelist`, `slab` and `node` modules, compiled
//! against loom's atomics and cells (`--cfg loom`, see `ci/model.sh`) and
//! instantiated on slabs and nodes made for each scenario instead of the
//! process's statics. Loom runs each scenario under every interleaving of
//! its threads (and every value a load may return under the C11 memory
//! model), and fails on a cell read or written by two threads without a
//! happens-before edge between them. The modules at the protocol's edges
//! (`os`, `options`, `segment`) are stand-ins below.
#![cfg(loom)]
// The included modules have items that only the allocator uses.
#![allow(dead_code)]

#[path = "../../../src/freelist.rs"]
pub mod freelist;
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

/// The segment: a slab that leaves its node for its segment is only marked
/// FREE (`Slab::make_free`); the segment's bookkeeping is not modelled.
pub mod segment {
    pub fn free_slab(_slab: *mut crate::slab::Slab) {}
}

#[cfg(test)]
mod scenarios;
