//! The sampled heap profile under the preload: `tests/c/prof_sites.c` keeps
//! known live bytes at two call sites, and `google-pprof --text` must
//! attribute them to those functions within sampling error; across fork,
//! threads that exit with sampled blocks live, the statistics signal, large
//! blocks and realloc, debug mode; bad values warn once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::{self, compile_c, run_preloaded, stderr};

/// Mean bytes between samples in these tests. `two`'s site_a (60,000 x
/// 64 B) then gets about 940 samples, a relative standard error of 3.3%;
/// site_b (320 x 4 KiB, each sampled with probability 0.63) 4.3%. The
/// tolerances below are 3.5 to 4.5 standard errors.
const RATE: &str = "4096";

/// `tests/c/prof_sites.c`, compiled once: tests run in parallel, and one
/// must not run the program while another writes it (ETXTBSY).
fn sites_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| compile_c("prof_sites", &["-fno-builtin"]))
        .clone()
}

fn scratch(test: &str) -> PathBuf {
    let dir = common::root()
        .join("target")
        .join("heap-profile-tests")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn prof_env<'a>(file: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut env = vec![
        ("SLUBMALLOC_PROF", "1"),
        ("SLUBMALLOC_PROF_RATE", RATE),
        ("SLUBMALLOC_PROF_FILE", file),
    ];
    env.extend_from_slice(extra);
    env
}

/// Bytes per function (flat: allocated there, not in callees), from
/// `google-pprof --text --show_bytes` (in-use space unless `extra` says).
pub struct Flat {
    total: f64,
    bytes: HashMap<String, f64>,
}

impl Flat {
    fn bytes(&self, function: &str) -> f64 {
        self.bytes.get(function).copied().unwrap_or(0.0)
    }
}

