/* ra-trace: the simulation (src/trace-sim.h).
 *
 * The simulation follows the read path of readahead-spec.md: for each
 * page of a read, from its first: a page that is not cached is a sync
 * trigger (ondemand (i, false, last - i)); a page that carries the
 * marker has it cleared and is an async trigger (ondemand (i, true,
 * last - i)); each window is submitted with ra_submit; prev_pos is set
 * with ra_update_prev_pos when the read is done.  Pages are up to date as
 * soon as they are inserted (there is no backend latency, and so no
 * congestion).  Each stream has its own stream state; the cache (and so
 * the markers) is shared by all of them, as in the filter, where the
 * state is per NBD connection.
 *
 * The cache holds at most --cache-size bytes of pages.  Eviction is the
 * filter's rule (src/pagecache.c, evict_one): least recently used first,
 * with pages nobody has read yet ("unused": read ahead, not yet used by
 * a client) going before pages a client used by ageing twice as fast.  A
 * plain "unused first at any age" rule would evict the window a
 * streaming reader is about to consume as soon as the cache is full.
 * The pages of the read in progress are never evicted (in the filter
 * they are in flight or being copied): a read larger than the cache
 * overfills it until the read is done.
 *
 * Timing (--latency, --bandwidth, --parallel, --client-gap) and adaptive
 * mode (--mode adaptive): a discrete-event simulation over a virtual
 * clock (ns).  There is one client timeline: the reads are replayed one
 * after another in trace order, whatever their stream, --client-gap
 * apart.  Each backend read (a batch of ra_submit) is issued at the
 * clock of its trigger and computed at once, first come first served:
 * it starts when one of --parallel slots is free (at or after its issue),
 * its transfer starts after the latency and once the link is free (one
 * link, transfers serialized on it), and it completes after its bytes /
 * bandwidth; its pages are ready then.  A client that needs a page not
 * ready yet waits: the clock moves to its completion.  Reads complete in
 * order of their completion time as the clock passes them: the backend
 * model (ra_model_sample, start to completion) learns from them and
 * their pages join the LRU lists (pages in flight cannot be evicted, as
 * in the filter).  The congestion rule of the filter (ra-congestion=skip)
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

static void *
xrealloc (void *p, size_t n)
{
  p = realloc (p, n);
  if (!p)
    rt_fatal ("out of memory");
  return p;
}

/* ---- the simulated page cache ------------------------------------------ */

static size_t
bucket_of (const struct sim *s, ra_pgoff index)
{
  return (size_t) ((index * UINT64_C (0x9E3779B97F4A7C15)) >> s->bucket_shift);
}

static void
lru_init (struct page *head)
{
  head->lprev = head->lnext = head;
}

static void
lru_unlink (struct page *pg)
{
  if (!pg->lprev)               /* in flight: on no list */
    return;
  pg->lprev->lnext = pg->lnext;
  pg->lnext->lprev = pg->lprev;
  pg->lprev = pg->lnext = NULL;
}

static void
lru_push (struct page *head, struct page *pg)
{
  pg->lnext = head->lnext;
  pg->lprev = head;
  head->lnext->lprev = pg;
  head->lnext = pg;
}

static struct page *
lru_oldest (struct page *head)
{
  return head->lprev == head ? NULL : head->lprev;
}

static void
hash_resize (struct sim *s, size_t nbuckets)
{
  struct page **old = s->buckets;
  size_t oldn = s->nbuckets, i;
  unsigned bits = 0;

  while (((size_t) 1 << bits) < nbuckets)
    bits++;
  s->nbuckets = (size_t) 1 << bits;
  s->bucket_shift = 64 - bits;
  s->buckets = calloc (s->nbuckets, sizeof *s->buckets);
  if (!s->buckets)
    rt_fatal ("out of memory");
  for (i = 0; i < oldn; i++) {
    struct page *pg = old[i];
    while (pg) {
      struct page *next = pg->hnext;
      size_t b = bucket_of (s, pg->index);
      pg->hnext = s->buckets[b];
      s->buckets[b] = pg;
      pg = next;
    }
  }
  free (old);
}

