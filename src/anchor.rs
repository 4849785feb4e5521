//! The anchor: one exported static, `slubmalloc_anchor`, that tells a reader
//! outside the process (slubtop, in this repository's `slubtop/` package)
//! where the allocator keeps what `stats()` sums and how it is laid out, so
//! that the reader depends on this one versioned table and not on guesses
//! about Rust's struct layout.
//!
//! The reader finds the symbol in the ELF symbol table of the preload
//! library or of a Rust executable, adds the load address from
//! `/proc/PID/maps`, and reads with `process_vm_readv`. The process pays
//! nothing for it: the table is constant (relocated once by the loader in a
//! position-independent object), nothing here runs, and the only word the
//! allocator keeps for outside readers is the registry's generation
//! (`heap::REGISTRY_GENERATION`), written on the slow paths that create a
//! thread's heap or end a thread.
//!
//! Layout version 5 (`ANCHOR_VERSION`): every field below, in this order,
//! 64-bit addresses; the counters of a class heap in the order of
//! `counters::Ev`; what the reader computes from them is `stats::build`'s
//! arithmetic. Change any of that and the version changes with it, here and
//! in slubtop's reader (`slubtop/src/snapshot.rs`), whose test against a
//! running program (`tests/processes/slubtop.rs`) fails until both agree.

use core::mem::{offset_of, size_of};

use crate::counters::{Counters, Ev, Global, GLOBAL};
use crate::cpu_sheaf::{Region, BOUND, CAPACITY_OFFSET, CLASS_BEGIN, DRAINS, REGIONS, RESTARTS};
use crate::heap::{ClassHeap, Heap, Registry, ORPHAN, PROF, REGISTRY, REGISTRY_GENERATION};
use crate::list::List;
use crate::node::{Node, NODES};
use crate::os::{MMAPS, PURGED_BYTES, PURGES};
use crate::rseq::PERCPU_MODE;
use crate::size_class::{CLASS_BYTES, NUM_CLASSES, SEGMENT_BYTES, SLAB_BYTES};
use crate::sync::{AtomicPtr, AtomicU64, AtomicUsize};

/// The first eight bytes of the anchor.
pub const ANCHOR_MAGIC: [u8; 8] = *b"SLUBANCH";
/// The layout of `Anchor` and of what it points to, as the reader must know it.
pub const ANCHOR_VERSION: u32 = 5;

/// Where the statistics live. Addresses are the process's own; offsets are
/// bytes from the start of the struct named.
#[repr(C)]
pub struct Anchor {
    magic: [u8; 8],
    version: u32,
    /// `size_of::<Anchor>()`, so that a reader can check it read it whole.
    anchor_bytes: u32,
    num_classes: u32,
    /// Counters per class in a thread's block (`Ev::COUNT`).
    events: u32,
    slab_bytes: u64,
    segment_bytes: u64,
    /// `[u32; num_classes]`: each class's object size.
    class_bytes: *const u32,
    /// Even while the registry is still, odd while it changes; read before
    /// and after the registry and the heaps it lists.
    registry_generation: *const AtomicU64,
    registry: *const Registry,
    /// `*mut Heap`: the first live heap, linked through `heap_next`.
    registry_live: u32,
    /// `[[u64; events]; num_classes]`: the exited threads' counters.
    registry_retired: u32,
    registry_threads_alive: u32,
    registry_threads_exited: u32,
    /// `*mut Heap` each: the orphan heap and the heap profile's heap, summed
    /// as live heaps are.
    orphan_heap: *const AtomicPtr<Heap>,
    prof_heap: *const AtomicPtr<Heap>,
    heap_next: u32,
    /// The class heaps start a heap: class `c`'s counters are at
    /// `c * class_heap_bytes + class_heap_counters`.
    class_heap_bytes: u32,
    class_heap_counters: u32,
    /// `[Node; num_classes]`, `node_bytes` apart.
    node_bytes: u32,
    nodes: *const Node,
    /// Offsets in a node: two `usize` gauges, six `u64` counters, then
    /// the `usize` gauge of FULL slabs.
    node_nr_partial: u32,
    node_free_objects: u32,
    node_added_head: u32,
    node_added_tail: u32,
    node_allocs_listed: u32,
    node_frees_listed: u32,
    node_slabs_new: u32,
    node_slabs_freed: u32,
    node_full_slabs: u32,
    /// Process-wide `u64` counters: segments, large blocks, their bytes,
    /// their mappings' bytes, the large cache's bytes, its limit, its hits,
    /// background purges, purger starts, mmaps, purges, bytes purged,
    /// medium blocks, their bytes, the sheaf budget the threads took,
    /// zero-size blocks, the per-CPU mode, rseq restarts, CPU drains.
    globals: [*const AtomicU64; 19],
    /// Per-CPU mode: `[*mut Region; *cpu_bound]`, each CPU's sheaves, null
    /// until first used (the pointer to the array null in the fallback).
    /// A region starts with a `u32` header per class, `current` in its low
    /// 16 bits: the class holds `current - cpu_class_begin[class]` blocks.
    cpu_regions: *const AtomicPtr<AtomicPtr<Region>>,
    cpu_bound: *const AtomicUsize,
    /// `[u32; num_classes]`.
    cpu_class_begin: *const u32,
    /// Offset in a region: its bytes of capacity, a `u64`.
    cpu_region_capacity: u32,
}

