/* CPU test of the MPI bootstrap (libweave_mpi, src/runtime/bootstrap_mpi.c), run by mpirun with 3
 * processes: allgathers of varied sizes checked exactly and against MPI_Allgather, barriers, the
 * bootstrap's rank info, and a split communicator whose rank 0 is not MPI_COMM_WORLD's. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/internal.h"
#include "weave_mpi.h"

static unsigned char pattern(int rank, int iter, size_t i) {
  return (unsigned char)(rank * 29 + iter * 11 + (int)i * 5 + 3);
}

/* Allgathers (1..1024 bytes) and barriers over `bs`, rank `rank` of `comm`. */
static void exercise(weave_bootstrap_t *bs, MPI_Comm comm, int rank, int iters) {
  int world = bs->world;
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES];
  unsigned char *out = malloc((size_t)world * WEAVE_BOOTSTRAP_MAX_BYTES);
  unsigned char *ref = malloc((size_t)world * WEAVE_BOOTSTRAP_MAX_BYTES);
  for (int it = 0; it < iters; ++it) {
    size_t bytes = it == 0   ? 1
                   : it == 1 ? WEAVE_BOOTSTRAP_MAX_BYTES
                             : 1 + (size_t)(it * 53) % WEAVE_BOOTSTRAP_MAX_BYTES;
    for (size_t i = 0; i < bytes; ++i) in[i] = pattern(rank, it, i);
    weave_result_t rc = bs->allgather(bs, rank, in, out, bytes);
    CHECK_MSG(rc == WEAVE_SUCCESS, "rank %d allgather %d: %s", rank, it, weave_get_last_error(NULL));
    if (rc != WEAVE_SUCCESS) break;
    int bad = 0;
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < bytes; ++i) bad += out[(size_t)r * bytes + i] != pattern(r, it, i);
    CHECK_MSG(bad == 0, "rank %d allgather %d (%zu bytes): %d wrong bytes", rank, it, bytes, bad);
    if (it % 10 == 0) { /* the same answer as MPI's own */
      MPI_Allgather(in, (int)bytes, MPI_BYTE, ref, (int)bytes, MPI_BYTE, comm);
      CHECK(memcmp(ref, out, (size_t)world * bytes) == 0);
    }
    if (it % 4 == 0)
      CHECK_MSG(bs->barrier(bs, rank) == WEAVE_SUCCESS, "rank %d barrier %d: %s", rank, it, weave_get_last_error(NULL));
  }
  free(out);
  free(ref);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_mpi(MPI_COMM_WORLD, NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_create_mpi(MPI_COMM_NULL, &bs) == WEAVE_ERROR_INVALID_ARGUMENT && bs == NULL);
  weave_result_t rc = weave_bootstrap_create_mpi(MPI_COMM_WORLD, &bs);
  CHECK_MSG(rc == WEAVE_SUCCESS, "rank %d: %s", rank, weave_get_last_error(NULL));
  if (bs) {
    int w = -1, r = -1, lr = -1;
    CHECK(weave_bootstrap_info(bs, &w, &r, &lr) == WEAVE_SUCCESS && w == size && r == rank);
    CHECK_MSG(lr >= 0 && lr < size, "local rank %d", lr);
    exercise(bs, MPI_COMM_WORLD, rank, 120);
    CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
  }

  /* Reverse order in two colors: the sub-communicators' rank 0 (the hub) is a high world rank. */
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &sub);
  int sub_rank, sub_size;
  MPI_Comm_rank(sub, &sub_rank);
  MPI_Comm_size(sub, &sub_size);
  bs = NULL;
  rc = weave_bootstrap_create_mpi(sub, &bs);
  CHECK_MSG(rc == WEAVE_SUCCESS, "world rank %d (sub rank %d): %s", rank, sub_rank, weave_get_last_error(NULL));
  if (bs) {
    int w = -1, r = -1;
    CHECK(weave_bootstrap_info(bs, &w, &r, NULL) == WEAVE_SUCCESS && w == sub_size && r == sub_rank);
    exercise(bs, sub, sub_rank, 40);
    CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
  }
  MPI_Comm_free(&sub);

  int failures = check_failures, checks = check_count, all_failures = 0, all_checks = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &all_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_bootstrap_mpi: %d ranks, %d checks, %d failed\n", size, all_checks, all_failures);
  MPI_Finalize();
  return all_failures ? 1 : 0;
}
