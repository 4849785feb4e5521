//! What the preload library links in place of std. Built to abort on a
//! panic (the release profile), `libslubmalloc.so` is a `no_std` crate:
//! std's panic machinery, with its backtrace printer and symbolizer (most
//! of the library's code with it), would otherwise be mapped, and partly
//! resident, in every program under it (bench/report/HISTORY.md: the
//! preload library links no standard library).

use core::fmt::Write;

use crate::{fmt, os, sys};

/// The allocator does not panic on any input: a panic is a bug in it. It
/// stops the process with the panic's message and place, written without
/// allocating.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut buf = fmt::FixedBuf::<256>::new();
    let _ = writeln!(buf, "slubmalloc: internal error: {info}");
    os::write_all(2, buf.as_bytes());
    // SAFETY: abort has no preconditions and does not return.
    unsafe { sys::abort() }
}

// The personality routine that the unwind tables of core's prebuilt code
// name (Rust's, which std defines): the library does not load without a
// definition. Nothing unwinds in a build that aborts on a panic, so
// nothing calls it: it traps if anything ever does. Hidden, so that the
// library does not export it: a `#[no_mangle]` function would be, and
// could then take the place of a program's own.
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".globl rust_eh_personality",
    ".hidden rust_eh_personality",
    ".type rust_eh_personality, @function",
    "rust_eh_personality:",
    "ud2",
);
#[cfg(target_arch = "aarch64")]
core::arch::global_asm!(
    ".globl rust_eh_personality",
    ".hidden rust_eh_personality",
    ".type rust_eh_personality, %function",
    "rust_eh_personality:",
    "brk #0",
);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
#[no_mangle]
extern "C" fn rust_eh_personality() {}
