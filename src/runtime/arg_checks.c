/* Argument checks shared by the ops' entry points (plans, weave_gemm, weave_gemm_ex), and the public
 * row split: runtime/arg_checks.h. */
#include "runtime/arg_checks.h"

#include <limits.h>

#include "common/dtype.h"
#include "common/schedule.h"
#include "runtime/internal.h" /* weave_fail */

weave_result_t weave_row_split(int M, int world, int rank, int *row_begin, int *rows) {
  if (!row_begin || !rows)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_row_split: row_begin and rows must be non-NULL");
  if (M < 0 || world < 1 || rank < 0 || rank >= world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "weave_row_split: M %d, world %d, rank %d (need M >= 0, "
                      "world >= 1, 0 <= rank < world)",
                      M, world, rank);
  weave_split_rows_of(M, world, rank, row_begin, rows);
  return WEAVE_SUCCESS;
}

weave_result_t weave_check_gemm_shape(weave_team_t team, const char *fn, int M, int N, int K, const char *k_name) {
  if (M < 1 || N < 1 || K < 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: M %d, N %d, %s %d must all be >= 1", fn, M, N, k_name,
                      K);
  /* Far beyond any one GPU's memory; below it the tile counts and element offsets stay in range
   * (tiles of C are ints on the host and the device). */
  if ((double)M * N > (double)INT_MAX * 64 || (double)M * K > (double)INT_MAX * 64 ||
      (double)N * K > (double)INT_MAX * 64)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: %d x %d x %d is too large", fn, M, N, K);
  return WEAVE_SUCCESS;
}

weave_result_t weave_check_fp8_args(weave_team_t team, const char *fn, weave_dtype_t dtype, weave_dtype_t out_dtype,
                                    weave_layout_t b_layout, weave_scale_mode_t scale_mode, weave_fp8_accum_t fp8_accum,
                                    int K, const char *k_name) {
  const int fp8 = weave_dtype_is_fp8(dtype);
  if ((unsigned)scale_mode > WEAVE_SCALE_ROW)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: scale_mode %d is not NONE/TENSOR/ROW", fn,
                      (int)scale_mode);
  if ((unsigned)fp8_accum > WEAVE_FP8_ACCUM_FAST)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: fp8_accum %d is not FP32/FAST", fn, (int)fp8_accum);
  if (!fp8) {
    if (fp8_accum != WEAVE_FP8_ACCUM_FP32)
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: fp8_accum FAST applies to fp8 inputs only (dtype %s accumulates in fp32)", fn,
                        weave_dtype_name(dtype));
    if (out_dtype != WEAVE_DTYPE_AUTO && out_dtype != dtype)
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: out_dtype %d differs from dtype %s: only fp8 inputs take another output type (use "
                        "WEAVE_DTYPE_AUTO)",
                        fn, (int)out_dtype, weave_dtype_name(dtype));
    if (scale_mode != WEAVE_SCALE_NONE)
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: scale_mode %d: scales apply to fp8 inputs only (dtype %s)", fn, (int)scale_mode,
                        weave_dtype_name(dtype));
    return WEAVE_SUCCESS;
  }
  if (out_dtype != WEAVE_DTYPE_AUTO && out_dtype != WEAVE_BF16 && out_dtype != WEAVE_FP16)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: out_dtype %d: fp8 inputs write bf16 or fp16 (WEAVE_BF16, WEAVE_FP16 or WEAVE_DTYPE_AUTO)",
                      fn, (int)out_dtype);
  if (b_layout != WEAVE_LAYOUT_COL)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: fp8 needs b_layout WEAVE_LAYOUT_COL (B as [N, K], nn.Linear's weight): the fp8 tensor-core "
                      "instructions read both operands K-major",
                      fn);
  if (K % 16)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: fp8 needs %s a multiple of 16 (got %d): rows of A and B must be 16-byte multiples for the "
                      "TMA loads",
                      fn, k_name, K);
  return WEAVE_SUCCESS;
}
