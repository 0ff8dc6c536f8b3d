/*
 * weave-bench --op ag_gemm: AllGather + GEMM, every strategy against the baseline (cuBLASLt after an
 * all-gather: NCCL's where every rank has a GPU of its own, weave's otherwise) in the same run.
 * Per M: one plan per strategy on every rank, warm-up calls, then n rounds in which each strategy runs
 * once per round (interleaved, in an order shuffled per round), timed with CUDA events on each rank's stream; the time of a strategy
 * is the slowest rank's median. Every strategy's C is compared with the baseline's (#wrong: elements
 * off by more than the dtype's tolerance for K; NaN counts). A is random, B and bias too, different
 * per rank. fp8 (-d fp8): e4m3 A and B [N, K], per-tensor scales that differ by rank, bf16 output,
 * fp32 accumulation unless --fp8-accum fast.
 * Usage: weave-bench --op ag_gemm [-M m]... [-b first -e last -f factor] [-N n_local] [-K k] [-g ranks]
 *        [-d bf16|fp16|fp8] [--fp8-accum fp32|fast] [-l col|row] [-n rounds] [-w warmup]
 *        [--comm-blocks c] [-J file.json]
 *        (--comm-blocks: the fused kernel's communication blocks, the rest of the rank's share its GEMM
 *        blocks; 0: none, the GEMM blocks push the rows first)
 *        (-J: the table as JSON, one object a row; one GPU per rank
 *        where there are enough, else ranks share GPU 0.. round robin)
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "bench_support.h"
#include "json_writer.h"
#include "reference.h"
#include "weave.h"

int weave_bench_ag_main(int argc, char **argv);

#define AG_MAX_M 16
#define AG_NSTRAT 4
#define AG_MAX_ROUNDS 200

static const weave_strategy_t ag_strats[AG_NSTRAT] = {WEAVE_STRATEGY_BASELINE, WEAVE_STRATEGY_FUSED,
                                                      WEAVE_STRATEGY_BULK, WEAVE_STRATEGY_AUTO};

typedef struct {
  int Ms[AG_MAX_M], nM, N, K, world, rounds, warmup, comm_blocks, fast_accum;
  weave_dtype_t dtype, out; /* out: C and bias (bf16 for fp8) */
  weave_layout_t layout;
  int M;                                 /* the one being run */
  double ms[WEAVE_MAX_WORLD][AG_NSTRAT]; /* each rank's median */
  long wrong[WEAVE_MAX_WORLD][AG_NSTRAT];
  int ok[WEAVE_MAX_WORLD][AG_NSTRAT];
  char why[AG_NSTRAT][160];
  weave_strategy_t resolved[AG_NSTRAT];
  int fused_gemm_blocks, fused_comm_blocks, fused_cta_pairs; /* rank 0's fused plan (JSON) */
} ag_bench_t;

static int ag_usage(const char *msg) {
  fprintf(stderr, "weave-bench --op ag_gemm: %s\n", msg);
  return 2;
}

/* An integer flag's value in [lo, hi], else a message naming the flag and the value. */
static int ag_int(const char *flag, const char *v, long lo, long hi, int *out) {
  char *end = NULL;
  const long n = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || n < lo || n > hi) {
    fprintf(stderr, "weave-bench --op ag_gemm: %s %s: expected an integer in [%ld, %ld]\n", flag, v ? v : "(missing)",
            lo, hi);
    return 0;
  }
  *out = (int)n;
  return 1;
}

