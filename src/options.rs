//! `SLUBMALLOC_*` environment variables, read once from `environ` without
//! allocating. Every variable is in `TABLE`, with its default and meaning; an
//! unknown `SLUBMALLOC_*` name or a bad value gets one warning on stderr.

use core::cell::UnsafeCell;
use core::ffi::{c_char, CStr};

use crate::sync::{AtomicU32, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StatsMode {
    Off,
    Text,
    Json,
}

pub const PATH_MAX_BYTES: usize = 256;

#[derive(Clone, Copy)]
pub struct Options {
    pub stats: StatsMode,
    /// Report destination; empty means stderr. `%p` is not yet expanded.
    pub stats_file: [u8; PATH_MAX_BYTES],
    pub stats_file_len: usize,
    /// Signal that asks for a report (0: none).
    pub stats_signal: i32,
    pub purge_delay_ms: u64,
    /// Red zones, poisoning and list checks (`debug.rs`).
    pub debug: bool,
    /// Carve new objects in a random order (SLAB_FREELIST_RANDOM).
    pub freelist_random: bool,
    /// Sampled heap profile (`profile.rs`).
    pub prof: bool,
    /// Mean bytes allocated between two samples.
    pub prof_rate: u64,
    /// Profile destination; `%p` is not yet expanded.
    pub prof_file: [u8; PATH_MAX_BYTES],
    pub prof_file_len: usize,
}

/// The default of `SLUBMALLOC_PROF_FILE`.
const PROF_FILE_DEFAULT: &[u8] = b"slubmalloc.%p.heap";

/// `SLUBMALLOC_PROF_RATE`'s bounds: one byte (every allocation) to 1 TiB.
pub const PROF_RATE_MAX: u64 = 1 << 40;

/// Name, default, meaning: the README's table is this table.
pub const TABLE: &[(&str, &str, &str)] = &[
    (
        "SLUBMALLOC_STATS",
        "off",
        "`1`/`text`: statistics table on stderr at exit; `json`: one JSON document",
    ),
    (
        "SLUBMALLOC_STATS_FILE",
        "stderr",
        "append the report to this file instead; `%p` becomes the process id",
    ),
    (
        "SLUBMALLOC_STATS_SIGNAL",
        "none",
        "signal (`USR1`, `USR2`, or a number) that writes a report while running",
    ),
    (
        "SLUBMALLOC_PURGE_DELAY_MS",
        "100",
        "delay before free slabs and cached large blocks go back to the kernel",
    ),
    (
        "SLUBMALLOC_DEBUG",
        "0",
        "`1`: red zones checked on free, poisoned free blocks checked on reuse",
    ),
    (
        "SLUBMALLOC_FREELIST_RANDOM",
        "0",
        "`1`: hand out a fresh slab's objects in a random order (costs locality)",
    ),
    (
        "SLUBMALLOC_PROF",
        "0",
        "`1`: sampled heap profile, written at exit and on the signal (gperftools format)",
    ),
    (
        "SLUBMALLOC_PROF_RATE",
        "524288",
        "mean bytes allocated between two samples (exponential intervals), 1 to 2^40",
    ),
    (
        "SLUBMALLOC_PROF_FILE",
        "slubmalloc.%p.heap",
        "where the profile goes (rewritten each time); `%p`: process id, `%n`: dump number",
    ),
];

const DEFAULT: Options = Options {
    stats: StatsMode::Off,
    stats_file: [0; PATH_MAX_BYTES],
    stats_file_len: 0,
    stats_signal: 0,
    purge_delay_ms: 100,
    debug: false,
    freelist_random: false,
    prof: false,
    prof_rate: 512 * 1024,
    prof_file: prof_file_default(),
    prof_file_len: PROF_FILE_DEFAULT.len(),
};

const fn prof_file_default() -> [u8; PATH_MAX_BYTES] {
    let mut out = [0; PATH_MAX_BYTES];
    let mut i = 0;
    while i < PROF_FILE_DEFAULT.len() {
        out[i] = PROF_FILE_DEFAULT[i];
        i += 1;
    }
    out
}

static STATE: AtomicU32 = AtomicU32::new(0);

/// Written once by `init` before STATE becomes 2, read-only afterwards.
struct OptionsCell(UnsafeCell<Options>);

// SAFETY: see `get` and `init`: one writer before publication, then readers.
unsafe impl Sync for OptionsCell {}

static OPTIONS: OptionsCell = OptionsCell(UnsafeCell::new(DEFAULT));

extern "C" {
    static environ: *const *const c_char;
}

/// The options, parsed on first use.
pub fn get() -> &'static Options {
    if STATE.load(Ordering::Acquire) != 2 {
        init();
    }
    // SAFETY: OPTIONS is written only before STATE becomes 2 (Release), and
    // we observed 2 with Acquire (here or in `init`).
    unsafe { &*OPTIONS.0.get() }
}

