/*
 * Bootstrap for ranks that are processes (torchrun, mpirun, srun, or any mix of processes and
 * threads): a star of TCP connections around one hub rank.
 *
 *  - weave_get_unique_id opens a listening socket and returns an id naming it (as NCCL does); the id
 *    reaches the other ranks by the application's own means. The rank whose process holds that
 *    listener is the hub (a process-global registry knows which listeners this process created; a
 *    child made by fork() is not the creator and closes the ones it inherits); the others connect to it.
 *  - weave_bootstrap_create_env (bootstrap_env.c) builds the same kind of id from the launcher's
 *    variables and makes rank 0 the hub: one mechanism for both.
 *
 * Allgather: every spoke sends its bytes to the hub, the hub gathers them in rank order and sends the
 * whole buffer back; a barrier is an allgather of one byte. Every frame carries the collective's
 * sequence number, kind and size, so ranks that call different collectives get WEAVE_ERROR_MISMATCH
 * rather than each other's bytes. When the hub sees a rank fail (closed connection, timeout, mismatch)
 * it first sends every other spoke an ABORT frame carrying its message, so every rank's error names
 * the same culprit; the bootstrap is then broken and every later call fails at once with that message.
 *
 * Every socket is non-blocking and every wait is a poll() bounded by WEAVE_TIMEOUT_MS; sends use
 * MSG_NOSIGNAL (a dead peer is an error code, never SIGPIPE). A spoke waits for the hub's answer a
 * little longer than the timeout (spoke_grace_ms): the hub is the one that decides which rank is late,
 * and the spoke should hear its verdict rather than race it with a vaguer timeout of its own.
 *
 * This file: the frames, the hub collective and the bootstrap's creation. The unique id and the
 * listeners: unique_id.c; I/O with deadlines: deadline_io.c; the host's identity: host_id.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/socket_io.h"

#define HELLO_MAGIC 0x5756484cu /* "WVHL" */
#define HELLO_BYTES 32
#define FRAME_BYTES 16
#define MAX_ABORT_MSG 900

enum { FRAME_ACK = 1, FRAME_DATA = 2, FRAME_ABORT = 3 };
enum { OP_CREATE = 0, OP_ALLGATHER = 1, OP_BARRIER = 2 };

static const char *op_name(int op) {
  return op == OP_ALLGATHER ? "allgather" : op == OP_BARRIER ? "barrier" : op == OP_CREATE ? "bootstrap creation" : "?";
}

typedef struct {
  uint32_t type, seq, bytes;
  int32_t arg;
} frame_t;

static void frame_encode(const frame_t *f, unsigned char *out) {
  weave_be_put32(out, f->type);
  weave_be_put32(out + 4, f->seq);
  weave_be_put32(out + 8, f->bytes);
  weave_be_put32(out + 12, (uint32_t)f->arg);
}
static void frame_decode(const unsigned char *in, frame_t *f) {
  f->type = weave_be_get32(in);
  f->seq = weave_be_get32(in + 4);
  f->bytes = weave_be_get32(in + 8);
  f->arg = (int32_t)weave_be_get32(in + 12);
}

/* ---- the bootstrap object --------------------------------------------------------------------- */
typedef struct {
  int hub; /* this rank is the hub */
  int hub_rank;
  int hub_fd;            /* spoke: its connection to the hub */
  int *fds;              /* hub: fds[r] is the connection to rank r (-1 for itself, or once it failed) */
  uint32_t seq;          /* collectives started; 0 is the creation's own */
  int grace_ms;          /* spoke_grace_ms */
  char where[48];        /* the hub's address, for messages */
  weave_result_t broken; /* WEAVE_SUCCESS while the bootstrap can be used */
  char broken_msg[MAX_ABORT_MSG + 64];
  unsigned char *buf; /* FRAME_BYTES + world * WEAVE_BOOTSTRAP_MAX_BYTES */
} sock_impl_t;

static int spoke_grace_ms(int timeout_ms) { return 250 + timeout_ms / 4; }

/* Sends an ABORT frame carrying `msg` (best effort: the peer may be gone too). */
static void send_abort(int fd, weave_result_t code, int culprit, const char *msg) {
  if (fd < 0) return;
  unsigned char frame[FRAME_BYTES + MAX_ABORT_MSG];
  size_t len = strlen(msg);
  if (len > MAX_ABORT_MSG) len = MAX_ABORT_MSG;
  frame_t f = {FRAME_ABORT, (uint32_t)culprit, (uint32_t)len, (int32_t)code};
  frame_encode(&f, frame);
  memcpy(frame + FRAME_BYTES, msg, len);
  int err;
  weave_send_all(fd, frame, FRAME_BYTES + len, weave_monotonic_ms() + 200, &err);
}

