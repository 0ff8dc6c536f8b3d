/*
 * Host-side plan arithmetic (no CUDA): the GEMM/communication split from a cost model, the bytes a
 * plan holds and sends, and the roofline the bench prints without a GPU. Tested on the CPU.
 */
#ifndef WEAVE_GEMM_RS_PLAN_MODEL_H
#define WEAVE_GEMM_RS_PLAN_MODEL_H

#include <stddef.h>

#include "common/dtype.h"
#include "common/schedule.h"
#include "weave.h"

/* What the split depends on. Rates per SM so the answer scales with the SM share a rank gets. */
typedef struct {
  int blocks;              /* co-resident blocks this rank may use (its share of the GPU) */
  double flops_per_block;  /* tensor-core FLOP/s one GEMM block sustains */
  double bytes_per_block;  /* bytes/s one communication block moves through memory */
  double seconds_per_tile; /* fixed cost of one owner tile to a communication block (flag wait, barrier) */
} weave_split_inputs_t;

/* Rates of one block from the device: an sm_90 SM does 4096 dense 16-bit FLOP per clock (128 for
 * fp32 FMA) and the GEMM roles reach about two thirds of that at the maximum clock; a reduction block
 * moves about half of an even share of the chip's memory bandwidth and pays a fixed cost per tile
 * (it is latency-bound, so a model of bandwidth alone gives it too few blocks; weave-bench --tune
 * measures). */
void weave_split_inputs_from_device(int sm_count, double clock_hz, double hbm_bytes_per_s, weave_dtype_t dtype,
                                    int blocks_per_sm, int budget, weave_split_inputs_t *in);

/* Communication blocks that balance the owner-side reduction (comm_tiles owner tiles, each reading
 * world partial tiles and writing one output tile: comm_bytes in all) against the GEMM on the
 * remaining blocks: argmin_c max(t_gemm(blocks-c), t_comm(c)), at least 1 and at most blocks-1. */
int weave_split_comm_blocks(const weave_split_inputs_t *in, double gemm_flops, double comm_bytes, double comm_tiles);

/* Per rank and call: FLOPs of the local GEMM; bytes the owner-side reduction moves; bytes pushed to
 * peers. */
double weave_plan_gemm_flops(int M, int N, int K_local, int world);
double weave_plan_comm_bytes(int M, int N, int world, size_t slot_bytes, size_t out_bytes);
size_t weave_plan_bytes_sent(int M, int N, int world, int rank, size_t slot_bytes);

/* The cost model's strategy for an AUTO plan that has no measurement (WEAVE_AUTOTUNE=0, stream
 * capture, or timing that failed). Times per call as every rank sees them: the GPU runs the GEMMs of
 * all ranks_on_device ranks at once; the reduce-scatter crosses links between GPUs of their own, or is
 * a memory pass where ranks share one. weave's kernel is taken to run at cuBLASLt's rate, except fp8
 * with fp32 accumulation, at 0.8 of it (0.75-0.87 measured, docs/performance.md). The fused kernel
 * runs its GEMM on gemm_blocks of the budget, the reduction beside it, and a tail of one owner's share
 * of the reduction after it. Another strategy than the baseline must be predicted 3% faster. */
typedef struct {
  int M, N, K, world;
  int ranks_on_device; /* ranks sharing this GPU (1: every rank has a GPU of its own) */
  weave_dtype_t dtype;
  int fp8_fast; /* WEAVE_FP8_ACCUM_FAST */
  size_t slot_bytes, out_bytes;
  double gpu_flops; /* the whole GPU's dense rate for dtype, FLOP/s */
  double hbm_bytes_per_s, link_bytes_per_s;
  int gemm_blocks, comm_blocks; /* the fused kernel's split */
} weave_auto_model_in_t;
typedef struct {
  double baseline_ms, bulk_ms, fused_ms;
} weave_auto_model_t;
weave_strategy_t weave_auto_model(const weave_auto_model_in_t *in, weave_auto_model_t *out);

