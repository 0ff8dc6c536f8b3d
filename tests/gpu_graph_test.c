/*
 * A GEMM + ReduceScatter or AllGather + GEMM call captured in a CUDA graph and replayed: the call
 * counter (epoch) of the plan's protocol advances on the device, so every replay is a new call with
 * fresh flags.
 *
 * For each strategy (GEMM + ReduceScatter: fused deterministic, fused atomic, bulk, baseline;
 * AllGather + GEMM: fused, bulk, baseline): a plan of M=1003 N=520 K_local=256 (tails), one call made directly, then one call captured on each rank's stream
 * (thread-local capture: the other ranks' threads keep making CUDA calls) and replayed R times.
 * Every 100th replay runs on new inputs written in place (a stale partial of an earlier replay
 * cannot pass), into a poisoned output, and is checked against the fp64 CPU reference on sampled
 * rows; a direct call after the replays (new inputs again) checks that direct calls and replays
 * share one count. Ranks are threads of this process, or processes under a launcher.
 *
 * Usage: gpu_graph_test [--world N] [--replays R]. Exit 0 pass, 1 fail, 2 bad option, 77 no device.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cli.h"
#include "harness.h"
#include "reference.h"
#include "weave.h"

#define GRAPH_CHECK_EVERY 100

typedef struct {
  const char *name;
  weave_strategy_t strategy;
  weave_reduce_t reduce;
  weave_dtype_t dtype;
  weave_layout_t layout;
  int has_bias;
  float alpha;
  int ag; /* AllGather + GEMM: A one matrix whose rows the ranks hold, C every row on every rank */
} graph_case_t;

typedef struct {
  const graph_case_t *c;
  int M, N, K, replays;
  uint64_t seed;
  pthread_mutex_t mu;
  int failures;
  long checked;
} graph_run_t;

static void fail(graph_run_t *g, int rank, const char *what, const char *detail) {
  pthread_mutex_lock(&g->mu);
  g->failures++;
  fprintf(stderr, "FAIL [%s] rank %d: %s%s%s (seed 0x%llx)\n", g->c->name, rank, what, detail ? ": " : "",
          detail ? detail : "", (unsigned long long)g->seed);
  pthread_mutex_unlock(&g->mu);
}

/* Inputs of generation gen of rank r (every rank can make every rank's); AllGather + GEMM's A is
 * rank 0's, whose rows the ranks share out. */
static void make_A(const graph_run_t *g, int r, long gen, void *A) {
  if (g->c->ag) r = 0;
  weave_fill_random(g->c->dtype, A, (size_t)g->M * g->K, g->seed + (uint64_t)(r * 100003 + gen) * 2);
}
static void make_B(const graph_run_t *g, int r, long gen, void *B) {
  weave_fill_random(g->c->dtype, B, (size_t)g->K * g->N, g->seed + (uint64_t)(r * 100003 + gen) * 2 + 1);
}

/* This rank's rows of generation gen's result against fp64 on 3 ranges of up to 4 rows. */
static void check(graph_run_t *g, harness_rank_t *hr, long gen, const void *bias_h, const void *dC, int row_begin,
                  int rows, const char *when) {
  const weave_dtype_t dt = g->c->dtype;
  const size_t e = weave_dtype_size(dt);
  /* AllGather + GEMM: every row of A . B_rank, as one rank that holds every row and sums its own term */
  const int world = g->c->ag ? 1 : hr->world;
  if (g->c->ag) {
    row_begin = 0;
    rows = g->M;
  }
  void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) {
    As[r] = malloc((size_t)g->M * g->K * e);
    Bs[r] = malloc((size_t)g->K * g->N * e);
    make_A(g, r, gen, As[r]);
    make_B(g, g->c->ag ? hr->rank : r, gen, Bs[r]);
  }
  unsigned char *got = (unsigned char *)malloc((size_t)rows * g->N * e + 1);
  harness_download(got, dC, (size_t)rows * g->N * e);
  int begins[3];
  const int n = weave_sample_rows(rows, begins);
  weave_check_t res[3];
  weave_check_sampled_rows(g->M, g->N, g->K, world, dt, g->c->layout, g->c->alpha, (const void *const *)As,
                           (const void *const *)Bs, bias_h, row_begin, rows, got, res);
  for (int i = 0; i < 3; ++i)
    if (res[i].wrong) {
      char msg[200];
      snprintf(msg, sizeof(msg), "%s: rows %d..%d: %zu wrong (first at %zu, max abs err %g)", when,
               row_begin + begins[i], row_begin + begins[i] + n - 1, res[i].wrong, res[i].first_bad,
               res[i].max_abs_err);
      fail(g, hr->rank, "result", msg);
    }
  pthread_mutex_lock(&g->mu);
  g->checked++;
  pthread_mutex_unlock(&g->mu);
  free(got);
  for (int r = 0; r < world; ++r) {
    free(As[r]);
    free(Bs[r]);
  }
}

