#!/usr/bin/env bash
# Instructions per malloc + free pair on the fast path, counted by valgrind's
# callgrind (deterministic, unlike time). Each program runs a loop of N pairs
# of one size, once with N = M and once with N = 2M; the difference of total
# instructions divided by M is one pair's cost, with start-up and setup
# cancelled. Where the allocator's functions are visible to
# callgrind_annotate, their inclusive cost is split the same way.
#
#   ci/callgrind.sh [-m M] [-s SIZE] [-o REPORT.md]
#
# Rows:
#   rust  slubmalloc  examples/fastpath_count.rs (#[global_allocator], std::alloc::alloc/dealloc)
#   c     slubmalloc  a C loop under LD_PRELOAD=target/release/libslubmalloc.so (--features override)
#   c     glibc       the same C loop, no preload
#   c     mimalloc    LD_PRELOAD of Debian's libmimalloc.so.2   (when installed: ci/deps.sh)
#   c     jemalloc    LD_PRELOAD of Debian's libjemalloc.so.2
#   c     tcmalloc    LD_PRELOAD of Debian's libtcmalloc_minimal.so.4
# The "loop" column is the loop's own instructions per pair outside malloc
# and free, calls included (the pair column includes them). With fat LTO the
# Rust allocator may be inlined into the loop; its columns then show "-".
set -euo pipefail
cd "$(dirname "$0")/.."

M=1000000
SIZE=64
REPORT=""
while getopts "m:s:o:" opt; do
  case $opt in
    m) M=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    o) REPORT=$OPTARG ;;
    *) echo "usage: $0 [-m M] [-s SIZE] [-o REPORT.md]" >&2; exit 2 ;;
  esac
done

command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind not installed (ci/deps.sh)" >&2; exit 1; }

OUT=target/callgrind
mkdir -p "$OUT"

echo "callgrind.sh: building (release)" >&2
cargo build --release --quiet --example fastpath_count
cargo build --release --quiet --features override --lib
SO=target/release/libslubmalloc.so

cat >"$OUT/pairs.c" <<'EOF'
/* N malloc + free pairs of SIZE bytes; the empty asm keeps the pair alive. */
#include <stdlib.h>
__attribute__((noinline)) static void pairs(long n, size_t size) {
  for (long i = 0; i < n; i++) {
    char *p = malloc(size);
    if (!p) abort();
    *(volatile char *)p = 1;
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
}
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
  /* Blocks of the same size kept live, so that no allocator sees its page or
     slab become empty at every free (mimalloc retires such a page). */
  void *keep[16];
  for (int i = 0; i < 16; i++) keep[i] = malloc(size);
  pairs(n, size);
  for (int i = 0; i < 16; i++) free(keep[i]);
  return 0;
}
EOF
cc -O2 -g -o "$OUT/pairs" "$OUT/pairs.c"

libdir=$(dirname "$(cc -print-file-name=libc.so.6)")
find_lib() {
  for d in "$libdir" /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
    [ -e "$d/$1" ] && { echo "$d/$1"; return; }
  done
  return 0 # not found: empty output (a failure would end the script under set -e)
}

# Total Ir of one callgrind run, and the callgrind output file.
# Args: tag n preload cmd...
run_cg() {
  local tag=$1 n=$2 preload=$3
  shift 3
  local file="$OUT/$tag.$n.cg"
  if [ -n "$preload" ]; then
    LD_PRELOAD=$preload valgrind --tool=callgrind --callgrind-out-file="$file" "$@" "$n" "$SIZE" >/dev/null 2>"$file.log"
  else
    valgrind --tool=callgrind --callgrind-out-file="$file" "$@" "$n" "$SIZE" >/dev/null 2>"$file.log"
  fi
  grep -E '^(summary|totals):' "$file" | head -1 | awk '{print $2}'
}

