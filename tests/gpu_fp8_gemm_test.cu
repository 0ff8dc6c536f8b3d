/*
 * GPU test of weave's fp8 GEMM (the Hopper kernel with e4m3 inputs; src/gemm/hopper/).
 *
 * Every scale mode (none, per tensor, per row) x output type (bf16, fp16; fp32 for the bulk
 * strategy's partials) x accumulation (fp32, the default: cooperative schedule; fast: cooperative and
 * ping-pong; fast cooperative twice, as planned and on the narrow 128 x 192 tile forced, unclustered
 * where its columns are odd and in 2-CTA clusters sharing A where they pair up) x stream-K tail forced
 * or not on shapes with tails
 * (M, N not multiples of 128 x 256, K a multiple of 16 but not of the 128-element k-block, K below
 * one k-block, N odd: the register-store path), several grid sizes, alpha and bias, through the
 * launcher and through the public weave_gemm_ex; against the fp64 reference of the dequantized inputs
 * (tools/support/reference.c). Large shapes against cuBLASLt fp8 (the same accumulation and scales).
 * Output poisoned with NaN bytes before each call, plus a guard zone after C that must stay intact.
 *
 * Bound (per element, stated): |out - ref| <= atol + rtol |ref| + bound_fp8, where
 *   atol, rtol = weave_tolerance(out type, K) x the largest |alpha scale_a scale_b| (one rounding of
 *                the output, fp32 accumulation; inputs in [-1, 1)),
 *   bound_fp8  = |alpha sa sb| x the tensor cores' accumulation bound (weave_ref_gemm_rs_scaled in
 *                tools/support/reference.h: at each k32 step 33 terms each lose less than one ulp
 *                u = 2^-13 of the largest of the running sum and the step's products; the sum runs
 *                over all of K with fast accumulation, as cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM,
 *                over each 128 of K with fp32 accumulation, plus the fp32 additions). Inputs of
 *                random sign: 8 standard deviations of the losses (variance < u^2 / 3 each); the
 *                accuracy cases (inputs >= 0): the worst case, 34 u a step.
 * Also the relative Frobenius error < 1e-2, no NaN, guard intact; misaligned / ROW / K % 16 refused.
 * The accuracy cases: inputs >= 0 (prefix sums grow with K), K = 16384, fp32 output, fp32 tolerance:
 * fp32 accumulation must stay within its bound; the fast mode's error on the same inputs is printed
 * against that bound (information, not a check: measured 1.05e3 of 4.1e3 against 2.25 for fp32).
 * Accuracy against cuBLASLt at 8192^3 (not quick): the same inputs >= 0 through weave and cuBLASLt's
 * default algorithm, each accumulation, bf16 out, sampled rows against fp64 (accuracy_vs_lt; weave's
 * fp32 accumulation checked against its bound, the rest printed).
 * Exit: 0 pass, 1 failure, 77 no CUDA device / not sm_90 (skip). FP8_TEST_QUICK=1: small shapes only;
 * FP8_TEST_TINY=1: three small shapes per combination (for compute-sanitizer).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"
#include "harness.h"
#include "gemm/hopper/gemm_hopper.h"
#include "plan/lt.h"
#include "reference.h"

#define GUARD 512 /* bytes after C that must stay poisoned */

static int g_fail = 0;
static void *g_sk_ws = NULL;
static size_t g_sk_bytes = 0;

static const char *mode_name(int m) {
  return m == WEAVE_SCALE_ROW ? "row" : m == WEAVE_SCALE_TENSOR ? "tensor" : "none";
}
static const char *sched_name(int s) {
  return s == WEAVE_HGEMM_SCHED_PINGPONG ? "pp" : s == WEAVE_HGEMM_SCHED_COOP ? "coop" : "auto";
}

struct Case {
  int M, N, K;
  weave_dtype_t out;
  int mode; /* weave_scale_mode_t */
  float alpha;
  int bias;
  int blocks;
  int schedule;   /* WEAVE_HGEMM_SCHED_* */
  int streamk;    /* WEAVE_HGEMM_SK_* */
  int pub;        /* through weave_gemm_ex */
  int vs_lt;      /* against cuBLASLt fp8 instead of fp64 */
  int fast;       /* WEAVE_FP8_ACCUM_FAST (else fp32 accumulation) */
  int positive;   /* the accuracy case: inputs >= 0, fp32 tolerance, fp32-accumulation bound */
  int tile_n = 0; /* weave_hgemm_args_t.tile_n (0: the plan's) */
};

