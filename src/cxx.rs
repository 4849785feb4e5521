//! C++'s `operator delete` family, exported with the C malloc family
//! (`ffi`), so that a C++ program's deletes reach slubmalloc
//! directly rather than through the C++ library's, and its sized deletes
//! (`delete` of a complete type, C++14) are checked against the block as
//! C23's `free_sized` is (`layout`). `operator new` stays the C++
//! library's: it calls `malloc` or `aligned_alloc`, which are ours, and
//! only it can throw `std::bad_alloc` or call the program's new-handler.
//!
//! The C++ library's deletes are defined in terms of each other: the
//! sized forms call the unsized ones, the array forms the single-object
//! ones, the plain unsized one `free`. A program may replace any of them,
//! or `operator new`, and keep the library's others, which then lead to
//! its replacements. Exported here, they would be found before the C++
//! library's, and a program's pool handed to `free`. So each delete here
//! first asks whether the one it is defined by was replaced (by the
//! executable, or a library preloaded before this one: whatever is found
//! before this library, `dlsym(RTLD_DEFAULT)`), and calls it if so; and a
//! sized delete checks the size only while the `operator new` it pairs
//! with is the C++ library's (`dlsym(RTLD_DEFAULT)` finds what
//! `dlsym(RTLD_NEXT)` finds after this library): a replaced one may ask
//! `malloc` for more than the size the delete names. Both are looked up
//! once, at the first delete that needs them.
//!
//! `align_val_t` is a `size_t`; the nothrow deletes stay the C++
//! library's, which call the plain ones.

use core::ffi::{c_char, c_void};

use crate::alloc;
use crate::ffi::{malloc_family, MIN_ALIGN};
use crate::layout::Asked;
use crate::sync::{AtomicUsize, Ordering};
use crate::sys;

/// The operators a delete here may lead to, looked up once (`Operators`).
#[derive(Clone, Copy)]
enum Op {
    /// `operator delete(void*)`, replaced: its address, else 0.
    Delete,
    DeleteArray,
    DeleteAligned,
    DeleteArrayAligned,
    /// `operator new(size_t)` and `operator new[](size_t)`, and their
    /// aligned forms: 1 if the C++ library's, else 0.
    NewIsLibrarys,
    NewArrayIsLibrarys,
    NewAlignedIsLibrarys,
    NewArrayAlignedIsLibrarys,
}

const OPS: usize = 8;
/// `OPERATORS[OPS]`: 0 until the others are looked up, then 1.
static OPERATORS: [AtomicUsize; OPS + 1] = [const { AtomicUsize::new(0) }; OPS + 1];

/// The looked-up value of `op` (see `Op`).
fn operator(op: Op) -> usize {
    // Acquire: pairs with the Release in `look_up`, which wrote the values.
    if OPERATORS[OPS].load(Ordering::Acquire) == 0 {
        look_up();
    }
    // Relaxed: written before the Release that the load above saw.
    OPERATORS[op as usize].load(Ordering::Relaxed)
}

/// Looks every operator up. Two threads may both do it; they find the same.
#[cold]
#[inline(never)]
fn look_up() {
    let replaced = |name: &core::ffi::CStr| {
        let f = found(sys::RTLD_DEFAULT, name);
        if f == 0 || in_this_library(f) {
            0
        } else {
            f
        }
    };
    let librarys =
        |name: &core::ffi::CStr| found(sys::RTLD_DEFAULT, name) == found(sys::RTLD_NEXT, name);
    let new = librarys(c"_Znwm");
    let new_aligned = librarys(c"_ZnwmSt11align_val_t");
    let values = [
        replaced(c"_ZdlPv"),
        replaced(c"_ZdaPv"),
        replaced(c"_ZdlPvSt11align_val_t"),
        replaced(c"_ZdaPvSt11align_val_t"),
        // The C++ library's `new[]` calls `new`.
        new as usize,
        (new && librarys(c"_Znam")) as usize,
        new_aligned as usize,
        (new_aligned && librarys(c"_ZnamSt11align_val_t")) as usize,
    ];
    for (slot, v) in OPERATORS.iter().zip(values) {
        // Relaxed: published by the Release below.
        slot.store(v, Ordering::Relaxed);
    }
    // Release: publishes the values; pairs with the Acquire in `operator`.
    OPERATORS[OPS].store(1, Ordering::Release);
}