# Inclusive Ir of the first (costliest) function whose name matches the
# regex $2 in callgrind file $1 (0 when none). awk reads to the end so that
# callgrind_annotate never dies of SIGPIPE under pipefail.
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v re="$2" '
      /^ *[0-9,]+ .*:/ {
        name = $0; sub(/^ *[0-9,]+ *(\([^)]*\))? */, "", name)
        fn = name; sub(/^.*:/, "", fn); sub(/ .*$/, "", fn)
        if (!found && fn ~ re) { v = $1; gsub(/,/, "", v); found = 1 }
      }
      END { print found ? v : 0 }'
}

per_pair() { awk -v a="$1" -v b="$2" -v m="$M" 'BEGIN { printf "%.1f", (b - a) / m }'; }

rows=()
# Args: path allocator preload malloc_re free_re loop_re cmd...
measure() {
  local path=$1 name=$2 preload=$3 malloc_re=$4 free_re=$5 loop_re=$6
  shift 6
  local tag="$path-$name"
  echo "callgrind.sh: $tag" >&2
  local a b
  a=$(run_cg "$tag" "$M" "$preload" "$@")
  b=$(run_cg "$tag" $((2 * M)) "$preload" "$@")
  local pair mal fre loop
  pair=$(per_pair "$a" "$b")
  mal="-"; fre="-"; loop="-"
  if [ -n "$malloc_re" ]; then
    local ma mb fa fb la lb
    ma=$(inclusive "$OUT/$tag.$M.cg" "$malloc_re"); mb=$(inclusive "$OUT/$tag.$((2 * M)).cg" "$malloc_re")
    fa=$(inclusive "$OUT/$tag.$M.cg" "$free_re"); fb=$(inclusive "$OUT/$tag.$((2 * M)).cg" "$free_re")
    [ "$mb" != 0 ] && mal=$(per_pair "$ma" "$mb")
    [ "$fb" != 0 ] && fre=$(per_pair "$fa" "$fb")
    la=$(inclusive "$OUT/$tag.$M.cg" "$loop_re"); lb=$(inclusive "$OUT/$tag.$((2 * M)).cg" "$loop_re")
    if [ "$lb" != 0 ] && [ "$mal" != - ] && [ "$fre" != - ]; then
      loop=$(awk -v l="$(per_pair "$la" "$lb")" -v m="$mal" -v f="$fre" 'BEGIN { printf "%.1f", l - m - f }')
    fi
  fi
  rows+=("| $path | $name | $pair | $mal | $fre | $loop |")
}

# Rust: with fat LTO the allocator may be inlined into the loop, in which
# case only the pair count exists.
measure rust slubmalloc "" '^(__rust_alloc|__rg_alloc|.*SlubMalloc.*alloc.*)$' '^(__rust_dealloc|__rg_dealloc|.*SlubMalloc.*dealloc.*)$' \
  '^pairs$' target/release/examples/fastpath_count
measure c slubmalloc "$PWD/$SO" '^malloc$' '^free$' '^pairs$' "$OUT/pairs"
measure c glibc "" '^malloc$' '^free$' '^pairs$' "$OUT/pairs"
for peer in mimalloc:libmimalloc.so.2 jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4; do
  lib=$(find_lib "${peer#*:}")
  if [ -z "$lib" ]; then
    echo "callgrind.sh: ${peer#*:} not installed, skipping ${peer%%:*} (ci/deps.sh installs it)" >&2
    continue
  fi
  # Debian's builds name their entry points malloc/free or mi_malloc/mi_free, je_*, tc_*.
  measure c "${peer%%:*}" "$lib" '^(malloc|mi_malloc|je_malloc|tc_malloc)$' '^(free|mi_free|je_free|tc_free|cfree)$' '^pairs$' "$OUT/pairs"
done

{
  echo "Instructions per malloc + free pair of $SIZE B (callgrind, Ir(2M) - Ir(M) over M = $M pairs)"
  echo "$(date -u +%Y-%m-%d) $(git log -1 --format=%h 2>/dev/null || echo '?'), valgrind $(valgrind --version | sed 's/valgrind-//')"
  echo
  echo "| path | allocator | pair (incl. loop) | malloc | free | loop |"
  echo "|---|---|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} | tee "${REPORT:-/dev/null}"
