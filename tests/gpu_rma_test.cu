/*
 * GPU test suite of weave_device.cuh: 1, 2, 4 and 8 ranks sharing GPU 0, all in this process, one
 * host thread (and one non-blocking stream) per rank; or, under a launcher (scripts/launch.sh -n N
 * --mps, torchrun, mpirun), this process's rank of the launcher's world. Each world runs:
 *
 *   atomics   every atomic x type x sem x scope, each rank operating on every peer (add, sub, cas
 *             chain, xchg, min/max, and/or/xor, red), plus ld/st of every sem x scope;
 *   rma       get/put/copy/load/store of 1, 2, 4, 8 and 16-byte (uint4) elements, 1, 7, 1023, 4097
 *             elements, co-aligned and misaligned, element-wise and cooperative (*_n), with guard bytes;
 *   msgpass   producer block -> consumer block of the next rank, 100,000 rounds (epoch = round, no
 *             reset), publish by st.release.sys / atom.exch.release.sys / red.release.sys /
 *             atom.add.acq_rel.sys, consume by weave_wait_until (ld.acquire.sys), every element checked;
 *   barrier   weave_barrier_all 10,000 times in a row, data written to every peer before each barrier
 *             checked after it;
 *   timeout   a second team with timeout_ms = 200: a wait on a flag nobody sets returns
 *             WEAVE_DEVICE_TIMEOUT within the bound, other waits give up at once, the record names
 *             rank/peer/item/flag, weave_team_sync returns WEAVE_ERROR_TIMEOUT with a message naming
 *             the flag and rank, then the team still works (barriers + message passing).
 *
 * Kernels of different ranks wait on each other, so every rank's grid is small (they must be
 * co-resident) and modules are loaded eagerly (lazy loading can block a launch behind a spinning
 * kernel), with 32 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) so that no rank's launch queues
 * behind another's spinning kernel. Exit: 77 no device, 1 any failure, 0 pass.
 * Options: --world N (one world size), --quick (fewer rounds, for compute-sanitizer), --rounds N,
 * --barriers N, --seed S, --timeout-ms MS (bound of the main team's waits).
 */
#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include <cuda_runtime.h>

#include "check.h"
#include "harness.h"
#include "weave.h"
#include "weave_device.cuh"

/* ============================================================================================
 * Options, counters, helpers
 * ========================================================================================== */
struct Options {
  int worlds[8];
  int nworlds;
  bool quick;
  long mp_rounds;
  long barriers;
  uint32_t seed;
  int timeout_ms;
};
static Options g_opt;

enum { T_ATOM, T_RMA, T_MP, T_BAR, T_TO, T_SETUP, NTESTS };
static const char *kTestName[NTESTS] = {"atomics", "rma", "msgpass", "barrier", "timeout", "setup"};

struct World {
  int world;
  weave_bootstrap_t *bs;
  std::atomic<unsigned long long> checks[NTESTS];
  std::atomic<unsigned long long> fails[NTESTS];
  std::atomic<int> printed;
};

#define MAXW 8
#define MAX_PRINT 24

static void report(World *W, int rank, int test, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void report(World *W, int rank, int test, const char *fmt, ...) {
  W->fails[test]++;
  if (W->printed.fetch_add(1) >= MAX_PRINT) return;
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "FAIL world %d rank %d [%s]: %s\n", W->world, rank, kTestName[test], buf);
}

/* A failed CUDA call is a failure of this rank's test (counted and reported), not the end of the run. */
#define CU(W, rank, test, call) CUDA_CHECK_OR(call, cu_what_, report((W), (rank), (test), "%s", cu_what_))
#define WV(W, rank, test, call)                                                              \
  do {                                                                                       \
    weave_result_t r_ = (call);                                                              \
    if (r_ != WEAVE_SUCCESS)                                                                 \
      report((W), (rank), (test), "%s: %s: %s (line %d)", #call, weave_get_error_string(r_), \
             weave_get_last_error(team_for_errors), __LINE__);                               \
  } while (0)

/* Hashes: data is random (from the seed) and never zero. */
__host__ __device__ inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
__host__ __device__ inline uint32_t h4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return mix32(a ^ mix32(b + 0x9e3779b9U * (c + 1) + mix32(d ^ 0x85ebca6bU)));
}
__host__ __device__ inline uint32_t nz32(uint32_t x) { return x ? x : 0x5a5a5a5aU; }
__host__ __device__ inline uint8_t nz8(uint32_t x) { return (uint8_t)((x & 0xff) ? (x & 0xff) : 0xa7); }

/* Device counters of one kernel. */
struct DevCount {
  unsigned long long checks, fails;
  unsigned int first; /* 0 until the first failure filled info */
  unsigned int info[5];
};

__device__ inline void dc_flush(DevCount *dc, unsigned long long checks, unsigned long long fails) {
  if (checks) atomicAdd(&dc->checks, checks);
  if (fails) atomicAdd(&dc->fails, fails);
}
__device__ inline void dc_fail_info(DevCount *dc, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e) {
  if (atomicCAS(&dc->first, 0u, 1u) == 0u) {
    dc->info[0] = a;
    dc->info[1] = b;
    dc->info[2] = c;
    dc->info[3] = d;
    dc->info[4] = e;
  }
}

struct Rank {
  World *W;
  int rank, world;
  weave_team_t team;
  weave_device_team_t view;
  cudaStream_t stream;
  DevCount *dc;
  int sm_count;
};

/* Launch-side helpers: zero counters before, collect after (stream sync). */
static void dc_zero(Rank *R, int test) {
  CU(R->W, R->rank, test, cudaMemsetAsync(R->dc, 0, sizeof(DevCount), R->stream));
}
static void dc_collect(Rank *R, int test, const char *what) {
  World *W = R->W;
  CU(W, R->rank, test, cudaGetLastError());
  CU(W, R->rank, test, cudaStreamSynchronize(R->stream));
  DevCount h;
  memset(&h, 0, sizeof(h));
  CU(W, R->rank, test, cudaMemcpyAsync(&h, R->dc, sizeof(h), cudaMemcpyDeviceToHost, R->stream));
  CU(W, R->rank, test, cudaStreamSynchronize(R->stream));
  W->checks[test] += h.checks;
  if (h.fails) {
    W->fails[test] += h.fails - 1;
    report(W, R->rank, test, "%s: %llu of %llu device checks failed; first: %u %u %u %u %u", what, h.fails, h.checks,
           h.info[0], h.info[1], h.info[2], h.info[3], h.info[4]);
  }
}

/* ============================================================================================
 * Test A: atomics x dtype x sem x scope
 * ========================================================================================== */
enum {
  OP_ADD_U32,
  OP_ADD_S32,
  OP_ADD_U64,
  OP_ADD_S64,
  OP_ADD_F32,
  OP_ADD_F64,
  OP_SUB_U32,
  OP_CAS_U32,
  OP_CAS_U64,
  OP_XCHG_U32,
  OP_XCHG_U64,
  OP_MIN_U32,
  OP_MAX_U32,
  OP_MIN_S32,
  OP_MAX_S32,
  OP_MIN_U64,
  OP_MAX_U64,
  OP_MIN_S64,
  OP_MAX_S64,
  OP_AND_U32,
  OP_OR_U32,
  OP_XOR_U32,
  OP_AND_U64,
  OP_OR_U64,
  OP_XOR_U64,
  OP_RED_U32,
  OP_RED_S32,
  OP_RED_U64,
  OP_RED_F32,
  OP_ST_U32,
  OP_ST_U64,
  NOPS
};

struct __align__(16) AtomSlot {
  uint32_t add_u32;
  int32_t add_s32;
  uint64_t add_u64;
  int64_t add_s64;
  float add_f32;
  uint32_t add_h2;
  double add_f64;
  uint32_t add_b2;
  uint32_t sub_u32;
  uint32_t cas_u32;
  uint32_t pad0;
  uint64_t cas_u64;
  uint32_t xchg_u32;
  uint32_t pad1;
  uint64_t xchg_u64;
  uint32_t min_u32, max_u32;
  int32_t min_s32, max_s32;
  uint64_t min_u64, max_u64;
  int64_t min_s64, max_s64;
  uint32_t and_u32, or_u32, xor_u32, pad2;
  uint64_t and_u64, or_u64, xor_u64;
  uint32_t red_u32;
  int32_t red_s32;
  uint64_t red_u64;
  float red_f32;
  uint32_t red_h2;
  uint32_t red_b2;
  uint32_t pad3;
  uint32_t st_u32[MAXW];
  uint64_t st_u64[MAXW];
  uint32_t xold_u32[MAXW];
  uint64_t xold_u64[MAXW];
};
#define NCOMBO 12

