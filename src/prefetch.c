/* ra-cache: backend reads.
 *
 * Every backend read covers a batch of contiguous pages that ra_submit
 * inserted in flight (at most io_max bytes).  A batch of a window's sync
 * part is read by the client thread that waits for it (or, when the sync
 * part has several batches, partly by workers in parallel); a batch of
 * the async part is queued for the background workers and never delays
 * the client that triggered it.  Sync jobs are queued ahead of async
 * jobs so a waiting client never waits behind speculation.
 *
 * Each worker opens its own backend context (struct rc_backend's
 * worker_open) the first time it runs a job.
 *
 * In-flight accounting: executing counts backend reads running now (a
 * client's own and the workers'), queued the jobs waiting for a worker.
 * With ra-congestion=wait a worker holds an async job back while
 * executing is at the congestion threshold (counted once per job as
 * "delayed"); sync jobs always start.
 */

#include <config.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache-internal.h"
#include "racache/util.h"

void
rc_wait_init (struct rc_wait *w)
{
  pthread_mutex_init (&w->lock, NULL);
  pthread_cond_init (&w->done, NULL);
  w->pending = 0;
  w->err = 0;
}

void
rc_wait_destroy (struct rc_wait *w)
{
  pthread_mutex_destroy (&w->lock);
  pthread_cond_destroy (&w->done);
}

static void
wait_add (struct rc_wait *w)
{
  ACQUIRE_LOCK (&w->lock);
  w->pending++;
  RELEASE_LOCK (&w->lock);
}

static void
wait_finish (struct rc_wait *w, int err)
{
  ACQUIRE_LOCK (&w->lock);
  if (err && !w->err)
    w->err = err;
  /* Signal while holding the lock: the waiter may destroy w as soon as
   * it sees pending == 0.
   */
  if (--w->pending == 0)
    pthread_cond_broadcast (&w->done);
  RELEASE_LOCK (&w->lock);
}

/* Returns the first error of the group, or 0. */
int
rc_wait_for (struct rc_wait *w)
{
  int err;

  ACQUIRE_LOCK (&w->lock);
  while (w->pending > 0)
    pthread_cond_wait (&w->done, &w->lock);
  err = w->err;
  RELEASE_LOCK (&w->lock);
  return err;
}

/* A backend read starts. */
static void
inflight_add (struct rc_cache *c)
{
  unsigned n = atomic_fetch_add (&c->executing, 1) + 1;

  stat_max (&c->stats.inflight_hwm, n);
}

/* A backend read finished: with ra-congestion=wait, a held-back async
 * job may start now.
 */
static void
inflight_done (struct rc_cache *c)
{
  atomic_fetch_sub (&c->executing, 1);
  if (c->cfg.congestion == RC_CONGESTION_WAIT &&
      atomic_load (&c->queued_async) > 0) {
    ACQUIRE_LOCK (&c->qlock);
    RELEASE_LOCK (&c->qlock);
    pthread_cond_signal (&c->qcond);
  }
}

/* Read count bytes at offset from the backend (no cache involved). */
int
rc_backend_read_bytes (struct rc_cache *c, void *ctx, void *buf,
                       uint32_t count, uint64_t offset, int *err)
{
  int r;

  STAT_ADD (&c->stats, backend_reads, 1);
  STAT_ADD (&c->stats, backend_bytes, count);
  r = c->be.pread (c->be.opaque, ctx, buf, count, offset, err);
  if (r == -1) {
    STAT_ADD (&c->stats, backend_errors, 1);
    if (*err == 0)
      *err = EIO;
  }
  return r;
}

static char *bounce_take (struct rc_cache *c);
static void bounce_put (struct rc_cache *c, char *b);

/* Read the in-flight pages [start, start + count) into buf and complete
 * them (used: buf is a client's, who has read them).  The caller has
 * already counted this read with inflight_add.
 */
static int
read_pages_used (struct rc_cache *c, void *ctx, ra_pgoff start,
                 ra_pgoff count, char *buf, bool used, int *err)
{
  unsigned shift = c->params.page_shift;
  uint64_t offset = start << shift;
  uint64_t len = count << shift;
  int r = 0;

  *err = 0;
  if (offset >= c->params.export_size)
    len = 0;
  else if (len > c->params.export_size - offset)
    len = c->params.export_size - offset;
  if (len > 0) {
    struct timespec t0, t1;
    bool timed = c->params.mode == RA_MODE_ADAPTIVE;

    if (timed)
      clock_gettime (CLOCK_MONOTONIC, &t0);
    r = rc_backend_read_bytes (c, ctx, buf, len, offset, err);
    /* Adaptive mode: the backend model learns from every read. */
    if (timed && r == 0) {
      clock_gettime (CLOCK_MONOTONIC, &t1);
      ACQUIRE_LOCK (&c->model_lock);
      ra_model_sample (&c->model, count,
                       (uint64_t) (t1.tv_sec - t0.tv_sec) * 1000000000
                       + (uint64_t) t1.tv_nsec - (uint64_t) t0.tv_nsec);
      RELEASE_LOCK (&c->model_lock);
    }
  }
  if (used && r == 0)
    rc_pc_complete_used (c->pc, start, count, buf, len);
  else
    rc_pc_complete (c->pc, start, count, buf, len, r == -1 ? *err : 0);
  inflight_done (c);
  return r;
}

