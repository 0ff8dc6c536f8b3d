/* JSON text for the trace files (plan/trace.c) and the tools' JSON writer (tools/support). */
#ifndef WEAVE_COMMON_JSON_H
#define WEAVE_COMMON_JSON_H

#include <stdio.h>

/* `s` (NULL: "") as a JSON string: quoted, with '"' and '\' escaped and control characters as \uXXXX. */
void weave_json_put_string(FILE *f, const char *s);

#endif
