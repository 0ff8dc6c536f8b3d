/*
 * `weave-bench --op gemm`: weave's Hopper GEMM against cuBLASLt (nccl-tests style output).
 *
 * For every shape x block count: weave's median time and TFLOP/s, cuBLASLt with its default
 * heuristic, cuBLASLt with CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = blocks, the ratios, the scaling of
 * weave against its own rate at the first (largest) block count, and #wrong (elements of weave's
 * output outside |w - c| <= 2e-2 |c| + 2e-2 rms(c) against cuBLASLt, NaN counted wrong).
 * Inputs: uniform random in [-1, 1); several sets of A/B so that one pass over them exceeds 2x L2,
 * rotated every launch. Timing: CUDA events around each launch, -w warm-up launches, median of -n;
 * per shape, weave's three variants and cuBLASLt at SM_COUNT_TARGET for every block count, and
 * cuBLASLt's default once, are interleaved launch by launch in a shuffled order per iteration, so
 * drift hits every row and variant alike (the scaling column included) and none keeps one neighbour.
 *
 * Flags: --op gemm (only op), -d bf16|fp16, -l row|col (B layout), -s MxNxK (repeatable; default the
 * six shapes below), -B b1,b2,... (block counts, capped at the SM count; default 132,124,116,100),
 * -w warmup (5), -n iters (20), -c 0|1 (check, default 1), -J file (JSON).
 */
#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gemm/hopper/gemm_hopper.h"

#define BCK(x)                                                                             \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "bench_gemm: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,               \
              cudaGetErrorString(e_));                                                     \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)
#define BCKL(x)                                                                            \
  do {                                                                                     \
    cublasStatus_t s_ = (x);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      fprintf(stderr, "bench_gemm: %s:%d: %s: cublas status %d\n", __FILE__, __LINE__, #x, \
              (int)s_);                                                                    \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

__global__ void bench_fill(uint16_t *p, size_t n, uint32_t seed, int bf16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    float f = (float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
    uint16_t v;
    if (bf16) { __nv_bfloat16 b = __float2bfloat16(f); v = *(uint16_t *)&b; }
    else { __half h = __float2half(f); v = *(uint16_t *)&h; }
    p[i] = v;
  }
}

template <int BF16>
__device__ float bench_ld(const uint16_t *p, size_t i) {
  uint16_t v = p[i];
  if (BF16) return __bfloat162float(*(__nv_bfloat16 *)&v);
  return __half2float(*(__half *)&v);
}

template <int BF16>
__global__ void bench_sumsq(const uint16_t *c, size_t n, double *out) {
  double s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    double v = bench_ld<BF16>(c, i);
    s += v * v;
  }
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

template <int BF16>
__global__ void bench_count_wrong(const uint16_t *w, const uint16_t *c, size_t n, const double *sumsq,
                                  unsigned long long *wrong) {
  float rms = (float)sqrt(*sumsq / (double)n);
  unsigned long long k = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float a = bench_ld<BF16>(w, i), b = bench_ld<BF16>(c, i);
    if (!(fabsf(a - b) <= 2e-2f * fabsf(b) + 2e-2f * rms)) ++k; /* NaN counts */
  }
  for (int o = 16; o; o >>= 1) k += __shfl_xor_sync(0xffffffffu, k, o);
  if ((threadIdx.x & 31) == 0 && k) atomicAdd(wrong, k);
}

struct LtPlan {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
};

