/*
 * Where a role stands in the Hopper GEMM's shared-memory ring (pipeline.cuh): a stage index and the
 * mbarrier phase parity of that stage's current round, advanced by one call. Plain C with
 * host-device functions, so that tests/test_streamk.c checks on the CPU the stepping the kernels run.
 *
 * The ring has `stages` stages used in order 0, 1, ..., stages - 1, 0, ...; position q of the ring's
 * life is stage q % stages in round q / stages. An mbarrier completes one phase per round, and a wait
 * on it names the parity of the phase it waits for: the consumer waits on `full` with `phase`, the
 * producer on `empty` with `phase ^ 1` (the first round's empty stages need no wait). Every role that
 * touches the ring keeps one weave_hgemm_pipe_t and moves it past each position it uses or skips.
 *
 * The ping-pong ring (gemm_hopper_pingpong.cuh): the producer fills positions 0, 1, 2, ... in order,
 * item i's left half at positions 2i * kt .. (2i + 1) * kt - 1 and its right half after them; each
 * consumer warpgroup skips the partner's kt positions with weave_hgemm_pipe_skip.
 */
#ifndef WEAVE_HGEMM_PIPELINE_STATE_H
#define WEAVE_HGEMM_PIPELINE_STATE_H

#include "weave_device_types.h" /* WEAVE_HOST_DEVICE */

/* Member order: either is correct, but nvcc numbers the fields' registers in member order and
 * ptxas's instruction schedule follows that numbering; with phase first the standalone kernels
 * compile to the machine code verified on the GPU (scripts/sass_diff.py). */
typedef struct {
  unsigned phase; /* parity of the round: flips each time the stage index wraps */
  int stage;      /* 0 .. stages - 1 */
} weave_hgemm_pipe_t;

/* The ring's first position: stage 0, parity 0. */
static inline WEAVE_HOST_DEVICE weave_hgemm_pipe_t weave_hgemm_pipe_start(void) {
  weave_hgemm_pipe_t p;
  p.stage = 0;
  p.phase = 0;
  return p;
}

/* Past one position. */
static inline WEAVE_HOST_DEVICE void weave_hgemm_pipe_advance(weave_hgemm_pipe_t *p, int stages) {
  if (++p->stage == stages) {
    p->stage = 0;
    p->phase ^= 1;
  }
}

/* Past n >= 0 positions at once. */
static inline WEAVE_HOST_DEVICE void weave_hgemm_pipe_skip(weave_hgemm_pipe_t *p, int n, int stages) {
  const int t = p->stage + n;
  p->phase ^= (unsigned)((t / stages) & 1);
  p->stage = t % stages;
}

#endif /* WEAVE_HGEMM_PIPELINE_STATE_H */
