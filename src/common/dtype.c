/* Element types and strategy names: see dtype.h. */
#include "common/dtype.h"

#include <limits.h>
#include <strings.h>

#include "runtime/internal.h" /* weave_fail */

size_t weave_dtype_size(weave_dtype_t t) {
  switch (t) {
    case WEAVE_DTYPE_AUTO: return 0;
    case WEAVE_FP32: return 4;
    case WEAVE_FP8_E4M3: return 1;
    default: return 2;
  }
}

int weave_dtype_is_fp8(weave_dtype_t t) { return t == WEAVE_FP8_E4M3; }

weave_dtype_t weave_dtype_out(weave_dtype_t in, weave_dtype_t out) {
  if (out != WEAVE_DTYPE_AUTO) return out;
  return weave_dtype_is_fp8(in) ? WEAVE_BF16 : in;
}

const char *weave_dtype_name(weave_dtype_t t) {
  switch (t) {
    case WEAVE_BF16: return "bf16";
    case WEAVE_FP16: return "fp16";
    case WEAVE_FP32: return "fp32";
    case WEAVE_FP8_E4M3: return "fp8_e4m3";
    case WEAVE_DTYPE_AUTO: return "auto";
  }
  return "?";
}

int weave_dtype_parse(const char *s, weave_dtype_t *out) {
  if (!s || !out) return -1;
  if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = WEAVE_BF16;
  else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "half") || !strcasecmp(s, "float16")) *out = WEAVE_FP16;
  else if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float") || !strcasecmp(s, "float32")) *out = WEAVE_FP32;
  else if (!strcasecmp(s, "fp8_e4m3") || !strcasecmp(s, "fp8") || !strcasecmp(s, "e4m3")) *out = WEAVE_FP8_E4M3;
  else return -1;
  return 0;
}

const char *weave_strategy_name(weave_strategy_t s) {
  switch (s) {
    case WEAVE_STRATEGY_AUTO: return "auto";
    case WEAVE_STRATEGY_FUSED: return "fused";
    case WEAVE_STRATEGY_BULK: return "bulk";
    case WEAVE_STRATEGY_BASELINE: return "baseline";
  }
  return "?";
}

weave_result_t weave_check_gemm_shape(weave_team_t team, const char *fn, int M, int N, int K, const char *k_name) {
  if (M < 1 || N < 1 || K < 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: M %d, N %d, %s %d must all be >= 1", fn, M, N, k_name, K);
  /* Far beyond any one GPU's memory; below it the tile counts and element offsets stay in range
   * (tiles of C are ints on the host and the device). */
  if ((double)M * N > (double)INT_MAX * 64 || (double)M * K > (double)INT_MAX * 64 || (double)N * K > (double)INT_MAX * 64)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: %d x %d x %d is too large", fn, M, N, K);
  return WEAVE_SUCCESS;
}

weave_result_t weave_check_fp8_args(weave_team_t team, const char *fn, weave_dtype_t dtype, weave_dtype_t out_dtype,
                                    weave_layout_t b_layout, weave_scale_mode_t scale_mode, weave_fp8_accum_t fp8_accum,
                                    int K, const char *k_name) {
  const int fp8 = weave_dtype_is_fp8(dtype);
  if ((unsigned)scale_mode > WEAVE_SCALE_ROW)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: scale_mode %d is not NONE/TENSOR/ROW", fn, (int)scale_mode);
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
                        "WEAVE_DTYPE_AUTO)", fn, (int)out_dtype, weave_dtype_name(dtype));
    if (scale_mode != WEAVE_SCALE_NONE)
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: scale_mode %d: scales apply to fp8 inputs only (dtype %s)",
                        fn, (int)scale_mode, weave_dtype_name(dtype));
    return WEAVE_SUCCESS;
  }
  if (out_dtype != WEAVE_DTYPE_AUTO && out_dtype != WEAVE_BF16 && out_dtype != WEAVE_FP16)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: out_dtype %d: fp8 inputs write bf16 or fp16 (WEAVE_BF16, WEAVE_FP16 or WEAVE_DTYPE_AUTO)", fn,
                      (int)out_dtype);
  if (b_layout != WEAVE_LAYOUT_COL)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: fp8 needs b_layout WEAVE_LAYOUT_COL (B as [N, K], nn.Linear's weight): the fp8 tensor-core "
                      "instructions read both operands K-major", fn);
  if (K % 16)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: fp8 needs %s a multiple of 16 (got %d): rows of A and B must be 16-byte multiples for the "
                      "TMA loads", fn, k_name, K);
  return WEAVE_SUCCESS;
}
