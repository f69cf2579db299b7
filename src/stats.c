/* ra-cache: the counters as JSON and as a one-line summary. */

#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "racache/congestion.h"
#include "racache/stats-server.h"

/* When the cache was started, for uptime_seconds. */
static struct timespec started;

void
rc_stats_mark_start (void)
{
  clock_gettime (CLOCK_MONOTONIC, &started);
}

static double
ratio (uint64_t a, uint64_t b)
{
  return b ? (double) a / b : 0.0;
}

/* One snapshot of everything the documents show. */
struct snap {
  struct rc_cache *c;
  struct rc_stats *st;
  struct rc_pc_counts pc;
  uint64_t psize, hits, misses;
  double lat_ns, page_ns, uptime;
  struct rc_cong_estimate cong;
};

static void
take_snap (struct rc_cache *c, struct snap *s)
{
  struct timespec now;

  s->c = c;
  s->st = rc_cache_stats (c);
  rc_pc_counts (rc_cache_pagecache (c), &s->pc);
  rc_cache_model (c, &s->lat_ns, &s->page_ns);
  rc_cache_congestion (c, &s->cong);
  s->psize = rc_pc_page_size (rc_cache_pagecache (c));
  s->hits = STAT_GET (s->st, page_hits);
  s->misses = STAT_GET (s->st, page_misses);
  clock_gettime (CLOCK_MONOTONIC, &now);
  s->uptime = started.tv_sec == 0 ? 0.0
    : (now.tv_sec - started.tv_sec) + (now.tv_nsec - started.tv_nsec) / 1e9;
}

#define ST(field) STAT_GET (s->st, field)

/* The one list of what the JSON document and the Prometheus text show,
 * in the JSON's order: X (KIND, KEY, PRECISION, HELP, VALUE).  KIND:
 * COUNTER (ra_cache_KEY_total) or GAUGE (ra_cache_KEY), the value an
 * integer when PRECISION is -1, else a double printed with PRECISION
 * decimals; LABEL (a string, or the schema number, in JSON; a label of
 * ra_cache_info in Prometheus); WINDOWS (the windows by branch).  The
 * HELP texts are Prometheus's; the man page's STATS section says more.
 */
