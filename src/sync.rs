//! The allocator's atomics and cells, its one lock (a futex mutex that never
//! allocates, can be declared in a `static`, and can be reset in a forked
//! child), and the store-order fence.
//!
//! The lock order, outermost first: a thread that holds one of these locks
//! takes only locks further down the list, so no two threads wait for each
//! other.
//!
//! 1. `heap::ORPHAN_LOCK` (the orphan heap: `heap_start::with_slow_heap`,
//!    debug mode's slabs, `side_slabs`, and the slabs of zero-size blocks,
//!    `zero`) or
//!    `prof::table::PROF_LOCK` (the profile heap and its tables:
//!    `prof::sample`, `side_slabs`), never both: a thread past its exit is
//!    not sampled, the profile's blocks come from its own heap (in debug
//!    mode too), and the walk counts the profile's slabs before it takes
//!    the orphan heap's lock.
//! 2. The per-CPU sheaves' lock (`cpu_sheaf`): a drain holds it while it
//!    flushes a stopped CPU's blocks back to their slabs; a region is
//!    mapped under it (with nothing taken under it).
//! 3. One node lock (`node::NODES[class].lock`), never two at once: under
//!    one, a slab is taken from or given back to its segment, and a purge
//!    that falls due runs (`node::discard`, `purge::pass::slabs_freed`).
//! 4. `segment::SEGMENTS` or the large blocks' table (`large::LARGE`), never
//!    both: the purge takes one after the other (`purge::pass::purge_all`), and
//!    neither calls out under its lock.
//! 5. One class's barn (`barn::BARNS[class]`): its put and take copy block
//!    pointers and take nothing under it; taken with no lock held, or under
//!    the orphan heap's (the purger's flush of the barns).
//!
//! The heap registry's lock (`heap::REGISTRY`) is apart: taken with no other
//! held (thread start and exit, the statistics and their walk), nothing taken
//! under it. A function whose caller must hold a lock says so and checks it
//! in debug builds (`Lock::assert_held`).
//!
//! The slab protocol (`slab`, `node`, `freelist`) takes its atomics and
//! cells from here, so that the model check (`tests/model`, built with
//! `--cfg loom`) swaps in loom's, which explore every interleaving and
//! catch unsynchronised cell accesses. Other modules use these too, except
//! for a few counters no protocol depends on, which say so.

