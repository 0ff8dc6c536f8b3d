/*
 * The Hopper GEMM's shared-memory ring ("pipeline"): `stages` stages of A and B tiles, each with a
 * `full` mbarrier (1 arrival: the producer's expect_tx, plus the TMA transaction bytes) and an `empty`
 * mbarrier (one arrival per consumer warpgroup that reads the stage, from each CTA of a cluster).
 * The producer waits `empty`, arms `full` with the stage's bytes and issues the TMA loads
 * (weave_hgemm_load_stage); a consumer waits `full`, reads the stage with wgmma, and releases it
 * (weave_hgemm_release_stage). Where each role stands in the ring: weave_hgemm_pipe_t
 * (pipeline_state.h).
 *
 * Layout from the caller's 1024-byte aligned smem: the stages, then the full mbarriers (8 bytes
 * each), then the empty ones.
 */
#ifndef WEAVE_HGEMM_PIPELINE_CUH
#define WEAVE_HGEMM_PIPELINE_CUH

#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/pipeline_state.h"
#include "gemm/hopper/ptx.cuh"

/* The smem ring's mbarriers: thread 0 initialises `stages` full barriers (1 arrival: the producer's
 * expect_tx) and empty barriers (`empty_arrivals`), and makes them visible to the async proxy (TMA
 * complete_tx) and to the cluster; then every thread of the block (CL == 2: of both CTAs) meets at a
 * barrier, which also publishes whatever else thread 0 wrote to smem before the call. */
template <int CL>
static __device__ __forceinline__ void weave_hgemm_ring_init(uint32_t full_bar, uint32_t empty_bar, int stages,
                                                             uint32_t empty_arrivals) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      weave_hgemm_mbar_init(full_bar + 8 * s, 1);
      weave_hgemm_mbar_init(empty_bar + 8 * s, empty_arrivals);
    }
    weave_hgemm_fence_mbar_init();
    weave_hgemm_fence_proxy_async_smem();
  }
  if (CL == 2)
    weave_hgemm_cluster_sync();
  else
    __syncthreads();
}

/* One stage's TMA loads, all signalling `bar`: A [128 x 64] of k-block k0 at sa, and B's columns
 * [n, n + W) right after it (COL: W rows of 128 bytes, K-major, through the map whose box is W, W / 2
 * or W / 4 rows: p.tmap_b, tmap_b_half, tmap_b_quarter; ROW: W / 64 slabs of 64 columns, 8 KiB
 * apart). CL == 2: this CTA loads its half of the W columns (cta_rank's) and multicasts it to both
 * CTAs of the cluster, whose producers do the same with the other half; SHARE_A (CL == 2, the two
 * CTAs on one tile row): the half of A's rows instead (p.tmap_a has a 64-row box), and all of its own
 * B. MAPW: the rows of p.tmap_b's box (the role's tile width: 256, or 192 for fast fp8's narrow tile). */
template <int BCOL, int W, int CL, bool SHARE_A = false, int MAPW = WEAVE_HGEMM_BN>
static __device__ __forceinline__ void weave_hgemm_load_stage(const weave_hgemm_params_t &p, uint32_t sa, uint32_t bar,
                                                              int k0, int m0, int n, uint32_t cta_rank) {
  static_assert(!SHARE_A || CL == 2, "A is shared by the CTAs of a cluster");
  static_assert(BCOL || MAPW == WEAVE_HGEMM_BN, "a ROW B is loaded in 64-column boxes");
  constexpr int CLB = SHARE_A ? 1 : CL; /* CTAs sharing B */
  constexpr int WL = W / CLB;           /* columns this CTA loads */
  static_assert(WL == MAPW || 2 * WL == MAPW || 4 * WL == MAPW, "B boxes of the map's rows, a half or a quarter");
  static_assert(BCOL || WL % 64 == 0, "whole 64-column slabs of a ROW B");
  constexpr uint32_t SLAB = 64 * WEAVE_HGEMM_BK * 2; /* 64 columns (ROW) or 64 rows (COL) of B */
  const uint32_t brank = SHARE_A ? 0 : cta_rank;
  /* COL: WL rows of 128 bytes; a multiple of 8 rows keeps the 1024-byte swizzle atoms whole */
  const uint32_t dst = sa + WEAVE_HGEMM_A_STAGE_BYTES + brank * (BCOL ? WL * 128u : (WL / 64) * SLAB);
  const int nl = n + (int)brank * WL;
  if (SHARE_A)
    weave_hgemm_tma_load_2d_mc(sa + cta_rank * (WEAVE_HGEMM_A_STAGE_BYTES / 2), &p.tmap_a, bar, k0,
                               m0 + (int)cta_rank * (WEAVE_HGEMM_BM / 2), 0x3);
  else
    weave_hgemm_tma_load_2d(sa, &p.tmap_a, bar, k0, m0);
  if (BCOL) {
    const CUtensorMap *map = WL == MAPW ? &p.tmap_b : 2 * WL == MAPW ? &p.tmap_b_half : &p.tmap_b_quarter;
    if (CLB == 1)
      weave_hgemm_tma_load_2d(dst, map, bar, k0, nl);
    else
      weave_hgemm_tma_load_2d_mc(dst, map, bar, k0, nl, 0x3);
  } else {
#pragma unroll
    for (int j = 0; j < WL / 64; ++j) {
      if (CLB == 1)
        weave_hgemm_tma_load_2d(dst + j * SLAB, &p.tmap_b, bar, nl + 64 * j, k0);
      else
        weave_hgemm_tma_load_2d_mc(dst + j * SLAB, &p.tmap_b, bar, nl + 64 * j, k0, 0x3);
    }
  }
}

/* A consumer warpgroup is done with a ring stage: with clusters both CTAs' producers wrote into it,
 * so both CTAs' empty mbarriers hear of it. */
template <int CL>
static __device__ __forceinline__ void weave_hgemm_release_stage(uint32_t empty) {
  if (CL == 1) {
    weave_hgemm_mbar_arrive(empty);
  } else {
    weave_hgemm_mbar_arrive_cluster(empty, 0);
    weave_hgemm_mbar_arrive_cluster(empty, 1);
  }
}

#endif /* WEAVE_HGEMM_PIPELINE_CUH */
