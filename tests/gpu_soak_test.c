/*
 * Soak: one team (4 rank threads; under a launcher the launcher's world) makes N calls of random
 * shapes and descs, GEMM + ReduceScatter and AllGather + GEMM (a third of the plans), with up to 3
 * plans of either alive at once, executed interleaved, and plans created and destroyed along the way,
 * as a serving process does over hours.
 *
 *   - Every decision comes from one RNG seeded by harness_seed() (or --seed), the same sequence on
 *     every rank, so the collective calls (plan create/destroy) come in the same order everywhere.
 *   - Shapes: M SOAK_MIN_M..4096, N 8..4096, K_local 8..2048, drawn log-uniform; half of them
 *     multiples of 16, the others anything (rows of K*elt or N*elt bytes that are not 16-byte
 *     multiples take the non-TMA path: both paths are exercised). Strategy auto/fused/bulk/baseline,
 *     reduce det/atomic, dtype bf16/fp16/fp32, B layout, tile order, bias, alpha, fp32_slots.
 *   - Every SOAK_CHECK_EVERY-th call is checked: the plan's inputs are first replaced in place by
 *     new ones (a stale partial of an earlier call cannot pass), C is poisoned (0xFF), and 3 ranges
 *     of this rank's rows are compared with the fp64 CPU reference. weave_team_sync after every
 *     checked call and every SOAK_SYNC_EVERY calls must succeed.
 *   - At the end, every plan destroyed and every buffer freed: free device memory (cudaMemGetInfo of
 *     rank 0's device, read between two barriers) is back within SOAK_MEM_SLACK of what it was after
 *     a warm-up (first use of each strategy x dtype loads modules and per-stream workspaces that
 *     weave keeps by design), and the largest weave_malloc that fitted at the start fits again.
 *
 * Usage: gpu_soak_test [--calls N] [--seed S]. Exit 0 pass, 1 fail, 2 bad option, 77 no device.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cli.h"
#include "harness.h"
#include "reference.h"
#include "weave.h"

/* Smallest M drawn: 1, so that ranks that own no row (M < world) are soaked too. */
#define SOAK_MIN_M 1
#define SOAK_MAX_M 4096
#define SOAK_MAX_N 4096
#define SOAK_MAX_K 2048
#define SOAK_MAX_PLANS 3
#define SOAK_CHECK_EVERY 50
#define SOAK_SYNC_EVERY 10
#define SOAK_WORLD 4
#define SOAK_HEAP ((size_t)1 << 30)
#define SOAK_MEM_SLACK ((size_t)64 << 20) /* bytes of free device memory the run may end without */

typedef struct {
  long calls;
  uint64_t seed;
  int verbose;
  pthread_mutex_t mu;
  int failures;
  long plans, checked, wrong, sync_errors; /* counted by rank 0 (plans, checked) or by all (the rest) */
} soak_t;

/* One plan alive and its buffers on this rank: GEMM + ReduceScatter (d, plan: A [M, K], C this rank's
 * rows) or, with ag, AllGather + GEMM (the same fields in d, ag_plan: A this rank's rows of one A
 * shared by all ranks, C every row). */
typedef struct {
  int live, serial, ag;
  int M, N, K;
  weave_gemm_rs_desc_t d;
  weave_gemm_rs_plan_t plan;
  weave_ag_gemm_plan_t ag_plan;
  void *dA, *dB, *dbias, *dC;
  int row_begin, rows;
} slot_t;

/* Rows of A this rank holds, and rows of C it gets. */
static int a_rows(const slot_t *p) { return p->ag ? p->rows : p->M; }
static int c_rows(const slot_t *p) { return p->ag ? p->M : p->rows; }

/* ------------------------------------------------------------------------------------------------
 * the decisions (splitmix64: the same sequence on every rank)
 * ---------------------------------------------------------------------------------------------- */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t rng_next(uint64_t *s) { return mix64(*s += 0x9e3779b97f4a7c15ull); }
static double rng_u01(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }
static int rng_int(uint64_t *s, int lo, int hi) { return lo + (int)(rng_next(s) % (uint64_t)(hi - lo + 1)); }
/* Log-uniform in [lo, hi]: small shapes often (fast calls), large ones now and then. Half of the
 * draws are rounded up to a multiple of 16 (aligned rows); the others keep their tail. */
