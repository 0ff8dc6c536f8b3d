/* The unique id of the socket bootstrap (weave_get_unique_id, weave.h): a listening socket this
 * process holds and the id naming it (address, port, nonce), and the registry that tells its
 * creator, the hub, from every other process (bootstrap_socket.c describes the protocol). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "runtime/socket_io.h"

/* Layout of weave_unique_id_t.internal, big-endian: magic, version, IPv4 address (network order as
 * is), port, 2 zero bytes, nonce; the rest zero. */
void weave_uid_encode(const weave_uid_t *u, weave_unique_id_t *id) {
  memset(id, 0, sizeof(*id));
  unsigned char *p = (unsigned char *)id->internal;
  weave_be_put32(p, WEAVE_UID_MAGIC);
  weave_be_put32(p + 4, WEAVE_UID_VERSION);
  memcpy(p + 8, &u->addr, 4);
  p[12] = (unsigned char)(u->port >> 8);
  p[13] = (unsigned char)u->port;
  weave_be_put64(p + 16, u->nonce);
}

int weave_uid_decode(const weave_unique_id_t *id, weave_uid_t *u) {
  const unsigned char *p = (const unsigned char *)id->internal;
  int zero = 1;
  for (size_t i = 0; i < sizeof(id->internal); ++i) zero &= p[i] == 0;
  if (zero) return -3;
  if (weave_be_get32(p) != WEAVE_UID_MAGIC) return -1;
  if (weave_be_get32(p + 4) != WEAVE_UID_VERSION) return -2;
  memcpy(&u->addr, p + 8, 4);
  u->port = (uint16_t)(p[12] << 8 | p[13]);
  u->nonce = weave_be_get64(p + 16);
  return 0;
}

/* Listeners this process created with weave_get_unique_id, by nonce. A fork()ed child is not their
 * creator and can never be their hub: it closes the ones it inherits (registry_child), and the pid
 * tells it so should the list reach it anyway. */
typedef struct listener {
  uint64_t nonce;
  int fd;
  pid_t pid;
  struct listener *next;
} listener_t;

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static listener_t *registry;

int weave_listener_take(uint64_t nonce) {
  int fd = -1;
  pid_t me = getpid();
  pthread_mutex_lock(&registry_mu);
  for (listener_t **pl = &registry; *pl; pl = &(*pl)->next) {
    listener_t *l = *pl;
    if (l->nonce == nonce && l->pid == me) {
      *pl = l->next;
      fd = l->fd;
      free(l);
      break;
    }
  }
  pthread_mutex_unlock(&registry_mu);
  return fd;
}

/* fork(): kept, an inherited listener would leak a descriptor into every child and keep the port
 * listening (connections queued that nobody serves) after the parent's hub has closed it. The lock
 * is held across fork() so that the child finds the list whole and the lock free. */
static void registry_prepare(void) { pthread_mutex_lock(&registry_mu); }
static void registry_parent(void) { pthread_mutex_unlock(&registry_mu); }
static void registry_child(void) {
  while (registry) {
    listener_t *l = registry;
    registry = l->next;
    close(l->fd);
    free(l);
  }
  pthread_mutex_unlock(&registry_mu);
}
static pthread_once_t registry_once = PTHREAD_ONCE_INIT;
static void registry_init(void) { pthread_atfork(registry_prepare, registry_parent, registry_child); }

static uint64_t random64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    /* no entropy yet (early boot): time, pid and a counter still make collisions unlikely */
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t parts[4] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid(),
                         __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED)};
    v = weave_fnv1a(WEAVE_FNV_OFFSET, parts, sizeof(parts));
  }
  return v ? v : 1;
}

int weave_resolve_ipv4(const char *host, uint32_t *addr, const char **why) {
  struct in_addr a;
  if (inet_pton(AF_INET, host, &a) == 1) {
    *addr = a.s_addr;
    return 0;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res) {
    *why = rc ? gai_strerror(rc) : "no address";
    return -1;
  }
  *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
  freeaddrinfo(res);
  return 0;
}

/* The address the id advertises: WEAVE_SOCKET_ADDR, else the first non-loopback IPv4 address of an
 * interface that is up (docker/virbr bridges skipped: other hosts cannot reach them), else
 * 127.0.0.1. */
static weave_result_t pick_address(uint32_t *addr) {
  const char *v = getenv("WEAVE_SOCKET_ADDR");
  if (v && *v) {
    const char *why = NULL;
    if (weave_resolve_ipv4(v, addr, &why) != 0)
      return weave_fail(NULL, WEAVE_ERROR_ENV,
                        "WEAVE_SOCKET_ADDR='%s': not an IPv4 address and cannot be resolved (%s)", v, why);
    return WEAVE_SUCCESS;
  }
  struct ifaddrs *ifs = NULL;
  *addr = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&ifs) == 0) {
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
      if (!strncmp(i->ifa_name, "docker", 6) || !strncmp(i->ifa_name, "virbr", 5)) continue;
      *addr = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
      break;
    }
    freeifaddrs(ifs);
  }
  return WEAVE_SUCCESS;
}

weave_result_t weave_get_unique_id(weave_unique_id_t *id) {
  if (!id) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_get_unique_id: id is NULL");
  pthread_once(&registry_once, registry_init);
  weave_uid_t u;
  memset(&u, 0, sizeof(u));
  WEAVE_CHECK(pick_address(&u.addr));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "weave_get_unique_id: socket: %s", strerror(errno));
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = u.addr;
  sa.sin_port = 0; /* ephemeral */
  socklen_t len = sizeof(sa);
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, WEAVE_MAX_PENDING) != 0 ||
      getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
    int e = errno;
    close(fd);
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "weave_get_unique_id: cannot listen on %s%s: %s", ip,
                      getenv("WEAVE_SOCKET_ADDR") && *getenv("WEAVE_SOCKET_ADDR") ? " (WEAVE_SOCKET_ADDR)" : "",
                      strerror(e));
  }
  u.port = ntohs(sa.sin_port);
  u.nonce = random64();
  listener_t *l = (listener_t *)calloc(1, sizeof(*l));
  if (!l) {
    close(fd);
    return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "weave_get_unique_id: host allocation failed");
  }
  l->nonce = u.nonce;
  l->fd = fd;
  l->pid = getpid();
  pthread_mutex_lock(&registry_mu);
  l->next = registry;
  registry = l;
  pthread_mutex_unlock(&registry_mu);
  weave_uid_encode(&u, id);
  weave_log(WEAVE_LOG_INFO, NULL, "weave_get_unique_id: listening on %s:%u", ip, (unsigned)u.port);
  return WEAVE_SUCCESS;
}

const char *weave_uid_addr_str(const weave_uid_t *u, char *buf, size_t cap) {
  char ip[INET_ADDRSTRLEN] = "?";
  struct in_addr a = {u->addr};
  inet_ntop(AF_INET, &a, ip, sizeof(ip));
  snprintf(buf, cap, "%s:%u", ip, (unsigned)u->port);
  return buf;
}
