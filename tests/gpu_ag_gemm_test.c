/*
 * GPU tests of AllGather + GEMM, with 1, 2, 3, 4 and 8 ranks sharing the visible GPU(s) (or one process
 * per rank under a launcher): every strategy (fused, bulk, baseline, auto) x dtype x B layout on
 * shapes with tails, M < world (ranks holding no row), N and K off the 16-byte rows (the non-TMA
 * paths), a large shape, the gathered A written out, and 40 calls on one plan bitwise identical.
 * Each rank has its own B and bias; C of every rank is compared with an fp64 reference of
 * alpha * A . B_r + bias_r. Every call flips the sign of A (exactly), so a call that reads a
 * previous call's rows fails. Outputs are poisoned (NaN) before every call; inputs are fresh random
 * numbers per case. fp8 (e4m3, B [N, K]): every strategy with per-tensor scales that differ by rank
 * and per-row scales (they travel with the rows), fp32 and fast accumulation, bf16 and fp16 output,
 * against the fp64 reference within the stated bound of the tensor cores' accumulation (as
 * gpu_fp8_gemm_test). Refusals: fused on fp32 (UNSUPPORTED), a bad desc, NULL B. A rank that never
 * calls: the others' fused and bulk calls end in WEAVE_ERROR_TIMEOUT naming the wait, and a new plan
 * then computes the right C. AUTO twice on one shape: measured (or cached), then cached.
 * Usage: gpu_ag_gemm [--world N] [--quick]   Exit 0 pass, 1 fail, 77 no device.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "weave.h"

typedef struct {
  const char *name;
  int M, N, K;
  weave_dtype_t dtype;
  weave_layout_t layout;
  int has_bias;
  float alpha;
  weave_strategy_t strategy;
  int calls;
  int gather_out;  /* also ask for the gathered A (on odd calls) */
  int bitwise;     /* every call with the same sign bitwise equal */
  int sample;      /* check sampled rows only (large shapes) */
  int comm_blocks; /* fused: -1 the planner's split, else 8 GEMM blocks and this many communication blocks */
  uint64_t seed;
  /* host data, shared by the ranks (threads) or rebuilt by each process from the seed */
  void *A; /* [M, K] */
  void *B[WEAVE_MAX_WORLD], *bias[WEAVE_MAX_WORLD];
  int failed;
} ag_case_t;

static int g_ranks_per_node; /* --ranks-per-node */

static size_t esz(weave_dtype_t t) { return weave_dtype_size(t); }

/* fp8 e4m3 values with their sign flipped, exactly (0x80 of every byte; e4m3's NaN stays NaN). */
static void flip_bytes_sign(uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] ^= 0x80u;
}

/* A with its sign flipped, exactly: the sign bit of every element. */
static void flip_sign(weave_dtype_t t, void *p, size_t n) {
  if (t == WEAVE_FP32) {
    uint32_t *u = (uint32_t *)p;
    for (size_t i = 0; i < n; ++i) u[i] ^= 0x80000000u;
  } else {
    uint16_t *u = (uint16_t *)p;
    for (size_t i = 0; i < n; ++i) u[i] ^= 0x8000u;
  }
}

/* The rows the case checks: every row, or for large shapes the first two rows of every rank's block
 * and the last row. */
static int check_ranges(const ag_case_t *c, int world, int *begin, int *count) {
  if (!c->sample) {
    begin[0] = 0;
    count[0] = c->M;
    return 1;
  }
  int n = 0;
  for (int s = 0; s < world; ++s) {
    int rb, rows;
    weave_row_split(c->M, world, s, &rb, &rows);
    if (rows) {
      begin[n] = rb;
      count[n] = rows < 2 ? rows : 2;
      ++n;
    }
  }
  begin[n] = c->M - 1;
  count[n] = 1;
  return n + 1;
}

