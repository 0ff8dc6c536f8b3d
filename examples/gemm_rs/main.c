/*
 * weave from C, end to end: a team of WORLD ranks (one host thread each, all on GPU 0), one GEMM +
 * ReduceScatter plan, a few calls, and every row of every rank's result checked against an fp64 sum
 * computed here. Usage: gemm_rs_example [world [auto|fused|bulk|baseline]]   (default 2 auto). Exit 0: correct; 1: wrong or failed;
 * 77: no CUDA device.
 * Under a launcher (torchrun, mpirun, srun, scripts/launch.sh) each process is one rank instead: the
 * team comes from weave_bootstrap_create_env and the world from the launcher.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <weave.h>

enum { M = 1000, N = 520, K_LOCAL = 328, CALLS = 3 }; /* M, N not multiples of the tile: tails */
static const float ALPHA = 0.5f;

static int g_world;
static weave_strategy_t g_strategy = WEAVE_STRATEGY_AUTO;
static weave_bootstrap_t *g_bootstrap;
static uint16_t *g_a[8], *g_b[8]; /* every rank's inputs (bf16 bits), for the reference */

/* bf16 <-> float, round to nearest even (inputs are finite). */
static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

#define TRY(call)                                                                                                      \
  do {                                                                                                                 \
    weave_result_t rc_ = (call);                                                                                       \
    if (rc_ != WEAVE_SUCCESS) {                                                                                        \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #call, weave_get_error_string(rc_), weave_get_last_error(team)); \
      if (team) weave_team_abort(team); /* the other ranks stop waiting for this one */                                \
      return (void *)1;                                                                                                \
    }                                                                                                                  \
  } while (0)

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg;
  weave_team_t team = NULL;
  TRY(weave_team_create(g_bootstrap, rank, /*device=*/0, NULL, &team));

  weave_gemm_rs_desc_t desc = WEAVE_GEMM_RS_DESC_INIT; /* bf16, B [K, N], deterministic, AUTO */
  desc.alpha = ALPHA;
  desc.strategy = g_strategy;
  weave_gemm_rs_plan_t plan;
  TRY(weave_gemm_rs_plan_create(team, M, N, K_LOCAL, &desc, &plan)); /* collective, once */
  weave_gemm_rs_info_t info;
  TRY(weave_gemm_rs_plan_info(plan, &info));

  size_t a_bytes = (size_t)M * K_LOCAL * 2, b_bytes = (size_t)K_LOCAL * N * 2, c_bytes = (size_t)info.rows * N * 2;
  void *A, *B, *C;
  cudaStream_t stream;
  if (cudaMalloc(&A, a_bytes) || cudaMalloc(&B, b_bytes) || cudaMalloc(&C, c_bytes ? c_bytes : 2) ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) {
    fprintf(stderr, "rank %d: CUDA allocation failed\n", rank);
    return (void *)1;
  }
  cudaMemcpy(A, g_a[rank], a_bytes, cudaMemcpyHostToDevice);
  cudaMemcpy(B, g_b[rank], b_bytes, cudaMemcpyHostToDevice);
  cudaMemset(C, 0xFF, c_bytes); /* NaN: a row weave does not write fails the check */

  for (int i = 0; i < CALLS; ++i) /* many calls per plan, no reset between them */
    TRY(weave_gemm_rs_execute(plan, A, B, NULL, C, (weave_stream_t)stream));
  TRY(weave_team_sync(team, (weave_stream_t)stream)); /* WEAVE_ERROR_TIMEOUT if a wait expired */

  uint16_t *c = malloc(c_bytes ? c_bytes : 2);
  cudaMemcpy(c, C, c_bytes, cudaMemcpyDeviceToHost);
  /* Bound: each partial and the output are rounded to bf16 once (2^-8 relative each), sums in fp32. */
  long wrong = 0;
  for (int i = 0; i < info.rows; ++i)
    for (int j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int r = 0; r < g_world; ++r)
        for (int k = 0; k < K_LOCAL; ++k) {
          double p = (double)from_bf16(g_a[r][(size_t)(info.row_begin + i) * K_LOCAL + k]) *
                     (double)from_bf16(g_b[r][(size_t)k * N + j]);
          ref += p;
          mag += fabs(p);
        }
      double got = from_bf16(c[(size_t)i * N + j]);
      double tol = ALPHA * mag * (g_world + 2) * 0x1p-8 + 1e-6;
      if (!(fabs(got - ALPHA * ref) <= tol) && wrong++ < 3)
        fprintf(stderr, "rank %d: C[%d][%d] = %g, expected %g\n", rank, info.row_begin + i, j, got, ALPHA * ref);
    }
  printf("rank %d: rows [%d, %d) of C, strategy %d, %ld wrong\n", rank, info.row_begin, info.row_begin + info.rows,
         (int)info.strategy, wrong);

  free(c);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaStreamDestroy(stream);
  TRY(weave_gemm_rs_plan_destroy(plan)); /* collective */
  weave_team_t done = team;
  team = NULL;                   /* gone after the call below, whatever it returns */
  TRY(weave_team_destroy(done)); /* collective */
  return (void *)(intptr_t)(wrong != 0);
}

