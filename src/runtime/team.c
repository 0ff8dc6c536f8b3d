/*
 * Teams and the symmetric heap. Each rank's heap is one CUDA VMM allocation on its device, mapped
 * into every rank's address space by symmetric_heap.c (ranks may be threads of one process or
 * processes of one host); each rank keeps the bases on the host (weave_ptr) and in a device table
 * (kernels). The allocator over the heap (heap.c) runs the same on every rank.
 *
 * Every collective call ends in weave_team_agree, so a failure on one rank fails the call on all
 * ranks instead of leaving the others waiting.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/internal.h"
#include "runtime/symmetric_heap.h"

#ifdef WEAVE_HAVE_CUDA
#include <cuda.h> /* CUcontext: the caller's, given back (weave_device_leave) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#endif

weave_result_t weave_team_allgather_int(weave_team_t team, int mine, int *all) {
  weave_result_t rc = team->bootstrap->allgather(team->bootstrap, team->rank, &mine, all, sizeof(int));
  return rc == WEAVE_SUCCESS ? rc : weave_fail(team, rc, "%s", weave_get_last_error(NULL));
}

weave_result_t weave_team_agree(weave_team_t team, weave_result_t local) {
  int all[WEAVE_MAX_WORLD];
  WEAVE_CHECK(weave_team_allgather_int(team, (int)local, all));
  if (local != WEAVE_SUCCESS) return local; /* this rank's own failure keeps its own message */
  for (int r = 0; r < team->world; ++r)
    if (all[r] != WEAVE_SUCCESS)
      return weave_fail(team, (weave_result_t)all[r], "rank %d failed this collective call", r);
  return WEAVE_SUCCESS;
}

weave_result_t weave_team_check_same(weave_team_t team, const void *data, size_t bytes, const char *what) {
  /* Ranks compare a 64-bit FNV-1a hash of the bytes: one small allgather whatever the size. */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ ((const unsigned char *)data)[i]) * 1099511628211ull;
  uint64_t hs[WEAVE_MAX_WORLD];
  weave_result_t rc = team->bootstrap->allgather(team->bootstrap, team->rank, &h, hs, sizeof(h));
  if (rc != WEAVE_SUCCESS) return weave_fail(team, rc, "%s", weave_get_last_error(NULL));
  for (int r = 0; r < team->world; ++r)
    if (hs[r] != h)
      return weave_fail(team, WEAVE_ERROR_MISMATCH, "%s differs between rank %d and rank %d", what, team->rank, r);
  return WEAVE_SUCCESS;
}

static weave_result_t check_team(weave_team_t team, const char *fn) {
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: team is NULL", fn);
  return WEAVE_SUCCESS;
}

#ifdef WEAVE_HAVE_CUDA
/* cuCtxGetCurrent / cuCtxSetCurrent through the runtime's driver entry points (no libcuda link) */
static CUresult (*ctx_get)(CUcontext *);
static CUresult (*ctx_set)(CUcontext);
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static void ctx_load_once(void) {
  void *g = NULL, *s = NULL;
  enum cudaDriverEntryPointQueryResult qg, qs;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &g, 12000, cudaEnableDefault, &qg) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &s, 12000, cudaEnableDefault, &qs) != cudaSuccess ||
      qg != cudaDriverEntryPointSuccess || qs != cudaDriverEntryPointSuccess || !g || !s) {
    cudaGetLastError();
    return; /* then nothing is given back: the team's device stays current, as before */
  }
  memcpy(&ctx_get, &g, sizeof g);
  memcpy(&ctx_set, &s, sizeof s);
}
#endif

int weave_pageable_access(int device) {
  int pageable = 0;
  if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return pageable;
}

weave_device_scope_t weave_device_enter(int device) {
  weave_device_scope_t scope = {NULL};
#ifdef WEAVE_HAVE_CUDA
  pthread_once(&ctx_once, ctx_load_once);
  CUcontext caller = NULL;
  int current = -1;
  if (device < 0) return scope;
  if (ctx_get && ctx_get(&caller) == CUDA_SUCCESS && caller && cudaGetDevice(&current) == cudaSuccess &&
      current == device)
    return scope; /* the caller works on this device already (its context, primary or not) */
  cudaGetLastError();
  /* the call's own CUDA calls fail and say why when this does */
  if (cudaSetDevice(device) != cudaSuccess)
    cudaGetLastError();
  else
    scope.context = caller;
#else
  (void)device;
#endif
  return scope;
}

