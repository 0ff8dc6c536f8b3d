/*
 * Scale policies of the Hopper GEMM's roles: what happens to a tile's fp32 accumulators between the
 * main loop (and a stream-K tile's fixup) and the sink. A role takes the policy as a template
 * parameter SC and, per tile and consumer thread, calls
 *   sc.tile(p, row)          once, row = the thread's first row of C in the tile (it also holds row + 8);
 *   sc.apply(p, col, v)      per 8-column group: v[0], v[1] at (row, col), (row, col + 1) and v[2],
 *                            v[3] at (row + 8, col), (row + 8, col + 1), in place.
 *
 *   weave_hgemm_scale_none   nothing (16-bit inputs; fp8 whose scales the sink folds into alpha)
 *   weave_hgemm_scale_fp8    fp8 dequantization by p.scales, its mode read at run time (uniform):
 *                            TENSOR  v *= a[0] b[0]
 *                            ROW     v *= a[row] b[col]  (0 outside [M, N]: the tile's padding)
 *                            ROW_A   v *= a[row] b[0]    (WEAVE_HGEMM_SCALE_ROW_A)
 *                            NONE    v *= 1
 *
 * The column scales of ROW are read per group (__ldg, L1): the 1 KiB of a tile's 256 columns stays in
 * L1 for the tile's epilogue, since nothing else the consumers load goes through L1 (TMA bypasses it).
 */
#ifndef WEAVE_HGEMM_SCALES_CUH
#define WEAVE_HGEMM_SCALES_CUH

#include "gemm/hopper/gemm_hopper.h"

struct weave_hgemm_scale_none {
  __device__ __forceinline__ void tile(const weave_hgemm_params_t &, int) {}
  __device__ __forceinline__ void apply(const weave_hgemm_params_t &, int, float *) const {}
};

struct weave_hgemm_scale_fp8 {
  float r0, r8; /* the factors of this thread's rows: a[row] (ROW), a[row] b[0] (ROW_A), a[0] b[0] (TENSOR),
                 * 1 (NONE) */
  __device__ __forceinline__ void tile(const weave_hgemm_params_t &p, int row) {
    if (p.scales.mode == WEAVE_SCALE_ROW || p.scales.mode == WEAVE_HGEMM_SCALE_ROW_A) {
      /* the rows' scales through L2 only (ld.global.cg), not the read-only path: AllGather + GEMM's
       * peers write them during the kernel (before the release its producer acquired) */
      const float b = p.scales.mode == WEAVE_HGEMM_SCALE_ROW_A ? __ldg(p.scales.b) : 1.f;
      r0 = row < p.M ? __ldcg(p.scales.a + row) * b : 0.f;
      r8 = row + 8 < p.M ? __ldcg(p.scales.a + row + 8) * b : 0.f;
    } else if (p.scales.mode == WEAVE_SCALE_TENSOR) {
      r0 = r8 = __ldg(p.scales.a) * __ldg(p.scales.b);
    } else {
      r0 = r8 = 1.f;
    }
  }
  __device__ __forceinline__ void apply(const weave_hgemm_params_t &p, int col, float *v) const {
    if (p.scales.mode == WEAVE_SCALE_ROW) {
      const float c0 = col < p.N ? __ldg(p.scales.b + col) : 0.f;
      const float c1 = col + 1 < p.N ? __ldg(p.scales.b + col + 1) : 0.f;
      v[0] *= r0 * c0;
      v[1] *= r0 * c1;
      v[2] *= r8 * c0;
      v[3] *= r8 * c1;
    } else {
      v[0] *= r0;
      v[1] *= r0;
      v[2] *= r8;
      v[3] *= r8;
    }
  }
};

#endif /* WEAVE_HGEMM_SCALES_CUH */
