/*
 * Executing a GEMM + ReduceScatter plan: the per-call checks, then one of three paths, and the trace
 * of the last fused call (see plan.h for the object; gemm_rs.cu for the protocol).
 *
 *   cuBLASLt path   baseline with NCCL, or baseline on one rank: cuBLASLt (alpha) -> ncclReduceScatter
 *                   (none for one rank) -> bias on this rank's rows
 *   direct bulk     bulk on one rank: weave's GEMM with alpha and bias straight into C_out
 *   protocol        fused: one kernel; bulk and baseline without NCCL: wait for the peers, the GEMM
 *                   into the partial, ready barrier, weave's reduce-scatter
 *
 * Every call is a new epoch of the plan's flags, so nothing is reset between calls. The epoch is
 * counted on the device (weave_plan_ctl_t), and nothing here allocates or, on ranks with a GPU of
 * their own, waits for the device: a call can be captured in a CUDA graph and replayed (see
 * weave.h). Ranks sharing a GPU wait for each call (plan/lockstep.h).
 */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "plan/hier.h"
#include "plan/lockstep.h"
#include "plan/plan.h"

static int aligned16(const void *ptr) { return ((uintptr_t)ptr & 15u) == 0; }

/* Pageable host memory (malloc) reaches the GPU only where the device reads it directly (HMM/ATS);
 * device, managed and pinned host memory always do. Argument i's last pointer that passed is kept,
 * so a loop over the same buffers asks the driver nothing per call. */
static int device_can_reach(weave_gemm_rs_plan_t p, int i, const void *ptr) {
  if (p->pageable_access || ptr == p->reachable[i]) return 1;
  if (!weave_device_reads(p->team->info.device, ptr)) return 0;
  p->reachable[i] = ptr;
  return 1;
}

/* fn: the public call (weave_gemm_rs_execute or _scaled), named in every message. */
static weave_result_t execute_check_args(weave_gemm_rs_plan_t p, const char *fn, const void *A, const void *B,
                                         const float *scale_a, const float *scale_b, const void *bias, void *C_out) {
  weave_team_t team = p->team;
  int row_begin, rows;
  weave_split_rows_of(p->M, team->world, team->rank, &row_begin, &rows);
  /* A rank that owns no row (M < world) still computes and pushes its partials; it receives nothing,
   * so its C_out may be NULL. */
  if (!A || !B || (!C_out && rows > 0))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: A %p, B %p, C_out %p must be non-NULL", fn, A, B, C_out);
  if (p->desc.has_bias && !bias)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: the plan has a bias but bias is NULL", fn);
  if (!p->desc.has_bias && bias)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: bias given to a plan without bias", fn);
  if (p->desc.scale_mode != WEAVE_SCALE_NONE &&
      (!scale_a || !scale_b || ((uintptr_t)scale_a & 3) || ((uintptr_t)scale_b & 3)))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: the plan's scale_mode %d needs 4-byte aligned device pointers scale_a and scale_b (got %p, "
                      "%p)",
                      fn, (int)p->desc.scale_mode, (const void *)scale_a, (const void *)scale_b);
  if (p->desc.scale_mode == WEAVE_SCALE_NONE && (scale_a || scale_b))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: scale_a / scale_b given to a plan without scales (scale_mode NONE)", fn);
  const void *ptrs[6] = {A, B, bias, C_out, scale_a, scale_b};
  static const char *const names[6] = {"A", "B", "bias", "C_out", "scale_a", "scale_b"};
  for (int i = 0; i < 6; ++i)
    if (ptrs[i] && !device_can_reach(p, i, ptrs[i]))
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: %s %p is host memory this GPU cannot read (pass device memory)", fn, names[i], ptrs[i]);
  size_t e = weave_dtype_size(p->desc.dtype), eo = weave_dtype_size(p->out_dtype);
  if (((uintptr_t)A | (uintptr_t)B) % e || ((uintptr_t)C_out | (uintptr_t)bias) % eo)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: A and B must be %zu-byte, C_out and bias %zu-byte aligned", fn, e, eo);
  /* fp8 runs only on TMA GEMMs (weave's Hopper role, cuBLASLt fp8) in every strategy: checked here,
   * before anything is enqueued, so that a refusal never leaves the peers waiting mid-protocol */
  if (weave_dtype_is_fp8(p->desc.dtype) && (((uintptr_t)A | (uintptr_t)B) & 15))
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: fp8 A %p and B %p must be 16-byte aligned (TMA)", fn, A,
                      B);
  return WEAVE_SUCCESS;
}

