//! Heap misuse stops the process. Every case is one run of
//! `tests/c/misuse.c CASE WHERE [OP]` with the allocator preloaded (its
//! header lists the cases): the program prints the address it is about to
//! misuse, then misuses it; the test expects death by SIGABRT after exactly
//! one line on stderr that starts with "slubmalloc: ", names the misuse and
//! carries that address. A case runs in every allocator state it can meet
//! (WHERE): a cold class (blocks from shared slabs under the node lock), a
//! warm one (an owned active slab: the fast paths), and from another thread
//! (with a heap already, with none yet, with a cancellation pending), and
//! in a thread past the allocator's own thread exit (the orphan heap), so
//! that a check moved or removed on any path fails a test named for the
//! misuse; a failure names the state. The README's "Misuse" section maps
//! each check of the allocator to the test that fails without it.
//!
//! `SLUBMALLOC_DEBUG=1` must also stop a one-byte overflow (red zone checked
//! on free) and a write after free (poison checked on reuse), and every
//! double free again (its frees take the slow paths); blocks sampled by the
//! heap profile live in slabs of their own, whose frees are checked too. The
//! controls: a correct multithreaded program is not stopped, and blocks
//! that come back off the free lists can be freed unwritten by any thread.
//!
//! Frees that name the block's size (C23's `free_sized`, C++'s sized
//! deletes) run programs of their own (`sized_free.c`, `sized_delete.cpp`,
//! and two programs that replace `operator new`), in a section below.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

const SIGABRT: i32 = 6;

/// Every allocator state a misuse can meet (`misuse.c`'s WHERE; `cancel`
/// has a test of its own).
const EVERYWHERE: &[&str] = &["cold", "warm", "remote", "remote_new", "exiting"];
/// The states of a misuse in one thread, and from another.
const COLD_WARM_REMOTE: &[&str] = &["cold", "warm", "remote"];

const DOUBLE_FREE: &[&str] = &["double free"];
const INVALID: &[&str] = &["invalid pointer"];
/// A freed block overwritten: its free-list link, or its tag while it waits
/// in a sheaf.
const CORRUPTED: &[&str] = &["corrupted free list", "free list corrupted", "sheaf tag"];

const DEBUG: &[(&str, &str)] = &[("SLUBMALLOC_DEBUG", "1")];
/// The heap profile, sampling every block (a sampled block lives in a slab
/// of the profile heap), writing its file nowhere.
const PROFILE_EVERY_BLOCK: &[(&str, &str)] = &[
    ("SLUBMALLOC_PROF", "1"),
    ("SLUBMALLOC_PROF_RATE", "1"),
    ("SLUBMALLOC_PROF_FILE", "/dev/null"),
];

/// Compiles a C program once per test binary (tests run in parallel; one
/// compiling a program while another runs it would fail).
fn program(name: &'static str) -> PathBuf {
    static BUILT: [(&str, OnceLock<PathBuf>); 2] = [
        ("misuse", OnceLock::new()),
        ("misuse_none_threads", OnceLock::new()),
    ];
    let (_, once) = BUILT.iter().find(|(n, _)| *n == name).unwrap();
    once.get_or_init(|| common::compile_c(name, &[])).clone()
}

/// The address the program printed (its first stdout line, `%p`).
fn printed_address(o: &Output) -> u64 {
    let out = common::stdout(o);
    let line = out.lines().next().unwrap_or("");
    let hex = line.trim().strip_prefix("0x").unwrap_or_else(|| {
        panic!(
            "the program printed no address before the misuse\n{}",
            common::describe(o)
        )
    });
    u64::from_str_radix(hex, 16)
        .unwrap_or_else(|e| panic!("bad address {line:?}: {e}\n{}", common::describe(o)))
}

