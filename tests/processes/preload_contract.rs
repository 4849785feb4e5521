//! The C malloc contract under `LD_PRELOAD`, case by case.
//!
//! `tests/c/preload_contract.c` runs one group of checks per invocation and
//! prints `ok <group>`. Each group runs twice: preloaded (it must pass, and
//! `malloc` must resolve to libslubmalloc.so) and on glibc's own malloc (it
//! must pass there too, which shows the checks encode glibc's semantics and
//! not slubmalloc's). A few checks are about slubmalloc only (its size
//! classes, its statistics table, its abort messages) and run preloaded only.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn contract_exe() -> PathBuf {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile_c("preload_contract", &["-ldl"]))
        .clone()
}

fn run_group(group: &str, preloaded: bool, env: &[(&str, &str)]) -> Output {
    common::run_guarded(&contract_exe(), &[group], preloaded, env, LIMIT)
}

fn malloc_provider(o: &Output) -> String {
    common::stdout(o)
        .lines()
        .find_map(|l| l.strip_prefix("malloc from ").map(str::to_owned))
        .expect("the program names the object malloc comes from")
}

/// Runs `group` preloaded; it must pass on slubmalloc's malloc.
fn passes_preloaded(group: &str, env: &[(&str, &str)]) -> Output {
    let o = run_group(group, true, env);
    assert!(
        o.status.success() && common::stdout(&o).contains(&format!("ok {group}\n")),
        "group {group} failed under the preload: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        common::stdout(&o),
        common::stderr(&o)
    );
    let provider = malloc_provider(&o);
    assert!(
        provider.ends_with("libslubmalloc.so"),
        "malloc resolved to {provider}, not to the preloaded library"
    );
    o
}

/// Runs `group` on glibc's malloc; the checks must hold there too.
fn passes_on_glibc(group: &str) -> Output {
    let o = run_group(group, false, &[]);
    assert!(
        o.status.success() && common::stdout(&o).contains(&format!("ok {group}\n")),
        "group {group} fails on glibc's own malloc, so it does not test glibc's semantics: {}\n{}",
        o.status,
        common::stderr(&o)
    );
    assert!(!malloc_provider(&o).contains("slubmalloc"));
    o
}

fn contract(group: &str, env: &[(&str, &str)]) -> Output {
    passes_on_glibc(group);
    passes_preloaded(group, env)
}

/// The value printed after `key ` on a line of stdout.
fn printed(o: &Output, key: &str) -> String {
    common::stdout(o)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")).map(str::to_owned))
        .unwrap_or_else(|| panic!("no `{key}` line in:\n{}", common::stdout(o)))
}

#[test]
fn malloc_zero_returns_unique_non_null_pointers() {
    contract("malloc_zero", &[]);
}

#[test]
fn sizes_over_ptrdiff_max_fail_with_enomem() {
    contract("huge_sizes", &[]);
}

#[test]
fn calloc_overflow_fails_with_enomem_and_reused_memory_is_zeroed() {
    contract("calloc", &[]);
}

#[test]
fn reallocarray_overflow_fails_with_enomem_and_keeps_the_block() {
    contract("reallocarray", &[]);
}

#[test]
fn realloc_to_a_huge_size_fails_with_enomem_and_keeps_the_block() {
    contract("realloc_huge", &[]);
}

#[test]
fn posix_memalign_rejects_alignments_that_are_not_power_of_two_pointer_multiples() {
    contract("posix_memalign_rejects", &[]);
}

#[test]
fn posix_memalign_aligns_every_power_of_two_from_8_to_1_mib() {
    contract("posix_memalign_powers", &[]);
}

#[test]
fn aligned_alloc_memalign_valloc_and_pvalloc_align_their_blocks() {
    contract("aligned_family", &[]);
}

#[test]
fn free_of_null_is_a_no_op_and_free_keeps_errno() {
    // A zero purge delay makes frees give slabs and segments back at once,
    // so the system calls on those paths run while errno is watched.
    contract("free", &[("SLUBMALLOC_PURGE_DELAY_MS", "0")]);
}

#[test]
fn malloc_usable_size_is_zero_for_null_and_covers_the_request() {
    contract("usable_size", &[]);
}

#[test]
fn blocks_of_16_bytes_or_more_are_16_byte_aligned() {
    contract("alignment_16", &[]);
}

#[test]
fn realloc_to_zero_returns_null() {
    contract("realloc_zero", &[]);
}

