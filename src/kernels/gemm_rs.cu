/*
 * GEMM + ReduceScatter kernels.
 *
 * Fused (one persistent kernel per rank, blocks specialised by blockIdx):
 *   GEMM blocks (blockIdx < gemm_blocks) walk this rank's tile sequence (owners rotated, see
 *   schedule.h). For a tile of owner o they
 *     1. once per owner and call, wait until o has finished reading the previous call's data
 *        (o pushed done[o] = epoch-1 into this rank's control words) -- the credit that lets slots
 *        be reused without a reset;
 *     2. write the partial tile straight into o's memory:
 *          deterministic: o's slot for this source rank (slot dtype): TMA stores from a swizzled
 *                         smem staging buffer (Hopper role, rows of 16-byte multiples), waited for
 *                         with cp.async.bulk.wait_group 0 + fence.proxy.async; else plain stores;
 *          atomic:        o's fp32 accumulator, red.relaxed.sys.add (v2 where aligned);
 *     3. block barrier, then one thread publishes with a release atomic at system scope:
 *          deterministic: flags_o[rank][tile] <- epoch      (atom.release.sys.exch)
 *          atomic:        count_o[tile] += 1                (red.release.sys.add; world per call)
 *   Communication blocks (the rest) own this rank's tiles (in the Hopper kernel only warpgroups 1-2
 *   of such a block work, under the GEMM blocks' register split: see weave_hgemm_regs_restore):
 *   for each, one thread per source polls the flag with ld.acquire.sys (bounded), a barrier that ORs
 *   the failures, then the threads sum the world partials in
 *   rank order 0..world-1 in fp32 (bitwise reproducible), applies alpha and bias once, casts and
 *   writes C_out. Atomic mode waits for count == world*epoch, reads, writes and re-zeroes the
 *   accumulator tile for the next call.
 *   Finally every block arrives on a counter; the last one publishes done[rank] = epoch into every
 *   peer (release, sys): the credit of step 1 for the next call.
 *   Progress: every block that waits is co-resident (the plan checks occupancy and divides the GPU
 *   between the ranks that share it); every wait is bounded by the team's timeout and the first
 *   expiry is recorded in the heap header; later waits give up at once, so the kernel always ends.
 *
 * Bulk (strategy 2 and the baseline's one-GPU path): wait_done (one block: peers finished reading
 *   the previous call's partials) -> GEMM into this rank's partial P (or cuBLASLt) -> ready_barrier
 *   (one block: release ready[rank] = epoch to every peer, wait for all) -> reduce_scatter (no waits:
 *   pull this rank's rows from every P in rank order, sum in fp32, write C_out; the last block
 *   publishes done). Only one-block kernels spin, so the GEMMs of ranks sharing a GPU always find SMs.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gemm/hopper/gemm_hopper.cuh"
#include "gemm/mma/gemm_mma.cuh"
#include "kernels/kernels.h"
#include "common/schedule.h"
#include "kernels/sync.cuh"

/* ------------------------------------------------------------------------------------------------
 * element conversions
 * ---------------------------------------------------------------------------------------------- */
__device__ __forceinline__ float weave_to_f(float v) { return v; }
__device__ __forceinline__ float weave_to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float weave_to_f(__half v) { return __half2float(v); }
template <typename T> __device__ __forceinline__ T weave_from_f(float v);
template <> __device__ __forceinline__ float weave_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 weave_from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half weave_from_f<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float weave_bias_at(const void *bias, int dtype, int c) {
  if (!bias) return 0.f;
  if (dtype == WEAVE_FP32) return ((const float *)bias)[c];
  if (dtype == WEAVE_FP16) return __half2float(((const __half *)bias)[c]);
  return __bfloat162float(((const __nv_bfloat16 *)bias)[c]);
}

/* Two adjacent elements; vector store when both exist and the pair is aligned (even column, even
 * N). */
template <typename T> __device__ __forceinline__ void weave_store_pair(T *dst, float v0, float v1, bool two, bool vec) {
  if (two && vec) {
    if constexpr (sizeof(T) == 4) {
      *(float2 *)dst = make_float2(v0, v1);
    } else {
      T pr[2] = {weave_from_f<T>(v0), weave_from_f<T>(v1)};
      *(uint32_t *)dst = *(uint32_t *)pr;
    }
  } else {
    dst[0] = weave_from_f<T>(v0);
    if (two) dst[1] = weave_from_f<T>(v1);
  }
}

