/*
 * Passing file descriptors between the processes of one host (the symmetric heap exports its CUDA
 * VMM memory as POSIX fds): a collective over any bootstrap.
 *
 * Every rank that expects descriptors listens on a Linux abstract AF_UNIX socket ("\0weave-fdx-...":
 * nothing is left on the filesystem, and it disappears with the process). After an allgather of who
 * runs where ({host, pid namespace, pid, socket name}), each rank connects to every peer of another
 * process on its host and sends {its rank} with its fd attached (SCM_RIGHTS), then accepts the
 * connections it expects. connect() and a small send complete through the listener's backlog before
 * the peer accepts, so the order in which ranks do this cannot deadlock. Ranks of one process share
 * the address space and get -1, as do ranks of other hosts; with every rank in one process (the
 * threads bootstrap) nothing but the first allgather happens. Any process of the network namespace
 * can connect to an abstract socket, so a connection is heard only when SO_PEERCRED names the
 * process of a rank that still owes this rank its fd (ranks of another pid namespace excepted:
 * their pids cannot be checked).
 *
 * The outcome is agreed: each rank's status goes through an allgather, so either every rank gets its
 * descriptors or every rank fails with a message naming the rank that could not complete.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "runtime/internal.h"

typedef struct {
  weave_host_id_t host;
  uint64_t pidns; /* pid namespace: two containers of one host may both have a pid 1 */
  int32_t pid;
  int32_t has_fd;
  char name[64]; /* abstract socket name, without its leading NUL */
} fdx_rec_t;

typedef struct {
  int32_t code;
  char msg[400];
} fdx_status_t;

uint64_t weave_pid_namespace(void) {
  char buf[64] = "";
  ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? weave_fnv1a(WEAVE_FNV_OFFSET, buf, (size_t)n) : 0;
}

static int same_process(const fdx_rec_t *a, const fdx_rec_t *b) {
  return weave_same_host(&a->host, &b->host) && a->pidns == b->pidns && a->pid == b->pid;
}

/* r sends its fd to s when both are on one host, in different processes, and r has an fd. */
static int sends_to(const fdx_rec_t *all, int r, int s) {
  return r != s && all[r].has_fd && weave_same_host(&all[r].host, &all[s].host) && !same_process(&all[r], &all[s]);
}

/* Whether a connection from process `pid` (SO_PEERCRED: a pid of this rank's pid namespace) may
 * carry rank r's fd: it comes from r's process, or r lives in another pid namespace, where its pid
 * means nothing here and cannot be checked. */
static int may_come_from(const fdx_rec_t *all, const fdx_rec_t *me, int r, pid_t pid) {
  return all[r].pidns != me->pidns || all[r].pid == pid;
}

static socklen_t abstract_addr(const char *name, struct sockaddr_un *sa) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  size_t len = strlen(name);
  if (len > sizeof(sa->sun_path) - 1) len = sizeof(sa->sun_path) - 1;
  memcpy(sa->sun_path + 1, name, len); /* sun_path[0] = '\0': the abstract namespace */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

/* Every rank's status; the first failing rank's code and message (prefixed by its rank) when any
 * failed. `mine` is this rank's (its message already recorded by weave_fail). */
static weave_result_t agree(weave_bootstrap_t *bs, int rank, weave_result_t mine, const char *stage) {
  fdx_status_t st, *all = (fdx_status_t *)malloc((size_t)bs->world * sizeof(fdx_status_t));
  memset(&st, 0, sizeof(st));
  st.code = mine;
  if (mine != WEAVE_SUCCESS) snprintf(st.msg, sizeof(st.msg), "%s", weave_get_last_error(NULL));
  if (!all) return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "fd exchange: host allocation failed");
  weave_result_t rc = bs->allgather(bs, rank, &st, all, sizeof(st));
  if (rc == WEAVE_SUCCESS && mine != WEAVE_SUCCESS) rc = mine; /* keep this rank's own message */
  for (int r = 0; r < bs->world && rc == WEAVE_SUCCESS; ++r)
    if (all[r].code != WEAVE_SUCCESS) {
      all[r].msg[sizeof(all[r].msg) - 1] = '\0';
      weave_result_t code =
          all[r].code > 0 && all[r].code < WEAVE_NUM_RESULTS ? (weave_result_t)all[r].code : WEAVE_ERROR_BOOTSTRAP;
      rc = weave_fail(NULL, code, "fd exchange: rank %d failed %s: %s", r, stage, all[r].msg);
    }
  free(all);
  return rc;
}

/* A message of one iovec with room for control data (the fd). */
static void msg_init(struct msghdr *msg, struct iovec *iov, void *ctl, size_t ctl_bytes) {
  memset(msg, 0, sizeof(*msg));
  msg->msg_iov = iov;
  msg->msg_iovlen = 1;
  msg->msg_control = ctl;
  msg->msg_controllen = ctl_bytes;
}

