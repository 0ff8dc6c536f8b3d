/* Device side of GEMM + ReduceScatter: the owner's reduction, the GEMM and communication roles and
 * the kernels (one translation unit includes it: kernels/gemm_rs.cu). */
#ifndef WEAVE_KERNELS_GEMM_RS_ROLES_CUH
#define WEAVE_KERNELS_GEMM_RS_ROLES_CUH

#include "gemm/hopper/gemm_hopper.cuh"
#include "gemm/mma/gemm_mma.cuh"
#include "kernels/gemm_rs_sinks.cuh"

/* ------------------------------------------------------------------------------------------------
 * owner-side reduction of one tile region from `world` sources, rank order, fp32
 * ---------------------------------------------------------------------------------------------- */
/* Rows [r0, r1) and columns [c0, c1) of the owner's chunk. src(s) is source s's partial for the
 * chunk's first row (row stride N). zero_after: clear src(0) after reading (atomic accumulator). */
#define WEAVE_REDUCE_UNROLL 4 /* 16-byte vectors in flight per thread and source */

template <typename S, typename T, class Src>
__device__ void weave_reduce_region(const weave_fused_params_t &p, const weave_threads &g, Src src, int nsrc, int r0,
                                    int r1, int c0, int c1, bool zero_after) {
  const int N = p.N, w = c1 - c0;
  T *out = (T *)p.C_out;
  if ((N % 8) == 0 && p.out_vec && w >= 8) {
    /* Vectors of 8 elements; consecutive threads take consecutive vectors (coalesced); each thread
     * keeps UNROLL vectors of every source in flight before it adds, in rank order. A thread walks
     * its vectors as (row, vector-in-row), advanced by the group size with a carry: no division or
     * 64-bit modulo per vector (they made the one-source loop integer-bound, docs/performance.md). */
    const int groups = w / 8, rows = r1 - r0, step_r = g.n / groups, step_v = g.n - step_r * groups;
    int row = g.tid / groups, vec = g.tid - row * groups; /* this thread's next vector */
    while (row < rows) {
      float acc[WEAVE_REDUCE_UNROLL][8];
      size_t off[WEAVE_REDUCE_UNROLL];
      int col[WEAVE_REDUCE_UNROLL];
      bool ok[WEAVE_REDUCE_UNROLL];
#pragma unroll
      for (int u = 0; u < WEAVE_REDUCE_UNROLL; ++u) {
        ok[u] = row < rows;
        col[u] = c0 + vec * 8;
        off[u] = ok[u] ? (size_t)(r0 + row) * N + col[u] : 0;
        if (ok[u]) weave_load8_cg(src(0) + off[u], acc[u]);
        row += step_r;
        vec += step_v;
        if (vec >= groups) {
          vec -= groups;
          ++row;
        }
      }
      for (int s = 1; s < nsrc; ++s) {
        float v[WEAVE_REDUCE_UNROLL][8];
#pragma unroll
        for (int u = 0; u < WEAVE_REDUCE_UNROLL; ++u)
          if (ok[u]) weave_load8_cg(src(s) + off[u], v[u]);
#pragma unroll
        for (int u = 0; u < WEAVE_REDUCE_UNROLL; ++u)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[u][i] += v[u][i];
      }
#pragma unroll
      for (int u = 0; u < WEAVE_REDUCE_UNROLL; ++u) {
        if (!ok[u]) continue;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[u][i] = p.alpha * acc[u][i] + weave_bias_at(p.bias, p.dtype, col[u] + i);
        weave_store8(out + off[u], acc[u]);
        if (zero_after) {
          float *z = (float *)src(0) + off[u];
          ((float4 *)z)[0] = make_float4(0.f, 0.f, 0.f, 0.f);
          ((float4 *)z)[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
    }
  } else {
    const int items = (r1 - r0) * w;
    for (int it = g.tid; it < items; it += g.n) {
      int r = r0 + it / w, c = c0 + it % w;
      size_t off = (size_t)r * N + c;
      float acc = weave_to_f(__ldcg(src(0) + off));
      for (int s = 1; s < nsrc; ++s) acc += weave_to_f(__ldcg(src(s) + off));
      out[off] = weave_from_f<T>(p.alpha * acc + weave_bias_at(p.bias, p.dtype, c));
      if (zero_after) ((float *)src(0))[off] = 0.f;
    }
  }
}

template <typename S>
struct weave_local_slots {
  const S *base;
  size_t stride;
  __device__ const S *operator()(int s) const { return base + (size_t)s * stride; }
};
template <typename S>
struct weave_peer_partials {
  const weave_device_team_t *t;
  const S *base; /* this rank's first row in the local P */
  __device__ const S *operator()(int s) const { return weave_peer_ptr(t, base, s); }
};

/* Thread s < nsrc of the group waits flags[s * stride] >= value. Group-uniform result: non-zero on
 * failure. */
__device__ int weave_block_wait_sources(const weave_threads &g, const weave_device_team_t &t, const uint32_t *flags,
                                        size_t stride, int nsrc, uint32_t value, int item) {
  bool bad = false;
  if (g.tid < nsrc) bad = weave_wait_until(&t, flags + (size_t)g.tid * stride, WEAVE_CMP_GE, value, g.tid, item) != 0;
  return g.sync_or(bad);
}

/* ------------------------------------------------------------------------------------------------
 * kernels
 * ---------------------------------------------------------------------------------------------- */
template <typename T, class Sink>
__device__ __forceinline__ void weave_gemm_role(const weave_mma_args_t &a, unsigned char *smem, int begin, int stride,
                                                int count, Sink &sink) {
  if constexpr (sizeof(T) == 4)
    weave_mma_simt_gemm_role(a, smem, begin, stride, count, sink);
  else
    weave_mma_gemm_role<T>(a, smem, begin, stride, count, sink);
}

/* The GEMM role of the fused kernel: TMA + wgmma (384 threads) or mma.sync / SIMT (256 threads); FP8:
 * the fp8 wgmma role (inputs e4m3, T is the output type; PROMOTE: fp32 accumulation), whose tiles
 * reach the sink already scaled by this call's p.hg.scales (so do the partials it pushes). PAIR
 * (Hopper role): launched in 2-CTA clusters whose CTAs take walk steps 2q and 2q + 1, two tile
 * columns of one tile row (p.tiling.pair_n), sharing A (p.hg.tmap_a's box is half a tile's rows). */
template <typename T, bool HOPPER, bool FP8, bool PROMOTE, bool PAIR, class Sink>
__device__ __forceinline__ void weave_fused_gemm(const weave_fused_params_t &p, unsigned char *smem_raw, int total,
                                                 Sink &sink) {
  static_assert(!PAIR || HOPPER, "2-CTA clusters run on the Hopper role only");
  constexpr int CL = PAIR ? 2 : 1;
  if constexpr (FP8) {
    static_assert(HOPPER, "fp8 runs on the Hopper role only");
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    weave_hgemm_role_fp8<CL, PROMOTE, Sink, PAIR>(p.hg, smem, blockIdx.x, p.gemm_blocks, total, sink);
  } else if constexpr (HOPPER && sizeof(T) == 2) {
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    weave_hgemm_role<CL, Sink, PAIR>(p.hg, smem, blockIdx.x, p.gemm_blocks, total, sink);
  } else {
    weave_mma_args_t a = {p.M, p.N, p.K, p.A, p.B, p.b_layout == WEAVE_LAYOUT_COL, p.vec_ok};
    weave_gemm_role<T>(a, smem_raw, blockIdx.x, p.gemm_blocks, total, sink);
  }
}

/* Communication role of the fused kernel (see the top of the file): owner tiles j = blockIdx -
 * gemm_blocks, + comm_blocks, ... of this rank, each waited for and reduced by the group g. */
template <typename T, typename S, bool ATOMIC>
__device__ __forceinline__ void weave_fused_comm(const weave_fused_params_t &p, const weave_threads &g,
                                                 uint32_t epoch) {
  const weave_device_team_t &t = p.team;
  int row_begin, rows;
  weave_split_rows_of(p.M, t.world, t.rank, &row_begin, &rows);
  const int mine = weave_owner_tiles(&p.tiling, t.rank);
  for (int j = blockIdx.x - p.gemm_blocks; j < mine; j += p.comm_blocks) {
    int tm, tn;
    weave_owner_tile_coords(&p.tiling, t.rank, j, &tm, &tn);
    int r0 = tm * p.tiling.tile_m, r1 = min(r0 + p.tiling.tile_m, rows);
    int c0 = tn * p.tiling.tile_n, c1 = min(c0 + p.tiling.tile_n, p.N);
    uint64_t t0 = p.trace ? weave_trace_now() : 0, t1 = 0;
    if constexpr (ATOMIC) {
      if (weave_block_wait_sources(g, t, p.tile_flags + j, 0, 1, (uint32_t)t.world * epoch, j)) break;
      if (p.trace) t1 = weave_trace_now();
      weave_local_slots<float> src = {(const float *)p.data, 0};
      weave_reduce_region<float, T>(p, g, src, 1, r0, r1, c0, c1, true);
    } else {
      if (weave_block_wait_sources(g, t, p.tile_flags + j, (size_t)p.tiles_cap, t.world, epoch, j)) break;
      if (p.trace) t1 = weave_trace_now();
      weave_local_slots<S> src = {(const S *)p.data, (size_t)p.rows_cap * p.N};
      weave_reduce_region<S, T>(p, g, src, t.world, r0, r1, c0, c1, false);
    }
    if (p.trace) { /* uniform branch, once per tile */
      g.sync();
      if (g.tid == 0) {
        weave_trace_put(p.trace, p.trace_cap, p.trace_count, t0, t1, WEAVE_TRACE_WAIT, t.rank, j, -1);
        weave_trace_put(p.trace, p.trace_cap, p.trace_count, t1, weave_trace_now(), WEAVE_TRACE_REDUCE, t.rank, j, -1);
      }
    }
  }
}

#define WEAVE_FUSED_THREADS(H) ((H) ? WEAVE_HGEMM_THREADS : WEAVE_MMA_THREADS)

/* S: slot type (deterministic) or float (atomic accumulator); T: input/output type (FP8: output type,
 * inputs e4m3; PROMOTE: their accumulation promoted to fp32); PAIR: 2-CTA clusters sharing A
 * (weave_fused_gemm; gemm_blocks and comm_blocks even, so that no cluster mixes the roles). */
template <typename T, typename S, bool ATOMIC, bool HOPPER, bool FP8 = false, bool PROMOTE = false, bool PAIR = false>
__global__ void __launch_bounds__(WEAVE_FUSED_THREADS(HOPPER), 1)
    weave_fused_kernel(const __grid_constant__ weave_fused_params_t p) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const weave_device_team_t &t = p.team;
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  if ((int)blockIdx.x < p.gemm_blocks) {
    int total = weave_total_tiles(&p.tiling);
    if constexpr (ATOMIC) {
      weave_atomic_sink sink;
      sink.init(&p);
      weave_fused_gemm<T, HOPPER, FP8, PROMOTE, PAIR>(p, smem, total, sink);
    } else {
      weave_slot_sink<S> sink;
      sink.init(&p);
      weave_fused_gemm<T, HOPPER, FP8, PROMOTE, PAIR>(p, smem, total, sink);
    }
  } else {
    if constexpr (HOPPER) {
      /* the GEMM blocks' register split here too (see weave_hgemm_regs_restore): warpgroup 0
       * idles, warpgroups 1-2 reduce */
      if (weave_hgemm_regs_split())
        weave_fused_comm<T, S, ATOMIC>(
            p,
            weave_threads{(int)threadIdx.x - (WEAVE_HGEMM_THREADS - WEAVE_HGEMM_CONSUMER_THREADS),
                          WEAVE_HGEMM_CONSUMER_THREADS, WEAVE_HGEMM_CONSUMER_BARRIER_ID},
            epoch);
    } else {
      weave_fused_comm<T, S, ATOMIC>(p, weave_whole_block(), epoch);
    }
  }
  /* both paths ran one split (the role's or the comm blocks'): exactly one restore here. (A second
   * one would reuse the restore barrier while consumers' non-blocking arrivals of the first may still
   * be pending, i.e. miscount it.) */
  if constexpr (HOPPER) weave_hgemm_regs_restore();
  weave_block_arrive_and_signal(t, &p.ctl->arrive[0], gridDim.x, epoch, p.ctl->done, &p.ctl->epoch);
}

template <typename T, typename O>
__global__ void __launch_bounds__(WEAVE_MMA_THREADS, 1)
    weave_gemm_kernel(weave_mma_args_t a, weave_store_sink<O> sink) {
  extern __shared__ __align__(128) unsigned char smem[];
  int tiles = weave_cdiv(a.M, WEAVE_MMA_BM) * weave_cdiv(a.N, WEAVE_MMA_BN);
  weave_gemm_role<T>(a, smem, blockIdx.x, gridDim.x, tiles, sink);
}

__global__ void weave_wait_done_kernel(const __grid_constant__ weave_fused_params_t p) {
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  weave_block_wait_sources(weave_whole_block(), p.team, p.ctl->done, 1, p.team.world, weave_credit_epoch(epoch), -1);
}

/* One block: publish this rank's partial (ready[rank] = epoch into every peer), then wait for every
 * peer's. Only this block spins: the reduce-scatter kernel after it in stream order does not, so no
 * spinning block of one rank can hold an SM that another rank's GEMM (cuBLASLt's included, whose
 * kernels may need all their CTAs resident) is waiting for. */
__global__ void weave_ready_barrier_kernel(const __grid_constant__ weave_fused_params_t p) {
  /* The GEMM before this kernel in stream order wrote P; fence at system scope so the release below
   * carries those writes to the peers of other GPUs too. */
  __threadfence_system();
  /* the step before failed (its error is this rank's to report): no partial to publish (one read,
   * the block's answer, so that every thread leaves or none) */
  if (p.upstream_error && __syncthreads_or(threadIdx.x == 0 && weave_ld<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>(
                                                                   p.upstream_error) != WEAVE_DEVICE_OK))
    return;
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  if ((int)threadIdx.x < p.team.world)
    weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p.team, &p.ctl->ready[p.team.rank], (int)threadIdx.x),
                                                 epoch);
  weave_block_wait_sources(weave_whole_block(), p.team, p.ctl->ready, 1, p.team.world, epoch, -1);
}

