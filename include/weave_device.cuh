/*
 * weave_device.cuh: device-side RMA on weave's symmetric heap, for users' own CUDA kernels.
 *
 * Header only. Include it from a .cu file compiled for sm_90a; a C (or host C++) file may include
 * it too and then sees only the part marked "C-compatible" (sem/scope enums, weave_epoch_* helpers).
 *
 * ----------------------------------------------------------------------------------------------
 * Memory-ordering model (read this before writing a protocol)
 * ----------------------------------------------------------------------------------------------
 * Ranks are kernels that run at the same time, on one GPU or on several GPUs of one host, and
 * address each other's heaps through plain pointers (weave_peer_ptr). The PTX memory model is what
 * decides which of their writes a reader sees:
 *
 *  - Data moves with ordinary ("weak") loads and stores: weave_load/store/get/put/copy and the
 *    *_n range copies. They give NO ordering and NO visibility guarantee on their own.
 *  - A producer PUBLISHES data by a release operation at sys scope on a flag, after the data
 *    writes: weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(flag, epoch), or an atomic with
 *    WEAVE_SEM_RELEASE / WEAVE_SEM_ACQ_REL (e.g. weave_atomic_add<WEAVE_SEM_RELEASE,
 *    WEAVE_SCOPE_SYS>). Writes of other threads of the block are covered when they are ordered
 *    before the release by __syncthreads() (release is cumulative).
 *  - A consumer TAKES the data by an acquire operation on that flag that reads the published
 *    value: weave_wait_until (polls with ld.acquire.sys), weave_ld<WEAVE_SEM_ACQUIRE, ...>, or an
 *    atomic with WEAVE_SEM_ACQUIRE / WEAVE_SEM_ACQ_REL. Its later loads (and, after a
 *    __syncthreads(), the later loads of the whole block) see the producer's data.
 *  - Scope: peers on other GPUs need WEAVE_SCOPE_SYS. WEAVE_SCOPE_GPU only orders threads of one GPU
 *    (enough for ranks sharing a GPU, wrong as soon as ranks live on different GPUs: the classic
 *    intermittent hang). WEAVE_SCOPE_CTA orders only threads of one block.
 *  - Plain or volatile stores followed by a barrier are NOT a protocol: volatile is not ordered
 *    with respect to other addresses and a barrier does not make another GPU's L1 coherent.
 *  - Flags are epochs: a producer stores the round number (1, 2, 3, ...) and the consumer waits
 *    with WEAVE_CMP_GE; nothing is ever reset, and the comparison is wrap-safe (weave_epoch_ge).
 *
 * Every atomic here is ONE PTX instruction carrying the requested qualifiers, e.g.
 * weave_atomic_add<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS>(p, 1u) -> atom.acquire.sys.global.add.u32,
 * never a relaxed op bracketed by fences. Pointers given to atomics, weave_ld and weave_st must
 * point into global memory (a heap, or cudaMalloc memory) and be naturally aligned.
 * docs/device_api.md lists every function with the PTX it emits.
 */
#ifndef WEAVE_DEVICE_CUH
#define WEAVE_DEVICE_CUH

#include <stdint.h>

#include "weave_device_types.h"

/* ============================================================================================
 * C-compatible part (host C, host C++ and device code)
 * ========================================================================================== */
/* WEAVE_HOST_DEVICE and the wrap-safe epoch comparisons weave_epoch_ge / _gt / _ge64 / _gt64 come
 * from weave_device_types.h (included above). */

/* Memory-order of an operation (PTX .relaxed / .acquire / .release / .acq_rel). */
typedef enum { WEAVE_SEM_RELAXED = 0, WEAVE_SEM_ACQUIRE = 1, WEAVE_SEM_RELEASE = 2, WEAVE_SEM_ACQ_REL = 3 } weave_sem_t;

/* Set of threads an operation is ordered with (PTX .cta / .gpu / .sys). */
typedef enum { WEAVE_SCOPE_CTA = 0, WEAVE_SCOPE_GPU = 1, WEAVE_SCOPE_SYS = 2 } weave_scope_t;

/* Bound used by waits when a view's timeout_ns is 0 (a view filled by hand): 10 s. */
#define WEAVE_DEVICE_DEFAULT_TIMEOUT_NS 10000000000ull

#if defined(__CUDACC__) && defined(__cplusplus)
/* ============================================================================================
 * CUDA part
 * ========================================================================================== */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error \
    "weave_device.cuh needs sm_90 (atom.add.noftz.bf16x2, ld.acquire.sys): build with -gencode arch=compute_90a,code=sm_90a"
#endif

/* Wait tuning: polls spun without sleeping, then __nanosleep backoff doubling up to the cap; the
 * clock (%globaltimer) and the error record are read once every WEAVE_WAIT_CHECK_EVERY polls. */
#ifndef WEAVE_WAIT_SPIN_POLLS
#define WEAVE_WAIT_SPIN_POLLS 64
#endif
#ifndef WEAVE_WAIT_MAX_SLEEP_NS
#define WEAVE_WAIT_MAX_SLEEP_NS 256
#endif
#ifndef WEAVE_WAIT_CHECK_EVERY
#define WEAVE_WAIT_CHECK_EVERY 8 /* power of two */
#endif

