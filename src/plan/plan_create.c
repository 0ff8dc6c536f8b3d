/*
 * Creating a GEMM + ReduceScatter plan (see plan.h for the object and its memory), in the order
 * weave_gemm_rs_plan_create runs the steps:
 *
 *   checks     the arguments, the same on every rank
 *   strategy   explicit, else AUTO's choice (cached, measured or modelled: plan/autotune.h); the
 *              slot dtype and the GEMM role follow
 *   tiling     tile shape and the per-owner capacities
 *   blocks     the co-resident budget and its GEMM / communication split
 *   memory     sizes, then the heap allocation, zeroed flags, cuBLASLt and NCCL (collective)
 *   params     the kernel's parameter block, TMA store maps, the trace buffer
 *
 * Every rank agrees on each collective step, so a failure on one rank fails creation on all of them;
 * a failed creation frees what it took and writes no plan.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "plan/autotune.h"
#include "plan/hier.h"
#include "plan/lockstep.h"
#include "plan/plan.h"
#include "plan/plan_model.h"

/* ---- checks ------------------------------------------------------------------------------------ */
weave_result_t weave_gemm_rs_desc_read(weave_team_t team, const weave_gemm_rs_desc_t *d, weave_gemm_rs_desc_t *out) {
  const char *fn = "weave_gemm_rs_plan_create";
  if (!d) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  if (d->struct_size == sizeof(weave_gemm_rs_desc_t)) {
    *out = *d;
    return WEAVE_SUCCESS;
  }
  if (d->struct_size == WEAVE_GEMM_RS_DESC_SIZE_0_2) {
    /* the 0.2 fields (everything up to trace; not the padding after it), then this version's defaults */
    const weave_gemm_rs_desc_t init = WEAVE_GEMM_RS_DESC_INIT;
    *out = init;
    memcpy(out, d, offsetof(weave_gemm_rs_desc_t, trace) + sizeof(d->trace));
    out->struct_size = sizeof(weave_gemm_rs_desc_t);
    return WEAVE_SUCCESS;
  }
  return weave_fail(
      team, WEAVE_ERROR_INVALID_ARGUMENT,
      "%s: desc.struct_size %zu is neither %zu (this version) nor %zu (0.2) (use WEAVE_GEMM_RS_DESC_INIT)", fn,
      d->struct_size, sizeof(weave_gemm_rs_desc_t), (size_t)WEAVE_GEMM_RS_DESC_SIZE_0_2);
}

weave_result_t weave_gemm_rs_check_args(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc) {
  const char *fn = "weave_gemm_rs_plan_create";
  weave_gemm_rs_desc_t dd;
  WEAVE_CHECK(weave_gemm_rs_desc_read(team, desc, &dd));
  const weave_gemm_rs_desc_t *d = &dd;
  WEAVE_CHECK(weave_check_gemm_shape(team, fn, M, N, K, "K_local"));
  if ((unsigned)d->dtype > WEAVE_FP8_E4M3)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: dtype %d is not bf16/fp16/fp32/fp8_e4m3", fn,
                      (int)d->dtype);
  if ((unsigned)d->b_layout > WEAVE_LAYOUT_COL)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: b_layout %d is not ROW/COL", fn, (int)d->b_layout);
  WEAVE_CHECK(
      weave_check_fp8_args(team, fn, d->dtype, d->out_dtype, d->b_layout, d->scale_mode, d->fp8_accum, K, "K_local"));
  if ((unsigned)d->strategy > WEAVE_STRATEGY_BASELINE)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: strategy %d unknown", fn, (int)d->strategy);
  if ((unsigned)d->reduce > WEAVE_REDUCE_ATOMIC)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: reduce %d unknown", fn, (int)d->reduce);
  if (d->fp32_slots != 0 && d->fp32_slots != 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: fp32_slots %d must be 0 or 1", fn, d->fp32_slots);
  if ((unsigned)d->tile_order > WEAVE_ORDER_OWN_FIRST)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: tile_order %d unknown", fn, (int)d->tile_order);
  if (!isfinite(d->alpha)) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: alpha is not finite", fn);
  if (d->has_bias != 0 && d->has_bias != 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: has_bias %d must be 0 or 1", fn, d->has_bias);
  if (d->gemm_blocks < 0 || d->comm_blocks < 0)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: gemm_blocks %d / comm_blocks %d must be >= 0", fn,
                      d->gemm_blocks, d->comm_blocks);
  if ((d->gemm_blocks == 0) != (d->comm_blocks == 0))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: give both gemm_blocks and comm_blocks, or neither (got %d and %d)", fn, d->gemm_blocks,
                      d->comm_blocks);
  return WEAVE_SUCCESS;
}

