/* CPU test of the socket bootstrap (src/runtime/bootstrap_socket.c, unique_id.c, deadline_io.c):
 * ranks as fork()ed processes (2, 4, 8; the hub rank 0 or not), as threads of one process, and
 * mixed; a rank that dies or never arrives (every other rank fails within the bound, naming it); bad
 * arguments; no descriptor leaked over 200 bootstraps. Against hand-made peers that speak the wire
 * format written out here: connections claiming a rank outside the world or one taken already
 * (turned away, the rightful ranks join), a rank that connects and stays silent (TIMEOUT naming it),
 * peers that send and read a byte at a time, the id's byte order; and every send()/recv() of the
 * library cut short. The launcher bootstrap: test_bootstrap_env.c; the fd exchange:
 * test_fd_exchange.c. */
#define _GNU_SOURCE
#include "bootstrap_test.h"

/* ---- short reads and writes on demand -------------------------------------------------------------
 * While short_io is on, every send() and recv() of this process moves 1 to 3 bytes, and every
 * fourth call first fails with EAGAIN or EINTR, as on a loaded link. The library is linked in
 * statically, so these definitions stand in for libc's in its calls too; the hand-made peers use
 * sendto()/recvfrom() and are not cut. MSG_PEEK is left whole (a peek is no transfer). */
static atomic_int short_io;
static atomic_uint short_io_calls;

/* How many of n bytes this call moves; 0 (errno set) for a call that fails first. */
static size_t short_io_cut(size_t n, int flags) {
  if (!atomic_load(&short_io) || n == 0 || (flags & MSG_PEEK)) return n;
  unsigned c = atomic_fetch_add(&short_io_calls, 1);
  if (c % 4 == 3) {
    errno = c % 8 == 3 ? EAGAIN : EINTR;
    return 0;
  }
  return n < 1 + c % 3 ? n : 1 + c % 3;
}

ssize_t send(int fd, const void *buf, size_t n, int flags) {
  size_t m = short_io_cut(n, flags);
  return n && !m ? -1 : sendto(fd, buf, m, flags, NULL, 0);
}

ssize_t recv(int fd, void *buf, size_t n, int flags) {
  size_t m = short_io_cut(n, flags);
  return n && !m ? -1 : recvfrom(fd, buf, m, flags, NULL, NULL);
}

typedef struct {
  weave_unique_id_t id;
  int world, iters;
} uid_job_t;

static int uid_child(int rank, void *p) {
  uid_job_t *j = (uid_job_t *)p;
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_uid(&j->id, j->world, rank, &bs) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: create_uid failed: %s\n", rank, weave_get_last_error(NULL));
    return 1;
  }
  int world = -7, r = -7, lr = -7;
  int bad = weave_bootstrap_info(bs, &world, &r, &lr) != WEAVE_SUCCESS || world != j->world || r != rank ||
            lr != rank; /* one host, one process per rank: the local rank is the rank */
  if (bad) fprintf(stderr, "rank %d: info world %d rank %d local %d\n", rank, world, r, lr);
  bad += exercise(bs, rank, j->iters);
  weave_bootstrap_destroy(bs);
  return bad ? 1 : 0;
}

/* The parent makes the id, forks the other ranks (they inherit the registry of listeners but must
 * not act as the hub: two hubs on one listener would split the connections) and is rank `hub`. */
static void test_fork_world(int world, int hub) {
  uid_job_t job = {.world = world, .iters = 200};
  CHECK(weave_get_unique_id(&job.id) == WEAVE_SUCCESS);
  pid_t pids[WEAVE_MAX_WORLD];
  int codes[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) pids[r] = r == hub ? -1 : spawn(uid_child, r, &job);
  int mine = uid_child(hub, &job);
  CHECK_MSG(mine == 0, "world %d: the hub (rank %d, the parent) failed", world, hub);
  reap(pids, world, 60000, codes);
  for (int r = 0; r < world; ++r)
    if (r != hub) CHECK_MSG(codes[r] == 0, "world %d hub %d: rank %d exited with %d", world, hub, r, codes[r]);
}

/* A fork()ed child is a spoke of its parent's id: with nobody else there it connects to the parent's
 * listener, which nobody serves, and says so. */
static int not_hub_child(int rank, void *p) {
  setenv("WEAVE_TIMEOUT_MS", "300", 1);
  weave_bootstrap_t *bs = NULL;
  weave_result_t rc = weave_bootstrap_create_uid((const weave_unique_id_t *)p, 2, rank, &bs);
  const char *msg = weave_get_last_error(NULL);
  if (rc != WEAVE_ERROR_TIMEOUT || !strstr(msg, "no hub answered") || bs) {
    fprintf(stderr, "child: rc %d, message '%s' (expected a spoke that no hub answers)\n", (int)rc, msg);
    return 1;
  }
  return 0;
}

static void test_child_is_not_hub(void) {
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  pid_t pid = spawn(not_hub_child, 1, &id);
  int code;
  reap(&pid, 1, 20000, &code);
  CHECK_MSG(code == 0, "the forked child acted as the hub (exit %d)", code);
  /* the parent's listener: a world of one takes it and closes it */
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_uid(&id, 1, 0, &bs) == WEAVE_SUCCESS);
  if (bs) weave_bootstrap_destroy(bs);
}

/* Whether this process holds a listening TCP socket on `port`. */
static int holds_listener(int port) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int fd = atoi(e->d_name), acc = 0;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa), alen = sizeof(acc);
    memset(&sa, 0, sizeof(sa));
    if (e->d_name[0] != '.' && getsockname(fd, (struct sockaddr *)&sa, &len) == 0 && sa.sin_family == AF_INET &&
        ntohs(sa.sin_port) == port && getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &alen) == 0 && acc)
      found = 1;
  }
  closedir(d);
  return found;
}

static int no_listener_child(int port, void *p) {
  (void)p;
  if (holds_listener(port) == 0) return 0;
  fprintf(stderr, "a fork()ed child holds its parent's listener on port %d\n", port);
  return 1;
}

