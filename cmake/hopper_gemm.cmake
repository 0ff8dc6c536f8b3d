# weave's Hopper GEMM (src/gemm_hopper.cu, TMA + wgmma): library source, GPU test, standalone bench.
# Included by the top-level CMakeLists.txt inside its CUDA block (target `weave` exists).

# The top-level list may already name the source; add it only once.
get_target_property(_weave_hgemm_srcs weave SOURCES)
if(NOT "src/gemm_hopper.cu" IN_LIST _weave_hgemm_srcs AND
   NOT "${PROJECT_SOURCE_DIR}/src/gemm_hopper.cu" IN_LIST _weave_hgemm_srcs)
  target_sources(weave PRIVATE ${PROJECT_SOURCE_DIR}/src/gemm_hopper.cu)
endif()

# Every dtype x B layout x tail shape against an fp64 CPU reference, large shapes against cuBLASLt.
# Exit 77 (skipped) without a device or on a device that is not sm_90.
add_executable(gpu_hopper_gemm_test ${PROJECT_SOURCE_DIR}/tests/gpu_hopper_gemm_test.cu)
target_link_libraries(gpu_hopper_gemm_test PRIVATE weave CUDA::cublasLt)
add_test(NAME gpu_hopper_gemm COMMAND gpu_hopper_gemm_test)
set_tests_properties(gpu_hopper_gemm PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600)

# `weave-bench-gemm`: the `--op gemm` part of weave-bench on its own.
add_executable(weave-bench-gemm ${PROJECT_SOURCE_DIR}/tools/bench_gemm_main.c
                                ${PROJECT_SOURCE_DIR}/tools/bench_gemm.cu)
target_link_libraries(weave-bench-gemm PRIVATE weave CUDA::cublasLt)
