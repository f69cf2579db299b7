/* ra-trace: the replay (src/trace.h).  The core's read path and trigger
 * run over the filter's page cache without page data; the backend and
 * time are simulated over a virtual clock (ns), as ra-trace(1)'s
 * SIMULATION and TIMING AND ADAPTIVE MODE say.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

static const struct rc_trigger_ops trigger_ops;

static void *
xrealloc (void *p, size_t n, bool zero)
{
  if (!(p = realloc (p, n)))
    rt_fatal ("out of memory");
  return zero ? memset (p, 0, n) : p;
}

void
sim_init (struct sim *s, const struct rc_config *cfg,
          const struct ra_params *p, const struct timing *tm,
          const struct trace *t, bool quiet)
{
  size_t i;

  memset (s, 0, sizeof *s);
  s->p = *p;
  s->tm = *tm;
  s->timed = tm->latency_ns > 0 || tm->bandwidth > 0;
  s->extended = s->timed || p->mode == RA_MODE_ADAPTIVE || tm->gap_ns > 0;
  s->quiet = quiet;
  s->pc = rc_pc_new_nodata (cfg->cache_size, (uint32_t) cfg->page_size,
                            &s->st);
  if (!s->pc)
    rt_fatal ("out of memory");
  rc_pc_set_nr_pages (s->pc, ra_nr_pages (p));
  rc_trigger_env_init (&s->env, &trigger_ops, s, &rc_pc_trigger_ops, s->pc,
                       &s->p, &s->st);
  rc_cong_init (&s->cong, cfg->congestion_threshold, false,
                cfg->congestion == RC_CONGESTION_WAIT);
  ra_model_init (&s->model);
  s->nstreams = t->nstreams;
  s->stream_ids = t->stream_ids;
  s->streams = xrealloc (NULL, (t->nstreams ? t->nstreams : 1) *
                         sizeof *s->streams, true);
  for (i = 0; i < t->nstreams; i++) {
    ra_state_init (&s->streams[i].ra);
    rc_behind_init (&s->streams[i].behind);
  }
  s->slot_free = xrealloc (NULL, p->parallel * sizeof *s->slot_free, true);
}

void
sim_free (struct sim *s)
{
  rc_pc_free (s->pc);
  rc_trigger_env_destroy (&s->env);
  free (s->streams);
  free (s->slot_free);
  free (s->inflight);
}

/* ---- the backend over the virtual clock --------------------------------- */

/* a + b of the clock; the simulation stops rather than wrap. */
static uint64_t
clock_add (uint64_t a, uint64_t b)
{
  if (a > UINT64_MAX - b)
    rt_fatal ("the simulated clock passes 2^64 ns (584 years): use a "
              "smaller --latency or --client-gap, or a larger --bandwidth");
  return a + b;
}

/* Move the clock to t (never back), completing the reads done by then:
 * the model learns their times, their pages are up to date.
 */
static void
set_clock (struct sim *s, uint64_t t)
{
  while (s->head < s->n && s->inflight[s->head].done <= t) {
    struct backend_read r = s->inflight[s->head++];

    ra_model_sample (&s->model, r.count, r.ns);
    rc_pc_complete (s->pc, r.start, r.count, NULL, 0, 0);
  }
  if (t > s->now)
    s->now = t;
}

/* Add r to the reads in flight, [head, n) ordered by completion (reads
 * that complete together in the order they were issued).
 */
static void
add_inflight (struct sim *s, const struct backend_read *r)
{
  size_t i;

  if (s->head > 0 && 2 * s->head >= s->n) {   /* reuse the completed' room */
    s->n -= s->head;
    memmove (s->inflight, s->inflight + s->head, s->n * sizeof *r);
    s->head = 0;
  }
  if (s->n == s->alloc) {
    s->alloc = s->alloc ? 2 * s->alloc : 64;
    s->inflight = xrealloc (s->inflight, s->alloc * sizeof *r, false);
  }
  for (i = s->n++; i > s->head && s->inflight[i - 1].done > r->done; i--)
    s->inflight[i] = s->inflight[i - 1];
  s->inflight[i] = *r;
}

/* Issue a backend read of pages [start, start + count) at now or
 * not_before, whichever is later; returns its completion.
 */