/* The engine parameters p are the filter's, from the configuration cfg
 * (rc_engine_params: adapt_min 128K, self_max = threshold - 1 reads of
 * io_max, parallel = ra-max-background).
 */
void
sim_init (struct sim *s, const struct rc_config *cfg,
          const struct ra_params *p, bool quiet)
{
  memset (s, 0, sizeof *s);
  s->cfg = *cfg;
  s->p = *p;
  s->page_size = UINT64_C (1) << p->page_shift;
  s->capacity = cfg->cache_size >> p->page_shift;
  s->quiet = quiet;
  s->congestion_threshold = cfg->congestion_threshold;
  lru_init (&s->unused);
  lru_init (&s->used);
  hash_resize (s, 1024);
  ra_model_init (&s->model);
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
}

/* a + b of the clock; the simulation stops rather than wrap. */
static uint64_t
clock_add (uint64_t a, uint64_t b)
{
  if (a > UINT64_MAX - b)
    rt_fatal ("the simulated clock passes 2^64 ns (584 years): use a smaller "
         "--latency or --client-gap, or a larger --bandwidth");
  return a + b;
}

static struct page *
lookup (const struct sim *s, ra_pgoff index)
{
  struct page *pg;

  for (pg = s->buckets[bucket_of (s, index)]; pg; pg = pg->hnext)
    if (pg->index == index)
      return pg;
  return NULL;
}

static bool
pinned (const struct sim *s, const struct page *pg)
{
  return pg->index >= s->pin_lo && pg->index < s->pin_hi;
}

static void
remove_page (struct sim *s, struct page *pg)
{
  struct page **pp = &s->buckets[bucket_of (s, pg->index)];

  while (*pp != pg)
    pp = &(*pp)->hnext;
  *pp = pg->hnext;
  lru_unlink (pg);
  if (pg->marker)
    s->markers--;
  s->count--;
  pg->hnext = s->free_pages;
  s->free_pages = pg;
}

/* Evict one page by the filter's rule: the oldest unused page if it has
 * waited at least half as long as the oldest used page, else the oldest
 * used page; never a page of the read in progress, nor one in flight
 * (those are on no list).  Returns false if nothing can be evicted.
 */
static bool
evict_one (struct sim *s)
{
  struct page *unused = lru_oldest (&s->unused);
  struct page *used = lru_oldest (&s->used);
  struct page *victim, *other;

  if (unused &&
      (!used || 2 * (s->tick - unused->stamp) >= s->tick - used->stamp)) {
    victim = unused;
    other = used;
  }
  else {
    victim = used;
    other = unused;
  }
  if (victim && pinned (s, victim))
    victim = other;
  if (!victim || pinned (s, victim))
    return false;
  if (!victim->used) {
    if (victim->async) {
      STAT_ADD (&s->st, ahead_wasted, 1);
      if (s->streams && victim->owner < s->nstreams)
        s->streams[victim->owner].wasted++;
    }
    else
      s->c.sync_evicted_unused++;
  }
  STAT_ADD (&s->st, evictions, 1);
  remove_page (s, victim);
  return true;
}

/* The engine's query interface. */
static bool
q_cached (void *opaque, ra_pgoff index)
{
  return lookup (opaque, index) != NULL;
}

static const struct ra_cache_ops cache_ops = { .cached = q_cached };

