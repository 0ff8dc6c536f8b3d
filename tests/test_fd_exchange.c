/* CPU test of the descriptor exchange (src/runtime/fd_exchange.c): descriptors passed between
 * processes and threads, a rank that passes none, and one passed by a process that is no rank
 * dropped. */
#define _GNU_SOURCE
#include "bootstrap_test.h"

/* ---- fd exchange ------------------------------------------------------------------------------- */
static int make_memfd(int rank) {
  int fd = memfd_create("weave-test", MFD_CLOEXEC);
  char text[64];
  int n = snprintf(text, sizeof(text), "rank %d of pid %d", rank, (int)getpid());
  if (fd < 0 || write(fd, text, (size_t)n + 1) != n + 1) return -1;
  return fd;
}

/* Checks what rank `rank` received: fds from exactly the expected peers, each reading back the
 * peer's text; closes them. expect_from[r]: 1 an fd from r, 0 none. Returns failures. */
static int check_received(int rank, int world, const int *peer_fds, const int *expect_from) {
  int bad = 0;
  for (int r = 0; r < world; ++r) {
    if (!expect_from[r]) {
      if (peer_fds[r] != -1) {
        fprintf(stderr, "rank %d: fd %d from rank %d, expected -1\n", rank, peer_fds[r], r);
        bad++;
      }
      continue;
    }
    char text[64] = "", want[24];
    snprintf(want, sizeof(want), "rank %d ", r);
    if (peer_fds[r] < 0 || pread(peer_fds[r], text, sizeof(text) - 1, 0) <= 0 || strncmp(text, want, strlen(want))) {
      fprintf(stderr, "rank %d: fd %d from rank %d reads '%s'\n", rank, peer_fds[r], r, text);
      bad++;
    }
    if (peer_fds[r] >= 0) close(peer_fds[r]);
  }
  return bad;
}

typedef struct {
  weave_unique_id_t id;
  int world;
  int per_process; /* ranks per process (threads) */
  int no_fd_rank;  /* this rank passes -1 */
} fdx_job_t;

typedef struct {
  fdx_job_t *job;
  int rank, bad;
} fdx_arg_t;

static void *fdx_rank(void *p) {
  fdx_arg_t *a = (fdx_arg_t *)p;
  fdx_job_t *j = a->job;
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_uid(&j->id, j->world, a->rank, &bs) != WEAVE_SUCCESS) {
    fprintf(stderr, "fdx rank %d: create_uid failed: %s\n", a->rank, weave_get_last_error(NULL));
    a->bad++;
    return NULL;
  }
  int fd = a->rank == j->no_fd_rank ? -1 : make_memfd(a->rank);
  int peer_fds[WEAVE_MAX_WORLD], expect[WEAVE_MAX_WORLD];
  for (int r = 0; r < j->world; ++r) {
    peer_fds[r] = -42;
    expect[r] = r / j->per_process != a->rank / j->per_process && r != j->no_fd_rank;
  }
  if (weave_bootstrap_exchange_fds(bs, a->rank, fd, peer_fds) != WEAVE_SUCCESS) {
    fprintf(stderr, "fdx rank %d: exchange failed: %s\n", a->rank, weave_get_last_error(NULL));
    a->bad++;
  } else {
    a->bad += check_received(a->rank, j->world, peer_fds, expect);
  }
  /* the bootstrap still works after the exchange */
  a->bad += exercise(bs, a->rank, 5);
  if (fd >= 0) close(fd);
  weave_bootstrap_destroy(bs);
  return NULL;
}

/* one process's ranks (as threads); returns failures */
static int fdx_process(int first_rank, void *p) {
  fdx_job_t *j = (fdx_job_t *)p;
  int before = count_fds();
  pthread_t th[WEAVE_MAX_WORLD];
  fdx_arg_t args[WEAVE_MAX_WORLD];
  for (int i = 0; i < j->per_process; ++i) {
    args[i] = (fdx_arg_t){j, first_rank + i, 0};
    pthread_create(&th[i], NULL, fdx_rank, &args[i]);
  }
  int bad = 0;
  for (int i = 0; i < j->per_process; ++i) {
    pthread_join(th[i], NULL);
    bad += args[i].bad;
  }
  int after = count_fds();
  if (first_rank != 0 && after != before) { /* the parent's count includes the listener it gave up */
    fprintf(stderr, "fdx process of rank %d: %d descriptors before, %d after\n", first_rank, before, after);
    bad++;
  }
  return bad ? 1 : 0;
}

