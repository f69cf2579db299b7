/* ra-cache: the read path (doc/readahead-rules.md) over the shared page cache.
 *
 * The page walk (sync trigger, async trigger, wait, copy) is
 * rc_read_path (src/readpath.c, shared with ra-trace and the unit
 * tests); here are its ops over the shared page cache and the backend:
 * a trigger decides a window (rc_read_decide), submit inserts its new
 * pages in flight, and this thread reads the sync part while the async
 * part goes to the background workers.  At the end prev_pos is the
 * byte after the read.
 *
 * The stream state is per connection and guarded by the stream's lock,
 * which is held while the engine decides and submit inserts pages (lock
 * order: stream lock, then page cache shard locks), never while reading
 * from the backend or waiting for pages.
 *
 * Congestion (the decision is rc_cong_decide, src/congestion.c; with
 * ra-congestion=skip, the default): when a window is submitted while
 * the backend reads running and queued are at or above the congestion
 * threshold, only the sync part is read.  The async
 * part's new pages are removed from the cache again and ra_drop_async
 * shrinks the stream state by them, so the next access misses at start
 * + size and branch B continues the stream.  A queued async part is
 * started by the workers when the decision lets it: in adaptive mode
 * while the backend slots the estimator measured leave one free for a
 * sync read; in kernel mode with ra-congestion=wait once fewer than the
 * threshold of reads are running (src/jobq.c).  In adaptive mode a
 * client whose own reads in flight cover the backend's bandwidth-delay
 * product gets no window beyond its request at all (trigger).  Either way, a
 * client that needs a page whose async read is still queued promotes
 * that read among the sync jobs: it never waits behind speculation, and
 * the read is issued once.
 */

#include <config.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cache-internal.h"
#include "racache/readpath.h"
#include "racache/util.h"

struct rc_cache *
rc_cache_new (const struct rc_config *cfg, const struct rc_backend *be,
              unsigned nworkers)
{
  struct rc_cache *c = calloc (1, sizeof *c);

  if (!c)
    return NULL;
  c->cfg = *cfg;
  c->be = *be;
  c->pc = rc_pc_new (cfg->cache_size, (uint32_t) cfg->page_size, &c->stats);
  if (!c->pc) {
    free (c);
    errno = ENOMEM;
    return NULL;
  }
  rc_engine_params (cfg, nworkers, &c->params);
  ra_model_init (&c->model);
  pthread_mutex_init (&c->model_lock, NULL);
  rc_cong_init (&c->cong, cfg->congestion_threshold,
                cfg->mode == RA_MODE_ADAPTIVE,
                cfg->congestion == RC_CONGESTION_WAIT);
  pthread_mutex_init (&c->cong_lock, NULL);
  pthread_mutex_init (&c->size_lock, NULL);
  pthread_mutex_init (&c->bounce_lock, NULL);
  rc_jobq_init (&c->q);
  if (rc_workers_start (c, nworkers ? nworkers : 1) == -1) {
    int e = errno;
    rc_pc_free (c->pc);
    free (c);
    errno = e;
    return NULL;
  }
  return c;
}

void
rc_cache_stop (struct rc_cache *c)
{
  rc_workers_stop (c);
}

void
rc_cache_free (struct rc_cache *c)
{
  if (!c)
    return;
  rc_workers_stop (c);
  rc_workers_join (c);
  rc_pc_free (c->pc);
  rc_bounce_free_all (c);
  pthread_mutex_destroy (&c->bounce_lock);
  pthread_mutex_destroy (&c->size_lock);
  pthread_mutex_destroy (&c->model_lock);
  pthread_mutex_destroy (&c->cong_lock);
  rc_jobq_destroy (&c->q);
  free (c);
}

int
rc_cache_set_export_size (struct rc_cache *c, uint64_t size)
{
  LOCK_FOR_SCOPE (&c->size_lock);

  if (!c->size_set) {
    c->params.export_size = size;
    rc_pc_set_nr_pages (c->pc, ra_nr_pages (&c->params));
    c->size_set = true;
    return 0;
  }
  return c->params.export_size == size ? 0 : -1;
}

