/*
 * Device side of the Hopper GEMM's stream-K tail (the schedule: tile_scheduler.h): the fixup of a
 * split tile by its segments, wait-free. Each segment but the last to arrive leaves its fp32
 * accumulators in its workspace slot; the last one sums all segments in k order and goes on to the
 * epilogue.
 */
#ifndef WEAVE_HGEMM_STREAMK_FIXUP_CUH
#define WEAVE_HGEMM_STREAMK_FIXUP_CUH

#include "weave_device.cuh" /* weave_ld, weave_atomic_add */
#include "gemm/hopper/gemm_hopper.h"
#include "gemm/hopper/ptx.cuh"

#ifndef WEAVE_HGEMM_SK_CHUNK
#define WEAVE_HGEMM_SK_CHUNK 32 /* float4 loads per thread in flight while adding a later segment */
#endif
static __device__ __forceinline__ bool weave_hgemm_consumer_bar_or(bool pred) {
  return weave_hgemm_named_barrier_or(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS, pred);
}

/* Called by all 256 consumer threads after the main loop of a split item (SK tile t, block b,
 * k-blocks from kb0) with the item's accumulators. Returns false if another segment of the tile is
 * still to come (this one's accumulators are in its workspace slot); true for the last segment, with
 * acc = the sum of all segments in k order (bitwise the same whoever is last). Never waits. */
static __device__ __forceinline__ bool weave_hgemm_sk_reduce(const weave_hgemm_params_t &p, float *acc, int t, int b,
                                                             int kb0, int cw, int ltid) {
  int first, segs;
  weave_hgemm_sk_segments(&p.sk, t, &first, &segs);
  const int s = b - first;
  unsigned *cnt = p.sk_counters + t;
  const bool leader = cw == 0 && ltid == 0;
  /* every other segment already arrived: last without writing the slot */
  bool last = weave_hgemm_consumer_bar_or(
      leader && weave_hgemm_sk_is_last(weave_ld<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_GPU>(cnt), segs));
  if (!last) {
    float4 *dst = (float4 *)(p.sk_partials + (size_t)weave_hgemm_sk_slot(b, kb0) * WEAVE_HGEMM_SK_SLOT_FLOATS) +
                  cw * 32 * 128 + ltid;
#pragma unroll
    for (int g = 0; g < 32; ++g)
      __stcg(dst + g * 128, make_float4(acc[4 * g], acc[4 * g + 1], acc[4 * g + 2], acc[4 * g + 3]));
    weave_hgemm_named_barrier_sync(WEAVE_HGEMM_CONSUMER_BARRIER_ID, WEAVE_HGEMM_CONSUMER_THREADS);
    /* release (cumulative over the barrier) of every thread's slot writes; acquire of the others' */
    last = weave_hgemm_consumer_bar_or(
        leader && weave_hgemm_sk_is_last(weave_atomic_add<WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_GPU>(cnt, 1u), segs));
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
          pre[j].x += v[j].x;
          pre[j].y += v[j].y;
          pre[j].z += v[j].z;
          pre[j].w += v[j].w;
        }
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float *a = acc + 4 * (c + j);
        a[0] = pre[j].x + a[0];
        a[1] = pre[j].y + a[1];
        a[2] = pre[j].z + a[2];
        a[3] = pre[j].w + a[3];
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
        a[0] += v[j].x;
        a[1] += v[j].y;
        a[2] += v[j].z;
        a[3] += v[j].w;
      }
    }
  }
  if (leader) *(volatile unsigned *)cnt = 0u; /* all segs arrived: nobody else touches it this call */
  return true;
}

#endif /* WEAVE_HGEMM_STREAMK_FIXUP_CUH */
