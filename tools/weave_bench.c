/*
 * weave-bench: GEMM + ReduceScatter benchmark in the conventions of nccl-tests.
 *
 *   weave-bench -M 8192 -N 8192 -K 28672 -g 4 [--devices 0,0,0,0] -d bf16 --strategy all
 *               [-b 1024 -e 16384 -f 2] [-n 20 -w 5 -c 1] [-J out.json] [--tune] [--op gemm]
 *
 * K is the total reduction length (K_local = K / ranks). Rows: one per strategy (baseline first),
 * median time over -n timed calls after -w warm-ups (each call: max over ranks; the variants are
 * timed round-robin, one call of each per iteration, so drift hits them alike), TFLOP/s per GPU,
 * reduce-scatter algbw/busbw, #wrong from the validated call (-c 1: output poisoned first; 3 ranges
 * of 4 rows per rank against the fp64 CPU reference, and every row against cuBLASLt over the gathered
 * K), speed-up over the baseline measured in the same run, relerr (largest relative Frobenius error
 * of those checks). After the table: cuBLASLt alone on the local shape, the baseline's reduce-scatter
 * part (baseline - that GEMM) and the share of it each fused variant hides. Inputs: random, several
 * sets rotated so the working set exceeds twice the L2.
 * Without a GPU it prints the plan and the roofline for H100/H200 and exits 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "harness.h"
#include "kernels/kernels.h"
#include "gemm_rs/lt.h"
#include "gemm_rs/plan_model.h"
#include "reference.h"
#include "gemm_rs/tune.h"
#include "weave.h"
#include "weave_trace.h"

/* --op gemm lives in tools/bench_gemm.cu; this weak stand-in answers when it is not built. */
__attribute__((weak)) int weave_bench_gemm_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "weave-bench: --op gemm is not built in this configuration\n");
  return 2;
}

#define MAX_STRATS 8

typedef struct {
  weave_strategy_t strategy;
  weave_reduce_t reduce;
  weave_dtype_t slot;
  int gemm_blocks, comm_blocks;
  int trace;
  const char *label;
} bench_variant_t;

typedef struct {
  int M, N, K_total, world;
  int devices[WEAVE_MAX_WORLD];
  weave_dtype_t dtype;
  weave_layout_t layout;
  int iters, warmup, check;
  bench_variant_t v[MAX_STRATS + 64];
  int nv;
  weave_tile_order_t order;
  /* results, filled by the ranks */
  double ms[MAX_STRATS + 64][WEAVE_MAX_WORLD][256];
  long wrong[MAX_STRATS + 64];
  double relerr[MAX_STRATS + 64]; /* largest ||got - ref|| / ||ref|| (fp64 reference) over the checked rows */
  int failed[MAX_STRATS + 64];
  weave_gemm_rs_info_t info[MAX_STRATS + 64][WEAVE_MAX_WORLD];
  double gemm_alone_ms[WEAVE_MAX_WORLD][256]; /* cuBLASLt-free reference: weave_gemm alone, all blocks */
  double lt_alone_ms[WEAVE_MAX_WORLD][256];   /* cuBLASLt alone: the baseline's GEMM part */
  int lt_failed;                              /* some rank could not plan cuBLASLt alone: skipped */
  pthread_mutex_t mu;
  uint64_t seed;
  char device_name[256];
  int sm_count;
  size_t l2;
  /* --trace: events of the traced variant's last call, per rank */
  const char *trace_path;
  int traced_vi;
  weave_trace_event_t *tev[WEAVE_MAX_WORLD];
  size_t tcount[WEAVE_MAX_WORLD];
} bench_t;

static void usage(void) {
  printf("usage: weave-bench [-M rows] [-N cols] [-K total_k] [-g ranks] [--devices 0,0,..] [-d bf16|fp16|fp32]\n"
         "                   [--layout row|col] [--strategy all|auto|fused|bulk|baseline] [--reduce det|atomic|both]\n"
         "                   [--slot dtype|fp32] [--order own-last|own-first] [--gemm-blocks G --comm-blocks C]\n"
         "                   [-b minM -e maxM -f factor] [-n iters] [-w warmup] [-c 0|1] [-J file.json] [--tune]\n"
         "                   [--trace out.json] [--op gemm ...] [--version]\n");
}

static int parse_devices(const char *s, int *out) {
  int n = 0;
  const char *p = s;
  while (*p && n < WEAVE_MAX_WORLD) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0) return -1;
    out[n++] = (int)v;
    p = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return n;
}

/* ------------------------------------------------------------------------------------------------
 * no-GPU mode: the plan and the roofline
 * ---------------------------------------------------------------------------------------------- */
