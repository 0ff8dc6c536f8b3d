/* CPU test of the tuning cache (src/plan/tune.c, documented in tune.h): the M bucket, one entry
 * formatted and parsed back, malformed lines, the key, where the file lives, and the file itself:
 * lookups and stores, foreign, corrupt and unsafe files, writers in processes of their own, and the
 * bound on the lock's wait; and the tuner's verdict on measured times (plan/autotune.h). Every file
 * lives in a mkdtemp folder, removed at the end. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "plan/autotune.h"
#include "plan/tune.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ---------------------------------------------------------------------------------- */
/* An entry with every field away from its zero value where the format allows. */
static weave_tune_entry_t sample_entry(void) {
  weave_tune_entry_t e;
  memset(&e, 0, sizeof(e));
  weave_tune_key_t *k = &e.key;
  snprintf(k->device, sizeof(k->device), "NVIDIA H200");
  k->sms = 132;
  k->driver = 12080;
  k->runtime = 12060;
  snprintf(k->weave, sizeof(k->weave), "0.5.0");
  k->world = 8;
  k->ranks_per_device = 1;
  k->m_bucket = 8192;
  k->N = 4096;
  k->K = 512;
  k->dtype = WEAVE_BF16;
  k->out_dtype = WEAVE_BF16;
  k->b_layout = WEAVE_LAYOUT_COL;
  k->reduce = WEAVE_REDUCE_DETERMINISTIC;
  k->fp32_slots = 0;
  k->scale_mode = WEAVE_SCALE_NONE;
  k->fp8_accum = WEAVE_FP8_ACCUM_FP32;
  e.strategy = WEAVE_STRATEGY_FUSED;
  e.gemm_blocks = 120;
  e.comm_blocks = 12;
  e.speedup = 1.25;
  return e;
}

/* The sample's line, field by field (tune.h's order). */
static const char *const sample_fields[19] = {"NVIDIA H200", "132",   "12080", "12060", "0.5.0", "8",   "1",
                                              "8192",        "4096",  "512",   "bf16",  "bf16",  "col", "det",
                                              "out",         "fused", "120",   "12",    "1.2500"};

/* The sample's line with field `field` replaced by `value` (field -1: none), fields joined by tabs. */
static void sample_line_with(int field, const char *value, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < 19; ++i)
    n += (size_t)snprintf(buf + n, n < len ? len - n : 0, "%s%s", i ? "\t" : "", i == field ? value : sample_fields[i]);
  if (n + 1 < len) {
    buf[n] = '\n';
    buf[n + 1] = '\0';
  }
}

/* Every field of got as parse should give it back from want: TENSOR scales come back as NONE, the
 * speedup to the format's 4 decimals. */
static int same_entry(const weave_tune_entry_t *got, const weave_tune_entry_t *want) {
  const weave_tune_key_t *g = &got->key, *w = &want->key;
  const weave_scale_mode_t scale = w->scale_mode == WEAVE_SCALE_ROW ? WEAVE_SCALE_ROW : WEAVE_SCALE_NONE;
  return strcmp(g->device, w->device) == 0 && g->sms == w->sms && g->driver == w->driver && g->runtime == w->runtime &&
         strcmp(g->weave, w->weave) == 0 && g->world == w->world && g->ranks_per_device == w->ranks_per_device &&
         g->m_bucket == w->m_bucket && g->N == w->N && g->K == w->K && g->dtype == w->dtype &&
         g->out_dtype == w->out_dtype && g->b_layout == w->b_layout && g->reduce == w->reduce &&
         g->fp32_slots == w->fp32_slots && g->scale_mode == scale && g->fp8_accum == w->fp8_accum &&
         strcmp(g->knobs, w->knobs) == 0 && got->strategy == want->strategy && got->gemm_blocks == want->gemm_blocks &&
         got->comm_blocks == want->comm_blocks && fabs(got->speedup - want->speedup) < 1e-4;
}

/* The whole file into buf (NUL-terminated); its length, or -1. */
static long read_text(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t n = fread(buf, 1, cap - 1, f);
  buf[n] = '\0';
  fclose(f);
  return (long)n;
}

static int write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Lines that are neither the header nor blank. */
static int count_entries(const char *text) {
  int n = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    if (*p != '#' && *p != '\n') n++;
    if (!nl) break;
    p = nl + 1;
  }
  return n;
}

static int first_line_is_header(const char *text) {
  const size_t h = strlen(WEAVE_TUNE_HEADER);
  return strncmp(text, WEAVE_TUNE_HEADER, h) == 0 && text[h] == '\n';
}

/* A path from a format; a path that does not fit fails the test. (vsnprintf: the paths are built from
 * buffers of PATH_MAX, which -Wformat-truncation cannot see are short.) */
static void pathf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  CHECK_MSG(n >= 0 && (size_t)n < len, "path '%s...' too long", buf);
}

