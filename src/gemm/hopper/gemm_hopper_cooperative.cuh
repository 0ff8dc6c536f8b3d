/*
 * The Hopper GEMM's cooperative role: both consumer warpgroups share each 128 x 256 tile.
 *
 * Design
 *   Persistent: the caller hands the role a sequence of tile numbers seq = seq_begin,
 *   seq_begin + seq_stride, ... (< seq_count); the Sink maps each to (tile_m, tile_n) and receives the
 *   results. Tile = 128 x 256 of C, K stepped by 64.
 *   Warpgroup 0 (threads 0..127) is the producer: one thread issues the TMA loads (128-byte swizzle)
 *   of A [128 x 64] and B [256 x 64 or 64 x 256] into a ring of 4 smem stages (pipeline.cuh). Each
 *   stage has a `full` mbarrier (1 arrival + the TMA transaction bytes) and an `empty` mbarrier (2
 *   arrivals, one per consumer warpgroup). Waits use the phase parity, which flips each time the ring
 *   wraps: producer and consumers each keep a weave_hgemm_pipe_t (pipeline_state.h).
 *   Warpgroups 1 and 2 (threads 128..383) are consumers: each owns 64 rows of the tile and issues
 *   4 wgmma.m64n256k16 per stage (fp32 accumulators, 128 registers per thread); a stage is released
 *   once the wgmma group of the following stage has been issued and the previous one waited for
 *   (wgmma.wait_group 1), so the tensor core always has one stage queued.
 *   setmaxnreg moves registers from the producer (40) to the consumers (232).
 *   B layouts: COL ([N, K], K-major) is wgmma's native B; ROW ([K, N], N-major) is loaded as four
 *   64-column boxes per stage and read with the transpose bit (tnspB = 1) and an MN-major descriptor.
 *   Tails: the TMA unit zero-fills what lies outside [M, K] / [N, K], so partial tiles and K < 64 just
 *   work; stores are masked (row < M, col < N) by the role before it calls the sink.
 *
 * The Sink contract, the synchronization the role uses and the register state it leaves:
 * gemm_hopper.cuh. Optional: stream-K split tiles (SK, streamk_fixup.cuh), 2-CTA clusters (CL == 2).
 */
#ifndef WEAVE_HGEMM_COOPERATIVE_CUH
#define WEAVE_HGEMM_COOPERATIVE_CUH

#include "gemm/hopper/epilogue.cuh"
#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/pipeline.cuh"
#include "gemm/hopper/prof.cuh"
#include "gemm/hopper/ptx.cuh"
#include "gemm/hopper/register_split.cuh"
#include "gemm/hopper/streamk_fixup.cuh"

static_assert(WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES <= 227 * 1024,
              "stages + epilogue staging exceed Hopper's 227 KiB of smem per block");

/* ---------------------------------------------------------------------------------------------
 * The role, for one (dtype, B layout, cluster size).
 *   DT: WEAVE_BF16, WEAVE_FP16 or WEAVE_FP8_E4M3 (BCOL only: k-blocks of 128 elements, the same
 *   128-byte smem rows and descriptors, wgmma k32); BCOL: 1 for WEAVE_LAYOUT_COL; CL: 1 or 2 CTAs per
 *   cluster; SC: the scale policy applied to each tile's accumulators before the sink (scales.cuh);
 *   PROMOTE: fp8 with fp32 accumulation (each k-block summed from zero by the tensor cores, then
 *   added in fp32; no stream-K: the caller passes SK false and a data-parallel seq_count).
 * CL == 2 (the kernel is launched with cluster dims (2,1,1)): the two CTAs of a cluster compute two
 * tiles with the same tile_n at the same time, each loads its own A and one half of B and multicasts
 * that half to both, halving the B traffic from L2. Requirements: seq_stride and seq_count even, the
 * CTA of cluster rank r passes seq_begin = 2j + r, and coords(seq) and coords(seq ^ 1) have the same
 * col0, and both must be in range (tile_m < ceil(M/128)): pair tile rows, so ceil(M/128) must be
 * even. SHARE_A: the two CTAs compute two tiles with the same tile_m instead, each loading half of
 * A's rows (p.tmap_a with a 64-row box) and multicasting it, and its own B: coords(seq) and
 * coords(seq ^ 1) have the same row0, and ceil(N/256) must be even. Every thread of both CTAs returns
 * only after a cluster barrier.
 * TBN: the tile's columns, 256, or 192 for fp8 with the tensor cores' accumulation (the narrow tile:
 * wgmma m64n192k32, 96 accumulators a thread, B [192 x 128] after A in stages of 40 KiB, a ring of
 * its own depth; p.tmap_b's box is 192 rows and tmap_b_half's 96; no stream-K). Where N is not a multiple of 256 a
 * 192-column tile can waste less of the last column, and where the tiles' rounds on the grid fall
 * short of whole ones the narrow tiles fill them better (weave_hgemm_fp8_tile_n, tile_scheduler.h).
 * ------------------------------------------------------------------------------------------- */
