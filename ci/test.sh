#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/deps.sh
cargo test --release "$@"
# The C library's declarations that only the `override` feature builds
# (src/sys.rs), checked against libc's.
cargo test --release --lib --features override sys::
