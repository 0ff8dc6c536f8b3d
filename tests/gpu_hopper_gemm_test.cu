/*
 * GPU test of weave's Hopper GEMM (src/gemm/hopper/gemm_hopper.cu).
 *
 * Every dtype (bf16, fp16) x B layout (ROW, COL) on small shapes with tails (M, N, K not multiples of
 * the 128 x 256 x 64 tile, K smaller than one stage), several grid sizes, with and without alpha and
 * bias, against an fp64 CPU reference; 2048 x 2048 x 1024 (and one tail shape) against cuBLASLt.
 * Output poisoned with NaN bytes before each call, plus a guard zone after C that must stay intact.
 * Checks: ||out - ref|| / ||ref|| < 1e-2, per element |out - ref| <= 1e-2 |ref| + 1e-2 rms(ref), no NaN.
 * Also checks that misaligned rows are refused with WEAVE_ERROR_INVALID_ARGUMENT.
 * Exit: 0 pass, 1 failure, 77 no CUDA device / not sm_90 (skip).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "check.h"
#include "harness.h"
#include "gemm/hopper/gemm_hopper.h"
#include "plan/lt.h"

#define GUARD 512 /* elements after C that must stay poisoned */

static int g_fail = 0;

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static uint16_t to16(float f, weave_dtype_t dt) {
  uint16_t r;
  if (dt == WEAVE_BF16) {
    __nv_bfloat16 b = __float2bfloat16(f);
    memcpy(&r, (const void *)&b, 2);
  } else {
    __half h = __float2half(f);
    memcpy(&r, (const void *)&h, 2);
  }
  return r;
}
static double from16(uint16_t v, weave_dtype_t dt) {
  if (dt == WEAVE_BF16) {
    __nv_bfloat16 b;
    memcpy((void *)&b, &v, 2);
    return (double)__bfloat162float(b);
  }
  __half h;
  memcpy((void *)&h, &v, 2);
  return (double)__half2float(h);
}

static const char *dtname(weave_dtype_t d) { return d == WEAVE_BF16 ? "bf16" : "fp16"; }
static const char *lyname(weave_layout_t l) { return l == WEAVE_LAYOUT_ROW ? "ROW" : "COL"; }

/* The reference for the large shapes: C[M, N] = A . B in dtype through the library's cuBLASLt wrapper
 * (the baseline strategy's GEMM). */