void
rc_cache_set_backend_limits (struct rc_cache *c, uint32_t minimum,
                             uint32_t preferred, uint32_t maximum)
{
  uint64_t page = c->cfg.page_size, io = c->cfg.io_max;

  LOCK_FOR_SCOPE (&c->size_lock);
  if (c->limits_set)
    return;
  c->limits_set = true;
  if (maximum && maximum < io)
    io = maximum;
  /* Whole multiples of the preferred and minimum sizes where they fit. */
  if (preferred > page && io >= preferred)
    io -= io % preferred;
  if (minimum > page && io >= minimum)
    io -= io % minimum;
  io -= io % page;
  if (io < page)
    io = page;
  rc_engine_params_io_max (&c->cfg, &c->params, io >> c->params.page_shift);
}

struct rc_stats *
rc_cache_stats (struct rc_cache *c)
{
  return &c->stats;
}

struct rc_pagecache *
rc_cache_pagecache (struct rc_cache *c)
{
  return c->pc;
}

unsigned
rc_cache_inflight (struct rc_cache *c)
{
  return atomic_load (&c->executing) + atomic_load (&c->q.queued);
}

bool
rc_cache_model (struct rc_cache *c, double *lat_ns, double *page_ns)
{
  LOCK_FOR_SCOPE (&c->model_lock);
  return ra_model_estimate (&c->model, lat_ns, page_ns);
}

const struct rc_config *
rc_cache_config (struct rc_cache *c)
{
  return &c->cfg;
}

struct rc_stream *
rc_stream_new (void)
{
  static _Atomic unsigned next_owner;
  struct rc_stream *s = malloc (sizeof *s);

  if (!s)
    return NULL;
  pthread_mutex_init (&s->lock, NULL);
  ra_state_init (&s->ra);
  rc_behind_init (&s->behind);
  s->bytes_reading = s->depth_bytes = 0;
  s->nreading = s->depth_reads16 = 0;
  /* Owners 1 .. RC_PC_OWNERS - 1, reused after that many streams: a
   * reused number may hand a new stream an old one's waste once.
   */
  s->owner = atomic_fetch_add (&next_owner, 1) % (RC_PC_OWNERS - 1) + 1;
  return s;
}

void
rc_stream_free (struct rc_stream *s)
{
  if (!s)
    return;
  pthread_mutex_destroy (&s->lock);
  free (s);
}

/* The batches one submitted window produced: a list that starts on the
 * stack and grows on the heap for windows of many backend reads (a large
 * ra-max over a small ra-io-max).
 */
#define INLINE_BATCHES 64
struct batches {
  struct rc_cache *c;
  bool forced;                  /* NBD_CMD_CACHE */
  bool random;                  /* a window of branch G */
  bool near;                    /* a window of branch N */
  unsigned owner;               /* the stream's, 0 for forced */
  unsigned n, cap;
  bool overflow;                /* could not grow: stop inserting */
  struct rc_batch *b;
  struct rc_batch inline_b[INLINE_BATCHES];
};

static void
batches_init (struct batches *bs, struct rc_cache *c, bool forced)
{
  bs->c = c;
  bs->forced = forced;
  bs->random = false;
  bs->near = false;
  bs->owner = 0;
  bs->n = 0;
  bs->cap = INLINE_BATCHES;
  bs->overflow = false;
  bs->b = bs->inline_b;
}

static void
batches_free (struct batches *bs)
{
  if (bs->b != bs->inline_b)
    free (bs->b);
}

static bool
submit_insert (void *opaque, ra_pgoff index, bool marker, bool async)
{
  struct batches *bs = opaque;

  /* Once the list cannot grow, the rest of the window stays absent and
   * is read on demand.  One slot is always kept for the run being built.
   */
  if (bs->overflow)
    return false;
  return rc_pc_insert (bs->c->pc, index, marker,
                       bs->forced ? RC_INSERT_FORCED
                       : async ? (bs->near ? RC_INSERT_NEAR : RC_INSERT_AHEAD)
                       : bs->random ? RC_INSERT_RANDOM : RC_INSERT_SYNC,
                       bs->owner);
}

