#!/usr/bin/env bash
# Fuzzing: builds every target in fuzz/ and runs each for SECONDS.
#
#   ci/fuzz.sh SECONDS            build, then run every target for SECONDS
#   ci/fuzz.sh SECONDS RUN...     only these runs (names below)
#   ci/fuzz.sh coverage           per-file line coverage of src/ from the corpora
#
# Runs (target, and the allocator mode it runs under; the allocator reads its
# mode once at start-up, so each mode is a run of its own):
#   ops               lockstep model, replayable        (default mode: per-CPU
#                                                       sheaves where rseq is)
#   ops-debug         the same under SLUBMALLOC_DEBUG=1 (red zones, poison)
#   ops-random        the same under SLUBMALLOC_FREELIST_RANDOM=1
#   ops-fallback      the same under SLUBMALLOC_PERCPU=0 (no per-CPU sheaves)
#   concurrent        threads at once: real races, fork among running threads
#   concurrent-debug  the same under SLUBMALLOC_DEBUG=1
#   concurrent-fallback  the same under SLUBMALLOC_PERCPU=0
#   c_api             the C entry points (the `override` feature) against
#                     glibc's contract (SLUBMALLOC_BACKGROUND_PURGE=0)
#
# Inputs are up to 1 KiB (about 200 operations, thousands of live blocks
# through the bulk allocations): each corpus starts from seeds of 64 B-1 KiB
# of seeded noise (the model reads any bytes as operations) and libFuzzer
# runs with -len_control=0, so it does not start from short inputs and grow
# them. A fork child runs in one input of 4, the misuse and out-of-memory
# children in one of 16, and the targets are built without -trace-compares
# (a callback at every compare, the allocator's byte loops included), so
# that every run makes 100 inputs a second or more. A child's coverage never
# reaches libFuzzer, so the corpora keep inputs that ran one only by chance:
# every run of ops and concurrent also reads seeds that run each child (a
# fork from one, two and four threads, every misuse kind, out of memory,
# forks among busy threads), written by fuzz/seeds.py into
# ci/out/fuzz/seeds/TARGET, and the coverage replay replays them.
# Corpora (fuzz/corpus/RUN) are kept between runs; a failure leaves its
# input in fuzz/artifacts/RUN/ and the log in ci/out/fuzz/RUN.log, and the
# script exits non-zero. Replay one with
#   fuzz/target/x86_64-unknown-linux-gnu/release/TARGET ARTIFACT
# (with the run's environment variable; `--features override` for c_api).
#
# Uses the nightly toolchain where one is installed and the default one
# otherwise (the targets are built without a sanitizer, which is what needs
# nightly; the coverage instrumentation is stable). Installs cargo-fuzz if it
# is missing. Runs one fuzzing process at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

all_runs=(ops ops-debug ops-random ops-fallback concurrent concurrent-debug concurrent-fallback c_api)
target_of() { echo "${1%%-*}"; }
env_of() {
    case "$1" in
        *-debug) echo SLUBMALLOC_DEBUG=1 ;;
        *-random) echo SLUBMALLOC_FREELIST_RANDOM=1 ;;
        *-fallback) echo SLUBMALLOC_PERCPU=0 ;;
        # The C heap is ours there: the background purger's pthread_create
        # allocates glibc's own blocks, which the end-of-input count would see.
        c_api) echo SLUBMALLOC_BACKGROUND_PURGE=0 ;;
        *) echo FUZZ_MODE=default ;;
    esac
}
features_of() { [ "$(target_of "$1")" = c_api ] && echo "--features override" || true; }

tc=()
if cargo +nightly --version >/dev/null 2>&1; then
    tc=(+nightly)
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "ci/fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

# The seeds: noise from fixed seeds, so a run starts from the same inputs.
seed_corpus() {
    local dir=fuzz/corpus/$1
    mkdir -p "$dir"
    [ -n "$(ls -A "$dir")" ] && return 0
    python3 - "$dir" <<'PY'
import random, sys
for i in range(8):
    r = random.Random(1000 + i)
    with open(f"{sys.argv[1]}/seed-{i}", "wb") as f:
        f.write(bytes(r.getrandbits(8) for _ in range(64 << (i % 5))))
PY
}

# The seeds that run the children (fuzz/seeds.py); none for c_api.
child_seeds() {
    local target=$1 dir=ci/out/fuzz/seeds/$1
    [ "$target" = c_api ] && return 0
    rm -rf "$dir"
    python3 fuzz/seeds.py "$target" "$dir"
    echo "$dir"
}

build() {
    local target=$1
    # shellcheck disable=SC2046
    (cd fuzz && cargo "${tc[@]}" fuzz build --sanitizer none --no-trace-compares $(features_of "$target") "$target")
}