/// Every `0x...` number in `line`.
fn hex_numbers(line: &str) -> Vec<u64> {
    let mut found = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("0x") {
        rest = &rest[at + 2..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
        if let Ok(n) = u64::from_str_radix(&digits, 16) {
            found.push(n);
        }
        rest = &rest[digits.len()..];
    }
    found
}

/// Asserts the process died by SIGABRT at its misuse (it never printed
/// "survived") after exactly one "slubmalloc: " line on stderr that
/// contains one of `names` and an address in `lo..=hi`.
fn assert_stopped(what: &str, o: &Output, names: &[&str], lo: u64, hi: u64) {
    assert!(
        !common::stdout(o).contains("survived"),
        "{what}: the program ran past its misuse\n{}",
        common::describe(o)
    );
    assert_stopped_by_exit(what, o, names, lo, hi);
}

/// `assert_stopped`, but the program may have run past its misuse: the
/// stop may come later, at exit at the latest.
fn assert_stopped_by_exit(what: &str, o: &Output, names: &[&str], lo: u64, hi: u64) {
    assert_eq!(
        o.status.signal(),
        Some(SIGABRT),
        "{what}: expected death by SIGABRT\n{}",
        common::describe(o)
    );
    let err = common::stderr(o);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("slubmalloc: "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: expected exactly one \"slubmalloc: \" line\n{}",
        common::describe(o)
    );
    let line = lines[0];
    let lower = line.to_lowercase();
    assert!(
        names.iter().any(|n| lower.contains(n)),
        "{what}: the message does not name the misuse (one of {names:?}): {line:?}"
    );
    let addrs = hex_numbers(line);
    assert!(
        addrs.iter().any(|&a| (lo..=hi).contains(&a)),
        "{what}: the message does not carry the address {lo:#x} (found {addrs:x?}): {line:?}"
    );
}

/// A misuse that hangs fails its test instead of blocking the run.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `misuse case where op` preloaded with `env`.
fn run(case: &str, place: &str, op: &str, env: &[(&str, &str)]) -> Output {
    common::run_guarded(&program("misuse"), &[case, place, op], true, env, LIMIT)
}

/// For the cases whose `flush` (tests/c/misuse.c: frees until the sheaf
/// overflows and flushes its older half to the slabs) per-CPU mode does not
/// make (the older half waits on the CPU's sheaf): they run without it;
/// `per_cpu_mode_stops_them_by_exit` runs them in per-CPU mode.
const PER_THREAD_SHEAVES: &[(&str, &str)] = &[("SLUBMALLOC_PERCPU", "0")];

/// In per-CPU mode the cases whose flush to the slabs the threads' sheaves
/// no longer make (their overflow goes to the CPU's sheaf) are stopped
/// later, but stopped: when the block leaves the CPU's sheaf or a thread's,
/// at exit at the latest (`sheaf::check_at_exit` checks the CPUs' sheaves).
#[test]
fn per_cpu_mode_stops_them_by_exit() {
    for (case, op, names) in [
        ("double_free_sheaf_between", "flush", DOUBLE_FREE),
        ("double_free_sheaf_flushed", "flush", DOUBLE_FREE),
        ("sheaf_tag_written", "flush", SHEAF_TAG),
    ] {
        let o = run(case, "warm", op, &[]);
        let addr = printed_address(&o);
        let what = format!("misuse {case} warm {op} (per-CPU mode)");
        assert_stopped_by_exit(&what, &o, names, addr, addr);
    }
}

/// Runs `case` with `op` in each of `places` and expects each run stopped
/// for one of `names`, naming a byte in `0..=slack` past the printed
/// address (0: exactly it).
fn stopped_with(
    case: &str,
    places: &[&str],
    op: &str,
    env: &[(&str, &str)],
    names: &[&str],
    slack: u64,
) {
    for place in places {
        stopped_in(case, place, op, env, names, slack);
    }
}

/// `stopped_with` in one `place`; the run's output, for further checks.
fn stopped_in(
    case: &str,
    place: &str,
    op: &str,
    env: &[(&str, &str)],
    names: &[&str],
    slack: u64,
) -> Output {
    let o = run(case, place, op, env);
    let what = format!("misuse {case} {place} {op} (env {env:?})");
    let addr = printed_address(&o);
    assert_stopped(&what, &o, names, addr, addr + slack);
    o
}

/// `stopped_with` for `free`, in the default mode, naming the address.
fn free_stopped(case: &str, places: &[&str], names: &[&str]) {
    stopped_with(case, places, "free", &[], names, 0)
}

/// `free_stopped` in one `place`, where the stop may come after the
/// program ran past its misuse, at exit at the latest.
fn free_stopped_by_exit(case: &str, place: &str, names: &[&str]) {
    let o = run(case, place, "free", &[]);
    let addr = printed_address(&o);
    let what = format!("misuse {case} {place} free");
    assert_stopped_by_exit(&what, &o, names, addr, addr);
}

// ---------------------------------------------------------------------------
// Double frees

#[test]
fn double_free_twice_in_a_row_is_stopped() {
    free_stopped("double_free", EVERYWHERE, DOUBLE_FREE);
    // Both frees past a full sheaf, into the thread's own slab
    // (`free_to_slab`), which reads the block.
    free_stopped("double_free_active_slab", &["warm"], DOUBLE_FREE);
}

#[test]
fn double_free_with_another_free_between_is_stopped() {
    free_stopped(
        "double_free_between",
        &["cold", "remote", "remote_new", "exiting"],
        DOUBLE_FREE,
    );
    // Warm, both frees of the block go into the sheaf, which reads nothing
    // of it, and the program runs on past the second: the block is caught
    // when it leaves the sheaf, here at exit (the pop and the flush:
    // `double_free_in_a_sheaf_is_stopped_before_the_block_is_handed_out_twice`).
    free_stopped_by_exit("double_free_between", "warm", DOUBLE_FREE);
}

#[test]
fn double_free_followed_by_an_immediate_exit_is_stopped() {
    free_stopped("double_free_exit", EVERYWHERE, DOUBLE_FREE);
}

#[test]
fn double_free_after_another_threads_free_is_stopped() {
    free_stopped(
        "double_free_after_remote",
        &["cold", "remote", "remote_new", "exiting"],
        DOUBLE_FREE,
    );
    // Warm, the other thread's exit flushed the block onto its slab's
    // remote list, and this thread's free puts it in the sheaf unread: the
    // link is found when it leaves the sheaf, here at exit.
    free_stopped_by_exit("double_free_after_remote", "warm", DOUBLE_FREE);
}

#[test]
fn double_free_in_a_slab_that_filled_up_is_stopped() {
    free_stopped("double_free_full_slab", EVERYWHERE, DOUBLE_FREE);
}

#[test]
fn double_free_of_a_block_flushed_back_to_its_slab_is_stopped() {
    free_stopped(
        "double_free_flushed",
        &["cold", "remote", "remote_new", "exiting"],
        DOUBLE_FREE,
    );
    // Warm, the trim listed the block's slab: the second free goes into the
    // sheaf, which reads nothing of the block, and the program runs on past
    // it. The block, on its slab's free list, is caught when it leaves the
    // sheaf: here at exit (the pop and the flush:
    // `double_free_into_a_sheaf_of_a_block_flushed_back_to_its_slab_is_stopped`).
    free_stopped_by_exit("double_free_flushed", "warm", DOUBLE_FREE);
}

#[test]
fn double_free_of_a_block_whose_slab_went_back_to_its_segment_is_stopped() {
    free_stopped("double_free_emptied", EVERYWHERE, DOUBLE_FREE);
}

#[test]
fn double_free_of_a_large_block_is_stopped() {
    free_stopped("double_free_large", &["cold", "remote"], DOUBLE_FREE);
}

/// Until its slabs serve again: a thread started between the two frees
/// takes a slab for its first blocks, the freed span's first one (a dirty
/// free slab, of the segment freed into last), and the second free is one
/// of a live block of that slab's, as a double free of a small block whose
/// slab went back to its segment and was taken again.
#[test]
fn double_free_of_a_medium_block_is_stopped() {
    const MEDIUM: &[&str] = &["double free of a medium block"];
    const NO_THREAD_STARTED: &[&str] = &["cold", "warm", "exiting"];
    free_stopped("double_free_medium", NO_THREAD_STARTED, MEDIUM);
    stopped_with(
        "double_free_medium",
        &["cold", "warm"],
        "free",
        PROFILE_EVERY_BLOCK,
        MEDIUM,
        0,
    );
}

#[test]
fn debug_mode_stops_every_double_free() {
    for case in [
        "double_free",
        "double_free_between",
        "double_free_after_remote",
        "double_free_full_slab",
        "double_free_flushed",
        "double_free_emptied",
    ] {
        stopped_with(case, COLD_WARM_REMOTE, "free", DEBUG, DOUBLE_FREE, 0);
    }
}

#[test]
fn double_free_of_a_block_the_heap_profile_sampled_is_stopped() {
    for case in ["double_free", "double_free_between"] {
        stopped_with(
            case,
            COLD_WARM_REMOTE,
            "free",
            PROFILE_EVERY_BLOCK,
            DOUBLE_FREE,
            0,
        );
    }
}

// ---------------------------------------------------------------------------
// Double frees that meet a sheaf (`src/sheaf.rs`): a warm class's free of a
// block of any slab goes into the thread's sheaf while it has room, tagged
// and unread; the block is checked when it leaves the sheaf.

/// All the states, and with another thread the only one with a heap: the
/// sheaf cases' frees by another thread meet the free slow path.
const WARM_REMOTE: &[&str] = &["warm", "remote", "remote_new"];
const SHEAF_TAG: &[&str] = &["sheaf tag"];

/// `stopped_with`, and no block handed out twice before the stop (the
/// program reports one: "handed out ... twice").
fn stopped_before_handed_out_twice(case: &str, places: &[&str], op: &str, names: &[&str]) {
    for place in places {
        let o = stopped_in(case, place, op, &[], names, 0);
        assert!(
            !common::stdout(&o).contains("handed out"),
            "misuse {case} {place} {op}: a block was handed out twice\n{}",
            common::describe(&o)
        );
    }
}

#[test]
fn double_free_into_a_sheaf_twice_in_a_row_is_stopped() {
    // Warm: the sheaf's top; another thread: its free slow path finds the
    // tag of a block that waits in this thread's sheaf.
    free_stopped("double_free_sheaf", EVERYWHERE, DOUBLE_FREE);
}

#[test]
fn double_free_in_a_sheaf_is_stopped_before_the_block_is_handed_out_twice() {
    stopped_before_handed_out_twice(
        "double_free_sheaf_between",
        EVERYWHERE,
        "alloc",
        DOUBLE_FREE,
    );
}

#[test]
fn double_free_in_a_sheaf_is_stopped_by_the_flush_that_meets_it() {
    for op in ["flush", "trim"] {
        let env = if op == "flush" {
            PER_THREAD_SHEAVES
        } else {
            &[]
        };
        stopped_with(
            "double_free_sheaf_between",
            &["warm"],
            op,
            env,
            DOUBLE_FREE,
            0,
        );
    }
}

#[test]
fn double_free_in_a_sheaf_is_stopped_at_process_exit() {
    stopped_with(
        "double_free_sheaf_between",
        &["warm"],
        "exit",
        &[],
        DOUBLE_FREE,
        0,
    );
}

#[test]
fn double_free_into_a_sheaf_of_a_block_flushed_back_to_its_slab_is_stopped() {
    stopped_before_handed_out_twice(
        "double_free_sheaf_flushed",
        EVERYWHERE,
        "alloc",
        DOUBLE_FREE,
    );
    for op in ["flush", "trim", "exit"] {
        let env = if op == "flush" {
            PER_THREAD_SHEAVES
        } else {
            &[]
        };
        stopped_with(
            "double_free_sheaf_flushed",
            &["warm"],
            op,
            env,
            DOUBLE_FREE,
            0,
        );
    }
}

#[test]
fn double_free_of_a_block_in_another_threads_sheaf_is_stopped() {
    // Through the free slow path (cold, remote), or into this thread's
    // active slab past a full sheaf (`full`). Not warm with room in the
    // sheaf: both frees then go into sheaves, neither reading the block,
    // and with the other thread alive at exit only a pop or a flush of one
    // of them would meet it (`double_free_two_sheaves`).
    free_stopped(
        "double_free_other_sheaf",
        &["cold", "remote", "remote_new"],
        DOUBLE_FREE,
    );
    stopped_with(
        "double_free_other_sheaf",
        &["warm"],
        "full",
        &[],
        DOUBLE_FREE,
        0,
    );
}

#[test]
fn double_free_into_two_threads_sheaves_is_stopped_before_the_block_is_handed_out_twice() {
    // Warm, each free goes into a sheaf unread; this thread's allocation
    // hands the block out (its tag cleared), the other thread's pop stops.
    stopped_before_handed_out_twice(
        "double_free_two_sheaves",
        &["cold", "warm"],
        "free",
        DOUBLE_FREE,
    );
    let o = run("double_free_two_sheaves", "warm", "free", &[]);
    assert!(
        common::stdout(&o).contains("malloc returned it"),
        "the block did not go through this thread's sheaf\n{}",
        common::describe(&o)
    );
}

#[test]
fn a_write_over_the_sheaf_tag_of_a_freed_block_is_stopped() {
    // Bytes 8..16 of a block in a sheaf, written by this thread or another;
    // checked as the block leaves the sheaf: handed out, flushed, at exit.
    stopped_before_handed_out_twice("sheaf_tag_written", WARM_REMOTE, "alloc", SHEAF_TAG);
    for op in ["flush", "trim", "exit"] {
        let env = if op == "flush" {
            PER_THREAD_SHEAVES
        } else {
            &[]
        };
        stopped_with("sheaf_tag_written", &["warm"], op, env, SHEAF_TAG, 0);
    }
}

// ---------------------------------------------------------------------------
// Pointers that are not the start of a live block

#[test]
fn free_of_an_interior_pointer_is_stopped() {
    free_stopped("interior", EVERYWHERE, INVALID);
    // Past a full sheaf, into the thread's own slab (`free_to_slab`).
    stopped_with("interior_active_slab", &["warm"], "full", &[], INVALID, 0);
    free_stopped("interior_large", &["cold", "remote"], INVALID);
    free_stopped("interior_medium", EVERYWHERE, INVALID);
    stopped_with(
        "interior",
        COLD_WARM_REMOTE,
        "free",
        PROFILE_EVERY_BLOCK,
        INVALID,
        0,
    );
}

#[test]
fn free_of_a_medium_blocks_later_slab_is_stopped() {
    free_stopped("span_tail", EVERYWHERE, INVALID);
}

#[test]
fn free_of_a_slot_never_handed_out_is_stopped() {
    free_stopped("never_carved", EVERYWHERE, INVALID);
    stopped_with(
        "never_carved",
        COLD_WARM_REMOTE,
        "free",
        PROFILE_EVERY_BLOCK,
        INVALID,
        0,
    );
}

#[test]
fn misuse_in_a_thread_with_a_cancellation_pending_still_stops_the_process_with_its_message() {
    free_stopped("never_carved", &["cancel"], INVALID);
}

#[test]
fn free_of_memory_slubmalloc_never_handed_out_is_stopped() {
    for case in ["stack", "global", "made_up", "foreign_mmap"] {
        free_stopped(case, &["cold", "remote"], INVALID);
    }
}

#[test]
fn realloc_and_usable_size_of_an_invalid_pointer_are_stopped() {
    for op in ["realloc", "usable"] {
        for case in ["interior", "never_carved", "interior_medium", "span_tail"] {
            stopped_with(case, COLD_WARM_REMOTE, op, &[], INVALID, 0);
        }
        // In one thread: see `double_free_of_a_medium_block_is_stopped`.
        stopped_with("double_free_medium", &["cold", "warm"], op, &[], INVALID, 0);
        // Not in a segment: the message names the call.
        let names: &[&str] = match op {
            "realloc" => &["realloc of an invalid pointer"],
            _ => &["malloc_usable_size of an invalid pointer"],
        };
        for case in ["interior_large", "stack", "made_up"] {
            stopped_with(case, &["cold"], op, &[], names, 0);
        }
    }
}

/// What `realloc` and `malloc_usable_size` of a freed small block stop
/// with.
fn freed_block(op: &str) -> &'static [&'static str] {
    match op {
        "realloc" => &["realloc of a freed block"],
        _ => &["malloc_usable_size of a freed block"],
    }
}

