//! A multithreaded Rust workload timed under slubmalloc and under
//! `std::alloc::System`, interleaved in one run.
//!
//!     cargo run --release -p slubmalloc-programs --bin mt_workload -- [--threads T] [--rounds R] [--scale S]
//!
//! The program is its own driver: it starts itself R times per allocator,
//! alternating (system, slubmalloc, slubmalloc, system, ...), each child with
//! `MT_WORKLOAD_ALLOC` naming the allocator, and prints every child's time,
//! the medians and the ratio. The child's `#[global_allocator]` is a wrapper
//! that dispatches to System or SlubMalloc; it decides once, on the first
//! allocation (before `main`), from the environment read with `getenv` (which
//! does not allocate), so no block ever crosses from one allocator to the
//! other. Both allocators pay the same predictable branch.
//!
//! The load, per thread and per round of work: build a `Vec<String>` of
//! formatted strings, a `BTreeMap<String, Vec<u8>>` and a `HashMap<u64, String>`
//! from them, look things up, and drop most of it; half the strings are sent
//! to the next thread, which frees them (cross-thread frees).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

const UNDECIDED: u8 = 0;
const USE_SYSTEM: u8 = 1;
const USE_SLUB: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// Dispatches every call to the allocator chosen by `MT_WORKLOAD_ALLOC`
/// (`system` or `slubmalloc`, default slubmalloc).
struct Switch;

impl Switch {
    #[inline(always)]
    fn slub(&self) -> bool {
        // Relaxed: the value is written once, before any block exists.
        match CHOICE.load(Ordering::Relaxed) {
            USE_SLUB => true,
            USE_SYSTEM => false,
            _ => decide(),
        }
    }
}

#[cold]
fn decide() -> bool {
    // SAFETY: getenv with a NUL-terminated name; it does not allocate. The
    // first allocation happens on the main thread before any other starts.
    let v = unsafe { libc::getenv(c"MT_WORKLOAD_ALLOC".as_ptr()) };
    // SAFETY: a non-null result is a NUL-terminated string.
    let system = !v.is_null() && unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() == b"system";
    CHOICE.store(
        if system { USE_SYSTEM } else { USE_SLUB },
        Ordering::Relaxed,
    );
    !system
}

// SAFETY: every call goes to one allocator for the whole process.
unsafe impl GlobalAlloc for Switch {
    #[inline]
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe {
            if self.slub() {
                slubmalloc::SlubMalloc.alloc(l)
            } else {
                System.alloc(l)
            }
        }
    }
    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract; `p` came from the same allocator.
        unsafe {
            if self.slub() {
                slubmalloc::SlubMalloc.dealloc(p, l)
            } else {
                System.dealloc(p, l)
            }
        }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        unsafe {
            if self.slub() {
                slubmalloc::SlubMalloc.alloc_zeroed(l)
            } else {
                System.alloc_zeroed(l)
            }
        }
    }
    #[inline]
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: forwarded contract; `p` came from the same allocator.
        unsafe {
            if self.slub() {
                slubmalloc::SlubMalloc.realloc(p, l, new)
            } else {
                System.realloc(p, l, new)
            }
        }
    }
}

#[global_allocator]
static GLOBAL: Switch = Switch;

struct Args {
    threads: usize,
    rounds: usize,
    scale: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        threads: 2,
        rounds: 7,
        scale: 200,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < v.len() {
        let num = |j: usize| -> usize {
            v.get(j).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                eprintln!("mt_workload: {} needs a number", v[i]);
                std::process::exit(2)
            })
        };
        match v[i].as_str() {
            "--threads" => a.threads = num(i + 1).max(1),
            "--rounds" => a.rounds = num(i + 1).max(1),
            "--scale" => a.scale = num(i + 1).max(1),
            "--child" => {}
            other => {
                eprintln!("mt_workload: unknown argument {other:?}");
                eprintln!("usage: mt_workload [--threads T] [--rounds R] [--scale S]");
                std::process::exit(2)
            }
        }
        i += if v[i] == "--child" { 1 } else { 2 };
    }
    a
}

