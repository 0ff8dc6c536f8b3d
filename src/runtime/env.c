/*
 * Every WEAVE_* environment variable is declared once in WEAVE_ENV_TABLE with its type, default and
 * meaning; weave_env_load parses them all and rejects bad values (a typo must not silently become
 * the default). WEAVE_INFO=1 prints the table with the values in effect.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/internal.h"

/*            name               type      default   meaning */
#define WEAVE_ENV_TABLE(X)                                                                                        \
  X(WEAVE_DEBUG, "level", "WARN", "log level: NONE, WARN, INFO or TRACE")                                         \
  X(WEAVE_HEAP_SIZE, "size", "1G", "symmetric heap per rank in bytes (suffix K, M, G, T)")                        \
  X(WEAVE_TIMEOUT_MS, "int", "10000", "bound of every host and device wait, in ms (1..3600000)")                  \
  X(WEAVE_INFO, "bool", "0", "print these variables when a team is created")                                      \
  X(WEAVE_TUNE_FILE, "path", "", "tuning cache (default $XDG_CACHE_HOME/weave/tune.tsv)")                         \
  X(WEAVE_AUTOTUNE, "bool", "1",                                                                                  \
    "AUTO plans time their candidates once per shape when nothing is cached (0: the cost model)")                 \
  X(WEAVE_TRACE, "path", "", "write a per-tile trace of fused calls to this file")                                \
  X(WEAVE_SOCKET_ADDR, "address", "", "this host's address in a unique id (default: first non-loopback IPv4)")    \
  X(WEAVE_BOOTSTRAP_PORT, "port", "", "rendezvous port of weave_bootstrap_create_env (default: MASTER_PORT + 1)") \
  X(WEAVE_TMA_EPILOGUE, "bool", "1", "fused GEMM blocks send tiles to owners with TMA stores (0: plain stores)")  \
  X(WEAVE_HGEMM_PINGPONG, "0..2", "1", "Hopper GEMM schedule: 0 cooperative, 1 auto (cost model), 2 ping-pong")   \
  X(WEAVE_HGEMM_STREAMK, "0..2", "1",                                                                             \
    "Hopper GEMM stream-K tail: 0 off, 1 cost model, 2 whenever tiles are left over")                             \
  X(WEAVE_HGEMM_CLUSTER, "0..3", "0",                                                                             \
    "Hopper GEMM 2-CTA clusters: 0 sharing A (fp8 fp32-accum: small grids), 1 none, 2 sharing B, 3 A always")     \
  X(WEAVE_HGEMM_TMA_STORE, "0..1", "1", "Hopper GEMM writes C through smem and TMA stores (0: from registers)")   \
  X(WEAVE_HGEMM_GROUP_M, "0..4096", "0",                                                                          \
    "Hopper GEMM tile rows per group of its tile order (0: 16 or by footprint; columns under 32 blocks)")         \
  X(WEAVE_HGEMM_PROMOTE_WGS, "2..3", "3",                                                                         \
    "Hopper GEMM fp8 with fp32 accumulation: consumer warpgroups (3: 192 x 128 tiles, 2: 128 x 256)")             \
  X(WEAVE_HGEMM_FP8_NARROW, "0..2", "0",                                                                          \
    "Hopper GEMM fp8 fast accumulation, cooperative: 128 x 192 tiles 0 never, 1 where cheaper, 2 always")         \
  X(WEAVE_RANKS_PER_NODE, "int", "0",                                                                             \
    "ranks per node of a team (0: the ranks of one host; n: pretend nodes of n consecutive ranks, for tests)")    \
  X(WEAVE_TEST_DELAY, "strategy:us", "", "tests: calls of that strategy start with a delay (auto must avoid it)") \
  X(WEAVE_TEST_HOST, "string", "", "tests: mixed into this process's host identity (processes act as other hosts)")

typedef struct {
  const char *name, *type, *def, *doc;
} env_var_t;

#define WEAVE_ENV_ENTRY(n, t, d, doc) {#n, t, d, doc},
static const env_var_t env_vars[] = {WEAVE_ENV_TABLE(WEAVE_ENV_ENTRY)};
#define ENV_COUNT ((int)(sizeof(env_vars) / sizeof(env_vars[0])))

