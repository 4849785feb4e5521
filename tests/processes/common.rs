//! Shared by the tests that run C programs under `LD_PRELOAD`: builds the
//! preload library once (in its own target directory, so it never waits on
//! the lock of the `cargo test` that runs us) and the Rust programs of
//! tests/programs, compiles C sources with `cc`, and runs programs with the
//! library preloaded.
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn out_dir() -> PathBuf {
    root().join("target").join("preload")
}

/// `libslubmalloc.so` built with `--release --features override`.
pub fn preload_lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "--features",
                "override",
                "--lib",
                "--target-dir",
            ])
            .arg(out_dir())
            .current_dir(root())
            .status()
            .expect("run cargo build for the preload library");
        assert!(status.success(), "building the preload library failed");
        out_dir().join("release").join("libslubmalloc.so")
    })
    .clone()
}

/// The Rust program `name` of tests/programs/ (slubmalloc as its global
/// allocator, without the `override` feature), built once per test process
/// in target/preload beside the preload library (clear of the lock of the
/// `cargo test` running us).
pub fn rust_program(name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let exe = out_dir().join("release").join(name);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.iter().any(|n| n == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "-p",
                "slubmalloc-programs",
                "--bin",
                name,
            ])
            .arg("--target-dir")
            .arg(out_dir())
            .current_dir(root())
            .status()
            .expect("run cargo build for a program of tests/programs");
        assert!(status.success(), "building tests/programs/{name}.rs failed");
        built.push(name.to_string());
    }
    exe
}

/// Compiles `tests/c/<name>.c` (plus `extra` flags) into an executable.
pub fn compile_c(name: &str, extra: &[&str]) -> PathBuf {
    compile("cc", &format!("{name}.c"), name, extra)
}

/// Compiles `tests/c/<name>.cpp` with g++.
pub fn compile_cxx(name: &str) -> PathBuf {
    compile("g++", &format!("{name}.cpp"), name, &[])
}

/// Compiles a test program once per test process: tests run in parallel,
/// and one compiling a program while another runs it fails (ETXTBSY).
fn compile(compiler: &str, source: &str, name: &str, extra: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{source} {}", extra.join(" "));
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let exe = compile_now(compiler, source, name, extra);
    built.push((key, exe.clone()));
    exe
}

fn compile_now(compiler: &str, source: &str, name: &str, extra: &[&str]) -> PathBuf {
    let src = root().join("tests").join("c").join(source);
    let dir = out_dir().join("c");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(compiler)
        .args(["-O1", "-g", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler} (ci/deps.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{compiler} {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `program args` with the library preloaded and `env` set.
pub fn run_preloaded(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).env("LD_PRELOAD", preload_lib());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run preloaded program")
}

/// Runs `program args` without the preload, for comparison.
pub fn run_plain(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run program")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Runs `cmd`, failing the test if it is still running after `limit`: the
/// whole process group is killed, so a hang fails instead of blocking.
pub fn run_with_deadline(mut cmd: Command, limit: Duration) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let what = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let pid = child.id() as i32;
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let kill_group = || {
        // SAFETY: kill(2) with a negative pid signals our child's process group.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    };
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if start.elapsed() > limit {
            kill_group();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}: killed (hang)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // A grandchild that outlives the child would hold the pipes open.
    while !(out_reader.is_finished() && err_reader.is_finished()) {
        if start.elapsed() > limit {
            kill_group();
            panic!("{what}: a process it started is still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

/// Runs `program args` with the library preloaded (or on glibc's malloc when
/// `preloaded` is false) and `env` set, failing the test after `limit`.
pub fn run_guarded(
    program: &Path,
    args: &[&str],
    preloaded: bool,
    env: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if preloaded {
        cmd.env("LD_PRELOAD", preload_lib());
    } else {
        cmd.env_remove("LD_PRELOAD");
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_with_deadline(cmd, limit)
}
