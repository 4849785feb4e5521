//! The commands that build the preload library, run as a user runs them at
//! the repository root: `cargo build --release` (the README's), with
//! `--workspace`, and with `--features override`. Each must leave a
//! `target/release/libslubmalloc.so` that exports the C malloc family and
//! serves a program it is preloaded into (`tests/c/stats_hold.c`: its
//! statistics report counts the blocks the program holds). The preload
//! package has no features and sets its own cfg (`preload/build.rs`), so no
//! selection of packages or features can make it a library that exports
//! nothing.
//!
//! The builds go to a target directory of their own (`target/build_commands`:
//! a build rewrites the library it leaves, which the other tests preload
//! from `target/preload`). `--workspace` builds the benchmarks and their
//! peers too (mimalloc, jemalloc: minutes in a fresh target directory on
//! two cores), so it runs only with `BUILD_COMMANDS_WORKSPACE=1`, which
//! `.ci/run` sets.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
/// Blocks `stats_hold` keeps, and their size.
const HELD: u64 = 300;
const SIZE: u64 = 700;

/// Runs `cargo build --release ARGS` at the repository root into
/// `target/build_commands`; returns the library it left.
fn build(args: &[&str], command: &str) -> PathBuf {
    common::cargo_build("build_commands", args, command).join("libslubmalloc.so")
}

/// The symbols `lib` defines in its dynamic symbol table (`nm -D`).
fn exported(lib: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("run nm (binutils; ci/deps.sh installs it): {e}"));
    assert!(out.status.success(), "nm -D {}: {out:?}", lib.display());
    common::stdout(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_owned))
        .collect()
}

/// `lib` exports the C malloc family, and a program it is preloaded into
/// runs on it: its report counts the blocks the program holds.
fn assert_serves(lib: &Path, command: &str) {
    let symbols = exported(lib);
    for name in ["malloc", "free", "calloc", "realloc", "malloc_usable_size"] {
        assert!(
            symbols.iter().any(|s| s == name),
            "`{command}` left {} without `{name}` (nm -D)",
            lib.display()
        );
    }
    let exe = common::compile_c("stats_hold", &["-fno-builtin"]);
    let held = HELD.to_string();
    let size = SIZE.to_string();
    let mut cmd = common::clean_command(
        &exe,
        &[&held, &size, "quiet"],
        &[("SLUBMALLOC_STATS", "json")],
        false,
    );
    cmd.env("LD_PRELOAD", lib);
    let o = common::run_with_deadline(cmd, LIMIT);
    assert!(
        o.status.success(),
        "stats_hold under `{command}`'s library\n{}",
        common::describe(&o)
    );
    let err = common::stderr(&o);
    let report = err
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("`{command}`'s library, preloaded, printed no report\n{err}"));
    let (caches, _) = common::parse_json_report(report);
    let class = common::class_of(SIZE as usize);
    let in_use = caches.get(&class).map_or(0, |c| c["objects_in_use"]);
    assert!(
        in_use >= HELD,
        "`{command}`'s library counts {in_use} blocks of {class} B in use, the program holds {HELD}"
    );
}

/// Set to 1 to run `cargo build --release --workspace` too.
const WORKSPACE_VAR: &str = "BUILD_COMMANDS_WORKSPACE";

#[test]
fn every_build_command_leaves_a_preload_library_that_serves_a_program() {
    let mut commands = vec![&[][..], &["--features", "override"]];
    if std::env::var(WORKSPACE_VAR).is_ok_and(|v| v == "1") {
        commands.push(&["--workspace"]);
    } else {
        println!("build_commands: `cargo build --release --workspace` left out ({WORKSPACE_VAR}=1 runs it)");
    }
    for args in commands {
        let command = ["cargo build --release"]
            .into_iter()
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        assert_serves(&build(args, &command), &command);
    }
}
