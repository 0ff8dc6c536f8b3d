/*
 * GEMM + ReduceScatter plans: argument checks, strategy and block split, the symmetric memory the
 * plan owns, and execution (an epoch per call; see gemm_rs.cu for the protocol).
 *
 * Memory per rank (one weave_malloc):
 *   control words (done/ready/arrive)                  256 + 256 + 128 bytes
 *   tile flags    deterministic: world x tiles_cap u32; atomic: tiles_cap u32; bulk: none
 *   data          deterministic: world slots of ceil(M/world) x N (slot dtype)  ~ M x N
 *                 atomic:        one fp32 accumulator of ceil(M/world) x N      ~ M x N / world
 *                 bulk/baseline: the local partial M x N (slot dtype / dtype)
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "runtime/internal.h"
#include "kernels/kernels.h"
#include "gemm_rs/lt.h"
#include "gemm_rs/nccl_rt.h"
#include "gemm_rs/plan_model.h"
#include "gemm_rs/tune.h"

struct weave_gemm_rs_plan {
  weave_team_t team;
  weave_dtype_t slot_dtype; /* of the partials: dtype, or fp32 (fp32_slots, atomic accumulator) */
  int hopper;               /* GEMM role: TMA + wgmma */
  int M, N, K;
  weave_gemm_rs_desc_t desc;
  weave_strategy_t strategy;
  weave_tiling_t tiling;
  int rows_cap, tiles_cap;
  int gemm_blocks, comm_blocks, budget;
  void *mem;     /* the plan's heap allocation */
  size_t mem_bytes;
  weave_fused_params_t params; /* everything but the per-call pointers and epoch */
  weave_lt_t *lt;  /* baseline GEMM */
  weave_nccl_t *nccl; /* baseline reduce-scatter when every rank has a GPU of its own and M % world == 0 */
  weave_trace_event_t *trace; /* device: events of the last traced call, then the counter */
  unsigned trace_cap;
  char trace_path[512];       /* WEAVE_TRACE */
  uint32_t epoch;
  int pageable_access; /* the device reads pageable host memory (cudaDevAttrPageableMemoryAccess) */
};

weave_result_t weave_row_split(int M, int world, int rank, int *row_begin, int *rows) {
  if (!row_begin || !rows)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_row_split: row_begin and rows must be non-NULL");
  if (M < 0 || world < 1 || rank < 0 || rank >= world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_row_split: M %d, world %d, rank %d (need M >= 0, "
                      "world >= 1, 0 <= rank < world)", M, world, rank);
  weave_split_rows_of(M, world, rank, row_begin, rows);
  return WEAVE_SUCCESS;
}

/* Argument checks that need no device (the CPU tests call it directly). */
weave_result_t weave_gemm_rs_check_args(weave_team_t team, int M, int N, int K,
                                        const weave_gemm_rs_desc_t *d) {
  const char *fn = "weave_gemm_rs_plan_create";
  if (!d) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: desc is NULL", fn);
  if (d->struct_size != sizeof(weave_gemm_rs_desc_t))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: desc.struct_size %zu != %zu (use WEAVE_GEMM_RS_DESC_INIT)",
                      fn, d->struct_size, sizeof(weave_gemm_rs_desc_t));
  if (M < 1 || N < 1 || K < 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: M %d, N %d, K_local %d must all be >= 1", fn, M, N, K);
  if ((double)M * N > (double)INT_MAX * 64 || (double)M * K > (double)INT_MAX * 64 || (double)N * K > (double)INT_MAX * 64)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: %d x %d x %d is too large", fn, M, N, K);
  if ((unsigned)d->dtype > WEAVE_FP32)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: dtype %d is not bf16/fp16/fp32", fn, (int)d->dtype);
  if ((unsigned)d->b_layout > WEAVE_LAYOUT_COL)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: b_layout %d is not ROW/COL", fn, (int)d->b_layout);
  if ((unsigned)d->strategy > WEAVE_STRATEGY_BASELINE)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: strategy %d unknown", fn, (int)d->strategy);
  if ((unsigned)d->reduce > WEAVE_REDUCE_ATOMIC)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: reduce %d unknown", fn, (int)d->reduce);
  if (d->fp32_slots != 0 && d->fp32_slots != 1)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: fp32_slots %d must be 0 or 1", fn, d->fp32_slots);
  if ((unsigned)d->tile_order > WEAVE_ORDER_OWN_FIRST)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: tile_order %d unknown", fn, (int)d->tile_order);
  if (!isfinite(d->alpha))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: alpha is not finite", fn);
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

static uint32_t weave_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static weave_result_t cuda_fail(weave_team_t team, int err, const char *what) {
  return weave_fail(team, WEAVE_ERROR_CUDA, "%s: %s", what, weave_cuda_error_string(err));
}

/* The split model's rates from this device's clock and memory attributes. */
static void split_inputs(weave_team_t team, weave_dtype_t dtype, int per_sm, int budget, weave_split_inputs_t *in) {
  int clock_khz = 1500000, mem_khz = 2600000, bus_bits = 5120;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, team->info.device);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, team->info.device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, team->info.device);
  weave_split_inputs_from_device(team->info.sm_count, clock_khz * 1e3, 2.0 * mem_khz * 1e3 * bus_bits / 8.0, dtype,
                                 per_sm, budget, in);
}