/* Connects to `peer`'s socket and sends {rank} with fd attached. */
static weave_result_t send_fd(const fdx_rec_t *peer_rec, int peer, int rank, int fd, int64_t deadline) {
  struct sockaddr_un sa;
  socklen_t len = abstract_addr(peer_rec->name, &sa);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "fd exchange: rank %d: socket: %s", rank, strerror(errno));
  for (;;) {
    if (connect(s, (struct sockaddr *)&sa, len) == 0) break;
    int e = errno;
    if (e == EINTR) continue;
    /* a full backlog (more senders than it holds) drains as the peer accepts: wait for it */
    if ((e == EAGAIN || e == EINPROGRESS) && weave_remaining_ms(deadline) > 0) {
      struct timespec nap = {0, 2 * 1000000L};
      nanosleep(&nap, NULL);
      continue;
    }
    close(s);
    return weave_fail(NULL, e == EAGAIN ? WEAVE_ERROR_TIMEOUT : WEAVE_ERROR_BOOTSTRAP,
                      "fd exchange: rank %d cannot connect to rank %d's socket (pid %d on %s): %s%s", rank, peer,
                      (int)peer_rec->pid, peer_rec->host.name, strerror(e),
                      e == ECONNREFUSED ? " (another network namespace, or the process is gone?)" : "");
  }
  int32_t r32 = rank;
  struct iovec iov = {&r32, sizeof(r32)};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  memset(&ctl, 0, sizeof(ctl));
  struct msghdr msg;
  msg_init(&msg, &iov, ctl.buf, sizeof(ctl.buf));
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    ssize_t k = sendmsg(s, &msg, MSG_NOSIGNAL);
    if (k == (ssize_t)sizeof(r32)) break;
    int e = k < 0 ? errno : EIO;
    if (e == EINTR) continue;
    if (e == EAGAIN && weave_remaining_ms(deadline) > 0) {
      struct pollfd p = {s, POLLOUT, 0};
      poll(&p, 1, weave_remaining_ms(deadline));
      continue;
    }
    close(s);
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "fd exchange: rank %d could not send its fd to rank %d (pid %d): %s",
                      rank, peer, (int)peer_rec->pid, strerror(e));
  }
  close(s);
  return WEAVE_SUCCESS;
}

