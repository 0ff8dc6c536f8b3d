/*
 * probe_promote: how busy the tensor cores stay when fp8 wgmma groups are promoted to fp32
 * (each warpgroup waits for its group and adds it to fp32 accumulators), by schedule, with nothing
 * else of a GEMM around them: no tile walk, no epilogue, no tensor maps. One CTA per SM runs
 * `kblocks` k-blocks of 128 (fp8) through a ring of 4 shared-memory stages, each consumer warpgroup
 * reading its 64 rows of A and the stage's B with wgmma (K-major, 128-byte swizzle descriptors, as
 * the library's kernels).
 *
 * Why: the library's promoted kernel (gemm_hopper_cooperative.cuh, PROMOTE) runs slower than
 * cuBLASLt's promoted fp8 (docs/hopper_gemm.md) while its fast-accumulation sibling is at parity; docs/hopper_gemm.md lists
 * hypotheses (the two warpgroups' groups interleave in the tensor cores and so finish, and add, at
 * the same time; shared-memory operand reads of n128 halves). Each schedule below isolates one.
 *
 * Schedules (per k-block and consumer warpgroup of 64 rows):
 *   fast256   4 x m64n256k32 into acc[128], wait_group 1: the fast-accumulation kernel's loop (ceiling)
 *   fast128   8 x m64n128k32 (two n128 halves) into acc, wait_group 1: the cost of n128 operand reads
 *   promo     per half: 4 x m64n128k32 into part[64], wait_group 0, acc += part (the library's PROMOTE)
 *   turns     promo, the two warpgroups taking turns to issue (named barriers), handed over at issue
 *   turnhalf  promo, each group committed as 2 + 2 and the turn handed over once the first 2 ran
 *   one_wg    promo with one consumer warpgroup (what a warpgroup alone keeps busy)
 *   three_wg  three consumer warpgroups, 192 x 128 per stage: 4 x m64n128k32 into part, wait 0, add
 *   p128      two warpgroups, 128 x 128 per stage: 4 x m64n128k32 into part, wait 0, add
 *   p192      two warpgroups, 128 x 192 per stage: 4 x m64n192k32 into part[96], wait 0, add (one
 *             group a k-block, A read once, 192 registers of accumulators as the library's 128 + 64)
 *   p192t     p192 with turns handed over at issue
 *   fast192   4 x m64n192k32 into acc[96], wait_group 1: p192's ceiling (n192 operand reads, no adds)
 * Not here: two part buffers per warpgroup, one group always queued while the previous one is added
 * (wait_group 1): ptxas (CUDA 13.0) serializes every wgmma of such code (C7514: it reads a wgmma's
 * registers before a wait_group 0), so a warpgroup's adds can hide only under other warpgroups' groups.
 * load 0: the stages are filled once and never rewritten (tensor cores and adds alone); load 1: a
 * producer warp refills each stage after it is released with bulk copies from a 3.5 MiB global buffer
 * (in L2), so shared memory also takes the copies' writes, at the rate the consumers run.
 *
 * Output: per schedule and load, the median over reps (runs interleaved) of TFLOP/s (CUDA events)
 * and of the SMs' clock cycles per k-block, and `util`: flops per SM clock against 8192 (the dense
 * fp8 rate of an H100/H200 SM: 1979 TFLOP/s at 1830 MHz on 132 SMs; an assumption, printed).
 * Checks: under load 0 every thread's sum against an fp64 reference of the same bytes (the
 * swizzle and accumulator fragment modelled on the host); under both loads, schedules that add the
 * same tensor-core sums in the same order are bitwise equal (promo, turns, turnhalf, one_wg;
 * p128, three_wg; p192, p192t); a mismatch prints FAIL and exits 1. Build: cmake --build build --target weave-probe-promote.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm/hopper/ptx.cuh"

enum {
  S_FAST256,
  S_FAST128,
  S_PROMO,
  S_TURNS,
  S_TURNHALF,
  S_ONE_WG,
  S_THREE_WG,
  S_P128,
  S_P192,
  S_P192T,
  S_FAST192,
  S_COUNT
};
static const char *const kNames[S_COUNT] = {"fast256",  "fast128", "promo", "turns", "turnhalf", "one_wg",
                                            "three_wg", "p128",    "p192",  "p192t", "fast192"};

#define PROBE_STAGES 4
#define PROBE_A_WG_BYTES (64 * 128) /* a warpgroup's 64 rows of one k-block */
#define PROBE_SRC_STAGES 64
/* a source stage: A of three warpgroups (24 KiB), then B's 256 rows (32 KiB); a schedule copies the
 * A rows and B rows it uses, so every schedule's warpgroup w multiplies the same bytes */
