/* Tuning cache: see tune.h. */
#include "gemm_rs/tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_rs/plan_model.h"

int weave_tune_bucket(int M) {
  int b = 1;
  while (b < M && b < (1 << 30)) b <<= 1;
  return b;
}

static int parse_strategy(const char *s, weave_strategy_t *out) {
  for (int i = WEAVE_STRATEGY_AUTO; i <= WEAVE_STRATEGY_BASELINE; ++i)
    if (strcmp(s, weave_strategy_name((weave_strategy_t)i)) == 0) {
      *out = (weave_strategy_t)i;
      return 0;
    }
  return -1;
}

/* The dtype column, dtype[+row][+fast] (tune.h): suffixes in that order, fp8 only. */
static int parse_dtype_field(char *s, weave_tune_entry_t *e) {
  char *plus = strchr(s, '+');
  if (plus) {
    const char *rest = plus;
    if (strncmp(rest, "+row", 4) == 0) {
      e->scale_mode = WEAVE_SCALE_ROW;
      rest += 4;
    }
    if (strncmp(rest, "+fast", 5) == 0) {
      e->fp8_accum = WEAVE_FP8_ACCUM_FAST;
      rest += 5;
    }
    if (*rest) return -1; /* another suffix, another order, or junk after one */
    *plus = '\0';
  }
  if (weave_dtype_parse(s, &e->dtype)) return -1;
  if ((e->scale_mode == WEAVE_SCALE_ROW || e->fp8_accum == WEAVE_FP8_ACCUM_FAST) && !weave_dtype_is_fp8(e->dtype))
    return -1;
  return 0;
}

/* NONE and TENSOR are one class (tune.h); ROW its own. */
static int row_scales(weave_scale_mode_t m) { return m == WEAVE_SCALE_ROW; }

int weave_tune_parse_line(const char *line, weave_tune_entry_t *e) {
  if (!line || !e || line[0] == '#' || line[0] == '\n' || line[0] == '\0') return -1;
  char buf[512];
  snprintf(buf, sizeof(buf), "%s", line);
  char *fields[10];
  int n = 0;
  char *save = NULL;
  char *tok = strtok_r(buf, "\t\r\n", &save);
  for (; tok && n < 10; tok = strtok_r(NULL, "\t\r\n", &save)) fields[n++] = tok;
  if (n != 10 || tok) return -1; /* fewer or more than 10 fields */
  memset(e, 0, sizeof(*e));
  snprintf(e->device, sizeof(e->device), "%s", fields[0]);
  char *end;
  long v[4];
  for (int i = 0; i < 4; ++i) {
    v[i] = strtol(fields[1 + i], &end, 10);
    if (*end || v[i] < 1 || v[i] > (1L << 30)) return -1;
  }
  e->world = (int)v[0]; e->m_bucket = (int)v[1]; e->N = (int)v[2]; e->K = (int)v[3];
  if (parse_dtype_field(fields[5], e) || parse_strategy(fields[6], &e->strategy) || e->strategy == WEAVE_STRATEGY_AUTO)
    return -1;
  long g = strtol(fields[7], &end, 10);
  if (*end || g < 0 || g > 100000) return -1;
  long c = strtol(fields[8], &end, 10);
  if (*end || c < 0 || c > 100000) return -1;
  e->gemm_blocks = (int)g;
  e->comm_blocks = (int)c;
  e->speedup = strtod(fields[9], &end);
  if (*end) return -1;
  return 0;
}

void weave_tune_format_line(const weave_tune_entry_t *e, char *buf, size_t len) {
  snprintf(buf, len, "%s\t%d\t%d\t%d\t%d\t%s%s%s\t%s\t%d\t%d\t%.3f\n", e->device, e->world, e->m_bucket, e->N, e->K,
           weave_dtype_name(e->dtype), row_scales(e->scale_mode) ? "+row" : "",
           e->fp8_accum == WEAVE_FP8_ACCUM_FAST ? "+fast" : "",
           weave_strategy_name(e->strategy), e->gemm_blocks, e->comm_blocks, e->speedup);
}

int weave_tune_find(const char *path, const char *device, int world, int M, int N, int K, weave_dtype_t dtype,
                    weave_fp8_accum_t fp8_accum, weave_scale_mode_t scale_mode, weave_tune_entry_t *out) {
  if (!path || !*path) return -1;
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  int found = -1, bucket = weave_tune_bucket(M);
  weave_tune_entry_t e;
  while (fgets(line, sizeof(line), f)) {
    if (weave_tune_parse_line(line, &e) != 0) continue;
    if (strcmp(e.device, device) == 0 && e.world == world && e.m_bucket == bucket && e.N == N && e.K == K &&
        e.dtype == dtype && e.fp8_accum == fp8_accum && row_scales(e.scale_mode) == row_scales(scale_mode)) {
      *out = e;
      found = 0;
    }
  }
  fclose(f);
  return found;
}

int weave_tune_append(const char *path, const weave_tune_entry_t *e) {
  FILE *f = fopen(path, "a");
  if (!f) return -1;
  char line[512];
  weave_tune_format_line(e, line, sizeof(line));
  int rc = fputs(line, f) < 0 ? -1 : 0;
  if (fclose(f) != 0) rc = -1;
  return rc;
}
