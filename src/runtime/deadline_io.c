/* I/O bounded by a deadline, for the socket bootstrap (socket_io.h): non-blocking sockets, every
 * wait a poll() bounded by the deadline, short sends and receives resumed. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/socket_io.h"

int64_t weave_monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int weave_remaining_ms(int64_t deadline_ms) {
  int64_t r = deadline_ms - weave_monotonic_ms();
  return r < 0 ? 0 : r > INT_MAX ? INT_MAX : (int)r;
}

void weave_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int weave_set_nodelay(int fd) {
  int one = 1;
  return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int is_closed_errno(int e) { return e == EPIPE || e == ECONNRESET || e == ECONNABORTED || e == ENOTCONN; }

weave_io_t weave_wait_ready(int fd, short events, int64_t deadline, int *err) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, weave_remaining_ms(deadline));
    if (n > 0) return WEAVE_IO_OK; /* also POLLHUP/POLLERR: the next send/recv says what happened */
    if (n == 0) return WEAVE_IO_TIMEOUT;
    if (errno != EINTR) {
      *err = errno;
      return WEAVE_IO_ERROR;
    }
  }
}

weave_io_t weave_send_all(int fd, const void *buf, size_t n, int64_t deadline, int *err) {
  const unsigned char *p = (const unsigned char *)buf;
  *err = 0;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      weave_io_t w = weave_wait_ready(fd, POLLOUT, deadline, err);
      if (w != WEAVE_IO_OK) return w;
      continue;
    }
    *err = k < 0 ? errno : EPIPE;
    return is_closed_errno(*err) ? WEAVE_IO_CLOSED : WEAVE_IO_ERROR;
  }
  return WEAVE_IO_OK;
}

weave_io_t weave_recv_all(int fd, void *buf, size_t n, int64_t deadline, int *err) {
  unsigned char *p = (unsigned char *)buf;
  *err = 0;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= (size_t)k;
      continue;
    }
    if (k == 0) return WEAVE_IO_CLOSED;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      weave_io_t w = weave_wait_ready(fd, POLLIN, deadline, err);
      if (w != WEAVE_IO_OK) return w;
      continue;
    }
    *err = errno;
    return is_closed_errno(*err) ? WEAVE_IO_CLOSED : WEAVE_IO_ERROR;
  }
  return WEAVE_IO_OK;
}

/* Unread input at close() makes Linux send a reset, which may overtake the last frame sent, so the
 * input is drained first. */
void weave_close_gracefully(int fd) {
  if (fd < 0) return;
  shutdown(fd, SHUT_WR);
  unsigned char scratch[4096];
  for (int i = 0; i < 64; ++i) {
    ssize_t k = recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (k <= 0 && !(k < 0 && errno == EINTR)) break;
  }
  close(fd);
}