/* Collective: valid arguments on every rank, and the same ones. */
static weave_result_t plan_check_team_args(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc) {
  weave_result_t rc = weave_gemm_rs_check_args(team, M, N, K, desc); /* desc: already read (current layout) */
  WEAVE_CHECK(weave_team_agree(team, rc));
  /* Field by field: copying the desc whole would bring its padding bytes (whatever the caller's stack
   * held) into the comparison. */
  uint32_t alpha_bits;
  memcpy(&alpha_bits, &desc->alpha, sizeof(alpha_bits));
  const uint32_t same[] = {(uint32_t)M,
                           (uint32_t)N,
                           (uint32_t)K,
                           (uint32_t)desc->dtype,
                           (uint32_t)desc->b_layout,
                           (uint32_t)desc->strategy,
                           (uint32_t)desc->reduce,
                           (uint32_t)desc->fp32_slots,
                           (uint32_t)desc->tile_order,
                           alpha_bits,
                           (uint32_t)desc->has_bias,
                           (uint32_t)desc->gemm_blocks,
                           (uint32_t)desc->comm_blocks,
                           (uint32_t)desc->trace,
                           (uint32_t)desc->out_dtype,
                           (uint32_t)desc->scale_mode,
                           (uint32_t)desc->fp8_accum};
  WEAVE_CHECK(weave_team_check_same(team, same, sizeof(same), "plan arguments (M, N, K_local, desc)"));
  return WEAVE_SUCCESS;
}

/* ---- strategy and tiling ----------------------------------------------------------------------- */
/* An explicit strategy, else AUTO's choice. */
static void plan_choose_strategy(weave_gemm_rs_plan_t p, const weave_auto_choice_t *choice) {
  p->strategy = p->desc.strategy;
  if (p->strategy == WEAVE_STRATEGY_AUTO) p->strategy = choice->strategy;
}

/* The baseline's GEMM (cuBLASLt). Local; msg says why it cannot run. */
static weave_result_t plan_lt_new(weave_gemm_rs_plan_t p, char *msg, size_t len) {
  weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
  o.scale_mode = p->desc.scale_mode;
  o.fast_accum = p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST;
  return weave_lt_create_ex(p->M, p->N, p->K, p->desc.dtype, weave_dtype_out(p->desc.dtype, p->desc.out_dtype),
                            p->desc.b_layout, &o, &p->lt, msg, len);
}

/* Collective, for AUTO plans: every rank takes rank 0's choice (the choice is rank 0's already; this
 * keeps it so whatever chose), and the baseline only where cuBLASLt has an algorithm on every rank (it
 * has none for fp8 with rows of C that are not 16-byte multiples): else bulk, weave's GEMM, which
 * runs any shape.
 * The baseline's cuBLASLt is created here then (before the plan's agreement; it allocates). */
static weave_result_t plan_settle_auto(weave_gemm_rs_plan_t p) {
  weave_team_t team = p->team;
  if (p->desc.strategy != WEAVE_STRATEGY_AUTO) return WEAVE_SUCCESS;
  int all[WEAVE_MAX_WORLD];
  WEAVE_CHECK(weave_team_allgather_int(team, (int)p->strategy, all));
  p->strategy = (weave_strategy_t)all[0];
  if (p->strategy != WEAVE_STRATEGY_BASELINE) return WEAVE_SUCCESS;
  char msg[256] = "";
  int ok = plan_lt_new(p, msg, sizeof(msg)) == WEAVE_SUCCESS;
  WEAVE_CHECK(weave_team_allgather_int(team, ok, all));
  for (int r = 0; r < team->world; ++r) ok &= all[r];
  if (!ok) {
    weave_log(WEAVE_LOG_INFO, team, "plan: auto runs bulk: cuBLASLt cannot run the baseline on every rank (%s)",
              msg[0] ? msg : "another rank's cuBLASLt");
    weave_lt_destroy(p->lt);
    p->lt = NULL;
    p->strategy = WEAVE_STRATEGY_BULK;
  }
  return WEAVE_SUCCESS;
}

