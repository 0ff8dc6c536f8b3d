/* Host side of the per-tile trace: JSON shape, CSV, summary numbers, I/O errors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "weave_trace.h"

#define BASE 1000000000000ull /* a %globaltimer-like origin */

static weave_trace_event_t ev(uint64_t b, uint64_t e, int block, int role, int rank, int tile, int peer) {
  weave_trace_event_t x;
  memset(&x, 0, sizeof x);
  x.t_begin = b ? BASE + b : 0;
  x.t_end = (b || e) ? BASE + e : 0;
  x.block = block;
  x.role = (int16_t)role;
  x.rank = (int16_t)rank;
  x.tile = tile;
  x.peer = (int16_t)peer;
  x.pad = 0;
  return x;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = (char *)malloc((size_t)n + 1);
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return s;
}

/* s at a '"': just past the string's closing quote, or NULL when the string is not closed. */
static const char *skip_string(const char *s) {
  for (s++; *s; s++) {
    if (*s == '\\' && s[1])
      s++;
    else if (*s == '"')
      return s + 1;
  }
  return NULL;
}

/* Braces/brackets balanced outside strings, strings closed. */
static int balanced(const char *s) {
  char stack[64];
  int depth = 0;
  while (*s) {
    if (*s == '"') {
      if (!(s = skip_string(s))) return 0;
      continue;
    }
    if (*s == '{' || *s == '[') {
      if (depth == 64) return 0;
      stack[depth++] = *s;
    } else if (*s == '}' || *s == ']') {
      if (!depth || stack[depth - 1] != (*s == '}' ? '{' : '[')) return 0;
      depth--;
    }
    s++;
  }
  return depth == 0;
}

/* End of the JSON value (object) starting at s[0] == '{' (points past the closing brace). */
static const char *object_end(const char *s) {
  int depth = 0;
  while (s && *s) {
    if (*s == '"') {
      s = skip_string(s);
      continue;
    }
    if (*s == '{' || *s == '[')
      depth++;
    else if ((*s == '}' || *s == ']') && --depth == 0)
      return s + 1;
    s++;
  }
  return NULL;
}

/* Top-level key `key` of the object [o, end): pointer to its value or NULL (skips nested objects). */
static const char *field(const char *o, const char *end, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  size_t kl = strlen(pat);
  int depth = 0, in_str = 0;
  for (const char *p = o; p < end; p++) {
    if (in_str) {
      if (*p == '\\')
        p++;
      else if (*p == '"')
        in_str = 0;
      continue;
    }
    if (*p == '{' || *p == '[')
      depth++;
    else if (*p == '}' || *p == ']')
      depth--;
    else if (*p == '"') {
      if (depth == 1 && (size_t)(end - p) > kl && !strncmp(p, pat, kl)) return p + kl;
      in_str = 1;
    }
  }
  return NULL;
}

/* Copies the string value at v ("...") into out. */
static int string_value(const char *v, char *out, size_t cap) {
  if (!v || *v != '"') return 0;
  size_t k = 0;
  for (v++; *v && *v != '"' && k + 1 < cap; v++) out[k++] = *v;
  out[k] = 0;
  return *v == '"';
}

#define MAXP 4
#define MAXT 16

typedef struct {
  int x_events, process_names, thread_names[MAXP][MAXT], has_x[MAXP][MAXT];
  int ordered, fields_ok, names_ok;
  char thread_label[MAXP][MAXT][64];
  char title[128];
} parsed_t;

