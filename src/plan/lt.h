/*
 * cuBLASLt wrapper: the row-major GEMM of the baseline strategy, of the tests' and tools' cuBLASLt
 * references and of the benchmarks' cuBLASLt rows (one implementation for all of them).
 * C[M, N] = alpha * A[M, K] . B (B [K, N] row-major or [N, K] row-major), fp32 accumulation, output in
 * `out` (the input dtype, or WEAVE_FP32 for a reference). The algorithm is cuBLASLt's first heuristic
 * choice for a 64 MiB workspace that the object owns and the call's pointers: chosen at create for
 * 256-byte alignment and for each lesser one a call can have.
 */
#ifndef WEAVE_LT_H
#define WEAVE_LT_H

#include <stddef.h>
#include <stdint.h>

#include "weave.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weave_lt weave_lt_t;

/* sm_target > 0 sets CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET. errmsg gets the reason of a failure. */
weave_result_t weave_lt_create(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t b_layout,
                               int sm_target, weave_lt_t **lt, char *errmsg, size_t errlen);
/* Options beyond the shape and types (fp8: `in` WEAVE_FP8_E4M3, B [N, K]; cuBLASLt's "TN" fp8 form).
 * scale_mode: the scales weave_lt_run_scaled passes (TENSOR: CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER;
 * ROW: the same pointers with CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F). fast_accum: fp8 only,
 * CUBLASLT_MATMUL_DESC_FAST_ACCUM (0, the default: cuBLASLt's promotion of partial sums to fp32,
 * as weave's WEAVE_FP8_ACCUM_FP32; 1: the tensor cores' own accumulation, as WEAVE_FP8_ACCUM_FAST). */
typedef struct {
  int sm_target;
  int scale_mode; /* weave_scale_mode_t */
  int fast_accum;
} weave_lt_opts_t;
#define WEAVE_LT_OPTS_INIT \
  { 0, WEAVE_SCALE_NONE, 0 }
weave_result_t weave_lt_create_ex(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t b_layout,
                                  const weave_lt_opts_t *opts, weave_lt_t **lt, char *errmsg, size_t errlen);
/* The largest power of two, up to 256, that divides the three addresses: the alignment the
 * algorithm of a call with these pointers is picked for (cuBLASLt assumes 256 unless told less). */
static inline unsigned weave_lt_alignment(const void *A, const void *B, const void *C) {
  const uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)256;
  return (unsigned)(bits & (~bits + 1)); /* the lowest set bit */
}
/* Picks the algorithm for a call with these pointers (done by the run too; callers that must not
 * fail once they have enqueued work call this first): WEAVE_ERROR_UNSUPPORTED when cuBLASLt has
 * none for their alignment. Not thread-safe (one lt per thread). */
weave_result_t weave_lt_select(weave_lt_t *lt, const void *A, const void *B, const void *C);
/* Enqueues C = alpha * A . B on stream (NULL: the default stream), with the algorithm for the
 * pointers' alignment. WEAVE_ERROR_UNSUPPORTED when cuBLASLt has none for it, WEAVE_ERROR_CUDA when
 * it refuses. */
weave_result_t weave_lt_run(weave_lt_t *lt, float alpha, const void *A, const void *B, void *C, weave_stream_t stream);
/* The same with this call's scales (device pointers; NULL, NULL for a plan without scales). Scale
 * pointers that cuBLASLt refuses (not 16-byte aligned) are copied into the lt's own buffer first, on
 * the stream. */
weave_result_t weave_lt_run_scaled(weave_lt_t *lt, float alpha, const void *A, const void *B, const float *scale_a,
                                   const float *scale_b, void *C, weave_stream_t stream);
/* The algorithm the heuristic chose, as raw enum values of cublasLt.h (cublasLtMatmulTile_t,
 * cublasLtMatmulStages_t, cublasLtClusterShape_t, ...): "algo A tile T stages S cluster C swizzle W
 * splitk K reduction R", -1 for a value that cannot be read. cuBLASLt sees the problem transposed
 * (C^T = B^T . A^T, column-major), so its tile is N x M. */
void weave_lt_describe(const weave_lt_t *lt, char *buf, size_t len);
void weave_lt_destroy(weave_lt_t *lt);

#ifdef __cplusplus
}
#endif

#endif