static int rank_fn(harness_rank_t *r) {
  ag_case_t *c = (ag_case_t *)r->user;
  const int M = c->M, N = c->N, K = c->K, world = r->world;
  const weave_dtype_t t = c->dtype;
  int rb, rows;
  weave_row_split(M, world, r->rank, &rb, &rows);
  /* device memory before the plan: a rank whose thread allocates while its peers' calls are in flight
   * could stall them (ranks that are threads sharing a GPU) */
  const size_t a_bytes = (size_t)rows * K * esz(t), c_bytes = (size_t)M * N * esz(t);
  const size_t full_a = (size_t)M * K * esz(t);
  void *A = rows ? harness_dev_alloc(a_bytes) : NULL;
  void *B = harness_dev_alloc((size_t)K * N * esz(t));
  void *bias = c->has_bias ? harness_dev_alloc((size_t)N * esz(t)) : NULL;
  void *C = harness_dev_alloc(c_bytes), *A_out = c->gather_out ? harness_dev_alloc(full_a) : NULL;
  harness_upload(B, c->B[r->rank], (size_t)K * N * esz(t));
  if (bias) harness_upload(bias, c->bias[r->rank], (size_t)N * esz(t));
  weave_ag_gemm_desc_t desc = WEAVE_AG_GEMM_DESC_INIT;
  desc.dtype = t;
  desc.b_layout = c->layout;
  desc.strategy = c->strategy;
  desc.alpha = c->alpha;
  desc.has_bias = c->has_bias;
  if (c->strategy == WEAVE_STRATEGY_FUSED && c->comm_blocks >= 0) {
    desc.gemm_blocks = 8; /* fits every world's co-resident share (8 ranks: 15 blocks each on an H100) */
    desc.comm_blocks = c->comm_blocks;
  }
  weave_ag_gemm_plan_t plan;
  weave_result_t rc = weave_ag_gemm_plan_create(r->team, M, N, K, &desc, &plan);
  if (rc != WEAVE_SUCCESS) {
    printf("FAIL [%s] rank %d: plan: %s\n", c->name, r->rank, weave_get_last_error(r->team));
    harness_dev_free(A);
    harness_dev_free(B);
    harness_dev_free(bias);
    harness_dev_free(C);
    harness_dev_free(A_out);
    return 1;
  }
  weave_ag_gemm_info_t info;
  weave_ag_gemm_plan_info(plan, &info);
  /* --ranks-per-node: a world of equal pretend nodes runs the plan past one node */
  const int want_hier = g_ranks_per_node && r->world > g_ranks_per_node && r->world % g_ranks_per_node == 0;
  weave_device_info_t dev;
  weave_team_device_info(r->team, &dev);
  char plan_bad[400] = "";
  if (info.row_begin != rb || info.rows != rows || info.strategy == WEAVE_STRATEGY_AUTO ||
      want_hier != (strstr(info.why, " nodes x ") != NULL))
    snprintf(plan_bad, sizeof(plan_bad), "plan_info rows %d+%d strategy %d (%s; %s past one node)", info.row_begin,
             info.rows, (int)info.strategy, info.why, want_hier ? "want a plan" : "want no plan");
  /* the planner's fused split: no communication blocks where the pushes stay in one GPU's memory
   * (ranks share it, or one rank), some where not */
  else if (c->strategy == WEAVE_STRATEGY_FUSED && c->comm_blocks < 0 && !want_hier &&
           (dev.ranks_on_device > 1 || r->world == 1) != (info.comm_blocks == 0))
    snprintf(plan_bad, sizeof(plan_bad), "the planner's split has %d communication blocks with %d ranks on this GPU",
             info.comm_blocks, dev.ranks_on_device);
  /* 2-CTA clusters sharing A: 16-bit fused plans pair tile columns where they pair up and both block
   * counts are even, unless WEAVE_HGEMM_CLUSTER says 1 or 2 (an H100 or H200 holds every rank's
   * clusters) */
  else if (c->strategy == WEAVE_STRATEGY_FUSED && !want_hier && t != WEAVE_FP32) {
    const char *knob = getenv("WEAVE_HGEMM_CLUSTER");
    const int k = knob ? atoi(knob) : 0;
    const int want = (k == 0 || k == 3) && ((N + 255) / 256) % 2 == 0 && info.gemm_blocks >= 2 &&
                     info.gemm_blocks % 2 == 0 && info.comm_blocks % 2 == 0;
    if (info.cta_pairs != want)
      snprintf(plan_bad, sizeof(plan_bad), "cta_pairs %d, want %d (%d + %d blocks, N %d, WEAVE_HGEMM_CLUSTER %d)",
               info.cta_pairs, want, info.gemm_blocks, info.comm_blocks, N, k);
  }
  if (plan_bad[0]) {
    printf("FAIL [%s] rank %d: %s\n", c->name, r->rank, plan_bad);
    weave_ag_gemm_plan_destroy(plan);
    harness_dev_free(A);
    harness_dev_free(B);
    harness_dev_free(bias);
    harness_dev_free(C);
    harness_dev_free(A_out);
    return 1;
  }
  /* reference of alpha * A . B_r (no bias) on the checked rows */
  int rbeg[WEAVE_MAX_WORLD + 1], rcnt[WEAVE_MAX_WORLD + 1];
  const int nr = check_ranges(c, world, rbeg, rcnt);
  size_t nref = 0;
  for (int i = 0; i < nr; ++i) nref += (size_t)rcnt[i] * N;
  double *ref = (double *)malloc(nref * sizeof(double));
  const void *Av[1] = {c->A}, *Bv[1] = {c->B[r->rank]};
  for (int i = 0, off = 0; i < nr; off += rcnt[i] * N, ++i)
    weave_ref_gemm_rs(M, N, K, 1, t, c->layout, c->alpha, Av, Bv, NULL, rbeg[i], rcnt[i], ref + off);
  double *bias_h = (double *)calloc((size_t)N, sizeof(double));
  if (c->has_bias)
    for (int j = 0; j < N; ++j) bias_h[j] = weave_host_get(t, c->bias[r->rank], (size_t)j);

  void *a_host = malloc(full_a ? full_a : 1), *got = malloc(c_bytes), *first[2] = {NULL, NULL};
  void *gath = A_out ? malloc(full_a) : NULL;
  memcpy(a_host, c->A, full_a);
  double *expect = (double *)malloc(nref * sizeof(double));
  double atol, rtol;
  weave_tolerance(t, K, &atol, &rtol);
  int bad = 0;
  for (int call = 0; call < c->calls && !bad; ++call) {
    const int neg = call & 1;
    if (call > 0) flip_sign(t, a_host, (size_t)M * K);
    if (rows) harness_upload(A, (char *)a_host + (size_t)rb * K * esz(t), a_bytes);
    harness_poison(C, c_bytes, r->stream);
    const int out_now = A_out && (call & 1);
    if (out_now) harness_poison(A_out, full_a, r->stream);
    rc = weave_ag_gemm_execute(plan, A, B, bias, C, out_now ? A_out : NULL, r->stream);
    if (rc == WEAVE_SUCCESS) rc = weave_team_sync(r->team, r->stream);
    if (rc != WEAVE_SUCCESS) {
      printf("FAIL [%s] rank %d call %d: %s\n", c->name, r->rank, call, weave_get_last_error(r->team));
      bad = 1;
      break;
    }
    harness_download(got, C, c_bytes);
    for (int i = 0, off = 0; i < nr; off += rcnt[i] * N, ++i) {
      for (size_t e = 0; e < (size_t)rcnt[i] * N; ++e)
        expect[off + e] = (neg ? -ref[off + e] : ref[off + e]) + bias_h[e % N];
      weave_check_t chk;
      weave_check_result(t, (char *)got + (size_t)rbeg[i] * N * esz(t), expect + off, (size_t)rcnt[i] * N, atol, rtol,
                         &chk);
      if (chk.wrong) {
        const size_t f = chk.first_bad;
        printf(
            "FAIL [%s] rank %d call %d: %zu wrong (%zu non-finite) of rows %d..%d, first C[%zu][%zu] = %g, want "
            "%g\n",
            c->name, r->rank, call, chk.wrong, chk.nonfinite, rbeg[i], rbeg[i] + rcnt[i] - 1, rbeg[i] + f / N, f % N,
            weave_host_get(t, (char *)got + (size_t)rbeg[i] * N * esz(t), f), expect[off + f]);
        bad = 1;
      }
    }
    if (out_now) {
      harness_download(gath, A_out, full_a);
      if (memcmp(gath, a_host, full_a)) {
        printf("FAIL [%s] rank %d call %d: the gathered A differs from every rank's rows\n", c->name, r->rank, call);
        bad = 1;
      }
    }
    if (c->bitwise) {
      if (!first[neg]) {
        first[neg] = malloc(c_bytes);
        memcpy(first[neg], got, c_bytes);
      } else if (memcmp(first[neg], got, c_bytes)) {
        printf("FAIL [%s] rank %d call %d: not bitwise equal to call %d\n", c->name, r->rank, call, neg);
        bad = 1;
      }
    }
  }
  weave_ag_gemm_plan_destroy(plan);
  harness_dev_free(A);
  harness_dev_free(B);
  harness_dev_free(bias);
  harness_dev_free(C);
  harness_dev_free(A_out);
  free(a_host);
  free(got);
  free(gath);
  free(first[0]);
  free(first[1]);
  free(ref);
  free(expect);
  free(bias_h);
  if (r->rank == 0 || bad)
    printf("%-34s world %d %s %s %s: rank %d %s (%s)\n", c->name, world, weave_dtype_name(t),
           c->layout == WEAVE_LAYOUT_COL ? "B[N,K]" : "B[K,N]", weave_strategy_name(info.strategy), r->rank,
           bad ? "FAILED" : "passed", info.why);
  return bad;
}

