/* ra-cache: counters.  Updated with relaxed atomic operations so that the
 * read path never takes a lock for them.
 *
 * RC_STATS_ITEMS below is the one list of everything ra-cache reports: it
 * declares the members of struct rc_stats, and src/stats.c writes the
 * JSON document, the Prometheus text, the one-line summary, the filter's
 * exit line and rc_stats_print's report from it, under the same name
 * (the JSON key) everywhere.  Adding a counter: one line here (the JSON
 * key, where the value comes from, a description), the place that
 * increments it (STAT_ADD), and its =item in the man page's STATS section
 * (plugins/ra-cache/nbdkit-ra-cache-filter.pod).
 */
#ifndef RACACHE_STATS_H
#define RACACHE_STATS_H

#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>

#include "racache/readahead.h"

/* X (KIND, KEY, SOURCE, PREC, SUMMARY, HELP), in the JSON document's order
 * (keys are only ever added within one schema, RC_STATS_SCHEMA).
 *
 * KIND     COUNTER (only grows: Prometheus ra_cache_KEY_total), GAUGE
 *          (ra_cache_KEY) or LABEL (a string, or the schema number, in
 *          JSON; a label of ra_cache_info in Prometheus; not in the text
 *          lines).
 * KEY      the JSON key, and the name in every other format.
 * SOURCE   where the value comes from:
 *          RC_FIELD (M)     member M of struct rc_stats, a count;
 *          RC_PAGES (M)     member M, a count of pages, shown in bytes;
 *          RC_BRANCHES (M)  member M[RA_NR_BRANCHES], one count per window
 *                           branch (JSON: an object keyed by branch letter;
 *                           text: KEY.A=...; Prometheus: {branch="A"});
 *          RC_CALC (E)      computed from the counters and the page size
 *                           (E may use ST (M), s->psize and ratio (A, B));
 *          RC_CACHE (E)     needs the running cache (E may use s->c, s->pc,
 *                           s->lat_ns, s->page_ns, s->uptime): not in
 *                           rc_stats_print's report;
 *          RC_NONE          a LABEL.
 * PREC     -1: the value is an integer; else a double printed with PREC
 *          decimals.
 * SUMMARY  1: in the one-line summary logged every
 *          ra-cache-stats-interval (rc_stats_summary), 0: not.
 * HELP     one sentence (Prometheus's HELP); the man page says more.
 *
 * Members are named as their key, except adapt_cap_pages (in pages; its
 * key, adapt_last_cap_bytes, is in bytes).
 */
