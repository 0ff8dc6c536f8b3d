/* Multi-rank harness: see harness.h. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"
#include "check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

/* Ranks that share a GPU wait on each other's kernels, so every rank's kernel must be able to start
 * while the others spin: load all modules at start-up (a lazy load can wait behind a spinning
 * kernel) and give each rank's stream its own hardware queue. Both must be set before CUDA starts,
 * hence a constructor; a value the user set wins. */
static int under_launcher(void) {
  return getenv("WORLD_SIZE") || getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_NTASKS");
}

__attribute__((constructor)) static void harness_cuda_env(void) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  /* One rank a process (under a launcher, sharing a GPU through MPS) needs no extra queues, and 32 a
   * process exhausted MPS at 4 clients. */
  if (!under_launcher()) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

/* Under a launcher this process is one rank of a job: one bootstrap for the process's lifetime,
 * shared by every team the tests create. */
static weave_bootstrap_t *launch_bs;
static int launch_world, launch_rank;

static void launch_bs_destroy(void) {
  if (launch_bs) weave_bootstrap_destroy(launch_bs);
  launch_bs = NULL;
}

int harness_launched_world(void) {
  if (!under_launcher()) return 0;
  if (!launch_bs) {
    if (weave_bootstrap_create_env(&launch_bs) != WEAVE_SUCCESS ||
        weave_bootstrap_info(launch_bs, &launch_world, &launch_rank, NULL) != WEAVE_SUCCESS) {
      fprintf(stderr, "harness: launcher bootstrap: %s\n", weave_get_last_error(NULL));
      launch_bs = NULL;
      return -1;
    }
    atexit(launch_bs_destroy);
  }
  return launch_world;
}

weave_bootstrap_t *harness_launched_bootstrap(void) { return harness_launched_world() > 0 ? launch_bs : NULL; }

int harness_launched_rank(void) { return harness_launched_world() > 0 ? launch_rank : 0; }

int harness_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int harness_require_sm90(void) {
  struct cudaDeviceProp prop;
  if (harness_device_count() == 0) {
    printf("SKIP: no CUDA device\n");
    return HARNESS_SKIP;
  }
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    printf("SKIP: device is sm_%d%d, not sm_90\n", prop.major, prop.minor);
    return HARNESS_SKIP;
  }
  printf("# device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  return 0;
}

int harness_sm_count(int device) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

typedef struct {
  harness_rank_t r;
  weave_bootstrap_t *bs;
  const weave_config_t *config;
  harness_fn fn;
  int result;
} rank_thread_t;

/* The calling thread's rank stream while its harness_fn runs (NULL outside one): harness_upload and
 * harness_download copy on it. */
static _Thread_local cudaStream_t rank_stream;

static void *rank_main(void *arg) {
  rank_thread_t *t = (rank_thread_t *)arg;
  CUDA_CHECK(cudaSetDevice(t->r.device));
  weave_result_t rc = weave_team_create(t->bs, t->r.rank, t->r.device, t->config, &t->r.team);
  if (rc != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: weave_team_create: %s\n", t->r.rank, weave_get_last_error(NULL));
    t->result = rc == WEAVE_ERROR_NO_DEVICE ? HARNESS_SKIP : 1;
    return NULL;
  }
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  t->r.stream = (weave_stream_t)s;
  rank_stream = s;
  t->result = t->fn(&t->r);
  rank_stream = NULL;
  CUDA_CHECK(cudaStreamSynchronize(s));
  CUDA_CHECK(cudaStreamDestroy(s));
  if (weave_team_destroy(t->r.team) != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: weave_team_destroy: %s\n", t->r.rank, weave_get_last_error(NULL));
    if (!t->result) t->result = 1;
  }
  return NULL;
}

