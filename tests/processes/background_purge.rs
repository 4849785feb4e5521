//! The background purger, from C programs under the preload: memory that
//! threads freed before they exited, or that the program freed after a
//! pause, goes back to the kernel while the program makes no call into the
//! allocator; the purger sleeps while nothing is pending and the program
//! has other threads, leaves once it is down to one, never keeps a process
//! alive, works with every descriptor closed and in a forked child, and
//! `SLUBMALLOC_BACKGROUND_PURGE=0` turns it off. (A program that never had
//! other threads never gets it: `single_threaded.rs`.)

use std::time::Duration;

use crate::common::{compile_c, parse_json_report, run_guarded, stderr, stdout};

/// Runs `background_purge MODE`; with `keeper`, a thread stays asleep
/// through the run, so that the program has other threads while idle.
fn run_with(mode: &str, keeper: bool, env: &[(&str, &str)]) -> std::process::Output {
    // Compiled once: a test compiling it while another runs it would fail
    // with ETXTBSY.
    static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let exe = EXE.get_or_init(|| compile_c("background_purge", &[]));
    let args: &[&str] = if keeper { &[mode, "keeper"] } else { &[mode] };
    let out = run_guarded(exe, args, true, env, Duration::from_secs(30));
    assert!(
        out.status.success() || mode == "closefds",
        "{mode}: {}\n{}",
        out.status,
        stderr(&out)
    );
    out
}

fn run(mode: &str, env: &[(&str, &str)]) -> std::process::Output {
    run_with(mode, false, env)
}

/// (peak, end, threads) from a "peak_kib=P end_kib=E threads=T" line.
fn numbers(out: &str) -> (u64, u64, u64) {
    let field = |key: &str| -> u64 {
        let rest = &out[out.find(key).unwrap_or_else(|| panic!("{key} in {out}")) + key.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    (field("peak_kib="), field("end_kib="), field("threads="))
}

#[test]
fn memory_freed_by_exiting_threads_goes_back_while_the_program_makes_no_call() {
    let out = run("idle", &[("SLUBMALLOC_STATS", "json")]);
    let (peak, end, threads) = numbers(&stdout(&out));
    assert!(
        end * 4 < peak,
        "resident {end} KiB 1 s after the threads freed and exited, peak {peak} KiB"
    );
    assert_eq!(
        threads, 1,
        "the purger leaves once the program is down to one thread"
    );
    let (_, totals) = parse_json_report(&stderr(&out));
    assert!(totals["purger_starts"] >= 1);
    assert!(totals["background_purges"] >= 1);
    assert!(totals["bytes_purged"] >= (peak - end) << 10 >> 1);
}

#[test]
fn the_purger_stays_asleep_while_the_program_has_other_threads() {
    let out = run_with("idle", true, &[("SLUBMALLOC_STATS", "json")]);
    let (peak, end, threads) = numbers(&stdout(&out));
    assert!(end * 4 < peak, "resident {end} KiB, peak {peak} KiB");
    assert_eq!(threads, 3, "main, the sleeping thread and the purger");
    let (_, totals) = parse_json_report(&stderr(&out));
    assert_eq!(totals["purger_starts"], 1);
    assert!(totals["background_purges"] >= 1);
}

#[test]
fn slubmalloc_background_purge_0_turns_the_purger_off() {
    let out = run_with(
        "idle",
        true,
        &[
            ("SLUBMALLOC_BACKGROUND_PURGE", "0"),
            ("SLUBMALLOC_STATS", "json"),
        ],
    );
    let (peak, end, threads) = numbers(&stdout(&out));
    assert_eq!(threads, 2, "main and the sleeping thread, no purger");
    let (_, totals) = parse_json_report(&stderr(&out));
    assert_eq!(totals["purger_starts"], 0);
    assert_eq!(totals["background_purges"], 0);
    // What the frees left past the trim bound went back at free time.
    assert!(end * 4 < peak, "resident {end} KiB, peak {peak} KiB");
}

#[test]
fn the_purger_works_in_a_program_that_closed_every_descriptor() {
    let out = run("closefds", &[]);
    assert!(
        out.status.success(),
        "resident did not fall below a quarter of the peak: {}",
        out.status
    );
}

#[test]
fn a_forked_child_has_no_purger_of_its_parent_and_starts_its_own() {
    let (peak, end, threads) = numbers(&stdout(&run_with("fork", true, &[])));
    assert!(end * 4 < peak, "child: resident {end} KiB, peak {peak} KiB");
    assert_eq!(
        threads, 3,
        "the child's main and sleeping threads, its own purger"
    );
}

#[test]
fn the_purger_never_keeps_a_forked_child_alive() {
    // The child of a fork among sleeping threads starts its own purger, and
    // its main thread ends with pthread_exit: the threads lost in the fork
    // do not count as the child's, so the purger leaves and the child ends.
    let out = run("fork_exit", &[]);
    assert!(out.status.success(), "{}", out.status);
}

#[test]
fn a_forked_child_that_allocates_a_little_starts_no_purger() {
    // What the parent mapped does not count towards the child's early
    // start: a child that allocates a little (and would call exec) gets
    // no thread, even with another thread of its own.
    let out = stdout(&run_with("fork_small", true, &[]));
    assert!(out.contains("threads=2"), "child: {out}");
}

#[test]
fn memory_freed_after_a_pause_goes_back_while_the_program_makes_no_call() {
    // The main thread built 64 MiB, freed nothing for 300 ms (three purge
    // delays), then freed it all and went idle, while another thread slept:
    // the purger, started early, gives back what the trim bound left.
    let out = run_with("late_free", true, &[("SLUBMALLOC_STATS", "json")]);
    let (peak, end, threads) = numbers(&stdout(&out));
    assert!(
        end * 4 < peak,
        "resident {end} KiB 1 s after the late frees, peak {peak} KiB"
    );
    assert_eq!(threads, 3);
    assert!(parse_json_report(&stderr(&out)).1["background_purges"] >= 1);
    // With no other thread, the same program gets no purger; the trim
    // bound gives its memory back at free time.
    let (peak, end, threads) = numbers(&stdout(&run("late_free", &[])));
    assert!(end * 4 < peak, "alone: resident {end} KiB, peak {peak} KiB");
    assert_eq!(threads, 1);
}

#[test]
fn the_purger_never_keeps_a_process_alive() {
    // The main thread ends with pthread_exit while a purge is pending: the
    // process ends when the purger leaves (one purge delay), well inside
    // the deadline.
    let start = std::time::Instant::now();
    run("pthread_exit", &[]);
    assert!(start.elapsed() < Duration::from_secs(5));
}
