//! Call stacks for the heap profile, without frame pointers and without
//! allocating: libgcc's `_Unwind_Backtrace` (the unwinder Rust and C++
//! exceptions use, `libgcc_s.so.1`, which every Rust program on
//! x86_64-linux-gnu links) walks the `.eh_frame` tables that Debian's
//! programs carry even when built without frame pointers. It finds each
//! frame's table through `dl_iterate_phdr` and the `PT_GNU_EH_FRAME` binary
//! search index, neither of which allocates; the caller still holds a
//! reentrancy guard (`Heap::prof_busy`), so that an allocation made by
//! anything the unwinder calls is served without sampling.

use core::ffi::{c_int, c_void};

#[cfg(any(feature = "override", slubmalloc_preload))]
use crate::sys;

/// Frames kept per stack, innermost first (gperftools keeps 32, jemalloc
/// 128): deeper stacks keep their innermost 64.
pub const MAX_FRAMES: usize = 64;

/// `_Unwind_Reason_Code` values (unwind.h).
const URC_NO_REASON: c_int = 0;
const URC_END_OF_STACK: c_int = 5;

type TraceFn = extern "C" fn(ctx: *mut c_void, arg: *mut c_void) -> c_int;

// std links the unwinder for its own unwinding; the preload library,
// which links no std (`preload.rs`), names it here.
#[cfg_attr(all(slubmalloc_preload, panic = "abort"), link(name = "gcc_s"))]
extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIPInfo(ctx: *mut c_void, ip_before_insn: *mut c_int) -> usize;
    fn _Unwind_GetRegionStart(ctx: *mut c_void) -> usize;
    fn _Unwind_FindEnclosingFunction(pc: *mut c_void) -> *mut c_void;
}

/// The start of the function containing the return address `ret` (0 if
/// the unwinder knows none).
#[cfg(not(any(feature = "override", slubmalloc_preload)))]
pub fn function_of(ret: usize) -> usize {
    // SAFETY: a lookup in the loaded objects' unwind tables; `ret - 1` lies
    // in the call instruction.
    unsafe { _Unwind_FindEnclosingFunction((ret - 1) as *mut c_void) as usize }
}

/// Which frames at the top of a stack are the allocator's own and dropped.
pub struct Skip<'a> {
    /// Start addresses of the allocator's functions that may lie between
    /// the program's call and the capture (found by `_Unwind_GetRegionStart`).
    pub functions: &'a [usize],
    /// Code range of the allocator's own object (the preload library), or
    /// an empty range when the allocator is linked into the program.
    pub text: (usize, usize),
}

struct State<'a> {
    skip: &'a Skip<'a>,
    skipping: bool,
    out: &'a mut [usize; MAX_FRAMES],
    depth: usize,
}

extern "C" fn on_frame(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `State` that `capture` passed, alive for the call.
    let st = unsafe { &mut *(arg as *mut State) };
    let mut before: c_int = 0;
    // SAFETY: `ctx` is the unwinder's context for this frame.
    let ip = unsafe { _Unwind_GetIPInfo(ctx, &mut before) };
    if ip == 0 {
        return URC_END_OF_STACK;
    }
    // Every address kept is a return address (the writer subtracts one
    // from the first; pprof from the others): a signal frame's exact pc
    // gets one added.
    let ret = if before != 0 { ip + 1 } else { ip };
    if st.skipping {
        // SAFETY: as above.
        let start = unsafe { _Unwind_GetRegionStart(ctx) };
        let (lo, hi) = st.skip.text;
        if st.skip.functions.contains(&start) || (lo <= ip && ip < hi) {
            return URC_NO_REASON;
        }
        st.skipping = false;
    }
    st.out[st.depth] = ret;
    st.depth += 1;
    if st.depth == MAX_FRAMES {
        URC_END_OF_STACK
    } else {
        URC_NO_REASON
    }
}

/// Fills `out` with the return addresses of the calling stack, innermost
/// first, past the allocator's own frames as `skip` describes them (this
/// function is one of them: its start must be in `skip.functions`).
/// Returns the depth. Never allocates; the caller holds the reentrancy
/// guard.
#[inline(never)]
pub fn capture(out: &mut [usize; MAX_FRAMES], skip: &Skip) -> usize {
    let mut st = State {
        skip,
        skipping: true,
        out,
        depth: 0,
    };
    // SAFETY: `on_frame` matches the trace function's signature and reads
    // `st` only during this call.
    unsafe { _Unwind_Backtrace(on_frame, (&mut st as *mut State).cast()) };
    st.depth
}

/// The executable code range of the object (executable or shared library)
/// that contains `addr`, or (0, 0). Uses `dl_iterate_phdr`, which takes the
/// loader's lock and does not allocate.
#[cfg(any(feature = "override", slubmalloc_preload))]
pub fn text_range_of(addr: usize) -> (usize, usize) {
    struct Find {
        addr: usize,
        found: (usize, usize),
    }
    extern "C" fn each(info: *mut sys::dl_phdr_info, _size: usize, arg: *mut c_void) -> c_int {
        // SAFETY: `arg` is the `Find` passed below; `info` is the loader's
        // description of one object, valid during the call.
        let (find, info) = unsafe { (&mut *(arg as *mut Find), &*info) };
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` has `dlpi_phnum` entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != sys::PT_LOAD || ph.p_flags & sys::PF_X == 0 {
                continue;
            }
            let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
            let hi = lo + ph.p_memsz as usize;
            if lo <= find.addr && find.addr < hi {
                find.found = (lo, hi);
                return 1;
            }
        }
        0
    }
    let mut find = Find {
        addr,
        found: (0, 0),
    };
    // SAFETY: `each` matches the callback type and uses `find` only during
    // the call.
    unsafe { sys::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.found
}
