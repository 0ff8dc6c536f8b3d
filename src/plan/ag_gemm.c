/*
 * The AllGather + GEMM plan: creation (checks, strategy, blocks, the symmetric memory, cuBLASLt and
 * NCCL for the baseline), execution (the protocol of kernels/ag_gemm.cu, or the baselines), info and
 * destroy.
 *
 * Memory per rank (one weave_malloc): control words (weave_plan_ctl_t), one u32 arrival counter per
 * block of 128 gathered rows, one u32 row_info per block (kernels.h), then the gathered A [M, K]
 * (256-byte aligned) and, fp8 with scales, its rows' scales [M] (256-byte aligned). One rank: no
 * gathered A unless the plan is fused (the other strategies run their GEMM on A itself).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/dtype.h"
#include "kernels/kernels.h"
#include "plan/autotune.h"
#include "plan/hier.h"
#include "plan/lockstep.h"
#include "plan/lt.h"
#include "runtime/nccl_rt.h"
#include "plan/plan.h" /* weave_plan_cuda_fail */
#include "runtime/arg_checks.h"
#include "runtime/internal.h"

struct weave_ag_gemm_plan {
  weave_team_t team;
  int M, N, K;
  weave_ag_gemm_desc_t desc;
  weave_strategy_t strategy;
  weave_choice_t chosen_by;
  double choose_ms; /* AUTO: what choosing took at plan creation */
  char why[160];
  int row_begin, rows;
  int gemm_blocks, comm_blocks, budget;
  int pair_cols; /* fused: 2-CTA clusters sharing A (kernels.h) */
  void *mem;
  size_t mem_bytes, head_bytes;
  weave_ag_params_t params; /* all but the call's A */
  weave_lt_t *lt;           /* baseline */
  weave_nccl_t *nccl;       /* baseline's all-gather where NCCL runs */
  void *gemm_ws;            /* bulk: its GEMM's stream-K workspace (NULL: none) */
  size_t gemm_ws_bytes;
  void *lockstep_ev; /* ranks sharing a GPU: each call waits for itself (plan/lockstep.h) */
  int pageable_access;
  weave_dtype_t out_dtype;    /* C and bias (desc.out_dtype resolved) */
  float *lt_scale_b;          /* fp8 baseline with TENSOR scales: [N] copies of the call's scale_b (cuBLASLt's
                            * per-row mode wants a vector; the rows' scales differ by owner) */
  struct weave_ag_hier *hier; /* past one node: the plan is its rail gather and band plans (below) */
};

static const char *const fn_create = "weave_ag_gemm_plan_create";

/* ---- checks ------------------------------------------------------------------------------------ */
static weave_result_t ag_check_args(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *d) {
  const char *fn = fn_create;
  if (!d) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  if (d->struct_size != sizeof(weave_ag_gemm_desc_t))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: desc.struct_size %zu is not %zu (use WEAVE_AG_GEMM_DESC_INIT)", fn, d->struct_size,
                      sizeof(weave_ag_gemm_desc_t));
  WEAVE_CHECK(weave_check_gemm_shape(team, fn, M, N, K, "K"));
  if ((unsigned)d->dtype > WEAVE_FP8_E4M3)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: dtype %d is not bf16/fp16/fp32/fp8_e4m3", fn,
                      (int)d->dtype);
  if ((unsigned)d->b_layout > WEAVE_LAYOUT_COL)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: b_layout %d is not ROW/COL", fn, (int)d->b_layout);
  WEAVE_CHECK(weave_check_fp8_args(team, fn, d->dtype, d->out_dtype, d->b_layout, d->scale_mode, d->fp8_accum, K, "K"));
  if ((unsigned)d->strategy > WEAVE_STRATEGY_BASELINE)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: strategy %d unknown", fn, (int)d->strategy);
  if (!isfinite(d->alpha)) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: alpha is not finite", fn);
  if (d->has_bias != 0 && d->has_bias != 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: has_bias %d must be 0 or 1", fn, d->has_bias);
  if (d->gemm_blocks < 0 || d->comm_blocks < 0 || (d->gemm_blocks == 0 && d->comm_blocks > 0))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: give gemm_blocks > 0 with comm_blocks >= 0 (0: the GEMM blocks push the rows), or neither "
                      "(got %d and %d)",
                      fn, d->gemm_blocks, d->comm_blocks);
  if (d->strategy == WEAVE_STRATEGY_FUSED && !weave_kernel_hopper_ok(d->dtype, d->b_layout, N, K))
    return weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                      "%s: the fused strategy runs on the Hopper GEMM role: bf16/fp16/fp8 with rows of A and B of "
                      "16-byte multiples (K%s a multiple of 8); use bulk or baseline",
                      fn, d->b_layout == WEAVE_LAYOUT_ROW ? " and N" : "");
  return WEAVE_SUCCESS;
}

/* Collective: valid and the same on every rank. */
static weave_result_t ag_check_team_args(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *d) {
  WEAVE_CHECK(weave_team_agree(team, ag_check_args(team, M, N, K, d)));
  uint32_t alpha_bits;
  memcpy(&alpha_bits, &d->alpha, sizeof(alpha_bits));
  const uint32_t same[] = {(uint32_t)M,
                           (uint32_t)N,
                           (uint32_t)K,
                           (uint32_t)d->dtype,
                           (uint32_t)d->b_layout,
                           (uint32_t)d->strategy,
                           alpha_bits,
                           (uint32_t)d->has_bias,
                           (uint32_t)d->gemm_blocks,
                           (uint32_t)d->comm_blocks,
                           (uint32_t)d->out_dtype,
                           (uint32_t)d->scale_mode,
                           (uint32_t)d->fp8_accum};
  return weave_team_check_same(team, same, sizeof(same), "AllGather + GEMM plan arguments (M, N, K, desc)");
}

/* ---- strategy and blocks ----------------------------------------------------------------------- */
/* AUTO (plan/autotune.h): rank 0's tuning-cache entry, else the candidates timed at plan creation,
 * else this model, from the measurements of docs/performance.md ("AllGather + GEMM"): where ranks
 * share a GPU bulk (gather on every SM, then weave's GEMM on every SM) was the fastest in bf16, but
 * in fp8 the fused kernel was (bulk's fp8 GEMM on per-row scales trails cuBLASLt there); where every
 * rank has a GPU of its own the gather crosses NVLink and the fused kernel hides it behind the GEMM
 * (not measured yet), so fused where it runs; one rank: bulk (weave's GEMM alone). Collective:
 * ranks_on_device is agreed (any rank sharing counts). */
