/* CPU test of plan logic that needs no device: the plan argument checks (weave_gemm_rs_check_args in
 * src/plan/plan_create.c: it links the library, still without a GPU), the split cost
 * model, byte counts, the roofline, the tuning cache file, and what the Hopper GEMM's plan runs
 * (schedule, clusters, stream-K) with the default knobs. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "runtime/internal.h"
#include "plan/hier.h"
#include "plan/plan.h" /* and plan/lt.h */
#include "plan/plan_model.h"
#include "gemm/hopper/gemm_hopper.h"

/* ---- argument checks --------------------------------------------------------------------------- */
static void expect_bad(const char *what, int M, int N, int K, const weave_gemm_rs_desc_t *d, const char *needle) {
  weave_result_t rc = weave_gemm_rs_check_args(NULL, M, N, K, d);
  const char *msg = weave_get_last_error(NULL);
  CHECK_MSG(rc == WEAVE_ERROR_INVALID_ARGUMENT, "%s: rc %d", what, (int)rc);
  CHECK_MSG(strstr(msg, needle) != NULL, "%s: message '%s' does not mention '%s'", what, msg, needle);
  CHECK_MSG(strstr(msg, "weave_gemm_rs_plan_create") != NULL, "%s: message '%s' does not name the call", what, msg);
}

static void expect_good(const char *what, int M, int N, int K, const weave_gemm_rs_desc_t *d) {
  weave_result_t rc = weave_gemm_rs_check_args(NULL, M, N, K, d);
  CHECK_MSG(rc == WEAVE_SUCCESS, "%s: rc %d (%s)", what, (int)rc, weave_get_last_error(NULL));
}

static void test_check_args(void) {
  const weave_gemm_rs_desc_t init = WEAVE_GEMM_RS_DESC_INIT;
  weave_gemm_rs_desc_t d;

  expect_bad("NULL desc", 64, 64, 64, NULL, "desc is NULL");
  d = init;
  d.struct_size = sizeof(d) - 4;
  expect_bad("short struct_size", 64, 64, 64, &d, "struct_size");
  d = init;
  d.struct_size = 0;
  expect_bad("zero struct_size", 64, 64, 64, &d, "struct_size");
  d = init;
  d.struct_size = sizeof(d) + 8;
  expect_bad("long struct_size", 64, 64, 64, &d, "struct_size");
  d = init;
  expect_bad("M 0", 0, 64, 64, &d, ">= 1");
  expect_bad("N 0", 64, 0, 64, &d, ">= 1");
  expect_bad("K 0", 64, 64, 0, &d, ">= 1");
  expect_bad("M -8", -8, 64, 64, &d, ">= 1");
  expect_bad("N -1", 64, -1, 64, &d, ">= 1");
  expect_good("M < world: ranks that own no row", 3, 64, 64, &d);
  expect_good("M = 1 of world 64", 1, 64, 64, &d);
  expect_bad("huge", 1 << 30, 1 << 30, 1 << 30, &d, "too large");
  d = init;
  d.dtype = (weave_dtype_t)4;
  expect_bad("dtype 4", 64, 64, 64, &d, "dtype");
  d = init;
  d.dtype = WEAVE_DTYPE_AUTO;
  expect_bad("dtype AUTO", 64, 64, 64, &d, "dtype");
  /* fp8: B [N, K] only, K_local % 16, output bf16/fp16, scales for fp8 only */
  d = init;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_ROW;
  expect_bad("fp8 B ROW", 64, 64, 64, &d, "WEAVE_LAYOUT_COL");
  d = init;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_COL;
  expect_bad("fp8 K 72", 64, 64, 72, &d, "multiple of 16");
  expect_bad("fp8 K 8", 64, 64, 8, &d, "multiple of 16");
  d.out_dtype = WEAVE_FP32;
  expect_bad("fp8 out fp32", 64, 64, 64, &d, "bf16 or fp16");
  d.out_dtype = WEAVE_FP8_E4M3;
  expect_bad("fp8 out fp8", 64, 64, 64, &d, "bf16 or fp16");
  d = init;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_COL;
  d.scale_mode = (weave_scale_mode_t)3;
  expect_bad("scale mode 3", 64, 64, 64, &d, "scale_mode");
  d = init;
  d.scale_mode = WEAVE_SCALE_TENSOR;
  expect_bad("bf16 with scales", 64, 64, 64, &d, "fp8 inputs only");
  d = init;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_COL;
  d.fp8_accum = (weave_fp8_accum_t)2;
  expect_bad("fp8 accumulation 2", 64, 64, 64, &d, "fp8_accum 2");
  d = init;
  d.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  expect_bad("bf16 with fast accumulation", 64, 64, 64, &d, "fp8 inputs only");
  d = init;
  d.dtype = WEAVE_FP8_E4M3;
  d.b_layout = WEAVE_LAYOUT_COL;
  d.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  expect_good("fp8 fast accumulation", 64, 64, 64, &d);
  d = init;
  d.dtype = WEAVE_FP16;
  d.out_dtype = WEAVE_BF16;
  expect_bad("fp16 in, bf16 out", 64, 64, 64, &d, "only fp8");
  d = init;
  d.dtype = WEAVE_FP16;
  d.out_dtype = WEAVE_FP16;
  expect_good("fp16 out_dtype fp16", 64, 64, 64, &d);
  for (int o = WEAVE_DTYPE_AUTO; o <= WEAVE_FP16; ++o)
    for (int sm = WEAVE_SCALE_NONE; sm <= WEAVE_SCALE_ROW; ++sm)
      for (int s = WEAVE_STRATEGY_AUTO; s <= WEAVE_STRATEGY_BASELINE; ++s) {
        d = init;
        d.dtype = WEAVE_FP8_E4M3;
        d.b_layout = WEAVE_LAYOUT_COL;
        d.out_dtype = (weave_dtype_t)o;
        d.scale_mode = (weave_scale_mode_t)sm;
        d.strategy = (weave_strategy_t)s;
        d.fp32_slots = sm & 1;
        expect_good("fp8 out/scales/strategy", 1003, 1001, 304, &d);
      }
  /* a desc of weave 0.2 (struct_size without the 0.3 fields) still works: the new fields default */
  {
    weave_gemm_rs_desc_t old, got;
    memset(&old, 0x5a, sizeof old); /* whatever lies past the 0.2 fields must not be read */
    const weave_gemm_rs_desc_t i2 = WEAVE_GEMM_RS_DESC_INIT;
    memcpy(&old, &i2, WEAVE_GEMM_RS_DESC_SIZE_0_2 - 4); /* the 0.2 fields, not the padding */
    old.struct_size = WEAVE_GEMM_RS_DESC_SIZE_0_2;
    old.dtype = WEAVE_FP16;
    expect_good("0.2 desc", 64, 64, 64, &old);
    CHECK(weave_gemm_rs_desc_read(NULL, &old, &got) == WEAVE_SUCCESS && got.struct_size == sizeof(got) &&
          got.dtype == WEAVE_FP16 && got.out_dtype == WEAVE_DTYPE_AUTO && got.scale_mode == WEAVE_SCALE_NONE &&
          got.fp8_accum == WEAVE_FP8_ACCUM_FP32);
    CHECK(WEAVE_GEMM_RS_DESC_SIZE_0_2 == 56 || sizeof(size_t) != 8);
  }
  d = init;
  d.dtype = (weave_dtype_t)-1;
  expect_bad("dtype -1", 64, 64, 64, &d, "dtype");
  d = init;
  d.b_layout = (weave_layout_t)2;
  expect_bad("layout 2", 64, 64, 64, &d, "b_layout");
  d = init;
  d.strategy = (weave_strategy_t)4;
  expect_bad("strategy 4", 64, 64, 64, &d, "strategy");
  d = init;
  d.reduce = (weave_reduce_t)2;
  expect_bad("reduce 2", 64, 64, 64, &d, "reduce");
  d = init;
  d.fp32_slots = 2;
  expect_bad("fp32_slots 2", 64, 64, 64, &d, "fp32_slots");
  d = init;
  d.fp32_slots = -1;
  expect_bad("fp32_slots -1", 64, 64, 64, &d, "fp32_slots");
  d = init;
  d.tile_order = (weave_tile_order_t)2;
  expect_bad("tile order 2", 64, 64, 64, &d, "tile_order");
  d = init;
  d.alpha = NAN;
  expect_bad("alpha NaN", 64, 64, 64, &d, "alpha");
  d = init;
  d.alpha = INFINITY;
  expect_bad("alpha inf", 64, 64, 64, &d, "alpha");
  d = init;
  d.alpha = -INFINITY;
  expect_bad("alpha -inf", 64, 64, 64, &d, "alpha");
  d = init;
  d.has_bias = 2;
  expect_bad("has_bias 2", 64, 64, 64, &d, "has_bias");
  d = init;
  d.has_bias = -1;
  expect_bad("has_bias -1", 64, 64, 64, &d, "has_bias");
  d = init;
  d.gemm_blocks = -1;
  d.comm_blocks = 4;
  expect_bad("gemm_blocks -1", 64, 64, 64, &d, "gemm_blocks");
  d = init;
  d.gemm_blocks = 4;
  d.comm_blocks = -2;
  expect_bad("comm_blocks -2", 64, 64, 64, &d, "comm_blocks");
  d = init;
  d.gemm_blocks = 100;
  expect_bad("only gemm_blocks", 64, 64, 64, &d, "both");
  d = init;
  d.comm_blocks = 8;
  expect_bad("only comm_blocks", 64, 64, 64, &d, "both");

  /* Good ones. */
  d = init;
  expect_good("defaults", 64, 64, 64, &d);
  expect_good("1x1x1 world 1", 1, 1, 1, &d);
  expect_good("M == world", 8, 1, 1, &d);
  expect_good("M 64, world 64", 64, 100, 3, &d);
  expect_good("odd shape", 1001, 777, 129, &d);
  expect_good("large but allowed", 65536, 65536, 8192, &d);
  for (int t = WEAVE_BF16; t <= WEAVE_FP32; ++t)
    for (int slot = 0; slot < 2; ++slot) {
      d = init;
      d.dtype = (weave_dtype_t)t;
      d.fp32_slots = slot;
      expect_good("dtype/slot", 64, 64, 64, &d);
    }
  for (int s = WEAVE_STRATEGY_AUTO; s <= WEAVE_STRATEGY_BASELINE; ++s)
    for (int r = 0; r < 2; ++r)
      for (int o = 0; o < 2; ++o)
        for (int l = 0; l < 2; ++l) {
          d = init;
          d.strategy = (weave_strategy_t)s;
          d.reduce = (weave_reduce_t)r;
          d.tile_order = (weave_tile_order_t)o;
          d.b_layout = (weave_layout_t)l;
          expect_good("strategy/reduce/order/layout", 128, 64, 32, &d);
        }
  d = init;
  d.alpha = 0.0f;
  d.has_bias = 1;
  expect_good("alpha 0, bias", 64, 64, 64, &d);
  d = init;
  d.alpha = -2.5f;
  d.has_bias = 0;
  expect_good("alpha -2.5", 64, 64, 64, &d);
  d = init;
  d.alpha = 3.0e38f;
  expect_good("alpha huge but finite", 64, 64, 64, &d);
  d = init;
  d.gemm_blocks = 120;
  d.comm_blocks = 12;
  expect_good("both blocks", 64, 64, 64, &d);
}