namespace weave_detail {

template <typename T>
struct type_identity {
  typedef T type;
};
template <typename T>
using nodeduce_t = typename type_identity<T>::type; /* keeps a value argument out of deduction */
template <typename T>
struct always_false : std::false_type {};

/* Global-state-space address of a generic pointer (the heaps are cudaMalloc memory). */
__device__ __forceinline__ unsigned long long gaddr(const void *p) {
  return (unsigned long long)__cvta_generic_to_global(p);
}

template <typename A, typename B>
__device__ __forceinline__ A bits(B v) {
  static_assert(sizeof(A) == sizeof(B), "size mismatch");
  A a;
  memcpy(&a, &v, sizeof(A));
  return a;
}

/* One specialisation per (sem, scope) pair, made by one macro line each below; every function is
 * one inline-asm PTX instruction whose qualifiers SQ (".relaxed", ...) and CQ (".cta", ...) are
 * pasted string literals. red: PTX allows .relaxed and .release only; ld: .relaxed / .acquire; st:
 * .relaxed / .release. The primary templates stay undefined, so a forbidden pair fails to compile. */
template <weave_sem_t S, weave_scope_t C>
struct atom;
template <weave_sem_t S, weave_scope_t C>
struct red;
template <weave_sem_t S, weave_scope_t C>
struct ldst;

// clang-format off
#define WEAVE_DETAIL_A2(SQ, CQ, NAME, PTXOP, T, CT)                                                             \
  static __device__ __forceinline__ T NAME(T *p, T v) {                                                         \
    T r;                                                                                                        \
    asm volatile("atom" SQ CQ ".global." PTXOP " %0, [%1], %2;" : "=" CT(r) : "l"(gaddr(p)), CT(v) : "memory"); \
    return r;                                                                                                   \
  }
#define WEAVE_DETAIL_A3(SQ, CQ, NAME, PTXOP, T, CT)                                                             \
  static __device__ __forceinline__ T NAME(T *p, T cmp, T v) {                                                  \
    T r;                                                                                                        \
    asm volatile("atom" SQ CQ ".global." PTXOP " %0, [%1], %2, %3;" : "=" CT(r) : "l"(gaddr(p)), CT(cmp), CT(v) \
                 : "memory");                                                                                   \
    return r;                                                                                                   \
  }
#define WEAVE_DETAIL_ATOM(SEM, SCOPE, SQ, CQ)                              \
  template <> struct atom<SEM, SCOPE> {                                    \
    WEAVE_DETAIL_A2(SQ, CQ, add_u32, "add.u32", uint32_t, "r")             \
    WEAVE_DETAIL_A2(SQ, CQ, add_s32, "add.s32", int32_t, "r")              \
    WEAVE_DETAIL_A2(SQ, CQ, add_u64, "add.u64", uint64_t, "l")             \
    WEAVE_DETAIL_A2(SQ, CQ, add_f32, "add.f32", float, "f")                \
    WEAVE_DETAIL_A2(SQ, CQ, add_f64, "add.f64", double, "d")               \
    WEAVE_DETAIL_A2(SQ, CQ, add_f16x2, "add.noftz.f16x2", uint32_t, "r")   \
    WEAVE_DETAIL_A2(SQ, CQ, add_bf16x2, "add.noftz.bf16x2", uint32_t, "r") \
    WEAVE_DETAIL_A3(SQ, CQ, cas_b32, "cas.b32", uint32_t, "r")             \
    WEAVE_DETAIL_A3(SQ, CQ, cas_b64, "cas.b64", uint64_t, "l")             \
    WEAVE_DETAIL_A2(SQ, CQ, exch_b32, "exch.b32", uint32_t, "r")           \
    WEAVE_DETAIL_A2(SQ, CQ, exch_b64, "exch.b64", uint64_t, "l")           \
    WEAVE_DETAIL_A2(SQ, CQ, min_u32, "min.u32", uint32_t, "r")             \
    WEAVE_DETAIL_A2(SQ, CQ, min_s32, "min.s32", int32_t, "r")              \
    WEAVE_DETAIL_A2(SQ, CQ, min_u64, "min.u64", uint64_t, "l")             \
    WEAVE_DETAIL_A2(SQ, CQ, min_s64, "min.s64", int64_t, "l")              \
    WEAVE_DETAIL_A2(SQ, CQ, max_u32, "max.u32", uint32_t, "r")             \
    WEAVE_DETAIL_A2(SQ, CQ, max_s32, "max.s32", int32_t, "r")              \
    WEAVE_DETAIL_A2(SQ, CQ, max_u64, "max.u64", uint64_t, "l")             \
    WEAVE_DETAIL_A2(SQ, CQ, max_s64, "max.s64", int64_t, "l")              \
    WEAVE_DETAIL_A2(SQ, CQ, and_b32, "and.b32", uint32_t, "r")             \
    WEAVE_DETAIL_A2(SQ, CQ, and_b64, "and.b64", uint64_t, "l")             \
    WEAVE_DETAIL_A2(SQ, CQ, or_b32, "or.b32", uint32_t, "r")               \
    WEAVE_DETAIL_A2(SQ, CQ, or_b64, "or.b64", uint64_t, "l")               \
    WEAVE_DETAIL_A2(SQ, CQ, xor_b32, "xor.b32", uint32_t, "r")             \
    WEAVE_DETAIL_A2(SQ, CQ, xor_b64, "xor.b64", uint64_t, "l")             \
  };
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELAXED, WEAVE_SCOPE_CTA, ".relaxed", ".cta")
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU, ".relaxed", ".gpu")
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS, ".relaxed", ".sys")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_CTA, ".acquire", ".cta")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_GPU, ".acquire", ".gpu")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS, ".acquire", ".sys")
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELEASE, WEAVE_SCOPE_CTA, ".release", ".cta")
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELEASE, WEAVE_SCOPE_GPU, ".release", ".gpu")
WEAVE_DETAIL_ATOM(WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS, ".release", ".sys")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_CTA, ".acq_rel", ".cta")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_GPU, ".acq_rel", ".gpu")
WEAVE_DETAIL_ATOM(WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_SYS, ".acq_rel", ".sys")

