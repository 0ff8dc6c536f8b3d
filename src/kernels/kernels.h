/*
 * C interface between the host (plan_create.c, plan_execute.c, local_gemm.c) and the kernels' launchers
 * (gemm_rs.cu, ag_gemm.cu, tune_kernels.cu): parameter blocks passed by value and the launchers. Both C and
 * CUDA include this header.
 */
#ifndef WEAVE_KERNELS_H
#define WEAVE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "gemm/hopper/gemm_hopper.h"
#include "weave_trace.h"
#include "common/schedule.h"
#include "weave.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Control words of a plan, at the start of its heap allocation (zeroed at plan creation). Every
 * word only ever grows by one epoch per call, so nothing is reset between calls.
 *
 * The call's epoch itself lives here, not in the kernel arguments: each kernel of a call reads
 * epoch + 1 at its start, and the last block of the call's last kernel stores it (after every block
 * of that kernel has read it, see weave_block_arrive_and_signal). So a call captured in a CUDA graph
 * replays with a fresh epoch each time. */
typedef struct {
  uint32_t done[WEAVE_MAX_WORLD];  /* [src]: last call src finished reading this rank's inputs */
  uint32_t ready[WEAVE_MAX_WORLD]; /* [src]: last call whose partial src has finished (bulk) */
  uint32_t arrive[4];              /* blocks of this rank that finished, per kernel kind */
  uint32_t epoch;                  /* last call of this rank that finished */
  uint32_t pad_[27];
} weave_plan_ctl_t;

typedef struct {
  int M, N, K;
  weave_dtype_t dtype; /* of C and bias (and of A, B unless in_dtype is fp8) */
  weave_layout_t b_layout;
  weave_dtype_t slot_dtype;
  weave_reduce_t reduce;
  float alpha;
  const void *A, *B, *bias;
  void *C_out;
  weave_device_team_t team;
  weave_tiling_t tiling;
  int rows_cap;  /* ceil(M / world): rows of one source's slot */
  int tiles_cap; /* tiles of the largest owner: stride of per-source flag rows */
  void *data;    /* slots (deterministic) / fp32 accumulator (atomic) / partial P (bulk) */
  uint32_t *tile_flags;
  weave_plan_ctl_t *ctl;
  int gemm_blocks, comm_blocks;
  int vec_ok;                 /* rows of A and B are 16-byte aligned: cp.async path */
  int out_vec;                /* C_out is 16-byte aligned: vector stores in the reduction */
  int hopper;                 /* GEMM role: TMA + wgmma (hg below) instead of mma.sync */
  weave_trace_event_t *trace; /* per-tile events (NULL: tracing off; one uniform branch per tile) */
  unsigned *trace_count;
  unsigned trace_cap;
  weave_hgemm_params_t hg; /* tensor maps of this call's A and B (hopper only) */
  int tma_slots;           /* deterministic + hopper: GEMM blocks write tiles with TMA stores through slot_map */
  /* slot_map[o]: this rank's slot in owner o's heap, [rows of o, N] of slot_dtype (fixed per plan) */
  CUtensorMap slot_map[WEAVE_MAX_WORLD];
  weave_dtype_t in_dtype; /* A and B: dtype, or WEAVE_FP8_E4M3 (then dtype is the output's; scales in hg.scales) */
  int fp8_fast_accum;     /* fp8: the tensor cores' accumulator over all of K instead of fp32 (weave_fp8_accum_t) */
  /* past one node (plan/hier.h): the error code of the step before this one (its team's heap header);
   * once set, the bulk ready barrier publishes nothing, so the peers' waits report the failure
   * instead of reducing a partial that the failed step left (NULL: none) */
  const uint32_t *upstream_error;
} weave_fused_params_t;

/* AllGather + GEMM (ag_gemm.cu has the protocol). Rows of A move in blocks of WEAVE_AG_BLOCK_ROWS
 * rows of the gathered A (the Hopper GEMM's tile rows): row_flags[b] of a rank's heap counts the
 * pushes into block b that have arrived there, one per contributing rank per call, so after call e
 * it holds e x (ranks whose rows meet block b) and nothing is reset. */