int harness_run(int world, const int *devices, const weave_config_t *config, harness_fn fn, void *user) {
  if (harness_device_count() == 0) return HARNESS_SKIP;
  int launched = harness_launched_world();
  if (launched < 0) return 1;
  if (launched) { /* this process runs its own rank, on this thread */
    if (world != launched) return HARNESS_SKIP;
    rank_thread_t t;
    memset(&t, 0, sizeof t);
    t.r.rank = launch_rank;
    t.r.world = world;
    t.r.device = devices ? devices[launch_rank] : 0;
    t.r.user = user;
    t.bs = launch_bs;
    t.config = config;
    t.fn = fn;
    rank_main(&t);
    return t.result;
  }
  weave_bootstrap_t *bs = NULL;
  if (weave_bootstrap_create_threads(world, &bs) != WEAVE_SUCCESS) {
    fprintf(stderr, "bootstrap: %s\n", weave_get_last_error(NULL));
    return 1;
  }
  rank_thread_t *t = (rank_thread_t *)calloc((size_t)world, sizeof(*t));
  pthread_t *th = (pthread_t *)calloc((size_t)world, sizeof(*th));
  for (int r = 0; r < world; ++r) {
    t[r].r.rank = r;
    t[r].r.world = world;
    t[r].r.device = devices ? devices[r] : 0;
    t[r].r.user = user;
    t[r].bs = bs;
    t[r].config = config;
    t[r].fn = fn;
    pthread_create(&th[r], NULL, rank_main, &t[r]);
  }
  int worst = 0;
  for (int r = 0; r < world; ++r) {
    pthread_join(th[r], NULL);
    if (t[r].result > worst) worst = t[r].result;
  }
  weave_bootstrap_destroy(bs);
  free(t);
  free(th);
  return worst;
}

int harness_time_sliced(void) {
  const char *v = getenv("WEAVE_LAUNCH_TIME_SLICED");
  return harness_launched_world() > 0 && v && !strcmp(v, "1");
}

int harness_allgather(harness_rank_t *r, const void *mine, void *all, size_t bytes) {
  void *buf = NULL;
  weave_result_t rc = weave_malloc(r->team, bytes ? bytes : 1, &buf);
  if (rc != WEAVE_SUCCESS) {
    fprintf(stderr, "rank %d: harness_allgather: %s\n", r->rank, weave_get_last_error(r->team));
    return 1;
  }
  CUDA_CHECK(cudaMemcpy(buf, mine, bytes, cudaMemcpyHostToDevice));
  rc = weave_barrier(r->team);
  for (int p = 0; p < r->world && rc == WEAVE_SUCCESS; ++p) {
    void *peer = NULL;
    rc = weave_ptr(r->team, buf, p, &peer);
    if (rc == WEAVE_SUCCESS) CUDA_CHECK(cudaMemcpy((char *)all + (size_t)p * bytes, peer, bytes, cudaMemcpyDefault));
  }
  /* Nobody frees (collective) before every rank has read every peer's copy. */
  weave_result_t rc2 = weave_barrier(r->team);
  if (rc == WEAVE_SUCCESS) rc = rc2;
  rc2 = weave_free(r->team, buf);
  if (rc == WEAVE_SUCCESS) rc = rc2;
  if (rc != WEAVE_SUCCESS) fprintf(stderr, "rank %d: harness_allgather: %s\n", r->rank, weave_get_last_error(r->team));
  return rc != WEAVE_SUCCESS;
}

void *harness_dev_alloc(size_t bytes) {
  void *p = NULL;
  CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}
void harness_dev_free(void *p) { CUDA_CHECK(cudaFree(p)); }
/* Inside a rank, on the rank's own stream: a copy on the legacy stream could share a hardware queue
 * with another rank's kernel that spins until this rank's next call, and wait behind it until that
 * kernel times out. Outside one, on the legacy stream. Either way the copy has landed on return
 * (a copy from pageable memory may return before its DMA has). */