/* cuBLASLt (alpha) -> ncclReduceScatter (distinct GPUs; none for one rank) -> bias on our rows. */
static weave_result_t execute_lt(weave_gemm_rs_plan_t p, const char *fn, const weave_fused_params_t *fp, const void *A,
                                 const void *B, const void *bias, void *C_out, weave_stream_t stream) {
  weave_team_t team = p->team;
  int rb, rows;
  weave_split_rows_of(p->M, team->world, team->rank, &rb, &rows);
  if (weave_lt_run_scaled(p->lt, p->desc.alpha, A, B, fp->hg.scales.a, fp->hg.scales.b, p->nccl ? fp->data : C_out,
                          stream) != WEAVE_SUCCESS)
    return weave_fail(team, WEAVE_ERROR_CUDA, "%s: cublasLtMatmul failed", fn);
  if (p->nccl &&
      weave_nccl_reduce_scatter(p->nccl, fp->data, C_out, (size_t)rows * p->N, p->out_dtype, stream) != WEAVE_SUCCESS)
    return weave_fail(team, WEAVE_ERROR_CUDA, "%s: ncclReduceScatter failed", fn);
  int err = bias ? weave_launch_add_bias(C_out, rows, p->N, p->out_dtype, bias, stream) : 0;
  return err ? weave_fail(team, WEAVE_ERROR_CUDA, "%s: bias: %s", fn, weave_cuda_error_string(err)) : WEAVE_SUCCESS;
}

/* The bulk strategy's GEMM: its workspace, blocks and this call's scales. */
static weave_gemm_call_t bulk_gemm(weave_gemm_rs_plan_t p, const weave_fused_params_t *fp, const void *A, const void *B,
                                   float alpha, const void *bias, void *C, weave_dtype_t out_dtype) {
  const weave_gemm_call_t c = {.M = p->M,
                               .N = p->N,
                               .K = p->K,
                               .dtype = p->desc.dtype,
                               .b_layout = p->desc.b_layout,
                               .out_dtype = out_dtype,
                               .alpha = alpha,
                               .A = A,
                               .B = B,
                               .bias = bias,
                               .C = C,
                               .scales = fp->hg.scales,
                               .fp8_fast_accum = fp->fp8_fast_accum,
                               .num_blocks = p->gemm_blocks,
                               .ws = p->gemm_ws,
                               .ws_bytes = p->gemm_ws_bytes};
  return c;
}

/* Bulk on one rank: weave's GEMM with alpha, scales and bias. */
static weave_result_t execute_direct_bulk(weave_gemm_rs_plan_t p, const char *fn, const weave_fused_params_t *fp,
                                          const void *A, const void *B, const void *bias, void *C_out,
                                          weave_stream_t stream) {
  char msg[256] = "";
  const weave_gemm_call_t c = bulk_gemm(p, fp, A, B, p->desc.alpha, bias, C_out, p->out_dtype);
  weave_result_t rc = weave_gemm_dispatch(&c, stream, msg, sizeof(msg));
  return rc == WEAVE_SUCCESS ? rc : weave_fail(p->team, rc, "%s: %s", fn, msg);
}

/* weave's reduce-scatter of a partial that is written: publish it (ready) and wait for every peer's,
 * then reduce this rank's rows into fp->C_out. */
static int launch_publish_reduce(const weave_fused_params_t *fp, int comm_blocks, weave_stream_t stream) {
  const int err = weave_launch_ready_barrier(fp, stream);
  return err ? err : weave_launch_reduce_scatter(fp, comm_blocks, stream);
}

/* The fused kernel, or the bulk / baseline pieces around weave's reduce-scatter. */
static weave_result_t execute_protocol(weave_gemm_rs_plan_t p, const char *fn, const weave_fused_params_t *fp,
                                       const void *A, const void *B, weave_stream_t stream) {
  weave_team_t team = p->team;
  int err = 0;
  if (p->trace && cudaMemsetAsync(fp->trace_count, 0, sizeof(unsigned), (cudaStream_t)stream) != cudaSuccess)
    return weave_fail(team, WEAVE_ERROR_CUDA, "%s: clearing the trace counter", fn);
  switch (p->strategy) {
    case WEAVE_STRATEGY_FUSED: err = weave_launch_fused(fp, stream); break;
    case WEAVE_STRATEGY_BULK:
    case WEAVE_STRATEGY_BASELINE:
      err = weave_launch_wait_done(fp, stream);
      if (!err) {
        char msg[256] = "";
        if (p->strategy == WEAVE_STRATEGY_BULK) {
          const weave_gemm_call_t c = bulk_gemm(p, fp, A, B, 1.0f, NULL, fp->data, p->slot_dtype);
          weave_result_t rc = weave_gemm_dispatch(&c, stream, msg, sizeof(msg));
          if (rc != WEAVE_SUCCESS) return weave_fail(team, rc, "%s: %s", fn, msg);
        } else if (weave_lt_run_scaled(p->lt, 1.0f, A, B, fp->hg.scales.a, fp->hg.scales.b, fp->data, stream) !=
                   WEAVE_SUCCESS)
          return weave_fail(team, WEAVE_ERROR_CUDA, "%s: cublasLtMatmul failed", fn);
      }
      if (!err) err = launch_publish_reduce(fp, p->comm_blocks, stream);
      break;
    default: return weave_fail(team, WEAVE_ERROR_INTERNAL, "%s: strategy %d", fn, (int)p->strategy);
  }
  if (err) return weave_fail(team, WEAVE_ERROR_CUDA, "%s: kernel launch: %s", fn, weave_cuda_error_string(err));
  return WEAVE_SUCCESS;
}