// SAFETY: the anchor is never written; its pointers name statics.
unsafe impl Sync for Anchor {}

/// The address of a field of the process-wide counters.
const fn global_field(offset: usize) -> *const AtomicU64 {
    // SAFETY: `offset` is a field's offset within GLOBAL (the callers use
    // `offset_of!(Global, ...)`).
    unsafe { (&raw const GLOBAL).cast::<u8>().add(offset).cast() }
}

/// The table slubtop reads. `#[used]` and an exported name keep it in both
/// the preload library (in its dynamic symbols) and any Rust executable that
/// links the crate (in its symbol table).
#[used]
#[export_name = "slubmalloc_anchor"]
#[link_section = ".slubmalloc.anchor"]
pub static ANCHOR: Anchor = Anchor {
    magic: ANCHOR_MAGIC,
    version: ANCHOR_VERSION,
    anchor_bytes: size_of::<Anchor>() as u32,
    num_classes: NUM_CLASSES as u32,
    events: Ev::COUNT as u32,
    slab_bytes: SLAB_BYTES as u64,
    segment_bytes: SEGMENT_BYTES as u64,
    class_bytes: &raw const CLASS_BYTES as *const u32,
    registry_generation: &raw const REGISTRY_GENERATION,
    registry: REGISTRY.data_ptr(),
    registry_live: (offset_of!(Registry, live) + List::<Heap>::HEAD_OFFSET) as u32,
    registry_retired: offset_of!(Registry, retired) as u32,
    registry_threads_alive: offset_of!(Registry, threads_alive) as u32,
    registry_threads_exited: offset_of!(Registry, threads_exited) as u32,
    orphan_heap: &raw const ORPHAN,
    prof_heap: &raw const PROF,
    heap_next: offset_of!(Heap, next) as u32,
    class_heap_bytes: size_of::<ClassHeap>() as u32,
    class_heap_counters: offset_of!(ClassHeap, ev) as u32,
    node_bytes: size_of::<Node>() as u32,
    nodes: &raw const NODES as *const Node,
    node_nr_partial: offset_of!(Node, nr_partial) as u32,
    node_free_objects: offset_of!(Node, free_objects) as u32,
    node_added_head: offset_of!(Node, added_head) as u32,
    node_added_tail: offset_of!(Node, added_tail) as u32,
    node_allocs_listed: offset_of!(Node, allocs_listed) as u32,
    node_frees_listed: offset_of!(Node, frees_listed) as u32,
    node_slabs_new: offset_of!(Node, slabs_new) as u32,
    node_slabs_freed: offset_of!(Node, slabs_freed) as u32,
    node_full_slabs: offset_of!(Node, full_slabs) as u32,
    globals: [
        global_field(offset_of!(Global, segments)),
        global_field(offset_of!(Global, large_blocks)),
        global_field(offset_of!(Global, large_bytes)),
        global_field(offset_of!(Global, large_mapped)),
        global_field(offset_of!(Global, large_cached)),
        global_field(offset_of!(Global, large_cache_limit)),
        global_field(offset_of!(Global, large_cache_hits)),
        global_field(offset_of!(Global, background_purges)),
        global_field(offset_of!(Global, purger_starts)),
        &raw const MMAPS,
        &raw const PURGES,
        &raw const PURGED_BYTES,
        global_field(offset_of!(Global, medium_blocks)),
        global_field(offset_of!(Global, medium_bytes)),
        global_field(offset_of!(Global, sheaf_budget_taken)),
        global_field(offset_of!(Global, zero_size_blocks)),
        &raw const PERCPU_MODE,
        &raw const RESTARTS,
        &raw const DRAINS,
    ],
    cpu_regions: &raw const REGIONS,
    cpu_bound: &raw const BOUND,
    cpu_class_begin: &raw const CLASS_BEGIN as *const u32,
    cpu_region_capacity: CAPACITY_OFFSET as u32,
};

// What the reader takes for granted: a counter block is `Ev::COUNT` u64s;
// on 64-bit targets the anchor is 344 bytes, 4 of them padding after the
// node offsets and 4 at the end, and node gauges are 8 bytes.
const _: () = assert!(size_of::<Counters>() == Ev::COUNT * 8);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(size_of::<Anchor>() == 344);
