//! The heap profile of a Rust program that uses slubmalloc as its
//! `#[global_allocator]`: the test runs this binary again with
//! `SLUBMALLOC_PROF=1`; the child keeps known live bytes at two functions
//! (small blocks, and large blocks) and writes the profile with
//! `slubmalloc::write_heap_profile`; `google-pprof --text` must attribute
//! the bytes to those functions within sampling error. It reads the `cum`
//! column: the allocator's fast path and the global allocator's wrapper
//! may be inlined, and pprof may name an inlined function as the one that
//! allocated; the caller's cumulative bytes are its own.

use std::alloc::{alloc, Layout};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

const CHILD: &str = "SLUBMALLOC_PROF_TEST_CHILD";

/// 40,000 blocks of 100 bytes: 4,000,000 bytes.
#[inline(never)]
fn keep_small_blocks(out: &mut Vec<*mut u8>) {
    for _ in 0..40_000 {
        // SAFETY: a non-zero size.
        out.push(unsafe { alloc(Layout::from_size_align(100, 8).unwrap()) });
    }
}

/// 25 blocks of 80,000 bytes (large blocks): 2,000,000 bytes.
#[inline(never)]
fn keep_large_blocks(out: &mut Vec<*mut u8>) {
    for _ in 0..25 {
        // SAFETY: a non-zero size.
        out.push(unsafe { alloc(Layout::from_size_align(80_000, 8).unwrap()) });
    }
}

fn child(path: &str) {
    assert!(slubmalloc::heap_profile_enabled());
    let mut kept = Vec::with_capacity(50_000);
    keep_small_blocks(&mut kept);
    keep_large_blocks(&mut kept);
    slubmalloc::write_heap_profile(path).unwrap();
    // The blocks stay live: the process ends here.
    std::process::exit(0);
}

fn cum_bytes(program: &Path, profile: &Path) -> HashMap<String, f64> {
    let out = Command::new("google-pprof")
        .args(["--text", "--show_bytes"])
        .arg(program)
        .arg(profile)
        .output()
        .expect("run google-pprof (ci/deps.sh installs google-perftools)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    let mut flat = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[1].ends_with('%') {
            let name = f[5..].join(" ");
            let bytes: f64 = f[3].parse().unwrap();
            // Rust symbols print as `crate::function`.
            let short = name.rsplit("::").next().unwrap().to_string();
            *flat.entry(short).or_insert(0.0) += bytes;
        }
    }
    flat
}

#[test]
fn pprof_attributes_a_rust_programs_bytes_to_its_functions() {
    if let Ok(path) = std::env::var(CHILD) {
        return child(&path);
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("heap-profile-rust");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let profile = dir.join("rust.heap");
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(&exe)
        .args([
            "--exact",
            "heap_profile::pprof_attributes_a_rust_programs_bytes_to_its_functions",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &profile)
        .env("SLUBMALLOC_PROF", "1")
        .env("SLUBMALLOC_PROF_RATE", "8192")
        .env("SLUBMALLOC_PROF_FILE", dir.join("at-exit.heap"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flat = cum_bytes(&exe, &profile);
    let small = flat.get("keep_small_blocks").copied().unwrap_or(0.0);
    let large = flat.get("keep_large_blocks").copied().unwrap_or(0.0);
    // 40,000 x 100 B at a rate of 8 KiB: about 490 samples, 4.5% standard
    // error; the large blocks are all but certainly sampled.
    assert!(
        (small / 4_000_000.0 - 1.0).abs() < 0.18,
        "keep_small_blocks: {small} of 4,000,000 bytes; {flat:?}"
    );
    assert!(
        (large / 2_000_000.0 - 1.0).abs() < 0.05,
        "keep_large_blocks: {large} of 2,000,000 bytes; {flat:?}"
    );
}

#[test]
fn write_heap_profile_says_when_profiling_is_off() {
    if std::env::var_os(CHILD).is_some() || slubmalloc::heap_profile_enabled() {
        return;
    }
    let err = slubmalloc::write_heap_profile("/dev/null").unwrap_err();
    assert!(err.to_string().contains("SLUBMALLOC_PROF=1"), "{err}");
}