static uint64_t
issue_batch (struct sim *s, ra_pgoff start, ra_pgoff count,
             uint64_t not_before)
{
  uint64_t from = start << s->p.page_shift;
  uint64_t to = (start + count) << s->p.page_shift, bytes;
  struct backend_read r = { .start = start, .count = count };
  uint64_t *slot = &s->slot_free[0], begin;
  unsigned k;

  /* The last page of the export may be partial: read what exists. */
  if (to > s->p.export_size)
    to = s->p.export_size;
  bytes = to > from ? to - from : 0;
  STAT_ADD (&s->st, backend_reads, 1);
  STAT_ADD (&s->st, backend_bytes, bytes);
  if (!s->timed) {               /* an instant backend */
    ra_model_sample (&s->model, count, 0);
    rc_pc_complete (s->pc, start, count, NULL, 0, 0);
    return s->now;
  }
  /* The slot free first; the read starts there, at or after now. */
  for (k = 1; k < s->p.parallel; k++)
    if (s->slot_free[k] < *slot)
      slot = &s->slot_free[k];
  begin = not_before > s->now ? not_before : s->now;
  if (*slot > begin)
    begin = *slot;
  r.done = clock_add (begin, s->tm.latency_ns);
  if (s->tm.bandwidth) {                        /* ns, rounded up */
    unsigned __int128 ns = ((unsigned __int128) bytes * 1000000000u +
                            s->tm.bandwidth - 1) / s->tm.bandwidth;

    if (r.done < s->link_free)
      r.done = s->link_free;
    r.done = s->link_free = clock_add (r.done, ns > UINT64_MAX ? UINT64_MAX
                                       : (uint64_t) ns);
  }
  *slot = r.done;
  r.ns = r.done - begin;
  add_inflight (s, &r);
  return r.done;
}

/* ---- the trigger's ops (include/racache/trigger.h) over the simulation -- */

static uint64_t
env_now_ns (void *opaque)
{
  return ((struct sim *) opaque)->now;
}

static bool
env_model (void *opaque, double *lat_ns, double *page_ns)
{
  return ra_model_estimate (&((struct sim *) opaque)->model, lat_ns, page_ns);
}

/* The filter's congestion decision over the reads in flight. */
static enum rc_cong_answer
env_congestion (void *opaque, enum rc_cong_question q,
                const struct rc_cong_load *asked)
{
  struct sim *s = opaque;
  struct rc_cong_load load = *asked;

  load.executing = (unsigned) (s->n - s->head);
  return rc_cong_decide (&s->cong, q, &load);
}

/* The sync batches now; the async ones once the sync part is read, as
 * src/cache.c queues them.
 */
static int
env_issue (void *opaque, struct rc_trigger *t, int *err)
{
  struct sim *s = opaque;
  uint64_t sync_done = 0;
  unsigned b;

  (void) err;
  for (b = 0; b < t->n; b++)
    if (!t->b[b].async) {
      uint64_t done = issue_batch (s, t->b[b].start, t->b[b].count, s->now);

      if (done > sync_done)
        sync_done = done;
    }
  for (b = 0; b < t->n; b++)
    if (t->b[b].async)
      issue_batch (s, t->b[b].start, t->b[b].count, sync_done);
  return 0;
}

static const struct rc_trigger_ops trigger_ops = {
  .now_ns = env_now_ns,
  .model = env_model,
  .congestion = env_congestion,
  .issue = env_issue,
};

/* ---- the window table ---------------------------------------------------- */

/* Widths of the window table (see --help and ra-trace(1)). */
#define ROW_FMT "%7" PRIu64 " %6" PRIu64 " %-7s %-6s %10" PRIu64 " %6" PRIu64 \
  " %6" PRIu64 " %10s %8" PRIu64 " %7" PRIu64
#define HEAD_FMT "#%6s %6s %-7s %-6s %10s %6s %6s %10s %8s %7s"

void
print_table_header (const struct sim *s)
{
  printf (HEAD_FMT, "read", "stream", "trigger", "branch", "start", "size",
          "async", "marker", "inserted", "batches");
  if (s->extended)
    printf (" %12s", "time_ms");
  if (s->p.mode == RA_MODE_ADAPTIVE)
    printf (" %6s", "cap");
  putchar ('\n');
}

/* A trigger's counts and its row of the window table; kind is "sync",
 * "async" or "early" (an async trigger made early by the late feedback).
 */
static void
record (struct sim *s, const struct rc_trigger *t, const char *kind)
{
  struct stream *st = &s->streams[s->cur->stream];
  char marker[24] = "-";

