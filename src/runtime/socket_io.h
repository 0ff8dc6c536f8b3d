/*
 * What the files of the socket bootstrap share: big-endian encoding (unique ids and frames), I/O
 * bounded by a deadline (deadline_io.c), the unique id's decoding and this process's listeners
 * (unique_id.c), for the hub collective (bootstrap_socket.c) and the launcher bootstrap
 * (bootstrap_env.c).
 */
#ifndef WEAVE_RUNTIME_SOCKET_IO_H
#define WEAVE_RUNTIME_SOCKET_IO_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/internal.h"

#define WEAVE_UID_MAGIC 0x57564944u /* "WVID": a unique id of the socket bootstrap */
#define WEAVE_UID_VERSION 1u        /* of the id and of the wire protocol (the hello carries it) */

/* listen() backlog, and the hub's accepted connections whose hello has not arrived yet */
#define WEAVE_MAX_PENDING (2 * WEAVE_MAX_WORLD)

static inline void weave_be_put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}
static inline uint32_t weave_be_get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline void weave_be_put64(unsigned char *p, uint64_t v) {
  weave_be_put32(p, (uint32_t)(v >> 32));
  weave_be_put32(p + 4, (uint32_t)v);
}
static inline uint64_t weave_be_get64(const unsigned char *p) {
  return (uint64_t)weave_be_get32(p) << 32 | weave_be_get32(p + 4);
}

/* ---- deadline_io.c ----------------------------------------------------------------------------- */
typedef enum { WEAVE_IO_OK = 0, WEAVE_IO_TIMEOUT, WEAVE_IO_CLOSED, WEAVE_IO_ERROR } weave_io_t;

void weave_sleep_ms(int ms);
int weave_set_nodelay(int fd);
/* Until fd is ready for `events` (poll) or the deadline (weave_monotonic_ms) passes; EINTR retried. */
weave_io_t weave_wait_ready(int fd, short events, int64_t deadline, int *err);
/* All n bytes of a non-blocking socket, however short each send / recv returns, or why not (*err:
 * the errno). Sends never raise SIGPIPE. */
weave_io_t weave_send_all(int fd, const void *buf, size_t n, int64_t deadline, int *err);
weave_io_t weave_recv_all(int fd, void *buf, size_t n, int64_t deadline, int *err);
/* Closes a connection so that what was sent last (an ABORT) still arrives. */
void weave_close_gracefully(int fd);

/* ---- unique_id.c ------------------------------------------------------------------------------- */
/* 0, or -1 (magic), -2 (version), -3 (all zero) */
int weave_uid_decode(const weave_unique_id_t *id, weave_uid_t *u);
/* The listener of `nonce` if this very process created it (the caller is then the hub and owns the
 * descriptor), else -1 (a spoke). */
int weave_listener_take(uint64_t nonce);
/* "ip:port" of the id, for messages. */
const char *weave_uid_addr_str(const weave_uid_t *u, char *buf, size_t cap);

#endif