/* The child cannot be the hub of its parent's id, so it must not keep the parent's listener open
 * either: a descriptor leaked into every child, and a port left listening (connections queued that
 * nobody serves) after the parent's hub has closed it. */
static void test_child_drops_listener(void) {
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  const unsigned char *b = (const unsigned char *)id.internal;
  int port = b[12] << 8 | b[13];
  CHECK(holds_listener(port) == 1);
  pid_t pid = spawn(no_listener_child, port, NULL);
  int code;
  reap(&pid, 1, 20000, &code);
  CHECK_MSG(code == 0, "the fork()ed child kept its parent's listener (exit %d)", code);
  weave_bootstrap_t *bs = NULL; /* the parent's id is intact: a world of one takes it */
  CHECK(weave_bootstrap_create_uid(&id, 1, 0, &bs) == WEAVE_SUCCESS);
  if (bs) weave_bootstrap_destroy(bs);
  CHECK(holds_listener(port) == 0);
}

/* ---- ranks as threads of one process, with the socket bootstrap ---------------------------------- */
typedef struct {
  const weave_unique_id_t *id;
  int world, rank, iters, bad;
} thread_arg_t;

static void *uid_thread(void *p) {
  thread_arg_t *a = (thread_arg_t *)p;
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_uid(a->id, a->world, a->rank, &bs) != WEAVE_SUCCESS) {
    fprintf(stderr, "thread rank %d: create_uid failed: %s\n", a->rank, weave_get_last_error(NULL));
    a->bad++;
    return NULL;
  }
  a->bad += exercise(bs, a->rank, a->iters);
  int rank = -1, lr = -1;
  weave_bootstrap_info(bs, NULL, &rank, &lr);
  if (rank != a->rank || lr != a->rank) a->bad++;
  weave_bootstrap_destroy(bs);
  return NULL;
}

static void run_threads(const weave_unique_id_t *id, int world, int iters, int *bad) {
  pthread_t th[WEAVE_MAX_WORLD];
  thread_arg_t args[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) {
    args[r] = (thread_arg_t){id, world, r, iters, 0};
    CHECK(pthread_create(&th[r], NULL, uid_thread, &args[r]) == 0);
  }
  *bad = 0;
  for (int r = 0; r < world; ++r) {
    pthread_join(th[r], NULL);
    *bad += args[r].bad;
  }
}

static void test_threads(int world) {
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  int bad;
  run_threads(&id, world, 100, &bad);
  CHECK_MSG(bad == 0, "world %d as threads: %d failures", world, bad);
}

/* WEAVE_SOCKET_ADDR picks the address the id advertises (an IPv4 address or a host name); one that
 * is not this host's is refused naming the variable. */
static void test_socket_addr(void) {
  static const char *good[] = {"127.0.0.1", "localhost"};
  for (int i = 0; i < 2; ++i) {
    setenv("WEAVE_SOCKET_ADDR", good[i], 1);
    weave_unique_id_t id;
    CHECK_MSG(weave_get_unique_id(&id) == WEAVE_SUCCESS, "WEAVE_SOCKET_ADDR=%s: %s", good[i],
              weave_get_last_error(NULL));
    unsetenv("WEAVE_SOCKET_ADDR");
    int bad;
    run_threads(&id, 2, 3, &bad);
    CHECK_MSG(bad == 0, "WEAVE_SOCKET_ADDR=%s: %d failures", good[i], bad);
  }
  setenv("WEAVE_SOCKET_ADDR", "203.0.113.7", 1); /* TEST-NET-3: no host has it */
  weave_unique_id_t id;
  memset(&id, 0, sizeof(id));
  weave_result_t rc = weave_get_unique_id(&id);
  CHECK_MSG(rc == WEAVE_ERROR_BOOTSTRAP && strstr(weave_get_last_error(NULL), "WEAVE_SOCKET_ADDR"), "rc %d '%s'",
            (int)rc, weave_get_last_error(NULL));
  CHECK(id.internal[0] == 0); /* untouched */
  unsetenv("WEAVE_SOCKET_ADDR");
}

/* Two ids outstanding in one process, used oldest first: each bootstrap's hub takes its own id's
 * listener. */
static void test_two_ids(void) {
  weave_unique_id_t a, b;
  CHECK(weave_get_unique_id(&a) == WEAVE_SUCCESS);
  CHECK(weave_get_unique_id(&b) == WEAVE_SUCCESS);
  CHECK(memcmp(&a, &b, sizeof(a)) != 0);
  int bad;
  setenv("WEAVE_TIMEOUT_MS", "2000", 1); /* a wrong listener shows as a timeout: keep it short */
  run_threads(&a, 3, 10, &bad);
  CHECK_MSG(bad == 0, "the first of two ids: %d failures", bad);
  run_threads(&b, 2, 10, &bad);
  CHECK_MSG(bad == 0, "the second of two ids: %d failures", bad);
  setenv("WEAVE_TIMEOUT_MS", GOOD_TIMEOUT, 1);
}

/* 200 bootstraps of 2 threads: the descriptor count comes back to where it was. */
static void test_fd_leak(void) {
  int before = count_fds();
  int bad = 0;
  for (int i = 0; i < 200 && !bad; ++i) {
    weave_unique_id_t id;
    if (weave_get_unique_id(&id) != WEAVE_SUCCESS) {
      bad++;
      break;
    }
    run_threads(&id, 2, 1, &bad);
  }
  CHECK_MSG(bad == 0, "%d failures in the leak loop", bad);
  int after = count_fds();
  CHECK_MSG(before == after && before > 0, "descriptors: %d before 200 bootstraps, %d after", before, after);
}

