//! What runs in forked children: the fork check, misuses that must stop
//! the process, out of memory under an address-space limit.

use super::*;

/// Forks; the child runs `f` and exits 0, or 1 if it panics (it dies by
/// SIGABRT where panics abort); the parent panics unless the child exited 0.
pub(super) fn in_child(what: &str, f: impl FnOnce()) {
    let status = fork_and_wait(|| {
        let ok = panic::catch_unwind(AssertUnwindSafe(f)).is_ok();
        coverage::write_profile();
        // SAFETY: `_exit` ends the child without running the parent's
        // exit handlers or flushing its buffers twice.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) }
    });
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{what} failed: wait status {status:#x}"
    );
}

/// Forks, runs `child` in the child (it must not return), waits for it.
pub(super) fn fork_and_wait(child: impl FnOnce()) -> i32 {
    // SAFETY: the child only runs `child`, which ends it with `_exit` or a
    // signal; it uses no lock another thread may have held at the fork except
    // the allocator's, whose repair in the child is what is being tested.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Default dispositions, so that a crash or abort in the child is
        // what the parent sees (a fuzzer's handlers would turn it into a
        // report and an exit code).
        for sig in [
            libc::SIGABRT,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
        ] {
            // SAFETY: resetting a disposition has no preconditions.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
        coverage::on_abort_write_profile();
        child();
        coverage::write_profile();
        // SAFETY: as in `in_child`.
        unsafe { libc::_exit(0) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is writable.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINTR),
            "waitpid failed"
        );
    }
    status
}

/// Coverage builds (`ci/fuzz.sh coverage` sets `--cfg fuzz_coverage`): the
/// profile runtime writes at `exit`, which a child never reaches (it ends
/// with `_exit` or dies by SIGABRT), so children write theirs themselves.
#[allow(unexpected_cfgs)]
pub(super) mod coverage {
    #[cfg(fuzz_coverage)]
    extern "C" {
        fn __llvm_profile_write_file() -> i32;
    }

    pub fn write_profile() {
        #[cfg(fuzz_coverage)]
        // SAFETY: the runtime's own writer; called once, before the child ends.
        unsafe {
            __llvm_profile_write_file();
        }
    }

    /// A SIGABRT handler that writes the profile, then dies of the signal.
    pub fn on_abort_write_profile() {
        #[cfg(fuzz_coverage)]
        {
            extern "C" fn on_abort(_: i32) {
                write_profile();
                // SAFETY: back to the default, so the re-raised signal kills.
                unsafe {
                    libc::signal(libc::SIGABRT, libc::SIG_DFL);
                    libc::raise(libc::SIGABRT);
                }
            }
            let handler: extern "C" fn(i32) = on_abort;
            // SAFETY: a plain handler; the child is single-threaded.
            unsafe { libc::signal(libc::SIGABRT, handler as libc::sighandler_t) };
        }
    }
}

// ---------------------------------------------------------------------------
// Misuse: the process must stop with the project's message.

#[derive(Clone, Copy, Debug)]
pub enum Misuse {
    DoubleFreeSmall,
    DoubleFreeLarge,
    InteriorPointer,
    MadeUpPointer,
    StackPointer,
    CorruptedLink,
    /// A small block freed with a smaller size of another class.
    DeallocSmallerSize,
    /// A small block freed with a bigger size of another class.
    DeallocBiggerSize,
    /// A large block freed with a small size.
    LargeDeallocAsSmall,
    /// A large block freed with a quarter or twice its size.
    LargeDeallocWithAnotherLargeSize,
    /// A small block freed with a large size.
    SmallDeallocAsLarge,
    /// A small block freed with an alignment of a page, a large one with
    /// twice its address's.
    DeallocWithAnAlignmentItLacks,
    /// A realloc given a bigger old size of another class.
    ReallocWithTheWrongLayout,
    /// Debug mode only.
    Overflow,
    /// Debug mode only.
    WriteAfterFree,
}

