/*
 * weave's Hopper GEMM (TMA + wgmma, warp-specialized, persistent): host-side interface.
 *
 *   C[M, N] = alpha * A[M, K] . B  (+ bias[N]),  bf16 or fp16 in and out, fp32 accumulation;
 *   or fp8 (e4m3) in with dequantization scales (per tensor or per row / column), bf16, fp16 or fp32
 *   out: C = alpha * (scale_a[i] scale_b[j]) (A . B)[i][j] (+ bias[j]).
 *   A: row-major [M, K].  B: WEAVE_LAYOUT_ROW = row-major [K, N]; WEAVE_LAYOUT_COL = [N, K] row-major
 *   (nn.Linear weight; the only layout of fp8).  C: row-major [M, N].
 *
 * Alignment: A, B 16-byte aligned; rows 16-byte aligned (K*2 % 16 == 0 for A and for a COL B,
 * N*2 % 16 == 0 for a ROW B; fp8: K % 16 == 0); C and bias aligned to their element. Anything else is
 * WEAVE_ERROR_INVALID_ARGUMENT.
 *
 * The device side (the GEMM role usable from any kernel, the Sink contract) is in gemm_hopper.cuh.
 * Names: weave_hgemm_* functions, weave_hgemm_*_t types, WEAVE_HGEMM_* macros.
 * This header is plain C (it needs cuda.h only for the CUtensorMap type; libcuda is not linked: the
 * tensor maps are encoded through cudaGetDriverEntryPointByVersion).
 */
#ifndef WEAVE_GEMM_HOPPER_H
#define WEAVE_GEMM_HOPPER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h> /* memset: weave_hgemm_auto_args */
#include <cuda.h>   /* CUtensorMap (type only) */
#include <cuda_runtime_api.h>

#include "weave.h"
#include "gemm/hopper/tile_scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tile shape and block shape of the GEMM role (the fused kernel sizes itself from these). */
#define WEAVE_HGEMM_BM 128 /* rows of C per tile (2 consumer warpgroups x 64) */
#define WEAVE_HGEMM_BN 256 /* cols of C per tile (one wgmma m64n256k16 per k16 step) */
/* fp8 with the tensor cores' accumulation may run 128 x WEAVE_HGEMM_BN_NARROW (192) tiles instead
 * (wgmma m64n192k32; weave_hgemm_fp8_tile_n in tile_scheduler.h, WEAVE_HGEMM_FP8_NARROW) */
#define WEAVE_HGEMM_BK 64 /* K per smem stage (64 x 2 bytes = one 128-byte swizzle row) */
#define WEAVE_HGEMM_BK_FP8 \
  128 /* fp8: K per smem stage (128 x 1 byte: the same 128-byte rows, the
                                      * same stage bytes; 4 wgmma k32 a stage as 4 k16 for 16-bit) */
#ifndef WEAVE_HGEMM_STAGES
#define WEAVE_HGEMM_STAGES 4 /* smem pipeline depth */
#endif
#define WEAVE_HGEMM_THREADS 384 /* 1 producer warpgroup + 2 consumer warpgroups */
#define WEAVE_HGEMM_CONSUMER_THREADS 256
#define WEAVE_HGEMM_A_STAGE_BYTES (WEAVE_HGEMM_BM * WEAVE_HGEMM_BK * 2) /* 16 KiB */
#define WEAVE_HGEMM_B_STAGE_BYTES (WEAVE_HGEMM_BN * WEAVE_HGEMM_BK * 2) /* 32 KiB */
#define WEAVE_HGEMM_STAGE_BYTES (WEAVE_HGEMM_A_STAGE_BYTES + WEAVE_HGEMM_B_STAGE_BYTES)
/* Bytes the role needs at a 1024-byte aligned `smem` pointer: stages + 2*STAGES mbarriers. */
#define WEAVE_HGEMM_SMEM_BYTES (WEAVE_HGEMM_STAGES * WEAVE_HGEMM_STAGE_BYTES + 2 * WEAVE_HGEMM_STAGES * 8)
/* Dynamic smem to request when the kernel aligns its own extern buffer up to 1024 bytes. */
#define WEAVE_HGEMM_SMEM_ALLOC_BYTES (WEAVE_HGEMM_SMEM_BYTES + 1024)
/* TMA-store epilogue (sinks that declare kWeaveTmaStore): C staging, per consumer warpgroup two
 * buffers of 64 rows x 128 bytes (64 columns of 2-byte or 32 of 4-byte elements), placed after the
 * stages and barriers at a 1024-byte boundary. A kernel whose sink may store through TMA asks for
 * WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES. */
