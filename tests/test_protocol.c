/*
 * CPU models of the fused kernels' protocols, run with C11 atomics and threads.
 *
 * GEMM + ReduceScatter (gemm_rs.cu): per
 * rank one producer thread (the GEMM blocks) and one consumer thread (the communication blocks), the
 * real tile walk of schedule.h, epoch flags that are never reset, and the per-owner credit. Every
 * slot value encodes (call, source, owner, tile), so a consumer that reads a stale partial or one
 * that a fast producer already overwrote with the next call's fails the check. Random pauses shuffle
 * the interleavings. A second run without the credit must fail: the test can fail.
 *
 * AllGather + GEMM (ag_gemm.cu): per rank a pusher (the communication blocks) and a consumer (the GEMM
 * blocks), the real row blocks and tile order of schedule.h, counters that grow by one push per
 * contributing rank per call, and the wait for done[dst] before writing into a peer. Every gathered
 * row holds (call, row): a consumer that reads a row before it arrived, or after a peer's next call
 * overwrote it, fails. Without the done wait it must fail.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "common/schedule.h"
#include "weave_device_types.h"

#define WORLD 4
#define CALLS 300

typedef struct {
  weave_tiling_t t;
  int tiles_cap, use_credit;
  _Atomic uint32_t done[WORLD][WORLD]; /* [at rank][from owner] */
  _Atomic uint32_t *flags;             /* [owner][src][tile] */
  _Atomic uint64_t *slots;             /* [owner][src][tile]: the "partial" */
  atomic_int errors;
  atomic_int finished[WORLD]; /* threads of the rank done with the call (arrive) */
} model_t;

typedef struct {
  model_t *m;
  int rank, role; /* 0 producer, 1 consumer */
  unsigned seed;
} actor_t;

static uint64_t value(uint32_t call, int s, int o, int j) {
  return ((uint64_t)call << 32) ^ ((uint64_t)s << 24) ^ ((uint64_t)o << 16) ^ (uint64_t)j;
}

static void pause_a_little(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  if (r % 8 == 0) {
    struct timespec ts = {0, (long)(r % 2000)};
    nanosleep(&ts, NULL);
  } else if (r % 3 == 0) {
    sched_yield();
  }
}

static size_t at(const model_t *m, int o, int s, int j) { return ((size_t)o * WORLD + s) * m->tiles_cap + j; }

/* Bounded wait (the model of weave_wait_until): 0 on success, -1 after ~10 s. */
static int wait_reached(_Atomic uint32_t *flag, uint32_t want) {
  for (long spin = 0; spin < 200000000L; ++spin) {
    if (weave_epoch_ge(atomic_load_explicit(flag, memory_order_acquire), want)) return 0;
    if (spin % 64 == 63) sched_yield();
  }
  return -1;
}

/* End of the rank's kernel: the last thread to arrive publishes done[rank] = call everywhere. */
static void arrive(model_t *m, int rank, uint32_t call) {
  if (atomic_fetch_add_explicit(&m->finished[rank], 1, memory_order_acq_rel) % 2 == 1)
    for (int p = 0; p < WORLD; ++p) atomic_store_explicit(&m->done[p][rank], call, memory_order_release);
}