static void test_fd_exchange(int world, int per_process, int no_fd_rank) {
  fdx_job_t job = {.world = world, .per_process = per_process, .no_fd_rank = no_fd_rank};
  CHECK(weave_get_unique_id(&job.id) == WEAVE_SUCCESS);
  int nproc = world / per_process;
  pid_t pids[WEAVE_MAX_WORLD];
  int codes[WEAVE_MAX_WORLD];
  pids[0] = -1;
  for (int i = 1; i < nproc; ++i) pids[i] = spawn(fdx_process, i * per_process, &job);
  int mine = fdx_process(0, &job);
  CHECK_MSG(mine == 0, "fd exchange world %d x%d: the parent's ranks failed", world, per_process);
  reap(pids, nproc, 60000, codes);
  for (int i = 1; i < nproc; ++i)
    CHECK_MSG(codes[i] == 0, "fd exchange world %d x%d: process %d exited with %d", world, per_process, i, codes[i]);
}

/* A process that is no rank of the team connects to rank 0's socket first (abstract sockets are open
 * to every process of the network namespace, and /proc/net/unix lists their names) and passes a
 * descriptor of its own claiming to be rank 1: rank 0 must drop it and take rank 1's. Rank 0's
 * bootstrap holds back its second allgather (its socket is up, rank 1 has not sent yet) until the
 * stranger's message is queued. */
static weave_bootstrap_t *stranger_real_bs;
static int stranger_pipe = -1, stranger_calls;

static weave_result_t stranger_allgather(weave_bootstrap_t *bs, int rank, const void *in, void *out, size_t bytes) {
  (void)bs;
  if (++stranger_calls == 2) {
    struct pollfd p = {stranger_pipe, POLLIN, 0};
    char c;
    if (poll(&p, 1, 20000) != 1 || read(stranger_pipe, &c, 1) != 1) fprintf(stderr, "the stranger did not connect\n");
  }
  return stranger_real_bs->allgather(stranger_real_bs, rank, in, out, bytes);
}

static int stranger_child(int unused, void *p) {
  (void)unused;
  int done_fd = *(int *)p;
  char prefix[64], name[108] = "";
  snprintf(prefix, sizeof(prefix), "@weave-fdx-%d-0-", (int)getppid());
  for (int i = 0; i < 20000 && !name[0]; ++i) {
    FILE *f = fopen("/proc/net/unix", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
      const char *at = strstr(line, prefix);
      if (at && sscanf(at + 1, "%107s", name) == 1) break;
    }
    if (f) fclose(f);
    struct timespec nap = {0, 1000000L};
    if (!name[0]) nanosleep(&nap, NULL);
  }
  if (!name[0]) return 2;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof(sa));
  sa.sun_family = AF_UNIX;
  memcpy(sa.sun_path + 1, name, strlen(name));
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  if (s < 0 ||
      connect(s, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name))) != 0)
    return 3;
  int fd = memfd_create("stranger", 0);
  if (fd < 0 || write(fd, "stranger", 9) != 9) return 4;
  int32_t claim = 1;
  struct iovec iov = {&claim, sizeof(claim)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr msg;
  memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctl.buf;
  msg.msg_controllen = sizeof(ctl.buf);
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (sendmsg(s, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(claim)) return 5;
  return write(done_fd, "x", 1) == 1 ? 0 : 6; /* the message stays queued after this process exits */
}

static int stranger_rank1(int rank, void *p) {
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_uid((const weave_unique_id_t *)p, 2, rank, &bs) != WEAVE_SUCCESS) return 1;
  int fd = make_memfd(rank), peer_fds[2];
  weave_result_t rc = weave_bootstrap_exchange_fds(bs, rank, fd, peer_fds);
  if (rc != WEAVE_SUCCESS) fprintf(stderr, "stranger test, rank 1: %s\n", weave_get_last_error(NULL));
  close(fd);
  weave_bootstrap_destroy(bs);
  return rc == WEAVE_SUCCESS ? 0 : 1;
}

