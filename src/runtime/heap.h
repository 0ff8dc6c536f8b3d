/*
 * Symmetric-heap allocator: pure host logic over offsets, no device calls, so it is tested on the
 * CPU. Every rank runs the same deterministic first-fit over the same sequence of requests, so equal
 * requests give equal offsets everywhere; weave_malloc checks that across ranks.
 */
#ifndef WEAVE_HEAP_H
#define WEAVE_HEAP_H

#include <stddef.h>

typedef struct {
  size_t offset, size;
  int used;
} weave_heap_block_t;

typedef struct {
  size_t size;                /* total bytes */
  size_t align;               /* every offset and size is a multiple */
  weave_heap_block_t *blocks; /* sorted by offset, covering [reserved, size) */
  int count, capacity;
  size_t in_use;
} weave_heap_t;

/* Returns 0, or -1 when the arguments are invalid or memory for the block list is missing. */
int weave_heap_init(weave_heap_t *h, size_t size, size_t reserved, size_t align);
void weave_heap_fini(weave_heap_t *h);
/* 0 and *offset on success; -1 bad size (0); -2 exhausted. */
int weave_heap_alloc(weave_heap_t *h, size_t bytes, size_t *offset);
/* 0 on success; -1 when offset is not the start of a live allocation. */
int weave_heap_free(weave_heap_t *h, size_t offset);
size_t weave_heap_largest_free(const weave_heap_t *h);

#endif