weave_result_t weave_gemm_rs_plan_create(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                         weave_gemm_rs_plan_t *plan_out) {
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_create: team is NULL");
  if (!plan_out) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_create: plan is NULL");
  weave_result_t rc = weave_gemm_rs_check_args(team, M, N, K, desc);
  WEAVE_CHECK(weave_team_agree(team, rc));
  /* Field by field: copying the desc whole would bring its padding bytes (whatever the caller's stack
   * held) into the comparison. */
  const uint32_t same[] = {(uint32_t)M, (uint32_t)N, (uint32_t)K, (uint32_t)desc->dtype, (uint32_t)desc->b_layout,
                           (uint32_t)desc->strategy, (uint32_t)desc->reduce, (uint32_t)desc->fp32_slots,
                           (uint32_t)desc->tile_order, weave_float_bits(desc->alpha), (uint32_t)desc->has_bias,
                           (uint32_t)desc->gemm_blocks, (uint32_t)desc->comm_blocks, (uint32_t)desc->trace};
  WEAVE_CHECK(weave_team_check_same(team, same, sizeof(same), "plan arguments (M, N, K_local, desc)"));

  weave_gemm_rs_plan_t p = (weave_gemm_rs_plan_t)calloc(1, sizeof(*p));
  if (!p) return weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "plan: host allocation failed");
  p->team = team;
  p->M = M; p->N = N; p->K = K;
  p->desc = *desc;
  cudaSetDevice(team->info.device);
  if (cudaDeviceGetAttribute(&p->pageable_access, cudaDevAttrPageableMemoryAccess, team->info.device) != cudaSuccess) {
    cudaGetLastError();
    p->pageable_access = 0;
  }

  /* Strategy: an explicit one, else the tuned one, else the baseline (it is never slower than
   * itself; the fused kernel is chosen only where weave-bench --tune measured it faster). */
  weave_env_t env;
  if (weave_env_load(&env) != WEAVE_SUCCESS) memset(&env, 0, sizeof(env)); /* the team checked it already */
  weave_tune_entry_t tuned;
  int have_tune = weave_tune_find(env.tune_file, team->info.name, team->world, M, N, K, desc->dtype, &tuned) == 0;
  p->strategy = desc->strategy;
  if (p->strategy == WEAVE_STRATEGY_AUTO) p->strategy = have_tune ? tuned.strategy : WEAVE_STRATEGY_BASELINE;
  p->slot_dtype = desc->fp32_slots ? WEAVE_FP32 : desc->dtype;
  if (p->strategy == WEAVE_STRATEGY_BASELINE) p->slot_dtype = desc->dtype; /* cuBLASLt writes dtype */
  if (p->strategy == WEAVE_STRATEGY_FUSED && desc->reduce == WEAVE_REDUCE_ATOMIC) p->slot_dtype = WEAVE_FP32;
  /* The fused kernel uses the Hopper role when rows allow TMA; execute then wants aligned A, B. */
  p->hopper = p->strategy == WEAVE_STRATEGY_FUSED && weave_kernel_hopper_ok(desc->dtype, desc->b_layout, N, K);

  int tm, tn;
  weave_kernel_tile_shape(p->hopper, &tm, &tn);
  p->tiling = (weave_tiling_t){M, N, team->world, tm, tn, (int)desc->tile_order};
  p->rows_cap = weave_cdiv(M, team->world);
  p->tiles_cap = weave_max_owner_tiles(&p->tiling);

  /* Co-residency: a rank may use its share of the GPU's resident blocks. */
  size_t smem = 0;
  int per_sm = weave_kernel_blocks_per_sm(desc->dtype, p->hopper, p->strategy == WEAVE_STRATEGY_FUSED, &smem);
  /* Ranks sharing a GPU leave one SM each free, so the short kernels around the calls (memsets, the
   * bulk strategy's signal kernels) never take the place of a block that others wait for. */
  int spare = team->info.ranks_on_device > 1 ? team->info.ranks_on_device : 0;
  p->budget = (per_sm * team->info.sm_count - spare) / team->info.ranks_on_device;
  rc = WEAVE_SUCCESS;
  if (per_sm < 1 || p->budget < (p->strategy == WEAVE_STRATEGY_FUSED ? 2 : 1))
    rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                    "plan: %d blocks/SM x %d SMs / %d ranks on this GPU leaves %d resident blocks per rank; "
                    "the fused kernel needs at least 2 (one GEMM, one communication)",
                    per_sm, team->info.sm_count, team->info.ranks_on_device, p->budget);
  if (rc == WEAVE_SUCCESS && p->strategy == WEAVE_STRATEGY_FUSED) {
    if (desc->gemm_blocks > 0) {
      p->gemm_blocks = desc->gemm_blocks;
      p->comm_blocks = desc->comm_blocks;
    } else if (have_tune && tuned.strategy == WEAVE_STRATEGY_FUSED && tuned.gemm_blocks + tuned.comm_blocks <= p->budget) {
      p->gemm_blocks = tuned.gemm_blocks;
      p->comm_blocks = tuned.comm_blocks;
    } else {
      weave_split_inputs_t in;
      split_inputs(team, desc->dtype, per_sm, p->budget, &in);
      size_t slot = weave_dtype_size(p->slot_dtype);
      p->comm_blocks = weave_split_comm_blocks(&in, weave_plan_gemm_flops(M, N, K, team->world),
                                               weave_plan_comm_bytes(M, N, team->world, slot, weave_dtype_size(desc->dtype)),
                                               (double)p->tiles_cap);
      p->gemm_blocks = p->budget - p->comm_blocks;
    }
    if (p->gemm_blocks + p->comm_blocks > p->budget)
      rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                      "plan: %d GEMM + %d communication blocks could deadlock: only %d blocks of this kernel are "
                      "co-resident per rank (%d/SM x %d SMs / %d ranks sharing the GPU)",
                      p->gemm_blocks, p->comm_blocks, p->budget, per_sm, team->info.sm_count, team->info.ranks_on_device);
  } else if (rc == WEAVE_SUCCESS) {
    p->gemm_blocks = p->budget;
    p->comm_blocks = p->budget; /* reduce-scatter kernel */
  }

  /* Symmetric memory. */
  size_t flags = 0, data = 0, slot_bytes = weave_dtype_size(p->slot_dtype);
  if (p->strategy == WEAVE_STRATEGY_FUSED) {
    if (desc->reduce == WEAVE_REDUCE_ATOMIC) {
      flags = (size_t)p->tiles_cap * 4;
      data = (size_t)p->rows_cap * N * 4;
    } else {
      flags = (size_t)team->world * p->tiles_cap * 4;
      data = (size_t)team->world * p->rows_cap * N * slot_bytes;
    }
  } else if (team->world > 1) {
    data = (size_t)M * N * slot_bytes;
  } /* one rank: baseline and bulk write C_out directly (the reduce-scatter of one rank is a copy) */
  size_t head = sizeof(weave_plan_ctl_t) + (flags + 255) / 256 * 256;
  p->mem_bytes = head + data;
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, rc);
  else weave_team_agree(team, rc);
  if (rc == WEAVE_SUCCESS) rc = weave_malloc(team, p->mem_bytes, &p->mem);
  if (rc == WEAVE_SUCCESS) {
    /* Zero flags (and the atomic accumulator) once; every rank finishes before any kernel runs. */
    size_t zero = desc->reduce == WEAVE_REDUCE_ATOMIC && p->strategy == WEAVE_STRATEGY_FUSED ? p->mem_bytes : head;
    int e = (int)cudaMemset(p->mem, 0, zero);
    if (!e) e = (int)cudaDeviceSynchronize();
    weave_result_t local = e ? cuda_fail(team, e, "plan: zeroing flags") : WEAVE_SUCCESS;
    if (local == WEAVE_SUCCESS && p->strategy == WEAVE_STRATEGY_BASELINE) {
      char msg[256];
      local = weave_lt_create(M, N, K, desc->dtype, desc->dtype, desc->b_layout, 0, &p->lt, msg, sizeof(msg));
      if (local != WEAVE_SUCCESS) weave_fail(team, local, "plan: cuBLASLt: %s", msg);
    }
    rc = weave_team_agree(team, local);
    /* NCCL refuses two ranks on one GPU and wants equal chunks; otherwise weave's reduce-scatter. */
    int shared = team->info.ranks_on_device > 1, any_shared = 0, all_shared[WEAVE_MAX_WORLD];
    if (rc == WEAVE_SUCCESS && p->strategy == WEAVE_STRATEGY_BASELINE && team->world > 1 && M % team->world == 0 &&
        team->bootstrap->allgather(team->bootstrap, team->rank, &shared, all_shared, sizeof(int)) == WEAVE_SUCCESS) {
      for (int r = 0; r < team->world; ++r) any_shared |= all_shared[r];
      if (!any_shared && weave_nccl_create(team, &p->nccl) != WEAVE_SUCCESS)
        weave_log(WEAVE_LOG_INFO, team, "plan: baseline without NCCL (%s): weave's reduce-scatter instead",
                  weave_get_last_error(team));
    }
    if (rc != WEAVE_SUCCESS) weave_free(team, p->mem);
  }
  if (rc != WEAVE_SUCCESS) {
    weave_lt_destroy(p->lt);
    weave_nccl_destroy(p->nccl);
    free(p);
    return rc;
  }

  weave_fused_params_t *fp = &p->params;
  memset(fp, 0, sizeof(*fp));
  fp->M = M; fp->N = N; fp->K = K;
  fp->dtype = desc->dtype;
  fp->b_layout = desc->b_layout;
  fp->slot_dtype = p->slot_dtype;
  fp->hopper = p->hopper;
  fp->reduce = desc->reduce;
  fp->alpha = desc->alpha;
  weave_team_device_view(team, &fp->team);
  fp->tiling = p->tiling;
  fp->rows_cap = p->rows_cap;
  fp->tiles_cap = p->tiles_cap;
  fp->ctl = (weave_plan_ctl_t *)p->mem;
  fp->tile_flags = (uint32_t *)((char *)p->mem + sizeof(weave_plan_ctl_t));
  fp->data = (char *)p->mem + head;
  fp->gemm_blocks = p->gemm_blocks;
  fp->comm_blocks = p->comm_blocks;
  /* TMA-store epilogue: one store map per owner onto this rank's slot in that owner's heap (the
   * addresses are fixed for the plan's life). Rows of 16-byte multiples, every owner non-empty. */
  if (p->hopper && desc->reduce == WEAVE_REDUCE_DETERMINISTIC && env.tma_epilogue && M >= team->world &&
      ((size_t)N * slot_bytes) % 16 == 0) {
    int ok = 1;
    for (int o = 0; o < team->world && ok; ++o) {
      int rb, rows;
      void *slot = NULL;
      char msg[256] = "no address of the slot in that owner's heap";
      weave_split_rows_of(M, team->world, o, &rb, &rows);
      ok = weave_ptr(team, (char *)fp->data + (size_t)team->rank * p->rows_cap * N * slot_bytes, o, &slot) ==
               WEAVE_SUCCESS &&
           weave_hopper_encode_store_map(&fp->slot_map[o], p->slot_dtype, slot, (uint64_t)N, (uint64_t)rows,
                                         (uint64_t)N * slot_bytes, msg, sizeof(msg)) == WEAVE_SUCCESS;
      if (!ok) weave_log(WEAVE_LOG_WARN, team, "plan: no TMA store map for owner %d (%s): plain stores", o, msg);
    }
    /* This rank's GEMM blocks only: how a tile reaches its owner does not change the protocol, so
     * ranks may differ here. */
    fp->tma_slots = ok;
  }
  snprintf(p->trace_path, sizeof(p->trace_path), "%s", env.trace);
  if ((desc->trace || p->trace_path[0]) && p->strategy == WEAVE_STRATEGY_FUSED) {
    /* One GEMM event per tile of the walk, WAIT + REDUCE per owned tile, and room to spare. */
    p->trace_cap = (unsigned)(weave_total_tiles(&p->tiling) + 2 * p->tiles_cap + 64);
    if (cudaMalloc((void **)&p->trace, sizeof(weave_trace_event_t) * p->trace_cap + 64) != cudaSuccess) {
      cudaGetLastError();
      p->trace = NULL;
      weave_log(WEAVE_LOG_WARN, team, "plan: no device memory for the trace: tracing off");
    } else {
      fp->trace = p->trace;
      fp->trace_count = (unsigned *)(p->trace + p->trace_cap);
      fp->trace_cap = p->trace_cap;
    }
  }
  weave_log(WEAVE_LOG_INFO, team,
            "plan %dx%dx%d %s: strategy %s, %d GEMM + %d comm blocks (budget %d), %zu heap bytes, %s epilogue",
            M, N, K, weave_dtype_name(desc->dtype), weave_strategy_name(p->strategy), p->gemm_blocks, p->comm_blocks,
            p->budget, p->mem_bytes, fp->tma_slots ? "TMA-store" : "register-store");
  *plan_out = p;
  return WEAVE_SUCCESS;
}