/* Values: init of target t, contribution of rank r (r = 255 means init). */
__host__ __device__ inline uint32_t av32(uint32_t seed, int combo, int op, int r, int target) {
  return nz32(h4(seed, (uint32_t)(combo * 64 + op), (uint32_t)r, (uint32_t)target));
}
__host__ __device__ inline uint64_t av64(uint32_t seed, int combo, int op, int r, int target) {
  return ((uint64_t)av32(seed, combo, op, r, target) << 32) | av32(seed ^ 0xabcdef01u, combo, op, r, target);
}
#define INIT_R 255
/* Signed contributions: a negative value and a positive one, alternating by rank. */
__host__ __device__ inline int32_t as32(uint32_t seed, int combo, int op, int r, int target) {
  int32_t v = (int32_t)(av32(seed, combo, op, r, target) & 0x3fffffff) + 1;
  return (r & 1) ? v : -v;
}
__host__ __device__ inline int64_t as64(uint32_t seed, int combo, int op, int r, int target) {
  int64_t v = (int64_t)(av64(seed, combo, op, r, target) & 0x3fffffffffffffffull) + 1;
  return (r & 1) ? v : -v;
}
__host__ __device__ inline uint32_t bit32(int combo, int r) { return 1u << ((r * 5 + combo) & 31); }
__host__ __device__ inline uint64_t bit64(int combo, int r) { return 1ull << ((r * 7 + combo * 3) & 63); }

template <weave_sem_t S, weave_scope_t C>
__device__ void atom_combo(const weave_device_team_t *t, AtomSlot *slots, int combo, int peer, uint32_t seed,
                           unsigned long long *fails) {
  const int r = t->rank;
  AtomSlot *s = &slots[combo];
  weave_atomic_add<S, C>(t, &s->add_u32, av32(seed, combo, OP_ADD_U32, r, peer), peer);
  weave_atomic_add<S, C>(t, &s->add_s32, as32(seed, combo, OP_ADD_S32, r, peer), peer);
  weave_atomic_add<S, C>(t, &s->add_u64, av64(seed, combo, OP_ADD_U64, r, peer), peer);
  weave_atomic_add<S, C>(t, &s->add_s64, as64(seed, combo, OP_ADD_S64, r, peer), peer);
  weave_atomic_add<S, C>(t, &s->add_f32, 0.5f * (float)(r + 1), peer);
  weave_atomic_add<S, C>(t, &s->add_f64, 0.25 * (double)(r + 1), peer);
  weave_atomic_add<S, C>(t, (__half2 *)&s->add_h2, __floats2half2_rn((float)(r + 1), (float)(2 * (r + 1))), peer);
  weave_atomic_add<S, C>(t, (__nv_bfloat162 *)&s->add_b2, __floats2bfloat162_rn((float)(r + 1), (float)(2 * (r + 1))),
                         peer);
  weave_atomic_sub<S, C>(t, &s->sub_u32, av32(seed, combo, OP_SUB_U32, r, peer), peer);
  /* cas chain: add v by compare-and-swap retries, starting from a wrong guess. */
  {
    uint32_t *p = weave_peer_ptr(t, &s->cas_u32, peer);
    uint32_t v = av32(seed, combo, OP_CAS_U32, r, peer), cur = 0;
    int tries = 0;
    for (; tries < 100000; ++tries) {
      uint32_t old = weave_atomic_cas<S, C>(p, cur, cur + v);
      if (old == cur) break;
      cur = old;
    }
    if (tries == 100000) ++*fails;
    uint64_t *q = weave_peer_ptr(t, &s->cas_u64, peer);
    uint64_t w = av64(seed, combo, OP_CAS_U64, r, peer), c64 = 1;
    for (tries = 0; tries < 100000; ++tries) {
      uint64_t old = weave_atomic_cas<S, C>(q, c64, c64 + w);
      if (old == c64) break;
      c64 = old;
    }
    if (tries == 100000) ++*fails;
  }
  {
    uint32_t o32 = weave_atomic_xchg<S, C>(t, &s->xchg_u32, av32(seed, combo, OP_XCHG_U32, r, peer), peer);
    uint64_t o64 = weave_atomic_xchg<S, C>(t, &s->xchg_u64, av64(seed, combo, OP_XCHG_U64, r, peer), peer);
    weave_store(t, &s->xold_u32[r], o32, peer);
    weave_store(t, &s->xold_u64[r], o64, peer);
  }
  weave_atomic_min<S, C>(t, &s->min_u32, av32(seed, combo, OP_MIN_U32, r, peer), peer);
  weave_atomic_max<S, C>(t, &s->max_u32, av32(seed, combo, OP_MAX_U32, r, peer), peer);
  weave_atomic_min<S, C>(t, &s->min_s32, as32(seed, combo, OP_MIN_S32, r, peer), peer);
  weave_atomic_max<S, C>(t, &s->max_s32, as32(seed, combo, OP_MAX_S32, r, peer), peer);
  weave_atomic_min<S, C>(t, &s->min_u64, av64(seed, combo, OP_MIN_U64, r, peer), peer);
  weave_atomic_max<S, C>(t, &s->max_u64, av64(seed, combo, OP_MAX_U64, r, peer), peer);
  weave_atomic_min<S, C>(t, &s->min_s64, as64(seed, combo, OP_MIN_S64, r, peer), peer);
  weave_atomic_max<S, C>(t, &s->max_s64, as64(seed, combo, OP_MAX_S64, r, peer), peer);
  weave_atomic_and<S, C>(t, &s->and_u32, ~bit32(combo, r), peer);
  weave_atomic_or<S, C>(t, &s->or_u32, bit32(combo, r), peer);
  weave_atomic_xor<S, C>(t, &s->xor_u32, av32(seed, combo, OP_XOR_U32, r, peer), peer);
  weave_atomic_and<S, C>(t, &s->and_u64, ~bit64(combo, r), peer);
  weave_atomic_or<S, C>(t, &s->or_u64, bit64(combo, r), peer);
  weave_atomic_xor<S, C>(t, &s->xor_u64, av64(seed, combo, OP_XOR_U64, r, peer), peer);
  if constexpr (S == WEAVE_SEM_RELAXED || S == WEAVE_SEM_RELEASE) {
    weave_red_add<S, C>(t, &s->red_u32, av32(seed, combo, OP_RED_U32, r, peer), peer);
    weave_red_add<S, C>(t, &s->red_s32, as32(seed, combo, OP_RED_S32, r, peer), peer);
    weave_red_add<S, C>(t, &s->red_u64, av64(seed, combo, OP_RED_U64, r, peer), peer);
    weave_red_add<S, C>(t, &s->red_f32, 0.5f * (float)(r + 1), peer);
    weave_red_add<S, C>(t, (__half2 *)&s->red_h2, __floats2half2_rn((float)(r + 1), (float)(2 * (r + 1))), peer);
    weave_red_add<S, C>(t, (__nv_bfloat162 *)&s->red_b2, __floats2bfloat162_rn((float)(r + 1), (float)(2 * (r + 1))),
                        peer);
  }
  /* Scalar stores: st.relaxed for relaxed/acquire combos, st.release for release/acq_rel. */
  constexpr weave_sem_t SS = (S == WEAVE_SEM_RELEASE || S == WEAVE_SEM_ACQ_REL) ? WEAVE_SEM_RELEASE : WEAVE_SEM_RELAXED;
  weave_st<SS, C>(t, &s->st_u32[r], av32(seed, combo, OP_ST_U32, r, peer), peer);
  weave_st<SS, C>(t, &s->st_u64[r], av64(seed, combo, OP_ST_U64, r, peer), peer);
}

template <int K>
__device__ void atom_all(const weave_device_team_t *t, AtomSlot *slots, int peer, uint32_t seed,
                         unsigned long long *fails) {
  atom_combo<(weave_sem_t)(K / 3), (weave_scope_t)(K % 3)>(t, slots, K, peer, seed, fails);
  if constexpr (K + 1 < NCOMBO) atom_all<K + 1>(t, slots, peer, seed, fails);
}

/* Thread i works on peer (rank + i) % world: each rank operates on every peer, including itself. */
__global__ void atom_kernel(weave_device_team_t t, AtomSlot *slots, uint32_t seed, DevCount *dc) {
  unsigned long long fails = 0;
  if ((int)threadIdx.x < t.world) {
    int peer = (t.rank + (int)threadIdx.x) % t.world;
    atom_all<0>(&t, slots, peer, seed, &fails);
  }
  dc_flush(dc, 0, fails);
  if (fails) dc_fail_info(dc, 1, (unsigned)t.rank, 0, 0, 0);
}