#define RC_STATS_ITEMS(X)                                               \
  X (LABEL, version, RC_NONE, -1, 0, "")                                \
  X (LABEL, schema, RC_NONE, -1, 0, "")                                 \
  X (GAUGE, uptime_seconds, RC_CACHE (s->uptime), 1, 0,                 \
     "Seconds since the cache started.")                                \
  X (GAUGE, page_size, RC_CALC (s->psize), -1, 0,                       \
     "Cache page size in bytes.")                                       \
  X (GAUGE, hit_ratio,                                                  \
     RC_CALC (ratio (ST (page_hits), ST (page_hits) + ST (page_misses))), \
     4, 1, "page_hits / (page_hits + page_misses).")                    \
  X (GAUGE, backend_bytes_per_client_byte,                              \
     RC_CALC (ratio (ST (backend_bytes), ST (client_bytes))), 4, 1,     \
     "backend_bytes / client_bytes.")                                   \
  X (GAUGE, readahead_wasted_ratio,                                     \
     RC_CALC (ratio (ST (ahead_wasted_pages), ST (async_pages))), 4, 0, \
     "ahead_wasted_pages / async_pages.")                               \
  X (LABEL, ra_mode, RC_NONE, -1, 0, "")                                \
  X (COUNTER, client_reads, RC_FIELD (client_reads), -1, 1,             \
     "Client read requests.")                                           \
  X (COUNTER, client_bytes, RC_FIELD (client_bytes), -1, 1,             \
     "Bytes returned to clients.")                                      \
  X (COUNTER, page_hits, RC_FIELD (page_hits), -1, 0,                   \
     "Pages found cached or in flight.")                                \
  X (COUNTER, page_misses, RC_FIELD (page_misses), -1, 0,               \
     "Pages not cached when needed.")                                   \
  X (COUNTER, page_waits, RC_FIELD (page_waits), -1, 0,                 \
     "Pages a client found in flight and waited for.")                  \
  X (COUNTER, windows, RC_BRANCHES (windows), -1, 0,                    \
     "Readahead windows by the branch that decided them.")              \
  X (COUNTER, sync_pages, RC_FIELD (sync_pages), -1, 0,                 \
     "Pages read by sync parts.")                                       \
  X (COUNTER, async_pages, RC_FIELD (async_pages), -1, 1,               \
     "Pages read by async (readahead) parts.")                          \
  X (COUNTER, ahead_used_pages, RC_FIELD (ahead_used_pages), -1, 0,     \
     "Pages read ahead and later used.")                                \
  X (COUNTER, ahead_wasted_pages, RC_FIELD (ahead_wasted_pages), -1, 1, \
     "Pages read ahead, evicted unused.")                               \
  X (COUNTER, async_skipped, RC_FIELD (async_skipped), -1, 1,           \
     "Async parts skipped for congestion.")                             \
  X (COUNTER, async_skipped_pages, RC_FIELD (async_skipped_pages), -1, 0, \
     "Pages of the skipped async parts.")                               \
  X (COUNTER, async_burst_pages, RC_FIELD (async_burst_pages), -1, 0,   \
     "Pages of windows not read: a stream's first burst, past its first two.") \
  X (COUNTER, async_delayed, RC_FIELD (async_delayed), -1, 1,           \
     "Async reads held back for congestion.")                           \
  X (COUNTER, async_promoted, RC_FIELD (async_promoted), -1, 0,         \
     "Queued async reads a client then needed (also while their window's sync part was read).") \
  X (GAUGE, inflight_now, RC_CACHE (rc_cache_inflight (s->c)), -1, 1,   \
     "Backend reads in flight now.")                                    \
  X (GAUGE, inflight_high_water, RC_FIELD (inflight_high_water), -1, 1, \
     "Most backend reads in flight at once.")                           \
  X (COUNTER, backend_reads, RC_FIELD (backend_reads), -1, 1,           \
     "Backend read requests.")                                          \
  X (COUNTER, backend_bytes, RC_FIELD (backend_bytes), -1, 1,           \
     "Bytes read from the backend.")                                    \
  X (COUNTER, backend_errors, RC_FIELD (backend_errors), -1, 0,         \
     "Backend reads that failed.")                                      \
  X (COUNTER, backend_reads_in_place, RC_FIELD (backend_reads_in_place), \
     -1, 0, "Backend reads straight into pages or a client's buffer.")  \
  X (COUNTER, direct_reads, RC_FIELD (direct_reads), -1, 0,             \
     "Reads served around a full cache.")                               \
  X (COUNTER, read_around_pages, RC_FIELD (read_around_pages), -1, 0,   \
     "Pages read around the cache, for covered clients and dropped "     \
     "async parts.")                                                    \
  X (COUNTER, evictions, RC_FIELD (evictions), -1, 0,                   \
     "Pages evicted to make room.")                                     \
  X (COUNTER, invalidated_pages, RC_FIELD (invalidated_pages), -1, 0,   \
     "Pages dropped or marked stale by writes.")                        \
  X (COUNTER, uncached_reads_other_export,                              \
     RC_FIELD (uncached_reads_other_export), -1, 0,                     \
     "Client reads not cached: their connection named another export.") \
  X (COUNTER, uncached_bytes_other_export,                              \
     RC_FIELD (uncached_bytes_other_export), -1, 1,                     \
     "Bytes of those reads.")                                           \
  X (COUNTER, uncached_reads_size_mismatch,                             \
     RC_FIELD (uncached_reads_size_mismatch), -1, 0,                    \
     "Client reads not cached: their connection saw another export "    \
     "size than the cache's.")                                          \
  X (COUNTER, uncached_bytes_size_mismatch,                             \
     RC_FIELD (uncached_bytes_size_mismatch), -1, 1,                    \
     "Bytes of those reads.")                                           \
  X (COUNTER, uncached_reads_private_writes,                            \
     RC_FIELD (uncached_reads_private_writes), -1, 0,                   \
     "Client reads not cached: their connection wrote to a plugin "     \
     "without multi-conn consistency.")                                 \
  X (COUNTER, uncached_bytes_private_writes,                            \
     RC_FIELD (uncached_bytes_private_writes), -1, 1,                   \
     "Bytes of those reads.")                                           \
  X (GAUGE, cache_bytes, RC_FIELD (cache_bytes), -1, 1,                 \
     "Bytes of page data in the cache now.")                            \
  X (GAUGE, backend_connections, RC_CACHE (rc_cache_connections (s->c)), \
     -1, 0, "Background backend connections open.")                     \
  X (COUNTER, backend_connection_opens,                                 \
     RC_FIELD (backend_connection_opens), -1, 0,                        \
     "Background backend connections opened.")                          \
  X (COUNTER, backend_connection_failures,                              \
     RC_FIELD (backend_connection_failures), -1, 0,                     \
     "Background backend connection opens that failed.")                \
  X (COUNTER, backend_connections_lost,                                 \
     RC_FIELD (backend_connections_lost), -1, 0,                        \
     "Open background backend connections that broke.")                 \
  X (COUNTER, backend_reconnects, RC_FIELD (backend_reconnects), -1, 0, \
     "Opens that replaced a broken background connection.")             \
  X (COUNTER, backend_connections_late,                                 \
     RC_FIELD (backend_connections_late), -1, 0,                        \
     "Signs that the server limits connections (each lowered the limit).") \
  X (GAUGE, backend_connection_limit,                                   \
     RC_CACHE (rc_cache_connection_limit (s->c)), -1, 0,                \
     "Most background connections kept now.")                           \
  X (GAUGE, cache_pages, RC_CACHE (s->pc.pages), -1, 0,                 \
     "Pages in the cache.")                                             \
  X (GAUGE, cache_pages_inflight, RC_CACHE (s->pc.inflight), -1, 0,     \
     "Cache pages being read.")                                         \
  X (GAUGE, cache_pages_unused, RC_CACHE (s->pc.unused), -1, 0,         \
     "Cache pages read ahead, not yet used.")                           \
  X (GAUGE, cache_capacity_pages, RC_CACHE (s->pc.capacity), -1, 0,     \
     "Most pages the cache holds.")                                     \
  X (GAUGE, cache_memory_bytes, RC_CACHE (s->pc.memory * s->psize), -1, 0, \
     "Memory held for page data.")                                      \
  X (GAUGE, memory_other_bytes,                                         \
     RC_CACHE (s->pc.other_bytes + rc_cache_bounce_bytes (s->c)), -1, 0, \
     "Memory held beyond page data: page structs, tables, bounce buffers.") \
  X (GAUGE, markers_now,                                                \
     RC_CACHE (rc_pc_markers (rc_cache_pagecache (s->c))), -1, 0,       \
     "Readahead trigger markers set now.")                              \
  X (COUNTER, adapt_late, RC_FIELD (adapt_late), -1, 0,                 \
     "Reads that waited for a page read ahead.")                        \
  X (COUNTER, adapt_early_triggers, RC_FIELD (adapt_early_triggers), -1, 0,      \
     "Async triggers taken early after a late read.")                   \
  X (COUNTER, adapt_waste_events, RC_FIELD (adapt_waste_events), -1, 0,        \
     "Decisions told of pages evicted unused.")                         \
  X (GAUGE, adapt_last_cap_bytes, RC_PAGES (adapt_cap_pages), -1, 0,    \
     "The cap of the last adaptive decision, bytes.")                   \
  X (GAUGE, backend_latency_us, RC_CACHE (s->lat_ns / 1000), 1, 0,      \
     "Modelled backend latency per read.")                \
  X (GAUGE, backend_page_us, RC_CACHE (s->page_ns / 1000), 3, 0,        \
     "Modelled backend transfer time per page.")          \
  X (GAUGE, backend_slots, RC_CACHE (s->cong.slots), -1, 0,             \
     "Backend reads served at once without queueing (estimate).")       \
  X (GAUGE, backend_queue_delay_us,                                     \
     RC_CACHE (s->cong.queue_delay_ns / 1000.0), 1, 0,                  \
     "Smoothed queueing delay of sync reads.")            \
  X (GAUGE, backend_base_latency_us,                                    \
     RC_CACHE (s->cong.base_latency_ns / 1000.0), 1, 0,                 \
     "Smallest recent backend read latency.")             \
  X (GAUGE, backend_bdp_bytes, RC_CACHE (s->cong.bdp_bytes), -1, 0,     \
     "Backend bandwidth-delay product (estimate), bytes.")              \
  X (COUNTER, async_held, RC_FIELD (async_held), -1, 0,                 \
     "Async reads the congestion estimate held back.")                  \
  X (COUNTER, async_covered, RC_FIELD (async_covered), -1, 0,           \
     "Async parts dropped: the client's reads cover the BDP.")          \
  X (COUNTER, windows_yielded, RC_FIELD (windows_yielded), -1, 0,       \
     "Windows bounded while other clients waited for random reads.")    \
  X (GAUGE, learn_sequence_pages,                                       \
     RC_CACHE (rc_cache_learn_sequence_pages (s->c)), -1, 0,            \
     "Pages in the learned sequence read at start (ra-cache-learn).")   \
  X (GAUGE, learn_recorded_pages,                                       \
     RC_CACHE (rc_cache_learn_recorded_pages (s->c)), -1, 0,            \
     "Pages clients read for the first time in this run, recorded.")    \
  X (GAUGE, replay_reached_pages,                                       \
     RC_CACHE (rc_cache_replay_reached_pages (s->c)), -1, 0,            \
     "How far in the learned sequence clients read what was replayed.") \
  X (COUNTER, replay_pages, RC_FIELD (replay_pages), -1, 1,             \
     "Pages read ahead by the replay of the learned sequence.")         \
  X (COUNTER, replay_used_pages, RC_FIELD (replay_used_pages), -1, 1,   \
     "Replayed pages a client then read.")                              \
  X (COUNTER, replay_wasted_pages, RC_FIELD (replay_wasted_pages), -1, 1, \
     "Replayed pages evicted unused.")                                  \
  X (COUNTER, async_cancelled_pages, RC_FIELD (async_cancelled_pages), -1, \
     0, "Pages of queued async reads dropped: their connection closed.")