/* ---- execute's argument checks ----------------------------------------------------------------- */
/* execute refuses bad pointers before it touches the device. A host-only plan (no heap, no kernels)
 * is enough to reach every refusal: pageable_access lets the buffers below pass the reachability
 * check, and an unknown strategy on 2 ranks makes a call that got past the checks end in
 * WEAVE_ERROR_INTERNAL without launching anything. */
#define EXPECT_EXEC_INVALID(call, ...)                                                                         \
  do {                                                                                                         \
    weave_result_t rc_ = (call);                                                                               \
    const char *needles_[] = {__VA_ARGS__};                                                                    \
    const char *msg_ = weave_get_last_error(&team);                                                            \
    CHECK_MSG(rc_ == WEAVE_ERROR_INVALID_ARGUMENT, "%s -> %d (%s)", #call, (int)rc_, msg_);                    \
    for (size_t i_ = 0; i_ < sizeof(needles_) / sizeof(needles_[0]); ++i_)                                     \
      CHECK_MSG(strstr(msg_, needles_[i_]) != NULL, "%s: message '%s' lacks '%s'", #call, msg_, needles_[i_]); \
  } while (0)

static void test_execute_args(void) {
  static struct weave_team team;
  static struct weave_gemm_rs_plan plan;
  static _Alignas(16) unsigned char mem[4096];
  static float scales[64];
  const weave_gemm_rs_desc_t init = WEAVE_GEMM_RS_DESC_INIT;
  const char *A = (const char *)mem, *B = (const char *)mem + 1024;
  char *C = (char *)mem + 2048;
  const char *bias = (const char *)mem + 3072;
  const float *sa = scales, *sb = scales + 16;
  const char *xs = "weave_gemm_rs_execute_scaled:", *x = "weave_gemm_rs_execute:";
  weave_gemm_rs_plan_t p = &plan;
  team.world = 2;
  team.rank = 0;
  team.info.ranks_on_device = 1;
  plan.team = &team;
  plan.M = 64;
  plan.N = 64;
  plan.K = 64;
  plan.desc = init;
  plan.desc.dtype = WEAVE_FP8_E4M3;
  plan.desc.b_layout = WEAVE_LAYOUT_COL;
  plan.desc.scale_mode = WEAVE_SCALE_TENSOR;
  plan.out_dtype = WEAVE_BF16;
  plan.slot_dtype = WEAVE_BF16;
  plan.strategy = (weave_strategy_t)99;
  plan.pageable_access = 1;

  /* the unchecked path really ends in INTERNAL here (so a missing check below cannot pass unseen) */
  weave_result_t rc = weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, C, NULL);
  CHECK_MSG(rc == WEAVE_ERROR_INTERNAL, "good arguments on the host-only plan: %d (%s)", (int)rc,
            weave_get_last_error(&team));

  /* scales: the plan's mode decides; each message names the call that was made */
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute(p, A, B, NULL, C, NULL), x, "weave_gemm_rs_execute_scaled");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, NULL, sb, NULL, C, NULL), xs, "scale_a and scale_b");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, NULL, NULL, C, NULL), xs, "scale_a and scale_b");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, (const float *)((const char *)sb + 2), NULL, C, NULL),
                      xs, "4-byte aligned");
  /* the other refusals name weave_gemm_rs_execute_scaled too when it was the call */
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, NULL, B, sa, sb, NULL, C, NULL), xs, "non-NULL");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, NULL, sa, sb, NULL, C, NULL), xs, "non-NULL");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, NULL, NULL), xs, "non-NULL");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, sb, bias, C, NULL), xs, "without bias");
  /* fp8: 16-byte aligned A and B (TMA) although 1 byte is the element; C_out to its element */
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A + 8, B, sa, sb, NULL, C, NULL), xs, "16-byte aligned");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B + 1, sa, sb, NULL, C, NULL), xs, "16-byte aligned");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, C + 1, NULL), xs, "aligned");

  /* a plan without scales takes none, through either call */
  plan.desc.scale_mode = WEAVE_SCALE_NONE;
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, C, NULL), xs, "without scales");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, NULL, sb, NULL, C, NULL), xs, "without scales");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute(p, A + 8, B, NULL, C, NULL), x, "16-byte aligned");
  plan.desc.has_bias = 1;
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute(p, A, B, NULL, C, NULL), x, "bias is NULL");
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute(p, A, B, bias + 1, C, NULL), x, "aligned");
  plan.desc.has_bias = 0;

  /* where the device cannot read pageable memory, host buffers are refused by name (without a
   * device the driver cannot vouch for any pointer, which is refused the same way) */
  plan.pageable_access = 0;
  memset(plan.reachable, 0, sizeof(plan.reachable));
  plan.desc.scale_mode = WEAVE_SCALE_TENSOR;
  EXPECT_EXEC_INVALID(weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, C, NULL), xs, "host memory", "A");

  /* once rank 1 has aborted the team, both calls refuse before anything else, naming it */
  plan.pageable_access = 1;
  team.aborted_by = 2;
  rc = weave_gemm_rs_execute_scaled(p, A, B, sa, sb, NULL, C, NULL);
  CHECK_MSG(rc == WEAVE_ERROR_ABORTED && strstr(weave_get_last_error(&team), xs) &&
                strstr(weave_get_last_error(&team), "rank 1 aborted the team"),
            "execute_scaled on an aborted team: %d (%s)", (int)rc, weave_get_last_error(&team));
  rc = weave_gemm_rs_execute(p, NULL, B, NULL, C, NULL);
  CHECK_MSG(rc == WEAVE_ERROR_ABORTED && strstr(weave_get_last_error(&team), x),
            "execute (NULL A) on an aborted team: %d (%s)", (int)rc, weave_get_last_error(&team));
  team.aborted_by = 0;
}