static int ag_rank(harness_rank_t *r) {
  ag_bench_t *b = (ag_bench_t *)r->user;
  const int M = b->M, N = b->N, K = b->K;
  const size_t e = weave_dtype_size(b->dtype), o = weave_dtype_size(b->out);
  const int fp8 = b->dtype == WEAVE_FP8_E4M3;
  int rb, rows;
  weave_row_split(M, r->world, r->rank, &rb, &rows);
  void *A = harness_dev_alloc(rows ? (size_t)rows * K * e : 16), *B = harness_dev_alloc((size_t)N * K * e);
  void *bias = harness_dev_alloc((size_t)N * o), *C[AG_NSTRAT];
  void *h = malloc((size_t)(rows ? rows : 1) * K * e + (size_t)N * K * e + (size_t)N * o);
  weave_fill_random(b->dtype, h, (size_t)rows * K, 1000u + (uint64_t)r->rank);
  harness_upload(A, h, (size_t)rows * K * e);
  weave_fill_random(b->dtype, h, (size_t)N * K, 2000u + (uint64_t)r->rank);
  harness_upload(B, h, (size_t)N * K * e);
  weave_fill_random(b->out, h, (size_t)N, 3000u + (uint64_t)r->rank);
  harness_upload(bias, h, (size_t)N * o);
  free(h);
  /* fp8: per-tensor scales, a rank's own (they differ by rank: each gathered row keeps its owner's) */
  float *scales = fp8 ? (float *)harness_dev_alloc(8) : NULL;
  if (scales) {
    const float s2[2] = {0.5f + 0.25f * (float)(r->rank % 4), 0.75f};
    harness_upload(scales, s2, sizeof s2);
  }
  weave_ag_gemm_plan_t plan[AG_NSTRAT];
  int rc = 0;
  for (int s = 0; s < AG_NSTRAT; ++s) {
    weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
    d.dtype = b->dtype;
    d.b_layout = b->layout;
    d.strategy = ag_strats[s];
    d.has_bias = 1;
    if (fp8) {
      d.out_dtype = b->out;
      d.scale_mode = WEAVE_SCALE_TENSOR;
      d.fp8_accum = b->fast_accum ? WEAVE_FP8_ACCUM_FAST : WEAVE_FP8_ACCUM_FP32;
    }
    if (b->comm_blocks >= 0 && ag_strats[s] == WEAVE_STRATEGY_FUSED) {
      weave_device_info_t info;
      weave_team_device_info(r->team, &info);
      d.comm_blocks = b->comm_blocks;
      d.gemm_blocks = bench_rank_blocks(info.sm_count, info.ranks_on_device) - b->comm_blocks; /* one per SM */
    }
    C[s] = harness_dev_alloc((size_t)M * N * o);
    b->ok[r->rank][s] = weave_ag_gemm_plan_create(r->team, M, N, K, &d, &plan[s]) == WEAVE_SUCCESS;
    if (!b->ok[r->rank][s]) {
      if (r->rank == 0) fprintf(stderr, "# %s: %s\n", weave_strategy_name(ag_strats[s]), weave_get_last_error(r->team));
      plan[s] = NULL;
      continue;
    }
    weave_ag_gemm_info_t info;
    weave_ag_gemm_plan_info(plan[s], &info);
    if (r->rank == 0) {
      b->resolved[s] = info.strategy;
      snprintf(b->why[s], sizeof(b->why[s]), "%s", info.why);
      if (ag_strats[s] == WEAVE_STRATEGY_FUSED) {
        b->fused_gemm_blocks = info.gemm_blocks;
        b->fused_comm_blocks = info.comm_blocks;
        b->fused_cta_pairs = info.cta_pairs;
      }
    }
  }
  harness_timer_t *tm = harness_timer_create();
  double *t[AG_NSTRAT];
  for (int s = 0; s < AG_NSTRAT; ++s) t[s] = (double *)calloc((size_t)b->rounds, sizeof(double));
  int order[AG_NSTRAT];
  unsigned rng = 12345u; /* the same order on every rank: the calls are collective */
  for (int round = -b->warmup; round < b->rounds && !rc; ++round) {
    harness_shuffle(order, AG_NSTRAT, &rng); /* no strategy keeps one neighbour */
    for (int q = 0; q < AG_NSTRAT && !rc; ++q) {
      const int s = order[q];
      if (!plan[s]) continue;
      harness_timer_start(tm, r->stream);
      const weave_result_t ex = fp8 ? weave_ag_gemm_execute_scaled(plan[s], rows ? A : NULL, B, scales, scales + 1,
                                                                   bias, C[s], NULL, r->stream)
                                    : weave_ag_gemm_execute(plan[s], rows ? A : NULL, B, bias, C[s], NULL, r->stream);
      if (ex != WEAVE_SUCCESS) {
        fprintf(stderr, "# rank %d %s: %s\n", r->rank, weave_strategy_name(ag_strats[s]),
                weave_get_last_error(r->team));
        rc = 1;
        break;
      }
      harness_timer_stop(tm, r->stream);
      const double ms = harness_timer_ms(tm);
      if (round >= 0) t[s][round] = ms;
    }
  }
  if (weave_team_sync(r->team, r->stream) != WEAVE_SUCCESS) {
    fprintf(stderr, "# rank %d: %s\n", r->rank, weave_get_last_error(r->team));
    rc = 1;
  }
  /* every strategy's C against the baseline's */
  void *ref = malloc((size_t)M * N * o), *got = malloc((size_t)M * N * o);
  double *refd = (double *)malloc((size_t)M * N * sizeof(double)), atol, rtol;
  weave_tolerance(b->out, K, &atol, &rtol);
  if (plan[0]) {
    harness_download(ref, C[0], (size_t)M * N * o);
    for (size_t i = 0; i < (size_t)M * N; ++i) refd[i] = weave_host_get(b->out, ref, i);
  }
  for (int s = 0; s < AG_NSTRAT; ++s) {
    b->ms[r->rank][s] = plan[s] && !rc ? harness_median(t[s], b->rounds) : -1;
    b->wrong[r->rank][s] = -1;
    if (plan[s] && plan[0] && !rc) {
      weave_check_t chk;
      harness_download(got, C[s], (size_t)M * N * o);
      weave_check_result(b->out, got, refd, (size_t)M * N, 2 * atol, 2 * rtol, &chk);
      b->wrong[r->rank][s] = (long)chk.wrong;
    }
    if (plan[s]) weave_ag_gemm_plan_destroy(plan[s]);
    harness_dev_free(C[s]);
    free(t[s]);
  }
  free(ref);
  free(got);
  free(refd);
  harness_timer_destroy(tm);
  harness_dev_free(A);
  harness_dev_free(B);
  harness_dev_free(bias);
  harness_dev_free(scales);
  return rc;
}