static int run_case(ag_case_t *c, int world) {
  const int M = c->M, N = c->N, K = c->K;
  const weave_dtype_t t = c->dtype;
  c->A = malloc((size_t)M * K * esz(t));
  weave_fill_random(t, c->A, (size_t)M * K, c->seed);
  for (int s = 0; s < world; ++s) {
    c->B[s] = malloc((size_t)K * N * esz(t));
    weave_fill_random(t, c->B[s], (size_t)K * N, c->seed + 7919u * (uint64_t)(s + 1));
    c->bias[s] = malloc((size_t)N * esz(t));
    weave_fill_random(t, c->bias[s], (size_t)N, c->seed + 104729u * (uint64_t)(s + 1));
  }
  int devices[WEAVE_MAX_WORLD] = {0};
  const int ndev = harness_device_count();
  for (int s = 0; s < world; ++s) devices[s] = ndev > 0 ? s % ndev : 0;
  const int rc = harness_run(world, devices, NULL, rank_fn, c);
  free(c->A);
  for (int s = 0; s < world; ++s) {
    free(c->B[s]);
    free(c->bias[s]);
  }
  return rc;
}

/* A rank that never calls (the last): every other rank's call times out (300 ms) with a message naming
 * the wait; after that a new plan of the same strategy computes the right C on every rank. */
