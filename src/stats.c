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

int
rc_stats_write_json (struct rc_cache *c, FILE *fp)
{
  struct rc_stats *st = rc_cache_stats (c);
  struct rc_pc_counts pc;
  double lat_ns, page_ns;
  struct timespec now;
  uint64_t hits = STAT_GET (st, page_hits), misses = STAT_GET (st, page_misses);
  int b;

  rc_pc_counts (rc_cache_pagecache (c), &pc);
  rc_cache_model (c, &lat_ns, &page_ns);
  clock_gettime (CLOCK_MONOTONIC, &now);
  fprintf (fp, "{\n");
  fprintf (fp, "  \"version\": \"%s\",\n", PACKAGE_VERSION);
  fprintf (fp, "  \"schema\": %d,\n", RC_STATS_SCHEMA);
  fprintf (fp, "  \"uptime_seconds\": %.1f,\n",
           started.tv_sec == 0 ? 0.0
           : (now.tv_sec - started.tv_sec)
             + (now.tv_nsec - started.tv_nsec) / 1e9);
  fprintf (fp, "  \"page_size\": %" PRIu64 ",\n",
           (uint64_t) rc_pc_page_size (rc_cache_pagecache (c)));
  fprintf (fp, "  \"hit_ratio\": %.4f,\n", ratio (hits, hits + misses));
  fprintf (fp, "  \"backend_bytes_per_client_byte\": %.4f,\n",
           ratio (STAT_GET (st, backend_bytes), STAT_GET (st, client_bytes)));
  fprintf (fp, "  \"readahead_wasted_ratio\": %.4f,\n",
           ratio (STAT_GET (st, ahead_wasted), STAT_GET (st, async_pages)));
  fprintf (fp, "  \"ra_mode\": \"%s\",\n",
           rc_cache_config (c)->mode == RC_MODE_ADAPTIVE ? "adaptive" : "kernel");
  fprintf (fp, "  \"client_reads\": %" PRIu64 ",\n", STAT_GET (st, client_reads));
  fprintf (fp, "  \"client_bytes\": %" PRIu64 ",\n", STAT_GET (st, client_bytes));
  fprintf (fp, "  \"page_hits\": %" PRIu64 ",\n", STAT_GET (st, page_hits));
  fprintf (fp, "  \"page_misses\": %" PRIu64 ",\n", STAT_GET (st, page_misses));
  fprintf (fp, "  \"page_waits\": %" PRIu64 ",\n", STAT_GET (st, page_waits));
  fprintf (fp, "  \"windows\": {");
  for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
    fprintf (fp, "%s\"%s\": %" PRIu64, b == RA_A_INITIAL ? " " : ", ",
             ra_branch_name (b), STAT_GET (st, windows[b]));
  fprintf (fp, " },\n");
  fprintf (fp, "  \"sync_pages\": %" PRIu64 ",\n", STAT_GET (st, sync_pages));
  fprintf (fp, "  \"async_pages\": %" PRIu64 ",\n", STAT_GET (st, async_pages));
  fprintf (fp, "  \"ahead_used_pages\": %" PRIu64 ",\n", STAT_GET (st, ahead_used));
  fprintf (fp, "  \"ahead_wasted_pages\": %" PRIu64 ",\n", STAT_GET (st, ahead_wasted));
  fprintf (fp, "  \"async_skipped\": %" PRIu64 ",\n", STAT_GET (st, async_skipped));
  fprintf (fp, "  \"async_skipped_pages\": %" PRIu64 ",\n",
           STAT_GET (st, async_skipped_pages));
  fprintf (fp, "  \"async_delayed\": %" PRIu64 ",\n", STAT_GET (st, async_delayed));
  fprintf (fp, "  \"async_promoted\": %" PRIu64 ",\n", STAT_GET (st, async_promoted));
  fprintf (fp, "  \"inflight_now\": %u,\n", rc_cache_inflight (c));
  fprintf (fp, "  \"inflight_high_water\": %" PRIu64 ",\n", STAT_GET (st, inflight_hwm));
  fprintf (fp, "  \"backend_reads\": %" PRIu64 ",\n", STAT_GET (st, backend_reads));
  fprintf (fp, "  \"backend_bytes\": %" PRIu64 ",\n", STAT_GET (st, backend_bytes));
  fprintf (fp, "  \"backend_errors\": %" PRIu64 ",\n", STAT_GET (st, backend_errors));
  fprintf (fp, "  \"backend_reads_in_place\": %" PRIu64 ",\n", STAT_GET (st, backend_reads_in_place));
  fprintf (fp, "  \"direct_reads\": %" PRIu64 ",\n", STAT_GET (st, direct_reads));
  fprintf (fp, "  \"evictions\": %" PRIu64 ",\n", STAT_GET (st, evictions));
  fprintf (fp, "  \"invalidated_pages\": %" PRIu64 ",\n",
           STAT_GET (st, invalidated_pages));
  fprintf (fp, "  \"cache_bytes\": %" PRIu64 ",\n", STAT_GET (st, cache_bytes));
  fprintf (fp, "  \"backend_connections\": %u,\n", rc_cache_connections (c));
  fprintf (fp, "  \"backend_connection_opens\": %" PRIu64 ",\n",
           STAT_GET (st, conn_opens));
  fprintf (fp, "  \"backend_connection_failures\": %" PRIu64 ",\n",
           STAT_GET (st, conn_open_failures));
  fprintf (fp, "  \"backend_connections_lost\": %" PRIu64 ",\n",
           STAT_GET (st, conn_lost));
  fprintf (fp, "  \"backend_reconnects\": %" PRIu64 ",\n",
           STAT_GET (st, conn_reconnects));
  fprintf (fp, "  \"backend_connections_late\": %" PRIu64 ",\n",
           STAT_GET (st, conn_late));
  fprintf (fp, "  \"cache_pages\": %" PRIu64 ",\n", pc.pages);
  fprintf (fp, "  \"cache_pages_inflight\": %" PRIu64 ",\n", pc.inflight);
  fprintf (fp, "  \"cache_pages_unused\": %" PRIu64 ",\n", pc.unused);
  fprintf (fp, "  \"cache_capacity_pages\": %" PRIu64 ",\n", pc.capacity);
  fprintf (fp, "  \"cache_memory_bytes\": %" PRIu64 ",\n",
           pc.memory * rc_pc_page_size (rc_cache_pagecache (c)));
  fprintf (fp, "  \"markers_now\": %" PRIu64 ",\n",
           rc_pc_markers (rc_cache_pagecache (c)));
  fprintf (fp, "  \"adapt_late\": %" PRIu64 ",\n", STAT_GET (st, adapt_late));
  fprintf (fp, "  \"adapt_early_triggers\": %" PRIu64 ",\n",
           STAT_GET (st, adapt_early));
  fprintf (fp, "  \"adapt_waste_events\": %" PRIu64 ",\n",
           STAT_GET (st, adapt_waste));
  fprintf (fp, "  \"adapt_last_cap_bytes\": %" PRIu64 ",\n",
           STAT_GET (st, adapt_cap_pages) * rc_pc_page_size (rc_cache_pagecache (c)));
  fprintf (fp, "  \"backend_latency_us\": %.1f,\n", lat_ns / 1000);
  fprintf (fp, "  \"backend_page_us\": %.3f\n", page_ns / 1000);
  fprintf (fp, "}\n");
  return ferror (fp) ? -1 : 0;
}

