/* ra-cache: the filter's cache: lifecycle, and the read path
 * (doc/readahead-rules.md) over the shared page cache and the backend.
 *
 * The page walk (sync trigger, async trigger, wait, copy) is
 * rc_read_path (src/readpath.c) and what a trigger does is rc_trigger
 * (src/trigger.c), both shared with ra-trace and the unit tests; here
 * are their ops over this cache: the clock, the backend model, the
 * congestion decision and whether a background connection is open
 * (src/workers.c), reading around the cache for a client whose own reads
 * cover the backend, and issuing a window's batches: this thread reads
 * the sync part (straight into the client's buffer where it lies inside
 * it) while the async part goes to the background workers.  At the end
 * of a read prev_pos is the byte after it and drop-behind gives back
 * what the stream read once behind it.
 *
 * The stream state is per connection and guarded by the stream's lock,
 * which is held while the engine decides and the window's pages are
 * inserted (lock order: src/cache-internal.h), never while reading from
 * the backend or waiting for pages.
 *
 * Congestion (the decision is rc_cong_decide, src/congestion.c; with
 * ra-congestion=skip, the default): when a window is submitted while
 * the backend reads running and queued are at or above the congestion
 * threshold, only the sync part is read (src/trigger.c).  A queued async
 * part is started by the workers when the decision lets it: in adaptive
 * mode while the backend slots the estimator measured leave one free for
 * a sync read; in kernel mode with ra-congestion=wait once fewer than
 * the threshold of reads are running (src/jobq.c).  A client that needs
 * a page whose async read is still queued promotes that read among the
 * sync jobs: it never waits behind speculation, and the read is issued
 * once.
 */

#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache-internal.h"
#include "racache/readpath.h"
#include "racache/util.h"

static const struct rc_trigger_ops trigger_ops;

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
  rc_trigger_env_init (&c->env, &trigger_ops, c, &rc_pc_trigger_ops, c->pc,
                       &c->params, &c->stats);
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
    rc_trigger_env_destroy (&c->env);
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
  rc_replay_free (c);
  rc_pc_free (c->pc);
  rc_trigger_env_destroy (&c->env);
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
  s->peak = (struct rc_cong_peak) { 0 };
  s->lately_bytes = 0;
  s->lately_reads = 0;
  s->owner = rc_pc_owner_of (atomic_fetch_add (&next_owner, 1));
  return s;
}

void
rc_stream_closed (struct rc_cache *c, struct rc_stream *s)
{
  if (c && s)
    rc_jobq_drop_owner (c, s->owner);
}

void
rc_stream_free (struct rc_stream *s)
{
  if (!s)
    return;
  pthread_mutex_destroy (&s->lock);
  free (s);
}

/* The client read a trigger serves (the trigger's user pointer).  A
 * sync batch that lies wholly inside it is read from the backend
 * straight into the client's buffer and copied into the cache from
 * there: its bytes are copied once, not through a bounce buffer and
 * back out of the cache.  The trigger then sets rd's [done_start,
 * done_end): the pages the client already has.
 */
