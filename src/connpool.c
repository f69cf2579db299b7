/* ra-cache: the background workers' backend connections
 * (src/connpool.h).
 *
 * The workers share pool.n = min (ra-backend-connections, workers)
 * backend connections (contexts from worker_open; by default 1, or 4
 * when a connection carries one call at a time: rc_backend_connections
 * in racache/config.h).  One connector thread opens them, one at a
 * time, while a client is connected, from the first rc_pool_connect on
 * (so that a client connected to the backend first), and reopens a
 * broken one with backoff (100 ms doubling to 5 s).  A worker takes a
 * job only while a connection is open, and reads it through one of them
 * (round robin); no worker ever waits for an open.  While none is open,
 * async parts are dropped (src/cache.c treats it as congestion) and a
 * client reads its sync batches itself.  Connections stay
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
 *  - a client's own open (rc_pool_open_begin / _end) not answered
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
 * connection broken; the connector closes it once no worker uses it
 * (every close but shutdown's is the connector's: a worker never waits
 * for one) and reopens it.  When the last open connection breaks, the
 * owner drops the queued jobs that no client waits to read itself.
 *
 * Shutdown: the workers are joined (they never block in an open), the
 * open connections closed (rc_pool_stop), and the connector joined
 * (rc_pool_join, from rc_cache_free), however long the open it is in
 * takes: what it returns to (the plugin's code, nbdkit's context) is
 * unloaded and freed after the filter's cleanup, so it must have
 * returned by then.  nbdkit waits for its own clients' calls in the same
 * way.  With no client left, a server's backlog is empty and such an
 * open is answered at once.
 */

#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connpool.h"
#include "racache/config.h"
#include "racache/util.h"

#define RC_CONNECT_STALL_NS   (UINT64_C (3) * 1000000000)
#define RC_STALL_MARGIN_NS    (UINT64_C (250) * 1000000)
#define RC_BACKOFF_MIN_NS     (UINT64_C (100) * 1000000)
#define RC_BACKOFF_MAX_NS     (UINT64_C (5) * 1000000000)
#define RC_LIMIT_RETRY_MIN_NS (UINT64_C (30) * 1000000000)
#define RC_LIMIT_RETRY_MAX_NS (UINT64_C (1800) * 1000000000)
#define RC_SHUTDOWN_LOG_NS    (UINT64_C (1) * 1000000000)
/* How long a connecting client waits for the background connections,
 * so that its first windows are read ahead like the later ones.
 */
#define RC_CONNECT_WAIT_NS    (UINT64_C (200) * 1000000)

static void
pool_log (struct rc_pool *p, bool error, const char *fmt, ...)
  __attribute__ ((format (printf, 3, 4)));

static void
pool_log (struct rc_pool *p, bool error, const char *fmt, ...)
{
  char msg[320];
  va_list ap;

  if (!p->be.log)
    return;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  p->be.log (p->be.opaque, error, msg);
}

/* The errors of a connection that is gone, as opposed to an error of
 * one read.  The nbd plugin (libnbd) fails every request on a handle
 * whose server went away with EINVAL ("invalid state: CLOSED"); a
 * worker's reads are always within the export, so EINVAL means that.
 */
bool
rc_pool_dead_errno (int err)
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

/* How long an open may take before it counts as unanswered. */
static uint64_t
stall_ns (const struct rc_pool *p)
{
  return 2 * p->open_ns + RC_STALL_MARGIN_NS;
}

/* An open (a client's or the pool's) took dt ns: open_ns follows the
 * longest lately (at once upwards, by an eighth of the gap downwards).
 */
static void
note_open_ns (struct rc_pool *p, uint64_t dt)
{
  if (dt >= p->open_ns)
    p->open_ns = dt;
  else
    p->open_ns -= (p->open_ns - dt) / 8;
}

struct rc_conn *
rc_pool_take (struct rc_pool *p)
{
  struct rc_conn *conn = NULL;
  unsigned i;

  ACQUIRE_LOCK (&p->lock);
  for (i = 0; i < p->n && p->nopen > 0; i++) {
    struct rc_conn *c = &p->conn[(p->rr + i) % p->n];

    if (c->state == RC_CONN_OPEN &&
        !(p->be.one_call_per_ctx && c->users > 0)) {
      p->rr = (p->rr + i + 1) % p->n;
      c->users++;
      conn = c;
      break;
    }
  }
  RELEASE_LOCK (&p->lock);
  return conn;
}

