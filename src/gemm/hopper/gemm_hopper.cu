/*
 * weave Hopper GEMM: the standalone persistent kernel and its C launcher.
 *
 * The kernel runs the cooperative or the ping-pong role (gemm_hopper.cuh) with a sink that applies
 * alpha and bias and writes each tile through shared memory and TMA stores when C allows it (16-byte
 * aligned, rows of 16-byte multiples; WEAVE_HGEMM_TMA_STORE=0 turns it off), else stores pairs
 * straight from the registers (scalar stores when N is odd or C is not aligned to a pair).
 * fp8 inputs: per-tensor scales (and none) are folded into the sink's alpha once per thread; per-row
 * scales go through the role's weave_hgemm_scale_fp8 policy (scales.cuh). The output is bf16, fp16
 * or fp32 (the last for the bulk strategy's fp32 partials: cooperative schedule only).
 * Grid = num_blocks persistent CTAs (<= SM count), CTA b takes tiles b, b + grid, ... in grouped
 * order (WEAVE_HGEMM_GROUP_M tile rows per group, default 16: runtime/env.c).
 *
 * Tensor maps are encoded on the host for every call (no cache: a call costs about a microsecond of
 * host time for the two encodes, and callers may change pointers freely).
 */
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gemm/hopper/cluster_launch.cuh"
#include "gemm/hopper/gemm_hopper.cuh"
#include "gemm/hopper/gemm_hopper_promote3.cuh"
#include "gemm/hopper/standalone_sink.cuh"

/* DT: A and B; OUT: C and bias (DT itself for 16-bit inputs); CL: 1 or 2 CTAs per cluster; PP: the
 * ping-pong schedule (gemm_hopper_pingpong.cuh; no stream-K) instead of the cooperative one; SC: the
 * roles' scale policy (scales.cuh; weave_hgemm_scale_none unless fp8 with per-row scales); PROMOTE:
 * fp8 accumulation promoted to fp32 (cooperative only); TBN: the cooperative tile's columns (256, or
 * WEAVE_HGEMM_BN_NARROW for fp8 with the tensor cores' accumulation). */
template <int DT, int OUT, int BCOL, int CL, bool PP, class SC, bool PROMOTE, bool SHARE_A = false,
          int TBN = WEAVE_HGEMM_BN>
__global__ void __launch_bounds__(WEAVE_HGEMM_THREADS, 1)
    weave_hgemm_kernel(const __grid_constant__ weave_hgemm_params_t p, const __grid_constant__ CUtensorMap c_map,
                       weave_hgemm_sink_args_t sa) {
  extern __shared__ unsigned char weave_hgemm_smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)weave_hgemm_smem_raw + 1023) & ~(uintptr_t)1023);
  typedef weave_hgemm_standalone_sink_t<OUT, CL, WEAVE_HGEMM_BM, TBN, SHARE_A> sink_t;
  sink_t sink;
  sink.a = sa;
  sink.cmap = &c_map;
  if constexpr (DT == WEAVE_FP8_E4M3 && std::is_same<SC, weave_hgemm_scale_none>::value) {
    /* per-tensor scales: folded into alpha, one product a thread instead of one a element */
    if (p.scales.mode == WEAVE_SCALE_TENSOR) sink.a.alpha *= __ldg(p.scales.a) * __ldg(p.scales.b);
  }
  if constexpr (PP) {
    const int seq_count = CL == 1 ? p.tiles_m * p.tiles_n : 2 * ((p.tiles_m + 1) / 2) * p.tiles_n;
    weave_hgemm_role_pingpong<sink_t, DT, BCOL, CL, SC>(p, smem, blockIdx.x, gridDim.x, seq_count, sink);
  } else {
    /* CL == 1: data-parallel tiles, then the stream-K tail if the launcher planned one */
    const int seq_count = CL == 1   ? p.sk.dp_tiles
                          : SHARE_A ? p.tiles_m * 2 * ((p.tiles_n + 1) / 2)
                                    : 2 * ((p.tiles_m + 1) / 2) * p.tiles_n;
    weave_hgemm_role_coop<sink_t, DT, BCOL, CL, CL == 1 && !PROMOTE && TBN == WEAVE_HGEMM_BN, SC, PROMOTE, SHARE_A,
                          TBN>(p, smem, blockIdx.x, gridDim.x, seq_count, sink);
  }
}

/* fp8 with promoted accumulation on three consumer warpgroups (gemm_hopper_promote3.cuh): 192 x 128
 * tiles, data-parallel; OUT and SC as above; CL == 2: clusters of two tiles of one tile row sharing
 * A (multicast). */
template <int OUT, class SC, int CL>
__global__ void __launch_bounds__(WEAVE_HGEMM_P3_THREADS, 1)
    weave_hgemm_kernel_p3(const __grid_constant__ weave_hgemm_params_t p, const __grid_constant__ CUtensorMap c_map,
                          weave_hgemm_sink_args_t sa) {
  extern __shared__ unsigned char weave_hgemm_smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)weave_hgemm_smem_raw + 1023) & ~(uintptr_t)1023);
  typedef weave_hgemm_standalone_sink_t<OUT, CL, WEAVE_HGEMM_P3_BM, WEAVE_HGEMM_P3_BN, true> sink_t;
  sink_t sink;
  sink.a = sa;
  sink.cmap = &c_map;
  if constexpr (std::is_same<SC, weave_hgemm_scale_none>::value) {
    if (p.scales.mode == WEAVE_SCALE_TENSOR) sink.a.alpha *= __ldg(p.scales.a) * __ldg(p.scales.b);
  }
  const int seq_count = CL == 1 ? p.tiles_m * p.tiles_n : p.tiles_m * 2 * ((p.tiles_n + 1) / 2);
  weave_hgemm_role_promote3<sink_t, SC, CL>(p, smem, blockIdx.x, gridDim.x, seq_count, sink);
}

