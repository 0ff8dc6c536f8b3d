/* CPU test of the WEAVE_* environment table (src/env.c): the parsers, weave_env_load with good and
 * bad values (each bad value is WEAVE_ERROR_ENV naming the variable), and weave_print_env. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "runtime/internal.h"

static void test_parse_size(void) {
  static const struct {
    const char *s;
    size_t v;
  } good[] = {
      {"0", 0},
      {"1", 1},
      {"123", 123},
      {"64K", 64ull << 10},
      {"64k", 64ull << 10},
      {"512M", 512ull << 20},
      {"2G", 2ull << 30},
      {"1T", 1ull << 40},
      {"64MB", 64ull << 20},
      {"64mb", 64ull << 20},
      {"4GB", 4ull << 30},
      {" 8M ", 8ull << 20},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); ++i) {
    size_t v = 42;
    int rc = weave_parse_size(good[i].s, &v);
    CHECK_MSG(rc == 0 && v == good[i].v, "'%s' -> rc %d, %zu (expected %zu)", good[i].s, rc, v, good[i].v);
  }
  /* Largest exact values near the limit. */
  size_t v = 0;
  CHECK(weave_parse_size("16777215T", &v) == 0 && v == 16777215ull << 40);
  CHECK(weave_parse_size("18446744073709551615", &v) == 0 && v == (size_t)-1);

  static const char *bad[] = {"",          "abc",
                              "-1",        "12Q",
                              "1.5G",      "99999999999999T",
                              "16777216T", "18446744073709551616",
                              "K",         "64B",
                              "64KK",      "64 K x",
                              "+5",        " ",
                              "0x10",      "1e9",
                              "64KBB"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    size_t w = 4242;
    int rc = weave_parse_size(bad[i], &w);
    CHECK_MSG(rc == -1 && w == 4242, "'%s' should be rejected (rc %d, value %zu)", bad[i], rc, w);
  }
  CHECK(weave_parse_size(NULL, &v) == -1);
  CHECK(weave_parse_size("1", NULL) == -1);
}

static void test_parse_int(void) {
  long v = 0;
  CHECK(weave_parse_int("5", 1, 10, &v) == 0 && v == 5);
  CHECK(weave_parse_int("1", 1, 10, &v) == 0 && v == 1); /* inclusive bounds */
  CHECK(weave_parse_int("10", 1, 10, &v) == 0 && v == 10);
  CHECK(weave_parse_int("-3", -5, 5, &v) == 0 && v == -3);
  CHECK(weave_parse_int("3600000", 1, 3600000, &v) == 0 && v == 3600000);
  CHECK(weave_parse_int("7 ", 1, 10, &v) == 0 && v == 7);
  v = 99;
  CHECK(weave_parse_int("0", 1, 10, &v) == -1);
  CHECK(weave_parse_int("11", 1, 10, &v) == -1);
  CHECK(weave_parse_int("3600001", 1, 3600000, &v) == -1);
  CHECK(weave_parse_int("", 1, 10, &v) == -1);
  CHECK(weave_parse_int("abc", 1, 10, &v) == -1);
  CHECK(weave_parse_int("5x", 1, 10, &v) == -1);
  CHECK(weave_parse_int("5.0", 1, 10, &v) == -1);
  CHECK(weave_parse_int("99999999999999999999999", 1, 10, &v) == -1);
  CHECK(weave_parse_int("-99999999999999999999999", -10, 10, &v) == -1);
  CHECK(v == 99); /* untouched on failure */
  CHECK(weave_parse_int(NULL, 1, 10, &v) == -1);
  CHECK(weave_parse_int("5", 1, 10, NULL) == -1);
}

