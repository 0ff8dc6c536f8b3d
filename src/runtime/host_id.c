/* This host's identity (internal.h): which ranks share a host, hence memory by file descriptor. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/internal.h"

uint64_t weave_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

/* hostname + boot id + network namespace: the boot id tells two machines with one hostname apart
 * (clones, containers on different hosts); the network namespace is what scopes the abstract
 * AF_UNIX sockets fd_exchange.c passes descriptors over. WEAVE_TEST_HOST, for tests, is mixed in:
 * processes of one host with different values act as if on different hosts. */
void weave_host_id(weave_host_id_t *id) {
  memset(id, 0, sizeof(*id));
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  memcpy(id->name, host, strnlen(host, sizeof(id->name) - 1)); /* truncated: for messages only */
  uint64_t h = weave_fnv1a(WEAVE_FNV_OFFSET, host, strlen(host));
  char buf[128] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    if (n > 0) h = weave_fnv1a(h, buf, (size_t)n);
    close(fd);
  }
  ssize_t n = readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  if (n > 0) h = weave_fnv1a(h, buf, (size_t)n);
  const char *pretend = getenv("WEAVE_TEST_HOST");
  if (pretend && *pretend) h = weave_fnv1a(h, pretend, strlen(pretend));
  id->hash = h;
}

int weave_same_host(const weave_host_id_t *a, const weave_host_id_t *b) {
  return a->hash == b->hash && strncmp(a->name, b->name, sizeof(a->name)) == 0;
}