/* Reads {sender rank} + one fd from an accepted connection. *sender = -1 on a malformed message. */
static weave_result_t recv_fd(int s, int rank, int64_t deadline, int *sender, int *fd) {
  int32_t r32 = -1;
  size_t got = 0;
  *fd = -1;
  while (got < sizeof(r32)) {
    struct iovec iov = {(char *)&r32 + got, sizeof(r32) - got};
    union {
      char buf[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } ctl;
    struct msghdr msg;
    msg_init(&msg, &iov, ctl.buf, sizeof(ctl.buf));
    ssize_t k = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {s, POLLIN, 0};
      if (poll(&p, 1, weave_remaining_ms(deadline)) == 0) {
        if (*fd >= 0) close(*fd);
        return weave_fail(NULL, WEAVE_ERROR_TIMEOUT,
                          "fd exchange: rank %d: a peer connected but sent nothing within the timeout", rank);
      }
      continue;
    }
    if (k <= 0) {
      if (*fd >= 0) close(*fd);
      return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                        "fd exchange: rank %d: a peer closed its connection before sending its fd", rank);
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*fd < 0)
          *fd = f;
        else
          close(f); /* one fd per message: anything more is not ours to keep */
      }
    }
    got += (size_t)k;
  }
  *sender = r32;
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_exchange_fds(weave_bootstrap_t *bs, int rank, int fd, int *peer_fds) {
  if (!bs || !peer_fds)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_exchange_fds: %s is NULL",
                      bs ? "peer_fds" : "bootstrap");
  int world = bs->world;
  if (rank < 0 || rank >= world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_bootstrap_exchange_fds: rank %d outside [0, %d)", rank,
                      world);
  fdx_rec_t me;
  memset(&me, 0, sizeof(me));
  weave_host_id(&me.host);
  me.pidns = weave_pid_namespace();
  me.pid = (int32_t)getpid();
  me.has_fd = fd >= 0;
  unsigned long long nonce = 0;
  if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
    nonce = (unsigned long long)weave_monotonic_ms() ^ (uint64_t)(uintptr_t)&me;
  snprintf(me.name, sizeof(me.name), "weave-fdx-%d-%d-%016llx", (int)me.pid, rank, nonce);

  fdx_rec_t *all = (fdx_rec_t *)malloc((size_t)world * sizeof(fdx_rec_t));
  int *got = (int *)malloc((size_t)world * sizeof(int));
  if (!all || !got) {
    free(all);
    free(got);
    /* the others find out through the timeout of their allgather */
    return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "fd exchange: rank %d: host allocation failed", rank);
  }
  for (int r = 0; r < world; ++r) got[r] = -1;
  weave_result_t rc = bs->allgather(bs, rank, &me, all, sizeof(me));
  if (rc != WEAVE_SUCCESS) goto done;

  /* nothing to pass anywhere (one process, or one rank per host): every rank sees that alike */
  int any = 0, expected = 0;
  for (int r = 0; r < world; ++r)
    for (int s = 0; s < world; ++s) any |= sends_to(all, r, s);
  if (!any) goto done;
  for (int r = 0; r < world; ++r) expected += sends_to(all, r, rank);

  int64_t deadline = weave_monotonic_ms() + bs->timeout_ms;
  int lfd = -1;
  weave_result_t local = WEAVE_SUCCESS;
  if (expected > 0) {
    struct sockaddr_un sa;
    socklen_t len = abstract_addr(me.name, &sa);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, len) != 0 || listen(lfd, world) != 0)
      local = weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "fd exchange: rank %d cannot listen on its abstract socket: %s",
                         rank, strerror(errno));
  }
  /* every listener is up before anyone connects */
  rc = agree(bs, rank, local, "to open its socket");
  if (rc == WEAVE_SUCCESS) {
    for (int s = 0; s < world && local == WEAVE_SUCCESS; ++s)
      if (sends_to(all, rank, s)) local = send_fd(&all[s], s, rank, fd, deadline);
    for (int n = 0; n < expected && local == WEAVE_SUCCESS;) {
      struct pollfd p = {lfd, POLLIN, 0};
      int k = poll(&p, 1, weave_remaining_ms(deadline));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        char list[200] = "";
        size_t used = 0;
        for (int r = 0; r < world && used < sizeof(list) - 16; ++r)
          if (sends_to(all, r, rank) && got[r] < 0)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d", used ? ", " : "", r);
        local = weave_fail(NULL, WEAVE_ERROR_TIMEOUT, "fd exchange: rank %d got no fd from rank(s) %s within %d ms",
                           rank, list, bs->timeout_ms);
        break;
      }
      int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (c < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
        local = weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "fd exchange: rank %d: accept: %s", rank, strerror(errno));
        break;
      }
      /* An abstract socket is open to every process of the network namespace (/proc/net/unix lists
       * its name): only a rank that still owes this rank its fd is heard, and only for itself. A
       * stranger is dropped, neither failing the exchange nor passing its own descriptor off as a
       * rank's heap. */
      struct ucred cred;
      socklen_t cred_len = sizeof(cred);
      if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) cred.pid = 0, cred.uid = (uid_t)-1;
      int owed = 0;
      for (int r = 0; r < world; ++r)
        owed |= sends_to(all, r, rank) && got[r] < 0 && may_come_from(all, &me, r, cred.pid);
      if (!owed) {
        weave_log(WEAVE_LOG_WARN, NULL,
                  "fd exchange: rank %d dropped a connection from pid %d (uid %d): no rank of this team", rank,
                  (int)cred.pid, (int)cred.uid);
        close(c);
        continue;
      }
      int sender = -1, rfd = -1;
      local = recv_fd(c, rank, deadline, &sender, &rfd);
      close(c);
      if (local != WEAVE_SUCCESS) break;
      if (sender >= 0 && sender < world && !may_come_from(all, &me, sender, cred.pid)) {
        if (rfd >= 0) close(rfd);
        weave_log(WEAVE_LOG_WARN, NULL,
                  "fd exchange: rank %d dropped a descriptor from pid %d claiming to be rank %d (pid %d)", rank,
                  (int)cred.pid, sender, (int)all[sender].pid);
        continue;
      }
      if (sender < 0 || sender >= world || !sends_to(all, sender, rank) || got[sender] >= 0 || rfd < 0) {
        if (rfd >= 0) close(rfd);
        local =
            weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP,
                       "fd exchange: rank %d got an unexpected message claiming to be from rank %d (%s)", rank, sender,
                       rfd < 0 ? "no fd attached" : "not a same-host peer of another process, or a second time");
        break;
      }
      got[sender] = rfd;
      n++;
    }
    /* all-or-nothing: a rank whose peer failed must not keep half the descriptors */
    rc = agree(bs, rank, local, "to pass its fd");
  }
  if (lfd >= 0) close(lfd);

done:
  if (rc == WEAVE_SUCCESS) {
    memcpy(peer_fds, got, (size_t)world * sizeof(int));
  } else {
    for (int r = 0; r < world; ++r)
      if (got[r] >= 0) close(got[r]);
  }
  free(all);
  free(got);
  return rc;
}