/* Records a failure that leaves the bootstrap unusable: on the hub, every spoke still connected
 * (the culprit too, when it is alive: a mismatched or late rank) first gets an ABORT frame with the
 * message; every later call fails with it. A dead rank's connection is closed before this. */
static weave_result_t sock_break(weave_bootstrap_t *bs, weave_result_t code, int culprit, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static weave_result_t sock_break(weave_bootstrap_t *bs, weave_result_t code, int culprit, const char *fmt, ...) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  char msg[MAX_ABORT_MSG + 1];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (s->hub)
    for (int r = 0; r < bs->world; ++r)
      if (s->fds[r] >= 0) send_abort(s->fds[r], code, culprit, msg);
  s->broken = code;
  snprintf(s->broken_msg, sizeof(s->broken_msg), "%s", msg);
  return weave_fail(NULL, code, "%s", msg);
}

/* A spoke got an ABORT frame header `f`: reads its message and breaks the bootstrap with it. */
static weave_result_t spoke_take_abort(weave_bootstrap_t *bs, const frame_t *f, int64_t deadline) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  char msg[MAX_ABORT_MSG + 1] = "";
  size_t len = f->bytes > MAX_ABORT_MSG ? MAX_ABORT_MSG : f->bytes;
  int err;
  if (weave_recv_all(s->hub_fd, msg, len, deadline, &err) != WEAVE_IO_OK)
    snprintf(msg, sizeof(msg), "(message lost)");
  else
    msg[len] = '\0';
  weave_result_t code =
      f->arg > WEAVE_SUCCESS && f->arg < WEAVE_NUM_RESULTS ? (weave_result_t)f->arg : WEAVE_ERROR_BOOTSTRAP;
  if (s->hub_rank < 0) /* turned away before joining */
    return sock_break(bs, code, -1, "%s [reported by the hub at %s to rank %d]", msg, s->where, bs->rank);
  return sock_break(bs, code, -1, "%s [reported by the hub, rank %d, to rank %d]", msg, s->hub_rank, bs->rank);
}

/* After a failed send to the hub: an ABORT that is already waiting explains it better than EPIPE. */
static int spoke_pending_abort(weave_bootstrap_t *bs, weave_result_t *rc) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  unsigned char hdr[FRAME_BYTES];
  ssize_t k = recv(s->hub_fd, hdr, sizeof(hdr), MSG_PEEK | MSG_DONTWAIT);
  if (k != (ssize_t)sizeof(hdr)) return 0;
  frame_t f;
  frame_decode(hdr, &f);
  if (f.type != FRAME_ABORT) return 0;
  int err;
  weave_recv_all(s->hub_fd, hdr, sizeof(hdr), weave_monotonic_ms() + 100, &err);
  *rc = spoke_take_abort(bs, &f, weave_monotonic_ms() + 100);
  return 1;
}

static const char *io_why(weave_io_t io, int err, char *buf, size_t cap) {
  if (io == WEAVE_IO_CLOSED)
    snprintf(buf, cap, "closed its connection (process gone?)");
  else
    snprintf(buf, cap, "connection failed: %s", strerror(err));
  return buf;
}

/* Hub: reads n bytes of collective `seq` from spoke r; a silent, closed or failed spoke breaks the
 * bootstrap with its rank named. */
static weave_result_t hub_recv(weave_bootstrap_t *bs, int r, void *buf, size_t n, int64_t deadline, int op,
                               uint32_t seq) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  int err;
  weave_io_t io = weave_recv_all(s->fds[r], buf, n, deadline, &err);
  if (io == WEAVE_IO_TIMEOUT)
    return sock_break(bs, WEAVE_ERROR_TIMEOUT, r,
                      "bootstrap: rank %d sent a partial frame in %s #%u and went silent for %d ms", r, op_name(op),
                      seq, bs->timeout_ms);
  if (io != WEAVE_IO_OK) {
    char why[160];
    close(s->fds[r]);
    s->fds[r] = -1;
    return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, r, "bootstrap: rank %d %s during %s #%u", r,
                      io_why(io, err, why, sizeof(why)), op_name(op), seq);
  }
  return WEAVE_SUCCESS;
}

/* Hub: reads one DATA frame of collective `seq` from every spoke into out (rank-major), in whatever
 * order they arrive, so a dead or mismatched rank is seen at once. */