void weave_device_leave(weave_device_scope_t scope) {
#ifdef WEAVE_HAVE_CUDA
  if (scope.context && ctx_set) ctx_set((CUcontext)scope.context);
#else
  (void)scope;
#endif
}

weave_result_t weave_team_check_live(weave_team_t team, const char *fn) {
  if (!team->aborted_by) return WEAVE_SUCCESS;
  char who[32] = "a rank"; /* aborted_by -1: the record says aborted, the notice naming the rank is not there (yet) */
  if (team->aborted_by > 0) snprintf(who, sizeof who, "rank %d", team->aborted_by - 1);
  return weave_fail(team, WEAVE_ERROR_ABORTED, "%s: %s aborted the team (weave_team_abort): destroy it on every rank",
                    fn, who);
}

#ifdef WEAVE_HAVE_CUDA
static weave_result_t read_device(weave_team_t team, int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return weave_fail(team, WEAVE_ERROR_NO_DEVICE, "no CUDA device (%s)",
                      e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
  }
  if (device < 0 || device >= count)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "rank %d: device %d outside [0, %d)", team->rank, device,
                      count);
  struct cudaDeviceProp p;
  WEAVE_CUDA_CHECK(team, cudaGetDeviceProperties(&p, device));
  if (p.major != 9 || p.minor != 0)
    return weave_fail(team, WEAVE_ERROR_UNSUPPORTED_DEVICE,
                      "rank %d: device %d '%s' is sm_%d%d; weave is built for sm_90a", team->rank, device, p.name,
                      p.major, p.minor);
  weave_device_info_t *info = &team->info;
  snprintf(info->name, sizeof(info->name), "%s", p.name);
  info->device = device;
  info->sm_count = p.multiProcessorCount;
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->smem_per_block_optin = p.sharedMemPerBlockOptin;
  info->l2_bytes = (size_t)p.l2CacheSize;
  return WEAVE_SUCCESS;
}

static weave_result_t team_setup(weave_team_t team, int device) {
  WEAVE_CHECK(read_device(team, device));
  WEAVE_CUDA_CHECK(team, cudaSetDevice(device));
  if (weave_heap_init(&team->heap, team->heap_size, WEAVE_HEAP_RESERVED, WEAVE_HEAP_ALIGNMENT) != 0)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "heap size %zu is too small", team->heap_size);
  WEAVE_CUDA_CHECK(team, cudaFree(0)); /* the primary context, current for the driver calls of the heap */
  return WEAVE_SUCCESS;
}

/* This rank's heap header (the device error record) cleared, and the device table of every base. */
static weave_result_t heap_header_and_table(weave_team_t team) {
  team->heap_base = team->peer_bases[team->rank];
  WEAVE_CUDA_CHECK(team, cudaMemset(team->heap_base, 0, WEAVE_HEAP_RESERVED));
  WEAVE_CUDA_CHECK(team, cudaMalloc((void **)&team->d_bases, sizeof(void *) * (size_t)team->world));
  WEAVE_CUDA_CHECK(
      team, cudaMemcpy(team->d_bases, team->peer_bases, sizeof(void *) * (size_t)team->world, cudaMemcpyHostToDevice));
  WEAVE_CUDA_CHECK(team, cudaDeviceSynchronize());
  return WEAVE_SUCCESS;
}

/* Collective: every rank's heap mapped here (symmetric_heap.c), then the header and the table. */
static weave_result_t map_heaps(weave_team_t team, int *local_on_device) {
  WEAVE_CHECK(weave_symmetric_heap_create(team, team->heap_size, &team->symmetric, team->peer_bases,
                                          &team->info.ranks_on_device, local_on_device));
  return weave_team_agree(team, heap_header_and_table(team));
}

/* Collective: every rank's host id, the same WEAVE_RANKS_PER_NODE on every rank, and the node split. */
static weave_result_t team_nodes(weave_team_t team, int ranks_per_node) {
  weave_host_id_t mine, ids[WEAVE_MAX_WORLD];
  weave_host_id(&mine);
  WEAVE_CHECK(team->bootstrap->allgather(team->bootstrap, team->rank, &mine, ids, sizeof(mine)));
  WEAVE_CHECK(weave_team_check_same(team, &ranks_per_node, sizeof(ranks_per_node), "WEAVE_RANKS_PER_NODE"));
  char why[256];
  team->nodes = weave_node_split(ids, team->world, ranks_per_node, team->node_of_rank, why, sizeof(why));
  return team->nodes > 0 ? WEAVE_SUCCESS : weave_fail(team, WEAVE_ERROR_ENV, "weave_team_create: %s", why);
}