void
rc_pool_untake (struct rc_pool *p, struct rc_conn *conn)
{
  ACQUIRE_LOCK (&p->lock);
  if (--conn->users == 0 && conn->state == RC_CONN_BROKEN)
    pthread_cond_signal (&p->ccond);
  RELEASE_LOCK (&p->lock);
}

/* conn leaves the open connections (broken, or given up): the connector
 * closes it once unused.  Returns true if it was the last one open.
 * Called with p->lock held.
 */
static bool
conn_leave (struct rc_pool *p, struct rc_conn *conn)
{
  conn->state = RC_CONN_BROKEN;
  set_nopen (p, p->nopen - 1);
  pthread_cond_signal (&p->ccond);
  return p->nopen == 0;
}

bool
rc_pool_put (struct rc_pool *p, struct rc_conn *conn, bool dead, int err)
{
  bool none = false, usable;

  ACQUIRE_LOCK (&p->lock);
  conn->users--;
  if (dead && conn->state == RC_CONN_OPEN) {
    none = conn_leave (p, conn);
    p->broken++;
    STAT_ADD (p->st, backend_connections_lost, 1);
    if (!p->outage_logged) {
      p->outage_logged = true;
      pool_log (p, true, "ra-cache: a background backend connection "
                "failed (%s): reopening it with backoff; clients are "
                "served meanwhile", strerror (err));
    }
  }
  if (conn->state == RC_CONN_BROKEN && conn->users == 0)
    pthread_cond_signal (&p->ccond);
  usable = p->be.one_call_per_ctx && conn->state == RC_CONN_OPEN;
  RELEASE_LOCK (&p->lock);
  if (usable)
    p->hooks.usable (p->hooks.opaque);
  return none;
}

/* Close conn (no users).  Called with p->lock held; drops it meanwhile. */
static void
conn_close (struct rc_pool *p, struct rc_conn *conn)
{
  void *ctx = conn->ctx;

  conn->state = RC_CONN_CLOSING;
  conn->ctx = NULL;
  RELEASE_LOCK (&p->lock);
  if (p->be.worker_close)
    p->be.worker_close (p->be.opaque, ctx);
  ACQUIRE_LOCK (&p->lock);
  conn->state = RC_CONN_CLOSED;
  pthread_cond_signal (&p->ccond);
}

/* Close a broken connection no worker uses any more.  Returns true if
 * it closed one (and dropped p->lock meanwhile).
 */
static bool
close_unused (struct rc_pool *p)
{
  unsigned i;

  for (i = 0; i < p->n; i++)
    if (p->conn[i].state == RC_CONN_BROKEN && p->conn[i].users == 0) {
      conn_close (p, &p->conn[i]);
      return true;
    }
  return false;
}

/* The server limits connections (see above): keep at most keep, and
 * try one more after the backoff.  Called with p->lock held.
 */
static void
lower_limit (struct rc_pool *p, unsigned keep, uint64_t now,
             const char *why, double secs)
{
  p->limit_backoff_ns = p->limit_backoff_ns == 0 ? p->limit_retry_min_ns
    : p->limit_backoff_ns * 2 > RC_LIMIT_RETRY_MAX_NS ? RC_LIMIT_RETRY_MAX_NS
    : p->limit_backoff_ns * 2;
  p->limit_retry_ns = now + p->limit_backoff_ns;
  set_limit (p, keep);
  STAT_ADD (p->st, backend_connections_late, 1);
  pool_log (p, true, "ra-cache: %s after %.1f s: the server limits "
            "connections; keeping at most %u of %u background "
            "connections, trying one more in %.0f s", why, secs, keep,
            p->n, p->limit_backoff_ns / 1e9);
  pthread_cond_broadcast (&p->ready);
}

/* The backoff after a lowered limit has passed: allow one more.  Called
 * with p->lock held.
 */