/* host scales of a case: TENSOR one each; ROW [M] and [N] (values in [0.25, 2)) */
static void make_scales(const Case &c, uint64_t seed, std::vector<float> &sa, std::vector<float> &sb) {
  sa.assign(c.mode == WEAVE_SCALE_ROW ? c.M : 1, 1.f);
  sb.assign(c.mode == WEAVE_SCALE_ROW ? c.N : 1, 1.f);
  if (c.mode == WEAVE_SCALE_TENSOR) {
    sa[0] = 0.75f;
    sb[0] = 1.625f;
  } else if (c.mode == WEAVE_SCALE_ROW) {
    for (int i = 0; i < c.M; ++i) sa[i] = 0.25f + 0.0625f * (float)((i * 7 + seed) % 28);
    for (int j = 0; j < c.N; ++j) sb[j] = 0.25f + 0.0625f * (float)((j * 5 + seed) % 28);
  }
}

/* The launcher's arguments for an fp8 C[M,N] = A[M,K] . B with B laid out `ly`, alpha 1, the
 * stream-K workspace; the rest zero (callers set what their case needs). */
static weave_hgemm_args_t fp8_args(int M, int N, int K, weave_layout_t ly, const void *A, const void *B, void *C) {
  weave_hgemm_args_t a = weave_hgemm_auto_args(M, N, K, WEAVE_FP8_E4M3, 0, 0);
  a.b_layout = ly;
  a.alpha = 1.0f;
  a.A = A;
  a.B = B;
  a.C = C;
  a.workspace = g_sk_ws;
  a.workspace_bytes = g_sk_bytes;
  return a;
}

