/* GEMM + ReduceScatter past one node: band plans inside the node, a rail step between nodes (hier.h). */
#include "plan/hier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct weave_hier {
  weave_team_t node_team, rail_team; /* team->sub: this rank's node (g ranks), its rail (one rank a node) */
  int nodes, g;
  weave_gemm_rs_plan_t band[WEAVE_MAX_WORLD]; /* NULL for a band without rows */
  int band_begin[WEAVE_MAX_WORLD];            /* band b's first row of A and C */
  int piece_row[WEAVE_MAX_WORLD];             /* where band b's rows for this local rank start in the partial */
  weave_gemm_rs_plan_t rail;                  /* bulk plan on the rail team: its partial holds the pieces */
  weave_nccl_t *nccl;                         /* the rail step by ncclReduceScatter (NULL: weave's) */
  int piece_rows;                             /* rows of the partial: this local rank's rows of every band */
  const struct hier_rail_ops *rail_ops;       /* how the rail step runs (NULL: no rows for this rank) */
};

/* The rail step behind one interface (docs/multinode.md, "The interface"): begin gives the partial
 * that the band plans write (once the previous call's readers are done with it), end reduce-scatters
 * it over the rail team into C_out, bias added. */
typedef struct hier_rail_ops {
  const char *name;
  weave_result_t (*begin)(weave_gemm_rs_plan_t p, weave_stream_t stream, void **partial);
  weave_result_t (*end)(weave_gemm_rs_plan_t p, const void *bias, void *C_out, weave_stream_t stream);
} hier_rail_ops_t;

/* weave's, over the rail team's heap: the bulk plan's wait, publish and reduce kernels */
static weave_result_t rail_heap_begin(weave_gemm_rs_plan_t p, weave_stream_t stream, void **partial) {
  return weave_hier_pass(p->team, p->hier->rail_team, weave_gemm_rs_partial_begin(p->hier->rail, stream, partial),
                         "weave_gemm_rs_execute, the rail step");
}
static weave_result_t rail_heap_end(weave_gemm_rs_plan_t p, const void *bias, void *C_out, weave_stream_t stream) {
  return weave_hier_pass(p->team, p->hier->rail_team, weave_gemm_rs_partial_end(p->hier->rail, bias, C_out, stream),
                         "weave_gemm_rs_execute, the rail step");
}
static const hier_rail_ops_t rail_heap = {"weave's reduce-scatter over the heap", rail_heap_begin, rail_heap_end};