#define WEAVE_DETAIL_R(SQ, CQ, NAME, PTXOP, T, CT)                                             \
  static __device__ __forceinline__ void NAME(T *p, T v) {                                     \
    asm volatile("red" SQ CQ ".global." PTXOP " [%0], %1;" ::"l"(gaddr(p)), CT(v) : "memory"); \
  }
#define WEAVE_DETAIL_RED(SEM, SCOPE, SQ, CQ)                              \
  template <> struct red<SEM, SCOPE> {                                    \
    WEAVE_DETAIL_R(SQ, CQ, add_u32, "add.u32", uint32_t, "r")             \
    WEAVE_DETAIL_R(SQ, CQ, add_s32, "add.s32", int32_t, "r")              \
    WEAVE_DETAIL_R(SQ, CQ, add_u64, "add.u64", uint64_t, "l")             \
    WEAVE_DETAIL_R(SQ, CQ, add_f32, "add.f32", float, "f")                \
    WEAVE_DETAIL_R(SQ, CQ, add_f64, "add.f64", double, "d")               \
    WEAVE_DETAIL_R(SQ, CQ, add_f16x2, "add.noftz.f16x2", uint32_t, "r")   \
    WEAVE_DETAIL_R(SQ, CQ, add_bf16x2, "add.noftz.bf16x2", uint32_t, "r") \
  };
#define WEAVE_DETAIL_LD(SQ, CQ, NAME, PTXT, T, CT)                                                \
  static __device__ __forceinline__ T NAME(const T *p) {                                          \
    T r;                                                                                          \
    asm volatile("ld" SQ CQ ".global." PTXT " %0, [%1];" : "=" CT(r) : "l"(gaddr(p)) : "memory"); \
    return r;                                                                                     \
  }
#define WEAVE_DETAIL_ST(SQ, CQ, NAME, PTXT, T, CT)                                           \
  static __device__ __forceinline__ void NAME(T *p, T v) {                                   \
    asm volatile("st" SQ CQ ".global." PTXT " [%0], %1;" ::"l"(gaddr(p)), CT(v) : "memory"); \
  }
#define WEAVE_DETAIL_LOADS(SQ, CQ)                      \
  WEAVE_DETAIL_LD(SQ, CQ, ld_u32, "u32", uint32_t, "r") \
  WEAVE_DETAIL_LD(SQ, CQ, ld_u64, "u64", uint64_t, "l")
#define WEAVE_DETAIL_STORES(SQ, CQ)                     \
  WEAVE_DETAIL_ST(SQ, CQ, st_u32, "u32", uint32_t, "r") \
  WEAVE_DETAIL_ST(SQ, CQ, st_u64, "u64", uint64_t, "l")
WEAVE_DETAIL_RED(WEAVE_SEM_RELAXED, WEAVE_SCOPE_CTA, ".relaxed", ".cta")
template <> struct ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_CTA> { WEAVE_DETAIL_LOADS(".relaxed", ".cta") WEAVE_DETAIL_STORES(".relaxed", ".cta") };
WEAVE_DETAIL_RED(WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU, ".relaxed", ".gpu")
template <> struct ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU> { WEAVE_DETAIL_LOADS(".relaxed", ".gpu") WEAVE_DETAIL_STORES(".relaxed", ".gpu") };
WEAVE_DETAIL_RED(WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS, ".relaxed", ".sys")
template <> struct ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS> { WEAVE_DETAIL_LOADS(".relaxed", ".sys") WEAVE_DETAIL_STORES(".relaxed", ".sys") };
WEAVE_DETAIL_RED(WEAVE_SEM_RELEASE, WEAVE_SCOPE_CTA, ".release", ".cta")
template <> struct ldst<WEAVE_SEM_RELEASE, WEAVE_SCOPE_CTA> { WEAVE_DETAIL_STORES(".release", ".cta") };
WEAVE_DETAIL_RED(WEAVE_SEM_RELEASE, WEAVE_SCOPE_GPU, ".release", ".gpu")
template <> struct ldst<WEAVE_SEM_RELEASE, WEAVE_SCOPE_GPU> { WEAVE_DETAIL_STORES(".release", ".gpu") };
WEAVE_DETAIL_RED(WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS, ".release", ".sys")
template <> struct ldst<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS> { WEAVE_DETAIL_STORES(".release", ".sys") };
template <> struct ldst<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_CTA> { WEAVE_DETAIL_LOADS(".acquire", ".cta") };
template <> struct ldst<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_GPU> { WEAVE_DETAIL_LOADS(".acquire", ".gpu") };
template <> struct ldst<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS> { WEAVE_DETAIL_LOADS(".acquire", ".sys") };
// clang-format on

#undef WEAVE_DETAIL_A2
#undef WEAVE_DETAIL_A3
#undef WEAVE_DETAIL_ATOM
#undef WEAVE_DETAIL_R
#undef WEAVE_DETAIL_RED
#undef WEAVE_DETAIL_LD
#undef WEAVE_DETAIL_ST
#undef WEAVE_DETAIL_LOADS
#undef WEAVE_DETAIL_STORES

/* Type classes the front ends dispatch on. */
template <typename T>
constexpr bool is_i32 = std::is_integral<T>::value && sizeof(T) == 4;
template <typename T>
constexpr bool is_i64 = std::is_integral<T>::value && sizeof(T) == 8;
template <typename T>
constexpr bool is_f16x2 = std::is_same<typename std::remove_cv<T>::type, __half2>::value;
template <typename T>
constexpr bool is_bf16x2 = std::is_same<typename std::remove_cv<T>::type, __nv_bfloat162>::value;

} /* namespace weave_detail */

/* ============================================================================================
 * Pointer translation
 * ========================================================================================== */