static void test_fd_exchange_stranger(void) {
  weave_unique_id_t id;
  int done[2];
  CHECK(weave_get_unique_id(&id) == WEAVE_SUCCESS);
  CHECK(pipe(done) == 0);
  pid_t pids[2];
  int codes[2];
  pids[0] = spawn(stranger_rank1, 1, &id);
  pids[1] = spawn(stranger_child, 0, &done[1]);
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_uid(&id, 2, 0, &bs) == WEAVE_SUCCESS);
  if (bs) {
    weave_bootstrap_t wrapped = *bs;
    wrapped.allgather = stranger_allgather;
    stranger_real_bs = bs;
    stranger_pipe = done[0];
    stranger_calls = 0;
    int peer_fds[2] = {-42, -42}, expect[2] = {0, 1};
    weave_result_t rc = weave_bootstrap_exchange_fds(&wrapped, 0, -1, peer_fds);
    CHECK_MSG(rc == WEAVE_SUCCESS, "a stranger's connection failed the exchange: %s", weave_get_last_error(NULL));
    if (rc == WEAVE_SUCCESS)
      CHECK_MSG(check_received(0, 2, peer_fds, expect) == 0, "rank 0 took a stranger's descriptor for rank 1's");
    weave_bootstrap_destroy(bs);
  }
  reap(pids, 2, 30000, codes);
  CHECK_MSG(codes[0] == 0, "stranger test: rank 1 exited with %d", codes[0]);
  CHECK_MSG(codes[1] == 0, "stranger test: the stranger exited with %d", codes[1]);
  close(done[0]);
  close(done[1]);
}

/* The threads bootstrap: every rank in one process, so every entry is -1 and nothing else happens. */
typedef struct {
  weave_bootstrap_t *bs;
  int rank, bad;
} fdx_threads_arg_t;

static void *fdx_threads_rank(void *p) {
  fdx_threads_arg_t *a = (fdx_threads_arg_t *)p;
  int fd = make_memfd(a->rank), peer_fds[WEAVE_MAX_WORLD];
  if (weave_bootstrap_exchange_fds(a->bs, a->rank, fd, peer_fds) != WEAVE_SUCCESS)
    a->bad++;
  else
    for (int r = 0; r < a->bs->world; ++r) a->bad += peer_fds[r] != -1;
  close(fd);
  return NULL;
}

static void test_fd_exchange_threads(int world) {
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(world, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  int before = count_fds();
  pthread_t th[WEAVE_MAX_WORLD];
  fdx_threads_arg_t args[WEAVE_MAX_WORLD];
  for (int r = 0; r < world; ++r) {
    args[r] = (fdx_threads_arg_t){bs, r, 0};
    pthread_create(&th[r], NULL, fdx_threads_rank, &args[r]);
  }
  for (int r = 0; r < world; ++r) {
    pthread_join(th[r], NULL);
    CHECK_MSG(args[r].bad == 0, "threads bootstrap rank %d: %d wrong entries", r, args[r].bad);
  }
  CHECK(count_fds() == before);
  int peer_fds[4];
  CHECK(weave_bootstrap_exchange_fds(bs, world, -1, peer_fds) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_exchange_fds(bs, 0, -1, NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(weave_bootstrap_exchange_fds(NULL, 0, -1, peer_fds) == WEAVE_ERROR_INVALID_ARGUMENT);
  weave_bootstrap_destroy(bs);
}

int main(void) {
  double t0 = bootstrap_test_begin();
  test_fd_exchange(2, 1, -1);
  test_fd_exchange(4, 1, -1);
  test_fd_exchange(4, 2, 1); /* 2 processes x 2 threads; rank 1 passes no fd */
  test_fd_exchange(6, 3, 4);
  test_fd_exchange_threads(4);
  test_fd_exchange_stranger();
  return bootstrap_test_end("test_fd_exchange", t0);
}