impl Misuse {
    fn names(self) -> &'static [&'static str] {
        match self {
            Misuse::DoubleFreeSmall | Misuse::DoubleFreeLarge => &["double free"],
            Misuse::InteriorPointer | Misuse::MadeUpPointer | Misuse::StackPointer => {
                &["invalid pointer"]
            }
            Misuse::CorruptedLink | Misuse::WriteAfterFree => &["corrupted", "write after free"],
            Misuse::DeallocSmallerSize
            | Misuse::DeallocBiggerSize
            | Misuse::LargeDeallocAsSmall
            | Misuse::LargeDeallocWithAnotherLargeSize
            | Misuse::SmallDeallocAsLarge
            | Misuse::DeallocWithAnAlignmentItLacks
            | Misuse::ReallocWithTheWrongLayout => &["dealloc with the wrong layout"],
            Misuse::Overflow => &["overflow", "red zone"],
        }
    }
}

/// Writes `expect LO HI\n` (the range the message's address must fall in)
/// to fd 2 of the child, which the parent reads from a pipe.
pub(super) fn announce(lo: usize, hi: usize) {
    let mut buf = [0u8; 64];
    let mut w = std::io::Cursor::new(&mut buf[..]);
    use std::io::Write;
    let _ = writeln!(w, "expect {lo:x} {hi:x}");
    let n = w.position() as usize;
    // SAFETY: `buf[..n]` is initialised.
    unsafe { libc::write(2, buf.as_ptr().cast(), n) };
}

pub(super) fn raw_alloc(size: usize, align: usize) -> *mut u8 {
    let layout = Layout::from_size_align(size, align).unwrap();
    // SAFETY: `size` is not zero.
    let p = unsafe { SlubMalloc.alloc(layout) };
    assert!(!p.is_null());
    p
}

/// # Safety
/// As for `GlobalAlloc::dealloc`, except where a misuse is the point.
pub(super) unsafe fn raw_free(p: *mut u8, size: usize, align: usize) {
    // SAFETY: per the contract.
    unsafe { SlubMalloc.dealloc(p, Layout::from_size_align(size, align).unwrap()) }
}

/// Commits misuse `kind` (modulo the kinds this mode stops) in a child and
/// checks that the child died by SIGABRT after exactly one "slubmalloc: "
/// line that names the misuse and carries its address.
pub(super) fn misuse(kind: u8, size: usize) {
    let kinds = misuses();
    let m = kinds[kind as usize % kinds.len()];
    misuse_of(m, size);
}

/// Commits every misuse this mode stops, each in a child; returns how many.
pub fn check_every_misuse(size: usize) -> usize {
    for &m in misuses() {
        assert!(misuse_of(m, size), "misuse {m:?} never met the allocator");
    }
    misuses().len()
}

/// The misuses this mode stops: the debug mode's two come last.
pub(super) fn misuses() -> &'static [Misuse] {
    const ALL: [Misuse; 15] = [
        Misuse::DoubleFreeSmall,
        Misuse::DoubleFreeLarge,
        Misuse::InteriorPointer,
        Misuse::MadeUpPointer,
        Misuse::StackPointer,
        Misuse::CorruptedLink,
        Misuse::DeallocSmallerSize,
        Misuse::DeallocBiggerSize,
        Misuse::LargeDeallocAsSmall,
        Misuse::LargeDeallocWithAnotherLargeSize,
        Misuse::SmallDeallocAsLarge,
        Misuse::DeallocWithAnAlignmentItLacks,
        Misuse::ReallocWithTheWrongLayout,
        Misuse::Overflow,
        Misuse::WriteAfterFree,
    ];
    &ALL[..if mode().debug {
        ALL.len()
    } else {
        ALL.len() - 2
    }]
}