static void team_release(weave_team_t team) {
  if (team->d_bases) cudaFree(team->d_bases);
  weave_symmetric_heap_destroy(team->symmetric);
  weave_heap_fini(&team->heap);
  free(team);
}
#endif

static weave_result_t team_create(weave_bootstrap_t *bootstrap, int rank, int device, const weave_config_t *config,
                                  weave_team_t *team_out) {
  if (!team_out) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_create: team is NULL");
  if (!bootstrap) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_create: bootstrap is NULL");
  if (rank < 0 || rank >= bootstrap->world)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_create: rank %d outside [0, %d)", rank,
                      bootstrap->world);
  if (device < 0) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_create: device %d < 0", device);
  if (config && (config->struct_size < sizeof(weave_config_t) || config->version / 100 != WEAVE_VERSION_MAJOR))
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT,
                      "weave_team_create: config not initialised with WEAVE_CONFIG_INIT (struct_size %zu, version %u)",
                      config->struct_size, config->version);
  if (config && config->timeout_ms < 0)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_create: timeout_ms %d < 0", config->timeout_ms);
  weave_env_t env;
  WEAVE_CHECK(weave_env_load(&env));
  if (env.info && rank == 0) weave_print_env(stderr);
#ifndef WEAVE_HAVE_CUDA
  return weave_fail(NULL, WEAVE_ERROR_NO_DEVICE, "weave was built without CUDA");
#else
  weave_team_t team = (weave_team_t)calloc(1, sizeof(*team));
  if (!team) return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "weave_team_create: host allocation failed");
  team->bootstrap = bootstrap;
  team->rank = rank;
  team->world = bootstrap->world;
  team->heap_size = (config && config->heap_size) ? config->heap_size : env.heap_size;
  team->timeout_ms = (config && config->timeout_ms) ? config->timeout_ms : env.timeout_ms;
  team->info.device = device;

  weave_result_t rc = team_setup(team, device);
  weave_result_t all = weave_team_agree(team, rc);
  if (all == WEAVE_SUCCESS) {
    size_t sz = team->heap_size;
    all = weave_team_check_same(team, &sz, sizeof(sz), "heap size");
  }
  int local_on_device = 1;
  if (all == WEAVE_SUCCESS) all = map_heaps(team, &local_on_device);    /* collective, agreed inside */
  if (all == WEAVE_SUCCESS) all = team_nodes(team, env.ranks_per_node); /* collective, the same on every rank */
  if (all != WEAVE_SUCCESS) {
    weave_fail(NULL, all, "%s", strchr(team->last_error, ':') ? strchr(team->last_error, ':') + 2 : team->last_error);
    team_release(team);
    return all;
  }
  /* Ranks that are threads of one process share its CUDA context: their spinning kernels need
   * enough hardware queues to run side by side. Ranks in other processes need MPS instead. */
  team->threads_on_device = local_on_device;
  if (local_on_device > 1) {
    const char *ml = getenv("CUDA_MODULE_LOADING"), *mc = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    if (!ml || strcmp(ml, "EAGER") != 0 || !mc || atoi(mc) < local_on_device)
      weave_log(WEAVE_LOG_WARN, team,
                "%d ranks of this process share GPU %d: set CUDA_MODULE_LOADING=EAGER and "
                "CUDA_DEVICE_MAX_CONNECTIONS>=%d before CUDA starts, or a rank's kernel may wait behind another "
                "rank's spinning kernel (timeouts)",
                local_on_device, device, local_on_device);
  }
  for (int r = 0; r < team->world; ++r) team->peers_unmapped += team->peer_bases[r] == NULL;
  weave_log(WEAVE_LOG_INFO, team,
            "team of %d ranks: device %d '%s', %d SMs, heap %zu bytes at %p, %d ranks on this GPU", team->world, device,
            team->info.name, team->info.sm_count, team->heap_size, team->heap_base, team->info.ranks_on_device);
  if (team->peers_unmapped)
    weave_log(WEAVE_LOG_INFO, team,
              "%d ranks of the team are on other hosts (their heaps are not addressable here): plans past one node "
              "run, with NCCL between the hosts; flat plans are refused",
              team->peers_unmapped);
  *team_out = team;
  return WEAVE_SUCCESS;