/* `p` (an address in this rank's heap) translated to the same object in `peer`'s heap, as seen
 * from this GPU: heap_bases[peer] + (p - heap_base). No memory ordering (pure arithmetic plus one
 * read-only load of the device table). `peer` must be in [0, world). */
template <typename T>
__device__ __forceinline__ T *weave_peer_ptr(const weave_device_team_t *t, T *p, int peer) {
  if (peer == t->rank) return p;
  const char *base = (const char *)__ldg((const unsigned long long *)(t->heap_bases + peer));
  return (T *)(base + ((const char *)p - (const char *)t->heap_base));
}

/* This rank's heap header (error record, barrier epoch and flags). */
__device__ __forceinline__ weave_heap_header_t *weave_heap_header(const weave_device_team_t *t) {
  return (weave_heap_header_t *)t->heap_base;
}

/* ============================================================================================
 * Atomics. Template arguments: <sem, scope>, defaults <WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_SYS>.
 * Pointer forms act on `p` (already translated, or local); team forms translate `p` to `peer` first.
 * Types: 32/64-bit integers of either signedness (u64 and s64 add are the same PTX add.u64),
 * float/double (add, sub only), __half2 / __nv_bfloat162 (add, sub only; .noftz: no flush of
 * subnormals). Each returns the old value and is one `atom.{sem}.{scope}.global.{op}.{type}`.
 * ========================================================================================== */
#define WEAVE_DEFAULT_SEM_SCOPE weave_sem_t S = WEAVE_SEM_ACQ_REL, weave_scope_t C = WEAVE_SCOPE_SYS

/* *p += v, returns the old *p. PTX: add.u32 / add.s32 / add.u64 / add.f32 / add.f64 /
 * add.noftz.f16x2 / add.noftz.bf16x2. */
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_add(T *p, weave_detail::nodeduce_t<T> v) {
  using A = weave_detail::atom<S, C>;
  using namespace weave_detail;
  if constexpr (is_i32<T> && std::is_signed<T>::value)
    return (T)A::add_s32((int32_t *)p, (int32_t)v);
  else if constexpr (is_i32<T>)
    return (T)A::add_u32((uint32_t *)p, (uint32_t)v);
  else if constexpr (is_i64<T>)
    return (T)A::add_u64((uint64_t *)p, (uint64_t)v);
  else if constexpr (std::is_same<T, float>::value)
    return A::add_f32(p, v);
  else if constexpr (std::is_same<T, double>::value)
    return A::add_f64(p, v);
  else if constexpr (is_f16x2<T>)
    return bits<T>(A::add_f16x2((uint32_t *)p, bits<uint32_t>(v)));
  else if constexpr (is_bf16x2<T>)
    return bits<T>(A::add_bf16x2((uint32_t *)p, bits<uint32_t>(v)));
  else
    static_assert(always_false<T>::value, "weave_atomic_add: unsupported type");
}

/* *p -= v, returns the old *p: the add of -v (two's complement for integers). Same PTX as add. */
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_sub(T *p, weave_detail::nodeduce_t<T> v) {
  if constexpr (std::is_integral<T>::value)
    return weave_atomic_add<S, C, T>(p, (T)(0 - (typename std::make_unsigned<T>::type)v));
  else if constexpr (weave_detail::is_f16x2<T>)
    return weave_atomic_add<S, C, T>(p, __hneg2(v));
  else if constexpr (weave_detail::is_bf16x2<T>)
    return weave_atomic_add<S, C, T>(p, __hneg2(v));
  else
    return weave_atomic_add<S, C, T>(p, -v);
}

/* if (*p == cmp) *p = v; returns the old *p (success iff it equals cmp). PTX: cas.b32 / cas.b64. */
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_cas(T *p, weave_detail::nodeduce_t<T> cmp, weave_detail::nodeduce_t<T> v) {
  using A = weave_detail::atom<S, C>;
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "weave_atomic_cas: 4- or 8-byte types");
  if constexpr (sizeof(T) == 4)
    return weave_detail::bits<T>(
        A::cas_b32((uint32_t *)p, weave_detail::bits<uint32_t>(cmp), weave_detail::bits<uint32_t>(v)));
  else
    return weave_detail::bits<T>(
        A::cas_b64((uint64_t *)p, weave_detail::bits<uint64_t>(cmp), weave_detail::bits<uint64_t>(v)));
}

/* *p = v; returns the old *p. PTX: exch.b32 / exch.b64. */
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_xchg(T *p, weave_detail::nodeduce_t<T> v) {
  using A = weave_detail::atom<S, C>;
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "weave_atomic_xchg: 4- or 8-byte types");
  if constexpr (sizeof(T) == 4)
    return weave_detail::bits<T>(A::exch_b32((uint32_t *)p, weave_detail::bits<uint32_t>(v)));
  else
    return weave_detail::bits<T>(A::exch_b64((uint64_t *)p, weave_detail::bits<uint64_t>(v)));
}