template <class Sink, int DT, int BCOL, int CL, bool SK = false, class SC = weave_hgemm_scale_none,
          bool PROMOTE = false, bool SHARE_A = false, int TBN = WEAVE_HGEMM_BN>
__device__ __forceinline__ void weave_hgemm_role_coop(const weave_hgemm_params_t &p, unsigned char *smem, int seq_begin,
                                                      int seq_stride, int seq_count, Sink &sink) {
  static_assert(CL == 1 || CL == 2, "cluster size 1 or 2");
  static_assert(!SK || CL == 1, "stream-K runs without clusters");
  static_assert(DT != WEAVE_FP8_E4M3 || BCOL, "fp8 reads B K-major only ([N, K])");
  static_assert(!PROMOTE || DT == WEAVE_FP8_E4M3, "promoted accumulation is for fp8");
  static_assert(!PROMOTE || !SK, "promoted accumulation runs without stream-K (no registers for the fixup)");
  static_assert(TBN == WEAVE_HGEMM_BN || (TBN == WEAVE_HGEMM_BN_NARROW && DT == WEAVE_FP8_E4M3 && !PROMOTE && !SK),
                "the narrow tile is fp8 with the tensor cores' accumulation, whole tiles");
  /* bytes a stage receives: A, and B's TBN rows (COL) or columns (ROW) of 128 bytes of K. The ring:
   * WEAVE_HGEMM_STAGES stages of 48 KiB; the narrow tile's, WEAVE_HGEMM_NARROW_STAGES of 40 KiB and
   * its own count of staging buffers (the layout of gemm_hopper.h from its own stage bytes). */
  constexpr uint32_t STAGE_TX = WEAVE_HGEMM_A_STAGE_BYTES + TBN * WEAVE_HGEMM_BK * 2;
  constexpr bool NARROW = TBN != WEAVE_HGEMM_BN;
  constexpr int STAGES = NARROW ? WEAVE_HGEMM_NARROW_STAGES : WEAVE_HGEMM_STAGES;
  constexpr uint32_t STAGE_BYTES = NARROW ? STAGE_TX : WEAVE_HGEMM_STAGE_BYTES;
  constexpr int EPI_BUFS = NARROW ? WEAVE_HGEMM_NARROW_EPI_BUFS : WEAVE_HGEMM_EPI_BUFS;
  constexpr uint32_t EPI_OFFSET = STAGES * STAGE_BYTES + 1024;
  static_assert(EPI_OFFSET + 2 * EPI_BUFS * WEAVE_HGEMM_EPI_BUF_BYTES + 1024 <= WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES,
                "the ring and the staging buffers fit the TMA-store kernels' smem");
  constexpr int BKE = DT == WEAVE_FP8_E4M3 ? WEAVE_HGEMM_BK_FP8 : WEAVE_HGEMM_BK; /* K elements a stage */
  const uint32_t smem_base = weave_hgemm_smem_u32(smem);
  const uint32_t full_bar = smem_base + STAGES * STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  const int tid = threadIdx.x;
  const uint32_t cta_rank = CL == 2 ? weave_hgemm_cluster_ctarank() : 0;

  if (WEAVE_HGEMM_PROFILE && tid == 0) weave_hgemm_prof_edge(0);
  weave_hgemm_ring_init<CL>(full_bar, empty_bar, STAGES, 2 * CL); /* each consumer warpgroup of each CTA */

  /* data-parallel tiles seq_begin, +seq_stride, ... < seq_count; with SK, then this block's
   * stream-K range (tile_scheduler.h). Producer and consumers walk the same items. */
  const weave_hgemm_sk_t sk_off = weave_hgemm_sk_plan(0, 0, p.k_blocks, WEAVE_HGEMM_SK_OFF);
  weave_hgemm_walk_t walk = weave_hgemm_walk_begin(SK ? &p.sk : &sk_off, seq_begin, seq_begin, seq_stride, seq_count);
  int seq, kb0, kb1;

  if (!weave_hgemm_regs_split()) {
    /* ---------------- producer ---------------- */
    if (tid == 0) {
      weave_hgemm_tma_prefetch_map(&p.tmap_a);
      weave_hgemm_tma_prefetch_map(&p.tmap_b);
      weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
#if WEAVE_HGEMM_PROFILE
      int ptile = 0;
#endif
      while (weave_hgemm_walk_next(&walk, &seq, &kb0, &kb1)) {
        int m0, n0;
        sink.coords(seq, &m0, &n0);
        if constexpr (weave_hgemm_sink_waits<Sink>::value) sink.wait_inputs(m0);
#if WEAVE_HGEMM_PROFILE /* as a block: the default build's producer SASS stays the verified one */
        long long *prof = weave_hgemm_prof_slot(WEAVE_HGEMM_PROF_PRODUCER, ptile++);
#endif
        for (int kb = kb0; kb < kb1; ++kb) {
#if WEAVE_HGEMM_PROFILE
          if (kb == kb0) WEAVE_HGEMM_PROF_STAMP(prof, 0);
#endif
          weave_hgemm_mbar_wait(empty_bar + 8 * pipe.stage, pipe.phase ^ 1);
#if WEAVE_HGEMM_PROFILE
          if (kb == kb0) WEAVE_HGEMM_PROF_STAMP(prof, 1);
#endif
          const uint32_t fb = full_bar + 8 * pipe.stage;
          weave_hgemm_mbar_expect_tx(fb, STAGE_TX);
          weave_hgemm_load_stage<BCOL, TBN, CL, SHARE_A, TBN>(p, smem_base + pipe.stage * STAGE_BYTES, fb, kb * BKE, m0,
                                                              n0, cta_rank);
          weave_hgemm_pipe_advance(&pipe, STAGES);
        }
      }
    }
  } else {
    /* ---------------- consumers ---------------- */
    const int cw = weave_hgemm_consumer_index(tid); /* 0 or 1: which 64-row half of the tile */
    const int ltid = tid & 127;
    const int warp = ltid >> 5, lane = ltid & 31;
    const uint64_t b_base = BCOL ? WEAVE_HGEMM_DESC_KMAJOR_SW128 : p.b_desc_base;
    /* per k16 step: K-major advances 32 bytes inside the swizzled row; MN-major 16 rows of 128 B */
    const uint32_t b_kstep = BCOL ? 2u : (16u * 128u) >> 4;
    const int M = p.M, N = p.N;
    float acc[TBN / 2];
    weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
    int ptile = 0; /* WEAVE_HGEMM_PROFILE */
    while (weave_hgemm_walk_next(&walk, &seq, &kb0, &kb1)) {
      int prev_stage = 0;
      int m0 = 0, n0 = 0; /* the tile's place: computed under its first k-block's wgmmas */
      long long *prof = ltid == 0 ? weave_hgemm_prof_slot(cw, ptile) : nullptr;
      ++ptile;
      WEAVE_HGEMM_PROF_STAMP(prof, 0);
      WEAVE_HGEMM_PROF_STAMP_NS(prof, 14);
      if constexpr (PROMOTE) {
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.f;
      }
      for (int kb = kb0; kb < kb1; ++kb) {
        /* PROMOTE waits for the next k-block's stage under its second half's group (below) */
        if (!PROMOTE || kb == kb0) weave_hgemm_mbar_wait(full_bar + 8 * pipe.stage, pipe.phase);
        if (kb == kb0) WEAVE_HGEMM_PROF_STAMP(prof, 1);
        const uint32_t sa = smem_base + pipe.stage * STAGE_BYTES + cw * (64 * 128);
        const uint32_t sb = smem_base + pipe.stage * STAGE_BYTES + WEAVE_HGEMM_A_STAGE_BYTES;
        const uint64_t da = weave_hgemm_desc(sa, WEAVE_HGEMM_DESC_KMAJOR_SW128);
        const uint64_t db = weave_hgemm_desc(sb, b_base);
        if constexpr (PROMOTE) {
          /* fp8, accumulation promoted to fp32: the tensor cores align each k32 step's products to
           * their running sum and keep 13 fraction bits ("fast accumulation"), so each k-block (128
           * of K) goes into a zeroed 64 x 128 half-tile `part` and is added to acc in fp32, one half
           * after the other: 64 more registers, where a second full set (128) would not fit. The
           * wait before each add costs this warpgroup its queued group, and the tensor cores idle
           * while both warpgroups add (docs/hopper_gemm.md measures the cost). The stage is
           * released as soon as both halves are read. */
          float part[64];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            weave_hgemm_fence_regs<64>(part);
            weave_hgemm_wgmma_fence();
#pragma unroll
            for (int k = 0; k < WEAVE_HGEMM_BK / 16; ++k) /* 4 k32 steps of 32 bytes */
              WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(part, da + 2u * k, db + (uint64_t)(h * 128 * 128 >> 4) + 2u * k,
                                                k > 0 ? 1u : 0u);
            weave_hgemm_wgmma_commit();
            if (h == 1 && kb + 1 < kb1) { /* as cuBLASLt's promoted kernel: the next stage's barrier
                                           * under this group, not between its adds and the next issue */
              weave_hgemm_pipe_t next = pipe;
              weave_hgemm_pipe_advance(&next, STAGES);
              weave_hgemm_mbar_wait(full_bar + 8 * next.stage, next.phase);
            }
            weave_hgemm_wgmma_wait<0>();
            weave_hgemm_fence_regs<64>(part);
#pragma unroll
            for (int i = 0; i < 64; ++i) acc[64 * h + i] += part[i];
          }
          if (ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * pipe.stage);
          weave_hgemm_pipe_advance(&pipe, STAGES);
          continue;
        }
        weave_hgemm_fence_regs<TBN / 2>(acc);
        weave_hgemm_wgmma_fence();
#pragma unroll
        for (int k = 0; k < WEAVE_HGEMM_BK / 16; ++k) { /* 4 steps of 32 bytes of K: k16 (16-bit), k32 (fp8) */
          const uint32_t scale_d = (kb > kb0 || k > 0) ? 1u : 0u;
          if constexpr (TBN == WEAVE_HGEMM_BN_NARROW) {
            WEAVE_HGEMM_WGMMA_M64N192K32_E4M3(acc, da + 2u * k, db + 2u * k, scale_d);
          } else if (DT == WEAVE_BF16) {
            WEAVE_HGEMM_WGMMA_M64N256K16("bf16", acc, da + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          } else if (DT == WEAVE_FP16) {
            WEAVE_HGEMM_WGMMA_M64N256K16("f16", acc, da + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          } else {
            WEAVE_HGEMM_WGMMA_M64N256K32_E4M3(acc, da + 2u * k, db + 2u * k, scale_d);
          }
        }
        weave_hgemm_wgmma_commit();
        if (kb == kb0) {
          /* the sink's coords (the fused sinks' integer divisions: ~600 cycles with the jump to the
           * epilogue's code when they ran after the main loop, by a clock64 breakdown) run while the
           * tensor cores work on the first k-block; the empty asm pins them here */
          sink.coords(seq, &m0, &n0);
          asm volatile("" : "+r"(m0), "+r"(n0));
        }
        weave_hgemm_fence_regs<TBN / 2>(acc);
        weave_hgemm_wgmma_wait<1>();
        if (kb > kb0 && ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * prev_stage);
        prev_stage = pipe.stage;
        weave_hgemm_pipe_advance(&pipe, STAGES);
      }
      if constexpr (!PROMOTE) {
        weave_hgemm_wgmma_wait<0>();
        weave_hgemm_fence_regs<TBN / 2>(acc);
        if (ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * prev_stage);
      } else {
        sink.coords(seq, &m0, &n0); /* here: two registers fewer in the k-loop (192 for acc and part); the
                                      * fused kernels spilled 24 bytes with them */
      }
      WEAVE_HGEMM_PROF_STAMP(prof, 2);
      if constexpr (SK) {
        /* a split tile: only its last segment to arrive goes on, with the summed accumulators */
        if ((kb0 != 0 || kb1 != p.k_blocks) &&
            !weave_hgemm_sk_reduce(p, acc, seq - seq_count, seq_begin, kb0, cw, ltid))
          continue;
      }

      /* epilogue: accumulator fragment of m64nNk16: d[4j + {0,1}] at (row, 8j + 2*(lane%4) + {0,1}),
       * d[4j + {2,3}] at row + 8, with row = 16*warp + lane/4 inside the warpgroup's 64 rows. */
      sink.begin(seq);
      const int lrow = warp * 16 + (lane >> 2); /* row inside this warpgroup's 64 rows */
      const int row0 = m0 + cw * 64 + lrow;
      const int col0 = n0 + (lane & 3) * 2;
      SC sc;
      sc.tile(p, row0);
      bool done = false;
      if constexpr (weave_hgemm_sink_tma<Sink>::value) {
        if (sink.tma_store()) {
          const uint32_t ebuf = smem_base + EPI_OFFSET + cw * (EPI_BUFS * WEAVE_HGEMM_EPI_BUF_BYTES);
          WEAVE_HGEMM_PROF_STAMP(prof, 3);
          weave_hgemm_store_rows<Sink, TBN, SC, EPI_BUFS>(sink, p, sc, acc, ebuf, 0, n0, sink.tma_row(m0) + cw * 64, cw,
                                                          lrow, lane, ltid, prof);
          weave_hgemm_store_rows_complete<Sink>(ltid);
          WEAVE_HGEMM_PROF_STAMP(prof, 4);
          done = true;
        }
      }
      if (!done) {
#pragma unroll
        for (int j = 0; j < TBN / 8; ++j) {
          const int col = col0 + 8 * j;
          if (col < N) {
            float v[4] = {acc[4 * j + 0], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
            sc.apply(p, col, v);
            if (row0 < M) sink.store2(row0, col, v[0], v[1]);
            if (row0 + 8 < M) sink.store2(row0 + 8, col, v[2], v[3]);
          }
        }
      }
      if constexpr (!weave_hgemm_sink_no_end<Sink>::value) {
        weave_hgemm_named_barrier_sync(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS);
        if (tid == WEAVE_HGEMM_THREADS - WEAVE_HGEMM_CONSUMER_THREADS) sink.end(seq);
      }
      WEAVE_HGEMM_PROF_STAMP(prof, 13);
    }
    if constexpr (weave_hgemm_sink_tma<Sink>::value) {
      if (ltid == 0) weave_hgemm_bulk_wait_all(); /* smem must outlive the stores that read it */
    }
    if (WEAVE_HGEMM_PROFILE && ltid == 0 && cw == 0) weave_hgemm_prof_edge(1);
  }
  if (CL == 2) weave_hgemm_cluster_sync(); /* no CTA leaves while its peer may still signal it */
}

#endif /* WEAVE_HGEMM_COOPERATIVE_CUH */