/* Reads this rank's st slots with weave_ld of the matching sem x scope. */
template <int K>
__device__ void ld_all(const weave_device_team_t *t, AtomSlot *slots, uint32_t seed, unsigned long long *checks,
                       unsigned long long *fails, DevCount *dc) {
  constexpr weave_sem_t S0 = (weave_sem_t)(K / 3);
  constexpr weave_scope_t C = (weave_scope_t)(K % 3);
  constexpr weave_sem_t LS =
      (S0 == WEAVE_SEM_ACQUIRE || S0 == WEAVE_SEM_ACQ_REL) ? WEAVE_SEM_ACQUIRE : WEAVE_SEM_RELAXED;
  for (int p = 0; p < t->world; ++p) {
    uint32_t a = weave_ld<LS, C>(&slots[K].st_u32[p]);
    uint64_t b = weave_ld<LS, C>(t, &slots[K].st_u64[p], t->rank);
    *checks += 2;
    if (a != av32(seed, K, OP_ST_U32, p, t->rank)) {
      ++*fails;
      dc_fail_info(dc, 2, K, p, a, 0);
    }
    if (b != av64(seed, K, OP_ST_U64, p, t->rank)) {
      ++*fails;
      dc_fail_info(dc, 3, K, p, (unsigned)b, 0);
    }
  }
  if constexpr (K + 1 < NCOMBO) ld_all<K + 1>(t, slots, seed, checks, fails, dc);
}
__global__ void ld_kernel(weave_device_team_t t, AtomSlot *slots, uint32_t seed, DevCount *dc) {
  unsigned long long checks = 0, fails = 0;
  ld_all<0>(&t, slots, seed, &checks, &fails, dc);
  dc_flush(dc, checks, fails);
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float f = (e == 0) ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -f : f;
}
static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void fill_atom_init(AtomSlot *h, int target, uint32_t seed) {
  memset(h, 0, sizeof(AtomSlot) * NCOMBO);
  for (int c = 0; c < NCOMBO; ++c) {
    AtomSlot *s = &h[c];
    s->add_u32 = av32(seed, c, OP_ADD_U32, INIT_R, target);
    s->add_s32 = as32(seed, c, OP_ADD_S32, INIT_R, target);
    s->add_u64 = av64(seed, c, OP_ADD_U64, INIT_R, target);
    s->add_s64 = as64(seed, c, OP_ADD_S64, INIT_R, target);
    s->add_f32 = (float)(1 + av32(seed, c, OP_ADD_F32, INIT_R, target) % 64);
    s->add_f64 = (double)(1 + av32(seed, c, OP_ADD_F64, INIT_R, target) % 1024);
    s->add_h2 = (0x3800u << 16) | 0x3C00u; /* (1.0, 0.5) */
    s->add_b2 = (0x3F00u << 16) | 0x3F80u;
    s->sub_u32 = av32(seed, c, OP_SUB_U32, INIT_R, target);
    s->cas_u32 = av32(seed, c, OP_CAS_U32, INIT_R, target);
    s->cas_u64 = av64(seed, c, OP_CAS_U64, INIT_R, target);
    s->xchg_u32 = av32(seed, c, OP_XCHG_U32, INIT_R, target);
    s->xchg_u64 = av64(seed, c, OP_XCHG_U64, INIT_R, target);
    s->min_u32 = av32(seed, c, OP_MIN_U32, INIT_R, target);
    s->max_u32 = av32(seed, c, OP_MAX_U32, INIT_R, target);
    s->min_s32 = as32(seed, c, OP_MIN_S32, INIT_R, target);
    s->max_s32 = as32(seed, c, OP_MAX_S32, INIT_R, target);
    s->min_u64 = av64(seed, c, OP_MIN_U64, INIT_R, target);
    s->max_u64 = av64(seed, c, OP_MAX_U64, INIT_R, target);
    s->min_s64 = as64(seed, c, OP_MIN_S64, INIT_R, target);
    s->max_s64 = as64(seed, c, OP_MAX_S64, INIT_R, target);
    s->and_u32 = 0xffffffffu;
    s->or_u32 = av32(seed, c, OP_OR_U32, INIT_R, target) & 0x0f0f0f0fu;
    s->xor_u32 = av32(seed, c, OP_XOR_U32, INIT_R, target);
    s->and_u64 = ~0ull;
    s->or_u64 = av64(seed, c, OP_OR_U64, INIT_R, target) & 0x0f0f0f0f0f0f0f0full;
    s->xor_u64 = av64(seed, c, OP_XOR_U64, INIT_R, target);
    s->red_u32 = av32(seed, c, OP_RED_U32, INIT_R, target);
    s->red_s32 = as32(seed, c, OP_RED_S32, INIT_R, target);
    s->red_u64 = av64(seed, c, OP_RED_U64, INIT_R, target);
    s->red_f32 = (float)(1 + av32(seed, c, OP_RED_F32, INIT_R, target) % 64);
    s->red_h2 = s->add_h2;
    s->red_b2 = s->add_b2;
  }
}

static const char *kSem[] = {"relaxed", "acquire", "release", "acq_rel"};
static const char *kScope[] = {"cta", "gpu", "sys"};