#define WEAVE_HGEMM_EPI_OFFSET (WEAVE_HGEMM_STAGES * WEAVE_HGEMM_STAGE_BYTES + 1024)
#define WEAVE_HGEMM_EPI_ROWS 64
#define WEAVE_HGEMM_EPI_BUF_BYTES (WEAVE_HGEMM_EPI_ROWS * 128)
#ifndef WEAVE_HGEMM_EPI_BUFS
#define WEAVE_HGEMM_EPI_BUFS 2 /* staging buffers per consumer warpgroup */
#endif
#define WEAVE_HGEMM_EPI_BYTES (2 * WEAVE_HGEMM_EPI_BUFS * WEAVE_HGEMM_EPI_BUF_BYTES)
#define WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES (WEAVE_HGEMM_EPI_OFFSET + WEAVE_HGEMM_EPI_BYTES + 1024)
/* The narrow fp8 tile's ring (128 x 192 tiles, gemm_hopper_cooperative.cuh): stages of 40 KiB (A
 * 16 KiB + B 24 KiB), the barriers and the staging after them as above, in the same allocation. Five
 * stages fit only with one staging buffer a warpgroup (200 KiB + 16 KiB), which is then its count. */
#ifndef WEAVE_HGEMM_NARROW_STAGES
#define WEAVE_HGEMM_NARROW_STAGES 4
#endif
#define WEAVE_HGEMM_NARROW_EPI_BUFS (WEAVE_HGEMM_NARROW_STAGES > 4 ? 1 : WEAVE_HGEMM_EPI_BUFS)
#define WEAVE_HGEMM_STANDALONE_SMEM_ALLOC_BYTES WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES
/* fp8 with accumulation promoted to fp32 on three consumer warpgroups (gemm_hopper_promote3.cuh):
 * 192 x 128 tiles, 512 threads, A [192 x 128] + B [128 x 128] a stage (40 KiB), the barriers in the
 * 1024 bytes after the stages, then the TMA-store staging of three warpgroups (48 KiB). */
#define WEAVE_HGEMM_P3_BM 192
#define WEAVE_HGEMM_P3_BN 128
#define WEAVE_HGEMM_P3_THREADS 512
#ifndef WEAVE_HGEMM_P3_STAGES
#define WEAVE_HGEMM_P3_STAGES 4
#endif
#define WEAVE_HGEMM_P3_PRODUCER_REGS 40
#define WEAVE_HGEMM_P3_CONSUMER_REGS 152
#define WEAVE_HGEMM_P3_A_STAGE_BYTES (WEAVE_HGEMM_P3_BM * WEAVE_HGEMM_BK_FP8)
#define WEAVE_HGEMM_P3_STAGE_BYTES (WEAVE_HGEMM_P3_A_STAGE_BYTES + WEAVE_HGEMM_P3_BN * WEAVE_HGEMM_BK_FP8)
#define WEAVE_HGEMM_P3_EPI_OFFSET (WEAVE_HGEMM_P3_STAGES * WEAVE_HGEMM_P3_STAGE_BYTES + 1024)
#define WEAVE_HGEMM_P3_SMEM_ALLOC_BYTES \
  (WEAVE_HGEMM_P3_EPI_OFFSET + 3 * WEAVE_HGEMM_EPI_BUFS * WEAVE_HGEMM_EPI_BUF_BYTES + 1024)
