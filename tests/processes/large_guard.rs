//! A write one byte past a large block's usable size faults, every time:
//! each large block's mapping ends with a guard page (`src/large_map.rs`),
//! whether the mapping is made for the block, taken from the cache of
//! freed mappings (a piece of one, or one whole, or pieces that merged) or
//! resized by realloc. `tests/c/large_guard.c MODE` writes the whole block,
//! then the byte past it.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn program() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile_c("large_guard", &[]))
        .clone()
}

/// Runs `large_guard mode` preloaded with `env`: it wrote its block whole
/// (taken from the cache, in the modes that say so, which held bytes) and
/// died by SIGSEGV at the byte past it.
fn assert_faults(mode: &str, env: &[(&str, &str)]) {
    let o = common::run_guarded(&program(), &[mode], true, env, LIMIT);
    let out = common::stdout(&o);
    assert!(
        out.lines().any(|l| l.starts_with("block ")) && !out.contains("survived"),
        "{mode} (env {env:?}): the write past the block did not fault\n{}",
        common::describe(&o)
    );
    if mode.starts_with("cached") || mode == "merged" {
        let cached = out.lines().find_map(|l| l.strip_prefix("cached "));
        assert!(
            cached
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n > 0),
            "{mode} (env {env:?}): nothing was cached\n{}",
            common::describe(&o)
        );
    }
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{mode} (env {env:?})\n{}",
        common::describe(&o)
    );
}

/// Freed large blocks cached accessible, so that only the guard stops a
/// write past a piece handed out before the rest of its mapping.
const UNPROTECTED: &[(&str, &str)] = &[("SLUBMALLOC_PROTECT_FREED_LARGE", "0")];

#[test]
fn a_write_past_a_fresh_256_kib_block_faults_in_20_runs_of_20() {
    for _ in 0..20 {
        assert_faults("fresh", &[]);
    }
}

#[test]
fn a_write_past_a_cached_256_kib_block_faults_in_20_runs_of_20() {
    for _ in 0..20 {
        assert_faults("cached", UNPROTECTED);
        assert_faults("cached", &[]);
    }
}

#[test]
fn a_write_past_a_block_taken_whole_grown_merged_resized_or_aligned_faults() {
    for mode in [
        "cached_whole",
        "cached_grown",
        "merged",
        "grown",
        "shrunk",
        "aligned",
    ] {
        assert_faults(mode, UNPROTECTED);
        assert_faults(mode, &[]);
    }
}