static weave_result_t ag_choose_strategy(weave_ag_gemm_plan_t p) {
  weave_team_t team = p->team;
  const int hopper = weave_kernel_hopper_ok(p->desc.dtype, p->desc.b_layout, p->N, p->K);
  p->strategy = p->desc.strategy;
  if (p->strategy != WEAVE_STRATEGY_AUTO) {
    p->chosen_by = WEAVE_CHOSEN_BY_CALLER;
    snprintf(p->why, sizeof(p->why), "given by the caller");
    return WEAVE_SUCCESS;
  }
  int shared[WEAVE_MAX_WORLD], any_shared = 0;
  WEAVE_CHECK(weave_team_allgather_int(team, team->info.ranks_on_device > 1, shared));
  for (int r = 0; r < team->world; ++r) any_shared |= shared[r];
  p->chosen_by = WEAVE_CHOSEN_BY_MODEL;
  p->strategy = WEAVE_STRATEGY_BULK;
  if (team->world == 1)
    snprintf(p->why, sizeof(p->why), "model: one rank, nothing to gather: weave's GEMM alone");
  else if (!hopper)
    snprintf(p->why, sizeof(p->why), "model: no Hopper GEMM role for this dtype/shape: gather, then weave's GEMM");
  else if (any_shared && !weave_dtype_is_fp8(p->desc.dtype))
    snprintf(p->why, sizeof(p->why), "model: ranks share a GPU: gather, then weave's GEMM (measured faster there)");
  else if (any_shared) {
    p->strategy = WEAVE_STRATEGY_FUSED;
    snprintf(p->why, sizeof(p->why), "model: ranks share a GPU, fp8: the fused kernel (measured faster there)");
  } else {
    p->strategy = WEAVE_STRATEGY_FUSED;
    snprintf(p->why, sizeof(p->why), "model: a GPU per rank: the fused kernel hides the gather behind the GEMM");
  }
  if (team->world == 1) return WEAVE_SUCCESS; /* nothing to choose between: no gather to hide */
  weave_env_t env;
  if (weave_env_load(&env) != WEAVE_SUCCESS) memset(&env, 0, sizeof(env)); /* the team checked it already */
  char model_why[sizeof(p->why)];
  snprintf(model_why, sizeof(model_why), "%s", p->why + (strncmp(p->why, "model: ", 7) ? 0 : 7));
  weave_auto_choice_t ch;
  WEAVE_CHECK(weave_autotune_choose_ag(team, p->M, p->N, p->K, &p->desc, &env, p->strategy, model_why, &ch));
  p->strategy = ch.strategy;
  p->chosen_by = ch.chosen_by;
  p->choose_ms = ch.choose_ms;
  if (ch.strategy == WEAVE_STRATEGY_FUSED && ch.gemm_blocks > 0) {
    p->desc.gemm_blocks = ch.gemm_blocks; /* the split measured or cached */
    p->desc.comm_blocks = ch.comm_blocks;
  }
  snprintf(p->why, sizeof(p->why), "%.159s", ch.why);
  return WEAVE_SUCCESS;
}

/* Blocks per rank: its share of the SMs, where ranks sharing a GPU leave about half an SM each free
 * (at least one in all) for the short kernels around the calls (one H100, 4 ranks' bulk fp8 on 33
 * blocks each, all 132 SMs: 0.72-0.99x the baseline; on 32 in an earlier run: 0.96-0.98x); fused, of
 * its resident blocks (its GEMM blocks wait for the pushes, its own and its peers'). Communication
 * blocks: the caller's; else, where every push stays in this GPU's memory (ranks share it, or one
 * rank), none: every GEMM block pushes its share of the rows before its tiles, as communication
 * blocks there only take SMs from the GEMM (docs/performance.md, "AllGather + GEMM": faster than one
 * block in eight at 1, 4 and 8 ranks); else one in eight of the budget (at most 16: enough to keep
 * NVLink busy with 16-byte copies), at least one, so that the gather over NVLink runs beside the
 * GEMM. Then 2-CTA clusters sharing A where the standalone GEMM would run them (weave_hgemm_shares_a),
 * with both counts even (the planner's split rounds them) and every rank's clusters resident at once. */
static weave_result_t ag_choose_blocks(weave_ag_gemm_plan_t p) {
  const weave_device_info_t *info = &p->team->info;
  p->pair_cols = 0;
  if (p->strategy != WEAVE_STRATEGY_FUSED) {
    p->budget = weave_rank_blocks(info->sm_count, info->ranks_on_device);
    if (p->budget < 1) p->budget = 1;
    p->comm_blocks = p->budget;
    p->gemm_blocks = p->budget;
    return WEAVE_SUCCESS;
  }
  const int per_sm = weave_ag_fused_blocks_per_sm(NULL);
  p->budget = weave_rank_blocks(per_sm * info->sm_count, info->ranks_on_device);
  if (per_sm < 1 || p->budget < 2)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "%s: %d blocks/SM x %d SMs / %d ranks on this GPU leaves %d resident blocks per rank; the "
                      "fused kernel needs at least 2",
                      fn_create, per_sm, info->sm_count, info->ranks_on_device, p->budget);
  const int tiles_n = weave_cdiv(p->N, WEAVE_HGEMM_BN);
  const int pairs = weave_hgemm_shares_a(tiles_n, p->budget, p->desc.dtype == WEAVE_FP8_E4M3);
  if (p->desc.gemm_blocks > 0) {
    p->gemm_blocks = p->desc.gemm_blocks;
    p->comm_blocks = p->desc.comm_blocks;
  } else {
    if (info->ranks_on_device > 1 || p->team->world == 1)
      p->comm_blocks = 0;
    else
      p->comm_blocks = p->budget / 8 < 1 ? 1 : p->budget / 8 > 16 ? 16 : p->budget / 8;
    p->gemm_blocks = p->budget - p->comm_blocks;
    if (pairs) weave_pairs_round(p->budget, &p->gemm_blocks, &p->comm_blocks);
  }
  if (p->gemm_blocks + p->comm_blocks > p->budget)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "%s: %d GEMM + %d communication blocks could deadlock: only %d blocks of the fused kernel are "
                      "co-resident per rank (%d SMs, %d ranks sharing the GPU)",
                      fn_create, p->gemm_blocks, p->comm_blocks, p->budget, info->sm_count, info->ranks_on_device);
  /* no more GEMM blocks than tiles (a block without a tile only arrives); the tile count is even
   * where the columns pair up */
  const int tiles = weave_cdiv(p->M, WEAVE_HGEMM_BM) * tiles_n;
  if (p->gemm_blocks > tiles) p->gemm_blocks = tiles;
  p->pair_cols =
      pairs && weave_pairs_fit(p->gemm_blocks, p->comm_blocks, info->ranks_on_device, weave_ag_fused_max_clusters());
  return WEAVE_SUCCESS;
}

