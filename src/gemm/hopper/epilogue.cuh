/*
 * Epilogue of the Hopper GEMM's consumer warpgroups: the optional sink capabilities (what a sink may
 * declare beyond the Sink contract of gemm_hopper.cuh) and the TMA-store epilogue that sinks
 * declaring kWeaveTmaStore get: accumulators -> the role's scales (scales.cuh) -> alpha / bias (the
 * sink's epi) -> 16-bit or fp32 ->
 * 128B-swizzled staging buffers in smem (stmatrix for 16-bit) -> one TMA store per 64-row x 128-byte
 * chunk.
 */
#ifndef WEAVE_HGEMM_EPILOGUE_CUH
#define WEAVE_HGEMM_EPILOGUE_CUH

#include <type_traits>

#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/prof.cuh"
#include "gemm/hopper/ptx.cuh"
#include "gemm/hopper/scales.cuh"

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

/* Optional: a sink that declares
 *   static constexpr bool kWeaveWaitInputs = true;
 *   __device__ void wait_inputs(int row0);                   // the producer thread, before its first
 *                                                            // TMA load of a tile whose rows start at row0
 * gates the tile's loads on its inputs having arrived (the AllGather + GEMM kernel waits there for the
 * rows of A its peers push). The sink makes the arrived data visible to the TMA unit (a proxy fence
 * after its acquire). Cooperative role only. */
template <class S, class = void>
struct weave_hgemm_sink_waits : std::false_type {};
template <class S>
struct weave_hgemm_sink_waits<S, std::void_t<decltype(S::kWeaveWaitInputs)>>
    : std::integral_constant<bool, S::kWeaveWaitInputs> {};

template <class S, class = void>
struct weave_hgemm_sink_tma : std::false_type {};
template <class S>
struct weave_hgemm_sink_tma<S, std::void_t<decltype(S::kWeaveTmaStore)>>
    : std::integral_constant<bool, S::kWeaveTmaStore> {};

/* The accumulators of 8-column group j of a m64nNk16 fragment (rows r and r + 8), through the role's
 * scale policy (scales.cuh) and the sink's alpha/bias; col = this thread's first column of the group. */
template <class Sink, bool BIAS, class SC>
static __device__ __forceinline__ void weave_hgemm_epi_group(Sink &sink, const weave_hgemm_params_t &p, const SC &sc,
                                                             const float *a, int j, int col, float *v) {
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = a[4 * j + e];
  sc.apply(p, col, v);
  sink.template epi<BIAS>(col, v[0], v[1]);
  sink.template epi<BIAS>(col, v[2], v[3]);
}

/* TMA-store epilogue of 64 rows x NC columns of a consumer warpgroup (accumulators `a` in the
 * m64nNk16 fragment: a[4j + {0,1}] at (lrow, 8j + 2*(lane%4) + {0,1}), a[4j + {2,3}] at lrow + 8),
 * rows trow.. of the sink's map, columns c0..: 64-row x 128-byte chunks (64 columns of 2-byte or 32
 * of 4-byte elements) through the warpgroup's BUFS staging buffers at ebuf (chunk q of the call uses
 * buffer (q0 + q) % BUFS), 128B-swizzled rows (16-byte unit u of row r at u ^ (r % 8): the warp's
 * stores spread over all banks), one TMA store each. */
