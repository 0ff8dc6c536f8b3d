/* AUTO plans' choice: see autotune.h. */
#include "plan/autotune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/dtype.h"
#include "plan/plan_model.h"
#include "plan/tune.h"
#include "kernels/kernels.h"

#define TUNE_MAX_CANDIDATES 5
#define TUNE_ROUNDS 3   /* each candidate timed in this many rounds, interleaved with the others' */
#define TUNE_MAX_REPS 8 /* timed calls per round */
#define TUNE_MIN_REPS 2
#define TUNE_TARGET_US 30000.0 /* timed calls per candidate over all rounds: about this long */
#define TUNE_LOCK_MS 2000      /* the cache file's lock */
#define TUNE_PRUNE 1.10        /* a neighbour split the model predicts this much slower than the best is skipped */
#define TUNE_PREFER 0.99       /* a later candidate must beat the best so far by 1% (noise) */
#define TUNE_CLOSE 1.03        /* the two fastest this close: both timed TUNE_ROUNDS rounds more */
#define TUNE_MAX_SAMPLES (2 * TUNE_ROUNDS * TUNE_MAX_REPS)

int weave_capture_active(void) {
  const cudaStream_t streams[2] = {cudaStreamLegacy, cudaStreamPerThread};
  for (int i = 0; i < 2; ++i) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(streams[i], &st);
    if (e == cudaErrorStreamCaptureImplicit) { /* a blocking stream of this device is capturing */
      cudaGetLastError();
      return 1;
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (st != cudaStreamCaptureStatusNone) return 1;
  }
  return 0;
}

static double now_ms(void) { return (double)weave_monotonic_ms(); }

/* ---- the cache key and rank 0's entry --------------------------------------------------------- */
void weave_tune_key_for(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *d, weave_tune_key_t *k) {
  memset(k, 0, sizeof(*k));
  snprintf(k->device, sizeof(k->device), "%.127s", team->info.name);
  k->sms = team->info.sm_count;
  cudaDriverGetVersion(&k->driver);
  cudaRuntimeGetVersion(&k->runtime);
  int major, minor, patch;
  weave_get_version(&major, &minor, &patch);
  snprintf(k->weave, sizeof(k->weave), "%d.%d.%d", major, minor, patch);
  k->world = team->world;
  k->ranks_per_device = team->info.ranks_on_device;
  k->m_bucket = weave_tune_bucket(M);
  k->N = N;
  k->K = K;
  k->dtype = d->dtype;
  k->out_dtype = weave_dtype_out(d->dtype, d->out_dtype);
  k->b_layout = d->b_layout;
  k->reduce = d->reduce;
  k->fp32_slots = d->fp32_slots;
  k->scale_mode = d->scale_mode == WEAVE_SCALE_ROW ? WEAVE_SCALE_ROW : WEAVE_SCALE_NONE;
  k->fp8_accum = d->fp8_accum;
  weave_hgemm_knobs_key(k->knobs, sizeof(k->knobs));
}

void weave_tune_key_for_ag(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *d, weave_tune_key_t *k) {
  weave_gemm_rs_desc_t rs = WEAVE_GEMM_RS_DESC_INIT;
  rs.dtype = d->dtype;
  rs.out_dtype = d->out_dtype;
  rs.b_layout = d->b_layout;
  rs.scale_mode = d->scale_mode;
  rs.fp8_accum = d->fp8_accum;
  weave_tune_key_for(team, M, N, K, &rs, k);
  k->reduce = WEAVE_TUNE_GATHER;
}

/* Rank 0's ints to every rank (each an allgather of the team). */
static weave_result_t from_rank0(weave_team_t team, int *v, int n) {
  int all[WEAVE_MAX_WORLD];
  for (int i = 0; i < n; ++i) {
    WEAVE_CHECK(weave_team_allgather_int(team, v[i], all));
    v[i] = all[0];
  }
  return WEAVE_SUCCESS;
}

static void describe(char *buf, size_t len, weave_strategy_t s, int g, int c) {
  if (s == WEAVE_STRATEGY_FUSED && g > 0)
    snprintf(buf, len, "fused %d+%d", g, c);
  else
    snprintf(buf, len, "%s", weave_strategy_name(s));
}

