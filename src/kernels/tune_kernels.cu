/*
 * Fills and a delay: random inputs for the online tuner's timed calls (plan/autotune.c), a float
 * vector set to one value (given, or read from a device scalar: AllGather + GEMM's fp8 baseline), and
 * the delay that makes one strategy slower on purpose (WEAVE_TEST_DELAY).
 */
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/kernels.h"

/* A counter-based hash (the finalizer of MurmurHash3): the same value for (seed, index) in any launch. */
__device__ static uint32_t weave_hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

/* Values in [-1, 1): 16-bit types get uniform values, fp8 e4m3 random signs, exponents 2^-7..2^0 and
 * mantissas (never NaN: exponent field <= 7), fp32 uniform. Random data, since the tensor cores draw
 * less power on zeros and would clock higher than on real inputs. */
__global__ void weave_fill_random_kernel(void *p, size_t count, int dtype, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = weave_hash32((uint32_t)i * 0x9e3779b9u ^ weave_hash32(seed + (uint32_t)(i >> 32)));
    float u = (float)(h >> 8) * (1.0f / 8388608.0f) - 1.0f; /* [-1, 1) */
    switch (dtype) {
      case WEAVE_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16(u); break;
      case WEAVE_FP16: ((__half *)p)[i] = __float2half(u); break;
      case WEAVE_FP32: ((float *)p)[i] = u; break;
      default: ((uint8_t *)p)[i] = (uint8_t)(h & 0xbfu); break; /* e4m3: sign, exponent <= 7, mantissa */
    }
  }
}

/* p[0..count) = v, or *from where from is not NULL (a device scalar) */
__global__ void weave_fill_value_kernel(float *p, size_t count, float v, const float *from) {
  if (from) v = *from;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v;
}

extern "C" int weave_launch_fill_random(void *p, size_t count, weave_dtype_t dtype, uint32_t seed,
                                        struct CUstream_st *stream) {
  if (!count) return 0;
  const size_t want = (count + 255) / 256;
  weave_fill_random_kernel<<<(unsigned)(want < 8192 ? want : 8192), 256, 0, (cudaStream_t)stream>>>(p, count, dtype,
                                                                                                    seed);
  return (int)cudaGetLastError();
}

static int fill_value(float *p, size_t count, float v, const float *from, struct CUstream_st *stream) {
  if (!count) return 0;
  const size_t want = (count + 255) / 256;
  weave_fill_value_kernel<<<(unsigned)(want < 8192 ? want : 8192), 256, 0, (cudaStream_t)stream>>>(p, count, v, from);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_fill_value(float *p, size_t count, float v, struct CUstream_st *stream) {
  return fill_value(p, count, v, NULL, stream);
}

extern "C" int weave_launch_fill_from(float *p, size_t count, const float *from, struct CUstream_st *stream) {
  return fill_value(p, count, 0.f, from, stream);
}

/* One thread sleeping on the global timer until `ns` have passed since it started. */
__global__ void weave_delay_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

extern "C" int weave_launch_delay(unsigned us, struct CUstream_st *stream) {
  if (!us) return 0;
  weave_delay_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)us * 1000ull);
  return (int)cudaGetLastError();
}
