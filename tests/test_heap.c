/* CPU test of the symmetric-heap allocator (src/heap.c): alignment, reserved prefix, determinism
 * across ranks, exhaustion, free/reuse, coalescing, bad frees, and a randomized stress run against a
 * shadow model. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/heap.h"

#define ALIGN 256
#define RESERVED 1024

static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rng(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Structural invariants: blocks sorted, contiguous, cover [reserved, size), aligned, no two adjacent
 * free blocks (coalesced), in_use = sum of used blocks. */
static int heap_consistent(const weave_heap_t *h, size_t reserved) {
  if (h->count < 1 || h->count > h->capacity) return 0;
  size_t pos = reserved, used = 0;
  for (int i = 0; i < h->count; ++i) {
    const weave_heap_block_t *b = &h->blocks[i];
    if (b->offset != pos || b->size == 0 || b->offset % h->align || b->size % h->align) return 0;
    if (i > 0 && !b->used && !h->blocks[i - 1].used) return 0;
    if (b->used) used += b->size;
    pos += b->size;
  }
  return pos == h->size && used == h->in_use;
}

static void test_init(void) {
  weave_heap_t h;
  CHECK(weave_heap_init(NULL, 1 << 20, 0, ALIGN) == -1);
  CHECK(weave_heap_init(&h, 1 << 20, 0, 0) == -1);
  CHECK(weave_heap_init(&h, 1 << 20, 0, 100) == -1);   /* not a power of two */
  CHECK(weave_heap_init(&h, 1024, 1024, ALIGN) == -1); /* nothing left after the prefix */
  CHECK(weave_heap_init(&h, 100, 0, ALIGN) == -1);     /* rounds down to 0 */
  CHECK(weave_heap_init(&h, 1 << 20, RESERVED, ALIGN) == 0);
  CHECK(h.size == (1u << 20) && h.in_use == 0);
  CHECK(weave_heap_largest_free(&h) == (1u << 20) - RESERVED);
  CHECK(heap_consistent(&h, RESERVED));
  weave_heap_fini(&h);
  weave_heap_fini(NULL);

  /* An unaligned reserved prefix is rounded up; an unaligned size rounded down. */
  CHECK(weave_heap_init(&h, (1 << 20) + 100, 1000, ALIGN) == 0);
  CHECK(h.size == (1u << 20));
  size_t off = 0;
  CHECK(weave_heap_alloc(&h, 1, &off) == 0);
  CHECK_MSG(off == 1024, "first offset %zu", off);
  CHECK(heap_consistent(&h, 1024));
  weave_heap_fini(&h);
}

static void test_alignment_and_reserved(void) {
  weave_heap_t h;
  CHECK(weave_heap_init(&h, 64 << 20, RESERVED, ALIGN) == 0);
  size_t offs[200];
  int bad_align = 0, bad_reserved = 0, overlap = 0;
  size_t sizes[200];
  for (int i = 0; i < 200; ++i) {
    sizes[i] = 1 + (size_t)(rng() % 70000);
    CHECK(weave_heap_alloc(&h, sizes[i], &offs[i]) == 0);
    if (offs[i] % ALIGN) bad_align++;
    if (offs[i] < RESERVED) bad_reserved++;
    for (int j = 0; j < i; ++j)
      if (offs[i] < offs[j] + sizes[j] && offs[j] < offs[i] + sizes[i]) overlap++;
  }
  CHECK_MSG(bad_align == 0, "%d offsets not %d-aligned", bad_align, ALIGN);
  CHECK_MSG(bad_reserved == 0, "%d offsets inside the reserved prefix", bad_reserved);
  CHECK_MSG(overlap == 0, "%d overlapping pairs", overlap);
  CHECK(offs[0] == RESERVED); /* first fit starts right after the prefix */
  CHECK(heap_consistent(&h, RESERVED));
  weave_heap_fini(&h);
}