#define WEAVE_AG_BLOCK_ROWS 128
typedef struct {
  int M, N, K;         /* N: this rank's columns of C */
  weave_dtype_t dtype; /* A and B (C and bias too unless fp8) */
  weave_device_team_t team;
  const void *A;                  /* this rank's rows of A, [rows, K] (the call's) */
  const float *scale_a;           /* fp8 with scales (the call's): TENSOR [1], ROW [rows]; else NULL */
  int scale_mode;                 /* weave_scale_mode_t of scale_a */
  float *gathered_scales;         /* heap [M]: every gathered row's scale, pushed with the rows (NULL: none) */
  int row_begin, rows;            /* weave_row_split of this rank */
  void *gathered;                 /* heap [M, K]: this rank's copy of every rank's rows */
  uint32_t *row_flags;            /* heap [blocks_m] */
  const uint32_t *row_info;       /* [blocks_m]: pushes block b receives per call (the ranks whose rows meet
                                * it) | the first of them << 16; fixed per plan */
  weave_plan_ctl_t *ctl;          /* epoch, done[src] (src finished reading its gathered A), arrive[0] */
  const uint32_t *upstream_error; /* past one node: the rail gather's team's error code; once set, the
                                   * push sends nothing (the peers' waits report it) (NULL: none) */
  int blocks_m;                   /* ceil(M / WEAVE_AG_BLOCK_ROWS) */
  int gemm_blocks, comm_blocks;
  int pair_cols;   /* fused: 2-CTA clusters, each a pair of tile columns sharing A (both counts even) */
  int signal_done; /* fused: the kernel's last block publishes done[] and the epoch (else
                                * weave_launch_ag_finish does, after what the call still reads) */
} weave_ag_params_t;

/* The fused kernel: comm_blocks push this rank's rows into every rank's gathered A while
 * gemm_blocks compute C[M, N] = alpha * gathered . B (+ bias) on the Hopper role, each tile's loads
 * waiting for its rows. hg: tensor maps of the gathered A and the call's B, and for fp8 the scales
 * (hg->scales: the gathered ones); out_dtype: C and bias (the inputs' type unless fp8); fast_accum:
 * fp8's tensor-core accumulation instead of the promoted one. bf16, fp16 and fp8 inputs. */
int weave_launch_ag_fused(const weave_ag_params_t *p, const weave_hgemm_params_t *hg, weave_dtype_t out_dtype,
                          int fast_accum, float alpha, const void *bias, void *C, struct CUstream_st *stream);
/* Blocks per SM of the fused kernel (0: it cannot run here) and its dynamic shared memory; the most
 * 2-CTA clusters of it (pair_cols) resident at once on this GPU (0: none). */
int weave_ag_fused_blocks_per_sm(size_t *smem_bytes);
int weave_ag_fused_max_clusters(void);
/* The gather in pieces (bulk and baseline): push this rank's rows on `blocks` blocks; one block
 * waiting for every row of this call to have arrived; one block publishing done[] and the epoch. */
int weave_launch_ag_push(const weave_ag_params_t *p, int blocks, struct CUstream_st *stream);
int weave_launch_ag_wait(const weave_ag_params_t *p, struct CUstream_st *stream);
int weave_launch_ag_finish(const weave_ag_params_t *p, struct CUstream_st *stream);

/* The GEMM role a shape can use: the Hopper role (TMA + wgmma) needs 16-bit inputs and 16-byte
 * aligned rows of A and B, or fp8 inputs (B [N, K], K % 16 == 0; fp8 has no other role); everything
 * else runs on the mma.sync / SIMT role. */
int weave_kernel_hopper_ok(weave_dtype_t dtype, weave_layout_t b_layout, int N, int K);
/* Occupancy (blocks per SM) and dynamic shared memory of the fused (or plain GEMM) kernel; the most
 * 2-CTA clusters of the Hopper fused kernel (tiling.pair_n) resident at once on this GPU (0: none). */
int weave_kernel_blocks_per_sm(weave_dtype_t dtype, int hopper, int fused, size_t *smem_bytes);
int weave_kernel_fused_max_clusters(void);
void weave_kernel_tile_shape(int hopper, int *tile_m, int *tile_n);

/* A rank's share of `blocks_on_gpu` resident blocks when ranks_on_device ranks share its GPU: ranks
 * sharing one leave about half an SM each free (at least one in all), so that the short kernels
 * around the calls (memsets, signal kernels) never take the place of a block that others wait for
 * (16 blocks a rank at 8 ranks on 132 SMs, an even count for 2-CTA clusters). Both planners' rule. */
static inline int weave_rank_blocks(int blocks_on_gpu, int ranks_on_device) {
  const int spare = ranks_on_device > 1 ? (ranks_on_device + 1) / 2 : 0;
  return (blocks_on_gpu - spare) / ranks_on_device;
}
/* A fused kernel's split for 2-CTA clusters: comm_blocks rounded up and gemm_blocks down to even
 * counts within the budget (an odd budget leaves one block out). */
static inline void weave_pairs_round(int budget, int *gemm_blocks, int *comm_blocks) {
  *comm_blocks += *comm_blocks & 1;
  *gemm_blocks = (budget - *comm_blocks) & ~1;
}
/* Whether a fused kernel of gemm_blocks + comm_blocks a rank runs in 2-CTA clusters: a pair of GEMM
 * blocks at least, both counts even (no cluster mixes the roles), and every rank's clusters resident
 * at once (max_clusters on this GPU). */
