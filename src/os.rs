//! The kernel, for the allocator: mappings, purging, time, randomness,
//! writing to a file descriptor (`FdWriter`, a formatting sink), and the
//! one way slubmalloc dies. Other system calls stay with the code they
//! serve: the futex in `sync`, the pthread key in `heap_start`,
//! `sched_yield` in `prof::write`, `pthread_atfork` in `fork`, the signal
//! handler in `report`. The files the environment names (the report,
//! the profile) are opened here, by one function with one policy.
//!
//! Nothing here allocates. Every function keeps the caller's `errno` unless it
//! says otherwise, so `free` can promise to leave `errno` alone.

use core::ptr;
// Core's atomics, not `sync`'s: these counters are statistics no protocol
// depends on, so the model check need not swap them, and `sync` (whose
// lock and invariants call `fatal` and `ErrnoGuard`) stays above `os`.
use crate::fmt;
use crate::sys;
use core::sync::atomic::{AtomicU64, Ordering};

/// Mappings made, ranges purged (MADV_DONTNEED), and bytes given back by
/// purges (those ranges, and the free segments and cached large blocks
/// that purges unmap, which their modules add), for the statistics.
pub static MMAPS: AtomicU64 = AtomicU64::new(0);
pub static PURGES: AtomicU64 = AtomicU64::new(0);
pub static PURGED_BYTES: AtomicU64 = AtomicU64::new(0);

pub const PAGE_BYTES: usize = 4096;

/// Saves `errno` and restores it when dropped.
pub struct ErrnoGuard(i32);

impl ErrnoGuard {
    #[inline]
    pub fn save() -> Self {
        // SAFETY: __errno_location returns this thread's errno slot, always valid.
        ErrnoGuard(unsafe { *sys::__errno_location() })
    }
}

impl Drop for ErrnoGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: as in `save`.
        unsafe { *sys::__errno_location() = self.0 };
    }
}

/// Sets `errno` to `ENOMEM`; every failed allocation path calls this.
#[inline]
pub fn set_enomem() {
    // SAFETY: as in `ErrnoGuard::save`.
    unsafe { *sys::__errno_location() = sys::ENOMEM };
}

