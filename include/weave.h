/*
 * weave: fused GEMM + ReduceScatter on a symmetric heap, for NVIDIA Hopper GPUs.
 *
 * Public host API (C11). Everything returns a weave_result_t; outputs are written only on success.
 * The detailed message of the last failure is kept per team (weave_get_last_error(team)) and, for
 * calls that have no team yet, per calling thread (weave_get_last_error(NULL)).
 *
 * Model. A team has `world` ranks. Every rank owns a symmetric heap of the same size; weave_malloc is
 * collective and returns the same offset on every rank, so a pointer into one rank's heap names the
 * same object on every peer (weave_ptr translates it). Collective calls (team create/destroy,
 * malloc/free, barrier, plan create/destroy) must be made by every rank, each from its own host thread
 * when several ranks live in one process.
 */
#ifndef WEAVE_H
#define WEAVE_H

#include <stddef.h>
#include <stdint.h>

#include "weave_device_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define WEAVE_VERSION_MAJOR 0
#define WEAVE_VERSION_MINOR 1
#define WEAVE_VERSION (WEAVE_VERSION_MAJOR * 100 + WEAVE_VERSION_MINOR)

/* Same type as cudaStream_t, declared here so this header needs no CUDA header. */
struct CUstream_st;
typedef struct CUstream_st *weave_stream_t;

typedef enum {
  WEAVE_SUCCESS = 0,
  WEAVE_ERROR_INVALID_ARGUMENT = 1, /* a NULL, out-of-range or inconsistent argument */
  WEAVE_ERROR_NO_DEVICE = 2,        /* no usable CUDA device (or no CUDA driver) */
  WEAVE_ERROR_UNSUPPORTED_DEVICE = 3, /* a device that is not sm_90 */
  WEAVE_ERROR_CUDA = 4,             /* a CUDA runtime / library call failed */
  WEAVE_ERROR_OUT_OF_MEMORY = 5,    /* symmetric heap or device memory exhausted */
  WEAVE_ERROR_TIMEOUT = 6,          /* a bounded wait expired (host or device) */
  WEAVE_ERROR_MISMATCH = 7,         /* ranks passed different arguments to a collective call */
  WEAVE_ERROR_UNSUPPORTED = 8,      /* a valid request weave cannot run (e.g. could deadlock) */
  WEAVE_ERROR_BOOTSTRAP = 9,        /* the bootstrap (rank exchange) failed */
  WEAVE_ERROR_ENV = 10,             /* a WEAVE_* environment variable has a bad value */
  WEAVE_ERROR_INTERNAL = 11,
  WEAVE_NUM_RESULTS
} weave_result_t;

/* Static description of a result code ("invalid argument", ...). Never NULL. */
const char *weave_get_error_string(weave_result_t result);

typedef struct weave_team *weave_team_t;

/* Detailed message of the last failure on `team` (or of the calling thread when team is NULL).
 * Never NULL; "" when there was none. Valid until the next weave call on that team/thread. */
const char *weave_get_last_error(weave_team_t team);

/* ---------------------------------------------------------------------------------------------
 * Bootstrap: how ranks find each other (rank, size, allgather, barrier).
 * Threads: all ranks in this process, one host thread per rank; create it once, hand it to every
 * rank's thread, destroy it after every team made from it is destroyed.
 * ------------------------------------------------------------------------------------------- */
typedef struct weave_bootstrap weave_bootstrap_t;

weave_result_t weave_bootstrap_create_threads(int world, weave_bootstrap_t **bootstrap);
weave_result_t weave_bootstrap_destroy(weave_bootstrap_t *bootstrap);

/* ---------------------------------------------------------------------------------------------
 * Team
 * ------------------------------------------------------------------------------------------- */
typedef struct {
  size_t struct_size;   /* sizeof(weave_config_t): lets the struct grow */
  unsigned version;     /* WEAVE_VERSION */
  size_t heap_size;     /* bytes of symmetric heap per rank; 0: WEAVE_HEAP_SIZE or its default */
  int timeout_ms;       /* bound of every wait; 0: WEAVE_TIMEOUT_MS or its default */
} weave_config_t;

#define WEAVE_CONFIG_INIT {sizeof(weave_config_t), WEAVE_VERSION, 0, 0}

