/* The tuning cache: see tune.h. */
#define _GNU_SOURCE
#include "plan/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"

#define TUNE_FIELDS 19
#define TUNE_LINE_MAX 1024

int weave_tune_bucket(int M) {
  int b = 1;
  while (b < M && b < (1 << 30)) b <<= 1;
  return b;
}

const char *weave_tune_status_name(weave_tune_status_t s) {
  switch (s) {
    case WEAVE_TUNE_FOUND: return "found";
    case WEAVE_TUNE_MISSING: return "missing";
    case WEAVE_TUNE_FOREIGN: return "foreign";
    case WEAVE_TUNE_CORRUPT: return "corrupt";
    case WEAVE_TUNE_UNSAFE: return "unsafe";
    case WEAVE_TUNE_IO: return "i/o error";
  }
  return "?";
}

/* ---- one line ----------------------------------------------------------------------------------- */
static int parse_strategy(const char *s, weave_strategy_t *out) {
  for (int i = WEAVE_STRATEGY_FUSED; i <= WEAVE_STRATEGY_BASELINE; ++i)
    if (strcmp(s, weave_strategy_name((weave_strategy_t)i)) == 0) {
      *out = (weave_strategy_t)i;
      return 0;
    }
  return -1; /* AUTO is not a measured strategy */
}

