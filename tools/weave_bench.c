/*
 * weave-bench: GEMM + ReduceScatter benchmark in the conventions of nccl-tests (--help lists every
 * option with its default).
 *
 *   weave-bench -M 8192 -N 8192 -K 28672 -g 4 -d bf16 --strategy all [-b 1024 -e 16384 -f 2] [-J out.json]
 *   scripts/launch.sh -n 4 --mps weave-bench -M 8192 ...      (one process per rank; torchrun, mpirun, srun alike)
 *
 * K is the total reduction length (K_local = K / ranks). Ranks are the threads of this process, or,
 * under a launcher, one process each (the launcher's world; the process of rank 0 prints). Rows: one
 * per strategy (baseline first), median time over -n timed calls after -w warm-ups (each call: max
 * over ranks; the variants are timed interleaved, one call of each per iteration in an order
 * shuffled per iteration, so drift hits them alike and no variant keeps one neighbour), TFLOP/s per GPU, reduce-scatter algbw/busbw, #wrong from the validated call (-c 1: output
 * poisoned first; 3 ranges of 4 rows per rank against the fp64 CPU reference, and every row against
 * cuBLASLt over the gathered K), speed-up over the baseline measured in the same run, relerr (largest
 * relative Frobenius error of those checks). After the table: cuBLASLt alone on the local shape, the
 * baseline's reduce-scatter part (baseline - that GEMM) and the share of it each fused variant hides.
 * Inputs: random, several sets rotated so the working set exceeds twice the L2.
 * Without a GPU, or with --dry-run, it prints the header, the options and variants it would time, the
 * plan and the roofline for H100/H200, and exits 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_support.h"
#include "cli.h"
#include "harness.h"
#include "json_writer.h"
#include "reference.h"
#include "weave.h"
#include "weave_trace.h"

/* --op gemm: tools/bench/bench_hopper_gemm.cu */
int weave_bench_gemm_main(int argc, char **argv);
int weave_bench_ag_main(int argc, char **argv); /* bench/bench_ag_gemm.c */

#define MAX_VARIANTS 72 /* the strategies, and --tune's splits */
#define MAX_ITERS 256
#define MAX_SETS 8

typedef struct {
  weave_strategy_t strategy;
  weave_reduce_t reduce;
  weave_dtype_t slot;
  int gemm_blocks, comm_blocks;
  int trace;
  char label[64];
} bench_variant_t;

/* One rank's results for one M. Every rank fills its own; at the end of the run they are gathered
 * (over the symmetric heap) so that the process of rank 0 holds them all. */
typedef struct {
  double ms[MAX_VARIANTS][MAX_ITERS];
  double gemm_alone_ms[MAX_ITERS]; /* weave_gemm alone on the local shape, all blocks */
  double lt_alone_ms[MAX_ITERS];   /* cuBLASLt alone: the baseline's GEMM part */
  long wrong[MAX_VARIANTS];
  double relerr[MAX_VARIANTS]; /* largest ||got - ref|| / ||ref|| over the checked rows; NaN sticks */
  int failed[MAX_VARIANTS];    /* the plan, the validated call or a timed call failed on this rank */
  int lt_failed;               /* cuBLASLt could not plan the local shape on some rank: not measured */
  weave_gemm_rs_info_t info[MAX_VARIANTS];
  double create_ms[MAX_VARIANTS]; /* host time of the plan's creation (auto: its choice included) */
  bench_tune_key_t tune_key;      /* --tune: the cache key of this rank's plans (rank 0's is stored) */
} rank_record_t;

typedef struct {
  /* the command line */
  int M, N, K_total, world, min_M, max_M;
  double factor;
  int devices[WEAVE_MAX_WORLD], ndevices;
  weave_dtype_t dtype; /* A and B */
  weave_dtype_t out;   /* C (dtype; bf16 for fp8) */
  int scale_mode;      /* fp8: weave_scale_mode_t */
  int fp8_accum;       /* fp8: weave_fp8_accum_t (weave and the baseline's cuBLASLt alike) */
  weave_layout_t layout;
  weave_tile_order_t order;
  int iters, warmup, check, tune;
  int dry_run;         /* print what would run; use no GPU */
  int tune_fp32_slots; /* --tune sweeps fused plans with fp32 slots (--slot fp32) */
  int tune_reduce;     /* --tune sweeps fused plans of this weave_reduce_t (--reduce atomic: atomic) */
  const char *json_path, *trace_path;
  bench_variant_t v[MAX_VARIANTS];
  int nv;
  /* the job */
  int launched; /* ranks are processes started by a launcher */
  int my_rank;  /* the lowest rank this process holds (0 with threads): it keeps the gathered results */
  /* one run (one M) */
  uint64_t seed;
  char device_name[256];
  int sm_count;
  rank_record_t rec[WEAVE_MAX_WORLD];
  int traced_vi;
  weave_trace_event_t *tev[WEAVE_MAX_WORLD];
  size_t tcount[WEAVE_MAX_WORLD];
} bench_t;

/* ------------------------------------------------------------------------------------------------
 * the command line
 * ---------------------------------------------------------------------------------------------- */
enum {
  OPT_DEVICES = 256,
  OPT_LAYOUT,
  OPT_STRATEGY,
  OPT_REDUCE,
  OPT_SLOT,
  OPT_ORDER,
  OPT_GEMM_BLOCKS,
  OPT_COMM_BLOCKS,
  OPT_TUNE,
  OPT_TRACE,
  OPT_OP,
  OPT_VERSION,
  OPT_SCALES,
  OPT_ACCUM,
  OPT_DRY_RUN
};

static const cli_option_t bench_options[] = {
    {"rows", 'M', "M", "rows of C (default 8192)"},
    {"cols", 'N', "N", "columns of C (default 8192)"},
    {"k-total", 'K', "K", "total reduction length, K_local = K / ranks (default 28672)"},
    {"ranks", 'g', "G", "ranks (default 1; under a launcher the launcher's world)"},
    {"devices", OPT_DEVICES, "D0,D1,..", "CUDA device of each rank (default rank % visible devices)"},
    {"dtype", 'd', "T", "bf16, fp16, fp32 or fp8 (e4m3 in, bf16 out, B col only) (default bf16)"},
    {"layout", OPT_LAYOUT, "L", "B as row [K,N] or col [N,K] (default row; col for fp8)"},
    {"scales", OPT_SCALES, "S", "fp8 scales, each rank its own: none, tensor or row (default tensor)"},
    {"fp8-accum", OPT_ACCUM, "A", "fp8 accumulation: fp32 or fast (default fp32; the baseline's cuBLASLt alike)"},
    {"strategy", OPT_STRATEGY, "S", "all, auto, fused, bulk or baseline (default all; the baseline always runs)"},
    {"reduce", OPT_REDUCE, "R", "fused reduction: det, atomic or both (default both)"},
    {"slot", OPT_SLOT, "S", "slot type of det/bulk: dtype or fp32 (default dtype)"},
    {"order", OPT_ORDER, "O", "tile order: own-last or own-first (default own-last)"},
    {"gemm-blocks", OPT_GEMM_BLOCKS, "G", "fused kernel's GEMM blocks per rank (default 0: the plan's choice)"},
    {"comm-blocks", OPT_COMM_BLOCKS, "C", "fused kernel's communication blocks per rank (default 0: the plan's)"},
    {"min-rows", 'b', "M", "sweep M from (default -M)"},
    {"max-rows", 'e', "M", "sweep M up to (default -M)"},
    {"factor", 'f', "F", "sweep step factor, > 1 (default 2)"},
    {"iters", 'n', "N", "timed calls per variant, 1..256 (default 20)"},
    {"warmup", 'w', "N", "warm-up calls per variant (default 5)"},
    {"check", 'c', "0|1", "validate one call per variant (default 1)"},
    {"json", 'J', "FILE", "also write the rows as JSON (default: none)"},
    {"tune", OPT_TUNE, NULL,
     "sweep the fused kernel's split (det, or atomic with --reduce atomic); record the best in WEAVE_TUNE_FILE"},
    {"trace", OPT_TRACE, "FILE", "time one more traced fused variant; write its last call (Chrome JSON + CSV)"},
    {"op", OPT_OP, "OP", "gemm_rs (default), or gemm: weave's Hopper GEMM against cuBLASLt (see --op gemm --help)"},
    {"dry-run", OPT_DRY_RUN, NULL, "print the options, the variants, the plan and the roofline; use no GPU"},
    {"version", OPT_VERSION, NULL, "print the version and exit"},
    {"help", 'h', NULL, "this text"},
    {NULL, 0, NULL, NULL},
};

