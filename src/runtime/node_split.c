/* Which node each rank of a team is on (internal.h, weave_node_split). */
#include <stdio.h>

#include "runtime/internal.h"

int weave_node_split(const weave_host_id_t *ids, int world, int ranks_per_node, int *node_of_rank, char *why,
                     size_t why_len) {
  if (why && why_len) why[0] = 0;
  if (world < 1 || !ids || !node_of_rank) return -1;
  int nodes = 0;
  if (ranks_per_node > 0) {
    /* pretend nodes of consecutive ranks; each must lie on one host (its ranks share memory) */
    for (int r = 0; r < world; ++r) {
      node_of_rank[r] = r / ranks_per_node;
      if (r % ranks_per_node && !weave_same_host(&ids[r], &ids[r - 1])) {
        if (why && why_len)
          snprintf(why, why_len,
                   "WEAVE_RANKS_PER_NODE=%d puts ranks %d (%.40s) and %d (%.40s) in one node but they are on different "
                   "hosts",
                   ranks_per_node, r - 1, ids[r - 1].name, r, ids[r].name);
        return -1;
      }
    }
    return (world + ranks_per_node - 1) / ranks_per_node;
  }
  /* by host: a new node at each rank whose host no earlier rank has */
  for (int r = 0; r < world; ++r) {
    node_of_rank[r] = -1;
    for (int q = 0; q < r; ++q)
      if (weave_same_host(&ids[q], &ids[r])) {
        node_of_rank[r] = node_of_rank[q];
        break;
      }
    if (node_of_rank[r] < 0) node_of_rank[r] = nodes++;
  }
  return nodes;
}
