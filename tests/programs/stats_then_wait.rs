//! Prints its own statistics as JSON, then waits, allocating nothing more:
//! what `slubtop --once --json PID` must then read from outside, field for
//! field (tests/processes/slubtop.rs builds and runs it).
//!
//! ```text
//! cargo run --release -p slubmalloc-programs --bin stats_then_wait &
//! target/release/slubtop --once --json $!
//! ```
//!
//! It holds blocks of a few classes and two large ones, keeps a helper
//! thread alive (parked: a channel's blocking receive would allocate) and
//! lets another exit after freeing
//! a block of the main thread's; writes the report and "ready" on stdout with
//! one write to fd 1 (std's stdout would allocate its buffer after the
//! snapshot), and reads fd 0 until EOF.

use std::io::{Read, Write};
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

/// Set when the helper thread may end.
static DONE: AtomicBool = AtomicBool::new(false);

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

fn main() {
    let small: Vec<Box<[u8; 40]>> = (0..3000).map(|i| Box::new([i as u8; 40])).collect();
    let mid: Vec<Vec<u8>> = (0..50).map(|i| vec![i as u8; 28_000]).collect();
    let large = [vec![1u8; 1 << 20], vec![2u8; 3 << 20]];
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let helper = std::thread::spawn(move || {
        let mine: Vec<String> = (0..500).map(|i| i.to_string().repeat(20)).collect();
        ready_tx.send(()).unwrap();
        // Acquire: pairs with main's Release store.
        while !DONE.load(Ordering::Acquire) {
            std::thread::park();
        }
        mine.len()
    });
    let given = vec![7u8; 5000];
    std::thread::spawn(move || drop(given)).join().unwrap();
    ready_rx.recv().unwrap();

    // Room for the report before the snapshot: writing it allocates nothing.
    let mut out = String::with_capacity(1 << 16);
    let stats = slubmalloc::stats();
    stats.write_json(&mut out).unwrap();
    out.push_str("\nready\n");
    // SAFETY: fds 0 and 1 are open for the whole run; ManuallyDrop leaves
    // them open.
    let (mut stdout, mut stdin) = unsafe {
        (
            ManuallyDrop::new(std::fs::File::from_raw_fd(1)),
            ManuallyDrop::new(std::fs::File::from_raw_fd(0)),
        )
    };
    stdout.write_all(out.as_bytes()).unwrap();
    let mut byte = [0u8; 1];
    while matches!(stdin.read(&mut byte), Ok(1)) {}

    DONE.store(true, Ordering::Release);
    helper.thread().unpark();
    let held = helper.join().unwrap();
    assert_eq!(held, 500);
    assert!(small.iter().enumerate().all(|(i, b)| b[39] == i as u8));
    assert!(mid.iter().all(|v| v.len() == 28_000) && large[1][5] == 2);
}
