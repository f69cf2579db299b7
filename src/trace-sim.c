/* ra-trace: the simulation (src/trace-sim.h).
 *
 * The simulation follows the read path of doc/readahead-rules.md: for each
 * page of a read, from its first: a page that is not cached is a sync
 * trigger (ondemand (i, false, last - i)); a page that carries the
 * marker has it cleared and is an async trigger (ondemand (i, true,
 * last - i)); each window is submitted with ra_submit; prev_pos is set
 * with ra_update_prev_pos when the read is done (the page walk is the
 * core's rc_read_path).  Without timing, pages are up to date as soon as
 * their window is submitted (no latency, and so no congestion).  Each stream has its own stream state; the cache (and so
 * the markers) is shared by all of them, as in the filter, where the
 * state is per NBD connection.
 *
 * The cache is the filter's page cache (src/pagecache.c) without page
 * data (rc_pc_new_nodata): its eviction rule, its counters (in struct
 * rc_stats, as the filter's), its waste feedback; a client waits for a
 * page in flight (rc_pc_access's before_wait) by moving the clock to its
 * read's completion.  Each stream gives back the pages it read once
 * behind it as the filter's streams do (rc_behind_start, rc_behind_end,
 * rc_pc_drop_behind).
 *
 * Timing (--latency, --bandwidth, --parallel, --client-gap) and adaptive
 * mode (the default): a discrete-event simulation over a virtual
 * clock (ns).  There is one client timeline: the reads are replayed one
 * after another in trace order, whatever their stream, --client-gap
 * apart.  Each backend read (a batch of ra_submit) is issued at the
 * clock of its trigger (a window's async batches once its sync batches
 * are complete, as the filter queues them) and computed at once, first
 * come first served:
 * it starts when one of --parallel slots is free (at or after its issue),
 * its transfer starts after the latency and once the link is free (one
 * link, transfers serialized on it), and it completes after its bytes /
 * bandwidth; its pages are ready then.  A client that needs a page not
 * ready yet waits: the clock moves to its completion.  Reads complete in
 * order of their completion time as the clock passes them: the backend
 * model (ra_model_sample, start to completion) learns from them and
 * their pages become up to date (rc_pc_complete).  The congestion rule of the filter (ra-congestion=skip)
 * applies: a window submitted while threshold reads are in flight (issued,
 * not complete) reads only its sync part.  In adaptive mode each trigger
 * gets struct ra_inputs as src/cache.c gives them (clock, model estimate,
 * share of the cache over its markers, the stream's read-ahead pages
 * evicted unused), and a wait for a page an async part had in flight is
 * late feedback: ra_late, and an early async trigger at the marker it
 * names, as src/cache.c late() does (with its congestion condition).
 * With no latency and no bandwidth limit every read completes at its
 * issue: the replay is exactly the instant one above.
 */

#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace-sim.h"

static const struct rc_trigger_ops trigger_ops;

static void *
xrealloc (void *p, size_t n)
{
  p = realloc (p, n);
  if (!p)
    rt_fatal ("out of memory");
  return p;
}

/* ---- the page cache: the filter's (src/pagecache.c), without data ---- */

/* The engine parameters p are the filter's, from the configuration cfg
 * (rc_engine_params: adapt_min 128K, self_max = threshold - 1 reads of
 * io_max, parallel = ra-max-background).  The page cache is the
 * filter's own, without page data.
 */
void
sim_init (struct sim *s, const struct rc_config *cfg,
          const struct ra_params *p, bool quiet)
{
  memset (s, 0, sizeof *s);
  s->cfg = *cfg;
  s->p = *p;
  s->page_size = UINT64_C (1) << p->page_shift;
  s->pc = rc_pc_new_nodata (cfg->cache_size, (uint32_t) s->page_size,
                            &s->st);
  if (!s->pc)
    rt_fatal ("out of memory");
  rc_pc_set_nr_pages (s->pc, ra_nr_pages (p));
  s->capacity = rc_pc_capacity (s->pc);
  s->quiet = quiet;
  s->congestion_threshold = cfg->congestion_threshold;
  rc_cong_init (&s->cong, cfg->congestion_threshold, false,
                cfg->congestion == RC_CONGESTION_WAIT);
  s->again_page = RA_NO_MARKER;
  ra_model_init (&s->model);
  rc_trigger_env_init (&s->env, &trigger_ops, s, &rc_pc_trigger_ops, s->pc,
                       &s->p, &s->st);
}

