#!/usr/bin/env bash
# What slubmalloc costs a user's build: the clean release build of a small
# crate that uses it as its global allocator, against the same crate with
# the `mimalloc` crate, interleaved, ROUNDS rounds (median of each, and the
# ratio). Sources are fetched first, so no download is timed.
#
#   ci/build_time.sh            # ROUNDS=3
#
# Prints one line per build and a closing line:
#   build time: slubmalloc 2.9 s, mimalloc 8.0 s (median of 3), ratio 0.36
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${ROUNDS:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make_crate() { # name dependency-line allocator-path
  mkdir -p "$work/$1/src"
  printf '[package]\nname = "uses-%s"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s\n\n[workspace]\n' \
    "$1" "$2" >"$work/$1/Cargo.toml"
  printf '#[global_allocator]\nstatic GLOBAL: %s = %s;\n\nfn main() {\n    let v: Vec<String> = (0..1000).map(|i| i.to_string()).collect();\n    println!("{}", v.len());\n}\n' \
    "$3" "$3" >"$work/$1/src/main.rs"
  (cd "$work/$1" && cargo fetch --quiet)
}
make_crate slubmalloc "slubmalloc = { path = \"$root\" }" slubmalloc::SlubMalloc
make_crate mimalloc 'mimalloc = "0.1"' mimalloc::MiMalloc

build() { # name -> seconds
  local t0 t1
  rm -rf "$work/target-$1"
  t0=$(date +%s.%N)
  (cd "$work/$1" && CARGO_TARGET_DIR="$work/target-$1" cargo build --release --quiet --offline)
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}' 
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

: >"$work/slubmalloc.times"
: >"$work/mimalloc.times"
for r in $(seq "$rounds"); do
  for c in slubmalloc mimalloc; do
    s=$(build $c)
    echo "round $r: $c $s s"
    echo "$s" >>"$work/$c.times"
  done
done
s=$(median <"$work/slubmalloc.times")
m=$(median <"$work/mimalloc.times")
awk -v s="$s" -v m="$m" -v r="$rounds" \
  'BEGIN {printf "build time: slubmalloc %.1f s, mimalloc %.1f s (median of %d), ratio %.2f\n", s, m, r, s / m}' 