#[cold]
fn init() {
    if STATE
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Acquire)
        .is_err()
    {
        while STATE.load(Ordering::Acquire) != 2 {
            core::hint::spin_loop();
        }
        return;
    }
    let parsed = parse_environ();
    // SAFETY: we won the 0 -> 1 transition, so we are the only writer, and no
    // reader looks before STATE becomes 2.
    unsafe { *OPTIONS.0.get() = parsed };
    // Release: publishes OPTIONS; pairs with the Acquire in `get`.
    STATE.store(2, Ordering::Release);
}

fn parse_environ() -> Options {
    let mut o = DEFAULT;
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
            apply(&mut o, name, value);
        }
        // SAFETY: not past the terminating null, checked above.
        env = unsafe { env.add(1) };
    }
    o
}

fn apply(o: &mut Options, name: &[u8], value: &[u8]) {
    let ok = match name {
        b"SLUBMALLOC_STATS" => match value {
            b"" | b"0" | b"off" => {
                o.stats = StatsMode::Off;
                true
            }
            b"1" | b"text" => {
                o.stats = StatsMode::Text;
                true
            }
            b"json" => {
                o.stats = StatsMode::Json;
                true
            }
            _ => false,
        },
        b"SLUBMALLOC_STATS_FILE" => parse_path(value, &mut o.stats_file, &mut o.stats_file_len),
        b"SLUBMALLOC_STATS_SIGNAL" => match parse_signal(value) {
            Some(s) => {
                o.stats_signal = s;
                true
            }
            None => false,
        },
        b"SLUBMALLOC_PURGE_DELAY_MS" => match parse_u64(value) {
            Some(ms) => {
                o.purge_delay_ms = ms;
                true
            }
            None => false,
        },
        b"SLUBMALLOC_DEBUG" => parse_flag(value, &mut o.debug),
        b"SLUBMALLOC_FREELIST_RANDOM" => parse_flag(value, &mut o.freelist_random),
        b"SLUBMALLOC_PROF" => parse_flag(value, &mut o.prof),
        b"SLUBMALLOC_PROF_RATE" => match parse_u64(value) {
            Some(rate) if (1..=PROF_RATE_MAX).contains(&rate) => {
                o.prof_rate = rate;
                true
            }
            _ => false,
        },
        b"SLUBMALLOC_PROF_FILE" => parse_path(value, &mut o.prof_file, &mut o.prof_file_len),
        _ => {
            warn(b"unknown variable ", name, b" ignored");
            return;
        }
    };
    if !ok {
        warn(b"bad value for ", name, b" ignored, default kept");
    }
}

/// A path of 1 to `PATH_MAX_BYTES - 1` bytes; false for anything else.
fn parse_path(v: &[u8], out: &mut [u8; PATH_MAX_BYTES], len: &mut usize) -> bool {
    if v.is_empty() || v.len() >= PATH_MAX_BYTES {
        return false;
    }
    *out = [0; PATH_MAX_BYTES];
    out[..v.len()].copy_from_slice(v);
    *len = v.len();
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

fn parse_u64(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |a, &b| a * 10 + (b - b'0') as u64))
}

fn parse_signal(v: &[u8]) -> Option<i32> {
    let v = v.strip_prefix(b"SIG").unwrap_or(v);
    let sig = match v {
        b"USR1" => libc::SIGUSR1,
        b"USR2" => libc::SIGUSR2,
        b"HUP" => libc::SIGHUP,
        b"WINCH" => libc::SIGWINCH,
        b"PWR" => libc::SIGPWR,
        _ => parse_u64(v)? as i32,
    };
    (1..=64).contains(&sig).then_some(sig)
}

fn warn(before: &[u8], name: &[u8], after: &[u8]) {
    let mut buf = crate::fmt::FixedBuf::<200>::new();
    buf.push_str("slubmalloc: warning: ");
    buf.push_str(core::str::from_utf8(before).unwrap_or(""));
    buf.push_str(core::str::from_utf8(name).unwrap_or("SLUBMALLOC_?"));
    buf.push_str(core::str::from_utf8(after).unwrap_or(""));
    buf.push_str("\n");
    crate::os::write_all(2, buf.as_bytes());
}