static weave_result_t enqueue(weave_gemm_rs_plan_t p, const char *fn, const void *A, const void *B,
                              const float *scale_a, const float *scale_b, const void *bias, void *C_out,
                              weave_stream_t stream) {
  weave_team_t team = p->team;
  WEAVE_CHECK(execute_check_args(p, fn, A, B, scale_a, scale_b, bias, C_out));

  size_t e = weave_dtype_size(p->desc.dtype);
  weave_fused_params_t fp = p->params;
  fp.A = A;
  fp.B = B;
  fp.bias = bias;
  fp.C_out = C_out;
  /* this call's scales (every path reads them from here; make_params below keeps them) */
  const weave_hgemm_scales_t sc = {(int)p->desc.scale_mode, scale_a, scale_b};
  fp.hg.scales = sc;
  p->calls++;
  size_t rowb_a = (size_t)p->K * e, rowb_b = (p->desc.b_layout == WEAVE_LAYOUT_ROW ? (size_t)p->N : (size_t)p->K) * e;
  fp.out_vec = aligned16(C_out);
  fp.vec_ok = aligned16(A) && aligned16(B) && rowb_a % 16 == 0 && rowb_b % 16 == 0;

  if (p->hopper) {
    char msg[256];
    if (!aligned16(A) || !aligned16(B))
      return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT,
                        "%s: this plan runs the TMA GEMM: A %p and B %p must be 16-byte aligned", fn, A, B);
    int rc = weave_hgemm_make_params(p->M, p->N, p->K, p->desc.dtype, p->desc.b_layout, A, B, &fp.hg, msg, sizeof(msg));
    /* 2-CTA clusters sharing A: each CTA loads half of a tile's rows */
    if (rc == WEAVE_SUCCESS && p->tiling.pair_n)
      rc = weave_hgemm_params_share_a(&fp.hg, A, WEAVE_HGEMM_BM, msg, sizeof(msg));
    if (rc != WEAVE_SUCCESS) return weave_fail(team, (weave_result_t)rc, "%s: %s", fn, msg);
    fp.hg.scales = sc;
  }
  /* One rank owns every row, so its reduce-scatter is a copy: baseline and bulk write C_out straight
   * from their GEMM; only the fused kernel runs its protocol (to measure its overhead against the
   * same GEMM alone). */
  const int direct = team->world == 1 && p->strategy != WEAVE_STRATEGY_FUSED;
  if (p->strategy == WEAVE_STRATEGY_BASELINE) {
    /* cuBLASLt's algorithm for this call's pointers (it writes C_out itself on one rank without NCCL,
     * else the partial), picked before anything is enqueued: a refusal after would leave the peers
     * waiting */
    void *C = direct && !p->nccl ? C_out : fp.data;
    if (weave_lt_select(p->lt, A, B, C) != WEAVE_SUCCESS)
      return weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                        "%s: cuBLASLt has no algorithm for A %p, B %p, C %p (%u-byte aligned)", fn, A, B, C,
                        weave_lt_alignment(A, B, C));
  }
  /* WEAVE_TEST_DELAY: this strategy made slower on purpose (the tests of auto's choice) */
  const int delayed = p->delay_us ? weave_launch_delay((unsigned)p->delay_us, stream) : 0;
  if (delayed)
    return weave_fail(team, WEAVE_ERROR_CUDA, "%s: WEAVE_TEST_DELAY: %s", fn, weave_cuda_error_string(delayed));
  if (p->nccl || (direct && p->strategy == WEAVE_STRATEGY_BASELINE))
    return execute_lt(p, fn, &fp, A, B, bias, C_out, stream);
  if (direct) return execute_direct_bulk(p, fn, &fp, A, B, bias, C_out, stream);
  return execute_protocol(p, fn, &fp, A, B, stream);
}

