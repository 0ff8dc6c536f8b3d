/*
 * The Hopper GEMM's ping-pong role (same Sink contract and block shape as the cooperative role,
 * gemm_hopper.cuh; the same ring, epilogue and register split).
 *
 * Why a second schedule: in the cooperative role both consumer warpgroups share one 128 x 256 tile,
 * so the tensor core idles while they write it out (the epilogue). At K = 1024 that is ~0.5 us of a
 * ~12 us tile, and an ablation with no output write ran 10% faster (docs/hopper_gemm.md).
 * Here each consumer warpgroup computes its own 128 x 128 half of the same 128 x 256 work item
 * (warpgroup 1 the left half, warpgroup 2 the right), and their main loops take turns, so one
 * warpgroup's epilogue runs under the other's main loop:
 *
 *     warpgroup 1:  [main L(i)]            [main L(i+1)]           ...
 *                              [epi L(i)]               [epi L(i+1)]
 *     warpgroup 2:             [main R(i)]              [main R(i+1)]
 *                                          [epi R(i)]               [epi R(i+1)]
 *
 * Outside the role nothing changes: items, coords(), begin()/end() and the sinks are those of the
 * cooperative role (a 128 x 256 item), so the launcher picks a schedule per call. The price: A is
 * loaded twice per item (once per half), 1.33x the L2 -> SM bytes per flop.
 *
 * Protocol
 *   Ring: WEAVE_HGEMM_PP_STAGES stages of A [128 x 64] + B half [128 x 64] (32 KiB; same bytes as
 *   the cooperative ring), full mbarrier (1 arrival + TMA bytes) and empty mbarrier (1 arrival: the
 *   one warpgroup that read it). The producer fills, per item, L's k-blocks then R's k-blocks; each
 *   consumer warpgroup consumes its k_blocks stages and skips the other's (weave_hgemm_pipe_skip,
 *   pipeline_state.h).
 *   Turns: two named barriers of 256 threads (WEAVE_HGEMM_PP_ORDER_BARRIER_ID, +1). Warpgroup 2
 *   syncs on the first before each main loop, warpgroup 1 arrives on it after issuing its main loop;
 *   the second works the other way round (warpgroup 1 syncs before every main loop but its first,
 *   and once more after its last so the arrivals balance). A warpgroup cannot arrive twice before
 *   its partner has synced, because it must first pass the partner's barrier: the rounds never mix.
 *   A warpgroup arrives as soon as its last wgmma group is issued, so the partner's first wgmmas
 *   queue behind it and the tensor core does not drain between turns.
 *   end(seq): called once per item, after both halves are stored: each warpgroup's thread 0, after
 *   its warpgroup's stores (barrier 2 + warpgroup; with kWeaveTmaPublish after its bulk stores
 *   completed), adds 1 to a shared counter (acq_rel, CTA scope) of slot item % 2; the one that sees
 *   1 resets it and calls end(). A slot is used again two items later, which the turns order after
 *   both adds.
 * CL == 2 (launched with 2-CTA clusters; requirements as for the cooperative role's clusters: items
 * in pairs seq, seq ^ 1 with the same col0, both in range): the two CTAs of a cluster walk their
 * items in lockstep; each loads its own A and one 64-column quarter of the B half and multicasts the
 * quarter to both, so a stage costs each CTA 24 KiB from L2 instead of 32. A stage is then written by
 * both producers, so its empty mbarrier counts one arrival from each CTA's consumer warpgroup and
 * every consumer arrives on both CTAs' barriers; a cluster barrier at entry (mbarrier inits visible)
 * and at exit (no CTA leaves while its peer may still write into it or signal it).
 * Data-parallel items only (no stream-K split); the launcher keeps it so.
 */
#ifndef WEAVE_GEMM_HOPPER_PINGPONG_CUH
#define WEAVE_GEMM_HOPPER_PINGPONG_CUH

#include "gemm/hopper/epilogue.cuh"
#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/pipeline.cuh"
#include "gemm/hopper/ptx.cuh"
#include "gemm/hopper/register_split.cuh"

