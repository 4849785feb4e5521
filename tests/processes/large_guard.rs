//! A write one byte past a large block's usable size faults, every time:
//! each large block's mapping ends with a guard page (`src/large_map.rs`),
//! whether the mapping is made for the block, taken from the cache of
//! freed mappings (a piece of one, or one whole, or pieces that merged) or
//! resized by realloc. `tests/c/large_guard.c MODE` writes the whole block,
//! then the byte past it. Each test runs with the guards as kernel guard
//! markers (where the kernel has them, Linux 6.13+) and as PROT_NONE
//! (`SLUBMALLOC_GUARD_MARKERS=0`): a marker left inside memory that became
//! a block's faults the write of the block whole.

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

/// The two ways to make guards: the default (guard markers where the
/// kernel has them), and PROT_NONE.
const GUARDS: [&[(&str, &str)]; 2] = [&[], &[("SLUBMALLOC_GUARD_MARKERS", "0")]];

/// `guards`, with freed large blocks cached accessible, so that only the
/// guard stops a write past a piece handed out before the rest of its
/// mapping.
fn unprotected<'a>(guards: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = guards.to_vec();
    env.push(("SLUBMALLOC_PROTECT_FREED_LARGE", "0"));
    env
}

#[test]
fn a_write_past_a_fresh_256_kib_block_faults_in_20_runs_of_20() {
    for guards in GUARDS {
        for _ in 0..20 {
            assert_faults("fresh", guards);
        }
    }
}

#[test]
fn a_write_past_a_cached_256_kib_block_faults_in_20_runs_of_20() {
    for guards in GUARDS {
        for _ in 0..20 {
            assert_faults("cached", &unprotected(guards));
            assert_faults("cached", guards);
        }
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
        for guards in GUARDS {
            assert_faults(mode, &unprotected(guards));
            assert_faults(mode, guards);
        }
    }
}

/// Whether the running kernel has guard markers (Linux 6.13+).
fn kernel_has_guard_markers() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).expect("major");
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).expect("minor");
    (major, minor) >= (6, 13)
}

/// The lines of /proc/self/maps that 200 live fresh blocks of 256 KiB add
/// (`large_guard mappings`), with `env`.
fn mappings_of_200_blocks(env: &[(&str, &str)]) -> u64 {
    let o = common::run_guarded(&program(), &["mappings"], true, env, LIMIT);
    common::stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("mappings "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count\n{}", common::describe(&o)))
}

/// With guard markers (where the kernel has them) the guards split no
/// kernel mapping, and neighbouring fresh blocks merge: 200 live blocks
/// are a few kernel mappings; with PROT_NONE guards each block is two.
#[test]
fn live_fresh_blocks_are_two_kernel_mappings_each_only_with_prot_none_guards() {
    let protected = mappings_of_200_blocks(GUARDS[1]);
    assert!(
        (395..=405).contains(&protected),
        "{protected} mappings for 200 blocks with PROT_NONE guards"
    );
    let markers = mappings_of_200_blocks(GUARDS[0]);
    if kernel_has_guard_markers() {
        assert!(
            markers <= 10,
            "{markers} mappings for 200 blocks with markers"
        );
    } else {
        assert!(
            (395..=405).contains(&markers),
            "{markers}: no markers before Linux 6.13"
        );
    }
}