/* What the chosen strategy writes and reads: output and slot dtypes, the GEMM role. */
static void plan_choose_dtypes(weave_gemm_rs_plan_t p) {
  const weave_gemm_rs_desc_t *desc = &p->desc;
  p->out_dtype = weave_dtype_out(desc->dtype, desc->out_dtype);
  p->slot_dtype = desc->fp32_slots ? WEAVE_FP32 : p->out_dtype;
  if (p->strategy == WEAVE_STRATEGY_BASELINE) p->slot_dtype = p->out_dtype; /* cuBLASLt writes out_dtype */
  if (p->strategy == WEAVE_STRATEGY_FUSED && desc->reduce == WEAVE_REDUCE_ATOMIC) p->slot_dtype = WEAVE_FP32;
  /* The fused kernel uses the Hopper role when rows allow TMA; execute then wants aligned A, B. */
  p->hopper = p->strategy == WEAVE_STRATEGY_FUSED && weave_kernel_hopper_ok(desc->dtype, desc->b_layout, p->N, p->K);
}

static void plan_choose_tiling(weave_gemm_rs_plan_t p) {
  int tm, tn;
  weave_kernel_tile_shape(p->hopper, &tm, &tn);
  p->tiling = (weave_tiling_t){p->M, p->N, p->team->world, tm, tn, (int)p->desc.tile_order, 0};
  p->rows_cap = weave_cdiv(p->M, p->team->world);
  p->tiles_cap = weave_max_owner_tiles(&p->tiling);
}

/* ---- blocks ------------------------------------------------------------------------------------ */
/* The split model's rates from this device's clock and memory attributes. */
static void split_inputs(weave_team_t team, weave_dtype_t dtype, int per_sm, int budget, weave_split_inputs_t *in) {
  int clock_khz = 1500000, mem_khz = 2600000, bus_bits = 5120;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, team->info.device);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, team->info.device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, team->info.device);
  weave_split_inputs_from_device(team->info.sm_count, clock_khz * 1e3, 2.0 * mem_khz * 1e3 * bus_bits / 8.0, dtype,
                                 per_sm, budget, in);
}

/* The fused kernel's GEMM / communication split: the caller's, else AUTO's (measured or cached) if it
 * fits the budget, else the cost model's. */
static void plan_split_fused(weave_gemm_rs_plan_t p, int per_sm, const weave_auto_choice_t *choice) {
  const weave_gemm_rs_desc_t *desc = &p->desc;
  if (desc->gemm_blocks > 0) {
    p->gemm_blocks = desc->gemm_blocks;
    p->comm_blocks = desc->comm_blocks;
  } else if (choice && choice->strategy == WEAVE_STRATEGY_FUSED && choice->gemm_blocks > 0 && choice->comm_blocks > 0 &&
             choice->gemm_blocks + choice->comm_blocks <= p->budget) {
    p->gemm_blocks = choice->gemm_blocks;
    p->comm_blocks = choice->comm_blocks;
  } else {
    const int world = p->team->world;
    weave_split_inputs_t in;
    split_inputs(p->team, desc->dtype, per_sm, p->budget, &in);
    size_t slot = weave_dtype_size(p->slot_dtype);
    p->comm_blocks = weave_split_comm_blocks(
        &in, weave_plan_gemm_flops(p->M, p->N, p->K, world),
        weave_plan_comm_bytes(p->M, p->N, world, slot, weave_dtype_size(p->out_dtype)), (double)p->tiles_cap);
    p->gemm_blocks = p->budget - p->comm_blocks;
  }
}

/* Co-residency: a rank may use its share of the GPU's resident blocks (the fused kernel's blocks
 * wait on each other, so more than that could deadlock). Local: fails on this rank only. */
