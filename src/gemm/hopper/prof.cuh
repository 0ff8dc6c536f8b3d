/*
 * Profiling hooks of the Hopper GEMM's cooperative and three-warpgroup fp8 roles: a diagnostic, off
 * by default.
 *
 * Build with -DWEAVE_HGEMM_PROFILE=1 in CMAKE_CUDA_FLAGS: the roles write clock64()
 * stamps of each tile's phases (per block, warpgroup, tile; see WEAVE_HGEMM_PROF_* below) to a device
 * array that weave_hgemm_profile_save() (gemm_hopper.cu) writes to a file; the last launch wins.
 * scripts/hgemm_profile.py reads it. Adds global stores to the kernel: for breakdowns, not speed.
 */
#ifndef WEAVE_HGEMM_PROF_CUH
#define WEAVE_HGEMM_PROF_CUH

#include "gemm/hopper/ptx.cuh"

#ifndef WEAVE_HGEMM_PROFILE
#define WEAVE_HGEMM_PROFILE 0
#endif
#define WEAVE_HGEMM_PROF_BLOCKS 132
#define WEAVE_HGEMM_PROF_TILES 16 /* the producer's last tile slot holds the block's entry / exit */
#define WEAVE_HGEMM_PROF_EVENTS 24
#define WEAVE_HGEMM_PROF_GROUP_EV 16 /* first of the group-end events below */
#define WEAVE_HGEMM_PROF_GROUP_KB 8  /* k-block of the first group-end stamp */
#define WEAVE_HGEMM_PROF_GROUPS 8    /* group-end stamps a tile */
#define WEAVE_HGEMM_PROF_WHO 4       /* consumer warpgroups 0-2, then the producer */
#define WEAVE_HGEMM_PROF_PRODUCER 3
/* events per tile (consumer slots): 0 loop top, 1 first stage full, 2 main loop done, 3 epilogue
 * start, 4 epilogue done, 5 + 2c / 6 + 2c chunk c (c < 4) written / released, 13 tile done (past
 * the tile-end barrier and end() where the sink has them), 14 globaltimer at the loop top; 16 + i
 * (three-warpgroup fp8 role) the warpgroup's group of k-block WEAVE_HGEMM_PROF_GROUP_KB + i done
 * (past its wgmma wait), for how the three warpgroups' groups share the tensor cores; 15
 * (three-warpgroup fp8 role) the tile's late stages: (k-blocks whose one look found the next stage
 * still on its way) << 32 | cycles spent waiting for them after the adds; producer slots: 0 / 1
 * before / after the first empty wait, 15 the tile's full rings: (k-blocks whose empty barrier was
 * not yet free) << 32 | cycles spent waiting for them. A look is an mbarrier.try_wait, which itself
 * suspends for a while: both counts see only waits longer than that. */
#define WEAVE_HGEMM_PROF_LATE_EV 15
#if WEAVE_HGEMM_PROFILE
#include "weave_trace.h" /* weave_trace_now: %globaltimer */
/* [block][0, 1, 2: consumer warpgroup (2: the three-warpgroup role's third), 3: producer][tile][event] */
static __device__ long long weave_hgemm_prof[WEAVE_HGEMM_PROF_BLOCKS][WEAVE_HGEMM_PROF_WHO][WEAVE_HGEMM_PROF_TILES]
                                            [WEAVE_HGEMM_PROF_EVENTS];
static __device__ __forceinline__ long long *weave_hgemm_prof_slot(int who, int tile) {
  if (blockIdx.x >= WEAVE_HGEMM_PROF_BLOCKS || tile >= WEAVE_HGEMM_PROF_TILES - (who == WEAVE_HGEMM_PROF_PRODUCER))
    return nullptr;
  return weave_hgemm_prof[blockIdx.x][who][tile];
}
/* the block's entry (i = 0, thread 0) and exit (i = 1, consumer warpgroup 0 after its last stores):
 * globaltimer (ns) and clock64 at [block][PRODUCER][TILES - 1][2i, 2i + 1] */
static __device__ __forceinline__ void weave_hgemm_prof_edge(int i) {
  if (blockIdx.x >= WEAVE_HGEMM_PROF_BLOCKS) return;
  long long *e = weave_hgemm_prof[blockIdx.x][WEAVE_HGEMM_PROF_PRODUCER][WEAVE_HGEMM_PROF_TILES - 1];
  e[2 * i] = (long long)weave_trace_now();
  e[2 * i + 1] = clock64();
}
#define WEAVE_HGEMM_PROF_STAMP(slot, e) \
  do {                                  \
    if (slot) (slot)[e] = clock64();    \
  } while (0)
#define WEAVE_HGEMM_PROF_STAMP_NS(slot, e)              \
  do {                                                  \
    if (slot) (slot)[e] = (long long)weave_trace_now(); \
  } while (0)
/* the three-warpgroup role's group of k-block kb done: its stamp where kb is one of those stamped */
static __device__ __forceinline__ void weave_hgemm_prof_group_end(long long *slot, int kb) {
  if ((unsigned)(kb - WEAVE_HGEMM_PROF_GROUP_KB) < WEAVE_HGEMM_PROF_GROUPS)
    WEAVE_HGEMM_PROF_STAMP(slot, WEAVE_HGEMM_PROF_GROUP_EV + kb - WEAVE_HGEMM_PROF_GROUP_KB);
}
/* an mbarrier wait, its count and cycles summed into *late (count << 32 | cycles) */
static __device__ __forceinline__ void weave_hgemm_mbar_wait_counted(uint32_t bar, uint32_t parity, long long *late) {
  const long long t0 = clock64();
  weave_hgemm_mbar_wait(bar, parity);
  *late += (1ll << 32) + (clock64() - t0);
}
#else /* everything below compiles to nothing: the slot is a constant null pointer */
static __device__ __forceinline__ long long *weave_hgemm_prof_slot(int, int) { return nullptr; }
static __device__ __forceinline__ void weave_hgemm_prof_edge(int) {}
static __device__ __forceinline__ void weave_hgemm_prof_group_end(long long *, int) {}
static __device__ __forceinline__ void weave_hgemm_mbar_wait_counted(uint32_t bar, uint32_t parity, long long *) {
  weave_hgemm_mbar_wait(bar, parity);
}
#define WEAVE_HGEMM_PROF_STAMP(slot, e) \
  do {                                  \
  } while (0)
#define WEAVE_HGEMM_PROF_STAMP_NS(slot, e) \
  do {                                     \
  } while (0)
#endif

#endif /* WEAVE_HGEMM_PROF_CUH */
