/*
 * The tools' command-line parser (tools/support/cli.c) and JSON writer (tools/support/json_writer.c):
 * good values parse, every bad one exits 2 with a message naming the flag, --help lists every option,
 * and the JSON is escaped and valid whatever the strings hold.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "json_writer.h"

static const cli_option_t opts[] = {
    {"rows", 'M', "M", "rows (default 8)"},
    {"strategy", 300, "S", "a strategy (default all)"},
    {"tune", 301, NULL, "a switch"},
    {NULL, 0, NULL, NULL},
};

/* Runs fn(arg) in a child with stderr captured; returns its exit status, and what it wrote in err. */
static int in_child(void (*fn)(const char *), const char *arg, char *err, size_t len) {
  int fd[2];
  if (pipe(fd)) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    close(fd[0]);
    fn(arg);
    _exit(0);
  }
  close(fd[1]);
  size_t got = 0;
  ssize_t n;
  while (got + 1 < len && (n = read(fd[0], err + got, len - 1 - got)) > 0) got += (size_t)n;
  err[got] = '\0';
  close(fd[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cli_t cli_for(const char *flag) {
  cli_t c;
  cli_init(&c, "prog", opts);
  c.flag = flag;
  return c;
}

static void bad_long(const char *s) {
  cli_t c = cli_for("-M");
  cli_long(&c, s, 1, 100);
}
static void bad_double(const char *s) {
  cli_t c = cli_for("-f");
  cli_double(&c, s, 1.5, 10);
}
static void bad_choice(const char *s) {
  static const char *const names[] = {"all", "fused", NULL};
  cli_t c = cli_for("--strategy");
  cli_choice(&c, s, names);
}
static void bad_list(const char *s) {
  long out[4];
  cli_t c = cli_for("--devices");
  cli_long_list(&c, s, 0, 7, out, 4);
}
/* A whole command line, split at spaces. */
static void parse_line(const char *line) {
  char buf[256], *argv[16];
  int argc = 0;
  snprintf(buf, sizeof(buf), "prog %s", line);
  for (char *t = strtok(buf, " "); t && argc < 15; t = strtok(NULL, " ")) argv[argc++] = t;
  argv[argc] = NULL;
  cli_t c;
  cli_init(&c, "prog", opts);
  for (int key; (key = cli_next(&c, argc, argv)) != -1;)
    if (key == 'M') cli_long(&c, optarg, 1, 100);
}

static void test_cli(void) {
  cli_t c = cli_for("-M");
  CHECK(cli_long(&c, "42", 1, 100) == 42);
  CHECK(cli_long(&c, "-3", -5, 5) == -3);
  CHECK(cli_double(&c, "2.5", 1, 3) == 2.5);
  static const char *const names[] = {"all", "fused", NULL};
  CHECK(cli_choice(&c, "fused", names) == 1);
  long out[4];
  CHECK(cli_long_list(&c, "0,0,3", 0, 7, out, 4) == 3 && out[2] == 3);
  char err[512];
  const char *bad_longs[] = {"abc", "", "4x", " 5", "101", "0", "99999999999999999999", "1.5"};
  for (size_t i = 0; i < sizeof(bad_longs) / sizeof(*bad_longs); ++i) {
    CHECK_MSG(in_child(bad_long, bad_longs[i], err, sizeof(err)) == 2, "'%s'", bad_longs[i]);
    CHECK_MSG(strstr(err, "-M") && strstr(err, "[1, 100]"), "message '%s'", err);
  }
  const char *bad_doubles[] = {"nan", "inf", "1", "x", "2.0y", ""};
  for (size_t i = 0; i < sizeof(bad_doubles) / sizeof(*bad_doubles); ++i)
    CHECK_MSG(in_child(bad_double, bad_doubles[i], err, sizeof(err)) == 2 && strstr(err, "-f"), "'%s'", bad_doubles[i]);
  CHECK(in_child(bad_choice, "fuse", err, sizeof(err)) == 2 && strstr(err, "--strategy") && strstr(err, "all, fused"));
  const char *bad_lists[] = {"0,,1", "1,", "8", "0,1,2,3,4", "a", ""};
  for (size_t i = 0; i < sizeof(bad_lists) / sizeof(*bad_lists); ++i)
    CHECK_MSG(in_child(bad_list, bad_lists[i], err, sizeof(err)) == 2 && strstr(err, "--devices"), "'%s'",
              bad_lists[i]);
  /* whole command lines */
  CHECK(in_child(parse_line, "-M 5 --strategy x --tune", err, sizeof(err)) == 0);
  CHECK(in_child(parse_line, "--rows 5", err, sizeof(err)) == 0);
  CHECK(in_child(parse_line, "--rows abc", err, sizeof(err)) == 2 && strstr(err, "--rows"));
  CHECK(in_child(parse_line, "-M", err, sizeof(err)) == 2 && strstr(err, "missing value"));
  CHECK(in_child(parse_line, "--bogus", err, sizeof(err)) == 2 && strstr(err, "unknown option '--bogus'"));
  CHECK(in_child(parse_line, "-M 5 stray", err, sizeof(err)) == 2 && strstr(err, "stray"));
  /* --help lists every option with its text */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  cli_usage(&c, f, "[options]");
  fclose(f);
  for (const cli_option_t *o = opts; o->name; ++o)
    CHECK_MSG(strstr(text, o->name) && strstr(text, o->help), "%s", o->name);
  CHECK(strstr(text, "-M, --rows M"));
  free(text);
}

static void test_json(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  json_writer_t w;
  json_open(&w, f);
  json_begin_object(&w);
  json_kv_string(&w, "s", "a\"b\\c\nd\x01");
  json_kv_int(&w, "i", -7);
  json_kv_number(&w, "x", 0.5);
  json_kv_number(&w, "nan", 0.0 / 0.0);
  json_key(&w, "rows");
  json_begin_array(&w);
  json_begin_object(&w);
  json_kv_int(&w, "M", 1);
  json_end_object(&w);
  json_begin_object(&w);
  json_end_object(&w);
  json_int(&w, 3);
  json_end_array(&w);
  json_key(&w, "empty");
  json_begin_array(&w);
  json_end_array(&w);
  json_end_object(&w);
  fclose(f);
  const char *want =
      "{\"s\":\"a\\\"b\\\\c\\u000ad\\u0001\",\"i\":-7,\"x\":0.5,\"nan\":null,"
      "\"rows\":[{\"M\":1},{},3],\"empty\":[]}\n";
  CHECK_MSG(!strcmp(text, want), "got %s", text);
  free(text);
}

int main(void) {
  test_cli();
  test_json();
  return check_summary("test_tool_support");
}