static void
submit_batch (void *opaque, ra_pgoff start, ra_pgoff count, bool async)
{
  struct batches *bs = opaque;

  bs->b[bs->n].start = start;
  bs->b[bs->n].count = count;
  bs->b[bs->n].async = async;
  bs->n++;
  /* Keep a free slot for the run that is being built. */
  if (bs->n + 1 >= bs->cap) {
    unsigned ncap = bs->cap * 2;
    struct rc_batch *nb = malloc (ncap * sizeof *nb);

    if (nb) {
      memcpy (nb, bs->b, bs->n * sizeof *nb);
      batches_free (bs);
      bs->b = nb;
      bs->cap = ncap;
    }
    else
      bs->overflow = true;
  }
}

static const struct ra_submit_ops submit_ops = {
  .insert = submit_insert,
  .batch = submit_batch,
};

static ra_pgoff
abandon_pages (void *opaque, ra_pgoff start, ra_pgoff count)
{
  return rc_pc_abandon (opaque, start, count);
}

/* Submit window w (the stream lock is held if w came from a stream) in
 * backend reads of at most io pages.  Applies the congestion rule to its
 * async part when ra is not NULL; last is the end (in pages) of the
 * client request that triggered it.
 */
static void
submit_window (struct rc_cache *c, struct ra_state *ra,
               const struct ra_window *w, ra_pgoff last, struct batches *bs,
               ra_pgoff io)
{
  struct ra_submit_result res;

  if (w->size == 0)
    return;
  STAT_ADD (&c->stats, windows[w->branch], 1);
  bs->random = w->branch == RA_G_RANDOM;
  bs->near = w->branch == RA_N_NEAR;
  ra_submit (w, io, &submit_ops, bs, &res);
  if (!ra || res.async_pages == 0)
    return;
  /* No background connection open: nobody would read the async part. */
  if (rc_congestion (c, RC_CONG_KEEP, 0, 0) != RC_CONG_GO ||
      !rc_workers_ready (c)) {
    ra_pgoff dropped = rc_drop_async_batches (ra, w, last, bs->b, &bs->n,
                                              abandon_pages, c->pc);

    STAT_ADD (&c->stats, async_skipped, 1);
    STAT_ADD (&c->stats, async_skipped_pages, dropped);
  }
}

/* The client read a trigger serves.  A sync batch that lies wholly
 * inside it is read from the backend straight into the client's buffer
 * and copied into the cache from there: its bytes are copied once, not
 * through a bounce buffer and back out of the cache.  The trigger then
 * sets rd's [done_start, done_end): the pages the client already has.
 */
struct client_read {
  struct rc_cache *c;
  struct rc_stream *s;
  void *ctx;
  char *buf;
  ra_pgoff again_page;          /* see rc_pc_access's again */
  struct rc_promotion pr;       /* while it waits for a page in flight */
};

/* Does batch [start, start + count) lie wholly inside rd's bytes? */
static bool
batch_in_client_buf (struct rc_cache *c, const struct rc_read *rd,
                     ra_pgoff start, ra_pgoff count)
{
  unsigned shift = c->params.page_shift;
  uint64_t from = start << shift, to = (start + count) << shift;

  if (!rd)
    return false;
  if (to > c->params.export_size)
    to = c->params.export_size;
  return from >= rd->offset && from < to && to <= rd->offset + rd->count;
}

/* Issue the batches: sync ones read now, by this thread and (when there
 * are several) by workers in parallel, then async ones to the workers.
 * The first sync batches, when they lie one after the other inside the
 * client's buffer (rd, buf), are one backend read straight into it,
 * however many io_max batches they are: a client's 2M read is one 2M
 * backend read, as without the filter, not 1M here and 1M through a
 * worker.  (The glue still splits it at the backend's own maximum block
 * size.)  A window's async part is queued once its sync part has been
 * read (whether or not that read failed: its pages are in flight and
 * must be read or given up), so that it never shares the backend with
 * the sync read its client waits for; a window without a sync part (an
 * async trigger) is queued at once.  A client that meanwhile waits for
 * an async page finds its job promoted when it is queued (rc_promote).
 * Returns 0, or -1 with *err if a sync read of a page of [need_start,
 * need_end) failed: the pages the caller needs (those of a trigger's
 * request from its page on; every page of a forced fill).
 */
