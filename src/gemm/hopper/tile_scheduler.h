/*
 * Tile scheduler of the Hopper GEMM: which work items a persistent block runs, in which order, and
 * under which schedule. Plain C with host-device functions, shared by the host launcher, the CPU test
 * (tests/test_streamk.c) and the kernel, so the test checks the very code the GPU runs. Holds:
 *   - the grouped tile order's default group (the order itself: weave_grouped_tile_coords in
 *     common/schedule.h, and weave_grouped_order_coords, the same order by dividers the launcher
 *     sets up once, which the standalone kernels' sink uses);
 *   - the stream-K tail: plan, per-block walk over items, split-tile segments and workspace slots
 *     (the device-side fixup of split tiles: streamk_fixup.cuh);
 *   - the choice between the cooperative and the ping-pong schedule.
 *
 * Stream-K. Why: a persistent grid of P blocks over T tiles runs ceil(T / P) rounds; when T % P is small the
 * last round leaves most SMs idle (4096x8192x3584: 1024 tiles, 124 blocks -> 9 rounds for 8.26
 * waves). Stream-K (Osama et al., PPoPP'23) hands out the tail as k-blocks ("units") instead of tiles.
 *
 * Schedule ("data-parallel + two-tile stream-K"):
 *   dp_tiles = T - sk_tiles tiles (a multiple of P) go round-robin as whole tiles, first;
 *   sk_tiles = P + T % P (T >= P) or T (T < P) tiles follow as U = sk_tiles * kt units, where kt is the
 *   number of k-blocks per tile; SK block b (< sk_blocks) takes the contiguous units
 *   [lo(b), lo(b + 1)), lo(b) = floor(b * U / sk_blocks), in order. A block's range is one or more
 *   "items" (tile, kb0, kb1): a first item that may start mid-tile, whole tiles, and a last item that
 *   may end mid-tile. So every SK block has at most two split items.
 *
 * Reduction of a split tile (wait-free, deterministic): the segments of tile t are the items of the
 * blocks first(t) .. last(t) that cover its units, numbered s = b - first(t) in k order. Each segment
 * writes its fp32 accumulators to its own workspace slot and adds 1 to the tile's counter
 * (acq_rel, gpu scope); the one whose add finds segs - 1 earlier arrivals (the last to arrive) sums
 * all segments in the order s = 0, 1, ... (its own from registers), runs the epilogue and puts the
 * counter back to 0 for the next call. A segment that finds the counter already at segs - 1 (load
 * acquire) is last without writing its slot. Nobody ever waits for another block: no deadlock even
 * when the blocks are not co-resident, no timeout. The sum order is fixed by (shape, blocks), so
 * repeated calls are bitwise equal.
 *
 * Slots: a block's split first item (kb0 > 0) uses slot 2b, its split last item (kb0 == 0) slot 2b+1.
 * Workspace = WEAVE_HGEMM_SK_COUNTERS 4-byte counters at a fixed place (offset 0, whatever the shape,
 * so that the zeros one call leaves are where the next looks), then 2 * sk_blocks slots of BM * BN
 * floats. The counters must be zero before the first call; every call leaves them zero.
 */
#ifndef WEAVE_HGEMM_TILE_SCHEDULER_H
#define WEAVE_HGEMM_TILE_SCHEDULER_H

#include <stddef.h>

#include "common/schedule.h" /* weave_grouped_tile_coords, WEAVE_HOST_DEVICE */