/// A freed small block, wherever it is, given to `realloc` (in place, were
/// it live) or `malloc_usable_size`: in a sheaf, its tag (warm); on its
/// slab's list, its link (cold; warm after a trim, or freed by another
/// thread); in a slab gone back to its segment (emptied). The checks of
/// the block's state are `live_block`'s.
#[test]
fn realloc_and_usable_size_of_a_freed_block_are_stopped() {
    for op in ["realloc", "usable"] {
        for case in [
            "double_free",
            "double_free_flushed",
            "double_free_after_remote",
            "double_free_emptied",
        ] {
            stopped_with(case, COLD_WARM_REMOTE, op, &[], freed_block(op), 0);
        }
    }
}

/// As `realloc_and_usable_size_of_a_freed_block_are_stopped`, in debug
/// mode (a freed block: its link, the rest poisoned; the size word the
/// usable size comes from is poison) and for blocks the heap profile
/// sampled.
#[test]
fn realloc_and_usable_size_of_a_freed_block_are_stopped_in_debug_mode_and_sampled() {
    for op in ["realloc", "usable"] {
        for env in [DEBUG, PROFILE_EVERY_BLOCK] {
            for case in ["double_free", "double_free_emptied"] {
                stopped_with(case, &["cold", "warm"], op, env, freed_block(op), 0);
            }
        }
    }
}