static weave_result_t plan_choose_blocks(weave_gemm_rs_plan_t p, const weave_auto_choice_t *choice) {
  const weave_device_info_t *info = &p->team->info;
  const int fused = p->strategy == WEAVE_STRATEGY_FUSED;
  size_t smem = 0;
  int per_sm = weave_kernel_blocks_per_sm(p->out_dtype, p->hopper, fused, &smem);
  p->budget = weave_rank_blocks(per_sm * info->sm_count, info->ranks_on_device);
  if (per_sm < 1 || p->budget < (fused ? 2 : 1))
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "plan: %d blocks/SM x %d SMs / %d ranks on this GPU leaves %d resident blocks per rank; "
                      "the fused kernel needs at least 2 (one GEMM, one communication)",
                      per_sm, info->sm_count, info->ranks_on_device, p->budget);
  if (!fused) {
    p->gemm_blocks = p->budget;
    p->comm_blocks = p->budget; /* reduce-scatter kernel */
    return WEAVE_SUCCESS;
  }
  const int own_split = p->desc.gemm_blocks <= 0 && !(choice && choice->strategy == WEAVE_STRATEGY_FUSED &&
                                                      choice->gemm_blocks > 0 && choice->comm_blocks > 0);
  plan_split_fused(p, per_sm, choice);
  /* 2-CTA clusters sharing A where the standalone GEMM would run them (weave_hgemm_shares_a; the Hopper
   * role with slots only: the atomic accumulator's kernel spills with them): the planner's own split
   * rounded to even counts (a given odd one runs unclustered), and every rank's clusters resident at
   * once */
  const int pairs = p->hopper && p->desc.reduce != WEAVE_REDUCE_ATOMIC &&
                    weave_hgemm_shares_a(weave_tiles_n(&p->tiling), p->budget, p->desc.dtype == WEAVE_FP8_E4M3);
  if (pairs && own_split && p->comm_blocks > 0) {
    int gemm = p->gemm_blocks, comm = p->comm_blocks;
    weave_pairs_round(p->budget, &gemm, &comm);
    if (gemm >= 2) {
      p->comm_blocks = comm;
      p->gemm_blocks = gemm;
    }
  }
  p->tiling.pair_n = pairs && weave_pairs_fit(p->gemm_blocks, p->comm_blocks, info->ranks_on_device,
                                              weave_kernel_fused_max_clusters());
  if (p->gemm_blocks + p->comm_blocks > p->budget)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "plan: %d GEMM + %d communication blocks could deadlock: only %d blocks of this kernel are "
                      "co-resident per rank (%d/SM x %d SMs / %d ranks sharing the GPU)",
                      p->gemm_blocks, p->comm_blocks, p->budget, per_sm, info->sm_count, info->ranks_on_device);
  return WEAVE_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------------------------ */
/* Sizes of the plan's heap allocation (see plan.h): head_bytes and mem_bytes. */
static void plan_size_memory(weave_gemm_rs_plan_t p) {
  const int world = p->team->world;
  size_t flags = 0, data = 0, slot_bytes = weave_dtype_size(p->slot_dtype);
  if (p->strategy == WEAVE_STRATEGY_FUSED) {
    if (p->desc.reduce == WEAVE_REDUCE_ATOMIC) {
      flags = (size_t)p->tiles_cap * 4;
      data = (size_t)p->rows_cap * p->N * 4;
    } else {
      flags = (size_t)world * p->tiles_cap * 4;
      data = (size_t)world * p->rows_cap * p->N * slot_bytes;
    }
  } else if (world > 1) {
    data = (size_t)p->M * p->N * slot_bytes;
  } /* one rank: baseline and bulk write C_out directly (the reduce-scatter of one rank is a copy) */
  /* data 256-byte aligned (the heap's blocks are): what cuBLASLt assumes of the baseline's partial
   * unless told less */
  p->head_bytes = (sizeof(weave_plan_ctl_t) + flags + 255) / 256 * 256;
  p->mem_bytes = p->head_bytes + data;
}

/* Zero the flags (and the atomic accumulator) once; plan_acquire waits for it before the ranks
 * agree, so every rank finishes before any kernel runs. */
static weave_result_t plan_zero_flags(weave_gemm_rs_plan_t p) {
  size_t zero =
      p->desc.reduce == WEAVE_REDUCE_ATOMIC && p->strategy == WEAVE_STRATEGY_FUSED ? p->mem_bytes : p->head_bytes;
  int e = (int)cudaMemset(p->mem, 0, zero);
  return e ? weave_plan_cuda_fail(p->team, e, "plan: zeroing flags") : WEAVE_SUCCESS;
}

/* The baseline's GEMM. Local. */
static weave_result_t plan_create_lt(weave_gemm_rs_plan_t p) {
  char msg[256];
  weave_result_t rc = plan_lt_new(p, msg, sizeof(msg));
  if (rc != WEAVE_SUCCESS) weave_fail(p->team, rc, "plan: cuBLASLt: %s", msg);
  return rc;
}

/* The fused kernel's per-tile trace (desc.trace or WEAVE_TRACE): without device memory for it, the
 * plan runs untraced. */
static _Thread_local int untraced; /* weave_plan_untraced: a candidate of auto's being created */
void weave_plan_untraced(int on) { untraced = on; }