static weave_result_t hub_gather(weave_bootstrap_t *bs, int op, uint32_t seq, size_t bytes, unsigned char *out,
                                 int64_t deadline) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  int pending[WEAVE_MAX_WORLD], np = 0;
  for (int r = 0; r < bs->world; ++r)
    if (r != bs->rank) pending[np++] = r;
  while (np > 0) {
    struct pollfd p[WEAVE_MAX_WORLD];
    for (int i = 0; i < np; ++i) p[i] = (struct pollfd){s->fds[pending[i]], POLLIN, 0};
    int n = poll(p, (nfds_t)np, weave_remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1, "bootstrap: poll failed in %s #%u: %s", op_name(op), seq,
                        strerror(errno));
    if (n == 0) {
      char list[256] = "";
      size_t used = 0;
      for (int i = 0; i < np && used < sizeof(list) - 16; ++i)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d", i ? ", " : "", pending[i]);
      return sock_break(
          bs, WEAVE_ERROR_TIMEOUT, -1,
          "bootstrap: rank%s %s did not reach %s #%u within %d ms (still connected: stuck, or busy elsewhere?)",
          np > 1 ? "s" : "", list, op_name(op), seq, bs->timeout_ms);
    }
    int kept = 0;
    for (int i = 0; i < np; ++i) {
      int r = pending[i];
      if (!p[i].revents) {
        pending[kept++] = r;
        continue;
      }
      unsigned char hdr[FRAME_BYTES];
      WEAVE_CHECK(hub_recv(bs, r, hdr, sizeof(hdr), deadline, op, seq));
      frame_t f;
      frame_decode(hdr, &f);
      if (f.type != FRAME_DATA || f.bytes > WEAVE_BOOTSTRAP_MAX_BYTES)
        return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, r,
                          "bootstrap: rank %d sent a malformed frame (type %u, %u bytes) in %s #%u", r, f.type, f.bytes,
                          op_name(op), seq);
      if (f.seq != seq || f.arg != op)
        return sock_break(
            bs, WEAVE_ERROR_MISMATCH, r,
            "bootstrap: rank %d is in %s #%u while the hub (rank %d) is in %s #%u (ranks called different collectives)",
            r, op_name(f.arg), f.seq, bs->rank, op_name(op), seq);
      if (f.bytes != bytes)
        return sock_break(bs, WEAVE_ERROR_MISMATCH, r,
                          "bootstrap: %s #%u: rank %d passed %u bytes, the hub (rank %d) passed %zu", op_name(op), seq,
                          r, f.bytes, bs->rank, bytes);
      WEAVE_CHECK(hub_recv(bs, r, out + (size_t)r * bytes, bytes, deadline, op, seq));
    }
    np = kept;
  }
  return WEAVE_SUCCESS;
}

/* One collective: `op` numbered `seq`, `bytes` from every rank into out. A spoke waits for the hub's
 * answer until reply_deadline (later than its own deadline: see spoke_grace_ms). */