/// The address `dlsym(handle, name)` finds, or 0.
fn found(handle: *mut c_void, name: &core::ffi::CStr) -> usize {
    // SAFETY: a NUL-terminated name; dlsym has no other precondition.
    unsafe { sys::dlsym(handle, name.as_ptr() as *const c_char) as usize }
}

/// Whether `addr` lies in this library (the object that holds `look_up`).
fn in_this_library(addr: usize) -> bool {
    let base = |a: usize| {
        // SAFETY: `Dl_info` is plain data; dladdr fills it or returns 0.
        let mut info: sys::Dl_info = unsafe { core::mem::zeroed() };
        // SAFETY: `info` is writable; any address may be asked about.
        let ok = unsafe { sys::dladdr(a as *const c_void, &mut info) } != 0;
        ok.then_some(info.dli_fbase as usize)
    };
    let own = base(look_up as *const () as usize);
    own.is_some() && base(addr) == own
}

/// Calls the replaced unsized delete at `f`.
///
/// # Safety
/// `f` is an `operator delete(void*)` or `operator delete[](void*)`; `p`
/// is what it may be given.
unsafe fn forward(f: usize, p: *mut c_void) {
    // SAFETY: per the contract, `f` has this signature.
    let f: unsafe extern "C" fn(*mut c_void) = unsafe { core::mem::transmute(f) };
    // SAFETY: per the contract.
    unsafe { f(p) }
}

/// Calls the replaced aligned unsized delete at `f`.
///
/// # Safety
/// As for `forward`, with the aligned forms.
unsafe fn forward_aligned(f: usize, p: *mut c_void, align: usize) {
    // SAFETY: per the contract, `f` has this signature.
    let f: unsafe extern "C" fn(*mut c_void, usize) = unsafe { core::mem::transmute(f) };
    // SAFETY: per the contract.
    unsafe { f(p, align) }
}

/// `free`, or the replaced `operator delete(void*)`.
///
/// # Safety
/// `p` is what `operator delete(void*)` may be given.
unsafe fn delete(p: *mut c_void) {
    match operator(Op::Delete) {
        // SAFETY: per the contract.
        0 => unsafe { alloc::free(p.cast()) },
        // SAFETY: a replaced `operator delete(void*)`.
        f => unsafe { forward(f, p) },
    }
}

/// `free`, or the replaced `operator delete(void*, align_val_t)`.
///
/// # Safety
/// `p` is what `operator delete(void*, align_val_t)` may be given.
unsafe fn delete_aligned(p: *mut c_void, align: usize) {
    match operator(Op::DeleteAligned) {
        // SAFETY: per the contract.
        0 => unsafe { alloc::free(p.cast()) },
        // SAFETY: a replaced `operator delete(void*, align_val_t)`.
        f => unsafe { forward_aligned(f, p, align) },
    }
}

/// A sized delete whose unsized form is ours: checked (`new` says whether
/// the paired `operator new` is the library's), or a plain free.
///
/// # Safety
/// `p` is null or a block of ours that `operator new` returned.
unsafe fn delete_sized(p: *mut c_void, size: usize, new: Op) {
    if operator(new) == 0 {
        // SAFETY: per the contract.
        return unsafe { alloc::free(p.cast()) };
    }
    // The C++ library's `operator new(size)` is `malloc(size)`.
    // SAFETY: per the contract.
    unsafe { alloc::free_sized(p.cast(), size, &malloc_family(size)) }
}

/// An aligned sized delete whose unsized form is ours, as `delete_sized`.
///
/// # Safety
/// `p` is null or a block of ours that the aligned `operator new` returned.
unsafe fn delete_aligned_sized(p: *mut c_void, size: usize, align: usize, new: Op) {
    if operator(new) == 0 || !align.is_power_of_two() {
        // SAFETY: per the contract.
        return unsafe { alloc::free(p.cast()) };
    }
    // The C++ library's aligned `operator new` asks `aligned_alloc` for
    // the size rounded up to the alignment (C11 wants a multiple; another
    // library may not round).
    let a = align.max(MIN_ALIGN);
    let rounded = size.max(1).wrapping_add(align - 1) & !(align - 1);
    let asked = [
        Asked { size, align: a },
        Asked {
            size: rounded,
            align: a,
        },
    ];
    // SAFETY: per the contract.
    unsafe { alloc::free_asked(p.cast(), &asked) }
}

