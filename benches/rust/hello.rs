//! hello: a Rust command-line program of hello-world size, on the C heap
//! (Rust's default `System` allocator calls malloc, so LD_PRELOAD chooses
//! the allocator): it builds N short lines, counts their words in a
//! `HashMap`, sorts the counts and prints a greeting and the top three.
//! Peak RSS is mostly what the allocator takes to start.
//!
//!     hello [N]      (default 1000)
//!
//! Built by ci/measure.py with `rustc -O` into target/measure/bin/hello.
use std::collections::HashMap;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let lines: Vec<String> = (0..n)
        .map(|i| format!("hello world number {} of {}", i % 37, n))
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for line in &lines {
        for word in line.split_whitespace() {
            *counts.entry(word).or_default() += 1;
        }
    }
    let mut top: Vec<(&str, usize)> = counts.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    println!("Hello, world! {} lines, {} distinct words", lines.len(), top.len());
    for (word, count) in top.iter().take(3) {
        println!("{word}: {count}");
    }
}