/// Whether the misuse met the allocator (and was stopped as it must be).
pub fn misuse_of(m: Misuse, size: usize) -> bool {
    let small = 16 + size % 1000;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe failed");
    let status = fork_and_wait(|| {
        // SAFETY: plain descriptor calls on descriptors we own.
        unsafe {
            libc::dup2(fds[1], 2);
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        commit(m, small, size);
    });
    // SAFETY: the write end is ours, the child has its copy.
    unsafe { libc::close(fds[1]) };
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    // SAFETY: ours.
    unsafe { libc::close(fds[0]) };
    let text = String::from_utf8_lossy(&out);
    let what =
        format!("misuse {m:?} ({small} B / {size} B): wait status {status:#x}, stderr:\n{text}");
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == NOT_MET {
        return false; // the misused block was never handed out again
    }
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGABRT,
        "{what}\nexpected death by SIGABRT"
    );
    let range = text
        .lines()
        .find_map(|l| l.strip_prefix("expect "))
        .and_then(|r| {
            let (lo, hi) = r.split_once(' ')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("{what}\nthe child announced no address"));
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("slubmalloc: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}\nexpected exactly one \"slubmalloc: \" line"
    );
    let line = lines[0].to_lowercase();
    assert!(
        m.names().iter().any(|n| line.contains(n)),
        "{what}\nthe message does not name the misuse (one of {:?})",
        m.names()
    );
    let addr = line
        .split("0x")
        .skip(1)
        .filter_map(|h| {
            let digits: String = h.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            usize::from_str_radix(&digits, 16).ok()
        })
        .find(|a| (range.0..=range.1).contains(a));
    assert!(
        addr.is_some(),
        "{what}\nthe message carries no address in {:x?}",
        range
    );
    true
}

/// A misuse child's exit code when the misuse never reached the allocator.
const NOT_MET: i32 = 3;

/// In the child: commits the misuse; returns only if it was not stopped.
pub(super) fn commit(m: Misuse, small: usize, size: usize) {
    match m {
        Misuse::DoubleFreeSmall => {
            let a = raw_alloc(small, 8);
            let b = raw_alloc(small, 8);
            announce(a as usize, a as usize);
            // SAFETY: the second free of `a` is the misuse.
            unsafe {
                raw_free(a, small, 8);
                raw_free(b, small, 8);
                raw_free(a, small, 8);
            }
            // A free into a sheaf reads nothing of the block: the double
            // free is stopped when `a` next leaves the sheaf, before it is
            // handed out twice. The class's next three blocks would be.
            for _ in 0..3 {
                raw_alloc(small, 8);
            }
        }
        Misuse::DoubleFreeLarge => {
            let n = MAX_SMALL_BYTES + 1 + size % (1 << 20);
            let a = raw_alloc(n, 8);
            announce(a as usize, a as usize);
            // SAFETY: the second free is the misuse.
            unsafe {
                raw_free(a, n, 8);
                raw_free(a, n, 8);
            }
        }
        Misuse::InteriorPointer => {
            let a = raw_alloc(small.max(32), 16);
            let inner = a.wrapping_add(8);
            announce(inner as usize, inner as usize);
            // SAFETY: none: an interior pointer is the misuse.
            unsafe { raw_free(inner, small.max(32), 16) };
        }
        Misuse::MadeUpPointer => {
            let p = (0x5e5e_0000_0000usize + (size << 4)) as *mut u8;
            announce(p as usize, p as usize);
            // A large layout: Rust's dealloc trusts a small one to be a slab
            // block (the C free path checks every pointer).
            // SAFETY: none: the made-up pointer is the misuse.
            unsafe { raw_free(p, 1 << 20, 8) };
        }
        Misuse::StackPointer => {
            let mut local = [0u8; 64];
            let p = std::hint::black_box(local.as_mut_ptr());
            announce(p as usize, p as usize);
            // SAFETY: none: a stack address is the misuse.
            unsafe { raw_free(p, 1 << 20, 8) };
        }
        Misuse::CorruptedLink => {
            let a = raw_alloc(small, 8);
            let b = with_a_neighbour(small);
            // SAFETY: `a` and `b` are live; after their frees, `b`'s first
            // word is its free-list link, or its second its sheaf's tag
            // (`src/sheaf.rs`), which the overwrite corrupts (`small` is 16
            // bytes or more).
            unsafe {
                raw_free(a, small, 8);
                raw_free(b, small, 8);
                let junk = 0x4141_4141_4141_4141 ^ size as u64;
                (b as *mut [u64; 2]).write_unaligned([junk, junk]);
            }
            let slab = 64 << 10;
            announce((b as usize).saturating_sub(slab), b as usize + slab);
            // The list is followed when `b` is handed out again (its link
            // read); a thousand more allocations take what follows it.
            // Whether `b` comes back at all is the allocator's choice (a
            // cold class takes objects from shared slabs, and `b`'s slab
            // may never be chosen again; in a forked child it may belong
            // to a thread lost in the fork): if it does not, the misuse
            // never met the allocator, and the child says so with exit
            // code 3.
            until_reused(b, small);
        }
        Misuse::DeallocSmallerSize | Misuse::DeallocBiggerSize => {
            // From 32 bytes up, a quarter of the size, or twice it and
            // more, is served from another class (in debug mode too, whose
            // slots are 9 bytes bigger): the smallest class is 16 bytes.
            let small = small.max(32);
            let a = raw_alloc(small, 8);
            announce(a as usize, a as usize);
            let wrong = match m {
                Misuse::DeallocSmallerSize => small / 4,
                _ => 2 * small + 64,
            };
            // SAFETY: none: the wrong size is the misuse.
            unsafe { raw_free(a, wrong, 8) };
        }
        Misuse::LargeDeallocAsSmall => {
            // About 1 MiB freed with a small size; or a block just above
            // the largest class freed with that class's size, which its
            // mapping holds: only the size's class tells.
            let (n, wrong) = if size % 2 == 0 {
                (8 * (MAX_SMALL_BYTES + 1) + size % (1 << 20), small)
            } else {
                (MAX_SMALL_BYTES + 1 + size % 4000, MAX_SMALL_BYTES - 16)
            };
            let a = raw_alloc(n, 8);
            announce(a as usize, a as usize);
            // SAFETY: none: the wrong size is the misuse.
            unsafe { raw_free(a, wrong, 8) };
        }
        Misuse::LargeDeallocWithAnotherLargeSize => {
            let n = 8 * (MAX_SMALL_BYTES + 1) + size % (1 << 20);
            let a = raw_alloc(n, 8);
            announce(a as usize, a as usize);
            // A quarter of the size (and a page less), or twice it.
            let wrong = if size % 2 == 0 { n / 4 - 4096 } else { 2 * n };
            // A block taken whole from a cached mapping of twice its size
            // or more holds `wrong` as well: the check compares a size with
            // the block's mapping (`layout`), and this free is one it must
            // let pass. Only a block of the process's history gets there.
            // SAFETY: a live block of ours.
            if wrong > n && unsafe { slubmalloc::usable_size(a) } >= wrong.next_multiple_of(4096) {
                // SAFETY: ends the child; see `in_child`.
                unsafe { libc::_exit(NOT_MET) }
            }
            // SAFETY: none: the wrong size is the misuse.
            unsafe { raw_free(a, wrong, 8) };
        }
        Misuse::SmallDeallocAsLarge => {
            let a = raw_alloc(small, 8);
            announce(a as usize, a as usize);
            // SAFETY: none: the large size is the misuse.
            unsafe { raw_free(a, MAX_SMALL_BYTES + 1 + size % (1 << 20), 8) };
        }
        Misuse::DeallocWithAnAlignmentItLacks => {
            // A small block with a page's alignment (a block of it would
            // come from the 4 KiB class), or a large one with twice the
            // alignment its address has.
            let n = if size % 2 == 0 {
                small
            } else {
                MAX_SMALL_BYTES + 1 + size % (1 << 20)
            };
            let a = raw_alloc(n, 8);
            announce(a as usize, a as usize);
            let align = if size % 2 == 0 {
                4096
            } else {
                2 << (a as usize).trailing_zeros()
            };
            // SAFETY: none: the alignment is the misuse.
            unsafe { raw_free(a, n, align) };
        }
        Misuse::ReallocWithTheWrongLayout => {
            let a = raw_alloc(small, 8);
            announce(a as usize, a as usize);
            let wrong = Layout::from_size_align(2 * small + 64, 8).unwrap();
            // SAFETY: none: the old layout is the misuse.
            let q = unsafe { SlubMalloc.realloc(a, wrong, 4 * small) };
            std::hint::black_box(q);
        }
        Misuse::Overflow => {
            let a = raw_alloc(small, 8);
            // SAFETY: `a` is live; the byte after it is the misuse (in
            // debug mode it is the red zone, inside the slot).
            unsafe { *a.add(small) ^= 0x5a };
            announce(a as usize, a as usize + 2 * small + 64);
            // SAFETY: `a` is live with this layout.
            unsafe { raw_free(a, small, 8) };
        }
        Misuse::WriteAfterFree => {
            let a = with_a_neighbour(small);
            // SAFETY: `a` is live, then the write after its free is the misuse.
            unsafe {
                raw_free(a, small, 8);
                *a.add(8 + size % (small - 8)) ^= 0x5a;
            }
            announce(a as usize, a as usize + 2 * small + 64);
            // The poison is checked when `a` is handed out again.
            until_reused(a, small);
        }
    }
}

/// In the child: a block of `size` bytes with another live block (kept,
/// never freed) in its slab, so that the slab cannot empty and go back to
/// its segment when the block is freed: a slab fresh from its segment is
/// carved anew, which erases a corrupted link or a write after free without
/// reading it, and the misuse would never meet the allocator. Exits with
/// `NOT_MET` if 64 allocations give no two blocks in one slab.
fn with_a_neighbour(size: usize) -> *mut u8 {
    let slab_bytes = 64 << 10;
    let mut seen = [0usize; 64];
    for i in 0..seen.len() {
        let p = raw_alloc(size, 8) as usize;
        if seen[..i].iter().any(|&q| (p ^ q) < slab_bytes) {
            return p as *mut u8;
        }
        seen[i] = p;
    }
    // SAFETY: ends the child; see `in_child`.
    unsafe { libc::_exit(NOT_MET) }
}

/// In the child: allocates `size` bytes until `p` comes back, then a
/// thousand more (the misuse must have stopped the process by then);
/// exits with `NOT_MET` if `p` never comes back in 100,000 allocations.
fn until_reused(p: *mut u8, size: usize) {
    let mut after = None;
    for i in 0..100_000 {
        if after.is_some_and(|a| i > a + 1000) {
            return;
        }
        if raw_alloc(size, 8) == p {
            after = Some(i);
        }
    }
    if after.is_none() {
        // SAFETY: ends the child; see `in_child`.
        unsafe { libc::_exit(NOT_MET) };
    }
}

// ---------------------------------------------------------------------------
// Out of memory

/// Virtual memory of this process, from /proc/self/statm.
pub(super) fn vm_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(0)
        * 4096
}

