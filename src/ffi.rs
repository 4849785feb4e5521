//! The C malloc family, exported by the preload library (`preload/`, whose
//! build sets `slubmalloc_preload`) and by the crate with its `override`
//! feature, so that
//! `LD_PRELOAD=libslubmalloc.so` serves every heap allocation of a process,
//! including glibc's own internal `__libc_*` calls. Semantics and errno follow
//! glibc 2.36 as measured (the `errno` group of tests/c/preload_contract.c
//! prints a table of every entry point, compared with glibc's by
//! tests/processes/preload_contract.rs): NULL with errno ENOMEM for impossible sizes;
//! EINVAL for an alignment above 2^63 (memalign, aligned_alloc); posix_memalign
//! returns EINVAL without touching errno but returns ENOMEM *and* sets errno to
//! it; success, `free` and `malloc_usable_size` keep errno; `realloc(p, 0)`
//! frees and returns NULL.

use core::ffi::{c_int, c_void};
use core::ptr;

use crate::alloc;
use crate::counters;
use crate::glibc_info;
use crate::layout::Asked;
use crate::options;
use crate::os::{self, PAGE_BYTES};
use crate::report;
use crate::sys;
use crate::walk;
use crate::zero;

/// The alignment of `calloc`'s and `realloc`'s blocks, and the least of
/// the aligned allocations'.
pub const MIN_ALIGN: usize = 16;

#[inline(always)]
fn out(p: *mut u8) -> *mut c_void {
    p.cast()
}

#[no_mangle]
pub extern "C" fn malloc(size: usize) -> *mut c_void {
    out(alloc::malloc(size))
}

/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: per the contract; `alloc::free` accepts null.
    unsafe { alloc::free(p.cast()) }
}

/// C23's `free_sized`: `size` is what `malloc`, `calloc` (the product) or
/// `realloc` was asked for; checked against the block (`layout`: a size
/// the block's class does not serve, or a block of `aligned_alloc` with a
/// bigger alignment, stops the process). Null does nothing.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free_sized(p: *mut c_void, size: usize) {
    // SAFETY: per the contract.
    unsafe { alloc::free_sized(p.cast(), size, &malloc_family(size)) }
}

/// C23's `free_aligned_sized`: `align` and `size` are what `aligned_alloc`
/// was asked for (an alignment that is not a power of two rounded up, as
/// `aligned_alloc` does; none is above the largest power of two, which
/// `aligned_alloc` refuses); checked as `free_sized`. Null does nothing.
///
/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn free_aligned_sized(p: *mut c_void, align: usize, size: usize) {
    let align = align.checked_next_power_of_two().unwrap_or(usize::MAX);
    let asked = [Asked {
        size,
        align: align.max(MIN_ALIGN),
    }];
    // SAFETY: per the contract.
    unsafe { alloc::free_asked(p.cast(), &asked) }
}

/// What a block of `malloc(size)`, `calloc` or `realloc` may have been
/// asked as.
pub fn malloc_family(size: usize) -> [Asked; 2] {
    [
        Asked { size, align: 1 },
        Asked {
            size,
            align: MIN_ALIGN,
        },
    ]
}

#[no_mangle]
pub extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // No bytes: a zero-size block, as `malloc(0)`'s.
        Some(0) => out(alloc::alloc_zero_size(MIN_ALIGN)),
        Some(bytes) => out(alloc::alloc_zeroed(bytes, MIN_ALIGN)),
        None => {
            os::set_enomem();
            ptr::null_mut()
        }
    }
}

/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(size);
    }
    if size == 0 {
        // glibc: realloc(p, 0) frees p and returns NULL.
        // SAFETY: per the contract.
        unsafe { free(p) };
        return ptr::null_mut();
    }
    // SAFETY: per the contract; C blocks carry at most MIN_ALIGN implicitly.
    out(unsafe { alloc::realloc(p.cast(), MIN_ALIGN, size) })
}