static void test_parse_bool_level(void) {
  static const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
  static const char *no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
  static const char *bad[] = {"", "2", "tru", "yess", "y", "n", " 1", "enable", "-1"};
  for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); ++i) {
    int b = -1;
    CHECK_MSG(weave_parse_bool(yes[i], &b) == 0 && b == 1, "'%s'", yes[i]);
  }
  for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); ++i) {
    int b = -1;
    CHECK_MSG(weave_parse_bool(no[i], &b) == 0 && b == 0, "'%s'", no[i]);
  }
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    int b = 7;
    CHECK_MSG(weave_parse_bool(bad[i], &b) == -1 && b == 7, "'%s' should be rejected", bad[i]);
  }
  int b;
  CHECK(weave_parse_bool(NULL, &b) == -1);
  CHECK(weave_parse_bool("1", NULL) == -1);

  static const struct {
    const char *s;
    weave_log_level_t l;
  } levels[] = {{"NONE", WEAVE_LOG_NONE},
                {"warn", WEAVE_LOG_WARN},
                {"Info", WEAVE_LOG_INFO},
                {"TRACE", WEAVE_LOG_TRACE},
                {"none", WEAVE_LOG_NONE}};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); ++i) {
    weave_log_level_t l = (weave_log_level_t)99;
    CHECK_MSG(weave_parse_log_level(levels[i].s, &l) == 0 && l == levels[i].l, "'%s'", levels[i].s);
  }
  static const char *bad_levels[] = {"", "DEBUG", "3", "WARNING", "ERROR", "INF"};
  for (size_t i = 0; i < sizeof(bad_levels) / sizeof(bad_levels[0]); ++i) {
    weave_log_level_t l = (weave_log_level_t)99;
    CHECK_MSG(weave_parse_log_level(bad_levels[i], &l) == -1 && l == (weave_log_level_t)99, "'%s' should be rejected",
              bad_levels[i]);
  }
  weave_log_level_t l;
  CHECK(weave_parse_log_level(NULL, &l) == -1);
  CHECK(weave_parse_log_level("INFO", NULL) == -1);
}

static const char *const vars[] = {"WEAVE_DEBUG",         "WEAVE_HEAP_SIZE",       "WEAVE_TIMEOUT_MS",
                                   "WEAVE_INFO",          "WEAVE_TUNE_FILE",       "WEAVE_TRACE",
                                   "WEAVE_TMA_EPILOGUE",  "WEAVE_HGEMM_PINGPONG",  "WEAVE_HGEMM_STREAMK",
                                   "WEAVE_HGEMM_CLUSTER", "WEAVE_HGEMM_TMA_STORE", "WEAVE_HGEMM_GROUP_M",
                                   "WEAVE_SOCKET_ADDR",   "WEAVE_BOOTSTRAP_PORT",  "WEAVE_AUTOTUNE",
                                   "WEAVE_TEST_DELAY",    "WEAVE_RANKS_PER_NODE",  "WEAVE_HGEMM_PROMOTE_WGS",
                                   "WEAVE_TEST_HOST",     "WEAVE_HGEMM_FP8_NARROW"};
#define NVARS (int)(sizeof(vars) / sizeof(vars[0]))

static void clear_env(void) {
  for (int i = 0; i < NVARS; ++i) unsetenv(vars[i]);
}

