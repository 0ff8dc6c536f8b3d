/*
 * GPU tests of GEMM + ReduceScatter, with 1, 2, 4 and 8 ranks sharing the visible GPU(s):
 *   - every strategy x reduction x slot dtype x dtype x B layout on a shape with tails
 *     (M=1003, N=1001/1000, K_local=300/304) against the fp64 CPU reference, alpha and bias included;
 *   - 8192 x 8192 x 1024 (per rank) against fp64 on sampled row ranges and, every row, against cuBLASLt
 *     over the gathered K;
 *   - 1000 back-to-back calls on one plan, every result checked, no reset;
 *   - calls whose inputs change in place between them, every result checked;
 *   - M = 1 and M = world - 1: ranks that own no row (C_out NULL there), every strategy;
 *   - deterministic mode bitwise identical over 20 runs;
 *   - a rank that never calls -> WEAVE_ERROR_TIMEOUT naming the tile and ranks, then a new plan works;
 *   - a rank that aborts the team instead of calling (weave_team_abort) -> the others' calls end
 *     within 10 s of a 60 s timeout, weave_team_sync returns WEAVE_ERROR_ABORTED naming it, and every
 *     rank's execute and barrier then refuse with WEAVE_ERROR_ABORTED;
 *   - fp8 e4m3 inputs (B [N, K]) with every scale mode (none, per tensor, per row; each rank its own
 *     scales), bf16 and fp16 output, every strategy x reduction x slot dtype, against fp64 of the
 *     dequantized inputs within the stated bound: weave_tolerance of the output type and K_total
 *     (fp32 accumulation, one rounding of each partial and of the output) times the largest
 *     |alpha scale_a scale_b|, plus, per element, the Hopper fp8 accumulation bound of each rank's
 *     partial (weave_ref_gemm_rs_scaled: 13 fraction bits kept at every k32 step of the tensor cores'
 *     accumulator, over 128 of K with fp32 accumulation, the default, or over all of K with fast
 *     accumulation; the fp8 baseline's cuBLASLt accumulates alike).
 * Outputs are poisoned (NaN) before every call; inputs are fresh random numbers per case.
 * Usage: gpu_gemm_rs [--world N] [--quick] [--tiny] [--fp8-only]   Exit 0 pass, 1 fail, 77 no device.
 * Under a launcher (scripts/launch.sh -n N --mps, mpirun, torchrun) each process is one rank and the
 * cases of world N run; every process builds every rank's inputs from the same seed.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "common/dtype.h"
#include "plan/plan_model.h"
#include "kernels/kernels.h"
#include "reference.h"
#include "weave.h"
#include "weave_trace.h"

#define MAX_DESCS 8

typedef struct {
  const char *name;
  int M, N, K;         /* K per rank */
  weave_dtype_t dtype; /* A and B */
  weave_dtype_t out;   /* C and bias (dtype, or bf16 / fp16 for fp8) */
  weave_scale_mode_t scale_mode;
  weave_fp8_accum_t fp8_accum;
  float *sa[WEAVE_MAX_WORLD], *sb[WEAVE_MAX_WORLD]; /* per rank: 1 each (TENSOR) or [M] and [N] (ROW) */
  weave_layout_t layout;
  int has_bias;
  float alpha;
  weave_gemm_rs_desc_t descs[MAX_DESCS];
  int ndescs;
  int calls;        /* executes per plan, each checked */
  int bitwise;      /* also require bitwise equality across calls */
  int sample;       /* fp64 on 3 ranges of 4 rows per rank, every row against cuBLASLt */
  int skip_rank;    /* this rank never executes: the others must time out */
  int abort_rank;   /* this rank aborts the team instead of executing: the others must stop at once */
  int fresh_inputs; /* new random A and B (in the same device buffers) before every call after the first */
  int no_lt;        /* cuBLASLt has no algorithm for this shape: baseline plans must be refused
                      * (UNSUPPORTED), auto plans must run bulk */
  int offset;       /* bytes past a 256-byte boundary for A, B, C_out and bias (views into larger buffers) */
  uint64_t seed;
  /* host data */
  void *A[WEAVE_MAX_WORLD], *B[WEAVE_MAX_WORLD], *bias;
  pthread_mutex_t mu;
  int failures;
  long checks;
} test_case_t;

static void fail(test_case_t *c, int rank, const char *what, const char *detail) {
  pthread_mutex_lock(&c->mu);
  c->failures++;
  fprintf(stderr, "FAIL [%s] rank %d: %s%s%s\n", c->name, rank, what, detail ? ": " : "", detail ? detail : "");
  pthread_mutex_unlock(&c->mu);
}

static void counted(test_case_t *c, long n) {
  pthread_mutex_lock(&c->mu);
  c->checks += n;
  pthread_mutex_unlock(&c->mu);
}

static const char *desc_name(const weave_gemm_rs_desc_t *d, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s/slot=%s/%s", weave_strategy_name(d->strategy),
           d->reduce == WEAVE_REDUCE_ATOMIC ? "atomic" : "det",
           d->fp32_slots ? "fp32" : weave_dtype_name(weave_dtype_out(d->dtype, d->out_dtype)),
           d->tile_order == WEAVE_ORDER_OWN_FIRST ? "own-first" : "own-last");
  return buf;
}

/* Row ranges of this rank that are checked. */
static int check_ranges(const test_case_t *c, int rows, int begin[3], int count[3]) {
  if (!c->sample || rows <= 12) {
    begin[0] = 0;
    count[0] = rows;
    return 1;
  }
  begin[0] = 0;
  count[0] = 4;
  begin[1] = rows / 2;
  count[1] = 4;
  begin[2] = rows - 4;
  count[2] = 4;
  return 3;
}

