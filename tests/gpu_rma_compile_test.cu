/*
 * Compile-only test of weave_device.cuh: instantiates every atomic x type x sem x scope, every red,
 * ld and st form, the waits and the barrier, so nvcc + ptxas check each generated PTX instruction
 * for sm_90a (300 atom, 42 red, 24 ld/st variants). The kernel is never launched: the test passes
 * when it builds; running it only prints a line (no device needed).
 * Build: nvcc -gencode arch=compute_90a,code=sm_90a -Iinclude.
 */
#include <stdio.h>

#include "weave_device.cuh"

struct Slots {
  uint32_t u32[16];
  int32_t s32[16];
  uint64_t u64[16];
  int64_t s64[16];
  unsigned long long ull[16];
  long long ll[16];
  float f32[4];
  double f64[4];
  __half2 h2[4];
  __nv_bfloat162 b2[4];
};

template <weave_sem_t S, weave_scope_t C>
__device__ void all_atomics(Slots *s, const weave_device_team_t *t, int peer, uint64_t *sink) {
  uint64_t acc = 0;
  acc += weave_atomic_add<S, C>(&s->u32[0], 1u);
  acc += weave_atomic_add<S, C>(&s->s32[0], -1);
  acc += weave_atomic_add<S, C>(&s->u64[0], 1ull);
  acc += weave_atomic_add<S, C>(&s->s64[0], -1ll);
  acc += weave_atomic_add<S, C>(&s->ull[0], 1ull);
  acc += (uint64_t)weave_atomic_add<S, C>(&s->f32[0], 1.0f);
  acc += (uint64_t)weave_atomic_add<S, C>(&s->f64[0], 1.0);
  acc += (uint64_t)__low2float(weave_atomic_add<S, C>(&s->h2[0], __floats2half2_rn(1.f, 2.f)));
  acc += (uint64_t)__low2float(weave_atomic_add<S, C>(&s->b2[0], __floats2bfloat162_rn(1.f, 2.f)));
  acc += weave_atomic_sub<S, C>(&s->u32[1], 1u);
  acc += weave_atomic_sub<S, C>(&s->s64[1], 3);
  acc += (uint64_t)weave_atomic_sub<S, C>(&s->f32[1], 1.0f);
  acc += weave_atomic_cas<S, C>(&s->u32[2], 0u, 1u);
  acc += weave_atomic_cas<S, C>(&s->s32[2], 0, 1);
  acc += weave_atomic_cas<S, C>(&s->u64[2], 0ull, 1ull);
  acc += weave_atomic_cas<S, C>(&s->s64[2], 0, 1);
  acc += weave_atomic_xchg<S, C>(&s->u32[3], 7u);
  acc += weave_atomic_xchg<S, C>(&s->u64[3], 7ull);
  acc += (uint64_t)weave_atomic_xchg<S, C>(&s->f32[3], 7.0f);
  acc += weave_atomic_min<S, C>(&s->u32[4], 3u);
  acc += weave_atomic_min<S, C>(&s->s32[4], -3);
  acc += weave_atomic_min<S, C>(&s->u64[4], 3ull);
  acc += weave_atomic_min<S, C>(&s->s64[4], -3ll);
  acc += weave_atomic_min<S, C>(&s->ll[4], -3ll);
  acc += weave_atomic_max<S, C>(&s->u32[5], 3u);
  acc += weave_atomic_max<S, C>(&s->s32[5], -3);
  acc += weave_atomic_max<S, C>(&s->u64[5], 3ull);
  acc += weave_atomic_max<S, C>(&s->s64[5], -3ll);
  acc += weave_atomic_and<S, C>(&s->u32[6], 3u);
  acc += weave_atomic_and<S, C>(&s->u64[6], 3ull);
  acc += weave_atomic_or<S, C>(&s->u32[7], 3u);
  acc += weave_atomic_or<S, C>(&s->s64[7], 3ll);
  acc += weave_atomic_xor<S, C>(&s->s32[8], 3);
  acc += weave_atomic_xor<S, C>(&s->u64[8], 3ull);
  /* Team (remote) forms. */
  acc += weave_atomic_add<S, C>(t, &s->u32[9], 1u, peer);
  acc += weave_atomic_cas<S, C>(t, &s->u64[9], 1ull, 2ull, peer);
  acc += weave_atomic_xchg<S, C>(t, &s->s32[9], 5, peer);
  acc += weave_atomic_min<S, C>(t, &s->s64[9], 5, peer);
  acc += weave_atomic_max<S, C>(t, &s->u32[10], 5u, peer);
  acc += weave_atomic_and<S, C>(t, &s->u32[11], 5u, peer);
  acc += weave_atomic_or<S, C>(t, &s->u64[11], 5ull, peer);
  acc += weave_atomic_xor<S, C>(t, &s->u32[12], 5u, peer);
  acc += weave_atomic_sub<S, C>(t, &s->u32[12], 5u, peer);
  *sink += acc;
}

