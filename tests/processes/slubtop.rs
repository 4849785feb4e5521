//! slubtop (the `slubtop/` package) reading running processes from outside:
//! a C program under the preload and a Rust program with
//! `#[global_allocator]`, each stopped at a known point after writing its
//! own report, read field for field the same (a stripped executable too);
//! a program whose threads come
//! and go all the time, read 200 times, gives snapshots that all hold the
//! report's invariants while its own results stay what they are unwatched;
//! and each error (not slubmalloc, no permission, no such process or one
//! that exits while watched, another layout version, a registry that never
//! stops changing or loops) says so and fails.
//!
//! Run: `cargo test --release --test processes slubtop`.

use crate::common;
use crate::common::parse_json_report;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// No child may run longer than this.
const DEADLINE: Duration = Duration::from_secs(60);

/// Builds a package's binary or an example into target/preload, beside the
/// preload library.
fn build(args: &[&str], what: &str) -> PathBuf {
    common::cargo_build("preload", args, what)
}

/// The slubtop executable.
fn slubtop() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| build(&["-p", "slubtop", "--bin", "slubtop"], "slubtop").join("slubtop"))
        .clone()
}

/// tests/programs/stats_then_wait.rs, slubmalloc as its global allocator.
fn rust_target() -> PathBuf {
    common::rust_program("stats_then_wait")
}

fn c_target() -> PathBuf {
    common::compile_c("slubtop_target", &["-fno-builtin"])
}

/// Runs slubtop with `args`, failing the test if it hangs.
fn run_slubtop(args: &[String]) -> Output {
    let mut cmd = Command::new(slubtop());
    cmd.args(args);
    common::run_with_deadline(cmd, DEADLINE)
}

/// A running program that waits on its stdin; its stdout and stderr lines
/// arrive on channels. Closing stdin (dropping it) lets it finish.
struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

