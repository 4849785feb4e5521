//! The per-CPU level (`src/cpu_sheaf.rs`), modelled: its sections are
//! restartable sequences, which loom cannot run, so a CPU here is a
//! mutex that a section holds from its read of the CPU index to its
//! commit (what rseq gives a section: no other section on that
//! CPU runs in between), and a migration is a migrator flipping the CPU a
//! thread's sections use: a section that finds its thread moved before its
//! commit aborts, its copies above `current` unread, and starts again on
//! the new CPU. A remote drain stops the CPU as `cpu_sheaf::stop` does
//! (under the drains' lock, the entry `STOPPED`, then the fence: here the
//! CPU's lock taken and let go, so that every section in flight there has
//! committed or aborted), owns the region, empties it into the slabs and
//! puts the CPU back. Each scenario checks conservation: every block ends
//! in exactly one place (a thread's sheaf, a CPU's region, the slabs).

use std::collections::BTreeSet;
use std::sync::atomic::AtomicUsize as StdAtomicUsize;

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicBool;
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::sync::{AtomicUsize, Ordering};

/// Blocks a CPU's region holds at most (its `end`).
const CAP: usize = 3;

/// Sections that found their thread migrated, over every interleaving.
static RESTARTS_SEEN: StdAtomicUsize = StdAtomicUsize::new(0);

struct Cpu {
    /// Held by a section from its read of the CPU index to its commit (a
    /// mutex, not the shipped spin lock: loom's schedules of three threads
    /// spinning on one lock exceed its branch bound).
    section: Mutex<()>,
    /// The table's entry is `STOPPED`: a drainer owns the region.
    stopped: AtomicBool,
    /// The region's slots `[BEGIN, current)`, oldest first.
    region: UnsafeCell<Vec<usize>>,
}

struct Level {
    cpus: [Cpu; 2],
    /// `cpu_sheaf::LOCK`: one drain at a time.
    drains: Mutex<()>,
    /// What the drains hand back.
    slabs: Mutex<Vec<usize>>,
}

impl Level {
    fn new(held: [Vec<usize>; 2]) -> Self {
        let [a, b] = held;
        let cpu = |v| Cpu {
            section: Mutex::new(()),
            stopped: AtomicBool::new(false),
            region: UnsafeCell::new(v),
        };
        Level {
            cpus: [cpu(a), cpu(b)],
            drains: Mutex::new(()),
            slabs: Mutex::new(Vec::new()),
        }
    }

    /// A section on the CPU `on` names when it reads it: `body` runs on the
    /// region (its copies speculative), and commits only if the thread was
    /// not migrated meanwhile; else it starts again on the new CPU. None on
    /// a stopped CPU (the thread goes to the barn and the slabs).
    fn section<R>(
        &self,
        on: &AtomicUsize,
        body: impl Fn(&[usize]) -> (Vec<usize>, R),
    ) -> Option<R> {
        loop {
            let c = on.load(Ordering::Relaxed);
            let cpu = &self.cpus[c];
            let held = cpu.section.lock().unwrap();
            // Acquire: the drainer's writes before it put the CPU back.
            if cpu.stopped.load(Ordering::Acquire) {
                return None;
            }
            // SAFETY: loom checks the access; the section's lock or a
            // drainer's stop orders it.
            let (region, out) = cpu.region.with(|r| body(unsafe { &*r }));
            if on.load(Ordering::Relaxed) != c {
                // Migrated before the commit: aborted, nothing written.
                drop(held);
                RESTARTS_SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                thread::yield_now();
                continue;
            }
            // SAFETY: as above. The commit.
            cpu.region.with_mut(|r| unsafe { *r = region });
            return Some(out);
        }
    }

    /// Pushes the oldest of `sheaf` that fit onto the thread's CPU
    /// (`cpu_sheaf::push`): how many.
    fn push(&self, on: &AtomicUsize, sheaf: &mut Vec<usize>) -> usize {
        let k = self
            .section(on, |r| {
                let k = (CAP - r.len()).min(sheaf.len());
                let mut next = r.to_vec();
                next.extend_from_slice(&sheaf[..k]);
                (next, k)
            })
            .unwrap_or(0);
        sheaf.drain(..k);
        k
    }