static void cublaslt_gemm(int M, int N, int K, weave_dtype_t dt, weave_layout_t ly, const void *A, const void *B,
                          void *C) {
  weave_lt_t *lt = NULL;
  char msg[256];
  if (weave_lt_create(M, N, K, dt, dt, ly, 0, &lt, msg, sizeof msg) != WEAVE_SUCCESS) {
    fprintf(stderr, "%s:%d: cuBLASLt: %s\n", __FILE__, __LINE__, msg);
    exit(1);
  }
  if (weave_lt_run(lt, 1.f, A, B, C, NULL) != WEAVE_SUCCESS) {
    fprintf(stderr, "%s:%d: cublasLtMatmul failed\n", __FILE__, __LINE__);
    exit(1);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  weave_lt_destroy(lt);
}

/* Compares out (M*N + GUARD elements, 16-bit) with ref (double). */
static void check(const char *what, const std::vector<uint16_t> &out, const std::vector<double> &ref, int M, int N,
                  weave_dtype_t dt, double elem_tol) {
  double num = 0, den = 0;
  size_t nan = 0, bad = 0, guard_bad = 0, first_bad = (size_t)-1;
  size_t n = (size_t)M * N;
  for (size_t i = 0; i < n; ++i) den += ref[i] * ref[i];
  double rms = sqrt(den / (double)n);
  for (size_t i = 0; i < n; ++i) {
    double o = from16(out[i], dt);
    if (isnan(o)) {
      ++nan;
      if (first_bad == (size_t)-1) first_bad = i;
      continue;
    }
    double d = o - ref[i];
    num += d * d;
    if (fabs(d) > elem_tol * fabs(ref[i]) + elem_tol * rms) {
      if (first_bad == (size_t)-1) first_bad = i;
      ++bad;
    }
  }
  for (size_t i = n; i < n + GUARD; ++i)
    if (out[i] != 0xFFFF) ++guard_bad;
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int ok = nan == 0 && bad == 0 && guard_bad == 0 && rel < 1e-2;
  printf("%-4s %-52s rel %.2e  nan %zu  bad %zu  guard %zu", ok ? "ok" : "FAIL", what, rel, nan, bad, guard_bad);
  if (first_bad != (size_t)-1)
    printf("  first bad (%zu,%zu): out %g ref %g", first_bad / N, first_bad % N, from16(out[first_bad], dt),
           ref[first_bad]);
  printf("\n");
  if (!ok) g_fail = 1;
}

struct Bufs {
  void *A, *B, *C, *bias, *Cref;
};

/* the stream-K workspace (zeroed once, as the launcher requires) and the mode of the next cases */
static void *g_sk_ws = NULL;
static size_t g_sk_bytes = 0;
static int g_streamk = WEAVE_HGEMM_SK_OFF;
/* the schedule the next cases ask for (WEAVE_HGEMM_SCHED_*) */
static int g_schedule = WEAVE_HGEMM_SCHED_AUTO;
/* 1: the cases go through the public weave_gemm (its per-stream workspace cache, its cost model) */
static int g_public = 0;

static int launch_case(const weave_hgemm_args_t *a, char *err, size_t errlen) {
  if (!g_public) return weave_hgemm_launch(a, 0, err, errlen);
  weave_result_t r =
      weave_gemm(a->M, a->N, a->K, a->dtype, a->b_layout, a->alpha, a->A, a->B, a->bias, a->C, a->num_blocks, NULL);
  if (r != WEAVE_SUCCESS) snprintf(err, errlen, "%s", weave_get_last_error(NULL));
  return (int)r;
}

static void run_case(int M, int N, int K, weave_dtype_t dt, weave_layout_t ly, float alpha, int use_bias, int blocks,
                     int vs_cublas) {
  char what[200];
  weave_hgemm_args_t q = weave_hgemm_auto_args(M, N, K, dt, blocks, 0);
  q.streamk = g_streamk;
  q.schedule = g_schedule;
  const int pp = weave_hgemm_schedule(&q) == WEAVE_HGEMM_SCHED_PINGPONG;
  const size_t sk_need = g_streamk == WEAVE_HGEMM_SK_OFF || pp ? 0 : weave_hgemm_workspace_size(&q);
  snprintf(what, sizeof what, "%s%s %s %dx%dx%d alpha %.2f bias %d blocks %d %s%s%s", g_public ? "weave_gemm " : "",
           dtname(dt), lyname(ly), M, N, K, alpha, use_bias, blocks, pp ? "ping-pong" : "coop",
           vs_cublas ? " (vs cuBLASLt)" : "",
           sk_need                           ? " stream-K"
           : g_streamk != WEAVE_HGEMM_SK_OFF ? " (stream-K not planned)"
                                             : "");
  std::vector<uint16_t> hA((size_t)M * K), hB((size_t)K * N), hbias(N);
  for (auto &v : hA) v = to16(frand(), dt);
  for (auto &v : hB) v = to16(frand(), dt);
  for (auto &v : hbias) v = to16(frand(), dt);
  Bufs b;
  size_t cbytes = ((size_t)M * N + GUARD) * 2;
  CUDA_CHECK(cudaMalloc(&b.A, hA.size() * 2));
  CUDA_CHECK(cudaMalloc(&b.B, hB.size() * 2));
  CUDA_CHECK(cudaMalloc(&b.bias, (size_t)N * 2));
  CUDA_CHECK(cudaMalloc(&b.C, cbytes));
  CUDA_CHECK(cudaMemcpy(b.A, hA.data(), hA.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(b.B, hB.data(), hB.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(b.bias, hbias.data(), (size_t)N * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(b.C, 0xFF, cbytes));
  weave_hgemm_args_t a = q; /* the query's shape, blocks and requests, and the call's operands */
  a.b_layout = ly;
  a.alpha = alpha;
  a.A = b.A;
  a.B = b.B;
  a.bias = use_bias ? b.bias : NULL;
  a.C = b.C;
  a.workspace = g_sk_ws;
  a.workspace_bytes = g_sk_bytes;
  char err[256] = "";
  int r = launch_case(&a, err, sizeof err);
  if (r != WEAVE_SUCCESS) {
    printf("FAIL %s: launch returned %d: %s\n", what, r, err);
    g_fail = 1;
  } else {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint16_t> out((size_t)M * N + GUARD);
    CUDA_CHECK(cudaMemcpy(out.data(), b.C, cbytes, cudaMemcpyDeviceToHost));
    if (sk_need) {
      /* stream-K: a second call (re-poisoned output, the workspace as the first call left it) must
       * be bitwise the same: the split tiles' sum order is fixed, the counters reset themselves */
      CUDA_CHECK(cudaMemset(b.C, 0xFF, cbytes));
      r = launch_case(&a, err, sizeof err);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> again((size_t)M * N + GUARD);
      CUDA_CHECK(cudaMemcpy(again.data(), b.C, cbytes, cudaMemcpyDeviceToHost));
      const int same = r == WEAVE_SUCCESS && memcmp(again.data(), out.data(), (size_t)M * N * 2) == 0;
      printf("%-4s %s: second call bitwise equal\n", same ? "ok" : "FAIL", what);
      if (!same) g_fail = 1;
    }
    std::vector<double> ref((size_t)M * N);
    if (vs_cublas) {
      CUDA_CHECK(cudaMalloc(&b.Cref, (size_t)M * N * 2));
      cublaslt_gemm(M, N, K, dt, ly, b.A, b.B, b.Cref);
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> c((size_t)M * N);
      CUDA_CHECK(cudaMemcpy(c.data(), b.Cref, c.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < c.size(); ++i)
        ref[i] = alpha * from16(c[i], dt) + (use_bias ? from16(hbias[i % N], dt) : 0.0);
      CUDA_CHECK(cudaFree(b.Cref));
      check(what, out, ref, M, N, dt, 2e-2);
    } else {
      std::vector<double> Ad(hA.size()), Bd((size_t)N * K); /* Bd as [N][K] */
      for (size_t i = 0; i < hA.size(); ++i) Ad[i] = from16(hA[i], dt);
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n)
          Bd[(size_t)n * K + k] =
              ly == WEAVE_LAYOUT_ROW ? from16(hB[(size_t)k * N + n], dt) : from16(hB[(size_t)n * K + k], dt);
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const double *x = &Ad[(size_t)m * K], *y = &Bd[(size_t)n * K];
          double s = 0;
          for (int k = 0; k < K; ++k) s += x[k] * y[k];
          ref[(size_t)m * N + n] = alpha * s + (use_bias ? from16(hbias[n], dt) : 0.0);
        }
      check(what, out, ref, M, N, dt, 1e-2);
    }
  }
  CUDA_CHECK(cudaFree(b.A));
  CUDA_CHECK(cudaFree(b.B));
  CUDA_CHECK(cudaFree(b.bias));
  CUDA_CHECK(cudaFree(b.C));
}

static void expect_invalid(int M, int N, int K, weave_layout_t ly) {
  void *buf;
  CUDA_CHECK(cudaMalloc(&buf, 1 << 20));
  weave_hgemm_args_t a = weave_hgemm_auto_args(M, N, K, WEAVE_BF16, 0, 0);
  a.b_layout = ly;
  a.alpha = 1.f;
  a.A = buf;
  a.B = buf;
  a.C = buf;
  char err[256] = "";
  int r = weave_hgemm_launch(&a, 0, err, sizeof err);
  int ok = r == WEAVE_ERROR_INVALID_ARGUMENT;
  printf("%-4s %s %dx%dx%d refused: %d (%s)\n", ok ? "ok" : "FAIL", lyname(ly), M, N, K, r, err);
  if (!ok) g_fail = 1;
  CUDA_CHECK(cudaFree(buf));
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (harness_require_sm90() != 0) return HARNESS_SKIP;

  struct {
    int M, N, K;
  } small[] = {{1000, 1000, 304}, {8, 8, 8},       {129, 257, 72},  {129, 264, 72},
               {200, 136, 16},    {77, 520, 1000}, {256, 512, 128}, {1, 8, 8}};
  const weave_dtype_t dts[2] = {WEAVE_BF16, WEAVE_FP16};
  const weave_layout_t lys[2] = {WEAVE_LAYOUT_ROW, WEAVE_LAYOUT_COL};
  const int only = getenv("HGEMM_TEST_QUICK") ? 1 : 0;
  /* both schedules on every layout x dtype x shape (tails, K below one stage, one block) */
  const int scheds[2] = {WEAVE_HGEMM_SCHED_COOP, WEAVE_HGEMM_SCHED_PINGPONG};
  for (int sc = 0; sc < 2; ++sc)
    for (int d = 0; d < 2; ++d)
      for (int l = 0; l < 2; ++l) {
        g_schedule = scheds[sc];
        for (size_t s = 0; s < sizeof small / sizeof small[0]; ++s) {
          if (lys[l] == WEAVE_LAYOUT_ROW && small[s].N % 8) continue; /* refused: checked below */
          int var = (int)s % 3;
          float alpha = var == 1 ? 0.5f : 1.0f;
          int bias = var != 0;
          int blocks = var == 2 ? 3 : 0;
          run_case(small[s].M, small[s].N, small[s].K, dts[d], lys[l], alpha, bias, blocks, 0);
        }
        if (only) continue;
        run_case(2048, 2048, 1024, dts[d], lys[l], 1.0f, 0, 0, 1);
        run_case(2048, 2048, 1024, dts[d], lys[l], 1.0f, 0, 100, 1);
        run_case(1500, 2072, 1112, dts[d], lys[l], 1.0f, 0, 0, 1);
        run_case(1024, 1024, 5120, dts[d], lys[l], 0.5f, 1, 5, 1); /* many items a block */
      }
  g_schedule = WEAVE_HGEMM_SCHED_AUTO;
  /* stream-K tail, forced on (the cost model would skip some of these small shapes): tiles left
   * over a few blocks, fewer tiles than blocks (each tile's k-blocks over up to 8 blocks), K tails,
   * alpha and bias; then the large cases against cuBLASLt under the cost model */
  g_sk_bytes = weave_hgemm_workspace_max(0);
  CUDA_CHECK(cudaMalloc(&g_sk_ws, g_sk_bytes));
  CUDA_CHECK(cudaMemset(g_sk_ws, 0, g_sk_bytes));
  struct {
    int M, N, K, blocks;
  } skc[] = {{1000, 1000, 304, 3}, {1000, 1000, 304, 5}, {129, 264, 1000, 7},
             {256, 512, 2048, 0},  {300, 520, 200, 0},   {77, 520, 1000, 2}};
  for (int d = 0; d < 2; ++d)
    for (int l = 0; l < 2; ++l) {
      g_streamk = WEAVE_HGEMM_SK_ON;
      g_schedule = WEAVE_HGEMM_SCHED_COOP; /* stream-K is the cooperative schedule's */
      for (size_t s = 0; s < sizeof skc / sizeof skc[0]; ++s)
        run_case(skc[s].M, skc[s].N, skc[s].K, dts[d], lys[l], s % 2 ? 0.5f : 1.0f, (int)(s % 3 != 0), skc[s].blocks,
                 0);
      if (!only) {
        g_streamk = WEAVE_HGEMM_SK_AUTO;
        g_schedule = WEAVE_HGEMM_SCHED_AUTO;
        run_case(2048, 2048, 1024, dts[d], lys[l], 1.0f, 0, 100, 1);
        run_case(4096, 8192, 3584, dts[d], lys[l], 1.0f, 1, 124, 1);
        run_case(1500, 2072, 1112, dts[d], lys[l], 1.0f, 0, 0, 1);
      }
      g_streamk = WEAVE_HGEMM_SK_OFF;
    }
  CUDA_CHECK(cudaFree(g_sk_ws));
  g_sk_ws = NULL;
  g_sk_bytes = 0;
  if (!only) {
    /* the public weave_gemm: a shape its cost model runs with a stream-K tail (2048x8192x3584 on
     * 124 blocks: 512 tiles, 4.1 waves), through the workspace it allocates for the stream */
    g_public = 1;
    g_streamk = WEAVE_HGEMM_SK_AUTO;
    run_case(2048, 8192, 3584, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, 1, 124, 1);
    run_case(2048, 8192, 3584, WEAVE_FP16, WEAVE_LAYOUT_COL, 0.5f, 0, 124, 1);
    g_public = 0;
    g_streamk = WEAVE_HGEMM_SK_OFF;
  }

  expect_invalid(129, 257, 72, WEAVE_LAYOUT_ROW); /* N*2 % 16 != 0 for [K, N] rows */
  expect_invalid(128, 256, 60, WEAVE_LAYOUT_COL); /* K*2 % 16 != 0 */
  expect_invalid(128, 256, 60, WEAVE_LAYOUT_ROW);
  expect_invalid(0, 256, 64, WEAVE_LAYOUT_ROW);

  printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}
