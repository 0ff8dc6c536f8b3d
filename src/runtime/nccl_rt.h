/*
 * NCCL for the baseline strategy, loaded at run time (dlopen of libnccl.so.2) so weave builds and
 * runs where NCCL is absent. Only ranks on distinct GPUs can use it (NCCL refuses two ranks on one
 * GPU); weave then compares against cuBLASLt + ncclReduceScatter (GEMM + ReduceScatter) and ncclAllGather +
 * cuBLASLt (AllGather + GEMM).
 */
#ifndef WEAVE_NCCL_RT_H
#define WEAVE_NCCL_RT_H

#include "weave.h"

typedef struct weave_nccl weave_nccl_t;

/* Collective over the team. WEAVE_ERROR_UNSUPPORTED (and a message) when NCCL cannot be loaded. */
weave_result_t weave_nccl_create(weave_team_t team, weave_nccl_t **out);
/* Collective: a communicator for a baseline where NCCL can run it, i.e. no rank of the team shares its
 * GPU (NCCL refuses two ranks on one) and libnccl.so.2 starts; else NULL, and an INFO line saying the
 * plan (what) goes on without NCCL (instead). Never fails the plan. */
weave_nccl_t *weave_nccl_try_create(weave_team_t team, const char *what, const char *instead);
/* recvcount elements of dtype per rank; sums in dtype (NCCL's own arithmetic). */
weave_result_t weave_nccl_reduce_scatter(weave_nccl_t *n, const void *send, void *recv, size_t recvcount,
                                         weave_dtype_t dtype, weave_stream_t stream);
/* sendcount elements of dtype from every rank, stacked in rank order into recv (ncclAllGather). */
weave_result_t weave_nccl_all_gather(weave_nccl_t *n, const void *send, void *recv, size_t sendcount,
                                     weave_dtype_t dtype, weave_stream_t stream);
void weave_nccl_destroy(weave_nccl_t *n);

#endif
