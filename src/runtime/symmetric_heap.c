/*
 * Symmetric heap memory over CUDA VMM: see symmetric_heap.h.
 *
 * Each rank creates one physical allocation (cuMemCreate, exportable as a POSIX file descriptor),
 * reserves an address range for it and maps it. Ranks then trade {host, pid, device, GPU UUID, base}
 * through the bootstrap: peers in this process use the owner's mapping (the owner grants their
 * devices access), peers in other processes of this host import the owner's descriptor and map it
 * themselves. The driver entry points come through cudaGetDriverEntryPointByVersion, as the tensor
 * maps do, so libweave does not link libcuda.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "runtime/symmetric_heap.h"

/* ---- driver entry points -------------------------------------------------------------------- */
typedef struct {
  CUresult (*get_granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*export_handle)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult (*import_handle)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*error_string)(CUresult, const char **);
} vmm_api_t;

static vmm_api_t vmm;
static int vmm_loaded; /* 1 loaded, -1 failed */
static char vmm_missing[64];
static pthread_once_t vmm_once = PTHREAD_ONCE_INIT;

static void vmm_load_once(void) {
  static const struct {
    const char *name;
    size_t offset;
  } fns[] = {
      {"cuMemGetAllocationGranularity", offsetof(vmm_api_t, get_granularity)},
      {"cuMemCreate", offsetof(vmm_api_t, create)},
      {"cuMemRelease", offsetof(vmm_api_t, release)},
      {"cuMemExportToShareableHandle", offsetof(vmm_api_t, export_handle)},
      {"cuMemImportFromShareableHandle", offsetof(vmm_api_t, import_handle)},
      {"cuMemAddressReserve", offsetof(vmm_api_t, reserve)},
      {"cuMemAddressFree", offsetof(vmm_api_t, address_free)},
      {"cuMemMap", offsetof(vmm_api_t, map)},
      {"cuMemUnmap", offsetof(vmm_api_t, unmap)},
      {"cuMemSetAccess", offsetof(vmm_api_t, set_access)},
      {"cuGetErrorString", offsetof(vmm_api_t, error_string)},
  };
  for (size_t i = 0; i < sizeof fns / sizeof fns[0]; ++i) {
    void *p = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(fns[i].name, &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !p) {
      cudaGetLastError();
      snprintf(vmm_missing, sizeof vmm_missing, "%s", fns[i].name);
      vmm_loaded = -1;
      return;
    }
    memcpy((char *)&vmm + fns[i].offset, &p, sizeof p);
  }
  vmm_loaded = 1;
}

static const char *cu_error(CUresult r) {
  const char *s = NULL;
  if (vmm.error_string && vmm.error_string(r, &s) == CUDA_SUCCESS && s) return s;
  return "unknown driver error";
}

/* A driver call's result: a failure becomes the team's last error (out of memory, or a CUDA error). */
static weave_result_t cu_check(weave_team_t team, CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return WEAVE_SUCCESS;
  return weave_fail(team, r == CUDA_ERROR_OUT_OF_MEMORY ? WEAVE_ERROR_OUT_OF_MEMORY : WEAVE_ERROR_CUDA,
                    "rank %d: %s: %s (%d)", team->rank, what, cu_error(r), (int)r);
}

/* ---- one mapping ---------------------------------------------------------------------------- */
typedef struct {
  CUmemGenericAllocationHandle handle;
  CUdeviceptr va;
  size_t size;
  int has_handle, reserved, mapped;
} mapping_t;

struct weave_symmetric_heap {
  int world;
  mapping_t own;
  mapping_t peers[WEAVE_MAX_WORLD]; /* imported from other processes; unused entries are zero */
};

static void mapping_release(mapping_t *m) {
  if (m->mapped) vmm.unmap(m->va, m->size);
  if (m->reserved) vmm.address_free(m->va, m->size);
  if (m->has_handle) vmm.release(m->handle);
  memset(m, 0, sizeof *m);
}

/* Reserves an address range for m->handle, maps it and lets `devices` access it. */
static weave_result_t mapping_map(weave_team_t team, mapping_t *m, size_t granularity, const int *devices, int ndevices,
                                  const char *whose) {
  char what[96];
  snprintf(what, sizeof what, "reserving addresses for %s heap", whose);
  WEAVE_CHECK(cu_check(team, vmm.reserve(&m->va, m->size, granularity, 0, 0), what));
  m->reserved = 1;
  snprintf(what, sizeof what, "mapping %s heap", whose);
  WEAVE_CHECK(cu_check(team, vmm.map(m->va, m->size, 0, m->handle, 0), what));
  m->mapped = 1;
  CUmemAccessDesc access[WEAVE_MAX_WORLD];
  for (int i = 0; i < ndevices; ++i) {
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].location.id = devices[i];
    access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  snprintf(what, sizeof what, "granting device access to %s heap (devices without peer access?)", whose);
  WEAVE_CHECK(cu_check(team, vmm.set_access(m->va, m->size, access, (size_t)ndevices), what));
  return WEAVE_SUCCESS;
}