static int is_symlink(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static int mode_of(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Files in `dir` named "<base>.<anything>" other than the lock: temporary files a store left. */
static int temp_files_left(const char *dir, const char *base) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  char lock[NAME_MAX + 1];
  pathf(lock, sizeof(lock), "%s.lock", base);
  const size_t bl = strlen(base);
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;)
    if (strncmp(de->d_name, base, bl) == 0 && de->d_name[bl] == '.' && strcmp(de->d_name, lock) != 0) n++;
  closedir(d);
  return n;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* ---- names and buckets ------------------------------------------------------------------------ */
static void test_bucket_and_names(void) {
  CHECK(weave_tune_bucket(1) == 1);
  CHECK(weave_tune_bucket(0) == 1);
  CHECK(weave_tune_bucket(-5) == 1);
  CHECK(weave_tune_bucket(2) == 2);
  CHECK(weave_tune_bucket(3) == 4);
  CHECK(weave_tune_bucket(1000) == 1024);
  CHECK(weave_tune_bucket(1024) == 1024);
  CHECK(weave_tune_bucket(1025) == 2048);
  CHECK(weave_tune_bucket(1 << 30) == 1 << 30);
  CHECK(weave_tune_bucket((1 << 30) - 1) == 1 << 30);
  /* above 2^30 the bucket stops there: no overflow to a negative or 0, no endless loop */
  CHECK(weave_tune_bucket(INT32_MAX) == 1 << 30);
  CHECK(weave_tune_bucket((1 << 30) + 1) == 1 << 30);

  const weave_tune_status_t all[] = {WEAVE_TUNE_FOUND,   WEAVE_TUNE_MISSING, WEAVE_TUNE_FOREIGN,
                                     WEAVE_TUNE_CORRUPT, WEAVE_TUNE_UNSAFE,  WEAVE_TUNE_IO};
  for (size_t i = 0; i < N_OF(all); ++i) {
    const char *a = weave_tune_status_name(all[i]);
    CHECK_MSG(a && a[0] && strcmp(a, "?") != 0, "status %d has no name", (int)all[i]);
    for (size_t j = 0; j < i; ++j)
      CHECK_MSG(a && strcmp(a, weave_tune_status_name(all[j])) != 0, "statuses %d and %d share the name '%s'",
                (int)all[i], (int)all[j], a ? a : "(null)");
  }
  CHECK(strcmp(weave_tune_status_name((weave_tune_status_t)99), "?") == 0);
}

/* ---- one line --------------------------------------------------------------------------------- */
static void test_round_trip(void) {
  char line[1024], want[1024];
  weave_tune_entry_t e = sample_entry(), p;

  /* the exact text of tune.h's format */
  weave_tune_format_line(&e, line, sizeof(line));
  sample_line_with(-1, NULL, want, sizeof(want));
  CHECK_MSG(strcmp(line, want) == 0, "formatted '%s', expected '%s'", line, want);
  memset(&p, 0x5a, sizeof(p));
  CHECK(weave_tune_parse_line(line, &p) == 0 && same_entry(&p, &e));

  /* every strategy x dtype x out_dtype x layout x reduce x slots, and for fp8 every scale mode x
   * accumulation */
  static const weave_dtype_t dtypes[] = {WEAVE_BF16, WEAVE_FP16, WEAVE_FP32, WEAVE_FP8_E4M3};
  static const weave_dtype_t outs[] = {WEAVE_BF16, WEAVE_FP16, WEAVE_FP32};
  int combos = 0;
  for (int s = WEAVE_STRATEGY_FUSED; s <= WEAVE_STRATEGY_BASELINE; ++s)
    for (size_t d = 0; d < N_OF(dtypes); ++d)
      for (size_t o = 0; o < N_OF(outs); ++o)
        for (int lay = 0; lay < 2; ++lay)
          for (int red = 0; red < 3; ++red) /* det, atomic, gather (AllGather + GEMM) */
            for (int slots = 0; slots < 2; ++slots) {
              const int fp8 = dtypes[d] == WEAVE_FP8_E4M3;
              for (int sc = WEAVE_SCALE_NONE; sc <= (fp8 ? WEAVE_SCALE_ROW : WEAVE_SCALE_NONE); ++sc)
                for (int acc = 0; acc <= fp8; ++acc) {
                  weave_tune_entry_t q = sample_entry();
                  q.strategy = (weave_strategy_t)s;
                  q.gemm_blocks = s == WEAVE_STRATEGY_FUSED ? 100 + combos % 30 : 0;
                  q.comm_blocks = s == WEAVE_STRATEGY_FUSED ? 1 + combos % 7 : 0;
                  q.speedup = 1.0 + 0.0625 * (combos % 9);
                  q.key.dtype = dtypes[d];
                  q.key.out_dtype = outs[o];
                  q.key.b_layout = (weave_layout_t)lay;
                  q.key.reduce = (weave_reduce_t)red;
                  q.key.fp32_slots = slots;
                  q.key.scale_mode = (weave_scale_mode_t)sc;
                  q.key.fp8_accum = (weave_fp8_accum_t)acc;
                  weave_tune_format_line(&q, line, sizeof(line));
                  memset(&p, 0x5a, sizeof(p));
                  int rc = weave_tune_parse_line(line, &p);
                  CHECK_MSG(rc == 0 && same_entry(&p, &q) && weave_tune_key_equal(&p.key, &q.key),
                            "round trip of '%s' (rc %d)", line, rc);
                  combos++;
                }
            }
  CHECK(combos == 3 * (3 * 3 * 12 + 1 * 3 * 12 * 6));

  /* the dtype column and the words */
  e.key.dtype = WEAVE_FP8_E4M3;
  e.key.scale_mode = WEAVE_SCALE_ROW;
  e.key.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tfp8_e4m3+row+fast\tbf16\t") != NULL, "line '%s'", line);
  snprintf(e.key.knobs, sizeof(e.key.knobs), "c1g32"); /* the Hopper GEMM's knobs off their defaults */
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tfp8_e4m3+row+fast+hkc1g32\tbf16\t") != NULL, "line '%s'", line);
  memset(&p, 0x5a, sizeof(p));
  CHECK(weave_tune_parse_line(line, &p) == 0 && same_entry(&p, &e) && strcmp(p.key.knobs, "c1g32") == 0);
  e.key.knobs[0] = '\0';
  e.key.fp8_accum = WEAVE_FP8_ACCUM_FP32;
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tfp8_e4m3+row\tbf16\t") != NULL, "line '%s'", line);
  e.key.scale_mode = WEAVE_SCALE_NONE;
  e.key.fp8_accum = WEAVE_FP8_ACCUM_FAST;
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tfp8_e4m3+fast\tbf16\t") != NULL, "line '%s'", line);
  e.key.scale_mode = WEAVE_SCALE_TENSOR; /* per-tensor scales share the entries of none: no suffix */
  e.key.fp8_accum = WEAVE_FP8_ACCUM_FP32;
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tfp8_e4m3\tbf16\t") != NULL, "line '%s'", line);
  memset(&p, 0x5a, sizeof(p));
  CHECK(weave_tune_parse_line(line, &p) == 0 && p.key.scale_mode == WEAVE_SCALE_NONE &&
        p.key.fp8_accum == WEAVE_FP8_ACCUM_FP32 && p.key.dtype == WEAVE_FP8_E4M3);
  e = sample_entry();
  e.key.out_dtype = WEAVE_FP16;
  e.key.b_layout = WEAVE_LAYOUT_ROW;
  e.key.reduce = WEAVE_REDUCE_ATOMIC;
  e.key.fp32_slots = 1;
  e.strategy = WEAVE_STRATEGY_BASELINE;
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strstr(line, "\tbf16\tfp16\trow\tatomic\tfp32\tbaseline\t") != NULL, "line '%s'", line);

  /* tabs and newlines in the device name become spaces (one field, one line), and the key compares
   * as the file holds it */
  e = sample_entry();
  snprintf(e.key.device, sizeof(e.key.device), "NVIDIA\tH200\nSXM");
  weave_tune_format_line(&e, line, sizeof(line));
  CHECK_MSG(strncmp(line, "NVIDIA H200 SXM\t132\t", 20) == 0, "line '%s'", line);
  memset(&p, 0x5a, sizeof(p));
  CHECK(weave_tune_parse_line(line, &p) == 0 && strcmp(p.key.device, "NVIDIA H200 SXM") == 0);
  CHECK(weave_tune_key_equal(&p.key, &e.key));

  /* CRLF line ends, and no line end at all */
  sample_line_with(-1, NULL, line, sizeof(line));
  line[strlen(line) - 1] = '\0';
  e = sample_entry();
  CHECK(weave_tune_parse_line(line, &p) == 0 && same_entry(&p, &e));
  strcat(line, "\r\n");
  CHECK(weave_tune_parse_line(line, &p) == 0 && p.speedup > 1.2499 && p.speedup < 1.2501);
}

static void expect_rejected(const char *line, const char *what) {
  weave_tune_entry_t p, p0;
  memset(&p, 0x5a, sizeof(p));
  p0 = p;
  CHECK_MSG(weave_tune_parse_line(line, &p) == -1, "%s: accepted '%s'", what, line);
  CHECK_MSG(memcmp(&p, &p0, sizeof(p)) == 0, "%s: the entry written though the line was rejected", what);
}