#define RC_STATS_ITEMS(X)                                               \
  X (LABEL, version, -1, "", 0)                                         \
  X (LABEL, schema, -1, "", 0)                                          \
  X (GAUGE, uptime_seconds, 1, "Seconds since the cache started.",      \
     s->uptime)                                                         \
  X (GAUGE, page_size, -1, "Cache page size in bytes.", s->psize)       \
  X (GAUGE, hit_ratio, 4, "page_hits / (page_hits + page_misses).",     \
     ratio (s->hits, s->hits + s->misses))                              \
  X (GAUGE, backend_bytes_per_client_byte, 4,                           \
     "backend_bytes / client_bytes.",                                   \
     ratio (ST (backend_bytes), ST (client_bytes)))                     \
  X (GAUGE, readahead_wasted_ratio, 4,                                  \
     "ahead_wasted_pages / async_pages.",                               \
     ratio (ST (ahead_wasted), ST (async_pages)))                       \
  X (LABEL, ra_mode, -1, "", 0)                                         \
  X (COUNTER, client_reads, -1, "Client read requests.",                \
     ST (client_reads))                                                 \
  X (COUNTER, client_bytes, -1, "Bytes returned to clients.",           \
     ST (client_bytes))                                                 \
  X (COUNTER, page_hits, -1, "Pages found cached or in flight.",        \
     s->hits)                                                           \
  X (COUNTER, page_misses, -1, "Pages not cached when needed.",         \
     s->misses)                                                         \
  X (COUNTER, page_waits, -1,                                           \
     "Pages a client found in flight and waited for.", ST (page_waits)) \
  X (WINDOWS, windows, -1,                                              \
     "Readahead windows by the branch that decided them.", 0)           \
  X (COUNTER, sync_pages, -1, "Pages read by sync parts.",              \
     ST (sync_pages))                                                   \
  X (COUNTER, async_pages, -1, "Pages read by async (readahead) parts.", \
     ST (async_pages))                                                  \
  X (COUNTER, ahead_used_pages, -1, "Pages read ahead and later used.", \
     ST (ahead_used))                                                   \
  X (COUNTER, ahead_wasted_pages, -1,                                   \
     "Pages read ahead, evicted unused.", ST (ahead_wasted))            \
  X (COUNTER, async_skipped, -1, "Async parts skipped for congestion.", \
     ST (async_skipped))                                                \
  X (COUNTER, async_skipped_pages, -1,                                  \
     "Pages of the skipped async parts.", ST (async_skipped_pages))     \
  X (COUNTER, async_delayed, -1,                                        \
     "Async reads held back for congestion.", ST (async_delayed))       \
  X (COUNTER, async_promoted, -1,                                       \
     "Queued async reads a client then needed.", ST (async_promoted))   \
  X (GAUGE, inflight_now, -1, "Backend reads in flight now.",           \
     rc_cache_inflight (s->c))                                          \
  X (GAUGE, inflight_high_water, -1,                                    \
     "Most backend reads in flight at once.", ST (inflight_hwm))        \
  X (COUNTER, backend_reads, -1, "Backend read requests.",              \
     ST (backend_reads))                                                \
  X (COUNTER, backend_bytes, -1, "Bytes read from the backend.",        \
     ST (backend_bytes))                                                \
  X (COUNTER, backend_errors, -1, "Backend reads that failed.",         \
     ST (backend_errors))                                               \
  X (COUNTER, backend_reads_in_place, -1,                               \
     "Backend reads straight into pages or a client's buffer.",         \
     ST (backend_reads_in_place))                                       \
  X (COUNTER, direct_reads, -1, "Reads served around a full cache.",    \
     ST (direct_reads))                                                 \
  X (COUNTER, evictions, -1, "Pages evicted to make room.",             \
     ST (evictions))                                                    \
  X (COUNTER, invalidated_pages, -1,                                    \
     "Pages dropped or marked stale by writes.", ST (invalidated_pages)) \
  X (GAUGE, cache_bytes, -1, "Bytes of page data in the cache now.",    \
     ST (cache_bytes))                                                  \
  X (GAUGE, backend_connections, -1,                                    \
     "Background backend connections open.",                            \
     rc_cache_connections (s->c))                                       \
  X (COUNTER, backend_connection_opens, -1,                             \
     "Background backend connections opened.", ST (conn_opens))         \
  X (COUNTER, backend_connection_failures, -1,                          \
     "Background backend connection opens that failed.",                \
     ST (conn_open_failures))                                           \
  X (COUNTER, backend_connections_lost, -1,                             \
     "Open background backend connections that broke.", ST (conn_lost)) \
  X (COUNTER, backend_reconnects, -1,                                   \
     "Opens that replaced a broken background connection.",             \
     ST (conn_reconnects))                                              \
  X (COUNTER, backend_connections_late, -1,                             \
     "Background connection opens that completed too late.",            \
     ST (conn_late))                                                    \
  X (GAUGE, cache_pages, -1, "Pages in the cache.", s->pc.pages)        \
  X (GAUGE, cache_pages_inflight, -1, "Cache pages being read.",        \
     s->pc.inflight)                                                    \
  X (GAUGE, cache_pages_unused, -1,                                     \
     "Cache pages read ahead, not yet used.", s->pc.unused)             \
  X (GAUGE, cache_capacity_pages, -1, "Most pages the cache holds.",    \
     s->pc.capacity)                                                    \
  X (GAUGE, cache_memory_bytes, -1, "Memory held for page data.",       \
     s->pc.memory * s->psize)                                           \
  X (GAUGE, markers_now, -1, "Readahead trigger markers set now.",      \
     rc_pc_markers (rc_cache_pagecache (s->c)))                         \
  X (COUNTER, adapt_late, -1,                                           \
     "Reads that waited for a page read ahead.", ST (adapt_late))       \
  X (COUNTER, adapt_early_triggers, -1,                                 \
     "Async triggers taken early after a late read.", ST (adapt_early)) \
  X (COUNTER, adapt_waste_events, -1,                                   \
     "Decisions told of pages evicted unused.", ST (adapt_waste))       \
  X (GAUGE, adapt_last_cap_bytes, -1,                                   \
     "The cap of the last adaptive decision, bytes.",                   \
     ST (adapt_cap_pages) * s->psize)                                   \
  X (GAUGE, backend_latency_us, 1,                                      \
     "Modelled backend latency per read, microseconds.",                \
     s->lat_ns / 1000)                                                  \
  X (GAUGE, backend_page_us, 3,                                         \
     "Modelled backend transfer time per page, microseconds.",          \
     s->page_ns / 1000)                                                 \
  X (GAUGE, backend_slots, -1,                                          \
     "Backend reads served at once without queueing (estimate).",       \
     s->cong.slots)                                                     \
  X (GAUGE, backend_queue_delay_us, 1,                                  \
     "Smoothed queueing delay of sync reads, microseconds.",            \
     s->cong.queue_delay_ns / 1000.0)                                   \
  X (GAUGE, backend_base_latency_us, 1,                                 \
     "Smallest recent backend read latency, microseconds.",             \
     s->cong.base_latency_ns / 1000.0)                                  \
  X (GAUGE, backend_bdp_bytes, -1,                                      \
     "Backend bandwidth-delay product (estimate), bytes.",              \
     s->cong.bdp_bytes)                                                 \
  X (COUNTER, async_held, -1,                                           \
     "Async reads the congestion estimate held back.",                  \
     ST (async_held))                                                   \
  X (COUNTER, async_covered, -1,                                        \
     "Async parts dropped: the client's reads cover the BDP.",          \
     ST (async_covered))

