/* ra-cache: internals shared by the core's files (src/cache.c: the
 * client-facing glue; src/jobq.c: the job queue; src/connpool.c: the
 * background connections; src/backend-read.c: backend reads and their
 * accounting; src/workers.c: the workers).
 *
 * Lock order (a lock may be taken while holding those before it):
 *   0. the replay's lock (src/replay.c: taken by a client read holding
 *      nothing else; inside it 3 and 4)
 *   1. a stream's lock (struct rc_stream)
 *   2. the near rule's lock (c->env.near_lock: around the engine's
 *      decision, src/trigger.c)
 *   3. the page cache's shard locks (src/pagecache.c)
 *   4. the job queue's lock (c->q.lock)
 *   5. the connection pool's lock (c->pool.lock)
 * A stream's lock is released before the batches of a window are
 * issued; the pool calls its hooks, which take the queue's lock, with
 * its own released.  The leaves (never held while taking another): a
 * wait group's lock, size_lock, bounce_lock, model_lock, cong_lock, and
 * the page cache's own.
 */
#ifndef RACACHE_CACHE_INTERNAL_H
#define RACACHE_CACHE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "connpool.h"
#include "jobq.h"
#include "racache/cache.h"
#include "racache/congestion.h"
#include "racache/readahead.h"
#include "racache/readpath.h"
#include "racache/trigger.h"

struct rc_cache {
  struct rc_config cfg;
  struct rc_backend be;
  struct rc_stats stats;
  struct rc_pagecache *pc;
  struct ra_params params;
  pthread_mutex_t size_lock;
  bool size_set;
  bool limits_set;              /* rc_cache_set_backend_limits ran */

  /* Free bounce buffers (src/backend-read.c), each io_max pages, cut
   * from the blocks on bounce_blocks (huge pages, rc_huge_alloc).
   */
  pthread_mutex_t bounce_lock;
  char *bounce_free;
  struct rc_bounce_block *bounce_blocks;
  _Atomic uint64_t bounce_bytes;   /* allocated, free or in use */

  /* Adaptive mode: the backend model, fed by every backend read of
   * pages (src/backend-read.c), read at every trigger.
   */
  pthread_mutex_t model_lock;
  struct ra_model model;

  /* The congestion estimator (src/congestion.c), fed by every backend
   * read under cong_lock, asked without it (rc_congestion).
   */
  pthread_mutex_t cong_lock;
  struct rc_cong cong;

  /* Backend reads running now (by clients or workers; src/backend-read.c).
   * With the jobs queued (q.queued), what the congestion rule compares
   * with cfg.congestion_threshold when a window is submitted; with
   * ra-congestion=wait a worker starts an async job only while fewer
   * than the threshold are running.
   */
  _Atomic unsigned executing;
  _Atomic uint64_t executing_bytes; /* their bytes */
  _Atomic uint64_t delivered_bytes; /* bytes of all reads completed */
  _Atomic uint64_t client_bytes_reading; /* bytes of every client read
                                            in progress (rc_read) */
  /* What a trigger does (src/trigger.c) over this cache and backend. */
  struct rc_trigger_env env;

  /* The background workers and their job queue (src/jobq.c), and
   * their backend connections (src/connpool.c).
   */
  struct rc_jobq q;
  unsigned max_workers;         /* ra-max-background */
  unsigned nworkers;            /* started (under q.lock): rc_workers_grow */
  unsigned idle_workers;        /* waiting for work (under q.lock) */
  bool grow_failed;             /* a worker could not be started */
  pthread_t *workers;           /* max_workers slots */
  struct rc_pool pool;

  /* ra-cache-learn: the learned file and its replay (src/replay.c),
   * made once by rc_cache_learn_start, NULL without learning.
   */
  struct rc_replay *_Atomic replay;
};

struct rc_stream {
  pthread_mutex_t lock;         /* one connection may read from many threads */
  struct ra_state ra;
  unsigned owner;               /* owner of its read-ahead pages (1..) */
  struct rc_behind behind;      /* drop-behind (src/readpath.c) */
  uint64_t bytes_reading;       /* bytes of its client reads in progress */
  unsigned nreading;            /* its client reads in progress */
  /* The depth lately: written under lock, read by a trigger without it. */
  _Atomic uint64_t depth_bytes; /* the most bytes in progress lately
                                   (decays by 1/16 a read) */
  _Atomic unsigned depth_reads16; /* ... reads, times 16 */
  /* The most it kept in flight lately, for the WINDOW congestion
   * question (rc_cong_lately): its peak (under lock), and what it kept
   * lately as of its latest read's start (read by a trigger without
   * the lock).
   */
  struct rc_cong_peak peak;
  _Atomic uint64_t lately_bytes;
  _Atomic unsigned lately_reads;
};

/* src/workers.c */
/* Up to n workers: one starts now, the others as jobs wait for them
 * (rc_workers_grow).
 */
int rc_workers_start (struct rc_cache *c, unsigned n);
/* A job was queued: start one more worker if more jobs are queued than
 * workers wait for work, and fewer than n were started.  Called with
 * c->q.lock held.
 */
void rc_workers_grow (struct rc_cache *c);
/* Stop the workers (queued jobs given up) and close the connections. */
void rc_workers_stop (struct rc_cache *c);
/* After rc_workers_stop: wait for the connector (an open under way
 * returns first) and free the connections.
 */
void rc_workers_join (struct rc_cache *c);
/* False while no background connection is open (the workers then take
 * no jobs): the caller drops async parts.
 */
bool rc_workers_ready (struct rc_cache *c);
/* THE congestion decision (include/racache/congestion.h) for the
 * cache's reads now: the caller's question (asked: EARLY's new_reads,
 * WINDOW's client_reads, client_bytes and covered), the cache's load.
 */
enum rc_cong_answer rc_congestion (struct rc_cache *c,
                                   enum rc_cong_question q,
                                   const struct rc_cong_load *asked);

/* src/backend-read.c: every backend read, counted (see there). */
int rc_backend_read_bytes (struct rc_cache *c, void *ctx, void *buf,
                           uint32_t count, uint64_t offset, int *err);
/* Read the in-flight pages [start, start + count) into the cache (sync:
 * a client waits for them).
 */
int rc_backend_read_pages (struct rc_cache *c, void *ctx, ra_pgoff start,
                           ra_pgoff count, bool sync, int *err);
/* The same, read straight into dst (a client's buffer, count pages
 * long but for the end of the export): the pages count as read once.
 */
int rc_backend_read_pages_to (struct rc_cache *c, void *ctx, ra_pgoff start,
                              ra_pgoff count, char *dst, int *err);
/* Bytes around the cache into a client's buffer: for a page the cache
 * cannot hold (direct), or a covered client's whole request (around).
 */
int rc_backend_read_direct (struct rc_cache *c, void *ctx, void *buf,
                            uint32_t count, uint64_t offset, int *err);
int rc_backend_read_around (struct rc_cache *c, void *ctx, void *buf,
                            uint32_t count, uint64_t offset, int *err);
void rc_bounce_free_all (struct rc_cache *c);

/* src/replay.c: a client read of pages [first, last) is about to be
 * served: record it, and read the replay's next window if it reached
 * the replay marker.
 */
void rc_replay_read (struct rc_cache *c, ra_pgoff first, ra_pgoff last);
/* Free the learning state (the workers have stopped). */
void rc_replay_free (struct rc_cache *c);

#endif