#[cfg(not(loom))]
pub use core::cell::Cell;
#[cfg(not(loom))]
pub use core::sync::atomic::{
    fence, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub use loom::cell::Cell;
#[cfg(loom)]
pub use loom::sync::atomic::{
    fence, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// The allocator checks itself at three levels, as mimalloc's `mi_assert`,
/// `_internal` and `_expensive`: `freelist::HARDENING`, the misuse checks of
/// release builds (a link outside its slab, a pointer that is no object's
/// start, a double free); `invariant!`, below, a precondition or a count in
/// debug builds; and the walks of debug builds (`Slab::check` recounts a
/// slab's free list, `Lock::assert_held`, `List`'s membership test), with
/// `SLUBMALLOC_DEBUG=1`'s red zones and poison for release builds.
///
/// `debug_assert!` for the allocator's own invariants (a transition's
/// precondition, a count that must agree): in debug builds a broken one
/// stops the process through `os::fatal`, one line naming the file, line
/// and condition, with no allocation. A panic would allocate, and inside
/// the allocator, with a lock held, hang the process instead of stopping
/// it. Compiled out of release builds, as `debug_assert!` is.
macro_rules! invariant {
    ($cond:expr) => {
        $crate::sync::invariant!($cond, 0)
    };
    ($cond:expr, $addr:expr) => {
        if cfg!(debug_assertions) && !$cond {
            $crate::os::fatal(
                concat!(
                    file!(),
                    ":",
                    line!(),
                    ": invariant broken: ",
                    stringify!($cond)
                ),
                $addr as usize,
            );
        }
    };
}
pub(crate) use invariant;

use core::cell::UnsafeCell;

use crate::os;
// The futex and the yield; the model check (`--cfg loom`) has neither.
#[cfg(not(loom))]
use crate::sys;

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// Whether a caller takes a lock however long it waits, or only tries it
/// (a caller that may run in a signal handler, which may have interrupted
/// the lock's holder on its own thread).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LockWait {
    Wait,
    Try,
}

/// A three-state futex lock (Drepper's "mutex 2"). Uncontended lock and unlock
/// are one atomic instruction each.
pub struct Lock {
    state: AtomicU32,
}

impl Lock {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Lock {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    /// Loom's atomics are not made in const context.
    #[cfg(loom)]
    pub fn new() -> Self {
        Lock {
            state: AtomicU32::new(UNLOCKED),
        }
    }

    #[inline]
    pub fn lock(&self) {
        // Acquire: pairs with the Release in `unlock`, so the last holder's
        // writes are visible to us.
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    /// Under the model checker: spin, yielding to the other threads.
    #[cfg(loom)]
    fn lock_contended(&self) {
        // Acquire: as in `lock`.
        while self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            loom::thread::yield_now();
        }
    }

    /// Spins, then yields (`Backoff`: 1, 2, .. 64 pause instructions, then
    /// `sched_yield`, eleven rounds in all, retrying the lock after each),
    /// while the holder is likely to let go soon; then
    /// sleeps on the futex. Neither step allocates or touches errno.
    #[cfg(not(loom))]
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let backoff = Backoff::new();
        while !backoff.is_completed() {
            // Acquire: as in `lock`.
            if self.state.load(Ordering::Relaxed) == UNLOCKED
                && self
                    .state
                    .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            backoff.snooze();
        }
        // Acquire: as in `lock`.
        while self.state.swap(CONTENDED, Ordering::Acquire) != UNLOCKED {
            futex(
                &self.state,
                sys::FUTEX_WAIT | sys::FUTEX_PRIVATE_FLAG,
                CONTENDED,
            );
        }
    }

    #[inline]
    pub fn unlock(&self) {
        // Release: publishes the critical section; pairs with `lock`'s Acquire.
        if self.state.swap(UNLOCKED, Ordering::Release) == CONTENDED {
            #[cfg(not(loom))]
            futex(&self.state, sys::FUTEX_WAKE | sys::FUTEX_PRIVATE_FLAG, 1);
        }
    }

    /// Whether some thread holds the lock. In a forked child of a
    /// multi-threaded parent, a held lock names a critical section that a
    /// thread which no longer exists left half done (see `fork`).
    pub fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != UNLOCKED
    }

    /// For a function whose caller must hold the lock: in debug builds,
    /// stops the process (`os::fatal`, naming the function's file and line)
    /// if no thread holds it. The lock keeps no owner, so a lock another
    /// thread holds passes; the check catches a caller that took none.
    /// Compiled out of release builds, as `invariant!` is, and off under the
    /// model check: loom would explore its extra load in every scenario, and
    /// it reports a list touched without the lock as a race on the list's
    /// cells anyway.
    #[inline(always)]
    #[track_caller]
    pub fn assert_held(&self) {
        if cfg!(debug_assertions) && !cfg!(loom) && !self.is_locked() {
            lock_not_held(core::panic::Location::caller());
        }
    }

    /// Makes the lock free again in a forked child, where the thread that
    /// held it no longer exists.
    pub fn reset_in_child(&self) {
        self.state.store(UNLOCKED, Ordering::Relaxed);
    }

    /// Takes the lock if it is free; never waits (for signal handlers).
    pub fn try_lock(&self) -> bool {
        // Acquire: as in `lock`.
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    pub fn guard(&self) -> Guard<'_> {
        self.lock();
        Guard(self)
    }
}

