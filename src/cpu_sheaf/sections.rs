//! The per-CPU sheaves' restartable sequences (`cpu_sheaf`): one `asm!`
//! block each, from the arming store to the commit. Each takes the table's
//! entry for CPU 0 (`tab`, entries -2 and -1 before it) and reads the CPU
//! and its region inside the section; the caller holds no region pointer
//! across one.
//!
//! Rules every section keeps: the descriptor (`struct rseq_cs`: version 0,
//! flags 0, start, post-commit offset, abort address) goes in `__rseq_cs`
//! by `.pushsection`, one per section (the functions are never inlined, so
//! each has one copy); the arming store writes its address into the
//! thread's `rseq_cs`; the CPU is read after the start label; the commit is
//! a single 16-bit store, the section's last instruction; the abort handler
//! in `__rseq_failure` follows the signature (`0x53053053`, the operand of
//! a `ud1` that traps if run into), counts the restart and jumps back to
//! the arming. Registers written inside a section are outputs it computes
//! again after a restart (`out`, never `lateout`, so none shares a register
//! with an input); inputs are never written. No `nomem` or `readonly`: each
//! block is a compiler barrier for memory. Numeric labels from 20 on
//! (`binary_asm_labels`).

use crate::sync::AtomicU64;

/// Sections restarted after an abort (preemption, migration, a signal);
/// named by the anchor.
pub static RESTARTS: AtomicU64 = AtomicU64::new(0);

/// The migration test's window (`--cfg slubmalloc_rseq_window`, a test
/// build): inside `push_batch`'s section, after the region is read, the
/// thread whose thread pointer is `slubmalloc_rseq_window_thread` stores 1
/// in `slubmalloc_rseq_window_inside` and spins while
/// `slubmalloc_rseq_window_gate` is 0, so that the test can migrate it
/// there. Other builds have no window.
#[cfg(slubmalloc_rseq_window)]
macro_rules! window {
    () => {
        concat!(
            "mov {t}, qword ptr fs:[0]\n",
            "cmp {t}, qword ptr [rip + slubmalloc_rseq_window_thread]\n",
            "jne 28f\n",
            "mov byte ptr [rip + slubmalloc_rseq_window_inside], 1\n",
            "27:\n",
            "pause\n",
            "cmp byte ptr [rip + slubmalloc_rseq_window_gate], 0\n",
            "je 27b\n",
            "28:",
        )
    };
}

#[cfg(not(slubmalloc_rseq_window))]
macro_rules! window {
    () => {
        ""
    };
}

/// The window's words (see `window!`), for the test to set and read.
#[cfg(slubmalloc_rseq_window)]
#[allow(non_upper_case_globals)]
mod window_words {
    use crate::sync::{AtomicU64, AtomicU8};

    #[no_mangle]
    pub static slubmalloc_rseq_window_thread: AtomicU64 = AtomicU64::new(0);
    #[no_mangle]
    pub static slubmalloc_rseq_window_inside: AtomicU8 = AtomicU8::new(0);
    #[no_mangle]
    pub static slubmalloc_rseq_window_gate: AtomicU8 = AtomicU8::new(1);
}

/// A section's start: its descriptor, in `__rseq_cs`, and the arming
/// store (labels 20: the arming, 21: the start, 22: the end, just after the
/// commit, 24: the abort handler); `{r}` is scratch.
macro_rules! section_start {
    () => {
        concat!(
            ".pushsection __rseq_cs, \"aw\"\n",
            ".balign 32\n",
            "23:\n",
            ".long 0, 0\n",
            ".quad 21f, 22f - 21f, 24f\n",
            ".popsection\n",
            "20:\n",
            "lea {r}, [rip + 23b]\n",
            "mov qword ptr fs:[{off} + {cs}], {r}\n",
            "21:",
        )
    };
}

/// A section's end (label 22, after the commit) and its abort handler, in
/// `__rseq_failure`: the signature, then the restart counted and a jump
/// back to the arming.
macro_rules! section_end {
    () => {
        concat!(
            "22:\n",
            ".pushsection __rseq_failure, \"ax\"\n",
            ".byte 0x0f, 0xb9, 0x3d\n",
            ".long 0x53053053\n",
            "24:\n",
            "lock inc qword ptr [rip + {restarts}]\n",
            "jmp 20b\n",
            ".popsection",
        )
    };
}

pub use imp::{pop_batch, push_batch, set_end};

#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(loom),
    not(miri)
))]
mod imp {
    use crate::cpu_sheaf::sections::RESTARTS;
    use crate::rseq::{tls_offset, CPU_ID, RSEQ_CS};