template <typename S, typename T>
__global__ void __launch_bounds__(WEAVE_MMA_THREADS)
    weave_reduce_scatter_kernel(const __grid_constant__ weave_fused_params_t p) {
  const weave_device_team_t &t = p.team;
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  int row_begin, rows;
  weave_split_rows_of(p.M, t.world, t.rank, &row_begin, &rows);
  if (!weave_device_failed(&t)) { /* the ready barrier before this kernel gave up: skip the reads */
    weave_peer_partials<S> src = {&t, (const S *)p.data + (size_t)row_begin * p.N};
    const int mine = weave_owner_tiles(&p.tiling, t.rank);
    for (int j = blockIdx.x; j < mine; j += gridDim.x) {
      int tm, tn;
      weave_owner_tile_coords(&p.tiling, t.rank, j, &tm, &tn);
      int r0 = tm * p.tiling.tile_m, r1 = min(r0 + p.tiling.tile_m, rows);
      int c0 = tn * p.tiling.tile_n, c1 = min(c0 + p.tiling.tile_n, p.N);
      weave_reduce_region<S, T>(p, weave_whole_block(), src, t.world, r0, r1, c0, c1, false);
    }
  }
  weave_block_arrive_and_signal(t, &p.ctl->arrive[1], gridDim.x, epoch, p.ctl->done, &p.ctl->epoch);
}

/* C[rows, N] += bias[N]: the NCCL baseline's bias, added once by the owner. */
template <typename T>
__global__ void weave_add_bias_kernel(T *C, size_t n, int N, const T *bias) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    C[i] = weave_from_f<T>(weave_to_f(C[i]) + weave_to_f(bias[i % N]));
}

#endif
