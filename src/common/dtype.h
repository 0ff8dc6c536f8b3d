/*
 * Element types and strategy names shared by the plan, the kernels' launchers, the tools and the
 * tests (no CUDA).
 */
#ifndef WEAVE_COMMON_DTYPE_H
#define WEAVE_COMMON_DTYPE_H

#include <stddef.h>

#include "weave.h"

size_t weave_dtype_size(weave_dtype_t t);
const char *weave_dtype_name(weave_dtype_t t);
/* 0 and *out on success ("bf16", "fp16", "fp32" and their long names), -1 otherwise. */
int weave_dtype_parse(const char *s, weave_dtype_t *out);
const char *weave_strategy_name(weave_strategy_t s);

#endif
