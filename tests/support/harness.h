/*
 * Multi-rank harness for the GPU tests and the benchmark: runs `fn` on `world` host threads, one per
 * rank (or, under a launcher, on this process's rank), each with its team (threads bootstrap) and its own non-blocking stream, ranks placed on the
 * given devices (which may repeat: several ranks on one GPU).
 */
#ifndef WEAVE_HARNESS_H
#define WEAVE_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "weave.h"

#define HARNESS_SKIP 77

typedef struct harness_rank {
  int rank, world, device;
  weave_team_t team;
  weave_stream_t stream;
  void *user;
} harness_rank_t;

typedef int (*harness_fn)(harness_rank_t *r);

/* 0: no device (callers exit 77), else the number of devices. Never fails hard. */
int harness_device_count(void);
/* SMs of CUDA device `device` (0 when it cannot be read). */
int harness_sm_count(int device);
/* Under a launcher (torchrun, mpirun, srun, scripts/launch.sh: one process per rank) the job's world,
 * with the process's bootstrap made on first use; 0 when not launched; -1 when the bootstrap failed. */
int harness_launched_world(void);
/* Runs fn on every rank; returns the largest rank result, HARNESS_SKIP without a device, or 1 when
 * a team could not be created. config may be NULL. Under a launcher it runs this process's rank only,
 * and a world other than the job's is HARNESS_SKIP. */
int harness_run(int world, const int *devices, const weave_config_t *config, harness_fn fn, void *user);

/* Device helpers (exit the process with a message on a CUDA failure: test and bench code only). */
void *harness_dev_alloc(size_t bytes);
void harness_dev_free(void *p);
void harness_upload(void *dst, const void *src, size_t bytes);
void harness_download(void *dst, const void *src, size_t bytes);
void harness_poison(void *p, size_t bytes, weave_stream_t stream); /* 0xFF bytes: NaN in every dtype */
void harness_sync(weave_stream_t stream);

/* Timing on a stream. */
typedef struct harness_timer harness_timer_t;
harness_timer_t *harness_timer_create(void);
void harness_timer_start(harness_timer_t *t, weave_stream_t s);
void harness_timer_stop(harness_timer_t *t, weave_stream_t s);
float harness_timer_ms(harness_timer_t *t); /* synchronizes */
void harness_timer_destroy(harness_timer_t *t);

/* Reference for every one of this rank's rows of C, for large shapes where the fp64 CPU reference can
 * only sample rows: cuBLASLt over the gathered K (A_cat = this rank's rows of all A_s side by side,
 * B_cat = the B_s stacked along K), fp32 output, alpha applied, bias added in fp64. Returns a malloc'd
 * [rows, N] array for weave_check_result, or NULL (message on stderr) if it could not run. */
double *harness_ref_rows_lt(int N, int K, int world, weave_dtype_t t, weave_layout_t lay, float alpha,
                            const void *const *A, const void *const *B, const void *bias, int row_begin, int rows);

double harness_median(double *v, int n); /* sorts v */
uint64_t harness_seed(void);             /* fresh per process (time and pid) unless WEAVE_TEST_SEED */

#endif