typedef struct {
  char name[256];
  int device;                 /* CUDA ordinal */
  int sm_count;
  int cc_major, cc_minor;
  size_t smem_per_block_optin; /* largest dynamic shared memory a block may ask for */
  size_t l2_bytes;
  int ranks_on_device;        /* ranks of this team that share this GPU (co-residency) */
} weave_device_info_t;

/* Collective. `device` is this rank's CUDA ordinal; several ranks may name the same one. */
weave_result_t weave_team_create(weave_bootstrap_t *bootstrap, int rank, int device,
                                 const weave_config_t *config, weave_team_t *team);
weave_result_t weave_team_destroy(weave_team_t team); /* collective */
weave_result_t weave_team_rank(weave_team_t team, int *rank);
weave_result_t weave_team_world(weave_team_t team, int *world);
weave_result_t weave_team_device_info(weave_team_t team, weave_device_info_t *info);

/* Host barrier across ranks (does not synchronize any stream). */
weave_result_t weave_barrier(weave_team_t team);

/* Waits for `stream`, then reads the team's device error record (written by a kernel whose bounded
 * wait expired). Returns WEAVE_ERROR_TIMEOUT with the tile/flag/ranks in the last error, and clears
 * the record so the team can go on. */
weave_result_t weave_team_sync(weave_team_t team, weave_stream_t stream);

/* ---------------------------------------------------------------------------------------------
 * Symmetric heap
 * ------------------------------------------------------------------------------------------- */
#define WEAVE_HEAP_ALIGNMENT 256

/* Collective: every rank passes the same size and gets the same offset in its own heap. */
weave_result_t weave_malloc(weave_team_t team, size_t bytes, void **ptr);
weave_result_t weave_free(weave_team_t team, void *ptr); /* collective */
/* `ptr` (in this rank's heap) translated to the same object in `peer`'s heap, addressable here. */
weave_result_t weave_ptr(weave_team_t team, const void *ptr, int peer, void **peer_ptr);
/* Device-resident array of `world` heap bases as seen from this rank (for kernels). */
weave_result_t weave_heap_bases(weave_team_t team, void *const **device_table);
/* This rank's view of the team for kernels (see weave_device.cuh). */
weave_result_t weave_team_device_view(weave_team_t team, weave_device_team_t *view);

/* ---------------------------------------------------------------------------------------------
 * GEMM + ReduceScatter
 *   C = alpha * sum_r A_r[M, K_local] . B_r[K_local, N]  (+ bias[N]); rank r keeps rows
 *   [row_begin(r), row_begin(r) + rows(r)) where the first M % world ranks get one row more.
 * ------------------------------------------------------------------------------------------- */
typedef enum { WEAVE_BF16 = 0, WEAVE_FP16 = 1, WEAVE_FP32 = 2 } weave_dtype_t;
typedef enum {
  WEAVE_LAYOUT_ROW = 0, /* B stored [K_local, N] row-major */
  WEAVE_LAYOUT_COL = 1  /* B stored [N, K_local] row-major (nn.Linear weight) */
} weave_layout_t;
typedef enum {
  WEAVE_STRATEGY_AUTO = 0,
  WEAVE_STRATEGY_FUSED = 1,    /* one persistent kernel, GEMM blocks + communication blocks */
  WEAVE_STRATEGY_BULK = 2,     /* GEMM kernel, then a reduce-scatter kernel over the heap */
  WEAVE_STRATEGY_BASELINE = 3  /* cuBLASLt + ncclReduceScatter (or weave's RS on one GPU) */
} weave_strategy_t;
typedef enum {
  WEAVE_REDUCE_DETERMINISTIC = 0, /* partials pushed to per-source slots, summed in rank order */
  WEAVE_REDUCE_ATOMIC = 1         /* fp32 remote atomic adds into the owner's accumulator */
} weave_reduce_t;
typedef enum {
  WEAVE_ORDER_OWN_LAST = 0,  /* rank r computes the tiles of r+1, r+2, ..., then its own */
  WEAVE_ORDER_OWN_FIRST = 1  /* rank r computes its own tiles, then r+1, ... */
} weave_tile_order_t;

