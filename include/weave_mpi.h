/*
 * weave's MPI bootstrap: ranks are the processes of an MPI communicator. In libweave_mpi (link it and
 * libweave), built when CMake finds an MPI; libweave itself never depends on MPI.
 *
 * MPI only carries the unique id (rank 0 of `comm` makes it, MPI_Bcast sends it); everything after
 * that is weave's socket bootstrap (weave_bootstrap_create_uid), so every wait is bounded by
 * WEAVE_TIMEOUT_MS and MPI is not used again: the bootstrap may outlive MPI_Finalize.
 */
#ifndef WEAVE_MPI_H
#define WEAVE_MPI_H

#include <mpi.h>

#include "weave.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over `comm` (MPI initialized): a bootstrap whose world is comm's size and whose rank is
 * this process's rank in comm; destroy it with weave_bootstrap_destroy. When rank 0 cannot make the
 * id, every rank fails (rank 0 with the reason, the others saying that the id never came). */
WEAVE_API weave_result_t weave_bootstrap_create_mpi(MPI_Comm comm, weave_bootstrap_t **bootstrap);

#ifdef __cplusplus
}
#endif
#endif /* WEAVE_MPI_H */
