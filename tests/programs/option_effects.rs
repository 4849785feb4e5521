//! Prints, one per line, what the `SLUBMALLOC_*` variables can change in a
//! Rust program that has slubmalloc as its global allocator, as the program
//! sees it; tests/processes/secure_mode.rs runs it as a setuid program, where
//! they must change nothing (tests/c/option_effects.c prints the same from
//! C, and describes each line).
//!
//! ```text
//! cargo run --release -p slubmalloc-programs --bin option_effects
//! SLUBMALLOC_DEBUG=1 target/release/option_effects
//! ```

use std::alloc::{alloc, dealloc, Layout};
use std::sync::{Arc, Barrier};
use std::time::Duration;

#[global_allocator]
static GLOBAL: slubmalloc::SlubMalloc = slubmalloc::SlubMalloc;

/// Resident KiB from /proc/self/statm, read without allocating (an
/// allocator call could purge, which is what is being watched).
fn rss_kib() -> u64 {
    let mut buf = [0u8; 128];
    // SAFETY: a NUL-terminated literal path; the fd is closed below; read
    // writes at most buf.len() bytes into `buf`.
    let n = unsafe {
        let fd = libc::open(c"/proc/self/statm".as_ptr(), libc::O_RDONLY);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n
    };
    let text = &buf[..n.max(0) as usize];
    let resident = text.split(|&b| b == b' ').nth(1).unwrap_or(b"0");
    let pages = resident
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0u64, |a, &b| a * 10 + (b - b'0') as u64);
    pages * 4
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// 8 MiB of small blocks (16 to 256 bytes), built, held until `measured`,
/// then freed (two threads: less than the trim bound, 32 MiB, which would
/// give them back at free time whatever the purge variables say).
fn build_and_free(built: &Barrier, measured: &Barrier) {
    let n = (8 << 20) / 128;
    let mut held = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: a non-zero size; 16 bytes of it are written.
        unsafe {
            let p = alloc(layout(16 + i % 241));
            p.write_bytes(1, 16);
            held.push(p);
        }
    }
    built.wait();
    measured.wait();
    for (i, &p) in held.iter().enumerate() {
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, layout(16 + i % 241)) };
    }
}

/// Whether what two exited threads freed went back within 3 s.
fn purged() -> bool {
    let (built, measured) = (Arc::new(Barrier::new(3)), Arc::new(Barrier::new(3)));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (b, m) = (built.clone(), measured.clone());
            std::thread::spawn(move || build_and_free(&b, &m))
        })
        .collect();
    built.wait();
    let peak = rss_kib();
    measured.wait();
    for w in workers {
        w.join().unwrap();
    }
    for _ in 0..300 {
        if rss_kib() * 4 < peak {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

fn main() {
    // SAFETY: getauxval and geteuid have no preconditions.
    let (secure, euid) = unsafe { (libc::getauxval(libc::AT_SECURE), libc::geteuid()) };
    println!("secure={secure} euid={euid}");

    // SAFETY: a non-zero size; freed with the same layout.
    unsafe {
        let p = alloc(layout(100));
        println!("usable_100={}", slubmalloc::usable_size(p));
        dealloc(p, layout(100));
    }

    let blocks: Vec<*mut u8> = (0..25)
        // SAFETY: a non-zero size.
        .map(|_| unsafe { alloc(layout(2500)) })
        .collect();
    let next_slot = blocks
        .windows(2)
        .filter(|w| w[1] as usize == w[0] as usize + 2560)
        .count();
    for &p in &blocks {
        // SAFETY: allocated above with this layout.
        unsafe { dealloc(p, layout(2500)) };
    }
    println!("next_slot={next_slot}");

    // SAFETY: a zeroed sigaction is a valid out-parameter; SIGUSR2 is valid.
    let handler = unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut sa);
        sa.sa_sigaction
    };
    let usr2 = if handler == libc::SIG_DFL {
        "default"
    } else {
        "handled"
    };
    println!("usr2={usr2}");

    let profile = if slubmalloc::heap_profile_enabled() {
        "on"
    } else {
        "off"
    };
    println!("profile={profile}");

    println!("purged={}", if purged() { "yes" } else { "no" });
}