static void
raise_limit (struct rc_pool *p, uint64_t now)
{
  set_limit (p, p->limit + 1);
  p->limit_retry_ns = p->limit < p->n ? now + p->limit_backoff_ns : 0;
  pool_log (p, false, "ra-cache: trying %u background backend "
            "connection(s) again", p->limit);
}

/* The oldest client open under way, or NULL.  Called with p->lock held. */
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
 * background connections are open: give one up, the slot it waits for
 * may be that one.  Returns true if it gave one up (the caller looks
 * again; *none: it was the last open one), else lowers *wake to when to
 * look again.  Called with p->lock held.
 */
static bool
yield_to_client_open (struct rc_pool *p, uint64_t now, uint64_t *wake,
                      bool *none)
{
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
  /* An idle one if there is one; close_unused closes it. */
  for (i = 0; i < p->n; i++)
    if (p->conn[i].state == RC_CONN_OPEN &&
        (!conn || p->conn[i].users < conn->users))
      conn = &p->conn[i];
  *none = conn_leave (p, conn);
  p->yielded_ns = now;
  lower_limit (p, p->nopen, now, "a client's backend open was not "
               "answered while background connections were open",
               (now - o->t0) / 1e9);
  return true;
}

/* Waits until the connector has a closed slot to open: while a client
 * is connected, the pool is below its limit and the backoff after a
 * failure is over; meanwhile it closes broken connections, yields to
 * clients' opens and raises a lowered limit when its time comes.
 * Returns NULL if it waited or changed something (the caller looks
 * again; *none: the last open connection was given up), else the slot,
 * with *busy the slots not closed.  Called with p->lock held; drops it
 * while waiting.
 */
static struct rc_conn *
wait_for_slot (struct rc_pool *p, unsigned *busy, bool *none)
{
  struct rc_conn *slot = NULL;
  uint64_t now = rc_now_ns (), wake = UINT64_MAX;
  unsigned i;

  if (close_unused (p) || yield_to_client_open (p, now, &wake, none))
    return NULL;
  if (p->limit < p->n && p->limit_retry_ns != 0) {
    if (now >= p->limit_retry_ns)
      raise_limit (p, now);
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
      (*busy)++;              /* open, or broken and not closed yet */
  }
  if (p->clients > 0 && slot && *busy < p->limit) {
    if (now >= p->next_try_ns)
      return slot;
    if (p->next_try_ns < wake)
      wake = p->next_try_ns;
  }
  rc_cond_wait_until (&p->ccond, &p->lock, wake);
  return NULL;
}

/* worker_open failed: slot is closed again, and the next try waits for
 * a backoff that doubles with each failure in a row.  Called with
 * p->lock held.
 */
static void
back_off (struct rc_pool *p, struct rc_conn *slot)
{
  uint64_t backoff = RC_BACKOFF_MIN_NS << (p->failures < 6 ? p->failures : 6);

  slot->state = RC_CONN_CLOSED;
  p->failures++;
  if (backoff > RC_BACKOFF_MAX_NS)
    backoff = RC_BACKOFF_MAX_NS;
  p->next_try_ns = rc_now_ns () + backoff;
  STAT_ADD (p->st, backend_connection_failures, 1);
  if (!p->outage_logged) {
    p->outage_logged = true;
    pool_log (p, true, "ra-cache: cannot open a background backend "
              "connection: retrying with backoff; clients are served "
              "meanwhile");
  }
  pthread_cond_broadcast (&p->ready);
}

/* Was an open that ran from t0 to t1 answered only because a client
 * left (it waited in the server's backlog for that client's slot)?
 * stall: stall_ns when it started.  Called with p->lock held.
 */
static bool
answered_when_client_left (const struct rc_pool *p, uint64_t t0, uint64_t t1,
                           uint64_t stall)
{
  return t1 - t0 > stall && p->last_leave_ns > t0 &&
    t1 - p->last_leave_ns <= p->open_ns + RC_STALL_MARGIN_NS;
}

/* slot holds a new open connection: the workers may use it.  Called
 * with p->lock held.
 */
