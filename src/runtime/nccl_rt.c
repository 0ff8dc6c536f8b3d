/* NCCL through dlopen: see nccl_rt.h. */
#include "runtime/nccl_rt.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"

/* The part of NCCL's C ABI (nccl.h of NCCL 2.x, stable since 2.0) that weave calls, declared here so
 * that weave builds where nccl.h is absent: libnccl.so.2 is only loaded at run time. */
typedef struct nccl_comm *nccl_comm_t;
typedef struct {
  char internal[128];
} nccl_unique_id_t;        /* NCCL_UNIQUE_ID_BYTES */
typedef int nccl_result_t; /* ncclResult_t: ncclSuccess = 0 */
enum { NCCL_SUCCESS = 0 };
enum { NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9 }; /* ncclDataType_t */
enum { NCCL_SUM = 0 };                                          /* ncclRedOp_t */

struct weave_nccl {
  void *lib;
  nccl_comm_t comm;
  nccl_result_t (*get_unique_id)(nccl_unique_id_t *);
  nccl_result_t (*comm_init_rank)(nccl_comm_t *, int, nccl_unique_id_t, int);
  nccl_result_t (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm_t, weave_stream_t);
  nccl_result_t (*all_gather)(const void *, void *, size_t, int, nccl_comm_t, weave_stream_t);
  nccl_result_t (*broadcast)(const void *, void *, size_t, int, int, nccl_comm_t, weave_stream_t);
  nccl_result_t (*comm_count)(nccl_comm_t, int *);
  nccl_result_t (*comm_user_rank)(nccl_comm_t, int *);
  nccl_result_t (*comm_destroy)(nccl_comm_t);
  const char *(*error_string)(nccl_result_t);
};

static weave_result_t load(weave_team_t team, weave_nccl_t *n) {
  n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) return weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: cannot load libnccl.so.2 (%s)", dlerror());
  *(void **)&n->get_unique_id = dlsym(n->lib, "ncclGetUniqueId");
  *(void **)&n->comm_init_rank = dlsym(n->lib, "ncclCommInitRank");
  *(void **)&n->reduce_scatter = dlsym(n->lib, "ncclReduceScatter");
  *(void **)&n->all_gather = dlsym(n->lib, "ncclAllGather");
  *(void **)&n->broadcast = dlsym(n->lib, "ncclBroadcast");
  *(void **)&n->comm_count = dlsym(n->lib, "ncclCommCount");
  *(void **)&n->comm_user_rank = dlsym(n->lib, "ncclCommUserRank");
  *(void **)&n->comm_destroy = dlsym(n->lib, "ncclCommDestroy");
  *(void **)&n->error_string = dlsym(n->lib, "ncclGetErrorString");
  if (!n->get_unique_id || !n->comm_init_rank || !n->reduce_scatter || !n->all_gather || !n->broadcast ||
      !n->comm_count || !n->comm_user_rank || !n->comm_destroy || !n->error_string)
    return weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: libnccl.so.2 lacks a needed symbol");
  return WEAVE_SUCCESS;
}

void weave_nccl_destroy(weave_nccl_t *n) {
  if (!n) return;
  if (n->comm && n->comm_destroy) n->comm_destroy(n->comm);
  if (n->lib) dlclose(n->lib);
  free(n);
}

weave_result_t weave_nccl_create(weave_team_t team, weave_nccl_t **out) {
  weave_nccl_t *n = (weave_nccl_t *)calloc(1, sizeof(*n));
  weave_result_t rc = n ? load(team, n) : weave_fail(team, WEAVE_ERROR_OUT_OF_MEMORY, "NCCL: host allocation");
  nccl_unique_id_t id;
  memset(&id, 0, sizeof(id));
  if (rc == WEAVE_SUCCESS && team->rank == 0 && n->get_unique_id(&id) != NCCL_SUCCESS)
    rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: ncclGetUniqueId failed");
  rc = weave_team_agree(team, rc);
  if (rc == WEAVE_SUCCESS) {
    nccl_unique_id_t *ids = (nccl_unique_id_t *)malloc(sizeof(nccl_unique_id_t) * (size_t)team->world);
    rc =
        ids ? team->bootstrap->allgather(team->bootstrap, team->rank, &id, ids, sizeof(id)) : WEAVE_ERROR_OUT_OF_MEMORY;
    if (rc == WEAVE_SUCCESS) id = ids[0];
    free(ids);
  }
  if (rc == WEAVE_SUCCESS) {
    nccl_result_t r = n->comm_init_rank(&n->comm, team->world, id, team->rank);
    if (r != NCCL_SUCCESS)
      rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: ncclCommInitRank: %s", n->error_string(r));
  }
  rc = weave_team_agree(team, rc);
  if (rc != WEAVE_SUCCESS) {
    weave_nccl_destroy(n);
    return rc;
  }
  *out = n;
  return WEAVE_SUCCESS;
}

weave_nccl_t *weave_nccl_try_create(weave_team_t team, const char *what, const char *instead) {
  int shared[WEAVE_MAX_WORLD], any = 0;
  if (weave_team_allgather_int(team, team->info.ranks_on_device > 1, shared) != WEAVE_SUCCESS) return NULL;
  for (int r = 0; r < team->world; ++r) any |= shared[r];
  weave_nccl_t *n = NULL;
  if (!any && weave_nccl_create(team, &n) != WEAVE_SUCCESS)
    weave_log(WEAVE_LOG_INFO, team, "%s: baseline without NCCL (%s): %s", what, weave_get_last_error(team), instead);
  return n;
}