static const char *const dtype_names[] = {"bf16", "fp16", "fp32", "fp8", NULL}; /* in weave_dtype_t order */
static const char *const scale_names[] = {"none", "tensor", "row", NULL};       /* weave_scale_mode_t order */
static const char *const accum_names[] = {"fp32", "fast", NULL};                /* weave_fp8_accum_t order */
static const char *const slot_names[] = {"dtype", "fp32", NULL};
static const char *const order_names[] = {"own-last", "own-first", NULL}; /* weave_tile_order_t order */

typedef struct {
  int strategy; /* a PICK_*: index into strategy_names */
  int reduce;   /* a REDUCE_*: index into reduce_names */
  int fp32_slot;
  int gemm_blocks, comm_blocks;
  int ranks_given;
} variant_options_t;

static const char *const chosen_by_names[] = {"given", "cached", "measured", "model"};
enum { PICK_ALL, PICK_AUTO, PICK_FUSED, PICK_BULK, PICK_BASELINE };
static const char *const strategy_names[] = {"all", "auto", "fused", "bulk", "baseline", NULL};
enum { REDUCE_BOTH, REDUCE_DET, REDUCE_ATOMIC };
static const char *const reduce_names[] = {"both", "det", "atomic", NULL};

/* Fills b and vo from argv; exits 0 after --help or --version and 2 on a bad option. */
static void parse_options(int argc, char **argv, bench_t *b, variant_options_t *vo) {
  static const char *const layout_names[] = {"row", "col", NULL};
  static const char *const op_names[] = {"gemm_rs", "gemm", NULL};
  b->M = 8192;
  b->N = 8192;
  b->K_total = 28672;
  b->world = 1;
  b->factor = 2;
  b->dtype = WEAVE_BF16;
  b->layout = WEAVE_LAYOUT_ROW;
  b->order = WEAVE_ORDER_OWN_LAST;
  b->iters = 20;
  b->warmup = 5;
  b->check = 1;
  b->scale_mode = WEAVE_SCALE_TENSOR;
  int layout_given = 0, scales_given = 0;
  memset(vo, 0, sizeof(*vo));
  cli_t c;
  cli_init(&c, "weave-bench", bench_options);
  long list[WEAVE_MAX_WORLD];
  for (int key; (key = cli_next(&c, argc, argv)) != -1;) {
    const char *a = optarg;
    switch (key) {
      case 'M': b->M = (int)cli_long(&c, a, 1, 1L << 24); break;
      case 'N': b->N = (int)cli_long(&c, a, 1, 1L << 24); break;
      case 'K': b->K_total = (int)cli_long(&c, a, 1, 1L << 26); break;
      case 'g':
        b->world = (int)cli_long(&c, a, 1, WEAVE_MAX_WORLD);
        vo->ranks_given = 1;
        break;
      case OPT_DEVICES:
        b->ndevices = cli_long_list(&c, a, 0, 1023, list, WEAVE_MAX_WORLD);
        for (int i = 0; i < b->ndevices; ++i) b->devices[i] = (int)list[i];
        break;
      case 'd': b->dtype = (weave_dtype_t)cli_choice(&c, a, dtype_names); break;
      case OPT_LAYOUT:
        b->layout = cli_choice(&c, a, layout_names) ? WEAVE_LAYOUT_COL : WEAVE_LAYOUT_ROW;
        layout_given = 1;
        break;
      case OPT_SCALES:
        b->scale_mode = cli_choice(&c, a, scale_names);
        scales_given = 1;
        break;
      case OPT_ACCUM: b->fp8_accum = cli_choice(&c, a, accum_names); break;
      case OPT_STRATEGY: vo->strategy = cli_choice(&c, a, strategy_names); break;
      case OPT_REDUCE: vo->reduce = cli_choice(&c, a, reduce_names); break;
      case OPT_SLOT: vo->fp32_slot = cli_choice(&c, a, slot_names); break;
      case OPT_ORDER: b->order = cli_choice(&c, a, order_names) ? WEAVE_ORDER_OWN_FIRST : WEAVE_ORDER_OWN_LAST; break;
      case OPT_GEMM_BLOCKS: vo->gemm_blocks = (int)cli_long(&c, a, 0, 4096); break;
      case OPT_COMM_BLOCKS: vo->comm_blocks = (int)cli_long(&c, a, 0, 4096); break;
      case 'b': b->min_M = (int)cli_long(&c, a, 1, 1L << 24); break;
      case 'e': b->max_M = (int)cli_long(&c, a, 1, 1L << 24); break;
      case 'f': b->factor = cli_double(&c, a, 1.0001, 1e6); break;
      case 'n': b->iters = (int)cli_long(&c, a, 1, MAX_ITERS); break;
      case 'w': b->warmup = (int)cli_long(&c, a, 0, 100000); break;
      case 'c': b->check = (int)cli_long(&c, a, 0, 1); break;
      case 'J': b->json_path = a; break;
      case OPT_TUNE: b->tune = 1; break;
      case OPT_TRACE: b->trace_path = a; break;
      case OPT_OP: cli_choice(&c, a, op_names); break; /* gemm was dispatched before parsing */
      case OPT_DRY_RUN: b->dry_run = 1; break;
      case OPT_VERSION: {
        int v[3];
        weave_get_version(&v[0], &v[1], &v[2]);
        printf("weave-bench %d.%d.%d\n", v[0], v[1], v[2]);
        exit(0);
      }
      case 'h':
        cli_usage(&c, stdout,
                  "[options]   (GEMM + ReduceScatter; ranks as threads, or one process each under a "
                  "launcher)");
        exit(0);
    }
  }
  if (b->dtype == WEAVE_FP8_E4M3) {
    if (layout_given && b->layout != WEAVE_LAYOUT_COL) {
      fprintf(stderr, "weave-bench: fp8 takes B as col [N,K] only (--layout col)\n");
      exit(2);
    }
    b->layout = WEAVE_LAYOUT_COL;
  } else {
    if (b->fp8_accum != WEAVE_FP8_ACCUM_FP32) {
      fprintf(stderr, "weave-bench: --fp8-accum fast applies to -d fp8 only\n");
      exit(2);
    }
    if (scales_given && b->scale_mode != WEAVE_SCALE_NONE) {
      fprintf(stderr, "weave-bench: --scales %s applies to -d fp8 only\n", scale_names[b->scale_mode]);
      exit(2);
    }
    b->scale_mode = WEAVE_SCALE_NONE;
  }
  b->out = b->dtype == WEAVE_FP8_E4M3 ? WEAVE_BF16 : b->dtype; /* fp8 writes bf16 here */
  if (b->K_total < b->world || b->K_total % b->world) {
    fprintf(stderr, "weave-bench: -K %d must be a positive multiple of the ranks (%d)\n", b->K_total, b->world);
    exit(2);
  }
  if (b->ndevices && b->ndevices != b->world) {
    fprintf(stderr, "weave-bench: --devices lists %d devices for %d ranks: one per rank\n", b->ndevices, b->world);
    exit(2);
  }
  /* -b/-e default to -M: "-e 16384" alone sweeps from -M up, "-b 1024" alone from there up to -M */
  if (b->min_M == 0) b->min_M = b->max_M ? (b->max_M < b->M ? b->max_M : b->M) : b->M;
  if (b->max_M == 0) b->max_M = b->min_M > b->M ? b->min_M : b->M;
  if (b->max_M < b->min_M) b->max_M = b->min_M;
}