/* ---------------------------------------------------------------------------------------------
 * Host
 * ------------------------------------------------------------------------------------------- */
static int weave_hgemm_fail(char *errmsg, size_t errlen, int code, const char *fmt, ...) {
  if (errmsg && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

typedef CUresult (*weave_hgemm_encode_tiled_fn_t)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                                  const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                                  const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                                  CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static weave_hgemm_encode_tiled_fn_t weave_hgemm_encode_fn(void) {
  static weave_hgemm_encode_tiled_fn_t fn = NULL; /* benign race: every thread stores the same value */
  if (!fn) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return NULL;
    fn = (weave_hgemm_encode_tiled_fn_t)p;
  }
  return fn;
}

/* 2-D tensor map: dims {inner, outer}, row pitch in bytes, box {box_inner, box_outer}, 128B swizzle */
static int weave_hgemm_encode(CUtensorMap *map, weave_dtype_t dtype, const void *ptr, uint64_t inner, uint64_t outer,
                              uint64_t pitch, uint32_t box_inner, uint32_t box_outer, char *errmsg, size_t errlen) {
  const CUtensorMapDataType dt = dtype == WEAVE_BF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                 : dtype == WEAVE_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                 : dtype == WEAVE_FP8_E4M3
                                     ? CU_TENSOR_MAP_DATA_TYPE_UINT8 /* bytes: TMA only moves them */
                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  weave_hgemm_encode_tiled_fn_t fn = weave_hgemm_encode_fn();
  if (!fn)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA,
                            "hopper gemm: cuTensorMapEncodeTiled not found in the driver");
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {pitch};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = fn(map, dt, 2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA,
                            "hopper gemm: cuTensorMapEncodeTiled failed (CUresult %d) for dims %llu x %llu "
                            "pitch %llu box %u x %u",
                            (int)r, (unsigned long long)inner, (unsigned long long)outer, (unsigned long long)pitch,
                            box_inner, box_outer);
  return WEAVE_SUCCESS;
}

extern "C" int weave_hgemm_encode_store_map(CUtensorMap *map, weave_dtype_t elem, void *base, uint64_t cols,
                                            uint64_t rows, uint64_t pitch, char *errmsg, size_t errlen) {
  if (!map || !base || (elem != WEAVE_BF16 && elem != WEAVE_FP16 && elem != WEAVE_FP32))
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: store map needs a map, a base and a bf16/fp16/fp32 element type");
  if (((uintptr_t)base & 15) || (pitch & 15) || cols == 0 || rows == 0)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: store map: base %p and pitch %llu must be 16-byte aligned, %llu x %llu "
                            "non-empty",
                            base, (unsigned long long)pitch, (unsigned long long)rows, (unsigned long long)cols);
  const uint32_t eb = elem == WEAVE_FP32 ? 4 : 2;
  return weave_hgemm_encode(map, elem, base, cols, rows, pitch, 128 / eb, WEAVE_HGEMM_EPI_ROWS, errmsg, errlen);
}

/* weave_hgemm_make_params for a role whose tiles are tile_m x tile_n: A's box is tile_m rows, the
 * tile counts follow; a COL B's maps have boxes of b_box rows, its half and its quarter (WEAVE_HGEMM_BN
 * for every role but the narrow fp8 tile, whose b_box is its width: the three-warpgroup role reads its
 * 128 columns through the half map). */
