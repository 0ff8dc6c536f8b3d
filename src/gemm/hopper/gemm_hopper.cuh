/*
 * weave Hopper GEMM role: device side. Usable from any kernel of 384 threads (blockDim.x == 384).
 *
 * Design
 *   Persistent: the caller hands the role a sequence of tile numbers seq = seq_begin,
 *   seq_begin + seq_stride, ... (< seq_count); the Sink maps each to (tile_m, tile_n) and receives the
 *   results. Tile = 128 x 256 of C, K stepped by 64.
 *   Warpgroup 0 (threads 0..127) is the producer: one thread issues the TMA loads (128-byte swizzle)
 *   of A [128 x 64] and B [256 x 64 or 64 x 256] into a ring of 4 smem stages. Each stage has a
 *   `full` mbarrier (1 arrival + the TMA transaction bytes) and an `empty` mbarrier (2 arrivals, one
 *   per consumer warpgroup). Waits use the phase parity, which flips each time the ring wraps.
 *   Warpgroups 1 and 2 (threads 128..383) are consumers: each owns 64 rows of the tile and issues
 *   4 wgmma.m64n256k16 per stage (fp32 accumulators, 128 registers per thread); a stage is released
 *   once the wgmma group of the following stage has been issued and the previous one waited for
 *   (wgmma.wait_group 1), so the tensor core always has one stage queued.
 *   setmaxnreg moves registers from the producer (40) to the consumers (232).
 *   B layouts: COL ([N, K], K-major) is wgmma's native B; ROW ([K, N], N-major) is loaded as four
 *   64-column boxes per stage and read with the transpose bit (tnspB = 1) and an MN-major descriptor.
 *   Tails: the TMA unit zero-fills what lies outside [M, K] / [N, K], so partial tiles and K < 64 just
 *   work; stores are masked (row < M, col < N) by the role before it calls the sink.
 *
 * Sink contract (a struct the caller passes by reference):
 *   __device__ void coords(int seq, int* row0, int* col0);   // first row / column of C of tile `seq`
 *       // (element offsets: any row0, so a caller may tile row ranges that do not start at a
 *       //  multiple of BM, e.g. each owner's chunk of rows in the fused GEMM+RS kernel)
 *   __device__ void begin(int seq);   // every consumer thread, before its first store2 of the tile
 *   __device__ void store2(int row, int col, float v0, float v1);
 *       // raw fp32 accumulators of C[row][col], C[row][col+1]; col even; row < M, col < N;
 *       // v1 meaningful only if col + 1 < N (the sink checks). Alpha/bias/cast: the sink's job.
 *   __device__ void end(int seq);     // ONE consumer thread, after all 256 consumer threads are done
 *                                     // with store2 for that tile (named barrier 1, 256 threads).
 *   coords() is called by the producer thread and by every consumer thread: it must be a pure
 *   function of seq.
 *
 * Synchronization used: one __syncthreads() at entry (after the mbarrier init; all 384 threads must
 * call the role), then only mbarriers and named barriers among the consumers:
 * WEAVE_HGEMM_CONSUMER_BARRIER_ID (256; end of a tile unless the sink declares kWeaveNoEnd, stream-K
 * fixup) and 2 + warpgroup (128 each; TMA-store epilogue).
 * Producer threads other than thread 0 return at once (after setmaxnreg).
 * After the role returns, the producer warpgroup runs with 40 registers and the consumers with 232.
 */
#ifndef WEAVE_GEMM_HOPPER_CUH
#define WEAVE_GEMM_HOPPER_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>

#include "gemm/hopper/gemm_hopper.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_hopper.cuh needs -gencode arch=compute_90a,code=sm_90a (wgmma, setmaxnreg)"
#endif

static_assert(WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES <= 227 * 1024, "stages + epilogue staging exceed Hopper's 227 KiB of smem per block");

/* DIAGNOSTIC, off (-DWEAVE_HGEMM_PROFILE=1 in CMAKE_CUDA_FLAGS): the cooperative role writes clock64()
 * stamps of each tile's phases (per block, warpgroup, tile; see WEAVE_HG_PROF_* below) to a device
 * array that weave_hopper_gemm_profile_save() (gemm_hopper.cu) writes to a file; the last launch wins.
 * scripts/hgemm_profile.py reads it. Adds global stores to the kernel: for breakdowns, not speed. */
#ifndef WEAVE_HGEMM_PROFILE
#define WEAVE_HGEMM_PROFILE 0
#endif
#define WEAVE_HG_PROF_BLOCKS 132
#define WEAVE_HG_PROF_TILES 16 /* the producer's last tile slot holds the block's entry / exit */
#define WEAVE_HG_PROF_EVENTS 16
/* events per tile (consumer slots): 0 loop top, 1 first stage full, 2 main loop done, 3 epilogue
 * start, 4 epilogue done, 5 + 2c / 6 + 2c chunk c (c < 4) written / released, 13 tile done (past
 * the tile-end barrier and end() where the sink has them), 14 globaltimer at the loop top; producer slots: 0 / 1 before / after the first empty wait */
#if WEAVE_HGEMM_PROFILE
#include "weave_trace.h" /* weave_trace_now: %globaltimer */
/* [block][0, 1: consumer warpgroup, 2: producer][tile][event] */
static __device__ long long weave_hg_prof[WEAVE_HG_PROF_BLOCKS][3][WEAVE_HG_PROF_TILES][WEAVE_HG_PROF_EVENTS];
static __device__ __forceinline__ long long *weave_hg_prof_slot(int who, int tile) {
  if (blockIdx.x >= WEAVE_HG_PROF_BLOCKS || tile >= WEAVE_HG_PROF_TILES - (who == 2)) return nullptr;
  return weave_hg_prof[blockIdx.x][who][tile];
}
/* the block's entry (i = 0, thread 0) and exit (i = 1, consumer warpgroup 0 after its last stores):
 * globaltimer (ns) and clock64 at [block][2][TILES - 1][2i, 2i + 1] */