/* Tile rows per group of the grouped tile order (weave_grouped_tile_coords) for a persistent grid of
 * `blocks` blocks of tile_m x tile_n tiles over tiles_m tile rows; `knob`: WEAVE_HGEMM_GROUP_M (0:
 * this choice; else rounded down to even, at least 2).
 * A grid of 32 blocks or more: the largest even g whose wave is no taller than it is wide. A wave
 * covers g tile rows and blocks / g tile columns, so a k-block of it reads g * tile_m rows of A and
 * blocks / g * tile_n columns of B; their sum, what L2 holds for the wave, is least where the two
 * are equal, g = sqrt(blocks * tile_n / tile_m); of the even g around that point the one on the
 * wide side measured fastest for fp8's 192 x 128 tiles and level for 128 x 256 (H100,
 * docs/performance.md, "The tile order's group"):
 *   192 x 128 on 132 blocks: 8 (fp32 accumulation 4-7% faster than 16 at 8192^3 and
 *     8192x28672x4096 in every run, level or ahead elsewhere; 4 to 12 within the runs' noise);
 *   192 x 128 on 32 blocks (4 ranks sharing a GPU): 4 (fp8 bulk GEMM + ReduceScatter 0.80x the
 *     baseline, 0.57x with 16, whose four ranks' waves together overflowed L2); on 65: 6 (0.71-0.79x
 *     against 0.66-0.69x);
 *   128 x 256 on 132 blocks: 16 (faster than 8 or 32); on 127, 60 and 32 blocks 14, 10 and 8, level
 *     with 16 within 1.5% (bf16 GEMM, GEMM + ReduceScatter, AllGather + GEMM).
 * A grid under 32 blocks (ranks sharing a GPU: 15 blocks a rank at 8) spans one column per wave
 * whatever g, where a group only makes every group read B again: it walks whole columns instead
 * (8 ranks on one H100: AllGather + GEMM's bulk 1.6-1.9x faster, GEMM + ReduceScatter's bulk GEMM up
 * to 1.27x in bf16 and level in fp8). */
#define WEAVE_HGEMM_GROUP_MIN_BLOCKS 32
#define WEAVE_HGEMM_GROUP_MAX_ROWS 64
static inline WEAVE_HOST_DEVICE int weave_hgemm_group_rows(int knob, int blocks, int tiles_m, int tile_m, int tile_n) {
  if (knob > 0) return knob < 2 ? 2 : knob & ~1;
  if (blocks < WEAVE_HGEMM_GROUP_MIN_BLOCKS) return (tiles_m + 1) & ~1;
  /* g * tile_m <= blocks / g * tile_n, in integers: g^2 * tile_m <= blocks * tile_n */
  int g = 2;
  while (g < WEAVE_HGEMM_GROUP_MAX_ROWS && (long long)(g + 2) * (g + 2) * tile_m <= (long long)blocks * tile_n) g += 2;
  return g;
}

/* per-call choice */
#define WEAVE_HGEMM_SK_AUTO 0 /* cost model below; WEAVE_HGEMM_STREAMK=0|1|2 overrides (off|auto|on) */
#define WEAVE_HGEMM_SK_OFF 1
#define WEAVE_HGEMM_SK_ON 2 /* whenever T % P != 0 and kt >= 2 (tests) */

/* Fewest units (k-blocks) an SK block should get: below this the fixed cost of a split tile (one
 * partial written, read back by the last segment) outweighs the work. */
#define WEAVE_HGEMM_SK_MIN_UNITS 4
/* Cost of the stream-K tail beyond its units, in k-blocks of main loop: a block's split tiles write
 * and read 128 KiB of partials through L2, and the data-parallel last round it replaces runs faster
 * than a full one (fewer SMs busy, higher clocks). Fitted to measurements of stream-K against
 * data-parallel tiles (docs/hopper_gemm.md): 16 puts every measured loss on the data-parallel side and
 * every gain of more than 1% on the stream-K side. */
#define WEAVE_HGEMM_SK_FIXUP_UNITS 16
/* ... and stream-K must win by at least this share of the data-parallel time (1/100). */
#define WEAVE_HGEMM_SK_MARGIN_PCT 1
/* One slot: a whole tile of fp32 accumulators (128 x 256). */
#define WEAVE_HGEMM_SK_SLOT_FLOATS (128 * 256)
/* Counters at the start of the workspace (4 KiB); sk_tiles < 2 * blocks, so up to 512 blocks. */
#define WEAVE_HGEMM_SK_COUNTERS 1024
#define WEAVE_HGEMM_SK_SLOTS_OFFSET (WEAVE_HGEMM_SK_COUNTERS * 4)

typedef struct {
  int tiles, blocks, kt; /* inputs: tiles, persistent blocks, k-blocks per tile */
  int dp_tiles;          /* whole tiles handed out round-robin first (multiple of blocks) */
  int sk_tiles;          /* tiles handed out as units after them (0: data-parallel only) */
  int sk_blocks;         /* blocks that take SK units: 0 .. sk_blocks-1 */
  long long units;       /* sk_tiles * kt */
} weave_hgemm_sk_t;

