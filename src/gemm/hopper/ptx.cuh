/*
 * The Hopper GEMM's inline PTX: one small wrapper per instruction (or per fixed instruction
 * sequence), nothing else. mbarriers, TMA loads / stores and bulk groups, clusters, wgmma (fences,
 * descriptors, the m64n256k16 / m64n128k16 instructions and the fp8 k32 forms), setmaxnreg, named barriers, shared-memory
 * stores and stmatrix, proxy fences. Addresses of shared memory are 32-bit shared-window addresses
 * (weave_hgemm_smem_u32).
 */
#ifndef WEAVE_HGEMM_PTX_CUH
#define WEAVE_HGEMM_PTX_CUH

#include <cuda.h> /* CUtensorMap */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <type_traits>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "the Hopper GEMM needs -gencode arch=compute_90a,code=sm_90a (wgmma, setmaxnreg)"
#endif

/* ---- shared memory, mbarriers ---- */
static __device__ __forceinline__ uint32_t weave_hgemm_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void weave_hgemm_mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void weave_hgemm_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void weave_hgemm_mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* One mbarrier.try_wait: whether the phase of this parity has completed (acquire when it has). The
 * thread may be suspended for a time the hardware chooses before the answer is false. */
static __device__ __forceinline__ bool weave_hgemm_mbar_try(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

static __device__ __forceinline__ void weave_hgemm_mbar_wait(uint32_t bar, uint32_t parity) {
  while (!weave_hgemm_mbar_try(bar, parity)) {
  }
}

/* A consumer thread's warpgroup among the consumers (warpgroup 0 is the producer: 0 for warpgroup 1),
 * broadcast from lane 0 so that ptxas knows it is the same across the warp and builds the A
 * descriptors in uniform registers (no R2UR between the wgmmas). */
static __device__ __forceinline__ int weave_hgemm_consumer_index(int tid) {
  return __shfl_sync(0xffffffffu, tid >> 7, 0) - 1;
}

/* ---- TMA loads ---- */
static __device__ __forceinline__ void weave_hgemm_tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                               int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

static __device__ __forceinline__ void weave_hgemm_tma_prefetch_map(const CUtensorMap *map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)map) : "memory");
}

/* ---- wgmma groups ---- */
static __device__ __forceinline__ void weave_hgemm_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void weave_hgemm_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void weave_hgemm_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* ---- setmaxnreg, named barriers ---- */
template <int REGS>
static __device__ __forceinline__ void weave_hgemm_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
static __device__ __forceinline__ void weave_hgemm_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

static __device__ __forceinline__ void weave_hgemm_named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

static __device__ __forceinline__ void weave_hgemm_named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

/* bar.sync of `threads` threads on barrier `id` that also ORs `pred` across them: a uniform answer
 * without shared memory */
static __device__ __forceinline__ bool weave_hgemm_named_barrier_or(int id, int threads, bool pred) {
  uint32_t r;
  asm volatile("{\n.reg .pred q, p;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, %2, %3, q;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(r)
               : "r"((uint32_t)pred), "r"(id), "r"(threads)
               : "memory");
  return r != 0;
}

/* ---- clusters (2-CTA TMA multicast) ---- */
static __device__ __forceinline__ uint32_t weave_hgemm_cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
static __device__ __forceinline__ void weave_hgemm_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
/* arrive on the mbarrier at the same smem offset in CTA `rank` of the cluster */
static __device__ __forceinline__ void weave_hgemm_mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
/* TMA load written to the same smem offset (and signalling the same mbarrier offset) in every CTA
 * of `mask` */
static __device__ __forceinline__ void weave_hgemm_tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                                  int c0, int c1, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

