#!/usr/bin/env bash
# One batch on a lent GPU machine (binaries built elsewhere, carried in build/): GPU tests, sanitizers,
# benchmark tables; logs under $OUT (or ./device-out). Usage: scripts/device_run.sh [quick|full|bench|san]...
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-device-out}
mkdir -p "$out"
export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
b=build
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$out/gpu.txt" 2>&1
for mode in "$@"; do
  case $mode in
    quick)
      timeout 240 $b/tests/gpu_gemm_rs --quick 2>&1 | tee "$out/gemm_rs_quick.log" | grep -E "FAIL|passed|timeout" | head -40
      ;;
    full)
      timeout 400 $b/tests/gpu_gemm_rs 2>&1 | tee "$out/gemm_rs_full.log" | grep -E "FAIL|passed" | head -40
      timeout 120 $b/gpu_hopper_gemm_test 2>&1 | tail -3 | tee "$out/hopper.log"
      timeout 120 $b/gpu_rma_test --quick 2>&1 | tail -3 | tee "$out/rma.log"
      ;;
    san)
      for tool in memcheck racecheck synccheck; do
        timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu_gemm_rs --tiny --world 1 \
          > "$out/san_$tool.log" 2>&1
        echo "sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed' "$out/san_$tool.log" | tr '\n' ' ')"
      done
      ;;
    bench)
      for g in 1 2 4 8; do
        timeout 120 $b/weave-bench -M 8192 -N 8192 -K 28672 -g $g -d bf16 --strategy all -n 20 -w 5 -c 1 \
          -J "$out/bench_g$g.json" 2>&1 | tee "$out/bench_g$g.log" | grep -v "^#   "
      done
      ;;
    gemm)
      timeout 200 $b/weave-bench --op gemm -J "$out/bench_gemm.json" 2>&1 | tee "$out/bench_gemm.log" | tail -30
      ;;
  esac
done