/* The schedule for T tiles on P blocks with kt k-blocks per tile under `mode`. */
static inline WEAVE_HOST_DEVICE weave_hgemm_sk_t weave_hgemm_sk_plan(int tiles, int blocks, int kt, int mode) {
  weave_hgemm_sk_t s;
  s.tiles = tiles;
  s.blocks = blocks;
  s.kt = kt;
  s.dp_tiles = tiles;
  s.sk_tiles = 0;
  s.sk_blocks = 0;
  s.units = 0;
  if (mode == WEAVE_HGEMM_SK_OFF || tiles < 1 || blocks < 2 || kt < 2 || tiles % blocks == 0) return s;
  const int sk = tiles >= blocks ? blocks + tiles % blocks : tiles;
  if (sk > WEAVE_HGEMM_SK_COUNTERS) return s;
  const long long U = (long long)sk * kt;
  if (U > 0x7fffffffLL) return s; /* units are ints on the GPU */
  long long pb = U / WEAVE_HGEMM_SK_MIN_UNITS;
  if (pb > blocks) pb = blocks;
  if (pb < 2) return s;
  if (mode == WEAVE_HGEMM_SK_AUTO) {
    /* time in units of one k-block: rounds x kt for data-parallel, against the same for the dp
     * part plus the longest SK range plus the split tiles' fixed cost */
    const long long t_dp = (long long)((tiles + blocks - 1) / blocks) * kt;
    const long long t_sk = (long long)((tiles - sk) / blocks) * kt + (U + pb - 1) / pb + WEAVE_HGEMM_SK_FIXUP_UNITS;
    if (100 * t_sk > (100 - WEAVE_HGEMM_SK_MARGIN_PCT) * t_dp) return s;
  }
  s.dp_tiles = tiles - sk;
  s.sk_tiles = sk;
  s.sk_blocks = (int)pb;
  s.units = U;
  return s;
}

/* first unit of SK block b (b = sk_blocks: one past the last unit) */
static inline WEAVE_HOST_DEVICE long long weave_hgemm_sk_lo(const weave_hgemm_sk_t *s, int b) {
  return (long long)b * s->units / s->sk_blocks;
}

/* the SK block whose range holds unit u: the largest b with lo(b) <= u */
static inline WEAVE_HOST_DEVICE int weave_hgemm_sk_block_of(const weave_hgemm_sk_t *s, long long u) {
  return (int)(((u + 1) * s->sk_blocks + s->units - 1) / s->units) - 1;
}

/* workspace slot of the split item of block b that starts at k-block kb0 of its tile */
static inline WEAVE_HOST_DEVICE int weave_hgemm_sk_slot(int b, int kb0) { return 2 * b + (kb0 == 0 ? 1 : 0); }
/* A split tile's counter counts its segments' arrivals: the segment that sees segs - 1 earlier ones
 * (by looking first, or as the old value of its own increment) is the last and sums the tile. */
static inline WEAVE_HOST_DEVICE int weave_hgemm_sk_is_last(unsigned arrivals_before, int segs) {
  return arrivals_before == (unsigned)(segs - 1);
}

/* bytes of workspace the schedule needs (counters, then the slots); 0 without a stream-K tail */
static inline WEAVE_HOST_DEVICE size_t weave_hgemm_sk_workspace_bytes(const weave_hgemm_sk_t *s) {
  if (!s->sk_tiles) return 0;
  return (size_t)WEAVE_HGEMM_SK_SLOTS_OFFSET + (size_t)2 * s->sk_blocks * WEAVE_HGEMM_SK_SLOT_FLOATS * sizeof(float);
}

/* The largest workspace any shape needs on `blocks` blocks (what a caller allocates once). */
static inline WEAVE_HOST_DEVICE size_t weave_hgemm_sk_workspace_max(int blocks) {
  return (size_t)WEAVE_HGEMM_SK_SLOTS_OFFSET + (size_t)2 * blocks * WEAVE_HGEMM_SK_SLOT_FLOATS * sizeof(float);
}

/* Walks one block's items: the data-parallel tiles seq = b, b + P, ... < dp_tiles, then its SK
 * range. next() yields (seq, kb0, kb1): tile number (SK tiles are dp_tiles + t) and k-blocks
 * [kb0, kb1). */
typedef struct {
  int seq, stride, dp_tiles, kt;
  int u, hi; /* this block's SK units still to do: [u, hi) */
} weave_hgemm_walk_t;