static void print_dry(const bench_t *b) {
  int K = b->K_total / b->world, tm, tn;
  int hopper = weave_kernel_hopper_ok(b->dtype, b->layout, b->N, K);
  weave_kernel_tile_shape(hopper, &tm, &tn);
  weave_tiling_t t = {b->M, b->N, b->world, tm, tn, (int)b->order};
  printf("# plan of the fused kernel: %s role, tiles %dx%d, each owner's rows tiled on their own, owners\n"
         "# interleaved tile by tile in an order rotated per rank (%s)\n",
         hopper ? "TMA + wgmma" : "mma.sync", t.tile_m, t.tile_n,
         b->order == WEAVE_ORDER_OWN_FIRST ? "own tile first in each round" : "own tile last in each round");
  printf("#  rank  rows[begin,+n)     tiles_owned  owners in a round          bytes sent/call (%s slots)\n",
         weave_dtype_name(b->dtype));
  for (int r = 0; r < b->world; ++r) {
    int rb, rows;
    weave_split_rows_of(b->M, b->world, r, &rb, &rows);
    char owners[64] = "";
    for (int k = 0; k < b->world && k < 8; ++k) {
      char x[16];
      snprintf(x, sizeof(x), "%d ", weave_visit_owner(&t, r, k));
      strncat(owners, x, sizeof(owners) - strlen(owners) - 1);
    }
    printf("#  %4d  [%6d,+%6d)  %11d  %-25s  %zu\n", r, rb, rows, weave_owner_tiles(&t, r), owners,
           weave_plan_bytes_sent(b->M, b->N, b->world, r, weave_dtype_size(b->dtype)));
  }
  printf("#  total tiles %d; symmetric memory per rank (deterministic, %s slots): %.1f MB\n", weave_total_tiles(&t),
         weave_dtype_name(b->dtype),
         (double)b->world * weave_cdiv(b->M, b->world) * b->N * weave_dtype_size(b->dtype) / 1e6);
  /* The plan's split model with an H200's datasheet clock and bandwidth, one rank per GPU. */
  weave_split_inputs_t in;
  weave_split_inputs_from_device(132, 1.98e9, 4.8e12, b->dtype, 1, 132, &in);
  int c = weave_split_comm_blocks(&in, weave_plan_gemm_flops(b->M, b->N, K, b->world),
                                  weave_plan_comm_bytes(b->M, b->N, b->world, weave_dtype_size(b->dtype),
                                                        weave_dtype_size(b->dtype)),
                                  (double)weave_max_owner_tiles(&t));
  printf("#  cost-model split on a 132-SM H200, one rank per GPU: %d GEMM + %d communication blocks\n", 132 - c, c);
  printf("# roofline per GPU (datasheet rates; M=%d N=%d K_total=%d world=%d %s)\n", b->M, b->N, b->K_total, b->world,
         weave_dtype_name(b->dtype));
  printf("#  %-10s %10s %10s %14s %12s %8s\n", "device", "gemm_ms", "rs_ms", "gemm+rs_ms", "overlap_ms", "bound");
  for (int d = 0; d < 2; ++d) {
    weave_roofline_t r;
    weave_roofline(&weave_roofline_devices[d], b->M, b->N, b->K_total, b->world, weave_dtype_size(b->dtype), &r);
    printf("#  %-10s %10.3f %10.3f %14.3f %12.3f %7.2fx\n", weave_roofline_devices[d].name, r.t_gemm_ms, r.t_rs_ms,
           r.t_baseline_ms, r.t_fused_ms, r.t_fused_ms > 0 ? r.t_baseline_ms / r.t_fused_ms : 0);
  }
}

/* ------------------------------------------------------------------------------------------------
 * the timed run
 * ---------------------------------------------------------------------------------------------- */
/* Collective over the rank threads: each says whether its step went well (*failed, shared, is set by
 * any that failed), and all then take the same decision, so that no rank skips a call the others
 * wait for in a barrier. */
static int agree_ok(bench_t *b, harness_rank_t *hr, int *failed, int ok) {
  pthread_mutex_lock(&b->mu);
  if (!ok) *failed = 1;
  pthread_mutex_unlock(&b->mu);
  weave_barrier(hr->team);
  pthread_mutex_lock(&b->mu);
  ok = !*failed;
  pthread_mutex_unlock(&b->mu);
  return ok;
}

