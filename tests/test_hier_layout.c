/*
 * The rows of the plans past one node (plan/hier_layout.h), for every M up to 300 (M < world
 * included) and every layout of up to 8 nodes of up to 8 ranks: the bands tile [0, M) in node order,
 * each band is its node's ranks' rows, each local rank's pieces tile its partial, and the rail step's
 * split of the partial gives every rank exactly its rows of weave_row_split over the world.
 */
#include <stdio.h>

#include "common/schedule.h"
#include "plan/hier_layout.h"

static int failures;

#define EXPECT(cond, ...)                           \
  do {                                              \
    if (!(cond)) {                                  \
      if (failures++ < 20) {                        \
        printf("FAIL %s:%d: ", __FILE__, __LINE__); \
        printf(__VA_ARGS__);                        \
        printf("\n");                               \
      }                                             \
    }                                               \
  } while (0)

int main(void) {
  int layouts = 0;
  for (int nodes = 1; nodes <= 8; ++nodes)
    for (int g = 1; g <= 8; ++g)
      for (int M = 0; M <= 300; ++M) {
        const int world = nodes * g;
        for (int r = 0; r < world; ++r) {
          weave_hier_layout_t l;
          EXPECT(weave_hier_layout(M, nodes, g, r, &l) == 0, "M %d nodes %d g %d rank %d: refused", M, nodes, g, r);
          int next = 0;
          for (int b = 0; b < nodes; ++b) { /* bands tile [0, M) */
            EXPECT(l.band_begin[b] == next, "M %d %dx%d band %d begins at %d, want %d", M, nodes, g, b, l.band_begin[b],
                   next);
            int rows_of_node = 0, begin, rows;
            for (int j = 0; j < g; ++j) {
              weave_split_rows_of(M, world, b * g + j, &begin, &rows);
              rows_of_node += rows;
            }
            EXPECT(l.band_rows[b] == rows_of_node, "M %d %dx%d band %d has %d rows, want %d", M, nodes, g, b,
                   l.band_rows[b], rows_of_node);
            next += l.band_rows[b];
            /* inside the band, the flat plan of the node team gives local rank j these rows */
            const int local = r % g;
            int in_band_begin, in_band_rows;
            weave_split_rows_of(l.band_rows[b], g, local, &in_band_begin, &in_band_rows);
            weave_split_rows_of(M, world, b * g + local, &begin, &rows);
            EXPECT(l.band_begin[b] + in_band_begin == begin && in_band_rows == rows,
                   "M %d %dx%d band %d: the node plan gives local %d rows %d+%d, want %d+%d", M, nodes, g, b, local,
                   l.band_begin[b] + in_band_begin, in_band_rows, begin, rows);
            const int piece_end = b + 1 < nodes ? l.piece_row[b + 1] : l.piece_rows;
            EXPECT(piece_end - l.piece_row[b] == rows, "M %d %dx%d band %d: piece of %d rows, want %d", M, nodes, g, b,
                   piece_end - l.piece_row[b], rows);
          }
          EXPECT(next == M, "M %d %dx%d: bands cover %d rows", M, nodes, g, next);
          ++layouts;
        }
      }
  weave_hier_layout_t l;
  EXPECT(weave_hier_layout(10, 9, 8, 0, &l) == -1, "72 ranks accepted (WEAVE_MAX_WORLD %d)", WEAVE_MAX_WORLD);
  EXPECT(weave_hier_layout(-1, 2, 2, 0, &l) == -1, "M -1 accepted");
  EXPECT(weave_hier_layout(10, 2, 2, 4, &l) == -1, "rank 4 of 4 accepted");
  EXPECT(weave_hier_layout(10, 2, 2, 0, NULL) == -1, "NULL out accepted");
  printf("test_hier_layout: %d layouts, %d failures\n", layouts, failures);
  return failures != 0;
}