/* One of two words: 0 or 1, -1 for anything else. */
static int parse_word(const char *s, const char *w0, const char *w1) {
  return strcmp(s, w0) == 0 ? 0 : strcmp(s, w1) == 0 ? 1 : -1;
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

/* The dtype column, dtype[+row][+fast][+hk<knobs>]: suffixes in that order, +row and +fast fp8 only;
 * knobs: lowercase letters and digits. */
static int parse_dtype_field(char *s, weave_tune_key_t *k) {
  char *plus = strchr(s, '+');
  if (plus) {
    const char *rest = plus;
    if (strncmp(rest, "+row", 4) == 0) {
      k->scale_mode = WEAVE_SCALE_ROW;
      rest += 4;
    }
    if (strncmp(rest, "+fast", 5) == 0) {
      k->fp8_accum = WEAVE_FP8_ACCUM_FAST;
      rest += 5;
    }
    if (strncmp(rest, "+hk", 3) == 0) {
      rest += 3;
      const size_t n = strlen(rest);
      if (n == 0 || n >= sizeof(k->knobs)) return -1;
      for (const char *c = rest; *c; ++c)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9'))) return -1;
      memcpy(k->knobs, rest, n + 1);
      rest += n;
    }
    if (*rest) return -1; /* another suffix, another order, or junk after one */
    *plus = '\0';
  }
  if (strcmp(s, weave_dtype_name(WEAVE_BF16)) && strcmp(s, weave_dtype_name(WEAVE_FP16)) &&
      strcmp(s, weave_dtype_name(WEAVE_FP32)) && strcmp(s, weave_dtype_name(WEAVE_FP8_E4M3)))
    return -1; /* the canonical names only: one spelling per key */
  weave_dtype_parse(s, &k->dtype);
  if ((k->scale_mode == WEAVE_SCALE_ROW || k->fp8_accum == WEAVE_FP8_ACCUM_FAST) && !weave_dtype_is_fp8(k->dtype))
    return -1;
  return 0;
}

static int row_scales(weave_scale_mode_t m) { return m == WEAVE_SCALE_ROW; }

static int valid_version(const char *s) {
  int dots = 0, digits = 0;
  for (; *s; ++s) {
    if (*s == '.') {
      if (!digits) return 0;
      dots++;
      digits = 0;
    } else if (*s >= '0' && *s <= '9') {
      digits++;
    } else {
      return 0;
    }
  }
  return dots == 2 && digits > 0;
}

int weave_tune_parse_line(const char *line, weave_tune_entry_t *e) {
  if (!line || !e || line[0] == '#' || line[0] == '\n' || line[0] == '\r' || line[0] == '\0') return -1;
  char buf[TUNE_LINE_MAX];
  if (strlen(line) >= sizeof(buf)) return -1;
  snprintf(buf, sizeof(buf), "%s", line);
  buf[strcspn(buf, "\r\n")] = '\0';
  /* split on tabs, keeping empty fields (an empty field is malformed) */
  char *f[TUNE_FIELDS + 1];
  int n = 0;
  for (char *p = buf;;) {
    if (n == TUNE_FIELDS + 1) return -1;
    f[n++] = p;
    char *tab = strchr(p, '\t');
    if (!tab) break;
    *tab = '\0';
    p = tab + 1;
  }
  if (n != TUNE_FIELDS) return -1;
  for (int i = 0; i < n; ++i)
    if (!f[i][0]) return -1;
  weave_tune_entry_t t;
  memset(&t, 0, sizeof(t));
  weave_tune_key_t *k = &t.key;
  if (strlen(f[0]) >= sizeof(k->device) || strlen(f[4]) >= sizeof(k->weave) || !valid_version(f[4])) return -1;
  snprintf(k->device, sizeof(k->device), "%s", f[0]);
  snprintf(k->weave, sizeof(k->weave), "%s", f[4]);
  long v[9];
  static const long lo[9] = {1, 0, 0, 0, 1, 1, 1, 1, 1};
  static const long hi[9] = {1 << 20, INT_MAX, INT_MAX, 0, WEAVE_MAX_WORLD, WEAVE_MAX_WORLD, 1 << 30, 1 << 30, 1 << 30};
  static const int col[9] = {1, 2, 3, -1, 5, 6, 7, 8, 9};
  for (int i = 0; i < 9; ++i)
    if (col[i] >= 0 && parse_long(f[col[i]], lo[i], hi[i], &v[i])) return -1;
  k->sms = (int)v[0];
  k->driver = (int)v[1];
  k->runtime = (int)v[2];
  k->world = (int)v[4];
  k->ranks_per_device = (int)v[5];
  k->m_bucket = (int)v[6];
  k->N = (int)v[7];
  k->K = (int)v[8];
  if (k->m_bucket & (k->m_bucket - 1)) return -1;
  if (parse_dtype_field(f[10], k)) return -1;
  if (weave_dtype_parse(f[11], &k->out_dtype) || strcmp(f[11], weave_dtype_name(k->out_dtype)) ||
      weave_dtype_is_fp8(k->out_dtype))
    return -1;
  int layout = parse_word(f[12], "row", "col"), reduce = parse_word(f[13], "det", "atomic"),
      slots = parse_word(f[14], "out", "fp32");
  if (strcmp(f[13], "gather") == 0) reduce = (int)WEAVE_TUNE_GATHER;
  if (layout < 0 || reduce < 0 || slots < 0) return -1;
  k->b_layout = (weave_layout_t)layout;
  k->reduce = (weave_reduce_t)reduce;
  k->fp32_slots = slots;
  if (parse_strategy(f[15], &t.strategy)) return -1;
  long g, c;
  if (parse_long(f[16], 0, 100000, &g) || parse_long(f[17], 0, 100000, &c)) return -1;
  t.gemm_blocks = (int)g;
  t.comm_blocks = (int)c;
  char *end;
  t.speedup = strtod(f[18], &end);
  if (*end || !isfinite(t.speedup) || t.speedup <= 0) return -1;
  *e = t;
  return 0;
}

/* The device name as the file holds it: tabs and line ends made spaces, a leading '#' (a comment)
 * made '_'. Keys compare by it. */
static void file_device_name(const char *in, char *out, size_t len) {
  snprintf(out, len, "%s", in);
  for (char *p = out; *p; ++p)
    if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
  if (out[0] == '#') out[0] = '_';
}

void weave_tune_format_line(const weave_tune_entry_t *e, char *buf, size_t len) {
  const weave_tune_key_t *k = &e->key;
  char device[sizeof(k->device)];
  file_device_name(k->device, device, sizeof(device));
  snprintf(buf, len, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s%s%s%s%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.4f\n", device,
           k->sms, k->driver, k->runtime, k->weave, k->world, k->ranks_per_device, k->m_bucket, k->N, k->K,
           weave_dtype_name(k->dtype), row_scales(k->scale_mode) ? "+row" : "",
           k->fp8_accum == WEAVE_FP8_ACCUM_FAST ? "+fast" : "", k->knobs[0] ? "+hk" : "", k->knobs,
           weave_dtype_name(k->out_dtype), k->b_layout == WEAVE_LAYOUT_COL ? "col" : "row",
           k->reduce == WEAVE_TUNE_GATHER     ? "gather"
           : k->reduce == WEAVE_REDUCE_ATOMIC ? "atomic"
                                              : "det",
           k->fp32_slots ? "fp32" : "out", weave_strategy_name(e->strategy), e->gemm_blocks, e->comm_blocks,
           e->speedup);
}

int weave_tune_key_equal(const weave_tune_key_t *a, const weave_tune_key_t *b) {
  /* device names compared as the file holds them (tabs made spaces) */
  char da[sizeof(a->device)], db[sizeof(b->device)];
  file_device_name(a->device, da, sizeof(da));
  file_device_name(b->device, db, sizeof(db));
  return strcmp(da, db) == 0 && a->sms == b->sms && a->driver == b->driver && a->runtime == b->runtime &&
         strcmp(a->weave, b->weave) == 0 && a->world == b->world && a->ranks_per_device == b->ranks_per_device &&
         a->m_bucket == b->m_bucket && a->N == b->N && a->K == b->K && a->dtype == b->dtype &&
         a->out_dtype == b->out_dtype && a->b_layout == b->b_layout && a->reduce == b->reduce &&
         a->fp32_slots == b->fp32_slots && row_scales(a->scale_mode) == row_scales(b->scale_mode) &&
         a->fp8_accum == b->fp8_accum && strcmp(a->knobs, b->knobs) == 0;
}

/* ---- where ------------------------------------------------------------------------------------ */
int weave_tune_path(const char *tune_file, char *path, size_t len, int *is_default) {
  int n;
  *is_default = 0;
  if (tune_file && *tune_file) {
    n = snprintf(path, len, "%s", tune_file);
  } else {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    *is_default = 1;
    if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is ignored */
      n = snprintf(path, len, "%s/weave/tune.tsv", xdg);
    else if (home && *home)
      n = snprintf(path, len, "%s/.cache/weave/tune.tsv", home);
    else
      return -1;
  }
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static void say(char *why, size_t len, const char *fmt, const char *a, const char *b) {
  if (why && len) snprintf(why, len, fmt, a, b);
}

/* The default cache's folder and file are this user's alone. */
static int owned_safely(const struct stat *st) { return st->st_uid == geteuid() && (st->st_mode & 022) == 0; }

/* ---- reading ---------------------------------------------------------------------------------- */
typedef struct {
  weave_tune_entry_t *e;
  int n;
} entries_t;

/* Reads the whole file into `all` (when non-NULL) and/or finds `key`. MISSING when there is no file. */
static weave_tune_status_t read_file(const char *path, int is_default, const weave_tune_key_t *key,
                                     weave_tune_entry_t *found, entries_t *all, char *why, size_t why_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | (is_default ? O_NOFOLLOW : 0));
  if (fd < 0) {
    if (errno == ENOENT) return WEAVE_TUNE_MISSING;
    say(why, why_len, "cannot open %s: %s", path, strerror(errno));
    return errno == ELOOP ? WEAVE_TUNE_UNSAFE : WEAVE_TUNE_IO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    say(why, why_len, "%s is not a regular file%s", path, "");
    return WEAVE_TUNE_IO;
  }
  if (is_default && !owned_safely(&st)) {
    close(fd);
    say(why, why_len, "%s belongs to another user or others may write it%s", path, "");
    return WEAVE_TUNE_UNSAFE;
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    say(why, why_len, "cannot read %s: %s", path, strerror(errno));
    return WEAVE_TUNE_IO;
  }
  char line[TUNE_LINE_MAX];
  weave_tune_status_t st_out = WEAVE_TUNE_MISSING;
  int lineno = 0, entries = 0;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    size_t l = strlen(line);
    if (l == sizeof(line) - 1 && line[l - 1] != '\n') {
      snprintf(why, why_len, "%s: line %d is too long", path, lineno);
      st_out = WEAVE_TUNE_CORRUPT;
      break;
    }
    if (lineno == 1) {
      line[strcspn(line, "\r\n")] = '\0';
      if (strcmp(line, WEAVE_TUNE_HEADER) != 0) {
        snprintf(why, why_len, "%s does not start with '%s' (another program's file, or an older weave's)", path,
                 WEAVE_TUNE_HEADER);
        st_out = WEAVE_TUNE_FOREIGN;
        break;
      }
      continue;
    }
    if (line[0] == '#' || line[strspn(line, " \t\r\n")] == '\0') continue;
    weave_tune_entry_t e;
    if (weave_tune_parse_line(line, &e) != 0 || ++entries > WEAVE_TUNE_MAX_ENTRIES) {
      snprintf(why, why_len, "%s: line %d is malformed%s", path, lineno,
               entries > WEAVE_TUNE_MAX_ENTRIES ? " (too many entries)" : "");
      st_out = WEAVE_TUNE_CORRUPT;
      break;
    }
    if (key && weave_tune_key_equal(&e.key, key)) {
      *found = e;
      st_out = WEAVE_TUNE_FOUND;
    }
    if (all) all->e[all->n++] = e;
  }
  if (lineno == 0) { /* an empty file: nothing in it, and nothing against writing it */
    fclose(f);
    return WEAVE_TUNE_MISSING;
  }
  fclose(f);
  return st_out;
}