/* ------------------------------------------------------------------------------------------------
 * the variants
 * ---------------------------------------------------------------------------------------------- */
static bench_variant_t *add_variant(bench_t *b, weave_strategy_t s, weave_reduce_t red, weave_dtype_t slot, int g,
                                    int c) {
  bench_variant_t *v = &b->v[b->nv++];
  v->strategy = s;
  v->reduce = red;
  v->slot = slot;
  v->gemm_blocks = g;
  v->comm_blocks = c;
  if (s == WEAVE_STRATEGY_FUSED)
    snprintf(v->label, sizeof(v->label), "fused/%s/%s%s", red == WEAVE_REDUCE_ATOMIC ? "atomic" : "det",
             red == WEAVE_REDUCE_ATOMIC ? "f32" : weave_dtype_name(slot), g ? "*" : "");
  else if (s == WEAVE_STRATEGY_BULK)
    snprintf(v->label, sizeof(v->label), "bulk/%s", weave_dtype_name(slot));
  else
    snprintf(v->label, sizeof(v->label), "%s", weave_strategy_name(s));
  return v;
}

/* The baseline first (the speed-ups are over it), then the chosen strategies; --trace adds the
 * deterministic fused kernel once more, traced; --tune a sweep of its split. */
static void add_variants(bench_t *b, const variant_options_t *vo, int visible_devices) {
  const int all = vo->strategy == PICK_ALL;
  const int want_det = vo->reduce != REDUCE_ATOMIC, want_atomic = vo->reduce != REDUCE_DET;
  const weave_dtype_t slot = vo->fp32_slot ? WEAVE_FP32 : b->dtype;
  b->tune_fp32_slots = vo->fp32_slot && b->dtype != WEAVE_FP32;
  b->tune_reduce = vo->reduce == REDUCE_ATOMIC ? WEAVE_REDUCE_ATOMIC : WEAVE_REDUCE_DETERMINISTIC;
  const int gb = vo->gemm_blocks, cb = vo->comm_blocks;
  add_variant(b, WEAVE_STRATEGY_BASELINE, WEAVE_REDUCE_DETERMINISTIC, b->dtype, 0, 0);
  if (all || vo->strategy == PICK_FUSED) {
    if (want_det) add_variant(b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot, gb, cb);
    if (want_det && all && b->dtype != WEAVE_FP32 && slot != WEAVE_FP32)
      add_variant(b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, WEAVE_FP32, gb, cb);
    if (want_atomic) add_variant(b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_ATOMIC, b->dtype, gb, cb);
  }
  if (b->trace_path) {
    bench_variant_t *tv = add_variant(b, WEAVE_STRATEGY_FUSED, WEAVE_REDUCE_DETERMINISTIC, slot, gb, cb);
    tv->trace = 1;
    snprintf(tv->label, sizeof(tv->label), "fused/det +trace");
  }
  if (all || vo->strategy == PICK_BULK) add_variant(b, WEAVE_STRATEGY_BULK, WEAVE_REDUCE_DETERMINISTIC, slot, 0, 0);
  if (all || vo->strategy == PICK_AUTO) add_variant(b, WEAVE_STRATEGY_AUTO, WEAVE_REDUCE_DETERMINISTIC, b->dtype, 0, 0);
  if (b->tune) {
    /* The plan's budget: the SMs less one per rank when ranks share a GPU, shared by those ranks. */
    int sms = 132, ranks_here = 0;
    for (int r = 0; r < b->world; ++r) ranks_here += b->devices[r] == b->devices[0];
    if (visible_devices > 0 && harness_sm_count(b->devices[0]) > 0) sms = harness_sm_count(b->devices[0]);
    int budget_guess = (sms - (ranks_here > 1 ? ranks_here : 0)) / ranks_here;
    for (int c = 1; c < budget_guess && b->nv < MAX_VARIANTS; c = c < 4 ? c + 1 : c * 3 / 2)
      add_variant(b, WEAVE_STRATEGY_FUSED, (weave_reduce_t)b->tune_reduce,
                  b->tune_reduce == WEAVE_REDUCE_ATOMIC ? b->dtype : slot, budget_guess - c, c);
  }
}

/* All plans of a run are alive at once (round-robin timing), so the symmetric heap must hold every
 * variant's memory at the largest M: at most world slots of ceil(M/world) x N fp32 each (the
 * deterministic kernel with fp32 slots; the others need as much or less), +25% and 256 MiB for
 * flags, control words, the result exchange and alignment. Set before the teams, which read it at
 * creation; a value the user set wins. Writes what it chose to note. */
static void size_heap(const bench_t *b, char *note, size_t note_len) {
  const char *heap_env = getenv("WEAVE_HEAP_SIZE");
  if (heap_env && *heap_env) {
    snprintf(note, note_len, "%s (WEAVE_HEAP_SIZE as set)", heap_env);
    return;
  }
  double per_variant = (double)b->world * (double)(((long)b->max_M + b->world - 1) / b->world) * b->N * 4.0;
  /* +1: an auto variant times its candidates at creation, one plan at a time, beside the others */
  double mib = ceil(((b->nv + 1) * per_variant * 1.25 + 256.0 * 1048576.0) / 1048576.0);
  unsigned long long heap_mib = mib < 1024 ? 1024 : (unsigned long long)mib;
  char val[32];
  snprintf(val, sizeof(val), "%lluM", heap_mib);
  setenv("WEAVE_HEAP_SIZE", val, 1);
  snprintf(note, note_len, "%s (for %d variants at M=%d; set WEAVE_HEAP_SIZE to override)", val, b->nv, b->max_M);
}

/* ------------------------------------------------------------------------------------------------
 * one rank's run
 * ---------------------------------------------------------------------------------------------- */
