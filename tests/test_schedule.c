/* CPU test of the tile schedule (src/schedule.h), the very functions the kernels run: row split,
 * row owner, per-owner tiling in grouped order, each rank's rotated walk over all tiles, the
 * wrap-safe epoch comparison, and AllGather + GEMM's row blocks and tile order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/schedule.h"
#include "weave.h"

static void test_row_split(void) {
  int bad_cover = 0, bad_contig = 0, bad_sizes = 0, bad_owner = 0, cases = 0;
  static int owner_of[5000];
  for (int world = 1; world <= WEAVE_MAX_WORLD; world = world < 9 ? world + 1 : world * 2) {
    for (int M = 0; M <= 700; M += (M < 80 ? 1 : 37)) {
      cases++;
      for (int i = 0; i < M; ++i) owner_of[i] = -1;
      int next = 0;
      for (int r = 0; r < world; ++r) {
        int b = -1, rows = -1;
        weave_split_rows_of(M, world, r, &b, &rows);
        if (b != next) bad_contig++;
        int want = M / world + (r < M % world ? 1 : 0);
        if (rows != want) bad_sizes++;
        for (int i = b; i < b + rows && i < M; ++i) {
          if (i < 0 || owner_of[i] != -1)
            bad_cover++;
          else
            owner_of[i] = r;
        }
        next = b + rows;
      }
      if (next != M) bad_contig++;
      for (int i = 0; i < M; ++i) {
        if (owner_of[i] < 0) bad_cover++;
        if (weave_row_owner(M, world, i) != owner_of[i]) bad_owner++;
      }
    }
  }
  CHECK_MSG(bad_cover == 0, "%d rows owned by zero or two ranks", bad_cover);
  CHECK_MSG(bad_contig == 0, "%d non-contiguous splits", bad_contig);
  CHECK_MSG(bad_sizes == 0, "%d wrong chunk sizes", bad_sizes);
  CHECK_MSG(bad_owner == 0, "%d rows where weave_row_owner disagrees", bad_owner);
  CHECK(cases > 500);
  /* Spot values. */
  int b, rows;
  weave_split_rows_of(10, 4, 0, &b, &rows);
  CHECK(b == 0 && rows == 3);
  weave_split_rows_of(10, 4, 1, &b, &rows);
  CHECK(b == 3 && rows == 3);
  weave_split_rows_of(10, 4, 2, &b, &rows);
  CHECK(b == 6 && rows == 2);
  weave_split_rows_of(10, 4, 3, &b, &rows);
  CHECK(b == 8 && rows == 2);
  CHECK(weave_row_owner(10, 4, 5) == 1 && weave_row_owner(10, 4, 6) == 2 && weave_row_owner(10, 4, 9) == 3);
  /* Large M, no overflow. */
  weave_split_rows_of(1 << 30, 8, 7, &b, &rows);
  CHECK(b == 7 * (1 << 27) && rows == 1 << 27);
  CHECK(weave_row_owner(1 << 30, 8, (1 << 30) - 1) == 7);
}

/* Checks one tiling: per-owner coordinates are a bijection and cover the owner's rows/cols once; every
 * rank's walk visits each (owner, j) exactly once; the owner order is the rotation asked for; with
 * pair_n, tiles 2q and 2q + 1 (of an owner and of a walk) are two adjacent tile columns of one row. */
