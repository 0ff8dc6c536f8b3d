/*
 * Teams and plans created, used and destroyed in varied orders in one process, as an application
 * does over its lifetime: nothing a team or plan leaves behind may be picked up by a later one.
 *
 *   0. a 4-rank team whose last rank starts its calls 50 ms late while the others would enqueue
 *      100 calls up to their first sync (without the lockstep of ranks sharing a GPU, plan_execute.c,
 *      the late rank's first kernel often did not start until the others timed out);
 *   1. worlds 3, 5, 6, 7 x strategies fused, bulk, baseline, auto: a team (1 GiB heap), a plan of
 *      M=3000 N=1000 K_local=777 (B [N,K], bias, alpha 0.5), 3 calls on fresh inputs, each checked;
 *   2. then a 4-rank team, a fused plan M=1024 N=768 K_local=384, 5000 calls alternating two input
 *      sets, weave_team_sync every 100 calls, the last result of each set checked;
 *   3. then two more 4-rank teams: 400 calls with a sync after each, and 2000 calls on one input set
 *      with a sync every 100.
 * Every result is checked against the fp64 CPU reference on sampled rows (first, middle, last 4 of
 * each rank's rows); outputs are poisoned first. Usage: gpu_lifecycle_test [--quick | --late]
 * (--quick: worlds 3 and 7, 1000/100/400 calls; --late: step 0 alone). Exit 0 pass, 1 fail, 77 no
 * device. Ranks are threads of this process.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "plan/plan.h"
#include "harness.h"
#include "reference.h"
#include "weave.h"

typedef struct {
  const char *name;
  int M, N, K;
  weave_layout_t layout;
  weave_strategy_t strategy;
  int has_bias;
  float alpha;
  int calls, sync_every, nsets, fresh_inputs; /* fresh_inputs: new random inputs before every call */
  uint64_t seed;
  pthread_mutex_t mu;
  int failures;
  long checked;
  int late_ms; /* the last rank sleeps this long before its first call, while the others run ahead */
} phase_t;

static const weave_dtype_t DT = WEAVE_BF16;

static void fail(phase_t *p, int rank, const char *fmt, const char *detail) {
  pthread_mutex_lock(&p->mu);
  p->failures++;
  fprintf(stderr, "FAIL [%s] rank %d: %s%s%s\n", p->name, rank, fmt, detail ? ": " : "", detail ? detail : "");
  pthread_mutex_unlock(&p->mu);
}

/* Host inputs of set s of rank r (every rank can regenerate every rank's). */
static void make_inputs(const phase_t *p, int r, int s, void *A, void *B) {
  weave_fill_random(DT, A, (size_t)p->M * p->K, p->seed + (uint64_t)(r * 64 + s) * 2);
  weave_fill_random(DT, B, (size_t)p->K * p->N, p->seed + (uint64_t)(r * 64 + s) * 2 + 1);
}

/* Checks this rank's rows of the result of input set s against fp64 (weave_check_sampled_rows). */
static void check(phase_t *p, harness_rank_t *hr, int s, const void *bias_h, const void *dC, int row_begin, int rows) {
  const size_t e = weave_dtype_size(DT);
  void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  for (int r = 0; r < hr->world; ++r) {
    As[r] = malloc((size_t)p->M * p->K * e);
    Bs[r] = malloc((size_t)p->K * p->N * e);
    make_inputs(p, r, s, As[r], Bs[r]);
  }
  unsigned char *got = (unsigned char *)malloc((size_t)rows * p->N * e + 1);
  harness_download(got, dC, (size_t)rows * p->N * e);
  int begins[3];
  const int n = weave_sample_rows(rows, begins);
  weave_check_t res[3];
  weave_check_sampled_rows(p->M, p->N, p->K, hr->world, DT, p->layout, p->alpha, (const void *const *)As,
                           (const void *const *)Bs, bias_h, row_begin, rows, got, res);
  for (int i = 0; i < 3; ++i)
    if (res[i].wrong) {
      char msg[160];
      snprintf(msg, sizeof(msg), "set %d rows %d..%d: %zu wrong (first at %zu)", s, row_begin + begins[i],
               row_begin + begins[i] + n - 1, res[i].wrong, res[i].first_bad);
      fail(p, hr->rank, "result", msg);
    }
  pthread_mutex_lock(&p->mu);
  p->checked++;
  pthread_mutex_unlock(&p->mu);
  free(got);
  for (int r = 0; r < hr->world; ++r) {
    free(As[r]);
    free(Bs[r]);
  }
}

/* After a timeout: this rank's control words and tile flags of the fused plan (internal layout,
 * kernels.h), so that a failure says which source's tiles never came and how far each rank got. */