typedef struct {
  bench_t *b;
  harness_rank_t *hr;
  rank_record_t *rec; /* this rank's results */
  int K, row_begin, rows, nsets;
  size_t elt, oelt, a_n, b_n; /* bytes of an input and of an output element */
  void *dA[MAX_SETS], *dB[MAX_SETS], *dC;
  float *dsa, *dsb; /* fp8: this rank's scales (NULL without) */
  /* the check: 3 ranges of rcnt rows in fp64, and every row against cuBLASLt (not for fp8: each
   * rank's scales differ, so no single cuBLASLt call over the gathered K gives the sum) */
  int check_begin[3], check_rows;
  double *ref, *ref_full, *bound; /* bound: fp8's accumulation allowance per checked element */
  unsigned char *hC;
  weave_gemm_rs_plan_t plan[MAX_VARIANTS];
  int live[MAX_VARIANTS]; /* agreed: the same on every rank */
} rank_run_t;

/* Collective: 1 when every rank says ok. All ranks take the same decision from it, so none skips a
 * call that the others wait for. */
static int all_ok(harness_rank_t *hr, int ok) {
  int votes[WEAVE_MAX_WORLD];
  if (harness_allgather(hr, &ok, votes, sizeof(int))) return 0;
  for (int r = 0; r < hr->world; ++r) ok &= votes[r];
  return ok;
}

/* fp8: rank r's host scales (malloc'd; TENSOR one each, ROW [M] and [N]; values near 1, per rank). */
static void bench_scales(const bench_t *b, int r, float **sa, float **sb) {
  const int row = b->scale_mode == WEAVE_SCALE_ROW;
  const size_t na = row ? (size_t)b->M : 1, nb = row ? (size_t)b->N : 1;
  *sa = (float *)malloc(sizeof(float) * na);
  *sb = (float *)malloc(sizeof(float) * nb);
  for (size_t i = 0; i < na; ++i) (*sa)[i] = 0.5f + 0.03125f * (float)((i * 7 + (size_t)r * 5) % 32);
  for (size_t j = 0; j < nb; ++j) (*sb)[j] = 0.5f + 0.03125f * (float)((j * 3 + (size_t)r * 11) % 32);
}

/* Input sets rotated so that all ranks' sets together exceed twice the L2. */
static void inputs_create(rank_run_t *x) {
  bench_t *b = x->b;
  weave_device_info_t di;
  weave_team_device_info(x->hr->team, &di);
  if (x->hr->rank == b->my_rank) {
    snprintf(b->device_name, sizeof(b->device_name), "%s", di.name);
    b->sm_count = di.sm_count;
  }
  size_t set_bytes = (x->a_n + x->b_n) * x->elt;
  x->nsets = (int)((2 * di.l2_bytes) / (set_bytes * (size_t)di.ranks_on_device) + 1);
  if (x->nsets > MAX_SETS) x->nsets = MAX_SETS;
  void *hA = malloc(x->a_n * x->elt), *hB = malloc(x->b_n * x->elt);
  const int r = x->hr->rank;
  for (int s = 0; s < x->nsets; ++s) {
    x->dA[s] = harness_dev_alloc(x->a_n * x->elt);
    x->dB[s] = harness_dev_alloc(x->b_n * x->elt);
    weave_fill_random(b->dtype, hA, x->a_n, b->seed + (uint64_t)(r * 16 + s) * 2);
    weave_fill_random(b->dtype, hB, x->b_n, b->seed + (uint64_t)(r * 16 + s) * 2 + 1);
    harness_upload(x->dA[s], hA, x->a_n * x->elt);
    harness_upload(x->dB[s], hB, x->b_n * x->elt);
  }
  free(hA);
  free(hB);
  x->dC = harness_dev_alloc((size_t)x->rows * b->N * x->oelt);
  x->hC = (unsigned char *)malloc((size_t)x->rows * b->N * x->oelt + 1);
  if (b->scale_mode != WEAVE_SCALE_NONE) {
    float *sa, *sb;
    bench_scales(b, r, &sa, &sb);
    const int row = b->scale_mode == WEAVE_SCALE_ROW;
    x->dsa = (float *)harness_dev_alloc(sizeof(float) * (row ? (size_t)b->M : 1));
    x->dsb = (float *)harness_dev_alloc(sizeof(float) * (row ? (size_t)b->N : 1));
    harness_upload(x->dsa, sa, sizeof(float) * (row ? (size_t)b->M : 1));
    harness_upload(x->dsb, sb, sizeof(float) * (row ? (size_t)b->N : 1));
    free(sa);
    free(sb);
  }
}

/* Set 0 of every rank is needed: every rank regenerates the others' set 0 on the host (cheap next
 * to the fp64 product), computes 3 ranges of 4 of its rows in fp64, and all its rows with cuBLASLt
 * over the gathered K (fp32 output). */
static void reference_create(rank_run_t *x) {
  bench_t *b = x->b;
  const int world = x->hr->world, rows = x->rows;
  x->check_rows = rows < 4 ? rows : 4;
  x->check_begin[0] = 0;
  x->check_begin[1] = rows / 2;
  x->check_begin[2] = rows > 4 ? rows - 4 : 0;
  void *As[WEAVE_MAX_WORLD], *Bs[WEAVE_MAX_WORLD];
  for (int s = 0; s < world; ++s) {
    As[s] = malloc(x->a_n * x->elt);
    Bs[s] = malloc(x->b_n * x->elt);
    weave_fill_random(b->dtype, As[s], x->a_n, b->seed + (uint64_t)(s * 16) * 2);
    weave_fill_random(b->dtype, Bs[s], x->b_n, b->seed + (uint64_t)(s * 16) * 2 + 1);
  }
  x->ref = (double *)malloc(sizeof(double) * 3 * (size_t)x->check_rows * b->N + 1);
  if (b->dtype == WEAVE_FP8_E4M3) {
    /* fp64 of the dequantized inputs with each rank's scales, and the fp8 accumulation bound */
    float *sa[WEAVE_MAX_WORLD], *sb[WEAVE_MAX_WORLD];
    for (int s = 0; s < world; ++s) bench_scales(b, s, &sa[s], &sb[s]);
    x->bound = (double *)malloc(sizeof(double) * 3 * (size_t)x->check_rows * b->N + 1);
    for (int i = 0; i < 3; ++i)
      weave_ref_gemm_rs_scaled(
          b->M, b->N, x->K, world, b->dtype, b->out, b->layout, 1.0, (weave_scale_mode_t)b->scale_mode,
          WEAVE_REF_FP8_RANDOM_SIGNS | (b->fp8_accum == WEAVE_FP8_ACCUM_FAST ? WEAVE_REF_FP8_FAST : 0),
          (const float *const *)sa, (const float *const *)sb, (const void *const *)As, (const void *const *)Bs, NULL,
          x->row_begin + x->check_begin[i], x->check_rows, x->ref + (size_t)i * x->check_rows * b->N,
          x->bound + (size_t)i * x->check_rows * b->N);
    for (int s = 0; s < world; ++s) {
      free(sa[s]);
      free(sb[s]);
    }
  } else {
    for (int i = 0; i < 3; ++i)
      weave_ref_gemm_rs(b->M, b->N, x->K, world, b->dtype, b->layout, 1.0, (const void *const *)As,
                        (const void *const *)Bs, NULL, x->row_begin + x->check_begin[i], x->check_rows,
                        x->ref + (size_t)i * x->check_rows * b->N);
    x->ref_full = harness_ref_rows_lt(b->N, x->K, world, b->dtype, b->layout, 1.0f, (const void *const *)As,
                                      (const void *const *)Bs, NULL, x->row_begin, rows);
    if (!x->ref_full) fprintf(stderr, "rank %d: no cuBLASLt reference: every variant counts as wrong\n", x->hr->rank);
  }
  for (int s = 0; s < world; ++s) {
    free(As[s]);
    free(Bs[s]);
  }
}

