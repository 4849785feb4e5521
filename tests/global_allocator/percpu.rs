//! The per-CPU sheaves (`src/cpu_sheaf.rs`, `src/rseq.rs`): which mode runs,
//! blocks that wait on a CPU's sheaf and come back from it, the drains, the
//! restartable sequences' descriptors, a migration inside a section (a test
//! build, `--cfg slubmalloc_rseq_window`), and a stress of preemption,
//! migration, signals and remote drains.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Whether this process should run the per-CPU sheaves: the kernel and
/// glibc here have restartable sequences (the development and CI machines
/// do), unless the environment turns them off.
fn percpu_expected() -> bool {
    let off = |var: &str, value: &str| std::env::var(var).is_ok_and(|v| v.contains(value));
    !off("GLIBC_TUNABLES", "glibc.pthread.rseq=0") && !off("SLUBMALLOC_PERCPU", "0")
}

/// A fresh process that goes on (`Some`) in per-CPU mode; in the fallback
/// it checks that the fallback is what runs, and goes no further (nor in
/// debug mode). The crowded programs' tests (`thread_holdings`) start so too.
pub fn with_percpu() -> Option<()> {
    with_percpu_and(&[])
}

/// `with_percpu`, with `env` added to the fresh process's environment.
fn with_percpu_and(env: &[(&str, &str)]) -> Option<()> {
    crate::fresh_process_with(env)?;
    let mode = slubmalloc::stats().totals.percpu_mode;
    assert_eq!(mode, percpu_expected() as u64, "the mode that runs");
    if mode == 0 {
        eprintln!("the fallback runs: the per-CPU sheaves' tests do not apply");
        return None;
    }
    if crate::debug_mode() {
        return None;
    }
    Some(())
}

/// Allocates `n` blocks of `size` bytes, then frees them.
fn batch(size: usize, n: usize) {
    drop(
        (0..n)
            .map(|_| Vec::<u8>::with_capacity(size))
            .collect::<Vec<_>>(),
    )
}

fn class_of(size: usize) -> slubmalloc::CacheStats {
    *slubmalloc::stats().cache_for_size(size).unwrap()
}