int weave_parse_size(const char *s, size_t *out) {
  if (!s || !out) return -1;
  while (isspace((unsigned char)*s)) s++;
  if (!isdigit((unsigned char)*s)) return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) return -1;
  unsigned long long mul = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      mul = 1ull << 10;
      end++;
      break;
    case 'M':
      mul = 1ull << 20;
      end++;
      break;
    case 'G':
      mul = 1ull << 30;
      end++;
      break;
    case 'T':
      mul = 1ull << 40;
      end++;
      break;
    default: break;
  }
  if (mul > 1 && toupper((unsigned char)*end) == 'B') end++; /* accept "64MB" */
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  if (v != 0 && mul > (unsigned long long)SIZE_MAX / v) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

int weave_parse_int(const char *s, long lo, long hi, long *out) {
  if (!s || !out) return -1;
  errno = 0;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (errno || end == s) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int weave_parse_bool(const char *s, int *out) {
  if (!s || !out) return -1;
  static const char *yes[] = {"1", "true", "yes", "on"}, *no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = 1;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = 0;
      return 0;
    }
  }
  return -1;
}

/* Integer knobs of the Hopper GEMM (their entries in WEAVE_ENV_TABLE document them), defaults
 * included: the GEMM's launcher takes every value from here (weave_hgemm_knob). WEAVE_HGEMM_GROUP_M
 * 0: the tile scheduler's group for the grid (weave_hgemm_group_rows). */
static const struct {
  const char *name;
  long lo, hi, def;
  char letter; /* its letter in the tuning cache's key (weave_hgemm_knobs_key) */
} hgemm_knobs[] = {{"WEAVE_HGEMM_PINGPONG", 0, 2, 1, 'p'},   {"WEAVE_HGEMM_STREAMK", 0, 2, 1, 's'},
                   {"WEAVE_HGEMM_CLUSTER", 0, 3, 0, 'c'},    {"WEAVE_HGEMM_TMA_STORE", 0, 1, 1, 't'},
                   {"WEAVE_HGEMM_GROUP_M", 0, 4096, 0, 'g'}, {"WEAVE_HGEMM_PROMOTE_WGS", 2, 3, 3, 'w'},
                   {"WEAVE_HGEMM_FP8_NARROW", 0, 2, 0, 'n'}};
#define HGEMM_KNOB_COUNT (sizeof hgemm_knobs / sizeof hgemm_knobs[0])

int weave_hgemm_knob(const char *name) {
  for (size_t i = 0; i < HGEMM_KNOB_COUNT; ++i) {
    if (strcmp(name, hgemm_knobs[i].name)) continue;
    const char *v = getenv(name);
    long l;
    if (!v || !*v) return (int)hgemm_knobs[i].def;
    if (weave_parse_int(v, hgemm_knobs[i].lo, hgemm_knobs[i].hi, &l)) {
      weave_log(WEAVE_LOG_WARN, NULL, "%s='%s': expected an integer in %ld..%ld; using %ld", name, v, hgemm_knobs[i].lo,
                hgemm_knobs[i].hi, hgemm_knobs[i].def);
      return (int)hgemm_knobs[i].def;
    }
    return (int)l;
  }
  return 0; /* not a knob: a programming error caught by the tests */
}

void weave_hgemm_knobs_key(char *buf, size_t len) {
  size_t n = 0;
  if (len) buf[0] = '\0';
  for (size_t i = 0; i < HGEMM_KNOB_COUNT; ++i) {
    const int v = weave_hgemm_knob(hgemm_knobs[i].name);
    if (v == hgemm_knobs[i].def) continue;
    const int w = snprintf(buf + n, n < len ? len - n : 0, "%c%d", hgemm_knobs[i].letter, v);
    if (w > 0) n += (size_t)w;
  }
  if (n >= len && len) buf[0] = '\0'; /* cannot happen with the key's room (7 knobs, 5 characters each) */
}

/* "<strategy>:<us>" of WEAVE_TEST_DELAY. */
static int parse_delay(const char *v, weave_strategy_t *strategy, int *us) {
  const char *colon = strchr(v, ':');
  long l;
  if (!colon || weave_parse_int(colon + 1, 1, 10000000, &l)) return -1;
  for (int s = WEAVE_STRATEGY_FUSED; s <= WEAVE_STRATEGY_BASELINE; ++s) {
    const char *name = weave_strategy_name((weave_strategy_t)s);
    if (strlen(name) == (size_t)(colon - v) && strncmp(v, name, strlen(name)) == 0) {
      *strategy = (weave_strategy_t)s;
      *us = (int)l;
      return 0;
    }
  }
  return -1;
}

