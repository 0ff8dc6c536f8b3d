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
 * Options: `weave-bench --op gemm --help` lists them with their defaults (one table, gemm_options;
 * strict values: a bad one names the flag, exit 2). cuBLASLt runs through the library's own plan
 * (src/plan/lt.c).
 */
#include <algorithm>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "cli.h"
#include "gemm/hopper/gemm_hopper.h"
#include "harness.h"
#include "plan/lt.h"
#include "json_writer.h"

#define BCK(x)                                                                                        \
  do {                                                                                                \
    cudaError_t e_ = (x);                                                                             \
    if (e_ != cudaSuccess) {                                                                          \
      fprintf(stderr, "bench_gemm: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      return 1;                                                                                       \
    }                                                                                                 \
  } while (0)

/* fp8 e4m3 inputs: the same uniform values in [-1, 1), rounded to e4m3 */
__global__ void bench_fill_fp8(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    float f = (float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
    p[i] = (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void bench_fill(uint16_t *p, size_t n, uint32_t seed, int bf16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    float f = (float)(x >> 8) * (1.0f / 8388608.0f) - 1.0f;
    uint16_t v;
    if (bf16) {
      __nv_bfloat16 b = __float2bfloat16(f);
      v = *(uint16_t *)&b;
    } else {
      __half h = __float2half(f);
      v = *(uint16_t *)&h;
    }
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

struct Ctx {
  int M, N, K, sets;
  weave_dtype_t dt;
  weave_layout_t ly;
  int scale_mode; /* fp8: weave_scale_mode_t of every launch (weave and cuBLASLt alike) */
  int fast_accum; /* fp8: WEAVE_FP8_ACCUM_FAST for weave and lt_def / lt_sm (else fp32 accumulation) */
  float *sa, *sb; /* fp8: device scales, [M] and [N] (TENSOR reads the first of each) */
  std::vector<void *> A, B;
  void *C, *Cref;
  void *sk_ws; /* weave's stream-K workspace (zeroed once) */
  size_t sk_bytes;
  cudaStream_t st;
};

/* which: 0 weave (blocks; schedule and stream-K tail as its plan decides), 2 weave cooperative
 * schedule (stream-K by its cost model), 3 weave ping-pong schedule, 1 cuBLASLt plan */
static int launch(Ctx &c, int which, int blocks, weave_lt_t *lp, int set, void *C) {
  if (which != 1) {
    const int fp8 = c.dt == WEAVE_FP8_E4M3;
    weave_hgemm_args_t a = weave_hgemm_auto_args(c.M, c.N, c.K, c.dt, blocks, fp8 && c.fast_accum);
    a.b_layout = c.ly;
    a.alpha = 1.f;
    a.A = c.A[set];
    a.B = c.B[set];
    a.C = C;
    a.workspace = c.sk_ws;
    a.workspace_bytes = c.sk_bytes;
    if (fp8) {
      a.scales.mode = c.scale_mode;
      a.scales.a = c.scale_mode ? c.sa : NULL;
      a.scales.b = c.scale_mode ? c.sb : NULL;
    }
    a.schedule = which == 2 ? WEAVE_HGEMM_SCHED_COOP : which == 3 ? WEAVE_HGEMM_SCHED_PINGPONG : WEAVE_HGEMM_SCHED_AUTO;
    char err[256];
    int r = weave_hgemm_launch(&a, c.st, err, sizeof err);
    if (r) {
      fprintf(stderr, "bench_gemm: weave: %s\n", err);
      return 1;
    }
    return 0;
  }
  if (weave_lt_run_scaled(lp, 1.f, c.A[set], c.B[set], c.scale_mode ? c.sa : NULL, c.scale_mode ? c.sb : NULL, C,
                          (weave_stream_t)c.st) != WEAVE_SUCCESS) {
    fprintf(stderr, "bench_gemm: cublasLtMatmul failed\n");
    return 1;
  }
  return 0;
}

/* Busy-waits `ns` on the GPU so that the host can queue every timed launch behind it: the events
 * then measure back-to-back kernels, not the host's launch overhead. */
__global__ void bench_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

/* One kernel to time: which as in launch(). */
struct TimedKernel {
  int which, blocks;
  weave_lt_t *lp;
};

/* Times the kernels interleaved, one launch of each per iteration, so that clock and power drift
 * over the measurement hits them alike; med[k] = median of kernel k's `iters` launches. The order is
 * shuffled per iteration (fixed seed): a kernel's speed depends on the one before it (in a fixed
 * round-robin, the same cuBLASLt kernel ran faster in one slot than in the slot before it), so no
 * kernel keeps one neighbour. */
static int time_ms(Ctx &c, const TimedKernel *k, int nk, int warm, int iters, double *med) {
  std::vector<cudaEvent_t> ev((size_t)iters * nk + 1);
  std::vector<int> order((size_t)iters * nk);
  unsigned rng = 12345u;
  for (int i = 0; i < iters; ++i) harness_shuffle(&order[(size_t)i * nk], nk, &rng);
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
static int count_wrong(Ctx &c, int which, int blocks, weave_lt_t *def, unsigned long long *wrong) {
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
  if (c.dt != WEAVE_FP16) { /* bf16 output (fp8 writes bf16 here) */
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

/* fp8 with fp32 accumulation runs the three-warpgroup kernel unless WEAVE_HGEMM_PROMOTE_WGS=2 */
static bool runs_p3(weave_dtype_t dt, int fast_accum) {
  return dt == WEAVE_FP8_E4M3 && !fast_accum && weave_hgemm_knob("WEAVE_HGEMM_PROMOTE_WGS") == 3;
}

/* Without a device: what weave's AUTO would run per row on a 132-SM H100/H200 (default knobs), from
 * the same plan functions the launcher calls (tile_scheduler.h). */
static void print_plan_without_device(const std::vector<int> &shapes, const std::vector<int> &blist, weave_dtype_t dt,
                                      int fast_accum) {
  const int sms = 132;
  const bool p3 = runs_p3(dt, fast_accum);
  printf(
      "# weave-bench --op gemm: no CUDA device visible, nothing timed. The plan weave's AUTO would run on a\n"
      "# %d-SM H100/H200 (WEAVE_HGEMM_* from the environment): the tile, schedule (cooperative, ping-pong or\n"
      "# three warpgroups), stream-K tail tiles, the tile order's group (tile rows), 2-CTA clusters (pairs\n"
      "# sharing A or B) and the cost model's estimate in k-blocks of main loop per block (docs/hopper_gemm.md)\n",
      sms);
  printf("#%7s %6s %6s %6s %7s %6s %6s %10s %5s %5s %5s %9s %9s\n", "M", "N", "K", "blocks", "tile", "tiles", "kt",
         "schedule", "sk", "group", "pairs", "est_coop", "est_pp");
  for (size_t i = 0; i + 2 < shapes.size(); i += 3) {
    const int M = shapes[i], N = shapes[i + 1], K = shapes[i + 2];
    const int kt = weave_hgemm_k_blocks(K, dt);
    for (int b : blist) {
      b = std::min(std::max(b, 1), sms);
      const weave_hgemm_args_t q = weave_hgemm_auto_args(M, N, K, dt, b, fast_accum);
      int sched, cluster, tile_n;
      const weave_hgemm_sk_t plan = weave_hgemm_plan_on(&q, sms, &sched, &cluster, &tile_n);
      const int bm = p3 ? WEAVE_HGEMM_P3_BM : WEAVE_HGEMM_BM, bn = p3 ? WEAVE_HGEMM_P3_BN : tile_n;
      const int tiles_m = (M + bm - 1) / bm, tiles_n = (N + bn - 1) / bn, tiles = tiles_m * tiles_n;
      const int pp = !p3 && sched == WEAVE_HGEMM_SCHED_PINGPONG, sk = pp ? 0 : plan.sk_tiles;
      const int grid = sk ? b : std::min(b, tiles); /* the launcher trims a grid of whole tiles */
      const double est_pp = weave_hgemm_pp_units32(tiles, b, kt, dt == WEAVE_FP8_E4M3) / 32.0;
      char tile[16];
      snprintf(tile, sizeof tile, "%dx%d", bm, bn);
      printf(" %7d %6d %6d %6d %7s %6d %6d %10s %5d %5d %5s %9lld %9.1f\n", M, N, K, b, tile, tiles, kt,
             p3   ? "3 wg"
             : pp ? "ping-pong"
                  : "coop",
             sk, weave_hgemm_group_for(grid, tiles_m, bm, bn),
             cluster == 3   ? "A"
             : cluster == 2 ? "B"
                            : "no",
             weave_hgemm_coop_units(tiles, b, kt, WEAVE_HGEMM_SK_AUTO), est_pp);
    }
  }
}

/* ------------------------------------------------------------------------------------------------
 * the command line
 * ---------------------------------------------------------------------------------------------- */
struct Options {
  weave_dtype_t dt = WEAVE_BF16;
  weave_layout_t ly = WEAVE_LAYOUT_ROW;
  int scales = WEAVE_SCALE_TENSOR; /* fp8 */
  int fast_accum = 0;              /* fp8: --fp8-accum fast */
  int warm = 5, iters = 20, check = 1;
  int hold_ms = 0; /* --hold */
  const char *json = NULL;
  std::vector<int> shapes, blist;
};

enum { OPT_OP = 256, OPT_SCALES, OPT_ACCUM, OPT_HOLD };
static const cli_option_t gemm_options[] = {
    {"op", OPT_OP, "gemm", "this benchmark (weave-bench --op gemm)"},
    {"dtype", 'd', "T", "bf16, fp16 or fp8 (e4m3 in, bf16 out; B col only; default bf16)"},
    {"layout", 'l', "L", "B as row [K,N] or col [N,K] (default row; col for fp8)"},
    {"scales", OPT_SCALES, "S", "fp8 scales: none, tensor or row (default tensor; cuBLASLt gets the same)"},
    {"fp8-accum", OPT_ACCUM, "A", "fp8 accumulation: fp32 or fast (default fp32; cuBLASLt gets the same)"},
    {"shape", 's', "MxNxK",
     "a shape, repeatable (default six: 8192^3, 8192x8192x{3584,1024}, {4096,16384,2048}x8192x3584)"},
    {"blocks", 'B', "b1,b2,..", "block counts, capped at the SM count (default 132,124,116,100)"},
    {"warmup", 'w', "N", "warm-up launches per kernel (default 5)"},
    {"iters", 'n', "N", "timed launches per kernel, median reported (default 20)"},
    {"check", 'c', "0|1", "count weave's wrong elements against cuBLASLt (default 1)"},
    {"json", 'J', "FILE", "also write the rows as JSON (default: none)"},
    {"hold", OPT_HOLD, "MS",
     "after each shape's rows, weave (first block count) and then cuBLASLt's default back to back for MS ms "
     "each, printing their rates and wall-clock spans, to read the SM clock and power beside them (default 0: "
     "none)"},
    {"help", 'h', NULL, "this text"},
    {NULL, 0, NULL, NULL},
};

static void parse_options(int argc, char **argv, Options &o) {
  static const char *const dtypes[] = {"bf16", "fp16", "fp8", NULL}, *const layouts[] = {"row", "col", NULL};
  static const char *const scale_names[] = {"none", "tensor", "row", NULL};
  static const char *const accum_names[] = {"fp32", "fast", NULL};
  int layout_given = 0, scales_given = 0;
  static const char *const ops[] = {"gemm", NULL};
  cli_t c;
  cli_init(&c, "weave-bench --op gemm", gemm_options);
  optind = 1;
  long list[64];
  for (int key; (key = cli_next(&c, argc, argv)) != -1;) {
    switch (key) {
      case OPT_OP: cli_choice(&c, optarg, ops); break;
      case 'd': {
        const int d = cli_choice(&c, optarg, dtypes);
        o.dt = d == 2 ? WEAVE_FP8_E4M3 : d ? WEAVE_FP16 : WEAVE_BF16;
        break;
      }
      case 'l':
        o.ly = cli_choice(&c, optarg, layouts) ? WEAVE_LAYOUT_COL : WEAVE_LAYOUT_ROW;
        layout_given = 1;
        break;
      case OPT_SCALES:
        o.scales = cli_choice(&c, optarg, scale_names);
        scales_given = 1;
        break;
      case OPT_ACCUM: o.fast_accum = cli_choice(&c, optarg, accum_names); break;
      case 's': {
        int m, n, k, used = 0;
        if (sscanf(optarg, "%dx%dx%d%n", &m, &n, &k, &used) != 3 || optarg[used] || m < 1 || n < 1 || k < 1) {
          fprintf(stderr, "weave-bench --op gemm: bad value '%s' for %s: MxNxK, each >= 1\n", optarg, c.flag);
          exit(2);
        }
        o.shapes.insert(o.shapes.end(), {m, n, k});
        break;
      }
      case 'B': {
        const int n = cli_long_list(&c, optarg, 1, 4096, list, 64);
        o.blist.assign(list, list + n);
        break;
      }
      case 'w': o.warm = (int)cli_long(&c, optarg, 0, 100000); break;
      case 'n': o.iters = (int)cli_long(&c, optarg, 1, 100000); break;
      case 'c': o.check = (int)cli_long(&c, optarg, 0, 1); break;
      case 'J': o.json = optarg; break;
      case OPT_HOLD: o.hold_ms = (int)cli_long(&c, optarg, 0, 600000); break;
      case 'h': cli_usage(&c, stdout, "[options]   (weave's Hopper GEMM against cuBLASLt)"); exit(0);
    }
  }
  if (o.dt == WEAVE_FP8_E4M3) {
    if (layout_given && o.ly != WEAVE_LAYOUT_COL) {
      fprintf(stderr, "weave-bench --op gemm: fp8 takes B as col [N,K] only (--layout col)\n");
      exit(2);
    }
    o.ly = WEAVE_LAYOUT_COL;
  } else {
    /* fp8 options on 16-bit inputs: refused rather than ignored (as weave_gemm_ex refuses them) */
    if (o.fast_accum) {
      fprintf(stderr, "weave-bench --op gemm: --fp8-accum fast applies to -d fp8 only\n");
      exit(2);
    }
    if (scales_given && o.scales != WEAVE_SCALE_NONE) {
      fprintf(stderr, "weave-bench --op gemm: --scales %s applies to -d fp8 only\n", scale_names[o.scales]);
      exit(2);
    }
    o.scales = WEAVE_SCALE_NONE;
  }
  if (o.shapes.empty())
    o.shapes = {8192, 8192, 8192, 8192,  8192, 3584, 8192, 8192, 1024,
                4096, 8192, 3584, 16384, 8192, 3584, 2048, 8192, 3584};
  if (o.blist.empty()) o.blist = {132, 124, 116, 100};
}

/* ------------------------------------------------------------------------------------------------
 * the run
 * ---------------------------------------------------------------------------------------------- */
static void print_header(const Options &o, const cudaDeviceProp &prop) {
  int rtv = 0;
  cudaRuntimeGetVersion(&rtv);
  printf("# weave-bench --op gemm: C[M,N] = A[M,K] . B, %s, B %s, fp32 accumulate\n", weave_dtype_name(o.dt),
         o.ly == WEAVE_LAYOUT_ROW ? "ROW [K,N]" : "COL [N,K]");
  if (o.dt == WEAVE_FP8_E4M3)
    printf(
        "# fp8: e4m3 in, bf16 out, %s scales, %s accumulation (weave, lt_def and lt_sm alike: cuBLASLt\n"
        "# CUBLASLT_MATMUL_DESC_FAST_ACCUM = %d); cuBLASLt with the other accumulation is timed once per\n"
        "# shape as lt_other, after the rows\n",
        o.scales == WEAVE_SCALE_ROW      ? "per-row"
        : o.scales == WEAVE_SCALE_TENSOR ? "per-tensor"
                                         : "no",
        o.fast_accum ? "fast (the tensor cores' own)" : "fp32 (promoted every 128 of K)", o.fast_accum);
  const bool p3 = runs_p3(o.dt, o.fast_accum);
  printf("# device 0: %s, %d SMs, L2 %d MB, cc %d.%d, CUDA runtime %d\n", prop.name, prop.multiProcessorCount,
         prop.l2CacheSize >> 20, prop.major, prop.minor, rtv);
  printf(
      "# weave tile %dx%dx%d, %d stages, %d threads, %d B smem; warm-up %d, median of %d, inputs "
      "rotated over > 2x L2, launches queued behind a GPU spin; per shape, every block count's weave / coop / pp / lt_sm and lt_def once per iteration, all in one shuffled order\n",
      p3 ? WEAVE_HGEMM_P3_BM : WEAVE_HGEMM_BM, p3 ? WEAVE_HGEMM_P3_BN : WEAVE_HGEMM_BN, weave_hgemm_bk(o.dt),
      p3 ? WEAVE_HGEMM_P3_STAGES : WEAVE_HGEMM_STAGES, p3 ? WEAVE_HGEMM_P3_THREADS : WEAVE_HGEMM_THREADS,
      p3 ? WEAVE_HGEMM_P3_SMEM_ALLOC_BYTES : WEAVE_HGEMM_STANDALONE_SMEM_ALLOC_BYTES, o.warm, o.iters);
  if (p3) printf("# promoted fp8: three consumer warpgroups, one schedule (coop and pp run the same kernel)\n");
  const char *knobs[] = {"WEAVE_HGEMM_CLUSTER", "WEAVE_HGEMM_TMA_STORE", "WEAVE_HGEMM_GROUP_M",
                         "WEAVE_HGEMM_STREAMK", "WEAVE_HGEMM_PINGPONG",  "WEAVE_HGEMM_PROMOTE_WGS"};
  printf("# knobs:");
  for (const char *k : knobs) printf(" %s=%s", k, getenv(k) ? getenv(k) : "-");
  printf(" (unset: defaults)\n");
  printf(
      "# TFLOP/s = 2MNK / time. weave: the plan's choice (sch: C cooperative, P ping-pong; sk = tiles in\n"
      "# the stream-K tail, 0: none); coop / pp: the same call with the schedule forced (coop keeps its\n"
      "# stream-K cost model); lt_def: cuBLASLt default heuristic; lt_sm: SM_COUNT_TARGET = blocks;\n"
      "# scal: (TFLOP/s / TFLOP/s at first block count) / (blocks / first); #wrong: weave and pp vs lt_def\n");
  printf("#%7s %6s %6s %6s %3s %4s %9s %8s %8s %8s %8s %8s %7s %7s %7s %6s %7s\n", "M", "N", "K", "blocks", "sch", "sk",
         "time(ms)", "TFLOP/s", "coop", "pp", "lt_def", "lt_sm", "pp/coop", "vs_def", "vs_sm", "scal", "#wrong");
}

/* Launches kernel `which` (blocks, lp as launch) back to back, in batches of 10, until they span `ms`
 * of GPU time or max_launches ran: *launches, *spent (ms, first launch to last end). */
static int launch_for(Ctx &c, int which, int blocks, weave_lt_t *lp, float ms, long max_launches, long *launches,
                      float *spent) {
  cudaEvent_t e0, e1;
  BCK(cudaEventCreate(&e0));
  BCK(cudaEventCreate(&e1));
  void *C = which == 1 ? c.Cref : c.C;
  *launches = 0;
  *spent = 0;
  BCK(cudaEventRecord(e0, c.st));
  int failed = 0;
  while (*spent < ms && *launches < max_launches) {
    for (int i = 0; i < 10; ++i, ++*launches)
      if ((failed = launch(c, which, blocks, lp, (int)(*launches % c.sets), C)) != 0) break;
    if (failed) break;
    BCK(cudaEventRecord(e1, c.st));
    BCK(cudaEventSynchronize(e1));
    BCK(cudaEventElapsedTime(spent, e0, e1));
  }
  BCK(cudaEventDestroy(e0));
  BCK(cudaEventDestroy(e1));
  return failed;
}

/* Bring the clocks up before anything is timed: about half a second of the first shape (the first
 * rows of a cold process measured ~10% low, for weave and cuBLASLt alike). */
static int warm_clocks(Ctx &c) {
  long launches;
  float spent;
  return launch_for(c, 0, 0, NULL, 500.f, 10000, &launches, &spent);
}

/* Input sets rotated past twice the L2, the output and the reference output. */
static int shape_alloc(Ctx &c, const cudaDeviceProp &prop) {
  const size_t ein = weave_dtype_size(c.dt);
  size_t ab = ((size_t)c.M * c.K + (size_t)c.K * c.N) * ein;
  c.sets = (int)std::max<size_t>(2, (2 * (size_t)prop.l2CacheSize) / ab + 1);
  c.A.assign(c.sets, NULL);
  c.B.assign(c.sets, NULL);
  for (int i = 0; i < c.sets; ++i) {
    BCK(cudaMalloc(&c.A[i], (size_t)c.M * c.K * ein));
    BCK(cudaMalloc(&c.B[i], (size_t)c.K * c.N * ein));
    if (c.dt == WEAVE_FP8_E4M3) {
      bench_fill_fp8<<<1024, 256, 0, c.st>>>((uint8_t *)c.A[i], (size_t)c.M * c.K, 2 * i + 1);
      bench_fill_fp8<<<1024, 256, 0, c.st>>>((uint8_t *)c.B[i], (size_t)c.K * c.N, 2 * i + 2);
    } else {
      bench_fill<<<1024, 256, 0, c.st>>>((uint16_t *)c.A[i], (size_t)c.M * c.K, 2 * i + 1, c.dt == WEAVE_BF16);
      bench_fill<<<1024, 256, 0, c.st>>>((uint16_t *)c.B[i], (size_t)c.K * c.N, 2 * i + 2, c.dt == WEAVE_BF16);
    }
  }
  c.sa = c.sb = NULL;
  if (c.dt == WEAVE_FP8_E4M3) { /* scales near 1, different per row / column */
    std::vector<float> h((size_t)std::max(c.M, c.N));
    for (size_t i = 0; i < h.size(); ++i) h[i] = 0.5f + 0.03125f * (float)(i % 32);
    BCK(cudaMalloc(&c.sa, (size_t)c.M * 4));
    BCK(cudaMalloc(&c.sb, (size_t)c.N * 4));
    BCK(cudaMemcpy(c.sa, h.data(), (size_t)c.M * 4, cudaMemcpyHostToDevice));
    BCK(cudaMemcpy(c.sb, h.data(), (size_t)c.N * 4, cudaMemcpyHostToDevice));
  }
  BCK(cudaMalloc(&c.C, (size_t)c.M * c.N * 2));
  BCK(cudaMalloc(&c.Cref, (size_t)c.M * c.N * 2));
  BCK(cudaStreamSynchronize(c.st));
  return 0;
}

static void shape_free(Ctx &c) {
  for (int i = 0; i < c.sets; ++i) {
    cudaFree(c.A[i]);
    cudaFree(c.B[i]);
  }
  cudaFree(c.C);
  cudaFree(c.Cref);
  cudaFree(c.sa);
  cudaFree(c.sb);
}

/* cuBLASLt plans of the shape: the default heuristic (*def) and SM_COUNT_TARGET = each block count. */
static int lt_plans(const Ctx &c, const std::vector<int> &blist, weave_lt_t **def, std::vector<weave_lt_t *> &smp) {
  char msg[256], lt_algo[160], sm_algo[160];
  weave_lt_opts_t o = WEAVE_LT_OPTS_INIT; /* fp8: the accumulation weave's kernel runs */
  o.scale_mode = c.scale_mode;
  o.fast_accum = c.fast_accum;
  const weave_dtype_t out = c.dt == WEAVE_FP8_E4M3 ? WEAVE_BF16 : c.dt;
  if (weave_lt_create_ex(c.M, c.N, c.K, c.dt, out, c.ly, &o, def, msg, sizeof msg) != WEAVE_SUCCESS) {
    fprintf(stderr, "bench_gemm: cuBLASLt: %s\n", msg);
    return 1;
  }
  weave_lt_describe(*def, lt_algo, sizeof lt_algo);
  printf("# lt_def for %dx%dx%d (cublasLt.h enum values): %s\n", c.M, c.N, c.K, lt_algo);
  smp.assign(blist.size(), NULL);
  for (size_t bi = 0; bi < blist.size(); ++bi) {
    o.sm_target = blist[bi];
    if (weave_lt_create_ex(c.M, c.N, c.K, c.dt, out, c.ly, &o, &smp[bi], msg, sizeof msg) != WEAVE_SUCCESS) {
      fprintf(stderr, "bench_gemm: cuBLASLt at %d SMs: %s\n", blist[bi], msg);
      return 1;
    }
    weave_lt_describe(smp[bi], sm_algo, sizeof sm_algo);
    if (strcmp(sm_algo, lt_algo)) printf("# lt_sm for %dx%dx%d at %d blocks: %s\n", c.M, c.N, c.K, blist[bi], sm_algo);
  }
  return 0;
}

/* Wall-clock milliseconds (CLOCK_REALTIME, the clock `nvidia-smi --query-gpu=timestamp` reads). */
static double wall_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* --hold: one kernel launched back to back for about ms milliseconds (no other kernel between), its
 * rate and its wall-clock span, so that clock and power samples taken beside the run can be told
 * apart: under the power cap a kernel's rate follows the clock its own power draw allows. */
static int hold(Ctx &c, const char *name, int which, int blocks, weave_lt_t *lp, int ms, double flop) {
  long launches;
  float spent;
  const double t0 = wall_ms();
  if (launch_for(c, which, blocks, lp, (float)ms, LONG_MAX, &launches, &spent)) return 1;
  const double t1 = wall_ms();
  printf("# hold %dx%dx%d %-6s %ld launches in %.1f ms: %.1f TFLOP/s, wall %.0f-%.0f ms\n", c.M, c.N, c.K, name,
         launches, spent, flop * launches / (spent * 1e-3) * 1e-12, t0, t1);
  fflush(stdout);
  return 0;
}

/* One shape: every block count's rows (and JSON rows); adds to *total_wrong. */
static int run_shape(Ctx &c, const Options &o, json_writer_t *jw, unsigned long long *total_wrong) {
  const double flop = 2.0 * c.M * c.N * c.K;
  const std::vector<int> &blist = o.blist;
  weave_lt_t *def = NULL;
  std::vector<weave_lt_t *> smp;
  int rc = lt_plans(c, blist, &def, smp);
  /* Every block count's weave, weave cooperative, weave ping-pong and cuBLASLt at SM_COUNT_TARGET =
   * blocks, plus cuBLASLt's default once, all interleaved launch by launch in one shuffled order
   * (time_ms): the rows of a shape and the scaling between them see the same clocks (timed one block
   * count after another, the same cuBLASLt kernel in two rows was seen 10% apart). */
  const size_t nb = blist.size();
  std::vector<TimedKernel> tk;
  for (size_t bi = 0; bi < nb && !rc; ++bi) {
    const TimedKernel row[4] = {{0, blist[bi], NULL}, {2, blist[bi], NULL}, {3, blist[bi], NULL}, {1, 0, smp[bi]}};
    tk.insert(tk.end(), row, row + 4);
  }
  tk.push_back({1, 0, def});
  weave_lt_t *other = NULL; /* fp8: cuBLASLt with the other accumulation, for reference */
  if (!rc && c.dt == WEAVE_FP8_E4M3) {
    char msg[256];
    weave_lt_opts_t o8 = WEAVE_LT_OPTS_INIT;
    o8.scale_mode = c.scale_mode;
    o8.fast_accum = !c.fast_accum;
    if (weave_lt_create_ex(c.M, c.N, c.K, c.dt, WEAVE_BF16, c.ly, &o8, &other, msg, sizeof msg) == WEAVE_SUCCESS)
      tk.push_back({1, 0, other});
    else
      printf("# lt_other: cuBLASLt: %s\n", msg);
  }
  std::vector<double> meds(tk.size());
  if (!rc) rc = time_ms(c, tk.data(), (int)tk.size(), o.warm, o.iters, meds.data());
  double tf_first = 0;
  for (size_t bi = 0; bi < nb && !rc; ++bi) {
    const int b = blist[bi];
    const double *med = &meds[4 * bi];
#if WEAVE_HGEMM_PROFILE
    /* diagnostic build: clock64() stamps of one more launch with the cooperative schedule (fp8 with
     * fp32 accumulation: the three-warpgroup kernel; src/gemm/hopper/prof.cuh) */
    if (getenv("WEAVE_HGEMM_PROFILE_DIR")) {
      char path[512];
      snprintf(path, sizeof path, "%s/prof_%dx%dx%d_%d.bin", getenv("WEAVE_HGEMM_PROFILE_DIR"), c.M, c.N, c.K, b);
      if (launch(c, 2, b, NULL, 0, c.C) || weave_hgemm_profile_save(path))
        fprintf(stderr, "bench_gemm: profile %s failed\n", path);
    }
#endif
    const double t_w = med[0], t_def = meds[4 * nb], t_sm = med[3], tf_def = flop / t_def * 1e-9;
    const double tf_coop = flop / med[1] * 1e-9, tf_pp = flop / med[2] * 1e-9;
    const weave_hgemm_args_t q =
        weave_hgemm_auto_args(c.M, c.N, c.K, c.dt, b, c.fast_accum); /* the rows' schedule, stream-K */
    const int pp = weave_hgemm_schedule(&q) == WEAVE_HGEMM_SCHED_PINGPONG;
    const int sk_tiles = pp ? 0 : weave_hgemm_streamk_plan(&q).sk_tiles;
    unsigned long long wrong = 0, wrong_pp = 0;
    if (o.check && (count_wrong(c, 0, b, def, &wrong) || count_wrong(c, 3, b, def, &wrong_pp))) {
      rc = 1;
      break;
    }
    wrong += wrong_pp;
    *total_wrong += wrong;
    double tf = flop / t_w * 1e-9, tf_sm = flop / t_sm * 1e-9;
    if (bi == 0) tf_first = tf;
    double scal = (tf / tf_first) / ((double)b / blist[0]);
    printf(" %7d %6d %6d %6d %3s %4d %9.4f %8.1f %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f %7.3f %6.3f %7llu\n", c.M, c.N,
           c.K, b, pp ? "P" : "C", sk_tiles, t_w, tf, tf_coop, tf_pp, tf_def, tf_sm, tf_pp / tf_coop, tf / tf_def,
           tf / tf_sm, scal, wrong);
    fflush(stdout);
    if (jw) {
      json_begin_object(jw);
      json_kv_int(jw, "M", c.M);
      json_kv_int(jw, "N", c.N);
      json_kv_int(jw, "K", c.K);
      json_kv_int(jw, "blocks", b);
      json_kv_string(jw, "schedule", pp ? "pingpong" : "coop");
      json_kv_int(jw, "sk_tiles", sk_tiles);
      json_kv_number(jw, "time_ms", t_w);
      json_kv_number(jw, "tflops", tf);
      json_kv_number(jw, "coop_tflops", tf_coop);
      json_kv_number(jw, "pingpong_tflops", tf_pp);
      json_kv_number(jw, "cublaslt_default_tflops", tf_def);
      json_kv_number(jw, "cublaslt_sm_target_tflops", tf_sm);
      json_kv_number(jw, "pp_vs_coop", tf_pp / tf_coop);
      json_kv_number(jw, "vs_default", tf / tf_def);
      json_kv_number(jw, "vs_sm_target", tf / tf_sm);
      json_kv_number(jw, "scaling", scal);
      json_kv_int(jw, "wrong", (long long)wrong);
      json_end_object(jw);
    }
  }
  /* --hold: weave then cuBLASLt's default, a second apart (the clock settles between) */
  if (o.hold_ms > 0 && !rc) {
    rc = hold(c, "weave", 0, blist[0], NULL, o.hold_ms, flop);
    if (!rc) {
      const struct timespec pause = {1, 0};
      nanosleep(&pause, NULL);
      rc = hold(c, "lt_def", 1, 0, def, o.hold_ms, flop);
    }
  }
  if (other && !rc)
    printf("# lt_other %dx%dx%d (cuBLASLt fp8, %s accumulation): %.1f TFLOP/s\n", c.M, c.N, c.K,
           c.fast_accum ? "fp32" : "fast", flop / meds[4 * nb + 1] * 1e-9);
  weave_lt_destroy(other);
  weave_lt_destroy(def);
  for (weave_lt_t *l : smp) weave_lt_destroy(l);
  return rc;
}

extern "C" int weave_bench_gemm_main(int argc, char **argv) {
  Options o;
  parse_options(argc, argv, o);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    cudaGetLastError();
    print_plan_without_device(o.shapes, o.blist, o.dt, o.fast_accum);
    return 0;
  }
  BCK(cudaSetDevice(0));
  cudaDeviceProp prop;
  BCK(cudaGetDeviceProperties(&prop, 0));
  for (auto &b : o.blist) b = std::min(b, prop.multiProcessorCount);

  Ctx c;
  c.dt = o.dt;
  c.ly = o.ly;
  c.scale_mode = o.scales;
  c.fast_accum = o.fast_accum;
  c.sk_bytes = weave_hgemm_workspace_max(0);
  BCK(cudaMalloc(&c.sk_ws, c.sk_bytes));
  BCK(cudaMemset(c.sk_ws, 0, c.sk_bytes));
  BCK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
  print_header(o, prop);
  FILE *jf = o.json ? fopen(o.json, "w") : NULL;
  if (o.json && !jf) {
    fprintf(stderr, "bench_gemm: cannot open %s\n", o.json);
    return 2;
  }
  json_writer_t jw;
  if (jf) {
    json_open(&jw, jf);
    json_begin_object(&jw);
    json_kv_string(&jw, "op", "gemm");
    json_kv_string(&jw, "device", prop.name);
    json_kv_int(&jw, "sms", prop.multiProcessorCount);
    json_kv_string(&jw, "dtype", weave_dtype_name(o.dt));
    json_kv_string(&jw, "b_layout", o.ly == WEAVE_LAYOUT_ROW ? "row" : "col");
    json_key(&jw, "results");
    json_begin_array(&jw);
  }
  unsigned long long total_wrong = 0;
  int rc = 0;
  for (size_t s = 0; s + 2 < o.shapes.size() && !rc; s += 3) {
    c.M = o.shapes[s];
    c.N = o.shapes[s + 1];
    c.K = o.shapes[s + 2];
    rc = shape_alloc(c, prop);
    if (!rc && s == 0) rc = warm_clocks(c);
    if (!rc) rc = run_shape(c, o, jf ? &jw : NULL, &total_wrong);
    shape_free(c);
  }
  if (jf) {
    json_end_array(&jw);
    json_end_object(&jw);
    fclose(jf);
  }
  printf("# Out of bounds values : %llu %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
  cudaStreamDestroy(c.st);
  cudaFree(c.sk_ws);
  return rc ? 1 : total_wrong ? 1 : 0;
}
