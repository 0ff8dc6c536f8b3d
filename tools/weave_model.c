/* weave-model: the cost model past one node (docs/multinode.md), as the markdown tables of that
 * document: baseline (cuBLASLt + NCCL's two-level reduce-scatter), weave hierarchical as designed (the
 * fused kernel inside each node, NCCL between nodes chunk by chunk) and as built (the node step, then
 * the step between nodes) and the bound, per node count.
 * Usage: weave-model [M ...]   (default: 8192 and 512; N 8192, K_total 28672, bf16, bf16 partials) */
#include <stdio.h>
#include <stdlib.h>

#include "plan/plan_model.h"

#define CHUNKS 16      /* the most pieces between nodes; the model picks the best count */
#define LATENCY_US 5.0 /* per message between nodes (an assumption: docs/multinode.md) */

static void table(int M, int N, int K) {
  printf(
      "M = %d, N = %d, K_total = %d, bf16 in and out, %.0f us a message between nodes; ms per call, the pieces "
      "weave sends between nodes, and its speedup over the baseline\n\n",
      M, N, K, LATENCY_US);
  printf(
      "| system | GPUs | nodes | GEMM | NVLink RS | network RS | baseline | weave | pieces | bound | baseline / weave "
      "| weave as built | baseline / built |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const struct {
    int device;
    double gbps;
  } systems[] = {{0, 400}, {0, 800}, {1, 400}, {1, 800}};
  for (size_t s = 0; s < sizeof(systems) / sizeof(systems[0]); ++s)
    for (int nodes = 1; nodes <= 16; nodes *= 2) {
      const weave_cluster_t c = {&weave_roofline_devices[systems[s].device], nodes, 8, systems[s].gbps, LATENCY_US};
      weave_roofline_nodes_t r;
      weave_roofline_nodes(&c, M, N, K, WEAVE_BF16, 2, CHUNKS, &r);
      printf("| %s, %.0f Gb/s | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %d | %.3f | %.2fx | %.3f | %.2fx |\n",
             c.device->name, systems[s].gbps, 8 * nodes, nodes, r.t_gemm_ms, r.t_intra_ms, r.t_inter_ms,
             r.t_baseline_ms, r.t_weave_ms, r.chunks_used, r.t_bound_ms, r.t_baseline_ms / r.t_weave_ms, r.t_built_ms,
             r.t_baseline_ms / r.t_built_ms);
    }
  for (int g = 8; g <= 72; g = g == 64 ? 72 : g * 2) { /* one NVL72 domain: one node of g GPUs */
    const weave_cluster_t c = {&weave_roofline_devices[2], 1, g, 0, 0};
    weave_roofline_nodes_t r;
    weave_roofline_nodes(&c, M, N, K, WEAVE_BF16, 2, CHUNKS, &r);
    printf("| %s, one NVLink domain | %d | 1 | %.3f | %.3f | - | %.3f | %.3f | - | %.3f | %.2fx | %.3f | %.2fx |\n",
           c.device->name, g, r.t_gemm_ms, r.t_intra_ms, r.t_baseline_ms, r.t_weave_ms, r.t_bound_ms,
           r.t_baseline_ms / r.t_weave_ms, r.t_built_ms, r.t_baseline_ms / r.t_built_ms);
  }
  printf("\n");
}

/* A text plot of ms per call against the node count: baseline (b), weave (w), bound (|). */
static void plot(int M, double gbps) {
  printf(
      "```\nH100 SXM, %.0f Gb/s a GPU, M = %d, N = 8192, K_total = 28672: ms per call (b baseline, w weave, | bound)\n",
      gbps, M);
  double scale = 0;
  weave_roofline_nodes_t r[5];
  for (int i = 0, nodes = 1; i < 5; ++i, nodes *= 2) {
    const weave_cluster_t c = {&weave_roofline_devices[0], nodes, 8, gbps, LATENCY_US};
    weave_roofline_nodes(&c, M, 8192, 28672, WEAVE_BF16, 2, CHUNKS, &r[i]);
    if (r[i].t_baseline_ms > scale) scale = r[i].t_baseline_ms;
  }
  for (int i = 0, nodes = 1; i < 5; ++i, nodes *= 2) {
    const double v[2] = {r[i].t_baseline_ms, r[i].t_weave_ms};
    for (int k = 0; k < 2; ++k) {
      char bar[64];
      const int len = (int)(60 * v[k] / scale + 0.5), at = (int)(60 * r[i].t_bound_ms / scale + 0.5);
      for (int j = 0; j < 60; ++j) bar[j] = j < len ? (k ? 'w' : 'b') : ' ';
      if (at >= 0 && at < 60) bar[at] = '|';
      bar[60] = 0;
      if (k)
        printf("         %s %.3f\n", bar, v[k]);
      else
        printf("%2d node%s %s %.3f\n", nodes, nodes > 1 ? "s" : " ", bar, v[k]);
    }
  }
  printf("```\n\n");
}

int main(int argc, char **argv) {
  if (argc == 1) {
    table(8192, 8192, 28672);
    table(512, 8192, 28672);
    plot(8192, 400);
    plot(8192, 800);
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    const int M = atoi(argv[i]);
    if (M < 1) {
      fprintf(stderr, "weave-model: M '%s' must be a positive integer\n", argv[i]);
      return 2;
    }
    table(M, 8192, 28672);
  }
  return 0;
}
