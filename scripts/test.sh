#!/usr/bin/env bash
# Builds weave and runs every test: the CPU suite (plain, then under ASan+UBSan) and the GPU suite
# (which reports "skipped" without a GPU). Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure "$@")

# The CPU suite again under AddressSanitizer + UBSan (host code only).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEAVE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs" --target weave_cpu_tests
(cd build-asan && ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 ctest --output-on-failure -L cpu)
