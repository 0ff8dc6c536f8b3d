/*
 * Types shared by host code (C) and device code (CUDA): the per-rank view of the team that kernels
 * take by value, and the error record a kernel leaves when a bounded wait expires; and the two things
 * every header shared by C and CUDA needs: the host-device qualifier WEAVE_HOST_DEVICE and the
 * wrap-safe epoch comparisons.
 */
#ifndef WEAVE_DEVICE_TYPES_H
#define WEAVE_DEVICE_TYPES_H

#include <stdint.h>

/* Qualifier of functions that C host code, the CPU tests and CUDA kernels all compile (write
 * `static inline WEAVE_HOST_DEVICE`): __host__ __device__ under nvcc, nothing in C. */
#ifdef __CUDACC__
#define WEAVE_HOST_DEVICE __host__ __device__
#else
#define WEAVE_HOST_DEVICE
#endif

/* Wrap-safe epoch comparisons: a is at or after b when (int32_t)(a - b) >= 0. Valid while the two
 * epochs are less than 2^31 apart (2^63 for the 64-bit forms). */
static inline WEAVE_HOST_DEVICE int weave_epoch_ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }
static inline WEAVE_HOST_DEVICE int weave_epoch_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }
static inline WEAVE_HOST_DEVICE int weave_epoch_ge64(uint64_t a, uint64_t b) { return (int64_t)(a - b) >= 0; }
static inline WEAVE_HOST_DEVICE int weave_epoch_gt64(uint64_t a, uint64_t b) { return (int64_t)(a - b) > 0; }

#define WEAVE_MAX_WORLD 64

/* Codes of weave_device_error_t.code (0: no error). */
#define WEAVE_DEVICE_OK 0u
#define WEAVE_DEVICE_TIMEOUT 1u /* a wait's bound expired */
#define WEAVE_DEVICE_ABORTED 2u /* a rank aborted the team: written by weave_team_abort, not by a wait */

/* Comparisons of weave_wait_until. GE/GT/LE/LT compare epochs wrap-safely: a - b as int32. */
#define WEAVE_CMP_EQ 0
#define WEAVE_CMP_NE 1
#define WEAVE_CMP_GE 2
#define WEAVE_CMP_GT 3
#define WEAVE_CMP_LE 4
#define WEAVE_CMP_LT 5

/* Written once (first failing wait wins, by CAS on `code`) into the rank's heap header; read and
 * cleared by weave_team_sync. Every other wait of the rank sees code != 0 and gives up at once, so a
 * kernel with one lost flag ends within one timeout instead of one timeout per wait. An abort
 * (weave_team_abort) writes only `code` (WEAVE_DEVICE_ABORTED) into every rank's record, after the
 * header's aborted_by, so that the same rule stops every rank's waits at once. */
typedef struct {
  uint32_t code;
  int32_t rank;       /* rank that waited */
  int32_t peer;       /* rank whose write was awaited (-1: not known) */
  int32_t item;       /* tile or other item the wait was for (-1: not known) */
  uint64_t flag_addr; /* address polled */
  uint64_t expected;  /* value compared against */
  uint64_t observed;  /* last value read */
  uint32_t cmp;       /* WEAVE_CMP_* */
  uint32_t pad_;
} weave_device_error_t;

/* Layout of the start of every rank's symmetric heap (allocations start after it). */
typedef struct {
  weave_device_error_t error; /* 48 bytes */
  uint32_t barrier_epoch;     /* device barriers this rank has entered */
  uint32_t aborted_by;        /* 0, or 1 + the rank that aborted the team (weave_team_abort) */
  uint32_t pad_[2];
  uint32_t barrier_flags[WEAVE_MAX_WORLD]; /* [src]: last barrier epoch src reached */
} weave_heap_header_t;

#define WEAVE_HEAP_RESERVED 1024 /* bytes at the start of each heap kept for the header */

/* A rank's view of its team, passed to kernels by value (weave_team_device_view). */
typedef struct {
  void *const *heap_bases; /* device table: heap_bases[p] is peer p's heap as seen from this rank */
  void *heap_base;         /* this rank's heap (== heap_bases[rank]) */
  int rank;
  int world;
  uint64_t timeout_ns; /* bound of every wait */
  /* a node or rail team of a plan past one node: the error code in this rank's heap header of the
   * team it was split from, whose abort stops this team's waits too (NULL for any other team) */
  const uint32_t *parent_error;
} weave_device_team_t;

#endif /* WEAVE_DEVICE_TYPES_H */