/* NCCL's, over the rail communicator: stream order alone keeps the partial until it is read */
static weave_result_t rail_nccl_begin(weave_gemm_rs_plan_t p, weave_stream_t stream, void **partial) {
  (void)stream;
  *partial = p->hier->rail->params.data;
  return WEAVE_SUCCESS;
}
static weave_result_t rail_nccl_end(weave_gemm_rs_plan_t p, const void *bias, void *C_out, weave_stream_t stream) {
  struct weave_hier *h = p->hier;
  const int rows = h->piece_rows / h->nodes;
  if (weave_nccl_reduce_scatter(h->nccl, h->rail->params.data, C_out, (size_t)rows * p->N, p->out_dtype, stream) !=
      WEAVE_SUCCESS)
    return weave_fail(p->team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: the rail step's ncclReduceScatter failed");
  const int err = bias ? weave_launch_add_bias(C_out, rows, p->N, p->out_dtype, bias, stream) : 0;
  return err ? weave_fail(p->team, WEAVE_ERROR_CUDA, "weave_gemm_rs_execute: bias: %s", weave_cuda_error_string(err))
             : WEAVE_SUCCESS;
}
static const hier_rail_ops_t rail_nccl = {"ncclReduceScatter", rail_nccl_begin, rail_nccl_end};

int weave_hier_applies(weave_team_t team, char *why, size_t why_len) {
  if (why_len) why[0] = 0;
  if (team->nodes < 2) return 0;
  const int g = team->world / team->nodes;
  int regular = team->world % team->nodes == 0;
  for (int r = 0; regular && r < team->world; ++r) regular = team->node_of_rank[r] == r / g;
  if (!regular)
    snprintf(why, why_len, "%d nodes of unequal size or ranks not numbered node by node: one flat plan", team->nodes);
  return regular;
}

static void hier_free(weave_gemm_rs_plan_t p) {
  struct weave_hier *h = p->hier;
  if (h) {
    for (int b = 0; b < h->nodes; ++b)
      if (h->band[b]) weave_gemm_rs_plan_destroy(h->band[b]);
    if (h->rail) weave_gemm_rs_plan_destroy(h->rail);
    weave_nccl_destroy(h->nccl);
    free(h); /* the node and rail teams stay with the team, for its next plan past one node */
  }
  free(p);
}

/* Band plans on the node team (has_bias off: the bias is added once, after the rail step). */
static weave_result_t hier_bands(weave_gemm_rs_plan_t p, const weave_gemm_rs_desc_t *desc,
                                 const weave_hier_layout_t *l) {
  struct weave_hier *h = p->hier;
  weave_gemm_rs_desc_t bd = *desc;
  bd.has_bias = 0;
  for (int b = 0; b < h->nodes; ++b) {
    h->band_begin[b] = l->band_begin[b];
    h->piece_row[b] = l->piece_row[b];
    if (l->band_rows[b] == 0) continue; /* the same on every rank of the node */
    WEAVE_CHECK(
        weave_hier_pass(p->team, h->node_team,
                        weave_gemm_rs_plan_create_flat(h->node_team, l->band_rows[b], p->N, p->K, &bd, &h->band[b]),
                        "past one node, a band plan"));
  }
  h->piece_rows = l->piece_rows;
  return WEAVE_SUCCESS;
}

/* The rail step: a bulk plan over this local rank's pieces (its row split gives each rail rank its
 * rows: weave_hier_layout checks it), and NCCL's reduce-scatter where it runs on equal pieces. */
static weave_result_t hier_rail(weave_gemm_rs_plan_t p) {
  struct weave_hier *h = p->hier;
  if (h->piece_rows == 0) return WEAVE_SUCCESS; /* no rows for this local rank on any node */
  weave_gemm_rs_desc_t rd = WEAVE_GEMM_RS_DESC_INIT;
  rd.dtype = p->out_dtype;
  rd.b_layout = WEAVE_LAYOUT_COL;
  rd.strategy = WEAVE_STRATEGY_BULK;
  rd.has_bias = p->desc.has_bias;
  WEAVE_CHECK(weave_hier_pass(p->team, h->rail_team,
                              weave_gemm_rs_plan_create_flat(h->rail_team, h->piece_rows, p->N, 16, &rd, &h->rail),
                              "past one node, the rail step"));
  h->rail->params.upstream_error = weave_team_error_code(h->node_team);
  /* NCCL where it runs (a GPU per rank) on pieces of equal size (its reduce-scatter's one count) */
  if (h->piece_rows % h->nodes == 0)
    h->nccl = weave_nccl_try_create(h->rail_team, "hierarchical plan's rail step", rail_heap.name);
  h->rail_ops = h->nccl ? &rail_nccl : &rail_heap;
  if (!h->nccl)
    WEAVE_CHECK(weave_hier_rail_heap_ok(p->team, h->rail_team, "the rail step",
                                        "a GPU per rank, libnccl.so.2 and M's rows in equal pieces per node"));
  return WEAVE_SUCCESS;
}

/* The team's node and rail teams, made by its first plan past one node (collective; the same on
 * every rank: all have them or none), with the team's heap size and timeout. */
weave_result_t weave_hier_teams(weave_team_t team, int g) {
  if (team->sub[0]) return WEAVE_SUCCESS;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = team->heap_size;
  cfg.timeout_ms = team->timeout_ms;
  const int node = team->rank / g, local = team->rank % g;
  weave_team_t node_team = NULL, rail_team = NULL;
  weave_result_t rc = weave_team_split(team, node, local, &cfg, &node_team);
  if (rc == WEAVE_SUCCESS) rc = weave_team_split(team, local, node, &cfg, &rail_team);
  if (rc != WEAVE_SUCCESS) {
    if (node_team) weave_team_destroy(node_team);
    return rc;
  }
  /* Every rank of the team runs its sub-plans at once (the nodes' band plans side by side): a GPU that
   * the team's ranks share is shared by that many, whatever the sub-team counts, and the fused
   * kernels' block budgets must leave room for all of them (or one node's kernels could hold the
   * SMs that another's waiting kernels need). */
  for (int i = 0; i < 2; ++i) {
    weave_team_t sub = i ? rail_team : node_team;
    sub->beside_others = sub->info.ranks_on_device < team->info.ranks_on_device;
    if (sub->beside_others) sub->info.ranks_on_device = team->info.ranks_on_device;
    sub->parent = team;
  }
  __atomic_store_n(&team->sub[0], node_team, __ATOMIC_RELEASE); /* weave_team_poll reads them from a watchdog */
  __atomic_store_n(&team->sub[1], rail_team, __ATOMIC_RELEASE);
  return WEAVE_SUCCESS;
}

/* across hosts weave's steps over the heap cannot reach the other nodes' heaps: NCCL or nothing */
weave_result_t weave_hier_rail_heap_ok(weave_team_t team, weave_team_t rail, const char *step, const char *needs) {
  char what[256], where[96];
  snprintf(what, sizeof(what), "past one node, %s without NCCL (it needs %s)", step, needs);
  snprintf(where, sizeof(where), "past one node, %s", step);
  return weave_hier_pass(team, rail, weave_team_require_mapped(rail, what), where);
}

weave_result_t weave_hier_pass(weave_team_t team, weave_team_t sub, weave_result_t rc, const char *what) {
  if (rc == WEAVE_SUCCESS || !sub) return rc;
  char msg[sizeof(sub->last_error)];
  snprintf(msg, sizeof(msg), "%s", sub->last_error);
  return weave_fail(team, rc, "%s: %.900s", what, msg);
}

weave_result_t weave_hier_prepare(weave_team_t team, int M, weave_hier_layout_t *layout) {
  const int g = team->world / team->nodes;
  weave_result_t rc = weave_hier_layout(M, team->nodes, g, team->rank, layout) == 0
                          ? WEAVE_SUCCESS
                          : weave_fail(team, WEAVE_ERROR_INTERNAL,
                                       "past one node: no row layout for M %d, %d nodes x %d", M, team->nodes, g);
  if (rc == WEAVE_SUCCESS) rc = weave_hier_teams(team, g);
  return weave_team_agree(team, rc);
}

weave_result_t weave_hier_create(weave_team_t team, int M, int N, int K, const weave_gemm_rs_desc_t *desc,
                                 weave_gemm_rs_plan_t *out) {
  weave_gemm_rs_plan_t p = weave_gemm_rs_plan_new(team, M, N, K, desc);
  struct weave_hier *h = (struct weave_hier *)calloc(1, sizeof(*h));
  if (!p || !h) {
    free(p);
    free(h);
    return weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "hierarchical plan: host allocation failed");
  }
  p->slot_dtype = p->out_dtype;
  p->hier = h;
  h->nodes = team->nodes;
  h->g = team->world / team->nodes;
  /* agreed after each step: a node whose band plans failed must not leave the other nodes waiting
   * in the rail step's collective creation */
  weave_hier_layout_t l;
  weave_result_t rc = weave_hier_prepare(team, M, &l);
  h->node_team = team->sub[0];
  h->rail_team = team->sub[1];
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, hier_bands(p, desc, &l));
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, hier_rail(p));
  if (rc != WEAVE_SUCCESS) {
    hier_free(p);
    return rc;
  }
  const weave_gemm_rs_plan_t first = h->band[0] ? h->band[0] : h->band[h->nodes - 1];
  if (first) {
    p->strategy = first->strategy;
    p->tiling = first->tiling; /* plan_info's tiles: one band plan's (over the node's ranks) */
    p->gemm_blocks = first->gemm_blocks;
    p->comm_blocks = first->comm_blocks;
    p->chosen_by = first->chosen_by;
    p->choose_ms = first->choose_ms;
  }
  for (int b = 0; b < h->nodes; ++b) p->mem_bytes += h->band[b] ? h->band[b]->mem_bytes : 0;
  p->mem_bytes += h->rail ? h->rail->mem_bytes : 0;
  snprintf(p->why, sizeof(p->why), "%d nodes x %d ranks: inside each node %s (%.160s); between nodes %s", h->nodes,
           h->g, weave_strategy_name(p->strategy), first ? first->why : "no rows",
           h->rail_ops ? h->rail_ops->name : "nothing (no rows)");
  weave_log(WEAVE_LOG_INFO, team, "plan %dx%dx%d past one node: %s", M, N, K, p->why);
  *out = p;
  return WEAVE_SUCCESS;
}

