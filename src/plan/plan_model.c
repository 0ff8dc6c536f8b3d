/* The plan's cost model and byte counts: see plan_model.h. */
#include "plan/plan_model.h"

void weave_split_inputs_from_device(int sm_count, double clock_hz, double hbm_bytes_per_s, weave_dtype_t dtype,
                                    int blocks_per_sm, int budget, weave_split_inputs_t *in) {
  /* Rates calibrated against the measurements of docs/performance.md. A GEMM block of the fused kernel sustains
   * ~0.65 of the SM's 4096 dense 16-bit FLOP/clock at the maximum clock (~5.3 TFLOP/s a block at
   * M = N = 8192, K_total = 28672, bf16 slots; the card runs at its power limit, ~1.5 GHz, below
   * that clock). A communication block moves ~15-19 GB/s, 0.45 of an even share of HBM bandwidth.
   * The fixed cost per owner tile is 1 us: small, since the bytes term alone already over-estimates
   * a 1-rank tile (~6.3 us at 4 blocks), yet with it the model picks the splits measured best at 1,
   * 4 and 8 ranks (4, 2, 2 communication blocks; tests/test_plan.c holds it to them). A bytes-only
   * model would pick 3 at 1 rank, which has not been measured. */
  double sm_flops = (dtype == WEAVE_FP32 ? 128.0 : 4096.0 * 0.65) * clock_hz;
  if (weave_dtype_is_fp8(dtype)) sm_flops *= 2.0; /* the fp8 tensor-core rate (not calibrated) */
  if (blocks_per_sm < 1) blocks_per_sm = 1;
  in->blocks = budget;
  in->flops_per_block = sm_flops / blocks_per_sm;
  in->bytes_per_block = 0.45 * hbm_bytes_per_s / (sm_count > 0 ? sm_count : 1) / blocks_per_sm;
  in->seconds_per_tile = 1.0e-6 * blocks_per_sm;
}

int weave_split_comm_blocks(const weave_split_inputs_t *in, double gemm_flops, double comm_bytes, double comm_tiles) {
  if (!in || in->blocks < 2) return in && in->blocks == 1 ? 0 : -1;
  int best = 1;
  double best_t = -1;
  for (int c = 1; c < in->blocks; ++c) {
    double tg = gemm_flops / ((double)(in->blocks - c) * in->flops_per_block);
    double tc = (comm_bytes / in->bytes_per_block + comm_tiles * in->seconds_per_tile) / (double)c;
    double t = tg > tc ? tg : tc;
    if (best_t < 0 || t < best_t) {
      best_t = t;
      best = c;
    }
  }
  return best;
}

double weave_plan_gemm_flops(int M, int N, int K_local, int world) {
  (void)world;
  return 2.0 * (double)M * (double)N * (double)K_local;
}

double weave_plan_comm_bytes(int M, int N, int world, size_t slot_bytes, size_t out_bytes) {
  /* Owner of ceil(M/world) rows reads one partial per source and writes the result once. */
  double rows = (double)((M + world - 1) / world);
  return rows * (double)N * ((double)world * (double)slot_bytes + (double)out_bytes);
}

size_t weave_plan_bytes_sent(int M, int N, int world, int rank, size_t slot_bytes) {
  int b, rows;
  weave_split_rows_of(M, world, rank, &b, &rows);
  return (size_t)(M - rows) * (size_t)N * slot_bytes;
}

/* Dense datasheet rates. GB200: the B200 of an NVL72 rack at 1.2 kW, 2.5 / 5 PFLOP/s bf16 / fp8,
 * 8 TB/s HBM3e, NVLink 5 at 900 GB/s a direction (docs/multinode.md cites the sources). */
const weave_roofline_device_t weave_roofline_devices[3] = {
    {"H100 SXM", 989.0, 1979.0, 67.0, 3.35, 450.0},
    {"H200 SXM", 989.0, 1979.0, 67.0, 4.8, 450.0},
    {"GB200 (NVL72)", 2500.0, 5000.0, 90.0, 8.0, 900.0},
};

void weave_roofline(const weave_roofline_device_t *d, int M, int N, int K_total, int world, weave_dtype_t in,
                    size_t elt_bytes, weave_roofline_t *out) {
  double flops = 2.0 * M * (double)N * K_total / world;
  const double tflops = weave_dtype_is_fp8(in) ? d->tflops_fp8 : in == WEAVE_FP32 ? d->tflops_fp32 : d->tflops_bf16;
  out->t_gemm_ms = flops / (tflops * 1e12) * 1e3;
  /* Ring/direct reduce-scatter: each GPU sends (world-1)/world of its partial over its links. */
  double bytes = (double)M * N * elt_bytes * (world - 1) / world;
  out->t_rs_ms = world > 1 ? bytes / (d->nvlink_gbps * 1e9) * 1e3 : 0.0;
  out->t_baseline_ms = out->t_gemm_ms + out->t_rs_ms;
  out->t_fused_ms = out->t_gemm_ms > out->t_rs_ms ? out->t_gemm_ms : out->t_rs_ms;
}