/* ---- memory and baselines ---------------------------------------------------------------------- */
static int ag_needs_gathered(const weave_ag_gemm_plan_t p) {
  return p->team->world > 1 || p->strategy == WEAVE_STRATEGY_FUSED;
}

/* Bytes of the gathered A, and where its rows' scales start after it (fp8 with scales). */
static size_t ag_gathered_bytes(const weave_ag_gemm_plan_t p) {
  return ag_needs_gathered(p) ? (size_t)p->M * p->K * weave_dtype_size(p->desc.dtype) : 0;
}
static int ag_gathers_scales(const weave_ag_gemm_plan_t p) {
  return ag_needs_gathered(p) && p->desc.scale_mode != WEAVE_SCALE_NONE;
}

static void ag_size_memory(weave_ag_gemm_plan_t p) {
  const int blocks_m = weave_cdiv(p->M, WEAVE_AG_BLOCK_ROWS);
  p->head_bytes = (sizeof(weave_plan_ctl_t) + (size_t)blocks_m * 8 + 255) / 256 * 256; /* + flags, row_info */
  p->mem_bytes =
      p->head_bytes + (ag_gathered_bytes(p) + 255) / 256 * 256 + (ag_gathers_scales(p) ? (size_t)p->M * 4 : 0);
}

/* The local GEMM of the bulk strategy (or of any strategy on one rank): all rows of A (gathered, or
 * this rank's own on one rank) with this rank's B, alpha and bias, on the plan's blocks. */
static weave_gemm_call_t ag_gemm_call(const weave_ag_gemm_plan_t p, const void *A, const void *B, const void *bias,
                                      void *C, weave_hgemm_scales_t scales) {
  const weave_gemm_call_t c = {.M = p->M,
                               .N = p->N,
                               .K = p->K,
                               .dtype = p->desc.dtype,
                               .b_layout = p->desc.b_layout,
                               .out_dtype = p->out_dtype,
                               .alpha = p->desc.alpha,
                               .A = A,
                               .B = B,
                               .bias = bias,
                               .C = C,
                               .scales = scales,
                               .fp8_fast_accum = p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST,
                               .num_blocks = p->gemm_blocks,
                               .ws = p->gemm_ws,
                               .ws_bytes = p->gemm_ws_bytes};
  return c;
}

/* The scales a weave GEMM over all M rows reads: over the gathered A its rows' scales (TENSOR: each
 * row its owner's, with this rank's scale_b; ROW: with scale_b [N]); over A itself (one rank, not
 * fused) the call's own. */
static weave_hgemm_scales_t ag_scales(const weave_ag_gemm_plan_t p, int gathered, const float *scale_a,
                                      const float *scale_b) {
  const int mode = p->desc.scale_mode;
  if (mode == WEAVE_SCALE_NONE) return (weave_hgemm_scales_t){WEAVE_SCALE_NONE, NULL, NULL};
  if (!gathered) return (weave_hgemm_scales_t){mode, scale_a, scale_b};
  return (weave_hgemm_scales_t){mode == WEAVE_SCALE_TENSOR ? WEAVE_HGEMM_SCALE_ROW_A : WEAVE_SCALE_ROW,
                                p->params.gathered_scales, scale_b};
}

static void ag_gemm_workspace(weave_ag_gemm_plan_t p) {
  if (p->strategy != WEAVE_STRATEGY_BULK) return;
  const weave_gemm_call_t c = ag_gemm_call(p, NULL, NULL, NULL, NULL, ag_scales(p, 0, NULL, NULL));
  p->gemm_ws = weave_gemm_workspace_alloc(p->team, &c, &p->gemm_ws_bytes);
}

/* row_info (kernels.h): for each block of gathered rows, the ranks whose rows meet it | the first of
 * them << 16, written after the zeroed flags. */
static int ag_write_row_info(weave_ag_gemm_plan_t p) {
  const int blocks_m = weave_cdiv(p->M, WEAVE_AG_BLOCK_ROWS), world = p->team->world;
  uint32_t *info = (uint32_t *)malloc((size_t)blocks_m * 4);
  if (!info) return (int)cudaErrorMemoryAllocation;
  for (int b = 0; b < blocks_m; ++b) info[b] = weave_ag_row_info(p->M, world, WEAVE_AG_BLOCK_ROWS, b);
  const int e = (int)cudaMemcpy((char *)p->mem + sizeof(weave_plan_ctl_t) + (size_t)blocks_m * 4, info,
                                (size_t)blocks_m * 4, cudaMemcpyHostToDevice);
  free(info);
  return e;
}

/* One baseline GEMM on scratch memory of the plan's shape, so that cuBLASLt's kernel is loaded before
 * any call: loading a module waits for the whole device, and in a call, after the kernel that waits
 * for the peers' rows, ranks that are threads sharing a GPU were seen to stall each other there until
 * the timeout (the peers' waits need this rank's pushes, whose launch waited for the load). Best
 * effort: a failure only leaves the load to the first call. */
static void ag_lt_warm(weave_ag_gemm_plan_t p) {
  if (!ag_needs_gathered(p)) return;
  const size_t e = weave_dtype_size(p->desc.dtype), o = weave_dtype_size(p->out_dtype);
  const void *A = (char *)p->mem + p->head_bytes;
  void *B = NULL, *C = NULL;
  float *ones = NULL; /* scales of 1: M for A's rows, then N for B's columns */
  const int scaled = p->desc.scale_mode != WEAVE_SCALE_NONE;
  if (cudaMalloc(&B, (size_t)p->K * p->N * e) == cudaSuccess &&
      cudaMalloc(&C, (size_t)p->M * p->N * o) == cudaSuccess &&
      (!scaled || (cudaMalloc((void **)&ones, ((size_t)p->M + p->N) * 4) == cudaSuccess &&
                   weave_launch_fill_value(ones, (size_t)p->M + p->N, 1.0f, NULL) == 0)) &&
      weave_lt_select(p->lt, A, B, C) == WEAVE_SUCCESS)
    weave_lt_run_scaled(p->lt, 1.0f, A, B, ones, ones ? ones + p->M : NULL, C, NULL);
  cudaGetLastError();
  cudaFree(B);
  cudaFree(C);
  cudaFree(ones);
}