static int rng_dim(uint64_t *s, int lo, int hi) {
  int v = (int)floor(exp(log((double)lo) + rng_u01(s) * (log((double)hi + 1) - log((double)lo))));
  if (v < lo) v = lo;
  if (v > hi) v = hi;
  if (rng_u01(s) < 0.5 && (v + 15) / 16 * 16 <= hi) v = (v + 15) / 16 * 16;
  return v;
}

static void fail(soak_t *s, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(soak_t *s, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&s->mu);
  s->failures++;
  fprintf(stderr, "FAIL rank %d: ", rank);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (seed 0x%" PRIx64 ")\n", s->seed);
  pthread_mutex_unlock(&s->mu);
  va_end(ap);
}

static void desc_name(const slot_t *p, char *buf, size_t n) {
  if (p->ag) {
    snprintf(buf, n, "AllGather + GEMM plan #%d %dx%dx%d %s %s%s B %s alpha %g", p->serial, p->M, p->N, p->K,
             weave_dtype_name(p->d.dtype), weave_strategy_name(p->d.strategy), p->d.has_bias ? " +bias" : "",
             p->d.b_layout == WEAVE_LAYOUT_COL ? "col" : "row", (double)p->d.alpha);
    return;
  }
  snprintf(buf, n, "plan #%d %dx%dx%d %s %s %s/%s%s B %s %s alpha %g", p->serial, p->M, p->N, p->K,
           weave_dtype_name(p->d.dtype), weave_strategy_name(p->d.strategy),
           p->d.reduce == WEAVE_REDUCE_ATOMIC ? "atomic" : "det", p->d.fp32_slots ? "fp32 slots" : "dtype slots",
           p->d.has_bias ? " +bias" : "", p->d.b_layout == WEAVE_LAYOUT_COL ? "col" : "row",
           p->d.tile_order == WEAVE_ORDER_OWN_FIRST ? "own-first" : "own-last", (double)p->d.alpha);
}

/* ------------------------------------------------------------------------------------------------
 * inputs: generation `gen` of plan `serial` on rank r, regenerable by every rank (A row by row, so
 * that the reference needs only the rows it checks)
 * ---------------------------------------------------------------------------------------------- */
static uint64_t input_seed(uint64_t seed, int serial, int r, long gen, int what) {
  return mix64(seed ^ mix64(((uint64_t)serial << 40) ^ ((uint64_t)r << 32) ^ ((uint64_t)gen << 4) ^ (uint64_t)what));
}
static void fill_A_rows(const slot_t *p, uint64_t seed, int r, long gen, void *A, int row_lo, int row_hi) {
  const size_t e = weave_dtype_size(p->d.dtype);
  if (p->ag) r = 0; /* AllGather + GEMM: one A, its rows spread over the ranks */
  for (int i = row_lo; i < row_hi; ++i)
    weave_fill_random(p->d.dtype, (char *)A + (size_t)i * p->K * e, (size_t)p->K,
                      input_seed(seed, p->serial, r, gen, 1) + (uint64_t)i);
}
static void fill_B(const slot_t *p, uint64_t seed, int r, long gen, void *B) {
  weave_fill_random(p->d.dtype, B, (size_t)p->K * p->N, input_seed(seed, p->serial, r, gen, 2));
}
static void fill_bias(const slot_t *p, uint64_t seed, long gen, void *bias) {
  weave_fill_random(p->d.dtype, bias, (size_t)p->N, input_seed(seed, p->serial, 0, gen, 3));
}

/* This rank's inputs of generation gen, uploaded in place (the stream is idle: the caller synced). */
static void upload_inputs(const slot_t *p, uint64_t seed, int rank, long gen) {
  const size_t e = weave_dtype_size(p->d.dtype);
  void *h =
      malloc((size_t)p->M * p->K * e > (size_t)p->K * p->N * e ? (size_t)p->M * p->K * e : (size_t)p->K * p->N * e);
  fill_A_rows(p, seed, rank, gen, h, 0, p->M);
  if (a_rows(p))
    harness_upload(p->dA, (char *)h + (size_t)(p->ag ? p->row_begin : 0) * p->K * e, (size_t)a_rows(p) * p->K * e);
  fill_B(p, seed, rank, gen, h);
  harness_upload(p->dB, h, (size_t)p->K * p->N * e);
  if (p->d.has_bias) {
    fill_bias(p, seed, gen, h);
    harness_upload(p->dbias, h, (size_t)p->N * e);
  }
  free(h);
}

/* This rank's rows of C (on the device, stream synced) against fp64 on 3 ranges of up to 4 rows;
 * AllGather + GEMM's C, every row of A . B_rank, as that of one rank holding every row. */