static void test_env_load(void) {
  weave_env_t env;
  clear_env();
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS);
  CHECK(env.debug == WEAVE_LOG_WARN);
  CHECK(env.heap_size == (1ull << 30));
  CHECK(env.timeout_ms == 10000);
  CHECK(env.info == 0);
  CHECK(env.tune_file[0] == '\0' && env.trace[0] == '\0');
  CHECK(env.tma_epilogue == 1);
  CHECK(env.autotune == 1 && env.delay_us == 0);

  /* Empty values are the defaults too. */
  for (int i = 0; i < NVARS; ++i) setenv(vars[i], "", 1);
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS);
  CHECK(env.heap_size == (1ull << 30) && env.timeout_ms == 10000 && env.debug == WEAVE_LOG_WARN);

  setenv("WEAVE_DEBUG", "trace", 1);
  setenv("WEAVE_HEAP_SIZE", "512M", 1);
  setenv("WEAVE_TIMEOUT_MS", "250", 1);
  setenv("WEAVE_INFO", "yes", 1);
  setenv("WEAVE_TUNE_FILE", "/tmp/weave.tune", 1);
  setenv("WEAVE_TRACE", "/tmp/trace.json", 1);
  setenv("WEAVE_TMA_EPILOGUE", "off", 1);
  setenv("WEAVE_HGEMM_PINGPONG", "2", 1);
  setenv("WEAVE_HGEMM_STREAMK", "0", 1);
  setenv("WEAVE_HGEMM_CLUSTER", "2", 1);
  setenv("WEAVE_HGEMM_TMA_STORE", "0", 1);
  setenv("WEAVE_HGEMM_GROUP_M", "4096", 1);
  setenv("WEAVE_HGEMM_PROMOTE_WGS", "2", 1);
  setenv("WEAVE_HGEMM_FP8_NARROW", "1", 1);
  setenv("WEAVE_AUTOTUNE", "off", 1);
  setenv("WEAVE_TEST_DELAY", "bulk:250", 1);
  setenv("WEAVE_RANKS_PER_NODE", "2", 1);
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS);
  CHECK(env.ranks_per_node == 2);
  CHECK(env.autotune == 0 && env.delay_strategy == WEAVE_STRATEGY_BULK && env.delay_us == 250);
  CHECK(env.tma_epilogue == 0);
  CHECK(env.debug == WEAVE_LOG_TRACE);
  CHECK(env.heap_size == (512ull << 20));
  CHECK(env.timeout_ms == 250);
  CHECK(env.info == 1);
  CHECK(strcmp(env.tune_file, "/tmp/weave.tune") == 0);
  CHECK(strcmp(env.trace, "/tmp/trace.json") == 0);
  clear_env();
  setenv("WEAVE_DEBUG", "NONE", 1); /* quiet below: every failure would log a WARN line */

  CHECK(weave_env_load(NULL) == WEAVE_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(weave_get_last_error(NULL), "env") != NULL);

  /* Each bad value: WEAVE_ERROR_ENV naming the variable (and its value). */
  char longpath[700];
  memset(longpath, 'x', sizeof(longpath) - 1);
  longpath[0] = '/';
  longpath[sizeof(longpath) - 1] = '\0';
  static const struct {
    const char *name, *value;
  } bad[] = {
      {"WEAVE_DEBUG", "LOUD"},
      {"WEAVE_DEBUG", "2"},
      {"WEAVE_HEAP_SIZE", "abc"},
      {"WEAVE_HEAP_SIZE", "-1"},
      {"WEAVE_HEAP_SIZE", "12Q"},
      {"WEAVE_HEAP_SIZE", "99999999999999T"},
      {"WEAVE_HEAP_SIZE", "1K"}, /* below the 1M minimum */
      {"WEAVE_HEAP_SIZE", "0"},
      {"WEAVE_TIMEOUT_MS", "0"},
      {"WEAVE_TIMEOUT_MS", "-5"},
      {"WEAVE_TIMEOUT_MS", "3600001"},
      {"WEAVE_TIMEOUT_MS", "10s"},
      {"WEAVE_INFO", "maybe"},
      {"WEAVE_INFO", "2"},
      {"WEAVE_TUNE_FILE", NULL},
      {"WEAVE_TRACE", NULL},
      {"WEAVE_TMA_EPILOGUE", "2"},
      {"WEAVE_HGEMM_PINGPONG", "3"},
      {"WEAVE_HGEMM_PINGPONG", "yes"},
      {"WEAVE_HGEMM_STREAMK", "-1"},
      {"WEAVE_HGEMM_CLUSTER", "-1"},
      {"WEAVE_HGEMM_CLUSTER", "4"},
      {"WEAVE_HGEMM_TMA_STORE", "2"},
      {"WEAVE_HGEMM_GROUP_M", "-1"},
      {"WEAVE_HGEMM_PROMOTE_WGS", "4"},
      {"WEAVE_HGEMM_FP8_NARROW", "3"},
      {"WEAVE_HGEMM_GROUP_M", "16x"},
      {"WEAVE_AUTOTUNE", "2"},
      {"WEAVE_AUTOTUNE", "sometimes"},
      {"WEAVE_TEST_DELAY", "fused"},
      {"WEAVE_TEST_DELAY", "auto:100"},
      {"WEAVE_TEST_DELAY", "fused:0"},
      {"WEAVE_TEST_DELAY", "fused:10000001"},
      {"WEAVE_TEST_DELAY", "fusedx:5"},
      {"WEAVE_TEST_DELAY", "bulk:5ms"},
      {"WEAVE_RANKS_PER_NODE", "-1"},
      {"WEAVE_RANKS_PER_NODE", "65"},
      {"WEAVE_RANKS_PER_NODE", "two"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    const char *value = bad[i].value ? bad[i].value : longpath;
    setenv(bad[i].name, value, 1);
    memset(&env, 0x5a, sizeof(env));
    weave_result_t rc = weave_env_load(&env);
    const char *msg = weave_get_last_error(NULL);
    CHECK_MSG(rc == WEAVE_ERROR_ENV, "%s='%.20s' -> %d", bad[i].name, value, (int)rc);
    CHECK_MSG(strstr(msg, bad[i].name) != NULL, "message '%s' does not name %s", msg, bad[i].name);
    if (bad[i].value) CHECK_MSG(strstr(msg, bad[i].value) != NULL, "message '%s' does not show the value", msg);
    unsetenv(bad[i].name);
    if (strcmp(bad[i].name, "WEAVE_DEBUG") == 0) setenv("WEAVE_DEBUG", "NONE", 1);
  }
  /* Good limits. */
  setenv("WEAVE_HEAP_SIZE", "1M", 1);
  setenv("WEAVE_TIMEOUT_MS", "1", 1);
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS && env.heap_size == (1u << 20) && env.timeout_ms == 1);
  setenv("WEAVE_TIMEOUT_MS", "3600000", 1);
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS && env.timeout_ms == 3600000);
  longpath[512] = '\0'; /* 512 characters: one too many for the 512-byte buffer and its NUL */
  setenv("WEAVE_TUNE_FILE", longpath, 1);
  CHECK(weave_env_load(&env) == WEAVE_ERROR_ENV);
  longpath[511] = '\0'; /* 511 characters: fits */
  setenv("WEAVE_TUNE_FILE", longpath, 1);
  CHECK(weave_env_load(&env) == WEAVE_SUCCESS && strlen(env.tune_file) == 511);
  clear_env();

  /* weave_log_level follows WEAVE_DEBUG; a bad value is WARN there. */
  CHECK(weave_log_level() == WEAVE_LOG_WARN);
  setenv("WEAVE_DEBUG", "INFO", 1);
  CHECK(weave_log_level() == WEAVE_LOG_INFO);
  setenv("WEAVE_DEBUG", "bogus", 1);
  CHECK(weave_log_level() == WEAVE_LOG_WARN);
  clear_env();
}