struct client_read {
  struct rc_cache *c;
  struct rc_stream *s;
  void *ctx;
  char *buf;                    /* NULL: no client buffer (NBD_CMD_CACHE) */
  ra_pgoff again_page;          /* see rc_pc_page_read's again */
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

/* The trigger's ops (include/racache/trigger.h) over the filter's cache
 * and backend (opaque: struct rc_cache; t->user: struct client_read).
 */
static uint64_t
env_now_ns (void *opaque)
{
  (void) opaque;
  return rc_now_ns ();
}

static bool
env_model (void *opaque, double *lat_ns, double *page_ns)
{
  return rc_cache_model (opaque, lat_ns, page_ns);
}

static enum rc_cong_answer
env_congestion (void *opaque, enum rc_cong_question q,
                const struct rc_cong_load *asked)
{
  return rc_congestion (opaque, q, asked);
}

static bool
env_ready (void *opaque)
{
  return rc_workers_ready (opaque);
}

/* Read around the cache (src/trigger.c says when): the request is one
 * backend read straight into the client's buffer and no page is made.
 * It may be when the client gave a buffer (not NBD_CMD_CACHE) and none
 * of the request is cached, in flight or was given back lately; its
 * groups are then remembered as given back (rc_pc_read_around_done), so
 * that data read a second time is kept as after drop-behind.
 */
static bool
env_around_ok (void *opaque, const struct rc_trigger *t)
{
  struct rc_cache *c = opaque;
  const struct client_read *cr = t->user;
  const struct rc_read *rd = t->rd;

  return rd && cr->buf &&
    rc_pc_read_around_ok (c->pc, rd->first, rd->last - rd->first);
}

static int
env_around (void *opaque, struct rc_trigger *t, int *err)
{
  struct rc_cache *c = opaque;
  struct client_read *cr = t->user;
  struct rc_read *rd = t->rd;
  ra_pgoff n = rd->last - rd->first;

  if (rc_backend_read_around (c, cr->ctx, cr->buf, (uint32_t) rd->count,
                              rd->offset, err) == -1)
    return -1;
  rc_pc_read_around_done (c->pc, rd->first, n);
  STAT_ADD (&c->stats, read_around_pages, n);
  STAT_ADD (&c->stats, sync_pages, n);
  rd->done_start = rd->first;
  rd->done_end = rd->last;
  rd->done_missed = true;
  return 0;
}

/* Hand a window's async batches to the workers: queued at once (token
 * NULL), or parked under token while its sync part is read.
 */
static void
queue_async (struct rc_cache *c, const struct rc_trigger *t,
             const void *token)
{
  unsigned i;

  for (i = 0; i < t->n; i++)
    if (t->b[i].async)
      rc_park_job (c, t->b[i].start, t->b[i].count, t->owner, token);
}

/* Issue the batches: sync ones read now, by this thread and (when there
 * are several) by workers in parallel, async ones by the workers.  The
 * first sync batches, when they lie one after the other inside the
 * client's buffer, are one backend read straight into it, however many
 * io_max batches they are: a client's 2M read is one 2M backend read,
 * as without the filter, not 1M here and 1M through a worker.  (The
 * glue still splits it at the backend's own maximum block size.)
 *
 * A window's async part is queued at once, beside its sync part: behind
 * a distant backend, waiting for the sync read costs the async part a
 * whole round trip at every sync trigger.  When the BESIDE congestion
 * question says no (a client with several reads in flight, a window
 * that yields to a random reader, sync reads that queue at the
 * backend), it waits until the sync part has been read (whether or not
 * that read failed: its pages are in flight and must be read or given
 * up), so that it does not share the backend with the sync read its
 * client waits for.  Meanwhile the async batches are parked
 * (rc_park_job): a client that waits for one of their pages (a deep
 * client's next reads, such as nbdcopy's and qemu-img convert's) has
 * that batch read at once, among the sync jobs, instead of after the
 * sync read.
 */
static int
env_issue (void *opaque, struct rc_trigger *t, int *err)
{
  struct rc_cache *c = opaque;
  struct client_read *cr = t->user;
  struct rc_read *rd = cr->buf ? t->rd : NULL;
  struct rc_wait wait;
  int first = -1, nsync = 0;
  unsigned i, last;
  ra_pgoff start, count;
  int r = 0;

  for (i = 0; i < t->n && first == -1; i++)
    if (!t->b[i].async)
      first = i;
  if (first == -1) {
    queue_async (c, t, NULL);
    return 0;
  }

  /* The sync batches [first, last] read by this thread. */
  start = t->b[first].start;
  count = t->b[first].count;
  last = first;
  if (batch_in_client_buf (c, rd, start, count))
    while (last + 1 < t->n && !t->b[last + 1].async &&
           t->b[last + 1].start == start + count &&
           batch_in_client_buf (c, rd, start, count + t->b[last + 1].count))
      count += t->b[++last].count;

  {
    const struct rc_cong_load beside = { .client_reads = t->depth_reads,
                                         .yielding = t->yielded };

    queue_async (c, t, rc_congestion (c, RC_CONG_BESIDE, &beside)
                 == RC_CONG_GO ? NULL : t);
  }
  for (i = last + 1; i < t->n; i++)
    if (!t->b[i].async) {
      if (nsync++ == 0)
        rc_wait_init (&wait, t->need_start, t->need_end);
      rc_queue_job (c, t->b[i].start, t->b[i].count, false, &wait, 0);
    }
  STAT_ADD (&c->stats, sync_pages, count);
  if (batch_in_client_buf (c, rd, start, count)) {
    r = rc_backend_read_pages_to (c, cr->ctx, start, count,
                                  cr->buf + ((start << c->params.page_shift)
                                             - rd->offset), err);
    if (r == 0) {
      rd->done_start = start;
      rd->done_end = start + count;
    }
  }
  else
    r = rc_backend_read_pages (c, cr->ctx, start, count, true, err);
  if (r == -1 && !(start < t->need_end && start + count > t->need_start))
    r = 0;                      /* not a page the caller needs */
  if (nsync > 0) {
    int e = rc_wait_for (c, cr->ctx, &wait);

    rc_wait_destroy (&wait);
    for (i = last + 1; i < t->n; i++)
      if (!t->b[i].async)
        STAT_ADD (&c->stats, sync_pages, t->b[i].count);
    if (r == 0 && e != 0) {
      *err = e;
      r = -1;
    }
  }
  rc_unpark_jobs (c, t);
  return r;
}

/* The filter's -D ra-cache.windows=1 (struct rc_backend's
 * log_windows): one line per window, in bytes, with what became of it.
 */
static void
env_decided (void *opaque, const struct rc_trigger *t)
{
  struct rc_cache *c = opaque;
  unsigned shift = c->params.page_shift;
  char line[448], dropped[96] = "", behind[64] = "";

  if (!c->be.log_windows || !c->be.log)
    return;
  if (t->w.behind > 0)
    snprintf (behind, sizeof behind, ", %" PRIu64 " bytes before it",
              (uint64_t) t->w.behind << shift);
  if (t->dropped > 0)
    snprintf (dropped, sizeof dropped, ", async part dropped (%" PRIu64
              " bytes: the backend is busy)", (uint64_t) t->dropped << shift);
  else if (t->burst > 0)
    snprintf (dropped, sizeof dropped, ", not read (the first burst: past "
              "the stream's first two windows before a read completed)");
  snprintf (line, sizeof line,
            "ra-cache: window: stream %u, %s trigger at %" PRIu64
            ", branch %s (%s): %" PRIu64 "+%" PRIu64 " bytes, async part %"
            PRIu64 "%s%s%s%s%s",
            t->owner, t->marker ? "async" : "sync",
            (uint64_t) t->index << shift,
            ra_branch_name (t->w.branch),
            ra_branch_description (t->w.branch),
            (uint64_t) t->w.start << shift, (uint64_t) t->w.size << shift,
            (uint64_t) t->w.async_size << shift, behind,
            t->covered ? ", covered (the client's reads keep the backend busy)" : "",
            t->yielded ? ", yielded to a random reader" : "",
            t->around ? ", read around the cache" : "", dropped);
  c->be.log (c->be.opaque, false, line);
}

static const struct rc_trigger_ops trigger_ops = {
  .now_ns = env_now_ns,
  .model = env_model,
  .congestion = env_congestion,
  .ready = env_ready,
  .around_ok = env_around_ok,
  .around = env_around,
  .issue = env_issue,
  .decided = env_decided,
};

/* rc_trigger_init for cr's stream, with what it kept in flight lately
 * and cr as the user.
 */
static void
trigger_init (struct rc_trigger *t, struct client_read *cr, ra_pgoff index,
              bool marker, ra_pgoff last, struct rc_read *rd)
{
  struct rc_stream *s = cr->s;

  rc_trigger_init (t, &s->ra, s->owner, index, marker, last, rd,
                   atomic_load (&s->depth_reads16) / 16,
                   atomic_load (&s->depth_bytes));
  t->lately_reads = atomic_load (&s->lately_reads);
  t->lately_bytes = atomic_load (&s->lately_bytes);
  t->user = cr;
}

/* A trigger of cr's stream at page index of a read ending at page last
 * (rd: that read, or NULL).
 */
static int
trigger (struct client_read *cr, ra_pgoff index, bool marker, ra_pgoff last,
         struct rc_read *rd, int *err)
{
  struct rc_stream *s = cr->s;
  struct rc_trigger t;
  int r;