/* Roofline of one call on a published device (H100 / H200 SXM datasheet rates). */
typedef struct {
  const char *name;
  double tflops_bf16; /* dense tensor-core rates: bf16 / fp16, fp8 */
  double tflops_fp8;
  double tflops_fp32; /* CUDA cores: weave's fp32 GEMM does not use the tensor cores */
  double hbm_tbps;
  double nvlink_gbps; /* per direction, per GPU */
} weave_roofline_device_t;
extern const weave_roofline_device_t weave_roofline_devices[3]; /* H100 SXM, H200 SXM, GB200 (B200 in NVL72) */
typedef struct {
  double t_gemm_ms, t_rs_ms, t_baseline_ms, t_fused_ms;
} weave_roofline_t;
/* in: the inputs' type (the GEMM's rate); elt_bytes: a partial's element (what the reduce-scatter
 * moves). */
void weave_roofline(const weave_roofline_device_t *d, int M, int N, int K_total, int world, weave_dtype_t in,
                    size_t elt_bytes, weave_roofline_t *out);

/* AllGather + GEMM on one GPU of `world`: the GEMM of all M rows with this rank's N columns
 * (t_gemm_ms), and the gather of the other ranks' rows, (world - 1) / world of A [M, K], over NVLink
 * (in t_rs_ms); the baseline does one after the other, the fused kernel overlaps them. */
void weave_roofline_ag(const weave_roofline_device_t *d, int M, int N, int K, int world, weave_dtype_t in,
                       weave_roofline_t *out);

/* Past one node (docs/multinode.md): nodes of gpus_per_node GPUs, NVLink inside a node (one NVLink
 * domain; NVL72: 72 GPUs and one node), one NIC per GPU between nodes. K_total is split over all
 * nodes * gpus_per_node ranks; rank r keeps M / world rows of C.
 *   baseline: the GEMM, then NCCL's reduce-scatter in two levels: inside the node over NVLink
 *             ((g-1)/g of the partial), then between nodes over the NICs (each GPU's node-reduced
 *             1/g share, (n-1)/n of it), one after the other;
 *   weave:    inside each node the fused kernel (GEMM and intra-node reduction overlapped:
 *             max(t_gemm, t_intra), as weave_roofline's t_fused), the node-reduced rows handed to
 *             NCCL between nodes in C pieces, each piece's inter-node step overlapping the next
 *             piece's fused work: a pipeline of two stages, so
 *             (t_node + t_piece) + (C - 1) * max(t_node / C, t_piece), t_piece = t_inter / C plus
 *             the latency of its n - 1 steps; C the best of 1..max_chunks (chunks_used);
 *   built:    the plan as built today (plan/hier.h): the node step, then the rail step, not
 *             overlapped: t_node + t_inter + the latency of its n - 1 steps;
 *   bound:    max(t_gemm, t_intra, t_inter) (bandwidth only).
 * Between nodes every step of the baseline's ring, and of each piece, pays net_latency_us.
 * One node gives weave_roofline's times; links of infinite bandwidth and no latency give the
 * GEMM's. */
typedef struct {
  const weave_roofline_device_t *device;
  int nodes, gpus_per_node;
  double net_gbps;       /* Gbit/s per GPU and direction between nodes (400, 800); unused with one node */
  double net_latency_us; /* per message between nodes */
} weave_cluster_t;
typedef struct {
  double t_gemm_ms, t_intra_ms, t_inter_ms; /* t_inter: bandwidth term of the baseline's network step */
  double t_baseline_ms, t_weave_ms, t_bound_ms;
  double t_built_ms; /* the hierarchical plan as built: node step, then rail step */
  int chunks_used;
} weave_roofline_nodes_t;
void weave_roofline_nodes(const weave_cluster_t *c, int M, int N, int K_total, weave_dtype_t in, size_t elt_bytes,
                          int max_chunks, weave_roofline_nodes_t *out);

#endif