/// After `realloc(p, 0)`, `free(p)` must be a double free: p was freed.
fn realloc_to_zero_freed(group: &str, preloaded: bool) -> Output {
    let o = run_group(group, preloaded, &[]);
    assert!(
        common::stdout(&o).contains("realloc(p, 0) returned NULL"),
        "{group}: {}",
        common::stderr(&o)
    );
    assert_eq!(
        o.status.signal(),
        Some(libc::SIGABRT),
        "{group}: freeing p after realloc(p, 0) must abort as a double free; got {}\n{}",
        o.status,
        common::stderr(&o)
    );
    o
}

#[test]
fn realloc_to_zero_really_frees_a_small_block() {
    // glibc's tcache notices this double free too.
    realloc_to_zero_freed("realloc_zero_then_free_small", false);
    let o = realloc_to_zero_freed("realloc_zero_then_free_small", true);
    let err = common::stderr(&o);
    assert!(
        err.starts_with("slubmalloc: ") && err.contains("double free"),
        "{err}"
    );
}

#[test]
fn realloc_to_zero_really_frees_a_large_block() {
    // (glibc cannot be asked: its second free of an unmapped chunk segfaults.)
    let o = realloc_to_zero_freed("realloc_zero_then_free_large", true);
    let err = common::stderr(&o);
    assert!(
        err.starts_with("slubmalloc: ") && err.contains("double free"),
        "{err}"
    );
}

#[test]
fn realloc_keeps_contents_while_growing_and_shrinking() {
    contract("realloc_contents", &[]);
}

#[test]
fn malloc_trim_gives_memory_back_and_the_heap_stays_usable() {
    // An hour of purge delay: only malloc_trim can give the memory back.
    let o = contract("trim", &[("SLUBMALLOC_PURGE_DELAY_MS", "3600000")]);
    println!("{}", printed(&o, "rss_kib"));
}

#[test]
fn malloc_trim_returns_1_when_it_gave_memory_back() {
    // glibc: "returns 1 if memory was actually released back to the system".
    // The program frees ~80 MiB; with an hour of purge delay, all of it is
    // still held when malloc_trim runs, and the group checks that resident
    // memory fell afterwards.
    let o = passes_preloaded("trim", &[("SLUBMALLOC_PURGE_DELAY_MS", "3600000")]);
    assert_eq!(
        printed(&o, "trim_result"),
        "1",
        "malloc_trim released memory ({}) but returned 0",
        printed(&o, "rss_kib")
    );
}