static int check_tiling(const weave_tiling_t *t) {
  int errors = 0;
  int world = t->world, tiles_n = weave_tiles_n(t);
  const int unit = t->pair_n ? 2 : 1;
  if (tiles_n != (t->N + t->tile_n - 1) / t->tile_n) errors++;
  int total = 0, max_tiles = 0;
  for (int o = 0; o < world; ++o) {
    int b, rows;
    weave_split_rows_of(t->M, world, o, &b, &rows);
    int tiles_m = weave_owner_tiles_m(t, o);
    if (tiles_m != (rows + t->tile_m - 1) / t->tile_m) errors++;
    int n = weave_owner_tiles(t, o);
    if (n != tiles_m * tiles_n) errors++;
    total += n;
    if (n > max_tiles) max_tiles = n;
    /* Bijection j -> (tm, tn) onto [0, tiles_m) x [0, tiles_n). */
    unsigned char *seen = calloc((size_t)n + 1, 1);
    /* Element coverage only on small chunks (the grid bijection plus tiles_m = cdiv(rows, tile_m)
     * already implies it; this checks the clipping arithmetic directly). */
    int do_cover = (size_t)rows * t->N <= 100000 && t->order == 0;
    unsigned short *cover = calloc(do_cover ? (size_t)rows * t->N + 1 : 1, sizeof(unsigned short));
    for (int j = 0; j < n; ++j) {
      int tm = -1, tn = -1;
      weave_owner_tile_coords(t, o, j, &tm, &tn);
      if (tm < 0 || tm >= tiles_m || tn < 0 || tn >= tiles_n) {
        errors++;
        continue;
      }
      if (seen[tm * tiles_n + tn]++) errors++;
      if (t->pair_n && (j & 1)) {
        int pm, pn;
        weave_owner_tile_coords(t, o, j - 1, &pm, &pn);
        if (pm != tm || pn % 2 != 0 || tn != pn + 1) errors++;
      }
      /* Rows/cols the tile covers, clipped to the chunk. */
      if (do_cover)
        for (int i = tm * t->tile_m; i < (tm + 1) * t->tile_m && i < rows; ++i)
          for (int c = tn * t->tile_n; c < (tn + 1) * t->tile_n && c < t->N; ++c) cover[(size_t)i * t->N + c]++;
    }
    for (size_t e = 0; do_cover && e < (size_t)rows * t->N; ++e)
      if (cover[e] != 1) {
        errors++;
        break;
      }
    /* Grouped order: tiles j in [g*GROUP*tiles_n, (g+1)*GROUP*tiles_n) stay within tile-rows of group g. */
    for (int j = 0; j < n; ++j) {
      int tm, tn;
      weave_owner_tile_coords(t, o, j, &tm, &tn);
      if (tm / WEAVE_GROUP_M != j / (WEAVE_GROUP_M * tiles_n)) {
        errors++;
        break;
      }
    }
    free(seen);
    free(cover);
  }
  if (weave_total_tiles(t) != total) errors++;
  if (weave_max_owner_tiles(t) != max_tiles) errors++;

  /* Every rank's walk: each (owner, j) exactly once; owners interleaved in rotated order. */
  int *offset = calloc((size_t)world + 1, sizeof(int));
  for (int o = 0; o < world; ++o) offset[o + 1] = offset[o] + weave_owner_tiles(t, o);
  unsigned char *seen = calloc((size_t)total + 1, 1);
  for (int r = 0; r < world; ++r) {
    memset(seen, 0, (size_t)total + 1);
    const int least = weave_owner_tiles(t, world - 1) / unit; /* interleaved rounds, in units */
    int *next_j = calloc((size_t)world, sizeof(int));
    for (int seq = 0; seq < total; ++seq) {
      int o = -1, j = -1;
      if (weave_seq_tile(t, r, seq, &o, &j) != 0 || o < 0 || o >= world || j < 0 || j >= weave_owner_tiles(t, o)) {
        errors++;
        continue;
      }
      if (seen[offset[o] + j]++) errors++;
      /* Each owner's tiles come in order j = 0, 1, ...; in the interleaved rounds step seq goes to
       * the (seq % world)-th owner of the rotation. */
      if (j != next_j[o]++) errors++;
      if (seq / unit < least * world && o != weave_visit_owner(t, r, seq / unit % world)) errors++;
      if (t->pair_n && (seq & 1)) {
        int po, pj;
        if (weave_seq_tile(t, r, seq - 1, &po, &pj) != 0 || po != o || pj != j - 1 || (pj & 1)) errors++;
      }
    }
    free(next_j);
    for (int i = 0; i < total; ++i)
      if (seen[i] != 1) {
        errors++;
        break;
      }
    int o, j;
    if (weave_seq_tile(t, r, total, &o, &j) != -1) errors++;
    if (weave_seq_tile(t, r, total + 100, &o, &j) != -1) errors++;
    /* Rotation: a permutation of the owners, starting at r (OWN_FIRST) or r+1 (OWN_LAST). */
    int *hit = calloc((size_t)world, sizeof(int));
    for (int kk = 0; kk < world; ++kk) hit[weave_visit_owner(t, r, kk)]++;
    for (int kk = 0; kk < world; ++kk)
      if (hit[kk] != 1) errors++;
    free(hit);
    /* OWN_LAST: the walk starts with rank r+1 and r's own tile closes every round; OWN_FIRST: own
     * tile opens every round. */
    int own_k = t->order == WEAVE_ORDER_OWN_LAST ? world - 1 : 0;
    if (t->order == WEAVE_ORDER_OWN_LAST && weave_visit_owner(t, r, 0) != (r + 1) % world) errors++;
    if (weave_visit_owner(t, r, own_k) != r) errors++;
    for (int round = 0; round < least; ++round)
      if (weave_seq_tile(t, r, (round * world + own_k) * unit, &o, &j) != 0 || o != r || j != round * unit) {
        errors++;
        break;
      }
  }
  /* At each rotation step k, the ranks visit distinct owners (no two push to the same owner). */
  for (int k = 0; k < world; ++k) {
    int *hit = calloc((size_t)world, sizeof(int));
    for (int r = 0; r < world; ++r) hit[weave_visit_owner(t, r, k)]++;
    for (int o = 0; o < world; ++o)
      if (hit[o] != 1) errors++;
    free(hit);
  }
  free(seen);
  free(offset);
  return errors;
}