/// The mode that runs: per-CPU by default where rseq is registered, the
/// fallback under glibc's tunable and `SLUBMALLOC_PERCPU=0` (each run in a
/// process of its own).
#[test]
fn the_mode_is_per_cpu_unless_rseq_or_the_option_is_off() {
    for env in [
        &[][..],
        &[("SLUBMALLOC_PERCPU", "0")][..],
        &[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")][..],
    ] {
        if std::env::var_os(crate::CHILD_VAR).is_some() {
            break;
        }
        crate::run_in_fresh_process("percpu::mode_of_this_process", env);
    }
}

/// The body of the test above, in each child: the mode is what the
/// environment asks for.
#[test]
fn mode_of_this_process() {
    if std::env::var_os(crate::CHILD_VAR).is_none() {
        return;
    }
    let totals = slubmalloc::stats().totals;
    assert_eq!(totals.percpu_mode, percpu_expected() as u64, "{totals:?}");
}

/// A single thread that allocates a batch far past its sheaf and frees it,
/// over and over: the CPU's sheaf of the class grows by demand (a pop that
/// found it empty, then an overflow) until it holds the batch, which then
/// serves the next round (the thread's own sheaf keeps its capacity); the
/// walk agrees; `trim()` drains every CPU's sheaves, and their capacity
/// goes with them.
#[test]
fn a_batch_past_the_thread_sheaf_waits_on_the_cpu_sheaf() {
    let Some(()) = with_percpu() else {
        return;
    };
    const SIZE: usize = 250;
    let round = || batch(SIZE, 400);
    for _ in 0..8 {
        round();
    }
    // Of each free past a full sheaf, a block of the thread's own slab goes
    // to its slab (`fastpath::free_no_room`); the rest wait on the CPU.
    let c = class_of(SIZE);
    assert!(c.cpu_objects >= 200, "{c:?}");
    assert!(c.cpu_capacity >= c.cpu_objects, "{c:?}");
    // The thread's sheaf keeps its fixed capacity (32 blocks of 256).
    assert_eq!(c.sheaf_capacity, 32, "the thread's sheaf grew");
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
    round();
    let after = class_of(SIZE);
    assert_eq!(
        after.sheaf_flushed, c.sheaf_flushed,
        "a round flushed blocks"
    );
    assert!(after.alloc_sheaf - c.alloc_sheaf >= 200, "{c:?} {after:?}");
    let drains = slubmalloc::stats().totals.cpu_drains;
    slubmalloc::trim();
    let c = class_of(SIZE);
    assert_eq!((c.cpu_objects, c.cpu_capacity), (0, 0), "{c:?}");
    assert!(slubmalloc::stats().totals.cpu_drains > drains);
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
}

/// A thread's sheaf follows the threads per CPU (`sheaf_budget::per_cpu_capacity`):
/// with more than 16 threads per CPU alive (four times the 4 per CPU up to
/// which a sheaf keeps its most) a thread's sheaf of 256-byte blocks, 32 on
/// its own, shrinks at its next overflow to 2 KiB (8 blocks); once those
/// threads are gone it grows back at the next overflow.
#[test]
fn a_threads_sheaf_shrinks_with_many_threads_per_cpu_and_grows_back() {
    let Some(()) = with_percpu() else {
        return;
    };
    const SIZE: usize = 250;
    let round = || batch(SIZE, 200);
    round();
    assert_eq!(class_of(SIZE).sheaf_capacity, 32, "the sheaf's most");
    let crowd = crate::Crowd::of(5 * 4);
    round();
    let c = class_of(SIZE);
    assert_eq!(c.sheaf_capacity, 8, "{} threads parked: {c:?}", crowd.len());
    assert!(c.sheaf_objects <= 8, "{c:?}");
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
    drop(crowd);
    round();
    assert_eq!(class_of(SIZE).sheaf_capacity, 32, "the threads are gone");
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
}

/// The CPUs the calling thread may run on, lowest first.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set, which the kernel fills.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid set of its size.
    let r = unsafe { libc::sched_getaffinity(0, size_of_val(&set), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: every index is below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

/// The rows per CPU (`cpu_stats`): a thread pinned to each of two CPUs
/// leaves a batch of a class of its own on that CPU's sheaves, and that
/// CPU's row holds it; the rows, read with the classes' counters while
/// nothing moves, add up to them (blocks, bytes at the classes' sizes,
/// capacity); `trim` leaves every row empty, with no capacity; the JSON
/// report has a row per CPU.
#[test]
fn each_cpus_row_holds_what_its_threads_left_there_and_the_rows_add_up() {
    let Some(()) = with_percpu() else {
        return;
    };
    let cpus: Vec<usize> = allowed_cpus().into_iter().take(2).collect();
    const SIZES: [usize; 2] = [256, 1024];
    for (&cpu, size) in cpus.iter().zip(SIZES) {
        thread::spawn(move || {
            pin(0, &[cpu]);
            for _ in 0..8 {
                drop(
                    (0..400)
                        .map(|_| Vec::<u8>::with_capacity(size))
                        .collect::<Vec<_>>(),
                );
            }
        })
        .join()
        .unwrap();
    }
    // Room first: nothing allocates between the counters and the rows.
    let mut rows = Vec::with_capacity(1024);
    let s = slubmalloc::stats();
    rows.extend(slubmalloc::cpu_stats());
    for (&cpu, size) in cpus.iter().zip(SIZES) {
        let row = rows.iter().find(|r| r.cpu == cpu as u64);
        let row = row.unwrap_or_else(|| panic!("no row for CPU {cpu}: {rows:?}"));
        assert!(
            row.objects >= 200 && row.bytes >= 200 * size as u64,
            "CPU {cpu}, {size} B: {row:?}"
        );
        assert!(row.capacity_bytes >= row.bytes, "{row:?}");
    }
    let sum = |f: fn(&slubmalloc::CacheStats) -> u64| s.caches().map(f).sum::<u64>();
    assert_eq!(
        (
            rows.iter().map(|r| r.objects).sum::<u64>(),
            rows.iter().map(|r| r.bytes).sum::<u64>(),
            rows.iter().map(|r| r.capacity_bytes).sum::<u64>(),
        ),
        (
            sum(|c| c.cpu_objects),
            sum(|c| c.cpu_objects * c.object_size),
            sum(|c| c.cpu_capacity * c.object_size),
        ),
        "the rows (blocks, bytes, capacity) against the classes' counters: {rows:?}"
    );
    let json = s.to_json();
    for row in &rows {
        let entry = format!(
            "{{\"cpu\":{},\"objects\":{},\"bytes\":{},\"capacity_bytes\":{}}}",
            row.cpu, row.objects, row.bytes, row.capacity_bytes
        );
        assert!(json.contains(&entry), "{entry} not in {json}");
    }
    slubmalloc::trim();
    for row in slubmalloc::cpu_stats() {
        assert_eq!(
            (row.objects, row.capacity_bytes),
            (0, 0),
            "after trim: {row:?}"
        );
    }
}

/// A thread's exit moves its sheaves onto its CPU's: the next thread on
/// that CPU takes them.
#[test]
fn an_exiting_thread_leaves_its_sheaf_on_its_cpu() {
    let Some(()) = with_percpu() else {
        return;
    };
    const SIZE: usize = 100;
    let before = class_of(SIZE);
    thread::spawn(|| {
        let held: Vec<Vec<u8>> = (0..50).map(|_| Vec::with_capacity(SIZE)).collect();
        drop(held);
    })
    .join()
    .unwrap();
    // Every block that went on the thread's sheaf (not those of its own
    // slab freed past a full one, `fastpath::free_no_room`) is on the CPU's.
    let c = class_of(SIZE);
    let through_sheaf = (c.free_sheaf - before.free_sheaf) - (c.alloc_sheaf - before.alloc_sheaf);
    assert!(through_sheaf >= 25, "{before:?} {c:?}");
    assert_eq!(
        c.cpu_objects - before.cpu_objects,
        through_sheaf,
        "{before:?} {c:?}"
    );
    assert_eq!(c.sheaf_flushed, before.sheaf_flushed, "{c:?}");
    assert_eq!(c.sheaf_objects, before.sheaf_objects, "{c:?}");
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
}

/// A process forked while another thread drains the CPUs' sheaves (`trim`
/// in a loop: it holds their lock for most of its time): each child finds
/// the lock free (a region caught mid-drain is reset, `fork::child`),
/// allocates and frees through its CPU's sheaves and drains them itself
/// (its `trim` leaves no block on any CPU), within its alarm; every block
/// it takes is distinct.
#[test]
fn a_child_forked_during_a_drain_drains_again() {
    let Some(()) = with_percpu() else {
        return;
    };
    let stop = Arc::new(AtomicBool::new(false));
    let trimmer = {
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(
                    (0..100)
                        .map(|_| Vec::<u8>::with_capacity(200))
                        .collect::<Vec<_>>(),
                );
                slubmalloc::trim();
            }
        })
    };
    for _ in 0..100 {
        // SAFETY: the child calls only the allocator (which repairs itself
        // in the child) and async-signal-safe functions, then `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: as above.
            unsafe { libc::alarm(10) };
            drop(
                (0..300)
                    .map(|_| Vec::<u8>::with_capacity(200))
                    .collect::<Vec<_>>(),
            );
            slubmalloc::trim();
            // The drain ran: the child's membarrier fence works (the
            // registration is the parent's, inherited with its memory). The
            // CPUs' regions, not the counters: a region reset by the repair
            // leaked blocks that the counters still place on its CPU.
            let drained = slubmalloc::cpu_stats().all(|r| r.objects == 0);
            let again: Vec<Vec<u8>> = (0..300).map(|_| Vec::with_capacity(200)).collect();
            let mut addrs: Vec<usize> = again.iter().map(|v| v.as_ptr() as usize).collect();
            addrs.sort_unstable();
            let distinct = addrs.windows(2).all(|w| w[0] != w[1]);
            // SAFETY: ends the child without running the harness's exit.
            unsafe {
                libc::_exit(if !drained {
                    4
                } else if distinct {
                    0
                } else {
                    3
                })
            };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child ended with status {status:#x} (SIGALRM {}: it hung)",
            libc::SIGALRM
        );
    }
    stop.store(true, Ordering::Relaxed);
    trimmer.join().unwrap();
}