/* Named barrier id the role uses among its 256 consumer threads (id 0 is __syncthreads); the
 * TMA-store epilogue also uses ids 2 and 3 (128 threads each). */
#define WEAVE_HGEMM_CONSUMER_BARRIER_ID 1
/* Named barrier id of weave_hgemm_regs_restore (all 384 threads). */
#define WEAVE_HGEMM_RESTORE_BARRIER_ID 4
/* The ping-pong role's turn barriers use ids 5 and 6 (WEAVE_HGEMM_PP_ORDER_BARRIER_ID). */

/* K elements per smem stage for inputs of `dtype`, and the k-blocks of a K (host, device, CPU test). */
static inline WEAVE_HOST_DEVICE int weave_hgemm_bk(int dtype) {
  return dtype == WEAVE_FP8_E4M3 ? WEAVE_HGEMM_BK_FP8 : WEAVE_HGEMM_BK;
}
static inline WEAVE_HOST_DEVICE int weave_hgemm_k_blocks(int K, int dtype) {
  return (K + weave_hgemm_bk(dtype) - 1) / weave_hgemm_bk(dtype);
}

/* fp8 dequantization scales of one call (device pointers): mode WEAVE_SCALE_NONE (pointers unused),
 * WEAVE_SCALE_TENSOR (a[0], b[0]), WEAVE_SCALE_ROW (a[M]: rows of A; b[N]: columns of C) or
 * WEAVE_HGEMM_SCALE_ROW_A (a[M], b[0]). The role
 * applies them to the accumulators of each tile before its sink sees them (after a stream-K tile's
 * segments are summed). */
typedef struct {
  int mode; /* weave_scale_mode_t, or WEAVE_HGEMM_SCALE_ROW_A */
  const float *a, *b;
} weave_hgemm_scales_t;
/* A scale mode of the GEMM's own, beside weave_scale_mode_t's: a[M] per row of A, b[0] per tensor
 * (AllGather + GEMM's per-tensor scales: each gathered row keeps its owner's). */
#define WEAVE_HGEMM_SCALE_ROW_A 3

/* Everything the device role needs. Must live in kernel-parameter space (a __grid_constant__
 * parameter, or a member of one) because the TMA unit reads the tensor maps from there. */
typedef struct weave_hgemm_params {
  CUtensorMap tmap_a;         /* A [M, K]: box {BK, BM}, 128B swizzle */
  CUtensorMap tmap_b;         /* COL: [N, K] box {BK, BN} (the narrow tile: BN_NARROW); ROW: [K, N] box {64, BK} */
  CUtensorMap tmap_b_half;    /* COL only: [N, K] box {BK, half of tmap_b's}: 2-CTA clusters, ping-pong halves */
  CUtensorMap tmap_b_quarter; /* COL only: [N, K] box {BK, a quarter of tmap_b's}: ping-pong with clusters */
  uint64_t b_desc_base;       /* wgmma smem-descriptor bits of B without the address (LBO/SBO/swizzle) */
  int M, N, K;
  int tiles_m, tiles_n; /* ceil(M / BM), ceil(N / BN) */
  int k_blocks;         /* ceil(K / weave_hgemm_bk(dtype)) */
  int dtype;            /* weave_dtype_t of A and B: WEAVE_BF16, WEAVE_FP16 or WEAVE_FP8_E4M3 */
  int b_layout;         /* weave_layout_t */
  /* stream-K tail (tile_scheduler.h); sk.sk_tiles == 0: data-parallel only (what the fused kernel
   * uses: make_params leaves it so). Set by the standalone launcher. */
  weave_hgemm_sk_t sk;
  float *sk_partials;          /* 2 * sk.sk_blocks slots of WEAVE_HGEMM_SK_SLOT_FLOATS */
  unsigned *sk_counters;       /* sk.sk_tiles counters, zero between calls */
  weave_hgemm_scales_t scales; /* fp8 (make_params: none; the caller sets this call's) */
} weave_hgemm_params_t;