static void
queue_async (struct rc_cache *c, const struct batches *bs)
{
  unsigned i;

  for (i = 0; i < bs->n; i++)
    if (bs->b[i].async)
      rc_queue_job (c, bs->b[i].start, bs->b[i].count, true, NULL);
}

static int
issue_batches (struct rc_cache *c, void *ctx, struct batches *bs,
               struct rc_read *rd, char *buf, ra_pgoff need_start,
               ra_pgoff need_end, int *err)
{
  struct rc_wait wait;
  int first = -1, nsync = 0;
  unsigned i, last;
  ra_pgoff start, count;
  int r = 0;

  for (i = 0; i < bs->n && first == -1; i++)
    if (!bs->b[i].async)
      first = i;
  if (first == -1) {
    queue_async (c, bs);
    return 0;
  }

  /* The sync batches [first, last] read by this thread. */
  start = bs->b[first].start;
  count = bs->b[first].count;
  last = first;
  if (batch_in_client_buf (c, rd, start, count))
    while (last + 1 < bs->n && !bs->b[last + 1].async &&
           bs->b[last + 1].start == start + count &&
           batch_in_client_buf (c, rd, start, count + bs->b[last + 1].count))
      count += bs->b[++last].count;

  for (i = last + 1; i < bs->n; i++)
    if (!bs->b[i].async) {
      if (nsync++ == 0)
        rc_wait_init (&wait, need_start, need_end);
      rc_queue_job (c, bs->b[i].start, bs->b[i].count, false, &wait);
    }
  STAT_ADD (&c->stats, sync_pages, count);
  if (batch_in_client_buf (c, rd, start, count)) {
    r = rc_backend_read_pages_to (c, ctx, start, count,
                                  buf + ((start << c->params.page_shift)
                                         - rd->offset), err);
    if (r == 0) {
      rd->done_start = start;
      rd->done_end = start + count;
    }
  }
  else
    r = rc_backend_read_pages (c, ctx, start, count, true, err);
  if (r == -1 && !(start < need_end && start + count > need_start))
    r = 0;                      /* not a page the caller needs */
  if (nsync > 0) {
    int e = rc_wait_for (c, ctx, &wait);

    rc_wait_destroy (&wait);
    for (i = last + 1; i < bs->n; i++)
      if (!bs->b[i].async)
        STAT_ADD (&c->stats, sync_pages, bs->b[i].count);
    if (r == 0 && e != 0) {
      *err = e;
      r = -1;
    }
  }
  queue_async (c, bs);
  return r;
}

/* The yield bound.  A client that waits for a read at random (a
 * branch G window: a guest's random I/O) queues behind the bytes that
 * speculation has in flight, on the backend, on the link and on the
 * CPUs that move them; so, for a while after a client of another stream
 * last did, each stream's windows are bounded to a quarter of the
 * congestion bound (2M with the defaults, where it is 8M) and read in
 * backend reads of a quarter of ra-io-max (256K), as ra-io-max=256K
 * would make them.  A lone stream, or one whose own reads are the
 * random ones, never yields.  Measured in the README ("Congestion
 * measured").
 */
static void
note_random_wait (struct rc_cache *c, const struct rc_stream *s)
{
  atomic_store_explicit (&c->random_wait_owner, s->owner,
                         memory_order_relaxed);
  atomic_store_explicit (&c->random_wait_ns, rc_now_ns (),
                         memory_order_relaxed);
}

/* What a yielding stream keeps of x pages (a quarter, at least one). */
static ra_pgoff
yield_part (ra_pgoff x)
{
  return x / RC_YIELD_DIV > 0 ? x / RC_YIELD_DIV : 1;
}

static bool
yielding (struct rc_cache *c, const struct rc_stream *s, uint64_t now)
{
  uint64_t t = atomic_load_explicit (&c->random_wait_ns,
                                     memory_order_relaxed);

  return t != 0 && now - t < RC_YIELD_NS &&
    atomic_load_explicit (&c->random_wait_owner, memory_order_relaxed)
    != s->owner;
}