static int nccl_type(weave_dtype_t dtype) {
  return dtype == WEAVE_BF16 ? NCCL_BFLOAT16 : dtype == WEAVE_FP16 ? NCCL_FLOAT16 : NCCL_FLOAT32;
}

weave_result_t weave_nccl_all_gather(weave_nccl_t *n, const void *send, void *recv, size_t sendcount,
                                     weave_dtype_t dtype, weave_stream_t stream) {
  nccl_result_t r = n->all_gather(send, recv, sendcount, nccl_type(dtype), n->comm, stream);
  return r == NCCL_SUCCESS ? WEAVE_SUCCESS : WEAVE_ERROR_CUDA;
}

weave_result_t weave_nccl_reduce_scatter(weave_nccl_t *n, const void *send, void *recv, size_t recvcount,
                                         weave_dtype_t dtype, weave_stream_t stream) {
  int t = nccl_type(dtype);
  nccl_result_t r = n->reduce_scatter(send, recv, recvcount, t, NCCL_SUM, n->comm, stream);
  return r == NCCL_SUCCESS ? WEAVE_SUCCESS : WEAVE_ERROR_CUDA;
}

/* ---- a team over a communicator ------------------------------------------------------------------ */
#ifdef WEAVE_HAVE_CUDA
#include <cuda_runtime_api.h>

enum { NCCL_UINT8 = 1 }; /* ncclDataType_t */

/* Rank 0's [status, unique id] to every rank of `comm` through ncclBroadcast on `stream` (waited for):
 * status 1 tells the others that rank 0 could not make an id, instead of leaving them waiting. */
static weave_result_t share_unique_id(weave_nccl_t *n, nccl_comm_t comm, int rank, weave_stream_t stream,
                                      weave_unique_id_t *id) {
  unsigned char host[1 + sizeof(weave_unique_id_t)];
  memset(host, 0, sizeof(host));
  if (rank == 0 && weave_get_unique_id((weave_unique_id_t *)(host + 1)) != WEAVE_SUCCESS) host[0] = 1;
  void *dev = NULL;
  cudaError_t e = cudaMalloc(&dev, sizeof(host));
  if (e == cudaSuccess) e = cudaMemcpy(dev, host, sizeof(host), cudaMemcpyHostToDevice);
  nccl_result_t r = NCCL_SUCCESS;
  if (e == cudaSuccess) r = n->broadcast(dev, dev, sizeof(host), NCCL_UINT8, 0, comm, stream);
  if (e == cudaSuccess && r == NCCL_SUCCESS) e = cudaStreamSynchronize((cudaStream_t)stream);
  if (e == cudaSuccess && r == NCCL_SUCCESS) e = cudaMemcpy(host, dev, sizeof(host), cudaMemcpyDeviceToHost);
  cudaFree(dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return weave_fail(NULL, WEAVE_ERROR_CUDA, "weave_team_create_from_nccl: the unique id's buffer: %s",
                      cudaGetErrorString(e));
  }
  if (r != NCCL_SUCCESS)
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "weave_team_create_from_nccl: ncclBroadcast: %s",
                      n->error_string(r));
  if (host[0])
    return weave_fail(NULL, WEAVE_ERROR_BOOTSTRAP, "weave_team_create_from_nccl: rank 0 could not make a unique id");
  memcpy(id, host + 1, sizeof(*id));
  return WEAVE_SUCCESS;
}
#endif

weave_result_t weave_team_create_from_nccl(void *nccl_comm, int device, const weave_config_t *config,
                                           weave_stream_t stream, weave_team_t *team) {
  const char *fn = "weave_team_create_from_nccl";
  if (!nccl_comm || !team)
    return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: nccl_comm %p and team %p must be non-NULL", fn,
                      nccl_comm, (void *)team);
#ifndef WEAVE_HAVE_CUDA
  (void)device;
  (void)config;
  (void)stream;
  return weave_fail(NULL, WEAVE_ERROR_NO_DEVICE, "%s: weave was built without CUDA", fn);
#else
  weave_nccl_t *n = (weave_nccl_t *)calloc(1, sizeof(*n));
  if (!n) return weave_fail(NULL, WEAVE_ERROR_OUT_OF_MEMORY, "%s: host allocation", fn);
  weave_result_t rc = load(NULL, n); /* the communicator's library, already loaded by its owner */
  int world = 0, rank = -1;
  if (rc == WEAVE_SUCCESS && (n->comm_count((nccl_comm_t)nccl_comm, &world) != NCCL_SUCCESS ||
                              n->comm_user_rank((nccl_comm_t)nccl_comm, &rank) != NCCL_SUCCESS))
    rc = weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "%s: ncclCommCount / ncclCommUserRank refused the communicator",
                    fn);
  weave_unique_id_t id;
  const weave_device_scope_t caller = weave_device_enter(device);
  if (rc == WEAVE_SUCCESS) rc = share_unique_id(n, (nccl_comm_t)nccl_comm, rank, stream, &id);
  weave_device_leave(caller);
  if (n->lib) dlclose(n->lib); /* a reference of ours only: the owner's stays */
  free(n);
  weave_bootstrap_t *bs = NULL;
  if (rc == WEAVE_SUCCESS) rc = weave_bootstrap_create_uid(&id, world, rank, &bs);
  if (rc == WEAVE_SUCCESS) rc = weave_team_create(bs, rank, device, config, team);
  if (rc != WEAVE_SUCCESS) {
    if (bs) weave_bootstrap_destroy(bs);
    return rc;
  }
  (*team)->owned_bootstrap = bs; /* destroyed with the team */
  return WEAVE_SUCCESS;
#endif
}