/* *p = min(*p, v) / max(*p, v), signed or unsigned after T; returns the old *p.
 * PTX: min|max.u32 / .s32 / .u64 / .s64. */
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_min(T *p, weave_detail::nodeduce_t<T> v) {
  using A = weave_detail::atom<S, C>;
  using namespace weave_detail;
  if constexpr (is_i32<T> && std::is_signed<T>::value)
    return (T)A::min_s32((int32_t *)p, (int32_t)v);
  else if constexpr (is_i32<T>)
    return (T)A::min_u32((uint32_t *)p, (uint32_t)v);
  else if constexpr (is_i64<T> && std::is_signed<T>::value)
    return (T)A::min_s64((int64_t *)p, (int64_t)v);
  else if constexpr (is_i64<T>)
    return (T)A::min_u64((uint64_t *)p, (uint64_t)v);
  else
    static_assert(always_false<T>::value, "weave_atomic_min: 32/64-bit integers only");
}
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_max(T *p, weave_detail::nodeduce_t<T> v) {
  using A = weave_detail::atom<S, C>;
  using namespace weave_detail;
  if constexpr (is_i32<T> && std::is_signed<T>::value)
    return (T)A::max_s32((int32_t *)p, (int32_t)v);
  else if constexpr (is_i32<T>)
    return (T)A::max_u32((uint32_t *)p, (uint32_t)v);
  else if constexpr (is_i64<T> && std::is_signed<T>::value)
    return (T)A::max_s64((int64_t *)p, (int64_t)v);
  else if constexpr (is_i64<T>)
    return (T)A::max_u64((uint64_t *)p, (uint64_t)v);
  else
    static_assert(always_false<T>::value, "weave_atomic_max: 32/64-bit integers only");
}