/* The Hopper GEMM's knobs: each bound is inclusive, one past it (or junk) gives the default. */
static void test_hgemm_knobs(void) {
  static const struct {
    const char *name;
    long lo, hi;
  } knobs[] = {{"WEAVE_HGEMM_PINGPONG", 0, 2},  {"WEAVE_HGEMM_STREAMK", 0, 2},    {"WEAVE_HGEMM_CLUSTER", 0, 3},
               {"WEAVE_HGEMM_TMA_STORE", 0, 1}, {"WEAVE_HGEMM_GROUP_M", 0, 4096}, {"WEAVE_HGEMM_PROMOTE_WGS", 2, 3},
               {"WEAVE_HGEMM_FP8_NARROW", 0, 2}};
  for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; ++i) {
    const char *n = knobs[i].name;
    char v[32];
    unsetenv(n);
    const int def = weave_hgemm_knob(n);
    CHECK_MSG(def >= knobs[i].lo && def <= knobs[i].hi, "%s default %d", n, def);
    const long cases[4][2] = {
        {knobs[i].lo, knobs[i].lo}, {knobs[i].hi, knobs[i].hi}, {knobs[i].lo - 1, def}, {knobs[i].hi + 1, def}};
    for (int c = 0; c < 4; ++c) {
      snprintf(v, sizeof v, "%ld", cases[c][0]);
      setenv(n, v, 1);
      CHECK_MSG(weave_hgemm_knob(n) == cases[c][1], "%s=%s gave %d, want %ld", n, v, weave_hgemm_knob(n), cases[c][1]);
    }
    setenv(n, "2x", 1);
    CHECK_MSG(weave_hgemm_knob(n) == def, "%s=2x", n);
    unsetenv(n);
  }
  CHECK(weave_hgemm_knob("WEAVE_NOT_A_KNOB") == 0);
  /* the tuning cache's key: the knobs off their defaults, in the table's order */
  char key[40];
  weave_hgemm_knobs_key(key, sizeof(key));
  CHECK_MSG(strcmp(key, "") == 0, "knobs key '%s' with every knob at its default", key);
  setenv("WEAVE_HGEMM_GROUP_M", "32", 1);
  setenv("WEAVE_HGEMM_CLUSTER", "1", 1);
  setenv("WEAVE_HGEMM_PINGPONG", "1", 1); /* its default: not in the key */
  weave_hgemm_knobs_key(key, sizeof(key));
  CHECK_MSG(strcmp(key, "c1g32") == 0, "knobs key '%s', want c1g32", key);
  setenv("WEAVE_HGEMM_CLUSTER", "9", 1); /* invalid: its default (with a warning) */
  weave_hgemm_knobs_key(key, sizeof(key));
  CHECK_MSG(strcmp(key, "g32") == 0, "knobs key '%s', want g32", key);
  setenv("WEAVE_HGEMM_FP8_NARROW", "1", 1); /* the narrow fp8 tile: another kernel, another key */
  weave_hgemm_knobs_key(key, sizeof(key));
  CHECK_MSG(strcmp(key, "g32n1") == 0, "knobs key '%s', want g32n1", key);
  unsetenv("WEAVE_HGEMM_FP8_NARROW");
  unsetenv("WEAVE_HGEMM_GROUP_M");
  unsetenv("WEAVE_HGEMM_CLUSTER");
  unsetenv("WEAVE_HGEMM_PINGPONG");
}

static void test_print_env(void) {
  clear_env();
  setenv("WEAVE_TIMEOUT_MS", "4321", 1);
  FILE *f = tmpfile();
  CHECK(f != NULL);
  if (!f) return;
  weave_print_env(f);
  long n = ftell(f);
  CHECK(n > 0);
  char *text = calloc(1, (size_t)n + 1);
  rewind(f);
  CHECK(fread(text, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  for (int i = 0; i < NVARS; ++i) CHECK_MSG(strstr(text, vars[i]) != NULL, "%s missing from weave_print_env", vars[i]);
  CHECK(strstr(text, "4321") != NULL);  /* the value in effect */
  CHECK(strstr(text, "10000") != NULL); /* and the default */
  CHECK(strstr(text, "1G") != NULL);
  /* One line per variable plus the header. */
  int lines = 0;
  for (char *p = text; *p; ++p) lines += *p == '\n';
  CHECK_MSG(lines == NVARS + 1, "%d lines", lines);
  free(text);
  clear_env();
}

int main(void) {
  test_parse_size();
  test_parse_int();
  test_parse_bool_level();
  test_env_load();
  test_hgemm_knobs();
  test_print_env();
  return check_summary("test_env");
}