static int weave_hgemm_params_for(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, const void *A,
                                  const void *B, int tile_m, int tile_n, int b_box, weave_hgemm_params_t *p,
                                  char *errmsg, size_t errlen) {
  if (!p || !A || !B)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT, "hopper gemm: NULL params, A or B");
  if (M <= 0 || N <= 0 || K <= 0)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: M, N, K must be positive (got %d, %d, %d)", M, N, K);
  if (dtype != WEAVE_BF16 && dtype != WEAVE_FP16 && dtype != WEAVE_FP8_E4M3)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: dtype must be WEAVE_BF16, WEAVE_FP16 or WEAVE_FP8_E4M3 (got %d)", (int)dtype);
  if (b_layout != WEAVE_LAYOUT_ROW && b_layout != WEAVE_LAYOUT_COL)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: b_layout must be WEAVE_LAYOUT_ROW or WEAVE_LAYOUT_COL (got %d)",
                            (int)b_layout);
  if (((uintptr_t)A & 15) || ((uintptr_t)B & 15))
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: A and B must be 16-byte aligned (TMA)");
  const int fp8 = dtype == WEAVE_FP8_E4M3;
  if (fp8 && b_layout != WEAVE_LAYOUT_COL)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: fp8 needs B as [N, K] (WEAVE_LAYOUT_COL): the fp8 wgmma reads both "
                            "operands K-major");
  if (fp8 && K % 16)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: fp8 rows of A and B must be 16-byte aligned: K = %d is not a multiple of 16",
                            K);
  if (!fp8 && ((size_t)K * 2) % 16)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: rows of A must be 16-byte aligned: K*2 = %lld bytes is not a "
                            "multiple of 16 (K must be a multiple of 8)",
                            (long long)K * 2);
  if (b_layout == WEAVE_LAYOUT_ROW && ((size_t)N * 2) % 16)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: rows of B (ROW layout, [K, N]) must be 16-byte aligned: N*2 = %lld "
                            "bytes is not a multiple of 16 (N must be a multiple of 8)",
                            (long long)N * 2);
  memset(p, 0, sizeof(*p));
  /* a stage's rows are 128 bytes of K whatever the type: 64 16-bit or 128 fp8 elements */
  const uint32_t bk = (uint32_t)weave_hgemm_bk(dtype);
  const uint64_t krow = (uint64_t)K * (fp8 ? 1 : 2); /* bytes of a row of A (and of a COL B) */
  int r =
      weave_hgemm_encode(&p->tmap_a, dtype, A, (uint64_t)K, (uint64_t)M, krow, bk, (uint32_t)tile_m, errmsg, errlen);
  if (r) return r;
  if (b_layout == WEAVE_LAYOUT_COL) {
    r = weave_hgemm_encode(&p->tmap_b, dtype, B, (uint64_t)K, (uint64_t)N, krow, bk, (uint32_t)b_box, errmsg, errlen);
    if (!r)
      r = weave_hgemm_encode(&p->tmap_b_half, dtype, B, (uint64_t)K, (uint64_t)N, krow, bk, (uint32_t)b_box / 2, errmsg,
                             errlen);
    if (!r)
      r = weave_hgemm_encode(&p->tmap_b_quarter, dtype, B, (uint64_t)K, (uint64_t)N, krow, bk, (uint32_t)b_box / 4,
                             errmsg, errlen);
  } else {
    r = weave_hgemm_encode(&p->tmap_b, dtype, B, (uint64_t)N, (uint64_t)K, (uint64_t)N * 2, 64, WEAVE_HGEMM_BK, errmsg,
                           errlen);
  }
  if (r) return r;
  /* MN-major, 128B swizzle: 64-column (128-byte) slabs of BK rows, LBO = distance between slabs
   * (64 * BK * 2 bytes), SBO = distance between 8-row groups (1024 bytes). */
  const uint64_t lbo = 64 * WEAVE_HGEMM_BK * 2, sbo = 1024;
  p->b_desc_base = (1ull << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16);
  p->M = M;
  p->N = N;
  p->K = K;
  p->tiles_m = (M + tile_m - 1) / tile_m;
  p->tiles_n = (N + tile_n - 1) / tile_n;
  p->k_blocks = weave_hgemm_k_blocks(K, dtype);
  p->dtype = (int)dtype;
  p->b_layout = (int)b_layout;
  p->sk = weave_hgemm_sk_plan(p->tiles_m * p->tiles_n, 1, p->k_blocks, WEAVE_HGEMM_SK_OFF); /* all tiles whole */
  return WEAVE_SUCCESS;
}

extern "C" int weave_hgemm_make_params(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, const void *A,
                                       const void *B, weave_hgemm_params_t *p, char *errmsg, size_t errlen) {
  return weave_hgemm_params_for(M, N, K, dtype, b_layout, A, B, WEAVE_HGEMM_BM, WEAVE_HGEMM_BN, WEAVE_HGEMM_BN, p,
                                errmsg, errlen);
}

extern "C" int weave_hgemm_params_share_a(weave_hgemm_params_t *p, const void *A, int tile_m, char *errmsg,
                                          size_t errlen) {
  const weave_dtype_t dt = (weave_dtype_t)p->dtype;
  return weave_hgemm_encode(&p->tmap_a, dt, A, (uint64_t)p->K, (uint64_t)p->M,
                            (uint64_t)p->K * (dt == WEAVE_FP8_E4M3 ? 1 : 2), (uint32_t)weave_hgemm_bk(dt),
                            (uint32_t)tile_m / 2, errmsg, errlen);
}

typedef void (*weave_hgemm_kernel_fn_t)(const weave_hgemm_params_t, const CUtensorMap, weave_hgemm_sink_args_t);

/* launches KERN (THREADS threads, SMEM bytes of dynamic smem, CL CTAs a cluster) on `grid` blocks,
 * trimmed to whole clusters that run at once */
