/*
 * The memory behind a team's symmetric heap: one CUDA VMM allocation per rank, mapped into every
 * rank's address space. How peers reach it depends on where they live:
 *   - the same process (threads bootstrap): the owner's own mapping, with access granted to the
 *     peer's device;
 *   - another process of this host: the owner exports the allocation as a POSIX file descriptor,
 *     the descriptors travel over a Unix domain socket (SCM_RIGHTS, weave_bootstrap_exchange_fds),
 *     and the peer imports and maps it;
 *   - another host: not supported (multi-node NVLink needs fabric handles; only this file would
 *     change).
 * The handle type is a detail of symmetric_heap.c; the rest of weave sees base pointers.
 */
#ifndef WEAVE_RUNTIME_SYMMETRIC_HEAP_H
#define WEAVE_RUNTIME_SYMMETRIC_HEAP_H

#include <stddef.h>

#include "weave.h"

typedef struct weave_symmetric_heap weave_symmetric_heap_t;

/* Collective over the team's bootstrap. Allocates `bytes` (rounded up to the allocation granularity)
 * on the team's device, makes every rank's heap of this host addressable here: bases[r] for r in
 * [0, world), NULL for the ranks of other hosts (that needs fabric handles, not supported).
 * ranks_on_device gets the ranks of the team (in any process) whose device is this rank's GPU,
 * local_on_device those of them in this process. */
weave_result_t weave_symmetric_heap_create(weave_team_t team, size_t bytes, weave_symmetric_heap_t **heap, void **bases,
                                           int *ranks_on_device, int *local_on_device);
/* Unmaps the peers' heaps and releases this rank's. The caller makes sure no kernel of any rank still
 * touches them (team destroy: device synchronize, then a barrier). NULL is a no-op. */
void weave_symmetric_heap_destroy(weave_symmetric_heap_t *heap);

#endif
