//! A Rust program's misuse of a block freed already, with slubmalloc as the
//! global allocator: the process must stop at it, with one line that names
//! the misuse and the block (tests/processes/misuse.rs runs it).
//!
//! ```text
//! freed_block WHERE OP
//! ```
//!
//! WHERE: `cold`, a class the program has not used (a block of a shared
//! slab, freed onto its list), or `warm`, a class it has used a lot (its
//! blocks kept: the freed block waits in the thread's sheaf). OP:
//! `usable` (`slubmalloc::usable_size`) or `realloc` (`std::alloc::realloc`
//! to the same size, in place were the block live). Prints the block's
//! address before the misuse, and "survived" after it.

use std::alloc::{alloc, dealloc, realloc, Layout};

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

/// Blocks of the warm class the program keeps.
const WARM: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (place, op) = match (args.first(), args.get(1)) {
        (Some(p), Some(o)) if ["cold", "warm"].contains(&p.as_str()) => (p.clone(), o.clone()),
        _ => {
            eprintln!("usage: freed_block cold|warm usable|realloc");
            std::process::exit(2)
        }
    };
    // 3000 bytes: a class nothing else here allocates.
    let size = if place == "warm" { 48 } else { 3000 };
    let layout = Layout::from_size_align(size, 16).unwrap();
    let kept: Vec<Box<[u8; 48]>> = if place == "warm" {
        (0..WARM).map(|_| Box::new([1; 48])).collect()
    } else {
        Vec::new()
    };
    // SAFETY: a valid layout; the block is freed, then misused on purpose.
    unsafe {
        let p = alloc(layout);
        assert!(!p.is_null());
        p.write_bytes(1, size);
        println!("{p:p}");
        dealloc(p, layout);
        match op.as_str() {
            "usable" => println!("usable {}", slubmalloc::usable_size(p)),
            "realloc" => println!("realloc {:p}", realloc(p, layout, size)),
            _ => {
                eprintln!("unknown op {op}");
                std::process::exit(2)
            }
        }
    }
    println!("survived");
    drop(kept);
}
