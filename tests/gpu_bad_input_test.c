/*
 * Bad inputs through the public API: a table of rows, each a name, the call made (on every rank of a
 * 2-rank team of threads, or on rank 0 alone) and the exact weave_result_t it must return. For every
 * row, on every rank:
 *   - the result is the expected code (collective calls: on every rank, and none may hang);
 *   - weave_get_last_error (the thread's, and the team's where the call has a team) is a new,
 *     non-empty message: a sentinel failure is made just before the row, and the message must differ;
 *   - a plan's output buffer, poisoned (0xFF) before the row, is still all 0xFF after
 *     weave_team_sync, which must succeed (nothing was launched, nothing was corrupted).
 * After the table the same team runs two good plans (fused; bulk with bias), checked on every row
 * against the fp64 CPU reference. Host (malloc) pointers given to execute come last, after that
 * check: a library that launched on them could leave the CUDA context unusable; when they are
 * rejected the good plans are run and checked once more. Where the device can read pageable host
 * memory (HMM / ATS, cudaDevAttrPageableMemoryAccess) those rows are not bad input and are skipped.
 *
 * Usage: gpu_bad_input_test. Exit 0 pass, 1 fail, 77 no device (or a launcher's world other than 2).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "reference.h"
#include "weave.h"

#define WORLD 2
#define HEAP ((size_t)256 << 20)
#define GOOD_M 512
#define GOOD_N 264
#define GOOD_K 136
#define SKIP_ROW ((weave_result_t)-1) /* a row's function on a rank that takes no part */
#define C_SLACK 64                    /* bytes past the end of C, poisoned and checked too */

typedef struct {
  pthread_mutex_t mu;
  int failures, rows_run;
  uint64_t seed;
} shared_t;

/* What a row's function has at hand on its rank. */
typedef struct {
  harness_rank_t *hr;
  shared_t *sh;
  weave_gemm_rs_plan_t plan;      /* fused, bf16, no bias */
  weave_gemm_rs_plan_t plan_bias; /* bulk, bf16, with bias */
  void *dA, *dB, *dbias, *dC;     /* device inputs of this rank, C with C_SLACK poisoned bytes after it */
  size_t c_bytes;
  void *hA, *hB, *hbias; /* host copies (malloc): the host-pointer rows pass these */
  void *heap_block;      /* a live weave_malloc block */
  void *dev_block;       /* a cudaMalloc block (not in the heap) */
  int row_begin, rows;
} ctx_t;

typedef weave_result_t (*row_fn)(ctx_t *c);
enum { ON_TEAM, ON_THREAD }; /* where the last error must be: the team's (and the thread's), or the thread's only */

typedef struct {
  const char *name;
  row_fn fn;
  weave_result_t expect;
  int where;
} row_t;

static void fail(shared_t *sh, int rank, const char *row, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(shared_t *sh, int rank, const char *row, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&sh->mu);
  sh->failures++;
  fprintf(stderr, "FAIL rank %d [%s]: ", rank, row);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  pthread_mutex_unlock(&sh->mu);
  va_end(ap);
}

/* ------------------------------------------------------------------------------------------------
 * plan_create rows (collective: every rank calls; a plan created by mistake is destroyed)
 * ---------------------------------------------------------------------------------------------- */
