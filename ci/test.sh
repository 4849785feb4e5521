#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/deps.sh
cargo test --release "$@"
