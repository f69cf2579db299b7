/* ra-cache: the background workers.
 *
 * Each worker takes a background backend connection (src/connpool.c)
 * and then a job (src/jobq.c): a job never waits for an open, and while
 * no connection is open no job is taken (async parts are dropped, and
 * clients read their sync batches themselves).  It reads the job's
 * pages (src/backend-read.c) and gives the connection back, broken if
 * the read failed as a dead connection.  Here too are the congestion
 * glue (rc_congestion) and the cache's public calls about connections.
 */

#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache-internal.h"
#include "racache/util.h"

enum rc_cong_answer
rc_congestion (struct rc_cache *c, enum rc_cong_question q,
               const struct rc_cong_load *asked)
{
  struct rc_cong_load l = *asked;

  l.executing = atomic_load (&c->executing);
  l.executing_bytes = atomic_load (&c->executing_bytes);
  l.queued = atomic_load (&c->q.queued);
  l.all_client_bytes = atomic_load (&c->client_bytes_reading);
  l.window_bytes = c->params.io_max << c->params.page_shift;
  return rc_cong_decide (&c->cong, q, &l);
}

void
rc_cache_congestion (struct rc_cache *c, struct rc_cong_estimate *out)
{
  rc_cong_get (&c->cong, out);
}

static void *
worker_main (void *arg)
{
  struct rc_cache *c = arg;

  /* No buffer of its own: a read goes straight into the pages' memory
   * when it lies in one piece, else through a bounce buffer of the
   * shared pool, so that only as many buffers are ever touched as reads
   * needed one at once.
   */
  ACQUIRE_LOCK (&c->q.lock);
  for (;;) {
    struct rc_conn *conn;
    struct rc_job *j = NULL;
    bool none;
    int r, err = 0;

    /* A connection first, then a job (lock order: queue, then pool). */
    if ((conn = rc_pool_take (&c->pool)) != NULL &&
        (j = rc_jobq_take (c)) == NULL)
      rc_pool_untake (&c->pool, conn);
    if (!j) {
      if (c->q.stopping)
        break;
      c->idle_workers++;
      pthread_cond_wait (&c->q.cond, &c->q.lock);
      c->idle_workers--;
      continue;
    }
    RELEASE_LOCK (&c->q.lock);

    r = rc_backend_read_pages (c, conn->ctx, j->start, j->count, !j->async,
                               &err);
    rc_job_finish (c, j, r, err);
    none = rc_pool_put (&c->pool, conn, r == -1 && rc_pool_dead_errno (err),
                        err);
    if (none)
      rc_jobq_drop_orphans (c);

    ACQUIRE_LOCK (&c->q.lock);
  }
  RELEASE_LOCK (&c->q.lock);
  return NULL;
}

/* The pool's hooks (called without its lock). */
static void
pool_usable (void *opaque)
{
  struct rc_cache *c = opaque;

  /* Under the queue's lock: a worker that found no connection either
   * waits already or looks again after this.
   */
  ACQUIRE_LOCK (&c->q.lock);
  pthread_cond_broadcast (&c->q.cond);
  RELEASE_LOCK (&c->q.lock);
}

static void
pool_none_open (void *opaque)
{
  rc_jobq_drop_orphans (opaque);
}

bool
rc_workers_ready (struct rc_cache *c)
{
  return rc_pool_ready (&c->pool);
}

/* Start one more worker.  Called with c->q.lock held (or before any
 * other thread can see c).  Returns 0 or an errno.
 */
static int
worker_add (struct rc_cache *c)
{
  int e = pthread_create (&c->workers[c->nworkers], NULL, worker_main, c);

  if (e == 0)
    c->nworkers++;
  return e;
}

/* Workers start as jobs wait for them, not all at once: a thread costs
 * a fresh server a clone, a stack and, once it allocates, a malloc
 * arena (bench/RESULTS.md, "The first burst and workers on demand"),
 * and a short job (one import of a small image, a probe client) needs
 * few of them.
 * A queued job that no waiting worker will take starts one more, up to
 * ra-max-background, and workers never stop before the cache does.
 * Jobs queued behind a connection (the workers wait for one) or held
 * back by congestion count as waited for by the workers waiting, so
 * they start no more workers than the queue holds jobs.  If a worker
 * cannot be started, the jobs wait for those there are (at least one,
 * started with the cache).
 */
void
rc_workers_grow (struct rc_cache *c)
{
  int e;

  if (c->q.stopping || c->nworkers >= c->max_workers ||
      atomic_load (&c->q.queued) <= c->idle_workers)
    return;
  if ((e = worker_add (c)) != 0 && !c->grow_failed && c->be.log) {
    char msg[160];

    c->grow_failed = true;      /* said once */
    snprintf (msg, sizeof msg, "ra-cache: cannot start a background worker "
              "(%u running): %s", c->nworkers, strerror (e));
    c->be.log (c->be.opaque, true, msg);
  }
}

int
rc_workers_start (struct rc_cache *c, unsigned n)
{
  struct rc_pool_hooks hooks = {
    .opaque = c, .usable = pool_usable, .none_open = pool_none_open,
  };
  unsigned nconn;
  int e = 0;

  rc_pool_init (&c->pool);
  c->max_workers = n;
  c->workers = calloc (n, sizeof *c->workers);
  if (!c->workers)
    e = errno;
  else if ((e = worker_add (c)) == 0) {
    nconn = rc_backend_connections (&c->cfg, c->be.one_call_per_ctx);
    if (rc_pool_start (&c->pool, &c->be, nconn < n ? nconn : n, &c->stats,
                       &hooks) == 0)
      return 0;
    e = errno;
  }
  rc_workers_stop (c);
  rc_workers_join (c);
  errno = e;
  return -1;
}

void
rc_workers_stop (struct rc_cache *c)
{
  unsigned i, n;

  /* Queued jobs are abandoned: their pages go back to absent and any
   * client waiting for them gets ESHUTDOWN.
   */
  rc_jobq_stop (c);
  /* No worker starts once the queue is stopping (rc_workers_grow). */
  ACQUIRE_LOCK (&c->q.lock);
  n = c->nworkers;
  RELEASE_LOCK (&c->q.lock);
  for (i = 0; i < n; i++)
    pthread_join (c->workers[i], NULL);
  free (c->workers);
  c->workers = NULL;
  c->nworkers = 0;
  rc_pool_stop (&c->pool);
}

void
rc_workers_join (struct rc_cache *c)
{
  rc_pool_join (&c->pool);
}

void
rc_cache_connect (struct rc_cache *c)
{
  rc_pool_connect (&c->pool);
}

void
rc_cache_disconnect (struct rc_cache *c)
{
  rc_pool_disconnect (&c->pool);
}

void
rc_cache_open_begin (struct rc_cache *c, struct rc_client_open *o)
{
  rc_pool_open_begin (&c->pool, o);
}

void
rc_cache_open_end (struct rc_cache *c, struct rc_client_open *o, bool ok)
{
  rc_pool_open_end (&c->pool, o, ok);
}

unsigned
rc_cache_connections (struct rc_cache *c)
{
  return atomic_load (&c->pool.nopen_now);
}

unsigned
rc_cache_connection_limit (struct rc_cache *c)
{
  return atomic_load (&c->pool.limit_now);
}