/* Adaptive mode: what the engine is told at each decision. */
static void
adaptive_inputs (struct rc_cache *c, struct rc_stream *s,
                 struct ra_inputs *in)
{
  uint64_t markers = rc_pc_markers (c->pc);

  in->now_ns = rc_now_ns ();
  if (!rc_cache_model (c, &in->lat_ns, &in->page_ns))
    in->lat_ns = -1;
  in->share = ra_fair_share (rc_pc_capacity (c->pc), markers);
  in->wasted = rc_pc_take_wasted (c->pc, s->owner);
  in->near_hits = rc_pc_take_near_hits (c->pc, s->owner);
  in->yield_max = yielding (c, s, in->now_ns)
    ? yield_part (c->params.self_max) : 0;
}

/* Read around the cache.  A client whose own reads cover the backend
 * (async_covered) gets windows of just its request, and drop-behind
 * would give the pages of its stream back as soon as it has passed
 * them: inserting them only costs page memory touched for the first
 * time, a copy and the page bookkeeping, for the same backend reads
 * (the README, "qemu-img convert", has the figures).  So when such a window is
 * the whole request, at its first page, and none of it is cached, in
 * flight or was given back lately, the request is one backend read
 * straight into the client's buffer and no page is made.  Its groups are
 * remembered as given back (rc_pc_read_around_done), so that data read
 * a second time is kept as after drop-behind.
 */
static bool
read_around_ok (struct rc_cache *c, const struct rc_read *rd,
                const char *buf, ra_pgoff index, const struct ra_window *w)
{
  return rd && buf && index == rd->first &&
    w->start == rd->first && w->size >= rd->last - rd->first &&
    w->async_size == 0 &&
    rc_pc_read_around_ok (c->pc, rd->first, rd->last - rd->first);
}

static int
read_around (struct rc_cache *c, void *ctx, struct rc_read *rd, char *buf,
             int *err)
{
  ra_pgoff n = rd->last - rd->first;

  if (rc_backend_read_around (c, ctx, buf, (uint32_t) rd->count, rd->offset,
                              err) == -1)
    return -1;
  rc_pc_read_around_done (c->pc, rd->first, n);
  STAT_ADD (&c->stats, read_around_pages, n);
  STAT_ADD (&c->stats, sync_pages, n);
  rd->done_start = rd->first;
  rd->done_end = rd->last;
  rd->done_missed = true;
  return 0;
}

/* A trigger at page index of a read ending at page last (rd, buf: that
 * read, or NULL).
 */
static int
trigger (struct rc_cache *c, struct rc_stream *s, void *ctx,
         ra_pgoff index, bool marker, ra_pgoff last, struct rc_read *rd,
         char *buf, int *err)
{
  struct batches bs;
  struct ra_window w;
  struct ra_inputs in, *inp = NULL;
  const struct ra_params *p = &c->params;
  struct ra_params request_only;
  ra_pgoff io = c->params.io_max;
  int r;

  batches_init (&bs, c, false);
  bs.owner = s->owner;
  ACQUIRE_LOCK (&s->lock);
  /* A client whose own reads keep the backend busy (several reads, as
   * many bytes as the BDP and half of ra-max) reads just its request:
   * readahead would only compete with its reads.
   */
  if (rc_congestion (c, RC_CONG_WINDOW, s->depth_reads16 / 16,
                     s->depth_bytes) == RC_CONG_COVERED) {
    request_only = c->params;
    request_only.ra_max = 0;
    p = &request_only;
    STAT_ADD (&c->stats, async_covered, 1);
  }
  if (p->mode == RA_MODE_ADAPTIVE && p->ra_max > 0) {
    adaptive_inputs (c, s, &in);
    inp = &in;
    if (in.wasted > 0)
      STAT_ADD (&c->stats, adapt_waste_events, 1);
  }
  rc_read_decide (&s->ra, p, &rc_pc_query_ops, c->pc, rd,
                  index, marker, last, inp, &w);
  if (inp) {
    atomic_store_explicit (&c->stats.adapt_cap_pages, s->ra.ad.cap,
                           memory_order_relaxed);
    if (in.yield_max) {
      STAT_ADD (&c->stats, windows_yielded, 1);
      io = yield_part (c->params.io_max);
    }
  }
  if (w.branch == RA_G_RANDOM && w.size > 0 && p == &c->params)
    note_random_wait (c, s);
  if (p == &request_only && read_around_ok (c, rd, buf, index, &w)) {
    STAT_ADD (&c->stats, windows[w.branch], 1);
    RELEASE_LOCK (&s->lock);
    return read_around (c, ctx, rd, buf, err);
  }
  submit_window (c, &s->ra, &w, last, &bs, io);
  RELEASE_LOCK (&s->lock);
  r = issue_batches (c, ctx, &bs, rd, buf, index, last, err);
  batches_free (&bs);
  return r;
}