static int rank_fn(harness_rank_t *hr) {
  bench_t *b = (bench_t *)hr->user;
  const int r = hr->rank, world = hr->world, K = b->K_total / world;
  const size_t e = weave_dtype_size(b->dtype);
  const size_t a_n = (size_t)b->M * K, b_n = (size_t)K * b->N;
  weave_device_info_t di;
  weave_team_device_info(hr->team, &di);
  if (r == 0) {
    snprintf(b->device_name, sizeof(b->device_name), "%s", di.name);
    b->sm_count = di.sm_count;
    b->l2 = di.l2_bytes;
  }
  /* Input sets rotated so that all ranks' sets together exceed twice the L2. */
  size_t set_bytes = (a_n + b_n) * e;
  int nsets = (int)((2 * di.l2_bytes) / (set_bytes * (size_t)di.ranks_on_device) + 1);
  if (nsets > 8) nsets = 8;
  void *dA[8], *dB[8];
  void *hA = malloc(a_n * e), *hB = malloc(b_n * e);
  for (int s = 0; s < nsets; ++s) {
    dA[s] = harness_dev_alloc(a_n * e);
    dB[s] = harness_dev_alloc(b_n * e);
    weave_fill_random(b->dtype, hA, a_n, b->seed + (uint64_t)(r * 16 + s) * 2);
    weave_fill_random(b->dtype, hB, b_n, b->seed + (uint64_t)(r * 16 + s) * 2 + 1);
    harness_upload(dA[s], hA, a_n * e);
    harness_upload(dB[s], hB, b_n * e);
  }
  int rb, rows;
  weave_row_split(b->M, world, r, &rb, &rows);
  void *dC = harness_dev_alloc((size_t)rows * b->N * e);
  void *gemm_out = NULL;
  harness_timer_t *tm = harness_timer_create();
  int n = b->iters < 256 ? b->iters : 256;

  /* Reference for the check: set 0 of every rank is needed; every rank regenerates the others' set 0
   * on the host (cheap next to the fp64 product) and checks 3 ranges of 4 of its rows in fp64, and
   * every one of its rows against cuBLASLt over the gathered K (fp32 output). */
  double *ref = NULL, *ref_full = NULL;
  int rbeg[3] = {0, rows / 2, rows > 4 ? rows - 4 : 0}, rcnt = rows < 4 ? rows : 4;
  if (b->check) {
    void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
    for (int s = 0; s < world; ++s) {
      As[s] = malloc(a_n * e);
      Bs[s] = malloc(b_n * e);
      weave_fill_random(b->dtype, As[s], a_n, b->seed + (uint64_t)(s * 16) * 2);
      weave_fill_random(b->dtype, Bs[s], b_n, b->seed + (uint64_t)(s * 16) * 2 + 1);
    }
    ref = (double *)malloc(sizeof(double) * 3 * (size_t)rcnt * b->N + 1);
    for (int i = 0; i < 3; ++i)
      weave_ref_gemm_rs(b->M, b->N, K, world, b->dtype, b->layout, 1.0, (const void *const *)As,
                        (const void *const *)Bs, NULL, rb + rbeg[i], rcnt, ref + (size_t)i * rcnt * b->N);
    ref_full = harness_ref_rows_lt(b->N, K, world, b->dtype, b->layout, 1.0f, (const void *const *)As,
                                   (const void *const *)Bs, NULL, rb, rows);
    if (!ref_full) fprintf(stderr, "rank %d: no cuBLASLt reference: every variant counts as wrong\n", r);
    for (int s = 0; s < world; ++s) {
      free(As[s]);
      free(Bs[s]);
    }
  }
  unsigned char *hC = (unsigned char *)malloc((size_t)rows * b->N * e + 1);
  double atol, rtol;
  weave_tolerance(b->dtype, b->K_total, &atol, &rtol);

  /* Variants are timed round-robin, one call of each per iteration, so that clock and power drift
   * over the run biases them all alike (timed one block after the other, two identical variants
   * measured 5.09 and 6.21 ms on an H200). Hence every plan is alive for the whole run. */
  weave_gemm_rs_plan_t plan[MAX_STRATS + 64] = {NULL};
  int live[MAX_STRATS + 64] = {0}; /* this rank's copy of the agreed outcome: the same on all ranks */
  for (int vi = 0; vi < b->nv; ++vi) {
    bench_variant_t *v = &b->v[vi];
    weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
    d.dtype = b->dtype;
    d.b_layout = b->layout;
    d.strategy = v->strategy;
    d.reduce = v->reduce;
    d.fp32_slots = v->slot == WEAVE_FP32 && b->dtype != WEAVE_FP32;
    d.tile_order = b->order;
    d.gemm_blocks = v->gemm_blocks;
    d.comm_blocks = v->comm_blocks;
    d.trace = v->trace;
    /* Plan creation is collective and agreed inside: it fails on every rank or on none. */
    if (weave_gemm_rs_plan_create(hr->team, b->M, b->N, K, &d, &plan[vi]) != WEAVE_SUCCESS) {
      fprintf(stderr, "rank %d %s: %s\n", r, v->label, weave_get_last_error(hr->team));
      plan[vi] = NULL; /* marked failed by the agreement below */
      continue;
    }
    weave_gemm_rs_plan_info(plan[vi], &b->info[vi][r]);
  }
  for (int vi = 0; vi < b->nv; ++vi) {
    bench_variant_t *v = &b->v[vi];
    int plan_ok = plan[vi] != NULL;
    if (plan[vi] && b->check) { /* validated call, output poisoned first */
      int bad = 0;
      harness_poison(dC, (size_t)rows * b->N * e, hr->stream);
      weave_gemm_rs_execute(plan[vi], dA[0], dB[0], NULL, dC, hr->stream);
      if (weave_team_sync(hr->team, hr->stream) != WEAVE_SUCCESS) {
        fprintf(stderr, "rank %d %s: %s\n", r, v->label, weave_get_last_error(hr->team));
        bad = 1;
      }
      harness_download(hC, dC, (size_t)rows * b->N * e);
      long wrong = 0;
      double relerr = 0;
      for (int i = 0; i < 3 && rcnt > 0; ++i) {
        weave_check_t chk;
        weave_check_result(b->dtype, hC + (size_t)rbeg[i] * b->N * e, ref + (size_t)i * rcnt * b->N,
                           (size_t)rcnt * b->N, atol, rtol, &chk);
        wrong += (long)chk.wrong;
        if (!(chk.rel_err <= relerr)) relerr = chk.rel_err; /* NaN sticks */
      }
      if (ref_full) { /* all rows */
        weave_check_t chk;
        weave_check_result(b->dtype, hC, ref_full, (size_t)rows * b->N, atol, rtol, &chk);
        wrong += (long)chk.wrong;
        if (!(chk.rel_err <= relerr)) relerr = chk.rel_err;
      } else {
        wrong += 1;
      }
      pthread_mutex_lock(&b->mu);
      b->wrong[vi] += wrong + bad;
      if (!(relerr <= b->relerr[vi])) b->relerr[vi] = relerr;
      pthread_mutex_unlock(&b->mu);
      if (bad) plan_ok = 0;
    }
    live[vi] = agree_ok(b, hr, &b->failed[vi], plan_ok); /* every rank calls it: no short circuit */
  }

  /* Timed calls. vi = -1 is the local GEMM alone on all blocks (1 rank: the fused kernel's protocol
   * overhead is measured against it). live[] does not change in the loop, so all ranks make the same
   * calls in the same order. Consecutive calls take different input sets (the previous call's inputs
   * may still sit in L2); the counter advances alike on every rank. */
  gemm_out = harness_dev_alloc((size_t)b->M * b->N * e);
  /* vi = -2 is cuBLASLt alone on the local shape: the baseline's GEMM part, from which the summary
   * derives the reduce-scatter's time (baseline - GEMM) and the share of it a fused kernel hides. Its
   * plan is agreed like the variants' (a rank that cannot plan it makes every rank skip it). */
  weave_lt_t *lt = NULL;
  char lt_msg[256] = "";
  int lt_ok = weave_lt_create(b->M, b->N, K, b->dtype, b->dtype, b->layout, 0, &lt, lt_msg, sizeof(lt_msg)) ==
              WEAVE_SUCCESS;
  if (!lt_ok) fprintf(stderr, "rank %d: cuBLASLt alone not measured: %s\n", r, lt_msg);
  const int lt_live = agree_ok(b, hr, &b->lt_failed, lt_ok);
  int reported[MAX_STRATS + 64] = {0}, call = 0;
  for (int it = 0; it < b->warmup + n; ++it) {
    for (int vi = -2; vi < b->nv; ++vi) {
      if ((vi >= 0 && !live[vi]) || (vi == -2 && !lt_live)) continue;
      const int s = call++ % nsets;
      weave_barrier(hr->team); /* ranks start each call together */
      harness_timer_start(tm, hr->stream);
      if (vi == -2)
        weave_lt_run(lt, 1.0f, dA[s], dB[s], gemm_out, hr->stream);
      else if (vi == -1)
        weave_gemm(b->M, b->N, K, b->dtype, b->layout, 1.0f, dA[s], dB[s], NULL, gemm_out, 0, hr->stream);
      else
        weave_gemm_rs_execute(plan[vi], dA[s], dB[s], NULL, dC, hr->stream);
      harness_timer_stop(tm, hr->stream);
      float ms = harness_timer_ms(tm);
      /* The team's device error record is shared by all plans: read it after every call (outside the
       * timed span) so that a timeout is charged to the plan that ran. */
      if (vi >= 0 && weave_team_sync(hr->team, hr->stream) != WEAVE_SUCCESS) {
        if (!reported[vi]) fprintf(stderr, "rank %d %s: %s\n", r, b->v[vi].label, weave_get_last_error(hr->team));
        reported[vi] = 1;
        pthread_mutex_lock(&b->mu);
        b->failed[vi] = 1;
        pthread_mutex_unlock(&b->mu);
      }
      if (it >= b->warmup) {
        double *row = vi == -2 ? b->lt_alone_ms[r] : vi == -1 ? b->gemm_alone_ms[r] : b->ms[vi][r];
        row[it - b->warmup] = ms;
      }
    }
  }
  harness_dev_free(gemm_out);
  weave_lt_destroy(lt);

  for (int vi = 0; vi < b->nv; ++vi) {
    if (!plan[vi]) continue;
    if (b->v[vi].trace) { /* the traced variant's last call */
      size_t cap = 4 * (size_t)(b->info[vi][r].tiles_total + b->info[vi][r].tiles_owned) + 256, got = 0;
      b->tev[r] = (weave_trace_event_t *)calloc(cap, sizeof(weave_trace_event_t));
      if (weave_gemm_rs_trace_fetch(plan[vi], hr->stream, b->tev[r], cap, &got) == WEAVE_SUCCESS)
        b->tcount[r] = got < cap ? got : cap;
      b->traced_vi = vi;
    }
  }
  for (int vi = 0; vi < b->nv; ++vi) /* collective: the same plans in the same order on every rank */
    if (plan[vi]) weave_gemm_rs_plan_destroy(plan[vi]);
  for (int s = 0; s < nsets; ++s) {
    harness_dev_free(dA[s]);
    harness_dev_free(dB[s]);
  }
  harness_dev_free(dC);
  harness_timer_destroy(tm);
  free(hA);
  free(hB);
  free(hC);
  free(ref);
  free(ref_full);
  return 0;
}