/* ---- failures ---------------------------------------------------------------------------------- */
typedef struct {
  weave_unique_id_t id;
  int world;
  int victim, victim_after; /* the victim _exit()s before allgather #victim_after */
  int stall;                /* ... or instead stays, connected, in no collective, until the others are done */
  int stall_pipe[2];        /* stall: every rank but the victim holds the write end until it is done */
  int id_pipe;              /* >= 0: read the id from here first (the hub is a child) */
} fail_job_t;

/* The stalling victim: waits until every other rank is done (the pipe's write ends all closed). */
static void stall_until_done(fail_job_t *j) {
  close(j->stall_pipe[1]);
  struct pollfd p = {j->stall_pipe[0], POLLIN, 0};
  poll(&p, 1, 4 * (TIMEOUT_MS + SLACK_MS));
}

/* Every rank but the victim: allgathers until one fails; that failure must come within the bound,
 * be BOOTSTRAP or TIMEOUT (TIMEOUT for a victim that stalls), and name the victim; the next call
 * fails at once the same way. */
static int fail_child(int rank, void *p) {
  fail_job_t *j = (fail_job_t *)p;
  setenv("WEAVE_TIMEOUT_MS", "2000", 1);
  if (j->id_pipe >= 0 && read(j->id_pipe, &j->id, sizeof(j->id)) != (ssize_t)sizeof(j->id)) return 3;
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_uid(&j->id, j->world, rank, &bs) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: create_uid failed: %s\n", rank, weave_get_last_error(NULL));
    return 1;
  }
  int in = rank, out[WEAVE_MAX_WORLD];
  for (int it = 0; it < 1000; ++it) {
    if (rank == j->victim && it == j->victim_after) {
      if (!j->stall) _exit(0); /* gone, without a word */
      stall_until_done(j);     /* alive and connected, in no collective */
      weave_bootstrap_destroy(bs);
      return 0;
    }
    double t0 = now_ms();
    weave_result_t rc = bs->allgather(bs, rank, &in, out, sizeof(in));
    double dt = now_ms() - t0;
    if (rc == WEAVE_SUCCESS) continue;
    char msg[1024], name[32];
    snprintf(msg, sizeof(msg), "%s", weave_get_last_error(NULL));
    snprintf(name, sizeof(name), "rank %d", j->victim);
    int bad = 0;
    if (j->stall ? rc != WEAVE_ERROR_TIMEOUT : rc != WEAVE_ERROR_BOOTSTRAP && rc != WEAVE_ERROR_TIMEOUT) bad++;
    if (!strstr(msg, name)) bad++;
    if (dt > TIMEOUT_MS + SLACK_MS) bad++;
    if (it != j->victim_after) bad++; /* nobody fails before the victim is gone */
    weave_result_t again = bs->barrier(bs, rank);
    if (again != rc || strcmp(weave_get_last_error(NULL), msg) != 0) bad++;
    if (j->stall) close(j->stall_pipe[1]);
    if (bad)
      fprintf(stderr, "rank %d: allgather #%d: rc %d after %.0f ms, then %d; message '%s' (expected %s naming %s)\n",
              rank, it + 1, (int)rc, dt, (int)again, msg, j->stall ? "TIMEOUT" : "BOOTSTRAP/TIMEOUT", name);
    weave_bootstrap_destroy(bs);
    return bad ? 1 : 0;
  }
  fprintf(stderr, "rank %d: no allgather failed although rank %d is gone\n", rank, j->victim);
  weave_bootstrap_destroy(bs);
  return 1;
}

/* A spoke dies, or stalls (connected, in no collective): the hub (the parent) and every other spoke
 * name it. */
static void test_dead_spoke(int world, int victim, int stall) {
  fail_job_t job = {.world = world, .victim = victim, .victim_after = 5, .stall = stall, .id_pipe = -1};
  CHECK(weave_get_unique_id(&job.id) == WEAVE_SUCCESS);
  CHECK(pipe(job.stall_pipe) == 0);
  pid_t pids[WEAVE_MAX_WORLD];
  int codes[WEAVE_MAX_WORLD];
  for (int r = 1; r < world; ++r) pids[r] = spawn(fail_child, r, &job);
  pids[0] = -1;
  setenv("WEAVE_TIMEOUT_MS", "2000", 1);
  int mine = fail_child(0, &job);
  unsetenv("WEAVE_TIMEOUT_MS");
  CHECK_MSG(mine == 0, "the hub did not report the %s rank %d correctly", stall ? "stalled" : "dead", victim);
  close(job.stall_pipe[1]);
  reap(pids, world, 30000, codes);
  close(job.stall_pipe[0]);
  for (int r = 1; r < world; ++r)
    CHECK_MSG(codes[r] == 0, "%s spoke %d: rank %d exited with %d", stall ? "stalled" : "dead", victim, r, codes[r]);
}

/* The hub dies: every spoke names it. The hub is a child here, so the id travels through a pipe. */
static int hub_child(int rank, void *p) {
  fail_job_t *j = (fail_job_t *)p;
  if (weave_get_unique_id(&j->id) != WEAVE_SUCCESS) return 2;
  for (int r = 1; r < j->world; ++r)
    if (write(j->id_pipe, &j->id, sizeof(j->id)) != (ssize_t)sizeof(j->id)) return 2;
  j->id_pipe = -1;
  return fail_child(rank, j);
}

static void test_dead_hub(int world, int stall) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  fail_job_t job = {.world = world, .victim = 0, .victim_after = 3, .stall = stall};
  pid_t pids[WEAVE_MAX_WORLD];
  int codes[WEAVE_MAX_WORLD];
  CHECK(pipe(job.stall_pipe) == 0);
  job.id_pipe = fds[1];
  pids[0] = spawn(hub_child, 0, &job);
  job.id_pipe = fds[0];
  for (int r = 1; r < world; ++r) pids[r] = spawn(fail_child, r, &job);
  close(fds[0]);
  close(fds[1]);
  close(job.stall_pipe[0]);
  close(job.stall_pipe[1]);
  reap(pids, world, 30000, codes);
  CHECK_MSG(codes[0] == 0, "the hub child exited with %d", codes[0]);
  for (int r = 1; r < world; ++r)
    CHECK_MSG(codes[r] == 0, "%s hub: rank %d exited with %d", stall ? "stalled" : "dead", r, codes[r]);
}

