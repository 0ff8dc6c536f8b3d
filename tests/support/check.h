/* Minimal test harness: CHECK records a failure with file:line and goes on; main returns
 * check_summary() (0 when everything passed, 1 otherwise). */
#ifndef WEAVE_TEST_CHECK_H
#define WEAVE_TEST_CHECK_H

#include <stdio.h>

static int check_failures = 0, check_count = 0;

#define CHECK(cond)                                                                                 \
  do {                                                                                              \
    check_count++;                                                                                  \
    if (!(cond)) {                                                                                  \
      check_failures++;                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                     \
    }                                                                                               \
  } while (0)

#define CHECK_MSG(cond, ...)                                                                        \
  do {                                                                                              \
    check_count++;                                                                                  \
    if (!(cond)) {                                                                                  \
      check_failures++;                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                 \
      fputc('\n', stderr);                                                                          \
    }                                                                                               \
  } while (0)

static inline int check_summary(const char *name) {
  printf("%s: %d checks, %d failed\n", name, check_count, check_failures);
  return check_failures ? 1 : 0;
}

#endif