static void test_tilings(void) {
  static const int Ms[] = {1, 2, 7, 63, 64, 65, 127, 128, 129, 200, 513, 1000, 1031, 4096};
  static const int Ns[] = {1, 17, 64, 128, 130, 384, 1000};
  static const int worlds[] = {1, 2, 3, 4, 5, 8};
  static const int tiles[][2] = {{64, 64}, {128, 128}, {128, 256}, {16, 8}};
  int cases = 0, failed = 0;
  for (size_t a = 0; a < sizeof(Ms) / sizeof(Ms[0]); ++a)
    for (size_t b = 0; b < sizeof(Ns) / sizeof(Ns[0]); ++b)
      for (size_t w = 0; w < sizeof(worlds) / sizeof(worlds[0]); ++w)
        for (size_t ti = 0; ti < sizeof(tiles) / sizeof(tiles[0]); ++ti)
          for (int order = 0; order <= 1; ++order)
            for (int pair = 0; pair <= 1; ++pair) {
              if (Ms[a] < worlds[w]) continue; /* plans reject M < world */
              weave_tiling_t t = {Ms[a], Ns[b], worlds[w], tiles[ti][0], tiles[ti][1], order, pair};
              if (pair && weave_tiles_n(&t) % 2) continue; /* plans pair only even tile columns */
              int e = check_tiling(&t);
              cases++;
              if (e) {
                failed++;
                if (failed < 10)
                  fprintf(stderr, "tiling M %d N %d world %d tile %dx%d order %d pair %d: %d errors\n", t.M, t.N,
                          t.world, t.tile_m, t.tile_n, t.order, t.pair_n, e);
              }
            }
  CHECK_MSG(failed == 0, "%d of %d tilings wrong", failed, cases);
  /* A larger world, and M < tile (one partial tile per owner). */
  weave_tiling_t big = {1000, 300, WEAVE_MAX_WORLD, 128, 128, WEAVE_ORDER_OWN_LAST, 0};
  CHECK(check_tiling(&big) == 0);
  big.order = WEAVE_ORDER_OWN_FIRST;
  CHECK(check_tiling(&big) == 0);
  weave_tiling_t small = {24, 40, 3, 128, 256, WEAVE_ORDER_OWN_LAST, 0};
  CHECK(check_tiling(&small) == 0);
  CHECK(weave_total_tiles(&small) == 3);
  /* Spot values: M 1000, world 4 -> 250 rows each, tile 128 -> 2 tile-rows; N 384 / 128 -> 3. */
  weave_tiling_t t = {1000, 384, 4, 128, 128, WEAVE_ORDER_OWN_LAST, 0};
  CHECK(weave_owner_tiles_m(&t, 0) == 2 && weave_tiles_n(&t) == 3 && weave_owner_tiles(&t, 3) == 6);
  CHECK(weave_total_tiles(&t) == 24);
  int o, j;
  CHECK(weave_seq_tile(&t, 3, 0, &o, &j) == 0 && o == 0 && j == 0);
  CHECK(weave_seq_tile(&t, 3, 23, &o, &j) == 0 && o == 3 && j == 5);
  CHECK(weave_seq_tile(&t, 1, 6, &o, &j) == 0 && o == 0 && j == 1); /* round 1, step 2: (r+1+2) % 4 */
  CHECK(weave_seq_tile(&t, 1, 3, &o, &j) == 0 && o == 1 && j == 0); /* own tile closes round 0 */
  CHECK(weave_seq_tile(&t, 1, -1, &o, &j) == -1);
  /* Pairs of tile columns: N 512 / 128 -> 4 tile columns, 2 tile-rows an owner: 8 tiles, 4 pairs. */
  int tm0, tn0;
  weave_tiling_t tp = {1000, 512, 4, 128, 128, WEAVE_ORDER_OWN_LAST, 1};
  CHECK(weave_seq_tile(&tp, 3, 0, &o, &j) == 0 && o == 0 && j == 0);
  CHECK(weave_seq_tile(&tp, 3, 1, &o, &j) == 0 && o == 0 && j == 1);
  CHECK(weave_seq_tile(&tp, 3, 2, &o, &j) == 0 && o == 1 && j == 0);
  CHECK(weave_seq_tile(&tp, 3, 9, &o, &j) == 0 && o == 0 && j == 3); /* round 1: the owner's 2nd pair */
  weave_owner_tile_coords(&tp, 0, 2, &tm0, &tn0);
  CHECK(tm0 == 1 && tn0 == 0); /* pair 1: the group's next tile-row, columns 0 and 1 */
  weave_owner_tile_coords(&tp, 0, 5, &tm0, &tn0);
  CHECK(tm0 == 0 && tn0 == 3); /* pair 2: the next pair of columns */
  /* Grouped order within an owner: column-major inside a group of WEAVE_GROUP_M tile-rows. */
  weave_tiling_t g = {64 * 20, 64 * 3, 1, 64, 64, 0, 0};
  int tm, tn;
  weave_owner_tile_coords(&g, 0, 0, &tm, &tn);
  CHECK(tm == 0 && tn == 0);
  weave_owner_tile_coords(&g, 0, 1, &tm, &tn);
  CHECK(tm == 1 && tn == 0);
  weave_owner_tile_coords(&g, 0, WEAVE_GROUP_M, &tm, &tn);
  CHECK(tm == 0 && tn == 1);
  weave_owner_tile_coords(&g, 0, 3 * WEAVE_GROUP_M, &tm, &tn);
  CHECK(tm == WEAVE_GROUP_M && tn == 0);
  /* Last, partial group (20 = 8 + 8 + 4 tile-rows). */
  weave_owner_tile_coords(&g, 0, 6 * WEAVE_GROUP_M + 4, &tm, &tn);
  CHECK(tm == 16 && tn == 1);
  CHECK(weave_cdiv(0, 64) == 0 && weave_cdiv(1, 64) == 1 && weave_cdiv(64, 64) == 1 && weave_cdiv(65, 64) == 2);
}