#define PROBE_SRC_B (3 * PROBE_A_WG_BYTES)
#define PROBE_SRC_STAGE_BYTES (PROBE_SRC_B + 256 * 128)

static constexpr __host__ __device__ int probe_wgs(int s) { return s == S_ONE_WG ? 1 : s == S_THREE_WG ? 3 : 2; }
static constexpr __host__ __device__ int probe_bn(int s) { return s >= S_P192 ? 192 : s >= S_THREE_WG ? 128 : 256; }
/* warpgroup 0 is the producer (one thread issues the copies), 1.. the consumers */
static constexpr __host__ __device__ int probe_threads(int s) { return (probe_wgs(s) + 1) * 128; }
/* registers: the launch count (65536 / threads, rounded down to 8; each SM sub-partition's 16384 hold
 * its warps) and the consumers' after the producer gives up all but 40 (setmaxnreg), as the library's
 * 40 / 232 split; one consumer warpgroup needs no split */
static constexpr __host__ __device__ int probe_launch_regs(int s) { return 65536 / probe_threads(s) / 8 * 8; }
static constexpr __host__ __device__ int probe_consumer_regs(int s) {
  return ((probe_wgs(s) + 1) * probe_launch_regs(s) - 40) / probe_wgs(s) / 8 * 8;
}
static constexpr __host__ __device__ int probe_stage_bytes(int s) {
  return probe_wgs(s) * PROBE_A_WG_BYTES + probe_bn(s) * 128;
}
static constexpr int probe_smem_bytes(int s) {
  return PROBE_STAGES * probe_stage_bytes(s) + 2 * PROBE_STAGES * 8 + 1024;
}

static __device__ __forceinline__ void probe_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

/* wgmma m64n192k32 e4m3, fp32 accumulators d[0..95] (the library has the n128 and n256 forms) */
#define PROBE_WGMMA_M64N192K32_E4M3(d, desc_a, desc_b, scale_d)                                                    \
  asm volatile(                                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                                                 \
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {" WEAVE_HGEMM_ACC_OPERANDS_0_63                      \
      ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79,"                          \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"                             \
      "}, %96, %97, p, 1, 1;\n}\n"                                                                                 \
      : WEAVE_HGEMM_ACC64_OUT(d, 0), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), \
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),    \
        "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]),    \
        "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]),    \
        "+f"(d[94]), "+f"(d[95])                                                                                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

/* 4 x m64nNk32 (N = 2 NACC: 128 or 192) into part (zeroed by the first), from stage descriptors
 * da / db; committed as one group, or as two groups of 2 (SPLIT) */
template <int NACC, bool SPLIT>
static __device__ __forceinline__ void probe_group(float *part, uint64_t da, uint64_t db) {
  weave_hgemm_fence_regs<NACC>(part);
  weave_hgemm_wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if constexpr (NACC == 96) {
      PROBE_WGMMA_M64N192K32_E4M3(part, da + 2u * k, db + 2u * k, k > 0 ? 1u : 0u);
    } else {
      WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(part, da + 2u * k, db + 2u * k, k > 0 ? 1u : 0u);
    }
    if (SPLIT && k == 1) weave_hgemm_wgmma_commit();
  }
  weave_hgemm_wgmma_commit();
}

template <int N>
static __device__ __forceinline__ void probe_add(float *acc, float *part) {
  weave_hgemm_fence_regs<N>(part);
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] += part[i];
}