/* Adaptive mode: the client waited for page index, which an async part
 * had in flight.  The engine counts it late and may name the stream's
 * next marker: take it now and make the async trigger it would have
 * made, so the next window starts early.
 */
static void
late (struct rc_cache *c, struct rc_stream *s, void *ctx, ra_pgoff index)
{
  ra_pgoff m, reads;
  int ignored;

  STAT_ADD (&c->stats, adapt_late, 1);
  ACQUIRE_LOCK (&s->lock);
  m = ra_late (&s->ra, &c->params, index);
  reads = (s->ra.ad.cap + c->params.io_max - 1) / c->params.io_max;
  RELEASE_LOCK (&s->lock);
  if (m != RA_NO_MARKER &&
      rc_congestion (c, RC_CONG_EARLY, reads, 0) == RC_CONG_GO &&
      rc_pc_take_marker (c->pc, m)) {
    STAT_ADD (&c->stats, adapt_early_triggers, 1);
    trigger (c, s, ctx, m, true, m + 1, NULL, NULL, &ignored);
  }
}


/* The read path's ops (include/racache/readpath.h) over the shared
 * page cache, for one client read (opaque: struct client_read).
 */
static unsigned
cr_copy_run (void *opaque, struct rc_read *rd, ra_pgoff index, unsigned n)
{
  struct client_read *cr = opaque;
  uint64_t page_start = index << cr->c->params.page_shift;

  return rc_pc_copy_run (cr->c->pc, index, n,
                         cr->buf + (page_start - rd->offset),
                         cr->again_page);
}

/* Before a client waits for a page in flight. */
static void
promote (void *arg, ra_pgoff index)
{
  struct client_read *cr = arg;

  rc_promote (cr->c, index, &cr->pr);
}

static enum rc_access
cr_access (void *opaque, struct rc_read *rd, ra_pgoff index, uint64_t from,
           uint64_t to, bool *waited, bool *waited_ahead)
{
  struct client_read *cr = opaque;
  uint64_t page_start = index << cr->c->params.page_shift;
  enum rc_access r;

  r = rc_pc_access (cr->c->pc, index, cr->buf + (from - rd->offset),
                    (uint32_t) (from - page_start),
                    (uint32_t) (to - from), index == cr->again_page,
                    promote, cr, waited, waited_ahead);
  rc_promote_end (cr->c, &cr->pr);
  return r;
}

static int
cr_trigger (void *opaque, struct rc_read *rd, ra_pgoff index, bool marker,
            int *err)
{
  struct client_read *cr = opaque;

  return trigger (cr->c, cr->s, cr->ctx, index, marker, rd->last, rd,
                  cr->buf, err);
}

static void
cr_late (void *opaque, struct rc_read *rd, ra_pgoff index)
{
  struct client_read *cr = opaque;

  (void) rd;
  if (cr->c->params.mode == RA_MODE_ADAPTIVE)
    late (cr->c, cr->s, cr->ctx, index);
}

