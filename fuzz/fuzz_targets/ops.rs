//! Fuzzes slubmalloc with sequences of operations read from the input:
//! allocate (any size up to 1 MiB, any alignment up to 64 KiB, zeroed or
//! not), realloc, free, usable_size, trim, a thread's exit, and a check of
//! the statistics against the walk. Each operation names the thread that
//! performs it (the fuzzing thread or one of three workers), so blocks are
//! freed and resized by threads that did not allocate them, and by threads
//! that replaced an exited owner. Operations run one at a time (the fuzzing
//! thread waits for each worker's answer), so an input replays exactly.
//!
//! Every block holds a pattern derived from its key, checked before each
//! realloc and free and after each realloc. After each input every block is
//! freed and the workers exit; the statistics must then count exactly what
//! they counted before the input, and the walk must agree with them.
//!
//! Input format: a sequence of operations, each an op byte (low 4 bits: the
//! operation; high 4 bits: the thread, modulo 4) and its argument bytes; an
//! operation cut short by the end of the input is dropped.

#![no_main]

use std::alloc::{GlobalAlloc, Layout};
use std::sync::{Condvar, Mutex};
use std::thread::{self, Scope, ScopedJoinHandle};

use libfuzzer_sys::fuzz_target;
use slubmalloc::{SlubMalloc, NUM_CLASSES};

#[global_allocator]
static GLOBAL: SlubMalloc = SlubMalloc;

/// Thread 0 is the fuzzing thread; 1..THREADS are workers.
const THREADS: usize = 4;
const SLOTS: usize = 32;
const MAX_SIZE: usize = 1 << 20;

