/* ra-cache: backend I/O: the background workers and their connections,
 * the backend reads, and the completion a client waits on (rc_wait).
 *
 * Every backend read covers a batch of contiguous pages that ra_submit
 * inserted in flight (at most io_max bytes).  A batch of a window's sync
 * part is read by the client thread that waits for it (or, when the sync
 * part has several batches, partly by workers in parallel); a batch of
 * the async part is queued for the background workers and never delays
 * the client that triggered it.  Sync jobs are queued ahead of async
 * jobs so a waiting client never waits behind speculation.
 *
 * The workers share a few backend connections of their own (contexts
 * from struct rc_backend's worker_open), opened by a connector thread
 * (see "Background backend connections" below).  A worker takes a job
 * only while one is open; while none is, async parts are dropped and
 * clients read their sync batches themselves.
 *
 * In-flight accounting: executing counts backend reads running now (a
 * client's own and the workers'), queued the jobs waiting for a worker.
 * Every backend read of pages, when it completes, is a sample for the
 * congestion estimator (src/congestion.c): its latency, its size and
 * the reads running when it started.  A worker starts an async job only
 * when rc_cong_decide says so: in adaptive mode only while the
 * estimated backend slots leave one free for the next sync read
 * (counted once per job as "held"); in kernel mode with
 * ra-congestion=wait only below the congestion threshold (counted once
 * per job as "delayed").  Sync jobs always start.
 */

#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache-internal.h"
#include "racache/util.h"

