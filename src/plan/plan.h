/*
 * The GEMM + ReduceScatter plan object, shared by its two halves: plan_create.c (argument checks,
 * strategy and block split, the symmetric memory the plan owns, the baselines; info and destroy) and
 * plan_execute.c (an epoch per call, counted on the device; see gemm_rs.cu for the protocol; the trace
 * of the last call).
 *
 * Memory per rank (one weave_malloc):
 *   control words (done/ready/arrive)                  256 + 256 + 128 bytes
 *   tile flags    deterministic: world x tiles_cap u32; atomic: tiles_cap u32; bulk: none
 *   data          deterministic: world slots of ceil(M/world) x N (slot dtype)  ~ M x N
 *                 atomic:        one fp32 accumulator of ceil(M/world) x N      ~ M x N / world
 *                 bulk/baseline: the local partial M x N (slot dtype / dtype)
 */
#ifndef WEAVE_GEMM_RS_PLAN_H
#define WEAVE_GEMM_RS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "plan/lt.h"
#include "runtime/nccl_rt.h"
#include "kernels/kernels.h"
#include "runtime/arg_checks.h"
#include "runtime/internal.h"
#include "weave.h"

struct weave_gemm_rs_plan {
  weave_team_t team;
  weave_dtype_t out_dtype;  /* of C and bias: desc.out_dtype resolved (dtype, or bf16/fp16 for fp8) */
  weave_dtype_t slot_dtype; /* of the partials: out_dtype, or fp32 (fp32_slots, atomic accumulator) */
  int hopper;               /* GEMM role: TMA + wgmma */
  int M, N, K;
  weave_gemm_rs_desc_t desc;
  weave_strategy_t strategy;
  weave_tiling_t tiling;
  int rows_cap, tiles_cap;
  int gemm_blocks, comm_blocks, budget;
  void *mem; /* the plan's heap allocation */
  size_t mem_bytes;
  size_t head_bytes;           /* control words + tile flags at the start of mem (zeroed at creation); data follows */
  weave_fused_params_t params; /* everything but the per-call pointers */
  void *gemm_ws;               /* bulk: the stream-K workspace of its GEMM (NULL: none needed) */
  size_t gemm_ws_bytes;
  weave_lt_t *lt;             /* baseline GEMM */
  weave_nccl_t *nccl;         /* baseline reduce-scatter when every rank has a GPU of its own and M % world == 0 */
  weave_trace_event_t *trace; /* device: events of the last traced call, then the counter */
  unsigned trace_cap;
  char trace_path[512];     /* WEAVE_TRACE */
  unsigned long calls;      /* executes enqueued (the trace file is written at destroy if any) */
  int pageable_access;      /* the device reads pageable host memory (cudaDevAttrPageableMemoryAccess) */
  const void *reachable[6]; /* A, B, bias, C_out, scale_a, scale_b last found device-readable
                             * (execute_check_args) */
  weave_choice_t chosen_by; /* how the strategy was chosen (AUTO: plan/autotune.h) */
  double choose_ms;
  char why[320];
  int delay_us;            /* WEAVE_TEST_DELAY for this plan's strategy: each call starts with that delay */
  void *lockstep_ev;       /* cudaEvent_t when ranks share this GPU: each call waits for itself
                      * (plan/lockstep.h); NULL otherwise */
  struct weave_hier *hier; /* past one node (plan/hier.h): the plan is its band plans and rail step */
};

/* A host plan object with team, shape, desc (in this version's layout), out_dtype and
 * pageable_access filled, the rest zero; NULL (the team's last error says so) when out of memory. */
weave_gemm_rs_plan_t weave_gemm_rs_plan_new(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc);

/* Argument checks that need no device (the CPU tests call it directly); messages name
 * weave_gemm_rs_plan_create. */
weave_result_t weave_gemm_rs_check_args(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc);
/* The caller's desc in this version's layout: a 0.2 desc (struct_size WEAVE_GEMM_RS_DESC_SIZE_0_2)
 * gets the defaults of the later fields. INVALID_ARGUMENT for NULL or another struct_size. */
weave_result_t weave_gemm_rs_desc_read(weave_team_t team, const weave_gemm_rs_desc_t *desc, weave_gemm_rs_desc_t *out);

/* "<what>: <CUDA error string>" as the team's last error; returns WEAVE_ERROR_CUDA. */
static inline weave_result_t weave_plan_cuda_fail(weave_team_t team, int err, const char *what) {
  return weave_fail(team, WEAVE_ERROR_CUDA, "%s: %s", what, weave_cuda_error_string(err));
}

#endif
