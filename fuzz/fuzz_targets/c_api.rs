//! The C entry points (built with the `override` feature, so this binary's
//! `malloc` family is slubmalloc's, libFuzzer's own C++ allocations
//! included): sequences of malloc, calloc (with overflowing products),
//! realloc (NULL, 0, shrink, grow, impossible sizes), reallocarray,
//! posix_memalign / aligned_alloc / memalign / valloc / pvalloc with valid
//! and invalid alignments, malloc_usable_size, free and cfree, malloc_trim,
//! glibc's `__libc_*` aliases and slubmalloc_check_stats. Each return value and errno is compared with glibc
//! 2.36's contract as `src/ffi.rs` states it (and `tests/processes/preload_contract.rs`
//! measures against glibc itself): NULL with ENOMEM for impossible sizes,
//! EINVAL for impossible alignments, errno untouched on success; blocks
//! aligned, large enough, zeroed by calloc, their contents kept by realloc
//! and intact until freed. After each input everything is freed and the
//! statistics must count what they counted before it, and agree with the
//! walk. Run it with `SLUBMALLOC_BACKGROUND_PURGE=0` (`ci/fuzz.sh` does):
//! with this binary's C heap ours, the purger's `pthread_create` allocates
//! glibc's own blocks (the thread's TLS), which that count would see.

#![no_main]

#[path = "../../tests/ops_model/mod.rs"]
mod model;

use core::ffi::{c_int, c_void};
use std::ptr;

use libfuzzer_sys::fuzz_target;
use model::{Block, Bytes};

#[global_allocator]
static GLOBAL: model::Counted = model::Counted;

extern "C" {
    fn malloc(size: usize) -> *mut c_void;
    fn calloc(n: usize, size: usize) -> *mut c_void;
    fn realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void;
    fn free(p: *mut c_void);
    fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int;
    fn aligned_alloc(align: usize, size: usize) -> *mut c_void;
    fn memalign(align: usize, size: usize) -> *mut c_void;
    fn valloc(size: usize) -> *mut c_void;
    fn pvalloc(size: usize) -> *mut c_void;
    fn malloc_usable_size(p: *mut c_void) -> usize;
    fn malloc_trim(pad: usize) -> c_int;
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
    fn __posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int;
    fn cfree(p: *mut c_void);
    fn slubmalloc_check_stats() -> c_int;
}

const SLOTS: usize = 512;
const PAGE: usize = 4096;
/// Requests up to this size (at alignments up to `SURE_ALIGN`) must succeed.
const SURE_BYTES: usize = 64 << 20;
const SURE_ALIGN: usize = 4 << 20;
/// Requested bytes kept live at most; past it, requests shrink.
const BUDGET: usize = 256 << 20;
/// errno before each call, to see whether the call touched it.
const SENTINEL: c_int = 0x7e57;

fn errno() -> c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() }
}

fn set_errno(v: c_int) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = v };
}

/// Sizes that no allocator can serve: past PTRDIFF_MAX, or past the
/// 47-bit address space.
const IMPOSSIBLE: [usize; 6] = [
    usize::MAX,
    usize::MAX - 15,
    isize::MAX as usize + 1,
    isize::MAX as usize,
    1 << 62,
    1 << 47,
];

/// A size: mostly the model's (1 B to 32 MiB), some zero, some impossible.
fn size(b: &mut Bytes) -> Option<usize> {
    let k = b.u8()?;
    Some(match k {
        0..=219 => b.size()?,
        220..=234 => 0,
        _ => IMPOSSIBLE[k as usize % IMPOSSIBLE.len()],
    })
}

/// An alignment argument, valid or not.
fn align_arg(b: &mut Bytes) -> Option<usize> {
    let k = b.u8()?;
    Some(match k {
        0..=159 => 1 << (k % 23),
        160..=179 => [0, 1, 2, 3, 4, 24, 48, 100, 4095, 4097][k as usize % 10],
        180..=199 => (1 << 63) + (k as usize % 3),
        200..=209 => usize::MAX,
        _ => b.u16()? as usize,
    })
}

#[derive(Clone, Copy)]
struct CBlock {
    block: Block,
    /// The alignment the call promised (for checks after realloc: 16).
    align: usize,
}

struct Harness {
    slots: Vec<Option<CBlock>>,
    live: usize,
    keys: u64,
}

