/*
 * The rows of a GEMM + ReduceScatter plan past one node (plan/hier.h), host arithmetic only: for a
 * world of `nodes` nodes of g ranks (node-major), band b is the rows of node b's ranks (weave_row_split
 * over the world), and local rank j's partial holds its piece of every band in order (the rows of
 * global rank b g + j), which the rail step splits over the nodes as weave_row_split(piece_rows, nodes).
 */
#ifndef WEAVE_PLAN_HIER_LAYOUT_H
#define WEAVE_PLAN_HIER_LAYOUT_H

#include "weave_device_types.h" /* WEAVE_MAX_WORLD */

typedef struct {
  int band_begin[WEAVE_MAX_WORLD], band_rows[WEAVE_MAX_WORLD]; /* of node b's rows in A and C */
  int piece_row[WEAVE_MAX_WORLD]; /* where band b's rows of this local rank start in its partial */
  int piece_rows;                 /* the partial's rows: this local rank's rows of every band */
} weave_hier_layout_t;

/* The layout for global rank `rank`. 0, or -1 for arguments out of range (nodes * g > WEAVE_MAX_WORLD,
 * M < 0) or when the rail step's split would not give `rank` its own rows (never, by construction:
 * checked so that a change to the row split cannot break it silently). */
int weave_hier_layout(int M, int nodes, int g, int rank, weave_hier_layout_t *out);

#endif
