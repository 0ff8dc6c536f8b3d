/*
 * weave's Hopper GEMM (TMA + wgmma, warp-specialized, persistent): the device side, as a "role" that
 * any kernel of 384 threads (blockDim.x == 384) runs in some or all of its blocks. Include this file.
 *
 * Parts (each includes only what is below it here; the host side is gemm_hopper.h):
 *   gemm_hopper.cuh              this file: the Sink contract and weave_hgemm_role, the entry point
 *   gemm_hopper_cooperative.cuh  cooperative schedule: both consumer warpgroups on one 128 x 256 tile
 *   gemm_hopper_pingpong.cuh     ping-pong schedule: each consumer warpgroup a 128 x 128 half, in turns
 *   gemm_hopper_promote3.cuh     fp8 with fp32 accumulation on three consumer warpgroups, 192 x 128
 *                                tiles, 512 threads (the standalone kernel; included by gemm_hopper.cu)
 *   epilogue.cuh                 optional sink capabilities and the TMA-store epilogue
 *   scales.cuh                   scale policies: fp8 dequantization of a tile's accumulators
 *   streamk_fixup.cuh            stream-K: the sum of a split tile's segments
 *   register_split.cuh           setmaxnreg split between producer and consumers, and its undoing
 *   pipeline.cuh                 the smem ring: mbarrier init, a stage's TMA loads, stage release
 *   pipeline_state.h             (stage, phase) of a role in the ring and its advance (C, CPU-tested)
 *   prof.cuh                     clock64 profiling hooks (off unless -DWEAVE_HGEMM_PROFILE=1)
 *   ptx.cuh                      the inline-PTX wrappers
 *   tile_scheduler.h             work items: grouped order, stream-K plan and walk, schedule choice (C)
 *   gemm_hopper.h                host interface: tile and smem constants, parameters, launcher (C)
 *   cluster_launch.cuh           host: launch configs with or without 2-CTA clusters, how many fit
 *
 * Sink contract (a struct the caller passes by reference):
 *   __device__ void coords(int seq, int* row0, int* col0);   // first row / column of C of tile `seq`
 *       // (element offsets: any row0, so a caller may tile row ranges that do not start at a
 *       //  multiple of BM, e.g. each owner's chunk of rows in the fused GEMM+RS kernel)
 *   __device__ void begin(int seq);   // every consumer thread, before its first store2 of the tile
 *   __device__ void store2(int row, int col, float v0, float v1);
 *       // raw fp32 accumulators of C[row][col], C[row][col+1]; col even; row < M, col < N;
 *       // v1 meaningful only if col + 1 < N (the sink checks). Alpha/bias/cast: the sink's job.
 *   __device__ void end(int seq);     // ONE consumer thread, after all 256 consumer threads are done
 *                                     // with store2 for that tile (named barrier 1, 256 threads).
 *   coords() is called by the producer thread and by every consumer thread: it must be a pure
 *   function of seq.
 * Optional capabilities (TMA-store epilogue, no end()): epilogue.cuh.
 *
 * Synchronization used: one block-wide barrier at entry (after the mbarrier init; all 384 threads
 * must call the role), then only mbarriers and named barriers among the consumers:
 * WEAVE_HGEMM_CONSUMER_BARRIER_ID (256; end of a tile unless the sink declares kWeaveNoEnd, stream-K
 * fixup) and 2 + warpgroup (128 each; TMA-store epilogue). Producer threads other than thread 0
 * return at once (after setmaxnreg). After the role returns, the producer warpgroup runs with 40
 * registers and the consumers with 232 (weave_hgemm_regs_restore gives the launch count back).
 */
#ifndef WEAVE_GEMM_HOPPER_CUH
#define WEAVE_GEMM_HOPPER_CUH

#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/gemm_hopper_cooperative.cuh"
#include "gemm/hopper/gemm_hopper_pingpong.cuh"

/* The cooperative role for the (dtype, B layout) in p, chosen at run time (one uniform branch), on CL
 * CTAs per cluster (CL == 2: launched with 2-CTA clusters, pairs of tile rows sharing B or, SHARE_A,
 * pairs of tile columns sharing A; requirements in gemm_hopper_cooperative.cuh). Whole tiles only
 * (no stream-K). */
template <int CL, class Sink, bool SHARE_A = false>
__device__ __forceinline__ void weave_hgemm_role(const weave_hgemm_params_t &p, unsigned char *smem, int seq_begin,
                                                 int seq_stride, int seq_count, Sink &sink) {
  typedef weave_hgemm_scale_none SC;
  if (p.dtype == WEAVE_BF16) {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hgemm_role_coop<Sink, WEAVE_BF16, 1, CL, false, SC, false, SHARE_A>(p, smem, seq_begin, seq_stride,
                                                                                seq_count, sink);
    else
      weave_hgemm_role_coop<Sink, WEAVE_BF16, 0, CL, false, SC, false, SHARE_A>(p, smem, seq_begin, seq_stride,
                                                                                seq_count, sink);
  } else {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hgemm_role_coop<Sink, WEAVE_FP16, 1, CL, false, SC, false, SHARE_A>(p, smem, seq_begin, seq_stride,
                                                                                seq_count, sink);
    else
      weave_hgemm_role_coop<Sink, WEAVE_FP16, 0, CL, false, SC, false, SHARE_A>(p, smem, seq_begin, seq_stride,
                                                                                seq_count, sink);
  }
}

/* The cooperative role for fp8 inputs (e4m3, B [N, K]) with p.scales applied to each tile's
 * accumulators before the sink sees them (weave_hgemm_scale_fp8, mode read at run time), CL CTAs per
 * cluster (SHARE_A as above), accumulation promoted to fp32 (PROMOTE) or the tensor cores' own. A
 * separate entry so that the 16-bit kernels do not carry the fp8 code. */
template <int CL, bool PROMOTE, class Sink, bool SHARE_A = false>
__device__ __forceinline__ void weave_hgemm_role_fp8(const weave_hgemm_params_t &p, unsigned char *smem, int seq_begin,
                                                     int seq_stride, int seq_count, Sink &sink) {
  weave_hgemm_role_coop<Sink, WEAVE_FP8_E4M3, 1, CL, false, weave_hgemm_scale_fp8, PROMOTE, SHARE_A>(
      p, smem, seq_begin, seq_stride, seq_count, sink);
}

#endif /* WEAVE_GEMM_HOPPER_CUH */
