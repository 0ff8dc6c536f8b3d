/*
 * Bootstrap for ranks that are threads of one process: a generation-counted barrier on a mutex and
 * a condition variable, and an allgather through a shared buffer framed by two barriers. Every
 * wait is bounded by WEAVE_TIMEOUT_MS, measured on the monotonic clock (a step of the wall clock
 * neither fires it early nor stretches it), so a rank that never arrives gives an error naming it,
 * not a hang.
 * The other bootstraps (bootstrap_socket.c: unique id, launcher environment; bootstrap_mpi.c)
 * implement the same three functions of struct weave_bootstrap.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  unsigned long generation;
  int broken;                          /* a wait timed out: the barrier can no longer be trusted */
  unsigned char here[WEAVE_MAX_WORLD]; /* here[r]: rank r waits in this generation */
  unsigned char *buffer;               /* world * WEAVE_BOOTSTRAP_MAX_BYTES */
} threads_impl_t;

static weave_result_t threads_barrier(weave_bootstrap_t *bs, int rank) {
  threads_impl_t *t = (threads_impl_t *)bs->impl;
  if (rank < 0 || rank >= bs->world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "bootstrap barrier: rank %d outside [0, %d)", rank,
                      bs->world);
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline); /* the condition variable's clock */
  deadline.tv_sec += bs->timeout_ms / 1000;
  deadline.tv_nsec += (long)(bs->timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }

  weave_result_t rc = WEAVE_SUCCESS;
  pthread_mutex_lock(&t->mu);
  if (t->broken) {
    rc = weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "bootstrap barrier: broken by an earlier timeout");
  } else if (t->here[rank]) {
    /* two threads passed one rank: counting both would let the barrier pass without another rank */
    rc = weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                    "bootstrap barrier: rank %d is already waiting in this barrier (two threads with one rank?)", rank);
  } else {
    unsigned long gen = t->generation;
    t->here[rank] = 1;
    if (++t->arrived == bs->world) {
      t->arrived = 0;
      memset(t->here, 0, sizeof(t->here));
      t->generation++;
      pthread_cond_broadcast(&t->cv);
    } else {
      while (gen == t->generation && !t->broken) {
        if (pthread_cond_timedwait(&t->cv, &t->mu, &deadline) == ETIMEDOUT && gen == t->generation) {
          t->broken = 1;
          pthread_cond_broadcast(&t->cv);
          char missing[256] = "";
          size_t used = 0;
          for (int r = 0; r < bs->world && used < sizeof(missing) - 16; ++r)
            if (!t->here[r])
              used += (size_t)snprintf(missing + used, sizeof(missing) - used, "%s%d", used ? ", " : "", r);
          rc = weave_fail(NULL, WEAVE_ERROR_TIMEOUT,
                          "bootstrap barrier: rank %d waited %d ms for rank%s %s: only %d of %d ranks arrived", rank,
                          bs->timeout_ms, bs->world - t->arrived > 1 ? "s" : "", missing, t->arrived, bs->world);
          break;
        }
      }
      if (rc == WEAVE_SUCCESS && gen == t->generation && t->broken)
        rc = weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "bootstrap barrier: another rank timed out");
    }
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

static weave_result_t threads_allgather(weave_bootstrap_t *bs, int rank, const void *in, void *out, size_t bytes) {
  threads_impl_t *t = (threads_impl_t *)bs->impl;
  if (!in || !out || bytes == 0 || bytes > WEAVE_BOOTSTRAP_MAX_BYTES)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "bootstrap allgather: %zu bytes (1..%d)", bytes,
                      WEAVE_BOOTSTRAP_MAX_BYTES);
  /* First barrier: nobody still reads the previous round's data. */
  WEAVE_CHECK(threads_barrier(bs, rank));
  memcpy(t->buffer + (size_t)rank * WEAVE_BOOTSTRAP_MAX_BYTES, in, bytes);
  WEAVE_CHECK(threads_barrier(bs, rank));
  for (int r = 0; r < bs->world; ++r)
    memcpy((unsigned char *)out + (size_t)r * bytes, t->buffer + (size_t)r * WEAVE_BOOTSTRAP_MAX_BYTES, bytes);
  return WEAVE_SUCCESS;
}

static void threads_destroy(weave_bootstrap_t *bs) {
  threads_impl_t *t = (threads_impl_t *)bs->impl;
  pthread_cond_destroy(&t->cv);
  pthread_mutex_destroy(&t->mu);
  free(t->buffer);
  free(t);
  free(bs);
}

weave_result_t weave_bootstrap_create_threads(int world, weave_bootstrap_t **bootstrap) {
  if (!bootstrap)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_create_threads: bootstrap is NULL");
  if (world < 1 || world > WEAVE_MAX_WORLD)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_create_threads: world %d outside [1, %d]",
                      world, WEAVE_MAX_WORLD);
  weave_env_t env;
  WEAVE_CHECK(weave_env_load(&env));
  weave_bootstrap_t *bs = (weave_bootstrap_t *)calloc(1, sizeof(*bs));
  threads_impl_t *t = (threads_impl_t *)calloc(1, sizeof(*t));
  unsigned char *buf = (unsigned char *)calloc((size_t)world, WEAVE_BOOTSTRAP_MAX_BYTES);
  if (!bs || !t || !buf) {
    free(bs);
    free(t);
    free(buf);
    return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "weave_bootstrap_create_threads: host allocation failed");
  }
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->cv, &ca);
  pthread_condattr_destroy(&ca);
  t->buffer = buf;
  bs->world = world;
  bs->timeout_ms = env.timeout_ms;
  bs->rank = -1; /* one object for every rank of the process */
  bs->local_rank = -1;
  bs->local_world = world;
  bs->allgather = threads_allgather;
  bs->barrier = threads_barrier;
  bs->destroy = threads_destroy;
  bs->impl = t;
  *bootstrap = bs;
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_info(const weave_bootstrap_t *bs, int *world, int *rank, int *local_rank) {
  if (!bs) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_info: bootstrap is NULL");
  if (world) *world = bs->world;
  if (rank) *rank = bs->rank;
  if (local_rank) *local_rank = bs->local_rank;
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_destroy(weave_bootstrap_t *bootstrap) {
  if (!bootstrap) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_destroy: bootstrap is NULL");
  bootstrap->destroy(bootstrap);
  return WEAVE_SUCCESS;
}
