/*
 * AllGather + GEMM: kernels and their launchers.
 *
 * Protocol (per call; e = the plan's epoch + 1, read by every kernel of the call at its start):
 *   push    rank r copies its rows of A (fp8 with scales: and their scales), block by block of
 *           WEAVE_AG_BLOCK_ROWS gathered rows, into the gathered A of ranks r, r+1, ..., r-1 in that
 *           order (so at any moment the ranks write to different peers), each destination only once it
 *           has finished reading the previous call's rows (done[dst] >= e - 1 in r's heap), and after
 *           each block adds 1 to the destination's row_flags[b] with a release at system scope (after
 *           a barrier of the copying threads).
 *           The fused kernel pushes from its communication blocks, or, with none, from every GEMM
 *           block before its first tile.
 *   GEMM    a tile whose rows start at row0 waits (acquire, system scope; bounded) until
 *           row_flags[row0 / 128] = e x (ranks whose rows meet that block: row_info), then fences the async
 *           proxy and loads the tile with TMA from the local gathered A. Without communication blocks
 *           (the pushes stay in one GPU's memory) a block's first tile waits for every row block
 *           instead and the later tiles wait for none: tiles computed while the other blocks still
 *           push evicted B from L2 (8 ranks on one H100: 1.35x slower). Tile rows run in the order
 *           the rows arrive: this rank's own blocks, then r-1's (who pushes to r first), r-2's, ...,
 *           grouped (WEAVE_HGEMM_GROUP_M tile rows at a time, as the standalone GEMM, so that B is
 *           read from L2 rather than HBM for most tiles). Where the standalone GEMM runs 2-CTA
 *           clusters sharing A (weave_hgemm_shares_a) and the plan's block counts are even, so does
 *           this kernel (pair_cols): each CTA of a pair gates its own loads, half of A each.
 *   finish  the last block (of the fused kernel, or weave_launch_ag_finish after what the call still
 *           reads of the gathered A) stores done[r] = e into every rank's heap and the epoch.
 * Nothing is reset between calls; a call captured into a CUDA graph replays with a fresh epoch.
 * Deterministic by construction: each element of C is one GEMM's sum, whatever the arrival order.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "gemm/hopper/cluster_launch.cuh"
#include "gemm/hopper/gemm_hopper.cuh"
#include "gemm/hopper/standalone_sink.cuh"
#include "kernels/gemm_rs_sinks.cuh" /* weave_threads, weave_whole_block */
#include "kernels/kernels.h"
#include "kernels/sync.cuh"

static_assert(WEAVE_AG_BLOCK_ROWS == WEAVE_HGEMM_BM, "a flag per tile row of the Hopper GEMM");

/* Pushes block b receives per call, and the first rank whose rows meet it (for the error record). */
__device__ __forceinline__ uint32_t weave_ag_want(const weave_ag_params_t &p, int b) { return p.row_info[b] & 0xffffu; }
__device__ __forceinline__ int weave_ag_first_owner(const weave_ag_params_t &p, int b) {
  return (int)(p.row_info[b] >> 16);
}

__device__ __forceinline__ size_t weave_ag_elem_bytes(weave_dtype_t d) {
  return d == WEAVE_FP32 ? 4 : d == WEAVE_FP8_E4M3 ? 1 : 2;
}

/* bytes from `from` to `to` by the threads g: with both 16-byte aligned, eight 16-byte loads in
 * flight per thread before their stores (a load-store loop keeps only one in flight per thread, too
 * few to cover the memory latency: docs/design.md); else weave_copy_bytes. */
__device__ __forceinline__ void weave_ag_copy(char *to, const char *from, size_t bytes, const weave_threads &g) {
  if ((((uintptr_t)to | (uintptr_t)from) & 15) != 0) {
    weave_copy_bytes(to, from, bytes, (unsigned)g.tid, (unsigned)g.n);
    return;
  }
  constexpr int U = 8;
  const size_t units = bytes / 16, step = (size_t)g.n * U;
  const uint4 *s = (const uint4 *)from;
  uint4 *d = (uint4 *)to;
  size_t i = (size_t)g.tid;
  for (; i + (size_t)(U - 1) * g.n < units; i += step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = __ldcs(s + i + (size_t)u * g.n); /* read once: streaming */
#pragma unroll
    for (int u = 0; u < U; ++u) d[i + (size_t)u * g.n] = v[u];
  }
  for (; i < units; i += g.n) d[i] = s[i];
  for (size_t b = units * 16 + (size_t)g.tid; b < bytes; b += (size_t)g.n) to[b] = from[b];
}

