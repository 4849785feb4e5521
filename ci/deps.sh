#!/usr/bin/env bash
# Installs what the tests and the benchmark comparison need on a fresh Debian
# machine: a C compiler, the real programs run under the preload, and the
# peer allocators, procps for `kill` (the report-by-signal test),
# google-perftools for `google-pprof` (the heap profile tests), binutils for
# `nm` (the preload library's exported symbols). Skips
# packages that are already installed.
set -euo pipefail
pkgs=(gcc g++ libc6-dev binutils procps python3 sqlite3 git valgrind libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 google-perftools)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "ci/deps.sh: not root and no sudo: install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo -E)
  fi
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# What the tests run, present now:
for cmd in cc g++ gcc nm python3 sqlite3 git kill google-pprof; do
  command -v "$cmd" >/dev/null || { echo "ci/deps.sh: $cmd missing after install" >&2; exit 1; }
done