/// A child under an address-space limit: allocations return null (never
/// crash) until some are freed, then succeed again.
pub(super) fn oom_child(sh: &Shared, size: usize) {
    let lockstep = sh.cfg.lockstep;
    let small = 1 + size % 4096;
    in_child("an out-of-memory child", || {
        let mut big: Vec<*mut u8> = Vec::with_capacity(4096);
        let mut many: Vec<*mut u8> = Vec::with_capacity(1 << 18);
        let limit = vm_bytes() + (128 << 20);
        let rl = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        // SAFETY: `rl` is a valid rlimit.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        let layout = |n| Layout::from_size_align(n, 16).unwrap();
        // 1 MiB blocks until one fails: the cached large mappings of 1 MiB
        // and more are taken first, then the address space left.
        let fill = |big: &mut Vec<*mut u8>| {
            while big.len() < big.capacity() {
                // SAFETY: non-zero size.
                let p = unsafe { SlubMalloc.alloc(layout(1 << 20)) };
                if p.is_null() {
                    return;
                }
                // SAFETY: `p` is live: touch it.
                unsafe { *p = 1 };
                big.push(p);
            }
            panic!("no 1 MiB allocation failed under a limit of {limit} B");
        };
        fill(&mut big);
        while many.len() < many.capacity() {
            // SAFETY: non-zero size.
            let p = unsafe { SlubMalloc.alloc(layout(small)) };
            if p.is_null() {
                break;
            }
            many.push(p);
        }
        if let Some(&p) = many.first() {
            // The small blocks' slow paths purge when a deadline the parent
            // set passes (the child has no purger thread): free segments
            // and cached mappings are unmapped, address space under the
            // limit again, as much as the trim bound kept. Taken again here,
            // so that nothing but cached pieces under 1 MiB and less than
            // 1 MiB of address space is left for the realloc.
            fill(&mut big);
            // SAFETY: `p` is live; a realloc past the limit fails and keeps it.
            let q = unsafe { SlubMalloc.realloc(p, layout(small), 256 << 20) };
            assert!(q.is_null(), "a 256 MiB realloc succeeded under the limit");
        }
        for p in big.drain(..) {
            // SAFETY: live with this layout.
            unsafe { SlubMalloc.dealloc(p, layout(1 << 20)) };
        }
        // SAFETY: non-zero size.
        let again = unsafe { SlubMalloc.alloc(layout(1 << 20)) };
        assert!(
            !again.is_null(),
            "no 1 MiB allocation after freeing 1 MiB blocks"
        );
        // SAFETY: live with this layout.
        unsafe { SlubMalloc.dealloc(again, layout(1 << 20)) };
        for p in many.drain(..) {
            // SAFETY: live with this layout.
            unsafe { SlubMalloc.dealloc(p, layout(small)) };
        }
        if lockstep {
            assert_walk_agrees("in an out-of-memory child");
        }
    });
}
