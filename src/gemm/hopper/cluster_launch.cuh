/* Launch configurations with or without 2-CTA clusters, for the standalone Hopper GEMM and the fused
 * kernels that run its role in clusters (host code; included by the .cu files that launch). */
#ifndef WEAVE_GEMM_HOPPER_CLUSTER_LAUNCH_CUH
#define WEAVE_GEMM_HOPPER_CLUSTER_LAUNCH_CUH

#include <cuda_runtime.h>

/* *cfg: `grid` blocks of `threads` threads, `smem` bytes of dynamic shared memory, on `stream`; with
 * `pair`, in clusters of 2 CTAs along x through *attr (which must outlive the launch). */
static inline void weave_hgemm_launch_config(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int grid, int threads,
                                             size_t smem, cudaStream_t stream, bool pair) {
  *cfg = cudaLaunchConfig_t{};
  cfg->gridDim = dim3((unsigned)grid, 1, 1);
  cfg->blockDim = dim3((unsigned)threads, 1, 1);
  cfg->dynamicSmemBytes = smem;
  cfg->stream = stream;
  if (pair) {
    *attr = cudaLaunchAttribute{};
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = 2;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
  }
}

/* *n: the most 2-CTA clusters of `kern` (threads, smem as above; its smem limit already raised)
 * resident at once on the current device. */
template <typename KERN>
static inline cudaError_t weave_hgemm_max_pairs(KERN kern, int threads, size_t smem, int *n) {
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr;
  weave_hgemm_launch_config(&cfg, &attr, 2, threads, smem, 0, true);
  *n = 0;
  return cudaOccupancyMaxActiveClusters(n, kern, &cfg);
}

/* The most 2-CTA clusters of `kern` resident at once on the current device, its dynamic smem limit
 * raised to `smem` first (the planners' question for the fused kernels); 0 where it cannot run (the
 * CUDA error cleared). */
template <typename KERN>
static inline int weave_hgemm_resident_pairs(KERN kern, int threads, size_t smem) {
  int n = 0;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
      weave_hgemm_max_pairs(kern, threads, smem, &n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

#endif /* WEAVE_GEMM_HOPPER_CLUSTER_LAUNCH_CUH */
