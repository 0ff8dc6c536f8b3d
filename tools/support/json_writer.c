/* A small streaming JSON writer: see json_writer.h. */
#include "json_writer.h"

#include "common/json.h"

#include <math.h>

void json_open(json_writer_t *w, FILE *f) {
  w->f = f;
  w->depth = 0;
  w->count[0] = 0;
  w->after_key = 0;
}

/* Before a value or a key: the comma (and a line break between the elements of an array). */
static void separate(json_writer_t *w) {
  if (w->after_key) {
    w->after_key = 0;
    return;
  }
  if (w->count[w->depth]++) fputs(",", w->f);
}

static void open_level(json_writer_t *w, char c) {
  separate(w);
  fputc(c, w->f);
  if (w->depth + 1 < JSON_MAX_DEPTH) w->count[++w->depth] = 0;
}

static void close_level(json_writer_t *w, char c) {
  if (w->depth > 0) --w->depth;
  fputc(c, w->f);
  if (w->depth == 0) fputc('\n', w->f);
}

void json_begin_object(json_writer_t *w) { open_level(w, '{'); }
void json_end_object(json_writer_t *w) { close_level(w, '}'); }
void json_begin_array(json_writer_t *w) { open_level(w, '['); }
void json_end_array(json_writer_t *w) { close_level(w, ']'); }

void json_key(json_writer_t *w, const char *key) {
  separate(w);
  weave_json_put_string(w->f, key);
  fputc(':', w->f);
  w->after_key = 1;
}

void json_string(json_writer_t *w, const char *s) {
  separate(w);
  weave_json_put_string(w->f, s);
}

void json_int(json_writer_t *w, long long v) {
  separate(w);
  fprintf(w->f, "%lld", v);
}

void json_number(json_writer_t *w, double v) {
  separate(w);
  if (isfinite(v))
    fprintf(w->f, "%.10g", v);
  else
    fputs("null", w->f);
}

void json_kv_string(json_writer_t *w, const char *key, const char *s) {
  json_key(w, key);
  json_string(w, s);
}
void json_kv_int(json_writer_t *w, const char *key, long long v) {
  json_key(w, key);
  json_int(w, v);
}
void json_kv_number(json_writer_t *w, const char *key, double v) {
  json_key(w, key);
  json_number(w, v);
}