/* row-major C[M,N] = A[M,K] . B  ==  col-major C^T[N,M] = op(B) . A^T ; sm_target 0: default */
static int lt_plan(cublasLtHandle_t h, LtPlan *p, int M, int N, int K, weave_dtype_t dt,
                   weave_layout_t ly, int sm_target, void *ws, size_t ws_bytes) {
  (void)ws;
  cudaDataType_t t = dt == WEAVE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  BCKL(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = ly == WEAVE_LAYOUT_ROW ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BCKL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BCKL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (sm_target > 0) {
    int32_t s = sm_target;
    BCKL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &s, sizeof(s)));
  }
  if (ly == WEAVE_LAYOUT_ROW)
    BCKL(cublasLtMatrixLayoutCreate(&p->la, t, N, K, N));
  else
    BCKL(cublasLtMatrixLayoutCreate(&p->la, t, K, N, K));
  BCKL(cublasLtMatrixLayoutCreate(&p->lb, t, K, M, K));
  BCKL(cublasLtMatrixLayoutCreate(&p->lc, t, N, M, N));
  cublasLtMatmulPreference_t pref;
  BCKL(cublasLtMatmulPreferenceCreate(&pref));
  BCKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t res;
  int n = 0;
  BCKL(cublasLtMatmulAlgoGetHeuristic(h, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &n));
  cublasLtMatmulPreferenceDestroy(pref);
  if (n < 1) {
    fprintf(stderr, "bench_gemm: cuBLASLt has no algorithm\n");
    return 1;
  }
  p->algo = res.algo;
  return 0;
}
/* What cuBLASLt's heuristic picked, as the raw enum values of cublasLt.h (cublasLtMatmulTile_t,
 * cublasLtMatmulStages_t, cublasLtClusterShape_t, ...): which kernel weave is measured against. The
 * problem is handed to cuBLASLt transposed (C^T = B^T A^T, column-major), so its tile is N x M. */
static void lt_describe(const cublasLtMatmulAlgo_t *a, char *buf, size_t len) {
  static const cublasLtMatmulAlgoConfigAttributes_t what[] = {
      CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_STAGES_ID,
      CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
      CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME};
  static const char *name[] = {"algo", "tile", "stages", "cluster", "swizzle", "splitk", "reduction"};
  static const size_t bytes[] = {4, 4, 4, 2, 4, 4, 4}; /* the cluster shape is a uint16_t */
  size_t at = 0;
  buf[0] = 0;
  for (size_t i = 0; i < sizeof(what) / sizeof(what[0]) && at < len; ++i) {
    uint32_t v = 0; /* little-endian: a 2-byte value lands in the low half; a failed query prints -1 */
    size_t got = 0;
    const bool ok = cublasLtMatmulAlgoConfigGetAttribute(a, what[i], &v, bytes[i], &got) == CUBLAS_STATUS_SUCCESS;
    at += (size_t)snprintf(buf + at, len - at, "%s%s %lld", i ? " " : "", name[i], ok ? (long long)v : -1ll);
  }
}
static void lt_destroy(LtPlan *p) {
  cublasLtMatrixLayoutDestroy(p->la);
  cublasLtMatrixLayoutDestroy(p->lb);
  cublasLtMatrixLayoutDestroy(p->lc);
  cublasLtMatmulDescDestroy(p->op);
}

struct Ctx {
  int M, N, K, sets;
  weave_dtype_t dt;
  weave_layout_t ly;
  std::vector<void *> A, B;
  void *C, *Cref, *ws;
  size_t ws_bytes;
  void *sk_ws; /* weave's stream-K workspace (zeroed once) */
  size_t sk_bytes;
  cublasLtHandle_t lt;
  cudaStream_t st;
};

/* which: 0 weave (blocks; schedule and stream-K tail as its plan decides), 2 weave cooperative
 * schedule (stream-K by its cost model), 3 weave ping-pong schedule, 1 cuBLASLt plan */