#endif
}

weave_result_t weave_team_node(weave_team_t team, int *node, int *nodes, int *node_rank, int *node_size) {
  WEAVE_CHECK(check_team(team, "weave_team_node"));
  const int me = team->node_of_rank[team->rank];
  int before = 0, size = 0;
  for (int r = 0; r < team->world; ++r)
    if (team->node_of_rank[r] == me) {
      before += r < team->rank;
      ++size;
    }
  if (node) *node = me;
  if (nodes) *nodes = team->nodes;
  if (node_rank) *node_rank = before;
  if (node_size) *node_size = size;
  return WEAVE_SUCCESS;
}

weave_result_t weave_team_create(weave_bootstrap_t *bootstrap, int rank, int device, const weave_config_t *config,
                                 weave_team_t *team_out) {
  const weave_device_scope_t caller = weave_device_enter(device);
  weave_result_t rc = team_create(bootstrap, rank, device, config, team_out);
  weave_device_leave(caller);
  return rc;
}

static weave_result_t team_destroy(weave_team_t team) {
#ifdef WEAVE_HAVE_CUDA
  for (int i = 0; i < 2; ++i) /* collective in each: every rank of this team has both */
    if (team->sub[i]) {
      team_destroy(team->sub[i]);
      team->sub[i] = NULL;
    }
  weave_bootstrap_t *owned = team->owned_bootstrap; /* host sockets only: freed on either path below */
  cudaDeviceSynchronize();
  /* Peers may still read this heap until every rank got here. */
  weave_result_t rc = team->bootstrap->barrier(team->bootstrap, team->rank);
  if (rc != WEAVE_SUCCESS) {
    /* Some rank did not arrive (an earlier timeout, a dead process): it may still run kernels that
     * read or write this heap, so the memory stays mapped (a leak, not a fault in a peer). */
    weave_log(WEAVE_LOG_WARN, team,
              "weave_team_destroy: not every rank arrived (%s): this rank's heap (%zu bytes) stays mapped so "
              "that a peer still running cannot fault on it",
              weave_get_error_string(rc), team->heap_size);
    weave_heap_fini(&team->heap);
    free(team);
    if (owned) weave_bootstrap_destroy(owned);
    return rc;
  }
  team_release(team);
  if (owned) weave_bootstrap_destroy(owned);
  return rc;
#else
  return WEAVE_ERROR_INTERNAL;
#endif
}

weave_result_t weave_team_destroy(weave_team_t team) {
  WEAVE_CHECK(check_team(team, "weave_team_destroy"));
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  weave_result_t rc = team_destroy(team);
  weave_device_leave(caller);
  return rc;
}

weave_result_t weave_team_rank(weave_team_t team, int *rank) {
  WEAVE_CHECK(check_team(team, "weave_team_rank"));
  if (!rank) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_rank: rank is NULL");
  *rank = team->rank;
  return WEAVE_SUCCESS;
}

weave_result_t weave_team_world(weave_team_t team, int *world) {
  WEAVE_CHECK(check_team(team, "weave_team_world"));
  if (!world) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_world: world is NULL");
  *world = team->world;
  return WEAVE_SUCCESS;
}

weave_result_t weave_team_device_info(weave_team_t team, weave_device_info_t *info) {
  WEAVE_CHECK(check_team(team, "weave_team_device_info"));
  if (!info) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_device_info: info is NULL");
  *info = team->info;
  return WEAVE_SUCCESS;
}

weave_result_t weave_barrier(weave_team_t team) {
  WEAVE_CHECK(check_team(team, "weave_barrier"));
  WEAVE_CHECK(weave_team_check_live(team, "weave_barrier"));
  weave_result_t rc = team->bootstrap->barrier(team->bootstrap, team->rank);
  if (rc != WEAVE_SUCCESS) return weave_fail(team, rc, "weave_barrier: %s", weave_get_last_error(NULL));
  return WEAVE_SUCCESS;
}

static int in_heap(weave_team_t team, const void *ptr) {
  const char *p = (const char *)ptr, *b = (const char *)team->heap_base;
  return p >= b + WEAVE_HEAP_RESERVED && p < b + team->heap_size;
}