static int missing_fn(harness_rank_t *r) {
  const int M = 300, N = 256, K = 128, skip = r->world - 1;
  ag_case_t *c = (ag_case_t *)r->user;
  int rb, rows, bad = 0;
  weave_row_split(M, r->world, r->rank, &rb, &rows);
  void *A = rows ? harness_dev_alloc((size_t)rows * K * 2) : NULL, *B = harness_dev_alloc((size_t)N * K * 2);
  void *C = harness_dev_alloc((size_t)M * N * 2);
  uint16_t *a_host = (uint16_t *)calloc((size_t)M * K, 2), *b_host = (uint16_t *)calloc((size_t)N * K, 2);
  uint16_t *got = (uint16_t *)malloc((size_t)M * N * 2);
  weave_fill_random(WEAVE_BF16, a_host, (size_t)M * K, c->seed);
  weave_fill_random(WEAVE_BF16, b_host, (size_t)N * K, c->seed + 1u + (uint64_t)r->rank);
  if (rows) harness_upload(A, a_host + (size_t)rb * K, (size_t)rows * K * 2);
  harness_upload(B, b_host, (size_t)N * K * 2);
  weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
  d.strategy = c->strategy;
  weave_ag_gemm_plan_t plan = NULL;
  weave_result_t rc = weave_ag_gemm_plan_create(r->team, M, N, K, &d, &plan);
  if (rc == WEAVE_SUCCESS && r->rank != skip) {
    weave_ag_gemm_execute(plan, A, B, NULL, C, NULL, r->stream);
    rc = weave_team_sync(r->team, r->stream);
    const char *m = weave_get_last_error(r->team);
    if (rc != WEAVE_ERROR_TIMEOUT || !strstr(m, "timed out") || !strstr(m, "rank")) {
      printf("FAIL [missing rank, %s] rank %d: got %s: %s\n", weave_strategy_name(c->strategy), r->rank,
             weave_get_error_string(rc), m);
      bad = 1;
    } else if (r->rank == 0) {
      printf("  rank 0 got the expected timeout: %s\n", m);
    }
    rc = WEAVE_SUCCESS;
  }
  weave_barrier(r->team);
  if (plan) weave_ag_gemm_plan_destroy(plan);
  if (rc == WEAVE_SUCCESS) rc = weave_ag_gemm_plan_create(r->team, M, N, K, &d, &plan);
  if (rc == WEAVE_SUCCESS) {
    harness_poison(C, (size_t)M * N * 2, r->stream);
    rc = weave_ag_gemm_execute(plan, A, B, NULL, C, NULL, r->stream);
    if (rc == WEAVE_SUCCESS) rc = weave_team_sync(r->team, r->stream);
    weave_ag_gemm_plan_destroy(plan);
  }
  if (rc != WEAVE_SUCCESS) {
    printf("FAIL [missing rank, %s] rank %d: the plan after the timeout: %s\n", weave_strategy_name(c->strategy),
           r->rank, weave_get_last_error(r->team));
    bad = 1;
  } else {
    double *ref = (double *)malloc((size_t)M * N * sizeof(double)), atol, rtol;
    const void *Av[1] = {a_host}, *Bv[1] = {b_host};
    weave_ref_gemm_rs(M, N, K, 1, WEAVE_BF16, WEAVE_LAYOUT_COL, 1.0, Av, Bv, NULL, 0, M, ref);
    weave_tolerance(WEAVE_BF16, K, &atol, &rtol);
    harness_download(got, C, (size_t)M * N * 2);
    weave_check_t chk;
    weave_check_result(WEAVE_BF16, got, ref, (size_t)M * N, atol, rtol, &chk);
    if (chk.wrong) {
      printf("FAIL [missing rank, %s] rank %d: %zu wrong after the timeout\n", weave_strategy_name(c->strategy),
             r->rank, chk.wrong);
      bad = 1;
    }
    free(ref);
  }
  harness_dev_free(A);
  harness_dev_free(B);
  harness_dev_free(C);
  free(a_host);
  free(b_host);
  free(got);
  if (r->rank == 0 && !bad)
    printf("missing rank -> timeout            world %d %s: passed\n", r->world, weave_strategy_name(c->strategy));
  return bad;
}

/* fp8: every rank's rows of A (e4m3) with their scales, its B [N, K] and bias of out_dtype; TENSOR
 * scales differ by rank (each gathered row keeps its owner's), ROW scales per row and column. Two
 * calls (the second with A's sign flipped, bits exactly), each against the fp64 reference of
 * weave_ref_gemm_rs_scaled (the scales as per-row and per-column vectors) within the stated bound of
 * the tensor cores' accumulation (gpu_fp8_gemm_test's), the gathered rows written out on the second. */
typedef struct {
  const char *name;
  int M, N, K;
  weave_dtype_t out;
  weave_scale_mode_t mode;
  int fast;
  weave_strategy_t strategy;
  uint64_t seed;
} ag_fp8_case_t;

static float fp8_scale(uint64_t seed, size_t i) { /* in [0.5, 1.5): exact in fp32 */
  uint64_t h = (seed + i) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return 0.5f + (float)(h % 1024) / 1024.0f;
}