static inline WEAVE_HOST_DEVICE weave_hgemm_walk_t weave_hgemm_walk_begin(const weave_hgemm_sk_t *s, int b,
                                                                          int seq_begin, int seq_stride,
                                                                          int seq_count) {
  weave_hgemm_walk_t w;
  w.seq = seq_begin;
  w.stride = seq_stride;
  w.dp_tiles = seq_count;
  w.kt = s->kt;
  w.u = w.hi = 0;
  if (s->sk_tiles && b < s->sk_blocks) {
    w.u = (int)weave_hgemm_sk_lo(s, b);
    w.hi = (int)weave_hgemm_sk_lo(s, b + 1);
  }
  return w;
}

static inline WEAVE_HOST_DEVICE int weave_hgemm_walk_next(weave_hgemm_walk_t *w, int *seq, int *kb0, int *kb1) {
  if (w->seq < w->dp_tiles) {
    *seq = w->seq;
    *kb0 = 0;
    *kb1 = w->kt;
    w->seq += w->stride;
    return 1;
  }
  if (w->u < w->hi) {
    const int t = w->u / w->kt;
    const int k0 = w->u - t * w->kt;
    const int k1 = w->hi - w->u < w->kt - k0 ? k0 + (w->hi - w->u) : w->kt;
    *seq = w->dp_tiles + t;
    *kb0 = k0;
    *kb1 = k1;
    w->u += k1 - k0;
    return 1;
  }
  return 0;
}

/* The segments of SK tile t: blocks first .. first + segs - 1 */
static inline WEAVE_HOST_DEVICE void weave_hgemm_sk_segments(const weave_hgemm_sk_t *s, int t, int *first, int *segs) {
  const long long u0 = (long long)t * s->kt;
  *first = weave_hgemm_sk_block_of(s, u0);
  *segs = weave_hgemm_sk_block_of(s, u0 + s->kt - 1) - *first + 1;
}

/* ---- the schedule a standalone call runs with (the launcher, the bench and tests/test_streamk.c) ----
 * Cooperative: both consumer warpgroups on one 128 x 256 tile (gemm_hopper_cooperative.cuh), with the
 * stream-K tail above. Ping-pong: each warpgroup a 128 x 128 half of the tile, main loops in turns, so
 * one's epilogue hides under the other's main loop (gemm_hopper_pingpong.cuh); whole tiles only. */
#define WEAVE_HGEMM_SCHED_AUTO 0
#define WEAVE_HGEMM_SCHED_COOP 1
#define WEAVE_HGEMM_SCHED_PINGPONG 2

/* Ping-pong's time against the cooperative schedule's, per tile of kt k-blocks, in 1/32 k-block:
 * kt * weave_hgemm_pp_kblock32(fp8) - WEAVE_HGEMM_PP_SAVED_32. Each of its k-blocks costs more (A is
 * loaded twice, so more L2 -> SM bytes and, on a power-limited card, a lower clock): ~3% for 16-bit
 * types, ~9% for fp8, whose k-blocks draw more power at the same bytes; it hides ~1.75 k-blocks of
 * epilogue a tile. Fitted to measurements (docs/hopper_gemm.md): 16-bit ping-pong wins at K = 1024,
 * loses at K = 8192 and ties at K = 3584 (56 * 33 - 56 = 56 * 32); fp8 (128 of K a k-block) wins at
 * K = 1024 and loses at K = 3584. A tie goes to the cooperative schedule. */
#define WEAVE_HGEMM_PP_KBLOCK_32 33
#define WEAVE_HGEMM_PP_KBLOCK_32_FP8 35
#define WEAVE_HGEMM_PP_SAVED_32 56

static inline WEAVE_HOST_DEVICE int weave_hgemm_pp_kblock32(int fp8) {
  return fp8 ? WEAVE_HGEMM_PP_KBLOCK_32_FP8 : WEAVE_HGEMM_PP_KBLOCK_32;
}

/* Time of a cooperative plan in k-blocks of main loop: its rounds of whole tiles, or the stream-K
 * model's estimate with its tail. */
