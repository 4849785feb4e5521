//! The C library's functions, types and constants that the allocator calls.
//! On x86-64 Linux (not x32) they are declared here, with glibc's ABI, rather than taken from
//! the libc crate: a crate that depends on slubmalloc would otherwise build
//! libc's build script and all of its declarations before it could start on
//! the allocator, which is on the path of every clean build of the program.
//! The names are libc's, and the unit test below checks each constant, the
//! size of each type and the offset of each field the allocator touches
//! against the libc crate's (a dev-dependency; the `override` feature's
//! with `--features override`, as `ci/test.sh` runs it); not the functions'
//! signatures, nor `dl_phdr_info`'s size (ours stops at the fields every
//! glibc has). `PTHREAD_CANCEL_DISABLE` and `pthread_setcancelstate` are
//! ours everywhere: the libc crate has neither for linux-gnu. On other
//! targets, where no test checks declarations of ours, they are the libc
//! crate's, a dependency there alone (`Cargo.toml`).
//!
//! No `#[link]`: a Rust program links the C library through std, and the
//! preload library finds these symbols in the process it is loaded into.

#![allow(non_camel_case_types, non_upper_case_globals)]

#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_pointer_width = "64"
)))]
pub use libc::*;

/// Linux 6.13's guard markers, on every architecture
/// (include/uapi/asm-generic/mman-common.h; not in the libc crate).
pub const MADV_GUARD_INSTALL: core::ffi::c_int = 102;
pub const MADV_GUARD_REMOVE: core::ffi::c_int = 103;

/// pthread.h: ENABLE is 0, DISABLE 1 (not in the libc crate for linux-gnu).
pub const PTHREAD_CANCEL_DISABLE: core::ffi::c_int = 1;

#[cfg(not(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_pointer_width = "64"
)))]
extern "C" {
    /// Not a cancellation point itself (not in the libc crate for
    /// linux-gnu).
    pub fn pthread_setcancelstate(
        state: core::ffi::c_int,
        old: *mut core::ffi::c_int,
    ) -> core::ffi::c_int;
}

#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_pointer_width = "64"
))]
pub use declared::*;

/// The declarations of x86-64 Linux (64-bit pointers: not x32).
#[cfg(all(
    target_arch = "x86_64",
    target_os = "linux",
    target_pointer_width = "64"
))]
mod declared {
    pub use core::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

    pub type time_t = i64;
    pub type pthread_t = c_ulong;
    pub type pthread_key_t = c_uint;

    #[repr(C)]
    pub struct timespec {
        pub tv_sec: time_t,
        pub tv_nsec: c_long,
    }

    /// Only the owner is read (`os::open_named_file`); the rest is room for
    /// what fstat writes, laid out as the kernel's `struct stat` of the
    /// architecture.
    #[repr(C, align(8))]
    pub struct stat {
        _before_uid: [u32; STAT_UID_WORD],
        pub st_uid: u32,
        _after_uid: [u32; STAT_WORDS - STAT_UID_WORD - 1],
    }

    // st_dev, st_ino, st_nlink (8 bytes each) and st_mode come first.
    const STAT_UID_WORD: usize = 7;
    const STAT_WORDS: usize = 36;

    /// Opaque.
    #[repr(C)]
    pub struct pthread_attr_t {
        _opaque: [u64; PTHREAD_ATTR_WORDS],
    }

    const PTHREAD_ATTR_WORDS: usize = 7;

    #[repr(C)]
    pub struct sigset_t {
        _bits: [u64; 16],
    }

    #[repr(C)]
    pub struct sigaction {
        pub sa_sigaction: usize,
        pub sa_mask: sigset_t,
        pub sa_flags: c_int,
        pub sa_restorer: Option<extern "C" fn()>,
    }

    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[repr(C)]
    pub struct Elf64_Phdr {
        pub p_type: u32,
        pub p_flags: u32,
        pub p_offset: u64,
        pub p_vaddr: u64,
        pub p_paddr: u64,
        pub p_filesz: u64,
        pub p_memsz: u64,
        pub p_align: u64,
    }

