/*
 * The standalone Hopper GEMM's sink: alpha and bias, then C through the TMA-store epilogue
 * (epilogue.cuh) or register stores. Shared by the standalone kernel (gemm_hopper.cu) and kernels
 * that compute a plain GEMM tile set inside a larger protocol (kernels/ag_gemm.cu derives from it).
 */
#ifndef WEAVE_HGEMM_STANDALONE_SINK_CUH
#define WEAVE_HGEMM_STANDALONE_SINK_CUH

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/schedule.h"
#include "gemm/hopper/gemm_hopper.h"

typedef struct {
  void *C;
  const void *bias;
  float alpha;
  int M, N;
  int tiles_m, tiles_n;
  int group_m;
  weave_grouped_order_t order; /* tiles_m x tiles_n in groups of group_m rows: the launcher sets it up */
  int pair_ok;                 /* N even and C 4-byte aligned: store pairs */
  int tma_store;               /* C 16-byte aligned and N*2 % 16 == 0: smem + TMA-store epilogue */
} weave_hgemm_sink_args_t;

/* OUT: the type of C and bias (WEAVE_BF16, WEAVE_FP16; WEAVE_FP32 for fp8 inputs only); TBM x TBN:
 * the role's tile (the three-warpgroup fp8 role's is 192 x 128); CL == 2: the two CTAs of a cluster
 * take a pair of tiles, two tile rows of one column (they share B) or, PAIR_N, two tile columns of
 * one row (they share A) */
template <int OUT, int CL, int TBM = WEAVE_HGEMM_BM, int TBN = WEAVE_HGEMM_BN, bool PAIR_N = false>
struct weave_hgemm_standalone_sink_t {
  static constexpr bool kWeaveTmaStore = true;
  static constexpr bool kWeaveTmaPublish = false; /* nothing waits for a tile: no completion wait */
  static constexpr bool kWeaveNoEnd = true;       /* and nothing happens at its end */
  typedef typename std::conditional<OUT == WEAVE_BF16, __nv_bfloat16,
                                    typename std::conditional<OUT == WEAVE_FP16, __half, float>::type>::type TmaElem;
  weave_hgemm_sink_args_t a;
  const CUtensorMap *cmap; /* in kernel-parameter space */

  /* CL == 2: tiles come in pairs (2q, 2q + 1) = tile rows (2i, 2i + 1) of one tile column, or
   * (PAIR_N) tile columns (2j, 2j + 1) of one tile row */
  __device__ __forceinline__ void coords(int seq, int *row0, int *col0) {
    int tm, tn;
    if (CL == 1)
      weave_grouped_order_coords(&a.order, seq, &tm, &tn);
    else
      weave_paired_tile_coords(seq, a.tiles_m, a.tiles_n, a.group_m, PAIR_N, &tm, &tn);
    *row0 = tm * TBM;
    *col0 = tn * TBN;
  }
  __device__ __forceinline__ void begin(int) {}
  __device__ __forceinline__ void end(int) {}
  __device__ __forceinline__ bool tma_store() const { return a.tma_store != 0; }
  __device__ __forceinline__ bool tma_issue() const { return true; }
  __device__ __forceinline__ const CUtensorMap *c_map() const { return cmap; }
  __device__ __forceinline__ int tma_row(int row0) const { return row0; }
  __device__ __forceinline__ float bias_at(int col) {
    if (OUT == WEAVE_BF16) return __bfloat162float(((const __nv_bfloat16 *)a.bias)[col]);
    if (OUT == WEAVE_FP16) return __half2float(((const __half *)a.bias)[col]);
    return ((const float *)a.bias)[col];
  }
  __device__ __forceinline__ bool epi_bias() const { return a.bias != NULL; }
  template <bool BIAS>
  __device__ __forceinline__ void epi(int col, float &v0, float &v1) {
    v0 *= a.alpha;
    v1 *= a.alpha;
    if (BIAS) {
      if (col < a.N) v0 += bias_at(col);
      if (col + 1 < a.N) v1 += bias_at(col + 1);
    }
  }
  __device__ __forceinline__ void store2(int row, int col, float v0, float v1) {
    v0 *= a.alpha;
    v1 *= a.alpha;
    const bool two = col + 1 < a.N;
    if (a.bias) {
      v0 += bias_at(col);
      if (two) v1 += bias_at(col + 1);
    }
    const size_t off = (size_t)row * (size_t)a.N + (size_t)col;
    if (OUT == WEAVE_FP32) {
      float *c = (float *)a.C + off;
      if (a.pair_ok) {
        *(float2 *)c = make_float2(v0, v1);
      } else {
        c[0] = v0;
        if (two) c[1] = v1;
      }
    } else if (OUT == WEAVE_BF16) {
      __nv_bfloat16 *c = (__nv_bfloat16 *)a.C + off;
      if (a.pair_ok) {
        *(__nv_bfloat162 *)c = __floats2bfloat162_rn(v0, v1);
      } else {
        c[0] = __float2bfloat16_rn(v0);
        if (two) c[1] = __float2bfloat16_rn(v1);
      }
    } else {
      __half *c = (__half *)a.C + off;
      if (a.pair_ok) {
        *(__half2 *)c = __floats2half2_rn(v0, v1);
      } else {
        c[0] = __float2half_rn(v0);
        if (two) c[1] = __float2half_rn(v1);
      }
    }
  }
};

#endif