static int fp8_fn(harness_rank_t *r) {
  const ag_fp8_case_t *c = (const ag_fp8_case_t *)r->user;
  const int M = c->M, N = c->N, K = c->K, world = r->world;
  int rb, rows, bad = 0;
  weave_row_split(M, world, r->rank, &rb, &rows);
  const size_t osz = esz(c->out);
  uint8_t *a_host = (uint8_t *)malloc((size_t)M * K), *b_host = (uint8_t *)malloc((size_t)N * K);
  void *bias_host = malloc((size_t)N * osz), *got = malloc((size_t)M * N * osz);
  uint8_t *gath = (uint8_t *)malloc((size_t)M * K);
  float *sa_rows = (float *)malloc((size_t)M * 4), *sb_cols = (float *)malloc((size_t)N * 4);
  float sa_mine[1], sb_mine[1];
  weave_fill_random(WEAVE_FP8_E4M3, a_host, (size_t)M * K, c->seed);
  weave_fill_random(WEAVE_FP8_E4M3, b_host, (size_t)N * K, c->seed + 31u * (uint64_t)(r->rank + 1));
  weave_fill_random(c->out, bias_host, (size_t)N, c->seed + 57u * (uint64_t)(r->rank + 1));
  /* the scales every row and column gets: TENSOR each rank's one (they differ), ROW per row / column */
  for (int s = 0, i = 0; s < world; ++s) {
    int sb_, sr;
    weave_row_split(M, world, s, &sb_, &sr);
    for (int k = 0; k < sr; ++k, ++i)
      sa_rows[i] = c->mode == WEAVE_SCALE_ROW      ? fp8_scale(c->seed, (size_t)i)
                   : c->mode == WEAVE_SCALE_TENSOR ? 0.5f + 0.25f * (float)s
                                                   : 1.0f;
  }
  for (int j = 0; j < N; ++j)
    sb_cols[j] = c->mode == WEAVE_SCALE_ROW      ? fp8_scale(c->seed + 7777u * (uint64_t)(r->rank + 1), (size_t)j)
                 : c->mode == WEAVE_SCALE_TENSOR ? 0.75f + 0.125f * (float)r->rank
                                                 : 1.0f;
  sa_mine[0] = sa_rows[rb < M ? rb : 0];
  sb_mine[0] = sb_cols[0];
  void *A = rows ? harness_dev_alloc((size_t)rows * K) : NULL, *B = harness_dev_alloc((size_t)N * K);
  void *bias = harness_dev_alloc((size_t)N * osz), *C = harness_dev_alloc((size_t)M * N * osz);
  void *A_out = harness_dev_alloc((size_t)M * K);
  const int row_mode = c->mode == WEAVE_SCALE_ROW;
  float *sa = (float *)harness_dev_alloc((size_t)(row_mode ? (rows ? rows : 1) : 1) * 4);
  /* scale_b 4 bytes into its allocation, as a view of a larger tensor can be (cuBLASLt refuses scale
   * pointers that are not 16-byte aligned: the baseline copies them) */
  float *sb_base = (float *)harness_dev_alloc((size_t)(row_mode ? N + 1 : 2) * 4), *sb = sb_base + 1;
  harness_upload(B, b_host, (size_t)N * K);
  harness_upload(bias, bias_host, (size_t)N * osz);
  harness_upload(sa, row_mode ? sa_rows + rb : sa_mine, (size_t)(row_mode ? rows : 1) * 4);
  harness_upload(sb, row_mode ? sb_cols : sb_mine, (size_t)(row_mode ? N : 1) * 4);

  /* the fp64 reference before the plan: creating it is collective, so no rank's host work delays its
   * first call past the peers' bounded waits */
  const float alpha = 0.75f;
  double *ref = (double *)malloc((size_t)M * N * sizeof(double)), *bound = (double *)malloc((size_t)M * N * 8);
  double *want = (double *)malloc((size_t)M * N * sizeof(double)), atol, rtol, smax = 0;
  {
    const float *psa = sa_rows, *psb = sb_cols;
    const void *pa = a_host, *pb = b_host;
    weave_ref_gemm_rs_scaled(M, N, K, 1, WEAVE_FP8_E4M3, c->out, WEAVE_LAYOUT_COL, alpha, WEAVE_SCALE_ROW,
                             WEAVE_REF_FP8_RANDOM_SIGNS | (c->fast ? WEAVE_REF_FP8_FAST : 0), &psa, &psb, &pa, &pb,
                             NULL, 0, M, ref, bound);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) smax = fmax(smax, fabs((double)alpha * sa_rows[i] * sb_cols[j]));
  }
  weave_tolerance(c->out, K, &atol, &rtol);
  atol *= smax;
  weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
  d.dtype = WEAVE_FP8_E4M3;
  d.out_dtype = c->out;
  d.scale_mode = c->mode;
  d.fp8_accum = c->fast ? WEAVE_FP8_ACCUM_FAST : WEAVE_FP8_ACCUM_FP32;
  d.strategy = c->strategy;
  d.alpha = alpha;
  d.has_bias = 1;
  weave_ag_gemm_plan_t plan = NULL;
  weave_ag_gemm_info_t info;
  memset(&info, 0, sizeof(info));
  weave_result_t rc = weave_ag_gemm_plan_create(r->team, M, N, K, &d, &plan);
  if (rc != WEAVE_SUCCESS) {
    printf("FAIL [fp8 %s] rank %d: plan: %s\n", c->name, r->rank, weave_get_last_error(r->team));
    bad = 1;
  } else {
    weave_ag_gemm_plan_info(plan, &info);
  }
  for (int call = 0; call < 2 && !bad; ++call) {
    if (call) flip_bytes_sign(a_host, (size_t)M * K);
    if (rows) harness_upload(A, a_host + (size_t)rb * K, (size_t)rows * K);
    harness_poison(C, (size_t)M * N * osz, r->stream);
    harness_poison(A_out, (size_t)M * K, r->stream);
    rc = c->mode == WEAVE_SCALE_NONE ? weave_ag_gemm_execute(plan, A, B, bias, C, call ? A_out : NULL, r->stream)
                                     : weave_ag_gemm_execute_scaled(plan, A, B, rows || !row_mode ? sa : NULL, sb, bias,
                                                                    C, call ? A_out : NULL, r->stream);
    if (rc == WEAVE_SUCCESS) rc = weave_team_sync(r->team, r->stream);
    if (rc != WEAVE_SUCCESS) {
      printf("FAIL [fp8 %s] rank %d call %d: %s\n", c->name, r->rank, call, weave_get_last_error(r->team));
      bad = 1;
      break;
    }
    harness_download(got, C, (size_t)M * N * osz);
    for (size_t e = 0; e < (size_t)M * N; ++e)
      want[e] = (call ? -ref[e] : ref[e]) + weave_host_get(c->out, bias_host, e % (size_t)N);
    weave_check_t chk;
    weave_check_result_ex(c->out, got, want, bound, (size_t)M * N, atol, rtol, &chk);
    if (chk.wrong) {
      const size_t f = chk.first_bad;
      printf("FAIL [fp8 %s] rank %d call %d: %zu wrong (%zu non-finite), first C[%zu][%zu] = %g, want %g\n", c->name,
             r->rank, call, chk.wrong, chk.nonfinite, f / N, f % N, weave_host_get(c->out, got, f), want[f]);
      bad = 1;
    }
    if (call) {
      harness_download(gath, A_out, (size_t)M * K);
      if (memcmp(gath, a_host, (size_t)M * K)) {
        printf("FAIL [fp8 %s] rank %d: the gathered A differs from every rank's rows\n", c->name, r->rank);
        bad = 1;
      }
    }
  }
  if (plan) weave_ag_gemm_plan_destroy(plan);
  harness_dev_free(A);
  harness_dev_free(B);
  harness_dev_free(bias);
  harness_dev_free(C);
  harness_dev_free(A_out);
  harness_dev_free(sa);
  harness_dev_free(sb_base);
  free(a_host);
  free(b_host);
  free(bias_host);
  free(got);
  free(gath);
  free(sa_rows);
  free(sb_cols);
  free(ref);
  free(bound);
  free(want);
  if (r->rank == 0 || bad)
    printf("fp8 %-30s world %d %s %s %s %s: rank %d %s (%s)\n", c->name, world, weave_dtype_name(c->out),
           c->mode == WEAVE_SCALE_ROW      ? "row"
           : c->mode == WEAVE_SCALE_TENSOR ? "tensor"
                                           : "none",
           c->fast ? "fast" : "fp32-acc", weave_strategy_name(info.strategy), r->rank, bad ? "FAILED" : "passed",
           info.why);
  return bad;
}