static void test_epochs(void) {
  CHECK(weave_epoch_ge(0, 0));
  CHECK(weave_epoch_ge(1, 0));
  CHECK(!weave_epoch_ge(0, 1));
  CHECK(weave_epoch_ge(0, 0xFFFFFFFFu)); /* wrapped: 0 comes after 0xFFFFFFFF */
  CHECK(!weave_epoch_ge(0xFFFFFFFFu, 0));
  CHECK(weave_epoch_ge(5, 0xFFFFFFF0u));
  CHECK(!weave_epoch_ge(0xFFFFFFF0u, 5));
  CHECK(weave_epoch_ge(0x80000000u, 0x7FFFFFFFu));
  CHECK(!weave_epoch_ge(0x7FFFFFFFu, 0x80000000u));
  CHECK(weave_epoch_ge(0xFFFFFFFFu, 0xFFFFFFFFu));
  /* Any a at distance d in [0, 2^31) after b is reached, before it is not. */
  uint32_t s = 0x9e3779b9u;
  int bad = 0;
  for (int i = 0; i < 100000; ++i) {
    s = s * 1664525u + 1013904223u;
    uint32_t b = s;
    s = s * 1664525u + 1013904223u;
    uint32_t d = s & 0x7FFFFFFFu;
    if (!weave_epoch_ge(b + d, b)) bad++;
    if (d && weave_epoch_ge(b, b + d)) bad++;
  }
  CHECK_MSG(bad == 0, "%d wrong epoch comparisons", bad);
}

