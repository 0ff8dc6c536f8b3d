/*
 * GEMM role on mma.sync tensor cores (sm_80-style; the Hopper TMA + wgmma role in gemm_hopper.cuh is
 * the fast path). Used where the Hopper role cannot be: rows that are not 16-byte aligned, fp32,
 * and as the simple reference mainloop of the fused kernel.
 *
 * A block of 256 threads computes 128x128 tiles: 8 warps as 2 (M) x 4 (N), 64x32 each, K in steps
 * of 32 through a 4-stage cp.async pipeline (zero-fill past M/N/K). Shared tiles are XOR-swizzled in
 * 16-byte chunks so ldmatrix reads are conflict-free. B in either layout: [N][K] (COL) is loaded as
 * rows of k and read with ldmatrix; [K][N] (ROW) as rows of n and read with ldmatrix.trans.
 * Unaligned rows fall back to bounds-checked scalar loads into the same shared layout.
 *
 * The role walks tile sequence numbers seq_begin, +seq_stride, ... < seq_count and talks to a Sink:
 *   sink.coords(seq, &row0, &col0)   first row/column of the tile (rows index A; any row < M)
 *   sink.begin(seq)                  every thread, before its first store of the tile (may wait)
 *   sink.store2(row, col, v0, v1)    accumulators of C[row][col], C[row][col+1] (row < M, col < N)
 *   sink.end(seq)                    one thread, after a block barrier behind every thread's stores
 */
#ifndef WEAVE_GEMM_MMA_CUH
#define WEAVE_GEMM_MMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define WEAVE_MMA_BM 128
#define WEAVE_MMA_BN 128
#define WEAVE_MMA_BK 32
#define WEAVE_MMA_STAGES 4
#define WEAVE_MMA_THREADS 256
/* A and B stages (8 KB each) */
#define WEAVE_MMA_SMEM (WEAVE_MMA_STAGES * 2 * WEAVE_MMA_BM * WEAVE_MMA_BK * 2)

typedef struct {
  int M, N, K;
  const void *A, *B;
  int b_col;  /* B stored [N][K] */
  int vec_ok; /* 16-byte aligned rows: cp.async */
} weave_mma_args_t;

__device__ __forceinline__ uint32_t weave_mma_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void weave_mma_cp_async16(uint32_t dst, const void *src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void weave_mma_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void weave_mma_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void weave_mma_ldmatrix_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                      uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}
__device__ __forceinline__ void weave_mma_ldmatrix_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                            uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