template <weave_hgemm_kernel_fn_t KERN, int THREADS, int SMEM, int CL>
static cudaError_t weave_hgemm_launch_kernel(const weave_hgemm_params_t &p, const CUtensorMap &c_map,
                                             const weave_hgemm_sink_args_t &sa, int grid, int dev,
                                             cudaStream_t stream) {
  const weave_hgemm_kernel_fn_t kern = KERN;
  /* once per device and kernel (ranks of one process may drive several devices) */
  static unsigned long long attr_set = 0; /* bit d: device d done (devices >= 64: every call) */
  static int max_clusters[64];            /* co-resident 2-CTA clusters, per device */
  unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  cudaError_t e;
  int mc = 0;
  if (!bit || !(__atomic_load_n(&attr_set, __ATOMIC_ACQUIRE) & bit)) {
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    if (e != cudaSuccess) return e;
    if (CL == 2) {
      e = weave_hgemm_max_pairs(kern, THREADS, SMEM, &mc);
      if (e != cudaSuccess) return e;
      if (bit) __atomic_store_n(&max_clusters[dev], mc, __ATOMIC_RELAXED);
    }
    __atomic_fetch_or(&attr_set, bit, __ATOMIC_RELEASE);
  } else if (CL == 2) {
    mc = __atomic_load_n(&max_clusters[dev], __ATOMIC_RELAXED);
  }
  if (CL == 2) {
    grid &= ~1;
    if (mc > 0 && grid > 2 * mc) grid = 2 * mc;
  }
  if (CL == 1) {
    kern<<<grid, THREADS, SMEM, stream>>>(p, c_map, sa);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr;
  weave_hgemm_launch_config(&cfg, &attr, grid, THREADS, SMEM, stream, true);
  return cudaLaunchKernelEx(&cfg, kern, p, c_map, sa);
}

/* the standalone kernel<DT, OUT, BCOL, CL, PP, SC, PROMOTE, SHARE_A, TBN> */
template <int DT, int OUT, int BCOL, int CL, bool PP, class SC = weave_hgemm_scale_none, bool PROMOTE = false,
          bool SHARE_A = false, int TBN = WEAVE_HGEMM_BN>
static cudaError_t weave_hgemm_launch_impl(const weave_hgemm_params_t &p, const CUtensorMap &c_map,
                                           const weave_hgemm_sink_args_t &sa, int grid, int dev, cudaStream_t stream) {
  return weave_hgemm_launch_kernel<weave_hgemm_kernel<DT, OUT, BCOL, CL, PP, SC, PROMOTE, SHARE_A, TBN>,
                                   WEAVE_HGEMM_THREADS, WEAVE_HGEMM_STANDALONE_SMEM_ALLOC_BYTES, CL>(p, c_map, sa, grid,
                                                                                                     dev, stream);
}

/* the three-warpgroup promoted fp8 kernel<OUT, SC, CL> */
template <int OUT, class SC>
static cudaError_t weave_hgemm_launch_p3(const weave_hgemm_params_t &p, const CUtensorMap &c_map,
                                         const weave_hgemm_sink_args_t &sa, int grid, int cl, int dev,
                                         cudaStream_t stream) {
  if (cl == 2)
    return weave_hgemm_launch_kernel<weave_hgemm_kernel_p3<OUT, SC, 2>, WEAVE_HGEMM_P3_THREADS,
                                     WEAVE_HGEMM_P3_SMEM_ALLOC_BYTES, 2>(p, c_map, sa, grid, dev, stream);
  return weave_hgemm_launch_kernel<weave_hgemm_kernel_p3<OUT, SC, 1>, WEAVE_HGEMM_P3_THREADS,
                                   WEAVE_HGEMM_P3_SMEM_ALLOC_BYTES, 1>(p, c_map, sa, grid, dev, stream);
}

/* Tuning knobs (documented, with their measurements, in docs/hopper_gemm.md), read once per process:
 * the TMA-store epilogue on by default (faster); 2-CTA clusters sharing A where tile columns pair up
 * (16-bit, fast fp8; faster, most where the grid is small), sharing B verified but off (no faster); the
 * stream-K tail by its cost model. */
typedef struct {
  int cluster, tma_store, group_m, streamk, pingpong, promote_wgs, fp8_narrow;
} weave_hgemm_knobs_t;

static weave_hgemm_knobs_t weave_hgemm_knobs(void) {
  static int read = 0;
  static weave_hgemm_knobs_t k; /* every field set from weave_hgemm_knob (runtime/env.c: the defaults) */
  if (!__atomic_load_n(&read, __ATOMIC_ACQUIRE)) { /* benign race: every thread reads the same values */
    k.cluster = weave_hgemm_knob("WEAVE_HGEMM_CLUSTER");
    k.tma_store = weave_hgemm_knob("WEAVE_HGEMM_TMA_STORE");
    k.group_m = weave_hgemm_knob("WEAVE_HGEMM_GROUP_M");
    k.streamk = weave_hgemm_knob("WEAVE_HGEMM_STREAMK");
    k.pingpong = weave_hgemm_knob("WEAVE_HGEMM_PINGPONG");
    k.promote_wgs = weave_hgemm_knob("WEAVE_HGEMM_PROMOTE_WGS");
    k.fp8_narrow = weave_hgemm_knob("WEAVE_HGEMM_FP8_NARROW");
    __atomic_store_n(&read, 1, __ATOMIC_RELEASE);
  }
  return k;
}

extern "C" int weave_hgemm_group_for(int blocks, int tiles_m, int tile_m, int tile_n) {
  return weave_hgemm_group_rows(weave_hgemm_knobs().group_m, blocks, tiles_m, tile_m, tile_n);
}

/* SMs of the current device, or 0 (no device) */
static int weave_hgemm_sm_count(void) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms;
}

/* Whether 2-CTA clusters pair tile columns, the two CTAs sharing A (each loads half of the tile's
 * rows and multicasts it; gemm_hopper_cooperative.cuh): WEAVE_HGEMM_CLUSTER 0 (default) for the
 * two-warpgroup cooperative kernel (16-bit inputs, fp8 with fast accumulation: fp8 == 0), and for the
 * three-warpgroup fp8 kernel and the fused fp8 roles (fp8 == 1) on grids that walk whole tile columns
 * (fewer than WEAVE_HGEMM_GROUP_MIN_BLOCKS blocks: weave_hgemm_group_rows); 3 wherever they can; only
 * where the tile columns pair up exactly and the grid holds a cluster. Sharing A halves A's reads,
 * which bound a small grid walking whole columns (ranks sharing a GPU: 1.2-1.7x faster), and on a
 * whole GPU gains up to 1.3x for 16-bit where the tile columns are few, 3% for fast fp8 at
 * 8192x8192x3584, nothing for the three-warpgroup kernel (docs/hopper_gemm.md). */
static int weave_hgemm_pairs_columns(int knob, int tiles_n, int grid, int fp8) {
  return grid >= 2 && tiles_n % 2 == 0 && (knob == 3 || (knob == 0 && (!fp8 || grid < WEAVE_HGEMM_GROUP_MIN_BLOCKS)));
}

extern "C" int weave_hgemm_shares_a(int tiles_n, int grid, int fp8) {
  return weave_hgemm_pairs_columns(weave_hgemm_knobs().cluster, tiles_n, grid, fp8);
}

/* The stream-K mode a call's request resolves to: WEAVE_HGEMM_SK_OFF or _ON as asked, else
 * WEAVE_HGEMM_STREAMK's (0 off, 1 the cost model: WEAVE_HGEMM_SK_AUTO, 2 on). */
