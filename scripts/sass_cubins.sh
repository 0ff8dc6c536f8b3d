#!/usr/bin/env bash
# Builds one sm_90a cubin per CUDA translation unit of a source tree, with the flags of the CMake
# Release build (CMakeLists.txt: CMAKE_CUDA_FLAGS and the weave_cuda_obj options), for
# scripts/sass_diff.py:
#
#   git archive HEAD | tar -x -C /tmp/old            # the tree before a change
#   scripts/sass_cubins.sh /tmp/old /tmp/cub_old
#   scripts/sass_cubins.sh .        /tmp/cub_new
#   for f in /tmp/cub_old/*.cubin; do scripts/sass_diff.py "$f" /tmp/cub_new/$(basename "$f"); done
#
# TREE: a weave source tree; OUT: a directory for <unit>.cubin. Needs nvcc, not a GPU.
# JOBS (default 2) units are compiled at a time. EXTRA_NVCC_FLAGS is appended (e.g.
# -DWEAVE_HGEMM_PROFILE=1 for the profiling build). The generated weave_version.h is made
# from cmake/weave_version.h.in with version 0.0.0 (the kernels do not read it).
set -euo pipefail
tree=$(cd "$1" && pwd)
out=$2
mkdir -p "$out/include"
sed -e 's/@PROJECT_VERSION_[A-Z]*@/0/' -e 's/@PROJECT_VERSION@/0.0.0/' "$tree/cmake/weave_version.h.in" \
  >"$out/include/weave_version.h"
nvcc=${NVCC:-nvcc}
flags=(-gencode arch=compute_90a,code=sm_90a -lineinfo --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra
       -O3 -DNDEBUG -DWEAVE_HAVE_CUDA=1 -std=c++17 -Xptxas=--warn-on-spills,--warning-as-error)
# shellcheck disable=SC2206
extra=(${EXTRA_NVCC_FLAGS:-})
units=(src/kernels/gemm_rs.cu src/gemm/hopper/gemm_hopper.cu tools/bench/bench_hopper_gemm.cu
       tests/gpu_hopper_gemm_test.cu tests/gpu_rma_test.cu tests/gpu_rma_compile_test.cu src/kernels/ag_gemm.cu)
# trees before the tools' support left tests/ keep it there
support=tools/support bench_dir=tools/bench
[ -d "$tree/$support" ] || { support=tests/support bench_dir=tests/bench; }
units[2]=$bench_dir/bench_hopper_gemm.cu
build_one() {
  local u=$1 name
  name=$(basename "${u%.cu}")
  "$nvcc" "${flags[@]}" "${extra[@]}" -I"$tree/cmake/guard/no_nccl" -I"$tree/$support" -I"$tree/include" \
    -I"$out/include" -I"$tree/src" -x cu -cubin -o "$out/$name.cubin" "$tree/$u"
}
pids=()
for u in "${units[@]}"; do
  [ -f "$tree/$u" ] || { echo "skip $u (not in $tree)"; continue; }
  build_one "$u" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-2}" ]; do sleep 1; done
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