static void check(soak_t *s, harness_rank_t *hr, const slot_t *p, long gen, long call) {
  const size_t e = weave_dtype_size(p->d.dtype);
  const int world = p->ag ? 1 : hr->world, rows = c_rows(p), row_begin = p->ag ? 0 : p->row_begin;
  int begins[3];
  const int n = weave_sample_rows(rows, begins);
  void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) {
    As[r] = malloc((size_t)p->M * p->K * e);
    Bs[r] = malloc((size_t)p->K * p->N * e);
    for (int i = 0; i < 3; ++i)
      fill_A_rows(p, s->seed, r, gen, As[r], row_begin + begins[i], row_begin + begins[i] + n);
    fill_B(p, s->seed, p->ag ? hr->rank : r, gen, Bs[r]);
  }
  void *bias = NULL;
  if (p->d.has_bias) {
    bias = malloc((size_t)p->N * e);
    fill_bias(p, s->seed, gen, bias);
  }
  unsigned char *got = (unsigned char *)malloc((size_t)rows * p->N * e);
  harness_download(got, p->dC, (size_t)rows * p->N * e);
  weave_check_t res[3];
  weave_check_sampled_rows(p->M, p->N, p->K, world, p->d.dtype, p->d.b_layout, p->d.alpha, (const void *const *)As,
                           (const void *const *)Bs, bias, row_begin, rows, got, res);
  for (int i = 0; i < 3; ++i)
    if (res[i].wrong) {
      char dn[256];
      desc_name(p, dn, sizeof(dn));
      fail(s, hr->rank, "call %ld, %s: rows %d..%d: %zu wrong (first at %zu, max abs err %g)", call, dn,
           row_begin + begins[i], row_begin + begins[i] + n - 1, res[i].wrong, res[i].first_bad, res[i].max_abs_err);
      pthread_mutex_lock(&s->mu);
      s->wrong += (long)res[i].wrong;
      pthread_mutex_unlock(&s->mu);
    }
  free(got);
  free(bias);
  for (int r = 0; r < world; ++r) {
    free(As[r]);
    free(Bs[r]);
  }
}

/* ------------------------------------------------------------------------------------------------
 * plans
 * ---------------------------------------------------------------------------------------------- */
static void draw_plan(uint64_t *rng, slot_t *p) {
  static const float alphas[] = {1.0f, 0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};
  p->M = rng_dim(rng, SOAK_MIN_M, SOAK_MAX_M);
  p->N = rng_dim(rng, 8, SOAK_MAX_N);
  p->K = rng_dim(rng, 8, SOAK_MAX_K);
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.strategy = (weave_strategy_t)rng_int(rng, 0, 3);
  d.reduce = (weave_reduce_t)rng_int(rng, 0, 1);
  d.dtype = (weave_dtype_t)rng_int(rng, 0, 2);
  d.b_layout = (weave_layout_t)rng_int(rng, 0, 1);
  d.tile_order = (weave_tile_order_t)rng_int(rng, 0, 1);
  d.has_bias = rng_int(rng, 0, 1);
  d.fp32_slots = rng_int(rng, 0, 1);
  d.alpha = alphas[rng_int(rng, 0, (int)(sizeof(alphas) / sizeof(alphas[0])) - 1)];
  p->ag = rng_int(rng, 0, 2) == 0;
  /* AllGather + GEMM's fused kernel needs the Hopper role: 16-bit, rows of 16-byte multiples */
  const int hopper =
      d.dtype != WEAVE_FP32 && (p->K * 2) % 16 == 0 && (d.b_layout == WEAVE_LAYOUT_COL || (p->N * 2) % 16 == 0);
  if (p->ag && d.strategy == WEAVE_STRATEGY_FUSED && !hopper) d.strategy = WEAVE_STRATEGY_BULK;
  p->d = d;
}

static void free_buffers(slot_t *p) {
  harness_dev_free(p->dA);
  harness_dev_free(p->dB);
  if (p->dbias) harness_dev_free(p->dbias);
  harness_dev_free(p->dC);
}

/* Collective. 0 on success. The buffers are allocated and filled before the plan is created: the
 * create's closing agreement then guarantees that no rank launches while another still allocates
 * (see plan_close). */