/* Eight consecutive elements as floats, 16-byte aligned (32 for fp32), cache-global loads: the data
 * was written by other SMs or GPUs and is read once. */
template <typename T> __device__ __forceinline__ void weave_load8_cg(const T *p, float *v) {
  if constexpr (sizeof(T) == 4) {
    float4 a = __ldcg((const float4 *)p), b = __ldcg((const float4 *)p + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    uint4 u = __ldcg((const uint4 *)p);
    const T *e = (const T *)&u;
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = weave_to_f(e[i]);
  }
}
template <typename T> __device__ __forceinline__ void weave_store8(T *p, const float *v) {
  if constexpr (sizeof(T) == 4) {
    ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 u;
    T *e = (T *)&u;
#pragma unroll
    for (int i = 0; i < 8; ++i) e[i] = weave_from_f<T>(v[i]);
    *(uint4 *)p = u;
  }
}

/* ------------------------------------------------------------------------------------------------
 * sinks (see gemm_mma.cuh for the contract)
 * ---------------------------------------------------------------------------------------------- */

/* Plain GEMM: global tiles in grouped order, alpha + bias, cast to O. */
template <typename O> struct weave_store_sink {
  weave_tiling_t tiling;
  O *out;
  const void *bias;
  int bias_dtype;
  float alpha;
  int N;
  __device__ void coords(int seq, int *row0, int *col0) {
    int tm, tn;
    weave_owner_tile_coords(&tiling, 0, seq, &tm, &tn);
    *row0 = tm * tiling.tile_m;
    *col0 = tn * tiling.tile_n;
  }
  __device__ void begin(int) {}
  __device__ void store2(int row, int col, float v0, float v1) {
    bool two = col + 1 < N;
    v0 = alpha * v0 + weave_bias_at(bias, bias_dtype, col);
    if (two) v1 = alpha * v1 + weave_bias_at(bias, bias_dtype, col + 1);
    weave_store_pair(out + (size_t)row * N + col, v0, v1, two, (N & 1) == 0);
  }
  __device__ void end(int) {}
};

/* Fused: owner tiles of this rank's rotated walk. Shared by both reduction modes. */
struct weave_owner_walk {
  const weave_fused_params_t *p;
  int owner, j, row_begin, row_end;
  uint64_t t_tile; /* start of the tile (tracing): the end of the block's previous tile, or the start */
  uint64_t credit; /* owners whose previous call is known finished */
  bool dead;       /* a wait failed: stop publishing */
  __device__ void init(const weave_fused_params_t *pp) {
    p = pp;
    credit = 0;
    dead = false;
    t_tile = p->trace ? weave_trace_now() : 0;
  }
  __device__ void coords(int seq, int *row0, int *col0) {
    weave_seq_tile(&p->tiling, p->team.rank, seq, &owner, &j);
    int tm, tn, rows;
    weave_owner_tile_coords(&p->tiling, owner, j, &tm, &tn);
    weave_split_rows_of(p->M, p->team.world, owner, &row_begin, &rows);
    row_end = row_begin + rows;
    *row0 = row_begin + tm * p->tiling.tile_m;
    *col0 = tn * p->tiling.tile_n;
  }
  /* This call's epoch, read where it is used rather than held across the main loop (registers):
   * the block reads it before it arrives at the end of the kernel, and the word only advances
   * after every block has arrived. */
  __device__ uint32_t epoch() const { return weave_call_epoch(&p->ctl->epoch); }
  /* the tile's GEMM span: from the end of this block's previous tile (tiles run back to back) to
   * now. The Hopper role asks for a tile's coordinates under its first k-block, so owner / j /
   * row_begin / row_end stay live across the main loop (no spills: the build checks). */
  __device__ void trace_tile() {
    if (p->trace) {
      const uint64_t now = weave_trace_now();
      weave_trace_put(p->trace, p->trace_cap, p->trace_count, t_tile, now, WEAVE_TRACE_GEMM, p->team.rank, j, owner);
      t_tile = now;
    }
  }
  __device__ void begin(int) {
    if (dead || weave_credit_held(credit, owner)) return;
    if (weave_wait_until(&p->team, &p->ctl->done[owner], WEAVE_CMP_GE, weave_credit_epoch(epoch()), owner, -1) != 0)
      dead = true;
    credit = weave_credit_take(credit, owner);
  }
};

template <typename S> struct weave_slot_sink : weave_owner_walk {
  /* TMA-store epilogue (epilogue.cuh): the tile goes to o's slot through slot_map[o], clipped
   * at o's last row by the map; the role waits for the stores before end() publishes. */
  static constexpr bool kWeaveTmaStore = true;
  static constexpr bool kWeaveTmaPublish = true;
  typedef S TmaElem;
  __device__ bool tma_store() const { return p->tma_slots != 0; }
  __device__ bool tma_issue() const { return !dead; }
  __device__ const CUtensorMap *c_map() const { return &p->slot_map[owner]; }
  __device__ int tma_row(int row0) const { return row0 - row_begin; }
  __device__ bool epi_bias() const { return false; } /* raw partials: alpha and bias are the owner's */
  template <bool> __device__ void epi(int, float &, float &) {}
  __device__ void store2(int row, int col, float v0, float v1) {
    if (dead || row >= row_end) return;
    const int N = p->N;
    S *slot = (S *)p->data + ((size_t)p->team.rank * p->rows_cap + (row - row_begin)) * N + col;
    weave_store_pair(weave_peer_ptr(&p->team, slot, owner), v0, v1, col + 1 < N, (N & 1) == 0);
  }
  __device__ void end(int) {
    if (dead) return;
    uint32_t *flag = p->tile_flags + (size_t)p->team.rank * p->tiles_cap + j;
    weave_atomic_xchg<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p->team, flag, owner), epoch());
    trace_tile();
  }
};