weave_result_t weave_malloc(weave_team_t team, size_t bytes, void **ptr) {
  WEAVE_CHECK(check_team(team, "weave_malloc"));
  WEAVE_CHECK(weave_team_check_live(team, "weave_malloc"));
  if (!ptr) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_malloc: ptr is NULL");
  if (bytes == 0) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_malloc: size is 0");
  WEAVE_CHECK(weave_team_check_same(team, &bytes, sizeof(bytes), "weave_malloc size"));
  size_t off = 0;
  int hr = weave_heap_alloc(&team->heap, bytes, &off);
  weave_result_t local = WEAVE_SUCCESS;
  if (hr != 0)
    local = weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY,
                       "weave_malloc: %zu bytes do not fit in rank %d's heap (%zu in use, largest free %zu of %zu; "
                       "raise WEAVE_HEAP_SIZE)",
                       bytes, team->rank, team->heap.in_use, weave_heap_largest_free(&team->heap), team->heap_size);
  weave_result_t rc = weave_team_agree(team, local);
  if (rc == WEAVE_SUCCESS) rc = weave_team_check_same(team, &off, sizeof(off), "heap offset");
  if (rc != WEAVE_SUCCESS) {
    if (hr == 0) weave_heap_free(&team->heap, off);
    return rc;
  }
  *ptr = (char *)team->heap_base + off;
  return WEAVE_SUCCESS;
}

weave_result_t weave_free(weave_team_t team, void *ptr) {
  WEAVE_CHECK(check_team(team, "weave_free"));
  WEAVE_CHECK(weave_team_check_live(team, "weave_free"));
  weave_result_t local = WEAVE_SUCCESS;
  size_t off = 0;
  if (!ptr || !in_heap(team, ptr))
    local = weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_free: %p is not in rank %d's heap", ptr, team->rank);
  else
    off = (size_t)((char *)ptr - (char *)team->heap_base);
  WEAVE_CHECK(weave_team_agree(team, local));
  WEAVE_CHECK(weave_team_check_same(team, &off, sizeof(off), "weave_free offset"));
#ifdef WEAVE_HAVE_CUDA
  /* Peers may still have kernels reading this memory: all ranks finish their work first. */
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  cudaDeviceSynchronize();
  weave_device_leave(caller);
#endif
  WEAVE_CHECK(weave_barrier(team));
  if (weave_heap_free(&team->heap, off) != 0)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_free: %p is not a live allocation", ptr);
  return WEAVE_SUCCESS;
}

weave_result_t weave_ptr(weave_team_t team, const void *ptr, int peer, void **peer_ptr) {
  WEAVE_CHECK(check_team(team, "weave_ptr"));
  if (!peer_ptr) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ptr: peer_ptr is NULL");
  if (peer < 0 || peer >= team->world)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ptr: peer %d outside [0, %d)", peer, team->world);
  const char *p = (const char *)ptr, *b = (const char *)team->heap_base;
  if (!ptr || p < b || p >= b + team->heap_size)
    return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_ptr: %p is not in rank %d's heap", ptr, team->rank);
  if (!team->peer_bases[peer])
    return weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                      "weave_ptr: rank %d's heap is on another host, not addressable here", peer);
  *peer_ptr = (char *)team->peer_bases[peer] + (p - b);
  return WEAVE_SUCCESS;
}

const uint32_t *weave_team_error_code(weave_team_t team) {
  return &((const weave_heap_header_t *)team->heap_base)->error.code;
}

/* No collective needed: a team on several hosts leaves every rank a peer on another host, so every
 * rank answers alike. */
weave_result_t weave_team_require_mapped(weave_team_t team, const char *what) {
  for (int r = 0; r < team->world && team->peers_unmapped; ++r)
    if (!team->peer_bases[r])
      return weave_fail(team, WEAVE_ERROR_UNSUPPORTED,
                        "%s: rank %d cannot address rank %d's heap (another host; fabric handles are not supported): "
                        "across hosts only plans past one node run (ranks numbered node by node, nodes of equal "
                        "size), with NCCL between the hosts",
                        what, team->rank, r);
  return WEAVE_SUCCESS;
}