enum item_kind { COUNTER, GAUGE, LABEL, WINDOWS };
enum format { JSON, PROMETHEUS };

static const char *
ra_mode_name (const struct snap *s)
{
  return rc_cache_config (s->c)->mode == RC_MODE_ADAPTIVE
    ? "adaptive" : "kernel";
}

/* One item in format f.  prec -1: the value is an integer (exactly: it
 * comes in as a uint64_t, never through the double).
 */
static void
write_item (FILE *fp, enum format f, const struct snap *s, int *first,
            enum item_kind kind, const char *key, int prec, const char *help,
            uint64_t u, double d)
{
  const char *suffix = kind == COUNTER || kind == WINDOWS ? "_total" : "";
  int b;

  if (f == JSON) {
    fprintf (fp, "%s  \"%s\": ", *first ? "" : ",\n", key);
    *first = 0;
    if (kind == LABEL && strcmp (key, "version") == 0)
      fprintf (fp, "\"%s\"", PACKAGE_VERSION);
    else if (kind == LABEL && strcmp (key, "schema") == 0)
      fprintf (fp, "%d", RC_STATS_SCHEMA);
    else if (kind == LABEL)
      fprintf (fp, "\"%s\"", ra_mode_name (s));
    else if (kind == WINDOWS) {
      fprintf (fp, "{");
      for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
        fprintf (fp, "%s\"%s\": %" PRIu64, b == RA_A_INITIAL ? " " : ", ",
                 ra_branch_name (b), STAT_GET (s->st, windows[b]));
      fprintf (fp, " }");
    }
    else if (prec < 0)
      fprintf (fp, "%" PRIu64, u);
    else
      fprintf (fp, "%.*f", prec, d);
    return;
  }

  if (kind == LABEL) {
    /* All three labels go on ra_cache_info, written with the first. */
    if (*first)
      fprintf (fp, "# HELP ra_cache_info ra-cache version, stats schema "
               "and readahead mode (always 1).\n"
               "# TYPE ra_cache_info gauge\n"
               "ra_cache_info{version=\"%s\",schema=\"%d\",ra_mode=\"%s\"} 1\n",
               PACKAGE_VERSION, RC_STATS_SCHEMA, ra_mode_name (s));
    *first = 0;
    return;
  }
  fprintf (fp, "# HELP ra_cache_%s%s %s\n", key, suffix, help);
  fprintf (fp, "# TYPE ra_cache_%s%s %s\n", key, suffix,
           kind == GAUGE ? "gauge" : "counter");
  if (kind == WINDOWS) {
    for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
      fprintf (fp, "ra_cache_%s_total{branch=\"%s\"} %" PRIu64 "\n", key,
               ra_branch_name (b), STAT_GET (s->st, windows[b]));
  }
  else if (prec < 0)
    fprintf (fp, "ra_cache_%s%s %" PRIu64 "\n", key, suffix, u);
  else
    fprintf (fp, "ra_cache_%s%s %.*f\n", key, suffix, prec, d);
}