static weave_result_t sock_collective(weave_bootstrap_t *bs, int op, const void *in, void *out, size_t bytes,
                                      int64_t deadline, int64_t reply_deadline) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  int64_t t0 = weave_monotonic_ms();
  uint32_t seq = s->seq++;
  size_t total = (size_t)bs->world * bytes;
  unsigned char *data = s->buf + FRAME_BYTES;
  char why[160];
  int err;
  if (s->hub) {
    memcpy(data + (size_t)bs->rank * bytes, in, bytes);
    WEAVE_CHECK(hub_gather(bs, op, seq, bytes, data, deadline));
    frame_t f = {FRAME_DATA, seq, (uint32_t)total, op};
    frame_encode(&f, s->buf);
    for (int r = 0; r < bs->world; ++r) {
      if (r == bs->rank) continue;
      weave_io_t io = weave_send_all(s->fds[r], s->buf, FRAME_BYTES + total, deadline, &err);
      if (io == WEAVE_IO_TIMEOUT)
        return sock_break(bs, WEAVE_ERROR_TIMEOUT, r,
                          "bootstrap: rank %d did not take the result of %s #%u within %d ms", r, op_name(op), seq,
                          bs->timeout_ms);
      if (io != WEAVE_IO_OK) {
        close(s->fds[r]);
        s->fds[r] = -1;
        return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, r, "bootstrap: rank %d %s during %s #%u", r,
                          io_why(io, err, why, sizeof(why)), op_name(op), seq);
      }
    }
  } else {
    frame_t f = {FRAME_DATA, seq, (uint32_t)bytes, op};
    frame_encode(&f, s->buf);
    memcpy(data, in, bytes);
    weave_io_t io = weave_send_all(s->hub_fd, s->buf, FRAME_BYTES + bytes, deadline, &err);
    if (io != WEAVE_IO_OK) {
      weave_result_t rc;
      if (spoke_pending_abort(bs, &rc)) return rc;
      if (io == WEAVE_IO_TIMEOUT)
        return sock_break(bs, WEAVE_ERROR_TIMEOUT, -1,
                          "bootstrap: rank %d could not send %s #%u to the hub (rank %d at %s) within %d ms", bs->rank,
                          op_name(op), seq, s->hub_rank, s->where, bs->timeout_ms);
      return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1,
                        "bootstrap: the hub, rank %d, %s during %s #%u (seen by rank %d)", s->hub_rank,
                        io_why(io, err, why, sizeof(why)), op_name(op), seq, bs->rank);
    }
    unsigned char hdr[FRAME_BYTES];
    io = weave_recv_all(s->hub_fd, hdr, sizeof(hdr), reply_deadline, &err);
    if (io == WEAVE_IO_TIMEOUT)
      return sock_break(
          bs, WEAVE_ERROR_TIMEOUT, -1,
          "bootstrap: rank %d got no answer from the hub (rank %d at %s) in %s #%u within %d ms (the hub is stuck or gone)",
          bs->rank, s->hub_rank, s->where, op_name(op), seq, (int)(weave_monotonic_ms() - t0));
    if (io != WEAVE_IO_OK)
      return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1,
                        "bootstrap: the hub, rank %d, %s during %s #%u (seen by rank %d)", s->hub_rank,
                        io_why(io, err, why, sizeof(why)), op_name(op), seq, bs->rank);
    frame_decode(hdr, &f);
    if (f.type == FRAME_ABORT) return spoke_take_abort(bs, &f, weave_monotonic_ms() + 1000);
    if (f.type != FRAME_DATA || f.seq != seq || f.arg != op || f.bytes != total)
      return sock_break(
          bs, WEAVE_ERROR_BOOTSTRAP, -1,
          "bootstrap: rank %d expected the result of %s #%u (%zu bytes) from the hub (rank %d), got frame type %u for %s #%u (%u bytes)",
          bs->rank, op_name(op), seq, total, s->hub_rank, f.type, op_name(f.arg), f.seq, f.bytes);
    io = weave_recv_all(s->hub_fd, data, total, reply_deadline, &err);
    if (io == WEAVE_IO_TIMEOUT)
      return sock_break(bs, WEAVE_ERROR_TIMEOUT, -1,
                        "bootstrap: rank %d got a partial result of %s #%u from the hub (rank %d)", bs->rank,
                        op_name(op), seq, s->hub_rank);
    if (io != WEAVE_IO_OK)
      return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1,
                        "bootstrap: the hub, rank %d, %s during %s #%u (seen by rank %d)", s->hub_rank,
                        io_why(io, err, why, sizeof(why)), op_name(op), seq, bs->rank);
  }
  memcpy(out, data, total); /* only now: outputs are written on success only */
  return WEAVE_SUCCESS;
}

static weave_result_t sock_check_call(weave_bootstrap_t *bs, int rank, const char *what) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  if (rank != bs->rank)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "bootstrap %s: rank %d, but this bootstrap object is rank %d's", what, rank, bs->rank);
  if (s->broken != WEAVE_SUCCESS) return weave_fail(NULL, s->broken, "%s", s->broken_msg);
  return WEAVE_SUCCESS;
}

static weave_result_t sock_allgather(weave_bootstrap_t *bs, int rank, const void *in, void *out, size_t bytes) {
  if (!in || !out || bytes == 0 || bytes > WEAVE_BOOTSTRAP_MAX_BYTES)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "bootstrap allgather: %zu bytes (1..%d), in %p, out %p",
                      bytes, WEAVE_BOOTSTRAP_MAX_BYTES, in, out);
  WEAVE_CHECK(sock_check_call(bs, rank, "allgather"));
  int64_t deadline = weave_monotonic_ms() + bs->timeout_ms;
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  return sock_collective(bs, OP_ALLGATHER, in, out, bytes, deadline, deadline + s->grace_ms);
}

static weave_result_t sock_barrier(weave_bootstrap_t *bs, int rank) {
  WEAVE_CHECK(sock_check_call(bs, rank, "barrier"));
  int64_t deadline = weave_monotonic_ms() + bs->timeout_ms;
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  unsigned char in = 1, out[WEAVE_MAX_WORLD];
  return sock_collective(bs, OP_BARRIER, &in, out, 1, deadline, deadline + s->grace_ms);
}