/* ra_submit's callbacks. */
static bool
sub_insert (void *opaque, ra_pgoff index, bool marker, bool async)
{
  struct sim *s = opaque;
  struct page *pg;
  size_t b;

  if (lookup (s, index))
    return false;
  while (s->count >= s->capacity && evict_one (s))
    ;
  if ((pg = s->free_pages) != NULL)
    s->free_pages = pg->hnext;
  else {
    pg = malloc (sizeof *pg);
    if (!pg)
      rt_fatal ("out of memory");
  }
  pg->index = index;
  pg->marker = marker;
  pg->used = false;
  pg->async = async;
  pg->owner = s->cur_stream;
  b = bucket_of (s, index);
  pg->hnext = s->buckets[b];
  s->buckets[b] = pg;
  if (s->timed) {
    /* In flight until its read completes (issue_batch sets the time):
     * on no list, so not evictable, as in the filter.
     */
    pg->ready = UINT64_MAX;
    pg->stamp = 0;
    pg->lprev = pg->lnext = NULL;
  }
  else {
    pg->ready = s->now;
    pg->stamp = ++s->tick;
    lru_push (&s->unused, pg);
  }
  if (marker) {
    s->markers++;
    s->window_marker = index;
  }
  s->count++;
  if (s->count > s->nbuckets)
    hash_resize (s, 2 * s->nbuckets);
  if (async)
    STAT_ADD (&s->st, async_pages, 1);
  else
    STAT_ADD (&s->st, sync_pages, 1);
  return true;
}

/* A batch is kept until the window is submitted: the congestion rule may
 * drop the async ones, then issue_batch issues the others.
 */
static void
sub_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  struct sim *s = opaque;

  if (s->nbatches == s->batches_alloc) {
    s->batches_alloc = s->batches_alloc ? 2 * s->batches_alloc : 64;
    s->batches = xrealloc (s->batches,
                           s->batches_alloc * sizeof *s->batches);
  }
  s->batches[s->nbatches].start = start;
  s->batches[s->nbatches].count = count;
  s->batches[s->nbatches].async = async;
  s->nbatches++;
}

static const struct ra_submit_ops submit_ops = {
  .insert = sub_insert, .batch = sub_batch
};

