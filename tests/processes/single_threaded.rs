//! A single-threaded program never gets a thread from the allocator (the
//! background purger runs only while the program has other threads), and
//! still gets its memory back when it frees and goes idle (the trim bound
//! gives it back at `free` time). Each test runs `tests/c/single_threaded.c`.

use std::time::Duration;

use crate::common::{compile_c, parse_json_report, run_guarded, stderr, stdout};

fn run(mode: &str, preloaded: bool) -> std::process::Output {
    run_env(mode, preloaded, &[])
}

fn run_env(mode: &str, preloaded: bool, env: &[(&str, &str)]) -> std::process::Output {
    let exe = compile_c("single_threaded", &[]);
    run_guarded(&exe, &[mode], preloaded, env, Duration::from_secs(60))
}

/// The number after `key=` in `out`.
fn field(out: &str, key: &str) -> i64 {
    let key = format!("{key}=");
    let rest = &out[out.find(&key).unwrap_or_else(|| panic!("{key} in {out}")) + key.len()..];
    rest.split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_single_threaded_program_can_unshare_a_user_namespace_after_freeing() {
    // The kernel refuses a new user namespace to a multi-threaded process
    // (EINVAL). The same program on glibc's malloc first: where the kernel
    // forbids user namespaces to everyone, there is nothing to compare.
    let plain = run("unshare", false);
    if !plain.status.success() {
        let why = stdout(&plain);
        assert!(
            why.contains("threads=1"),
            "on glibc: {why}{}",
            stderr(&plain)
        );
        eprintln!("skipped: the kernel refuses user namespaces even on glibc: {why}");
        return;
    }
    let out = run("unshare", true);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert_eq!(field(&text, "threads"), 1, "{text}");
}

#[test]
fn a_single_threaded_program_stays_single_threaded_for_glibc_after_100_mib() {
    let plain = stdout(&run("flag", false));
    assert_eq!(field(&plain, "single_threaded"), 1, "on glibc: {plain}");
    let out = run("flag", true);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert_eq!(field(&text, "single_threaded"), 1, "{text}");
    assert_eq!(field(&text, "threads"), 1, "{text}");
}

#[test]
fn an_idle_single_threaded_program_keeps_at_most_a_quarter_of_its_peak() {
    // With the default purge delay, and with one longer than the run (the
    // frees past the delay are not purged by a later free: only the trim
    // bound gives memory back).
    for delay in ["100", "3600000"] {
        let out = run_env("idle", true, &[("SLUBMALLOC_PURGE_DELAY_MS", delay)]);
        let text = stdout(&out);
        assert!(out.status.success(), "{text}{}", stderr(&out));
        let (peak, end) = (field(&text, "peak_kib"), field(&text, "end_kib"));
        assert!(
            end * 4 <= peak,
            "delay {delay} ms: resident {end} KiB 1 s after freeing 512 MiB, peak {peak} KiB"
        );
        assert_eq!(field(&text, "threads"), 1, "{text}");
    }
}

#[test]
fn a_single_threaded_program_that_forks_from_a_signal_handler_never_hangs() {
    // glibc's malloc/tst-mallocfork2 shape; a hang fails `run_guarded`.
    for preloaded in [false, true] {
        let out = run("forksignal", preloaded);
        let text = stdout(&out);
        assert!(out.status.success(), "{text}{}", stderr(&out));
        assert!(field(&text, "forks") >= 100, "too few signals came: {text}");
        assert_eq!(field(&text, "threads"), 1, "{text}");
    }
}

#[test]
fn a_program_that_frees_and_allocates_again_past_the_trim_bound_stops_trimming() {
    // Six rounds of 96 MiB of small blocks allocated and freed, with a
    // purge delay longer than the run: only trims give memory back. The
    // first round's frees pass the bound (32 MiB) and trim; the next rounds
    // take those pages back (fresh, after a trim), which raises the bound
    // (each raise needs half of it taken back since the last): from the
    // third round on, the bound holds the 96 MiB and the rounds reuse the
    // free slabs. Trimming every round would give back about 576 MiB.
    let out = run_env(
        "churn",
        true,
        &[
            ("SLUBMALLOC_PURGE_DELAY_MS", "3600000"),
            ("SLUBMALLOC_STATS", "json"),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let purged = parse_json_report(&stderr(&out)).1["bytes_purged"];
    assert!(
        (32 << 20..=192 << 20).contains(&purged),
        "purged {purged} bytes: trims in the first two rounds only expected"
    );
}