static int launch(Ctx &c, int which, int blocks, LtPlan *lp, int set, void *C) {
  if (which != 1) {
    weave_hgemm_args_t a;
    memset(&a, 0, sizeof a);
    a.M = c.M; a.N = c.N; a.K = c.K; a.dtype = c.dt; a.b_layout = c.ly; a.alpha = 1.f;
    a.A = c.A[set]; a.B = c.B[set]; a.C = C; a.num_blocks = blocks;
    a.workspace = c.sk_ws; a.workspace_bytes = c.sk_bytes;
    a.streamk = WEAVE_HGEMM_SK_AUTO;
    a.schedule = which == 2 ? WEAVE_HGEMM_SCHED_COOP : which == 3 ? WEAVE_HGEMM_SCHED_PINGPONG : WEAVE_HGEMM_SCHED_AUTO;
    char err[256];
    int r = weave_hgemm_launch(&a, c.st, err, sizeof err);
    if (r) { fprintf(stderr, "bench_gemm: weave: %s\n", err); return 1; }
    return 0;
  }
  float alpha = 1.f, beta = 0.f;
  BCKL(cublasLtMatmul(c.lt, lp->op, &alpha, c.B[set], lp->la, c.A[set], lp->lb, &beta, C, lp->lc, C,
                      lp->lc, &lp->algo, c.ws, c.ws_bytes, c.st));
  return 0;
}

/* Busy-waits `ns` on the GPU so that the host can queue every timed launch behind it: the events
 * then measure back-to-back kernels, not the host's launch overhead. */
__global__ void bench_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

/* One kernel to time: which as in launch(). */
struct TimedKernel {
  int which, blocks;
  LtPlan *lp;
};

/* Times the kernels interleaved, one launch of each per iteration, so that clock and power drift
 * over the measurement hits them alike; med[k] = median of kernel k's `iters` launches. The order is
 * shuffled per iteration (fixed seed): a kernel's speed depends on the one before it (in a fixed
 * round-robin on the H200, cuBLASLt at SM_COUNT_TARGET = 132 in the last slot ran 0.5-1.8% faster
 * than cuBLASLt's default in the slot before it), so no kernel keeps one neighbour. */
static int time_ms(Ctx &c, const TimedKernel *k, int nk, int warm, int iters, double *med) {
  std::vector<cudaEvent_t> ev((size_t)iters * nk + 1);
  std::vector<int> order((size_t)iters * nk);
  unsigned rng = 12345u;
  for (int i = 0; i < iters; ++i) {
    int *o = &order[(size_t)i * nk];
    for (int j = 0; j < nk; ++j) o[j] = j;
    for (int j = nk - 1; j > 0; --j) { /* Fisher-Yates */
      rng = rng * 1664525u + 1013904223u;
      const int r = (int)((rng >> 8) % (unsigned)(j + 1)), t = o[j];
      o[j] = o[r];
      o[r] = t;
    }
  }
  for (auto &e : ev) BCK(cudaEventCreate(&e));
  int it = 0;
  for (int i = 0; i < warm; ++i)
    for (int j = 0; j < nk; ++j)
      if (launch(c, k[j].which, k[j].blocks, k[j].lp, it++ % c.sets, k[j].which == 1 ? c.Cref : c.C)) return 1;
  bench_spin<<<1, 1, 0, c.st>>>(200000ull + 60000ull * iters * nk);
  BCK(cudaEventRecord(ev[0], c.st));
  for (size_t q = 0; q < order.size(); ++q) {
    const TimedKernel &kk = k[order[q]];
    if (launch(c, kk.which, kk.blocks, kk.lp, it++ % c.sets, kk.which == 1 ? c.Cref : c.C)) return 1;
    BCK(cudaEventRecord(ev[q + 1], c.st));
  }
  BCK(cudaEventSynchronize(ev.back()));
  std::vector<std::vector<float>> t((size_t)nk);
  for (size_t q = 0; q < order.size(); ++q) {
    float ms = 0;
    BCK(cudaEventElapsedTime(&ms, ev[q], ev[q + 1]));
    t[(size_t)order[q]].push_back(ms);
  }
  for (int j = 0; j < nk; ++j) {
    std::vector<float> &v = t[(size_t)j];
    std::sort(v.begin(), v.end());
    med[j] = iters % 2 ? v[iters / 2] : 0.5 * (v[iters / 2 - 1] + v[iters / 2]);
  }
  for (auto &e : ev) cudaEventDestroy(e);
  return 0;
}

