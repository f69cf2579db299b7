/* ra-cache: the counters as JSON, as Prometheus text and as lines of
 * text, all from the one list RC_STATS_ITEMS (include/racache/stats.h).
 */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "racache/config.h"
#include "racache/congestion.h"
#include "racache/stats-server.h"
#include "racache/util.h"

/* When the cache was started (rc_now_ns), for uptime_seconds. */
static _Atomic uint64_t started_ns;

void
rc_stats_mark_start (void)
{
  atomic_store (&started_ns, rc_now_ns ());
}

static double
ratio (uint64_t a, uint64_t b)
{
  return b ? (double) a / b : 0.0;
}

/* One snapshot of everything the documents show: the counters copied
 * once, so that a ratio and the counts it is made of agree.  c is NULL
 * for rc_stats_print (no running cache: its RC_CACHE items are left out).
 */
struct snap {
  struct rc_cache *c;
  struct rc_stats st;
  struct rc_pc_counts pc;
  uint64_t psize;
  double lat_ns, page_ns, uptime;
  struct rc_cong_estimate cong;
};

const double rc_hist_le[RC_HIST_BUCKETS - 1] = {
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
  0.25, 0.5, 1, 2.5, 5,
};

void
rc_hist_observe (struct rc_hist *h, uint64_t ns)
{
  unsigned i = 0;

  while (i < RC_HIST_BUCKETS - 1 && ns > rc_hist_le[i] * 1e9)
    i++;
  atomic_fetch_add_explicit (&h->n[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&h->sum_ns, ns, memory_order_relaxed);
}

static void
copy_hist (struct rc_hist *dst, const struct rc_hist *src)
{
  unsigned i;

  for (i = 0; i < RC_HIST_BUCKETS; i++)
    atomic_store_explicit (&dst->n[i], STAT_GET (src, n[i]),
                           memory_order_relaxed);
  atomic_store_explicit (&dst->sum_ns, STAT_GET (src, sum_ns),
                         memory_order_relaxed);
}

static void
copy_counters (struct rc_stats *dst, const struct rc_stats *src)
{
  int b;

  copy_hist (&dst->client_read_seconds, &src->client_read_seconds);
  copy_hist (&dst->backend_read_seconds, &src->backend_read_seconds);
  (void) b;
#define RC_NONE
#define RC_FIELD(m) \
  atomic_store_explicit (&dst->m, STAT_GET (src, m), memory_order_relaxed);
#define RC_PAGES(m) RC_FIELD (m)
#define RC_BRANCHES(m)                                                  \
  for (b = 0; b < RA_NR_BRANCHES; b++)                                  \
    RC_FIELD (m[b])
#define RC_CALC(e)
#define RC_CACHE(e)
#define COPY(KIND, KEY, SOURCE, PREC, SUMMARY, HELP) SOURCE
  RC_STATS_ITEMS (COPY)
#undef COPY
#undef RC_NONE
#undef RC_FIELD
#undef RC_PAGES
#undef RC_BRANCHES
#undef RC_CALC
#undef RC_CACHE
}

static void
take_snap (struct rc_cache *c, struct snap *s)
{
  uint64_t t0;

  memset (s, 0, sizeof *s);
  s->c = c;
  copy_counters (&s->st, rc_cache_stats (c));
  rc_pc_counts (rc_cache_pagecache (c), &s->pc);
  rc_cache_model (c, &s->lat_ns, &s->page_ns);
  rc_cache_congestion (c, &s->cong);
  s->psize = rc_pc_page_size (rc_cache_pagecache (c));
  t0 = atomic_load (&started_ns);
  s->uptime = t0 == 0 ? 0.0 : (rc_now_ns () - t0) / 1e9;
}

enum item_kind { COUNTER, GAUGE, LABEL };
enum format {
  JSON, PROMETHEUS,
  LINE,                         /* RC_STATS_LINE */
  LIST,                         /* RC_STATS_LIST */
};

/* One item's value: an integer (prec -1: exactly, a uint64_t never goes
 * through a double), a double, one count per branch, or absent (an
 * RC_CACHE item without a cache).
 */
struct value {
  int prec;
  uint64_t u;
  double d;
  const _Atomic uint64_t *branches;
  int absent;
};

/* How to write the items, and what has been written so far. */
struct writer {
  FILE *fp;
  enum format f;
  unsigned flags;               /* RC_STATS_SUMMARY_ONLY */
  const char *prefix;           /* LINE, LIST */
  const char *ra_mode;          /* NULL without a cache */
  uint64_t psize;               /* page size */
  int first;
};

/* One item as a JSON member. */
static void
write_json_item (struct writer *w, enum item_kind kind, const char *key,
                 const struct value *v)
{
  FILE *fp = w->fp;
  int b;

  fprintf (fp, "%s  \"%s\": ", w->first ? "" : ",\n", key);
  w->first = 0;
  if (kind == LABEL && strcmp (key, "version") == 0)
    fprintf (fp, "\"%s\"", PACKAGE_VERSION);
  else if (kind == LABEL && strcmp (key, "schema") == 0)
    fprintf (fp, "%d", RC_STATS_SCHEMA);
  else if (kind == LABEL)
    fprintf (fp, "\"%s\"", w->ra_mode);
  else if (v->branches) {
    fprintf (fp, "{");
    for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
      fprintf (fp, "%s\"%s\": %" PRIu64, b == RA_A_INITIAL ? " " : ", ",
               ra_branch_name (b), STAT_GET (v, branches[b]));
    fprintf (fp, " }");
  }
  else if (v->prec < 0)
    fprintf (fp, "%" PRIu64, v->u);
  else
    fprintf (fp, "%.*f", v->prec, v->d);
}

/* The Prometheus names that are not ra_cache_KEY (or ra_cache_KEY_total
 * for a counter): base units (seconds, bytes; the value is converted),
 * no word twice (ra_cache_cache_...), no _now.  The HELP line then names
 * the JSON key.
 */
enum prom_unit { PROM_SAME, PROM_US, PROM_PAGES };
static const struct {
  const char *key, *name;
  enum prom_unit unit;
} prom_names[] = {
  { "page_size", "page_size_bytes", PROM_SAME },
  { "sync_pages", "sync_part_bytes", PROM_PAGES },
  { "async_pages", "async_part_bytes", PROM_PAGES },
  { "ahead_used_pages", "ahead_used_bytes", PROM_PAGES },
  { "ahead_wasted_pages", "ahead_wasted_bytes", PROM_PAGES },
  { "async_skipped_pages", "async_skipped_bytes", PROM_PAGES },
  { "async_burst_pages", "async_burst_bytes", PROM_PAGES },
  { "invalidated_pages", "invalidated_bytes", PROM_PAGES },
  { "read_around_pages", "read_around_bytes", PROM_PAGES },
  { "inflight_now", "backend_reads_inflight", PROM_SAME },
  { "inflight_high_water", "backend_reads_inflight_high_water", PROM_SAME },
  { "cache_bytes", "page_data_bytes", PROM_SAME },
  { "cache_pages", "pages", PROM_SAME },
  { "cache_pages_inflight", "pages_inflight", PROM_SAME },
  { "cache_pages_unused", "pages_unused", PROM_SAME },
  { "cache_capacity_pages", "capacity_pages", PROM_SAME },
  { "cache_memory_bytes", "page_memory_bytes", PROM_SAME },
  { "markers_now", "markers", PROM_SAME },
  { "learn_sequence_pages", "learn_sequence_bytes", PROM_PAGES },
  { "learn_recorded_pages", "learn_recorded_bytes", PROM_PAGES },
  { "replay_reached_pages", "replay_reached_bytes", PROM_PAGES },
  { "replay_pages", "replay_bytes", PROM_PAGES },
  { "replay_used_pages", "replay_used_bytes", PROM_PAGES },
  { "replay_wasted_pages", "replay_wasted_bytes", PROM_PAGES },
  { "backend_latency_us", "backend_latency_seconds", PROM_US },
  { "backend_page_us", "backend_page_seconds", PROM_US },
  { "backend_queue_delay_us", "backend_queue_delay_seconds", PROM_US },
  { "backend_base_latency_us", "backend_base_latency_seconds", PROM_US },
};

/* One item as a Prometheus metric with its HELP and TYPE lines. */
static void
write_prometheus_item (struct writer *w, enum item_kind kind,
                       const char *key, const char *help,
                       const struct value *v)
{
  FILE *fp = w->fp;
  const char *suffix = kind == COUNTER ? "_total" : "";
  const char *name = key;
  enum prom_unit unit = PROM_SAME;
  size_t i;
  int b;

  for (i = 0; i < sizeof prom_names / sizeof prom_names[0]; i++)
    if (strcmp (prom_names[i].key, key) == 0) {
      name = prom_names[i].name;
      unit = prom_names[i].unit;
    }

  if (kind == LABEL) {
    /* All three labels go on ra_cache_info, written with the first. */
    if (w->first)
      fprintf (fp, "# HELP ra_cache_info ra-cache version, stats schema "
               "and readahead mode (always 1).\n"
               "# TYPE ra_cache_info gauge\n"
               "ra_cache_info{version=\"%s\",schema=\"%d\","
               "ra_mode=\"%s\"} 1\n",
               PACKAGE_VERSION, RC_STATS_SCHEMA, w->ra_mode);
    w->first = 0;
    return;
  }
  fprintf (fp, "# HELP ra_cache_%s%s %s", name, suffix, help);
  if (unit == PROM_US)
    fprintf (fp, " In seconds (JSON: %s, in microseconds).\n", key);
  else if (unit == PROM_PAGES)
    fprintf (fp, " In bytes (JSON: %s, in pages).\n", key);
  else if (name != key)
    fprintf (fp, " (JSON: %s.)\n", key);
  else
    fputc ('\n', fp);
  fprintf (fp, "# TYPE ra_cache_%s%s %s\n", name, suffix,
           kind == GAUGE ? "gauge" : "counter");
  if (v->branches) {
    for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
      fprintf (fp, "ra_cache_%s%s{branch=\"%s\",name=\"%s\"} %" PRIu64
               "\n", name, suffix, ra_branch_name (b),
               ra_branch_description (b), STAT_GET (v, branches[b]));
  }
  else if (unit == PROM_PAGES)
    fprintf (fp, "ra_cache_%s%s %" PRIu64 "\n", name, suffix, v->u * w->psize);
  else if (unit == PROM_US)
    fprintf (fp, "ra_cache_%s%s %.9g\n", name, suffix, v->d / 1e6);
  else if (v->prec < 0)
    fprintf (fp, "ra_cache_%s%s %" PRIu64 "\n", name, suffix, v->u);
  else
    fprintf (fp, "ra_cache_%s%s %.*f\n", name, suffix, v->prec, v->d);
}

/* A histogram (JSON and Prometheus only): cumulative counts per upper
 * bound in seconds, the sum in seconds, the count.
 */
static void
write_hist (struct writer *w, const char *key, const char *help,
            const struct rc_hist *h)
{
  FILE *fp = w->fp;
  uint64_t cum = 0;
  double sum = STAT_GET (h, sum_ns) / 1e9;
  unsigned i;

  if (w->f == JSON) {
    fprintf (fp, ",\n  \"%s\": { \"le\": [", key);
    for (i = 0; i < RC_HIST_BUCKETS - 1; i++)
      fprintf (fp, "%s%g", i ? ", " : "", rc_hist_le[i]);
    fprintf (fp, "], \"cumulative\": [");
    for (i = 0; i < RC_HIST_BUCKETS; i++) {
      cum += STAT_GET (h, n[i]);
      fprintf (fp, "%s%" PRIu64, i ? ", " : "", cum);
    }
    fprintf (fp, "], \"sum\": %.6f, \"count\": %" PRIu64 " }", sum, cum);
    return;
  }
  fprintf (fp, "# HELP ra_cache_%s %s\n# TYPE ra_cache_%s histogram\n",
           key, help, key);
  for (i = 0; i < RC_HIST_BUCKETS; i++) {
    cum += STAT_GET (h, n[i]);
    if (i < RC_HIST_BUCKETS - 1)
      fprintf (fp, "ra_cache_%s_bucket{le=\"%g\"} %" PRIu64 "\n", key,
               rc_hist_le[i], cum);
    else
      fprintf (fp, "ra_cache_%s_bucket{le=\"+Inf\"} %" PRIu64 "\n", key, cum);
  }
  fprintf (fp, "ra_cache_%s_sum %.6f\nra_cache_%s_count %" PRIu64 "\n",
           key, sum, key, cum);
}

/* What goes before one key=value of LINE or one line of LIST: the prefix
 * on every LIST line and at the start of the LINE, else a space.
 */
static void
start_text_value (struct writer *w)
{
  if (w->f == LIST || w->first)
    fputs (w->prefix, w->fp);
  else
    fputc (' ', w->fp);
  w->first = 0;
}

/* One item as key=value in the LINE or key: value lines in the LIST;
 * the labels are left out, and so are the items not in the summary
 * under RC_STATS_SUMMARY_ONLY.
 */
static void
write_text_item (struct writer *w, enum item_kind kind, const char *key,
                 int summary, const struct value *v)
{
  FILE *fp = w->fp;
  const char *sep = w->f == LINE ? "=" : ": ";
  int b;

  if (kind == LABEL || (!summary && (w->flags & RC_STATS_SUMMARY_ONLY)))
    return;
  if (v->branches) {
    for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++) {
      start_text_value (w);
      fprintf (fp, "%s.%s%s%" PRIu64 "%s", key, ra_branch_name (b), sep,
               STAT_GET (v, branches[b]), w->f == LIST ? "\n" : "");
    }
    return;
  }
  start_text_value (w);
  if (v->prec < 0)
    fprintf (fp, "%s%s%" PRIu64, key, sep, v->u);
  else
    fprintf (fp, "%s%s%.*f", key, sep, v->prec, v->d);
  if (w->f == LIST)
    fputc ('\n', fp);
}