static void dump_flags(weave_gemm_rs_plan_t plan, int rank, int world) {
  const weave_fused_params_t *fp = &plan->params;
  weave_plan_ctl_t ctl;
  const size_t n = (size_t)world * (size_t)fp->tiles_cap;
  uint32_t *flags = (uint32_t *)calloc(n ? n : 1, sizeof(uint32_t));
  if (!flags || cudaMemcpy(&ctl, fp->ctl, sizeof(ctl), cudaMemcpyDeviceToHost) != cudaSuccess ||
      (plan->strategy == WEAVE_STRATEGY_FUSED &&
       cudaMemcpy(flags, fp->tile_flags, n * sizeof(uint32_t), cudaMemcpyDeviceToHost) != cudaSuccess)) {
    fprintf(stderr, "  rank %d: flags unreadable\n", rank);
    free(flags);
    return;
  }
  char line[1024];
  int at = snprintf(line, sizeof(line), "  rank %d: finished call %u, done[]", rank, ctl.epoch);
  for (int s = 0; s < world && at < (int)sizeof(line) - 16; ++s)
    at += snprintf(line + at, sizeof(line) - at, " %u", ctl.done[s]);
  fprintf(stderr, "%s\n", line);
  for (int s = 0; s < world && plan->strategy == WEAVE_STRATEGY_FUSED; ++s) {
    at = snprintf(line, sizeof(line), "  rank %d: tile flags from source %d:", rank, s);
    for (int t = 0; t < fp->tiles_cap && at < (int)sizeof(line) - 16; ++t)
      at += snprintf(line + at, sizeof(line) - at, " %u", flags[(size_t)s * fp->tiles_cap + t]);
    fprintf(stderr, "%s\n", line);
  }
  free(flags);
}

