/*
 * What weave-bench needs from weave's internals, behind one small interface, so that the tools
 * include only the public headers and tests/support: the plan and roofline it prints when there is
 * no GPU, and the tuning cache it appends to with --tune.
 */
#ifndef WEAVE_BENCH_SUPPORT_H
#define WEAVE_BENCH_SUPPORT_H

#include <stdio.h>

#include "weave.h"

/* The fused kernel's plan for this shape (tiles, rows and tiles per rank, visiting order, bytes
 * sent, symmetric memory), the cost model's split on a 132-SM H200 and the datasheet roofline of
 * H100 and H200; no device needed. */
void bench_print_plan(FILE *f, int M, int N, int K_total, int world, weave_dtype_t dtype, weave_layout_t layout,
                      weave_tile_order_t order);

/* Reads every WEAVE_* variable as a team would: 0 when all are valid, else -1 with the message
 * (which variable, which value, what it takes) in weave_get_last_error(NULL). The dry run checks
 * them too, so a bad value never passes silently. */
int bench_check_env(void);

/* Appends the measured best of a shape to the tuning cache at `path` (WEAVE_TUNE_FILE's format; fp8:
 * the accumulation and the scale mode measured, "+row" / "+fast" in the dtype column). 0 on success. */
int bench_tune_record(const char *path, const char *device, int world, int M, int N, int K_local, weave_dtype_t dtype,
                      weave_fp8_accum_t fp8_accum, weave_scale_mode_t scale_mode, weave_strategy_t strategy,
                      int gemm_blocks, int comm_blocks, double speedup);

#endif