static void check_atom(Rank *R, const AtomSlot *got, uint32_t seed) {
  World *W = R->W;
  const int T = R->rank, n = R->world;
  unsigned long long checks = 0;
#define EXPECT(cond, ...)                           \
  do {                                              \
    ++checks;                                       \
    if (!(cond)) report(W, T, T_ATOM, __VA_ARGS__); \
  } while (0)
  for (int c = 0; c < NCOMBO; ++c) {
    const AtomSlot *s = &got[c];
    const char *sem = kSem[c / 3], *sc = kScope[c % 3];
    uint32_t e_u32 = av32(seed, c, OP_ADD_U32, INIT_R, T), e_sub = av32(seed, c, OP_SUB_U32, INIT_R, T);
    int32_t e_s32 = as32(seed, c, OP_ADD_S32, INIT_R, T);
    uint64_t e_u64 = av64(seed, c, OP_ADD_U64, INIT_R, T);
    int64_t e_s64 = as64(seed, c, OP_ADD_S64, INIT_R, T);
    float e_f32 = (float)(1 + av32(seed, c, OP_ADD_F32, INIT_R, T) % 64);
    double e_f64 = (double)(1 + av32(seed, c, OP_ADD_F64, INIT_R, T) % 1024);
    float e_lo = 1.0f, e_hi = 0.5f;
    uint32_t e_cas32 = av32(seed, c, OP_CAS_U32, INIT_R, T);
    uint64_t e_cas64 = av64(seed, c, OP_CAS_U64, INIT_R, T);
    uint32_t e_min_u32 = av32(seed, c, OP_MIN_U32, INIT_R, T), e_max_u32 = av32(seed, c, OP_MAX_U32, INIT_R, T);
    int32_t e_min_s32 = as32(seed, c, OP_MIN_S32, INIT_R, T), e_max_s32 = as32(seed, c, OP_MAX_S32, INIT_R, T);
    uint64_t e_min_u64 = av64(seed, c, OP_MIN_U64, INIT_R, T), e_max_u64 = av64(seed, c, OP_MAX_U64, INIT_R, T);
    int64_t e_min_s64 = as64(seed, c, OP_MIN_S64, INIT_R, T), e_max_s64 = as64(seed, c, OP_MAX_S64, INIT_R, T);
    uint32_t e_and32 = 0xffffffffu, e_or32 = av32(seed, c, OP_OR_U32, INIT_R, T) & 0x0f0f0f0fu,
             e_xor32 = av32(seed, c, OP_XOR_U32, INIT_R, T);
    uint64_t e_and64 = ~0ull, e_or64 = av64(seed, c, OP_OR_U64, INIT_R, T) & 0x0f0f0f0f0f0f0f0full,
             e_xor64 = av64(seed, c, OP_XOR_U64, INIT_R, T);
    uint32_t e_red32 = av32(seed, c, OP_RED_U32, INIT_R, T);
    int32_t e_reds32 = as32(seed, c, OP_RED_S32, INIT_R, T);
    uint64_t e_red64 = av64(seed, c, OP_RED_U64, INIT_R, T);
    float e_redf = (float)(1 + av32(seed, c, OP_RED_F32, INIT_R, T) % 64);
    std::vector<uint32_t> x32_in{av32(seed, c, OP_XCHG_U32, INIT_R, T)}, x32_out{s->xchg_u32};
    std::vector<uint64_t> x64_in{av64(seed, c, OP_XCHG_U64, INIT_R, T)}, x64_out{s->xchg_u64};
    for (int r = 0; r < n; ++r) {
      e_u32 += av32(seed, c, OP_ADD_U32, r, T);
      e_s32 = (int32_t)((uint32_t)e_s32 + (uint32_t)as32(seed, c, OP_ADD_S32, r, T));
      e_u64 += av64(seed, c, OP_ADD_U64, r, T);
      e_s64 = (int64_t)((uint64_t)e_s64 + (uint64_t)as64(seed, c, OP_ADD_S64, r, T));
      e_f32 += 0.5f * (float)(r + 1);
      e_f64 += 0.25 * (double)(r + 1);
      e_lo += (float)(r + 1);
      e_hi += (float)(2 * (r + 1));
      e_sub -= av32(seed, c, OP_SUB_U32, r, T);
      e_cas32 += av32(seed, c, OP_CAS_U32, r, T);
      e_cas64 += av64(seed, c, OP_CAS_U64, r, T);
      e_min_u32 = std::min(e_min_u32, av32(seed, c, OP_MIN_U32, r, T));
      e_max_u32 = std::max(e_max_u32, av32(seed, c, OP_MAX_U32, r, T));
      e_min_s32 = std::min(e_min_s32, as32(seed, c, OP_MIN_S32, r, T));
      e_max_s32 = std::max(e_max_s32, as32(seed, c, OP_MAX_S32, r, T));
      e_min_u64 = std::min(e_min_u64, av64(seed, c, OP_MIN_U64, r, T));
      e_max_u64 = std::max(e_max_u64, av64(seed, c, OP_MAX_U64, r, T));
      e_min_s64 = std::min(e_min_s64, as64(seed, c, OP_MIN_S64, r, T));
      e_max_s64 = std::max(e_max_s64, as64(seed, c, OP_MAX_S64, r, T));
      e_and32 &= ~bit32(c, r);
      e_or32 |= bit32(c, r);
      e_xor32 ^= av32(seed, c, OP_XOR_U32, r, T);
      e_and64 &= ~bit64(c, r);
      e_or64 |= bit64(c, r);
      e_xor64 ^= av64(seed, c, OP_XOR_U64, r, T);
      e_red32 += av32(seed, c, OP_RED_U32, r, T);
      e_reds32 = (int32_t)((uint32_t)e_reds32 + (uint32_t)as32(seed, c, OP_RED_S32, r, T));
      e_red64 += av64(seed, c, OP_RED_U64, r, T);
      e_redf += 0.5f * (float)(r + 1);
      x32_in.push_back(av32(seed, c, OP_XCHG_U32, r, T));
      x64_in.push_back(av64(seed, c, OP_XCHG_U64, r, T));
      x32_out.push_back(s->xold_u32[r]);
      x64_out.push_back(s->xold_u64[r]);
    }
    EXPECT(s->add_u32 == e_u32, "add.u32 %s.%s: %u != %u", sem, sc, s->add_u32, e_u32);
    EXPECT(s->add_s32 == e_s32, "add.s32 %s.%s: %d != %d", sem, sc, s->add_s32, e_s32);
    EXPECT(s->add_u64 == e_u64, "add.u64 %s.%s", sem, sc);
    EXPECT(s->add_s64 == e_s64, "add.s64 %s.%s", sem, sc);
    EXPECT(s->add_f32 == e_f32, "add.f32 %s.%s: %g != %g", sem, sc, s->add_f32, e_f32);
    EXPECT(s->add_f64 == e_f64, "add.f64 %s.%s: %g != %g", sem, sc, s->add_f64, e_f64);
    EXPECT(half_to_float(s->add_h2 & 0xffff) == e_lo && half_to_float(s->add_h2 >> 16) == e_hi,
           "add.f16x2 %s.%s: (%g, %g) != (%g, %g)", sem, sc, half_to_float(s->add_h2 & 0xffff),
           half_to_float(s->add_h2 >> 16), e_lo, e_hi);
    EXPECT(bf16_to_float(s->add_b2 & 0xffff) == e_lo && bf16_to_float(s->add_b2 >> 16) == e_hi,
           "add.bf16x2 %s.%s: (%g, %g) != (%g, %g)", sem, sc, bf16_to_float(s->add_b2 & 0xffff),
           bf16_to_float(s->add_b2 >> 16), e_lo, e_hi);
    EXPECT(s->sub_u32 == e_sub, "sub.u32 %s.%s", sem, sc);
    EXPECT(s->cas_u32 == e_cas32, "cas.b32 chain %s.%s: %u != %u", sem, sc, s->cas_u32, e_cas32);
    EXPECT(s->cas_u64 == e_cas64, "cas.b64 chain %s.%s", sem, sc);
    std::sort(x32_in.begin(), x32_in.end());
    std::sort(x32_out.begin(), x32_out.end());
    std::sort(x64_in.begin(), x64_in.end());
    std::sort(x64_out.begin(), x64_out.end());
    EXPECT(x32_in == x32_out, "exch.b32 %s.%s: old values + final != init + contributions", sem, sc);
    EXPECT(x64_in == x64_out, "exch.b64 %s.%s: old values + final != init + contributions", sem, sc);
    EXPECT(s->min_u32 == e_min_u32, "min.u32 %s.%s", sem, sc);
    EXPECT(s->max_u32 == e_max_u32, "max.u32 %s.%s", sem, sc);
    EXPECT(s->min_s32 == e_min_s32, "min.s32 %s.%s: %d != %d", sem, sc, s->min_s32, e_min_s32);
    EXPECT(s->max_s32 == e_max_s32, "max.s32 %s.%s: %d != %d", sem, sc, s->max_s32, e_max_s32);
    EXPECT(s->min_u64 == e_min_u64, "min.u64 %s.%s", sem, sc);
    EXPECT(s->max_u64 == e_max_u64, "max.u64 %s.%s", sem, sc);
    EXPECT(s->min_s64 == e_min_s64, "min.s64 %s.%s", sem, sc);
    EXPECT(s->max_s64 == e_max_s64, "max.s64 %s.%s", sem, sc);
    EXPECT(s->and_u32 == e_and32, "and.b32 %s.%s: %08x != %08x", sem, sc, s->and_u32, e_and32);
    EXPECT(s->or_u32 == e_or32, "or.b32 %s.%s: %08x != %08x", sem, sc, s->or_u32, e_or32);
    EXPECT(s->xor_u32 == e_xor32, "xor.b32 %s.%s", sem, sc);
    EXPECT(s->and_u64 == e_and64, "and.b64 %s.%s", sem, sc);
    EXPECT(s->or_u64 == e_or64, "or.b64 %s.%s", sem, sc);
    EXPECT(s->xor_u64 == e_xor64, "xor.b64 %s.%s", sem, sc);
    if (c / 3 == WEAVE_SEM_RELAXED || c / 3 == WEAVE_SEM_RELEASE) {
      EXPECT(s->red_u32 == e_red32, "red.add.u32 %s.%s", sem, sc);
      EXPECT(s->red_s32 == e_reds32, "red.add.s32 %s.%s", sem, sc);
      EXPECT(s->red_u64 == e_red64, "red.add.u64 %s.%s", sem, sc);
      EXPECT(s->red_f32 == e_redf, "red.add.f32 %s.%s: %g != %g", sem, sc, s->red_f32, e_redf);
      EXPECT(half_to_float(s->red_h2 & 0xffff) == e_lo && half_to_float(s->red_h2 >> 16) == e_hi, "red.add.f16x2 %s.%s",
             sem, sc);
      EXPECT(bf16_to_float(s->red_b2 & 0xffff) == e_lo && bf16_to_float(s->red_b2 >> 16) == e_hi,
             "red.add.bf16x2 %s.%s", sem, sc);
    }
  }
#undef EXPECT
  W->checks[T_ATOM] += checks;
}