/* The push of this rank's rows by the threads g of block `block` of `nblocks`. Returns early (the
 * error record names the wait) when a destination's previous call did not finish in time. */
__device__ void weave_ag_push(const weave_ag_params_t &p, const weave_threads &g, int block, int nblocks,
                              uint32_t epoch) {
  if (p.rows == 0) return;
  /* the rail gather before this step failed (its error is this rank's to report): send nothing (one
   * read, the group's answer) */
  if (p.upstream_error &&
      g.sync_or(g.tid == 0 && weave_ld<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>(p.upstream_error) != WEAVE_DEVICE_OK))
    return;
  const int first = p.row_begin / WEAVE_AG_BLOCK_ROWS;
  const int n_own = (p.row_begin + p.rows - 1) / WEAVE_AG_BLOCK_ROWS - first + 1;
  const size_t row_bytes = (size_t)p.K * weave_ag_elem_bytes(p.dtype);
  const int world = p.team.world;
  for (int i = block; i < world * n_own; i += nblocks) {
    const int dst = (p.team.rank + i / n_own) % world, b = first + i % n_own;
    bool bad = false;
    if (g.tid == 0)
      bad = weave_wait_until(&p.team, &p.ctl->done[dst], WEAVE_CMP_GE, weave_credit_epoch(epoch), dst, b) != 0;
    if (g.sync_or(bad)) return;
    const int r0 = max(p.row_begin, b * WEAVE_AG_BLOCK_ROWS);
    const int r1 = min(p.row_begin + p.rows, (b + 1) * WEAVE_AG_BLOCK_ROWS);
    char *to = weave_peer_ptr(&p.team, (char *)p.gathered + (size_t)r0 * row_bytes, dst);
    const char *from = (const char *)p.A + (size_t)(r0 - p.row_begin) * row_bytes;
    weave_ag_copy(to, from, (size_t)(r1 - r0) * row_bytes, g);
    if (p.gathered_scales) { /* fp8: the rows' scales go with them (TENSOR: this rank's one for each) */
      float *sto = weave_peer_ptr(&p.team, p.gathered_scales + r0, dst);
      for (int i = g.tid; i < r1 - r0; i += g.n)
        sto[i] = p.scale_mode == WEAVE_SCALE_ROW ? p.scale_a[r0 - p.row_begin + i] : p.scale_a[0];
    }
    g.sync();
    if (g.tid == 0)
      weave_atomic_add<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p.team, p.row_flags + b, dst), 1u);
  }
}

/* done[rank] = epoch in every rank's heap, then this rank's epoch: one thread. */
__device__ __forceinline__ void weave_ag_publish_done(const weave_ag_params_t &p, uint32_t epoch) {
  for (int q = 0; q < p.team.world; ++q)
    weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(weave_peer_ptr(&p.team, &p.ctl->done[p.team.rank], q), epoch);
  weave_st<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>(&p.ctl->epoch, epoch);
}

/* The producer thread's wait for row block b (its 40 registers leave no room for a call): polls
 * with acquire loads at system scope, backing off, bounded by the team's timeout; on expiry, or once
 * another wait of this rank has failed, it returns false (the first failure writes the record:
 * item = the row block, peer = its first owner). */
__device__ __forceinline__ bool weave_ag_gate(const weave_ag_params_t *ap, int b, uint32_t epoch) {
  const uint32_t *flag = ap->row_flags + b;
  const uint32_t info = ap->row_info[b], want = (info & 0xffffu) * epoch;
  if ((int32_t)(weave_detail::ld_acquire_sys(flag) - want) >= 0) return true;
  const uint64_t start = weave_globaltimer();
  for (;;) {
    __nanosleep(256);
    if ((int32_t)(weave_detail::ld_acquire_sys(flag) - want) >= 0) return true;
    if (weave_device_failed(&ap->team)) return false;
    if (weave_globaltimer() - start >= (ap->team.timeout_ns ? ap->team.timeout_ns : WEAVE_DEVICE_DEFAULT_TIMEOUT_NS))
      break;
  }
  /* the record, as weave_wait_until writes it (inline: a call would spill the producer's registers) */
  const uint32_t seen = weave_detail::ld_acquire_sys(flag);
  if ((int32_t)(seen - want) >= 0) return true;
  weave_device_error_t *e = &weave_heap_header(&ap->team)->error;
  if (weave_detail::atom<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>::cas_b32(&e->code, WEAVE_DEVICE_OK,
                                                                      WEAVE_DEVICE_TIMEOUT) == WEAVE_DEVICE_OK) {
    e->rank = ap->team.rank;
    e->peer = (int)(info >> 16);
    e->item = b;
    e->flag_addr = (uint64_t)(uintptr_t)flag;
    e->expected = want;
    e->observed = seen;
    e->cmp = WEAVE_CMP_GE;
    __threadfence_system();
  }
  return false;
}