/* Inputs of call `call` (> 0) of a fresh-inputs case: every rank draws every rank's (for the
 * reference) into its own host copies, and uploads its own into its device buffers in place. */
static void fresh_inputs(const test_case_t *c, int r, int world, int call, void **As, void **Bs, void *dA, void *dB) {
  const size_t e = weave_dtype_size(c->dtype);
  for (int s = 0; s < world; ++s) {
    if (!As[s]) As[s] = malloc((size_t)c->M * c->K * e);
    if (!Bs[s]) Bs[s] = malloc((size_t)c->K * c->N * e);
    const uint64_t seed = c->seed + 0x9e3779b97f4a7c15ull * (uint64_t)call + 2 * (uint64_t)s;
    weave_fill_random(c->dtype, As[s], (size_t)c->M * c->K, seed);
    weave_fill_random(c->dtype, Bs[s], (size_t)c->K * c->N, seed + 1);
  }
  harness_upload(dA, As[r], (size_t)c->M * c->K * e);
  harness_upload(dB, Bs[r], (size_t)c->K * c->N * e);
}

/* The fused split the cost model gives for this plan's budget, with the owner tiles counted here
 * (the most tiles any owner has: ceil(rows_o / tile_m) x ceil(N / tile_n)) -- not taken from the
 * plan, so a plan that feeds the model another count (all tiles, say) fails. */
static int expected_comm_blocks(const test_case_t *c, int world, weave_dtype_t out, weave_dtype_t slot,
                                const weave_gemm_rs_info_t *info, int budget) {
  int dev = 0, sms = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, dev);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev);
  int hm, hn;
  weave_kernel_tile_shape(1, &hm, &hn);
  const int hopper = info->tile_m == hm && info->tile_n == hn;
  const int per_sm = weave_kernel_blocks_per_sm(out, hopper, 1, NULL);
  weave_split_inputs_t in;
  weave_split_inputs_from_device(sms, clock_khz * 1e3, 2.0 * mem_khz * 1e3 * bus_bits / 8.0, c->dtype, per_sm, budget,
                                 &in);
  int most = 0;
  for (int o = 0; o < world; ++o) {
    int b, rows;
    weave_row_split(c->M, world, o, &b, &rows);
    const int t = (rows + info->tile_m - 1) / info->tile_m * ((c->N + info->tile_n - 1) / info->tile_n);
    if (t > most) most = t;
  }
  return weave_split_comm_blocks(
      &in, weave_plan_gemm_flops(c->M, c->N, c->K, world),
      weave_plan_comm_bytes(c->M, c->N, world, weave_dtype_size(slot), weave_dtype_size(out)), (double)most);
}

static int g_ranks_per_node; /* --ranks-per-node */

