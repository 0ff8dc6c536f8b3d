/* Command lines of the tools: see cli.h. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void cli_init(cli_t *c, const char *prog, const cli_option_t *options) {
  memset(c, 0, sizeof(*c));
  c->prog = prog;
  c->options = options;
  char *s = c->shortopts;
  *s++ = ':'; /* a missing value is reported as ':' */
  int n = 0;
  for (const cli_option_t *o = options; o->name && n < CLI_MAX_OPTIONS; ++o, ++n) {
    c->longopts[n].name = o->name;
    c->longopts[n].has_arg = o->arg ? required_argument : no_argument;
    c->longopts[n].val = o->key;
    if (o->key < 256) {
      *s++ = (char)o->key;
      if (o->arg) *s++ = ':';
    }
  }
  *s = '\0';
}

static const cli_option_t *find(const cli_t *c, int key) {
  for (const cli_option_t *o = c->options; o->name; ++o)
    if (o->key == key) return o;
  return NULL;
}

int cli_next(cli_t *c, int argc, char **argv) {
  int prev = optind;
  int key = getopt_long(argc, argv, c->shortopts, c->longopts, NULL);
  if (key == -1) {
    if (optind < argc) {
      fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", c->prog, argv[optind]);
      exit(2);
    }
    return -1;
  }
  if (key == '?' || key == ':') {
    const char *what = prev < argc ? argv[prev] : "?";
    fprintf(stderr, "%s: %s '%s' (see --help)\n", c->prog, key == ':' ? "missing value for" : "unknown option", what);
    exit(2);
  }
  const cli_option_t *o = find(c, key);
  /* How the user spelled it, for the messages about its value. */
  const char *used = prev < argc ? argv[prev] : "";
  if (o && !strncmp(used, "--", 2))
    snprintf(c->flag_buf, sizeof(c->flag_buf), "--%s", o->name);
  else if (o && o->key < 256)
    snprintf(c->flag_buf, sizeof(c->flag_buf), "-%c", (char)o->key);
  else
    snprintf(c->flag_buf, sizeof(c->flag_buf), "%s", used);
  c->flag = c->flag_buf;
  return key;
}

void cli_usage(const cli_t *c, FILE *f, const char *synopsis) {
  fprintf(f, "usage: %s %s\n\noptions:\n", c->prog, synopsis);
  for (const cli_option_t *o = c->options; o->name; ++o) {
    char left[64];
    if (o->key < 256)
      snprintf(left, sizeof(left), "-%c, --%s%s%s", (char)o->key, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    else
      snprintf(left, sizeof(left), "    --%s%s%s", o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    fprintf(f, "  %-28s %s\n", left, o->help);
  }
}

static void bad(const cli_t *c, const char *s, const char *want) {
  fprintf(stderr, "%s: bad value '%s' for %s: %s\n", c->prog, s ? s : "", c->flag ? c->flag : "?", want);
  exit(2);
}

/* An integer in [lo, hi] at p, not preceded by blanks; *end after it. 1 when it is one. */
static int read_long(const char *p, char **end, long lo, long hi, long *v) {
  if (!*p || isspace((unsigned char)*p)) return 0;
  errno = 0;
  *v = strtol(p, end, 10);
  return *end != p && !errno && *v >= lo && *v <= hi;
}

long cli_long(cli_t *c, const char *s, long lo, long hi) {
  char want[96], *end;
  long v;
  snprintf(want, sizeof(want), "an integer in [%ld, %ld]", lo, hi);
  if (!s || !read_long(s, &end, lo, hi, &v) || *end) bad(c, s, want);
  return v;
}

double cli_double(cli_t *c, const char *s, double lo, double hi) {
  char want[96];
  snprintf(want, sizeof(want), "a number in [%g, %g]", lo, hi);
  if (!s || !*s || isspace((unsigned char)*s)) bad(c, s, want);
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || !isfinite(v) || v < lo || v > hi) bad(c, s, want);
  return v;
}

int cli_choice(cli_t *c, const char *s, const char *const *names) {
  char want[256] = "one of";
  for (int i = 0; names[i]; ++i) {
    if (s && !strcmp(s, names[i])) return i;
    strncat(want, i ? ", " : " ", sizeof(want) - strlen(want) - 1);
    strncat(want, names[i], sizeof(want) - strlen(want) - 1);
  }
  bad(c, s, want);
  return -1;
}

int cli_long_list(cli_t *c, const char *s, long lo, long hi, long *out, int max) {
  char want[128];
  snprintf(want, sizeof(want), "comma-separated integers in [%ld, %ld], at most %d", lo, hi, max);
  if (!s) bad(c, s, want);
  int n = 0;
  for (const char *p = s;;) {
    char *end;
    long v;
    if (n == max || !read_long(p, &end, lo, hi, &v) || (*end && *end != ',')) bad(c, s, want);
    out[n++] = v;
    if (!*end) return n;
    p = end + 1;
  }
}
