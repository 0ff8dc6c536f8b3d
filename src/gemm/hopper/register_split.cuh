/*
 * The register split of the Hopper GEMM's block (setmaxnreg): the producer warpgroup gives registers
 * to the consumer warpgroups (two of 232 in the 384-thread block, whose consumers hold 128 fp32
 * accumulators a thread; three of 152 in the three-warpgroup fp8 role's 512-thread block); and the
 * way back to the launch count before code that every thread runs.
 */
#ifndef WEAVE_HGEMM_REGISTER_SPLIT_CUH
#define WEAVE_HGEMM_REGISTER_SPLIT_CUH

#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/ptx.cuh"

#define WEAVE_HGEMM_PRODUCER_REGS 40
#define WEAVE_HGEMM_CONSUMER_REGS 232
/* What every thread of a THREADS-thread block gets at launch (65536 / THREADS, rounded down to 8).
 * Each split keeps within the block's total: 40 + 2 * 232 = 3 * 168; 40 + 3 * 152 <= 4 * 128. */
#define WEAVE_HGEMM_LAUNCH_REGS(THREADS) ((65536 / (THREADS)) & ~7)
static_assert(WEAVE_HGEMM_PRODUCER_REGS + 2 * WEAVE_HGEMM_CONSUMER_REGS <= 3 * WEAVE_HGEMM_LAUNCH_REGS(384),
              "the two-consumer register split exceeds the launch count");
static_assert(WEAVE_HGEMM_P3_PRODUCER_REGS + 3 * WEAVE_HGEMM_P3_CONSUMER_REGS <= 4 * WEAVE_HGEMM_LAUNCH_REGS(512),
              "the three-consumer register split exceeds the launch count");

/* The role's register split: warpgroup 0 (producer) down to PRODUCER_REGS, the consumer warpgroups
 * up to CONSUMER_REGS; true on the latter. The role starts with it; so must the other blocks of a
 * kernel that runs the role in some blocks only (see the restore below). */
template <int PRODUCER_REGS = WEAVE_HGEMM_PRODUCER_REGS, int CONSUMER_REGS = WEAVE_HGEMM_CONSUMER_REGS>
__device__ __forceinline__ bool weave_hgemm_regs_split() {
  if ((threadIdx.x >> 7) == 0) {
    weave_hgemm_setmaxnreg_dec<PRODUCER_REGS>();
    return false;
  }
  weave_hgemm_setmaxnreg_inc<CONSUMER_REGS>();
  return true;
}

/* Give every warpgroup of a THREADS-thread block the launch register count back (after the role,
 * before code that every thread runs). A kernel whose other blocks do something else should run that under
 * weave_hgemm_regs_split() too and restore on every path: ptxas (CUDA 13.0) gives the
 * consumers their 232 registers only when every path of the kernel has the same split; otherwise it
 * fits them into the launch count and spills (seen in the fused GEMM+RS kernel: up to 204 bytes).
 * Order matters: warpgroup 0 may take its registers back only after warpgroups 1-2 have taken theirs
 * (split) and given them back (here). Were its setmaxnreg.inc first, it could take back what it had
 * just released while the consumers still wait in their own inc, for ever (without the barrier, one
 * rank's kernel of the 1000-call GPU test was seen to hang so). The consumers give back, then arrive;
 * warpgroup 0 waits for them, then takes. */
template <int THREADS = WEAVE_HGEMM_THREADS>
__device__ __forceinline__ void weave_hgemm_regs_restore() {
  constexpr int LAUNCH_REGS = WEAVE_HGEMM_LAUNCH_REGS(THREADS);
  if ((threadIdx.x >> 7) == 0) {
    weave_hgemm_named_barrier_sync(WEAVE_HGEMM_RESTORE_BARRIER_ID, THREADS);
    weave_hgemm_setmaxnreg_inc<LAUNCH_REGS>();
  } else {
    weave_hgemm_setmaxnreg_dec<LAUNCH_REGS>();
    weave_hgemm_named_barrier_arrive(WEAVE_HGEMM_RESTORE_BARRIER_ID, THREADS);
  }
}

#endif /* WEAVE_HGEMM_REGISTER_SPLIT_CUH */
