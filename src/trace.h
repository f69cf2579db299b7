/* ra-trace's trace parser and replay, for the tool and the fuzzer. */
#ifndef RA_TRACE_TRACE_H
#define RA_TRACE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "racache/congestion.h"
#include "racache/readpath.h"
#include "racache/trigger.h"

/* ---- the trace (src/trace.c): "OFFSET LENGTH [STREAM]" lines or nbdkit's
 * log filter's log.  Errors: "NAME:LINE: message" in t->err, no exit.
 */

struct trace_read {
  uint64_t offset, length;
  uint64_t stream_id;          /* as written in the trace */
  size_t stream;               /* index of stream_id in stream_ids */
  unsigned long line;
};

struct trace {
  const char *name;            /* file name for messages */
  struct trace_read *reads;
  size_t nr, alloc;
  uint64_t max_end;            /* largest offset + length */
  uint64_t log_export_size;    /* largest size= of a log Connect line */
  uint64_t *stream_ids;         /* the nstreams ids, ascending */
  size_t nstreams;
  char err[512];               /* the message of the last error */
};

/* Read a whole trace from fp into t (t zeroed, t->name set) and number
 * its streams: 0, or -1 with t->err.  trace_free frees what it holds
 * either way.
 */
int trace_read_file (struct trace *t, FILE *fp);
void trace_free (struct trace *t);

/* The export size *size, when it is 0 (none given): the largest size of
 * the log's Connect lines or the end of the last page read, whichever is
 * larger.  Returns 0, or -1 with t->err if a read ends past it.
 */
int trace_export_size (struct trace *t, uint64_t page_size, uint64_t *size);

/* ---- the replay (src/trace-sim.c) --------------------------------------- */

/* The program's: report a fatal error (out of memory, the clock
 * overflowing, an engine bug) and exit.
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
  struct rc_pagecache *pc;      /* src/pagecache.c, without page data */
  struct rc_stats st;           /* the core's counters, as the filter's */
  struct rc_trigger_env env;    /* the core's trigger over this sim */
  struct rc_cong cong;          /* the filter's congestion decision, with
                                 * the fixed threshold (no estimator) */
  struct ra_model model;
  struct stream *streams;
  size_t nstreams;
  const uint64_t *stream_ids;   /* the trace's */
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
 * the export size; t: the trace, for its streams.
 */
void sim_init (struct sim *s, const struct rc_config *cfg,
               const struct ra_params *p, const struct timing *tm,
               const struct trace *t, bool quiet);
void sim_free (struct sim *s);
/* Replay the next client read of the trace through the read path. */
void replay_read (struct sim *s, const struct trace_read *r);
void print_table_header (const struct sim *s);
void print_summary (const struct sim *s);
/* The lines of timing and adaptive mode (when s->extended). */
void print_timing (const struct sim *s);

#endif /* RA_TRACE_TRACE_H */