/* AUTO twice on one shape: the first plan measures (or finds rank 0's cache entry), the second finds
 * the first's choice in the cache; both agree on every rank. */
static int auto_twice_fn(harness_rank_t *r) {
  int bad = 0;
  weave_ag_gemm_info_t info[2];
  for (int i = 0; i < 2; ++i) {
    weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
    weave_ag_gemm_plan_t plan = NULL;
    memset(&info[i], 0, sizeof(info[i]));
    if (weave_ag_gemm_plan_create(r->team, 520, 264, 128, &d, &plan) != WEAVE_SUCCESS) {
      printf("FAIL [auto twice] rank %d: %s\n", r->rank, weave_get_last_error(r->team));
      return 1;
    }
    weave_ag_gemm_plan_info(plan, &info[i]);
    weave_ag_gemm_plan_destroy(plan);
  }
  /* pretend nodes that share a GPU: the band plans are made at the same moment on every node and
   * are not timed (the cost model decides, both times) */
  weave_device_info_t dev;
  weave_team_device_info(r->team, &dev);
  const int beside = strstr(info[0].why, " nodes x ") != NULL && dev.ranks_on_device > g_ranks_per_node;
  const int first_ok = info[0].chosen_by == WEAVE_CHOSEN_BY_MEASUREMENT || info[0].chosen_by == WEAVE_CHOSEN_BY_CACHE;
  if (beside ? info[0].chosen_by != WEAVE_CHOSEN_BY_MODEL || info[1].chosen_by != WEAVE_CHOSEN_BY_MODEL
             : !first_ok || info[1].chosen_by != WEAVE_CHOSEN_BY_CACHE)
    bad = 1;
  if (info[1].strategy != info[0].strategy) bad = 1;
  if (bad || r->rank == 0)
    printf("%s [auto twice] world %d rank %d: %s (%.0f ms: %s), then %s (%s)\n", bad ? "FAIL" : "ok  ", r->world,
           r->rank, weave_strategy_name(info[0].strategy), info[0].choose_ms, info[0].why,
           weave_strategy_name(info[1].strategy), info[1].why);
  return bad;
}