static void *actor(void *arg) {
  actor_t *a = (actor_t *)arg;
  model_t *m = a->m;
  const int r = a->rank, total = weave_total_tiles(&m->t);
  for (uint32_t call = 1; call <= CALLS; ++call) {
    if (a->role == 0) {
      /* The next call of this rank starts only after its previous kernel ended (stream order). */
      if (wait_reached(&m->done[r][r], call - 1)) {
        atomic_fetch_add(&m->errors, 1);
        return NULL;
      }
      uint64_t credit = 0;
      for (int seq = 0; seq < total; ++seq) {
        int o = 0, j = 0;
        if (weave_seq_tile(&m->t, r, seq, &o, &j) != 0) {
          atomic_fetch_add(&m->errors, 1);
          return NULL;
        }
        if (m->use_credit && !weave_credit_held(credit, o)) { /* the kernel's own credit functions */
          if (wait_reached(&m->done[r][o], weave_credit_epoch(call))) {
            atomic_fetch_add(&m->errors, 1);
            return NULL;
          }
          credit = weave_credit_take(credit, o);
        }
        pause_a_little(&a->seed);
        atomic_store_explicit(&m->slots[at(m, o, r, j)], value(call, r, o, j), memory_order_relaxed);
        atomic_store_explicit(&m->flags[at(m, o, r, j)], call, memory_order_release);
      }
    } else {
      if (wait_reached(&m->done[r][r], call - 1)) {
        atomic_fetch_add(&m->errors, 1);
        return NULL;
      }
      for (int j = 0; j < weave_owner_tiles(&m->t, r); ++j)
        for (int s = 0; s < WORLD; ++s) {
          if (wait_reached(&m->flags[at(m, r, s, j)], call)) {
            atomic_fetch_add(&m->errors, 1);
            return NULL;
          }
          pause_a_little(&a->seed);
          if (atomic_load_explicit(&m->slots[at(m, r, s, j)], memory_order_relaxed) != value(call, s, r, j))
            atomic_fetch_add(&m->errors, 1);
        }
    }
    arrive(m, r, call);
  }
  return NULL;
}

static int run(int use_credit, int pair_n) {
  model_t *m = (model_t *)calloc(1, sizeof(*m));
  /* tails: 10/9/9/9 rows, 3/3/3/3 tile-rows x 2 tile columns (pair_n: one pair) */
  m->t = (weave_tiling_t){37, 16, WORLD, 4, 8, 0, pair_n};
  m->tiles_cap = weave_max_owner_tiles(&m->t);
  m->use_credit = use_credit;
  size_t n = (size_t)WORLD * WORLD * m->tiles_cap;
  m->flags = (_Atomic uint32_t *)calloc(n, sizeof(*m->flags));
  m->slots = (_Atomic uint64_t *)calloc(n, sizeof(*m->slots));
  pthread_t th[2 * WORLD];
  actor_t a[2 * WORLD];
  for (int i = 0; i < 2 * WORLD; ++i) {
    a[i] = (actor_t){m, i / 2, i % 2, 1234u + (unsigned)i * 7919u + (unsigned)use_credit};
    pthread_create(&th[i], NULL, actor, &a[i]);
  }
  for (int i = 0; i < 2 * WORLD; ++i) pthread_join(th[i], NULL);
  int errors = atomic_load(&m->errors);
  free((void *)m->flags);
  free((void *)m->slots);
  free(m);
  return errors;
}

/* ---- AllGather + GEMM ------------------------------------------------------------------------- */
#define AG_MAX_M 256

typedef struct {
  int M, br, blocks_m, use_done;
  _Atomic uint32_t done[WORLD][WORLD];     /* [at rank][from rank] */
  _Atomic uint32_t flags[WORLD][AG_MAX_M]; /* [rank][block] */
  _Atomic uint64_t rows[WORLD][AG_MAX_M];  /* each rank's gathered A, one value a row */
  atomic_int errors;
  atomic_int finished[WORLD];
} ag_model_t;

typedef struct {
  ag_model_t *m;
  int rank, role; /* 0 pusher, 1 consumer */
  unsigned seed;
} ag_actor_t;

static uint64_t ag_value(uint32_t call, int row) { return ((uint64_t)call << 32) | (uint32_t)row; }

static void ag_arrive(ag_model_t *m, int rank, uint32_t call) {
  if (atomic_fetch_add_explicit(&m->finished[rank], 1, memory_order_acq_rel) % 2 == 1)
    for (int p = 0; p < WORLD; ++p) atomic_store_explicit(&m->done[p][rank], call, memory_order_release);
}