/* The baseline's cuBLASLt: fp8 over the gathered A takes per-row scales (each row's owner's), its
 * outer-vector mode; over A itself (one rank) the call's own mode. */
static weave_result_t ag_lt_create(weave_ag_gemm_plan_t p, char *msg, size_t len) {
  weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
  o.fast_accum = p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST;
  o.scale_mode = p->desc.scale_mode == WEAVE_SCALE_NONE ? WEAVE_SCALE_NONE
                 : ag_needs_gathered(p)                 ? WEAVE_SCALE_ROW
                                                        : (int)p->desc.scale_mode;
  weave_result_t rc =
      weave_lt_create_ex(p->M, p->N, p->K, p->desc.dtype, p->out_dtype, p->desc.b_layout, &o, &p->lt, msg, len);
  if (rc == WEAVE_SUCCESS && ag_needs_gathered(p) && p->desc.scale_mode == WEAVE_SCALE_TENSOR &&
      cudaMalloc((void **)&p->lt_scale_b, (size_t)p->N * 4) != cudaSuccess) {
    cudaGetLastError();
    snprintf(msg, len, "no device memory for %d column scales", p->N);
    rc = WEAVE_ERROR_OUT_OF_MEMORY;
  }
  return rc;
}

/* Collective: everything that may wait for the whole device comes before the agreement (see
 * plan_create.c's plan_acquire for why). */
static weave_result_t ag_acquire(weave_ag_gemm_plan_t p) {
  weave_team_t team = p->team;
  WEAVE_CHECK(weave_malloc(team, p->mem_bytes, &p->mem));
  weave_result_t local = WEAVE_SUCCESS;
  int e = (int)cudaMemset(p->mem, 0, p->head_bytes);
  if (!e) e = ag_write_row_info(p);
  if (e) local = weave_plan_cuda_fail(team, e, "AllGather + GEMM plan: zeroing flags");
  if (local == WEAVE_SUCCESS && p->strategy == WEAVE_STRATEGY_BASELINE) {
    char msg[256] = "";
    local = ag_lt_create(p, msg, sizeof(msg));
    if (local != WEAVE_SUCCESS)
      weave_fail(team, local, "AllGather + GEMM plan: cuBLASLt: %s", msg);
    else
      ag_lt_warm(p);
  }
  if (local == WEAVE_SUCCESS) ag_gemm_workspace(p);
  if (local == WEAVE_SUCCESS) local = weave_lockstep_create(team, &p->lockstep_ev);
  if (local == WEAVE_SUCCESS && (e = (int)cudaDeviceSynchronize()) != 0)
    local = weave_plan_cuda_fail(team, e, "AllGather + GEMM plan: zeroing flags and workspace");
  weave_result_t rc = weave_team_agree(team, local);
  /* the baseline's all-gather through NCCL where it runs (a GPU per rank; equal chunks) */
  if (rc == WEAVE_SUCCESS && p->strategy == WEAVE_STRATEGY_BASELINE && team->world > 1 && p->M % team->world == 0 &&
      !weave_dtype_is_fp8(p->desc.dtype)) /* fp8: weave's gather, which carries the rows' scales */
    p->nccl = weave_nccl_try_create(team, "AllGather + GEMM plan", "weave's gather instead");
  if (rc != WEAVE_SUCCESS) {
    weave_free(team, p->mem);
    p->mem = NULL;
    cudaFree(p->gemm_ws);
    p->gemm_ws = NULL;
    weave_lockstep_destroy(p->lockstep_ev);
    p->lockstep_ev = NULL;
  }
  return rc;
}

static void ag_fill_params(weave_ag_gemm_plan_t p) {
  weave_ag_params_t *ap = &p->params;
  memset(ap, 0, sizeof(*ap));
  ap->M = p->M;
  ap->N = p->N;
  ap->K = p->K;
  ap->dtype = p->desc.dtype;
  weave_team_device_view(p->team, &ap->team);
  ap->row_begin = p->row_begin;
  ap->rows = p->rows;
  ap->ctl = (weave_plan_ctl_t *)p->mem;
  ap->row_flags = (uint32_t *)((char *)p->mem + sizeof(weave_plan_ctl_t));
  ap->row_info = ap->row_flags + weave_cdiv(p->M, WEAVE_AG_BLOCK_ROWS);
  ap->gathered = ag_needs_gathered(p) ? (char *)p->mem + p->head_bytes : NULL;
  ap->scale_mode = p->desc.scale_mode;
  ap->gathered_scales = ag_gathers_scales(p)
                            ? (float *)((char *)p->mem + p->head_bytes + (ag_gathered_bytes(p) + 255) / 256 * 256)
                            : NULL;
  ap->blocks_m = weave_cdiv(p->M, WEAVE_AG_BLOCK_ROWS);
  ap->gemm_blocks = p->gemm_blocks;
  ap->comm_blocks = p->comm_blocks;
  ap->pair_cols = p->pair_cols;
  ap->signal_done = 1;
}

static void ag_free_host(weave_ag_gemm_plan_t p) {
  cudaFree(p->lt_scale_b);
  weave_lt_destroy(p->lt);
  weave_nccl_destroy(p->nccl);
  free(p);
}

static weave_result_t ag_hier_create(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                                     weave_ag_gemm_plan_t *out);

/* A host plan object with team, shape, desc, out_dtype, this rank's rows and pageable_access filled,
 * the rest zero (NULL when out of memory). */
static weave_ag_gemm_plan_t ag_new(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc) {
  weave_ag_gemm_plan_t p = (weave_ag_gemm_plan_t)calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->team = team;
  p->M = M;
  p->N = N;
  p->K = K;
  p->desc = *desc;
  p->out_dtype = weave_dtype_out(desc->dtype, desc->out_dtype);
  weave_split_rows_of(M, team->world, team->rank, &p->row_begin, &p->rows);
  p->pageable_access = weave_pageable_access(team->info.device);
  return p;
}