template <typename T>
__device__ __forceinline__ void weave_mma_m16n8k16(float *c, const uint32_t *a, const uint32_t *b);
template <>
__device__ __forceinline__ void weave_mma_m16n8k16<__nv_bfloat16>(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void weave_mma_m16n8k16<__half>(float *c, const uint32_t *a, const uint32_t *b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Byte offset of 16-byte chunk `c` of row `r` in a tile whose rows hold `chunks` chunks. */
__device__ __forceinline__ int weave_mma_swz(int r, int c, int chunks) {
  return chunks == 4 ? (r * 4 + (c ^ ((r >> 1) & 3))) * 16 : (r * chunks + (c ^ (r & 7))) * 16;
}

/* Loads one K-step stage: A [128][32] and B ([128 n][32 k] for COL, [32 k][128 n] for ROW). */
template <typename T>
__device__ __forceinline__ void weave_mma_load_stage(const weave_mma_args_t &a, unsigned char *sA, unsigned char *sB,
                                                     int row0, int col0, int k0) {
  const T *A = (const T *)a.A, *B = (const T *)a.B;
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    int idx = tid + i * WEAVE_MMA_THREADS; /* 512 chunks per operand */
    /* A: row = idx / 4, chunk = idx % 4 */
    {
      int r = idx >> 2, c = idx & 3;
      int gr = row0 + r, gk = k0 + c * 8;
      unsigned char *dst = sA + weave_mma_swz(r, c, 4);
      if (a.vec_ok) {
        bool in = gr < a.M && gk < a.K;
        weave_mma_cp_async16(weave_mma_smem(dst), in ? (const void *)(A + (size_t)gr * a.K + gk) : a.A, in ? 16 : 0);
      } else {
        T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = (gr < a.M && gk + e < a.K) ? A[(size_t)gr * a.K + gk + e] : T(0.0f);
        *(uint4 *)dst = *(uint4 *)v;
      }
    }
    if (a.b_col) { /* B [N][K]: row n, 4 chunks of k */
      int r = idx >> 2, c = idx & 3;
      int gn = col0 + r, gk = k0 + c * 8;
      unsigned char *dst = sB + weave_mma_swz(r, c, 4);
      if (a.vec_ok) {
        bool in = gn < a.N && gk < a.K;
        weave_mma_cp_async16(weave_mma_smem(dst), in ? (const void *)(B + (size_t)gn * a.K + gk) : a.B, in ? 16 : 0);
      } else {
        T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = (gn < a.N && gk + e < a.K) ? B[(size_t)gn * a.K + gk + e] : T(0.0f);
        *(uint4 *)dst = *(uint4 *)v;
      }
    } else { /* B [K][N]: row k, 16 chunks of n */
      int r = idx >> 4, c = idx & 15;
      int gk = k0 + r, gn = col0 + c * 8;
      unsigned char *dst = sB + weave_mma_swz(r, c, 16);
      if (a.vec_ok) {
        bool in = gk < a.K && gn < a.N;
        weave_mma_cp_async16(weave_mma_smem(dst), in ? (const void *)(B + (size_t)gk * a.N + gn) : a.B, in ? 16 : 0);
      } else {
        T v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = (gk < a.K && gn + e < a.N) ? B[(size_t)gk * a.N + gn + e] : T(0.0f);
        *(uint4 *)dst = *(uint4 *)v;
      }
    }
  }
}

template <typename T, class Sink>
__device__ void weave_mma_gemm_role(const weave_mma_args_t &a, unsigned char *smem, int seq_begin, int seq_stride,
                                    int seq_count, Sink &sink) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3; /* warp tile: rows wm*64, cols wn*32 */
  const int stage_bytes = WEAVE_MMA_BM * WEAVE_MMA_BK * 2;
  unsigned char *sA = smem, *sB = smem + WEAVE_MMA_STAGES * stage_bytes;
  const int ksteps = (a.K + WEAVE_MMA_BK - 1) / WEAVE_MMA_BK;

  for (int seq = seq_begin; seq < seq_count; seq += seq_stride) {
    int row0, col0;
    sink.coords(seq, &row0, &col0);
    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < WEAVE_MMA_STAGES - 1; ++s) {
      if (s < ksteps)
        weave_mma_load_stage<T>(a, sA + s * stage_bytes, sB + s * stage_bytes, row0, col0, s * WEAVE_MMA_BK);
      weave_mma_cp_async_commit();
    }
    for (int ks = 0; ks < ksteps; ++ks) {
      weave_mma_cp_async_wait<WEAVE_MMA_STAGES - 2>();
      __syncthreads();
      /* Refill the stage consumed one step ago (everyone is past it after the barrier). */
      int nk = ks + WEAVE_MMA_STAGES - 1;
      if (nk < ksteps) {
        int st = nk % WEAVE_MMA_STAGES;
        weave_mma_load_stage<T>(a, sA + st * stage_bytes, sB + st * stage_bytes, row0, col0, nk * WEAVE_MMA_BK);
      }
      weave_mma_cp_async_commit();
      const unsigned char *tA = sA + (ks % WEAVE_MMA_STAGES) * stage_bytes;
      const unsigned char *tB = sB + (ks % WEAVE_MMA_STAGES) * stage_bytes;
#pragma unroll
      for (int kk = 0; kk < WEAVE_MMA_BK / 16; ++kk) {
        uint32_t af[4][4], bf[4][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          int r = wm * 64 + mi * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
          weave_mma_ldmatrix_x4(weave_mma_smem(tA + weave_mma_swz(r, c, 4)), af[mi][0], af[mi][1], af[mi][2],
                                af[mi][3]);
        }
#pragma unroll
        for (int nj = 0; nj < 2; ++nj) {
          if (a.b_col) {
            int n = wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
            weave_mma_ldmatrix_x4(weave_mma_smem(tB + weave_mma_swz(n, c, 4)), bf[2 * nj][0], bf[2 * nj][1],
                                  bf[2 * nj + 1][0], bf[2 * nj + 1][1]);
          } else {
            int k = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), c = (wn * 32 + nj * 16) / 8 + (lane >> 4);
            weave_mma_ldmatrix_x4_trans(weave_mma_smem(tB + weave_mma_swz(k, c, 16)), bf[2 * nj][0], bf[2 * nj][1],
                                        bf[2 * nj + 1][0], bf[2 * nj + 1][1]);
          }
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) weave_mma_m16n8k16<T>(acc[mi][ni], af[mi], bf[ni]);
      }
    }
    weave_mma_cp_async_wait<0>();
    __syncthreads(); /* all reads of this tile's stages are done before the next tile's prologue */

    sink.begin(seq);
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        int r = row0 + wm * 64 + mi * 16 + g, c = col0 + wn * 32 + ni * 8 + 2 * t4;
        if (c < a.N) {
          if (r < a.M) sink.store2(r, c, acc[mi][ni][0], acc[mi][ni][1]);
          if (r + 8 < a.M) sink.store2(r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);
        }
      }
    __syncthreads();
    if (tid == 0) sink.end(seq);
  }
}

