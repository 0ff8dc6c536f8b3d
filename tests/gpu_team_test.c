/*
 * GPU test of team lifetime: teams created and destroyed many times in one process leave nothing
 * behind. Open file descriptors (/proc/self/fd) and free device memory (cudaMemGetInfo) are read
 * after a first warm-up team and again after the loop; both must be back where they were (device
 * memory within 2 MiB of the warm-up reading). Each team also allocates, uses and frees heap memory
 * through weave_malloc and weave_ptr, so the mappings are used, not only made.
 * Threads mode: world 2 and 4 on GPU 0. Under a launcher (scripts/launch.sh -n N --mps): one rank per
 * process, heaps exchanged as file descriptors. With two GPUs or more (threads mode), also: a team
 * on GPU 0 driven from a thread whose current device is GPU 1 leaves GPU 1 current after every call
 * (create, malloc, plan, execute, sync, free, destroy). Threads mode also makes a team over a
 * one-rank NCCL communicator (weave_team_create_from_nccl; libnccl.so.2 found at run time, the case
 * skipped with a line saying so when it is not), and splits a team of 4 (weave_team_split) by color
 * and key and by node. Under a launcher, also a team whose processes act as on different hosts
 * (WEAVE_TEST_HOST): each maps only its own heap, and plans that would need the others' refuse.
 * Usage: gpu_team_test [cycles] (default 1000).
 * Exit 0 pass, 1 fail, 77 no device.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "weave.h"

static int cycles = 1000;

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

/* One team's worth of work: a collective allocation, every peer's copy written through weave_ptr, read back. */
static int use_team(harness_rank_t *r) {
  int *p = NULL;
  if (weave_malloc(r->team, 4096, (void **)&p) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: weave_malloc: %s\n", r->rank, weave_get_last_error(r->team));
    return 1;
  }
  int peer = (r->rank + 1) % r->world, *q = NULL, v = 1000 + r->rank, got = -1;
  if (weave_ptr(r->team, p, peer, (void **)&q) != WEAVE_SUCCESS) return 1;
  harness_upload(q, &v, sizeof v); /* into the peer's heap, through this rank's mapping of it */
  harness_sync(r->stream);
  if (weave_barrier(r->team) != WEAVE_SUCCESS) return 1;
  harness_download(&got, p, sizeof got); /* what the previous rank wrote into this rank's heap */
  int expect = 1000 + (r->rank + r->world - 1) % r->world, rc = got != expect;
  if (rc) fprintf(stderr, "rank %d: heap word %d, expected %d\n", r->rank, got, expect);
  if (weave_barrier(r->team) != WEAVE_SUCCESS || weave_free(r->team, p) != WEAVE_SUCCESS) rc = 1;
  return rc;
}

/* Readings taken while every rank holds exactly one team, between two barriers: under a launcher the
 * other processes' heaps are on the same GPU, so a reading outside a team would race their teardown. */
static size_t mem_free;
static int fds_open;
static int measure(harness_rank_t *r) {
  if (weave_barrier(r->team) != WEAVE_SUCCESS) return 1;
  if (r->rank == 0 || harness_launched_world() > 0) { /* one writer per process */
    size_t total;
    cudaDeviceSynchronize();
    cudaMemGetInfo(&mem_free, &total);
    fds_open = open_fds();
  }
  return weave_barrier(r->team) != WEAVE_SUCCESS;
}