static void test_stalled_spoke(void) { test_dead_spoke(4, 2, 1); }
static void test_stalled_hub(void) { test_dead_hub(3, 1); }

/* Rank `missing` never comes: creation fails on every rank within the bound, naming it. */
static int missing_child(int rank, void *p) {
  fail_job_t *j = (fail_job_t *)p;
  setenv("WEAVE_TIMEOUT_MS", "2000", 1);
  weave_bootstrap_t *bs = NULL;
  double t0 = now_ms();
  weave_result_t rc = weave_bootstrap_create_uid(&j->id, j->world, rank, &bs);
  double dt = now_ms() - t0;
  const char *msg = weave_get_last_error(NULL);
  char name[32];
  snprintf(name, sizeof(name), "rank %d", j->victim);
  if ((rc != WEAVE_ERROR_TIMEOUT && rc != WEAVE_ERROR_BOOTSTRAP) || !strstr(msg, name) || dt > TIMEOUT_MS + SLACK_MS ||
      bs) {
    fprintf(stderr, "rank %d: creation without %s: rc %d after %.0f ms, message '%s'\n", rank, name, (int)rc, dt, msg);
    return 1;
  }
  return 0;
}

static void test_missing_rank(int world, int missing) {
  fail_job_t job = {.world = world, .victim = missing, .id_pipe = -1};
  CHECK(weave_get_unique_id(&job.id) == WEAVE_SUCCESS);
  int before = count_fds();
  pid_t pids[WEAVE_MAX_WORLD];
  int codes[WEAVE_MAX_WORLD];
  for (int r = 1; r < world; ++r) pids[r] = r == missing ? -1 : spawn(missing_child, r, &job);
  pids[0] = -1;
  int mine = missing_child(0, &job);
  unsetenv("WEAVE_TIMEOUT_MS");
  CHECK_MSG(mine == 0, "the hub did not report the missing rank %d", missing);
  reap(pids, world, 30000, codes);
  for (int r = 1; r < world; ++r)
    if (r != missing) CHECK_MSG(codes[r] == 0, "missing rank %d: rank %d exited with %d", missing, r, codes[r]);
  /* the failed hub closed its listener and every connection */
  CHECK_MSG(count_fds() == before - 1, "descriptors: %d before (listener included), %d after a failed creation", before,
            count_fds());
}

