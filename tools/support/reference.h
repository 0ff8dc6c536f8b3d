/*
 * CPU reference for GEMM + ReduceScatter in fp64, and host conversions of bf16/fp16/fp8. Independent of
 * the kernels: the tests and the bench check the GPU against it.
 */
#ifndef WEAVE_REFERENCE_H
#define WEAVE_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

#include "weave.h"

#ifdef __cplusplus
extern "C" {
#endif

float weave_bf16_to_float(uint16_t h);
uint16_t weave_float_to_bf16(float f); /* round to nearest even; NaN stays NaN */
float weave_fp16_to_float(uint16_t h);
uint16_t weave_float_to_fp16(float f); /* round to nearest even; overflow -> inf */

/* fp8 e4m3 (the "fn" variant: bias 7, no infinities, 0x7f / 0xff NaN, largest finite 448): exact
 * decode; encode rounds to nearest even and saturates to +-448 (as cuda_fp8.h's __NV_SATFINITE). */
float weave_fp8_e4m3_to_float(uint8_t v);
uint8_t weave_float_to_fp8_e4m3(float f);

/* Element i of a host array of dtype t, as double; and the store of a double. */
double weave_host_get(weave_dtype_t t, const void *p, size_t i);
void weave_host_set(weave_dtype_t t, void *p, size_t i, double v);

/* Rows [row_begin, row_begin+rows) of C = alpha * sum_r A_r . B_r (+ bias), in fp64.
 * A[r]: [M, K] row-major, B[r]: [K, N] (ROW) or [N, K] (COL), bias: [N] or NULL. out: [rows, N]. */
void weave_ref_gemm_rs(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                       const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                       double *out);
/* Same function by the textbook triple loop (dot product per element): checks the blocked one. */
void weave_ref_gemm_rs_naive(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                             const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                             double *out);

/* The same with dequantization scales and an output type (fp8 inputs): rows [row_begin, +rows) of
 *   C = alpha * sum_r sa_r[i] sb_r[j] (A_r . B_r)[i][j] (+ bias[j]) in fp64,
 * in_t: A and B; out_t: bias; sa[r], sb[r]: rank r's host scales (mode TENSOR: one each, ROW: [M] and
 * [N], NONE: unused, may be NULL). bound (NULL: not wanted): per element, what the fp8 tensor cores'
 * own accumulation may add to the error, summed over ranks and scaled. The model (checked against
 * the GPU by tests/gpu_fp8_gemm_test.cu's accuracy cases): at each k32 step the tensor cores align the 32
 * products and their running sum d to the largest of them and keep 13 fraction bits, so each of the
 * 33 terms loses less than one ulp, u = 2^-13 max(|d| before, |d| after, largest |product|): a step
 * may lose 34 u (with the rounding of the result). d runs from k = 0 with WEAVE_REF_FP8_FAST in flags
 * (twice u, as a stream-K segment restarts it), else from the start of each WEAVE_REF_FP8_CHUNK of K,
 * whose sums are added in fp32 (plus 2 ceil(K / chunk) 2^-23 max |P| for those additions).
 * With WEAVE_REF_FP8_RANDOM_SIGNS (inputs of random sign) the bound is statistical instead: each term's
 * loss then has zero mean and a variance below u^2 / 3, independent of the others, and the bound is
 * 8 standard deviations of their sum, sqrt(sum over steps of 34 u^2 / 3): far tighter than the
 * worst case, and exceeded with a probability below 1e-14 per element. */
#define WEAVE_REF_FP8_FAST 1
#define WEAVE_REF_FP8_RANDOM_SIGNS 2
void weave_ref_gemm_rs_scaled(int M, int N, int K, int world, weave_dtype_t in_t, weave_dtype_t out_t,
                              weave_layout_t b_layout, double alpha, weave_scale_mode_t mode, int flags,
                              const float *const *sa, const float *const *sb, const void *const *A,
                              const void *const *B, const void *bias, int row_begin, int rows, double *out,
                              double *bound);
/* The K the fp8 kernel's tensor cores sum from zero before an fp32 addition (one k-block) when
 * accumulation is promoted (WEAVE_FP8_ACCUM_FP32). */
#define WEAVE_REF_FP8_CHUNK 128

/* Compare `got` (dtype t, [rows, N]) with `ref`: counts elements outside atol + rtol*|ref| (NaN/Inf
 * always count), and returns the relative Frobenius error ||got-ref|| / ||ref||. */
typedef struct {
  size_t wrong, nonfinite;
  double rel_err, max_abs_err;
  size_t first_bad; /* index of the first bad element, or (size_t)-1 */
} weave_check_t;
void weave_check_result(weave_dtype_t t, const void *got, const double *ref, size_t n, double atol, double rtol,
                        weave_check_t *out);
/* The same with a per-element allowance added to atol + rtol |ref| (extra[i] >= 0, e.g. the bound of
 * weave_ref_gemm_rs_scaled); extra NULL: none. */
void weave_check_result_ex(weave_dtype_t t, const void *got, const double *ref, const double *extra, size_t n,
                           double atol, double rtol, weave_check_t *out);
/* Tolerance for a K-term fp32-accumulated dot of dtype t inputs, output rounded to t. */
void weave_tolerance(weave_dtype_t t, int K_total, double *atol, double *rtol);
/* The same for such a dot scaled by `gain` (alpha, or alpha times fp8 scales): the sums' rounding
 * scales with it, so atol is multiplied by max(|gain|, 1). */
void weave_tolerance_scaled(weave_dtype_t t, int K_total, double gain, double *atol, double *rtol);

/* The rows the GPU tests check of a rank's block of `rows` rows: three ranges (first, middle, last;
 * they may overlap) of n = min(rows, 4) rows each, begins[] relative to the block. Returns n (0: the
 * rank owns no row, nothing to check). */
int weave_sample_rows(int rows, int begins[3]);
/* This rank's block of C (got: [rows, N] of dtype t, rows from row_begin) on the sampled ranges
 * against weave_ref_gemm_rs with weave_tolerance_scaled(t, K * world, alpha); A[r] needs only the
 * sampled rows.
 * res[i] for range i (begins from weave_sample_rows); returns the wrong elements of all ranges. */
size_t weave_check_sampled_rows(int M, int N, int K, int world, weave_dtype_t t, weave_layout_t b_layout, double alpha,
                                const void *const *A, const void *const *B, const void *bias, int row_begin, int rows,
                                const void *got, weave_check_t res[3]);

/* Fills with uniform values in [-1, 1) of dtype t from a 64-bit seed (splitmix64). */
void weave_fill_random(weave_dtype_t t, void *p, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
