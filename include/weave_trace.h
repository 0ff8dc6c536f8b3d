/*
 * Per-tile trace of the fused kernel ("see where the time goes").
 *
 * When tracing is on, the kernel records one event per tile per role (GEMM, WAIT, REDUCE, SEND) into
 * a device buffer of weave_trace_event_t; the host copies each rank's buffer back and hands the
 * arrays to the functions below, which write
 *   - a Chrome trace-event JSON (open in ui.perfetto.dev or chrome://tracing): one process per rank,
 *     one thread per block, one complete event ("X") per recorded event;
 *   - a CSV (one line per event) that scripts/trace_png.sh turns into a PNG timeline;
 *   - a per-rank summary (busy fractions of the GEMM and communication blocks, wait time, tail).
 *
 * Times are %globaltimer nanoseconds. Every GPU has its own %globaltimer: events of different GPUs
 * line up only as well as those clocks do (they are all driven from the host's clock at start-up, so
 * typically within a few microseconds).
 *
 * An event is recorded only when t_begin != 0 and t_end >= t_begin; anything else (e.g. a slot of a
 * zero-filled buffer that no block wrote) is skipped by every function here.
 *
 * This header is plain C (C11) and is also included by CUDA code.
 */
#ifndef WEAVE_TRACE_H
#define WEAVE_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weave_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  WEAVE_TRACE_GEMM = 0,
  WEAVE_TRACE_WAIT = 1,
  WEAVE_TRACE_REDUCE = 2,
  WEAVE_TRACE_SEND = 3
} weave_trace_role_t;

#define WEAVE_TRACE_ROLES 4

typedef struct {           /* 32 bytes, written by one thread per block per tile */
  uint64_t t_begin, t_end; /* %globaltimer ns */
  int32_t block;           /* blockIdx.x */
  int16_t role;            /* weave_trace_role_t */
  int16_t rank;            /* rank that ran the block */
  int32_t tile;            /* tile index (owner-local) */
  int16_t peer;            /* target / awaited rank (-1 none) */
  int16_t pad;
} weave_trace_event_t;

#ifdef __cplusplus
static_assert(sizeof(weave_trace_event_t) == 32, "weave_trace_event_t must be 32 bytes");
#else
_Static_assert(sizeof(weave_trace_event_t) == 32, "weave_trace_event_t must be 32 bytes");
#endif

/* Per-rank summary of one rank's events. Durations are in ns. */
typedef struct {
  int rank;                        /* rank field of the first recorded event (-1 when none) */
  size_t events;                   /* recorded events */
  size_t skipped;                  /* entries skipped (t_begin == 0 or t_end < t_begin) */
  size_t count[WEAVE_TRACE_ROLES]; /* recorded events per role (index weave_trace_role_t) */
  uint64_t t_first, t_last;        /* earliest begin, latest end (%globaltimer ns) */
  uint64_t span_ns;                /* t_last - t_first */
  double gemm_busy_pct;            /* sum of GEMM durations / (gemm_blocks * span) * 100 */
  double comm_busy_pct;            /* sum of REDUCE + SEND durations / (comm_blocks * span) * 100 */
  uint64_t comm_wait_ns;           /* sum of WAIT durations on communication blocks (block >= gemm_blocks) */
  uint64_t gemm_wait_ns;           /* sum of WAIT durations on GEMM blocks (block < gemm_blocks): credits */
  uint64_t gemm_end_ns;            /* last end of a GEMM event - t_first (0 when no GEMM event) */
  uint64_t tail_ns;                /* t_last - last end of a GEMM event (0 when no GEMM event) */
} weave_trace_summary_t;

/* "GEMM", "WAIT", "REDUCE", "SEND", or "ROLE?" for anything else. */
WEAVE_API const char *weave_trace_role_name(int role);

/*
 * Chrome trace-event JSON of all ranks' events. events_per_rank[r] holds counts[r] events of rank r
 * (r = 0 .. world-1; a NULL array is allowed when its count is 0); the pid of an event is r (its
 * index here), its tid the block. ts/dur are microseconds relative to the earliest t_begin over all
 * ranks. Returns 0, or -1 on an I/O error (file not writable), bad arguments or out of memory.
 */
WEAVE_API int weave_trace_write_json(const char *path, const weave_trace_event_t *const *events_per_rank,
                                     const size_t *counts, int world, const char *title);

/*
 * The same events as CSV: a comment line "# <title>", the header "rank,block,role,tile,peer,begin_us,end_us",
 * then one line per recorded event sorted by rank, block, begin (role as its name, times in us
 * relative to the earliest t_begin over all ranks). Returns 0 or -1 as weave_trace_write_json.
 */
WEAVE_API int weave_trace_write_csv(const char *path, const weave_trace_event_t *const *events_per_rank,
                                    const size_t *counts, int world, const char *title);

/*
 * Summary of one rank's events ev[0..n-1]: the kernel ran gemm_blocks GEMM blocks (blockIdx <
 * gemm_blocks) and comm_blocks communication blocks (the rest). Busy fractions are 0 when the span
 * or the block count is 0.
 */
WEAVE_API void weave_trace_summary(const weave_trace_event_t *ev, size_t n, int gemm_blocks, int comm_blocks,
                                   weave_trace_summary_t *out);

/* One line starting with '#': "# trace rank R: span ... us, gemm busy ...%, ...". */
WEAVE_API void weave_trace_print_summary(FILE *f, int rank, const weave_trace_summary_t *s);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/* Device helpers for the kernel (optional). */
static __device__ __forceinline__ uint64_t weave_trace_now(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Appends one event to buf (capacity cap) through the counter *n; events past cap are dropped, so the
 * host's count is min(*n, cap). Call from one thread of the block. */
static __device__ __forceinline__ void weave_trace_put(weave_trace_event_t *buf, unsigned cap, unsigned *n,
                                                       uint64_t t_begin, uint64_t t_end, int role, int rank, int tile,
                                                       int peer) {
  unsigned i = atomicAdd(n, 1u);
  if (i < cap) {
    weave_trace_event_t e;
    e.t_begin = t_begin;
    e.t_end = t_end;
    e.block = (int32_t)blockIdx.x;
    e.role = (int16_t)role;
    e.rank = (int16_t)rank;
    e.tile = (int32_t)tile;
    e.peer = (int16_t)peer;
    e.pad = 0;
    buf[i] = e;
  }
}
#endif

#endif