static weave_result_t ag_create(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc, int flat,
                                weave_ag_gemm_plan_t *out) {
  WEAVE_CHECK(ag_check_team_args(team, M, N, K, desc));
  char flat_why[160];
  if (!flat && weave_hier_applies(team, flat_why, sizeof(flat_why))) return ag_hier_create(team, M, N, K, desc, out);
  if (!flat && flat_why[0]) weave_log(WEAVE_LOG_INFO, team, "AllGather + GEMM plan %dx%dx%d: %s", M, N, K, flat_why);
  if (!flat) WEAVE_CHECK(weave_team_require_mapped(team, fn_create));
  weave_ag_gemm_plan_t p = ag_new(team, M, N, K, desc);
  if (!p) return weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "%s: host allocation failed", fn_create);
  weave_result_t rc = ag_choose_strategy(p);
  if (rc != WEAVE_SUCCESS) {
    ag_free_host(p);
    return rc;
  }
  rc = ag_choose_blocks(p);
  /* every rank takes part in the agreement; a rank that failed returns its own code */
  if (rc == WEAVE_SUCCESS)
    rc = weave_team_agree(team, rc);
  else
    weave_team_agree(team, rc);
  ag_size_memory(p);
  if (rc == WEAVE_SUCCESS) rc = ag_acquire(p);
  if (rc != WEAVE_SUCCESS) {
    ag_free_host(p);
    return rc;
  }
  ag_fill_params(p);
  weave_log(WEAVE_LOG_INFO, team,
            "AllGather + GEMM plan %dx%dx%d %s: strategy %s (%s), %d GEMM + %d comm blocks%s, %zu heap bytes", M, N, K,
            weave_dtype_name(desc->dtype), weave_strategy_name(p->strategy), p->why, p->gemm_blocks, p->comm_blocks,
            p->pair_cols ? " in 2-CTA clusters sharing A" : "", p->mem_bytes);
  *out = p;
  return WEAVE_SUCCESS;
}

weave_result_t weave_ag_gemm_plan_create(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                                         weave_ag_gemm_plan_t *plan) {
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: team is NULL", fn_create);
  if (!plan) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn_create);
  WEAVE_CHECK(weave_team_check_live(team, fn_create));
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  weave_result_t rc = ag_create(team, M, N, K, desc, 0, plan);
  weave_device_leave(caller);
  return rc;
}

/* ---- execute ----------------------------------------------------------------------------------- */
static const char *const fn_exec = "weave_ag_gemm_execute";

static weave_result_t ag_check_call(weave_ag_gemm_plan_t p, const void *A, const void *B, const float *scale_a,
                                    const float *scale_b, const void *bias, const void *C, const void *A_out) {
  weave_team_t team = p->team;
  if ((!A && p->rows > 0) || !B || !C)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: A %p (this rank holds %d rows), B %p and C %p must be non-NULL", fn_exec, A, p->rows, B, C);
  if (p->desc.has_bias != (bias != NULL))
    return weave_fail(
        team, WEAVE_ERROR_INVALID_ARGUMENT,
        p->desc.has_bias ? "%s: the plan has a bias but bias is NULL" : "%s: bias given to a plan without bias",
        fn_exec);
  const int scaled = p->desc.scale_mode != WEAVE_SCALE_NONE;
  if (scaled && ((!scale_a && p->rows > 0) || !scale_b))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: the plan's scale_mode %d needs scale_a %p (this rank holds %d rows) and scale_b %p", fn_exec,
                      (int)p->desc.scale_mode, (const void *)scale_a, p->rows, (const void *)scale_b);
  if (!scaled && (scale_a || scale_b))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: scale_a / scale_b given to a plan without scales (scale_mode NONE)", fn_exec);
  const void *ptrs[7] = {A, B, bias, C, A_out, scale_a, scale_b};
  static const char *const names[7] = {"A", "B", "bias", "C", "A_gathered", "scale_a", "scale_b"};
  if (!p->pageable_access) WEAVE_CHECK(weave_check_device_reads(team, fn_exec, team->info.device, ptrs, names, 7));
  const size_t in = weave_dtype_size(p->desc.dtype), out = weave_dtype_size(p->out_dtype);
  const size_t align[7] = {in, in, out, out, in, 4, 4};
  for (int i = 0; i < 7; ++i)
    if ((uintptr_t)ptrs[i] % align[i])
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: %s %p is not %zu-byte aligned", fn_exec, names[i],
                        ptrs[i], align[i]);
  if ((p->strategy == WEAVE_STRATEGY_FUSED || weave_dtype_is_fp8(p->desc.dtype)) && ((uintptr_t)B & 15))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: the %s plan reads B %p with TMA: it must be 16-byte aligned", fn_exec,
                      weave_strategy_name(p->strategy), B);
  return WEAVE_SUCCESS;
}

/* One rank's GEMM (bulk's, or any strategy's on one rank): weave's, with alpha, bias and scales. */
static weave_result_t ag_weave_gemm(weave_ag_gemm_plan_t p, const void *A, const void *B, const void *bias, void *C,
                                    weave_hgemm_scales_t scales, weave_stream_t stream) {
  char msg[256] = "";
  const weave_gemm_call_t c = ag_gemm_call(p, A, B, bias, C, scales);
  weave_result_t rc = weave_gemm_dispatch(&c, stream, msg, sizeof(msg));
  return rc == WEAVE_SUCCESS ? rc : weave_fail(p->team, rc, "%s: %s", fn_exec, msg);
}

/* cuBLASLt's GEMM with the scales ag_lt_create set it up for (over the gathered A: per row), then the
 * bias. */
static weave_result_t ag_lt_gemm(weave_ag_gemm_plan_t p, const void *A, const void *B, weave_hgemm_scales_t sc,
                                 const void *bias, void *C, weave_stream_t stream) {
  const float *sb = sc.b;
  if (sc.mode == WEAVE_HGEMM_SCALE_ROW_A) { /* cuBLASLt's per-row mode takes B's scales as a vector */
    const int e = weave_launch_fill_from(p->lt_scale_b, (size_t)p->N, sc.b, stream);
    if (e) return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: scale_b: %s", fn_exec, weave_cuda_error_string(e));
    sb = p->lt_scale_b;
  }
  if (weave_lt_run_scaled(p->lt, p->desc.alpha, A, B, sc.a, sb, C, stream) != WEAVE_SUCCESS)
    return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: cublasLtMatmul failed", fn_exec);
  const int err = bias ? weave_launch_add_bias(C, p->M, p->N, p->out_dtype, bias, stream) : 0;
  return err ? weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: bias: %s", fn_exec, weave_cuda_error_string(err))
             : WEAVE_SUCCESS;
}