/* AllGather + GEMM: each block's pushes per call and first owner against counting rank by rank; each
 * rank's tile order visits every tile once, its own blocks first, then the blocks in the order their
 * rows arrive (owners r-1, r-2, ..., wrapping: the distance back from r never decreases). */
static void test_ag_schedule(void) {
  long cases = 0;
  const int block_rows[3] = {128, 4, 1};
  for (int bi = 0; bi < 3; ++bi)
    for (int world = 1; world <= 9; ++world)
      for (int M = 1; M <= 400; M += (M < 40 ? 1 : 37)) {
        const int br = block_rows[bi], blocks_m = weave_cdiv(M, br);
        for (int b = 0; b < blocks_m; ++b) {
          int n = 0, first = -1;
          for (int r = 0; r < world; ++r) {
            int rb, rows;
            weave_split_rows_of(M, world, r, &rb, &rows);
            if (rows && rb < (b + 1) * br && rb + rows > b * br) {
              if (first < 0) first = r;
              ++n;
            }
          }
          const uint32_t info = weave_ag_row_info(M, world, br, b);
          CHECK((int)(info & 0xffffu) == n && (int)(info >> 16) == first && n >= 1);
          ++cases;
        }
        for (int rank = 0; rank < world; ++rank) {
          int rb, rows, first, n_own;
          weave_split_rows_of(M, world, rank, &rb, &rows);
          weave_ag_own_blocks(rb, rows, blocks_m, br, &first, &n_own);
          for (int tiles_n = 1; tiles_n <= 3; ++tiles_n)
            for (int gi = 0; gi < 4; ++gi) {
              /* groups of 1, 4 and 16 rows, and whole columns (weave_hgemm_group_rows on small grids:
               * the rows rounded up to even) */
              const int group_m = gi < 3 ? 1 << (2 * gi) : (blocks_m + 1) & ~1;
              const int total = blocks_m * tiles_n;
              char *seen = (char *)calloc((size_t)total, 1);
              int *order = (int *)malloc(sizeof(int) * (size_t)blocks_m), norder = 0, ok = 1;
              char *row_seen = (char *)calloc((size_t)blocks_m, 1);
              for (int seq = 0; seq < total; ++seq) {
                int tm, tn;
                weave_ag_tile_coords(seq, blocks_m, tiles_n, group_m, first, n_own, &tm, &tn);
                if (tm < 0 || tm >= blocks_m || tn < 0 || tn >= tiles_n || seen[tm * tiles_n + tn]) {
                  ok = 0;
                  break;
                }
                seen[tm * tiles_n + tn] = 1;
                if (!row_seen[tm]) {
                  row_seen[tm] = 1;
                  order[norder++] = tm;
                }
              }
              CHECK(ok && norder == blocks_m);
              for (int i = 0; ok && i < n_own; ++i) CHECK(order[i] == first + i);
              int last_d = 0;
              for (int i = n_own; ok && i < norder; ++i) {
                const int b = order[i], last_row = ((b + 1) * br < M ? (b + 1) * br : M) - 1;
                const int d = (rank - weave_row_owner(M, world, last_row) + world) % world;
                if (rows) CHECK(d >= last_d && d >= 1); /* not the rank's own rows, in arrival order */
                last_d = d;
              }
              free(seen);
              free(order);
              free(row_seen);
              ++cases;
            }
        }
      }
  CHECK(cases > 20000);
}

/* weave_paired_tile_coords: with an even count along the pairing, every tile once, and the two
 * tiles of a pair on one tile column (pair_n 0) or one tile row (pair_n 1), side by side. */
