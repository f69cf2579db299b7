/* ra-trace: the replay of a trace (src/trace-sim.c): the core's read
 * path over the filter's page cache without data, a simulated backend
 * over a virtual clock, and the window rows and summary it prints.
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

/* The backend's timing (all zero: an instant backend). */
struct timing {
  uint64_t latency_ns;          /* --latency */
  uint64_t bandwidth;           /* --bandwidth, bytes/s; 0 = unlimited */
  uint64_t gap_ns;              /* --client-gap */
};

/* A backend read issued and not complete yet. */
struct backend_read {
  uint64_t done;                /* completion (ns) */
  uint64_t ns;                  /* start to completion: what the model sees */
  ra_pgoff start, count;
};

/* One stream of the trace, as the filter's streams (an NBD connection). */
struct stream {
  struct ra_state ra;
  struct rc_behind behind;      /* drop-behind */
  ra_pgoff largest_window, largest_cap;
};

struct sim {
  struct ra_params p;           /* the filter's (rc_engine_params) */
  struct timing tm;
  bool timed;                   /* a latency or a bandwidth limit */
  bool extended;                /* print the timing columns and lines */
  bool quiet;                   /* print no window rows */
  /* The filter's page cache (src/pagecache.c) without page data: its
   * lists, eviction, drop-behind reserve and counters.
   */
  struct rc_pagecache *pc;
  struct rc_stats st;           /* the core's counters, as the filter's */
  struct rc_trigger_env env;    /* the core's trigger over this sim */
  struct rc_cong cong;          /* the filter's congestion decision, with
                                 * the fixed threshold (no estimator) */
  struct ra_model model;
  struct stream *streams;
  size_t nstreams;
  /* The read being replayed. */
  const struct trace_read *cur;
  uint64_t cur_read;            /* its number, from 1 */
  ra_pgoff again_page;          /* see rc_pc_page_read's again */
  /* The virtual clock and the backend. */
  uint64_t now;                 /* ns */
  uint64_t *slot_free;          /* p.parallel: when each slot is free */
  uint64_t link_free;           /* when the link is free */
  struct backend_read *inflight; /* [head, n): by completion */
  size_t head, n, alloc;
  /* The counters struct rc_stats has no field for. */
  uint64_t sync_triggers, async_triggers;
  uint64_t empty_windows;       /* decisions that read nothing */
  uint64_t ahead_waits;         /* waits for a read-ahead page in flight */
  uint64_t stall_ns;            /* clock time spent waiting */
  ra_pgoff largest_window;
};

/* cfg: the checked configuration; p: its engine parameters
 * (rc_engine_params with ra-max-background as the backend slots) and
 * the export size.
 */
void sim_init (struct sim *s, const struct rc_config *cfg,
               const struct ra_params *p, const struct timing *tm,
               size_t nstreams, bool quiet);
void sim_free (struct sim *s);
/* Replay the next client read of the trace through the read path. */
void replay_read (struct sim *s, const struct trace_read *r);
void print_table_header (const struct sim *s);
void print_summary (const struct sim *s);
/* The lines of timing and adaptive mode (when s->extended). */
void print_timing (const struct sim *s, const uint64_t *stream_ids);

#endif /* RA_TRACE_SIM_H */
