/*
 * Tuning cache: weave-bench --tune measures the strategies and GEMM/communication splits of a shape
 * and appends the fastest to a text file; plans read it (WEAVE_TUNE_FILE) when the strategy is AUTO
 * or the split is not given. One entry per line, tab-separated:
 *   device  world  M_bucket  N  K_local  dtype  strategy  gemm_blocks  comm_blocks  speedup
 * M_bucket is M rounded up to a power of two; a later line overrides an earlier one with the same key.
 * dtype is the inputs' name (weave_dtype_name), then for fp8 up to two suffixes, in this order:
 *   dtype[+row][+fast]      e.g. fp8_e4m3, fp8_e4m3+row, fp8_e4m3+fast, fp8_e4m3+row+fast
 * "+fast": WEAVE_FP8_ACCUM_FAST; the two accumulations run different kernels, so each has its own
 * entries. "+row": per-row scales (WEAVE_SCALE_ROW), which run other code than per-tensor or no
 * scales: the standalone GEMM (bulk) instantiates the weave_hgemm_scale_fp8 policy (a scale load per
 * row and per column group of each tile) instead of weave_hgemm_scale_none, the fused kernel takes
 * that policy's per-row branch, and the baseline's cuBLASLt runs CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F.
 * WEAVE_SCALE_NONE and WEAVE_SCALE_TENSOR share the entries without "+row": they run the same
 * kernels and the same cuBLASLt mode. The standalone kernel folds tensor scales into alpha (one
 * product a thread; src/gemm/hopper/gemm_hopper.cu), the fused kernel's policy multiplies each tile
 * by a scalar, a[0] b[0] or 1 (scales.cuh), and cuBLASLt keeps its default scalar scale mode
 * (CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F), the scale pointers set or left unset (= 1). Any other
 * suffix, another order, or a suffix on a 16/32-bit dtype makes the line malformed.
 */
#ifndef WEAVE_TUNE_H
#define WEAVE_TUNE_H

#include "weave.h"

typedef struct {
  char device[256];
  int world, m_bucket, N, K;
  weave_dtype_t dtype;
  weave_strategy_t strategy;
  int gemm_blocks, comm_blocks;
  double speedup; /* over the baseline, as measured */
  weave_fp8_accum_t fp8_accum; /* fp8: the accumulation measured ("+fast" after the dtype) */
  weave_scale_mode_t scale_mode; /* fp8: WEAVE_SCALE_ROW ("+row"), else the class of NONE and TENSOR:
                                  * parsed as WEAVE_SCALE_NONE; TENSOR formats as NONE does */
} weave_tune_entry_t;

int weave_tune_bucket(int M);
/* 0 on success, -1 on a malformed line (comments '#' and blank lines are -1 too). */
int weave_tune_parse_line(const char *line, weave_tune_entry_t *e);
void weave_tune_format_line(const weave_tune_entry_t *e, char *buf, size_t len);
/* Last matching entry of `path`: 0 found, -1 not found or no file. scale_mode matches by class: ROW
 * only entries with "+row", NONE and TENSOR only those without. */
int weave_tune_find(const char *path, const char *device, int world, int M, int N, int K, weave_dtype_t dtype,
                    weave_fp8_accum_t fp8_accum, weave_scale_mode_t scale_mode, weave_tune_entry_t *out);
int weave_tune_append(const char *path, const weave_tune_entry_t *e);

#endif