/* Pageable host memory (malloc) reaches the GPU only where the device reads it directly (HMM/ATS);
 * device, managed and pinned host memory always do. */
static int device_can_reach(const weave_gemm_rs_plan_t p, const void *ptr) {
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return p->pageable_access;
  }
  return a.type != cudaMemoryTypeUnregistered || p->pageable_access;
}

static int aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

weave_result_t weave_gemm_rs_execute(weave_gemm_rs_plan_t p, const void *A, const void *B, const void *bias,
                                     void *C_out, weave_stream_t stream) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: plan is NULL");
  weave_team_t team = p->team;
  int row_begin, rows;
  weave_split_rows_of(p->M, team->world, team->rank, &row_begin, &rows);
  /* A rank that owns no row (M < world) still computes and pushes its partials; it receives nothing,
   * so its C_out may be NULL. */
  if (!A || !B || (!C_out && rows > 0))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: A %p, B %p, C_out %p must be non-NULL",
                      A, B, C_out);
  if (p->desc.has_bias && !bias)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: the plan has a bias but bias is NULL");
  if (!p->desc.has_bias && bias)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: bias given to a plan without bias");
  const void *ptrs[4] = {A, B, bias, C_out};
  static const char *const names[4] = {"A", "B", "bias", "C_out"};
  for (int i = 0; i < 4; ++i)
    if (ptrs[i] && !device_can_reach(p, ptrs[i]))
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "weave_gemm_rs_execute: %s %p is host memory this GPU cannot read (pass device memory)", names[i],
                        ptrs[i]);
  size_t e = weave_dtype_size(p->desc.dtype);
  if (((uintptr_t)A | (uintptr_t)B | (uintptr_t)C_out | (uintptr_t)bias) % e)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: pointers must be %zu-byte aligned", e);
  cudaSetDevice(team->info.device);

  weave_fused_params_t fp = p->params;
  fp.A = A; fp.B = B; fp.bias = bias; fp.C_out = C_out;
  fp.epoch = ++p->epoch;
  size_t rowb_a = (size_t)p->K * e, rowb_b = (p->desc.b_layout == WEAVE_LAYOUT_ROW ? (size_t)p->N : (size_t)p->K) * e;
  fp.out_vec = aligned16(C_out);
  fp.vec_ok = aligned16(A) && aligned16(B) && rowb_a % 16 == 0 && rowb_b % 16 == 0;

  int err = 0;
  if (p->hopper) {
    char msg[256];
    if (!aligned16(A) || !aligned16(B))
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "weave_gemm_rs_execute: this plan runs the TMA GEMM: A %p and B %p must be 16-byte aligned", A, B);
    int rc = weave_hopper_gemm_make_params(p->M, p->N, p->K, p->desc.dtype, p->desc.b_layout, A, B, &fp.hg, msg,
                                           sizeof(msg));
    if (rc != WEAVE_SUCCESS) return weave_fail(team, (weave_result_t)rc, "weave_gemm_rs_execute: %s", msg);
  }
  /* One rank owns every row, so its reduce-scatter is a copy: baseline and bulk write C_out straight
   * from their GEMM; only the fused kernel runs its protocol (to measure its overhead against the
   * same GEMM alone). */
  const int direct = team->world == 1 && p->strategy != WEAVE_STRATEGY_FUSED;
  if (p->nccl || (direct && p->strategy == WEAVE_STRATEGY_BASELINE)) {
    /* cuBLASLt (alpha) -> ncclReduceScatter (distinct GPUs; none for one rank) -> bias on our rows */
    if (weave_lt_run(p->lt, p->desc.alpha, A, B, p->nccl ? fp.data : C_out, stream) != WEAVE_SUCCESS)
      return weave_fail(team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: cublasLtMatmul failed");
    if (p->nccl &&
        weave_nccl_reduce_scatter(p->nccl, fp.data, C_out, (size_t)rows * p->N, p->desc.dtype, stream) != WEAVE_SUCCESS)
      return weave_fail(team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: ncclReduceScatter failed");
    err = bias ? weave_launch_add_bias(C_out, rows, p->N, p->desc.dtype, bias, stream) : 0;
    return err ? cuda_fail(team, err, "weave_gemm_rs_execute: bias") : WEAVE_SUCCESS;
  }
  if (direct) { /* bulk: weave's GEMM with alpha and bias */
    char msg[256] = "";
    weave_result_t rc = weave_gemm_dispatch(p->M, p->N, p->K, p->desc.dtype, p->desc.b_layout, p->desc.alpha, A, B,
                                            bias, C_out, p->desc.dtype, p->gemm_blocks, stream, msg, sizeof(msg));
    return rc == WEAVE_SUCCESS ? rc : weave_fail(team, rc, "weave_gemm_rs_execute: %s", msg);
  }
  if (p->trace && cudaMemsetAsync(fp.trace_count, 0, sizeof(unsigned), (cudaStream_t)stream) != cudaSuccess)
    return weave_fail(team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: clearing the trace counter");
  switch (p->strategy) {
    case WEAVE_STRATEGY_FUSED:
      err = weave_launch_fused(&fp, stream);
      break;
    case WEAVE_STRATEGY_BULK:
    case WEAVE_STRATEGY_BASELINE:
      err = weave_launch_wait_done(&fp, stream);
      if (!err) {
        char msg[256] = "";
        if (p->strategy == WEAVE_STRATEGY_BULK) {
          weave_result_t rc = weave_gemm_dispatch(p->M, p->N, p->K, p->desc.dtype, p->desc.b_layout, 1.0f, A, B, NULL,
                                                  fp.data, p->slot_dtype, p->gemm_blocks, stream, msg, sizeof(msg));
          if (rc != WEAVE_SUCCESS) return weave_fail(team, rc, "weave_gemm_rs_execute: %s", msg);
        } else if (weave_lt_run(p->lt, 1.0f, A, B, fp.data, stream) != WEAVE_SUCCESS)
          return weave_fail(team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: cublasLtMatmul failed");
      }
      if (!err) err = weave_launch_ready_barrier(&fp, stream);
      if (!err) err = weave_launch_reduce_scatter(&fp, p->comm_blocks, stream);
      break;
    default:
      return weave_fail(team, WEAVE_ERROR_INTERNAL, "weave_gemm_rs_execute: strategy %d", (int)p->strategy);
  }
  if (err) return cuda_fail(team, err, "weave_gemm_rs_execute: kernel launch");
  return WEAVE_SUCCESS;
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
  info->tiles_owned = weave_owner_tiles(&p->tiling, p->team->rank);
  info->gemm_blocks = p->gemm_blocks;
  info->comm_blocks = p->comm_blocks;
  info->heap_bytes = p->mem_bytes;
  size_t slot = weave_dtype_size(p->slot_dtype);
  info->bytes_sent = weave_plan_bytes_sent(p->M, p->N, p->team->world, p->team->rank, slot);
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm_rs_trace_fetch(weave_gemm_rs_plan_t p, weave_stream_t stream, void *events,
                                         size_t capacity, size_t *count) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_trace_fetch: plan is NULL");
  if (!count || (!events && capacity))
    return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_trace_fetch: count/events is NULL");
  if (!p->trace)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "weave_gemm_rs_trace_fetch: the plan records no trace (desc.trace, WEAVE_TRACE; fused only)");
  unsigned n = 0;
  if (cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess ||
      cudaMemcpy(&n, p->params.trace_count, sizeof(n), cudaMemcpyDeviceToHost) != cudaSuccess)
    return weave_fail(p->team, WEAVE_ERROR_CUDA, "weave_gemm_rs_trace_fetch: copy failed");
  size_t take = n < p->trace_cap ? n : p->trace_cap;
  if (take > capacity) take = capacity;
  if (take && cudaMemcpy(events, p->trace, take * sizeof(weave_trace_event_t), cudaMemcpyDeviceToHost) != cudaSuccess)
    return weave_fail(p->team, WEAVE_ERROR_CUDA, "weave_gemm_rs_trace_fetch: copy failed");
  *count = n;
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm_rs_plan_destroy(weave_gemm_rs_plan_t p) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_plan_destroy: plan is NULL");
  if (p->trace && p->trace_path[0] && p->epoch > 0) { /* WEAVE_TRACE: this rank's last call */
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
  if (p->trace) cudaFree(p->trace);
  weave_result_t rc = weave_free(p->team, p->mem); /* synchronizes the device and all ranks first */
  weave_lt_destroy(p->lt);
  weave_nccl_destroy(p->nccl);
  free(p);
  return rc;
}
