/*
 * GEMM + ReduceScatter kernels.
 *
 * Fused (one persistent kernel per rank, blocks specialised by blockIdx):
 *   GEMM blocks (blockIdx < gemm_blocks) walk this rank's tile sequence (owners rotated, see
 *   schedule.h). For a tile of owner o they
 *     1. once per owner and call, wait until o has finished reading the previous call's data
 *        (o pushed done[o] = epoch-1 into this rank's control words) -- the credit that lets slots
 *        be reused without a reset;
 *     2. write the partial tile straight into o's memory:
 *          deterministic: o's slot for this source rank (slot dtype): TMA stores from a swizzled
 *                         smem staging buffer (Hopper role, rows of 16-byte multiples), waited for
 *                         with cp.async.bulk.wait_group 0 + fence.proxy.async; else plain stores;
 *          atomic:        o's fp32 accumulator, red.relaxed.sys.add (v2 where aligned);
 *     3. block barrier, then one thread publishes with a release atomic at system scope:
 *          deterministic: flags_o[rank][tile] <- epoch      (atom.release.sys.exch)
 *          atomic:        count_o[tile] += 1                (red.release.sys.add; world per call)
 *   Communication blocks (the rest) own this rank's tiles (in the Hopper kernel only warpgroups 1-2
 *   of such a block work, under the GEMM blocks' register split: see weave_hgemm_regs_restore):
 *   for each, one thread per source polls the flag with ld.acquire.sys (bounded), a barrier that ORs
 *   the failures, then the threads sum the world partials in
 *   rank order 0..world-1 in fp32 (bitwise reproducible), applies alpha and bias once, casts and
 *   writes C_out. Atomic mode waits for count == world*epoch, reads, writes and re-zeroes the
 *   accumulator tile for the next call.
 *   Finally every block arrives on a counter; the last one publishes done[rank] = epoch into every
 *   peer (release, sys): the credit of step 1 for the next call.
 *   Progress: every block that waits is co-resident (the plan checks occupancy and divides the GPU
 *   between the ranks that share it); every wait is bounded by the team's timeout and the first
 *   expiry is recorded in the heap header; later waits give up at once, so the kernel always ends.
 *
 * Bulk (strategy 2 and the baseline's one-GPU path): wait_done (one block: peers finished reading
 *   the previous call's partials) -> GEMM into this rank's partial P (or cuBLASLt) -> ready_barrier
 *   (one block: release ready[rank] = epoch to every peer, wait for all) -> reduce_scatter (no waits:
 *   pull this rank's rows from every P in rank order, sum in fp32, write C_out; the last block
 *   publishes done). Only one-block kernels spin, so the GEMMs of ranks sharing a GPU always find SMs.
 *
 * This file holds the host launchers (occupancy, template dispatch); the device side is in
 * gemm_rs_roles.cuh (owner's reduction, roles, kernels), gemm_rs_sinks.cuh (sinks, owner walk) and
 * gemm_rs_convert.cuh (element conversions).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gemm/hopper/cluster_launch.cuh"
#include "kernels/gemm_rs_roles.cuh"

/* ------------------------------------------------------------------------------------------------
 * launchers
 * ---------------------------------------------------------------------------------------------- */
static size_t weave_gemm_smem(int dtype, bool hopper) {
  /* the fused Hopper kernel always has room for the TMA-store staging (one block per SM either way) */
  if (hopper) return (size_t)WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES;
  return dtype == WEAVE_FP32 ? (size_t)2 * WEAVE_SIMT_BK * WEAVE_MMA_BM * sizeof(float) : (size_t)WEAVE_MMA_SMEM;
}

template <typename K>
static int weave_prepare(K kernel, size_t smem) {
  return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename K>
static int weave_occupancy(K kernel, int threads, size_t smem) {
  int n = 0;
  if (weave_prepare(kernel, smem)) return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem)) return 0;
  return n;
}

extern "C" int weave_kernel_hopper_ok(weave_dtype_t dtype, weave_layout_t b_layout, int N, int K) {
  if (dtype == WEAVE_FP32) return 0;
  if (dtype == WEAVE_FP8_E4M3) return b_layout == WEAVE_LAYOUT_COL && K % 16 == 0;
  size_t b_row = (b_layout == WEAVE_LAYOUT_ROW ? (size_t)N : (size_t)K) * 2;
  return ((size_t)K * 2) % 16 == 0 && b_row % 16 == 0;
}

extern "C" void weave_kernel_tile_shape(int hopper, int *tile_m, int *tile_n) {
  *tile_m = hopper ? WEAVE_HGEMM_BM : WEAVE_MMA_BM;
  *tile_n = hopper ? WEAVE_HGEMM_BN : WEAVE_MMA_BN;
}