/// Maps `bytes` of fresh zeroed memory, or returns null with errno ENOMEM.
pub fn map(bytes: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions.
    let p = unsafe {
        sys::mmap(
            ptr::null_mut(),
            bytes,
            sys::PROT_READ | sys::PROT_WRITE,
            sys::MAP_PRIVATE | sys::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == sys::MAP_FAILED {
        set_enomem();
        return ptr::null_mut();
    }
    MMAPS.fetch_add(1, Ordering::Relaxed);
    p.cast()
}

/// Maps `bytes` aligned to `align` (a power of two, at least a page): maps
/// `bytes + align - PAGE` and trims both ends.
pub fn map_aligned(bytes: usize, align: usize) -> *mut u8 {
    if align <= PAGE_BYTES {
        return map(bytes);
    }
    let Some(total) = bytes.checked_add(align - PAGE_BYTES) else {
        set_enomem();
        return ptr::null_mut();
    };
    let raw = map(total);
    if raw.is_null() {
        return raw;
    }
    let start = raw as usize;
    let aligned = (start + align - 1) & !(align - 1);
    let head = aligned - start;
    let tail = total - head - bytes;
    if head > 0 {
        unmap(raw, head);
    }
    if tail > 0 {
        unmap((aligned + bytes) as *mut u8, tail);
    }
    aligned as *mut u8
}

/// Returns a mapping to the kernel.
pub fn unmap(p: *mut u8, bytes: usize) {
    let _keep = ErrnoGuard::save();
    // SAFETY: callers pass a range they mapped and no longer use.
    unsafe { sys::munmap(p.cast(), bytes) };
}

/// How `purge` gives pages back: MADV_DONTNEED, which frees them at once
/// (the resident size falls, and the next touch faults in a zero page).
/// MADV_FREE (`--cfg slubmalloc_bench_madv_free`, for measuring) lets the
/// kernel take them only under memory pressure: until then they stay in the
/// resident size, so a program that frees and goes idle keeps its peak, and
/// a page touched again comes back without a fault. Measured on the memory
/// shapes of `benches/c` (bench/report/HISTORY.md).
#[cfg(not(slubmalloc_bench_madv_free))]
const PURGE_ADVICE: sys::c_int = sys::MADV_DONTNEED;
#[cfg(slubmalloc_bench_madv_free)]
const PURGE_ADVICE: sys::c_int = sys::MADV_FREE;

/// Drops the physical pages behind a range; it reads as zeros afterwards
/// (with MADV_FREE: zeros or the old contents).
pub fn purge(p: *mut u8, bytes: usize) {
    let _keep = ErrnoGuard::save();
    // SAFETY: callers pass a range inside one of their mappings holding no live data.
    unsafe { sys::madvise(p.cast(), bytes, PURGE_ADVICE) };
    PURGES.fetch_add(1, Ordering::Relaxed);
    // Relaxed: statistics counters; nothing is published with them.
    PURGED_BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Grows or shrinks a mapping, possibly moving it; null with ENOMEM on failure.
pub fn remap(p: *mut u8, old_bytes: usize, new_bytes: usize) -> *mut u8 {
    // SAFETY: `p..p+old_bytes` is a whole mapping owned by the caller.
    let q = unsafe { sys::mremap(p.cast(), old_bytes, new_bytes, sys::MREMAP_MAYMOVE) };
    if q == sys::MAP_FAILED {
        set_enomem();
        return ptr::null_mut();
    }
    q.cast()
}

/// Makes `p..p + bytes` (whole pages the caller owns) inaccessible, so that
/// any read or write there faults; its pages and their contents stay as
/// they are. Changing part of a kernel mapping splits it: false if the
/// kernel refuses (ENOMEM past `vm.max_map_count` mappings); errno is kept.
pub fn make_inaccessible(p: *mut u8, bytes: usize) -> bool {
    set_protection(p, bytes, sys::PROT_NONE)
}

/// Makes `p..p + bytes` readable and writable again, as
/// `make_inaccessible` says.
pub fn make_accessible(p: *mut u8, bytes: usize) -> bool {
    set_protection(p, bytes, sys::PROT_READ | sys::PROT_WRITE)
}

/// Puts a guard marker on each page of `p..p + bytes` (whole pages the
/// caller owns, in a private anonymous mapping): a read or write there
/// faults, as under PROT_NONE, but the marker is a page table entry, so it
/// splits no kernel mapping. Linux 6.13+ (`MADV_GUARD_INSTALL`): the pages'
/// contents are dropped; a marker survives MADV_DONTNEED and mprotect,
/// moves with the page under mremap, and goes with munmap. False if the
/// kernel refuses (EINVAL before 6.13 or in a locked mapping); errno is
/// kept.
pub fn install_guard_markers(p: *mut u8, bytes: usize) -> bool {
    let _keep = ErrnoGuard::save();
    // SAFETY: the caller owns the range and holds nothing in it.
    unsafe { sys::madvise(p.cast(), bytes, sys::MADV_GUARD_INSTALL) == 0 }
}

/// Takes the guard markers off `p..p + bytes` (whole pages the caller
/// owns); a page that had one reads as zeros, the others keep their
/// contents. False if the kernel refuses; errno is kept.
pub fn remove_guard_markers(p: *mut u8, bytes: usize) -> bool {
    let _keep = ErrnoGuard::save();
    // SAFETY: the caller owns the range.
    unsafe { sys::madvise(p.cast(), bytes, sys::MADV_GUARD_REMOVE) == 0 }
}

fn set_protection(p: *mut u8, bytes: usize, prot: sys::c_int) -> bool {
    let _keep = ErrnoGuard::save();
    // SAFETY: the caller owns the range and holds no references into it
    // while it is inaccessible.
    unsafe { sys::mprotect(p.cast(), bytes, prot) == 0 }
}

/// Moves the mapping `p..p + bytes` to `to` (MREMAP_FIXED: what was mapped
/// there goes); its pages go along. False if the kernel refuses, e.g. with
/// EFAULT for a range that spans two kernel mappings; errno is kept.
pub fn remap_to(p: *mut u8, bytes: usize, to: *mut u8) -> bool {
    let _keep = ErrnoGuard::save();
    // SAFETY: the caller owns both ranges; neither holds live data of others.
    let q = unsafe {
        sys::mremap(
            p.cast(),
            bytes,
            bytes,
            sys::MREMAP_MAYMOVE | sys::MREMAP_FIXED,
            to.cast::<sys::c_void>(),
        )
    };
    q != sys::MAP_FAILED
}

/// The length of the part of `p..p + bytes` that lies in the kernel mapping
/// holding `p`, for a range that spans several (the kernel has no call that
/// says; cached pieces of large blocks merge across mappings). Found by
/// halving with a probe that changes nothing: growing a prefix in place by
/// a page, which mremap refuses with EFAULT when the prefix leaves its
/// mapping and with ENOMEM when it does not (the page after a prefix is
/// mapped, by the rest of the range, so it can never grow). The caller
/// owns the range, which leaves its first mapping before `p + bytes`.
pub fn first_mapping_len(p: *mut u8, bytes: usize) -> usize {
    let _keep = ErrnoGuard::save();
    let within = |len: usize| {
        // SAFETY: a grow in place of a prefix we own, which cannot succeed
        // (see above): nothing changes.
        let q = unsafe { sys::mremap(p.cast(), len, len + PAGE_BYTES, 0) };
        // SAFETY: as in `ErrnoGuard::save`.
        q == sys::MAP_FAILED && unsafe { *sys::__errno_location() } != sys::EFAULT
    };
    // `lo` lies in the first mapping (its first page does); `hi` does not.
    let (mut lo, mut hi) = (PAGE_BYTES, bytes);
    while hi - lo > PAGE_BYTES {
        let mid = lo + (hi - lo) / 2 / PAGE_BYTES * PAGE_BYTES;
        if within(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Monotonic clock in nanoseconds, the coarse one (vDSO, no syscall, no
/// rdtsc; a few milliseconds of resolution is plenty for purge deadlines).
pub fn now_ns() -> u64 {
    let mut ts = sys::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { sys::clock_gettime(sys::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// 64 random bits from the kernel, or from the clock and an address if the
/// kernel refuses (a seccomp sandbox); never zero.
pub fn random_u64() -> u64 {
    let _keep = ErrnoGuard::save();
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { sys::getrandom((&mut v as *mut u64).cast(), 8, sys::GRND_NONBLOCK) };
    if n != 8 {
        v = now_ns() ^ ((&v as *const u64 as u64).rotate_left(29)) ^ 0x9e37_79b9_7f4a_7c15;
    }
    v | 1
}

/// Turns thread cancellation off until dropped, then puts the previous state
/// back (a pending cancellation then acts at the caller's next cancellation
/// point). write(2), open(2) and close(2) are cancellation points: without
/// this a thread with a cancellation pending would be cancelled half-way
/// through a report (glibc writes malloc_stats with cancellation off too), or
/// inside `fatal` instead of stopping the process. Setting the state is an
/// atomic update of the thread's descriptor in glibc: no lock, no allocation,
/// so it is also used from the report signal handler.
pub struct NoCancel(sys::c_int);

impl NoCancel {
    #[inline]
    pub fn new() -> Self {
        let mut old = 0;
        // SAFETY: `old` is a valid out-pointer; the call has no other
        // preconditions and returns an error code, leaving errno alone.
        unsafe { sys::pthread_setcancelstate(sys::PTHREAD_CANCEL_DISABLE, &mut old) };
        NoCancel(old)
    }
}

impl Drop for NoCancel {
    #[inline]
    fn drop(&mut self) {
        let mut old = 0;
        // SAFETY: as in `new`; `self.0` is a state glibc gave us.
        unsafe { sys::pthread_setcancelstate(self.0, &mut old) };
    }
}

/// Writes all of `bytes` to `fd`, retrying on short writes and EINTR, with
/// cancellation off (see `NoCancel`).
pub fn write_all(fd: i32, mut bytes: &[u8]) {
    let _keep = ErrnoGuard::save();
    let _whole = NoCancel::new();
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a valid readable slice.
        let n = unsafe { sys::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            // SAFETY: as in `ErrnoGuard::save`.
            if unsafe { *sys::__errno_location() } == sys::EINTR {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// How `open_named_file` treats what the file holds already.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Append,
    Replace,
}

/// Opens for writing a file whose path came from the environment (the
/// report's, the profile's), so that a user who can write to a directory
/// on the path cannot choose where the output goes: a symbolic link as the
/// last component is not followed (O_NOFOLLOW), and a file that another
/// user owns (planted there beforehand, in `/tmp` say) is refused and left
/// as it was. A new file is created with `mode` less the umask.
/// Close-on-exec. -1 if refused.
pub fn open_named_file(path: &core::ffi::CStr, existing: Existing, mode: u32) -> i32 {
    let _keep = ErrnoGuard::save();
    let append = match existing {
        Existing::Append => sys::O_APPEND,
        Existing::Replace => 0,
    };
    let flags = sys::O_WRONLY | sys::O_CREAT | sys::O_CLOEXEC | sys::O_NOFOLLOW | append;
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { sys::open(path.as_ptr(), flags, mode) };
    if fd < 0 {
        return fd;
    }
    // SAFETY: a zeroed stat is a valid out-parameter; `fd` is ours;
    // geteuid has no preconditions.
    let ours = unsafe {
        let mut st: sys::stat = core::mem::zeroed();
        sys::fstat(fd, &mut st) == 0 && st.st_uid == sys::geteuid()
    };
    if !ours {
        // SAFETY: `fd` is ours.
        unsafe { sys::close(fd) };
        return -1;
    }
    if existing == Existing::Replace {
        // Emptied only now that it is known to be ours (O_TRUNC would
        // empty anyone's). Fails only where there is nothing to empty (a
        // device, a pipe).
        // SAFETY: `fd` is ours.
        unsafe { sys::ftruncate(fd, 0) };
    }
    fd
}

/// The one way slubmalloc stops a process: one line on stderr naming the
/// misuse and the address, then `abort()`.
#[cold]
#[inline(never)]
pub fn fatal(what: &str, addr: usize) -> ! {
    fatal_with(what, addr, &[])
}

/// `fatal`, with numbers after the address, each after its name:
/// `(address 0x..., size 64, align 8)`.
#[cold]
#[inline(never)]
pub fn fatal_with(what: &str, addr: usize, numbers: &[(&str, u64)]) -> ! {
    let mut buf = fmt::FixedBuf::<200>::new();
    buf.push_str("slubmalloc: ");
    buf.push_str(what);
    buf.push_str(" (address 0x");
    buf.push_hex(addr as u64);
    for &(name, n) in numbers {
        buf.push_str(", ");
        buf.push_str(name);
        buf.push_str(" ");
        buf.push_dec(n);
    }
    buf.push_str(")\n");
    write_all(2, buf.as_bytes());
    // SAFETY: abort has no preconditions and does not return.
    unsafe { sys::abort() }
}

/// The process id, for `%p` in file names.
pub fn pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { sys::getpid() as u32 }
}

/// Resident bytes of the process from /proc/self/statm, read without allocating.
pub fn resident_bytes() -> u64 {
    let _keep = ErrnoGuard::save();
    // SAFETY: a NUL-terminated literal path; the fd is closed below.
    let fd = unsafe { sys::open(c"/proc/self/statm".as_ptr(), sys::O_RDONLY | sys::O_CLOEXEC) };
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 128];
    // SAFETY: reads at most buf.len() bytes into `buf`.
    let n = unsafe { sys::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: `fd` is ours.
    unsafe { sys::close(fd) };
    if n <= 0 {
        return 0;
    }
    // statm: "size resident shared ..." in pages.
    let fields = buf[..n as usize].split(|&b| b == b' ');
    let resident = fields.clone().nth(1).unwrap_or(b"0");
    let pages = resident
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |a, &b| a * 10 + (b - b'0') as u64);
    pages * PAGE_BYTES as u64
}

/// A `fmt::Write` that writes to `fd` through a 4 KiB stack buffer.
pub struct FdWriter {
    fd: i32,
    buf: [u8; 4096],
    len: usize,
}

impl FdWriter {
    pub fn new(fd: i32) -> Self {
        FdWriter {
            fd,
            buf: [0; 4096],
            len: 0,
        }
    }

    pub fn flush(&mut self) {
        write_all(self.fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

impl core::fmt::Write for FdWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let mut bytes = s.as_bytes();
        while !bytes.is_empty() {
            if self.len == self.buf.len() {
                self.flush();
            }
            let n = bytes.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
        Ok(())
    }
}

impl Drop for FdWriter {
    fn drop(&mut self) {
        self.flush();
    }
}