/* ---- cost model, bytes, roofline --------------------------------------------------------------- */
static uint64_t rng_state = 7;
static double urand(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (double)(z >> 11) / 9007199254740992.0;
}

static void test_split(void) {
  /* Rates from device attributes: per block, shared by the blocks of an SM; fp32 much slower. */
  weave_split_inputs_t d1, d2, d32;
  weave_split_inputs_from_device(132, 1.98e9, 4.8e12, WEAVE_BF16, 1, 132, &d1);
  weave_split_inputs_from_device(132, 1.98e9, 4.8e12, WEAVE_BF16, 2, 264, &d2);
  weave_split_inputs_from_device(132, 1.98e9, 4.8e12, WEAVE_FP32, 1, 132, &d32);
  CHECK(d1.blocks == 132 && d2.blocks == 264);
  CHECK(fabs(d1.flops_per_block - 2 * d2.flops_per_block) < 1 && fabs(d1.bytes_per_block - 2 * d2.bytes_per_block) < 1);
  /* ... and a tile takes a block twice as long when two blocks share its SM */
  CHECK(d1.seconds_per_tile > 0 && fabs(d2.seconds_per_tile - 2 * d1.seconds_per_tile) < 1e-15);
  CHECK(d1.flops_per_block > 10 * d32.flops_per_block && d1.bytes_per_block == d32.bytes_per_block);
  CHECK(d1.flops_per_block > 1e12 && d1.flops_per_block < 1e13 && d1.bytes_per_block > 1e9 &&
        d1.bytes_per_block < 1e11);
  /* The 8-rank 8192 x 8192 x 3584 shape of the benchmark leaves a handful of blocks to communication. */
  int c8 = weave_split_comm_blocks(&d1, weave_plan_gemm_flops(8192, 8192, 3584, 8),
                                   weave_plan_comm_bytes(8192, 8192, 8, 2, 2), 8 * 32);
  CHECK_MSG(c8 >= 2 && c8 <= 20, "split %d", c8);
  /* Calibration (H200, docs/performance.md): the model picks the splits measured best
   * for M=N=8192, K_total=28672, bf16 slots, 128 x 256 tiles: 1 rank -> 4 communication blocks of
   * 132 (0.99x; 5: 0.96x); 4 and 8 ranks sharing the GPU (budgets (132-4)/4 = 32 and (132-8)/8 = 15
   * blocks per rank) -> 2. */
  static const struct { int world, budget, want; } cal[] = {{1, 132, 4}, {4, 32, 2}, {8, 15, 2}};
  for (int i = 0; i < 3; ++i) {
    weave_split_inputs_t ci;
    weave_split_inputs_from_device(132, 1.98e9, 4.8e12, WEAVE_BF16, 1, cal[i].budget, &ci);
    const weave_tiling_t tiling = {8192, 8192, cal[i].world, 128, 256, 0, 0}; /* the Hopper role's tiles */
    const double owner_tiles = weave_max_owner_tiles(&tiling);
    int c = weave_split_comm_blocks(&ci, weave_plan_gemm_flops(8192, 8192, 28672 / cal[i].world, cal[i].world),
                                    weave_plan_comm_bytes(8192, 8192, cal[i].world, 2, 2), owner_tiles);
    CHECK_MSG(c == cal[i].want, "world %d budget %d: split %d, measured best %d", cal[i].world, cal[i].budget, c,
              cal[i].want);
    /* the per-tile cost counts: without it the 1-rank split is smaller (3, not measured) */
    if (cal[i].world == 1) {
      ci.seconds_per_tile = 0;
      c = weave_split_comm_blocks(&ci, weave_plan_gemm_flops(8192, 8192, 28672, 1),
                                  weave_plan_comm_bytes(8192, 8192, 1, 2, 2), owner_tiles);
      CHECK_MSG(c < cal[i].want, "world 1 without the per-tile cost: split %d", c);
    }
  }
  weave_split_inputs_t in = {10, 1.0, 1.0, 0.0};
  /* the per-tile cost counts like bytes: 900 tiles of 1 s at 1 byte/s per block -> 9 blocks */
  in.seconds_per_tile = 1.0;
  CHECK(weave_split_comm_blocks(&in, 100, 0, 900) == 9);
  CHECK(weave_split_comm_blocks(&in, 100, 50, 50) == 5);
  in.seconds_per_tile = 0.0;
  CHECK(weave_split_comm_blocks(NULL, 1, 1, 0) == -1);
  in.blocks = 0;
  CHECK(weave_split_comm_blocks(&in, 1, 1, 0) == -1);
  in.blocks = 1;
  CHECK(weave_split_comm_blocks(&in, 1, 1, 0) == 0); /* one block: nothing to split */
  in.blocks = 2;
  CHECK(weave_split_comm_blocks(&in, 1e12, 1e12, 0) == 1);
  /* Balanced: equal rates and equal work -> half the blocks. */
  in.blocks = 10;
  CHECK(weave_split_comm_blocks(&in, 100, 100, 0) == 5);
  /* gemm 9x the comm work -> 1 comm block; comm 9x the gemm -> 9. */
  CHECK(weave_split_comm_blocks(&in, 900, 100, 0) == 1);
  CHECK(weave_split_comm_blocks(&in, 100, 900, 0) == 9);
  CHECK(weave_split_comm_blocks(&in, 100, 0, 0) == 1); /* no communication: still at least 1 */
  CHECK(weave_split_comm_blocks(&in, 0, 100, 0) == 9); /* no GEMM: still at least 1 GEMM block */

  int range_bad = 0, mono_bytes = 0, mono_flops = 0;
  for (int it = 0; it < 300; ++it) {
    in.blocks = 2 + (int)(urand() * 263);
    in.flops_per_block = 1e11 + urand() * 1e12;
    in.bytes_per_block = 1e9 + urand() * 2e10;
    double flops = 1e9 * (1 + urand() * 1e4);
    int prev = 0;
    for (int s = 0; s < 40; ++s) {
      double bytes = 1e6 * pow(1.5, s);
      int c = weave_split_comm_blocks(&in, flops, bytes, 0);
      if (c < 1 || c > in.blocks - 1) range_bad++;
      if (c < prev) mono_bytes++;
      prev = c;
    }
    double bytes = 1e8 * (1 + urand() * 100);
    prev = in.blocks;
    for (int s = 0; s < 40; ++s) {
      double fl = 1e8 * pow(1.6, s);
      int c = weave_split_comm_blocks(&in, fl, bytes, 0);
      if (c < 1 || c > in.blocks - 1) range_bad++;
      if (c > prev) mono_flops++;
      prev = c;
    }
  }
  CHECK_MSG(range_bad == 0, "%d splits outside [1, blocks-1]", range_bad);
  CHECK_MSG(mono_bytes == 0, "%d times more bytes gave fewer comm blocks", mono_bytes);
  CHECK_MSG(mono_flops == 0, "%d times more flops gave more comm blocks", mono_flops);
}