static int
cr_direct (void *opaque, struct rc_read *rd, ra_pgoff index, uint64_t from,
           uint64_t to, int *err)
{
  struct client_read *cr = opaque;

  (void) index;
  return rc_backend_read_direct (cr->c, cr->ctx, cr->buf + (from - rd->offset),
                                 (uint32_t) (to - from), from, err);
}

static const struct rc_read_ops client_read_ops = {
  .copy_run = cr_copy_run,
  .access = cr_access,
  .trigger = cr_trigger,
  .late = cr_late,
  .direct = cr_direct,
};

int
rc_read (struct rc_cache *c, struct rc_stream *s, void *ctx,
         void *buf, uint32_t count, uint64_t offset, int *err)
{
  unsigned shift = c->params.page_shift;
  uint64_t end = offset + count;
  ra_pgoff behind_from, behind_to;
  struct client_read cr = { .c = c, .s = s, .ctx = ctx, .buf = buf };
  struct rc_read rd;
  int slot, r;

  STAT_ADD (&c->stats, client_reads, 1);
  /* A zero-length read at an unaligned offset names no byte of its page:
   * it must not read (or read ahead from) the backend, nor move prev_pos.
   */
  if (count == 0)
    return 0;
  rc_read_init (&rd, offset, count, shift);
  /* The page where this stream's previous read ended: reading on in it
   * is not a second use of the page.
   */
  ACQUIRE_LOCK (&s->lock);
  cr.again_page = s->ra.prev_pos > 0 ? (s->ra.prev_pos - 1) >> shift
    : RA_NO_MARKER;
  slot = rc_behind_start (&s->behind, offset >> shift);
  s->bytes_reading += count;
  s->nreading++;
  /* The depth the client keeps: the most it had in flight lately (the
   * reads of one burst arrive one by one), decaying by 1/16 a read.
   */
  if (s->bytes_reading >= s->depth_bytes)
    s->depth_bytes = s->bytes_reading;
  else
    s->depth_bytes -= (s->depth_bytes - s->bytes_reading) / 16;
  if (s->nreading * 16 >= s->depth_reads16)
    s->depth_reads16 = s->nreading * 16;
  else
    s->depth_reads16 -= (s->depth_reads16 - s->nreading * 16) / 16;
  RELEASE_LOCK (&s->lock);

  r = rc_read_path (&client_read_ops, &cr, &c->stats, shift, &rd, err);

  ACQUIRE_LOCK (&s->lock);
  if (r == 0)
    ra_update_prev_pos (&s->ra, end);
  s->bytes_reading -= count;
  s->nreading--;
  /* Drop-behind (include/racache/pagecache.h): the pages the stream
   * gives back behind it now.
   */
  behind_from = rc_behind_end (&s->behind, slot, offset >> shift,
                               end >> shift, rc_pc_behind_pages (c->pc),
                               &behind_to);
  RELEASE_LOCK (&s->lock);
  rc_pc_drop_behind (c->pc, behind_from, behind_to);
  return r;
}

int
rc_fill (struct rc_cache *c, void *ctx, uint32_t count, uint64_t offset,
         int *err)
{
  unsigned shift = c->params.page_shift;
  uint64_t ps = UINT64_C (1) << shift;
  ra_pgoff index = offset >> shift;
  ra_pgoff last = (offset + count + ps - 1) >> shift;
  struct ra_window w;

  if (count == 0)
    return 0;
  while (ra_forced (&c->params, index, last, &w)) {
    struct batches bs;
    int r;

    batches_init (&bs, c, true);
    submit_window (c, NULL, &w, last, &bs, c->params.io_max);
    r = issue_batches (c, ctx, &bs, NULL, NULL, 0, RA_NO_MARKER, err);
    /* When the batch list could not grow (out of memory), the rest of
     * the chunk was not inserted: go on from the end of the last batch.
     */
    if (bs.overflow && bs.n > 0)
      index = bs.b[bs.n - 1].start + bs.b[bs.n - 1].count;
    else
      index = w.start + w.size;
    batches_free (&bs);
    if (r == -1)
      return -1;
  }
  return 0;
}

void
rc_invalidate (struct rc_cache *c, uint64_t offset, uint64_t count)
{
  rc_pc_invalidate (c->pc, offset, count);
}
