/*
 * GPU test of team lifetime: teams created and destroyed many times in one process leave nothing
 * behind. Open file descriptors (/proc/self/fd) and free device memory (cudaMemGetInfo) are read
 * after a first warm-up team and again after the loop; both must be back where they were (device
 * memory within 2 MiB of the warm-up reading). Each team also allocates, uses and frees heap memory
 * through weave_malloc and weave_ptr, so the mappings are used, not only made.
 * Threads mode: world 2 and 4 on GPU 0. Under a launcher (scripts/launch.sh -n N --mps): one rank per
 * process, heaps exchanged as file descriptors. Usage: gpu_team_test [cycles] (default 1000).
 * Exit 0 pass, 1 fail, 77 no device.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>

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
  if (launched) failed |= run_world(launched);
  else
    for (int w = 2; w <= 4; w *= 2) failed |= run_world(w);
  printf("gpu_team_test: %s\n", failed ? "FAILED" : "PASSED");
  return failed ? 1 : 0;
}
