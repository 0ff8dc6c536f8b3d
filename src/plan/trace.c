/* Host side of the per-tile trace: Chrome trace-event JSON, CSV and summary (see trace.h). */
#include "common/json.h"
#include "weave_trace.h"

#include <stdlib.h>
#include <string.h>

static const char *const role_names[WEAVE_TRACE_ROLES] = {"GEMM", "WAIT", "REDUCE", "SEND"};

const char *weave_trace_role_name(int role) {
  return role >= 0 && role < WEAVE_TRACE_ROLES ? role_names[role] : "ROLE?";
}

static int recorded(const weave_trace_event_t *e) { return e->t_begin != 0 && e->t_end >= e->t_begin; }

typedef struct {
  int rank;
  const weave_trace_event_t *e;
} ref_t;

static int ref_cmp(const void *pa, const void *pb) {
  const ref_t *a = (const ref_t *)pa, *b = (const ref_t *)pb;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->e->block != b->e->block) return a->e->block < b->e->block ? -1 : 1;
  if (a->e->t_begin != b->e->t_begin) return a->e->t_begin < b->e->t_begin ? -1 : 1;
  if (a->e->t_end != b->e->t_end) return a->e->t_end < b->e->t_end ? -1 : 1;
  if (a->e->role != b->e->role) return a->e->role < b->e->role ? -1 : 1;
  if (a->e->tile != b->e->tile) return a->e->tile < b->e->tile ? -1 : 1;
  return a->e < b->e ? -1 : (a->e > b->e ? 1 : 0);
}

/* Recorded events of all ranks sorted by (rank, block, begin); *t0 = earliest begin. NULL with *n = 0
 * when there are none; *err = 1 on bad arguments or out of memory. */
static ref_t *collect(const weave_trace_event_t *const *events_per_rank, const size_t *counts, int world, size_t *n,
                      uint64_t *t0, int *err) {
  *n = 0;
  *t0 = 0;
  *err = 0;
  if (world < 0 || (world > 0 && (!events_per_rank || !counts))) {
    *err = 1;
    return NULL;
  }
  size_t total = 0;
  for (int r = 0; r < world; r++) {
    if (counts[r] && !events_per_rank[r]) {
      *err = 1;
      return NULL;
    }
    for (size_t i = 0; i < counts[r]; i++) total += recorded(&events_per_rank[r][i]);
  }
  if (!total) return NULL;
  ref_t *refs = (ref_t *)malloc(total * sizeof *refs);
  if (!refs) {
    *err = 1;
    return NULL;
  }
  size_t k = 0;
  uint64_t first = UINT64_MAX;
  for (int r = 0; r < world; r++)
    for (size_t i = 0; i < counts[r]; i++) {
      const weave_trace_event_t *e = &events_per_rank[r][i];
      if (!recorded(e)) continue;
      refs[k].rank = r;
      refs[k].e = e;
      k++;
      if (e->t_begin < first) first = e->t_begin;
    }
  qsort(refs, total, sizeof *refs, ref_cmp);
  *n = total;
  *t0 = first;
  return refs;
}

static double us(uint64_t ns) { return (double)ns / 1000.0; }

/* fclose that also reports earlier write errors. */
static int finish(FILE *f) {
  int bad = ferror(f);
  if (fclose(f) != 0) bad = 1;
  return bad ? -1 : 0;
}

/* The events of every rank sorted by (rank, block, begin), and `path` opened for writing; NULL on
 * any failure (nothing left open or allocated). */
static FILE *open_sorted(const char *path, const weave_trace_event_t *const *events_per_rank, const size_t *counts,
                         int world, ref_t **refs, size_t *n, uint64_t *t0) {
  int err;
  if (!path) return NULL;
  *refs = collect(events_per_rank, counts, world, n, t0, &err);
  if (err) return NULL;
  FILE *f = fopen(path, "w");
  if (!f) free(*refs);
  return f;
}

int weave_trace_write_json(const char *path, const weave_trace_event_t *const *events_per_rank, const size_t *counts,
                           int world, const char *title) {
  size_t n;
  uint64_t t0;
  ref_t *refs;
  FILE *f = open_sorted(path, events_per_rank, counts, world, &refs, &n, &t0);
  if (!f) return -1;
  fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"title\":", f);
  weave_json_put_string(f, title);
  fputs("},\n\"traceEvents\":[\n", f);
  int first = 1;
