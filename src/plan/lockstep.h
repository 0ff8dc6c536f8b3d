/*
 * Ranks sharing a GPU (threads of a process, or processes under MPS) run their calls in lockstep: a
 * call returns once it has finished, so that no rank's stream holds work queued behind a kernel that
 * spins on its peers. Seen with four rank threads (gpu_lifecycle_test): with calls queued behind a
 * spinning kernel, a late rank's first kernel sometimes did not start until its peers timed out (CUDA
 * promises no concurrency between streams); in lockstep it always started. Not while the stream is
 * captured into a graph (a captured call is not run). The wait is bounded: every wait of the kernels
 * is. Every plan type (GEMM + ReduceScatter, AllGather + GEMM) uses these.
 */
#ifndef WEAVE_PLAN_LOCKSTEP_H
#define WEAVE_PLAN_LOCKSTEP_H

#include "weave.h"

/* The event a plan's calls record and wait for, or NULL where no rank shares this rank's GPU (or the
 * team has one rank). Local; before the plan's agreement (it may wait for the device). */
weave_result_t weave_lockstep_create(weave_team_t team, void **event);
void weave_lockstep_destroy(void *event);
/* After a call is enqueued on `stream`: waits for it (event NULL, or a capture: returns at once).
 * fn names the public call in the message. */
weave_result_t weave_lockstep_wait(weave_team_t team, void *event, const char *fn, weave_stream_t stream);

#endif