static void test_bad_args(void) {
  weave_unique_id_t id, bad;
  weave_bootstrap_t *bs = (weave_bootstrap_t *)0x1;
  CHECK(weave_get_unique_id(NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  CHECK(weave_bootstrap_create_uid(NULL, 2, 0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "id is NULL") != NULL);
  CHECK(weave_bootstrap_create_uid(&id, 0, 0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "world 0") != NULL);
  CHECK(weave_bootstrap_create_uid(&id, WEAVE_MAX_WORLD + 1, 0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_create_uid(&id, 2, 2, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "rank 2") != NULL);
  CHECK(weave_bootstrap_create_uid(&id, 2, -1, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_create_uid(&id, 2, 0, NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  bad = id;
  bad.internal[0] ^= 0x55;
  CHECK(weave_bootstrap_create_uid(&bad, 2, 0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "magic") != NULL);
  memset(&bad, 0, sizeof(bad));
  CHECK(weave_bootstrap_create_uid(&bad, 2, 0, &bs) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "empty") != NULL);
  CHECK(bs == (weave_bootstrap_t *)0x1); /* untouched on failure */
  CHECK(weave_bootstrap_info(NULL, NULL, NULL, NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_create_env(NULL) == WEAVE_ERROR_INVALID_ARGUMENT);

  /* the id still works after the rejected calls (a world of one); calls with another rank than the
   * object's are refused and do not break it */
  bs = NULL;
  CHECK(weave_bootstrap_create_uid(&id, 1, 0, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES + 1] = {7}, out[WEAVE_BOOTSTRAP_MAX_BYTES + 1];
  CHECK(bs->allgather(bs, 1, in, out, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 0, in, out, 0) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 0, in, out, WEAVE_BOOTSTRAP_MAX_BYTES + 1) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->allgather(bs, 0, NULL, out, 4) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(bs->barrier(bs, -1) == WEAVE_ERROR_INVALID_ARGUMENT);
  out[0] = 0;
  CHECK(bs->allgather(bs, 0, in, out, 1) == WEAVE_SUCCESS && out[0] == 7);
  CHECK(bs->barrier(bs, 0) == WEAVE_SUCCESS);
  int world = 0, rank = -5, lr = -5;
  CHECK(weave_bootstrap_info(bs, &world, &rank, &lr) == WEAVE_SUCCESS && world == 1 && rank == 0 && lr == 0);
  weave_bootstrap_destroy(bs);

  /* the threads bootstrap has no single rank */
  CHECK(weave_bootstrap_create_threads(3, &bs) == WEAVE_SUCCESS);
  CHECK(weave_bootstrap_info(bs, &world, &rank, &lr) == WEAVE_SUCCESS && world == 3 && rank == -1 && lr == -1);
  weave_bootstrap_destroy(bs);
}

/* Ranks that call different collectives: the hub catches it and every rank fails with MISMATCH. */
typedef struct {
  const weave_unique_id_t *id;
  int rank;
  weave_result_t rc;
  char msg[1024];
} mismatch_arg_t;

static void *mismatch_thread(void *p) {
  mismatch_arg_t *a = (mismatch_arg_t *)p;
  weave_bootstrap_t *bs = NULL;
  a->rc = weave_bootstrap_create_uid(a->id, 3, a->rank, &bs);
  if (a->rc != WEAVE_SUCCESS) return NULL;
  unsigned char in[16] = {0}, out[3 * 16];
  a->rc = bs->allgather(bs, a->rank, in, out, 8);
  if (a->rc == WEAVE_SUCCESS) /* rank 2 passes 16 bytes where the others pass 4 */
    a->rc = bs->allgather(bs, a->rank, in, out, a->rank == 2 ? 16 : 4);
  snprintf(a->msg, sizeof(a->msg), "%s", weave_get_last_error(NULL));
  weave_bootstrap_destroy(bs);
  return NULL;
}

static void test_mismatch(void) {
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  pthread_t th[3];
  mismatch_arg_t args[3];
  for (int r = 0; r < 3; ++r) {
    args[r] = (mismatch_arg_t){&id, r, WEAVE_SUCCESS, ""};
    CHECK(pthread_create(&th[r], NULL, mismatch_thread, &args[r]) == 0);
  }
  for (int r = 0; r < 3; ++r) pthread_join(th[r], NULL);
  /* the hub compares against its own size: whichever is the hub, some rank differs from it */
  for (int r = 0; r < 3; ++r)
    CHECK_MSG(args[r].rc == WEAVE_ERROR_MISMATCH && strstr(args[r].msg, "bytes"), "rank %d: rc %d '%s'", r,
              (int)args[r].rc, args[r].msg);
}

/* One id, two world sizes: whichever rank is the hub, both fail at once naming both worlds. */
typedef struct {
  const weave_unique_id_t *id;
  int world, rank;
  weave_result_t rc;
  double ms;
  char msg[1024];
} world_arg_t;

static void *world_thread(void *p) {
  world_arg_t *a = (world_arg_t *)p;
  weave_bootstrap_t *bs = NULL;
  double t0 = now_ms();
  a->rc = weave_bootstrap_create_uid(a->id, a->world, a->rank, &bs);
  a->ms = now_ms() - t0;
  snprintf(a->msg, sizeof(a->msg), "%s", weave_get_last_error(NULL));
  if (bs) weave_bootstrap_destroy(bs);
  return NULL;
}

static void test_world_mismatch(void) {
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  pthread_t th[2];
  world_arg_t args[2] = {{&id, 2, 0, WEAVE_SUCCESS, 0, ""}, {&id, 3, 1, WEAVE_SUCCESS, 0, ""}};
  for (int i = 0; i < 2; ++i) CHECK(pthread_create(&th[i], NULL, world_thread, &args[i]) == 0);
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; ++i)
    CHECK_MSG(args[i].rc == WEAVE_ERROR_MISMATCH && strstr(args[i].msg, "world 2") && strstr(args[i].msg, "world 3") &&
                  args[i].ms < 5000,
              "rank %d (world %d): rc %d after %.0f ms, '%s'", args[i].rank, args[i].world, (int)args[i].rc, args[i].ms,
              args[i].msg);
}

/* ---- hand-made peers ------------------------------------------------------------------------------
 * The wire format, written out here apart from the library so that a change to it is deliberate:
 * the id (big-endian: "WVID", version 1, the hub's IPv4 address in network order, its port, 2 zero
 * bytes, a nonce; the rest zero), a spoke's 32-byte hello ("WVHL", version, nonce, world, rank) and
 * the 16-byte frames (type, seq, bytes, arg) of the collectives: ACK (seq: the hub's remaining ms,
 * arg: its rank), DATA (arg: the collective, seq: its number, creation's own being 0) and ABORT
 * (arg: the result code, then `bytes` of message). */
enum { W_ACK = 1, W_DATA = 2, W_ABORT = 3 };
enum { W_CREATE = 0, W_ALLGATHER = 1, W_BARRIER = 2 };
#define W_UID_MAGIC 0x57564944u
#define W_HELLO_MAGIC 0x5756484cu
#define W_VERSION 1u

static void wr32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static void wr64(unsigned char *p, uint64_t v) {
  wr32(p, (uint32_t)(v >> 32));
  wr32(p + 4, (uint32_t)v);
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) << 32 | rd32(p + 4); }

static void frame_put(unsigned char *p, uint32_t type, uint32_t seq, uint32_t bytes, int32_t arg) {
  wr32(p, type);
  wr32(p + 4, seq);
  wr32(p + 8, bytes);
  wr32(p + 12, (uint32_t)arg);
}

typedef struct {
  int fd;
  int dribble; /* one byte per send (TCP_NODELAY, a pause between) and per read */
} peer_t;

static int peer_write(const peer_t *p, const void *buf, size_t n) {
  const unsigned char *b = (const unsigned char *)buf;
  while (n > 0) {
    ssize_t k = sendto(p->fd, b, p->dribble ? 1 : n, MSG_NOSIGNAL, NULL, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
    if (p->dribble) {
      struct timespec nap = {0, 20 * 1000L};
      nanosleep(&nap, NULL);
    }
  }
  return 0;
}

/* 0 once n bytes came, -1 when the connection closed or failed, -2 after PEER_WAIT_MS. */
static int peer_read(const peer_t *p, void *buf, size_t n) {
  unsigned char *b = (unsigned char *)buf;
  double end = now_ms() + PEER_WAIT_MS;
  while (n > 0) {
    struct pollfd pf = {p->fd, POLLIN, 0};
    int left = (int)(end - now_ms()), r = poll(&pf, 1, left < 0 ? 0 : left);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return -2;
    ssize_t k = r < 0 ? -1 : recvfrom(p->fd, b, p->dribble ? 1 : n, 0, NULL, NULL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    b += k;
    n -= (size_t)k;
  }
  return 0;
}

/* A spoke's connection to the hub an id names (decoded here by the layout above), hello sent. */
static int peer_join(const weave_unique_id_t *id, int world, int rank, int dribble, peer_t *p) {
  const unsigned char *b = (const unsigned char *)id->internal;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  memcpy(&sa.sin_addr.s_addr, b + 8, 4);
  sa.sin_port = htons((uint16_t)(b[12] << 8 | b[13]));
  p->dribble = dribble;
  p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (p->fd < 0 || setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
      connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    fprintf(stderr, "hand-made rank %d: cannot connect to the id's hub: %s\n", rank, strerror(errno));
    return -1;
  }
  unsigned char hello[32];
  memset(hello, 0, sizeof(hello));
  wr32(hello, W_HELLO_MAGIC);
  wr32(hello + 4, W_VERSION);
  wr64(hello + 8, rd64(b + 16));
  wr32(hello + 16, (uint32_t)world);
  wr32(hello + 20, (uint32_t)rank);
  return peer_write(p, hello, sizeof(hello));
}

/* The next frame must be an ABORT with `code` whose message holds `needle`. 0 when it is. */
static int peer_expect_abort(const peer_t *p, weave_result_t code, const char *needle) {
  unsigned char f[16];
  char msg[1024] = "";
  int rc = peer_read(p, f, sizeof(f));
  size_t len = rc == 0 && rd32(f + 8) < sizeof(msg) ? rd32(f + 8) : 0;
  if (rc == 0 && rd32(f) == W_ABORT && len > 0 && peer_read(p, msg, len) == 0 &&
      (int32_t)rd32(f + 12) == (int32_t)code && strstr(msg, needle))
    return 0;
  fprintf(stderr, "hand-made peer: expected ABORT %d naming '%s'; read %d, frame type %u arg %d, message '%s'\n",
          (int)code, needle, rc, rc == 0 ? rd32(f) : 0, rc == 0 ? (int)rd32(f + 12) : 0, msg);
  return 1;
}

/* A spoke's collective: its DATA frame out, the hub's result (world x bytes) in. 0 when it came. */
static int peer_collective(const peer_t *p, uint32_t seq, int op, const void *in, size_t bytes, int world,
                           unsigned char *out) {
  unsigned char frame[16 + WEAVE_BOOTSTRAP_MAX_BYTES], f[16];
  frame_put(frame, W_DATA, seq, (uint32_t)bytes, op);
  memcpy(frame + 16, in, bytes);
  if (peer_write(p, frame, 16 + bytes) || peer_read(p, f, sizeof(f))) return -1;
  if (rd32(f) != W_DATA || rd32(f + 4) != seq || rd32(f + 8) != (uint32_t)world * bytes || (int)rd32(f + 12) != op) {
    fprintf(stderr, "hand-made spoke: collective #%u: frame type %u seq %u, %u bytes, op %d\n", seq, rd32(f),
            rd32(f + 4), rd32(f + 8), (int)rd32(f + 12));
    return -1;
  }
  return peer_read(p, out, (size_t)world * bytes);
}

/* A hub's collective in a world of two (the hub rank 0): the spoke's frame in, both ranks' bytes out;
 * spoke_bytes gets the spoke's. 0 when it went through. */
static int peer_hub_collective(const peer_t *p, uint32_t seq, int op, const void *in, size_t bytes,
                               unsigned char *spoke_bytes) {
  unsigned char frame[16 + 2 * WEAVE_BOOTSTRAP_MAX_BYTES], f[16];
  if (peer_read(p, f, sizeof(f))) return -1;
  if (rd32(f) != W_DATA || rd32(f + 4) != seq || rd32(f + 8) != bytes || (int)rd32(f + 12) != op) {
    fprintf(stderr, "hand-made hub: collective #%u: frame type %u seq %u, %u bytes, op %d\n", seq, rd32(f), rd32(f + 4),
            rd32(f + 8), (int)rd32(f + 12));
    return -1;
  }
  if (peer_read(p, spoke_bytes, bytes)) return -1;
  frame_put(frame, W_DATA, seq, (uint32_t)(2 * bytes), op);
  memcpy(frame + 16, in, bytes);
  memcpy(frame + 16 + bytes, spoke_bytes, bytes);
  return peer_write(p, frame, 16 + 2 * bytes);
}

/* exercise() played by hand: as spoke `rank` of `world` (hub 0), or as the hub of a world of two.
 * The creation's collective first (this host's id, as the library sends it), then the same
 * allgathers and barriers, every rank's bytes checked. Returns failures. */
static int peer_exercise(const peer_t *p, int as_hub, int rank, int world, int iters) {
  unsigned char *out = (unsigned char *)malloc((size_t)WEAVE_MAX_WORLD * WEAVE_BOOTSTRAP_MAX_BYTES);
  unsigned char in[WEAVE_BOOTSTRAP_MAX_BYTES], barrier = 1;
  weave_host_id_t me;
  weave_host_id(&me);
  uint32_t seq = 0;
  int bad = as_hub ? peer_hub_collective(p, seq++, W_CREATE, &me, sizeof(me), out)
                   : peer_collective(p, seq++, W_CREATE, &me, sizeof(me), world, out);
  for (int it = 0; it < iters && !bad; ++it) {
    size_t bytes = exercise_bytes(it);
    for (size_t i = 0; i < bytes; ++i) in[i] = pattern(rank, it, i);
    if (as_hub ? peer_hub_collective(p, seq++, W_ALLGATHER, in, bytes, out + bytes)
               : peer_collective(p, seq++, W_ALLGATHER, in, bytes, world, out)) {
      fprintf(stderr, "hand-made rank %d: allgather %d failed\n", rank, it);
      bad++;
      break;
    }
    for (int r = 0; r < world && !bad; ++r)
      for (size_t i = 0; i < bytes; ++i)
        if (r != rank && out[(size_t)r * bytes + i] != pattern(r, it, i)) {
          fprintf(stderr, "hand-made rank %d: allgather %d (%zu bytes): wrong byte %zu of rank %d\n", rank, it, bytes,
                  i, r);
          bad++;
          break;
        }
    if (it % 3 == 0 && (as_hub ? peer_hub_collective(p, seq++, W_BARRIER, &barrier, 1, out)
                               : peer_collective(p, seq++, W_BARRIER, &barrier, 1, world, out))) {
      fprintf(stderr, "hand-made rank %d: barrier %d failed\n", rank, it);
      bad++;
    }
  }
  free(out);
  return bad;
}

/* Connections that claim a rank outside [0, world), the hub's own, or one that has joined already
 * are turned away, each told why; the hub goes on, and the rightful ranks (rank 1 a hand-made spoke
 * that dribbles its bytes) join and compute. */
static void test_bad_claims(void) {
  enum { WORLD = 3, ITERS = 12 };
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  pthread_t th[WORLD];
  thread_arg_t args[WORLD] = {{&id, WORLD, 0, ITERS, 0}, {NULL, 0, 0, 0, 0}, {&id, WORLD, 2, ITERS, 0}};
  CHECK(pthread_create(&th[0], NULL, uid_thread, &args[0]) == 0);
  static const int claims[] = {WORLD, -1, WEAVE_MAX_WORLD, 0 /* the hub's */};
  for (size_t i = 0; i < sizeof(claims) / sizeof(claims[0]); ++i) {
    peer_t bad;
    char needle[64];
    snprintf(needle, sizeof(needle), "claimed rank %d", claims[i]);
    CHECK_MSG(
        peer_join(&id, WORLD, claims[i], 0, &bad) == 0 && peer_expect_abort(&bad, WEAVE_ERROR_BOOTSTRAP, needle) == 0,
        "a connection claiming rank %d of %d was not turned away", claims[i], WORLD);
    close(bad.fd);
  }
  peer_t one, twin;
  CHECK(peer_join(&id, WORLD, 1, 1, &one) == 0);
  unsigned char ack[16] = {0};
  CHECK_MSG(peer_read(&one, ack, sizeof(ack)) == 0 && rd32(ack) == W_ACK && rd32(ack + 12) == 0,
            "the hand-made rank 1 was not welcomed (frame type %u, hub rank %d)", rd32(ack), (int)rd32(ack + 12));
  CHECK_MSG(peer_join(&id, WORLD, 1, 0, &twin) == 0 &&
                peer_expect_abort(&twin, WEAVE_ERROR_BOOTSTRAP, "claimed rank 1, which has joined") == 0,
            "a second claim of rank 1 was not turned away");
  close(twin.fd);
  CHECK(pthread_create(&th[2], NULL, uid_thread, &args[2]) == 0);
  CHECK_MSG(peer_exercise(&one, 0, 1, WORLD, ITERS) == 0, "the hand-made rank 1 (a byte at a time) failed");
  close(one.fd);
  pthread_join(th[0], NULL);
  pthread_join(th[2], NULL);
  CHECK_MSG(args[0].bad == 0 && args[2].bad == 0, "after the bad claims: rank 0 %d failures, rank 2 %d", args[0].bad,
            args[2].bad);
}

/* A rank that connects, is welcomed, and then sends nothing: creation fails on every rank with
 * TIMEOUT naming it, within the bound; the silent rank is told so too. */
static void test_silent_peer(void) {
  setenv("WEAVE_TIMEOUT_MS", "2000", 1);
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  pthread_t th[2];
  world_arg_t args[2] = {{&id, 3, 0, WEAVE_SUCCESS, 0, ""}, {&id, 3, 2, WEAVE_SUCCESS, 0, ""}};
  for (int i = 0; i < 2; ++i) CHECK(pthread_create(&th[i], NULL, world_thread, &args[i]) == 0);
  peer_t silent;
  unsigned char ack[16] = {0};
  CHECK(peer_join(&id, 3, 1, 0, &silent) == 0);
  CHECK_MSG(peer_read(&silent, ack, sizeof(ack)) == 0 && rd32(ack) == W_ACK, "the silent rank was not welcomed");
  for (int i = 0; i < 2; ++i) {
    pthread_join(th[i], NULL);
    CHECK_MSG(args[i].rc == WEAVE_ERROR_TIMEOUT && strstr(args[i].msg, "rank 1 did not reach") &&
                  args[i].ms <= TIMEOUT_MS + SLACK_MS,
              "rank %d beside a silent rank 1: rc %d after %.0f ms, '%s' (expected TIMEOUT naming rank 1 within %d ms)",
              args[i].rank, (int)args[i].rc, args[i].ms, args[i].msg, TIMEOUT_MS + SLACK_MS);
  }
  CHECK_MSG(peer_expect_abort(&silent, WEAVE_ERROR_TIMEOUT, "rank 1 did not reach") == 0,
            "the silent rank was not told");
  close(silent.fd);
  setenv("WEAVE_TIMEOUT_MS", GOOD_TIMEOUT, 1);
}

/* A port whose two bytes differ, so that a port in the wrong byte order is another port. */
static int listen_loopback(int *port) {
  for (int i = 0; i < 50; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 4) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
      *port = ntohs(sa.sin_port);
      if ((*port >> 8) != (*port & 0xff)) return fd;
    }
    if (fd >= 0) close(fd);
  }
  return -1;
}

/* The id's bytes as documented: with WEAVE_SOCKET_ADDR=127.0.0.1, bytes 8..11 are 127 0 0 1 and
 * bytes 12..13 the port the listener holds, high byte first. */
static void test_id_layout(void) {
  setenv("WEAVE_SOCKET_ADDR", "127.0.0.1", 1);
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  unsetenv("WEAVE_SOCKET_ADDR");
  const unsigned char *b = (const unsigned char *)id.internal;
  int port = b[12] << 8 | b[13], swapped = b[13] << 8 | b[12], rest_zero = 1;
  for (size_t i = 24; i < sizeof(id.internal); ++i) rest_zero &= b[i] == 0;
  CHECK(rd32(b) == W_UID_MAGIC && rd32(b + 4) == W_VERSION && rest_zero && b[14] == 0 && b[15] == 0 &&
        rd64(b + 16) != 0);
  CHECK_MSG(b[8] == 127 && b[9] == 0 && b[10] == 0 && b[11] == 1,
            "the id's address bytes: %u.%u.%u.%u, expected 127.0.0.1", b[8], b[9], b[10], b[11]);
  CHECK_MSG(holds_listener(port) == 1 && (swapped == port || holds_listener(swapped) == 0),
            "the id's port bytes %02x %02x: no listener on port %d (byte order?)", b[12], b[13], port);
  weave_bootstrap_t *bs = NULL; /* a world of one takes the listener */
  CHECK(weave_bootstrap_create_uid(&id, 1, 0, &bs) == WEAVE_SUCCESS);
  if (bs) weave_bootstrap_destroy(bs);
}

/* A library spoke joins a hand-made hub whose id is built here byte by byte (a port in the wrong
 * byte order reaches nobody) and that sends and reads one byte at a time. */
static void test_hand_made_hub(void) {
  enum { ITERS = 12 };
  int port = 0, lfd = listen_loopback(&port);
  CHECK(lfd >= 0);
  if (lfd < 0) return;
  weave_unique_id_t id;
  memset(&id, 0, sizeof(id));
  unsigned char *b = (unsigned char *)id.internal;
  const uint64_t nonce = 0x0123456789abcdefull;
  wr32(b, W_UID_MAGIC);
  wr32(b + 4, W_VERSION);
  b[8] = 127, b[9] = 0, b[10] = 0, b[11] = 1;
  b[12] = (unsigned char)(port >> 8), b[13] = (unsigned char)port;
  wr64(b + 16, nonce);
  pthread_t th;
  thread_arg_t spoke = {&id, 2, 1, ITERS, 0};
  CHECK(pthread_create(&th, NULL, uid_thread, &spoke) == 0);
  struct pollfd pf = {lfd, POLLIN, 0};
  peer_t hub = {-1, 1};
  if (poll(&pf, 1, PEER_WAIT_MS) == 1) hub.fd = accept(lfd, NULL, NULL);
  CHECK_MSG(hub.fd >= 0, "the spoke never reached the hand-made hub at 127.0.0.1:%d", port);
  if (hub.fd >= 0) {
    int one = 1;
    setsockopt(hub.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    unsigned char hello[32] = {0}, ack[16];
    CHECK_MSG(peer_read(&hub, hello, sizeof(hello)) == 0 && rd32(hello) == W_HELLO_MAGIC &&
                  rd32(hello + 4) == W_VERSION && rd64(hello + 8) == nonce && rd32(hello + 16) == 2 &&
                  rd32(hello + 20) == 1,
              "the spoke's hello: magic %08x version %u nonce %016llx world %u rank %u", rd32(hello), rd32(hello + 4),
              (unsigned long long)rd64(hello + 8), rd32(hello + 16), rd32(hello + 20));
    frame_put(ack, W_ACK, (uint32_t)TIMEOUT_MS, 0, 0);
    CHECK(peer_write(&hub, ack, sizeof(ack)) == 0);
    CHECK_MSG(peer_exercise(&hub, 1, 0, 2, ITERS) == 0, "the hand-made hub (a byte at a time) failed");
    close(hub.fd);
  }
  pthread_join(th, NULL);
  CHECK_MSG(spoke.bad == 0, "the spoke of the hand-made hub: %d failures", spoke.bad);
  close(lfd);
}

/* Every send() and recv() of the library cut to 1..3 bytes, EAGAIN and EINTR between: the same
 * results, threads and processes alike (a fork()ed child keeps the setting). */
static void test_short_io(void) {
  unsigned before = atomic_load(&short_io_calls);
  atomic_store(&short_io, 1);
  weave_unique_id_t id;
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  int bad;
  run_threads(&id, 4, 40, &bad);
  CHECK_MSG(bad == 0, "4 threads with short I/O: %d failures", bad);
  uid_job_t job = {.world = 3, .iters = 40};
  CHECK(weave_get_unique_id(&job.id) == WEAVE_SUCCESS);
  pid_t pids[3] = {-1, spawn(uid_child, 1, &job), spawn(uid_child, 2, &job)};
  int codes[3];
  CHECK_MSG(uid_child(0, &job) == 0, "3 processes with short I/O: the hub failed");
  reap(pids, 3, 60000, codes);
  CHECK_MSG(codes[1] == 0 && codes[2] == 0, "3 processes with short I/O: ranks 1, 2 exited with %d, %d", codes[1],
            codes[2]);
  atomic_store(&short_io, 0);
  unsigned calls = atomic_load(&short_io_calls) - before;
  CHECK_MSG(calls > 1000, "only %u send/recv calls were cut: the library's calls do not pass through the test's",
            calls);
}

int main(void) {
  double t0 = bootstrap_test_begin();

  test_bad_args();
  test_fork_world(2, 0);
  test_fork_world(4, 0);
  test_fork_world(8, 0);
  test_fork_world(4, 2); /* the hub is not rank 0 */
  test_fork_world(3, 2);
  test_child_is_not_hub();
  test_child_drops_listener();
  test_threads(2);
  test_threads(5);
  test_two_ids();
  test_socket_addr();
  test_mismatch();
  test_world_mismatch();
  test_fd_leak();
  test_id_layout();
  isolated("a hand-made hub", test_hand_made_hub, 30000);
  isolated("connections claiming bad ranks", test_bad_claims, 30000);
  test_short_io();

  unsetenv("WEAVE_TIMEOUT_MS");
  test_dead_spoke(4, 2, 0);
  test_dead_spoke(2, 1, 0);
  test_dead_hub(3, 0);
  isolated("a stalled spoke", test_stalled_spoke, 20000);
  isolated("a stalled hub", test_stalled_hub, 20000);
  test_missing_rank(4, 3);
  isolated("a silent rank", test_silent_peer, 20000);
  return bootstrap_test_end("test_bootstrap_socket", t0);
}