static inline int weave_pairs_fit(int gemm_blocks, int comm_blocks, int ranks_on_device, int max_clusters) {
  return gemm_blocks >= 2 && !((gemm_blocks | comm_blocks) & 1) &&
         (gemm_blocks + comm_blocks) / 2 * ranks_on_device <= max_clusters;
}

/* Return 0 or a cudaError_t value. */
int weave_launch_fused(const weave_fused_params_t *p, struct CUstream_st *stream);
/* Plain GEMM into `out` (dtype out_dtype, ld N) with alpha and bias, on `blocks` persistent blocks. */
int weave_launch_gemm(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, float alpha, const void *A,
                      const void *B, const void *bias, void *out, weave_dtype_t out_dtype, int blocks, int vec_ok,
                      struct CUstream_st *stream);
/* Bulk pieces (one block each for the waits; epoch = ctl->epoch + 1): wait for peers' done[] >=
 * epoch-1; ready barrier
 * (signal ready[] = epoch to peers, wait for theirs); reduce-scatter of the partials P (dtype
 * p->slot_dtype) into C_out, which signals done[] when finished. */
int weave_launch_wait_done(const weave_fused_params_t *p, struct CUstream_st *stream);
int weave_launch_ready_barrier(const weave_fused_params_t *p, struct CUstream_st *stream);
int weave_launch_reduce_scatter(const weave_fused_params_t *p, int blocks, struct CUstream_st *stream);
/* C[rows, N] += bias[N] (the NCCL baseline's bias, added once by the owner). */
int weave_launch_add_bias(void *C, int rows, int N, weave_dtype_t dtype, const void *bias, struct CUstream_st *stream);
const char *weave_cuda_error_string(int err);
/* tune_kernels.cu. count elements of dtype (weave_dtype_t) with random values in [-1, 1) from seed. */
int weave_launch_fill_random(void *p, size_t count, weave_dtype_t dtype, uint32_t seed, struct CUstream_st *stream);
int weave_launch_fill_value(float *p, size_t count, float v, struct CUstream_st *stream);
/* p[0..count) = *from (a device scalar, read by the kernel). */
int weave_launch_fill_from(float *p, size_t count, const float *from, struct CUstream_st *stream);
/* One thread that returns after `us` microseconds (WEAVE_TEST_DELAY). */
int weave_launch_delay(unsigned us, struct CUstream_st *stream);

/* ptr is memory `device` can be given: device memory (of any GPU: peer access is the caller's
 * business), managed or host-registered (pinned) memory, or any address where `device` reads
 * pageable host memory (cudaDevAttrPageableMemoryAccess: HMM / ATS). */
int weave_device_reads(int device, const void *ptr);
/* fn's refusal of the first of n pointers (NULLs skipped) `device` cannot read (weave_device_reads):
 * WEAVE_ERROR_INVALID_ARGUMENT naming names[i]; WEAVE_SUCCESS if none. */
weave_result_t weave_check_device_reads(weave_team_t team, const char *fn, int device, const void *const *ptrs,
                                        const char *const *names, int n);
/* One local GEMM, C[M, N] = alpha * A[M, K] B (+ bias[N]), for weave_gemm_dispatch (local_gemm.c). */
typedef struct {
  int M, N, K;
  weave_dtype_t dtype; /* of A and B */
  weave_layout_t b_layout;
  weave_dtype_t out_dtype; /* of C and bias: dtype, or for fp8 inputs bf16, fp16 or fp32 */
  float alpha;
  const void *A, *B, *bias; /* bias: [N] or NULL */
  void *C;
  weave_hgemm_scales_t scales; /* fp8 only: this call's dequantization scales (mode NONE: none) */
  int fp8_fast_accum;          /* fp8 only: the tensor cores' accumulator over all of K (weave_fp8_accum_t) */
  int num_blocks;              /* persistent blocks; <= 0: as many as fit */
  void *ws;                    /* the Hopper role's stream-K workspace (zeroed once, one stream at a time), */
  size_t ws_bytes;             /* or NULL: the stream's own, allocated on its first need */
} weave_gemm_call_t;

/* local_gemm.c: the local GEMM on the fastest role the arguments allow (no argument checks); fp8 runs on
 * the Hopper role only. */
weave_result_t weave_gemm_dispatch(const weave_gemm_call_t *c, weave_stream_t stream, char *msg, size_t msglen);
/* The stream-K workspace such a call needs (0: none, or not the Hopper role); its pointers unused. */
size_t weave_gemm_workspace_need(const weave_gemm_call_t *c);
/* That workspace for a plan's GEMM, zeroed (the plan's calls are ordered, so one serves them on any
 * stream); NULL with *bytes 0 where none is needed or none is to be had (then whole tiles only, and
 * a warning on `team`). */
void *weave_gemm_workspace_alloc(weave_team_t team, const weave_gemm_call_t *c, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
