//! `ci/demo.sh`, the README's first command, prints exactly one statistics
//! report, python3's own, also where `python3` on PATH is a wrapper that runs
//! other programs before the interpreter (as pyenv's and some virtualenv
//! shims do): under the preload each of those would print a report too.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use crate::common;

#[test]
fn demo_prints_one_report_when_python3_is_a_wrapper_script() {
    let real = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("run python3 (ci/deps.sh installs it)");
    let real = String::from_utf8(real.stdout).unwrap().trim().to_owned();
    assert!(!real.is_empty(), "python3 did not name its executable");

    let bin = common::root().join("target/preload/tmp-demo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let shim = bin.join("python3");
    // Written to a new name and renamed, so that no reader sees it half done.
    let tmp = bin.join("python3.tmp");
    std::fs::write(
        &tmp,
        format!("#!/bin/sh\nls / >/dev/null\ncat </dev/null\nexec '{real}' \"$@\"\n"),
    )
    .unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &shim).unwrap();

    // The library the demo builds is the one the other tests use
    // (target/preload, clear of the lock of the `cargo test` running us).
    common::preload_lib();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let mut cmd = Command::new(common::root().join("ci/demo.sh"));
    cmd.env("PATH", path)
        .env("CARGO_TARGET_DIR", common::root().join("target/preload"))
        .env_remove("LD_PRELOAD")
        .env_remove("SLUBMALLOC_STATS");
    let out = common::run_with_deadline(cmd, Duration::from_secs(300));
    let (stdout, stderr) = (common::stdout(&out), common::stderr(&out));
    assert!(out.status.success(), "ci/demo.sh failed: {stderr}");
    assert!(
        stdout.contains("python3 under slubmalloc:"),
        "the demo's program did not run: {stdout}"
    );
    assert!(
        stderr.contains(&format!("== running {real} ")),
        "the demo did not run the real interpreter: {stderr}"
    );
    let reports = stderr
        .lines()
        .filter(|l| l.starts_with("slubmalloc statistics (pid "))
        .count();
    assert_eq!(reports, 1, "{reports} statistics reports:\n{stderr}");
}
