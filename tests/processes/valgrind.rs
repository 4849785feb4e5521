//! Valgrind's memcheck sees the heap of a program run with the preload: the
//! README's command, `valgrind --soname-synonyms=somalloc=*slubmalloc*`,
//! replaces the malloc family of the object whose soname matches
//! (`libslubmalloc.so`, set by `preload/build.rs`) with memcheck's, which
//! then reports leaks and uses after free as it does on glibc.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{compile_c, preload_lib, run_with_deadline, stderr};

/// Runs `tests/c/valgrind_leak_uaf.c` under memcheck with the preload and
/// the given `--soname-synonyms`; None (after saying why) when valgrind is
/// not installed, a failure instead when `CI` is set (ci/deps.sh installs
/// it there, so a missing valgrind is a broken setup, not a skip).
fn memcheck(synonyms: &str) -> Option<String> {
    if Command::new("valgrind").arg("--version").output().is_err() {
        assert!(
            !in_ci(),
            "valgrind is not installed, and CI is set (ci/deps.sh installs it)"
        );
        eprintln!("SKIPPED: valgrind is not installed (ci/deps.sh installs it)");
        return None;
    }
    let exe = compile_c("valgrind_leak_uaf", &[]);
    let mut cmd = Command::new("valgrind");
    cmd.arg(format!("--soname-synonyms={synonyms}"))
        .args(["--leak-check=full", "--error-exitcode=99"])
        .arg(&exe)
        .env("LD_PRELOAD", preload_lib());
    let out = run_with_deadline(cmd, Duration::from_secs(120));
    let err = stderr(&out);
    let errors = err.contains("ERROR SUMMARY: 0 errors");
    assert_eq!(
        out.status.code(),
        Some(if errors { 0 } else { 99 }),
        "valgrind's exit status follows its error count:\n{err}"
    );
    Some(err)
}

/// Whether `CI` is set to anything but empty, `0` or `false` (CI systems
/// set `CI=true`).
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

#[test]
fn valgrind_finds_a_leak_and_a_use_after_free_under_the_preload() {
    let Some(err) = memcheck("somalloc=*slubmalloc*") else {
        return;
    };
    assert!(
        err.contains("definitely lost: 100 bytes in 1 blocks"),
        "the leak:\n{err}"
    );
    assert!(
        err.contains("Invalid read of size 1")
            && err.contains("is 10 bytes inside a block of size 64 free'd"),
        "the use after free:\n{err}"
    );
}

#[test]
fn valgrind_sees_nothing_when_the_synonym_misses_the_library() {
    // The control: the program's blocks come from slubmalloc, not glibc
    // (memcheck still replaces glibc's malloc), so with a synonym that
    // matches no library memcheck sees no heap at all. This is what the
    // README's command did before the library had a soname.
    assert!(Path::new(&preload_lib()).exists());
    let Some(err) = memcheck("somalloc=no-such-library") else {
        return;
    };
    assert!(
        err.contains("total heap usage: 0 allocs") && err.contains("ERROR SUMMARY: 0 errors"),
        "{err}"
    );
}