    /// Moves up to `n` pointers from `src` onto this CPU's sheaf of the
    /// class whose header is at byte `hdr` of a region: how many, the first
    /// ones (0: no room, or stopped). Inside the section: the CPU's region,
    /// `room = end - current`, `k = min(room, n)`, copies to the slots above
    /// `current` (speculative: nothing reads them before the commit), and
    /// the commit, `current + k`.
    ///
    /// # Safety
    /// `tab` is the table (per-CPU mode); `src` holds `n` pointers.
    #[inline(never)]
    pub unsafe fn push_batch(tab: *mut u8, hdr: usize, src: *const *mut u8, n: usize) -> usize {
        let k: usize;
        // SAFETY: per the contract; the rules at the top of the file.
        unsafe {
            core::arch::asm!(
                section_start!(),
                "movsxd {r}, dword ptr fs:[{off} + {id}]",
                "mov {r}, qword ptr [{tab} + {r} * 8]",
                window!(),
                "movzx {cur:e}, word ptr [{r} + {hdr}]",
                "movzx {k:e}, word ptr [{r} + {hdr} + 2]",
                "sub {k:e}, {cur:e}",
                "cmp {k}, {n}",
                "cmova {k}, {n}",
                "test {k}, {k}",
                "jz 22f",
                "lea {dst}, [{r} + {cur} * 8]",
                "add {cur:e}, {k:e}",
                "mov {i}, {k}",
                "25:",
                "dec {i}",
                "mov {t}, qword ptr [{src} + {i} * 8]",
                "mov qword ptr [{dst} + {i} * 8], {t}",
                "jnz 25b",
                "mov word ptr [{r} + {hdr}], {cur:x}",
                section_end!(),
                off = in(reg) tls_offset(),
                tab = in(reg) tab,
                hdr = in(reg) hdr,
                src = in(reg) src,
                n = in(reg) n,
                cs = const RSEQ_CS,
                id = const CPU_ID,
                restarts = sym RESTARTS,
                r = out(reg) _,
                cur = out(reg) _,
                k = out(reg) k,
                dst = out(reg) _,
                i = out(reg) _,
                t = out(reg) _,
                options(nostack),
            )
        };
        k
    }

    /// Moves up to `n` of the newest blocks of this CPU's sheaf of the
    /// class whose header is at byte `hdr` (its slots from `begin`) to
    /// `dst`, in their order: how many (0: empty or stopped, `current` at
    /// or below `begin`: `STOPPED`'s is 0). The copies to `dst` are
    /// speculative; the commit is `current - k`.
    ///
    /// # Safety
    /// `tab` is the table (per-CPU mode); `dst` has room for `n` pointers.
    #[inline(never)]
    pub unsafe fn pop_batch(
        tab: *mut u8,
        hdr: usize,
        begin: usize,
        dst: *mut *mut u8,
        n: usize,
    ) -> usize {
        let k: usize;
        // SAFETY: per the contract; the rules at the top of the file.
        unsafe {
            core::arch::asm!(
                section_start!(),
                "xor {k:e}, {k:e}",
                "movsxd {r}, dword ptr fs:[{off} + {id}]",
                "mov {r}, qword ptr [{tab} + {r} * 8]",
                "movzx {cur:e}, word ptr [{r} + {hdr}]",
                "mov {t}, {cur}",
                "sub {t}, {begin}",
                "jbe 22f",
                "cmp {t}, {n}",
                "cmova {t}, {n}",
                "mov {k}, {t}",
                "sub {cur:e}, {k:e}",
                "lea {s}, [{r} + {cur} * 8]",
                "mov {i}, {k}",
                "25:",
                "dec {i}",
                "mov {t}, qword ptr [{s} + {i} * 8]",
                "mov qword ptr [{dst} + {i} * 8], {t}",
                "jnz 25b",
                "mov word ptr [{r} + {hdr}], {cur:x}",
                section_end!(),
                off = in(reg) tls_offset(),
                tab = in(reg) tab,
                hdr = in(reg) hdr,
                begin = in(reg) begin,
                dst = in(reg) dst,
                n = in(reg) n,
                cs = const RSEQ_CS,
                id = const CPU_ID,
                restarts = sym RESTARTS,
                r = out(reg) _,
                cur = out(reg) _,
                k = out(reg) k,
                s = out(reg) _,
                i = out(reg) _,
                t = out(reg) _,
                options(nostack),
            )
        };
        k
    }

    /// Sets `end` of the class whose header is at byte `hdr` to `new` if
    /// the thread runs on the CPU whose region is `expect` and `end` is
    /// still `old`: whether it did. The commit is the 16-bit store of `end`.
    ///
    /// # Safety
    /// `tab` is the table (per-CPU mode).
    #[inline(never)]
    pub unsafe fn set_end(
        tab: *mut u8,
        hdr: usize,
        expect: *mut u8,
        old: usize,
        new: usize,
    ) -> bool {
        let done: usize;
        // SAFETY: per the contract; the rules at the top of the file.
        unsafe {
            core::arch::asm!(
                section_start!(),
                "xor {done:e}, {done:e}",
                "movsxd {r}, dword ptr fs:[{off} + {id}]",
                "mov {r}, qword ptr [{tab} + {r} * 8]",
                "cmp {r}, {expect}",
                "jne 22f",
                "movzx {t:e}, word ptr [{r} + {hdr} + 2]",
                "cmp {t}, {old}",
                "jne 22f",
                "mov {done:e}, 1",
                "mov word ptr [{r} + {hdr} + 2], {new:x}",
                section_end!(),
                off = in(reg) tls_offset(),
                tab = in(reg) tab,
                hdr = in(reg) hdr,
                expect = in(reg) expect,
                old = in(reg) old,
                new = in(reg) new,
                cs = const RSEQ_CS,
                id = const CPU_ID,
                restarts = sym RESTARTS,
                r = out(reg) _,
                t = out(reg) _,
                done = out(reg) done,
                options(nostack),
            )
        };
        done != 0
    }
}

/// Builds without rseq never enter per-CPU mode.
#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(loom),
    not(miri)
)))]
mod imp {
    pub unsafe fn push_batch(_: *mut u8, _: usize, _: *const *mut u8, _: usize) -> usize {
        0
    }

    pub unsafe fn pop_batch(_: *mut u8, _: usize, _: usize, _: *mut *mut u8, _: usize) -> usize {
        0
    }

    pub unsafe fn set_end(_: *mut u8, _: usize, _: *mut u8, _: usize, _: usize) -> bool {
        false
    }
}