static void sock_destroy(weave_bootstrap_t *bs) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  if (s->hub_fd >= 0) weave_close_gracefully(s->hub_fd);
  if (s->fds)
    for (int r = 0; r < bs->world; ++r) weave_close_gracefully(s->fds[r]);
  free(s->fds);
  free(s->buf);
  free(s);
  free(bs);
}

/* ---- creation --------------------------------------------------------------------------------- */
typedef struct {
  int fd;
  size_t got;
  unsigned char hello[HELLO_BYTES];
} pending_conn_t;

/* Hub: accepts the world - 1 spokes. Connections are served as their hellos arrive, so a stray
 * connection that never speaks cannot hold the others up. */
static weave_result_t hub_accept(weave_bootstrap_t *bs, const weave_uid_t *u, int listen_fd, int64_t deadline) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  pending_conn_t pend[WEAVE_MAX_PENDING];
  int npend = 0, connected = 0, strangers = 0, bad_claims = 0;
  char stranger_note[200] = "", claim_note[200] = "";
  weave_result_t rc = WEAVE_SUCCESS;
  while (connected < bs->world - 1 && rc == WEAVE_SUCCESS) {
    struct pollfd p[1 + WEAVE_MAX_PENDING];
    p[0] = (struct pollfd){listen_fd, POLLIN, 0};
    for (int i = 0; i < npend; ++i) p[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
    int n = poll(p, (nfds_t)(1 + npend), weave_remaining_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1, "bootstrap creation: poll failed on the hub (rank %d): %s",
                      bs->rank, strerror(errno));
      break;
    }
    if (n == 0) {
      char list[256] = "";
      size_t used = 0;
      int missing = 0;
      for (int r = 0; r < bs->world; ++r)
        if (r != bs->rank && s->fds[r] < 0) {
          if (used < sizeof(list) - 16)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%d", missing ? ", " : "", r);
          missing++;
        }
      rc = sock_break(
          bs, WEAVE_ERROR_TIMEOUT, -1,
          "bootstrap creation: rank%s %s did not connect to the hub (rank %d at %s) within %d ms (%d of %d ranks arrived)%s%s",
          missing > 1 ? "s" : "", list, bs->rank, s->where, bs->timeout_ms, bs->world - missing, bs->world,
          stranger_note, claim_note);
      break;
    }
    /* hellos first: the pending array may shrink, and accepted connections append to it */
    for (int i = npend - 1; i >= 0 && rc == WEAVE_SUCCESS; --i) {
      if (!p[1 + i].revents) continue;
      pending_conn_t *c = &pend[i];
      ssize_t k = recv(c->fd, c->hello + c->got, HELLO_BYTES - c->got, 0);
      if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      int drop = k <= 0, keep_fd = 0;
      if (k > 0 && (c->got += (size_t)k) == HELLO_BYTES) {
        drop = 1;
        uint64_t nonce = weave_be_get64(c->hello + 8);
        int world = (int32_t)weave_be_get32(c->hello + 16), rank = (int32_t)weave_be_get32(c->hello + 20);
        if (weave_be_get32(c->hello) != HELLO_MAGIC || weave_be_get32(c->hello + 4) != WEAVE_UID_VERSION) {
          weave_log(WEAVE_LOG_INFO, NULL, "bootstrap: the hub (rank %d) dropped a connection that is not a weave rank",
                    bs->rank);
        } else if (nonce != u->nonce) {
          /* another job on this port (a fixed port of the environment bootstrap): turn it away with
           * a clear message, and keep waiting for our own ranks */
          char msg[256];
          snprintf(
              msg, sizeof(msg),
              "bootstrap creation: %s belongs to another bootstrap (a different unique id, or a launch with another "
              "MASTER_ADDR/port/WORLD_SIZE/job: this rank has world %d, that hub %d)",
              s->where, world, bs->world);
          send_abort(c->fd, WEAVE_ERROR_BOOTSTRAP, rank, msg);
          strangers++;
          snprintf(stranger_note, sizeof(stranger_note),
                   "; %d connection%s of another bootstrap turned away (last: rank %d of world %d)", strangers,
                   strangers > 1 ? "s" : "", rank, world);
        } else if (world != bs->world) {
          char msg[256];
          snprintf(msg, sizeof(msg),
                   "bootstrap creation: rank %d was created with world %d, the hub (rank %d) with world %d", rank,
                   world, bs->rank, bs->world);
          send_abort(c->fd, WEAVE_ERROR_MISMATCH, rank, msg);
          rc = sock_break(bs, WEAVE_ERROR_MISMATCH, -1, "%s", msg); /* every connected rank hears it */
        } else if (rank < 0 || rank >= bs->world || rank == bs->rank || s->fds[rank] >= 0) {
          /* a rank no process may claim now (outside [0, world), the hub's own, or one that has
           * joined already): that connection alone is turned away and the hub keeps waiting, so a
           * stray or confused peer can neither break the bootstrap nor take a rank from the process
           * that holds it. Were it a launcher's mistake (one rank given twice), another rank never
           * comes, and the timeout's message mentions this claim. */
          char msg[256];
          if (rank < 0 || rank >= bs->world)
            snprintf(
                msg, sizeof(msg),
                "bootstrap creation: a connection to the hub (rank %d at %s) claimed rank %d, outside [0, %d): turned away",
                bs->rank, s->where, rank, bs->world);
          else
            snprintf(
                msg, sizeof(msg),
                "bootstrap creation: a connection to the hub (rank %d at %s) claimed rank %d, which has joined already (the "
                "same rank given to two processes?): turned away",
                bs->rank, s->where, rank);
          send_abort(c->fd, WEAVE_ERROR_BOOTSTRAP, rank, msg);
          weave_log(WEAVE_LOG_WARN, NULL, "%s", msg);
          bad_claims++;
          snprintf(claim_note, sizeof(claim_note),
                   "; %d connection%s claiming a rank outside [0, %d) or taken already turned away (last: rank %d)",
                   bad_claims, bad_claims > 1 ? "s" : "", bs->world, rank);
        } else {
          /* welcome: the ACK tells the spoke the hub's rank and how long the hub will wait, so the
           * spoke waits for the hub's verdict at least that long */
          unsigned char ack[FRAME_BYTES];
          frame_t f = {FRAME_ACK, (uint32_t)weave_remaining_ms(deadline), 0, bs->rank};
          frame_encode(&f, ack);
          int err;
          if (weave_send_all(c->fd, ack, sizeof(ack), deadline, &err) == WEAVE_IO_OK) {
            s->fds[rank] = c->fd;
            connected++;
            keep_fd = 1;
          } else {
            rc = sock_break(bs, WEAVE_ERROR_BOOTSTRAP, rank,
                            "bootstrap creation: rank %d closed its connection (process gone?) while joining", rank);
          }
        }
      }
      if (drop) {
        if (!keep_fd) weave_close_gracefully(c->fd);
        pend[i] = pend[--npend];
      }
    }
    if (rc != WEAVE_SUCCESS || !(p[0].revents & POLLIN)) continue;
    for (;;) {
      int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        rc = sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1,
                        "bootstrap creation: the hub (rank %d) cannot accept connections: %s", bs->rank,
                        strerror(errno));
        break;
      }
      if (npend == WEAVE_MAX_PENDING) {
        close(fd);
        continue;
      } /* a flood of strays: ours will retry */
      weave_set_nodelay(fd);
      pend[npend].fd = fd;
      pend[npend].got = 0;
      npend++;
    }
  }
  for (int i = 0; i < npend; ++i) weave_close_gracefully(pend[i].fd);
  return rc;
}