extern "C" int weave_kernel_blocks_per_sm(weave_dtype_t dtype, int hopper, int fused, size_t *smem_bytes) {
  size_t smem = weave_gemm_smem(dtype, hopper && fused);
  if (smem_bytes) *smem_bytes = smem;
  /* Every instantiation of a kernel shares the role and its resources: ask one of them. */
  if (fused) {
    if (dtype == WEAVE_FP32)
      return weave_occupancy(weave_fused_kernel<float, float, false, false>, WEAVE_MMA_THREADS, smem);
    if (hopper)
      return weave_occupancy(weave_fused_kernel<__nv_bfloat16, __nv_bfloat16, false, true>, WEAVE_HGEMM_THREADS, smem);
    return weave_occupancy(weave_fused_kernel<__nv_bfloat16, __nv_bfloat16, false, false>, WEAVE_MMA_THREADS, smem);
  }
  if (dtype == WEAVE_FP32) return weave_occupancy(weave_gemm_kernel<float, float>, WEAVE_MMA_THREADS, smem);
  return weave_occupancy(weave_gemm_kernel<__nv_bfloat16, __nv_bfloat16>, WEAVE_MMA_THREADS, smem);
}

typedef void (*weave_fused_fn_t)(const weave_fused_params_t);

extern "C" int weave_kernel_fused_max_clusters(void) {
  return weave_hgemm_resident_pairs(weave_fused_kernel<__nv_bfloat16, __nv_bfloat16, false, true, false, false, true>,
                                    WEAVE_HGEMM_THREADS, weave_gemm_smem(WEAVE_BF16, true));
}

template <typename T, typename S, bool ATOMIC, bool FP8 = false, bool PROMOTE = false>
static int weave_launch_fused_t(const weave_fused_params_t *p, cudaStream_t s) {
  size_t smem = weave_gemm_smem(p->dtype, p->hopper);
  if (p->hopper) {
    if constexpr (sizeof(T) == 2) {
      /* no clusters for the atomic accumulator (its sink and the A-sharing producer spill) */
      const bool pair = !ATOMIC && p->tiling.pair_n != 0;
      const weave_fused_fn_t kern = pair ? weave_fused_kernel<T, S, ATOMIC, true, FP8, PROMOTE, !ATOMIC>
                                         : weave_fused_kernel<T, S, ATOMIC, true, FP8, PROMOTE, false>;
      int e = weave_prepare(kern, smem);
      if (e) return e;
      cudaLaunchConfig_t cfg;
      cudaLaunchAttribute attr;
      weave_hgemm_launch_config(&cfg, &attr, p->gemm_blocks + p->comm_blocks, WEAVE_HGEMM_THREADS, smem, s, pair);
      return (int)cudaLaunchKernelEx(&cfg, kern, *p);
    }
    return (int)cudaErrorInvalidValue;
  }
  if constexpr (FP8) {
    return (int)cudaErrorInvalidValue; /* fp8 runs on the Hopper role only (the plan makes sure) */
  } else {
    int e = weave_prepare(weave_fused_kernel<T, S, ATOMIC, false>, smem);
    if (e) return e;
    weave_fused_kernel<T, S, ATOMIC, false><<<p->gemm_blocks + p->comm_blocks, WEAVE_MMA_THREADS, smem, s>>>(*p);
    return (int)cudaGetLastError();
  }
}

template <bool PROMOTE>
static int weave_launch_fused_fp8(const weave_fused_params_t *p, cudaStream_t s) {
  const bool atomic = p->reduce == WEAVE_REDUCE_ATOMIC, f32slot = p->slot_dtype == WEAVE_FP32;
  if (p->dtype == WEAVE_FP16) {
    if (atomic) return weave_launch_fused_t<__half, float, true, true, PROMOTE>(p, s);
    return f32slot ? weave_launch_fused_t<__half, float, false, true, PROMOTE>(p, s)
                   : weave_launch_fused_t<__half, __half, false, true, PROMOTE>(p, s);
  }
  if (atomic) return weave_launch_fused_t<__nv_bfloat16, float, true, true, PROMOTE>(p, s);
  return f32slot ? weave_launch_fused_t<__nv_bfloat16, float, false, true, PROMOTE>(p, s)
                 : weave_launch_fused_t<__nv_bfloat16, __nv_bfloat16, false, true, PROMOTE>(p, s);
}