/* What every rank tells the others about its heap. Where it runs is decided as fd_exchange.c
 * decides it (host id and pid namespace, not the hostname and pid alone): ranks in containers with
 * one hostname (host networking) and equal pids are other processes, and must get descriptors and
 * their own mappings, not each other's addresses. */
typedef struct {
  char host[64]; /* hostname, for messages */
  weave_host_id_t host_id;
  uint64_t pidns;
  int32_t pid;
  int32_t device;
  unsigned char uuid[16];
  uint64_t base;
  uint64_t size;
} heap_card_t;

static int same_host(const heap_card_t *a, const heap_card_t *b) { return weave_same_host(&a->host_id, &b->host_id); }

static int same_process(const heap_card_t *a, const heap_card_t *b) {
  return same_host(a, b) && a->pidns == b->pidns && a->pid == b->pid;
}

static weave_result_t allocate_own(weave_team_t team, size_t bytes, weave_symmetric_heap_t *h, size_t *granularity) {
  if (vmm_loaded != 1)
    return weave_fail(team, WEAVE_ERROR_CUDA, "rank %d: the CUDA driver lacks %s (VMM needs CUDA 12 or later)",
                      team->rank, vmm_missing);
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = team->info.device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  WEAVE_CHECK(cu_check(team, vmm.get_granularity(granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                       "allocation granularity"));
  h->own.size = (bytes + *granularity - 1) / *granularity * *granularity;
  CUresult r = vmm.create(&h->own.handle, h->own.size, &prop, 0);
  if (r != CUDA_SUCCESS)
    return weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "rank %d: a %zu-byte heap on device %d: %s", team->rank,
                      h->own.size, team->info.device, cu_error(r));
  h->own.has_handle = 1;
  return WEAVE_SUCCESS;
}

/* Maps this rank's heap for its own device and for the devices of the ranks of this process. */
static weave_result_t map_own(weave_team_t team, weave_symmetric_heap_t *h, size_t granularity,
                              const heap_card_t *cards, const heap_card_t *mine) {
  int devices[WEAVE_MAX_WORLD], n = 0;
  devices[n++] = team->info.device;
  for (int r = 0; r < team->world; ++r) {
    if (!same_process(&cards[r], mine)) continue;
    int seen = 0;
    for (int i = 0; i < n; ++i) seen |= devices[i] == cards[r].device;
    if (!seen) devices[n++] = cards[r].device;
  }
  return mapping_map(team, &h->own, granularity, devices, n, "its own");
}