/* Plan creation is collective and agreed inside: it fails on every rank or on none. */
static void plans_create(rank_run_t *x) {
  bench_t *b = x->b;
  for (int vi = 0; vi < b->nv; ++vi) {
    const bench_variant_t *v = &b->v[vi];
    weave_gemm_rs_desc_t d = WEAVE_GEMM_RS_DESC_INIT;
    d.dtype = b->dtype;
    d.scale_mode = (weave_scale_mode_t)b->scale_mode;
    d.fp8_accum = (weave_fp8_accum_t)b->fp8_accum;
    d.b_layout = b->layout;
    d.strategy = v->strategy;
    d.reduce = v->reduce;
    d.fp32_slots = v->slot == WEAVE_FP32 && b->dtype != WEAVE_FP32;
    d.tile_order = b->order;
    d.gemm_blocks = v->gemm_blocks;
    d.comm_blocks = v->comm_blocks;
    d.trace = v->trace;
    if (b->tune && vi == 0) { /* the key --tune stores under: the swept reduction and slot type */
      weave_gemm_rs_desc_t k = d;
      k.strategy = WEAVE_STRATEGY_AUTO;
      k.reduce = (weave_reduce_t)b->tune_reduce;
      k.fp32_slots = b->tune_reduce == WEAVE_REDUCE_DETERMINISTIC && b->tune_fp32_slots;
      bench_tune_key(x->hr->team, b->M, b->N, x->K, &k, &x->rec->tune_key);
    }
    const double t0 = harness_now_ms();
    const weave_result_t created = weave_gemm_rs_plan_create(x->hr->team, b->M, b->N, x->K, &d, &x->plan[vi]);
    x->rec->create_ms[vi] = harness_now_ms() - t0;
    if (created != WEAVE_SUCCESS) {
      fprintf(stderr, "rank %d %s: %s\n", x->hr->rank, v->label, weave_get_last_error(x->hr->team));
      x->plan[vi] = NULL;
      x->rec->failed[vi] = 1;
      continue;
    }
    weave_gemm_rs_plan_info(x->plan[vi], &x->rec->info[vi]);
  }
}

/* One call of variant vi on poisoned output, checked against the references. 1 when it ran. */
static int validate(rank_run_t *x, int vi) {
  bench_t *b = x->b;
  const size_t out_bytes = (size_t)x->rows * b->N * x->oelt;
  harness_poison(x->dC, out_bytes, x->hr->stream);
  weave_gemm_rs_execute_scaled(x->plan[vi], x->dA[0], x->dB[0], x->dsa, x->dsb, NULL, x->dC, x->hr->stream);
  int ran = weave_team_sync(x->hr->team, x->hr->stream) == WEAVE_SUCCESS;
  if (!ran) fprintf(stderr, "rank %d %s: %s\n", x->hr->rank, b->v[vi].label, weave_get_last_error(x->hr->team));
  harness_download(x->hC, x->dC, out_bytes);
  double atol, rtol;
  weave_tolerance(b->out, b->K_total, &atol, &rtol); /* fp8: scales < 1.5, the bound covers the rest */
  long wrong = !ran;
  double relerr = 0;
  for (int i = 0; i < 3 && x->check_rows > 0; ++i) {
    weave_check_t chk;
    weave_check_result_ex(
        b->out, x->hC + (size_t)x->check_begin[i] * b->N * x->oelt, x->ref + (size_t)i * x->check_rows * b->N,
        x->bound ? x->bound + (size_t)i * x->check_rows * b->N : NULL, (size_t)x->check_rows * b->N, atol, rtol, &chk);
    wrong += (long)chk.wrong;
    if (!(chk.rel_err <= relerr)) relerr = chk.rel_err; /* NaN sticks */
  }
  if (x->ref_full) {
    weave_check_t chk;
    weave_check_result(b->out, x->hC, x->ref_full, (size_t)x->rows * b->N, atol, rtol, &chk);
    wrong += (long)chk.wrong;
    if (!(chk.rel_err <= relerr)) relerr = chk.rel_err;
  } else if (b->dtype != WEAVE_FP8_E4M3) {
    wrong += 1;
  }
  x->rec->wrong[vi] = wrong;
  x->rec->relerr[vi] = relerr;
  return ran;
}

/* Timed calls, interleaved over the variants (one call of each per iteration, in an order shuffled
 * per iteration: a call's time depends on the one before it), so that clock and power drift biases
 * them all alike (timed one block after the other, two identical variants were
 * seen 20% apart); hence every plan is alive for the whole run. vi = -1 is
 * weave_gemm alone on all blocks (1 rank: the fused kernel's protocol overhead is measured against
 * it), vi = -2 cuBLASLt alone on the local shape (the baseline's GEMM part, from which the summary
 * derives the reduce-scatter's time). live[] does not change in the loop, so all ranks make the
 * same calls in the same order; consecutive calls take different input sets (the previous call's
 * inputs may still sit in L2), the counter advancing alike on every rank. */