/* The timing options (tm->parallel and tm->adaptive are the
 * configuration's ra-max-background and ra-mode).
 */
void
sim_set_timing (struct sim *s, const struct timing *tm, size_t nstreams)
{
  s->tm = *tm;
  if (s->tm.parallel == 0)
    s->tm.parallel = 1;
  s->timed = tm->latency_ns > 0 || tm->bandwidth > 0;
  s->extended = s->timed || tm->adaptive || tm->gap_ns > 0;
  s->slot_free = xrealloc (NULL, s->tm.parallel * sizeof *s->slot_free);
  memset (s->slot_free, 0, s->tm.parallel * sizeof *s->slot_free);
  s->nstreams = nstreams;
  s->streams = xrealloc (NULL, (nstreams ? nstreams : 1) * sizeof *s->streams);
  memset (s->streams, 0, (nstreams ? nstreams : 1) * sizeof *s->streams);
  for (size_t i = 0; i < nstreams; i++)
    rc_behind_init (&s->streams[i].behind);
}

/* a + b of the clock; the simulation stops rather than wrap. */
static uint64_t
clock_add (uint64_t a, uint64_t b)
{
  if (a > UINT64_MAX - b)
    rt_fatal ("the simulated clock passes 2^64 ns (584 years): use a "
              "smaller --latency or --client-gap, or a larger --bandwidth");
  return a + b;
}

/* ---- the backend (timed replay) ----------------------------------------- */

static bool
read_before (const struct backend_read *a, const struct backend_read *b)
{
  return a->done < b->done || (a->done == b->done && a->seq < b->seq);
}