static int weave_hgemm_sk_mode(int streamk) {
  if (streamk == WEAVE_HGEMM_SK_OFF || streamk == WEAVE_HGEMM_SK_ON) return streamk;
  const int knob = weave_hgemm_knobs().streamk;
  return knob == 0 ? WEAVE_HGEMM_SK_OFF : knob == 2 ? WEAVE_HGEMM_SK_ON : WEAVE_HGEMM_SK_AUTO;
}

/* Whether 2-CTA clusters pair tile rows, the two CTAs sharing B (WEAVE_HGEMM_CLUSTER=2): only where
 * the tile rows pair up exactly and the grid holds a cluster. */
static int weave_hgemm_pairs_rows(int knob, int tiles_m, int grid) {
  return knob == 2 && grid >= 2 && tiles_m % 2 == 0;
}

/* What a call of tiles_m x tiles_n tiles, kt k-blocks, runs with on a device of `sms` SMs: grid
 * (before trimming to the tile count), schedule (ping-pong or cooperative), clusters (1 none, 2 tile
 * rows sharing B, 3 tile columns sharing A), and the stream-K schedule it uses given a large enough
 * workspace (no stream-K with clusters or ping-pong). streamk / schedule: the call's requests; AUTO
 * follows WEAVE_HGEMM_STREAMK (0 off, 1 cost model, 2 on) and WEAVE_HGEMM_PINGPONG (0 off, 1 auto, 2
 * on); a ping-pong schedule or a stream-K tail asked for (by the call or the knobs) is kept, without
 * clusters sharing A. share_b: fp8's role has clusters sharing B (its narrow tile; 16-bit always has).
 * The launcher, the workspace query and the bench all ask here. */
static weave_hgemm_sk_t weave_hgemm_plan(int tiles_m, int tiles_n, int kt, int num_blocks, int sms, int streamk,
                                         int schedule, int fp8, int share_b, int *grid_out, int *cluster_out,
                                         int *pp_out) {
  const weave_hgemm_knobs_t k = weave_hgemm_knobs();
  int grid = num_blocks <= 0 || num_blocks > sms ? sms : num_blocks;
  int mode = weave_hgemm_sk_mode(streamk);
  const int pp_asked =
      schedule == WEAVE_HGEMM_SCHED_PINGPONG || (schedule != WEAVE_HGEMM_SCHED_COOP && k.pingpong == 2);
  const int pairs = !pp_asked && mode != WEAVE_HGEMM_SK_ON && weave_hgemm_pairs_columns(k.cluster, tiles_n, grid, 0);
  int cluster, pp;
  if (fp8) {
    /* ping-pong first (at small K it beat the cooperative schedule by 8-17%; no fp8 kernel pairs it),
     * then clusters sharing A on the cooperative schedule (the three-warpgroup kernel pairs its own
     * columns: weave_hgemm_role_cluster), or B where the role has them */
    pp = weave_hgemm_pick_pingpong(schedule, k.pingpong, tiles_m * tiles_n, grid, kt, mode, fp8);
    cluster = pp ? 1 : pairs ? 3 : share_b && weave_hgemm_pairs_rows(k.cluster, tiles_m, grid) ? 2 : 1;
  } else {
    /* clusters sharing B only where the tile rows pair up */
    cluster = pairs ? 3 : weave_hgemm_pairs_rows(k.cluster, tiles_m, grid) ? 2 : 1;
    pp = cluster == 3 ? 0
                      : weave_hgemm_pick_pingpong(schedule, k.pingpong, tiles_m * tiles_n, grid, kt,
                                                  cluster == 1 ? mode : WEAVE_HGEMM_SK_OFF, fp8);
  }
  if (cluster != 1 || pp) mode = WEAVE_HGEMM_SK_OFF;
  if (grid_out) *grid_out = grid;
  if (cluster_out) *cluster_out = cluster;
  if (pp_out) *pp_out = pp;
  return weave_hgemm_sk_plan(tiles_m * tiles_n, grid, kt, mode);
}

/* weave_hgemm_plan for a call's arguments: fp8 with promoted accumulation runs the cooperative
 * schedule without stream-K (its 192 accumulator registers leave none for the fixup), fp8 with fp32
 * output the cooperative schedule; else the call's requests. Fast fp8 planned cooperative runs the
 * narrow 128 x 192 tile, planned again over its columns without stream-K, where a->tile_n asks for it,
 * else where WEAVE_HGEMM_FP8_NARROW says (0 never, 1 where weave_hgemm_fp8_tile_n finds it cheaper, 2
 * always) unless a stream-K tail is asked for; with WEAVE_HGEMM_CLUSTER=2 in clusters sharing B where
 * its tile rows pair up (its odd column counts cannot share A). sms: the device's SM count;
 * *tile_n_out: the tile's columns. */
static int weave_hgemm_promotes(const weave_hgemm_args_t *a) {
  return a->dtype == WEAVE_FP8_E4M3 && !a->fp8_fast_accum;
}