static weave_result_t import_peers(weave_team_t team, weave_symmetric_heap_t *h, size_t granularity,
                                   const heap_card_t *cards, int *peer_fds, void **bases) {
  const heap_card_t *mine = &cards[team->rank];
  for (int r = 0; r < team->world; ++r) {
    if (r == team->rank) {
      bases[r] = (void *)(uintptr_t)h->own.va;
    } else if (same_process(&cards[r], mine)) {
      bases[r] = (void *)(uintptr_t)cards[r].base; /* one address space: the owner's mapping */
    } else if (!same_host(&cards[r], mine)) {
      /* another host: not addressable without fabric handles (docs/multinode.md); such a team runs
       * plans past one node only, with NCCL between the hosts (weave_team_require_mapped) */
      bases[r] = NULL;
    } else if (peer_fds[r] < 0) {
      return weave_fail(team, WEAVE_ERROR_INTERNAL, "rank %d: no heap descriptor arrived from rank %d", team->rank, r);
    } else {
      mapping_t *m = &h->peers[r];
      char whose[32];
      snprintf(whose, sizeof whose, "rank %d's", r);
      WEAVE_CHECK(cu_check(
          team, vmm.import_handle(&m->handle, (void *)(uintptr_t)peer_fds[r], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
          "importing a peer's heap"));
      m->has_handle = 1;
      close(peer_fds[r]); /* the imported handle keeps the memory alive */
      peer_fds[r] = -1;
      m->size = cards[r].size;
      WEAVE_CHECK(mapping_map(team, m, granularity, &team->info.device, 1, whose));
      bases[r] = (void *)(uintptr_t)m->va;
    }
  }
  return WEAVE_SUCCESS;
}

void weave_symmetric_heap_destroy(weave_symmetric_heap_t *h) {
  if (!h) return;
  for (int r = 0; r < h->world; ++r) mapping_release(&h->peers[r]);
  mapping_release(&h->own);
  free(h);
}

weave_result_t weave_symmetric_heap_create(weave_team_t team, size_t bytes, weave_symmetric_heap_t **out, void **bases,
                                           int *ranks_on_device, int *local_on_device) {
  pthread_once(&vmm_once, vmm_load_once);
  weave_symmetric_heap_t *h = (weave_symmetric_heap_t *)calloc(1, sizeof *h);
  size_t granularity = 0;
  weave_result_t rc = h ? allocate_own(team, bytes, h, &granularity)
                        : weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "rank %d: host allocation", team->rank);
  if (h) h->world = team->world;

  /* Every rank learns where every heap lives. */
  heap_card_t mine, cards[WEAVE_MAX_WORLD];
  memset(&mine, 0, sizeof mine);
  gethostname(mine.host, sizeof mine.host - 1);
  weave_host_id(&mine.host_id);
  mine.pidns = weave_pid_namespace();
  mine.pid = (int32_t)getpid();
  mine.device = team->info.device;
  struct cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, team->info.device) == cudaSuccess) memcpy(mine.uuid, &p.uuid, sizeof mine.uuid);
  if (rc == WEAVE_SUCCESS) mine.size = h->own.size;
  rc = weave_team_agree(team, rc);
  /* Two rounds: the first tells which devices of this process must reach this rank's heap (so it
   * can be mapped for them), the second carries the mapped base. */
  if (rc == WEAVE_SUCCESS) {
    rc = team->bootstrap->allgather(team->bootstrap, team->rank, &mine, cards, sizeof mine);
    if (rc != WEAVE_SUCCESS) rc = weave_fail(team, rc, "heap exchange: %s", weave_get_last_error(NULL));
  }
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, map_own(team, h, granularity, cards, &mine));
  if (rc == WEAVE_SUCCESS) {
    mine.base = (uint64_t)h->own.va;
    rc = team->bootstrap->allgather(team->bootstrap, team->rank, &mine, cards, sizeof mine);
    if (rc != WEAVE_SUCCESS) rc = weave_fail(team, rc, "heap exchange: %s", weave_get_last_error(NULL));
  }

  /* Descriptors to the ranks of other processes on this host (collective: every rank takes part). */
  int fd = -1, peer_fds[WEAVE_MAX_WORLD];
  for (int r = 0; r < WEAVE_MAX_WORLD; ++r) peer_fds[r] = -1;
  if (rc == WEAVE_SUCCESS) {
    int exported = 0;
    for (int r = 0; r < team->world; ++r) exported |= !same_process(&cards[r], &mine) && same_host(&cards[r], &mine);
    weave_result_t local = WEAVE_SUCCESS;
    if (exported) {
      CUresult e = vmm.export_handle(&fd, h->own.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      if (e != CUDA_SUCCESS)
        local = weave_fail(team, WEAVE_ERROR_CUDA, "rank %d: exporting the heap as a file descriptor: %s", team->rank,
                           cu_error(e));
      /* held until the exchange is over (up to the timeout): a program another thread exec()s
       * meanwhile must not inherit it, and with it this rank's device memory for its lifetime */
      else if (fd >= 0)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    rc = weave_team_agree(team, local);
  }
  if (rc == WEAVE_SUCCESS) {
    rc = weave_bootstrap_exchange_fds(team->bootstrap, team->rank, fd, peer_fds);
    if (rc != WEAVE_SUCCESS) rc = weave_fail(team, rc, "heap descriptor exchange: %s", weave_get_last_error(NULL));
  }
  if (fd >= 0) close(fd);
  if (rc == WEAVE_SUCCESS) rc = weave_team_agree(team, import_peers(team, h, granularity, cards, peer_fds, bases));
  for (int r = 0; r < WEAVE_MAX_WORLD; ++r)
    if (peer_fds[r] >= 0) close(peer_fds[r]);
  if (rc != WEAVE_SUCCESS) {
    weave_symmetric_heap_destroy(h);
    return rc;
  }
  int n = 0, local = 0;
  for (int r = 0; r < team->world; ++r)
    if (memcmp(cards[r].uuid, mine.uuid, sizeof mine.uuid) == 0) {
      n++;
      local += same_process(&cards[r], &mine);
    }
  *ranks_on_device = n;
  *local_on_device = local;
  *out = h;
  return WEAVE_SUCCESS;
}