int weave_bench_ag_main(int argc, char **argv) {
  static ag_bench_t b;
  b.N = 8192;
  b.K = 8192;
  b.world = 0;
  b.rounds = 20;
  b.warmup = 5;
  b.dtype = WEAVE_BF16;
  b.layout = WEAVE_LAYOUT_COL;
  b.comm_blocks = -1; /* the planner's split */
  int first = 0, last = 0, factor = 2;
  const char *json_path = NULL;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--op")) {
      ++i;
      continue;
    }
    int ok = 1, m;
    if (!strcmp(a, "-M")) {
      if ((ok = ag_int(a, v, 1, 1 << 24, &m)) && b.nM >= AG_MAX_M) return ag_usage("-M: at most 16 values");
      if (ok) b.Ms[b.nM++] = m;
    } else if (!strcmp(a, "-b"))
      ok = ag_int(a, v, 1, 1 << 24, &first);
    else if (!strcmp(a, "-e"))
      ok = ag_int(a, v, 1, 1 << 24, &last);
    else if (!strcmp(a, "-f"))
      ok = ag_int(a, v, 2, 1024, &factor);
    else if (!strcmp(a, "-N"))
      ok = ag_int(a, v, 1, 1 << 24, &b.N);
    else if (!strcmp(a, "-K"))
      ok = ag_int(a, v, 1, 1 << 24, &b.K);
    else if (!strcmp(a, "-g"))
      ok = ag_int(a, v, 1, WEAVE_MAX_WORLD, &b.world);
    else if (!strcmp(a, "-n"))
      ok = ag_int(a, v, 1, AG_MAX_ROUNDS, &b.rounds);
    else if (!strcmp(a, "-w"))
      ok = ag_int(a, v, 0, 1000, &b.warmup);
    else if (!strcmp(a, "--comm-blocks"))
      ok = ag_int(a, v, 0, 1024, &b.comm_blocks);
    else if (!strcmp(a, "-J")) {
      if (!v || !*v) return ag_usage("-J: a file name");
      json_path = v;
    } else if (!strcmp(a, "-d")) {
      if (v && !strcmp(v, "bf16"))
        b.dtype = WEAVE_BF16;
      else if (v && !strcmp(v, "fp16"))
        b.dtype = WEAVE_FP16;
      else if (v && !strcmp(v, "fp8"))
        b.dtype = WEAVE_FP8_E4M3;
      else
        return ag_usage("-d: bf16, fp16 or fp8");
    } else if (!strcmp(a, "--fp8-accum")) {
      if (v && (!strcmp(v, "fp32") || !strcmp(v, "fast")))
        b.fast_accum = !strcmp(v, "fast");
      else
        return ag_usage("--fp8-accum: fp32 or fast");
    } else if (!strcmp(a, "-l")) {
      if (v && !strcmp(v, "col"))
        b.layout = WEAVE_LAYOUT_COL;
      else if (v && !strcmp(v, "row"))
        b.layout = WEAVE_LAYOUT_ROW;
      else
        return ag_usage("-l: col or row");
    } else {
      fprintf(stderr,
              "weave-bench --op ag_gemm: unknown option %s (-M -b -e -f -N -K -g -n -w -d --fp8-accum -l "
              "--comm-blocks -J)\n",
              a);
      return 2;
    }
    if (!ok) return 2;
    ++i;
  }
  b.out = b.dtype == WEAVE_FP8_E4M3 ? WEAVE_BF16 : b.dtype;
  if (b.dtype == WEAVE_FP8_E4M3 && b.layout != WEAVE_LAYOUT_COL) return ag_usage("-d fp8: B [N, K] only (-l col)");
  if (b.fast_accum && b.dtype != WEAVE_FP8_E4M3) return ag_usage("--fp8-accum: for -d fp8 only");
  if (first > 0) {
    if (last < first) return ag_usage("-b/-e: -e (last M) must be >= -b (first M)");
    for (long m = first; m <= last && b.nM < AG_MAX_M; m *= factor) b.Ms[b.nM++] = (int)m;
  }
  if (!b.nM) b.Ms[b.nM++] = 8192;
  const int ndev = harness_device_count();
  if (ndev == 0) {
    const int world = b.world ? b.world : 8;
    printf("weave-bench --op ag_gemm: no CUDA device: nothing to time; the roofline instead\n");
    bench_print_ag_roofline(stdout, b.Ms, b.nM, b.N, b.K, world, b.dtype);
    return 0;
  }
  const int launched = harness_launched_world();
  if (launched < 0) return 1;
  if (launched) b.world = launched;
  if (!b.world) b.world = ndev;
  int devices[WEAVE_MAX_WORLD];
  for (int r = 0; r < b.world; ++r) devices[r] = r % ndev;
  const int printer = harness_launched_rank() == 0;
  if (printer)
    printf(
        "# weave-bench --op ag_gemm: %d rank(s) on %d GPU(s), N %d per rank, K %d, %s, B %s, %d rounds (+%d "
        "warm-up), strategies interleaved in a shuffled order; ms = slowest rank's median\n"
        "#      M   baseline_ms   fused_ms   bulk_ms   auto_ms  base/fused  base/auto  auto->  #wrong(f,b,a)\n",
        b.world, ndev < b.world ? ndev : b.world, b.N, b.K, weave_dtype_name(b.dtype),
        b.layout == WEAVE_LAYOUT_COL ? "[N,K]" : "[K,N]", b.rounds, b.warmup);
  int fail = 0;
  FILE *jf = NULL;
  json_writer_t jw;
  if (json_path && printer) {
    if (!(jf = fopen(json_path, "w"))) {
      fprintf(stderr, "weave-bench --op ag_gemm: -J %s: cannot write it\n", json_path);
      return 2;
    }
    json_open(&jw, jf);
    json_begin_object(&jw);
    json_kv_string(&jw, "op", "ag_gemm");
    json_kv_int(&jw, "ranks", b.world);
    json_kv_int(&jw, "gpus", ndev < b.world ? ndev : b.world);
    json_kv_int(&jw, "N", b.N);
    json_kv_int(&jw, "K", b.K);
    json_kv_string(&jw, "dtype", weave_dtype_name(b.dtype));
    json_kv_string(&jw, "b_layout", b.layout == WEAVE_LAYOUT_COL ? "col" : "row");
    json_kv_int(&jw, "rounds", b.rounds);
    json_key(&jw, "rows");
    json_begin_array(&jw);
  }
  for (int mi = 0; mi < b.nM; ++mi) {
    b.M = b.Ms[mi];
    memset(b.ms, 0, sizeof(b.ms));
    /* room for every strategy's plan at once (each holds the gathered A) */
    weave_config_t cfg = WEAVE_CONFIG_INIT;
    cfg.heap_size = (size_t)AG_NSTRAT * ((size_t)b.M * b.K * weave_dtype_size(b.dtype) + (1u << 20)) + (64u << 20);
    const int rc = harness_run(b.world, devices, &cfg, ag_rank, &b);
    if (rc) {
      fail = 1;
      if (printer) printf("# M %d: a rank failed\n", b.M);
      continue;
    }
    if (!printer) continue;
    double ms[AG_NSTRAT];
    long wrong[AG_NSTRAT];
    const int r0 = launched ? harness_launched_rank() : 0, r1 = launched ? r0 + 1 : b.world;
    for (int s = 0; s < AG_NSTRAT; ++s) {
      ms[s] = 0;
      wrong[s] = 0;
      for (int r = r0; r < r1; ++r) {
        if (b.ms[r][s] < 0)
          ms[s] = -1;
        else if (ms[s] >= 0 && b.ms[r][s] > ms[s])
          ms[s] = b.ms[r][s];
        wrong[s] += b.wrong[r][s] < 0 ? 0 : b.wrong[r][s];
      }
    }
    printf("%8d %12.3f %10.3f %9.3f %9.3f %10.3f %10.3f  %-7s %ld,%ld,%ld\n", b.M, ms[0], ms[1], ms[2], ms[3],
           ms[0] > 0 && ms[1] > 0 ? ms[0] / ms[1] : 0, ms[0] > 0 && ms[3] > 0 ? ms[0] / ms[3] : 0,
           weave_strategy_name(b.resolved[3]), wrong[1], wrong[2], wrong[3]);
    if (wrong[1] || wrong[2] || wrong[3]) fail = 1;
    if (jf) {
      static const char *const names[AG_NSTRAT] = {"baseline", "fused", "bulk", "auto"};
      json_begin_object(&jw);
      json_kv_int(&jw, "M", b.M);
      for (int s = 0; s < AG_NSTRAT; ++s) {
        char key[32];
        snprintf(key, sizeof(key), "%s_ms", names[s]);
        json_kv_number(&jw, key, ms[s]);
        snprintf(key, sizeof(key), "%s_wrong", names[s]);
        json_kv_int(&jw, key, wrong[s]);
      }
      json_kv_string(&jw, "auto_strategy", weave_strategy_name(b.resolved[3]));
      json_kv_string(&jw, "auto_why", b.why[3]);
      json_kv_int(&jw, "fused_gemm_blocks", b.fused_gemm_blocks);
      json_kv_int(&jw, "fused_comm_blocks", b.fused_comm_blocks);
      json_kv_int(&jw, "fused_cta_pairs", b.fused_cta_pairs);
      json_end_object(&jw);
    }
  }
  if (jf) {
    json_end_array(&jw);
    json_end_object(&jw);
    fputc('\n', jf);
    fclose(jf);
  }
  return fail;
}