static void time_variants(rank_run_t *x) {
  bench_t *b = x->b;
  harness_rank_t *hr = x->hr;
  void *gemm_out = harness_dev_alloc((size_t)b->M * b->N * x->oelt);
  char lt_msg[256] = "";
  harness_lt_t *lt =
      harness_lt_create_scaled(b->M, b->N, x->K, b->dtype, b->out, b->layout, (weave_scale_mode_t)b->scale_mode,
                               (weave_fp8_accum_t)b->fp8_accum, lt_msg, sizeof(lt_msg));
  weave_gemm_args_t ga = WEAVE_GEMM_ARGS_INIT; /* weave_gemm alone (vi = -1) */
  ga.M = b->M;
  ga.N = b->N;
  ga.K = x->K;
  ga.dtype = b->dtype;
  ga.b_layout = b->layout;
  ga.scale_mode = (weave_scale_mode_t)b->scale_mode;
  ga.scale_a = x->dsa;
  ga.scale_b = x->dsb;
  ga.C = gemm_out;
  ga.fp8_accum = (weave_fp8_accum_t)b->fp8_accum;
  if (!lt) fprintf(stderr, "rank %d: cuBLASLt alone not measured: %s\n", hr->rank, lt_msg);
  const int lt_live = all_ok(hr, lt != NULL);
  x->rec->lt_failed = !lt_live;
  harness_timer_t *tm = harness_timer_create();
  int reported[MAX_VARIANTS] = {0}, call = 0, order[MAX_VARIANTS + 2];
  unsigned rng = 12345u; /* the same order on every rank: the calls are collective */
  for (int it = 0; it < b->warmup + b->iters; ++it) {
    /* cuBLASLt alone (-2), weave's GEMM alone (-1) and the variants, in an order shuffled per round */
    harness_shuffle(order, b->nv + 2, &rng);
    for (int q = 0; q < b->nv + 2; ++q) {
      const int vi = order[q] - 2;
      if ((vi >= 0 && !x->live[vi]) || (vi == -2 && !lt_live)) continue;
      const int s = call++ % x->nsets;
      weave_barrier(hr->team); /* ranks start each call together */
      harness_timer_start(tm, hr->stream);
      if (vi == -2) {
        harness_lt_run_scaled(lt, 1.0f, x->dA[s], x->dB[s], x->dsa, x->dsb, gemm_out, hr->stream);
      } else if (vi == -1) {
        ga.A = x->dA[s];
        ga.B = x->dB[s];
        weave_gemm_ex(&ga, hr->stream);
      } else {
        weave_gemm_rs_execute_scaled(x->plan[vi], x->dA[s], x->dB[s], x->dsa, x->dsb, NULL, x->dC, hr->stream);
      }
      harness_timer_stop(tm, hr->stream);
      float ms = harness_timer_ms(tm);
      /* The team's device error record is shared by all plans: read it after every call (outside the
       * timed span) so that a timeout is charged to the plan that ran. */
      if (vi >= 0 && weave_team_sync(hr->team, hr->stream) != WEAVE_SUCCESS) {
        if (!reported[vi])
          fprintf(stderr, "rank %d %s: %s\n", hr->rank, b->v[vi].label, weave_get_last_error(hr->team));
        reported[vi] = 1;
        x->rec->failed[vi] = 1;
      }
      if (it >= b->warmup) {
        double *row = vi == -2 ? x->rec->lt_alone_ms : vi == -1 ? x->rec->gemm_alone_ms : x->rec->ms[vi];
        row[it - b->warmup] = ms;
      }
    }
  }
  harness_timer_destroy(tm);
  harness_lt_destroy(lt);
  harness_dev_free(gemm_out);
}

/* The traced variant's last call, from every rank to the process of rank 0. */
static void gather_trace(rank_run_t *x) {
  bench_t *b = x->b;
  harness_rank_t *hr = x->hr;
  int vi = -1;
  for (int i = 0; i < b->nv; ++i)
    if (b->v[i].trace && x->plan[i]) vi = i;
  if (vi < 0) return; /* the same on every rank: the plans were agreed */
  const weave_gemm_rs_info_t *in = &x->rec->info[vi];
  size_t cap = 4 * (size_t)(in->tiles_total + in->tiles_owned) + 256, got = 0;
  weave_trace_event_t *mine = (weave_trace_event_t *)calloc(cap, sizeof(*mine));
  if (weave_gemm_rs_trace_fetch(x->plan[vi], hr->stream, mine, cap, &got) != WEAVE_SUCCESS) got = 0;
  size_t n = got < cap ? got : cap, counts[WEAVE_MAX_WORLD], max_n = 0;
  if (harness_allgather(hr, &n, counts, sizeof(n)) == 0) {
    for (int r = 0; r < hr->world; ++r) max_n = counts[r] > max_n ? counts[r] : max_n;
    weave_trace_event_t *all = (weave_trace_event_t *)calloc((size_t)hr->world * (max_n ? max_n : 1), sizeof(*all));
    weave_trace_event_t *out = (weave_trace_event_t *)calloc(max_n ? max_n : 1, sizeof(*out));
    memcpy(out, mine, n * sizeof(*out));
    if (harness_allgather(hr, out, all, max_n * sizeof(*all)) == 0 && hr->rank == b->my_rank)
      for (int r = 0; r < hr->world; ++r) {
        b->tev[r] = (weave_trace_event_t *)calloc(counts[r] + 1, sizeof(*all));
        memcpy(b->tev[r], all + (size_t)r * max_n, counts[r] * sizeof(*all));
        b->tcount[r] = counts[r];
      }
    b->traced_vi = vi;
    free(out);
    free(all);
  }
  free(mine);
}

static void rank_run_free(rank_run_t *x) {
  for (int vi = 0; vi < x->b->nv; ++vi) /* collective: the same plans in the same order on every rank */
    if (x->plan[vi]) weave_gemm_rs_plan_destroy(x->plan[vi]);
  for (int s = 0; s < x->nsets; ++s) {
    harness_dev_free(x->dA[s]);
    harness_dev_free(x->dB[s]);
  }
  harness_dev_free(x->dC);
  if (x->dsa) harness_dev_free(x->dsa);
  if (x->dsb) harness_dev_free(x->dsb);
  free(x->hC);
  free(x->ref);
  free(x->ref_full);
  free(x->bound);
  free(x->rec);
}

static int rank_fn(harness_rank_t *hr) {
  bench_t *b = (bench_t *)hr->user;
  rank_run_t x;
  memset(&x, 0, sizeof(x));
  x.b = b;
  x.hr = hr;
  x.rec = (rank_record_t *)calloc(1, sizeof(*x.rec));
  x.K = b->K_total / hr->world;
  x.elt = weave_dtype_size(b->dtype);
  x.oelt = weave_dtype_size(b->out);
  x.a_n = (size_t)b->M * x.K;
  x.b_n = (size_t)x.K * b->N;
  weave_row_split(b->M, hr->world, hr->rank, &x.row_begin, &x.rows);
  inputs_create(&x);
  if (b->check) reference_create(&x);
  plans_create(&x);
  for (int vi = 0; vi < b->nv; ++vi) {
    int ok = x.plan[vi] != NULL;
    if (ok && b->check) ok = validate(&x, vi);
    x.live[vi] = all_ok(hr, ok); /* every rank votes: no short circuit */
    if (!x.live[vi]) x.rec->failed[vi] = 1;
  }
  time_variants(&x);
  gather_trace(&x);
  /* Every rank's record to the process of rank 0 (with threads: into the one bench_t, by rank 0). */
  rank_record_t *all = (rank_record_t *)malloc(sizeof(rank_record_t) * (size_t)hr->world);
  int rc = harness_allgather(hr, x.rec, all, sizeof(rank_record_t));
  if (rc == 0 && hr->rank == b->my_rank) memcpy(b->rec, all, sizeof(rank_record_t) * (size_t)hr->world);
  free(all);
  rank_run_free(&x);
  return rc;
}

/* ------------------------------------------------------------------------------------------------
 * the report
 * ---------------------------------------------------------------------------------------------- */
/* Per call: the slowest rank; then the median over calls. vi = -1: weave_gemm alone, -2: cuBLASLt. */
static double call_median(const bench_t *b, int vi) {
  double v[MAX_ITERS];
  for (int i = 0; i < b->iters; ++i) {
    v[i] = 0;
    for (int r = 0; r < b->world; ++r) {
      const rank_record_t *rec = &b->rec[r];
      double t = vi == -2 ? rec->lt_alone_ms[i] : vi == -1 ? rec->gemm_alone_ms[i] : rec->ms[vi][i];
      if (t > v[i]) v[i] = t;
    }
  }
  return harness_median(v, b->iters);
}

static int variant_failed(const bench_t *b, int vi) {
  int f = 0;
  for (int r = 0; r < b->world; ++r) f |= b->rec[r].failed[vi];
  return f;
}