/* A TCP socket connected to itself: a connect() to a port of this host that nobody listens on can
 * be given that very port as its source port (when it lies in the ephemeral range, as torchrun's
 * MASTER_PORT + 1 may), and TCP's simultaneous open then joins the socket to itself. */
static int connected_to_itself(int fd) {
  struct sockaddr_in a, b;
  socklen_t la = sizeof(a), lb = sizeof(b);
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  if (getsockname(fd, (struct sockaddr *)&a, &la) != 0 || getpeername(fd, (struct sockaddr *)&b, &lb) != 0) return 0;
  return a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr;
}

/* Spoke: connects to the hub (retrying while nobody listens yet), says hello, reads the ACK. */
static weave_result_t spoke_connect(weave_bootstrap_t *bs, const weave_uid_t *u, int64_t deadline, int *hub_remaining) {
  sock_impl_t *s = (sock_impl_t *)bs->impl;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = u->addr;
  sa.sin_port = htons(u->port);
  int backoff = 10, last_err = 0, fd = -1;
  for (;;) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1, "bootstrap creation: rank %d: socket: %s", bs->rank,
                        strerror(errno));
    int err = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        weave_io_t w = weave_wait_ready(fd, POLLOUT, deadline, &err);
        if (w == WEAVE_IO_TIMEOUT)
          err = ETIMEDOUT;
        else if (w == WEAVE_IO_OK) {
          socklen_t len = sizeof(err);
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
    }
    if (err == 0 && connected_to_itself(fd)) {
      /* nobody listens yet: reset (an orderly close would leave the port in TIME_WAIT, where the hub
       * cannot bind it for a minute) and retry as if refused */
      struct linger reset = {1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      err = ECONNREFUSED;
    }
    if (err == 0) break;
    close(fd);
    fd = -1;
    last_err = err;
    /* nobody listens yet (the hub starts later), or the network is not up yet: retry */
    int transient = err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
                    err == ECONNRESET || err == ECONNABORTED || err == EAGAIN;
    if (!transient || weave_remaining_ms(deadline) == 0)
      return sock_break(
          bs, transient ? WEAVE_ERROR_TIMEOUT : WEAVE_ERROR_BOOTSTRAP, -1,
          "bootstrap creation: rank %d could not connect to the hub at %s within %d ms (%s): is the rank that "
          "holds the id (or rank 0 of the launch) running and reachable?",
          bs->rank, s->where, bs->timeout_ms, strerror(last_err));
    int wait = weave_remaining_ms(deadline);
    weave_sleep_ms(wait < backoff ? wait : backoff);
    backoff = backoff * 2 > 200 ? 200 : backoff * 2;
  }
  weave_set_nodelay(fd);
  s->hub_fd = fd;
  unsigned char hello[HELLO_BYTES];
  memset(hello, 0, sizeof(hello));
  weave_be_put32(hello, HELLO_MAGIC);
  weave_be_put32(hello + 4, WEAVE_UID_VERSION);
  weave_be_put64(hello + 8, u->nonce);
  weave_be_put32(hello + 16, (uint32_t)bs->world);
  weave_be_put32(hello + 20, (uint32_t)bs->rank);
  int err;
  char why[160];
  weave_io_t io = weave_send_all(fd, hello, sizeof(hello), deadline, &err);
  unsigned char hdr[FRAME_BYTES];
  if (io == WEAVE_IO_OK) io = weave_recv_all(fd, hdr, sizeof(hdr), deadline, &err);
  if (io == WEAVE_IO_TIMEOUT)
    return sock_break(
        bs, WEAVE_ERROR_TIMEOUT, -1,
        "bootstrap creation: rank %d connected to %s but no hub answered within %d ms: the process that called "
        "weave_get_unique_id must itself create one of the ranks with this id",
        bs->rank, s->where, bs->timeout_ms);
  if (io != WEAVE_IO_OK)
    return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1, "bootstrap creation: the hub at %s %s before accepting rank %d",
                      s->where, io_why(io, err, why, sizeof(why)), bs->rank);
  frame_t f;
  frame_decode(hdr, &f);
  if (f.type == FRAME_ABORT) return spoke_take_abort(bs, &f, weave_monotonic_ms() + 1000);
  if (f.type != FRAME_ACK || f.arg < 0 || f.arg >= bs->world)
    return sock_break(bs, WEAVE_ERROR_BOOTSTRAP, -1,
                      "bootstrap creation: rank %d got a malformed answer from %s (type %u)", bs->rank, s->where,
                      f.type);
  s->hub_rank = f.arg;
  *hub_remaining = (int)f.seq;
  return WEAVE_SUCCESS;
}