/* Refusals that write nothing: a bad desc, fused without the Hopper role, NULL B. */
static int refusal_fn(harness_rank_t *r) {
  int bad = 0;
  weave_ag_gemm_plan_t plan = NULL;
  weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
  d.struct_size = 8;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_ERROR_INVALID_ARGUMENT || plan) bad = 1;
  d = (weave_ag_gemm_desc_t)WEAVE_AG_GEMM_DESC_INIT;
  d.dtype = WEAVE_FP32;
  d.strategy = WEAVE_STRATEGY_FUSED;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_ERROR_UNSUPPORTED || plan) bad = 1;
  d = (weave_ag_gemm_desc_t)WEAVE_AG_GEMM_DESC_INIT;
  d.comm_blocks = 2; /* communication blocks without GEMM blocks */
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_ERROR_INVALID_ARGUMENT || plan) bad = 1;
  d = (weave_ag_gemm_desc_t)WEAVE_AG_GEMM_DESC_INIT;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_SUCCESS)
    bad = 1;
  else {
    void *buf = harness_dev_alloc(64 * 64 * 2);
    if (weave_ag_gemm_execute(plan, buf, NULL, NULL, buf, NULL, r->stream) != WEAVE_ERROR_INVALID_ARGUMENT) bad = 1;
    weave_ag_gemm_plan_destroy(plan);
    plan = NULL;
    harness_dev_free(buf);
  }
  /* fp8: B [K, N], K % 16, out_dtype fp32 refused at creation; a scaled plan refuses the unscaled call
   * and missing scales, an unscaled one refuses scales */
  d = (weave_ag_gemm_desc_t)WEAVE_AG_GEMM_DESC_INIT;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_ROW;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_ERROR_INVALID_ARGUMENT || plan) bad |= 2;
  d.b_layout = WEAVE_LAYOUT_COL;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 72, &d, &plan) != WEAVE_ERROR_INVALID_ARGUMENT || plan) bad |= 4;
  d.out_dtype = WEAVE_FP32;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_ERROR_INVALID_ARGUMENT || plan) bad |= 8;
  d.out_dtype = WEAVE_DTYPE_AUTO;
  d.scale_mode = WEAVE_SCALE_TENSOR;
  if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_SUCCESS) {
    bad |= 16;
  } else {
    void *buf = harness_dev_alloc(64 * 64 * 2);
    const float *one = (const float *)buf;
    if (weave_ag_gemm_execute(plan, buf, buf, NULL, buf, NULL, r->stream) != WEAVE_ERROR_INVALID_ARGUMENT) bad |= 32;
    if (weave_ag_gemm_execute_scaled(plan, buf, buf, one, NULL, NULL, buf, NULL, r->stream) !=
        WEAVE_ERROR_INVALID_ARGUMENT)
      bad |= 64;
    weave_ag_gemm_plan_destroy(plan);
    plan = NULL;
    d.scale_mode = WEAVE_SCALE_NONE;
    if (weave_ag_gemm_plan_create(r->team, 64, 64, 64, &d, &plan) != WEAVE_SUCCESS ||
        weave_ag_gemm_execute_scaled(plan, buf, buf, one, one, NULL, buf, NULL, r->stream) !=
            WEAVE_ERROR_INVALID_ARGUMENT)
      bad |= 128;
    if (plan) weave_ag_gemm_plan_destroy(plan);
    harness_dev_free(buf);
  }
  if (bad) printf("FAIL [refusals %#x] rank %d: %s\n", bad, r->rank, weave_get_last_error(r->team));
  return bad != 0;
}

