/* Result strings, last-error messages (per team, and per thread before a team exists) and logging
 * with an NCCL-like prefix: host:pid:tid [rank] LEVEL message, at the level WEAVE_DEBUG sets. The
 * logging reads WEAVE_DEBUG itself, so env.c (which logs) is no dependency of this file. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/internal.h"

static _Thread_local char thread_last_error[1024];
static _Thread_local int log_quiet; /* > 0: failures are expected (weave_log_quiet) */

void weave_get_version(int *major, int *minor, int *patch) {
  if (major) *major = WEAVE_VERSION_MAJOR;
  if (minor) *minor = WEAVE_VERSION_MINOR;
  if (patch) *patch = WEAVE_VERSION_PATCH;
}

const char *weave_get_error_string(weave_result_t result) {
  switch (result) {
    case WEAVE_SUCCESS: return "success";
    case WEAVE_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case WEAVE_ERROR_NO_DEVICE: return "no usable CUDA device";
    case WEAVE_ERROR_UNSUPPORTED_DEVICE: return "unsupported device (weave needs sm_90)";
    case WEAVE_ERROR_CUDA: return "CUDA error";
    case WEAVE_ERROR_OUT_OF_MEMORY: return "out of memory";
    case WEAVE_ERROR_TIMEOUT: return "timeout";
    case WEAVE_ERROR_MISMATCH: return "ranks disagree on a collective call's arguments";
    case WEAVE_ERROR_UNSUPPORTED: return "unsupported configuration";
    case WEAVE_ERROR_BOOTSTRAP: return "bootstrap failure";
    case WEAVE_ERROR_ENV: return "bad environment variable";
    case WEAVE_ERROR_INTERNAL: return "internal error";
    case WEAVE_ERROR_ABORTED: return "the team was aborted";
    case WEAVE_NUM_RESULTS: break;
  }
  return "unknown result code";
}

const char *weave_get_last_error(weave_team_t team) { return team ? team->last_error : thread_last_error; }

int weave_parse_log_level(const char *s, weave_log_level_t *out) {
  if (!s || !out) return -1;
  static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
  for (int i = 0; i < 4; ++i)
    if (strcasecmp(s, names[i]) == 0) {
      *out = (weave_log_level_t)i;
      return 0;
    }
  return -1;
}

weave_log_level_t weave_log_level(void) {
  /* Read on every call: cheap, and tests may change it. A bad value logs at WARN (the default)
   * here; weave_env_load reports it as an error to the caller. */
  weave_log_level_t l = WEAVE_LOG_WARN;
  const char *v = getenv("WEAVE_DEBUG");
  if (v && *v && weave_parse_log_level(v, &l) != 0) l = WEAVE_LOG_WARN;
  return l;
}

static void log_prefix(FILE *f, const weave_team_t team, const char *level) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  long tid = (long)syscall(SYS_gettid);
  if (team)
    fprintf(f, "%s:%d:%ld [rank %d dev %d] weave %s ", host, (int)getpid(), tid, team->rank, team->info.device, level);
  else
    fprintf(f, "%s:%d:%ld weave %s ", host, (int)getpid(), tid, level);
}

void weave_log(weave_log_level_t level, const weave_team_t team, const char *fmt, ...) {
  if (level == WEAVE_LOG_NONE || level > weave_log_level()) return;
  static const char *names[] = {"", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  log_prefix(stderr, team, names[level]);
  fprintf(stderr, "%s\n", msg);
}

weave_result_t weave_fail(weave_team_t team, weave_result_t code, const char *fmt, ...) {
  char *dst = team ? team->last_error : thread_last_error;
  size_t cap = team ? sizeof(team->last_error) : sizeof(thread_last_error);
  int n = snprintf(dst, cap, "%s: ", weave_get_error_string(code));
  if (n < 0 || (size_t)n >= cap) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst + n, cap - (size_t)n, fmt, ap);
  va_end(ap);
  if (team) /* the thread's copy too, for callers that only kept the result code */
    snprintf(thread_last_error, sizeof(thread_last_error), "%s", dst);
  weave_log(log_quiet > 0 ? WEAVE_LOG_INFO : WEAVE_LOG_WARN, team, "%s", dst);
  return code;
}

void weave_log_quiet(int on) { log_quiet += on ? 1 : -1; }