static weave_result_t ag_copy_out(weave_ag_gemm_plan_t p, void *A_out, const void *src, weave_stream_t stream) {
  if (!A_out || A_out == src) return WEAVE_SUCCESS;
  const size_t bytes = (size_t)p->M * p->K * weave_dtype_size(p->desc.dtype);
  const int e = (int)cudaMemcpyAsync(A_out, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
  return e ? weave_plan_cuda_fail(p->team, e, "weave_ag_gemm_execute: copying the gathered A out") : WEAVE_SUCCESS;
}

static weave_result_t ag_launch_fail(weave_ag_gemm_plan_t p, int err) {
  return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: kernel launch: %s", fn_exec, weave_cuda_error_string(err));
}

static weave_result_t ag_enqueue(weave_ag_gemm_plan_t p, const void *A, const void *B, const float *scale_a,
                                 const float *scale_b, const void *bias, void *C, void *A_out, weave_stream_t stream) {
  WEAVE_CHECK(ag_check_call(p, A, B, scale_a, scale_b, bias, C, A_out));
  weave_ag_params_t ap = p->params;
  ap.A = A;
  ap.scale_a = scale_a;
  const weave_strategy_t s = p->strategy;
  const void *gathered = ap.gathered;

  /* one rank, not fused: the gather is the identity */
  if (!gathered) {
    const weave_hgemm_scales_t own = ag_scales(p, 0, scale_a, scale_b);
    if (s == WEAVE_STRATEGY_BASELINE) {
      if (weave_lt_select(p->lt, A, B, C) != WEAVE_SUCCESS)
        return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for A %p, B %p, C %p",
                          fn_exec, A, B, C);
      WEAVE_CHECK(ag_lt_gemm(p, A, B, own, bias, C, stream));
    } else {
      WEAVE_CHECK(ag_weave_gemm(p, A, B, bias, C, own, stream));
    }
    return ag_copy_out(p, A_out, A, stream);
  }
  const weave_hgemm_scales_t rows = ag_scales(p, 1, scale_a, scale_b);
  if (s == WEAVE_STRATEGY_BASELINE && weave_lt_select(p->lt, gathered, B, C) != WEAVE_SUCCESS)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED, "%s: cuBLASLt has no algorithm for A %p, B %p, C %p", fn_exec,
                      gathered, B, C);
  if (s == WEAVE_STRATEGY_FUSED) {
    weave_hgemm_params_t hg;
    char msg[256];
    int rc =
        weave_hgemm_make_params(p->M, p->N, p->K, p->desc.dtype, p->desc.b_layout, gathered, B, &hg, msg, sizeof(msg));
    if (rc == WEAVE_SUCCESS && ap.pair_cols)
      rc = weave_hgemm_params_share_a(&hg, gathered, WEAVE_HGEMM_BM, msg, sizeof(msg));
    if (rc != WEAVE_SUCCESS) return weave_fail(p->team, (weave_result_t)rc, "%s: %s", fn_exec, msg);
    hg.scales = rows;
    ap.signal_done = A_out == NULL;
    int err = weave_launch_ag_fused(&ap, &hg, p->out_dtype, p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST, p->desc.alpha,
                                    bias, C, stream);
    if (err) return ag_launch_fail(p, err);
    if (A_out) {
      WEAVE_CHECK(ag_copy_out(p, A_out, gathered, stream));
      if ((err = weave_launch_ag_finish(&ap, stream)) != 0) return ag_launch_fail(p, err);
    }
    return WEAVE_SUCCESS;
  }
  if (p->nccl) { /* baseline, a GPU per rank: NCCL's all-gather into the heap copy, then cuBLASLt */
    if (weave_nccl_all_gather(p->nccl, A, (void *)gathered, (size_t)p->rows * p->K, p->desc.dtype, stream) !=
        WEAVE_SUCCESS)
      return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: ncclAllGather failed", fn_exec);
    WEAVE_CHECK(ag_lt_gemm(p, gathered, B, rows, bias, C, stream));
    return ag_copy_out(p, A_out, gathered, stream);
  }
  /* bulk, or baseline without NCCL: weave's gather, then the GEMM */
  int err = weave_launch_ag_push(&ap, p->comm_blocks, stream);
  if (!err) err = weave_launch_ag_wait(&ap, stream);
  if (err) return ag_launch_fail(p, err);
  if (s == WEAVE_STRATEGY_BULK)
    WEAVE_CHECK(ag_weave_gemm(p, gathered, B, bias, C, rows, stream));
  else
    WEAVE_CHECK(ag_lt_gemm(p, gathered, B, rows, bias, C, stream));
  WEAVE_CHECK(ag_copy_out(p, A_out, gathered, stream));
  if ((err = weave_launch_ag_finish(&ap, stream)) != 0) return ag_launch_fail(p, err);
  return WEAVE_SUCCESS;
}

/* ---- past one node (docs/multinode.md; the dual of plan/hier.h) ----------------------------------
 * The rail step first: an all-gather over the rail team (local rank j of every node) of the rows of
 * ranks j, g + j, ..., (n-1) g + j, which are this local rank's pieces of every band in order
 * (plan/hier_layout.h), with their scales (fp8: each row keeps its owner's); then per band b an
 * AllGather + GEMM plan of the caller's strategy on the node team whose rows of local rank j are
 * those of global rank b g + j, writing C's rows of band b (bias on them; the gathered A's band to
 * A_gathered). The rail step is ncclAllGather where NCCL runs (a GPU per rank), the pieces are of
 * equal size (its one count) and the rows carry no scales (not fp8), else weave's gather over the
 * rail team's heap. One after the other on the caller's stream: no overlap yet. */
struct weave_ag_hier {
  int nodes, g;
  weave_ag_gemm_plan_t band[WEAVE_MAX_WORLD]; /* NULL for a band without rows */
  int band_begin[WEAVE_MAX_WORLD];            /* band b's first row of A and C */
  int piece_row[WEAVE_MAX_WORLD];             /* band b's rows of this local rank in the rail's gathered A */
  weave_ag_gemm_plan_t rail;                  /* bulk on the rail team, its gather alone (NULL: no rows) */
  weave_nccl_t *nccl;  /* the rail step by ncclAllGather into the rail plan's gathered A (NULL: weave's) */
  float *scale_b_cols; /* fp8 TENSOR: the call's scale_b as [N] (the band plans take each row's owner's
                        * scale, so they run ROW) */
};

