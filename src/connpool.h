/* ra-cache: the background workers' backend connections (src/connpool.c).
 *
 * A pool of at most n contexts from struct rc_backend's worker_open,
 * opened one at a time by a connector thread of its own while a client is
 * connected, lent to the workers (rc_pool_take / rc_pool_put), reopened
 * with backoff when one breaks, and fewer while the server is seen to
 * limit connections.  The pool has its own lock, taken after the job
 * queue's (a worker takes a connection with the queue locked) and never
 * held while the pool calls its hooks or the backend.
 */
#ifndef RACACHE_CONNPOOL_H
#define RACACHE_CONNPOOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "racache/cache.h"
#include "racache/stats.h"

enum rc_conn_state {
  RC_CONN_CLOSED,               /* may be opened */
  RC_CONN_OPENING,              /* the connector is opening it */
  RC_CONN_OPEN,                 /* workers read through it */
  RC_CONN_BROKEN,               /* dead or given up: no new users; the
                                   connector closes it once unused */
  RC_CONN_CLOSING,              /* being closed */
};

struct rc_conn {
  void *ctx;
  enum rc_conn_state state;
  unsigned users;               /* workers reading through it now */
};

/* What the pool tells its owner, always without its lock held. */
struct rc_pool_hooks {
  void *opaque;
  /* A connection opened, or became free for another worker: wake the
   * workers.
   */
  void (*usable) (void *opaque);
  /* No connection is open any more: drop the queued jobs that no client
   * reads itself.
   */
  void (*none_open) (void *opaque);
};

/* Guarded by lock, except the _now copies. */
struct rc_pool {
  pthread_mutex_t lock;
  struct rc_backend be;
  struct rc_stats *st;
  struct rc_pool_hooks hooks;
  bool stopping;
  struct rc_conn *conn;
  unsigned n;                   /* min (ra-backend-connections, workers) */
  unsigned limit;               /* most kept open: n, less while the
                                   server is seen to limit connections */
  uint64_t limit_retry_ns;      /* when the limit rises again (0: never) */
  uint64_t limit_backoff_ns;    /* the wait before it rises, doubling */
  uint64_t limit_retry_min_ns;  /* ... at first */
  uint64_t open_ns;             /* how long an open takes, lately */
  uint64_t yielded_ns;          /* when one was closed for a client's open */
  struct rc_client_open *client_opens; /* clients' opens under way */
  unsigned nopen;               /* RC_CONN_OPEN now */
  _Atomic unsigned nopen_now;   /* the same, read without the lock */
  _Atomic unsigned limit_now;   /* limit, read without the lock */
  uint64_t last_leave_ns;       /* when a client last disconnected */
  unsigned rr;                  /* round robin over open connections */
  unsigned clients;             /* rc_pool_connect - rc_pool_disconnect */
  unsigned broken;              /* lost, not replaced yet */
  unsigned failures;            /* failed opens in a row (backoff) */
  uint64_t next_try_ns;
  bool in_open;                 /* the connector is in worker_open */
  _Atomic bool opening;         /* the same, for rc_pool_ready ... */
  _Atomic uint64_t open_started_ns; /* ... since then */
  _Atomic bool stall_logged;
  bool outage_logged;
  pthread_cond_t ccond;         /* wakes the connector */
  pthread_cond_t ready;         /* an open ended, the limit fell, the
                                   connector exited */
  pthread_t connector;
  bool has_connector, connector_exited;
};

/* Set up the pool's lock and conditions (always, before anything else). */
void rc_pool_init (struct rc_pool *p);
/* n connections over be (0: none), counting in st.  Returns 0, or -1
 * with errno.
 */
int rc_pool_start (struct rc_pool *p, const struct rc_backend *be,
                   unsigned n, struct rc_stats *st,
                   const struct rc_pool_hooks *hooks);
/* Close every connection (no worker uses one any more); the connector
 * leaves when the open it may be in returns.
 */
void rc_pool_stop (struct rc_pool *p);
/* Wait for the connector, however long the open it is in takes, and
 * free everything.
 */
void rc_pool_join (struct rc_pool *p);

/* An open connection for a worker (its users counted), or NULL. */
struct rc_conn *rc_pool_take (struct rc_pool *p);
/* conn was taken but not used (no job): give it back.  May be called
 * with the job queue's lock held.
 */
void rc_pool_untake (struct rc_pool *p, struct rc_conn *conn);
/* The worker is done with conn; dead: its read failed as a dead
 * connection (errno err).  Returns true if no connection is open any
 * more (the caller drops the orphaned jobs).
 */
bool rc_pool_put (struct rc_pool *p, struct rc_conn *conn, bool dead,
                  int err);
/* Whether an errno of a read means its connection is dead. */
bool rc_pool_dead_errno (int err);
/* A connection is open (logs once when the first open stalls). */
bool rc_pool_ready (struct rc_pool *p);

/* The cache's public calls (include/racache/cache.h). */
void rc_pool_connect (struct rc_pool *p);
void rc_pool_disconnect (struct rc_pool *p);
void rc_pool_open_begin (struct rc_pool *p, struct rc_client_open *o);
void rc_pool_open_end (struct rc_pool *p, struct rc_client_open *o, bool ok);

#endif /* RACACHE_CONNPOOL_H */
