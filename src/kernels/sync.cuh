/*
 * Internal synchronisation used by weave's kernels. The ordering rule everywhere: a producer makes
 * its data visible with a release operation at system scope on the flag (after a block barrier that
 * puts the other threads' stores before it), a consumer polls with acquire loads at system scope and
 * only then (after a block barrier) reads the data. Every wait is bounded by the team's timeout and
 * leaves an error record in the rank's heap header for weave_team_sync.
 */
#ifndef WEAVE_SYNC_CUH
#define WEAVE_SYNC_CUH

#include <stdint.h>

#include "weave_device.cuh"

/* The epoch of the call a kernel belongs to: one more than the last call this rank finished. Read
 * once per block, at its start, into a register (an asm load: never re-read after the call's last
 * block has advanced it). */
__device__ __forceinline__ uint32_t weave_call_epoch(const uint32_t *finished) {
  return weave_ld<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>(finished) + 1u;
}

/* Block-level end of a call's last kernel: the last block of this rank to arrive (counted in
 * `arrive`, which grows by `nblocks` per call) publishes `epoch` into every peer's `flags[rank]` and
 * records it as this rank's finished call in `*finished` (every block has read the epoch before it
 * arrived; the next kernel in stream order sees the store). Called by all threads. */
__device__ __forceinline__ void weave_block_arrive_and_signal(const weave_device_team_t &t, uint32_t *arrive,
                                                              uint32_t nblocks, uint32_t epoch, uint32_t *flags,
                                                              uint32_t *finished) {
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t old = weave_atomic_add<WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_SYS>(arrive, 1u);
    if (old + 1u == epoch * nblocks) {
      for (int p = 0; p < t.world; ++p)
        weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&t, flags + t.rank, p), epoch);
      weave_st<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>(finished, epoch);
    }
  }
}

#endif
