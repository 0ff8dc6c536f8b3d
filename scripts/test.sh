#!/usr/bin/env bash
# Builds weave and runs every test: the CPU suite and the GPU suite (which reports "skipped" without a
# GPU), the installed package with the example built against it (with CUDA), then the CPU suite again
# under ASan+UBSan. Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure "$@")

# The package: install into a temporary prefix, build and run examples/gemm_rs against it.
if [ -e build/libweave.so ]; then
  ./scripts/check_install.sh build
fi

# The CPU suite again under AddressSanitizer + UBSan (host code only).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEAVE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs" --target weave_cpu_tests
(cd build-asan && ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 ctest --output-on-failure -L cpu)