    /// The fields every glibc has; the loader passes the size of its own.
    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[repr(C)]
    pub struct dl_phdr_info {
        pub dlpi_addr: u64,
        pub dlpi_name: *const c_char,
        pub dlpi_phdr: *const Elf64_Phdr,
        pub dlpi_phnum: u16,
    }

    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[repr(C)]
    pub struct Dl_info {
        pub dli_fname: *const c_char,
        pub dli_fbase: *mut c_void,
        pub dli_sname: *const c_char,
        pub dli_saddr: *mut c_void,
    }

    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[allow(clippy::upper_case_acronyms)] // the C library's name
    #[repr(C)]
    pub struct FILE {
        _opaque: [u8; 0],
    }

    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[repr(C)]
    pub struct mallinfo {
        pub arena: c_int,
        pub ordblks: c_int,
        pub smblks: c_int,
        pub hblks: c_int,
        pub hblkhd: c_int,
        pub usmblks: c_int,
        pub fsmblks: c_int,
        pub uordblks: c_int,
        pub fordblks: c_int,
        pub keepcost: c_int,
    }

    #[cfg(any(feature = "override", slubmalloc_preload))]
    #[repr(C)]
    pub struct mallinfo2 {
        pub arena: usize,
        pub ordblks: usize,
        pub smblks: usize,
        pub hblks: usize,
        pub hblkhd: usize,
        pub usmblks: usize,
        pub fsmblks: usize,
        pub uordblks: usize,
        pub fordblks: usize,
        pub keepcost: usize,
    }

    pub const EINTR: c_int = 4;
    pub const ENOMEM: c_int = 12;
    pub const EFAULT: c_int = 14;
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub const EINVAL: c_int = 22;

    pub const PROT_NONE: c_int = 0;
    pub const PROT_READ: c_int = 1;
    pub const PROT_WRITE: c_int = 2;
    pub const MAP_PRIVATE: c_int = 0x02;
    pub const MAP_ANONYMOUS: c_int = 0x20;
    pub const MAP_FAILED: *mut c_void = !0 as *mut c_void;
    #[cfg(not(slubmalloc_bench_madv_free))]
    pub const MADV_DONTNEED: c_int = 4;
    #[cfg(slubmalloc_bench_madv_free)]
    pub const MADV_FREE: c_int = 8;
    pub const MREMAP_MAYMOVE: c_int = 1;
    pub const MREMAP_FIXED: c_int = 2;

    pub const O_RDONLY: c_int = 0;
    pub const O_WRONLY: c_int = 1;
    pub const O_CREAT: c_int = 0o100;
    #[cfg(not(slubmalloc_preload))]
    pub const O_TRUNC: c_int = 0o1000;
    pub const O_APPEND: c_int = 0o2000;
    pub const O_CLOEXEC: c_int = 0o2000000;
    pub const O_NOFOLLOW: c_int = 0o400000;
    pub const F_DUPFD_CLOEXEC: c_int = 1030;

    pub const SIGHUP: c_int = 1;
    pub const SIGUSR1: c_int = 10;
    pub const SIGUSR2: c_int = 12;
    pub const SIGWINCH: c_int = 28;
    pub const SIGPWR: c_int = 30;
    pub const SIG_SETMASK: c_int = 2;
    pub const SA_RESTART: c_int = 0x1000_0000;

    pub const SYS_futex: c_long = 202;
    pub const SYS_sched_getaffinity: c_long = 204;
    pub const SYS_membarrier: c_long = 324;
    pub const FUTEX_WAIT: c_int = 0;
    pub const FUTEX_WAKE: c_int = 1;
    pub const FUTEX_PRIVATE_FLAG: c_int = 128;

    pub const CLOCK_MONOTONIC_COARSE: c_int = 6;
    pub const GRND_NONBLOCK: c_uint = 1;
    pub const AT_SECURE: c_ulong = 23;
    pub const PR_SET_NAME: c_int = 15;
    pub const PTHREAD_CREATE_DETACHED: c_int = 1;
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub const PT_LOAD: u32 = 1;
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub const PF_X: u32 = 1;
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub const RTLD_DEFAULT: *mut c_void = core::ptr::null_mut();
    #[cfg(any(feature = "override", slubmalloc_preload))]
    pub const RTLD_NEXT: *mut c_void = !0 as *mut c_void;

