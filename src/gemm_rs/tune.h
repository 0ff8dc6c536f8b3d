/*
 * Tuning cache: weave-bench --tune measures the strategies and GEMM/communication splits of a shape
 * and appends the fastest to a text file; plans read it (WEAVE_TUNE_FILE) when the strategy is AUTO
 * or the split is not given. One entry per line, tab-separated:
 *   device  world  M_bucket  N  K_local  dtype  strategy  gemm_blocks  comm_blocks  speedup
 * M_bucket is M rounded up to a power of two; a later line overrides an earlier one with the same key.
 * dtype is the inputs' name (weave_dtype_name), with "+fast" for fp8 with WEAVE_FP8_ACCUM_FAST: the
 * two accumulations run different kernels, so each has its own entries.
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
} weave_tune_entry_t;

int weave_tune_bucket(int M);
/* 0 on success, -1 on a malformed line (comments '#' and blank lines are -1 too). */
int weave_tune_parse_line(const char *line, weave_tune_entry_t *e);
void weave_tune_format_line(const weave_tune_entry_t *e, char *buf, size_t len);
/* Last matching entry of `path`: 0 found, -1 not found or no file. */
int weave_tune_find(const char *path, const char *device, int world, int M, int N, int K, weave_dtype_t dtype,
                    weave_fp8_accum_t fp8_accum, weave_tune_entry_t *out);
int weave_tune_append(const char *path, const weave_tune_entry_t *e);

#endif