static weave_hgemm_sk_t weave_hgemm_plan_args(const weave_hgemm_args_t *a, int sms, int *grid_out, int *cluster_out,
                                              int *pp_out, int *tile_n_out) {
  const weave_hgemm_knobs_t k = weave_hgemm_knobs();
  const int fp8 = a->dtype == WEAVE_FP8_E4M3, promote = weave_hgemm_promotes(a);
  const int schedule = promote || (fp8 && a->out_dtype == WEAVE_FP32) ? WEAVE_HGEMM_SCHED_COOP : a->schedule;
  const int tiles_m = (a->M + WEAVE_HGEMM_BM - 1) / WEAVE_HGEMM_BM, kt = weave_hgemm_k_blocks(a->K, a->dtype);
  int pp = 0, tile_n = WEAVE_HGEMM_BN, grid = 0, cluster = 1;
  weave_hgemm_sk_t sk =
      weave_hgemm_plan(tiles_m, (a->N + WEAVE_HGEMM_BN - 1) / WEAVE_HGEMM_BN, kt, a->num_blocks, sms,
                       promote ? WEAVE_HGEMM_SK_OFF : a->streamk, schedule, fp8, 0, &grid, &cluster, &pp);
  if (fp8 && !promote && !pp) {
    const int sk_asked = weave_hgemm_sk_mode(a->streamk) == WEAVE_HGEMM_SK_ON;
    const int narrow =
        a->tile_n
            ? a->tile_n == WEAVE_HGEMM_BN_NARROW
            : !sk_asked && (k.fp8_narrow == 2 ||
                            (k.fp8_narrow == 1 && weave_hgemm_fp8_tile_n(&sk, tiles_m, a->N) == WEAVE_HGEMM_BN_NARROW));
    if (narrow) {
      tile_n = WEAVE_HGEMM_BN_NARROW;
      sk = weave_hgemm_plan(tiles_m, (a->N + tile_n - 1) / tile_n, kt, a->num_blocks, sms, WEAVE_HGEMM_SK_OFF,
                            WEAVE_HGEMM_SCHED_COOP, fp8, 1, &grid, &cluster, &pp);
    }
  }
  if (grid_out) *grid_out = grid;
  if (cluster_out) *cluster_out = cluster;
  if (pp_out) *pp_out = pp;
  if (tile_n_out) *tile_n_out = tile_n;
  return sk;
}

/* The clusters a call of `a` runs with on `grid` blocks (1 none, 2 tile rows sharing B, 3 tile columns
 * sharing A), given the planned `cluster`: fp8 with promoted accumulation runs the three-warpgroup
 * kernel, which pairs its 128-column tiles by its own rule, or the two-warpgroup one, unclustered. */
static int weave_hgemm_role_cluster(const weave_hgemm_args_t *a, int cluster, int grid) {
  if (!weave_hgemm_promotes(a)) return cluster;
  if (weave_hgemm_knobs().promote_wgs != 3) return 1;
  return weave_hgemm_pairs_columns(weave_hgemm_knobs().cluster, (a->N + WEAVE_HGEMM_P3_BN - 1) / WEAVE_HGEMM_P3_BN,
                                   grid, 1)
             ? 3
             : 1;
}

extern "C" weave_hgemm_sk_t weave_hgemm_plan_on(const weave_hgemm_args_t *a, int sms, int *schedule, int *cluster,
                                                int *tile_n) {
  int pp = 0, grid = 0, cl = 1, tn = WEAVE_HGEMM_BN;
  weave_hgemm_sk_t sk = weave_hgemm_sk_plan(0, 0, 1, WEAVE_HGEMM_SK_OFF);
  if (a->M > 0 && a->N > 0 && a->K > 0 && sms > 0) {
    sk = weave_hgemm_plan_args(a, sms, &grid, &cl, &pp, &tn);
    cl = weave_hgemm_role_cluster(a, cl, grid);
  }
  if (schedule) *schedule = pp ? WEAVE_HGEMM_SCHED_PINGPONG : WEAVE_HGEMM_SCHED_COOP;
  if (cluster) *cluster = cl;
  if (tile_n) *tile_n = tn;
  return sk;
}

extern "C" int weave_hgemm_schedule(const weave_hgemm_args_t *a) {
  int schedule;
  weave_hgemm_plan_on(a, weave_hgemm_sm_count(), &schedule, NULL, NULL);
  return schedule;
}

extern "C" weave_hgemm_sk_t weave_hgemm_streamk_plan(const weave_hgemm_args_t *a) {
  return weave_hgemm_plan_on(a, weave_hgemm_sm_count(), NULL, NULL, NULL);
}

extern "C" size_t weave_hgemm_workspace_size(const weave_hgemm_args_t *a) {
  const weave_hgemm_sk_t sk = weave_hgemm_streamk_plan(a);
  return weave_hgemm_sk_workspace_bytes(&sk);
}

extern "C" size_t weave_hgemm_workspace_max(int num_blocks) {
  if (num_blocks <= 0) num_blocks = weave_hgemm_sm_count();
  return weave_hgemm_sk_workspace_max(num_blocks > 0 ? num_blocks : 132);
}

#if WEAVE_HGEMM_PROFILE
/* Diagnostic build only: writes the last launch's clock64() stamps (prof.cuh,
 * WEAVE_HGEMM_PROFILE) to `path` as raw int64 [blocks][4][tiles][events] and zeroes them. */
extern "C" int weave_hgemm_profile_save(const char *path) {
  static long long h[WEAVE_HGEMM_PROF_BLOCKS][WEAVE_HGEMM_PROF_WHO][WEAVE_HGEMM_PROF_TILES][WEAVE_HGEMM_PROF_EVENTS];
  if (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpyFromSymbol(h, weave_hgemm_prof, sizeof h) != cudaSuccess)
    return WEAVE_ERROR_CUDA;
  FILE *f = fopen(path, "wb");
  if (!f) return WEAVE_ERROR_INVALID_ARGUMENT;
  const size_t n = fwrite(h, sizeof h, 1, f);
  fclose(f);
  memset(h, 0, sizeof h);
  if (cudaMemcpyToSymbol(weave_hgemm_prof, h, sizeof h) != cudaSuccess) return WEAVE_ERROR_CUDA;
  return n == 1 ? WEAVE_SUCCESS : WEAVE_ERROR_INVALID_ARGUMENT;
}
#endif