static void
heap_push (struct sim *s, const struct backend_read *r)
{
  size_t i;

  if (s->nheap == s->heap_alloc) {
    s->heap_alloc = s->heap_alloc ? 2 * s->heap_alloc : 64;
    s->heap = xrealloc (s->heap, s->heap_alloc * sizeof *s->heap);
  }
  i = s->nheap++;
  while (i > 0 && read_before (r, &s->heap[(i - 1) / 2])) {
    s->heap[i] = s->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->heap[i] = *r;
}

static struct backend_read
heap_pop (struct sim *s)
{
  struct backend_read top = s->heap[0], last = s->heap[--s->nheap];
  size_t i = 0, n = s->nheap;

  for (;;) {
    size_t c = 2 * i + 1;

    if (c >= n)
      break;
    if (c + 1 < n && read_before (&s->heap[c + 1], &s->heap[c]))
      c++;
    if (!read_before (&s->heap[c], &last))
      break;
    s->heap[i] = s->heap[c];
    i = c;
  }
  if (n > 0)
    s->heap[i] = last;
  return top;
}

/* A backend read completed: the model learns its time, and its pages
 * are up to date now.
 */
static void
complete_read (struct sim *s, const struct backend_read *r)
{
  ra_model_sample (&s->model, r->count, r->ns);
  rc_pc_complete (s->pc, r->start, r->count, NULL, 0, 0);
}

/* Move the clock to t (never back), completing the reads done by then. */
static void
set_clock (struct sim *s, uint64_t t)
{
  while (s->nheap > 0 && s->heap[0].done <= t) {
    struct backend_read r = heap_pop (s);
    complete_read (s, &r);
  }
  if (t > s->now)
    s->now = t;
}

/* The client is about to wait for page index, in flight (rc_pc_access's
 * before_wait): the clock moves to its read's completion, which makes
 * it up to date.
 */
static void
wait_for_page (void *arg, ra_pgoff index)
{
  struct sim *s = arg;
  size_t k;

  for (k = 0; k < s->nheap; k++)
    if (index >= s->heap[k].start &&
        index < s->heap[k].start + s->heap[k].count) {
      s->c.stall_ns += s->heap[k].done - s->now;
      set_clock (s, s->heap[k].done);
      return;
    }
  rt_fatal ("internal error: page %" PRIu64 " is in flight but was never "
            "issued (read %" PRIu64 ")", (uint64_t) index, s->cur_read);
}

/* Nanoseconds to move bytes over the link (rounded up). */
static uint64_t
transfer_ns (const struct sim *s, uint64_t bytes)
{
  unsigned __int128 ns = (unsigned __int128) bytes * 1000000000u;

  ns = (ns + s->tm.bandwidth - 1) / s->tm.bandwidth;
  return ns > UINT64_MAX ? UINT64_MAX : (uint64_t) ns;
}

/* Issue a backend read of pages [start, start + count) now, or at
 * not_before if that is later; returns when it completes.
 */
static uint64_t
issue_batch (struct sim *s, ra_pgoff start, ra_pgoff count,
             uint64_t not_before)
{
  uint64_t from = start << s->p.page_shift;
  uint64_t to = (start + count) << s->p.page_shift;
  struct backend_read r;
  uint64_t begin, done;
  unsigned k, slot = 0;

  /* The last page of the export may be partial: read what exists. */
  if (to > s->p.export_size)
    to = s->p.export_size;
  STAT_ADD (&s->st, backend_reads, 1);
  STAT_ADD (&s->st, backend_bytes, to > from ? to - from : 0);
  if (!s->timed) {              /* instant: up to date at once */
    ra_model_sample (&s->model, count, 0);
    rc_pc_complete (s->pc, start, count, NULL, 0, 0);
    return s->now;
  }
  /* The slot free first; the read starts there, at or after now. */
  for (k = 1; k < s->tm.parallel; k++)
    if (s->slot_free[k] < s->slot_free[slot])
      slot = k;
  if (not_before < s->now)
    not_before = s->now;
  begin = s->slot_free[slot] > not_before ? s->slot_free[slot] : not_before;
  done = clock_add (begin, s->tm.latency_ns);
  if (s->tm.bandwidth) {
    if (done < s->link_free)
      done = s->link_free;
    done = clock_add (done, transfer_ns (s, to > from ? to - from : 0));
    s->link_free = done;
  }
  s->slot_free[slot] = done;
  r.done = done;
  r.seq = s->seq++;
  r.ns = done - begin;
  r.start = start;
  r.count = count;
  heap_push (s, &r);
  return done;
}

/* Backend reads issued and not complete (the filter's executing +
 * queued).
 */
static size_t
inflight (const struct sim *s)
{
  return s->nheap;
}

/* ---- replay ------------------------------------------------------------- */

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
  if (s->tm.adaptive)
    printf (" %6s", "cap");
  putchar ('\n');
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

/* The filter's congestion decision (rc_cong_decide, src/congestion.c)
 * with its fixed threshold: ra-trace does not simulate the estimator.
 * An instant backend has nothing in flight.
 */
static enum rc_cong_answer
env_congestion (void *opaque, enum rc_cong_question q,
                const struct rc_cong_load *asked)
{
  struct sim *s = opaque;
  struct rc_cong_load load = *asked;

  if (q == RC_CONG_KEEP && !s->timed)
    return RC_CONG_GO;
  load.executing = (unsigned) inflight (s);
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

/* A trigger's records and its row of the window table; kind is "sync",
 * "async" or "early" (an async trigger made early by the late feedback).
 */
static void
record (struct sim *s, const struct ra_state *ra, const struct rc_trigger *t,
        const char *kind)
{
  char mbuf[24];

  STAT_ADD (&s->st, sync_pages, t->res.sync_pages);
  STAT_ADD (&s->st, async_pages, t->res.async_pages - t->dropped);
  /* The summary counts every decision (the filter's counters only
   * windows that read something).
   */
  if (t->w.size == 0)
    STAT_ADD (&s->st, windows[t->w.branch < RA_NR_BRANCHES ? t->w.branch
                              : RA_NONE], 1);
  if (t->marker)
    s->c.async_triggers++;
  else
    s->c.sync_triggers++;
  if (t->w.size > s->c.largest_window)
    s->c.largest_window = t->w.size;
  if (s->streams && s->cur_stream < s->nstreams) {
    struct stream_info *si = &s->streams[s->cur_stream];

    if (t->w.size > si->largest_window)
      si->largest_window = t->w.size;
    if (ra->ad.cap > si->largest_cap)
      si->largest_cap = ra->ad.cap;
  }
  if (s->quiet)
    return;
  /* The marker column names the page that got the marker: none when the
   * window's marker page was cached already (submit skips it) or its
   * async part was dropped.
   */
  if (t->marker_page == RA_NO_MARKER ||
      !rc_pc_query_ops.cached (s->pc, t->marker_page))
    strcpy (mbuf, "-");
  else
    snprintf (mbuf, sizeof mbuf, "%" PRIu64, (uint64_t) t->marker_page);
  printf (ROW_FMT, s->cur_read, s->cur_stream_id, kind,
          ra_branch_name (t->w.branch),
          (uint64_t) t->w.start, (uint64_t) t->w.size,
          (uint64_t) t->w.async_size, mbuf,
          (uint64_t) (t->res.sync_pages + t->res.async_pages - t->dropped),
          (uint64_t) t->n);
  if (s->extended)
    printf (" %12.3f", (double) s->now / 1e6);
  if (s->tm.adaptive)
    printf (" %6" PRIu64, (uint64_t) ra->ad.cap);
  putchar ('\n');
}

/* A trigger at page index of a read ending at page last (req = last -
 * index): the core's (src/trigger.c), as the filter's.
 */
static void
trigger (struct sim *s, struct ra_state *ra, ra_pgoff index, bool marker,
         ra_pgoff last, struct rc_read *rd)
{
  struct rc_trigger t;
  int ignored;

  rc_trigger_init (&t, ra, rc_pc_owner_of (s->cur_stream), index, marker, last, rd, 1, 0);
  rc_trigger (&s->env, &t, NULL, &ignored);
  record (s, ra, &t, marker ? "async" : "sync");
  rc_trigger_free (&t);
}

/* Adaptive mode: the client waited for page index, which an async part
 * had in flight: the core's rc_trigger_late, as the filter's.
 */
static void
late (struct sim *s, struct ra_state *ra, ra_pgoff index)
{
  struct rc_trigger t;

  rc_trigger_init (&t, ra, rc_pc_owner_of (s->cur_stream), index, false, index + 1, NULL, 1,
                   0);
  if (rc_trigger_late (&s->env, &t, NULL))
    record (s, ra, &t, "early");
  rc_trigger_free (&t);
}

/* The shared read path's ops (src/readpath.c) over the simulation, for
 * one client read (opaque: struct sim; rd->user: the stream state).
 */
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
  /* A wait for a read-ahead page nobody used yet: the late case of
   * adaptive mode.
   */
  *waited = pgr.waited;
  *waited_ahead = pgr.waited_ahead && s->tm.adaptive;
  if (pgr.waited_ahead)
    s->c.ahead_waits++;
  return r;
}

static int
sim_trigger (void *opaque, struct rc_read *rd, ra_pgoff i, bool marker,
             int *err)
{
  (void) err;
  trigger (opaque, rd->user, i, marker, rd->last, rd);
  return 0;
}

static void
sim_late (void *opaque, struct rc_read *rd, ra_pgoff i)
{
  late (opaque, rd->user, i);
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

/* The read path of doc/readahead-rules.md for one client read. */
void
replay_read (struct sim *s, struct ra_state *ra, const struct trace_read *r)
{
  struct rc_read rd;
  int err = 0, slot = -1;

  s->cur_stream_id = r->stream_id;
  s->cur_stream = r->stream;
  if (STAT_GET (&s->st, client_reads) > 0 && s->tm.gap_ns > 0)
    set_clock (s, clock_add (s->now, s->tm.gap_ns));
  STAT_ADD (&s->st, client_reads, 1);
  rc_read_init (&rd, r->offset, r->length, s->p.page_shift);
  rd.user = ra;
  s->again_page = rc_again_page (ra, s->p.page_shift);
  if (s->streams && s->cur_stream < s->nstreams)
    slot = rc_behind_start (&s->streams[s->cur_stream].behind, rd.first);
  rc_read_path (&sim_read_ops, s, &s->st, s->p.page_shift, &rd, &err);
  ra_update_prev_pos (ra, r->offset + r->length);
  /* Drop-behind, as src/cache.c rc_read. */
  if (s->streams && s->cur_stream < s->nstreams) {
    ra_pgoff to, from;

    from = rc_behind_end (&s->streams[s->cur_stream].behind, slot, rd.first,
                          (r->offset + r->length) >> s->p.page_shift,
                          rc_pc_behind_pages (s->pc), &to);
    rc_pc_drop_behind (s->pc, from, to);
  }
}

/* ---- output ------------------------------------------------------------- */

static void
print_kv (const char *key, uint64_t v)
{
  printf ("%-28s %" PRIu64 "\n", key, v);
}

static void
print_kv_pct (const char *key, uint64_t v, uint64_t of, const char *what)
{
  if (of)
    printf ("%-28s %" PRIu64 " (%.1f%% of %s)\n", key, v,
            100.0 * (double) v / (double) of, what);
  else
    print_kv (key, v);
}

static void
print_time_kv (const char *key, uint64_t ns)
{
  printf ("%-28s %.6f s\n", key, (double) ns / 1e9);
}

/* The timing and adaptive lines of the summary. */
void
print_timing (const struct sim *s, const struct ra_state *states,
              const uint64_t *stream_ids)
{
  const struct counters *c = &s->c;
  double lat, page;
  size_t i;

  print_time_kv ("simulated time:", s->now);
  if (s->now > 0) {
    double bps = (double) STAT_GET (&s->st, client_bytes) * 1e9
      / (double) s->now;
    printf ("%-28s %.0f bytes/s (%.2f MB/s)\n", "client throughput:", bps,
            bps / 1e6);
  }
  else
    printf ("%-28s -\n", "client throughput:");
  if (s->now > 0)
    printf ("%-28s %.6f s (%.1f%% of simulated time)\n", "stall time:",
            (double) c->stall_ns / 1e9,
            100.0 * (double) c->stall_ns / (double) s->now);
  else
    print_time_kv ("stall time:", c->stall_ns);
  print_kv ("page waits:", STAT_GET (&s->st, page_waits));
  print_kv ("page waits on read ahead:", c->ahead_waits);
  print_kv ("congestion skips:", STAT_GET (&s->st, async_skipped));
  print_kv ("pages skipped:", STAT_GET (&s->st, async_skipped_pages));
  if (ra_model_estimate (&s->model, &lat, &page)) {
    printf ("%-28s %.0f ns (%.3f ms)\n", "model latency:", lat, lat / 1e6);
    printf ("%-28s %.1f ns\n", "model cost per page:", page);
  }
  else {
    printf ("%-28s -\n", "model latency:");
    printf ("%-28s -\n", "model cost per page:");
  }
  print_kv ("largest window:", c->largest_window);
  if (!s->tm.adaptive)
    return;
  print_kv ("late events:", STAT_GET (&s->st, adapt_late));
  print_kv ("early triggers:", STAT_GET (&s->st, adapt_early_triggers));
  for (i = 0; i < s->nstreams; i++) {
    char key[48];

    snprintf (key, sizeof key, "stream %" PRIu64 " cap:", stream_ids[i]);
    printf ("%-28s %" PRIu64 " (largest %" PRIu64 ", largest window %"
            PRIu64 ", late %" PRIu64 ", waste %" PRIu64 ")\n", key,
            (uint64_t) states[i].ad.cap, (uint64_t) s->streams[i].largest_cap,
            (uint64_t) s->streams[i].largest_window,
            states[i].ad.late_events, states[i].ad.waste_events);
  }
}

void
print_summary (const struct sim *s, size_t nstreams)
{
  /* Every branch a trace can produce (no NBD_CMD_CACHE: no "forced"). */
  static const enum ra_branch order[] = {
    RA_A_INITIAL, RA_B_SEQUENTIAL, RA_C_INTERLEAVED, RA_D_OVERSIZE,
    RA_E_SEQ_MISS, RA_F_CONTEXT, RA_G_RANDOM, RA_N_NEAR, RA_OFF, RA_NONE
  };
  const struct counters *c = &s->c;
  uint64_t hits = STAT_GET (&s->st, page_hits);
  uint64_t misses = STAT_GET (&s->st, page_misses);
  uint64_t client_bytes = STAT_GET (&s->st, client_bytes);
  uint64_t ra_unused_end, sync_unused_end, nwin = 0;
  struct rc_pc_counts pcc;
  int k;

  rc_pc_counts (s->pc, &pcc);
  ra_unused_end = pcc.unused_ahead;
  sync_unused_end = pcc.unused - pcc.unused_ahead;
  for (k = 0; k < RA_NR_BRANCHES; k++)
    nwin += STAT_GET (&s->st, windows[k]);

  printf ("# summary\n");

  print_kv ("reads:", STAT_GET (&s->st, client_reads));
  print_kv ("streams:", nstreams);
  print_kv ("client bytes:", client_bytes);
  print_kv_pct ("page hits:", hits, hits + misses, "pages read");
  print_kv_pct ("page misses:", misses, hits + misses, "pages read");
  print_kv ("sync triggers:", c->sync_triggers);
  print_kv ("async triggers:", c->async_triggers);
  print_kv ("windows:", nwin);
  for (k = 0; k < (int) (sizeof order / sizeof order[0]); k++) {
    char key[32];

    snprintf (key, sizeof key, "windows %s:", ra_branch_name (order[k]));
    print_kv (key, STAT_GET (&s->st, windows[order[k]]));
  }
  print_kv ("pages inserted:", STAT_GET (&s->st, sync_pages) + STAT_GET (&s->st, async_pages));
  print_kv ("sync part pages:", STAT_GET (&s->st, sync_pages));
  print_kv ("pages read ahead:", STAT_GET (&s->st, async_pages));
  print_kv_pct ("read ahead never used:",
                STAT_GET (&s->st, ahead_wasted_pages) + ra_unused_end, STAT_GET (&s->st, async_pages),
                "read ahead");
  print_kv ("read ahead evicted unused:", STAT_GET (&s->st, ahead_wasted_pages));
  print_kv ("read ahead unused at end:", ra_unused_end);
  print_kv ("sync part unused at end:", sync_unused_end);
  print_kv ("pages evicted:", STAT_GET (&s->st, evictions));
  print_kv ("backend requests:", STAT_GET (&s->st, backend_reads));
  print_kv ("backend bytes:", STAT_GET (&s->st, backend_bytes));
  if (client_bytes)
    printf ("%-28s %.3f\n", "amplification:",
            (double) STAT_GET (&s->st, backend_bytes) / (double) client_bytes);
  else
    printf ("%-28s -\n", "amplification:");
}


void
sim_free (struct sim *s)
{
  rc_pc_free (s->pc);
  rc_trigger_env_destroy (&s->env);
  free (s->slot_free);
  free (s->heap);
  free (s->streams);
}