fn ok_size(n: usize, align: usize) -> bool {
    n <= SURE_BYTES && align <= SURE_ALIGN
}

impl Harness {
    fn budget(&self, n: usize) -> usize {
        if n <= SURE_BYTES && self.live + n > BUDGET {
            n % 4096
        } else {
            n
        }
    }

    /// Checks a call's result against the contract: `p` null with
    /// `fail_errno`, or a block of at least `n` bytes at `align`, errno kept.
    /// `must`: the request is reasonable, so null is a failure.
    fn take(
        &mut self,
        what: &str,
        p: *mut c_void,
        n: usize,
        align: usize,
        must: bool,
    ) -> Option<CBlock> {
        let e = errno();
        if p.is_null() {
            assert!(
                !must,
                "{what}: NULL for a request that must succeed (errno {e})"
            );
            assert_eq!(e, libc::ENOMEM, "{what}: NULL with errno {e}, not ENOMEM");
            return None;
        }
        assert_eq!(e, SENTINEL, "{what}: success changed errno to {e}");
        assert_eq!(
            p as usize % align,
            0,
            "{what}: {p:?} not aligned to {align}"
        );
        // SAFETY: a live block.
        let usable = unsafe { malloc_usable_size(p) };
        assert!(usable >= n, "{what}: usable size {usable} below {n}");
        assert_eq!(
            errno(),
            SENTINEL,
            "{what}: malloc_usable_size changed errno"
        );
        self.keys += 1;
        let block = Block {
            addr: p as usize,
            size: n,
            align: 1,
            key: model::mix(self.keys),
        };
        // A zero-size block is not touched: its memory is inaccessible
        // (`SLUBMALLOC_PROTECT_ZERO_SIZE`, on by default).
        block.fill(0);
        self.live += block.size;
        Some(CBlock { block, align })
    }

    fn put(&mut self, slot: usize, b: Option<CBlock>) {
        if let Some(old) = self.slots[slot].take() {
            self.release(old, "free of a replaced block");
        }
        self.slots[slot] = b;
    }

    fn release(&mut self, b: CBlock, what: &str) {
        b.block.check_all(what);
        set_errno(SENTINEL);
        let p = b.block.ptr().cast();
        // SAFETY: a live block of ours.
        unsafe {
            match b.block.key % 3 {
                0 => __libc_free(p),
                1 => cfree(p),
                _ => free(p),
            }
        }
        assert_eq!(errno(), SENTINEL, "{what}: free changed errno");
        self.live -= b.block.size;
    }