/* One item in w's format. */
static void
write_item (struct writer *w, enum item_kind kind, const char *key,
            int summary, const char *help, const struct value *v)
{
  if (v->absent)
    return;
  switch (w->f) {
  case JSON:
    write_json_item (w, kind, key, v);
    return;
  case PROMETHEUS:
    write_prometheus_item (w, kind, key, help, v);
    return;
  case LINE:
  case LIST:
    write_text_item (w, kind, key, summary, v);
    return;
  }
}

/* Every item of RC_STATS_ITEMS from snapshot s, in order.  Each value is
 * evaluated once, as an integer for integer items and as a double for
 * the others.
 */
static int
write_items (struct writer *w, const struct snap *s)
{
  w->first = 1;
  w->psize = s->psize;
  if (w->f == JSON)
    fprintf (w->fp, "{\n");
#define ST(m) STAT_GET (&s->st, m)
#define SET(e)                                  \
  do {                                          \
    if (v_.prec < 0)                            \
      v_.u = (uint64_t) (e);                    \
    else                                        \
      v_.d = (double) (e);                      \
  } while (0)
#define RC_NONE
#define RC_FIELD(m) SET (ST (m))
#define RC_PAGES(m) SET (ST (m) * s->psize)
#define RC_BRANCHES(m) v_.branches = s->st.m
#define RC_CALC(e) SET (e)
#define RC_CACHE(e)                             \
  do {                                          \
    if (s->c)                                   \
      SET (e);                                  \
    else                                        \
      v_.absent = 1;                            \
  } while (0)
#define WRITE_ITEM(KIND, KEY, SOURCE, PREC, SUMMARY, HELP)      \
  do {                                                          \
    struct value v_ = { .prec = (PREC) };                       \
    SOURCE;                                                     \
    write_item (w, KIND, #KEY, SUMMARY, HELP, &v_);             \
  } while (0);
  RC_STATS_ITEMS (WRITE_ITEM)
#undef WRITE_ITEM
#undef RC_NONE
#undef RC_FIELD
#undef RC_PAGES
#undef RC_BRANCHES
#undef RC_CALC
#undef RC_CACHE
#undef SET
#undef ST
  if (w->f == JSON || w->f == PROMETHEUS) {
    write_hist (w, "client_read_seconds",
                "Client reads through the cache, from the filter's call "
                "to its reply.", &s->st.client_read_seconds);
    write_hist (w, "backend_read_seconds",
                "Backend reads, each one call to the plugin.",
                &s->st.backend_read_seconds);
  }
  if (w->f == JSON)
    fprintf (w->fp, "\n}\n");
  return ferror (w->fp) ? -1 : 0;
}

static const char *
ra_mode_name (struct rc_cache *c)
{
  return rc_mode_name (rc_cache_config (c)->mode);
}

static int
write_stats (struct rc_cache *c, FILE *fp, enum format f, unsigned flags,
             const char *prefix)
{
  struct snap snap;
  struct writer w = {
    .fp = fp, .f = f, .flags = flags, .prefix = prefix,
    .ra_mode = ra_mode_name (c),
  };

  take_snap (c, &snap);
  return write_items (&w, &snap);
}

int
rc_stats_write_json (struct rc_cache *c, FILE *fp)
{
  return write_stats (c, fp, JSON, 0, "");
}

int
rc_stats_write_prometheus (struct rc_cache *c, FILE *fp)
{
  return write_stats (c, fp, PROMETHEUS, 0, "");
}

int
rc_stats_print (FILE *fp, const struct rc_stats *st, uint32_t page_size,
                enum rc_stats_style style, unsigned flags,
                const char *prefix)
{
  struct snap snap;
  struct writer w = {
    .fp = fp, .f = style == RC_STATS_LIST ? LIST : LINE, .flags = flags,
    .prefix = prefix ? prefix : "",
  };

  memset (&snap, 0, sizeof snap);
  copy_counters (&snap.st, st);
  snap.psize = page_size;
  return write_items (&w, &snap);
}

char *
rc_stats_line (struct rc_cache *c, unsigned flags, const char *prefix)
{
  char *s = NULL;
  size_t len;
  FILE *fp = open_memstream (&s, &len);
  int r;

  if (!fp)
    return NULL;
  r = write_stats (c, fp, LINE, flags, prefix ? prefix : "");
  if (fclose (fp) != 0 || r == -1) {
    free (s);
    return NULL;
  }
  return s;
}

char *
rc_stats_summary (struct rc_cache *c)
{
  return rc_stats_line (c, RC_STATS_SUMMARY_ONLY, "ra-cache: ");
}

static int
write_json (FILE *fp, void *c)
{
  return rc_stats_write_json (c, fp);
}

/* Written atomically (rc_write_file_atomic), mode 0600: the counters
 * are the operator's business, as on the stats socket.
 */
int
rc_stats_write_file (struct rc_cache *c, const char *path)
{
  return rc_write_file_atomic (path, write_json, c);
}