int main(int argc, char **argv) {
  int only_world = 0, quick = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--world") && i + 1 < argc)
      only_world = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--ranks-per-node") && i + 1 < argc)
      g_ranks_per_node = atoi(argv[++i]); /* pretend nodes: worlds above it run the plans past one node */
  }
  harness_pretend_nodes(g_ranks_per_node);
  if (harness_device_count() == 0) {
    printf("gpu_ag_gemm: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  const int launched = harness_launched_world();
  if (launched < 0) return 1;
  if (launched) only_world = launched;
  if (harness_time_sliced()) quick = 1;
  const uint64_t seed = harness_seed();
  printf("gpu_ag_gemm: seed %llu (set WEAVE_TEST_SEED to repeat)\n", (unsigned long long)seed);
  const weave_strategy_t all[4] = {WEAVE_STRATEGY_FUSED, WEAVE_STRATEGY_BULK, WEAVE_STRATEGY_BASELINE,
                                   WEAVE_STRATEGY_AUTO};
  /* 3: rows that do not split evenly over an odd world; --world N (or the launcher's world) runs N
   * alone, whatever N is */
  int worlds[] = {1, 2, 3, 4, 8}, nworlds = 5;
  if (only_world) {
    worlds[0] = only_world;
    nworlds = 1;
  }
  int failed = 0, total = 0;
  for (int wi = 0; wi < nworlds; ++wi) {
    const int world = worlds[wi];
    int rc = harness_run(world, NULL, NULL, refusal_fn, NULL);
    if (rc == HARNESS_SKIP) return rc;
    failed += rc != 0;
    total++;
    typedef struct {
      const char *name;
      int M, N, K;
      weave_dtype_t t;
      weave_layout_t lay;
      int fused;
    } shape_t;
    const shape_t shapes[] = {
        {"tails 1003x1000x304", 1003, 1000, 304, WEAVE_BF16, WEAVE_LAYOUT_COL, 1},
        {"tails 1003x1000x304", 1003, 1000, 304, WEAVE_FP16, WEAVE_LAYOUT_ROW, 1},
        {"tails 1003x1001x300 (no TMA)", 1003, 1001, 300, WEAVE_BF16, WEAVE_LAYOUT_COL, 0},
        {"fp32 517x301x200", 517, 301, 200, WEAVE_FP32, WEAVE_LAYOUT_ROW, 0},
        {"M = 1", 1, 264, 72, WEAVE_BF16, WEAVE_LAYOUT_COL, 1},
        {"M = world - 1", world > 1 ? world - 1 : 1, 264, 72, WEAVE_FP16, WEAVE_LAYOUT_COL, 1},
        {"large 4096x2048x1024", 4096, 2048, 1024, WEAVE_BF16, WEAVE_LAYOUT_COL, 1},
    };
    const int nshapes = (int)(sizeof(shapes) / sizeof(shapes[0]));
    for (int si = 0; si < nshapes; ++si) {
      if (quick && si >= 5) break;
      for (int st = 0; st < 4; ++st) {
        if (all[st] == WEAVE_STRATEGY_FUSED && !shapes[si].fused) continue;
        ag_case_t c;
        memset(&c, 0, sizeof(c));
        c.comm_blocks = -1;
        c.name = shapes[si].name;
        c.M = shapes[si].M;
        c.N = shapes[si].N;
        c.K = shapes[si].K;
        c.dtype = shapes[si].t;
        c.layout = shapes[si].lay;
        c.has_bias = si % 2 == 0;
        c.alpha = si % 3 == 0 ? 0.75f : 1.0f;
        c.strategy = all[st];
        c.calls = quick ? 2 : 4;
        c.gather_out = st != 3;
        c.sample = c.M >= 4096;
        c.seed = seed + (uint64_t)(1000 * world + 10 * si + st) * 1000003ull;
        rc = run_case(&c, world);
        if (rc == HARNESS_SKIP) return rc;
        failed += rc != 0;
        total++;
      }
    }
    /* AUTO measures once per shape, then reads its choice from the cache (WEAVE_AUTOTUNE=0: the model) */
    if (world > 1 && !getenv("WEAVE_AUTOTUNE")) {
      rc = harness_run(world, NULL, NULL, auto_twice_fn, NULL);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc != 0;
      total++;
    }
    /* a rank that never calls: the others time out, then a new plan works */
    for (int st = 0; st < 2 && world >= 2 && !quick; ++st) {
      ag_case_t mc;
      memset(&mc, 0, sizeof(mc));
      mc.strategy = st == 0 ? WEAVE_STRATEGY_FUSED : WEAVE_STRATEGY_BULK;
      mc.seed = seed + 77u * (uint64_t)world + (uint64_t)st;
      weave_config_t cfg = WEAVE_CONFIG_INIT;
      cfg.timeout_ms = 300;
      rc = harness_run(world, NULL, &cfg, missing_fn, &mc);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc != 0;
      total++;
    }
    /* 40 calls on one fused plan: no reset between calls, the same bits for the same inputs; with the
     * planner's split, then with communication blocks pushing, then with the GEMM blocks pushing (the
     * planner's choice differs between ranks that share a GPU and ranks that do not) */
    for (int split = -1; split <= 2; split += split < 0 ? 1 : 2) {
      ag_case_t c;
      memset(&c, 0, sizeof(c));
      c.name = split < 0 ? "40 calls, bitwise"
               : split   ? "40 calls, 2 communication blocks"
                         : "40 calls, GEMM blocks push";
      c.M = 777;
      c.N = 512;
      c.K = 256;
      c.dtype = WEAVE_BF16;
      c.layout = WEAVE_LAYOUT_COL;
      c.alpha = 1.0f;
      c.strategy = WEAVE_STRATEGY_FUSED;
      c.calls = quick || split >= 0 ? 6 : 40;
      c.bitwise = 1;
      c.comm_blocks = split;
      c.seed = seed + 99u * (uint64_t)world + (uint64_t)(split + 1);
      rc = run_case(&c, world);
      if (rc == HARNESS_SKIP) return rc;
      failed += rc != 0;
      total++;
    }
    /* fp8: every strategy x per-tensor / per-row scales x (fp32 accumulation, bf16 out | fast, fp16
     * out), on tails; no scales once; M < world */
    const ag_fp8_case_t fp8_shapes[] = {
        {"tails 1003x1000x304", 1003, 1000, 304, WEAVE_BF16, WEAVE_SCALE_TENSOR, 0, WEAVE_STRATEGY_AUTO, 0},
        {"M = world - 1, 264x64", world > 1 ? world - 1 : 1, 264, 64, WEAVE_BF16, WEAVE_SCALE_ROW, 0,
         WEAVE_STRATEGY_AUTO, 0},
    };
    for (int si = 0; si < 2; ++si)
      for (int st = 0; st < 4; ++st)
        for (int v = 0; v < 5; ++v) {
          if ((quick || si == 1) && v >= 2 && v != 4) continue;
          ag_fp8_case_t fc = fp8_shapes[si];
          fc.strategy = all[st];
          fc.mode = v == 4 ? WEAVE_SCALE_NONE : v % 2 ? WEAVE_SCALE_ROW : WEAVE_SCALE_TENSOR;
          fc.fast = v >= 2 && v < 4;
          fc.out = fc.fast ? WEAVE_FP16 : WEAVE_BF16;
          fc.seed = seed + (uint64_t)(7000 * world + 100 * si + 10 * st + v) * 1000003ull;
          rc = harness_run(world, NULL, NULL, fp8_fn, &fc);
          if (rc == HARNESS_SKIP) return rc;
          failed += rc != 0;
          total++;
        }
  }
  printf("gpu_ag_gemm: %d of %d cases passed\n", total - failed, total);
  return failed ? 1 : 0;
}