    fn op(&mut self, b: &mut Bytes) -> Option<()> {
        let op = b.u8()?;
        let slot = b.u16()? as usize % SLOTS;
        set_errno(SENTINEL);
        match op % 16 {
            0 | 1 => {
                let n = self.budget(size(b)?);
                // SAFETY: any size.
                let p = unsafe {
                    if op & 16 == 0 {
                        malloc(n)
                    } else {
                        __libc_malloc(n)
                    }
                };
                let min_align = if n >= 16 { 16 } else { 8 };
                let r = self.take("malloc", p, n, min_align, n <= SURE_BYTES);
                self.put(slot, r);
            }
            2 => {
                let (count, each) = match b.u8()? % 4 {
                    0 => (usize::MAX / 2 + 2, 2),
                    1 => (1 << 40, 1 << 30),
                    _ => (1 + b.u16()? as usize % 64, self.budget(size(b)?) / 64),
                };
                // SAFETY: any sizes.
                let p = unsafe {
                    if op & 16 == 0 {
                        calloc(count, each)
                    } else {
                        __libc_calloc(count, each)
                    }
                };
                match count.checked_mul(each) {
                    None => {
                        assert!(
                            p.is_null(),
                            "calloc({count}, {each}) overflows but succeeded"
                        );
                        assert_eq!(errno(), libc::ENOMEM, "calloc overflow: errno");
                    }
                    Some(n) => {
                        let min_align = if n >= 16 { 16 } else { 8 };
                        if !p.is_null() {
                            let zero = Block {
                                addr: p as usize,
                                size: n.max(1),
                                align: 1,
                                key: 0,
                            };
                            if n > 0 {
                                zero.check_zero("calloc");
                            }
                        }
                        let r = self.take("calloc", p, n, min_align, n <= SURE_BYTES);
                        self.put(slot, r);
                    }
                }
            }
            3..=5 => {
                let (n, overflow) = if op % 16 == 5 {
                    let count = 1 + b.u8()? as usize;
                    let each = size(b)?;
                    match count.checked_mul(each) {
                        Some(n) => (n, false),
                        None => (usize::MAX, true),
                    }
                } else {
                    (size(b)?, false)
                };
                let n = self.budget(n);
                // Taken only now: an operation cut short keeps its block.
                let old = self.slots[slot].take();
                if let Some(o) = old {
                    o.block.check_all("before realloc");
                }
                let p = old.map_or(ptr::null_mut(), |o| o.block.ptr().cast());
                set_errno(SENTINEL);
                // SAFETY: `p` is null or a live block of ours.
                let q = unsafe {
                    match op % 16 {
                        5 => {
                            let count = 1 + (n % 7);
                            if overflow {
                                reallocarray(p, usize::MAX, 2)
                            } else if n.is_multiple_of(count) {
                                reallocarray(p, count, n / count)
                            } else {
                                reallocarray(p, 1, n)
                            }
                        }
                        4 => __libc_realloc(p, n),
                        _ => realloc(p, n),
                    }
                };
                let n = if overflow { usize::MAX } else { n };
                match old {
                    None => {
                        let min_align = if n >= 16 { 16 } else { 8 };
                        let r = self.take("realloc(NULL, n)", q, n, min_align, n <= SURE_BYTES);
                        self.put(slot, r);
                    }
                    Some(o) if n == 0 => {
                        // glibc: realloc(p, 0) frees p and returns NULL.
                        assert!(q.is_null(), "realloc(p, 0) returned {q:?}");
                        assert_eq!(errno(), SENTINEL, "realloc(p, 0) changed errno");
                        self.live -= o.block.size;
                    }
                    Some(o) if q.is_null() => {
                        assert!(n > SURE_BYTES, "realloc to {n} B failed");
                        assert_eq!(errno(), libc::ENOMEM, "failed realloc: errno");
                        o.block
                            .check_all("after a failed realloc (the block must be intact)");
                        self.slots[slot] = Some(o);
                    }
                    Some(o) => {
                        assert_eq!(errno(), SENTINEL, "realloc success changed errno");
                        let min_align = if n >= 16 { 16 } else { 8 };
                        assert_eq!(q as usize % min_align, 0, "realloc: {q:?} misaligned");
                        // SAFETY: live.
                        let usable = unsafe { malloc_usable_size(q) };
                        assert!(usable >= n, "realloc: usable size {usable} below {n}");
                        let nb = Block {
                            addr: q as usize,
                            size: n,
                            ..o.block
                        };
                        let kept = o.block.size.min(n);
                        nb.check(kept, o.block.size, "after realloc");
                        nb.fill(kept);
                        self.live = self.live - o.block.size + n;
                        self.slots[slot] = Some(CBlock {
                            block: nb,
                            align: 16,
                        });
                    }
                }
            }
            6 => {
                let align = align_arg(b)?;
                let n = self.budget(size(b)?);
                let mut out: *mut c_void = 0x5a5a as *mut c_void;
                // SAFETY: `out` is writable.
                let r = unsafe {
                    if op & 16 == 0 {
                        posix_memalign(&mut out, align, n)
                    } else {
                        __posix_memalign(&mut out, align, n)
                    }
                };
                if !align.is_power_of_two() || align % 8 != 0 {
                    assert_eq!(r, libc::EINVAL, "posix_memalign({align}, {n}) returned {r}");
                    assert_eq!(errno(), SENTINEL, "posix_memalign EINVAL changed errno");
                    assert_eq!(out as usize, 0x5a5a, "posix_memalign wrote on failure");
                } else if r == 0 {
                    let got = self.take("posix_memalign", out, n, align, true);
                    self.put(slot, got);
                } else {
                    assert_eq!(r, libc::ENOMEM, "posix_memalign({align}, {n}) returned {r}");
                    assert!(!ok_size(n, align), "posix_memalign({align}, {n}) failed");
                    assert_eq!(errno(), libc::ENOMEM, "posix_memalign ENOMEM: errno");
                    assert_eq!(out as usize, 0x5a5a, "posix_memalign wrote on failure");
                }
            }
            7 | 8 => {
                let align = align_arg(b)?;
                let n = self.budget(size(b)?);
                // SAFETY: any arguments.
                let p = unsafe {
                    match (op % 16, op & 16) {
                        (7, _) => aligned_alloc(align, n),
                        (_, 0) => memalign(align, n),
                        _ => __libc_memalign(align, n),
                    }
                };
                match align.checked_next_power_of_two() {
                    None => {
                        assert!(p.is_null(), "memalign({align:#x}, {n}) succeeded");
                        assert_eq!(
                            errno(),
                            libc::EINVAL,
                            "memalign of an impossible alignment: errno"
                        );
                    }
                    Some(a) => {
                        let r = self.take("memalign/aligned_alloc", p, n, a.max(8), ok_size(n, a));
                        self.put(slot, r);
                    }
                }
            }
            9 | 10 => {
                let n = self.budget(size(b)?);
                let pv = op % 16 == 10;
                // SAFETY: any size.
                let p = unsafe {
                    if pv {
                        pvalloc(n)
                    } else {
                        valloc(n)
                    }
                };
                let want = if pv {
                    n.checked_add(PAGE - 1)
                        .map_or(usize::MAX, |r| (r & !(PAGE - 1)).max(PAGE))
                } else {
                    n
                };
                let r = self.take(
                    if pv { "pvalloc" } else { "valloc" },
                    p,
                    want,
                    PAGE,
                    want <= SURE_BYTES,
                );
                self.put(slot, r);
            }
            11 => {
                // SAFETY: null or a live block.
                match self.slots[slot] {
                    None => assert_eq!(unsafe { malloc_usable_size(ptr::null_mut()) }, 0),
                    Some(c) => {
                        let n = unsafe { malloc_usable_size(c.block.ptr().cast()) };
                        assert!(
                            n >= c.block.size,
                            "malloc_usable_size {n} below {}",
                            c.block.size
                        );
                        assert_eq!(
                            c.block.ptr() as usize % c.align,
                            0,
                            "a block lost its alignment"
                        );
                        c.block.check_all("at malloc_usable_size");
                    }
                }
                assert_eq!(errno(), SENTINEL, "malloc_usable_size changed errno");
            }
            12 | 13 => match self.slots[slot].take() {
                Some(c) => self.release(c, "before free"),
                None => {
                    // SAFETY: free(NULL) does nothing.
                    unsafe { free(ptr::null_mut()) };
                    assert_eq!(errno(), SENTINEL, "free(NULL) changed errno");
                }
            },
            14 if op & 16 == 0 => {
                // SAFETY: no preconditions.
                let r = unsafe { malloc_trim(0) };
                assert!(r == 0 || r == 1, "malloc_trim returned {r}");
            }
            14 => {
                // The walk from C (single-threaded here: quiescent).
                // SAFETY: no preconditions.
                let bad = unsafe { slubmalloc_check_stats() };
                assert_eq!(
                    bad, 0,
                    "slubmalloc_check_stats: {bad} classes disagree with the walk"
                );
            }
            _ => {
                // A burst: many small blocks of one size, then every other freed.
                let n = 1 + b.u16()? as usize % 2048;
                let count = 1 + b.u8()? as usize * 2;
                for k in 0..count {
                    let s = (slot + k) % SLOTS;
                    set_errno(SENTINEL);
                    // SAFETY: any size.
                    let p = unsafe { malloc(n) };
                    let r = self.take(
                        "malloc in a burst",
                        p,
                        n,
                        if n >= 16 { 16 } else { 8 },
                        true,
                    );
                    self.put(s, r);
                }
                for k in (0..count).step_by(2) {
                    if let Some(c) = self.slots[(slot + k) % SLOTS].take() {
                        self.release(c, "free in a burst");
                    }
                }
            }
        }
        Some(())
    }
}

fuzz_target!(|data: &[u8]| {
    let base = model::baseline();
    let mut h = Harness {
        slots: vec![None; SLOTS],
        live: 0,
        keys: 0,
    };
    let mut bytes = Bytes(data);
    while h.op(&mut bytes).is_some() {}
    for s in 0..SLOTS {
        if let Some(c) = h.slots[s].take() {
            h.release(c, "at the end");
        }
    }
    drop(h);
    model::verify_since(&base, "after an input, everything freed");
});
