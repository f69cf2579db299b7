/* ra-cache: internals shared by src/cache.c and src/backend-io.c. */
#ifndef RACACHE_CACHE_INTERNAL_H
#define RACACHE_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "racache/cache.h"
#include "racache/congestion.h"
#include "racache/readahead.h"
#include "racache/readpath.h"

/* Completion of a group of sync reads a client waits for. */
struct rc_wait {
  pthread_mutex_t lock;
  pthread_cond_t done;
  unsigned pending;
  ra_pgoff need_start, need_end; /* the pages whose errors count */
  int err;                      /* first error of a read of them, or 0 */
};

/* A client about to wait for page index, in flight, whose async job
 * was not queued yet (rc_promote): the job is queued among the sync
 * jobs.  Registered for the wait only (rc_promote_end), on the waiting
 * client's stack, so that no waiter is ever forgotten and no stale
 * entry promotes unrelated speculation.
 */
struct rc_promotion {
  ra_pgoff index;
  bool registered;
  struct rc_promotion *next;
};

/* The yield bound (adaptive mode): for RC_YIELD_NS after a client of
 * another stream last waited for a read at random (a branch G window),
 * a stream's windows are at most self_max / RC_YIELD_DIV pages, in
 * backend reads of at most io_max / RC_YIELD_DIV.
 */
#define RC_YIELD_NS (UINT64_C (1000000000))
#define RC_YIELD_DIV 4

struct rc_job {
  struct rc_job *next;
  ra_pgoff start, count;
  bool async;
  bool delayed;                 /* held back by the threshold (counted once) */
  bool held;                    /* held back by the estimate (counted once) */
  struct rc_wait *wait;         /* NULL for async parts */
};

/* ---- background backend connections (src/backend-io.c) ---- */
enum rc_conn_state {
  RC_CONN_CLOSED,               /* may be opened */
  RC_CONN_OPENING,              /* the connector is opening it */
  RC_CONN_OPEN,                 /* workers read through it */
  RC_CONN_BROKEN,               /* a read found it dead: no new users */
  RC_CONN_CLOSING,              /* being closed */
};

struct rc_conn {
  void *ctx;
  enum rc_conn_state state;
  unsigned users;               /* workers reading through it now */
};

/* Guarded by the cache's qlock, except the _now copies. */
struct rc_pool {
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
  unsigned clients;             /* rc_cache_connect - rc_cache_disconnect */
  unsigned broken;              /* lost, not replaced yet */
  unsigned failures;            /* failed opens in a row (backoff) */
  uint64_t next_try_ns;
  bool in_open;                 /* the connector is in worker_open */
  _Atomic bool opening;         /* the same, for rc_workers_ready ... */
  _Atomic uint64_t open_started_ns; /* ... since then */
  _Atomic bool stall_logged;
  bool outage_logged;
  pthread_cond_t ccond;         /* wakes the connector */
  pthread_cond_t ready;         /* an open ended, the limit fell, the
                                   connector exited */
  pthread_t connector;
  bool has_connector, connector_exited;
};

struct rc_cache {
  struct rc_config cfg;
  struct rc_backend be;
  struct rc_stats stats;
  struct rc_pagecache *pc;
  struct ra_params params;
  pthread_mutex_t size_lock;
  bool size_set;
  bool limits_set;              /* rc_cache_set_backend_limits ran */

  /* Free bounce buffers (src/backend-io.c), each io_max pages. */
  pthread_mutex_t bounce_lock;
  char *bounce_free;

  /* Adaptive mode: the backend model, fed by every backend read of
   * pages (src/backend-io.c), read at every trigger.
   */
  pthread_mutex_t model_lock;
  struct ra_model model;

  /* The congestion estimator (src/congestion.c), fed by every backend
   * read under cong_lock, asked without it (rc_congestion).
   */
  pthread_mutex_t cong_lock;
  struct rc_cong cong;

