/*
 * Internal host-side declarations shared by the runtime's C files: the team object, the bootstrap
 * interface, error/log helpers and the environment table.
 */
#ifndef WEAVE_INTERNAL_H
#define WEAVE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "weave.h"
#include "runtime/heap.h"

/* ---- errors and logging ------------------------------------------------------------------ */
typedef enum { WEAVE_LOG_NONE = 0, WEAVE_LOG_WARN = 1, WEAVE_LOG_INFO = 2, WEAVE_LOG_TRACE = 3 } weave_log_level_t;

/* Records `fmt` as the last error of `team` (or of the calling thread when team is NULL), logs it at
 * WARN, and returns `code` so call sites read `return weave_fail(team, CODE, "...", ...)`. */
weave_result_t weave_fail(weave_team_t team, weave_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void weave_log(weave_log_level_t level, const weave_team_t team, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
weave_log_level_t weave_log_level(void);

#define WEAVE_CHECK(call)                                                                          \
  do {                                                                                             \
    weave_result_t weave_check_rc_ = (call);                                                       \
    if (weave_check_rc_ != WEAVE_SUCCESS) return weave_check_rc_;                                  \
  } while (0)

/* ---- environment ---------------------------------------------------------------------------- */
typedef struct {
  weave_log_level_t debug;
  size_t heap_size;
  int timeout_ms;
  int info;
  char tune_file[512];
  char trace[512];
  int tma_epilogue;
} weave_env_t;

/* Reads every WEAVE_* variable (at each team/plan creation); a bad value is WEAVE_ERROR_ENV (message in
 * weave_get_last_error(NULL)), never a silent default. */
weave_result_t weave_env_load(weave_env_t *env);
/* Parsers, exposed for tests. Return 0 on success, -1 on a malformed value. */
int weave_parse_size(const char *s, size_t *out);     /* 123, 64K, 512M, 2G, 1T */
int weave_parse_int(const char *s, long lo, long hi, long *out);
/* A Hopper GEMM knob (WEAVE_HGEMM_*, src/env.c): its value, or its default when unset, empty or
 * invalid (with a warning). */
int weave_hgemm_knob(const char *name);
int weave_parse_bool(const char *s, int *out);        /* 0/1/true/false/yes/no/on/off */
int weave_parse_log_level(const char *s, weave_log_level_t *out); /* NONE|WARN|INFO|TRACE */

/* ---- bootstrap ----------------------------------------------------------------------------- */
struct weave_bootstrap {
  int world;
  int timeout_ms;
  /* Every rank passes `bytes` bytes; out receives world * bytes, rank-major. */
  weave_result_t (*allgather)(weave_bootstrap_t *bs, int rank, const void *in, void *out, size_t bytes);
  weave_result_t (*barrier)(weave_bootstrap_t *bs, int rank);
  void (*destroy)(weave_bootstrap_t *bs);
  void *impl;
};

#define WEAVE_BOOTSTRAP_MAX_BYTES 1024 /* per rank per allgather */

/* ---- team ---------------------------------------------------------------------------------- */
struct weave_team {
  weave_bootstrap_t *bootstrap;
  int rank, world;
  weave_device_info_t info;
  size_t heap_size;
  int timeout_ms;
  void *heap_base;                    /* this rank's heap (device memory) */
  void *peer_bases[WEAVE_MAX_WORLD];  /* every rank's heap as addressable from this rank */
  void **d_bases;                     /* device copy of peer_bases */
  weave_heap_t heap;
  char last_error[1024];
};

/* Collective agreement: every rank contributes `local`; returns the first non-success code of any
 * rank (so all ranks fail together) and names the failing rank in the last error. */
weave_result_t weave_team_agree(weave_team_t team, weave_result_t local);
/* Collective: checks that every rank passed the same `bytes` of `what`. */
weave_result_t weave_team_check_same(weave_team_t team, const void *data, size_t bytes, const char *what);

#endif /* WEAVE_INTERNAL_H */