static void test_bytes_roofline(void) {
  CHECK(weave_plan_gemm_flops(10, 20, 30, 4) == 2.0 * 10 * 20 * 30);
  CHECK(weave_plan_gemm_flops(65536, 65536, 65536, 8) == 2.0 * 65536.0 * 65536.0 * 65536.0); /* no int overflow */
  /* ceil(10/4) = 3 rows x 3 cols x (4 slots x 2 + 2 out) = 90. */
  CHECK(weave_plan_comm_bytes(10, 3, 4, 2, 2) == 90.0);
  CHECK(weave_plan_comm_bytes(8, 5, 1, 4, 2) == 8 * 5 * (4 + 2));
  /* Rank r sends every row it does not own: rank 0 of 10/4 owns 3, rank 3 owns 2. */
  CHECK(weave_plan_bytes_sent(10, 3, 4, 0, 2) == 7 * 3 * 2);
  CHECK(weave_plan_bytes_sent(10, 3, 4, 3, 2) == 8 * 3 * 2);
  CHECK(weave_plan_bytes_sent(10, 3, 1, 0, 2) == 0); /* world 1 sends nothing */
  for (int world = 1; world <= 8; ++world) {
    size_t sum = 0;
    for (int r = 0; r < world; ++r) sum += weave_plan_bytes_sent(1000, 64, world, r, 4);
    CHECK_MSG(sum == (size_t)(world - 1) * 1000 * 64 * 4, "world %d: sum of bytes sent %zu", world, sum);
  }
  CHECK(weave_plan_bytes_sent(1 << 20, 1 << 16, 8, 0, 4) == (size_t)7 * (1 << 17) * (1 << 16) * 4); /* no overflow */

  CHECK(weave_dtype_size(WEAVE_BF16) == 2 && weave_dtype_size(WEAVE_FP16) == 2 && weave_dtype_size(WEAVE_FP32) == 4);
  CHECK(strcmp(weave_dtype_name(WEAVE_FP16), "fp16") == 0 && strcmp(weave_dtype_name((weave_dtype_t)5), "?") == 0);
  weave_dtype_t t;
  CHECK(weave_dtype_parse("BF16", &t) == 0 && t == WEAVE_BF16);
  CHECK(weave_dtype_parse("half", &t) == 0 && t == WEAVE_FP16);
  CHECK(weave_dtype_parse("float32", &t) == 0 && t == WEAVE_FP32);
  CHECK(weave_dtype_parse("int8", &t) == -1 && weave_dtype_parse(NULL, &t) == -1);
  CHECK(weave_dtype_parse("fp8", &t) == 0 && t == WEAVE_FP8_E4M3);
  CHECK(weave_dtype_size(WEAVE_FP8_E4M3) == 1 && weave_dtype_size(WEAVE_DTYPE_AUTO) == 0);
  CHECK(weave_dtype_out(WEAVE_FP8_E4M3, WEAVE_DTYPE_AUTO) == WEAVE_BF16 &&
        weave_dtype_out(WEAVE_FP8_E4M3, WEAVE_FP16) == WEAVE_FP16 &&
        weave_dtype_out(WEAVE_FP16, WEAVE_DTYPE_AUTO) == WEAVE_FP16);
  for (int i = 0; i <= 3; ++i) {
    weave_dtype_t back;
    CHECK(weave_dtype_parse(weave_dtype_name((weave_dtype_t)i), &back) == 0 && back == (weave_dtype_t)i);
  }
  CHECK(strcmp(weave_strategy_name(WEAVE_STRATEGY_FUSED), "fused") == 0);
  CHECK(strcmp(weave_strategy_name((weave_strategy_t)9), "?") == 0);

  int bad = 0;
  for (int dev = 0; dev < 3; ++dev) {
    const weave_roofline_device_t *d = &weave_roofline_devices[dev];
    CHECK(d->name && d->tflops_bf16 > 0 && d->tflops_fp8 > d->tflops_bf16 && d->tflops_fp32 > 0 && d->hbm_tbps > 0 &&
          d->nvlink_gbps > 0);
    for (int world = 1; world <= 8; world *= 2)
      for (int M = 1024; M <= 65536; M *= 4)
        for (int K = 1024; K <= 65536; K *= 8) {
          weave_roofline_t r;
          weave_roofline(d, M, 8192, K, world, WEAVE_BF16, 2, &r);
          if (!(r.t_fused_ms <= r.t_baseline_ms)) bad++;
          if (r.t_baseline_ms != r.t_gemm_ms + r.t_rs_ms) bad++;
          if (r.t_fused_ms != fmax(r.t_gemm_ms, r.t_rs_ms)) bad++;
          if (!(r.t_gemm_ms > 0) || r.t_rs_ms < 0) bad++;
          if (world == 1 && (r.t_rs_ms != 0 || r.t_fused_ms != r.t_baseline_ms)) bad++;
          if (world > 1 && !(r.t_rs_ms > 0)) bad++;
        }
  }
  CHECK_MSG(bad == 0, "%d roofline inconsistencies", bad);
  /* Spot value: 8192^3 bf16 on one H100 at 989 TFLOP/s: 2*8192^3 / 989e12 s = 1.1117 ms. */
  weave_roofline_t r;
  weave_roofline(&weave_roofline_devices[0], 8192, 8192, 8192, 1, WEAVE_BF16, 2, &r);
  CHECK_MSG(fabs(r.t_gemm_ms - 2.0 * 8192.0 * 8192 * 8192 / 989e12 * 1e3) < 1e-9, "t_gemm %.6f ms", r.t_gemm_ms);
  /* the GEMM at its inputs' rate: fp8 at 1979 TFLOP/s (its partials still bf16), fp32 on the CUDA cores */
  weave_roofline_t r_fp8, r_fp32;
  weave_roofline(&weave_roofline_devices[0], 8192, 8192, 8192, 1, WEAVE_FP8_E4M3, 2, &r_fp8);
  weave_roofline(&weave_roofline_devices[0], 8192, 8192, 8192, 1, WEAVE_FP32, 4, &r_fp32);
  CHECK_MSG(fabs(r_fp8.t_gemm_ms - 2.0 * 8192.0 * 8192 * 8192 / 1979e12 * 1e3) < 1e-9, "fp8 t_gemm %.6f ms",
            r_fp8.t_gemm_ms);
  CHECK_MSG(fabs(r_fp32.t_gemm_ms - 2.0 * 8192.0 * 8192 * 8192 / 67e12 * 1e3) < 1e-9, "fp32 t_gemm %.6f ms",
            r_fp32.t_gemm_ms);
  /* GEMM time splits over the world; RS time grows toward M*N*elt / nvlink. */
  weave_roofline_t r8;
  weave_roofline(&weave_roofline_devices[0], 8192, 8192, 8192, 8, WEAVE_BF16, 2, &r8);
  CHECK(fabs(r8.t_gemm_ms * 8 - r.t_gemm_ms) < 1e-9);
  CHECK(fabs(r8.t_rs_ms - 8192.0 * 8192 * 2 * 7 / 8 / 450e9 * 1e3) < 1e-9);
  /* AllGather + GEMM: one rank gathers nothing; the GEMM is all M rows with the rank's N columns
   * whatever the world; the gather is (world - 1) / world of A over NVLink; overlap = the larger. */
  weave_roofline_t ag1, ag8;
  weave_roofline_ag(&weave_roofline_devices[0], 8192, 3584, 8192, 1, WEAVE_BF16, &ag1);
  weave_roofline_ag(&weave_roofline_devices[0], 8192, 3584, 8192, 8, WEAVE_BF16, &ag8);
  CHECK(ag1.t_rs_ms == 0.0 && ag1.t_fused_ms == ag1.t_gemm_ms && ag1.t_baseline_ms == ag1.t_gemm_ms);
  CHECK(fabs(ag8.t_gemm_ms - 2.0 * 8192.0 * 3584 * 8192 / 989e12 * 1e3) < 1e-9 && ag8.t_gemm_ms == ag1.t_gemm_ms);
  CHECK(fabs(ag8.t_rs_ms - 8192.0 * 8192 * 2 * 7 / 8 / 450e9 * 1e3) < 1e-9);
  CHECK(ag8.t_baseline_ms == ag8.t_gemm_ms + ag8.t_rs_ms &&
        ag8.t_fused_ms == (ag8.t_gemm_ms > ag8.t_rs_ms ? ag8.t_gemm_ms : ag8.t_rs_ms));
  weave_roofline_ag(&weave_roofline_devices[0], 8192, 3584, 8192, 8, WEAVE_FP8_E4M3, &ag8);
  CHECK(fabs(ag8.t_rs_ms - 8192.0 * 8192 * 1 * 7 / 8 / 450e9 * 1e3) < 1e-9); /* fp8 rows: one byte */
}

