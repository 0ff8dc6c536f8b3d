/* CPU test of the public API's argument handling (it links the library and the
 * CUDA runtime, but runs without a GPU). Every call given NULL / out-of-range arguments returns
 * WEAVE_ERROR_INVALID_ARGUMENT with a message naming the argument; weave_team_create on a machine
 * without a GPU fails cleanly with WEAVE_ERROR_NO_DEVICE.
 *
 * The team-argument checks behind a valid team (weave_team_rank(team, NULL), weave_malloc sizes,
 * weave_ptr/weave_free on foreign pointers, ...) are reached through a host-only team built here from
 * internal.h: a one-rank threads bootstrap and a heap in host memory. Those calls touch no device
 * memory (weave_free's cudaDeviceSynchronize simply fails without a GPU and is ignored). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gemm/hopper/gemm_hopper.h"
#include "runtime/internal.h"

static const char *last(void) { return weave_get_last_error(NULL); }

/* rc must be INVALID_ARGUMENT and the thread's last error must contain every needle. */
#define EXPECT_INVALID(call, ...)                                                                                  \
  do {                                                                                                             \
    weave_result_t rc_ = (call);                                                                                   \
    const char *needles_[] = {__VA_ARGS__};                                                                        \
    CHECK_MSG(rc_ == WEAVE_ERROR_INVALID_ARGUMENT, "%s -> %d (%s)", #call, (int)rc_, last());                      \
    for (size_t i_ = 0; i_ < sizeof(needles_) / sizeof(needles_[0]); ++i_)                                         \
      CHECK_MSG(strstr(last(), needles_[i_]) != NULL, "%s: message '%s' lacks '%s'", #call, last(), needles_[i_]); \
  } while (0)

static void test_null_team_calls(void) {
  int i = 0;
  void *p = NULL;
  weave_device_info_t info;
  weave_device_team_t view;
  void *const *table = NULL;
  const weave_gemm_rs_desc_t desc = WEAVE_GEMM_RS_DESC_INIT;
  weave_gemm_rs_plan_t plan = NULL;
  weave_gemm_rs_info_t pinfo;

  EXPECT_INVALID(weave_bootstrap_create_threads(1, NULL), "bootstrap");
  EXPECT_INVALID(weave_bootstrap_create_threads(0, (weave_bootstrap_t **)&p), "world");
  EXPECT_INVALID(weave_bootstrap_create_threads(WEAVE_MAX_WORLD + 1, (weave_bootstrap_t **)&p), "world");
  EXPECT_INVALID(weave_bootstrap_destroy(NULL), "bootstrap");
  EXPECT_INVALID(weave_team_destroy(NULL), "weave_team_destroy", "team");
  EXPECT_INVALID(weave_team_rank(NULL, &i), "weave_team_rank", "team");
  EXPECT_INVALID(weave_team_world(NULL, &i), "weave_team_world", "team");
  EXPECT_INVALID(weave_team_device_info(NULL, &info), "weave_team_device_info", "team");
  EXPECT_INVALID(weave_barrier(NULL), "weave_barrier", "team");
  EXPECT_INVALID(weave_team_sync(NULL, NULL), "weave_team_sync", "team");
  EXPECT_INVALID(weave_team_abort(NULL), "weave_team_abort", "team");
  EXPECT_INVALID(weave_malloc(NULL, 64, &p), "weave_malloc", "team");
  EXPECT_INVALID(weave_free(NULL, p), "weave_free", "team");
  EXPECT_INVALID(weave_ptr(NULL, p, 0, &p), "weave_ptr", "team");
  EXPECT_INVALID(weave_heap_bases(NULL, &table), "weave_heap_bases", "team");
  EXPECT_INVALID(weave_team_device_view(NULL, &view), "weave_team_device_view", "team");
  EXPECT_INVALID(weave_gemm_rs_plan_create(NULL, 64, 64, 64, &desc, &plan), "weave_gemm_rs_plan_create", "team");
  CHECK(plan == NULL);
  EXPECT_INVALID(weave_gemm_rs_execute(NULL, &i, &i, NULL, &i, NULL), "weave_gemm_rs_execute", "plan");
  EXPECT_INVALID(weave_gemm_rs_execute_scaled(NULL, &i, &i, NULL, NULL, NULL, &i, NULL), "weave_gemm_rs_execute_scaled",
                 "plan");
  EXPECT_INVALID(weave_gemm_rs_plan_info(NULL, &pinfo), "weave_gemm_rs_plan_info", "plan");
  EXPECT_INVALID(weave_gemm_rs_plan_destroy(NULL), "weave_gemm_rs_plan_destroy", "plan");
  size_t n = 0;
  EXPECT_INVALID(weave_gemm_rs_trace_fetch(NULL, NULL, &i, 1, &n), "weave_gemm_rs_trace_fetch", "plan");
}

static void test_row_split(void) {
  int b = -7, r = -7;
  EXPECT_INVALID(weave_row_split(-1, 2, 0, &b, &r), "weave_row_split", "M -1");
  EXPECT_INVALID(weave_row_split(10, 0, 0, &b, &r), "weave_row_split", "world 0");
  EXPECT_INVALID(weave_row_split(10, -3, 0, &b, &r), "weave_row_split", "world -3");
  EXPECT_INVALID(weave_row_split(10, 4, -1, &b, &r), "weave_row_split", "rank -1");
  EXPECT_INVALID(weave_row_split(10, 4, 4, &b, &r), "weave_row_split", "rank 4");
  EXPECT_INVALID(weave_row_split(10, 4, 0, NULL, &r), "weave_row_split");
  EXPECT_INVALID(weave_row_split(10, 4, 0, &b, NULL), "weave_row_split");
  CHECK(b == -7 && r == -7); /* outputs untouched on failure */
  CHECK(weave_row_split(10, 4, 1, &b, &r) == WEAVE_SUCCESS && b == 3 && r == 3);
  CHECK(weave_row_split(10, 4, 3, &b, &r) == WEAVE_SUCCESS && b == 8 && r == 2);
  CHECK(weave_row_split(0, 4, 3, &b, &r) == WEAVE_SUCCESS && b == 0 && r == 0);
  /* The public split agrees with the schedule's on many shapes (first M % world ranks one more). */
  int bad = 0;
  for (int M = 0; M < 300; ++M)
    for (int w = 1; w <= 9; ++w) {
      int next = 0;
      for (int k = 0; k < w; ++k) {
        if (weave_row_split(M, w, k, &b, &r) != WEAVE_SUCCESS || b != next || r != M / w + (k < M % w)) bad++;
        next = b + r;
      }
      if (next != M) bad++;
    }
  CHECK_MSG(bad == 0, "%d wrong row splits", bad);
}

static void test_gemm_args(int have_device) {
  float buf[64] = {0};
  void *A = buf, *B = buf + 16, *C = buf + 32;
  EXPECT_INVALID(weave_gemm(0, 8, 8, WEAVE_FP32, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL), "weave_gemm", "M 0");
  EXPECT_INVALID(weave_gemm(8, -1, 8, WEAVE_FP32, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL), "weave_gemm",
                 "N -1");
  EXPECT_INVALID(weave_gemm(8, 8, 0, WEAVE_FP32, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL), "weave_gemm", "K 0");
  EXPECT_INVALID(weave_gemm(8, 8, 8, (weave_dtype_t)3, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL), "weave_gemm",
                 "dtype 3");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, (weave_layout_t)2, 1.0f, A, B, NULL, C, 0, NULL), "weave_gemm",
                 "b_layout 2");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, NULL, B, NULL, C, 0, NULL), "weave_gemm",
                 "non-NULL");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, A, NULL, NULL, C, 0, NULL), "weave_gemm",
                 "non-NULL");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, NULL, 0, NULL), "weave_gemm",
                 "non-NULL");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, NAN, A, B, NULL, C, 0, NULL), "weave_gemm", "alpha");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, INFINITY, A, B, NULL, C, 0, NULL), "weave_gemm",
                 "alpha");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, -1, NULL), "weave_gemm",
                 "num_blocks");
  /* the plan's size limit (tile counts are ints): refused before anything looks at the pointers */
  EXPECT_INVALID(weave_gemm(1 << 30, 1 << 30, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL),
                 "weave_gemm", "too large");
  /* Misaligned element pointers. */
  char *cb = (char *)buf;
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_FP32, WEAVE_LAYOUT_ROW, 1.0f, cb + 2, B, NULL, C, 0, NULL), "weave_gemm",
                 "aligned");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_BF16, WEAVE_LAYOUT_ROW, 1.0f, A, cb + 1, NULL, C, 0, NULL), "weave_gemm",
                 "aligned");
  EXPECT_INVALID(weave_gemm(8, 8, 8, WEAVE_FP16, WEAVE_LAYOUT_COL, 1.0f, A, B, cb + 3, C, 0, NULL), "weave_gemm",
                 "aligned");
  /* weave_gemm_ex: the versioned struct, fp8's rules, scales */
  const weave_gemm_args_t init = WEAVE_GEMM_ARGS_INIT;
  weave_gemm_args_t g;
  static _Alignas(16) unsigned char f8[4096];
  static float scales[64];
  EXPECT_INVALID(weave_gemm_ex(NULL, NULL), "weave_gemm_ex", "NULL");
  g = init;
  g.struct_size = 8;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "struct_size");