static void test_atomics(Rank *R, AtomSlot *slots) {
  World *W = R->W;
  weave_team_t team_for_errors = R->team;
  std::vector<AtomSlot> h(NCOMBO);
  fill_atom_init(h.data(), R->rank, g_opt.seed);
  CU(W, R->rank, T_ATOM,
     cudaMemcpyAsync(slots, h.data(), sizeof(AtomSlot) * NCOMBO, cudaMemcpyHostToDevice, R->stream));
  CU(W, R->rank, T_ATOM, cudaStreamSynchronize(R->stream));
  WV(W, R->rank, T_ATOM, weave_barrier(R->team));
  dc_zero(R, T_ATOM);
  atom_kernel<<<1, 32, 0, R->stream>>>(R->view, slots, g_opt.seed, R->dc);
  dc_collect(R, T_ATOM, "atom_kernel");
  WV(W, R->rank, T_ATOM, weave_barrier(R->team)); /* every rank's atomics on my slots are done */
  CU(W, R->rank, T_ATOM,
     cudaMemcpyAsync(h.data(), slots, sizeof(AtomSlot) * NCOMBO, cudaMemcpyDeviceToHost, R->stream));
  CU(W, R->rank, T_ATOM, cudaStreamSynchronize(R->stream));
  check_atom(R, h.data(), g_opt.seed);
  dc_zero(R, T_ATOM);
  ld_kernel<<<1, 1, 0, R->stream>>>(R->view, slots, g_opt.seed, R->dc);
  dc_collect(R, T_ATOM, "ld_kernel");
  WV(W, R->rank, T_ATOM, weave_barrier(R->team));
}

/* ============================================================================================
 * Test B: get / put / copy / load / store
 * ========================================================================================== */
#define RMA_MAXN 4097
#define RMA_REG (((16 * (RMA_MAXN + 8)) + 255) / 256 * 256) /* bytes of one destination region */
#define RMA_SRC RMA_REG
#define RMA_NCASES (5 * 4 * 2 * 2) /* es x n x alignment variant x method */
enum { K_GET, K_PUT, K_COPY, NKINDS };

struct RmaCase {
  int es, n, soff, doff, method; /* offsets in elements; method 0: *_n range, 1: element-wise */
};
__host__ __device__ inline RmaCase rma_case(int c) {
  RmaCase k;
  const int es[5] = {1, 2, 4, 8, 16}, ns[4] = {1, 7, 1023, 4097};
  k.es = es[c % 5];
  k.n = ns[(c / 5) % 4];
  int variant = (c / 20) % 2;
  k.method = (c / 40) % 2;
  k.soff = variant ? 1 : 2;
  k.doff = variant ? 3 : 2;
  return k;
}

/* Source byte i of rank `owner`'s source region; poison = source ^ 0x5a (never equal). */
__host__ __device__ inline uint8_t sbyte(uint32_t seed, int owner, long long i) {
  return nz8(h4(seed, 0x5151u, (uint32_t)owner, (uint32_t)i));
}

/* Expected owner of the data in `kind`'s regions of rank q. get: q fetched from q+1; put: q-1 put
 * its own source; copy: q-2 copied q-1's source to q. */
__host__ __device__ inline int rma_owner(int kind, int q, int world) {
  return kind == K_GET ? (q + 1) % world : (q - 1 + world) % world;
}

__global__ void rma_init_kernel(weave_device_team_t t, uint8_t *src, uint8_t *regions, uint32_t seed) {
  size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x, nt = (size_t)gridDim.x * blockDim.x;
  for (size_t i = tid; i < RMA_SRC; i += nt) src[i] = sbyte(seed, t.rank, (long long)i);
  for (size_t i = tid; i < (size_t)NKINDS * RMA_NCASES * RMA_REG; i += nt) {
    int region = (int)(i / RMA_REG), kind = region / RMA_NCASES, c = region % RMA_NCASES;
    long long j = (long long)(i % RMA_REG);
    RmaCase k = rma_case(c);
    int owner = rma_owner(kind, t.rank, t.world);
    regions[i] = sbyte(seed, owner, j - (long long)k.doff * k.es + (long long)k.soff * k.es) ^ 0x5a;
  }
}

template <typename T>
__device__ void rma_run_case(const weave_device_team_t *t, const RmaCase &k, int c, uint8_t *src, uint8_t *regions) {
  const int w = t->world, r = t->rank;
  const unsigned tid = threadIdx.x, nt = blockDim.x;
  const T *s = (const T *)src + k.soff;
  T *dget = (T *)(regions + ((size_t)K_GET * RMA_NCASES + c) * RMA_REG) + k.doff;
  T *dput = (T *)(regions + ((size_t)K_PUT * RMA_NCASES + c) * RMA_REG) + k.doff;
  T *dcopy = (T *)(regions + ((size_t)K_COPY * RMA_NCASES + c) * RMA_REG) + k.doff;
  const int from = (r + 1) % w, to = (r + 1) % w, cto = (r + 2) % w;
  if (k.method == 0) {
    weave_get_n(t, dget, s, (size_t)k.n, from, tid, nt);
    weave_put_n(t, dput, s, (size_t)k.n, to, tid, nt);
    weave_copy_n(t, dcopy, s, (size_t)k.n, from, cto, tid, nt);
  } else {
    for (int i = (int)tid; i < k.n; i += (int)nt) {
      if (i & 1) {
        dget[i] = weave_load(t, &s[i], from);
        weave_store(t, &dput[i], s[i], to);
      } else {
        weave_get(t, &dget[i], &s[i], from);
        weave_put(t, &dput[i], &s[i], to);
      }
      weave_copy(t, &dcopy[i], &s[i], from, cto);
    }
  }
}

__global__ void rma_kernel(weave_device_team_t t, uint8_t *src, uint8_t *regions) {
  for (int c = blockIdx.x; c < RMA_NCASES; c += gridDim.x) {
    RmaCase k = rma_case(c);
    switch (k.es) {
      case 1: rma_run_case<uint8_t>(&t, k, c, src, regions); break;
      case 2: rma_run_case<uint16_t>(&t, k, c, src, regions); break;
      case 4: rma_run_case<uint32_t>(&t, k, c, src, regions); break;
      case 8: rma_run_case<uint64_t>(&t, k, c, src, regions); break;
      default: rma_run_case<uint4>(&t, k, c, src, regions); break;
    }
  }
}

/* One block per (kind, case): data bytes equal the owner's source, every other byte is intact poison.
 * Counts one check per element and one per guard region. */
__global__ void rma_check_kernel(weave_device_team_t t, const uint8_t *regions, uint32_t seed, DevCount *dc) {
  __shared__ unsigned long long s_bad;
  for (int region = blockIdx.x; region < NKINDS * RMA_NCASES; region += gridDim.x) {
    int kind = region / RMA_NCASES, c = region % RMA_NCASES;
    RmaCase k = rma_case(c);
    int owner = rma_owner(kind, t.rank, t.world);
    if (threadIdx.x == 0) s_bad = 0;
    __syncthreads();
    const uint8_t *d = regions + (size_t)region * RMA_REG;
    long long lo = (long long)k.doff * k.es, hi = lo + (long long)k.n * k.es, shift = (long long)k.soff * k.es - lo;
    unsigned long long bad = 0;
    for (long long j = threadIdx.x; j < RMA_REG; j += blockDim.x) {
      uint8_t want = sbyte(seed, owner, j + shift);
      if (j < lo || j >= hi) want ^= 0x5a;
      if (d[j] != want) {
        if (!bad) dc_fail_info(dc, 10 + kind, c, (unsigned)j, d[j], want);
        ++bad;
      }
    }
    if (bad) atomicAdd(&s_bad, bad);
    __syncthreads();
    if (threadIdx.x == 0) dc_flush(dc, (unsigned long long)k.n + 2, s_bad ? 1 : 0);
    __syncthreads();
  }
}

static void test_rma(Rank *R, uint8_t *src, uint8_t *regions) {
  World *W = R->W;
  weave_team_t team_for_errors = R->team;
  int blocks = std::max(1, std::min(16, R->sm_count / R->world));
  rma_init_kernel<<<blocks, 256, 0, R->stream>>>(R->view, src, regions, g_opt.seed);
  CU(W, R->rank, T_RMA, cudaGetLastError());
  CU(W, R->rank, T_RMA, cudaStreamSynchronize(R->stream));
  WV(W, R->rank, T_RMA, weave_barrier(R->team));
  rma_kernel<<<blocks, 256, 0, R->stream>>>(R->view, src, regions);
  CU(W, R->rank, T_RMA, cudaGetLastError());
  CU(W, R->rank, T_RMA, cudaStreamSynchronize(R->stream));
  WV(W, R->rank, T_RMA, weave_barrier(R->team));
  dc_zero(R, T_RMA);
  rma_check_kernel<<<blocks, 256, 0, R->stream>>>(R->view, regions, g_opt.seed, R->dc);
  dc_collect(R, T_RMA, "rma_check_kernel (fail info: 10+kind, case, byte, got, want)");
  WV(W, R->rank, T_RMA, weave_barrier(R->team));
}

/* ============================================================================================
 * Test C: message passing, producer block -> consumer block of the next rank
 * ========================================================================================== */