static long variant_wrong(const bench_t *b, int vi, double *relerr) {
  long w = 0;
  *relerr = 0;
  for (int r = 0; r < b->world; ++r) {
    w += b->rec[r].wrong[vi];
    if (!(b->rec[r].relerr[vi] <= *relerr)) *relerr = b->rec[r].relerr[vi];
  }
  return w;
}

static int distinct_gpus(const bench_t *b) {
  int gpus = 0;
  for (int r = 0; r < b->world; ++r) {
    int seen = 0;
    for (int q = 0; q < r; ++q) seen |= b->devices[q] == b->devices[r];
    gpus += !seen;
  }
  return gpus;
}

static void write_trace(bench_t *b) {
  char title[512], csv[600];
  snprintf(title, sizeof(title), "weave fused GEMM+RS M=%d N=%d K=%d, %d rank(s), %s", b->M, b->N, b->K_total, b->world,
           b->device_name);
  const weave_trace_event_t *per[WEAVE_MAX_WORLD];
  for (int r = 0; r < b->world; ++r) per[r] = b->tev[r];
  snprintf(csv, sizeof(csv), "%s.csv", b->trace_path);
  if (weave_trace_write_json(b->trace_path, per, b->tcount, b->world, title) ||
      weave_trace_write_csv(csv, per, b->tcount, b->world, title))
    fprintf(stderr, "weave-bench: cannot write %s / %s\n", b->trace_path, csv);
  else
    printf("# trace of the last '%s' call: %s (ui.perfetto.dev), %s (scripts/trace_png.sh)\n", b->v[b->traced_vi].label,
           b->trace_path, csv);
  for (int r = 0; r < b->world; ++r) {
    weave_trace_summary_t s;
    const weave_gemm_rs_info_t *in = &b->rec[r].info[b->traced_vi];
    weave_trace_summary(b->tev[r], b->tcount[r], in->gemm_blocks, in->comm_blocks, &s);
    weave_trace_print_summary(stdout, r, &s);
    free(b->tev[r]);
    b->tev[r] = NULL;
    b->tcount[r] = 0;
  }
}

/* The table of one M (and its JSON rows); returns the wrong and failed count. */
static long report(bench_t *b, json_writer_t *jw) {
  const int gpus = distinct_gpus(b);
  const double flops = 2.0 * b->M * (double)b->N * b->K_total;
  const double t_gemm = call_median(b, -1), t_base = call_median(b, 0);
  const int lt_ok = !b->rec[0].lt_failed;
  const double t_lt = lt_ok ? call_median(b, -2) : 0.0; /* 0: not measured */
  printf("# %s, %d SMs, %d rank(s) on %d GPU(s)%s; weave_gemm alone (K_local, all blocks): %.3f ms\n", b->device_name,
         b->sm_count, b->world, gpus, b->launched ? ", one process each" : "", t_gemm);
  printf("#%8s %-18s %6s %6s %10s %10s %9s %9s %8s %8s %9s\n", "M", "strategy", "gemm", "comm", "time(ms)", "TFLOP/s",
         "algbw", "busbw", "#wrong", "speedup", b->check ? "relerr" : "");
  long bad = 0;
  double best = 1e30;
  int best_v = 0;
  for (int vi = 0; vi < b->nv; ++vi) {
    const bench_variant_t *v = &b->v[vi];
    if (variant_failed(b, vi)) {
      printf(" %8d %-18s %s\n", b->M, v->label, "failed (see the message above)");
      bad++;
      continue;
    }
    double relerr, t = call_median(b, vi);
    long wrong = variant_wrong(b, vi, &relerr);
    double tf = flops / gpus / (t * 1e-3) / 1e12;
    double algbw = (double)b->M * b->N * weave_dtype_size(b->out) / (t * 1e-3) / 1e9;
    double busbw = algbw * (b->world - 1) / b->world;
    const weave_gemm_rs_info_t *in = &b->rec[0].info[vi];
    char label[sizeof(v->label) + 16];
    if (v->strategy == WEAVE_STRATEGY_AUTO) /* auto shows what it runs */
      snprintf(label, sizeof(label), "auto->%s", weave_strategy_name(in->strategy));
    else
      snprintf(label, sizeof(label), "%s", v->label);
    printf(" %8d %-18s %6d %6d %10.3f %10.1f %9.1f %9.1f %8ld %7.2fx", b->M, label, in->gemm_blocks, in->comm_blocks, t,
           tf, algbw, busbw, wrong, t_base / t);
    if (b->check) printf(" %9.2e", relerr);
    printf("\n");
    bad += wrong;
    if (v->strategy != WEAVE_STRATEGY_AUTO && t < best) {
      best = t;
      best_v = vi;
    }
    if (jw) {
      json_begin_object(jw);
      json_kv_int(jw, "M", b->M);
      json_kv_string(jw, "strategy", v->label);
      json_kv_int(jw, "gemm_blocks", in->gemm_blocks);
      json_kv_int(jw, "comm_blocks", in->comm_blocks);
      json_kv_number(jw, "time_ms", t);
      json_kv_number(jw, "tflops_per_gpu", tf);
      json_kv_number(jw, "algbw_GBps", algbw);
      json_kv_number(jw, "busbw_GBps", busbw);
      json_kv_int(jw, "wrong", wrong);
      json_kv_number(jw, "speedup", t_base / t);
      json_kv_number(jw, "rel_err", relerr);
      json_kv_number(jw, "gemm_alone_ms", t_gemm);
      json_kv_number(jw, "lt_alone_ms", t_lt);
      json_kv_string(jw, "device", b->device_name);
      json_kv_int(jw, "gpus", gpus);
      json_kv_number(jw, "create_ms", b->rec[0].create_ms[vi]);
      if (v->strategy == WEAVE_STRATEGY_AUTO) {
        json_kv_string(jw, "auto_strategy", weave_strategy_name(in->strategy));
        json_kv_string(jw, "chosen_by", chosen_by_names[in->chosen_by]);
        json_kv_number(jw, "choose_ms", in->choose_ms);
        json_kv_string(jw, "why", in->why);
      }
      json_end_object(jw);
    }
  }
  if (lt_ok && !variant_failed(b, 0)) {
    /* The baseline is GEMM then reduce-scatter: t_rs = t_baseline - t_gemm (cuBLASLt alone), and a
     * fused variant hides (t_gemm + t_rs - t_fused) / t_rs of it (1: all, 0: none, < 0: slower). */
    double t_rs = t_base - t_lt;
    printf("# cuBLASLt alone (local GEMM, all ranks at once): %.3f ms; reduce-scatter part of the baseline: %.3f ms\n",
           t_lt, t_rs);
    if (t_rs > 0.01 * t_base)
      for (int vi = 0; vi < b->nv; ++vi)
        if (!variant_failed(b, vi) && b->v[vi].strategy == WEAVE_STRATEGY_FUSED)
          printf("#   %-18s hides %5.2f of the reduce-scatter\n", b->v[vi].label,
                 (t_lt + t_rs - call_median(b, vi)) / t_rs);
  }
  if (b->trace_path && b->tcount[0]) write_trace(b);
  for (int vi = 0; vi < b->nv; ++vi) /* auto's choice beside the measured variants */
    if (b->v[vi].strategy == WEAVE_STRATEGY_AUTO && !variant_failed(b, vi)) {
      const weave_gemm_rs_info_t *in = &b->rec[0].info[vi];
      double same = -1; /* the creation of an explicit plan of the strategy auto chose */
      for (int vj = 0; vj < b->nv; ++vj)
        if (b->v[vj].strategy == in->strategy && b->v[vj].reduce == WEAVE_REDUCE_DETERMINISTIC && same < 0)
          same = b->rec[0].create_ms[vj];
      printf(
          "# auto -> %s, %s in %.1f ms (plan creation %.1f ms; %.1f ms for the chosen strategy given "
          "explicitly): %s\n",
          weave_strategy_name(in->strategy), chosen_by_names[in->chosen_by], in->choose_ms, b->rec[0].create_ms[vi],
          same, in->why);
    }
  if (b->tune) {
    const bench_variant_t *v = &b->v[best_v];
    const weave_gemm_rs_info_t *in = &b->rec[0].info[best_v];
    const int fused = v->strategy == WEAVE_STRATEGY_FUSED;
    char path[1024] = "", why[600] = "";
    if (bench_tune_record(&b->rec[0].tune_key, v->strategy, fused ? in->gemm_blocks : 0, fused ? in->comm_blocks : 0,
                          t_base / best, path, sizeof(path), why, sizeof(why)) == 0)
      printf("# tune: %s %s G=%d C=%d (%.2fx) -> %s\n", v->label, weave_strategy_name(v->strategy),
             fused ? in->gemm_blocks : 0, fused ? in->comm_blocks : 0, t_base / best, path);
    else
      printf("# tune: best %s (%.2fx), not stored: %s\n", v->label, t_base / best, why);
  }
  return bad;
}