static int
write_stats (struct rc_cache *c, FILE *fp, enum format f)
{
  struct snap snap, *s = &snap;
  int first = 1;

  take_snap (c, s);
  if (f == JSON)
    fprintf (fp, "{\n");
  /* Each VALUE is evaluated once, as an integer for integer items (a
   * uint64_t converts exactly) and as a double for the others.
   */
#define WRITE_ITEM(kind, key, prec, help, value)                        \
  do {                                                                  \
    uint64_t u_ = 0;                                                    \
    double d_ = 0;                                                      \
    if ((prec) < 0)                                                     \
      u_ = (uint64_t) (value);                                          \
    else                                                                \
      d_ = (double) (value);                                            \
    write_item (fp, f, s, &first, kind, #key, prec, help, u_, d_);      \
  } while (0);
  RC_STATS_ITEMS (WRITE_ITEM)
#undef WRITE_ITEM
  if (f == JSON)
    fprintf (fp, "\n}\n");
  return ferror (fp) ? -1 : 0;
}

#undef ST

int
rc_stats_write_json (struct rc_cache *c, FILE *fp)
{
  return write_stats (c, fp, JSON);
}

int
rc_stats_write_prometheus (struct rc_cache *c, FILE *fp)
{
  return write_stats (c, fp, PROMETHEUS);
}

char *
rc_stats_summary (struct rc_cache *c)
{
  struct rc_stats *st = rc_cache_stats (c);
  uint64_t hits = STAT_GET (st, page_hits), misses = STAT_GET (st, page_misses);
  uint64_t cb = STAT_GET (st, client_bytes), bb = STAT_GET (st, backend_bytes);
  char *s = NULL;

  if (asprintf (&s, "ra-cache: reads %" PRIu64 ", hits %.1f%%, "
                "backend %" PRIu64 " reads %" PRIu64 " MiB "
                "(%.2fx the client's %" PRIu64 " MiB), "
                "async pages %" PRIu64 " (wasted %" PRIu64 ", "
                "skipped parts %" PRIu64 ", delayed %" PRIu64 "), "
                "in flight %u (max %" PRIu64 "), cache %" PRIu64 " MiB",
                STAT_GET (st, client_reads),
                hits + misses ? 100.0 * hits / (hits + misses) : 0.0,
                STAT_GET (st, backend_reads), bb >> 20,
                cb ? (double) bb / cb : 0.0, cb >> 20,
                STAT_GET (st, async_pages), STAT_GET (st, ahead_wasted),
                STAT_GET (st, async_skipped), STAT_GET (st, async_delayed),
                rc_cache_inflight (c), STAT_GET (st, inflight_hwm),
                STAT_GET (st, cache_bytes) >> 20) == -1)
    return NULL;
  return s;
}

/* Write the document to a private temporary file in path's directory
 * and rename it into place, so that readers see the old document or the
 * new one, never part of one.  mkostemp creates the file with O_EXCL
 * (an existing name, a symlink planted there included, is never opened
 * or followed) and mode 0600: the counters are the operator's business,
 * as on the stats socket.
 */
int
rc_stats_write_file (struct rc_cache *c, const char *path)
{
  size_t n = strlen (path);
  char *tmp = malloc (n + sizeof ".XXXXXX");
  FILE *fp;
  int fd, r, e;

  if (!tmp)
    return -1;
  snprintf (tmp, n + sizeof ".XXXXXX", "%s.XXXXXX", path);
  fd = mkostemp (tmp, O_CLOEXEC);
  if (fd == -1) {
    free (tmp);
    return -1;
  }
  fp = fdopen (fd, "w");
  if (!fp) {
    e = errno;
    close (fd);
    r = -1;
    errno = e;
    goto out;
  }
  r = rc_stats_write_json (c, fp);
  if (fclose (fp) != 0)
    r = -1;
  if (r == 0 && rename (tmp, path) == -1)
    r = -1;
 out:
  if (r == -1) {
    e = errno;
    unlink (tmp);
    errno = e;
  }
  free (tmp);
  return r;
}