int main(int argc, char **argv) {
  int major, minor, patch, devices = 0;
  weave_get_version(&major, &minor, &patch);
  printf("weave %d.%d.%d (headers %s)\n", major, minor, patch, WEAVE_VERSION_STRING);
  g_world = argc > 1 ? atoi(argv[1]) : 2;
  static const char *strategies[] = {"auto", "fused", "bulk", "baseline"};
  int known = argc <= 2;
  for (int i = 0; i < 4 && !known; ++i)
    if (strcmp(argv[2], strategies[i]) == 0) g_strategy = (weave_strategy_t)i, known = 1;
  if (g_world < 1 || g_world > 8 || !known) {
    fprintf(stderr, "usage: %s [world 1..8 [auto|fused|bulk|baseline]]\n", argv[0]);
    return 2;
  }
  int launched = getenv("WORLD_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_NTASKS");
  /* Ranks that are threads of this process share GPU 0: their kernels must be able to run side by
   * side (set before CUDA starts). Ranks in separate processes share a GPU through MPS instead. */
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  if (!launched) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device: nothing to run (skipped)\n");
    return 77;
  }
  srand(12345);
  for (int r = 0; r < g_world; ++r) {
    g_a[r] = malloc((size_t)M * K_LOCAL * 2);
    g_b[r] = malloc((size_t)K_LOCAL * N * 2);
    for (size_t i = 0; i < (size_t)M * K_LOCAL; ++i) g_a[r][i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
    for (size_t i = 0; i < (size_t)K_LOCAL * N; ++i) g_b[r][i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
  }
  if (launched) { /* one process per rank: every process builds every rank's inputs (same seed) */
    int world, rank;
    if (weave_bootstrap_create_env(&g_bootstrap) != WEAVE_SUCCESS ||
        weave_bootstrap_info(g_bootstrap, &world, &rank, NULL) != WEAVE_SUCCESS || world > 8) {
      fprintf(stderr, "bootstrap: %s\n", weave_get_last_error(NULL));
      return 1;
    }
    for (int r = g_world; r < world; ++r) {
      g_a[r] = malloc((size_t)M * K_LOCAL * 2);
      g_b[r] = malloc((size_t)K_LOCAL * N * 2);
      for (size_t i = 0; i < (size_t)M * K_LOCAL; ++i) g_a[r][i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
      for (size_t i = 0; i < (size_t)K_LOCAL * N; ++i) g_b[r][i] = to_bf16((float)rand() / RAND_MAX - 0.5f);
    }
    g_world = world;
    int failed = rank_main((void *)(intptr_t)rank) != NULL;
    weave_bootstrap_destroy(g_bootstrap);
    printf("rank %d: %s\n", rank, failed ? "FAILED" : "PASSED");
    return failed;
  }
  if (weave_bootstrap_create_threads(g_world, &g_bootstrap) != WEAVE_SUCCESS) {
    fprintf(stderr, "bootstrap: %s\n", weave_get_last_error(NULL));
    return 1;
  }
  pthread_t th[8];
  for (int r = 0; r < g_world; ++r) pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
  int failed = 0;
  for (int r = 0; r < g_world; ++r) {
    void *ret;
    pthread_join(th[r], &ret);
    failed |= ret != NULL;
  }
  weave_bootstrap_destroy(g_bootstrap);
  for (int r = 0; r < g_world; ++r) free(g_a[r]), free(g_b[r]);
  printf("%s\n", failed ? "FAILED" : "PASSED");
  return failed;
}
