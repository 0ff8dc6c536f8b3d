/*
 * Command lines of the tools: one table of options gives getopt_long its arguments and --help its
 * text, and every value is parsed strictly (the whole string, in range): a bad one is an error that
 * names the flag, and the tool exits with status 2.
 */
#ifndef WEAVE_TOOLS_CLI_H
#define WEAVE_TOOLS_CLI_H

#include <getopt.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *name; /* long name, without "--" */
  int key;          /* the short letter, or a value >= 256 for long-only options */
  const char *arg;  /* the value's name in --help, or NULL for a switch */
  const char *help; /* one line, its default included */
} cli_option_t;

#define CLI_MAX_OPTIONS 64

typedef struct {
  const char *prog;
  const cli_option_t *options; /* ends with a {NULL} entry */
  struct option longopts[CLI_MAX_OPTIONS + 1];
  char shortopts[2 * CLI_MAX_OPTIONS + 2];
  const char *flag; /* the flag being parsed, for messages: "-M" or "--strategy" */
  char flag_buf[64];
} cli_t;

void cli_init(cli_t *c, const char *prog, const cli_option_t *options);
/* The next option's key (its value in optarg), -1 at the end; an unknown option or a missing value
 * prints a message and exits 2. */
int cli_next(cli_t *c, int argc, char **argv);
void cli_usage(const cli_t *c, FILE *f, const char *synopsis);

/* Strict values of the current option (exit 2 naming the flag when bad). */
long cli_long(cli_t *c, const char *s, long lo, long hi);
double cli_double(cli_t *c, const char *s, double lo, double hi);
/* Index of s in names (NULL-terminated list). */
int cli_choice(cli_t *c, const char *s, const char *const *names);
/* Comma-separated integers in [lo, hi]: their count (at most max). */
int cli_long_list(cli_t *c, const char *s, long lo, long hi, long *out, int max);

#ifdef __cplusplus
}
#endif
#endif
