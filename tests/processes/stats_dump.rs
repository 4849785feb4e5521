//! The statistics report chosen by environment variable, seen from
//! outside: a C program under `LD_PRELOAD` and a Rust program with
//! `#[global_allocator]` (tests/programs/hold_blocks.rs) that hold exactly K live
//! blocks at exit report exactly K in that class, as text and as JSON, on
//! stderr and in a file named with the pid; nothing is written unless asked;
//! a bad variable gets one warning; a running multithreaded program reports
//! on a signal; and under the preload the counters agree with a full walk.
//!
//! Run: `cargo test --release --test processes stats_dump`.

use crate::common::{self, class_of, json, parse_json_report};

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// No child may run longer than this; a hang fails the test instead of
/// stalling the suite.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// Requests of this many bytes land in a class (20480 B) that neither libc's
/// start-up nor Rust's runtime uses, so its count is exactly ours.
const C_SIZE: usize = 20_000;
/// Likewise for the Rust program (28672 B class).
const RUST_SIZE: usize = 28_000;

// ---------------------------------------------------------------------------
// Running programs

/// What a finished child left behind.
struct Ran {
    status: ExitStatus,
    pid: u32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn assert_ok(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what} failed: {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// Collects a pipe on a thread, so a child never blocks on a full pipe (for
/// the signal test's child, which this test talks to while it runs).
fn drain(pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let mut pipe = pipe;
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for `child` until `CHILD_DEADLINE`, killing it and failing past it.
fn wait_with_deadline(child: &mut Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + CHILD_DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {CHILD_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `exe` to its end (failing past `CHILD_DEADLINE`), its environment
/// as `command` makes it.
fn run(exe: &Path, args: &[&str], env: &[(&str, &str)], preload: bool) -> Ran {
    let (out, pid) = common::run_with_pid(
        common::clean_command(exe, args, env, preload),
        CHILD_DEADLINE,
    );
    Ran {
        status: out.status,
        pid,
        stdout: common::stdout(&out),
        stderr: common::stderr(&out),
    }
}

/// `tests/c/stats_hold.c`, compiled once.
fn c_hold() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    // -fno-builtin: the compiler must not drop a malloc/free pair it can see.
    EXE.get_or_init(|| common::compile_c("stats_hold", &["-fno-builtin"]))
        .clone()
}

/// The C program holding `k` blocks of `C_SIZE` bytes, under the preload.
fn run_c_hold(k: usize, size: usize, quiet: bool, env: &[(&str, &str)]) -> Ran {
    let (k, size) = (k.to_string(), size.to_string());
    let mut args = vec![k.as_str(), size.as_str()];
    if quiet {
        args.push("quiet");
    }
    run(&c_hold(), &args, env, true)
}

fn run_rust_hold(k: usize, size: usize, quiet: bool, env: &[(&str, &str)]) -> Ran {
    let (k, size) = (k.to_string(), size.to_string());
    let mut args = vec![k.as_str(), size.as_str()];
    if quiet {
        args.push("quiet");
    }
    run(&common::rust_program("hold_blocks"), &args, env, false)
}

/// A fresh, empty directory for one test's report files.
fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "slubmalloc-stats-dump-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------
// The text report

/// One text report: the pid in its title, one row per class (column name ->
/// value, names from the header line) and the numbers of its totals line.
#[derive(Debug)]
struct TextReport {
    pid: u64,
    rows: Vec<BTreeMap<String, u64>>,
    totals: String,
}

impl TextReport {
    fn row(&self, object_size: u64) -> &BTreeMap<String, u64> {
        self.rows
            .iter()
            .find(|r| r["size"] == object_size)
            .unwrap_or_else(|| panic!("no row for {object_size} B in {self:#?}"))
    }

    /// The number after `label` in the totals line ("threads alive 5, ...").
    fn total(&self, label: &str) -> u64 {
        let at = self
            .totals
            .find(label)
            .unwrap_or_else(|| panic!("no {label:?} in {:?}", self.totals));
        self.totals[at + label.len()..]
            .trim_start()
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {label:?} in {:?}", self.totals))
    }
}

/// Every complete text report in `text` (a file may hold several), in order.
/// Panics on anything malformed: a title without a header, a row whose
/// fields are not as many numbers as the header has names.
fn text_reports(text: &str) -> Vec<TextReport> {
    const TITLE: &str = "slubmalloc statistics (pid ";
    // A file read while a report is being written may end in the middle of
    // a row: only whole lines count.
    let text = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    let mut reports = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.strip_prefix(TITLE) else {
            continue;
        };
        let pid = rest
            .trim_end_matches(')')
            .parse()
            .unwrap_or_else(|_| panic!("bad title {line:?}"));
        let Some(header) = lines.next() else { break };
        let names: Vec<&str> = header.split_whitespace().collect();
        assert!(
            names.first() == Some(&"size") && names.get(1) == Some(&"in_use"),
            "unexpected header {header:?}"
        );
        let mut rows = Vec::new();
        let mut totals = None;
        for line in lines.by_ref() {
            if line.starts_with("in use ") {
                totals = Some(line.to_string());
                break;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                fields.len(),
                names.len(),
                "row {line:?} under header {header:?}"
            );
            let row = names
                .iter()
                .zip(&fields)
                .map(|(n, f)| {
                    (
                        n.to_string(),
                        f.parse()
                            .unwrap_or_else(|_| panic!("field {f:?} in {line:?}")),
                    )
                })
                .collect();
            rows.push(row);
        }
        // A report cut short (still being written) is not complete.
        if let Some(totals) = totals {
            reports.push(TextReport { pid, rows, totals });
        }
    }
    reports
}

fn one_text_report(text: &str) -> TextReport {
    let mut reports = text_reports(text);
    assert_eq!(reports.len(), 1, "expected one text report in:\n{text}");
    reports.pop().unwrap()
}

// ---------------------------------------------------------------------------
// The JSON report

// ---------------------------------------------------------------------------
// Exactly K blocks: text and JSON, stderr and file, C and Rust

#[test]
fn c_program_text_report_on_stderr_counts_exactly_the_live_blocks() {
    let object_size = class_of(C_SIZE);
    for (value, k) in [("1", 10), ("text", 7)] {
        let ran = run_c_hold(k, C_SIZE, false, &[("SLUBMALLOC_STATS", value)]);
        ran.assert_ok("stats_hold");
        assert!(
            ran.stdout.starts_with(&format!("held {k} blocks")),
            "stdout {:?}",
            ran.stdout
        );
        let report = one_text_report(&ran.stderr);
        assert_eq!(report.pid, ran.pid as u64, "the title names the process");
        let row = report.row(object_size);
        assert_eq!(
            row["in_use"], k as u64,
            "SLUBMALLOC_STATS={value}, {k} blocks held:\n{}",
            ran.stderr
        );
        // 2K allocated, K freed: the class saw both.
        assert_eq!(
            row["al_sheaf"] + row["alloc_fast"] + row["alloc_slow"],
            2 * k as u64,
            "{row:?}"
        );
        assert!(row["total"] >= k as u64 && row["slabs"] >= 1, "{row:?}");
        assert!(report.total("threads alive") >= 1, "{}", report.totals);
    }
}

#[test]
fn c_program_json_report_on_stderr_counts_exactly_the_live_blocks() {
    let k = 13;
    let ran = run_c_hold(k, C_SIZE, false, &[("SLUBMALLOC_STATS", "json")]);
    ran.assert_ok("stats_hold");
    // stderr holds the one JSON document and nothing else.
    let (caches, totals) = parse_json_report(&ran.stderr);
    let c = &caches[&class_of(C_SIZE)];
    assert_eq!(c["objects_in_use"], k as u64, "{}", ran.stderr);
    assert_eq!(
        c["alloc_sheaf"] + c["alloc_fast"] + c["alloc_slow"],
        2 * k as u64,
        "{c:?}"
    );
    assert!(
        totals["bytes_in_use"] >= k as u64 * class_of(C_SIZE),
        "{totals:?}"
    );
}

#[test]
fn c_program_reports_to_the_file_named_with_its_pid() {
    let dir = scratch_dir("c_file");
    let pattern = dir.join("report-%p.txt");
    let pattern = pattern.to_str().unwrap();
    for (mode, k) in [("1", 5), ("json", 6)] {
        let ran = run_c_hold(
            k,
            C_SIZE,
            true,
            &[
                ("SLUBMALLOC_STATS", mode),
                ("SLUBMALLOC_STATS_FILE", pattern),
            ],
        );
        ran.assert_ok("stats_hold");
        assert_eq!(ran.stderr, "", "the report goes to the file, not stderr");
        let file = dir.join(format!("report-{}.txt", ran.pid));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            let names: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            panic!(
                "no report at {} ({e}); the directory holds {names:?}",
                file.display()
            )
        });
        let in_use = if mode == "json" {
            parse_json_report(&text).0[&class_of(C_SIZE)]["objects_in_use"]
        } else {
            let report = one_text_report(&text);
            assert_eq!(report.pid, ran.pid as u64);
            report.row(class_of(C_SIZE))["in_use"]
        };
        assert_eq!(
            in_use, k as u64,
            "SLUBMALLOC_STATS={mode}, {k} blocks held:\n{text}"
        );
    }
    assert!(!dir.join("report-%p.txt").exists(), "%p was not expanded");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_program_live_block_difference_is_exact_in_a_class_libc_also_uses() {
    // 64-byte blocks share their class with whatever libc allocates there, so
    // compare two runs that differ only in how many blocks they hold.
    let (k, n) = (20, 37);
    let in_use = |held: usize| {
        let ran = run_c_hold(held, 64, true, &[("SLUBMALLOC_STATS", "1")]);
        ran.assert_ok("stats_hold");
        one_text_report(&ran.stderr).row(class_of(64))["in_use"]
    };
    let (fewer, more) = (in_use(k), in_use(k + n));
    assert_eq!(
        more - fewer,
        n as u64,
        "{k} then {} blocks held: {fewer} then {more} in use",
        k + n
    );
    assert!(fewer >= k as u64);
}

#[test]
fn rust_program_text_report_counts_exactly_the_live_blocks() {
    let k = 9;
    let ran = run_rust_hold(k, RUST_SIZE, false, &[("SLUBMALLOC_STATS", "1")]);
    ran.assert_ok("hold_blocks");
    assert!(
        ran.stdout.starts_with(&format!("held {k} blocks")),
        "stdout {:?}",
        ran.stdout
    );
    let report = one_text_report(&ran.stderr);
    assert_eq!(report.pid, ran.pid as u64);
    let row = report.row(class_of(RUST_SIZE));
    assert_eq!(row["in_use"], k as u64, "{}", ran.stderr);
    assert_eq!(
        row["al_sheaf"] + row["alloc_fast"] + row["alloc_slow"],
        2 * k as u64,
        "{row:?}"
    );
}

#[test]
fn rust_program_json_report_counts_exactly_the_live_blocks() {
    let k = 11;
    let ran = run_rust_hold(k, RUST_SIZE, false, &[("SLUBMALLOC_STATS", "json")]);
    ran.assert_ok("hold_blocks");
    let (caches, _) = parse_json_report(&ran.stderr);
    assert_eq!(
        caches[&class_of(RUST_SIZE)]["objects_in_use"],
        k as u64,
        "{}",
        ran.stderr
    );
}

#[test]
fn rust_program_reports_to_the_file_named_with_its_pid() {
    let dir = scratch_dir("rust_file");
    let pattern = dir.join("rust-%p.json");
    let k = 4;
    let ran = run_rust_hold(
        k,
        RUST_SIZE,
        true,
        &[
            ("SLUBMALLOC_STATS", "json"),
            ("SLUBMALLOC_STATS_FILE", pattern.to_str().unwrap()),
        ],
    );
    ran.assert_ok("hold_blocks");
    assert_eq!(ran.stderr, "");
    let file = dir.join(format!("rust-{}.json", ran.pid));
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(
        parse_json_report(&text).0[&class_of(RUST_SIZE)]["objects_in_use"],
        k as u64,
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// The JSON document itself

#[test]
fn json_report_parses_with_every_cache_field_and_totals() {
    // Small and large requests, in both kinds of program; `parse_json_report`
    // checks the shape and that the numbers agree with each other.
    let runs = [
        (
            run_c_hold(3, 100, true, &[("SLUBMALLOC_STATS", "json")]),
            3,
            100,
        ),
        (
            run_c_hold(3, 50_000, true, &[("SLUBMALLOC_STATS", "json")]),
            3,
            50_000,
        ),
        (
            run_rust_hold(5, 700, true, &[("SLUBMALLOC_STATS", "json")]),
            5,
            700,
        ),
    ];
    for (ran, k, size) in runs {
        ran.assert_ok("program");
        assert!(
            ran.stderr.ends_with("}\n"),
            "one document, then a newline: {:?}",
            ran.stderr
        );
        let (caches, totals) = parse_json_report(&ran.stderr);
        match slubmalloc::class_size(size) {
            Some(class) => {
                let c = caches
                    .get(&(class as u64))
                    .unwrap_or_else(|| panic!("no {class} B cache: {}", ran.stderr));
                assert_eq!(c["objects_in_use"], k, "{}", ran.stderr);
                assert!(totals["segments"] > 0, "{totals:?}");
            }
            None => {
                // Large blocks: in the totals, page-rounded.
                assert_eq!(totals["large_blocks"], k, "{totals:?}");
                assert!(totals["large_bytes"] >= k * size as u64, "{totals:?}");
            }
        }
        assert!(
            totals["bytes_mapped"] >= totals["bytes_in_use"],
            "{totals:?}"
        );
    }

    // And the parser is strict enough for that to mean something.
    for bad in [
        "{\"a\":1,}",
        "{\"a\":01}",
        "{\"a\":1}{",
        "[1 2]",
        "{\"a\":1,\"a\":2}",
        "{'a':1}",
        "",
    ] {
        assert!(json::parse(bad).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn text_and_json_reports_agree_row_for_row() {
    // The program is deterministic, so two runs differ only in the format.
    let text = run_c_hold(6, C_SIZE, true, &[("SLUBMALLOC_STATS", "1")]);
    let json = run_c_hold(6, C_SIZE, true, &[("SLUBMALLOC_STATS", "json")]);
    text.assert_ok("stats_hold");
    json.assert_ok("stats_hold");
    let report = one_text_report(&text.stderr);
    let (caches, _) = parse_json_report(&json.stderr);
    let sizes: Vec<u64> = report.rows.iter().map(|r| r["size"]).collect();
    assert_eq!(
        sizes,
        caches.keys().copied().collect::<Vec<_>>(),
        "the same classes"
    );
    for row in &report.rows {
        let c = &caches[&row["size"]];
        for (column, field) in [
            ("in_use", "objects_in_use"),
            ("total", "objects_total"),
            ("slabs", "slabs"),
            ("tpart", "thread_partial_slabs"),
            ("npart", "node_partial_slabs"),
            ("partfree", "partial_free_objects"),
            ("sheaf", "sheaf_objects"),
            ("barn", "barn_objects"),
            ("al_sheaf", "alloc_sheaf"),
            ("fr_sheaf", "free_sheaf"),
            ("flushed", "sheaf_flushed"),
            ("alloc_fast", "alloc_fast"),
            ("alloc_slow", "alloc_slow"),
            ("free_fast", "free_fast"),
            ("free_slow", "free_slow"),
            ("free_rmt", "free_remote"),
        ] {
            assert_eq!(
                row[column], c[field],
                "{} B: text {column} vs JSON {field}",
                row["size"]
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Silence unless asked, and one warning for a bad variable

#[test]
fn nothing_is_written_when_stats_are_not_asked_for() {
    for ran in [
        run_c_hold(10, C_SIZE, true, &[]),
        run_rust_hold(10, RUST_SIZE, true, &[]),
    ] {
        ran.assert_ok("program");
        assert_eq!(ran.stderr, "", "stderr must stay empty");
        assert_eq!(ran.stdout, "", "stdout must stay empty");
    }
}

/// Runs both programs with `var=value`; each must print what it prints
/// without the variable and write exactly one line on stderr, a warning
/// naming `var`.
fn assert_one_warning(var: &str, value: &str) {
    let c_plain = run(&c_hold(), &["4", "300"], &[], false);
    let rust_plain = run_rust_hold(4, 300, false, &[]);
    let runs = [
        (
            "C under the preload",
            c_plain,
            run(&c_hold(), &["4", "300"], &[(var, value)], true),
        ),
        (
            "Rust",
            rust_plain,
            run_rust_hold(4, 300, false, &[(var, value)]),
        ),
    ];
    for (what, plain, ran) in runs {
        plain.assert_ok(what);
        ran.assert_ok(what);
        assert!(
            plain.stdout.starts_with("held 4 blocks"),
            "{what}: {:?}",
            plain.stdout
        );
        assert_eq!(
            ran.stdout, plain.stdout,
            "{what}: the program's own output with {var}={value}"
        );
        let lines: Vec<&str> = ran.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "{what}: {var}={value} must give exactly one line, got:\n{}",
            ran.stderr
        );
        assert!(
            ran.stderr.ends_with('\n'),
            "{what}: the warning is a whole line: {:?}",
            ran.stderr
        );
        assert!(
            lines[0].starts_with("slubmalloc: "),
            "{what}: {:?}",
            lines[0]
        );
        let named = lines[0]
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|word| word == var);
        assert!(named, "{what}: the warning must name {var}: {:?}", lines[0]);
    }
}

#[test]
fn unknown_variable_gets_one_warning_and_the_program_runs() {
    assert_one_warning("SLUBMALLOC_FOO", "1");
}

#[test]
fn bad_value_gets_one_warning_and_the_program_runs() {
    assert_one_warning("SLUBMALLOC_STATS", "bogus");
    assert_one_warning("SLUBMALLOC_STATS_SIGNAL", "NOSUCHSIGNAL");
    assert_one_warning("SLUBMALLOC_PURGE_DELAY_MS", "soon");
}

#[test]
fn unknown_variable_does_not_disturb_the_report() {
    let k = 8;
    let ran = run_c_hold(
        k,
        C_SIZE,
        true,
        &[("SLUBMALLOC_FOO", "1"), ("SLUBMALLOC_STATS", "json")],
    );
    ran.assert_ok("stats_hold");
    let (warning, report) = ran
        .stderr
        .split_once('\n')
        .expect("a warning line, then the report");
    assert!(warning.contains("SLUBMALLOC_FOO"), "{warning:?}");
    assert_eq!(
        parse_json_report(report).0[&class_of(C_SIZE)]["objects_in_use"],
        k as u64
    );
}

// ---------------------------------------------------------------------------
// A report by signal

#[test]
fn report_by_signal_from_a_running_multithreaded_program() {
    let exe = common::compile_c("stats_signal", &["-fno-builtin"]);
    let dir = scratch_dir("signal");
    let pattern = dir.join("signal-%p.txt");
    let mut child = common::clean_command(
        &exe,
        &[],
        &[
            ("SLUBMALLOC_STATS", "1"),
            ("SLUBMALLOC_STATS_SIGNAL", "USR2"),
            ("SLUBMALLOC_STATS_FILE", pattern.to_str().unwrap()),
        ],
        true,
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("start stats_signal");
    let pid = child.id();
    let file = dir.join(format!("signal-{pid}.txt"));
    let err = drain(child.stderr.take().unwrap());

    // Its stdout, line by line, through a channel so that waiting can time out.
    let (tx, lines) = mpsc::channel();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in stdout.lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let first = lines.recv_timeout(CHILD_DEADLINE);
    if first.as_deref() != Ok("ready") {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "stats_signal did not get ready: {first:?}; stderr:\n{}",
            err.join().unwrap()
        );
    }

    // Every worker is allocating and freeing now.
    let kill = Command::new("kill")
        .args(["-USR2", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success(), "kill -USR2 {pid}");
    let deadline = Instant::now() + CHILD_DEADLINE;
    let report = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if let Some(report) = text_reports(&text).into_iter().next() {
            break report;
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let status = child.wait().unwrap();
            panic!(
                "no report in {} after SIGUSR2 (program: {status}); file:\n{text}\nstderr:\n{}",
                file.display(),
                err.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(report.pid, pid as u64);
    assert!(
        report.total("threads alive") >= 4,
        "four workers were running: {}",
        report.totals
    );
    assert!(!report.rows.is_empty(), "the workers' classes are in use");

    // Closing stdin tells it to stop; it must finish normally.
    drop(child.stdin.take());
    let status = wait_with_deadline(&mut child, "stats_signal");
    let stderr = err.join().unwrap();
    assert!(
        status.success(),
        "stats_signal after the signal: {status}; stderr:\n{stderr}"
    );
    assert_eq!(stderr, "", "the reports went to the file");
    let after = lines
        .recv_timeout(Duration::from_secs(5))
        .unwrap_or_default();
    assert!(
        after.starts_with("stopped after "),
        "the program's last words: {after:?}"
    );

    // The signal's report and the one at exit.
    let text = std::fs::read_to_string(&file).unwrap();
    let reports = text_reports(&text);
    assert_eq!(
        reports.len(),
        2,
        "one report by signal, one at exit:\n{text}"
    );
    assert_eq!(
        reports[1].total("threads alive"),
        1,
        "only main is left at exit: {}",
        reports[1].totals
    );
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Counters against a full walk, under the preload

#[test]
fn counters_agree_with_a_full_walk_after_a_concurrent_workload_under_preload() {
    let exe = common::compile_c("stats_walk", &["-fno-builtin"]);
    // A few runs: interleavings differ from one to the next.
    for round in 0..3 {
        let ran = run(&exe, &[], &[], true);
        assert_ne!(
            ran.status.code(),
            Some(77),
            "slubmalloc_check_stats is not exported by the preload library:\n{}",
            ran.stderr
        );
        assert!(
            ran.status.success(),
            "round {round}: counters and walk disagree ({}):\n{}",
            ran.status,
            ran.stderr
        );
        assert_eq!(ran.stderr, "", "round {round}");
    }
}
