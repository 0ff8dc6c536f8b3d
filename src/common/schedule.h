/*
 * Tile math shared by the host (plans, CPU tests, the bench's dry run) and the kernels, so the CPU
 * tests check the very code the GPU runs.
 *
 * Rows of C are split into `world` contiguous chunks of whole rows, the first M % world ranks one row
 * more. Each owner's chunk is tiled on its own (tiles never straddle two owners); an owner's tiles
 * are numbered j = 0 .. tiles(o)-1 in a grouped order (WEAVE_GROUP_M tile-rows at a time, column by
 * column) so that tiles in flight together share rows of A and columns of B in L2.
 *
 * Rank r walks all tiles of all owners as one sequence that interleaves the owners tile by tile, in
 * an order rotated per rank: step i goes to owner visit(i % world), tile i / world of that owner, with
 * visit(k) = r+1+k (OWN_LAST: its own tile last in every round) or r+k (OWN_FIRST). So at any step the
 * ranks push to different owners, and every owner receives its tile j from every source at about the
 * same time, early: its communication blocks reduce while the GEMM runs instead of waiting for the
 * source that visits it last (walking owner after owner, the traces showed the owners' reductions
 * starting only at 3/4 of the GEMM). Owners with one tile-row more (M % world)
 * get their extra tiles after the interleaved rounds. Within an owner the order is the same on every
 * rank.
 */
#ifndef WEAVE_SCHEDULE_H
#define WEAVE_SCHEDULE_H

#include <stdint.h>

#include "weave_device_types.h" /* WEAVE_HOST_DEVICE */

#define WEAVE_GROUP_M 8

typedef struct {
  int M, N, world;
  int tile_m, tile_n;
  int order;  /* weave_tile_order_t */
  int pair_n; /* 1: tiles go in pairs of tile columns of one tile row (2-CTA clusters sharing A): an
               * owner's tiles 2q and 2q + 1, and a walk's steps 2q and 2q + 1, are such a pair; the
               * tile columns must pair up (tiles_n even) */
} weave_tiling_t;

static inline WEAVE_HOST_DEVICE int weave_cdiv(int a, int b) { return (a + b - 1) / b; }

static inline WEAVE_HOST_DEVICE void weave_split_rows_of(int M, int world, int r, int *begin, int *rows) {
  int base = M / world, extra = M % world;
  *rows = base + (r < extra ? 1 : 0);
  *begin = r * base + (r < extra ? r : extra);
}

/* Owner of global row `row`. */
static inline WEAVE_HOST_DEVICE int weave_row_owner(int M, int world, int row) {
  int base = M / world, extra = M % world;
  int big = extra * (base + 1); /* rows held by the ranks with one more */
  if (row < big) return row / (base + 1);
  return extra + (row - big) / (base > 0 ? base : 1);
}

static inline WEAVE_HOST_DEVICE int weave_tiles_n(const weave_tiling_t *t) { return weave_cdiv(t->N, t->tile_n); }

static inline WEAVE_HOST_DEVICE int weave_owner_tiles_m(const weave_tiling_t *t, int owner) {
  int b, rows;
  weave_split_rows_of(t->M, t->world, owner, &b, &rows);
  return weave_cdiv(rows, t->tile_m);
}

static inline WEAVE_HOST_DEVICE int weave_owner_tiles(const weave_tiling_t *t, int owner) {
  return weave_owner_tiles_m(t, owner) * weave_tiles_n(t);
}

/* Largest tile count of any owner: the stride of per-owner flag arrays. */
static inline WEAVE_HOST_DEVICE int weave_max_owner_tiles(const weave_tiling_t *t) { return weave_owner_tiles(t, 0); }

static inline WEAVE_HOST_DEVICE int weave_total_tiles(const weave_tiling_t *t) {
  int s = 0;
  for (int o = 0; o < t->world; ++o) s += weave_owner_tiles(t, o);
  return s;
}

/* Grouped tile order of a tiles_m x tiles_n grid: tile `seq` -> (tile-row, tile-column). Tiles walk
 * down groups of `group_m` tile-rows (fewer in the last group), column by column, so the blocks of
 * one wave share rows of A and columns of B in L2. */
static inline WEAVE_HOST_DEVICE void weave_grouped_tile_coords(int seq, int tiles_m, int tiles_n, int group_m, int *tm,
                                                               int *tn) {
  int group = group_m * tiles_n;
  int first_m = (seq / group) * group_m;
  int gm = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  int in = seq % group;
  *tm = first_m + in % gm;
  *tn = in / gm;
}