  STAT_ADD (&s->st, sync_pages, t->res.sync_pages);
  STAT_ADD (&s->st, async_pages, t->res.async_pages - t->dropped);
  if (t->w.size == 0)           /* the filter counts windows with pages */
    s->empty_windows++;
  if (t->marker)
    s->async_triggers++;
  else
    s->sync_triggers++;
  if (t->w.size > s->largest_window)
    s->largest_window = t->w.size;
  if (t->w.size > st->largest_window)
    st->largest_window = t->w.size;
  if (st->ra.ad.cap > st->largest_cap)
    st->largest_cap = st->ra.ad.cap;
  if (s->quiet)
    return;
  /* The page that got the marker: none when it was cached already
   * (submit skips it) or the async part was dropped.
   */
  if (t->marker_page != RA_NO_MARKER &&
      rc_pc_query_ops.cached (s->pc, t->marker_page))
    snprintf (marker, sizeof marker, "%" PRIu64, (uint64_t) t->marker_page);
  printf (ROW_FMT, s->cur_read, s->cur->stream_id, kind,
          ra_branch_name (t->w.branch), (uint64_t) t->w.start,
          (uint64_t) t->w.size, (uint64_t) t->w.async_size, marker,
          (uint64_t) (t->res.sync_pages + t->res.async_pages - t->dropped),
          (uint64_t) t->n);
  if (s->extended)
    printf (" %12.3f", (double) s->now / 1e6);
  if (s->p.mode == RA_MODE_ADAPTIVE)
    printf (" %6" PRIu64, (uint64_t) st->ra.ad.cap);
  putchar ('\n');
}

/* ---- the read path's ops (include/racache/readpath.h) over the simulation */

/* rc_pc_access's before_wait: the clock moves to page index's read. */
static void
wait_for_page (void *arg, ra_pgoff index)
{
  struct sim *s = arg;
  size_t k;

  for (k = s->head; k < s->n; k++)
    if (index >= s->inflight[k].start &&
        index - s->inflight[k].start < s->inflight[k].count) {
      s->stall_ns += s->inflight[k].done - s->now;
      set_clock (s, s->inflight[k].done);
      return;
    }
  rt_fatal ("internal error: page %" PRIu64 " is in flight but was never "
            "issued (read %" PRIu64 ")", (uint64_t) index, s->cur_read);
}

static enum rc_access
sim_access (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, bool *waited, bool *waited_ahead)
{
  struct sim *s = opaque;
  struct rc_pc_page_read pgr = {
    .index = i, .again = i == s->again_page,
    .before_wait = wait_for_page, .arg = s,
  };
  enum rc_access r = rc_pc_access (s->pc, &pgr);

  (void) rd; (void) from; (void) to;
  /* A wait for a read-ahead page nobody used yet: adaptive mode's late. */
  *waited = pgr.waited;
  *waited_ahead = pgr.waited_ahead && s->p.mode == RA_MODE_ADAPTIVE;
  if (pgr.waited_ahead)
    s->ahead_waits++;
  return r;
}

/* A trigger at page i of read rd (rc_trigger), or with rd NULL, adaptive
 * mode's late feedback (rc_trigger_late): the core's, as the filter's.
 */
static int
sim_trigger (void *opaque, struct rc_read *rd, ra_pgoff i, bool marker,
             int *err)
{
  struct sim *s = opaque;
  struct rc_trigger t;
  int r = 0;

  rc_trigger_init (&t, &s->streams[s->cur->stream].ra,
                   rc_pc_owner_of (s->cur->stream), i, marker,
                   rd ? rd->last : i + 1, rd, 1, 0);
  if (rd) {
    r = rc_trigger (&s->env, &t, NULL, err);
    record (s, &t, marker ? "async" : "sync");
  }
  else if (rc_trigger_late (&s->env, &t, NULL))
    record (s, &t, "early");
  rc_trigger_free (&t);
  return r;
}

static void
sim_late (void *opaque, struct rc_read *rd, ra_pgoff i)
{
  (void) rd;
  sim_trigger (opaque, NULL, i, false, NULL);
}

/* The cache could not hold the page (its shard full of pages in
 * flight): the filter reads it around the cache, one backend read.
 */
static int
sim_direct (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, int *err)
{
  struct sim *s = opaque;

  (void) rd; (void) i; (void) err;
  STAT_ADD (&s->st, backend_reads, 1);
  STAT_ADD (&s->st, backend_bytes, to - from);
  return 0;
}

static const struct rc_read_ops sim_read_ops = {
  .access = sim_access,
  .trigger = sim_trigger,
  .late = sim_late,
  .direct = sim_direct,
};