static void plan_trace_buffer(weave_gemm_rs_plan_t p, const weave_env_t *env) {
  if (untraced) return;
  snprintf(p->trace_path, sizeof(p->trace_path), "%s", env->trace);
  if (!((p->desc.trace || p->trace_path[0]) && p->strategy == WEAVE_STRATEGY_FUSED)) return;
  /* One GEMM event per tile of the walk, WAIT + REDUCE per owned tile, and room to spare. */
  p->trace_cap = (unsigned)(weave_total_tiles(&p->tiling) + 2 * p->tiles_cap + 64);
  if (cudaMalloc((void **)&p->trace, sizeof(weave_trace_event_t) * p->trace_cap + 64) != cudaSuccess) {
    cudaGetLastError();
    p->trace = NULL;
    p->trace_cap = 0;
    weave_log(WEAVE_LOG_WARN, p->team, "plan: no device memory for the trace: tracing off");
  }
}

/* The bulk GEMM's own stream-K workspace (zeroed), so that no call allocates: a plan's calls are
 * ordered, so one workspace serves them on any stream. None needed, or none to be had: the GEMM
 * runs data-parallel tiles only. */
static void plan_gemm_workspace(weave_gemm_rs_plan_t p) {
  if (p->strategy != WEAVE_STRATEGY_BULK) return;
  /* what execute's GEMM writes: C_out itself on one rank (execute_direct_bulk), else the partial */
  const weave_dtype_t out = p->team->world == 1 ? p->out_dtype : p->slot_dtype;
  const weave_gemm_call_t c = {.M = p->M,
                               .N = p->N,
                               .K = p->K,
                               .dtype = p->desc.dtype,
                               .b_layout = p->desc.b_layout,
                               .out_dtype = out,
                               .fp8_fast_accum = p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST,
                               .num_blocks = p->gemm_blocks};
  p->gemm_ws = weave_gemm_workspace_alloc(p->team, &c, &p->gemm_ws_bytes);
}

/* Collective: the heap allocation (zeroed head), the trace buffer, the bulk GEMM's workspace, the
 * lockstep event, and the baseline's cuBLASLt and NCCL. Every CUDA call that may wait for the whole
 * device (allocation, cudaDeviceSynchronize) comes before the agreement: after it, a faster rank may already launch a kernel that spins until this
 * rank launches too, and ranks that are threads sharing a GPU would stall each other until the
 * timeout. On failure the allocations are freed again (p->lt and p->nccl are the caller's to
 * destroy). */
static weave_result_t plan_acquire(weave_gemm_rs_plan_t p, const weave_env_t *env) {
  weave_team_t team = p->team;
  const int baseline = p->strategy == WEAVE_STRATEGY_BASELINE;
  WEAVE_CHECK(weave_malloc(team, p->mem_bytes, &p->mem));
  weave_result_t local = plan_zero_flags(p);
  if (local == WEAVE_SUCCESS && baseline && !p->lt) local = plan_create_lt(p);
  if (local == WEAVE_SUCCESS) plan_trace_buffer(p, env);
  if (local == WEAVE_SUCCESS) plan_gemm_workspace(p);
  if (local == WEAVE_SUCCESS) local = weave_lockstep_create(team, &p->lockstep_ev);
  if (local == WEAVE_SUCCESS) { /* the flags' and the workspace's zeroing done */
    const int e = (int)cudaDeviceSynchronize();
    if (e) local = weave_plan_cuda_fail(team, e, "plan: zeroing flags and workspace");
  }
  weave_result_t rc = weave_team_agree(team, local);
  /* the baseline's reduce-scatter through NCCL where it runs (a GPU per rank; equal chunks) */
  if (rc == WEAVE_SUCCESS && baseline && team->world > 1 && p->M % team->world == 0)
    p->nccl = weave_nccl_try_create(team, "plan", "weave's reduce-scatter instead");
  if (rc != WEAVE_SUCCESS) {
    weave_free(team, p->mem);
    cudaFree(p->trace);
    cudaFree(p->gemm_ws);
    p->trace = NULL;
    p->gemm_ws = NULL;
    weave_lockstep_destroy(p->lockstep_ev);
    p->lockstep_ev = NULL;
  }
  return rc;
}

