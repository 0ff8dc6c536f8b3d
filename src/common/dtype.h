/*
 * Element type names beyond the public ones (weave_dtype_size, weave_dtype_name and
 * weave_strategy_name are declared in weave.h): parsing, for the tuning cache (no CUDA).
 */
#ifndef WEAVE_COMMON_DTYPE_H
#define WEAVE_COMMON_DTYPE_H

#include <stddef.h>

#include "weave.h"

/* 0 and *out on success ("bf16", "fp16", "fp32" and their long names), -1 otherwise. */
int weave_dtype_parse(const char *s, weave_dtype_t *out);

#endif