/* The GEMM blocks' sink: the standalone GEMM's stores (alpha, bias, TMA-store epilogue) of C in OUT
 * over the tiles in arrival order, each tile's loads gated on its rows. PAIR: the kernel runs in
 * 2-CTA clusters whose CTAs take tiles seq and seq ^ 1, two tile columns of one tile row, sharing A
 * (weave_hgemm_shares_a); the pairs of columns follow the arrival order as single columns do. */
template <int OUT, bool PAIR>
struct weave_ag_sink : weave_hgemm_standalone_sink_t<OUT, PAIR ? 2 : 1, WEAVE_HGEMM_BM, WEAVE_HGEMM_BN, PAIR> {
  static constexpr bool kWeaveWaitInputs = true;
  const weave_ag_params_t *ap;
  uint32_t epoch;
  int first, n_own; /* this rank's first block of rows and how many it has rows in */
  /* no tile waits any more: every row is in, or a wait failed (the call has failed; the remaining
   * tiles load whatever is there) */
  bool waits_done;
  bool wait_all; /* no communication blocks: the first tile waits for every row block, the rest for none */
  __device__ __forceinline__ void coords(int seq, int *row0, int *col0) {
    int tm, tn;
    if (PAIR) {
      weave_ag_tile_coords(seq >> 1, ap->blocks_m, this->a.tiles_n >> 1, this->a.group_m, first, n_own, &tm, &tn);
      tn = 2 * tn + (seq & 1);
    } else {
      weave_ag_tile_coords(seq, ap->blocks_m, this->a.tiles_n, this->a.group_m, first, n_own, &tm, &tn);
    }
    *row0 = tm * WEAVE_HGEMM_BM;
    *col0 = tn * WEAVE_HGEMM_BN;
  }
  __device__ __forceinline__ void wait_inputs(int row0) {
    if (wait_all) { /* the first tile: every row block (a failed wait ends the loop) */
      wait_all = false;
      int b = 0;
      while (b < ap->blocks_m && weave_ag_gate(ap, b, epoch)) ++b;
      waits_done = true;
    }
    if (!waits_done) waits_done = !weave_ag_gate(ap, row0 / WEAVE_AG_BLOCK_ROWS, epoch);
    /* the rows were written through the generic proxy (by peers' stores); the TMA loads that follow
     * read through the async proxy */
    weave_hgemm_fence_proxy_async_global();
  }
};

/* DT: A and B; OUT: C and bias (DT unless fp8); PROMOTE: fp8's promoted accumulation (fp8 reads its
 * scales, hg.scales, through the role's scale policy); PAIR: 2-CTA clusters sharing A (hg.tmap_a's
 * box is half a tile's rows; gemm_blocks and comm_blocks even, so that no cluster mixes the roles). */
