//! The statistics report chosen by `SLUBMALLOC_STATS`: written at process exit
//! (from `.fini_array`) and on `SLUBMALLOC_STATS_SIGNAL`, through a stack
//! buffer and write(2), so it never allocates and works out of memory. The
//! heap profile (`prof::write`) is written at the same two moments.

use core::ffi::CStr;
use core::fmt::Write;

use crate::fmt::FixedBuf;
use crate::glibc_info;
use crate::options::{self, StatsMode, PATH_MAX_BYTES};
use crate::os::Existing;
use crate::os::FdWriter;
use crate::prof::write;
use crate::stats;
use crate::sync::{AtomicI32, Ordering};
use crate::sys;

/// A private copy of stderr taken at start-up, so the exit report still
/// reaches it in programs that close fd 2 before exiting (coreutils do).
static STDERR_COPY: AtomicI32 = AtomicI32::new(2);

/// Keeps a copy of stderr if a report will go there, and installs the
/// report signal handler if one was asked for.
pub fn install() {
    let o = options::get();
    if (o.stats != StatsMode::Off || o.stats_signal != 0) && o.stats_file.is_empty() {
        // SAFETY: F_DUPFD_CLOEXEC on fd 2 has no memory-safety preconditions.
        let fd = unsafe { sys::fcntl(2, sys::F_DUPFD_CLOEXEC, 100) };
        if fd >= 0 {
            STDERR_COPY.store(fd, Ordering::Relaxed);
        }
    }
    let sig = o.stats_signal;
    if sig == 0 {
        return;
    }
    // SAFETY: a zeroed sigaction is valid; we set the handler and flags.
    unsafe {
        let mut sa: sys::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(sys::c_int) as usize;
        sa.sa_flags = sys::SA_RESTART;
        sys::sigemptyset(&mut sa.sa_mask);
        sys::sigaction(sig, &sa, core::ptr::null_mut());
    }
}

extern "C" fn on_signal(_sig: sys::c_int) {
    let _keep = crate::os::ErrnoGuard::save();
    write_report(options::get().stats, STDERR_COPY.load(Ordering::Relaxed));
    write::on_signal();
}

extern "C" fn at_exit() {
    let mode = options::get().stats;
    if mode != StatsMode::Off {
        write_report(mode, STDERR_COPY.load(Ordering::Relaxed));
    }
    write::at_exit();
}

#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;

/// Writes one report in `mode` (text if Off: `malloc_stats`) to the chosen
/// file, or else to `stderr_fd`, whole: with thread cancellation off from
/// the open to the close, as glibc's malloc_stats (see `os::NoCancel`).
pub fn write_report(mode: StatsMode, stderr_fd: i32) {
    let _whole = crate::os::NoCancel::new();
    let o = options::get();
    let fd = if o.stats_file.is_empty() {
        stderr_fd
    } else {
        open_report_file(o.stats_file.as_bytes())
    };
    if fd < 0 {
        return;
    }
    {
        let s = stats::stats_for_report();
        let mut w = FdWriter::new(fd);
        let _ = match mode {
            StatsMode::Json => s.write_json(&mut w).and_then(|_| w.write_str("\n")),
            // Then glibc's closing lines, for scripts that read glibc's report.
            _ => write!(w, "slubmalloc statistics (pid {})\n{}", crate::os::pid(), s)
                .and_then(|_| glibc_info::write_stats_totals(&mut w, &s)),
        };
    }
    if fd != stderr_fd {
        // SAFETY: we opened `fd` above.
        unsafe { sys::close(fd) };
    }
}

/// Opens `path` for appending, with `%p` replaced by the process id, as
/// `os::open_named_file` opens what the environment names. A new file is
/// 0644 less the umask: the report holds counts and sizes, no addresses,
/// and is read like a log.
fn open_report_file(path: &[u8]) -> i32 {
    let mut buf = FixedBuf::<{ PATH_MAX_BYTES + 16 }>::new();
    let mut rest = path;
    while let Some(i) = rest.windows(2).position(|w| w == b"%p") {
        buf.push_str(core::str::from_utf8(&rest[..i]).unwrap_or(""));
        let _ = write!(buf, "{}", crate::os::pid());
        rest = &rest[i + 2..];
    }
    buf.push_str(core::str::from_utf8(rest).unwrap_or(""));
    let mut cpath = [0u8; PATH_MAX_BYTES + 17];
    let bytes = buf.as_bytes();
    cpath[..bytes.len()].copy_from_slice(bytes);
    // Always a C string: `cpath` is zero-filled past the path.
    let cpath = CStr::from_bytes_until_nul(&cpath).unwrap_or(c"");
    crate::os::open_named_file(cpath, Existing::Append, 0o644)
}