static void test_malformed(void) {
  char line[2048];
  weave_tune_entry_t p;

  /* positive controls: the variations below differ from accepted lines in one field only */
  sample_line_with(-1, NULL, line, sizeof(line));
  CHECK(weave_tune_parse_line(line, &p) == 0);
  static const struct {
    int field;
    const char *value;
  } good[] = {
      {10, "fp8_e4m3"},
      {10, "fp8_e4m3+row"},
      {10, "fp8_e4m3+fast"},
      {10, "fp8_e4m3+row+fast"},
      {10, "fp8_e4m3+row+fast+hkc1"},
      {10, "bf16+hkc1g32"},
      {10, "fp32"},
      {11, "fp32"},
      {4, "10.20.30"},
      {4, "12345.123456.12"},
      {5, "64"},
      {6, "8"},
      {6, "64"}, /* more than world (8): a node team counts its parent's ranks on the GPU */
      {7, "1"},
      {7, "1073741824"},
      {16, "0"},
      {17, "100000"},
      {18, "1"},
      {18, "0.5"},
      {18, "3e2"},
      {2, "0"},
      {3, "0"},
      {0, "x"},
  };
  for (size_t i = 0; i < N_OF(good); ++i) {
    sample_line_with(good[i].field, good[i].value, line, sizeof(line));
    CHECK_MSG(weave_tune_parse_line(line, &p) == 0, "field %d '%s' rejected", good[i].field, good[i].value);
  }

  /* one field wrong */
  static const struct {
    int field;
    const char *value;
  } bad[] = {
      {1, "x"},
      {1, "132x"},
      {1, "0"},
      {1, "-1"},
      {1, "1048577"},
      {1, "13 2"},
      {2, "-1"},
      {2, "12.0"},
      {3, "abc"},
      {3, "99999999999"},
      {4, "0.4"},
      {4, "a.b.c"},
      {4, "1..2"},
      {4, ".1.2"},
      {4, "1.2."},
      {4, "1.2.3.4"},
      {4, "v0.5.0"},
      {4, "0.5.0-rc1"},
      {4, "123456.123456.12"},
      {5, "0"},
      {5, "-8"},
      {5, "65"},
      {5, "eight"},
      {6, "0"},
      {6, "65"},
      {7, "0"},
      {7, "3"},
      {7, "1000"},
      {7, "6144"},
      {7, "2147483648"},
      {8, "0"},
      {8, "-4096"},
      {8, "1073741825"},
      {9, "0"},
      {9, "512x"},
      {10, "bfloat16"},
      {10, "BF16"},
      {10, "half"},
      {10, "float"},
      {10, "fp8"},
      {10, "e4m3"},
      {10, "int8"},
      {10, "auto"},
      {10, "bf16+fast"},
      {10, "bf16+row"},
      {10, "fp16+row+fast"},
      {10, "fp32+fast"},
      {10, "fp8_e4m3+fast+row"},
      {10, "fp8_e4m3+row+row"},
      {10, "fp8_e4m3+fast+fast"},
      {10, "fp8_e4m3+"},
      {10, "fp8_e4m3+tensor"},
      {10, "fp8_e4m3+rowx"},
      {10, "fp8_e4m3+row+"},
      {10, "bf16+hk"},
      {10, "bf16+hkC1"},
      {10, "bf16+hkc-1"},
      {10, "bf16+hkc1+row"},
      {10, "fp8_e4m3+hkc1+fast"},
      {10, "bf16+hkc1 "},
      {10, "bf16+hk0123456789012345678901234567890123456789"},
      {10, "+row"},
      {11, "fp8_e4m3"},
      {11, "auto"},
      {11, "bfloat16"},
      {11, "BF16"},
      {11, "bf16+row"},
      {12, "ROW"},
      {12, "column"},
      {12, "1"},
      {13, "deterministic"},
      {13, "atomics"},
      {13, "0"},
      {14, "fp16"},
      {14, "bf16"},
      {14, "1"},
      {15, "auto"},
      {15, "FUSED"},
      {15, "turbo"},
      {15, "?"},
      {16, "-1"},
      {16, "x"},
      {16, "100001"},
      {17, "-1"},
      {17, "1.5"},
      {18, "nan"},
      {18, "NaN"},
      {18, "inf"},
      {18, "0"},
      {18, "0.0"},
      {18, "-1"},
      {18, "-0.5"},
      {18, "1.0x"},
      {18, "1.25 "},
      {18, "fast"},
  };
  for (size_t i = 0; i < N_OF(bad); ++i) {
    char what[96];
    snprintf(what, sizeof(what), "field %d '%s'", bad[i].field, bad[i].value);
    sample_line_with(bad[i].field, bad[i].value, line, sizeof(line));
    expect_rejected(line, what);
  }
  /* a device name that does not fit the key */
  char longdev[200];
  memset(longdev, 'A', sizeof(longdev) - 1);
  longdev[sizeof(longdev) - 1] = '\0';
  sample_line_with(0, longdev, line, sizeof(line));
  expect_rejected(line, "device of 199 characters");
  /* every field empty in turn */
  for (int i = 0; i < 19; ++i) {
    char what[32];
    snprintf(what, sizeof(what), "field %d empty", i);
    sample_line_with(i, "", line, sizeof(line));
    expect_rejected(line, what);
  }
  /* 18 and 20 fields */
  sample_line_with(-1, NULL, line, sizeof(line));
  *strrchr(line, '\t') = '\0';
  strcat(line, "\n");
  expect_rejected(line, "18 fields");
  sample_line_with(-1, NULL, line, sizeof(line));
  line[strlen(line) - 1] = '\0';
  strcat(line, "\textra\n");
  expect_rejected(line, "20 fields");
  sample_line_with(-1, NULL, line, sizeof(line));
  line[strlen(line) - 1] = '\0';
  strcat(line, "\t\n");
  expect_rejected(line, "20 fields, the last empty");
  /* spaces, not tabs */
  sample_line_with(-1, NULL, line, sizeof(line));
  for (char *c = line; *c; ++c)
    if (*c == '\t') *c = ' ';
  expect_rejected(line, "spaces for tabs");
  /* a line longer than the reader's buffer */
  char big[1500];
  sample_line_with(-1, NULL, big, sizeof(big));
  big[strlen(big) - 1] = '\0';
  memset(big + strlen(big), '0', sizeof(big) - 1 - strlen(big));
  big[sizeof(big) - 1] = '\0';
  expect_rejected(big, "1499 characters");
  /* whole lines */
  expect_rejected(WEAVE_TUNE_HEADER, "the header");
  expect_rejected(WEAVE_TUNE_HEADER "\n", "the header with its newline");
  expect_rejected("# a comment\n", "a comment");
  line[0] = '#';
  sample_line_with(-1, NULL, line + 1, sizeof(line) - 1);
  expect_rejected(line, "a commented-out entry");
  expect_rejected("", "empty");
  expect_rejected("\n", "blank");
  expect_rejected("\r\n", "blank CRLF");
  expect_rejected("   \t \n", "whitespace");
  expect_rejected("garbage\n", "garbage");
  expect_rejected("H200\t8\t1024\t4096\t512\tbf16\tbulk\t0\t0\t1.10\n", "the 0.3 format's 10 columns");
  CHECK(weave_tune_parse_line(NULL, &p) == -1);
  sample_line_with(-1, NULL, line, sizeof(line));
  CHECK(weave_tune_parse_line(line, NULL) == -1);
}