static void ag_hier_free(weave_ag_gemm_plan_t p) {
  struct weave_ag_hier *h = p->hier;
  if (h) {
    for (int b = 0; b < h->nodes; ++b)
      if (h->band[b]) weave_ag_gemm_plan_destroy(h->band[b]);
    if (h->rail) weave_ag_gemm_plan_destroy(h->rail);
    weave_nccl_destroy(h->nccl);
    cudaFree(h->scale_b_cols);
    free(h);
  }
  free(p);
}

static weave_result_t ag_hier_bands(weave_ag_gemm_plan_t p, const weave_hier_layout_t *l) {
  struct weave_ag_hier *h = p->hier;
  weave_ag_gemm_desc_t bd = p->desc;
  if (bd.scale_mode == WEAVE_SCALE_TENSOR) bd.scale_mode = WEAVE_SCALE_ROW;
  for (int b = 0; b < h->nodes; ++b) {
    h->band_begin[b] = l->band_begin[b];
    h->piece_row[b] = l->piece_row[b];
    if (l->band_rows[b] == 0) continue; /* the same on every rank of the node */
    WEAVE_CHECK(weave_hier_pass(p->team, p->team->sub[0],
                                ag_create(p->team->sub[0], l->band_rows[b], p->N, p->K, &bd, 1, &h->band[b]),
                                "past one node, a band plan"));
    h->band[b]->params.upstream_error = weave_team_error_code(p->team->sub[1]);
  }
  return WEAVE_SUCCESS;
}

static weave_result_t ag_hier_rail(weave_ag_gemm_plan_t p, const weave_hier_layout_t *l) {
  struct weave_ag_hier *h = p->hier;
  if (p->desc.scale_mode == WEAVE_SCALE_TENSOR &&
      cudaMalloc((void **)&h->scale_b_cols, (size_t)p->N * 4) != cudaSuccess) {
    cudaGetLastError();
    h->scale_b_cols = NULL;
    return weave_fail(p->team, WEAVE_ERROR_OUT_OF_MEMORY, "%s: no device memory for %d column scales", fn_create, p->N);
  }
  if (l->piece_rows == 0) return WEAVE_SUCCESS; /* no rows for this local rank on any node */
  weave_ag_gemm_desc_t rd = WEAVE_AG_GEMM_DESC_INIT;
  rd.dtype = p->desc.dtype;
  rd.b_layout = WEAVE_LAYOUT_COL;
  rd.strategy = WEAVE_STRATEGY_BULK;
  rd.scale_mode = p->desc.scale_mode; /* the push writes each row's owner's scale beside it */
  WEAVE_CHECK(weave_hier_pass(p->team, p->team->sub[1],
                              ag_create(p->team->sub[1], l->piece_rows, 16, p->K, &rd, 1, &h->rail),
                              "past one node, the rail gather"));
  /* the same on every rank of the rail team (its local rank's pieces; the desc is agreed) */
  if (l->piece_rows % h->nodes == 0 && !weave_dtype_is_fp8(p->desc.dtype))
    h->nccl = weave_nccl_try_create(p->team->sub[1], "AllGather + GEMM's rail step", "weave's gather over the heap");
  if (!h->nccl)
    WEAVE_CHECK(weave_hier_rail_heap_ok(p->team, p->team->sub[1], "the rail gather",
                                        "a GPU per rank, libnccl.so.2, M's rows in equal pieces per node, and no fp8"));
  return WEAVE_SUCCESS;
}

static weave_result_t ag_hier_create(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                                     weave_ag_gemm_plan_t *out) {
  weave_ag_gemm_plan_t p = ag_new(team, M, N, K, desc);
  struct weave_ag_hier *h = (struct weave_ag_hier *)calloc(1, sizeof(*h));
  if (!p || !h) {
    free(p);
    free(h);
    return weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "%s: host allocation failed", fn_create);
  }
  p->hier = h;
  h->nodes = team->nodes;
  h->g = team->world / team->nodes;
  weave_hier_layout_t l;
  weave_result_t rc = weave_hier_prepare(team, M, &l);
  /* agreed after each step: a node whose band plans failed must not leave the others waiting in the
   * rail plan's collective creation */
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, ag_hier_bands(p, &l));
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, ag_hier_rail(p, &l));
  if (rc != WEAVE_SUCCESS) {
    ag_hier_free(p);
    return rc;
  }
  const weave_ag_gemm_plan_t first = h->band[0] ? h->band[0] : h->band[h->nodes - 1];
  if (first) {
    p->strategy = first->strategy;
    p->chosen_by = first->chosen_by;
    p->choose_ms = first->choose_ms;
    p->gemm_blocks = first->gemm_blocks;
    p->comm_blocks = first->comm_blocks;
    p->pair_cols = first->pair_cols;
  }
  for (int b = 0; b < h->nodes; ++b) p->mem_bytes += h->band[b] ? h->band[b]->mem_bytes : 0;
  p->mem_bytes += h->rail ? h->rail->mem_bytes : 0;
  snprintf(p->why, sizeof(p->why), "%d nodes x %d ranks: inside each node %s; between nodes %s", h->nodes, h->g,
           weave_strategy_name(p->strategy), h->nccl ? "ncclAllGather" : "weave's gather");
  weave_log(WEAVE_LOG_INFO, team, "AllGather + GEMM plan %dx%dx%d past one node: %s", M, N, K, p->why);
  *out = p;
  return WEAVE_SUCCESS;
}