  trigger_init (&t, cr, index, marker, last, rd);
  r = rc_trigger (&cr->c->env, &t, &s->lock, err);
  rc_trigger_free (&t);
  return r;
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
  struct rc_pc_page_read pgr = {
    .index = index,
    .dst = cr->buf + (from - rd->offset),
    .off = (uint32_t) (from - page_start),
    .len = (uint32_t) (to - from),
    .again = index == cr->again_page,
    .before_wait = promote,
    .arg = cr,
  };
  enum rc_access r;

  r = rc_pc_access (cr->c->pc, &pgr);
  *waited = pgr.waited;
  *waited_ahead = pgr.waited_ahead;
  rc_promote_end (cr->c, &cr->pr);
  return r;
}

static int
cr_trigger (void *opaque, struct rc_read *rd, ra_pgoff index, bool marker,
            int *err)
{
  return trigger (opaque, index, marker, rd->last, rd, err);
}

/* Adaptive mode: the client waited for page index, which an async part
 * had in flight (rc_trigger_late).
 */
static void
cr_late (void *opaque, struct rc_read *rd, ra_pgoff index)
{
  struct client_read *cr = opaque;
  struct rc_trigger t;

  (void) rd;
  if (cr->c->params.mode != RA_MODE_ADAPTIVE)
    return;
  trigger_init (&t, cr, index, false, index + 1, NULL);
  rc_trigger_late (&cr->c->env, &t, &cr->s->lock);
  rc_trigger_free (&t);
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

static int
read_cached (struct rc_cache *c, struct rc_stream *s, void *ctx,
             void *buf, uint32_t count, uint64_t offset, uint64_t now_ns,
             int *err)
{
  unsigned shift = c->params.page_shift;
  uint64_t end = offset + count;
  ra_pgoff behind_from, behind_to;
  struct client_read cr = { .c = c, .s = s, .ctx = ctx, .buf = buf };
  struct rc_read rd;
  int slot, r;
  unsigned lately_reads;
  uint64_t lately_bytes;

  STAT_ADD (&c->stats, client_reads, 1);
  /* A zero-length read at an unaligned offset names no byte of its page:
   * it must not read (or read ahead from) the backend, nor move prev_pos.
   */
  if (count == 0)
    return 0;
  rc_read_init (&rd, offset, count, shift);
  rc_replay_read (c, rd.first, rd.last);
  /* The page where this stream's previous read ended: reading on in it
   * is not a second use of the page.
   */
  ACQUIRE_LOCK (&s->lock);
  cr.again_page = rc_again_page (&s->ra, shift);
  slot = rc_behind_start (&s->behind, offset >> shift);
  s->bytes_reading += count;
  s->nreading++;
  atomic_fetch_add (&c->client_bytes_reading, count);
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
  /* The most it kept lately (why: include/racache/congestion.h,
   * RC_CONG_WINDOW).
   */
  rc_cong_lately (&s->peak, now_ns, s->nreading, s->bytes_reading,
                  &lately_reads, &lately_bytes);
  atomic_store (&s->lately_reads, lately_reads);
  atomic_store (&s->lately_bytes, lately_bytes);
  RELEASE_LOCK (&s->lock);

  r = rc_read_path (&client_read_ops, &cr, &c->stats, shift, &rd, err);

  ACQUIRE_LOCK (&s->lock);
  if (r == 0) {
    ra_update_prev_pos (&s->ra, end);
    s->ra.done_bytes += count;
  }
  s->bytes_reading -= count;
  s->nreading--;
  atomic_fetch_sub (&c->client_bytes_reading, count);
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

/* A client read, timed for the client_read_seconds histogram. */
int
rc_read (struct rc_cache *c, struct rc_stream *s, void *ctx,
         void *buf, uint32_t count, uint64_t offset, int *err)
{
  uint64_t t0 = rc_now_ns ();
  int r = read_cached (c, s, ctx, buf, count, offset, t0, err);

  rc_hist_observe (&c->stats.client_read_seconds, rc_now_ns () - t0);
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
  struct client_read cr = { .c = c, .ctx = ctx };
  int r;

  if (count == 0)
    return 0;
  while ((r = rc_trigger_forced (&c->env, &index, last, &cr, err)) == 1)
    ;
  return r;
}

void
rc_note_uncached (struct rc_cache *c, enum rc_uncached_reason reason,
                  uint64_t count)
{
  switch (reason) {
  case RC_UNCACHED_OTHER_EXPORT:
    STAT_ADD (&c->stats, uncached_reads_other_export, 1);
    STAT_ADD (&c->stats, uncached_bytes_other_export, count);
    break;
  case RC_UNCACHED_SIZE_MISMATCH:
    STAT_ADD (&c->stats, uncached_reads_size_mismatch, 1);
    STAT_ADD (&c->stats, uncached_bytes_size_mismatch, count);
    break;
  case RC_UNCACHED_PRIVATE_WRITES:
    STAT_ADD (&c->stats, uncached_reads_private_writes, 1);
    STAT_ADD (&c->stats, uncached_bytes_private_writes, count);
    break;
  }
}

void
rc_invalidate (struct rc_cache *c, uint64_t offset, uint64_t count)
{
  rc_pc_invalidate (c->pc, offset, count);
}