/* ---- TMA stores, bulk groups, shared-memory stores (epilogue) ---- */
static __device__ __forceinline__ void weave_hgemm_tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"((uint64_t)map),
               "r"(src), "r"(c0), "r"(c1)
               : "memory");
}
static __device__ __forceinline__ void weave_hgemm_bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void weave_hgemm_bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void weave_hgemm_bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
static __device__ __forceinline__ void weave_hgemm_st_shared_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
/* Two adjacent elements cast to 16-bit E, packed (the low half is v0). */
template <typename E>
static __device__ __forceinline__ uint32_t weave_hgemm_pack2(float v0, float v1) {
  if constexpr (std::is_same<E, __half>::value) {
    __half2 h = __floats2half2_rn(v0, v1);
    return *(uint32_t *)&h;
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    return *(uint32_t *)&h;
  }
}
/* Two adjacent fp32 elements of C at a shared address (8 bytes). */
static __device__ __forceinline__ void weave_hgemm_st_shared_f32x2(uint32_t addr, float v0, float v1) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(addr), "f"(v0), "f"(v1) : "memory");
}

/* Four 8x8 16-bit matrices to shared memory; lane t addresses row t % 8 of matrix t / 8. */
static __device__ __forceinline__ void weave_hgemm_stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                               uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

/* Keeps the compiler from moving accumulator reads/writes across wgmma fences and waits. */
template <int N = 128>
static __device__ __forceinline__ void weave_hgemm_fence_regs(float *d) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA) reads. */
static __device__ __forceinline__ void weave_hgemm_fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* Orders completed async-proxy (TMA) global writes before this thread's later generic operations. */
static __device__ __forceinline__ void weave_hgemm_fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}
/* Makes mbarrier initialisations visible to the cluster (and the async proxy). */
static __device__ __forceinline__ void weave_hgemm_fence_mbar_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

static __device__ __forceinline__ unsigned weave_hgemm_atom_add_acq_rel_cta_shared(uint32_t addr, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
  return old;
}

/* ---- wgmma descriptors and instructions ---- */
/* wgmma shared-memory descriptor bits (besides the 14-bit start address >> 4):
 *   bits 16-29 LBO >> 4, bits 32-45 SBO >> 4, bits 62-63 layout (1 = 128-byte swizzle).
 * K-major 128B swizzle: rows of 128 bytes, 8-row core groups 1024 bytes apart (SBO), LBO unused. */
#define WEAVE_HGEMM_DESC_KMAJOR_SW128 ((1ull << 62) | (64ull << 32) | (1ull << 16))

static __device__ __forceinline__ uint64_t weave_hgemm_desc(uint32_t smem_addr, uint64_t base) {
  return base | (uint64_t)((smem_addr & 0x3FFFF) >> 4);
}

/* the 32 accumulator operands d[b] .. d[b + 31] of a wgmma (d: an array name, not an expression), and
 * the 64 of d[b] .. d[b + 63] */
#define WEAVE_HGEMM_ACC32_OUT(d, b)                                                                                 \
  "+f"(d[(b) + 0]), "+f"(d[(b) + 1]), "+f"(d[(b) + 2]), "+f"(d[(b) + 3]), "+f"(d[(b) + 4]), "+f"(d[(b) + 5]),       \
      "+f"(d[(b) + 6]), "+f"(d[(b) + 7]), "+f"(d[(b) + 8]), "+f"(d[(b) + 9]), "+f"(d[(b) + 10]), "+f"(d[(b) + 11]), \
      "+f"(d[(b) + 12]), "+f"(d[(b) + 13]), "+f"(d[(b) + 14]), "+f"(d[(b) + 15]), "+f"(d[(b) + 16]),                \
      "+f"(d[(b) + 17]), "+f"(d[(b) + 18]), "+f"(d[(b) + 19]), "+f"(d[(b) + 20]), "+f"(d[(b) + 21]),                \
      "+f"(d[(b) + 22]), "+f"(d[(b) + 23]), "+f"(d[(b) + 24]), "+f"(d[(b) + 25]), "+f"(d[(b) + 26]),                \
      "+f"(d[(b) + 27]), "+f"(d[(b) + 28]), "+f"(d[(b) + 29]), "+f"(d[(b) + 30]), "+f"(d[(b) + 31])
#define WEAVE_HGEMM_ACC64_OUT(d, b) WEAVE_HGEMM_ACC32_OUT(d, b), WEAVE_HGEMM_ACC32_OUT(d, (b) + 32)