fn lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Running {
    /// Starts `exe args` (with the preload when `preload`) and waits for
    /// its "ready" line; returns the stdout lines before it as well.
    fn start(
        exe: &Path,
        args: &[&str],
        preload: bool,
        env: &[(&str, &str)],
    ) -> (Running, Vec<String>) {
        let mut cmd = common::clean_command(exe, args, env, preload);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", exe.display()));
        let stdin = child.stdin.take();
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        let mut r = Running {
            child,
            stdin,
            stdout,
            stderr,
        };
        let mut before = Vec::new();
        loop {
            let line = r.next_line(false, "ready");
            if line == "ready" {
                return (r, before);
            }
            before.push(line);
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next line on stderr (or stdout), failing after the deadline.
    fn next_line(&mut self, stderr: bool, waiting_for: &str) -> String {
        let rx = if stderr { &self.stderr } else { &self.stdout };
        match rx.recv_timeout(DEADLINE) {
            Ok(line) => line,
            Err(_) => {
                let _ = self.child.kill();
                let rest: Vec<String> = self.stderr.try_iter().collect();
                panic!("no {waiting_for:?} from the program; stderr: {rest:?}");
            }
        }
    }

    /// Closes stdin and waits for the end: exit status and stdout's lines.
    fn finish(mut self) -> (std::process::ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!("the program did not finish after its stdin closed");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (status, self.stdout.iter().collect())
    }
}

/// The resident set of `pid` from /proc/PID/statm, as the report computes it.
fn resident_bytes(pid: i32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    statm
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 4096
}

/// slubtop's reading of `pid` equals `own` (the program's own report)
/// field for field. The one field the report takes from a system call
/// rather than counters, `resident_bytes`, is matched differently: slubtop
/// reads `/proc/PID/statm` as the program reads `/proc/self/statm`, so its
/// value must equal what this test reads there after it (the program is
/// blocked on its stdin), and be within 16 pages of the program's own,
/// which it read before writing its report (writing it touches a page).
fn assert_slubtop_reads(pid: i32, own: &str) {
    let out = run_slubtop(&["--once".into(), "--json".into(), pid.to_string()]);
    assert!(
        out.status.success(),
        "slubtop failed: {}",
        common::stderr(&out)
    );
    assert_eq!(
        common::stderr(&out),
        "",
        "slubtop said more than the report"
    );
    let read = common::stdout(&out);
    let (own_caches, mut own_totals) = parse_json_report(own);
    let (caches, mut totals) = parse_json_report(read.trim_end());
    assert_eq!(
        caches, own_caches,
        "slubtop's classes differ from the program's own report"
    );
    let (theirs, ours) = (
        own_totals.remove("resident_bytes").unwrap(),
        totals.remove("resident_bytes").unwrap(),
    );
    assert_eq!(
        totals, own_totals,
        "slubtop's totals differ from the program's own report"
    );
    assert_eq!(
        common::parse_json_cpus(read.trim_end()),
        common::parse_json_cpus(own),
        "slubtop's CPU rows differ from the program's own report"
    );
    assert_eq!(
        ours,
        resident_bytes(pid),
        "resident bytes are /proc/PID/statm's"
    );
    assert!(
        ours.abs_diff(theirs) <= 16 * 4096,
        "resident {ours} B read, {theirs} B reported"
    );
    assert!(
        !caches.is_empty() && totals["threads_alive"] >= 2 && totals["threads_exited"] >= 1,
        "{read}"
    );
    assert!(totals["large_blocks"] >= 2, "{read}");
}

/// Both kinds of program: no report between theirs and ours moves a counter.
const QUIET: [(&str, &str); 1] = [("SLUBMALLOC_BACKGROUND_PURGE", "0")];

#[test]
fn slubtop_reads_what_a_preloaded_c_program_reports_of_itself() {
    let env = [
        QUIET[0],
        ("SLUBMALLOC_STATS", "json"),
        ("SLUBMALLOC_STATS_SIGNAL", "USR2"),
    ];
    let (mut running, _) = Running::start(&c_target(), &["hold"], true, &env);
    let own = running.next_line(true, "the program's JSON report");
    assert_slubtop_reads(running.pid(), &own);
    let (status, _) = running.finish();
    assert!(status.success(), "the C program failed: {status}");
}

#[test]
fn slubtop_reads_what_a_rust_program_reports_of_itself() {
    let (running, before) = Running::start(&rust_target(), &[], false, &QUIET);
    let own = before
        .last()
        .expect("the program's JSON report before \"ready\"")
        .clone();
    assert_slubtop_reads(running.pid(), &own);
    let (status, _) = running.finish();
    assert!(status.success(), "the Rust program failed: {status}");
}

/// A stripped executable has no symbol table, but keeps its sections:
/// slubtop finds the anchor by its section's name.
#[test]
fn slubtop_reads_a_stripped_rust_program_by_the_anchor_section() {
    let dir = std::env::temp_dir().join(format!("slubtop-stripped-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("stats_then_wait");
    let out = Command::new("strip")
        .arg("-o")
        .arg(&exe)
        .arg(rust_target())
        .output()
        .expect("run strip (binutils, which ci/deps.sh's gcc brings)");
    assert!(out.status.success(), "strip: {}", common::stderr(&out));
    let symbols = Command::new("nm").arg(&exe).output().unwrap();
    assert!(
        !common::stdout(&symbols).contains("slubmalloc_anchor"),
        "stripped"
    );
    let (running, before) = Running::start(&exe, &[], false, &QUIET);
    let own = before.last().expect("the program's JSON report").clone();
    assert_slubtop_reads(running.pid(), &own);
    let (status, _) = running.finish();
    assert!(status.success(), "the stripped program failed: {status}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The churning program's rounds, from its output: every round's checksum.
fn round_checksums(lines: &[String]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("round "))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn slubtop_snapshots_of_a_churning_program_all_hold_the_invariants() {
    // Unwatched: stdin closed at once, a round or a few.
    let (alone, _) = Running::start(&c_target(), &["churn", "3"], true, &[]);
    let (status, out) = alone.finish();
    assert!(status.success(), "unwatched churn failed: {status}");
    let expected = round_checksums(&out)[0];

    let (watched, _) = Running::start(&c_target(), &["churn", "3"], true, &[]);
    let pid = watched.pid();
    let mut previous: Option<BTreeMap<u64, BTreeMap<String, u64>>> = None;
    let (mut exited_before, mut most_reads) = (0, 0);
    for _ in 0..200 {
        let out = run_slubtop(&[
            "--once".into(),
            "--json".into(),
            "--verbose".into(),
            pid.to_string(),
        ]);
        assert!(
            out.status.success(),
            "slubtop failed: {}",
            common::stderr(&out)
        );
        // Panics unless every invariant of the report holds.
        let (caches, totals) = parse_json_report(common::stdout(&out).trim_end());
        // Events only grow, threads only exit.
        assert!(totals["threads_exited"] >= exited_before);
        exited_before = totals["threads_exited"];
        if let Some(prev) = &previous {
            for (size, c) in prev {
                let now = &caches
                    .get(size)
                    .unwrap_or_else(|| panic!("class {size} B vanished"));
                for f in [
                    "alloc_sheaf",
                    "free_sheaf",
                    "sheaf_flushed",
                    "alloc_fast",
                    "alloc_slow",
                    "free_fast",
                    "free_slow",
                    "free_remote",
                    "slabs_allocated",
                ] {
                    assert!(
                        now[f] >= c[f],
                        "{size} B: {f} went from {} to {}",
                        c[f],
                        now[f]
                    );
                }
            }
        }
        previous = Some(caches);
        let reads: u32 = common::stderr(&out)
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .expect("--verbose says how many reads");
        most_reads = most_reads.max(reads);
    }
    let (status, out) = watched.finish();
    assert!(
        status.success(),
        "watched churn failed (a block lost its bytes?): {status}"
    );
    let rounds = round_checksums(&out);
    assert!(rounds.len() > 1, "the program churned while it was read");
    assert!(
        rounds.iter().all(|&c| c == expected),
        "watched results {rounds:?}, unwatched {expected}"
    );
    assert!(exited_before > 0);
    eprintln!(
        "slubtop: 200 snapshots of {} rounds of churn, at most {most_reads} reads each",
        rounds.len()
    );
}

/// slubtop's stderr after a failing run, which must be one "slubtop: " line.
fn failure(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "slubtop succeeded: {}",
        common::stdout(out)
    );
    let err = common::stderr(out);
    assert!(err.starts_with("slubtop: "), "{err}");
    err
}

#[test]
fn slubtop_says_a_process_does_not_use_slubmalloc() {
    // The churning program, without the preload: glibc's malloc.
    let (running, _) = Running::start(&c_target(), &["churn", "1"], false, &[]);
    let pid = running.pid();
    let err = failure(&run_slubtop(&["--once".into(), pid.to_string()]));
    assert!(
        err.contains(&format!("PID {pid} does not use slubmalloc")),
        "{err}"
    );
    running.finish();
}

#[test]
fn slubtop_says_when_slubmalloc_is_loaded_but_has_served_no_allocation() {
    // The library loaded by dlopen into a program that runs on glibc's
    // malloc: the anchor is there, and nothing ever reaches the allocator,
    // as under a preloaded library that exports no `malloc`.
    let lib = common::preload_lib();
    let (running, _) = Running::start(&c_target(), &["loaded", lib.to_str().unwrap()], false, &[]);
    let pid = running.pid();
    let note = format!(
        "PID {pid} has slubmalloc loaded ({}) but it has served no allocation",
        lib.display()
    );
    let once = run_slubtop(&["--once".into(), pid.to_string()]);
    let err = common::stderr(&once);
    assert!(once.status.success(), "{err}");
    assert!(err.starts_with(&format!("slubtop: {note}")), "{err}");
    assert!(err.contains("exports no `malloc`"), "{err}");
    let live = run_slubtop(&["--count".into(), "1".into(), pid.to_string()]);
    let screen = common::stdout(&live);
    assert!(live.status.success(), "{}", common::stderr(&live));
    // Under the table, which lists no class.
    let table: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.contains("SIZE"))
        .filter(|l| !l.is_empty())
        .collect();
    assert!(table.len() == 2 && table[1].starts_with(&note), "{screen}");
    running.finish();
}

#[test]
fn slubtop_says_a_process_is_gone_or_has_exited() {
    // Exited and not yet reaped (a zombie, whose maps are empty), then reaped.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    let state = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let start = Instant::now();
    while !state().contains(") Z") {
        assert!(start.elapsed() < DEADLINE, "`true` did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    let err = failure(&run_slubtop(&["--once".into(), pid.to_string()]));
    assert!(
        err.contains(&format!("PID {pid} does not exist (it has exited)")),
        "zombie: {err}"
    );
    gone.wait().unwrap();
    let err = failure(&run_slubtop(&["--once".into(), pid.to_string()]));
    assert!(err.contains(&format!("PID {pid} does not exist")), "{err}");

    // Watched live, the program exits: slubtop says so and fails.
    let (running, _) = Running::start(&c_target(), &["churn", "2"], true, &[]);
    let pid = running.pid();
    let mut live = Command::new(slubtop());
    live.args(["--interval", "0.05", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watcher = live.spawn().unwrap();
    let screens = lines(watcher.stdout.take().unwrap());
    let title = screens.recv_timeout(DEADLINE).expect("a first screen");
    assert!(
        title.starts_with(&format!("slubtop - PID {pid} (slubtop_target)")),
        "{title}"
    );
    let (status, _) = running.finish();
    assert!(status.success());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = watcher.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "slubtop kept watching an exited process"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    watcher
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        !status.success() && err.contains(&format!("PID {pid} does not exist (it has exited)")),
        "{status} {err}"
    );
}

/// tests/c/slubtop_crafted_anchor.c, in `mode`: an anchor slubtop must
/// read (still) or refuse.
fn crafted(mode: &str) -> (Running, i32) {
    let exe = common::compile_c("slubtop_crafted_anchor", &[]);
    let (running, _) = Running::start(&exe, &[mode], false, &[]);
    let pid = running.pid();
    (running, pid)
}

#[test]
fn slubtop_names_both_layout_versions() {
    let (running, pid) = crafted("v999");
    let err = failure(&run_slubtop(&["--once".into(), pid.to_string()]));
    assert!(
        err.contains(&format!(
            "PID {pid} uses a slubmalloc whose anchor has layout version 999"
        )),
        "{err}"
    );
    assert!(err.contains("this slubtop reads version 5"), "{err}");
    assert!(
        err.contains("slubtop_crafted_anchor"),
        "names the file: {err}"
    );
    running.finish();
}

/// The crafted anchor over an empty registry reads as an empty snapshot;
/// changed without end, it never reads as it is mid-change; with the
/// generation odd for good (a registry change that never ends) or
/// a live list that leads back to itself, slubtop reads again and again,
/// then gives up with what it last met, instead of printing what it read or
/// walking the loop for ever.
#[test]
fn slubtop_refuses_a_registry_that_is_changing_or_loops() {
    let (running, pid) = crafted("still");
    let out = run_slubtop(&["--once".into(), "--json".into(), pid.to_string()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let (caches, totals) = parse_json_report(common::stdout(&out).trim_end());
    assert!(
        caches.is_empty() && totals["threads_alive"] == 0,
        "{totals:?}"
    );
    running.finish();

    // A registry that a thread changes without end, mid-change most of the
    // time, where threads_alive is 7 only mid-change: no snapshot slubtop
    // gives holds it (each read either waits for a still generation or
    // gives up).
    let (running, pid) = crafted("racing");
    let mut given = 0;
    for _ in 0..100 {
        let out = run_slubtop(&["--once".into(), "--json".into(), pid.to_string()]);
        if out.status.success() {
            let (_, totals) = parse_json_report(common::stdout(&out).trim_end());
            assert_eq!(totals["threads_alive"], 0, "a snapshot taken mid-change");
            given += 1;
        } else {
            assert!(
                common::stderr(&out).contains("no consistent snapshot"),
                "{}",
                common::stderr(&out)
            );
        }
    }
    eprintln!("slubtop: {given} of 100 snapshots of a registry that never stops changing");
    running.finish();

    for (mode, last) in [
        ("odd", "a thread was starting or exiting"),
        ("loop", "the heap list looped"),
    ] {
        let (running, pid) = crafted(mode);
        let err = failure(&run_slubtop(&["--once".into(), pid.to_string()]));
        assert!(
            err.contains(&format!(
                "PID {pid}: no consistent snapshot in 1000 tries (last: {last})"
            )),
            "{mode}: {err}"
        );
        running.finish();
    }
}

#[test]
fn slubtop_says_when_it_has_no_permission() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs the tests as root: this test must run"
        );
        eprintln!("skipped: needs root, to run slubtop as nobody against a process of root's");
        return;
    }
    // A copy nobody can run, outside a checkout it may not be able to enter.
    let dir = std::env::temp_dir().join(format!("slubtop-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("slubtop");
    std::fs::copy(slubtop(), &exe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (running, _) = Running::start(&c_target(), &["churn", "1"], true, &[]);
    let pid = running.pid();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args(["--once", &pid.to_string()]);
    let out = common::run_with_deadline(cmd, DEADLINE);
    let err = failure(&out);
    assert!(
        err.contains(&format!("no permission to read PID {pid}")),
        "{err}"
    );
    assert!(
        err.contains("(uid 0)") && err.contains("(uid 65534)"),
        "names both users: {err}"
    );
    assert!(
        err.contains("ptrace_scope") && err.contains("CAP_SYS_PTRACE"),
        "says what to do: {err}"
    );
    running.finish();
    std::fs::remove_dir_all(&dir).unwrap();
}
