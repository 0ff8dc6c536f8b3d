/*
 * GEMM + ReduceScatter past one node (docs/multinode.md, "The hierarchy"): a plan over a team of
 * n nodes of g ranks each (node-major ranks, as torchrun and mpirun number them) made of
 *   - n band plans on the node's team: band b is the rows of node b's ranks, one contiguous range
 *     of A and C; its flat plan (any strategy) leaves local rank j the node's sum of the rows of
 *     global rank b g + j, written into the rail step's partial;
 *   - the rail step on the team of local rank j's ranks (one per node): a reduce-scatter of those n
 *     pieces, so that global rank i g + j gets its rows of C (weave_row_split over the world, as a
 *     flat plan's) with the bias added once. By NCCL where it runs (a GPU per rank, equal pieces),
 *     else weave's bulk reduce-scatter over the rail team's heap.
 * The band plans and the rail step run one after the other on the caller's stream (no overlap yet).
 */
#ifndef WEAVE_PLAN_HIER_H
#define WEAVE_PLAN_HIER_H

#include "plan/hier_layout.h"
#include "plan/plan.h"

/* Whether `team` takes the hierarchical plan: more than one node, every node of the same size, ranks
 * numbered node-major. why says why not when nodes > 1 (else empty). */
int weave_hier_applies(weave_team_t team, char *why, size_t why_len);
/* Collective: the team's node team (team->sub[0], ranks by local index) and rail team (sub[1], ranks
 * by node), made by its first plan past one node with the team's heap size and timeout. */
weave_result_t weave_hier_teams(weave_team_t team, int g);
/* rc unchanged; on failure the sub-team's message becomes `team`'s last error, prefixed by what
 * (the caller reads the team it called with). */
weave_result_t weave_hier_pass(weave_team_t team, weave_team_t sub, weave_result_t rc, const char *what);
/* The rail step `step` without NCCL runs over the rail team's heap: WEAVE_SUCCESS where this rank
 * addresses every rail peer's heap, else WEAVE_ERROR_UNSUPPORTED on `team`, saying what NCCL would
 * have needed (`needs`). The same answer on every rank (weave_team_require_mapped). */
weave_result_t weave_hier_rail_heap_ok(weave_team_t team, weave_team_t rail, const char *step, const char *needs);
/* Collective: this rank's row layout (plan/hier_layout.h) and the node and rail teams, agreed on
 * every rank of `team` (so that a failure anywhere fails every rank). */
weave_result_t weave_hier_prepare(weave_team_t team, int M, weave_hier_layout_t *layout);
/* Collective over `team` (checked arguments, desc in this version's layout): *out gets a plan whose
 * execute runs the hierarchy. */
weave_result_t weave_hier_create(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                 weave_gemm_rs_plan_t *out);
/* One call (arguments checked against the outer plan already). */
weave_result_t weave_hier_enqueue(weave_gemm_rs_plan_t p, const void *A, const void *B, const float *scale_a,
                                  const float *scale_b, const void *bias, void *C_out, weave_stream_t stream);
/* Collective: the band plans, the rail step, the node and rail teams; frees p. */
weave_result_t weave_hier_destroy(weave_gemm_rs_plan_t p);

/* plan_create.c: a plan that never takes the hierarchy (the band plans and the rail step). */
weave_result_t weave_gemm_rs_plan_create_flat(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                              weave_gemm_rs_plan_t *plan);
/* plan_execute.c: a bulk plan's reduce-scatter alone, over a partial its caller writes between the two:
 * begin waits (on the stream) until every peer has finished reading the previous call's partial and
 * gives the partial ([M, N] of the plan's dtype, in the heap); end publishes it and reduces this
 * rank's rows into C_out, bias added. */
weave_result_t weave_gemm_rs_partial_begin(weave_gemm_rs_plan_t p, weave_stream_t stream, void **partial);
weave_result_t weave_gemm_rs_partial_end(weave_gemm_rs_plan_t p, const void *bias, void *C_out, weave_stream_t stream);

#endif