pub fn pprof_text(program: &Path, profile: &Path, extra: &[&str]) -> Flat {
    let out = Command::new("google-pprof")
        .args(["--text", "--show_bytes"])
        .args(extra)
        .arg(program)
        .arg(profile)
        .output()
        .expect("run google-pprof (ci/deps.sh installs google-perftools)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "google-pprof failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut flat = Flat {
        total: 0.0,
        bytes: HashMap::new(),
    };
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("Total: ") {
            flat.total = t.trim_end_matches(" B").parse().unwrap();
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[1].ends_with('%') {
            let bytes: f64 = f[0].parse().unwrap();
            *flat.bytes.entry(f[5..].join(" ")).or_default() += bytes;
        }
    }
    assert!(flat.total >= flat.bytes.values().sum::<f64>() - 1.0);
    flat
}

fn assert_near(what: &str, got: f64, want: f64, tolerance: f64) {
    assert!(
        (got / want - 1.0).abs() <= tolerance,
        "{what}: {got:.0} against {want:.0} (more than {:.0}% off)",
        tolerance * 100.0
    );
}

fn run_sites(dir: &Path, mode: &str, extra: &[(&str, &str)]) -> PathBuf {
    let exe = sites_exe();
    let file = dir.join("p.%p.heap");
    let file = file.to_str().unwrap();
    let out = run_preloaded(&exe, &[mode], &prof_env(file, extra));
    assert!(out.status.success(), "prof_sites {mode}: {}", stderr(&out));
    exe
}

/// Runs `mode` and reads its one profile (written at exit).
fn only_profile(test: &str, mode: &str, extra: &[(&str, &str)]) -> Flat {
    let dir = scratch(test);
    let exe = run_sites(&dir, mode, extra);
    let files = profiles(&dir);
    assert_eq!(files.len(), 1, "one profile, at exit: {files:?}");
    pprof_text(&exe, &files[0], &[])
}

fn profiles(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn pprof_attributes_live_bytes_to_the_two_call_sites() {
    let dir = scratch("two");
    let exe = run_sites(&dir, "two", &[]);
    let files = profiles(&dir);
    assert_eq!(files.len(), 1, "one profile, at exit: {files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.starts_with("heap profile: "), "{text:.200}");
    assert!(text.contains("\nMAPPED_LIBRARIES:\n"));
    let flat = pprof_text(&exe, &files[0], &[]);
    assert_near("site_a", flat.bytes("site_a"), 3_840_000.0, 0.15);
    assert_near("site_b", flat.bytes("site_b"), 1_310_720.0, 0.15);
    assert_near(
        "site_a : site_b",
        flat.bytes("site_a") / flat.bytes("site_b"),
        3_840_000.0 / 1_310_720.0,
        0.2,
    );
}

#[test]
fn pprof_alloc_space_counts_freed_blocks_too() {
    let dir = scratch("alloc-space");
    let exe = run_sites(&dir, "two", &[]);
    let flat = pprof_text(&exe, &profiles(&dir)[0], &["--alloc_space"]);
    // 20,320 blocks of 4 KiB allocated at site_b, 20,000 of them freed.
    assert_near(
        "site_b allocated",
        flat.bytes("site_b"),
        20_320.0 * 4096.0,
        0.05,
    );
    assert_near("site_a allocated", flat.bytes("site_a"), 3_840_000.0, 0.15);
}

#[test]
fn forked_child_writes_its_own_profile() {
    let dir = scratch("fork");
    let exe = run_sites(&dir, "fork", &[]);
    let files = profiles(&dir);
    assert_eq!(files.len(), 2, "parent's and child's profiles: {files:?}");
    let flats: Vec<Flat> = files.iter().map(|f| pprof_text(&exe, f, &[])).collect();
    let (child, parent) = if flats[0].bytes("site_b") > 0.0 {
        (&flats[0], &flats[1])
    } else {
        (&flats[1], &flats[0])
    };
    assert_eq!(
        parent.bytes("site_b"),
        0.0,
        "the parent never kept site_b blocks"
    );
    assert_near("parent site_a", parent.bytes("site_a"), 960_000.0, 0.25);
    // The child inherited the parent's samples and added its own.
    assert_near("child site_a", child.bytes("site_a"), 960_000.0, 0.25);
    assert_near("child site_b", child.bytes("site_b"), 2_949_120.0, 0.15);
}

#[test]
fn threads_exit_with_sampled_blocks_live() {
    let flat = only_profile("threads", "threads", &[]);
    // Half of the exited threads' blocks were freed by main.
    assert_near("site_a", flat.bytes("site_a"), 1_920_000.0, 0.18);
    assert_near("site_b", flat.bytes("site_b"), 1_310_720.0, 0.15);
}

/// The profile of case `case` (`site_a` keeps 40 blocks of `bytes`, `grow`
/// reallocs 20 of `site_b`'s to that size) names each site's bytes.
fn blocks_and_realloc_are_profiled(case: &str, bytes: f64) {
    let flat = only_profile(case, case, &[]);
    assert_near("site_a", flat.bytes("site_a"), 40.0 * bytes, 0.06);
    assert_near("grow", flat.bytes("grow"), 20.0 * bytes, 0.06);
    assert_eq!(
        flat.bytes("site_b"),
        0.0,
        "realloc moved site_b's bytes to grow, free took the rest"
    );
}

#[test]
fn large_blocks_and_realloc_are_profiled() {
    blocks_and_realloc_are_profiled("large", 1_572_864.0);
}

#[test]
fn medium_blocks_and_realloc_are_profiled() {
    blocks_and_realloc_are_profiled("medium", 98_304.0);
}

#[test]
fn stats_signal_writes_a_profile_while_running() {
    let dir = scratch("signal");
    let exe = sites_exe();
    let file = dir.join("p.%n.heap");
    let env = prof_env(
        file.to_str().unwrap(),
        &[("SLUBMALLOC_STATS_SIGNAL", "USR2")],
    );
    let out = run_preloaded(&exe, &["signal"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let during = pprof_text(&exe, &dir.join("p.0.heap"), &[]);
    let at_exit = pprof_text(&exe, &dir.join("p.1.heap"), &[]);
    assert_near(
        "site_a at the signal",
        during.bytes("site_a"),
        3_840_000.0,
        0.12,
    );
    assert_eq!(at_exit.bytes("site_a"), 0.0, "site_a's blocks were freed");
    assert_near("site_b at exit", at_exit.bytes("site_b"), 1_310_720.0, 0.15);
}

#[test]
fn profile_and_debug_mode_work_together() {
    let flat = only_profile("debug", "two", &[("SLUBMALLOC_DEBUG", "1")]);
    assert_near("site_a", flat.bytes("site_a"), 3_840_000.0, 0.15);
    assert_near("site_b", flat.bytes("site_b"), 1_310_720.0, 0.15);
}

#[test]
fn statistics_stay_exact_with_profiling_on() {
    let exe = compile_c("stats_walk", &["-fno-builtin"]);
    let out = run_preloaded(
        &exe,
        &[],
        &[
            ("SLUBMALLOC_PROF", "1"),
            ("SLUBMALLOC_PROF_RATE", "512"),
            ("SLUBMALLOC_PROF_FILE", "/dev/null"),
        ],
    );
    assert!(out.status.success(), "stats_walk: {}", stderr(&out));
}

#[test]
fn bad_profile_values_warn_once_and_keep_the_default() {
    let dir = scratch("bad-values");
    let exe = sites_exe();
    let out = Command::new(&exe)
        .arg("two")
        .current_dir(&dir)
        .env("LD_PRELOAD", common::preload_lib())
        .env("SLUBMALLOC_PROF", "yes")
        .env("SLUBMALLOC_PROF_RATE", "0")
        .env("SLUBMALLOC_PROF_FILE", "")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = stderr(&out);
    for name in [
        "SLUBMALLOC_PROF ",
        "SLUBMALLOC_PROF_RATE ",
        "SLUBMALLOC_PROF_FILE ",
    ] {
        let warning = format!("slubmalloc: warning: bad value for {name}ignored, default kept");
        assert_eq!(err.matches(&warning).count(), 1, "{name}: {err}");
    }
    assert_eq!(err.lines().count(), 3, "{err}");
    assert!(profiles(&dir).is_empty(), "profiling stayed off");
    let out = run_preloaded(&exe, &["two"], &[("SLUBMALLOC_PROF_RATE", "abc")]);
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
}
