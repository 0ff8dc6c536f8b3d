/*
 * GPU test of AUTO plans (plan/autotune.h): each case with a fresh, private tuning cache
 * (XDG_CACHE_HOME in a new temporary folder, WEAVE_TUNE_FILE unset).
 *
 *   measured, then cached  the first AUTO plan of a shape times its candidates (chosen_by
 *                          MEASUREMENT, the times in why); its result is right (fp64 reference, poisoned
 *                          output, fresh random inputs, left unchanged by the call); a second plan of
 *                          the shape, and one of another M of the same power-of-two bucket, take the
 *                          cached choice; the file starts with the cache's header
 *   tuning off             WEAVE_AUTOTUNE=0: the model decides, nothing is timed or written
 *   a slow strategy        WEAVE_TEST_DELAY=<s>:20000 makes each call of strategy s 20 ms slower: auto
 *                          must not choose s (for fused, bulk and baseline in turn)
 *   capture                while a stream is being captured, weave_capture_active() says so and the
 *                          choice is the model's, with no timing; the capture stays valid
 *
 * Threads mode: worlds 1, 2 and 4 on GPU 0; under a launcher, this process's rank of the job's world.
 * Usage: gpu_autotune_test. Exit 0 pass, 1 fail, 77 no device.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "plan/autotune.h"
#include "harness.h"
#include "reference.h"
#include "weave.h"

typedef struct {
  int M, N, K;
  const char *cache_dir;
} shape_t;

static int fail(harness_rank_t *r, const char *what) {
  fprintf(stderr, "FAIL rank %d/%d: %s (%s)\n", r->rank, r->world, what, weave_get_last_error(r->team));
  return 1;
}

/* Rank s's A [M, K] and B [K, N] in bf16, from (seed, s): every rank can make every rank's inputs. */
static void make_inputs(uint64_t seed, int s, int M, int N, int K, uint16_t *A, uint16_t *B) {
  uint64_t x = seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(s + 1));
  for (size_t i = 0; i < (size_t)M * K + (size_t)K * N; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const float v = (float)((x >> 40) & 0xffff) / 32768.0f - 1.0f;
    if (i < (size_t)M * K)
      A[i] = weave_float_to_bf16(v);
    else
      B[i - (size_t)M * K] = weave_float_to_bf16(v);
  }
}

static uint64_t g_seed;

/* One call of `plan` on this rank's inputs, checked against the fp64 reference of all ranks'; the
 * inputs must be unchanged after it. */
static int check_call(harness_rank_t *r, weave_gemm_rs_plan_t plan, int M, int N, int K) {
  const int W = r->world;
  uint16_t **hA = calloc((size_t)W, sizeof(*hA)), **hB = calloc((size_t)W, sizeof(*hB));
  for (int s = 0; s < W; ++s) {
    hA[s] = malloc((size_t)M * K * 2);
    hB[s] = malloc((size_t)K * N * 2);
    make_inputs(g_seed, s, M, N, K, hA[s], hB[s]);
  }
  int rb, rows;
  weave_row_split(M, W, r->rank, &rb, &rows);
  void *dA = harness_dev_alloc((size_t)M * K * 2), *dB = harness_dev_alloc((size_t)K * N * 2);
  void *dC = harness_dev_alloc((size_t)(rows ? rows : 1) * N * 2);
  harness_upload(dA, hA[r->rank], (size_t)M * K * 2);
  harness_upload(dB, hB[r->rank], (size_t)K * N * 2);
  harness_poison(dC, (size_t)(rows ? rows : 1) * N * 2, r->stream);
  /* every rank's allocations done before any rank's call (ranks sharing a GPU: README, Limitations) */
  int rc = weave_barrier(r->team) != WEAVE_SUCCESS ? fail(r, "barrier") : 0;
  if (!rc && (weave_gemm_rs_execute(plan, dA, dB, NULL, rows ? dC : NULL, r->stream) != WEAVE_SUCCESS ||
              weave_team_sync(r->team, r->stream) != WEAVE_SUCCESS))
    rc = fail(r, "execute of the auto plan");
  uint16_t *got = malloc((size_t)(rows ? rows : 1) * N * 2), *backA = malloc((size_t)M * K * 2),
           *backB = malloc((size_t)K * N * 2);
  double *ref = malloc(sizeof(double) * (size_t)(rows ? rows : 1) * N);
  if (!rc) {
    harness_download(got, dC, (size_t)rows * N * 2);
    harness_download(backA, dA, (size_t)M * K * 2);
    harness_download(backB, dB, (size_t)K * N * 2);
    if (memcmp(backA, hA[r->rank], (size_t)M * K * 2) || memcmp(backB, hB[r->rank], (size_t)K * N * 2))
      rc = fail(r, "the call changed its inputs");
    weave_ref_gemm_rs(M, N, K, W, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0, (const void *const *)hA, (const void *const *)hB,
                      NULL, rb, rows, ref);
    double atol, rtol;
    weave_tolerance(WEAVE_BF16, K * W, &atol, &rtol);
    weave_check_t chk;
    weave_check_result(WEAVE_BF16, got, ref, (size_t)rows * N, atol, rtol, &chk);
    if (chk.wrong || chk.nonfinite) {
      fprintf(stderr, "FAIL rank %d/%d: %zu wrong, %zu not finite (rel err %.2e)\n", r->rank, W, chk.wrong,
              chk.nonfinite, chk.rel_err);
      rc = 1;
    }
  }
  weave_barrier(r->team); /* nobody frees (which may wait for the device) while a peer still runs */
  harness_dev_free(dA);
  harness_dev_free(dB);
  harness_dev_free(dC);
  for (int s = 0; s < W; ++s) {
    free(hA[s]);
    free(hB[s]);
  }
  free(hA);
  free(hB);
  free(got);
  free(backA);
  free(backB);
  free(ref);
  return rc;
}