#[derive(Clone, Copy, Debug)]
struct Block {
    addr: usize,
    size: usize,
    align: usize,
    key: u64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn word(key: u64, i: usize) -> u64 {
    key ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Block {
    fn layout(&self) -> Layout {
        Layout::from_size_align(self.size, self.align).unwrap()
    }

    fn ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    fn byte(&self, i: usize) -> u8 {
        word(self.key, i / 8).to_le_bytes()[i % 8]
    }

    fn fill(&self, from: usize) {
        let p = self.ptr();
        let mut i = from;
        while i < self.size && i % 8 != 0 {
            // SAFETY: `i < size`: inside the live block.
            unsafe { *p.add(i) = self.byte(i) };
            i += 1;
        }
        while i + 8 <= self.size {
            // SAFETY: `i + 8 <= size`: inside the live block.
            unsafe { (p.add(i) as *mut u64).write_unaligned(word(self.key, i / 8).to_le()) };
            i += 8;
        }
        while i < self.size {
            // SAFETY: as above.
            unsafe { *p.add(i) = self.byte(i) };
            i += 1;
        }
    }

    /// Checks bytes `0..len`, a word at a time (the comparisons are
    /// instrumented, so bytewise checking would dominate the run time).
    fn check(&self, len: usize, when: &str) {
        let p = self.ptr();
        let mut i = 0;
        while i + 8 <= len {
            // SAFETY: `i + 8 <= len <= size`: inside the live block.
            let got = unsafe { (p.add(i) as *const u64).read_unaligned() };
            if got != word(self.key, i / 8).to_le() {
                break;
            }
            i += 8;
        }
        while i < len {
            // SAFETY: `i < len <= size`: inside the live block.
            let got = unsafe { *p.add(i) };
            assert_eq!(got, self.byte(i), "{when}: byte {i} of {self:x?} changed");
            i += 1;
        }
    }
}

enum Cmd {
    Alloc {
        size: usize,
        align: usize,
        zeroed: bool,
        key: u64,
    },
    Realloc {
        block: Block,
        new_size: usize,
    },
    Free {
        block: Block,
    },
    Usable {
        block: Block,
    },
    Trim,
    /// Answers once the worker is running its loop (spawning is then over).
    Ping,
    Exit,
}

/// Runs one operation on the calling thread.
fn execute(cmd: Cmd) -> Option<Block> {
    match cmd {
        Cmd::Alloc {
            size,
            align,
            zeroed,
            key,
        } => {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: `size` is not zero.
            let p = unsafe {
                if zeroed {
                    GLOBAL.alloc_zeroed(layout)
                } else {
                    GLOBAL.alloc(layout)
                }
            };
            assert!(!p.is_null(), "allocation of {size} B at {align} failed");
            assert_eq!(
                p as usize % align,
                0,
                "{size} B at {align}: {p:?} misaligned"
            );
            if zeroed {
                // SAFETY: `p` holds `size` bytes.
                let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                // SAFETY: every bit pattern is a valid u64.
                let (head, words, tail) = unsafe { bytes.align_to::<u64>() };
                assert!(
                    head.iter().chain(tail).all(|&b| b == 0) && words.iter().all(|&w| w == 0),
                    "alloc_zeroed {size} B: dirty memory"
                );
            }
            let b = Block {
                addr: p as usize,
                size,
                align,
                key,
            };
            b.fill(0);
            Some(b)
        }
        Cmd::Realloc { block, new_size } => {
            block.check(block.size, "before realloc");
            // SAFETY: `block` is live with this layout; `new_size` is not zero.
            let q = unsafe { GLOBAL.realloc(block.ptr(), block.layout(), new_size) };
            assert!(!q.is_null(), "realloc {block:x?} to {new_size} B failed");
            assert_eq!(
                q as usize % block.align,
                0,
                "realloc to {new_size} B lost the alignment"
            );
            let nb = Block {
                addr: q as usize,
                size: new_size,
                ..block
            };
            let kept = block.size.min(new_size);
            nb.check(kept, "after realloc");
            nb.fill(kept);
            Some(nb)
        }
        Cmd::Free { block } => {
            block.check(block.size, "before free");
            // SAFETY: `block` is live with this layout.
            unsafe { GLOBAL.dealloc(block.ptr(), block.layout()) };
            None
        }
        Cmd::Usable { block } => {
            // SAFETY: `block` is live.
            let n = unsafe { slubmalloc::usable_size(block.ptr()) };
            assert!(n >= block.size, "usable size {n} below {block:x?}");
            block.check(block.size, "at usable_size");
            None
        }
        Cmd::Trim => {
            slubmalloc::trim();
            None
        }
        Cmd::Ping | Cmd::Exit => None,
    }
}

/// Hands a worker one operation and waits for its answer.
struct Mailbox {
    state: Mutex<(Option<Cmd>, Option<Option<Block>>)>,
    cv: Condvar,
}

impl Mailbox {
    fn new() -> Mailbox {
        Mailbox {
            state: Mutex::new((None, None)),
            cv: Condvar::new(),
        }
    }

    fn call(&self, cmd: Cmd) -> Option<Block> {
        let mut s = self.state.lock().unwrap();
        s.0 = Some(cmd);
        self.cv.notify_all();
        loop {
            if let Some(answer) = s.1.take() {
                return answer;
            }
            s = self.cv.wait(s).unwrap();
        }
    }

    /// The worker's loop, until an Exit.
    fn serve(&self) {
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(cmd) = s.0.take() {
                let exit = matches!(cmd, Cmd::Exit);
                drop(s);
                let answer = execute(cmd);
                s = self.state.lock().unwrap();
                s.1 = Some(answer);
                self.cv.notify_all();
                if exit {
                    return;
                }
            } else {
                s = self.cv.wait(s).unwrap();
            }
        }
    }
}

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// A size from 1 to MAX_SIZE; the first byte picks the range.
    fn size(&mut self) -> Option<usize> {
        let range = self.byte()?;
        let n = u16::from_le_bytes([self.byte()?, self.byte()?]) as usize;
        Some(match range % 4 {
            0 => 1 + n % 256,
            1 => 1 + n % 4096,
            2 => 1 + n % 33_000, // across the largest class
            _ => 1 + (n * 17) % MAX_SIZE,
        })
    }
}

/// Per-class blocks in use and large blocks, from the statistics.
fn in_use() -> ([u64; NUM_CLASSES], u64) {
    let s = slubmalloc::stats();
    let mut n = [0u64; NUM_CLASSES];
    for (i, c) in s.caches().enumerate() {
        n[i] = c.objects_in_use;
    }
    (n, s.totals.large_blocks)
}

