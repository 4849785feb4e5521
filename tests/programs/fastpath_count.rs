//! A loop of N malloc + free pairs of one size through `#[global_allocator]`,
//! for counting instructions with callgrind (`ci/callgrind.sh`): the
//! difference of total instructions between N = 2M and N = M, divided by M,
//! is the cost of one pair with all setup cancelled.
//!
//!     cargo build --release -p slubmalloc-programs --bin fastpath_count
//!     valgrind --tool=callgrind target/release/fastpath_count N SIZE
//!
//! `alloc` and `dealloc` here are `std::alloc::{alloc, dealloc}`, the calls
//! every Box, Vec and String makes; `black_box` keeps the compiler from
//! removing the pair.

use std::alloc::{alloc, dealloc, Layout};
use std::hint::black_box;

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

/// The loop; not inlined, so it shows up as one function in callgrind.
#[inline(never)]
fn pairs(n: u64, l: Layout) {
    for _ in 0..n {
        // SAFETY: non-zero size; freed right away with the same layout.
        unsafe {
            let p = alloc(l);
            if p.is_null() {
                std::process::abort();
            }
            p.write_volatile(1);
            dealloc(black_box(p), l);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(64);
    let l = Layout::from_size_align(size, 8).expect("layout");
    // Blocks of the same size kept live, so that the slab never becomes
    // empty at each free (as in ci/callgrind.sh's C loop, benches/c/pairs.c).
    // SAFETY: non-zero size; each block is freed once with `l`.
    let keep: Vec<*mut u8> = (0..16).map(|_| unsafe { alloc(l) }).collect();
    pairs(n, black_box(l));
    for p in keep {
        // SAFETY: allocated above with `l`.
        unsafe { dealloc(p, l) };
    }
}