weave_result_t weave_uid_bootstrap_create(const weave_uid_t *u, int world, int rank, int listen_fd, int local_rank,
                                          int local_world, int64_t deadline_ms, const char *who,
                                          weave_bootstrap_t **bootstrap) {
  weave_env_t env;
  weave_result_t rc = weave_env_load(&env);
  weave_bootstrap_t *bs = NULL;
  sock_impl_t *s = NULL;
  if (rc == WEAVE_SUCCESS) {
    bs = (weave_bootstrap_t *)calloc(1, sizeof(*bs));
    s = (sock_impl_t *)calloc(1, sizeof(*s));
    if (s) {
      s->fds = (int *)malloc((size_t)world * sizeof(int));
      s->buf = (unsigned char *)malloc(FRAME_BYTES + (size_t)world * WEAVE_BOOTSTRAP_MAX_BYTES);
    }
    if (!bs || !s || !s->fds || !s->buf) {
      if (s) {
        free(s->fds);
        free(s->buf);
      }
      free(s);
      free(bs);
      rc = weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "%s: host allocation failed", who);
    }
  }
  if (rc != WEAVE_SUCCESS) {
    if (listen_fd >= 0) close(listen_fd);
    return rc;
  }
  for (int r = 0; r < world; ++r) s->fds[r] = -1;
  s->hub_fd = -1;
  s->hub = world == 1 || listen_fd >= 0;
  s->hub_rank = s->hub ? rank : -1;
  s->grace_ms = spoke_grace_ms(env.timeout_ms);
  weave_uid_addr_str(u, s->where, sizeof(s->where));
  bs->world = world;
  bs->rank = rank;
  bs->timeout_ms = env.timeout_ms;
  bs->allgather = sock_allgather;
  bs->barrier = sock_barrier;
  bs->destroy = sock_destroy;
  bs->impl = s;

  int64_t deadline = deadline_ms > 0 ? deadline_ms : weave_monotonic_ms() + env.timeout_ms;
  int64_t reply_deadline = deadline;
  if (s->hub) {
    if (world > 1) rc = hub_accept(bs, u, listen_fd, deadline);
  } else {
    int hub_remaining = 0;
    rc = spoke_connect(bs, u, deadline, &hub_remaining);
    /* wait for the hub's verdict on the whole world at least as long as the hub waits for it */
    int64_t hub_deadline = weave_monotonic_ms() + hub_remaining;
    reply_deadline = (hub_deadline > deadline ? hub_deadline : deadline) + s->grace_ms;
  }
  /* every rank has arrived (or creation failed): the listener has done its job */
  if (listen_fd >= 0) close(listen_fd);

  /* where every rank runs: local_rank / local_world for picking devices (unless the launcher said) */
  if (rc == WEAVE_SUCCESS) {
    weave_host_id_t me, *all = (weave_host_id_t *)malloc((size_t)world * sizeof(weave_host_id_t));
    weave_host_id(&me);
    if (!all)
      rc = weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "%s: host allocation failed", who);
    else
      rc = sock_collective(bs, OP_CREATE, &me, all, sizeof(me), deadline, reply_deadline);
    if (rc == WEAVE_SUCCESS) {
      int lr = 0, lw = 0;
      for (int r = 0; r < world; ++r)
        if (weave_same_host(&all[r], &me)) {
          lw++;
          if (r < rank) lr++;
        }
      bs->local_rank = local_rank >= 0 ? local_rank : lr;
      bs->local_world = local_world >= 1 ? local_world : lw;
    }
    free(all);
  }
  if (rc != WEAVE_SUCCESS) {
    /* keep the thread's message: destroying must not overwrite it */
    sock_destroy(bs);
    return rc;
  }
  weave_log(WEAVE_LOG_INFO, NULL, "%s: rank %d of %d (local %d of %d), hub rank %d at %s", who, rank, world,
            bs->local_rank, bs->local_world, s->hub_rank, s->where);
  *bootstrap = bs;
  return WEAVE_SUCCESS;
}