#[test]
fn malloc_stats_prints_the_slubmalloc_table_on_stderr() {
    let o = passes_preloaded("stats", &[]);
    let err = common::stderr(&o);
    assert!(
        err.starts_with("slubmalloc statistics (pid "),
        "malloc_stats wrote:\n{err}"
    );
    // The program holds 7 blocks of 100 bytes and 5 of 20000 bytes while it
    // calls malloc_stats: their classes' rows count them in use.
    let in_use = |request: usize| -> u64 {
        let class = slubmalloc::class_size(request).expect("a small size");
        err.lines()
            .find_map(|l| {
                let mut cols = l.split_whitespace();
                (cols.next()? == class.to_string()).then(|| cols.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no row for class {class} in:\n{err}"))
    };
    assert!(in_use(100) >= 7, "{err}");
    assert!(in_use(20000) >= 5, "{err}");
    assert!(!common::stdout(&o).contains("slubmalloc statistics"));
}

#[test]
fn malloc_stats_writes_its_whole_report_with_a_cancellation_pending() {
    // On glibc too: its malloc_stats returns with the cancellation still
    // pending (it writes with cancellation off).
    contract("stats_cancel", &[]);
    let o = passes_preloaded("stats_cancel", &[]);
    let err = common::stderr(&o);
    assert!(
        err.starts_with("slubmalloc statistics (pid "),
        "malloc_stats wrote:\n{err}"
    );
    // glibc's closing lines end the report.
    let last = err.lines().last().unwrap_or("");
    assert!(
        err.contains("threads alive")
            && last.starts_with("max mmap bytes   = ")
            && err.ends_with('\n'),
        "the report was cut short:\n{err}"
    );
}

#[test]
fn allocations_are_served_by_slubmalloc_size_classes() {
    let usable = |o: &Output| -> Vec<(usize, usize)> {
        common::stdout(o)
            .lines()
            .filter_map(|l| l.strip_prefix("usable "))
            .map(|l| {
                let (n, u) = l.split_once(' ').unwrap();
                (n.parse().unwrap(), u.parse().unwrap())
            })
            .collect()
    };
    let pre = usable(&passes_preloaded("usable_size", &[]));
    let plain = usable(&passes_on_glibc("usable_size"));
    assert!(pre.len() > 2000, "too few sizes printed");
    for &(n, u) in &pre {
        if n == 0 {
            // A zero-size block (`src/zero.rs`), of no class.
            assert_eq!(u, 0, "malloc_usable_size(malloc(0)) under the preload");
            continue;
        }
        match slubmalloc::class_size(n) {
            Some(class) => assert_eq!(
                u, class,
                "malloc_usable_size(malloc({n})) under the preload is not slubmalloc's class size"
            ),
            None => assert!(u >= n),
        }
    }
    assert_eq!(slubmalloc::class_size(100), Some(112));
    let at = |v: &[(usize, usize)], n: usize| v.iter().find(|p| p.0 == n).unwrap().1;
    assert_eq!(at(&pre, 100), 112);
    // glibc's chunk arithmetic gives another answer (104): the preload is
    // what makes the difference.
    assert_ne!(at(&plain, 100), 112);
}

/// The `errno` group's rows, (call, "<result> ret <r> errno <errno>"), and
/// the glibc version the program ran on.
type ErrnoTable = (Vec<(String, String)>, String);

/// The `errno` table, one run each way.
fn errno_table(preloaded: bool) -> &'static ErrnoTable {
    static TABLES: [OnceLock<ErrnoTable>; 2] = [OnceLock::new(), OnceLock::new()];
    TABLES[preloaded as usize].get_or_init(|| {
        let o = if preloaded {
            passes_preloaded("errno", &[])
        } else {
            passes_on_glibc("errno")
        };
        let rows: Vec<(String, String)> = common::stdout(&o)
            .lines()
            .filter_map(|l| l.strip_prefix("errno_row "))
            .map(|l| {
                let (call, result) = l.split_once(" -> ").expect("<call> -> <result>");
                (call.to_owned(), result.to_owned())
            })
            .collect();
        assert!(rows.len() > 60, "too few rows:\n{}", common::stdout(&o));
        (rows, printed(&o, "glibc"))
    })
}

/// What the preloaded run printed for `call`.
fn errno_row(call: &str) -> &'static str {
    let (rows, _) = errno_table(true);
    rows.iter()
        .find(|(c, _)| c == call)
        .map(|(_, r)| r.as_str())
        .unwrap_or_else(|| panic!("no row `{call}` in the errno table"))
}

/// Whether glibc `version` ("2.36") is at least 2.`minor`.
fn glibc_at_least(version: &str, minor: u32) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, min) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, min) >= (2, minor)
}

/// Every one of `calls` printed `expected` preloaded.
fn rows_read(calls: &[&str], expected: &str) {
    for call in calls {
        assert_eq!(errno_row(call), expected, "{call}");
    }
}

#[test]
fn every_entry_point_returns_and_sets_errno_as_glibc_does() {
    let (glibc, version) = errno_table(false);
    let (ours, _) = errno_table(true);
    assert_eq!(
        glibc.iter().map(|r| &r.0).collect::<Vec<_>>(),
        ours.iter().map(|r| &r.0).collect::<Vec<_>>(),
        "both runs print the same cases"
    );
    // Rows marked [c17] are glibc 2.36's aligned_alloc; 2.38 refuses those
    // alignments (see `aligned_alloc` in src/ffi.rs), so on a newer glibc
    // they are not the contract we follow.
    let newer = glibc_at_least(version, 38);
    let differ: Vec<String> = glibc
        .iter()
        .zip(ours)
        .filter(|(g, o)| g.1 != o.1 && !(newer && g.0.contains("[c17]")))
        .map(|(g, o)| format!("{}: glibc {} | slubmalloc {}", g.0, g.1, o.1))
        .collect();
    assert!(
        differ.is_empty(),
        "errno or result differ from glibc {version}:\n{}",
        differ.join("\n")
    );
}

#[test]
fn posix_memalign_sets_errno_to_enomem_when_out_of_memory() {
    rows_read(
        &[
            "posix_memalign(64, PTRDIFF_MAX + 1)",
            "posix_memalign(1 MiB, PTRDIFF_MAX + 1)",
            "posix_memalign(64, SIZE_MAX)",
            "posix_memalign(2^63, 64)",
        ],
        "NULL ret 12 errno ENOMEM",
    );
}

#[test]
fn posix_memalign_returns_einval_for_a_bad_alignment_without_setting_errno() {
    rows_read(
        &[
            "posix_memalign(0, 64)",
            "posix_memalign(4, 64)",
            "posix_memalign(24, 64)",
            "posix_memalign(3, PTRDIFF_MAX + 1)",
            "posix_memalign(SIZE_MAX, 64)",
        ],
        "NULL ret 22 errno unchanged",
    );
}