/* ---- parameters -------------------------------------------------------------------------------- */
/* The fused / bulk kernels' parameter block, all but the per-call pointers. */
static void plan_fill_params(weave_gemm_rs_plan_t p) {
  weave_fused_params_t *fp = &p->params;
  memset(fp, 0, sizeof(*fp));
  fp->M = p->M;
  fp->N = p->N;
  fp->K = p->K;
  fp->dtype = p->out_dtype; /* what the kernels write (C, bias); in_dtype is what they read */
  fp->in_dtype = p->desc.dtype;
  fp->fp8_fast_accum = p->desc.fp8_accum == WEAVE_FP8_ACCUM_FAST;
  fp->b_layout = p->desc.b_layout;
  fp->slot_dtype = p->slot_dtype;
  fp->hopper = p->hopper;
  fp->reduce = p->desc.reduce;
  fp->alpha = p->desc.alpha;
  weave_team_device_view(p->team, &fp->team);
  fp->tiling = p->tiling;
  fp->rows_cap = p->rows_cap;
  fp->tiles_cap = p->tiles_cap;
  fp->ctl = (weave_plan_ctl_t *)p->mem;
  fp->tile_flags = (uint32_t *)((char *)p->mem + sizeof(weave_plan_ctl_t));
  fp->data = (char *)p->mem + p->head_bytes;
  fp->gemm_blocks = p->gemm_blocks;
  fp->comm_blocks = p->comm_blocks;
  if (p->trace) {
    fp->trace = p->trace;
    fp->trace_count = (unsigned *)(p->trace + p->trace_cap);
    fp->trace_cap = p->trace_cap;
  }
}

/* TMA-store epilogue: one store map per owner onto this rank's slot in that owner's heap (the
 * addresses are fixed for the plan's life). Rows of 16-byte multiples, every owner non-empty. */
static void plan_tma_store_maps(weave_gemm_rs_plan_t p, const weave_env_t *env) {
  weave_team_t team = p->team;
  weave_fused_params_t *fp = &p->params;
  const int M = p->M, N = p->N;
  const size_t slot_bytes = weave_dtype_size(p->slot_dtype);
  /* (a rail plan across hosts has peers it cannot address: NCCL moves its rows, no kernel of it runs) */
  if (!(p->hopper && p->desc.reduce == WEAVE_REDUCE_DETERMINISTIC && env->tma_epilogue && M >= team->world &&
        ((size_t)N * slot_bytes) % 16 == 0) ||
      team->peers_unmapped)
    return;
  int ok = 1;
  for (int o = 0; o < team->world && ok; ++o) {
    int rb, rows;
    void *slot = NULL;
    char msg[256] = "no address of the slot in that owner's heap";
    weave_split_rows_of(M, team->world, o, &rb, &rows);
    ok = weave_ptr(team, (char *)fp->data + (size_t)team->rank * p->rows_cap * N * slot_bytes, o, &slot) ==
             WEAVE_SUCCESS &&
         weave_hgemm_encode_store_map(&fp->slot_map[o], p->slot_dtype, slot, (uint64_t)N, (uint64_t)rows,
                                      (uint64_t)N * slot_bytes, msg, sizeof(msg)) == WEAVE_SUCCESS;
    if (!ok) weave_log(WEAVE_LOG_WARN, team, "plan: no TMA store map for owner %d (%s): plain stores", o, msg);
  }
  /* This rank's GEMM blocks only: how a tile reaches its owner does not change the protocol, so
   * ranks may differ here. */
  fp->tma_slots = ok;
}

/* ---- create, info, destroy --------------------------------------------------------------------- */
/* The host side of a plan: its baselines and the object (the heap allocation is freed apart). */
static void plan_free_host(weave_gemm_rs_plan_t p) {
  weave_lt_destroy(p->lt);
  weave_nccl_destroy(p->nccl);
  free(p);
}

weave_gemm_rs_plan_t weave_gemm_rs_plan_new(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc) {
  weave_gemm_rs_plan_t p = (weave_gemm_rs_plan_t)calloc(1, sizeof(*p));
  if (!p) {
    weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
    return NULL;
  }
  p->team = team;
  p->M = M;
  p->N = N;
  p->K = K;
  p->desc = *desc;
  p->out_dtype = weave_dtype_out(desc->dtype, desc->out_dtype);
  p->pageable_access = weave_pageable_access(team->info.device);
  return p;
}

/* The split a fused plan of these arguments would get here (weave_plan_split_fn for the tuner):
 * local, nothing allocated on the device. */
static weave_result_t plan_fused_split(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                       int *gemm_blocks, int *comm_blocks) {
  weave_gemm_rs_plan_t p = weave_gemm_rs_plan_new(team, M, N, K, desc);
  if (!p) return WEAVE_ERROR_OUT_OF_MEMORY;
  p->desc.strategy = WEAVE_STRATEGY_FUSED;
  p->strategy = WEAVE_STRATEGY_FUSED;
  plan_choose_dtypes(p);
  plan_choose_tiling(p);
  weave_result_t rc = plan_choose_blocks(p, NULL);
  *gemm_blocks = p->gemm_blocks;
  *comm_blocks = p->comm_blocks;
  free(p);
  return rc;
}