/* ---- the key ---------------------------------------------------------------------------------- */
/* Changes the key's field i (of 19) to another valid value. */
static void change_key_field(weave_tune_key_t *k, int i) {
  switch (i) {
    case 0: k->device[strlen(k->device) - 1] = 'X'; break;
    case 1: k->sms++; break;
    case 2: k->driver++; break;
    case 3: k->runtime++; break;
    case 4: k->weave[0] = '1'; break;
    case 5: k->world *= 2; break;
    case 6: k->ranks_per_device = 2; break;
    case 7: k->m_bucket *= 2; break;
    case 8: k->N++; break;
    case 9: k->K++; break;
    case 10: k->dtype = WEAVE_FP16; break;
    case 11: k->out_dtype = WEAVE_FP16; break;
    case 12: k->b_layout = WEAVE_LAYOUT_ROW; break;
    case 13: k->reduce = WEAVE_REDUCE_ATOMIC; break;
    case 14: k->fp32_slots = 1; break;
    case 15: k->scale_mode = WEAVE_SCALE_ROW; break;
    case 16: k->fp8_accum = WEAVE_FP8_ACCUM_FAST; break;
    case 17: k->reduce = WEAVE_TUNE_GATHER; break;              /* AllGather + GEMM: another op, another entry */
    case 18: snprintf(k->knobs, sizeof(k->knobs), "c1"); break; /* other kernels */
  }
}

static void test_key_equal(void) {
  weave_tune_key_t a = sample_entry().key;
  a.dtype = WEAVE_FP8_E4M3;
  weave_tune_key_t b = a;
  CHECK(weave_tune_key_equal(&a, &a));
  CHECK(weave_tune_key_equal(&a, &b) && weave_tune_key_equal(&b, &a));
  for (int i = 0; i < 19; ++i) {
    b = a;
    change_key_field(&b, i);
    CHECK_MSG(!weave_tune_key_equal(&a, &b) && !weave_tune_key_equal(&b, &a), "keys that differ in field %d equal", i);
  }
  /* per-tensor scales share the entries of none; per-row ones do not */
  b = a;
  a.scale_mode = WEAVE_SCALE_NONE;
  b.scale_mode = WEAVE_SCALE_TENSOR;
  CHECK(weave_tune_key_equal(&a, &b));
  b.scale_mode = WEAVE_SCALE_ROW;
  CHECK(!weave_tune_key_equal(&a, &b));
  a.scale_mode = WEAVE_SCALE_TENSOR;
  CHECK(!weave_tune_key_equal(&a, &b));
  /* device names as the file holds them; otherwise exact */
  b = a;
  snprintf(a.device, sizeof(a.device), "NVIDIA\tH200");
  snprintf(b.device, sizeof(b.device), "NVIDIA H200");
  CHECK(weave_tune_key_equal(&a, &b));
  snprintf(b.device, sizeof(b.device), "NVIDIA H20");
  CHECK(!weave_tune_key_equal(&a, &b));
  snprintf(b.device, sizeof(b.device), "nvidia h200");
  CHECK(!weave_tune_key_equal(&a, &b));
}

/* ---- where ------------------------------------------------------------------------------------ */
static void restore_env(const char *name, const char *saved) {
  if (saved)
    setenv(name, saved, 1);
  else
    unsetenv(name);
}

static void test_path(void) {
  char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char path[PATH_MAX];
  int is_default = -1;

  setenv("HOME", "/home/someone", 1);
  setenv("XDG_CACHE_HOME", "/var/cache/someone", 1);
  CHECK(weave_tune_path("/data/tune.tsv", path, sizeof(path), &is_default) == 0);
  CHECK(strcmp(path, "/data/tune.tsv") == 0 && is_default == 0);
  CHECK(weave_tune_path("rel/tune.tsv", path, sizeof(path), &is_default) == 0); /* as it is */
  CHECK(strcmp(path, "rel/tune.tsv") == 0 && is_default == 0);
  is_default = -1;
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == 0);
  CHECK_MSG(strcmp(path, "/var/cache/someone/weave/tune.tsv") == 0 && is_default == 1, "path '%s'", path);
  is_default = -1;
  CHECK(weave_tune_path("", path, sizeof(path), &is_default) == 0); /* WEAVE_TUNE_FILE= : the default */
  CHECK(strcmp(path, "/var/cache/someone/weave/tune.tsv") == 0 && is_default == 1);
  setenv("XDG_CACHE_HOME", "relative/cache", 1); /* the XDG spec: ignored */
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == 0);
  CHECK_MSG(strcmp(path, "/home/someone/.cache/weave/tune.tsv") == 0 && is_default == 1, "path '%s'", path);
  setenv("XDG_CACHE_HOME", "", 1);
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == 0);
  CHECK(strcmp(path, "/home/someone/.cache/weave/tune.tsv") == 0 && is_default == 1);
  unsetenv("XDG_CACHE_HOME");
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == 0);
  CHECK(strcmp(path, "/home/someone/.cache/weave/tune.tsv") == 0 && is_default == 1);
  unsetenv("HOME");
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == -1);
  setenv("HOME", "", 1);
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == -1);
  setenv("XDG_CACHE_HOME", "relative", 1);
  CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == -1);
  /* a named file needs no HOME */
  CHECK(weave_tune_path("/data/tune.tsv", path, sizeof(path), &is_default) == 0 && is_default == 0);
  /* does not fit */
  setenv("HOME", "/home/someone", 1);
  char small[16];
  CHECK(weave_tune_path(NULL, small, sizeof(small), &is_default) == -1);
  CHECK(weave_tune_path("/data/tune.tsv.that.is.long", small, sizeof(small), &is_default) == -1);
  CHECK(weave_tune_path("/data/15chars.x", small, sizeof(small), &is_default) == 0); /* 15 + NUL fits */
  CHECK(weave_tune_path("/data/16chars.xy", small, sizeof(small), &is_default) == -1);
  char *longhome = malloc(PATH_MAX + 16);
  if (longhome) {
    memset(longhome, 'h', PATH_MAX + 15);
    longhome[0] = '/';
    longhome[PATH_MAX + 15] = '\0';
    setenv("HOME", longhome, 1);
    CHECK(weave_tune_path(NULL, path, sizeof(path), &is_default) == -1);
    free(longhome);
  }

  restore_env("HOME", home);
  restore_env("XDG_CACHE_HOME", xdg);
  free(home);
  free(xdg);
}

/* ---- the file --------------------------------------------------------------------------------- */
static weave_tune_entry_t entry_n(int n) {
  weave_tune_entry_t e = sample_entry();
  e.key.N = n;
  e.gemm_blocks = n % 1000;
  e.comm_blocks = n / 1000;
  return e;
}

/* Where the default cache of XDG_CACHE_HOME=<dir>/<name> is (checked against weave_tune_path). */
static void default_path(const char *dir, const char *name, char *path, size_t len) {
  char xdg[PATH_MAX], want[PATH_MAX];
  pathf(xdg, sizeof(xdg), "%s/%s", dir, name);
  pathf(want, sizeof(want), "%s/weave/tune.tsv", xdg);
  setenv("XDG_CACHE_HOME", xdg, 1);
  int is_default = 0;
  CHECK(weave_tune_path(NULL, path, len, &is_default) == 0 && is_default == 1);
  CHECK_MSG(strcmp(path, want) == 0, "default path '%s', expected '%s'", path, want);
}