/* which: the weave variant to check (0, 2 or 3) */
static int count_wrong(Ctx &c, int which, int blocks, LtPlan *def, unsigned long long *wrong) {
  BCK(cudaMemsetAsync(c.C, 0xFF, (size_t)c.M * c.N * 2, c.st));
  if (launch(c, which, blocks, NULL, 0, c.C)) return 1;
  if (launch(c, 1, 0, def, 0, c.Cref)) return 1;
  double *sq;
  unsigned long long *w;
  BCK(cudaMalloc(&sq, sizeof(double)));
  BCK(cudaMalloc(&w, sizeof(unsigned long long)));
  BCK(cudaMemsetAsync(sq, 0, sizeof(double), c.st));
  BCK(cudaMemsetAsync(w, 0, sizeof(unsigned long long), c.st));
  size_t n = (size_t)c.M * c.N;
  if (c.dt == WEAVE_BF16) {
    bench_sumsq<1><<<1024, 256, 0, c.st>>>((const uint16_t *)c.Cref, n, sq);
    bench_count_wrong<1><<<1024, 256, 0, c.st>>>((const uint16_t *)c.C, (const uint16_t *)c.Cref, n, sq, w);
  } else {
    bench_sumsq<0><<<1024, 256, 0, c.st>>>((const uint16_t *)c.Cref, n, sq);
    bench_count_wrong<0><<<1024, 256, 0, c.st>>>((const uint16_t *)c.C, (const uint16_t *)c.Cref, n, sq, w);
  }
  BCK(cudaStreamSynchronize(c.st));
  BCK(cudaMemcpy(wrong, w, sizeof *wrong, cudaMemcpyDeviceToHost));
  cudaFree(sq);
  cudaFree(w);
  return 0;
}

/* Without a device: what weave's AUTO would run per row on a 132-SM H100/H200 (default knobs), from
 * the same plan functions the launcher calls (gemm_streamk.h). */
static void print_plan_without_device(const std::vector<int> &shapes, const std::vector<int> &blist) {
  const int sms = 132;
  printf("# weave-bench --op gemm: no CUDA device visible, nothing timed. The plan weave's AUTO would run on a\n"
         "# %d-SM H100/H200 (default knobs): schedule (cooperative or ping-pong), stream-K tail tiles, and\n"
         "# the cost model's estimate in k-blocks of main loop per block (docs/hopper_gemm.md, steps 3 and 5)\n",
         sms);
  printf("#%7s %6s %6s %6s %6s %6s %10s %5s %9s %9s\n", "M", "N", "K", "blocks", "tiles", "kt", "schedule", "sk",
         "est_coop", "est_pp");
  for (size_t i = 0; i + 2 < shapes.size(); i += 3) {
    const int M = shapes[i], N = shapes[i + 1], K = shapes[i + 2];
    const int tiles = ((M + WEAVE_HGEMM_BM - 1) / WEAVE_HGEMM_BM) * ((N + WEAVE_HGEMM_BN - 1) / WEAVE_HGEMM_BN);
    const int kt = (K + WEAVE_HGEMM_BK - 1) / WEAVE_HGEMM_BK;
    for (int b : blist) {
      b = std::min(std::max(b, 1), sms);
      const int pp = weave_hgemm_pick_pingpong(WEAVE_HGEMM_SCHED_AUTO, 1, tiles, b, kt, WEAVE_HGEMM_SK_AUTO);
      const int sk = pp ? 0 : weave_hgemm_sk_plan(tiles, b, kt, WEAVE_HGEMM_SK_AUTO).sk_tiles;
      const double est_pp = weave_hgemm_pp_units32(tiles, b, kt) / 32.0;
      printf(" %7d %6d %6d %6d %6d %6d %10s %5d %9lld %9.1f\n", M, N, K, b, tiles, kt, pp ? "ping-pong" : "coop", sk,
             weave_hgemm_coop_units(tiles, b, kt, WEAVE_HGEMM_SK_AUTO), est_pp);
    }
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: weave-bench --op gemm [-d bf16|fp16] [-l row|col] [-s MxNxK]... [-B b1,b2,...]\n"
          "                   [-w warmup] [-n iters] [-c 0|1] [-J file.json]\n");
}

