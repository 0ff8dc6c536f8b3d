/*
 * cuBLASLt wrapper: the row-major GEMM the baseline strategy and the benchmarks use.
 * C[M, N] = alpha * A[M, K] . B (B [K, N] row-major or [N, K] row-major), fp32 accumulation.
 */
#ifndef WEAVE_LT_H
#define WEAVE_LT_H

#include "weave.h"

typedef struct weave_lt weave_lt_t;

/* sm_target > 0 sets CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET. errmsg gets the reason of a failure. */
weave_result_t weave_lt_create(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t b_layout,
                               int sm_target, weave_lt_t **lt, char *errmsg, size_t errlen);
weave_result_t weave_lt_run(weave_lt_t *lt, float alpha, const void *A, const void *B, void *C, weave_stream_t stream);
void weave_lt_destroy(weave_lt_t *lt);

#endif
