/* What the CPU tests of the process bootstraps share (test_bootstrap_socket.c, test_bootstrap_env.c,
 * test_fd_exchange.c): bounds, clocks, fork()ed ranks with a time limit, the exercise every rank
 * runs, and a clean launcher environment. Header-only (static inline): CHECK counts in the test
 * that includes it. */
#ifndef WEAVE_TEST_BOOTSTRAP_TEST_H
#define WEAVE_TEST_BOOTSTRAP_TEST_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/internal.h"

#define TIMEOUT_MS 2000 /* WEAVE_TIMEOUT_MS of the failure tests */
#define SLACK_MS 2500   /* spokes' grace (250 + timeout / 4) plus scheduling under sanitizers */
/* WEAVE_TIMEOUT_MS of the good cases: a collective of a few KiB over loopback takes milliseconds,
 * even sanitized and with 8 processes, so a case that breaks fails in seconds, not at ctest's limit */
#define GOOD_TIMEOUT "5000"
#define PEER_WAIT_MS 5000 /* how long a hand-made peer waits for the library */

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory's own descriptor */
}

static unsigned char pattern(int rank, int iter, size_t i) {
  return (unsigned char)(rank * 31 + iter * 7 + (int)i * 13 + 1);
}

/* The size of exercise()'s allgather #it: 1, the most, then varied. */
static inline size_t exercise_bytes(int it) {
  return it == 0 ? 1 : it == 1 ? WEAVE_BOOTSTRAP_MAX_BYTES : 1 + (size_t)(it * 37) % WEAVE_BOOTSTRAP_MAX_BYTES;
}

/* Many allgathers of varied sizes (1..1024, the same on every rank) with rank-dependent content
 * checked exactly, and barriers. Returns the number of failures (printed). */
static inline int exercise(weave_bootstrap_t *bs, int rank, int iters) {
  int world = bs->world, bad = 0;
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES];
  unsigned char *out = (unsigned char *)malloc((size_t)world * WEAVE_BOOTSTRAP_MAX_BYTES);
  for (int it = 0; it < iters && !bad; ++it) {
    size_t bytes = exercise_bytes(it);
    for (size_t i = 0; i < bytes; ++i) in[i] = pattern(rank, it, i);
    memset(out, 0xee, (size_t)world * bytes);
    if (bs->allgather(bs, rank, in, out, bytes) != WEAVE_SUCCESS) {
      fprintf(stderr, "rank %d: allgather %d failed: %s\n", rank, it, weave_get_last_error(NULL));
      bad++;
      break;
    }
    for (int r = 0; r < world && !bad; ++r)
      for (size_t i = 0; i < bytes; ++i)
        if (out[(size_t)r * bytes + i] != pattern(r, it, i)) {
          fprintf(stderr, "rank %d: allgather %d (%zu bytes): wrong byte %zu of rank %d\n", rank, it, bytes, i, r);
          bad++;
          break;
        }
    if (it % 3 == 0 && bs->barrier(bs, rank) != WEAVE_SUCCESS) {
      fprintf(stderr, "rank %d: barrier %d failed: %s\n", rank, it, weave_get_last_error(NULL));
      bad++;
    }
  }
  free(out);
  return bad;
}

/* ---- processes ------------------------------------------------------------------------------- */
typedef int (*child_fn)(int rank, void *arg);

static inline pid_t spawn(child_fn fn, int rank, void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) _exit(fn(rank, arg));
  CHECK_MSG(pid > 0, "fork: %s", strerror(errno));
  return pid;
}

/* Waits for every child (at most limit_ms in all; stragglers are killed). codes[i]: the exit status,
 * or -1 when killed or signaled. */
static inline void reap(const pid_t *pids, int n, double limit_ms, int *codes) {
  double t0 = now_ms();
  int left = n;
  for (int i = 0; i < n; ++i) codes[i] = pids[i] > 0 ? -2 : -1;
  while (left > 0) {
    left = 0;
    for (int i = 0; i < n; ++i) {
      if (codes[i] != -2) continue;
      int st;
      pid_t w = waitpid(pids[i], &st, WNOHANG);
      if (w == pids[i])
        codes[i] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      else
        left++;
    }
    if (left && now_ms() - t0 > limit_ms) {
      for (int i = 0; i < n; ++i)
        if (codes[i] == -2) {
          fprintf(stderr, "child %d (pid %d) still running after %.0f ms: killed\n", i, (int)pids[i], limit_ms);
          kill(pids[i], SIGKILL);
          waitpid(pids[i], NULL, 0);
          codes[i] = -1;
        }
      break;
    }
    if (left) {
      struct timespec nap = {0, 2 * 1000000L};
      nanosleep(&nap, NULL);
    }
  }
}

/* Runs test() in a child process of its own group and fails it unless it passes within limit_ms:
 * a wait in the library that is not bounded shows as a failure in seconds, not as a hang. */
typedef struct {
  void (*test)(void);
} isolated_t;

static inline int isolated_child(int unused, void *p) {
  (void)unused;
  setpgid(0, 0);
  check_failures = 0; /* this test's own */
  ((isolated_t *)p)->test();
  return check_failures ? 1 : 0;
}

static inline void isolated(const char *name, void (*test)(void), double limit_ms) {
  isolated_t job = {test};
  pid_t pid = spawn(isolated_child, 0, &job);
  int code;
  reap(&pid, 1, limit_ms, &code);
  kill(-pid, SIGKILL); /* whatever it left behind */
  CHECK_MSG(code == 0, "%s: %s", name, code == -1 ? "did not finish in time (an unbounded wait?)" : "failed (above)");
}

static inline void nap_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- the launcher's environment ---------------------------------------------------------------- */
static const char *launcher_vars[] = {"WEAVE_SOCKET_ADDR",
                                      "RANK",
                                      "WORLD_SIZE",
                                      "LOCAL_RANK",
                                      "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR",
                                      "MASTER_PORT",
                                      "OMPI_COMM_WORLD_RANK",
                                      "OMPI_COMM_WORLD_SIZE",
                                      "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE",
                                      "OMPI_MCA_ess_base_jobid",
                                      "SLURM_PROCID",
                                      "SLURM_NTASKS",
                                      "SLURM_LOCALID",
                                      "SLURM_JOB_ID",
                                      "SLURM_STEP_ID",
                                      "WEAVE_BOOTSTRAP_PORT",
                                      "TORCHELASTIC_RUN_ID"};

static inline void clear_launcher_env(void) {
  for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); ++i) unsetenv(launcher_vars[i]);
}

/* Every bootstrap test's start: quiet logs, the good cases' bound, no launcher variables, SIGPIPE
 * fatal (the bootstrap must never raise one). The start time, for bootstrap_test_end. */
static inline double bootstrap_test_begin(void) {
  setenv("WEAVE_DEBUG", "NONE", 1); /* the failure cases fail on purpose: keep the log quiet */
  setenv("WEAVE_TIMEOUT_MS", GOOD_TIMEOUT, 1);
  clear_launcher_env();
  signal(SIGPIPE, SIG_DFL);
  return now_ms();
}

static inline int bootstrap_test_end(const char *name, double t0) {
  printf("%s: %.1f s\n", name, (now_ms() - t0) / 1e3);
  return check_summary(name);
}

#endif