/* ---- the model -------------------------------------------------------------------------------- */
static void model_inputs(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *d, int g, int c,
                         weave_auto_model_in_t *in) {
  int clock_khz = 1500000, mem_khz = 2600000, bus_bits = 5120;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, team->info.device);
  cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, team->info.device);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, team->info.device);
  cudaGetLastError();
  memset(in, 0, sizeof(*in));
  in->M = M;
  in->N = N;
  in->K = K;
  in->world = team->world;
  in->ranks_on_device = team->info.ranks_on_device;
  in->dtype = d->dtype;
  in->fp8_fast = d->fp8_accum == WEAVE_FP8_ACCUM_FAST;
  const weave_dtype_t out = weave_dtype_out(d->dtype, d->out_dtype);
  in->out_bytes = weave_dtype_size(out);
  in->slot_bytes = d->fp32_slots || d->reduce == WEAVE_REDUCE_ATOMIC ? 4 : in->out_bytes;
  /* an SM's dense rate: 4096 16-bit FLOP per clock (128 fp32 FMA FLOP), twice that for fp8; about
   * 0.7 of it is reached */
  double per_sm = d->dtype == WEAVE_FP32 ? 128.0 : weave_dtype_is_fp8(d->dtype) ? 8192.0 : 4096.0;
  in->gpu_flops = 0.7 * per_sm * clock_khz * 1e3 * team->info.sm_count;
  in->hbm_bytes_per_s = 0.8 * 2.0 * mem_khz * 1e3 * bus_bits / 8.0;
  in->link_bytes_per_s = 0.8 * 450e9; /* NVLink 4 per direction (H100/H200 SXM); not queryable */
  in->gemm_blocks = g;
  in->comm_blocks = c;
}

static void choose_by_model(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *d,
                            weave_plan_split_fn split, const char *reason, weave_auto_choice_t *out) {
  int g = 0, c = 0;
  weave_log_quiet(1);
  weave_gemm_rs_desc_t fd = *d;
  fd.strategy = WEAVE_STRATEGY_FUSED;
  if (split(team, M, N, K, &fd, &g, &c) != WEAVE_SUCCESS) g = c = 0;
  weave_log_quiet(0);
  weave_auto_model_in_t in;
  weave_auto_model_t t;
  model_inputs(team, M, N, K, d, g, c, &in);
  out->strategy = weave_auto_model(&in, &t);
  if (out->strategy == WEAVE_STRATEGY_FUSED && g == 0) out->strategy = WEAVE_STRATEGY_BASELINE;
  out->gemm_blocks = out->comm_blocks = 0;
  out->chosen_by = WEAVE_CHOSEN_BY_MODEL;
  snprintf(out->why, sizeof(out->why), "model (%s): predicted baseline %.3f ms, bulk %.3f ms, fused %.3f ms", reason,
           t.baseline_ms, t.bulk_ms, t.fused_ms);
}

/* ---- measurement ------------------------------------------------------------------------------ */
typedef struct {
  weave_strategy_t strategy;
  int gemm_blocks, comm_blocks; /* asked (0: the planner's), then as planned */
  double ms;                    /* the slowest rank's median; < 0: not run */
  int reps;                     /* timed calls a round, agreed in the first */
  int dead;                     /* could not be planned or run: known to every rank */
  int nsamples;                 /* this rank's timed calls so far */
  double samples[TUNE_MAX_SAMPLES];
} candidate_t;

/* The plan being tuned: GEMM + ReduceScatter (desc), or with ag AllGather + GEMM (ad). The candidates'
 * plans are made from it with their strategy and split. */
typedef struct {
  weave_team_t team;
  int M, N, K;
  int ag;
  weave_gemm_rs_desc_t desc;
  weave_ag_gemm_desc_t ad;
  int rows; /* this rank's rows: of C (gemm_rs) or of A (ag_gemm) */
  void *A, *B, *C, *bias;
  float *sa, *sb;
  cudaStream_t stream;
  cudaEvent_t ev[2 * TUNE_MAX_REPS];
  int nev;
} tuner_t;
static void tuner_free(tuner_t *t) {
  cudaFree(t->A);
  cudaFree(t->B);
  cudaFree(t->C);
  cudaFree(t->bias);
  cudaFree(t->sa);
  cudaFree(t->sb);
  for (int i = 0; i < t->nev; ++i) cudaEventDestroy(t->ev[i]);
  if (t->stream) cudaStreamDestroy(t->stream);
  cudaGetLastError();
}

/* This rank's scratch inputs (random, as real data draws real power), output, stream and events.
 * Local; msg says why not. */
