//! Robustness of the preloaded library: allocation before main and during
//! exit, from pthread key and C++ `thread_local` destructors, across threads,
//! across fork, from thousands of short-lived threads (misuse, which must end
//! in a clear abort rather than a crash inside the allocator: `misuse.rs`).
//!
//! Every program runs with a deadline (`run_with_deadline`): a hang kills the
//! whole process group and fails the test instead of blocking it.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn run(exe: &Path, args: &[&str], preloaded: bool, env: &[(&str, &str)]) -> Output {
    common::run_guarded(exe, args, preloaded, env, LIMIT)
}

fn assert_success(what: &str, o: &Output) {
    assert!(
        o.status.success(),
        "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        common::stdout(o),
        common::stderr(o)
    );
}

/// Runs `exe` preloaded and plain; both must succeed with the same stdout.
fn same_as_glibc(exe: &Path) -> String {
    let plain = run(exe, &[], false, &[]);
    assert_success("plain run (glibc malloc)", &plain);
    let pre = run(exe, &[], true, &[]);
    assert_success("preloaded run", &pre);
    assert_eq!(common::stdout(&pre), common::stdout(&plain));
    common::stdout(&pre)
}

/// The number after `key ` in `text` (`key 42` or `"key":42`).
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in:\n{text}"));
    text[at + key.len()..]
        .trim_start_matches([' ', ':', '"'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {key} in:\n{text}"))
}

#[test]
fn constructors_destructors_and_atexit_handlers_can_allocate() {
    let exe = common::compile_c("preload_constructor", &["-ldl"]);
    let o = run(&exe, &[], true, &[]);
    assert_success("preload_constructor", &o);
    let out = common::stdout(&o);
    assert!(
        out.contains("main ok\n") && out.ends_with("destructor ok\n"),
        "{out}"
    );
    // The constructor's 100-byte block came from slubmalloc's 112-byte class,
    // not from some bootstrap allocator.
    assert_eq!(
        number_after(&out, "usable_before_main"),
        slubmalloc::class_size(100).unwrap() as u64
    );
    assert!(
        out.contains("undefined symbol: slubmalloc_no_such_symbol"),
        "{out}"
    );
}

#[test]
fn pthread_key_destructors_can_malloc_and_free_at_thread_exit() {
    let exe = common::compile_c("preload_tls_dtor", &[]);
    let out = same_as_glibc(&exe);
    let threads = number_after(&out, "threads");
    // Two keys per thread, each destructor runs three rounds (it re-arms its
    // key twice) and hands one block to main per round.
    assert_eq!(number_after(&out, "handoffs"), threads * 2 * 3, "{out}");
    assert_eq!(
        number_after(&out, "allocated"),
        number_after(&out, "freed"),
        "{out}"
    );
}

#[test]
fn cxx_thread_local_destructors_can_allocate() {
    let exe = common::compile_cxx("preload_tls_dtor_cxx");
    let out = same_as_glibc(&exe);
    assert_eq!(
        number_after(&out, "destructors"),
        2 * number_after(&out, "threads"),
        "{out}"
    );
}

#[test]
fn blocks_freed_by_other_threads_keep_their_contents() {
    let exe = common::compile_c("preload_cross_thread", &[]);
    let o = run(&exe, &[], true, &[]);
    assert_success("preload_cross_thread", &o);
    let out = common::stdout(&o);
    // 4 threads x 15000 blocks through mailboxes, 3 rounds x 100000 in bulk.
    assert_eq!(number_after(&out, "mailbox"), 60_000, "{out}");
    assert_eq!(number_after(&out, "bulk"), 300_000, "{out}");
}

#[test]
fn concurrent_remote_frees_into_one_slab_are_not_double_frees() {
    let exe = common::compile_c("preload_remote_free_race", &[]);
    let o = run(&exe, &[], true, &[]);
    assert_success("preload_remote_free_race", &o);
    assert!(common::stdout(&o).starts_with("ok"));
}

#[test]
fn fork_while_threads_allocate_neither_hangs_nor_corrupts() {
    let exe = common::compile_c("preload_fork", &[]);
    let o = run(&exe, &[], true, &[]);
    assert_success("preload_fork", &o);
    let out = common::stdout(&o);
    assert_eq!(number_after(&out, "forks"), 300, "{out}");
    assert!(out.contains(" ok,"), "{out}");
    // The forks really overlapped with allocation in the other threads.
    assert!(number_after(&out, "made") > 1000, "{out}");
}

/// Runs `tests/c/<name>.c` preloaded `runs` times, each under `limit`: a
/// hang fails the test. Returns the last run's stdout.
fn repeat_without_hang(name: &str, runs: u32, limit: Duration) -> String {
    let exe = common::compile_c(name, &[]);
    let mut out = String::new();
    for _ in 0..runs {
        let o = common::run_guarded(&exe, &[], true, &[], limit);
        assert_success(name, &o);
        out = common::stdout(&o);
    }
    out
}

#[test]
fn fork_while_other_threads_hold_stdio_locks_never_hangs() {
    // Before fork held no allocator lock, every run of this hung within 20 s.
    let out = repeat_without_hang("preload_fork_stdio", 3, Duration::from_secs(40));
    assert_eq!(number_after(&out, "forks"), 300, "{out}");
    // The readers really ran (and allocated under flockfile) meanwhile.
    assert!(number_after(&out, "meanwhile") > 100, "{out}");
}

#[test]
fn fork_from_a_signal_handler_in_a_single_threaded_process_never_hangs() {
    let out = repeat_without_hang("preload_fork_signal", 3, Duration::from_secs(40));
    assert_eq!(number_after(&out, "forks"), 400, "{out}");
    // The handler's forks really interrupted the main loop.
    assert!(number_after(&out, "ok,") > 0, "{out}");
}

#[test]
fn thousands_of_short_lived_threads_reuse_the_memory_of_dead_ones() {
    let exe = common::compile_c("preload_many_threads", &[]);
    let o = run(&exe, &[], true, &[("SLUBMALLOC_STATS", "json")]);
    assert_success("preload_many_threads", &o);
    let out = common::stdout(&o);
    assert_eq!(number_after(&out, "threads"), 2000, "{out}");
    assert_eq!(number_after(&out, "verified"), 2000 * 32, "{out}");
    // Every thread's exit reached the allocator (its heap was handed back).
    let report = common::stderr(&o);
    assert_eq!(
        common::parse_json_report(&report).1["threads_exited"],
        2000,
        "{report}"
    );
    // Each thread touched ~80 KiB over ~40 classes: if the slabs of dead
    // threads were not reused, 2000 of them would need well over 100 MiB.
    let rss_kib = number_after(&out, "rss_kib");
    assert!(
        rss_kib < 64 * 1024,
        "resident {rss_kib} KiB after 2000 threads"
    );
}