/* Per call: the slowest rank; then the median over calls. */
static double call_median(double per_rank[][256], int world, int n) {
  double v[256];
  for (int i = 0; i < n; ++i) {
    v[i] = 0;
    for (int r = 0; r < world; ++r)
      if (per_rank[r][i] > v[i]) v[i] = per_rank[r][i];
  }
  return harness_median(v, n);
}

static bench_variant_t *add_variant(bench_t *b, weave_strategy_t s, weave_reduce_t red, weave_dtype_t slot, int g,
                                    int c) {
  bench_variant_t *v = &b->v[b->nv++];
  v->strategy = s;
  v->reduce = red;
  v->slot = slot;
  v->gemm_blocks = g;
  v->comm_blocks = c;
  static char labels[MAX_STRATS + 64][64];
  char *l = labels[b->nv - 1];
  if (s == WEAVE_STRATEGY_FUSED)
    snprintf(l, 64, "fused/%s/%s%s", red == WEAVE_REDUCE_ATOMIC ? "atomic" : "det",
             red == WEAVE_REDUCE_ATOMIC ? "f32" : weave_dtype_name(slot), g ? "*" : "");
  else if (s == WEAVE_STRATEGY_BULK) snprintf(l, 64, "bulk/%s", weave_dtype_name(slot));
  else snprintf(l, 64, "%s", weave_strategy_name(s));
  v->label = l;
  return v;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--op") && i + 1 < argc) {
      if (!strcmp(argv[i + 1], "gemm")) return weave_bench_gemm_main(argc, argv);
      if (strcmp(argv[i + 1], "gemm_rs")) {
        fprintf(stderr, "unknown --op %s (gemm_rs, gemm)\n", argv[i + 1]);
        return 2;
      }
    }
  static bench_t b;
  memset(&b, 0, sizeof(b));
  b.M = 8192; b.N = 8192; b.K_total = 28672; b.world = 1;
  b.dtype = WEAVE_BF16; b.layout = WEAVE_LAYOUT_ROW;
  b.iters = 20; b.warmup = 5; b.check = 1;
  int minM = 0, maxM = 0, tune = 0, gb = 0, cb = 0, ndev_list = 0;
  double factor = 2;
  const char *strategy = "all", *reduce = "both", *slot = "dtype", *json = NULL;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEXT() (val ? (i++, val) : (usage(), exit(2), ""))
    if (!strcmp(a, "-M")) b.M = atoi(NEXT());
    else if (!strcmp(a, "-N")) b.N = atoi(NEXT());
    else if (!strcmp(a, "-K")) b.K_total = atoi(NEXT());
    else if (!strcmp(a, "-g")) b.world = atoi(NEXT());
    else if (!strcmp(a, "--devices")) ndev_list = parse_devices(NEXT(), b.devices);
    else if (!strcmp(a, "-d")) { if (weave_dtype_parse(NEXT(), &b.dtype)) { usage(); return 2; } }
    else if (!strcmp(a, "--layout")) b.layout = !strcmp(NEXT(), "col") ? WEAVE_LAYOUT_COL : WEAVE_LAYOUT_ROW;
    else if (!strcmp(a, "--strategy")) strategy = NEXT();
    else if (!strcmp(a, "--reduce")) reduce = NEXT();
    else if (!strcmp(a, "--slot")) slot = NEXT();
    else if (!strcmp(a, "--order")) b.order = !strcmp(NEXT(), "own-first") ? WEAVE_ORDER_OWN_FIRST : WEAVE_ORDER_OWN_LAST;
    else if (!strcmp(a, "--gemm-blocks")) gb = atoi(NEXT());
    else if (!strcmp(a, "--comm-blocks")) cb = atoi(NEXT());
    else if (!strcmp(a, "-b")) minM = atoi(NEXT());
    else if (!strcmp(a, "-e")) maxM = atoi(NEXT());
    else if (!strcmp(a, "-f")) factor = atof(NEXT());
    else if (!strcmp(a, "-n")) b.iters = atoi(NEXT());
    else if (!strcmp(a, "-w")) b.warmup = atoi(NEXT());
    else if (!strcmp(a, "-c")) b.check = atoi(NEXT());
    else if (!strcmp(a, "-J")) json = NEXT();
    else if (!strcmp(a, "--tune")) tune = 1;
    else if (!strcmp(a, "--trace")) b.trace_path = NEXT();
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
    else if (!strcmp(a, "--version")) {
      int v[3];
      weave_get_version(&v[0], &v[1], &v[2]);
      printf("weave-bench %d.%d.%d\n", v[0], v[1], v[2]);
      return 0;
    }
    else { fprintf(stderr, "unknown argument %s\n", a); usage(); return 2; }
  }
  if (b.world < 1 || b.world > WEAVE_MAX_WORLD || b.M < 1 || b.N < 1 || b.K_total < b.world || b.iters < 1 ||
      b.iters > 256 || b.warmup < 0 || factor <= 1.0 || (ndev_list && ndev_list != b.world)) {
    fprintf(stderr, "weave-bench: bad arguments (ranks 1..%d, K >= ranks, -n 1..256, --devices one per rank)\n",
            WEAVE_MAX_WORLD);
    return 2;
  }
  if (b.K_total % b.world) {
    fprintf(stderr, "weave-bench: K %d is not a multiple of the ranks %d\n", b.K_total, b.world);
    return 2;
  }
  int ndev = harness_device_count();
  if (!ndev_list)
    for (int r = 0; r < b.world; ++r) b.devices[r] = ndev ? r % ndev : 0;
  /* -b/-e default to -M: "-e 16384" alone sweeps from -M up, "-b 1024" alone from there up to -M */
  if (minM == 0) minM = maxM ? (maxM < b.M ? maxM : b.M) : b.M;
  if (maxM == 0) maxM = minM > b.M ? minM : b.M;
  if (maxM < minM) maxM = minM;

  /* The variants first: the symmetric heap below is sized for all of them (--tune's included). */
  int all = !strcmp(strategy, "all");
  weave_dtype_t slot_t = !strcmp(slot, "fp32") ? WEAVE_FP32 : b.dtype;
  int want_det = strcmp(reduce, "atomic") != 0, want_atomic = strcmp(reduce, "det") != 0;
  add_variant(&b, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, b.dtype, 0, 0);
  if (all || !strcmp(strategy, "fused")) {
    if (want_det) add_variant(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot_t, gb, cb);
    if (want_det && all && b.dtype != WEAVE_FP32 && slot_t != WEAVE_FP32)
      add_variant(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, gb, cb);
    if (want_atomic) add_variant(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, b.dtype, gb, cb);
  }
  if (b.trace_path) { /* the deterministic fused kernel once more, traced: overhead and timeline */
    bench_variant_t *tv = add_variant(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot_t, gb, cb);
    tv->trace = 1;
    tv->label = "fused/det +trace";
  }
  if (all || !strcmp(strategy, "bulk")) add_variant(&b, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, slot_t, 0, 0);
  if (all || !strcmp(strategy, "auto")) add_variant(&b, WEAVE_STRATEGY_AUTO, WEAVE_REDUCE_DETERMINISTIC, b.dtype, 0, 0);
  if (tune) { /* sweep the split of the deterministic fused kernel */
    /* The plan's budget: the SMs less one per rank when ranks share a GPU, shared by those ranks. */
    int sms = 132, ranks_here = 0;
    int dev0 = b.devices[0];
    for (int r = 0; r < b.world; ++r) ranks_here += b.devices[r] == dev0;
    if (ndev > 0) {
      int n = harness_sm_count(dev0);
      if (n > 0) sms = n;
    }
    int budget_guess = (sms - (ranks_here > 1 ? ranks_here : 0)) / ranks_here;
    for (int c = 1; c < budget_guess && b.nv < MAX_STRATS + 60; c = c < 4 ? c + 1 : c * 3 / 2)
      add_variant(&b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot_t, budget_guess - c, c);
  }

  /* All plans of a run are alive at once (round-robin timing), so the symmetric heap must hold every
   * variant's memory at the largest M: at most world slots of ceil(M/world) x N fp32 each (the
   * deterministic kernel with fp32 slots; the others need as much or less), +25% and 256 MiB for
   * flags, control words and alignment. Set before the teams, which read it at creation; a value
   * the user set wins. */
  char heap_note[160];
  const char *heap_env = getenv("WEAVE_HEAP_SIZE");
  if (heap_env && *heap_env) {
    snprintf(heap_note, sizeof(heap_note), "%s (WEAVE_HEAP_SIZE as set)", heap_env);
  } else {
    double per_variant = (double)b.world * (double)(((long)maxM + b.world - 1) / b.world) * b.N * 4.0;
    double mib = ceil((b.nv * per_variant * 1.25 + 256.0 * 1048576.0) / 1048576.0);
    unsigned long long heap_mib = mib < 1024 ? 1024 : (unsigned long long)mib;
    char val[32];
    snprintf(val, sizeof(val), "%lluM", heap_mib);
    setenv("WEAVE_HEAP_SIZE", val, 1);
    snprintf(heap_note, sizeof(heap_note), "%s (for %d variants at M=%d; set WEAVE_HEAP_SIZE to override)", val, b.nv,
             maxM);
  }

  printf("# weave-bench  GEMM + ReduceScatter   %s\n", weave_dtype_name(b.dtype));
  printf("# M %d..%d (x%.2g)  N %d  K_total %d  ranks %d  B %s  iters %d  warmup %d  check %d\n", minM, maxM, factor,
         b.N, b.K_total, b.world, b.layout == WEAVE_LAYOUT_ROW ? "[K,N]" : "[N,K]", b.iters, b.warmup, b.check);
  printf("# rank -> device:");
  for (int r = 0; r < b.world; ++r) printf(" %d->%d", r, b.devices[r]);
  printf("\n");
  printf("# symmetric heap per rank: %s\n", heap_note);
  printf("# variants timed round-robin (one call of each per iteration), median over iterations of the slowest rank\n");
  if (ndev == 0) {
    printf("# no CUDA device visible (the driver reports none): printing the plan and roofline only\n");
    b.M = minM;
    print_dry(&b);
    return 0;
  }

  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "weave-bench: cannot write %s\n", json);
    return 2;
  }
  if (jf) fprintf(jf, "{\"bench\":\"gemm_rs\",\"dtype\":\"%s\",\"N\":%d,\"K_total\":%d,\"ranks\":%d,\"rows\":[\n",
                  weave_dtype_name(b.dtype), b.N, b.K_total, b.world);
  long total_wrong = 0;
  int first_row = 1;
  for (long M = minM; M <= maxM; M = (long)ceil(M * factor)) {
    b.M = (int)M;
    memset(b.wrong, 0, sizeof(b.wrong));
    memset(b.relerr, 0, sizeof(b.relerr));
    memset(b.failed, 0, sizeof(b.failed));
    b.lt_failed = 0;
    pthread_mutex_init(&b.mu, NULL);
    b.seed = harness_seed();
    int rc = harness_run(b.world, b.devices, NULL, rank_fn, &b);
    if (rc == HARNESS_SKIP) {
      printf("# no usable device: plan and roofline only\n");
      print_dry(&b);
      return 0;
    }
    if (rc) return 1;
    int n = b.iters;
    double flops = 2.0 * b.M * (double)b.N * b.K_total;
    int gpus = 0;
    for (int r = 0; r < b.world; ++r) {
      int seen = 0;
      for (int q = 0; q < r; ++q) seen |= b.devices[q] == b.devices[r];
      gpus += !seen;
    }
    double t_gemm = call_median(b.gemm_alone_ms, b.world, n);
    double t_base = call_median(b.ms[0], b.world, n);
    double t_lt = b.lt_failed ? 0.0 : call_median(b.lt_alone_ms, b.world, n); /* 0: not measured */
    printf("# %s, %d SMs, %d rank(s) on %d GPU(s); weave_gemm alone (K_local, all blocks): %.3f ms\n", b.device_name,
           b.sm_count, b.world, gpus, t_gemm);
    printf("#%8s %-18s %6s %6s %10s %10s %9s %9s %8s %8s %9s\n", "M", "strategy", "gemm", "comm", "time(ms)",
           "TFLOP/s", "algbw", "busbw", "#wrong", "speedup", b.check ? "relerr" : "");
    double best = 1e30;
    int best_v = 0;
    for (int vi = 0; vi < b.nv; ++vi) {
      if (b.failed[vi]) {
        printf(" %8d %-18s %s\n", b.M, b.v[vi].label, "failed (see the message above)");
        total_wrong++;
        continue;
      }
      double t = call_median(b.ms[vi], b.world, n);
      double tf = flops / gpus / (t * 1e-3) / 1e12;
      double algbw = (double)b.M * b.N * weave_dtype_size(b.dtype) / (t * 1e-3) / 1e9;
      double busbw = algbw * (b.world - 1) / b.world;
      printf(" %8d %-18s %6d %6d %10.3f %10.1f %9.1f %9.1f %8ld %7.2fx", b.M, b.v[vi].label,
             b.info[vi][0].gemm_blocks, b.info[vi][0].comm_blocks, t, tf, algbw, busbw, b.wrong[vi], t_base / t);
      if (b.check) printf(" %9.2e", b.relerr[vi]);
      printf("\n");
      total_wrong += b.wrong[vi];
      if (b.v[vi].strategy != WEAVE_STRATEGY_AUTO && t < best) {
        best = t;
        best_v = vi;
      }
      if (jf)
        fprintf(jf,
                "%s{\"M\":%d,\"strategy\":\"%s\",\"gemm_blocks\":%d,\"comm_blocks\":%d,\"time_ms\":%.5f,"
                "\"tflops_per_gpu\":%.2f,\"algbw_GBps\":%.2f,\"busbw_GBps\":%.2f,\"wrong\":%ld,\"speedup\":%.4f,"
                "\"rel_err\":%.3e,\"gemm_alone_ms\":%.5f,\"lt_alone_ms\":%.5f,\"device\":\"%s\",\"gpus\":%d}",
                first_row ? "" : ",\n", b.M, b.v[vi].label, b.info[vi][0].gemm_blocks, b.info[vi][0].comm_blocks, t,
                tf, algbw, busbw, b.wrong[vi], t_base / t, b.relerr[vi], t_gemm,
                t_lt, b.device_name, gpus);
      first_row = 0;
    }
    if (!b.lt_failed && !b.failed[0]) {
      /* The baseline is GEMM then reduce-scatter: t_rs = t_baseline - t_gemm (cuBLASLt alone), and a
       * fused variant hides (t_gemm + t_rs - t_fused) / t_rs of it (1: all, 0: none, < 0: slower). */
      double t_rs = t_base - t_lt;
      printf("# cuBLASLt alone (local GEMM, all ranks at once): %.3f ms; reduce-scatter part of the baseline: %.3f ms\n",
             t_lt, t_rs);
      if (t_rs > 0.01 * t_base)
        for (int vi = 0; vi < b.nv; ++vi)
          if (!b.failed[vi] && b.v[vi].strategy == WEAVE_STRATEGY_FUSED)
            printf("#   %-18s hides %5.2f of the reduce-scatter\n", b.v[vi].label,
                   (t_lt + t_rs - call_median(b.ms[vi], b.world, n)) / t_rs);
    }
    if (b.trace_path && b.tcount[0]) {
      char title[512], csv[600];
      snprintf(title, sizeof(title), "weave fused GEMM+RS M=%d N=%d K=%d, %d rank(s), %s", b.M, b.N, b.K_total, b.world,
               b.device_name);
      const weave_trace_event_t *per[WEAVE_MAX_WORLD];
      for (int r = 0; r < b.world; ++r) per[r] = b.tev[r];
      snprintf(csv, sizeof(csv), "%s.csv", b.trace_path);
      if (weave_trace_write_json(b.trace_path, per, b.tcount, b.world, title) || weave_trace_write_csv(csv, per, b.tcount, b.world, title))
        fprintf(stderr, "weave-bench: cannot write %s / %s\n", b.trace_path, csv);
      else
        printf("# trace of the last '%s' call: %s (ui.perfetto.dev), %s (scripts/trace_png.sh)\n",
               b.v[b.traced_vi].label, b.trace_path, csv);
      for (int r = 0; r < b.world; ++r) {
        weave_trace_summary_t s;
        weave_trace_summary(b.tev[r], b.tcount[r], b.info[b.traced_vi][r].gemm_blocks,
                            b.info[b.traced_vi][r].comm_blocks, &s);
        weave_trace_print_summary(stdout, r, &s);
        free(b.tev[r]);
        b.tev[r] = NULL;
        b.tcount[r] = 0;
      }
    }
    if (tune) {
      const char *path = getenv("WEAVE_TUNE_FILE");
      weave_tune_entry_t te;
      memset(&te, 0, sizeof(te));
      snprintf(te.device, sizeof(te.device), "%s", b.device_name);
      te.world = b.world;
      te.m_bucket = weave_tune_bucket(b.M);
      te.N = b.N;
      te.K = b.K_total / b.world;
      te.dtype = b.dtype;
      te.strategy = b.v[best_v].strategy;
      te.gemm_blocks = te.strategy == WEAVE_STRATEGY_FUSED ? b.info[best_v][0].gemm_blocks : 0;
      te.comm_blocks = te.strategy == WEAVE_STRATEGY_FUSED ? b.info[best_v][0].comm_blocks : 0;
      te.speedup = t_base / best;
      if (path && *path && weave_tune_append(path, &te) == 0)
        printf("# tune: %s %s G=%d C=%d (%.2fx) -> %s\n", b.v[best_v].label, weave_strategy_name(te.strategy),
               te.gemm_blocks, te.comm_blocks, te.speedup, path);
      else
        printf("# tune: best %s (%.2fx); set WEAVE_TUNE_FILE to record it\n", b.v[best_v].label, te.speedup);
    }
    if (M >= maxM) break;
  }
  if (jf) {
    fprintf(jf, "\n]}\n");
    fclose(jf);
  }
  printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  return total_wrong ? 1 : 0;
}
