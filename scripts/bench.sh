#!/usr/bin/env bash
# Builds weave and runs the main benchmark on the visible GPUs. Without a GPU, weave-bench prints the
# plan and the roofline. Extra arguments go to weave-bench (e.g. -g 8 -M 4096).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target weave-bench
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
ranks=${gpus:-0}
[ "$ranks" -ge 2 ] || ranks=4   # one GPU (or none): 4 ranks share it
export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
exec ./build/weave-bench -M 8192 -N 8192 -K 28672 -g "$ranks" -d bf16 --strategy all "$@"