/* How the strategy was chosen, for plan_info and the log. */
static void plan_note_choice(weave_gemm_rs_plan_t p, const weave_auto_choice_t *choice) {
  if (p->desc.strategy != WEAVE_STRATEGY_AUTO) {
    p->chosen_by = WEAVE_CHOSEN_BY_CALLER;
    snprintf(p->why, sizeof(p->why), "given by the caller");
    return;
  }
  p->chosen_by = choice->chosen_by;
  p->choose_ms = choice->choose_ms;
  if (p->strategy != choice->strategy) /* plan_settle_auto moved it */
    snprintf(p->why, sizeof(p->why), "%.240s; bulk instead: cuBLASLt cannot run the baseline on every rank",
             choice->why);
  else
    snprintf(p->why, sizeof(p->why), "%s", choice->why);
}

static weave_result_t plan_create(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc, int flat,
                                  weave_gemm_rs_plan_t *plan_out) {
  weave_gemm_rs_desc_t d;
  WEAVE_CHECK(weave_team_agree(team, weave_gemm_rs_desc_read(team, desc, &d)));
  WEAVE_CHECK(plan_check_team_args(team, M, N, K, &d));
  desc = &d;
  char flat_why[160];
  if (!flat && weave_hier_applies(team, flat_why, sizeof(flat_why)))
    return weave_hier_create(team, M, N, K, &d, plan_out);
  if (!flat && flat_why[0]) weave_log(WEAVE_LOG_INFO, team, "plan %dx%dx%d: %s", M, N, K, flat_why);
  if (!flat) WEAVE_CHECK(weave_team_require_mapped(team, "weave_gemm_rs_plan_create"));

  weave_gemm_rs_plan_t p = weave_gemm_rs_plan_new(team, M, N, K, desc); /* desc: d, in this version's layout */
  if (!p) return WEAVE_ERROR_OUT_OF_MEMORY;

  weave_env_t env;
  if (weave_env_load(&env) != WEAVE_SUCCESS) memset(&env, 0, sizeof(env)); /* the team checked it already */
  weave_auto_choice_t choice;
  memset(&choice, 0, sizeof(choice));
  weave_result_t rc = WEAVE_SUCCESS;
  if (desc->strategy == WEAVE_STRATEGY_AUTO)
    rc = weave_autotune_choose(team, M, N, K, desc, &env, plan_fused_split, &choice);
  if (rc != WEAVE_SUCCESS) {
    plan_free_host(p);
    return rc;
  }
  plan_choose_strategy(p, &choice);
  rc = plan_settle_auto(p);
  if (rc != WEAVE_SUCCESS) {
    plan_free_host(p);
    return rc;
  }
  plan_choose_dtypes(p);
  plan_choose_tiling(p);
  rc = plan_choose_blocks(p, &choice);
  plan_size_memory(p);
  plan_note_choice(p, &choice);
  if (env.delay_us && env.delay_strategy == p->strategy) p->delay_us = env.delay_us; /* WEAVE_TEST_DELAY */
  /* Every rank takes part in the agreement; a rank that failed here returns its own code. */
  if (rc == WEAVE_SUCCESS)
    rc = weave_team_agree(team, rc);
  else
    weave_team_agree(team, rc);
  if (rc == WEAVE_SUCCESS) rc = plan_acquire(p, &env);
  if (rc != WEAVE_SUCCESS) {
    plan_free_host(p);
    return rc;
  }

  plan_fill_params(p);
  plan_tma_store_maps(p, &env);
  weave_log(WEAVE_LOG_INFO, team,
            "plan %dx%dx%d %s: strategy %s, %d GEMM + %d comm blocks%s (budget %d), %zu heap bytes at offset %zu, %s "
            "epilogue",
            M, N, K, weave_dtype_name(desc->dtype), weave_strategy_name(p->strategy), p->gemm_blocks, p->comm_blocks,
            p->tiling.pair_n ? " in 2-CTA clusters sharing A" : "", p->budget, p->mem_bytes,
            (size_t)((char *)p->mem - (char *)team->heap_base), p->params.tma_slots ? "TMA-store" : "register-store");
  if (p->chosen_by != WEAVE_CHOSEN_BY_CALLER && (env.info || weave_log_level() >= WEAVE_LOG_INFO) && team->rank == 0)
    fprintf(stderr, "weave: plan %dx%dx%d %s, %d rank(s): auto chose %s, %.1f ms: %s\n", M, N, K,
            weave_dtype_name(desc->dtype), team->world, weave_strategy_name(p->strategy), p->choose_ms, p->why);
  *plan_out = p;
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm_rs_plan_create(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                         weave_gemm_rs_plan_t *plan_out) {
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_create: team is NULL");
  if (!plan_out) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_create: plan is NULL");
  WEAVE_CHECK(weave_team_check_live(team, "weave_gemm_rs_plan_create"));
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  weave_result_t rc = plan_create(team, M, N, K, desc, 0, plan_out);
  weave_device_leave(caller);
  return rc;
}

weave_result_t weave_gemm_rs_plan_create_flat(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                              weave_gemm_rs_plan_t *plan_out) {
  return plan_create(team, M, N, K, desc, 1, plan_out);
}

weave_result_t weave_gemm_rs_plan_info(weave_gemm_rs_plan_t p, weave_gemm_rs_info_t *info) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_info: plan is NULL");
  if (!info) return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_info: info is NULL");
  memset(info, 0, sizeof(*info));
  info->strategy = p->strategy;
  weave_split_rows_of(p->M, p->team->world, p->team->rank, &info->row_begin, &info->rows);
  info->tile_m = p->tiling.tile_m;
  info->tile_n = p->tiling.tile_n;
  info->tiles_total = weave_total_tiles(&p->tiling);
  /* past one node the tiling is a band plan's, over the node's ranks: this rank is its local one */
  const int tile_rank = p->hier ? p->team->rank % (p->team->world / p->team->nodes) : p->team->rank;
  info->tiles_owned = weave_owner_tiles(&p->tiling, tile_rank);
  info->gemm_blocks = p->gemm_blocks;
  info->comm_blocks = p->comm_blocks;
  info->heap_bytes = p->mem_bytes;
  size_t slot = weave_dtype_size(p->slot_dtype);
  info->bytes_sent = weave_plan_bytes_sent(p->M, p->N, p->team->world, p->team->rank, slot);
  info->chosen_by = p->chosen_by;
  info->choose_ms = p->choose_ms;
  info->cta_pairs = p->tiling.pair_n;
  snprintf(info->why, sizeof(info->why), "%s", p->why);
  return WEAVE_SUCCESS;
}