static int rank_fn(harness_rank_t *hr) {
  test_case_t *c = (test_case_t *)hr->user;
  const int r = hr->rank, world = hr->world;
  const size_t ei = weave_dtype_size(c->dtype), e = weave_dtype_size(c->out); /* inputs, outputs */
  const size_t a_elems = (size_t)c->M * c->K, b_elems = (size_t)c->K * c->N;
  const size_t off = (size_t)c->offset;
  unsigned char *baseA = harness_dev_alloc(a_elems * ei + off), *baseB = harness_dev_alloc(b_elems * ei + off);
  unsigned char *base_bias = c->has_bias ? harness_dev_alloc((size_t)c->N * e + off) : NULL;
  void *dA = baseA + off, *dB = baseB + off, *dbias = base_bias ? base_bias + off : NULL;
  harness_upload(dA, c->A[r], a_elems * ei);
  harness_upload(dB, c->B[r], b_elems * ei);
  if (dbias) harness_upload(dbias, c->bias, (size_t)c->N * e);
  /* this rank's scales (fp8) */
  const int scaled = c->scale_mode != WEAVE_SCALE_NONE;
  const size_t na = c->scale_mode == WEAVE_SCALE_ROW ? (size_t)c->M : 1,
               nb = c->scale_mode == WEAVE_SCALE_ROW ? (size_t)c->N : 1;
  float *dsa = NULL, *dsb = NULL;
  if (scaled) {
    dsa = (float *)harness_dev_alloc(na * 4);
    dsb = (float *)harness_dev_alloc(nb * 4);
    harness_upload(dsa, c->sa[r], na * 4);
    harness_upload(dsb, c->sb[r], nb * 4);
  }
  int row_begin, rows;
  weave_row_split(c->M, world, r, &row_begin, &rows);
  unsigned char *baseC = harness_dev_alloc((size_t)rows * c->N * e + off);
  void *dC = baseC + off;
  unsigned char *hC = (unsigned char *)malloc((size_t)rows * c->N * e + 1);
  unsigned char *first = (unsigned char *)malloc((size_t)rows * c->N * e + 1);

  /* fp64 reference of the checked rows */
  int rb[3], rc_[3];
  int nr = check_ranges(c, rows, rb, rc_);
  double *ref[3];
  const void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  void *myA[WEAVE_MAX_WORLD] = {NULL}, *myB[WEAVE_MAX_WORLD] = {NULL}; /* fresh inputs: this rank's copies */
  for (int s = 0; s < world; ++s) {
    As[s] = c->A[s];
    Bs[s] = c->B[s];
  }
  const int fp8 = c->dtype == WEAVE_FP8_E4M3;
  double *bound[3] = {NULL, NULL, NULL}; /* fp8: the accumulation bound per element */
  for (int i = 0; i < nr; ++i) {
    ref[i] = (double *)malloc(sizeof(double) * (size_t)rc_[i] * c->N + 1);
    if (fp8) {
      bound[i] = (double *)malloc(sizeof(double) * (size_t)rc_[i] * c->N + 1);
      weave_ref_gemm_rs_scaled(
          c->M, c->N, c->K, world, c->dtype, c->out, c->layout, c->alpha, c->scale_mode,
          WEAVE_REF_FP8_RANDOM_SIGNS | (c->fp8_accum == WEAVE_FP8_ACCUM_FAST ? WEAVE_REF_FP8_FAST : 0),
          (const float *const *)c->sa, (const float *const *)c->sb, As, Bs, c->has_bias ? c->bias : NULL,
          row_begin + rb[i], rc_[i], ref[i], bound[i]);
    } else {
      weave_ref_gemm_rs(c->M, c->N, c->K, world, c->dtype, c->layout, c->alpha, As, Bs, c->has_bias ? c->bias : NULL,
                        row_begin + rb[i], rc_[i], ref[i]);
    }
  }
  /* |C| and its rounding grow with alpha and the scales: the largest |alpha sa sb| of any rank */
  double smax = fabs((double)c->alpha);
  if (scaled) {
    smax = 0;
    for (int s = 0; s < world; ++s)
      for (size_t i = 0; i < na; ++i)
        for (size_t j = 0; j < nb; ++j) smax = fmax(smax, fabs((double)c->alpha * c->sa[s][i] * c->sb[s][j]));
  }
  double atol, rtol;
  weave_tolerance_scaled(c->out, c->K * world, smax, &atol, &rtol);
  /* Sampled shapes: every row is checked too, against cuBLASLt over the gathered K. */
  double *ref_all = NULL;
  if (c->sample) {
    ref_all = harness_ref_rows_lt(c->N, c->K, world, c->dtype, c->layout, c->alpha, As, Bs,
                                  c->has_bias ? c->bias : NULL, row_begin, rows);
    if (!ref_all) fail(c, r, "reference", "cuBLASLt over the gathered K could not run");
  }

  for (int di = 0; di < c->ndescs; ++di) {
    weave_gemm_rs_desc_t d = c->descs[di];
    char dn[128], msg[512];
    desc_name(&d, dn, sizeof(dn));
    weave_gemm_rs_plan_t plan;
    weave_result_t rc = weave_gemm_rs_plan_create(hr->team, c->M, c->N, c->K, &d, &plan);
    if (c->no_lt && d.strategy == WEAVE_STRATEGY_BASELINE) {
      if (rc != WEAVE_ERROR_UNSUPPORTED)
        fail(c, r, dn, "the baseline plan was not refused with WEAVE_ERROR_UNSUPPORTED");
      if (rc == WEAVE_SUCCESS) weave_gemm_rs_plan_destroy(plan);
      counted(c, 1);
      continue;
    }
    if (rc != WEAVE_SUCCESS) {
      fail(c, r, dn, weave_get_last_error(hr->team));
      continue;
    }
    weave_gemm_rs_info_t info;
    weave_gemm_rs_plan_info(plan, &info);
    if (c->no_lt && d.strategy == WEAVE_STRATEGY_AUTO && info.strategy == WEAVE_STRATEGY_BASELINE)
      fail(c, r, dn, "auto chose the baseline where cuBLASLt has no algorithm");
    if (d.strategy == WEAVE_STRATEGY_AUTO && (info.strategy == WEAVE_STRATEGY_AUTO || !info.why[0]))
      fail(c, r, dn, "auto's plan does not say what it chose and why");
    if (info.row_begin != row_begin || info.rows != rows) fail(c, r, dn, "plan info rows differ from weave_row_split");
    /* past one node (--ranks-per-node) the plan is band plans inside each node and a rail step: its
     * split and trace are its band plans' (not counted here) */
    const int hier = strstr(info.why, " nodes x ") != NULL;
    if (g_ranks_per_node && world > g_ranks_per_node && world % g_ranks_per_node == 0 && !hier)
      fail(c, r, dn, "not a plan past one node");
    if (d.strategy == WEAVE_STRATEGY_FUSED && d.gemm_blocks == 0 && !hier) { /* auto's split may be measured */
      /* what the kernels write (fp8 inputs: bf16 or fp16) and what travels */
      const weave_dtype_t out = weave_dtype_out(d.dtype, d.out_dtype);
      const weave_dtype_t slot = d.reduce == WEAVE_REDUCE_ATOMIC || d.fp32_slots ? WEAVE_FP32 : out;
      /* where 2-CTA clusters may pair the blocks (WEAVE_HGEMM_CLUSTER 0 or 3) the plan rounds both counts
       * to even: an odd count of the model's up, and an odd budget leaves one block out */
      const char *knob = getenv("WEAVE_HGEMM_CLUSTER");
      const int may_pair = !knob || atoi(knob) == 0 || atoi(knob) == 3;
      const int sum = info.gemm_blocks + info.comm_blocks;
      int want = expected_comm_blocks(c, world, out, slot, &info, sum), ok = info.comm_blocks == want;
      for (int extra = 0; extra <= 1 && may_pair && !ok; ++extra) {
        const int w = expected_comm_blocks(c, world, out, slot, &info, sum + extra);
        ok = info.comm_blocks == w + (w & 1);
      }
      if (!ok) {
        snprintf(msg, sizeof(msg),
                 "the cost model gives %d communication blocks (this rank owns %d tiles), the plan has %d", want,
                 info.tiles_owned, info.comm_blocks);
        fail(c, r, dn, msg);
      }
    }
    /* 2-CTA clusters sharing A: 16-bit fused plans on the Hopper role pair tile columns where they pair
     * up and both block counts are even, unless WEAVE_HGEMM_CLUSTER says 1 or 2 (an H100 or H200 holds
     * every rank's clusters) */
    if (d.strategy == WEAVE_STRATEGY_FUSED && !hier && (d.dtype == WEAVE_BF16 || d.dtype == WEAVE_FP16) &&
        d.reduce != WEAVE_REDUCE_ATOMIC) {
      int hm, hn;
      weave_kernel_tile_shape(1, &hm, &hn);
      const char *knob = getenv("WEAVE_HGEMM_CLUSTER");
      const int k = knob ? atoi(knob) : 0;
      const int want = (k == 0 || k == 3) && info.tile_m == hm && info.tile_n == hn &&
                       ((c->N + hn - 1) / hn) % 2 == 0 && info.gemm_blocks >= 2 && info.gemm_blocks % 2 == 0 &&
                       info.comm_blocks % 2 == 0;
      if (info.cta_pairs != want) {
        snprintf(msg, sizeof(msg), "cta_pairs %d, want %d (%d + %d blocks, N %d, WEAVE_HGEMM_CLUSTER %d)",
                 info.cta_pairs, want, info.gemm_blocks, info.comm_blocks, c->N, k);
        fail(c, r, dn, msg);
      }
    }

    if (c->skip_rank >= 0) {
      /* Timeout case: one rank never calls; everyone else must get a timeout naming the wait. */
      if (r != c->skip_rank) {
        weave_gemm_rs_execute(plan, dA, dB, dbias, dC, hr->stream);
        rc = weave_team_sync(hr->team, hr->stream);
        const char *m = weave_get_last_error(hr->team);
        if (rc != WEAVE_ERROR_TIMEOUT)
          fail(c, r, "expected WEAVE_ERROR_TIMEOUT", weave_get_error_string(rc));
        else if (!strstr(m, "timed out") || !strstr(m, "rank"))
          fail(c, r, "timeout message lacks detail", m);
        else
          printf("  rank %d got the expected timeout: %s\n", r, m);
        counted(c, 1);
      }
      weave_barrier(hr->team);
      /* The team goes on: a new plan, every rank calls, the result is right. */
      weave_gemm_rs_plan_destroy(plan);
      rc = weave_gemm_rs_plan_create(hr->team, c->M, c->N, c->K, &d, &plan);
      if (rc != WEAVE_SUCCESS) {
        fail(c, r, "re-plan after timeout", weave_get_last_error(hr->team));
        continue;
      }
    }

    if (c->abort_rank >= 0) {
      /* Abort case: the team is of no further use after it (the harness destroys it). */
      char want[64];
      snprintf(want, sizeof(want), "rank %d aborted the team", c->abort_rank);
      if (r == c->abort_rank) {
        if (weave_team_abort(hr->team) != WEAVE_SUCCESS) fail(c, r, "weave_team_abort", weave_get_last_error(hr->team));
      } else {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        weave_gemm_rs_execute(plan, dA, dB, dbias, dC, hr->stream);
        rc = weave_team_sync(hr->team, hr->stream);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        const char *m = weave_get_last_error(hr->team);
        if (rc != WEAVE_ERROR_ABORTED) {
          /* this rank does not know of the abort: the calls below would launch and wait (the harness
           * ends the case; the team's destroy then times out) */
          fail(c, r, "expected WEAVE_ERROR_ABORTED", weave_get_error_string(rc));
          weave_gemm_rs_plan_destroy(plan);
          counted(c, 1);
          continue;
        }
        if (!strstr(m, want))
          fail(c, r, "the abort's message does not name the rank", m);
        else if (s > 10.0)
          fail(c, r, "the abort did not stop the waits within 10 s", m);
        else
          printf("  rank %d stopped %.3f s after its call: %s\n", r, s, m);
      }
      /* every rank, the aborting one too: what communicates refuses, naming the rank */
      rc = weave_gemm_rs_execute(plan, dA, dB, dbias, dC, hr->stream);
      if (rc != WEAVE_ERROR_ABORTED || !strstr(weave_get_last_error(hr->team), want))
        fail(c, r, "execute after the abort", weave_get_last_error(hr->team));
      if (weave_barrier(hr->team) != WEAVE_ERROR_ABORTED)
        fail(c, r, "barrier after the abort", weave_get_last_error(hr->team));
      if (weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS)
        fail(c, r, "plan destroy after the abort", weave_get_last_error(hr->team));
      counted(c, 1);
      continue;
    }

    if (d.trace && !hier) { /* one traced call: one GEMM event per tile of the walk, WAIT + REDUCE per owned tile */
      weave_gemm_rs_execute(plan, dA, dB, dbias, dC, hr->stream);
      size_t cap = 4 * (size_t)(info.tiles_total + info.tiles_owned) + 64, n = 0;
      weave_trace_event_t *ev = (weave_trace_event_t *)calloc(cap, sizeof(*ev));
      if (weave_gemm_rs_trace_fetch(plan, hr->stream, ev, cap, &n) != WEAVE_SUCCESS)
        fail(c, r, dn, weave_get_last_error(hr->team));
      size_t per_role[4] = {0, 0, 0, 0};
      int bad = 0;
      for (size_t i = 0; i < n && i < cap; ++i) {
        if (ev[i].role < 0 || ev[i].role > 3 || ev[i].rank != r || ev[i].t_end < ev[i].t_begin)
          bad++;
        else
          per_role[ev[i].role]++;
      }
      if (bad || per_role[WEAVE_TRACE_GEMM] != (size_t)info.tiles_total ||
          per_role[WEAVE_TRACE_WAIT] != (size_t)info.tiles_owned ||
          per_role[WEAVE_TRACE_REDUCE] != (size_t)info.tiles_owned) {
        snprintf(msg, sizeof(msg), "trace: %zu GEMM / %zu WAIT / %zu REDUCE events (%d malformed), want %d / %d / %d",
                 per_role[0], per_role[1], per_role[2], bad, info.tiles_total, info.tiles_owned, info.tiles_owned);
        fail(c, r, dn, msg);
      }
      free(ev);
      counted(c, 1);
    }
    for (int call = 0; call < c->calls; ++call) {
      if (c->fresh_inputs && call > 0) { /* a stale partial from the previous call no longer matches */
        fresh_inputs(c, r, world, call, myA, myB, dA, dB);
        for (int i = 0; i < nr; ++i)
          weave_ref_gemm_rs(c->M, c->N, c->K, world, c->dtype, c->layout, c->alpha, (const void *const *)myA,
                            (const void *const *)myB, c->has_bias ? c->bias : NULL, row_begin + rb[i], rc_[i], ref[i]);
        weave_barrier(hr->team); /* every rank's new inputs are in place before anyone calls */
      }
      harness_poison(dC, (size_t)rows * c->N * e, hr->stream);
      rc = scaled ? weave_gemm_rs_execute_scaled(plan, dA, dB, dsa, dsb, dbias, rows ? dC : NULL, hr->stream)
                  : weave_gemm_rs_execute(plan, dA, dB, dbias, rows ? dC : NULL,
                                          hr->stream); /* no rows: C_out may be NULL */
      if (rc == WEAVE_SUCCESS) rc = weave_team_sync(hr->team, hr->stream);
      if (rc != WEAVE_SUCCESS) {
        snprintf(msg, sizeof(msg), "call %d: %s", call, weave_get_last_error(hr->team));
        fail(c, r, dn, msg);
        continue; /* every rank makes every call, so the ranks stay in step after a failure */
      }
      harness_download(hC, dC, (size_t)rows * c->N * e);
      for (int i = 0; i < nr; ++i) {
        weave_check_t chk;
        weave_check_result_ex(c->out, hC + (size_t)rb[i] * c->N * e, ref[i], bound[i], (size_t)rc_[i] * c->N, atol,
                              rtol, &chk);
        if (chk.wrong) {
          size_t fb = chk.first_bad;
          snprintf(
              msg, sizeof(msg),
              "call %d: %zu wrong (%zu non-finite) of %d x %d, rel err %.3g, first bad row %d col %d: got %g want %g",
              call, chk.wrong, chk.nonfinite, rc_[i], c->N, chk.rel_err, row_begin + rb[i] + (int)(fb / c->N),
              (int)(fb % c->N), weave_host_get(c->out, hC + (size_t)rb[i] * c->N * e, fb), ref[i][fb]);
          fail(c, r, dn, msg);
          break;
        }
      }
      if (ref_all) {
        weave_check_t chk;
        weave_check_result(c->out, hC, ref_all, (size_t)rows * c->N, atol, rtol, &chk);
        if (chk.wrong) {
          size_t fb = chk.first_bad;
          snprintf(
              msg, sizeof(msg),
              "call %d: %zu wrong (%zu non-finite) of all %d x %d rows vs cuBLASLt, rel err %.3g, first bad row %d "
              "col %d: got %g want %g",
              call, chk.wrong, chk.nonfinite, rows, c->N, chk.rel_err, row_begin + (int)(fb / c->N), (int)(fb % c->N),
              weave_host_get(c->out, hC, fb), ref_all[fb]);
          fail(c, r, dn, msg);
        }
      }
      if (c->bitwise) {
        if (call == 0)
          memcpy(first, hC, (size_t)rows * c->N * e);
        else if (memcmp(first, hC, (size_t)rows * c->N * e) != 0) {
          snprintf(msg, sizeof(msg), "call %d differs bitwise from call 0", call);
          fail(c, r, dn, msg);
        }
      }
      counted(c, 1);
    }
    rc = weave_gemm_rs_plan_destroy(plan);
    if (rc != WEAVE_SUCCESS) fail(c, r, "plan destroy", weave_get_last_error(hr->team));
  }
  for (int i = 0; i < nr; ++i) {
    free(ref[i]);
    free(bound[i]);
  }
  if (dsa) harness_dev_free(dsa);
  if (dsb) harness_dev_free(dsb);
  for (int s = 0; s < world; ++s) {
    free(myA[s]);
    free(myB[s]);
  }
  free(ref_all);
  free(hC);
  free(first);
  harness_dev_free(baseA);
  harness_dev_free(baseB);
  harness_dev_free(baseC);
  if (base_bias) harness_dev_free(base_bias);
  return 0;
}

