/*
 * AUTO plans (GEMM + ReduceScatter and AllGather + GEMM): which strategy runs, and how that was
 * decided (weave_choice_t in weave.h). In order:
 *
 *   cache        rank 0's entry in the tuning cache (plan/tune.h), used by every rank
 *   measurement  no entry, WEAVE_AUTOTUNE on, no stream being captured: the candidates timed on
 *                scratch inputs of the plan's shape (the baseline, fused with the planner's split,
 *                bulk, then fused with one communication block less and more unless the cost model
 *                predicts them 10% slower than the best measured), in three interleaved rounds,
 *                the slowest rank's median deciding; the two fastest, when within 3% of each
 *                other, three rounds more; rank 0 stores the winner
 *   model        otherwise, or when the timing could not run: weave_auto_model (plan_model.h)
 *
 * Collective (inside weave_gemm_rs_plan_create, before the plan takes any memory). The candidates
 * are plans of their own, created, timed and destroyed one after another (in every round), so the
 * heap must hold one of them at a time; the scratch inputs are allocated on each rank's device beside them and freed
 * after. No caller memory is touched: the plan has no inputs yet.
 */
#ifndef WEAVE_GEMM_RS_AUTOTUNE_H
#define WEAVE_GEMM_RS_AUTOTUNE_H

#include "plan/tune.h"
#include "runtime/internal.h"
#include "weave.h"

typedef struct {
  weave_strategy_t strategy;    /* never AUTO */
  int gemm_blocks, comm_blocks; /* fused: the split measured or cached (0: the planner's) */
  weave_choice_t chosen_by;
  double choose_ms;
  char why[320];
} weave_auto_choice_t;

/* The local view the model and the tuner need of a plan of `strategy` (no collective, no memory):
 * the fused split the planner would give, or an error if it could not plan it here. */
typedef weave_result_t (*weave_plan_split_fn)(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                              int *gemm_blocks, int *comm_blocks);

/* desc: read and checked on every rank, strategy AUTO. Fails only where the team's bootstrap fails;
 * every other failure (no memory for the scratch inputs, a candidate that cannot run, an unwritable
 * cache) ends in another way of choosing, said in out->why. */
weave_result_t weave_autotune_choose(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                     const weave_env_t *env, weave_plan_split_fn split, weave_auto_choice_t *out);

/* The same for an AllGather + GEMM plan (desc strategy AUTO; ag_gemm.c): the cache (its key's reduce
 * WEAVE_TUNE_GATHER), else the baseline, the fused kernel (where the Hopper role runs it) and bulk
 * timed as above, else `model`, the plan's own model's choice (model_why: its reason). */
weave_result_t weave_autotune_choose_ag(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                                        const weave_env_t *env, weave_strategy_t model, const char *model_why,
                                        weave_auto_choice_t *out);

/* The tuning cache's key of a plan on this rank (plan/tune.h). */
void weave_tune_key_for(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                        weave_tune_key_t *key);
void weave_tune_key_for_ag(weave_team_t team, int M, int N, int K, const weave_ag_gemm_desc_t *desc,
                           weave_tune_key_t *key);

/* on = 1 / 0 around the creation of a candidate plan on this thread: it records no trace
 * (WEAVE_TRACE is for the caller's plans). plan_create.c. */
void weave_plan_untraced(int on);

/* The measured times' verdicts (ms[i] < 0: candidate i did not run), candidates in the order they
 * were timed, the baseline first. weave_tune_close_race: the fastest and the second fastest (-1
 * where fewer ran; a tie keeps the earlier first) and whether the second is within 3% of the first,
 * a race timed again. weave_tune_pick: the choice, where each later candidate must beat the best so
 * far by 1% (the noise of one shared GPU: the earlier, the baseline first, keeps a near tie); -1 when
 * none ran. */
int weave_tune_close_race(const double *ms, int n, int *first, int *second);
int weave_tune_pick(const double *ms, int n);

/* 1 when a stream capture is under way that timing calls could break: on this thread's legacy or
 * per-thread default stream, or on a blocking stream of this device (seen through the legacy stream). */
int weave_capture_active(void);

#endif