#define MP_WORDS 1024
struct __align__(128) MpArea {
  uint32_t data[MP_WORDS]; /* written by the previous rank's producer */
  uint32_t flag;           /* in the consumer's heap: last round published (producer -> consumer) */
  uint32_t pad0[31];
  uint32_t ack; /* in the producer's heap: last round consumed (consumer -> producer) */
  uint32_t pad1[31];
};

__host__ __device__ inline uint32_t mpval(uint32_t seed, long k, int i, int src) {
  return nz32(h4(seed ^ 0x77u, (uint32_t)k, (uint32_t)i, (uint32_t)src));
}

/* Block 0: producer to rank+1. Block 1: consumer from rank-1. Flags are epochs (round numbers). */
__global__ void mp_kernel(weave_device_team_t t, MpArea *a, long rounds, uint32_t epoch0, uint32_t seed, DevCount *dc) {
  __shared__ int s_rc;
  const int next = (t.rank + 1) % t.world, prev = (t.rank - 1 + t.world) % t.world;
  unsigned long long checks = 0, fails = 0;
  for (long k = 1; k <= rounds; ++k) {
    const uint32_t e = epoch0 + (uint32_t)k;
    if (blockIdx.x == 0) {
      if (threadIdx.x == 0) s_rc = weave_wait_until(&t, &a->ack, WEAVE_CMP_GE, e - 1, next, (int)k);
      __syncthreads();
      if (s_rc) {
        if (threadIdx.x == 0) {
          ++fails;
          dc_fail_info(dc, 20, (unsigned)k, 0, 0, 0);
        }
        break;
      }
      if (k & 1) { /* 16-byte vector stores */
        for (int i = threadIdx.x; i < MP_WORDS / 4; i += blockDim.x) {
          uint4 v = make_uint4(mpval(seed, k, 4 * i, t.rank), mpval(seed, k, 4 * i + 1, t.rank),
                               mpval(seed, k, 4 * i + 2, t.rank), mpval(seed, k, 4 * i + 3, t.rank));
          weave_store(&t, (uint4 *)a->data + i, v, next);
        }
      } else {
        for (int i = threadIdx.x; i < MP_WORDS; i += blockDim.x)
          weave_store(&t, &a->data[i], mpval(seed, k, i, t.rank), next);
      }
      __syncthreads(); /* the block's data writes are ordered before thread 0's release */
      if (threadIdx.x == 0) {
        switch (k & 3) {
          case 0: weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(&t, &a->flag, e, next); break;
          case 1: weave_atomic_xchg<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(&t, &a->flag, e, next); break;
          case 2: weave_red_add<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(&t, &a->flag, 1u, next); break;
          default: weave_atomic_add<WEAVE_SEM_ACQ_REL, WEAVE_SCOPE_SYS>(&t, &a->flag, 1u, next); break;
        }
      }
    } else {
      if (threadIdx.x == 0) s_rc = weave_wait_until(&t, &a->flag, WEAVE_CMP_GE, e, prev, (int)k);
      __syncthreads(); /* thread 0's acquire is ordered before the block's reads */
      if (s_rc) {
        if (threadIdx.x == 0) {
          ++fails;
          dc_fail_info(dc, 21, (unsigned)k, 0, 0, 0);
        }
        break;
      }
      for (int i = threadIdx.x; i < MP_WORDS; i += blockDim.x) {
        uint32_t got = a->data[i];
        ++checks;
        if (got != mpval(seed, k, i, prev)) {
          if (!fails) dc_fail_info(dc, 22, (unsigned)k, (unsigned)i, got, mpval(seed, k, i, prev));
          ++fails;
        }
      }
      __syncthreads(); /* every read of round k done before the ack */
      if (threadIdx.x == 0) weave_st<WEAVE_SEM_RELEASE, WEAVE_SCOPE_SYS>(&t, &a->ack, e, prev);
    }
  }
  dc_flush(dc, checks, fails);
}

/* ============================================================================================
 * Test D: device barrier, many times in a row
 * ========================================================================================== */
#define BAR_WORDS 64
struct BarArea {
  uint32_t slot[2][MAXW][BAR_WORDS]; /* [parity][writer][word] */
};
__host__ __device__ inline uint32_t barval(uint32_t seed, long i, int writer, int j) {
  return nz32(h4(seed ^ 0x3131u, (uint32_t)i, (uint32_t)writer, (uint32_t)j));
}

__global__ void bar_kernel(weave_device_team_t t, BarArea *a, long iters, uint32_t seed, DevCount *dc) {
  __shared__ int s_rc;
  unsigned long long checks = 0, fails = 0;
  for (long i = 1; i <= iters; ++i) {
    const int par = (int)(i & 1);
    for (int p = 0; p < t.world; ++p)
      for (int j = threadIdx.x; j < BAR_WORDS; j += blockDim.x)
        weave_store(&t, &a->slot[par][t.rank][j], barval(seed, i, t.rank, j), p);
    __syncthreads();
    if (threadIdx.x == 0) s_rc = weave_barrier_all(&t);
    __syncthreads();
    if (s_rc) {
      if (threadIdx.x == 0) {
        ++fails;
        dc_fail_info(dc, 30, (unsigned)i, 0, 0, 0);
      }
      break;
    }
    for (int p = 0; p < t.world; ++p)
      for (int j = threadIdx.x; j < BAR_WORDS; j += blockDim.x) {
        uint32_t got = a->slot[par][p][j];
        ++checks;
        if (got != barval(seed, i, p, j)) {
          if (!fails) dc_fail_info(dc, 31, (unsigned)i, (unsigned)p, (unsigned)j, got);
          ++fails;
        }
      }
    /* No second barrier: the other parity is written next; this parity again only after every rank
     * passed the next barrier, i.e. after these reads. */
  }
  if (threadIdx.x == 0) ++checks; /* the barriers themselves */
  dc_flush(dc, checks, fails);
}

static void run_mp(Rank *R, MpArea *a, long rounds, uint32_t epoch0, int test, const char *what) {
  dc_zero(R, test);
  mp_kernel<<<2, 256, 0, R->stream>>>(R->view, a, rounds, epoch0, g_opt.seed, R->dc);
  dc_collect(R, test, what);
}
static void run_bar(Rank *R, BarArea *a, long iters, int test, const char *what) {
  dc_zero(R, test);
  bar_kernel<<<1, 128, 0, R->stream>>>(R->view, a, iters, g_opt.seed, R->dc);
  dc_collect(R, test, what);
}

/* ============================================================================================
 * Test E: timeouts (second team, timeout_ms = 200)
 * ========================================================================================== */
#define TO_MS 200
#define TO_FLAGS 64
struct TimeoutOut {
  int rc[4][16];
  unsigned long long elapsed_ns[4];
};

/* Block 0 waits on never[0] (item 4242). Blocks 1..3 start 20 ms later and wait on ten flags each
 * (items 1000*b + j): each of them must give up at once once block 0 recorded its failure. */
__global__ void timeout_kernel(weave_device_team_t t, uint32_t *never, TimeoutOut *out) {
  if (threadIdx.x != 0) return;
  const int peer = (t.rank + 1) % t.world;
  uint64_t t0 = weave_globaltimer();
  if (blockIdx.x == 0) {
    out->rc[0][0] = weave_wait_until(&t, &never[0], WEAVE_CMP_GE, 1u, peer, 4242);
  } else {
    while (weave_globaltimer() - t0 < 20000000ull) __nanosleep(1000);
    for (int j = 0; j < 10; ++j)
      out->rc[blockIdx.x][j] =
          weave_wait_until(&t, &never[blockIdx.x * 16 + j], WEAVE_CMP_EQ, 7u, peer, 1000 * (int)blockIdx.x + j);
  }
  out->elapsed_ns[blockIdx.x] = weave_globaltimer() - t0;
}