static int rank_fn(harness_rank_t *hr) {
  phase_t *p = (phase_t *)hr->user;
  const size_t e = weave_dtype_size(DT), a_n = (size_t)p->M * p->K, b_n = (size_t)p->K * p->N;
  int row_begin, rows;
  weave_row_split(p->M, hr->world, hr->rank, &row_begin, &rows);
  void *hA = malloc(a_n * e), *hB = malloc(b_n * e), *bias_h = malloc((size_t)p->N * e);
  void *dA[2], *dB[2], *dbias = harness_dev_alloc((size_t)p->N * e);
  void *dC = harness_dev_alloc((size_t)rows * p->N * e + 1);
  weave_fill_random(DT, bias_h, (size_t)p->N, p->seed ^ 0xb1a5);
  harness_upload(dbias, bias_h, (size_t)p->N * e);
  for (int s = 0; s < p->nsets; ++s) {
    dA[s] = harness_dev_alloc(a_n * e);
    dB[s] = harness_dev_alloc(b_n * e);
    make_inputs(p, hr->rank, s, hA, hB);
    harness_upload(dA[s], hA, a_n * e);
    harness_upload(dB[s], hB, b_n * e);
  }
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.dtype = DT;
  d.b_layout = p->layout;
  d.strategy = p->strategy;
  d.alpha = p->alpha;
  d.has_bias = p->has_bias;
  weave_gemm_rs_plan_t plan = NULL;
  if (weave_gemm_rs_plan_create(hr->team, p->M, p->N, p->K, &d, &plan) != WEAVE_SUCCESS) {
    fail(p, hr->rank, "plan_create", weave_get_last_error(hr->team));
    goto out;
  }
  for (int call = 0; call < p->calls; ++call) {
    const int s = p->fresh_inputs ? 0 : call % p->nsets;
    const int last_of_set = call >= p->calls - p->nsets;
    const int checked = p->fresh_inputs || last_of_set;
    if (p->fresh_inputs) { /* new data in place: a stale partial would no longer match */
      make_inputs(p, hr->rank, call + 8, hA, hB);
      harness_upload(dA[0], hA, a_n * e);
      harness_upload(dB[0], hB, b_n * e);
    }
    if (checked) harness_poison(dC, (size_t)rows * p->N * e, hr->stream);
    if (call == 0 && p->late_ms && hr->rank == hr->world - 1) {
      struct timespec ts = {0, (long)p->late_ms * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (weave_gemm_rs_execute(plan, dA[s], dB[s], p->has_bias ? dbias : NULL, dC, hr->stream) != WEAVE_SUCCESS) {
      fail(p, hr->rank, "execute", weave_get_last_error(hr->team));
      break; /* the others then time out in their next sync, and say so */
    }
    if (checked || (call + 1) % p->sync_every == 0 || call + 1 == p->calls) {
      if (weave_team_sync(hr->team, hr->stream) != WEAVE_SUCCESS) {
        char msg[64];
        snprintf(msg, sizeof(msg), "call %d", call);
        fail(p, hr->rank, msg, weave_get_last_error(hr->team));
        dump_flags(plan, hr->rank, hr->world);
        break;
      }
    }
    if (checked) check(p, hr, p->fresh_inputs ? call + 8 : s, p->has_bias ? bias_h : NULL, dC, row_begin, rows);
  }
  weave_gemm_rs_plan_destroy(plan);
out:
  for (int s = 0; s < p->nsets; ++s) {
    harness_dev_free(dA[s]);
    harness_dev_free(dB[s]);
  }
  harness_dev_free(dbias);
  harness_dev_free(dC);
  free(hA);
  free(hB);
  free(bias_h);
  return 0;
}

static int run_phase(phase_t *p, int world) {
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = (size_t)1 << 30;
  pthread_mutex_init(&p->mu, NULL);
  p->failures = 0;
  p->checked = 0;
  p->seed = harness_seed();
  int devices[WEAVE_MAX_WORLD];
  const int ndev = harness_device_count();
  for (int r = 0; r < world; ++r) devices[r] = r % ndev;
  int rc = harness_run(world, devices, &cfg, rank_fn, p);
  printf("%-34s world %d: %ld results checked, %d failures%s\n", p->name, world, p->checked, p->failures,
         rc ? " (team error)" : "");
  return rc == HARNESS_SKIP ? HARNESS_SKIP : (rc || p->failures);
}

int main(int argc, char **argv) {
  int quick = argc > 1 && !strcmp(argv[1], "--quick"), late_only = argc > 1 && !strcmp(argv[1], "--late");
  if (harness_device_count() == 0) {
    printf("gpu_lifecycle_test: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  if (harness_launched_world() != 0) {
    printf("gpu_lifecycle_test: runs its ranks as threads of one process: skipped under a launcher\n");
    return HARNESS_SKIP;
  }
  int bad = 0;
  /* One rank starts late while the others enqueue their calls up to the first sync: the late rank's
   * first kernel must start all the same (plan_execute.c, execute_lockstep). */
  phase_t late = {
      "fused, one rank late",    1024, 768, 384, WEAVE_LAYOUT_ROW, WEAVE_STRATEGY_FUSED, 0, 1.0f, 200, 100, 1, 0, 0,
      PTHREAD_MUTEX_INITIALIZER, 0,    0,   50};
  bad |= run_phase(&late, 4) == 1;
  if (late_only) {
    printf("gpu_lifecycle_test: %s\n", bad ? "FAILED" : "PASSED");
    return bad ? 1 : 0;
  }
  const int worlds_all[] = {3, 5, 6, 7}, worlds_quick[] = {3, 7};
  const int *worlds = quick ? worlds_quick : worlds_all, nworlds = quick ? 2 : 4;
  const weave_strategy_t strategies[] = {WEAVE_STRATEGY_FUSED, WEAVE_STRATEGY_BULK, WEAVE_STRATEGY_BASELINE,
                                         WEAVE_STRATEGY_AUTO};
  for (int w = 0; w < nworlds; ++w)
    for (int s = 0; s < 4; ++s) {
      char name[64];
      snprintf(name, sizeof(name), "odd world, %s", weave_strategy_name(strategies[s]));
      phase_t p = {
          name, 3000, 1000, 777, WEAVE_LAYOUT_COL, strategies[s], 1, 0.5f, 3, 1, 1, 1, 0, PTHREAD_MUTEX_INITIALIZER,
          0,    0,    0};
      bad |= run_phase(&p, worlds[w]) == 1;
    }
  phase_t alt = {"fused, 2 sets alternating",
                 1024,
                 768,
                 384,
                 WEAVE_LAYOUT_ROW,
                 WEAVE_STRATEGY_FUSED,
                 0,
                 1.0f,
                 quick ? 1000 : 5000,
                 100,
                 2,
                 0,
                 0,
                 PTHREAD_MUTEX_INITIALIZER,
                 0,
                 0,
                 0};
  bad |= run_phase(&alt, 4) == 1;
  phase_t each = {"fused, sync after every call",
                  1024,
                  768,
                  384,
                  WEAVE_LAYOUT_ROW,
                  WEAVE_STRATEGY_FUSED,
                  0,
                  1.0f,
                  quick ? 100 : 400,
                  1,
                  2,
                  0,
                  0,
                  PTHREAD_MUTEX_INITIALIZER,
                  0,
                  0,
                  0};
  bad |= run_phase(&each, 4) == 1;
  phase_t one = {"fused, one set",
                 1024,
                 768,
                 384,
                 WEAVE_LAYOUT_ROW,
                 WEAVE_STRATEGY_FUSED,
                 0,
                 1.0f,
                 quick ? 400 : 2000,
                 100,
                 1,
                 0,
                 0,
                 PTHREAD_MUTEX_INITIALIZER,
                 0,
                 0,
                 0};
  bad |= run_phase(&one, 4) == 1;
  printf("gpu_lifecycle_test: %s\n", bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}