/* ---- the model past one node -------------------------------------------------------------------- */
static int close_to(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-12; }

static void test_roofline_nodes(void) {
  int bad_one = 0, bad_order = 0, bad_chunks = 0;
  for (int dev = 0; dev < 3; ++dev)
    for (int M = 128; M <= 16384; M *= 4)
      for (int g = 1; g <= 72; g = g < 8 ? g * 2 : g + 32) {
        /* one node: weave_roofline's times, whatever the network */
        const weave_cluster_t one = {&weave_roofline_devices[dev], 1, g, 400, 5};
        weave_roofline_nodes_t r;
        weave_roofline_t ref;
        weave_roofline_nodes(&one, M, 8192, 28672, WEAVE_BF16, 2, 8, &r);
        weave_roofline(&weave_roofline_devices[dev], M, 8192, 28672, g, WEAVE_BF16, 2, &ref);
        if (!close_to(r.t_baseline_ms, ref.t_baseline_ms) || !close_to(r.t_weave_ms, ref.t_fused_ms) ||
            !close_to(r.t_built_ms, ref.t_fused_ms) || r.t_inter_ms != 0 || !close_to(r.t_gemm_ms, ref.t_gemm_ms))
          bad_one++;
        for (int nodes = 2; nodes <= 16; nodes *= 2)
          for (double gbps = 100; gbps <= 1600; gbps *= 2) {
            const weave_cluster_t c = {&weave_roofline_devices[dev], nodes, g, gbps, gbps > 400 ? 0 : 5};
            weave_roofline_nodes(&c, M, 8192, 28672, WEAVE_BF16, 2, 8, &r);
            /* bound <= weave <= baseline, and the bound is the slowest stage */
            /* bound <= weave <= built (pipelined no slower than one step after the other) <= baseline */
            if (!(r.t_bound_ms <= r.t_weave_ms * (1 + 1e-12) && r.t_weave_ms <= r.t_built_ms * (1 + 1e-12) &&
                  r.t_built_ms <= r.t_baseline_ms * (1 + 1e-12)) ||
                r.t_bound_ms < r.t_gemm_ms || r.t_bound_ms < r.t_inter_ms || r.t_bound_ms < r.t_intra_ms)
              bad_order++;
            /* more chunks allowed: never slower */
            weave_roofline_nodes_t more;
            weave_roofline_nodes(&c, M, 8192, 28672, WEAVE_BF16, 2, 64, &more);
            if (more.t_weave_ms > r.t_weave_ms * (1 + 1e-12) || more.chunks_used < 1 || more.chunks_used > 64)
              bad_chunks++;
          }
      }
  CHECK_MSG(bad_one == 0, "%d one-node cases differ from weave_roofline", bad_one);
  CHECK_MSG(bad_order == 0, "%d cases out of bound <= weave <= built <= baseline", bad_order);
  CHECK_MSG(bad_chunks == 0, "%d cases where allowing more chunks made weave slower", bad_chunks);

  /* links without limit: every time is the GEMM's; the GEMM's K is the whole world's share */
  weave_roofline_device_t fast = weave_roofline_devices[0];
  fast.nvlink_gbps = 1e15;
  const weave_cluster_t inf = {&fast, 4, 8, 1e18, 0};
  weave_roofline_nodes_t r;
  weave_roofline_nodes(&inf, 8192, 8192, 28672, WEAVE_BF16, 2, 8, &r);
  const double gemm = 2.0 * 8192 * 8192 * 28672 / 32 / (989e12) * 1e3;
  CHECK_MSG(close_to(r.t_gemm_ms, gemm), "gemm %.6f ms, want %.6f", r.t_gemm_ms, gemm);
  CHECK_MSG(fabs(r.t_weave_ms - gemm) < 1e-6 * gemm && fabs(r.t_baseline_ms - gemm) < 1e-6 * gemm,
            "infinite links: weave %.6f, baseline %.6f, GEMM %.6f ms", r.t_weave_ms, r.t_baseline_ms, gemm);
  /* the network step: each GPU's node-reduced 1/g share, (n-1)/n of it, at net_gbps / 8 bytes/s */
  const weave_cluster_t h100 = {&weave_roofline_devices[0], 4, 8, 400, 5};
  weave_roofline_nodes(&h100, 8192, 8192, 28672, WEAVE_BF16, 2, 8, &r);
  CHECK(close_to(r.t_inter_ms, 8192.0 * 8192 * 2 / 8 * 3 / 4 / 50e9 * 1e3));
  CHECK(close_to(r.t_intra_ms, 8192.0 * 8192 * 2 * 7 / 8 / 450e9 * 1e3));
  CHECK(close_to(r.t_baseline_ms, r.t_gemm_ms + r.t_intra_ms + r.t_inter_ms + 3 * 5e-3));
  /* a small M pays the latency per piece: fewer pieces than at a large M */
  weave_roofline_nodes_t small;
  weave_roofline_nodes(&h100, 128, 8192, 28672, WEAVE_BF16, 2, 8, &small);
  CHECK_MSG(small.chunks_used < r.chunks_used, "chunks: %d at M=128, %d at M=8192", small.chunks_used, r.chunks_used);
}