/* Minimal validation of the Chrome trace written by weave_trace_write_json. */
static int parse_trace(const char *s, parsed_t *p) {
  memset(p, 0, sizeof *p);
  p->ordered = p->fields_ok = p->names_ok = 1;
  double last_ts[MAXP][MAXT];
  for (int i = 0; i < MAXP; i++)
    for (int j = 0; j < MAXT; j++) last_ts[i][j] = -1.0;
  if (!balanced(s)) return 0;
  const char *od = strstr(s, "\"otherData\":");
  if (od) {
    const char *t = strstr(od, "\"title\":");
    if (t) {
      /* Keep the escaped form. */
      const char *q = t + 8;
      size_t k = 0;
      if (*q == '"')
        for (q++; *q && k + 1 < sizeof p->title; q++) {
          if (*q == '\\') {
            p->title[k++] = *q++;
            if (k + 1 < sizeof p->title) p->title[k++] = *q;
            continue;
          }
          if (*q == '"') break;
          p->title[k++] = *q;
        }
      p->title[k] = 0;
    }
  }
  const char *a = strstr(s, "\"traceEvents\":");
  if (!a) return 0;
  a = strchr(a, '[');
  if (!a) return 0;
  for (const char *o = strchr(a, '{'); o; o = strchr(o, '{')) {
    const char *e = object_end(o);
    if (!e) return 0;
    const char *ph = field(o, e, "ph"), *pid = field(o, e, "pid"), *tid = field(o, e, "tid");
    char phs[8] = "", name[64] = "";
    if (!ph || !pid || !tid || !string_value(ph, phs, sizeof phs)) {
      p->fields_ok = 0;
      o = e;
      continue;
    }
    int ip = atoi(pid), it = atoi(tid);
    if (ip < 0 || ip >= MAXP || it < 0 || it >= MAXT) {
      p->fields_ok = 0;
      o = e;
      continue;
    }
    string_value(field(o, e, "name"), name, sizeof name);
    if (!strcmp(phs, "X")) {
      const char *ts = field(o, e, "ts"), *dur = field(o, e, "dur");
      if (!ts || !dur || !field(o, e, "args")) {
        p->fields_ok = 0;
      } else {
        double t = strtod(ts, NULL), d = strtod(dur, NULL);
        if (t < last_ts[ip][it] || d < 0) p->ordered = 0;
        last_ts[ip][it] = t;
      }
      if (strncmp(name, "GEMM t", 6) && strncmp(name, "WAIT t", 6) && strncmp(name, "REDUCE t", 8) &&
          strncmp(name, "SEND t", 6))
        p->names_ok = 0;
      p->x_events++;
      p->has_x[ip][it] = 1;
    } else if (!strcmp(phs, "M")) {
      char label[64] = "";
      const char *args = field(o, e, "args");
      if (args) {
        const char *n = strstr(args, "\"name\":");
        if (n && n < e) string_value(n + 7, label, sizeof label);
      }
      if (!strcmp(name, "process_name")) p->process_names++;
      if (!strcmp(name, "thread_name")) {
        p->thread_names[ip][it]++;
        snprintf(p->thread_label[ip][it], sizeof p->thread_label[ip][it], "%s", label);
      }
    } else {
      p->fields_ok = 0;
    }
    o = e;
  }
  return 1;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void test_layout(void) {
  CHECK(sizeof(weave_trace_event_t) == 32);
  CHECK(!strcmp(weave_trace_role_name(WEAVE_TRACE_GEMM), "GEMM"));
  CHECK(!strcmp(weave_trace_role_name(WEAVE_TRACE_WAIT), "WAIT"));
  CHECK(!strcmp(weave_trace_role_name(WEAVE_TRACE_REDUCE), "REDUCE"));
  CHECK(!strcmp(weave_trace_role_name(WEAVE_TRACE_SEND), "SEND"));
  CHECK(!strcmp(weave_trace_role_name(9), "ROLE?"));
}

/* Rank 0: blocks 0,1 GEMM, block 2 communication; times in ns after BASE. */
static const int r0_gemm_blocks = 2, r0_comm_blocks = 1;
static size_t rank0(weave_trace_event_t *e) {
  size_t n = 0;
  /* Deliberately out of order: the writers sort. */
  e[n++] = ev(401, 801, 0, WEAVE_TRACE_GEMM, 0, 1, 1);
  e[n++] = ev(1, 401, 0, WEAVE_TRACE_GEMM, 0, 0, 1); /* begins at 1 ns so t_begin != 0 */
  e[n++] = ev(1, 101, 1, WEAVE_TRACE_WAIT, 0, -1, 1);
  e[n++] = ev(101, 601, 1, WEAVE_TRACE_GEMM, 0, 2, 0);
  e[n++] = ev(501, 801, 2, WEAVE_TRACE_WAIT, 0, 1, 1);
  e[n++] = ev(1, 301, 2, WEAVE_TRACE_WAIT, 0, 0, 1);
  e[n++] = ev(301, 501, 2, WEAVE_TRACE_REDUCE, 0, 0, -1);
  e[n++] = ev(801, 951, 2, WEAVE_TRACE_REDUCE, 0, 1, -1);
  e[n++] = ev(951, 1001, 2, WEAVE_TRACE_SEND, 0, 1, 1);
  e[n++] = ev(0, 0, 0, 0, 0, 0, 0); /* an unwritten slot: skipped */
  return n;
}

/* Rank 1: same shape, shifted by 50 ns. */
static size_t rank1(weave_trace_event_t *e) {
  size_t n = 0;
  e[n++] = ev(51, 451, 0, WEAVE_TRACE_GEMM, 1, 0, 0);
  e[n++] = ev(451, 900, 0, WEAVE_TRACE_GEMM, 1, 1, 0);
  e[n++] = ev(51, 700, 1, WEAVE_TRACE_GEMM, 1, 2, 1);
  e[n++] = ev(51, 600, 2, WEAVE_TRACE_WAIT, 1, 0, 0);
  e[n++] = ev(600, 1100, 2, WEAVE_TRACE_REDUCE, 1, 0, -1);
  return n;
}

static void test_summary(void) {
  weave_trace_event_t e[16];
  size_t n = rank0(e);
  weave_trace_summary_t s;
  weave_trace_summary(e, n, r0_gemm_blocks, r0_comm_blocks, &s);
  CHECK(s.rank == 0);
  CHECK(s.events == 9);
  CHECK(s.skipped == 1);
  CHECK(s.count[WEAVE_TRACE_GEMM] == 3);
  CHECK(s.count[WEAVE_TRACE_WAIT] == 3);
  CHECK(s.count[WEAVE_TRACE_REDUCE] == 2);
  CHECK(s.count[WEAVE_TRACE_SEND] == 1);
  CHECK(s.t_first == BASE + 1 && s.t_last == BASE + 1001);
  CHECK(s.span_ns == 1000);
  /* GEMM: 400 + 400 + 500 = 1300 ns over 2 blocks x 1000 ns. */
  CHECK_MSG(fabs(s.gemm_busy_pct - 65.0) < 1e-9, "%f", s.gemm_busy_pct);
  /* REDUCE + SEND: 200 + 150 + 50 = 400 ns over 1 block x 1000 ns. */
  CHECK_MSG(fabs(s.comm_busy_pct - 40.0) < 1e-9, "%f", s.comm_busy_pct);
  CHECK(s.comm_wait_ns == 600); /* 300 + 300 on block 2 */
  CHECK(s.gemm_wait_ns == 100); /* block 1's credit wait */
  CHECK(s.gemm_end_ns == 800);  /* last GEMM ends at 801 */
  CHECK(s.tail_ns == 200);      /* 1001 - 801 */
  weave_trace_print_summary(stdout, 0, &s);

  /* Two communication blocks halve the communication busy fraction. */
  weave_trace_summary(e, n, r0_gemm_blocks, 2, &s);
  CHECK(fabs(s.comm_busy_pct - 20.0) < 1e-9);

  n = rank1(e);
  weave_trace_summary(e, n, 2, 1, &s);
  CHECK(s.rank == 1 && s.span_ns == 1049);
  CHECK(fabs(s.gemm_busy_pct - 100.0 * (400 + 449 + 649) / (2.0 * 1049)) < 1e-9);
  CHECK(fabs(s.comm_busy_pct - 100.0 * 500 / 1049.0) < 1e-9);
  CHECK(s.comm_wait_ns == 549 && s.gemm_wait_ns == 0);
  CHECK(s.tail_ns == 200);
  weave_trace_print_summary(stdout, 1, &s);

  /* Nothing recorded: all zero, no division by zero. */
  weave_trace_summary(NULL, 0, 2, 1, &s);
  CHECK(s.events == 0 && s.rank == -1 && s.span_ns == 0 && s.gemm_busy_pct == 0.0 && s.tail_ns == 0);
  /* No GEMM events: tail 0. */
  weave_trace_event_t w = ev(10, 20, 2, WEAVE_TRACE_REDUCE, 3, 0, -1);
  weave_trace_summary(&w, 1, 2, 1, &s);
  CHECK(s.events == 1 && s.rank == 3 && s.span_ns == 10 && s.tail_ns == 0 && s.gemm_busy_pct == 0.0);
  CHECK(fabs(s.comm_busy_pct - 100.0) < 1e-9);
  /* A zero span and zero block counts give 0 %, not NaN. */
  weave_trace_event_t z = ev(10, 10, 0, WEAVE_TRACE_GEMM, 0, 0, -1);
  weave_trace_summary(&z, 1, 0, 0, &s);
  CHECK(s.events == 1 && s.gemm_busy_pct == 0.0 && s.comm_busy_pct == 0.0);
}

static void test_writers(const char *dir) {
  weave_trace_event_t e0[16], e1[16];
  size_t counts[2] = {rank0(e0), rank1(e1)};
  const weave_trace_event_t *per[2] = {e0, e1};
  char json[512], csv[512];
  snprintf(json, sizeof json, "%s/test_trace.json", dir);
  snprintf(csv, sizeof csv, "%s/test_trace.csv", dir);
  const char *title = "fused \"det\" M=4096\\N\n";
  CHECK(weave_trace_write_json(json, per, counts, 2, title) == 0);
  char *s = slurp(json, NULL);
  CHECK(s != NULL);
  if (s) {
    parsed_t p;
    CHECK(parse_trace(s, &p));
    CHECK(balanced(s));
    CHECK(p.fields_ok);
    CHECK(p.ordered);
    CHECK(p.names_ok);
    CHECK_MSG(p.x_events == 9 + 5, "%d", p.x_events);
    CHECK(p.process_names == 2);
    CHECK(!strcmp(p.title, "fused \\\"det\\\" M=4096\\\\N\\u000a"));
    for (int r = 0; r < MAXP; r++)
      for (int b = 0; b < MAXT; b++) CHECK_MSG(p.thread_names[r][b] == p.has_x[r][b], "pid %d tid %d", r, b);
    CHECK(p.has_x[0][0] && p.has_x[0][1] && p.has_x[0][2] && p.has_x[1][2] && !p.has_x[0][3]);
    CHECK(!strcmp(p.thread_label[0][0], "block 0 (gemm)"));
    CHECK(!strcmp(p.thread_label[0][1], "block 1 (gemm)"));
    CHECK(!strcmp(p.thread_label[0][2], "block 2 (comm)"));
    CHECK(!strcmp(p.thread_label[1][2], "block 2 (comm)"));
    /* Earliest begin (rank 0, BASE + 1) is ts 0; rank 1's first GEMM at +50 ns. */
    CHECK(strstr(s, "\"name\":\"GEMM t0\",\"cat\":\"GEMM\",\"pid\":0,\"tid\":0,\"ts\":0.000,\"dur\":0.400") != NULL);
    CHECK(strstr(s, "\"name\":\"GEMM t0\",\"cat\":\"GEMM\",\"pid\":1,\"tid\":0,\"ts\":0.050,\"dur\":0.400") != NULL);
    CHECK(strstr(s,
                 "\"name\":\"SEND t1\",\"cat\":\"SEND\",\"pid\":0,\"tid\":2,\"ts\":0.950,\"dur\":0.050,"
                 "\"args\":{\"tile\":1,\"peer\":1}") != NULL);
    free(s);
  }

  CHECK(weave_trace_write_csv(csv, per, counts, 2, "fused det") == 0);
  s = slurp(csv, NULL);
  CHECK(s != NULL);
  if (s) {
    CHECK_MSG(count_lines(s) == 2 + 14, "%d", count_lines(s));
    const char *head = "# fused det\nrank,block,role,tile,peer,begin_us,end_us\n";
    CHECK(!strncmp(s, head, strlen(head)));
    CHECK(strstr(s, "\n0,0,GEMM,0,1,0.000,0.400\n0,0,GEMM,1,1,0.400,0.800\n") != NULL);
    CHECK(strstr(s, "\n1,2,REDUCE,0,-1,0.599,1.099\n") != NULL);
    free(s);
  }

  /* One rank without events, world 0, NULL arrays with zero counts. */
  size_t c2[2] = {0, counts[1]};
  const weave_trace_event_t *p2[2] = {NULL, e1};
  CHECK(weave_trace_write_json(json, p2, c2, 2, NULL) == 0);
  s = slurp(json, NULL);
  if (s) {
    parsed_t p;
    CHECK(parse_trace(s, &p) && p.x_events == 5 && p.process_names == 2 && p.ordered && p.fields_ok);
    free(s);
  }
  CHECK(weave_trace_write_json(json, NULL, NULL, 0, "empty") == 0);
  s = slurp(json, NULL);
  if (s) {
    parsed_t p;
    CHECK(parse_trace(s, &p) && p.x_events == 0 && p.process_names == 0);
    free(s);
  }
  CHECK(weave_trace_write_csv(csv, NULL, NULL, 0, "empty") == 0);
  s = slurp(csv, NULL);
  if (s) {
    CHECK(count_lines(s) == 2);
    free(s);
  }

  /* Errors: unwritable path, missing array with a nonzero count. */
  CHECK(weave_trace_write_json("/nonexistent-weave-dir/t.json", per, counts, 2, "x") == -1);
  CHECK(weave_trace_write_csv("/nonexistent-weave-dir/t.csv", per, counts, 2, "x") == -1);
  CHECK(weave_trace_write_json(NULL, per, counts, 2, "x") == -1);
  const weave_trace_event_t *bad[2] = {NULL, e1};
  CHECK(weave_trace_write_json(json, bad, counts, 2, "x") == -1);
  CHECK(weave_trace_write_csv(csv, bad, counts, 2, "x") == -1);
#ifdef __linux__
  CHECK(weave_trace_write_json("/dev/full", per, counts, 2, "x") == -1);
#endif
  remove(json);
  remove(csv);
}

int main(void) {
  const char *dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  test_layout();
  test_summary();
  test_writers(dir);
  return check_summary("test_trace");
}
