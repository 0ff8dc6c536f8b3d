/* The GEMM roles' sinks for GEMM + ReduceScatter: the plain store, the owner walk, slots and the
 * atomic accumulator (one translation unit includes it: kernels/gemm_rs.cu). */
#ifndef WEAVE_KERNELS_GEMM_RS_SINKS_CUH
#define WEAVE_KERNELS_GEMM_RS_SINKS_CUH

#include "common/schedule.h"
#include "kernels/gemm_rs_convert.cuh"
#include "kernels/kernels.h"
#include "kernels/sync.cuh"

/* ------------------------------------------------------------------------------------------------
 * sinks (see gemm_mma.cuh for the contract)
 * ---------------------------------------------------------------------------------------------- */

/* Plain GEMM: global tiles in grouped order, alpha + bias, cast to O. */
template <typename O>
struct weave_store_sink {
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

template <typename S>
struct weave_slot_sink : weave_owner_walk {
  /* TMA-store epilogue (epilogue.cuh): tile rows into this rank's slot in o's heap through
   * slot_map[o] (fixed per plan), clipped at o's last row by the map; raw partials (alpha and bias
   * are the owner's); a dead walk sends nothing; the role waits for the stores before end() */
  static constexpr bool kWeaveTmaStore = true;
  static constexpr bool kWeaveTmaPublish = true;
  typedef S TmaElem;
  __device__ bool tma_store() const { return p->tma_slots != 0; }
  __device__ bool tma_issue() const { return !dead; }
  __device__ const CUtensorMap *c_map() const { return &p->slot_map[owner]; }
  __device__ int tma_row(int row0) const { return row0 - row_begin; }
  __device__ bool epi_bias() const { return false; }
  template <bool>
  __device__ void epi(int, float &, float &) {}
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

#endif