static const char *env_value(const char *name, const char *def) {
  const char *v = getenv(name);
  return (v && *v) ? v : def;
}

weave_result_t weave_env_load(weave_env_t *env) {
  if (!env) return weave_fail(NULL, WEAVE_ERROR_INVALID_ARGUMENT, "weave_env_load: env is NULL");
  memset(env, 0, sizeof(*env));
  const char *v;
  long l;
  v = env_value("WEAVE_DEBUG", "WARN");
  if (weave_parse_log_level(v, &env->debug))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_DEBUG='%s': expected NONE, WARN, INFO or TRACE", v);
  v = env_value("WEAVE_HEAP_SIZE", "1G");
  if (weave_parse_size(v, &env->heap_size) || env->heap_size < (1u << 20))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_HEAP_SIZE='%s': expected a size of at least 1M (e.g. 512M, 4G)", v);
  v = env_value("WEAVE_TIMEOUT_MS", "10000");
  if (weave_parse_int(v, 1, 3600000, &l))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_TIMEOUT_MS='%s': expected an integer in 1..3600000", v);
  env->timeout_ms = (int)l;
  v = env_value("WEAVE_INFO", "0");
  if (weave_parse_bool(v, &env->info))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_INFO='%s': expected 0/1/true/false/yes/no/on/off", v);
  v = env_value("WEAVE_TUNE_FILE", "");
  if (strlen(v) >= sizeof(env->tune_file))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_TUNE_FILE is longer than %zu bytes", sizeof(env->tune_file) - 1);
  strcpy(env->tune_file, v);
  v = env_value("WEAVE_TRACE", "");
  if (strlen(v) >= sizeof(env->trace))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_TRACE is longer than %zu bytes", sizeof(env->trace) - 1);
  strcpy(env->trace, v);
  v = env_value("WEAVE_AUTOTUNE", "1");
  if (weave_parse_bool(v, &env->autotune))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_AUTOTUNE='%s': expected 0/1/true/false/yes/no/on/off", v);
  v = env_value("WEAVE_TEST_DELAY", "");
  if (*v && parse_delay(v, &env->delay_strategy, &env->delay_us))
    return weave_fail(NULL, WEAVE_ERROR_ENV,
                      "WEAVE_TEST_DELAY='%s': expected <fused|bulk|baseline>:<microseconds 1..10000000>", v);
  v = env_value("WEAVE_RANKS_PER_NODE", "0");
  if (weave_parse_int(v, 0, WEAVE_MAX_WORLD, &l))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_RANKS_PER_NODE='%s': expected an integer in 0..%d", v,
                      WEAVE_MAX_WORLD);
  env->ranks_per_node = (int)l;
  v = env_value("WEAVE_TMA_EPILOGUE", "1");
  if (weave_parse_bool(v, &env->tma_epilogue))
    return weave_fail(NULL, WEAVE_ERROR_ENV, "WEAVE_TMA_EPILOGUE='%s': expected 0/1/true/false/yes/no/on/off", v);
  /* the Hopper GEMM's knobs: its launcher reads them (weave_hgemm_knob, no team there); a team
   * refuses bad values */
  for (size_t i = 0; i < HGEMM_KNOB_COUNT; ++i) {
    v = getenv(hgemm_knobs[i].name);
    if (v && *v && weave_parse_int(v, hgemm_knobs[i].lo, hgemm_knobs[i].hi, &l))
      return weave_fail(NULL, WEAVE_ERROR_ENV, "%s='%s': expected an integer in %ld..%ld", hgemm_knobs[i].name, v,
                        hgemm_knobs[i].lo, hgemm_knobs[i].hi);
  }
  return WEAVE_SUCCESS;
}

void weave_print_env(void *file) {
  FILE *f = file ? (FILE *)file : stdout;
  fprintf(f, "# weave environment (name = value  [type, default]  meaning)\n");
  for (int i = 0; i < ENV_COUNT; ++i) {
    const char *v = getenv(env_vars[i].name);
    fprintf(f, "#   %-16s = %-10s [%s, default '%s']  %s\n", env_vars[i].name, (v && *v) ? v : env_vars[i].def,
            env_vars[i].type, env_vars[i].def, env_vars[i].doc);
  }
}