/* Bitwise *p &= v, |= v, ^= v; returns the old *p. PTX: and|or|xor.b32 / .b64. */
#define WEAVE_DETAIL_BITOP(FN, OP)                                                                                    \
  template <WEAVE_DEFAULT_SEM_SCOPE, typename T>                                                                      \
  __device__ __forceinline__ T FN(T *p, weave_detail::nodeduce_t<T> v) {                                              \
    using A = weave_detail::atom<S, C>;                                                                               \
    static_assert(std::is_integral<T>::value && (sizeof(T) == 4 || sizeof(T) == 8), #FN ": 32/64-bit integers only"); \
    if constexpr (sizeof(T) == 4)                                                                                     \
      return (T)A::OP##_b32((uint32_t *)p, (uint32_t)v);                                                              \
    else                                                                                                              \
      return (T)A::OP##_b64((uint64_t *)p, (uint64_t)v);                                                              \
  }
WEAVE_DETAIL_BITOP(weave_atomic_and, and)
WEAVE_DETAIL_BITOP(weave_atomic_or, or)
WEAVE_DETAIL_BITOP(weave_atomic_xor, xor)
#undef WEAVE_DETAIL_BITOP

/* Team forms: the same operation on `p` translated to `peer` (weave_peer_ptr). */
#define WEAVE_DETAIL_TEAM2(FN)                                                                                   \
  template <WEAVE_DEFAULT_SEM_SCOPE, typename T>                                                                 \
  __device__ __forceinline__ T FN(const weave_device_team_t *t, T *p, weave_detail::nodeduce_t<T> v, int peer) { \
    return FN<S, C, T>(weave_peer_ptr(t, p, peer), v);                                                           \
  }
WEAVE_DETAIL_TEAM2(weave_atomic_add)
WEAVE_DETAIL_TEAM2(weave_atomic_sub)
WEAVE_DETAIL_TEAM2(weave_atomic_xchg)
WEAVE_DETAIL_TEAM2(weave_atomic_min)
WEAVE_DETAIL_TEAM2(weave_atomic_max)
WEAVE_DETAIL_TEAM2(weave_atomic_and)
WEAVE_DETAIL_TEAM2(weave_atomic_or)
WEAVE_DETAIL_TEAM2(weave_atomic_xor)
#undef WEAVE_DETAIL_TEAM2
template <WEAVE_DEFAULT_SEM_SCOPE, typename T>
__device__ __forceinline__ T weave_atomic_cas(const weave_device_team_t *t, T *p, weave_detail::nodeduce_t<T> cmp,
                                              weave_detail::nodeduce_t<T> v, int peer) {
  return weave_atomic_cas<S, C, T>(weave_peer_ptr(t, p, peer), cmp, v);
}

/* ============================================================================================
 * red: *p += v without returning the old value (cheaper: fire and forget). sem must be
 * WEAVE_SEM_RELAXED (default) or WEAVE_SEM_RELEASE (PTX has no acquire red).
 * PTX: red.{relaxed|release}.{cta|gpu|sys}.global.add.{u32|s32|u64|f32|f64} / add.noftz.{f16x2|bf16x2}.
 * ========================================================================================== */
template <weave_sem_t S = WEAVE_SEM_RELAXED, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ void weave_red_add(T *p, weave_detail::nodeduce_t<T> v) {
  static_assert(S == WEAVE_SEM_RELAXED || S == WEAVE_SEM_RELEASE, "weave_red_add: sem is relaxed or release");
  using R = weave_detail::red<S, C>;
  using namespace weave_detail;
  if constexpr (is_i32<T> && std::is_signed<T>::value)
    R::add_s32((int32_t *)p, (int32_t)v);
  else if constexpr (is_i32<T>)
    R::add_u32((uint32_t *)p, (uint32_t)v);
  else if constexpr (is_i64<T>)
    R::add_u64((uint64_t *)p, (uint64_t)v);
  else if constexpr (std::is_same<T, float>::value)
    R::add_f32(p, v);
  else if constexpr (std::is_same<T, double>::value)
    R::add_f64(p, v);
  else if constexpr (is_f16x2<T>)
    R::add_f16x2((uint32_t *)p, bits<uint32_t>(v));
  else if constexpr (is_bf16x2<T>)
    R::add_bf16x2((uint32_t *)p, bits<uint32_t>(v));
  else
    static_assert(always_false<T>::value, "weave_red_add: unsupported type");
}
template <weave_sem_t S = WEAVE_SEM_RELAXED, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ void weave_red_add(const weave_device_team_t *t, T *p, weave_detail::nodeduce_t<T> v,
                                              int peer) {
  weave_red_add<S, C, T>(weave_peer_ptr(t, p, peer), v);
}

/* ============================================================================================
 * Strong scalar loads and stores (32/64-bit integers), for flags.
 * weave_ld<sem, scope>: sem WEAVE_SEM_ACQUIRE (default) or WEAVE_SEM_RELAXED; PTX ld.{sem}.{scope}.global.{u32|u64}.
 * weave_st<sem, scope>: sem WEAVE_SEM_RELEASE (default) or WEAVE_SEM_RELAXED; PTX st.{sem}.{scope}.global.{u32|u64}.
 * An acquire load that reads a value written by a release store (or a release/acq_rel atomic) of
 * the same scope makes everything written before that store visible after the load.
 * ========================================================================================== */
template <weave_sem_t S = WEAVE_SEM_ACQUIRE, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ T weave_ld(const T *p) {
  static_assert(S == WEAVE_SEM_ACQUIRE || S == WEAVE_SEM_RELAXED, "weave_ld: sem is acquire or relaxed");
  static_assert(std::is_integral<T>::value && (sizeof(T) == 4 || sizeof(T) == 8), "weave_ld: 32/64-bit integers");
  using L = weave_detail::ldst<S, C>;
  if constexpr (sizeof(T) == 4)
    return (T)L::ld_u32((const uint32_t *)p);
  else
    return (T)L::ld_u64((const uint64_t *)p);
}
template <weave_sem_t S = WEAVE_SEM_RELEASE, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ void weave_st(T *p, weave_detail::nodeduce_t<T> v) {
  static_assert(S == WEAVE_SEM_RELEASE || S == WEAVE_SEM_RELAXED, "weave_st: sem is release or relaxed");
  static_assert(std::is_integral<T>::value && (sizeof(T) == 4 || sizeof(T) == 8), "weave_st: 32/64-bit integers");
  using L = weave_detail::ldst<S, C>;
  if constexpr (sizeof(T) == 4)
    L::st_u32((uint32_t *)p, (uint32_t)v);
  else
    L::st_u64((uint64_t *)p, (uint64_t)v);
}
template <weave_sem_t S = WEAVE_SEM_ACQUIRE, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ T weave_ld(const weave_device_team_t *t, const T *p, int peer) {
  return weave_ld<S, C, T>(weave_peer_ptr(t, p, peer));
}
template <weave_sem_t S = WEAVE_SEM_RELEASE, weave_scope_t C = WEAVE_SCOPE_SYS, typename T>
__device__ __forceinline__ void weave_st(const weave_device_team_t *t, T *p, weave_detail::nodeduce_t<T> v, int peer) {
  weave_st<S, C, T>(weave_peer_ptr(t, p, peer), v);
}

/* Shorthands for the two operations of every protocol. */
template <typename T>
__device__ __forceinline__ T weave_ld_acquire_sys(const T *p) {
  return weave_ld<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS>(p);
}
template <typename T>
__device__ __forceinline__ void weave_st_release_sys(T *p, weave_detail::nodeduce_t<T> v) {
  weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS, T>(p, v);
}

/* ============================================================================================
 * Data movement: weak (ordinary) loads and stores, no ordering. Publish with a release afterwards,
 * read only after an acquire. T: any trivially copyable type of 1, 2, 4, 8 or 16 bytes (uint4 for
 * 16-byte vectors: one ld/st.v4.u32); pointers naturally aligned.
 * Local = peer == t->rank (the same code; weave_peer_ptr returns p).
 * ========================================================================================== */

/* Returns peer's copy of *p. */
template <typename T>
__device__ __forceinline__ T weave_load(const weave_device_team_t *t, const T *p, int peer) {
  return *weave_peer_ptr(t, p, peer);
}
/* Writes v into peer's copy of *p. */
template <typename T>
__device__ __forceinline__ void weave_store(const weave_device_team_t *t, T *p, weave_detail::nodeduce_t<T> v,
                                            int peer) {
  *weave_peer_ptr(t, p, peer) = v;
}
/* *dst (any local memory) = peer's copy of *src (heap). */
template <typename T>
__device__ __forceinline__ void weave_get(const weave_device_team_t *t, T *dst, const T *src, int peer) {
  *dst = *weave_peer_ptr(t, src, peer);
}
/* peer's copy of *dst (heap) = *src (any local memory). */
template <typename T>
__device__ __forceinline__ void weave_put(const weave_device_team_t *t, T *dst, const T *src, int peer) {
  *weave_peer_ptr(t, dst, peer) = *src;
}
/* to_peer's copy of *dst = from_peer's copy of *src (both heap; third-party copy). */
template <typename T>
__device__ __forceinline__ void weave_copy(const weave_device_team_t *t, T *dst, const T *src, int from_peer,
                                           int to_peer) {
  *weave_peer_ptr(t, dst, to_peer) = *weave_peer_ptr(t, src, from_peer);
}

/* Cooperative byte copy by `nthreads` threads (this one is number `tid`): the widest unit (16, 8, 4,
 * 2 or 1 bytes) that dst and src share their alignment in, scalar head and tail. Any size, any
 * alignment; no ordering. Regions must not overlap. */
namespace weave_detail {
template <typename U>
__device__ __forceinline__ void copy_units(char *d, const char *s, size_t bytes, unsigned tid, unsigned nthreads) {
  size_t head = (sizeof(U) - ((uintptr_t)d & (sizeof(U) - 1))) & (sizeof(U) - 1);
  if (head > bytes) head = bytes;
  size_t units = (bytes - head) / sizeof(U);
  size_t tail = head + units * sizeof(U);
  for (size_t i = tid; i < head; i += nthreads) d[i] = s[i];
  U *du = (U *)(d + head);
  const U *su = (const U *)(s + head);
  for (size_t i = tid; i < units; i += nthreads) du[i] = su[i];
  for (size_t i = tail + tid; i < bytes; i += nthreads) d[i] = s[i];
}
} /* namespace weave_detail */

__device__ __forceinline__ void weave_copy_bytes(void *dst, const void *src, size_t bytes, unsigned tid,
                                                 unsigned nthreads) {
  char *d = (char *)dst;
  const char *s = (const char *)src;
  uintptr_t mis = (uintptr_t)d ^ (uintptr_t)s;
  if ((mis & 15) == 0)
    weave_detail::copy_units<uint4>(d, s, bytes, tid, nthreads);
  else if ((mis & 7) == 0)
    weave_detail::copy_units<uint2>(d, s, bytes, tid, nthreads);
  else if ((mis & 3) == 0)
    weave_detail::copy_units<uint32_t>(d, s, bytes, tid, nthreads);
  else if ((mis & 1) == 0)
    weave_detail::copy_units<uint16_t>(d, s, bytes, tid, nthreads);
  else
    weave_detail::copy_units<uint8_t>(d, s, bytes, tid, nthreads);
}

/* Cooperative n-element forms (call from `nthreads` threads, e.g. tid = threadIdx.x,
 * nthreads = blockDim.x; add a __syncthreads() before publishing). */
/* dst[0..n) (local) = peer's src[0..n) (heap). */
template <typename T>
__device__ __forceinline__ void weave_get_n(const weave_device_team_t *t, T *dst, const T *src, size_t n, int peer,
                                            unsigned tid, unsigned nthreads) {
  weave_copy_bytes(dst, weave_peer_ptr(t, src, peer), n * sizeof(T), tid, nthreads);
}
/* peer's dst[0..n) (heap) = src[0..n) (local). */
template <typename T>
__device__ __forceinline__ void weave_put_n(const weave_device_team_t *t, T *dst, const T *src, size_t n, int peer,
                                            unsigned tid, unsigned nthreads) {
  weave_copy_bytes(weave_peer_ptr(t, dst, peer), src, n * sizeof(T), tid, nthreads);
}
/* to_peer's dst[0..n) = from_peer's src[0..n) (both heap). */
template <typename T>
__device__ __forceinline__ void weave_copy_n(const weave_device_team_t *t, T *dst, const T *src, size_t n,
                                             int from_peer, int to_peer, unsigned tid, unsigned nthreads) {
  weave_copy_bytes(weave_peer_ptr(t, dst, to_peer), weave_peer_ptr(t, src, from_peer), n * sizeof(T), tid, nthreads);
}

/* ============================================================================================
 * Bounded waits
 * ========================================================================================== */

/* Nanoseconds since an arbitrary origin (PTX %globaltimer), the same clock on every SM of a GPU. */
__device__ __forceinline__ uint64_t weave_globaltimer(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Does `observed cmp value` hold? GE/GT/LE/LT are wrap-safe epoch comparisons. */
template <typename U>
__device__ __forceinline__ bool weave_cmp_holds(U observed, int cmp, U value) {
  typedef typename std::make_signed<U>::type SU;
  SU d = (SU)(observed - value);
  switch (cmp) {
    case WEAVE_CMP_EQ: return observed == value;
    case WEAVE_CMP_NE: return observed != value;
    case WEAVE_CMP_GE: return d >= 0;
    case WEAVE_CMP_GT: return d > 0;
    case WEAVE_CMP_LE: return d <= 0;
    case WEAVE_CMP_LT: return d < 0;
    default: return false;
  }
}

namespace weave_detail {
/* First failure wins: CAS code 0 -> TIMEOUT, then the winner fills in the fields. The host reads
 * the record after the kernel ended (weave_team_sync), when all of it is visible. */
__device__ __noinline__ inline void record_timeout(const weave_device_team_t *t, const void *flag, uint64_t expected,
                                                   uint64_t observed, int cmp, int peer, int item) {
  weave_device_error_t *e = &weave_heap_header(t)->error;
  if (atom<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>::cas_b32(&e->code, WEAVE_DEVICE_OK, WEAVE_DEVICE_TIMEOUT) !=
      WEAVE_DEVICE_OK)
    return;
  e->rank = t->rank;
  e->peer = peer;
  e->item = item;
  e->flag_addr = (uint64_t)(uintptr_t)flag;
  e->expected = expected;
  e->observed = observed;
  e->cmp = (uint32_t)cmp;
  __threadfence_system();
}

/* A wait of this rank failed, or the team was aborted (the record's code is set), here or in the
 * team this one was split from. */
__device__ __forceinline__ bool team_stopped(const weave_device_team_t *t) {
  return ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>::ld_u32(&weave_heap_header(t)->error.code) != WEAVE_DEVICE_OK ||
         (t->parent_error && ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>::ld_u32(t->parent_error) != WEAVE_DEVICE_OK);
}

template <typename U>
__device__ __forceinline__ U ld_acquire_sys(const U *p) {
  if constexpr (sizeof(U) == 4)
    return (U)ldst<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS>::ld_u32((const uint32_t *)p);
  else
    return (U)ldst<WEAVE_SEM_ACQUIRE, WEAVE_SCOPE_SYS>::ld_u64((const uint64_t *)p);
}

template <typename U>
__device__ __noinline__ int wait_slow(const weave_device_team_t *t, const U *flag, int cmp, U value, int peer,
                                      int item) {
  const uint64_t bound = t->timeout_ns ? t->timeout_ns : WEAVE_DEVICE_DEFAULT_TIMEOUT_NS;
  const uint64_t start = weave_globaltimer();
  unsigned sleep_ns = 32;
  U v = 0;
  for (unsigned i = 0;; ++i) {
    if ((i & (WEAVE_WAIT_CHECK_EVERY - 1)) == 0) {
      /* Another wait of this rank already failed, or the team was aborted: give up at once, keep
       * the record. */
      if (team_stopped(t)) return (int)WEAVE_DEVICE_TIMEOUT;
      if (weave_globaltimer() - start >= bound) {
        v = ld_acquire_sys(flag);
        if (weave_cmp_holds<U>(v, cmp, value)) return 0;
        record_timeout(t, flag, (uint64_t)value, (uint64_t)v, cmp, peer, item);
        return (int)WEAVE_DEVICE_TIMEOUT;
      }
    }
    if (i >= WEAVE_WAIT_SPIN_POLLS) {
      __nanosleep(sleep_ns);
      if (sleep_ns < WEAVE_WAIT_MAX_SLEEP_NS) sleep_ns <<= 1;
    }
    v = ld_acquire_sys(flag);
    if (weave_cmp_holds<U>(v, cmp, value)) return 0;
  }
}
} /* namespace weave_detail */

/* Waits until `*flag cmp value` holds (WEAVE_CMP_*), polling with ld.acquire.sys.global (no atomic
 * in the loop). On success returns 0 and the acquire orders every later load of this thread after
 * the write that satisfied the wait (use __syncthreads() to extend it to the block).
 * `flag` is an address as seen from this GPU (a local heap address, or weave_peer_ptr of one).
 * `peer` and `item` only label the error record (-1: unknown).
 * Bound: t->timeout_ns (from weave_config_t.timeout_ms / WEAVE_TIMEOUT_MS), measured on
 * %globaltimer read every WEAVE_WAIT_CHECK_EVERY polls. On expiry it records {rank, peer, item,
 * flag address, expected value, last observed value, cmp} into this rank's heap header (first
 * failure wins, by CAS on `code`) and returns WEAVE_DEVICE_TIMEOUT. When the record is already
 * set by another wait of this rank, a wait that is not satisfied at once returns
 * WEAVE_DEVICE_TIMEOUT immediately without touching the record, so a kernel with one lost flag
 * ends within one timeout. weave_team_abort sets the record of every rank (code
 * WEAVE_DEVICE_ABORTED), so that the same rule stops their waits at once. weave_team_sync reports
 * and clears the record (an abort's stays). */
__device__ __forceinline__ int weave_wait_until(const weave_device_team_t *t, const uint32_t *flag, int cmp,
                                                uint32_t value, int peer, int item) {
  uint32_t v = weave_detail::ld_acquire_sys(flag);
  if (weave_cmp_holds<uint32_t>(v, cmp, value)) return 0;
  return weave_detail::wait_slow<uint32_t>(t, flag, cmp, value, peer, item);
}
__device__ __forceinline__ int weave_wait_until(const weave_device_team_t *t, const uint64_t *flag, int cmp,
                                                uint64_t value, int peer, int item) {
  uint64_t v = weave_detail::ld_acquire_sys(flag);
  if (weave_cmp_holds<uint64_t>(v, cmp, value)) return 0;
  return weave_detail::wait_slow<uint64_t>(t, flag, cmp, value, peer, item);
}

/* Non-zero once a wait of this rank has failed or the team was aborted (the error record is set, in
 * this team or the one it was split from): lets a kernel stop early. */
__device__ __forceinline__ int weave_device_failed(const weave_device_team_t *t) {
  return weave_detail::team_stopped(t);
}

/* ============================================================================================
 * Device barrier across ranks
 * ========================================================================================== */

/* Barrier of all ranks of the team, from inside a kernel. Call from ONE thread per rank
 * (typically thread 0 of one block), bracketed by __syncthreads() in the caller:
 *
 *     __syncthreads();                        // this block's writes ordered before thread 0
 *     if (threadIdx.x == 0) rc = weave_barrier_all(&team);
 *     __syncthreads();                        // peers' writes visible to the whole block
 *
 * Ordering: every write that this thread (or this block, through the first __syncthreads) made
 * before the call, to any rank's memory, is visible to every rank's barrier block after its
 * call returns 0. Writes of OTHER blocks of this kernel are not covered: synchronise them with the
 * calling block first. Epoch-based, never reset: this rank's barrier_epoch counts barriers; the
 * call stores epoch+1 into barrier_flags[my rank] of every rank's heap header with one
 * fence.acq_rel.sys followed by st.relaxed.sys stores (a release pattern), then waits (bounded,
 * weave_wait_until GE) until every barrier_flags[p] of its own header reaches epoch+1.
 * Every rank must make the same sequence of barrier calls. Returns 0 or WEAVE_DEVICE_TIMEOUT
 * (after a timeout the ranks' epochs no longer agree; recreate the team or resynchronise). */
__device__ __noinline__ inline int weave_barrier_all(const weave_device_team_t *t) {
  using namespace weave_detail;
  weave_heap_header_t *h = weave_heap_header(t);
  uint32_t epoch = ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>::ld_u32(&h->barrier_epoch) + 1u;
  ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_GPU>::st_u32(&h->barrier_epoch, epoch);
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  for (int p = 0; p < t->world; ++p) {
    weave_heap_header_t *ph = weave_peer_ptr(t, h, p);
    ldst<WEAVE_SEM_RELAXED, WEAVE_SCOPE_SYS>::st_u32(&ph->barrier_flags[t->rank], epoch);
  }
  for (int p = 0; p < t->world; ++p) {
    int rc = weave_wait_until(t, &h->barrier_flags[p], WEAVE_CMP_GE, epoch, p, -1);
    if (rc) return rc;
  }
  return 0;
}

#undef WEAVE_DEFAULT_SEM_SCOPE

#endif /* __CUDACC__ && __cplusplus */
#endif /* WEAVE_DEVICE_CUH */