/// One thread's share: `scale` rounds of building and dropping collections;
/// half of each round's strings go to `next`, and what `prev` sends is freed.
fn worker(
    id: usize,
    scale: usize,
    next: mpsc::SyncSender<Vec<String>>,
    prev: mpsc::Receiver<Vec<String>>,
) -> u64 {
    let mut check = 0u64;
    for round in 0..scale {
        let mut strings: Vec<String> = (0..2000)
            .map(|i| format!("t{id}-r{round}-item-{i}-{}", "x".repeat(i % 40)))
            .collect();
        let mut tree: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (i, s) in strings.iter().enumerate().step_by(2) {
            tree.insert(s.clone(), vec![i as u8; 8 + i % 200]);
        }
        let mut map: HashMap<u64, String> = HashMap::new();
        for (i, s) in strings.iter().enumerate().step_by(3) {
            map.insert(i as u64, s.to_uppercase());
        }
        check += tree
            .range("t".to_string()..)
            .take(100)
            .map(|(_, v)| v.len() as u64)
            .sum::<u64>();
        check += map.get(&300).map_or(0, |s| s.len() as u64);
        // Hand half of the strings to the next thread; it frees them.
        let handed: Vec<String> = strings.drain(..1000).collect();
        if next.send(handed).is_err() {
            break;
        }
        // Free what the previous thread handed us.
        if let Ok(got) = prev.recv() {
            check += got.iter().map(|s| s.len() as u64).sum::<u64>();
            drop(got);
        }
        drop((strings, tree, map));
    }
    check
}

/// Runs the load and returns its wall time in seconds.
fn child(a: &Args) -> f64 {
    let start = Instant::now();
    // A ring of channels: thread i sends to i+1 (the last to 0).
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for _ in 0..a.threads {
        let (s, r) = mpsc::sync_channel::<Vec<String>>(2);
        senders.push(s);
        receivers.push(Some(r));
    }
    let handles: Vec<_> = (0..a.threads)
        .map(|id| {
            let next = senders[(id + 1) % a.threads].clone();
            let prev = receivers[id].take().unwrap();
            let scale = a.scale;
            thread::spawn(move || worker(id, scale, next, prev))
        })
        .collect();
    drop(senders);
    let check: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    black_box(check);
    start.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let a = parse_args();
    if std::env::args().any(|s| s == "--child") {
        let secs = child(&a);
        let which = if GLOBAL.slub() {
            "slubmalloc"
        } else {
            "system"
        };
        println!("{which} {secs:.6}");
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    let names = ["system", "slubmalloc"];
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    println!(
        "mt_workload: {} threads, scale {}, {} rounds, interleaved",
        a.threads, a.scale, a.rounds
    );
    for round in 0..a.rounds {
        // ABBA order so that drift on a shared machine hits both alike.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let out = Command::new(&exe)
                .args(["--child", "--threads", &a.threads.to_string()])
                .args(["--scale", &a.scale.to_string()])
                .env("MT_WORKLOAD_ALLOC", names[k])
                .output()
                .expect("run child");
            assert!(out.status.success(), "child failed: {:?}", out);
            let line = String::from_utf8_lossy(&out.stdout);
            let mut f = line.split_whitespace();
            assert_eq!(f.next(), Some(names[k]), "child ran the wrong allocator");
            let t: f64 = f.next().and_then(|s| s.parse().ok()).expect("child time");
            println!("round {round} {:<10} {t:.4} s", names[k]);
            times[k].push(t);
        }
    }
    let m_sys = median(&mut times[0]);
    let m_slub = median(&mut times[1]);
    println!("median system     {m_sys:.4} s");
    println!("median slubmalloc {m_slub:.4} s");
    println!(
        "ratio slubmalloc/system {:.3} ({})",
        m_slub / m_sys,
        if m_slub < m_sys {
            "slubmalloc faster"
        } else {
            "system faster"
        }
    );
}