    extern "C" {
        pub fn __errno_location() -> *mut c_int;
        pub fn abort() -> !;
        pub fn getpid() -> c_int;
        pub fn geteuid() -> u32;
        pub fn getauxval(kind: c_ulong) -> c_ulong;
        pub fn syscall(number: c_long, ...) -> c_long;
        pub fn prctl(option: c_int, ...) -> c_int;
        pub fn sched_yield() -> c_int;
        pub fn clock_gettime(clock: c_int, ts: *mut timespec) -> c_int;
        pub fn getrandom(buf: *mut c_void, len: usize, flags: c_uint) -> isize;

        pub fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: i64,
        ) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
        pub fn mremap(
            addr: *mut c_void,
            len: usize,
            new_len: usize,
            flags: c_int,
            ...
        ) -> *mut c_void;
        pub fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
        pub fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;

        pub fn open(path: *const c_char, flags: c_int, ...) -> c_int;
        pub fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize;
        pub fn write(fd: c_int, buf: *const c_void, count: usize) -> isize;
        pub fn close(fd: c_int) -> c_int;
        pub fn fcntl(fd: c_int, cmd: c_int, ...) -> c_int;
        pub fn fstat(fd: c_int, buf: *mut stat) -> c_int;
        pub fn ftruncate(fd: c_int, length: i64) -> c_int;
        #[cfg(any(feature = "override", slubmalloc_preload))]
        pub fn fwrite(ptr: *const c_void, size: usize, count: usize, file: *mut FILE) -> usize;

        pub fn sigemptyset(set: *mut sigset_t) -> c_int;
        pub fn sigfillset(set: *mut sigset_t) -> c_int;
        pub fn sigaction(signal: c_int, act: *const sigaction, old: *mut sigaction) -> c_int;
        pub fn pthread_sigmask(how: c_int, set: *const sigset_t, old: *mut sigset_t) -> c_int;

        pub fn pthread_attr_init(attr: *mut pthread_attr_t) -> c_int;
        pub fn pthread_attr_setdetachstate(attr: *mut pthread_attr_t, state: c_int) -> c_int;
        pub fn pthread_attr_destroy(attr: *mut pthread_attr_t) -> c_int;
        pub fn pthread_create(
            thread: *mut pthread_t,
            attr: *const pthread_attr_t,
            start: extern "C" fn(*mut c_void) -> *mut c_void,
            arg: *mut c_void,
        ) -> c_int;
        pub fn pthread_atfork(
            prepare: Option<unsafe extern "C" fn()>,
            parent: Option<unsafe extern "C" fn()>,
            child: Option<unsafe extern "C" fn()>,
        ) -> c_int;
        pub fn pthread_key_create(
            key: *mut pthread_key_t,
            destructor: Option<unsafe extern "C" fn(*mut c_void)>,
        ) -> c_int;
        pub fn pthread_setspecific(key: pthread_key_t, value: *const c_void) -> c_int;
        /// Not a cancellation point itself.
        pub fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;