weave_tune_status_t weave_tune_lookup(const char *path, int is_default, const weave_tune_key_t *key,
                                      weave_tune_entry_t *out, char *why, size_t why_len) {
  char scratch[8];
  if (!why || !why_len) {
    why = scratch;
    why_len = sizeof(scratch);
  }
  why[0] = '\0';
  if (!path || !*path || !key || !out) return WEAVE_TUNE_MISSING;
  if (is_default) { /* the folder too: another user's folder could swap the file under us */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    struct stat st;
    if (lstat(dir, &st) != 0) return WEAVE_TUNE_MISSING;
    if (!S_ISDIR(st.st_mode) || !owned_safely(&st)) {
      say(why, why_len, "%s is not a folder of this user's alone%s", dir, "");
      return WEAVE_TUNE_UNSAFE;
    }
  }
  weave_tune_entry_t e;
  weave_tune_status_t s = read_file(path, is_default, key, &e, NULL, why, why_len);
  if (s == WEAVE_TUNE_FOUND) *out = e;
  return s;
}

/* ---- writing ---------------------------------------------------------------------------------- */
/* mkdir -p of the default cache's folder, each new folder 0700; then the folder must be this user's
 * alone. */
static weave_tune_status_t make_cache_dir(const char *path, char *why, size_t why_len) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) return WEAVE_TUNE_IO;
  *slash = '\0';
  for (char *p = dir + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
      say(why, why_len, "cannot create %s: %s", dir, strerror(errno));
      return WEAVE_TUNE_IO;
    }
    *p = '/';
  }
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    say(why, why_len, "cannot create %s: %s", dir, strerror(errno));
    return WEAVE_TUNE_IO;
  }
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || !owned_safely(&st)) {
    say(why, why_len, "%s is not a folder of this user's alone%s", dir, "");
    return WEAVE_TUNE_UNSAFE;
  }
  return WEAVE_TUNE_FOUND;
}

