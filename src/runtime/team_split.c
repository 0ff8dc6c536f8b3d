/*
 * weave_team_split: teams of subsets of a team's ranks (weave.h). Each group's first rank (by key,
 * then rank) makes a unique id, the team's bootstrap carries every group's id to its members, and
 * each group makes a team of its own over a bootstrap of that id (owned by the new team, as
 * weave_team_create_from_nccl's), on the same devices. The node teams of the plans past one node
 * (docs/multinode.md) are weave_team_split(team, node, rank).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

typedef struct {
  int color, key, rank;
} split_entry_t;

weave_result_t weave_team_split(weave_team_t team, int color, int key, const weave_config_t *config,
                                weave_team_t *sub) {
  const char *fn = "weave_team_split";
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: team is NULL", fn);
  if (!sub) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "%s: sub is NULL", fn);
  WEAVE_CHECK(weave_team_check_live(team, fn));
  *sub = NULL;
  const int world = team->world;
  split_entry_t mine = {color < 0 ? -1 : color, key, team->rank}, *all = calloc((size_t)world, sizeof(*all));
  weave_unique_id_t *ids = calloc((size_t)world, sizeof(*ids));
  weave_result_t rc = all && ids ? WEAVE_SUCCESS : WEAVE_ERROR_OUT_OF_MEMORY;
  if (rc == WEAVE_SUCCESS) rc = team->bootstrap->allgather(team->bootstrap, team->rank, &mine, all, sizeof(mine));
  /* this rank's group: its size, this rank's place in it (by key, then rank) and its first member */
  int size = 0, place = 0, first = -1;
  for (int r = 0; rc == WEAVE_SUCCESS && mine.color >= 0 && r < world; ++r) {
    if (all[r].color != mine.color) continue;
    ++size;
    if (all[r].key < key || (all[r].key == key && r < team->rank)) ++place;
    if (first < 0 || all[r].key < all[first].key) first = r; /* ties: the lowest rank, met first */
  }
  /* the first member of each group makes the group's id; every rank sends its (or zeros) */
  weave_unique_id_t id;
  memset(&id, 0, sizeof(id));
  weave_result_t local = WEAVE_SUCCESS;
  if (rc == WEAVE_SUCCESS && mine.color >= 0 && first == team->rank) local = weave_get_unique_id(&id);
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, local);
  if (rc == WEAVE_SUCCESS) rc = team->bootstrap->allgather(team->bootstrap, team->rank, &id, ids, sizeof(id));
  /* each group its team, the groups side by side; then every rank learns whether every group made it */
  weave_bootstrap_t *bs = NULL;
  local = WEAVE_SUCCESS;
  if (rc == WEAVE_SUCCESS && mine.color >= 0) {
    local = weave_bootstrap_create_uid(&ids[first], size, place, &bs);
    if (local == WEAVE_SUCCESS) local = weave_team_create(bs, place, team->info.device, config, sub);
    if (local == WEAVE_SUCCESS) {
      (*sub)->owned_bootstrap = bs; /* destroyed with the new team */
    } else if (bs) {
      weave_bootstrap_destroy(bs);
    }
  }
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, local);
  if (rc != WEAVE_SUCCESS && *sub) { /* another group failed: this group's team goes too (collective in it) */
    weave_team_destroy(*sub);
    *sub = NULL;
  }
  free(all);
  free(ids);
  return rc;
}
