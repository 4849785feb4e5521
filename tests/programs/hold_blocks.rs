//! Holds exactly K live blocks of SIZE bytes when it exits, with slubmalloc as
//! the global allocator: what `SLUBMALLOC_STATS` should then report for that
//! size class (tests/processes/stats_dump.rs builds and runs it).
//!
//! ```text
//! cargo run --release -p slubmalloc-programs --bin hold_blocks -- 10 20480
//! SLUBMALLOC_STATS=1 target/release/hold_blocks 10 20480
//! ```
//!
//! It allocates 2K blocks, fills each with its own byte, frees every second
//! one (so the class sees frees as well as allocations), checks the K it keeps,
//! prints a checksum (unless the third argument is `quiet`) and leaves main
//! with the K blocks still live.

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

fn pattern(i: usize) -> u8 {
    (i * 7 + 1) as u8
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| -> usize {
        args.get(i).and_then(|a| a.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: hold_blocks K SIZE [quiet]");
            std::process::exit(2)
        })
    };
    let (k, size) = (number(0), number(1));
    let quiet = args.get(2).map(String::as_str) == Some("quiet");
    if size == 0 {
        eprintln!("SIZE must be at least 1");
        std::process::exit(2);
    }

    // `vec![b; size]` asks the allocator for exactly `size` bytes at align 1.
    let all: Vec<Vec<u8>> = (0..2 * k).map(|i| vec![pattern(i); size]).collect();
    let mut held = Vec::with_capacity(k);
    for (i, block) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            held.push((i, block));
        } // odd blocks are freed here
    }
    let mut checksum = 0u64;
    for (i, block) in &held {
        if block.iter().any(|&b| b != pattern(*i)) {
            eprintln!("block {i} corrupted");
            std::process::exit(4);
        }
        checksum = checksum.wrapping_mul(31) + block[0] as u64 + block[size - 1] as u64;
    }
    if !quiet {
        println!("held {k} blocks of {size} bytes, checksum {checksum}");
    }
    // The K blocks stay live through exit, when the report is written.
    std::mem::forget(held);
}