/* ---- AUTO's cost model ------------------------------------------------------------------------ */
/* weave_auto_model on an H200-like device (the rates autotune.c derives: 0.7 of the tensor cores'
 * 4096 FLOP/clock/SM at 1.98 GHz x 132 SMs, 0.8 of HBM and of NVLink). */
static weave_auto_model_in_t h200_model_in(int M, int N, int K, int world, weave_dtype_t dtype) {
  weave_auto_model_in_t in;
  memset(&in, 0, sizeof(in));
  in.M = M;
  in.N = N;
  in.K = K;
  in.world = world;
  in.ranks_on_device = 1;
  in.dtype = dtype;
  in.fp8_fast = 0;
  in.slot_bytes = 2;
  in.out_bytes = 2;
  in.gpu_flops = 0.7 * 4096 * 1.98e9 * 132 * (weave_dtype_is_fp8(dtype) ? 2.0 : 1.0);
  in.hbm_bytes_per_s = 0.8 * 4.8e12;
  in.link_bytes_per_s = 0.8 * 450e9;
  in.gemm_blocks = 128;
  in.comm_blocks = 4;
  return in;
}

static int model_finite(const weave_auto_model_t *m) {
  return isfinite(m->baseline_ms) && isfinite(m->bulk_ms) && isfinite(m->fused_ms) && m->baseline_ms > 0 &&
         m->bulk_ms > 0 && m->fused_ms > 0;
}

static void test_auto_model(void) {
  weave_auto_model_t m;
  weave_strategy_t s;

  /* one rank: nothing to hide, cuBLASLt alone */
  weave_auto_model_in_t in = h200_model_in(8192, 8192, 3584, 1, WEAVE_BF16);
  s = weave_auto_model(&in, &m);
  CHECK_MSG(s == WEAVE_STRATEGY_BASELINE, "world 1: %s", weave_strategy_name(s));
  CHECK(model_finite(&m) && m.fused_ms > m.baseline_ms && m.bulk_ms >= m.baseline_ms);
  in.dtype = WEAVE_FP8_E4M3;
  in.gpu_flops *= 2;
  CHECK(weave_auto_model(&in, &m) == WEAVE_STRATEGY_BASELINE && model_finite(&m));

  /* bf16, 8 GPUs of their own: 8192 x 8192 x 3584 per rank computes ~0.65 ms and reduce-scatters ~0.34 ms;
   * fused hides most of the latter (GEMM on 128 of 132 blocks, plus one owner's tail) */
  in = h200_model_in(8192, 8192, 3584, 8, WEAVE_BF16);
  s = weave_auto_model(&in, &m);
  CHECK_MSG(s == WEAVE_STRATEGY_FUSED, "bf16 world 8: %s (baseline %.3f bulk %.3f fused %.3f ms)",
            weave_strategy_name(s), m.baseline_ms, m.bulk_ms, m.fused_ms);
  CHECK(model_finite(&m) && m.fused_ms < m.baseline_ms && m.fused_ms < m.bulk_ms);
  const double gemm_ms = 2.0 * 8192 * 8192 * 3584 / in.gpu_flops * 1e3;
  const double rs_ms = 8192.0 * 8192 * 2 * 7 / 8 / in.link_bytes_per_s * 1e3;
  CHECK_MSG(m.baseline_ms > gemm_ms + rs_ms && m.baseline_ms < gemm_ms + rs_ms + 0.05,
            "baseline %.4f ms, expected ~%.4f", m.baseline_ms, gemm_ms + rs_ms);
  CHECK_MSG(m.fused_ms > gemm_ms * 132 / 128 && m.fused_ms < gemm_ms * 132 / 128 + rs_ms / 8 + 0.05,
            "fused %.4f ms, expected ~%.4f", m.fused_ms, gemm_ms * 132 / 128 + rs_ms / 8);
  const double bf16_baseline_ms = m.baseline_ms;

  /* fp8 with fp32 accumulation: weave's GEMM runs at 0.8 of cuBLASLt's, so bulk (weave's GEMM, then
   * the same reduce-scatter) loses to the baseline */
  in = h200_model_in(8192, 8192, 3584, 8, WEAVE_FP8_E4M3);
  s = weave_auto_model(&in, &m);
  CHECK_MSG(s != WEAVE_STRATEGY_BULK && m.bulk_ms > m.baseline_ms, "fp8 world 8: %s (baseline %.3f bulk %.3f)",
            weave_strategy_name(s), m.baseline_ms, m.bulk_ms);
  CHECK(model_finite(&m) && m.baseline_ms < bf16_baseline_ms);
  /* with fast accumulation weave's rate is cuBLASLt's: bulk ties the baseline (never 3% faster) */
  in.fp8_fast = 1;
  s = weave_auto_model(&in, &m);
  CHECK(s != WEAVE_STRATEGY_BULK && fabs(m.bulk_ms - m.baseline_ms) < 1e-9);

  /* links of infinite bandwidth: the reduce-scatter is its flag round trip alone, and fused, its GEMM
   * on 128 of the 132 blocks, never beats the GEMM on all of them */
  in = h200_model_in(8192, 8192, 3584, 8, WEAVE_BF16);
  in.link_bytes_per_s = 1e18;
  s = weave_auto_model(&in, &m);
  CHECK(model_finite(&m));
  CHECK_MSG(m.fused_ms >= gemm_ms && m.fused_ms >= m.baseline_ms - 0.0101, "fused %.4f ms, GEMM alone %.4f ms",
            m.fused_ms, gemm_ms);
  CHECK_MSG(s == WEAVE_STRATEGY_BASELINE, "free links: %s", weave_strategy_name(s));

  /* ranks sharing one GPU: every rank's GEMM on it, the reduce-scatter a pass over HBM */
  in = h200_model_in(8192, 8192, 3584, 8, WEAVE_BF16);
  in.ranks_on_device = 8;
  s = weave_auto_model(&in, &m);
  CHECK(model_finite(&m) && m.baseline_ms > 8 * gemm_ms);

  /* no GEMM blocks: fused is never the choice */
  in = h200_model_in(8192, 8192, 3584, 8, WEAVE_BF16);
  in.gemm_blocks = 0;
  s = weave_auto_model(&in, &m);
  CHECK_MSG(s != WEAVE_STRATEGY_FUSED && m.fused_ms > 1e20, "gemm_blocks 0: %s, fused %g ms", weave_strategy_name(s),
            m.fused_ms);
  CHECK(isfinite(m.baseline_ms) && isfinite(m.bulk_ms));
}

