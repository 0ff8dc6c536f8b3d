/* CPU test of the threads bootstrap (src/bootstrap.c): allgather and barrier with 1..8 pthreads,
 * bad arguments (a rank that is already waiting), and bounded waits (a rank that never arrives gives
 * WEAVE_ERROR_TIMEOUT naming it, no hang; a step of the wall clock changes nothing). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/internal.h"

#define ITERS 1000

/* CLOCK_REALTIME as the wall clock after a step of realtime_skew_s seconds (NTP setting the clock of
 * a node that just booted): every caller in this program, the library included, gets this one. */
static volatile long realtime_skew_s;

int clock_gettime(clockid_t id, struct timespec *ts) {
  int rc = (int)syscall(SYS_clock_gettime, id, ts);
  if (rc == 0 && id == CLOCK_REALTIME) ts->tv_sec += realtime_skew_s;
  return rc;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static unsigned char pattern(int rank, int iter, size_t i) {
  return (unsigned char)(rank * 31 + iter * 7 + (int)i * 13 + 1);
}

typedef struct {
  weave_bootstrap_t *bs;
  int rank;
  int iters;
  /* results */
  int bad_rc, bad_data, bad_barrier;
  weave_result_t rc; /* for the timeout tests */
  double elapsed_ms;
  char msg[1024];
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = (rank_arg_t *)p;
  weave_bootstrap_t *bs = a->bs;
  int world = bs->world;
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES];
  unsigned char *out = malloc((size_t)world * WEAVE_BOOTSTRAP_MAX_BYTES);
  for (int it = 0; it < a->iters; ++it) {
    /* Sizes vary per iteration (same on every rank), including 1 and the maximum. */
    size_t bytes = it == 0   ? 1
                   : it == 1 ? WEAVE_BOOTSTRAP_MAX_BYTES
                             : 1 + (size_t)(it * 37) % WEAVE_BOOTSTRAP_MAX_BYTES;
    for (size_t i = 0; i < bytes; ++i) in[i] = pattern(a->rank, it, i);
    memset(out, 0xee, (size_t)world * bytes);
    if (bs->allgather(bs, a->rank, in, out, bytes) != WEAVE_SUCCESS) {
      a->bad_rc++;
      break;
    }
    for (int r = 0; r < world; ++r)
      for (size_t i = 0; i < bytes; ++i)
        if (out[(size_t)r * bytes + i] != pattern(r, it, i)) {
          a->bad_data++;
          r = world;
          break;
        }
    if (it % 4 == 0 && bs->barrier(bs, a->rank) != WEAVE_SUCCESS) {
      a->bad_barrier++;
      break;
    }
  }
  free(out);
  return NULL;
}