#define WEAVE_HGEMM_PP_BN 128 /* columns of an item a consumer warpgroup computes */
#define WEAVE_HGEMM_PP_STAGE_BYTES (WEAVE_HGEMM_A_STAGE_BYTES + WEAVE_HGEMM_PP_BN * WEAVE_HGEMM_BK * 2)
/* as many stages as fit in the cooperative ring's bytes (6 with the default 4 x 48 KiB): the same
 * smem layout (barriers and epilogue staging where the cooperative role has them) */
#define WEAVE_HGEMM_PP_STAGES (WEAVE_HGEMM_STAGES * WEAVE_HGEMM_STAGE_BYTES / WEAVE_HGEMM_PP_STAGE_BYTES)
#define WEAVE_HGEMM_PP_ORDER_BARRIER_ID 5 /* and 6 */
static_assert(2 * WEAVE_HGEMM_PP_STAGES * 8 + 8 <= 1024,
              "ping-pong mbarriers and join counters exceed the barrier area");

/* DT, BCOL, CL, SC: as for the cooperative role (fp8: B [N, K] only, k-blocks of 128 elements). */
template <class Sink, int DT, int BCOL, int CL, class SC = weave_hgemm_scale_none>
__device__ __forceinline__ void weave_hgemm_role_pingpong(const weave_hgemm_params_t &p, unsigned char *smem,
                                                          int seq_begin, int seq_stride, int seq_count, Sink &sink) {
  static_assert(CL == 1 || CL == 2, "cluster size 1 or 2");
  static_assert(DT != WEAVE_FP8_E4M3 || BCOL, "fp8 reads B K-major only ([N, K])");
  constexpr int BKE = DT == WEAVE_FP8_E4M3 ? WEAVE_HGEMM_BK_FP8 : WEAVE_HGEMM_BK; /* K elements a stage */
  constexpr int S = WEAVE_HGEMM_PP_STAGES;
  const uint32_t smem_base = weave_hgemm_smem_u32(smem);
  const uint32_t full_bar = smem_base + WEAVE_HGEMM_STAGES * WEAVE_HGEMM_STAGE_BYTES;
  const uint32_t empty_bar = full_bar + S * 8;
  const uint32_t join = empty_bar + S * 8; /* two u32 counters */
  const int tid = threadIdx.x;
  const int kt = p.k_blocks;
  const uint32_t cta_rank = CL == 2 ? weave_hgemm_cluster_ctarank() : 0;

  if (tid == 0) {
    weave_hgemm_st_shared_u32(join, 0u);
    weave_hgemm_st_shared_u32(join + 4, 0u);
  }
  weave_hgemm_ring_init<CL>(full_bar, empty_bar, S, CL); /* a stage's one consumer warpgroup per CTA */

  if (!weave_hgemm_regs_split()) {
    /* ---------------- producer: per item, the left half's k-blocks, then the right half's ---- */
    if (tid == 0) {
      weave_hgemm_tma_prefetch_map(&p.tmap_a);
      weave_hgemm_tma_prefetch_map(BCOL ? (CL == 2 ? &p.tmap_b_quarter : &p.tmap_b_half) : &p.tmap_b);
      weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
      for (int seq = seq_begin; seq < seq_count; seq += seq_stride) {
        int m0, n0;
        sink.coords(seq, &m0, &n0);
        for (int h = 0; h < 2; ++h) {
          const int nh = n0 + h * WEAVE_HGEMM_PP_BN;
          for (int kb = 0; kb < kt; ++kb) {
            weave_hgemm_mbar_wait(empty_bar + 8 * pipe.stage, pipe.phase ^ 1);
            const uint32_t fb = full_bar + 8 * pipe.stage;
            weave_hgemm_mbar_expect_tx(fb, WEAVE_HGEMM_PP_STAGE_BYTES);
            weave_hgemm_load_stage<BCOL, WEAVE_HGEMM_PP_BN, CL>(p, smem_base + pipe.stage * WEAVE_HGEMM_PP_STAGE_BYTES,
                                                                fb, kb * BKE, m0, nh, cta_rank);
            weave_hgemm_pipe_skip(&pipe, 1, S);
          }
        }
      }
    }
  } else {
    /* ---------------- consumers: warpgroup 1 the left halves, warpgroup 2 the right ---------- */
    const int cw = (tid >> 7) - 1;
    const int ltid = tid & 127;
    const int warp = ltid >> 5, lane = ltid & 31;
    const uint64_t b_base = BCOL ? WEAVE_HGEMM_DESC_KMAJOR_SW128 : p.b_desc_base;
    const uint32_t b_kstep = BCOL ? 2u : (16u * 128u) >> 4;
    const int M = p.M, N = p.N;
    const int order_wait = WEAVE_HGEMM_PP_ORDER_BARRIER_ID + (cw == 0 ? 1 : 0);
    const int order_post = WEAVE_HGEMM_PP_ORDER_BARRIER_ID + (cw == 0 ? 0 : 1);
    float acc0[64], acc1[64]; /* rows 0-63 and 64-127 of the half-item */
    weave_hgemm_pipe_t pipe = weave_hgemm_pipe_start();
    if (cw == 1) weave_hgemm_pipe_skip(&pipe, kt, S); /* the right half's stages follow the left's */
    int item = 0;
    for (int seq = seq_begin; seq < seq_count; seq += seq_stride, ++item) {
      if (cw == 1 || item > 0) weave_hgemm_named_barrier_sync(order_wait, WEAVE_HGEMM_CONSUMER_THREADS);
      int prev_stage = 0;
      for (int kb = 0; kb < kt; ++kb) {
        weave_hgemm_mbar_wait(full_bar + 8 * pipe.stage, pipe.phase);
        const uint32_t sa = smem_base + pipe.stage * WEAVE_HGEMM_PP_STAGE_BYTES;
        const uint32_t sb = sa + WEAVE_HGEMM_A_STAGE_BYTES;
        const uint64_t da0 = weave_hgemm_desc(sa, WEAVE_HGEMM_DESC_KMAJOR_SW128);
        const uint64_t da1 = weave_hgemm_desc(sa + 64 * 128, WEAVE_HGEMM_DESC_KMAJOR_SW128);
        const uint64_t db = weave_hgemm_desc(sb, b_base);
        weave_hgemm_fence_regs<64>(acc0);
        weave_hgemm_fence_regs<64>(acc1);
        weave_hgemm_wgmma_fence();
#pragma unroll
        for (int k = 0; k < WEAVE_HGEMM_BK / 16; ++k) {
          const uint32_t scale_d = (kb > 0 || k > 0) ? 1u : 0u;
          if (DT == WEAVE_BF16) {
            WEAVE_HGEMM_WGMMA_M64N128K16("bf16", acc0, da0 + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
            WEAVE_HGEMM_WGMMA_M64N128K16("bf16", acc1, da1 + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          } else if (DT == WEAVE_FP16) {
            WEAVE_HGEMM_WGMMA_M64N128K16("f16", acc0, da0 + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
            WEAVE_HGEMM_WGMMA_M64N128K16("f16", acc1, da1 + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          } else { /* fp8: k32 steps of the same 32 bytes */
            WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(acc0, da0 + 2u * k, db + 2u * k, scale_d);
            WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(acc1, da1 + 2u * k, db + 2u * k, scale_d);
          }
        }
        weave_hgemm_wgmma_commit();
        weave_hgemm_fence_regs<64>(acc0);
        weave_hgemm_fence_regs<64>(acc1);
        weave_hgemm_wgmma_wait<1>();
        if (kb > 0 && ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * prev_stage);
        prev_stage = pipe.stage;
        weave_hgemm_pipe_skip(&pipe, 1, S);
      }
      /* the partner may issue now: its wgmmas queue behind this warpgroup's last group */
      weave_hgemm_named_barrier_arrive(order_post, WEAVE_HGEMM_CONSUMER_THREADS);
      weave_hgemm_wgmma_wait<0>();
      weave_hgemm_fence_regs<64>(acc0);
      weave_hgemm_fence_regs<64>(acc1);
      if (ltid == 0) weave_hgemm_release_stage<CL>(empty_bar + 8 * prev_stage);
      weave_hgemm_pipe_skip(&pipe, kt, S); /* the partner's half of the next item */

      int m0, n0;
      sink.coords(seq, &m0, &n0);
      const int c0 = n0 + cw * WEAVE_HGEMM_PP_BN;
      sink.begin(seq);
      const int lrow = warp * 16 + (lane >> 2);
      SC sc0, sc1; /* rows m0 + lrow (acc0) and m0 + 64 + lrow (acc1) */
      sc0.tile(p, m0 + lrow);
      sc1.tile(p, m0 + 64 + lrow);
      bool done = false;
      if constexpr (weave_hgemm_sink_tma<Sink>::value) {
        if (sink.tma_store()) {
          constexpr int NCH = WEAVE_HGEMM_PP_BN / (128 / (int)sizeof(typename Sink::TmaElem)); /* chunks a call */
          const uint32_t ebuf = smem_base + WEAVE_HGEMM_EPI_OFFSET + cw * (WEAVE_HGEMM_EPI_BYTES / 2);
          const int trow = sink.tma_row(m0);
          weave_hgemm_store_rows<Sink, WEAVE_HGEMM_PP_BN>(sink, p, sc0, acc0, ebuf, 0, c0, trow, cw, lrow, lane, ltid);
          weave_hgemm_store_rows<Sink, WEAVE_HGEMM_PP_BN>(sink, p, sc1, acc1, ebuf, NCH, c0, trow + 64, cw, lrow, lane,
                                                          ltid);
          weave_hgemm_store_rows_complete<Sink>(ltid);
          done = true;
        }
      }
      if (!done) {
        const int r0 = m0 + lrow;
#pragma unroll
        for (int j = 0; j < WEAVE_HGEMM_PP_BN / 8; ++j) {
          const int col = c0 + (lane & 3) * 2 + 8 * j;
          if (col < N) {
            float v[4] = {acc0[4 * j + 0], acc0[4 * j + 1], acc0[4 * j + 2], acc0[4 * j + 3]};
            float w[4] = {acc1[4 * j + 0], acc1[4 * j + 1], acc1[4 * j + 2], acc1[4 * j + 3]};
            sc0.apply(p, col, v);
            sc1.apply(p, col, w);
            if (r0 < M) sink.store2(r0, col, v[0], v[1]);
            if (r0 + 8 < M) sink.store2(r0 + 8, col, v[2], v[3]);
            if (r0 + 64 < M) sink.store2(r0 + 64, col, w[0], w[1]);
            if (r0 + 72 < M) sink.store2(r0 + 72, col, w[2], w[3]);
          }
        }
      }
      /* this half is stored; the second half to get here hands the item to end() */
      weave_hgemm_named_barrier_sync(2 + cw, 128);
      if (ltid == 0) {
        const uint32_t slot = join + 4u * (uint32_t)(item & 1);
        if (weave_hgemm_atom_add_acq_rel_cta_shared(slot, 1u) == 1u) {
          weave_hgemm_st_shared_u32(slot, 0u);
          sink.end(seq);
        }
      }
    }
    if (cw == 0 && item > 0) weave_hgemm_named_barrier_sync(order_wait, WEAVE_HGEMM_CONSUMER_THREADS);
    if constexpr (weave_hgemm_sink_tma<Sink>::value) {
      if (ltid == 0) weave_hgemm_bulk_wait_all(); /* smem must outlive the stores that read it */
    }
  }
  if (CL == 2) weave_hgemm_cluster_sync();
}

#endif /* WEAVE_GEMM_HOPPER_PINGPONG_CUH */