template <int DT, int OUT, int BCOL, bool PROMOTE, bool PAIR>
__global__ void __launch_bounds__(WEAVE_HGEMM_THREADS, 1)
    weave_ag_fused_kernel(const __grid_constant__ weave_hgemm_params_t hg, const __grid_constant__ CUtensorMap c_map,
                          weave_hgemm_sink_args_t sa, const __grid_constant__ weave_ag_params_t p) {
  extern __shared__ unsigned char weave_ag_smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)weave_ag_smem_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  if ((int)blockIdx.x < p.gemm_blocks) {
    /* no communication blocks (desc.comm_blocks 0: a block kept for copies is an SM the GEMM lacks):
     * every GEMM block pushes its share of the rows first, with all its threads and registers, then
     * computes; its first tiles are this rank's own rows, which the first pushes deliver */
    if (p.comm_blocks == 0) weave_ag_push(p, weave_whole_block(), (int)blockIdx.x, p.gemm_blocks, epoch);
    typedef weave_ag_sink<OUT, PAIR> sink_t;
    constexpr int CL = PAIR ? 2 : 1;
    sink_t sink;
    sink.a = sa;
    sink.cmap = &c_map;
    sink.ap = &p;
    sink.epoch = epoch;
    sink.waits_done = false;
    sink.wait_all = p.comm_blocks == 0;
    weave_ag_own_blocks(p.row_begin, p.rows, p.blocks_m, WEAVE_AG_BLOCK_ROWS, &sink.first, &sink.n_own);
    if constexpr (DT == WEAVE_FP8_E4M3)
      weave_hgemm_role_coop<sink_t, DT, 1, CL, false, weave_hgemm_scale_fp8, PROMOTE, PAIR>(
          hg, smem, blockIdx.x, p.gemm_blocks, hg.tiles_m * hg.tiles_n, sink);
    else
      weave_hgemm_role_coop<sink_t, DT, BCOL, CL, false, weave_hgemm_scale_none, false, PAIR>(
          hg, smem, blockIdx.x, p.gemm_blocks, hg.tiles_m * hg.tiles_n, sink);
  } else if (weave_hgemm_regs_split()) {
    /* the GEMM blocks' register split here too: warpgroup 0 idles, warpgroups 1-2 push */
    weave_ag_push(p,
                  weave_threads{(int)threadIdx.x - (WEAVE_HGEMM_THREADS - WEAVE_HGEMM_CONSUMER_THREADS),
                                WEAVE_HGEMM_CONSUMER_THREADS, WEAVE_HGEMM_CONSUMER_BARRIER_ID},
                  (int)blockIdx.x - p.gemm_blocks, p.comm_blocks, epoch);
  }
  weave_hgemm_regs_restore(); /* both paths ran one split */
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t old = weave_atomic_add<WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_SYS>(&p.ctl->arrive[0], 1u);
    if (old + 1u == epoch * gridDim.x && p.signal_done) weave_ag_publish_done(p, epoch);
  }
}

__global__ void __launch_bounds__(512) weave_ag_push_kernel(const __grid_constant__ weave_ag_params_t p) {
  weave_ag_push(p, weave_whole_block(), (int)blockIdx.x, (int)gridDim.x, weave_call_epoch(&p.ctl->epoch));
}

/* One block: every block of the gathered A has all of this call's rows. */
__global__ void weave_ag_wait_kernel(const __grid_constant__ weave_ag_params_t p) {
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  const weave_threads g = weave_whole_block();
  bool bad = false;
  for (int b = threadIdx.x; b < p.blocks_m && !bad; b += blockDim.x)
    bad = weave_wait_until(&p.team, p.row_flags + b, WEAVE_CMP_GE, weave_ag_want(p, b) * epoch,
                           weave_ag_first_owner(p, b), b) != 0;
  g.sync_or(bad);
}

__global__ void weave_ag_finish_kernel(const __grid_constant__ weave_ag_params_t p) {
  const uint32_t epoch = weave_call_epoch(&p.ctl->epoch);
  if (threadIdx.x == 0) weave_ag_publish_done(p, epoch);
}

/* ---- launchers ----------------------------------------------------------------------------------- */
typedef void (*weave_ag_fused_fn_t)(const weave_hgemm_params_t, const CUtensorMap, weave_hgemm_sink_args_t,
                                    const weave_ag_params_t);

/* kern's dynamic smem limit (the attribute is per function) and its launch config of `grid` blocks,
 * in 2-CTA clusters when `pair` (attr: the cluster attribute's room) */
static cudaError_t weave_ag_config(weave_ag_fused_fn_t kern, int grid, bool pair, cudaStream_t s,
                                   cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr) {
  const size_t smem = WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e == cudaSuccess) weave_hgemm_launch_config(cfg, attr, grid, WEAVE_HGEMM_THREADS, smem, s, pair);
  return e;
}

template <int DT, int OUT, int BCOL, bool PROMOTE = false>
static int weave_ag_launch_t(const weave_ag_params_t *p, const weave_hgemm_params_t *hg, const CUtensorMap &c_map,
                             const weave_hgemm_sink_args_t &sa, cudaStream_t s) {
  const weave_ag_fused_fn_t kern = p->pair_cols ? weave_ag_fused_kernel<DT, OUT, BCOL, PROMOTE, true>
                                                : weave_ag_fused_kernel<DT, OUT, BCOL, PROMOTE, false>;
  cudaLaunchConfig_t cfg;
  cudaLaunchAttribute attr[1];
  cudaError_t e = weave_ag_config(kern, p->gemm_blocks + p->comm_blocks, p->pair_cols != 0, s, &cfg, attr);
  if (e == cudaSuccess) e = cudaLaunchKernelEx(&cfg, kern, *hg, c_map, sa, *p);
  return (int)e;
}

