/* Element types and strategy names: see dtype.h. */
#include "common/dtype.h"

#include <strings.h>

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
  if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16"))
    *out = WEAVE_BF16;
  else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "half") || !strcasecmp(s, "float16"))
    *out = WEAVE_FP16;
  else if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float") || !strcasecmp(s, "float32"))
    *out = WEAVE_FP32;
  else if (!strcasecmp(s, "fp8_e4m3") || !strcasecmp(s, "fp8") || !strcasecmp(s, "e4m3"))
    *out = WEAVE_FP8_E4M3;
  else
    return -1;
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
