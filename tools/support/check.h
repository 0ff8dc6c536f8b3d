/* Minimal test harness: CHECK records a failure with file:line and goes on; main returns
 * check_summary() (0 when everything passed, 1 otherwise). CUDA_CHECK is the CUDA check of test and
 * tool code: a failed CUDA runtime call ends the process with file:line, the call and the error. */
#ifndef WEAVE_TEST_CHECK_H
#define WEAVE_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_failures = 0, check_count = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    check_count++;                                                             \
    if (!(cond)) {                                                             \
      check_failures++;                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_MSG(cond, ...)                                                   \
  do {                                                                         \
    check_count++;                                                             \
    if (!(cond)) {                                                             \
      check_failures++;                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
    }                                                                          \
  } while (0)

/* A CUDA runtime call that must succeed. On an error, `on_error` runs with `what` naming a string
 * "file:line: call: CUDA error string" (CUDA_CHECK prints it and exits 1; gpu_rma_test records it as
 * a failure of one rank's test and goes on). For files that include cuda_runtime_api.h. */
#define CUDA_CHECK_OR(call, what, on_error)                                                                         \
  do {                                                                                                              \
    cudaError_t check_cuda_err_ = (call);                                                                           \
    if (check_cuda_err_ != cudaSuccess) {                                                                           \
      char what[512];                                                                                               \
      snprintf(what, sizeof what, "%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(check_cuda_err_)); \
      on_error;                                                                                                     \
    }                                                                                                               \
  } while (0)

#define CUDA_CHECK(call) CUDA_CHECK_OR(call, check_what_, (fprintf(stderr, "%s\n", check_what_), exit(1)))

static inline int check_summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
  return check_failures ? 1 : 0;
}

#endif
