/* The rows of a plan past one node (hier_layout.h). */
#include "plan/hier_layout.h"

#include <string.h>

#include "common/schedule.h"

int weave_hier_layout(int M, int nodes, int g, int rank, weave_hier_layout_t *out) {
  if (!out || M < 0 || nodes < 1 || g < 1 || nodes * g > WEAVE_MAX_WORLD || rank < 0 || rank >= nodes * g) return -1;
  memset(out, 0, sizeof(*out));
  const int world = nodes * g, node = rank / g, local = rank % g;
  int piece = 0, begin, rows;
  for (int b = 0; b < nodes; ++b) {
    for (int j = 0; j < g; ++j) {
      weave_split_rows_of(M, world, b * g + j, &begin, &rows);
      if (j == 0) out->band_begin[b] = begin;
      out->band_rows[b] += rows;
    }
    weave_split_rows_of(M, world, b * g + local, &begin, &rows);
    out->piece_row[b] = piece;
    piece += rows;
  }
  out->piece_rows = piece;
  /* the rail step gives rail rank `node` weave_row_split(piece_rows, nodes, node): this rank's rows */
  int want_begin, want_rows, got_begin, got_rows;
  weave_split_rows_of(M, world, rank, &want_begin, &want_rows);
  weave_split_rows_of(piece, nodes, node, &got_begin, &got_rows);
  return got_rows == want_rows && got_begin == out->piece_row[node] ? 0 : -1;
}
