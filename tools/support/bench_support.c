/* What weave-bench needs from weave's internals: see bench_support.h. */
#include "bench_support.h"

#include <string.h>

#include "common/dtype.h"
#include "plan/plan_model.h"
#include "plan/autotune.h"
#include "plan/tune.h"
#include "kernels/kernels.h"
#include "runtime/internal.h"

void bench_print_plan(FILE *f, int M, int N, int K_total, int world, weave_dtype_t dtype, weave_layout_t layout,
                      weave_tile_order_t order) {
  int K = K_total / world, tm, tn;
  const size_t osz = weave_dtype_size(weave_dtype_out(dtype, WEAVE_DTYPE_AUTO)); /* what travels: the output type */
  int hopper = weave_kernel_hopper_ok(dtype, layout, N, K);
  weave_kernel_tile_shape(hopper, &tm, &tn);
  weave_tiling_t t = {M, N, world, tm, tn, (int)order, 0};
  fprintf(f,
          "# plan of the fused kernel: %s role, tiles %dx%d, each owner's rows tiled on their own, owners\n"
          "# interleaved tile by tile in an order rotated per rank (%s)\n",
          hopper ? "TMA + wgmma" : "mma.sync", t.tile_m, t.tile_n,
          order == WEAVE_ORDER_OWN_FIRST ? "own tile first in each round" : "own tile last in each round");
  fprintf(f, "#  rank  rows[begin,+n)     tiles_owned  owners in a round          bytes sent/call (%s slots)\n",
          weave_dtype_name(weave_dtype_out(dtype, WEAVE_DTYPE_AUTO)));
  for (int r = 0; r < world; ++r) {
    int rb, rows;
    weave_split_rows_of(M, world, r, &rb, &rows);
    char owners[64] = "";
    for (int k = 0; k < world && k < 8; ++k) {
      char x[16];
      snprintf(x, sizeof(x), "%d ", weave_visit_owner(&t, r, k));
      strncat(owners, x, sizeof(owners) - strlen(owners) - 1);
    }
    fprintf(f, "#  %4d  [%6d,+%6d)  %11d  %-25s  %zu\n", r, rb, rows, weave_owner_tiles(&t, r), owners,
            weave_plan_bytes_sent(M, N, world, r, osz));
  }
  fprintf(f, "#  total tiles %d; symmetric memory per rank (deterministic, %s slots): %.1f MB\n", weave_total_tiles(&t),
          weave_dtype_name(weave_dtype_out(dtype, WEAVE_DTYPE_AUTO)),
          (double)world * weave_cdiv(M, world) * N * osz / 1e6);
  /* The plan's split model with an H200's datasheet clock and bandwidth, one rank per GPU. */
  weave_split_inputs_t in;
  weave_split_inputs_from_device(132, 1.98e9, 4.8e12, dtype, 1, 132, &in);
  int c = weave_split_comm_blocks(&in, weave_plan_gemm_flops(M, N, K, world),
                                  weave_plan_comm_bytes(M, N, world, osz, osz), (double)weave_max_owner_tiles(&t));
  fprintf(f, "#  cost-model split on a 132-SM H200, one rank per GPU: %d GEMM + %d communication blocks\n", 132 - c, c);
  fprintf(f, "# roofline per GPU (datasheet rates; M=%d N=%d K_total=%d world=%d %s)\n", M, N, K_total, world,
          weave_dtype_name(dtype));
  fprintf(f, "#  %-10s %10s %10s %14s %12s %8s\n", "device", "gemm_ms", "rs_ms", "gemm+rs_ms", "overlap_ms", "bound");
  for (int d = 0; d < 2; ++d) {
    weave_roofline_t r;
    weave_roofline(&weave_roofline_devices[d], M, N, K_total, world, dtype, osz, &r);
    fprintf(f, "#  %-10s %10.3f %10.3f %14.3f %12.3f %7.2fx\n", weave_roofline_devices[d].name, r.t_gemm_ms, r.t_rs_ms,
            r.t_baseline_ms, r.t_fused_ms, r.t_fused_ms > 0 ? r.t_baseline_ms / r.t_fused_ms : 0);
  }
}

_Static_assert(sizeof(weave_tune_key_t) <= sizeof(bench_tune_key_t), "bench_tune_key_t too small");

void bench_tune_key(weave_team_t team, int M, int N, int K_local, const weave_gemm_rs_desc_t *desc,
                    bench_tune_key_t *key) {
  memset(key, 0, sizeof(*key));
  weave_tune_key_for(team, M, N, K_local, desc, (weave_tune_key_t *)key->bytes);
}

int bench_tune_record(const bench_tune_key_t *key, weave_strategy_t strategy, int gemm_blocks, int comm_blocks,
                      double speedup, char *path, size_t path_len, char *why, size_t why_len) {
  weave_tune_entry_t e;
  memset(&e, 0, sizeof(e));
  memcpy(&e.key, key->bytes, sizeof(e.key));
  e.strategy = strategy;
  e.gemm_blocks = gemm_blocks;
  e.comm_blocks = comm_blocks;
  e.speedup = speedup;
  int is_default = 0;
  if (weave_tune_path(getenv("WEAVE_TUNE_FILE"), path, path_len, &is_default) != 0) {
    snprintf(why, why_len, "no tuning cache: neither WEAVE_TUNE_FILE nor HOME is set");
    return -1;
  }
  return weave_tune_store(path, is_default, &e, 2000, why, why_len) == WEAVE_TUNE_FOUND ? 0 : -1;
}

int bench_check_env(void) {
  weave_env_t env;
  return weave_env_load(&env) == WEAVE_SUCCESS ? 0 : -1;
}

void bench_print_ag_roofline(FILE *f, const int *Ms, int nM, int N, int K, int world, weave_dtype_t dtype) {
  fprintf(f,
          "# AllGather + GEMM roofline per GPU (datasheet rates; N %d per rank, K %d, %s, %d ranks on GPUs of "
          "their own)\n#  %-10s %6s %10s %10s %15s %11s %7s\n",
          N, K, weave_dtype_name(dtype), world, "device", "M", "gemm_ms", "gather_ms", "gather+gemm_ms", "overlap_ms",
          "bound");
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < nM; ++i) {
      weave_roofline_t r;
      weave_roofline_ag(&weave_roofline_devices[d], Ms[i], N, K, world, dtype, &r);
      fprintf(f, "#  %-10s %6d %10.3f %10.3f %15.3f %11.3f %6.2fx\n", weave_roofline_devices[d].name, Ms[i],
              r.t_gemm_ms, r.t_rs_ms, r.t_baseline_ms, r.t_fused_ms, r.t_baseline_ms / r.t_fused_ms);
    }
}

int bench_rank_blocks(int blocks_on_gpu, int ranks_on_device) {
  return weave_rank_blocks(blocks_on_gpu, ranks_on_device);
}