/* n / d and n % d for 0 <= n < 2^31, 1 <= d < 2^31, by a multiply-high instead of a division (a
 * division is a dependent chain of ~20 instructions on the GPU): with l = ceil(log2 d) and
 * mul = floor(2^32 (2^l - d) / d) + 1, n / d = (umulhi(n, mul) + n) >> l (Granlund and Montgomery,
 * PLDI'94, for dividends under 2^31). The host sets a divider up once per divisor. */
typedef struct {
  uint32_t d, mul, shift;
} weave_divider_t;

static inline WEAVE_HOST_DEVICE weave_divider_t weave_divider(int d) {
  weave_divider_t v;
  uint32_t l = 0;
  while ((1ull << l) < (unsigned long long)d) ++l;
  v.d = (uint32_t)d;
  v.shift = l;
  v.mul = (uint32_t)((((1ull << l) - (unsigned long long)d) << 32) / (unsigned long long)d + 1);
  return v;
}

static inline WEAVE_HOST_DEVICE int weave_divide(weave_divider_t v, int n, int *rem) {
#ifdef __CUDA_ARCH__
  const uint32_t hi = __umulhi((uint32_t)n, v.mul);
#else
  const uint32_t hi = (uint32_t)(((unsigned long long)(uint32_t)n * v.mul) >> 32);
#endif
  const int q = (int)((hi + (uint32_t)n) >> v.shift);
  *rem = n - q * (int)v.d;
  return q;
}

/* weave_grouped_tile_coords with its divisors set up once (weave_grouped_order) */
typedef struct {
  int tiles_m, group_m;
  weave_divider_t group; /* group_m * tiles_n tiles a group */
  weave_divider_t rows;  /* group_m tile rows a group ... */
  weave_divider_t last;  /* ... the last group's rows */
} weave_grouped_order_t;

static inline WEAVE_HOST_DEVICE weave_grouped_order_t weave_grouped_order(int tiles_m, int tiles_n, int group_m) {
  weave_grouped_order_t o;
  o.tiles_m = tiles_m;
  o.group_m = group_m;
  o.group = weave_divider(group_m * tiles_n);
  o.rows = weave_divider(group_m);
  o.last = weave_divider(tiles_m % group_m ? tiles_m % group_m : group_m);
  return o;
}

static inline WEAVE_HOST_DEVICE void weave_grouped_order_coords(const weave_grouped_order_t *o, int seq, int *tm,
                                                                int *tn) {
  int in, r;
  const int first_m = weave_divide(o->group, seq, &in) * o->group_m;
  *tn = weave_divide(o->tiles_m - first_m < o->group_m ? o->last : o->rows, in, &r);
  *tm = first_m + r;
}

/* The grouped order over pairs of tiles, for 2-CTA clusters whose CTAs take tiles seq and seq ^ 1:
 * pair_n 0, tile rows (2i, 2i + 1) of one column (the CTAs share B); pair_n 1, tile columns
 * (2j, 2j + 1) of one row (they share A). An odd count of tile rows (columns) leaves the last pair's
 * second tile out of range: callers pair only where the count is even. */
static inline WEAVE_HOST_DEVICE void weave_paired_tile_coords(int seq, int tiles_m, int tiles_n, int group_m,
                                                              int pair_n, int *tm, int *tn) {
  int p;
  if (pair_n) {
    weave_grouped_tile_coords(seq >> 1, tiles_m, (tiles_n + 1) >> 1, group_m, tm, &p);
    *tn = 2 * p + (seq & 1);
  } else {
    weave_grouped_tile_coords(seq >> 1, (tiles_m + 1) >> 1, tiles_n, group_m >> 1, &p, tn);
    *tm = 2 * p + (seq & 1);
  }
}

/* AllGather + GEMM (kernels/ag_gemm.cu), over blocks of `block_rows` gathered rows of A.
 * The pushes block b receives per call, i.e. the ranks whose rows meet it (owners are contiguous), |
 * the first of them << 16. */
static inline WEAVE_HOST_DEVICE uint32_t weave_ag_row_info(int M, int world, int block_rows, int b) {
  const int r0 = b * block_rows, r1 = (r0 + block_rows < M ? r0 + block_rows : M) - 1;
  const int first = weave_row_owner(M, world, r0), last = weave_row_owner(M, world, r1);
  return (uint32_t)(last - first + 1) | (uint32_t)first << 16;
}