static weave_result_t execute(weave_gemm_rs_plan_t p, const char *fn, const void *A, const void *B,
                              const float *scale_a, const float *scale_b, const void *bias, void *C_out,
                              weave_stream_t stream) {
  const weave_device_scope_t caller = weave_device_enter(p->team->info.device);
  weave_result_t rc;
  if (p->hier) { /* past one node: its band plans and rail step wait for themselves */
    rc = execute_check_args(p, fn, A, B, scale_a, scale_b, bias, C_out);
    if (rc == WEAVE_SUCCESS) rc = weave_hier_enqueue(p, A, B, scale_a, scale_b, bias, C_out, stream);
  } else {
    rc = enqueue(p, fn, A, B, scale_a, scale_b, bias, C_out, stream);
    if (rc == WEAVE_SUCCESS) rc = weave_lockstep_wait(p->team, p->lockstep_ev, fn, stream);
  }
  weave_device_leave(caller);
  return rc;
}

weave_result_t weave_gemm_rs_execute(weave_gemm_rs_plan_t p, const void *A, const void *B, const void *bias,
                                     void *C_out, weave_stream_t stream) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute: plan is NULL");
  WEAVE_CHECK(weave_team_check_live(p->team, "weave_gemm_rs_execute"));
  if (p->desc.scale_mode != WEAVE_SCALE_NONE)
    return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT,
                      "weave_gemm_rs_execute: the plan has scales (scale_mode %d): use weave_gemm_rs_execute_scaled",
                      (int)p->desc.scale_mode);
  return execute(p, "weave_gemm_rs_execute", A, B, NULL, NULL, bias, C_out, stream);
}

weave_result_t weave_gemm_rs_execute_scaled(weave_gemm_rs_plan_t p, const void *A, const void *B, const float *scale_a,
                                            const float *scale_b, const void *bias, void *C_out,
                                            weave_stream_t stream) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_execute_scaled: plan is NULL");
  WEAVE_CHECK(weave_team_check_live(p->team, "weave_gemm_rs_execute_scaled"));
  return execute(p, "weave_gemm_rs_execute_scaled", A, B, scale_a, scale_b, bias, C_out, stream);
}

weave_result_t weave_gemm_rs_trace_fetch(weave_gemm_rs_plan_t p, weave_stream_t stream, void *events, size_t capacity,
                                         size_t *count) {
  if (!p) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_trace_fetch: plan is NULL");
  if (!count || (!events && capacity))
    return weave_fail(p->team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_gemm_rs_trace_fetch: count/events is NULL");
  if (!p->trace)
    return weave_fail(p->team, WEAVE_ERROR_UNSUPPORTED,
                      "weave_gemm_rs_trace_fetch: the plan records no trace (desc.trace, WEAVE_TRACE; fused only)");
  /* the team's device: stream 0 is that device's default stream, as in execute */
  const weave_device_scope_t caller = weave_device_enter(p->team->info.device);
  unsigned n = 0;
  int bad = cudaStreamSynchronize((cudaStream_t)stream) != cudaSuccess ||
            cudaMemcpy(&n, p->params.trace_count, sizeof(n), cudaMemcpyDeviceToHost) != cudaSuccess;
  size_t take = n < p->trace_cap ? n : p->trace_cap;
  if (take > capacity) take = capacity;
  if (!bad && take &&
      cudaMemcpy(events, p->trace, take * sizeof(weave_trace_event_t), cudaMemcpyDeviceToHost) != cudaSuccess)
    bad = 1;
  weave_device_leave(caller);
  if (bad) return weave_fail(p->team, WEAVE_ERROR_CUDA, "weave_gemm_rs_trace_fetch: copy failed");
  *count = n;
  return WEAVE_SUCCESS;
}

/* ---- the reduce-scatter alone (plan/hier.h) ------------------------------------------------------ */
weave_result_t weave_gemm_rs_partial_begin(weave_gemm_rs_plan_t p, weave_stream_t stream, void **partial) {
  if (p->strategy != WEAVE_STRATEGY_BULK || p->team->world < 2)
    return weave_fail(p->team, WEAVE_ERROR_INTERNAL, "weave_gemm_rs_partial_begin: not a bulk plan of several ranks");
  const int err = weave_launch_wait_done(&p->params, stream);
  if (err) return weave_fail(p->team, WEAVE_ERROR_CUDA, "rail step: kernel launch: %s", weave_cuda_error_string(err));
  *partial = p->params.data;
  return WEAVE_SUCCESS;
}

weave_result_t weave_gemm_rs_partial_end(weave_gemm_rs_plan_t p, const void *bias, void *C_out, weave_stream_t stream) {
  weave_fused_params_t fp = p->params;
  fp.bias = bias;
  fp.C_out = C_out;
  fp.out_vec = aligned16(C_out);
  p->calls++;
  const int err = launch_publish_reduce(&fp, p->comm_blocks, stream);
  if (err) return weave_fail(p->team, WEAVE_ERROR_CUDA, "rail step: kernel launch: %s", weave_cuda_error_string(err));
  return weave_lockstep_wait(p->team, p->lockstep_ev, "weave_gemm_rs_execute (rail step)", stream);
}
