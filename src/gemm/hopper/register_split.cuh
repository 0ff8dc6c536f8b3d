/*
 * The register split of the Hopper GEMM's 384-thread block (setmaxnreg): the producer warpgroup
 * gives registers to the two consumer warpgroups, which hold 128 fp32 accumulators a thread; and the
 * way back to the launch count before code that all 384 threads run.
 */
#ifndef WEAVE_HGEMM_REGISTER_SPLIT_CUH
#define WEAVE_HGEMM_REGISTER_SPLIT_CUH

#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/ptx.cuh"

#define WEAVE_HGEMM_PRODUCER_REGS 40
#define WEAVE_HGEMM_CONSUMER_REGS 232
/* what every thread of a 384-thread block gets at launch (65536 / 384, rounded down to 8); the
 * split above keeps the block's total: 40 + 2 * 232 = 3 * 168 */
#define WEAVE_HGEMM_LAUNCH_REGS 168

/* The role's register split: warpgroup 0 (producer) down to 40, warpgroups 1-2 (consumers) up to
 * 232; true on the latter. The role starts with it; so must the other blocks of a kernel that runs
 * the role in some blocks only (see the restore below). */
__device__ __forceinline__ bool weave_hgemm_regs_split() {
  if ((threadIdx.x >> 7) == 0) {
    weave_hgemm_setmaxnreg_dec<WEAVE_HGEMM_PRODUCER_REGS>();
    return false;
  }
  weave_hgemm_setmaxnreg_inc<WEAVE_HGEMM_CONSUMER_REGS>();
  return true;
}

/* Give every warpgroup the launch register count back (after the role, before code that all 384
 * threads run). A kernel whose other blocks do something else should run that under
 * weave_hgemm_regs_split() too and restore on every path: ptxas (CUDA 13.0) gives the
 * consumers their 232 registers only when every path of the kernel has the same split; otherwise it
 * fits them into the launch count and spills (seen in the fused GEMM+RS kernel: up to 204 bytes).
 * Order matters: warpgroup 0 may take its registers back only after warpgroups 1-2 have taken theirs
 * (split) and given them back (here). Were its setmaxnreg.inc first, it could take back what it had
 * just released while warpgroups 1-2 still wait in their own inc, for ever (without the barrier, one
 * rank's kernel of the 1000-call GPU test was seen to hang so). Warpgroups 1-2 give back, then arrive;
 * warpgroup 0 waits for them, then takes. */
__device__ __forceinline__ void weave_hgemm_regs_restore() {
  if ((threadIdx.x >> 7) == 0) {
    weave_hgemm_named_barrier_sync(WEAVE_HGEMM_RESTORE_BARRIER_ID, WEAVE_HGEMM_THREADS);
    weave_hgemm_setmaxnreg_inc<WEAVE_HGEMM_LAUNCH_REGS>();
  } else {
    weave_hgemm_setmaxnreg_dec<WEAVE_HGEMM_LAUNCH_REGS>();
    weave_hgemm_named_barrier_arrive(WEAVE_HGEMM_RESTORE_BARRIER_ID, WEAVE_HGEMM_THREADS);
  }
}

#endif /* WEAVE_HGEMM_REGISTER_SPLIT_CUH */