static weave_result_t auto_plan(harness_rank_t *r, int M, int N, int K, weave_gemm_rs_plan_t *plan,
                                weave_gemm_rs_info_t *info) {
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  weave_result_t rc = weave_gemm_rs_plan_create(r->team, M, N, K, &d, plan);
  if (rc == WEAVE_SUCCESS) weave_gemm_rs_plan_info(*plan, info);
  return rc;
}

static int case_measured_then_cached(harness_rank_t *r) {
  const shape_t *s = (const shape_t *)r->user;
  weave_gemm_rs_plan_t plan;
  weave_gemm_rs_info_t in;
  if (auto_plan(r, s->M, s->N, s->K, &plan, &in) != WEAVE_SUCCESS) return fail(r, "first auto plan");
  int rc = 0;
  if (in.chosen_by != WEAVE_CHOSEN_BY_MEASUREMENT || !strstr(in.why, "measured") || !strstr(in.why, "baseline") ||
      in.strategy == WEAVE_STRATEGY_AUTO || !(in.choose_ms > 0))
    rc = fail(r, "the first plan of a shape was not measured");
  if (r->rank == 0)
    printf("# world %d, %dx%dx%d: auto chose %s in %.1f ms: %s\n", r->world, s->M, s->N, s->K,
           weave_strategy_name(in.strategy), in.choose_ms, in.why);
  const weave_strategy_t first = in.strategy;
  rc |= check_call(r, plan, s->M, s->N, s->K);
  if (weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS) rc |= fail(r, "destroy");
  /* the same shape, then another M of the same bucket: from the cache */
  const int Ms[2] = {s->M, s->M - s->M / 4};
  for (int i = 0; i < 2 && !rc; ++i) {
    if (auto_plan(r, Ms[i], s->N, s->K, &plan, &in) != WEAVE_SUCCESS) return fail(r, "second auto plan");
    if (in.chosen_by != WEAVE_CHOSEN_BY_CACHE || in.strategy != first || !strstr(in.why, "cached")) {
      fprintf(stderr, "FAIL rank %d: M=%d chosen_by %d strategy %s (first %s): %s\n", r->rank, Ms[i], in.chosen_by,
              weave_strategy_name(in.strategy), weave_strategy_name(first), in.why);
      rc = 1;
    }
    if (i == 1) rc |= check_call(r, plan, Ms[i], s->N, s->K);
    if (weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS) rc |= fail(r, "destroy");
  }
  if (r->rank == 0 && !rc) { /* rank 0 wrote the cache, header first */
    char path[1024], line[64] = "";
    snprintf(path, sizeof(path), "%s/weave/tune.tsv", s->cache_dir);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "# weave tune cache", 18)) rc = fail(r, "cache file");
    if (f) fclose(f);
  }
  return rc;
}

static int case_model(harness_rank_t *r) {
  const shape_t *s = (const shape_t *)r->user;
  weave_gemm_rs_plan_t plan;
  weave_gemm_rs_info_t in;
  if (auto_plan(r, s->M, s->N, s->K, &plan, &in) != WEAVE_SUCCESS) return fail(r, "auto plan, tuning off");
  int rc = 0;
  if (in.chosen_by != WEAVE_CHOSEN_BY_MODEL || !strstr(in.why, "WEAVE_AUTOTUNE=0") || !strstr(in.why, "predicted"))
    rc = fail(r, "tuning off: not the model's choice");
  rc |= check_call(r, plan, s->M, s->N, s->K);
  if (weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS) rc |= fail(r, "destroy");
  char path[1024];
  struct stat st;
  snprintf(path, sizeof(path), "%s/weave/tune.tsv", s->cache_dir);
  if (r->rank == 0 && stat(path, &st) == 0) rc |= fail(r, "tuning off wrote the cache");
  return rc;
}