extern "C" int weave_hgemm_launch(const weave_hgemm_args_t *a, cudaStream_t stream, char *errmsg, size_t errlen) {
  if (!a) return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT, "hopper gemm: NULL args");
  if (!a->C) return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT, "hopper gemm: NULL C");
  const int fp8 = a->dtype == WEAVE_FP8_E4M3;
  const weave_dtype_t out = fp8 ? a->out_dtype : a->dtype;
  if (fp8 && out != WEAVE_BF16 && out != WEAVE_FP16 && out != WEAVE_FP32)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: fp8 writes bf16, fp16 or fp32 (out_dtype %d)", (int)out);
  const size_t osz = out == WEAVE_FP32 ? 4 : 2;
  if (((uintptr_t)a->C % osz) || ((uintptr_t)a->bias % osz))
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: C and bias must be %zu-byte aligned", osz);
  const weave_hgemm_scales_t sc = fp8 ? a->scales : weave_hgemm_scales_t{WEAVE_SCALE_NONE, NULL, NULL};
  if ((unsigned)sc.mode > WEAVE_HGEMM_SCALE_ROW_A || (sc.mode != WEAVE_SCALE_NONE && (!sc.a || !sc.b)) ||
      ((uintptr_t)sc.a & 3) || ((uintptr_t)sc.b & 3))
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: scale mode %d needs 4-byte aligned scale_a and scale_b (got %p, %p)", sc.mode,
                            (const void *)sc.a, (const void *)sc.b);
  int dev = 0, major = 0, minor = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_NO_DEVICE, "hopper gemm: no usable CUDA device");
  }
  if (major != 9 || minor != 0)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_UNSUPPORTED_DEVICE,
                            "hopper gemm: needs an sm_90 device (device %d is sm_%d%d)", dev, major, minor);
  if (a->tile_n != 0 && a->tile_n != WEAVE_HGEMM_BN && a->tile_n != WEAVE_HGEMM_BN_NARROW)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                            "hopper gemm: tile_n must be 0 (the plan's choice), %d or %d (got %d)", WEAVE_HGEMM_BN,
                            WEAVE_HGEMM_BN_NARROW, a->tile_n);
  const weave_hgemm_knobs_t knobs = weave_hgemm_knobs();
  /* fp8 with promoted accumulation: three consumer warpgroups on 192 x 128 tiles (A's box 192 rows, B
   * read through its 128-row map), unless WEAVE_HGEMM_PROMOTE_WGS=2 */
  const bool promote = weave_hgemm_promotes(a);
  const bool p3 = promote && knobs.promote_wgs == 3;
  int grid, cluster, pp, tile_n; /* the plan reads only the arguments' numbers: checked below */
  const weave_hgemm_sk_t sk = weave_hgemm_plan_args(a, sms, &grid, &cluster, &pp, &tile_n);
  const bool narrow = tile_n == WEAVE_HGEMM_BN_NARROW;
  weave_hgemm_params_t p;
  int r = weave_hgemm_params_for(a->M, a->N, a->K, a->dtype, a->b_layout, a->A, a->B,
                                 p3 ? WEAVE_HGEMM_P3_BM : WEAVE_HGEMM_BM, p3 ? WEAVE_HGEMM_P3_BN : tile_n, tile_n, &p,
                                 errmsg, errlen);
  if (r) return r;
  p.scales = sc;
  weave_hgemm_sink_args_t sa;
  memset(&sa, 0, sizeof sa);
  sa.C = a->C;
  sa.bias = a->bias;
  sa.alpha = a->alpha;
  sa.M = p.M;
  sa.N = p.N;
  sa.tiles_m = p.tiles_m;
  sa.tiles_n = p.tiles_n;
  sa.pair_ok = (p.N % 2 == 0) && (((uintptr_t)a->C % (2 * osz)) == 0);
  CUtensorMap c_map;
  memset(&c_map, 0, sizeof c_map);
  if (knobs.tma_store && ((uintptr_t)a->C & 15) == 0 && ((size_t)p.N * osz) % 16 == 0) {
    r = weave_hgemm_encode_store_map(&c_map, out, a->C, (uint64_t)p.N, (uint64_t)p.M, (uint64_t)p.N * osz, errmsg,
                                     errlen);
    if (r) return r;
    sa.tma_store = 1;
  }
  /* the stream-K tail needs its workspace (else whole tiles: make_params' schedule); with fewer
   * tiles than blocks it spreads each tile's k-blocks over several blocks, so the grid is trimmed
   * to the tile count only without it */
  if (sk.sk_tiles && a->workspace && ((uintptr_t)a->workspace & 255) == 0 &&
      a->workspace_bytes >= weave_hgemm_sk_workspace_bytes(&sk)) {
    p.sk = sk;
    p.sk_counters = (unsigned *)a->workspace;
    p.sk_partials = (float *)((char *)a->workspace + WEAVE_HGEMM_SK_SLOTS_OFFSET);
  }
  cluster = weave_hgemm_role_cluster(a, cluster, grid);
  const bool share_a = cluster == 3;
  const int cl = cluster == 1 ? 1 : 2;
  if (share_a) {
    r = weave_hgemm_params_share_a(&p, a->A, p3 ? WEAVE_HGEMM_P3_BM : WEAVE_HGEMM_BM, errmsg, errlen);
    if (r) return r;
  }
  const int seqs = cl == 1 || share_a ? p.tiles_m * p.tiles_n : 2 * ((p.tiles_m + 1) / 2) * p.tiles_n;
  /* Whole tiles only (no stream-K tail): the fewest blocks that take the same rounds of tiles. Every
   * grid is trimmed to the tile count; the unclustered three-warpgroup fp8 kernel to that fewest
   * count (4096 x 8192 is 1408 tiles, 11 rounds on 132 blocks or on 128, and ran 0.7% faster on 128:
   * H100, docs/hopper_gemm.md), though not below WEAVE_HGEMM_GROUP_MIN_BLOCKS, where the tile order
   * and the clusters, chosen for the grid as asked, would change. */
  if (!p.sk.sk_tiles) {
    const int rounds = (seqs + grid - 1) / grid, fewest = (seqs + rounds - 1) / rounds;
    if (grid > seqs || (p3 && cl == 1 && fewest >= WEAVE_HGEMM_GROUP_MIN_BLOCKS)) grid = fewest;
  }
  sa.group_m =
      weave_hgemm_group_for(grid, p.tiles_m, p3 ? WEAVE_HGEMM_P3_BM : WEAVE_HGEMM_BM, p3 ? WEAVE_HGEMM_P3_BN : tile_n);
  sa.order = weave_grouped_order(p.tiles_m, p.tiles_n, sa.group_m);
  cudaError_t e;
