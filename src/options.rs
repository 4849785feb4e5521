//! `SLUBMALLOC_*` environment variables, read once from `environ` without
//! allocating. Every variable is in `TABLE`, with its default and meaning; an
//! unknown `SLUBMALLOC_*` name or a bad value gets one warning on stderr.
//!
//! A process in secure-execution mode (`AT_SECURE`: setuid, setgid, file
//! capabilities, some LSM transitions) takes none of them: its environment
//! comes from a less privileged user, who could otherwise have it create or
//! append to files as root, or write its memory map to a file they can read.
//! It keeps the defaults, as glibc ignores `MALLOC_*` there and `ld.so`
//! ignores `LD_PRELOAD`, and says so once on stderr if any was set.

use core::cell::UnsafeCell;
use core::ffi::{c_char, CStr};

use crate::fmt;
use crate::os;
use crate::sync::{Once, OwnLines};
use crate::sys;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StatsMode {
    Off,
    Text,
    Json,
}

pub const PATH_MAX_BYTES: usize = 256;

/// A file path from the environment; empty means none.
#[derive(Clone, Copy)]
pub struct Path {
    bytes: [u8; PATH_MAX_BYTES],
    len: usize,
}

impl Path {
    const NONE: Path = Path::of(b"");

    /// A path from a literal (shorter than `PATH_MAX_BYTES`).
    const fn of(literal: &[u8]) -> Path {
        let mut bytes = [0; PATH_MAX_BYTES];
        let mut i = 0;
        while i < literal.len() {
            bytes[i] = literal[i];
            i += 1;
        }
        Path {
            bytes,
            len: literal.len(),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Declares the options, one row each: the field of `Options` and its type,
/// its default, the variable's name, the default and the meaning as the
/// README's table shows them, and the parser (`fn(&[u8], &mut T) -> bool`,
/// false for a bad value). From the rows it makes `Options`, `DEFAULT`,
/// `TABLE` and `apply_named`.
macro_rules! options {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident: $ty:ty = $default:expr,
            $name:literal, $shown:literal, $meaning:literal, $parse:path;
    )*) => {
        #[derive(Clone, Copy)]
        pub struct Options {
            $( $(#[doc = $doc])* pub $field: $ty, )*
        }

        const DEFAULT: Options = Options { $( $field: $default, )* };

        /// Name, default, meaning: the README's table is this table.
        pub const TABLE: &[(&str, &str, &str)] = &[ $( ($name, $shown, $meaning), )* ];

        /// Sets the option called `name` from `value`: None if there is no
        /// such option, Some(false) for a bad value (the default is kept).
        fn apply_named(o: &mut Options, name: &[u8], value: &[u8]) -> Option<bool> {
            $(
                if name == $name.as_bytes() {
                    let mut v = o.$field;
                    let ok = $parse(value, &mut v);
                    if ok {
                        o.$field = v;
                    }
                    return Some(ok);
                }
            )*
            None
        }
    };
}

options! {
    /// Report at exit.
    stats: StatsMode = StatsMode::Off,
        "SLUBMALLOC_STATS", "off",
        "`1`/`text`: statistics table on stderr at exit; `json`: one JSON document",
        parse_stats_mode;
    /// Report destination; empty means stderr. `%p` is not yet expanded.
    stats_file: Path = Path::NONE,
        "SLUBMALLOC_STATS_FILE", "stderr",
        "append the report to this file instead; `%p` becomes the process id",
        parse_path;
    /// Signal that asks for a report (0: none).
    stats_signal: i32 = 0,
        "SLUBMALLOC_STATS_SIGNAL", "none",
        "signal (`USR1`, `USR2`, or a number) that writes a report while running",
        parse_signal;
    /// Delay before free memory goes back to the kernel.
    purge_delay_ms: u64 = 100,
        "SLUBMALLOC_PURGE_DELAY_MS", "100",
        "delay before free slabs and cached large blocks go back to the kernel",
        parse_u64;
    /// The per-CPU sheaves (`cpu_sheaf`), where the kernel and glibc have
    /// restartable sequences.
    percpu: bool = true,
        "SLUBMALLOC_PERCPU", "1",
        "`0`: no per-CPU sheaves behind the threads' own (the mode without restartable sequences: also under `GLIBC_TUNABLES=glibc.pthread.rseq=0`, Valgrind, or a kernel or glibc without them)",
        parse_flag;
    /// The background purger thread (`background.rs`).
    background_purge: bool = true,
        "SLUBMALLOC_BACKGROUND_PURGE", "1",
        "`0`: no background purger thread; `1`: one runs only while the program has other threads, never in a single-threaded program (free memory past the trim bound goes back at `free` time either way)",
        parse_flag;
    /// Red zones, poisoning and list checks (`debug.rs`).
    debug: bool = false,
        "SLUBMALLOC_DEBUG", "0",
        "`1`: red zones checked on free, poisoned free blocks checked on reuse",
        parse_flag;
    /// Freed large blocks bigger than any freed before inaccessible while
    /// cached (`large`).
    protect_freed_large: bool = true,
        "SLUBMALLOC_PROTECT_FREED_LARGE", "1",
        "`0`: no freed large block is made inaccessible (a use after free of one bigger than any freed before goes unnoticed)",
        parse_flag;
    /// Zero-size blocks inaccessible (`zero`).
    protect_zero_size: bool = true,
        "SLUBMALLOC_PROTECT_ZERO_SIZE", "1",
        "`0`: `malloc(0)` hands out a 16-byte block, as glibc's does (a read or write of a zero-size block goes unnoticed); `1`: a block in memory that is never accessible, a distinct address for each live one",
        parse_flag;
    /// Large blocks' guard pages as the kernel's guard markers where it has
    /// them (`large_map`).
    guard_markers: bool = true,
        "SLUBMALLOC_GUARD_MARKERS", "1",
        "`0`: the guard page after each large block is made with mprotect, a kernel mapping of its own, also where the kernel has guard markers (Linux 6.13+, `MADV_GUARD_INSTALL`)",
        parse_flag;
    /// Carve new objects in a random order (SLAB_FREELIST_RANDOM).
    freelist_random: bool = false,
        "SLUBMALLOC_FREELIST_RANDOM", "0",
        "`1`: hand out a fresh slab's objects in a random order (costs locality)",
        parse_flag;
    /// Sampled heap profile (`prof/sample.rs`).
    prof: bool = false,
        "SLUBMALLOC_PROF", "0",
        "`1`: sampled heap profile, written at exit and on the signal (gperftools format)",
        parse_flag;
    /// Mean bytes allocated between two samples.
    prof_rate: u64 = 512 * 1024,
        "SLUBMALLOC_PROF_RATE", "524288",
        "mean bytes allocated between two samples (exponential intervals), 1 to 2^40",
        parse_prof_rate;
    /// Profile destination; `%p` and `%n` are not yet expanded.
    prof_file: Path = Path::of(b"slubmalloc.%p.heap"),
        "SLUBMALLOC_PROF_FILE", "slubmalloc.%p.heap",
        "where the profile goes (rewritten each time); `%p`: process id, `%n`: dump number",
        parse_path;
}

/// `SLUBMALLOC_PROF_RATE`'s bounds: one byte (every allocation) to 1 TiB.
pub const PROF_RATE_MAX: u64 = 1 << 40;

static PARSED: OwnLines<Once> = OwnLines(Once::new());

/// Written once inside PARSED's call, read-only afterwards.
struct OptionsCell(UnsafeCell<Options>);

// SAFETY: see `get` and `parse_once`: one writer before publication, then readers.
unsafe impl Sync for OptionsCell {}

static OPTIONS: OptionsCell = OptionsCell(UnsafeCell::new(DEFAULT));

extern "C" {
    static environ: *const *const c_char;
}

/// The options, parsed on first use.
pub fn get() -> &'static Options {
    if !PARSED.is_done() {
        parse_once();
    }
    // SAFETY: OPTIONS is written only inside PARSED's one call, and we saw
    // it done (Acquire, here or in `call`).
    unsafe { &*OPTIONS.0.get() }
}

#[cold]
fn parse_once() {
    PARSED.call(|| {
        let parsed = parse_environ();
        // SAFETY: inside PARSED's one call we are the only writer, and no
        // reader looks before it is done.
        unsafe { *OPTIONS.0.get() = parsed };
    });
}

fn parse_environ() -> Options {
    let mut o = DEFAULT;
    let secure = secure_execution();
    let mut ignored = false;
    // SAFETY: environ is the process environment, a null-terminated array of
    // C strings, valid from before main.
    let mut env = unsafe { environ };
    if env.is_null() {
        return o;
    }
    loop {
        // SAFETY: as above; the array ends with a null pointer.
        let entry = unsafe { *env };
        if entry.is_null() {
            break;
        }
        // SAFETY: each entry is a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(entry) }.to_bytes();
        if let Some(rest) = bytes.strip_prefix(b"SLUBMALLOC_") {
            let eq = rest.iter().position(|&b| b == b'=').unwrap_or(rest.len());
            let name = &bytes[..11 + eq];
            let value = rest.get(eq + 1..).unwrap_or(b"");
            if secure {
                ignored = true;
            } else {
                apply(&mut o, name, value);
            }
        }
        // SAFETY: not past the terminating null, checked above.
        env = unsafe { env.add(1) };
    }
    if ignored {
        warn(
            b"",
            b"SLUBMALLOC_* variables",
            b" ignored: secure-execution process (setuid, setgid or file capabilities)",
        );
    }
    o
}

/// Whether the kernel started this process in secure-execution mode (the
/// auxiliary vector's `AT_SECURE`, which `ld.so` and `secure_getenv` use).
/// getauxval reads the vector libc saved at start-up: no system call, no
/// allocation, valid before main.
fn secure_execution() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { sys::getauxval(sys::AT_SECURE) != 0 }
}

fn apply(o: &mut Options, name: &[u8], value: &[u8]) {
    match apply_named(o, name, value) {
        None => warn(b"unknown variable ", name, b" ignored"),
        Some(false) => warn(b"bad value for ", name, b" ignored, default kept"),
        Some(true) => {}
    }
}

fn parse_stats_mode(v: &[u8], out: &mut StatsMode) -> bool {
    *out = match v {
        b"" | b"0" | b"off" => StatsMode::Off,
        b"1" | b"text" => StatsMode::Text,
        b"json" => StatsMode::Json,
        _ => return false,
    };
    true
}

fn parse_path(v: &[u8], out: &mut Path) -> bool {
    if v.is_empty() || v.len() >= PATH_MAX_BYTES {
        return false;
    }
    out.bytes[..v.len()].copy_from_slice(v);
    out.len = v.len();
    true
}

/// `0`/`1` (empty means 0); false for anything else.
fn parse_flag(v: &[u8], out: &mut bool) -> bool {
    match v {
        b"" | b"0" => *out = false,
        b"1" => *out = true,
        _ => return false,
    }
    true
}

fn parse_u64(v: &[u8], out: &mut u64) -> bool {
    match decimal(v) {
        Some(n) => {
            *out = n;
            true
        }
        None => false,
    }
}

fn decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |a, &b| a * 10 + (b - b'0') as u64))
}