static void run_case(const Case &c, uint64_t seed) {
  const int M = c.M, N = c.N, K = c.K;
  const size_t osz = weave_dtype_size(c.out);
  char what[256];
  snprintf(what, sizeof what, "%s%dx%dx%d out %s scales %s alpha %.2f bias %d blocks %d %s%s%s %s%s%s",
           c.pub ? "weave_gemm_ex " : "", M, N, K, weave_dtype_name(c.out), mode_name(c.mode), c.alpha, c.bias,
           c.blocks, sched_name(c.schedule),
           c.tile_n ? c.tile_n == WEAVE_HGEMM_BN_NARROW ? " 128x192" : " 128x256" : "",
           c.streamk == WEAVE_HGEMM_SK_ON && c.fast ? " stream-K" : "", c.fast ? "fast" : "fp32acc",
           c.positive ? " inputs >= 0" : "", c.vs_lt ? " (vs cuBLASLt fp8)" : "");
  std::vector<uint8_t> hA((size_t)M * K), hB((size_t)N * K);
  weave_fill_random(WEAVE_FP8_E4M3, hA.data(), hA.size(), seed);
  weave_fill_random(WEAVE_FP8_E4M3, hB.data(), hB.size(), seed + 1);
  if (c.positive) { /* clear the sign bits: every product >= 0, the prefix sums grow with k */
    for (auto &x : hA) x &= 0x7F;
    for (auto &x : hB) x &= 0x7F;
  }
  std::vector<unsigned char> hbias((size_t)N * osz);
  weave_fill_random(c.out, hbias.data(), (size_t)N, seed + 2);
  std::vector<float> sa, sb;
  make_scales(c, seed, sa, sb);

  void *dA, *dB, *dC, *dbias;
  float *dsa, *dsb;
  const size_t cbytes = (size_t)M * N * osz + GUARD;
  CUDA_CHECK(cudaMalloc(&dA, hA.size()));
  CUDA_CHECK(cudaMalloc(&dB, hB.size()));
  CUDA_CHECK(cudaMalloc(&dC, cbytes));
  CUDA_CHECK(cudaMalloc(&dbias, hbias.size()));
  CUDA_CHECK(cudaMalloc(&dsa, sa.size() * 4));
  CUDA_CHECK(cudaMalloc(&dsb, sb.size() * 4));
  CUDA_CHECK(cudaMemcpy(dA, hA.data(), hA.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dB, hB.data(), hB.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dbias, hbias.data(), hbias.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dsa, sa.data(), sa.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dsb, sb.data(), sb.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(dC, 0xFF, cbytes));
  const float *psa = c.mode ? dsa : NULL, *psb = c.mode ? dsb : NULL;

  char err[256] = "";
  int r;
  if (c.pub) {
    weave_gemm_args_t g = WEAVE_GEMM_ARGS_INIT;
    g.M = M;
    g.N = N;
    g.K = K;
    g.dtype = WEAVE_FP8_E4M3;
    g.out_dtype = c.out;
    g.b_layout = WEAVE_LAYOUT_COL;
    g.alpha = c.alpha;
    g.scale_mode = (weave_scale_mode_t)c.mode;
    g.scale_a = psa;
    g.scale_b = psb;
    g.A = dA;
    g.B = dB;
    g.bias = c.bias ? dbias : NULL;
    g.C = dC;
    g.num_blocks = c.blocks;
    g.fp8_accum = c.fast ? WEAVE_FP8_ACCUM_FAST : WEAVE_FP8_ACCUM_FP32;
    r = weave_gemm_ex(&g, NULL);
    if (r) snprintf(err, sizeof err, "%s", weave_get_last_error(NULL));
  } else {
    weave_hgemm_args_t a = fp8_args(M, N, K, WEAVE_LAYOUT_COL, dA, dB, dC);
    a.alpha = c.alpha;
    a.bias = c.bias ? dbias : NULL;
    a.num_blocks = c.blocks;
    a.streamk = c.streamk;
    a.schedule = c.schedule;
    a.out_dtype = c.out;
    a.scales.mode = c.mode;
    a.scales.a = psa;
    a.scales.b = psb;
    a.fp8_fast_accum = c.fast;
    a.tile_n = c.tile_n;
    r = weave_hgemm_launch(&a, 0, err, sizeof err);
  }
  if (r != WEAVE_SUCCESS) {
    printf("FAIL %s: launch returned %d: %s\n", what, r, err);
    g_fail = 1;
  } else {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<unsigned char> out(cbytes);
    CUDA_CHECK(cudaMemcpy(out.data(), dC, cbytes, cudaMemcpyDeviceToHost));
    std::vector<double> ref((size_t)M * N), bound((size_t)M * N, 0.0);
    double smax = 0;
    for (float x : sa)
      for (float y : sb) smax = fmax(smax, fabs((double)c.alpha * x * y));
    if (c.mode != WEAVE_SCALE_ROW) smax = fabs((double)c.alpha * sa[0] * sb[0]);
    double atol, rtol;
    /* fp32 out: bf16's, loose; the accuracy case: fp32's, so that the accumulation bound decides */
    weave_tolerance(c.positive ? WEAVE_FP32 : c.out == WEAVE_FP32 ? WEAVE_BF16 : c.out, K, &atol, &rtol);
    atol *= smax > 0 ? smax : 1.0;
    if (c.vs_lt) {
      /* cuBLASLt fp8 (the same accumulation and scales) into fp32, alpha and bias added here */
      weave_lt_t *lt = NULL;
      weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
      o.scale_mode = c.mode;
      o.fast_accum = c.fast;
      char msg[256];
      void *dref;
      CUDA_CHECK(cudaMalloc(&dref, (size_t)M * N * 4));
      if (weave_lt_create_ex(M, N, K, WEAVE_FP8_E4M3, WEAVE_FP32, WEAVE_LAYOUT_COL, &o, &lt, msg, sizeof msg) !=
              WEAVE_SUCCESS ||
          weave_lt_run_scaled(lt, 1.0f, dA, dB, psa, psb, dref, NULL) != WEAVE_SUCCESS) {
        printf("FAIL %s: cuBLASLt reference: %s\n", what, lt ? "cublasLtMatmul failed" : msg);
        g_fail = 1;
        weave_lt_destroy(lt);
        CUDA_CHECK(cudaFree(dref));
        goto done;
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<float> f((size_t)M * N);
      CUDA_CHECK(cudaMemcpy(f.data(), dref, f.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(dref));
      weave_lt_destroy(lt);
      double ss = 0;
      for (size_t i = 0; i < f.size(); ++i) {
        ref[i] = c.alpha * (double)f[i] + (c.bias ? weave_host_get(c.out, hbias.data(), i % N) : 0.0);
        ss += ref[i] * ref[i];
      }
      /* two kernels, their sums in different orders: 2e-2 of |ref| + rms (as gpu_hopper_gemm_test's
       * cuBLASLt comparisons) */
      rtol = 2e-2;
      atol = 2e-2 * sqrt(ss / (double)f.size());
    } else {
      const float *psa_h = sa.data(), *psb_h = sb.data();
      const void *pa = hA.data(), *pb = hB.data();
      /* the accuracy case holds the fast mode to the fp32-accumulation bound too (information) */
      weave_ref_gemm_rs_scaled(M, N, K, 1, WEAVE_FP8_E4M3, c.out, WEAVE_LAYOUT_COL, c.alpha, (weave_scale_mode_t)c.mode,
                               c.positive ? 0 : WEAVE_REF_FP8_RANDOM_SIGNS | (c.fast ? WEAVE_REF_FP8_FAST : 0), &psa_h,
                               &psb_h, &pa, &pb, c.bias ? hbias.data() : NULL, 0, M, ref.data(), bound.data());
    }
    {
      weave_check_t chk;
      weave_check_result_ex(c.out, out.data(), ref.data(), bound.data(), (size_t)M * N, atol, rtol, &chk);
      size_t guard_bad = 0;
      for (size_t i = (size_t)M * N * osz; i < cbytes; ++i) guard_bad += out[i] != 0xFF;
      const int ok = chk.wrong == 0 && guard_bad == 0 && chk.rel_err < 1e-2;
      const int info = c.positive && c.fast; /* the fast mode against the fp32-accumulation bound */
      printf("%-4s %-78s rel %.2e max|d| %.3g %s %zu (nonfinite %zu) guard %zu",
             info ? "info"
             : ok ? "ok"
                  : "FAIL",
             what, chk.rel_err, chk.max_abs_err, info ? "outside the fp32-accumulation bound" : "wrong", chk.wrong,
             chk.nonfinite, guard_bad);
      if (chk.first_bad != (size_t)-1) {
        const size_t fb = chk.first_bad;
        printf("  first bad (%zu,%zu): got %g want %g (allowed %g)", fb / N, fb % N,
               weave_host_get(c.out, out.data(), fb), ref[fb], atol + rtol * fabs(ref[fb]) + bound[fb]);
      }
      printf("\n");
      if (!ok && !(info && chk.nonfinite == 0 && guard_bad == 0)) g_fail = 1;
    }
  }
done:
  CUDA_CHECK(cudaFree(dA));
  CUDA_CHECK(cudaFree(dB));
  CUDA_CHECK(cudaFree(dC));
  CUDA_CHECK(cudaFree(dbias));
  CUDA_CHECK(cudaFree(dsa));
  CUDA_CHECK(cudaFree(dsb));
}

/* Accuracy at a benchmark shape, weave against cuBLASLt (information, except weave's fp32
 * accumulation, which must stay within its bound): inputs >= 0 (the prefix sums grow with K, so an
 * accumulation that drops low bits shows), bf16 out as weave-bench times them, weave's launcher
 * choice and cuBLASLt's default algorithm, each accumulation; 12 sampled rows against the fp64
 * reference and the fp32-accumulation bound. Says whether cuBLASLt's default promotes as weave's
 * fp32 accumulation does (then its error is of the same order) or not (then of the fast mode's). */
static void accuracy_vs_lt(int M, int N, int K, uint64_t seed) {
  std::vector<uint8_t> hA((size_t)M * K), hB((size_t)N * K);
  weave_fill_random(WEAVE_FP8_E4M3, hA.data(), hA.size(), seed);
  weave_fill_random(WEAVE_FP8_E4M3, hB.data(), hB.size(), seed + 1);
  for (auto &x : hA) x &= 0x7F;
  for (auto &x : hB) x &= 0x7F;
  void *dA, *dB, *dC;
  const size_t cbytes = (size_t)M * N * 2;
  CUDA_CHECK(cudaMalloc(&dA, hA.size()));
  CUDA_CHECK(cudaMalloc(&dB, hB.size()));
  CUDA_CHECK(cudaMalloc(&dC, cbytes));
  CUDA_CHECK(cudaMemcpy(dA, hA.data(), hA.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dB, hB.data(), hB.size(), cudaMemcpyHostToDevice));
  int begins[3];
  const int n = weave_sample_rows(M, begins);
  std::vector<double> ref((size_t)3 * n * N), bound(ref.size());
  const void *pa = hA.data(), *pb = hB.data();
  for (int i = 0; i < 3; ++i)
    weave_ref_gemm_rs_scaled(M, N, K, 1, WEAVE_FP8_E4M3, WEAVE_BF16, WEAVE_LAYOUT_COL, 1.0, WEAVE_SCALE_NONE, 0, NULL,
                             NULL, &pa, &pb, NULL, begins[i], n, ref.data() + (size_t)i * n * N,
                             bound.data() + (size_t)i * n * N);
  double atol, rtol;
  weave_tolerance(WEAVE_BF16, K, &atol, &rtol);
  std::vector<uint16_t> got(ref.size());
  for (int who = 0; who < 4; ++who) { /* weave fp32, weave fast, cuBLASLt default, cuBLASLt fast */
    const int lt = who >= 2, fast = who & 1;
    char err[256] = "", algo[160] = "";
    CUDA_CHECK(cudaMemset(dC, 0xFF, cbytes));
    int r;
    if (!lt) {
      weave_hgemm_args_t a = fp8_args(M, N, K, WEAVE_LAYOUT_COL, dA, dB, dC);
      a.out_dtype = WEAVE_BF16;
      a.fp8_fast_accum = fast;
      r = weave_hgemm_launch(&a, 0, err, sizeof err);
    } else {
      weave_lt_t *h = NULL;
      weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
      o.fast_accum = fast;
      r = weave_lt_create_ex(M, N, K, WEAVE_FP8_E4M3, WEAVE_BF16, WEAVE_LAYOUT_COL, &o, &h, err, sizeof err);
      if (r == WEAVE_SUCCESS) {
        weave_lt_describe(h, algo, sizeof algo);
        r = weave_lt_run_scaled(h, 1.0f, dA, dB, NULL, NULL, dC, NULL);
        if (r) snprintf(err, sizeof err, "cublasLtMatmul failed");
      }
      weave_lt_destroy(h);
    }
    const char *name = who == 0   ? "weave fp32acc"
                       : who == 1 ? "weave fast"
                       : who == 2 ? "cuBLASLt default"
                                  : "cuBLASLt fast";
    if (r != WEAVE_SUCCESS) {
      printf("FAIL accuracy %dx%dx%d %s: %s\n", M, N, K, name, err);
      g_fail = 1;
      continue;
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < 3; ++i)
      CUDA_CHECK(cudaMemcpy(got.data() + (size_t)i * n * N, (char *)dC + (size_t)begins[i] * N * 2, (size_t)n * N * 2,
                            cudaMemcpyDeviceToHost));
    weave_check_t chk;
    weave_check_result_ex(WEAVE_BF16, got.data(), ref.data(), bound.data(), ref.size(), atol, rtol, &chk);
    const int must = who == 0, ok = chk.wrong == 0 && chk.nonfinite == 0;
    printf(
        "%-4s accuracy %dx%dx%d inputs >= 0 bf16 out, %-16s rel %.2e max|d| %.3g outside the "
        "fp32-accumulation bound %zu (nonfinite %zu)%s%s\n",
        must ? (ok ? "ok" : "FAIL") : "info", M, N, K, name, chk.rel_err, chk.max_abs_err, chk.wrong, chk.nonfinite,
        lt ? ", " : "", algo);
    if (must && !ok) g_fail = 1;
  }
  CUDA_CHECK(cudaFree(dA));
  CUDA_CHECK(cudaFree(dB));
  CUDA_CHECK(cudaFree(dC));
}

static void expect_invalid(const char *what, int M, int N, int K, weave_layout_t ly, int a_off, int tile_n = 0) {
  void *buf;
  CUDA_CHECK(cudaMalloc(&buf, 1 << 20));
  weave_hgemm_args_t a = fp8_args(M, N, K, ly, (char *)buf + a_off, buf, buf);
  a.tile_n = tile_n;
  char err[256] = "";
  int r = weave_hgemm_launch(&a, 0, err, sizeof err);
  int ok = r == WEAVE_ERROR_INVALID_ARGUMENT;
  printf("%-4s refused: %s: %d (%s)\n", ok ? "ok" : "FAIL", what, r, err);
  if (!ok) g_fail = 1;
  CUDA_CHECK(cudaFree(buf));
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (harness_require_sm90() != 0) return HARNESS_SKIP;
  const int tiny = getenv("FP8_TEST_TINY") != NULL, quick = tiny || getenv("FP8_TEST_QUICK") != NULL;
  g_sk_bytes = weave_hgemm_workspace_max(0);
  CUDA_CHECK(cudaMalloc(&g_sk_ws, g_sk_bytes));
  CUDA_CHECK(cudaMemset(g_sk_ws, 0, g_sk_bytes));

  /* tails: M, N off the 128 x 256 tile, K off the 128-element k-block (K = 16: one partial k-block),
   * N odd (register path), one row, many k-blocks */
  struct {
    int M, N, K;
  } shapes[] = {{1000, 1000, 304}, {8, 8, 16},      {129, 257, 144}, {129, 264, 80},   {200, 136, 16},
                {77, 520, 1008},   {256, 512, 128}, {1, 8, 16},      {300, 1000, 2048}};
  /* fp32 accumulation (cooperative: the launcher's choice whatever is asked), fast cooperative, fast
   * ping-pong */
  const int scheds[3] = {WEAVE_HGEMM_SCHED_AUTO, WEAVE_HGEMM_SCHED_COOP, WEAVE_HGEMM_SCHED_PINGPONG};
  const weave_dtype_t outs[2] = {WEAVE_BF16, WEAVE_FP16};
  uint64_t seed = 12345;
  for (int sc = 0; sc < 3; ++sc)
    for (int o = 0; o < 2; ++o)
      for (int mode = WEAVE_SCALE_NONE; mode <= WEAVE_SCALE_ROW; ++mode)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
          if ((quick && s == 8) || (tiny && s != 2 && s != 3 && s != 4)) continue;
          const int var = (int)(s + mode) % 3;
          Case c = {shapes[s].M, shapes[s].N,
                    shapes[s].K, outs[o],
                    mode,        var == 1 ? 0.5f : 1.0f,
                    var != 0,    var == 2 ? 3 : 0,
                    scheds[sc],  WEAVE_HGEMM_SK_OFF,
                    0,           0,
                    sc > 0,      0};
          run_case(c, seed++);
          if (scheds[sc] == WEAVE_HGEMM_SCHED_COOP) { /* the narrow tile: 6, 2, 2, 1, 3, 3 columns... */
            c.tile_n = WEAVE_HGEMM_BN_NARROW;
            run_case(c, seed++);
          }
        }
  /* stream-K tail forced (cooperative): tiles over a few blocks, fewer tiles than blocks, K tails */
  struct {
    int M, N, K, blocks;
  } skc[] = {{1000, 1000, 304, 3}, {129, 264, 1008, 7}, {256, 512, 2048, 0}, {300, 520, 208, 0}, {77, 520, 1024, 2}};
  for (int mode = WEAVE_SCALE_NONE; mode <= WEAVE_SCALE_ROW; ++mode)
    for (size_t s = 0; s < sizeof skc / sizeof skc[0]; ++s) {
      if (tiny && s != 1) continue;
      for (int fast = 0; fast < 2; ++fast) {
        Case c = {skc[s].M,
                  skc[s].N,
                  skc[s].K,
                  s % 2 ? WEAVE_FP16 : WEAVE_BF16,
                  mode,
                  s % 2 ? 0.5f : 1.0f,
                  (int)(s % 3 != 0),
                  skc[s].blocks,
                  WEAVE_HGEMM_SCHED_COOP,
                  WEAVE_HGEMM_SK_ON,
                  0,
                  0,
                  fast,
                  0};
        run_case(c, seed++);
        if (fast) { /* the narrow tile asked for instead: whole tiles, no stream-K */
          c.tile_n = WEAVE_HGEMM_BN_NARROW;
          run_case(c, seed++);
        }
      }
    }
  /* fp32 output (the bulk strategy's partials): cooperative, with and without stream-K */
  for (int mode = WEAVE_SCALE_NONE; mode <= WEAVE_SCALE_ROW; ++mode) {
    for (int fast = 0; fast < 2; ++fast) {
      Case c = {1000, 1000, 304,  WEAVE_FP32, mode, 1.0f, 0, 5, WEAVE_HGEMM_SCHED_AUTO, WEAVE_HGEMM_SK_ON,
                0,    0,    fast, 0};
      run_case(c, seed++);
      Case d = {129, 257, 144, WEAVE_FP32, mode, 0.5f, 1, 0, WEAVE_HGEMM_SCHED_AUTO, WEAVE_HGEMM_SK_OFF, 0, 0, fast, 0};
      run_case(d, seed++);
      if (fast) { /* fp32 out on the narrow tile: unclustered (one column) and sharing A (six) */
        Case e = {200, 136, 16, WEAVE_FP32,           mode, 1.0f, 1, 0, WEAVE_HGEMM_SCHED_COOP, WEAVE_HGEMM_SK_OFF, 0,
                  0,   1,   0,  WEAVE_HGEMM_BN_NARROW};
        run_case(e, seed++);
        c.tile_n = WEAVE_HGEMM_BN_NARROW;
        run_case(c, seed++);
      }
    }
  }
  /* the public entry (its per-stream workspace, AUTO schedule) */
  for (int mode = WEAVE_SCALE_NONE; mode <= WEAVE_SCALE_ROW; ++mode) {
    for (int fast = 0; fast < 2; ++fast) {
      Case c = {1003, 1000, 304, mode == 1 ? WEAVE_FP16 : WEAVE_BF16, mode, 0.75f, 1, 0, 0, 0, 1, 0, fast, 0};
      run_case(c, seed++);
    }
  }
  if (!quick) {
    /* large shapes against cuBLASLt fp8, AUTO schedule (ping-pong at K = 1024, stream-K at 124 blocks) */
    struct {
      int M, N, K, blocks;
    } big[] = {{2048, 2048, 1024, 0}, {4096, 8192, 3584, 124}, {1500, 2072, 1104, 0}, {2048, 8192, 1024, 132}};
    for (size_t s = 0; s < sizeof big / sizeof big[0]; ++s)
      for (int mode = WEAVE_SCALE_TENSOR; mode <= WEAVE_SCALE_ROW; ++mode) {
        Case c = {big[s].M,
                  big[s].N,
                  big[s].K,
                  WEAVE_BF16,
                  mode,
                  1.0f,
                  (int)(s & 1),
                  big[s].blocks,
                  WEAVE_HGEMM_SCHED_AUTO,
                  WEAVE_HGEMM_SK_AUTO,
                  0,
                  1,
                  (int)(s + mode) % 2,
                  0};
        run_case(c, seed++);
        if (c.fast) { /* the narrow tile asked for instead */
          c.tile_n = WEAVE_HGEMM_BN_NARROW;
          run_case(c, seed++);
        }
      }
    /* the shapes where the plan's cost model prefers the narrow tile (weave_hgemm_fp8_tile_n): 43
     * columns unclustered, 42 sharing A */
    for (int n = 0; n < 2; ++n) {
      Case c = {8192,
                n ? 8064 : 8192,
                3584,
                WEAVE_BF16,
                WEAVE_SCALE_TENSOR,
                1.0f,
                n,
                0,
                WEAVE_HGEMM_SCHED_AUTO,
                WEAVE_HGEMM_SK_AUTO,
                0,
                1,
                1,
                0,
                WEAVE_HGEMM_BN_NARROW};
      run_case(c, seed++);
    }
    /* one large shape against fp64 on the whole output: the accumulation bounds at K = 7168 */
    for (int fast = 0; fast < 2; ++fast) {
      Case c = {256, 512, 7168, WEAVE_BF16, WEAVE_SCALE_ROW, 1.0f, 1, 0, WEAVE_HGEMM_SCHED_AUTO, WEAVE_HGEMM_SK_AUTO,
                0,   0,   fast, 0};
      run_case(c, seed++);
    }
  }
  /* the accuracy cases (also quick): the same inputs (seed), fp32 accumulation then fast */
  for (int fast = 0; fast < 2 && !tiny; ++fast) {
    Case c = {128, 256, 16384, WEAVE_FP32, WEAVE_SCALE_NONE, 1.0f, 0, 0, WEAVE_HGEMM_SCHED_COOP, WEAVE_HGEMM_SK_OFF,
              0,   0,   fast,  1};
    run_case(c, 777);
  }
  if (!quick) accuracy_vs_lt(8192, 8192, 8192, 4242);
  expect_invalid("fp8 with B [K, N] (ROW)", 128, 256, 128, WEAVE_LAYOUT_ROW, 0);
  expect_invalid("fp8 K = 40 (not a multiple of 16)", 128, 256, 40, WEAVE_LAYOUT_COL, 0);
  expect_invalid("fp8 A not 16-byte aligned", 128, 256, 128, WEAVE_LAYOUT_COL, 8);
  expect_invalid("tile_n 128 (0, 256 or 192)", 128, 256, 128, WEAVE_LAYOUT_COL, 0, 128);
  CUDA_CHECK(cudaFree(g_sk_ws));
  printf("%s\n", g_fail ? "FAILED" : "PASSED");
  return g_fail ? 1 : 0;
}