static weave_gemm_rs_desc_t make_desc(const test_case_t *c, weave_strategy_t s, weave_reduce_t red, weave_dtype_t slot,
                                      weave_tile_order_t order) {
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.dtype = c->dtype;
  d.out_dtype = c->dtype == WEAVE_FP8_E4M3 ? c->out : WEAVE_DTYPE_AUTO;
  d.scale_mode = c->scale_mode;
  d.fp8_accum = c->fp8_accum;
  d.b_layout = c->layout;
  d.strategy = s;
  d.reduce = red;
  d.fp32_slots = slot == WEAVE_FP32 && c->dtype != WEAVE_FP32;
  d.tile_order = order;
  d.alpha = c->alpha;
  d.has_bias = c->has_bias;
  return d;
}

/* A case without descs: every rank calls, no sampling, no bitwise check, inputs drawn once. */
static test_case_t new_case(const char *name, int M, int N, int K, weave_dtype_t dtype, weave_layout_t layout,
                            int has_bias, float alpha, int calls) {
  test_case_t c;
  memset(&c, 0, sizeof(c));
  c.name = name;
  c.M = M;
  c.N = N;
  c.K = K;
  c.dtype = dtype;
  c.out = dtype == WEAVE_FP8_E4M3 ? WEAVE_BF16 : dtype;
  c.layout = layout;
  c.has_bias = has_bias;
  c.alpha = alpha;
  c.calls = calls;
  c.skip_rank = -1;
  c.abort_rank = -1;
  return c;
}