/// `Lock::assert_held`'s failure: "<file>:<line>: lock not held", formatted
/// on the stack (no allocation, and no `fmt`, which the model check lacks).
#[cold]
#[inline(never)]
fn lock_not_held(at: &core::panic::Location<'_>) -> ! {
    const SUFFIX: &[u8] = b": lock not held";
    let mut buf = [0u8; 128];
    let file = &at.file().as_bytes()[..at.file().len().min(96)];
    buf[..file.len()].copy_from_slice(file);
    let mut n = file.len();
    buf[n] = b':';
    n += 1;
    let mut digits = [0u8; 10];
    let (mut line, mut d) = (at.line(), 0);
    loop {
        digits[d] = b'0' + (line % 10) as u8;
        d += 1;
        line /= 10;
        if line == 0 {
            break;
        }
    }
    for &digit in digits[..d].iter().rev() {
        buf[n] = digit;
        n += 1;
    }
    buf[n..n + SUFFIX.len()].copy_from_slice(SUFFIX);
    n += SUFFIX.len();
    // The file name is UTF-8 cut at most at 96 bytes; a cut inside a
    // character loses the name, not the line.
    let what = core::str::from_utf8(&buf[..n]).unwrap_or("lock not held");
    os::fatal(what, 0)
}

/// Unlocks on drop.
pub struct Guard<'a>(&'a Lock);

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.unlock();
    }
}