/* The counters: the members the table's RC_FIELD, RC_PAGES and
 * RC_BRANCHES sources name.
 */
#define RC_NONE
#define RC_FIELD(m) _Atomic uint64_t m;
#define RC_PAGES(m) _Atomic uint64_t m;
#define RC_BRANCHES(m) _Atomic uint64_t m[RA_NR_BRANCHES];
#define RC_CALC(e)
#define RC_CACHE(e)
/* A latency histogram: a count per bucket (bucket i: at most
 * rc_hist_le[i] seconds and more than the one before; the last: more
 * than all) and the sum, in nanoseconds.  JSON and Prometheus give the
 * cumulative counts.
 */
#define RC_HIST_BUCKETS 16
extern const double rc_hist_le[RC_HIST_BUCKETS - 1];
struct rc_hist {
  _Atomic uint64_t n[RC_HIST_BUCKETS];
  _Atomic uint64_t sum_ns;
};
void rc_hist_observe (struct rc_hist *h, uint64_t ns);

#define RC_STATS_MEMBER(KIND, KEY, SOURCE, PREC, SUMMARY, HELP) SOURCE
struct rc_stats {
  RC_STATS_ITEMS (RC_STATS_MEMBER)
  /* After the table's items in JSON and Prometheus (not in the text
   * lines): how long client reads took, from the filter's call to its
   * reply, and how long backend reads took.
   */
  struct rc_hist client_read_seconds;
  struct rc_hist backend_read_seconds;
};
#undef RC_STATS_MEMBER
#undef RC_NONE
#undef RC_FIELD
#undef RC_PAGES
#undef RC_BRANCHES
#undef RC_CALC
#undef RC_CACHE