template <weave_sem_t S, weave_scope_t C>
__device__ void all_red(Slots *s, const weave_device_team_t *t, int peer) {
  weave_red_add<S, C>(&s->u32[13], 1u);
  weave_red_add<S, C>(&s->s32[13], -1);
  weave_red_add<S, C>(&s->u64[13], 1ull);
  weave_red_add<S, C>(&s->s64[13], -1ll);
  weave_red_add<S, C>(&s->f32[2], 1.0f);
  weave_red_add<S, C>(&s->f64[2], 1.0);
  weave_red_add<S, C>(&s->h2[2], __floats2half2_rn(1.f, 2.f));
  weave_red_add<S, C>(&s->b2[2], __floats2bfloat162_rn(1.f, 2.f));
  weave_red_add<S, C>(t, &s->u32[14], 1u, peer);
}

template <weave_scope_t C>
__device__ void all_ldst(Slots *s, const weave_device_team_t *t, int peer, uint64_t *sink) {
  uint64_t acc = 0;
  acc += weave_ld<WEAVE_SEM_ACQUIRE, C>(&s->u32[15]);
  acc += weave_ld<WEAVE_SEM_ACQUIRE, C>(&s->u64[15]);
  acc += weave_ld<WEAVE_SEM_RELAXED, C>(&s->u32[15]);
  acc += weave_ld<WEAVE_SEM_RELAXED, C>(&s->s64[15]);
  acc += weave_ld<WEAVE_SEM_ACQUIRE, C>(t, &s->u32[15], peer);
  weave_st<WEAVE_SEM_RELEASE, C>(&s->u32[14], 1u);
  weave_st<WEAVE_SEM_RELEASE, C>(&s->u64[14], 1ull);
  weave_st<WEAVE_SEM_RELAXED, C>(&s->s32[14], 1);
  weave_st<WEAVE_SEM_RELAXED, C>(&s->u64[14], 2ull);
  weave_st<WEAVE_SEM_RELEASE, C>(t, &s->u32[14], 3u, peer);
  *sink += acc;
}

#define SCOPES(SEM)                                     \
  all_atomics<SEM, WEAVE_SCOPE_CTA>(s, &t, peer, sink); \
  all_atomics<SEM, WEAVE_SCOPE_GPU>(s, &t, peer, sink); \
  all_atomics<SEM, WEAVE_SCOPE_SYS>(s, &t, peer, sink);

__global__ void instantiate_all(Slots *s, weave_device_team_t t, int peer, uint64_t *sink, uint4 *v) {
  SCOPES(WEAVE_SEM_RELAXED)
  SCOPES(WEAVE_SEM_ACQUIRE)
  SCOPES(WEAVE_SEM_RELEASE)
  SCOPES(WEAVE_SEM_ACQ_REL)
  all_red<WEAVE_SEM_RELAXED, WEAVE_SCOPE_CTA>(s, &t, peer);
  all_red<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>(s, &t, peer);
  all_red<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>(s, &t, peer);
  all_red<WEAVE_SEM_RELEASE, WEAVE_SCOPE_CTA>(s, &t, peer);
  all_red<WEAVE_SEM_RELEASE, WEAVE_SCOPE_GPU>(s, &t, peer);
  all_red<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(s, &t, peer);
  all_ldst<WEAVE_SCOPE_CTA>(s, &t, peer, sink);
  all_ldst<WEAVE_SCOPE_GPU>(s, &t, peer, sink);
  all_ldst<WEAVE_SCOPE_SYS>(s, &t, peer, sink);
  /* default sem/scope */
  *sink += weave_atomic_add(&s->u32[0], 1u);
  weave_red_add(&s->u32[0], 1u);
  *sink += weave_ld_acquire_sys(&s->u32[0]);
  weave_st_release_sys(&s->u32[0], 1u);
  /* data movement */
  uint4 x = weave_load(&t, v, peer);
  weave_store(&t, v + 1, x, peer);
  weave_get(&t, v + 2, v + 3, peer);
  weave_put(&t, v + 4, v + 5, peer);
  weave_copy(&t, v + 6, v + 7, peer, 0);
  weave_get_n(&t, (uint8_t *)v, (const uint8_t *)(v + 8), 7, peer, threadIdx.x, blockDim.x);
  weave_put_n(&t, (uint16_t *)v, (const uint16_t *)(v + 8), 7, peer, threadIdx.x, blockDim.x);
  weave_copy_n(&t, (uint64_t *)v, (const uint64_t *)(v + 8), 7, peer, 0, threadIdx.x, blockDim.x);
  /* waits and barrier */
  *sink += weave_wait_until(&t, &s->u32[1], WEAVE_CMP_GE, 1u, peer, 0);
  *sink += weave_wait_until(&t, &s->u64[1], WEAVE_CMP_EQ, 1ull, peer, 0);
  *sink += weave_barrier_all(&t);
  *sink += weave_device_failed(&t);
  *sink += weave_epoch_ge(1u, 0u) + weave_epoch_gt64(1ull, 0ull);
}

int main(void) {
  printf("gpu_rma_compile_test: every atomic x sem x scope instantiated for sm_90a (compile-only)\n");
  return 0;
}
