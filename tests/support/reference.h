/*
 * CPU reference for GEMM + ReduceScatter in fp64, and host conversions of bf16/fp16. Independent of
 * the kernels: the tests and the bench check the GPU against it.
 */
#ifndef WEAVE_REFERENCE_H
#define WEAVE_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "weave.h"

float weave_bf16_to_float(uint16_t h);
uint16_t weave_float_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float weave_fp16_to_float(uint16_t h);
uint16_t weave_float_to_fp16(float f); /* round to nearest even; overflow -> inf */

/* Element i of a host array of dtype t, as double; and the store of a double. */
double weave_host_get(weave_dtype_t t, const void *p, size_t i);
void weave_host_set(weave_dtype_t t, void *p, size_t i, double v);

/* Rows [row_begin, row_begin+rows) of C = alpha * sum_r A_r . B_r (+ bias), in fp64.
 * A[r]: [M, K] row-major, B[r]: [K, N] (ROW) or [N, K] (COL), bias: [N] or NULL. out: [rows, N]. */
void weave_ref_gemm_rs(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                       const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                       double *out);
/* Same function by the textbook triple loop (dot product per element): checks the blocked one. */
void weave_ref_gemm_rs_naive(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout,
                             double alpha, const void *const *A, const void *const *B, const void *bias,
                             int row_begin, int rows, double *out);

/* Compare `got` (dtype t, [rows, N]) with `ref`: counts elements outside atol + rtol*|ref| (NaN/Inf
 * always count), and returns the relative Frobenius error ||got-ref|| / ||ref||. */
typedef struct {
  size_t wrong, nonfinite;
  double rel_err, max_abs_err;
  size_t first_bad; /* index of the first bad element, or (size_t)-1 */
} weave_check_t;
void weave_check_result(weave_dtype_t t, const void *got, const double *ref, size_t n, double atol, double rtol,
                        weave_check_t *out);
/* Tolerance for a K-term fp32-accumulated dot of dtype t inputs, output rounded to t. */
void weave_tolerance(weave_dtype_t t, int K_total, double *atol, double *rtol);

/* Fills with uniform values in [-1, 1) of dtype t from a 64-bit seed (splitmix64). */
void weave_fill_random(weave_dtype_t t, void *p, size_t n, uint64_t seed);

#endif