/* Prometheus text format.  Written next to rc_stats_write_json, key by
 * key in the same order and with the same precision, so that each value
 * equals the JSON's (tests/test-stats-formats.sh checks it): a key added
 * to one must be added to the other.
 */
static void
prom_head (FILE *fp, const char *name, const char *suffix, const char *type,
           const char *help)
{
  fprintf (fp, "# HELP ra_cache_%s%s %s\n", name, suffix, help);
  fprintf (fp, "# TYPE ra_cache_%s%s %s\n", name, suffix, type);
}

static void
prom_counter (FILE *fp, const char *name, const char *help, uint64_t v)
{
  prom_head (fp, name, "_total", "counter", help);
  fprintf (fp, "ra_cache_%s_total %" PRIu64 "\n", name, v);
}

static void
prom_gauge (FILE *fp, const char *name, const char *help, uint64_t v)
{
  prom_head (fp, name, "", "gauge", help);
  fprintf (fp, "ra_cache_%s %" PRIu64 "\n", name, v);
}

static void
prom_gauge_d (FILE *fp, const char *name, const char *help, int prec,
              double v)
{
  prom_head (fp, name, "", "gauge", help);
  fprintf (fp, "ra_cache_%s %.*f\n", name, prec, v);
}

int
rc_stats_write_prometheus (struct rc_cache *c, FILE *fp)
{
  struct rc_stats *st = rc_cache_stats (c);
  struct rc_pagecache *pcache = rc_cache_pagecache (c);
  uint64_t psize = rc_pc_page_size (pcache);
  struct rc_pc_counts pc;
  double lat_ns, page_ns;
  struct timespec now;
  uint64_t hits = STAT_GET (st, page_hits), misses = STAT_GET (st, page_misses);
  int b;

  rc_pc_counts (pcache, &pc);
  rc_cache_model (c, &lat_ns, &page_ns);
  clock_gettime (CLOCK_MONOTONIC, &now);
  prom_head (fp, "info", "", "gauge",
             "ra-cache version, stats schema and readahead mode (always 1).");
  fprintf (fp, "ra_cache_info{version=\"%s\",schema=\"%d\",ra_mode=\"%s\"} 1\n",
           PACKAGE_VERSION, RC_STATS_SCHEMA,
           rc_cache_config (c)->mode == RC_MODE_ADAPTIVE ? "adaptive" : "kernel");
  prom_gauge_d (fp, "uptime_seconds", "Seconds since the cache started.", 1,
                started.tv_sec == 0 ? 0.0
                : (now.tv_sec - started.tv_sec)
                  + (now.tv_nsec - started.tv_nsec) / 1e9);
  prom_gauge (fp, "page_size", "Cache page size in bytes.", psize);
  prom_gauge_d (fp, "hit_ratio", "page_hits / (page_hits + page_misses).", 4,
                ratio (hits, hits + misses));
  prom_gauge_d (fp, "backend_bytes_per_client_byte",
                "backend_bytes / client_bytes.", 4,
                ratio (STAT_GET (st, backend_bytes), STAT_GET (st, client_bytes)));
  prom_gauge_d (fp, "readahead_wasted_ratio",
                "ahead_wasted_pages / async_pages.", 4,
                ratio (STAT_GET (st, ahead_wasted), STAT_GET (st, async_pages)));
  prom_counter (fp, "client_reads", "Client read requests.",
                STAT_GET (st, client_reads));
  prom_counter (fp, "client_bytes", "Bytes returned to clients.",
                STAT_GET (st, client_bytes));
  prom_counter (fp, "page_hits", "Pages found cached or in flight.", hits);
  prom_counter (fp, "page_misses", "Pages not cached when needed.", misses);
  prom_counter (fp, "page_waits", "Pages a client found in flight and waited for.",
                STAT_GET (st, page_waits));
  prom_head (fp, "windows", "_total", "counter",
             "Readahead windows by the branch that decided them.");
  for (b = RA_A_INITIAL; b < RA_NR_BRANCHES; b++)
    fprintf (fp, "ra_cache_windows_total{branch=\"%s\"} %" PRIu64 "\n",
             ra_branch_name (b), STAT_GET (st, windows[b]));
  prom_counter (fp, "sync_pages", "Pages read by sync parts.",
                STAT_GET (st, sync_pages));
  prom_counter (fp, "async_pages", "Pages read by async (readahead) parts.",
                STAT_GET (st, async_pages));
  prom_counter (fp, "ahead_used_pages", "Pages read ahead and later used.",
                STAT_GET (st, ahead_used));
  prom_counter (fp, "ahead_wasted_pages", "Pages read ahead, evicted unused.",
                STAT_GET (st, ahead_wasted));
  prom_counter (fp, "async_skipped", "Async parts skipped for congestion.",
                STAT_GET (st, async_skipped));
  prom_counter (fp, "async_skipped_pages", "Pages of the skipped async parts.",
                STAT_GET (st, async_skipped_pages));
  prom_counter (fp, "async_delayed", "Async reads held back for congestion.",
                STAT_GET (st, async_delayed));
  prom_counter (fp, "async_promoted", "Queued async reads a client then needed.",
                STAT_GET (st, async_promoted));
  prom_gauge (fp, "inflight_now", "Backend reads in flight now.",
              rc_cache_inflight (c));
  prom_gauge (fp, "inflight_high_water", "Most backend reads in flight at once.",
              STAT_GET (st, inflight_hwm));
  prom_counter (fp, "backend_reads", "Backend read requests.",
                STAT_GET (st, backend_reads));
  prom_counter (fp, "backend_bytes", "Bytes read from the backend.",
                STAT_GET (st, backend_bytes));
  prom_counter (fp, "backend_errors", "Backend reads that failed.",
                STAT_GET (st, backend_errors));
  prom_counter (fp, "backend_reads_in_place",
                "Backend reads straight into pages or a client's buffer.",
                STAT_GET (st, backend_reads_in_place));
  prom_counter (fp, "direct_reads", "Reads served around a full cache.",
                STAT_GET (st, direct_reads));
  prom_counter (fp, "evictions", "Pages evicted to make room.",
                STAT_GET (st, evictions));
  prom_counter (fp, "invalidated_pages", "Pages dropped or marked stale by writes.",
                STAT_GET (st, invalidated_pages));
  prom_gauge (fp, "cache_bytes", "Bytes of page data in the cache now.",
              STAT_GET (st, cache_bytes));
  prom_gauge (fp, "backend_connections", "Background backend connections open.",
              rc_cache_connections (c));
  prom_counter (fp, "backend_connection_opens",
                "Background backend connections opened.",
                STAT_GET (st, conn_opens));
  prom_counter (fp, "backend_connection_failures",
                "Background backend connection opens that failed.",
                STAT_GET (st, conn_open_failures));
  prom_counter (fp, "backend_connections_lost",
                "Open background backend connections that broke.",
                STAT_GET (st, conn_lost));
  prom_counter (fp, "backend_reconnects",
                "Opens that replaced a broken background connection.",
                STAT_GET (st, conn_reconnects));
  prom_counter (fp, "backend_connections_late",
                "Background connection opens that completed too late.",
                STAT_GET (st, conn_late));
  prom_gauge (fp, "cache_pages", "Pages in the cache.", pc.pages);
  prom_gauge (fp, "cache_pages_inflight", "Cache pages being read.", pc.inflight);
  prom_gauge (fp, "cache_pages_unused", "Cache pages read ahead, not yet used.",
              pc.unused);
  prom_gauge (fp, "cache_capacity_pages", "Most pages the cache holds.",
              pc.capacity);
  prom_gauge (fp, "cache_memory_bytes", "Memory held for page data.",
              pc.memory * psize);
  prom_gauge (fp, "markers_now", "Readahead trigger markers set now.",
              rc_pc_markers (pcache));
  prom_counter (fp, "adapt_late", "Reads that waited for a page read ahead.",
                STAT_GET (st, adapt_late));
  prom_counter (fp, "adapt_early_triggers",
                "Async triggers taken early after a late read.",
                STAT_GET (st, adapt_early));
  prom_counter (fp, "adapt_waste_events",
                "Decisions told of pages evicted unused.",
                STAT_GET (st, adapt_waste));
  prom_gauge (fp, "adapt_last_cap_bytes", "The cap of the last adaptive decision.",
              STAT_GET (st, adapt_cap_pages) * psize);
  prom_gauge_d (fp, "backend_latency_us",
                "Modelled backend latency per read, microseconds.", 1,
                lat_ns / 1000);
  prom_gauge_d (fp, "backend_page_us",
                "Modelled backend transfer time per page, microseconds.", 3,
                page_ns / 1000);
  return ferror (fp) ? -1 : 0;
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
