//! A freed big block faults when it is read or written, as under glibc,
//! which unmaps blocks of this size: slubmalloc keeps them in its reuse
//! cache, inaccessible until it hands them out again.
//! `tests/c/large_after_free.c` frees a block and touches it.

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

fn describe(o: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        o.status,
        common::stdout(o),
        common::stderr(o)
    )
}

/// The program freed the block and then died by SIGSEGV touching it.
fn assert_faulted(args: &[&str], preloaded: bool) {
    let o = run(args, preloaded);
    let who = if preloaded { "slubmalloc" } else { "glibc" };
    assert!(
        common::stdout(&o).contains("freed ") && !common::stdout(&o).contains("survived"),
        "{args:?} on {who}: the touch after free did not fault\n{}",
        describe(&o)
    );
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGSEGV),
        "{args:?} on {who}\n{}",
        describe(&o)
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

#[test]
fn a_piece_of_a_cached_block_is_accessible_while_live_and_faults_once_freed() {
    // Preloaded only: glibc serves the 1 MiB block from its heap after
    // unmapping the 8 MiB one (its mmap threshold rises on that free), and
    // does not unmap it when it is freed.
    let o = run(&["write", "8192", "split"], true);
    assert!(
        common::stdout(&o).contains("piece "),
        "the piece handed out was not writable\n{}",
        describe(&o)
    );
    assert_faulted(&["write", "8192", "split"], true);
}

#[test]
fn a_child_forked_after_the_free_faults_touching_the_block() {
    for preloaded in [false, true] {
        let o = run(&["write", "8192", "fork"], preloaded);
        assert!(
            o.status.success()
                && common::stdout(&o).contains(&format!("child signal {}\n", libc::SIGSEGV)),
            "preloaded: {preloaded}\n{}",
            describe(&o)
        );
    }
}

#[test]
fn at_the_mapping_limit_a_cached_piece_that_cannot_be_made_accessible_is_not_handed_out() {
    // On both mallocs: NULL with ENOMEM, or a block that can be written.
    // The purge delay keeps the 8 MiB mapping cached while the program
    // fills the mappings.
    let env = [("SLUBMALLOC_PURGE_DELAY_MS", "3600000")];
    for preloaded in [false, true] {
        let o = common::run_guarded(&program(), &["limit"], preloaded, &env, LIMIT);
        let out = common::stdout(&o);
        assert!(
            o.status.success()
                && (out.contains("limit written") || out.contains("limit NULL errno ENOMEM"))
                && out.contains("after written"),
            "preloaded: {preloaded}\n{}",
            describe(&o)
        );
    }
}

#[test]
fn with_the_protection_off_a_freed_big_block_stays_accessible() {
    let env = [("SLUBMALLOC_PROTECT_FREED_LARGE", "0")];
    let o = common::run_guarded(&program(), &["write", "8192"], true, &env, LIMIT);
    assert!(
        o.status.success() && common::stdout(&o).contains("survived"),
        "{}",
        describe(&o)
    );
}