void
rc_wait_init (struct rc_wait *w, ra_pgoff need_start, ra_pgoff need_end)
{
  pthread_mutex_init (&w->lock, NULL);
  pthread_cond_init (&w->done, NULL);
  w->pending = 0;
  w->need_start = need_start;
  w->need_end = need_end;
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

/* A job of group w, pages [start, start + count), ended with err. */
static void
wait_finish (struct rc_wait *w, int err, ra_pgoff start, ra_pgoff count)
{
  ACQUIRE_LOCK (&w->lock);
  if (err && !w->err && start < w->need_end && start + count > w->need_start)
    w->err = err;
  /* Signal while holding the lock: the waiter may destroy w as soon as
   * it sees pending == 0.
   */
  if (--w->pending == 0)
    pthread_cond_broadcast (&w->done);
  RELEASE_LOCK (&w->lock);
}

static struct rc_job *steal_job (struct rc_cache *c, struct rc_wait *w);
static void finish_job (struct rc_cache *c, struct rc_job *j, int r,
                        int err);

/* Returns the first error of the group, or 0.  The waiting client first
 * reads, with its own context ctx, every job of the group that no
 * worker has started: so it never waits for a worker that is busy or
 * has no backend connection.
 */
int
rc_wait_for (struct rc_cache *c, void *ctx, struct rc_wait *w)
{
  struct rc_job *j;
  int err;

  while ((j = steal_job (c, w)) != NULL) {
    int r;

    err = 0;
    r = rc_backend_read_pages (c, ctx, j->start, j->count, &err);
    finish_job (c, j, r, err);
  }
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

  stat_max (&c->stats.inflight_high_water, n);
}

/* A backend read finished: a held-back async job may start now. */
static void
inflight_done (struct rc_cache *c)
{
  atomic_fetch_sub (&c->executing, 1);
  if ((c->cong.learn || c->cfg.congestion == RC_CONGESTION_WAIT) &&
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

static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}

/* A backend read of len bytes ran from t0 to t1 with inflight reads
 * of inflight_bytes running at its start (itself included): a sample
 * for the estimator.
 */
static void
cong_sample (struct rc_cache *c, uint64_t t0, uint64_t t1, uint64_t len,
             unsigned inflight, uint64_t inflight_bytes, bool sync)
{
  struct rc_cong_sample cs = {
    .start_ns = t0, .end_ns = t1, .bytes = len, .inflight = inflight,
    .inflight_bytes = inflight_bytes, .sync = sync,
  };

  ACQUIRE_LOCK (&c->cong_lock);
  rc_cong_sample (&c->cong, &cs);
  RELEASE_LOCK (&c->cong_lock);
}

/* Read the in-flight pages [start, start + count) into buf and complete
 * them (used: buf is a client's, who has read them; sync: a client waits
 * for them).  The caller has already counted this read with
 * inflight_add.
 */
static int
read_pages_used (struct rc_cache *c, void *ctx, ra_pgoff start,
                 ra_pgoff count, char *buf, bool used, bool sync, int *err)
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
    unsigned inflight = atomic_load (&c->executing);
    uint64_t ibytes = atomic_fetch_add (&c->executing_bytes, len) + len;
    uint64_t t0 = now_ns (), t1;

    r = rc_backend_read_bytes (c, ctx, buf, len, offset, err);
    atomic_fetch_sub (&c->executing_bytes, len);
    if (r == 0) {
      t1 = now_ns ();
      cong_sample (c, t0, t1, len, inflight, ibytes, sync);
      /* Adaptive mode: the backend model learns from every read. */
      if (c->params.mode == RA_MODE_ADAPTIVE) {
        ACQUIRE_LOCK (&c->model_lock);
        ra_model_sample (&c->model, count, t1 - t0);
        RELEASE_LOCK (&c->model_lock);
      }
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
            char *buf, bool sync, int *err)
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
  r = read_pages_used (c, ctx, start, count, buf, false, sync, err);
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
  unsigned inflight;
  uint64_t t0, ibytes;
  int r;

  inflight_add (c);
  inflight = atomic_load (&c->executing);
  ibytes = atomic_fetch_add (&c->executing_bytes, count) + count;
  t0 = now_ns ();
  r = rc_backend_read_bytes (c, ctx, buf, count, offset, err);
  atomic_fetch_sub (&c->executing_bytes, count);
  if (r == 0)
    cong_sample (c, t0, now_ns (), count, inflight, ibytes, true);
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
  return read_pages (c, ctx, start, count, NULL, true, err);
}

/* A client's read around the cache (src/cache.c): a sync read straight
 * into its buffer, no pages.
 */
int
rc_backend_read_around (struct rc_cache *c, void *ctx, void *buf,
                        uint32_t count, uint64_t offset, int *err)
{
  STAT_ADD (&c->stats, backend_reads_in_place, 1);
  return rc_backend_read_direct (c, ctx, buf, count, offset, err);
}

int
rc_backend_read_pages_to (struct rc_cache *c, void *ctx, ra_pgoff start,
                          ra_pgoff count, char *dst, int *err)
{
  STAT_ADD (&c->stats, backend_reads_in_place, 1);
  inflight_add (c);
  return read_pages_used (c, ctx, start, count, dst, true, true, err);
}

/* Does a client wait for a page of [start, start + count) whose job
 * was not queued yet (rc_promote)?  Called with c->qlock held.
 */
static bool
promote_pending (struct rc_cache *c, ra_pgoff start, ra_pgoff count)
{
  struct rc_promotion *pr;

  for (pr = c->promotions; pr; pr = pr->next)
    if (pr->index >= start && pr->index < start + count)
      return true;
  return false;
}

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
      wait_finish (wait, ENOMEM, start, count);
    }
    return;
  }
  j->next = NULL;
  j->start = start;
  j->count = count;
  j->async = async;
  j->wait = wait;
  j->delayed = false;
  j->held = false;
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
  if (!wait && c->pool.nopen == 0) {
    /* No worker can read it (no background connection), and no client
     * waits to read it itself: drop it, its pages go back to absent.
     */
    RELEASE_LOCK (&c->qlock);
    rc_pc_complete (c->pc, start, count, NULL, 0, ENOTCONN);
    finish_job (c, j, -1, ENOTCONN);
    return;
  }
  atomic_fetch_add (&c->queued, 1);
  if (async && promote_pending (c, start, count)) {
    STAT_ADD (&c->stats, async_promoted, 1);
    async = false;              /* a client waits for it already */
  }
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
 * job, if the congestion decision lets it start now (all = true ignores
 * that, for shutdown).  Called with c->qlock held.
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
    switch (all ? RC_CONG_GO : rc_congestion (c, RC_CONG_ISSUE, 0, 0)) {
    case RC_CONG_GO:
    case RC_CONG_COVERED:
      break;
    case RC_CONG_HOLD_LIMIT:
      if (!j->delayed) {
        j->delayed = true;
        STAT_ADD (&c->stats, async_delayed, 1);
      }
      return NULL;
    case RC_CONG_HOLD_ESTIMATE:
      if (!j->held) {
        j->held = true;
        STAT_ADD (&c->stats, async_held, 1);
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
 * still issued once); if it is not queued, it may be about to be (or it
 * is running, or done): register pr until the wait is over.
 */
void
rc_promote (struct rc_cache *c, ra_pgoff index, struct rc_promotion *pr)
{
  struct rc_job **pj, *j;

  pr->registered = false;
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
  if (!j) {
    pr->index = index;
    pr->registered = true;
    pr->next = c->promotions;
    c->promotions = pr;
  }
  RELEASE_LOCK (&c->qlock);
  if (j)
    pthread_cond_signal (&c->qcond);
}

void
rc_promote_end (struct rc_cache *c, struct rc_promotion *pr)
{
  struct rc_promotion **pp;

  if (!pr->registered)
    return;
  ACQUIRE_LOCK (&c->qlock);
  for (pp = &c->promotions; *pp; pp = &(*pp)->next)
    if (*pp == pr) {
      *pp = pr->next;
      break;
    }
  RELEASE_LOCK (&c->qlock);
  pr->registered = false;
}

static void
finish_job (struct rc_cache *c, struct rc_job *j, int r, int err)
{
  if (j->async)
    STAT_ADD (&c->stats, async_pages, r == 0 ? j->count : 0);
  if (j->wait)
    wait_finish (j->wait, r == 0 ? 0 : err, j->start, j->count);
  free (j);
}


/* Take a queued sync job of group w (for its waiting client), or NULL.
 * Called without c->qlock.
 */
static struct rc_job *
steal_job (struct rc_cache *c, struct rc_wait *w)
{
  struct rc_job **pj, *j;

  ACQUIRE_LOCK (&c->qlock);
  for (pj = &c->sync_head; (j = *pj) != NULL; pj = &j->next) {
    if (j->wait == w) {
      *pj = j->next;
      if (c->sync_tail == &j->next)
        c->sync_tail = pj;
      atomic_fetch_sub (&c->queued, 1);
      break;
    }
  }
  RELEASE_LOCK (&c->qlock);
  return j;
}

enum rc_cong_answer
rc_congestion (struct rc_cache *c, enum rc_cong_question q,
               unsigned n, uint64_t client_bytes)
{
  struct rc_cong_load l = {
    .executing = atomic_load (&c->executing),
    .queued = atomic_load (&c->queued),
    .new_reads = q == RC_CONG_EARLY ? n : 0,
    .client_reads = q == RC_CONG_WINDOW ? n : 0,
    .client_bytes = client_bytes,
    .window_bytes = c->cfg.ra_max / 2,
  };

  return rc_cong_decide (&c->cong, q, &l);
}

void
rc_cache_congestion (struct rc_cache *c, struct rc_cong_estimate *out)
{
  rc_cong_get (&c->cong, out);
}
/* ==== Background backend connections ===================================
 *
 * The workers share pool.n = min (ra-backend-connections, workers)
 * backend connections (contexts from worker_open; by default 1, or 4
 * when a connection carries one call at a time: rc_backend_connections
 * in racache/config.h).  One connector thread opens them, one at a
 * time, while a client is connected, from the first rc_cache_connect on
 * (so that a client connected to the backend first), and reopens a
 * broken one with backoff (100 ms doubling to 5 s).  A worker takes a
 * job only while a connection is open, and reads it through one of them
 * (round robin); no worker ever waits for an open.  While none is open,
 * async parts are dropped (src/cache.c treats it as congestion) and a
 * client reads its sync batches itself (rc_wait_for).  Connections stay
 * open while no client is connected: a backend whose opens are slow (a
 * login over a WAN) pays for them once.
 *
 * A slow open is not a connection limit.  A server that allows only
 * some connections (qemu-nbd: one by default) leaves the others in its
 * listen backlog: they are answered only when another connection goes.
 * That, and nothing else, is taken as evidence of a limit:
 *  - a background open answered right after a client left (within the
 *    time an open takes, plus a margin), having waited longer than an
 *    open takes (twice the longest lately, plus the margin): it waited
 *    in the backlog for that client's slot;
 *  - a client's own open (rc_cache_open_begin / _end) not answered
 *    within that time while background connections are open: they may
 *    hold the slot it waits for, so one is closed (one per such period).
 * Each lowers pool.limit to the connections kept and is counted
 * (backend_connections_late); the connection in question is closed, so
 * that its slot goes to the client waiting for it.  The limit rises by
 * one again after a backoff (RC_LIMIT_RETRY_MIN_NS, doubling with every
 * lowering up to RC_LIMIT_RETRY_MAX_NS; struct rc_backend may set
 * another start), and is lowered again if the server still limits.
 * "How long an open takes" is the longest successful open lately, the
 * clients' and the pool's own (open_ns).
 *
 * A worker read that fails with an errno of a dead connection marks its
 * connection broken; its last user closes it and the connector reopens
 * it.  When the last open connection breaks, the queued jobs that no
 * client waits to read itself are dropped.
 *
 * Shutdown: the workers are joined (they never block in an open), the
 * open connections closed (rc_workers_stop), and the connector joined
 * in rc_cache_free, however long the open it is in takes: what it
 * returns to (the plugin's code, nbdkit's context) is unloaded and freed
 * after the filter's cleanup, so it must have returned by then.  nbdkit
 * waits for its own clients' calls in the same way.  With no client
 * left, a server's backlog is empty and such an open is answered at once.
 */

#define RC_CONNECT_STALL_NS   (UINT64_C (3) * 1000000000)
#define RC_STALL_MARGIN_NS    (UINT64_C (250) * 1000000)
#define RC_BACKOFF_MIN_NS     (UINT64_C (100) * 1000000)
#define RC_BACKOFF_MAX_NS     (UINT64_C (5) * 1000000000)
#define RC_LIMIT_RETRY_MIN_NS (UINT64_C (30) * 1000000000)
#define RC_LIMIT_RETRY_MAX_NS (UINT64_C (1800) * 1000000000)
#define RC_SHUTDOWN_LOG_NS    (UINT64_C (1) * 1000000000)

static void
pool_log (struct rc_cache *c, bool error, const char *fmt, ...)
  __attribute__ ((format (printf, 3, 4)));

static void
pool_log (struct rc_cache *c, bool error, const char *fmt, ...)
{
  char msg[320];
  va_list ap;

  if (!c->be.log)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  c->be.log (c->be.opaque, error, msg);
}

/* The errors of a connection that is gone, as opposed to an error of
 * one read.  The nbd plugin (libnbd) fails every request on a handle
 * whose server went away with EINVAL ("invalid state: CLOSED"); a
 * worker's reads are always within the export, so EINVAL means that.
 */
static bool
conn_dead_errno (int err)
{
  switch (err) {
  case ENOTCONN: case ESHUTDOWN: case ECONNRESET: case ECONNABORTED:
  case EPIPE: case EBADF: case ECONNREFUSED: case EINVAL:
    return true;
  default:
    return false;
  }
}

static void
set_nopen (struct rc_pool *p, unsigned n)
{
  p->nopen = n;
  atomic_store (&p->nopen_now, n);
}

static void
set_limit (struct rc_pool *p, unsigned n)
{
  p->limit = n;
  atomic_store (&p->limit_now, n);
}

/* Wait on cond (a CLOCK_MONOTONIC condition) until deadline (monotonic
 * ns; UINT64_MAX: no deadline), a signal or a spurious wakeup.
 */
static void
cond_wait_until (pthread_cond_t *cond, pthread_mutex_t *lock,
                 uint64_t deadline)
{
  struct timespec ts;

  if (deadline == UINT64_MAX) {
    pthread_cond_wait (cond, lock);
    return;
  }
  ts.tv_sec = deadline / 1000000000;
  ts.tv_nsec = deadline % 1000000000;
  pthread_cond_timedwait (cond, lock, &ts);
}

static void
cond_init_monotonic (pthread_cond_t *cond)
{
  pthread_condattr_t a;

  pthread_condattr_init (&a);
  pthread_condattr_setclock (&a, CLOCK_MONOTONIC);
  pthread_cond_init (cond, &a);
  pthread_condattr_destroy (&a);
}

/* How long an open may take before it counts as unanswered. */
static uint64_t
stall_ns (const struct rc_pool *p)
{
  return 2 * p->open_ns + RC_STALL_MARGIN_NS;
}

/* An open (a client's or the pool's) took dt ns: open_ns follows the
 * longest lately (at once upwards, by an eighth of the gap downwards).
 * Called with c->qlock held.
 */
static void
note_open_ns (struct rc_pool *p, uint64_t dt)
{
  if (dt >= p->open_ns)
    p->open_ns = dt;
  else
    p->open_ns -= (p->open_ns - dt) / 8;
}

/* An open connection for a worker's next job, or NULL: one that no
 * worker is using, if a context carries one call at a time.  Called
 * with c->qlock held.
 */
static struct rc_conn *
pick_conn (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  unsigned i;

  if (p->nopen == 0)
    return NULL;
  for (i = 0; i < p->n; i++) {
    struct rc_conn *conn = &p->conn[(p->rr + i) % p->n];

    if (conn->state == RC_CONN_OPEN &&
        !(c->be.one_call_per_ctx && conn->users > 0)) {
      p->rr = (p->rr + i + 1) % p->n;
      return conn;
    }
  }
  return NULL;
}

/* No connection is open any more: drop the queued jobs no client will
 * read itself.  Called with c->qlock held.
 */
static void
drop_orphans (struct rc_cache *c)
{
  struct rc_job **pj, *j, *dropped = NULL;
  int k;

  for (k = 0; k < 2; k++) {
    struct rc_job **head = k == 0 ? &c->sync_head : &c->async_head;
    struct rc_job ***tail = k == 0 ? &c->sync_tail : &c->async_tail;

    pj = head;
    while ((j = *pj) != NULL) {
      if (j->wait) {
        pj = &j->next;
        continue;
      }
      *pj = j->next;
      if (*tail == &j->next)
        *tail = pj;
      atomic_fetch_sub (&c->queued, 1);
      if (k == 1)
        atomic_fetch_sub (&c->queued_async, 1);
      j->next = dropped;
      dropped = j;
    }
  }
  while ((j = dropped) != NULL) {
    dropped = j->next;
    rc_pc_complete (c->pc, j->start, j->count, NULL, 0, ENOTCONN);
    finish_job (c, j, -1, ENOTCONN);
  }
}

/* conn leaves the open connections (broken, or given up): its last user
 * closes it.  Called with c->qlock held.
 */
static void
conn_leave (struct rc_cache *c, struct rc_conn *conn)
{
  struct rc_pool *p = &c->pool;

  conn->state = RC_CONN_BROKEN;
  set_nopen (p, p->nopen - 1);
  if (p->nopen == 0)
    drop_orphans (c);
}

/* A read through conn found it dead.  Called with c->qlock held. */
static void
conn_broken (struct rc_cache *c, struct rc_conn *conn, int err)
{
  struct rc_pool *p = &c->pool;

  if (conn->state != RC_CONN_OPEN)
    return;
  conn_leave (c, conn);
  p->broken++;
  STAT_ADD (&c->stats, backend_connections_lost, 1);
  if (!p->outage_logged) {
    p->outage_logged = true;
    pool_log (c, true, "ra-cache: a background backend connection failed "
              "(%s): reopening it with backoff; clients are served "
              "meanwhile", strerror (err));
  }
  pthread_cond_signal (&p->ccond);
}

/* Close conn (no users).  Called with c->qlock held; drops it meanwhile. */
static void
conn_close (struct rc_cache *c, struct rc_conn *conn)
{
  void *ctx = conn->ctx;

  conn->state = RC_CONN_CLOSING;
  conn->ctx = NULL;
  RELEASE_LOCK (&c->qlock);
  if (c->be.worker_close)
    c->be.worker_close (c->be.opaque, ctx);
  ACQUIRE_LOCK (&c->qlock);
  conn->state = RC_CONN_CLOSED;
  pthread_cond_signal (&c->pool.ccond);
}

static void *
worker_main (void *arg)
{
  struct rc_cache *c = arg;

  /* No buffer of its own: a read goes straight into the pages' memory
   * when it lies in one piece, else through a bounce buffer of the
   * shared pool (read_pages), so that only as many buffers are ever
   * touched as reads needed one at once.
   */
  ACQUIRE_LOCK (&c->qlock);
  for (;;) {
    struct rc_conn *conn = NULL;
    struct rc_job *j = NULL;
    int r, err = 0;

    /* A connection first, then a job: a job never waits for an open. */
    if ((conn = pick_conn (c)) != NULL)
      j = dequeue (c, false);
    if (!j) {
      if (c->stopping)
        break;
      pthread_cond_wait (&c->qcond, &c->qlock);
      continue;
    }
    conn->users++;
    RELEASE_LOCK (&c->qlock);

    inflight_add (c);
    r = read_pages (c, conn->ctx, j->start, j->count, NULL, !j->async, &err);
    finish_job (c, j, r, err);

    ACQUIRE_LOCK (&c->qlock);
    conn->users--;
    if (r == -1 && conn_dead_errno (err))
      conn_broken (c, conn, err);
    if (conn->state == RC_CONN_BROKEN && conn->users == 0)
      conn_close (c, conn);
  }
  RELEASE_LOCK (&c->qlock);
  return NULL;
}

/* The server limits connections (see above): keep at most keep, and
 * try one more after the backoff.  Called with c->qlock held.
 */
static void
lower_limit (struct rc_cache *c, unsigned keep, uint64_t now,
             const char *why, double secs)
{
  struct rc_pool *p = &c->pool;

  p->limit_backoff_ns = p->limit_backoff_ns == 0 ? p->limit_retry_min_ns
    : p->limit_backoff_ns * 2 > RC_LIMIT_RETRY_MAX_NS ? RC_LIMIT_RETRY_MAX_NS
    : p->limit_backoff_ns * 2;
  p->limit_retry_ns = now + p->limit_backoff_ns;
  set_limit (p, keep);
  STAT_ADD (&c->stats, backend_connections_late, 1);
  pool_log (c, true, "ra-cache: %s after %.1f s: the server limits "
            "connections; keeping at most %u of %u background "
            "connections, trying one more in %.0f s", why, secs, keep,
            p->n, p->limit_backoff_ns / 1e9);
  pthread_cond_broadcast (&p->ready);
}

/* The backoff after a lowered limit has passed: allow one more.  Called
 * with c->qlock held.
 */
static void
raise_limit (struct rc_cache *c, uint64_t now)
{
  struct rc_pool *p = &c->pool;

  set_limit (p, p->limit + 1);
  p->limit_retry_ns = p->limit < p->n ? now + p->limit_backoff_ns : 0;
  pool_log (c, false, "ra-cache: trying %u background backend "
            "connection(s) again", p->limit);
}

/* The oldest client open under way, or NULL.  Called with c->qlock held. */
static const struct rc_client_open *
oldest_client_open (const struct rc_pool *p)
{
  const struct rc_client_open *o, *old = NULL;

  for (o = p->client_opens; o; o = o->next)
    if (!old || o->t0 < old->t0)
      old = o;
  return old;
}

/* A client's open has waited longer than an open takes while
 * background connections are open: close one, the slot it waits for may
 * be that one.  Returns true if it closed one (the caller looks again),
 * else lowers *wake to when to look again.  Called with c->qlock held;
 * may drop it.
 */
static bool
yield_to_client_open (struct rc_cache *c, uint64_t now, uint64_t *wake)
{
  struct rc_pool *p = &c->pool;
  const struct rc_client_open *o = oldest_client_open (p);
  struct rc_conn *conn = NULL;
  uint64_t due;
  unsigned i;

  if (!o || p->nopen == 0)
    return false;
  due = o->t0 + stall_ns (p);
  if (p->yielded_ns + stall_ns (p) > due)
    due = p->yielded_ns + stall_ns (p);
  if (now < due) {
    if (due < *wake)
      *wake = due;
    return false;
  }
  /* An idle one if there is one. */
  for (i = 0; i < p->n; i++)
    if (p->conn[i].state == RC_CONN_OPEN &&
        (!conn || p->conn[i].users < conn->users))
      conn = &p->conn[i];
  conn_leave (c, conn);
  p->yielded_ns = now;
  lower_limit (c, p->nopen, now, "a client's backend open was not "
               "answered while background connections were open",
               (now - o->t0) / 1e9);
  if (conn->users == 0)
    conn_close (c, conn);
  return true;
}

/* Waits until the connector has a closed slot to open: while a client
 * is connected, the pool is below its limit and the backoff after a
 * failure is over; meanwhile it yields to clients' opens and raises a
 * lowered limit when its time comes.  Returns NULL if it waited or
 * closed a connection (the caller looks again), else the slot, with
 * *busy the slots not closed.  Called with c->qlock held; drops it
 * while waiting.
 */
static struct rc_conn *
wait_for_slot (struct rc_cache *c, unsigned *busy)
{
  struct rc_pool *p = &c->pool;
  struct rc_conn *slot = NULL;
  uint64_t now = now_ns (), wake = UINT64_MAX;
  unsigned i;

  if (yield_to_client_open (c, now, &wake))
    return NULL;
  if (p->limit < p->n && p->limit_retry_ns != 0) {
    if (now >= p->limit_retry_ns)
      raise_limit (c, now);
    else if (p->limit_retry_ns < wake)
      wake = p->limit_retry_ns;
  }
  *busy = 0;
  for (i = 0; i < p->n; i++) {
    if (p->conn[i].state == RC_CONN_CLOSED) {
      if (!slot)
        slot = &p->conn[i];
    }
    else
      (*busy)++;              /* open, or still closing after a break */
  }
  if (p->clients > 0 && slot && *busy < p->limit) {
    if (now >= p->next_try_ns)
      return slot;
    if (p->next_try_ns < wake)
      wake = p->next_try_ns;
  }
  cond_wait_until (&p->ccond, &c->qlock, wake);
  return NULL;
}

/* worker_open failed: slot is closed again, and the next try waits for
 * a backoff that doubles with each failure in a row.  Called with
 * c->qlock held.
 */
static void
back_off (struct rc_cache *c, struct rc_conn *slot)
{
  struct rc_pool *p = &c->pool;
  uint64_t backoff = RC_BACKOFF_MIN_NS << (p->failures < 6 ? p->failures : 6);

  slot->state = RC_CONN_CLOSED;
  p->failures++;
  if (backoff > RC_BACKOFF_MAX_NS)
    backoff = RC_BACKOFF_MAX_NS;
  p->next_try_ns = now_ns () + backoff;
  STAT_ADD (&c->stats, backend_connection_failures, 1);
  if (!p->outage_logged) {
    p->outage_logged = true;
    pool_log (c, true, "ra-cache: cannot open a background backend "
              "connection: retrying with backoff; clients are served "
              "meanwhile");
  }
  pthread_cond_broadcast (&p->ready);
}

/* Was an open that ran from t0 to t1 answered only because a client
 * left (it waited in the server's backlog for that client's slot)?
 * stall: stall_ns when it started.  Called with c->qlock held.
 */
static bool
answered_when_client_left (const struct rc_pool *p, uint64_t t0, uint64_t t1,
                           uint64_t stall)
{
  return t1 - t0 > stall && p->last_leave_ns > t0 &&
    t1 - p->last_leave_ns <= p->open_ns + RC_STALL_MARGIN_NS;
}

/* slot holds a new open connection: the workers may use it.  Called
 * with c->qlock held.
 */
static void
conn_opened (struct rc_cache *c, struct rc_conn *slot)
{
  struct rc_pool *p = &c->pool;

  slot->state = RC_CONN_OPEN;
  set_nopen (p, p->nopen + 1);
  p->failures = 0;
  STAT_ADD (&c->stats, backend_connection_opens, 1);
  if (p->broken > 0) {
    p->broken--;
    STAT_ADD (&c->stats, backend_reconnects, 1);
    if (p->outage_logged)
      pool_log (c, false, "ra-cache: background backend connection "
                "reopened");
  }
  p->outage_logged = false;
  pthread_cond_broadcast (&c->qcond);
  pthread_cond_broadcast (&p->ready);
}

/* Open slot, without c->qlock, and keep it, or close it again.  Called
 * with c->qlock held.
 */
static void
open_slot (struct rc_cache *c, struct rc_conn *slot, unsigned busy)
{
  struct rc_pool *p = &c->pool;
  uint64_t t0 = now_ns (), t1, stall = stall_ns (p);
  void *ctx;

  slot->state = RC_CONN_OPENING;
  p->in_open = true;
  atomic_store (&p->open_started_ns, t0);
  atomic_store (&p->opening, true);
  RELEASE_LOCK (&c->qlock);
  ctx = c->be.worker_open (c->be.opaque);
  ACQUIRE_LOCK (&c->qlock);
  t1 = now_ns ();
  p->in_open = false;
  atomic_store (&p->opening, false);
  if (!ctx) {
    back_off (c, slot);
    return;
  }
  slot->ctx = ctx;
  if (c->stopping) {
    conn_close (c, slot);
    return;
  }
  if (answered_when_client_left (p, t0, t1, stall)) {
    /* Give the slot back at once to whoever waits behind it. */
    lower_limit (c, busy, t1, "a background backend connection was "
                 "answered only when a client left", (t1 - t0) / 1e9);
    conn_close (c, slot);
    return;
  }
  note_open_ns (p, t1 - t0);
  conn_opened (c, slot);
}

/* The connector thread: opens the pool's connections, one at a time. */
static void *
connector_main (void *arg)
{
  struct rc_cache *c = arg;
  struct rc_pool *p = &c->pool;

  ACQUIRE_LOCK (&c->qlock);
  while (!c->stopping) {
    struct rc_conn *slot;
    unsigned busy;

    slot = wait_for_slot (c, &busy);
    if (slot)
      open_slot (c, slot, busy);
  }
  p->connector_exited = true;
  pthread_cond_broadcast (&p->ready);
  RELEASE_LOCK (&c->qlock);
  return NULL;
}

bool
rc_workers_ready (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  uint64_t t0;

  if (atomic_load (&p->nopen_now) > 0)
    return true;
  /* One log line when the first open has waited too long (a server that
   * accepts one connection holds it in its backlog).
   */
  if (atomic_load (&p->opening) && !atomic_load (&p->stall_logged) &&
      (t0 = atomic_load (&p->open_started_ns)) != 0 &&
      now_ns () - t0 >= RC_CONNECT_STALL_NS &&
      !atomic_exchange (&p->stall_logged, true))
    pool_log (c, true, "ra-cache: the backend has not accepted a "
              "background connection in %.0f s (does it allow only one "
              "connection?): readahead goes on without background reads",
              (now_ns () - t0) / 1e9);
  return false;
}

/* How long a connecting client waits for the background connections,
 * so that its first windows are read ahead like the later ones.
 */
#define RC_CONNECT_WAIT_NS (UINT64_C (200) * 1000000)

void
rc_cache_connect (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  uint64_t deadline = now_ns () + RC_CONNECT_WAIT_NS;

  ACQUIRE_LOCK (&c->qlock);
  if (p->clients++ == 0)
    pthread_cond_signal (&p->ccond);
  /* Not while opens fail (backoff), nor beyond the limit. */
  while (p->has_connector && p->nopen < p->limit && p->failures == 0 &&
         !c->stopping && now_ns () < deadline)
    cond_wait_until (&p->ready, &c->qlock, deadline);
  RELEASE_LOCK (&c->qlock);
}

void
rc_cache_disconnect (struct rc_cache *c)
{
  ACQUIRE_LOCK (&c->qlock);
  if (c->pool.clients > 0)
    c->pool.clients--;
  c->pool.last_leave_ns = now_ns ();
  RELEASE_LOCK (&c->qlock);
}

void
rc_cache_open_begin (struct rc_cache *c, struct rc_client_open *o)
{
  ACQUIRE_LOCK (&c->qlock);
  o->t0 = now_ns ();
  o->next = c->pool.client_opens;
  c->pool.client_opens = o;
  pthread_cond_signal (&c->pool.ccond);
  RELEASE_LOCK (&c->qlock);
}

void
rc_cache_open_end (struct rc_cache *c, struct rc_client_open *o, bool ok)
{
  struct rc_client_open **po;

  ACQUIRE_LOCK (&c->qlock);
  for (po = &c->pool.client_opens; *po; po = &(*po)->next)
    if (*po == o) {
      *po = o->next;
      break;
    }
  if (ok)
    note_open_ns (&c->pool, now_ns () - o->t0);
  RELEASE_LOCK (&c->qlock);
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

static int
pool_start (struct rc_cache *c, unsigned nworkers)
{
  struct rc_pool *p = &c->pool;
  unsigned i;
  int e;

  p->limit_retry_min_ns = c->be.limit_retry_ns ? c->be.limit_retry_ns
    : RC_LIMIT_RETRY_MIN_NS;
  p->n = rc_backend_connections (&c->cfg, c->be.one_call_per_ctx);
  if (p->n > nworkers)
    p->n = nworkers;
  set_limit (p, p->n);
  if (p->n == 0)
    return 0;
  p->conn = calloc (p->n, sizeof *p->conn);
  if (!p->conn)
    return -1;
  if (!c->be.worker_open) {
    /* No contexts to open: every connection is open (ctx NULL). */
    for (i = 0; i < p->n; i++)
      p->conn[i].state = RC_CONN_OPEN;
    set_nopen (p, p->n);
    return 0;
  }
  e = pthread_create (&p->connector, NULL, connector_main, c);
  if (e != 0) {
    errno = e;
    return -1;
  }
  p->has_connector = true;
  return 0;
}

/* After the workers have stopped: close every open connection; the
 * connector leaves when the open it may be in returns (pool_join).
 */
static void
pool_stop (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  unsigned i;

  ACQUIRE_LOCK (&c->qlock);
  pthread_cond_broadcast (&p->ccond);
  for (i = 0; i < p->n && p->conn; i++) {
    struct rc_conn *conn = &p->conn[i];

    if (conn->state == RC_CONN_OPEN || conn->state == RC_CONN_BROKEN) {
      if (c->be.worker_open)
        conn_close (c, conn);
      else
        conn->state = RC_CONN_CLOSED;
    }
  }
  set_nopen (p, 0);
  RELEASE_LOCK (&c->qlock);
}

/* Join the connector: it returns from an open under way (and closes
 * what it opened) before the cache, and the filter, go away.
 */
static void
pool_join (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;

  if (p->has_connector) {
    uint64_t t0 = now_ns ();
    bool logged = false;

    ACQUIRE_LOCK (&c->qlock);
    pthread_cond_broadcast (&p->ccond);
    while (!p->connector_exited) {
      if (!logged && p->in_open && now_ns () - t0 >= RC_SHUTDOWN_LOG_NS) {
        logged = true;
        pool_log (c, false, "ra-cache: waiting at shutdown for a "
                  "background backend open under way to return");
      }
      cond_wait_until (&p->ready, &c->qlock,
                       logged ? UINT64_MAX : t0 + RC_SHUTDOWN_LOG_NS);
    }
    RELEASE_LOCK (&c->qlock);
    pthread_join (p->connector, NULL);
    p->has_connector = false;
  }
  free (p->conn);
  p->conn = NULL;
  p->n = 0;
  pthread_cond_destroy (&p->ccond);
  pthread_cond_destroy (&p->ready);
}

int
rc_workers_start (struct rc_cache *c, unsigned n)
{
  unsigned i;
  int e;

  cond_init_monotonic (&c->pool.ccond);
  cond_init_monotonic (&c->pool.ready);
  c->workers = calloc (n, sizeof *c->workers);
  if (!c->workers)
    e = errno;
  else {
    for (i = 0; i < n; i++) {
      e = pthread_create (&c->workers[i], NULL, worker_main, c);
      if (e != 0)
        break;
    }
    c->nworkers = i;
    if (i == n && pool_start (c, n) == 0)
      return 0;
    if (i == n)
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
  pool_stop (c);
}

void
rc_workers_join (struct rc_cache *c)
{
  pool_join (c);
}