static void test_timeout(Rank *R, weave_bootstrap_t *bs) {
  World *W = R->W;
  const int rank = R->rank;
  weave_team_t team_for_errors = NULL;
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 4u << 20;
  cfg.timeout_ms = TO_MS;
  weave_team_t team2 = NULL;
  weave_result_t rc = weave_team_create(bs, rank, 0, &cfg, &team2);
  if (rc != WEAVE_SUCCESS) {
    report(W, rank, T_TO, "weave_team_create (timeout team): %s: %s", weave_get_error_string(rc),
           weave_get_last_error(NULL));
    return;
  }
  team_for_errors = team2;
  weave_device_team_t v2;
  WV(W, rank, T_TO, weave_team_device_view(team2, &v2));
  W->checks[T_TO]++;
  if (v2.timeout_ns != (uint64_t)TO_MS * 1000000ull)
    report(W, rank, T_TO, "view timeout_ns %llu, expected %llu", (unsigned long long)v2.timeout_ns,
           (unsigned long long)TO_MS * 1000000ull);
  uint32_t *never = NULL;
  MpArea *mp = NULL;
  BarArea *bar = NULL;
  WV(W, rank, T_TO, weave_malloc(team2, sizeof(uint32_t) * TO_FLAGS, (void **)&never));
  WV(W, rank, T_TO, weave_malloc(team2, sizeof(MpArea), (void **)&mp));
  WV(W, rank, T_TO, weave_malloc(team2, sizeof(BarArea), (void **)&bar));
  TimeoutOut *d_out = NULL;
  CU(W, rank, T_TO, cudaMalloc(&d_out, sizeof(TimeoutOut)));
  if (never && mp && bar && d_out) {
    CU(W, rank, T_TO, cudaMemsetAsync(never, 0, sizeof(uint32_t) * TO_FLAGS, R->stream));
    CU(W, rank, T_TO, cudaMemsetAsync(mp, 0, sizeof(MpArea), R->stream));
    CU(W, rank, T_TO, cudaMemsetAsync(d_out, 0xff, sizeof(TimeoutOut), R->stream));
    CU(W, rank, T_TO, cudaStreamSynchronize(R->stream));
  }
  WV(W, rank, T_TO, weave_barrier(team2));
  if (never && d_out) {
    timeout_kernel<<<4, 32, 0, R->stream>>>(v2, never, d_out);
    CU(W, rank, T_TO, cudaGetLastError());
    CU(W, rank, T_TO, cudaStreamSynchronize(R->stream));
    TimeoutOut h;
    weave_device_error_t rec;
    CU(W, rank, T_TO, cudaMemcpyAsync(&h, d_out, sizeof(h), cudaMemcpyDeviceToHost, R->stream));
    CU(W, rank, T_TO, cudaMemcpyAsync(&rec, v2.heap_base, sizeof(rec), cudaMemcpyDeviceToHost, R->stream));
    CU(W, rank, T_TO, cudaStreamSynchronize(R->stream));
    const unsigned long long bound = (unsigned long long)TO_MS * 1000000ull;
    unsigned long long checks = 0;
#define EXPECT(cond, ...)                            \
  do {                                               \
    ++checks;                                        \
    if (!(cond)) report(W, rank, T_TO, __VA_ARGS__); \
  } while (0)
    EXPECT(h.rc[0][0] == (int)WEAVE_DEVICE_TIMEOUT, "lost-flag wait returned %d", h.rc[0][0]);
    EXPECT(h.elapsed_ns[0] >= bound && h.elapsed_ns[0] < bound + 150000000ull,
           "lost-flag wait took %.1f ms, bound %d ms", h.elapsed_ns[0] / 1e6, TO_MS);
    for (int b = 1; b < 4; ++b) {
      for (int j = 0; j < 10; ++j)
        EXPECT(h.rc[b][j] == (int)WEAVE_DEVICE_TIMEOUT, "block %d wait %d returned %d", b, j, h.rc[b][j]);
      EXPECT(h.elapsed_ns[b] < bound + 150000000ull, "block %d: ten lost waits took %.1f ms (more than one timeout)", b,
             h.elapsed_ns[b] / 1e6);
    }
    const int peer = (rank + 1) % R->world;
    EXPECT(rec.code == WEAVE_DEVICE_TIMEOUT, "record code %u", rec.code);
    EXPECT(rec.rank == rank && rec.peer == peer && rec.item == 4242, "record rank %d peer %d item %d (want %d %d 4242)",
           rec.rank, rec.peer, rec.item, rank, peer);
    EXPECT(rec.flag_addr == (uint64_t)(uintptr_t)never, "record flag 0x%llx, want %p",
           (unsigned long long)rec.flag_addr, (void *)never);
    EXPECT(rec.expected == 1 && rec.observed == 0 && rec.cmp == WEAVE_CMP_GE,
           "record expected %llu observed %llu cmp %u", (unsigned long long)rec.expected,
           (unsigned long long)rec.observed, rec.cmp);
    rc = weave_team_sync(team2, R->stream);
    const char *msg = weave_get_last_error(team2);
    char want_flag[64], want_rank[32];
    snprintf(want_flag, sizeof(want_flag), "0x%llx", (unsigned long long)(uintptr_t)never);
    snprintf(want_rank, sizeof(want_rank), "rank %d", rank);
    EXPECT(rc == WEAVE_ERROR_TIMEOUT, "weave_team_sync returned %s", weave_get_error_string(rc));
    EXPECT(strstr(msg, want_flag) && strstr(msg, want_rank), "message does not name flag %s and %s: '%s'", want_flag,
           want_rank, msg);
    if (rank == 0 && W->world == 1) printf("  timeout message: %s\n", msg);
    rc = weave_team_sync(team2, R->stream);
    EXPECT(rc == WEAVE_SUCCESS, "second weave_team_sync returned %s (record not cleared)", weave_get_error_string(rc));
#undef EXPECT
    W->checks[T_TO] += checks;
  }
  /* The team still works: barriers and message passing under the 200 ms bound. */
  WV(W, rank, T_TO, weave_barrier(team2));
  if (mp && bar) {
    weave_device_team_t saved = R->view;
    R->view = v2;
    run_bar(R, bar, 100, T_TO, "barrier after timeout");
    WV(W, rank, T_TO, weave_barrier(team2));
    run_mp(R, mp, 200, 0, T_TO, "message passing after timeout");
    R->view = saved;
    rc = weave_team_sync(team2, R->stream);
    W->checks[T_TO]++;
    if (rc != WEAVE_SUCCESS) report(W, rank, T_TO, "weave_team_sync after recovery: %s", weave_get_last_error(team2));
  }
  WV(W, rank, T_TO, weave_barrier(team2));
  if (d_out) cudaFree(d_out);
  WV(W, rank, T_TO, weave_team_destroy(team2));
}

/* ============================================================================================
 * Per-rank driver
 * ========================================================================================== */
struct ThreadArg {
  World *W;
  int rank;
};