static int lock_file(const char *path, int is_default, int lock_ms) {
  char lpath[PATH_MAX];
  if (snprintf(lpath, sizeof(lpath), "%s.lock", path) >= (int)sizeof(lpath)) return -1;
  int fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC | (is_default ? O_NOFOLLOW : 0), 0600);
  if (fd < 0) return -1;
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= lock_ms) break;
    const struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
  }
  close(fd);
  return -1;
}

/* The entries, header first, to a temporary file beside `path`, then renamed over it. */
static weave_tune_status_t write_atomically(const char *path, int is_default, const entries_t *all, char *why,
                                            size_t why_len) {
  char tmp[PATH_MAX];
  if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp)) return WEAVE_TUNE_IO;
  int fd = mkostemp(tmp, O_CLOEXEC); /* 0600 */
  if (fd < 0) {
    say(why, why_len, "cannot create a temporary file beside %s: %s", path, strerror(errno));
    return WEAVE_TUNE_IO;
  }
  struct stat old;
  /* a file the user named keeps its mode (a shared, readable file stays so); new ones are 0644 */
  if (!is_default) fchmod(fd, stat(path, &old) == 0 ? (old.st_mode & 0777) : 0644);
  FILE *f = fdopen(fd, "w");
  int ok = f != NULL;
  if (ok) ok = fprintf(f, "%s\n", WEAVE_TUNE_HEADER) > 0;
  for (int i = 0; ok && i < all->n; ++i) {
    char line[TUNE_LINE_MAX];
    weave_tune_format_line(&all->e[i], line, sizeof(line));
    ok = fputs(line, f) >= 0;
  }
  if (ok) ok = fflush(f) == 0 && fsync(fd) == 0;
  if (f)
    ok = (fclose(f) == 0) && ok;
  else
    close(fd);
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) {
    say(why, why_len, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return WEAVE_TUNE_IO;
  }
  return WEAVE_TUNE_FOUND;
}