static int plan_open(soak_t *s, harness_rank_t *hr, slot_t *p) {
  char dn[256];
  const size_t e = weave_dtype_size(p->d.dtype);
  weave_row_split(p->M, hr->world, hr->rank, &p->row_begin, &p->rows);
  p->dA = harness_dev_alloc((size_t)(a_rows(p) ? a_rows(p) : 1) * p->K * e);
  p->dB = harness_dev_alloc((size_t)p->K * p->N * e);
  p->dbias = p->d.has_bias ? harness_dev_alloc((size_t)p->N * e) : NULL;
  p->dC = harness_dev_alloc((size_t)(c_rows(p) ? c_rows(p) : 1) * p->N * e);
  upload_inputs(p, s->seed, hr->rank, 0);
  weave_result_t rc;
  if (p->ag) {
    weave_ag_gemm_desc_t ad = WEAVE_AG_GEMM_DESC_INIT;
    ad.dtype = p->d.dtype;
    ad.b_layout = p->d.b_layout;
    ad.strategy = p->d.strategy;
    ad.alpha = p->d.alpha;
    ad.has_bias = p->d.has_bias;
    rc = weave_ag_gemm_plan_create(hr->team, p->M, p->N, p->K, &ad, &p->ag_plan);
  } else {
    rc = weave_gemm_rs_plan_create(hr->team, p->M, p->N, p->K, &p->d, &p->plan);
  }
  if (rc != WEAVE_SUCCESS) {
    desc_name(p, dn, sizeof(dn));
    fail(s, hr->rank, "plan_create %s: %s: %s", dn, weave_get_error_string(rc), weave_get_last_error(hr->team));
    free_buffers(p);
    return 1;
  }
  p->live = 1;
  if (hr->rank == 0) {
    pthread_mutex_lock(&s->mu);
    s->plans++;
    pthread_mutex_unlock(&s->mu);
  }
  return 0;
}

/* Collective. cudaFree waits for the whole device, other ranks' kernels included: a rank that frees
 * while a faster rank's next kernel already spins on it would stall both until the timeout (rank
 * threads share one GPU). So every rank frees, then the barrier, then anyone calls again. */
static void plan_close(soak_t *s, harness_rank_t *hr, slot_t *p) {
  weave_result_t rc = p->ag ? weave_ag_gemm_plan_destroy(p->ag_plan) : weave_gemm_rs_plan_destroy(p->plan);
  if (rc != WEAVE_SUCCESS)
    fail(s, hr->rank, "plan_destroy #%d: %s: %s", p->serial, weave_get_error_string(rc),
         weave_get_last_error(hr->team));
  harness_sync(hr->stream);
  free_buffers(p);
  memset(p, 0, sizeof(*p));
  weave_barrier(hr->team);
}

static weave_result_t plan_execute(const harness_rank_t *hr, const slot_t *p) {
  if (p->ag) return weave_ag_gemm_execute(p->ag_plan, p->rows ? p->dA : NULL, p->dB, p->dbias, p->dC, NULL, hr->stream);
  return weave_gemm_rs_execute(p->plan, p->dA, p->dB, p->dbias, p->dC, hr->stream);
}

static int team_sync(soak_t *s, harness_rank_t *hr, long call) {
  weave_result_t rc = weave_team_sync(hr->team, hr->stream);
  if (rc == WEAVE_SUCCESS) return 0;
  fail(s, hr->rank, "weave_team_sync after call %ld: %s: %s", call, weave_get_error_string(rc),
       weave_get_last_error(hr->team));
  pthread_mutex_lock(&s->mu);
  s->sync_errors++;
  pthread_mutex_unlock(&s->mu);
  return 1;
}

/* ------------------------------------------------------------------------------------------------
 * what is left at the end
 * ---------------------------------------------------------------------------------------------- */
/* Largest weave_malloc that fits now (collective; multiples of the heap alignment). The first try,
 * the whole heap less its reserved header, fits an empty heap; else a bisection (its failed tries
 * log a warning each). */
