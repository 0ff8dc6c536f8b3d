# Device RMA API (include/weave_device.cuh): GPU test suite and compile-only instantiation test.
# Included by the top-level CMakeLists.txt inside its CUDA block (target `weave` exists).

# 1, 2, 4, 8 ranks sharing GPU 0 (one host thread per rank); exit 77 without a device.
add_executable(gpu_rma_test ${PROJECT_SOURCE_DIR}/tests/gpu_rma_test.cu)
target_link_libraries(gpu_rma_test PRIVATE weave)
add_test(NAME gpu_rma COMMAND gpu_rma_test)
set_tests_properties(gpu_rma PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)

# Every atomic x sem x scope (and red/ld/st form) instantiated, so ptxas checks each PTX instruction
# for sm_90a at build time; running it needs no device.
add_executable(gpu_rma_compile_test ${PROJECT_SOURCE_DIR}/tests/gpu_rma_compile_test.cu)
target_include_directories(gpu_rma_compile_test PRIVATE ${PROJECT_SOURCE_DIR}/include)
add_test(NAME gpu_rma_compile COMMAND gpu_rma_compile_test)
set_tests_properties(gpu_rma_compile PROPERTIES LABELS cpu TIMEOUT 60)
