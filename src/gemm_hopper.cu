/*
 * weave Hopper GEMM: the standalone persistent kernel and its C launcher.
 *
 * The kernel is the GEMM role of gemm_hopper.cuh with a sink that applies alpha and bias and stores
 * bf16/fp16 pairs straight from the registers (4-byte stores; scalar stores when N is odd or C is not
 * 4-byte aligned). Grid = num_blocks persistent CTAs (<= SM count), CTA b takes tiles b, b + grid, ...
 * in grouped order (WEAVE_HGEMM_GROUP_M tile rows per group).
 *
 * Tensor maps are encoded on the host for every call (no cache: a call costs about a microsecond of
 * host time for the two encodes, and callers may change pointers freely).
 */
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gemm_hopper.cuh"

/* ---------------------------------------------------------------------------------------------
 * Standalone sink
 * ------------------------------------------------------------------------------------------- */
template <int DT>
struct WeaveHgemmStandaloneSink {
  void *C;
  const void *bias;
  float alpha;
  int M, N;
  int tiles_m, tiles_n;
  int group_m;
  int pair_ok; /* N even and C 4-byte aligned: store pairs */

  __device__ __forceinline__ void coords(int seq, int *tm, int *tn) {
    weave_hgemm_grouped_coords(seq, tiles_m, tiles_n, group_m, tm, tn);
  }
  __device__ __forceinline__ void begin(int) {}
  __device__ __forceinline__ void end(int) {}
  __device__ __forceinline__ float bias_at(int col) {
    if (DT == WEAVE_BF16) return __bfloat162float(((const __nv_bfloat16 *)bias)[col]);
    return __half2float(((const __half *)bias)[col]);
  }
  __device__ __forceinline__ void store2(int row, int col, float v0, float v1) {
    v0 *= alpha;
    v1 *= alpha;
    const bool two = col + 1 < N;
    if (bias) {
      v0 += bias_at(col);
      if (two) v1 += bias_at(col + 1);
    }
    const size_t off = (size_t)row * (size_t)N + (size_t)col;
    if (DT == WEAVE_BF16) {
      __nv_bfloat16 *c = (__nv_bfloat16 *)C + off;
      if (pair_ok) {
        *(__nv_bfloat162 *)c = __floats2bfloat162_rn(v0, v1);
      } else {
        c[0] = __float2bfloat16_rn(v0);
        if (two) c[1] = __float2bfloat16_rn(v1);
      }
    } else {
      __half *c = (__half *)C + off;
      if (pair_ok) {
        *(__half2 *)c = __floats2half2_rn(v0, v1);
      } else {
        c[0] = __float2half_rn(v0);
        if (two) c[1] = __float2half_rn(v1);
      }
    }
  }
};

template <int DT, int BCOL>
__global__ void __launch_bounds__(WEAVE_HGEMM_THREADS, 1)
    weave_hopper_gemm_kernel(const __grid_constant__ WeaveHopperGemmParams p,
                             WeaveHgemmStandaloneSink<DT> sink) {
  extern __shared__ unsigned char weave_hgemm_smem_raw[];
  unsigned char *smem =
      (unsigned char *)(((uintptr_t)weave_hgemm_smem_raw + 1023) & ~(uintptr_t)1023);
  weave_hopper_gemm_role_t<WeaveHgemmStandaloneSink<DT>, DT, BCOL>(
      p, smem, blockIdx.x, gridDim.x, p.tiles_m * p.tiles_n, sink);
}

/* ---------------------------------------------------------------------------------------------
 * Host
 * ------------------------------------------------------------------------------------------- */
