#!/usr/bin/env bash
# Builds weave and runs every test: the format and lint checks, the CPU suite and the GPU suite (which
# reports "skipped" without a GPU), the installed package with the example built against it (with CUDA), the Python package's
# tests, then the CPU suite again under ASan+UBSan. Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

# Formatting and lint (scripts/lint.sh: clang-format for C/CUDA, ruff for Python), before the build.
./scripts/lint.sh

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
(cd build && ctest --output-on-failure "$@")

# The package: install into a temporary prefix, build and run examples/gemm_rs against it.
if [ -e build/libweave.so ]; then
  ./scripts/check_install.sh build
fi

# The Python package (python/tests): the library layer without torch; with torch also the argument
# checks, fake tensors, tracing and the backward over gloo; with a GPU every rank's results through
# torchrun. WEAVE_PYTHON picks the interpreter (default python3). pytest's exit 5 (no test collected)
# is no failure; without pytest the step says so and is skipped.
python=${WEAVE_PYTHON:-python3}
if "$python" -c 'import pytest' 2>/dev/null; then
  if [ -e build/libweave.so ]; then export WEAVE_LIBRARY=${WEAVE_LIBRARY:-$PWD/build/libweave.so}; fi
  set +e
  "$python" -m pytest python/tests -q -rs
  rc=$?
  set -e
  [ $rc = 0 ] || [ $rc = 5 ] || exit $rc
else
  echo "test.sh: python tests skipped: $python has no pytest (pip install pytest, or set WEAVE_PYTHON)"
fi

# The CPU suite again under AddressSanitizer + UBSan (host code only).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEAVE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$jobs" --target weave_cpu_tests
(cd build-asan && ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=1 ctest --output-on-failure -L cpu)