/// # Safety
/// As for `realloc`.
#[no_mangle]
pub unsafe extern "C" fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void {
    match n.checked_mul(size) {
        // SAFETY: per the contract.
        Some(bytes) => unsafe { realloc(p, bytes) },
        None => {
            os::set_enomem();
            ptr::null_mut()
        }
    }
}

/// A block of `size` bytes at `align`; no bytes at an alignment that
/// zero-size blocks have (`zero::ALIGN`): a zero-size block, as
/// `malloc(0)`'s.
fn aligned(align: usize, size: usize) -> *mut u8 {
    let align = align.max(MIN_ALIGN);
    if size == 0 && align <= zero::ALIGN {
        return alloc::alloc_zero_size(align);
    }
    alloc::alloc(size, align)
}

/// # Safety
/// `out_p` is a valid pointer to write the result to.
#[no_mangle]
pub unsafe extern "C" fn posix_memalign(
    out_p: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    if !align.is_power_of_two() || align % core::mem::size_of::<*mut c_void>() != 0 {
        return sys::EINVAL;
    }
    // Success keeps errno whatever the paths below did with it.
    let keep = os::ErrnoGuard::save();
    let p = aligned(align, size);
    if p.is_null() {
        // glibc's posix_memalign sets errno as well as returning ENOMEM (it
        // fails in the memalign that sets it); restore first, then set.
        drop(keep);
        os::set_enomem();
        return sys::ENOMEM;
    }
    // SAFETY: per the contract.
    unsafe { *out_p = p.cast() };
    0
}

/// glibc 2.36's aligned_alloc is its memalign: an alignment that is not a
/// power of two (0 included) is rounded up, not refused. glibc 2.38 refuses
/// those with EINVAL (C17 allows either); we follow the glibc we replace on
/// Debian 12, which tests/processes/preload_contract.rs measures.
#[no_mangle]
pub extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    memalign(align, size)
}

#[no_mangle]
pub extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // glibc rounds an alignment that is not a power of two up to one, and
    // answers EINVAL where no such power exists.
    let Some(align) = align.checked_next_power_of_two() else {
        // SAFETY: errno is this thread's.
        unsafe { *sys::__errno_location() = sys::EINVAL };
        return ptr::null_mut();
    };
    out(aligned(align, size))
}

#[no_mangle]
pub extern "C" fn valloc(size: usize) -> *mut c_void {
    out(aligned(PAGE_BYTES, size))
}

#[no_mangle]
pub extern "C" fn pvalloc(size: usize) -> *mut c_void {
    let Some(rounded) = size.checked_add(PAGE_BYTES - 1) else {
        os::set_enomem();
        return ptr::null_mut();
    };
    out(aligned(
        PAGE_BYTES,
        (rounded & !(PAGE_BYTES - 1)).max(PAGE_BYTES),
    ))
}

/// # Safety
/// `p` is null or a live block from this allocator.
#[no_mangle]
pub unsafe extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    // SAFETY: per the contract.
    unsafe { alloc::usable_size(p.cast()) }
}

/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn cfree(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { free(p) }
}

/// Returns 1 if memory went back to the kernel, as glibc does.
#[no_mangle]
pub extern "C" fn malloc_trim(_pad: usize) -> c_int {
    let g = counters::global();
    let released = || {
        (
            crate::os::PURGES.load(core::sync::atomic::Ordering::Relaxed),
            g.segments.load(core::sync::atomic::Ordering::Relaxed)
                + g.large_mapped.load(core::sync::atomic::Ordering::Relaxed),
        )
    };
    let before = released();
    alloc::trim();
    let after = released();
    (after.0 > before.0 || after.1 < before.1) as c_int
}

#[no_mangle]
pub extern "C" fn malloc_stats() {
    report::write_report(options::StatsMode::Text, 2);
}

/// glibc's mallinfo2 from slubmalloc's counters (`glibc_info::MallInfo`
/// says which field means what).
#[no_mangle]
pub extern "C" fn mallinfo2() -> sys::mallinfo2 {
    let m = glibc_info::mallinfo();
    let z = |v: u64| v as usize;
    sys::mallinfo2 {
        arena: z(m.arena),
        ordblks: z(m.ordblks),
        smblks: z(m.smblks),
        hblks: z(m.hblks),
        hblkhd: z(m.hblkhd),
        usmblks: z(m.usmblks),
        fsmblks: z(m.fsmblks),
        uordblks: z(m.uordblks),
        fordblks: z(m.fordblks),
        keepcost: z(m.keepcost),
    }
}