static void test_store_lookup(const char *dir) {
  char path[PATH_MAX], folder[PATH_MAX], text[8192], why[1024];
  default_path(dir, "xdg", path, sizeof(path));
  pathf(folder, sizeof(folder), "%s/xdg/weave", dir);
  weave_tune_entry_t e = sample_entry(), out, sentinel;
  memset(&sentinel, 0x5a, sizeof(sentinel));

  out = sentinel;
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING); /* no folder */
  CHECK(memcmp(&out, &sentinel, sizeof(out)) == 0);

  snprintf(why, sizeof(why), "stale");
  CHECK(weave_tune_store(path, 1, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK_MSG(why[0] == '\0', "a plain store says '%s'", why); /* autotune.c logs "started afresh" otherwise */
  char xdg[PATH_MAX];
  pathf(xdg, sizeof(xdg), "%s/xdg", dir);
  CHECK_MSG(mode_of(xdg) == 0700, "mode %o", mode_of(xdg));
  CHECK_MSG(mode_of(folder) == 0700, "mode %o", mode_of(folder));
  CHECK_MSG(mode_of(path) == 0600, "mode %o", mode_of(path));
  CHECK(read_text(path, text, sizeof(text)) > 0 && first_line_is_header(text) && count_entries(text) == 1);

  out = sentinel;
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &e));
  weave_tune_entry_t other = entry_n(8192);
  out = sentinel;
  CHECK(weave_tune_lookup(path, 1, &other.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  CHECK(memcmp(&out, &sentinel, sizeof(out)) == 0);
  /* another file in the same folder */
  char absent[PATH_MAX];
  pathf(absent, sizeof(absent), "%s/absent.tsv", folder);
  CHECK(weave_tune_lookup(absent, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);

  /* the same key: replaced */
  weave_tune_entry_t e2 = e;
  e2.strategy = WEAVE_STRATEGY_BULK;
  e2.gemm_blocks = e2.comm_blocks = 0;
  e2.speedup = 1.1;
  CHECK(weave_tune_store(path, 1, &e2, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(read_text(path, text, sizeof(text)) > 0 && first_line_is_header(text));
  CHECK_MSG(count_entries(text) == 1, "%d entries:\n%s", count_entries(text), text);
  out = sentinel;
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &e2));
  /* per-tensor scales are the key of none: replaced too */
  weave_tune_entry_t e3 = e2;
  e3.key.scale_mode = WEAVE_SCALE_TENSOR;
  e3.strategy = WEAVE_STRATEGY_BASELINE;
  CHECK(weave_tune_store(path, 1, &e3, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(read_text(path, text, sizeof(text)) > 0 && count_entries(text) == 1);
  out = sentinel;
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND &&
        out.strategy == WEAVE_STRATEGY_BASELINE);
  /* another key: added */
  CHECK(weave_tune_store(path, 1, &other, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(read_text(path, text, sizeof(text)) > 0 && first_line_is_header(text) && count_entries(text) == 2);
  CHECK(weave_tune_lookup(path, 1, &other.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &other));
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND &&
        out.strategy == WEAVE_STRATEGY_BASELINE);
  CHECK_MSG(mode_of(path) == 0600, "mode %o after stores", mode_of(path));
  CHECK(temp_files_left(folder, "tune.tsv") == 0);

  /* an empty file: nothing in it, nothing against writing it */
  char empty[PATH_MAX];
  pathf(empty, sizeof(empty), "%s/empty.tsv", dir);
  CHECK(write_text(empty, "") == 0);
  CHECK(weave_tune_lookup(empty, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  CHECK(weave_tune_store(empty, 0, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(read_text(empty, text, sizeof(text)) > 0 && first_line_is_header(text) && count_entries(text) == 1);
  /* the header alone, then comments and blank lines among the entries */
  CHECK(write_text(empty, WEAVE_TUNE_HEADER "\n") == 0);
  CHECK(weave_tune_lookup(empty, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  char l1[1024], body[4096];
  weave_tune_format_line(&e, l1, sizeof(l1));
  snprintf(body, sizeof(body), "%s\r\n# a note\n\n   \n%s", WEAVE_TUNE_HEADER, l1);
  CHECK(write_text(empty, body) == 0);
  out = sentinel;
  CHECK(weave_tune_lookup(empty, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &e));
  /* a folder is not a file */
  CHECK(weave_tune_lookup(dir, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_IO && why[0]);
  /* a file the user named: its folder is not made */
  char nodir[PATH_MAX];
  pathf(nodir, sizeof(nodir), "%s/nodir/tune.tsv", dir);
  CHECK(weave_tune_store(nodir, 0, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_IO && why[0]);
  pathf(nodir, sizeof(nodir), "%s/nodir", dir);
  CHECK(access(nodir, F_OK) != 0);
  CHECK(weave_tune_lookup(NULL, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  CHECK(weave_tune_lookup("", 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  CHECK(weave_tune_store(NULL, 0, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_IO);
  CHECK(weave_tune_store(path, 1, NULL, 1000, why, sizeof(why)) == WEAVE_TUNE_IO);
}

static void test_foreign(const char *dir) {
  static const char *const files[] = {
      "H200\t8\t1024\t4096\t512\tbf16\tbulk\t0\t0\t1.10\n", /* 0.3's format, no header */
      "# device\tworld\tM_bucket\tN\tK_local\tdtype\tstrategy\tgemm\tcomm\tspeedup\n"
      "H200\t8\t1024\t4096\t512\tbf16\tbulk\t0\t0\t1.10\n",
      "# weave tune cache 1\n",  /* another version of the format */
      "# weave tune cache 2 \n", /* not the header exactly */
      "hello\n",
  };
  char path[PATH_MAX], before[4096], after[4096], why[1024];
  pathf(path, sizeof(path), "%s/foreign.tsv", dir);
  weave_tune_entry_t e = sample_entry(), out, sentinel;
  memset(&sentinel, 0x5a, sizeof(sentinel));
  for (size_t i = 0; i < N_OF(files); ++i) {
    CHECK(write_text(path, files[i]) == 0);
    out = sentinel;
    why[0] = '\0';
    weave_tune_status_t s = weave_tune_lookup(path, 0, &e.key, &out, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_FOREIGN && why[0], "file %zu: lookup %s", i, weave_tune_status_name(s));
    CHECK(memcmp(&out, &sentinel, sizeof(out)) == 0);
    why[0] = '\0';
    s = weave_tune_store(path, 0, &e, 1000, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_FOREIGN && why[0], "file %zu: store %s", i, weave_tune_status_name(s));
    long n = read_text(path, after, sizeof(after));
    snprintf(before, sizeof(before), "%s", files[i]);
    CHECK_MSG(n == (long)strlen(before) && memcmp(before, after, (size_t)n) == 0, "file %zu written", i);
  }
  CHECK(temp_files_left(dir, "foreign.tsv") == 0);
  unlink(path);
}

static void test_corrupt(const char *dir) {
  char path[PATH_MAX], text[8192], why[1024], l1[1024], body[8192];
  pathf(path, sizeof(path), "%s/corrupt.tsv", dir);
  weave_tune_entry_t e1 = entry_n(1024), e2 = entry_n(2048), out, sentinel;
  memset(&sentinel, 0x5a, sizeof(sentinel));
  weave_tune_format_line(&e1, l1, sizeof(l1));
  char longline[1600];
  memset(longline, 'x', sizeof(longline) - 2);
  longline[sizeof(longline) - 2] = '\n';
  longline[sizeof(longline) - 1] = '\0';
  const char *const variants[][3] = {
      {"garbage\n", "", "header, garbage"},
      {l1, "garbage\n", "header, an entry, garbage"},
      {"garbage\n", l1, "header, garbage, an entry"},
      {l1, "H200\t8\t1024\t4096\t512\tbf16\tbulk\t0\t0\t1.10\n", "an entry, an old-format line"},
      {l1, longline, "an entry, a line too long"},
  };
  for (size_t i = 0; i < N_OF(variants); ++i) {
    snprintf(body, sizeof(body), "%s\n%s%s", WEAVE_TUNE_HEADER, variants[i][0], variants[i][1]);
    CHECK(write_text(path, body) == 0);
    out = sentinel;
    why[0] = '\0';
    weave_tune_status_t s = weave_tune_lookup(path, 0, &e1.key, &out, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_CORRUPT && why[0], "%s: lookup %s", variants[i][2], weave_tune_status_name(s));
    CHECK_MSG(memcmp(&out, &sentinel, sizeof(out)) == 0, "%s: the valid entry came back from a corrupt file",
              variants[i][2]);
    why[0] = '\0';
    s = weave_tune_store(path, 0, &e2, 1000, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_FOUND && why[0], "%s: store %s, why '%s'", variants[i][2], weave_tune_status_name(s),
              why);
    CHECK(read_text(path, text, sizeof(text)) > 0 && first_line_is_header(text));
    CHECK_MSG(count_entries(text) == 1, "%s: afterwards\n%s", variants[i][2], text);
    CHECK(weave_tune_lookup(path, 0, &e2.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &e2));
    CHECK(weave_tune_lookup(path, 0, &e1.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  }
  /* the reason names the line */
  snprintf(body, sizeof(body), "%s\n%s%s", WEAVE_TUNE_HEADER, l1, longline);
  CHECK(write_text(path, body) == 0);
  CHECK(weave_tune_lookup(path, 0, &e1.key, &out, why, sizeof(why)) == WEAVE_TUNE_CORRUPT);
  CHECK_MSG(strstr(why, "line 3") && strstr(why, "too long"), "why '%s'", why);
  snprintf(body, sizeof(body), "%s\n%sgarbage\n", WEAVE_TUNE_HEADER, l1);
  CHECK(write_text(path, body) == 0);
  CHECK(weave_tune_lookup(path, 0, &e1.key, &out, why, sizeof(why)) == WEAVE_TUNE_CORRUPT);
  CHECK_MSG(strstr(why, "line 3") != NULL, "why '%s'", why);
  CHECK(temp_files_left(dir, "corrupt.tsv") == 0);
  unlink(path);

  /* at most WEAVE_TUNE_MAX_ENTRIES: one more is corrupt; a store into a full file drops the oldest */
  const int max = WEAVE_TUNE_MAX_ENTRIES;
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "%s\n", WEAVE_TUNE_HEADER);
  for (int i = 1; i <= max + 1; ++i) {
    weave_tune_entry_t e = entry_n(i);
    weave_tune_format_line(&e, l1, sizeof(l1));
    fputs(l1, f);
  }
  fclose(f);
  weave_tune_entry_t first = entry_n(1), second = entry_n(2), last = entry_n(max), added = entry_n(max + 100);
  CHECK(weave_tune_lookup(path, 0, &first.key, &out, why, sizeof(why)) == WEAVE_TUNE_CORRUPT);
  CHECK_MSG(strstr(why, "too many") != NULL, "why '%s'", why);
  f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "%s\n", WEAVE_TUNE_HEADER);
  for (int i = 1; i <= max; ++i) {
    weave_tune_entry_t e = entry_n(i);
    weave_tune_format_line(&e, l1, sizeof(l1));
    fputs(l1, f);
  }
  fclose(f);
  CHECK(weave_tune_lookup(path, 0, &first.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &first));
  CHECK(weave_tune_lookup(path, 0, &last.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &last));
  CHECK(weave_tune_store(path, 0, &added, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(path, 0, &first.key, &out, why, sizeof(why)) == WEAVE_TUNE_MISSING);
  CHECK(weave_tune_lookup(path, 0, &second.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(path, 0, &last.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(path, 0, &added.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &added));
  /* replacing an entry of a full file drops none */
  second.strategy = WEAVE_STRATEGY_BULK;
  CHECK(weave_tune_store(path, 0, &second, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  weave_tune_entry_t third = entry_n(3);
  CHECK(weave_tune_lookup(path, 0, &third.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(path, 0, &second.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND &&
        out.strategy == WEAVE_STRATEGY_BULK);
  unlink(path);
  char lockp[PATH_MAX];
  pathf(lockp, sizeof(lockp), "%s.lock", path);
  unlink(lockp);
}

/* Trust: the default folder and file must be this user's alone; a file the user named is used as
 * it is. Uses the default cache test_store_lookup left (two entries). */
static void test_unsafe(const char *dir) {
  char path[PATH_MAX], folder[PATH_MAX], before[8192], after[8192], why[1024];
  default_path(dir, "xdg", path, sizeof(path));
  pathf(folder, sizeof(folder), "%s/xdg/weave", dir);
  weave_tune_entry_t e = sample_entry(), n = entry_n(77), out;
  long nb = read_text(path, before, sizeof(before));
  CHECK(nb > 0 && count_entries(before) == 2);
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);

  static const int bad_folder_modes[] = {0777, 0770, 0702};
  for (size_t i = 0; i < N_OF(bad_folder_modes); ++i) {
    CHECK(chmod(folder, (mode_t)bad_folder_modes[i]) == 0);
    why[0] = '\0';
    weave_tune_status_t s = weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_UNSAFE && why[0], "folder %o: lookup %s", bad_folder_modes[i], weave_tune_status_name(s));
    why[0] = '\0';
    s = weave_tune_store(path, 1, &n, 1000, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_UNSAFE && why[0], "folder %o: store %s", bad_folder_modes[i], weave_tune_status_name(s));
  }
  CHECK(chmod(folder, 0755) == 0); /* others may read: fine */
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(chmod(folder, 0700) == 0);

  static const int bad_file_modes[] = {0666, 0620, 0602};
  for (size_t i = 0; i < N_OF(bad_file_modes); ++i) {
    CHECK(chmod(path, (mode_t)bad_file_modes[i]) == 0);
    why[0] = '\0';
    weave_tune_status_t s = weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_UNSAFE && why[0], "file %o: lookup %s", bad_file_modes[i], weave_tune_status_name(s));
    s = weave_tune_store(path, 1, &n, 1000, why, sizeof(why));
    CHECK_MSG(s == WEAVE_TUNE_UNSAFE, "file %o: store %s", bad_file_modes[i], weave_tune_status_name(s));
  }
  CHECK(chmod(path, 0644) == 0); /* others may read: fine */
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(chmod(path, 0600) == 0);
  long na = read_text(path, after, sizeof(after));
  CHECK_MSG(na == nb && memcmp(before, after, (size_t)nb) == 0, "the unsafe stores wrote the file");

  /* the default file a symlink (to a valid cache of this user's): not followed, the target untouched */
  char target[PATH_MAX], saved[PATH_MAX], tbefore[4096], tafter[4096];
  pathf(target, sizeof(target), "%s/target.tsv", dir);
  pathf(saved, sizeof(saved), "%s/saved.tsv", folder);
  char l1[1024], body[2048];
  weave_tune_format_line(&e, l1, sizeof(l1));
  snprintf(body, sizeof(body), "%s\n%s", WEAVE_TUNE_HEADER, l1);
  CHECK(write_text(target, body) == 0 && chmod(target, 0600) == 0);
  long tn = read_text(target, tbefore, sizeof(tbefore));
  CHECK(rename(path, saved) == 0);
  CHECK(symlink(target, path) == 0);
  memset(&out, 0x5a, sizeof(out));
  weave_tune_status_t s = weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why));
  CHECK_MSG(s == WEAVE_TUNE_UNSAFE || s == WEAVE_TUNE_IO, "symlinked default file: lookup %s",
            weave_tune_status_name(s));
  s = weave_tune_store(path, 1, &n, 1000, why, sizeof(why));
  CHECK_MSG(s != WEAVE_TUNE_FOUND, "symlinked default file: store %s", weave_tune_status_name(s));
  CHECK(is_symlink(path)); /* still the link, not replaced by a file */
  CHECK(read_text(target, tafter, sizeof(tafter)) == tn && memcmp(tbefore, tafter, (size_t)tn) == 0);
  CHECK(unlink(path) == 0);
  CHECK(rename(saved, path) == 0);
  CHECK(temp_files_left(folder, "tune.tsv") == 0);

  /* the default folder a symlink to a folder of this user's */
  char real[PATH_MAX], linkdir[PATH_MAX], xdg2[PATH_MAX], path2[PATH_MAX];
  pathf(real, sizeof(real), "%s/realcache", dir);
  pathf(xdg2, sizeof(xdg2), "%s/xdg_linked", dir);
  pathf(linkdir, sizeof(linkdir), "%s/weave", xdg2);
  CHECK(mkdir(real, 0700) == 0 && mkdir(xdg2, 0700) == 0 && symlink(real, linkdir) == 0);
  pathf(path2, sizeof(path2), "%s/tune.tsv", real);
  CHECK(write_text(path2, body) == 0 && chmod(path2, 0600) == 0);
  default_path(dir, "xdg_linked", path2, sizeof(path2));
  s = weave_tune_lookup(path2, 1, &e.key, &out, why, sizeof(why));
  CHECK_MSG(s == WEAVE_TUNE_UNSAFE, "symlinked default folder: lookup %s", weave_tune_status_name(s));
  s = weave_tune_store(path2, 1, &n, 1000, why, sizeof(why));
  CHECK_MSG(s == WEAVE_TUNE_UNSAFE, "symlinked default folder: store %s", weave_tune_status_name(s));

  /* a file the user named (WEAVE_TUNE_FILE): read as it is, and a store keeps its mode */
  char shared[PATH_MAX], fresh[PATH_MAX];
  pathf(shared, sizeof(shared), "%s/shared.tsv", dir);
  CHECK(write_text(shared, body) == 0 && chmod(shared, 0644) == 0);
  CHECK(weave_tune_lookup(shared, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND && same_entry(&out, &e));
  CHECK(weave_tune_lookup(shared, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND); /* 0644 is safe too */
  CHECK(weave_tune_store(shared, 0, &n, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK_MSG(mode_of(shared) == 0644, "mode %o after a store", mode_of(shared));
  CHECK(weave_tune_lookup(shared, 0, &n.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(chmod(shared, 0664) == 0);
  CHECK(weave_tune_lookup(shared, 0, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(shared, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_UNSAFE);
  CHECK(weave_tune_store(shared, 0, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK_MSG(mode_of(shared) == 0664, "mode %o after a store", mode_of(shared));
  pathf(fresh, sizeof(fresh), "%s/fresh.tsv", dir);
  CHECK(weave_tune_store(fresh, 0, &e, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK_MSG(mode_of(fresh) == 0644, "a new named file: mode %o", mode_of(fresh));
  /* a named file may be a symlink: followed */
  char named_link[PATH_MAX];
  pathf(named_link, sizeof(named_link), "%s/named_link.tsv", dir);
  CHECK(symlink(shared, named_link) == 0);
  CHECK(weave_tune_lookup(named_link, 0, &n.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
}

/* Processes storing into one file at once lose nothing, and a reader never sees a torn file. */
static void test_concurrent(const char *dir) {
  enum { CHILDREN = 4, EACH = 25 };
  char path[PATH_MAX], folder[PATH_MAX], text[65536], why[1024];
  default_path(dir, "xdg_conc", path, sizeof(path));
  pathf(folder, sizeof(folder), "%s/xdg_conc/weave", dir);
  /* an entry there from the start: every lookup along the way must find it */
  weave_tune_entry_t keep = entry_n(999999), out;
  CHECK(weave_tune_store(path, 1, &keep, 1000, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  fflush(NULL);
  pid_t pids[CHILDREN];
  for (int c = 0; c < CHILDREN; ++c) {
    pids[c] = fork();
    if (pids[c] == 0) {
      for (int i = 0; i < EACH; ++i) {
        weave_tune_entry_t e = entry_n(1 + c * 100 + i);
        char w[1024];
        if (weave_tune_store(path, 1, &e, 10000, w, sizeof(w)) != WEAVE_TUNE_FOUND) {
          fprintf(stderr, "child %d, entry %d: %s\n", c, i, w);
          _exit(1);
        }
      }
      _exit(0);
    }
    CHECK(pids[c] > 0);
  }
  int alive = 0;
  for (int c = 0; c < CHILDREN; ++c) alive += pids[c] > 0;
  int lookups = 0, during = 0, torn = 0, lost = 0, failed = 0;
  while (alive > 0 || lookups < 200) {
    weave_tune_status_t s = weave_tune_lookup(path, 1, &keep.key, &out, why, sizeof(why));
    lookups++;
    during += alive > 0;
    if (s == WEAVE_TUNE_CORRUPT || s == WEAVE_TUNE_FOREIGN) {
      if (torn++ == 0) fprintf(stderr, "lookup %d: %s (%s)\n", lookups, weave_tune_status_name(s), why);
    } else if (s != WEAVE_TUNE_FOUND || !same_entry(&out, &keep)) {
      lost++;
    }
    for (int c = 0; c < CHILDREN; ++c) {
      int status;
      if (pids[c] > 0 && waitpid(pids[c], &status, WNOHANG) == pids[c]) {
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
        pids[c] = 0;
        alive--;
      }
    }
  }
  CHECK_MSG(failed == 0, "%d writers failed", failed);
  CHECK_MSG(torn == 0, "%d of %d lookups (%d while writers ran) saw a torn file", torn, lookups, during);
  CHECK_MSG(lost == 0, "%d of %d lookups did not find the entry stored before the writers", lost, lookups);
  printf("test_tune: %d lookups while %d writers stored %d entries each\n", during, CHILDREN, EACH);

  CHECK(read_text(path, text, sizeof(text)) > 0 && first_line_is_header(text));
  CHECK_MSG(count_entries(text) == CHILDREN * EACH + 1, "%d entries", count_entries(text));
  int missing = 0;
  for (int c = 0; c < CHILDREN; ++c)
    for (int i = 0; i < EACH; ++i) {
      weave_tune_entry_t e = entry_n(1 + c * 100 + i);
      if (weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) != WEAVE_TUNE_FOUND || !same_entry(&out, &e))
        missing++;
    }
  CHECK_MSG(missing == 0, "%d of %d entries lost", missing, CHILDREN * EACH);
  CHECK(mode_of(path) == 0600);
  CHECK(temp_files_left(folder, "tune.tsv") == 0);
}

/* A store waits for the lock lock_ms at most, and says so. */
static void test_lock_bound(const char *dir) {
  char path[PATH_MAX], lockp[PATH_MAX], before[65536], after[65536], why[1024];
  default_path(dir, "xdg_conc", path, sizeof(path));
  pathf(lockp, sizeof(lockp), "%s.lock", path);
  long nb = read_text(path, before, sizeof(before));
  int fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  if (fd < 0) return;
  CHECK(flock(fd, LOCK_EX) == 0);
  weave_tune_entry_t e = entry_n(123456), out;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  why[0] = '\0';
  weave_tune_status_t s = weave_tune_store(path, 1, &e, 100, why, sizeof(why));
  const double took = seconds_since(&t0);
  CHECK_MSG(s == WEAVE_TUNE_IO, "store under a held lock: %s", weave_tune_status_name(s));
  CHECK_MSG(took >= 0.09 && took < 2.0, "the store gave up after %.3f s (bound 0.1 s)", took);
  CHECK_MSG(strstr(why, "lock") != NULL, "why '%s'", why);
  CHECK(read_text(path, after, sizeof(after)) == nb && memcmp(before, after, (size_t)nb) == 0);
  /* readers take no lock */
  weave_tune_entry_t keep = entry_n(999999);
  CHECK(weave_tune_lookup(path, 1, &keep.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(flock(fd, LOCK_UN) == 0);
  close(fd);
  CHECK(weave_tune_store(path, 1, &e, 100, why, sizeof(why)) == WEAVE_TUNE_FOUND);
  CHECK(weave_tune_lookup(path, 1, &e.key, &out, why, sizeof(why)) == WEAVE_TUNE_FOUND);
}

/* A store whose write fails (here the file size limit, in a process of its own) leaves the file as it
 * was and no temporary file behind. */
static void test_write_failure(const char *dir) {
  char path[PATH_MAX], before[8192], after[8192], l1[1024];
  pathf(path, sizeof(path), "%s/full.tsv", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (!f) return;
  fprintf(f, "%s\n", WEAVE_TUNE_HEADER);
  for (int i = 1; i <= 10; ++i) {
    weave_tune_entry_t e = entry_n(i);
    weave_tune_format_line(&e, l1, sizeof(l1));
    fputs(l1, f);
  }
  fclose(f);
  const long nb = read_text(path, before, sizeof(before));
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead */
    struct rlimit rl = {64, 64};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
    weave_tune_entry_t e = entry_n(4242);
    char w[1024] = "";
    weave_tune_status_t s = weave_tune_store(path, 0, &e, 1000, w, sizeof(w));
    _exit(s == WEAVE_TUNE_IO && w[0] ? 0 : 1);
  }
  CHECK(pid > 0);
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a store past the size limit: exit status %d", status);
  CHECK(read_text(path, after, sizeof(after)) == nb && memcmp(before, after, (size_t)nb) == 0);
  CHECK_MSG(temp_files_left(dir, "full.tsv") == 0, "a failed store left its temporary file");
}

static void test_files(void) {
  char dir[] = "/tmp/weave_test_tune_XXXXXX";
  if (!mkdtemp(dir)) {
    CHECK_MSG(0, "mkdtemp: %s", strerror(errno));
    return;
  }
  char *xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  const mode_t old_umask = umask(022); /* the modes below are the library's, not the umask's */
  test_store_lookup(dir);
  test_foreign(dir);
  test_write_failure(dir);
  test_corrupt(dir);
  test_unsafe(dir);
  test_concurrent(dir);
  test_lock_bound(dir);
  umask(old_umask);
  restore_env("XDG_CACHE_HOME", xdg);
  free(xdg);
  CHECK(nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) == 0);
}

/* ---- the tuner's verdict on measured times ----------------------------------------------------- */
static void expect_race(const double *ms, int n, int first, int second, int close) {
  int f = -2, s = -2;
  const int c = weave_tune_close_race(ms, n, &f, &s);
  CHECK_MSG(f == first && s == second && c == close, "close race over %d times: got (%d, %d, %d), want (%d, %d, %d)", n,
            f, s, c, first, second, close);
}

static void test_choice(void) {
  /* the baseline (first) keeps a near tie; a later candidate must be 1% faster than the best so far */
  const double near[] = {1.000, 0.995, 1.200};
  CHECK(weave_tune_pick(near, 3) == 0);
  expect_race(near, 3, 1, 0, 1);
  const double clear[] = {1.000, 0.980, 0.970};
  CHECK(weave_tune_pick(clear, 3) == 2);
  /* 0.980 then 0.975: the second is not 1% faster than the first winner */
  const double steps[] = {1.000, 0.980, 0.975};
  CHECK(weave_tune_pick(steps, 3) == 1);
  /* the slow one avoided, whatever its place */
  const double slow_first[] = {2.000, 1.000, 1.100};
  CHECK(weave_tune_pick(slow_first, 3) == 1);
  expect_race(slow_first, 3, 1, 2, 0);
  /* a tie keeps the earlier first, and is a race */
  const double tie[] = {1.000, 1.000};
  CHECK(weave_tune_pick(tie, 2) == 0);
  expect_race(tie, 2, 0, 1, 1);
  /* 3% apart is no race; just under is */
  const double apart[] = {1.000, 1.031};
  expect_race(apart, 2, 0, 1, 0);
  const double under[] = {1.000, 1.029};
  expect_race(under, 2, 0, 1, 1);
  /* candidates that did not run (< 0) or gave no number (NaN) are never chosen */
  const double dead[] = {-1.0, NAN, 1.500, 3.000};
  CHECK(weave_tune_pick(dead, 4) == 2);
  expect_race(dead, 4, 2, 3, 0);
  const double one[] = {-1.0, 0.700};
  CHECK(weave_tune_pick(one, 2) == 1);
  expect_race(one, 2, 1, -1, 0);
  const double none[] = {-1.0, -1.0};
  CHECK(weave_tune_pick(none, 2) == -1);
  expect_race(none, 2, -1, -1, 0);
  CHECK(weave_tune_pick(none, 0) == -1);
}

int main(void) {
  setenv("WEAVE_DEBUG", "NONE", 1);
  test_bucket_and_names();
  test_round_trip();
  test_malformed();
  test_key_equal();
  test_path();
  test_files();
  test_choice();
  return check_summary("test_tune");
}