weave_result_t weave_hier_enqueue(weave_gemm_rs_plan_t p, const void *A, const void *B, const float *scale_a,
                                  const float *scale_b, const void *bias, void *C_out, weave_stream_t stream) {
  struct weave_hier *h = p->hier;
  const size_t row_a = (size_t)p->K * weave_dtype_size(p->desc.dtype),
               row_c = (size_t)p->N * weave_dtype_size(p->out_dtype);
  void *partial = NULL; /* none where this local rank has no rows on any node */
  if (h->rail_ops) WEAVE_CHECK(h->rail_ops->begin(p, stream, &partial));
  const int scaled = p->desc.scale_mode != WEAVE_SCALE_NONE;
  for (int b = 0; b < h->nodes; ++b) {
    if (!h->band[b]) continue;
    const char *Ab = (const char *)A + (size_t)h->band_begin[b] * row_a;
    const float *sa = scale_a && p->desc.scale_mode == WEAVE_SCALE_ROW ? scale_a + h->band_begin[b] : scale_a;
    void *Cb = partial ? (char *)partial + (size_t)h->piece_row[b] * row_c : NULL;
    WEAVE_CHECK(weave_hier_pass(p->team, h->node_team,
                                scaled ? weave_gemm_rs_execute_scaled(h->band[b], Ab, B, sa, scale_b, NULL, Cb, stream)
                                       : weave_gemm_rs_execute(h->band[b], Ab, B, NULL, Cb, stream),
                                "weave_gemm_rs_execute, a band plan"));
  }
  return h->rail_ops ? h->rail_ops->end(p, bias, C_out, stream) : WEAVE_SUCCESS;
}

weave_result_t weave_hier_destroy(weave_gemm_rs_plan_t p) {
  hier_free(p);
  return WEAVE_SUCCESS;
}