/// Every descriptor of the sections linked into this binary (its
/// `__rseq_cs` section, read in memory, relocated): version and flags 0,
/// the abort address outside the section and preceded by glibc's
/// signature, as the kernel requires of each (else SIGSEGV at the first
/// abort).
#[test]
fn every_rseq_descriptor_is_preceded_by_the_signature() {
    #[repr(C)]
    struct Descriptor {
        version: u32,
        flags: u32,
        start_ip: u64,
        post_commit_offset: u64,
        abort_ip: u64,
    }
    extern "C" {
        static __start___rseq_cs: Descriptor;
        static __stop___rseq_cs: Descriptor;
    }
    // SAFETY: the linker's bounds of the section, an array of descriptors
    // (each 32-byte aligned and 32 bytes long).
    let descriptors = unsafe {
        let start = &raw const __start___rseq_cs;
        let stop = &raw const __stop___rseq_cs;
        std::slice::from_raw_parts(start, stop.offset_from(start) as usize)
    };
    assert!(descriptors.len() >= 3, "{} descriptors", descriptors.len());
    for d in descriptors {
        assert_eq!((d.version, d.flags), (0, 0));
        assert!(d.post_commit_offset > 0 && d.post_commit_offset < 256);
        let end = d.start_ip + d.post_commit_offset;
        assert!(d.abort_ip < d.start_ip || d.abort_ip >= end, "abort inside");
        // SAFETY: the four bytes before the abort handler, in the text.
        let sig = unsafe { ((d.abort_ip - 4) as *const u32).read_unaligned() };
        assert_eq!(sig, 0x5305_3053, "signature before {:#x}", d.abort_ip);
        // SAFETY: as above: the `ud1` whose operand the signature is.
        let ud1 = unsafe { std::slice::from_raw_parts((d.abort_ip - 7) as *const u8, 3) };
        assert_eq!(ud1, [0x0f, 0xb9, 0x3d]);
    }
}