static void *ag_actor(void *arg) {
  ag_actor_t *a = (ag_actor_t *)arg;
  ag_model_t *m = a->m;
  const int r = a->rank, br = m->br;
  int rb, rows, first, n_own;
  weave_split_rows_of(m->M, WORLD, r, &rb, &rows);
  weave_ag_own_blocks(rb, rows, m->blocks_m, br, &first, &n_own);
  for (uint32_t call = 1; call <= CALLS; ++call) {
    if (wait_reached(&m->done[r][r], call - 1)) { /* stream order: the previous kernel ended */
      atomic_fetch_add(&m->errors, 1);
      return NULL;
    }
    if (a->role == 0) {
      for (int i = 0; i < WORLD * n_own; ++i) {
        const int dst = (r + i / n_own) % WORLD, b = first + i % n_own;
        if (m->use_done && wait_reached(&m->done[r][dst], call - 1)) {
          atomic_fetch_add(&m->errors, 1);
          return NULL;
        }
        const int r0 = rb > b * br ? rb : b * br, r1 = rb + rows < (b + 1) * br ? rb + rows : (b + 1) * br;
        for (int row = r0; row < r1; ++row) {
          pause_a_little(&a->seed);
          atomic_store_explicit(&m->rows[dst][row], ag_value(call, row), memory_order_relaxed);
        }
        atomic_fetch_add_explicit(&m->flags[dst][b], 1u, memory_order_release);
      }
    } else {
      const int tiles_n = 2;
      for (int seq = 0; seq < m->blocks_m * tiles_n; ++seq) {
        int tm, tn;
        weave_ag_tile_coords(seq, m->blocks_m, tiles_n, 2, first, n_own, &tm, &tn);
        const uint32_t want = (weave_ag_row_info(m->M, WORLD, br, tm) & 0xffffu) * call;
        if (wait_reached(&m->flags[r][tm], want)) {
          atomic_fetch_add(&m->errors, 1);
          return NULL;
        }
        const int r1 = (tm + 1) * br < m->M ? (tm + 1) * br : m->M;
        for (int row = tm * br; row < r1; ++row) {
          pause_a_little(&a->seed);
          if (atomic_load_explicit(&m->rows[r][row], memory_order_relaxed) != ag_value(call, row))
            atomic_fetch_add(&m->errors, 1);
        }
      }
    }
    ag_arrive(m, r, call);
  }
  return NULL;
}

static int ag_run(int M, int br, int use_done) {
  ag_model_t *m = (ag_model_t *)calloc(1, sizeof(*m));
  m->M = M;
  m->br = br;
  m->blocks_m = weave_cdiv(M, br);
  m->use_done = use_done;
  pthread_t th[2 * WORLD];
  ag_actor_t a[2 * WORLD];
  for (int i = 0; i < 2 * WORLD; ++i) {
    a[i] = (ag_actor_t){m, i / 2, i % 2, 4321u + (unsigned)i * 104729u + (unsigned)(M + use_done)};
    pthread_create(&th[i], NULL, ag_actor, &a[i]);
  }
  for (int i = 0; i < 2 * WORLD; ++i) pthread_join(th[i], NULL);
  const int errors = atomic_load(&m->errors);
  free(m);
  return errors;
}

int main(void) {
  /* AllGather + GEMM: rows 51/51/51/50 in blocks of 16 (blocks shared by two ranks), and M < world */
  const int ag_shapes[2][2] = {{203, 16}, {3, 2}};
  for (int i = 0; i < 2; ++i) {
    const int bad = ag_run(ag_shapes[i][0], ag_shapes[i][1], 1);
    CHECK_MSG(bad == 0, "AllGather + GEMM, M %d: %d rows read before they arrived or after they were overwritten",
              ag_shapes[i][0], bad);
  }
  int ag_without = 0;
  for (int i = 0; i < 5 && ag_without == 0; ++i) ag_without = ag_run(203, 16, 0);
  CHECK_MSG(ag_without > 0, "AllGather + GEMM without the done wait never failed: the test cannot fail");

  int with_credit = run(1, 0);
  CHECK_MSG(with_credit == 0, "%d stale or overwritten partials with the credit", with_credit);
  with_credit = run(1, 1); /* the walk over pairs of tile columns (2-CTA clusters sharing A) */
  CHECK_MSG(with_credit == 0, "%d stale or overwritten partials with the credit, paired tiles", with_credit);
  /* Without the credit a fast source overwrites slots the owner has not read yet. The interleaving
   * is random, so give it a few tries to show up. */
  int without = 0;
  for (int i = 0; i < 5 && without == 0; ++i) without = run(0, 0);
  CHECK_MSG(without > 0, "the model without the credit never failed: the test cannot fail");
  return check_summary("test_protocol");
}