/* New inputs of generation gen in place and the output poisoned, on every rank before anyone
 * calls (the barrier: a rank's synchronous copy never overlaps a peer's call). */
static void refresh(graph_run_t *g, harness_rank_t *hr, long gen, void *hA, void *hB, void *dA, void *dB, void *dC,
                    int row_begin, int rows) {
  const size_t e = weave_dtype_size(g->c->dtype);
  make_A(g, hr->rank, gen, hA);
  make_B(g, hr->rank, gen, hB);
  if (g->c->ag) { /* this rank's rows of A in; every row of C out */
    if (rows) harness_upload(dA, (char *)hA + (size_t)row_begin * g->K * e, (size_t)rows * g->K * e);
    harness_poison(dC, (size_t)g->M * g->N * e, hr->stream);
  } else {
    harness_upload(dA, hA, (size_t)g->M * g->K * e);
    harness_poison(dC, (size_t)rows * g->N * e, hr->stream);
  }
  harness_upload(dB, hB, (size_t)g->K * g->N * e);
  harness_sync(hr->stream);
  weave_barrier(hr->team);
}

/* The case's plan: one of the two ops. */
typedef struct {
  weave_gemm_rs_plan_t rs;
  weave_ag_gemm_plan_t ag;
} any_plan_t;

static weave_result_t plan_create(const graph_run_t *g, harness_rank_t *hr, any_plan_t *p) {
  const graph_case_t *c = g->c;
  if (c->ag) {
    weave_ag_gemm_desc_t d = WEAVE_AG_GEMM_DESC_INIT;
    d.dtype = c->dtype;
    d.b_layout = c->layout;
    d.strategy = c->strategy;
    d.alpha = c->alpha;
    d.has_bias = c->has_bias;
    return weave_ag_gemm_plan_create(hr->team, g->M, g->N, g->K, &d, &p->ag);
  }
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.dtype = c->dtype;
  d.b_layout = c->layout;
  d.strategy = c->strategy;
  d.reduce = c->reduce;
  d.alpha = c->alpha;
  d.has_bias = c->has_bias;
  return weave_gemm_rs_plan_create(hr->team, g->M, g->N, g->K, &d, &p->rs);
}

static weave_result_t plan_execute(const any_plan_t *p, harness_rank_t *hr, void *dA, int rows, void *dB,
                                   const void *bias, void *dC) {
  if (p->ag) return weave_ag_gemm_execute(p->ag, rows ? dA : NULL, dB, bias, dC, NULL, hr->stream);
  return weave_gemm_rs_execute(p->rs, dA, dB, bias, dC, hr->stream);
}

static void plan_destroy(any_plan_t *p) {
  if (p->ag) weave_ag_gemm_plan_destroy(p->ag);
  if (p->rs) weave_gemm_rs_plan_destroy(p->rs);
}

static int synced(graph_run_t *g, harness_rank_t *hr, const char *when) {
  if (weave_team_sync(hr->team, hr->stream) == WEAVE_SUCCESS) return 1;
  fail(g, hr->rank, when, weave_get_last_error(hr->team));
  return 0;
}