struct weave_atomic_sink : weave_owner_walk {
  __device__ void store2(int row, int col, float v0, float v1) {
    if (dead || row >= row_end) return;
    const int N = p->N;
    float *acc = weave_peer_ptr(&p->team, (float *)p->data + (size_t)(row - row_begin) * N + col, owner);
    if (col + 1 < N && (N & 1) == 0) {
      asm volatile("red.relaxed.sys.global.add.v2.f32 [%0], {%1, %2};" ::"l"(acc), "f"(v0), "f"(v1) : "memory");
    } else {
      weave_red_add<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>(acc, v0);
      if (col + 1 < N) weave_red_add<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>(acc + 1, v1);
    }
  }
  __device__ void end(int) {
    if (dead) return;
    weave_red_add<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p->team, p->tile_flags + j, owner), 1u);
    trace_tile();
  }
};

/* The threads of a block that run the communication code: the whole block, or (fused Hopper kernel)
 * the 256 threads of warpgroups 1-2 under the GEMM blocks' register split, with their own named
 * barrier. */
struct weave_threads {
  int tid, n, bar; /* rank in the group, group size (a multiple of 32), named barrier id */
  __device__ void sync() const { weave_hgemm_named_barrier_sync(bar, n); }
  __device__ bool sync_or(bool pred) const { return weave_hgemm_named_barrier_or(bar, n, pred); }
};
__device__ __forceinline__ weave_threads weave_whole_block() { return {(int)threadIdx.x, (int)blockDim.x, 0}; }

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

template <typename S> struct weave_local_slots {
  const S *base; size_t stride;
  __device__ const S *operator()(int s) const { return base + (size_t)s * stride; }
};
template <typename S> struct weave_peer_partials {
  const weave_device_team_t *t; const S *base; /* this rank's first row in the local P */
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
  if constexpr (sizeof(T) == 4) weave_mma_simt_gemm_role(a, smem, begin, stride, count, sink);
  else weave_mma_gemm_role<T>(a, smem, begin, stride, count, sink);
}

/* The GEMM role of the fused kernel: TMA + wgmma (384 threads) or mma.sync / SIMT (256 threads); FP8:
 * the fp8 wgmma role (inputs e4m3, T is the output type; PROMOTE: fp32 accumulation), whose tiles
 * reach the sink already scaled by this call's p.hg.scales (so do the partials it pushes). */
template <typename T, bool HOPPER, bool FP8, bool PROMOTE, class Sink>
__device__ __forceinline__ void weave_fused_gemm(const weave_fused_params_t &p, unsigned char *smem_raw, int total,
                                                 Sink &sink) {
  if constexpr (FP8) {
    static_assert(HOPPER, "fp8 runs on the Hopper role only");
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    weave_hgemm_role_fp8<1, PROMOTE>(p.hg, smem, blockIdx.x, p.gemm_blocks, total, sink);
  } else if constexpr (HOPPER && sizeof(T) == 2) {
    unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    weave_hgemm_role<1>(p.hg, smem, blockIdx.x, p.gemm_blocks, total, sink);
  } else {
    weave_mma_args_t a = {p.M, p.N, p.K, p.A, p.B, p.b_layout == WEAVE_LAYOUT_COL, p.vec_ok};
    weave_gemm_role<T>(a, smem_raw, blockIdx.x, p.gemm_blocks, total, sink);
  }
}

