//! The thread's heap pointer in thread-local storage.
//!
//! On x86-64 Linux the slot is declared in assembly and read with the
//! initial-exec model (`mov rax, [rip + sym@GOTTPOFF]; mov rax, fs:[rax]`),
//! as glibc's manual and mimalloc do for a preloaded malloc: in the shared
//! library, Rust's `thread_local!` would call `__tls_get_addr` on every
//! malloc and free (a call and its instructions each).
//! In an executable the linker relaxes this to a plain `fs:` load.
//! Elsewhere `thread_local!` with a const initialiser and no destructor.
//!
//! The slot starts as `&EMPTY_HEAP` (a relocated `.tdata` image, which the
//! dynamic linker copies to each thread after relocating it).

use crate::heap::{Heap, DEAD, EMPTY};

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod imp {
    use super::Heap;

    core::arch::global_asm!(
        ".pushsection .tdata,\"awT\",@progbits",
        ".p2align 3",
        ".globl slubmalloc_thread_heap",
        ".hidden slubmalloc_thread_heap",
        ".type slubmalloc_thread_heap, @object",
        ".size slubmalloc_thread_heap, 8",
        "slubmalloc_thread_heap:",
        ".quad {empty}",
        ".popsection",
        empty = sym crate::heap::EMPTY_HEAP,
    );

    /// Cost: two loads (the GOT entry, then `fs:`), no call.
    #[inline(always)]
    pub fn get() -> *mut Heap {
        let heap: *mut Heap;
        // SAFETY: reads this thread's slot, declared above; no side effects.
        unsafe {
            core::arch::asm!(
                "mov {h}, qword ptr [rip + slubmalloc_thread_heap@GOTTPOFF]",
                "mov {h}, qword ptr fs:[{h}]",
                h = out(reg) heap,
                options(nostack, readonly, preserves_flags, pure),
            );
        }
        heap
    }

    #[inline]
    pub fn set(heap: *mut Heap) {
        // SAFETY: writes this thread's slot, declared above.
        unsafe {
            core::arch::asm!(
                "mov {o}, qword ptr [rip + slubmalloc_thread_heap@GOTTPOFF]",
                "mov qword ptr fs:[{o}], {h}",
                o = out(reg) _,
                h = in(reg) heap,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
mod imp {
    use super::Heap;
    use core::cell::Cell;

    thread_local! {
        static HEAP: Cell<*mut Heap> = const { Cell::new(crate::heap::EMPTY) };
    }

    #[inline(always)]
    pub fn get() -> *mut Heap {
        HEAP.with(|h| h.get())
    }

    #[inline]
    pub fn set(heap: *mut Heap) {
        HEAP.with(|h| h.set(heap))
    }
}

pub use imp::{get, set};

/// The calling thread's heap: its own, or a static one (`EMPTY_HEAP` before
/// its first slow path, `DEAD_HEAP` after its exit).
#[inline(always)]
pub fn current() -> *mut Heap {
    get()
}

/// The calling thread's own heap, or `None` while it points at a static
/// one (`EMPTY_HEAP` before its first slow path, `DEAD_HEAP` after its
/// exit destructor).
#[inline]
pub fn own_heap() -> Option<&'static Heap> {
    let heap = current();
    if heap == EMPTY || heap == DEAD {
        return None;
    }
    // SAFETY: a heap that is neither static one is this thread's, live
    // until its exit destructor, which runs on this thread.
    Some(unsafe { &*heap })
}