#[test]
fn allocation_that_succeeds_keeps_errno() {
    let (rows, _) = errno_table(true);
    let blocks: Vec<_> = rows.iter().filter(|r| r.1.starts_with("block")).collect();
    assert!(blocks.len() > 25, "too few successful calls in the table");
    for (call, result) in blocks {
        assert_eq!(result, "block ret 0 errno unchanged", "{call}");
    }
}

#[test]
fn memalign_and_aligned_alloc_set_einval_above_the_largest_alignment() {
    rows_read(
        &[
            "memalign(2^63 + 1, 64)",
            "memalign(SIZE_MAX, 64)",
            "aligned_alloc(2^63 + 1, 64)",
            "aligned_alloc(SIZE_MAX, 64)",
        ],
        "NULL ret 0 errno EINVAL",
    );
    assert_eq!(errno_row("memalign(2^63, 64)"), "NULL ret 0 errno ENOMEM");
}

#[test]
fn aligned_alloc_rounds_an_alignment_that_is_not_a_power_of_two_up_as_glibc_2_36_does() {
    rows_read(
        &["aligned_alloc(3, 64) [c17]", "aligned_alloc(0, 64) [c17]"],
        "block ret 0 errno unchanged",
    );
}

/// The preload library brings no shared library into a program beyond the
/// C library, the loader and libgcc's unwinder (for the heap profile's
/// stacks): each one more is loaded, relocated and partly faulted in by
/// every program, and libm, which the profile's two functions of it had
/// pulled in, cost 250-330 KiB of resident memory. `cat` (which needs only
/// libc) prints its own mappings under the preload.
#[test]
fn the_preload_library_loads_no_library_but_libc_the_loader_and_the_unwinder() {
    let cat = Path::new("/bin/cat");
    let out = common::run_preloaded(cat, &["/proc/self/maps"], &[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let maps = common::stdout(&out);
    assert!(maps.contains("libslubmalloc.so"), "{maps}");
    let mut libraries: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains(".so"))
        .map(|p| p.rsplit('/').next().unwrap())
        .filter(|f| !f.starts_with("libslubmalloc.so"))
        .collect();
    libraries.sort();
    libraries.dedup();
    let allowed = |f: &&str| {
        f.starts_with("libc.so") || f.starts_with("ld-linux") || f.starts_with("libgcc_s.so")
    };
    assert!(libraries.iter().all(allowed), "{libraries:?}");
}

/// The preload library exports the C malloc family (with C23's sized
/// frees and C++'s `operator delete` forms) and its own `slubmalloc_`
/// symbols, nothing else: not `operator new`, which must throw
/// `std::bad_alloc`, so stays the C++ library's. Built without std it defines
/// `rust_eh_personality` (core's unwind tables name it, `src/preload.rs`);
/// exported, it would take the place of a program's own, whose unwinding
/// it cannot do.
#[test]
fn the_preload_library_exports_the_malloc_family_and_its_own_symbols_only() {
    const FAMILY: &[&str] = &[
        "malloc",
        "free",
        "calloc",
        "realloc",
        "reallocarray",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
        "valloc",
        "pvalloc",
        "malloc_usable_size",
        "cfree",
        "malloc_trim",
        "malloc_stats",
        "mallinfo",
        "mallinfo2",
        "malloc_info",
        "__libc_malloc",
        "__libc_free",
        "__libc_calloc",
        "__libc_realloc",
        "__libc_memalign",
        "__libc_valloc",
        "__libc_pvalloc",
        "__posix_memalign",
        // C23's sized frees.
        "free_sized",
        "free_aligned_sized",
        // C++'s `operator delete`, unsized and sized, plain and aligned,
        // single and array (`src/cxx.rs`).
        "_ZdlPv",
        "_ZdaPv",
        "_ZdlPvm",
        "_ZdaPvm",
        "_ZdlPvSt11align_val_t",
        "_ZdaPvSt11align_val_t",
        "_ZdlPvmSt11align_val_t",
        "_ZdaPvmSt11align_val_t",
    ];
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(common::preload_lib())
        .output()
        .expect("run nm");
    assert!(out.status.success(), "{}", common::stderr(&out));
    let table = common::stdout(&out);
    let exported: Vec<&str> = table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    assert!(FAMILY.iter().all(|f| exported.contains(f)), "{exported:?}");
    let strays: Vec<&&str> = exported
        .iter()
        .filter(|s| !FAMILY.contains(s) && !s.starts_with("slubmalloc_"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");
}