/// Sets the affinity of thread `tid` (0: the caller) to `cpus`.
fn pin(tid: libc::pid_t, cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes into it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        // SAFETY: `cpu` is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid set of its size.
    let r = unsafe { libc::sched_setaffinity(tid, size_of_val(&set), &set) };
    assert_eq!(
        r,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

fn online_cpus() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

thread_local! {
    /// Whether a signal handler may allocate now: the thread is outside
    /// the allocator. slubmalloc is not async-signal-safe (no allocator
    /// is), so the stress's handler allocates only where its thread set it.
    static OUTSIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

static HANDLER_ALLOCS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_prof(_: libc::c_int) {
    if OUTSIDE.with(|o| o.get()) {
        let v = std::hint::black_box(vec![7u8; 48]);
        assert_eq!(v[47], 7);
        drop(v);
        HANDLER_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

/// Many threads on two CPUs (or one), a migrator flipping their
/// affinities, a profiling timer (its handler allocating), and a thread
/// trimming (draining every CPU's sheaves remotely): every block is handed
/// out once (a set of the live blocks, and each block's contents checked
/// before its free), sections restarted, and the counters agree with the
/// walk after.
#[test]
fn preemption_migration_signals_and_drains_lose_or_double_no_block() {
    let Some(()) = with_percpu() else {
        return;
    };
    let cpus: Vec<usize> = (0..online_cpus().min(2)).collect();
    let live = Arc::new(Mutex::new(HashSet::<usize>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let tids = Arc::new(Mutex::new(Vec::<libc::pid_t>::new()));
    // SAFETY: installs a handler that allocates only where its thread said
    // it may (`OUTSIDE`); the timer counts the process's CPU time.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_prof as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        assert_eq!(libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()), 0);
        let tick = libc::timeval {
            tv_sec: 0,
            tv_usec: 200,
        };
        let it = libc::itimerval {
            it_interval: tick,
            it_value: tick,
        };
        assert_eq!(
            libc::setitimer(libc::ITIMER_PROF, &it, std::ptr::null_mut()),
            0
        );
    }
    let restarts = slubmalloc::stats().totals.rseq_restarts;
    let workers: Vec<_> = (0..16u64)
        .map(|w| {
            let (live, stop, tids) = (live.clone(), stop.clone(), tids.clone());
            thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tids.lock().unwrap().push(unsafe { libc::gettid() });
                let mut held: Vec<(Vec<u64>, u64)> = Vec::new();
                let mut seed = w + 1;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let batch = 1 + (seed % 200) as usize;
                    for _ in 0..batch {
                        let words = [2usize, 4, 8, 16, 32][(seed % 5) as usize];
                        n += 1;
                        let tag = w << 48 | n;
                        let v = vec![tag; words];
                        assert!(
                            live.lock().unwrap().insert(v.as_ptr() as usize),
                            "handed out twice"
                        );
                        held.push((v, tag));
                    }
                    OUTSIDE.with(|o| o.set(true));
                    for (v, tag) in &held {
                        assert!(v.iter().all(|x| x == tag), "a live block was overwritten");
                    }
                    OUTSIDE.with(|o| o.set(false));
                    // Free in allocation order, as the batch shape does.
                    for (v, _) in held.drain(..) {
                        assert!(live.lock().unwrap().remove(&(v.as_ptr() as usize)));
                        drop(v);
                    }
                }
            })
        })
        .collect();
    let migrator = {
        let (stop, tids, cpus) = (stop.clone(), tids.clone(), cpus.clone());
        thread::spawn(move || {
            let mut flip = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for (i, &tid) in tids.lock().unwrap().iter().enumerate() {
                    let cpu = cpus[(i + flip) % cpus.len()];
                    // A thread that has exited is gone: ESRCH, ignored.
                    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                    // SAFETY: as in `pin`.
                    unsafe {
                        libc::CPU_SET(cpu, &mut set);
                        libc::sched_setaffinity(tid, size_of_val(&set), &set);
                    }
                }
                flip += 1;
                thread::sleep(Duration::from_micros(100));
            }
        })
    };
    let trimmer = {
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                slubmalloc::trim();
                thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in workers {
        t.join().unwrap();
    }
    migrator.join().unwrap();
    trimmer.join().unwrap();
    // SAFETY: stops the timer.
    unsafe {
        let zero: libc::itimerval = std::mem::zeroed();
        libc::setitimer(libc::ITIMER_PROF, &zero, std::ptr::null_mut());
    }
    assert!(live.lock().unwrap().is_empty());
    let totals = slubmalloc::stats().totals;
    assert!(
        totals.rseq_restarts > restarts,
        "no section restarted: {totals:?}"
    );
    assert!(totals.cpu_drains > 0, "{totals:?}");
    assert!(
        HANDLER_ALLOCS.load(Ordering::Relaxed) > 0,
        "the handler never allocated"
    );
    eprintln!(
        "restarts {}, drains {}, handler allocations {}",
        totals.rseq_restarts - restarts,
        totals.cpu_drains,
        HANDLER_ALLOCS.load(Ordering::Relaxed)
    );
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
}

/// A thread inside a push section (held there by the test build's window,
/// `--cfg slubmalloc_rseq_window`) is moved to another CPU: the kernel
/// aborts the section, it restarts on the new CPU and commits there; the
/// first CPU's sheaf is as it was, and no block is lost or doubled.
/// `ci/test.sh` runs it in that build.
#[cfg(slubmalloc_rseq_window)]
#[test]
fn a_section_migrated_inside_restarts_on_the_new_cpu() {
    use std::sync::atomic::AtomicU8;
    extern "C" {
        static slubmalloc_rseq_window_thread: AtomicU64;
        static slubmalloc_rseq_window_inside: AtomicU8;
        static slubmalloc_rseq_window_gate: AtomicU8;
    }
    // No purge: it would drain the CPUs' sheaves that went idle.
    let Some(()) = with_percpu_and(&[("SLUBMALLOC_PURGE_DELAY_MS", "86400000")]) else {
        return;
    };
    assert!(online_cpus() >= 2, "the test needs two CPUs");
    // SAFETY: the window's words, atomics the test build exports.
    let (target, inside, gate) = unsafe {
        (
            &slubmalloc_rseq_window_thread,
            &slubmalloc_rseq_window_inside,
            &slubmalloc_rseq_window_gate,
        )
    };
    const SIZE: usize = 500;
    // Warm the class, its CPUs' sheaves mapped, and empty them.
    pin(0, &[0]);
    drop(
        (0..100)
            .map(|_| Vec::<u8>::with_capacity(SIZE))
            .collect::<Vec<_>>(),
    );
    pin(0, &[1]);
    drop(
        (0..100)
            .map(|_| Vec::<u8>::with_capacity(SIZE))
            .collect::<Vec<_>>(),
    );
    // Blocks of the main thread's slabs: the worker's frees put every one
    // on its sheaf (a block of its own slab would go to the slab past a
    // full sheaf).
    // Fewer than CPU 1's sheaf's first capacity (64 blocks), so that none
    // goes past it to the barn.
    let held: Vec<Vec<u8>> = (0..48).map(|_| Vec::with_capacity(SIZE)).collect();
    let addrs: Vec<usize> = held.iter().map(|v| v.as_ptr() as usize).collect();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = thread::spawn(move || {
        pin(0, &[0]);
        // Past the objects a cold class takes from shared slabs, the class
        // is warm: the thread's heap takes a sheaf of it. Then every CPU's
        // sheaves are drained (their capacity with them), this thread's
        // sheaf flushed.
        drop(
            (0..40)
                .map(|_| Vec::<u8>::with_capacity(SIZE))
                .collect::<Vec<_>>(),
        );
        slubmalloc::trim();
        // CPU 0's sheaf of the class grows again and keeps room: a section
        // that committed there after the move would be seen. The thread's
        // own sheaf is flushed, so that the first push, the one held in the
        // window, moves a block of the batch.
        drop(
            (0..40)
                .map(|_| Vec::<u8>::with_capacity(SIZE))
                .collect::<Vec<_>>(),
        );
        slubmalloc::thread_idle();
        let tp: u64;
        // SAFETY: reads the thread pointer.
        unsafe { std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp) };
        // SAFETY: gettid has no preconditions.
        tid_tx.send((unsafe { libc::gettid() }, tp)).unwrap();
        go_rx.recv().unwrap();
        // The first overflow of the thread's sheaf pushes into the window.
        drop(held);
    });
    let (tid, tp) = tid_rx.recv().unwrap();
    let before = class_of(SIZE);
    let restarts = slubmalloc::stats().totals.rseq_restarts;
    inside.store(0, Ordering::SeqCst);
    gate.store(0, Ordering::SeqCst);
    target.store(tp, Ordering::SeqCst);
    go_tx.send(()).unwrap();
    let wait = |what: &str, done: &dyn Fn() -> bool| {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "timed out waiting: {what}");
            thread::yield_now();
        }
    };
    wait("the worker inside the section on CPU 0", &|| {
        inside.load(Ordering::SeqCst) == 1
    });
    inside.store(0, Ordering::SeqCst);
    pin(tid, &[1]);
    // The section restarts from its arming on CPU 1 and comes back to the
    // window.
    wait("the restart", &|| {
        slubmalloc::stats().totals.rseq_restarts > restarts && inside.load(Ordering::SeqCst) == 1
    });
    target.store(0, Ordering::SeqCst);
    gate.store(1, Ordering::SeqCst);
    worker.join().unwrap();
    assert!(slubmalloc::stats().totals.rseq_restarts > restarts);
    // The batch, and at its exit the rest of the worker's sheaf, went to
    // CPU 1's sheaf.
    let c = class_of(SIZE);
    assert_eq!(c.cpu_objects - before.cpu_objects, 48, "{c:?}");
    assert_eq!(slubmalloc::check_stats(), 0, "the walk disagrees");
    // The main thread's allocations take its own slab's free list first,
    // then its CPU's sheaf: on CPU 0 none of the batch comes back, on
    // CPU 1 all of it, each block once.
    pin(0, &[0]);
    let on_0: Vec<Vec<u8>> = (0..1000).map(|_| Vec::with_capacity(SIZE)).collect();
    assert!(
        on_0.iter().all(|v| !addrs.contains(&(v.as_ptr() as usize))),
        "CPU 0 had the batch"
    );
    pin(0, &[1]);
    let on_1: Vec<Vec<u8>> = (0..1000).map(|_| Vec::with_capacity(SIZE)).collect();
    let set: HashSet<usize> = on_0
        .iter()
        .chain(&on_1)
        .map(|v| v.as_ptr() as usize)
        .collect();
    assert_eq!(set.len(), 2000, "a block handed out twice");
    assert!(
        addrs.iter().all(|a| set.contains(a)),
        "a block of the batch was lost"
    );
}