static void
conn_opened (struct rc_pool *p, struct rc_conn *slot)
{
  slot->state = RC_CONN_OPEN;
  set_nopen (p, p->nopen + 1);
  p->failures = 0;
  STAT_ADD (p->st, backend_connection_opens, 1);
  if (p->broken > 0) {
    p->broken--;
    STAT_ADD (p->st, backend_reconnects, 1);
    if (p->outage_logged)
      pool_log (p, false, "ra-cache: background backend connection "
                "reopened");
  }
  p->outage_logged = false;
  pthread_cond_broadcast (&p->ready);
}

/* Open slot, without p->lock, and keep it (true), or close it again.
 * Called with p->lock held.
 */
static bool
open_slot (struct rc_pool *p, struct rc_conn *slot, unsigned busy)
{
  uint64_t t0 = rc_now_ns (), t1, stall = stall_ns (p);
  void *ctx;

  slot->state = RC_CONN_OPENING;
  p->in_open = true;
  atomic_store (&p->open_started_ns, t0);
  atomic_store (&p->opening, true);
  RELEASE_LOCK (&p->lock);
  ctx = p->be.worker_open (p->be.opaque);
  ACQUIRE_LOCK (&p->lock);
  t1 = rc_now_ns ();
  p->in_open = false;
  atomic_store (&p->opening, false);
  if (!ctx) {
    back_off (p, slot);
    return false;
  }
  slot->ctx = ctx;
  if (p->stopping) {
    conn_close (p, slot);
    return false;
  }
  if (answered_when_client_left (p, t0, t1, stall)) {
    /* Give the slot back at once to whoever waits behind it. */
    lower_limit (p, busy, t1, "a background backend connection was "
                 "answered only when a client left", (t1 - t0) / 1e9);
    conn_close (p, slot);
    return false;
  }
  note_open_ns (p, t1 - t0);
  conn_opened (p, slot);
  return true;
}

/* The connector thread: opens the pool's connections, one at a time,
 * and closes the broken ones.
 */
static void *
connector_main (void *arg)
{
  struct rc_pool *p = arg;

  ACQUIRE_LOCK (&p->lock);
  while (!p->stopping) {
    struct rc_conn *slot;
    unsigned busy;
    bool none = false, opened = false;

    slot = wait_for_slot (p, &busy, &none);
    if (slot)
      opened = open_slot (p, slot, busy);
    if (none || opened) {
      RELEASE_LOCK (&p->lock);
      if (none)
        p->hooks.none_open (p->hooks.opaque);
      if (opened)
        p->hooks.usable (p->hooks.opaque);
      ACQUIRE_LOCK (&p->lock);
    }
  }
  p->connector_exited = true;
  pthread_cond_broadcast (&p->ready);
  RELEASE_LOCK (&p->lock);
  return NULL;
}

bool
rc_pool_ready (struct rc_pool *p)
{
  uint64_t t0;

  if (atomic_load (&p->nopen_now) > 0)
    return true;
  /* One log line when the first open has waited too long (a server that
   * accepts one connection holds it in its backlog).
   */
  if (atomic_load (&p->opening) && !atomic_load (&p->stall_logged) &&
      (t0 = atomic_load (&p->open_started_ns)) != 0 &&
      rc_now_ns () - t0 >= RC_CONNECT_STALL_NS &&
      !atomic_exchange (&p->stall_logged, true))
    pool_log (p, true, "ra-cache: the backend has not accepted a "
              "background connection in %.0f s (does it allow only one "
              "connection?): readahead goes on without background reads",
              (rc_now_ns () - t0) / 1e9);
  return false;
}

void
rc_pool_connect (struct rc_pool *p)
{
  uint64_t deadline = rc_now_ns () + RC_CONNECT_WAIT_NS;

  ACQUIRE_LOCK (&p->lock);
  if (p->clients++ == 0)
    pthread_cond_signal (&p->ccond);
  /* Not while opens fail (backoff), nor beyond the limit. */
  while (p->has_connector && p->nopen < p->limit && p->failures == 0 &&
         !p->stopping && rc_now_ns () < deadline)
    rc_cond_wait_until (&p->ready, &p->lock, deadline);
  RELEASE_LOCK (&p->lock);
}

void
rc_pool_disconnect (struct rc_pool *p)
{
  ACQUIRE_LOCK (&p->lock);
  if (p->clients > 0)
    p->clients--;
  p->last_leave_ns = rc_now_ns ();
  RELEASE_LOCK (&p->lock);
}