static int hgemm_fail(char *errmsg, size_t errlen, int code, const char *fmt, ...) {
  if (errmsg && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

typedef CUresult (*weave_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                          const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                          const cuuint32_t *, CUtensorMapInterleave,
                                          CUtensorMapSwizzle, CUtensorMapL2promotion,
                                          CUtensorMapFloatOOBfill);

static weave_encode_tiled_fn hgemm_encode_fn(void) {
  static weave_encode_tiled_fn fn = NULL; /* benign race: every thread stores the same value */
  if (!fn) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return NULL;
    fn = (weave_encode_tiled_fn)p;
  }
  return fn;
}

/* 2-D tensor map: dims {inner, outer}, row pitch in bytes, box {box_inner, box_outer}, 128B swizzle */
static int hgemm_encode(CUtensorMap *map, weave_dtype_t dtype, const void *ptr, uint64_t inner,
                        uint64_t outer, uint64_t pitch, uint32_t box_inner, uint32_t box_outer,
                        char *errmsg, size_t errlen) {
  weave_encode_tiled_fn fn = hgemm_encode_fn();
  if (!fn)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA,
                      "hopper gemm: cuTensorMapEncodeTiled not found in the driver");
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {pitch};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t estr[2] = {1, 1};
  CUresult r = fn(map, dtype == WEAVE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                  2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA,
                      "hopper gemm: cuTensorMapEncodeTiled failed (CUresult %d) for dims %llu x %llu "
                      "pitch %llu box %u x %u",
                      (int)r, (unsigned long long)inner, (unsigned long long)outer,
                      (unsigned long long)pitch, box_inner, box_outer);
  return WEAVE_SUCCESS;
}

extern "C" int weave_hopper_gemm_make_params(int M, int N, int K, weave_dtype_t dtype,
                                             weave_layout_t b_layout, const void *A, const void *B,
                                             WeaveHopperGemmParams *p, char *errmsg, size_t errlen) {
  if (!p || !A || !B)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: NULL params, A or B");
  if (M <= 0 || N <= 0 || K <= 0)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: M, N, K must be positive (got %d, %d, %d)", M, N, K);
  if (dtype != WEAVE_BF16 && dtype != WEAVE_FP16)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: dtype must be WEAVE_BF16 or WEAVE_FP16 (got %d)", (int)dtype);
  if (b_layout != WEAVE_LAYOUT_ROW && b_layout != WEAVE_LAYOUT_COL)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: b_layout must be WEAVE_LAYOUT_ROW or WEAVE_LAYOUT_COL (got %d)",
                      (int)b_layout);
  if (((uintptr_t)A & 15) || ((uintptr_t)B & 15))
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: A and B must be 16-byte aligned (TMA)");
  if (((size_t)K * 2) % 16)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: rows of A must be 16-byte aligned: K*2 = %lld bytes is not a "
                      "multiple of 16 (K must be a multiple of 8)",
                      (long long)K * 2);
  if (b_layout == WEAVE_LAYOUT_ROW && ((size_t)N * 2) % 16)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: rows of B (ROW layout, [K, N]) must be 16-byte aligned: N*2 = %lld "
                      "bytes is not a multiple of 16 (N must be a multiple of 8)",
                      (long long)N * 2);
  memset(p, 0, sizeof(*p));
  int r = hgemm_encode(&p->tmap_a, dtype, A, (uint64_t)K, (uint64_t)M, (uint64_t)K * 2,
                       WEAVE_HGEMM_BK, WEAVE_HGEMM_BM, errmsg, errlen);
  if (r) return r;
  if (b_layout == WEAVE_LAYOUT_COL) {
    r = hgemm_encode(&p->tmap_b, dtype, B, (uint64_t)K, (uint64_t)N, (uint64_t)K * 2,
                     WEAVE_HGEMM_BK, WEAVE_HGEMM_BN, errmsg, errlen);
  } else {
    r = hgemm_encode(&p->tmap_b, dtype, B, (uint64_t)N, (uint64_t)K, (uint64_t)N * 2, 64,
                     WEAVE_HGEMM_BK, errmsg, errlen);
  }
  if (r) return r;
  /* MN-major, 128B swizzle: 64-column (128-byte) slabs of BK rows, LBO = distance between slabs
   * (64 * BK * 2 bytes), SBO = distance between 8-row groups (1024 bytes). */
  uint64_t lbo = 64 * WEAVE_HGEMM_BK * 2, sbo = 1024;
  if (getenv("WEAVE_HGEMM_DEBUG_SWAP_LBO_SBO")) { uint64_t t = lbo; lbo = sbo; sbo = t; }
  p->b_desc_base = (1ull << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16);
  p->M = M;
  p->N = N;
  p->K = K;
  p->tiles_m = (M + WEAVE_HGEMM_BM - 1) / WEAVE_HGEMM_BM;
  p->tiles_n = (N + WEAVE_HGEMM_BN - 1) / WEAVE_HGEMM_BN;
  p->k_blocks = (K + WEAVE_HGEMM_BK - 1) / WEAVE_HGEMM_BK;
  p->dtype = (int)dtype;
  p->b_layout = (int)b_layout;
  return WEAVE_SUCCESS;
}