weave_result_t weave_bootstrap_create_uid(const weave_unique_id_t *id, int world, int rank,
                                          weave_bootstrap_t **bootstrap) {
  static const char who[] = "weave_bootstrap_create_uid";
  if (!id) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: id is NULL", who);
  if (!bootstrap) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: bootstrap is NULL", who);
  if (world < 1 || world > WEAVE_MAX_WORLD)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: world %d outside [1, %d]", who, world, WEAVE_MAX_WORLD);
  if (rank < 0 || rank >= world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: rank %d outside [0, %d)", who, rank, world);
  weave_uid_t u;
  int d = weave_uid_decode(id, &u);
  if (d == -3)
    return weave_fail(
        NULL, WEAVE_ERROR_INVALID_ARGUMENT,
        "%s: the unique id is empty (all zero): the rank that should have made it with weave_get_unique_id "
        "failed or never sent it",
        who);
  if (d == -2)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: the unique id has version %u, this library %u (mixed weave versions?)", who,
                      weave_be_get32((const unsigned char *)id->internal + 4), WEAVE_UID_VERSION);
  if (d != 0)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "%s: not a weave unique id (bad magic): pass the bytes weave_get_unique_id wrote, unchanged",
                      who);
  /* the hub is the rank in the process that created the id (the first to call in, when several
   * ranks live in that process); it owns the listener from here and closes it once every rank is in */
  int listen_fd = weave_listener_take(u.nonce);
  return weave_uid_bootstrap_create(&u, world, rank, listen_fd, -1, -1, 0, who, bootstrap);
}