typedef struct {
  int M, N, K;
  weave_dtype_t dtype; /* WEAVE_BF16 or WEAVE_FP16 (A, B, C, bias), or WEAVE_FP8_E4M3 (A, B) */
  weave_layout_t b_layout;
  float alpha;
  const void *A, *B;
  const void *bias; /* [N] or NULL */
  void *C;
  int num_blocks; /* persistent CTAs; <= 0: SM count; clamped to SM count and tile count */
  /* Stream-K tail (tile_scheduler.h): used when the workspace is large enough for the schedule
   * (weave_hgemm_workspace_size), else data-parallel tiles only. The workspace must be zeroed
   * once before its first use (cudaMemset) and used by one stream at a time; every call leaves it
   * ready for the next. streamk: WEAVE_HGEMM_SK_AUTO (cost model; env WEAVE_HGEMM_STREAMK=0|1|2 =
   * off|auto|on overrides), WEAVE_HGEMM_SK_OFF or WEAVE_HGEMM_SK_ON. */
  void *workspace;
  size_t workspace_bytes;
  int streamk;
  /* WEAVE_HGEMM_SCHED_AUTO (weave_hgemm_pick_pingpong in tile_scheduler.h; env WEAVE_HGEMM_PINGPONG=
   * 0|1|2 = cooperative|auto|ping-pong overrides), WEAVE_HGEMM_SCHED_COOP or WEAVE_HGEMM_SCHED_PINGPONG
   * (ping-pong: no stream-K, no cluster) */
  int schedule;
  /* fp8 inputs only (16-bit inputs write dtype): C and bias WEAVE_BF16 (0), WEAVE_FP16 or WEAVE_FP32
   * (fp32: cooperative schedule; its bias is fp32 too), and the scales (zero: none). */
  weave_dtype_t out_dtype;
  weave_hgemm_scales_t scales;
  /* fp8 only: 0 (default) promotes each k-block's products to fp32 accumulators (cooperative
   * schedule, no stream-K); 1 keeps the tensor cores' fp8 accumulator for the whole k-loop
   * (weave_fp8_accum_t) */
  int fp8_fast_accum;
  /* fp8 with fast accumulation on the cooperative schedule: the tile's columns, 0 (the plan's choice:
   * WEAVE_HGEMM_FP8_NARROW), WEAVE_HGEMM_BN (256) or WEAVE_HGEMM_BN_NARROW (192: no stream-K). Other
   * calls run 256 and ignore it; any other value is WEAVE_ERROR_INVALID_ARGUMENT. */
  int tile_n;
} weave_hgemm_args_t;

/* Checks the shape/alignment and encodes both tensor maps into *params (host only; no launch).
 * Used by the standalone launcher and by the fused kernel's host code. Returns a weave_result_t. */
int weave_hgemm_make_params(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, const void *A,
                            const void *B, weave_hgemm_params_t *params, char *errmsg, size_t errlen);

/* For 2-CTA clusters whose CTAs share A (weave_hgemm_shares_a): re-encodes params->tmap_a over A with
 * a box of half a tile's rows (tile_m / 2), the half each CTA loads and multicasts. */
int weave_hgemm_params_share_a(weave_hgemm_params_t *params, const void *A, int tile_m, char *errmsg, size_t errlen);
/* Whether a grid of `grid` blocks over tiles_n tile columns (of the caller's role) runs in 2-CTA
 * clusters sharing A, pairs of tile columns, by WEAVE_HGEMM_CLUSTER (read once): the standalone
 * launcher's rule, which the fused AllGather + GEMM kernel follows too. */
int weave_hgemm_shares_a(int tiles_n, int grid, int fp8);

/* Tensor map for the TMA-store epilogue: a row-major [rows, cols] matrix of `elem` (bf16, fp16 or
 * fp32) at `base` with `pitch` bytes per row, box = one staging buffer (128 bytes x 64 rows), 128B
 * swizzle. base and pitch must be 16-byte aligned. Stores outside [rows, cols] are dropped by the TMA
 * unit, which is how partial tiles (and tiles that cross an owner's last row) are clipped. */