static int run_world(int world) {
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 64u << 20;
  int devices[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int rc = harness_run(world, devices, &cfg, use_team, NULL); /* warm-up: the CUDA context, modules */
  if (rc || (rc = harness_run(world, devices, &cfg, measure, NULL))) return rc;
  size_t free0 = mem_free;
  int fds0 = fds_open;
  for (int i = 0; i < cycles && rc == 0; ++i) rc = harness_run(world, devices, &cfg, use_team, NULL);
  if (rc || (rc = harness_run(world, devices, &cfg, measure, NULL))) return rc;
  size_t free1 = mem_free;
  int fds1 = fds_open;
  long long lost = (long long)free0 - (long long)free1;
  printf("world %d: %d teams, open fds %d -> %d, free device memory %zu -> %zu (%lld bytes lost)%s\n", world, cycles,
         fds0, fds1, free0, free1, lost, rc ? "  <-- FAIL (a cycle failed)" : "");
  if (fds1 != fds0 || lost > (2ll << 20)) {
    printf("FAIL world %d: resources leaked\n", world);
    return 1;
  }
  return rc;
}

/* weave_team_split: ranks of one color (rank % 2; the last rank, with world > 2, none) form a team
 * ranked by key (the reverse of their rank), whose heap works as every team's; then the same for the
 * pretend nodes of weave_team_node. */
/* A sub-team used as every team is (use_team, as its rank sub_rank of sub_world), then destroyed;
 * nonzero when either failed. */
static int use_sub(const harness_rank_t *r, weave_team_t sub, int sub_world, int sub_rank) {
  harness_rank_t sr = *r;
  sr.team = sub;
  sr.rank = sub_rank;
  sr.world = sub_world;
  const int bad = use_team(&sr);
  return bad | (weave_team_destroy(sub) != WEAVE_SUCCESS);
}

static int split_fn(harness_rank_t *r) {
  const int world = r->world, none = world > 2 && r->rank == world - 1;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 64u << 20;
  weave_team_t sub = NULL;
  int bad = 0;
  weave_result_t rc = weave_team_split(r->team, none ? -1 : r->rank % 2, world - r->rank, &cfg, &sub);
  if (rc != WEAVE_SUCCESS || (none != (sub == NULL))) {
    printf("FAIL [split] rank %d: %s (sub %p)\n", r->rank, weave_get_last_error(r->team), (void *)sub);
    return 1;
  }
  if (sub) {
    int members = 0, place = 0, sub_world = -1, sub_rank = -1;
    for (int q = 0; q < world; ++q)
      if (!(world > 2 && q == world - 1) && q % 2 == r->rank % 2) {
        ++members;
        place += q > r->rank; /* key = world - rank: the higher ranks first */
      }
    weave_team_world(sub, &sub_world);
    weave_team_rank(sub, &sub_rank);
    if (sub_world != members || sub_rank != place) {
      printf("FAIL [split] rank %d: sub-team world %d rank %d, want %d and %d\n", r->rank, sub_world, sub_rank, members,
             place);
      bad = 1;
    }
    bad |= use_sub(r, sub, sub_world, sub_rank);
  }
  weave_barrier(r->team);
  int node = -1, node_rank = -1, node_size = -1;
  weave_team_node(r->team, &node, NULL, &node_rank, &node_size);
  rc = weave_team_split(r->team, node, r->rank, &cfg, &sub);
  int sub_world = -1, sub_rank = -1;
  if (rc == WEAVE_SUCCESS) {
    weave_team_world(sub, &sub_world);
    weave_team_rank(sub, &sub_rank);
    bad |= use_sub(r, sub, sub_world, sub_rank);
  }
  if (rc != WEAVE_SUCCESS || sub_world != node_size || sub_rank != node_rank) {
    printf("FAIL [split by node] rank %d: %s: world %d rank %d, want %d and %d\n", r->rank, weave_get_error_string(rc),
           sub_world, sub_rank, node_size, node_rank);
    bad = 1;
  }
  if (r->rank == 0)
    printf("split: by color and key, and by node (node size %d): %s\n", node_size, bad ? "FAILED" : "ok");
  return bad;
}

/* weave's calls make the team's device current while they work and give the caller's back. */
static int caller_device_kept(void) {
  if (harness_device_count() < 2) {
    printf("caller's device kept: one GPU, skipped\n");
    return 0;
  }
  int bad = 0, dev = -1;
#define KEPT(what)                                                     \
  do {                                                                 \
    cudaGetDevice(&dev);                                               \
    if (dev != 1) {                                                    \
      printf("FAIL caller's device after %s: %d, not 1\n", what, dev); \
      bad = 1;                                                         \
    }                                                                  \
  } while (0)
  weave_bootstrap_t *bs = NULL;
  weave_team_t team = NULL;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 64 << 20;
  enum { M = 256, N = 256, K = 64 };
  void *A = NULL, *B = NULL, *C = NULL;
  cudaStream_t s = NULL;
  cudaSetDevice(0); /* the inputs and the stream live on the team's GPU */
  if (cudaMalloc(&A, M * K * 2) || cudaMalloc(&B, K * N * 2) || cudaMalloc(&C, M * N * 2) ||
      cudaMemset(A, 0, M * K * 2) || cudaMemset(B, 0, K * N * 2) ||
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) {
    printf("FAIL caller's device: CUDA set-up on GPU 0\n");
    bad = 1;
    goto done;
  }
  cudaSetDevice(1);
  if (weave_bootstrap_create_threads(1, &bs) != WEAVE_SUCCESS ||
      weave_team_create(bs, 0, /*device=*/0, &cfg, &team) != WEAVE_SUCCESS) {
    printf("FAIL caller's device: a team on GPU 0: %s\n", weave_get_last_error(NULL));
    bad = 1;
    goto done;
  }
  KEPT("weave_team_create");
  void *h = NULL;
  if (weave_malloc(team, 4096, &h) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_malloc");
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.strategy = WEAVE_STRATEGY_FUSED;
  weave_gemm_rs_plan_t plan = NULL;
  if (weave_gemm_rs_plan_create(team, M, N, K, &d, &plan) != WEAVE_SUCCESS) {
    printf("FAIL caller's device: plan: %s\n", weave_get_last_error(team));
    bad = 1;
  }
  KEPT("weave_gemm_rs_plan_create");
  if (plan && weave_gemm_rs_execute(plan, A, B, NULL, C, (weave_stream_t)s) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_gemm_rs_execute");
  if (weave_team_sync(team, (weave_stream_t)s) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_team_sync");
  if (plan && weave_gemm_rs_plan_destroy(plan) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_gemm_rs_plan_destroy");
  if (weave_free(team, h) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_free");
  if (weave_team_destroy(team) != WEAVE_SUCCESS) bad = 1;
  KEPT("weave_team_destroy");
#undef KEPT
done:
  if (bs) weave_bootstrap_destroy(bs);
  cudaSetDevice(0);
  if (s) cudaStreamDestroy(s);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  printf("caller's device kept (team on GPU 0, thread on GPU 1): %s\n", bad ? "FAILED" : "passed");
  return bad;
}

/* weave_team_create_from_nccl over a communicator of one rank (NCCL refuses two ranks on one GPU):
 * the team's world, rank and node, its heap used as every team's, then destroyed before the
 * communicator it came from. */
typedef struct {
  char internal[128];
} nccl_unique_id_t;

static int from_nccl_one_rank(void) {
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("from_nccl: libnccl.so.2 not found (%s): case skipped\n", dlerror());
    return 0;
  }
  int (*get_id)(nccl_unique_id_t *) = (int (*)(nccl_unique_id_t *))dlsym(lib, "ncclGetUniqueId");
  int (*init_rank)(void **, int, nccl_unique_id_t, int) =
      (int (*)(void **, int, nccl_unique_id_t, int))dlsym(lib, "ncclCommInitRank");
  int (*destroy)(void *) = (int (*)(void *))dlsym(lib, "ncclCommDestroy");
  nccl_unique_id_t id;
  void *comm = NULL;
  int rc = 1;
  if (cudaSetDevice(0) != cudaSuccess || !get_id || !init_rank || !destroy || get_id(&id) != 0 ||
      init_rank(&comm, 1, id, 0) != 0) {
    fprintf(stderr, "from_nccl: could not make a one-rank NCCL communicator\n");
    dlclose(lib);
    return 1;
  }
  harness_rank_t r = {0};
  r.world = 1;
  cudaStream_t stream = NULL;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) stream = NULL;
  r.stream = (weave_stream_t)stream;
  weave_result_t res = weave_team_create_from_nccl(comm, 0, NULL, r.stream, &r.team);
  if (res != WEAVE_SUCCESS) {
    fprintf(stderr, "from_nccl: weave_team_create_from_nccl: %s (%s)\n", weave_get_error_string(res),
            weave_get_last_error(NULL));
  } else {
    int world = -1, rank = -1, nodes = -1, node_size = -1;
    weave_team_world(r.team, &world);
    weave_team_rank(r.team, &rank);
    weave_team_node(r.team, NULL, &nodes, NULL, &node_size);
    rc = world != 1 || rank != 0 || nodes != 1 || node_size != 1;
    if (rc) fprintf(stderr, "from_nccl: world %d rank %d nodes %d node size %d\n", world, rank, nodes, node_size);
    rc |= use_team(&r);
    rc |= weave_team_destroy(r.team) != WEAVE_SUCCESS;
  }
  rc |= destroy(comm) != 0;
  if (stream) cudaStreamDestroy(stream);
  dlclose(lib);
  printf("from_nccl: one-rank communicator: %s\n", rc ? "FAILED" : "ok");
  return rc;
}

/* Processes that act as on different hosts (WEAVE_TEST_HOST): the team is made, but a rank addresses
 * only its own heap, so weave_ptr refuses every peer; both operations' plans are plans past one node
 * (a node a process) whose step between the hosts needs NCCL, which refuses ranks sharing a GPU: both
 * refused with WEAVE_ERROR_UNSUPPORTED naming NCCL, no plan handed out; the team goes on working. */
static int hosts_fn(harness_rank_t *r) {
  int bad = 0;
  void *p = NULL, *q = (void *)0x1;
  if (weave_malloc(r->team, 4096, &p) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: weave_malloc across hosts: %s\n", r->rank, weave_get_last_error(r->team));
    return 1;
  }
  for (int peer = 0; peer < r->world; ++peer)
    if ((weave_ptr(r->team, p, peer, &q) == WEAVE_SUCCESS) != (peer == r->rank)) {
      fprintf(stderr, "rank %d: weave_ptr to rank %d across hosts: %s\n", r->rank, peer,
              weave_get_error_string(weave_ptr(r->team, p, peer, &q)));
      bad = 1;
    }
  const int M = 64 * r->world;
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  weave_gemm_rs_plan_t plan = NULL;
  weave_result_t rc = weave_gemm_rs_plan_create(r->team, M, 256, 128, &d, &plan);
  if (rc != WEAVE_ERROR_UNSUPPORTED || plan || !strstr(weave_get_last_error(r->team), "NCCL")) {
    fprintf(stderr, "rank %d: gemm_rs plan across hosts without NCCL: %s: %s\n", r->rank, weave_get_error_string(rc),
            weave_get_last_error(r->team));
    bad = 1;
  }
  if (plan) weave_gemm_rs_plan_destroy(plan);
  weave_ag_gemm_desc_t ad = WEAVE_AG_GEMM_DESC_INIT;
  weave_ag_gemm_plan_t ag = NULL;
  rc = weave_ag_gemm_plan_create(r->team, M, 256, 128, &ad, &ag);
  if (rc != WEAVE_ERROR_UNSUPPORTED || ag || !strstr(weave_get_last_error(r->team), "NCCL")) {
    fprintf(stderr, "rank %d: ag_gemm plan across hosts without NCCL: %s: %s\n", r->rank, weave_get_error_string(rc),
            weave_get_last_error(r->team));
    bad = 1;
  }
  if (ag) weave_ag_gemm_plan_destroy(ag);
  if (weave_barrier(r->team) != WEAVE_SUCCESS || weave_free(r->team, p) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: barrier or weave_free after the refusals: %s\n", r->rank, weave_get_last_error(r->team));
    bad = 1;
  }
  if (r->rank == 0 || bad)
    printf("world %d across pretend hosts, rank %d: %s\n", r->world, r->rank, bad ? "FAIL" : "passed");
  return bad;
}

static int across_hosts(int world) {
  char host[32];
  snprintf(host, sizeof(host), "pretend-host-%d", harness_launched_rank());
  setenv("WEAVE_TEST_HOST", host, 1);
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 64u << 20;
  const int rc = harness_run(world, NULL, &cfg, hosts_fn, NULL);
  unsetenv("WEAVE_TEST_HOST");
  return rc != 0;
}

int main(int argc, char **argv) {
  if (argc > 1) cycles = atoi(argv[1]);
  if (harness_time_sliced() && cycles > 20) {
    printf("gpu_team_test: processes share the GPU time-sliced (no MPS): 20 cycles only\n");
    cycles = 20;
  }
  if (cycles < 1) {
    fprintf(stderr, "usage: %s [cycles >= 1]\n", argv[0]);
    return 2;
  }
  if (harness_device_count() == 0) {
    printf("gpu_team_test: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  int launched = harness_launched_world();
  if (launched < 0) return 1;
  int failed = 0;
  if (launched) {
    failed |= run_world(launched);
    failed |= across_hosts(launched);
  } else {
    for (int w = 2; w <= 4; w *= 2) failed |= run_world(w);
    failed |= caller_device_kept();
    failed |= from_nccl_one_rank();
    weave_config_t cfg = WEAVE_CONFIG_INIT;
    cfg.heap_size = 64u << 20;
    failed |= harness_run(4, NULL, &cfg, split_fn, NULL) != 0;
  }
  printf("gpu_team_test: %s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
