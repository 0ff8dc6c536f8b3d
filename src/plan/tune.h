/*
 * The tuning cache: what AUTO plans chose for a GPU, a team and a problem, kept on disk so the
 * candidates are timed once per shape (plan/autotune.c) and never again. weave-bench --tune writes
 * the same file.
 *
 * Where: WEAVE_TUNE_FILE when set (read and written as it is), else $XDG_CACHE_HOME/weave/tune.tsv,
 * else $HOME/.cache/weave/tune.tsv. The default folder is made 0700; a default folder or file that
 * is not this user's, or that others may write, is not used (a log line says so).
 *
 * The file: a first line "# weave tune cache 2", then one entry per line, tab-separated, the key
 *   device  sms  driver  runtime  weave  world  ranks_per_device  M_bucket  N  K_local
 *   dtype[+row][+fast][+hk<knobs>]  out_dtype  b_layout  reduce  slots
 * then the choice
 *   strategy  gemm_blocks  comm_blocks  speedup
 * device: the GPU's name (tabs made spaces); sms: its SM count; driver / runtime: the CUDA versions
 * (cudaDriverGetVersion / cudaRuntimeGetVersion); weave: the library's version (new kernels, new
 * measurements); ranks_per_device: ranks sharing this rank's GPU (1 when each has its own; a node or
 * rail team of a plan past one node counts its parent's, so it may exceed world);
 * M_bucket: M rounded up to a power of two; dtype: the inputs' name, for fp8 "+row" (per-row scales,
 * other kernels than none or per-tensor, which share entries) and "+fast" (WEAVE_FP8_ACCUM_FAST), for
 * any dtype "+hk" and the Hopper GEMM's knobs that are not at their defaults (WEAVE_HGEMM_*: other
 * kernels; weave_hgemm_knobs_key, e.g. "+hkc1" for WEAVE_HGEMM_CLUSTER=1);
 * b_layout: row | col; reduce: det | atomic for GEMM + ReduceScatter, gather for AllGather + GEMM
 * (WEAVE_TUNE_GATHER: the op); slots: out | fp32 (desc.fp32_slots; out for AllGather + GEMM);
 * speedup: over the baseline, as measured (1 where the baseline won). One entry per key: a store
 * replaces it.
 *
 * Trust: a file without the first line is foreign and is neither read nor written; a line that does
 * not parse makes the whole file corrupt: it is not read, and the next store starts it afresh. Stores
 * are atomic (a temporary file in the same folder, then rename) under an exclusive lock on
 * "<file>.lock", so concurrent processes never read a torn file and never lose each other's entries.
 */
#ifndef WEAVE_TUNE_H
#define WEAVE_TUNE_H

#include <stddef.h>

#include "weave.h"

#define WEAVE_TUNE_HEADER "# weave tune cache 2"
#define WEAVE_TUNE_GATHER ((weave_reduce_t)2) /* the key's reduce of an AllGather + GEMM plan */
#define WEAVE_TUNE_MAX_ENTRIES 4096           /* a file with more is corrupt (and a store drops the oldest) */

typedef struct {
  char device[128];
  int sms, driver, runtime;
  char weave[16]; /* "major.minor.patch" */
  int world, ranks_per_device;
  int m_bucket, N, K;
  weave_dtype_t dtype, out_dtype; /* out_dtype resolved (never AUTO) */
  weave_layout_t b_layout;
  weave_reduce_t reduce; /* or WEAVE_TUNE_GATHER: an AllGather + GEMM plan */
  int fp32_slots;
  weave_scale_mode_t scale_mode; /* fp8: ROW, else the class of NONE and TENSOR (formats and parses as NONE) */
  weave_fp8_accum_t fp8_accum;
  char knobs[40]; /* the Hopper GEMM's knobs not at their defaults (weave_hgemm_knobs_key); "" when all are */
} weave_tune_key_t;

typedef struct {
  weave_tune_key_t key;
  weave_strategy_t strategy;    /* never AUTO */
  int gemm_blocks, comm_blocks; /* fused: the split; 0 otherwise */
  double speedup;
} weave_tune_entry_t;

typedef enum {
  WEAVE_TUNE_FOUND = 0,
  WEAVE_TUNE_MISSING, /* no file, or no entry for the key */
  WEAVE_TUNE_FOREIGN, /* the file does not start with WEAVE_TUNE_HEADER */
  WEAVE_TUNE_CORRUPT, /* a line does not parse, or too many */
  WEAVE_TUNE_UNSAFE,  /* the default folder or file is another user's or writable by others */
  WEAVE_TUNE_IO       /* cannot create, lock, write or rename */
} weave_tune_status_t;

int weave_tune_bucket(int M);
/* 0 on success, -1 on a malformed line (the header, comments and blank lines are -1 too). */
int weave_tune_parse_line(const char *line, weave_tune_entry_t *e);
void weave_tune_format_line(const weave_tune_entry_t *e, char *buf, size_t len);
int weave_tune_key_equal(const weave_tune_key_t *a, const weave_tune_key_t *b);
/* The cache file: tune_file (WEAVE_TUNE_FILE) when non-empty, else the default under XDG_CACHE_HOME or
 * HOME (*is_default = 1). -1 when there is none (no HOME either) or it does not fit. */
int weave_tune_path(const char *tune_file, char *path, size_t len, int *is_default);
/* The entry for `key` (out untouched unless FOUND); why: the reason of any status but FOUND and
 * MISSING. is_default: the default cache, whose folder and file must be this user's alone. */
weave_tune_status_t weave_tune_lookup(const char *path, int is_default, const weave_tune_key_t *key,
                                      weave_tune_entry_t *out, char *why, size_t why_len);
/* Stores e (replacing the entry of its key) atomically under the file's lock; the default cache's
 * folder is created first (0700). A foreign file is not written; a corrupt one is started afresh
 * (why says so; the status is then FOUND's 0). Lock wait bounded by lock_ms. */
weave_tune_status_t weave_tune_store(const char *path, int is_default, const weave_tune_entry_t *e, int lock_ms,
                                     char *why, size_t why_len);
const char *weave_tune_status_name(weave_tune_status_t s);

#endif
