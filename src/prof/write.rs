//! Writes the heap profile in the text format of gperftools' heap profiler,
//! which `google-pprof` (and `jeprof`) read:
//!
//! ```text
//! heap profile:   <live objs>: <live bytes> [ <alloc objs>: <alloc bytes>] @ heapprofile
//!   <live objs>: <live bytes> [ <alloc objs>: <alloc bytes>] @ 0x<pc> 0x<pc> ...
//! ...
//!
//! MAPPED_LIBRARIES:
//! <a copy of /proc/self/maps>
//! ```
//!
//! one line per stack, innermost frame first, with the estimates of
//! `prof::table` (already scaled, hence the `heapprofile` type, which tells
//! pprof not to scale again). Written at exit, on `SLUBMALLOC_STATS_SIGNAL`
//! (`report`), and on demand (`slubmalloc::write_heap_profile`), through a
//! stack buffer: it never allocates, so it works in a signal handler.

use core::ffi::CStr;
use core::fmt::Write;

use crate::fmt::FixedBuf;
use crate::options::{self, PATH_MAX_BYTES};
use crate::os::Existing;
use crate::os::FdWriter;
use crate::prof::table::{Tables, COUNT_ONE, PROF_LOCK, TABLES};
use crate::sync::LockWait;
use crate::sys;

/// How long the signal handler waits for `PROF_LOCK` before it gives up
/// (the lock is held for one table update; it stays held only if the
/// signal interrupted its holder on this very thread).
const SIGNAL_WAIT_NS: u64 = 200_000_000;

/// At exit (`report`'s `.fini_array` entry): the profile, if on.
pub fn at_exit() {
    if options::get().prof {
        write_to_file(LockWait::Wait);
    }
}

/// On the statistics signal: the profile, if on, without waiting long.
pub fn on_signal() {
    if options::get().prof {
        write_to_file(LockWait::Try);
    }
}

/// Writes the profile to `SLUBMALLOC_PROF_FILE`, rewritten each time.
fn write_to_file(wait: LockWait) {
    if !lock(wait) {
        crate::os::write_all(
            2,
            b"slubmalloc: heap profile not written: the signal came inside the profiler\n",
        );
        return;
    }
    // SAFETY: PROF_LOCK is held.
    let t = unsafe { &mut *TABLES.data_ptr() };
    let o = options::get();
    let fd = open_expanded(o.prof_file.as_bytes(), t.dumps);
    t.dumps += 1;
    if fd >= 0 {
        write_tables(fd, t);
        // SAFETY: we opened `fd`.
        unsafe { sys::close(fd) };
    }
    PROF_LOCK.unlock();
}

/// Writes the profile to the file at `path` (NUL-terminated); the errno of
/// a failed open. (Rust's `write_heap_profile`: not in the preload library.)
#[cfg(not(slubmalloc_preload))]
pub fn write_to_path(path: &CStr) -> Result<(), i32> {
    let fd = open_for_profile(path);
    if fd < 0 {
        // SAFETY: __errno_location is always valid.
        return Err(unsafe { *sys::__errno_location() });
    }
    lock(LockWait::Wait);
    // SAFETY: PROF_LOCK is held.
    write_tables(fd, unsafe { &*TABLES.data_ptr() });
    PROF_LOCK.unlock();
    // SAFETY: we opened `fd`.
    unsafe { sys::close(fd) };
    Ok(())
}

