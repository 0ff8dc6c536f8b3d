/* Element conversions and vector loads / stores of the GEMM + ReduceScatter kernels (one
 * translation unit includes it: kernels/gemm_rs.cu). */
#ifndef WEAVE_KERNELS_GEMM_RS_CONVERT_CUH
#define WEAVE_KERNELS_GEMM_RS_CONVERT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------------
 * element conversions
 * ---------------------------------------------------------------------------------------------- */
__device__ __forceinline__ float weave_to_f(float v) { return v; }
__device__ __forceinline__ float weave_to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float weave_to_f(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T weave_from_f(float v);
template <>
__device__ __forceinline__ float weave_from_f<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 weave_from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half weave_from_f<__half>(float v) {
  return __float2half_rn(v);
}

__device__ __forceinline__ float weave_bias_at(const void *bias, int dtype, int c) {
  if (!bias) return 0.f;
  if (dtype == WEAVE_FP32) return ((const float *)bias)[c];
  if (dtype == WEAVE_FP16) return __half2float(((const __half *)bias)[c]);
  return __bfloat162float(((const __nv_bfloat16 *)bias)[c]);
}

/* Two adjacent elements; vector store when both exist and the pair is aligned (even column, even
 * N). */
template <typename T>
__device__ __forceinline__ void weave_store_pair(T *dst, float v0, float v1, bool two, bool vec) {
  if (two && vec) {
    if constexpr (sizeof(T) == 4) {
      *(float2 *)dst = make_float2(v0, v1);
    } else {
      T pr[2] = {weave_from_f<T>(v0), weave_from_f<T>(v1)};
      *(uint32_t *)dst = *(uint32_t *)pr;
    }
  } else {
    dst[0] = weave_from_f<T>(v0);
    if (two) dst[1] = weave_from_f<T>(v1);
  }
}

/* Eight consecutive elements as floats, 16-byte aligned (32 for fp32), cache-global loads: the data
 * was written by other SMs or GPUs and is read once. */
template <typename T>
__device__ __forceinline__ void weave_load8_cg(const T *p, float *v) {
  if constexpr (sizeof(T) == 4) {
    float4 a = __ldcg((const float4 *)p), b = __ldcg((const float4 *)p + 1);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
  } else {
    uint4 u = __ldcg((const uint4 *)p);
    const T *e = (const T *)&u;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = weave_to_f(e[i]);
  }
}
template <typename T>
__device__ __forceinline__ void weave_store8(T *p, const float *v) {
  if constexpr (sizeof(T) == 4) {
    ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 u;
    T *e = (T *)&u;
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = weave_from_f<T>(v[i]);
    *(uint4 *)p = u;
  }
}

#endif