/* 8 "ranks" running the same request sequence get the same offsets. */
static void test_determinism(void) {
  enum { RANKS = 8, OPS = 2000 };
  weave_heap_t h[RANKS];
  for (int r = 0; r < RANKS; ++r) CHECK(weave_heap_init(&h[r], 16 << 20, RESERVED, ALIGN) == 0);
  size_t live[RANKS][64];
  int nlive = 0, mismatches = 0, rc_mismatches = 0;
  for (int op = 0; op < OPS; ++op) {
    uint64_t x = rng();
    if (nlive < 64 && (nlive == 0 || x % 3 != 0)) {
      size_t bytes = 1 + (size_t)((x >> 8) % (1 << 20));
      int rc0 = 0;
      for (int r = 0; r < RANKS; ++r) {
        size_t off = 0;
        int rc = weave_heap_alloc(&h[r], bytes, &off);
        if (r == 0)
          rc0 = rc;
        else if (rc != rc0)
          rc_mismatches++;
        if (rc == 0) {
          if (r > 0 && off != live[0][nlive]) mismatches++;
          live[r][nlive] = off;
        }
      }
      if (rc0 == 0) nlive++;
    } else {
      int k = (int)((x >> 8) % (uint64_t)nlive);
      for (int r = 0; r < RANKS; ++r) {
        if (weave_heap_free(&h[r], live[r][k]) != 0) rc_mismatches++;
        live[r][k] = live[r][nlive - 1];
      }
      nlive--;
    }
  }
  CHECK_MSG(mismatches == 0, "%d offsets differ between ranks", mismatches);
  CHECK_MSG(rc_mismatches == 0, "%d results differ between ranks (or frees failed)", rc_mismatches);
  for (int r = 1; r < RANKS; ++r) CHECK(h[r].in_use == h[0].in_use && h[r].count == h[0].count);
  for (int r = 0; r < RANKS; ++r) {
    CHECK(heap_consistent(&h[r], RESERVED));
    weave_heap_fini(&h[r]);
  }
}

static void test_exhaustion(void) {
  weave_heap_t h;
  const size_t size = 1 << 20;
  CHECK(weave_heap_init(&h, size, RESERVED, ALIGN) == 0);
  size_t cap = size - RESERVED, off = 12345;
  /* Larger than what is left, larger than the whole heap: -2, nothing changes. */
  CHECK(weave_heap_alloc(&h, cap + 1, &off) == -2);
  CHECK_MSG(weave_heap_alloc(&h, size + 1, &off) == -2, "a request larger than the heap is exhaustion");
  CHECK(weave_heap_alloc(&h, (size_t)-1, &off) == -2);
  CHECK(off == 12345);
  CHECK(h.in_use == 0 && h.count == 1);
  /* Exactly everything fits. */
  CHECK(weave_heap_alloc(&h, cap, &off) == 0);
  CHECK(off == RESERVED && h.in_use == cap);
  CHECK(weave_heap_largest_free(&h) == 0);
  size_t off2 = 777;
  CHECK(weave_heap_alloc(&h, 1, &off2) == -2);
  CHECK(off2 == 777 && h.in_use == cap && h.count == 1);
  CHECK(weave_heap_free(&h, off) == 0);
  CHECK(h.in_use == 0);

  /* Fill with 4 KiB blocks until it fails; the failure leaves the state untouched. */
  int n = 0;
  size_t first = 0;
  while (weave_heap_alloc(&h, 4096, &off) == 0) {
    if (n == 0) first = off;
    n++;
  }
  CHECK_MSG((size_t)n == cap / 4096, "%d blocks of 4 KiB (expected %zu)", n, cap / 4096);
  weave_heap_t snap = h;
  weave_heap_block_t *copy = malloc(sizeof(*copy) * (size_t)h.count);
  memcpy(copy, h.blocks, sizeof(*copy) * (size_t)h.count);
  CHECK(weave_heap_alloc(&h, 4096, &off) == -2);
  CHECK(weave_heap_alloc(&h, 256, &off) == (cap % 4096 >= 256 ? 0 : -2));
  if (cap % 4096 >= 256) CHECK(weave_heap_free(&h, off) == 0);
  CHECK(h.count == snap.count && h.in_use == snap.in_use);
  CHECK(memcmp(copy, h.blocks, sizeof(*copy) * (size_t)h.count) == 0);
  free(copy);
  CHECK(first == RESERVED);
  CHECK(heap_consistent(&h, RESERVED));
  weave_heap_fini(&h);
}