/* Read the in-flight pages [start, start + count): straight into the
 * pages' memory when it is contiguous (no copy), else into buf (NULL:
 * a bounce buffer is taken for it) and copied into the pages.
 */
static int
read_pages (struct rc_cache *c, void *ctx, ra_pgoff start, ra_pgoff count,
            char *buf, int *err)
{
  char *run = rc_pc_run_data (c->pc, start, count);
  char *bounce = NULL;
  int r;

  if (run) {
    STAT_ADD (&c->stats, backend_reads_in_place, 1);
    buf = run;
  }
  else if (!buf) {
    buf = bounce = bounce_take (c);
    if (!buf) {
      *err = ENOMEM;
      rc_pc_complete (c->pc, start, count, NULL, 0, ENOMEM);
      inflight_done (c);
      return -1;
    }
  }
  r = read_pages_used (c, ctx, start, count, buf, false, err);
  if (bounce)
    bounce_put (c, bounce);
  return r;
}

/* A read around the cache, straight into a client's buffer: counted in
 * flight like any other backend read.
 */
int
rc_backend_read_direct (struct rc_cache *c, void *ctx, void *buf,
                        uint32_t count, uint64_t offset, int *err)
{
  int r;

  inflight_add (c);
  r = rc_backend_read_bytes (c, ctx, buf, count, offset, err);
  inflight_done (c);
  return r;
}

/* Bounce buffers for the sync reads of client threads, kept for reuse:
 * a fresh buffer per read costs page faults on every read.  As many
 * exist as client threads ever read at once.
 */
static char *
bounce_take (struct rc_cache *c)
{
  char *b;

  ACQUIRE_LOCK (&c->bounce_lock);
  b = c->bounce_free;
  if (b)
    memcpy (&c->bounce_free, b, sizeof (char *));
  RELEASE_LOCK (&c->bounce_lock);
  return b ? b : malloc (c->params.io_max << c->params.page_shift);
}

static void
bounce_put (struct rc_cache *c, char *b)
{
  ACQUIRE_LOCK (&c->bounce_lock);
  memcpy (b, &c->bounce_free, sizeof (char *));
  c->bounce_free = b;
  RELEASE_LOCK (&c->bounce_lock);
}

void
rc_bounce_free_all (struct rc_cache *c)
{
  while (c->bounce_free) {
    char *b = c->bounce_free;

    memcpy (&c->bounce_free, b, sizeof (char *));
    free (b);
  }
}

int
rc_backend_read_pages (struct rc_cache *c, void *ctx, ra_pgoff start,
                       ra_pgoff count, int *err)
{
  inflight_add (c);
  return read_pages (c, ctx, start, count, NULL, err);
}

int
rc_backend_read_pages_to (struct rc_cache *c, void *ctx, ra_pgoff start,
                          ra_pgoff count, char *dst, int *err)
{
  STAT_ADD (&c->stats, backend_reads_in_place, 1);
  inflight_add (c);
  return read_pages_used (c, ctx, start, count, dst, true, err);
}

static void finish_job (struct rc_cache *c, struct rc_job *j, int r,
                        int err);

void
rc_queue_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
              bool async, struct rc_wait *wait)
{
  struct rc_job *j = malloc (sizeof *j);

  if (!j) {
    /* Nothing will read these pages: give them back at once. */
    rc_pc_complete (c->pc, start, count, NULL, 0, ENOMEM);
    if (wait) {
      wait_add (wait);
      wait_finish (wait, ENOMEM);
    }
    return;
  }
  j->next = NULL;
  j->start = start;
  j->count = count;
  j->async = async;
  j->wait = wait;
  j->delayed = false;
  if (wait)
    wait_add (wait);

  ACQUIRE_LOCK (&c->qlock);
  if (c->stopping) {
    /* Shutting down: nobody will read these pages. */
    RELEASE_LOCK (&c->qlock);
    rc_pc_complete (c->pc, start, count, NULL, 0, ESHUTDOWN);
    finish_job (c, j, -1, ESHUTDOWN);
    return;
  }
  atomic_fetch_add (&c->queued, 1);
  if (async) {
    atomic_fetch_add (&c->queued_async, 1);
    *c->async_tail = j;
    c->async_tail = &j->next;
  }
  else {
    *c->sync_tail = j;
    c->sync_tail = &j->next;
  }
  RELEASE_LOCK (&c->qlock);
  pthread_cond_signal (&c->qcond);
}

/* The next job a worker may start: a sync job if any; else an async
 * job, unless ra-congestion=wait holds it back while the threshold of
 * reads is running (all = true ignores that, for shutdown).  Called with
 * c->qlock held.
 */
