/* NCCL through dlopen: see nccl.h. */
#include "nccl_rt.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct weave_nccl {
  void *lib;
  ncclComm_t comm;
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*comm_destroy)(ncclComm_t);
  const char *(*error_string)(ncclResult_t);
};

static weave_result_t load(weave_team_t team, weave_nccl_t *n) {
  n->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) return weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: cannot load libnccl.so.2 (%s)", dlerror());
  *(void **)&n->get_unique_id = dlsym(n->lib, "ncclGetUniqueId");
  *(void **)&n->comm_init_rank = dlsym(n->lib, "ncclCommInitRank");
  *(void **)&n->reduce_scatter = dlsym(n->lib, "ncclReduceScatter");
  *(void **)&n->comm_destroy = dlsym(n->lib, "ncclCommDestroy");
  *(void **)&n->error_string = dlsym(n->lib, "ncclGetErrorString");
  if (!n->get_unique_id || !n->comm_init_rank || !n->reduce_scatter || !n->comm_destroy || !n->error_string)
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
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (rc == WEAVE_SUCCESS && team->rank == 0 && n->get_unique_id(&id) != ncclSuccess)
    rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: ncclGetUniqueId failed");
  rc = weave_team_agree(team, rc);
  if (rc == WEAVE_SUCCESS) {
    ncclUniqueId *ids = (ncclUniqueId *)malloc(sizeof(ncclUniqueId) * (size_t)team->world);
    rc = ids ? team->bootstrap->allgather(team->bootstrap, team->rank, &id, ids, sizeof(id)) : WEAVE_ERROR_OUT_OF_MEMORY;
    if (rc == WEAVE_SUCCESS) id = ids[0];
    free(ids);
  }
  if (rc == WEAVE_SUCCESS) {
    ncclResult_t r = n->comm_init_rank(&n->comm, team->world, id, team->rank);
    if (r != ncclSuccess) rc = weave_fail(team, WEAVE_ERROR_UNSUPPORTED, "NCCL: ncclCommInitRank: %s", n->error_string(r));
  }
  rc = weave_team_agree(team, rc);
  if (rc != WEAVE_SUCCESS) {
    weave_nccl_destroy(n);
    return rc;
  }
  *out = n;
  return WEAVE_SUCCESS;
}

weave_result_t weave_nccl_reduce_scatter(weave_nccl_t *n, const void *send, void *recv, size_t recvcount,
                                         weave_dtype_t dtype, weave_stream_t stream) {
  ncclDataType_t t = dtype == WEAVE_BF16 ? ncclBfloat16 : dtype == WEAVE_FP16 ? ncclFloat16 : ncclFloat32;
  ncclResult_t r = n->reduce_scatter(send, recv, recvcount, t, ncclSum, n->comm, (cudaStream_t)stream);
  return r == ncclSuccess ? WEAVE_SUCCESS : WEAVE_ERROR_CUDA;
}