template <int DT, int BCOL>
static cudaError_t hgemm_launch_t(const WeaveHopperGemmParams &p, const weave_hopper_gemm_args_t *a,
                                  int grid, cudaStream_t stream) {
  WeaveHgemmStandaloneSink<DT> sink;
  sink.C = a->C;
  sink.bias = a->bias;
  sink.alpha = a->alpha;
  sink.M = p.M;
  sink.N = p.N;
  sink.tiles_m = p.tiles_m;
  sink.tiles_n = p.tiles_n;
  sink.group_m = WEAVE_HGEMM_GROUP_M;
  sink.pair_ok = (p.N % 2 == 0) && (((uintptr_t)a->C & 3) == 0);
  /* once per device and instantiation (ranks of one process may drive several devices) */
  static unsigned long long attr_set = 0; /* bit d: device d done (devices >= 64: every call) */
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  unsigned long long bit = dev < 64 ? 1ull << dev : 0;
  if (!bit || !(__atomic_load_n(&attr_set, __ATOMIC_ACQUIRE) & bit)) {
    e = cudaFuncSetAttribute(weave_hopper_gemm_kernel<DT, BCOL>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             WEAVE_HGEMM_SMEM_ALLOC_BYTES);
    if (e != cudaSuccess) return e;
    __atomic_fetch_or(&attr_set, bit, __ATOMIC_RELEASE);
  }
  weave_hopper_gemm_kernel<DT, BCOL><<<grid, WEAVE_HGEMM_THREADS, WEAVE_HGEMM_SMEM_ALLOC_BYTES, stream>>>(
      p, sink);
  return cudaGetLastError();
}

extern "C" int weave_hopper_gemm_launch(const weave_hopper_gemm_args_t *a, cudaStream_t stream,
                                        char *errmsg, size_t errlen) {
  if (!a) return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT, "hopper gemm: NULL args");
  if (!a->C)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT, "hopper gemm: NULL C");
  if (((uintptr_t)a->C & 1) || ((uintptr_t)a->bias & 1))
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_INVALID_ARGUMENT,
                      "hopper gemm: C and bias must be 2-byte aligned");
  int dev = 0, major = 0, minor = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    cudaGetLastError();
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_NO_DEVICE, "hopper gemm: no usable CUDA device");
  }
  if (major != 9 || minor != 0)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_UNSUPPORTED_DEVICE,
                      "hopper gemm: needs an sm_90 device (device %d is sm_%d%d)", dev, major, minor);
  WeaveHopperGemmParams p;
  int r = weave_hopper_gemm_make_params(a->M, a->N, a->K, a->dtype, a->b_layout, a->A, a->B, &p,
                                        errmsg, errlen);
  if (r) return r;
  int tiles = p.tiles_m * p.tiles_n;
  int grid = a->num_blocks <= 0 ? sms : a->num_blocks;
  if (grid > sms) grid = sms;
  if (grid > tiles) grid = tiles;
  cudaError_t e;
  if (a->dtype == WEAVE_BF16)
    e = a->b_layout == WEAVE_LAYOUT_COL ? hgemm_launch_t<WEAVE_BF16, 1>(p, a, grid, stream)
                                        : hgemm_launch_t<WEAVE_BF16, 0>(p, a, grid, stream);
  else
    e = a->b_layout == WEAVE_LAYOUT_COL ? hgemm_launch_t<WEAVE_FP16, 1>(p, a, grid, stream)
                                        : hgemm_launch_t<WEAVE_FP16, 0>(p, a, grid, stream);
  if (e != cudaSuccess)
    return hgemm_fail(errmsg, errlen, WEAVE_ERROR_CUDA, "hopper gemm: launch failed: %s",
                      cudaGetErrorString(e));
  return WEAVE_SUCCESS;
}