/* One client read, with its stream's prev_pos and drop-behind as
 * src/cache.c's rc_read keeps them.
 */
void
replay_read (struct sim *s, const struct trace_read *r)
{
  struct stream *st = &s->streams[r->stream];
  unsigned shift = s->p.page_shift;
  uint64_t end = r->offset + r->length;
  struct rc_read rd;
  ra_pgoff from, to;
  int err = 0, slot;

  s->cur = r;
  if (s->cur_read++ > 0 && s->tm.gap_ns > 0)
    set_clock (s, clock_add (s->now, s->tm.gap_ns));
  STAT_ADD (&s->st, client_reads, 1);
  rc_read_init (&rd, r->offset, r->length, shift);
  s->again_page = rc_again_page (&st->ra, shift);
  slot = rc_behind_start (&st->behind, rd.first);
  rc_read_path (&sim_read_ops, s, &s->st, shift, &rd, &err);
  ra_update_prev_pos (&st->ra, end);
  st->ra.done_bytes += r->length;
  from = rc_behind_end (&st->behind, slot, rd.first, end >> shift,
                        rc_pc_behind_pages (s->pc), &to);
  rc_pc_drop_behind (s->pc, from, to);
}

/* ---- the summary -------------------------------------------------------- */

/* One line of the summary: "KEY: V", then " (P% of WHAT)" when of > 0. */
static void
print_kv (const char *key, uint64_t v, uint64_t of, const char *what)
{
  printf ("%-28s %" PRIu64, key, v);
  if (of)
    printf (" (%.1f%% of %s)", 100.0 * (double) v / (double) of, what);
  putchar ('\n');
}

void
print_summary (const struct sim *s)
{
  uint64_t ahead = STAT_GET (&s->st, async_pages);
  struct rc_pc_counts pcc;

  rc_pc_counts (s->pc, &pcc);
  printf ("# summary\n");
  print_kv ("streams:", s->nstreams, 0, NULL);
  print_kv ("sync triggers:", s->sync_triggers, 0, NULL);
  print_kv ("async triggers:", s->async_triggers, 0, NULL);
  print_kv ("empty windows:", s->empty_windows, 0, NULL);
  print_kv ("read ahead never used:", STAT_GET (&s->st, ahead_wasted_pages) +
            pcc.unused_ahead, ahead, "read ahead");
  print_kv ("read ahead unused at end:", pcc.unused_ahead, 0, NULL);
  print_kv ("sync part unused at end:", pcc.unused - pcc.unused_ahead, 0,
            NULL);
  print_kv ("largest window:", s->largest_window, 0, NULL);
}

void
print_timing (const struct sim *s)
{
  double lat, page, bps;
  size_t i;

  printf ("%-28s %.6f s\n", "simulated time:", (double) s->now / 1e9);
  bps = s->now ? (double) STAT_GET (&s->st, client_bytes) * 1e9 /
    (double) s->now : 0;
  if (s->now > 0)
    printf ("%-28s %.0f bytes/s (%.2f MB/s)\n%-28s %.6f s (%.1f%% of "
            "simulated time)\n", "client throughput:", bps, bps / 1e6,
            "stall time:", (double) s->stall_ns / 1e9,
            100.0 * (double) s->stall_ns / (double) s->now);
  else
    printf ("%-28s -\n%-28s %.6f s\n", "client throughput:", "stall time:",
            (double) s->stall_ns / 1e9);
  print_kv ("page waits on read ahead:", s->ahead_waits, 0, NULL);
  if (ra_model_estimate (&s->model, &lat, &page))
    printf ("%-28s %.0f ns (%.3f ms)\n%-28s %.1f ns\n", "model latency:", lat,
            lat / 1e6, "model cost per page:", page);
  else
    printf ("%-28s -\n%-28s -\n", "model latency:", "model cost per page:");
  if (s->p.mode != RA_MODE_ADAPTIVE)
    return;
  for (i = 0; i < s->nstreams; i++) {
    const struct stream *st = &s->streams[i];
    char key[48];

    snprintf (key, sizeof key, "stream %" PRIu64 " cap:", s->stream_ids[i]);
    printf ("%-28s %" PRIu64 " (largest %" PRIu64 ", largest window %"
            PRIu64 ", late %" PRIu64 ", waste %" PRIu64 ")\n", key,
            (uint64_t) st->ra.ad.cap, (uint64_t) st->largest_cap,
            (uint64_t) st->largest_window, st->ra.ad.late_events,
            st->ra.ad.waste_events);
  }
}