static void copy_landed(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, rank_stream));
  CUDA_CHECK(cudaStreamSynchronize(rank_stream));
}
void harness_upload(void *dst, const void *src, size_t bytes) { copy_landed(dst, src, bytes, cudaMemcpyHostToDevice); }
void harness_download(void *dst, const void *src, size_t bytes) {
  copy_landed(dst, src, bytes, cudaMemcpyDeviceToHost);
}
void harness_poison(void *p, size_t bytes, weave_stream_t s) {
  CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, (cudaStream_t)s));
}
void harness_sync(weave_stream_t s) { CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s)); }

struct harness_timer {
  cudaEvent_t a, b;
};
harness_timer_t *harness_timer_create(void) {
  harness_timer_t *t = (harness_timer_t *)calloc(1, sizeof(*t));
  CUDA_CHECK(cudaEventCreate(&t->a));
  CUDA_CHECK(cudaEventCreate(&t->b));
  return t;
}
void harness_timer_start(harness_timer_t *t, weave_stream_t s) { CUDA_CHECK(cudaEventRecord(t->a, (cudaStream_t)s)); }
void harness_timer_stop(harness_timer_t *t, weave_stream_t s) { CUDA_CHECK(cudaEventRecord(t->b, (cudaStream_t)s)); }
float harness_timer_ms(harness_timer_t *t) {
  float ms = 0;
  CUDA_CHECK(cudaEventSynchronize(t->b));
  CUDA_CHECK(cudaEventElapsedTime(&ms, t->a, t->b));
  return ms;
}
void harness_timer_destroy(harness_timer_t *t) {
  cudaEventDestroy(t->a);
  cudaEventDestroy(t->b);
  free(t);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
double harness_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

double harness_median(double *v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void harness_shuffle(int *order, int n, unsigned *rng) {
  for (int j = 0; j < n; ++j) order[j] = j;
  for (int j = n - 1; j > 0; --j) { /* Fisher-Yates */
    *rng = *rng * 1664525u + 1013904223u;
    const int r = (int)((*rng >> 8) % (unsigned)(j + 1)), t = order[j];
    order[j] = order[r];
    order[r] = t;
  }
}

uint64_t harness_seed(void) {
  const char *s = getenv("WEAVE_TEST_SEED");
  if (s && *s) return strtoull(s, NULL, 0);
  if (under_launcher()) { /* every rank must draw the same inputs: a seed fresh per job, same per rank */
    const char *ids[] = {"MASTER_ADDR", "MASTER_PORT", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID"};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 5; ++i)
      for (const char *c = getenv(ids[i]) ? getenv(ids[i]) : "-"; *c; ++c)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
}

/* ------------------------------------------------------------------------------------------------
 * Full check of a rank's rows against cuBLASLt over the gathered K
 * ---------------------------------------------------------------------------------------------- */
#include "plan/lt.h"
#include "plan/plan_model.h"
#include "reference.h"

/* The handle is the library's cuBLASLt plan itself. */
harness_lt_t *harness_lt_create(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t layout,
                                char *msg, size_t msg_len) {
  weave_lt_t *lt = NULL;
  if (weave_lt_create(M, N, K, in, out, layout, 0, &lt, msg, msg_len) != WEAVE_SUCCESS) return NULL;
  return (harness_lt_t *)lt;
}
int harness_lt_run(harness_lt_t *lt, float alpha, const void *A, const void *B, void *C, weave_stream_t stream) {
  return weave_lt_run((weave_lt_t *)lt, alpha, A, B, C, stream) != WEAVE_SUCCESS;
}
void harness_lt_destroy(harness_lt_t *lt) { weave_lt_destroy((weave_lt_t *)lt); }
harness_lt_t *harness_lt_create_scaled(int M, int N, int K, weave_dtype_t in, weave_dtype_t out, weave_layout_t layout,
                                       weave_scale_mode_t scale_mode, weave_fp8_accum_t fp8_accum, char *msg,
                                       size_t msg_len) {
  weave_lt_t *lt = NULL;
  weave_lt_opts_t o = WEAVE_LT_OPTS_INIT;
  o.scale_mode = scale_mode;
  o.fast_accum = fp8_accum == WEAVE_FP8_ACCUM_FAST;
  if (weave_lt_create_ex(M, N, K, in, out, layout, &o, &lt, msg, msg_len) != WEAVE_SUCCESS) return NULL;
  return (harness_lt_t *)lt;
}
int harness_lt_run_scaled(harness_lt_t *lt, float alpha, const void *A, const void *B, const float *scale_a,
                          const float *scale_b, void *C, weave_stream_t stream) {
  return weave_lt_run_scaled((weave_lt_t *)lt, alpha, A, B, scale_a, scale_b, C, stream) != WEAVE_SUCCESS;
}

double *harness_ref_rows_lt(int N, int K, int world, weave_dtype_t t, weave_layout_t lay, float alpha,
                            const void *const *A, const void *const *B, const void *bias, int row_begin, int rows) {
  if (rows <= 0) return (double *)malloc(sizeof(double));
  const size_t e = weave_dtype_size(t), Kt = (size_t)K * world;
  /* A_cat[rows, Kt]: this rank's rows of every A_s side by side; B_cat: the B_s stacked along K
   * ([Kt, N] row-major for ROW, [N, Kt] for COL). */
  unsigned char *a = (unsigned char *)malloc((size_t)rows * Kt * e), *b = (unsigned char *)malloc(Kt * N * e);
  float *c = (float *)malloc(sizeof(float) * (size_t)rows * N);
  double *ref = (double *)malloc(sizeof(double) * (size_t)rows * N);
  int ok = 0;
  if (!a || !b || !c || !ref) goto out;
  for (int i = 0; i < rows; ++i)
    for (int s = 0; s < world; ++s)
      memcpy(a + ((size_t)i * Kt + (size_t)s * K) * e, (const unsigned char *)A[s] + (size_t)(row_begin + i) * K * e,
             (size_t)K * e);
  for (int s = 0; s < world; ++s) {
    if (lay == WEAVE_LAYOUT_ROW)
      memcpy(b + (size_t)s * K * N * e, B[s], (size_t)K * N * e);
    else
      for (int n = 0; n < N; ++n)
        memcpy(b + ((size_t)n * Kt + (size_t)s * K) * e, (const unsigned char *)B[s] + (size_t)n * K * e,
               (size_t)K * e);
  }
  char msg[256];
  harness_lt_t *lt = harness_lt_create(rows, N, (int)Kt, t, WEAVE_FP32, lay, msg, sizeof(msg));
  if (!lt) {
    fprintf(stderr, "harness: cuBLASLt reference: %s\n", msg);
    goto out;
  }
  void *dA = harness_dev_alloc((size_t)rows * Kt * e), *dB = harness_dev_alloc(Kt * N * e);
  void *dC = harness_dev_alloc(sizeof(float) * (size_t)rows * N);
  harness_upload(dA, a, (size_t)rows * Kt * e);
  harness_upload(dB, b, Kt * N * e);
  int rc = harness_lt_run(lt, alpha, dA, dB, dC, NULL);
  CUDA_CHECK(cudaDeviceSynchronize());
  harness_download(c, dC, sizeof(float) * (size_t)rows * N);
  harness_dev_free(dA);
  harness_dev_free(dB);
  harness_dev_free(dC);
  harness_lt_destroy(lt);
  if (rc) {
    fprintf(stderr, "harness: cuBLASLt reference run failed\n");
    goto out;
  }
  for (size_t i = 0; i < (size_t)rows * N; ++i) {
    double v = c[i];
    if (bias) v += weave_host_get(t, bias, i % (size_t)N);
    ref[i] = v;
  }
  ok = 1;
out:
  free(a);
  free(b);
  free(c);
  if (!ok) {
    free(ref);
    ref = NULL;
  }
  return ref;
}

void harness_pretend_nodes(int ranks_per_node) {
  if (ranks_per_node <= 0) return;
  char v[16];
  snprintf(v, sizeof(v), "%d", ranks_per_node);
  setenv("WEAVE_RANKS_PER_NODE", v, 1);
}