  /* Backend reads running now (by clients or workers), and jobs queued
   * for the workers.  With ra-congestion=skip the congestion rule
   * compares their sum with cfg.congestion_threshold when a window is
   * submitted; with ra-congestion=wait a worker starts an async job only
   * while fewer than the threshold are running.
   */
  _Atomic unsigned executing;
  _Atomic uint64_t executing_bytes; /* their bytes (reads of pages) */
  _Atomic unsigned queued;
  _Atomic unsigned queued_async;
  /* When a client last waited for a read at random, and its stream's
   * owner (src/cache.c, note_random_wait): the yield bound.
   */
  _Atomic uint64_t random_wait_ns;
  _Atomic unsigned random_wait_owner;

  /* The background workers and their queue: sync jobs (a client waits)
   * always run before async jobs (speculation).
   */
  pthread_mutex_t qlock;
  pthread_cond_t qcond;
  struct rc_job *sync_head, **sync_tail;
  struct rc_job *async_head, **async_tail;
  /* Clients waiting for pages whose async job was not queued yet (the
   * window's pages are in flight from submit on, its async jobs queued
   * once its sync part is read): such a job is queued among the sync
   * jobs, so that no waiting client depends on speculation being let
   * through.
   */
  struct rc_promotion *promotions;
  bool stopping;
  unsigned nworkers;
  pthread_t *workers;
  struct rc_pool pool;
};

struct rc_stream {
  pthread_mutex_t lock;         /* one connection may read from many threads */
  struct ra_state ra;
  unsigned owner;               /* owner of its read-ahead pages (1..) */
  struct rc_behind behind;      /* drop-behind (src/readpath.c) */
  uint64_t bytes_reading;       /* bytes of its client reads in progress */
  uint64_t depth_bytes;         /* ... at most lately (decays by 1/16 a read) */
  unsigned nreading;            /* its client reads in progress */
  unsigned depth_reads16;       /* ... at most lately, times 16 */
};

/* backend-io.c */
int rc_workers_start (struct rc_cache *c, unsigned n);
void rc_workers_stop (struct rc_cache *c);
/* After rc_workers_stop: wait for the connector (an open under way
 * returns first) and free the connections.
 */
void rc_workers_join (struct rc_cache *c);
void rc_queue_job (struct rc_cache *c, ra_pgoff start, ra_pgoff count,
                   bool async, struct rc_wait *wait);
int rc_backend_read_pages (struct rc_cache *c, void *ctx, ra_pgoff start,
                           ra_pgoff count, int *err);
/* The same, read straight into dst (a client's buffer, count pages
 * long but for the end of the export): the pages count as read once.
 */
int rc_backend_read_pages_to (struct rc_cache *c, void *ctx, ra_pgoff start,
                              ra_pgoff count, char *dst, int *err);
void rc_bounce_free_all (struct rc_cache *c);
int rc_backend_read_bytes (struct rc_cache *c, void *ctx, void *buf,
                           uint32_t count, uint64_t offset, int *err);
int rc_backend_read_direct (struct rc_cache *c, void *ctx, void *buf,
                            uint32_t count, uint64_t offset, int *err);
int rc_backend_read_around (struct rc_cache *c, void *ctx, void *buf,
                            uint32_t count, uint64_t offset, int *err);
/* A client is about to wait for page index, in flight: promote its
 * job, or register pr (alive until rc_promote_end) for when it is
 * queued.
 */
void rc_promote (struct rc_cache *c, ra_pgoff index, struct rc_promotion *pr);
/* The wait is over: unregister pr if rc_promote registered it. */
void rc_promote_end (struct rc_cache *c, struct rc_promotion *pr);
/* A group whose first error counts only when a failed read overlaps
 * pages [need_start, need_end).
 */
void rc_wait_init (struct rc_wait *w, ra_pgoff need_start, ra_pgoff need_end);
void rc_wait_destroy (struct rc_wait *w);
int rc_wait_for (struct rc_cache *c, void *ctx, struct rc_wait *w);
/* False while no background connection is open (the workers then take
 * no jobs): the caller drops async parts.
 */
bool rc_workers_ready (struct rc_cache *c);
/* THE congestion decision (include/racache/congestion.h) for the
 * cache's reads now (EARLY: n more reads; WINDOW: the triggering client
 * keeps n reads of client_bytes in flight).
 */
enum rc_cong_answer rc_congestion (struct rc_cache *c,
                                   enum rc_cong_question q,
                                   unsigned n, uint64_t client_bytes);

#endif
