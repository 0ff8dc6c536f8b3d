/* First-fit allocator over offsets; see heap.h for why it is deterministic. */
#include "runtime/heap.h"

#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int weave_heap_init(weave_heap_t *h, size_t size, size_t reserved, size_t align) {
  if (!h || align == 0 || (align & (align - 1)) != 0) return -1;
  memset(h, 0, sizeof(*h));
  reserved = round_up(reserved, align);
  size = size / align * align;
  if (size <= reserved) return -1;
  h->capacity = 16;
  h->blocks = (weave_heap_block_t *)calloc((size_t)h->capacity, sizeof(*h->blocks));
  if (!h->blocks) return -1;
  h->size = size;
  h->align = align;
  h->blocks[0].offset = reserved;
  h->blocks[0].size = size - reserved;
  h->blocks[0].used = 0;
  h->count = 1;
  return 0;
}

void weave_heap_fini(weave_heap_t *h) {
  if (!h) return;
  free(h->blocks);
  memset(h, 0, sizeof(*h));
}

static int grow(weave_heap_t *h) {
  if (h->count < h->capacity) return 0;
  int cap = h->capacity * 2;
  weave_heap_block_t *b = (weave_heap_block_t *)realloc(h->blocks, (size_t)cap * sizeof(*b));
  if (!b) return -1;
  h->blocks = b;
  h->capacity = cap;
  return 0;
}

int weave_heap_alloc(weave_heap_t *h, size_t bytes, size_t *offset) {
  if (!h || !offset || bytes == 0) return -1;
  if (bytes > h->size) return -2; /* can never fit: exhaustion (also keeps round_up from overflowing) */
  size_t need = round_up(bytes, h->align);
  for (int i = 0; i < h->count; ++i) {
    weave_heap_block_t *b = &h->blocks[i];
    if (b->used || b->size < need) continue;
    if (b->size > need) { /* split: the tail stays free */
      if (grow(h) != 0) return -2;
      b = &h->blocks[i];
      memmove(&h->blocks[i + 2], &h->blocks[i + 1], (size_t)(h->count - i - 1) * sizeof(*b));
      h->blocks[i + 1].offset = b->offset + need;
      h->blocks[i + 1].size = b->size - need;
      h->blocks[i + 1].used = 0;
      h->count++;
      b->size = need;
    }
    b->used = 1;
    h->in_use += b->size;
    *offset = b->offset;
    return 0;
  }
  return -2;
}

static void merge_with_next(weave_heap_t *h, int i) {
  if (i < 0 || i + 1 >= h->count) return;
  if (h->blocks[i].used || h->blocks[i + 1].used) return;
  h->blocks[i].size += h->blocks[i + 1].size;
  memmove(&h->blocks[i + 1], &h->blocks[i + 2], (size_t)(h->count - i - 2) * sizeof(h->blocks[0]));
  h->count--;
}

int weave_heap_free(weave_heap_t *h, size_t offset) {
  if (!h) return -1;
  for (int i = 0; i < h->count; ++i) {
    if (h->blocks[i].offset != offset) continue;
    if (!h->blocks[i].used) return -1;
    h->blocks[i].used = 0;
    h->in_use -= h->blocks[i].size;
    merge_with_next(h, i);
    merge_with_next(h, i - 1);
    return 0;
  }
  return -1;
}

size_t weave_heap_largest_free(const weave_heap_t *h) {
  size_t best = 0;
  for (int i = 0; h && i < h->count; ++i)
    if (!h->blocks[i].used && h->blocks[i].size > best) best = h->blocks[i].size;
  return best;
}