void weave_roofline_ag(const weave_roofline_device_t *d, int M, int N, int K, int world, weave_dtype_t in,
                       weave_roofline_t *out) {
  /* the GEMM of one rank: weave_roofline's of a K_total spread over one rank */
  weave_roofline(d, M, N, K, 1, in, 0, out);
  const double bytes = (double)M * K * weave_dtype_size(in) * (world - 1) / world;
  out->t_rs_ms = world > 1 ? bytes / (d->nvlink_gbps * 1e9) * 1e3 : 0.0;
  out->t_baseline_ms = out->t_gemm_ms + out->t_rs_ms;
  out->t_fused_ms = out->t_gemm_ms > out->t_rs_ms ? out->t_gemm_ms : out->t_rs_ms;
}

void weave_roofline_nodes(const weave_cluster_t *c, int M, int N, int K_total, weave_dtype_t in, size_t elt_bytes,
                          int max_chunks, weave_roofline_nodes_t *out) {
  const int n = c->nodes > 0 ? c->nodes : 1, g = c->gpus_per_node > 0 ? c->gpus_per_node : 1;
  weave_roofline_t node;
  /* the GEMM and the intra-node step are one node's roofline, its K_total the whole world's */
  weave_roofline(c->device, M, N, K_total / n, g, in, elt_bytes, &node);
  out->t_gemm_ms = node.t_gemm_ms;
  out->t_intra_ms = node.t_rs_ms;
  const double share = (double)M * N * elt_bytes / g; /* each GPU's node-reduced rows */
  const double steps_ms = (n - 1) * c->net_latency_us * 1e-3;
  out->t_inter_ms = n > 1 ? share * (n - 1) / n / (c->net_gbps * 1e9 / 8.0) * 1e3 : 0.0;
  out->t_baseline_ms = node.t_baseline_ms + out->t_inter_ms + (n > 1 ? steps_ms : 0.0);
  const double t_node = node.t_fused_ms;
  out->t_bound_ms = t_node > out->t_inter_ms ? t_node : out->t_inter_ms;
  out->t_weave_ms = t_node;
  out->t_built_ms = t_node + out->t_inter_ms + (n > 1 ? steps_ms : 0.0);
  out->chunks_used = 1;
  if (n == 1) return;
  for (int C = 1; C <= (max_chunks > 0 ? max_chunks : 1); ++C) {
    const double piece = out->t_inter_ms / C + steps_ms, node_piece = t_node / C;
    const double t = node_piece + piece + (C - 1) * (node_piece > piece ? node_piece : piece);
    if (C == 1 || t < out->t_weave_ms) {
      out->t_weave_ms = t;
      out->chunks_used = C;
    }
  }
}

weave_strategy_t weave_auto_model(const weave_auto_model_in_t *in, weave_auto_model_t *out) {
  const double launch = 5e-6, sync = 10e-6; /* a kernel launch; a reduce-scatter's flag round trip */
  const int shared = in->ranks_on_device > 1 ? in->ranks_on_device : 1;
  const double flops = 2.0 * in->M * (double)in->N * in->K * shared;
  const double weave_rate = weave_dtype_is_fp8(in->dtype) && !in->fp8_fast ? 0.8 : 1.0;
  const double t_lt = flops / in->gpu_flops + launch;
  const double t_weave = flops / (in->gpu_flops * weave_rate) + launch;
  double t_rs = 0;
  if (in->world > 1) {
    if (shared > 1) /* every sharing rank's owner reads world partials and writes its rows, on one HBM */
      t_rs =
          shared * weave_plan_comm_bytes(in->M, in->N, in->world, in->slot_bytes, in->out_bytes) / in->hbm_bytes_per_s;
    else
      t_rs = (double)in->M * in->N * in->slot_bytes * (in->world - 1) / in->world / in->link_bytes_per_s;
    t_rs += sync;
  }
  const int budget = in->gemm_blocks + in->comm_blocks;
  const double t_g = in->gemm_blocks > 0 ? t_weave * budget / in->gemm_blocks : 1e30;
  out->baseline_ms = (t_lt + t_rs) * 1e3;
  out->bulk_ms = (t_weave + t_rs) * 1e3;
  out->fused_ms = ((t_g > t_rs ? t_g : t_rs) + t_rs / in->world) * 1e3;
  weave_strategy_t s = WEAVE_STRATEGY_BASELINE;
  double best = out->baseline_ms;
  if (out->bulk_ms < 0.97 * best) {
    s = WEAVE_STRATEGY_BULK;
    best = out->bulk_ms;
  }
  if (out->fused_ms < 0.97 * best) s = WEAVE_STRATEGY_FUSED;
  return s;
}