/* The alignment a cuBLASLt call's algorithm is picked for: the lowest set bit of the three addresses,
 * at most 256 (cuBLASLt's own assumption), NULL counting as aligned. */
static void test_lt_alignment(void) {
  unsigned char *base = (unsigned char *)(uintptr_t)0x7f0000001000ull;
  CHECK(weave_lt_alignment(base, base + 512, base + 4096) == 256);
  CHECK(weave_lt_alignment(base, base + 512, NULL) == 256);
  CHECK(weave_lt_alignment(base + 16, base, base) == 16);
  CHECK(weave_lt_alignment(base, base + 48, base + 8) == 8);
  CHECK(weave_lt_alignment(base, base, base + 2) == 2);
  CHECK(weave_lt_alignment(base + 1, base, base) == 1);
  CHECK(weave_lt_alignment(base + 128, base + 384, base + 640) == 128);
}

/* Which teams take the plans past one node: several nodes of equal size, ranks node by node. */
static void test_hier_applies(void) {
  struct weave_team t;
  memset(&t, 0, sizeof(t));
  char why[160];
  t.world = 4;
  t.nodes = 1;
  CHECK_MSG(!weave_hier_applies(&t, why, sizeof(why)) && !why[0], "one node: flat, nothing to say");
  t.nodes = 2;
  const int node_major[4] = {0, 0, 1, 1}, interleaved[4] = {0, 1, 0, 1};
  memcpy(t.node_of_rank, node_major, sizeof(node_major));
  CHECK_MSG(weave_hier_applies(&t, why, sizeof(why)) && !why[0], "2 nodes x 2, node-major: past one node");
  memcpy(t.node_of_rank, interleaved, sizeof(interleaved));
  CHECK_MSG(!weave_hier_applies(&t, why, sizeof(why)) && strstr(why, "flat"), "interleaved nodes: flat (%s)", why);
  t.world = 5;
  const int uneven[5] = {0, 0, 0, 1, 1};
  memcpy(t.node_of_rank, uneven, sizeof(uneven));
  CHECK_MSG(!weave_hier_applies(&t, why, sizeof(why)) && strstr(why, "unequal"), "nodes of 3 and 2: flat (%s)", why);
  t.world = 8;
  t.nodes = 4;
  for (int r = 0; r < 8; ++r) t.node_of_rank[r] = r / 2;
  CHECK_MSG(weave_hier_applies(&t, why, sizeof(why)), "4 nodes x 2: past one node");
}

/* The block budgets both planners share (kernels.h): a rank's share of the GPU, the split rounded
 * for 2-CTA clusters, and whether the clusters fit. */
static void test_rank_blocks(void) {
  CHECK(weave_rank_blocks(132, 1) == 132); /* a GPU of its own: every SM */
  CHECK(weave_rank_blocks(132, 8) == 16);  /* (132 - 4) / 8 */
  CHECK(weave_rank_blocks(132, 4) == 32);  /* (132 - 2) / 4 */
  CHECK(weave_rank_blocks(132, 3) == 43);  /* (132 - 2) / 3 */
  int gemm = 13, comm = 3;
  weave_pairs_round(16, &gemm, &comm);
  CHECK_MSG(gemm == 12 && comm == 4, "16 blocks, 13 + 3 -> 12 + 4 (got %d + %d)", gemm, comm);
  gemm = 17, comm = 0;
  weave_pairs_round(17, &gemm, &comm);
  CHECK_MSG(gemm == 16 && comm == 0, "an odd budget leaves one block out (got %d + %d)", gemm, comm);
  CHECK(weave_pairs_fit(12, 4, 8, 66) && !weave_pairs_fit(13, 3, 8, 66));
  CHECK(!weave_pairs_fit(0, 2, 1, 66) && !weave_pairs_fit(12, 4, 8, 63)); /* no GEMM pair; 64 > 63 resident */
}

/* ---- the Hopper GEMM's plan: schedule and clusters (default knobs; docs/hopper_gemm.md) ----------- */
/* tile_n: the call's request (0: the plan's choice); want_tile_n: the tile's columns it plans */
static void expect_gemm_plan_tile(int M, int N, int K, weave_dtype_t dtype, int fast, int sms, int tile_n,
                                  int want_schedule, int want_cluster, int want_sk, int want_tile_n) {
  weave_hgemm_args_t a = weave_hgemm_auto_args(M, N, K, dtype, 0, fast);
  a.tile_n = tile_n;
  int schedule = -1, cluster = -1, tn = -1;
  const weave_hgemm_sk_t sk = weave_hgemm_plan_on(&a, sms, &schedule, &cluster, &tn);
  CHECK_MSG(schedule == want_schedule && cluster == want_cluster && (sk.sk_tiles > 0) == want_sk && tn == want_tile_n,
            "%dx%dx%d %s%s on %d SMs, tile_n %d asked: schedule %d cluster %d stream-K tiles %d tile_n %d, want %d %d "
            "%s %d",
            M, N, K, weave_dtype_name(dtype), fast ? " fast" : "", sms, tile_n, schedule, cluster, sk.sk_tiles, tn,
            want_schedule, want_cluster, want_sk ? "some" : "none", want_tile_n);
}

