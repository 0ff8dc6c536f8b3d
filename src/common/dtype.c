/* Element types and strategy names: see dtype.h. */
#include "common/dtype.h"

#include <strings.h>

size_t weave_dtype_size(weave_dtype_t t) { return t == WEAVE_FP32 ? 4 : 2; }

const char *weave_dtype_name(weave_dtype_t t) {
  switch (t) {
    case WEAVE_BF16: return "bf16";
    case WEAVE_FP16: return "fp16";
    case WEAVE_FP32: return "fp32";
  }
  return "?";
}

int weave_dtype_parse(const char *s, weave_dtype_t *out) {
  if (!s || !out) return -1;
  if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = WEAVE_BF16;
  else if (!strcasecmp(s, "fp16") || !strcasecmp(s, "half") || !strcasecmp(s, "float16")) *out = WEAVE_FP16;
  else if (!strcasecmp(s, "fp32") || !strcasecmp(s, "float") || !strcasecmp(s, "float32")) *out = WEAVE_FP32;
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
