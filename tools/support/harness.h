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

#ifdef __cplusplus
extern "C" {
#endif

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
/* For the tests of sm_90a kernels: 0 when device 0 is an sm_90 GPU (printing "# device <name>, <n> SMs"),
 * else HARNESS_SKIP after a "SKIP: ..." line saying why. */
int harness_require_sm90(void);
/* Pretend nodes of n consecutive ranks for the teams made after it (WEAVE_RANKS_PER_NODE): worlds of
 * equal nodes above n run the plans past one node. n <= 0: nothing changes. */
void harness_pretend_nodes(int ranks_per_node);
/* Under a launcher (torchrun, mpirun, srun, scripts/launch.sh: one process per rank) the job's world,
 * with the process's bootstrap made on first use; 0 when not launched; -1 when the bootstrap failed. */
int harness_launched_world(void);
/* The launched job's bootstrap (NULL when not launched): for tests that create their own teams. */
weave_bootstrap_t *harness_launched_bootstrap(void);
/* This process's rank under a launcher; 0 when not launched (the process then holds every rank). */
int harness_launched_rank(void);
/* Runs fn on every rank; returns the largest rank result, HARNESS_SKIP without a device, or 1 when
 * a team could not be created. config may be NULL. Under a launcher it runs this process's rank only,
 * and a world other than the job's is HARNESS_SKIP. */
int harness_run(int world, const int *devices, const weave_config_t *config, harness_fn fn, void *user);

/* 1 when scripts/launch.sh could not start MPS, so this job's processes share the GPU in time
 * slices (a flag round trip takes milliseconds): tests then run their small cases only. */
int harness_time_sliced(void);

/* Collective over r's team: every rank's `bytes` at `mine` land at all + rank * bytes on every rank.
 * It goes through the symmetric heap (weave_malloc, weave_ptr, weave_barrier), so it works alike for
 * ranks that are threads and ranks that are processes. 0 on success, else 1 with a message. */
int harness_allgather(harness_rank_t *r, const void *mine, void *all, size_t bytes);

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

/* cuBLASLt alone: C[M, N] (out dtype) = alpha * A[M, K] . B (B [K, N] for ROW, [N, K] for COL), the
 * GEMM part of the baseline, through the library's own cuBLASLt plan. create returns NULL with a
 * message in msg when cuBLASLt cannot plan the shape; run returns 0 on success. */
typedef struct harness_lt harness_lt_t;
harness_lt_t *harness_lt_create(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t layout,
                                char *msg, size_t msg_len);
int harness_lt_run(harness_lt_t *lt, float alpha, const void *A, const void *B, void *C, weave_stream_t stream);
/* fp8 (in WEAVE_FP8_E4M3, B [N, K]): the baseline's cuBLASLt with scale_mode scales and fp8_accum's
 * accumulation (as weave's kernel and the baseline strategy), run with this call's device scale pointers. */
harness_lt_t *harness_lt_create_scaled(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t layout,
                                       weave_scale_mode_t scale_mode, weave_fp8_accum_t fp8_accum, char *msg,
                                       size_t msg_len);
int harness_lt_run_scaled(harness_lt_t *lt, float alpha, const void *A, const void *B, const float *scale_a,
                          const float *scale_b, void *C, weave_stream_t stream);
void harness_lt_destroy(harness_lt_t *lt);

double harness_median(double *v, int n); /* sorts v */
double harness_now_ms(void);             /* CLOCK_MONOTONIC, in ms */
uint64_t harness_seed(void);             /* fresh per process (time and pid) unless WEAVE_TEST_SEED */
/* order[0..n) = a permutation of 0..n-1 drawn from *rng (an LCG state the caller keeps): the benches
 * time their variants in an order shuffled per round, the same on every rank when every rank starts
 * from the same state, so that no variant keeps one neighbour (a kernel's time depends on the one
 * before it). */
void harness_shuffle(int *order, int n, unsigned *rng);

#ifdef __cplusplus
}
#endif
#endif