static int run_case(test_case_t *c, int world, uint64_t seed) {
  c->failures = 0;
  c->checks = 0;
  c->seed = seed;
  pthread_mutex_init(&c->mu, NULL);
  size_t e = weave_dtype_size(c->dtype);
  for (int s = 0; s < world; ++s) {
    c->A[s] = malloc((size_t)c->M * c->K * e);
    c->B[s] = malloc((size_t)c->K * c->N * e);
    weave_fill_random(c->dtype, c->A[s], (size_t)c->M * c->K, seed + 2 * (uint64_t)s);
    weave_fill_random(c->dtype, c->B[s], (size_t)c->K * c->N, seed + 2 * (uint64_t)s + 1);
    /* each rank its own scales, in [0.25, 2) */
    const int row = c->scale_mode == WEAVE_SCALE_ROW;
    c->sa[s] = (float *)malloc(sizeof(float) * (row ? (size_t)c->M : 1));
    c->sb[s] = (float *)malloc(sizeof(float) * (row ? (size_t)c->N : 1));
    c->sa[s][0] = 0.5f + 0.25f * (float)s;
    c->sb[s][0] = 1.25f - 0.125f * (float)s;
    for (int i = 0; row && i < c->M; ++i) c->sa[s][i] = 0.25f + 0.0625f * (float)((i * 7 + s * 3) % 28);
    for (int j = 0; row && j < c->N; ++j) c->sb[s][j] = 0.25f + 0.0625f * (float)((j * 5 + s * 11) % 28);
  }
  c->bias = malloc((size_t)c->N * weave_dtype_size(c->out));
  weave_fill_random(c->out, c->bias, (size_t)c->N, seed ^ 0xb1a5);
  int devices[WEAVE_MAX_WORLD];
  int ndev = harness_device_count();
  for (int r = 0; r < world; ++r) devices[r] = ndev ? r % ndev : 0;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  if (c->skip_rank >= 0) cfg.timeout_ms = 300;
  if (c->abort_rank >= 0) cfg.timeout_ms = 60000; /* so that only the abort can end the waits in time */
  int rc = harness_run(world, devices, &cfg, rank_fn, c);
  for (int s = 0; s < world; ++s) {
    free(c->A[s]);
    free(c->B[s]);
    free(c->sa[s]);
    free(c->sb[s]);
  }
  free(c->bias);
  if (rc == HARNESS_SKIP) return rc;
  printf("%-28s world %d %s%s%s %s: %ld checked calls, %d failures%s\n", c->name, world, weave_dtype_name(c->dtype),
         c->dtype == WEAVE_FP8_E4M3 ? "->" : "", c->dtype == WEAVE_FP8_E4M3 ? weave_dtype_name(c->out) : "",
         c->layout == WEAVE_LAYOUT_ROW ? "B[K,N]" : "B[N,K]", c->checks, c->failures, c->failures ? "  <-- FAIL" : "");
  return (rc || c->failures) ? 1 : 0;
}