weave_tune_status_t weave_tune_store(const char *path, int is_default, const weave_tune_entry_t *e, int lock_ms,
                                     char *why, size_t why_len) {
  char scratch[8];
  if (!why || !why_len) {
    why = scratch;
    why_len = sizeof(scratch);
  }
  why[0] = '\0';
  if (!path || !*path || !e) return WEAVE_TUNE_IO;
  /* only what a lookup would read back: an entry that does not parse would make the file corrupt */
  char line[TUNE_LINE_MAX];
  weave_tune_entry_t back;
  weave_tune_format_line(e, line, sizeof(line));
  if (weave_tune_parse_line(line, &back) != 0 || !weave_tune_key_equal(&back.key, &e->key)) {
    snprintf(why, why_len, "the entry is not one the cache can hold: %.200s", line);
    return WEAVE_TUNE_IO;
  }
  if (is_default) {
    weave_tune_status_t d = make_cache_dir(path, why, why_len);
    if (d != WEAVE_TUNE_FOUND) return d;
  }
  int lock = lock_file(path, is_default, lock_ms);
  if (lock < 0) {
    say(why, why_len, "cannot lock %s.lock within the bound (%s)", path, strerror(errno));
    return WEAVE_TUNE_IO;
  }
  entries_t all = {(weave_tune_entry_t *)malloc(sizeof(weave_tune_entry_t) * (WEAVE_TUNE_MAX_ENTRIES + 1)), 0};
  weave_tune_status_t s = WEAVE_TUNE_IO;
  if (all.e) {
    weave_tune_entry_t unused;
    s = read_file(path, is_default, NULL, &unused, &all, why, why_len);
    if (s == WEAVE_TUNE_CORRUPT) all.n = 0; /* our header, bad contents: started afresh (why says so) */
    if (s == WEAVE_TUNE_MISSING || s == WEAVE_TUNE_CORRUPT) {
      int kept = 0; /* every entry of the key goes (a hand-edited file may hold several), then e */
      for (int i = 0; i < all.n; ++i)
        if (!weave_tune_key_equal(&all.e[i].key, &e->key)) all.e[kept++] = all.e[i];
      all.n = kept;
      if (all.n == WEAVE_TUNE_MAX_ENTRIES) { /* the oldest goes */
        memmove(all.e, all.e + 1, sizeof(all.e[0]) * (size_t)(all.n - 1));
        all.n--;
      }
      all.e[all.n++] = *e;
      char werr[512] = "";
      s = write_atomically(path, is_default, &all, werr, sizeof(werr));
      if (s != WEAVE_TUNE_FOUND) say(why, why_len, "%s%s", werr, "");
    }
  }
  free(all.e);
  flock(lock, LOCK_UN);
  close(lock);
  return s;
}
