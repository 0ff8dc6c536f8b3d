/*
 * Element type names beyond the public ones (weave_dtype_size, weave_dtype_name and
 * weave_strategy_name are declared in weave.h): parsing, for the tuning cache (no CUDA).
 */
#ifndef WEAVE_COMMON_DTYPE_H
#define WEAVE_COMMON_DTYPE_H

#include <stddef.h>

#include "weave.h"

/* 0 and *out on success ("bf16", "fp16", "fp32", "fp8_e4m3" and their other names), -1 otherwise. */
int weave_dtype_parse(const char *s, weave_dtype_t *out);
/* 1 for the fp8 input types. */
int weave_dtype_is_fp8(weave_dtype_t t);
/* The output type of a call with inputs `in` and out_dtype `out` (WEAVE_DTYPE_AUTO resolved: `in`,
 * bf16 for fp8). No check. */
weave_dtype_t weave_dtype_out(weave_dtype_t in, weave_dtype_t out);
#endif