extern "C" int weave_launch_fused(const weave_fused_params_t *p, struct CUstream_st *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bool atomic = p->reduce == WEAVE_REDUCE_ATOMIC, f32slot = p->slot_dtype == WEAVE_FP32;
  if (p->tiling.pair_n &&
      (!p->hopper || atomic || ((p->gemm_blocks | p->comm_blocks) & 1) || weave_tiles_n(&p->tiling) & 1))
    return (int)cudaErrorInvalidValue; /* clusters: the Hopper role, slots, even block counts, pairs of columns */
  if (p->in_dtype == WEAVE_FP8_E4M3)   /* p->dtype: the output, bf16 or fp16 */
    return p->fp8_fast_accum ? weave_launch_fused_fp8<false>(p, s) : weave_launch_fused_fp8<true>(p, s);
  switch (p->dtype) {
    case WEAVE_BF16:
      if (atomic) return weave_launch_fused_t<__nv_bfloat16, float, true>(p, s);
      return f32slot ? weave_launch_fused_t<__nv_bfloat16, float, false>(p, s)
                     : weave_launch_fused_t<__nv_bfloat16, __nv_bfloat16, false>(p, s);
    case WEAVE_FP16:
      if (atomic) return weave_launch_fused_t<__half, float, true>(p, s);
      return f32slot ? weave_launch_fused_t<__half, float, false>(p, s)
                     : weave_launch_fused_t<__half, __half, false>(p, s);
    default:
      if (atomic) return weave_launch_fused_t<float, float, true>(p, s);
      return weave_launch_fused_t<float, float, false>(p, s);
  }
}

template <typename T, typename O>
static int weave_launch_gemm_t(const weave_mma_args_t &a, float alpha, const void *bias, int bias_dtype, void *out,
                               int blocks, cudaStream_t s) {
  size_t smem = weave_gemm_smem(sizeof(T) == 4 ? WEAVE_FP32 : WEAVE_BF16, false);
  int e = weave_prepare(weave_gemm_kernel<T, O>, smem);
  if (e) return e;
  weave_store_sink<O> sink;
  sink.tiling = weave_tiling_t{a.M, a.N, 1, WEAVE_MMA_BM, WEAVE_MMA_BN, 0, 0};
  sink.out = (O *)out;
  sink.bias = bias;
  sink.bias_dtype = bias_dtype;
  sink.alpha = alpha;
  sink.N = a.N;
  int tiles = weave_cdiv(a.M, WEAVE_MMA_BM) * weave_cdiv(a.N, WEAVE_MMA_BN);
  if (blocks > tiles) blocks = tiles;
  weave_gemm_kernel<T, O><<<blocks, WEAVE_MMA_THREADS, smem, s>>>(a, sink);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_gemm(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, float alpha,
                                 const void *A, const void *B, const void *bias, void *out, weave_dtype_t out_dtype,
                                 int blocks, int vec_ok, struct CUstream_st *stream) {
  weave_mma_args_t a = {M, N, K, A, B, b_layout == WEAVE_LAYOUT_COL, vec_ok};
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
    case WEAVE_BF16:
      return out_dtype == WEAVE_FP32
                 ? weave_launch_gemm_t<__nv_bfloat16, float>(a, alpha, bias, dtype, out, blocks, s)
                 : weave_launch_gemm_t<__nv_bfloat16, __nv_bfloat16>(a, alpha, bias, dtype, out, blocks, s);
    case WEAVE_FP16:
      return out_dtype == WEAVE_FP32 ? weave_launch_gemm_t<__half, float>(a, alpha, bias, dtype, out, blocks, s)
                                     : weave_launch_gemm_t<__half, __half>(a, alpha, bias, dtype, out, blocks, s);
    default: return weave_launch_gemm_t<float, float>(a, alpha, bias, dtype, out, blocks, s);
  }
}

extern "C" int weave_launch_wait_done(const weave_fused_params_t *p, struct CUstream_st *stream) {
  weave_wait_done_kernel<<<1, 32 * ((p->team.world + 31) / 32), 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_ready_barrier(const weave_fused_params_t *p, struct CUstream_st *stream) {
  weave_ready_barrier_kernel<<<1, 32 * ((p->team.world + 31) / 32), 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_reduce_scatter(const weave_fused_params_t *p, int blocks, struct CUstream_st *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bool f32 = p->slot_dtype == WEAVE_FP32;
  switch (p->dtype) {
    case WEAVE_BF16:
      if (f32)
        weave_reduce_scatter_kernel<float, __nv_bfloat16><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      else
        weave_reduce_scatter_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      break;
    case WEAVE_FP16:
      if (f32)
        weave_reduce_scatter_kernel<float, __half><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      else
        weave_reduce_scatter_kernel<__half, __half><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      break;
    default: weave_reduce_scatter_kernel<float, float><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
  }
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_add_bias(void *C, int rows, int N, weave_dtype_t dtype, const void *bias,
                                     struct CUstream_st *stream) {
  size_t n = (size_t)rows * N;
  int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (blocks < 1) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (dtype == WEAVE_BF16)
    weave_add_bias_kernel<<<blocks, 256, 0, s>>>((__nv_bfloat16 *)C, n, N, (const __nv_bfloat16 *)bias);
  else if (dtype == WEAVE_FP16)
    weave_add_bias_kernel<<<blocks, 256, 0, s>>>((__half *)C, n, N, (const __half *)bias);
  else
    weave_add_bias_kernel<<<blocks, 256, 0, s>>>((float *)C, n, N, (const float *)bias);
  return (int)cudaGetLastError();
}

extern "C" const char *weave_cuda_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