static struct rc_job *
dequeue (struct rc_cache *c, bool all)
{
  struct rc_job *j;

  if ((j = c->sync_head) != NULL) {
    c->sync_head = j->next;
    if (!c->sync_head)
      c->sync_tail = &c->sync_head;
  }
  else if ((j = c->async_head) != NULL) {
    if (!all && c->cfg.congestion == RC_CONGESTION_WAIT &&
        atomic_load (&c->executing) >= c->cfg.congestion_threshold) {
      if (!j->delayed) {
        j->delayed = true;
        STAT_ADD (&c->stats, async_delayed, 1);
      }
      return NULL;
    }
    c->async_head = j->next;
    if (!c->async_head)
      c->async_tail = &c->async_head;
    atomic_fetch_sub (&c->queued_async, 1);
  }
  if (j)
    atomic_fetch_sub (&c->queued, 1);
  return j;
}

/* A client is about to wait for page index, which is in flight: if its
 * read is still queued as speculation, move it among the sync jobs so
 * the client does not wait behind other speculation (and the read is
 * still issued once).
 */
void
rc_promote (struct rc_cache *c, ra_pgoff index)
{
  struct rc_job **pj, *j;

  if (atomic_load (&c->queued_async) == 0)
    return;
  ACQUIRE_LOCK (&c->qlock);
  for (pj = &c->async_head; (j = *pj) != NULL; pj = &j->next) {
    if (index >= j->start && index < j->start + j->count) {
      *pj = j->next;
      if (c->async_tail == &j->next)
        c->async_tail = pj;
      atomic_fetch_sub (&c->queued_async, 1);
      j->next = NULL;
      *c->sync_tail = j;
      c->sync_tail = &j->next;
      STAT_ADD (&c->stats, async_promoted, 1);
      break;
    }
  }
  RELEASE_LOCK (&c->qlock);
  if (j)
    pthread_cond_signal (&c->qcond);
}

static void
finish_job (struct rc_cache *c, struct rc_job *j, int r, int err)
{
  if (j->async)
    STAT_ADD (&c->stats, async_pages, r == 0 ? j->count : 0);
  if (j->wait)
    wait_finish (j->wait, r == 0 ? 0 : err);
  free (j);
}

static void *
worker_main (void *arg)
{
  struct rc_cache *c = arg;
  void *ctx = NULL;
  bool opened = false;
  char *buf = malloc (c->cfg.io_max);

  ACQUIRE_LOCK (&c->qlock);
  for (;;) {
    struct rc_job *j = dequeue (c, false);
    int r, err = 0;

    if (!j) {
      if (c->stopping)
        break;
      pthread_cond_wait (&c->qcond, &c->qlock);
      continue;
    }
    RELEASE_LOCK (&c->qlock);

    if (!opened && c->be.worker_open) {
      ctx = c->be.worker_open (c->be.opaque);
      opened = ctx != NULL;
    }
    if (!buf || (c->be.worker_open && !opened)) {
      err = buf ? EIO : ENOMEM;
      rc_pc_complete (c->pc, j->start, j->count, NULL, 0, err);
      r = -1;
    }
    else {
      inflight_add (c);
      r = read_pages (c, ctx, j->start, j->count, buf, &err);
    }
    finish_job (c, j, r, err);

    ACQUIRE_LOCK (&c->qlock);
  }
  RELEASE_LOCK (&c->qlock);

  if (opened && c->be.worker_close)
    c->be.worker_close (c->be.opaque, ctx);
  free (buf);
  return NULL;
}

int
rc_workers_start (struct rc_cache *c, unsigned n)
{
  unsigned i;
  int e;

  c->workers = calloc (n, sizeof *c->workers);
  if (!c->workers)
    return -1;
  for (i = 0; i < n; i++) {
    e = pthread_create (&c->workers[i], NULL, worker_main, c);
    if (e != 0) {
      c->nworkers = i;
      rc_workers_stop (c);
      errno = e;
      return -1;
    }
  }
  c->nworkers = n;
  return 0;
}

void
rc_workers_stop (struct rc_cache *c)
{
  struct rc_job *j;
  unsigned i;

  /* Queued jobs are abandoned: their pages go back to absent and any
   * client waiting for them gets ESHUTDOWN.
   */
  ACQUIRE_LOCK (&c->qlock);
  c->stopping = true;
  while ((j = dequeue (c, true)) != NULL) {
    rc_pc_complete (c->pc, j->start, j->count, NULL, 0, ESHUTDOWN);
    finish_job (c, j, -1, ESHUTDOWN);
  }
  RELEASE_LOCK (&c->qlock);
  pthread_cond_broadcast (&c->qcond);
  for (i = 0; i < c->nworkers; i++)
    pthread_join (c->workers[i], NULL);
  free (c->workers);
  c->workers = NULL;
  c->nworkers = 0;
}