static void run_world(int world) {
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(world, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  CHECK(bs->world == world);
  pthread_t th[WEAVE_MAX_WORLD];
  rank_arg_t args[WEAVE_MAX_WORLD];
  memset(args, 0, sizeof(args));
  for (int r = 0; r < world; ++r) {
    args[r].bs = bs;
    args[r].rank = r;
    args[r].iters = ITERS;
    CHECK(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0);
  }
  for (int r = 0; r < world; ++r) pthread_join(th[r], NULL);
  for (int r = 0; r < world; ++r) {
    CHECK_MSG(args[r].bad_rc == 0, "world %d rank %d: allgather failed: %s", world, r, weave_get_last_error(NULL));
    CHECK_MSG(args[r].bad_data == 0, "world %d rank %d: %d wrong allgathers", world, r, args[r].bad_data);
    CHECK_MSG(args[r].bad_barrier == 0, "world %d rank %d: barrier failed", world, r);
  }
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

/* Barrier only, many rounds: checks that the generation counter never lets a fast rank through a
 * barrier twice (a shared counter must be exact after every barrier). */
typedef struct {
  weave_bootstrap_t *bs;
  int rank;
  int *counter;
  pthread_mutex_t *mu;
  int bad;
} barrier_arg_t;

static void *barrier_main(void *p) {
  barrier_arg_t *a = (barrier_arg_t *)p;
  int world = a->bs->world;
  for (int it = 0; it < ITERS; ++it) {
    pthread_mutex_lock(a->mu);
    (*a->counter)++;
    pthread_mutex_unlock(a->mu);
    if (a->bs->barrier(a->bs, a->rank) != WEAVE_SUCCESS) {
      a->bad++;
      break;
    }
    pthread_mutex_lock(a->mu);
    int c = *a->counter;
    pthread_mutex_unlock(a->mu);
    if (c != (it + 1) * world) a->bad++;
    if (a->bs->barrier(a->bs, a->rank) != WEAVE_SUCCESS) {
      a->bad++;
      break;
    }
  }
  return NULL;
}

static void run_barrier(int world) {
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(world, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  int counter = 0;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_t th[WEAVE_MAX_WORLD];
  barrier_arg_t args[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) {
    args[r] = (barrier_arg_t){bs, r, &counter, &mu, 0};
    CHECK(pthread_create(&th[r], NULL, barrier_main, &args[r]) == 0);
  }
  for (int r = 0; r < world; ++r) pthread_join(th[r], NULL);
  for (int r = 0; r < world; ++r)
    CHECK_MSG(args[r].bad == 0, "world %d rank %d: %d barrier errors", world, r, args[r].bad);
  CHECK(counter == ITERS * world);
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

static void test_bad_args(void) {
  weave_bootstrap_t *bs = (weave_bootstrap_t *)0x1;
  CHECK(weave_bootstrap_create_threads(0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "world") != NULL);
  CHECK(weave_bootstrap_create_threads(-1, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_create_threads(WEAVE_MAX_WORLD + 1, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "world") != NULL);
  CHECK(bs == (weave_bootstrap_t *)0x1); /* untouched on failure */
  CHECK(weave_bootstrap_create_threads(2, NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "bootstrap") != NULL);
  CHECK(weave_bootstrap_destroy(NULL) == WEAVE_ERROR_INVALID_ARGUMENT);

  /* WEAVE_MAX_WORLD itself is fine. */
  bs = NULL;
  CHECK(weave_bootstrap_create_threads(WEAVE_MAX_WORLD, &bs) == WEAVE_SUCCESS);
  if (bs) CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);

  /* A bad WEAVE_TIMEOUT_MS is reported, not replaced by the default. */
  setenv("WEAVE_TIMEOUT_MS", "soon", 1);
  bs = NULL;
  CHECK(weave_bootstrap_create_threads(2, &bs) == WEAVE_ERROR_ENV);
  CHECK(bs == NULL);
  CHECK(strstr(weave_get_last_error(NULL), "WEAVE_TIMEOUT_MS") != NULL);
  unsetenv("WEAVE_TIMEOUT_MS");

  /* Bad allgather / barrier arguments on a one-rank bootstrap (nothing to wait for). */
  CHECK(weave_bootstrap_create_threads(1, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES + 1] = {0}, out[WEAVE_BOOTSTRAP_MAX_BYTES + 1];
  CHECK(bs->allgather(bs, 0, in, out, 0) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 0, in, out, WEAVE_BOOTSTRAP_MAX_BYTES + 1) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "allgather") != NULL);
  CHECK(bs->allgather(bs, 0, NULL, out, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 0, in, NULL, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 1, in, out, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, -1, in, out, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->barrier(bs, 1) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->barrier(bs, -1) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "rank") != NULL);
  /* And it still works after the rejected calls. */
  in[0] = 42;
  out[0] = 0;
  CHECK(bs->allgather(bs, 0, in, out, WEAVE_BOOTSTRAP_MAX_BYTES) == WEAVE_SUCCESS && out[0] == 42);
  CHECK(bs->barrier(bs, 0) == WEAVE_SUCCESS);
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

typedef struct {
  weave_bootstrap_t *bs;
  int rank, use_allgather;
  weave_result_t rc, rc_after;
  double elapsed_ms;
  char msg[1024];
} late_arg_t;

static void *late_main(void *p) {
  late_arg_t *a = (late_arg_t *)p;
  double t0 = now_ms();
  int in = a->rank, out[WEAVE_MAX_WORLD];
  a->rc = a->use_allgather ? a->bs->allgather(a->bs, a->rank, &in, out, sizeof(in)) : a->bs->barrier(a->bs, a->rank);
  a->elapsed_ms = now_ms() - t0;
  snprintf(a->msg, sizeof(a->msg), "%s", weave_get_last_error(NULL)); /* thread-local */
  a->rc_after = a->bs->barrier(a->bs, a->rank);                       /* broken now: fails at once */
  return NULL;
}

/* A threads bootstrap of `world` ranks whose waits are bounded by `timeout_ms` (WEAVE_TIMEOUT_MS, read
 * at creation); NULL (and a failed check) if it cannot be made. */
static weave_bootstrap_t *threads_with_timeout(int world, const char *timeout_ms) {
  setenv("WEAVE_TIMEOUT_MS", timeout_ms, 1);
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(world, &bs) == WEAVE_SUCCESS);
  unsetenv("WEAVE_TIMEOUT_MS");
  return bs;
}

/* `world` ranks, only `arrive` of them call in: everyone that called returns within the bound,
 * at least one with WEAVE_ERROR_TIMEOUT, the others TIMEOUT or BOOTSTRAP. */
static void test_timeout(int world, int arrive, int use_allgather) {
  weave_bootstrap_t *bs = threads_with_timeout(world, "200");
  if (!bs) return;
  CHECK(bs->timeout_ms == 200);
  pthread_t th[WEAVE_MAX_WORLD];
  late_arg_t args[WEAVE_MAX_WORLD];
  memset(args, 0, sizeof(args));
  double t0 = now_ms();
  for (int r = 0; r < arrive; ++r) {
    args[r].bs = bs;
    args[r].rank = r;
    args[r].use_allgather = use_allgather;
    CHECK(pthread_create(&th[r], NULL, late_main, &args[r]) == 0);
  }
  for (int r = 0; r < arrive; ++r) pthread_join(th[r], NULL);
  double total = now_ms() - t0;
  int timeouts = 0;
  for (int r = 0; r < arrive; ++r) {
    late_arg_t *a = &args[r];
    CHECK_MSG(a->rc == WEAVE_ERROR_TIMEOUT || a->rc == WEAVE_ERROR_BOOTSTRAP, "world %d rank %d: rc %d", world, r,
              (int)a->rc);
    if (a->rc == WEAVE_ERROR_TIMEOUT) {
      timeouts++;
      CHECK_MSG(a->elapsed_ms >= 190, "timed out after %.1f ms < 200", a->elapsed_ms);
      CHECK_MSG(strstr(a->msg, "timeout") != NULL && strstr(a->msg, "200 ms") != NULL, "message '%s'", a->msg);
      char want[256]; /* who it waited for: the ranks that never came */
      int used = snprintf(want, sizeof(want), "for rank%s ", world - arrive > 1 ? "s" : "");
      for (int m = arrive; m < world; ++m)
        used += snprintf(want + used, sizeof(want) - (size_t)used, "%s%d", m > arrive ? ", " : "", m);
      CHECK_MSG(strstr(a->msg, want) != NULL, "message '%s' does not say '%s'", a->msg, want);
    }
    CHECK_MSG(a->elapsed_ms < 3000, "world %d rank %d waited %.1f ms for a 200 ms bound", world, r, a->elapsed_ms);
    CHECK_MSG(a->rc_after == WEAVE_ERROR_BOOTSTRAP, "barrier after a timeout: rc %d", (int)a->rc_after);
  }
  CHECK_MSG(timeouts >= 1, "world %d, %d arrive: no rank reported the timeout", world, arrive);
  CHECK_MSG(total < 5000, "the timeout test took %.1f ms", total);
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

/* Two threads that pass the same rank: the second is refused at once (it would have completed the
 * barrier without rank 1), and the first times out naming rank 1. */
typedef struct {
  weave_bootstrap_t *bs;
  weave_result_t rc;
  char msg[1024];
} twin_arg_t;

static void *twin_main(void *p) {
  twin_arg_t *a = (twin_arg_t *)p;
  a->rc = a->bs->barrier(a->bs, 0);
  snprintf(a->msg, sizeof(a->msg), "%s", weave_get_last_error(NULL));
  return NULL;
}

static void test_same_rank_twice(void) {
  weave_bootstrap_t *bs = threads_with_timeout(2, "300");
  if (!bs) return;
  twin_arg_t first = {bs, WEAVE_SUCCESS, ""};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, twin_main, &first) == 0);
  struct timespec nap = {0, 50 * 1000000L}; /* the first is waiting by now */
  nanosleep(&nap, NULL);
  weave_result_t rc = bs->barrier(bs, 0);
  CHECK_MSG(rc == WEAVE_ERROR_INVALID_ARGUMENT && strstr(weave_get_last_error(NULL), "rank 0"),
            "the same rank twice in one barrier: rc %d '%s'", (int)rc, weave_get_last_error(NULL));
  pthread_join(th, NULL);
  CHECK_MSG(first.rc == WEAVE_ERROR_TIMEOUT && strstr(first.msg, "for rank 1"), "the first of the twins: rc %d '%s'",
            (int)first.rc, first.msg);
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

/* The wall clock steps an hour forward while a rank waits (simulated: the clock reads an hour behind
 * when the wait starts): the barrier's bound is measured on the monotonic clock, so a rank that
 * arrives 100 ms later still meets it. */
static void *late_by_100ms(void *p) {
  struct timespec nap = {0, 100 * 1000000L};
  nanosleep(&nap, NULL);
  weave_bootstrap_t *bs = (weave_bootstrap_t *)p;
  return (void *)(intptr_t)bs->barrier(bs, 1);
}

static void test_clock_step(void) {
  weave_bootstrap_t *bs = threads_with_timeout(2, "5000");
  if (!bs) return;
  pthread_t th;
  CHECK(pthread_create(&th, NULL, late_by_100ms, bs) == 0);
  realtime_skew_s = -3600;
  double t0 = now_ms();
  weave_result_t rc = bs->barrier(bs, 0);
  double dt = now_ms() - t0;
  realtime_skew_s = 0;
  void *other = NULL;
  pthread_join(th, &other);
  CHECK_MSG(rc == WEAVE_SUCCESS && (weave_result_t)(intptr_t)other == WEAVE_SUCCESS,
            "a wall-clock step during a barrier: rc %d after %.0f ms (the other rank %d): '%s'", (int)rc, dt,
            (int)(intptr_t)other, weave_get_last_error(NULL));
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
}

int main(void) {
  setenv("WEAVE_DEBUG", "NONE", 1);       /* the timeout tests fail on purpose: keep the log quiet */
  setenv("WEAVE_TIMEOUT_MS", "60000", 1); /* generous bound for slow (sanitized) runs */
  const int worlds[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; ++i) {
    run_world(worlds[i]);
    run_barrier(worlds[i]);
  }
  unsetenv("WEAVE_TIMEOUT_MS");
  test_bad_args();
  test_timeout(2, 1, 0);
  test_timeout(4, 3, 0);
  test_timeout(8, 1, 0);
  test_timeout(3, 2, 1);
  test_same_rank_twice();
  test_clock_step();
  return check_summary("test_bootstrap");
}
