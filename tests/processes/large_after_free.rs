//! A freed big block faults when it is read or written, as under glibc,
//! which unmaps the blocks it mapped: slubmalloc keeps them in its reuse
//! cache, inaccessible until it hands them out again. Which blocks follows
//! glibc's dynamic mmap threshold: a freed block bigger than any freed
//! before it (and than 128 KiB); a block no bigger is reused without a
//! system call, under both. `tests/c/large_after_free.c` frees a block and
//! touches it.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn program() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile_c("large_after_free", &[]))
        .clone()
}

fn run(args: &[&str], preloaded: bool) -> Output {
    common::run_guarded(&program(), args, preloaded, &[], LIMIT)
}

/// The program freed the block and then died by SIGSEGV touching it.
fn assert_faulted(args: &[&str], preloaded: bool) {
    let o = run(args, preloaded);
    let who = if preloaded { "slubmalloc" } else { "glibc" };
    assert!(
        common::stdout(&o).contains("freed ") && !common::stdout(&o).contains("survived"),
        "{args:?} on {who}: the touch after free did not fault\n{}",
        common::describe(&o)
    );
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{args:?} on {who}\n{}",
        common::describe(&o)
    );
}

#[test]
fn a_write_into_a_freed_256_kib_block_faults() {
    assert_faulted(&["write", "256"], false);
    assert_faulted(&["write", "256"], true);
}

#[test]
fn a_write_into_a_freed_8_mib_block_faults() {
    assert_faulted(&["write", "8192"], false);
    assert_faulted(&["write", "8192"], true);
}

#[test]
fn a_read_of_a_freed_big_block_faults() {
    assert_faulted(&["read", "256"], false);
    assert_faulted(&["read", "256"], true);
    assert_faulted(&["read", "8192"], true);
}

/// The program freed the block and touched it without a fault.
fn assert_survived(args: &[&str], preloaded: bool) {
    let o = run(args, preloaded);
    let who = if preloaded { "slubmalloc" } else { "glibc" };
    assert!(
        o.status.success() && common::stdout(&o).contains("survived"),
        "{args:?} on {who}\n{}",
        common::describe(&o)
    );
}

#[test]
fn a_piece_of_a_cached_block_is_accessible_while_live_and_once_freed_as_under_glibc() {
    // The 1 MiB block is the head of the cached 8 MiB mapping, inaccessible
    // until handed out (glibc serves it from its heap: its threshold rose
    // when the 8 MiB block was freed). Once freed, it is no bigger than the
    // block freed before: neither allocator makes it fault.
    for preloaded in [false, true] {
        let o = run(&["write", "8192", "split"], preloaded);
        assert!(
            common::stdout(&o).contains("piece "),
            "preloaded: {preloaded}: the piece handed out was not writable\n{}",
            common::describe(&o)
        );
        assert_survived(&["write", "8192", "split"], preloaded);
    }
}

#[test]
fn a_freed_block_no_bigger_than_one_freed_before_is_reused_without_protection() {
    // A loop of big blocks of one size pays no mprotect after its first
    // free, as glibc's pays no munmap.
    assert_survived(&["write", "256", "then", "256"], false);
    assert_survived(&["write", "256", "then", "256"], true);
}

#[test]
fn a_freed_block_bigger_than_any_freed_before_faults() {
    assert_faulted(&["write", "256", "then", "8192"], false);
    assert_faulted(&["write", "256", "then", "8192"], true);
    // Above 32 MiB (glibc's most for its threshold), always.
    assert_faulted(&["write", "65536", "then", "65536"], false);
    assert_faulted(&["write", "65536", "then", "65536"], true);
}

#[test]
fn a_child_forked_after_the_free_faults_touching_the_block() {
    for preloaded in [false, true] {
        let o = run(&["write", "8192", "fork"], preloaded);
        assert!(
            o.status.success()
                && common::stdout(&o).contains(&format!("child signal {}\n", libc::SIGSEGV)),
            "preloaded: {preloaded}\n{}",
            common::describe(&o)
        );
    }
}

#[test]
fn at_the_mapping_limit_a_cached_piece_that_cannot_be_made_accessible_is_not_handed_out() {
    // On both mallocs: NULL with ENOMEM, or a block that can be written.
    // The purge delay keeps the 8 MiB mapping cached while the program
    // fills the mappings. Guards as markers (where the kernel has them) and
    // as PROT_NONE.
    for markers in ["1", "0"] {
        let env = [
            ("SLUBMALLOC_PURGE_DELAY_MS", "3600000"),
            ("SLUBMALLOC_GUARD_MARKERS", markers),
        ];
        for preloaded in [false, true] {
            let o = common::run_guarded(&program(), &["limit"], preloaded, &env, LIMIT);
            let out = common::stdout(&o);
            assert!(
                o.status.success()
                    && (out.contains("limit written") || out.contains("limit NULL errno ENOMEM"))
                    && out.contains("after written"),
                "preloaded: {preloaded}, markers: {markers}\n{}",
                common::describe(&o)
            );
        }
    }
}

#[test]
fn with_the_protection_off_a_freed_big_block_stays_accessible() {
    let env = [("SLUBMALLOC_PROTECT_FREED_LARGE", "0")];
    let o = common::run_guarded(&program(), &["write", "8192"], true, &env, LIMIT);
    assert!(
        o.status.success() && common::stdout(&o).contains("survived"),
        "{}",
        common::describe(&o)
    );
}