static weave_result_t create(ctx_t *c, int M, int N, int K, const weave_gemm_rs_desc_t *d) {
  weave_gemm_rs_plan_t p = NULL;
  weave_result_t rc = weave_gemm_rs_plan_create(c->hr->team, M, N, K, d, &p);
  if (rc == WEAVE_SUCCESS) weave_gemm_rs_plan_destroy(p);
  return rc;
}
static weave_gemm_rs_desc_t good_desc(void) {
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  return d;
}
static weave_result_t create_null_team(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  weave_gemm_rs_plan_t p = NULL;
  (void)c;
  return weave_gemm_rs_plan_create(NULL, 64, 64, 64, &d, &p);
}
static weave_result_t create_null_plan(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return weave_gemm_rs_plan_create(c->hr->team, 64, 64, 64, &d, NULL);
}
static weave_result_t create_null_desc(ctx_t *c) { return create(c, 64, 64, 64, NULL); }
static weave_result_t create_struct_size(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.struct_size = sizeof(d) - 4;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_m0(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 0, 64, 64, &d);
}
static weave_result_t create_n_neg(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 64, -8, 64, &d);
}
static weave_result_t create_k0(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 64, 64, 0, &d);
}
static weave_result_t create_huge(ctx_t *c) { /* M*N*K = 2^60, M*N = 2^40 */
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 1 << 20, 1 << 20, 1 << 20, &d);
}
static weave_result_t create_int_max(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, INT32_MAX, INT32_MAX, INT32_MAX, &d);
}
static weave_result_t create_mn_2p32(ctx_t *c) { /* M*N = 2^32 overflows int; legal, but 8 GiB of partials */
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 65536, 65536, 65536, &d);
}
static weave_result_t create_bad_dtype(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.dtype = (weave_dtype_t)4;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_layout(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.b_layout = (weave_layout_t)7;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_strategy(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.strategy = (weave_strategy_t)-1;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_reduce(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.reduce = (weave_reduce_t)2;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_order(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.tile_order = (weave_tile_order_t)2;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_slots(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.fp32_slots = 2;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_bad_has_bias(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.has_bias = -1;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_nan_alpha(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.alpha = NAN;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_inf_alpha(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.alpha = INFINITY;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_gemm_blocks_only(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.strategy = WEAVE_STRATEGY_FUSED;
  d.gemm_blocks = 8;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_neg_blocks(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.strategy = WEAVE_STRATEGY_FUSED;
  d.gemm_blocks = -1;
  d.comm_blocks = 2;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_too_many_blocks(ctx_t *c) { /* more blocks than can be co-resident: could deadlock */
  weave_gemm_rs_desc_t d = good_desc();
  d.strategy = WEAVE_STRATEGY_FUSED;
  d.gemm_blocks = 100000;
  d.comm_blocks = 100000;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_ranks_differ_m(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, c->hr->rank == 0 ? 64 : 128, 64, 64, &d);
}
static weave_result_t create_ranks_differ_desc(ctx_t *c) {
  weave_gemm_rs_desc_t d = good_desc();
  d.dtype = c->hr->rank == 0 ? WEAVE_BF16 : WEAVE_FP16;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_one_rank_bad(ctx_t *c) { /* rank 1 alone passes K 0: rank 0 must fail too */
  weave_gemm_rs_desc_t d = good_desc();
  return create(c, 64, 64, c->hr->rank == 1 ? 0 : 64, &d);
}
static weave_result_t create_padding_differs(ctx_t *c) { /* not bad: the same fields, other padding bytes */
  weave_gemm_rs_desc_t d;
  memset(&d, 0xA0 + c->hr->rank, sizeof(d));
  d.struct_size = sizeof(d);
  d.dtype = WEAVE_BF16;
  d.b_layout = WEAVE_LAYOUT_ROW;
  d.strategy = WEAVE_STRATEGY_AUTO;
  d.reduce = WEAVE_REDUCE_DETERMINISTIC;
  d.fp32_slots = 0;
  d.tile_order = WEAVE_ORDER_OWN_LAST;
  d.alpha = 1.0f;
  d.has_bias = 0;
  d.gemm_blocks = 0;
  d.comm_blocks = 0;
  d.trace = 0;
  d.out_dtype = WEAVE_DTYPE_AUTO;
  d.scale_mode = WEAVE_SCALE_NONE;
  d.fp8_accum = WEAVE_FP8_ACCUM_FP32;
  return create(c, 64, 64, 64, &d);
}
static weave_result_t create_fast_accum_bf16(ctx_t *c) { /* fast accumulation is an fp8 option */
  weave_gemm_rs_desc_t d = good_desc();
  d.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  return create(c, 64, 64, 64, &d);
}

/* ------------------------------------------------------------------------------------------------
 * execute rows (local: nothing may be enqueued)
 * ---------------------------------------------------------------------------------------------- */
#define PLUS1(p) ((void *)((char *)(p) + 1))
static weave_result_t exec_null_plan(ctx_t *c) {
  return weave_gemm_rs_execute(NULL, c->dA, c->dB, NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_null_a(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, NULL, c->dB, NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_null_b(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->dA, NULL, NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_null_c(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->dA, c->dB, NULL, NULL, c->hr->stream);
}
static weave_result_t exec_odd_a(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, PLUS1(c->dA), c->dB, NULL, c->dC, c->hr->stream);
}
/* fp8 runs on TMA GEMMs only: a 1-byte-aligned A (fine for the element) must be refused by every
 * strategy before anything is enqueued (a bulk rank that failed at its GEMM would strand its peers
 * in the ready barrier). Collective: the plan is made and destroyed by every rank. */
static weave_result_t exec_fp8_bulk_odd_a(ctx_t *c) {
  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_COL;
  d.strategy = WEAVE_STRATEGY_BULK;
  weave_gemm_rs_plan_t p = NULL;
  weave_result_t rc = weave_gemm_rs_plan_create(c->hr->team, 64, 64, 64, &d, &p);
  if (rc != WEAVE_SUCCESS) return rc;
  rc = weave_gemm_rs_execute(p, PLUS1(c->dA), c->dB, NULL, c->dC, c->hr->stream);
  weave_gemm_rs_plan_destroy(p);
  return rc;
}
static weave_result_t exec_odd_b(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->dA, PLUS1(c->dB), NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_odd_c(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->dA, c->dB, NULL, PLUS1(c->dC), c->hr->stream);
}
static weave_result_t exec_odd_bias(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan_bias, c->dA, c->dB, PLUS1(c->dbias), c->dC, c->hr->stream);
}
static weave_result_t exec_bias_not_wanted(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->dA, c->dB, c->dbias, c->dC, c->hr->stream);
}
static weave_result_t exec_bias_missing(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan_bias, c->dA, c->dB, NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_host_ab(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan, c->hA, c->hB, NULL, c->dC, c->hr->stream);
}
static weave_result_t exec_host_c(ctx_t *c) {
  void *hC = malloc(c->c_bytes);
  weave_result_t rc = weave_gemm_rs_execute(c->plan, c->dA, c->dB, NULL, hC, c->hr->stream);
  cudaStreamSynchronize((cudaStream_t)c->hr->stream); /* before hC is freed, should anything run */
  free(hC);
  return rc;
}
static weave_result_t exec_host_bias(ctx_t *c) {
  return weave_gemm_rs_execute(c->plan_bias, c->dA, c->dB, c->hbias, c->dC, c->hr->stream);
}
/* The standalone GEMMs (no plan: this thread's error), on this rank's rows of the same buffers. */
static weave_result_t gemm_host_a(ctx_t *c) {
  return weave_gemm(c->rows, GOOD_N, GOOD_K, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, c->hA, c->dB, NULL, c->dC, 0,
                    c->hr->stream);
}
static weave_result_t gemm_ex_host_c(ctx_t *c) {
  weave_gemm_args_t a = WEAVE_GEMM_ARGS_INIT;
  a.M = c->rows;
  a.N = GOOD_N;
  a.K = GOOD_K;
  a.dtype = WEAVE_BF16;
  a.b_layout = WEAVE_LAYOUT_ROW;
  a.A = c->dA;
  a.B = c->dB;
  a.C = c->hA; /* host memory of the C's size and more */
  weave_result_t rc = weave_gemm_ex(&a, c->hr->stream);
  cudaStreamSynchronize((cudaStream_t)c->hr->stream); /* should anything run */
  return rc;
}
static weave_result_t gemm_ex_fp8_host_scale(ctx_t *c) {
  static float host_scale = 1.0f;
  weave_gemm_args_t a = WEAVE_GEMM_ARGS_INIT;
  a.M = c->rows;
  a.N = GOOD_N;
  a.K = 128; /* fp8: K % 16; A and B hold more than these bytes */
  a.dtype = WEAVE_FP8_E4M3;
  a.out_dtype = WEAVE_BF16;
  a.b_layout = WEAVE_LAYOUT_COL;
  a.scale_mode = WEAVE_SCALE_TENSOR;
  a.scale_a = &host_scale;
  a.scale_b = (const float *)c->dev_block;
  a.A = c->dA;
  a.B = c->dB;
  a.C = c->dC;
  return weave_gemm_ex(&a, c->hr->stream);
}

/* ------------------------------------------------------------------------------------------------
 * heap, team and environment rows
 * ---------------------------------------------------------------------------------------------- */
static weave_result_t malloc_too_big(ctx_t *c) {
  void *p = NULL;
  weave_result_t rc = weave_malloc(c->hr->team, HEAP + 1, &p);
  if (rc == WEAVE_SUCCESS) weave_free(c->hr->team, p);
  return rc;
}
static weave_result_t malloc_size_max(ctx_t *c) {
  void *p = NULL;
  weave_result_t rc = weave_malloc(c->hr->team, SIZE_MAX, &p);
  if (rc == WEAVE_SUCCESS) weave_free(c->hr->team, p);
  return rc;
}
static weave_result_t malloc_zero(ctx_t *c) {
  void *p = NULL;
  return weave_malloc(c->hr->team, 0, &p);
}
static weave_result_t malloc_null_out(ctx_t *c) { return weave_malloc(c->hr->team, 256, NULL); }
static weave_result_t malloc_null_team(ctx_t *c) {
  void *p = NULL;
  (void)c;
  return weave_malloc(NULL, 256, &p);
}
static weave_result_t malloc_sizes_differ(ctx_t *c) {
  void *p = NULL;
  weave_result_t rc = weave_malloc(c->hr->team, c->hr->rank == 0 ? 4096 : 8192, &p);
  if (rc == WEAVE_SUCCESS) weave_free(c->hr->team, p);
  return rc;
}
static weave_result_t ptr_peer_world(ctx_t *c) {
  void *q;
  return weave_ptr(c->hr->team, c->heap_block, WORLD, &q);
}
static weave_result_t ptr_peer_neg(ctx_t *c) {
  void *q;
  return weave_ptr(c->hr->team, c->heap_block, -1, &q);
}
static weave_result_t ptr_host(ctx_t *c) {
  void *q;
  return weave_ptr(c->hr->team, c->hA, 0, &q);
}
static weave_result_t ptr_cuda_malloc(ctx_t *c) {
  void *q;
  return weave_ptr(c->hr->team, c->dev_block, 0, &q);
}
static weave_result_t ptr_null_out(ctx_t *c) { return weave_ptr(c->hr->team, c->heap_block, 0, NULL); }
static weave_result_t free_host(ctx_t *c) { return weave_free(c->hr->team, c->hA); }
static weave_result_t free_cuda_malloc(ctx_t *c) { return weave_free(c->hr->team, c->dev_block); }
static weave_result_t free_inside_block(ctx_t *c) { /* in the heap, but not the start of a block */
  return weave_free(c->hr->team, (char *)c->heap_block + WEAVE_HEAP_ALIGNMENT);
}
static weave_result_t destroy_null(ctx_t *c) {
  (void)c;
  return weave_gemm_rs_plan_destroy(NULL);
}
static weave_result_t sync_null(ctx_t *c) { return weave_team_sync(NULL, c->hr->stream); }
static weave_result_t barrier_null(ctx_t *c) {
  (void)c;
  return weave_barrier(NULL);
}
static weave_result_t row_split_bad(ctx_t *c) {
  int rb, rows;
  (void)c;
  return weave_row_split(16, 4, 4, &rb, &rows);
}
static weave_result_t bootstrap_world0(ctx_t *c) {
  weave_bootstrap_t *bs = NULL;
  (void)c;
  weave_result_t rc = weave_bootstrap_create_threads(0, &bs);
  if (rc == WEAVE_SUCCESS) weave_bootstrap_destroy(bs);
  return rc;
}

/* A one-rank team of its own, made by rank 0 alone (the other rank waits in the runner's barrier,
 * so no thread reads the environment while it changes). */
static weave_result_t solo_team(ctx_t *c, const weave_config_t *cfg, int device, const char *env, const char *value) {
  if (c->hr->rank != 0) return SKIP_ROW;
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_threads(1, &bs) != WEAVE_SUCCESS) return WEAVE_ERROR_INTERNAL;
  char *old = env && getenv(env) ? strdup(getenv(env)) : NULL;
  if (env) setenv(env, value, 1);
  weave_team_t t = NULL;
  weave_result_t rc = weave_team_create(bs, 0, device, cfg, &t);
  if (env) {
    if (old)
      setenv(env, old, 1);
    else
      unsetenv(env);
  }
  free(old);
  if (rc == WEAVE_SUCCESS) weave_team_destroy(t);
  weave_bootstrap_destroy(bs);
  return rc;
}
static weave_result_t team_env_timeout(ctx_t *c) {
  return solo_team(c, NULL, c->hr->device, "WEAVE_TIMEOUT_MS", "abc");
}
static weave_result_t team_env_heap(ctx_t *c) { return solo_team(c, NULL, c->hr->device, "WEAVE_HEAP_SIZE", "12Q"); }
static weave_result_t team_env_debug(ctx_t *c) { return solo_team(c, NULL, c->hr->device, "WEAVE_DEBUG", "LOUD"); }
static weave_result_t team_bad_device(ctx_t *c) { return solo_team(c, NULL, 1000, NULL, NULL); }
static weave_result_t team_bad_config(ctx_t *c) {
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.struct_size = 8;
  return solo_team(c, &cfg, c->hr->device, NULL, NULL);
}

#define INVALID WEAVE_ERROR_INVALID_ARGUMENT
static const row_t table[] = {
    {"plan_create: team NULL", create_null_team, INVALID, ON_THREAD},
    {"plan_create: plan NULL", create_null_plan, INVALID, ON_TEAM},
    {"plan_create: desc NULL", create_null_desc, INVALID, ON_TEAM},
    {"plan_create: desc.struct_size wrong", create_struct_size, INVALID, ON_TEAM},
    {"plan_create: M 0", create_m0, INVALID, ON_TEAM},
    {"plan_create: N -8", create_n_neg, INVALID, ON_TEAM},
    {"plan_create: K_local 0", create_k0, INVALID, ON_TEAM},
    {"plan_create: M*N*K 2^60", create_huge, INVALID, ON_TEAM},
    {"plan_create: M=N=K=INT_MAX", create_int_max, INVALID, ON_TEAM},
    {"plan_create: M*N 2^32 (heap too small)", create_mn_2p32, WEAVE_ERROR_OUT_OF_MEMORY, ON_TEAM},
    {"plan_create: dtype 4", create_bad_dtype, INVALID, ON_TEAM},
    {"plan_create: b_layout 7", create_bad_layout, INVALID, ON_TEAM},
    {"plan_create: strategy -1", create_bad_strategy, INVALID, ON_TEAM},
    {"plan_create: reduce 2", create_bad_reduce, INVALID, ON_TEAM},
    {"plan_create: tile_order 2", create_bad_order, INVALID, ON_TEAM},
    {"plan_create: fp32_slots 2", create_bad_slots, INVALID, ON_TEAM},
    {"plan_create: has_bias -1", create_bad_has_bias, INVALID, ON_TEAM},
    {"plan_create: alpha NaN", create_nan_alpha, INVALID, ON_TEAM},
    {"plan_create: alpha inf", create_inf_alpha, INVALID, ON_TEAM},
    {"plan_create: gemm_blocks without comm_blocks", create_gemm_blocks_only, INVALID, ON_TEAM},
    {"plan_create: gemm_blocks -1", create_neg_blocks, INVALID, ON_TEAM},
    {"plan_create: 100000 + 100000 blocks", create_too_many_blocks, WEAVE_ERROR_UNSUPPORTED, ON_TEAM},
    {"plan_create: ranks pass different M", create_ranks_differ_m, WEAVE_ERROR_MISMATCH, ON_TEAM},
    {"plan_create: ranks pass different dtypes", create_ranks_differ_desc, WEAVE_ERROR_MISMATCH, ON_TEAM},
    {"plan_create: rank 1 alone passes K 0", create_one_rank_bad, INVALID, ON_TEAM},
    {"plan_create: same desc, other padding bytes (good)", create_padding_differs, WEAVE_SUCCESS, ON_TEAM},
    {"plan_create: fp8_accum FAST with bf16 inputs", create_fast_accum_bf16, INVALID, ON_TEAM},
    {"execute: plan NULL", exec_null_plan, INVALID, ON_THREAD},
    {"execute: A NULL", exec_null_a, INVALID, ON_TEAM},
    {"execute: B NULL", exec_null_b, INVALID, ON_TEAM},
    {"execute: C NULL", exec_null_c, INVALID, ON_TEAM},
    {"execute: A + 1 byte", exec_odd_a, INVALID, ON_TEAM},
    {"execute: B + 1 byte", exec_odd_b, INVALID, ON_TEAM},
    {"execute: fp8 bulk, A + 1 byte (16-byte TMA alignment)", exec_fp8_bulk_odd_a, INVALID, ON_TEAM},
    {"execute: C + 1 byte", exec_odd_c, INVALID, ON_TEAM},
    {"execute: bias + 1 byte", exec_odd_bias, INVALID, ON_TEAM},
    {"execute: bias to a plan without bias", exec_bias_not_wanted, INVALID, ON_TEAM},
    {"execute: no bias to a plan with bias", exec_bias_missing, INVALID, ON_TEAM},
    {"weave_malloc: heap size + 1", malloc_too_big, WEAVE_ERROR_OUT_OF_MEMORY, ON_TEAM},
    {"weave_malloc: SIZE_MAX", malloc_size_max, WEAVE_ERROR_OUT_OF_MEMORY, ON_TEAM},
    {"weave_malloc: 0 bytes", malloc_zero, INVALID, ON_TEAM},
    {"weave_malloc: ptr NULL", malloc_null_out, INVALID, ON_TEAM},
    {"weave_malloc: team NULL", malloc_null_team, INVALID, ON_THREAD},
    {"weave_malloc: ranks pass different sizes", malloc_sizes_differ, WEAVE_ERROR_MISMATCH, ON_TEAM},
    {"weave_ptr: peer == world", ptr_peer_world, INVALID, ON_TEAM},
    {"weave_ptr: peer -1", ptr_peer_neg, INVALID, ON_TEAM},
    {"weave_ptr: host pointer", ptr_host, INVALID, ON_TEAM},
    {"weave_ptr: cudaMalloc pointer", ptr_cuda_malloc, INVALID, ON_TEAM},
    {"weave_ptr: peer_ptr NULL", ptr_null_out, INVALID, ON_TEAM},
    {"weave_free: host pointer", free_host, INVALID, ON_TEAM},
    {"weave_free: cudaMalloc pointer", free_cuda_malloc, INVALID, ON_TEAM},
    {"weave_free: inside a block", free_inside_block, INVALID, ON_TEAM},
    {"plan_destroy: NULL", destroy_null, INVALID, ON_THREAD},
    {"team_sync: team NULL", sync_null, INVALID, ON_THREAD},
    {"barrier: team NULL", barrier_null, INVALID, ON_THREAD},
    {"row_split: rank == world", row_split_bad, INVALID, ON_THREAD},
    {"bootstrap_create_threads: world 0", bootstrap_world0, INVALID, ON_THREAD},
    {"team_create: WEAVE_TIMEOUT_MS=abc", team_env_timeout, WEAVE_ERROR_ENV, ON_THREAD},
    {"team_create: WEAVE_HEAP_SIZE=12Q", team_env_heap, WEAVE_ERROR_ENV, ON_THREAD},
    {"team_create: WEAVE_DEBUG=LOUD", team_env_debug, WEAVE_ERROR_ENV, ON_THREAD},
    {"team_create: device 1000", team_bad_device, INVALID, ON_THREAD},
    {"team_create: config.struct_size 8", team_bad_config, INVALID, ON_THREAD},
};
/* Last: a library that launched on host memory could leave the context unusable (see the top). */
static const row_t host_table[] = {
    {"execute: host A and B", exec_host_ab, INVALID, ON_TEAM},
    {"execute: host C", exec_host_c, INVALID, ON_TEAM},
    {"execute: host bias", exec_host_bias, INVALID, ON_TEAM},
    {"weave_gemm: host A", gemm_host_a, INVALID, ON_THREAD},
    {"weave_gemm_ex: host C", gemm_ex_host_c, INVALID, ON_THREAD},
    {"weave_gemm_ex: fp8, host scale_a", gemm_ex_fp8_host_scale, INVALID, ON_THREAD},
};

/* ------------------------------------------------------------------------------------------------
 * the runner
 * ---------------------------------------------------------------------------------------------- */
static const char *code_name(weave_result_t rc) {
  static const char *n[] = {"SUCCESS", "INVALID_ARGUMENT", "NO_DEVICE",   "UNSUPPORTED_DEVICE", "CUDA", "OUT_OF_MEMORY",
                            "TIMEOUT", "MISMATCH",         "UNSUPPORTED", "BOOTSTRAP",          "ENV",  "INTERNAL"};
  return (unsigned)rc < sizeof(n) / sizeof(n[0]) ? n[rc] : "?";
}

/* One row on this rank; returns 0 when it passed here. */
static int run_row(ctx_t *c, const row_t *row) {
  harness_rank_t *hr = c->hr;
  int bad = 0;
  weave_barrier(hr->team);
  harness_poison(c->dC, c->c_bytes + C_SLACK, hr->stream);
  harness_sync(hr->stream);
  weave_team_rank(hr->team, NULL); /* the sentinel: a message the row's call cannot leave */
  char sentinel[1024];
  snprintf(sentinel, sizeof(sentinel), "%s", weave_get_last_error(NULL));

  weave_result_t rc = row->fn(c);

  char thread_msg[1024], team_msg[1024];
  snprintf(thread_msg, sizeof(thread_msg), "%s", weave_get_last_error(NULL));
  snprintf(team_msg, sizeof(team_msg), "%s", weave_get_last_error(hr->team));
  if (rc != SKIP_ROW) {
    if (rc != row->expect) {
      fail(c->sh, hr->rank, row->name, "returned %s, expected %s", code_name(rc), code_name(row->expect));
      bad = 1;
    }
    if (row->expect != WEAVE_SUCCESS) {
      if (!thread_msg[0] || !strcmp(thread_msg, sentinel)) {
        fail(c->sh, hr->rank, row->name, "weave_get_last_error(NULL) is empty or stale: '%s'", thread_msg);
        bad = 1;
      }
      if (row->where == ON_TEAM && (!team_msg[0] || !strcmp(team_msg, sentinel))) {
        fail(c->sh, hr->rank, row->name, "weave_get_last_error(team) is empty or stale: '%s'", team_msg);
        bad = 1;
      }
    }
  }
  weave_result_t src = weave_team_sync(hr->team, hr->stream);
  if (src != WEAVE_SUCCESS) {
    fail(c->sh, hr->rank, row->name, "weave_team_sync afterwards: %s: %s", code_name(src),
         weave_get_last_error(hr->team));
    bad = 1;
  }
  unsigned char *h = (unsigned char *)malloc(c->c_bytes + C_SLACK);
  if (cudaMemcpy(h, c->dC, c->c_bytes + C_SLACK, cudaMemcpyDeviceToHost) != cudaSuccess) {
    fail(c->sh, hr->rank, row->name, "reading C back: %s", cudaGetErrorString(cudaGetLastError()));
    bad = 1;
  } else {
    size_t i = 0;
    while (i < c->c_bytes + C_SLACK && h[i] == 0xFF) ++i;
    if (i < c->c_bytes + C_SLACK) {
      fail(c->sh, hr->rank, row->name, "the poisoned output was written (first changed byte: %zu of %zu)", i,
           c->c_bytes + C_SLACK);
      bad = 1;
    }
  }
  free(h);
  if (hr->rank == 0) {
    printf("  %-4s %-52s %s\n", bad ? "FAIL" : "ok", row->name, rc == SKIP_ROW ? "(rank 1 only)" : code_name(rc));
    pthread_mutex_lock(&c->sh->mu);
    c->sh->rows_run++;
    pthread_mutex_unlock(&c->sh->mu);
  }
  return bad;
}

/* Input set of rank r (every rank can regenerate every rank's). */
static void make_inputs(uint64_t seed, int r, void *A, void *B, void *bias) {
  weave_fill_random(WEAVE_BF16, A, (size_t)GOOD_M * GOOD_K, seed + 16 * (uint64_t)r + 1);
  weave_fill_random(WEAVE_BF16, B, (size_t)GOOD_K * GOOD_N, seed + 16 * (uint64_t)r + 2);
  weave_fill_random(WEAVE_BF16, bias, (size_t)GOOD_N, seed + 3);
}

/* The two good plans once more, every row of this rank checked against fp64. */
static void good_calls(ctx_t *c, const char *when) {
  harness_rank_t *hr = c->hr;
  const size_t e = 2;
  const void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  void *bias = malloc((size_t)GOOD_N * e);
  for (int r = 0; r < hr->world; ++r) {
    As[r] = malloc((size_t)GOOD_M * GOOD_K * e);
    Bs[r] = malloc((size_t)GOOD_K * GOOD_N * e);
    make_inputs(c->sh->seed, r, (void *)As[r], (void *)Bs[r], bias);
  }
  double *ref = (double *)malloc(sizeof(double) * (size_t)c->rows * GOOD_N);
  unsigned char *got = (unsigned char *)malloc(c->c_bytes);
  double atol, rtol;
  weave_tolerance(WEAVE_BF16, GOOD_K * hr->world, &atol, &rtol);
  for (int with_bias = 0; with_bias < 2; ++with_bias) {
    char name[96];
    snprintf(name, sizeof(name), "good %s plan, %s", with_bias ? "bulk +bias" : "fused", when);
    harness_poison(c->dC, c->c_bytes, hr->stream);
    weave_result_t rc = weave_gemm_rs_execute(with_bias ? c->plan_bias : c->plan, c->dA, c->dB,
                                              with_bias ? c->dbias : NULL, c->dC, hr->stream);
    if (rc == WEAVE_SUCCESS) rc = weave_team_sync(hr->team, hr->stream);
    if (rc != WEAVE_SUCCESS) {
      fail(c->sh, hr->rank, name, "%s: %s", code_name(rc), weave_get_last_error(hr->team));
      continue;
    }
    weave_ref_gemm_rs(GOOD_M, GOOD_N, GOOD_K, hr->world, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0, As, Bs,
                      with_bias ? bias : NULL, c->row_begin, c->rows, ref);
    harness_download(got, c->dC, c->c_bytes);
    weave_check_t chk;
    weave_check_result(WEAVE_BF16, got, ref, (size_t)c->rows * GOOD_N, atol, rtol, &chk);
    if (chk.wrong) {
      fail(c->sh, hr->rank, name, "%zu of %zu wrong (first at %zu)", chk.wrong, (size_t)c->rows * GOOD_N,
           chk.first_bad);
    } else if (hr->rank == 0) {
      printf("  ok   %-52s %d x %d rows checked\n", name, c->rows, GOOD_N);
    }
  }
  free(got);
  free(ref);
  free(bias);
  for (int r = 0; r < hr->world; ++r) {
    free((void *)As[r]);
    free((void *)Bs[r]);
  }
}

static int rank_fn(harness_rank_t *hr) {
  shared_t *sh = (shared_t *)hr->user;
  ctx_t c;
  memset(&c, 0, sizeof(c));
  c.hr = hr;
  c.sh = sh;
  const size_t e = 2;
  weave_row_split(GOOD_M, hr->world, hr->rank, &c.row_begin, &c.rows);
  c.c_bytes = (size_t)c.rows * GOOD_N * e;
  c.hA = malloc((size_t)GOOD_M * GOOD_K * e);
  c.hB = malloc((size_t)GOOD_K * GOOD_N * e);
  c.hbias = malloc((size_t)GOOD_N * e);
  make_inputs(sh->seed, hr->rank, c.hA, c.hB, c.hbias);
  c.dA = harness_dev_alloc((size_t)GOOD_M * GOOD_K * e);
  c.dB = harness_dev_alloc((size_t)GOOD_K * GOOD_N * e);
  c.dbias = harness_dev_alloc((size_t)GOOD_N * e);
  c.dC = harness_dev_alloc(c.c_bytes + C_SLACK);
  c.dev_block = harness_dev_alloc(4096);
  harness_upload(c.dA, c.hA, (size_t)GOOD_M * GOOD_K * e);
  harness_upload(c.dB, c.hB, (size_t)GOOD_K * GOOD_N * e);
  harness_upload(c.dbias, c.hbias, (size_t)GOOD_N * e);

  weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
  d.strategy = WEAVE_STRATEGY_FUSED;
  weave_result_t rc = weave_gemm_rs_plan_create(hr->team, GOOD_M, GOOD_N, GOOD_K, &d, &c.plan);
  d.strategy = WEAVE_STRATEGY_BULK;
  d.has_bias = 1;
  if (rc == WEAVE_SUCCESS) rc = weave_gemm_rs_plan_create(hr->team, GOOD_M, GOOD_N, GOOD_K, &d, &c.plan_bias);
  if (rc == WEAVE_SUCCESS) rc = weave_malloc(hr->team, 4 * WEAVE_HEAP_ALIGNMENT, &c.heap_block);
  if (rc != WEAVE_SUCCESS) {
    fail(sh, hr->rank, "setup", "%s: %s", code_name(rc), weave_get_last_error(hr->team));
    return 1; /* collective calls: every rank got the error */
  }

  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i) run_row(&c, &table[i]);
  good_calls(&c, "after the table");

  int pageable = 0;
  cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, hr->device);
  int host_ok = 1;
  if (pageable) {
    if (hr->rank == 0)
      printf("  skip host-pointer rows: device %d reads pageable host memory (HMM/ATS): not bad input here\n",
             hr->device);
  } else {
    /* A row that failed on any rank may have lost the context: all stop before it takes every
     * other check with it. */
    for (size_t i = 0; i < sizeof(host_table) / sizeof(host_table[0]) && host_ok; ++i) {
      int mine = run_row(&c, &host_table[i]), all[WEAVE_MAX_WORLD];
      if (harness_allgather(hr, &mine, all, sizeof(int)) != 0) all[0] = 1;
      for (int r = 0; r < hr->world; ++r) host_ok &= !all[r];
    }
    if (host_ok) good_calls(&c, "after host pointers");
  }

  weave_free(hr->team, c.heap_block);
  weave_gemm_rs_plan_destroy(c.plan_bias);
  weave_gemm_rs_plan_destroy(c.plan);
  harness_dev_free(c.dA);
  harness_dev_free(c.dB);
  harness_dev_free(c.dbias);
  harness_dev_free(c.dC);
  harness_dev_free(c.dev_block);
  free(c.hA);
  free(c.hB);
  free(c.hbias);
  return 0;
}

int main(int argc, char **argv) {
  (void)argv;
  if (argc > 1) {
    fprintf(stderr, "usage: gpu_bad_input_test (no arguments)\n");
    return 2;
  }
  if (harness_device_count() == 0) {
    printf("gpu_bad_input_test: no CUDA device: skipped\n");
    return HARNESS_SKIP;
  }
  shared_t sh;
  memset(&sh, 0, sizeof(sh));
  pthread_mutex_init(&sh.mu, NULL);
  sh.seed = harness_seed();
  int devices[WEAVE_MAX_WORLD];
  const int ndev = harness_device_count();
  for (int r = 0; r < WORLD; ++r) devices[r] = r % ndev;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = HEAP;
  int rc = harness_run(WORLD, devices, &cfg, rank_fn, &sh);
  if (rc == HARNESS_SKIP) return HARNESS_SKIP;
  const int bad = rc != 0 || sh.failures != 0;
  if (harness_launched_rank() == 0)
    printf("gpu_bad_input_test: %d rows (%zu bad inputs + %zu host-pointer), %d failures: %s\n", sh.rows_run,
           sizeof(table) / sizeof(table[0]), sizeof(host_table) / sizeof(host_table[0]), sh.failures,
           bad ? "FAILED" : "PASSED");
  return bad ? 1 : 0;
}
