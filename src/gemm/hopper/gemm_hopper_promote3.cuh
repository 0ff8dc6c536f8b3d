/*
 * The Hopper GEMM's fp8 role with accumulation promoted to fp32 on three consumer warpgroups:
 * 192 x 128 tiles, each consumer warpgroup 64 x 128 of them.
 *
 * Why three: a warpgroup that promotes waits for its own wgmma group before it adds the group's sum
 * to its fp32 accumulators (ptxas serializes every wgmma of a warpgroup that reads a group's
 * registers while another is in flight), so the tensor cores stay busy only while other warpgroups'
 * groups are queued. With two warpgroups (the cooperative role, PROMOTE) one adds while one group
 * runs; with three, two groups are queued while the third adds. weave-probe-promote measured it
 * outside any GEMM (docs/hopper_gemm.md): three warpgroups of 64 x 128 keep the tensor cores 99.8%
 * busy with a producer refilling the stages, the two-warpgroup schedule 90%.
 *
 * Design (as the cooperative role, gemm_hopper_cooperative.cuh, where not said here)
 *   Block of 512 threads: warpgroup 0 the producer (one thread issues the TMA loads), warpgroups 1-3
 *   the consumers. setmaxnreg: producer 40, consumers 152 (64 accumulators + 64 for a k-block's
 *   group, where the cooperative role's consumers hold 128 + 64).
 *   Ring of WEAVE_HGEMM_P3_STAGES stages, each A [192 x 128] (one TMA box, p.tmap_a encoded with a
 *   192-row box by the launcher) and B [128 x 128] (p.tmap_b_half), K-major, 128-byte swizzle;
 *   `empty` takes one arrival per consumer warpgroup.
 *   Per k-block a consumer issues 4 x wgmma m64n128k32 into a zeroed `part`, tries the next stage's
 *   full barrier once (one mbarrier.try_wait) while they run, waits for them, releases the stage and
 *   adds part to acc in fp32, then waits for the next stage if the try found it still on its way
 *   (cuBLASLt's order: only the release and the adds stand between a group's end and the next issue,
 *   and a late stage's arrival overlaps the adds; the release before the adds: the producer refills
 *   the stage while the warpgroup adds).
 *   CL == 2 (launched with cluster dims (2,1,1)): the two CTAs of a cluster compute two tiles of one
 *   tile row at the same time (the sink pairs tile columns: coords(seq) and coords(seq ^ 1) have the
 *   same m0), each loads one 96-row half of A (p.tmap_a encoded with a 96-row box) and multicasts it
 *   to both, and loads its own B; `empty` then takes an arrival from each consumer warpgroup of both
 *   CTAs. A CTA of cluster rank r passes seq_begin = 2j + r and an even stride.
 *   Data-parallel tiles only (no stream-K); whole-tile epilogue per warpgroup through
 *   epilogue.cuh (TMA stores: named barriers 2 + warpgroup, i.e. 2, 3 and 4, the last being
 *   WEAVE_HGEMM_RESTORE_BARRIER_ID: a kernel running this role must not restore registers) or the
 *   sink's store2.
 * Sinks: the Sink contract of gemm_hopper.cuh with 192 x 128 tiles; end(), if the sink has one,
 * after all 384 consumer threads are done (barrier WEAVE_HGEMM_CONSUMER_BARRIER_ID).
 */
#ifndef WEAVE_HGEMM_PROMOTE3_CUH
#define WEAVE_HGEMM_PROMOTE3_CUH

#include "gemm/hopper/epilogue.cuh"
#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/pipeline.cuh"
#include "gemm/hopper/prof.cuh"
#include "gemm/hopper/ptx.cuh"

static_assert(WEAVE_HGEMM_P3_SMEM_ALLOC_BYTES <= 227 * 1024,
              "three-warpgroup stages + epilogue staging exceed Hopper's 227 KiB of smem per block");
static_assert(WEAVE_HGEMM_P3_PRODUCER_REGS * 128 + 3 * 128 * WEAVE_HGEMM_P3_CONSUMER_REGS <= 65536,
              "the three-warpgroup register split exceeds the register file");