/* A client read copies page pg: it becomes used and most recent. */
static void
use_page (struct sim *s, struct page *pg)
{
  lru_unlink (pg);
  pg->used = true;
  pg->stamp = ++s->tick;
  lru_push (&s->used, pg);
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
 * (up to date now) join the unused list.
 */
static void
complete_read (struct sim *s, const struct backend_read *r)
{
  ra_pgoff i;

  ra_model_sample (&s->model, r->count, r->ns);
  for (i = r->start; i < r->start + r->count; i++) {
    struct page *pg = lookup (s, i);

    if (pg && !pg->lprev && pg->ready == r->done) {
      pg->stamp = ++s->tick;
      lru_push (&s->unused, pg);
    }
  }
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

/* Nanoseconds to move bytes over the link (rounded up). */
static uint64_t
transfer_ns (const struct sim *s, uint64_t bytes)
{
  unsigned __int128 ns = (unsigned __int128) bytes * 1000000000u;

  ns = (ns + s->tm.bandwidth - 1) / s->tm.bandwidth;
  return ns > UINT64_MAX ? UINT64_MAX : (uint64_t) ns;
}

/* Issue a backend read of pages [start, start + count) now. */
static void
issue_batch (struct sim *s, ra_pgoff start, ra_pgoff count)
{
  uint64_t from = start << s->p.page_shift;
  uint64_t to = (start + count) << s->p.page_shift;
  struct backend_read r;
  uint64_t begin, done;
  unsigned k, slot = 0;
  ra_pgoff i;

  /* The last page of the export may be partial: read what exists. */
  if (to > s->p.export_size)
    to = s->p.export_size;
  STAT_ADD (&s->st, backend_reads, 1);
  STAT_ADD (&s->st, backend_bytes, to > from ? to - from : 0);
  if (!s->timed) {              /* instant: up to date already */
    ra_model_sample (&s->model, count, 0);
    return;
  }
  /* The slot free first; the read starts there, at or after now. */
  for (k = 1; k < s->tm.parallel; k++)
    if (s->slot_free[k] < s->slot_free[slot])
      slot = k;
  begin = s->slot_free[slot] > s->now ? s->slot_free[slot] : s->now;
  done = clock_add (begin, s->tm.latency_ns);
  if (s->tm.bandwidth) {
    if (done < s->link_free)
      done = s->link_free;
    done = clock_add (done, transfer_ns (s, to > from ? to - from : 0));
    s->link_free = done;
  }
  s->slot_free[slot] = done;
  for (i = start; i < start + count; i++) {
    struct page *pg = lookup (s, i);
    if (pg && pg->ready == UINT64_MAX)
      pg->ready = done;
  }
  r.done = done;
  r.seq = s->seq++;
  r.ns = done - begin;
  r.start = start;
  r.count = count;
  heap_push (s, &r);
}

/* Backend reads issued and not complete (the filter's executing +
 * queued).
 */
static size_t
inflight (const struct sim *s)
{
  return s->nheap;
}

/* The congestion rule dropped a batch: remove its new pages. */
static ra_pgoff
drop_pages (void *opaque, ra_pgoff start, ra_pgoff count)
{
  struct sim *s = opaque;
  ra_pgoff i, n = 0;

  for (i = start; i < start + count; i++) {
    struct page *pg = lookup (s, i);

    if (pg && !pg->used && pg->ready == UINT64_MAX) {
      remove_page (s, pg);
      STAT_SUB (&s->st, async_pages, 1);
      n++;
    }
  }
  return n;
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

/* What adaptive mode measures, as src/cache.c adaptive_inputs. */
static void
adaptive_inputs (struct sim *s, struct ra_inputs *in)
{
  in->now_ns = s->now;
  if (!ra_model_estimate (&s->model, &in->lat_ns, &in->page_ns))
    in->lat_ns = -1;
  in->share = ra_fair_share (s->capacity, s->markers);
  in->wasted = 0;
  if (s->streams && s->cur_stream < s->nstreams) {
    in->wasted = s->streams[s->cur_stream].wasted;
    s->streams[s->cur_stream].wasted = 0;
  }
}

/* A trigger at page index of a read ending at page last (req = last -
 * index); kind is "sync", "async" or "early" (an async trigger made early
 * by the late feedback).
 */
static void
trigger (struct sim *s, struct ra_state *ra, ra_pgoff index, bool marker,
         ra_pgoff last, const struct rc_read *rd, const char *kind)
{
  struct ra_window w;
  struct ra_submit_result res = { 0, 0, 0 };
  ra_pgoff dropped = 0;
  uint64_t issued;
  char mbuf[24];
  unsigned b;

  struct ra_inputs in;
  struct rc_congestion cg;

  if (s->tm.adaptive)
    adaptive_inputs (s, &in);
  rc_read_decide (ra, &s->p, &cache_ops, s, rd, index, marker, last,
                  s->tm.adaptive ? &in : NULL, &w);
  s->nbatches = 0;
  s->window_marker = RA_NO_MARKER;
  if (w.size > 0)
    ra_submit (&w, s->p.io_max, &submit_ops, s, &res);
  /* The filter's congestion rule (src/readpath.c): only speculation
   * past the request is dropped.  (An instant backend has nothing in
   * flight.)
   */
  cg.policy = s->cfg.congestion;
  cg.inflight = (unsigned) inflight (s);
  cg.threshold = s->congestion_threshold;
  if (s->timed && res.async_pages > 0 && !rc_keep_async (&cg)) {
    dropped = rc_drop_async_batches (ra, &w, last, s->batches, &s->nbatches,
                                     drop_pages, s);
    if (dropped > 0) {
      STAT_ADD (&s->st, async_skipped, 1);
      STAT_ADD (&s->st, async_skipped_pages, dropped);
    }
  }
  issued = s->nbatches;
  for (b = 0; b < s->nbatches; b++)
    issue_batch (s, s->batches[b].start, s->batches[b].count);
  s->nbatches = 0;

  if (marker)
    s->c.async_triggers++;
  else
    s->c.sync_triggers++;
  STAT_ADD (&s->st, windows[w.branch < RA_NR_BRANCHES ? w.branch : RA_NONE], 1);
  if (w.size > s->c.largest_window)
    s->c.largest_window = w.size;
  if (s->streams && s->cur_stream < s->nstreams) {
    struct stream_info *si = &s->streams[s->cur_stream];

    if (w.size > si->largest_window)
      si->largest_window = w.size;
    if (ra->ad.cap > si->largest_cap)
      si->largest_cap = ra->ad.cap;
  }
  if (s->quiet)
    return;
  /* The marker column names the page that got the marker: none when the
   * window's marker page was cached already (submit skips it) or its
   * async part was dropped.
   */
  if (s->window_marker == RA_NO_MARKER || !lookup (s, s->window_marker))
    strcpy (mbuf, "-");
  else
    snprintf (mbuf, sizeof mbuf, "%" PRIu64, (uint64_t) s->window_marker);
  printf (ROW_FMT, s->cur_read, s->cur_stream_id, kind,
          ra_branch_name (w.branch),
          (uint64_t) w.start, (uint64_t) w.size, (uint64_t) w.async_size,
          mbuf, (uint64_t) (res.sync_pages + res.async_pages - dropped),
          issued);
  if (s->extended)
    printf (" %12.3f", (double) s->now / 1e6);
  if (s->tm.adaptive)
    printf (" %6" PRIu64, (uint64_t) ra->ad.cap);
  putchar ('\n');
}

/* Adaptive mode: the client waited for page index, which an async part
 * had in flight (src/cache.c late()): the engine counts it and may name
 * the stream's next marker, which is taken now for an early async
 * trigger, unless that window's reads would reach the congestion
 * threshold.
 */
static void
late (struct sim *s, struct ra_state *ra, ra_pgoff index)
{
  ra_pgoff m = ra_late (ra, &s->p, index);
  uint64_t reads = (ra->ad.cap + s->p.io_max - 1) / s->p.io_max;
  struct page *pg;

  STAT_ADD (&s->st, adapt_late, 1);
  if (m == RA_NO_MARKER ||
      !rc_early_trigger_ok ((unsigned) inflight (s), (unsigned) reads,
                            s->congestion_threshold))
    return;
  pg = lookup (s, m);
  if (!pg || !pg->marker)
    return;
  pg->marker = false;
  s->markers--;
  STAT_ADD (&s->st, adapt_early, 1);
  trigger (s, ra, m, true, m + 1, NULL, "early");
}

/* The shared read path's ops (src/readpath.c) over the simulation, for
 * one client read (opaque: struct sim; rd->user: the stream state).
 */
static enum rc_access
sim_access (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, bool *waited, bool *waited_ahead)
{
  struct sim *s = opaque;
  struct page *pg;

  (void) rd; (void) from; (void) to;
  *waited = *waited_ahead = false;
  s->pin_lo = i;
  pg = lookup (s, i);
  if (!pg)
    return RC_ACCESS_ABSENT;
  if (pg->marker) {
    pg->marker = false;
    s->markers--;
    return RC_ACCESS_MARKER;
  }
  if (pg->ready > s->now) {
    /* In flight: wait for it.  A read-ahead page nobody used yet is
     * the late case of adaptive mode.
     */
    bool ahead = pg->async && !pg->used;

    if (pg->ready == UINT64_MAX)
      rt_fatal ("internal error: page %" PRIu64 " was never issued (read %"
           PRIu64 ")", (uint64_t) i, s->cur_read);
    *waited = true;
    *waited_ahead = ahead && s->tm.adaptive;
    if (ahead)
      s->c.ahead_waits++;
    s->c.stall_ns += pg->ready - s->now;
    set_clock (s, pg->ready);
  }
  use_page (s, pg);
  return RC_ACCESS_COPIED;
}

static int
sim_trigger (void *opaque, struct rc_read *rd, ra_pgoff i, bool marker,
             int *err)
{
  (void) err;
  trigger (opaque, rd->user, i, marker, rd->last, rd,
           marker ? "async" : "sync");
  return 0;
}

static bool
sim_cached (void *opaque, ra_pgoff i)
{
  return lookup (opaque, i) != NULL;
}

static void
sim_late (void *opaque, struct rc_read *rd, ra_pgoff i)
{
  late (opaque, rd->user, i);
}

/* The engine failed to read a page it needed, again and again. */
static int
sim_direct (void *opaque, struct rc_read *rd, ra_pgoff i, uint64_t from,
            uint64_t to, int *err)
{
  struct sim *s = opaque;

  (void) rd; (void) from; (void) to; (void) err;
  rt_fatal ("internal error: page %" PRIu64 " is not cached after a sync "
       "trigger (read %" PRIu64 "; engine bug?)", (uint64_t) i, s->cur_read);
}

static const struct rc_read_ops sim_read_ops = {
  .access = sim_access,
  .trigger = sim_trigger,
  .cached = sim_cached,
  .late = sim_late,
  .direct = sim_direct,
};

/* The read path of the spec for one client read. */
void
replay_read (struct sim *s, struct ra_state *ra, const struct trace_read *r)
{
  struct rc_read rd;
  int err = 0;

  s->cur_stream_id = r->stream_id;
  s->cur_stream = r->stream;
  if (STAT_GET (&s->st, client_reads) > 0 && s->tm.gap_ns > 0)
    set_clock (s, clock_add (s->now, s->tm.gap_ns));
  STAT_ADD (&s->st, client_reads, 1);
  rc_read_init (&rd, r->offset, r->length, s->p.page_shift);
  rd.user = ra;
  s->pin_hi = rd.last;
  rc_read_path (&sim_read_ops, s, &s->st, s->p.page_shift, &rd, &err);
  ra_update_prev_pos (ra, r->offset + r->length);
  s->pin_lo = s->pin_hi = 0;
  while (s->count > s->capacity && evict_one (s))
    ;
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
  print_kv ("early triggers:", STAT_GET (&s->st, adapt_early));
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
    RA_E_SEQ_MISS, RA_F_CONTEXT, RA_G_RANDOM, RA_OFF, RA_NONE
  };
  const struct counters *c = &s->c;
  uint64_t ra_unused_end = 0, sync_unused_end = 0, nwin = 0;
  size_t b;
  int k;

  for (b = 0; b < s->nbuckets; b++) {
    const struct page *pg;
    for (pg = s->buckets[b]; pg; pg = pg->hnext)
      if (!pg->used) {
        if (pg->async)
          ra_unused_end++;
        else
          sync_unused_end++;
      }
  }
  for (k = 0; k < RA_NR_BRANCHES; k++)
    nwin += STAT_GET (&s->st, windows[k]);

  printf ("# summary\n");
  uint64_t hits = STAT_GET (&s->st, page_hits);
  uint64_t misses = STAT_GET (&s->st, page_misses);
  uint64_t client_bytes = STAT_GET (&s->st, client_bytes);

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
                STAT_GET (&s->st, ahead_wasted) + ra_unused_end, STAT_GET (&s->st, async_pages),
                "read ahead");
  print_kv ("read ahead evicted unused:", STAT_GET (&s->st, ahead_wasted));
  print_kv ("read ahead unused at end:", ra_unused_end);
  print_kv ("sync part never used:", c->sync_evicted_unused + sync_unused_end);
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
  size_t b;

  for (b = 0; b < s->nbuckets; b++) {
    struct page *pg = s->buckets[b];
    while (pg) {
      struct page *next = pg->hnext;
      free (pg);
      pg = next;
    }
  }
  while (s->free_pages) {
    struct page *next = s->free_pages->hnext;
    free (s->free_pages);
    s->free_pages = next;
  }
  free (s->buckets);
  free (s->slot_free);
  free (s->heap);
  free (s->batches);
  free (s->streams);
}
