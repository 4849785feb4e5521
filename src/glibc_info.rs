//! glibc's introspection answered from slubmalloc's counters: the fields of
//! `mallinfo2`, the XML of `malloc_info` and the closing lines of
//! `malloc_stats`, so that code written for glibc's output reads slubmalloc's
//! numbers. README ("glibc's introspection") says which field means what.
//! The first two are the C entry points' (`ffi`); the report ends with
//! the third in every build.
//!
//! Nothing here allocates. The numbers are taken first (`stats`, and one
//! hold of the large-block lock for the cached pieces) and written after,
//! with no lock held: the C caller writes to a `FILE`, whose stdio may call
//! malloc.

use core::fmt::{self, Write};

use crate::counters::global;
#[cfg(any(feature = "override", slubmalloc_preload))]
use crate::large;
#[cfg(any(feature = "override", slubmalloc_preload))]
use crate::size_class;
use crate::stats::Stats;
use crate::sync::Ordering;

#[cfg(any(feature = "override", slubmalloc_preload))]
/// glibc's `struct mallinfo2`, in bytes and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MallInfo {
    /// Segments mapped plus cached large-block mappings: all that is mapped
    /// except the live large blocks (glibc: the arenas' system memory).
    pub arena: u64,
    /// Cached large-block mappings (glibc: free chunks in bins).
    pub ordblks: u64,
    /// Free slots in the size classes' slabs (glibc: free fastbin chunks).
    pub smblks: u64,
    /// Live large blocks, each its own mapping (glibc: mmapped chunks).
    pub hblks: u64,
    /// Bytes of the live large blocks' mappings.
    pub hblkhd: u64,
    /// Always 0, as in glibc.
    pub usmblks: u64,
    /// Bytes of the free slots in `smblks`.
    pub fsmblks: u64,
    /// Bytes of live small blocks, at their class size.
    pub uordblks: u64,
    /// `arena - uordblks`: free slots, slabs no class holds, cached mappings.
    pub fordblks: u64,
    /// Cached large-block bytes, which `malloc_trim` unmaps (glibc: the top
    /// chunk it could give back).
    pub keepcost: u64,
}

#[cfg(any(feature = "override", slubmalloc_preload))]
/// The `mallinfo2` answer now.
pub fn mallinfo() -> MallInfo {
    let s = crate::stats::stats();
    from_stats(&s, large::cached_pieces())
}

#[cfg(any(feature = "override", slubmalloc_preload))]
fn from_stats(s: &Stats, cached_pieces: u64) -> MallInfo {
    let (mut smblks, mut fsmblks) = (0, 0);
    for c in s.caches() {
        // Saturating: the snapshot's counters are read one after another.
        let free = c.objects_total.saturating_sub(c.objects_in_use);
        smblks += free;
        fsmblks += free * c.object_size;
    }
    let t = &s.totals;
    let arena = t.segments * size_class::SEGMENT_BYTES as u64 + t.large_cached_bytes;
    let uordblks = t.bytes_in_use.saturating_sub(t.large_bytes);
    MallInfo {
        arena,
        ordblks: cached_pieces,
        smblks,
        hblks: t.large_blocks,
        hblkhd: t.large_bytes,
        usmblks: 0,
        fsmblks,
        uordblks,
        fordblks: arena.saturating_sub(uordblks),
        keepcost: t.large_cached_bytes,
    }
}

#[cfg(any(feature = "override", slubmalloc_preload))]
/// Writes glibc's `malloc_info` XML with slubmalloc's numbers: one heap,
/// whose `<sizes>` are the size classes with free slots; `fast` the free
/// slots, `rest` the other free bytes of `arena` (slabs no class holds,
/// cached mappings) counted as the cached pieces, `mmap` the live large
/// blocks; `system` and `aspace` all bytes mapped.
pub fn write_malloc_info(w: &mut impl Write) -> fmt::Result {
    let s = crate::stats::stats();
    let m = from_stats(&s, large::cached_pieces());
    let mapped = s.totals.bytes_mapped;
    // Relaxed: a statistics counter. Read after `mapped`, which sums two
    // counters read one after the other: the max keeps "max >= current".
    let mapped_max = global().mapped_max.load(Ordering::Relaxed).max(mapped);
    let rest = m.fordblks.saturating_sub(m.fsmblks);
    w.write_str("<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n")?;
    for c in s.caches() {
        let free = c.objects_total.saturating_sub(c.objects_in_use);
        if free > 0 {
            let size = c.object_size;
            writeln!(
                w,
                "  <size from=\"{size}\" to=\"{size}\" total=\"{}\" count=\"{free}\"/>",
                free * size
            )?;
        }
    }
    w.write_str("</sizes>\n")?;
    // The totals of the one heap, then of the whole allocator (which adds
    // the large blocks, glibc's mmapped chunks).
    #[derive(PartialEq)]
    enum Of {
        Heap,
        Malloc,
    }
    let totals = |w: &mut dyn Write, of: Of| -> fmt::Result {
        writeln!(
            w,
            "<total type=\"fast\" count=\"{}\" size=\"{}\"/>",
            m.smblks, m.fsmblks
        )?;
        writeln!(
            w,
            "<total type=\"rest\" count=\"{}\" size=\"{rest}\"/>",
            m.ordblks
        )?;
        if of == Of::Malloc {
            writeln!(
                w,
                "<total type=\"mmap\" count=\"{}\" size=\"{}\"/>",
                m.hblks, m.hblkhd
            )?;
        }
        writeln!(w, "<system type=\"current\" size=\"{mapped}\"/>")?;
        writeln!(w, "<system type=\"max\" size=\"{mapped_max}\"/>")?;
        writeln!(w, "<aspace type=\"total\" size=\"{mapped}\"/>")?;
        writeln!(w, "<aspace type=\"mprotect\" size=\"{mapped}\"/>")
    };
    totals(w, Of::Heap)?;
    w.write_str("</heap>\n")?;
    totals(w, Of::Malloc)?;
    w.write_str("</malloc>\n")
}

/// The lines that end glibc's `malloc_stats` report, with slubmalloc's
/// numbers: all bytes mapped, bytes in live blocks, and the most large
/// blocks (glibc: mmapped chunks) live at once and the most bytes in them.
/// Values are printed whole (glibc truncates the first two to 32 bits).
pub fn write_stats_totals(w: &mut impl Write, s: &Stats) -> fmt::Result {
    let g = global();
    // Relaxed: statistics counters.
    let max_blocks = g.large_blocks_max.load(Ordering::Relaxed);
    let max_bytes = g.large_bytes_max.load(Ordering::Relaxed);
    writeln!(w, "Total (incl. mmap):")?;
    writeln!(w, "system bytes     = {:>10}", s.totals.bytes_mapped)?;
    writeln!(w, "in use bytes     = {:>10}", s.totals.bytes_in_use)?;
    writeln!(w, "max mmap regions = {max_blocks:>10}")?;
    writeln!(w, "max mmap bytes   = {max_bytes:>10}")
}