/* Communication role of the fused kernel (see the top of the file): owner tiles j = blockIdx -
 * gemm_blocks, + comm_blocks, ... of this rank, each waited for and reduced by the group g. */
template <typename T, typename S, bool ATOMIC>
__device__ __forceinline__ void weave_fused_comm(const weave_fused_params_t &p, const weave_threads &g, uint32_t epoch) {
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
 * inputs e4m3; PROMOTE: their accumulation promoted to fp32). */
template <typename T, typename S, bool ATOMIC, bool HOPPER, bool FP8 = false, bool PROMOTE = false>
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
      weave_fused_gemm<T, HOPPER, FP8, PROMOTE>(p, smem, total, sink);
    } else {
      weave_slot_sink<S> sink;
      sink.init(&p);
      weave_fused_gemm<T, HOPPER, FP8, PROMOTE>(p, smem, total, sink);
    }
  } else {
    if constexpr (HOPPER) {
      /* the GEMM blocks' register split here too (see weave_hgemm_regs_restore): warpgroup 0
       * idles, warpgroups 1-2 reduce */
      if (weave_hgemm_regs_split())
        weave_fused_comm<T, S, ATOMIC>(p, weave_threads{(int)threadIdx.x - (WEAVE_HGEMM_THREADS - WEAVE_HGEMM_CONSUMER_THREADS),
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
__global__ void __launch_bounds__(WEAVE_MMA_THREADS, 1) weave_gemm_kernel(weave_mma_args_t a, weave_store_sink<O> sink) {
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
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  if ((int)threadIdx.x < p.team.world)
    weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p.team, &p.ctl->ready[p.team.rank], (int)threadIdx.x),
                                                 epoch);
  weave_block_wait_sources(weave_whole_block(), p.team, p.ctl->ready, 1, p.team.world, epoch, -1);
}

template <typename S, typename T>
__global__ void __launch_bounds__(WEAVE_MMA_THREADS) weave_reduce_scatter_kernel(const __grid_constant__ weave_fused_params_t p) {
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

/* ------------------------------------------------------------------------------------------------
 * launchers
 * ---------------------------------------------------------------------------------------------- */
static size_t weave_gemm_smem(int dtype, bool hopper) {
  /* the fused Hopper kernel always has room for the TMA-store staging (one block per SM either way) */
  if (hopper) return (size_t)WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES;
  return dtype == WEAVE_FP32 ? (size_t)2 * WEAVE_SIMT_BK * WEAVE_MMA_BM * sizeof(float) : (size_t)WEAVE_MMA_SMEM;
}

template <typename K> static int weave_prepare(K kernel, size_t smem) {
  return (int)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

template <typename K> static int weave_occupancy(K kernel, int threads, size_t smem) {
  int n = 0;
  if (weave_prepare(kernel, smem)) return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem)) return 0;
  return n;
}

extern "C" int weave_kernel_hopper_ok(weave_dtype_t dtype, weave_layout_t b_layout, int N, int K) {
  if (dtype == WEAVE_FP32) return 0;
  if (dtype == WEAVE_FP8_E4M3) return b_layout == WEAVE_LAYOUT_COL && K % 16 == 0;
  size_t b_row = (b_layout == WEAVE_LAYOUT_ROW ? (size_t)N : (size_t)K) * 2;
  return ((size_t)K * 2) % 16 == 0 && b_row % 16 == 0;
}

extern "C" void weave_kernel_tile_shape(int hopper, int *tile_m, int *tile_n) {
  *tile_m = hopper ? WEAVE_HGEMM_BM : WEAVE_MMA_BM;
  *tile_n = hopper ? WEAVE_HGEMM_BN : WEAVE_MMA_BN;
}

extern "C" int weave_kernel_blocks_per_sm(weave_dtype_t dtype, int hopper, int fused, size_t *smem_bytes) {
  size_t smem = weave_gemm_smem(dtype, hopper && fused);
  if (smem_bytes) *smem_bytes = smem;
  /* Every instantiation of a kernel shares the role and its resources: ask one of them. */
  if (fused) {
    if (dtype == WEAVE_FP32)
      return weave_occupancy(weave_fused_kernel<float, float, false, false>, WEAVE_MMA_THREADS, smem);
    if (hopper)
      return weave_occupancy(weave_fused_kernel<__nv_bfloat16, __nv_bfloat16, false, true>, WEAVE_HGEMM_THREADS, smem);
    return weave_occupancy(weave_fused_kernel<__nv_bfloat16, __nv_bfloat16, false, false>, WEAVE_MMA_THREADS, smem);
  }
  if (dtype == WEAVE_FP32) return weave_occupancy(weave_gemm_kernel<float, float>, WEAVE_MMA_THREADS, smem);
  return weave_occupancy(weave_gemm_kernel<__nv_bfloat16, __nv_bfloat16>, WEAVE_MMA_THREADS, smem);
}

template <typename T, typename S, bool ATOMIC, bool FP8 = false, bool PROMOTE = false>
static int weave_launch_fused_t(const weave_fused_params_t *p, cudaStream_t s) {
  size_t smem = weave_gemm_smem(p->dtype, p->hopper);
  if (p->hopper) {
    if constexpr (sizeof(T) == 2) {
      int e = weave_prepare(weave_fused_kernel<T, S, ATOMIC, true, FP8, PROMOTE>, smem);
      if (e) return e;
      weave_fused_kernel<T, S, ATOMIC, true, FP8, PROMOTE><<<p->gemm_blocks + p->comm_blocks, WEAVE_HGEMM_THREADS, smem, s>>>(*p);
      return (int)cudaGetLastError();
    }
    return (int)cudaErrorInvalidValue;
  }
  if constexpr (FP8) {
    return (int)cudaErrorInvalidValue; /* fp8 runs on the Hopper role only (the plan makes sure) */
  } else {
    int e = weave_prepare(weave_fused_kernel<T, S, ATOMIC, false>, smem);
    if (e) return e;
    weave_fused_kernel<T, S, ATOMIC, false><<<p->gemm_blocks + p->comm_blocks, WEAVE_MMA_THREADS, smem, s>>>(*p);
    return (int)cudaGetLastError();
  }
}

template <bool PROMOTE> static int weave_launch_fused_fp8(const weave_fused_params_t *p, cudaStream_t s) {
  const bool atomic = p->reduce == WEAVE_REDUCE_ATOMIC, f32slot = p->slot_dtype == WEAVE_FP32;
  if (p->dtype == WEAVE_FP16) {
    if (atomic) return weave_launch_fused_t<__half, float, true, true, PROMOTE>(p, s);
    return f32slot ? weave_launch_fused_t<__half, float, false, true, PROMOTE>(p, s)
                   : weave_launch_fused_t<__half, __half, false, true, PROMOTE>(p, s);
  }
  if (atomic) return weave_launch_fused_t<__nv_bfloat16, float, true, true, PROMOTE>(p, s);
  return f32slot ? weave_launch_fused_t<__nv_bfloat16, float, false, true, PROMOTE>(p, s)
                 : weave_launch_fused_t<__nv_bfloat16, __nv_bfloat16, false, true, PROMOTE>(p, s);
}

extern "C" int weave_launch_fused(const weave_fused_params_t *p, struct CUstream_st *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bool atomic = p->reduce == WEAVE_REDUCE_ATOMIC, f32slot = p->slot_dtype == WEAVE_FP32;
  if (p->in_dtype == WEAVE_FP8_E4M3) /* p->dtype: the output, bf16 or fp16 */
    return p->fp8_fast_accum ? weave_launch_fused_fp8<false>(p, s) : weave_launch_fused_fp8<true>(p, s);
  switch (p->dtype) {
    case WEAVE_BF16:
      if (atomic) return weave_launch_fused_t<__nv_bfloat16, float, true>(p, s);
      return f32slot ? weave_launch_fused_t<__nv_bfloat16, float, false>(p, s)
                     : weave_launch_fused_t<__nv_bfloat16, __nv_bfloat16, false>(p, s);
    case WEAVE_FP16:
      if (atomic) return weave_launch_fused_t<__half, float, true>(p, s);
      return f32slot ? weave_launch_fused_t<__half, float, false>(p, s) : weave_launch_fused_t<__half, __half, false>(p, s);
    default:
      if (atomic) return weave_launch_fused_t<float, float, true>(p, s);
      return weave_launch_fused_t<float, float, false>(p, s);
  }
}

template <typename T, typename O>
static int weave_launch_gemm_t(const weave_mma_args_t &a, float alpha, const void *bias, int bias_dtype, void *out,
                               int blocks, cudaStream_t s) {
  size_t smem = weave_gemm_smem(sizeof(T) == 4 ? WEAVE_FP32 : WEAVE_BF16, false);
  int e = weave_prepare(weave_gemm_kernel<T, O>, smem);
  if (e) return e;
  weave_store_sink<O> sink;
  sink.tiling = weave_tiling_t{a.M, a.N, 1, WEAVE_MMA_BM, WEAVE_MMA_BN, 0};
  sink.out = (O *)out;
  sink.bias = bias;
  sink.bias_dtype = bias_dtype;
  sink.alpha = alpha;
  sink.N = a.N;
  int tiles = weave_cdiv(a.M, WEAVE_MMA_BM) * weave_cdiv(a.N, WEAVE_MMA_BN);
  if (blocks > tiles) blocks = tiles;
  weave_gemm_kernel<T, O><<<blocks, WEAVE_MMA_THREADS, smem, s>>>(a, sink);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_gemm(int M, int N, int K, weave_dtype_t dtype, weave_layout_t b_layout, float alpha,
                                 const void *A, const void *B, const void *bias, void *out, weave_dtype_t out_dtype,
                                 int blocks, int vec_ok, struct CUstream_st *stream) {
  weave_mma_args_t a = {M, N, K, A, B, b_layout == WEAVE_LAYOUT_COL, vec_ok};
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
    case WEAVE_BF16:
      return out_dtype == WEAVE_FP32 ? weave_launch_gemm_t<__nv_bfloat16, float>(a, alpha, bias, dtype, out, blocks, s)
                                     : weave_launch_gemm_t<__nv_bfloat16, __nv_bfloat16>(a, alpha, bias, dtype, out, blocks, s);
    case WEAVE_FP16:
      return out_dtype == WEAVE_FP32 ? weave_launch_gemm_t<__half, float>(a, alpha, bias, dtype, out, blocks, s)
                                     : weave_launch_gemm_t<__half, __half>(a, alpha, bias, dtype, out, blocks, s);
    default:
      return weave_launch_gemm_t<float, float>(a, alpha, bias, dtype, out, blocks, s);
  }
}

extern "C" int weave_launch_wait_done(const weave_fused_params_t *p, struct CUstream_st *stream) {
  weave_wait_done_kernel<<<1, 32 * ((p->team.world + 31) / 32), 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_ready_barrier(const weave_fused_params_t *p, struct CUstream_st *stream) {
  weave_ready_barrier_kernel<<<1, 32 * ((p->team.world + 31) / 32), 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_reduce_scatter(const weave_fused_params_t *p, int blocks, struct CUstream_st *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  bool f32 = p->slot_dtype == WEAVE_FP32;
  switch (p->dtype) {
    case WEAVE_BF16:
      if (f32) weave_reduce_scatter_kernel<float, __nv_bfloat16><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      else weave_reduce_scatter_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      break;
    case WEAVE_FP16:
      if (f32) weave_reduce_scatter_kernel<float, __half><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      else weave_reduce_scatter_kernel<__half, __half><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
      break;
    default:
      weave_reduce_scatter_kernel<float, float><<<blocks, WEAVE_MMA_THREADS, 0, s>>>(*p);
  }
  return (int)cudaGetLastError();
}

template <typename T> __global__ void weave_add_bias_kernel(T *C, size_t n, int N, const T *bias) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    C[i] = weave_from_f<T>(weave_to_f(C[i]) + weave_to_f(bias[i % N]));
}

extern "C" int weave_launch_add_bias(void *C, int rows, int N, weave_dtype_t dtype, const void *bias,
                                     struct CUstream_st *stream) {
  size_t n = (size_t)rows * N;
  int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  if (blocks < 1) return 0;
  cudaStream_t s = (cudaStream_t)stream;
  if (dtype == WEAVE_BF16) weave_add_bias_kernel<<<blocks, 256, 0, s>>>((__nv_bfloat16 *)C, n, N, (const __nv_bfloat16 *)bias);
  else if (dtype == WEAVE_FP16) weave_add_bias_kernel<<<blocks, 256, 0, s>>>((__half *)C, n, N, (const __half *)bias);
  else weave_add_bias_kernel<<<blocks, 256, 0, s>>>((float *)C, n, N, (const float *)bias);
  return (int)cudaGetLastError();
}

extern "C" const char *weave_cuda_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