template <int S, bool LOAD>
__global__ void __launch_bounds__(probe_threads(S), 1)
    probe_kernel(const uint8_t *src, int kblocks, long long *cycles, float *out) {
  constexpr int NWG = probe_wgs(S), SB = probe_stage_bytes(S);
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const uint32_t base = weave_hgemm_smem_u32(smem);
  const uint32_t full_bar = base + PROBE_STAGES * SB, empty_bar = full_bar + PROBE_STAGES * 8;
  const int tid = threadIdx.x, ltid = tid & 127;

  /* every stage starts with data (load 0 keeps it): source stage s, as the producer copies it */
  constexpr int AB = NWG * PROBE_A_WG_BYTES;
  for (int i = tid * 16; i < PROBE_STAGES * SB; i += blockDim.x * 16) {
    const int s = i / SB, o = i % SB;
    *(uint4 *)(smem + i) =
        *(const uint4 *)(src + (size_t)s * PROBE_SRC_STAGE_BYTES + (o < AB ? o : PROBE_SRC_B + o - AB));
  }
  if (tid == 0) {
    for (int s = 0; s < PROBE_STAGES; ++s) {
      weave_hgemm_mbar_init(full_bar + 8 * s, 1);
      weave_hgemm_mbar_init(empty_bar + 8 * s, NWG);
    }
    weave_hgemm_fence_mbar_init();
  }
  weave_hgemm_fence_proxy_async_smem();
  __syncthreads();
  long long t0 = clock64();

  if (tid < 128) { /* the producer warpgroup */
    if constexpr (NWG > 1) weave_hgemm_setmaxnreg_dec<40>();
    if (LOAD && ltid == 0) {
      for (int kb = 0; kb < kblocks; ++kb) {
        const int s = kb % PROBE_STAGES;
        const uint32_t ph = (kb / PROBE_STAGES) & 1;
        weave_hgemm_mbar_wait(empty_bar + 8 * s, ph ^ 1);
        weave_hgemm_mbar_expect_tx(full_bar + 8 * s, SB);
        const uint8_t *from = src + (size_t)((blockIdx.x * 7 + kb) % PROBE_SRC_STAGES) * PROBE_SRC_STAGE_BYTES;
        for (int off = 0; off < SB; off += 8192) /* A, then B; both multiples of 8 KiB */
          probe_bulk_load(base + s * SB + off, from + (off < AB ? off : PROBE_SRC_B + off - AB), 8192,
                          full_bar + 8 * s);
      }
    }
  } else {
    if constexpr (NWG > 1) weave_hgemm_setmaxnreg_inc<probe_consumer_regs(S)>();
    const int wg = (tid >> 7) - 1;        /* consumer warpgroup: its 64 rows of A */
    constexpr int NACC = probe_bn(S) / 2; /* fp32 accumulators a thread holds: 128 (n256), 96, 64 */
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0.f;
    float part[NACC == 96 ? 96 : 64];
    const uint32_t turn_mine = 1 + wg, turn_partner = 2 - wg; /* turns, turnhalf: barriers 1 and 2 */
    int prev = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      const int s = kb % PROBE_STAGES;
      if (LOAD) weave_hgemm_mbar_wait(full_bar + 8 * s, (kb / PROBE_STAGES) & 1);
      const uint32_t sa = base + s * SB + wg * PROBE_A_WG_BYTES, sb = base + s * SB + NWG * PROBE_A_WG_BYTES;
      const uint64_t da = weave_hgemm_desc(sa, WEAVE_HGEMM_DESC_KMAJOR_SW128);
      const uint64_t db = weave_hgemm_desc(sb, WEAVE_HGEMM_DESC_KMAJOR_SW128);
      constexpr uint64_t kHalf = 128 * 128 >> 4; /* B's second n128 half, in descriptor units */
      if constexpr (S == S_FAST256 || S == S_FAST128 || S == S_FAST192) {
        weave_hgemm_fence_regs<NACC>(acc);
        weave_hgemm_wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t sd = (kb > 0 || k > 0) ? 1u : 0u;
          if constexpr (S == S_FAST256) {
            WEAVE_HGEMM_WGMMA_M64N256K32_E4M3(acc, da + 2u * k, db + 2u * k, sd);
          } else if constexpr (S == S_FAST192) {
            PROBE_WGMMA_M64N192K32_E4M3(acc, da + 2u * k, db + 2u * k, sd);
          } else {
            float *lo = acc, *hi = acc + 64;
            WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(lo, da + 2u * k, db + 2u * k, sd);
            WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(hi, da + 2u * k, db + kHalf + 2u * k, sd);
          }
        }
        weave_hgemm_wgmma_commit();
        weave_hgemm_fence_regs<NACC>(acc);
        weave_hgemm_wgmma_wait<1>();
        if (LOAD && kb > 0 && ltid == 0) weave_hgemm_mbar_arrive(empty_bar + 8 * prev);
        prev = s;
      } else if constexpr (NACC < 128) { /* three_wg, p128, p192(t): one group a k-block, wait, add */
        if (S == S_P192T && (wg == 1 || kb > 0)) weave_hgemm_named_barrier_sync(turn_mine, 256);
        probe_group<NACC, false>(part, da, db);
        if (S == S_P192T) weave_hgemm_named_barrier_arrive(turn_partner, 256);
        weave_hgemm_wgmma_wait<0>();
        probe_add<NACC>(acc, part);
        if (LOAD && ltid == 0) weave_hgemm_mbar_arrive(empty_bar + 8 * s);
      } else { /* promo, turns, turnhalf, one_wg: two n128 halves a k-block */
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          constexpr bool TURNS = S == S_TURNS || S == S_TURNHALF;
          if (TURNS && (wg == 1 || kb > 0 || h > 0)) weave_hgemm_named_barrier_sync(turn_mine, 256);
          probe_group<64, S == S_TURNHALF>(part, da, db + h * kHalf);
          if (S == S_TURNHALF) weave_hgemm_wgmma_wait<1>();
          if (TURNS) weave_hgemm_named_barrier_arrive(turn_partner, 256);
          weave_hgemm_wgmma_wait<0>();
          probe_add<64>(acc + 64 * h, part);
        }
        if (LOAD && ltid == 0) weave_hgemm_mbar_arrive(empty_bar + 8 * s);
      }
    }
    if constexpr (S == S_FAST256 || S == S_FAST128 || S == S_FAST192) {
      weave_hgemm_wgmma_wait<0>();
      weave_hgemm_fence_regs<NACC>(acc);
    }
    /* warpgroup 0 took the first turn without waiting: it takes the partner's last hand-over */
    if ((S == S_TURNS || S == S_TURNHALF || S == S_P192T) && wg == 0) weave_hgemm_named_barrier_sync(turn_mine, 256);
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < NACC; ++i) sum += acc[i];
    out[(size_t)blockIdx.x * 384 + tid - 128] = sum;
  }
  __syncthreads();
  if (tid == 0) cycles[blockIdx.x] = clock64() - t0;
}