static void test_free_reuse_coalesce(void) {
  weave_heap_t h;
  CHECK(weave_heap_init(&h, 1 << 20, RESERVED, ALIGN) == 0);
  size_t a, b, c, d, e;
  CHECK(weave_heap_alloc(&h, 1000, &a) == 0); /* 1024 */
  CHECK(weave_heap_alloc(&h, 1000, &b) == 0);
  CHECK(weave_heap_alloc(&h, 1000, &c) == 0);
  CHECK(weave_heap_alloc(&h, 1000, &d) == 0);
  CHECK(b == a + 1024 && c == b + 1024 && d == c + 1024);
  CHECK(h.in_use == 4 * 1024);
  /* Free + reuse: the same offset comes back for the same size. */
  CHECK(weave_heap_free(&h, b) == 0);
  CHECK(h.in_use == 3 * 1024);
  CHECK(weave_heap_alloc(&h, 1024, &e) == 0);
  CHECK(e == b);
  /* A smaller request takes the hole, first fit. */
  CHECK(weave_heap_free(&h, e) == 0);
  CHECK(weave_heap_alloc(&h, 1, &e) == 0);
  CHECK(e == b);
  CHECK(weave_heap_free(&h, e) == 0);
  /* Coalescing: free b and c (neighbours), a 2048-byte request fits at b. */
  CHECK(weave_heap_free(&h, c) == 0);
  CHECK(heap_consistent(&h, RESERVED));
  CHECK(weave_heap_alloc(&h, 2048, &e) == 0);
  CHECK(e == b);
  CHECK(weave_heap_free(&h, e) == 0);
  /* Coalescing with both neighbours: free a, then d, then the middle is already merged: 4 blocks fit. */
  CHECK(weave_heap_free(&h, a) == 0);
  CHECK(weave_heap_free(&h, d) == 0);
  CHECK(h.in_use == 0 && h.count == 1);
  CHECK(weave_heap_largest_free(&h) == (1u << 20) - RESERVED);
  /* Coalesce with previous and next at once: x [y] z, free x and z first, then y. */
  size_t x, y, z, w;
  CHECK(weave_heap_alloc(&h, 512, &x) == 0);
  CHECK(weave_heap_alloc(&h, 512, &y) == 0);
  CHECK(weave_heap_alloc(&h, 512, &z) == 0);
  CHECK(weave_heap_alloc(&h, 512, &w) == 0); /* keeps z's right neighbour used */
  CHECK(weave_heap_free(&h, x) == 0);
  CHECK(weave_heap_free(&h, z) == 0);
  CHECK(weave_heap_free(&h, y) == 0);
  CHECK(heap_consistent(&h, RESERVED));
  CHECK(h.count == 3); /* [x y z] free, w used, tail free */
  CHECK(weave_heap_alloc(&h, 1536, &e) == 0);
  CHECK(e == x);
  CHECK(weave_heap_free(&h, e) == 0);
  CHECK(weave_heap_free(&h, w) == 0);
  CHECK(h.count == 1 && h.in_use == 0);
  weave_heap_fini(&h);
}

static void test_bad_calls(void) {
  weave_heap_t h;
  CHECK(weave_heap_init(&h, 1 << 20, RESERVED, ALIGN) == 0);
  size_t off = 99, a;
  CHECK(weave_heap_alloc(&h, 0, &off) == -1);
  CHECK(off == 99);
  CHECK(weave_heap_alloc(NULL, 16, &off) == -1);
  CHECK(weave_heap_alloc(&h, 16, NULL) == -1);
  CHECK(weave_heap_alloc(&h, 300, &a) == 0);
  CHECK(weave_heap_free(&h, a + 256) == -1); /* inside an allocation, not its start */
  CHECK(weave_heap_free(&h, a + 1) == -1);
  CHECK(weave_heap_free(&h, 0) == -1);       /* reserved prefix */
  CHECK(weave_heap_free(&h, a + 512) == -1); /* start of the free tail */
  CHECK(weave_heap_free(&h, (size_t)1 << 40) == -1);
  CHECK(weave_heap_free(NULL, a) == -1);
  CHECK(h.in_use == 512);
  CHECK(weave_heap_free(&h, a) == 0);
  CHECK(weave_heap_free(&h, a) == -1); /* double free */
  CHECK(h.in_use == 0);
  CHECK(heap_consistent(&h, RESERVED));
  CHECK(weave_heap_largest_free(NULL) == 0);
  weave_heap_fini(&h);
}