/// mallinfo2 in `int`s, each saturated at INT_MAX (glibc 2.36 truncates:
/// 3 GiB in mmapped blocks reads as hblkhd -1073729536 there).
#[no_mangle]
pub extern "C" fn mallinfo() -> sys::mallinfo {
    let m = glibc_info::mallinfo();
    let i = |v: u64| v.min(c_int::MAX as u64) as c_int;
    sys::mallinfo {
        arena: i(m.arena),
        ordblks: i(m.ordblks),
        smblks: i(m.smblks),
        hblks: i(m.hblks),
        hblkhd: i(m.hblkhd),
        usmblks: i(m.usmblks),
        fsmblks: i(m.fsmblks),
        uordblks: i(m.uordblks),
        fordblks: i(m.fordblks),
        keepcost: i(m.keepcost),
    }
}

/// The program's `FILE`, written with fwrite (its stdio may allocate: no
/// allocator lock is held while it runs).
struct FileWriter(*mut sys::FILE);

impl core::fmt::Write for FileWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: `malloc_info`'s caller passes a FILE open for writing.
        let n = unsafe { sys::fwrite(s.as_ptr().cast(), 1, s.len(), self.0) };
        if n == s.len() {
            Ok(())
        } else {
            Err(core::fmt::Error)
        }
    }
}

/// glibc's malloc_info: its XML, slubmalloc's numbers
/// (`glibc_info::write_malloc_info`). `options` other than 0 return EINVAL
/// with errno untouched, as glibc; a write error returns 0, as glibc.
///
/// # Safety
/// `fp` is a FILE open for writing.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut sys::FILE) -> c_int {
    if options != 0 {
        return sys::EINVAL;
    }
    let _ = glibc_info::write_malloc_info(&mut FileWriter(fp));
    0
}

// glibc's internal entry points, so that no block crosses two allocators.

#[no_mangle]
pub extern "C" fn __libc_malloc(size: usize) -> *mut c_void {
    malloc(size)
}

/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn __libc_free(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { free(p) }
}

#[no_mangle]
pub extern "C" fn __libc_calloc(n: usize, size: usize) -> *mut c_void {
    calloc(n, size)
}

/// # Safety
/// As for `realloc`.
#[no_mangle]
pub unsafe extern "C" fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: per the contract.
    unsafe { realloc(p, size) }
}

#[no_mangle]
pub extern "C" fn __libc_memalign(align: usize, size: usize) -> *mut c_void {
    memalign(align, size)
}

#[no_mangle]
pub extern "C" fn __libc_valloc(size: usize) -> *mut c_void {
    valloc(size)
}

#[no_mangle]
pub extern "C" fn __libc_pvalloc(size: usize) -> *mut c_void {
    pvalloc(size)
}

/// # Safety
/// As for `posix_memalign`.
#[no_mangle]
pub unsafe extern "C" fn __posix_memalign(
    out_p: *mut *mut c_void,
    align: usize,
    size: usize,
) -> c_int {
    // SAFETY: per the contract.
    unsafe { posix_memalign(out_p, align, size) }
}

/// `slubmalloc::thread_idle`: the calling thread gives back what it holds
/// for itself (its sheaves, its slabs), as a thread pool's worker going
/// idle would ask.
#[no_mangle]
pub extern "C" fn slubmalloc_thread_idle() {
    alloc::thread_idle();
}

/// Recounts everything by walking and compares with the incremental
/// counters: 0 when they agree (see `walk::check_stats`). Other threads must
/// be quiescent. For tests and curious users; not part of the C standard.
#[no_mangle]
pub extern "C" fn slubmalloc_check_stats() -> c_int {
    walk::check_stats() as c_int
}