extern "C" int weave_ag_fused_blocks_per_sm(size_t *smem_bytes) {
  const size_t smem = WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES;
  if (smem_bytes) *smem_bytes = smem;
  int n = 0;
  const weave_ag_fused_fn_t kern = weave_ag_fused_kernel<WEAVE_BF16, WEAVE_BF16, 1, false, false>;
  if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, WEAVE_HGEMM_THREADS, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

extern "C" int weave_ag_fused_max_clusters(void) {
  return weave_hgemm_resident_pairs(weave_ag_fused_kernel<WEAVE_BF16, WEAVE_BF16, 1, false, true>, WEAVE_HGEMM_THREADS,
                                    WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES);
}

extern "C" int weave_launch_ag_fused(const weave_ag_params_t *p, const weave_hgemm_params_t *hg,
                                     weave_dtype_t out_dtype, int fast_accum, float alpha, const void *bias, void *C,
                                     struct CUstream_st *stream) {
  const int fp8 = p->dtype == WEAVE_FP8_E4M3;
  if (p->dtype != WEAVE_BF16 && p->dtype != WEAVE_FP16 && !fp8) return (int)cudaErrorInvalidValue;
  if (out_dtype != WEAVE_BF16 && out_dtype != WEAVE_FP16) return (int)cudaErrorInvalidValue;
  if (p->pair_cols && ((p->gemm_blocks | p->comm_blocks) & 1 || hg->tiles_n & 1)) return (int)cudaErrorInvalidValue;
  const size_t osz = 2;
  weave_hgemm_sink_args_t sa;
  memset(&sa, 0, sizeof sa);
  sa.C = C;
  sa.bias = bias;
  sa.alpha = alpha;
  sa.M = hg->M;
  sa.N = hg->N;
  sa.tiles_m = hg->tiles_m;
  sa.tiles_n = hg->tiles_n;
  sa.group_m =
      weave_hgemm_group_for(p->gemm_blocks, p->blocks_m, WEAVE_HGEMM_BM, WEAVE_HGEMM_BN); /* as the standalone GEMM's */
  sa.pair_ok = (hg->N % 2 == 0) && (((uintptr_t)C % (2 * osz)) == 0);
  CUtensorMap c_map;
  memset(&c_map, 0, sizeof c_map);
  if (((uintptr_t)C & 15) == 0 && ((size_t)hg->N * osz) % 16 == 0 &&
      weave_hgemm_encode_store_map(&c_map, out_dtype, C, (uint64_t)hg->N, (uint64_t)hg->M, (uint64_t)hg->N * osz, NULL,
                                   0) == 0)
    sa.tma_store = 1;
  cudaStream_t s = (cudaStream_t)stream;
  if (fp8) { /* B [N, K] only (the plan checked) */
    if (out_dtype == WEAVE_BF16)
      return fast_accum ? weave_ag_launch_t<WEAVE_FP8_E4M3, WEAVE_BF16, 1, false>(p, hg, c_map, sa, s)
                        : weave_ag_launch_t<WEAVE_FP8_E4M3, WEAVE_BF16, 1, true>(p, hg, c_map, sa, s);
    return fast_accum ? weave_ag_launch_t<WEAVE_FP8_E4M3, WEAVE_FP16, 1, false>(p, hg, c_map, sa, s)
                      : weave_ag_launch_t<WEAVE_FP8_E4M3, WEAVE_FP16, 1, true>(p, hg, c_map, sa, s);
  }
  const int bcol = hg->b_layout == WEAVE_LAYOUT_COL;
  if (p->dtype == WEAVE_BF16)
    return bcol ? weave_ag_launch_t<WEAVE_BF16, WEAVE_BF16, 1>(p, hg, c_map, sa, s)
                : weave_ag_launch_t<WEAVE_BF16, WEAVE_BF16, 0>(p, hg, c_map, sa, s);
  return bcol ? weave_ag_launch_t<WEAVE_FP16, WEAVE_FP16, 1>(p, hg, c_map, sa, s)
              : weave_ag_launch_t<WEAVE_FP16, WEAVE_FP16, 0>(p, hg, c_map, sa, s);
}

extern "C" int weave_launch_ag_push(const weave_ag_params_t *p, int blocks, struct CUstream_st *stream) {
  const int grid = blocks < 1 ? 1 : blocks;
  weave_ag_push_kernel<<<grid, 512, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_ag_wait(const weave_ag_params_t *p, struct CUstream_st *stream) {
  weave_ag_wait_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}

extern "C" int weave_launch_ag_finish(const weave_ag_params_t *p, struct CUstream_st *stream) {
  weave_ag_finish_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(*p);
  return (int)cudaGetLastError();
}