void
rc_pool_open_begin (struct rc_pool *p, struct rc_client_open *o)
{
  ACQUIRE_LOCK (&p->lock);
  o->t0 = rc_now_ns ();
  o->next = p->client_opens;
  p->client_opens = o;
  pthread_cond_signal (&p->ccond);
  RELEASE_LOCK (&p->lock);
}

void
rc_pool_open_end (struct rc_pool *p, struct rc_client_open *o, bool ok)
{
  struct rc_client_open **po;

  ACQUIRE_LOCK (&p->lock);
  for (po = &p->client_opens; *po; po = &(*po)->next)
    if (*po == o) {
      *po = o->next;
      break;
    }
  if (ok)
    note_open_ns (p, rc_now_ns () - o->t0);
  RELEASE_LOCK (&p->lock);
}

void
rc_pool_init (struct rc_pool *p)
{
  memset (p, 0, sizeof *p);
  pthread_mutex_init (&p->lock, NULL);
  rc_cond_init (&p->ccond);
  rc_cond_init (&p->ready);
}

int
rc_pool_start (struct rc_pool *p, const struct rc_backend *be, unsigned n,
               struct rc_stats *st, const struct rc_pool_hooks *hooks)
{
  struct rc_conn *conn = n ? calloc (n, sizeof *conn) : NULL;
  unsigned i;
  int e = 0;

  if (n && !conn)
    return -1;
  /* The workers may look already (rc_pool_take). */
  ACQUIRE_LOCK (&p->lock);
  p->be = *be;
  p->st = st;
  p->hooks = *hooks;
  p->limit_retry_min_ns = be->limit_retry_ns ? be->limit_retry_ns
    : RC_LIMIT_RETRY_MIN_NS;
  p->conn = conn;
  p->n = n;
  set_limit (p, n);
  if (n > 0 && !be->worker_open) {
    /* No contexts to open: every connection is open (ctx NULL). */
    for (i = 0; i < n; i++)
      p->conn[i].state = RC_CONN_OPEN;
    set_nopen (p, n);
  }
  else if (n > 0) {
    e = pthread_create (&p->connector, NULL, connector_main, p);
    p->has_connector = e == 0;
  }
  RELEASE_LOCK (&p->lock);
  if (e != 0) {
    errno = e;
    return -1;
  }
  return 0;
}

void
rc_pool_stop (struct rc_pool *p)
{
  unsigned i;

  ACQUIRE_LOCK (&p->lock);
  p->stopping = true;
  pthread_cond_broadcast (&p->ccond);
  for (i = 0; i < p->n && p->conn; i++) {
    struct rc_conn *conn = &p->conn[i];

    if (conn->state == RC_CONN_OPEN || conn->state == RC_CONN_BROKEN) {
      if (p->be.worker_open)
        conn_close (p, conn);
      else
        conn->state = RC_CONN_CLOSED;
    }
  }
  set_nopen (p, 0);
  RELEASE_LOCK (&p->lock);
}

void
rc_pool_join (struct rc_pool *p)
{
  if (p->has_connector) {
    uint64_t t0 = rc_now_ns ();
    bool logged = false;

    ACQUIRE_LOCK (&p->lock);
    p->stopping = true;
    pthread_cond_broadcast (&p->ccond);
    while (!p->connector_exited) {
      if (!logged && p->in_open && rc_now_ns () - t0 >= RC_SHUTDOWN_LOG_NS) {
        logged = true;
        pool_log (p, false, "ra-cache: waiting at shutdown for a "
                  "background backend open under way to return");
      }
      rc_cond_wait_until (&p->ready, &p->lock,
                          logged ? UINT64_MAX : t0 + RC_SHUTDOWN_LOG_NS);
    }
    RELEASE_LOCK (&p->lock);
    pthread_join (p->connector, NULL);
    p->has_connector = false;
  }
  free (p->conn);
  p->conn = NULL;
  p->n = 0;
  pthread_mutex_destroy (&p->lock);
  pthread_cond_destroy (&p->ccond);
  pthread_cond_destroy (&p->ready);
}