/* ---------------- host ---------------- */
#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "probe_promote: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                    \
    }                                                                                             \
  } while (0)

typedef void (*probe_fn)(const uint8_t *, int, long long *, float *);
typedef struct {
  probe_fn fn;
  int s, load;
} probe_cfg_t;

template <int S, bool LOAD>
static probe_cfg_t probe_cfg() {
  CK(cudaFuncSetAttribute(probe_kernel<S, LOAD>, cudaFuncAttributeMaxDynamicSharedMemorySize, probe_smem_bytes(S)));
  return probe_cfg_t{probe_kernel<S, LOAD>, S, LOAD};
}
template <int S>
static void probe_cfgs(probe_cfg_t *c) {
  c[2 * S] = probe_cfg<S, false>();
  c[2 * S + 1] = probe_cfg<S, true>();
  if constexpr (S + 1 < S_COUNT) probe_cfgs<S + 1>(c);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double e4m3_value(uint8_t v) {
  const int e = (v >> 3) & 15, m = v & 7;
  const double mag = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  return v & 0x80 ? -mag : mag;
}

/* What thread t (< wgs x 128) of schedule s holds summed with load 0, every CTA alike: over the
 * elements (row, col) of its accumulator fragment (d[4j + {0,1}] at (16 warp + lane / 4, 8j +
 * 2 (lane % 4) + {0,1}), d[4j + {2,3}] 8 rows down), the sum over the four stages' k of A B, times
 * kblocks / 4; *abs: the same of |A B|. Element (r, k) of a 128-byte swizzled K-major tile is byte
 * 128 r + 16 ((k / 16) ^ (r % 8)) + k % 16. */
static void probe_reference(const uint8_t *src, int s, int kblocks, int t, double *ref, double *abs) {
  const int w = t >> 7, warp = (t & 127) >> 5, lane = t & 31;
  double sum = 0, sum_abs = 0;
  for (int i = 0; i < probe_bn(s) / 2; ++i) {
    const int row = 16 * warp + lane / 4 + 8 * ((i >> 1) & 1), col = 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
    for (int st = 0; st < PROBE_STAGES; ++st) {
      const uint8_t *a = src + (size_t)st * PROBE_SRC_STAGE_BYTES + w * PROBE_A_WG_BYTES + 128 * row;
      const uint8_t *b = src + (size_t)st * PROBE_SRC_STAGE_BYTES + PROBE_SRC_B + 128 * col;
      for (int k = 0; k < 128; ++k) {
        const double x =
            e4m3_value(a[16 * ((k / 16) ^ (row % 8)) + k % 16]) * e4m3_value(b[16 * ((k / 16) ^ (col % 8)) + k % 16]);
        sum += x;
        sum_abs += fabs(x);
      }
    }
  }
  *ref = sum * (kblocks / 4);
  *abs = sum_abs * (kblocks / 4);
}

/* Load 0: every thread of every CTA against the reference, within tol x (sum of |A B|): 2^-10 for
 * the promoted schedules (fp32 sums of 128-long tensor-core sums), 2^-3 for the fast ones (their
 * accumulator keeps 13 fraction bits of a running sum over all of K). */
static int probe_check_reference(const uint8_t *src, int s, int kblocks, const float *o, int blocks) {
  const double tol = s == S_FAST256 || s == S_FAST128 || s == S_FAST192 ? 1.0 / 8 : 1.0 / 1024;
  for (int t = 0; t < probe_wgs(s) * 128; ++t) {
    double ref, abs;
    probe_reference(src, s, kblocks, t, &ref, &abs);
    for (int blk = 0; blk < blocks; ++blk) {
      const float got = o[(size_t)blk * 384 + t];
      if (!(fabs((double)got - ref) <= tol * abs)) {
        printf("FAIL %s load 0: block %d thread %d: %.9g, reference %.9g (bound %.3g)\n", kNames[s], blk, t, got, ref,
               tol * abs);
        return 1;
      }
    }
  }
  return 0;
}

/* schedules that add the same tensor-core sums in the same order: bitwise equal (threads < n) */
static int probe_twins(const float *a, const float *b, int blocks, int n, const char *what, int load) {
  for (int blk = 0; blk < blocks; ++blk)
    for (int t = 0; t < n; ++t) {
      const float x = a[(size_t)blk * 384 + t], y = b[(size_t)blk * 384 + t];
      if (memcmp(&x, &y, sizeof x) != 0 || x != x) {
        printf("FAIL %s, load %d: block %d thread %d: %.9g against %.9g\n", what, load, blk, t, x, y);
        return 1;
      }
    }
  return 0;
}

int main(int argc, char **argv) {
  int kblocks = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 7;
  if (kblocks < 4 || kblocks % 4 || reps < 1) {
    fprintf(stderr, "usage: weave-probe-promote [kblocks (a multiple of 4; 2048)] [reps (7)]\n");
    return 2;
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9) {
    fprintf(stderr, "probe_promote: needs a Hopper GPU (sm_90), found sm_%d%d\n", prop.major, prop.minor);
    return 2;
  }
  printf(
      "# %s, %d SMs; %d k-blocks of 128 per CTA, %d reps; util = flops per SM clock / 8192 (assumed dense fp8 peak)\n",
      prop.name, sms, kblocks, reps);

  const size_t src_bytes = (size_t)PROBE_SRC_STAGES * PROBE_SRC_STAGE_BYTES;
  uint8_t *h_src = (uint8_t *)malloc(src_bytes), *d_src;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < src_bytes; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h_src[i] = (uint8_t)(x >> 24) & 0xBF; /* exponent < 8: |v| < 2, never NaN (0x7F, 0xFF) */
  }
  CK(cudaMalloc(&d_src, src_bytes));
  CK(cudaMemcpy(d_src, h_src, src_bytes, cudaMemcpyHostToDevice));
  long long *d_cycles;
  float *d_out;
  const size_t out_n = (size_t)sms * 384;
  CK(cudaMalloc(&d_cycles, sizeof(long long) * sms));
  CK(cudaMalloc(&d_out, sizeof(float) * out_n * 2 * S_COUNT));

  probe_cfg_t cfg[2 * S_COUNT];
  probe_cfgs<0>(cfg);
  const int ncfg = 2 * S_COUNT;
  double *ms = (double *)calloc((size_t)ncfg * reps, sizeof(double));
  double *cyc = (double *)calloc((size_t)ncfg * reps, sizeof(double));
  long long *h_cycles = (long long *)malloc(sizeof(long long) * sms);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int r = -1; r < reps; ++r) /* r = -1: warm-up */
    for (int c = 0; c < ncfg; ++c) {
      const int s = cfg[c].s;
      float *o = d_out + (size_t)c * out_n;
      CK(cudaMemset(o, 0xFF, sizeof(float) * out_n)); /* NaN until written */
      CK(cudaEventRecord(e0));
      cfg[c].fn<<<sms, probe_threads(s), probe_smem_bytes(s)>>>(d_src, kblocks, d_cycles, o);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      if (r < 0) continue;
      float t;
      CK(cudaEventElapsedTime(&t, e0, e1));
      CK(cudaMemcpy(h_cycles, d_cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
      double mean = 0;
      for (int b = 0; b < sms; ++b) mean += (double)h_cycles[b] / sms;
      ms[(size_t)c * reps + r] = t;
      cyc[(size_t)c * reps + r] = mean / kblocks;
    }

  printf("%-9s %4s %9s %12s %6s\n", "schedule", "load", "TFLOP/s", "clk/kblock", "util");
  for (int c = 0; c < ncfg; ++c) {
    const int s = cfg[c].s;
    const double flop_kb = 2.0 * 64 * probe_wgs(s) * probe_bn(s) * 128; /* per CTA and k-block */
    const double t = median(ms + (size_t)c * reps, reps), k = median(cyc + (size_t)c * reps, reps);
    printf("%-9s %4d %9.1f %12.1f %6.3f\n", kNames[s], cfg[c].load, flop_kb * kblocks * sms / (t * 1e-3) / 1e12, k,
           flop_kb / k / 8192.0);
  }

  float *h_out = (float *)malloc(sizeof(float) * out_n * ncfg);
  CK(cudaMemcpy(h_out, d_out, sizeof(float) * out_n * ncfg, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int s = 0; s < S_COUNT; ++s)
    bad |= probe_check_reference(h_src, s, kblocks, h_out + (size_t)(2 * s) * out_n, sms);
  for (int load = 0; load < 2; ++load) {
    const float *o[S_COUNT];
    for (int s = 0; s < S_COUNT; ++s) o[s] = h_out + (size_t)(2 * s + load) * out_n;
    bad |= probe_twins(o[S_PROMO], o[S_TURNS], sms, 256, "turns == promo", load);
    bad |= probe_twins(o[S_PROMO], o[S_TURNHALF], sms, 256, "turnhalf == promo", load);
    bad |= probe_twins(o[S_PROMO], o[S_ONE_WG], sms, 128, "one_wg == promo (warpgroup 0)", load);
    bad |= probe_twins(o[S_P128], o[S_THREE_WG], sms, 256, "three_wg == p128 (warpgroups 0, 1)", load);
    bad |= probe_twins(o[S_P192], o[S_P192T], sms, 256, "p192t == p192", load);
  }
  printf("%s\n", bad ? "FAIL" : "checked: load 0 against an fp64 reference, twins bitwise equal under both loads");
  return bad;
}