/* ------------------------------------------------------------------------------------------------
 * main
 * ---------------------------------------------------------------------------------------------- */
static void print_header(const bench_t *b, const char *heap_note) {
  printf("# weave-bench  GEMM + ReduceScatter   %s", weave_dtype_name(b->dtype));
  if (b->dtype == WEAVE_FP8_E4M3)
    printf(" -> %s, %s scales (each rank its own), %s accumulation (weave and the baseline's cuBLASLt fp8)",
           weave_dtype_name(b->out), scale_names[b->scale_mode], accum_names[b->fp8_accum]);
  printf("\n");
  printf("# M %d..%d (x%.2g)  N %d  K_total %d  ranks %d (%s)  B %s  iters %d  warmup %d  check %d\n", b->min_M,
         b->max_M, b->factor, b->N, b->K_total, b->world, b->launched ? "one process each" : "threads of one process",
         b->layout == WEAVE_LAYOUT_ROW ? "[K,N]" : "[N,K]", b->iters, b->warmup, b->check);
  printf("# rank -> device:");
  for (int r = 0; r < b->world; ++r) printf(" %d->%d", r, b->devices[r]);
  printf("\n# symmetric heap per rank: %s\n", heap_note);
  printf(
      "# variants timed interleaved (one call of each per iteration, order shuffled per iteration), median over "
      "iterations of the slowest rank\n");
}

/* What a run would do, without a GPU: the options that choose the variants, the variants in the
 * order they are timed, then the plan and the roofline. */
static void print_dry(const bench_t *b, const variant_options_t *vo, const char *why) {
  printf("# %s: printing the plan and roofline only\n", why);
  printf(
      "# options: --strategy %s --reduce %s --slot %s --order %s --scales %s --fp8-accum %s --gemm-blocks %d --comm-blocks %d\n",
      strategy_names[vo->strategy], reduce_names[vo->reduce], slot_names[vo->fp32_slot], order_names[b->order],
      scale_names[b->scale_mode], accum_names[b->fp8_accum], vo->gemm_blocks, vo->comm_blocks);
  printf("# variants:");
  for (int vi = 0; vi < b->nv; ++vi) printf(" %s", b->v[vi].label);
  printf("\n");
  bench_print_plan(stdout, b->min_M, b->N, b->K_total, b->world, b->dtype, b->layout, b->order);
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "gemm"))
      return weave_bench_gemm_main(argc, argv);
    else if (!strcmp(argv[i], "--op") && !strcmp(argv[i + 1], "ag_gemm"))
      return weave_bench_ag_main(argc, argv);
  static bench_t b;
  variant_options_t vo;
  parse_options(argc, argv, &b, &vo);
  if (bench_check_env()) {
    fprintf(stderr, "weave-bench: %s\n", weave_get_last_error(NULL));
    return 2;
  }

  /* Under a launcher the job fixes the ranks, and only the process of rank 0 prints. */
  const int ndev = b.dry_run ? 0 : harness_device_count();
  const int launched = ndev > 0 ? harness_launched_world() : 0;
  if (launched < 0) return 1;
  if (launched) {
    if (vo.ranks_given && b.world != launched) {
      fprintf(stderr, "weave-bench: -g %d, but the launcher started %d ranks\n", b.world, launched);
      return 2;
    }
    b.world = launched;
    b.launched = 1;
    b.my_rank = harness_launched_rank();
    if (b.K_total % b.world) {
      fprintf(stderr, "weave-bench: -K %d is not a multiple of the launcher's %d ranks\n", b.K_total, b.world);
      return 2;
    }
    if (b.my_rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
  }
  if (!b.ndevices)
    for (int r = 0; r < b.world; ++r) b.devices[r] = ndev ? r % ndev : 0;
  add_variants(&b, &vo, ndev);
  char heap_note[160];
  size_heap(&b, heap_note, sizeof(heap_note));
  print_header(&b, heap_note);
  if (ndev == 0) {
    print_dry(&b, &vo, b.dry_run ? "--dry-run" : "no CUDA device visible (the driver reports none)");
    return 0;
  }

  FILE *jf = NULL;
  json_writer_t jw;
  if (b.json_path && b.my_rank == 0) {
    if (!(jf = fopen(b.json_path, "w"))) {
      fprintf(stderr, "weave-bench: cannot write %s\n", b.json_path);
      return 2;
    }
    json_open(&jw, jf);
    json_begin_object(&jw);
    json_kv_string(&jw, "bench", "gemm_rs");
    json_kv_string(&jw, "dtype", weave_dtype_name(b.dtype));
    json_kv_int(&jw, "N", b.N);
    json_kv_int(&jw, "K_total", b.K_total);
    json_kv_int(&jw, "ranks", b.world);
    json_kv_string(&jw, "ranks_are", b.launched ? "processes" : "threads");
    json_key(&jw, "rows");
    json_begin_array(&jw);
  }
  long bad = 0;
  for (long M = b.min_M; M <= b.max_M; M = (long)ceil(M * b.factor)) {
    b.M = (int)M;
    b.seed = harness_seed();
    int rc = harness_run(b.world, b.devices, NULL, rank_fn, &b);
    if (rc == HARNESS_SKIP) {
      print_dry(&b, &vo, "no usable device");
      return 0;
    }
    if (rc) return 1;
    bad += report(&b, jf ? &jw : NULL);
    if (M >= b.max_M) break;
  }
  if (jf) {
    json_end_array(&jw);
    json_end_object(&jw);
    fclose(jf);
  }
  printf("# Out of bounds values : %ld %s\n", bad, bad ? "FAILED" : "OK");
  return bad ? 1 : 0;
}