fn parse_prof_rate(v: &[u8], out: &mut u64) -> bool {
    match decimal(v) {
        Some(rate) if (1..=PROF_RATE_MAX).contains(&rate) => {
            *out = rate;
            true
        }
        _ => false,
    }
}

/// A signal by name (`USR1`, `SIGUSR1`, ...) or number, 1..=64.
fn parse_signal(v: &[u8], out: &mut i32) -> bool {
    let v = v.strip_prefix(b"SIG").unwrap_or(v);
    let sig = match v {
        b"USR1" => sys::SIGUSR1,
        b"USR2" => sys::SIGUSR2,
        b"HUP" => sys::SIGHUP,
        b"WINCH" => sys::SIGWINCH,
        b"PWR" => sys::SIGPWR,
        _ => match decimal(v) {
            Some(n) if (1..=64).contains(&n) => n as i32,
            _ => return false,
        },
    };
    *out = sig;
    true
}

fn warn(before: &[u8], name: &[u8], after: &[u8]) {
    let mut buf = fmt::FixedBuf::<200>::new();
    buf.push_str("slubmalloc: warning: ");
    buf.push_str(core::str::from_utf8(before).unwrap_or(""));
    buf.push_str(core::str::from_utf8(name).unwrap_or("SLUBMALLOC_?"));
    buf.push_str(core::str::from_utf8(after).unwrap_or(""));
    buf.push_str("\n");
    os::write_all(2, buf.as_bytes());
}