template <class Sink, int NC, bool BIAS, class SC, int BUFS>
static __device__ __forceinline__ void weave_hgemm_store_rows_impl(Sink &sink, const weave_hgemm_params_t &p,
                                                                   const SC &sc, const float *a, uint32_t ebuf, int q0,
                                                                   int c0, int trow, int cw, int lrow, int lane,
                                                                   int ltid, long long *prof) {
  typedef typename Sink::TmaElem E;
  constexpr int EB = (int)sizeof(E), CC = 128 / EB, G = CC / 8;
#pragma unroll
  for (int c = 0; c < NC / CC; ++c) {
    const uint32_t b = ebuf + ((q0 + c) % BUFS) * WEAVE_HGEMM_EPI_BUF_BYTES;
    if (ltid == 0) /* the store that used this buffer has read it */
      weave_hgemm_bulk_wait_read<BUFS - 1>();
    weave_hgemm_named_barrier_sync(2 + cw, 128);
    if (c < 4) WEAVE_HGEMM_PROF_STAMP(prof, 5 + 2 * c);
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
        weave_hgemm_epi_group<Sink, BIAS>(sink, p, sc, a, j, col, v);
        weave_hgemm_epi_group<Sink, BIAS>(sink, p, sc, a, j + 1, col + 8, v + 4);
        const int u = jj + (q >> 1);
        weave_hgemm_stmatrix_x4(b + R * 128 + (uint32_t)((u ^ (R & 7)) * 16), weave_hgemm_pack2<E>(v[0], v[1]),
                                weave_hgemm_pack2<E>(v[2], v[3]), weave_hgemm_pack2<E>(v[4], v[5]),
                                weave_hgemm_pack2<E>(v[6], v[7]));
      }
    } else { /* fp32: 8-byte pairs, rows lrow and lrow + 8 (same swizzle phase) */
#pragma unroll
      for (int jj = 0; jj < G; ++jj) {
        const int j = G * c + jj;
        float v[4];
        weave_hgemm_epi_group<Sink, BIAS>(sink, p, sc, a, j, c0 + (lane & 3) * 2 + 8 * j, v);
        const int pos = (lane & 3) * 8; /* byte of this thread's pair in an 8-column group */
        const int unit = 2 * jj + pos / 16;
        const uint32_t at = b + lrow * 128 + (uint32_t)((unit ^ (lrow & 7)) * 16 + pos % 16);
        weave_hgemm_st_shared_f32x2(at, v[0], v[1]);
        weave_hgemm_st_shared_f32x2(at + 8 * 128, v[2], v[3]);
      }
    }
    weave_hgemm_fence_proxy_async_smem();
    weave_hgemm_named_barrier_sync(2 + cw, 128);
    if (c < 4) WEAVE_HGEMM_PROF_STAMP(prof, 6 + 2 * c);
    if (ltid == 0 && sink.tma_issue()) {
      weave_hgemm_tma_store_2d(sink.c_map(), b, c0 + CC * c, trow);
      weave_hgemm_bulk_commit();
    }
  }
}

/* weave_hgemm_store_rows_impl with the sink's bias choice made once for the whole call, so that the code
 * the warps run per tile is only the conversions and stores. With the bias test inside epi() (two
 * never-taken branches per 8 columns) a 64-column chunk was 4.6 KB of SASS and took ~525 cycles
 * (clock64 breakdown, docs/hopper_gemm.md); without it (and with stmatrix) ~250. */
template <class Sink, int NC, class SC, int BUFS = WEAVE_HGEMM_EPI_BUFS>
static __device__ __forceinline__ void weave_hgemm_store_rows(Sink &sink, const weave_hgemm_params_t &p, const SC &sc,
                                                              const float *a, uint32_t ebuf, int q0, int c0, int trow,
                                                              int cw, int lrow, int lane, int ltid,
                                                              long long *prof = nullptr) {
  if (sink.epi_bias())
    weave_hgemm_store_rows_impl<Sink, NC, true, SC, BUFS>(sink, p, sc, a, ebuf, q0, c0, trow, cw, lrow, lane, ltid,
                                                          prof);
  else
    weave_hgemm_store_rows_impl<Sink, NC, false, SC, BUFS>(sink, p, sc, a, ebuf, q0, c0, trow, cw, lrow, lane, ltid,
                                                           prof);
}

/* After a warpgroup's last weave_hgemm_store_rows of a tile, for sinks whose end() publishes it: the
 * issuing thread waits for its bulk stores to complete and orders them before end()'s release. */
template <class Sink>
static __device__ __forceinline__ void weave_hgemm_store_rows_complete(int ltid) {
  if constexpr (Sink::kWeaveTmaPublish) {
    if (ltid == 0) {
      weave_hgemm_bulk_wait_all();
      weave_hgemm_fence_proxy_async_global();
    }
  }
}

#endif /* WEAVE_HGEMM_EPILOGUE_CUH */