        #[cfg(any(feature = "override", slubmalloc_preload))]
        pub fn dl_iterate_phdr(
            callback: Option<
                unsafe extern "C" fn(
                    info: *mut dl_phdr_info,
                    size: usize,
                    data: *mut c_void,
                ) -> c_int,
            >,
            data: *mut c_void,
        ) -> c_int;
        #[cfg(any(feature = "override", slubmalloc_preload))]
        pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        #[cfg(any(feature = "override", slubmalloc_preload))]
        pub fn dladdr(addr: *const c_void, info: *mut Dl_info) -> c_int;
    }

    #[cfg(test)]
    mod tests {
        use core::mem::{align_of, offset_of, size_of};

        /// Each constant is libc's.
        #[test]
        fn values_are_libcs() {
            let ints = [
                (super::EINTR, libc::EINTR),
                (super::ENOMEM, libc::ENOMEM),
                (super::EFAULT, libc::EFAULT),
                (super::PROT_NONE, libc::PROT_NONE),
                (super::PROT_READ, libc::PROT_READ),
                (super::PROT_WRITE, libc::PROT_WRITE),
                (super::MAP_PRIVATE, libc::MAP_PRIVATE),
                (super::MAP_ANONYMOUS, libc::MAP_ANONYMOUS),
                (super::MREMAP_MAYMOVE, libc::MREMAP_MAYMOVE),
                (super::MREMAP_FIXED, libc::MREMAP_FIXED),
                (super::O_RDONLY, libc::O_RDONLY),
                (super::O_WRONLY, libc::O_WRONLY),
                (super::O_CREAT, libc::O_CREAT),
                (super::O_APPEND, libc::O_APPEND),
                (super::O_CLOEXEC, libc::O_CLOEXEC),
                (super::O_NOFOLLOW, libc::O_NOFOLLOW),
                (super::F_DUPFD_CLOEXEC, libc::F_DUPFD_CLOEXEC),
                (super::SIGHUP, libc::SIGHUP),
                (super::SIGUSR1, libc::SIGUSR1),
                (super::SIGUSR2, libc::SIGUSR2),
                (super::SIGWINCH, libc::SIGWINCH),
                (super::SIGPWR, libc::SIGPWR),
                (super::SIG_SETMASK, libc::SIG_SETMASK),
                (super::SA_RESTART, libc::SA_RESTART),
                (super::FUTEX_WAIT, libc::FUTEX_WAIT),
                (super::FUTEX_WAKE, libc::FUTEX_WAKE),
                (super::FUTEX_PRIVATE_FLAG, libc::FUTEX_PRIVATE_FLAG),
                (super::CLOCK_MONOTONIC_COARSE, libc::CLOCK_MONOTONIC_COARSE),
                (super::PR_SET_NAME, libc::PR_SET_NAME),
                (
                    super::PTHREAD_CREATE_DETACHED,
                    libc::PTHREAD_CREATE_DETACHED,
                ),
            ];
            for (i, (ours, theirs)) in ints.into_iter().enumerate() {
                assert_eq!(ours, theirs, "constant {i} of the list");
            }
            assert_eq!(super::SYS_futex, libc::SYS_futex);
            assert_eq!(super::SYS_sched_getaffinity, libc::SYS_sched_getaffinity);
            assert_eq!(super::SYS_membarrier, libc::SYS_membarrier);
            assert_eq!(super::GRND_NONBLOCK, libc::GRND_NONBLOCK);
            assert_eq!(super::AT_SECURE, libc::AT_SECURE);
            assert_eq!(super::MAP_FAILED, libc::MAP_FAILED);
            #[cfg(not(slubmalloc_preload))]
            assert_eq!(super::O_TRUNC, libc::O_TRUNC);
            #[cfg(not(slubmalloc_bench_madv_free))]
            assert_eq!(super::MADV_DONTNEED, libc::MADV_DONTNEED);
            #[cfg(slubmalloc_bench_madv_free)]
            assert_eq!(super::MADV_FREE, libc::MADV_FREE);
            #[cfg(any(feature = "override", slubmalloc_preload))]
            {
                assert_eq!(super::EINVAL, libc::EINVAL);
                assert_eq!(super::RTLD_DEFAULT, libc::RTLD_DEFAULT);
                assert_eq!(super::RTLD_NEXT, libc::RTLD_NEXT);
                assert_eq!(super::PT_LOAD, libc::PT_LOAD);
                assert_eq!(super::PF_X, libc::PF_X);
            }
        }

        /// Each type is as big as libc's, as aligned, and each field the allocator touches is where libc's is.
        #[test]
        fn layouts_are_libcs() {
            macro_rules! same_size {
                ($($t:ident),*) => {$(
                    assert_eq!(size_of::<super::$t>(), size_of::<libc::$t>(), stringify!($t));
                    assert_eq!(align_of::<super::$t>(), align_of::<libc::$t>(), stringify!($t));
                )*};
            }
            macro_rules! same_offset {
                ($t:ident: $($f:ident),*) => {$(
                    assert_eq!(
                        offset_of!(super::$t, $f),
                        offset_of!(libc::$t, $f),
                        concat!(stringify!($t), ".", stringify!($f))
                    );
                )*};
            }
            same_size!(
                time_t,
                pthread_t,
                pthread_key_t,
                timespec,
                stat,
                sigset_t,
                sigaction,
                pthread_attr_t
            );
            same_offset!(timespec: tv_sec, tv_nsec);
            same_offset!(stat: st_uid);
            same_offset!(sigaction: sa_sigaction, sa_mask, sa_flags, sa_restorer);
            #[cfg(any(feature = "override", slubmalloc_preload))]
            {
                same_size!(Elf64_Phdr, Dl_info, mallinfo, mallinfo2);
                same_offset!(Elf64_Phdr: p_type, p_flags, p_vaddr, p_memsz);
                same_offset!(dl_phdr_info: dlpi_addr, dlpi_name, dlpi_phdr, dlpi_phnum);
                same_offset!(Dl_info: dli_fname, dli_fbase, dli_sname, dli_saddr);
                same_offset!(mallinfo: arena, keepcost);
                same_offset!(mallinfo2: arena, keepcost);
            }
        }
    }
}