/// `operator delete(void*)`.
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPv(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { alloc::free(p.cast()) }
}

/// `operator delete[](void*)`: the C++ library's calls `operator
/// delete(void*)`.
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPv(p: *mut c_void) {
    // SAFETY: per the contract.
    unsafe { delete(p) }
}

/// `operator delete(void*, size_t)`: the C++ library's calls `operator
/// delete(void*)`.
///
/// # Safety
/// `p` is null or a block of `operator new(size)`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvm(p: *mut c_void, size: usize) {
    match operator(Op::Delete) {
        // SAFETY: per the contract.
        0 => unsafe { delete_sized(p, size, Op::NewIsLibrarys) },
        // SAFETY: a replaced `operator delete(void*)`.
        f => unsafe { forward(f, p) },
    }
}

/// `operator delete[](void*, size_t)`: the C++ library's calls `operator
/// delete[](void*)`.
///
/// # Safety
/// `p` is null or a block of `operator new[](size)`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPvm(p: *mut c_void, size: usize) {
    match (operator(Op::DeleteArray), operator(Op::Delete)) {
        // SAFETY: per the contract.
        (0, 0) => unsafe { delete_sized(p, size, Op::NewArrayIsLibrarys) },
        // SAFETY: a replaced `operator delete(void*)`, which ours calls.
        (0, f) => unsafe { forward(f, p) },
        // SAFETY: a replaced `operator delete[](void*)`.
        (f, _) => unsafe { forward(f, p) },
    }
}

/// `operator delete(void*, align_val_t)`.
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvSt11align_val_t(p: *mut c_void, _align: usize) {
    // SAFETY: per the contract.
    unsafe { alloc::free(p.cast()) }
}

/// `operator delete[](void*, align_val_t)`: the C++ library's calls
/// `operator delete(void*, align_val_t)`.
///
/// # Safety
/// As for `free`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPvSt11align_val_t(p: *mut c_void, align: usize) {
    // SAFETY: per the contract.
    unsafe { delete_aligned(p, align) }
}

/// `operator delete(void*, size_t, align_val_t)`: the C++ library's calls
/// `operator delete(void*, align_val_t)`.
///
/// # Safety
/// `p` is null or a block of `operator new(size, align)`.
#[no_mangle]
pub unsafe extern "C" fn _ZdlPvmSt11align_val_t(p: *mut c_void, size: usize, align: usize) {
    match operator(Op::DeleteAligned) {
        // SAFETY: per the contract.
        0 => unsafe { delete_aligned_sized(p, size, align, Op::NewAlignedIsLibrarys) },
        // SAFETY: a replaced `operator delete(void*, align_val_t)`.
        f => unsafe { forward_aligned(f, p, align) },
    }
}

/// `operator delete[](void*, size_t, align_val_t)`: the C++ library's
/// calls `operator delete[](void*, align_val_t)`.
///
/// # Safety
/// `p` is null or a block of `operator new[](size, align)`.
#[no_mangle]
pub unsafe extern "C" fn _ZdaPvmSt11align_val_t(p: *mut c_void, size: usize, align: usize) {
    match (
        operator(Op::DeleteArrayAligned),
        operator(Op::DeleteAligned),
    ) {
        (0, 0) => {
            // SAFETY: per the contract.
            unsafe { delete_aligned_sized(p, size, align, Op::NewArrayAlignedIsLibrarys) }
        }
        // SAFETY: a replaced `operator delete(void*, align_val_t)`, which
        // ours calls.
        (0, f) => unsafe { forward_aligned(f, p, align) },
        // SAFETY: a replaced `operator delete[](void*, align_val_t)`.
        (f, _) => unsafe { forward_aligned(f, p, align) },
    }
}
