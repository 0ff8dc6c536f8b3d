/*
 * A small streaming JSON writer for the tools' result files: it places the commas, escapes strings
 * (quote, backslash, control characters) and writes non-finite numbers as null, so the output is
 * valid JSON whatever a label or a device name holds.
 *
 *   json_writer_t w; json_open(&w, f);
 *   json_begin_object(&w); json_key(&w, "M"); json_int(&w, 8192); json_end_object(&w);
 */
#ifndef WEAVE_JSON_WRITER_H
#define WEAVE_JSON_WRITER_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define JSON_MAX_DEPTH 16

typedef struct {
  FILE *f;
  int depth;
  int count[JSON_MAX_DEPTH]; /* values written at each open level */
  int after_key;             /* the next value completes a "key": pair */
} json_writer_t;

void json_open(json_writer_t *w, FILE *f);
void json_begin_object(json_writer_t *w);
void json_end_object(json_writer_t *w);
void json_begin_array(json_writer_t *w);
void json_end_array(json_writer_t *w);
void json_key(json_writer_t *w, const char *key);
void json_string(json_writer_t *w, const char *s);
void json_int(json_writer_t *w, long long v);
void json_number(json_writer_t *w, double v); /* NaN and infinities: null */
/* Shorthands for a key and its value. */
void json_kv_string(json_writer_t *w, const char *key, const char *s);
void json_kv_int(json_writer_t *w, const char *key, long long v);
void json_kv_number(json_writer_t *w, const char *key, double v);

#ifdef __cplusplus
}
#endif
#endif