#define WEAVE_HGEMM_LAUNCH(DT, BC)                                                                                    \
  (pp        ? (cl == 2 ? weave_hgemm_launch_impl<DT, DT, BC, 2, true>(p, c_map, sa, grid, dev, stream)               \
                        : weave_hgemm_launch_impl<DT, DT, BC, 1, true>(p, c_map, sa, grid, dev, stream))              \
   : share_a ? weave_hgemm_launch_impl<DT, DT, BC, 2, false, weave_hgemm_scale_none, false, true>(p, c_map, sa, grid, \
                                                                                                  dev, stream)        \
   : cl == 2 ? weave_hgemm_launch_impl<DT, DT, BC, 2, false>(p, c_map, sa, grid, dev, stream)                         \
             : weave_hgemm_launch_impl<DT, DT, BC, 1, false>(p, c_map, sa, grid, dev, stream))
  /* fp8: B [N, K]; clusters sharing A on the cooperative kernels only (not on ping-pong nor on the
   * two-warpgroup promoted one); per-row scales through the role's policy, the rest folded into
   * alpha by the kernel. fp32 output (bulk's partials) runs cooperative only (weave_hgemm_plan_args):
   * no ping-pong kernel is built for it. The narrow tile: fast accumulation, cooperative, also in
   * clusters sharing B (WEAVE_HGEMM_CLUSTER=2). */
#define WEAVE_HGEMM_LAUNCH_FP8_NARROW(OUT, SC)                                                                     \
  (share_a ? weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 2, false, SC, false, true, WEAVE_HGEMM_BN_NARROW>(    \
                 p, c_map, sa, grid, dev, stream)                                                                  \
   : cl == 2 ? weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 2, false, SC, false, false, WEAVE_HGEMM_BN_NARROW>( \
                   p, c_map, sa, grid, dev, stream)                                                                \
             : weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 1, false, SC, false, false, WEAVE_HGEMM_BN_NARROW>( \
                   p, c_map, sa, grid, dev, stream))
#define WEAVE_HGEMM_LAUNCH_FP8_COOP(OUT, SC)                                                                         \
  (p3        ? weave_hgemm_launch_p3<OUT, SC>(p, c_map, sa, grid, cl, dev, stream)                                   \
   : promote ? weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 1, false, SC, true>(p, c_map, sa, grid, dev, stream)  \
   : narrow  ? WEAVE_HGEMM_LAUNCH_FP8_NARROW(OUT, SC)                                                                \
   : share_a                                                                                                         \
       ? weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 2, false, SC, false, true>(p, c_map, sa, grid, dev, stream) \
       : weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 1, false, SC>(p, c_map, sa, grid, dev, stream))
#define WEAVE_HGEMM_LAUNCH_FP8(OUT, SC)                                                               \
  (pp ? weave_hgemm_launch_impl<WEAVE_FP8_E4M3, OUT, 1, 1, true, SC>(p, c_map, sa, grid, dev, stream) \
      : WEAVE_HGEMM_LAUNCH_FP8_COOP(OUT, SC))
  if (fp8) {
    const bool row = sc.mode == WEAVE_SCALE_ROW || sc.mode == WEAVE_HGEMM_SCALE_ROW_A; /* scales per row of A */
    if (out == WEAVE_FP32)
      e = row ? WEAVE_HGEMM_LAUNCH_FP8_COOP(WEAVE_FP32, weave_hgemm_scale_fp8)
              : WEAVE_HGEMM_LAUNCH_FP8_COOP(WEAVE_FP32, weave_hgemm_scale_none);
    else if (out == WEAVE_FP16)
      e = row ? WEAVE_HGEMM_LAUNCH_FP8(WEAVE_FP16, weave_hgemm_scale_fp8)
              : WEAVE_HGEMM_LAUNCH_FP8(WEAVE_FP16, weave_hgemm_scale_none);
    else
      e = row ? WEAVE_HGEMM_LAUNCH_FP8(WEAVE_BF16, weave_hgemm_scale_fp8)
              : WEAVE_HGEMM_LAUNCH_FP8(WEAVE_BF16, weave_hgemm_scale_none);
  } else if (a->dtype == WEAVE_BF16) {
    e = a->b_layout == WEAVE_LAYOUT_COL ? WEAVE_HGEMM_LAUNCH(WEAVE_BF16, 1) : WEAVE_HGEMM_LAUNCH(WEAVE_BF16, 0);
  } else {
    e = a->b_layout == WEAVE_LAYOUT_COL ? WEAVE_HGEMM_LAUNCH(WEAVE_FP16, 1) : WEAVE_HGEMM_LAUNCH(WEAVE_FP16, 0);
  }
#undef WEAVE_HGEMM_LAUNCH
#undef WEAVE_HGEMM_LAUNCH_FP8
#undef WEAVE_HGEMM_LAUNCH_FP8_COOP
#undef WEAVE_HGEMM_LAUNCH_FP8_NARROW
  if (e != cudaSuccess)
    return weave_hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA, "hopper gemm: launch failed: %s", cudaGetErrorString(e));
  return WEAVE_SUCCESS;
}
