//! Heap misuse stops the process: each test runs a small C program from
//! `tests/c/misuse_*.c` with the allocator preloaded. The program prints the
//! address it is about to misuse, then misuses it; the test expects death by
//! SIGABRT after exactly one line on stderr that starts with "slubmalloc: ",
//! names the misuse and carries that address.
//!
//! The default mode must stop the six free misuses (double free of a small
//! block with another free between or after its slab emptied, double free
//! of a large block, interior,
//! stack and made-up pointers, and a slot of a slab that was never handed
//! out), also when the two frees come from different threads, and an
//! allocation that pops a block whose free-list link a write after free
//! overwrote. `SLUBMALLOC_DEBUG=1` must also stop a one-byte overflow (red zone
//! checked on free) and a write after free (poison checked on reuse), and
//! leave a correct multithreaded program's output unchanged.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

const SIGABRT: i32 = 6;

/// Compiles a C program once per test binary (several tests share the
/// control program and the never-carved one; compiling one twice at once
/// would race on the executable).
fn program(name: &'static str) -> PathBuf {
    static SHARED: [(&str, OnceLock<PathBuf>); 2] = [
        ("misuse_none_threads", OnceLock::new()),
        ("misuse_never_carved_slot", OnceLock::new()),
    ];
    match SHARED.iter().find(|(n, _)| *n == name) {
        Some((_, once)) => once.get_or_init(|| common::compile_c(name, &[])).clone(),
        None => common::compile_c(name, &[]),
    }
}

fn describe(o: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
        o.status,
        common::stdout(o),
        common::stderr(o)
    )
}

/// The address the program printed (its first stdout line, `%p`).
fn printed_address(o: &Output) -> u64 {
    let out = common::stdout(o);
    let line = out.lines().next().unwrap_or("");
    let hex = line.trim().strip_prefix("0x").unwrap_or_else(|| {
        panic!(
            "the program printed no address before the misuse\n{}",
            describe(o)
        )
    });
    u64::from_str_radix(hex, 16)
        .unwrap_or_else(|e| panic!("bad address {line:?}: {e}\n{}", describe(o)))
}

