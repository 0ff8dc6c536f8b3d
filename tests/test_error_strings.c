/* CPU test of weave_get_error_string (src/runtime/error.c): every result code's string says what the
 * code means (TIMEOUT a timeout, ABORTED an abort, ...), in words no other code's string uses where
 * the meaning is the code's alone, so two strings swapped or copied fail here; the strings differ,
 * are one plain line, and an unknown code (WEAVE_NUM_RESULTS, negative, large) gets a string that
 * says "unknown". A last error starts with its code's string (weave_fail). The table below has one
 * row per code in weave.h, in order: a new code without a row fails to compile. */
#define _GNU_SOURCE
#include <limits.h>
#include <string.h>

#include "check.h"
#include "runtime/internal.h"

typedef struct {
  weave_result_t code;
  const char *must[3]; /* words the string must hold (any case); "a|b": one of them */
  const char *own;     /* a word of this code's alone: no other code's string may hold it (NULL: none) */
} expect_t;

static const expect_t expect[] = {
    {WEAVE_SUCCESS, {"success"}, "success"},
    {WEAVE_ERROR_INVALID_ARGUMENT, {"invalid", "argument"}, "invalid"},
    {WEAVE_ERROR_NO_DEVICE, {"no|not", "device"}, NULL},
    {WEAVE_ERROR_UNSUPPORTED_DEVICE, {"unsupported|not supported", "device", "sm_90"}, "sm_90"},
    {WEAVE_ERROR_CUDA, {"CUDA", "error|fail"}, NULL},
    {WEAVE_ERROR_OUT_OF_MEMORY, {"out of memory"}, "memory"},
    {WEAVE_ERROR_TIMEOUT, {"timeout|timed out"}, "time"},
    {WEAVE_ERROR_MISMATCH, {"ranks", "disagree|mismatch|differ"}, "disagree"},
    {WEAVE_ERROR_UNSUPPORTED, {"unsupported|not supported", "configuration|request"}, "configuration"},
    {WEAVE_ERROR_BOOTSTRAP, {"bootstrap"}, "bootstrap"},
    {WEAVE_ERROR_ENV, {"environment variable"}, "environment"},
    {WEAVE_ERROR_INTERNAL, {"internal"}, "internal"},
    {WEAVE_ERROR_ABORTED, {"abort"}, "abort"},
};
_Static_assert(sizeof(expect) / sizeof(expect[0]) == WEAVE_NUM_RESULTS,
               "every result code of weave.h needs its row here");

/* Whether s holds one of the '|'-separated words of `alternatives`, ignoring case. */
static int holds(const char *s, const char *alternatives) {
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", alternatives);
  for (char *save = NULL, *w = strtok_r(buf, "|", &save); w; w = strtok_r(NULL, "|", &save))
    if (strcasestr(s, w)) return 1;
  return 0;
}

static void test_each_code(void) {
  for (int r = 0; r < WEAVE_NUM_RESULTS; ++r) {
    const expect_t *e = &expect[r];
    CHECK_MSG((int)e->code == r, "row %d of the table is code %d: keep it in weave.h's order", r, (int)e->code);
    const char *s = weave_get_error_string(e->code);
    CHECK_MSG(s && *s && !strchr(s, '\n') && strlen(s) < 80, "code %d: '%s' (expected one short line)", r,
              s ? s : "(null)");
    if (!s) continue;
    CHECK_MSG(!strcasestr(s, "unknown"), "code %d: '%s' calls a known code unknown", r, s);
    for (int i = 0; i < 3 && e->must[i]; ++i)
      CHECK_MSG(holds(s, e->must[i]), "code %d: '%s' does not say '%s'", r, s, e->must[i]);
    for (int q = 0; q < WEAVE_NUM_RESULTS; ++q) {
      const char *o = weave_get_error_string((weave_result_t)q);
      if (q == r || !o) continue;
      CHECK_MSG(strcmp(o, s) != 0, "codes %d and %d share '%s'", q, r, s);
      if (e->own)
        CHECK_MSG(!strcasestr(o, e->own), "code %d's string '%s' says '%s', which is code %d's", q, o, e->own, r);
    }
  }
  /* the ones callers test for most, spelled out */
  CHECK(strcmp(weave_get_error_string(WEAVE_SUCCESS), "success") == 0);
  CHECK(strcasestr(weave_get_error_string(WEAVE_ERROR_TIMEOUT), "timeout") != NULL);
  CHECK(strcasestr(weave_get_error_string(WEAVE_ERROR_ABORTED), "abort") != NULL);
}

static void test_unknown_codes(void) {
  const int unknown[] = {WEAVE_NUM_RESULTS, WEAVE_NUM_RESULTS + 1, 99, -1, INT_MAX, INT_MIN};
  const char *first = weave_get_error_string((weave_result_t)unknown[0]);
  CHECK_MSG(first && strcasestr(first, "unknown"), "code %d: '%s' (expected it to say unknown)", unknown[0],
            first ? first : "(null)");
  for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); ++i) {
    const char *s = weave_get_error_string((weave_result_t)unknown[i]);
    CHECK_MSG(s && first && strcmp(s, first) == 0, "code %d: '%s', code %d: '%s'", unknown[i], s ? s : "(null)",
              unknown[0], first ? first : "(null)");
  }
  for (int r = 0; r < WEAVE_NUM_RESULTS; ++r)
    CHECK_MSG(strcmp(weave_get_error_string((weave_result_t)r), first) != 0, "known code %d reads as an unknown one",
              r);
}

/* The thread's last error: the code's string, then the detail. */
static void test_last_error_prefix(void) {
  weave_log_quiet(1);
  for (int r = 1; r < WEAVE_NUM_RESULTS; ++r) {
    char want[256];
    snprintf(want, sizeof(want), "%s: detail %d", weave_get_error_string((weave_result_t)r), r);
    CHECK(weave_fail(NULL, (weave_result_t)r, "detail %d", r) == (weave_result_t)r);
    CHECK_MSG(strcmp(weave_get_last_error(NULL), want) == 0, "code %d: last error '%s', expected '%s'", r,
              weave_get_last_error(NULL), want);
  }
  weave_log_quiet(0);
}

int main(void) {
  test_each_code();
  test_unknown_codes();
  test_last_error_prefix();
  return check_summary("test_error_strings");
}