template <class Sink, class SC, int CL>
__device__ __forceinline__ void weave_hgemm_role_promote3(const weave_hgemm_params_t &p, unsigned char *smem,
                                                          int seq_begin, int seq_stride, int seq_count, Sink &sink) {
  static_assert(CL == 1 || CL == 2, "cluster size 1 or 2");
  constexpr int STAGES = WEAVE_HGEMM_P3_STAGES;
  constexpr int A_ROWS = WEAVE_HGEMM_P3_BM / CL; /* rows of A this CTA loads a stage */
  const uint32_t smem_base = weave_hgemm_smem_u32(smem);
  const uint32_t full_bar = smem_base + STAGES * WEAVE_HGEMM_P3_STAGE_BYTES;
  const uint32_t empty_bar = full_bar + STAGES * 8;
  const int tid = threadIdx.x;
  const uint32_t cta_rank = CL == 2 ? weave_hgemm_cluster_ctarank() : 0;
  if (WEAVE_HGEMM_PROFILE && tid == 0) weave_hgemm_prof_edge(0);
  weave_hgemm_ring_init<CL>(full_bar, empty_bar, STAGES, 3 * CL);

  if ((tid >> 7) == 0) {
    /* ---------------- producer ---------------- */
    weave_hgemm_setmaxnreg_dec<WEAVE_HGEMM_P3_PRODUCER_REGS>();
    if (tid == 0) {
      weave_hgemm_tma_prefetch_map(&p.tmap_a);
      weave_hgemm_tma_prefetch_map(&p.tmap_b_half);
      weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
      int ptile = 0; /* WEAVE_HGEMM_PROFILE */
      for (int seq = seq_begin; seq < seq_count; seq += seq_stride) {
        int m0, n0;
        sink.coords(seq, &m0, &n0);
        long long *prof = weave_hgemm_prof_slot(WEAVE_HGEMM_PROF_PRODUCER, ptile++);
        long long late = 0; /* WEAVE_HGEMM_PROFILE: full rings */
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          if (kb == 0) WEAVE_HGEMM_PROF_STAMP(prof, 0);
          /* the profiling build looks once first and counts only the waits that look did not end */
          if (!WEAVE_HGEMM_PROFILE || !weave_hgemm_mbar_try(empty_bar + 8 * pipe.stage, pipe.phase ^ 1))
            weave_hgemm_mbar_wait_counted(empty_bar + 8 * pipe.stage, pipe.phase ^ 1, &late);
          if (kb == 0) WEAVE_HGEMM_PROF_STAMP(prof, 1);
          const uint32_t fb = full_bar + 8 * pipe.stage;
          const uint32_t sa = smem_base + pipe.stage * WEAVE_HGEMM_P3_STAGE_BYTES;
          weave_hgemm_mbar_expect_tx(fb, WEAVE_HGEMM_P3_STAGE_BYTES); /* both halves of A land here */
          if (CL == 1)
            weave_hgemm_tma_load_2d(sa, &p.tmap_a, fb, kb * WEAVE_HGEMM_BK_FP8, m0);
          else
            weave_hgemm_tma_load_2d_mc(sa + cta_rank * (A_ROWS * WEAVE_HGEMM_BK_FP8), &p.tmap_a, fb,
                                       kb * WEAVE_HGEMM_BK_FP8, m0 + (int)cta_rank * A_ROWS, 0x3);
          weave_hgemm_tma_load_2d(sa + WEAVE_HGEMM_P3_A_STAGE_BYTES, &p.tmap_b_half, fb, kb * WEAVE_HGEMM_BK_FP8, n0);
          weave_hgemm_pipe_advance(&pipe, STAGES);
        }
        if (prof) prof[WEAVE_HGEMM_PROF_LATE_EV] = late;
      }
    }
    if (CL == 2) weave_hgemm_cluster_sync(); /* no CTA leaves while its peer may still signal it */
    return;
  }

  /* ---------------- consumers ---------------- */
  weave_hgemm_setmaxnreg_inc<WEAVE_HGEMM_P3_CONSUMER_REGS>();
  const int cw = weave_hgemm_consumer_index(tid); /* 0, 1, 2: which 64-row third of the tile */
  const int ltid = tid & 127;
  const int warp = ltid >> 5, lane = ltid & 31;
  const int M = p.M, N = p.N;
  float acc[64];
  weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
  int ptile = 0; /* WEAVE_HGEMM_PROFILE */
  for (int seq = seq_begin; seq < seq_count; seq += seq_stride) {
    long long *prof = ltid == 0 ? weave_hgemm_prof_slot(cw, ptile) : nullptr;
    ++ptile;
    WEAVE_HGEMM_PROF_STAMP(prof, 0);
    WEAVE_HGEMM_PROF_STAMP_NS(prof, 14);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    /* the first stage's full barrier here, each next one under the group before it and its adds */
    weave_hgemm_mbar_wait(full_bar + 8 * pipe.stage, pipe.phase);
    WEAVE_HGEMM_PROF_STAMP(prof, 1);
    long long late = 0; /* WEAVE_HGEMM_PROFILE: late stages */
    for (int kb = 0; kb < p.k_blocks; ++kb) {
      const uint32_t sa = smem_base + pipe.stage * WEAVE_HGEMM_P3_STAGE_BYTES + cw * (64 * 128);
      const uint32_t sb = smem_base + pipe.stage * WEAVE_HGEMM_P3_STAGE_BYTES + WEAVE_HGEMM_P3_A_STAGE_BYTES;
      const uint64_t da = weave_hgemm_desc(sa, WEAVE_HGEMM_DESC_KMAJOR_SW128);
      const uint64_t db = weave_hgemm_desc(sb, WEAVE_HGEMM_DESC_KMAJOR_SW128);
      float part[64];
      weave_hgemm_fence_regs<64>(part);
      weave_hgemm_wgmma_fence();
#pragma unroll
      for (int k = 0; k < WEAVE_HGEMM_BK_FP8 / 32; ++k) /* 4 k32 steps of 32 bytes; the first zeroes part */
        WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(part, da + 2u * k, db + 2u * k, k > 0 ? 1u : 0u);
      weave_hgemm_wgmma_commit();
      const uint32_t done_stage = pipe.stage;
      weave_hgemm_pipe_advance(&pipe, STAGES);
      /* one try for the next stage while the group runs; a stage still on its way is waited for after
       * the adds, which then overlap its arrival */
      const bool next_ready = kb + 1 >= p.k_blocks || weave_hgemm_mbar_try(full_bar + 8 * pipe.stage, pipe.phase);
      weave_hgemm_wgmma_wait<0>();
      weave_hgemm_prof_group_end(prof, kb);
      weave_hgemm_fence_regs<64>(part);
      if (ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * done_stage);
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] += part[i];
      if (!next_ready) weave_hgemm_mbar_wait_counted(full_bar + 8 * pipe.stage, pipe.phase, &late);
    }
    if (prof) prof[WEAVE_HGEMM_PROF_LATE_EV] = late;

    WEAVE_HGEMM_PROF_STAMP(prof, 2);
    /* epilogue: the m64n128 fragment, acc[4j + {0,1}] at (row, 8j + 2*(lane%4) + {0,1}), acc[4j + {2,3}]
     * at row + 8, row = 16*warp + lane/4 inside the warpgroup's 64 rows */
    int m0, n0;
    sink.coords(seq, &m0, &n0);
    sink.begin(seq);
    const int lrow = warp * 16 + (lane >> 2);
    const int row0 = m0 + cw * 64 + lrow;
    const int col0 = n0 + (lane & 3) * 2;
    SC sc;
    sc.tile(p, row0);
    WEAVE_HGEMM_PROF_STAMP(prof, 3);
    bool done = false;
    if constexpr (weave_hgemm_sink_tma<Sink>::value) {
      if (sink.tma_store()) {
        const uint32_t ebuf =
            smem_base + WEAVE_HGEMM_P3_EPI_OFFSET + cw * (WEAVE_HGEMM_EPI_BUFS * WEAVE_HGEMM_EPI_BUF_BYTES);
        weave_hgemm_store_rows<Sink, WEAVE_HGEMM_P3_BN>(sink, p, sc, acc, ebuf, 0, n0, sink.tma_row(m0) + cw * 64, cw,
                                                        lrow, lane, ltid);
        weave_hgemm_store_rows_complete<Sink>(ltid);
        done = true;
      }
    }
    if (!done) {
#pragma unroll
      for (int j = 0; j < WEAVE_HGEMM_P3_BN / 8; ++j) {
        const int col = col0 + 8 * j;
        if (col < N) {
          float v[4] = {acc[4 * j + 0], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]};
          sc.apply(p, col, v);
          if (row0 < M) sink.store2(row0, col, v[0], v[1]);
          if (row0 + 8 < M) sink.store2(row0 + 8, col, v[2], v[3]);
        }
      }
    }
    WEAVE_HGEMM_PROF_STAMP(prof, 4);
    if constexpr (!weave_hgemm_sink_no_end<Sink>::value) {
      weave_hgemm_named_barrier_sync(WEAVE_HGEMM_CONSUMER_BARRIER_ID, 3 * 128);
      if (tid == 128) sink.end(seq);
    }
    WEAVE_HGEMM_PROF_STAMP(prof, 13);
  }
  if constexpr (weave_hgemm_sink_tma<Sink>::value) {
    if (ltid == 0) weave_hgemm_bulk_wait_all(); /* smem must outlive the stores that read it */
  }
  if (WEAVE_HGEMM_PROFILE && ltid == 0 && cw == 0) weave_hgemm_prof_edge(1);
  if (CL == 2) weave_hgemm_cluster_sync();
}

#endif /* WEAVE_HGEMM_PROMOTE3_CUH */