static void test_paired_tiles(void) {
  long cases = 0;
  for (int pair_n = 0; pair_n < 2; ++pair_n)
    for (int tiles_m = 1; tiles_m <= 20; ++tiles_m)
      for (int tiles_n = 1; tiles_n <= 20; ++tiles_n) {
        if ((pair_n ? tiles_n : tiles_m) % 2) continue;
        for (int group_m = 2; group_m <= 24; group_m += 2) {
          const int total = tiles_m * tiles_n;
          char *seen = (char *)calloc((size_t)total, 1);
          int ok = 1;
          for (int seq = 0; seq < total && ok; seq += 2) {
            int m0, n0, m1, n1;
            weave_paired_tile_coords(seq, tiles_m, tiles_n, group_m, pair_n, &m0, &n0);
            weave_paired_tile_coords(seq + 1, tiles_m, tiles_n, group_m, pair_n, &m1, &n1);
            ok = m0 >= 0 && m0 < tiles_m && n0 >= 0 && n0 < tiles_n && m1 >= 0 && m1 < tiles_m && n1 >= 0 &&
                 n1 < tiles_n && !seen[m0 * tiles_n + n0] && !seen[m1 * tiles_n + n1] &&
                 (pair_n ? m0 == m1 && n1 == n0 + 1 : n0 == n1 && m1 == m0 + 1);
            if (ok) seen[m0 * tiles_n + n0] = seen[m1 * tiles_n + n1] = 1;
          }
          CHECK_MSG(ok, "pair_n %d, %d x %d tiles, group %d", pair_n, tiles_m, tiles_n, group_m);
          free(seen);
          ++cases;
        }
      }
  CHECK(cases > 1000);
}

/* The multiply-high divider against the division: every divisor up to 4096 on dividends near 0, near
 * its multiples and near 2^31, random pairs over the whole range; then the grouped order built on it
 * against weave_grouped_tile_coords on every tile of grids up to 70 x 70 and groups up to 72. */
static void test_divider(void) {
  long bad = 0, cases = 0;
  uint32_t s = 0x2545f491u;
  for (int d = 1; d <= 4096; ++d) {
    const weave_divider_t v = weave_divider(d);
    for (int i = 0; i < 64; ++i) {
      s = s * 1664525u + 1013904223u;
      const int ns[6] = {i, d * i, d * i + d - 1, 0x7fffffff - i, (int)(s >> 1), (int)((s >> 1) / d * d)};
      for (int j = 0; j < 6; ++j) {
        int r;
        const int q = weave_divide(v, ns[j], &r);
        bad += q != ns[j] / d || r != ns[j] % d;
        ++cases;
      }
    }
  }
  for (int i = 0; i < 1000000; ++i) {
    s = s * 1664525u + 1013904223u;
    const int d = (int)(s >> 1) >> (s & 31) | 1, n = (int)((s * 2654435761u) >> 1);
    int r;
    const int q = weave_divide(weave_divider(d), n, &r);
    bad += q != n / d || r != n % d;
    ++cases;
  }
  CHECK_MSG(bad == 0, "%ld of %ld divisions wrong", bad, cases);
  long wrong = 0, tiles = 0;
  for (int tiles_m = 1; tiles_m <= 70; tiles_m += (tiles_m < 20 ? 1 : 7))
    for (int tiles_n = 1; tiles_n <= 70; tiles_n += (tiles_n < 10 ? 1 : 9))
      for (int group_m = 1; group_m <= 72; group_m += (group_m < 8 ? 1 : 5)) {
        const weave_grouped_order_t o = weave_grouped_order(tiles_m, tiles_n, group_m);
        for (int seq = 0; seq < tiles_m * tiles_n; ++seq) {
          int tm, tn, fm, fn;
          weave_grouped_tile_coords(seq, tiles_m, tiles_n, group_m, &tm, &tn);
          weave_grouped_order_coords(&o, seq, &fm, &fn);
          wrong += tm != fm || tn != fn;
          ++tiles;
        }
      }
  CHECK_MSG(wrong == 0, "%ld of %ld tiles placed differently by the grouped order's dividers", wrong, tiles);
}

int main(void) {
  test_divider();
  test_row_split();
  test_paired_tiles();
  test_ag_schedule();
  test_tilings();
  test_epochs();
  return check_summary("test_schedule");
}