#define FP8_ARGS(g)                \
  do {                             \
    g = init;                      \
    g.M = 32;                      \
    g.N = 32;                      \
    g.K = 32;                      \
    g.dtype = WEAVE_FP8_E4M3;      \
    g.b_layout = WEAVE_LAYOUT_COL; \
    g.A = f8;                      \
    g.B = f8 + 1024;               \
    g.C = f8 + 2048;               \
  } while (0)
  FP8_ARGS(g);
  g.M = 0;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "M 0");
  FP8_ARGS(g);
  g.M = 1 << 30;
  g.N = 1 << 30;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "too large");
  FP8_ARGS(g);
  g.N = 1 << 28;
  g.K = 1 << 28;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "too large");
  FP8_ARGS(g);
  g.b_layout = WEAVE_LAYOUT_ROW;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "WEAVE_LAYOUT_COL");
  FP8_ARGS(g);
  g.K = 40;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "multiple of 16", "K");
  FP8_ARGS(g);
  g.out_dtype = WEAVE_FP32;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "bf16 or fp16");
  FP8_ARGS(g);
  g.scale_mode = WEAVE_SCALE_TENSOR;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "scale_a");
  FP8_ARGS(g);
  g.scale_mode = WEAVE_SCALE_ROW;
  g.scale_a = scales;
  g.scale_b = (const float *)((char *)scales + 2);
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "4-byte aligned");
  FP8_ARGS(g);
  g.scale_a = scales;
  g.scale_b = scales;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "scale_mode NONE");
  FP8_ARGS(g);
  g.A = f8 + 8;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "16-byte aligned");
  FP8_ARGS(g);
  g.C = f8 + 2049;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "aligned");
  FP8_ARGS(g);
  g.scale_mode = (weave_scale_mode_t)7;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "scale_mode 7");
  FP8_ARGS(g);
  g.fp8_accum = (weave_fp8_accum_t)-1;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "fp8_accum -1");
  g = init;
  g.M = 8;
  g.N = 8;
  g.K = 8;
  g.A = A;
  g.B = B;
  g.C = C;
  g.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "fp8 inputs only");
  g = init;
  g.M = 8;
  g.N = 8;
  g.K = 8;
  g.A = A;
  g.B = B;
  g.C = C;
  g.scale_mode = WEAVE_SCALE_TENSOR;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "fp8 inputs only");
  g = init;
  g.M = 8;
  g.N = 8;
  g.K = 8;
  g.A = A;
  g.B = B;
  g.C = C;
  g.dtype = WEAVE_FP16;
  g.out_dtype = WEAVE_BF16;
  EXPECT_INVALID(weave_gemm_ex(&g, NULL), "weave_gemm_ex", "only fp8");