weave_result_t weave_heap_bases(weave_team_t team, void *const **device_table) {
  WEAVE_CHECK(check_team(team, "weave_heap_bases"));
  if (!device_table) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_heap_bases: device_table is NULL");
  *device_table = (void *const *)team->d_bases;
  return WEAVE_SUCCESS;
}

weave_result_t weave_team_device_view(weave_team_t team, weave_device_team_t *view) {
  WEAVE_CHECK(check_team(team, "weave_team_device_view"));
  if (!view) return weave_fail(team, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_device_view: view is NULL");
  view->heap_bases = (void *const *)team->d_bases;
  view->heap_base = team->heap_base;
  view->rank = team->rank;
  view->world = team->world;
  view->timeout_ns = (uint64_t)team->timeout_ms * 1000000ull;
  view->parent_error = team->parent ? weave_team_error_code(team->parent) : NULL;
  return WEAVE_SUCCESS;
}

static const char *cmp_name(uint32_t c) {
  static const char *n[] = {"==", "!=", ">=", ">", "<=", "<"};
  return c < 6 ? n[c] : "?";
}

#ifdef WEAVE_HAVE_CUDA
/* `bytes` of this rank's heap header from `offset` on, read on the team's current device through
 * `stream`, which the read leaves synchronized. */
static cudaError_t header_read(weave_team_t team, size_t offset, void *dst, size_t bytes, cudaStream_t stream) {
  cudaError_t e = cudaMemcpyAsync(dst, (char *)team->heap_base + offset, bytes, cudaMemcpyDeviceToHost, stream);
  return e == cudaSuccess ? cudaStreamSynchronize(stream) : e;
}
#endif

static weave_result_t team_sync(weave_team_t team, weave_stream_t stream) {
#ifdef WEAVE_HAVE_CUDA
  /* Every copy here goes on the caller's stream, which holds only this rank's work: on the legacy
   * stream it could share a hardware queue with a peer's kernel that spins until this rank's next
   * call, which this rank cannot make while the copy waits behind that kernel. */
  const cudaStream_t s = (cudaStream_t)stream;
  WEAVE_CUDA_CHECK(team, cudaStreamSynchronize(s));
  weave_heap_header_t head; /* the record and the abort notice: the header up to the barrier flags */
  WEAVE_CUDA_CHECK(team, header_read(team, 0, &head, offsetof(weave_heap_header_t, barrier_flags), s));
  const weave_device_error_t rec = head.error;
  if (rec.code == WEAVE_DEVICE_ABORTED || head.aborted_by) {
    /* kept: the team is of no further use, and every later call says so */
    team->aborted_by = head.aborted_by ? (int)head.aborted_by : -1;
    return weave_team_check_live(team, "weave_team_sync");
  }
  if (rec.code == WEAVE_DEVICE_OK) return WEAVE_SUCCESS;
  WEAVE_CUDA_CHECK(team, cudaMemsetAsync(team->heap_base, 0, sizeof(rec), s));
  /* A peer's abort may have landed between the read above and the clearing: its notice precedes its
   * code, so a notice seen now means the clearing may have erased that code; write it back. */
  uint32_t notice = 0;
  WEAVE_CUDA_CHECK(team, header_read(team, offsetof(weave_heap_header_t, aborted_by), &notice, sizeof(notice), s));
  if (notice) {
    const uint32_t code = WEAVE_DEVICE_ABORTED;
    WEAVE_CUDA_CHECK(team, cudaMemcpyAsync((char *)team->heap_base + offsetof(weave_heap_header_t, error.code), &code,
                                           sizeof(code), cudaMemcpyHostToDevice, s));
    WEAVE_CUDA_CHECK(team, cudaStreamSynchronize(s));
    team->aborted_by = (int)notice;
    return weave_team_check_live(team, "weave_team_sync");
  }
  /* Two known causes when ranks are threads sharing a GPU: the awaited rank's thread sat in a CUDA
   * call that waits for the whole device (the waiting kernel included), so it never launched; or the
   * replays of a captured call enqueued without a sync between them (README, Limitations). */
  const char *hint =
      team->threads_on_device > 1
          ? " (ranks that are threads sharing a GPU: did rank %d's thread call cudaMalloc, cudaFree, "
            "cudaDeviceSynchronize or another device-wide wait while a call was in flight? Or were graph "
            "replays enqueued without a sync between them? README, Limitations)"
          : "";
  char why[384];
  snprintf(why, sizeof(why), hint, (int)rec.peer);
  return weave_fail(team, WEAVE_ERROR_TIMEOUT,
                    "rank %d timed out after %d ms waiting for rank %d on item %d: flag at 0x%llx was %llu, "
                    "expected %s %llu%s",
                    rec.rank, team->timeout_ms, rec.peer, rec.item, (unsigned long long)rec.flag_addr,
                    (unsigned long long)rec.observed, cmp_name(rec.cmp), (unsigned long long)rec.expected, why);
#else
  (void)stream;
  return WEAVE_ERROR_INTERNAL;
#endif
}

static weave_result_t team_poll_one(weave_team_t team, char *msg, size_t len) {
  /* written by the rank's own thread: read atomically (the watchdog's is another) */
  const int aborted_by = __atomic_load_n(&team->aborted_by, __ATOMIC_RELAXED);
  if (aborted_by) { /* -1: an abort whose rank is not known yet */
    if (msg && len)
      snprintf(msg, len, "rank %d aborted the team (weave_team_abort)", aborted_by > 0 ? aborted_by - 1 : -1);
    return WEAVE_ERROR_ABORTED;
  }
#ifdef WEAVE_HAVE_CUDA
  /* A copy on a non-blocking stream of its own: it waits for none of the caller's streams, and the
   * record can be read while kernels run (a failing wait writes it with a system-scope fence). */
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  weave_heap_header_t head;
  cudaStream_t s = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = header_read(team, 0, &head, offsetof(weave_heap_header_t, barrier_flags), s);
  if (s) cudaStreamDestroy(s);
  weave_device_leave(caller);
  if (e != cudaSuccess) {
    if (msg && len) snprintf(msg, len, "weave_team_poll: reading the error record: %s", cudaGetErrorString(e));
    return WEAVE_ERROR_CUDA;
  }
  const weave_device_error_t rec = head.error;
  if (head.aborted_by || rec.code == WEAVE_DEVICE_ABORTED) {
    if (msg && len)
      snprintf(msg, len, "rank %d aborted the team (weave_team_abort)",
               head.aborted_by ? (int)head.aborted_by - 1 : -1);
    return WEAVE_ERROR_ABORTED;
  }
  if (rec.code == WEAVE_DEVICE_OK) return WEAVE_SUCCESS;
  if (msg && len)
    snprintf(msg, len,
             "rank %d timed out after %d ms waiting for rank %d on item %d: flag at 0x%llx was %llu, expected %s %llu",
             rec.rank, team->timeout_ms, rec.peer, rec.item, (unsigned long long)rec.flag_addr,
             (unsigned long long)rec.observed, cmp_name(rec.cmp), (unsigned long long)rec.expected);
  return WEAVE_ERROR_TIMEOUT;
#else
  return WEAVE_ERROR_INTERNAL;
#endif
}

static weave_result_t team_abort_one(weave_team_t team);

weave_result_t weave_team_poll(weave_team_t team, char *msg, size_t len) {
  if (msg && len) msg[0] = 0;
  if (!team) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_team_poll: team is NULL");
  weave_result_t rc = team_poll_one(team, msg, len);
  /* the watchdog polls from its own thread while the rank's may be making the sub-teams (hier.c
   * stores them with a release) */
  for (int i = 0; i < 2 && rc == WEAVE_SUCCESS; ++i) {
    weave_team_t sub = __atomic_load_n(&team->sub[i], __ATOMIC_ACQUIRE);
    if (sub) rc = team_poll_one(sub, msg, len); /* its ranks' numbers are the sub-team's */
  }
  return rc;
}

weave_result_t weave_team_sync(weave_team_t team, weave_stream_t stream) {
  WEAVE_CHECK(check_team(team, "weave_team_sync"));
  WEAVE_CHECK(weave_team_check_live(team, "weave_team_sync"));
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  weave_result_t rc = team_sync(team, stream);
  /* a peer aborted the team: the node and rail teams of its plans past one node are told too, so
   * that no wait in them outlives the abort (the aborting rank told only the ones it is in) */
  for (int i = 0; i < 2 && rc == WEAVE_ERROR_ABORTED; ++i)
    if (team->sub[i]) team_abort_one(team->sub[i]);
  for (int i = 0; i < 2 && rc == WEAVE_SUCCESS; ++i)
    if (team->sub[i] && (rc = team_sync(team->sub[i], stream)) != WEAVE_SUCCESS)
      weave_fail(team, rc, "in the %s team of rank %d (a plan past one node): %s", i ? "rail" : "node", team->rank,
                 team->sub[i]->last_error);
  weave_device_leave(caller);
  return rc;
}

void weave_team_refresh_abort(weave_team_t team) {
#ifdef WEAVE_HAVE_CUDA
  if (team->aborted_by > 0 || !team->heap_base) return; /* known, or nothing to read; -1: the rank not yet named */
  uint32_t notice = 0;
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  if (header_read(team, offsetof(weave_heap_header_t, aborted_by), &notice, sizeof(notice), 0) != cudaSuccess)
    cudaGetLastError();
  else if (notice)
    team->aborted_by = (int)notice;
  weave_device_leave(caller);
#else
  (void)team;
#endif
}

weave_result_t weave_team_abort(weave_team_t team) {
  WEAVE_CHECK(check_team(team, "weave_team_abort"));
  /* First this team, whose code every rank's waits in the node and rail teams of its plans past one
   * node watch too (weave_device_team_t.parent_error): a rank that sees the abort anywhere then finds
   * it here, naming this rank as the team numbers it. Then those teams, for their host checks. */
  const weave_result_t rc = team_abort_one(team);
  for (int i = 0; i < 2; ++i)
    if (team->sub[i]) team_abort_one(team->sub[i]);
  return rc;
}

static weave_result_t team_abort_one(weave_team_t team) {
  if (team->abort_told || (team->aborted_by && team->aborted_by != team->rank + 1))
    return WEAVE_SUCCESS; /* told already, or a peer aborted first (its notice reaches every rank) */
  if (!team->aborted_by) {
    team->aborted_by = team->rank + 1;
    weave_log(WEAVE_LOG_WARN, team, "rank %d aborts the team: every rank's waits on it stop", team->rank);
  }
#ifdef WEAVE_HAVE_CUDA
  /* Into every rank's header, this one's too (its own kernels may wait for a peer): the notice
   * naming this rank, then the error record's code, which every wait checks: they give up at once.
   * By the copy engine, so no SM is needed; on a stream of its own, so that nothing the caller
   * queued delays it. Whether a hardware queue shared with a spinning kernel could hold it back is
   * not known (CUDA_DEVICE_MAX_CONNECTIONS): the wait for it is bounded by the team's timeout. */
  const uint32_t notice = (uint32_t)team->rank + 1u, code = WEAVE_DEVICE_ABORTED;
  const weave_device_scope_t caller = weave_device_enter(team->info.device);
  cudaStream_t s = NULL;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int p = 0; e == cudaSuccess && p < team->world; ++p) {
    char *head = (char *)team->peer_bases[p];
    if (!head) continue; /* another host: its waits end at their bound (the abort cannot reach them) */
    e = cudaMemcpyAsync(head + offsetof(weave_heap_header_t, aborted_by), &notice, sizeof(notice), cudaMemcpyDefault,
                        s);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(head + offsetof(weave_heap_header_t, error.code), &code, sizeof(code), cudaMemcpyDefault, s);
  }
  const int64_t start = weave_monotonic_ms(), deadline = start + team->timeout_ms;
  const char *step = e == cudaSuccess ? "waiting for the copies" : "queueing the copies";
  if (e == cudaSuccess) {
    while ((e = cudaStreamQuery(s)) == cudaErrorNotReady && weave_monotonic_ms() < deadline) {
      const struct timespec pause = {0, 100000}; /* 0.1 ms */
      nanosleep(&pause, NULL);
    }
  }
  const long long waited = (long long)(weave_monotonic_ms() - start);
  if (s) cudaStreamDestroy(s); /* returns at once; the copies, if still queued, complete before its release */
  weave_device_leave(caller);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return weave_fail(team, e == cudaErrorNotReady ? WEAVE_ERROR_TIMEOUT : WEAVE_ERROR_CUDA,
                      "weave_team_abort: rank %d could not tell every rank (%s %s after %lld of %d ms): their waits "
                      "end by the timeout; calling it again tries again",
                      team->rank, step, e == cudaErrorNotReady ? "still queued" : cudaGetErrorString(e), waited,
                      team->timeout_ms);
  }
  team->abort_told = 1;
#endif
  return WEAVE_SUCCESS;
}