int weave_hgemm_encode_store_map(CUtensorMap *map, weave_dtype_t elem, void *base, uint64_t cols, uint64_t rows,
                                 uint64_t pitch, char *errmsg, size_t errlen);

/* What a call with these arguments would run on the current device, as the launcher plans it (only
 * M, N, K, dtype, out_dtype, fp8_fast_accum, num_blocks, streamk, schedule and tile_n are read): its stream-K
 * schedule given a large enough workspace (sk_tiles 0: whole tiles only), the workspace that needs (0:
 * none), and its schedule (WEAVE_HGEMM_SCHED_COOP or _PINGPONG; COOP when there is no device). The
 * most any shape can need on num_blocks blocks (<= 0: all SMs of the current device):
 * weave_hgemm_workspace_max. */
weave_hgemm_sk_t weave_hgemm_streamk_plan(const weave_hgemm_args_t *args);
/* The same two on a device of `sms` SMs (no device needed: weave-bench's plan without a GPU), the
 * clusters (1 none, 2 tile rows sharing B, 3 tile columns sharing A) and the tile's columns (256, or
 * 192 for the narrow fp8 tile); the outputs may be NULL. */
weave_hgemm_sk_t weave_hgemm_plan_on(const weave_hgemm_args_t *args, int sms, int *schedule, int *cluster, int *tile_n);
/* A call's arguments as the plan queries above read them, everything else zero: schedule and
 * stream-K AUTO, bf16 out (fp8 with fp32 accumulation plans cooperative without stream-K), so that
 * a query answers what weave's AUTO runs (weave-bench's plan, test_plan); the GPU tests start their
 * launches from it. */
static inline weave_hgemm_args_t weave_hgemm_auto_args(int M, int N, int K, weave_dtype_t dtype, int num_blocks,
                                                       int fp8_fast_accum) {
  weave_hgemm_args_t q;
  memset(&q, 0, sizeof q);
  q.M = M;
  q.N = N;
  q.K = K;
  q.dtype = dtype;
  q.num_blocks = num_blocks;
  q.streamk = WEAVE_HGEMM_SK_AUTO;
  q.schedule = WEAVE_HGEMM_SCHED_AUTO;
  q.out_dtype = WEAVE_BF16;
  q.fp8_fast_accum = fp8_fast_accum;
  return q;
}
size_t weave_hgemm_workspace_size(const weave_hgemm_args_t *args);
int weave_hgemm_schedule(const weave_hgemm_args_t *args);
size_t weave_hgemm_workspace_max(int num_blocks);
/* Diagnostic builds only (-DWEAVE_HGEMM_PROFILE=1, prof.cuh): saves the last cooperative or
 * three-warpgroup fp8 launch's clock64() stamps to `path` (scripts/hgemm_profile.py reads them) and clears them. */
int weave_hgemm_profile_save(const char *path);

/* A knob of this GEMM (WEAVE_HGEMM_*: runtime/env.c documents them): its value, or its default. */
int weave_hgemm_knob(const char *name);
/* Tile rows per group of the grouped tile order for a grid of `blocks` blocks of tile_m x tile_n
 * tiles over tiles_m tile rows: weave_hgemm_group_rows (tile_scheduler.h) with this process's
 * WEAVE_HGEMM_GROUP_M (read once). The standalone GEMM's launcher and the fused AllGather + GEMM
 * kernel's both take it from here. */
int weave_hgemm_group_for(int blocks, int tiles_m, int tile_m, int tile_n);

/* Enqueues the standalone persistent GEMM on `stream`. Returns a weave_result_t; on failure a
 * message is written to errmsg (if not NULL). Tensor maps are encoded per call (about a microsecond
 * of host time; no cache, so pointers may change freely between calls). */
int weave_hgemm_launch(const weave_hgemm_args_t *args, cudaStream_t stream, char *errmsg, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* WEAVE_GEMM_HOPPER_H */