static __device__ __forceinline__ void weave_hg_prof_edge(int i) {
  if (blockIdx.x >= WEAVE_HG_PROF_BLOCKS) return;
  long long *e = weave_hg_prof[blockIdx.x][2][WEAVE_HG_PROF_TILES - 1];
  e[2 * i] = (long long)weave_trace_now();
  e[2 * i + 1] = clock64();
}
#define WEAVE_HG_PROF_STAMP(slot, e)                                                              \
  do {                                                                                            \
    if (slot) (slot)[e] = clock64();                                                              \
  } while (0)
#define WEAVE_HG_PROF_STAMP_NS(slot, e)                                                           \
  do {                                                                                            \
    if (slot) (slot)[e] = (long long)weave_trace_now();                                           \
  } while (0)
#else /* everything below compiles to nothing: the slot is a constant null pointer */
static __device__ __forceinline__ long long *weave_hg_prof_slot(int, int) { return nullptr; }
static __device__ __forceinline__ void weave_hg_prof_edge(int) {}
#define WEAVE_HG_PROF_STAMP(slot, e) \
  do {                               \
  } while (0)
#define WEAVE_HG_PROF_STAMP_NS(slot, e) \
  do {                                  \
  } while (0)
#endif

#define WEAVE_HGEMM_PRODUCER_REGS 40
#define WEAVE_HGEMM_CONSUMER_REGS 232
/* what every thread of a 384-thread block gets at launch (65536 / 384, rounded down to 8); the
 * split above keeps the block's total: 40 + 2 * 232 = 3 * 168 */
#define WEAVE_HGEMM_LAUNCH_REGS 168

/* ---------------------------------------------------------------------------------------------
 * PTX helpers
 * ------------------------------------------------------------------------------------------- */
static __device__ __forceinline__ uint32_t weave_hg_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void weave_hg_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void weave_hg_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

static __device__ __forceinline__ void weave_hg_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

static __device__ __forceinline__ void weave_hg_mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

static __device__ __forceinline__ void weave_hg_tma_load_2d(uint32_t dst, const CUtensorMap *map,
                                                         uint32_t bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

static __device__ __forceinline__ void weave_hg_tma_prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)map) : "memory");
}

static __device__ __forceinline__ void weave_hg_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void weave_hg_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void weave_hg_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

template <int REGS>
static __device__ __forceinline__ void weave_hg_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
static __device__ __forceinline__ void weave_hg_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

static __device__ __forceinline__ void weave_hg_named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* ---- clusters (2-CTA TMA multicast) ---- */
static __device__ __forceinline__ uint32_t weave_hg_cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
static __device__ __forceinline__ void weave_hg_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
/* arrive on the mbarrier at the same smem offset in CTA `rank` of the cluster */
static __device__ __forceinline__ void weave_hg_mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
/* TMA load written to the same smem offset (and signalling the same mbarrier offset) in every CTA
 * of `mask` */
static __device__ __forceinline__ void weave_hg_tma_load_2d_mc(uint32_t dst, const CUtensorMap *map,
                                                            uint32_t bar, int c0, int c1,
                                                            uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

/* ---- TMA store (standalone epilogue) ---- */
static __device__ __forceinline__ void weave_hg_tma_store_2d(const CUtensorMap *map, uint32_t src, int c0,
                                                          int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   (uint64_t)map),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
static __device__ __forceinline__ void weave_hg_bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void weave_hg_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void weave_hg_bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
static __device__ __forceinline__ void weave_hg_st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
/* Two adjacent elements cast to 16-bit E, packed (the low half is v0). */
template <typename E>
static __device__ __forceinline__ uint32_t weave_hg_pack2(float v0, float v1) {
  if constexpr (std::is_same<E, __half>::value) {
    __half2 h = __floats2half2_rn(v0, v1);
    return *(uint32_t *)&h;
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    return *(uint32_t *)&h;
  }
}
/* Two adjacent fp32 elements of C at a shared address (8 bytes). */
static __device__ __forceinline__ void weave_hg_st_shared_f32x2(uint32_t addr, float v0, float v1) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
}

/* Four 8x8 16-bit matrices to shared memory; lane t addresses row t % 8 of matrix t / 8. */
static __device__ __forceinline__ void weave_hg_stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                         uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

/* Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits. */
template <int N = 128>
static __device__ __forceinline__ void weave_hg_fence_regs(float *d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

static __device__ __forceinline__ void weave_hg_named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* A consumer warpgroup is done with a ring stage: with clusters both CTAs' producers wrote into it,
 * so both CTAs' empty mbarriers hear of it. */
template <int CL>
static __device__ __forceinline__ void weave_hg_release_stage(uint32_t empty) {
  if (CL == 1) {
    weave_hg_mbar_arrive(empty);
  } else {
    weave_hg_mbar_arrive_cluster(empty, 0);
    weave_hg_mbar_arrive_cluster(empty, 1);
  }
}

/* The accumulators of 8-column group j of a m64nNk16 fragment (rows r and r + 8), through the sink's
 * alpha/bias; col = this thread's first column of the group. */
template <class Sink, bool BIAS>
static __device__ __forceinline__ void weave_hg_epi_group(Sink &sink, const float *a, int j, int col, float *v) {
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = a[4 * j + e];
  sink.template epi<BIAS>(col, v[0], v[1]);
  sink.template epi<BIAS>(col, v[2], v[3]);
}

/* TMA-store epilogue of 64 rows x NC columns of a consumer warpgroup (accumulators `a` in the
 * m64nNk16 fragment: a[4j + {0,1}] at (lrow, 8j + 2*(lane%4) + {0,1}), a[4j + {2,3}] at lrow + 8),
 * rows trow.. of the sink's map, columns c0..: 64-row x 128-byte chunks (64 columns of 2-byte or 32
 * of 4-byte elements) through the warpgroup's WEAVE_HGEMM_EPI_BUFS staging buffers at ebuf (chunk q
 * of the call uses buffer (q0 + q) % EPI_BUFS), 128B-swizzled rows (16-byte unit u of row r at
 * u ^ (r % 8): the warp's stores spread over all banks), one TMA store each. */
template <class Sink, int NC, bool BIAS>
static __device__ __forceinline__ void weave_hg_store_rows_t(Sink &sink, const float *a, uint32_t ebuf, int q0,
                                                            int c0, int trow, int cw, int lrow, int lane,
                                                            int ltid, long long *prof) {
  typedef typename Sink::TmaElem E;
  constexpr int EB = (int)sizeof(E), CC = 128 / EB, G = CC / 8;
#pragma unroll
  for (int c = 0; c < NC / CC; ++c) {
    const uint32_t b = ebuf + ((q0 + c) % WEAVE_HGEMM_EPI_BUFS) * WEAVE_HGEMM_EPI_BUF_BYTES;
    if (ltid == 0) /* the store that used this buffer has read it */
      weave_hg_bulk_wait_read<WEAVE_HGEMM_EPI_BUFS - 1>();
    weave_hg_named_barrier_sync(2 + cw, 128);
    if (c < 4) WEAVE_HG_PROF_STAMP(prof, 5 + 2 * c);
    if constexpr (EB == 2) {
      /* two 8-column groups a step, as four 8x8 matrices (rows 0-7 / 8-15 of the warp's 16, groups
       * jj / jj + 1): the packed pairs are stmatrix's fragments as they stand; lane t gives the
       * address of row t % 8 of matrix t / 8 (16 bytes: one swizzled unit) */
      const int q = lane >> 3;
      const int R = lrow - (lane >> 2) + (q & 1) * 8 + (lane & 7); /* row of the warpgroup's 64 */
#pragma unroll
      for (int jj = 0; jj < G; jj += 2) {
        const int j = G * c + jj;
        const int col = c0 + (lane & 3) * 2 + 8 * j;
        float v[8];
        weave_hg_epi_group<Sink, BIAS>(sink, a, j, col, v);
        weave_hg_epi_group<Sink, BIAS>(sink, a, j + 1, col + 8, v + 4);
        const int u = jj + (q >> 1);
        weave_hg_stmatrix_x4(b + R * 128 + (uint32_t)((u ^ (R & 7)) * 16), weave_hg_pack2<E>(v[0], v[1]),
                             weave_hg_pack2<E>(v[2], v[3]), weave_hg_pack2<E>(v[4], v[5]),
                             weave_hg_pack2<E>(v[6], v[7]));
      }
    } else { /* fp32: 8-byte pairs, rows lrow and lrow + 8 (same swizzle phase) */
#pragma unroll
      for (int jj = 0; jj < G; ++jj) {
        const int j = G * c + jj;
        float v[4];
        weave_hg_epi_group<Sink, BIAS>(sink, a, j, c0 + (lane & 3) * 2 + 8 * j, v);
        const int pos = (lane & 3) * 8; /* byte of this thread's pair in an 8-column group */
        const int unit = 2 * jj + pos / 16;
        const uint32_t at = b + lrow * 128 + (uint32_t)((unit ^ (lrow & 7)) * 16 + pos % 16);
        weave_hg_st_shared_f32x2(at, v[0], v[1]);
        weave_hg_st_shared_f32x2(at + 8 * 128, v[2], v[3]);
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    weave_hg_named_barrier_sync(2 + cw, 128);
    if (c < 4) WEAVE_HG_PROF_STAMP(prof, 6 + 2 * c);
    if (ltid == 0 && sink.tma_issue()) {
      weave_hg_tma_store_2d(sink.c_map(), b, c0 + CC * c, trow);
      weave_hg_bulk_commit();
    }
  }
}

/* weave_hg_store_rows_t with the sink's bias choice made once for the whole call, so that the code
 * the warps run per tile is only the conversions and stores. With the bias test inside epi() (two
 * never-taken branches per 8 columns) a 64-column chunk was 4.6 KB of SASS and took ~525 cycles
 * (clock64 breakdown, docs/hopper_gemm.md, session 7); without it (and with stmatrix) ~250. */
template <class Sink, int NC>
static __device__ __forceinline__ void weave_hg_store_rows(Sink &sink, const float *a, uint32_t ebuf, int q0,
                                                          int c0, int trow, int cw, int lrow, int lane,
                                                          int ltid, long long *prof = nullptr) {
  if (sink.epi_bias())
    weave_hg_store_rows_t<Sink, NC, true>(sink, a, ebuf, q0, c0, trow, cw, lrow, lane, ltid, prof);
  else
    weave_hg_store_rows_t<Sink, NC, false>(sink, a, ebuf, q0, c0, trow, cw, lrow, lane, ltid, prof);
}

/* After a warpgroup's last weave_hg_store_rows of a tile, for sinks whose end() publishes it: the
 * issuing thread waits for its bulk stores to complete and orders them before end()'s release. */
template <class Sink>
static __device__ __forceinline__ void weave_hg_store_rows_complete(int ltid) {
  if constexpr (Sink::kWeaveTmaPublish) {
    if (ltid == 0) {
      weave_hg_bulk_wait_all();
      asm volatile("fence.proxy.async.global;" ::: "memory");
    }
  }
}

/* wgmma shared-memory descriptor bits (besides the 14-bit start address >> 4):
 *   bits 16-29 LBO >> 4, bits 32-45 SBO >> 4, bits 62-63 layout (1 = 128-byte swizzle).
 * K-major 128B swizzle: rows of 128 bytes, 8-row core groups 1024 bytes apart (SBO), LBO unused. */
#define WEAVE_HGEMM_DESC_KMAJOR_SW128 ((1ull << 62) | (64ull << 32) | (1ull << 16))

static __device__ __forceinline__ uint64_t weave_hg_desc(uint32_t smem_addr, uint64_t base) {
  return base | (uint64_t)((smem_addr & 0x3FFFF) >> 4);
}

/* the 64 accumulator operands d[b] .. d[b + 63] of a wgmma (d: an array name, not an expression) */
#define WEAVE_HG_ACC64_OUT(d, b) \
  "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]), "+f"(d[(b) + 5]), "+f"(d[(b) + 6]), "+f"(d[(b) + 7]), \
  "+f"(d[(b) + 8]), "+f"(d[(b) + 9]), "+f"(d[(b) + 10]), "+f"(d[(b) + 11]), "+f"(d[(b) + 12]), "+f"(d[(b) + 13]), "+f"(d[(b) + 14]), "+f"(d[(b) + 15]), \
  "+f"(d[(b) + 16]), "+f"(d[(b) + 17]), "+f"(d[(b) + 18]), "+f"(d[(b) + 19]), "+f"(d[(b) + 20]), "+f"(d[(b) + 21]), "+f"(d[(b) + 22]), "+f"(d[(b) + 23]), \
  "+f"(d[(b) + 24]), "+f"(d[(b) + 25]), "+f"(d[(b) + 26]), "+f"(d[(b) + 27]), "+f"(d[(b) + 28]), "+f"(d[(b) + 29]), "+f"(d[(b) + 30]), "+f"(d[(b) + 31]), \
  "+f"(d[(b) + 32]), "+f"(d[(b) + 33]), "+f"(d[(b) + 34]), "+f"(d[(b) + 35]), "+f"(d[(b) + 36]), "+f"(d[(b) + 37]), "+f"(d[(b) + 38]), "+f"(d[(b) + 39]), \
  "+f"(d[(b) + 40]), "+f"(d[(b) + 41]), "+f"(d[(b) + 42]), "+f"(d[(b) + 43]), "+f"(d[(b) + 44]), "+f"(d[(b) + 45]), "+f"(d[(b) + 46]), "+f"(d[(b) + 47]), \
  "+f"(d[(b) + 48]), "+f"(d[(b) + 49]), "+f"(d[(b) + 50]), "+f"(d[(b) + 51]), "+f"(d[(b) + 52]), "+f"(d[(b) + 53]), "+f"(d[(b) + 54]), "+f"(d[(b) + 55]), \
  "+f"(d[(b) + 56]), "+f"(d[(b) + 57]), "+f"(d[(b) + 58]), "+f"(d[(b) + 59]), "+f"(d[(b) + 60]), "+f"(d[(b) + 61]), "+f"(d[(b) + 62]), "+f"(d[(b) + 63])

/* wgmma m64n256k16, fp32 accumulators d[0..127] (an array name), TY "bf16" or "f16"; scale_d 0 starts
 * the sum; TNSPB 1 reads B MN-major (ROW layout) */
#define WEAVE_HGEMM_WGMMA_M64N256K16(TY, d, desc_a, desc_b, scale_d, TNSPB) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
    "}, %128, %129, p, 1, 1, 0, %131;\n}\n" \
    : WEAVE_HG_ACC64_OUT(d, 0), WEAVE_HG_ACC64_OUT(d, 64) \
    : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TNSPB))

/* The smem ring's mbarriers: thread 0 initialises `stages` full barriers (1 arrival: the producer's
 * expect_tx) and empty barriers (`empty_arrivals`), and makes them visible to the async proxy (TMA
 * complete_tx) and to the cluster; then every thread of the block (CL == 2: of both CTAs) meets at a
 * barrier, which also publishes whatever else thread 0 wrote to smem before the call. */
template <int CL>
static __device__ __forceinline__ void weave_hg_ring_init(uint32_t full_bar, uint32_t empty_bar, int stages,
                                                          uint32_t empty_arrivals) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      weave_hg_mbar_init(full_bar + 8 * s, 1);
      weave_hg_mbar_init(empty_bar + 8 * s, empty_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  if (CL == 2)
    weave_hg_cluster_sync();
  else
    __syncthreads();
}

/* One stage's TMA loads, all signalling `bar`: A [128 x 64] of k-block k0 at sa, and B's columns
 * [n, n + W) right after it (COL: W rows of 128 bytes, K-major; ROW: W / 64 slabs of 64 columns,
 * 8 KiB apart). CL == 2: this CTA loads its half of the W columns (cta_rank's) and multicasts it to
 * both CTAs of the cluster, whose producers do the same with the other half. */
template <int BCOL, int W, int CL>
static __device__ __forceinline__ void weave_hg_load_stage(const WeaveHopperGemmParams &p, uint32_t sa,
                                                           uint32_t bar, int k0, int m0, int n,
                                                           uint32_t cta_rank) {
  constexpr int WL = W / CL; /* columns this CTA loads */
  static_assert(WL == 256 || WL == 128 || WL == 64, "B boxes of 256, 128 or 64 columns");
  constexpr uint32_t SLAB = 64 * WEAVE_HGEMM_BK * 2; /* 64 columns (ROW) or 64 rows (COL) of B */
  const uint32_t dst = sa + WEAVE_HGEMM_A_STAGE_BYTES + cta_rank * (WL / 64) * SLAB;
  const int nl = n + (int)cta_rank * WL;
  weave_hg_tma_load_2d(sa, &p.tmap_a, bar, k0, m0);
  if (BCOL) {
    const CUtensorMap *map = WL == 256 ? &p.tmap_b : WL == 128 ? &p.tmap_b_half : &p.tmap_b_quarter;
    if (CL == 1)
      weave_hg_tma_load_2d(dst, map, bar, k0, nl);
    else
      weave_hg_tma_load_2d_mc(dst, map, bar, k0, nl, 0x3);
  } else {
#pragma unroll
    for (int j = 0; j < WL / 64; ++j) {
      if (CL == 1)
        weave_hg_tma_load_2d(dst + j * SLAB, &p.tmap_b, bar, nl + 64 * j, k0);
      else
        weave_hg_tma_load_2d_mc(dst + j * SLAB, &p.tmap_b, bar, nl + 64 * j, k0, 0x3);
    }
  }
}

/* Grouped tile order: tiles walk down groups of `group_m` tile rows, column by column, so the CTAs
 * of one wave share A rows and B columns in L2. */
static __host__ __device__ __forceinline__ void weave_hgemm_grouped_coords(int seq, int tiles_m,
                                                                           int tiles_n, int group_m,
                                                                           int *tile_m, int *tile_n) {
  int per_group = group_m * tiles_n;
  int g = seq / per_group;
  int first_m = g * group_m;
  int gm = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  int r = seq - g * per_group;
  *tile_m = first_m + r % gm;
  *tile_n = r / gm;
}

/* Optional sink capability: a sink that declares
 *   static constexpr bool kWeaveTmaStore = true;
 *   static constexpr bool kWeaveTmaPublish;                  // end() publishes the tile to others
 *   typedef ... TmaElem;                                     // __nv_bfloat16, __half or float
 *   __device__ bool tma_store() const;                       // run time, uniform: use it for this call
 *   __device__ bool tma_issue() const;                       // issuing thread: send (false: drop)
 *   __device__ const CUtensorMap* c_map() const;             // target of the current tile: box
 *                                                            // {128 / sizeof(TmaElem), 64}, 128B swizzle
 *   __device__ int tma_row(int row0) const;                  // map row of C row row0 (current tile)
 *   __device__ bool epi_bias() const;                        // run time, uniform: epi<true> or epi<false>
 *   template <bool BIAS> __device__ void epi(int col, float& v0, float& v1); // alpha (and with BIAS the
 *                                                            // bias) in place, before the cast
 * gets its tiles written through WEAVE_HGEMM_EPI_BYTES of smem at smem + WEAVE_HGEMM_EPI_OFFSET
 * (the kernel asks for WEAVE_HGEMM_TMA_SMEM_ALLOC_BYTES) and TMA stores, instead of store2 calls.
 * begin/end are still called around each tile. With kWeaveTmaPublish the issuing threads wait for
 * their stores to complete (cp.async.bulk.wait_group 0, then a proxy fence) before the consumer
 * barrier that precedes end(), so a release in end() covers the tile's data. */
/* Optional: a sink that declares
 *   static constexpr bool kWeaveNoEnd = true;                // end() does nothing
 * lets the cooperative role's two consumer warpgroups go on to their next tile without meeting at
 * the tile's end (the barrier before end()): nothing else they share needs it (each has its own
 * staging buffers and arrives on the ring's empty barriers itself). */
template <class S, class = void>
struct weave_hgemm_sink_no_end : std::false_type {};
template <class S>
struct weave_hgemm_sink_no_end<S, std::void_t<decltype(S::kWeaveNoEnd)>>
    : std::integral_constant<bool, S::kWeaveNoEnd> {};

template <class S, class = void>
struct weave_hgemm_sink_tma : std::false_type {};
template <class S>
struct weave_hgemm_sink_tma<S, std::void_t<decltype(S::kWeaveTmaStore)>>
    : std::integral_constant<bool, S::kWeaveTmaStore> {};

/* ---- stream-K split tiles (gemm_streamk.h) ---- */
#ifndef WEAVE_HGEMM_SK_CHUNK
#define WEAVE_HGEMM_SK_CHUNK 32 /* float4 loads per thread in flight while adding a later segment */
#endif
static __device__ __forceinline__ unsigned weave_hg_ld_acquire_gpu(const unsigned *p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ unsigned weave_hg_atom_add_acq_rel_gpu(unsigned *p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
/* bar.sync of `threads` threads on barrier `id` that also ORs `pred` across them: a uniform answer
 * without shared memory */
static __device__ __forceinline__ bool weave_hg_named_barrier_or(int id, int threads, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred q, p;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, %3, q;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"((uint32_t)pred), "r"(id), "r"(threads)
      : "memory");
  return r != 0;
}
static __device__ __forceinline__ bool weave_hg_consumer_bar_or(bool pred) {
  return weave_hg_named_barrier_or(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS, pred);
}

/* Called by all 256 consumer threads after the main loop of a split item (SK tile t, block b,
 * k-blocks from kb0) with the item's accumulators. Returns false if another segment of the tile is
 * still to come (this one's accumulators are in its workspace slot); true for the last segment, with
 * acc = the sum of all segments in k order (bitwise the same whoever is last). Never waits. */
static __device__ __forceinline__ bool weave_hgemm_sk_reduce(const WeaveHopperGemmParams &p, float *acc, int t,
                                                          int b, int kb0, int cw, int ltid) {
  int first, segs;
  weave_hgemm_sk_segments(&p.sk, t, &first, &segs);
  const int s = b - first;
  unsigned *cnt = p.sk_counters + t;
  const bool leader = cw == 0 && ltid == 0;
  /* every other segment already arrived: last without writing the slot */
  bool last = weave_hg_consumer_bar_or(leader && weave_hg_ld_acquire_gpu(cnt) == (unsigned)(segs - 1));
  if (!last) {
    float4 *dst = (float4 *)(p.sk_partials + (size_t)weave_hgemm_sk_slot(b, kb0) * WEAVE_HGEMM_SK_SLOT_FLOATS) +
                  cw * 32 * 128 + ltid;
#pragma unroll
    for (int g = 0; g < 32; ++g)
      __stcg(dst + g * 128, make_float4(acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3]));
    weave_hg_named_barrier_sync(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS);
    /* release (cumulative over the barrier) of every thread's slot writes; acquire of the others' */
    last = weave_hg_consumer_bar_or(leader && weave_hg_atom_add_acq_rel_gpu(cnt, 1u) == (unsigned)(segs - 1));
    if (!last) return false;
  }
  /* acc = ((seg 0 + seg 1) + seg 2) + ... in this order, own segment s from the registers:
   * pre = seg 0 + ... + seg s-1 and acc = pre + acc (first pass, only when s > 0), then
   * acc += seg s+1, ... (second pass). Each pass goes in chunks of float4 per thread whose loads are
   * issued together: one L2 round trip per slot and chunk, not per element. The usual last arriver
   * is segment 0 (a block's head segment ends its range; the others start theirs), so the second
   * pass, with the larger chunk, is the one that counts. */
  const float4 *base = (const float4 *)p.sk_partials + cw * 32 * 128 + ltid;
  const size_t slot_f4 = WEAVE_HGEMM_SK_SLOT_FLOATS / 4;
  if (s > 0) {
#pragma unroll
    for (int c = 0; c < 32; c += 4) {
      float4 pre[4], v[4];
      const float4 *src = base + (size_t)weave_hgemm_sk_slot(first, 0) * slot_f4 + c * 128;
#pragma unroll
      for (int j = 0; j < 4; ++j) pre[j] = __ldcg(src + j * 128);
      for (int q = 1; q < s; ++q) {
        src = base + (size_t)weave_hgemm_sk_slot(first + q, 1) * slot_f4 + c * 128;
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = __ldcg(src + j * 128);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          pre[j].x += v[j].x; pre[j].y += v[j].y; pre[j].z += v[j].z; pre[j].w += v[j].w;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float *a = acc + 4 * (c + j);
        a[0] = pre[j].x + a[0]; a[1] = pre[j].y + a[1]; a[2] = pre[j].z + a[2]; a[3] = pre[j].w + a[3];
      }
    }
  }
  for (int q = s + 1; q < segs; ++q) {
    const float4 *src = base + (size_t)weave_hgemm_sk_slot(first + q, 1) * slot_f4;
#pragma unroll
    for (int c = 0; c < 32; c += WEAVE_HGEMM_SK_CHUNK) {
      float4 v[WEAVE_HGEMM_SK_CHUNK];
#pragma unroll
      for (int j = 0; j < WEAVE_HGEMM_SK_CHUNK; ++j) v[j] = __ldcg(src + (c + j) * 128);
#pragma unroll
      for (int j = 0; j < WEAVE_HGEMM_SK_CHUNK; ++j) {
        float *a = acc + 4 * (c + j);
        a[0] += v[j].x; a[1] += v[j].y; a[2] += v[j].z; a[3] += v[j].w;
      }
    }
  }
  if (leader) *(volatile unsigned *)cnt = 0u; /* all segs arrived: nobody else touches it this call */
  return true;
}

/* The role's register split: warpgroup 0 (producer) down to 40, warpgroups 1-2 (consumers) up to
 * 232; true on the latter. The role starts with it; so must the other blocks of a kernel that runs
 * the role in some blocks only (see the restore below). */
__device__ __forceinline__ bool weave_hopper_gemm_regs_split() {
  if ((threadIdx.x >> 7) == 0) {
    weave_hg_setmaxnreg_dec<WEAVE_HGEMM_PRODUCER_REGS>();
    return false;
  }
  weave_hg_setmaxnreg_inc<WEAVE_HGEMM_CONSUMER_REGS>();
  return true;
}

/* Give every warpgroup the launch register count back (after the role, before code that all 384
 * threads run). A kernel whose other blocks do something else should run that under
 * weave_hopper_gemm_regs_split() too and restore on every path: ptxas (CUDA 13.0) gives the
 * consumers their 232 registers only when every path of the kernel has the same split; otherwise it
 * fits them into the launch count and spills (seen in the fused GEMM+RS kernel: up to 204 bytes).
 * Order matters: warpgroup 0 may take its registers back only after warpgroups 1-2 have taken theirs
 * (split) and given them back (here). Were its setmaxnreg.inc first, it could take back what it had
 * just released while warpgroups 1-2 still wait in their own inc, for ever: a first version without
 * the barrier hung one rank's kernel at call 983 of the 1000-call GPU test (H200). Warpgroups 1-2
 * give back, then arrive; warpgroup 0 waits for them, then takes. */
__device__ __forceinline__ void weave_hopper_gemm_regs_restore() {
  if ((threadIdx.x >> 7) == 0) {
    weave_hg_named_barrier_sync(WEAVE_HGEMM_RESTORE_BARRIER_ID, WEAVE_HGEMM_THREADS);
    weave_hg_setmaxnreg_inc<WEAVE_HGEMM_LAUNCH_REGS>();
  } else {
    weave_hg_setmaxnreg_dec<WEAVE_HGEMM_LAUNCH_REGS>();
    weave_hg_named_barrier_arrive(WEAVE_HGEMM_RESTORE_BARRIER_ID, WEAVE_HGEMM_THREADS);
  }
}

/* ---------------------------------------------------------------------------------------------
 * The role, for one (dtype, B layout, cluster size).
 *   DT: WEAVE_BF16 or WEAVE_FP16; BCOL: 1 for WEAVE_LAYOUT_COL; CL: 1 or 2 CTAs per cluster.
 * CL == 2 (the kernel is launched with cluster dims (2,1,1)): the two CTAs of a cluster compute two
 * tiles with the same tile_n at the same time, each loads its own A and one half of B and multicasts
 * that half to both, halving the B traffic from L2. Requirements: seq_stride and seq_count even, the
 * CTA of cluster rank r passes seq_begin = 2j + r, and coords(seq) and coords(seq ^ 1) have the same
 * col0, and both must be in range (tile_m < ceil(M/128)): pair tile rows, so ceil(M/128) must be
 * even. Every thread of both CTAs returns only after a cluster barrier.
 * ------------------------------------------------------------------------------------------- */
template <class Sink, int DT, int BCOL, int CL, bool SK = false>
__device__ __forceinline__ void weave_hopper_gemm_role_t(const WeaveHopperGemmParams &p,
                                                         unsigned char *smem, int seq_begin,
                                                         int seq_stride, int seq_count, Sink &sink) {
  static_assert(CL == 1 || CL == 2, "cluster size 1 or 2");
  static_assert(!SK || CL == 1, "stream-K runs without clusters");
  const uint32_t smem_base = weave_hg_smem_u32(smem);
  const uint32_t full_bar = smem_base + WEAVE_HGEMM_STAGES * WEAVE_HGEMM_STAGE_BYTES;
  const uint32_t empty_bar = full_bar + WEAVE_HGEMM_STAGES * 8;
  const int tid = threadIdx.x;
  const int wg = tid >> 7;
  const uint32_t cta_rank = CL == 2 ? weave_hg_cluster_ctarank() : 0;

  if (WEAVE_HGEMM_PROFILE && tid == 0) weave_hg_prof_edge(0);
  weave_hg_ring_init<CL>(full_bar, empty_bar, WEAVE_HGEMM_STAGES, 2 * CL); /* each consumer warpgroup of each CTA */

  /* data-parallel tiles seq_begin, +seq_stride, ... < seq_count; with SK, then this block's
   * stream-K range (gemm_streamk.h). Producer and consumers walk the same items. */
  const weave_hgemm_sk_t sk_off = weave_hgemm_sk_plan(0, 0, p.k_blocks, WEAVE_HGEMM_SK_OFF);
  weave_hgemm_walk_t walk =
      weave_hgemm_walk_begin(SK ? &p.sk : &sk_off, seq_begin, seq_begin, seq_stride, seq_count);
  int seq, kb0, kb1;

  if (!weave_hopper_gemm_regs_split()) {
    /* ---------------- producer ---------------- */
    if (tid == 0) {
      weave_hg_tma_prefetch_map(&p.tmap_a);
      weave_hg_tma_prefetch_map(&p.tmap_b);
      int stage = 0;
      uint32_t phase = 0;
#if WEAVE_HGEMM_PROFILE
      int ptile = 0;
#endif
      while (weave_hgemm_walk_next(&walk, &seq, &kb0, &kb1)) {
        int m0, n0;
        sink.coords(seq, &m0, &n0);
#if WEAVE_HGEMM_PROFILE /* as a block: the default build's producer SASS stays the verified one */
        long long *prof = weave_hg_prof_slot(2, ptile++);
#endif
        for (int kb = kb0; kb < kb1; ++kb) {
#if WEAVE_HGEMM_PROFILE
          if (kb == kb0) WEAVE_HG_PROF_STAMP(prof, 0);
#endif
          weave_hg_mbar_wait(empty_bar + 8 * stage, phase ^ 1);
#if WEAVE_HGEMM_PROFILE
          if (kb == kb0) WEAVE_HG_PROF_STAMP(prof, 1);
#endif
          const uint32_t fb = full_bar + 8 * stage;
          weave_hg_mbar_expect_tx(fb, WEAVE_HGEMM_STAGE_BYTES);
          weave_hg_load_stage<BCOL, WEAVE_HGEMM_BN, CL>(p, smem_base + stage * WEAVE_HGEMM_STAGE_BYTES, fb,
                                                        kb * WEAVE_HGEMM_BK, m0, n0, cta_rank);
          if (++stage == WEAVE_HGEMM_STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
  } else {
    /* ---------------- consumers ---------------- */
    const int cw = wg - 1;            /* 0 or 1: which 64-row half of the tile */
    const int ltid = tid & 127;
    const int warp = ltid >> 5, lane = ltid & 31;
    const uint64_t b_base = BCOL ? WEAVE_HGEMM_DESC_KMAJOR_SW128 : p.b_desc_base;
    /* per k16 step: K-major advances 32 bytes inside the swizzled row; MN-major 16 rows of 128 B */
    const uint32_t b_kstep = BCOL ? 2u : (16u * 128u) >> 4;
    const int M = p.M, N = p.N;
    float acc[128];
    int stage = 0;
    uint32_t phase = 0;
    int ptile = 0; /* WEAVE_HGEMM_PROFILE */
    while (weave_hgemm_walk_next(&walk, &seq, &kb0, &kb1)) {
      int prev_stage = 0;
      int m0 = 0, n0 = 0; /* the tile's place: computed under its first k-block's wgmmas */
      long long *prof = ltid == 0 ? weave_hg_prof_slot(cw, ptile) : nullptr;
      ++ptile;
      WEAVE_HG_PROF_STAMP(prof, 0);
      WEAVE_HG_PROF_STAMP_NS(prof, 14);
      for (int kb = kb0; kb < kb1; ++kb) {
        weave_hg_mbar_wait(full_bar + 8 * stage, phase);
        if (kb == kb0) WEAVE_HG_PROF_STAMP(prof, 1);
        const uint32_t sa = smem_base + stage * WEAVE_HGEMM_STAGE_BYTES + cw * (64 * 128);
        const uint32_t sb = smem_base + stage * WEAVE_HGEMM_STAGE_BYTES + WEAVE_HGEMM_A_STAGE_BYTES;
        const uint64_t da = weave_hg_desc(sa, WEAVE_HGEMM_DESC_KMAJOR_SW128);
        const uint64_t db = weave_hg_desc(sb, b_base);
        weave_hg_fence_regs(acc);
        weave_hg_wgmma_fence();
#pragma unroll
        for (int k = 0; k < WEAVE_HGEMM_BK / 16; ++k) {
          const uint32_t scale_d = (kb > kb0 || k > 0) ? 1u : 0u;
          if (DT == WEAVE_BF16) {
            WEAVE_HGEMM_WGMMA_M64N256K16("bf16", acc, da + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          } else {
            WEAVE_HGEMM_WGMMA_M64N256K16("f16", acc, da + 2u * k, db + b_kstep * k, scale_d, BCOL ? 0 : 1);
          }
        }
        weave_hg_wgmma_commit();
        if (kb == kb0) {
          /* the sink's coords (integer divisions, ~600 cycles with the jump to the epilogue's code
           * when they ran after the main loop, clock64 breakdown of session 7) run while the tensor
           * cores work on the first k-block; the empty asm pins them here */
          sink.coords(seq, &m0, &n0);
          asm volatile("" : "+r"(m0), "+r"(n0));
        }
        weave_hg_fence_regs(acc);
        weave_hg_wgmma_wait<1>();
        if (kb > kb0 && ltid == 0) weave_hg_release_stage<CL>(empty_bar + 8 * prev_stage);
        prev_stage = stage;
        if (++stage == WEAVE_HGEMM_STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      weave_hg_wgmma_wait<0>();
      weave_hg_fence_regs(acc);
      WEAVE_HG_PROF_STAMP(prof, 2);
      if (ltid == 0) weave_hg_release_stage<CL>(empty_bar + 8 * prev_stage);
      if constexpr (SK) {
        /* a split tile: only its last segment to arrive goes on, with the summed accumulators */
        if ((kb0 != 0 || kb1 != p.k_blocks) &&
            !weave_hgemm_sk_reduce(p, acc, seq - seq_count, seq_begin, kb0, cw, ltid))
          continue;
      }

      /* epilogue: accumulator fragment of m64nNk16: d[4j + {0,1}] at (row, 8j + 2*(lane%4) + {0,1}),
       * d[4j + {2,3}] at row + 8, with row = 16*warp + lane/4 inside the warpgroup's 64 rows. */
      sink.begin(seq);
      const int lrow = warp * 16 + (lane >> 2); /* row inside this warpgroup's 64 rows */
      const int row0 = m0 + cw * 64 + lrow;
      const int col0 = n0 + (lane & 3) * 2;
      bool done = false;
      if constexpr (weave_hgemm_sink_tma<Sink>::value) {
        if (sink.tma_store()) {
          const uint32_t ebuf = smem_base + WEAVE_HGEMM_EPI_OFFSET + cw * (WEAVE_HGEMM_EPI_BYTES / 2);
          WEAVE_HG_PROF_STAMP(prof, 3);
          weave_hg_store_rows<Sink, WEAVE_HGEMM_BN>(sink, acc, ebuf, 0, n0, sink.tma_row(m0) + cw * 64, cw, lrow,
                                                    lane, ltid, prof);
          weave_hg_store_rows_complete<Sink>(ltid);
          WEAVE_HG_PROF_STAMP(prof, 4);
          done = true;
        }
      }
      if (!done) {
#pragma unroll
        for (int j = 0; j < WEAVE_HGEMM_BN / 8; ++j) {
          const int col = col0 + 8 * j;
          if (col < N) {
            if (row0 < M) sink.store2(row0, col, acc[4 * j + 0], acc[4 * j + 1]);
            if (row0 + 8 < M) sink.store2(row0 + 8, col, acc[4 * j + 2], acc[4 * j + 3]);
          }
        }
      }
      if constexpr (!weave_hgemm_sink_no_end<Sink>::value) {
        weave_hg_named_barrier_sync(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS);
        if (tid == WEAVE_HGEMM_THREADS - WEAVE_HGEMM_CONSUMER_THREADS) sink.end(seq);
      }
      WEAVE_HG_PROF_STAMP(prof, 13);
    }
    if constexpr (weave_hgemm_sink_tma<Sink>::value) {
      if (ltid == 0) weave_hg_bulk_wait_all(); /* smem must outlive the stores that read it */
    }
    if (WEAVE_HGEMM_PROFILE && ltid == 0 && cw == 0) weave_hg_prof_edge(1);
  }
  if (CL == 2) weave_hg_cluster_sync(); /* no CTA leaves while its peer may still signal it */
}

/* The role for the (dtype, layout) in p, chosen at run time (one uniform branch); no cluster. */
template <class Sink>
__device__ __forceinline__ void weave_hopper_gemm_role(const WeaveHopperGemmParams &p,
                                                       unsigned char *smem, int seq_begin,
                                                       int seq_stride, int seq_count, Sink &sink) {
  if (p.dtype == WEAVE_BF16) {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hopper_gemm_role_t<Sink, WEAVE_BF16, 1, 1>(p, smem, seq_begin, seq_stride, seq_count, sink);
    else
      weave_hopper_gemm_role_t<Sink, WEAVE_BF16, 0, 1>(p, smem, seq_begin, seq_stride, seq_count, sink);
  } else {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hopper_gemm_role_t<Sink, WEAVE_FP16, 1, 1>(p, smem, seq_begin, seq_stride, seq_count, sink);
    else
      weave_hopper_gemm_role_t<Sink, WEAVE_FP16, 0, 1>(p, smem, seq_begin, seq_stride, seq_count, sink);
  }
}

/* Same, for kernels launched with 2-CTA clusters (see the requirements above the role). */
template <class Sink>
__device__ __forceinline__ void weave_hopper_gemm_role_cluster2(const WeaveHopperGemmParams &p,
                                                                unsigned char *smem, int seq_begin,
                                                                int seq_stride, int seq_count,
                                                                Sink &sink) {
  if (p.dtype == WEAVE_BF16) {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hopper_gemm_role_t<Sink, WEAVE_BF16, 1, 2>(p, smem, seq_begin, seq_stride, seq_count, sink);
    else
      weave_hopper_gemm_role_t<Sink, WEAVE_BF16, 0, 2>(p, smem, seq_begin, seq_stride, seq_count, sink);
  } else {
    if (p.b_layout == WEAVE_LAYOUT_COL)
      weave_hopper_gemm_role_t<Sink, WEAVE_FP16, 1, 2>(p, smem, seq_begin, seq_stride, seq_count, sink);
    else
      weave_hopper_gemm_role_t<Sink, WEAVE_FP16, 0, 2>(p, smem, seq_begin, seq_stride, seq_count, sink);
  }
}

#endif /* WEAVE_GEMM_HOPPER_CUH */