if [ "${1:-}" = coverage ]; then
    # Replays every corpus and the children's seeds under its run's mode
    # into one profile per target and prints line coverage per file of src/.
    sysroot=$(rustc "${tc[@]}" --print sysroot)
    profdata() { find "$sysroot" -name llvm-profdata -path '*/bin/*' | head -1; }
    if [ -z "$(profdata)" ]; then
        rustup component add llvm-tools-preview ${tc[0]:+--toolchain nightly}
    fi
    bin=$(dirname "$(profdata)")
    out=$root/ci/out/fuzz/coverage
    rm -rf "$out" && mkdir -p "$out"
    # Runs the target's instrumented binary (`exe`) on inputs under RUN's
    # mode, into the profile; stops the script if one fails.
    replay() {
        local run=$1
        shift
        env "$(env_of "$run")" LLVM_PROFILE_FILE="$out/$run-%p.profraw" \
            "$exe" -timeout=120 -rss_limit_mb=8192 -artifact_prefix="$out/" "$@" >>"$out/$run.log" 2>&1 || {
            echo "ci/fuzz.sh: replaying $run failed; see $out/$run.log" >&2
            exit 1
        }
    }
    exes=()
    one=$(mktemp -d)
    printf '\0' >"$one/empty-input"
    for target in ops concurrent c_api; do
        # Builds the instrumented binary (its own replay, of one empty input,
        # is instant); the replays below give each run its mode.
        # shellcheck disable=SC2046
        (cd fuzz && RUSTFLAGS="--cfg fuzz_coverage" cargo "${tc[@]}" fuzz coverage --sanitizer none $(features_of "$target") "$target" "$one" >/dev/null)
        exe=fuzz/target/x86_64-unknown-linux-gnu/coverage/x86_64-unknown-linux-gnu/release/$target
        exes+=("$exe")
        seeds=$(child_seeds "$target")
        for run in "${all_runs[@]}"; do
            [ "$(target_of "$run")" = "$target" ] || continue
            dirs=()
            [ -d fuzz/corpus/"$run" ] && dirs+=(fuzz/corpus/"$run")
            [ -n "$seeds" ] && dirs+=("$seeds")
            [ ${#dirs[@]} -gt 0 ] || continue
            echo "replaying ${dirs[*]} ($(find "${dirs[@]}" -type f | wc -l) inputs)"
            replay "$run" -runs=0 "${dirs[@]}"
            # A fork among busy threads finds a lock held only by chance:
            # those seeds ten times each, so that the child's repairs run.
            if [ "$target" = concurrent ]; then
                replay "$run" -runs=10 "$seeds"/fork-while-*
            fi
        done
    done
    rm -r "$one"
    # A forked child (the seeds run every child) may leave a profile cut
    # short: it is skipped with a warning, the others merged.
    "$bin/llvm-profdata" merge -sparse --failure-mode=all "$out"/*.profraw -o "$out/all.profdata"
    others=()
    for exe in "${exes[@]:1}"; do others+=(-object "$exe"); done
    "$bin/llvm-cov" report "${exes[0]}" "${others[@]}" -instr-profile="$out/all.profdata" \
        --ignore-filename-regex='/rustc/|/.cargo/|/registry/|fuzz_targets|tests/ops_model' | tee "$out/report.txt"
    exit 0
fi

seconds=${1:?usage: ci/fuzz.sh SECONDS [RUN...] | ci/fuzz.sh coverage}
shift
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=("${all_runs[@]}")

mkdir -p ci/out/fuzz
for target in ops concurrent c_api; do
    for run in "${runs[@]}"; do
        if [ "$(target_of "$run")" = "$target" ]; then
            build "$target"
            break
        fi
    done
done

failed=()
for run in "${runs[@]}"; do
    target=$(target_of "$run")
    seed_corpus "$run"
    seeds=$(child_seeds "$target")
    mkdir -p fuzz/artifacts/"$run"
    log=ci/out/fuzz/$run.log
    echo "== $run ($(env_of "$run")), ${seconds}s"
    if env "$(env_of "$run")" fuzz/target/x86_64-unknown-linux-gnu/release/"$target" \
        -max_total_time="$seconds" -len_control=0 -max_len=1024 -timeout=120 \
        -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix=fuzz/artifacts/"$run"/ fuzz/corpus/"$run" $seeds >"$log" 2>&1; then
        grep -E '^slubmalloc per-CPU mode|^stat::number_of_executed_units|^stat::average_exec_per_sec|DONE' "$log" | tr '\n' ' '
        echo
    else
        echo "FAILED: $run; last lines of $log:"
        grep -v '^\s*[0-9]*: \|^\s*at ' "$log" | cut -c1-400 | tail -25
        ls fuzz/artifacts/"$run"/ 2>/dev/null | sed "s|^|  artifact: fuzz/artifacts/$run/|"
        failed+=("$run")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "ci/fuzz.sh: failed: ${failed[*]}"
    exit 1
fi
echo "ci/fuzz.sh: ${#runs[@]} runs of ${seconds}s passed"