#undef FP8_ARGS
  if (!have_device) {
    weave_gemm_args_t ok = init;
    ok.M = 32;
    ok.N = 32;
    ok.K = 32;
    ok.dtype = WEAVE_FP8_E4M3;
    ok.b_layout = WEAVE_LAYOUT_COL;
    ok.A = f8;
    ok.B = f8 + 1024;
    ok.C = f8 + 2048;
    ok.scale_mode = WEAVE_SCALE_ROW;
    ok.scale_a = scales;
    ok.scale_b = scales;
    weave_result_t rc = weave_gemm_ex(&ok, NULL);
    CHECK_MSG(rc == WEAVE_ERROR_NO_DEVICE, "weave_gemm_ex without a GPU: %d (%s)", (int)rc, last());
  }
  if (!have_device) {
    /* Good arguments without a GPU: a clean NO_DEVICE, not a crash. */
    weave_result_t rc = weave_gemm(8, 8, 8, WEAVE_FP32, WEAVE_LAYOUT_ROW, 1.0f, A, B, NULL, C, 0, NULL);
    CHECK_MSG(rc == WEAVE_ERROR_NO_DEVICE, "weave_gemm without a GPU: %d (%s)", (int)rc, last());
    CHECK(strstr(last(), "weave_gemm") != NULL);
  }
}