extern "C" int weave_bench_gemm_main(int argc, char **argv) {
  weave_dtype_t dt = WEAVE_BF16;
  weave_layout_t ly = WEAVE_LAYOUT_ROW;
  int warm = 5, iters = 20, check = 1;
  const char *json = NULL;
  std::vector<int> shapes, blist;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--op") && v) { if (strcmp(v, "gemm")) { usage(); return 2; } ++i; }
    else if (!strcmp(a, "-d") && v) { dt = !strcmp(v, "fp16") ? WEAVE_FP16 : WEAVE_BF16; ++i; }
    else if (!strcmp(a, "-l") && v) { ly = !strcmp(v, "col") ? WEAVE_LAYOUT_COL : WEAVE_LAYOUT_ROW; ++i; }
    else if (!strcmp(a, "-s") && v) {
      int m, n, k;
      if (sscanf(v, "%dx%dx%d", &m, &n, &k) != 3) { usage(); return 2; }
      shapes.push_back(m); shapes.push_back(n); shapes.push_back(k); ++i;
    } else if (!strcmp(a, "-B") && v) {
      for (const char *p = v; *p;) { blist.push_back(atoi(p)); const char *q = strchr(p, ','); if (!q) break; p = q + 1; }
      ++i;
    } else if (!strcmp(a, "-w") && v) { warm = atoi(v); ++i; }
    else if (!strcmp(a, "-n") && v) { iters = atoi(v); ++i; }
    else if (!strcmp(a, "-c") && v) { check = atoi(v); ++i; }
    else if (!strcmp(a, "-J") && v) { json = v; ++i; }
    else { usage(); return 2; }
  }
  if (iters < 1) iters = 1;
  if (shapes.empty()) {
    const int def[] = {8192, 8192, 8192, 8192, 8192, 3584, 8192, 8192, 1024,
                       4096, 8192, 3584, 16384, 8192, 3584, 2048, 8192, 3584};
    shapes.assign(def, def + 18);
  }
  if (blist.empty()) blist = {132, 124, 116, 100};

  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    print_plan_without_device(shapes, blist);
    return 0;
  }
  int dev = 0;
  BCK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  BCK(cudaGetDeviceProperties(&prop, dev));
  for (auto &b : blist) b = std::min(b, prop.multiProcessorCount);

  Ctx c;
  c.dt = dt;
  c.ly = ly;
  c.ws_bytes = 32u << 20;
  BCK(cudaMalloc(&c.ws, c.ws_bytes));
  c.sk_bytes = weave_hgemm_workspace_max(0);
  BCK(cudaMalloc(&c.sk_ws, c.sk_bytes));
  BCK(cudaMemset(c.sk_ws, 0, c.sk_bytes));
  BCKL(cublasLtCreate(&c.lt));
  BCK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
  int rtv = 0, cublas_ver = (int)cublasLtGetVersion();
  cudaRuntimeGetVersion(&rtv);

  printf("# weave-bench --op gemm: C[M,N] = A[M,K] . B, %s, B %s, fp32 accumulate\n",
         dt == WEAVE_BF16 ? "bf16" : "fp16", ly == WEAVE_LAYOUT_ROW ? "ROW [K,N]" : "COL [N,K]");
  printf("# device 0: %s, %d SMs, L2 %d MB, cc %d.%d, CUDA runtime %d, cuBLASLt %d\n", prop.name,
         prop.multiProcessorCount, prop.l2CacheSize >> 20, prop.major, prop.minor, rtv, cublas_ver);
  printf("# weave tile %dx%dx%d, %d stages, %d threads, %d B smem; warm-up %d, median of %d, inputs "
         "rotated over > 2x L2, launches queued behind a GPU spin; per shape, every block count's weave / coop / pp / lt_sm and lt_def once per iteration, all in one shuffled order\n",
         WEAVE_HGEMM_BM, WEAVE_HGEMM_BN, WEAVE_HGEMM_BK, WEAVE_HGEMM_STAGES, WEAVE_HGEMM_THREADS,
         WEAVE_HGEMM_STANDALONE_SMEM_ALLOC_BYTES, warm, iters);
  printf("# knobs: WEAVE_HGEMM_CLUSTER=%s WEAVE_HGEMM_TMA_STORE=%s WEAVE_HGEMM_GROUP_M=%s WEAVE_HGEMM_STREAMK=%s "
         "WEAVE_HGEMM_PINGPONG=%s (unset: defaults)\n",
         getenv("WEAVE_HGEMM_CLUSTER") ? getenv("WEAVE_HGEMM_CLUSTER") : "-",
         getenv("WEAVE_HGEMM_TMA_STORE") ? getenv("WEAVE_HGEMM_TMA_STORE") : "-",
         getenv("WEAVE_HGEMM_GROUP_M") ? getenv("WEAVE_HGEMM_GROUP_M") : "-",
         getenv("WEAVE_HGEMM_STREAMK") ? getenv("WEAVE_HGEMM_STREAMK") : "-",
         getenv("WEAVE_HGEMM_PINGPONG") ? getenv("WEAVE_HGEMM_PINGPONG") : "-");
  printf("# TFLOP/s = 2MNK / time. weave: the plan's choice (sch: C cooperative, P ping-pong; sk = tiles in\n"
         "# the stream-K tail, 0: none); coop / pp: the same call with the schedule forced (coop keeps its\n"
         "# stream-K cost model); lt_def: cuBLASLt default heuristic; lt_sm: SM_COUNT_TARGET = blocks;\n"
         "# scal: (TFLOP/s / TFLOP/s at first block count) / (blocks / first); #wrong: weave and pp vs lt_def\n");
  printf("#%7s %6s %6s %6s %3s %4s %9s %8s %8s %8s %8s %8s %7s %7s %7s %6s %7s\n", "M", "N", "K", "blocks", "sch",
         "sk", "time(ms)", "TFLOP/s", "coop", "pp", "lt_def", "lt_sm", "pp/coop", "vs_def", "vs_sm", "scal",
         "#wrong");
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) { fprintf(stderr, "bench_gemm: cannot open %s\n", json); return 1; }
  if (jf)
    fprintf(jf, "{\"op\":\"gemm\",\"device\":\"%s\",\"sms\":%d,\"dtype\":\"%s\",\"b_layout\":\"%s\",\"results\":[",
            prop.name, prop.multiProcessorCount, dt == WEAVE_BF16 ? "bf16" : "fp16",
            ly == WEAVE_LAYOUT_ROW ? "row" : "col");
  int first_json = 1;
  unsigned long long total_wrong = 0;
  for (size_t s = 0; s + 2 < shapes.size(); s += 3) {
    c.M = shapes[s]; c.N = shapes[s + 1]; c.K = shapes[s + 2];
    size_t ab = ((size_t)c.M * c.K + (size_t)c.K * c.N) * 2;
    c.sets = (int)std::max<size_t>(2, (2 * (size_t)prop.l2CacheSize) / ab + 1);
    c.A.assign(c.sets, NULL);
    c.B.assign(c.sets, NULL);
    for (int i = 0; i < c.sets; ++i) {
      BCK(cudaMalloc(&c.A[i], (size_t)c.M * c.K * 2));
      BCK(cudaMalloc(&c.B[i], (size_t)c.K * c.N * 2));
      bench_fill<<<1024, 256, 0, c.st>>>((uint16_t *)c.A[i], (size_t)c.M * c.K, 2 * i + 1, dt == WEAVE_BF16);
      bench_fill<<<1024, 256, 0, c.st>>>((uint16_t *)c.B[i], (size_t)c.K * c.N, 2 * i + 2, dt == WEAVE_BF16);
    }
    BCK(cudaMalloc(&c.C, (size_t)c.M * c.N * 2));
    BCK(cudaMalloc(&c.Cref, (size_t)c.M * c.N * 2));
    BCK(cudaStreamSynchronize(c.st));
    if (s == 0) {
      /* Bring the clocks up before anything is timed: about half a second of the first shape (the
       * first rows of a cold process measured ~10% low, for weave and cuBLASLt alike). */
      cudaEvent_t e0, e1;
      BCK(cudaEventCreate(&e0));
      BCK(cudaEventCreate(&e1));
      float spent = 0;
      for (int round = 0; spent < 500.f && round < 1000; ++round) {
        BCK(cudaEventRecord(e0, c.st));
        for (int i = 0; i < 10; ++i)
          if (launch(c, 0, 0, NULL, i % c.sets, c.C)) return 1;
        BCK(cudaEventRecord(e1, c.st));
        BCK(cudaEventSynchronize(e1));
        float ms = 0;
        BCK(cudaEventElapsedTime(&ms, e0, e1));
        spent += ms;
      }
      BCK(cudaEventDestroy(e0));
      BCK(cudaEventDestroy(e1));
    }
    double flop = 2.0 * c.M * c.N * c.K;
    LtPlan def;
    if (lt_plan(c.lt, &def, c.M, c.N, c.K, dt, ly, 0, c.ws, c.ws_bytes)) return 1;
    char lt_algo[160];
    lt_describe(&def.algo, lt_algo, sizeof(lt_algo));
    printf("# lt_def for %dx%dx%d (cublasLt.h enum values): %s\n", c.M, c.N, c.K, lt_algo);
    /* Every block count's weave, weave cooperative, weave ping-pong and cuBLASLt at SM_COUNT_TARGET =
     * blocks, plus cuBLASLt's default once, all interleaved launch by launch in one shuffled order
     * (time_ms): the rows of a shape and the scaling between them see the same clocks. Timed one
     * block count after another, the rows drifted apart: in one run (2026-12-04 01:37) cuBLASLt's
     * default, the same kernel in both rows, ran 779 TFLOP/s in the 132-block row and 697 in the
     * 124-block row that followed it. */
    const size_t nb = blist.size();
    std::vector<LtPlan> smp(nb);
    std::vector<TimedKernel> tk;
    for (size_t bi = 0; bi < nb; ++bi) {
      const int b = blist[bi];
      if (lt_plan(c.lt, &smp[bi], c.M, c.N, c.K, dt, ly, b, c.ws, c.ws_bytes)) return 1;
      char sm_algo[160];
      lt_describe(&smp[bi].algo, sm_algo, sizeof(sm_algo));
      if (strcmp(sm_algo, lt_algo)) printf("# lt_sm for %dx%dx%d at %d blocks: %s\n", c.M, c.N, c.K, b, sm_algo);
    }
    for (size_t bi = 0; bi < nb; ++bi) {
      const TimedKernel row[4] = {{0, blist[bi], NULL}, {2, blist[bi], NULL}, {3, blist[bi], NULL}, {1, 0, &smp[bi]}};
      tk.insert(tk.end(), row, row + 4);
    }
    tk.push_back({1, 0, &def});
    std::vector<double> meds(tk.size());
    if (time_ms(c, tk.data(), (int)tk.size(), warm, iters, meds.data())) return 1;
    for (size_t bi = 0; bi < nb; ++bi) lt_destroy(&smp[bi]);
    double tf_first = 0;
    for (size_t bi = 0; bi < nb; ++bi) {
      const int b = blist[bi];
      const double *med = &meds[4 * bi];
#if WEAVE_HGEMM_PROFILE
      /* diagnostic build: clock64() stamps of one more cooperative launch (gemm_hopper.cuh) */
      if (getenv("WEAVE_HGEMM_PROFILE_DIR")) {
        char path[512];
        snprintf(path, sizeof path, "%s/prof_%dx%dx%d_%d.bin", getenv("WEAVE_HGEMM_PROFILE_DIR"), c.M, c.N, c.K, b);
        if (launch(c, 2, b, NULL, 0, c.C) || weave_hgemm_profile_save(path))
          fprintf(stderr, "bench_gemm: profile %s failed\n", path);
      }
#endif
      const double t_w = med[0], t_def = meds.back(), t_sm = med[3], tf_def = flop / t_def * 1e-9;
      const double tf_coop = flop / med[1] * 1e-9, tf_pp = flop / med[2] * 1e-9;
      const int pp = weave_hgemm_schedule(c.M, c.N, c.K, b, WEAVE_HGEMM_SK_AUTO, WEAVE_HGEMM_SCHED_AUTO) ==
                     WEAVE_HGEMM_SCHED_PINGPONG;
      const int sk_tiles = pp ? 0 : weave_hgemm_streamk_plan(c.M, c.N, c.K, b, WEAVE_HGEMM_SK_AUTO).sk_tiles;
      unsigned long long wrong = 0, wrong_pp = 0;
      if (check && (count_wrong(c, 0, b, &def, &wrong) || count_wrong(c, 3, b, &def, &wrong_pp))) return 1;
      wrong += wrong_pp;
      total_wrong += wrong;
      double tf = flop / t_w * 1e-9, tf_sm = flop / t_sm * 1e-9;
      if (bi == 0) tf_first = tf;
      double scal = (tf / tf_first) / ((double)b / blist[0]);
      printf(" %7d %6d %6d %6d %3s %4d %9.4f %8.1f %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f %7.3f %6.3f %7llu\n", c.M,
             c.N, c.K, b, pp ? "P" : "C", sk_tiles, t_w, tf, tf_coop, tf_pp, tf_def, tf_sm, tf_pp / tf_coop,
             tf / tf_def, tf / tf_sm, scal, wrong);
      fflush(stdout);
      if (jf) {
        fprintf(jf, "%s\n{\"M\":%d,\"N\":%d,\"K\":%d,\"blocks\":%d,\"schedule\":\"%s\",\"sk_tiles\":%d,"
                    "\"time_ms\":%.5f,\"tflops\":%.2f,\"coop_tflops\":%.2f,\"pingpong_tflops\":%.2f,"
                    "\"cublaslt_default_tflops\":%.2f,\"cublaslt_sm_target_tflops\":%.2f,\"pp_vs_coop\":%.4f,"
                    "\"vs_default\":%.4f,\"vs_sm_target\":%.4f,\"scaling\":%.4f,\"wrong\":%llu}",
                first_json ? "" : ",", c.M, c.N, c.K, b, pp ? "pingpong" : "coop", sk_tiles, t_w, tf, tf_coop,
                tf_pp, tf_def, tf_sm, tf_pp / tf_coop, tf / tf_def, tf / tf_sm, scal, wrong);
        first_json = 0;
      }
    }
    lt_destroy(&def);
    for (int i = 0; i < c.sets; ++i) { cudaFree(c.A[i]); cudaFree(c.B[i]); }
    cudaFree(c.C);
    cudaFree(c.Cref);
  }
  if (jf) { fprintf(jf, "\n]}\n"); fclose(jf); }
  printf("# Out of bounds values : %llu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  cublasLtDestroy(c.lt);
  cudaStreamDestroy(c.st);
  cudaFree(c.ws);
  cudaFree(c.sk_ws);
  return total_wrong ? 1 : 0;
}