static int tuner_alloc(tuner_t *t, char *msg, size_t len) {
  weave_team_t team = t->team;
  const weave_dtype_t dtype = t->ag ? t->ad.dtype : t->desc.dtype;
  const weave_dtype_t out = weave_dtype_out(dtype, t->ag ? t->ad.out_dtype : t->desc.out_dtype);
  const weave_scale_mode_t scale_mode = t->ag ? t->ad.scale_mode : t->desc.scale_mode;
  const int has_bias = t->ag ? t->ad.has_bias : t->desc.has_bias;
  const size_t e = weave_dtype_size(dtype), eo = weave_dtype_size(out);
  int rb;
  weave_split_rows_of(t->M, team->world, team->rank, &rb, &t->rows);
  /* gemm_rs: A [M, K], C this rank's rows; ag_gemm: A this rank's rows, C [M, N] */
  const size_t a_rows = t->ag ? (size_t)t->rows : (size_t)t->M, c_rows = t->ag ? (size_t)t->M : (size_t)t->rows;
  const size_t a = (a_rows ? a_rows : 1) * t->K * e, b = (size_t)t->K * t->N * e, c = c_rows * t->N * eo;
  const size_t na = scale_mode == WEAVE_SCALE_ROW ? (a_rows ? a_rows : 1) : 1,
               nb = scale_mode == WEAVE_SCALE_ROW ? (size_t)t->N : 1;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess || (a + b + c) + (a + b + c) / 8 + (64u << 20) > free_b) {
    cudaGetLastError();
    snprintf(msg, len, "%.0f MiB of scratch inputs do not fit the device's free memory", (a + b + c) / 1048576.0);
    return 0;
  }
  int ok = cudaMalloc(&t->A, a) == cudaSuccess && cudaMalloc(&t->B, b) == cudaSuccess &&
           (c == 0 || cudaMalloc(&t->C, c) == cudaSuccess) &&
           (!has_bias || cudaMalloc(&t->bias, (size_t)t->N * eo) == cudaSuccess) &&
           (scale_mode == WEAVE_SCALE_NONE || (cudaMalloc((void **)&t->sa, na * 4) == cudaSuccess &&
                                               cudaMalloc((void **)&t->sb, nb * 4) == cudaSuccess)) &&
           cudaStreamCreateWithFlags(&t->stream, cudaStreamNonBlocking) == cudaSuccess;
  for (; ok && t->nev < 2 * TUNE_MAX_REPS; ++t->nev) ok = cudaEventCreate(&t->ev[t->nev]) == cudaSuccess;
  const uint32_t seed = 0x5eed0000u + 977u * (uint32_t)team->rank;
  struct CUstream_st *s = (struct CUstream_st *)t->stream;
  if (ok)
    ok = weave_launch_fill_random(t->A, a / e, dtype, seed, s) == 0 &&
         weave_launch_fill_random(t->B, (size_t)t->K * t->N, dtype, seed + 1, s) == 0 &&
         (!t->bias || weave_launch_fill_random(t->bias, (size_t)t->N, out, seed + 2, s) == 0) &&
         (!t->sa ||
          (weave_launch_fill_value(t->sa, na, 1.0f, s) == 0 && weave_launch_fill_value(t->sb, nb, 1.0f, s) == 0)) &&
         cudaStreamSynchronize(t->stream) == cudaSuccess;
  if (!ok) snprintf(msg, len, "scratch inputs: %s", cudaGetErrorString(cudaGetLastError()));
  return ok;
}

/* A candidate's plan: of the tuned op. */
typedef struct {
  weave_gemm_rs_plan_t rs;
  weave_ag_gemm_plan_t ag;
} tune_plan_t;

static weave_result_t tune_plan_create(tuner_t *t, const candidate_t *c, tune_plan_t *plan) {
  memset(plan, 0, sizeof(*plan));
  if (t->ag) {
    weave_ag_gemm_desc_t d = t->ad;
    d.strategy = c->strategy;
    d.gemm_blocks = c->gemm_blocks;
    d.comm_blocks = c->comm_blocks;
    return weave_ag_gemm_plan_create(t->team, t->M, t->N, t->K, &d, &plan->ag);
  }
  weave_gemm_rs_desc_t d = t->desc;
  d.strategy = c->strategy;
  d.gemm_blocks = c->gemm_blocks;
  d.comm_blocks = c->comm_blocks;
  d.trace = 0;
  weave_plan_untraced(1); /* WEAVE_TRACE is for the caller's plans */
  const weave_result_t rc = weave_gemm_rs_plan_create(t->team, t->M, t->N, t->K, &d, &plan->rs);
  weave_plan_untraced(0);
  return rc;
}