static size_t heap_largest(harness_rank_t *hr, size_t heap) {
  void *ptr = NULL;
  size_t hi = (heap - WEAVE_HEAP_RESERVED) / WEAVE_HEAP_ALIGNMENT, lo = 0; /* in units: lo fits, hi+1 does not */
  if (weave_malloc(hr->team, hi * WEAVE_HEAP_ALIGNMENT, &ptr) == WEAVE_SUCCESS) {
    weave_free(hr->team, ptr);
    return hi * WEAVE_HEAP_ALIGNMENT;
  }
  hi--;
  while (lo < hi) {
    size_t mid = (lo + hi + 1) / 2;
    if (weave_malloc(hr->team, mid * WEAVE_HEAP_ALIGNMENT, &ptr) == WEAVE_SUCCESS) {
      weave_free(hr->team, ptr);
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo * WEAVE_HEAP_ALIGNMENT;
}

/* Free memory of rank 0's device, read by rank 0 while every rank waits between two barriers. */
static size_t device_free(harness_rank_t *hr) {
  size_t mem_free = 0, total = 0;
  cudaDeviceSynchronize();
  weave_barrier(hr->team);
  if (hr->rank == 0) cudaMemGetInfo(&mem_free, &total);
  weave_barrier(hr->team);
  return mem_free;
}

/* First use of every strategy x dtype (aligned and tail shapes): module loading, cuBLASLt, the
 * per-stream stream-K workspaces of the Hopper GEMM (kept until exit by design, weave.h). */
static void warm_up(soak_t *s, harness_rank_t *hr) {
  static const int shapes[2][3] = {{4096, 4096, 256}, {1536, 1000, 264}};
  for (int ag = 0; ag < 2; ++ag)
    for (int sh = 0; sh < 2; ++sh)
      for (int st = WEAVE_STRATEGY_FUSED; st <= WEAVE_STRATEGY_BASELINE; ++st)
        for (int dt = 0; dt < 3; ++dt) {
          if (ag && st == WEAVE_STRATEGY_FUSED && dt == WEAVE_FP32) continue; /* no Hopper role for fp32 */
          slot_t p;
          memset(&p, 0, sizeof(p));
          p.ag = ag;
          weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
          d.strategy = (weave_strategy_t)st;
          d.dtype = (weave_dtype_t)dt;
          p.d = d;
          p.serial = -1;
          p.M = shapes[sh][0];
          p.N = shapes[sh][1];
          p.K = shapes[sh][2];
          if (plan_open(s, hr, &p)) continue;
          if (plan_execute(hr, &p) != WEAVE_SUCCESS)
            fail(s, hr->rank, "warm-up execute: %s", weave_get_last_error(hr->team));
          team_sync(s, hr, -1);
          plan_close(s, hr, &p);
        }
  if (hr->rank == 0) {
    pthread_mutex_lock(&s->mu);
    s->plans = 0;
    pthread_mutex_unlock(&s->mu);
  }
}

static int rank_fn(harness_rank_t *hr) {
  soak_t *s = (soak_t *)hr->user;
  const size_t heap_start = heap_largest(hr, SOAK_HEAP);
  warm_up(s, hr);
  const size_t mem_start = device_free(hr);

  uint64_t rng = s->seed;
  slot_t slots[SOAK_MAX_PLANS];
  memset(slots, 0, sizeof(slots));
  int serial = 0, stop = 0, broken = 0;
  for (long call = 0; call < s->calls && !stop; ++call) {
    int alive = 0;
    for (int i = 0; i < SOAK_MAX_PLANS; ++i) alive += slots[i].live;
    const double u = rng_u01(&rng);
    if (alive > 0 && u < 0.04) { /* destroy one (collective, same one everywhere) */
      int k = rng_int(&rng, 0, alive - 1);
      for (int i = 0; i < SOAK_MAX_PLANS; ++i)
        if (slots[i].live && k-- == 0) {
          plan_close(s, hr, &slots[i]);
          break;
        }
      alive--;
    }
    if (alive == 0 || (alive < SOAK_MAX_PLANS && u > 0.94)) { /* create one */
      for (int i = 0; i < SOAK_MAX_PLANS; ++i)
        if (!slots[i].live) {
          draw_plan(&rng, &slots[i]);
          slots[i].serial = serial++;
          if (s->verbose && hr->rank == 0) {
            char dn[256];
            desc_name(&slots[i], dn, sizeof(dn));
            printf("soak: call %ld creates %s\n", call, dn);
          }
          if (plan_open(s, hr, &slots[i])) stop = 1; /* every rank got the error: all stop */
          break;
        }
      if (stop) break;
    }
    /* one of the live plans, at random */
    alive = 0;
    for (int i = 0; i < SOAK_MAX_PLANS; ++i) alive += slots[i].live;
    int k = rng_int(&rng, 0, alive - 1);
    slot_t *p = NULL;
    for (int i = 0; i < SOAK_MAX_PLANS && !p; ++i)
      if (slots[i].live && k-- == 0) p = &slots[i];
    const int checked = call % SOAK_CHECK_EVERY == SOAK_CHECK_EVERY - 1 || call == s->calls - 1;
    if (s->verbose && hr->rank == 0) printf("soak: call %ld runs plan #%d\n", call, p->serial);
    /* After a failed call or sync this rank makes no more calls, but it still takes every plan
     * decision, so the collectives stay in step and every rank ends (the others' next sync times
     * out and says so). */
    if (broken) continue;
    if (checked) { /* new inputs in place, the output poisoned */
      if (team_sync(s, hr, call - 1)) {
        broken = 1;
        continue;
      }
      upload_inputs(p, s->seed, hr->rank, call + 1);
      harness_poison(p->dC, (size_t)c_rows(p) * p->N * weave_dtype_size(p->d.dtype), hr->stream);
    }
    weave_result_t rc = plan_execute(hr, p);
    if (rc != WEAVE_SUCCESS) {
      char dn[256];
      desc_name(p, dn, sizeof(dn));
      fail(s, hr->rank, "execute call %ld, %s: %s: %s", call, dn, weave_get_error_string(rc),
           weave_get_last_error(hr->team));
      broken = 1;
      continue;
    }
    if ((checked || (call + 1) % SOAK_SYNC_EVERY == 0) && team_sync(s, hr, call)) {
      broken = 1;
      continue;
    }
    if (checked) {
      check(s, hr, p, call + 1, call);
      if (hr->rank == 0) {
        pthread_mutex_lock(&s->mu);
        s->checked++;
        pthread_mutex_unlock(&s->mu);
      }
    }
  }
  if (!broken) team_sync(s, hr, s->calls);
  for (int i = 0; i < SOAK_MAX_PLANS; ++i)
    if (slots[i].live) plan_close(s, hr, &slots[i]);

  const size_t mem_end = device_free(hr);
  if (hr->rank == 0 && mem_end + SOAK_MEM_SLACK < mem_start)
    fail(s, 0, "device memory: %.1f MiB free after the warm-up, %.1f MiB at the end: %.1f MiB not given back",
         mem_start / 1048576.0, mem_end / 1048576.0, ((double)mem_start - (double)mem_end) / 1048576.0);
  void *ptr = NULL;
  weave_result_t rc = weave_malloc(hr->team, heap_start, &ptr);
  if (rc != WEAVE_SUCCESS)
    fail(s, hr->rank, "heap: the %zu bytes that fitted at the start no longer fit: %s", heap_start,
         weave_get_last_error(hr->team));
  else
    weave_free(hr->team, ptr);
  return 0;
}

int main(int argc, char **argv) {
  static const cli_option_t options[] = {
      {"calls", 'n', "N", "GEMM + ReduceScatter and AllGather + GEMM calls (default 10000)"},
      {"seed", 's', "S", "seed of every decision (default WEAVE_TEST_SEED, else fresh)"},
      {"verbose", 'v', NULL, "rank 0 prints every plan it creates and the plan of every call"},
      {"help", 'h', NULL, "this text"},
      {NULL, 0, NULL, NULL},
  };
  soak_t s;
  memset(&s, 0, sizeof(s));
  pthread_mutex_init(&s.mu, NULL);
  s.calls = 10000;
  s.seed = harness_seed();
  cli_t c;
  cli_init(&c, "gpu_soak_test", options);
  for (int key; (key = cli_next(&c, argc, argv)) != -1;) {
    switch (key) {
      case 'n': s.calls = cli_long(&c, optarg, 1, 100000000L); break;
      case 's': s.seed = (uint64_t)cli_long(&c, optarg, 0, 0x7fffffffffffffffL); break;
      case 'v': s.verbose = 1; break;
      case 'h':
        cli_usage(&c, stdout, "[options]   (random plans and calls on one team, checked against fp64)");
        return 0;
    }
  }
  if (harness_device_count() == 0) {
    printf("gpu_soak_test: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  const int launched = harness_launched_world();
  const int world = launched > 0 ? launched : SOAK_WORLD;
  int devices[WEAVE_MAX_WORLD];
  const int ndev = harness_device_count();
  for (int r = 0; r < world; ++r) devices[r] = r % ndev;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = SOAK_HEAP;
  int rc = harness_run(world, devices, &cfg, rank_fn, &s);
  if (rc == HARNESS_SKIP) return HARNESS_SKIP;
  const int bad = rc != 0 || s.failures != 0;
  if (harness_launched_rank() == 0)
    printf("gpu_soak_test: world %d, %ld calls, %ld plans, %ld checked, %ld wrong, %ld sync errors, seed 0x%" PRIx64
           " (WEAVE_TEST_SEED): %s\n",
           world, s.calls, s.plans, s.checked, s.wrong, s.sync_errors, s.seed, bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}