/* The accumulator operands of a wgmma's inline asm, %0 .. %63 (n128), %0 .. %95 (n192) and %0 .. %127
 * (n256), in the order WEAVE_HGEMM_ACC64_OUT binds them. */
#define WEAVE_HGEMM_ACC_OPERANDS_0_63                                               \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WEAVE_HGEMM_ACC_OPERANDS_64_95                                              \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define WEAVE_HGEMM_ACC_OPERANDS_96_127                                                         \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WEAVE_HGEMM_ACC_OPERANDS_0_95 WEAVE_HGEMM_ACC_OPERANDS_0_63 "," WEAVE_HGEMM_ACC_OPERANDS_64_95
#define WEAVE_HGEMM_ACC_OPERANDS_0_127 WEAVE_HGEMM_ACC_OPERANDS_0_95 "," WEAVE_HGEMM_ACC_OPERANDS_96_127

/* wgmma m64n256k16, fp32 accumulators d[0..127] (an array name), TY "bf16" or "f16"; scale_d 0 starts
 * the sum; TNSPB 1 reads B MN-major (ROW layout) */
#define WEAVE_HGEMM_WGMMA_M64N256K16(TY, d, desc_a, desc_b, scale_d, TNSPB)                        \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" WEAVE_HGEMM_ACC_OPERANDS_0_127 \
      "}, %128, %129, p, 1, 1, 0, %131;\n}\n"                                                      \
      : WEAVE_HGEMM_ACC64_OUT(d, 0), WEAVE_HGEMM_ACC64_OUT(d, 64)                                  \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TNSPB))

/* d: a 64-float array (not an expression: the macro indexes it) */
#define WEAVE_HGEMM_WGMMA_M64N128K16(TY, d, desc_a, desc_b, scale_d, TNSPB)                       \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" WEAVE_HGEMM_ACC_OPERANDS_0_63 \
      "}, %64, %65, p, 1, 1, 0, %67;\n}\n"                                                        \
      : WEAVE_HGEMM_ACC64_OUT(d, 0)                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TNSPB))

/* fp8 (e4m3 x e4m3, fp32 accumulators): k = 32 per instruction (32 bytes of a K-major 128-byte
 * row, like k16 of a 16-bit type), both operands K-major (the fp8 forms have no transpose
 * immediates); the trailing 1, 1 are imm-scale-a/b (+1: no negation). The accumulator fragment is
 * that of the 16-bit forms. */
#define WEAVE_HGEMM_WGMMA_M64N256K32_E4M3(d, desc_a, desc_b, scale_d)                          \
  asm volatile(                                                                                \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                            \
      "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {" WEAVE_HGEMM_ACC_OPERANDS_0_127 \
      "}, %128, %129, p, 1, 1;\n}\n"                                                           \
      : WEAVE_HGEMM_ACC64_OUT(d, 0), WEAVE_HGEMM_ACC64_OUT(d, 64)                              \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

/* d: a 96-float array (the narrow 128 x 192 tile of fast fp8: gemm_hopper_cooperative.cuh) */
#define WEAVE_HGEMM_WGMMA_M64N192K32_E4M3(d, desc_a, desc_b, scale_d)                         \
  asm volatile(                                                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                                            \
      "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {" WEAVE_HGEMM_ACC_OPERANDS_0_95 \
      "}, %96, %97, p, 1, 1;\n}\n"                                                            \
      : WEAVE_HGEMM_ACC64_OUT(d, 0), WEAVE_HGEMM_ACC32_OUT(d, 64)                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define WEAVE_HGEMM_WGMMA_M64N128K32_E4M3(d, desc_a, desc_b, scale_d)                         \
  asm volatile(                                                                               \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                            \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" WEAVE_HGEMM_ACC_OPERANDS_0_63 \
      "}, %64, %65, p, 1, 1;\n}\n"                                                            \
      : WEAVE_HGEMM_ACC64_OUT(d, 0)                                                           \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#endif /* WEAVE_HGEMM_PTX_CUH */