#[cfg(not(loom))]
fn futex(word: &AtomicU32, op: i32, val: u32) {
    let _keep = os::ErrnoGuard::save();
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAIT/WAKE read it only.
    unsafe {
        sys::syscall(
            sys::SYS_futex,
            word.as_ptr(),
            op,
            val,
            core::ptr::null::<u8>(),
            0,
            0,
        );
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout_ns` (the
/// background purger's wait; a `wake` or a changed word ends it early).
#[cfg(not(loom))]
pub fn wait_on(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let _keep = os::ErrnoGuard::save();
    let ts = sys::timespec {
        tv_sec: (timeout_ns / 1_000_000_000).min(i64::MAX as u64) as sys::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as sys::c_long,
    };
    // SAFETY: `word` is a live, aligned u32 and `ts` a valid relative
    // timeout; FUTEX_WAIT only reads them.
    unsafe {
        sys::syscall(
            sys::SYS_futex,
            word.as_ptr(),
            sys::FUTEX_WAIT | sys::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const sys::timespec,
            0,
            0,
        );
    }
}

/// Wakes every thread in `wait_on(word, ..)`.
#[cfg(not(loom))]
pub fn wake(word: &AtomicU32) {
    futex(
        word,
        sys::FUTEX_WAKE | sys::FUTEX_PRIVATE_FLAG,
        i32::MAX as u32,
    );
}

/// Keeps the stores before it ahead of the stores after it, as any observer
/// sees them, including a child forked while this thread was between the
/// two (see `fork`: the child repairs a half-done critical section and
/// relies on "this was written before that"). No instruction on x86-64,
/// where stores are seen in program order; it binds the compiler there.
#[inline(always)]
pub fn store_order_fence() {
    fence(Ordering::Release);
}

/// A wait that spins, then yields: each `snooze` spins 1, 2, 4 .. 64
/// `pause` instructions, then, from the eighth, yields the CPU
/// (`sched_yield`); after eleven it `is_completed`, for a caller that then
/// sleeps. No allocation, no errno (`sched_yield` cannot fail on Linux).
/// crossbeam-utils' `Backoff` does the same, but yields through std, which
/// the preload library does not link (`preload.rs`).
#[cfg(not(loom))]
struct Backoff {
    step: core::cell::Cell<u32>,
}

#[cfg(not(loom))]
impl Backoff {
    const SPIN_STEPS: u32 = 6;
    const STEPS: u32 = 10;

    fn new() -> Backoff {
        Backoff {
            step: core::cell::Cell::new(0),
        }
    }

    fn snooze(&self) {
        let step = self.step.get();
        if step <= Self::SPIN_STEPS {
            for _ in 0..1u32 << step {
                core::hint::spin_loop();
            }
        } else {
            // SAFETY: sched_yield has no preconditions.
            unsafe { sys::sched_yield() };
        }
        if step <= Self::STEPS {
            self.step.set(step + 1);
        }
    }

    fn is_completed(&self) -> bool {
        self.step.get() > Self::STEPS
    }
}

/// A one-time initialisation that never blocks in a forked child. `call`
/// runs its function once per process; other threads wait for it, spinning
/// then yielding (`Backoff::snooze` ends in `sched_yield`: no allocation, no
/// parking through std's thread handle, which allocates). The state holds
/// the pid of the process whose thread is running the function: a child
/// forked meanwhile finds its parent's pid there, and since the thread that
/// was running it does not exist in the child, the child runs it itself.
#[cfg(not(loom))]
pub struct Once {
    state: AtomicU32,
}

#[cfg(not(loom))]
impl Once {
    const DONE: u32 = u32::MAX;

    pub const fn new() -> Self {
        Once {
            state: AtomicU32::new(0),
        }
    }

    /// Whether the function has run (in this process or its parent).
    #[inline(always)]
    pub fn is_done(&self) -> bool {
        // Acquire: pairs with the Release store that ends `call`.
        self.state.load(Ordering::Acquire) == Self::DONE
    }

    /// Runs `f` unless it has run; returns once it has: true if this call
    /// ran it. `f` must be safe to run again in a forked child whose
    /// parent's thread was inside it.
    #[cold]
    pub fn call(&self, f: impl FnOnce()) -> bool {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { sys::getpid() } as u32;
        let backoff = Backoff::new();
        let mut from = 0;
        loop {
            // Acquire: on DONE, what `f` wrote is ours to read.
            match self
                .state
                .compare_exchange(from, me, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => {
                    f();
                    // Release: publishes what `f` wrote.
                    self.state.store(Self::DONE, Ordering::Release);
                    return true;
                }
                Err(Self::DONE) => return false,
                // A thread of this process is running `f`: wait.
                Err(running) if running == me => {
                    backoff.snooze();
                    from = 0;
                }
                // The runner is a thread of a parent process, lost in the
                // fork that made this one: take over (from that pid).
                Err(parent) => from = parent,
            }
        }
    }
}

/// A static read on the fast paths and written (almost) never, on cache
/// lines of its own: next to a lock or counter that other threads write,
/// every read would miss (stress, four threads: the free-list secret
/// shared a line with the large blocks' counters, the options state with
/// their lock). 128 bytes, as the adjacent-line prefetcher moves lines in
/// pairs.
#[repr(align(128))]
pub struct OwnLines<T>(pub T);

impl<T> core::ops::Deref for OwnLines<T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Data protected by a `Lock`, usable in a `static`.
pub struct Locked<T> {
    pub lock: Lock,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through `with`, which holds `lock`.
unsafe impl<T: Send> Sync for Locked<T> {}

impl<T> Locked<T> {
    #[cfg(not(loom))]
    pub const fn new(v: T) -> Self {
        Locked {
            lock: Lock::new(),
            data: UnsafeCell::new(v),
        }
    }

    /// The protected data, for a reader that manages `lock` itself.
    pub const fn data_ptr(&self) -> *mut T {
        self.data.get()
    }

    /// Runs `f` with the lock held.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let _g = self.lock.guard();
        // SAFETY: the lock is held, so this is the only reference.
        f(unsafe { &mut *self.data.get() })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    /// A child forked while another thread of its parent is inside a
    /// `Once`'s function runs the function itself instead of waiting for a
    /// thread it does not have. (Before `Once`, the process init spun.)
    #[test]
    fn a_child_forked_during_a_once_runs_it_itself() {
        static ONCE: Once = Once::new();
        static INSIDE: AtomicBool = AtomicBool::new(false);
        let runner = std::thread::spawn(|| {
            ONCE.call(|| {
                INSIDE.store(true, Ordering::Release);
                std::thread::sleep(Duration::from_millis(500));
            })
        });
        while !INSIDE.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // SAFETY: the child only uses `ONCE`, a static, `alarm` and `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: as above; the alarm's default action ends a hung child.
            unsafe {
                libc::alarm(5);
                let ran = ONCE.call(|| {});
                libc::_exit(if ran && ONCE.is_done() { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: `pid` is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child did not run the Once itself (wait status {status:#x}; SIGALRM: it hung)"
        );
        assert!(runner.join().unwrap(), "the parent's thread ran it");
        assert!(!ONCE.call(|| panic!("ran twice")));
    }
}
