//! The background purger: a thread that gives free memory back to the
//! kernel when its purge deadline passes, so that a multi-threaded program
//! that frees and then goes idle (or whose threads free and exit) does not
//! keep it resident. It runs only while the program itself has other
//! threads (`purge::program_has_other_threads`): a single-threaded program
//! never gets a thread from the allocator (the trim bound gives its memory
//! back at `free` time, `purge`). Started when a purge is first pending or
//! the program's mappings grow past 8 MiB, it stays while the program has
//! other threads, asleep while nothing is pending, and leaves once the
//! program is down to one thread (after a deadline less than
//! `LAST_PURGE_WAIT_NS` away); it blocks every signal, holds no file
//! descriptor, and never allocates. `SLUBMALLOC_BACKGROUND_PURGE=0` turns
//! it off; no value starts it in a single-threaded program.
//!
//! It is started only from points that hold no allocator lock and that no
//! libc lock `pthread_create` needs can be around: the allocation slow path
//! and the thread-exit destructor. Never from `free`: glibc frees a dead
//! thread's TLS with its stack-cache lock held, and `pthread_create` takes
//! that lock. `pthread_create` itself allocates (the new thread's TLS
//! vector); those allocations see the purger STARTING and start nothing.

use core::ptr;

use crate::heap::DEAD;
use crate::os;
use crate::purge;
use crate::purge::give_back::{self, CountedIn};
use crate::purge::pass::PurgeBy;
use crate::sys;
use crate::tls;

/// Starts the purger if one is wanted (`purge::purger_wanted`). The caller
/// holds no allocator lock. Cost when none is wanted: one load in a
/// single-threaded program, two once the purger runs.
#[inline]
pub fn start_if_wanted() {
    if purge::purger_wanted() {
        start();
    }
}

#[cold]
#[inline(never)]
fn start() {
    if !purge::claim_start() {
        return;
    }
    let _keep = os::ErrnoGuard::save();
    // SAFETY: plain C calls on values on our stack: the attribute object is
    // initialised before use and destroyed after; the signal sets are
    // filled before they are read. The new thread starts in `purger`, which
    // never unwinds.
    let created = unsafe {
        let mut attr: sys::pthread_attr_t = core::mem::zeroed();
        let mut all: sys::sigset_t = core::mem::zeroed();
        let mut old: sys::sigset_t = core::mem::zeroed();
        sys::pthread_attr_init(&mut attr);
        sys::pthread_attr_setdetachstate(&mut attr, sys::PTHREAD_CREATE_DETACHED);
        // The new thread inherits the mask: the program's signals are never
        // delivered to the purger.
        sys::sigfillset(&mut all);
        sys::pthread_sigmask(sys::SIG_SETMASK, &all, &mut old);
        let mut thread: sys::pthread_t = 0;
        let rc = sys::pthread_create(&mut thread, &attr, purger, ptr::null_mut());
        sys::pthread_sigmask(sys::SIG_SETMASK, &old, ptr::null_mut());
        sys::pthread_attr_destroy(&mut attr);
        rc == 0
    };
    purge::start_done(created);
}

/// Once the program is down to one thread, the purger still keeps a
/// deadline this close (what the other threads freed before they exited,
/// at the default purge delay), then leaves; a later one is left to
/// the next slow path and to the trim bound.
const LAST_PURGE_WAIT_NS: u64 = 1_000_000_000;

/// The purger's body: sleeps until the deadline and purges; with nothing
/// pending, sleeps until `schedule` wakes it. Leaves when the program is
/// down to one thread or none (the exit that makes it so wakes it) and no
/// deadline is within `LAST_PURGE_WAIT_NS`, so that a program whose other
/// threads have gone is single-threaded again and that it never keeps a
/// process alive for long.
extern "C" fn purger(_: *mut sys::c_void) -> *mut sys::c_void {
    // Whatever this thread's libc does on its behalf (its exit frees TLS of
    // other threads) goes through the orphan heap: it never gets a heap of
    // its own, whose exit destructor would not run.
    tls::set(DEAD);
    // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
    unsafe { sys::prctl(sys::PR_SET_NAME, c"slubmalloc-purge".as_ptr()) };
    loop {
        // Before what it waits for is read: a wake-up after this returns
        // the wait below at once.
        let seq = purge::wake_seq();
        let others = purge::program_has_other_threads();
        let now = purge::now_ns();
        let at = purge::deadline();
        if !others && (at == 0 || at - now.min(at) > LAST_PURGE_WAIT_NS) {
            if purge::purger_stops() {
                return ptr::null_mut();
            }
            // Its creator has not reported yet: look again shortly.
            purge::purger_wait(seq, 1_000_000);
            continue;
        }
        if at == 0 {
            purge::purger_wait(seq, u64::MAX);
        } else if now < at {
            purge::purger_wait(seq, at - now);
        } else if give_back::purge_if_due(CountedIn::OrphanHeap, PurgeBy::Purger) {
            purge::count_background_purge();
        }
    }
}