static int rank_fn(harness_rank_t *hr) {
  graph_run_t *g = (graph_run_t *)hr->user;
  const graph_case_t *c = g->c;
  const size_t e = weave_dtype_size(c->dtype);
  int row_begin, rows;
  weave_row_split(g->M, hr->world, hr->rank, &row_begin, &rows);
  void *hA = malloc((size_t)g->M * g->K * e), *hB = malloc((size_t)g->K * g->N * e), *bias_h = malloc((size_t)g->N * e);
  const int c_rows = c->ag ? g->M : rows; /* C's rows on this rank */
  void *dA = harness_dev_alloc((size_t)g->M * g->K * e), *dB = harness_dev_alloc((size_t)g->K * g->N * e);
  void *dbias = harness_dev_alloc((size_t)g->N * e), *dC = harness_dev_alloc((size_t)c_rows * g->N * e + 1);
  weave_fill_random(c->dtype, bias_h, (size_t)g->N, g->seed ^ 0xb1a5);
  harness_upload(dbias, bias_h, (size_t)g->N * e);
  const void *bias_ref = c->has_bias ? bias_h : NULL, *bias_dev = c->has_bias ? dbias : NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int ok = 1;

  any_plan_t plan = {NULL, NULL};
  refresh(g, hr, 0, hA, hB, dA, dB, dC, row_begin, rows);
  if (plan_create(g, hr, &plan) != WEAVE_SUCCESS) {
    fail(g, hr->rank, "plan_create", weave_get_last_error(hr->team));
    goto out;
  }
  /* A direct call first (the one-time work of a first call happens outside the capture). */
  if (plan_execute(&plan, hr, dA, rows, dB, bias_dev, dC) != WEAVE_SUCCESS) {
    fail(g, hr->rank, "direct call", weave_get_last_error(hr->team));
    ok = 0;
  }
  if (ok && (ok = synced(g, hr, "direct call"))) check(g, hr, 0, bias_ref, dC, row_begin, rows, "direct call");

  /* Capture: every rank, between barriers (instantiation may wait for the device). */
  weave_barrier(hr->team);
  if (ok) {
    if (cudaStreamBeginCapture((cudaStream_t)hr->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      fail(g, hr->rank, "cudaStreamBeginCapture", cudaGetErrorString(cudaGetLastError()));
      ok = 0;
    } else {
      weave_result_t rc = plan_execute(&plan, hr, dA, rows, dB, bias_dev, dC);
      cudaError_t ce = cudaStreamEndCapture((cudaStream_t)hr->stream, &graph);
      if (rc != WEAVE_SUCCESS) fail(g, hr->rank, "execute under capture", weave_get_last_error(hr->team));
      if (ce != cudaSuccess) fail(g, hr->rank, "cudaStreamEndCapture", cudaGetErrorString(ce));
      if (rc == WEAVE_SUCCESS && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
        fail(g, hr->rank, "cudaGraphInstantiate", cudaGetErrorString(cudaGetLastError()));
        exec = NULL;
      }
      ok = rc == WEAVE_SUCCESS && ce == cudaSuccess && exec;
    }
  }
  /* Every rank learns whether every rank captured: the replays are collective. */
  int oks[WEAVE_MAX_WORLD], all = 1;
  harness_allgather(hr, &ok, oks, sizeof(int));
  for (int r = 0; r < hr->world; ++r) all &= oks[r];

  for (long i = 1; all && i <= g->replays; ++i) {
    const int checked = i % GRAPH_CHECK_EVERY == 0;
    if (checked) refresh(g, hr, i, hA, hB, dA, dB, dC, row_begin, rows);
    if (cudaGraphLaunch(exec, (cudaStream_t)hr->stream) != cudaSuccess) {
      fail(g, hr->rank, "cudaGraphLaunch", cudaGetErrorString(cudaGetLastError()));
      break; /* the others time out in their next sync and say so */
    }
    if (checked) {
      char when[48];
      snprintf(when, sizeof(when), "replay %ld", i);
      if (!synced(g, hr, when)) break;
      check(g, hr, i, bias_ref, dC, row_begin, rows, when);
    }
  }
  if (all) { /* a direct call after the replays: one count for both */
    const long gen = g->replays + 1;
    refresh(g, hr, gen, hA, hB, dA, dB, dC, row_begin, rows);
    if (plan_execute(&plan, hr, dA, rows, dB, bias_dev, dC) != WEAVE_SUCCESS)
      fail(g, hr->rank, "direct call after the replays", weave_get_last_error(hr->team));
    else if (synced(g, hr, "direct call after the replays"))
      check(g, hr, gen, bias_ref, dC, row_begin, rows, "direct call after the replays");
  }
  harness_sync(hr->stream);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  plan_destroy(&plan);
out:
  harness_dev_free(dA);
  harness_dev_free(dB);
  harness_dev_free(dbias);
  harness_dev_free(dC);
  weave_barrier(hr->team); /* every rank freed before the next case's calls */
  free(hA);
  free(hB);
  free(bias_h);
  return 0;
}

int main(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"world", 'g', "N", "ranks as threads of this process (default 4; under a launcher, its world)"},
      {"replays", 'r', "R", "replays of the captured call per strategy (default 1000)"},
      {"help", 'h', NULL, "this text"},
      {NULL, 0, NULL, NULL},
  };
  int world = 4;
  long replays = 1000;
  cli_t c;
  cli_init(&c, "gpu_graph_test", options);
  for (int key; (key = cli_next(&c, argc, argv)) != -1;) {
    switch (key) {
      case 'g': world = (int)cli_long(&c, optarg, 1, WEAVE_MAX_WORLD); break;
      case 'r': replays = cli_long(&c, optarg, 1, 100000000L); break;
      case 'h':
        cli_usage(&c, stdout,
                  "[options]   (a captured GEMM + ReduceScatter or AllGather + GEMM call replayed, checked)");
        return 0;
    }
  }
  if (harness_device_count() == 0) {
    printf("gpu_graph_test: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  if (harness_launched_world() > 0) world = harness_launched_world();
  static const graph_case_t cases[] = {
      {"fused det bf16", WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_LAYOUT_COL, 1, 0.5f, 0},
      {"fused atomic fp16", WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, WEAVE_FP16, WEAVE_LAYOUT_ROW, 0, 1.0f, 0},
      {"bulk bf16", WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1, -0.75f, 0},
      {"baseline fp16", WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP16, WEAVE_LAYOUT_COL, 1, 2.0f, 0},
      {"ag fused bf16", WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_LAYOUT_COL, 1, 0.5f, 1},
      {"ag bulk fp16", WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP16, WEAVE_LAYOUT_ROW, 0, -0.75f, 1},
      {"ag baseline bf16", WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, WEAVE_BF16, WEAVE_LAYOUT_COL, 1, 2.0f,
       1},
  };
  int bad = 0;
  const uint64_t seed = harness_seed();
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    graph_run_t g = {&cases[i], 1003, 520, 256, (int)replays, seed + i, PTHREAD_MUTEX_INITIALIZER, 0, 0};
    int devices[WEAVE_MAX_WORLD];
    const int ndev = harness_device_count();
    for (int r = 0; r < world; ++r) devices[r] = r % ndev;
    int rc = harness_run(world, devices, NULL, rank_fn, &g);
    if (rc == HARNESS_SKIP) return HARNESS_SKIP;
    int failed = rc != 0 || g.failures != 0;
    if (harness_launched_rank() <= 0)
      printf("%-20s world %d: %ld replays, %ld results checked, %d failures%s\n", cases[i].name, world, replays,
             g.checked, g.failures, rc ? " (team error)" : "");
    bad |= failed;
  }
  if (harness_launched_rank() <= 0)
    printf("gpu_graph_test: seed 0x%llx (WEAVE_TEST_SEED): %s\n", (unsigned long long)seed, bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}
