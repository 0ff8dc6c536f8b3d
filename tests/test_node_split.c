/* CPU test of the node split (runtime/node_split.c): ranks of one host form a node, numbered in the
 * order of their first rank; WEAVE_RANKS_PER_NODE's pretend nodes of consecutive ranks, refused
 * across hosts; every result against counting by hand. Then this host's identity and
 * WEAVE_TEST_HOST. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/internal.h"

static weave_host_id_t host(int h) {
  weave_host_id_t id;
  memset(&id, 0, sizeof(id));
  id.hash = 1000u + (uint64_t)h;
  snprintf(id.name, sizeof(id.name), "host%d", h);
  return id;
}

int main(void) {
  weave_host_id_t ids[WEAVE_MAX_WORLD];
  int node[WEAVE_MAX_WORLD];
  char why[256];
  /* by host, hosts interleaved: nodes in the order of their first rank */
  const int hosts[6] = {3, 3, 1, 3, 1, 7};
  for (int r = 0; r < 6; ++r) ids[r] = host(hosts[r]);
  CHECK(weave_node_split(ids, 6, 0, node, why, sizeof(why)) == 3);
  const int want[6] = {0, 0, 1, 0, 1, 2};
  for (int r = 0; r < 6; ++r) CHECK_MSG(node[r] == want[r], "rank %d: node %d, want %d", r, node[r], want[r]);
  /* one host: one node; every rank its own host: world nodes */
  for (int r = 0; r < 8; ++r) ids[r] = host(5);
  CHECK(weave_node_split(ids, 8, 0, node, why, sizeof(why)) == 1 && node[7] == 0);
  for (int r = 0; r < 8; ++r) ids[r] = host(r);
  CHECK(weave_node_split(ids, 8, 0, node, why, sizeof(why)) == 8 && node[5] == 5);
  /* a host name alike but another boot (hash): another node */
  ids[1] = host(0);
  ids[1].hash ^= 1;
  CHECK(weave_node_split(ids, 2, 0, node, why, sizeof(why)) == 2);
  /* pretend nodes of 3 ranks on one host: 3, 3, 2 */
  for (int r = 0; r < 8; ++r) ids[r] = host(9);
  CHECK(weave_node_split(ids, 8, 3, node, why, sizeof(why)) == 3);
  for (int r = 0; r < 8; ++r) CHECK(node[r] == r / 3);
  /* pretend nodes that would span two hosts are refused, naming the ranks and hosts */
  for (int r = 0; r < 4; ++r) ids[r] = host(r < 2 ? 1 : 2);
  CHECK(weave_node_split(ids, 4, 2, node, why, sizeof(why)) == 2);
  CHECK(weave_node_split(ids, 4, 4, node, why, sizeof(why)) == -1);
  CHECK_MSG(strstr(why, "ranks 1 (host1) and 2 (host2)") != NULL, "why: %s", why);
  /* bad arguments */
  CHECK(weave_node_split(ids, 0, 0, node, why, sizeof(why)) == -1);
  CHECK(weave_node_split(NULL, 4, 0, node, why, sizeof(why)) == -1);
  /* this host's identity: stable; WEAVE_TEST_HOST makes processes of one host act as other hosts
   * (each value another host, the same value the same one, unset this host again) */
  unsetenv("WEAVE_TEST_HOST");
  weave_host_id_t me, again, a, a2, b;
  weave_host_id(&me);
  weave_host_id(&again);
  CHECK(weave_same_host(&me, &again));
  setenv("WEAVE_TEST_HOST", "pretend-host-0", 1);
  weave_host_id(&a);
  weave_host_id(&a2);
  setenv("WEAVE_TEST_HOST", "pretend-host-1", 1);
  weave_host_id(&b);
  unsetenv("WEAVE_TEST_HOST");
  weave_host_id(&again);
  CHECK(!weave_same_host(&me, &a) && weave_same_host(&a, &a2) && !weave_same_host(&a, &b));
  CHECK(weave_same_host(&me, &again));
  return check_summary("test_node_split");
}
