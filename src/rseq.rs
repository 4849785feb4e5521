//! Restartable sequences: whether the process runs the per-CPU level
//! (`cpu_sheaf`), chosen once at process start, and what that level needs
//! from glibc and the kernel.
//!
//! glibc (2.35+) registers every thread's `struct rseq` at a fixed offset
//! from the thread pointer (`__rseq_offset`) and says how much of it the
//! kernel fills (`__rseq_size`, 0 when registration failed or was turned
//! off: `GLIBC_TUNABLES=glibc.pthread.rseq=0`, Valgrind, a seccomp filter).
//! slubmalloc never registers on its own and never writes an ID field
//! (`cpu_id_start`, `cpu_id`, `node_id`, `mm_cid`); it writes only
//! `rseq_cs`, the pointer to the descriptor of the section a thread is in,
//! and reads `cpu_id` inside each section.
//!
//! Per-CPU mode, iff all of: x86-64 Linux with glibc, neither loom nor
//! Miri; `__rseq_size != 0`; `membarrier(REGISTER_PRIVATE_EXPEDITED_RSEQ)`
//! succeeds (a drain of another CPU's sheaves fences it, Linux 5.10+); and
//! `SLUBMALLOC_PERCPU` is not `0`. Else the fallback: the per-thread sheaves
//! alone, as before the per-CPU level.
//!
//! `__rseq_offset` and `__rseq_size` are weak references, read through the
//! GOT: a glibc older than 2.35, which has neither, loads the library and
//! the binaries (the version need on `GLIBC_2.35` is weak) and gets the
//! fallback.

use crate::sync::{AtomicU64, Ordering};
use crate::sys;

/// Whether this build can run the per-CPU level at all.
pub const SUPPORTED: bool = cfg!(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(loom),
    not(miri)
));

/// 1 in per-CPU mode, else 0 (the statistics' `percpu_mode`; named by the
/// anchor).
pub static PERCPU_MODE: AtomicU64 = AtomicU64::new(0);
/// Whether the mode was chosen (a forked child inherits the choice).
static CHOSEN: AtomicU64 = AtomicU64::new(0);
/// `__rseq_offset`, copied at `init` (valid in per-CPU mode only).
static TLS_OFFSET: AtomicU64 = AtomicU64::new(0);

/// The offset of `cpu_id` in `struct rseq`.
pub const CPU_ID: usize = 4;
/// The offset of `rseq_cs` in `struct rseq`.
pub const RSEQ_CS: usize = 8;

/// `membarrier` commands (Linux's `enum membarrier_cmd`).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: i64 = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: i64 = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: i64 = 1;

/// Whether the mode was chosen (a forked child inherits the choice).
pub fn chosen() -> bool {
    CHOSEN.load(Ordering::Relaxed) != 0
}

/// Whether glibc registered the thread and the kernel has the fence: the
/// mode's conditions but the option and the table (`cpu_sheaf::init`).
pub fn probe() -> bool {
    SUPPORTED
        && registration().is_some_and(|off| {
            TLS_OFFSET.store(off as u64, Ordering::Relaxed);
            register_membarrier()
        })
}

/// Sets the mode, once per process (`cpu_sheaf::init`, before the first
/// heap).
pub fn choose(on: bool) {
    PERCPU_MODE.store(on as u64, Ordering::Relaxed);
    CHOSEN.store(1, Ordering::Relaxed);
}

/// Whether the process runs the per-CPU level (false before `init`).
#[inline]
pub fn on() -> bool {
    PERCPU_MODE.load(Ordering::Relaxed) == 1
}

/// `__rseq_offset`: the thread's `struct rseq` is at the thread pointer
/// plus this (per-CPU mode only).
#[inline]
pub fn tls_offset() -> usize {
    TLS_OFFSET.load(Ordering::Relaxed) as usize
}

/// Makes every critical section running on `cpu` commit or abort before it
/// returns (`membarrier(PRIVATE_EXPEDITED_RSEQ, FLAG_CPU, cpu)`); true if
/// the kernel did, or if there is no such CPU (nothing runs there).
pub fn fence_cpu(cpu: usize) -> bool {
    const ENXIO: i32 = 6;
    // SAFETY: a system call with integer arguments.
    let r = unsafe {
        sys::syscall(
            sys::SYS_membarrier,
            MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
            MEMBARRIER_CMD_FLAG_CPU,
            cpu as i64,
        )
    };
    // SAFETY: this thread's errno slot.
    r == 0 || (r == -1 && unsafe { *sys::__errno_location() } == ENXIO)
}

/// Registers the process for `fence_cpu`: true if the kernel has it.
fn register_membarrier() -> bool {
    // SAFETY: a system call with integer arguments.
    let r = unsafe {
        sys::syscall(
            sys::SYS_membarrier,
            MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ,
            0i64,
            0i64,
        )
    };
    r == 0
}

pub use glibc::cpu_hint;
use glibc::registration;

/// What reads glibc's registration: x86-64 assembly, where the per-CPU
/// mode runs.
#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(loom),
    not(miri)
))]
mod glibc {
    use super::{tls_offset, CPU_ID};

    /// The CPU the thread ran on when the kernel last wrote its `cpu_id`
    /// (a hint outside a section: the thread may move at once), or a
    /// negative value where it is not registered. Per-CPU mode only.
    pub fn cpu_hint() -> i32 {
        let cpu: i32;
        // SAFETY: per-CPU mode only: the thread's `struct rseq` lies at the
        // thread pointer plus `__rseq_offset`, its `cpu_id` a 32-bit field
        // the kernel writes; a plain load.
        unsafe {
            core::arch::asm!(
                "mov {cpu:e}, dword ptr fs:[{off} + {id}]",
                off = in(reg) tls_offset(),
                id = const CPU_ID,
                cpu = out(reg) cpu,
                options(nostack, readonly, preserves_flags),
            )
        };
        cpu
    }

    /// glibc's registration: `__rseq_offset` if `__rseq_size` is not 0.
    pub fn registration() -> Option<isize> {
        let (offset, size): (*const isize, *const u32);
        // SAFETY: loads two addresses from the GOT; a weak reference that
        // nothing defines reads as null. Every reference to the two symbols
        // in the crate is this one, so that they stay weak in the linked
        // object.
        unsafe {
            core::arch::asm!(
                ".weak __rseq_offset",
                ".weak __rseq_size",
                "mov {o}, qword ptr [rip + __rseq_offset@GOTPCREL]",
                "mov {s}, qword ptr [rip + __rseq_size@GOTPCREL]",
                o = out(reg) offset,
                s = out(reg) size,
                options(nostack, nomem, preserves_flags),
            )
        };
        if offset.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: glibc's two constants, written before any program code
        // runs.
        let (offset, size) = unsafe { (offset.read(), size.read()) };
        (size != 0).then_some(offset)
    }
}

/// Elsewhere: no registration is read, the fallback runs.
#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_env = "gnu",
    not(loom),
    not(miri)
)))]
mod glibc {
    pub fn cpu_hint() -> i32 {
        -1
    }

    pub fn registration() -> Option<isize> {
        None
    }
}