/* A rank's own blocks (rows [row_begin, row_begin + rows) of blocks_m blocks): the first one (the last
 * block for a rank without rows) and how many. */
static inline WEAVE_HOST_DEVICE void weave_ag_own_blocks(int row_begin, int rows, int blocks_m, int block_rows,
                                                         int *first, int *n_own) {
  const int f = row_begin / block_rows;
  *first = f < blocks_m - 1 ? f : blocks_m - 1;
  *n_own = rows ? (row_begin + rows - 1) / block_rows - *first + 1 : 0;
}

/* A rank's GEMM tile `seq` -> (tile row, tile column): tile rows in the order the rank's rows arrive
 * (its n_own own blocks from `first`, then backwards from first - 1, wrapping: rank-1's, rank-2's,
 * ...), grouped group_m tile rows at a time as weave_grouped_tile_coords. */
static inline WEAVE_HOST_DEVICE void weave_ag_tile_coords(int seq, int blocks_m, int tiles_n, int group_m, int first,
                                                          int n_own, int *tm, int *tn) {
  int mi;
  weave_grouped_tile_coords(seq, blocks_m, tiles_n, group_m, &mi, tn);
  *tm = mi < n_own ? first + mi : ((first - 1 - (mi - n_own)) % blocks_m + blocks_m) % blocks_m;
}

/* Owner's local tile j -> tile-row (within the owner's chunk) and tile-column, grouped order (over
 * pairs of tile columns with pair_n). */
static inline WEAVE_HOST_DEVICE void weave_owner_tile_coords(const weave_tiling_t *t, int owner, int j, int *tm,
                                                             int *tn) {
  if (t->pair_n)
    weave_paired_tile_coords(j, weave_owner_tiles_m(t, owner), weave_tiles_n(t), WEAVE_GROUP_M, 1, tm, tn);
  else
    weave_grouped_tile_coords(j, weave_owner_tiles_m(t, owner), weave_tiles_n(t), WEAVE_GROUP_M, tm, tn);
}

/* k-th owner visited by rank r. */
static inline WEAVE_HOST_DEVICE int weave_visit_owner(const weave_tiling_t *t, int rank, int k) {
  int first = t->order == 1 /* OWN_FIRST */ ? rank : rank + 1;
  return (first + k) % t->world;
}

/* Position `seq` of rank r's walk -> (owner, owner-local tile j). Returns 0, or -1 outside. With
 * pair_n the walk interleaves the owners pair by pair: steps 2q and 2q + 1 are tiles 2i and 2i + 1
 * of one owner. */
static inline WEAVE_HOST_DEVICE int weave_seq_tile(const weave_tiling_t *t, int rank, int seq, int *owner, int *j) {
  if (seq < 0) return -1;
  const int unit = t->pair_n ? 2 : 1, half = seq % unit;
  int q = seq / unit;
  const int least = weave_owner_tiles(t, t->world - 1) / unit; /* owners' counts never grow with o */
  if (q < least * t->world) {
    *owner = weave_visit_owner(t, rank, q % t->world);
    *j = (q / t->world) * unit + half;
    return 0;
  }
  q -= least * t->world;
  for (int k = 0; k < t->world; ++k) {
    int o = weave_visit_owner(t, rank, k);
    int extra = weave_owner_tiles(t, o) / unit - least;
    if (q < extra) {
      *owner = o;
      *j = (least + q) * unit + half;
      return 0;
    }
    q -= extra;
  }
  return -1;
}

/* The fused protocol's credit (src/kernels/gemm_rs.cu): before a source's first push of a call to
 * owner o, o must have finished reading the previous call's slots, i.e. o's done flag at this source
 * reached weave_credit_epoch(epoch). `credit` has one bit per owner already waited for in this call,
 * so each owner is waited for once per call. The CPU model of the protocol (tests/test_protocol.c)
 * runs these very functions. */
static inline WEAVE_HOST_DEVICE uint32_t weave_credit_epoch(uint32_t epoch) { return epoch - 1u; }
static inline WEAVE_HOST_DEVICE int weave_credit_held(uint64_t credit, int owner) {
  return (int)((credit >> owner) & 1u);
}
static inline WEAVE_HOST_DEVICE uint64_t weave_credit_take(uint64_t credit, int owner) {
  return credit | (1ull << owner);
}

#endif /* WEAVE_SCHEDULE_H */
