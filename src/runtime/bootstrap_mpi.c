/*
 * MPI bootstrap (libweave_mpi): rank 0 of the communicator makes a unique id, MPI_Bcast hands it to
 * every rank, and each creates its rank of the socket bootstrap with it. Only the public API is used
 * here: this file is a separate library on top of libweave.
 */
#include <stdint.h>
#include <string.h>

#include "weave_mpi.h"

weave_result_t weave_bootstrap_create_mpi(MPI_Comm comm, weave_bootstrap_t **bootstrap) {
  weave_unique_id_t empty;
  memset(&empty, 0, sizeof(empty));
  /* a local argument error: weave_bootstrap_create_uid records the message, before any collective */
  if (!bootstrap) return weave_bootstrap_create_uid(&empty, 1, 0, NULL);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized || comm == MPI_COMM_NULL) return WEAVE_ERROR_INVALID_ARGUMENT;
  int rank = 0, size = 0;
  if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS)
    return WEAVE_ERROR_BOOTSTRAP;

  /* rank 0's result travels with the id, so a failure there cannot leave the others waiting */
  struct {
    int32_t rc;
    weave_unique_id_t id;
  } msg;
  memset(&msg, 0, sizeof(msg));
  if (rank == 0) msg.rc = (int32_t)weave_get_unique_id(&msg.id);
  if (MPI_Bcast(&msg, (int)sizeof(msg), MPI_BYTE, 0, comm) != MPI_SUCCESS) return WEAVE_ERROR_BOOTSTRAP;
  if (msg.rc != WEAVE_SUCCESS) {
    if (rank == 0) return (weave_result_t)msg.rc; /* weave_get_unique_id's own message */
    /* records "the unique id is empty: the rank that should have made it ... failed" */
    weave_bootstrap_create_uid(&empty, size, rank, bootstrap);
    return (weave_result_t)msg.rc;
  }
  return weave_bootstrap_create_uid(&msg.id, size, rank, bootstrap);
}