/// The same from Rust, slubmalloc as the global allocator
/// (tests/programs/freed_block.rs): `slubmalloc::usable_size` and
/// `std::alloc::realloc` of a freed block, of a class cold and warm, in
/// debug mode too.
#[test]
fn a_rust_programs_usable_size_and_realloc_of_a_freed_block_are_stopped() {
    let exe = common::rust_program("freed_block");
    for op in ["usable", "realloc"] {
        for env in [&[][..], DEBUG] {
            for place in ["cold", "warm"] {
                let o = common::run_guarded(&exe, &[place, op], false, env, LIMIT);
                let what = format!("freed_block {place} {op} (env {env:?})");
                let addr = printed_address(&o);
                assert_stopped(&what, &o, freed_block(op), addr, addr);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Overwritten free lists

#[test]
fn an_allocation_that_pops_a_block_whose_link_was_overwritten_is_stopped() {
    stopped_with("overwritten_link", EVERYWHERE, "alloc", &[], CORRUPTED, 0);
    stopped_with(
        "overwritten_link",
        COLD_WARM_REMOTE,
        "alloc",
        PROFILE_EVERY_BLOCK,
        CORRUPTED,
        0,
    );
    stopped_with(
        "overwritten_link",
        COLD_WARM_REMOTE,
        "alloc",
        DEBUG,
        CORRUPTED,
        0,
    );
}

#[test]
fn debug_mode_stops_the_allocation_that_meets_an_overwritten_list_before_handing_out_its_head() {
    // Another thread freed the block and then a second one, the head of the
    // slab's list; this thread's allocation takes the head, and debug mode
    // checks the link of the block after it before handing it out.
    stopped_with(
        "overwritten_link",
        &["remote"],
        "alloc",
        DEBUG,
        CORRUPTED,
        0,
    );
    let o = run("overwritten_link", "remote", "alloc", DEBUG);
    assert!(
        !common::stdout(&o).contains("handed out"),
        "the refill handed out a block of a corrupted list\n{}",
        common::describe(&o)
    );
}

#[test]
fn a_trim_that_meets_a_block_whose_link_was_overwritten_is_stopped() {
    stopped_with(
        "overwritten_link",
        &["warm", "remote"],
        "trim",
        &[],
        CORRUPTED,
        0,
    );
}

// ---------------------------------------------------------------------------
// Debug mode (SLUBMALLOC_DEBUG=1)

#[test]
fn debug_mode_stops_a_one_byte_overflow_at_free() {
    // The message may name the block or the overwritten byte (block + 24).
    let names = &["overflow", "red zone", "redzone"];
    stopped_with("overflow", EVERYWHERE, "free", DEBUG, names, 24);
    // A sampled block comes from the profile's own slabs.
    let debug_and_profile = [DEBUG, PROFILE_EVERY_BLOCK].concat();
    stopped_with(
        "overflow",
        COLD_WARM_REMOTE,
        "free",
        &debug_and_profile,
        names,
        24,
    );
}

#[test]
fn debug_mode_stops_an_overflow_over_the_red_zone_and_its_size_word() {
    // The size word lies in the last 8 bytes of the 48-byte slot.
    let names = &["overflow", "red zone", "size word"];
    stopped_with("overflow_size_word", EVERYWHERE, "free", DEBUG, names, 47);
}

#[test]
fn debug_mode_stops_a_write_after_free_on_reuse() {
    // The message may name the block or the overwritten byte (block + 8).
    let names = &["write after free", "poison"];
    stopped_with(
        "write_after_free",
        &["cold", "warm"],
        "alloc",
        DEBUG,
        names,
        8,
    );
}

// ---------------------------------------------------------------------------
// Frees that name the block's size: C23's `free_sized` and
// `free_aligned_sized` (`tests/c/sized_free.c`), C++'s sized and aligned
// deletes (`tests/c/sized_delete.cpp`), checked as Rust's `dealloc` is
// (`src/layout.rs`). Each program's header lists its cases; a wrong case
// prints the block's address, then frees it.

const WRONG_LAYOUT: &[&str] = &["dealloc with the wrong layout"];

/// Runs `exe case` preloaded, for each of `cases`, in the default mode and
/// in debug mode, and expects each stopped for a wrong layout, naming the
/// address it printed.
fn sized_frees_stopped(exe: &Path, cases: &[&str]) {
    for env in [&[][..], DEBUG] {
        for case in cases {
            let o = common::run_guarded(exe, &[case], true, env, LIMIT);
            let addr = printed_address(&o);
            let what = format!("{} {case} (env {env:?})", exe.display());
            assert_stopped(&what, &o, WRONG_LAYOUT, addr, addr);
        }
    }
}

#[test]
fn c_free_sized_with_a_size_the_block_was_not_asked_for_is_stopped() {
    let cases = [
        "smaller",
        "bigger",
        "large_as_small",
        "small_as_large",
        "aligned_as_plain",
    ];
    sized_frees_stopped(&common::compile_c("sized_free", &[]), &cases);
}

#[test]
fn c_free_aligned_sized_with_an_alignment_the_block_lacks_is_stopped() {
    sized_frees_stopped(&common::compile_c("sized_free", &[]), &["wrong_alignment"]);
}

#[test]
fn cxx_sized_delete_with_a_size_or_alignment_the_block_lacks_is_stopped() {
    let cases = [
        "smaller",
        "bigger",
        "array_bigger",
        "large_as_small",
        "aligned_wrong",
        "aligned_bigger",
    ];
    sized_frees_stopped(&common::compile_cxx("sized_delete"), &cases);
}

/// `exe right` (every size, alignment and way of allocating) is not
/// stopped, in every mode.
fn right_sizes_not_stopped(exe: &Path) {
    for env in [&[][..], DEBUG, PROFILE_EVERY_BLOCK] {
        let o = common::run_guarded(exe, &["right"], true, env, LIMIT);
        assert_not_stopped(&format!("{} right (env {env:?})", exe.display()), &o);
    }
}

#[test]
fn c_sized_frees_of_the_size_asked_for_are_not_stopped() {
    right_sizes_not_stopped(&common::compile_c("sized_free", &[]));
}

#[test]
fn cxx_deletes_of_the_size_asked_for_are_not_stopped() {
    right_sizes_not_stopped(&common::compile_cxx("sized_delete"));
}

#[test]
fn a_cxx_program_that_replaces_operator_new_and_delete_keeps_them() {
    // Its sized and array deletes, the C++ library's until now, are found
    // in the preload library first: they must lead to its own.
    program_of_its_own_operators_is_not_stopped("replaced_new_delete");
}

#[test]
fn a_cxx_program_that_replaces_operator_new_alone_is_not_stopped_by_its_sized_deletes() {
    // Its `operator new` asks `malloc` for more than the size its deletes
    // name: with a replaced `operator new`, the sizes are not checked.
    program_of_its_own_operators_is_not_stopped("replaced_new");
}

/// The C++ program `name` runs preloaded as it runs on glibc, in the
/// default mode and in debug mode.
fn program_of_its_own_operators_is_not_stopped(name: &str) {
    let exe = common::compile_cxx(name);
    for env in [&[][..], DEBUG] {
        correct_program_is_not_stopped(&exe, env);
    }
}

// ---------------------------------------------------------------------------
// Controls: no misuse, no message

/// Asserts `o` exited 0 after "survived", the allocator silent.
fn assert_not_stopped(what: &str, o: &Output) {
    assert!(o.status.success(), "{what}\n{}", common::describe(o));
    assert!(
        common::stdout(o).contains("survived"),
        "{what}\n{}",
        common::describe(o)
    );
    assert!(
        !common::stderr(o).contains("slubmalloc: "),
        "{what}: the allocator complained about a correct program\n{}",
        common::describe(o)
    );
}

#[test]
fn blocks_reused_off_the_free_lists_and_freed_unwritten_are_not_taken_for_double_frees() {
    for env in [&[][..], DEBUG, PROFILE_EVERY_BLOCK] {
        for place in EVERYWHERE {
            let o = run("untouched", place, "free", env);
            assert_not_stopped(&format!("untouched {place} (env {env:?})"), &o);
        }
    }
}

/// A correct program is not stopped, prints what it prints without the
/// preload, and the allocator says nothing.
fn correct_program_is_not_stopped(exe: &Path, env: &[(&str, &str)]) {
    let plain = common::run_plain(exe, &[]);
    assert!(
        plain.status.success(),
        "without the preload\n{}",
        common::describe(&plain)
    );
    let o = common::run_guarded(exe, &[], true, env, LIMIT);
    assert!(o.status.success(), "preloaded\n{}", common::describe(&o));
    assert_eq!(common::stdout(&o), common::stdout(&plain));
    // No complaint, and (debug mode) no "unknown variable" warning either:
    // the mode must actually have been on for the test to prove anything.
    assert!(
        !common::stderr(&o).contains("slubmalloc: "),
        "the allocator complained about a correct program\n{}",
        common::describe(&o)
    );
}

#[test]
fn correct_multithreaded_program_is_not_stopped() {
    correct_program_is_not_stopped(&program("misuse_none_threads"), &[]);
}

#[test]
fn debug_mode_leaves_a_correct_multithreaded_program_unchanged() {
    correct_program_is_not_stopped(&program("misuse_none_threads"), DEBUG);
}

// ---------------------------------------------------------------------------
// Zero-size blocks (`src/zero.rs`): `malloc(0)` hands out a block whose
// memory is inaccessible

const SIGSEGV: i32 = 11;
const ZERO_SIZE_OFF: &[(&str, &str)] = &[("SLUBMALLOC_PROTECT_ZERO_SIZE", "0")];

/// Runs `case` in each of `places` with `env` and expects death by SIGSEGV
/// at the access, after the address was printed and before "survived",
/// with no message from the allocator.
fn zero_size_access_faults(case: &str, places: &[&str], env: &[(&str, &str)]) {
    for place in places {
        let o = run(case, place, "free", env);
        let what = format!("misuse {case} {place} (env {env:?})");
        printed_address(&o);
        assert!(
            !common::stdout(&o).contains("survived"),
            "{what}: the program ran past its access\n{}",
            common::describe(&o)
        );
        assert_eq!(
            o.status.signal(),
            Some(SIGSEGV),
            "{what}: expected death by SIGSEGV\n{}",
            common::describe(&o)
        );
        assert!(
            !common::stderr(&o).contains("slubmalloc: "),
            "{what}\n{}",
            common::describe(&o)
        );
    }
}

#[test]
fn a_read_of_a_zero_size_block_faults() {
    zero_size_access_faults("zero_read", EVERYWHERE, &[]);
    zero_size_access_faults("zero_read", COLD_WARM_REMOTE, DEBUG);
}

#[test]
fn a_write_into_a_zero_size_block_faults() {
    zero_size_access_faults("zero_write", EVERYWHERE, &[]);
    zero_size_access_faults("zero_write", COLD_WARM_REMOTE, DEBUG);
}

#[test]
fn double_free_of_a_zero_size_block_is_stopped() {
    free_stopped("zero_double_free", EVERYWHERE, DOUBLE_FREE);
    stopped_with(
        "zero_double_free",
        COLD_WARM_REMOTE,
        "free",
        DEBUG,
        DOUBLE_FREE,
        0,
    );
}

#[test]
fn double_free_of_a_zero_size_block_whose_slab_went_back_to_its_segment_is_stopped() {
    // Not from another thread: the thread's start takes slabs, the free one
    // first, and a block of a slab that serves again is no longer told.
    free_stopped(
        "zero_double_free_emptied",
        &["cold", "warm", "exiting"],
        DOUBLE_FREE,
    );
}

#[test]
fn free_of_an_interior_pointer_of_a_zero_size_block_is_stopped() {
    free_stopped("zero_interior", EVERYWHERE, INVALID);
}

/// `zero_ok`: distinct live zero-size blocks of usable size 0 from every
/// zero-size allocation, a realloc from one, their frees, exact statistics.
#[test]
fn zero_size_blocks_are_distinct_of_usable_size_0_reallocated_freed_and_counted() {
    for env in [&[][..], DEBUG] {
        for place in EVERYWHERE {
            let o = run("zero_ok", place, "free", env);
            assert!(
                o.status.success() && common::stdout(&o).contains("survived"),
                "zero_ok {place} (env {env:?})\n{}",
                common::describe(&o)
            );
            assert!(
                !common::stderr(&o).contains("slubmalloc: "),
                "zero_ok {place} (env {env:?})\n{}",
                common::describe(&o)
            );
        }
    }
}

#[test]
fn with_protect_zero_size_off_a_write_into_malloc_0_goes_unnoticed() {
    for place in ["cold", "warm"] {
        let o = run("zero_write", place, "free", ZERO_SIZE_OFF);
        assert!(
            o.status.success() && common::stdout(&o).contains("survived"),
            "zero_write {place} with SLUBMALLOC_PROTECT_ZERO_SIZE=0\n{}",
            common::describe(&o)
        );
    }
}