/* The Hopper GEMM's host checks (tensor-map encoding is refused before any driver call); `call`
 * writes its message into msg. */
#define EXPECT_HGEMM_INVALID(call, needle)                                                     \
  do {                                                                                         \
    msg[0] = '\0';                                                                             \
    int rc_ = (call);                                                                          \
    CHECK_MSG(rc_ == WEAVE_ERROR_INVALID_ARGUMENT, "%s -> %d (%s)", #call, rc_, msg);          \
    CHECK_MSG(strstr(msg, needle) != NULL, "%s: message '%s' lacks '%s'", #call, msg, needle); \
  } while (0)

static void test_hopper_args(void) {
  static _Alignas(16) unsigned char mem[4096];
  CUtensorMap map;
  weave_hgemm_params_t hp;
  char msg[256];
  void *base = mem;
  EXPECT_HGEMM_INVALID(weave_hgemm_encode_store_map(NULL, WEAVE_BF16, base, 64, 64, 128, msg, sizeof msg), "store map");
  EXPECT_HGEMM_INVALID(weave_hgemm_encode_store_map(&map, (weave_dtype_t)3, base, 64, 64, 128, msg, sizeof msg),
                       "bf16/fp16/fp32");
  EXPECT_HGEMM_INVALID(weave_hgemm_encode_store_map(&map, WEAVE_BF16, mem + 8, 64, 64, 128, msg, sizeof msg),
                       "16-byte aligned");
  EXPECT_HGEMM_INVALID(weave_hgemm_encode_store_map(&map, WEAVE_FP32, base, 64, 64, 100, msg, sizeof msg),
                       "16-byte aligned");
  EXPECT_HGEMM_INVALID(weave_hgemm_encode_store_map(&map, WEAVE_FP16, base, 64, 0, 128, msg, sizeof msg), "non-empty");
  /* make_params: shape, dtype, alignment of A, rows of A, rows of a ROW B */
  static const struct {
    int M, N, K, dtype, layout, a_off;
    const char *needle;
  } mp[] = {{0, 256, 64, WEAVE_BF16, WEAVE_LAYOUT_ROW, 0, "positive"},
            {128, 256, 64, WEAVE_FP32, WEAVE_LAYOUT_ROW, 0, "dtype"},
            {128, 256, 64, WEAVE_BF16, WEAVE_LAYOUT_COL, 2, "16-byte aligned"},
            {128, 256, 60, WEAVE_BF16, WEAVE_LAYOUT_COL, 0, "rows of A"},
            {128, 260, 64, WEAVE_FP16, WEAVE_LAYOUT_ROW, 0, "rows of B"},
            {128, 256, 64, WEAVE_FP8_E4M3, WEAVE_LAYOUT_ROW, 0, "WEAVE_LAYOUT_COL"},
            {128, 256, 72, WEAVE_FP8_E4M3, WEAVE_LAYOUT_COL, 0, "multiple of 16"}};
  for (size_t i = 0; i < sizeof mp / sizeof mp[0]; ++i)
    EXPECT_HGEMM_INVALID(
        weave_hgemm_make_params(mp[i].M, mp[i].N, mp[i].K, (weave_dtype_t)mp[i].dtype, (weave_layout_t)mp[i].layout,
                                mem + mp[i].a_off, base, &hp, msg, sizeof msg),
        mp[i].needle);
}

static void test_print_env(void) {
  FILE *f = tmpfile();
  CHECK(f != NULL);
  if (!f) return;
  weave_print_env(f);
  long n = ftell(f);
  char text[4096] = {0};
  rewind(f);
  size_t got = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  CHECK(n > 0 && got == (size_t)n);
  CHECK(strstr(text, "WEAVE_HEAP_SIZE") != NULL && strstr(text, "WEAVE_TIMEOUT_MS") != NULL);
}

/* Returns 1 when a team could be created (a GPU is present). */
static int test_team_create(void) {
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(1, &bs) == WEAVE_SUCCESS);
  if (!bs) return 0;
  weave_team_t team = NULL;
  weave_config_t cfg = WEAVE_CONFIG_INIT;

  EXPECT_INVALID(weave_team_create(bs, 0, 0, NULL, NULL), "weave_team_create", "team");
  EXPECT_INVALID(weave_team_create(NULL, 0, 0, NULL, &team), "weave_team_create", "bootstrap");
  EXPECT_INVALID(weave_team_create_from_nccl(NULL, 0, NULL, NULL, &team), "weave_team_create_from_nccl", "nccl_comm");
  EXPECT_INVALID(weave_team_create_from_nccl(&team, 0, NULL, NULL, NULL), "weave_team_create_from_nccl", "team");
  weave_team_t sub = NULL;
  EXPECT_INVALID(weave_team_split(NULL, 0, 0, NULL, &sub), "weave_team_split", "team");
  EXPECT_INVALID(weave_team_create(bs, -1, 0, NULL, &team), "weave_team_create", "rank -1");
  EXPECT_INVALID(weave_team_create(bs, 1, 0, NULL, &team), "weave_team_create", "rank 1");
  EXPECT_INVALID(weave_team_create(bs, 0, -1, NULL, &team), "weave_team_create", "device -1");
  cfg.struct_size = sizeof(cfg) - 1;
  EXPECT_INVALID(weave_team_create(bs, 0, 0, &cfg, &team), "weave_team_create", "config", "struct_size");
  cfg.struct_size = 0;
  EXPECT_INVALID(weave_team_create(bs, 0, 0, &cfg, &team), "weave_team_create", "config");
  cfg = (weave_config_t)WEAVE_CONFIG_INIT;
  cfg.version = 200; /* another major version */
  EXPECT_INVALID(weave_team_create(bs, 0, 0, &cfg, &team), "weave_team_create", "version");
  cfg = (weave_config_t)WEAVE_CONFIG_INIT;
  cfg.timeout_ms = -1;
  EXPECT_INVALID(weave_team_create(bs, 0, 0, &cfg, &team), "weave_team_create", "timeout_ms");
  CHECK(team == NULL);

  /* A bad environment variable is reported before anything else happens. */
  setenv("WEAVE_HEAP_SIZE", "lots", 1);
  weave_result_t rc = weave_team_create(bs, 0, 0, NULL, &team);
  CHECK_MSG(rc == WEAVE_ERROR_ENV, "bad WEAVE_HEAP_SIZE: %d", (int)rc);
  CHECK(strstr(last(), "WEAVE_HEAP_SIZE") != NULL);
  unsetenv("WEAVE_HEAP_SIZE");
  CHECK(team == NULL);

  /* The real thing: without a GPU a clear NO_DEVICE; with one, a team. */
  cfg = (weave_config_t)WEAVE_CONFIG_INIT;
  cfg.heap_size = 4 << 20;
  rc = weave_team_create(bs, 0, 0, &cfg, &team);
  int have_device = 0;
  if (rc == WEAVE_SUCCESS) {
    have_device = 1;
    CHECK(team != NULL);
    int r = -1, w = -1;
    CHECK(weave_team_rank(team, &r) == WEAVE_SUCCESS && r == 0);
    CHECK(weave_team_world(team, &w) == WEAVE_SUCCESS && w == 1);
    CHECK(weave_team_destroy(team) == WEAVE_SUCCESS);
  } else {
    CHECK_MSG(rc == WEAVE_ERROR_NO_DEVICE || rc == WEAVE_ERROR_UNSUPPORTED_DEVICE, "team create: %d (%s)", (int)rc,
              last());
    CHECK_MSG(strlen(last()) > 10, "message '%s'", last());
    CHECK_MSG(strstr(last(), "device") != NULL || strstr(last(), "CUDA") != NULL, "message '%s'", last());
    CHECK(team == NULL);
    /* Again: the failure left nothing behind that breaks a second attempt. */
    CHECK(weave_team_create(bs, 0, 0, NULL, &team) == rc && team == NULL);
  }
  CHECK(weave_bootstrap_destroy(bs) == WEAVE_SUCCESS);
  return have_device;
}

/* A team whose heap lives in host memory: enough for the host-side paths of team.c. */
typedef struct {
  struct weave_team team;
  void *mem;
} host_team_t;

static int host_team_init(host_team_t *h, size_t heap_size) {
  memset(h, 0, sizeof(*h));
  if (weave_bootstrap_create_threads(1, &h->team.bootstrap) != WEAVE_SUCCESS) return -1;
  h->mem = aligned_alloc(4096, heap_size);
  if (!h->mem) return -1;
  memset(h->mem, 0, WEAVE_HEAP_RESERVED); /* as team creation clears the header */
  h->team.rank = 0;
  h->team.world = 1;
  h->team.heap_size = heap_size;
  h->team.timeout_ms = 1000;
  h->team.heap_base = h->mem;
  h->team.peer_bases[0] = h->mem;
  h->team.info.ranks_on_device = 1;
  return weave_heap_init(&h->team.heap, heap_size, WEAVE_HEAP_RESERVED, WEAVE_HEAP_ALIGNMENT);
}

static void host_team_fini(host_team_t *h) {
  weave_heap_fini(&h->team.heap);
  weave_bootstrap_destroy(h->team.bootstrap);
  free(h->mem);
}

/* weave_team_abort on a host-heap team: the notice lands in the heap's header where a CUDA runtime
 * with a device can copy it (the copy engine writes the host heap like any peer's), else the call
 * says it could not tell the ranks; either way every call that communicates then fails with
 * WEAVE_ERROR_ABORTED naming this rank, queries still answer, and a second abort does nothing more
 * (or, where the first could not tell the ranks, tries again). The
 * stopped device waits and weave_team_sync's report of a peer's abort: gpu_gemm_rs. */
static void test_team_abort(void) {
  host_team_t ht;
  CHECK(host_team_init(&ht, 1 << 20) == 0);
  weave_team_t team = &ht.team;
  void *a = NULL;
  CHECK(weave_malloc(team, 64, &a) == WEAVE_SUCCESS);
  const weave_heap_header_t *head = (const weave_heap_header_t *)ht.mem;
  CHECK(head->aborted_by == 0);
  weave_result_t rc = weave_team_abort(team);
  if (rc == WEAVE_SUCCESS)
    CHECK_MSG(head->aborted_by == 1 && head->error.code == WEAVE_DEVICE_ABORTED,
              "the notice in the header: %u, code %u", head->aborted_by, head->error.code);
  else
    CHECK_MSG(rc == WEAVE_ERROR_CUDA && strstr(last(), "could not tell"), "abort without a device: %d (%s)", (int)rc,
              last());
#define EXPECT_ABORTED(call, fn)                                                                                   \
  do {                                                                                                             \
    weave_result_t rc_ = (call);                                                                                   \
    CHECK_MSG(rc_ == WEAVE_ERROR_ABORTED, "%s -> %d (%s)", #call, (int)rc_, last());                               \
    CHECK_MSG(strstr(last(), fn) && strstr(last(), "rank 0 aborted the team"), "%s: message '%s'", #call, last()); \
  } while (0)
  EXPECT_ABORTED(weave_barrier(team), "weave_barrier");
  void *p = (void *)0x1;
  EXPECT_ABORTED(weave_malloc(team, 64, &p), "weave_malloc");
  CHECK(p == (void *)0x1);
  EXPECT_ABORTED(weave_free(team, a), "weave_free");
  EXPECT_ABORTED(weave_team_sync(team, NULL), "weave_team_sync");
  const weave_gemm_rs_desc_t desc = WEAVE_GEMM_RS_DESC_INIT;
  weave_gemm_rs_plan_t plan = NULL;
  EXPECT_ABORTED(weave_gemm_rs_plan_create(team, 64, 64, 64, &desc, &plan), "weave_gemm_rs_plan_create");
  CHECK(plan == NULL);
#undef EXPECT_ABORTED
  int r = -1;
  CHECK(weave_team_rank(team, &r) == WEAVE_SUCCESS && r == 0);
  /* again: nothing more to do once every rank was told; else it tries again (and fails alike here) */
  CHECK(weave_team_abort(team) == rc);
  host_team_fini(&ht);
}

/* weave_team_agree over three host teams on one thread bootstrap: ranks 0 and 1 fail, each for its
 * own reason, rank 2 does not. All fail together; a rank that failed keeps its own code and message,
 * the other names the first rank that failed. */
typedef struct {
  weave_bootstrap_t *bs;
  int rank;
  weave_result_t rc;
  char msg[256];
} agree_rank_t;

static void *agree_rank(void *arg) {
  agree_rank_t *a = (agree_rank_t *)arg;
  struct weave_team t;
  memset(&t, 0, sizeof t);
  t.bootstrap = a->bs;
  t.rank = a->rank;
  t.world = 3;
  t.timeout_ms = 5000;
  weave_result_t local = WEAVE_SUCCESS;
  if (a->rank == 0) local = weave_fail(&t, WEAVE_ERROR_INVALID_ARGUMENT, "rank 0's own reason");
  if (a->rank == 1) local = weave_fail(&t, WEAVE_ERROR_UNSUPPORTED, "rank 1's own reason");
  a->rc = weave_team_agree(&t, local);
  snprintf(a->msg, sizeof a->msg, "%s", weave_get_last_error(&t));
  return NULL;
}

static void test_team_agree(void) {
  weave_bootstrap_t *bs = NULL;
  CHECK(weave_bootstrap_create_threads(3, &bs) == WEAVE_SUCCESS);
  if (!bs) return;
  agree_rank_t r[3];
  pthread_t th[3];
  for (int i = 0; i < 3; ++i) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].bs = bs;
    r[i].rank = i;
    CHECK(pthread_create(&th[i], NULL, agree_rank, &r[i]) == 0);
  }
  for (int i = 0; i < 3; ++i) pthread_join(th[i], NULL);
  CHECK_MSG(r[0].rc == WEAVE_ERROR_INVALID_ARGUMENT && strstr(r[0].msg, "rank 0's own reason"), "rank 0: %d '%s'",
            (int)r[0].rc, r[0].msg);
  CHECK_MSG(r[1].rc == WEAVE_ERROR_UNSUPPORTED && strstr(r[1].msg, "rank 1's own reason"), "rank 1: %d '%s'",
            (int)r[1].rc, r[1].msg);
  CHECK_MSG(r[2].rc == WEAVE_ERROR_INVALID_ARGUMENT && strstr(r[2].msg, "rank 0 failed this collective call"),
            "rank 2: %d '%s'", (int)r[2].rc, r[2].msg);
  weave_bootstrap_destroy(bs);
}

static void test_team_args(void) {
  host_team_t ht;
  const size_t heap = 1 << 20;
  CHECK(host_team_init(&ht, heap) == 0);
  weave_team_t team = &ht.team;
  char *base = (char *)ht.mem;

  int i = -1;
  EXPECT_INVALID(weave_team_rank(team, NULL), "weave_team_rank", "rank is NULL");
  CHECK(strstr(weave_get_last_error(team), "rank is NULL") != NULL); /* the team's copy too */
  EXPECT_INVALID(weave_team_world(team, NULL), "weave_team_world", "world is NULL");
  EXPECT_INVALID(weave_team_device_info(team, NULL), "weave_team_device_info", "info is NULL");
  EXPECT_INVALID(weave_heap_bases(team, NULL), "weave_heap_bases", "device_table");
  EXPECT_INVALID(weave_team_device_view(team, NULL), "weave_team_device_view", "view");
  CHECK(weave_team_rank(team, &i) == WEAVE_SUCCESS && i == 0);
  CHECK(weave_team_world(team, &i) == WEAVE_SUCCESS && i == 1);
  CHECK(weave_barrier(team) == WEAVE_SUCCESS);
  weave_device_team_t view;
  CHECK(weave_team_device_view(team, &view) == WEAVE_SUCCESS && view.heap_base == base && view.world == 1 &&
        view.timeout_ns == 1000ull * 1000000ull && view.parent_error == NULL);

  /* Heap. */
  void *p = (void *)0x1;
  EXPECT_INVALID(weave_malloc(team, 0, &p), "weave_malloc", "size is 0");
  EXPECT_INVALID(weave_malloc(team, 64, NULL), "weave_malloc", "ptr is NULL");
  CHECK(p == (void *)0x1);
  weave_result_t rc = weave_malloc(team, heap, &p); /* more than the heap minus its header */
  CHECK_MSG(rc == WEAVE_ERROR_OUT_OF_MEMORY, "malloc of the whole heap: %d", (int)rc);
  CHECK(strstr(last(), "WEAVE_HEAP_SIZE") != NULL);
  CHECK(p == (void *)0x1);
  void *a = NULL, *b = NULL;
  CHECK(weave_malloc(team, 1000, &a) == WEAVE_SUCCESS);
  CHECK(weave_malloc(team, 1, &b) == WEAVE_SUCCESS);
  CHECK(a == base + WEAVE_HEAP_RESERVED);
  CHECK((char *)b == (char *)a + 1024);
  CHECK(((uintptr_t)a - (uintptr_t)base) % WEAVE_HEAP_ALIGNMENT == 0);

  void *q = (void *)0x1;
  EXPECT_INVALID(weave_ptr(team, a, 0, NULL), "weave_ptr", "peer_ptr");
  EXPECT_INVALID(weave_ptr(team, a, 1, &q), "weave_ptr", "peer 1");
  EXPECT_INVALID(weave_ptr(team, a, -1, &q), "weave_ptr", "peer -1");
  EXPECT_INVALID(weave_ptr(team, NULL, 0, &q), "weave_ptr", "heap");
  EXPECT_INVALID(weave_ptr(team, base + heap, 0, &q), "weave_ptr", "heap");
  EXPECT_INVALID(weave_ptr(team, &i, 0, &q), "weave_ptr", "heap");
  CHECK(q == (void *)0x1);
  CHECK(weave_ptr(team, (char *)a + 17, 0, &q) == WEAVE_SUCCESS && q == (char *)a + 17);

  EXPECT_INVALID(weave_free(team, NULL), "weave_free", "not in");
  EXPECT_INVALID(weave_free(team, &i), "weave_free", "not in");
  EXPECT_INVALID(weave_free(team, base), "weave_free", "not in"); /* the reserved header */
  EXPECT_INVALID(weave_free(team, (char *)a + 256), "weave_free", "not a live allocation");
  CHECK(weave_free(team, a) == WEAVE_SUCCESS);
  EXPECT_INVALID(weave_free(team, a), "weave_free", "not a live allocation"); /* double free */
  CHECK(weave_free(team, b) == WEAVE_SUCCESS);
  CHECK(team->heap.in_use == 0);

  /* Plan creation rejects bad arguments before touching the device. */
  const weave_gemm_rs_desc_t init = WEAVE_GEMM_RS_DESC_INIT;
  weave_gemm_rs_desc_t d = init;
  weave_gemm_rs_plan_t plan = NULL;
  EXPECT_INVALID(weave_gemm_rs_plan_create(team, 64, 64, 64, &d, NULL), "weave_gemm_rs_plan_create", "plan");
  EXPECT_INVALID(weave_gemm_rs_plan_create(team, 64, 64, 64, NULL, &plan), "weave_gemm_rs_plan_create", "desc");
  EXPECT_INVALID(weave_gemm_rs_plan_create(team, 0, 64, 64, &d, &plan), "weave_gemm_rs_plan_create", "M 0");
  d.struct_size = 8;
  EXPECT_INVALID(weave_gemm_rs_plan_create(team, 64, 64, 64, &d, &plan), "weave_gemm_rs_plan_create", "struct_size");
  d = init;
  d.alpha = NAN;
  EXPECT_INVALID(weave_gemm_rs_plan_create(team, 64, 64, 64, &d, &plan), "weave_gemm_rs_plan_create", "alpha");
  CHECK(plan == NULL);
  CHECK(team->heap.in_use == 0); /* nothing allocated by the rejected plans */

  host_team_fini(&ht);
}

int main(void) {
  setenv("WEAVE_DEBUG", "NONE", 1); /* every rejected call logs a WARN line otherwise */
  test_null_team_calls();
  test_row_split();
  test_print_env();
  int have_device = test_team_create();
  test_gemm_args(have_device);
  test_hopper_args();
  test_team_args();
  test_team_abort();
  test_team_agree();
  return check_summary("test_api");
}