    /// Pops the CPU's blocks into the thread's empty sheaf
    /// (`cpu_sheaf::pop`).
    fn pop(&self, on: &AtomicUsize, sheaf: &mut Vec<usize>) {
        assert!(sheaf.is_empty());
        if let Some(blocks) = self.section(on, |r| (Vec::new(), r.to_vec())) {
            *sheaf = blocks;
        }
    }

    /// A remote drain of `c` (`sheaf::drain_cpus` through
    /// `cpu_sheaf::stop`).
    fn drain(&self, c: usize) {
        let cpu = &self.cpus[c];
        let drains = self.drains.lock().unwrap();
        // SeqCst: before the fence.
        cpu.stopped.store(true, Ordering::SeqCst);
        // The fence: every section in flight on the CPU commits or aborts.
        drop(cpu.section.lock().unwrap());
        // SAFETY: loom checks the access; the stop and the fence order it.
        let blocks = cpu.region.with_mut(|r| std::mem::take(unsafe { &mut *r }));
        self.slabs.lock().unwrap().extend(blocks);
        // Release: the drainer's writes before the sections that follow.
        cpu.stopped.store(false, Ordering::Release);
        drop(drains);
    }

    /// Every block somewhere, once: the threads' `sheaves`, the regions,
    /// the slabs.
    fn conserves(&self, sheaves: &[Vec<usize>], blocks: usize) {
        let mut all: Vec<usize> = sheaves.concat();
        for cpu in &self.cpus {
            // SAFETY: the threads have joined.
            cpu.region.with(|r| all.extend(unsafe { &*r }));
        }
        all.extend(self.slabs.lock().unwrap().iter());
        let set: BTreeSet<usize> = all.iter().copied().collect();
        assert_eq!(all.len(), set.len(), "a block twice: {all:?}");
        assert_eq!(set, (1..=blocks).collect(), "a block lost: {all:?}");
    }
}

/// Explores `scenario` with at most three preemptions per interleaving
/// (the scenarios stay within seconds), and checks that there was more
/// than one.
fn explore(scenario: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(StdAtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        scenario();
    });
    let n = runs.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{n} interleavings");
    assert!(n > 1, "only {n} interleaving explored");
}

/// A thread pushes its sheaf and pops a batch back while a migrator moves
/// it from CPU 0 to CPU 1 and a drainer drains CPU 0: no block lost or
/// twice, and some interleaving restarted a section.
#[test]
fn a_migrated_thread_and_a_remote_drain_conserve_blocks() {
    explore(|| {
        let level = Arc::new(Level::new([vec![3], vec![4]]));
        let on = Arc::new(AtomicUsize::new(0));
        let t = {
            let (level, on) = (level.clone(), on.clone());
            thread::spawn(move || {
                let mut sheaf = vec![1, 2];
                level.push(&on, &mut sheaf);
                if sheaf.is_empty() {
                    level.pop(&on, &mut sheaf);
                }
                sheaf
            })
        };
        let migrator = {
            let on = on.clone();
            thread::spawn(move || on.store(1, Ordering::Relaxed))
        };
        level.drain(0);
        let sheaf = t.join().unwrap();
        migrator.join().unwrap();
        level.conserves(&[sheaf], 4);
    });
    assert!(
        RESTARTS_SEEN.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no section restarted"
    );
}

/// On one CPU, a thread pushes its sheaf while another pops into its
/// empty one and a drainer drains the CPU: no block lost or twice.
#[test]
fn a_push_a_pop_and_a_remote_drain_on_one_cpu_conserve_blocks() {
    explore(|| {
        let level = Arc::new(Level::new([vec![3], vec![]]));
        let on = Arc::new(AtomicUsize::new(0));
        let pusher = {
            let (level, on) = (level.clone(), on.clone());
            thread::spawn(move || {
                let mut sheaf = vec![1, 2];
                level.push(&on, &mut sheaf);
                sheaf
            })
        };
        let popper = {
            let (level, on) = (level.clone(), on.clone());
            thread::spawn(move || {
                let mut sheaf = Vec::new();
                level.pop(&on, &mut sheaf);
                sheaf
            })
        };
        level.drain(0);
        let sheaves = [pusher.join().unwrap(), popper.join().unwrap()];
        level.conserves(&sheaves, 3);
    });
}