/// Only when no thread allocates: the walk recounts what the stats keep.
fn assert_walk_agrees() {
    let s = slubmalloc::stats();
    let w = slubmalloc::walk();
    for (i, (c, wc)) in s.caches().zip(w.caches.iter()).enumerate() {
        assert_eq!(
            (c.objects_in_use, c.slabs, c.node_partial_slabs, c.partial_free_objects, c.thread_partial_slabs),
            (wc.objects_in_use, wc.slabs, wc.node_partial_slabs, wc.partial_free_objects, wc.thread_partial_slabs),
            "class {i} ({} B): stats (in_use, slabs, node_partial, partial_free, thread_partial) differ from the walk",
            c.object_size
        );
        assert_eq!(
            wc.inuse_mismatches, 0,
            "class {i}: slab in-use counts disagree with free lists"
        );
    }
    assert_eq!(s.totals.large_blocks, w.large_blocks, "large blocks");
}

/// Starts a worker and waits until it serves, so that its start-up
/// allocations are over before the next operation or check.
fn spawn<'scope, 'env>(
    s: &'scope Scope<'scope, 'env>,
    mailbox: &'env Mailbox,
) -> ScopedJoinHandle<'scope, ()> {
    let handle = s.spawn(move || mailbox.serve());
    mailbox.call(Cmd::Ping);
    handle
}

fn run(data: &[u8]) {
    let before = in_use();
    let mailboxes: [Mailbox; THREADS] = std::array::from_fn(|_| Mailbox::new());
    let mut table: [Option<Block>; SLOTS] = [None; SLOTS];
    let mut next_key = 0u64;
    thread::scope(|s| {
        // Workers start when an operation first names them.
        let mut workers: [Option<ScopedJoinHandle<'_, ()>>; THREADS] = Default::default();
        let mut on = |t: usize, cmd: Cmd| {
            if t == 0 {
                return execute(cmd);
            }
            if workers[t].is_none() {
                workers[t] = Some(spawn(s, &mailboxes[t]));
            }
            let exit = matches!(cmd, Cmd::Exit);
            let answer = mailboxes[t].call(cmd);
            if exit {
                workers[t].take().unwrap().join().unwrap();
            }
            answer
        };
        let mut input = Input(data);
        while let Some(op) = input.byte() {
            let t = (op >> 4) as usize % THREADS;
            match op & 15 {
                0..=5 => {
                    let (Some(slot), Some(size), Some(a)) =
                        (input.byte(), input.size(), input.byte())
                    else {
                        break;
                    };
                    let slot = slot as usize % SLOTS;
                    if let Some(old) = table[slot].take() {
                        on(t, Cmd::Free { block: old });
                    }
                    next_key += 1;
                    let cmd = Cmd::Alloc {
                        size,
                        align: 1 << ((a & 31) % 17),
                        zeroed: a & 0x80 != 0,
                        key: mix(next_key),
                    };
                    table[slot] = on(t, cmd);
                }
                6..=8 => {
                    let (Some(slot), Some(new_size)) = (input.byte(), input.size()) else {
                        break;
                    };
                    if let Some(block) = table[slot as usize % SLOTS] {
                        table[slot as usize % SLOTS] = on(t, Cmd::Realloc { block, new_size });
                    }
                }
                9..=11 => {
                    let Some(slot) = input.byte() else { break };
                    if let Some(block) = table[slot as usize % SLOTS].take() {
                        on(t, Cmd::Free { block });
                    }
                }
                12 => {
                    let Some(slot) = input.byte() else { break };
                    if let Some(block) = table[slot as usize % SLOTS] {
                        on(t, Cmd::Usable { block });
                    }
                }
                13 => {
                    // The worker exits (its heap goes back, its blocks stay
                    // live); the next operation for it starts a new thread.
                    if t != 0 {
                        on(t, Cmd::Exit);
                    }
                }
                14 => {
                    on(t, Cmd::Trim);
                }
                _ => assert_walk_agrees(),
            }
        }
        // Free what is left, each block by the thread its slot names.
        for (slot, b) in table.iter_mut().enumerate() {
            if let Some(block) = b.take() {
                on(slot % THREADS, Cmd::Free { block });
            }
        }
        drop(on);
        for (t, w) in workers.iter_mut().enumerate() {
            if let Some(w) = w.take() {
                mailboxes[t].call(Cmd::Exit);
                w.join().unwrap();
            }
        }
    });
    let after = in_use();
    assert_eq!(
        before, after,
        "blocks in use (per class, then large) differ after everything was freed"
    );
    assert_walk_agrees();
}

fuzz_target!(|data: &[u8]| run(data));