static inline WEAVE_HOST_DEVICE long long weave_hgemm_sk_units(const weave_hgemm_sk_t *s) {
  const int blocks = s->blocks < 1 ? 1 : s->blocks;
  if (!s->sk_tiles) return (long long)((s->tiles + blocks - 1) / blocks) * s->kt;
  return (long long)(s->dp_tiles / blocks) * s->kt + (s->units + s->sk_blocks - 1) / s->sk_blocks +
         WEAVE_HGEMM_SK_FIXUP_UNITS;
}

/* ... of the plan for `tiles` tiles on `blocks` blocks under `sk_mode` */
static inline WEAVE_HOST_DEVICE long long weave_hgemm_coop_units(int tiles, int blocks, int kt, int sk_mode) {
  const weave_hgemm_sk_t s = weave_hgemm_sk_plan(tiles, blocks, kt, sk_mode);
  return weave_hgemm_sk_units(&s);
}

/* fp8 with the tensor cores' accumulation on the cooperative schedule: the tile's columns, 256 or
 * WEAVE_HGEMM_BN_NARROW (192; whole tiles). A tile's main loop takes time in proportion to its
 * columns, so a plan costs its k-blocks of main loop times its tile's width: `wide`, the plan of the
 * 128 x 256 tiles (stream-K tail included), against whole rounds of 128 x 192 tiles over ceil(N / 192)
 * columns on the same blocks; narrow only where strictly cheaper. On 132 blocks: 8192 x 8192 (43
 * columns, 21 rounds x 192 against 16 x 256) and 16384 x 8192 narrow, 4096 x 8192 (11 x 192 against
 * 8 x 256) wide, as measured (H100, docs/hopper_gemm.md, "The narrow fp8 tile"). */
#define WEAVE_HGEMM_BN_NARROW 192
static inline WEAVE_HOST_DEVICE int weave_hgemm_fp8_tile_n(const weave_hgemm_sk_t *wide, int tiles_m, int N) {
  const int cols = (N + WEAVE_HGEMM_BN_NARROW - 1) / WEAVE_HGEMM_BN_NARROW;
  const weave_hgemm_sk_t narrow = weave_hgemm_sk_plan(tiles_m * cols, wide->blocks, wide->kt, WEAVE_HGEMM_SK_OFF);
  return weave_hgemm_sk_units(&narrow) * WEAVE_HGEMM_BN_NARROW < weave_hgemm_sk_units(wide) * 256
             ? WEAVE_HGEMM_BN_NARROW
             : 256;
}

/* Time of the ping-pong schedule (whole rounds of tiles, no stream-K) in 1/32 k-block of the
 * cooperative main loop; fp8: the operands' type is fp8. */
static inline WEAVE_HOST_DEVICE long long weave_hgemm_pp_units32(int tiles, int blocks, int kt, int fp8) {
  if (blocks < 1) blocks = 1;
  long long tile32 = (long long)kt * weave_hgemm_pp_kblock32(fp8) - WEAVE_HGEMM_PP_SAVED_32;
  if (tile32 < 1) tile32 = 1;
  return (long long)((tiles + blocks - 1) / blocks) * tile32;
}

/* 1: ping-pong, 0: cooperative, for `tiles` tiles of kt k-blocks on `blocks` blocks. schedule: the
 * call's request (WEAVE_HGEMM_SCHED_*); knob: the env override for AUTO (0 cooperative, 1 auto,
 * 2 ping-pong); sk_mode: the stream-K mode the call resolved to (WEAVE_HGEMM_SK_*). AUTO: ping-pong
 * only where its estimate is strictly shorter than the cooperative plan's (with that plan's
 * stream-K tail where one is planned); fp8: the operands are fp8 (weave_hgemm_pp_kblock32). */
static inline WEAVE_HOST_DEVICE int weave_hgemm_pick_pingpong(int schedule, int knob, int tiles, int blocks, int kt,
                                                              int sk_mode, int fp8) {
  if (schedule == WEAVE_HGEMM_SCHED_PINGPONG || schedule == WEAVE_HGEMM_SCHED_COOP)
    return schedule == WEAVE_HGEMM_SCHED_PINGPONG;
  if (knob == 0 || knob == 2) return knob == 2;
  if (tiles < 1 || blocks < 1 || kt < 1) return 0;
  return weave_hgemm_pp_units32(tiles, blocks, kt, fp8) < 32 * weave_hgemm_coop_units(tiles, blocks, kt, sk_mode);
}

#endif /* WEAVE_HGEMM_TILE_SCHEDULER_H */
