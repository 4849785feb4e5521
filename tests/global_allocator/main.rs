//! Tests in which slubmalloc is the process's `#[global_allocator]`: every
//! allocation of the test harness and of the tests goes through it.
//!
//! Each test runs alone in a fresh process of this binary
//! ([`fresh_process`]): most of them read process-wide state (statistics
//! that must count exactly the blocks a test holds, a walk that must agree
//! with the counters, the resident set, the large-block cache, where a
//! thread's slabs go at exit) that another test, running beside it or
//! before it in the same process, would disturb. They used to be five
//! binaries; one binary that starts itself once per test compiles and links
//! once and isolates each test better than a binary per file did.

use std::process::Command;
use std::sync::Mutex;

/// slubmalloc, with every call counted for the operation model's exact
/// checks (`random_ops`); it changes nothing the other tests see.
#[global_allocator]
static GLOBAL: ops_model::Counted = ops_model::Counted;

/// The operation model the fuzz targets share (`fuzz/fuzz_targets/`).
#[path = "../ops_model/mod.rs"]
mod ops_model;

mod alloc_basic;
mod anchor;
mod errno_kept;
mod heap_profile;
mod layout_check;
mod medium_blocks;
mod memory_lifecycle;
mod percpu;
mod random_ops;
mod shared_slabs;
mod sheaves;
mod stats_exact;
mod thread_holdings;
mod threads;

/// Set in the child process to the name of the one test it runs.
const CHILD_VAR: &str = "GLOBAL_ALLOCATOR_TEST_CHILD";

/// Whether this process runs in debug mode (`SLUBMALLOC_DEBUG=1`).
/// A fixed sequence of pseudo-random numbers (xorshift64), the same in
/// every run: the tests that replace blocks at random draw from it.
fn xorshift() -> impl FnMut() -> u64 {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

fn debug_mode() -> bool {
    std::env::var_os("SLUBMALLOC_DEBUG").is_some_and(|v| v == "1")
}

/// Threads with a heap (a small block each), `per_cpu` per CPU the process
/// may run on, parked until dropped: a crowded program
/// (`cpu_sheaf::crowding` counts 4 per CPU as not crowded).
struct Crowd {
    release: std::sync::Arc<std::sync::Barrier>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Crowd {
    fn of(per_cpu: usize) -> Crowd {
        // SAFETY: a zeroed cpu_set_t is an empty set, which the kernel fills.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid set of its size.
        let r = unsafe { libc::sched_getaffinity(0, size_of_val(&set), &mut set) };
        assert_eq!(r, 0, "sched_getaffinity");
        // SAFETY: as above.
        let n = per_cpu * unsafe { libc::CPU_COUNT(&set) } as usize;
        let release = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
        let started = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
        let threads = (0..n)
            .map(|_| {
                let (release, started) = (release.clone(), started.clone());
                std::thread::spawn(move || {
                    let held = std::hint::black_box(Box::new(0u64));
                    started.wait();
                    release.wait();
                    drop(held);
                })
            })
            .collect();
        started.wait();
        Crowd { release, threads }
    }

    fn len(&self) -> usize {
        self.threads.len()
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.release.wait();
        self.threads.drain(..).for_each(|t| t.join().unwrap());
    }
}

/// Called first by every test. In the process the harness started, it runs
/// the calling test again, alone, in a new process of this binary
/// (`--exact NAME`), fails if that fails, and returns None: the caller
/// returns. In that new process it returns Some: the caller runs its body.
/// The children run one at a time, so timing-sensitive tests (purge delays)
/// do not compete with each other for the CPU.
fn fresh_process() -> Option<()> {
    fresh_process_with(&[])
}

/// `fresh_process` without the per-CPU sheaves (`SLUBMALLOC_PERCPU=0`):
/// for the tests of how the threads' own sheaves size themselves and where
/// a full one's blocks go (the barn, their slabs), which in per-CPU mode
/// stay small and hand their overflow to their CPU's sheaf (`percpu`).
fn fresh_process_per_thread_sheaves() -> Option<()> {
    fresh_process_with(&[("SLUBMALLOC_PERCPU", "0")])
}

/// `fresh_process`, with `env` added to the new process's environment.
fn fresh_process_with(env: &[(&str, &str)]) -> Option<()> {
    // libtest runs each test on a thread named after the test.
    let thread = std::thread::current();
    let name = thread
        .name()
        .expect("a test thread is named after its test");
    if let Ok(child) = std::env::var(CHILD_VAR) {
        assert_eq!(
            child, name,
            "the child runs only the test it was started for"
        );
        return Some(());
    }
    run_in_fresh_process(name, env);
    None
}

/// Runs the test `name` alone in a new process of this binary, with `env`
/// added to its environment (its `fresh_process` returns Some there), and
/// fails if it fails. A test runs another's body in another mode this way
/// (`SLUBMALLOC_DEBUG=1`, the heap profile).
fn run_in_fresh_process(name: &str, env: &[(&str, &str)]) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    // A test that failed poisoned the lock; the next one still runs.
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .envs(env.iter().copied())
        .output()
        .expect("start the test binary again");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name} in its own process (env {env:?}): {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    print!("{stdout}");
}