/* Every strategy on one case, in this order: fused deterministic with `slot` slots (own-last), with
 * fp32 slots (own-first; when slot is not fp32 already), fused atomic, bulk (and with fp32 partials
 * when bulk_fp32), baseline, auto. */
static void add_every_strategy(test_case_t *c, weave_dtype_t slot, int bulk_fp32) {
  c->descs[c->ndescs++] = make_desc(c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot, WEAVE_ORDER_OWN_LAST);
  if (slot != WEAVE_FP32)
    c->descs[c->ndescs++] =
        make_desc(c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_FIRST);
  c->descs[c->ndescs++] = make_desc(c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, slot, WEAVE_ORDER_OWN_LAST);
  c->descs[c->ndescs++] = make_desc(c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, slot, WEAVE_ORDER_OWN_LAST);
  if (bulk_fp32)
    c->descs[c->ndescs++] =
        make_desc(c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_LAST);
  c->descs[c->ndescs++] = make_desc(c, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, slot, WEAVE_ORDER_OWN_LAST);
  c->descs[c->ndescs++] = make_desc(c, WEAVE_STRATEGY_AUTO, WEAVE_REDUCE_DETERMINISTIC, slot, WEAVE_ORDER_OWN_LAST);
}

int main(int argc, char **argv) {
  int only_world = 0, quick = 0, tiny = 0, fp8_only = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--world") && i + 1 < argc)
      only_world = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--tiny"))
      quick = tiny = 1; /* for the sanitizers: one small case per dtype */
    else if (!strcmp(argv[i], "--fp8-only"))
      fp8_only = 1; /* the fp8 cases (1b) alone */
    else if (!strcmp(argv[i], "--ranks-per-node") && i + 1 < argc)
      g_ranks_per_node = atoi(argv[++i]); /* pretend nodes: worlds above it run the plans past one node */
  }
  harness_pretend_nodes(g_ranks_per_node);
  if (harness_device_count() == 0) {
    printf("gpu_gemm_rs: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  int launched = harness_launched_world(); /* one process per rank: only the job's world runs */
  if (launched < 0) return 1;
  if (launched) only_world = launched;
  if (harness_time_sliced()) {
    printf("gpu_gemm_rs: processes share the GPU time-sliced (no MPS): small cases only\n");
    quick = tiny = 1;
  }
  uint64_t seed = harness_seed();
  printf("gpu_gemm_rs: seed %llu (set WEAVE_TEST_SEED to repeat)\n", (unsigned long long)seed);
  /* 3: rows that split unevenly over an odd world; --world N (or the launcher's world) runs N alone,
   * whatever N is */
  int worlds[] = {1, 2, 3, 4, 8}, nworlds = 5, failed = 0, total = 0;
  if (only_world) {
    worlds[0] = only_world;
    nworlds = 1;
  }
  for (int wi = 0; wi < nworlds; ++wi) {
    int world = worlds[wi];
    /* 1. every strategy x reduction x slot x dtype x layout, with tails */
    for (int dt = 0; dt < 3 && !fp8_only; ++dt)
      for (int lay = 0; lay < 2; ++lay) {
        if (tiny && dt == WEAVE_FP16) continue;
        /* K_local 300 and N 1001 (rows not 16-byte aligned: the mma.sync role and the scalar
         * reduction) or K_local 304 and N 1000 (the TMA + wgmma role), alternating so that every dtype
         * and layout meets both roles; M 1003 leaves the first M % world ranks an extra row. */
        const int odd = (dt + lay) % 2;
        test_case_t c =
            new_case(odd ? "tails 1003x1000x304" : "tails 1003x1001x300", 1003, odd ? 1000 : 1001, odd ? 304 : 300,
                     (weave_dtype_t)dt, (weave_layout_t)lay, !odd, odd ? 1.0f : 0.75f, tiny ? 1 : 2);
        if (tiny) {
          c.M = 300;
          c.N = 264;
          c.K = 72;
        } /* K, N multiples of 8: the TMA role too */
        weave_dtype_t dty = c.dtype;
        add_every_strategy(&c, dty, dty != WEAVE_FP32);
        int rc = run_case(&c, world, seed + (uint64_t)(1000 * world + 10 * dt + lay) * 1000003ull);
        if (rc == HARNESS_SKIP) return rc;
        failed += rc;
        total++;
      }
    /* 1b. fp8 e4m3 inputs: every scale mode, bf16 and fp16 output, every strategy x reduction x slot
     * dtype; M off the tile and the ranks, K_local a multiple of 16 but not of the 128-element k-block */
    for (int mode = WEAVE_SCALE_NONE; mode <= WEAVE_SCALE_ROW; ++mode) {
      if (tiny && mode == WEAVE_SCALE_NONE) continue;
      const weave_dtype_t out = mode == WEAVE_SCALE_TENSOR ? WEAVE_FP16 : WEAVE_BF16;
      test_case_t c = new_case(mode == WEAVE_SCALE_ROW      ? "fp8 row scales 1003x1000x304"
                               : mode == WEAVE_SCALE_TENSOR ? "fp8 tensor scales 1003x1000x304 fast"
                                                            : "fp8 no scales 1003x1000x304",
                               1003, 1000, 304, WEAVE_FP8_E4M3, WEAVE_LAYOUT_COL, mode != WEAVE_SCALE_NONE,
                               mode == WEAVE_SCALE_TENSOR ? 0.75f : 1.0f, tiny ? 1 : 2);
      c.out = out;
      c.scale_mode = (weave_scale_mode_t)mode;
      /* fp32 accumulation (the default) with no and row scales, fast accumulation with tensor scales */
      c.fp8_accum = mode == WEAVE_SCALE_TENSOR ? WEAVE_FP8_ACCUM_FAST : WEAVE_FP8_ACCUM_FP32;
      if (tiny) {
        c.M = 300;
        c.N = 264;
        c.K = 80;
      }
      add_every_strategy(&c, out, 1);
      int rc = run_case(&c, world, seed + (uint64_t)(5000 * world + mode) * 1000003ull);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc;
      total++;
    }
    /* fp8 with rows of C that are not 16-byte multiples (N 1001): cuBLASLt fp8 has no algorithm, so
     * the baseline is refused and auto runs bulk */
    {
      test_case_t c = new_case("fp8 tensor scales, N 1001", tiny ? 300 : 1003, 1001, tiny ? 80 : 304, WEAVE_FP8_E4M3,
                               WEAVE_LAYOUT_COL, 1, 1.0f, 1);
      c.scale_mode = WEAVE_SCALE_TENSOR;
      c.no_lt = 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_AUTO, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      int rc = run_case(&c, world, seed + (uint64_t)(6000 * world) * 1000003ull);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc;
      total++;
    }
    /* fp8 with row scales, bitwise over 20 calls and at M < world (ranks that own no row) */
    if (!tiny) {
      test_case_t c = new_case("fp8 row scales, 20 calls", world > 1 ? world - 1 : 1, 264, 1024, WEAVE_FP8_E4M3,
                               WEAVE_LAYOUT_COL, 1, 0.5f, 20);
      c.scale_mode = WEAVE_SCALE_ROW;
      c.bitwise = 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_LAST);
      failed += run_case(&c, world, seed ^ (0xf8ull * (uint64_t)world));
      total++;
    }
    /* the baseline with pointers off the 256-byte alignment cuBLASLt assumes unless told (views into
     * larger buffers): bf16 at 2 bytes past it, fp8 at 16 (its least); world 1 writes C_out directly */
    for (int f8 = fp8_only; f8 < 2; ++f8) {
      test_case_t c = new_case(f8 ? "baseline, pointers 16 B past 256" : "baseline, pointers 2 B past 256", 300, 264,
                               f8 ? 80 : 72, f8 ? WEAVE_FP8_E4M3 : WEAVE_BF16, WEAVE_LAYOUT_COL, 1, 1.0f, 2);
      if (f8) c.scale_mode = WEAVE_SCALE_TENSOR;
      c.offset = f8 ? 16 : 2;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      int rc = run_case(&c, world, seed + (uint64_t)(7000 * world + f8) * 1000003ull);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc;
      total++;
    }
    if (fp8_only) continue;
    /* 2. a large shape, sampled rows */
    if (!quick) {
      for (int lay = 0; lay < 2; ++lay) {
        test_case_t c =
            new_case("large 8192x8192x1024", 8192, 8192, 1024, WEAVE_BF16, (weave_layout_t)lay, lay, 1.0f, 1);
        c.sample = 1;
        c.descs[c.ndescs++] =
            make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
        c.descs[c.ndescs++] =
            make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
        c.descs[c.ndescs++] =
            make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
        c.descs[c.ndescs++] =
            make_desc(&c, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
        int rc = run_case(&c, world, seed + (uint64_t)(77 + world * 3 + lay) * 7919ull);
        failed += rc;
        total++;
      }
    }
    /* 3. back-to-back calls without reset (and 4. bitwise determinism) */
    if (!tiny && (world == 4 || world == 2 || only_world)) {
      test_case_t c = new_case(quick ? "100 calls, bitwise" : "1000 calls, bitwise", 1000, 1024, 256, WEAVE_BF16,
                               WEAVE_LAYOUT_COL, 1, 1.0f, quick ? 100 : 1000);
      c.bitwise = 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_FIRST);
      c.descs[c.ndescs++].trace = 1; /* traced (and bitwise reproducible): the events are counted too */
      failed += run_case(&c, world, seed ^ 0x5eed5eedull);
      total++;
      test_case_t b = c;
      b.name = "atomic, 20 calls";
      b.calls = 20;
      b.bitwise = 0;
      b.ndescs = 0;
      b.descs[b.ndescs++] = make_desc(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, WEAVE_BF16, WEAVE_ORDER_OWN_FIRST);
      failed += run_case(&b, world, seed ^ 0xa70a1cull);
      total++;
    }
    /* 2b. fewer rows than ranks (decode steps): ranks past the last row own none, every strategy */
    if (world >= 2) {
      const int ms[2] = {1, world - 1};
      for (int mi = 0; mi < (world > 2 ? 2 : 1); ++mi) {
        test_case_t c =
            new_case(mi ? "M = world - 1" : "M = 1", ms[mi], 264, 136, WEAVE_BF16, (weave_layout_t)mi, 1, 0.5f, 2);
        add_every_strategy(&c, WEAVE_BF16, 0);
        failed += run_case(&c, world, seed ^ (0x11ull * (uint64_t)(world * 4 + mi + 1)));
        total++;
      }
    }
    /* 3b. inputs changed in place between calls, each result checked: a partial left over from the
     * previous call, or read before its producer wrote it, can no longer pass */
    if (!tiny && world >= 2) {
      test_case_t c =
          new_case("fresh inputs every call", 1003, 1024, 256, WEAVE_BF16, WEAVE_LAYOUT_ROW, 0, 1.0f, quick ? 5 : 20);
      c.fresh_inputs = 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, WEAVE_ORDER_OWN_FIRST);
      c.descs[c.ndescs++] = make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      failed += run_case(&c, world, seed ^ 0xf2e5ull);
      total++;
    }
    /* 6. a rank that aborts the team instead of calling */
    if (world >= 2 && !tiny) {
      test_case_t c = new_case("aborting rank -> aborted", 512, 512, 128, WEAVE_BF16, WEAVE_LAYOUT_ROW, 0, 1.0f, 1);
      c.abort_rank = world - 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      failed += run_case(&c, world, seed ^ 0xab07ull);
      total++;
    }
    /* 5. a rank that never calls */
    if (world >= 2 && !tiny) {
      test_case_t c = new_case("missing rank -> timeout", 512, 512, 128, WEAVE_BF16, WEAVE_LAYOUT_ROW, 0, 1.0f, 2);
      c.skip_rank = world - 1;
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      c.descs[c.ndescs++] =
          make_desc(&c, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_ORDER_OWN_LAST);
      failed += run_case(&c, world, seed ^ 0x7133ull);
      total++;
    }
  }
  printf("gpu_gemm_rs: %d of %d cases passed\n", total - failed, total);
  return failed ? 1 : 0;
}
