#!/usr/bin/env bash
# Shows slubmalloc doing its job: builds the LD_PRELOAD library, runs a real
# program (python3 building and dropping a million objects; `sort` where
# there is no python3) with every heap allocation served by slubmalloc, and
# prints the statistics report at exit (SLUBMALLOC_STATS=1): one report, the
# interpreter's own. `python3` on PATH may be a wrapper (a pyenv or virtualenv
# shim, a script) that runs other programs first; every one of them would
# print a report of its own under the preload, so the demo asks python3,
# without the preload, for the interpreter it really is and runs that.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
target=${CARGO_TARGET_DIR:-target}
lib="$(cd "$target" && pwd)/release/libslubmalloc.so"
if command -v python3 >/dev/null; then
  python=$(python3 -c 'import sys; print(sys.executable)')
  [ -x "$python" ] || python=python3
  echo "== running $python under LD_PRELOAD=$lib with SLUBMALLOC_STATS=1" >&2
  SLUBMALLOC_STATS=1 LD_PRELOAD="$lib" "$python" -c '
import threading
words = {str(i) * (i % 7 + 1): [i] * (i % 5) for i in range(300_000)}
def work(n):
    return sum(len(s) for s in sorted(str(x * 7919 % 100_003) for x in range(n)))
threads = [threading.Thread(target=work, args=(100_000,)) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
keep = [bytearray(100_000) for _ in range(20)]
print("python3 under slubmalloc:", len(words), "keys,", sum(map(len, keep)), "bytes in large blocks")
'
else
  echo "== running sort under LD_PRELOAD=$lib with SLUBMALLOC_STATS=1" >&2
  seq 1 300000 | SLUBMALLOC_STATS=1 LD_PRELOAD="$lib" sort -R | SLUBMALLOC_STATS=0 wc -l
fi