typedef struct {
  size_t struct_size;
  weave_dtype_t dtype;       /* A, B, C and bias */
  weave_layout_t b_layout;
  weave_strategy_t strategy;
  weave_reduce_t reduce;
  int fp32_slots;            /* deterministic / bulk partials in fp32 (exact, twice the bytes) instead of dtype */
  weave_tile_order_t tile_order;
  float alpha;
  int has_bias;
  int gemm_blocks;           /* 0: from the cost model / tune file */
  int comm_blocks;           /* 0: from the cost model / tune file */
  int trace;                 /* record per-tile events of each fused call (also on with WEAVE_TRACE) */
} weave_gemm_rs_desc_t;

#define WEAVE_GEMM_RS_DESC_INIT                                                                 \
  {sizeof(weave_gemm_rs_desc_t), WEAVE_BF16, WEAVE_LAYOUT_ROW, WEAVE_STRATEGY_AUTO,             \
   WEAVE_REDUCE_DETERMINISTIC, 0, WEAVE_ORDER_OWN_LAST, 1.0f, 0, 0, 0, 0}

typedef struct weave_gemm_rs_plan *weave_gemm_rs_plan_t;

typedef struct {
  weave_strategy_t strategy;  /* resolved (never AUTO) */
  int row_begin, rows;        /* this rank's rows of C */
  int tile_m, tile_n;         /* tile shape */
  int tiles_total;            /* tiles of C (all owners) */
  int tiles_owned;            /* tiles of this rank's rows */
  int gemm_blocks, comm_blocks;
  size_t heap_bytes;          /* symmetric memory this plan holds per rank */
  size_t bytes_sent;          /* bytes this rank pushes to peers per call */
} weave_gemm_rs_info_t;

/* Collective. Same (M, N, K_local, desc) on every rank. */
weave_result_t weave_gemm_rs_plan_create(weave_team_t team, int M, int N, int K_local,
                                         const weave_gemm_rs_desc_t *desc,
                                         weave_gemm_rs_plan_t *plan);
/* Enqueue one call on `stream`. A: [M, K_local], B: see b_layout, bias: [N] or NULL,
 * C_out: [rows, N] row-major. Device pointers of this rank (any memory, not only the heap). */
weave_result_t weave_gemm_rs_execute(weave_gemm_rs_plan_t plan, const void *A, const void *B,
                                     const void *bias, void *C_out, weave_stream_t stream);
weave_result_t weave_gemm_rs_plan_info(weave_gemm_rs_plan_t plan, weave_gemm_rs_info_t *info);
weave_result_t weave_gemm_rs_plan_destroy(weave_gemm_rs_plan_t plan); /* collective */

/* Tracing (desc.trace or WEAVE_TRACE=path): waits for `stream`, then copies the events of the last
 * fused call (weave_trace_event_t of weave_trace.h, at most `capacity`) to host memory `events`.
 * *count gets the number of events recorded (it may exceed capacity). With WEAVE_TRACE=path each
 * rank also writes path.rank<r>.json when the plan is destroyed. */
weave_result_t weave_gemm_rs_trace_fetch(weave_gemm_rs_plan_t plan, weave_stream_t stream, void *events,
                                         size_t capacity, size_t *count);

/* Row split used by every strategy: contiguous chunks of whole rows, the first M % world ranks one
 * row more. */
weave_result_t weave_row_split(int M, int world, int rank, int *row_begin, int *rows);

/* ---------------------------------------------------------------------------------------------
 * Local GEMM (no communication): C[M, N] = alpha * A[M, K] . B + bias. bf16/fp16 (fp32 accumulate)
 * or fp32. Rows must be 16-byte aligned for the Hopper path. When the last round of tiles would
 * leave SMs idle, the Hopper path splits the tail's k-loop over the blocks (stream-K,
 * docs/hopper_gemm.md) through a workspace weave allocates once per (device, stream) on first
 * need (~33 MiB on 132 SMs, kept until exit; WEAVE_HGEMM_STREAMK=0 turns it off). Repeated calls
 * with the same shape and num_blocks give bitwise the same C.
 * ------------------------------------------------------------------------------------------- */
weave_result_t weave_gemm(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout,
                          float alpha, const void *A, const void *B, const void *bias, void *C,
                          int num_blocks, weave_stream_t stream);

/* Prints every WEAVE_* environment variable with its value, type, default and meaning. */
void weave_print_env(void *file /* FILE* */);

#ifdef __cplusplus
}
#endif
#endif /* WEAVE_H */
