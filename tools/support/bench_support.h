/*
 * What weave-bench needs from weave's internals, behind one small interface, so that the tools
 * include only the public headers and tools/support: the plan and roofline it prints when there is
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

/* The tuning cache's key of a plan of `desc` on this rank (plan/tune.h's weave_tune_key_t, kept
 * opaque here: the tools reach the internals only through this header). */
typedef struct {
  _Alignas(8) unsigned char bytes[256];
} bench_tune_key_t;
void bench_tune_key(weave_team_t team, int M, int N, int K_local, const weave_gemm_rs_desc_t *desc,
                    bench_tune_key_t *key);
/* Stores the measured best of a shape under `key` in the tuning cache that plans read
 * (WEAVE_TUNE_FILE, else the default); path gets the file. 0 on success, else -1 with why. */
int bench_tune_record(const bench_tune_key_t *key, weave_strategy_t strategy, int gemm_blocks, int comm_blocks,
                      double speedup, char *path, size_t path_len, char *why, size_t why_len);

/* A rank's share of the GPU's blocks as the planners count it (kernels.h, weave_rank_blocks): the
 * budget a --comm-blocks split of the fused kernel must fit. */
int bench_rank_blocks(int blocks_on_gpu, int ranks_on_device);

/* AllGather + GEMM's roofline (weave_roofline_ag) on H100 and H200 for each of the nM values of M. */
void bench_print_ag_roofline(FILE *f, const int *Ms, int nM, int N, int K, int world, weave_dtype_t dtype);

#endif