static weave_result_t ag_hier_enqueue(weave_ag_gemm_plan_t p, const void *A, const void *B, const float *scale_a,
                                      const float *scale_b, const void *bias, void *C, void *A_out,
                                      weave_stream_t stream) {
  struct weave_ag_hier *h = p->hier;
  const size_t row_a = (size_t)p->K * weave_dtype_size(p->desc.dtype);
  const size_t row_c = (size_t)p->N * weave_dtype_size(p->out_dtype);
  const char *gathered = NULL;
  const float *gathered_scales = NULL;
  if (h->nccl) { /* stream order alone keeps the gathered A until the band plans have read it */
    gathered = (const char *)h->rail->params.gathered;
    if (weave_nccl_all_gather(h->nccl, A, (void *)gathered, (size_t)h->rail->rows * p->K, p->desc.dtype, stream) !=
        WEAVE_SUCCESS)
      return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: the rail step's ncclAllGather failed", fn_exec);
  } else if (h->rail) { /* weave's gather alone: push and wait now, finish once the band plans have read it */
    weave_ag_params_t ap = h->rail->params;
    ap.A = A;
    ap.scale_a = scale_a;
    int err = weave_launch_ag_push(&ap, h->rail->comm_blocks, stream);
    if (!err) err = weave_launch_ag_wait(&ap, stream);
    if (err) return ag_launch_fail(p, err);
    gathered = (const char *)ap.gathered;
    gathered_scales = ap.gathered_scales;
  }
  const float *sb = scale_b;
  if (h->scale_b_cols) {
    const int e = weave_launch_fill_from(h->scale_b_cols, (size_t)p->N, scale_b, stream);
    if (e) return weave_fail(p->team, WEAVE_ERROR_CUDA, "%s: scale_b: %s", fn_exec, weave_cuda_error_string(e));
    sb = h->scale_b_cols;
  }
  for (int b = 0; b < h->nodes; ++b) {
    if (!h->band[b]) continue;
    const void *Ab = gathered ? gathered + (size_t)h->piece_row[b] * row_a : NULL;
    const float *sa = gathered_scales ? gathered_scales + h->piece_row[b] : NULL;
    void *Cb = (char *)C + (size_t)h->band_begin[b] * row_c;
    void *Ob = A_out ? (char *)A_out + (size_t)h->band_begin[b] * row_a : NULL;
    WEAVE_CHECK(weave_hier_pass(p->team, p->team->sub[0],
                                p->desc.scale_mode != WEAVE_SCALE_NONE
                                    ? weave_ag_gemm_execute_scaled(h->band[b], Ab, B, sa, sb, bias, Cb, Ob, stream)
                                    : weave_ag_gemm_execute(h->band[b], Ab, B, bias, Cb, Ob, stream),
                                "weave_ag_gemm_execute, a band plan"));
  }
  if (!h->rail || h->nccl) return WEAVE_SUCCESS;
  const int err = weave_launch_ag_finish(&h->rail->params, stream);
  if (err) return ag_launch_fail(p, err);
  return weave_hier_pass(p->team, h->rail->team,
                         weave_lockstep_wait(h->rail->team, h->rail->lockstep_ev, fn_exec, stream),
                         "weave_ag_gemm_execute, the rail gather");
}

static weave_result_t ag_execute(weave_ag_gemm_plan_t p, const void *A, const void *B, const float *scale_a,
                                 const float *scale_b, const void *bias, void *C, void *A_gathered,
                                 weave_stream_t stream) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: plan is NULL", fn_exec);
  WEAVE_CHECK(weave_team_check_live(p->team, fn_exec));
  const weave_device_scope_t caller = weave_device_enter(p->team->info.device);
  weave_result_t rc;
  if (p->hier) { /* past one node: its rail gather and band plans wait for themselves */
    rc = ag_check_call(p, A, B, scale_a, scale_b, bias, C, A_gathered);
    if (rc == WEAVE_SUCCESS) rc = ag_hier_enqueue(p, A, B, scale_a, scale_b, bias, C, A_gathered, stream);
  } else {
    rc = ag_enqueue(p, A, B, scale_a, scale_b, bias, C, A_gathered, stream);
    if (rc == WEAVE_SUCCESS) rc = weave_lockstep_wait(p->team, p->lockstep_ev, fn_exec, stream);
  }
  weave_device_leave(caller);
  return rc;
}

weave_result_t weave_ag_gemm_execute(weave_ag_gemm_plan_t p, const void *A, const void *B, const void *bias, void *C,
                                     void *A_gathered, weave_stream_t stream) {
  if (p && p->desc.scale_mode != WEAVE_SCALE_NONE)
    return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: the plan has scales (scale_mode %d): use weave_ag_gemm_execute_scaled", fn_exec,
                      (int)p->desc.scale_mode);
  return ag_execute(p, A, B, NULL, NULL, bias, C, A_gathered, stream);
}

weave_result_t weave_ag_gemm_execute_scaled(weave_ag_gemm_plan_t p, const void *A, const void *B, const float *scale_a,
                                            const float *scale_b, const void *bias, void *C, void *A_gathered,
                                            weave_stream_t stream) {
  return ag_execute(p, A, B, scale_a, scale_b, bias, C, A_gathered, stream);
}

/* ---- info, destroy ----------------------------------------------------------------------------- */
weave_result_t weave_ag_gemm_plan_info(weave_ag_gemm_plan_t p, weave_ag_gemm_info_t *info) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ag_gemm_plan_info: plan is NULL");
  if (!info) return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ag_gemm_plan_info: info is NULL");
  memset(info, 0, sizeof(*info));
  info->strategy = p->strategy;
  info->row_begin = p->row_begin;
  info->rows = p->rows;
  info->gemm_blocks = p->gemm_blocks;
  info->comm_blocks = p->comm_blocks;
  info->heap_bytes = p->mem_bytes;
  info->bytes_sent = (size_t)p->rows *
                     ((size_t)p->K * weave_dtype_size(p->desc.dtype) + (ag_gathers_scales(p) ? 4 : 0)) *
                     (size_t)(p->team->world - 1);
  info->chosen_by = p->chosen_by;
  info->choose_ms = p->choose_ms;
  info->cta_pairs = p->pair_cols;
  snprintf(info->why, sizeof(info->why), "%s", p->why);
  return WEAVE_SUCCESS;
}

weave_result_t weave_ag_gemm_plan_destroy(weave_ag_gemm_plan_t p) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ag_gemm_plan_destroy: plan is NULL");
  const weave_device_scope_t caller = weave_device_enter(p->team->info.device);
  if (p->hier) {
    ag_hier_free(p);
    weave_device_leave(caller);
    return WEAVE_SUCCESS;
  }
  cudaFree(p->gemm_ws);
  weave_lockstep_destroy(p->lockstep_ev);
  weave_team_refresh_abort(p->team);
  weave_result_t rc = p->team->aborted_by ? WEAVE_SUCCESS : weave_free(p->team, p->mem);
  ag_free_host(p);
  weave_device_leave(caller);
  return rc;
}