/// Takes `PROF_LOCK`; with `LockWait::Try`, tries it for `SIGNAL_WAIT_NS`
/// at most and returns false if it was not got.
fn lock(wait: LockWait) -> bool {
    if wait == LockWait::Wait {
        PROF_LOCK.lock();
        return true;
    }
    let deadline = crate::os::now_ns() + SIGNAL_WAIT_NS;
    while !PROF_LOCK.try_lock() {
        if crate::os::now_ns() > deadline {
            return false;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { sys::sched_yield() };
    }
    true
}

/// A new profile file's mode, less the umask: the profile's addresses and
/// its copy of /proc/self/maps show the process's layout (what
/// address-space randomisation hides) to whoever can read it.
const PROFILE_MODE: u32 = 0o600;

/// Opens the program's own `path` (`write_heap_profile`) to be rewritten.
#[cfg(not(slubmalloc_preload))]
fn open_for_profile(path: &CStr) -> i32 {
    // SAFETY: `path` is NUL-terminated.
    unsafe {
        sys::open(
            path.as_ptr(),
            sys::O_WRONLY | sys::O_CREAT | sys::O_TRUNC | sys::O_CLOEXEC,
            PROFILE_MODE,
        )
    }
}

/// Opens `pattern` with `%p` replaced by the process id and `%n` by the
/// dump number, to be rewritten. The path comes from the environment, not
/// the program: opened as `os::open_named_file` opens such paths.
fn open_expanded(pattern: &[u8], dump: u64) -> i32 {
    let mut buf = FixedBuf::<{ PATH_MAX_BYTES + 40 }>::new();
    let mut rest = pattern;
    while let Some(i) = rest.windows(2).position(|w| w == b"%p" || w == b"%n") {
        buf.push_str(core::str::from_utf8(&rest[..i]).unwrap_or(""));
        let _ = match rest[i + 1] {
            b'p' => write!(buf, "{}", crate::os::pid()),
            _ => write!(buf, "{dump}"),
        };
        rest = &rest[i + 2..];
    }
    buf.push_str(core::str::from_utf8(rest).unwrap_or(""));
    let mut cpath = [0u8; PATH_MAX_BYTES + 41];
    let bytes = buf.as_bytes();
    cpath[..bytes.len()].copy_from_slice(bytes);
    // Always a C string: `cpath` is zero-filled past the path.
    let cpath = CStr::from_bytes_until_nul(&cpath).unwrap_or(c"");
    crate::os::open_named_file(cpath, Existing::Replace, PROFILE_MODE)
}

/// Rounds a fixed-point count to whole objects.
fn objects(count: u64) -> u64 {
    (count + COUNT_ONE / 2) / COUNT_ONE
}

/// The profile text. PROF_LOCK held.
fn write_tables(fd: i32, t: &Tables) {
    PROF_LOCK.assert_held();
    let mut w = FdWriter::new(fd);
    let mut total = [0u64; 4];
    t.for_each_stack(|s| {
        total[0] += objects(s.live_count);
        total[1] += s.live_bytes;
        total[2] += objects(s.alloc_count);
        total[3] += s.alloc_bytes;
    });
    let _ = writeln!(
        w,
        "heap profile: {:6}: {:8} [{:6}: {:8}] @ heapprofile",
        total[0], total[1], total[2], total[3]
    );
    t.for_each_stack(|s| {
        let _ = write!(
            w,
            "{:6}: {:8} [{:6}: {:8}] @",
            objects(s.live_count),
            s.live_bytes,
            objects(s.alloc_count),
            s.alloc_bytes
        );
        for (i, &pc) in s.frames.iter().enumerate() {
            // Return addresses; pprof subtracts one from all but the first,
            // so the first is given as the call's last byte.
            let pc = if i == 0 { pc.saturating_sub(1) } else { pc };
            let _ = write!(w, " 0x{pc:016x}");
        }
        let _ = w.write_str("\n");
    });
    let _ = w.write_str("\nMAPPED_LIBRARIES:\n");
    w.flush();
    copy_maps(fd);
}

/// Appends /proc/self/maps to `fd`.
fn copy_maps(fd: i32) {
    // SAFETY: a NUL-terminated literal path; the fd is closed below.
    let maps = unsafe { sys::open(c"/proc/self/maps".as_ptr(), sys::O_RDONLY | sys::O_CLOEXEC) };
    if maps < 0 {
        return;
    }
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reads at most buf.len() bytes into `buf`.
        let n = unsafe { sys::read(maps, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        crate::os::write_all(fd, &buf[..n as usize]);
    }
    // SAFETY: `maps` is ours.
    unsafe { sys::close(maps) };
}