/* The split a fused candidate's plan runs (0, 0 for the others). */
static void tune_plan_split(const tune_plan_t *plan, int *g, int *c) {
  if (plan->ag) {
    weave_ag_gemm_info_t info;
    weave_ag_gemm_plan_info(plan->ag, &info);
    *g = info.strategy == WEAVE_STRATEGY_FUSED ? info.gemm_blocks : 0;
    *c = info.strategy == WEAVE_STRATEGY_FUSED ? info.comm_blocks : 0;
  } else {
    weave_gemm_rs_info_t info;
    weave_gemm_rs_plan_info(plan->rs, &info);
    *g = info.strategy == WEAVE_STRATEGY_FUSED ? info.gemm_blocks : 0;
    *c = info.strategy == WEAVE_STRATEGY_FUSED ? info.comm_blocks : 0;
  }
}

static weave_result_t tune_plan_destroy(tune_plan_t *plan) {
  return plan->ag ? weave_ag_gemm_plan_destroy(plan->ag) : weave_gemm_rs_plan_destroy(plan->rs);
}

static weave_result_t tuner_call(tuner_t *t, const tune_plan_t *plan) {
  if (plan->ag)
    return weave_ag_gemm_execute_scaled(plan->ag, t->rows ? t->A : NULL, t->B, t->sa, t->sb, t->bias, t->C, NULL,
                                        (weave_stream_t)t->stream);
  return weave_gemm_rs_execute_scaled(plan->rs, t->A, t->B, t->sa, t->sb, t->bias, t->C, (weave_stream_t)t->stream);
}