static weave_strategy_t g_slow;
static int case_slow(harness_rank_t *r) {
  const shape_t *s = (const shape_t *)r->user;
  weave_gemm_rs_plan_t plan;
  weave_gemm_rs_info_t in;
  if (auto_plan(r, s->M, s->N, s->K, &plan, &in) != WEAVE_SUCCESS) return fail(r, "auto plan, one strategy slow");
  int rc = 0;
  if (in.chosen_by != WEAVE_CHOSEN_BY_MEASUREMENT || in.strategy == g_slow) {
    fprintf(stderr, "FAIL rank %d/%d: %s made 20 ms slower, auto chose %s (%d): %s\n", r->rank, r->world,
            weave_strategy_name(g_slow), weave_strategy_name(in.strategy), in.chosen_by, in.why);
    rc = 1;
  } else if (r->rank == 0) {
    printf("# world %d, %s slowed: auto chose %s: %s\n", r->world, weave_strategy_name(g_slow),
           weave_strategy_name(in.strategy), in.why);
  }
  if (weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS) rc |= fail(r, "destroy");
  return rc;
}

/* The split of the capture case's model: any plausible one (the model's inputs, not the planner's). */
static weave_result_t fixed_split(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc, int *g,
                                  int *c) {
  (void)team;
  (void)M;
  (void)N;
  (void)K;
  (void)desc;
  *g = 10;
  *c = 2;
  return WEAVE_SUCCESS;
}

static int case_capture(harness_rank_t *r) {
  const shape_t *s = (const shape_t *)r->user;
  int rc = 0;
  if (weave_capture_active()) rc |= fail(r, "capture seen where there is none");
  cudaStream_t cs;
  void *buf = harness_dev_alloc(4096);
  if (cudaStreamCreate(&cs) != cudaSuccess) return fail(r, "stream");
  weave_barrier(r->team); /* every rank's allocation done before any capture starts */
  if (cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed) != cudaSuccess) return fail(r, "begin capture");
  cudaMemsetAsync(buf, 0, 4096, cs);
  if (!weave_capture_active()) rc |= fail(r, "a blocking stream's capture was not seen");
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  weave_env_t env;
  memset(&env, 0, sizeof(env));
  env.autotune = 1;
  weave_auto_choice_t ch;
  if (weave_autotune_choose(r->team, s->M, s->N, s->K, &d, &env, fixed_split, &ch) != WEAVE_SUCCESS)
    rc |= fail(r, "choose under capture");
  else if (ch.chosen_by != WEAVE_CHOSEN_BY_MODEL || !strstr(ch.why, "capture"))
    rc |= fail(r, "a capture did not stop the timing");
  cudaGraph_t graph = NULL;
  if (cudaStreamEndCapture(cs, &graph) != cudaSuccess || !graph) rc |= fail(r, "the capture was broken");
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(cs);
  weave_barrier(r->team);
  harness_dev_free(buf);
  return rc;
}

/* A fresh cache folder for the next case (rank 0's process names it; every process makes its own). */
static char g_dir[256];
static void fresh_cache(shape_t *s) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/weave_autotune_test_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    exit(1);
  }
  setenv("XDG_CACHE_HOME", g_dir, 1);
  s->cache_dir = g_dir;
}

int main(void) {
  int rc = harness_require_sm90();
  if (rc) return rc;
  unsetenv("WEAVE_TUNE_FILE");
  unsetenv("WEAVE_AUTOTUNE");
  unsetenv("WEAVE_TEST_DELAY");
  g_seed = harness_seed();
  printf("# seed %llu\n", (unsigned long long)g_seed);
  const int launched = harness_launched_world();
  const int worlds_threads[3] = {1, 2, 4};
  const int nworlds = launched > 0 ? 1 : 3;
  int devices[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int wi = 0; wi < nworlds && !rc; ++wi) {
    const int world = launched > 0 ? launched : worlds_threads[wi];
    shape_t s = {512, 512, 256, NULL};
    fresh_cache(&s);
    rc |= harness_run(world, devices, NULL, case_measured_then_cached, &s);
    fresh_cache(&s);
    setenv("WEAVE_AUTOTUNE", "0", 1);
    rc |= harness_run(world, devices, NULL, case_model, &s);
    unsetenv("WEAVE_AUTOTUNE");
    static const weave_strategy_t slow[3] = {WEAVE_STRATEGY_FUSED, WEAVE_STRATEGY_BULK, WEAVE_STRATEGY_BASELINE};
    for (int i = 0; i < 3; ++i) {
      shape_t t = {1024, 1024, 512, NULL};
      fresh_cache(&t);
      g_slow = slow[i];
      char v[64];
      snprintf(v, sizeof(v), "%s:20000", weave_strategy_name(g_slow));
      setenv("WEAVE_TEST_DELAY", v, 1);
      rc |= harness_run(world, devices, NULL, case_slow, &t);
      unsetenv("WEAVE_TEST_DELAY");
    }
    fresh_cache(&s);
    rc |= harness_run(world, devices, NULL, case_capture, &s);
    printf("%s world %d\n", rc ? "FAIL" : "ok", world);
  }
  printf(rc ? "FAILED\n" : "all autotune cases passed\n");
  return rc ? 1 : 0;
}