#define SEP() (first ? (first = 0, "") : ",\n")
  for (int r = 0; r < world; r++) {
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}}", SEP(),
            r, r);
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}", r,
            r);
  }
  for (size_t g = 0; g < n;) {
    /* One (rank, block) group: name the thread, then its events in begin order. */
    size_t end = g;
    int gemm = 0;
    while (end < n && refs[end].rank == refs[g].rank && refs[end].e->block == refs[g].e->block) {
      gemm |= refs[end].e->role == WEAVE_TRACE_GEMM;
      end++;
    }
    int pid = refs[g].rank, tid = refs[g].e->block;
    fprintf(f, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"block %d (%s)\"}}",
            SEP(), pid, tid, tid, gemm ? "gemm" : "comm");
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}",
            pid, tid, tid);
    for (size_t i = g; i < end; i++) {
      const weave_trace_event_t *e = refs[i].e;
      const char *role = weave_trace_role_name(e->role);
      fprintf(f,
              ",\n{\"ph\":\"X\",\"name\":\"%s t%d\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
              "\"args\":{\"tile\":%d,\"peer\":%d}}",
              role, (int)e->tile, role, pid, tid, us(e->t_begin - t0), us(e->t_end - e->t_begin), (int)e->tile,
              (int)e->peer);
    }
    g = end;
  }
#undef SEP
  fputs("\n]}\n", f);
  free(refs);
  return finish(f);
}

int weave_trace_write_csv(const char *path, const weave_trace_event_t *const *events_per_rank, const size_t *counts,
                          int world, const char *title) {
  size_t n;
  uint64_t t0;
  ref_t *refs;
  FILE *f = open_sorted(path, events_per_rank, counts, world, &refs, &n, &t0);
  if (!f) return -1;
  fputs("# ", f);
  for (const char *p = title ? title : ""; *p; p++) fputc(*p == '\n' || *p == '\r' ? ' ' : *p, f);
  fputs("\nrank,block,role,tile,peer,begin_us,end_us\n", f);
  for (size_t i = 0; i < n; i++) {
    const weave_trace_event_t *e = refs[i].e;
    fprintf(f, "%d,%d,%s,%d,%d,%.3f,%.3f\n", refs[i].rank, (int)e->block, weave_trace_role_name(e->role), (int)e->tile,
            (int)e->peer, us(e->t_begin - t0), us(e->t_end - t0));
  }
  free(refs);
  return finish(f);
}

void weave_trace_summary(const weave_trace_event_t *ev, size_t n, int gemm_blocks, int comm_blocks,
                         weave_trace_summary_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  out->rank = -1;
  if (!ev) n = 0;
  uint64_t first = UINT64_MAX, last = 0, gemm_last = 0;
  uint64_t gemm_sum = 0, comm_sum = 0;
  int any_gemm = 0;
  for (size_t i = 0; i < n; i++) {
    const weave_trace_event_t *e = &ev[i];
    if (!recorded(e)) {
      out->skipped++;
      continue;
    }
    if (out->events++ == 0) out->rank = e->rank;
    uint64_t d = e->t_end - e->t_begin;
    if (e->t_begin < first) first = e->t_begin;
    if (e->t_end > last) last = e->t_end;
    if (e->role >= 0 && e->role < WEAVE_TRACE_ROLES) out->count[e->role]++;
    switch (e->role) {
      case WEAVE_TRACE_GEMM:
        gemm_sum += d;
        any_gemm = 1;
        if (e->t_end > gemm_last) gemm_last = e->t_end;
        break;
      case WEAVE_TRACE_WAIT:
        if (e->block >= gemm_blocks)
          out->comm_wait_ns += d;
        else
          out->gemm_wait_ns += d;
        break;
      case WEAVE_TRACE_REDUCE:
      case WEAVE_TRACE_SEND: comm_sum += d; break;
      default: break;
    }
  }
  if (!out->events) return;
  out->t_first = first;
  out->t_last = last;
  out->span_ns = last - first;
  if (out->span_ns) {
    if (gemm_blocks > 0) out->gemm_busy_pct = 100.0 * (double)gemm_sum / ((double)gemm_blocks * (double)out->span_ns);
    if (comm_blocks > 0) out->comm_busy_pct = 100.0 * (double)comm_sum / ((double)comm_blocks * (double)out->span_ns);
  }
  if (any_gemm) {
    out->gemm_end_ns = gemm_last - first;
    out->tail_ns = last - gemm_last;
  }
}

void weave_trace_print_summary(FILE *f, int rank, const weave_trace_summary_t *s) {
  if (!f || !s) return;
  fprintf(f,
          "# trace rank %d: span %.3f us, gemm busy %.1f%% (%zu tiles), comm busy %.1f%% (%zu reduce, %zu send), "
          "comm wait %.3f us (%zu waits in all), gemm wait %.3f us, last gemm end %.3f us, tail %.3f us",
          rank, us(s->span_ns), s->gemm_busy_pct, s->count[WEAVE_TRACE_GEMM], s->comm_busy_pct,
          s->count[WEAVE_TRACE_REDUCE], s->count[WEAVE_TRACE_SEND], us(s->comm_wait_ns), s->count[WEAVE_TRACE_WAIT],
          us(s->gemm_wait_ns), us(s->gemm_end_ns), us(s->tail_ns));
  if (s->skipped) fprintf(f, ", %zu unrecorded entries skipped", s->skipped);
  fputc('\n', f);
}