/* A `why` that snprintf (its return value n) cut at len bytes ends in "..." instead. */
static void why_cut(char *why, size_t len, int n) {
  if (n >= (int)len && len >= 4) memcpy(why + len - 4, "...", 4);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One round of one candidate: its plan created (collective, agreed), then reps calls each between
 * two events, their times added to the candidate's samples, and the plan destroyed. The first
 * round also warms up and sizes the run by one call (the slowest rank's: every rank makes the same
 * number of calls). A candidate that cannot be planned or run is dead on every rank from then on.
 * Fails only where the bootstrap fails or the team was aborted. */
static weave_result_t time_round(tuner_t *t, candidate_t *c, int first) {
  weave_team_t team = t->team;
  tune_plan_t plan;
  weave_log_quiet(1);
  weave_result_t created = tune_plan_create(t, c, &plan);
  weave_log_quiet(0);
  if (created != WEAVE_SUCCESS) {
    weave_log(WEAVE_LOG_INFO, team, "auto: %s cannot run here: %s", weave_strategy_name(c->strategy),
              weave_get_last_error(team));
    c->dead = 1; /* agreed by the creation */
    /* the team itself failing is no verdict on the candidate */
    if (team->aborted_by) return WEAVE_ERROR_ABORTED;
    if (created == WEAVE_ERROR_BOOTSTRAP || created == WEAVE_ERROR_TIMEOUT) return created;
    return WEAVE_SUCCESS;
  }
  tune_plan_split(&plan, &c->gemm_blocks, &c->comm_blocks);
  int ok = 1, all[WEAVE_MAX_WORLD];
  weave_result_t rc = WEAVE_SUCCESS;
  if (first) {
    float warm_ms = 0;
    ok = tuner_call(t, &plan) == WEAVE_SUCCESS && cudaEventRecord(t->ev[0], t->stream) == cudaSuccess &&
         tuner_call(t, &plan) == WEAVE_SUCCESS && cudaEventRecord(t->ev[1], t->stream) == cudaSuccess &&
         cudaEventSynchronize(t->ev[1]) == cudaSuccess &&
         cudaEventElapsedTime(&warm_ms, t->ev[0], t->ev[1]) == cudaSuccess &&
         weave_team_sync(team, (weave_stream_t)t->stream) == WEAVE_SUCCESS;
    rc = weave_team_allgather_int(team, ok ? (int)ceil(warm_ms * 1000.0) + 1 : -1, all);
    int slowest_us = 0;
    for (int r = 0; rc == WEAVE_SUCCESS && r < team->world; ++r) {
      if (all[r] < 0) ok = 0;
      if (all[r] > slowest_us) slowest_us = all[r];
    }
    if (ok) {
      int reps = (int)(TUNE_TARGET_US / TUNE_ROUNDS / slowest_us);
      c->reps = reps < TUNE_MIN_REPS ? TUNE_MIN_REPS : reps > TUNE_MAX_REPS ? TUNE_MAX_REPS : reps;
    }
  }
  if (rc == WEAVE_SUCCESS && ok) {
    /* later rounds start together too: the plan's creation ended in an agreement */
    for (int i = 0; i < c->reps && ok; ++i)
      ok = cudaEventRecord(t->ev[2 * i], t->stream) == cudaSuccess && tuner_call(t, &plan) == WEAVE_SUCCESS &&
           cudaEventRecord(t->ev[2 * i + 1], t->stream) == cudaSuccess;
    ok = ok && cudaStreamSynchronize(t->stream) == cudaSuccess;
    for (int i = 0; i < c->reps && ok; ++i) {
      float f = 0;
      ok = cudaEventElapsedTime(&f, t->ev[2 * i], t->ev[2 * i + 1]) == cudaSuccess;
      if (ok && c->nsamples < TUNE_MAX_SAMPLES) c->samples[c->nsamples++] = f;
    }
    ok = ok && weave_team_sync(team, (weave_stream_t)t->stream) == WEAVE_SUCCESS;
    rc = weave_team_allgather_int(team, ok, all);
    for (int r = 0; rc == WEAVE_SUCCESS && r < team->world; ++r)
      if (!all[r]) ok = 0;
  }
  if (rc == WEAVE_SUCCESS && !ok) {
    c->dead = 1;
    cudaGetLastError();
    weave_log(WEAVE_LOG_INFO, team, "auto: %s did not run: %s", weave_strategy_name(c->strategy),
              weave_get_last_error(team));
  }
  const weave_result_t destroyed = tune_plan_destroy(&plan);
  return rc != WEAVE_SUCCESS ? rc : destroyed;
}

/* Candidates idx[0..count) timed in TUNE_ROUNDS interleaved rounds (a passing disturbance of the GPU
 * falls on every candidate alike), then each one's time: the slowest rank's median over all its
 * calls so far (a candidate's first round also sizes its run). */
static weave_result_t time_candidates(tuner_t *t, candidate_t *cand, const int *idx, int count) {
  weave_team_t team = t->team;
  for (int round = 0; round < TUNE_ROUNDS; ++round)
    for (int k = 0; k < count; ++k)
      if (!cand[idx[k]].dead) WEAVE_CHECK(time_round(t, &cand[idx[k]], cand[idx[k]].reps == 0));
  for (int k = 0; k < count; ++k) {
    candidate_t *c = &cand[idx[k]];
    c->ms = -1;
    if (c->dead) continue;
    double median = 0;
    qsort(c->samples, (size_t)c->nsamples, sizeof(c->samples[0]), cmp_double);
    if (c->nsamples)
      median = c->nsamples % 2 ? c->samples[c->nsamples / 2]
                               : 0.5 * (c->samples[c->nsamples / 2 - 1] + c->samples[c->nsamples / 2]);
    int all[WEAVE_MAX_WORLD];
    /* in 10 ns units: an int holds 21 s */
    WEAVE_CHECK(weave_team_allgather_int(team, c->nsamples ? (int)ceil(median * 1e5) : -1, all));
    double slowest = 0;
    for (int r = 0; r < team->world; ++r) {
      if (all[r] < 0) c->dead = 1;
      if (all[r] * 1e-5 > slowest) slowest = all[r] * 1e-5;
    }
    if (!c->dead) c->ms = slowest;
  }
  return WEAVE_SUCCESS;
}

int weave_tune_close_race(const double *ms, int n, int *first, int *second) {
  *first = *second = -1;
  for (int i = 0; i < n; ++i) {
    if (!(ms[i] >= 0)) continue;
    if (*first < 0 || ms[i] < ms[*first]) {
      *second = *first;
      *first = i;
    } else if (*second < 0 || ms[i] < ms[*second]) {
      *second = i;
    }
  }
  return *second >= 0 && ms[*second] < TUNE_CLOSE * ms[*first];
}

int weave_tune_pick(const double *ms, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if (ms[i] >= 0 && (best < 0 || ms[i] < TUNE_PREFER * ms[best])) best = i;
  return best;
}

/* The model's time for a fused split, relative to (g0, c0): what prunes the neighbours. */
static double model_fused_ratio(weave_team_t team, const tuner_t *t, int g0, int c0, int g, int c) {
  weave_auto_model_in_t in;
  weave_auto_model_t a, b;
  model_inputs(team, t->M, t->N, t->K, &t->desc, g0, c0, &in);
  weave_auto_model(&in, &a);
  in.gemm_blocks = g;
  in.comm_blocks = c;
  weave_auto_model(&in, &b);
  return a.fused_ms > 0 ? b.fused_ms / a.fused_ms : 1.0;
}

/* Times the candidates; 0 with out filled, or -1 with why (then the model decides). */
static weave_result_t measure(const tuner_t *proto, weave_auto_choice_t *out, int *measured, double *speedup, char *why,
                              size_t why_len) {
  *measured = 0;
  tuner_t t = *proto;
  weave_team_t team = t.team;
  const weave_gemm_rs_desc_t *desc = &t.desc;
  char msg[200] = "";
  int ok = tuner_alloc(&t, msg, sizeof(msg));
  int all[WEAVE_MAX_WORLD];
  weave_result_t rc = weave_team_allgather_int(team, ok, all);
  int bad_rank = -1;
  for (int r = 0; rc == WEAVE_SUCCESS && r < team->world; ++r)
    if (!all[r] && bad_rank < 0) bad_rank = r;
  if (rc != WEAVE_SUCCESS || bad_rank >= 0) {
    tuner_free(&t);
    if (bad_rank >= 0)
      snprintf(why, why_len, "rank %d: %s", bad_rank, bad_rank == team->rank ? msg : "no scratch inputs");
    return rc;
  }
  candidate_t cand[TUNE_MAX_CANDIDATES];
  memset(cand, 0, sizeof(cand));
  int n = 0;
  cand[n++].strategy = WEAVE_STRATEGY_BASELINE;
  /* the caller's split, if given, is the only fused one; AllGather + GEMM's fused kernel needs the
   * Hopper role */
  const int fused = !t.ag || weave_kernel_hopper_ok(t.ad.dtype, t.ad.b_layout, t.N, t.K);
  if (fused) {
    cand[n].gemm_blocks = t.ag ? t.ad.gemm_blocks : desc->gemm_blocks;
    cand[n].comm_blocks = t.ag ? t.ad.comm_blocks : desc->comm_blocks;
    cand[n++].strategy = WEAVE_STRATEGY_FUSED;
  }
  cand[n++].strategy = WEAVE_STRATEGY_BULK;
  int idx[TUNE_MAX_CANDIDATES];
  for (int i = 0; i < TUNE_MAX_CANDIDATES; ++i) idx[i] = i;
  rc = time_candidates(&t, cand, idx, n);
  /* then (GEMM + ReduceScatter) the planner's fused split's neighbours, one communication block less
   * and more, unless the model puts them 10% past the best time measured */
  if (rc == WEAVE_SUCCESS && !t.ag && cand[1].ms >= 0 && desc->gemm_blocks == 0) {
    /* rank 0 picks them (ranks' splits and models may differ where GPUs hold different numbers of
     * ranks): every rank then times the same candidates */
    const int g0 = cand[1].gemm_blocks, c0 = cand[1].comm_blocks;
    double best_ms = 1e30;
    for (int j = 0; j < n; ++j)
      if (cand[j].ms >= 0 && cand[j].ms < best_ms) best_ms = cand[j].ms;
    int pick[4] = {0, 0, 0, 0};
    for (int k = 0, dc = -1; dc <= 1; dc += 2, ++k) {
      const int c = c0 + dc, g = g0 - dc;
      if (c < 1 || g < 1 || cand[1].ms * model_fused_ratio(team, &t, g0, c0, g, c) > TUNE_PRUNE * best_ms) continue;
      pick[2 * k] = g;
      pick[2 * k + 1] = c;
    }
    rc = from_rank0(team, pick, 4);
    const int first_neighbour = n;
    for (int k = 0; k < 2 && rc == WEAVE_SUCCESS; ++k)
      if (pick[2 * k] > 0 && n < TUNE_MAX_CANDIDATES) {
        cand[n].gemm_blocks = pick[2 * k];
        cand[n].comm_blocks = pick[2 * k + 1];
        cand[n++].strategy = WEAVE_STRATEGY_FUSED;
      }
    if (rc == WEAVE_SUCCESS) rc = time_candidates(&t, cand, idx + first_neighbour, n - first_neighbour);
  }
  /* a close race: the two fastest within TUNE_CLOSE of each other (every rank sees the same times)
   * are timed TUNE_ROUNDS rounds more, their times then the medians over both runs */
  double ms[TUNE_MAX_CANDIDATES];
  for (int i = 0; i < n; ++i) ms[i] = cand[i].ms;
  int fast1 = -1, fast2 = -1;
  const int close = rc == WEAVE_SUCCESS && weave_tune_close_race(ms, n, &fast1, &fast2);
  if (close) {
    const int pair[2] = {fast1 < fast2 ? fast1 : fast2, fast1 < fast2 ? fast2 : fast1};
    rc = time_candidates(&t, cand, pair, 2);
  }
  for (int i = 0; i < n; ++i) ms[i] = cand[i].ms;
  const int best = rc == WEAVE_SUCCESS ? weave_tune_pick(ms, n) : -1;
  char list[320] = "";
  size_t used = 0;
  for (int i = 0; i < n && rc == WEAVE_SUCCESS; ++i) {
    if (cand[i].ms < 0) continue;
    char name[48];
    describe(name, sizeof(name), cand[i].strategy, cand[i].gemm_blocks, cand[i].comm_blocks);
    used += (size_t)snprintf(list + used, used < sizeof(list) ? sizeof(list) - used : 0, "%s%s %.3f", used ? ", " : "",
                             name, cand[i].ms);
    if (used >= sizeof(list)) used = sizeof(list) - 1;
  }
  tuner_free(&t);
  if (rc != WEAVE_SUCCESS) return rc;
  if (best < 0) {
    snprintf(why, why_len, "no candidate ran");
    return WEAVE_SUCCESS;
  }
  double base_ms = cand[0].ms;
  out->strategy = cand[best].strategy;
  out->gemm_blocks = cand[best].gemm_blocks;
  out->comm_blocks = cand[best].comm_blocks;
  out->chosen_by = WEAVE_CHOSEN_BY_MEASUREMENT;
  char name[48];
  describe(name, sizeof(name), out->strategy, out->gemm_blocks, out->comm_blocks);
  *speedup = base_ms > 0 ? base_ms / cand[best].ms : 1.0;
  why_cut(
      out->why, sizeof(out->why),
      snprintf(out->why, sizeof(out->why), "measured (ms, slowest rank's median%s): %s; chose %s (%.3fx the baseline)",
               close ? "; the two fastest timed twice as long" : "", list, name, *speedup));
  *measured = 1;
  return WEAVE_SUCCESS;
}

/* Rank 0 stores the measured choice. */
static void store(weave_team_t team, const char *path, int is_default, const weave_tune_key_t *key,
                  const weave_auto_choice_t *ch, double speedup) {
  weave_tune_entry_t e;
  memset(&e, 0, sizeof(e));
  e.key = *key;
  e.strategy = ch->strategy;
  e.gemm_blocks = ch->gemm_blocks;
  e.comm_blocks = ch->comm_blocks;
  e.speedup = isfinite(speedup) && speedup >= 1e-3 && speedup <= 1e3 ? speedup : 1.0;
  char why[600] = "";
  weave_tune_status_t s = weave_tune_store(path, is_default, &e, TUNE_LOCK_MS, why, sizeof(why));
  if (s != WEAVE_TUNE_FOUND)
    weave_log(WEAVE_LOG_WARN, team, "auto: the choice is not cached (%s): %s", weave_tune_status_name(s), why);
  else if (why[0])
    weave_log(WEAVE_LOG_WARN, team, "auto: %s; started %s afresh", why, path);
  else
    weave_log(WEAVE_LOG_INFO, team, "auto: choice stored in %s", path);
}

/* The fallback when nothing is cached and nothing measured: GEMM + ReduceScatter's cost model, or
 * the strategy AllGather + GEMM's plan chose by its own model. */
typedef struct {
  weave_plan_split_fn split; /* gemm_rs */
  weave_strategy_t ag_model; /* ag_gemm */
  const char *ag_model_why;
} model_t;

static void choose_fallback(const tuner_t *proto, const model_t *m, const char *reason, weave_auto_choice_t *out) {
  if (!proto->ag) {
    choose_by_model(proto->team, proto->M, proto->N, proto->K, &proto->desc, m->split, reason, out);
    return;
  }
  out->strategy = m->ag_model;
  out->gemm_blocks = out->comm_blocks = 0;
  out->chosen_by = WEAVE_CHOSEN_BY_MODEL;
  snprintf(out->why, sizeof(out->why), "model (%s): %s", reason, m->ag_model_why);
}

/* Cache, measurement or model, for the plan `proto` describes (see autotune.h). */
static weave_result_t choose(const tuner_t *proto, const weave_env_t *env, const model_t *model,
                             weave_auto_choice_t *out) {
  weave_team_t team = proto->team;
  const double t0 = now_ms();
  memset(out, 0, sizeof(*out));
  weave_tune_key_t key;
  if (proto->ag)
    weave_tune_key_for_ag(team, proto->M, proto->N, proto->K, &proto->ad, &key);
  else
    weave_tune_key_for(team, proto->M, proto->N, proto->K, &proto->desc, &key);
  char path[1024] = "";
  int is_default = 0;
  const int have_path = weave_tune_path(env->tune_file, path, sizeof(path), &is_default) == 0;

  /* every rank reads; rank 0's entry is used */
  weave_tune_entry_t e;
  char why[600] = "";
  weave_tune_status_t st =
      have_path ? weave_tune_lookup(path, is_default, &key, &e, why, sizeof(why)) : WEAVE_TUNE_MISSING;
  if (st != WEAVE_TUNE_FOUND && st != WEAVE_TUNE_MISSING)
    weave_log(team->rank == 0 ? WEAVE_LOG_WARN : WEAVE_LOG_INFO, team, "auto: tuning cache ignored (%s): %s",
              weave_tune_status_name(st), why);
  /* rank 0's entry and rank 0's WEAVE_AUTOTUNE: every rank takes the same path */
  int v[6] = {st == WEAVE_TUNE_FOUND,
              st == WEAVE_TUNE_FOUND ? (int)e.strategy : 0,
              st == WEAVE_TUNE_FOUND ? e.gemm_blocks : 0,
              st == WEAVE_TUNE_FOUND ? e.comm_blocks : 0,
              env->autotune,
              weave_capture_active() | (team->beside_others ? 2 : 0)};
  int capturing[WEAVE_MAX_WORLD];
  WEAVE_CHECK(weave_team_allgather_int(team, v[5], capturing));
  WEAVE_CHECK(from_rank0(team, v, 5));
  if (v[0]) {
    out->strategy = (weave_strategy_t)v[1];
    out->gemm_blocks = v[2];
    out->comm_blocks = v[3];
    out->chosen_by = WEAVE_CHOSEN_BY_CACHE;
    char name[48];
    describe(name, sizeof(name), out->strategy, out->gemm_blocks, out->comm_blocks);
    if (team->rank == 0)
      why_cut(out->why, sizeof(out->why),
              snprintf(out->why, sizeof(out->why), "cached: %s (%.3fx the baseline when measured) in %s", name,
                       e.speedup, path));
    else
      snprintf(out->why, sizeof(out->why), "cached: %s (rank 0's tuning cache)", name);
    out->choose_ms = now_ms() - t0;
    return WEAVE_SUCCESS;
  }
  /* no timing while a rank captures a stream, nor in a node team whose GPU holds ranks of other
   * nodes (pretend nodes): their plans are made, and timed, at the same moment, so the times would
   * be of both, and a device-wide wait in one team's thread (a candidate plan's cudaFree) can hold
   * back the kernels that another team's running calls wait for until their bound */
  int capture_rank = -1, beside_rank = -1;
  for (int r = 0; r < team->world; ++r) {
    if ((capturing[r] & 1) && capture_rank < 0) capture_rank = r;
    if ((capturing[r] & 2) && beside_rank < 0) beside_rank = r;
  }
  char reason[200];
  if (!v[4]) {
    snprintf(reason, sizeof(reason), "WEAVE_AUTOTUNE=0");
  } else if (capture_rank >= 0) {
    snprintf(reason, sizeof(reason), "stream capture under way on rank %d: no timing", capture_rank);
  } else if (beside_rank >= 0) {
    snprintf(reason, sizeof(reason), "rank %d's GPU runs other nodes' plans beside this team's: no timing",
             beside_rank);
  } else {
    int measured = 0;
    double speedup = 1.0;
    char mwhy[256] = "";
    WEAVE_CHECK(measure(proto, out, &measured, &speedup, mwhy, sizeof(mwhy)));
    if (measured) {
      if (team->rank == 0 && have_path) store(team, path, is_default, &key, out, speedup);
      out->choose_ms = now_ms() - t0;
      return WEAVE_SUCCESS;
    }
    snprintf(reason, sizeof(reason), "timing failed: %.180s", mwhy);
  }
  choose_fallback(proto, model, reason, out);
  int s = (int)out->strategy;
  WEAVE_CHECK(from_rank0(team, &s, 1));
  out->strategy = (weave_strategy_t)s;
  out->choose_ms = now_ms() - t0;
  return WEAVE_SUCCESS;
}

/* The tuner's shape, the rest zero (its op's desc is set by the caller). */
static tuner_t tuner_for(weave_team_t team, int M, int N, int K) {
  tuner_t t;
  memset(&t, 0, sizeof(t));
  t.team = team;
  t.M = M;
  t.N = N;
  t.K = K;
  return t;
}

weave_result_t weave_autotune_choose(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                     const weave_env_t *env, weave_plan_split_fn split, weave_auto_choice_t *out) {
  tuner_t proto = tuner_for(team, M, N, K);
  proto.desc = *desc;
  const model_t model = {split, WEAVE_STRATEGY_BASELINE, ""};
  return choose(&proto, env, &model, out);
}

weave_result_t weave_autotune_choose_ag(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                                        const weave_env_t *env, weave_strategy_t model, const char *model_why,
                                        weave_auto_choice_t *out) {
  tuner_t proto = tuner_for(team, M, N, K);
  proto.ag = 1;
  proto.ad = *desc;
  const model_t m = {NULL, model, model_why};
  return choose(&proto, env, &m, out);
}