/* WEAVE_TRACE: this rank's last call, to <path>.rank<r>.json. */
static void plan_write_trace(weave_gemm_rs_plan_t p) {
  weave_trace_event_t *ev = (weave_trace_event_t *)malloc(sizeof(*ev) * p->trace_cap);
  size_t n = 0;
  if (ev && weave_gemm_rs_trace_fetch(p, NULL, ev, p->trace_cap, &n) == WEAVE_SUCCESS) {
    char path[600];
    snprintf(path, sizeof(path), "%s.rank%d.json", p->trace_path, p->team->rank);
    const weave_trace_event_t *per[1] = {ev};
    size_t cnt[1] = {n < p->trace_cap ? n : p->trace_cap};
    if (weave_trace_write_json(path, per, cnt, 1, "weave fused GEMM+RS") != 0)
      weave_log(WEAVE_LOG_WARN, p->team, "WEAVE_TRACE: cannot write %s", path);
  }
  free(ev);
}

weave_result_t weave_gemm_rs_plan_destroy(weave_gemm_rs_plan_t p) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_destroy: plan is NULL");
  const weave_device_scope_t caller = weave_device_enter(p->team->info.device);
  if (p->hier) {
    const weave_result_t hrc = weave_hier_destroy(p);
    weave_device_leave(caller);
    return hrc;
  }
  if (p->trace && p->trace_path[0] && p->calls > 0) plan_write_trace(p);
  /* cudaFree waits for this plan's last calls; every rank has enqueued its own before coming here */
  cudaFree(p->trace);
  cudaFree(p->gemm_ws);
  weave_lockstep_destroy(p->lockstep_ev);
  p->lockstep_ev = NULL;
  /* a peer's abort that this rank's weave_team_sync has not reported yet: the aborting rank frees
   * nothing collectively, so neither may this one */
  weave_team_refresh_abort(p->team);
  /* weave_free synchronizes the device and all ranks first. On an aborted team there is no
   * agreement to be had: the heap goes with weave_team_destroy. */
  weave_result_t rc = p->team->aborted_by ? WEAVE_SUCCESS : weave_free(p->team, p->mem);
  plan_free_host(p);
  weave_device_leave(caller);
  return rc;
}
