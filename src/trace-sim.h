/* ra-trace: the simulation of the read path over a simulated page cache
 * and backend (src/trace-sim.c).
 */
#ifndef RA_TRACE_SIM_H
#define RA_TRACE_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "racache/config.h"
#include "racache/congestion.h"
#include "racache/readahead.h"
#include "racache/readpath.h"
#include "racache/stats.h"
#include "racache/trigger.h"
#include "trace.h"

/* Provided by the program that links the simulation (ra-trace.c, the
 * fuzzer): report a fatal error (out of memory, the clock overflowing,
 * an engine bug) and do not return.
 */
void rt_fatal (const char *fmt, ...)
  __attribute__ ((noreturn, format (printf, 1, 2)));

/* The counters the core's struct rc_stats has no field for.  The rest
 * are in struct sim's st, under the filter's names: client_reads,
 * client_bytes, page_hits, page_misses, page_waits (the read path counts
 * them), windows, sync_pages and async_pages (pages inserted),
 * ahead_wasted_pages (read ahead, evicted unused), evictions, backend_reads,
 * backend_bytes, async_skipped and async_skipped_pages (windows and
 * pages the congestion rule dropped), adapt_late and adapt_early_triggers.
 */
struct counters {
  uint64_t sync_triggers, async_triggers;
  /* Timing and adaptive mode (printed only with those options). */
  uint64_t ahead_waits;         /* waits for a read-ahead page in flight */
  uint64_t stall_ns;            /* clock time spent waiting */
  ra_pgoff largest_window;
};

/* A backend read issued and not complete yet (timed replay). */
struct backend_read {
  uint64_t done;                /* completion (ns) */
  uint64_t seq;                 /* issue order: ties complete in it */
  uint64_t ns;                  /* start to completion: what the model sees */
  ra_pgoff start, count;
};

/* Per stream, for adaptive mode and the summary. */
struct stream_info {
  struct rc_behind behind;      /* drop-behind, as the filter's streams */
  ra_pgoff largest_window;
  ra_pgoff largest_cap;
};

/* The timing options (all zero: an instant backend, kernel mode). */
struct timing {
  bool adaptive;                /* --mode adaptive */
  uint64_t latency_ns;          /* --latency */
  uint64_t bandwidth;           /* --bandwidth, bytes/s; 0 = unlimited */
  unsigned parallel;            /* --parallel */
  uint64_t gap_ns;              /* --client-gap */
};

struct sim {
  struct rc_config cfg;         /* the filter's configuration (src/config.c) */
  struct ra_params p;
  uint64_t page_size;
  uint64_t capacity;            /* pages */
  /* The filter's page cache (src/pagecache.c) without page data: its
   * lists, eviction, drop-behind reserve and counters.
   */
  struct rc_pagecache *pc;
  ra_pgoff again_page;          /* see rc_pc_page_read's again */
  struct rc_trigger_env env;    /* the core's trigger over this sim */
  struct counters c;
  struct rc_stats st;           /* the core's counters, as the filter's */
  /* Timing (sim_set_timing; the defaults of sim_init are instant). */
  struct timing tm;
  bool timed;                   /* a latency or a bandwidth limit */
  bool extended;                /* print the timing columns and lines */
  unsigned congestion_threshold;
  struct rc_cong cong;          /* the filter's congestion decision, with
                                 * the fixed threshold (no estimator) */
  uint64_t now;                 /* the clock, ns */
  uint64_t *slot_free;          /* tm.parallel: when each slot is free */
  uint64_t link_free;           /* when the link is free */
  struct backend_read *heap;    /* reads in flight, earliest done first */
  size_t nheap, heap_alloc;
  uint64_t seq;
  struct ra_model model;
  struct stream_info *streams;  /* NULL until sim_set_timing */
  size_t nstreams;
  /* Output. */
  bool quiet;
  uint64_t cur_read;            /* 1-based read number */
  uint64_t cur_stream_id;
  size_t cur_stream;            /* dense index */
};

void sim_init (struct sim *s, const struct rc_config *cfg,
               const struct ra_params *p, bool quiet);
void sim_set_timing (struct sim *s, const struct timing *tm, size_t nstreams);
void sim_free (struct sim *s);
/* Replay one client read of the trace through the read path. */
void replay_read (struct sim *s, struct ra_state *ra,
                  const struct trace_read *r);
void print_table_header (const struct sim *s);
void print_summary (const struct sim *s, size_t nstreams);
void print_timing (const struct sim *s, const struct ra_state *states,
                   const uint64_t *stream_ids);

#endif /* RA_TRACE_SIM_H */