#define STAT_ADD(st, field, n) \
  atomic_fetch_add_explicit (&(st)->field, (n), memory_order_relaxed)
#define STAT_SUB(st, field, n) \
  atomic_fetch_sub_explicit (&(st)->field, (n), memory_order_relaxed)
#define STAT_GET(st, field) \
  atomic_load_explicit (&(st)->field, memory_order_relaxed)

static inline void
stat_max (_Atomic uint64_t *field, uint64_t v)
{
  uint64_t cur = atomic_load_explicit (field, memory_order_relaxed);
  while (v > cur &&
         !atomic_compare_exchange_weak_explicit (field, &cur, v,
                                                 memory_order_relaxed,
                                                 memory_order_relaxed))
    ;
}

/* How rc_stats_print writes the items (LABELs are left out of both). */
enum rc_stats_style {
  RC_STATS_LINE,      /* PREFIXkey=value key=value ... (no newline) */
  RC_STATS_LIST,      /* PREFIXkey: value, one line per item */
};

/* rc_stats_print's flags. */
#define RC_STATS_SUMMARY_ONLY 1u   /* only the items marked SUMMARY */

/* Report the counters st (of a cache with pages of page_size bytes), for
 * a program that keeps its own struct rc_stats (ra-trace): every item of
 * RC_STATS_ITEMS but the LABELs and those that need a running cache
 * (RC_CACHE), under the JSON keys; windows as windows.A ... windows.G.
 * Returns 0, or -1 if writing to fp failed.
 */
int rc_stats_print (FILE *fp, const struct rc_stats *st, uint32_t page_size,
                    enum rc_stats_style style, unsigned flags,
                    const char *prefix);

#endif /* RACACHE_STATS_H */