/* Randomized alloc/free against a shadow list of live (offset, size) pairs. */
static void test_stress(void) {
  enum { OPS = 20000, MAXLIVE = 300 };
  const size_t size = 32 << 20;
  weave_heap_t h;
  CHECK(weave_heap_init(&h, size, RESERVED, ALIGN) == 0);
  size_t off[MAXLIVE], sz[MAXLIVE];
  int nlive = 0, overlap = 0, misaligned = 0, out_of_range = 0, acct = 0, bad_free = 0, inconsistent = 0;
  int allocs = 0, fails = 0;
  size_t shadow_in_use = 0;
  for (int op = 0; op < OPS; ++op) {
    uint64_t x = rng();
    if (nlive < MAXLIVE && (nlive == 0 || (x & 1))) {
      size_t bytes = (x >> 8) % 8 == 0 ? 1 + (size_t)((x >> 16) % (4 << 20)) : 1 + (size_t)((x >> 16) % 20000);
      size_t o = 0;
      int rc = weave_heap_alloc(&h, bytes, &o);
      if (rc == 0) {
        allocs++;
        if (o % ALIGN) misaligned++;
        if (o < RESERVED || o + bytes > size) out_of_range++;
        for (int i = 0; i < nlive; ++i)
          if (o < off[i] + sz[i] && off[i] < o + bytes) overlap++;
        off[nlive] = o;
        sz[nlive] = bytes;
        nlive++;
        shadow_in_use += (bytes + ALIGN - 1) / ALIGN * ALIGN;
      } else {
        fails++;
        if (rc != -2) bad_free++;
        /* Exhaustion must be real: no free block large enough. */
        if (weave_heap_largest_free(&h) >= (bytes + ALIGN - 1) / ALIGN * ALIGN) acct++;
      }
    } else {
      int k = (int)((x >> 8) % (uint64_t)nlive);
      if (weave_heap_free(&h, off[k]) != 0) bad_free++;
      shadow_in_use -= (sz[k] + ALIGN - 1) / ALIGN * ALIGN;
      off[k] = off[nlive - 1];
      sz[k] = sz[nlive - 1];
      nlive--;
    }
    if (h.in_use != shadow_in_use) acct++;
    if (op % 64 == 0 && !heap_consistent(&h, RESERVED)) inconsistent++;
  }
  CHECK_MSG(overlap == 0, "%d overlaps", overlap);
  CHECK_MSG(misaligned == 0, "%d misaligned", misaligned);
  CHECK_MSG(out_of_range == 0, "%d out of range", out_of_range);
  CHECK_MSG(acct == 0, "%d accounting errors", acct);
  CHECK_MSG(bad_free == 0, "%d unexpected return codes", bad_free);
  CHECK_MSG(inconsistent == 0, "%d inconsistent states", inconsistent);
  CHECK_MSG(allocs > 1000 && fails > 0, "allocs %d fails %d: the stress should hit exhaustion too", allocs, fails);
  /* Free everything: one block again. */
  for (int i = 0; i < nlive; ++i) CHECK(weave_heap_free(&h, off[i]) == 0);
  CHECK(h.in_use == 0 && h.count == 1);
  CHECK(weave_heap_largest_free(&h) == size - RESERVED);
  weave_heap_fini(&h);
}

int main(void) {
  test_init();
  test_alignment_and_reserved();
  test_determinism();
  test_exhaustion();
  test_free_reuse_coalesce();
  test_bad_calls();
  test_stress();
  return check_summary("test_heap");
}
