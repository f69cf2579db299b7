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
 * was not queued yet (rc_promote)?  Takes the entry.  Called with
 * c->qlock held.
 */
static bool
promote_pending (struct rc_cache *c, ra_pgoff start, ra_pgoff count)
{
  unsigned i;

  for (i = 0; i < RC_PROMOTE_PENDING; i++)
    if (c->promote_pending[i] != RA_NO_MARKER &&
        c->promote_pending[i] >= start &&
        c->promote_pending[i] < start + count) {
      c->promote_pending[i] = RA_NO_MARKER;
      return true;
    }
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
 * still issued once).
 */
void
rc_promote (struct rc_cache *c, ra_pgoff index)
{
  struct rc_job **pj, *j;

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
  /* Not queued: its job may be about to be (or it is running, or
   * done: then the entry is stale and harmless).
   */
  if (!j) {
    c->promote_pending[c->promote_next] = index;
    c->promote_next = (c->promote_next + 1) % RC_PROMOTE_PENDING;
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

/* ==== Background backend connections ===================================
 *
 * The workers share pool.n = min (ra-backend-connections, workers)
 * backend connections (contexts from worker_open; by default 1, or 4
 * when a connection carries one call at a time: rc_backend_connections
 * in racache/config.h).  One connector
 * thread opens them, one at a time, from the first rc_cache_connect on
 * (so that a client connected to the backend first), and reopens a
 * broken one with backoff (100 ms doubling to 5 s).  A worker takes a
 * job only while a connection is open, and reads it through one of
 * them (round robin); no worker ever waits for an open.  While none is
 * open, async parts are dropped (src/cache.c treats it as congestion)
 * and a client reads its sync batches itself (rc_wait_for).
 *
 * A server that allows only some connections (qemu-nbd: one by
 * default) leaves the others in its listen backlog: their open never
 * completes while the clients hold the slots.  An open still under way
 * after RC_CONNECT_STALL_NS is logged once; the connections open then
 * are all ra-cache keeps from then on (pool.limit), and the stalled open,
 * if it completes at all (when a client disconnects and frees its slot),
 * is closed at once, so that the slot goes to the next client waiting
 * behind it in the backlog.
 *
 * A worker read that fails with an errno of a dead connection marks its
 * connection broken; its last user closes it and the connector reopens
 * it.  When the last open connection breaks, the queued jobs that no
 * client waits to read itself are dropped.
 *
 * Shutdown: the workers are joined (they never block in an open); the
 * connector is given RC_CONNECT_JOIN_NS to leave an open under way,
 * then abandoned (detached): its state (struct rc_connector) outlives
 * the cache, and if the open ever returns it closes the context and
 * exits without touching the cache.
 */

#define RC_CONNECT_STALL_NS (UINT64_C (3) * 1000000000)
#define RC_CONNECT_JOIN_NS  (UINT64_C (1) * 1000000000)
#define RC_BACKOFF_MIN_NS   (UINT64_C (100) * 1000000)
#define RC_BACKOFF_MAX_NS   (UINT64_C (5) * 1000000000)

struct rc_connector {
  struct rc_cache *c;           /* not to be used once abandoned */
  struct rc_backend be;
  pthread_t thread;
  bool in_open, abandoned, exited; /* under connector_lock */
};
static pthread_mutex_t connector_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t
mono_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec;
}

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

/* A read through conn found it dead.  Called with c->qlock held. */
static void
conn_broken (struct rc_cache *c, struct rc_conn *conn, int err)
{
  struct rc_pool *p = &c->pool;

  if (conn->state != RC_CONN_OPEN)
    return;
  conn->state = RC_CONN_BROKEN;
  set_nopen (p, p->nopen - 1);
  p->broken++;
  STAT_ADD (&c->stats, backend_connections_lost, 1);
  if (!p->outage_logged) {
    p->outage_logged = true;
    pool_log (c, true, "ra-cache: a background backend connection failed "
              "(%s): reopening it with backoff; clients are served "
              "meanwhile", strerror (err));
  }
  if (p->nopen == 0)
    drop_orphans (c);
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

/* No client is connected: close the open connections (a worker still
 * reading through one closes it when done), so that a server that
 * limits connections has its slots free for the next client.  Returns
 * true if it dropped c->qlock.  Called with c->qlock held.
 */
static bool
retire_idle (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  unsigned i;

  for (i = 0; i < p->n; i++) {
    struct rc_conn *conn = &p->conn[i];

    if (conn->state != RC_CONN_OPEN)
      continue;
    set_nopen (p, p->nopen - 1);
    if (p->nopen == 0)
      drop_orphans (c);
    if (conn->users > 0)
      conn->state = RC_CONN_BROKEN;
    else {
      conn_close (c, conn);
      return true;
    }
  }
  return false;
}

#define RC_RETIRE_DELAY_NS (UINT64_C (100) * 1000000)

/* The connector waits on its condition for at most ns. */
static void
timedwait_ns (struct rc_cache *c, uint64_t ns)
{
  struct timespec ts;
  uint64_t wake;

  clock_gettime (CLOCK_REALTIME, &ts);
  wake = (uint64_t) ts.tv_sec * 1000000000 + (uint64_t) ts.tv_nsec + ns;
  ts.tv_sec = wake / 1000000000;
  ts.tv_nsec = wake % 1000000000;
  pthread_cond_timedwait (&c->pool.ccond, &c->qlock, &ts);
}

/* Waits until the connector has a closed slot to open: after the retire
 * delay, while a client is connected, the pool is below its limit and
 * the backoff after a failure is over.  Returns NULL if it waited or
 * retired a connection (the caller looks again), else the slot, with
 * *busy the slots not closed and *t0 the time of the choice.  Called
 * with c->qlock held; drops it while waiting.
 */
static struct rc_conn *
wait_for_slot (struct rc_cache *c, unsigned *busy, uint64_t *t0)
{
  struct rc_pool *p = &c->pool;
  struct rc_conn *slot = NULL;
  unsigned i;

  *busy = 0;
  for (i = 0; i < p->n; i++) {
    if (p->conn[i].state == RC_CONN_CLOSED) {
      if (!slot)
        slot = &p->conn[i];
    }
    else
      (*busy)++;              /* open, or still closing after a break */
  }
  *t0 = mono_ns ();
  /* Retire RC_RETIRE_DELAY_NS after the last client left: nbdkit
   * closes that client's own plugin context after the filter's close
   * returns, without the filter's lock; a serializing plugin must not
   * see our close overlap it.
   */
  if (p->clients == 0 && p->nopen > 0 &&
      *t0 < p->last_leave_ns + RC_RETIRE_DELAY_NS) {
    timedwait_ns (c, p->last_leave_ns + RC_RETIRE_DELAY_NS - *t0);
    return NULL;
  }
  if (p->clients == 0 && retire_idle (c))
    return NULL;
  if (p->clients == 0 || !slot || *busy >= p->limit) {
    pthread_cond_wait (&p->ccond, &c->qlock);
    return NULL;
  }
  if (*t0 < p->next_try_ns) {
    timedwait_ns (c, p->next_try_ns - *t0);
    return NULL;
  }
  return slot;
}

/* Calls the backend's worker_open, without c->qlock.  Returns false if
 * the cache was abandoned meanwhile: then it has closed what it opened
 * and freed cn, and the caller touches nothing of either.
 */
static bool
open_unlocked (struct rc_connector *cn, void **ctx)
{
  bool abandoned;

  ACQUIRE_LOCK (&connector_lock);
  cn->in_open = true;
  RELEASE_LOCK (&connector_lock);
  *ctx = cn->be.worker_open (cn->be.opaque);
  ACQUIRE_LOCK (&connector_lock);
  cn->in_open = false;
  abandoned = cn->abandoned;
  RELEASE_LOCK (&connector_lock);
  if (abandoned) {
    /* The cache is gone: touch nothing of it. */
    if (*ctx && cn->be.worker_close)
      cn->be.worker_close (cn->be.opaque, *ctx);
    free (cn);
    return false;
  }
  return true;
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
  p->next_try_ns = mono_ns () + backoff;
  STAT_ADD (&c->stats, backend_connection_failures, 1);
  if (!p->outage_logged) {
    p->outage_logged = true;
    pool_log (c, true, "ra-cache: cannot open a background backend "
              "connection: retrying with backoff; clients are served "
              "meanwhile");
  }
}

/* Whether a connection that worker_open returned after dt ns is to be
 * closed again at once: the cache is stopping, no client is left, or it
 * took so long that it waited in the server's backlog.  An open that
 * came late also lowers the pool's limit: the server limits
 * connections.  Called with c->qlock held.
 */
static bool
unwanted_open (struct rc_cache *c, uint64_t dt, unsigned busy)
{
  struct rc_pool *p = &c->pool;

  if (!c->stopping && p->clients == 0 && dt < RC_CONNECT_STALL_NS &&
      p->limit > p->max_open) {
    /* It completed only once every client had gone: the server
     * limits connections (the last client's slot went to it).  Keep
     * no more than were open at once before.
     */
    p->limit = p->max_open;
    STAT_ADD (&c->stats, backend_connections_late, 1);
    pool_log (c, false, "ra-cache: a background backend connection "
              "opened only when the last client left: keeping at most "
              "%u", p->limit);
  }
  if (!c->stopping && dt >= RC_CONNECT_STALL_NS) {
    /* It waited in the server's backlog until a client left: keep
     * only what was open before, and give the slot back at once to
     * whoever waits behind it.
     */
    STAT_ADD (&c->stats, backend_connections_late, 1);
    p->limit = busy;
    pool_log (c, true, "ra-cache: a background backend connection "
              "opened only after %.1f s (the server limits "
              "connections?): closed again; keeping %u of %u",
              dt / 1e9, p->limit, p->n);
  }
  return c->stopping || p->clients == 0 || dt >= RC_CONNECT_STALL_NS;
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
  if (p->nopen > p->max_open)
    p->max_open = p->nopen;
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
}

/* The connector thread: opens the pool's connections, one at a time. */
static void *
connector_main (void *arg)
{
  struct rc_connector *cn = arg;
  struct rc_cache *c = cn->c;
  struct rc_pool *p = &c->pool;

  ACQUIRE_LOCK (&c->qlock);
  while (!c->stopping) {
    struct rc_conn *slot;
    unsigned busy;
    uint64_t t0, dt;
    void *ctx;

    slot = wait_for_slot (c, &busy, &t0);
    if (!slot)
      continue;
    slot->state = RC_CONN_OPENING;
    atomic_store (&p->open_started_ns, t0);
    atomic_store (&p->opening, true);
    RELEASE_LOCK (&c->qlock);

    if (!open_unlocked (cn, &ctx))
      return NULL;

    dt = mono_ns () - t0;
    ACQUIRE_LOCK (&c->qlock);
    atomic_store (&p->opening, false);
    if (!ctx) {
      back_off (c, slot);
      continue;
    }
    slot->ctx = ctx;
    if (unwanted_open (c, dt, busy))
      conn_close (c, slot);
    else
      conn_opened (c, slot);
  }
  RELEASE_LOCK (&c->qlock);

  ACQUIRE_LOCK (&connector_lock);
  cn->exited = true;
  RELEASE_LOCK (&connector_lock);
  return NULL;
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
      mono_ns () - t0 >= RC_CONNECT_STALL_NS &&
      !atomic_exchange (&p->stall_logged, true))
    pool_log (c, true, "ra-cache: the backend has not accepted a "
              "background connection in %.0f s (does it allow only one "
              "connection?): readahead goes on without background reads",
              (mono_ns () - t0) / 1e9);
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
  uint64_t deadline = mono_ns () + RC_CONNECT_WAIT_NS;

  ACQUIRE_LOCK (&c->qlock);
  if (p->clients++ == 0)
    pthread_cond_signal (&p->ccond);
  /* Not while opens fail (backoff), nor beyond what the server was
   * seen to accept.
   */
  while (p->cn && p->nopen < p->limit && p->failures == 0 &&
         !c->stopping && mono_ns () < deadline) {
    struct timespec ts = { .tv_nsec = 2000000 };

    RELEASE_LOCK (&c->qlock);
    nanosleep (&ts, NULL);
    ACQUIRE_LOCK (&c->qlock);
  }
  RELEASE_LOCK (&c->qlock);
}

void
rc_cache_disconnect (struct rc_cache *c)
{
  ACQUIRE_LOCK (&c->qlock);
  if (c->pool.clients > 0 && --c->pool.clients == 0) {
    c->pool.last_leave_ns = mono_ns ();
    pthread_cond_signal (&c->pool.ccond);
  }
  RELEASE_LOCK (&c->qlock);
}

unsigned
rc_cache_connections (struct rc_cache *c)
{
  return atomic_load (&c->pool.nopen_now);
}

static int
pool_start (struct rc_cache *c, unsigned nworkers)
{
  struct rc_pool *p = &c->pool;
  unsigned i;
  int e;

  pthread_cond_init (&p->ccond, NULL);
  p->n = rc_backend_connections (&c->cfg, c->be.one_call_per_ctx);
  if (p->n > nworkers)
    p->n = nworkers;
  p->limit = p->n;
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
  p->cn = calloc (1, sizeof *p->cn);
  if (!p->cn)
    return -1;
  p->cn->c = c;
  p->cn->be = c->be;
  e = pthread_create (&p->cn->thread, NULL, connector_main, p->cn);
  if (e != 0) {
    free (p->cn);
    p->cn = NULL;
    errno = e;
    return -1;
  }
  return 0;
}

/* After the workers have stopped: stop the connector and close every
 * connection.
 */
static void
pool_stop (struct rc_cache *c)
{
  struct rc_pool *p = &c->pool;
  struct rc_connector *cn = p->cn;
  unsigned i;

  if (cn) {
    uint64_t deadline = mono_ns () + RC_CONNECT_JOIN_NS;
    bool exited, abandon = false;

    ACQUIRE_LOCK (&c->qlock);
    pthread_cond_signal (&p->ccond);
    RELEASE_LOCK (&c->qlock);
    for (;;) {
      struct timespec ts = { .tv_nsec = 10000000 };

      ACQUIRE_LOCK (&connector_lock);
      exited = cn->exited;
      /* Abandon it only inside worker_open: elsewhere it may be using
       * the cache, and will exit soon.
       */
      if (!exited && cn->in_open && mono_ns () >= deadline)
        abandon = cn->abandoned = true;
      RELEASE_LOCK (&connector_lock);
      if (exited || abandon)
        break;
      nanosleep (&ts, NULL);
    }
    if (abandon) {
      pthread_detach (cn->thread);
      pool_log (c, false, "ra-cache: a background backend connection was "
                "still opening at shutdown: left behind");
    }
    else {
      pthread_join (cn->thread, NULL);
      free (cn);
    }
    p->cn = NULL;
  }

  ACQUIRE_LOCK (&c->qlock);
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
  free (p->conn);
  p->conn = NULL;
  p->n = 0;
}

int
rc_workers_start (struct rc_cache *c, unsigned n)
{
  unsigned i;
  int e;

  for (i = 0; i < RC_PROMOTE_PENDING; i++)
    c->promote_pending[i] = RA_NO_MARKER;
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
  if (pool_start (c, n) == -1) {
    e = errno;
    rc_workers_stop (c);
    errno = e;
    return -1;
  }
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
  pool_stop (c);
}