/* fp32 inputs: SIMT FMA in fp32 on the same 128x128 tiles (exact fp32 products, no TF32). Each
 * thread owns an 8x8 block of the tile; K in steps of 16 through shared memory. */
#define WEAVE_SIMT_BK 16
template <class Sink>
__device__ void weave_mma_simt_gemm_role(const weave_mma_args_t &a, unsigned char *smem, int seq_begin, int seq_stride,
                                         int seq_count, Sink &sink) {
  float *sA = (float *)smem;                     /* [BK][128] (k-major, for broadcasts) */
  float *sB = sA + WEAVE_SIMT_BK * WEAVE_MMA_BM; /* [BK][128] */
  const float *A = (const float *)a.A, *B = (const float *)a.B;
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  for (int seq = seq_begin; seq < seq_count; seq += seq_stride) {
    int row0, col0;
    sink.coords(seq, &row0, &col0);
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < a.K; k0 += WEAVE_SIMT_BK) {
      for (int idx = tid; idx < WEAVE_SIMT_BK * 128; idx += WEAVE_MMA_THREADS) {
        int r = idx / WEAVE_SIMT_BK, k = idx % WEAVE_SIMT_BK; /* A: coalesced along k */
        int gr = row0 + r, gk = k0 + k;
        sA[k * 128 + r] = (gr < a.M && gk < a.K) ? A[(size_t)gr * a.K + gk] : 0.f;
        int n, kb;
        if (a.b_col) {
          n = idx / WEAVE_SIMT_BK;
          kb = idx % WEAVE_SIMT_BK;
        } else {
          kb = idx / 128;
          n = idx % 128;
        }
        int gn = col0 + n, gkb = k0 + kb;
        float bv = 0.f;
        if (gn < a.N && gkb < a.K) bv = a.b_col ? B[(size_t)gn * a.K + gkb] : B[(size_t)gkb * a.N + gn];
        sB[kb * 128 + n] = bv;
      }
      __syncthreads();
#pragma unroll 4
      for (int k = 0; k < WEAVE_SIMT_BK; ++k) {
        float av[8], bv[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) av[i] = sA[k * 128 + tr * 8 + i];
#pragma unroll
        for (int j = 0; j < 8; ++j) bv[j] = sB[k * 128 + tc * 8 + j];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      __syncthreads();
    }
    sink.begin(seq);
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; j += 2) {
        int r = row0 + tr * 8 + i, c = col0 + tc * 8 + j;
        if (r < a.M && c < a.N) sink.store2(r, c, acc[i][j], acc[i][j + 1]);
      }
    __syncthreads();
    if (tid == 0) sink.end(seq);
  }
}

#endif