/// Every `0x...` number in `line`.
fn hex_numbers(line: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("0x") {
        rest = &rest[at + 2..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        if let Ok(n) = u64::from_str_radix(&digits, 16) {
            found.push(n);
        }
        rest = &rest[digits.len()..];
    }
    found
}

/// Asserts the process died by SIGABRT after exactly one "slubmalloc: " line
/// on stderr that contains one of `names` and an address in `lo..=hi`.
fn assert_stopped(o: &Output, names: &[&str], lo: u64, hi: u64) {
    assert_eq!(
        o.status.signal(),
        Some(SIGABRT),
        "expected death by SIGABRT\n{}",
        describe(o)
    );
    assert!(
        !common::stdout(o).contains("survived"),
        "the program ran past its misuse\n{}",
        describe(o)
    );
    let err = common::stderr(o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("slubmalloc: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "expected exactly one \"slubmalloc: \" line\n{}",
        describe(o)
    );
    let line = lines[0];
    let lower = line.to_lowercase();
    assert!(
        names.iter().any(|n| lower.contains(n)),
        "the message does not name the misuse (one of {names:?}): {line:?}"
    );
    let addrs = hex_numbers(line);
    assert!(
        addrs.iter().any(|&a| (lo..=hi).contains(&a)),
        "the message does not carry the address {lo:#x} (found {addrs:x?}): {line:?}"
    );
}

/// Runs `name` preloaded in the default mode and expects it stopped for
/// `names`, naming exactly the printed address.
fn expect_stopped(name: &'static str, names: &[&str]) {
    expect_stopped_with(name, &[], names)
}

/// `expect_stopped` for `name args`.
fn expect_stopped_with(name: &'static str, args: &[&str], names: &[&str]) {
    let exe = program(name);
    let o = common::run_preloaded(&exe, args, &[]);
    let addr = printed_address(&o);
    assert_stopped(&o, names, addr, addr);
}

#[test]
fn double_free_of_a_small_block_with_a_free_between_is_stopped() {
    expect_stopped("misuse_double_free_small", &["double free"]);
}

#[test]
fn double_free_of_a_large_block_is_stopped() {
    expect_stopped("misuse_double_free_large", &["double free"]);
}

#[test]
fn double_free_from_another_thread_is_stopped() {
    expect_stopped("misuse_double_free_remote", &["double free"]);
}

#[test]
fn double_free_by_the_owner_after_a_remote_free_is_stopped() {
    expect_stopped("misuse_double_free_after_remote", &["double free"]);
}

#[test]
fn double_free_of_a_block_whose_slab_went_back_to_its_segment_is_stopped() {
    expect_stopped("misuse_double_free_emptied_slab", &["double free"]);
}

#[test]
fn free_of_an_interior_pointer_is_stopped() {
    expect_stopped("misuse_interior_pointer", &["invalid pointer"]);
}

#[test]
fn free_of_a_stack_address_is_stopped() {
    expect_stopped("misuse_stack_pointer", &["invalid pointer"]);
}

#[test]
fn free_of_a_made_up_address_is_stopped() {
    expect_stopped("misuse_made_up_pointer", &["invalid pointer"]);
}

#[test]
fn free_of_a_slot_never_handed_out_is_stopped() {
    expect_stopped_with("misuse_never_carved_slot", &["owner"], &["invalid pointer"]);
}

#[test]
fn free_of_a_slot_never_handed_out_from_another_thread_is_stopped() {
    expect_stopped_with(
        "misuse_never_carved_slot",
        &["remote"],
        &["invalid pointer"],
    );
}

#[test]
fn free_of_a_slot_never_handed_out_as_a_threads_first_call_is_stopped() {
    expect_stopped_with(
        "misuse_never_carved_slot",
        &["remote_new"],
        &["invalid pointer"],
    );
}

#[test]
fn misuse_in_a_thread_with_a_cancellation_pending_still_stops_the_process_with_its_message() {
    expect_stopped_with(
        "misuse_never_carved_slot",
        &["cancel"],
        &["invalid pointer"],
    );
}

#[test]
fn usable_size_and_realloc_of_a_slot_never_handed_out_are_stopped() {
    for mode in ["usable", "realloc"] {
        expect_stopped_with("misuse_never_carved_slot", &[mode], &["invalid pointer"]);
    }
}

/// The control: a correct program is not stopped, prints what it prints
/// without the preload, and the allocator says nothing.
#[test]
fn an_allocation_that_pops_a_block_whose_link_was_overwritten_is_stopped() {
    expect_stopped("misuse_overwritten_link", &["corrupted free list"]);
}

#[test]
fn correct_multithreaded_program_is_not_stopped() {
    let exe = program("misuse_none_threads");
    let plain = common::run_plain(&exe, &[]);
    assert!(
        plain.status.success(),
        "without the preload\n{}",
        describe(&plain)
    );
    let o = common::run_preloaded(&exe, &[], &[]);
    assert!(o.status.success(), "preloaded\n{}", describe(&o));
    assert_eq!(common::stdout(&o), common::stdout(&plain));
    assert!(
        !common::stderr(&o).contains("slubmalloc: "),
        "the allocator complained about a correct program\n{}",
        describe(&o)
    );
}

// ---------------------------------------------------------------------------
// Debug mode (SLUBMALLOC_DEBUG=1)

const DEBUG: &[(&str, &str)] = &[("SLUBMALLOC_DEBUG", "1")];

#[test]
fn debug_mode_stops_a_one_byte_overflow_at_free() {
    let exe = program("misuse_overflow_one_byte");
    let o = common::run_preloaded(&exe, &[], DEBUG);
    let block = printed_address(&o);
    // The message may name the block or the overwritten byte (block + 24).
    assert_stopped(&o, &["overflow", "red zone", "redzone"], block, block + 24);
}

#[test]
fn debug_mode_stops_a_write_after_free_on_reuse() {
    let exe = program("misuse_write_after_free");
    let o = common::run_preloaded(&exe, &[], DEBUG);
    let block = printed_address(&o);
    // The message may name the block or the overwritten byte (block + 8).
    assert_stopped(&o, &["write after free", "poison"], block, block + 8);
}

#[test]
fn debug_mode_leaves_a_correct_multithreaded_program_unchanged() {
    let exe = program("misuse_none_threads");
    let plain = common::run_plain(&exe, &[]);
    assert!(
        plain.status.success(),
        "without the preload\n{}",
        describe(&plain)
    );
    let o = common::run_preloaded(&exe, &[], DEBUG);
    assert!(o.status.success(), "debug mode\n{}", describe(&o));
    assert_eq!(common::stdout(&o), common::stdout(&plain));
    // No complaint, and no "unknown variable" warning either: the debug mode
    // must actually have been on for this test to prove anything.
    assert!(
        !common::stderr(&o).contains("slubmalloc: "),
        "the allocator complained in debug mode\n{}",
        describe(&o)
    );
}