static void *rank_main(void *p) {
  ThreadArg *arg = (ThreadArg *)p;
  World *W = arg->W;
  Rank R;
  memset(&R, 0, sizeof(R));
  R.W = W;
  R.rank = arg->rank;
  R.world = W->world;
  weave_team_t team_for_errors = NULL;
  if (cudaSetDevice(0) != cudaSuccess) {
    report(W, R.rank, T_SETUP, "cudaSetDevice(0) failed");
    return NULL;
  }
  weave_config_t cfg = WEAVE_CONFIG_INIT;
  cfg.heap_size = 64u << 20;
  cfg.timeout_ms = g_opt.timeout_ms;
  weave_result_t rc = weave_team_create(W->bs, R.rank, 0, &cfg, &R.team);
  if (rc != WEAVE_SUCCESS) {
    report(W, R.rank, T_SETUP, "weave_team_create: %s: %s", weave_get_error_string(rc), weave_get_last_error(NULL));
    return NULL;
  }
  team_for_errors = R.team;
  W->checks[T_SETUP]++;
  int rk = -1, wd = -1;
  WV(W, R.rank, T_SETUP, weave_team_rank(R.team, &rk));
  WV(W, R.rank, T_SETUP, weave_team_world(R.team, &wd));
  WV(W, R.rank, T_SETUP, weave_team_device_view(R.team, &R.view));
  weave_device_info_t info;
  memset(&info, 0, sizeof(info));
  WV(W, R.rank, T_SETUP, weave_team_device_info(R.team, &info));
  W->checks[T_SETUP] += 4;
  if (rk != R.rank || wd != R.world || R.view.rank != R.rank || R.view.world != R.world ||
      info.ranks_on_device != R.world)
    report(W, R.rank, T_SETUP, "team rank %d world %d view %d/%d ranks_on_device %d", rk, wd, R.view.rank, R.view.world,
           info.ranks_on_device);
  R.sm_count = info.sm_count > 0 ? info.sm_count : 1;
  CU(W, R.rank, T_SETUP, cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
  CU(W, R.rank, T_SETUP, cudaMalloc(&R.dc, sizeof(DevCount)));

  /* Every symmetric allocation up front, in the same order on every rank. */
  AtomSlot *slots = NULL;
  uint8_t *src = NULL, *regions = NULL;
  MpArea *mp = NULL;
  BarArea *bar = NULL;
  WV(W, R.rank, T_SETUP, weave_malloc(R.team, sizeof(AtomSlot) * NCOMBO, (void **)&slots));
  WV(W, R.rank, T_SETUP, weave_malloc(R.team, RMA_SRC, (void **)&src));
  WV(W, R.rank, T_SETUP, weave_malloc(R.team, (size_t)NKINDS * RMA_NCASES * RMA_REG, (void **)&regions));
  WV(W, R.rank, T_SETUP, weave_malloc(R.team, sizeof(MpArea), (void **)&mp));
  WV(W, R.rank, T_SETUP, weave_malloc(R.team, sizeof(BarArea), (void **)&bar));
  bool ok = slots && src && regions && mp && bar && R.dc && R.stream;
  /* The device table must translate like weave_ptr. */
  if (ok && R.world > 1) {
    void *pp = NULL;
    WV(W, R.rank, T_SETUP, weave_ptr(R.team, mp, (R.rank + 1) % R.world, &pp));
    void *bases[MAXW];
    CU(W, R.rank, T_SETUP,
       cudaMemcpyAsync(bases, R.view.heap_bases, sizeof(void *) * R.world, cudaMemcpyDeviceToHost, R.stream));
    CU(W, R.rank, T_SETUP, cudaStreamSynchronize(R.stream));
    W->checks[T_SETUP]++;
    if ((char *)bases[(R.rank + 1) % R.world] + ((char *)mp - (char *)R.view.heap_base) != pp)
      report(W, R.rank, T_SETUP, "device heap table disagrees with weave_ptr");
  }
  if (ok) {
    CU(W, R.rank, T_SETUP, cudaMemsetAsync(mp, 0, sizeof(MpArea), R.stream));
    CU(W, R.rank, T_SETUP, cudaMemsetAsync(bar, 0, sizeof(BarArea), R.stream));
    CU(W, R.rank, T_SETUP, cudaStreamSynchronize(R.stream));
  }
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  /* Every rank takes the same sequence of collective calls whatever failed. */
  if (ok) test_atomics(&R, slots);
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  if (ok) test_rma(&R, src, regions);
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  if (ok) run_mp(&R, mp, g_opt.mp_rounds, 0, T_MP, "message passing");
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  if (ok) run_bar(&R, bar, g_opt.barriers, T_BAR, "device barrier");
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  if (ok) {
    rc = weave_team_sync(R.team, R.stream);
    W->checks[T_SETUP]++;
    if (rc != WEAVE_SUCCESS)
      report(W, R.rank, T_SETUP, "weave_team_sync after the tests: %s", weave_get_last_error(R.team));
  }
  WV(W, R.rank, T_SETUP, weave_barrier(R.team));
  test_timeout(&R, W->bs);
  if (R.dc) cudaFree(R.dc);
  if (R.stream) cudaStreamDestroy(R.stream);
  WV(W, R.rank, T_SETUP, weave_team_destroy(R.team));
  return NULL;
}

/* world ranks as threads of this process, or, under a launcher, this process's rank only. */
static int run_world(int world) {
  World *W = new World();
  W->world = world;
  W->printed = 0;
  for (int i = 0; i < NTESTS; ++i) {
    W->checks[i] = 0;
    W->fails[i] = 0;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const bool launched = harness_launched_world() > 0;
  if (launched) {
    W->bs = harness_launched_bootstrap();
    ThreadArg arg = {W, harness_launched_rank()};
    rank_main(&arg);
  } else {
    weave_result_t rc = weave_bootstrap_create_threads(world, &W->bs);
    if (rc != WEAVE_SUCCESS) {
      fprintf(stderr, "FAIL world %d: weave_bootstrap_create_threads: %s: %s\n", world, weave_get_error_string(rc),
              weave_get_last_error(NULL));
      delete W;
      return 1;
    }
    pthread_t th[MAXW];
    ThreadArg args[MAXW];
    for (int r = 0; r < world; ++r) {
      args[r].W = W;
      args[r].rank = r;
      pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < world; ++r) pthread_join(th[r], NULL);
    weave_bootstrap_destroy(W->bs);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  unsigned long long total_fail = 0;
  if (launched) printf("rank %d of ", harness_launched_rank());
  printf("world %d (%.2f s):", world, (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
  for (int i = 0; i < NTESTS; ++i) {
    printf(" %s %llu checks/%llu failed%s", kTestName[i], (unsigned long long)W->checks[i].load(),
           (unsigned long long)W->fails[i].load(), i + 1 < NTESTS ? "," : "\n");
    total_fail += W->fails[i];
  }
  delete W;
  return total_fail ? 1 : 0;
}

/* Kernels are loaded before any rank launches (see the header comment). */
static int preload_kernels(void) {
  cudaFuncAttributes a;
  const void *fns[] = {(const void *)atom_kernel, (const void *)ld_kernel,        (const void *)rma_init_kernel,
                       (const void *)rma_kernel,  (const void *)rma_check_kernel, (const void *)mp_kernel,
                       (const void *)bar_kernel,  (const void *)timeout_kernel};
  for (const void *f : fns)
    if (cudaFuncGetAttributes(&a, f) != cudaSuccess) return -1;
  return 0;
}

int main(int argc, char **argv) {
  g_opt.nworlds = 0;
  g_opt.quick = false;
  g_opt.mp_rounds = -1;
  g_opt.barriers = -1;
  g_opt.seed = (uint32_t)harness_seed(); /* the same on every rank of a launched job */
  g_opt.timeout_ms = 10000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--world") && i + 1 < argc) {
      int w = atoi(argv[++i]);
      if (w < 1 || w > MAXW) {
        fprintf(stderr, "--world: 1..%d\n", MAXW);
        return 1;
      }
      g_opt.worlds[g_opt.nworlds++] = w;
    } else if (!strcmp(argv[i], "--quick"))
      g_opt.quick = true;
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
      g_opt.mp_rounds = atol(argv[++i]);
    else if (!strcmp(argv[i], "--barriers") && i + 1 < argc)
      g_opt.barriers = atol(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
      g_opt.seed = (uint32_t)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
      g_opt.timeout_ms = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--world N] [--quick] [--rounds N] [--barriers N] [--seed S] [--timeout-ms MS]\n",
              argv[0]);
      return 1;
    }
  }

  /* CUDA_MODULE_LOADING=EAGER and, for ranks that are threads, CUDA_DEVICE_MAX_CONNECTIONS=32 are set
   * before CUDA starts by the harness (tools/support/harness.c): a lazy module load, or a rank's
   * kernel queued behind another rank's spinning kernel, would deadlock. */
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count <= 0) {
    printf("gpu_rma_test: no CUDA device (%s): skipped\n", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    return 77;
  }
  cudaDeviceProp prop;
  memset(&prop, 0, sizeof(prop));
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) {
    printf("gpu_rma_test: device 0 is not sm_90 (%s): skipped\n", prop.name);
    return 77;
  }
  /* Under a launcher the job's world is the one world (a --world that differs is refused). */
  const int launched = harness_launched_world();
  if (launched < 0) return 1;
  if (launched > MAXW || (launched && g_opt.nworlds && (g_opt.nworlds > 1 || g_opt.worlds[0] != launched))) {
    fprintf(stderr, "gpu_rma_test: launched as %d ranks: --world must be that (at most %d)\n", launched, MAXW);
    return 1;
  }
  if (launched) g_opt.worlds[0] = launched, g_opt.nworlds = 1;
  if (harness_time_sliced()) {
    printf("gpu_rma_test: processes share the GPU time-sliced (no MPS): quick rounds only\n");
    g_opt.quick = true;
  }
  if (g_opt.nworlds == 0) {
    const int def[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; ++i) g_opt.worlds[g_opt.nworlds++] = def[i];
  }
  if (g_opt.mp_rounds < 0) g_opt.mp_rounds = g_opt.quick ? 300 : 100000;
  if (g_opt.barriers < 0) g_opt.barriers = g_opt.quick ? 300 : 10000;
  if (cudaSetDevice(0) != cudaSuccess || preload_kernels() != 0) {
    fprintf(stderr, "FAIL: cannot load the test kernels: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  printf("gpu_rma_test: %s, %d SMs, seed 0x%08x, msgpass rounds %ld, barriers %ld, main timeout %d ms%s\n", prop.name,
         prop.multiProcessorCount, g_opt.seed, g_opt.mp_rounds, g_opt.barriers, g_opt.timeout_ms,
         g_opt.quick ? " (quick)" : "");
  int fail = 0;
  for (int i = 0; i < g_opt.nworlds; ++i) fail |= run_world(g_opt.worlds[i]);
  printf("gpu_rma_test: %s\n", fail ? "FAILED" : "PASSED");
  return fail ? 1 : 0;
}