static void expect_gemm_plan(int M, int N, int K, weave_dtype_t dtype, int fast, int sms, int want_schedule,
                             int want_cluster, int want_sk) {
  expect_gemm_plan_tile(M, N, K, dtype, fast, sms, 0, want_schedule, want_cluster, want_sk, WEAVE_HGEMM_BN);
}

static void test_gemm_plan(void) {
  const int C = WEAVE_HGEMM_SCHED_COOP, P = WEAVE_HGEMM_SCHED_PINGPONG;
  /* 16-bit: tile columns paired wherever they pair up (32 columns of 256), on any grid */
  expect_gemm_plan(8192, 8192, 3584, WEAVE_BF16, 0, 132, C, 3, 0);
  expect_gemm_plan(8192, 8192, 8192, WEAVE_BF16, 0, 16, C, 3, 0);
  expect_gemm_plan(8192, 8192 + 256, 3584, WEAVE_BF16, 0, 132, C, 1, 0); /* 33 columns: none */
  /* fp8, fast accumulation: ping-pong where it is picked (small K), unpaired; else cooperative with
   * columns paired wherever they pair up (no stream-K tail then), else a stream-K tail where the
   * cost model gives one */
  expect_gemm_plan(8192, 8192, 3584, WEAVE_FP8_E4M3, 1, 132, C, 3, 0);
  expect_gemm_plan(16384, 8192, 3584, WEAVE_FP8_E4M3, 1, 132, C, 3, 0);
  expect_gemm_plan(8192, 8192, 7168, WEAVE_FP8_E4M3, 1, 32, C, 3, 0);
  expect_gemm_plan(8192, 8192, 1024, WEAVE_FP8_E4M3, 1, 132, P, 1, 0);
  expect_gemm_plan(7936, 8192 + 256, 8192, WEAVE_FP8_E4M3, 1, 132, C, 1, 1);
  /* fp8, fp32 accumulation (three warpgroups, 128-column tiles): paired only under 32 blocks */
  expect_gemm_plan(8192, 8192, 3584, WEAVE_FP8_E4M3, 0, 132, C, 1, 0);
  expect_gemm_plan(8192, 8192, 3584, WEAVE_FP8_E4M3, 0, 16, C, 3, 0);
  /* the narrow fp8 tile asked for: fast accumulation on the cooperative schedule only, planned over
   * its own columns (43 at N = 8192: unpaired; 42 at 8064: paired) without stream-K */
  const int NW = WEAVE_HGEMM_BN_NARROW;
  expect_gemm_plan_tile(8192, 8192, 3584, WEAVE_FP8_E4M3, 1, 132, NW, C, 1, 0, NW);
  expect_gemm_plan_tile(8192, 8064, 3584, WEAVE_FP8_E4M3, 1, 132, NW, C, 3, 0, NW);
  expect_gemm_plan_tile(7936, 8192 + 256, 8192, WEAVE_FP8_E4M3, 1, 132, NW, C, 3, 0, NW); /* 44 columns */
  expect_gemm_plan_tile(7936, 8192 + 256, 8192, WEAVE_FP8_E4M3, 1, 132, WEAVE_HGEMM_BN, C, 1, 1, WEAVE_HGEMM_BN);
  expect_gemm_plan_tile(8192, 8192, 1024, WEAVE_FP8_E4M3, 1, 132, NW, P, 1, 0, WEAVE_HGEMM_BN); /* ping-pong */
  expect_gemm_plan_tile(8192, 8192, 3584, WEAVE_FP8_E4M3, 0, 132, NW, C, 1, 0, WEAVE_HGEMM_BN); /* promoted */
  expect_gemm_plan_tile(8192, 8192, 3584, WEAVE_BF16, 0, 132, NW, C, 3, 0, WEAVE_HGEMM_BN);     /* 16-bit */
}

/* The plan under WEAVE_HGEMM_FP8_NARROW=1 and WEAVE_HGEMM_CLUSTER=2 (test_plan --knobs: the knobs are
 * read once a process): fast fp8 takes the narrow tile where weave_hgemm_fp8_tile_n finds it cheaper,
 * in clusters sharing B where its tile rows pair up; a tie stays wide; 16-bit shares B as before. */
static int test_gemm_plan_knobs(void) {
  setenv("WEAVE_HGEMM_FP8_NARROW", "1", 1);
  setenv("WEAVE_HGEMM_CLUSTER", "2", 1);
  unsetenv("WEAVE_HGEMM_STREAMK");
  unsetenv("WEAVE_HGEMM_PINGPONG");
  const int C = WEAVE_HGEMM_SCHED_COOP, P = WEAVE_HGEMM_SCHED_PINGPONG, NW = WEAVE_HGEMM_BN_NARROW, W = WEAVE_HGEMM_BN;
  const weave_dtype_t F8 = WEAVE_FP8_E4M3;
  expect_gemm_plan_tile(8192, 8192, 3584, F8, 1, 132, 0, C, 2, 0, NW);        /* 21 x 192 < 16 x 256; 64 rows */
  expect_gemm_plan_tile(16384, 8192, 3584, F8, 1, 132, 0, C, 2, 0, NW);       /* 42 x 192 < 32 x 256 */
  expect_gemm_plan_tile(8064, 8192, 3584, F8, 1, 132, 0, C, 1, 0, NW);        /* 63 tile rows: unpaired */
  expect_gemm_plan_tile(4096, 8192, 3584, F8, 1, 132, 0, C, 1, 0, W);         /* 11 x 192 > 8 x 256 */
  expect_gemm_plan_tile(7936, 8448, 8192, F8, 1, 132, 0, C, 1, 1, W);         /* a tie with the stream-K plan */
  expect_gemm_plan_tile(8192, 8192, 1024, F8, 1, 132, 0, P, 1, 0, W);         /* ping-pong keeps its tile */
  expect_gemm_plan_tile(8192, 8192, 3584, F8, 1, 132, W, C, 1, 0, W);         /* the call's tile_n wins */
  expect_gemm_plan_tile(8192, 8192, 3584, F8, 0, 132, 0, C, 1, 0, W);         /* promoted accumulation */
  expect_gemm_plan_tile(8192, 8192, 3584, WEAVE_BF16, 0, 132, 0, C, 2, 0, W); /* 16-bit sharing B */
  return check_summary("test_plan --knobs");
}

int main(int argc, char **argv) {
  setenv("WEAVE_DEBUG", "NONE", 1); /* every failed check logs a WARN line otherwise */
  if (argc > 1 && strcmp(argv[1], "--knobs") == 0) return test_gemm_plan_knobs();
  /* the plan's knobs at their defaults (read once, at the first plan) */
  unsetenv("WEAVE_HGEMM_CLUSTER");
  unsetenv("WEAVE_HGEMM_STREAMK");
  unsetenv("WEAVE_HGEMM_PINGPONG");
  unsetenv("WEAVE_HGEMM_PROMOTE_WGS");
  unsetenv("WEAVE_HGEMM_FP8_NARROW");
  test_check_args();
  test_execute_args();
  test_split();
  test_bytes_roofline();
  test_roofline_nodes();
  test_hier_applies();
  test_auto_model();
  test_lt_alignment();
  test_rank_blocks();
  test_gemm_plan();
  return check_summary("test_plan");
}
